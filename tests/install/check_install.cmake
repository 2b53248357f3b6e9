# Installs the build into a fresh prefix, then builds and runs a consumer
# through find_package(commgemm) and through pkg-config, and examples/hello.c
# as the README builds it (pkg-config) on 2 ranks under the installed
# commgemm-run.
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
set(ENV{LD_LIBRARY_PATH} "${prefix}/${LIBDIR}:$ENV{LD_LIBRARY_PATH}")
run(${CMAKE_COMMAND} -S ${SRC}/consumer -B ${WORK}/cmake-build -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK}/cmake-build)
run(${WORK}/cmake-build/consumer)
set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
execute_process(COMMAND pkg-config --cflags --libs commgemm OUTPUT_VARIABLE flags RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config does not find commgemm in ${prefix}/${LIBDIR}/pkgconfig")
endif()
separate_arguments(flags)
run(${CC} -std=c11 ${SRC}/consumer.c ${flags} -o ${WORK}/pc-consumer)
run(${WORK}/pc-consumer)
run(${CC} -std=c11 -Wall -Wextra -Werror ${SRC}/../../examples/hello.c ${flags} -lm -o ${WORK}/hello)
run(${prefix}/bin/commgemm-run -n 2 ${WORK}/hello)
