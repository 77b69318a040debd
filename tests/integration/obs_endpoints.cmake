# SPDX-License-Identifier: Apache-2.0
add_test(NAME integration_obs_endpoints COMMAND itest_obs_endpoints)
set_tests_properties(integration_obs_endpoints PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
