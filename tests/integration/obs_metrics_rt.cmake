# SPDX-License-Identifier: Apache-2.0
# Metrics of real runtimes: 3 runtime processes (the test binary re-executed with --runtime) and
# an in-process client, on a real redis-server and on a real etcd started by the test.
add_test(NAME obs_metrics_redis COMMAND ${exe} redis)
add_test(NAME obs_metrics_etcd COMMAND ${exe} etcd)
set_tests_properties(obs_metrics_redis obs_metrics_etcd PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
