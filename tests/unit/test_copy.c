/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_copy.c — the streaming-store copy kernels (core/copy.h): every variant this CPU runs,
 * the portable "memcpy" one forced by name included, writes exactly the source bytes into the
 * destination and nothing outside it — every length up to 1 KiB (head/line/tail edges) and
 * random ones up to 2 MiB, at every source and destination offset within a cache line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/copy.h"
#include "kvmesh.h"

#define BUF_MAX ((size_t)2 << 20)
#define GUARD   128u
#define FILL    0xA5

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13; /* xorshift64: the test's own reproducible stream */
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

struct bufs {
    uint8_t *src, *dst; /* BUF_MAX + 2 * GUARD each, 64-byte aligned */
};

/* Copies len bytes from src + so to dst + GUARD + doff and checks the copy and the GUARD bytes
 * on either side. */
static void check_one(const struct bufs *b, size_t so, size_t doff, size_t len)
{
    uint8_t *d = b->dst + GUARD + doff;
    memset(b->dst, FILL, GUARD + doff + len + GUARD);
    kvm_copy_stream(d, b->src + so, len);
    kvm_copy_stream_fence();
    assert_memory_equal(d, b->src + so, len);
    for (size_t i = 0; i < GUARD + doff; i++)
        assert_int_equal(b->dst[i], FILL);
    for (size_t i = 0; i < GUARD; i++)
        assert_int_equal(d[len + i], FILL);
}

static void check_variant(const struct bufs *b)
{
    for (size_t len = 0; len <= 1024; len++)
        check_one(b, len % 64, (len * 7) % 64, len);
    for (size_t so = 0; so < 64; so++)
        for (size_t doff = 0; doff < 64; doff += 9)
            check_one(b, so, doff, 4096 + so);
    for (int i = 0; i < 24; i++) {
        size_t len = (size_t)(rnd() % (BUF_MAX - 64));
        check_one(b, (size_t)(rnd() % 64), (size_t)(rnd() % 64), len);
    }
}

static void test_variants_copy_exactly(void **state)
{
    (void)state;
    struct bufs b = {aligned_alloc(64, BUF_MAX + 2 * GUARD),
                     aligned_alloc(64, BUF_MAX + 2 * GUARD)};
    assert_non_null(b.src);
    assert_non_null(b.dst);
    for (size_t i = 0; i < BUF_MAX + 2 * GUARD; i++)
        b.src[i] = (uint8_t)rnd();
    const char *names[8];
    size_t n = kvm_copy_impls(names, 8);
    assert_true(n >= 1);
    assert_string_equal(names[0], "memcpy"); /* the portable path runs everywhere */
#if defined(__x86_64__)
    assert_true(n >= 2); /* sse2 is baseline x86-64 */
#endif
    const char *def = kvm_copy_impl();
    assert_string_equal(def, names[n - 1]); /* the default: the widest this CPU runs */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvm_copy_impl_use(names[i]), 0);
        assert_string_equal(kvm_copy_impl(), names[i]);
        check_variant(&b);
    }
    assert_int_equal(kvm_copy_impl_use(def), 0);
    free(b.src);
    free(b.dst);
}

static void test_bad_names(void **state)
{
    (void)state;
    assert_int_equal(kvm_copy_impl_use("avx9"), KVMESH_EINVAL);
    assert_int_equal(kvm_copy_impl_use(""), KVMESH_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variants_copy_exactly),
        cmocka_unit_test(test_bad_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
