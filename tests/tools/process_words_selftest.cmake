# Checks process_words.cmake itself: in a scratch tree (no git, so the glob
# path) it must flag each line that speaks of the process and none of the
# legitimate look-alikes. (process_words.cmake exempts this file.)
#   cmake -DCHECKER=tests/tools/process_words.cmake -DWORK=<scratch dir> -P process_words_selftest.cmake
set(bad
  "the eighth session: lead"
  "measured at 18:17 (UTC)"
  "see UTC times"
  "the fused overlap of issue 7, again"
  "a run on nvidia-h200-x2"
  "built on the device machine"
  "scripts in .devh/run1.sh"
  "docs/PERFORMANCE.md 4j has it"
  "as in section 4k"
  "shown before (4j)"
  "shown before (4k, table B)"
  "see (#12)")
# Square brackets would glue CMake list items: the Python slice is added below.
set(good
  "@pytest.fixture(scope=\"session\")"
  "date_utc = strftime(\"%Y-%m-%d %H:%M:%S UTC\")"
  "TORCHELASTIC_RUN_ID and date_utc"
  "the producer issues 64 loads per tile"
  "at src/core/comm.c:12:34: error"
  "pci 0000:01:00.0"
  "2 x NVIDIA H200, 2026-11-30"
  "a 4k page and 2d copies")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/docs")
string(REPLACE ";" "\n" bad_text "${bad}")
string(REPLACE ";" "\n" good_text "${good}")
file(WRITE "${WORK}/docs/bad.md" "${bad_text}\n")
file(WRITE "${WORK}/docs/good.md" "${good_text}\nx = rows[10:20]\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${WORK} -P ${CHECKER}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the checker passed a tree with process words:\n${all}")
endif()
list(LENGTH bad nbad)
foreach(i RANGE 1 ${nbad})
  if(NOT all MATCHES "docs/bad\\.md:${i}: ")
    message(FATAL_ERROR "line ${i} of the bad file was not flagged:\n${all}")
  endif()
endforeach()
if(all MATCHES "docs/good\\.md:([0-9]+)")
  message(FATAL_ERROR "a legitimate line (good.md:${CMAKE_MATCH_1}) was flagged:\n${all}")
endif()
message("process_words self-test: ${nbad} process lines flagged, no look-alike flagged")
