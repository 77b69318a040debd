# SPDX-License-Identifier: Apache-2.0
# Peer RPC between runtimes of one host over a unix socket (rpc_local = unix): a storage runtime
# and a client in this process; which socket the client's calls took (kvmesh_transport_operations_
# total{transport="unix"|"tcp",operation="rpc_send"}) with both on, both off, another network
# namespace advertised, a peer without the record fields, and a socket that cannot be connected.
# Counts only, no timing.
add_test(NAME store_rpc_local COMMAND ${exe})
set_tests_properties(store_rpc_local PROPERTIES LABELS integration
  TIMEOUT 300 ENVIRONMENT "${KVMESH_TEST_ENV}")
