# SPDX-License-Identifier: Apache-2.0
# The cold tier wired into a real runtime (cold_store.c): a 4x DRAM working set on a LocalDir
# or ExtentStore device in a temporary directory, tcp transport, in-memory metadata.
foreach(kind localdir extent)
  add_test(NAME cold_store_${kind} COMMAND ${exe} ${kind})
  set_tests_properties(cold_store_${kind} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
# Remote restore through the owner's staging pool over each transport (cold_store.c "staging").
foreach(tp tcp shm)
  add_test(NAME cold_store_staging_${tp} COMMAND ${exe} localdir staging ${tp})
  set_tests_properties(cold_store_staging_${tp} PROPERTIES LABELS integration TIMEOUT 300
    COST 16 ENVIRONMENT "${KVMESH_TEST_ENV};KVMESH_TEST_COLD_LATE_ACKS=2")
endforeach()
# ExtentStore cleaning in a running runtime: 1 MiB segments, churn, segment files shrink.
add_test(NAME cold_store_extent_clean COMMAND ${exe} extent clean)
set_tests_properties(cold_store_extent_clean PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME cold_store_restart COMMAND ${exe} localdir restart)
# pair runs cold_write_through on A (cold_store.c "durable"): a put waits for B's offload too.
add_test(NAME cold_store_pair COMMAND ${exe} localdir pair durable)
foreach(mode restart pair)
  set_tests_properties(cold_store_${mode} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()

# `kvmesh demo --cold` on both backends (cold_demo_check.cmake checks its summary).
foreach(kind localdir extent)
  add_test(NAME kvmesh_demo_cold_${kind}
    COMMAND ${CMAKE_COMMAND} -DKVMESH=$<TARGET_FILE:kvmesh_tool> -DKIND=${kind}
            -P ${CMAKE_SOURCE_DIR}/tests/integration/cold_demo_check.cmake)
  set_tests_properties(kvmesh_demo_cold_${kind} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
