# SPDX-License-Identifier: Apache-2.0
#
# ctest store_no_sleep_poll: the store waits on the event itself (condition variables signalled
# where the awaited state changes, loop timers), never by sleeping and checking again (issue 12,
# docs/architecture.md "Threads and the hot path"). Fails naming every file:line of src/store that
# calls usleep, nanosleep, clock_nanosleep, sleep or uv_sleep; none is allowed.
#
#   cmake -DDIR=<folder to check> -P no_sleep_poll.cmake
cmake_minimum_required(VERSION 3.18)
if(NOT DEFINED DIR)
  message(FATAL_ERROR "no_sleep_poll.cmake: -DDIR=... is required")
endif()

set(problems "")
file(GLOB files ${DIR}/*.c ${DIR}/*.h)
if(NOT files)
  message(FATAL_ERROR "no_sleep_poll.cmake: no source file in ${DIR}")
endif()
foreach(f IN LISTS files)
  # one list element per line: characters that group or split CMake lists are neutralized first
  file(READ ${f} content)
  string(REPLACE ";" "," content "${content}")
  string(REPLACE "[" "<" content "${content}")
  string(REPLACE "]" ">" content "${content}")
  string(REPLACE "\\" "/" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  get_filename_component(name ${f} NAME)
  set(n 0)
  foreach(l IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(l MATCHES "(^|[^A-Za-z0-9_])(usleep|nanosleep|clock_nanosleep|sleep|uv_sleep)[ \t]*\\(")
      string(STRIP "${l}" text)
      list(APPEND problems "${name}:${n}: ${CMAKE_MATCH_2}: ${text}")
    endif()
  endforeach()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "sleep polling in ${DIR} (wait on a kvm_waitq or a loop timer instead, "
                      "src/store/waitq.h):\n  ${text}")
endif()
list(LENGTH files n_files)
message(STATUS "no sleep polling in ${n_files} files of ${DIR}")
