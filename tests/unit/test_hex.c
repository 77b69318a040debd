/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hex.c — the hex helper (core/hex.h): digit values per letter case, two-digit bytes,
 * fixed-width numbers both ways and byte strings to hex.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/hex.h"

static void test_digits(void **state)
{
    (void)state;
    assert_int_equal(kvm_hexval('0', KVM_HEX_ANY), 0);
    assert_int_equal(kvm_hexval('9', KVM_HEX_LOWER), 9);
    assert_int_equal(kvm_hexval('a', KVM_HEX_ANY), 10);
    assert_int_equal(kvm_hexval('F', KVM_HEX_ANY), 15);
    assert_int_equal(kvm_hexval('f', KVM_HEX_UPPER), -1);
    assert_int_equal(kvm_hexval('F', KVM_HEX_LOWER), -1);
    assert_int_equal(kvm_hexval('g', KVM_HEX_ANY), -1);
    assert_int_equal(kvm_hexval('/', KVM_HEX_ANY), -1);
    assert_int_equal(kvm_hexval('\0', KVM_HEX_ANY), -1);
    for (unsigned v = 0; v < 16; v++) {
        assert_int_equal(kvm_hexval(kvm_hex_digit(v, 0), KVM_HEX_LOWER), (int)v);
        assert_int_equal(kvm_hexval(kvm_hex_digit(v, 1), KVM_HEX_UPPER), (int)v);
    }
    assert_int_equal(kvm_hex_byte("7f", KVM_HEX_ANY), 0x7f);
    assert_int_equal(kvm_hex_byte("A0", KVM_HEX_UPPER), 0xa0);
    assert_int_equal(kvm_hex_byte("a0", KVM_HEX_UPPER), -1);
    assert_int_equal(kvm_hex_byte("0z", KVM_HEX_ANY), -1);
    assert_int_equal(kvm_hex_byte("\0"
                                  "1",
                                  KVM_HEX_ANY),
                     -1); /* stops at the first bad digit */
}

static void test_numbers_and_strings(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(kvm_hex_u64("00000000000000ff", 16, KVM_HEX_LOWER, &v), 0);
    assert_true(v == 0xff);
    assert_int_equal(kvm_hex_u64("FFFFFFFFFFFFFFFF", 16, KVM_HEX_ANY, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 7;
    assert_int_equal(kvm_hex_u64("00000000000000FF", 16, KVM_HEX_LOWER, &v), -1);
    assert_int_equal(kvm_hex_u64("12345678901234567", 17, KVM_HEX_ANY, &v), -1);
    assert_int_equal(kvm_hex_u64("", 0, KVM_HEX_ANY, &v), -1);
    assert_true(v == 7); /* untouched on failure */

    char h[17] = {0};
    kvm_hex_u64_put(0x0123456789abcdefull, 16, h);
    assert_string_equal(h, "0123456789abcdef");
    memset(h, 0, sizeof(h));
    kvm_hex_u64_put(0xabcull, 8, h);
    assert_string_equal(h, "00000abc");

    static const uint8_t in[] = {0x00, 0x01, 0xab, 0xff};
    char out[9];
    assert_ptr_equal(kvm_hex_encode(in, sizeof(in), out), out);
    assert_string_equal(out, "0001abff");
    assert_string_equal(kvm_hex_encode(in, 0, out), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digits),
        cmocka_unit_test(test_numbers_and_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
