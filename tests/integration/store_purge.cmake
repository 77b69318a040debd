# SPDX-License-Identifier: Apache-2.0
# Tombstone purge under churn, three in-process runtimes on a real redis-server and a real etcd
# started by the test. The Redis pair churns 60 s (the issue's soak; purge-progress check), the etcd
# pair 20 s; under sanitizers every churn is 15 s. A quota tenant's churn (store_purge_redis_quota
# and store_purge_redis_metadata_only_quota, 15 s each): its tombstones, its deleted object rows
# and its operation records are purged too (docs/tenancy.md "Purging a quota tenant's tombstones").
# `itest_store_purge redis --duration 600` for a longer soak (docs/reliability.md).
if(KVMESH_SANITIZE)
  set(purge_long 15)
  set(purge_short 15)
else()
  set(purge_long 60)
  set(purge_short 20)
endif()
add_test(NAME store_purge_redis COMMAND ${exe} redis --duration ${purge_long})
add_test(NAME store_purge_etcd COMMAND ${exe} etcd --duration ${purge_short})
set_tests_properties(store_purge_redis store_purge_etcd PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
# the 60 s ones start early in a parallel ctest run (COST orders by expected time)
set_tests_properties(store_purge_redis PROPERTIES COST 70)
add_test(NAME store_purge_redis_metadata_only COMMAND ${exe} redis metadata_only
  --duration ${purge_long})
add_test(NAME store_purge_etcd_metadata_only COMMAND ${exe} etcd metadata_only
  --duration ${purge_short})
set_tests_properties(store_purge_redis_metadata_only store_purge_etcd_metadata_only PROPERTIES
  LABELS integration TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
set_tests_properties(store_purge_redis_metadata_only PROPERTIES COST 70)
# Eviction churn: tombstones of evicted objects are finalized and purged (route tables bounded);
# about 10 s idle, 20-30 s on a loaded host.
add_test(NAME store_purge_redis_evict COMMAND ${exe} redis evict)
set_tests_properties(store_purge_redis_evict PROPERTIES LABELS integration TIMEOUT 300 COST 20
  ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME store_purge_redis_quota COMMAND ${exe} redis --quota --duration 15)
add_test(NAME store_purge_redis_metadata_only_quota COMMAND ${exe} redis metadata_only --quota
  --duration 15)
set_tests_properties(store_purge_redis_quota store_purge_redis_metadata_only_quota PROPERTIES
  LABELS integration TIMEOUT 300 COST 30 ENVIRONMENT "${KVMESH_TEST_ENV}")
