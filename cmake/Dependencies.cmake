# BLAS for the host backend: OpenBLAS (cblas) is required.
find_path(COMMGEMM_CBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include/x86_64-linux-gnu
  NO_DEFAULT_PATH)
find_path(COMMGEMM_CBLAS_INCLUDE cblas.h)
find_library(COMMGEMM_OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread)
if(NOT COMMGEMM_CBLAS_INCLUDE OR NOT COMMGEMM_OPENBLAS_LIB)
  message(FATAL_ERROR "commgemm needs OpenBLAS (cblas.h and libopenblas) for its host backend.\n"
    "On Debian/Ubuntu: apt-get install libopenblas-dev (the README's commands do this).")
endif()
add_library(commgemm_blas INTERFACE)
target_include_directories(commgemm_blas INTERFACE ${COMMGEMM_CBLAS_INCLUDE})
target_link_libraries(commgemm_blas INTERFACE ${COMMGEMM_OPENBLAS_LIB})

# CUDA + NCCL for the GPU backends.
set(COMMGEMM_HAVE_CUDA OFF)
if(NOT COMMGEMM_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_path(COMMGEMM_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(COMMGEMM_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND COMMGEMM_NCCL_INCLUDE AND COMMGEMM_NCCL_LIB)
    set(COMMGEMM_HAVE_CUDA ON)
  elseif(COMMGEMM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "COMMGEMM_CUDA=ON but nvcc (${CMAKE_CUDA_COMPILER}), the CUDA toolkit "
      "(${CUDAToolkit_FOUND}) or NCCL (${COMMGEMM_NCCL_INCLUDE}, ${COMMGEMM_NCCL_LIB}) was not found. "
      "Install the CUDA toolkit and NCCL, or configure with -DCOMMGEMM_CUDA=OFF.")
  endif()
endif()
if(COMMGEMM_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${COMMGEMM_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  add_library(commgemm_nccl INTERFACE)
  target_include_directories(commgemm_nccl INTERFACE ${COMMGEMM_NCCL_INCLUDE})
  target_link_libraries(commgemm_nccl INTERFACE ${COMMGEMM_NCCL_LIB})
  message(STATUS "commgemm: GPU backends ON (CUDA ${CUDAToolkit_VERSION}, NCCL ${COMMGEMM_NCCL_LIB}, arch ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "commgemm: GPU backends OFF (no nvcc/CUDA toolkit/NCCL found, or COMMGEMM_CUDA=OFF)")
endif()
