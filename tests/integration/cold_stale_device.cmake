# SPDX-License-Identifier: Apache-2.0
# A write-through put placed on a device drained after the writer's device view was read
# (cold_stale_device.c): it answers promptly (KVMESH_EUNAVAILABLE naming the device and
# "draining") instead of waiting for its deadline; the next put lands on the other device.
add_test(NAME cold_store_stale_device COMMAND ${exe})
set_tests_properties(cold_store_stale_device PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
