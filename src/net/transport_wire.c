/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_wire.c — encoders and strict decoders for the data-plane byte layouts described in
 * transport_wire.h and docs/transport.md. Pure functions, no allocation.
 */
#include "net/transport_wire.h"

#include <string.h>

#include "core/util.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int status_ok(int32_t s)
{
    return s == 0 || (s >= KVMESH_ERROR_BAND_FIRST && s <= KVMESH_ERROR_BAND_LAST);
}

/* req: magic u32 | version u8 | op u8 | flags u16 (0) | req_id u64 | seg_id u64 | offset u64 |
 *      length u64 | token u64 */
void tpw_req_encode(const struct tpw_req *r, uint8_t out[TPW_REQ_SIZE])
{
    put32(out, TPW_REQ_MAGIC);
    out[4] = TPW_VERSION;
    out[5] = r->op;
    out[6] = out[7] = 0;
    put64(out + 8, r->req_id);
    put64(out + 16, r->seg_id);
    put64(out + 24, r->offset);
    put64(out + 32, r->length);
    put64(out + 40, r->token);
}

int tpw_req_decode(const uint8_t *buf, size_t len, struct tpw_req *out)
{
    if (len < TPW_REQ_SIZE || get32(buf) != TPW_REQ_MAGIC || buf[4] != TPW_VERSION)
        return KVMESH_EPROTO;
    if ((buf[5] != 1 && buf[5] != 2) || buf[6] || buf[7])
        return KVMESH_EPROTO;
    struct tpw_req r = {.op = buf[5],
                        .req_id = get64(buf + 8),
                        .seg_id = get64(buf + 16),
                        .offset = get64(buf + 24),
                        .length = get64(buf + 32),
                        .token = get64(buf + 40)};
    if (r.length == 0 || r.length > TPW_MAX_LEN)
        return KVMESH_EPROTO;
    *out = r;
    return 0;
}

/* resp: magic u32 | status i32 | reason u8 | pad u8[7] (0) | req_id u64 | length u64 */
void tpw_resp_encode(const struct tpw_resp *r, uint8_t out[TPW_RESP_SIZE])
{
    memset(out, 0, TPW_RESP_SIZE);
    put32(out, TPW_RESP_MAGIC);
    put32(out + 4, (uint32_t)r->status);
    out[8] = r->reason;
    put64(out + 16, r->req_id);
    put64(out + 24, r->length);
}

int tpw_resp_decode(const uint8_t *buf, size_t len, struct tpw_resp *out)
{
    if (len < TPW_RESP_SIZE || get32(buf) != TPW_RESP_MAGIC)
        return KVMESH_EPROTO;
    for (int i = 9; i < 16; i++)
        if (buf[i])
            return KVMESH_EPROTO;
    struct tpw_resp r = {.status = (int32_t)get32(buf + 4),
                         .reason = buf[8],
                         .req_id = get64(buf + 16),
                         .length = get64(buf + 24)};
    if (!status_ok(r.status) || r.reason >= SEG_R_MAX || r.length > TPW_MAX_LEN)
        return KVMESH_EPROTO;
    if (r.status != 0 && r.length != 0)
        return KVMESH_EPROTO;
    *out = r;
    return 0;
}

/* shmq: magic u32 | version u8 | pad u8 | flags u16 | seg_id u64 | token u64 */
void tpw_shmq_encode(const struct tpw_shmq *q, uint8_t out[TPW_SHMQ_SIZE])
{
    put32(out, TPW_SHMQ_MAGIC);
    out[4] = TPW_VERSION;
    out[5] = 0;
    out[6] = (uint8_t)q->flags;
    out[7] = (uint8_t)(q->flags >> 8);
    put64(out + 8, q->seg_id);
    put64(out + 16, q->token);
}

int tpw_shmq_decode(const uint8_t *buf, size_t len, struct tpw_shmq *out)
{
    if (len != TPW_SHMQ_SIZE || get32(buf) != TPW_SHMQ_MAGIC || buf[4] != TPW_VERSION || buf[5])
        return KVMESH_EPROTO;
    uint16_t flags = (uint16_t)(buf[6] | (buf[7] << 8));
    if (flags & ~TPW_SHMQ_WANT_FD)
        return KVMESH_EPROTO;
    out->flags = flags;
    out->seg_id = get64(buf + 8);
    out->token = get64(buf + 16);
    return 0;
}

/* shmr: magic u32 | status i32 | reason u32 | rights u32 | seg_size u64 | seg_id u64 |
 *       offset u64 | length u64 | expiry_ns u64 | token u64 | pad u64 (0) */
void tpw_shmr_encode(const struct tpw_shmr *r, uint8_t out[TPW_SHMR_SIZE])
{
    memset(out, 0, TPW_SHMR_SIZE);
    put32(out, TPW_SHMR_MAGIC);
    put32(out + 4, (uint32_t)r->status);
    put32(out + 8, r->reason);
    put32(out + 12, r->grant.rights);
    put64(out + 16, r->seg_size);
    put64(out + 24, r->grant.seg_id);
    put64(out + 32, r->grant.offset);
    put64(out + 40, r->grant.length);
    put64(out + 48, r->grant.expiry_ns);
    put64(out + 56, r->grant.token);
}

int tpw_shmr_decode(const uint8_t *buf, size_t len, struct tpw_shmr *out)
{
    if (len != TPW_SHMR_SIZE || get32(buf) != TPW_SHMR_MAGIC || get64(buf + 64) != 0)
        return KVMESH_EPROTO;
    struct tpw_shmr r = {.status = (int32_t)get32(buf + 4), .reason = get32(buf + 8)};
    r.grant.rights = get32(buf + 12);
    r.seg_size = get64(buf + 16);
    r.grant.seg_id = get64(buf + 24);
    r.grant.offset = get64(buf + 32);
    r.grant.length = get64(buf + 40);
    r.grant.expiry_ns = get64(buf + 48);
    r.grant.token = get64(buf + 56);
    if (!status_ok(r.status) || r.reason >= SEG_R_MAX)
        return KVMESH_EPROTO;
    if (r.status == 0) {
        if (r.grant.rights == 0 || (r.grant.rights & ~3u) || r.seg_size == 0 ||
            r.seg_size > SEG_MAX_SIZE || r.grant.length == 0 || r.grant.offset > r.seg_size ||
            r.grant.length > r.seg_size - r.grant.offset)
            return KVMESH_EPROTO;
    }
    *out = r;
    return 0;
}
