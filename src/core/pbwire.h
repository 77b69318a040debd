/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pbwire.h — the protobuf wire primitives shared by the hand-written codecs (the route record,
 * src/core/wire_route.c; the RPC header, src/net/rpc_hdr.c): varints, tags and length prefixes,
 * read with protobuf-c 1.4's exact rules and written as protobuf-c 1.4 writes them. Each codec
 * keeps its own message layout, merge rules and checks; only these primitives are shared, so
 * both accept exactly what protobuf-c accepts (their differential tests and fuzz targets check
 * it against protobuf-c).
 *
 * Limits (protobuf-c's, documented per reader):
 *   - a tag is at most 5 bytes; a first byte whose field-number bits are 0 is malformed;
 *   - a varint is at most 10 bytes; bits beyond 64 are dropped;
 *   - a length prefix is at most 5 bytes, its value <= INT_MAX and within the input;
 *   - fixed fields are 4 or 8 bytes, little-endian;
 *   - wire types 3, 4 (groups), 6 and 7 are malformed.
 * Readers return false on malformed or truncated input and then leave the reader's position
 * unspecified (the caller reports the error and stops). Readers never read outside [p, end).
 *
 * Writers assume the caller sized the output (pb_varint_len), and pb_put_tag takes field numbers
 * below 16 only (a one-byte tag: every field of the codecs that use it).
 *
 * Header-only (static inline): the codecs' hot loops keep these inlined as their own static
 * functions were.
 */
#ifndef KVMESH_CORE_PBWIRE_H
#define KVMESH_CORE_PBWIRE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

enum { PB_WT_VARINT = 0, PB_WT_64BIT = 1, PB_WT_LEN = 2, PB_WT_32BIT = 5 };

/* A reader over [p, end). */
typedef struct pb_rd {
    const uint8_t *p, *end;
} pb_rd_t;

/* Length-delimited bytes, pointing into the input. */
typedef struct pb_bin {
    const uint8_t *p; /* NULL when n == 0, as protobuf-c leaves it */
    size_t n;
} pb_bin_t;

/* ---- writers ------------------------------------------------------------------------------ */

/* Bytes of v as a varint (1..10). */
static inline size_t pb_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes v as a varint at p; returns the byte after it. */
static inline uint8_t *pb_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Writes the one-byte tag of field num (1..15) with wire type wt. */
static inline uint8_t *pb_put_tag(uint8_t *p, unsigned num, unsigned wt)
{
    KVM_ASSERT(num >= 1 && num < 16 && wt <= 7);
    *p++ = (uint8_t)(num << 3 | wt);
    return p;
}

/* sint32's zigzag encoding. */
static inline uint32_t pb_zigzag32(int32_t v)
{
    return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
}

/* Its inverse (a sint32 read from the varint's low 32 bits, as protobuf-c does). */
static inline int32_t pb_unzigzag32(uint32_t u)
{
    return (u & 1) ? (int32_t) ~(u >> 1) : (int32_t)(u >> 1);
}

/* ---- readers: protobuf-c 1.4's rules ------------------------------------------------------ */

/* protobuf-c's parse_tag_and_wiretype. The caller ensures p < end. */
static inline bool pb_rd_tag(pb_rd_t *r, uint32_t *num, unsigned *wt)
{
    size_t rem = (size_t)(r->end - r->p);
    size_t max = rem > 5 ? 5 : rem;
    const uint8_t *d = r->p;
    KVM_ASSERT(rem > 0);
    if ((d[0] & 0xf8) == 0)
        return false;
    *wt = d[0] & 7;
    uint32_t n = (uint32_t)(d[0] & 0x7f) >> 3;
    if ((d[0] & 0x80) == 0) {
        *num = n;
        r->p += 1;
        return true;
    }
    unsigned shift = 4;
    for (size_t i = 1; i < max; i++) {
        if (d[i] & 0x80) {
            n |= (uint32_t)(d[i] & 0x7f) << shift;
            shift += 7;
        } else {
            n |= (uint32_t)d[i] << shift;
            *num = n;
            r->p += i + 1;
            return true;
        }
    }
    return false;
}

/* protobuf-c's parse_uint64: at most 10 bytes, bits beyond 64 dropped. */
static inline bool pb_rd_varint(pb_rd_t *r, uint64_t *out)
{
    size_t rem = (size_t)(r->end - r->p);
    size_t max = rem < 10 ? rem : 10;
    uint64_t v = 0;
    for (size_t i = 0; i < max; i++) {
        uint8_t b = r->p[i];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            r->p += i + 1;
            *out = v;
            return true;
        }
    }
    return false;
}

/* A little-endian fixed field of n (4 or 8) bytes. */
static inline bool pb_rd_fixed(pb_rd_t *r, size_t n, uint64_t *out)
{
    KVM_ASSERT(n == 4 || n == 8);
    if ((size_t)(r->end - r->p) < n)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    *out = v;
    return true;
}

/* protobuf-c's scan_length_prefixed_data: a prefix of at most 5 bytes, <= INT_MAX, in bounds. */
static inline bool pb_rd_len(pb_rd_t *r, pb_bin_t *out)
{
    size_t rem = (size_t)(r->end - r->p);
    size_t max = rem < 5 ? rem : 5;
    size_t val = 0, i;
    for (i = 0; i < max; i++) {
        val |= (size_t)(r->p[i] & 0x7f) << (7 * i);
        if ((r->p[i] & 0x80) == 0)
            break;
    }
    if (i == max || val > INT_MAX || i + 1 + val > rem)
        return false;
    out->p = val ? r->p + i + 1 : NULL;
    out->n = val;
    r->p += i + 1 + val;
    return true;
}

#endif
