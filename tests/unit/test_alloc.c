/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the segment allocator (src/store/alloc.c): fit, split/merge, invariants under a
 * random workload, measured utilisation and fragmentation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvmesh.h"
#include "store/alloc.h"

static void test_basic(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, 1 << 20), 0);
    uint64_t o1, o2, o3;
    assert_int_equal(alloc_reserve(a, 100, (void *)1, &o1), 0);
    assert_int_equal(alloc_reserve(a, 1000, (void *)2, &o2), 0);
    assert_int_equal(alloc_reserve(a, 1, (void *)3, &o3), 0);
    assert_true(o1 % ALLOC_ALIGN == 0 && o2 % ALLOC_ALIGN == 0 && o3 % ALLOC_ALIGN == 0);
    assert_true(o1 != o2 && o2 != o3);
    void *u;
    uint64_t len;
    assert_int_equal(alloc_lookup(a, o2, &u, &len), 0);
    assert_ptr_equal(u, (void *)2);
    assert_int_equal(len, 1000);
    assert_int_equal(alloc_check(a), 0);
    assert_int_equal(alloc_release(a, o2), 0);
    assert_int_equal(alloc_release(a, o2), KVMESH_ENOENT);
    assert_int_equal(alloc_release(a, o1), 0);
    assert_int_equal(alloc_release(a, o3), 0);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats_t st;
    alloc_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.n_free, 1); /* everything merged back into one block */
    assert_int_equal(st.largest_free, 1 << 20);
    alloc_free(a);
}

static void test_full_and_enospc(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, 64 << 10), 0);
    uint64_t offs[64];
    for (int i = 0; i < 64; i++)
        assert_int_equal(alloc_reserve(a, 1024, NULL, &offs[i]), 0);
    uint64_t x;
    assert_int_equal(alloc_reserve(a, 1, NULL, &x), KVMESH_ENOSPC);
    assert_false(alloc_can_fit(a, 1));
    assert_int_equal(alloc_release(a, offs[10]), 0);
    assert_true(alloc_can_fit(a, 1024));
    assert_int_equal(alloc_reserve(a, 1024, NULL, &x), 0);
    assert_int_equal(x, offs[10]);
    assert_int_equal(alloc_reserve(a, (64 << 10) + 1, NULL, &x), KVMESH_ENOSPC);
    assert_int_equal(alloc_check(a), 0);
    alloc_free(a);
}

static void test_random_workload(void **state)
{
    (void)state;
    const uint64_t size = 256ull << 20;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, size), 0);
    enum { N = 2000 };
    uint64_t off[N], len[N];
    bool live[N] = {0};
    srand(7);
    uint64_t peak_requested = 0;
    for (int step = 0; step < 40000; step++) {
        int i = rand() % N;
        if (live[i]) {
            assert_int_equal(alloc_release(a, off[i]), 0);
            live[i] = false;
        } else {
            /* KV-block-like sizes: 4 KiB .. 1 MiB, with some odd sizes */
            len[i] = (uint64_t)(4096 << (rand() % 9)) + (uint64_t)(rand() % 977);
            int rc = alloc_reserve(a, len[i], &live[i], &off[i]);
            assert_true(rc == 0 || rc == KVMESH_ENOSPC);
            live[i] = rc == 0;
        }
        if (step % 5000 == 0)
            assert_int_equal(alloc_check(a), 0);
        alloc_stats_t st;
        alloc_stats(a, &st);
        if (st.requested > peak_requested)
            peak_requested = st.requested;
        /* internal waste is bounded: rounded sizes exceed requests by < 1/16 + alignment */
        assert_true(st.used <=
                    st.requested + st.requested / ALLOC_SL_COUNT + st.n_used * ALLOC_ALIGN);
    }
    /* no overlap between live blocks */
    for (int i = 0; i < N; i++)
        for (int j = i + 1; live[i] && j < N; j++)
            if (live[j])
                assert_true(off[i] + len[i] <= off[j] || off[j] + len[j] <= off[i]);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats_t st;
    alloc_stats(a, &st);
    print_message(
        "alloc: used %.1f%% of %llu MiB, fragmentation %.3f, blocks %llu used %llu free\n",
        100.0 * (double)st.used / (double)st.size, (unsigned long long)(size >> 20),
        st.fragmentation, (unsigned long long)st.n_used, (unsigned long long)st.n_free);
    for (int i = 0; i < N; i++)
        if (live[i])
            assert_int_equal(alloc_release(a, off[i]), 0);
    alloc_stats(a, &st);
    assert_int_equal(st.n_free, 1);
    assert_int_equal(st.used, 0);
    alloc_free(a);
}

static void test_bad_args(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, 0), KVMESH_EINVAL);
    assert_int_equal(alloc_new(&a, 10), KVMESH_EINVAL);
    assert_int_equal(alloc_new(&a, 4096), 0);
    uint64_t o;
    assert_int_equal(alloc_reserve(a, 0, NULL, &o), KVMESH_ENOSPC);
    assert_int_equal(alloc_release(a, 12345), KVMESH_ENOENT);
    alloc_free(a);
}

/* The 32-bit block record's limits (alloc.h): a segment is at most 256 GiB, a block at most
 * ALLOC_MAX_LEN bytes; both ends work at their limit and are refused just past it with the
 * message. (Only the bookkeeping is exercised: no segment memory exists.) */
static void test_limits(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, ALLOC_MAX_SIZE + ALLOC_ALIGN), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "a segment is at most 256 GiB"));
    assert_int_equal(alloc_new(&a, ALLOC_MAX_SIZE), 0);
    uint64_t o1, o2, o3, len;
    assert_int_equal(alloc_reserve(a, (uint64_t)ALLOC_MAX_LEN + 1, NULL, &o1), KVMESH_ETOOBIG);
    assert_non_null(strstr(kvmesh_last_error(), "an object is at most 4 GiB - 1 byte"));
    assert_int_equal(alloc_reserve_at(a, 0, (uint64_t)ALLOC_MAX_LEN + 1, NULL), KVMESH_ETOOBIG);
    assert_false(alloc_can_fit(a, (uint64_t)ALLOC_MAX_LEN + 1));
    assert_int_equal(alloc_reserve(a, ALLOC_MAX_LEN, NULL, &o1), 0);
    assert_int_equal(alloc_reserve(a, ALLOC_MAX_LEN, NULL, &o2), 0);
    /* the last unit of the segment: the largest offset a record holds */
    uint64_t last = ALLOC_MAX_SIZE - ALLOC_ALIGN;
    assert_int_equal(alloc_reserve_at(a, last, 1, (void *)3), 0);
    void *u;
    assert_int_equal(alloc_lookup(a, last, &u, &len), 0);
    assert_ptr_equal(u, (void *)3);
    assert_int_equal(len, 1);
    assert_int_equal(alloc_lookup(a, o2, NULL, &len), 0);
    assert_int_equal(len, ALLOC_MAX_LEN);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats_t st;
    alloc_stats(a, &st);
    assert_int_equal(st.largest_free, last - 2 * ((uint64_t)ALLOC_MAX_LEN + 1));
    assert_int_equal(alloc_reserve(a, 4096, NULL, &o3), 0);
    assert_true(o3 > o2 && o3 < last);
    assert_int_equal(alloc_release(a, o1), 0);
    assert_int_equal(alloc_release(a, last), 0);
    assert_int_equal(alloc_release(a, o2), 0);
    assert_int_equal(alloc_release(a, o3), 0);
    assert_int_equal(alloc_check(a), 0);
    alloc_stats(a, &st); /* one free block of the whole 256 GiB: 2^32 units */
    assert_int_equal(st.n_free, 1);
    assert_int_equal(st.largest_free, ALLOC_MAX_SIZE);
    alloc_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),           cmocka_unit_test(test_full_and_enospc),
        cmocka_unit_test(test_random_workload), cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
