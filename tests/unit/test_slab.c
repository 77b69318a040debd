/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the record pool (src/core/slab.c): records are zeroed, aligned and distinct; a
 * freed record is reused by its own class only; chunks grow geometrically; records above
 * SLAB_MAX go to malloc; the limit forces the out-of-memory path without harming the pool; reset
 * releases the chunks only when nothing is live; the invariants hold under a random workload
 * (run under ASan to see no overlap, leak or double free). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/slab.h"
#include "kvmesh.h"

static void test_alloc_free_reuse(void **state)
{
    (void)state;
    slab_t s;
    slab_init(&s);
    uint8_t *a = slab_alloc(&s, 104), *b = slab_alloc(&s, 100), *c = slab_alloc(&s, 56);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal((uintptr_t)a % SLAB_ALIGN, 0);
    assert_int_equal((uintptr_t)b % SLAB_ALIGN, 0);
    assert_int_equal(b - a, 104); /* carved back to back: no per-record header */
    for (size_t i = 0; i < 104; i++)
        assert_int_equal(a[i], 0);
    memset(a, 0xab, 104);
    memset(b, 0xcd, 100);
    assert_int_equal(s.live_bytes, 104 + 104 + 56);
    assert_int_equal(slab_check(&s), 0);
    slab_free(&s, a, 104);
    assert_int_equal(slab_check(&s), 0);
    uint8_t *d = slab_alloc(&s, 56); /* another class: a is not handed out */
    assert_ptr_not_equal(d, a);
    uint8_t *e = slab_alloc(&s, 97); /* 97 rounds to 104: a's class */
    assert_ptr_equal(e, a);
    for (size_t i = 0; i < 104; i++)
        assert_int_equal(e[i], 0); /* zeroed again */
    slab_stats_t st;
    slab_stats(&s, &st);
    assert_int_equal(st.live_bytes, 104 + 104 + 56 + 56);
    assert_int_equal(st.free_bytes, 0);
    slab_free(&s, b, 100);
    slab_free(&s, c, 56);
    slab_free(&s, d, 56);
    slab_free(&s, e, 97);
    slab_free(&s, NULL, 8);
    assert_int_equal(slab_check(&s), 0);
    slab_stats(&s, &st);
    assert_int_equal(st.live_bytes, 0);
    assert_int_equal(st.free_bytes, 104 + 104 + 56 + 56);
    assert_true(slab_reset_if_empty(&s));
    assert_int_equal(s.chunk_bytes, 0);
    assert_false(slab_reset_if_empty(&s)); /* nothing to release */
    slab_fini(&s);
}

static void test_growth(void **state)
{
    (void)state;
    slab_t s;
    slab_init(&s);
    enum { N = 20000 };
    void **p = calloc(N, sizeof(*p));
    assert_non_null(p);
    for (size_t i = 0; i < N; i++) {
        p[i] = slab_alloc(&s, 24);
        assert_non_null(p[i]);
        memset(p[i], (int)i, 24);
    }
    /* chunks of a quarter of the pool up to SLAB_CHUNK_MAX: little beyond the records */
    assert_int_equal(s.chunk_next, SLAB_CHUNK_MAX);
    assert_true(s.chunk_bytes <= (size_t)N * 24 + SLAB_CHUNK_MAX + 1024);
    assert_int_equal(s.live_bytes, N * 24);
    assert_int_equal(slab_check(&s), 0);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(((uint8_t *)p[i])[23], (uint8_t)i); /* no two records overlap */
    for (size_t i = 0; i < N; i += 2)
        slab_free(&s, p[i], 24);
    size_t chunks = s.chunk_bytes;
    for (size_t i = 0; i < N; i += 2)
        assert_non_null(p[i] = slab_alloc(&s, 24)); /* reused: no new chunk */
    assert_int_equal(s.chunk_bytes, chunks);
    assert_int_equal(slab_check(&s), 0);
    free(p);
    slab_fini(&s);
}

static void test_big_records(void **state)
{
    (void)state;
    slab_t s;
    slab_init(&s);
    uint8_t *b = slab_alloc(&s, SLAB_MAX + 1);
    assert_non_null(b);
    assert_int_equal(s.big_live, 1);
    assert_int_equal(s.live_bytes, 0);
    assert_int_equal(s.chunk_bytes, 0);
    memset(b, 1, SLAB_MAX + 1);
    slab_free(&s, b, SLAB_MAX + 1);
    assert_int_equal(s.big_live, 0);
    slab_fini(&s);
}

static void test_limit_enomem(void **state)
{
    (void)state;
    slab_t s;
    slab_init(&s);
    slab_set_limit(&s, SLAB_CHUNK_MIN + 2 * SLAB_CHUNK_MIN); /* the first two chunks */
    size_t n = 0;
    void *p[256];
    while (n < 256 && (p[n] = slab_alloc(&s, 64)) != NULL)
        n++;
    assert_true(n > 0 && n < 256); /* refused once the limit is reached */
    assert_int_equal(s.chunk_bytes, 3 * SLAB_CHUNK_MIN);
    assert_int_equal(slab_check(&s), 0);
    slab_free(&s, p[0], 64);
    assert_ptr_equal(slab_alloc(&s, 64), p[0]); /* a free record still serves past the limit */
    assert_false(slab_reset_if_empty(&s));      /* records are live */
    for (size_t i = 0; i < n; i++)
        slab_free(&s, p[i], 64);
    assert_int_equal(slab_check(&s), 0);
    assert_true(slab_reset_if_empty(&s));
    slab_fini(&s);
}

static void test_random_workload(void **state)
{
    (void)state;
    slab_t s;
    slab_init(&s);
    enum { N = 4096 };
    void *p[N] = {0};
    size_t sz[N] = {0};
    uint64_t x = 88172645463325252ull;
    for (int step = 0; step < 200000; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = x % N;
        if (p[i]) {
            for (size_t j = 0; j < sz[i]; j++)
                assert_int_equal(((uint8_t *)p[i])[j], (uint8_t)(i + sz[i]));
            slab_free(&s, p[i], sz[i]);
            p[i] = NULL;
        } else {
            sz[i] = 1 + (x >> 20) % (SLAB_MAX + 40);
            assert_non_null(p[i] = slab_alloc(&s, sz[i]));
            memset(p[i], (int)(uint8_t)(i + sz[i]), sz[i]);
        }
        if (step % 20000 == 0)
            assert_int_equal(slab_check(&s), 0);
    }
    for (size_t i = 0; i < N; i++)
        slab_free(&s, p[i], sz[i]);
    assert_int_equal(slab_check(&s), 0);
    assert_int_equal(s.live_bytes, 0);
    assert_int_equal(s.big_live, 0);
    slab_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_reuse), cmocka_unit_test(test_growth),
        cmocka_unit_test(test_big_records),      cmocka_unit_test(test_limit_enomem),
        cmocka_unit_test(test_random_workload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
