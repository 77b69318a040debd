/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cold_batch.c — the core's batch restore (cold.h cold_restore_batch; docs/cold.md "Batch
 * restore") over real backends on real files: a LocalDir, an io_uring ExtentStore and a
 * buffered ExtentStore device attached to one cold core (memory:// metadata, backend calls
 * inline). 96 objects of odd sizes, interleaved across the three devices, restored in one call:
 *   - exactly one device read (job) per device: 3, not 96; the core's counters agree;
 *   - every item's bytes equal what was written (read straight into the caller's buffers);
 *   - one payload byte flipped in one object of each device fails that item alone
 *     (KVMESH_ECHECKSUM), its buffer zeroed; every other item still succeeds;
 *   - a deleted object answers KVMESH_ENOENT, an item of a device not attached here
 *     KVMESH_ENOTSUP, a bad locator KVMESH_ECORRUPT, each without touching the others;
 *   - argument errors: 0 and COLD_BATCH_MAX + 1 items are refused (the callback never runs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cold/cold.h"
#include "cold/extent.h"
#include "cold/localdir.h"
#include "cold_testutil.h"
#include "core/hash.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "tenv.h"

#define NDEV  3
#define NOBJ  96
#define MAXSZ (200u << 10)

/* ---- the env: tests/support/tenv, never stepped: the batch path arms no timer and sends
 * nothing (its clock stays where the fixture puts it) ----------------------------------------- */

static void r_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    (void)ctx, (void)id, (void)cb, (void)arg;
    fail_msg("batch restore looked a route up");
}
static void r_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *op, void *buf,
                       uint64_t len, cold_rc_cb cb, void *arg)
{
    (void)ctx, (void)id, (void)op, (void)buf, (void)len, (void)cb, (void)arg;
}
static void r_mat(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *v,
                  const kvm_cold_backing_t *m, cold_rc_cb cb, void *arg)
{
    (void)ctx, (void)id, (void)v, (void)m, (void)cb, (void)arg;
}
static void r_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                    void *arg)
{
    (void)ctx, (void)id, (void)e, (void)cb, (void)arg;
}

typedef struct obj {
    int dev;
    uint64_t len, sum;
    cold_locator_t loc;
    uint8_t *want;
} obj_t;

typedef struct fx {
    char root[NDEV][PATH_MAX];
    cold_backend_t be[NDEV];
    kvm_tier_id_t dev[NDEV];
    struct tenv env; /* (f->env.env is the env_t) */
    meta_t *meta;
    cold_t *c;
    obj_t o[NOBJ];
    int cb_runs;
    size_t cb_n;
} fx_t;

static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    tenv_init(&f->env, 4);
    f->env.now = 1000000000ull;
    assert_int_equal(meta_open(&f->meta, &f->env.env, "memory://", NULL), 0);
    cold_route_ops_t ro = {
        .lookup = r_lookup, .read_hot = r_read_hot, .materialize = r_mat, .evict = r_evict};
    cold_config_t cfg = {.deployment = "batch", .self = kvm_id128_from_u64(1, 1)};
    assert_int_equal(cold_new(&f->c, &f->env.env, f->meta, &ro, &cfg), 0);
    for (int d = 0; d < NDEV; d++) {
        ct_mkroot(f->root[d], sizeof(f->root[d]), COLD_VARIANTS[d].name);
        cold_backend_config_t bc = {.kind = COLD_VARIANTS[d].kind,
                                    .root = f->root[d],
                                    .capacity_bytes = 64u << 20,
                                    .segment_bytes = 4u << 20,
                                    .io_mode = COLD_VARIANTS[d].io};
        cold_backend_err_t err;
        if (cold_backend_open(&bc, &f->be[d], &err) != 0)
            fail_msg("open %s: %s", COLD_VARIANTS[d].name, err.msg);
        f->dev[d] = kvm_id128_from_u64(100 + (uint64_t)d, 7);
        assert_int_equal(cold_attach_backend(f->c, &f->dev[d], &f->be[d]), 0);
    }
    for (int i = 0; i < NOBJ; i++) { /* interleaved over the devices, odd sizes */
        obj_t *o = &f->o[i];
        o->dev = i % NDEV;
        o->len = 1 + ((uint64_t)i * 7919u * 13u) % MAXSZ;
        o->want = malloc(o->len);
        assert_non_null(o->want);
        fill(o->want, o->len, (uint64_t)i);
        o->sum = kvm_checksum(o->want, o->len);
        struct iovec v = {.iov_base = o->want, .iov_len = o->len};
        cold_opid_t op = ct_op((uint64_t)i + 1);
        const cold_backend_t *b = &f->be[o->dev];
        assert_int_equal(b->ops->put(b->be, &op, &v, 1, o->len, o->sum, &o->loc, NULL), 0);
    }
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    cold_close(f->c);
    meta_close(f->meta);
    for (int d = 0; d < NDEV; d++) {
        cold_backend_close(&f->be[d]);
        ct_rmroot(f->root[d]);
    }
    for (int i = 0; i < NOBJ; i++)
        free(f->o[i].want);
    free(f);
    return 0;
}

static void batch_cb(void *arg, cold_batch_item_t *items, size_t n)
{
    (void)items;
    fx_t *f = arg;
    f->cb_runs++;
    f->cb_n = n;
}

/* Flips one payload byte of object o in its device's files (the backend's own layout). */
static void corrupt(fx_t *f, const obj_t *o)
{
    char path[PATH_MAX * 2];
    off_t at;
    if (COLD_VARIANTS[o->dev].kind == COLD_BACKEND_LOCALDIR) {
        cold_opid_t op;
        assert_int_equal(cold_ld_loc_decode(&o->loc, &op), 0);
        char hex[2 * COLD_OPID_LEN + 1];
        for (int k = 0; k < COLD_OPID_LEN; k++)
            snprintf(hex + 2 * k, 3, "%02x", op.b[k]);
        snprintf(path, sizeof(path), "%s/%s/%02x/%s.obj", f->root[o->dev], COLD_LD_SUBDIR, op.b[0],
                 hex);
        at = COLD_LD_HDR_LEN + (off_t)(o->len / 2);
    } else {
        cold_ext_loc_t l;
        assert_int_equal(cold_ext_loc_decode(&o->loc, &l), 0);
        snprintf(path, sizeof(path), "%s/%s/seg-%08x.dat", f->root[o->dev], COLD_EXT_SUBDIR, l.seg);
        at = (off_t)(l.off + COLD_EXT_HDR_LEN + o->len / 2);
    }
    int fd = open(path, O_RDWR);
    if (fd < 0)
        fail_msg("open %s", path);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void test_batch(void **state)
{
    fx_t *f = *state;
    /* NOBJ items + 3 extra: a deleted object, a device not attached, a bad locator */
    enum { NX = NOBJ + 3 };
    cold_batch_item_t it[NX];
    uint8_t *bufs[NX];
    for (int i = 0; i < NX; i++) {
        const obj_t *o = &f->o[i < NOBJ ? i : i - NOBJ];
        bufs[i] = malloc(o->len);
        assert_non_null(bufs[i]);
        memset(bufs[i], 0xee, o->len);
        it[i] = (cold_batch_item_t){.device = f->dev[o->dev],
                                    .loc = o->loc,
                                    .len = o->len,
                                    .checksum = o->sum,
                                    .buf = bufs[i],
                                    .rc = 12345};
    }
    /* item NOBJ: a deleted copy of object 0; NOBJ+1: an unknown device; NOBJ+2: no locator */
    const cold_backend_t *b0 = &f->be[f->o[0].dev];
    cold_opid_t gone_op = ct_op(1000);
    cold_locator_t gone;
    struct iovec v = {.iov_base = f->o[0].want, .iov_len = f->o[0].len};
    assert_int_equal(b0->ops->put(b0->be, &gone_op, &v, 1, f->o[0].len, f->o[0].sum, &gone, NULL),
                     0);
    assert_int_equal(b0->ops->del(b0->be, &gone, NULL), 0);
    it[NOBJ].loc = gone;
    it[NOBJ + 1].device = kvm_id128_from_u64(999, 9);
    it[NOBJ + 2].loc.len = 0;
    int bad[NDEV] = {3, 7, 11}; /* one object per device: i % NDEV == d */
    for (int d = 0; d < NDEV; d++) {
        assert_int_equal(bad[d] % NDEV, d);
        corrupt(f, &f->o[bad[d]]);
    }
    cold_stats_t s0, s1;
    cold_get_stats(f->c, &s0);
    size_t jobs = 0;
    assert_int_equal(cold_restore_batch(f->c, it, NX, batch_cb, f, &jobs), 0);
    assert_int_equal(f->cb_runs, 1); /* inline backend calls: done before the return */
    assert_int_equal(f->cb_n, NX);
    cold_get_stats(f->c, &s1);
    printf("batch of %d items on %d devices: %zu device reads, restores %llu ok / %llu failed\n",
           NX, NDEV, jobs, (unsigned long long)(s1.restores - s0.restores),
           (unsigned long long)(s1.restore_failed - s0.restore_failed));
    assert_int_equal(jobs, NDEV);
    assert_int_equal(s1.restore_batches - s0.restore_batches, NDEV);
    /* the deleted one was read too (its device is attached); the other two never reached one */
    assert_int_equal(s1.restore_batch_items - s0.restore_batch_items, NOBJ + 1);
    assert_int_equal(s1.restores - s0.restores, NOBJ - NDEV);
    assert_int_equal(s1.restore_failed - s0.restore_failed, NDEV + 3);
    for (int i = 0; i < NOBJ; i++) {
        const obj_t *o = &f->o[i];
        bool is_bad = i == bad[0] || i == bad[1] || i == bad[2];
        if (is_bad) {
            if (it[i].rc != KVMESH_ECHECKSUM)
                fail_msg("corrupted item %d (%s): rc %d", i, COLD_VARIANTS[o->dev].name, it[i].rc);
            for (uint64_t k = 0; k < o->len; k++)
                assert_int_equal(bufs[i][k], 0); /* zeroed, never unverified bytes */
        } else {
            if (it[i].rc != 0)
                fail_msg("item %d (%s): rc %d", i, COLD_VARIANTS[o->dev].name, it[i].rc);
            assert_memory_equal(bufs[i], o->want, o->len);
        }
    }
    assert_int_equal(it[NOBJ].rc, KVMESH_ENOENT);
    assert_int_equal(it[NOBJ + 1].rc, KVMESH_ENOTSUP);
    assert_int_equal(it[NOBJ + 2].rc, KVMESH_ECORRUPT);
    for (int i = 0; i < NX; i++)
        free(bufs[i]);
}

static void test_bad_args(void **state)
{
    fx_t *f = *state;
    static cold_batch_item_t it[COLD_BATCH_MAX + 1];
    f->cb_runs = 0;
    assert_int_equal(cold_restore_batch(f->c, it, 0, batch_cb, f, NULL), KVMESH_EINVAL);
    assert_int_equal(cold_restore_batch(f->c, it, COLD_BATCH_MAX + 1, batch_cb, f, NULL),
                     KVMESH_EINVAL);
    assert_int_equal(cold_restore_batch(f->c, it, 1, NULL, f, NULL), KVMESH_EINVAL);
    assert_int_equal(f->cb_runs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_args, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
