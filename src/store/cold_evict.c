// SPDX-License-Identifier: Apache-2.0
/*
 * cold_evict.c — last-hot eviction (cold_glue.h kvm_cold_evict_last, kvm_cold_pins_last) and the
 * eviction-triggered offload of cold_offload_mode = evict (kvm_cold_claims, kvm_cold_evict_claim;
 * docs/cold.md "Offload modes"). Owns struct claim and its list g->claims.
 */
#include <stdlib.h>

#include "store/cold_int.h"

int kvm_cold_evict_last(kvm_rt_t *rt, const kvm_ident_t *ident, const kvm_hot_replica_t *rep,
                        kvm_cold_evict_cb cb, void *arg)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c || g->open_cb)
        return KVMESH_ENOTSUP;
    return cold_evict(g->c, ident, rep, cb, arg);
}

bool kvm_cold_pins_last(kvm_rt_t *rt, const kvm_route_t *route)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    /* With no job queued or in flight and no remote writer's commit still being looked up (its
     * offload is queued when the lookup returns) the backing is stale (never queued, or parked
     * after its retries): the replica is evicted as a cache object and a later resumption finds
     * the route changed and releases the op. */
    return g && g->c && route->cold.kind == KVM_COLD_PENDING_OFFLOAD &&
           kvm_id128_equal(&route->cold.owner, &rt->self.id) &&
           (cold_offload_pending(g->c) > 0 || g->commit_lookups > 0);
}

/* ---- eviction-triggered offload (cold_offload_mode = evict) ---------------------------------- */

/* One claimed victim: route CAS adding a PendingOffload of a fresh cold op on this runtime's
 * device (the replica stays) -> urgent offload job -> last-hot eviction (cold_evict) -> cb. */
struct claim {
    struct kvm_cold *g;
    kvm_ident_t ident; /* owned */
    kvm_hot_replica_t rep;
    kvm_route_t next; /* the claimed route (its cold op, content op, length, checksum) */
    kvm_cold_evict_cb cb;
    void *arg;
    bool in_route; /* its route CAS is in flight (holds g->refs) */
    bool listed;   /* in g->claims */
    struct claim *next_c, *prev_c;
};

static void claim_unlink(struct claim *cl)
{
    if (!cl->listed)
        return;
    KVM_COLD_LIST_UNLINK(cl->g->claims, cl, next_c, prev_c);
    cl->listed = false;
}

static void claim_free(struct claim *cl)
{
    claim_unlink(cl);
    kvm_ident_free(&cl->ident);
    kvm_route_free(&cl->next);
    free(cl);
}

static void claim_finish(struct claim *cl, int rc)
{
    kvm_cold_evict_cb cb = cl->cb;
    void *arg = cl->arg;
    claim_free(cl);
    cb(arg, rc);
}

static void claim_evicted(void *arg, int rc)
{
    claim_finish(arg, rc);
}

static void claim_offloaded(void *arg, int rc)
{
    struct claim *cl = arg;
    struct kvm_cold *g = cl->g;
    if (rc == 0)
        rc = cold_evict(g->c, &cl->ident, &cl->rep, claim_evicted, cl);
    if (rc)
        claim_finish(cl, rc); /* the slot goes back to the clock; a later pass retries */
}

static void claim_cased(void *arg, int rc, const kvm_route_t *now)
{
    (void)now;
    struct claim *cl = arg;
    struct kvm_cold *g = cl->g;
    cl->in_route = false;
    if (g->closed || !g->c) {
        claim_free(cl); /* closing: the slot's callback no longer runs */
        kvm_cold_unref(g);
        return;
    }
    kvm_cold_unref(g); /* the runtime holds another reference while open */
    if (rc == 0) {
        cold_job_t job = kvm_cold_route_job(&cl->next, true);
        job.ident = &cl->ident;
        job.done = claim_offloaded;
        job.done_arg = cl;
        rc = cold_offload_submit(g->c, &job);
    }
    if (rc)
        claim_finish(cl, rc);
}

bool kvm_cold_claims(kvm_rt_t *rt, const kvm_route_t *r)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c || g->open_cb || g->closed || !rt->route || !rt->cfg.cold_offload ||
        rt->cfg.cold_offload_mode != KVM_STORE_COLD_MODE_EVICT)
        return false;
    if (kvm_route_is_tombstone(r) || r->cold.kind != KVM_COLD_NONE || r->n_replicas != 1 ||
        !kvm_id128_equal(&r->replicas[0].owner, &rt->self.id))
        return false;
    kvm_tier_id_t dev;
    return cold_place_owned(g->c, r->length, &rt->self.id, 1, &dev, NULL) == 0 &&
           cold_offload_pending(g->c) < rt->cfg.cold_queue;
}

int kvm_cold_evict_claim(kvm_rt_t *rt, const kvm_route_t *r, const kvm_hot_replica_t *rep,
                         kvm_cold_evict_cb cb, void *arg)
{
    struct kvm_cold *g = rt->cold;
    if (!kvm_cold_claims(rt, r))
        return KVMESH_ENOTSUP;
    struct claim *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return KVMESH_ENOMEM;
    kvm_route_init(&cl->next);
    if (kvm_ident_copy(&cl->ident, &r->ident) != 0 || kvm_route_copy(&cl->next, r) != 0) {
        claim_free(cl);
        return KVMESH_ENOMEM;
    }
    cl->g = g;
    cl->rep = *rep;
    cl->cb = cb;
    cl->arg = arg;
    kvm_tier_id_t dev;
    if (cold_place_owned(g->c, r->length, &rt->self.id, 1, &dev, NULL) != 0) {
        claim_free(cl);
        return KVMESH_ENOTSUP;
    }
    kvm_op_id_t cold_op = kvm_rt_next_op_id(rt);
    kvm_cold_backing_pending(&cl->next.cold, &cold_op, &cl->next.content_op, &rt->self.id, &dev,
                             cl->next.length, cl->next.checksum);
    KVM_COLD_LIST_PUSH(g->claims, cl, next_c, prev_c);
    cl->listed = true;
    cl->in_route = true;
    g->refs++;
    int rc = route_cas(rt->route, &r->version, &cl->next, claim_cased, cl);
    if (rc) {
        g->refs--;
        claim_free(cl);
    }
    return rc;
}

void kvm_cold_claims_close(struct kvm_cold *g)
{
    while (g->claims) { /* their callbacks no longer run; a CAS in flight frees its own */
        struct claim *cl = g->claims;
        claim_unlink(cl);
        if (!cl->in_route)
            claim_free(cl);
    }
}
