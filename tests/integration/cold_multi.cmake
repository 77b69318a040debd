# SPDX-License-Identifier: Apache-2.0
# Several cold devices in one runtime (cold_multi.c): two LocalDir devices, 4x DRAM, objects on
# both (used = files), every object byte-exact, a drained device takes no new offloads. The
# `pin` run (placement pinned to device 0, test hook) must fail at the check that both devices
# hold bytes: it shows the test sees it (matched on that check's message, not any failure).
add_test(NAME cold_store_multi COMMAND ${exe})
set_tests_properties(cold_store_multi PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${KVMESH_TEST_ENV}")
add_test(NAME cold_store_multi_pinned_is_caught COMMAND ${exe} pin)
set_tests_properties(cold_store_multi_pinned_is_caught PROPERTIES LABELS integration TIMEOUT 120
  PASS_REGULAR_EXPRESSION "CHECK failed [^ ]+: d0.used > 0 && d1.used > 0"
  ENVIRONMENT "${KVMESH_TEST_ENV}")
