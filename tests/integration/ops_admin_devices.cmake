# SPDX-License-Identifier: Apache-2.0
# `kvmesh admin devices` on a real Redis and a real etcd (ops_admin_devices.c).
add_test(NAME integration_ops_admin_devices COMMAND ${exe})
set_tests_properties(integration_ops_admin_devices PROPERTIES LABELS integration TIMEOUT 300
  COST 10 ENVIRONMENT "${KVMESH_TEST_ENV}")
