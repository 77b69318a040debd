/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frame.c — fixed frame header codec (see frame.h), written with the core byte codec
 * (core/bytes.h, big-endian fields). Pure functions, no allocation, no I/O; every field of
 * external input is checked before it is trusted.
 */
#include "net/frame.h"

#include <string.h>

#include "core/bytes.h"
#include "core/util.h"

void frame_encode(const struct frame_header *h, uint8_t out[FRAME_FIXED_SIZE])
{
    KVM_ASSERT(h->kind >= 1 && h->kind <= FRAME_KIND_MAX);
    KVM_ASSERT(h->header_len <= FRAME_MAX_HEADER_BYTES);
    KVM_ASSERT((h->trace.flags & ~FRAME_TRACE_SAMPLED) == 0);
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, FRAME_FIXED_SIZE);
    kvm_wr_u32be(&w, FRAME_MAGIC);
    kvm_wr_u8(&w, h->version ? h->version : FRAME_VERSION);
    kvm_wr_u8(&w, h->kind);
    kvm_wr_u16be(&w, h->type);
    kvm_wr_u64be(&w, h->request_id);
    kvm_wr_u32be(&w, h->deadline_ms);
    kvm_wr_u32be(&w, h->header_len);
    kvm_wr_u64be(&w, h->payload_len);
    kvm_wr_bytes(&w, h->trace.trace_id, FRAME_TRACE_ID_LEN);
    kvm_wr_bytes(&w, h->trace.span_id, FRAME_SPAN_ID_LEN);
    kvm_wr_u8(&w, h->trace.flags);
    kvm_wr_zeros(&w, FRAME_FIXED_SIZE - w.len); /* reserved */
    size_t n = 0;
    int rc = kvm_wr_finish(&w, &n);
    KVM_ASSERT(rc == 0 && n == FRAME_FIXED_SIZE);
}

enum frame_error frame_decode(const uint8_t *buf, size_t len, uint64_t max_frame_bytes,
                              struct frame_header *out)
{
    memset(out, 0, sizeof(*out));
    if (len < FRAME_FIXED_SIZE)
        return FRAME_ERR_SHORT;
    kvm_rd_t r;
    kvm_rd_init(&r, buf, FRAME_FIXED_SIZE);
    if (kvm_rd_u32be(&r) != FRAME_MAGIC)
        return FRAME_ERR_MAGIC;
    out->version = kvm_rd_u8(&r);
    if (out->version != FRAME_VERSION)
        return FRAME_ERR_VERSION;
    out->kind = kvm_rd_u8(&r);
    if (out->kind < 1 || out->kind > FRAME_KIND_MAX)
        return FRAME_ERR_KIND;
    out->type = kvm_rd_u16be(&r);
    out->request_id = kvm_rd_u64be(&r);
    out->deadline_ms = kvm_rd_u32be(&r);
    out->header_len = kvm_rd_u32be(&r);
    out->payload_len = kvm_rd_u64be(&r);
    kvm_rd_copy(&r, out->trace.trace_id, FRAME_TRACE_ID_LEN);
    kvm_rd_copy(&r, out->trace.span_id, FRAME_SPAN_ID_LEN);
    out->trace.flags = kvm_rd_u8(&r);
    if (out->trace.flags & ~FRAME_TRACE_SAMPLED)
        return FRAME_ERR_RESERVED;
    kvm_rd_zeros(&r, kvm_rd_remaining(&r)); /* reserved */
    if (!kvm_rd_end(&r))
        return FRAME_ERR_RESERVED;
    if (out->header_len > FRAME_MAX_HEADER_BYTES)
        return FRAME_ERR_HEADER_SIZE;
    /* No overflow: header_len <= 2^20, and payload_len is compared against the remainder. */
    uint64_t fixed = FRAME_FIXED_SIZE + (uint64_t)out->header_len;
    if (fixed > max_frame_bytes || out->payload_len > max_frame_bytes - fixed)
        return FRAME_ERR_TOO_BIG;
    switch (out->kind) {
    case FRAME_HELLO:
    case FRAME_HELLO_ACK:
    case FRAME_AUTH:
    case FRAME_VERDICT:
        if (out->payload_len != 0 || out->type != 0)
            return FRAME_ERR_SHAPE;
        break;
    case FRAME_CANCEL:
        if (out->payload_len != 0 || out->header_len != 0)
            return FRAME_ERR_SHAPE;
        break;
    case FRAME_REQUEST:
        if (out->request_id == 0)
            return FRAME_ERR_SHAPE;
        break;
    default:
        break;
    }
    return FRAME_OK;
}

const char *frame_error_name(enum frame_error e)
{
    switch (e) {
    case FRAME_OK:
        return "ok";
    case FRAME_ERR_MAGIC:
        return "bad_magic";
    case FRAME_ERR_VERSION:
        return "bad_version";
    case FRAME_ERR_KIND:
        return "bad_kind";
    case FRAME_ERR_RESERVED:
        return "bad_reserved";
    case FRAME_ERR_HEADER_SIZE:
        return "header_too_big";
    case FRAME_ERR_TOO_BIG:
        return "frame_too_big";
    case FRAME_ERR_SHAPE:
        return "bad_shape";
    case FRAME_ERR_SHORT:
        return "short";
    }
    return "unknown";
}
