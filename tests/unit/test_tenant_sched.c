/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tenant_sched.c — the per-tenant scheduler for remote work (src/tenant/sched.c), driven
 * deterministically (a fixed-seed generator, no clock):
 *   - a continuously backlogged tenant never takes more than its per-turn item and byte budget
 *     while another tenant is runnable (random arrivals of the other tenants, random sizes);
 *   - weights are honoured within 5% over 10,000 turns (items, and bytes);
 *   - every limit at, just below and just above its boundary: items per batch and per turn,
 *     bytes per batch and per turn, burst items in flight, in-flight bytes, queue depth;
 *   - planning splits at the same boundaries; in-flight accounting is released only by
 *     completion; cancel only removes queued units; invariants hold after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"
#include "tenant/sched.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static ts_limits_t lim_base(void)
{
    return (ts_limits_t){.items_per_turn = 8,
                         .batch_bytes = 1000,
                         .burst_items = 16,
                         .inflight_bytes = 5000,
                         .queue_depth = 32};
}

static ts_t *mk(const ts_limits_t *l)
{
    ts_t *s = NULL;
    assert_int_equal(ts_new(&s, l), 0);
    return s;
}

static void check(const ts_t *s)
{
    assert_int_equal(ts_check_invariants(s), 0);
}

static void test_validate(void **state)
{
    (void)state;
    ts_limits_t l = lim_base();
    assert_int_equal(ts_limits_validate(&l), 0);
    l.items_per_turn = 0;
    assert_int_equal(ts_limits_validate(&l), KVMESH_EINVAL);
    l = lim_base();
    l.burst_items = l.items_per_turn; /* at */
    assert_int_equal(ts_limits_validate(&l), 0);
    l.burst_items = l.items_per_turn - 1; /* just below */
    assert_int_equal(ts_limits_validate(&l), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "max_remote_batch_burst_items"));
    l = lim_base();
    l.batch_bytes = 0;
    assert_int_equal(ts_limits_validate(&l), KVMESH_EINVAL);
    l = lim_base();
    l.inflight_bytes = 0;
    assert_int_equal(ts_limits_validate(&l), KVMESH_EINVAL);
    l = lim_base();
    l.queue_depth = TS_QUEUE_MAX + 1;
    assert_int_equal(ts_limits_validate(&l), KVMESH_EINVAL);
    ts_limits_t lb = lim_base();
    ts_t *s = mk(&lb);
    assert_int_equal(ts_set_weight(s, "a", 0), KVMESH_EINVAL);
    assert_int_equal(ts_set_weight(s, "a", TS_MAX_WEIGHT + 1), KVMESH_EINVAL);
    assert_int_equal(ts_set_weight(s, "a", TS_MAX_WEIGHT), 0);
    ts_free(s);
}

/* Planning: items per batch and bytes per batch at, below and above the limits. */
static void test_plan(void **state)
{
    (void)state;
    ts_limits_t l = lim_base(); /* 8 items, 1000 bytes */
    uint64_t lens[40];
    size_t ends[40], nb = 0;
    for (int i = 0; i < 40; i++)
        lens[i] = 10;
    /* items: 7 (below), 8 (at), 9 (above) */
    assert_int_equal(ts_plan(&l, lens, 7, ends, 40, &nb), 0);
    assert_int_equal(nb, 1);
    assert_int_equal(ends[0], 7);
    assert_int_equal(ts_plan(&l, lens, 8, ends, 40, &nb), 0);
    assert_int_equal(nb, 1);
    assert_int_equal(ts_plan(&l, lens, 9, ends, 40, &nb), 0);
    assert_int_equal(nb, 2);
    assert_int_equal(ends[0], 8);
    assert_int_equal(ends[1], 9);
    /* bytes: two items summing to 999 (below), 1000 (at), 1001 (above) */
    uint64_t b[2] = {500, 499};
    assert_int_equal(ts_plan(&l, b, 2, ends, 40, &nb), 0);
    assert_int_equal(nb, 1);
    b[1] = 500;
    assert_int_equal(ts_plan(&l, b, 2, ends, 40, &nb), 0);
    assert_int_equal(nb, 1);
    b[1] = 501;
    assert_int_equal(ts_plan(&l, b, 2, ends, 40, &nb), 0);
    assert_int_equal(nb, 2);
    /* an item above batch_bytes travels alone */
    uint64_t c[3] = {10, 5000, 10};
    assert_int_equal(ts_plan(&l, c, 3, ends, 40, &nb), 0);
    assert_int_equal(nb, 3);
    assert_int_equal(ends[0], 1);
    assert_int_equal(ends[1], 2);
    assert_int_equal(ends[2], 3);
    /* every planned batch is accepted by ts_enqueue */
    ts_t *s = mk(&l);
    for (int i = 0; i < 40; i++)
        lens[i] = 1 + rnd(400);
    assert_int_equal(ts_plan(&l, lens, 40, ends, 40, &nb), 0);
    ts_unit_t u[40];
    memset(u, 0, sizeof(u));
    size_t start = 0;
    for (size_t k = 0; k < nb; k++) {
        u[k].items = (uint32_t)(ends[k] - start);
        for (size_t i = start; i < ends[k]; i++)
            u[k].bytes += lens[i];
        assert_true(u[k].items <= 8 && u[k].bytes <= 1000);
        assert_int_equal(ts_enqueue(s, "t", &u[k]), 0);
        start = ends[k];
    }
    assert_int_equal(start, 40);
    ts_unit_t *x;
    while ((x = ts_next(s)) != NULL)
        ts_complete(s, x);
    check(s);
    /* cap too small */
    assert_int_equal(ts_plan(&l, lens, 40, ends, 1, &nb), KVMESH_ERANGE);
    ts_free(s);
}

/* Submission boundary: ts_enqueue refuses what planning would not produce, and a full queue. */
static void test_enqueue_limits(void **state)
{
    (void)state;
    ts_limits_t l = lim_base();
    l.queue_depth = 4;
    ts_t *s = mk(&l);
    ts_unit_t u[8];
    memset(u, 0, sizeof(u));
    u[0].items = 8; /* at */
    u[0].bytes = 1000;
    assert_int_equal(ts_enqueue(s, "a", &u[0]), 0);
    u[1].items = 9; /* above */
    assert_int_equal(ts_enqueue(s, "a", &u[1]), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "max_remote_batch_items_per_tenant"));
    u[1].items = 2;
    u[1].bytes = 1001; /* several items above batch_bytes */
    assert_int_equal(ts_enqueue(s, "a", &u[1]), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "max_remote_batch_bytes"));
    u[1].items = 1; /* a single item may exceed it */
    assert_int_equal(ts_enqueue(s, "a", &u[1]), 0);
    u[2].items = 0;
    assert_int_equal(ts_enqueue(s, "a", &u[2]), KVMESH_EINVAL);
    u[2].items = 7; /* below */
    u[2].bytes = 999;
    assert_int_equal(ts_enqueue(s, "a", &u[2]), 0);
    /* queue depth 4: the 4th is at the limit, the 5th above */
    u[3].items = 1;
    assert_int_equal(ts_enqueue(s, "a", &u[3]), 0);
    u[4].items = 1;
    assert_int_equal(ts_enqueue(s, "a", &u[4]), KVMESH_EAGAIN);
    assert_non_null(strstr(kvmesh_last_error(), "queue is full"));
    assert_int_equal(ts_enqueue(s, "b", &u[4]), 0); /* another tenant's queue is its own */
    ts_stats_t st;
    ts_get_stats(s, &st);
    assert_int_equal(st.refused_limit, 3);
    assert_int_equal(st.refused_full, 1);
    assert_int_equal(st.queued_units, 5);
    check(s);
    ts_unit_t *x;
    while ((x = ts_next(s)) != NULL)
        ts_complete(s, x);
    ts_free(s);
}

/* Per-turn item and byte budgets at, below and above the boundary (two backlogged tenants). */
static void test_turn_budget_boundaries(void **state)
{
    (void)state;
    ts_limits_t l = lim_base(); /* 8 items, 1000 bytes per turn (weight 1) */
    l.burst_items = 64;
    l.inflight_bytes = 1u << 30;
    for (int mode = 0; mode < 3; mode++) {
        /* items: units of 1 item; a turn of "a" takes exactly 8 (at) of 9 queued (above): the
         * 9th waits for b's turn. bytes: units of 250: 4 fit (1000 = at), 5th (1250) does not;
         * units of 249: 4 fit (996, below) and the 5th would exceed. */
        uint64_t ub = mode == 0 ? 1 : mode == 1 ? 250 : 249;
        uint32_t want = mode == 0 ? 8 : 4;
        ts_t *s = mk(&l);
        ts_unit_t a[9], b[1];
        memset(a, 0, sizeof(a));
        memset(b, 0, sizeof(b));
        for (int i = 0; i < 9; i++) {
            a[i].items = 1;
            a[i].bytes = ub;
            assert_int_equal(ts_enqueue(s, "a", &a[i]), 0);
        }
        b[0].items = 1;
        b[0].bytes = 1;
        assert_int_equal(ts_enqueue(s, "b", &b[0]), 0);
        uint32_t n = 0;
        ts_unit_t *x;
        while ((x = ts_next(s)) != NULL && x != &b[0]) {
            n++;
            ts_complete(s, x);
            check(s);
        }
        assert_ptr_equal(x, &b[0]);
        assert_int_equal(n, want);
        ts_complete(s, x);
        while ((x = ts_next(s)) != NULL)
            ts_complete(s, x);
        check(s);
        ts_free(s);
    }
}

/* One continuously backlogged tenant against others that arrive and leave at random: while any
 * other tenant is runnable, the backlogged one never takes more than one turn's budget in a
 * row, in items and in bytes. */
static void test_backlogged_tenant_bounded(void **state)
{
    (void)state;
    ts_limits_t l = lim_base();
    l.burst_items = 1000;
    l.inflight_bytes = 1ull << 40;
    l.queue_depth = 64;
    ts_t *s = mk(&l);
    assert_int_equal(ts_set_weight(s, "noisy", 3), 0);
    const uint64_t budget_items = 3 * 8, budget_bytes = 3 * 1000;
    enum { N = 256 };
    static ts_unit_t pool[N];
    memset(pool, 0, sizeof(pool));
    const char *names[4] = {"noisy", "q1", "q2", "q3"};
    uint64_t run_items = 0, run_bytes = 0, max_run_items = 0, max_run_bytes = 0;
    uint64_t quiet_served = 0;
    for (int step = 0; step < 50000; step++) {
        /* keep noisy backlogged; the quiet tenants arrive at random */
        for (int k = 0; k < N; k++) {
            if (pool[k].state != TS_UNIT_IDLE)
                continue;
            int who = k < N / 2 ? 0 : 1 + (k % 3);
            if (who != 0 && rnd(8) != 0)
                continue;
            uint32_t items = 1 + rnd(8);
            uint64_t bytes = 0;
            for (uint32_t i = 0; i < items; i++)
                bytes += 1 + rnd(1000 / items);
            pool[k].items = items;
            pool[k].bytes = bytes;
            pool[k].user = (void *)(uintptr_t)who;
            int rc = ts_enqueue(s, names[who], &pool[k]);
            assert_true(rc == 0 || rc == KVMESH_EAGAIN);
        }
        bool other_runnable = false;
        for (int w = 1; w < 4; w++) {
            ts_tenant_view_t v;
            if (ts_tenant(s, names[w], &v) == 0 && v.queued_units > 0)
                other_runnable = true;
        }
        ts_unit_t *x = ts_next(s);
        assert_non_null(x); /* noisy is always backlogged */
        uint32_t t_items = 0;
        uint64_t t_bytes = 0;
        const char *turn = ts_turn_tenant(s, &t_items, &t_bytes);
        assert_string_equal(turn, names[(uintptr_t)x->user]);
        assert_true(t_items <= budget_items); /* every turn, with or without competition */
        assert_true(t_bytes <= budget_bytes);
        if ((uintptr_t)x->user == 0) {
            /* items taken in a row while another tenant was runnable: a grant made while noisy
             * was alone starts the run afresh (rotation gave it the turn legitimately) */
            run_items = other_runnable ? run_items + x->items : x->items;
            run_bytes = other_runnable ? run_bytes + x->bytes : x->bytes;
            if (other_runnable) {
                if (run_items > max_run_items)
                    max_run_items = run_items;
                if (run_bytes > max_run_bytes)
                    max_run_bytes = run_bytes;
                assert_true(run_items <= budget_items);
                assert_true(run_bytes <= budget_bytes);
            }
        } else {
            run_items = run_bytes = 0;
            quiet_served++;
        }
        ts_complete(s, x);
        if (step % 97 == 0)
            check(s);
    }
    assert_true(quiet_served > 1000);
    assert_true(max_run_items > 0 && max_run_items <= budget_items);
    assert_true(max_run_bytes <= budget_bytes);
    for (int k = 0; k < N; k++)
        if (pool[k].state == TS_UNIT_QUEUED)
            assert_int_equal(ts_cancel(s, &pool[k]), 0);
    check(s);
    ts_free(s);
}

/* Weights 1, 2, 5 (and unconfigured = 1): every tenant backlogged with equal units; over 10,000
 * turns each one's share of items and bytes is within 5% of weight / sum of weights. */
static void run_weights(uint32_t unit_items, uint64_t unit_bytes)
{
    ts_limits_t l = lim_base();
    l.burst_items = 1000;
    l.inflight_bytes = 1ull << 40;
    l.queue_depth = 64;
    ts_t *s = mk(&l);
    const char *names[4] = {"w1", "w2", "w5", "plain"};
    const uint32_t w[4] = {1, 2, 5, 1};
    for (int i = 0; i < 3; i++)
        assert_int_equal(ts_set_weight(s, names[i], w[i]), 0);
    enum { PER = 48 };
    static ts_unit_t pool[4][PER];
    memset(pool, 0, sizeof(pool));
    uint64_t items[4] = {0}, bytes[4] = {0};
    ts_stats_t st;
    ts_get_stats(s, &st);
    while (st.turns < 10000) {
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < PER; k++)
                if (pool[t][k].state == TS_UNIT_IDLE) {
                    pool[t][k].items = unit_items;
                    pool[t][k].bytes = unit_bytes;
                    pool[t][k].user = (void *)(uintptr_t)t;
                    assert_int_equal(ts_enqueue(s, names[t], &pool[t][k]), 0);
                }
        ts_unit_t *x = ts_next(s);
        assert_non_null(x);
        items[(uintptr_t)x->user] += x->items;
        bytes[(uintptr_t)x->user] += x->bytes;
        ts_complete(s, x);
        ts_get_stats(s, &st);
    }
    uint64_t ti = 0, tb = 0;
    for (int t = 0; t < 4; t++) {
        ti += items[t];
        tb += bytes[t];
    }
    for (int t = 0; t < 4; t++) {
        double want = w[t] / 9.0;
        double got_i = (double)items[t] / (double)ti, got_b = (double)bytes[t] / (double)tb;
        print_message("  unit %u items/%llu bytes: %-5s weight %u: %.4f of items (want %.4f)\n",
                      unit_items, (unsigned long long)unit_bytes, names[t], w[t], got_i, want);
        assert_true(got_i > want * 0.95 && got_i < want * 1.05);
        assert_true(got_b > want * 0.95 && got_b < want * 1.05);
    }
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < PER; k++)
            if (pool[t][k].state == TS_UNIT_QUEUED)
                assert_int_equal(ts_cancel(s, &pool[t][k]), 0);
    check(s);
    ts_free(s);
}

static void test_weights(void **state)
{
    (void)state;
    run_weights(1, 10);  /* the item budget binds */
    run_weights(4, 100); /* several items per unit */
    run_weights(1, 250); /* the byte budget binds (4 units of 250 = 1000 per weight) */
}

/* Burst: items of one tenant in flight at once; at the cap the tenant is not runnable and the
 * others go on. */
static void test_burst(void **state)
{
    (void)state;
    ts_limits_t l = lim_base();
    l.items_per_turn = 4;
    l.burst_items = 6;
    l.inflight_bytes = 1ull << 30;
    ts_t *s = mk(&l);
    ts_unit_t a[10], b[2];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    for (int i = 0; i < 10; i++) {
        a[i].items = 1;
        a[i].bytes = 1;
        assert_int_equal(ts_enqueue(s, "a", &a[i]), 0);
    }
    /* turn 1 of a: 4 items (its turn budget); turn 2 (a alone): 5 (below), 6 (at); 7 (above)
     * refused by the burst cap */
    ts_unit_t *got[10];
    int n = 0;
    ts_unit_t *x;
    while ((x = ts_next(s)) != NULL)
        got[n++] = x;
    assert_int_equal(n, 6);
    ts_tenant_view_t v;
    assert_int_equal(ts_tenant(s, "a", &v), 0);
    assert_int_equal(v.inflight_items, 6);
    assert_int_equal(v.queued_units, 4);
    ts_stats_t pst;
    ts_get_stats(s, &pst);
    assert_int_equal(pst.peak_tenant_inflight_items, 6);
    /* another tenant is not held back by a's burst cap */
    b[0].items = 1;
    b[0].bytes = 1;
    assert_int_equal(ts_enqueue(s, "b", &b[0]), 0);
    assert_ptr_equal(ts_next(s), &b[0]);
    assert_null(ts_next(s));
    /* one completion of a frees one item of its burst */
    ts_complete(s, got[0]);
    x = ts_next(s);
    assert_ptr_equal(x, &a[6]);
    assert_null(ts_next(s));
    ts_complete(s, x);
    ts_complete(s, &b[0]);
    for (int i = 1; i < 6; i++)
        ts_complete(s, got[i]);
    while ((x = ts_next(s)) != NULL)
        ts_complete(s, x);
    check(s);
    ts_stats_t st;
    ts_get_stats(s, &st);
    assert_int_equal(st.inflight_items, 0);
    assert_int_equal(st.completed, 11);
    ts_free(s);
}

/* In-flight bytes across tenants: at the cap dispatch goes on, one byte above it waits for a
 * completion, and the blocked unit is not overtaken by another tenant's smaller unit. */
static void test_inflight(void **state)
{
    (void)state;
    ts_limits_t l = lim_base(); /* inflight 5000 */
    l.batch_bytes = 5000;
    l.burst_items = 64;
    ts_t *s = mk(&l);
    ts_unit_t a[4], b[1];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    uint64_t sizes[4] = {2000, 2999, 1, 1}; /* 4999 (below), 5000 (at), 5001 (above) */
    for (int i = 0; i < 4; i++) {
        a[i].items = 1;
        a[i].bytes = sizes[i];
        assert_int_equal(ts_enqueue(s, "a", &a[i]), 0);
    }
    assert_ptr_equal(ts_next(s), &a[0]);
    assert_ptr_equal(ts_next(s), &a[1]); /* 4999 */
    assert_ptr_equal(ts_next(s), &a[2]); /* 5000: at the cap */
    assert_null(ts_next(s));             /* 5001: above */
    b[0].items = 1;
    b[0].bytes = 0;
    assert_int_equal(ts_enqueue(s, "b", &b[0]), 0);
    assert_null(ts_next(s)); /* a's turn is blocked; b does not overtake */
    ts_stats_t st;
    ts_get_stats(s, &st);
    assert_int_equal(st.inflight_bytes, 5000);
    assert_true(st.blocked_inflight >= 2);
    assert_int_equal(st.peak_inflight_bytes, 5000);
    ts_complete(s, &a[2]);
    assert_ptr_equal(ts_next(s), &a[3]);
    ts_complete(s, &a[0]);
    ts_complete(s, &a[1]);
    ts_complete(s, &a[3]);
    assert_ptr_equal(ts_next(s), &b[0]);
    ts_complete(s, &b[0]);
    /* a single unit above the cap goes alone when nothing else is in flight */
    ts_unit_t big = {.items = 1, .bytes = 6000}, small = {.items = 1, .bytes = 1};
    assert_int_equal(ts_enqueue(s, "a", &big), 0);
    assert_int_equal(ts_enqueue(s, "a", &small), 0);
    assert_ptr_equal(ts_next(s), &big);
    assert_null(ts_next(s));
    ts_complete(s, &big);
    assert_ptr_equal(ts_next(s), &small);
    ts_complete(s, &small);
    ts_get_stats(s, &st);
    assert_int_equal(st.inflight_bytes, 0);
    assert_int_equal(st.inflight_units, 0);
    check(s);
    ts_free(s);
}

static void test_cancel_and_slots(void **state)
{
    (void)state;
    ts_limits_t l = lim_base();
    ts_t *s = mk(&l);
    ts_unit_t u[3];
    memset(u, 0, sizeof(u));
    for (int i = 0; i < 3; i++) {
        u[i].items = 1;
        u[i].bytes = 1;
        assert_int_equal(ts_enqueue(s, "a", &u[i]), 0);
    }
    assert_int_equal(ts_cancel(s, &u[1]), 0); /* the middle one */
    check(s);
    assert_ptr_equal(ts_next(s), &u[0]);
    assert_int_equal(ts_cancel(s, &u[0]), KVMESH_EINVAL); /* in flight: not cancelable */
    assert_int_equal(ts_cancel(s, &u[2]), 0);             /* the tail */
    check(s);
    assert_null(ts_next(s));
    ts_complete(s, &u[0]);
    assert_int_equal(ts_cancel(s, &u[0]), KVMESH_EINVAL); /* idle */
    /* more tenants than slots: the rest share the overflow slot; idle slots are recycled */
    enum { M = TS_MAX_TENANTS + 3 };
    static ts_unit_t v[M];
    memset(v, 0, sizeof(v));
    char name[16];
    for (int i = 0; i < M; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        v[i].items = 1;
        v[i].bytes = 1;
        assert_int_equal(ts_enqueue(s, name, &v[i]), 0);
    }
    ts_stats_t st;
    ts_get_stats(s, &st);
    assert_true(st.overflow >= 3);
    ts_tenant_view_t tv;
    assert_int_equal(ts_tenant(s, TS_OVERFLOW_NAME, &tv), 0);
    assert_true(tv.queued_units >= 3);
    check(s);
    ts_unit_t *x;
    int n = 0;
    while ((x = ts_next(s)) != NULL) {
        ts_complete(s, x);
        n++;
    }
    assert_int_equal(n, M);
    /* now every slot is idle: a new tenant gets a slot of its own */
    ts_unit_t w = {.items = 1, .bytes = 1};
    assert_int_equal(ts_enqueue(s, "newcomer", &w), 0);
    assert_int_equal(ts_tenant(s, "newcomer", &tv), 0);
    assert_int_equal(tv.queued_units, 1);
    assert_ptr_equal(ts_next(s), &w);
    ts_complete(s, &w);
    check(s);
    ts_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_enqueue_limits),
        cmocka_unit_test(test_turn_budget_boundaries),
        cmocka_unit_test(test_backlogged_tenant_bounded),
        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_inflight),
        cmocka_unit_test(test_cancel_and_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
