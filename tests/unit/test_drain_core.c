/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_drain_core.c — the drain core (src/store/drain_core.h) driven by hand: effects are logged
 * as text, time is a number. The state edges of a drain and of its items, the empty-pass rule,
 * applied / superseded / refused / indeterminate CASes, a failed reservation and a failed copy,
 * the rounds that retry what a round could not move (bounded by cfg.rounds and the deadline),
 * close mid-page and while waiting, the deadline, a listing error, the page bounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvmesh.h"
#include "store/drain_core.h"

#define MS 1000000ull

struct fx_log {
    char text[1024];
    int done_rc, n_done;
    int n_retries;
    size_t retry_moved, retry_failed;
};

static void logf_(struct fx_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(struct fx_log *l, const char *fmt, ...)
{
    size_t used = strlen(l->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text + used, sizeof(l->text) - used, fmt, ap);
    va_end(ap);
}

static void fx_list(void *ctx, uint64_t cursor, uint32_t cap)
{
    logf_(ctx, "list %llu %u;", (unsigned long long)cursor, cap);
}
static void fx_reserve(void *ctx, uint32_t i)
{
    logf_(ctx, "reserve %u;", i);
}
static void fx_copy(void *ctx, uint32_t i)
{
    logf_(ctx, "copy %u;", i);
}
static void fx_cas(void *ctx, uint32_t i)
{
    logf_(ctx, "cas %u;", i);
}
static void fx_commit_new(void *ctx, uint32_t i)
{
    logf_(ctx, "commit %u;", i);
}
static void fx_release_new(void *ctx, uint32_t i, enum drain_release why)
{
    static const char *const whys[] = {"copy_failed", "refused", "superseded", "closed"};
    logf_(ctx, "release_new %u %s;", i, whys[why]);
}
static void fx_release_old(void *ctx, uint32_t i)
{
    logf_(ctx, "release_old %u;", i);
}
static void fx_arm_timer(void *ctx, uint64_t at_ns)
{
    logf_(ctx, "timer %llu;", (unsigned long long)(at_ns / MS));
}
static void fx_done(void *ctx, int rc)
{
    struct fx_log *l = ctx;
    l->done_rc = rc;
    l->n_done++;
    logf_(ctx, "done;");
}

static void fx_retry(void *ctx, uint32_t round, size_t moved, size_t failed)
{
    struct fx_log *l = ctx;
    l->n_retries++;
    l->retry_moved = moved;
    l->retry_failed = failed;
    logf_(ctx, "retry %u;", round);
}

static const drain_effects_t fx = {
    .list = fx_list,
    .reserve = fx_reserve,
    .copy = fx_copy,
    .cas = fx_cas,
    .commit_new = fx_commit_new,
    .release_new = fx_release_new,
    .release_old = fx_release_old,
    .arm_timer = fx_arm_timer,
    .done = fx_done,
    .retry = fx_retry,
};

/* The log since the last call (cleared), the core's invariants checked. */
static void expect(drain_core_t *c, struct fx_log *l, const char *want)
{
    assert_int_equal(drain_core_check(c), 0);
    assert_string_equal(l->text, want);
    l->text[0] = '\0';
}

static drain_core_t *new_core_rounds(struct fx_log *l, uint32_t timeout_ms, uint32_t rounds)
{
    memset(l, 0, sizeof(*l));
    drain_core_cfg_t cfg = {
        .timeout_ms = timeout_ms, .writers_ns = 50 * MS, .page = 4, .rounds = rounds};
    drain_core_t *c = NULL;
    assert_int_equal(drain_core_new(&cfg, &fx, l, &c), 0);
    assert_int_equal(drain_core_state(c), DRAIN_NEW);
    drain_core_start(c, 0);
    assert_int_equal(drain_core_state(c), DRAIN_LISTING);
    expect(c, l, "list 0 4;");
    return c;
}

static drain_core_t *new_core(struct fx_log *l, uint32_t timeout_ms)
{
    return new_core_rounds(l, timeout_ms, 0); /* DRAIN_ROUNDS */
}

/* One item of a page moved: reserved, copied, CAS answered ans. */
static void through_copy(drain_core_t *c, uint64_t now, uint32_t i)
{
    drain_core_reserved(c, now, i, 0);
    assert_int_equal(drain_core_item_state(c, i), DITEM_COPYING);
    drain_core_copied(c, now, i, 0);
    assert_int_equal(drain_core_item_state(c, i), DITEM_CAS);
}

/* Two empty passes a writers period apart end the drain. */
static void two_empty(drain_core_t *c, struct fx_log *l, uint64_t now, const char *cursor_list)
{
    drain_core_listed(c, now, 0, 0, 9);
    assert_int_equal(drain_core_state(c), DRAIN_WAITING);
    char want[64];
    snprintf(want, sizeof(want), "timer %llu;", (unsigned long long)(now / MS + 50));
    expect(c, l, want);
    drain_core_timer(c, now + 50 * MS);
    assert_int_equal(drain_core_state(c), DRAIN_LISTING);
    expect(c, l, cursor_list);
    drain_core_listed(c, now + 51 * MS, 0, 0, 9);
    assert_int_equal(drain_core_state(c), DRAIN_DONE);
    expect(c, l, "done;");
}

static void test_moves_and_empty_passes(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 1 * MS, 0, 2, 7);
    assert_int_equal(drain_core_state(c), DRAIN_MOVING);
    assert_int_equal(drain_core_item_state(c, 0), DITEM_RESERVING);
    expect(c, &l, "reserve 0;reserve 1;");
    through_copy(c, 2 * MS, 0);
    through_copy(c, 2 * MS, 1);
    expect(c, &l, "copy 0;cas 0;copy 1;cas 1;");
    drain_core_cas_answer(c, 3 * MS, 1, DRAIN_CAS_APPLIED);
    expect(c, &l, "commit 1;release_old 1;"); /* the old replica only after the CAS applied */
    assert_int_equal(drain_core_item_state(c, 1), DITEM_MOVED);
    assert_int_equal(drain_core_state(c), DRAIN_MOVING);
    drain_core_cas_answer(c, 3 * MS, 0, DRAIN_CAS_APPLIED);
    expect(c, &l, "commit 0;release_old 0;list 7 4;"); /* the next page from the cursor */
    /* an empty pass after a page: the writers period, then the second empty pass */
    two_empty(c, &l, 4 * MS, "list 9 4;");
    size_t moved, failed;
    drain_core_counts(c, &moved, &failed);
    assert_int_equal(moved, 2);
    assert_int_equal(failed, 0);
    assert_int_equal(l.done_rc, 0);
    drain_core_close(c, 60 * MS); /* after DONE: nothing */
    expect(c, &l, "");
    drain_core_free(c);
}

static void test_refused_cas(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, 0, 1, 3);
    through_copy(c, 0, 0);
    expect(c, &l, "reserve 0;copy 0;cas 0;");
    drain_core_cas_answer(c, 0, 0, DRAIN_CAS_REFUSED);
    /* the route still names the old replica: it stays; the copy is given back */
    expect(c, &l, "release_new 0 refused;list 3 4;");
    assert_int_equal(drain_core_item_state(c, 0), DITEM_FAILED);
    /* the round ends with it not moved: the next round lists from the first replica, a writers
     * period later, and this time its CAS applies */
    drain_core_listed(c, 1 * MS, 0, 0, 9);
    expect(c, &l, "timer 51;");
    drain_core_timer(c, 51 * MS);
    expect(c, &l, "list 9 4;");
    drain_core_listed(c, 52 * MS, 0, 0, 9);
    expect(c, &l, "retry 1;timer 102;");
    assert_int_equal(l.n_retries, 1);
    assert_int_equal(l.retry_failed, 1);
    assert_int_equal(l.retry_moved, 0);
    assert_int_equal(drain_core_round(c), 2);
    size_t moved, failed;
    drain_core_counts(c, &moved, &failed);
    assert_int_equal(moved, 0);
    assert_int_equal(failed, 0); /* (this round's) */
    drain_core_timer(c, 102 * MS);
    expect(c, &l, "list 0 4;");
    drain_core_listed(c, 103 * MS, 0, 1, 3);
    through_copy(c, 104 * MS, 0);
    drain_core_cas_answer(c, 105 * MS, 0, DRAIN_CAS_APPLIED);
    expect(c, &l, "reserve 0;copy 0;cas 0;commit 0;release_old 0;list 3 4;");
    two_empty(c, &l, 106 * MS, "list 9 4;");
    assert_int_equal(l.done_rc, 0);
    drain_core_counts(c, &moved, &failed);
    assert_int_equal(moved, 1);
    assert_int_equal(failed, 0);
    drain_core_free(c);
}

/* Rounds are bounded: cfg.rounds, and a round starts only when a writers period still fits
 * before the deadline; the drain then ends saying how many replicas the last round left. */
static void test_rounds_bounded(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core_rounds(&l, 10000, 2);
    for (uint32_t r = 1; r <= 2; r++) {
        uint64_t t = (r - 1) * 200 * MS;
        if (r > 1) {
            drain_core_timer(c, t);
            expect(c, &l, "list 0 4;");
        }
        drain_core_listed(c, t, 0, 2, 3);
        drain_core_reserved(c, t, 0, KVMESH_ENOSPC);
        through_copy(c, t, 1);
        drain_core_cas_answer(c, t, 1, r == 1 ? DRAIN_CAS_APPLIED : DRAIN_CAS_REFUSED);
        l.text[0] = '\0';
        drain_core_listed(c, t + 1 * MS, 0, 0, 9);
        drain_core_timer(c, t + 51 * MS);
        drain_core_listed(c, t + 52 * MS, 0, 0, 9);
        assert_int_equal(drain_core_check(c), 0);
        l.text[0] = '\0';
    }
    assert_int_equal(l.n_retries, 1);
    assert_int_equal(l.n_done, 1);
    assert_int_equal(l.done_rc, KVMESH_EUNAVAILABLE);
    assert_non_null(strstr(kvmesh_last_error(), "could not move 2 replicas (1 moved) in 2 rounds"));
    assert_int_equal(drain_core_check(c), 0);
    drain_core_free(c);
    /* no room for a writers period before the deadline: no next round */
    c = new_core(&l, 100);
    drain_core_listed(c, 0, 0, 1, 3);
    drain_core_reserved(c, 0, 0, KVMESH_ENOSPC);
    expect(c, &l, "reserve 0;list 3 4;");
    drain_core_listed(c, 1 * MS, 0, 0, 9);
    drain_core_timer(c, 51 * MS);
    drain_core_listed(c, 52 * MS, 0, 0, 9);
    expect(c, &l, "timer 51;list 9 4;done;");
    assert_int_equal(l.done_rc, KVMESH_EUNAVAILABLE);
    assert_int_equal(l.n_retries, 0);
    drain_core_free(c);
}

static void test_indeterminate_cas(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, 0, 1, 3);
    through_copy(c, 0, 0);
    expect(c, &l, "reserve 0;copy 0;cas 0;");
    drain_core_cas_answer(c, 0, 0, DRAIN_CAS_INDETERMINATE);
    /* may have applied: neither replica is released (the reservation's expiry asks the route) */
    expect(c, &l, "list 3 4;");
    size_t moved, failed;
    drain_core_counts(c, &moved, &failed);
    assert_int_equal(moved, 0);
    assert_int_equal(failed, 1);
    drain_core_free(c);
}

static void test_superseded_cas(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, 0, 1, 3);
    through_copy(c, 0, 0);
    expect(c, &l, "reserve 0;copy 0;cas 0;");
    drain_core_cas_answer(c, 0, 0, DRAIN_CAS_SUPERSEDED);
    expect(c, &l, "release_new 0 superseded;release_old 0;list 3 4;");
    assert_int_equal(drain_core_item_state(c, 0), DITEM_MOVED);
    drain_core_free(c);
}

static void test_failed_reserve_and_copy(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, 0, 3, 5);
    expect(c, &l, "reserve 0;reserve 1;reserve 2;");
    drain_core_reserved(c, 0, 0, KVMESH_ENOSPC); /* nothing reserved: nothing to give back */
    assert_int_equal(drain_core_item_state(c, 0), DITEM_FAILED);
    expect(c, &l, "");
    drain_core_reserved(c, 0, 1, 0);
    drain_core_copied(c, 0, 1, KVMESH_EIO);
    expect(c, &l, "copy 1;release_new 1 copy_failed;");
    assert_int_equal(drain_core_item_state(c, 1), DITEM_FAILED);
    through_copy(c, 0, 2);
    drain_core_cas_answer(c, 0, 2, DRAIN_CAS_APPLIED);
    expect(c, &l, "copy 2;cas 2;commit 2;release_old 2;list 5 4;");
    size_t moved, failed;
    drain_core_counts(c, &moved, &failed);
    assert_int_equal(moved, 1);
    assert_int_equal(failed, 2);
    drain_core_free(c);
}

static void test_close_mid_page(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, 0, 3, 5);
    drain_core_reserved(c, 0, 0, 0);
    through_copy(c, 0, 2);
    expect(c, &l, "reserve 0;reserve 1;reserve 2;copy 0;copy 2;cas 2;");
    drain_core_close(c, 1 * MS);
    assert_int_equal(drain_core_state(c), DRAIN_CLOSING);
    expect(c, &l, ""); /* the items in flight settle first */
    drain_core_copied(c, 2 * MS, 0, 0);
    expect(c, &l, "release_new 0 closed;"); /* no CAS starts after close */
    drain_core_reserved(c, 2 * MS, 1, 0);
    expect(c, &l, "release_new 1 closed;");                 /* no copy starts after close */
    drain_core_cas_answer(c, 3 * MS, 2, DRAIN_CAS_APPLIED); /* a CAS in flight settles as ever */
    expect(c, &l, "commit 2;release_old 2;done;");
    assert_int_equal(drain_core_state(c), DRAIN_DONE);
    assert_int_equal(l.done_rc, KVMESH_ECLOSED);
    size_t moved, failed;
    drain_core_counts(c, &moved, &failed);
    assert_int_equal(moved, 1);
    assert_int_equal(failed, 2);
    drain_core_free(c);
}

static void test_close_while_waiting(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, 0, 0, 0);
    expect(c, &l, "timer 50;");
    drain_core_close(c, 10 * MS);
    expect(c, &l, "done;");
    assert_int_equal(l.done_rc, KVMESH_ECLOSED);
    assert_non_null(strstr(kvmesh_last_error(), "closed during the drain"));
    drain_core_timer(c, 50 * MS); /* the armed timer after close: ignored */
    expect(c, &l, "");
    assert_int_equal(l.n_done, 1);
    drain_core_free(c);
}

static void test_deadline(void **state)
{
    (void)state;
    struct fx_log l;
    /* a page that settles past the deadline: no next listing */
    drain_core_t *c = new_core(&l, 100);
    drain_core_listed(c, 10 * MS, 0, 1, 1);
    through_copy(c, 50 * MS, 0);
    drain_core_cas_answer(c, 101 * MS, 0, DRAIN_CAS_APPLIED);
    expect(c, &l, "reserve 0;copy 0;cas 0;commit 0;release_old 0;done;");
    assert_int_equal(l.done_rc, KVMESH_ETIMEDOUT);
    assert_non_null(strstr(kvmesh_last_error(), "drain did not finish in 100 ms (1 moved)"));
    drain_core_free(c);
    /* the writers period never runs past the deadline (+1 ms); then the drain times out */
    c = new_core(&l, 100);
    drain_core_listed(c, 90 * MS, 0, 0, 0);
    expect(c, &l, "timer 101;");
    drain_core_timer(c, 101 * MS);
    expect(c, &l, "done;");
    assert_int_equal(l.done_rc, KVMESH_ETIMEDOUT);
    drain_core_free(c);
}

static void test_listing_error(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_listed(c, 0, KVMESH_EIO, 0, 0);
    expect(c, &l, "done;");
    assert_int_equal(l.done_rc, KVMESH_EIO); /* the shell's own error, passed on */
    drain_core_free(c);
}

static void test_page_bounds(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = NULL;
    drain_core_cfg_t cfg = {.timeout_ms = 1, .writers_ns = 1, .page = 0};
    assert_int_equal(drain_core_new(&cfg, &fx, &l, &c), KVMESH_EINVAL);
    cfg.page = DRAIN_PAGE_MAX + 1;
    assert_int_equal(drain_core_new(&cfg, &fx, &l, &c), KVMESH_EINVAL);
    assert_null(c);
    cfg.page = DRAIN_PAGE_MAX;
    assert_int_equal(drain_core_new(&cfg, &fx, &l, &c), 0);
    drain_core_free(c);
}

/* The broken variant the simulator must catch: the old replica released before the CAS. */
static void test_bug_release_early(void **state)
{
    (void)state;
    struct fx_log l;
    drain_core_t *c = new_core(&l, 10000);
    drain_core_test_set_bugs(c, DRAIN_BUG_RELEASE_EARLY);
    drain_core_listed(c, 0, 0, 1, 1);
    through_copy(c, 0, 0);
    expect(c, &l, "reserve 0;copy 0;release_old 0;cas 0;");
    drain_core_cas_answer(c, 0, 0, DRAIN_CAS_REFUSED);
    expect(c, &l, "release_new 0 refused;list 1 4;");
    drain_core_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moves_and_empty_passes),  cmocka_unit_test(test_refused_cas),
        cmocka_unit_test(test_indeterminate_cas),       cmocka_unit_test(test_superseded_cas),
        cmocka_unit_test(test_failed_reserve_and_copy), cmocka_unit_test(test_close_mid_page),
        cmocka_unit_test(test_close_while_waiting),     cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_listing_error),           cmocka_unit_test(test_page_bounds),
        cmocka_unit_test(test_bug_release_early),       cmocka_unit_test(test_rounds_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
