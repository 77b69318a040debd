# SPDX-License-Identifier: Apache-2.0
# The quota protocol through the store: 16 writer processes (client runtimes, C API) race puts,
# overwrites and deletes into one tenant with a byte and an object limit on real servers
# (tests/integration/tenant_race.c). The plain (werror) build writes for the specification's
# 30 s per backend; a sanitizer build (KVMESH_SANITIZE set: the asan stage) keeps 12 s, which
# is where its time goes. By hand: `itest_tenant_race <backend> --duration N`.
if(KVMESH_SANITIZE STREQUAL "")
  set(tenant_race_s 30)
else()
  set(tenant_race_s 12)
endif()
foreach(backend redis etcd)
  add_test(NAME tenant_race_${backend}
    COMMAND itest_tenant_race ${backend} --duration ${tenant_race_s})
  set_tests_properties(tenant_race_${backend} PROPERTIES LABELS integration TIMEOUT 300
    COST ${tenant_race_s} ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
