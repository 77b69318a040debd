/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bytes.c — the byte reader and writer of bytes.h. The only place that checks bounds for the
 * hand-written wire formats: every read/write goes through rd_take / wr_room.
 */
#include "core/bytes.h"

#include <endian.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Every fixed-width integer of bytes.h: name, type, byte order, width in bytes. */
#define KVM_INT_FORMATS(X)                                                                         \
    X(u8, uint8_t, le, 1)                                                                          \
    X(u16le, uint16_t, le, 2)                                                                      \
    X(u32le, uint32_t, le, 4)                                                                      \
    X(u64le, uint64_t, le, 8)                                                                      \
    X(u16be, uint16_t, be, 2)                                                                      \
    X(u32be, uint32_t, be, 4)                                                                      \
    X(u64be, uint64_t, be, 8)

/* The per-field helpers below are inlined into each fixed-width reader and writer, so that with
 * the width a constant the byte loops fold into one load or store and the bound check stays in
 * line (each was a call of its own per field: rd_le 2.2% and wr_room 1.8% of a 4 KiB batch get's
 * samples, docs/performance.md "Batch items, eleventh round"). */
#define KVM_BYTES_INLINE static inline __attribute__((always_inline))

/* ---- reader -------------------------------------------------------------------------------- */

void kvm_rd_init(kvm_rd_t *r, const void *p, size_t len)
{
    KVM_ASSERT(p != NULL || len == 0);
    r->p = p;
    r->len = len;
    r->off = 0;
    r->bad = false;
}

KVM_BYTES_INLINE const uint8_t *rd_take(kvm_rd_t *r, size_t n)
{
    static const uint8_t empty[1];
    if (r->bad || r->len - r->off < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p ? r->p + r->off : empty;
    r->off += n;
    return p;
}

const uint8_t *kvm_rd_bytes(kvm_rd_t *r, size_t n)
{
    return rd_take(r, n);
}

void kvm_rd_copy(kvm_rd_t *r, void *dst, size_t n)
{
    const uint8_t *b = rd_take(r, n);
    if (b)
        memcpy(dst, b, n);
    else
        memset(dst, 0, n);
}

void kvm_rd_zeros(kvm_rd_t *r, size_t n)
{
    const uint8_t *b = rd_take(r, n);
    for (size_t i = 0; b && i < n; i++)
        if (b[i] != 0) {
            r->bad = true;
            return;
        }
}

/* n bytes at b as an unsigned integer, little or big endian (n 1, 2, 4 or 8: one load). */
KVM_BYTES_INLINE uint64_t load_int(const uint8_t *b, int n, bool be)
{
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;
    switch (n) {
    case 1:
        return b[0];
    case 2:
        memcpy(&v16, b, 2);
        return be ? be16toh(v16) : le16toh(v16);
    case 4:
        memcpy(&v32, b, 4);
        return be ? be32toh(v32) : le32toh(v32);
    default:
        KVM_ASSERT(n == 8);
        memcpy(&v64, b, 8);
        return be ? be64toh(v64) : le64toh(v64);
    }
}

KVM_BYTES_INLINE uint64_t rd_le(kvm_rd_t *r, int n)
{
    const uint8_t *b = rd_take(r, (size_t)n);
    return b ? load_int(b, n, false) : 0;
}

KVM_BYTES_INLINE uint64_t rd_be(kvm_rd_t *r, int n)
{
    const uint8_t *b = rd_take(r, (size_t)n);
    return b ? load_int(b, n, true) : 0;
}

/* The fixed-width readers. */
#define KVM_RD_INT(name, type, order, n)                                                           \
    type kvm_rd_##name(kvm_rd_t *r)                                                                \
    {                                                                                              \
        return (type)rd_##order(r, n);                                                             \
    }
KVM_INT_FORMATS(KVM_RD_INT)

/* A u16le/u32le count, then that many bytes. */
static const uint8_t *rd_lp(kvm_rd_t *r, int width, size_t *n)
{
    size_t c = (size_t)rd_le(r, width);
    const uint8_t *b = rd_take(r, c);
    *n = b ? c : 0;
    return b;
}

const uint8_t *kvm_rd_lp32le(kvm_rd_t *r, uint32_t *n)
{
    size_t c;
    const uint8_t *b = rd_lp(r, 4, &c);
    *n = (uint32_t)c;
    return b;
}

const uint8_t *kvm_rd_lp16le(kvm_rd_t *r, uint16_t *n)
{
    size_t c;
    const uint8_t *b = rd_lp(r, 2, &c);
    *n = (uint16_t)c;
    return b;
}

size_t kvm_rd_remaining(const kvm_rd_t *r)
{
    return r->bad ? 0 : r->len - r->off;
}

void kvm_rd_fail(kvm_rd_t *r)
{
    r->bad = true;
}

bool kvm_rd_ok(const kvm_rd_t *r)
{
    return !r->bad;
}

bool kvm_rd_end(kvm_rd_t *r)
{
    if (!r->bad && r->off != r->len)
        r->bad = true;
    return !r->bad;
}

/* ---- writer -------------------------------------------------------------------------------- */

void kvm_wr_fixed(kvm_wr_t *w, void *buf, size_t cap)
{
    KVM_ASSERT(buf != NULL || cap == 0);
    *w = (kvm_wr_t){.p = buf, .cap = cap, .max = cap};
}

void kvm_wr_growing(kvm_wr_t *w, size_t max)
{
    *w = (kvm_wr_t){.max = max, .grow = true};
}

void kvm_wr_fail(kvm_wr_t *w, int err)
{
    KVM_ASSERT(err < 0);
    if (!w->err)
        w->err = err;
}

/* Where 0 bytes go while a writer has no buffer (never written: callers put 0 bytes there). */
static uint8_t wr_empty[1];

/* wr_room's slow part: grows a growing writer for n more bytes, or fails it. */
static __attribute__((noinline)) bool wr_grow(kvm_wr_t *w, size_t n)
{
    if (!w->grow || w->max - w->len < n) {
        kvm_wr_fail(w, KVMESH_ETOOBIG);
        return false;
    }
    size_t need = w->len + n;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < need)
        cap = cap > w->max / 2 ? w->max : cap * 2;
    if (cap > w->max)
        cap = w->max;
    uint8_t *p = realloc(w->p, cap);
    if (!p) {
        kvm_wr_fail(w, KVMESH_ENOMEM);
        return false;
    }
    w->p = p;
    w->cap = cap;
    return true;
}

/* Makes room for n more bytes; false (writer failed) when they cannot fit. */
KVM_BYTES_INLINE bool wr_room(kvm_wr_t *w, size_t n)
{
    if (w->err)
        return false;
    if (w->cap - w->len >= n)
        return true;
    return wr_grow(w, n);
}

KVM_BYTES_INLINE uint8_t *wr_reserve(kvm_wr_t *w, size_t n)
{
    if (!wr_room(w, n))
        return NULL;
    if (!w->p)
        return wr_empty; /* n == 0: wr_room allocates for anything more */
    uint8_t *p = w->p + w->len;
    w->len += n;
    return p;
}

uint8_t *kvm_wr_reserve(kvm_wr_t *w, size_t n)
{
    return wr_reserve(w, n);
}

void kvm_wr_bytes(kvm_wr_t *w, const void *src, size_t n)
{
    uint8_t *p = wr_reserve(w, n);
    if (p && n)
        memcpy(p, src, n);
}

void kvm_wr_zeros(kvm_wr_t *w, size_t n)
{
    uint8_t *p = wr_reserve(w, n);
    if (p && n)
        memset(p, 0, n);
}

/* The low n bytes of v at p, little or big endian (n 1, 2, 4 or 8: one store). */
KVM_BYTES_INLINE void store_int(uint8_t *p, uint64_t v, int n, bool be)
{
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;
    switch (n) {
    case 1:
        p[0] = (uint8_t)v;
        break;
    case 2:
        v16 = be ? htobe16((uint16_t)v) : htole16((uint16_t)v);
        memcpy(p, &v16, 2);
        break;
    case 4:
        v32 = be ? htobe32((uint32_t)v) : htole32((uint32_t)v);
        memcpy(p, &v32, 4);
        break;
    default:
        KVM_ASSERT(n == 8);
        v64 = be ? htobe64(v) : htole64(v);
        memcpy(p, &v64, 8);
        break;
    }
}

KVM_BYTES_INLINE void wr_le(kvm_wr_t *w, uint64_t v, int n)
{
    uint8_t *p = wr_reserve(w, (size_t)n);
    if (p)
        store_int(p, v, n, false);
}

KVM_BYTES_INLINE void wr_be(kvm_wr_t *w, uint64_t v, int n)
{
    uint8_t *p = wr_reserve(w, (size_t)n);
    if (p)
        store_int(p, v, n, true);
}

/* The fixed-width writers. */
#define KVM_WR_INT(name, type, order, n)                                                           \
    void kvm_wr_##name(kvm_wr_t *w, type v)                                                        \
    {                                                                                              \
        wr_##order(w, v, n);                                                                       \
    }
KVM_INT_FORMATS(KVM_WR_INT)

/* A u16le/u32le count (n must fit it), then the n bytes. */
static void wr_lp(kvm_wr_t *w, int width, const void *src, size_t n)
{
    if (width < 8 && n >> (8 * width) != 0) {
        kvm_wr_fail(w, KVMESH_ETOOBIG);
        return;
    }
    wr_le(w, n, width);
    kvm_wr_bytes(w, src, n);
}

void kvm_wr_lp32le(kvm_wr_t *w, const void *src, size_t n)
{
    wr_lp(w, 4, src, n);
}

void kvm_wr_lp16le(kvm_wr_t *w, const void *src, size_t n)
{
    wr_lp(w, 2, src, n);
}

void kvm_wr_patch_u32le(kvm_wr_t *w, size_t at, uint32_t v)
{
    if (w->err)
        return;
    KVM_ASSERT(at <= w->len && w->len - at >= 4);
    for (int i = 0; i < 4; i++)
        w->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

uint8_t *kvm_wr_tail(kvm_wr_t *w, size_t want, size_t *avail)
{
    *avail = 0;
    if (!wr_room(w, want))
        return NULL;
    *avail = w->cap - w->len;
    return w->p ? w->p + w->len : wr_empty; /* no buffer yet: want was 0, *avail is 0 */
}

void kvm_wr_advance(kvm_wr_t *w, size_t n)
{
    if (w->err)
        return;
    KVM_ASSERT(w->cap - w->len >= n);
    w->len += n;
}

int kvm_wr_finish(const kvm_wr_t *w, size_t *len)
{
    if (w->err)
        return w->err;
    *len = w->len;
    return 0;
}

uint8_t *kvm_wr_take(kvm_wr_t *w, size_t *len)
{
    KVM_ASSERT(w->grow);
    uint8_t *p = w->err || w->len == 0 ? NULL : w->p;
    *len = p ? w->len : 0;
    if (!p)
        free(w->p);
    kvm_wr_growing(w, w->max);
    return p;
}

void kvm_wr_free(kvm_wr_t *w)
{
    if (w->grow) {
        free(w->p);
        kvm_wr_growing(w, w->max);
    }
}
