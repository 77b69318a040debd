# SPDX-License-Identifier: Apache-2.0
# Soft tenant isolation on a real 3-runtime cluster (tests/integration/tenant_soft.c): tenant
# placement preferences (soft fallback counted in /metrics, hard pin refused) and the fair
# scheduler under concurrent tenants, on a real redis-server.
add_test(NAME tenant_soft_redis COMMAND itest_tenant_soft redis)
set_tests_properties(tenant_soft_redis PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
