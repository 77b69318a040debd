# SPDX-License-Identifier: Apache-2.0
# Large single gets over tcp in one exchange (inline reads up to inline_read_max, 256 KiB): a
# storage runtime and a client in this process, then a second storage runtime; round trips,
# checksum passes and tcp reads of each get, the fallbacks (larger value, older authority, value
# not on the primary, corrupted replica), inline_read_max raised to 1 MiB (the attached form's own
# bound) and a get racing rewrites. Counts only, no timing.
add_test(NAME store_get_large COMMAND ${exe})
set_tests_properties(store_get_large PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
