/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slot_core.c — the storage owner's slot protocol, sans I/O (slot_core.h has the state diagram,
 * the invariants and the ownership rules). This file owns the slots, the segments' allocators,
 * the reserved and reclaim queues (FIFO by deadline), the CLOCK ring of committed slots, the
 * list of committed slots whose eviction is in flight and the reservations waiting for space;
 * it reaches the world only through slot_effects_t.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/slab.h"
#include "core/util.h"
#include "store/alloc.h"
#include "store/slot_core.h"

/* The slot is its block's allocator record (slot_core.h): the overlaid words must line up. */
_Static_assert(offsetof(slot_t, blk) == 0, "a slot starts with its block record");
_Static_assert(offsetof(slot_t, off_u) == offsetof(alloc_blk_t, off_u), "off_u overlays blk.off_u");
_Static_assert(offsetof(slot_t, len) == offsetof(alloc_blk_t, len), "len overlays blk.len");
_Static_assert(offsetof(slot_t, deadline_ns) == offsetof(alloc_blk_t, fprev) &&
                   offsetof(slot_t, seq) == offsetof(alloc_blk_t, fprev),
               "the deadline / sequence overlays the record word unused while allocated");
_Static_assert(SLOT_CORE_MAX_SEGS <= 64, "segi is 6 bits");
_Static_assert(SLOT_FREED < 8, "a slot state is 3 bits");
_Static_assert(offsetof(slot_t, ident_enc) == sizeof(alloc_blk_t) + 26,
               "a slot is its block record, token, links, 16 bits and the encoding");

struct slot_wait {
    struct slot_wait *next;
    kvm_ident_t ident;
    uint64_t len;
    uint32_t ttl_ms;
    uint64_t deadline_ns;
    slot_reserve_cb cb;
    void *arg;
};

struct slot_seg {
    uint64_t id, size;
    alloc_t *alloc;
    bool present, retiring, drained;
};

struct slot_core {
    slot_core_cfg_t cfg;
    slot_effects_t fx;
    void *ctx;
    unsigned bugs;
    struct slot_seg segs[SLOT_CORE_MAX_SEGS];
    uint32_t n_segs;
    uint64_t capacity, used, reclaim_bytes;
    slot_t *reserved_head, *reserved_tail; /* RESERVED and HELD, FIFO by TTL end */
    slot_t *reclaim_head, *reclaim_tail;   /* RECLAIM, FIFO by grace end */
    slot_t *clock_hand;                    /* ring of COMMITTED slots not being evicted */
    slot_t *evict_head, *evict_tail;       /* COMMITTED slots out of the ring, being evicted */
    size_t n_clock, n_live;
    uint32_t evict_inflight;
    uint64_t seq;
    struct slot_wait *waiters;
    size_t n_waiters;
    uint64_t reclaimed, reservations_expired, reserve_waits, reservations_held, evict_conflicts;
    uint64_t notes_stale;
    slab_t pool; /* the slots and the allocators' free-block records (bare slots) */
};

const char *slot_state_name(enum slot_state s)
{
    static const char *const names[] = {"new", "reserved", "held", "committed", "reclaim", "freed"};
    return (unsigned)s < KVM_ARRAY_SIZE(names) ? names[s] : "?";
}

static bool legal(enum slot_state from, enum slot_state to)
{
    switch (from) {
    case SLOT_NEW:
        return to == SLOT_RESERVED || to == SLOT_COMMITTED || to == SLOT_RECLAIM;
    case SLOT_RESERVED:
        return to == SLOT_HELD || to == SLOT_COMMITTED || to == SLOT_RECLAIM;
    case SLOT_HELD:
        return to == SLOT_COMMITTED || to == SLOT_RECLAIM;
    case SLOT_COMMITTED:
        return to == SLOT_RECLAIM;
    case SLOT_RECLAIM:
        return to == SLOT_FREED;
    case SLOT_FREED:
        return false;
    }
    return false;
}

static void set_state(slot_t *s, enum slot_state to)
{
    KVM_ASSERT(legal(s->state, to));
    KVM_ASSERT(to != SLOT_FREED || (!s->busy && !s->landing));
    s->state = to;
}

static void event(slot_core_t *c, enum slot_event ev, uint64_t bytes)
{
    if (c->fx.event)
        c->fx.event(c->ctx, ev, bytes);
}

/* The write grant ends; the token stays as the slot's identity (slot_note_t). */
static void revoke(slot_core_t *c, slot_t *s)
{
    KVM_ASSERT(s->state == SLOT_RESERVED || s->state == SLOT_HELD);
    if (c->fx.revoke && s->token)
        c->fx.revoke(c->ctx, s->token);
}

/* ---- queues and the clock ring --------------------------------------------------------------- */

static void q_push(slot_t **head, slot_t **tail, slot_t *s)
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

static void q_del(slot_t **head, slot_t **tail, slot_t *s)
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

/* Whether s is in the clock ring: COMMITTED and not being evicted (no bit of its own). */
static bool in_clock(const slot_t *s)
{
    return s->state == SLOT_COMMITTED && !s->evicting;
}

/* s into a queue after p (p NULL: at the head). */
static void q_insert_after(slot_t **head, slot_t **tail, slot_t *p, slot_t *s)
{
    KVM_ASSERT(!s->queued);
    s->qprev = p;
    s->qnext = p ? p->qnext : *head;
    if (s->qnext)
        s->qnext->qprev = s;
    else
        *tail = s;
    if (p)
        p->qnext = s;
    else
        *head = s;
    s->queued = true;
}

/* Into the reclaim queue in deadline order, from the tail: a slot normally goes last (its grace
 * ends after every earlier one's); only slots held longer for a late write (late_write_hold:
 * rare) are passed over, so that reclaim_due, which stops at the first slot not due, is never
 * kept back by them. */
static void reclaim_push(slot_core_t *c, slot_t *s)
{
    slot_t *p = c->reclaim_tail;
    while (p && p->deadline_ns > s->deadline_ns)
        p = p->qprev;
    q_insert_after(&c->reclaim_head, &c->reclaim_tail, p, s);
}

static void clock_add(slot_core_t *c, slot_t *s)
{
    KVM_ASSERT(in_clock(s) && !s->queued);
    if (!c->clock_hand) {
        s->cnext = s->cprev = s;
        c->clock_hand = s;
    } else {
        slot_t *h = c->clock_hand;
        s->cnext = h;
        s->cprev = h->cprev;
        h->cprev->cnext = s;
        h->cprev = s;
    }
    c->n_clock++;
}

static void clock_del(slot_core_t *c, slot_t *s)
{
    KVM_ASSERT(in_clock(s) && c->n_clock > 0);
    if (s->cnext == s) {
        c->clock_hand = NULL;
    } else {
        s->cprev->cnext = s->cnext;
        s->cnext->cprev = s->cprev;
        if (c->clock_hand == s)
            c->clock_hand = s->cnext;
    }
    s->cnext = s->cprev = NULL;
    c->n_clock--;
}

/* ---- life of a core -------------------------------------------------------------------------- */

int slot_core_new(const slot_core_cfg_t *cfg, const slot_effects_t *fx, void *ctx,
                  slot_core_t **out)
{
    KVM_ASSERT(fx->lookup);
    slot_core_t *c = calloc(1, sizeof(*c));
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the owner's slot core");
    c->cfg = *cfg;
    c->fx = *fx;
    c->ctx = ctx;
    slab_init(&c->pool);
    if (!c->cfg.name)
        c->cfg.name = "owner";
    if (!c->cfg.reclaim_cap)
        c->cfg.reclaim_cap = SLOT_RECLAIM_CAP;
    *out = c;
    return 0;
}

/* The length a canonical identity encoding gives itself (ident.h), or 0 when enc (len bytes)
 * is too short for the lengths it holds. */
static size_t enc_self_len(const uint8_t *enc, size_t len)
{
    if (!enc || len < 5)
        return 0;
    size_t tl = enc[1];
    if (2 + tl >= len)
        return 0;
    size_t dl = enc[2 + tl];
    if (4 + tl + dl >= len)
        return 0;
    return 5 + tl + dl + ((size_t)enc[3 + tl + dl] << 8 | enc[4 + tl + dl]);
}

/* The bytes record s was taken from the pool with: a bare record's, or a slot's with its
 * encoding. */
static size_t slot_bytes(const slot_t *s)
{
    return offsetof(slot_t, ident_enc) + (s->bare ? 0 : slot_ident(s).enc_len);
}

/* The allocators' records (alloc_recs_t): bare slots of the pool; and every record they let go,
 * a bare one or a released slot (whose encoding the allocator never overwrites). */
static alloc_blk_t *rec_new(void *ctx)
{
    slot_core_t *c = ctx;
    slot_t *s = slab_alloc(&c->pool, offsetof(slot_t, ident_enc));
    if (!s)
        return NULL;
    s->bare = true;
    return &s->blk;
}

static void rec_free(void *ctx, alloc_blk_t *rec)
{
    slot_core_t *c = ctx;
    slot_t *s = KVM_CONTAINER_OF(rec, slot_t, blk);
    slab_free(&c->pool, s, slot_bytes(s));
}

/* A slot with a copy of id inline; its block is not reserved yet (give it back with rec_free).
 * KVMESH_EINVAL for an encoding that is not canonical (the slot keeps no length of its own). */
static int slot_new(slot_core_t *c, const kvm_ident_t *id, slot_t **out)
{
    size_t n = enc_self_len(id->enc, id->enc_len);
    if (n == 0 || n != id->enc_len)
        return kvm_errf(KVMESH_EINVAL,
                        "a replica slot needs a canonical identity encoding (%u bytes given)",
                        id->enc_len);
    slot_t *s = slab_alloc(&c->pool, offsetof(slot_t, ident_enc) + id->enc_len); /* zeroed */
    if (!s)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for a replica slot");
    memcpy(s->ident_enc, id->enc, id->enc_len);
    *out = s;
    return 0;
}

/* The slot's bytes go back to its segment's allocator, which takes the slot's memory. */
static void slot_drop(slot_core_t *c, slot_t *s)
{
    c->used -= s->len;
    c->n_live--;
    int rc = alloc_release(c->segs[s->segi].alloc, slot_off(s));
    KVM_ASSERT(rc == 0);
    (void)rc;
}

void slot_core_free(slot_core_t *c)
{
    if (!c)
        return;
    while (c->reserved_head) {
        slot_t *s = c->reserved_head;
        q_del(&c->reserved_head, &c->reserved_tail, s);
        slot_drop(c, s);
    }
    while (c->reclaim_head) {
        slot_t *s = c->reclaim_head;
        q_del(&c->reclaim_head, &c->reclaim_tail, s);
        slot_drop(c, s);
    }
    while (c->clock_hand) {
        slot_t *s = c->clock_hand;
        clock_del(c, s);
        slot_drop(c, s);
    }
    while (c->evict_head) { /* (their lookups or CAS never answer now) */
        slot_t *s = c->evict_head;
        q_del(&c->evict_head, &c->evict_tail, s);
        slot_drop(c, s);
    }
    while (c->waiters) {
        struct slot_wait *w = c->waiters;
        c->waiters = w->next;
        kvm_ident_free(&w->ident);
        free(w);
    }
    for (uint32_t i = 0; i < c->n_segs; i++)
        alloc_free(c->segs[i].alloc);
    slab_fini(&c->pool);
    free(c);
}

void *slot_core_ctx(const slot_core_t *c)
{
    return c->ctx;
}

void slot_core_test_set_bugs(slot_core_t *c, unsigned bugs)
{
    c->bugs = bugs;
}

/* ---- segments -------------------------------------------------------------------------------- */

int slot_core_seg_add(slot_core_t *c, uint64_t seg_id, uint64_t size, uint32_t *segi)
{
    if (c->n_segs == SLOT_CORE_MAX_SEGS)
        return kvm_errf(KVMESH_ENOSPC, "at most %d segments per runtime", SLOT_CORE_MAX_SEGS);
    struct slot_seg *g = &c->segs[c->n_segs];
    memset(g, 0, sizeof(*g));
    alloc_recs_t recs = {.rec_new = rec_new, .rec_free = rec_free, .ctx = c};
    int rc = alloc_new_recs(&g->alloc, size, &recs);
    if (rc)
        return rc;
    g->id = seg_id;
    g->size = size;
    g->present = true;
    c->capacity += size;
    *segi = c->n_segs++;
    return 0;
}

int slot_core_seg_find(const slot_core_t *c, uint64_t seg_id)
{
    for (uint32_t i = 0; i < c->n_segs; i++)
        if (c->segs[i].present && c->segs[i].id == seg_id)
            return (int)i;
    return -1;
}

uint32_t slot_core_n_segs(const slot_core_t *c)
{
    return c->n_segs;
}

bool slot_core_seg_present(const slot_core_t *c, uint32_t segi)
{
    return segi < c->n_segs && c->segs[segi].present;
}

void slot_core_seg_retire(slot_core_t *c, uint32_t segi)
{
    KVM_ASSERT(slot_core_seg_present(c, segi));
    c->segs[segi].retiring = true;
}

bool slot_core_seg_retiring(const slot_core_t *c, uint32_t segi)
{
    return slot_core_seg_present(c, segi) && c->segs[segi].retiring;
}

bool slot_core_seg_set_drained(slot_core_t *c, uint32_t segi, bool drained)
{
    KVM_ASSERT(slot_core_seg_present(c, segi));
    bool changed = c->segs[segi].drained != drained;
    c->segs[segi].drained = drained;
    return changed;
}

bool slot_core_seg_drained(const slot_core_t *c, uint32_t segi)
{
    return slot_core_seg_present(c, segi) && c->segs[segi].drained;
}

static void held_end(slot_core_t *c, slot_t *s);
static void expire_due(slot_core_t *c, uint64_t now);

/* The remove_undrained broken variant: the segment's idle reserved and reclaim slots are
 * dropped at once (only the drain's list, the committed slots, was waited for). */
static void drop_undrained(slot_core_t *c, uint32_t segi)
{
    for (int q = 0; q < 2; q++) {
        slot_t **head = q ? &c->reclaim_head : &c->reserved_head;
        slot_t **tail = q ? &c->reclaim_tail : &c->reserved_tail;
        for (slot_t *s = *head, *n; s; s = n) {
            n = s->qnext;
            if (s->segi != segi || s->busy || s->landing)
                continue;
            q_del(head, tail, s);
            if (q)
                c->reclaim_bytes -= s->len;
            held_end(c, s);
            if (!q)
                revoke(c, s);
            s->state = SLOT_FREED; /* (broken on purpose: no legal transition) */
            if (c->fx.freed)
                c->fx.freed(c->ctx, s);
            slot_drop(c, s);
        }
    }
}

int slot_core_seg_remove(slot_core_t *c, uint32_t segi, uint64_t *n_slots)
{
    KVM_ASSERT(slot_core_seg_present(c, segi));
    struct slot_seg *g = &c->segs[segi];
    alloc_stats_t a;
    if (g->retiring && (c->bugs & SLOT_BUG_REMOVE_UNDRAINED))
        drop_undrained(c, segi);
    alloc_stats(g->alloc, &a);
    *n_slots = a.n_used;
    if (!g->retiring || a.n_used)
        return kvm_errf(KVMESH_EAGAIN, "segment %016" PRIx64 " still holds %" PRIu64 " slots",
                        g->id, a.n_used);
    c->capacity -= g->size;
    alloc_free(g->alloc);
    g->alloc = NULL;
    g->present = false;
    return 0;
}

static bool seg_open(const struct slot_seg *g)
{
    return g->present && !g->retiring && !g->drained;
}

static slot_t *slot_at(const slot_core_t *c, uint64_t seg_id, uint64_t off)
{
    int i = slot_core_seg_find(c, seg_id);
    void *u = NULL;
    if (i < 0 || alloc_lookup(c->segs[i].alloc, off, &u, NULL) != 0)
        return NULL;
    return u;
}

const slot_t *slot_core_find(const slot_core_t *c, uint64_t seg_id, uint64_t off)
{
    return slot_at(c, seg_id, off);
}

/* ---- transitions ----------------------------------------------------------------------------- */

static void held_begin(slot_core_t *c, slot_t *s)
{
    if (s->state == SLOT_HELD)
        return;
    set_state(s, SLOT_HELD);
    c->reservations_held++;
    event(c, SLOT_EV_HELD_CHANGED, c->reservations_held);
}

static void held_end(slot_core_t *c, slot_t *s)
{
    if (s->state != SLOT_HELD)
        return;
    KVM_ASSERT(c->reservations_held > 0);
    c->reservations_held--;
    event(c, SLOT_EV_HELD_CHANGED, c->reservations_held);
}

static void to_reclaim(slot_core_t *c, uint64_t now, slot_t *s)
{
    if (s->state == SLOT_RECLAIM)
        return;
    held_end(c, s);
    if (s->state == SLOT_RESERVED || s->state == SLOT_HELD) {
        q_del(&c->reserved_head, &c->reserved_tail, s);
        revoke(c, s);
    } else if (in_clock(s)) {
        clock_del(c, s);
    } else {
        q_del(&c->evict_head, &c->evict_tail, s); /* released while being evicted */
    }
    set_state(s, SLOT_RECLAIM);
    if (c->bugs & SLOT_BUG_NO_GRACE) {
        s->deadline_ns = now;
        q_push(&c->reclaim_head, &c->reclaim_tail, s);
    } else {
        s->deadline_ns = now + c->cfg.reclaim_grace_ns;
        reclaim_push(c, s);
    }
    c->reclaim_bytes += s->len;
}

static void to_committed(slot_core_t *c, slot_t *s)
{
    if (s->state != SLOT_RESERVED && s->state != SLOT_HELD)
        return;
    held_end(c, s);
    q_del(&c->reserved_head, &c->reserved_tail, s);
    revoke(c, s);
    set_state(s, SLOT_COMMITTED);
    s->ref = true;
    s->seq = ++c->seq;
    clock_add(c, s);
}

static void slot_free(slot_core_t *c, slot_t *s)
{
    set_state(s, SLOT_FREED);
    if (c->fx.freed)
        c->fx.freed(c->ctx, s);
    slot_drop(c, s);
}

/* Whether a note names slot s (slot_note_t): its token when both have one (an adopted slot has
 * none), else its object when the note carries it. A mismatch is counted. */
static bool note_names(slot_core_t *c, const slot_t *s, const slot_note_t *n)
{
    if (!n || (c->bugs & SLOT_BUG_NO_TOKEN))
        return true;
    bool ok = true;
    if ((n->has & SLOT_NOTE_TOKEN) && s->token)
        ok = n->token == s->token;
    else if (n->has & SLOT_NOTE_OBJECT)
        ok = n->ident_hash == slot_ident(s).hash && n->len == s->len;
    if (!ok)
        c->notes_stale++;
    return ok;
}

const slot_t *slot_core_commit_note(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                                    const slot_note_t *note)
{
    (void)now;
    slot_t *s = slot_at(c, seg_id, off);
    if (!s || !note_names(c, s, note))
        return NULL;
    to_committed(c, s);
    return s;
}

bool slot_core_release_note(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                            const slot_note_t *note)
{
    slot_t *s = slot_at(c, seg_id, off);
    if (!s || !note_names(c, s, note))
        return false;
    to_reclaim(c, now, s);
    return true;
}

const slot_t *slot_core_commit(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off)
{
    return slot_core_commit_note(c, now, seg_id, off, NULL);
}

void slot_core_release(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off)
{
    (void)slot_core_release_note(c, now, seg_id, off, NULL);
}

void slot_core_hit(slot_core_t *c, uint64_t seg_id, uint64_t off)
{
    slot_t *s = slot_at(c, seg_id, off);
    if (s && s->state == SLOT_COMMITTED)
        s->ref = true;
}

/* ---- reserve --------------------------------------------------------------------------------- */

static int try_reserve(slot_core_t *c, uint64_t now, const kvm_ident_t *id, uint64_t len,
                       uint32_t ttl_ms, uint64_t *seg, uint64_t *off, uint64_t *token)
{
    for (uint32_t i = 0; i < c->n_segs; i++) {
        struct slot_seg *g = &c->segs[i];
        if (!seg_open(g) || !alloc_can_fit(g->alloc, len))
            continue;
        slot_t *s = NULL;
        int rc = slot_new(c, id, &s);
        if (rc)
            return rc;
        if (alloc_reserve_rec(g->alloc, len, &s->blk) != 0) {
            rec_free(c, &s->blk);
            continue;
        }
        rc = c->fx.grant ? c->fx.grant(c->ctx, i, slot_off(s), len, ttl_ms, &s->token) : 0;
        if (rc) {
            alloc_release(g->alloc, slot_off(s)); /* (takes s) */
            return rc;
        }
        s->segi = (uint16_t)i;
        KVM_ASSERT(s->len == len);
        set_state(s, SLOT_RESERVED);
        s->deadline_ns = now + (uint64_t)ttl_ms * 1000000ull;
        q_push(&c->reserved_head, &c->reserved_tail, s);
        c->used += len;
        c->n_live++;
        event(c, SLOT_EV_ALLOC_OK, len);
        *seg = g->id;
        *off = slot_off(s);
        *token = s->token;
        return 0;
    }
    return KVMESH_ENOSPC;
}

static bool anything_evictable(const slot_core_t *c)
{
    return c->n_clock > 0 || c->evict_inflight > 0 || c->reclaim_head != NULL;
}

static void evict_some(slot_core_t *c, uint64_t need);

/* Bytes eviction must free for a waiting reservation of len bytes: what slots already in
 * RECLAIM (freed when their grace ends) will not give back. Objects are not evicted for space
 * that is already on its way out; if fragmentation keeps the reservation waiting once the
 * reclaim happened, the next tick asks again with nothing pending. */
static uint64_t evict_need(const slot_core_t *c, uint64_t len)
{
    return len > c->reclaim_bytes ? len - c->reclaim_bytes : 0;
}

static uint64_t largest_open(const slot_core_t *c)
{
    uint64_t largest = 0;
    for (uint32_t i = 0; i < c->n_segs; i++)
        if (seg_open(&c->segs[i]) && c->segs[i].size > largest)
            largest = c->segs[i].size;
    return largest;
}

static bool wait_for_space(slot_core_t *c, uint64_t now, const kvm_ident_t *id, uint64_t len,
                           uint32_t ttl_ms, slot_reserve_cb cb, void *arg)
{
    if (!anything_evictable(c) || c->n_waiters >= c->cfg.wait_max)
        return false;
    struct slot_wait *w = calloc(1, sizeof(*w));
    if (!w || kvm_ident_copy(&w->ident, id) != 0) {
        free(w);
        return false;
    }
    w->len = len;
    w->ttl_ms = ttl_ms;
    w->deadline_ns = now + c->cfg.wait_timeout_ns;
    w->cb = cb;
    w->arg = arg;
    struct slot_wait **pp = &c->waiters;
    while (*pp)
        pp = &(*pp)->next;
    *pp = w;
    c->n_waiters++;
    c->reserve_waits++;
    evict_some(c, evict_need(c, len));
    return true;
}

void slot_core_reserve(slot_core_t *c, uint64_t now, const kvm_ident_t *id, uint64_t len,
                       uint32_t ttl_ms, slot_reserve_cb cb, void *arg)
{
    char msg[256];
    uint64_t seg = 0, off = 0, token = 0;
    if (len > ALLOC_MAX_LEN) { /* (max_object_size is validated below it: api/config.c) */
        snprintf(msg, sizeof(msg),
                 "owner %s refuses %" PRIu64 " bytes: an object is at most %" PRIu64 " bytes",
                 c->cfg.name, len, (uint64_t)ALLOC_MAX_LEN);
        cb(arg, KVMESH_ETOOBIG, msg, 0, 0, 0);
        return;
    }
    uint64_t largest = largest_open(c);
    if (len > largest) { /* eviction cannot help: no segment is that large */
        if (largest == 0 && c->n_segs > 0)
            snprintf(msg, sizeof(msg),
                     "owner %s takes no new replicas: every segment is drained or retiring "
                     "(kvmesh admin segments)",
                     c->cfg.name);
        else
            snprintf(msg, sizeof(msg),
                     "owner %s has no segment large enough for %" PRIu64 " bytes (largest %" PRIu64
                     ")",
                     c->cfg.name, len, largest);
        event(c, SLOT_EV_NO_SPACE, len);
        cb(arg, KVMESH_ENOSPC, msg, 0, 0, 0);
        return;
    }
    int rc = c->waiters ? KVMESH_ENOSPC : try_reserve(c, now, id, len, ttl_ms, &seg, &off, &token);
    if (rc == 0) {
        cb(arg, 0, "", seg, off, token);
        return;
    }
    if (rc == KVMESH_ENOSPC && wait_for_space(c, now, id, len, ttl_ms, cb, arg))
        return;
    event(c, SLOT_EV_NO_SPACE, len);
    snprintf(msg, sizeof(msg),
             "owner %s has no room for %" PRIu64 " bytes (%" PRIu64 " of %" PRIu64
             " bytes used, nothing evictable)",
             c->cfg.name, len, c->used, c->capacity);
    cb(arg, rc, msg, 0, 0, 0);
}

int slot_core_bind(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off, uint64_t token,
                   uint64_t len, const kvm_ident_t *from, const kvm_ident_t *to, uint64_t margin_ns)
{
    slot_t *s = slot_at(c, seg_id, off);
    if (!s || s->state != SLOT_RESERVED || s->token != token || token == 0 || s->len != len ||
        s->busy || s->landing || !from || from->enc_len != slot_ident(s).enc_len ||
        memcmp(from->enc, s->ident_enc, from->enc_len) != 0)
        return kvm_errf(KVMESH_ENOENT,
                        "owner %s holds no such granted range (segment %#" PRIx64
                        ", offset %" PRIu64 ", %" PRIu64 " bytes): taken, expired or released",
                        c->cfg.name, seg_id, off, len);
    if (now >= s->deadline_ns || s->deadline_ns - now <= margin_ns)
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "owner %s: the granted range at offset %" PRIu64
                        " expires too soon to bind",
                        c->cfg.name, off);
    slot_t *n = NULL;
    int rc = slot_new(c, to, &n);
    if (rc)
        return rc;
    struct slot_seg *g = &c->segs[s->segi];
    uint16_t segi = s->segi;
    uint64_t deadline = s->deadline_ns;
    slot_t *prev = s->qprev;
    q_del(&c->reserved_head, &c->reserved_tail, s);
    rc = alloc_release(g->alloc, off); /* (takes s: not read again) */
    KVM_ASSERT(rc == 0);
    rc = alloc_reserve_at_rec(g->alloc, off, len, &n->blk);
    if (rc) { /* the bytes are free again: the grant ends with the reservation */
        rec_free(c, &n->blk);
        c->used -= len;
        c->n_live--;
        if (c->fx.revoke)
            c->fx.revoke(c->ctx, token);
        return kvm_errf(rc, "owner %s: the granted range at offset %" PRIu64 " could not be bound",
                        c->cfg.name, off);
    }
    n->segi = segi;
    n->token = token;
    KVM_ASSERT(n->len == len);
    set_state(n, SLOT_RESERVED);
    n->deadline_ns = deadline;
    q_insert_after(&c->reserved_head, &c->reserved_tail, prev, n);
    return 0;
}

static void waiters_run(slot_core_t *c, uint64_t now)
{
    while (c->waiters) {
        struct slot_wait *w = c->waiters;
        uint64_t seg = 0, off = 0, token = 0;
        int rc = try_reserve(c, now, &w->ident, w->len, w->ttl_ms, &seg, &off, &token);
        if (rc == KVMESH_ENOSPC && now < w->deadline_ns && anything_evictable(c)) {
            evict_some(c, evict_need(c, w->len));
            return; /* keep FIFO order */
        }
        c->waiters = w->next;
        c->n_waiters--;
        char msg[256] = "";
        if (rc)
            snprintf(msg, sizeof(msg),
                     "owner %s could not free %" PRIu64 " bytes by eviction in time (%" PRIu64
                     " of %" PRIu64 " used)",
                     c->cfg.name, w->len, c->used, c->capacity);
        w->cb(w->arg, rc, msg, seg, off, token);
        kvm_ident_free(&w->ident);
        free(w);
    }
}

void slot_core_fail_waiters(slot_core_t *c, int rc, const char *msg)
{
    while (c->waiters) {
        struct slot_wait *w = c->waiters;
        c->waiters = w->next;
        c->n_waiters--;
        w->cb(w->arg, rc, msg, 0, 0, 0);
        kvm_ident_free(&w->ident);
        free(w);
    }
}

/* ---- held reservations: the route decides ---------------------------------------------------- */

enum slot_settle slot_core_settle_decide(const slot_settle_in_t *in)
{
    switch (in->route) {
    case SLOT_ANS_REFERENCED:
        return SLOT_SETTLE_COMMIT;
    case SLOT_ANS_UNREFERENCED:
    case SLOT_ANS_ABSENT:
        return in->check_due ? SLOT_SETTLE_CHECK : SLOT_SETTLE_FREE;
    case SLOT_ANS_UNKNOWN:
    case SLOT_ANS_CANCELED:
        break;
    }
    return SLOT_SETTLE_KEEP;
}

/* An expired reservation settled free (now in RECLAIM): a transport WRITE its grant admitted
 * before the TTL ended may still be landing in its bytes (the grant is checked at the WRITE's
 * start; tcp bounds a started WRITE by io_timeout_ms per started MiB plus one: cfg.late_write_ns).
 * Its bytes stay in RECLAIM until that bound passed too, not only the grace, so that they are
 * not reserved again under such a WRITE. */
static void late_write_hold(slot_core_t *c, uint64_t now, slot_t *s)
{
    if (!c->cfg.late_write_ns || (c->bugs & SLOT_BUG_NO_GRACE))
        return;
    KVM_ASSERT(s->state == SLOT_RECLAIM);
    uint64_t hold = now + c->cfg.late_write_ns * (1 + ((uint64_t)s->len >> 20));
    if (hold <= s->deadline_ns)
        return;
    q_del(&c->reclaim_head, &c->reclaim_tail, s);
    s->deadline_ns = hold;
    reclaim_push(c, s);
}

static void held_retry(slot_core_t *c, uint64_t now, slot_t *s)
{
    q_del(&c->reserved_head, &c->reserved_tail, s);
    s->deadline_ns = now + c->cfg.held_retry_ns;
    q_push(&c->reserved_head, &c->reserved_tail, s);
}

enum slot_settle slot_core_held_answer(slot_core_t *c, uint64_t now, slot_t *s,
                                       const slot_settle_in_t *in)
{
    KVM_ASSERT(s->busy);
    s->busy = false;
    if (in->route == SLOT_ANS_CANCELED || s->state != SLOT_HELD)
        return SLOT_SETTLE_KEEP; /* closing, or committed / released meanwhile */
    slot_settle_in_t full = *in;
    full.check_due = c->fx.held_check && !s->checked;
    enum slot_settle d = slot_core_settle_decide(&full);
    switch (d) {
    case SLOT_SETTLE_CHECK:
        s->busy = true;
        if (c->fx.held_check(c->ctx, s) == 0)
            break;
        s->busy = false;
        held_retry(c, now, s); /* unknown: ask again later */
        return SLOT_SETTLE_KEEP;
    case SLOT_SETTLE_COMMIT:
        to_committed(c, s);
        break;
    case SLOT_SETTLE_FREE:
        c->reservations_expired++;
        event(c, SLOT_EV_EXPIRED, s->len);
        to_reclaim(c, now, s);
        late_write_hold(c, now, s);
        break;
    case SLOT_SETTLE_KEEP: /* ask again later (and check again before any free) */
        s->checked = false;
        held_retry(c, now, s);
        break;
    }
    return d;
}

void slot_core_held_check_answer(slot_core_t *c, uint64_t now, slot_t *s, enum slot_check a)
{
    KVM_ASSERT(s->busy);
    s->busy = false;
    if (a == SLOT_CHECK_CANCELED || s->state != SLOT_HELD)
        return;
    s->checked = a == SLOT_CHECK_REREAD;
    if (s->checked) { /* the route again, read after the check: it decides */
        s->busy = true;
        if (c->fx.lookup(c->ctx, s, SLOT_LOOKUP_EXPIRY) == 0)
            return;
        s->busy = false;
    }
    held_retry(c, now, s);
}

/* ---- landing: the late-payload fence --------------------------------------------------------- */

int slot_core_land_begin(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                         uint64_t token)
{
    slot_t *s = slot_at(c, seg_id, off);
    if (!s || !token || s->token != token || s->state == SLOT_NEW || s->state == SLOT_COMMITTED)
        return kvm_errf(KVMESH_ENOENT,
                        "owner %s holds no reservation at %016" PRIx64 "+%" PRIu64
                        " for this write",
                        c->cfg.name, seg_id, off);
    if (s->state != SLOT_RESERVED || now >= s->deadline_ns)
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "owner %s: the reservation at %016" PRIx64 "+%" PRIu64
                        " passed its TTL before its payload came",
                        c->cfg.name, seg_id, off);
    KVM_ASSERT(!s->landing); /* (one landing per reservation) */
    s->landing = true;
    return 0;
}

int slot_core_land_end(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off, uint64_t token)
{
    (void)now;
    slot_t *s = slot_at(c, seg_id, off);
    if (!s || !s->landing || s->token != token)
        return kvm_errf(KVMESH_ENOENT, "owner %s: no payload landing at %016" PRIx64 "+%" PRIu64,
                        c->cfg.name, seg_id, off);
    s->landing = false;
    if (s->state != SLOT_RESERVED)
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "owner %s: the reservation at %016" PRIx64 "+%" PRIu64
                        " passed its TTL (%s) while its payload landed; nothing was published",
                        c->cfg.name, seg_id, off, slot_state_name(s->state));
    return 0;
}

int slot_core_test_expire(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                          uint64_t token)
{
    slot_t *s = slot_at(c, seg_id, off);
    if (!s || s->token != token || s->state != SLOT_RESERVED)
        return KVMESH_ENOENT;
    q_del(&c->reserved_head, &c->reserved_tail, s);
    s->deadline_ns = now;
    q_insert_after(&c->reserved_head, &c->reserved_tail, NULL, s);
    expire_due(c, now);
    return 0;
}

/* ---- eviction -------------------------------------------------------------------------------- */

static void evict_back(slot_core_t *c, slot_t *s)
{
    KVM_ASSERT(s->busy && s->evicting && c->evict_inflight > 0);
    s->busy = false;
    s->evicting = false;
    c->evict_inflight--;
    if (s->state == SLOT_COMMITTED) {
        q_del(&c->evict_head, &c->evict_tail, s);
        s->ref = false;
        clock_add(c, s);
    }
}

static void evict_finish(slot_core_t *c, uint64_t now, slot_t *s)
{
    KVM_ASSERT(s->busy && s->evicting && c->evict_inflight > 0);
    s->busy = false;
    c->evict_inflight--;
    to_reclaim(c, now, s); /* (still evicting: out of the eviction list, not the ring) */
    s->evicting = false;
}

static void evict_some(slot_core_t *c, uint64_t need)
{
    uint64_t low = (uint64_t)((double)c->capacity * c->cfg.evict_low);
    uint64_t pending = c->reclaim_bytes;
    size_t scanned = 0, limit = 2 * c->n_clock + 1;
    while (c->clock_hand && c->evict_inflight < c->cfg.evict_inflight_max && scanned++ < limit) {
        uint64_t target_used = c->used > pending ? c->used - pending : 0;
        if (target_used <= low && need == 0)
            break;
        slot_t *s = c->clock_hand;
        if (s->ref) {
            s->ref = false;
            c->clock_hand = s->cnext;
            continue;
        }
        clock_del(c, s);
        q_push(&c->evict_head, &c->evict_tail, s);
        s->busy = true;
        s->evicting = true;
        c->evict_inflight++;
        pending += s->len;
        need = need > s->len ? need - s->len : 0;
        if (c->fx.lookup(c->ctx, s, SLOT_LOOKUP_EVICT) != 0)
            evict_back(c, s);
    }
}

enum slot_evict_next slot_core_evict_answer(slot_core_t *c, uint64_t now, slot_t *s,
                                            enum slot_answer a)
{
    if (s->state != SLOT_COMMITTED || a == SLOT_ANS_CANCELED || a == SLOT_ANS_UNKNOWN) {
        evict_back(c, s);
        return SLOT_EVICT_DONE;
    }
    if (a == SLOT_ANS_UNREFERENCED || a == SLOT_ANS_ABSENT || (c->bugs & SLOT_BUG_EVICT_NO_CAS)) {
        evict_finish(c, now, s); /* no route references it: nothing to unpublish */
        return SLOT_EVICT_DONE;
    }
    return SLOT_EVICT_CAS;
}

void slot_core_evict_end(slot_core_t *c, uint64_t now, slot_t *s, enum slot_evict_end e)
{
    switch (e) {
    case SLOT_EVICT_REMOVED:
        if (s->state == SLOT_COMMITTED)
            event(c, SLOT_EV_EVICTED, s->len);
        evict_finish(c, now, s);
        return;
    case SLOT_EVICT_CONFLICT:
        c->evict_conflicts++;
        break;
    case SLOT_EVICT_KEPT:
        break;
    }
    evict_back(c, s);
}

/* ---- housekeeping ---------------------------------------------------------------------------- */

/* Frees the RECLAIM slots whose grace has passed, at most reclaim_cap of them per call; returns
 * whether more are due (the shell runs slot_core_reclaim again at once, on its loop's next turn).
 * Not bounded by tick_budget: a fixed number of slots per tick caps the reclaim rate (256 per
 * 20 ms tick: 12,800 slots/s, 3.2 GB/s of 256 KiB values, 50 MB/s of 4 KiB ones) below the rate
 * a loop can release slots at, so overwrites faster than that left a backlog of slots past their
 * grace that grew without bound, counted as pending reclaim (evict_need: no eviction for it) and
 * drained 256 per tick, and a reservation that needed their space waited for the whole backlog
 * (docs/performance.md, "The shm 256 KiB batch_put stall"). Freeing a slot is O(1), and what one
 * tick finds due was normally released by this thread during one earlier tick period, so the
 * work follows the releases that made it. The cap bounds one call where it does not: a hot
 * upgrade adopts its predecessor's whole reclaim queue with one grace (slot_core_start), a long
 * stall lets many periods come due at once; the rest is freed by the re-runs, each bounded,
 * with the loop's other work between them. A slot still busy (a lookup or CAS holds it) counts
 * towards the cap, gets a new grace and goes to the tail, after every slot examined here (the
 * queue stays ordered by deadline; each slot is examined at most once per call, even with a
 * zero grace). */
static bool reclaim_due(slot_core_t *c, uint64_t now)
{
    slot_t *busy_head = NULL, *busy_tail = NULL;
    uint32_t left = c->cfg.reclaim_cap;
    while (c->reclaim_head && c->reclaim_head->deadline_ns <= now && left) {
        left--;
        slot_t *s = c->reclaim_head;
        q_del(&c->reclaim_head, &c->reclaim_tail, s);
        if (s->busy || s->landing) { /* a lookup, CAS or payload still holds it: later */
            s->deadline_ns = now + c->cfg.reclaim_grace_ns;
            q_push(&busy_head, &busy_tail, s);
            continue;
        }
        c->reclaim_bytes -= s->len;
        c->reclaimed++;
        event(c, SLOT_EV_RECLAIMED, s->len);
        slot_free(c, s);
    }
    bool more = c->reclaim_head && c->reclaim_head->deadline_ns <= now;
    while (busy_head) {
        slot_t *s = busy_head;
        q_del(&busy_head, &busy_tail, s);
        reclaim_push(c, s);
    }
    return more;
}

static void expire_due(slot_core_t *c, uint64_t now)
{
    uint32_t budget = c->cfg.tick_budget;
    for (slot_t *s = c->reserved_head; s && s->deadline_ns <= now && budget--;) {
        slot_t *n = s->qnext;
        held_begin(c, s);
        if (c->bugs & SLOT_BUG_FREE_HELD) {
            to_reclaim(c, now, s);
        } else if (!s->busy) {
            s->busy = true;
            if (c->fx.lookup(c->ctx, s, SLOT_LOOKUP_EXPIRY) != 0)
                s->busy = false;
        }
        s = n;
    }
}

bool slot_core_tick(slot_core_t *c, uint64_t now)
{
    bool more = reclaim_due(c, now);
    expire_due(c, now);
    if (c->waiters)
        waiters_run(c, now);
    uint64_t high = (uint64_t)((double)c->capacity * c->cfg.evict_high);
    if (c->used > high || c->waiters)
        evict_some(c, 0);
    return more;
}

bool slot_core_reclaim(slot_core_t *c, uint64_t now)
{
    bool more = reclaim_due(c, now);
    if (c->waiters) /* the freed space may answer them now rather than at the next tick */
        waiters_run(c, now);
    return more;
}

/* ---- hot upgrade and drain ------------------------------------------------------------------- */

int slot_core_adopt(slot_core_t *c, uint32_t segi, uint64_t off, uint64_t len,
                    enum slot_state state, uint64_t seq, const kvm_ident_t *ident)
{
    KVM_ASSERT(slot_core_seg_present(c, segi));
    KVM_ASSERT(state == SLOT_COMMITTED || state == SLOT_RECLAIM);
    slot_t *s = NULL;
    int rc = slot_new(c, ident, &s);
    if (rc)
        return rc;
    rc = alloc_reserve_at_rec(c->segs[segi].alloc, off, len, &s->blk);
    if (rc) {
        rec_free(c, &s->blk);
        return rc;
    }
    s->segi = (uint16_t)segi;
    c->used += len;
    c->n_live++;
    set_state(s, state);
    if (state == SLOT_COMMITTED) {
        s->ref = true;
        s->seq = seq;
        clock_add(c, s);
    } else {
        s->deadline_ns = 0; /* set when housekeeping starts (slot_core_start) */
        q_push(&c->reclaim_head, &c->reclaim_tail, s);
        c->reclaim_bytes += len;
    }
    return 0;
}

void slot_core_start(slot_core_t *c, uint64_t now)
{
    /* Slots adopted in RECLAIM from a hot-upgrade predecessor get a whole grace window here. */
    for (slot_t *s = c->reclaim_head; s && s->deadline_ns == 0; s = s->qnext)
        s->deadline_ns = now + c->cfg.reclaim_grace_ns;
}

uint64_t slot_core_seq(const slot_core_t *c)
{
    return c->seq;
}

void slot_core_set_seq(slot_core_t *c, uint64_t seq)
{
    c->seq = seq;
}

int slot_core_visit(const slot_core_t *c, int (*fn)(void *arg, const slot_t *s), void *arg)
{
    const slot_t *s = c->clock_hand;
    for (size_t i = 0; s && i < c->n_clock; i++, s = s->cnext) {
        int rc = fn(arg, s);
        if (rc)
            return rc;
    }
    for (s = c->reclaim_head; s; s = s->qnext) {
        int rc = fn(arg, s);
        if (rc)
            return rc;
    }
    return 0;
}

size_t slot_core_list(const slot_core_t *c, int segi_filter, uint64_t cursor, const slot_t **sel,
                      size_t cap)
{
    /* The cap smallest commit sequences above the cursor (insertion into a sorted array). */
    size_t n = 0;
    if (cap > SLOT_LIST_MAX)
        cap = SLOT_LIST_MAX;
    if (cap == 0)
        return 0;
    const slot_t *s = c->clock_hand;
    for (size_t i = 0; s && i < c->n_clock; i++, s = s->cnext) {
        if (s->seq <= cursor || (segi_filter >= 0 && s->segi != (uint32_t)segi_filter))
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
    return n;
}

bool slot_core_settled(const slot_core_t *c)
{
    return c->reserved_head == NULL && c->waiters == NULL && c->evict_inflight == 0;
}

uint64_t slot_core_used(const slot_core_t *c)
{
    return c->used;
}

uint64_t slot_core_capacity(const slot_core_t *c)
{
    return c->capacity;
}

void slot_core_stats(const slot_core_t *c, slot_core_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    st->capacity = c->capacity;
    st->used = c->used;
    st->reclaim_bytes = c->reclaim_bytes;
    st->reclaimed = c->reclaimed;
    st->reservations_expired = c->reservations_expired;
    st->reserve_waits = c->reserve_waits;
    st->reservations_held = c->reservations_held;
    st->evict_conflicts = c->evict_conflicts;
    st->notes_stale = c->notes_stale;
    st->record_bytes = c->pool.chunk_bytes;
    st->records_live = c->pool.live_bytes;
    st->n_committed = c->n_clock;
    st->n_waiters = c->n_waiters;
    st->evict_inflight = c->evict_inflight;
    for (const slot_t *s = c->reserved_head; s; s = s->qnext)
        st->n_reserved++;
    for (const slot_t *s = c->reclaim_head; s; s = s->qnext)
        st->n_reclaim++;
    uint64_t fr = 0, lf = 0;
    for (uint32_t i = 0; i < c->n_segs; i++) {
        if (!c->segs[i].present)
            continue;
        alloc_stats_t a;
        alloc_stats(c->segs[i].alloc, &a);
        fr += a.free;
        lf = a.largest_free > lf ? a.largest_free : lf;
    }
    st->fragmentation = fr ? 1.0 - (double)lf / (double)fr : 0;
}

/* ---- invariants ------------------------------------------------------------------------------ */

static int check_queues(const slot_core_t *c, size_t *n_q, uint64_t *held, uint64_t *rbytes)
{
    for (const slot_t *s = c->reserved_head; s; s = s->qnext, (*n_q)++) {
        if (s->state != SLOT_RESERVED && s->state != SLOT_HELD)
            return kvm_errf(KVMESH_EINTERNAL, "a %s slot in the reserved queue",
                            slot_state_name(s->state));
        *held += s->state == SLOT_HELD;
    }
    for (const slot_t *s = c->reclaim_head; s; s = s->qnext, (*n_q)++) {
        if (s->state != SLOT_RECLAIM)
            return kvm_errf(KVMESH_EINTERNAL, "a %s slot in the reclaim queue",
                            slot_state_name(s->state));
        *rbytes += s->len;
    }
    for (const slot_t *s = c->evict_head; s; s = s->qnext, (*n_q)++)
        if (s->state != SLOT_COMMITTED || !s->evicting || !s->busy)
            return kvm_errf(KVMESH_EINTERNAL, "a %s slot in the eviction list",
                            slot_state_name(s->state));
    const slot_t *s = c->clock_hand;
    for (size_t i = 0; i < c->n_clock; i++, s = s->cnext, (*n_q)++)
        if (!s || s->state != SLOT_COMMITTED || s->queued || s->evicting)
            return kvm_errf(KVMESH_EINTERNAL, "clock ring entry %zu is not a committed slot", i);
    if (s != c->clock_hand)
        return kvm_errf(KVMESH_EINTERNAL, "the clock ring does not close after %zu slots",
                        c->n_clock);
    return 0;
}

int slot_core_check(const slot_core_t *c)
{
    size_t n_q = 0;
    uint64_t held = 0, rbytes = 0, requested = 0, blocks = 0;
    int rc = check_queues(c, &n_q, &held, &rbytes);
    if (rc)
        return rc;
    if (held != c->reservations_held)
        return kvm_errf(KVMESH_EINTERNAL, "%" PRIu64 " held slots, counted %" PRIu64, held,
                        c->reservations_held);
    if (rbytes != c->reclaim_bytes)
        return kvm_errf(KVMESH_EINTERNAL, "reclaim queue holds %" PRIu64 " bytes, counted %" PRIu64,
                        rbytes, c->reclaim_bytes);
    for (uint32_t i = 0; i < c->n_segs; i++) {
        if (!c->segs[i].present)
            continue;
        if ((rc = alloc_check(c->segs[i].alloc)) != 0)
            return rc;
        alloc_stats_t a;
        alloc_stats(c->segs[i].alloc, &a);
        requested += a.requested;
        blocks += a.n_used;
    }
    if (requested != c->used || blocks != c->n_live)
        return kvm_errf(KVMESH_EINTERNAL,
                        "allocators hold %" PRIu64 " bytes in %" PRIu64 " blocks; the core counts "
                        "%" PRIu64 " bytes in %zu slots",
                        requested, blocks, c->used, c->n_live);
    if (c->n_live != n_q)
        return kvm_errf(KVMESH_EINTERNAL, "%zu slots, %zu in the queues and the ring", c->n_live,
                        n_q);
    return 0;
}
