# SPDX-License-Identifier: Apache-2.0
# Tombstone purge under churn (EmbeddedWrh route tables), three in-process runtimes on a real
# redis-server and a real etcd started by the test; about 30 s each.
add_test(NAME store_purge_redis COMMAND ${exe} redis)
add_test(NAME store_purge_etcd COMMAND ${exe} etcd)
set_tests_properties(store_purge_redis store_purge_etcd PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME store_purge_redis_metadata_only COMMAND ${exe} redis metadata_only)
add_test(NAME store_purge_etcd_metadata_only COMMAND ${exe} etcd metadata_only)
set_tests_properties(store_purge_redis_metadata_only store_purge_etcd_metadata_only PROPERTIES
  LABELS integration TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
# Eviction churn: tombstones of evicted objects are finalized and purged (route tables bounded);
# about 10 s idle, 20-30 s on a loaded host.
add_test(NAME store_purge_redis_evict COMMAND ${exe} redis evict)
set_tests_properties(store_purge_redis_evict PROPERTIES LABELS integration TIMEOUT 300 COST 20
  ENVIRONMENT "${KVMESH_TEST_ENV}")
