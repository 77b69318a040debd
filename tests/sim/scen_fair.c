/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_fair.c — scenario fair_sched: the per-tenant scheduler of remote work
 * (src/tenant/sched.c) driven by a simulated runtime's workload in virtual time.
 *
 * One world, 2..6 tenants with random weights (1..4). Tenant 0 is noisy: it keeps its queue
 * full (unbounded demand, batches of random size within the limits); the others submit batches
 * at random intervals. A dispatched batch completes after a random transfer time (proportional
 * to its bytes, with BUGGIFY stalls); some queued batches are cancelled (a caller's deadline).
 * Limits are drawn per seed; on even seeds the burst cap is large (so that "runnable" means
 * "has queued work"), on odd seeds small (the burst checker bites).
 *
 * Checkers, after every step and at every dispatch:
 *   - ts_check_invariants (queues, totals);
 *   - in-flight bytes <= max_inflight_bytes_per_batch, unless one unit is alone in flight;
 *   - one tenant's in-flight items <= max_remote_batch_burst_items, unless one unit alone;
 *   - every turn within weight x items_per_turn items and weight x batch_bytes bytes (only its
 *     first unit may exceed the bytes: a single large item);
 *   - even seeds (burst cap out of the way, so "runnable" = "has queued work"): a tenant gets
 *     a second turn right after its previous one only when no other tenant has been waiting
 *     with queued work since before it — with the per-turn bound, a backlogged tenant takes at
 *     most one turn's budget while another tenant is runnable;
 *   - liveness: once the workload stops, everything queued is dispatched and completes within
 *     a bounded virtual time; enqueued = dispatched + cancelled, dispatched = completed.
 * Variants (--variant) break the scheduler on purpose and must be caught: noturn (a turn never
 * ends on its budget), nocap (the in-flight cap is ignored), noburst (the burst cap is ignored),
 * norotate (every turn search starts at the first slot).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "sim.h"
#include "tenant/sched.h"

#define FS_TENANTS_MAX 6
#define FS_POOL        512
#define FS_WORK_NS     (2 * SIM_SEC_NS)
#define FS_DRAIN_NS    (20 * SIM_SEC_NS)

typedef struct fs_unit {
    ts_unit_t u;
    int tenant;
    bool used; /* queued or in flight */
} fs_unit_t;

typedef struct fs {
    sim_t *sim;
    ts_t *s;
    ts_limits_t lim;
    bool check_turns;
    uint32_t T;
    char names[FS_TENANTS_MAX][16];
    uint32_t w[FS_TENANTS_MAX];
    uint32_t inflight_units[FS_TENANTS_MAX]; /* our own count, per tenant */
    uint32_t queued[FS_TENANTS_MAX];
    fs_unit_t pool[FS_POOL];
    int last_tenant;                /* tenant of the last dispatch (-1 = none) */
    uint64_t tick, last_tick;       /* event counter; its value at the last dispatch */
    uint64_t since[FS_TENANTS_MAX]; /* tick at which the tenant's queue last became non-empty */
    uint64_t enq, dispatched, completed, canceled;
    bool working;
} fs_t;

static fs_unit_t *unit_alloc(fs_t *f)
{
    for (int i = 0; i < FS_POOL; i++)
        if (!f->pool[i].used)
            return &f->pool[i];
    return NULL;
}

static bool other_has_work(const fs_t *f, int tenant)
{
    for (uint32_t t = 0; t < f->T; t++)
        if ((int)t != tenant && f->queued[t] > 0)
            return true;
    return false;
}

static void complete_cb(void *arg);

static void pump(fs_t *f)
{
    ts_unit_t *x;
    while ((x = ts_next(f->s)) != NULL) {
        fs_unit_t *u = (fs_unit_t *)x;
        int t = u->tenant;
        KVM_ASSERT(f->queued[t] > 0);
        f->tick++;
        f->queued[t]--;
        f->inflight_units[t]++;
        f->dispatched++;
        uint32_t ti = 0;
        uint64_t tb = 0;
        const char *tt = ts_turn_tenant(f->s, &ti, &tb);
        uint64_t bi = (uint64_t)f->w[t] * f->lim.items_per_turn,
                 bb = (uint64_t)f->w[t] * f->lim.batch_bytes;
        /* per turn: within weight x budget (only a turn's first unit may exceed the bytes) */
        if (strcmp(tt, f->names[t]) != 0 || ti > bi || (tb > bb && ti > x->items))
            sim_fail(f->sim,
                     "turn of %s (weight %u) took %u items / %llu bytes (budget %llu items / %llu "
                     "bytes)",
                     f->names[t], f->w[t], ti, (unsigned long long)tb, (unsigned long long)bi,
                     (unsigned long long)bb);
        /* rotation: t starts another turn right after its previous one only when no other
         * tenant has been waiting with queued work since before t's previous dispatch */
        bool first_of_turn = ti == x->items && tb == x->bytes;
        if (f->check_turns && first_of_turn && f->last_tenant == t)
            for (uint32_t o = 0; o < f->T; o++)
                if ((int)o != t && f->queued[o] > 0 && f->since[o] < f->last_tick)
                    sim_fail(f->sim,
                             "tenant %s got two turns in a row while %s waited with queued work "
                             "since before the first",
                             f->names[t], f->names[o]);
        f->last_tenant = t;
        f->last_tick = f->tick;
        sim_log(f->sim,
                "dispatch %s unit %llu: %u items %llu bytes (turn of %s: %u items %llu "
                "bytes; others queued: %d)",
                f->names[t], (unsigned long long)x->seq, x->items, (unsigned long long)x->bytes, tt,
                ti, (unsigned long long)tb, other_has_work(f, t));
        sim_trace_mix(f->sim, &x->seq, sizeof(x->seq));
        uint64_t d = SIM_MSG_NS / 4 + x->bytes * 50; /* ~20 MB/s of virtual transfer */
        if (SIM_BUGGIFY(f->sim, "fair.stall"))
            d *= 20;
        sim_schedule(f->sim, d + sim_rand_range(f->sim, 0, SIM_MSG_NS), complete_cb, u);
    }
}

static fs_t *the_fs; /* the scenario of the running seed (callbacks carry units) */

static void complete_cb(void *arg)
{
    fs_unit_t *u = arg;
    fs_t *f = the_fs;
    KVM_ASSERT(f->inflight_units[u->tenant] > 0);
    f->inflight_units[u->tenant]--;
    ts_complete(f->s, &u->u);
    u->used = false;
    f->completed++;
    pump(f);
}

static void enqueue_one(fs_t *f, int t)
{
    fs_unit_t *u = unit_alloc(f);
    if (!u)
        return;
    memset(u, 0, sizeof(*u));
    u->tenant = t;
    u->u.items = (uint32_t)sim_rand_range(f->sim, 1, f->lim.items_per_turn);
    uint64_t per = f->lim.batch_bytes / u->u.items;
    for (uint32_t i = 0; i < u->u.items; i++)
        u->u.bytes += sim_rand_range(f->sim, 1, per ? per : 1);
    if (u->u.items == 1 && sim_chance(f->sim, 0.02))
        u->u.bytes = f->lim.inflight_bytes + sim_rand_range(f->sim, 1, 4096); /* alone */
    int rc = ts_enqueue(f->s, f->names[t], &u->u);
    if (rc == KVMESH_EAGAIN)
        return; /* queue full: the caller would retry */
    if (rc) {
        sim_fail(f->sim, "ts_enqueue refused a planned unit: %s", kvmesh_last_error());
        return;
    }
    u->used = true;
    f->tick++;
    if (f->queued[t]++ == 0)
        f->since[t] = f->tick;
    f->enq++;
    pump(f);
}

static void cancel_one(fs_t *f, int t)
{
    int start = (int)sim_rand_range(f->sim, 0, FS_POOL - 1);
    for (int k = 0; k < FS_POOL; k++) {
        fs_unit_t *u = &f->pool[(start + k) % FS_POOL];
        if (u->used && u->tenant == t && u->u.state == TS_UNIT_QUEUED) {
            if (ts_cancel(f->s, &u->u) != 0) {
                sim_fail(f->sim, "ts_cancel of a queued unit refused");
                return;
            }
            u->used = false;
            f->queued[t]--;
            f->canceled++;
            pump(f); /* the head may have changed */
            return;
        }
    }
}

struct gen {
    fs_t *f;
    int t;
};
static struct gen gens[FS_TENANTS_MAX];

static void gen_cb(void *arg)
{
    struct gen *g = arg;
    fs_t *f = g->f;
    if (!f->working || sim_failed(f->sim))
        return;
    if (g->t == 0) { /* noisy: keep the queue full */
        for (uint32_t i = 0; i < f->lim.queue_depth && f->queued[0] < f->lim.queue_depth; i++)
            enqueue_one(f, 0);
    } else {
        enqueue_one(f, g->t);
    }
    if (sim_chance(f->sim, 0.05))
        cancel_one(f, g->t);
    uint64_t gap = g->t == 0 ? SIM_MSG_NS / 2 : sim_rand_range(f->sim, 1, 8) * SIM_MSG_NS;
    sim_schedule(f->sim, gap, gen_cb, g);
}

static void stop_cb(void *arg)
{
    ((fs_t *)arg)->working = false;
}

static int fs_invariant(void *ctx, sim_t *sim)
{
    fs_t *f = ctx;
    if (ts_check_invariants(f->s) != 0) {
        sim_fail(sim, "%s", kvmesh_last_error());
        return 1;
    }
    ts_stats_t st;
    ts_get_stats(f->s, &st);
    if (st.inflight_bytes > f->lim.inflight_bytes && st.inflight_units > 1) {
        sim_fail(sim, "%llu bytes in flight in %llu units, above the cap %llu",
                 (unsigned long long)st.inflight_bytes, (unsigned long long)st.inflight_units,
                 (unsigned long long)f->lim.inflight_bytes);
        return 1;
    }
    for (uint32_t t = 0; t < f->T; t++) {
        ts_tenant_view_t v;
        if (ts_tenant(f->s, f->names[t], &v) != 0)
            continue;
        if (v.inflight_items > f->lim.burst_items && f->inflight_units[t] > 1) {
            sim_fail(sim, "tenant %s has %llu items in flight (%u units), above the burst cap %u",
                     f->names[t], (unsigned long long)v.inflight_items, f->inflight_units[t],
                     f->lim.burst_items);
            return 1;
        }
    }
    return 0;
}

static bool all_done(void *ctx)
{
    const fs_t *f = ctx;
    ts_stats_t st;
    ts_get_stats(f->s, &st);
    return st.queued_units == 0 && st.inflight_units == 0;
}

static int fs_run(const sim_run_opts_t *ro, sim_result_t *res)
{
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = 1;
    sim_t *sim = sim_new(&cfg);
    if (!sim)
        return 1;
    fs_t *f = calloc(1, sizeof(*f));
    if (!f) {
        sim_free(sim);
        return 1;
    }
    f->sim = sim;
    f->last_tenant = -1;
    the_fs = f;
    const char *v = ro->variant ? ro->variant : "";
    unsigned bugs = strcmp(v, "noturn") == 0     ? TS_TEST_BUG_NO_TURN_END
                    : strcmp(v, "nocap") == 0    ? TS_TEST_BUG_NO_INFLIGHT
                    : strcmp(v, "noburst") == 0  ? TS_TEST_BUG_NO_BURST
                    : strcmp(v, "norotate") == 0 ? TS_TEST_BUG_NO_ROTATE
                                                 : 0;
    if (v[0] && !bugs)
        sim_fail(sim, "unknown variant '%s' (fair_sched knows noturn, nocap, noburst, norotate)",
                 v);
    f->check_turns = ro->seed % 2 == 0;
    uint32_t items = (uint32_t)sim_rand_range(sim, 1, 16);
    f->lim = (ts_limits_t){
        .items_per_turn = items,
        .batch_bytes = sim_rand_range(sim, 4096, 1 << 20),
        .burst_items =
            f->check_turns ? 100000 : items + (uint32_t)sim_rand_range(sim, 0, 3 * items),
        .inflight_bytes = sim_rand_range(sim, 4096, 4 << 20),
        .queue_depth = (uint32_t)sim_rand_range(sim, 1, 32),
        .test_bugs = bugs,
    };
    if (bugs == TS_TEST_BUG_NO_TURN_END || bugs == TS_TEST_BUG_NO_ROTATE) {
        f->check_turns = true; /* the checkers that catch them */
        f->lim.burst_items = 100000;
    }
    if (bugs == TS_TEST_BUG_NO_BURST)
        f->lim.burst_items = items; /* tight, so that ignoring it shows */
    if (!sim_failed(sim) && ts_new(&f->s, &f->lim) != 0)
        sim_fail(sim, "ts_new: %s", kvmesh_last_error());
    f->T = (uint32_t)sim_rand_range(sim, 2, FS_TENANTS_MAX);
    for (uint32_t t = 0; f->s && t < f->T; t++) {
        snprintf(f->names[t], sizeof(f->names[t]), t == 0 ? "noisy" : "quiet%u", t);
        f->w[t] = (uint32_t)sim_rand_range(sim, 1, 4);
        if (f->w[t] > 1 || sim_chance(sim, 0.5))
            KVM_ASSERT(ts_set_weight(f->s, f->names[t], f->w[t]) == 0);
        gens[t] = (struct gen){f, (int)t};
    }
    sim_log(sim,
            "fair_sched: %u tenants, %u items / %llu bytes per turn, burst %u, in flight %llu, "
            "depth %u, variant '%s'",
            f->T, f->lim.items_per_turn, (unsigned long long)f->lim.batch_bytes, f->lim.burst_items,
            (unsigned long long)f->lim.inflight_bytes, f->lim.queue_depth, v);
    if (f->s && !sim_failed(sim)) {
        sim_set_invariant(sim, fs_invariant, f);
        sim_start(sim);
        f->working = true;
        for (uint32_t t = 0; t < f->T; t++)
            sim_schedule(sim, sim_rand_range(sim, 0, 2 * SIM_MSG_NS), gen_cb, &gens[t]);
        sim_schedule(sim, FS_WORK_NS, stop_cb, f);
        sim_run_until(sim, FS_WORK_NS);
        if (!sim_failed(sim) &&
            sim_run_while_not(sim, all_done, f, FS_WORK_NS + FS_DRAIN_NS) != SIM_REACHED &&
            !sim_failed(sim)) {
            ts_stats_t st;
            ts_get_stats(f->s, &st);
            sim_fail(sim,
                     "liveness: %llu queued and %llu in flight %.0f s after the workload "
                     "stopped",
                     (unsigned long long)st.queued_units, (unsigned long long)st.inflight_units,
                     (double)FS_DRAIN_NS / 1e9);
        }
        if (!sim_failed(sim) &&
            (f->enq != f->dispatched + f->canceled || f->dispatched != f->completed))
            sim_fail(sim,
                     "accounting: %llu enqueued, %llu dispatched, %llu cancelled, %llu "
                     "completed",
                     (unsigned long long)f->enq, (unsigned long long)f->dispatched,
                     (unsigned long long)f->canceled, (unsigned long long)f->completed);
    }
    int rc = sim_finish(sim, res);
    if (f->s) {
        /* a failed run may leave units linked: unlink them before the free asserts */
        for (int i = 0; i < FS_POOL; i++) {
            if (f->pool[i].u.state == TS_UNIT_QUEUED)
                ts_cancel(f->s, &f->pool[i].u);
            else if (f->pool[i].u.state == TS_UNIT_INFLIGHT)
                ts_complete(f->s, &f->pool[i].u);
        }
        ts_free(f->s);
    }
    the_fs = NULL;
    free(f);
    return rc;
}

const sim_scenario_t scen_fair_sched = {
    .name = "fair_sched",
    .description = "per-tenant scheduler of remote work: turns, weights, burst and in-flight caps",
    .run = fs_run,
};
