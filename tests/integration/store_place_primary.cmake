# SPDX-License-Identifier: Apache-2.0
# Placement on the key's shard primary (place_on_primary): 3 storage runtimes and a client over
# tcp loopback; round trips and owners of many single puts and gets, on and off; a full primary
# falls back. Counts only, no timing.
add_test(NAME store_place_primary COMMAND ${exe})
set_tests_properties(store_place_primary PROPERTIES LABELS integration
  TIMEOUT 600 ENVIRONMENT "${KVMESH_TEST_ENV}")
