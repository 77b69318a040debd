/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bytes.c — the byte codec (core/bytes.h): exact byte order of every integer width in
 * both orders, the sticky error of the reader (short input, trailing bytes, reserved zeros,
 * length prefixes) and of the writer (fixed capacity, growth bound), in-place tails and
 * patches, and handing a grown buffer over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/bytes.h"
#include "kvmesh.h"

static void test_byte_order(void **state)
{
    (void)state;
    uint8_t buf[64];
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, sizeof(buf));
    kvm_wr_u8(&w, 0xA1);
    kvm_wr_u16le(&w, 0x0102);
    kvm_wr_u32le(&w, 0x03040506u);
    kvm_wr_u64le(&w, 0x0708090A0B0C0D0Eull);
    kvm_wr_u16be(&w, 0x0102);
    kvm_wr_u32be(&w, 0x03040506u);
    kvm_wr_u64be(&w, 0x0708090A0B0C0D0Eull);
    size_t n = 0;
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    static const uint8_t want[] = {0xA1, 0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 0x0E, 0x0D, 0x0C,
                                   0x0B, 0x0A, 0x09, 0x08, 0x07, 0x01, 0x02, 0x03, 0x04, 0x05,
                                   0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E};
    assert_int_equal(n, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));

    kvm_rd_t r;
    kvm_rd_init(&r, buf, n);
    assert_int_equal(kvm_rd_u8(&r), 0xA1);
    assert_int_equal(kvm_rd_u16le(&r), 0x0102);
    assert_int_equal(kvm_rd_u32le(&r), 0x03040506u);
    assert_true(kvm_rd_u64le(&r) == 0x0708090A0B0C0D0Eull);
    assert_int_equal(kvm_rd_u16be(&r), 0x0102);
    assert_int_equal(kvm_rd_u32be(&r), 0x03040506u);
    assert_true(kvm_rd_u64be(&r) == 0x0708090A0B0C0D0Eull);
    assert_int_equal(kvm_rd_remaining(&r), 0);
    assert_true(kvm_rd_end(&r));
}

static void test_reader_sticky(void **state)
{
    (void)state;
    static const uint8_t in[] = {1, 2, 3, 4, 5};
    kvm_rd_t r;
    kvm_rd_init(&r, in, sizeof(in));
    assert_int_equal(kvm_rd_u16le(&r), 0x0201);
    assert_int_equal(kvm_rd_u32le(&r), 0); /* 3 bytes left: fails, reads 0 */
    assert_false(kvm_rd_ok(&r));
    assert_int_equal(kvm_rd_remaining(&r), 0);
    assert_int_equal(kvm_rd_u8(&r), 0); /* sticky: even a byte that is there */
    assert_null(kvm_rd_bytes(&r, 0));
    assert_false(kvm_rd_end(&r));

    /* trailing bytes fail "must be at end" */
    kvm_rd_init(&r, in, sizeof(in));
    assert_non_null(kvm_rd_bytes(&r, 4));
    assert_int_equal(kvm_rd_remaining(&r), 1);
    assert_true(kvm_rd_ok(&r));
    assert_false(kvm_rd_end(&r));
    assert_false(kvm_rd_ok(&r));

    /* copy zero-fills on failure */
    uint8_t dst[8];
    memset(dst, 0xEE, sizeof(dst));
    kvm_rd_init(&r, in, sizeof(in));
    kvm_rd_copy(&r, dst, sizeof(dst));
    for (size_t i = 0; i < sizeof(dst); i++)
        assert_int_equal(dst[i], 0);

    /* an empty reader over NULL */
    kvm_rd_init(&r, NULL, 0);
    assert_non_null(kvm_rd_bytes(&r, 0));
    assert_true(kvm_rd_end(&r));
    assert_int_equal(kvm_rd_u8(&r), 0);
    assert_false(kvm_rd_ok(&r));

    /* explicit failure */
    kvm_rd_init(&r, in, sizeof(in));
    kvm_rd_fail(&r);
    assert_null(kvm_rd_bytes(&r, 1));
}

static void test_reader_zeros_and_prefixes(void **state)
{
    (void)state;
    static const uint8_t z[] = {0, 0, 0, 1};
    kvm_rd_t r;
    kvm_rd_init(&r, z, sizeof(z));
    kvm_rd_zeros(&r, 3);
    assert_true(kvm_rd_ok(&r));
    kvm_rd_init(&r, z, sizeof(z));
    kvm_rd_zeros(&r, 4);
    assert_false(kvm_rd_ok(&r));

    static const uint8_t lp[] = {3, 0, 0, 0, 'a', 'b', 'c', 2, 0, 'x', 'y', 9, 0, 0, 0, 'z'};
    kvm_rd_init(&r, lp, sizeof(lp));
    uint32_t n32 = 99;
    const uint8_t *p = kvm_rd_lp32le(&r, &n32);
    assert_non_null(p);
    assert_int_equal(n32, 3);
    assert_memory_equal(p, "abc", 3);
    uint16_t n16 = 99;
    p = kvm_rd_lp16le(&r, &n16);
    assert_non_null(p);
    assert_int_equal(n16, 2);
    assert_memory_equal(p, "xy", 2);
    /* a count beyond the input */
    p = kvm_rd_lp32le(&r, &n32);
    assert_null(p);
    assert_int_equal(n32, 0);
    assert_false(kvm_rd_ok(&r));

    /* a count that wraps size_t arithmetic does not pass */
    static const uint8_t big[] = {0xFF, 0xFF, 0xFF, 0xFF, 1};
    kvm_rd_init(&r, big, sizeof(big));
    assert_null(kvm_rd_lp32le(&r, &n32));
}

static void test_writer_fixed(void **state)
{
    (void)state;
    uint8_t buf[6] = {0};
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, sizeof(buf));
    kvm_wr_u32le(&w, 0x11223344u);
    kvm_wr_u32le(&w, 0x55667788u); /* does not fit */
    kvm_wr_u8(&w, 0x99);           /* sticky: would fit, is not written */
    size_t n = 123;
    assert_int_equal(kvm_wr_finish(&w, &n), KVMESH_ETOOBIG);
    assert_int_equal(n, 123);
    assert_int_equal(buf[4], 0);
    assert_int_equal(buf[5], 0);

    /* exactly full is fine; zeros, reserve, patch */
    kvm_wr_fixed(&w, buf, sizeof(buf));
    kvm_wr_u32le(&w, 0);
    kvm_wr_zeros(&w, 1);
    uint8_t *q = kvm_wr_reserve(&w, 1);
    assert_non_null(q);
    *q = 0x42;
    kvm_wr_patch_u32le(&w, 0, 0xA0B0C0D0u);
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    assert_int_equal(n, 6);
    static const uint8_t want[] = {0xD0, 0xC0, 0xB0, 0xA0, 0, 0x42};
    assert_memory_equal(buf, want, 6);
    assert_null(kvm_wr_reserve(&w, 1));
    assert_int_equal(kvm_wr_finish(&w, &n), KVMESH_ETOOBIG);

    /* length prefixes that do not fit their count */
    uint8_t big[9];
    kvm_wr_fixed(&w, big, sizeof(big));
    kvm_wr_lp16le(&w, "", (size_t)UINT16_MAX + 1);
    assert_int_equal(kvm_wr_finish(&w, &n), KVMESH_ETOOBIG);
    kvm_wr_fixed(&w, big, sizeof(big));
    kvm_wr_lp16le(&w, "ab", 2);
    kvm_wr_lp32le(&w, "c", 1);
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    static const uint8_t lp[] = {2, 0, 'a', 'b', 1, 0, 0, 0, 'c'};
    assert_int_equal(n, 9);
    assert_memory_equal(big, lp, 9);

    /* the first error is the one reported */
    kvm_wr_fixed(&w, big, sizeof(big));
    kvm_wr_fail(&w, KVMESH_EINVAL);
    kvm_wr_zeros(&w, 100);
    assert_int_equal(kvm_wr_finish(&w, &n), KVMESH_EINVAL);
}

static void test_writer_tail(void **state)
{
    (void)state;
    uint8_t buf[10];
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, sizeof(buf));
    kvm_wr_u16le(&w, 7);
    size_t avail = 0;
    uint8_t *t = kvm_wr_tail(&w, 0, &avail);
    assert_ptr_equal(t, buf + 2);
    assert_int_equal(avail, 8);
    memcpy(t, "tail", 4);
    kvm_wr_advance(&w, 4);
    size_t n;
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    assert_int_equal(n, 6);
    assert_memory_equal(buf + 2, "tail", 4);
    /* asking for more than is left fails the writer */
    assert_null(kvm_wr_tail(&w, 5, &avail));
    assert_int_equal(avail, 0);
    assert_int_equal(kvm_wr_finish(&w, &n), KVMESH_ETOOBIG);

    /* growing: the tail grows to what is asked */
    kvm_wr_growing(&w, 1 << 16);
    t = kvm_wr_tail(&w, 1000, &avail);
    assert_non_null(t);
    assert_true(avail >= 1000);
    memset(t, 0x5A, 1000);
    kvm_wr_advance(&w, 1000);
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    assert_int_equal(n, 1000);
    kvm_wr_free(&w);
}

static void test_writer_growing(void **state)
{
    (void)state;
    kvm_wr_t w;
    kvm_wr_growing(&w, 4096);
    for (uint32_t i = 0; i < 1024; i++)
        kvm_wr_u32be(&w, i);
    size_t n = 0;
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    assert_int_equal(n, 4096);
    kvm_wr_u8(&w, 1); /* beyond the bound */
    assert_int_equal(kvm_wr_finish(&w, &n), KVMESH_ETOOBIG);
    assert_null(kvm_wr_take(&w, &n)); /* a failed writer hands nothing over (and frees) */
    assert_int_equal(n, 0);

    kvm_wr_growing(&w, 1 << 20);
    for (uint32_t i = 0; i < 3000; i++)
        kvm_wr_u32be(&w, i);
    uint8_t *p = kvm_wr_take(&w, &n);
    assert_non_null(p);
    assert_int_equal(n, 12000);
    kvm_rd_t r;
    kvm_rd_init(&r, p, n);
    for (uint32_t i = 0; i < 3000; i++)
        assert_int_equal(kvm_rd_u32be(&r), i);
    assert_true(kvm_rd_end(&r));
    free(p);
    assert_int_equal(w.len, 0); /* empty and reusable after take */
    kvm_wr_u8(&w, 3);
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    assert_int_equal(n, 1);
    kvm_wr_free(&w);

    /* nothing written: take gives NULL */
    kvm_wr_growing(&w, 16);
    assert_null(kvm_wr_take(&w, &n));

    /* zero bytes before the first allocation (found by fuzz_bytes under UBSan) */
    kvm_wr_growing(&w, 16);
    assert_non_null(kvm_wr_reserve(&w, 0));
    size_t avail = 99;
    assert_non_null(kvm_wr_tail(&w, 0, &avail));
    assert_int_equal(avail, 0);
    kvm_wr_bytes(&w, NULL, 0);
    kvm_wr_zeros(&w, 0);
    assert_int_equal(kvm_wr_finish(&w, &n), 0);
    assert_int_equal(n, 0);
    kvm_wr_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_order),
        cmocka_unit_test(test_reader_sticky),
        cmocka_unit_test(test_reader_zeros_and_prefixes),
        cmocka_unit_test(test_writer_fixed),
        cmocka_unit_test(test_writer_tail),
        cmocka_unit_test(test_writer_growing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
