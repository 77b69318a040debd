# SPDX-License-Identifier: Apache-2.0
# A route primary closes while a writer's quota claim waits in its tenant layer (EmbeddedWrh, a
# real redis-server, the primary's metadata behind a loopback proxy): the claim is answered and
# freed (ASan: no leak), the writer's put ends. About 5 s.
add_test(NAME tenant_claim_close COMMAND ${exe})
set_tests_properties(tenant_claim_close PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
