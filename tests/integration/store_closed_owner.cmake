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
# The same test linked against kvmesh_static_evictbroken (CMakeLists.txt: the library with
# owner.c compiled as -DKVMESH_CHAOS_BROKEN=evict_last_live), in every build: this entry passes
# only when that copy fails on the invariant's own checks (a read error, or a route left with
# only C's replica), not on any other failure. Redis only (about 10 s).
if(TARGET kvmesh_static_evictbroken)
  add_executable(${exe}_evictbroken ${src} ${CMAKE_SOURCE_DIR}/tests/support/testsrv.c
    ${CMAKE_SOURCE_DIR}/tests/support/proc.c)
  kvmesh_target_defaults(${exe}_evictbroken)
  target_include_directories(${exe}_evictbroken PRIVATE ${CMAKE_SOURCE_DIR}/tests/support)
  target_link_libraries(${exe}_evictbroken PRIVATE kvmesh_static_evictbroken PkgConfig::CMOCKA)
  add_test(NAME store_closed_owner_redis_evict_last_live_is_caught
    COMMAND ${exe}_evictbroken redis)
  set_tests_properties(store_closed_owner_redis_evict_last_live_is_caught PROPERTIES
    LABELS integration TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}"
    PASS_REGULAR_EXPRESSION "CHECK failed [^\n]*: (bad == 0|only_c == 0) ")
endif()
