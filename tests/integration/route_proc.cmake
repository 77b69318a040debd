# SPDX-License-Identifier: Apache-2.0
# The EmbeddedWrh route mesh across real processes: 3 runtime processes (the test binary
# re-executed with --runtime) + the test as a client runtime, kill -9 of a shard's primary during
# CAS traffic, checked by the shared route history checker; against a real redis-server and a
# real etcd started by the test.
add_test(NAME route_proc_redis COMMAND ${exe} redis)
add_test(NAME route_proc_etcd COMMAND ${exe} etcd)
set_tests_properties(route_proc_redis route_proc_etcd PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
