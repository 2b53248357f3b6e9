# Fails when docs/env.md differs from what the parameter table generates.
execute_process(COMMAND ${TOOL} OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TOOL} failed (${rc})")
endif()
file(READ ${DOC} current)
if(NOT generated STREQUAL current)
  message(FATAL_ERROR "docs/env.md is stale: regenerate it with `build/tools/commgemm-env-doc > docs/env.md`")
endif()
