include(CMakePackageConfigHelpers)
install(TARGETS commgemm EXPORT commgemmTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/commgemm.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT commgemmTargets NAMESPACE commgemm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/commgemm)
configure_package_config_file(cmake/commgemmConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/commgemmConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/commgemm)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/commgemmConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/commgemmConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/commgemmConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/commgemm)
# Relative to the .pc file, so that `cmake --install --prefix DIR` relocates it.
file(RELATIVE_PATH COMMGEMM_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(cmake/commgemm.pc.in ${CMAKE_CURRENT_BINARY_DIR}/commgemm.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/commgemm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
