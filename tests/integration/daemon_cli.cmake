# SPDX-License-Identifier: Apache-2.0
# kvmeshd and the kvmesh CLI as real processes on a real redis-server (daemon_cli.c), plus the
# tools' own smoke runs, so that the sanitizer builds cover them too:
#   kvmesh_demo         `kvmesh demo`: 3 runtimes, workload, kill + reopen; last line must be
#                       "acknowledged: N, verified: N, lost: 0" (and exit 0)
#   kvmesh_demo_tenants `kvmesh demo --tenants 2 --quota 24MiB`: tenant demo-a hits its quota and
#                       recovers by evicting only its own objects; demo-b loses none
#   kvmesh_bench_quick  `kvmesh bench --quick --verify --quota`: every system, every byte read
#                       checked, the kvmesh rows also in a tenant with a quota policy (the
#                       on-vs-off table printed; no timing assertions)
add_test(NAME integration_daemon_cli COMMAND ${exe})
set_tests_properties(integration_daemon_cli PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")

add_test(NAME kvmesh_demo
  COMMAND ${CMAKE_COMMAND} -DKVMESH=$<TARGET_FILE:kvmesh_tool>
          -P ${CMAKE_SOURCE_DIR}/tests/integration/daemon_demo_check.cmake)
set_tests_properties(kvmesh_demo PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")

add_test(NAME kvmesh_demo_tenants
  COMMAND ${CMAKE_COMMAND} -DKVMESH=$<TARGET_FILE:kvmesh_tool>
          -P ${CMAKE_SOURCE_DIR}/tests/integration/daemon_demo_tenants_check.cmake)
set_tests_properties(kvmesh_demo_tenants PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")

add_test(NAME kvmesh_bench_quick COMMAND $<TARGET_FILE:kvmesh_tool> bench --quick --verify --quota)
# Both lines must appear (a pass expression replaces the exit-status check).
set_tests_properties(kvmesh_bench_quick PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}"
  PASS_REGULAR_EXPRESSION "quota protocol on vs off.*failed operations: 0, wrong values: 0")
