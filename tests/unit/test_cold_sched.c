/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cold_sched.c — the offload worker's scheduling (src/cold/cold_worker.c; docs/cold.md
 * "Offload scheduling") on a deterministic virtual-clock env defined here, memory:// metadata
 * and the in-memory backend: the byte-rate token bucket (every job start is checked against
 * burst + rate x elapsed virtual time, and the worker is not slower than the bucket allows), the
 * DRAM watermark gate with hysteresis (urgent jobs pass it), the retry backoff (each delay in
 * [cap/2, cap] of the doubling, capped series, measured on the virtual clock), the completion
 * callback of a job, and the refused configurations. No wall-clock timing anywhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold.h"
#include "cold/cold_simbe.h"
#include "core/hash.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "tenv.h"

/* ---- the deterministic env (tests/support/tenv.h) ------------------------------------------ */

/* Runs what is due now, without advancing the clock. */
static void run_now(struct tenv *t)
{
    for (int i = 0; i < 1000000 && tenv_step(t, t->now); i++) {
    }
}

/* ---- fixture: N objects with a PendingOffload route each ----------------------------------- */

#define N_OBJ   32
#define OBJ_LEN (64u << 10)
#define SELF    kvm_id128_from_u64(9, 9)

typedef struct obj {
    kvm_ident_t id;
    cold_route_obs_t r;
    uint8_t *data;
    uint64_t started_ns; /* virtual time of its hot read (the payload write follows at once) */
    bool started;
} obj_t;

typedef struct fx {
    struct tenv te;
    meta_t *meta;
    cold_t *c;
    cold_simbe_t *sb;
    cold_backend_t be;
    cold_device_t dev;
    obj_t o[N_OBJ];
    int fail_lookups; /* the next lookups answer KVMESH_EUNAVAILABLE */
    uint64_t lookup_ns[64];
    int n_lookups;
    int order[N_OBJ]; /* objects in the order their hot reads happened */
    int n_order;
} fx_t;

static kvm_op_id_t opid(uint64_t seq)
{
    return (kvm_op_id_t){.writer = kvm_id128_from_u64(1, 2), .epoch = 3, .seq = seq};
}

static obj_t *obj_of(fx_t *f, const kvm_ident_t *id)
{
    for (int i = 0; i < N_OBJ; i++)
        if (kvm_ident_equal(&f->o[i].id, id))
            return &f->o[i];
    fail_msg("unknown object");
    return NULL;
}

static void rt_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    fx_t *f = ctx;
    if (f->n_lookups < 64)
        f->lookup_ns[f->n_lookups++] = f->te.now;
    if (f->fail_lookups > 0) {
        f->fail_lookups--;
        cb(arg, KVMESH_EUNAVAILABLE, NULL);
        return;
    }
    cb(arg, 0, &obj_of(f, id)->r);
}

static void rt_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *content, void *buf,
                        uint64_t len, cold_rc_cb cb, void *arg)
{
    fx_t *f = ctx;
    obj_t *o = obj_of(f, id);
    assert_true(kvm_op_id_equal(content, &o->r.content_op) && len == OBJ_LEN);
    assert_false(o->started);
    o->started = true;
    o->started_ns = f->te.now;
    f->order[f->n_order++] = (int)(o - f->o);
    memcpy(buf, o->data, len);
    cb(arg, 0);
}

static void rt_materialize(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *exp,
                           const kvm_cold_backing_t *mat, cold_rc_cb cb, void *arg)
{
    obj_t *o = obj_of(ctx, id);
    if (!kvm_route_version_equal(exp, &o->r.version) ||
        o->r.cold.kind != KVM_COLD_PENDING_OFFLOAD) {
        cb(arg, KVMESH_ECONFLICT);
        return;
    }
    o->r.cold = *mat;
    o->r.version.primary_sequence++;
    cb(arg, 0);
}

static void rt_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                     void *arg)
{
    (void)ctx, (void)id, (void)e;
    cb(arg, KVMESH_ECONFLICT);
}

static void fx_open(fx_t *f, const cold_config_t *over)
{
    memset(f, 0, sizeof(*f));
    tenv_init(&f->te, 0x1234567);
    f->te.now = 1000000000ull;
    assert_int_equal(meta_open(&f->meta, &f->te.env, "memory://", NULL), 0);
    cold_route_ops_t ro = {.lookup = rt_lookup,
                           .read_hot = rt_read_hot,
                           .materialize = rt_materialize,
                           .evict = rt_evict,
                           .ctx = f};
    cold_config_t cfg = *over;
    cfg.deployment = "unit";
    cfg.self = SELF;
    cfg.max_buffer = 1 << 20;
    assert_int_equal(cold_new(&f->c, &f->te.env, f->meta, &ro, &cfg), 0);
    f->sb = cold_simbe_new(64 << 20);
    f->be = cold_simbe_backend(f->sb);
    f->dev = (cold_device_t){.id = kvm_id128_from_u64(7, 1),
                             .owner = SELF,
                             .owner_epoch = 1,
                             .kind = COLD_BACKEND_SIM,
                             .lifecycle = COLD_DEV_ACTIVE,
                             .schedulable = true,
                             .capacity = 64 << 20,
                             .health = COLD_DEV_HEALTHY};
    snprintf(f->dev.root, sizeof(f->dev.root), "/sim/dev0");
    assert_int_equal(cold_attach_backend(f->c, &f->dev.id, &f->be), 0);
    for (int i = 0; i < N_OBJ; i++) {
        obj_t *o = &f->o[i];
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(kvm_ident_init(&o->id, "acme", NULL, key, strlen(key)), 0);
        o->data = malloc(OBJ_LEN);
        assert_non_null(o->data);
        for (uint32_t b = 0; b < OBJ_LEN; b++)
            o->data[b] = (uint8_t)(i * 31 + b);
        uint64_t ck = kvm_checksum(o->data, OBJ_LEN);
        o->r.found = true;
        o->r.version.fencing_token = 1;
        o->r.version.primary_sequence = 1;
        o->r.content_op = opid(1000 + (uint64_t)i);
        o->r.n_replicas = 1;
        o->r.replicas[0] = (kvm_hot_replica_t){.owner = SELF,
                                               .segment = 1,
                                               .offset = (uint64_t)i * OBJ_LEN,
                                               .length = OBJ_LEN,
                                               .checksum = ck};
        kvm_op_id_t k = opid(1 + (uint64_t)i);
        kvm_id128_t own = SELF;
        kvm_cold_backing_pending(&o->r.cold, &k, &o->r.content_op, &own, &f->dev.id, OBJ_LEN, ck);
    }
}

static void on_dev(void *arg, int rc, const cold_device_t *d)
{
    (void)d;
    *(int *)arg = rc;
}

static void fx_register(fx_t *f)
{
    int rc = 1;
    assert_int_equal(cold_device_register(f->c, &f->dev, on_dev, &rc), 0);
    run_now(&f->te);
    assert_int_equal(rc, 0);
}

static void fx_close(fx_t *f)
{
    assert_int_equal(cold_check_invariants(f->c), 0);
    cold_close(f->c);
    meta_close(f->meta);
    run_now(&f->te);
    cold_simbe_free(f->sb);
    for (int i = 0; i < N_OBJ; i++) {
        kvm_ident_free(&f->o[i].id);
        free(f->o[i].data);
    }
}

typedef struct done_rec {
    int calls, rc;
} done_rec_t;

static void on_done(void *arg, int rc)
{
    done_rec_t *d = arg;
    d->calls++;
    d->rc = rc;
}

static int submit(fx_t *f, int i, bool urgent, done_rec_t *d)
{
    obj_t *o = &f->o[i];
    cold_job_t j = {.ident = &o->id,
                    .cold_op = o->r.cold.cold_op,
                    .content_op = o->r.content_op,
                    .device = f->dev.id,
                    .length = OBJ_LEN,
                    .checksum = o->r.cold.u.pending.expected_checksum,
                    .urgent = urgent,
                    .done = d ? on_done : NULL,
                    .done_arg = d};
    return cold_offload_submit(f->c, &j);
}

/* Runs every timer until the worker has nothing left (bounded). */
static void drain(fx_t *f)
{
    for (int i = 0; i < 1000000 && (cold_offload_pending(f->c) || f->te.n); i++)
        if (!tenv_step(&f->te, UINT64_MAX))
            break;
    assert_int_equal(cold_offload_pending(f->c), 0);
}

/* Runs every timer (bounded), asserting nothing: queued jobs may stay behind a closed gate. */
static void settle(fx_t *f)
{
    for (int i = 0; i < 1000000 && tenv_step(&f->te, UINT64_MAX); i++) {
    }
}

/* ---- the rate limiter -------------------------------------------------------------------- */

static void test_rate_limit(void **st)
{
    (void)st;
    const uint64_t rate = 1u << 20, burst = 2 * OBJ_LEN; /* 1 MiB/s, two objects of burst */
    cold_config_t cfg = {.rate_bytes_per_sec = rate, .rate_burst_bytes = burst, .max_inflight = 4};
    fx_t f;
    fx_open(&f, &cfg);
    fx_register(&f);
    uint64_t t0 = f.te.now;
    for (int i = 0; i < N_OBJ; i++)
        assert_int_equal(submit(&f, i, false, NULL), 0);
    drain(&f);
    cold_stats_t s;
    cold_get_stats(f.c, &s);
    assert_int_equal(s.offloads_ok, N_OBJ);
    assert_true(s.rate_waits > 0);
    assert_int_equal(f.n_order, N_OBJ);
    /* Bucket bound: the bytes started by the k-th start never exceed burst + rate x elapsed.
     * And the worker does not lag: the k-th start is within 1 ms of the earliest time the
     * bucket allows it (start k needs (k+1) x len - burst bytes of refill). */
    for (int k = 0; k < N_OBJ; k++) {
        uint64_t t = f.o[f.order[k]].started_ns - t0;
        double allowed = (double)burst + (double)rate * (double)t / 1e9;
        double started = (double)(k + 1) * OBJ_LEN;
        assert_true(started <= allowed + 1.0);
        double earliest_ns =
            started > (double)burst ? (started - (double)burst) * 1e9 / (double)rate : 0;
        assert_true((double)t <= earliest_ns + 1e6);
    }
    /* 32 x 64 KiB at 1 MiB/s with 128 KiB of burst: the last starts at 1.875 s */
    uint64_t last = f.o[f.order[N_OBJ - 1]].started_ns - t0;
    assert_true(last >= 1875000000ull && last <= 1876000000ull);
    fx_close(&f);
}

/* Without a rate every job starts at once (the same virtual instant). */
static void test_no_rate(void **st)
{
    (void)st;
    cold_config_t cfg = {.max_inflight = 4};
    fx_t f;
    fx_open(&f, &cfg);
    fx_register(&f);
    uint64_t t0 = f.te.now;
    for (int i = 0; i < 8; i++)
        assert_int_equal(submit(&f, i, false, NULL), 0);
    drain(&f);
    for (int k = 0; k < 8; k++)
        assert_int_equal(f.o[k].started_ns, t0);
    cold_stats_t s;
    cold_get_stats(f.c, &s);
    assert_int_equal(s.rate_waits, 0);
    assert_int_equal(s.offloads_ok, 8);
    fx_close(&f);
}

/* ---- watermarks ---------------------------------------------------------------------------- */

static void test_watermarks(void **st)
{
    (void)st;
    cold_config_t cfg = {.high_watermark = 0.8, .low_watermark = 0.5};
    fx_t f;
    fx_open(&f, &cfg);
    fx_register(&f);
    assert_false(cold_offload_gate_open(f.c)); /* closed until DRAM reaches the high mark */
    for (int i = 0; i < 4; i++)
        assert_int_equal(submit(&f, i, false, NULL), 0);
    settle(&f); /* nothing may start */
    assert_int_equal(f.n_order, 0);
    assert_int_equal(cold_offload_pending(f.c), 0 + 4);
    cold_set_pressure(f.c, 0.7); /* between the marks: stays closed */
    run_now(&f.te);
    assert_int_equal(f.n_order, 0);
    cold_set_pressure(f.c, 0.85); /* at/above high: opens, the queue runs */
    drain(&f);
    assert_int_equal(f.n_order, 4);
    cold_set_pressure(f.c, 0.6); /* between the marks: stays open */
    assert_true(cold_offload_gate_open(f.c));
    assert_int_equal(submit(&f, 4, false, NULL), 0);
    drain(&f);
    assert_int_equal(f.n_order, 5);
    cold_set_pressure(f.c, 0.4); /* below low: closes */
    assert_false(cold_offload_gate_open(f.c));
    assert_int_equal(submit(&f, 5, false, NULL), 0);
    assert_int_equal(submit(&f, 6, false, NULL), 0);
    done_rec_t d = {0};
    assert_int_equal(submit(&f, 7, true, &d), 0); /* urgent: passes the closed gate */
    run_now(&f.te);
    assert_int_equal(f.n_order, 6);
    assert_int_equal(f.order[5], 7);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.rc, 0);
    assert_int_equal(f.o[7].r.cold.kind, KVM_COLD_MATERIALIZED);
    assert_int_equal(cold_offload_pending(f.c), 2);
    cold_set_pressure(f.c, 0.95);
    drain(&f);
    assert_int_equal(f.n_order, 8);
    cold_stats_t s;
    cold_get_stats(f.c, &s);
    assert_int_equal(s.gate_changes, 3);
    assert_int_equal(s.urgent_jobs, 1);
    assert_int_equal(s.offloads_ok, 8);
    fx_close(&f);
}

/* An urgent job queued behind non-urgent ones (in-flight cap 1) starts before them; a second
 * submit of a queued op as urgent moves it ahead and attaches its completion callback. */
static void test_urgent_order(void **st)
{
    (void)st;
    const uint64_t rate = 1u << 20;
    cold_config_t cfg = {
        .rate_bytes_per_sec = rate, .rate_burst_bytes = OBJ_LEN, .max_inflight = 1};
    fx_t f;
    fx_open(&f, &cfg);
    fx_register(&f);
    for (int i = 0; i < 4; i++)
        assert_int_equal(submit(&f, i, false, NULL), 0); /* 0 starts, 1..3 wait for tokens */
    run_now(&f.te);
    assert_int_equal(f.n_order, 1);
    done_rec_t d = {0};
    assert_int_equal(submit(&f, 3, true, &d), 0); /* already queued: moves ahead */
    done_rec_t d2 = {0};
    assert_int_equal(submit(&f, 3, false, &d2), KVMESH_EEXIST); /* one callback per job */
    drain(&f);
    assert_int_equal(f.n_order, 4);
    assert_int_equal(f.order[1], 3);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.rc, 0);
    assert_int_equal(d2.calls, 0);
    fx_close(&f);
}

/* ---- retry backoff --------------------------------------------------------------------------- */

static void test_backoff(void **st)
{
    (void)st;
    cold_config_t cfg = {.backoff_base_ms = 10, .backoff_max_ms = 80};
    fx_t f;
    fx_open(&f, &cfg);
    fx_register(&f);
    const uint64_t want_caps[] = {10, 20, 40, 80, 80, 80};
    for (uint32_t r = 1; r <= 6; r++)
        assert_int_equal(cold_backoff_ms(&cfg, r), want_caps[r - 1]);
    f.fail_lookups = 6; /* the first six lookups fail: six retries */
    done_rec_t d = {0};
    assert_int_equal(submit(&f, 0, false, &d), 0);
    drain(&f);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.rc, 0);
    assert_true(f.n_lookups >= 7);
    /* gap k (between lookup k-1 and k) is the k-th delay: in [cap/2, cap] of the series */
    for (int k = 1; k <= 6; k++) {
        uint64_t gap = f.lookup_ns[k] - f.lookup_ns[k - 1];
        uint64_t cap = want_caps[k - 1] * 1000000ull;
        assert_true(gap >= cap / 2 && gap <= cap);
    }
    cold_stats_t s;
    cold_get_stats(f.c, &s);
    assert_int_equal(s.offload_retries, 6);
    assert_int_equal(s.offloads_ok, 1);
    fx_close(&f);
}

/* ---- configuration refused ------------------------------------------------------------------- */

static void test_bad_config(void **st)
{
    (void)st;
    static struct tenv te;
    tenv_init(&te, 0);
    meta_t *m = NULL;
    assert_int_equal(meta_open(&m, &te.env, "memory://", NULL), 0);
    cold_route_ops_t ro = {.lookup = rt_lookup,
                           .read_hot = rt_read_hot,
                           .materialize = rt_materialize,
                           .evict = rt_evict};
    const cold_config_t bad[] = {
        {.high_watermark = 0.5, .low_watermark = 0.5},
        {.high_watermark = 1.5},
        {.low_watermark = -0.1},
        {.backoff_base_ms = 200, .backoff_max_ms = 100},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cold_config_t c = bad[i];
        c.deployment = "unit";
        c.self = SELF;
        cold_t *h = NULL;
        assert_int_equal(cold_new(&h, &te.env, m, &ro, &c), KVMESH_ECONFIG);
        assert_null(h);
    }
    meta_close(m);
    run_now(&te);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_limit), cmocka_unit_test(test_no_rate),
        cmocka_unit_test(test_watermarks), cmocka_unit_test(test_urgent_order),
        cmocka_unit_test(test_backoff),    cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
