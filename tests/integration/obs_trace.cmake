# SPDX-License-Identifier: Apache-2.0
add_test(NAME integration_obs_trace COMMAND itest_obs_trace)
set_tests_properties(integration_obs_trace PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
