# SPDX-License-Identifier: Apache-2.0
# The cold tier wired into a real runtime (cold_store.c): a 4x DRAM working set on a LocalDir
# device in a temporary directory, tcp transport, in-memory metadata.
add_test(NAME cold_store COMMAND ${exe})
set_tests_properties(cold_store PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
