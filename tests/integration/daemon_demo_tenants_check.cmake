# SPDX-License-Identifier: Apache-2.0
# Runs `kvmesh demo --tenants 2 --quota 24MiB` (bounded: 200 requests) and checks the exit status,
# that tenant demo-a hit its quota and recovered by evicting only its own objects (the summary
# line), that both usage rows equal their tenants' live objects, and that the last line is
# "acknowledged: N, verified: N, lost: 0" with the same N (N > 0).
execute_process(COMMAND ${KVMESH} demo --requests 200 --seed 42 --tenants 2 --quota 24MiB
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 500)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvmesh demo --tenants 2 --quota 24MiB exited with ${rc}\n${err}")
endif()
if(NOT out MATCHES "tenant demo-a hit its quota and recovered by evicting its own oldest objects; quota recovery evicted only its objects \\(the other tenants lost none\\)")
  message(FATAL_ERROR "the summary does not show demo-a recovering from its quota\n${err}")
endif()
if(NOT out MATCHES "tenant demo-a: limit 24MiB, [0-9]+ puts admitted, [0-9]+ refused over quota, [1-9][0-9]* of its own objects evicted[^\n]*within the limit[^\n]*usage row equals")
  message(FATAL_ERROR "tenant demo-a's line is not as expected\n${err}")
endif()
if(NOT out MATCHES "tenant demo-b: limit 1TiB, [0-9]+ puts admitted, 0 refused over quota, 0 of its own objects evicted[^\n]*usage row equals")
  message(FATAL_ERROR "tenant demo-b's line is not as expected\n${err}")
endif()
string(STRIP "${out}" out)
string(REGEX MATCH "[^\n]*$" last "${out}")
if(NOT last MATCHES "^acknowledged: ([0-9]+), verified: ([0-9]+), lost: 0$")
  message(FATAL_ERROR "unexpected last line: '${last}'\n${err}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_1 EQUAL 0)
  message(FATAL_ERROR "acknowledged ${CMAKE_MATCH_1} != verified ${CMAKE_MATCH_2}")
endif()
