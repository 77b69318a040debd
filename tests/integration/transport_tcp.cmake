# SPDX-License-Identifier: Apache-2.0
# ctest entries of itest_transport_tcp, plus the bench_transport --quick smoke run (integrity of
# every tcp and shm cell, no timing assertions).
add_test(NAME integration_transport_tcp COMMAND itest_transport_tcp)
set_tests_properties(integration_transport_tcp PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME bench_transport_quick COMMAND bench_transport --quick)
set_tests_properties(bench_transport_quick PROPERTIES LABELS bench TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
