# SPDX-License-Identifier: Apache-2.0
# Idle limits of the tcp data port: real loopback sockets, a few seconds.
add_test(NAME integration_idle_data COMMAND ${exe})
set_tests_properties(integration_idle_data PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
