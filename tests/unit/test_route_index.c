/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_route_index.c — the route table's ident index (src/route/route_index.c, a B-tree of item
 * pointers) against a reference model: random inserts, removes, replaces, lookups and ordered
 * walks from random seek points (strict and not), with the structure checked (ridx_check) as it
 * goes; ascending and descending bulk loads and drains (the splits and merges at the edges);
 * keys that are prefixes of each other and the empty key; clear with a per-item callback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kvmesh.h"
#include "route/route_index.h"

#define NKEYS 3000

typedef struct item {
    uint8_t len;
    uint8_t key[7];
    uint32_t gen; /* which copy (replace) */
} item_t;

static const uint8_t *item_key(const void *p, size_t *len)
{
    const item_t *it = p;
    *len = it->len;
    return it->key;
}

/* The model: key k's bytes, the keys in byte order, and which item holds each key now. */
static item_t keys[NKEYS];
static int order[NKEYS], rank_of[NKEYS];
static item_t *held[NKEYS];

static int key_cmp(const void *a, const void *b)
{
    const item_t *x = &keys[*(const int *)a], *y = &keys[*(const int *)b];
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->key, y->key, n) : 0;
    return c ? c : (int)x->len - (int)y->len;
}

/* Keys of 0..6 bytes over a 4-letter alphabet (many prefixes of each other, one empty key),
 * distinct; then their byte order. */
static void make_keys(void)
{
    for (int k = 0; k < NKEYS; k++) {
        int v = k, len = 0;
        while (v > 0 && len < 7) { /* bijective base 4: every key distinct, 0 is empty */
            v--;
            keys[k].key[len++] = (uint8_t)('a' + v % 4);
            v /= 4;
        }
        keys[k].len = (uint8_t)len;
        order[k] = k;
    }
    qsort(order, NKEYS, sizeof(int), key_cmp);
    for (int r = 0; r < NKEYS; r++)
        rank_of[order[r]] = r;
}

static item_t *item_new(int k, uint32_t gen)
{
    item_t *it = malloc(sizeof(*it));
    assert_non_null(it);
    *it = keys[k];
    it->gen = gen;
    return it;
}

/* The walk from the seek point matches the model for up to `steps` items. */
static void check_walk(ridx_t *x, int k, bool strict, int steps)
{
    ridx_iter_t it;
    int r = 0;
    if (k >= 0) {
        ridx_seek(x, &it, keys[k].key, keys[k].len, strict);
        r = rank_of[k] + (strict ? 1 : 0);
    } else {
        ridx_seek(x, &it, NULL, 0, false);
    }
    for (int s = 0; s < steps || steps < 0; s++) {
        while (r < NKEYS && !held[order[r]])
            r++;
        void *got = ridx_iter_get(&it);
        if (r == NKEYS) {
            assert_null(got);
            return;
        }
        assert_ptr_equal(got, held[order[r]]);
        ridx_iter_next(&it);
        r++;
    }
}

static void drain_all(ridx_t *x)
{
    for (int k = 0; k < NKEYS; k++) {
        if (!held[k])
            continue;
        assert_ptr_equal(ridx_remove(x, keys[k].key, keys[k].len), held[k]);
        free(held[k]);
        held[k] = NULL;
    }
    assert_null(x->root);
    assert_int_equal(x->count, 0);
    assert_int_equal(x->bytes, 0);
}

static void test_random_model(void **state)
{
    (void)state;
    make_keys();
    for (uint64_t seed = 1; seed <= 6; seed++) {
        kvm_rng_t rng;
        kvm_rng_seed(&rng, seed);
        ridx_t x;
        ridx_init(&x, item_key);
        size_t n = 0;
        /* grow toward a seed-dependent fill, then shrink: both directions of every rebalance */
        uint64_t bias = 35 + seed * 10;
        for (int op = 0; op < 40000; op++) {
            int k = (int)(kvm_rng_next(&rng) % NKEYS);
            uint64_t dice = kvm_rng_next(&rng) % 100;
            if (op > 30000)
                bias = 20;
            if (dice < bias) {
                if (held[k]) {
                    item_t *nw = item_new(k, (uint32_t)op);
                    assert_ptr_equal(ridx_replace(&x, nw), held[k]);
                    free(held[k]);
                    held[k] = nw;
                } else {
                    held[k] = item_new(k, (uint32_t)op);
                    assert_int_equal(ridx_insert(&x, held[k]), 0);
                    n++;
                }
            } else if (dice < 95) {
                void *got = ridx_remove(&x, keys[k].key, keys[k].len);
                assert_ptr_equal(got, held[k]);
                if (got)
                    n--;
                free(got);
                held[k] = NULL;
            } else {
                assert_ptr_equal(ridx_find(&x, keys[k].key, keys[k].len), held[k]);
                check_walk(&x, k, dice & 1, 40);
                if (!held[k]) {
                    item_t probe = keys[k];
                    assert_null(ridx_replace(&x, &probe));
                }
            }
            assert_int_equal(x.count, n);
            if (op % 997 == 0) {
                assert_int_equal(ridx_check(&x), 0);
                check_walk(&x, -1, false, -1);
            }
        }
        assert_int_equal(ridx_check(&x), 0);
        check_walk(&x, -1, false, -1);
        drain_all(&x);
    }
}

static void test_bulk_edges(void **state)
{
    (void)state;
    make_keys();
    for (int dir = 0; dir < 2; dir++) {
        ridx_t x;
        ridx_init(&x, item_key);
        for (int r = 0; r < NKEYS; r++) { /* ascending, then descending key order */
            int k = order[dir ? NKEYS - 1 - r : r];
            held[k] = item_new(k, 0);
            assert_int_equal(ridx_insert(&x, held[k]), 0);
        }
        assert_int_equal(ridx_check(&x), 0);
        check_walk(&x, -1, false, -1);
        for (int r = 0; r < NKEYS; r++) { /* drain from the first, or from the last, key */
            int k = order[dir ? r : NKEYS - 1 - r];
            assert_ptr_equal(ridx_remove(&x, keys[k].key, keys[k].len), held[k]);
            free(held[k]);
            held[k] = NULL;
            if (r % 101 == 0) {
                assert_int_equal(ridx_check(&x), 0);
                check_walk(&x, order[r], r & 1, 50);
            }
        }
        assert_null(x.root);
        assert_int_equal(ridx_check(&x), 0);
    }
}

static void count_each(void *item, void *ctx)
{
    (*(size_t *)ctx)++;
    free(item);
}

static void test_empty_and_clear(void **state)
{
    (void)state;
    make_keys();
    ridx_t x;
    ridx_init(&x, item_key);
    ridx_iter_t it;
    ridx_seek(&x, &it, NULL, 0, false);
    assert_null(ridx_iter_get(&it));
    ridx_iter_next(&it);
    assert_null(ridx_iter_get(&it));
    assert_null(ridx_find(&x, keys[0].key, 0));
    assert_null(ridx_remove(&x, keys[5].key, keys[5].len));
    assert_int_equal(ridx_check(&x), 0);
    for (int k = 0; k < 1000; k++)
        assert_int_equal(ridx_insert(&x, item_new(k, 0)), 0);
    assert_int_equal(ridx_check(&x), 0);
    ridx_seek(&x, &it, keys[0].key, 0, false); /* the empty key is the first */
    assert_int_equal(((item_t *)ridx_iter_get(&it))->len, 0);
    size_t n = 0;
    ridx_clear(&x, count_each, &n);
    assert_int_equal(n, 1000);
    assert_null(x.root);
    assert_int_equal(x.bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_model),
        cmocka_unit_test(test_bulk_edges),
        cmocka_unit_test(test_empty_and_clear),
    };
    return cmocka_run_group_tests(tests, 0, 0);
}
