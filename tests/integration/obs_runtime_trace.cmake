# SPDX-License-Identifier: Apache-2.0
# Two real runtimes in one process (memory:// metadata, loopback RPC) and a fake OTLP receiver.
add_test(NAME integration_obs_runtime_trace COMMAND itest_obs_runtime_trace)
set_tests_properties(integration_obs_runtime_trace PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
