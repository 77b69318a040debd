# SPDX-License-Identifier: Apache-2.0
# A put whose writer process is killed between its quota claim and its route CAS is replayed by
# another runtime's reconciler (tests/integration/tenant_replay.c), on a real Redis and a real
# etcd (each started by the test), with MetadataOnly routes (the writer claims) and EmbeddedWrh
# routes (the primary claims in its CAS).
foreach(backend redis etcd)
  foreach(mode metadata_only embedded_wrh)
    add_test(NAME tenant_replay_${backend}_${mode}
      COMMAND itest_tenant_replay ${backend} ${mode})
    set_tests_properties(tenant_replay_${backend}_${mode} PROPERTIES LABELS integration
      TIMEOUT 180 ENVIRONMENT "${KVMESH_TEST_ENV}")
  endforeach()
endforeach()
