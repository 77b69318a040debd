# SPDX-License-Identifier: Apache-2.0
# The cold tier wired into a real runtime (cold_store.c): a 4x DRAM working set on a LocalDir
# or ExtentStore device in a temporary directory, tcp transport, in-memory metadata.
foreach(kind localdir extent)
  add_test(NAME cold_store_${kind} COMMAND ${exe} ${kind})
  set_tests_properties(cold_store_${kind} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "${KVMESH_TEST_ENV}")
endforeach()
foreach(mode restart pair)
  add_test(NAME cold_store_${mode} COMMAND ${exe} localdir ${mode})
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
