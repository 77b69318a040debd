/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the segment allocator's embedded block records (src/store/alloc.c,
 * alloc_reserve_rec / alloc_reserve_at_rec): the caller's record is the block's, lookup returns
 * it, the word an allocated block leaves unused is never written, release hands the record to
 * the allocator (which keeps or frees it: run under ASan to see no leak and no double free), and
 * records of both kinds mix under a random workload with the invariants checked; with the
 * caller's record source (alloc_new_recs) every record the allocator lets go, its own or a
 * released embedded one, goes back through rec_free, and a refused rec_new is KVMESH_ENOMEM. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kvmesh.h"
#include "store/alloc.h"

typedef struct obj { /* a caller's object embedding its block record, like the store's slot */
    alloc_blk_t blk;
    uint64_t tag;
} obj_t;

#define SPARE ((struct alloc_blk *)(uintptr_t)0x5a5a5a5a5a5a5a58ull)

static obj_t *obj_new(uint64_t tag)
{
    obj_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    o->blk.fprev = SPARE; /* the caller's word while the block is allocated */
    o->tag = tag;
    return o;
}

static void test_embedded_basic(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, 1 << 20), 0);
    obj_t *x = obj_new(1), *y = obj_new(2), *z = obj_new(3);
    assert_int_equal(alloc_reserve_rec(a, 100, &x->blk), 0);
    assert_int_equal(alloc_reserve_rec(a, 1000, &y->blk), 0);
    assert_int_equal(alloc_reserve_rec(a, 1, &z->blk), 0);
    assert_int_equal(x->blk.len, 100);
    assert_int_equal(y->blk.len, 1000);
    assert_true(x->blk.off % ALLOC_ALIGN == 0 && y->blk.off != x->blk.off);
    void *u = NULL;
    uint64_t len = 0;
    assert_int_equal(alloc_lookup(a, y->blk.off, &u, &len), 0);
    assert_ptr_equal(u, &y->blk);
    assert_int_equal(len, 1000);
    assert_ptr_equal(x->blk.fprev, SPARE);
    assert_ptr_equal(y->blk.fprev, SPARE);
    assert_ptr_equal(z->blk.fprev, SPARE);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats_t st;
    alloc_stats(a, &st);
    assert_int_equal(st.requested, 1101);
    assert_int_equal(st.n_used, 3);
    /* y's record becomes the free block's (its neighbours are allocated) */
    uint64_t yo = y->blk.off;
    assert_int_equal(alloc_release(a, yo), 0);
    assert_int_equal(alloc_release(a, yo), KVMESH_ENOENT);
    assert_int_equal(alloc_check(a), 0);
    /* x merges into y's free record, z merges with both */
    assert_int_equal(alloc_release(a, x->blk.off), 0);
    assert_int_equal(alloc_release(a, z->blk.off), 0);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats(a, &st);
    assert_int_equal(st.n_free, 1);
    assert_int_equal(st.used, 0);
    alloc_free(a);
}

static void test_embedded_at(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, 1 << 20), 0);
    obj_t *m = obj_new(1), *f = obj_new(2), *e = obj_new(3), *bad = obj_new(4);
    /* in the middle of the free block: free records on both sides */
    assert_int_equal(alloc_reserve_at_rec(a, 4096, 100, &m->blk), 0);
    assert_int_equal(alloc_reserve_at_rec(a, 0, 64, &f->blk), 0);                /* at the front */
    assert_int_equal(alloc_reserve_at_rec(a, (1 << 20) - 128, 128, &e->blk), 0); /* the end */
    assert_int_equal(alloc_reserve_at_rec(a, 4096 + 64, 10, &bad->blk), KVMESH_EEXIST);
    assert_int_equal(alloc_reserve_at_rec(a, 100, 10, &bad->blk), KVMESH_EINVAL);
    assert_ptr_equal(bad->blk.fprev, SPARE); /* untouched on an error */
    free(bad);
    assert_ptr_equal(m->blk.fprev, SPARE);
    assert_int_equal(alloc_check(a), 0);
    void *u = NULL;
    assert_int_equal(alloc_lookup(a, 4096, &u, NULL), 0);
    assert_ptr_equal(u, &m->blk);
    alloc_stats_t st;
    alloc_stats(a, &st);
    assert_int_equal(st.n_used, 3);
    assert_int_equal(st.n_free, 2);
    /* alloc_free leaves allocated blocks' embedded records to their owner */
    alloc_free(a);
    free(m);
    free(f);
    free(e);
}

static void test_mixed_workload(void **state)
{
    (void)state;
    const uint64_t size = 64ull << 20;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, size), 0);
    enum { N = 1500 };
    uint64_t off[N], len[N];
    obj_t *rec[N] = {0};
    bool live[N] = {0};
    srand(11);
    for (int step = 0; step < 30000; step++) {
        int i = rand() % N;
        if (live[i]) {
            if (rec[i])
                assert_ptr_equal(rec[i]->blk.fprev, SPARE);
            assert_int_equal(alloc_release(a, off[i]), 0);
            live[i] = false;
            rec[i] = NULL; /* (the allocator's now) */
        } else {
            len[i] = (uint64_t)(256 << (rand() % 8)) + (uint64_t)(rand() % 333);
            int rc;
            if (rand() % 2) {
                rec[i] = obj_new((uint64_t)i);
                rc = alloc_reserve_rec(a, len[i], &rec[i]->blk);
                if (rc == 0) {
                    off[i] = rec[i]->blk.off;
                } else {
                    free(rec[i]);
                    rec[i] = NULL;
                }
            } else {
                rc = alloc_reserve(a, len[i], &live[i], &off[i]);
            }
            assert_true(rc == 0 || rc == KVMESH_ENOSPC);
            live[i] = rc == 0;
        }
        if (step % 1000 == 0) {
            assert_int_equal(alloc_check(a), 0);
            for (int j = 0; j < N; j++) {
                if (!live[j])
                    continue;
                void *u = NULL;
                uint64_t l = 0;
                assert_int_equal(alloc_lookup(a, off[j], &u, &l), 0);
                assert_int_equal(l, len[j]);
                assert_ptr_equal(u, rec[j] ? (void *)&rec[j]->blk : (void *)&live[j]);
            }
        }
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; live[i] && j < N; j++)
            if (live[j])
                assert_true(off[i] + len[i] <= off[j] || off[j] + len[j] <= off[i]);
    assert_int_equal(alloc_check(a), 0);
    for (int i = 0; i < N; i++)
        if (live[i])
            assert_int_equal(alloc_release(a, off[i]), 0);
    alloc_stats_t st;
    alloc_stats(a, &st);
    assert_int_equal(st.n_free, 1);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.requested, 0);
    assert_int_equal(alloc_check(a), 0);
    alloc_free(a);
}

struct rec_src { /* the caller's record source: counts, and can refuse */
    int made, taken, live_obj;
    bool refuse;
};

static alloc_blk_t *src_new(void *ctx)
{
    struct rec_src *r = ctx;
    if (r->refuse)
        return NULL;
    r->made++;
    obj_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    o->tag = 0xfee; /* the allocator's own record */
    return &o->blk;
}

static void src_free(void *ctx, alloc_blk_t *rec)
{
    struct rec_src *r = ctx;
    obj_t *o = (obj_t *)rec;
    if (o->tag == 0xfee)
        r->taken++;
    else
        r->live_obj--; /* an embedded record released earlier */
    free(o);
}

static void test_caller_records(void **state)
{
    (void)state;
    struct rec_src src = {.refuse = true};
    alloc_recs_t recs = {.rec_new = src_new, .rec_free = src_free, .ctx = &src};
    alloc_t *a;
    assert_int_equal(alloc_new_recs(&a, 1 << 20, &recs), KVMESH_ENOMEM);
    src.refuse = false;
    assert_int_equal(alloc_new_recs(&a, 1 << 20, &recs), 0);
    assert_int_equal(src.made, 1);
    uint64_t off;
    assert_int_equal(alloc_reserve(a, 100, NULL, &off), KVMESH_EINVAL); /* embedded only */
    assert_int_equal(alloc_reserve_at(a, 0, 100, NULL), KVMESH_EINVAL);
    obj_t *o[8];
    for (int i = 0; i < 8; i++) {
        o[i] = obj_new((uint64_t)i + 1);
        src.live_obj++;
        assert_int_equal(alloc_reserve_rec(a, 1000, &o[i]->blk), 0);
    }
    /* a block in the middle of the free tail needs a second free record: refused, unchanged */
    obj_t *m = obj_new(99);
    src.refuse = true;
    assert_int_equal(alloc_reserve_at_rec(a, 512 * 1024, 64, &m->blk), KVMESH_ENOMEM);
    assert_int_equal(alloc_check(a), 0);
    src.refuse = false;
    src.live_obj++;
    assert_int_equal(alloc_reserve_at_rec(a, 512 * 1024, 64, &m->blk), 0);
    assert_int_equal(src.made, 2);
    /* release every other block, then the rest: records merge and go back through rec_free */
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(alloc_release(a, o[i]->blk.off), 0);
    for (int i = 1; i < 8; i += 2)
        assert_int_equal(alloc_release(a, o[i]->blk.off), 0);
    assert_int_equal(alloc_release(a, 512 * 1024), 0);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats_t st;
    alloc_stats(a, &st);
    assert_int_equal(st.n_free, 1);
    alloc_free(a);
    /* every record came back: the allocator's own ones and the released embedded ones */
    assert_int_equal(src.taken, src.made);
    assert_int_equal(src.live_obj, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_basic),
        cmocka_unit_test(test_embedded_at),
        cmocka_unit_test(test_mixed_workload),
        cmocka_unit_test(test_caller_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
