/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_slot_core.c — the owner's slot core (src/store/slot_core.h) driven by hand: effects are
 * recorded, time is a number. Reclaim grace, held reservations and their settle decision (with
 * and without the further check), eviction with a busy slot, waiters for space, accounting,
 * COMMIT / RELEASE notes that name an earlier slot at the same bytes (ignored, counted), and
 * reclaim that keeps up with releases faster than tick_budget slots per tick, a reclaim backlog
 * above the per-pass cap drained by bounded re-runs, and COMMIT / RELEASE of one slot in either
 * order, and a reservation bound to another identity (slot_core_bind: pre-granted ranges).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/ident.h"
#include "kvmesh.h"
#include "store/slot_core.h"

#define MS 1000000ull

struct fx_log {
    slot_t *lookups[16];
    enum slot_lookup_why why[16];
    int n_lookups;
    slot_t *checks[4];
    int n_checks;
    int n_freed, n_revoked;
    uint64_t next_token;
    int rc, answers;
    uint64_t seg, off, token;
};

static int fx_grant(void *ctx, uint32_t segi, uint64_t off, uint64_t len, uint32_t ttl_ms,
                    uint64_t *token)
{
    (void)segi, (void)off, (void)len, (void)ttl_ms;
    *token = ++((struct fx_log *)ctx)->next_token;
    return 0;
}

static void fx_revoke(void *ctx, uint64_t token)
{
    (void)token;
    ((struct fx_log *)ctx)->n_revoked++;
}

static int fx_lookup(void *ctx, slot_t *s, enum slot_lookup_why why)
{
    struct fx_log *l = ctx;
    assert_true(l->n_lookups < 16);
    l->why[l->n_lookups] = why;
    l->lookups[l->n_lookups++] = s;
    return 0;
}

static int fx_check(void *ctx, slot_t *s)
{
    struct fx_log *l = ctx;
    assert_true(l->n_checks < 4);
    l->checks[l->n_checks++] = s;
    return 0;
}

static void fx_freed(void *ctx, const slot_t *s)
{
    assert_false(s->busy);
    ((struct fx_log *)ctx)->n_freed++;
}

static void reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off, uint64_t token)
{
    (void)err;
    struct fx_log *l = arg;
    l->rc = rc;
    l->token = token;
    l->seg = seg;
    l->off = off;
    l->answers++;
}

static slot_core_t *core_new_late(struct fx_log *l, bool check, uint64_t seg_size,
                                  uint32_t reclaim_cap, uint64_t late_write_ns)
{
    memset(l, 0, sizeof(*l));
    slot_core_cfg_t cfg = {.name = "t",
                           .reclaim_cap = reclaim_cap,
                           .reclaim_grace_ns = 100 * MS,
                           .evict_high = 0.9,
                           .evict_low = 0.5,
                           .wait_timeout_ns = 500 * MS,
                           .held_retry_ns = 1000 * MS,
                           .tick_budget = 64,
                           .evict_inflight_max = 4,
                           .wait_max = 4,
                           .late_write_ns = late_write_ns};
    slot_effects_t fx = {.grant = fx_grant,
                         .revoke = fx_revoke,
                         .lookup = fx_lookup,
                         .held_check = check ? fx_check : NULL,
                         .freed = fx_freed};
    slot_core_t *c = NULL;
    assert_int_equal(slot_core_new(&cfg, &fx, l, &c), 0);
    uint32_t segi = 9;
    assert_int_equal(slot_core_seg_add(c, 7, seg_size, &segi), 0);
    assert_int_equal(segi, 0);
    return c;
}

static slot_core_t *core_new_cap(struct fx_log *l, bool check, uint64_t seg_size,
                                 uint32_t reclaim_cap)
{
    return core_new_late(l, check, seg_size, reclaim_cap, 0);
}

static slot_core_t *core_new(struct fx_log *l, bool check, uint64_t seg_size)
{
    return core_new_cap(l, check, seg_size, 0); /* the default cap, SLOT_RECLAIM_CAP */
}

static void reserve(slot_core_t *c, struct fx_log *l, uint64_t now, uint64_t len)
{
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "k", 1), 0);
    int before = l->answers;
    slot_core_reserve(c, now, &id, len, 300, reserved, l);
    kvm_ident_free(&id);
    assert_int_equal(l->answers, before + 1);
    assert_int_equal(l->rc, 0);
    assert_int_equal(l->seg, 7);
}

static enum slot_state state_at(slot_core_t *c, uint64_t off)
{
    const slot_t *s = slot_core_find(c, 7, off);
    return s ? s->state : SLOT_FREED;
}

/* released bytes are freed only once the grace passed; used bytes follow the live slots */
static void test_grace(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    reserve(c, &l, 0, 1000);
    uint64_t off = l.off;
    assert_int_equal(slot_core_used(c), 1000);
    assert_non_null(slot_core_commit(c, 1 * MS, 7, off));
    assert_int_equal(state_at(c, off), SLOT_COMMITTED);
    assert_int_equal(l.n_revoked, 1); /* the write grant ends at commit */
    slot_core_release(c, 10 * MS, 7, off);
    assert_int_equal(state_at(c, off), SLOT_RECLAIM);
    slot_core_tick(c, 109 * MS);
    assert_int_equal(l.n_freed, 0);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_tick(c, 110 * MS);
    assert_int_equal(l.n_freed, 1);
    assert_int_equal(slot_core_used(c), 0);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* a reservation past its TTL is HELD, never freed, until its lookup settles it */
static void test_held(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    reserve(c, &l, 0, 100);
    uint64_t a = l.off;
    reserve(c, &l, 0, 100);
    uint64_t b = l.off;
    slot_core_tick(c, 299 * MS);
    assert_int_equal(l.n_lookups, 0);
    slot_core_tick(c, 300 * MS);
    assert_int_equal(l.n_lookups, 2);
    assert_int_equal(state_at(c, a), SLOT_HELD);
    slot_core_stats_t st;
    slot_core_stats(c, &st);
    assert_int_equal(st.reservations_held, 2);
    slot_core_tick(c, 2000 * MS); /* busy with its lookup: not asked twice, not freed */
    assert_int_equal(l.n_lookups, 2);
    slot_settle_in_t ref = {.route = SLOT_ANS_REFERENCED}, unk = {.route = SLOT_ANS_UNKNOWN};
    slot_settle_in_t absent = {.route = SLOT_ANS_ABSENT};
    assert_int_equal(slot_core_held_answer(c, 2001 * MS, l.lookups[0], &ref), SLOT_SETTLE_COMMIT);
    assert_int_equal(state_at(c, a), SLOT_COMMITTED);
    assert_int_equal(slot_core_held_answer(c, 2001 * MS, l.lookups[1], &unk), SLOT_SETTLE_KEEP);
    assert_int_equal(state_at(c, b), SLOT_HELD);
    slot_core_tick(c, 3000 * MS);
    assert_int_equal(l.n_lookups, 2); /* asked again only after held_retry_ns */
    slot_core_tick(c, 3001 * MS);
    assert_int_equal(l.n_lookups, 3);
    assert_int_equal(slot_core_held_answer(c, 3002 * MS, l.lookups[2], &absent), SLOT_SETTLE_FREE);
    assert_int_equal(state_at(c, b), SLOT_RECLAIM);
    slot_core_stats(c, &st);
    assert_int_equal(st.reservations_held, 0);
    assert_int_equal(st.reservations_expired, 1);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* with a further check, an unreferenced held slot is freed only after the check said REREAD and
 * a lookup made after it still finds it unreferenced */
static void test_held_check(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, true, 1 << 20);
    reserve(c, &l, 0, 100);
    uint64_t a = l.off;
    slot_core_tick(c, 300 * MS);
    slot_settle_in_t unref = {.route = SLOT_ANS_UNREFERENCED};
    assert_int_equal(slot_core_held_answer(c, 301 * MS, l.lookups[0], &unref), SLOT_SETTLE_CHECK);
    assert_int_equal(l.n_checks, 1);
    slot_core_held_check_answer(c, 302 * MS, l.checks[0], SLOT_CHECK_KEEP);
    assert_int_equal(state_at(c, a), SLOT_HELD);
    assert_int_equal(l.n_lookups, 1);
    slot_core_tick(c, 1302 * MS); /* asked again: the check is due again */
    assert_int_equal(l.n_lookups, 2);
    assert_int_equal(slot_core_held_answer(c, 1303 * MS, l.lookups[1], &unref), SLOT_SETTLE_CHECK);
    slot_core_held_check_answer(c, 1304 * MS, l.checks[1], SLOT_CHECK_REREAD);
    assert_int_equal(l.n_lookups, 3); /* the route read again, after the check */
    assert_int_equal(slot_core_held_answer(c, 1305 * MS, l.lookups[2], &unref), SLOT_SETTLE_FREE);
    assert_int_equal(state_at(c, a), SLOT_RECLAIM);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* eviction above the high watermark: lookup, CAS, RECLAIM; a busy slot is never freed */
static void test_evict_busy(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 64 * 1024);
    uint64_t off[4];
    for (int i = 0; i < 4; i++) {
        reserve(c, &l, 0, 15 * 1024);
        off[i] = l.off;
        assert_non_null(slot_core_commit(c, 0, 7, off[i]));
    }
    slot_core_tick(c, 1 * MS); /* used 60 KiB > 0.9 x 64 KiB: the hand clears the ref bits */
    assert_true(l.n_lookups >= 1);
    assert_int_equal(l.why[0], SLOT_LOOKUP_EVICT);
    slot_t *v = l.lookups[0];
    uint64_t voff = slot_off(v);
    /* the writer releases it while the eviction is in flight: RECLAIM but busy */
    slot_core_release(c, 2 * MS, 7, voff);
    slot_core_tick(c, 500 * MS);
    assert_int_equal(state_at(c, voff), SLOT_RECLAIM);
    assert_int_equal(l.n_freed, 0);
    assert_int_equal(slot_core_evict_answer(c, 501 * MS, v, SLOT_ANS_UNREFERENCED),
                     SLOT_EVICT_DONE);
    slot_core_tick(c, 700 * MS);
    assert_int_equal(l.n_freed, 1);
    /* another victim: referenced, so the shell CASes; a conflict puts it back in the ring */
    assert_true(l.n_lookups >= 2);
    slot_t *w = l.lookups[1];
    assert_int_equal(slot_core_evict_answer(c, 701 * MS, w, SLOT_ANS_REFERENCED), SLOT_EVICT_CAS);
    slot_core_evict_end(c, 702 * MS, w, SLOT_EVICT_CONFLICT);
    assert_int_equal(w->state, SLOT_COMMITTED);
    assert_false(w->evicting || w->queued); /* back in the clock ring */
    assert_int_equal(slot_core_check(c), 0);
    for (int i = 2; i < l.n_lookups; i++) /* the rest: removed by their CAS */
        if (l.lookups[i]->busy)
            slot_core_evict_end(c, 703 * MS, l.lookups[i], SLOT_EVICT_REMOVED);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* no room but something evictable: the reservation waits and is answered once space is free */
static void test_waiter(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 16 * 1024);
    reserve(c, &l, 0, 12 * 1024);
    uint64_t a = l.off;
    assert_non_null(slot_core_commit(c, 0, 7, a));
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "k2", 2), 0);
    int before = l.answers;
    slot_core_reserve(c, 1 * MS, &id, 8 * 1024, 300, reserved, &l);
    assert_int_equal(l.answers, before); /* waiting; its eviction asked the route */
    assert_int_equal(l.n_lookups, 1);
    assert_false(slot_core_settled(c));
    assert_int_equal(slot_core_evict_answer(c, 2 * MS, l.lookups[0], SLOT_ANS_REFERENCED),
                     SLOT_EVICT_CAS);
    slot_core_evict_end(c, 3 * MS, l.lookups[0], SLOT_EVICT_REMOVED);
    slot_core_tick(c, 50 * MS);
    assert_int_equal(l.answers, before); /* the evicted bytes are still in their grace */
    slot_core_tick(c, 103 * MS);
    assert_int_equal(l.answers, before + 1);
    assert_int_equal(l.rc, 0);
    kvm_ident_free(&id);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* Many small slots released, then a reservation that needs their space (the shm 256 KiB
 * batch_put stall, docs/performance.md): once the grace passed, one housekeeping turn frees
 * every slot whose grace ended, however many (more than tick_budget here), and answers the
 * waiting reservation; before, a turn freed tick_budget slots and the reservation waited for
 * the whole backlog, turn after turn. */
static void test_reclaim_backlog(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    enum { N = 256 }; /* 4 x tick_budget slots of 4 KiB fill the 1 MiB segment */
    uint64_t off[N];
    for (int i = 0; i < N; i++) {
        reserve(c, &l, 0, 4096);
        off[i] = l.off;
        assert_non_null(slot_core_commit(c, 0, 7, off[i]));
    }
    for (int i = 0; i < N; i++) /* overwritten: each replaced by a later put elsewhere */
        slot_core_release(c, 1 * MS, 7, off[i]);
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "big", 3), 0);
    int before = l.answers;
    slot_core_reserve(c, 2 * MS, &id, 1 << 20, 300, reserved, &l);
    assert_int_equal(l.answers, before); /* no room yet: waits for the reclaim */
    assert_int_equal(l.n_lookups, 0);    /* the pending reclaim covers it: nothing evicted */
    slot_core_tick(c, 100 * MS);
    assert_int_equal(l.n_freed, 0); /* still in the grace */
    slot_core_tick(c, 101 * MS);    /* the grace of all of them passed */
    slot_core_stats_t st;
    slot_core_stats(c, &st);
    assert_int_equal(st.reclaimed, N);
    assert_int_equal(st.n_reclaim, 0);
    assert_int_equal(st.reclaim_bytes, 0);
    assert_int_equal(l.answers, before + 1); /* answered in that turn */
    assert_int_equal(l.rc, 0);
    assert_int_equal(st.reserve_waits, 1);
    assert_int_equal(slot_core_check(c), 0);
    kvm_ident_free(&id);
    slot_core_free(c);
}

/* Overwrites faster than tick_budget slots per turn: every turn releases 3 x tick_budget slots;
 * after each turn the reclaim queue holds only slots still in their grace (none past it), so it
 * stays bounded by what one grace window releases instead of growing turn after turn. */
static void test_reclaim_rate(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 8 << 20);
    enum { PER_TURN = 3 * 64, TURNS = 40 }; /* tick_budget is 64; a turn every 20 ms */
    uint64_t released = 0;
    for (int t = 0; t < TURNS; t++) {
        uint64_t now = (uint64_t)t * 20 * MS;
        for (int i = 0; i < PER_TURN; i++) {
            reserve(c, &l, now, 4096);
            assert_non_null(slot_core_commit(c, now, 7, l.off));
            slot_core_release(c, now, 7, l.off);
        }
        released += PER_TURN;
        slot_core_tick(c, now);
        slot_core_stats_t st;
        slot_core_stats(c, &st);
        /* in the grace (100 ms): the releases of this turn and the 4 before it */
        uint64_t in_grace = (uint64_t)(t < 5 ? t + 1 : 5) * PER_TURN;
        assert_int_equal(st.n_reclaim, in_grace);
        assert_int_equal(st.reclaimed, released - in_grace);
        assert_int_equal(st.used, in_grace * 4096);
    }
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* A backlog larger than the reclaim cap (a hot upgrade's adopted reclaim queue, a long stall):
 * the tick frees reclaim_cap slots and says more are due; each re-run (slot_core_reclaim) frees
 * at most the cap, the backlog is gone after exactly ceil(backlog / cap) passes, the last one
 * says nothing more is due (a slot still in its grace stays), and the reservation waiting for
 * the space is answered by the re-run that freed it, not a tick period later. */
static void test_reclaim_cap(void **state)
{
    (void)state;
    struct fx_log l;
    enum { CAP = 64, SLOT = 1024, N = 1023, PASSES = (N + CAP - 1) / CAP }; /* 16 passes */
    enum { WANT = 512, ANSWER_PASS = WANT / CAP }; /* the waiter: 512 KiB, free after 8 passes */
    slot_core_t *c = core_new_cap(&l, false, N * SLOT + SLOT, CAP);
    for (int i = 0; i <= N; i++) {
        reserve(c, &l, 0, SLOT);
        assert_non_null(slot_core_commit(c, 0, 7, l.off));
        /* the first N released at 1 ms (due at 101 ms), the last at 50 ms (due at 150 ms) */
        slot_core_release(c, i < N ? 1 * MS : 50 * MS, 7, l.off);
    }
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "big", 3), 0);
    int before = l.answers;
    slot_core_reserve(c, 60 * MS, &id, WANT * SLOT, 300, reserved, &l);
    assert_int_equal(l.answers, before); /* waits for the reclaim */
    slot_core_stats_t st;
    bool more = slot_core_tick(c, 101 * MS);
    int passes = 1;
    for (;;) {
        slot_core_stats(c, &st);
        assert_int_equal(l.n_freed, passes < PASSES ? passes * CAP : N); /* at most CAP a pass */
        assert_int_equal(st.reclaimed, (uint64_t)l.n_freed);
        assert_int_equal(more, passes < PASSES);
        /* answered by the pass that freed its space (the slots were placed in offset order) */
        assert_int_equal(l.answers, before + (passes >= ANSWER_PASS));
        assert_int_equal(slot_core_check(c), 0);
        if (!more)
            break;
        assert_true(passes < PASSES); /* a bounded number of re-runs */
        more = slot_core_reclaim(c, 101 * MS);
        passes++;
    }
    assert_int_equal(passes, PASSES);
    assert_int_equal(st.n_reclaim, 1); /* the slot still in its grace */
    assert_int_equal(st.reclaim_bytes, SLOT);
    assert_int_equal(l.rc, 0);
    assert_false(slot_core_reclaim(c, 101 * MS)); /* nothing due: frees nothing */
    assert_int_equal(l.n_freed, N);
    assert_false(slot_core_tick(c, 150 * MS)); /* its grace passed */
    assert_int_equal(l.n_freed, N + 1);
    kvm_ident_free(&id);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* An older owner's refused slot batch is resent item by item after its answer, so a later
 * single message may overtake its items (docs/store.md "Batched COMMIT and RELEASE"): for one
 * slot, COMMIT and RELEASE commute. Either order (the RELEASE naming the slot by its token, as a
 * failed put's does, or by its object, as a replaced route's does) ends in RECLAIM with the grace
 * from the RELEASE, the grant revoked once, nothing counted stale, and the bytes freed at the
 * same tick. */
static void test_commit_release_commute(void **state)
{
    (void)state;
    kvm_ident_t k;
    assert_int_equal(kvm_ident_init(&k, "t", NULL, "k", 1), 0);
    for (int order = 0; order < 2; order++) {
        for (int by_token = 0; by_token < 2; by_token++) {
            struct fx_log l;
            slot_core_t *c = core_new(&l, false, 1 << 20);
            reserve(c, &l, 0, 3000);
            uint64_t off = l.off;
            slot_note_t commit = {SLOT_NOTE_TOKEN | SLOT_NOTE_OBJECT, l.token, k.hash, 3000};
            slot_note_t release =
                by_token ? commit : (slot_note_t){SLOT_NOTE_OBJECT, 0, k.hash, 3000};
            if (order == 0) { /* as sent */
                assert_non_null(slot_core_commit_note(c, 1 * MS, 7, off, &commit));
                assert_true(slot_core_release_note(c, 2 * MS, 7, off, &release));
            } else { /* the RELEASE overtook the COMMIT */
                assert_true(slot_core_release_note(c, 2 * MS, 7, off, &release));
                assert_non_null(slot_core_commit_note(c, 3 * MS, 7, off, &commit));
            }
            assert_int_equal(state_at(c, off), SLOT_RECLAIM);
            slot_core_stats_t st;
            slot_core_stats(c, &st);
            assert_int_equal(st.n_committed, 0);
            assert_int_equal(st.n_reserved, 0);
            assert_int_equal(st.n_reclaim, 1);
            assert_int_equal(st.notes_stale, 0);
            assert_int_equal(l.n_revoked, 1);
            slot_core_tick(c, 101 * MS); /* the grace runs from the RELEASE (2 ms) */
            assert_int_equal(l.n_freed, 0);
            slot_core_tick(c, 102 * MS);
            assert_int_equal(l.n_freed, 1);
            assert_int_equal(slot_core_used(c), 0);
            assert_int_equal(slot_core_check(c), 0);
            slot_core_free(c);
        }
    }
    kvm_ident_free(&k);
}

static void test_settle_decide(void **state)
{
    (void)state;
    const struct {
        enum slot_answer a;
        bool check;
        enum slot_settle want;
    } t[] = {
        {SLOT_ANS_REFERENCED, false, SLOT_SETTLE_COMMIT},
        {SLOT_ANS_REFERENCED, true, SLOT_SETTLE_COMMIT},
        {SLOT_ANS_UNREFERENCED, false, SLOT_SETTLE_FREE},
        {SLOT_ANS_ABSENT, false, SLOT_SETTLE_FREE},
        {SLOT_ANS_UNREFERENCED, true, SLOT_SETTLE_CHECK},
        {SLOT_ANS_ABSENT, true, SLOT_SETTLE_CHECK},
        {SLOT_ANS_UNKNOWN, false, SLOT_SETTLE_KEEP},
        {SLOT_ANS_CANCELED, true, SLOT_SETTLE_KEEP},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        slot_settle_in_t in = {.route = t[i].a, .check_due = t[i].check};
        assert_int_equal(slot_core_settle_decide(&in), t[i].want);
    }
}

static uint64_t notes_stale(const slot_core_t *c)
{
    slot_core_stats_t st;
    slot_core_stats(c, &st);
    return st.notes_stale;
}

/* A COMMIT or RELEASE delayed past the reclaim grace reaches a later slot at the same bytes: it
 * names the earlier slot (its write-grant token, or its object) and is ignored and counted. */
static void test_stale_note(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 4096); /* room for one 3000-byte slot: the same bytes */
    kvm_ident_t k, other;
    assert_int_equal(kvm_ident_init(&k, "t", NULL, "k", 1), 0);
    assert_int_equal(kvm_ident_init(&other, "t", NULL, "other", 5), 0);
    reserve(c, &l, 0, 3000);
    uint64_t off = l.off, t1 = l.token;
    slot_note_t n1 = {SLOT_NOTE_TOKEN | SLOT_NOTE_OBJECT, t1, k.hash, 3000};
    assert_non_null(slot_core_commit_note(c, 1 * MS, 7, off, &n1));
    assert_true(slot_core_release_note(c, 2 * MS, 7, off, &n1)); /* the token outlives the grant */
    slot_core_tick(c, 102 * MS);
    assert_int_equal(l.n_freed, 1);

    /* the same bytes reserved again (the same object and length: only the token tells) */
    reserve(c, &l, 110 * MS, 3000);
    assert_int_equal(l.off, off);
    uint64_t t2 = l.token;
    assert_true(t2 != t1);
    assert_null(slot_core_commit_note(c, 111 * MS, 7, off, &n1)); /* the earlier slot's commit */
    assert_false(slot_core_release_note(c, 112 * MS, 7, off, &n1));
    assert_int_equal(state_at(c, off), SLOT_RESERVED);
    assert_int_equal(notes_stale(c), 2);
    /* a release known from a route only (no token) names the object: another one's is stale */
    slot_note_t wrong_obj = {SLOT_NOTE_OBJECT, 0, other.hash, 3000};
    assert_false(slot_core_release_note(c, 113 * MS, 7, off, &wrong_obj));
    assert_int_equal(state_at(c, off), SLOT_RESERVED);
    assert_int_equal(notes_stale(c), 3);

    slot_note_t n2 = {SLOT_NOTE_TOKEN | SLOT_NOTE_OBJECT, t2, k.hash, 3000};
    assert_non_null(slot_core_commit_note(c, 114 * MS, 7, off, &n2));
    assert_false(slot_core_release_note(c, 115 * MS, 7, off, &n1)); /* stale: still committed */
    assert_false(slot_core_release_note(c, 116 * MS, 7, off, &wrong_obj));
    slot_note_t wrong_len = {SLOT_NOTE_OBJECT, 0, k.hash, 2999};
    assert_false(slot_core_release_note(c, 117 * MS, 7, off, &wrong_len));
    assert_int_equal(state_at(c, off), SLOT_COMMITTED);
    assert_int_equal(notes_stale(c), 6);
    assert_int_equal(slot_core_check(c), 0);
    /* the route's replaced replica, named by its object, is released */
    slot_note_t obj = {SLOT_NOTE_OBJECT, 0, k.hash, 3000};
    assert_true(slot_core_release_note(c, 118 * MS, 7, off, &obj));
    assert_int_equal(state_at(c, off), SLOT_RECLAIM);
    slot_core_tick(c, 218 * MS);
    assert_int_equal(l.n_freed, 2);

    /* an adopted slot has no token: a note's object decides; an older peer's note (NULL) and
     * the broken variant name the slot by (segment, offset) alone */
    assert_int_equal(slot_core_adopt(c, 0, 3072, 500, SLOT_COMMITTED, 9, &k), 0);
    assert_false(slot_core_release_note(c, 220 * MS, 7, 3072, &n2));
    slot_note_t n3 = {SLOT_NOTE_TOKEN | SLOT_NOTE_OBJECT, t2, k.hash, 500};
    assert_true(slot_core_release_note(c, 221 * MS, 7, 3072, &n3));
    reserve(c, &l, 230 * MS, 3000);
    assert_int_equal(l.off, off);
    assert_non_null(slot_core_commit_note(c, 230 * MS, 7, off, NULL)); /* as before the fix */
    assert_int_equal(state_at(c, off), SLOT_COMMITTED);
    slot_core_test_set_bugs(c, SLOT_BUG_NO_TOKEN);
    assert_true(slot_core_release_note(c, 231 * MS, 7, off, &n1));
    assert_int_equal(state_at(c, off), SLOT_RECLAIM);
    assert_int_equal(notes_stale(c), 7);
    assert_int_equal(slot_core_check(c), 0);
    kvm_ident_free(&k);
    kvm_ident_free(&other);
    slot_core_free(c);
}

/* the slot keeps its identity as its inline encoding alone: the view (lengths read from the
 * encoding, hash computed) equals the ident reserved (with and without a domain), and it
 * survives the caller freeing its own copy */
static void test_ident_view(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    kvm_ident_t a, b;
    assert_int_equal(kvm_ident_init(&a, "tenant-a", "dom.x", "key/one", 7), 0);
    assert_int_equal(kvm_ident_init(&b, "t", NULL, "k2", 2), 0);
    const kvm_ident_t *ids[2] = {&a, &b};
    uint64_t offs[2];
    for (int i = 0; i < 2; i++) {
        kvm_ident_t copy;
        assert_int_equal(kvm_ident_copy(&copy, ids[i]), 0);
        slot_core_reserve(c, 0, &copy, 100, 300, reserved, &l);
        kvm_ident_free(&copy); /* the core copied it */
        assert_int_equal(l.rc, 0);
        offs[i] = l.off;
    }
    for (int i = 0; i < 2; i++) {
        const slot_t *s = slot_core_find(c, 7, offs[i]);
        assert_non_null(s);
        kvm_ident_t v = slot_ident(s);
        assert_true(kvm_ident_equal(&v, ids[i]));
        assert_int_equal(v.hash, ids[i]->hash);
        assert_int_equal(v.enc_len, ids[i]->enc_len);
        assert_int_equal(v.tenant_len, ids[i]->tenant_len);
        assert_int_equal(v.domain_len, ids[i]->domain_len);
        assert_int_equal(v.key_len, ids[i]->key_len);
        assert_memory_equal(kvm_ident_key(&v), kvm_ident_key(ids[i]), ids[i]->key_len);
        assert_ptr_equal(v.enc, s->ident_enc);
    }
    assert_int_equal(slot_core_check(c), 0);
    kvm_ident_free(&a);
    kvm_ident_free(&b);
    slot_core_free(c);
}

/* an identity whose encoding does not give its own length is refused with EINVAL (the slot keeps
 * no length of its own), on reserve and adopt, and nothing is left behind */
static void test_non_canonical(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "key", 3), 0);
    kvm_ident_t bad = id;
    bad.enc_len = id.enc_len - 1; /* truncated */
    slot_core_reserve(c, 0, &bad, 100, 300, reserved, &l);
    assert_int_equal(l.answers, 1);
    assert_int_equal(l.rc, KVMESH_EINVAL);
    bad.enc_len = 4; /* too short for the lengths */
    assert_int_equal(slot_core_adopt(c, 0, 0, 100, SLOT_COMMITTED, 1, &bad), KVMESH_EINVAL);
    bad.enc_len = 0;
    bad.enc = NULL;
    assert_int_equal(slot_core_adopt(c, 0, 0, 100, SLOT_COMMITTED, 1, &bad), KVMESH_EINVAL);
    slot_core_stats_t st;
    slot_core_stats(c, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.n_reserved, 0);
    assert_int_equal(slot_core_check(c), 0);
    kvm_ident_free(&id);
    slot_core_free(c);
}

/* slots are records of the core's pool: a 22-byte identity costs a 104-byte record; released
 * and reclaimed slots' records are reused (the pool does not grow over reserve/release rounds);
 * an identity too long for the pool's classes (a malloc'd record) lives and dies the same way */
static void test_record_pool(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    kvm_ident_t id, big;
    assert_int_equal(kvm_ident_init(&id, "bench", NULL, "fp0000000001", 12), 0);
    assert_int_equal(id.enc_len, 22);
    char key[300];
    memset(key, 'k', sizeof(key));
    assert_int_equal(kvm_ident_init(&big, "t", NULL, key, sizeof(key)), 0);
    slot_core_stats_t st0, st;
    slot_core_stats(c, &st0);
    slot_core_reserve(c, 0, &id, 64, 300, reserved, &l);
    assert_int_equal(l.rc, 0);
    slot_core_stats(c, &st);
    assert_int_equal(st.records_live - st0.records_live, 88);
    /* a length past the 32-bit block length is refused, not waited for */
    slot_core_reserve(c, 0, &id, (uint64_t)ALLOC_MAX_LEN + 1, 300, reserved, &l);
    assert_int_equal(l.rc, KVMESH_ETOOBIG);
    uint64_t pool = 0;
    for (int round = 0; round < 50; round++) {
        uint64_t now = (uint64_t)round * 1000 * MS, offs[40];
        for (int i = 0; i < 40; i++) {
            slot_core_reserve(c, now, i % 8 ? &id : &big, 64 + 64 * (uint64_t)i, 300, reserved, &l);
            assert_int_equal(l.rc, 0);
            offs[i] = l.off;
        }
        for (int i = 0; i < 40; i++)
            slot_core_release(c, now, 7, offs[i]);
        slot_core_tick(c, now + 200 * MS); /* past the grace: the bytes go back */
        assert_int_equal(slot_core_check(c), 0);
        slot_core_stats(c, &st);
        if (round == 1)
            pool = st.record_bytes;
        if (round > 1)
            assert_int_equal(st.record_bytes, pool);
    }
    kvm_ident_free(&id);
    kvm_ident_free(&big);
    slot_core_free(c);
}

/* The late-payload fence: a payload landing in a reservation keeps its bytes from being freed
 * (and reserved again) even when the TTL passes and the expiry settles the slot free meanwhile;
 * the landing's end then says the bytes must not be published. A landing starts only in a live
 * reservation of the same token before its TTL. */
static void test_land_fence(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 4096);
    reserve(c, &l, 0, 4096); /* the whole segment: a reuse could only take these bytes */
    uint64_t off = l.off, tok = l.token;
    assert_int_equal(slot_core_land_begin(c, 10 * MS, 7, off, tok + 1), KVMESH_ENOENT);
    assert_int_equal(slot_core_land_begin(c, 10 * MS, 7, off + 64, tok), KVMESH_ENOENT);
    assert_int_equal(slot_core_land_begin(c, 10 * MS, 7, off, tok), 0);
    assert_true(slot_core_find(c, 7, off)->landing);
    /* the TTL passes while the payload lands: held, looked up, settled free */
    slot_core_tick(c, 300 * MS);
    assert_int_equal(state_at(c, off), SLOT_HELD);
    assert_int_equal(l.n_lookups, 1);
    slot_settle_in_t absent = {.route = SLOT_ANS_ABSENT};
    assert_int_equal(slot_core_held_answer(c, 301 * MS, l.lookups[0], &absent), SLOT_SETTLE_FREE);
    assert_int_equal(state_at(c, off), SLOT_RECLAIM);
    /* long past the grace: still landing, so not freed and the bytes are not reserved again */
    for (uint64_t t = 400; t <= 5000; t += 100)
        slot_core_tick(c, t * MS);
    assert_int_equal(l.n_freed, 0);
    assert_int_equal(state_at(c, off), SLOT_RECLAIM);
    assert_int_equal(slot_core_used(c), 4096);
    assert_int_equal(slot_core_check(c), 0);
    /* the landing ends: the reservation it began in is gone, nothing may be published */
    assert_int_equal(slot_core_land_end(c, 5001 * MS, 7, off, tok), KVMESH_ETIMEDOUT);
    assert_false(slot_core_find(c, 7, off)->landing);
    assert_int_equal(slot_core_land_end(c, 5001 * MS, 7, off, tok), KVMESH_ENOENT); /* (once) */
    slot_core_tick(c, 5100 * MS); /* the grace the last tick gave it passed: freed */
    assert_int_equal(l.n_freed, 1);
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "k2", 2), 0);
    slot_core_reserve(c, 5100 * MS, &id, 4096, 300, reserved, &l);
    assert_int_equal(l.rc, 0);
    uint64_t tok2 = l.token;
    assert_true(tok2 != tok);
    /* the old token names nothing now; a landing past the TTL is refused */
    assert_int_equal(slot_core_land_begin(c, 5101 * MS, 7, off, tok), KVMESH_ENOENT);
    assert_int_equal(slot_core_land_begin(c, 5400 * MS, 7, off, tok2), KVMESH_ETIMEDOUT);
    /* in time: the landing ends with the reservation live and the bytes are committed */
    assert_int_equal(slot_core_land_begin(c, 5101 * MS, 7, off, tok2), 0);
    slot_core_tick(c, 5200 * MS);
    assert_int_equal(slot_core_land_end(c, 5201 * MS, 7, off, tok2), 0);
    assert_non_null(slot_core_commit(c, 5202 * MS, 7, off));
    assert_int_equal(state_at(c, off), SLOT_COMMITTED);
    /* a landing that ends after the TTL but before the expiry settled it: held, refused */
    slot_core_release(c, 5300 * MS, 7, off);
    slot_core_tick(c, 5400 * MS);
    assert_int_equal(l.n_freed, 2);
    slot_core_reserve(c, 5400 * MS, &id, 4096, 300, reserved, &l);
    assert_int_equal(l.rc, 0);
    assert_int_equal(slot_core_land_begin(c, 5401 * MS, 7, off, l.token), 0);
    slot_core_tick(c, 5700 * MS); /* TTL end: held, its lookup asked and not answered yet */
    assert_int_equal(state_at(c, off), SLOT_HELD);
    assert_int_equal(slot_core_land_end(c, 5701 * MS, 7, off, l.token), KVMESH_ETIMEDOUT);
    assert_int_equal(slot_core_check(c), 0);
    kvm_ident_free(&id);
    slot_core_free(c);
}

/* A transport WRITE admitted by a grant before its TTL may still land after the expiry settled
 * the slot free: the bytes stay in RECLAIM late_write_ns per started MiB plus one, not only the
 * grace; slots released after it with a shorter grace are freed on time (the queue stays in
 * deadline order). A slot released by its writer keeps the grace alone. */
static void test_late_write_hold(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new_late(&l, false, 4 << 20, 0, 1000 * MS);
    reserve(c, &l, 0, (1 << 20) + 1); /* one MiB started past the first: held 2 x 1000 ms */
    uint64_t a = l.off;
    reserve(c, &l, 0, 4096);
    uint64_t b = l.off;
    assert_non_null(slot_core_commit(c, 1 * MS, 7, b));
    slot_core_tick(c, 300 * MS);
    assert_int_equal(l.n_lookups, 1);
    slot_settle_in_t absent = {.route = SLOT_ANS_ABSENT};
    assert_int_equal(slot_core_held_answer(c, 301 * MS, l.lookups[0], &absent), SLOT_SETTLE_FREE);
    slot_core_release(c, 302 * MS, 7, b); /* grace 100 ms: due at 402 ms */
    assert_int_equal(slot_core_check(c), 0);
    slot_core_tick(c, 402 * MS);
    assert_int_equal(l.n_freed, 1); /* b, though a went into the queue before it */
    assert_int_equal(state_at(c, b), SLOT_FREED);
    assert_int_equal(state_at(c, a), SLOT_RECLAIM);
    slot_core_tick(c, 2300 * MS);
    assert_int_equal(l.n_freed, 1);
    slot_core_tick(c, 2301 * MS);
    assert_int_equal(l.n_freed, 2);
    assert_int_equal(slot_core_used(c), 0);
    /* released by its own writer (no expiry): the grace alone */
    reserve(c, &l, 4000 * MS, 1 << 20);
    slot_core_release(c, 4001 * MS, 7, l.off);
    slot_core_tick(c, 4101 * MS);
    assert_int_equal(l.n_freed, 3);
    assert_int_equal(slot_core_check(c), 0);
    slot_core_free(c);
}

/* reserve len bytes for id (ttl 300 ms) at now: the offset */
static uint64_t reserve_id(slot_core_t *c, struct fx_log *l, uint64_t now, const kvm_ident_t *id,
                           uint64_t len)
{
    int before = l->answers;
    slot_core_reserve(c, now, id, len, 300, reserved, l);
    assert_int_equal(l->answers, before + 1);
    assert_int_equal(l->rc, 0);
    return l->off;
}

static bool slot_is(slot_core_t *c, uint64_t off, const kvm_ident_t *id)
{
    const slot_t *s = slot_core_find(c, 7, off);
    if (!s)
        return false;
    kvm_ident_t v = slot_ident(s);
    return kvm_ident_equal(&v, id);
}

/* Pre-granted ranges: a reservation for a placeholder identity is bound to the key it is
 * published as (slot_core_bind): the same bytes, token, TTL end and queue place, used bytes
 * unchanged, a second bind refused, wrong token / length / identity / state refused with nothing
 * changed, a bind too near the TTL refused; an unbound grant expires through its lookup (HELD ->
 * RECLAIM -> FREED after the grace), a bound one's lookup asks for the key; a bound slot commits
 * and releases as any reservation; the bind of a range whose neighbour is free (the release
 * merges, the reserve splits) keeps every byte of the neighbour free and the core consistent. */
static void test_bind(void **state)
{
    (void)state;
    struct fx_log l;
    slot_core_t *c = core_new(&l, false, 1 << 20);
    kvm_ident_t ph, ph2, key, key2, other;
    assert_int_equal(kvm_ident_init(&ph, "kvmesh-grant", NULL, "g-0001", 6), 0);
    assert_int_equal(kvm_ident_init(&ph2, "kvmesh-grant", NULL, "g-0002", 6), 0);
    assert_int_equal(kvm_ident_init(&key, "tenant-a", "dom", "a-longer-key/0001", 17), 0);
    assert_int_equal(kvm_ident_init(&key2, "t", NULL, "k", 1), 0);
    assert_int_equal(kvm_ident_init(&other, "t", NULL, "other", 5), 0);

    /* A (free later), G (the grant), B: G's predecessor becomes free before the bind */
    uint64_t a = reserve_id(c, &l, 0, &other, 4096);
    uint64_t g = reserve_id(c, &l, 0, &ph, 10000);
    uint64_t gtok = l.token;
    uint64_t b = reserve_id(c, &l, 0, &other, 4096);
    slot_core_release(c, 1 * MS, 7, a);
    slot_core_tick(c, 150 * MS); /* past the grace: A's bytes are free */
    assert_null(slot_core_find(c, 7, a));
    slot_core_stats_t st0, st;
    slot_core_stats(c, &st0);
    int revoked0 = l.n_revoked;

    /* refusals change nothing */
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g, gtok + 1, 10000, &ph, &key, 0),
                     KVMESH_ENOENT);
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g, gtok, 9999, &ph, &key, 0), KVMESH_ENOENT);
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g, gtok, 10000, &ph2, &key, 0), KVMESH_ENOENT);
    assert_int_equal(slot_core_bind(c, 160 * MS, 8, g, gtok, 10000, &ph, &key, 0), KVMESH_ENOENT);
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g + 64, gtok, 10000, &ph, &key, 0),
                     KVMESH_ENOENT);
    kvm_ident_t bad = key;
    bad.enc_len = key.enc_len - 1;
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g, gtok, 10000, &ph, &bad, 0), KVMESH_EINVAL);
    /* the TTL (300 ms) ends within the margin */
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g, gtok, 10000, &ph, &key, 140 * MS + 1),
                     KVMESH_ETIMEDOUT);
    assert_true(slot_is(c, g, &ph));
    assert_int_equal(state_at(c, g), SLOT_RESERVED);
    assert_int_equal(slot_core_check(c), 0);

    /* the bind */
    assert_int_equal(slot_core_bind(c, 160 * MS, 7, g, gtok, 10000, &ph, &key, 100 * MS), 0);
    assert_true(slot_is(c, g, &key));
    const slot_t *s = slot_core_find(c, 7, g);
    assert_int_equal(s->state, SLOT_RESERVED);
    assert_int_equal(s->token, gtok);
    assert_int_equal(s->len, 10000);
    assert_int_equal(slot_off(s), g);
    assert_int_equal(s->deadline_ns, 300 * MS);
    assert_int_equal(l.n_revoked, revoked0); /* the grant stays live */
    slot_core_stats(c, &st);
    assert_int_equal(st.used, st0.used);
    assert_int_equal(st.n_reserved, st0.n_reserved);
    assert_int_equal(slot_core_check(c), 0);
    /* A's bytes are free again: a reservation of them gets them */
    uint64_t a2 = reserve_id(c, &l, 170 * MS, &other, 4096);
    assert_int_equal(a2, a);
    /* not twice */
    assert_int_equal(slot_core_bind(c, 170 * MS, 7, g, gtok, 10000, &ph, &key2, 0), KVMESH_ENOENT);
    assert_true(slot_is(c, g, &key));

    /* an unbound grant expires through its lookup of the placeholder: HELD, absent, RECLAIM */
    uint64_t g2 = reserve_id(c, &l, 200 * MS, &ph2, 20000);
    uint64_t g2tok = l.token;
    slot_core_commit(c, 200 * MS, 7, g); /* the bound one commits as any reservation */
    assert_int_equal(state_at(c, g), SLOT_COMMITTED);
    assert_int_equal(l.n_revoked, revoked0 + 1);
    slot_core_tick(c, 500 * MS);
    assert_int_equal(state_at(c, g2), SLOT_HELD);
    /* (b and a2 expire too: every lookup names its own slot's identity) */
    int lg2 = -1;
    for (int i = 0; i < l.n_lookups; i++)
        if (slot_off(l.lookups[i]) == g2)
            lg2 = i;
    assert_true(lg2 >= 0);
    assert_true(slot_is(c, g2, &ph2));
    assert_int_equal(slot_core_bind(c, 501 * MS, 7, g2, g2tok, 20000, &ph2, &key2, 0),
                     KVMESH_ENOENT); /* HELD: past its TTL, never bound */
    slot_settle_in_t absent = {.route = SLOT_ANS_ABSENT};
    assert_int_equal(slot_core_held_answer(c, 502 * MS, l.lookups[lg2], &absent), SLOT_SETTLE_FREE);
    assert_int_equal(state_at(c, g2), SLOT_RECLAIM);
    int freed0 = l.n_freed;
    slot_core_tick(c, 700 * MS); /* the grace passed */
    assert_null(slot_core_find(c, 7, g2));
    assert_true(l.n_freed > freed0);
    assert_int_equal(slot_core_check(c), 0);

    /* a bound grant that is never committed expires as the key's reservation */
    uint64_t g3 = reserve_id(c, &l, 1000 * MS, &ph, 5000);
    uint64_t g3tok = l.token;
    assert_int_equal(slot_core_bind(c, 1001 * MS, 7, g3, g3tok, 5000, &ph, &key2, 0), 0);
    int n0 = l.n_lookups;
    slot_core_tick(c, 1300 * MS);
    assert_int_equal(state_at(c, g3), SLOT_HELD);
    int lg3 = -1;
    for (int i = n0; i < l.n_lookups; i++)
        if (slot_off(l.lookups[i]) == g3)
            lg3 = i;
    assert_true(lg3 >= 0);
    kvm_ident_t v = slot_ident(l.lookups[lg3]);
    assert_true(kvm_ident_equal(&v, &key2));
    assert_int_equal(slot_core_check(c), 0);
    (void)b;

    kvm_ident_free(&ph);
    kvm_ident_free(&ph2);
    kvm_ident_free(&key);
    kvm_ident_free(&key2);
    kvm_ident_free(&other);
    slot_core_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grace),
        cmocka_unit_test(test_held),
        cmocka_unit_test(test_held_check),
        cmocka_unit_test(test_evict_busy),
        cmocka_unit_test(test_waiter),
        cmocka_unit_test(test_settle_decide),
        cmocka_unit_test(test_stale_note),
        cmocka_unit_test(test_ident_view),
        cmocka_unit_test(test_non_canonical),
        cmocka_unit_test(test_record_pool),
        cmocka_unit_test(test_reclaim_backlog),
        cmocka_unit_test(test_reclaim_rate),
        cmocka_unit_test(test_reclaim_cap),
        cmocka_unit_test(test_commit_release_commute),
        cmocka_unit_test(test_land_fence),
        cmocka_unit_test(test_late_write_hold),
        cmocka_unit_test(test_bind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
