/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hash.c — the payload checksum's XXH3 variants (core/hash.h, hash_fast.c) give the system
 * libxxhash's XXH3-64 bit for bit: one-shot and streamed in random pieces, for every variant
 * this CPU runs, over lengths from 0 to a few MiB (every length up to 1 KiB: XXH3's short-input
 * paths and stripe/block edges), at odd start offsets, with several seeds; kvm_sum_update_copy
 * and kvm_sum_update_copy_stream (the fused copy + hash, with plain or streaming stores) give the
 * same digest and copy every byte, mixed with plain updates in random pieces; and a few fixed
 * values, so that the library itself is held to XXH3's frozen output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <cmocka.h>

#include "core/copy.h"
#include "core/hash.h"
#include "kvmesh.h"

#define BUF_MAX ((size_t)4 << 20)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13; /* xorshift64: the test's own reproducible stream */
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint8_t *random_buf(void)
{
    uint8_t *b = malloc(BUF_MAX + 64);
    assert_non_null(b);
    for (size_t i = 0; i < BUF_MAX + 64; i++)
        b[i] = (uint8_t)rnd();
    return b;
}

/* The streamed checksum of p[0..len) fed in random pieces (some empty, some 1 byte). */
static uint64_t streamed(const uint8_t *p, size_t len, uint64_t seed)
{
    struct kvm_sum s;
    kvm_sum_init(&s, seed);
    for (size_t done = 0; done < len;) {
        size_t k;
        switch (rnd() % 4) {
        case 0:
            k = rnd() % 3;
            break;
        case 1:
            k = rnd() % 300;
            break;
        case 2:
            k = rnd() % 5000;
            break;
        default:
            k = rnd() % (len + 1);
            break;
        }
        k = k > len - done ? len - done : k;
        kvm_sum_update(&s, p + done, k);
        done += k;
    }
    return kvm_sum_digest(&s);
}

static uint8_t *copy_dst; /* BUF_MAX + 64 bytes (test_variants_match_library) */

/* The same through kvm_sum_update_copy into copy_dst + off (pieces of every size, some plain
 * updates of bytes copied apart), checking that every byte arrived and nothing else changed. */
static uint64_t streamed_copy(const uint8_t *p, size_t len, uint64_t seed)
{
    static const size_t offs[] = {0, 32, 64 - 16}; /* aligned for streaming stores, or not */
    size_t off = rnd() % 2 ? offs[rnd() % 3] : (size_t)(rnd() % 64);
    memset(copy_dst, 0xa5, BUF_MAX + 64);
    struct kvm_sum s;
    kvm_sum_init(&s, seed);
    for (size_t done = 0; done < len;) {
        size_t k = rnd() % 2 ? rnd() % 70000 : rnd() % 1200;
        k = k > len - done ? len - done : k;
        switch (rnd() % 8) {
        case 0:
            memcpy(copy_dst + off + done, p + done, k);
            kvm_sum_update(&s, copy_dst + off + done, k);
            break;
        case 1:
        case 2:
        case 3:
            kvm_sum_update_copy_stream(&s, copy_dst + off + done, p + done, k);
            break;
        default:
            kvm_sum_update_copy(&s, copy_dst + off + done, p + done, k);
            break;
        }
        done += k;
    }
    kvm_copy_stream_fence();
    assert_memory_equal(copy_dst + off, p, len);
    for (size_t i = 0; i < off; i++)
        assert_int_equal(copy_dst[i], 0xa5);
    for (size_t i = off + len; i < BUF_MAX + 64; i += 4093)
        assert_int_equal(copy_dst[i], 0xa5);
    return kvm_sum_digest(&s);
}

static void check_one(const uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t want = XXH3_64bits_withSeed(p, len, seed);
    assert_int_equal(kvm_xxh3(p, len, seed), want);
    assert_int_equal(streamed(p, len, seed), want);
    if (len <= BUF_MAX)
        assert_int_equal(streamed_copy(p, len, seed), want);
    if (seed == KVM_HASH_SEED_CHECKSUM)
        assert_int_equal(kvm_checksum(p, len), want);
}

static void check_variant(const uint8_t *buf)
{
    static const uint64_t seeds[] = {KVM_HASH_SEED_CHECKSUM, KVM_HASH_SEED_IDENT, 1};
    for (size_t len = 0; len <= 1024; len++)
        check_one(buf + (len % 61), len, seeds[len % 3]);
    for (int i = 0; i < 200; i++) { /* random lengths up to BUF_MAX, random alignment */
        size_t len = (size_t)(rnd() % ((i % 4 == 0) ? BUF_MAX : 70000));
        check_one(buf + rnd() % 64, len, seeds[i % 3]);
    }
    check_one(buf, BUF_MAX, KVM_HASH_SEED_CHECKSUM);
    check_one(buf + 3, BUF_MAX - 3, KVM_HASH_SEED_CHECKSUM);
}

static void test_variants_match_library(void **state)
{
    (void)state;
    uint8_t *buf = random_buf();
    copy_dst = malloc(BUF_MAX + 64);
    assert_non_null(copy_dst);
    const char *names[8];
    size_t n = kvm_hash_impls(names, 8);
    assert_true(n >= 1);
    assert_string_equal(names[0], "xxhash");
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvm_hash_impl_use(names[i]), 0);
        assert_string_equal(kvm_hash_impl(), names[i]);
        check_variant(buf);
    }
    free(copy_dst);
    free(buf);
}

/* A state keeps the variant it began with, even when the process switches meanwhile. */
static void test_switch_mid_stream(void **state)
{
    (void)state;
    uint8_t *buf = random_buf();
    const char *names[8];
    size_t n = kvm_hash_impls(names, 8);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvm_hash_impl_use(names[i]), 0);
        struct kvm_sum s;
        kvm_sum_init(&s, KVM_HASH_SEED_CHECKSUM);
        kvm_sum_update(&s, buf, 100000);
        assert_int_equal(kvm_hash_impl_use(names[(i + 1) % n]), 0);
        kvm_sum_update(&s, buf + 100000, 900000);
        assert_int_equal(kvm_sum_digest(&s), XXH3_64bits(buf, 1000000));
    }
    free(buf);
}

/* XXH3's frozen values (xxHash's own sanity table: the PRIME32/PRIME64 generated buffer). */
static void test_known_values(void **state)
{
    (void)state;
    assert_int_equal(kvm_checksum(NULL, 0), UINT64_C(0x2D06800538D394C2));
    assert_int_equal(kvm_xxh3("", 0, 0), UINT64_C(0x2D06800538D394C2));
    const char *names[8];
    size_t n = kvm_hash_impls(names, 8);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvm_hash_impl_use(names[i]), 0);
        assert_int_equal(kvm_checksum("", 0), UINT64_C(0x2D06800538D394C2));
    }
}

static void test_bad_names(void **state)
{
    (void)state;
    assert_int_equal(kvm_hash_impl_use("sse9"), KVMESH_EINVAL);
    assert_int_equal(kvm_hash_impl_use(""), KVMESH_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variants_match_library),
        cmocka_unit_test(test_switch_mid_stream),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_bad_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
