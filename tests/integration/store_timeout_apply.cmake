# SPDX-License-Identifier: Apache-2.0
# Timeout after apply: a put whose route update the metadata server applied but whose answer a
# loopback proxy keeps back; its reservation is held, never reused, then committed. One runtime
# on a real redis-server and a real etcd started by the test; about 10 s each.
add_test(NAME store_timeout_apply_redis COMMAND ${exe} redis)
add_test(NAME store_timeout_apply_etcd COMMAND ${exe} etcd)
set_tests_properties(store_timeout_apply_redis store_timeout_apply_etcd PROPERTIES
  LABELS integration TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
