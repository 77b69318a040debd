# SPDX-License-Identifier: Apache-2.0
# The Redis metadata backend with SIGPIPE at SIG_DFL on the thread running its loop: a real
# redis-server stopped and killed mid-write, and a listener that resets every connection.
add_test(NAME meta_redis_sigpipe COMMAND ${exe})
set_tests_properties(meta_redis_sigpipe PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
