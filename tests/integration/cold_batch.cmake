# SPDX-License-Identifier: Apache-2.0
# Batch restore in real runtimes (cold_batch.c): two storage runtimes with their own device, a
# client-only runtime, 64 cold-only objects of both owners in one batch get. Both backends and
# both transports with three runs (LocalDir over tcp, ExtentStore over shm; ExtentStore over tcp
# with a 5-slot staging pool that splits each remote group into rounds), to keep CI short.
foreach(v "localdir;tcp" "extent;shm")
  list(GET v 0 kind)
  list(GET v 1 tp)
  add_test(NAME cold_batch_${kind}_${tp} COMMAND ${exe} ${kind} ${tp})
  set_tests_properties(cold_batch_${kind}_${tp} PROPERTIES LABELS integration TIMEOUT 300
    COST 8 ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
add_test(NAME cold_batch_split COMMAND ${exe} extent tcp split)
set_tests_properties(cold_batch_split PROPERTIES LABELS integration TIMEOUT 300
  COST 8 ENVIRONMENT "${KVMESH_TEST_ENV}")
