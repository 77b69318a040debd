# SPDX-License-Identifier: Apache-2.0
# The quota protocol wired into real runtimes (tests/integration/tenant_store.c) on real servers
# (MetadataOnly routes), and once with EmbeddedWrh routes on Redis.
foreach(backend redis etcd)
  add_test(NAME tenant_store_${backend} COMMAND itest_tenant_store ${backend})
  set_tests_properties(tenant_store_${backend} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
# the same with routes held by the runtimes (the default route mode)
add_test(NAME tenant_store_redis_wrh COMMAND itest_tenant_store redis embedded_wrh)
set_tests_properties(tenant_store_redis_wrh PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
