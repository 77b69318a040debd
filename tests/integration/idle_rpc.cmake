# SPDX-License-Identifier: Apache-2.0
# Idle limits of the peer RPC port: real loopback sockets, a few seconds.
add_test(NAME integration_idle_rpc COMMAND ${exe})
set_tests_properties(integration_idle_rpc PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
