# SPDX-License-Identifier: Apache-2.0
# Restart of every route authority of a deployment (store_restart_single.c): real kvmeshd
# processes and the kvmesh CLI on a real redis-server / etcd. single: one daemon restarted after
# SIGTERM and after SIGKILL; rolling: three daemons, each SIGKILLed and replaced in turn.
add_test(NAME store_restart_single_redis COMMAND ${exe} redis)
add_test(NAME store_restart_single_etcd COMMAND ${exe} etcd)
add_test(NAME store_restart_rolling_redis COMMAND ${exe} redis rolling)
add_test(NAME store_restart_rolling_etcd COMMAND ${exe} etcd rolling)
set_tests_properties(store_restart_single_redis store_restart_single_etcd
  store_restart_rolling_redis store_restart_rolling_etcd PROPERTIES LABELS integration
  TIMEOUT 300 COST 15 ENVIRONMENT "${KVMESH_TEST_ENV}")
