/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hex.c — hex digits both ways (hex.h).
 */
#include "core/hex.h"

#include "core/util.h"

int kvm_hexval(char c, unsigned cases)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if ((cases & KVM_HEX_LOWER) && c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if ((cases & KVM_HEX_UPPER) && c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int kvm_hex_byte(const char *s, unsigned cases)
{
    int hi = kvm_hexval(s[0], cases);
    int lo = hi < 0 ? -1 : kvm_hexval(s[1], cases);
    return lo < 0 ? -1 : hi << 4 | lo;
}

int kvm_hex_u64(const char *s, size_t n, unsigned cases, uint64_t *out)
{
    if (n == 0 || n > 16)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = kvm_hexval(s[i], cases);
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

char kvm_hex_digit(unsigned v, int upper)
{
    return (upper ? "0123456789ABCDEF" : "0123456789abcdef")[v & 15];
}

char *kvm_hex_encode(const void *in, size_t n, char *out)
{
    const uint8_t *p = in;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = kvm_hex_digit(p[i] >> 4, 0);
        out[2 * i + 1] = kvm_hex_digit(p[i], 0);
    }
    out[2 * n] = '\0';
    return out;
}

void kvm_hex_u64_put(uint64_t v, int digits, char *out)
{
    KVM_ASSERT(digits >= 1 && digits <= 16);
    for (int i = digits - 1; i >= 0; i--) {
        out[i] = kvm_hex_digit((unsigned)v, 0);
        v >>= 4;
    }
}
