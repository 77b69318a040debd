# SPDX-License-Identifier: Apache-2.0
# Background re-replication: 3 runtime processes (the test binary re-executed with --runtime) and
# an in-process client, against a real redis-server and a real etcd started by the test; an
# owner killed with SIGKILL, or drained.
foreach(backend redis etcd)
  foreach(how kill drain)
    set(name store_rereplicate_${backend})
    if(how STREQUAL "drain")
      set(name store_rereplicate_drain_${backend})
    endif()
    add_test(NAME ${name} COMMAND ${exe} ${backend} ${how})
    set_tests_properties(${name} PROPERTIES LABELS integration TIMEOUT 300
      ENVIRONMENT "${KVMESH_TEST_ENV}")
  endforeach()
endforeach()
