# SPDX-License-Identifier: Apache-2.0
# The EmbeddedWrh route mesh across real processes: 3 runtime processes (the test binary
# re-executed with --runtime) + the test as a client runtime, kill -9 of a shard's primary during
# CAS traffic, checked by the shared route history checker; against a real redis-server and a
# real etcd started by the test.
add_test(NAME route_proc_redis COMMAND ${exe} redis)
add_test(NAME route_proc_etcd COMMAND ${exe} etcd)
set_tests_properties(route_proc_redis route_proc_etcd PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")

# Deliberately broken route variants (route_test_set_bugs, through KVMESH_ROUTE_PROC_BUGS) must
# be caught by the same checks: the history checker (skip_transfer: acknowledged writes lost) or
# the fencing check (secondary_cas: a CAS acknowledged after the kill by a non-primary with the
# dead primary's token).
foreach(variant skip_transfer secondary_cas)
  add_test(NAME route_proc_redis_${variant}_is_caught COMMAND ${exe} redis)
  set_tests_properties(route_proc_redis_${variant}_is_caught PROPERTIES LABELS integration
    TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_ROUTE_PROC_BUGS=${variant}"
    PASS_REGULAR_EXPRESSION "history check: k[0-9]+: |CAS acknowledged after the kill with token")
endforeach()
