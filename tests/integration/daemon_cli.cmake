# SPDX-License-Identifier: Apache-2.0
# kvmeshd and the kvmesh CLI as real processes on a real redis-server (daemon_cli.c), plus the
# tools' own smoke runs, so that the sanitizer builds cover them too:
#   kvmesh_demo         `kvmesh demo`: 3 runtimes, workload, kill + reopen; last line must be
#                       "acknowledged: N, verified: N, lost: 0" (and exit 0)
#   kvmesh_bench_quick  `kvmesh bench --quick --verify`: every system, every byte read checked
#                       (no timing assertions)
add_test(NAME integration_daemon_cli COMMAND ${exe})
set_tests_properties(integration_daemon_cli PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")

add_test(NAME kvmesh_demo
  COMMAND ${CMAKE_COMMAND} -DKVMESH=$<TARGET_FILE:kvmesh_tool>
          -P ${CMAKE_SOURCE_DIR}/tests/integration/daemon_demo_check.cmake)
set_tests_properties(kvmesh_demo PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")

add_test(NAME kvmesh_bench_quick COMMAND $<TARGET_FILE:kvmesh_tool> bench --quick --verify)
set_tests_properties(kvmesh_bench_quick PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")
