# SPDX-License-Identifier: Apache-2.0
# Hot-path metadata calls. MetadataOnly: proportional to the operations (asserted as such).
# EmbeddedWrh: background only; enabled automatically once the route mesh (route_mesh.c) is in
# the tree, since this build's route_dispatch.c serves MetadataOnly only.
add_test(NAME store_steady_metadata_only COMMAND ${exe} metadata_only)
set_tests_properties(store_steady_metadata_only PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
if(EXISTS ${CMAKE_SOURCE_DIR}/src/route/route_mesh.c)
  add_test(NAME store_steady_embedded_wrh COMMAND ${exe} embedded_wrh)
  set_tests_properties(store_steady_embedded_wrh PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endif()
