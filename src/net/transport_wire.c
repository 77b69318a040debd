/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_wire.c — encoders and strict decoders for the data-plane byte layouts described in
 * transport_wire.h and docs/transport.md, written with the core byte codec (core/bytes.h,
 * little-endian fields). Pure functions, no allocation.
 */
#include "net/transport_wire.h"

#include <string.h>

#include "core/bytes.h"
#include "core/util.h"

static int status_ok(int32_t s)
{
    return s == 0 || (s >= KVMESH_ERROR_BAND_FIRST && s <= KVMESH_ERROR_BAND_LAST);
}

/* Every header is written whole into its fixed-size buffer. */
static void fixed_done(const kvm_wr_t *w, size_t size)
{
    size_t n = 0;
    int rc = kvm_wr_finish(w, &n);
    KVM_ASSERT(rc == 0 && n == size);
}

/* req: magic u32 | version u8 | op u8 | flags u16 (0) | req_id u64 | seg_id u64 | offset u64 |
 *      length u64 | token u64 */
void tpw_req_encode(const struct tpw_req *r, uint8_t out[TPW_REQ_SIZE])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, TPW_REQ_SIZE);
    kvm_wr_u32le(&w, TPW_REQ_MAGIC);
    kvm_wr_u8(&w, TPW_VERSION);
    kvm_wr_u8(&w, r->op);
    kvm_wr_u16le(&w, 0);
    kvm_wr_u64le(&w, r->req_id);
    kvm_wr_u64le(&w, r->seg_id);
    kvm_wr_u64le(&w, r->offset);
    kvm_wr_u64le(&w, r->length);
    kvm_wr_u64le(&w, r->token);
    fixed_done(&w, TPW_REQ_SIZE);
}

int tpw_req_decode(const uint8_t *buf, size_t len, struct tpw_req *out)
{
    if (len < TPW_REQ_SIZE)
        return KVMESH_EPROTO;
    kvm_rd_t rd;
    kvm_rd_init(&rd, buf, TPW_REQ_SIZE);
    if (kvm_rd_u32le(&rd) != TPW_REQ_MAGIC || kvm_rd_u8(&rd) != TPW_VERSION)
        return KVMESH_EPROTO;
    struct tpw_req r = {.op = kvm_rd_u8(&rd)};
    kvm_rd_zeros(&rd, 2); /* flags */
    r.req_id = kvm_rd_u64le(&rd);
    r.seg_id = kvm_rd_u64le(&rd);
    r.offset = kvm_rd_u64le(&rd);
    r.length = kvm_rd_u64le(&rd);
    r.token = kvm_rd_u64le(&rd);
    if (!kvm_rd_end(&rd) || (r.op != 1 && r.op != 2))
        return KVMESH_EPROTO;
    if (r.length == 0 || r.length > TPW_MAX_LEN)
        return KVMESH_EPROTO;
    *out = r;
    return 0;
}

/* resp: magic u32 | status i32 | reason u8 | pad u8[7] (0) | req_id u64 | length u64 */
void tpw_resp_encode(const struct tpw_resp *r, uint8_t out[TPW_RESP_SIZE])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, TPW_RESP_SIZE);
    kvm_wr_u32le(&w, TPW_RESP_MAGIC);
    kvm_wr_u32le(&w, (uint32_t)r->status);
    kvm_wr_u8(&w, r->reason);
    kvm_wr_zeros(&w, 7);
    kvm_wr_u64le(&w, r->req_id);
    kvm_wr_u64le(&w, r->length);
    fixed_done(&w, TPW_RESP_SIZE);
}

int tpw_resp_decode(const uint8_t *buf, size_t len, struct tpw_resp *out)
{
    if (len < TPW_RESP_SIZE)
        return KVMESH_EPROTO;
    kvm_rd_t rd;
    kvm_rd_init(&rd, buf, TPW_RESP_SIZE);
    if (kvm_rd_u32le(&rd) != TPW_RESP_MAGIC)
        return KVMESH_EPROTO;
    struct tpw_resp r = {.status = (int32_t)kvm_rd_u32le(&rd)};
    r.reason = kvm_rd_u8(&rd);
    kvm_rd_zeros(&rd, 7);
    r.req_id = kvm_rd_u64le(&rd);
    r.length = kvm_rd_u64le(&rd);
    if (!kvm_rd_end(&rd))
        return KVMESH_EPROTO;
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
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, TPW_SHMQ_SIZE);
    kvm_wr_u32le(&w, TPW_SHMQ_MAGIC);
    kvm_wr_u8(&w, TPW_VERSION);
    kvm_wr_u8(&w, 0);
    kvm_wr_u16le(&w, q->flags);
    kvm_wr_u64le(&w, q->seg_id);
    kvm_wr_u64le(&w, q->token);
    fixed_done(&w, TPW_SHMQ_SIZE);
}

int tpw_shmq_decode(const uint8_t *buf, size_t len, struct tpw_shmq *out)
{
    if (len != TPW_SHMQ_SIZE)
        return KVMESH_EPROTO;
    kvm_rd_t rd;
    kvm_rd_init(&rd, buf, len);
    if (kvm_rd_u32le(&rd) != TPW_SHMQ_MAGIC || kvm_rd_u8(&rd) != TPW_VERSION)
        return KVMESH_EPROTO;
    kvm_rd_zeros(&rd, 1);
    uint16_t flags = kvm_rd_u16le(&rd);
    uint64_t seg_id = kvm_rd_u64le(&rd);
    uint64_t token = kvm_rd_u64le(&rd);
    if (!kvm_rd_end(&rd) || (flags & ~TPW_SHMQ_WANT_FD))
        return KVMESH_EPROTO;
    out->flags = flags;
    out->seg_id = seg_id;
    out->token = token;
    return 0;
}

/* shmr: magic u32 | status i32 | reason u32 | rights u32 | seg_size u64 | seg_id u64 |
 *       offset u64 | length u64 | expiry_ns u64 | token u64 | pad u64 (0) */
void tpw_shmr_encode(const struct tpw_shmr *r, uint8_t out[TPW_SHMR_SIZE])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, TPW_SHMR_SIZE);
    kvm_wr_u32le(&w, TPW_SHMR_MAGIC);
    kvm_wr_u32le(&w, (uint32_t)r->status);
    kvm_wr_u32le(&w, r->reason);
    kvm_wr_u32le(&w, r->grant.rights);
    kvm_wr_u64le(&w, r->seg_size);
    kvm_wr_u64le(&w, r->grant.seg_id);
    kvm_wr_u64le(&w, r->grant.offset);
    kvm_wr_u64le(&w, r->grant.length);
    kvm_wr_u64le(&w, r->grant.expiry_ns);
    kvm_wr_u64le(&w, r->grant.token);
    kvm_wr_zeros(&w, 8);
    fixed_done(&w, TPW_SHMR_SIZE);
}

int tpw_shmr_decode(const uint8_t *buf, size_t len, struct tpw_shmr *out)
{
    if (len != TPW_SHMR_SIZE)
        return KVMESH_EPROTO;
    kvm_rd_t rd;
    kvm_rd_init(&rd, buf, len);
    if (kvm_rd_u32le(&rd) != TPW_SHMR_MAGIC)
        return KVMESH_EPROTO;
    struct tpw_shmr r = {.status = (int32_t)kvm_rd_u32le(&rd)};
    r.reason = kvm_rd_u32le(&rd);
    r.grant.rights = kvm_rd_u32le(&rd);
    r.seg_size = kvm_rd_u64le(&rd);
    r.grant.seg_id = kvm_rd_u64le(&rd);
    r.grant.offset = kvm_rd_u64le(&rd);
    r.grant.length = kvm_rd_u64le(&rd);
    r.grant.expiry_ns = kvm_rd_u64le(&rd);
    r.grant.token = kvm_rd_u64le(&rd);
    kvm_rd_zeros(&rd, 8);
    if (!kvm_rd_end(&rd))
        return KVMESH_EPROTO;
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
