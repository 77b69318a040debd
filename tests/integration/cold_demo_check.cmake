# SPDX-License-Identifier: Apache-2.0
# Runs `kvmesh demo --cold --cold-kind KIND` and checks the exit status, that the summary shows
# offloads, cold-only objects and restores (all > 0, restores = cold-only objects) and that the
# last line is "acknowledged: N, verified: N, lost: 0" with the same N > 0. The demo runs with
# TMPDIR set to a scratch directory here: its device directory must be made there and removed at
# the end, and removed too when the run fails (an unknown --set key, after the directory was
# made).
set(scratch ${CMAKE_CURRENT_BINARY_DIR}/demo-cold-tmp-${KIND})
file(REMOVE_RECURSE ${scratch})
file(MAKE_DIRECTORY ${scratch})
execute_process(COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${scratch}
  ${KVMESH} demo --cold --cold-kind ${KIND} --seed 7 --objects 4 --set no_such_key=1
  OUTPUT_VARIABLE fout ERROR_VARIABLE ferr RESULT_VARIABLE frc TIMEOUT 60)
file(GLOB left ${scratch}/*)
if(frc EQUAL 0 OR left)
  message(FATAL_ERROR "failing demo run: exit ${frc}, left behind: '${left}'\n${fout}\n${ferr}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${scratch}
  ${KVMESH} demo --cold --cold-kind ${KIND} --seed 7
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 250)
message("${out}")
file(GLOB left ${scratch}/*)
file(REMOVE_RECURSE ${scratch})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvmesh demo --cold exited with ${rc}\n${err}")
endif()
string(FIND "${out}" "device in ${scratch}/kvmesh-demo-cold-" at)
if(at LESS 0 OR left)
  message(FATAL_ERROR "the device directory was not made under TMPDIR or was left: '${left}'")
endif()
if(NOT out MATCHES "offloads: ([0-9]+), cold-only objects: ([0-9]+), restores: ([0-9]+), wrong: 0")
  message(FATAL_ERROR "no cold summary line\n${err}")
endif()
if(CMAKE_MATCH_1 EQUAL 0 OR CMAKE_MATCH_2 EQUAL 0 OR NOT CMAKE_MATCH_2 STREQUAL CMAKE_MATCH_3)
  message(FATAL_ERROR "offloads ${CMAKE_MATCH_1}, cold-only ${CMAKE_MATCH_2}, restores ${CMAKE_MATCH_3}")
endif()
string(STRIP "${out}" out)
string(REGEX MATCH "[^\n]*$" last "${out}")
if(NOT last MATCHES "^acknowledged: ([0-9]+), verified: ([0-9]+), lost: 0$")
  message(FATAL_ERROR "unexpected last line: '${last}'\n${err}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_1 EQUAL 0)
  message(FATAL_ERROR "acknowledged ${CMAKE_MATCH_1} != verified ${CMAKE_MATCH_2}")
endif()
