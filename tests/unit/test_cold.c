/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cold.c — the cold tier core (src/cold): the op and reclaim state machines (every legal
 * edge, illegal edges refused, idempotent repeats), device accounting (reserve/commit/release,
 * capacity, underflow refused), the record codecs, and the engine on a memory:// metadata store
 * with a test route table: offload end to end, last-hot eviction, restore with verification and
 * singleflight, reclaim handoff, reconciliation from the due index.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "cold/cold.h"
#include "cold/cold_simbe.h"
#include "core/hash.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"

/* ---- pure parts --------------------------------------------------------------------------- */

static const enum cold_op_state ALL[] = {COLD_OP_NONE,
                                         COLD_OP_PLANNED,
                                         COLD_OP_RESERVED,
                                         COLD_OP_PAYLOAD_WRITTEN,
                                         COLD_OP_ROUTE_COMMITTED,
                                         COLD_OP_USAGE_COMMITTED,
                                         COLD_OP_RECLAIMING,
                                         COLD_OP_RELEASED};

static void test_op_edges(void **st)
{
    (void)st;
    /* the diagram of cold.h, as (from, to) pairs; nothing else is legal */
    static const int legal[][2] = {
        {COLD_OP_NONE, COLD_OP_PLANNED},
        {COLD_OP_PLANNED, COLD_OP_RESERVED},
        {COLD_OP_PLANNED, COLD_OP_RELEASED},
        {COLD_OP_RESERVED, COLD_OP_PAYLOAD_WRITTEN},
        {COLD_OP_RESERVED, COLD_OP_RELEASED},
        {COLD_OP_PAYLOAD_WRITTEN, COLD_OP_ROUTE_COMMITTED},
        {COLD_OP_PAYLOAD_WRITTEN, COLD_OP_RECLAIMING},
        {COLD_OP_ROUTE_COMMITTED, COLD_OP_USAGE_COMMITTED},
        {COLD_OP_ROUTE_COMMITTED, COLD_OP_RELEASED},
        {COLD_OP_USAGE_COMMITTED, COLD_OP_RELEASED},
        {COLD_OP_RECLAIMING, COLD_OP_RELEASED},
    };
    int n_legal = 0;
    for (size_t a = 0; a < sizeof(ALL) / sizeof(ALL[0]); a++)
        for (size_t b = 0; b < sizeof(ALL) / sizeof(ALL[0]); b++) {
            bool want = false;
            for (size_t i = 0; i < sizeof(legal) / sizeof(legal[0]); i++)
                if (legal[i][0] == (int)ALL[a] && legal[i][1] == (int)ALL[b])
                    want = true;
            assert_int_equal(cold_op_transition_ok(ALL[a], ALL[b]), want);
            n_legal += want;
            if (want && ALL[a] != COLD_OP_NONE) {
                cold_op_t op = {.state = ALL[a]};
                cold_op_set_state(&op, ALL[b]);
                assert_int_equal(op.state, ALL[b]);
                if (ALL[b] == COLD_OP_RELEASED)
                    assert_int_equal(op.released_from, ALL[a]);
            }
        }
    assert_int_equal(n_legal, 11);
    assert_int_equal(cold_op_state_holds(COLD_OP_RESERVED), 'r');
    assert_int_equal(cold_op_state_holds(COLD_OP_RECLAIMING), 'r');
    assert_int_equal(cold_op_state_holds(COLD_OP_USAGE_COMMITTED), 'u');
    assert_int_equal(cold_op_state_holds(COLD_OP_PLANNED), 0);
    assert_int_equal(cold_op_state_holds(COLD_OP_RELEASED), 0);
    assert_string_equal(cold_op_state_name(COLD_OP_PAYLOAD_WRITTEN), "payload-written");
}

static cold_device_t mkdev(uint64_t cap)
{
    cold_device_t d = {0};
    d.id = kvm_id128_from_u64(7, 1);
    d.owner = kvm_id128_from_u64(9, 9);
    d.owner_epoch = 1;
    d.kind = COLD_BACKEND_SIM;
    snprintf(d.root, sizeof(d.root), "/sim/dev0");
    d.lifecycle = COLD_DEV_ACTIVE;
    d.schedulable = true;
    d.capacity = cap;
    d.health = COLD_DEV_HEALTHY;
    snprintf(d.tags, sizeof(d.tags), "ssd,test");
    return d;
}

static void test_device_accounting(void **st)
{
    (void)st;
    cold_device_t d = mkdev(100);
    assert_true(cold_device_fits(&d, 100));
    assert_false(cold_device_fits(&d, 101));
    assert_int_equal(cold_device_account(&d, COLD_OP_PLANNED, COLD_OP_RESERVED, 60), 0);
    assert_int_equal(d.reserved, 60);
    assert_false(cold_device_fits(&d, 41));
    assert_int_equal(cold_device_account(&d, COLD_OP_PLANNED, COLD_OP_RESERVED, 41), KVMESH_ENOSPC);
    assert_int_equal(d.reserved, 60); /* unchanged on refusal */
    /* states that hold the same bytes move nothing */
    assert_int_equal(cold_device_account(&d, COLD_OP_RESERVED, COLD_OP_PAYLOAD_WRITTEN, 60), 0);
    assert_int_equal(cold_device_account(&d, COLD_OP_PAYLOAD_WRITTEN, COLD_OP_ROUTE_COMMITTED, 60),
                     0);
    assert_int_equal(d.reserved, 60);
    assert_int_equal(cold_device_account(&d, COLD_OP_ROUTE_COMMITTED, COLD_OP_USAGE_COMMITTED, 60),
                     0);
    assert_int_equal(d.reserved, 0);
    assert_int_equal(d.used, 60);
    assert_int_equal(d.n_used, 1);
    assert_int_equal(cold_device_check(&d), 0);
    /* release more than is used: refused, nothing changes */
    assert_int_equal(cold_device_account(&d, COLD_OP_USAGE_COMMITTED, COLD_OP_RELEASED, 61),
                     KVMESH_ECORRUPT);
    assert_int_equal(d.used, 60);
    assert_int_equal(cold_device_account(&d, COLD_OP_USAGE_COMMITTED, COLD_OP_RELEASED, 60), 0);
    assert_int_equal(d.used, 0);
    assert_int_equal(cold_device_account(&d, COLD_OP_USAGE_COMMITTED, COLD_OP_RELEASED, 0),
                     KVMESH_ECORRUPT); /* no op holds used bytes any more */
    assert_int_equal(cold_device_account(&d, COLD_OP_RECLAIMING, COLD_OP_RELEASED, 1),
                     KVMESH_ECORRUPT);
    /* placement eligibility */
    d.health = COLD_DEV_DEGRADED;
    assert_false(cold_device_fits(&d, 1));
    assert_true(cold_device_readable(&d));
    d.health = COLD_DEV_FAILED;
    assert_false(cold_device_readable(&d));
    d.health = COLD_DEV_HEALTHY;
    d.schedulable = false;
    assert_false(cold_device_fits(&d, 1));
    d.schedulable = true;
    d.lifecycle = COLD_DEV_DRAINING;
    assert_false(cold_device_fits(&d, 1));
}

static kvm_op_id_t opid(uint64_t seq)
{
    return (kvm_op_id_t){.writer = kvm_id128_from_u64(1, 2), .epoch = 3, .seq = seq};
}

static cold_op_t mkop(void)
{
    cold_op_t o = {0};
    o.id = opid(10);
    o.content_op = opid(11);
    o.device = kvm_id128_from_u64(7, 1);
    o.owner = kvm_id128_from_u64(9, 9);
    o.state = COLD_OP_PAYLOAD_WRITTEN;
    o.length = 1234;
    o.checksum = 99;
    o.loc.len = 5;
    memcpy(o.loc.b, "abcde", 5);
    o.payload_fp = 77;
    o.deadline_ms = 1000;
    o.ident_len = 4;
    memcpy(o.ident, "\x01\x02\x03\x04", 4);
    return o;
}

static void test_codecs(void **st)
{
    (void)st;
    uint8_t buf[COLD_RECLAIM_ENC_MAX];
    size_t n = 0;
    cold_op_t o = mkop(), o2;
    assert_int_equal(cold_op_encode(&o, buf, sizeof(buf), &n), 0);
    assert_int_equal(cold_op_decode(buf, n, &o2), 0);
    assert_memory_equal(&o, &o2, sizeof(o));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cold_op_decode(buf, i, &o2), KVMESH_EPROTO);
    buf[4 + 32 + 32 + 32] = 9; /* state byte out of range */
    assert_int_equal(cold_op_decode(buf, n, &o2), KVMESH_EPROTO);

    cold_device_t d = mkdev(500), d2;
    d.used = 100;
    d.n_used = 2;
    assert_int_equal(cold_device_encode(&d, buf, sizeof(buf), &n), 0);
    assert_int_equal(cold_device_decode(buf, n, &d2), 0);
    assert_memory_equal(&d, &d2, sizeof(d));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cold_device_decode(buf, i, &d2), KVMESH_EPROTO);
    d.used = 600; /* over capacity: an invalid record never decodes */
    assert_int_equal(cold_device_encode(&d, buf, sizeof(buf), &n), 0);
    assert_int_equal(cold_device_decode(buf, n, &d2), KVMESH_EPROTO);

    cold_reclaim_t r = {0}, r2;
    kvm_cold_backing_t b;
    kvm_id128_t own = kvm_id128_from_u64(9, 9), tier = kvm_id128_from_u64(7, 1);
    kvm_op_id_t c1 = opid(20), c2 = opid(21), rop = opid(22);
    kvm_cold_backing_pending(&b, &c1, &c2, &own, &tier, 10, 20);
    assert_int_equal(kvm_cold_backing_materialize(&b, "xyz", 3, 10, 20), 0);
    kvm_cold_reclaim_plan(&r.r, &rop, &b);
    r.ident_len = 3;
    memcpy(r.ident, "abc", 3);
    r.deadline_ms = 5;
    assert_int_equal(cold_reclaim_encode(&r, buf, sizeof(buf), &n), 0);
    assert_int_equal(cold_reclaim_decode(buf, n, &r2), 0);
    assert_memory_equal(&r, &r2, sizeof(r));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cold_reclaim_decode(buf, i, &r2), KVMESH_EPROTO);
}

/* ---- engine fixture ----------------------------------------------------------------------- */

#define N_OBJ 4

typedef struct obj {
    kvm_ident_t id;
    cold_route_obs_t r;
    uint8_t data[256];
    uint64_t len;
} obj_t;

typedef struct fx {
    uv_loop_t loop;
    env_t *env;
    meta_t *meta;
    cold_t *c;
    cold_simbe_t *sb;
    cold_backend_t be;
    cold_device_t dev;
    obj_t o[N_OBJ];
    uint64_t seq;
    int conflict_next; /* materialize CAS conflicts to inject (a hot placement raced it) */
    int materialized, evicted, promoted;
    /* deferred I/O (singleflight tests) */
    bool hold_io;
    cold_exec_t *held[8];
    int n_held;
    cold_exec_ops_t io;
} fx_t;

static fx_t *g;

static obj_t *obj_of(fx_t *f, const kvm_ident_t *id)
{
    for (int i = 0; i < N_OBJ; i++)
        if (kvm_ident_equal(&f->o[i].id, id))
            return &f->o[i];
    return NULL;
}

static void bump(obj_t *o)
{
    o->r.version.primary_sequence++;
}

static void rt_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    obj_t *o = obj_of(ctx, id);
    cb(arg, 0, &o->r);
}

static void rt_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *content, void *buf,
                        uint64_t len, cold_rc_cb cb, void *arg)
{
    obj_t *o = obj_of(ctx, id);
    if (!kvm_op_id_equal(content, &o->r.content_op) || o->r.n_replicas == 0 || len != o->len) {
        cb(arg, KVMESH_ENOENT);
        return;
    }
    memcpy(buf, o->data, len);
    cb(arg, 0);
}

static void rt_materialize(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *exp,
                           const kvm_cold_backing_t *mat, cold_rc_cb cb, void *arg)
{
    fx_t *f = ctx;
    obj_t *o = obj_of(f, id);
    if (f->conflict_next > 0) {
        f->conflict_next--;
        bump(o); /* a hot placement CAS got in first */
        cb(arg, KVMESH_ECONFLICT);
        return;
    }
    if (!kvm_route_version_equal(exp, &o->r.version) ||
        o->r.cold.kind != KVM_COLD_PENDING_OFFLOAD ||
        !kvm_op_id_equal(&o->r.cold.cold_op, &mat->cold_op)) {
        cb(arg, KVMESH_ECONFLICT);
        return;
    }
    o->r.cold = *mat;
    bump(o);
    f->materialized++;
    cb(arg, 0);
}

static void rt_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                     void *arg)
{
    fx_t *f = ctx;
    obj_t *o = obj_of(f, id);
    if (!kvm_route_version_equal(&e->version, &o->r.version) ||
        !kvm_op_id_equal(&e->content_op, &o->r.content_op) ||
        o->r.cold.kind != KVM_COLD_MATERIALIZED ||
        !kvm_op_id_equal(&e->cold_op, &o->r.cold.cold_op) ||
        e->locator_fp != kvm_cold_backing_fingerprint(&o->r.cold) || o->r.n_replicas == 0) {
        cb(arg, KVMESH_ECONFLICT);
        return;
    }
    o->r.n_replicas = 0;
    bump(o);
    f->evicted++;
    cb(arg, 0);
}

static void rt_promote(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *exp,
                       const void *buf, uint64_t len, cold_rc_cb cb, void *arg)
{
    fx_t *f = ctx;
    obj_t *o = obj_of(f, id);
    if (!kvm_route_version_equal(exp, &o->r.version) || len != o->len ||
        memcmp(buf, o->data, len) != 0) {
        cb(arg, KVMESH_ECONFLICT);
        return;
    }
    o->r.n_replicas = 1;
    bump(o);
    f->promoted++;
    cb(arg, 0);
}

static void io_submit(void *ctx, cold_exec_t *io)
{
    fx_t *f = ctx;
    if (f->hold_io) {
        assert_true(f->n_held < 8);
        f->held[f->n_held++] = io;
        return;
    }
    io->run(io);
    io->done(io);
}

static const cold_exec_ops_t g_io = {.submit = io_submit};

static void run_until(fx_t *f, const bool *done)
{
    for (int i = 0; !*done && i < 200000; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(*done);
}

static uint32_t fx_purge_ms; /* cold_config_t.purge_after_ms of the next fx_open */

static void fx_open(fx_t *f, unsigned bugs)
{
    memset(f, 0, sizeof(*f));
    g = f;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(env_uv_new(&f->env, &f->loop, 0), 0);
    assert_int_equal(meta_open(&f->meta, f->env, "memory://", NULL), 0);
    cold_route_ops_t ro = {.lookup = rt_lookup,
                           .read_hot = rt_read_hot,
                           .materialize = rt_materialize,
                           .evict = rt_evict,
                           .promote = rt_promote,
                           .ctx = f};
    f->io = g_io;
    f->io.ctx = f;
    cold_config_t cfg = {.deployment = "unit",
                         .self = kvm_id128_from_u64(9, 9),
                         .op_ttl_ms = 50,
                         .backoff_max_ms = 100,
                         .purge_after_ms = fx_purge_ms,
                         .exec = &f->io,
                         .test_bugs = bugs};
    assert_int_equal(cold_new(&f->c, f->env, f->meta, &ro, &cfg), 0);
    f->sb = cold_simbe_new(1 << 20);
    f->be = cold_simbe_backend(f->sb);
    f->dev = mkdev(4096);
    assert_int_equal(cold_attach_backend(f->c, &f->dev.id, &f->be), 0);
    for (int i = 0; i < N_OBJ; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(kvm_ident_init(&f->o[i].id, "acme", NULL, key, strlen(key)), 0);
    }
}

static void fx_close(fx_t *f)
{
    assert_int_equal(cold_check_invariants(f->c), 0);
    cold_close(f->c);
    meta_close(f->meta);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    env_uv_free(f->env);
    while (uv_run(&f->loop, UV_RUN_NOWAIT))
        ;
    assert_int_equal(uv_loop_close(&f->loop), 0);
    cold_simbe_free(f->sb);
    for (int i = 0; i < N_OBJ; i++)
        kvm_ident_free(&f->o[i].id);
}

typedef struct res {
    bool done;
    int rc;
    bool repeated, has_op, has_dev, has_rec;
    cold_op_t op;
    cold_device_t dev;
    cold_reclaim_t rec;
} res_t;

static void on_op(void *arg, int rc, const cold_op_view_t *v)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->repeated = v->repeated;
    if ((r->has_op = v->op != NULL))
        r->op = *v->op;
    if ((r->has_dev = v->dev != NULL))
        r->dev = *v->dev;
}

static void on_dev(void *arg, int rc, const cold_device_t *d)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
    if ((r->has_dev = d != NULL))
        r->dev = *d;
}

static void on_rec(void *arg, int rc, const cold_reclaim_view_t *v)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->repeated = v->repeated;
    if ((r->has_rec = v->rec != NULL))
        r->rec = *v->rec;
    if ((r->has_op = v->op != NULL))
        r->op = *v->op;
}

static void on_rc(void *arg, int rc)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
}

static res_t dev_register(fx_t *f, const cold_device_t *d)
{
    res_t r = {0};
    assert_int_equal(cold_device_register(f->c, d, on_dev, &r), 0);
    run_until(f, &r.done);
    return r;
}

static res_t dev_get(fx_t *f)
{
    res_t r = {0};
    assert_int_equal(cold_device_get(f->c, &f->dev.id, on_dev, &r), 0);
    run_until(f, &r.done);
    assert_int_equal(r.rc, 0);
    return r;
}

static res_t plan(fx_t *f, uint64_t seq, uint64_t len)
{
    res_t r = {0};
    cold_plan_req_t q = {.cold_op = opid(seq),
                         .content_op = opid(seq + 1000),
                         .device = f->dev.id,
                         .ident = &f->o[0].id,
                         .length = len,
                         .checksum = 5};
    assert_int_equal(cold_op_plan(f->c, &q, on_op, &r), 0);
    run_until(f, &r.done);
    return r;
}

static res_t adv(fx_t *f, uint64_t seq, enum cold_op_state to)
{
    res_t r = {0};
    cold_locator_t loc = {.len = 3, .b = {'l', 'o', 'c'}};
    kvm_op_id_t id = opid(seq);
    assert_int_equal(
        cold_op_advance(f->c, &id, to, to == COLD_OP_PAYLOAD_WRITTEN ? &loc : NULL, on_op, &r), 0);
    run_until(f, &r.done);
    return r;
}

/* A runtime that registers its device again (a restart) keeps the stored lifecycle and
 * schedulability: they are the operator's (kvmesh admin devices drain|retire). */
static void test_register_keeps_lifecycle(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    cold_device_t d = f.dev;
    d.lifecycle = COLD_DEV_DRAINING;
    d.schedulable = false;
    assert_int_equal(dev_register(&f, &d).rc, 0); /* created as given */
    d = f.dev;
    d.owner_epoch++;
    d.capacity += 1;
    res_t r = dev_register(&f, &d); /* the restart registers it active and schedulable */
    assert_int_equal(r.rc, 0);
    r = dev_get(&f);
    assert_int_equal(r.dev.lifecycle, COLD_DEV_DRAINING);
    assert_false(r.dev.schedulable);
    assert_int_equal(r.dev.capacity, f.dev.capacity + 1); /* identity fields do update */
    /* a health writer asking for schedulable (it read the record before the drain) */
    res_t h = {0};
    assert_int_equal(cold_device_set_health(f.c, &f.dev.id, COLD_DEV_DEGRADED, true, on_dev, &h),
                     0);
    run_until(&f, &h.done);
    assert_int_equal(h.rc, 0);
    r = dev_get(&f);
    assert_int_equal(r.dev.health, COLD_DEV_DEGRADED);
    assert_false(r.dev.schedulable);
    fx_close(&f);
}

static void test_engine_main_path(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    res_t d = dev_register(&f, &f.dev); /* repeat: same record */
    assert_int_equal(d.rc, 0);
    assert_int_equal(d.dev.capacity, 4096);

    res_t r = plan(&f, 1, 1000);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.state, COLD_OP_PLANNED);
    assert_false(r.repeated);
    cold_opid_t be = r.op.be_id;
    r = plan(&f, 1, 1000);
    assert_int_equal(r.rc, 0);
    assert_true(r.repeated);
    assert_memory_equal(be.b, r.op.be_id.b, COLD_OPID_LEN); /* the backend id is chosen once */

    static const enum cold_op_state path[] = {COLD_OP_RESERVED, COLD_OP_PAYLOAD_WRITTEN,
                                              COLD_OP_ROUTE_COMMITTED, COLD_OP_USAGE_COMMITTED};
    static const uint64_t reserved[] = {1000, 1000, 1000, 0}, used[] = {0, 0, 0, 1000};
    for (size_t i = 0; i < 4; i++) {
        r = adv(&f, 1, path[i]);
        assert_int_equal(r.rc, 0);
        assert_false(r.repeated);
        assert_int_equal(r.op.state, path[i]);
        r = adv(&f, 1, path[i]); /* idempotent repeat */
        assert_int_equal(r.rc, 0);
        assert_true(r.repeated);
        d = dev_get(&f);
        assert_int_equal(d.dev.reserved, reserved[i]);
        assert_int_equal(d.dev.used, used[i]);
        if (i == 0) { /* skipping a state is refused; the view names the stored one */
            r = adv(&f, 1, COLD_OP_USAGE_COMMITTED);
            assert_int_equal(r.rc, KVMESH_ECONFLICT);
            assert_int_equal(r.op.state, COLD_OP_RESERVED);
        }
    }
    assert_int_equal(r.op.loc.len, 3);
    assert_int_not_equal(r.op.payload_fp, 0);
    r = adv(&f, 1, COLD_OP_RELEASED);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.released_from, COLD_OP_USAGE_COMMITTED);
    r = adv(&f, 1, COLD_OP_RELEASED);
    assert_true(r.repeated);
    d = dev_get(&f);
    assert_int_equal(d.dev.used, 0);
    assert_int_equal(d.dev.n_used, 0);
    r = adv(&f, 1, COLD_OP_RESERVED); /* terminal */
    assert_int_equal(r.rc, KVMESH_ECONFLICT);
    r = adv(&f, 99, COLD_OP_RESERVED);
    assert_int_equal(r.rc, KVMESH_ENOENT);
    fx_close(&f);
}

static void test_engine_capacity_and_exits(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    assert_int_equal(plan(&f, 1, 3000).rc, 0);
    assert_int_equal(plan(&f, 2, 3000).rc, 0);
    assert_int_equal(adv(&f, 1, COLD_OP_RESERVED).rc, 0);
    res_t r = adv(&f, 2, COLD_OP_RESERVED);
    assert_int_equal(r.rc, KVMESH_ENOSPC); /* 3000 + 3000 > 4096 */
    assert_int_equal(r.op.state, COLD_OP_PLANNED);
    /* side exits: Planned -> Released, Reserved -> Released, PayloadWritten -> Reclaiming ->
     * Released, each releasing exactly what it held */
    assert_int_equal(adv(&f, 2, COLD_OP_RELEASED).rc, 0);
    assert_int_equal(dev_get(&f).dev.reserved, 3000);
    assert_int_equal(adv(&f, 1, COLD_OP_RELEASED).rc, 0);
    assert_int_equal(dev_get(&f).dev.reserved, 0);
    assert_int_equal(plan(&f, 3, 100).rc, 0);
    assert_int_equal(adv(&f, 3, COLD_OP_RESERVED).rc, 0);
    assert_int_equal(adv(&f, 3, COLD_OP_PAYLOAD_WRITTEN).rc, 0);
    assert_int_equal(adv(&f, 3, COLD_OP_RELEASED).rc, KVMESH_ECONFLICT); /* not an edge */
    assert_int_equal(adv(&f, 3, COLD_OP_RECLAIMING).rc, 0);
    assert_int_equal(dev_get(&f).dev.reserved, 100);
    r = adv(&f, 3, COLD_OP_RELEASED);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.released_from, COLD_OP_RECLAIMING);
    assert_int_equal(dev_get(&f).dev.reserved, 0);
    /* an unhealthy or unschedulable device takes no reservation */
    res_t h = {0};
    assert_int_equal(cold_device_set_health(f.c, &f.dev.id, COLD_DEV_FAILED, true, on_dev, &h), 0);
    run_until(&f, &h.done);
    assert_int_equal(h.rc, 0);
    assert_int_equal(plan(&f, 4, 10).rc, 0);
    assert_int_equal(adv(&f, 4, COLD_OP_RESERVED).rc, KVMESH_EUNAVAILABLE);
    /* registration keeps accounting and refuses an older epoch or a capacity below use */
    cold_device_t old = f.dev;
    old.owner_epoch = 0;
    assert_int_equal(dev_register(&f, &old).rc, KVMESH_EINCOMPAT);
    /* the view and placement */
    res_t v = {0};
    assert_int_equal(cold_view_refresh(f.c, on_rc, &v), 0);
    run_until(&f, &v.done);
    assert_int_equal(v.rc, 0);
    kvm_tier_id_t dev;
    assert_int_equal(cold_place(f.c, 10, &dev, NULL), KVMESH_ENOSPC); /* failed device */
    h = (res_t){0};
    assert_int_equal(cold_device_set_health(f.c, &f.dev.id, COLD_DEV_HEALTHY, true, on_dev, &h), 0);
    run_until(&f, &h.done);
    v = (res_t){0};
    assert_int_equal(cold_view_refresh(f.c, on_rc, &v), 0);
    run_until(&f, &v.done);
    assert_int_equal(cold_place(f.c, 10, &dev, NULL), 0);
    assert_true(kvm_id128_equal(&dev, &f.dev.id));
    assert_int_equal(cold_place(f.c, 5000, &dev, NULL), KVMESH_ENOSPC);
    fx_close(&f);
}

/* A route for object i with one hot replica and a PendingOffload of cold op `seq`. */
static void put_route(fx_t *f, int i, uint64_t seq, uint64_t len)
{
    obj_t *o = &f->o[i];
    o->len = len;
    for (uint64_t b = 0; b < len; b++)
        o->data[b] = (uint8_t)(seq * 31 + b);
    o->r.found = true;
    o->r.tombstone = false;
    o->r.version.fencing_token = 1;
    o->r.version.primary_sequence += 1;
    o->r.content_op = opid(seq + 1000);
    o->r.n_replicas = 1;
    o->r.replicas[0] = (kvm_hot_replica_t){.owner = kvm_id128_from_u64(9, 9),
                                           .segment = 1,
                                           .offset = 64 * (uint64_t)i,
                                           .length = len,
                                           .checksum = kvm_checksum(o->data, len)};
    kvm_id128_t own = kvm_id128_from_u64(9, 9);
    kvm_op_id_t k = opid(seq);
    kvm_cold_backing_pending(&o->r.cold, &k, &o->r.content_op, &own, &f->dev.id, len,
                             kvm_checksum(o->data, len));
}

static void submit(fx_t *f, int i, uint64_t seq)
{
    obj_t *o = &f->o[i];
    cold_job_t j = {.ident = &o->id,
                    .cold_op = opid(seq),
                    .content_op = opid(seq + 1000),
                    .device = f->dev.id,
                    .length = o->len,
                    .checksum = kvm_checksum(o->data, o->len)};
    assert_int_equal(cold_offload_submit(f->c, &j), 0);
}

static void drain(fx_t *f)
{
    for (int i = 0; cold_offload_pending(f->c) && i < 200000; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(cold_offload_pending(f->c), 0);
}

typedef struct rres {
    bool done;
    int rc;
    uint8_t buf[256];
    uint64_t len;
} rres_t;

static void on_restore(void *arg, int rc, const void *buf, uint64_t len)
{
    rres_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->len = len;
    if (rc == 0)
        memcpy(r->buf, buf, len);
    else
        assert_null(buf);
}

static void refresh(fx_t *f)
{
    res_t v = {0};
    assert_int_equal(cold_view_refresh(f->c, on_rc, &v), 0);
    run_until(f, &v.done);
    assert_int_equal(v.rc, 0);
}

static void test_offload_evict_restore(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    refresh(&f);
    put_route(&f, 0, 1, 200);
    f.conflict_next = 2; /* the materialize CAS races two hot placements: it rebases */
    submit(&f, 0, 1);
    submit(&f, 0, 1); /* a second submit of the same op is a no-op */
    drain(&f);
    cold_stats_t s;
    cold_get_stats(f.c, &s);
    assert_int_equal(s.offloads_ok, 1);
    assert_int_equal(s.rebases, 2);
    assert_int_equal(f.o[0].r.cold.kind, KVM_COLD_MATERIALIZED);
    assert_int_equal(dev_get(&f).dev.used, 200);
    assert_int_equal(dev_get(&f).dev.reserved, 0);

    res_t e = {0};
    assert_int_equal(cold_evict(f.c, &f.o[0].id, &f.o[0].r.replicas[0], on_rc, &e), 0);
    run_until(&f, &e.done);
    assert_int_equal(e.rc, 0);
    assert_int_equal(f.o[0].r.n_replicas, 0); /* cold-only */

    rres_t rr = {0};
    assert_int_equal(cold_restore(f.c, &f.o[0].id, on_restore, &rr), 0);
    run_until(&f, &rr.done);
    assert_int_equal(rr.rc, 0);
    assert_int_equal(rr.len, 200);
    assert_memory_equal(rr.buf, f.o[0].data, 200);
    assert_int_equal(f.promoted, 1);
    assert_int_equal(f.o[0].r.n_replicas, 1);

    /* singleflight: two restores of one backing and route version share one read */
    f.hold_io = true;
    rres_t a = {0}, b = {0};
    assert_int_equal(cold_restore(f.c, &f.o[0].id, on_restore, &a), 0);
    assert_int_equal(cold_restore(f.c, &f.o[0].id, on_restore, &b), 0);
    for (int i = 0; i < 1000 && f.n_held < 1; i++)
        uv_run(&f.loop, UV_RUN_ONCE);
    for (int i = 0; i < 100; i++)
        uv_run(&f.loop, UV_RUN_NOWAIT);
    assert_int_equal(f.n_held, 1);
    f.hold_io = false;
    f.held[0]->run(f.held[0]);
    f.held[0]->done(f.held[0]);
    f.n_held = 0;
    run_until(&f, &a.done);
    run_until(&f, &b.done);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_memory_equal(a.buf, b.buf, 200);
    cold_get_stats(f.c, &s);
    assert_int_equal(s.restore_joined, 1);

    /* a corrupted payload is detected and never returned */
    cold_locator_t loc = {.len = f.o[0].r.cold.u.mat.locator_len};
    memcpy(loc.b, f.o[0].r.cold.u.mat.locator, loc.len);
    assert_int_equal(cold_simbe_corrupt(f.sb, &loc), 0);
    rres_t c = {0};
    assert_int_equal(cold_restore(f.c, &f.o[0].id, on_restore, &c), 0);
    run_until(&f, &c.done);
    assert_int_equal(c.rc, KVMESH_ECHECKSUM);

    /* an offload whose route moved on before it ran ends RELEASED, leaving nothing behind */
    put_route(&f, 1, 2, 50);
    f.o[1].r.cold.cold_op = opid(77); /* overwritten: another cold op is pending now */
    submit(&f, 1, 2);
    drain(&f);
    cold_get_stats(f.c, &s);
    assert_int_equal(s.offloads_released, 1);
    uint64_t objs = 0;
    cold_simbe_stat(f.sb, NULL, &objs);
    assert_int_equal(objs, 1);
    fx_close(&f);
}

static void test_evict_needs_usage_committed(void **st)
{
    (void)st;
    for (int bug = 0; bug < 2; bug++) {
        fx_t f;
        fx_open(&f, bug ? COLD_BUG_EVICT_NO_USAGE : 0);
        assert_int_equal(dev_register(&f, &f.dev).rc, 0);
        refresh(&f);
        put_route(&f, 0, 1, 100);
        /* drive the op by hand to ROUTE_COMMITTED with the route materialized */
        cold_plan_req_t q = {.cold_op = opid(1),
                             .content_op = opid(1001),
                             .device = f.dev.id,
                             .ident = &f.o[0].id,
                             .length = 100,
                             .checksum = f.o[0].r.cold.u.pending.expected_checksum};
        res_t r = {0};
        assert_int_equal(cold_op_plan(f.c, &q, on_op, &r), 0);
        run_until(&f, &r.done);
        assert_int_equal(adv(&f, 1, COLD_OP_RESERVED).rc, 0);
        r = adv(&f, 1, COLD_OP_PAYLOAD_WRITTEN);
        assert_int_equal(
            kvm_cold_backing_materialize(&f.o[0].r.cold, r.op.loc.b, r.op.loc.len, 100, q.checksum),
            0);
        assert_int_equal(adv(&f, 1, COLD_OP_ROUTE_COMMITTED).rc, 0);
        res_t e = {0};
        assert_int_equal(cold_evict(f.c, &f.o[0].id, &f.o[0].r.replicas[0], on_rc, &e), 0);
        run_until(&f, &e.done);
        assert_int_equal(e.rc, bug ? 0 : KVMESH_EAGAIN);
        fx_close(&f);
    }
}

static void test_reclaim_handoff(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    refresh(&f);
    put_route(&f, 0, 1, 100);
    submit(&f, 0, 1);
    drain(&f);
    assert_int_equal(dev_get(&f).dev.used, 100);
    kvm_cold_backing_t old = f.o[0].r.cold;
    kvm_op_id_t r1 = opid(501), r2 = opid(502);
    res_t r = {0};
    assert_int_equal(cold_reclaim_plan(f.c, &r1, &f.o[0].id, &old, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.rec.r.state, KVM_RECLAIM_PLANNED);
    /* still authoritative: cleanup refuses and keeps the record due */
    r = (res_t){0};
    assert_int_equal(cold_reclaim_run(f.c, &r1, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, KVMESH_EAGAIN);
    assert_true(cold_simbe_has(f.sb, old.u.mat.locator, old.u.mat.locator_len));
    /* the overwrite CAS: new content, new pending backing */
    put_route(&f, 0, 2, 80);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_run(f.c, &r1, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.rec.r.state, KVM_RECLAIM_USAGE_RELEASED);
    assert_int_equal(r.rec.outcome, COLD_OP_USAGE_COMMITTED);
    assert_false(cold_simbe_has(f.sb, old.u.mat.locator, old.u.mat.locator_len));
    assert_int_equal(dev_get(&f).dev.used, 0);
    /* repeat: the existing result, nothing released twice */
    r = (res_t){0};
    assert_int_equal(cold_reclaim_run(f.c, &r1, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, 0);
    assert_true(r.repeated);
    /* a second reclaim of the same cold op finds it released: outcome NONE, no change */
    r = (res_t){0};
    assert_int_equal(cold_reclaim_plan(f.c, &r2, &f.o[0].id, &old, on_rec, &r), 0);
    run_until(&f, &r.done);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_run(f.c, &r2, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.rec.outcome, COLD_OP_NONE);
    res_t d = dev_get(&f);
    assert_int_equal(d.dev.used, 0);
    assert_int_equal(d.dev.reserved, 0);
    /* ROUTE_COMMITTED -> RELEASED consumes the reservation */
    res_t pr = plan(&f, 3, 60);
    assert_int_equal(pr.rc, 0);
    assert_int_equal(adv(&f, 3, COLD_OP_RESERVED).rc, 0);
    res_t pw = adv(&f, 3, COLD_OP_PAYLOAD_WRITTEN);
    assert_int_equal(adv(&f, 3, COLD_OP_ROUTE_COMMITTED).rc, 0);
    kvm_cold_backing_t b3;
    kvm_op_id_t k3 = opid(3), c3 = opid(1003);
    kvm_cold_backing_pending(&b3, &k3, &c3, &pw.op.owner, &f.dev.id, 60, 5);
    assert_int_equal(kvm_cold_backing_materialize(&b3, pw.op.loc.b, pw.op.loc.len, 60, 5), 0);
    kvm_op_id_t r3 = opid(503);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_plan(f.c, &r3, &f.o[0].id, &b3, on_rec, &r), 0);
    run_until(&f, &r.done);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_run(f.c, &r3, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.rec.outcome, COLD_OP_ROUTE_COMMITTED);
    assert_int_equal(dev_get(&f).dev.reserved, 0);
    /* the offload worker cannot commit it afterwards */
    res_t u = adv(&f, 3, COLD_OP_USAGE_COMMITTED);
    assert_int_equal(u.rc, KVMESH_ECONFLICT);
    assert_int_equal(u.op.state, COLD_OP_RELEASED);
    /* cancel: only a PLANNED record */
    kvm_op_id_t r4 = opid(504);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_plan(f.c, &r4, &f.o[0].id, &old, on_rec, &r), 0);
    run_until(&f, &r.done);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_cancel(f.c, &r4, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, 0);
    r = (res_t){0};
    assert_int_equal(cold_reclaim_cancel(f.c, &r1, on_rec, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(r.rc, KVMESH_ECONFLICT);
    fx_close(&f);
}

typedef struct recon_res {
    bool done;
    cold_recon_report_t r;
} recon_res_t;

static void on_recon(void *arg, const cold_recon_report_t *r)
{
    recon_res_t *x = arg;
    x->done = true;
    x->r = *r;
}

static void test_recon_resumes(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    put_route(&f, 0, 1, 100);
    /* a crashed worker left the op RESERVED (its due entry has a 50 ms deadline) */
    cold_plan_req_t q = {.cold_op = opid(1),
                         .content_op = opid(1001),
                         .device = f.dev.id,
                         .ident = &f.o[0].id,
                         .length = 100,
                         .checksum = f.o[0].r.cold.u.pending.expected_checksum};
    res_t r = {0};
    assert_int_equal(cold_op_plan(f.c, &q, on_op, &r), 0);
    run_until(&f, &r.done);
    assert_int_equal(adv(&f, 1, COLD_OP_RESERVED).rc, 0);
    recon_res_t x = {0};
    assert_int_equal(cold_recon_pass(f.c, 16, on_recon, &x), 0);
    run_until(&f, &x.done);
    assert_int_equal(x.r.rc, 0);
    assert_int_equal(x.r.resumed, 0); /* not due yet */
    usleep(120 * 1000);
    x = (recon_res_t){0};
    assert_int_equal(cold_recon_pass(f.c, 16, on_recon, &x), 0);
    run_until(&f, &x.done);
    assert_int_equal(x.r.resumed, 1);
    for (int i = 0; i < 1000 && f.o[0].r.cold.kind != KVM_COLD_MATERIALIZED; i++)
        uv_run(&f.loop, UV_RUN_ONCE);
    drain(&f);
    assert_int_equal(f.o[0].r.cold.kind, KVM_COLD_MATERIALIZED);
    assert_int_equal(dev_get(&f).dev.used, 100);
    fx_close(&f);
}

static void on_range(void *arg, const meta_result_t *res)
{
    recon_res_t *x = arg;
    x->done = true;
    x->r.rc = res->rc;
    x->r.resumed = (uint32_t)res->n_kvs;
}

/* The deployment's metadata keys (device, op records, due entries), up to 1000. */
static uint32_t key_count(fx_t *f)
{
    char prefix[KS_KEY_CAP];
    assert_int_equal(ks_deployment_prefix(prefix, sizeof(prefix), "unit"), 0);
    recon_res_t x = {0};
    assert_int_equal(meta_range(f->meta, prefix, NULL, 1000, 1000, on_range, &x), 0);
    run_until(f, &x.done);
    assert_int_equal(x.r.rc, 0);
    return x.r.resumed;
}

/* Terminal op records are purged after purge_after_ms from the "released" due index, so the key
 * count stays bounded under churn: 3 rounds of 24 ops planned and released leave the device
 * record alone once their retention passed and reconciliation ran (with purge off: every op
 * record and no due entry stays, 1 + 72 keys). A released op's record reads back until then. */
static void churn_purge(uint32_t purge_ms, uint32_t *peak, uint32_t *end)
{
    fx_purge_ms = purge_ms;
    fx_t f;
    fx_open(&f, 0);
    fx_purge_ms = 0;
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    *peak = 0;
    for (uint64_t round = 0; round < 3; round++) {
        for (uint64_t i = 0; i < 24; i++) {
            uint64_t seq = 1 + round * 100 + i;
            assert_int_equal(plan(&f, seq, 10).rc, 0);
            assert_int_equal(adv(&f, seq, COLD_OP_RESERVED).rc, 0);
            assert_int_equal(adv(&f, seq, COLD_OP_RELEASED).rc, 0);
        }
        uint32_t n = key_count(&f);
        *peak = n > *peak ? n : *peak;
        usleep(80 * 1000); /* past purge_after_ms (and op_ttl_ms) */
        for (int pass = 0; pass < 4; pass++) {
            recon_res_t x = {0};
            assert_int_equal(cold_recon_pass(f.c, 16, on_recon, &x), 0);
            run_until(&f, &x.done);
            assert_int_equal(x.r.rc, 0);
            drain(&f);
        }
    }
    *end = key_count(&f);
    assert_int_equal(dev_get(&f).dev.reserved, 0);
    fx_close(&f);
}

static void test_purge_bounded(void **st)
{
    (void)st;
    uint32_t peak = 0, end = 0;
    churn_purge(50, &peak, &end);
    assert_true(peak <= 1 + 2 * 24); /* one round's records and their due entries at most */
    assert_int_equal(end, 1);        /* the device record alone */
    churn_purge(0, &peak, &end);     /* purge off: every record stays */
    assert_int_equal(end, 1 + 3 * 24);
}

/* Every (from, to) pair through the engine: an op driven to `from` (by a legal path), then
 * `to` attempted: applied exactly for the diagram's edges, refused (ECONFLICT, record unchanged)
 * otherwise, and a repeat of an applied edge is `repeated`. */
static void drive(fx_t *f, uint64_t seq, enum cold_op_state s)
{
    static const enum cold_op_state main_path[] = {COLD_OP_RESERVED, COLD_OP_PAYLOAD_WRITTEN,
                                                   COLD_OP_ROUTE_COMMITTED,
                                                   COLD_OP_USAGE_COMMITTED};
    assert_int_equal(plan(f, seq, 10).rc, 0);
    if (s == COLD_OP_PLANNED)
        return;
    if (s == COLD_OP_RELEASED) {
        assert_int_equal(adv(f, seq, COLD_OP_RELEASED).rc, 0);
        return;
    }
    if (s == COLD_OP_RECLAIMING) {
        assert_int_equal(adv(f, seq, COLD_OP_RESERVED).rc, 0);
        assert_int_equal(adv(f, seq, COLD_OP_PAYLOAD_WRITTEN).rc, 0);
        assert_int_equal(adv(f, seq, COLD_OP_RECLAIMING).rc, 0);
        return;
    }
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(adv(f, seq, main_path[i]).rc, 0);
        if (main_path[i] == s)
            return;
    }
}

static void test_engine_all_edges(void **st)
{
    (void)st;
    fx_t f;
    fx_open(&f, 0);
    assert_int_equal(dev_register(&f, &f.dev).rc, 0);
    uint64_t seq = 100;
    int applied = 0, refused = 0;
    for (size_t a = 1; a < sizeof(ALL) / sizeof(ALL[0]); a++)
        for (size_t b = 2; b < sizeof(ALL) / sizeof(ALL[0]); b++) {
            if (ALL[a] == ALL[b])
                continue;
            seq++;
            drive(&f, seq, ALL[a]);
            res_t before = dev_get(&f);
            res_t r = adv(&f, seq, ALL[b]);
            if (cold_op_transition_ok(ALL[a], ALL[b])) {
                assert_int_equal(r.rc, 0);
                assert_int_equal(r.op.state, ALL[b]);
                res_t again = adv(&f, seq, ALL[b]);
                assert_int_equal(again.rc, 0);
                assert_true(again.repeated);
                applied++;
            } else {
                assert_int_equal(r.rc, KVMESH_ECONFLICT);
                assert_int_equal(r.op.state, ALL[a]);
                res_t after = dev_get(&f);
                assert_int_equal(after.dev.used, before.dev.used);
                assert_int_equal(after.dev.reserved, before.dev.reserved);
                refused++;
            }
            /* leave the device empty for the next pair */
            res_t cur = adv(&f, seq, COLD_OP_RELEASED);
            if (cur.rc == KVMESH_ECONFLICT && cur.op.state == COLD_OP_PAYLOAD_WRITTEN) {
                assert_int_equal(adv(&f, seq, COLD_OP_RECLAIMING).rc, 0);
                cur = adv(&f, seq, COLD_OP_RELEASED);
            }
            assert_int_equal(cur.rc, 0);
            res_t d = dev_get(&f);
            assert_int_equal(d.dev.used + d.dev.reserved, 0);
        }
    assert_int_equal(applied, 10); /* the 11 edges minus NONE -> PLANNED (that one is plan) */
    assert_true(refused > 20);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_edges),
        cmocka_unit_test(test_device_accounting),
        cmocka_unit_test(test_codecs),
        cmocka_unit_test(test_engine_main_path),
        cmocka_unit_test(test_register_keeps_lifecycle),
        cmocka_unit_test(test_purge_bounded),
        cmocka_unit_test(test_engine_capacity_and_exits),
        cmocka_unit_test(test_engine_all_edges),
        cmocka_unit_test(test_offload_evict_restore),
        cmocka_unit_test(test_evict_needs_usage_committed),
        cmocka_unit_test(test_reclaim_handoff),
        cmocka_unit_test(test_recon_resumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
