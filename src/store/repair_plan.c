/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair_plan.c — the pure decisions of re-replication and of the replica handoff
 * (repair_plan.h): which routes to copy and from where, the route a handoff publishes and its
 * precondition, and what a CAS result means for the copy. No I/O, no runtime state.
 */
#include "store/repair_plan.h"

#include "core/util.h"

enum kvm_repair_verdict kvm_repair_plan(const kvm_route_t *r, const enum kvm_rep_state *st,
                                        const kvm_runtime_id_t *self, kvm_repair_plan_t *plan)
{
    if (kvm_route_is_tombstone(r) || r->n_replicas == 0)
        return KVM_REPAIR_SKIP;
    KVM_ASSERT(r->n_replicas <= KVM_MAX_REPLICAS);
    int first = -1, dead = -1;
    uint32_t readable = 0;
    for (uint32_t j = 0; j < r->n_replicas; j++) {
        readable += st[j] != KVM_REP_DEAD;
        if (st[j] == KVM_REP_LIVE && first < 0)
            first = (int)j;
        if (st[j] == KVM_REP_DEAD && dead < 0)
            dead = (int)j;
    }
    if (dead < 0)
        return KVM_REPAIR_SKIP; /* every replica live (or being moved by its owner's drain) */
    if (readable == 0)
        return KVM_REPAIR_LOST;
    if (first < 0)
        return KVM_REPAIR_DRAINING;
    plan->src = (uint32_t)first;
    plan->dead = (uint32_t)dead;
    return kvm_id128_equal(&r->replicas[first].owner, self) ? KVM_REPAIR_COPY : KVM_REPAIR_OTHER;
}

int kvm_handoff_next(const kvm_route_t *cur, const kvm_hot_replica_t *moving,
                     const kvm_hot_replica_t *fresh, kvm_route_t *next)
{
    if (cur && !kvm_route_is_tombstone(cur) && kvm_route_find_replica(cur, fresh) >= 0)
        return 2; /* the copy is listed: an earlier attempt of ours applied (its answer was a
                     conflict from a retried or duplicated request) */
    if (!cur || kvm_route_is_tombstone(cur) || kvm_route_find_replica(cur, moving) < 0)
        return 1; /* nothing references the moving replica any more */
    if (kvm_route_copy(next, cur) != 0)
        return KVMESH_ENOMEM;
    kvm_route_remove_replica(next, moving);
    kvm_hot_replica_t nr = {.owner = fresh->owner,
                            .segment = fresh->segment,
                            .offset = fresh->offset,
                            .length = cur->length,
                            .checksum = cur->checksum};
    kvm_route_add_replica(next, &nr);
    return 0;
}

/* EAGAIN: a fenced primary answers it only without applying the CAS (src/route/route_auth.c
 * on_cas: the entry busy mirroring an earlier CAS, a dirty entry whose repair it starts first,
 * a claim holding the key, a claim-carrying CAS without its claim; route_claim.c: the claim
 * table full), and the route client sends the CAS again after it, one attempt in flight at a
 * time, ending the op on any other answer or on a lost one (ETIMEDOUT); MetadataOnly maps a
 * backend's EAGAIN after its transaction was sent to EUNAVAILABLE. So an EAGAIN result was
 * never applied. */
bool kvm_cas_refused(int rc)
{
    return rc == KVMESH_ECONFLICT || rc == KVMESH_EINVAL || rc == KVMESH_ENOMEM ||
           rc == KVMESH_EQUOTA || rc == KVMESH_ETOOBIG || rc == KVMESH_EAGAIN;
}

enum kvm_handoff_step kvm_handoff_outcome(int rc, uint32_t *tries, uint32_t max_retries)
{
    if (rc == 0)
        return KVM_HANDOFF_PUBLISHED;
    if (rc == KVMESH_ECONFLICT && ++*tries <= max_retries)
        return KVM_HANDOFF_RETRY;
    if (!kvm_cas_refused(rc))
        return KVM_HANDOFF_KEEP;
    return KVM_HANDOFF_RECLAIM;
}
