# SPDX-License-Identifier: Apache-2.0
# Hot-path metadata calls. MetadataOnly: proportional to the operations (asserted as such).
# EmbeddedWrh: background only (asserted independent of the operation count).
add_test(NAME store_steady_metadata_only COMMAND ${exe} metadata_only)
set_tests_properties(store_steady_metadata_only PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME store_steady_embedded_wrh COMMAND ${exe} embedded_wrh)
set_tests_properties(store_steady_embedded_wrh PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
