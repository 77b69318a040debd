# SPDX-License-Identifier: Apache-2.0
# Remote restore across processes (cold_remote_proc.c): the cold device's owner in a child
# process, a client-only reader here, a real Redis; the transport forced to tcp or shm.
foreach(tp tcp shm)
  add_test(NAME cold_remote_proc_${tp} COMMAND ${exe} ${tp})
  set_tests_properties(cold_remote_proc_${tp} PROPERTIES LABELS integration TIMEOUT 120
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
