# SPDX-License-Identifier: Apache-2.0
# The quota protocol through the store: 16 writer processes (client runtimes, C API) race puts,
# overwrites and deletes into one tenant with a byte and an object limit on real servers
# (tests/integration/tenant_race.c). CI writes for 12 s per backend; the specification's full
# run is `itest_tenant_race <backend> --duration 30`.
foreach(backend redis etcd)
  add_test(NAME tenant_race_${backend} COMMAND itest_tenant_race ${backend} --duration 12)
  set_tests_properties(tenant_race_${backend} PROPERTIES LABELS integration TIMEOUT 300 COST 30
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
