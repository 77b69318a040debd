# SPDX-License-Identifier: Apache-2.0
# The closed-owner replica case (MetadataOnly, a runtime closed while its replicas are listed,
# then eviction pressure): in-process runtimes on a real redis-server and a real etcd. In the
# broken build (-DKVMESH_CHAOS_BROKEN=evict_last_live) the test must fail: WILL_FAIL.
add_test(NAME store_closed_owner_redis COMMAND ${exe} redis)
add_test(NAME store_closed_owner_etcd COMMAND ${exe} etcd)
set_tests_properties(store_closed_owner_redis store_closed_owner_etcd PROPERTIES
  LABELS integration TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
if(KVMESH_CHAOS_BROKEN STREQUAL "evict_last_live")
  set_tests_properties(store_closed_owner_redis store_closed_owner_etcd PROPERTIES WILL_FAIL TRUE)
endif()
