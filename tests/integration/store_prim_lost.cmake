# SPDX-License-Identifier: Apache-2.0
# A put at the primary whose answer never comes (the owner's loop blocked by the test): two
# runtimes in the process on memory:// metadata over tcp loopback; a few seconds.
add_test(NAME store_prim_lost COMMAND ${exe})
set_tests_properties(store_prim_lost PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
