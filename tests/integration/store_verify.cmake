# SPDX-License-Identifier: Apache-2.0
# The verify_reads policies against a corrupted replica, over tcp and over shm (where the
# checksums of remote reads and writes come from the transport's fused copy + hash).
add_test(NAME integration_store_verify COMMAND ${exe} tcp)
add_test(NAME store_verify_shm COMMAND ${exe} shm)
set_tests_properties(integration_store_verify store_verify_shm PROPERTIES LABELS integration
  TIMEOUT 600 ENVIRONMENT "${KVMESH_TEST_ENV}")
