# SPDX-License-Identifier: Apache-2.0
# Runs `kvmesh demo` (bounded: 200 requests) and checks the exit status and that the last line
# of its output is "acknowledged: N, verified: N, lost: 0" with the same N (N > 0).
execute_process(COMMAND ${KVMESH} demo --requests 200 --seed 42
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 500)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvmesh demo exited with ${rc}\n${err}")
endif()
string(STRIP "${out}" out)
string(REGEX MATCH "[^\n]*$" last "${out}")
if(NOT last MATCHES "^acknowledged: ([0-9]+), verified: ([0-9]+), lost: 0$")
  message(FATAL_ERROR "unexpected last line: '${last}'\n${err}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_1 EQUAL 0)
  message(FATAL_ERROR "acknowledged ${CMAKE_MATCH_1} != verified ${CMAKE_MATCH_2}")
endif()
