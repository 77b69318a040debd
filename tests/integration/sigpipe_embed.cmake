# SPDX-License-Identifier: Apache-2.0
# The library is safe to embed with default signal dispositions (docs/api.md, "Signals"):
# every library thread blocks SIGPIPE, and runtimes survive peers and a real redis-server
# closing connections mid-write (the test binary re-executed as peer runtime processes).
add_test(NAME integration_sigpipe_embed_masks COMMAND ${exe} masks)
add_test(NAME integration_sigpipe_embed_chaos COMMAND ${exe} chaos)
set_tests_properties(integration_sigpipe_embed_masks integration_sigpipe_embed_chaos PROPERTIES
  LABELS integration TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
