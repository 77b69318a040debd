# SPDX-License-Identifier: Apache-2.0
# Hard deadlines with real processes: 3 runtimes on tcp and a real redis-server; one runtime
# stopped with SIGSTOP, then trickling its RPC replies through a proxy in the test. Both route
# modes (embedded_wrh: a stopped runtime is also a route authority).
add_test(NAME store_deadline_redis COMMAND ${exe} redis)
add_test(NAME store_deadline_redis_metadata_only COMMAND ${exe} redis)
set_tests_properties(store_deadline_redis PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
set_tests_properties(store_deadline_redis_metadata_only PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_TEST_ROUTE_MODE=metadata_only")
