# SPDX-License-Identifier: Apache-2.0
# etcd-specific backend tests (real etcd processes on free loopback ports), one ctest each.
foreach(t basic failover unreachable killrestart stopped cluster resend txn_sockets)
  add_test(NAME meta_etcd_${t} COMMAND ${exe} ${t})
  set_tests_properties(meta_etcd_${t} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
