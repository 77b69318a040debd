# SPDX-License-Identifier: Apache-2.0
# Heap allocations of steady-state single 4 KiB gets on a 2-runtime cluster (both runtimes, every
# thread), over tcp and over shm. Counts only, no timing.
add_test(NAME store_getcost_tcp COMMAND ${exe} tcp)
add_test(NAME store_getcost_shm COMMAND ${exe} shm)
# Heap allocations per item of steady 128-item 4 KiB batch_get and batch_put calls.
add_test(NAME store_getcost_batch_get_tcp COMMAND ${exe} tcp 0 batch_get)
add_test(NAME store_getcost_batch_get_shm COMMAND ${exe} shm 0 batch_get)
add_test(NAME store_getcost_batch_put_tcp COMMAND ${exe} tcp 0 batch_put)
add_test(NAME store_getcost_batch_put_shm COMMAND ${exe} shm 0 batch_put)
set_tests_properties(store_getcost_tcp store_getcost_shm store_getcost_batch_get_tcp
  store_getcost_batch_get_shm store_getcost_batch_put_tcp store_getcost_batch_put_shm
  PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
