# SPDX-License-Identifier: Apache-2.0
# deploy/ against the real programs (ops_deploy.c): example configs through the loader and
# kvmeshd --check-config, the systemd unit through systemd-analyze verify, the alert rules
# through promtool check/test rules, and every metric of the rules and the Grafana dashboard
# against a real kvmeshd's /metrics.
add_test(NAME integration_ops_deploy COMMAND ${exe})
set_tests_properties(integration_ops_deploy PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
