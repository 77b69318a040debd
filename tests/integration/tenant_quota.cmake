# SPDX-License-Identifier: Apache-2.0
# The quota protocol's transactions on real servers: 16 writer processes race one tenant's
# byte and object limits (tests/integration/tenant_quota.c). KVMESH_TENANT_QUOTA_MS is the
# writers' duration: 10 s here; set 30000 for the specification's 30 s run.
foreach(backend redis etcd)
  add_test(NAME tenant_quota_${backend} COMMAND itest_tenant_quota ${backend})
  set_tests_properties(tenant_quota_${backend} PROPERTIES LABELS integration TIMEOUT 600
    ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_TENANT_QUOTA_MS=10000")
endforeach()
