# Fails when a tracked file speaks of how the project is worked on instead of
# what it is: work sessions, UTC times of day, issue numbers, the names of the
# machines GPU runs were borrowed from, the scratch-script suffix, or section
# ids of the old measurement diary ("PERFORMANCE.md 4j"). Documentation says
# what the library is now; how it got there lives in git history.
#
#   cmake -DSOURCE_DIR=<repo root> -P tests/tools/process_words.cmake
#
# Files: `git ls-files` in SOURCE_DIR, or every file under it (less .git and
# build trees) when git or the checkout is missing. Prints every offending
# file:line and the rule it broke.

cmake_policy(VERSION 3.16)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository root> -P process_words.cmake")
endif()

# This file holds the patterns and its self-test the words they must catch:
# the two files not checked.
set(exempt tests/tools/process_words.cmake tests/tools/process_words_selftest.cmake)

# Not text, or data written by a tool: a bench JSON records the UTC time it ran
# as its provenance, which is a fact about the data, not process prose.
set(skip_regex "\\.(png|jpg|jpeg|gif|pdf|gz|tgz|xz|zip|so|a|o|bin)$|^docs/perf/.*\\.json$")

# Exact idioms that contain a flagged word legitimately; removed before the
# rules run. pytest's fixture scope is spelled "session"; the benches stamp
# their output with the date and time it was measured, in UTC.
set(allowed_idioms "scope=\"session\"" "scope='session'" "%H:%M:%S UTC")

# The rules: rule_names[i] names the regex in rule_<i>. CMake regexes have no
# \b and no case flag: word edges are spelled out as [^A-Za-z0-9_] or the
# start or end of the text. The regexes live in separate variables because
# square brackets inside a CMake list would glue its items together.
set(W "[^A-Za-z0-9_]")
set(rule_names session UTC "issue number" "pull-request number" "device machine"
               "machine kind" "scratch script" "time of day" "diary section"
               "diary section" "diary section")
set(rule_0 "[Ss][Ee][Ss][Ss][Ii][Oo][Nn]")
set(rule_1 "(^|${W})UTC(${W}|$)")
# "issue 7" as a noun is followed by punctuation, the end of the line or
# "and"/"or"; "issues 64 loads" (the verb) is not flagged.
set(rule_2 "(^|[^A-Za-z])[Ii]ssues? #?[0-9]+([^0-9A-Za-z ]|$| and | or )")
set(rule_3 "\\(#[0-9]+\\)")
set(rule_4 "[Dd][Ee][Vv][Ii][Cc][Ee][ -][Mm][Aa][Cc][Hh][Ii][Nn][Ee]")
set(rule_5 "[Nn][Vv][Ii][Dd][Ii][Aa]-[Hh][12]00")
set(rule_6 "\\.devh(${W}|$)")
# hh:mm or hh:mm:ss not preceded by ':' (file:line:col), a word character
# or '>' (the end of the marker '[' is swapped for, so list[10:20] is no clock).
set(rule_7 "(^|[^:0-9A-Za-z_.>])([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?([^:0-9]|$)")
set(rule_8 "PERFORMANCE\\.md,? (sections? )?[0-9]")
set(rule_9 "[Ss]ections? [1-5][a-t](${W}|$)")
set(rule_10 "\\([1-5][a-t](, [^)]*)?\\)")
list(LENGTH rule_names nrules)
math(EXPR last_rule "${nrules} - 1")

include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/RepoFiles.cmake")
repo_files(files "${SOURCE_DIR}")

set(offences 0)
set(checked 0)
foreach(rel IN LISTS files)
  if(rel STREQUAL "" OR rel IN_LIST exempt OR rel MATCHES "${skip_regex}")
    continue()
  endif()
  set(path "${SOURCE_DIR}/${rel}")
  if(NOT EXISTS "${path}" OR IS_DIRECTORY "${path}")
    continue()
  endif()
  file(READ "${path}" text)
  math(EXPR checked "${checked} + 1")
  foreach(idiom IN LISTS allowed_idioms)
    string(REPLACE "${idiom}" "" text "${text}")
  endforeach()
  # Semicolons and square brackets would split or glue CMake list items when
  # the text is cut into lines below, so they are swapped for markers first.
  string(REPLACE ";" "<SEMI>" text "${text}")
  string(REPLACE "[" "<LSQB>" text "${text}")
  string(REPLACE "]" "<RSQB>" text "${text}")
  set(hit FALSE)
  foreach(i RANGE ${last_rule})
    if(text MATCHES "${rule_${i}}")
      set(hit TRUE)
      break()
    endif()
  endforeach()
  if(NOT hit)
    continue()
  endif()
  string(REPLACE "\n" ";" lines "${text}")
  set(lineno 0)
  foreach(line IN LISTS lines)
    math(EXPR lineno "${lineno} + 1")
    foreach(i RANGE ${last_rule})
      if(line MATCHES "${rule_${i}}")
        list(GET rule_names ${i} name)
        string(REPLACE "<SEMI>" ";" shown "${line}")
        string(REPLACE "<LSQB>" "[" shown "${shown}")
        string(REPLACE "<RSQB>" "]" shown "${shown}")
        string(STRIP "${shown}" shown)
        string(LENGTH "${shown}" len)
        if(len GREATER 160)
          string(SUBSTRING "${shown}" 0 157 shown)
          string(APPEND shown "...")
        endif()
        message("${rel}:${lineno}: ${name}: ${shown}")
        math(EXPR offences "${offences} + 1")
        break()
      endif()
    endforeach()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "no files found under ${SOURCE_DIR}: nothing was checked")
endif()
if(offences GREATER 0)
  message(FATAL_ERROR "${offences} line(s) above speak of the development process, not the product. "
                      "Say what the code or the measurement is (its command, date and machine), "
                      "and leave how it came about to the commit message.")
endif()
message("process words: ${checked} files checked, none found")
