# repo_files(<out> <root>): the repository's files, relative to <root>:
# `git ls-files` when git and the checkout are there, else every file under
# <root> less .git and build trees. Included by the repository checks that
# ctest runs in script mode (tests/tools/*.cmake).
function(repo_files out root)
  find_program(GIT_EXECUTABLE git)
  set(files "")
  if(GIT_EXECUTABLE AND EXISTS "${root}/.git")
    execute_process(COMMAND "${GIT_EXECUTABLE}" -c core.quotepath=off ls-files
                    WORKING_DIRECTORY "${root}"
                    OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" files "${listing}")
    endif()
  endif()
  if(NOT files)
    file(GLOB_RECURSE files RELATIVE "${root}" "${root}/*")
    list(FILTER files EXCLUDE REGEX "^(\\.git|build[^/]*)/|/CMakeFiles/")
  endif()
  list(FILTER files EXCLUDE REGEX "^$")
  set(${out} "${files}" PARENT_SCOPE)
endfunction()
