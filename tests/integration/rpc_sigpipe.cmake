# SPDX-License-Identifier: Apache-2.0
# ctest entry for itest_rpc_sigpipe: RPC writes to a closed unix-socket peer with SIGPIPE at
# SIG_DFL and unblocked on the loop's thread; the process survives and the writes fail.
add_test(NAME integration_rpc_sigpipe COMMAND ${exe})
set_tests_properties(integration_rpc_sigpipe PROPERTIES LABELS "integration;rpc" TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
