# SPDX-License-Identifier: Apache-2.0
# `kvmesh admin` against kvmeshd daemons on a real Redis and a real etcd (ops_admin.c).
add_test(NAME integration_ops_admin COMMAND ${exe})
set_tests_properties(integration_ops_admin PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")
