# SPDX-License-Identifier: Apache-2.0
# The CLI's peer clients (tools/kvmesh/peers.c, compiled into the test) against a loopback peer
# that closes mid-answer, with SIGPIPE at SIG_DFL: every call fails with a message, no signal.
target_sources(${exe} PRIVATE ${CMAKE_SOURCE_DIR}/tools/kvmesh/peers.c)
target_include_directories(${exe} PRIVATE ${CMAKE_SOURCE_DIR}/tools/kvmesh)
add_test(NAME integration_cli_peer_sigpipe COMMAND ${exe})
set_tests_properties(integration_cli_peer_sigpipe PROPERTIES LABELS "integration;cli" TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
