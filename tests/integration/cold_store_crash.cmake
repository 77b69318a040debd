# SPDX-License-Identifier: Apache-2.0
# kill -9 of a storage runtime process while it offloads (cold_store_crash.c): a real Redis,
# a LocalDir device, a restart with the same root and runtime id, reconciliation, reads.
add_test(NAME cold_store_crash COMMAND ${exe})
set_tests_properties(cold_store_crash PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
# the same with cold_write_through = true: every acknowledged object survives the kill
add_test(NAME cold_store_crash_durable COMMAND ${exe} --durable)
set_tests_properties(cold_store_crash_durable PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
