# SPDX-License-Identifier: Apache-2.0
# The eviction-triggered offload mode in a real runtime (cold_evict_mode.c): nothing offloaded
# below the eviction watermark; above it every offload is a claimed victim, evicted once cold.
add_test(NAME cold_store_evict COMMAND ${exe})
set_tests_properties(cold_store_evict PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
