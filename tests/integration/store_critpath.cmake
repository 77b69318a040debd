# SPDX-License-Identifier: Apache-2.0
# Critical-path counts (round trips by stage, loop hand-offs, payload copies, checksum passes)
# of each operation kind on a 2-runtime cluster, over tcp and over shm. Counts only, no timing.
add_test(NAME store_critpath_tcp COMMAND ${exe} tcp)
add_test(NAME store_critpath_shm COMMAND ${exe} shm)
set_tests_properties(store_critpath_tcp store_critpath_shm PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
