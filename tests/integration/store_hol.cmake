# SPDX-License-Identifier: Apache-2.0
# No head-of-line blocking across keys in one client: 3 runtimes on tcp and a real redis-server;
# one runtime stopped with SIGSTOP while calls on its key block, other threads' keys (owners and
# route authorities alive) keep completing. Both route modes.
add_test(NAME store_hol_redis COMMAND ${exe} redis)
add_test(NAME store_hol_redis_metadata_only COMMAND ${exe} redis)
set_tests_properties(store_hol_redis PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
set_tests_properties(store_hol_redis_metadata_only PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_TEST_ROUTE_MODE=metadata_only")
