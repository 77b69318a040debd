# SPDX-License-Identifier: Apache-2.0
# The status page in headless Chromium over 3 kvmeshd processes on a real redis-server and an
# application runtime under a bounded load (ops_status_page.c). Screenshots are saved in
# <build>/test-artifacts/ (status-page-under-load.png, status-page.png,
# status-page-application.png).
add_test(NAME integration_ops_status_page COMMAND ${exe})
set_tests_properties(integration_ops_status_page PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "${KVMESH_TEST_ENV}")
