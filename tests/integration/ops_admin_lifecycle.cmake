# SPDX-License-Identifier: Apache-2.0
# `kvmesh admin drain|activate` and `segments drain|activate` against three kvmeshd daemons on
# a real Redis and a real etcd (ops_admin_lifecycle.c); ~35 s on an idle machine (heartbeat
# waits for each request, one daemon restart per backend).
add_test(NAME integration_ops_admin_lifecycle COMMAND ${exe})
set_tests_properties(integration_ops_admin_lifecycle PROPERTIES LABELS integration TIMEOUT 600
  COST 35 ENVIRONMENT "${KVMESH_TEST_ENV}")
