// SPDX-License-Identifier: Apache-2.0
/*
 * cold_place.c — the store's write and replace paths into the cold tier (cold_glue.h; docs/cold.md
 * "Store wiring", "Several devices"): the device view as the store reads it (per-owner sums),
 * placement of a write's PendingOffload (this runtime's devices first, then a replica owner's),
 * queuing the offload after a publication or after a remote writer's commit (struct
 * committed_ctx), and the reclaim of a replaced value's cold copy planned before the CAS and
 * settled after it (struct reclaim_ctx, struct gate_ctx; the list g->reclaims).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "store/cold_int.h"
#include "store/cold_resume.h"

bool kvm_cold_has_device(kvm_rt_t *rt)
{
    return kvm_cold_dev(rt) != NULL;
}

_Static_assert(KVM_COLD_VIEW_OWNERS_MAX >= COLD_DEVICES_MAX, "one sum per device of a view");

int kvm_cold_owner_sums(kvm_rt_t *rt, kvm_cold_owner_sum_t *out, size_t cap)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c)
        return -1;
    const cold_device_t *v;
    size_t nv = cold_view_list(g->c, &v), n = 0;
    int worst[KVM_COLD_VIEW_OWNERS_MAX] = {0};
    for (size_t i = 0; i < nv; i++) {
        size_t j = 0;
        while (j < n && !kvm_id128_equal(&out[j].owner, &v[i].owner))
            j++;
        if (j == n) {
            if (n == cap || n == KVM_COLD_VIEW_OWNERS_MAX)
                continue;
            out[n++] = (kvm_cold_owner_sum_t){.owner = v[i].owner};
        }
        out[j].devices++;
        out[j].capacity += v[i].capacity;
        out[j].used += v[i].used;
        out[j].reserved += v[i].reserved;
        if ((int)v[i].health > worst[j]) {
            worst[j] = (int)v[i].health;
            out[j].health = cold_dev_health_name(v[i].health);
        }
    }
    return (int)n;
}

/* Tests only (kvm_cold_test_skip_offload): published PendingOffloads on this process's devices
 * are not queued, as if the process died right after the route CAS. */
static atomic_bool skip_offload;

void kvm_cold_test_skip_offload(bool on)
{
    atomic_store(&skip_offload, on);
}

/* ---- placement of a write's cold copy ------------------------------------------------------- */

/* Tests only (kvm_cold_test_pin_device0): local placement always picks device 0. */
static atomic_bool pin_dev0;

void kvm_cold_test_pin_device0(bool on)
{
    atomic_store(&pin_dev0, on);
}

/* Placement among this runtime's own devices: the eligible one with the most free bytes
 * (cold_place_owned; ties to the smaller id). */
static int place_local(struct kvm_cold *g, uint64_t len, kvm_tier_id_t *dev)
{
    if (g->ndev > 1 && atomic_load(&pin_dev0)) {
        const cold_device_t *d = cold_view_find(g->c, &g->devs[0].id);
        if (!d || !cold_device_fits(d, len))
            return KVMESH_ENOSPC;
        *dev = d->id;
        return 0;
    }
    return cold_place_owned(g->c, len, &g->rt->self.id, 1, dev, NULL);
}

/* The refusal of a write-through put that got no cold backing: why no device took it. */
static int no_backing_err(struct kvm_cold *g, const kvm_route_t *next, bool local)
{
    kvm_tier_id_t best;
    const cold_device_t *d =
        place_local(g, next->length, &best) == 0 ? cold_view_find(g->c, &best) : NULL;
    if (!d && g->ndev > 0)
        d = cold_view_find(g->c, &g->devs[0].id);
    if (local && d && cold_device_fits(d, next->length) &&
        cold_offload_pending(g->c) >= g->rt->cfg.cold_queue)
        return kvm_errf(KVMESH_EAGAIN,
                        "cold_write_through: the cold offload queue is full (cold_queue = %u); "
                        "retry the put later or raise cold_queue",
                        g->rt->cfg.cold_queue);
    if (local && d && d->health == COLD_DEV_HEALTHY && d->schedulable &&
        d->lifecycle == COLD_DEV_ACTIVE)
        return kvm_errf(KVMESH_ENOSPC,
                        "cold_write_through: the cold device has no room for %" PRIu64
                        " bytes (capacity %" PRIu64 ", used %" PRIu64 ", reserved %" PRIu64
                        "); remove objects or raise cold_capacity",
                        next->length, d->capacity, d->used, d->reserved);
    return kvm_errf(KVMESH_EUNAVAILABLE,
                    "cold_write_through: no healthy, schedulable cold device with room belongs "
                    "to a runtime holding a replica of this object%s; retry the put later",
                    local ? "" : " (this runtime holds none)");
}

int kvm_cold_backing_for(kvm_rt_t *rt, kvm_route_t *next)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c || g->open_cb || !rt->cfg.cold_offload || next->n_replicas == 0 ||
        rt->cfg.cold_offload_mode == KVM_STORE_COLD_MODE_EVICT)
        return 0; /* (evict mode: the eviction claims its victims, kvm_cold_evict_claim) */
    /* The device of a runtime that holds one of the new replicas (its read_hot copies from its
     * own segment): this runtime's own when it holds one, else the replica owners' devices. */
    kvm_runtime_id_t owners[KVM_MAX_REPLICAS];
    size_t n = 0;
    bool local = false;
    for (uint32_t i = 0; i < next->n_replicas; i++) {
        owners[n++] = next->replicas[i].owner;
        local = local || kvm_id128_equal(&next->replicas[i].owner, &rt->self.id);
    }
    kvm_tier_id_t dev;
    kvm_runtime_id_t owner;
    /* this runtime's own devices first: the one with the most room (cold_place_owned) */
    if (local && cold_offload_pending(g->c) < rt->cfg.cold_queue &&
        place_local(g, next->length, &dev) == 0) {
        owner = rt->self.id;
    } else if (cold_place_owned(g->c, next->length, owners, n, &dev, &owner) != 0 ||
               (kvm_id128_equal(&owner, &rt->self.id) &&
                cold_offload_pending(g->c) >= rt->cfg.cold_queue)) {
        /* stays hot-only (a cache object), or, write-through, the put fails before its CAS */
        return rt->cfg.cold_write_through ? no_backing_err(g, next, local) : 0;
    }
    kvm_op_id_t cold_op = kvm_rt_next_op_id(rt);
    kvm_cold_backing_pending(&next->cold, &cold_op, &next->content_op, &owner, &dev, next->length,
                             next->checksum);
    return 0;
}

void kvm_cold_published(kvm_rt_t *rt, const kvm_route_t *now)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c || g->open_cb)
        return;
    kvm_cold_report_pressure(g);
    /* a replica owner records the intent of another runtime's device (resumed there after a
     * crash that came before its own plan: cold_resume.h) */
    kvm_cold_note_pending(rt, g->c, now);
    if (now && now->cold.kind == KVM_COLD_PENDING_OFFLOAD && !atomic_load(&skip_offload) &&
        kvm_id128_equal(&now->cold.owner, &rt->self.id) && kvm_cold_own_dev(g, &now->cold.tier)) {
        /* write-through: the put waits for it (kvm_cold_durable_wait) */
        cold_job_t job = kvm_cold_route_job(now, g->rt->cfg.cold_write_through);
        (void)cold_offload_submit(g->c, &job); /* EAGAIN: stays hot (see kvm_cold_pins_last) */
    }
}

struct committed_ctx {
    struct kvm_cold *g;
};

static void committed_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct committed_ctx *c = arg;
    struct kvm_cold *g = c->g;
    free(c);
    KVM_ASSERT(g->commit_lookups > 0);
    g->commit_lookups--;
    if (rc == 0 && !g->closed && g->rt->cold == g)
        kvm_cold_published(g->rt, r);
    kvm_cold_unref(g);
}

void kvm_cold_slot_committed(kvm_rt_t *rt, const kvm_ident_t *ident)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c || g->open_cb || !rt->route)
        return;
    struct committed_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->g = g;
    g->refs++;
    g->commit_lookups++;
    if (route_lookup(rt->route, ident, committed_looked_up, c) != 0) {
        free(c);
        g->commit_lookups--;
        kvm_cold_unref(g);
    }
}

/* ---- the reclaim of a replaced value's cold copy ------------------------------------------ */

struct reclaim_ctx {
    struct kvm_cold *g;
    kvm_op_id_t reclaim_op;
    void (*on_close)(struct reclaim_ctx *r); /* NULL: free(r) */
    struct reclaim_ctx *next, *prev;         /* g->reclaims */
};

static void reclaim_free(struct reclaim_ctx *r)
{
    KVM_COLD_LIST_UNLINK(r->g->reclaims, r, next, prev);
    free(r);
}

static void reclaim_ran(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)rc, (void)v; /* KVMESH_EAGAIN and errors: the record stays due; reconciliation runs it */
    reclaim_free(arg);
}

static struct reclaim_ctx *reclaim_new(struct kvm_cold *g, const kvm_op_id_t *reclaim_op)
{
    struct reclaim_ctx *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->g = g;
    r->reclaim_op = *reclaim_op;
    KVM_COLD_LIST_PUSH(g->reclaims, r, next, prev);
    return r;
}

static void reclaim_cancelled(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)rc, (void)v; /* refused (not PLANNED any more) or failed: the record stays due */
    reclaim_free(arg);
}

struct gate_ctx {
    struct reclaim_ctx rc; /* first: listed in g->reclaims (freed at close) */
    kvm_op_t *op;
    struct kvm_item *it;
    kvm_cold_gate_cb cont;
    kvm_op_id_t of;
};

/* At close the plan's callback no longer runs: the item fails without its CAS. */
static void gate_closed(struct reclaim_ctx *r)
{
    struct gate_ctx *c = (struct gate_ctx *)r;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_cold_gate_cb cont = c->cont;
    free(c);
    kvm_errf(KVMESH_ECANCELED, "the runtime is closing");
    cont(op, it, KVMESH_ECANCELED);
}

static void gate_planned(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)v;
    struct gate_ctx *c = arg;
    if (rc == 0) {
        c->it->cold_reclaim_op = c->rc.reclaim_op;
        c->it->cold_reclaim_of = c->of;
    }
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_cold_gate_cb cont = c->cont;
    reclaim_free(&c->rc);
    if (rc)
        kvm_errf(rc, "cannot plan the reclaim of the replaced value's cold copy: %s",
                 kvmesh_strerror(rc));
    cont(op, it, rc);
}

bool kvm_cold_reclaim_gate(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, kvm_cold_gate_cb cont)
{
    struct kvm_cold *g = rt->cold;
    if (!g || !g->c || g->open_cb)
        return false;
    bool need = it->have_route && it->cur.cold.kind == KVM_COLD_MATERIALIZED;
    bool have = need && kvm_op_id_equal(&it->cold_reclaim_of, &it->cur.cold.cold_op);
    if (!have && !kvm_op_id_is_nil(&it->cold_reclaim_of))
        kvm_cold_reclaim_settle(rt, it, false); /* planned for a route a conflict replaced */
    if (!need || have)
        return false;
    struct gate_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        cont(op, it, KVMESH_ENOMEM);
        return true;
    }
    c->rc.g = g;
    c->rc.on_close = gate_closed;
    c->rc.reclaim_op = kvm_rt_next_op_id(rt);
    struct reclaim_ctx *r = &c->rc;
    KVM_COLD_LIST_PUSH(g->reclaims, r, next, prev);
    c->op = op;
    c->it = it;
    c->cont = cont;
    c->of = it->cur.cold.cold_op;
    int rc =
        cold_reclaim_plan(g->c, &c->rc.reclaim_op, &it->cur.ident, &it->cur.cold, gate_planned, c);
    if (rc) {
        reclaim_free(&c->rc);
        cont(op, it, rc);
    }
    return true;
}

void kvm_cold_reclaim_settle(kvm_rt_t *rt, struct kvm_item *it, bool applied)
{
    struct kvm_cold *g = rt->cold;
    if (kvm_op_id_is_nil(&it->cold_reclaim_of))
        return;
    it->cold_reclaim_of = (kvm_op_id_t){0};
    if (!g || !g->c)
        return; /* closing: the record stays due; reconciliation settles it */
    if (applied && (g->planner || !kvm_cold_own_dev(g, &it->cur.cold.tier)))
        return; /* the device's owner runs it when it is due (cold_recon_pass) */
    struct reclaim_ctx *r = reclaim_new(g, &it->cold_reclaim_op);
    if (!r)
        return;
    int rc = applied ? cold_reclaim_run(g->c, &r->reclaim_op, reclaim_ran, r)
                     : cold_reclaim_cancel(g->c, &r->reclaim_op, reclaim_cancelled, r);
    if (rc)
        reclaim_free(r);
}

void kvm_cold_reclaims_close(struct kvm_cold *g)
{
    while (g->reclaims) { /* their callbacks no longer run */
        struct reclaim_ctx *r = g->reclaims;
        KVM_COLD_LIST_UNLINK(g->reclaims, r, next, prev);
        if (r->on_close)
            r->on_close(r);
        else
            free(r);
    }
}
