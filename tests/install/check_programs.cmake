# Installs the build into a fresh prefix and runs the installed programs
# from there, with no loader path pointing at a libcommgemm: they must find
# P/lib*/libcommgemm.so.0 through their own RUNPATH.
#
#   cmake -DBUILD=<build tree> -DWORK=<scratch dir> -P check_programs.cmake
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})

# LD_LIBRARY_PATH stays (OpenBLAS, NCCL may come through it) less any folder
# holding a libcommgemm, which would hide a missing RUNPATH.
set(kept "")
string(REPLACE ":" ";" dirs "$ENV{LD_LIBRARY_PATH}")
foreach(dir IN LISTS dirs)
  file(GLOB found "${dir}/libcommgemm.so*")
  if(dir AND NOT found)
    list(APPEND kept "${dir}")
  endif()
endforeach()
string(REPLACE ";" ":" kept "${kept}")
set(ENV{LD_LIBRARY_PATH} "${kept}")

# run(REGEX CMD...): CMD must exit 0 and print REGEX.
function(run regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "${regex}")
    message(FATAL_ERROR "failed (exit ${rc}, expected output matching '${regex}'): ${ARGN}\n"
                        "stdout:\n${out}\nstderr:\n${err}")
  endif()
  message(STATUS "ok: ${ARGN}")
endfunction()

run("" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
run("commgemm [0-9]+\\.[0-9]+\\.[0-9]+.*host +compiled in +available" ${prefix}/bin/commgemm-info)
run("gemm_rs +64 +32 +48 .*Out of bounds values : 0 OK"
    ${prefix}/bin/commgemm-run -n 2 ${prefix}/bin/commgemm-bench --backend host --op ag_gemm,gemm_rs
    -m 64 -n 32 -k 48 -w 1 -i 2)

