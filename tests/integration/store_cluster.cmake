# SPDX-License-Identifier: Apache-2.0
# Multi-process store tests: 3+ runtime processes (the test binary re-executed with --runtime)
# and in-process clients, against a real redis-server and a real etcd started by the test, in
# the default route mode (EmbeddedWrh) and, on Redis, in MetadataOnly mode too.
add_test(NAME store_cluster_redis COMMAND ${exe} redis)
add_test(NAME store_cluster_etcd COMMAND ${exe} etcd)
add_test(NAME store_cluster_redis_metadata_only COMMAND ${exe} redis)
set_tests_properties(store_cluster_redis store_cluster_etcd PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
set_tests_properties(store_cluster_redis_metadata_only PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_TEST_ROUTE_MODE=metadata_only")
