# SPDX-License-Identifier: Apache-2.0
# kill -9 of a device owner before it planned its PendingOffloads, replicas = 2
# (cold_resume_crash.c): a real Redis, routes in metadata; the restarted owner resumes the ops a
# replica owner planned, reading the surviving replica remotely; usage = files = the objects.
add_test(NAME cold_store_resume_crash COMMAND ${exe})
set_tests_properties(cold_store_resume_crash PROPERTIES LABELS integration TIMEOUT 180
  ENVIRONMENT "${KVMESH_TEST_ENV}")
