# SPDX-License-Identifier: Apache-2.0
# Puts wait for storage members missing from the snapshot for a moment (store_member_gap.c):
# a real kvmeshd stopped with SIGSTOP until its lease lapsed, the kvmesh CLI, a real
# redis-server / etcd; and a put without any storage member failing at its deadline.
add_test(NAME store_member_gap_redis COMMAND ${exe} redis)
add_test(NAME store_member_gap_etcd COMMAND ${exe} etcd)
set_tests_properties(store_member_gap_redis store_member_gap_etcd PROPERTIES LABELS integration
  TIMEOUT 300 COST 10 ENVIRONMENT "${KVMESH_TEST_ENV}")
