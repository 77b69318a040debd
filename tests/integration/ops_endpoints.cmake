# SPDX-License-Identifier: Apache-2.0
# The admin port of real kvmeshd processes (ops_endpoints.c): tracing-off answers, / content
# negotiation, /api, /cluster. And ops_status_page_source: src/obs/status_page.c is the
# generated form of src/obs/status_page.html (cmake -P src/obs/status_page_gen.cmake).
add_test(NAME integration_ops_endpoints COMMAND ${exe})
set_tests_properties(integration_ops_endpoints PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME ops_status_page_source
  COMMAND ${CMAKE_COMMAND} -DCHECK=ON -P ${CMAKE_SOURCE_DIR}/src/obs/status_page_gen.cmake)
set_tests_properties(ops_status_page_source PROPERTIES LABELS unit TIMEOUT 60)
