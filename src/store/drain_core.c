/* SPDX-License-Identifier: Apache-2.0 */
/*
 * drain_core.c — the drain's decisions, without I/O (store/drain_core.h, docs/store.md "Drain
 * core").
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "kvmesh.h"
#include "store/drain_core.h"

#define MS_NS 1000000ull

struct ditem {
    enum drain_item_state state;
    bool has_res;      /* a reservation at another owner is ours (not committed, released, kept) */
    bool old_released; /* release_old was asked */
    bool unlinked;     /* the CAS applied or the route no longer referenced the old replica */
};

struct drain_core {
    drain_core_cfg_t cfg;
    drain_effects_t fx;
    void *ctx;
    unsigned bugs;
    enum drain_state state;
    bool in_call; /* inside an input: effects must not answer re-entrantly */
    bool started;
    uint64_t deadline_ns, cursor;
    uint32_t empty_passes;
    uint32_t round;        /* 1..cfg.rounds */
    uint32_t n, unsettled; /* the page's items; those not yet MOVED / FAILED */
    size_t moved, failed, settled;
    struct ditem items[DRAIN_PAGE_MAX];
};

const char *drain_state_name(enum drain_state s)
{
    static const char *const names[] = {"NEW", "LISTING", "MOVING", "WAITING", "CLOSING", "DONE"};
    return (unsigned)s < KVM_ARRAY_SIZE(names) ? names[s] : "?";
}

const char *drain_item_state_name(enum drain_item_state s)
{
    static const char *const names[] = {"NONE", "RESERVING", "COPYING", "CAS", "MOVED", "FAILED"};
    return (unsigned)s < KVM_ARRAY_SIZE(names) ? names[s] : "?";
}

/* ---- states --------------------------------------------------------------------------------- */

static bool legal(enum drain_state from, enum drain_state to)
{
    switch (from) {
    case DRAIN_NEW:
        return to == DRAIN_LISTING || to == DRAIN_DONE;
    case DRAIN_LISTING:
        return to == DRAIN_MOVING || to == DRAIN_WAITING || to == DRAIN_DONE;
    case DRAIN_MOVING:
        return to == DRAIN_LISTING || to == DRAIN_CLOSING || to == DRAIN_DONE;
    case DRAIN_WAITING:
        return to == DRAIN_LISTING || to == DRAIN_DONE;
    case DRAIN_CLOSING:
        return to == DRAIN_DONE;
    case DRAIN_DONE:
        return false;
    }
    return false;
}

static void set_state(drain_core_t *c, enum drain_state to)
{
    KVM_ASSERT(legal(c->state, to));
    c->state = to;
}

static bool item_legal(enum drain_item_state from, enum drain_item_state to)
{
    switch (from) {
    case DITEM_NONE:
        return to == DITEM_RESERVING;
    case DITEM_RESERVING:
        return to == DITEM_COPYING || to == DITEM_FAILED;
    case DITEM_COPYING:
        return to == DITEM_CAS || to == DITEM_FAILED;
    case DITEM_CAS:
        return to == DITEM_MOVED || to == DITEM_FAILED;
    case DITEM_MOVED:
    case DITEM_FAILED:
        return false;
    }
    return false;
}

static void item_set_state(struct ditem *it, enum drain_item_state to)
{
    KVM_ASSERT(item_legal(it->state, to));
    it->state = to;
}

/* ---- the end -------------------------------------------------------------------------------- */

/* rc: a listing error (passed on as is), KVMESH_ETIMEDOUT, KVMESH_ECLOSED or 0 (then
 * KVMESH_EUNAVAILABLE when some replica was not moved). */
static void finish(drain_core_t *c, int rc)
{
    if (rc == KVMESH_ETIMEDOUT)
        rc = kvm_errf(rc, "drain did not finish in %u ms (%zu moved)", c->cfg.timeout_ms, c->moved);
    else if (rc == KVMESH_ECLOSED)
        rc = kvm_errf(rc, "the runtime closed during the drain");
    else if (rc == 0 && c->failed)
        rc = kvm_errf(KVMESH_EUNAVAILABLE, "could not move %zu replicas (%zu moved) in %u rounds",
                      c->failed, c->moved, c->round);
    set_state(c, DRAIN_DONE);
    c->fx.done(c->ctx, rc);
}

/* The next listing, unless the deadline passed. */
static void list_next(drain_core_t *c, uint64_t now)
{
    if (now > c->deadline_ns) {
        finish(c, KVMESH_ETIMEDOUT);
        return;
    }
    set_state(c, DRAIN_LISTING);
    c->fx.list(c->ctx, c->cursor, c->cfg.page);
}

static void enter(drain_core_t *c)
{
    KVM_ASSERT(!c->in_call);
    c->in_call = true;
}

static void leave(drain_core_t *c)
{
    c->in_call = false;
}

/* ---- items ---------------------------------------------------------------------------------- */

static struct ditem *item(drain_core_t *c, uint32_t i, enum drain_item_state expect)
{
    KVM_ASSERT(i < c->n);
    KVM_ASSERT(c->state == DRAIN_MOVING || c->state == DRAIN_CLOSING);
    KVM_ASSERT(c->items[i].state == expect);
    return &c->items[i];
}

static void release_new(drain_core_t *c, uint32_t i, enum drain_release why)
{
    struct ditem *it = &c->items[i];
    KVM_ASSERT(it->has_res);
    it->has_res = false;
    c->fx.release_new(c->ctx, i, why);
}

static void release_old(drain_core_t *c, uint32_t i)
{
    struct ditem *it = &c->items[i];
    if (it->old_released)
        return;
    it->old_released = true;
    c->fx.release_old(c->ctx, i);
}

/* An item reached MOVED or FAILED: counted once; the page settles with its last item. */
static void settle(drain_core_t *c, uint64_t now, uint32_t i, enum drain_item_state to)
{
    item_set_state(&c->items[i], to);
    if (to == DITEM_MOVED)
        c->moved++;
    else
        c->failed++;
    c->settled++;
    KVM_ASSERT(c->unsettled > 0);
    if (--c->unsettled)
        return;
    if (c->state == DRAIN_CLOSING)
        finish(c, KVMESH_ECLOSED);
    else
        list_next(c, now);
}

/* ---- API ------------------------------------------------------------------------------------ */

int drain_core_new(const drain_core_cfg_t *cfg, const drain_effects_t *fx, void *ctx,
                   drain_core_t **out)
{
    if (cfg->page == 0 || cfg->page > DRAIN_PAGE_MAX)
        return kvm_errf(KVMESH_EINVAL, "a drain page holds 1 to %d replicas, not %u",
                        DRAIN_PAGE_MAX, cfg->page);
    KVM_ASSERT(fx->list && fx->reserve && fx->copy && fx->cas && fx->commit_new &&
               fx->release_new && fx->release_old && fx->arm_timer && fx->done);
    drain_core_t *c = calloc(1, sizeof(*c));
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the drain core");
    c->cfg = *cfg;
    if (!c->cfg.rounds)
        c->cfg.rounds = DRAIN_ROUNDS;
    c->round = 1;
    c->fx = *fx;
    c->ctx = ctx;
    *out = c;
    return 0;
}

void drain_core_free(drain_core_t *c)
{
    if (c)
        KVM_ASSERT(!c->in_call);
    free(c);
}

void drain_core_start(drain_core_t *c, uint64_t now)
{
    enter(c);
    KVM_ASSERT(c->state == DRAIN_NEW);
    c->deadline_ns = now + (uint64_t)c->cfg.timeout_ms * MS_NS;
    list_next(c, now);
    leave(c);
}

static void page_begin(drain_core_t *c, uint32_t n)
{
    set_state(c, DRAIN_MOVING);
    memset(c->items, 0, sizeof(c->items));
    c->n = c->unsettled = n;
    for (uint32_t i = 0; i < n; i++) {
        item_set_state(&c->items[i], DITEM_RESERVING);
        c->fx.reserve(c->ctx, i);
    }
}

/* An empty pass: the first arms the writers period (never past the deadline), the second ends
 * the drain. */
static void empty_pass(drain_core_t *c, uint64_t now)
{
    if (++c->empty_passes >= 2 && c->failed && c->round < c->cfg.rounds &&
        now + c->cfg.writers_ns <= c->deadline_ns) {
        /* replicas this round could not move are still committed here: another round, from the
         * first replica, after a writers period (those it moved are no longer listed) */
        if (c->fx.retry)
            c->fx.retry(c->ctx, c->round, c->moved, c->failed);
        c->round++;
        c->settled -= c->failed;
        c->failed = 0;
        c->cursor = 0;
        c->empty_passes = 0;
        set_state(c, DRAIN_WAITING);
        c->fx.arm_timer(c->ctx, now + c->cfg.writers_ns);
        return;
    }
    if (c->empty_passes >= 2) {
        finish(c, 0);
        return;
    }
    set_state(c, DRAIN_WAITING);
    c->fx.arm_timer(c->ctx, KVM_MIN(now + c->cfg.writers_ns, c->deadline_ns + MS_NS));
}

void drain_core_listed(drain_core_t *c, uint64_t now, int rc, uint32_t n, uint64_t next_cursor)
{
    enter(c);
    KVM_ASSERT(c->state == DRAIN_LISTING);
    KVM_ASSERT(rc != 0 || n <= c->cfg.page);
    if (rc) {
        finish(c, rc);
    } else {
        c->cursor = next_cursor;
        if (n)
            page_begin(c, n);
        else
            empty_pass(c, now);
    }
    leave(c);
}

void drain_core_reserved(drain_core_t *c, uint64_t now, uint32_t i, int rc)
{
    enter(c);
    struct ditem *it = item(c, i, DITEM_RESERVING);
    if (rc) {
        settle(c, now, i, DITEM_FAILED);
    } else {
        it->has_res = true;
        if (c->state == DRAIN_CLOSING) {
            release_new(c, i, DRAIN_REL_CLOSED);
            settle(c, now, i, DITEM_FAILED);
        } else {
            item_set_state(it, DITEM_COPYING);
            c->fx.copy(c->ctx, i);
        }
    }
    leave(c);
}

void drain_core_copied(drain_core_t *c, uint64_t now, uint32_t i, int rc)
{
    enter(c);
    struct ditem *it = item(c, i, DITEM_COPYING);
    if (rc || c->state == DRAIN_CLOSING) {
        release_new(c, i, rc ? DRAIN_REL_COPY_FAILED : DRAIN_REL_CLOSED);
        settle(c, now, i, DITEM_FAILED);
    } else {
        item_set_state(it, DITEM_CAS);
        if (c->bugs & DRAIN_BUG_RELEASE_EARLY)
            release_old(c, i); /* broken: the route still names it until the CAS applies */
        c->fx.cas(c->ctx, i);
    }
    leave(c);
}

void drain_core_cas_answer(drain_core_t *c, uint64_t now, uint32_t i, enum drain_cas ans)
{
    enter(c);
    struct ditem *it = item(c, i, DITEM_CAS);
    switch (ans) {
    case DRAIN_CAS_APPLIED:
        it->unlinked = true;
        it->has_res = false;
        c->fx.commit_new(c->ctx, i);
        release_old(c, i);
        settle(c, now, i, DITEM_MOVED);
        break;
    case DRAIN_CAS_SUPERSEDED: /* nothing references the old replica: nothing to move */
        it->unlinked = true;
        release_new(c, i, DRAIN_REL_SUPERSEDED);
        release_old(c, i);
        settle(c, now, i, DITEM_MOVED);
        break;
    case DRAIN_CAS_REFUSED:
        release_new(c, i, DRAIN_REL_REFUSED);
        settle(c, now, i, DITEM_FAILED);
        break;
    case DRAIN_CAS_INDETERMINATE: /* kept: its reservation's expiry asks the route */
        it->has_res = false;
        settle(c, now, i, DITEM_FAILED);
        break;
    }
    leave(c);
}

void drain_core_timer(drain_core_t *c, uint64_t now)
{
    enter(c);
    if (c->state == DRAIN_WAITING) /* (a timer that outlived a close is ignored) */
        list_next(c, now);
    leave(c);
}

void drain_core_close(drain_core_t *c, uint64_t now)
{
    (void)now;
    enter(c);
    if (c->state == DRAIN_MOVING)
        set_state(c, DRAIN_CLOSING); /* the items in flight settle; the last one finishes */
    else if (c->state != DRAIN_DONE && c->state != DRAIN_CLOSING)
        finish(c, KVMESH_ECLOSED);
    leave(c);
}

enum drain_state drain_core_state(const drain_core_t *c)
{
    return c->state;
}

enum drain_item_state drain_core_item_state(const drain_core_t *c, uint32_t i)
{
    return i < c->n ? c->items[i].state : DITEM_NONE;
}

void drain_core_counts(const drain_core_t *c, size_t *moved, size_t *failed)
{
    *moved = c->moved;
    *failed = c->failed;
}

uint32_t drain_core_round(const drain_core_t *c)
{
    return c->round;
}

int drain_core_check(const drain_core_t *c)
{
    if (c->moved + c->failed != c->settled)
        return kvm_errf(KVMESH_EINTERNAL, "drain: %zu moved + %zu failed != %zu settled", c->moved,
                        c->failed, c->settled);
    uint32_t open = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        const struct ditem *it = &c->items[i];
        if (it->old_released && !it->unlinked && !(c->bugs & DRAIN_BUG_RELEASE_EARLY))
            return kvm_errf(KVMESH_EINTERNAL,
                            "drain: item %u released its old replica before the route CAS", i);
        bool settled = it->state == DITEM_MOVED || it->state == DITEM_FAILED;
        open += !settled;
        if (settled && it->has_res)
            return kvm_errf(KVMESH_EINTERNAL, "drain: item %u settled holding its reservation", i);
    }
    if (open != c->unsettled)
        return kvm_errf(KVMESH_EINTERNAL, "drain: %u items open, %u counted", open, c->unsettled);
    if (open && c->state != DRAIN_MOVING && c->state != DRAIN_CLOSING)
        return kvm_errf(KVMESH_EINTERNAL, "drain: %u items open in state %s", open,
                        drain_state_name(c->state));
    return 0;
}

void drain_core_test_set_bugs(drain_core_t *c, unsigned bugs)
{
    c->bugs = bugs;
}
