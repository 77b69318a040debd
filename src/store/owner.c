/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.c — the storage owner: this runtime's segments, their allocators and the replica slots
 * carved from them (spec "Write path" 3, "Delete and reclaim", DRAM eviction).
 *
 * Slot life (one allocation in one segment):
 *
 *   reserve            commit (route published)       release / evicted by route CAS
 *   ------> RESERVED -------------------------> COMMITTED ---------------------------> RECLAIM
 *              |  TTL passed: the route is read: it references the slot -> COMMITTED,   |
 *              |  otherwise -> RECLAIM                                                  | grace
 *              +--------------------------------------------------------------------> freed
 *
 * Invariants:
 *   - bytes become reusable only from RECLAIM, and only after cfg.reclaim_grace_ms passed since
 *     the slot entered RECLAIM, so a slow writer or reader never touches reused memory (a
 *     reader that still races a reuse fails its checksum and retries);
 *   - a COMMITTED slot is freed only after a route CAS removed it from the route (eviction) or
 *     a writer that replaced the route released it: never while a route references it;
 *   - a RESERVED slot's write grant expires with its TTL and is revoked at commit/release;
 *   - a slot with a route lookup or CAS in flight (busy) is never freed.
 *
 * Eviction is a CLOCK over COMMITTED slots: read hits (reported in batches by readers) set the
 * reference bit; when used bytes exceed the high watermark (or a reservation waits for space)
 * the hand evicts until used bytes fall to the low watermark.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/cold_glue.h"
#include "store/handoff.h"
#include "store/held_op.h"
#include "store/proto.h"
#include "store/quota.h"
#include "store/repair.h"
#include "store/store.h"

enum slot_state { SLOT_RESERVED, SLOT_COMMITTED, SLOT_RECLAIM };

struct kvm_slot {
    uint32_t segi;
    uint64_t off, len;
    enum slot_state state;
    kvm_ident_t ident;
    uint64_t token;
    uint64_t deadline_ns;
    uint64_t seq;                   /* commit order (drain cursor) */
    struct kvm_slot *qnext, *qprev; /* reserved or reclaim queue */
    struct kvm_slot *cnext, *cprev; /* clock ring */
    bool ref, busy, queued, in_clock;
    bool held;       /* RESERVED past its TTL, kept until an exact lookup settles it (held_end) */
    bool op_checked; /* held: the quota operation check said REREAD (held_op.h) */
    kvm_rt_t *rt;
};

struct kvm_wait {
    struct kvm_wait *next;
    kvm_ident_t ident;
    uint64_t len;
    uint32_t ttl_ms;
    uint64_t deadline_ns;
    kvm_reserve_cb cb;
    void *arg;
};

/* ---- queues ---------------------------------------------------------------------------------- */

static void q_push(struct kvm_slot **head, struct kvm_slot **tail, struct kvm_slot *s)
{
    KVM_ASSERT(!s->queued);
    s->qnext = NULL;
    s->qprev = *tail;
    if (*tail)
        (*tail)->qnext = s;
    else
        *head = s;
    *tail = s;
    s->queued = true;
}

static void q_del(struct kvm_slot **head, struct kvm_slot **tail, struct kvm_slot *s)
{
    KVM_ASSERT(s->queued);
    if (s->qprev)
        s->qprev->qnext = s->qnext;
    else
        *head = s->qnext;
    if (s->qnext)
        s->qnext->qprev = s->qprev;
    else
        *tail = s->qprev;
    s->qnext = s->qprev = NULL;
    s->queued = false;
}

static void clock_add(kvm_rt_t *rt, struct kvm_slot *s)
{
    KVM_ASSERT(!s->in_clock);
    if (!rt->clock_hand) {
        s->cnext = s->cprev = s;
        rt->clock_hand = s;
    } else {
        struct kvm_slot *h = rt->clock_hand;
        s->cnext = h;
        s->cprev = h->cprev;
        h->cprev->cnext = s;
        h->cprev = s;
    }
    s->in_clock = true;
    rt->n_clock++;
}

static void clock_del(kvm_rt_t *rt, struct kvm_slot *s)
{
    KVM_ASSERT(s->in_clock);
    if (s->cnext == s) {
        rt->clock_hand = NULL;
    } else {
        s->cprev->cnext = s->cnext;
        s->cnext->cprev = s->cprev;
        if (rt->clock_hand == s)
            rt->clock_hand = s->cnext;
    }
    s->cnext = s->cprev = NULL;
    s->in_clock = false;
    rt->n_clock--;
}

/* ---- segments ------------------------------------------------------------------------------ */

static int seg_add(kvm_rt_t *rt, uint64_t size)
{
    if (rt->n_segs == STORE_MAX_SEGS)
        return kvm_errf(KVMESH_ENOSPC, "at most %d segments per runtime", STORE_MAX_SEGS);
    struct kvm_local_seg *ls = &rt->segs[rt->n_segs];
    memset(ls, 0, sizeof(*ls));
    int rc = seg_create(rt->reg, size, rt->cfg.hugepages ? SEG_F_HUGE : 0, &ls->seg);
    if (rc)
        return rc;
    struct seg_grant g;
    if ((rc = alloc_new(&ls->alloc, ls->seg->size)) != 0 ||
        (rc = seg_grant(rt->reg, ls->seg->id, 0, ls->seg->size, SEG_READ, 0, &g)) != 0) {
        alloc_free(ls->alloc);
        seg_destroy(rt->reg, ls->seg->id);
        return rc;
    }
    ls->read_token = g.token;
    rt->capacity += ls->seg->size;
    rt->n_segs++;
    return 0;
}

int kvm_owner_init(kvm_rt_t *rt)
{
    uint64_t left = rt->cfg.memory_size;
    while (left > 0) {
        uint64_t sz = left < rt->cfg.segment_size ? left : rt->cfg.segment_size;
        int rc = seg_add(rt, sz);
        if (rc)
            return rc;
        left -= sz;
    }
    return 0;
}

/* ---- hot upgrade (handoff.h) ---------------------------------------------------------------- */

int kvm_owner_export(kvm_rt_t *rt, struct kvm_handoff *out)
{
    uint32_t map[STORE_MAX_SEGS]; /* rt->segs index -> handoff index */
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        const struct kvm_local_seg *ls = &rt->segs[i];
        if (!ls->seg)
            continue;
        if (ls->retiring)
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
    out->slot_seq = rt->slot_seq;
    struct kvm_slot *s = rt->clock_hand;
    for (size_t i = 0; s && i < rt->n_clock; i++, s = s->cnext) {
        int rc = kvm_handoff_add_slot(out, map[s->segi], KVM_HANDOFF_COMMITTED, s->off, s->len,
                                      s->seq, &s->ident);
        if (rc)
            return rc;
    }
    for (s = rt->reclaim_head; s; s = s->qnext) {
        int rc = kvm_handoff_add_slot(out, map[s->segi], KVM_HANDOFF_RECLAIM, s->off, s->len, 0,
                                      &s->ident);
        if (rc)
            return rc;
    }
    return 0;
}

int kvm_owner_adopt(kvm_rt_t *rt, struct kvm_handoff *h)
{
    KVM_ASSERT(rt->n_segs == 0 && h->n_segs <= STORE_MAX_SEGS);
    for (uint32_t i = 0; i < h->n_segs; i++) {
        struct kvm_local_seg *ls = &rt->segs[rt->n_segs];
        memset(ls, 0, sizeof(*ls));
        int rc = seg_adopt(rt->reg, h->segs[i].id, h->segs[i].fd, h->segs[i].size, &ls->seg);
        if (rc)
            return rc;
        h->segs[i].fd = -1; /* the registry's now */
        struct seg_grant g;
        if ((rc = alloc_new(&ls->alloc, ls->seg->size)) != 0 ||
            (rc = seg_grant(rt->reg, ls->seg->id, 0, ls->seg->size, SEG_READ, 0, &g)) != 0) {
            alloc_free(ls->alloc);
            seg_destroy(rt->reg, ls->seg->id);
            ls->seg = NULL;
            return rc;
        }
        ls->read_token = g.token;
        rt->capacity += ls->seg->size;
        rt->n_segs++;
    }
    for (uint32_t i = 0; i < h->n_slots; i++) {
        const struct kvm_handoff_slot *hs = &h->slots[i];
        struct kvm_slot *s = calloc(1, sizeof(*s));
        if (!s || kvm_ident_copy(&s->ident, &hs->ident) != 0) {
            free(s);
            return KVMESH_ENOMEM;
        }
        int rc = alloc_reserve_at(rt->segs[hs->segi].alloc, hs->off, hs->len, s);
        if (rc) {
            kvm_ident_free(&s->ident);
            free(s);
            return rc;
        }
        s->rt = rt;
        s->segi = hs->segi;
        s->off = hs->off;
        s->len = hs->len;
        rt->used += hs->len;
        if (hs->state == KVM_HANDOFF_COMMITTED) {
            s->state = SLOT_COMMITTED;
            s->ref = true;
            s->seq = hs->seq;
            clock_add(rt, s);
        } else {
            s->state = SLOT_RECLAIM;
            s->deadline_ns = 0; /* set when housekeeping starts (kvm_owner_start) */
            q_push(&rt->reclaim_head, &rt->reclaim_tail, s);
            rt->stats.reclaim_bytes += s->len;
        }
    }
    rt->slot_seq = h->slot_seq;
    return 0;
}

static void slot_free(kvm_rt_t *rt, struct kvm_slot *s)
{
    alloc_release(rt->segs[s->segi].alloc, s->off);
    rt->used -= s->len;
    kvm_ident_free(&s->ident);
    free(s);
}

void kvm_owner_fini(kvm_rt_t *rt)
{
    /* Every slot is in exactly one of: reserved queue, reclaim queue, clock ring. */
    while (rt->reserved_head) {
        struct kvm_slot *s = rt->reserved_head;
        q_del(&rt->reserved_head, &rt->reserved_tail, s);
        slot_free(rt, s);
    }
    while (rt->reclaim_head) {
        struct kvm_slot *s = rt->reclaim_head;
        q_del(&rt->reclaim_head, &rt->reclaim_tail, s);
        slot_free(rt, s);
    }
    while (rt->clock_hand) {
        struct kvm_slot *s = rt->clock_hand;
        clock_del(rt, s);
        slot_free(rt, s);
    }
    kvm_owner_fail_waiters(rt);
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        if (!rt->segs[i].seg)
            continue;
        alloc_free(rt->segs[i].alloc);
        seg_destroy(rt->reg, rt->segs[i].seg->id);
    }
    rt->n_segs = 0;
}

void kvm_owner_fail_waiters(kvm_rt_t *rt)
{
    while (rt->waiters) {
        struct kvm_wait *w = rt->waiters;
        rt->waiters = w->next;
        rt->n_waiters--;
        w->cb(w->arg, KVMESH_ECLOSED, "runtime closed", 0, 0, 0);
        kvm_ident_free(&w->ident);
        free(w);
    }
}

void kvm_owner_segments(kvm_rt_t *rt, struct kvm_seg_info *out, uint32_t *n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        if (!rt->segs[i].seg)
            continue; /* removed; a retiring segment stays listed: its replicas are readable */
        out[k++] = (struct kvm_seg_info){rt->segs[i].seg->id, rt->segs[i].seg->size,
                                         rt->segs[i].read_token, rt->segs[i].drained};
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

static struct kvm_slot *slot_find(kvm_rt_t *rt, uint64_t seg_id, uint64_t off)
{
    int i = seg_index(rt, seg_id);
    void *u = NULL;
    if (i < 0 || alloc_lookup(rt->segs[i].alloc, off, &u, NULL) != 0)
        return NULL;
    return u;
}

/* ---- reserve ------------------------------------------------------------------------------- */

static uint64_t now_ns(kvm_rt_t *rt)
{
    return env_now_ns(rt->env);
}

static int try_reserve(kvm_rt_t *rt, const kvm_ident_t *id, uint64_t len, uint32_t ttl_ms,
                       uint64_t *seg, uint64_t *off, uint64_t *token)
{
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        struct kvm_local_seg *ls = &rt->segs[i];
        if (!ls->seg || ls->retiring || ls->drained || !alloc_can_fit(ls->alloc, len))
            continue;
        struct kvm_slot *s = calloc(1, sizeof(*s));
        if (!s)
            return KVMESH_ENOMEM;
        if (kvm_ident_copy(&s->ident, id) != 0 || alloc_reserve(ls->alloc, len, s, &s->off) != 0) {
            kvm_ident_free(&s->ident);
            free(s);
            continue;
        }
        struct seg_grant g;
        int rc = seg_grant(rt->reg, ls->seg->id, s->off, len, SEG_WRITE,
                           (uint64_t)ttl_ms * 1000000ull, &g);
        if (rc) {
            alloc_release(ls->alloc, s->off);
            kvm_ident_free(&s->ident);
            free(s);
            return rc;
        }
        s->rt = rt;
        s->segi = i;
        s->len = len;
        s->token = g.token;
        s->state = SLOT_RESERVED;
        s->deadline_ns = now_ns(rt) + (uint64_t)ttl_ms * 1000000ull;
        q_push(&rt->reserved_head, &rt->reserved_tail, s);
        rt->used += len;
        obs_count(rt->metrics, allocations_total, OBS_TIER_DRAM, OBS_ALLOC_OK, 1);
        obs_count(rt->metrics, allocated_bytes_total, OBS_TIER_DRAM, OBS_NONE, len);
        *seg = ls->seg->id;
        *off = s->off;
        *token = g.token;
        return 0;
    }
    return KVMESH_ENOSPC;
}

static bool anything_evictable(kvm_rt_t *rt)
{
    return rt->n_clock > 0 || rt->evict_inflight > 0 || rt->reclaim_head != NULL;
}

static void evict_some(kvm_rt_t *rt, uint64_t need);

/* Bytes eviction must free for a waiting reservation of len bytes: what replicas already in
 * RECLAIM (freed when their grace window ends) will not give back. Objects are not evicted for
 * space that is already on its way out; if fragmentation keeps the reservation waiting once the
 * reclaim happened, the next housekeeping turn asks again with nothing pending. */
static uint64_t evict_need(const kvm_rt_t *rt, uint64_t len)
{
    uint64_t pending = rt->stats.reclaim_bytes;
    return len > pending ? len - pending : 0;
}

void kvm_owner_reserve(kvm_rt_t *rt, const kvm_ident_t *id, uint64_t len, uint32_t ttl_ms,
                       kvm_reserve_cb cb, void *arg)
{
    uint64_t seg = 0, off = 0, token = 0;
    if (rt->state != KVM_MS_ACTIVE) {
        char msg[96];
        snprintf(msg, sizeof(msg), "owner %s is %s and takes no new replicas", rt->idhex,
                 kvm_member_state_name(rt->state));
        cb(arg, KVMESH_EUNAVAILABLE, msg, 0, 0, 0);
        return;
    }
    uint64_t largest = 0;
    for (uint32_t i = 0; i < rt->n_segs; i++)
        if (rt->segs[i].seg && !rt->segs[i].retiring && !rt->segs[i].drained &&
            rt->segs[i].seg->size > largest)
            largest = rt->segs[i].seg->size;
    if (len > largest) { /* eviction cannot help: no segment is that large */
        char msg[200];
        if (largest == 0 && rt->n_segs > 0)
            snprintf(msg, sizeof(msg),
                     "owner %s takes no new replicas: every segment is drained or retiring "
                     "(kvmesh admin segments)",
                     rt->idhex);
        else
            snprintf(msg, sizeof(msg),
                     "owner %s has no segment large enough for %" PRIu64 " bytes (largest %" PRIu64
                     ")",
                     rt->idhex, len, largest);
        obs_count(rt->metrics, allocations_total, OBS_TIER_DRAM, OBS_ALLOC_NO_SPACE, 1);
        cb(arg, KVMESH_ENOSPC, msg, 0, 0, 0);
        return;
    }
    int rc = rt->waiters ? KVMESH_ENOSPC : try_reserve(rt, id, len, ttl_ms, &seg, &off, &token);
    if (rc == 0) {
        cb(arg, 0, "", seg, off, token);
        return;
    }
    if (rc == KVMESH_ENOSPC && anything_evictable(rt) && rt->n_waiters < STORE_RESERVE_WAIT_MAX) {
        struct kvm_wait *w = calloc(1, sizeof(*w));
        if (w && kvm_ident_copy(&w->ident, id) == 0) {
            w->len = len;
            w->ttl_ms = ttl_ms;
            w->deadline_ns = now_ns(rt) + (uint64_t)rt->cfg.request_timeout_ms * 500000ull;
            w->cb = cb;
            w->arg = arg;
            struct kvm_wait **pp = &rt->waiters;
            while (*pp)
                pp = &(*pp)->next;
            *pp = w;
            rt->n_waiters++;
            rt->stats.reserve_waits++;
            evict_some(rt, evict_need(rt, len));
            return;
        }
        free(w);
    }
    obs_count(rt->metrics, allocations_total, OBS_TIER_DRAM, OBS_ALLOC_NO_SPACE, 1);
    char msg[256];
    snprintf(msg, sizeof(msg),
             "owner %s has no room for %" PRIu64 " bytes (%" PRIu64 " of %" PRIu64
             " bytes used, nothing evictable)",
             rt->idhex, len, rt->used, rt->capacity);
    cb(arg, rc, msg, 0, 0, 0);
}

static void waiters_run(kvm_rt_t *rt)
{
    uint64_t now = now_ns(rt);
    while (rt->waiters) {
        struct kvm_wait *w = rt->waiters;
        uint64_t seg = 0, off = 0, token = 0;
        int rc = try_reserve(rt, &w->ident, w->len, w->ttl_ms, &seg, &off, &token);
        if (rc == KVMESH_ENOSPC && now < w->deadline_ns && anything_evictable(rt)) {
            evict_some(rt, evict_need(rt, w->len));
            return; /* keep FIFO order */
        }
        rt->waiters = w->next;
        rt->n_waiters--;
        char msg[256] = "";
        if (rc)
            snprintf(msg, sizeof(msg),
                     "owner %s could not free %" PRIu64 " bytes by eviction in time (%" PRIu64
                     " of %" PRIu64 " used)",
                     rt->idhex, w->len, rt->used, rt->capacity);
        w->cb(w->arg, rc, msg, seg, off, token);
        kvm_ident_free(&w->ident);
        free(w);
    }
}

/* ---- commit / release / hit -------------------------------------------------------------------
 */

/*
 * Held reservations: a RESERVED slot whose TTL passed is not freed (its writer's route update
 * may have been applied: an indeterminate publication, a lost CAS answer, a writer gone); it is
 * held until an exact route lookup settles it (expiry_looked_up: committed when the route
 * references it, released when the route proves it does not). rt->stats.reservations_held and
 * the kvmesh_reservations_held gauge count the slots held now.
 */
static void held_begin(kvm_rt_t *rt, struct kvm_slot *s)
{
    if (s->held)
        return;
    s->held = true;
    rt->stats.reservations_held++;
    obs_gauge_set(rt->metrics, reservations_held, OBS_NONE, OBS_NONE,
                  (int64_t)rt->stats.reservations_held);
}

static void held_end(kvm_rt_t *rt, struct kvm_slot *s)
{
    if (!s->held)
        return;
    s->held = false;
    rt->stats.reservations_held--;
    obs_gauge_set(rt->metrics, reservations_held, OBS_NONE, OBS_NONE,
                  (int64_t)rt->stats.reservations_held);
}

static void slot_to_reclaim(kvm_rt_t *rt, struct kvm_slot *s)
{
    if (s->state == SLOT_RECLAIM)
        return;
    held_end(rt, s);
    if (s->state == SLOT_RESERVED)
        q_del(&rt->reserved_head, &rt->reserved_tail, s);
    else if (s->in_clock)
        clock_del(rt, s);
    seg_revoke(rt->reg, s->token);
    s->state = SLOT_RECLAIM;
    s->deadline_ns = now_ns(rt) + (uint64_t)rt->cfg.reclaim_grace_ms * 1000000ull;
    q_push(&rt->reclaim_head, &rt->reclaim_tail, s);
    rt->stats.reclaim_bytes += s->len;
}

static void slot_commit(kvm_rt_t *rt, struct kvm_slot *s)
{
    if (s->state != SLOT_RESERVED)
        return;
    held_end(rt, s);
    q_del(&rt->reserved_head, &rt->reserved_tail, s);
    seg_revoke(rt->reg, s->token);
    s->state = SLOT_COMMITTED;
    s->ref = true;
    s->seq = ++rt->slot_seq;
    clock_add(rt, s);
}

void kvm_owner_commit(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    struct kvm_slot *s = slot_find(rt, seg, off);
    if (s)
        slot_commit(rt, s);
}

void kvm_owner_release(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    struct kvm_slot *s = slot_find(rt, seg, off);
    if (s)
        slot_to_reclaim(rt, s);
}

void kvm_owner_hit(kvm_rt_t *rt, uint64_t seg, uint64_t off)
{
    struct kvm_slot *s = slot_find(rt, seg, off);
    if (s && s->state == SLOT_COMMITTED)
        s->ref = true;
}

/* ---- TTL expiry: the route decides ---------------------------------------------------------- */

static bool route_has_slot(const kvm_rt_t *rt, const kvm_route_t *r, const struct kvm_slot *s)
{
    kvm_hot_replica_t rep = {
        .owner = rt->self.id, .segment = rt->segs[s->segi].seg->id, .offset = s->off};
    return r && !kvm_route_is_tombstone(r) && kvm_route_find_replica(r, &rep) >= 0;
}

static void expiry_looked_up(void *arg, int rc, const kvm_route_t *r);

/* held_op.h: KEEP asks again in 1 s; REREAD looks the route up again (commit or free). */
static void held_op_done(void *arg, int rc, enum kvm_held_verdict v)
{
    struct kvm_slot *s = arg;
    kvm_rt_t *rt = s->rt;
    s->busy = false;
    if (rc == KVMESH_ECANCELED || s->state != SLOT_RESERVED)
        return;
    s->op_checked = rc == 0 && v == KVM_HELD_REREAD;
    if (s->op_checked && route_lookup(rt->route, &s->ident, expiry_looked_up, s) == 0) {
        s->busy = true;
        return;
    }
    q_del(&rt->reserved_head, &rt->reserved_tail, s);
    s->deadline_ns = now_ns(rt) + 1000000000ull;
    q_push(&rt->reserved_head, &rt->reserved_tail, s);
}

/* The quota operation decides before a held slot the route does not reference is freed. */
static void held_op_start(kvm_rt_t *rt, struct kvm_slot *s)
{
    kvm_hot_replica_t rep = {
        .owner = rt->self.id, .segment = rt->segs[s->segi].seg->id, .offset = s->off};
    s->busy = kvm_held_op_check(rt, &s->ident, &rep, held_op_done, s) == 0;
    if (!s->busy)
        held_op_done(s, KVMESH_EUNAVAILABLE, KVM_HELD_KEEP); /* unknown: ask again later */
}

static void expiry_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct kvm_slot *s = arg;
    kvm_rt_t *rt = s->rt;
    s->busy = false;
    if (rc == KVMESH_ECANCELED)
        return;
    if (s->state != SLOT_RESERVED)
        return; /* committed or released meanwhile */
    if (rc == 0 && route_has_slot(rt, r, s)) {
        slot_commit(rt, s);
        kvm_cold_published(rt, r); /* cold tier: a PendingOffload on this runtime's device */
    } else if ((rc == 0 || rc == KVMESH_ENOENT) && !s->op_checked) {
        held_op_start(rt, s); /* step 2 of "Replaying a put" (docs/tenancy.md) */
    } else if (rc == 0 || rc == KVMESH_ENOENT) {
        rt->stats.reservations_expired++;
        obs_count(rt->metrics, reservations_released_after_lookup_total, OBS_NONE, OBS_NONE, 1);
        slot_to_reclaim(rt, s);
    } else {
        /* Unknown: ask again later. */
        q_del(&rt->reserved_head, &rt->reserved_tail, s);
        s->deadline_ns = now_ns(rt) + 1000000000ull;
        q_push(&rt->reserved_head, &rt->reserved_tail, s);
    }
}

/* ---- eviction ------------------------------------------------------------------------------ */

struct evict_ctx {
    struct kvm_slot *s;
};

static void evict_back(kvm_rt_t *rt, struct kvm_slot *s)
{
    s->busy = false;
    rt->evict_inflight--;
    if (s->state == SLOT_COMMITTED && !s->in_clock) {
        s->ref = false;
        clock_add(rt, s);
    }
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
    struct kvm_slot *s = arg;
    kvm_rt_t *rt = s->rt;
    if (rc == 0) {
        evict_finalize(rt, r);
        obs_count(rt->metrics, evictions_total, OBS_TIER_DRAM, OBS_NONE, 1);
        obs_count(rt->metrics, evicted_bytes_total, OBS_TIER_DRAM, OBS_NONE, s->len);
        s->busy = false;
        rt->evict_inflight--;
        slot_to_reclaim(rt, s);
        return;
    }
    rt->stats.evict_conflicts++;
    evict_back(rt, s);
}

/* Cold tier: the last hot replica of a route with a cold backing. Materialized: the last-hot
 * eviction (cold_evict: only once the cold copy is usage-committed; the bytes are freed only
 * after its CAS removed the replica). PendingOffload: kept until the offload materializes it.
 * Returns false when the route has no cold backing of this runtime (ordinary eviction). */
static void evict_cold_done(void *arg, int rc)
{
    struct kvm_slot *s = arg;
    kvm_rt_t *rt = s->rt;
    if (rc == 0 && s->state == SLOT_COMMITTED) {
        obs_count(rt->metrics, evictions_total, OBS_TIER_DRAM, OBS_NONE, 1);
        obs_count(rt->metrics, evicted_bytes_total, OBS_TIER_DRAM, OBS_NONE, s->len);
        obs_count(rt->metrics, cold_evictions_total, OBS_NONE, OBS_NONE, 1);
        s->busy = false;
        rt->evict_inflight--;
        slot_to_reclaim(rt, s);
        return;
    }
    evict_back(rt, s);
}

static bool evict_cold(kvm_rt_t *rt, struct kvm_slot *s, const kvm_route_t *r,
                       const kvm_hot_replica_t *slot)
{
    if (kvm_cold_pins_last(rt, r)) {
        evict_back(rt, s);
        return true;
    }
    if (kvm_cold_claims(rt, r)) { /* eviction-triggered offload: materialize, then evict */
        int k = kvm_route_find_replica(r, slot);
        KVM_ASSERT(k >= 0);
        if (kvm_cold_evict_claim(rt, r, &r->replicas[k], evict_cold_done, s) != 0)
            evict_back(rt, s);
        return true;
    }
    if (r->cold.kind != KVM_COLD_MATERIALIZED)
        return false;
    int i = kvm_route_find_replica(r, slot);
    KVM_ASSERT(i >= 0);
    if (kvm_cold_evict_last(rt, &s->ident, &r->replicas[i], evict_cold_done, s) != 0)
        evict_back(rt, s);
    return true;
}

static void evict_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct kvm_slot *s = arg;
    kvm_rt_t *rt = s->rt;
    if (s->state != SLOT_COMMITTED || rc == KVMESH_ECANCELED) {
        evict_back(rt, s);
        return;
    }
    if ((rc == 0 && !route_has_slot(rt, r, s)) || rc == KVMESH_ENOENT) {
        /* No route references the slot: nothing to unpublish. */
        s->busy = false;
        rt->evict_inflight--;
        slot_to_reclaim(rt, s);
        return;
    }
    if (rc) {
        evict_back(rt, s);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    if (kvm_route_copy(&next, r) != 0) {
        evict_back(rt, s);
        return;
    }
    kvm_hot_replica_t rep = {
        .owner = rt->self.id, .segment = rt->segs[s->segi].seg->id, .offset = s->off};
    kvm_route_remove_replica(&next, &rep);
    /* Invariant (repair.h kvm_replica_readable): never leave a live route with no replica a
     * reader can get bytes from. When the others are all on closed or gone owners, this was the
     * last readable copy: the object leaves the cache as a whole, unless a materialized cold
     * copy keeps it readable. */
    bool readable_left = false;
    for (uint32_t i = 0; i < next.n_replicas; i++)
        readable_left |= kvm_replica_readable(rt, &next.replicas[i]);
#ifdef KVMESH_CHAOS_BROKEN_EVICT_LAST_LIVE
    readable_left = next.n_replicas > 0; /* broken variant: only our own copy is considered */
#endif
    if (next.n_replicas == 0 && kvm_cold_has_device(rt) && evict_cold(rt, s, r, &rep)) {
        kvm_route_free(&next); /* the cold tier decides (cold_glue.c) */
        return;
    }
    if (!readable_left && next.cold.kind != KVM_COLD_MATERIALIZED) {
        /* The last readable copy: the object leaves the cache (a tombstone, like a delete). */
        next.n_replicas = 0;
        next.predecessor_op = r->content_op;
        next.content_op = kvm_rt_next_op_id(rt);
        next.tomb = KVM_TOMB_PENDING;
        next.length = next.checksum = 0;
        memset(&next.cold, 0, sizeof(next.cold));
    }
    /* A quota tenant's object leaves through the delete protocol: the refund (quota_tomb.c). */
    bool quota = next.tomb == KVM_TOMB_PENDING && kvm_quota_applies(rt, &r->ident);
    if (next.tomb == KVM_TOMB_PENDING && !quota) /* purged then, even if its finalize fails */
        next.retain_until_ms = kvm_rt_tomb_deadline(rt);
    if ((quota ? kvm_quota_evict(rt, r, &next, evict_cas_done, s)
               : route_cas(rt->route, &r->version, &next, evict_cas_done, s)) != 0)
        evict_back(rt, s);
    kvm_route_free(&next);
}

static void evict_some(kvm_rt_t *rt, uint64_t need)
{
    uint64_t low = (uint64_t)((double)rt->capacity * rt->cfg.evict_low_watermark);
    uint64_t pending = rt->stats.reclaim_bytes;
    size_t scanned = 0, limit = 2 * rt->n_clock + 1;
    while (rt->clock_hand && rt->evict_inflight < STORE_EVICT_INFLIGHT && scanned++ < limit) {
        uint64_t target_used = rt->used > pending ? rt->used - pending : 0;
        if (target_used <= low && need == 0)
            break;
        struct kvm_slot *s = rt->clock_hand;
        if (s->ref) {
            s->ref = false;
            rt->clock_hand = s->cnext;
            continue;
        }
        clock_del(rt, s);
        s->busy = true;
        rt->evict_inflight++;
        pending += s->len;
        need = need > s->len ? need - s->len : 0;
        if (route_lookup(rt->route, &s->ident, evict_looked_up, s) != 0)
            evict_back(rt, s);
    }
}

/* ---- housekeeping -------------------------------------------------------------------------- */

static void tick(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->tick_timer = 0;
    uint64_t now = now_ns(rt);
    unsigned budget = STORE_TICK_BUDGET;
    while (rt->reclaim_head && rt->reclaim_head->deadline_ns <= now && budget--) {
        struct kvm_slot *s = rt->reclaim_head;
        q_del(&rt->reclaim_head, &rt->reclaim_tail, s);
        if (s->busy) { /* a lookup still holds it: later */
            s->deadline_ns = now + (uint64_t)rt->cfg.reclaim_grace_ms * 1000000ull;
            q_push(&rt->reclaim_head, &rt->reclaim_tail, s);
            continue;
        }
        rt->stats.reclaim_bytes -= s->len;
        rt->stats.reclaimed++;
        obs_count(rt->metrics, reclaimed_bytes_total, OBS_TIER_DRAM, OBS_NONE, s->len);
        slot_free(rt, s);
    }
    budget = STORE_TICK_BUDGET;
    for (struct kvm_slot *s = rt->reserved_head; s && s->deadline_ns <= now && budget--;) {
        struct kvm_slot *n = s->qnext;
        held_begin(rt, s);
        if (!s->busy) {
            s->busy = true;
            if (route_lookup(rt->route, &s->ident, expiry_looked_up, s) != 0)
                s->busy = false;
        }
        s = n;
    }
    if (rt->waiters)
        waiters_run(rt);
    uint64_t high = (uint64_t)((double)rt->capacity * rt->cfg.evict_high_watermark);
    if (rt->used > high || rt->waiters)
        evict_some(rt, 0);
    atomic_store(&rt->a_used, rt->used);
    obs_gauge_set(rt->metrics, segment_used_bytes, OBS_TIER_DRAM, OBS_NONE, (int64_t)rt->used);
    obs_gauge_set(rt->metrics, segment_capacity_bytes, OBS_TIER_DRAM, OBS_NONE,
                  (int64_t)rt->capacity);
    if (!atomic_load(&rt->closing))
        rt->tick_timer = env_timer_start(rt->env, STORE_TICK_MS * 1000000ull, tick, rt);
}

void kvm_owner_start(kvm_rt_t *rt)
{
    /* Slots adopted in RECLAIM from a hot-upgrade predecessor get a whole grace window here. */
    for (struct kvm_slot *s = rt->reclaim_head; s && s->deadline_ns == 0; s = s->qnext)
        s->deadline_ns = now_ns(rt) + (uint64_t)rt->cfg.reclaim_grace_ms * 1000000ull;
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
    /* The cap smallest commit sequences above the cursor (insertion into a sorted array). */
    struct kvm_slot *sel[64];
    size_t n = 0;
    if (cap > KVM_ARRAY_SIZE(sel))
        cap = KVM_ARRAY_SIZE(sel);
    struct kvm_slot *s = rt->clock_hand;
    for (size_t i = 0; s && i < rt->n_clock; i++, s = s->cnext) {
        if (s->seq <= *cursor || (seg_filter && rt->segs[s->segi].seg->id != seg_filter))
            continue;
        if (n == cap && s->seq >= sel[n - 1]->seq)
            continue;
        size_t j = n < cap ? n++ : n - 1;
        while (j > 0 && sel[j - 1]->seq > s->seq) {
            sel[j] = sel[j - 1];
            j--;
        }
        sel[j] = s;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (kvm_ident_copy(&ids[k], &sel[i]->ident) != 0)
            break;
        out[k++] = (kvm_hot_replica_t){.owner = rt->self.id,
                                       .segment = rt->segs[sel[i]->segi].seg->id,
                                       .offset = sel[i]->off,
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
    rt->segs[i].retiring = true;
    return 0;
}

bool kvm_owner_drain_segments(kvm_rt_t *rt, const uint64_t *ids, uint32_t n)
{
    bool changed = false;
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        struct kvm_local_seg *ls = &rt->segs[i];
        if (!ls->seg)
            continue;
        bool want = false;
        for (uint32_t k = 0; k < n && !want; k++)
            want = ids[k] == ls->seg->id;
        changed |= want != ls->drained;
        ls->drained = want;
    }
    return changed;
}

int kvm_owner_remove_segment(kvm_rt_t *rt, uint64_t seg_id)
{
    int i = seg_index(rt, seg_id);
    if (i < 0)
        return kvm_errf(KVMESH_ENOENT, "no segment %016" PRIx64 " on this runtime", seg_id);
    struct kvm_local_seg *ls = &rt->segs[i];
    alloc_stats_t a;
    alloc_stats(ls->alloc, &a);
    if (!ls->retiring || a.n_used)
        return kvm_errf(KVMESH_EAGAIN, "segment %016" PRIx64 " still holds %" PRIu64 " slots",
                        seg_id, a.n_used);
    rt->capacity -= ls->seg->size;
    alloc_free(ls->alloc);
    seg_destroy(rt->reg, ls->seg->id);
    ls->alloc = NULL;
    ls->seg = NULL;
    return 0;
}

void kvm_owner_stats(kvm_rt_t *rt, struct kvm_rt_stats *st)
{
    *st = rt->stats;
    int64_t ev = 0; /* counted once, in the registry */
    (void)obs_metrics_read(rt->metrics, "evictions_total", OBS_TIER_DRAM, OBS_NONE, &ev);
    st->evictions = (uint64_t)ev;
    st->capacity = rt->capacity;
    st->used = rt->used;
    uint64_t fr = 0, lf = 0;
    for (uint32_t i = 0; i < rt->n_segs; i++) {
        if (!rt->segs[i].seg)
            continue;
        alloc_stats_t a;
        alloc_stats(rt->segs[i].alloc, &a);
        fr += a.free;
        lf = a.largest_free > lf ? a.largest_free : lf;
    }
    st->fragmentation = fr ? 1.0 - (double)lf / (double)fr : 0;
    if (rt->route)
        route_table_counts(rt->route, &st->route_entries, &st->route_tombs, &st->tombs_purged);
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
    if (req->type == STORE_RPC_COMMIT) {
        kvm_owner_commit(rt, m.seg, m.offset);
        struct kvm_slot *sl = kvm_cold_has_device(rt) ? slot_find(rt, m.seg, m.offset) : NULL;
        if (sl && sl->state == SLOT_COMMITTED)
            kvm_cold_slot_committed(rt, &sl->ident); /* a remote writer's offload to our device */
    } else
        kvm_owner_release(rt, m.seg, m.offset);
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
}
