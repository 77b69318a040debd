# SPDX-License-Identifier: Apache-2.0
# One runtime with a LocalDir and an ExtentStore device (cold_mixed.c): offload, last-hot
# eviction, restore and reclaim on both, usage = files / the reopened backends, and the
# per-device metric series (kvmesh_cold_dev_*{device}) moving with their own device.
add_test(NAME cold_store_mixed COMMAND ${exe})
set_tests_properties(cold_store_mixed PROPERTIES LABELS integration TIMEOUT 180
  ENVIRONMENT "${KVMESH_TEST_ENV}")
