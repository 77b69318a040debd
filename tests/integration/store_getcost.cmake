# SPDX-License-Identifier: Apache-2.0
# Heap allocations of steady-state single 4 KiB gets on a 2-runtime cluster (both runtimes, every
# thread), over tcp and over shm. Counts only, no timing.
add_test(NAME store_getcost_tcp COMMAND ${exe} tcp)
add_test(NAME store_getcost_shm COMMAND ${exe} shm)
set_tests_properties(store_getcost_tcp store_getcost_shm PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
