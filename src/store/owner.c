/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.c — the storage owner's shell: this runtime's segments (mapped, registered, with their
 * read grants) around the slot core (store/slot_core.h: slots, allocators, reservation TTL and
 * held reservations, reclaim after the grace window, CLOCK eviction, waiters for space; spec
 * "Write path" 3, "Delete and reclaim", DRAM eviction; docs/store.md "Owner slot core").
 *
 * The shell owns every I/O the core asks for: write grants (seg_grant / seg_revoke), the exact
 * route lookups that settle held reservations and pick eviction victims, the eviction's route
 * CAS (the last readable copy becomes a tombstone; a quota tenant's through the delete
 * protocol; the cold tier's last-hot eviction), the housekeeping timer that calls
 * slot_core_tick, the RPC handlers (reserve, batched reserve, commit, release, hits), metrics,
 * and the hot-upgrade export / adoption of the slot index. The core's state is rt->slots; the
 * shell mirrors its used and capacity bytes into rt->used / rt->capacity after every call
 * (owner_sync), where the rest of the runtime reads them.
 *
 * Segment table: rt->segs[i] (the mapping and read token) and the core's segment i are the
 * same segment; a removed segment leaves a hole (seg NULL) in both.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/handoff.h"
#include "store/held_op.h"
#include "store/proto.h"
#include "store/quota.h"
#include "store/repair.h"
#include "store/slot_batch.h"
#include "store/slot_core.h"
#include "store/store.h"

static uint64_t now_ns(kvm_rt_t *rt)
{
    return env_now_ns(rt->env);
}

/* ---- the cold tier's hooks (store.h kvm_owner_cold_hooks) ---------------------------------- */

void kvm_owner_set_cold_hooks(kvm_rt_t *rt, const struct kvm_owner_cold_hooks *h)
{
    rt->owner_cold = h;
}

static bool cold_device(kvm_rt_t *rt)
{
    return rt->owner_cold && rt->owner_cold->has_device(rt);
}

static void cold_published(kvm_rt_t *rt, const kvm_route_t *now)
{
    if (rt->owner_cold)
        rt->owner_cold->published(rt, now);
}

/* rt->used / rt->capacity: the core's, for the readers elsewhere in the runtime. */
static void owner_sync(kvm_rt_t *rt)
{
    rt->used = slot_core_used(rt->slots);
    rt->capacity = slot_core_capacity(rt->slots);
    atomic_store(&rt->a_capacity, rt->capacity); /* read by the admin thread (runtime.c) */
    /* after every core step (commits, releases, evictions, and the housekeeping tick that
     * settles expiries and reclaims): application threads waiting for the slots to settle check
     * again (data.c kvm_store_wait_slots) */
    kvm_waitq_signal(&rt->wq_slots);
}

/* ---- effects --------------------------------------------------------------------------------- */

static int fx_grant(void *ctx, uint32_t segi, uint64_t off, uint64_t len, uint32_t ttl_ms,
                    uint64_t *token)
{
    kvm_rt_t *rt = ctx;
    struct seg_grant g;
    int rc = seg_grant(rt->reg, rt->segs[segi].seg->id, off, len, SEG_WRITE,
                       (uint64_t)ttl_ms * 1000000ull, &g);
    if (!rc)
        *token = g.token;
    return rc;
}

static void fx_revoke(void *ctx, uint64_t token)
{
    kvm_rt_t *rt = ctx;
    seg_revoke(rt->reg, token);
}

static void fx_event(void *ctx, enum slot_event ev, uint64_t bytes)
{
    kvm_rt_t *rt = ctx;
    switch (ev) {
    case SLOT_EV_ALLOC_OK:
        obs_count(rt->metrics, allocations_total, OBS_TIER_DRAM, OBS_ALLOC_OK, 1);
        obs_count(rt->metrics, allocated_bytes_total, OBS_TIER_DRAM, OBS_NONE, bytes);
        break;
    case SLOT_EV_NO_SPACE:
        obs_count(rt->metrics, allocations_total, OBS_TIER_DRAM, OBS_ALLOC_NO_SPACE, 1);
        break;
    case SLOT_EV_RECLAIMED:
        obs_count(rt->metrics, reclaimed_bytes_total, OBS_TIER_DRAM, OBS_NONE, bytes);
        break;
    case SLOT_EV_EXPIRED:
        obs_count(rt->metrics, reservations_released_after_lookup_total, OBS_NONE, OBS_NONE, 1);
        break;
    case SLOT_EV_EVICTED:
        obs_count(rt->metrics, evictions_total, OBS_TIER_DRAM, OBS_NONE, 1);
        obs_count(rt->metrics, evicted_bytes_total, OBS_TIER_DRAM, OBS_NONE, bytes);
        break;
    case SLOT_EV_HELD_CHANGED:
        obs_gauge_set(rt->metrics, reservations_held, OBS_NONE, OBS_NONE, (int64_t)bytes);
        break;
    }
}

/* The argument of a slot's asynchronous step (a route lookup or CAS, a held check, a cold
 * eviction): a slot keeps no pointer to its core or runtime (slot_core.h), so the step carries
 * the runtime. step_new when the step starts; its callback takes it (step_take frees it), or the
 * starter frees it when the step did not start (the callee then never calls back). */
typedef struct slot_step {
    kvm_rt_t *rt;
    slot_t *s;
} slot_step_t;

static slot_step_t *step_new(kvm_rt_t *rt, slot_t *s)
{
    slot_step_t *st = malloc(sizeof(*st));
    if (st)
        *st = (slot_step_t){.rt = rt, .s = s};
    return st;
}

static slot_t *step_take(void *arg, kvm_rt_t **rt)
{
    slot_step_t *st = arg;
    slot_t *s = st->s;
    *rt = st->rt;
    free(st);
    return s;
}

static void expiry_looked_up(void *arg, int rc, const kvm_route_t *r);
static void evict_looked_up(void *arg, int rc, const kvm_route_t *r);

static int fx_lookup(void *ctx, slot_t *s, enum slot_lookup_why why)
{
    kvm_rt_t *rt = ctx;
    if (!rt->route)
        return KVMESH_EUNAVAILABLE;
    slot_step_t *st = step_new(rt, s);
    if (!st)
        return KVMESH_ENOMEM;
    kvm_ident_t id = slot_ident(s); /* route_lookup copies it */
    int rc = route_lookup(rt->route, &id,
                          why == SLOT_LOOKUP_EXPIRY ? expiry_looked_up : evict_looked_up, st);
    if (rc)
        free(st);
    return rc;
}

/* held_op.h's answer: KEEP keeps the slot held (asked again later), REREAD looks the route up
 * again and lets that answer commit or free it. */
static void held_op_done(void *arg, int rc, enum kvm_held_verdict v)
{
    kvm_rt_t *rt;
    slot_t *s = step_take(arg, &rt);
    enum slot_check a = rc == KVMESH_ECANCELED            ? SLOT_CHECK_CANCELED
                        : rc == 0 && v == KVM_HELD_REREAD ? SLOT_CHECK_REREAD
                                                          : SLOT_CHECK_KEEP;
    slot_core_held_check_answer(rt->slots, now_ns(rt), s, a);
    owner_sync(rt);
}

/* .held_check: a held slot the route does not reference is freed only after its put's quota
 * operation says it can no longer be published (step 2 of "Replaying a put", docs/tenancy.md). */
static int fx_held_check(void *ctx, slot_t *s)
{
    kvm_rt_t *rt = ctx;
    kvm_hot_replica_t rep = {
        .owner = rt->self.id, .segment = rt->segs[s->segi].seg->id, .offset = slot_off(s)};
    kvm_ident_t id = slot_ident(s); /* copied */
    slot_step_t *st = step_new(rt, s);
    if (!st)
        return KVMESH_ENOMEM;
    int rc = kvm_held_op_check(rt, &id, &rep, held_op_done, st);
    if (rc)
        free(st);
    return rc;
}

static const slot_effects_t owner_fx = {
    .held_check = fx_held_check,
    .grant = fx_grant,
    .revoke = fx_revoke,
    .lookup = fx_lookup,
    .event = fx_event,
};

static int core_open(kvm_rt_t *rt)
{
    if (rt->slots)
        return 0;
    slot_core_cfg_t cfg = {
        .name = rt->idhex,
        .reclaim_grace_ns = (uint64_t)rt->cfg.reclaim_grace_ms * 1000000ull,
        .evict_high = rt->cfg.evict_high_watermark,
        .evict_low = rt->cfg.evict_low_watermark,
        .wait_timeout_ns = (uint64_t)rt->cfg.request_timeout_ms * 500000ull,
        .held_retry_ns = 1000000000ull,
        .tick_budget = STORE_TICK_BUDGET,
        .evict_inflight_max = STORE_EVICT_INFLIGHT,
        .wait_max = STORE_RESERVE_WAIT_MAX,
        .late_write_ns = STORE_LATE_WRITE_MS * 1000000ull,
    };
    return slot_core_new(&cfg, &owner_fx, rt, &rt->slots);
}

/* ---- segments -------------------------------------------------------------------------------- */

/* Registers a mapped segment with the core and the read grant: rt->segs[rt->n_segs]. */
static int seg_install(kvm_rt_t *rt, struct seg *seg)
{
    struct kvm_local_seg *ls = &rt->segs[rt->n_segs];
    struct seg_grant g;
    uint32_t segi = 0;
    int rc = seg_grant(rt->reg, seg->id, 0, seg->size, SEG_READ, 0, &g);
    if (!rc)
        rc = slot_core_seg_add(rt->slots, seg->id, seg->size, &segi);
    if (rc)
        return rc;
    KVM_ASSERT(segi == rt->n_segs);
    memset(ls, 0, sizeof(*ls));
    ls->seg = seg;
    ls->read_token = g.token;
    rt->n_segs++;
    owner_sync(rt);
    return 0;
}

static int seg_add(kvm_rt_t *rt, uint64_t size)
{
    if (rt->n_segs == STORE_MAX_SEGS)
        return kvm_errf(KVMESH_ENOSPC, "at most %d segments per runtime", STORE_MAX_SEGS);
    struct seg *seg = NULL;
    int rc = seg_create(rt->reg, size, rt->cfg.hugepages ? SEG_F_HUGE : 0, &seg);
    if (rc)
        return rc;
    if ((rc = seg_install(rt, seg)) != 0)
        seg_destroy(rt->reg, seg->id);
    return rc;
}

int kvm_owner_init(kvm_rt_t *rt)
{
    int rc = core_open(rt);
    uint64_t left = rt->cfg.memory_size;
    while (!rc && left > 0) {
        uint64_t sz = left < rt->cfg.segment_size ? left : rt->cfg.segment_size;
        rc = seg_add(rt, sz);
        left -= sz;
    }
    return rc;
}

/* ---- hot upgrade (handoff.h) ---------------------------------------------------------------- */

struct export_ctx {
    kvm_rt_t *rt;
    struct kvm_handoff *out;
    const uint32_t *map; /* rt->segs index -> handoff index */
};

static int export_slot(void *arg, const slot_t *s)
{
    struct export_ctx *x = arg;
    bool committed = s->state == SLOT_COMMITTED;
    kvm_ident_t id = slot_ident(s); /* copied */
    return kvm_handoff_add_slot(x->out, x->map[s->segi],
                                committed ? KVM_HANDOFF_COMMITTED : KVM_HANDOFF_RECLAIM,
                                slot_off(s), s->len, committed ? s->seq : 0, &id);
}

int kvm_owner_export(kvm_rt_t *rt, struct kvm_handoff *out)
{
    uint32_t map[STORE_MAX_SEGS]; /* rt->segs index -> handoff index */
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        const struct kvm_local_seg *ls = &rt->segs[i];
        if (!ls->seg)
            continue;
        if (slot_core_seg_retiring(rt->slots, i))
            return kvm_errf(KVMESH_EAGAIN,
                            "segment %016" PRIx64 " is retiring; hand over once "
                            "it is removed",
                            ls->seg->id);
        struct kvm_handoff_seg *hs = &out->segs[out->n_segs];
        hs->id = ls->seg->id;
        hs->size = ls->seg->size;
        hs->fd = fcntl(ls->seg->fd, F_DUPFD_CLOEXEC, 0);
        if (hs->fd < 0)
            return kvm_errf(KVMESH_EIO, "cannot duplicate a segment fd: %s", strerror(errno));
        map[i] = out->n_segs++;
    }
    out->id = rt->self.id;
    out->epoch = rt->self.epoch;
    out->slot_seq = slot_core_seq(rt->slots);
    struct export_ctx x = {rt, out, map};
    return slot_core_visit(rt->slots, export_slot, &x);
}

int kvm_owner_adopt(kvm_rt_t *rt, struct kvm_handoff *h)
{
    KVM_ASSERT(rt->n_segs == 0 && h->n_segs <= STORE_MAX_SEGS);
    int rc = core_open(rt);
    for (uint32_t i = 0; !rc && i < h->n_segs; i++) {
        struct seg *seg = NULL;
        rc = seg_adopt(rt->reg, h->segs[i].id, h->segs[i].fd, h->segs[i].size, &seg);
        if (rc)
            return rc;
        h->segs[i].fd = -1; /* the registry's now */
        if ((rc = seg_install(rt, seg)) != 0)
            seg_destroy(rt->reg, seg->id);
    }
    for (uint32_t i = 0; !rc && i < h->n_slots; i++) {
        const struct kvm_handoff_slot *hs = &h->slots[i];
        rc = slot_core_adopt(rt->slots, hs->segi, hs->off, hs->len,
                             hs->state == KVM_HANDOFF_COMMITTED ? SLOT_COMMITTED : SLOT_RECLAIM,
                             hs->seq, &hs->ident);
    }
    if (rc)
        return rc;
    slot_core_set_seq(rt->slots, h->slot_seq);
    owner_sync(rt);
    return 0;
}

void kvm_owner_fini(kvm_rt_t *rt)
{
    if (rt->slots) {
        kvm_owner_fail_waiters(rt);
        slot_core_free(rt->slots);
        rt->slots = NULL;
    }
    for (uint32_t i = 0; i < rt->n_segs; i++)
        if (rt->segs[i].seg)
            seg_destroy(rt->reg, rt->segs[i].seg->id);
    rt->n_segs = 0;
}

void kvm_owner_fail_waiters(kvm_rt_t *rt)
{
    if (rt->slots)
        slot_core_fail_waiters(rt->slots, KVMESH_ECLOSED, "runtime closed");
}

bool kvm_owner_settled(kvm_rt_t *rt)
{
    return !rt->slots || slot_core_settled(rt->slots);
}

void kvm_owner_segments(kvm_rt_t *rt, struct kvm_seg_info *out, uint32_t *n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        if (!rt->segs[i].seg)
            continue; /* removed; a retiring segment stays listed: its replicas are readable */
        out[k++] =
            (struct kvm_seg_info){rt->segs[i].seg->id, rt->segs[i].seg->size,
                                  rt->segs[i].read_token, slot_core_seg_drained(rt->slots, i)};
    }
    *n = k;
}

static int seg_index(kvm_rt_t *rt, uint64_t seg_id)
{
    for (uint32_t i = 0; i < rt->n_segs; i++)
        if (rt->segs[i].seg && rt->segs[i].seg->id == seg_id)
            return (int)i;
    return -1;
}

/* ---- reserve, commit, release, hit ------------------------------------------------------------
 */

void kvm_owner_reserve(kvm_rt_t *rt, const kvm_ident_t *id, uint64_t len, uint32_t ttl_ms,
                       kvm_reserve_cb cb, void *arg)
{
    if (rt->state != KVM_MS_ACTIVE) {
        char msg[96];
        snprintf(msg, sizeof(msg), "owner %s is %s and takes no new replicas", rt->idhex,
                 kvm_member_state_name(rt->state));
        cb(arg, KVMESH_EUNAVAILABLE, msg, 0, 0, 0);
        return;
    }
    slot_core_reserve(rt->slots, now_ns(rt), id, len, ttl_ms, cb, arg);
    owner_sync(rt);
}

int kvm_owner_land_begin(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token)
{
    return slot_core_land_begin(rt->slots, now_ns(rt), seg, off, token);
}

int kvm_owner_land_end(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token)
{
    return slot_core_land_end(rt->slots, now_ns(rt), seg, off, token);
}

int kvm_owner_test_expire(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token)
{
    int rc = slot_core_test_expire(rt->slots, now_ns(rt), seg, off, token);
    owner_sync(rt);
    return rc;
}

void kvm_owner_commit(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    kvm_owner_commit_note(rt, seg, off, NULL);
}

void kvm_owner_release(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    kvm_owner_release_note(rt, seg, off, NULL);
}

/* After a note at (seg, off) the core did not apply: no slot starts there, or one does and the
 * note named another (stale: the core counted it). Then the stale ones not yet in
 * kvmesh_notes_stale_total go there; only then, so no other note pays for the core's stats
 * (O(slots)). */
static void notes_stale_sync(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    if (!slot_core_find(rt->slots, seg, off))
        return;
    slot_core_stats_t cs;
    slot_core_stats(rt->slots, &cs);
    KVM_ASSERT(cs.notes_stale >= rt->notes_stale_counted);
    if (cs.notes_stale > rt->notes_stale_counted)
        obs_count(rt->metrics, notes_stale_total, OBS_NONE, OBS_NONE,
                  cs.notes_stale - rt->notes_stale_counted);
    rt->notes_stale_counted = cs.notes_stale;
}

static const slot_t *owner_commit_note(kvm_rt_t *rt, uint64_t seg, uint64_t off,
                                       const slot_note_t *n)
{
    const slot_t *s = slot_core_commit_note(rt->slots, now_ns(rt), seg, off, n);
    if (!s)
        notes_stale_sync(rt, seg, off);
    return s;
}

void kvm_owner_commit_note(kvm_rt_t *rt, uint64_t seg, uint64_t off, const slot_note_t *n)
{
    (void)owner_commit_note(rt, seg, off, n);
}

void kvm_owner_release_note(kvm_rt_t *rt, uint64_t seg, uint64_t off, const slot_note_t *n)
{
    if (!slot_core_release_note(rt->slots, now_ns(rt), seg, off, n))
        notes_stale_sync(rt, seg, off);
}

void kvm_owner_hit(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    slot_core_hit(rt->slots, seg, off);
}

/* ---- lookups: the route decides ---------------------------------------------------------------
 */

static enum slot_answer answer_of(const kvm_rt_t *rt, const slot_t *s, int rc, const kvm_route_t *r)
{
    if (rc == KVMESH_ECANCELED)
        return SLOT_ANS_CANCELED;
    if (rc == KVMESH_ENOENT)
        return SLOT_ANS_ABSENT;
    if (rc)
        return SLOT_ANS_UNKNOWN;
    kvm_hot_replica_t rep = {
        .owner = rt->self.id, .segment = rt->segs[s->segi].seg->id, .offset = slot_off(s)};
    bool has = r && !kvm_route_is_tombstone(r) && kvm_route_find_replica(r, &rep) >= 0;
    return has ? SLOT_ANS_REFERENCED : SLOT_ANS_UNREFERENCED;
}

/* A held reservation's lookup (slot_core.h "held"): committed when the route references the
 * slot (then a PendingOffload on this runtime's device is queued), released when the route
 * proves it does not, asked again later when the lookup failed. */
static void expiry_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    kvm_rt_t *rt;
    slot_t *s = step_take(arg, &rt);
    slot_settle_in_t in = {.route = answer_of(rt, s, rc, r)};
    if (slot_core_held_answer(rt->slots, now_ns(rt), s, &in) == SLOT_SETTLE_COMMIT)
        cold_published(rt, r); /* cold tier: a PendingOffload on this runtime's device */
    owner_sync(rt);
}

/* ---- eviction: the route CAS ------------------------------------------------------------------
 */

static void evict_end(kvm_rt_t *rt, slot_t *s, enum slot_evict_end e)
{
    slot_core_evict_end(rt->slots, now_ns(rt), s, e);
    owner_sync(rt);
}

/* An eviction step that did not start (st NULL: no memory for it): the slot is kept. */
static void evict_kept(kvm_rt_t *rt, slot_step_t *st, slot_t *s)
{
    free(st);
    evict_end(rt, s, SLOT_EVICT_KEPT);
}

static void evict_tomb_finalized(void *arg, int rc, const kvm_route_t *r)
{
    (void)arg, (void)rc, (void)r; /* best effort, like a remove's: a pending one reads as absent */
}

/* An eviction that took the last readable copy published a PENDING tombstone; with no quota
 * accounting to wait for (the remove path's rule) it is finalized at once, so that the purge
 * removes it after tombstone_retention_ms instead of the route state growing with eviction
 * churn. Under a tenant quota it stays PENDING (the accounting decides, as for a remove) and
 * has no deadline; without one, a PENDING tombstone whose finalize failed is purged at the
 * deadline it was published with. */
static void evict_finalize(kvm_rt_t *rt, const kvm_route_t *r)
{
    if (!r || r->tomb != KVM_TOMB_PENDING || kvm_quota_applies(rt, &r->ident))
        return;
    kvm_hint_drop(rt, &r->ident); /* (the finalize changes the version again) */
    kvm_route_t fin;
    kvm_route_init(&fin);
    if (kvm_route_copy(&fin, r) == 0) {
        fin.tomb = KVM_TOMB_FINALIZED;
        fin.retain_until_ms = kvm_rt_tomb_deadline(rt);
        (void)route_cas(rt->route, &r->version, &fin, evict_tomb_finalized, NULL);
    }
    kvm_route_free(&fin);
}

static void evict_cas_done(void *arg, int rc, const kvm_route_t *r)
{
    kvm_rt_t *rt;
    slot_t *s = step_take(arg, &rt);
    if (rc == 0)
        evict_finalize(rt, r);
    evict_end(rt, s, rc == 0 ? SLOT_EVICT_REMOVED : SLOT_EVICT_CONFLICT);
}

/* Cold tier: the last hot replica of a route with a cold backing. Materialized: the last-hot
 * eviction (cold_evict: only once the cold copy is usage-committed; the bytes are freed only
 * after its CAS removed the replica). PendingOffload: kept until the offload materializes it.
 * Returns false when the route has no cold backing of this runtime (ordinary eviction). */
static void evict_cold_done(void *arg, int rc)
{
    kvm_rt_t *rt;
    slot_t *s = step_take(arg, &rt);
    if (rc == 0 && s->state == SLOT_COMMITTED)
        obs_count(rt->metrics, cold_evictions_total, OBS_NONE, OBS_NONE, 1);
    evict_end(rt, s, rc == 0 ? SLOT_EVICT_REMOVED : SLOT_EVICT_KEPT);
}

static bool evict_cold(kvm_rt_t *rt, slot_t *s, const kvm_route_t *r, const kvm_hot_replica_t *slot)
{
    if (rt->owner_cold->pins_last(rt, r)) {
        evict_end(rt, s, SLOT_EVICT_KEPT);
        return true;
    }
    if (rt->owner_cold->claims(rt, r)) { /* eviction-triggered offload: materialize, then evict */
        int k = kvm_route_find_replica(r, slot);
        KVM_ASSERT(k >= 0);
        slot_step_t *st = step_new(rt, s);
        if (!st || rt->owner_cold->evict_claim(rt, r, &r->replicas[k], evict_cold_done, st) != 0)
            evict_kept(rt, st, s);
        return true;
    }
    if (r->cold.kind != KVM_COLD_MATERIALIZED)
        return false;
    int i = kvm_route_find_replica(r, slot);
    KVM_ASSERT(i >= 0);
    kvm_ident_t id = slot_ident(s); /* copied */
    slot_step_t *st = step_new(rt, s);
    if (!st || rt->owner_cold->evict_last(rt, &id, &r->replicas[i], evict_cold_done, st) != 0)
        evict_kept(rt, st, s);
    return true;
}

/* next = r without this slot's replica; the last readable copy leaves as a tombstone. */
static void evict_next_route(kvm_rt_t *rt, const kvm_route_t *r, kvm_route_t *next)
{
    /* Invariant (repair.h kvm_replica_readable): never leave a live route with no replica a
     * reader can get bytes from. When the others are all on closed or gone owners, this was the
     * last readable copy: the object leaves the cache as a whole, unless a materialized cold
     * copy keeps it readable. */
    bool readable_left = false;
    for (uint32_t i = 0; i < next->n_replicas; i++)
        readable_left |= kvm_replica_readable(rt, &next->replicas[i]);
#ifdef KVMESH_CHAOS_BROKEN_EVICT_LAST_LIVE
    readable_left = next->n_replicas > 0; /* broken variant: only our own copy is considered */
#endif
    if (!readable_left && next->cold.kind != KVM_COLD_MATERIALIZED) {
        /* The last readable copy: the object leaves the cache (a tombstone, like a delete). */
        next->n_replicas = 0;
        next->predecessor_op = r->content_op;
        next->content_op = kvm_rt_next_op_id(rt);
        next->tomb = KVM_TOMB_PENDING;
        next->length = next->checksum = 0;
        memset(&next->cold, 0, sizeof(next->cold));
    }
}

static void evict_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    kvm_rt_t *rt;
    slot_t *s = step_take(arg, &rt);
    enum slot_answer a = answer_of(rt, s, rc, r);
    if (slot_core_evict_answer(rt->slots, now_ns(rt), s, a) == SLOT_EVICT_DONE) {
        owner_sync(rt);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    if (kvm_route_copy(&next, r) != 0) {
        evict_end(rt, s, SLOT_EVICT_KEPT);
        return;
    }
    kvm_hot_replica_t rep = {
        .owner = rt->self.id, .segment = rt->segs[s->segi].seg->id, .offset = slot_off(s)};
    kvm_route_remove_replica(&next, &rep);
    if (next.n_replicas == 0 && cold_device(rt) && evict_cold(rt, s, r, &rep)) {
        kvm_route_free(&next); /* the cold tier decides (cold_glue.c) */
        return;
    }
    evict_next_route(rt, r, &next);
    /* A quota tenant's object leaves through the delete protocol: the refund (quota_tomb.c). */
    bool quota = next.tomb == KVM_TOMB_PENDING && kvm_quota_applies(rt, &r->ident);
    if (next.tomb == KVM_TOMB_PENDING && !quota) /* purged then, even if its finalize fails */
        next.retain_until_ms = kvm_rt_tomb_deadline(rt);
    slot_step_t *st = step_new(rt, s);
    if (!st || (quota ? kvm_quota_evict(rt, r, &next, evict_cas_done, st)
                      : route_cas(rt->route, &r->version, &next, evict_cas_done, st)) != 0)
        evict_kept(rt, st, s);
    kvm_route_free(&next);
}

/* ---- housekeeping -------------------------------------------------------------------------- */

static void tick(void *arg);
static void reclaim_more(void *arg);

/* The next housekeeping step: a reclaim re-run on the loop's next turn while the core's
 * reclaim cap left slots due (slot_core_tick), else the tick after STORE_TICK_MS. */
static void tick_arm(kvm_rt_t *rt, bool more)
{
    if (!atomic_load(&rt->closing))
        rt->tick_timer = more ? env_timer_start(rt->env, 0, reclaim_more, rt)
                              : env_timer_start(rt->env, STORE_TICK_MS * 1000000ull, tick, rt);
}

static void reclaim_more(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->tick_timer = 0;
    bool more = slot_core_reclaim(rt->slots, now_ns(rt));
    owner_sync(rt);
    tick_arm(rt, more);
}

static void tick(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->tick_timer = 0;
    bool more = slot_core_tick(rt->slots, now_ns(rt));
    owner_sync(rt);
    atomic_store(&rt->a_used, rt->used);
    obs_gauge_set(rt->metrics, segment_used_bytes, OBS_TIER_DRAM, OBS_NONE, (int64_t)rt->used);
    obs_gauge_set(rt->metrics, segment_capacity_bytes, OBS_TIER_DRAM, OBS_NONE,
                  (int64_t)rt->capacity);
    tick_arm(rt, more);
}

void kvm_owner_start(kvm_rt_t *rt)
{
    slot_core_start(rt->slots, now_ns(rt));
    if (rt->n_segs)
        rt->tick_timer = env_timer_start(rt->env, STORE_TICK_MS * 1000000ull, tick, rt);
}

void kvm_owner_stop(kvm_rt_t *rt)
{
    env_timer_cancel(rt->env, rt->tick_timer);
    rt->tick_timer = 0;
}

size_t kvm_owner_list(kvm_rt_t *rt, uint64_t seg_filter, uint64_t *cursor, kvm_hot_replica_t *out,
                      kvm_ident_t *ids, uint64_t *read_tokens, size_t cap)
{
    const slot_t *sel[SLOT_LIST_MAX];
    int segi = seg_filter ? seg_index(rt, seg_filter) : -1;
    if (seg_filter && segi < 0)
        return 0;
    size_t n = slot_core_list(rt->slots, segi, *cursor, sel, cap);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        kvm_ident_t id = slot_ident(sel[i]);
        if (kvm_ident_copy(&ids[k], &id) != 0)
            break;
        out[k++] = (kvm_hot_replica_t){.owner = rt->self.id,
                                       .segment = rt->segs[sel[i]->segi].seg->id,
                                       .offset = slot_off(sel[i]),
                                       .length = sel[i]->len};
        read_tokens[k - 1] = rt->segs[sel[i]->segi].read_token;
        *cursor = sel[i]->seq;
    }
    return k;
}

int kvm_owner_add_segment(kvm_rt_t *rt, uint64_t size, uint64_t *seg_id)
{
    int rc = seg_add(rt, size);
    if (!rc)
        *seg_id = rt->segs[rt->n_segs - 1].seg->id;
    return rc;
}

int kvm_owner_retire_segment(kvm_rt_t *rt, uint64_t seg_id)
{
    int i = seg_index(rt, seg_id);
    if (i < 0)
        return kvm_errf(KVMESH_ENOENT, "no segment %016" PRIx64 " on this runtime", seg_id);
    slot_core_seg_retire(rt->slots, (uint32_t)i);
    return 0;
}

bool kvm_owner_drain_segments(kvm_rt_t *rt, const uint64_t *ids, uint32_t n)
{
    bool changed = false;
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        if (!rt->segs[i].seg)
            continue;
        bool want = false;
        for (uint32_t k = 0; k < n && !want; k++)
            want = ids[k] == rt->segs[i].seg->id;
        changed |= slot_core_seg_set_drained(rt->slots, i, want);
    }
    return changed;
}

int kvm_owner_remove_segment(kvm_rt_t *rt, uint64_t seg_id)
{
    int i = seg_index(rt, seg_id);
    if (i < 0)
        return kvm_errf(KVMESH_ENOENT, "no segment %016" PRIx64 " on this runtime", seg_id);
    uint64_t n_slots = 0;
    int rc = slot_core_seg_remove(rt->slots, (uint32_t)i, &n_slots);
    if (rc)
        return rc;
    seg_destroy(rt->reg, rt->segs[i].seg->id);
    rt->segs[i].seg = NULL;
    owner_sync(rt);
    return 0;
}

void kvm_owner_stats(kvm_rt_t *rt, struct kvm_rt_stats *st)
{
    *st = rt->stats;
    slot_core_stats_t cs;
    slot_core_stats(rt->slots, &cs);
    int64_t ev = 0; /* counted once, in the registry */
    (void)obs_metrics_read(rt->metrics, "evictions_total", OBS_TIER_DRAM, OBS_NONE, &ev);
    st->evictions = (uint64_t)ev;
    st->capacity = cs.capacity;
    st->used = cs.used;
    st->reclaim_bytes = cs.reclaim_bytes;
    st->reclaimed = cs.reclaimed;
    st->reservations_expired = cs.reservations_expired;
    st->reserve_waits = cs.reserve_waits;
    st->reservations_held = cs.reservations_held;
    st->evict_conflicts = cs.evict_conflicts;
    st->notes_stale = cs.notes_stale;
    st->fragmentation = cs.fragmentation;
    if (rt->route) {
        route_table_counts(rt->route, &st->route_entries, &st->route_tombs, &st->tombs_purged);
        st->tombs_purge_unknown = route_table_purge_unknown(rt->route);
    }
}

/* ---- RPC handlers -----------------------------------------------------------------------------
 */

struct rpc_reserve_ctx {
    rpc_reply *reply;
};

static void rpc_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                         uint64_t token)
{
    rpc_reply *reply = arg;
    if (rc) {
        if (rpc_reply_send(reply, rc, err, NULL, NULL, NULL) == KVMESH_EAGAIN)
            rpc_reply_drop(reply);
        return;
    }
    uint8_t body[64];
    size_t len = 0;
    store_reserve_resp_t resp = {seg, off, token};
    store_reserve_resp_encode(&resp, body, sizeof(body), &len);
    struct rpc_msg m = {.type = STORE_RPC_RESERVE, .body = body, .body_len = len};
    if (rpc_reply_send(reply, 0, NULL, &m, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply); /* the caller times out; the reservation expires by TTL */
}

/* A traced reservation: the owner-side span lives until the reply is sent (the reservation may
 * wait for eviction). Only allocated when the request carries a sampled context. */
struct traced_reserve {
    rpc_reply *reply;
    struct obs_span span;
};

static void rpc_reserved_traced(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                                uint64_t token)
{
    struct traced_reserve *tr = arg;
    if (!rc) {
        obs_span_set_int(&tr->span, "kvmesh.segment", (int64_t)seg);
        obs_span_set_int(&tr->span, "kvmesh.offset", (int64_t)off);
    }
    kvm_span_finish(&tr->span, rc);
    rpc_reserved(tr->reply, rc, err, seg, off, token);
    free(tr);
}

static void on_reserve(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    store_reserve_req_t m;
    struct traced_reserve *tr = NULL;
    if (rt->tracer && (req->trace.flags & OBS_TRACE_FLAG_SAMPLED) && (tr = malloc(sizeof(*tr))) &&
        !kvm_span_remote(rt, &req->trace, "control.owner_reserve", &tr->span)) {
        free(tr); /* no usable context: serve untraced */
        tr = NULL;
    }
    int rc = store_reserve_req_decode(req->body, req->body_len, &m);
    if (rc) {
        if (tr) {
            kvm_span_finish(&tr->span, rc);
            free(tr);
        }
        rpc_reply_send(reply, rc, kvmesh_last_error(), NULL, NULL, NULL);
        return;
    }
    if (tr) {
        obs_span_set_int(&tr->span, "kvmesh.bytes", (int64_t)m.length);
        tr->reply = reply;
    }
    if (m.target_epoch != rt->self.epoch) {
        char msg[128];
        snprintf(msg, sizeof(msg), "reservation for epoch %" PRIu64 " reached epoch %" PRIu64,
                 m.target_epoch, rt->self.epoch);
        if (tr)
            rpc_reserved_traced(tr, KVMESH_EUNAVAILABLE, msg, 0, 0, 0);
        else
            rpc_reply_send(reply, KVMESH_EUNAVAILABLE, msg, NULL, NULL, NULL);
    } else if (tr) {
        kvm_owner_reserve(rt, &m.ident, m.length, m.ttl_ms, rpc_reserved_traced, tr);
    } else {
        kvm_owner_reserve(rt, &m.ident, m.length, m.ttl_ms, rpc_reserved, reply);
    }
    kvm_ident_free(&m.ident);
}

/* A batched reservation: every item is reserved like a single one (some may wait for eviction);
 * the reply goes out once all answered, with each item's own status. */
struct batch_reserve {
    rpc_reply *reply;
    uint32_t pending;
    store_reserve_batch_resp_t resp;
    struct batch_reserve_item {
        struct batch_reserve *b;
        uint16_t i;
    } items[STORE_RESERVE_BATCH_MAX];
};

static void batch_reserve_release(struct batch_reserve *b)
{
    if (--b->pending)
        return;
    uint8_t *body = malloc(STORE_RESERVE_BATCH_RESP_MAX);
    size_t len = 0;
    int rc =
        body ? store_reserve_batch_resp_encode(&b->resp, body, STORE_RESERVE_BATCH_RESP_MAX, &len)
             : KVMESH_ENOMEM;
    struct rpc_msg m = {.type = STORE_RPC_RESERVE_BATCH, .body = body, .body_len = len};
    /* (a lost reply: the caller times out and the reservations expire by their TTL) */
    if (rpc_reply_send(b->reply, rc, rc ? "cannot encode the batched reservation reply" : NULL,
                       rc ? NULL : &m, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(b->reply);
    free(body);
    free(b);
}

static void batch_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                           uint64_t token)
{
    (void)err;
    struct batch_reserve_item *bi = arg;
    struct batch_reserve *b = bi->b;
    b->resp.r[bi->i].status = rc;
    b->resp.r[bi->i].seg = seg;
    b->resp.r[bi->i].offset = off;
    b->resp.r[bi->i].token = token;
    batch_reserve_release(b);
}

static void on_reserve_batch(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    store_reserve_batch_req_t *m = malloc(sizeof(*m));
    struct batch_reserve *b = calloc(1, sizeof(*b));
    int rc = m && b ? store_reserve_batch_req_decode(req->body, req->body_len, m) : KVMESH_ENOMEM;
    if (!rc && m->target_epoch != rt->self.epoch) {
        store_reserve_batch_req_free(m);
        rc = kvm_errf(KVMESH_EUNAVAILABLE,
                      "reservation for epoch %" PRIu64 " reached epoch %" PRIu64, m->target_epoch,
                      rt->self.epoch);
    }
    if (rc) {
        rpc_reply_send(reply, rc, kvmesh_last_error(), NULL, NULL, NULL);
        free(m);
        free(b);
        return;
    }
    b->reply = reply;
    b->resp.n = m->n;
    b->pending = (uint32_t)m->n + 1; /* + this function: a reply only after the loop */
    for (uint16_t i = 0; i < m->n; i++) {
        b->items[i] = (struct batch_reserve_item){b, i};
        kvm_owner_reserve(rt, &m->ident[i], m->length[i], m->ttl_ms, batch_reserved, &b->items[i]);
    }
    store_reserve_batch_req_free(m);
    free(m);
    batch_reserve_release(b);
}

/* A remote writer's COMMIT or RELEASE of (seg, off): on_slot, and each item of a
 * STORE_RPC_SLOT_BATCH (slot_batch.c). */
static void slot_apply(kvm_rt_t *rt, bool commit, uint64_t seg, uint64_t off, const slot_note_t *n)
{
    if (commit) {
        const slot_t *sl = owner_commit_note(rt, seg, off, n);
        if (sl && sl->state == SLOT_COMMITTED && cold_device(rt)) {
            kvm_ident_t id = slot_ident(sl);         /* copied */
            rt->owner_cold->slot_committed(rt, &id); /* a remote writer's offload to our device */
        }
    } else
        kvm_owner_release_note(rt, seg, off, n);
}

static void on_slot(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    kvm_rt_t *rt = arg;
    store_slot_msg_t m;
    struct obs_span sp,
        *s = kvm_span_remote(
            rt, &req->trace,
            req->type == STORE_RPC_COMMIT ? "control.owner_commit" : "control.owner_release", &sp);
    if (store_slot_msg_decode(req->body, req->body_len, &m) != 0 ||
        m.target_epoch != rt->self.epoch) {
        kvm_span_finish(s, KVMESH_EUNAVAILABLE);
        return;
    }
    /* the slot's identity (version 2 bodies; none from an older peer): a notification naming
     * another slot than the one now at (segment, offset) is ignored and counted */
    _Static_assert(STORE_SLOT_HAS_TOKEN == SLOT_NOTE_TOKEN &&
                       STORE_SLOT_HAS_OBJECT == SLOT_NOTE_OBJECT,
                   "slot message identity bits are slot_note_t's");
    slot_note_t note = {m.has, m.token, m.ident_hash, m.len};
    slot_apply(rt, req->type == STORE_RPC_COMMIT, m.seg, m.offset, m.has ? &note : NULL);
    kvm_span_finish(s, 0);
}

static void on_hit(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    kvm_rt_t *rt = arg;
    store_hit_msg_t *m = malloc(sizeof(*m));
    if (m && store_hit_msg_decode(req->body, req->body_len, m) == 0)
        for (uint16_t i = 0; i < m->n; i++)
            kvm_owner_hit(rt, m->slots[i].seg, m->slots[i].offset);
    free(m);
}

void kvm_owner_register_rpc(kvm_rt_t *rt)
{
    rpc_register_handler(rt->ep, STORE_RPC_RESERVE, on_reserve, rt);
    rpc_register_handler(rt->ep, STORE_RPC_RESERVE_BATCH, on_reserve_batch, rt);
    rpc_register_notify_handler(rt->ep, STORE_RPC_COMMIT, on_slot, rt);
    rpc_register_notify_handler(rt->ep, STORE_RPC_RELEASE, on_slot, rt);
    rpc_register_notify_handler(rt->ep, STORE_RPC_HIT, on_hit, rt);
    kvm_slot_batch_serve(rt, slot_apply); /* STORE_RPC_SLOT_BATCH */
}
