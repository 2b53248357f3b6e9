# Fails when a file of the repository reads an environment variable that
# docs/env.md does not list. The reads it recognises: C's getenv("X"),
# Python's os.environ.get("X") / os.environ["X"] / os.getenv("X") /
# os.environ.setdefault("X"), shell's ${X:-...} / ${X:=...}, CMake's $ENV{X},
# and the library's cgm_param_*("X"). Names passed through a variable are
# not seen: the tables in src/core/param.c and tools/env_doc.c list them.
#
#   cmake -DSOURCE_DIR=<repo root> -P tests/tools/env_complete.cmake
cmake_policy(VERSION 3.16)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository root> -P env_complete.cmake")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/RepoFiles.cmake")
repo_files(files "${SOURCE_DIR}")
list(FILTER files INCLUDE REGEX "\\.(c|h|cu|cuh|py|sh|cmake)$|(^|/)CMakeLists\\.txt$|^\\.ci/run$")
# A test reads a name that must not exist, to see it refused.
set(not_variables COMMGEMM_NO_SUCH)

file(READ "${SOURCE_DIR}/docs/env.md" doc)
set(q "[\"']")
set(read_regex "getenv\\(${q}[A-Za-z_][A-Za-z0-9_]*|environ\\.get\\(${q}[A-Za-z_][A-Za-z0-9_]*|environ\\[${q}[A-Za-z_][A-Za-z0-9_]*|environ\\.setdefault\\(${q}[A-Za-z_][A-Za-z0-9_]*|\\$\\{[A-Z_][A-Z0-9_]*:[-=]|\\$ENV\\{[A-Za-z_][A-Za-z0-9_]*\\}|cgm_param_[a-z_]+\\(\"[A-Z_][A-Z0-9_]*\"")
set(missing 0)
set(seen "")
foreach(rel IN LISTS files)
  if(rel STREQUAL "tests/tools/env_complete.cmake")
    continue()
  endif()
  set(path "${SOURCE_DIR}/${rel}")
  if(NOT EXISTS "${path}" OR IS_DIRECTORY "${path}")
    continue()
  endif()
  file(STRINGS "${path}" lines REGEX "${read_regex}")
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "${read_regex}" reads "${line}")
    foreach(read IN LISTS reads)
      string(REGEX REPLACE ".*[\"'{]([A-Za-z_][A-Za-z0-9_]*).*" "\\1" name "${read}")
      if(name IN_LIST not_variables OR name IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${name})
      string(FIND "${doc}" "| `${name}` |" at)
      if(at EQUAL -1)
        message("${rel}: reads ${name}, which docs/env.md does not list")
        math(EXPR missing "${missing} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()
list(LENGTH seen count)
if(count EQUAL 0)
  message(FATAL_ERROR "no variable reads found under ${SOURCE_DIR}: the check found nothing to check")
endif()
if(missing GREATER 0)
  message(FATAL_ERROR "${missing} variable(s) above are read but not documented: add each to the table in "
                      "src/core/param.c (the library's) or tools/env_doc.c (the rest), then regenerate "
                      "docs/env.md with `build/tools/commgemm-env-doc > docs/env.md`")
endif()
message("env.md complete: ${count} variables read, all listed")
