# SPDX-License-Identifier: Apache-2.0
# Batch gets over tcp whose items' bytes come with the lookups' answers (batch inline reads): a
# storage runtime and a client in this process, then a second storage runtime; round trips,
# checksum passes and tcp reads of each batch, the bounds (items past 64 KiB, past 1 MiB a
# batch), a declining or bounded authority, exact per-item results (missing, short buffer,
# a value off its primary, a corrupted replica). Counts only, no timing.
add_test(NAME store_get_batch_inline COMMAND ${exe})
set_tests_properties(store_get_batch_inline PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
