# SPDX-License-Identifier: Apache-2.0
# The late-payload fence (docs/store.md "Late payloads"): a raw put at the primary whose
# reservation reaches its TTL while its payload lands (a test hook, no timing) fails cleanly and
# publishes nothing; the RPC payload sink counters read from the owner's /metrics.
add_test(NAME store_late_payload COMMAND ${exe})
set_tests_properties(store_late_payload PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
