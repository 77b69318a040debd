/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the segment allocator (src/store/alloc.c): fit, split/merge, invariants under a
 * random workload, measured utilisation and fragmentation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_full_and_enospc),
        cmocka_unit_test(test_random_workload),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
