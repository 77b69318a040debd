/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair_plan.h — the pure decisions of re-replication and of the replica handoff, without I/O,
 * shared by the store (repair.c, ops_publish.c) and the simulator (tests/sim/scen_repair.c), so
 * that the simulated protocol is the one the store runs (docs/reliability.md "Re-replication").
 *
 *   kvm_repair_plan      one route of an owner-scan page: whether it is under-replicated, and if
 *                        so which replica is the source (the first LIVE one, in route order: its
 *                        owner is the one runtime designated to copy) and which replica the copy
 *                        replaces (the first DEAD one);
 *   kvm_handoff_next     the route to publish, from the route looked up just before the CAS: the
 *                        moving replica replaced by the copy, everything else (content, length,
 *                        checksum, cold backing) as read; the CAS's precondition is the version of
 *                        that same lookup. When the route no longer lists the moving replica (an
 *                        overwrite or delete won, or another handoff moved it), nothing is
 *                        published and both the copy and the moving replica are reclaimed;
 *   kvm_handoff_outcome  what the handoff does with a CAS result: published (the moving replica
 *                        is released), look up and plan again (a conflict, bounded retries),
 *                        keep the copy (the CAS may have been applied: the reservation's expiry
 *                        asks the route before it frees anything), or reclaim the copy (refused).
 *
 * Ownership: inputs are borrowed; kvm_handoff_next fills a caller-initialized route that the
 * caller frees (kvm_route_free) whatever the result.
 */
#ifndef KVMESH_STORE_REPAIR_PLAN_H
#define KVMESH_STORE_REPAIR_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/route.h"

/* A replica's state as this runtime's membership snapshot sees it (repair.c rep_state). */
enum kvm_rep_state {
    KVM_REP_DEAD = 0,    /* owner not an ACTIVE/DRAINING member listing the segment */
    KVM_REP_LEAVING = 1, /* owner DRAINING: its drain moves the replica */
    KVM_REP_LIVE = 2,    /* owner ACTIVE and lists the segment */
};

enum kvm_repair_verdict {
    KVM_REPAIR_SKIP = 0,     /* tombstone, no hot replica, or every replica live / leaving */
    KVM_REPAIR_LOST = 1,     /* no readable replica left: not repairable */
    KVM_REPAIR_DRAINING = 2, /* only draining owners hold it: their drain moves it */
    KVM_REPAIR_OTHER = 3,    /* under-replicated; another runtime's replica is the source */
    KVM_REPAIR_COPY = 4,     /* under-replicated; this runtime copies src and replaces dead */
};

typedef struct kvm_repair_plan {
    uint32_t src;  /* index of the source replica (first LIVE) */
    uint32_t dead; /* index of the replica the copy replaces (first DEAD) */
} kvm_repair_plan_t;

/* st[j] is the state of r->replicas[j]. `plan` is filled for OTHER and COPY. */
enum kvm_repair_verdict kvm_repair_plan(const kvm_route_t *r, const enum kvm_rep_state *st,
                                        const kvm_runtime_id_t *self, kvm_repair_plan_t *plan);

/* cur: the route just looked up (NULL when absent). fresh: the copy's slot (owner, segment,
 * offset; its length and checksum are taken from cur). Returns 0 with *next ready to CAS against
 * cur->version; 1 when superseded (reclaim the copy and release `moving`; *next untouched);
 * 2 when cur already lists the copy (an earlier attempt applied although its answer was a
 * conflict: a retried or duplicated request): published, do what a successful CAS does and
 * never release the copy; KVMESH_ENOMEM. */
int kvm_handoff_next(const kvm_route_t *cur, const kvm_hot_replica_t *moving,
                     const kvm_hot_replica_t *fresh, kvm_route_t *next);

enum kvm_handoff_step {
    KVM_HANDOFF_PUBLISHED = 0, /* release the moving replica; done */
    KVM_HANDOFF_RETRY = 1,     /* look the route up again and re-plan (kvm_handoff_next) */
    KVM_HANDOFF_KEEP = 2,      /* may have been applied: keep the copy, do not release it */
    KVM_HANDOFF_RECLAIM = 3,   /* refused: release the copy */
};

/* rc: the CAS result; *tries counts the conflicts of this handoff (incremented here on a
 * conflict; a conflict retries while *tries <= max_retries, then reclaims). */
enum kvm_handoff_step kvm_handoff_outcome(int rc, uint32_t *tries, uint32_t max_retries);

/* Whether a CAS result means "not applied" (the store's cas_refused): conflict, invalid, out of
 * memory, quota, too big, and EAGAIN (the authority's "not now", answered without applying:
 * repair_plan.c). Any other failure may have been applied. */
bool kvm_cas_refused(int rc);

#endif
