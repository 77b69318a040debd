/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_hdr.c — the hand-written RpcHeader codec (rpc_hdr.h). The reader follows protobuf-c 1.4's
 * parsing rules exactly as src/core/wire_route.c does for the route record.
 */
#include "net/rpc_hdr.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

enum { WT_VARINT = 0, WT_64BIT = 1, WT_LEN = 2, WT_32BIT = 5 };
enum { F_STATUS = 1, F_ERROR = 2, F_BODY = 3 };

/* ---- encoder ------------------------------------------------------------------------------ */

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint32_t zigzag32(int32_t v)
{
    return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
}

size_t rpc_hdr_size(int32_t status, size_t error_len, size_t body_len)
{
    size_t n = 0;
    if (status)
        n += 1 + varint_len(zigzag32(status));
    if (error_len)
        n += 1 + varint_len(error_len) + error_len;
    if (body_len)
        n += 1 + varint_len(body_len) + body_len;
    return n;
}

static uint8_t *put_bytes(uint8_t *p, unsigned field, const void *b, size_t n)
{
    *p++ = (uint8_t)(field << 3 | WT_LEN);
    p = put_varint(p, n);
    memcpy(p, b, n);
    return p + n;
}

size_t rpc_hdr_encode(uint8_t *out, int32_t status, const char *error, size_t error_len,
                      const uint8_t *body, size_t body_len)
{
    uint8_t *p = out;
    if (status) {
        *p++ = (uint8_t)(F_STATUS << 3 | WT_VARINT);
        p = put_varint(p, zigzag32(status));
    }
    if (error_len)
        p = put_bytes(p, F_ERROR, error, error_len);
    if (body_len)
        p = put_bytes(p, F_BODY, body, body_len);
    KVM_ASSERT((size_t)(p - out) == rpc_hdr_size(status, error_len, body_len));
    return (size_t)(p - out);
}

/* ---- reader: protobuf-c 1.4's rules ------------------------------------------------------- */

struct rd {
    const uint8_t *p, *end;
};

/* parse_tag_and_wiretype: at most 5 bytes; a first byte without field bits fails. */
static bool rd_tag(struct rd *r, uint32_t *num, unsigned *wt)
{
    size_t rem = (size_t)(r->end - r->p);
    size_t max = rem > 5 ? 5 : rem;
    const uint8_t *d = r->p;
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

/* At most 10 bytes; bits beyond 64 dropped. */
static bool rd_varint(struct rd *r, uint64_t *out)
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

static bool rd_skip(struct rd *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return false;
    r->p += n;
    return true;
}

/* scan_length_prefixed_data: a prefix of at most 5 bytes, <= INT_MAX, in bounds. */
static bool rd_len(struct rd *r, const uint8_t **data, size_t *len)
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
    *data = val ? r->p + i + 1 : NULL;
    *len = val;
    r->p += i + 1 + val;
    return true;
}

/* One field into h (known) or skipped (unknown). False on malformed input. */
static bool rd_field(struct rd *r, struct rpc_hdr *h)
{
    uint32_t num;
    unsigned wt;
    uint64_t v;
    const uint8_t *data;
    size_t len;
    if (!rd_tag(r, &num, &wt))
        return false;
    bool known = num >= F_STATUS && num <= F_BODY;
    if (known && wt != (num == F_STATUS ? WT_VARINT : WT_LEN))
        return false;
    switch (wt) {
    case WT_VARINT:
        if (!rd_varint(r, &v))
            return false;
        if (num == F_STATUS) {
            uint32_t u = (uint32_t)v;
            h->status = (u & 1) ? (int32_t) ~(u >> 1) : (int32_t)(u >> 1);
        }
        return true;
    case WT_64BIT:
        return rd_skip(r, 8);
    case WT_32BIT:
        return rd_skip(r, 4);
    case WT_LEN:
        if (!rd_len(r, &data, &len))
            return false;
        if (num == F_ERROR) {
            h->error = len ? (const char *)data : "";
            h->error_len = len;
        } else if (num == F_BODY) {
            h->body = data;
            h->body_len = len;
        }
        return true;
    default: /* groups (3, 4) and 6, 7 */
        return false;
    }
}

int rpc_hdr_decode(const uint8_t *buf, size_t len, struct rpc_hdr *out)
{
    *out = (struct rpc_hdr){.error = ""};
    if (len == 0)
        return 0;
    struct rd r = {.p = buf, .end = buf + len};
    while (r.p < r.end) {
        if (!rd_field(&r, out))
            return kvm_errf(KVMESH_EPROTO, "RpcHeader of %zu bytes is malformed at byte %zu", len,
                            (size_t)(r.p - buf));
    }
    return 0;
}

char *rpc_hdr_error_cstr(const struct rpc_hdr *h)
{
    return strndup(h->error, h->error_len);
}
