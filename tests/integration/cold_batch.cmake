# SPDX-License-Identifier: Apache-2.0
# Batch restore in real runtimes (cold_batch.c): two storage runtimes with their own device, a
# client-only runtime, 64 cold-only objects of both owners in one batch get; each backend over
# tcp and shm, and a 5-slot staging pool that splits each remote group into rounds.
foreach(kind localdir extent)
  foreach(tp tcp shm)
    add_test(NAME cold_batch_${kind}_${tp} COMMAND ${exe} ${kind} ${tp})
    set_tests_properties(cold_batch_${kind}_${tp} PROPERTIES LABELS integration TIMEOUT 300
      COST 8 ENVIRONMENT "${KVMESH_TEST_ENV}")
  endforeach()
endforeach()
add_test(NAME cold_batch_split COMMAND ${exe} extent tcp split)
set_tests_properties(cold_batch_split PROPERTIES LABELS integration TIMEOUT 300
  COST 8 ENVIRONMENT "${KVMESH_TEST_ENV}")
