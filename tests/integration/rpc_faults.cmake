# SPDX-License-Identifier: Apache-2.0
# ctest entry for itest_rpc_faults: real loopback sockets, a few seconds at most.
add_test(NAME integration_rpc_faults COMMAND ${exe})
set_tests_properties(integration_rpc_faults PROPERTIES LABELS "integration;rpc" TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
