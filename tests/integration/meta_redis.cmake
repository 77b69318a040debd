# SPDX-License-Identifier: Apache-2.0
# Redis-specific tests of the redis:// metadata backend (real redis-server processes).
add_test(NAME meta_redis COMMAND ${exe})
set_tests_properties(meta_redis PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
