# SPDX-License-Identifier: Apache-2.0
# ctest entry for itest_rpc_basic: real loopback sockets, a few seconds at most.
add_test(NAME integration_rpc_basic COMMAND ${exe})
set_tests_properties(integration_rpc_basic PROPERTIES LABELS "integration;rpc" TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
