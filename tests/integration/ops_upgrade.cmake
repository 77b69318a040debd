# SPDX-License-Identifier: Apache-2.0
# Hot upgrade of a kvmeshd daemon on a real Redis: hand-over of the memory to a successor with
# the same runtime id, every object read back, RSS sampled during the hand-over (ops_upgrade.c).
add_test(NAME integration_ops_upgrade COMMAND ${exe})
set_tests_properties(integration_ops_upgrade PROPERTIES LABELS integration TIMEOUT 300
  COST 12 ENVIRONMENT "${KVMESH_TEST_ENV}")
