/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_history.h — the per-key history checker of route lookups and CAS, shared by the
 * simulator (tests/sim/scen_route_mesh.c, virtual time) and the real-process tests
 * (tests/integration/route_proc.c, monotonic time). Pure: it judges a finished history.
 *
 * An operation is a lookup or a CAS on key `key` (a small index chosen by the caller) with
 * begin/end stamps in one clock (any unit, same for all ops). Versions are packed route
 * versions (fencing_token << 32 | primary_sequence, so that they order like route versions);
 * 0 = none.
 *   CAS:    value = the unique value id written; expected = the predecessor asked for;
 *           on success (status 0, "acknowledged") version = the new version.
 *   lookup: on status 0 version/value = what was read; on KVMESH_ENOENT version 0.
 *
 * Checks (route_hist_check), per key:
 *   - an acknowledged CAS produced a version above its expected predecessor;
 *   - no two acknowledged CAS from one predecessor (no double success) and no two producing
 *     one version; acknowledged versions order like real time and each one's predecessor is
 *     >= every earlier acknowledged version (one linear chain: nothing acknowledged is lost);
 *   - a successful lookup never returns a version older than an acknowledged CAS that completed
 *     before the lookup began (so final reads after the traffic see the newest acknowledged
 *     version or a later one), and a version an acknowledged CAS produced is read with that
 *     CAS's value;
 *   - no lookup fails with KVMESH_ECORRUPT (a protocol conflict), except on key
 *     `corrupt_ok_key` (pass UINT64_MAX for none).
 *
 * Ownership: the caller owns the op array; route_hist_check writes the first violation found
 * into msg (cap bytes) and returns KVMESH_ECORRUPT, or returns 0.
 */
#ifndef KVMESH_TESTS_SUPPORT_ROUTE_HISTORY_H
#define KVMESH_TESTS_SUPPORT_ROUTE_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum route_hist_kind { ROUTE_HIST_LOOKUP = 1, ROUTE_HIST_CAS = 2 };

typedef struct route_hist_op {
    uint32_t kind;   /* enum route_hist_kind */
    uint32_t client; /* who issued it (for messages) */
    uint64_t key;
    uint64_t value;    /* CAS: value written; lookup: value read */
    uint64_t expected; /* CAS: predecessor version asked for */
    uint64_t version;  /* CAS: new version when acknowledged; lookup: version read */
    int status;        /* 0 or a negative KVMESH_E* code */
    bool done;         /* completed (an op still in flight is ignored) */
    uint64_t begin, end;
} route_hist_op_t;

/* Stamps divided by `unit` in messages (e.g. 1000000 for ns -> ms). */
int route_hist_check(const route_hist_op_t *ops, size_t n, uint64_t n_keys, uint64_t corrupt_ok_key,
                     uint64_t unit, char *msg, size_t cap);

#endif
