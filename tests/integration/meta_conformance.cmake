# SPDX-License-Identifier: Apache-2.0
# ctest entries of the metadata conformance suite: one per backend, same executable, the backend
# chosen by argv[1]. KVMESH_META_CONF_MS is the duration of each concurrent-writer phase.
function(kvmesh_meta_conformance backend)
  add_test(NAME meta_conformance_${backend} COMMAND itest_meta_conformance ${backend})
  set_tests_properties(meta_conformance_${backend} PROPERTIES LABELS integration TIMEOUT 600
    ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_META_CONF_MS=5000")
endfunction()

kvmesh_meta_conformance(memory)

# Redis backend: uncomment the next line.
kvmesh_meta_conformance(redis)

# etcd backend: uncomment the next line.
kvmesh_meta_conformance(etcd)
