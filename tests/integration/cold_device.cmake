# SPDX-License-Identifier: Apache-2.0
# Cold device accounting on real servers: 8 worker processes reserve/commit/release cold ops and
# run reclaim handoffs on one small device (tests/integration/cold_device.c).
# KVMESH_COLD_DEVICE_MS is the workers' duration.
foreach(backend redis etcd)
  add_test(NAME cold_device_${backend} COMMAND itest_cold_device ${backend})
  set_tests_properties(cold_device_${backend} PROPERTIES LABELS integration TIMEOUT 600
    ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_COLD_DEVICE_MS=4000")
endforeach()
