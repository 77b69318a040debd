/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hex.h — the one hex helper: digit values, two-digit bytes, fixed-width numbers and byte
 * strings to hex. Formats that accept only one letter case (canonical encodings) say so with
 * the `cases` argument. Pure functions, any thread.
 */
#ifndef KVMESH_CORE_HEX_H
#define KVMESH_CORE_HEX_H

#include <stddef.h>
#include <stdint.h>

enum kvm_hex_case {
    KVM_HEX_LOWER = 1, /* a-f */
    KVM_HEX_UPPER = 2, /* A-F */
    KVM_HEX_ANY = 3,
};

/* The value 0..15 of hex digit c in the allowed letter cases, or -1. */
int kvm_hexval(char c, unsigned cases);
/* The byte of the two hex digits s[0], s[1] (both must exist), or -1. */
int kvm_hex_byte(const char *s, unsigned cases);
/* Parses exactly n hex digits (1..16) of s into *out; -1 when n is out of range or a character
 * is not a digit of the allowed cases, else 0. */
int kvm_hex_u64(const char *s, size_t n, unsigned cases, uint64_t *out);

/* The digit of v & 15 (lower case unless upper). */
char kvm_hex_digit(unsigned v, int upper);
/* Writes in[0..n) as 2n lower-case digits and a NUL into out (2n + 1 bytes); returns out. */
char *kvm_hex_encode(const void *in, size_t n, char *out);
/* Writes the `digits` (1..16) lower-case digits of v, most significant first, no NUL. */
void kvm_hex_u64_put(uint64_t v, int digits, char *out);

#endif
