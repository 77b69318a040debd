/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_hdr.c — the hand-written RpcHeader codec (rpc_hdr.h). The reader follows protobuf-c 1.4's
 * parsing rules exactly as src/core/wire_route.c does for the route record, with the same wire
 * primitives (src/core/pbwire.h).
 */
#include "net/rpc_hdr.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/pbwire.h"
#include "core/util.h"

enum { F_STATUS = 1, F_ERROR = 2, F_BODY = 3 };

/* ---- encoder ------------------------------------------------------------------------------ */

size_t rpc_hdr_size(int32_t status, size_t error_len, size_t body_len)
{
    size_t n = 0;
    if (status)
        n += 1 + pb_varint_len(pb_zigzag32(status));
    if (error_len)
        n += 1 + pb_varint_len(error_len) + error_len;
    if (body_len)
        n += 1 + pb_varint_len(body_len) + body_len;
    return n;
}

static uint8_t *put_bytes(uint8_t *p, unsigned field, const void *b, size_t n)
{
    p = pb_put_varint(pb_put_tag(p, field, PB_WT_LEN), n);
    memcpy(p, b, n);
    return p + n;
}

size_t rpc_hdr_encode(uint8_t *out, int32_t status, const char *error, size_t error_len,
                      const uint8_t *body, size_t body_len)
{
    uint8_t *p = out;
    if (status)
        p = pb_put_varint(pb_put_tag(p, F_STATUS, PB_WT_VARINT), pb_zigzag32(status));
    if (error_len)
        p = put_bytes(p, F_ERROR, error, error_len);
    if (body_len)
        p = put_bytes(p, F_BODY, body, body_len);
    KVM_ASSERT((size_t)(p - out) == rpc_hdr_size(status, error_len, body_len));
    return (size_t)(p - out);
}

/* ---- reader: protobuf-c 1.4's rules ------------------------------------------------------- */

/* One field into h (known) or skipped (unknown). False on malformed input. */
static bool rd_field(pb_rd_t *r, struct rpc_hdr *h)
{
    uint32_t num;
    unsigned wt;
    uint64_t v;
    pb_bin_t bin;
    if (!pb_rd_tag(r, &num, &wt))
        return false;
    bool known = num >= F_STATUS && num <= F_BODY;
    if (known && wt != (num == F_STATUS ? PB_WT_VARINT : PB_WT_LEN))
        return false;
    switch (wt) {
    case PB_WT_VARINT:
        if (!pb_rd_varint(r, &v))
            return false;
        if (num == F_STATUS)
            h->status = pb_unzigzag32((uint32_t)v);
        return true;
    case PB_WT_64BIT: /* unknown fields: skipped */
        return pb_rd_fixed(r, 8, &v);
    case PB_WT_32BIT:
        return pb_rd_fixed(r, 4, &v);
    case PB_WT_LEN:
        if (!pb_rd_len(r, &bin))
            return false;
        if (num == F_ERROR) {
            h->error = bin.n ? (const char *)bin.p : "";
            h->error_len = bin.n;
        } else if (num == F_BODY) {
            h->body = bin.p;
            h->body_len = bin.n;
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
    pb_rd_t r = {.p = buf, .end = buf + len};
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
