# SPDX-License-Identifier: Apache-2.0
# Device health from the running store's backend I/O (cold_health.c): a LocalDir device whose
# object directory becomes a file is marked DEGRADED, skipped by placement, probed back healthy.
add_test(NAME cold_store_health COMMAND ${exe})
set_tests_properties(cold_store_health PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
