/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frame.c — fixed frame header codec (see frame.h). Pure functions, no allocation, no I/O; every
 * field of external input is checked before it is trusted.
 */
#include "net/frame.h"

#include <string.h>

#include "core/util.h"

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void frame_encode(const struct frame_header *h, uint8_t out[FRAME_FIXED_SIZE])
{
    KVM_ASSERT(h->kind >= 1 && h->kind <= FRAME_KIND_MAX);
    KVM_ASSERT(h->header_len <= FRAME_MAX_HEADER_BYTES);
    KVM_ASSERT((h->trace.flags & ~FRAME_TRACE_SAMPLED) == 0);
    memset(out, 0, FRAME_FIXED_SIZE);
    put32(out + 0, FRAME_MAGIC);
    out[4] = h->version ? h->version : FRAME_VERSION;
    out[5] = h->kind;
    put16(out + 6, h->type);
    put64(out + 8, h->request_id);
    put32(out + 16, h->deadline_ms);
    put32(out + 20, h->header_len);
    put64(out + 24, h->payload_len);
    memcpy(out + 32, h->trace.trace_id, FRAME_TRACE_ID_LEN);
    memcpy(out + 48, h->trace.span_id, FRAME_SPAN_ID_LEN);
    out[56] = h->trace.flags;
}

enum frame_error frame_decode(const uint8_t *buf, size_t len, uint64_t max_frame_bytes,
                              struct frame_header *out)
{
    memset(out, 0, sizeof(*out));
    if (len < FRAME_FIXED_SIZE)
        return FRAME_ERR_SHORT;
    if (get32(buf) != FRAME_MAGIC)
        return FRAME_ERR_MAGIC;
    out->version = buf[4];
    if (buf[4] != FRAME_VERSION)
        return FRAME_ERR_VERSION;
    out->kind = buf[5];
    if (buf[5] < 1 || buf[5] > FRAME_KIND_MAX)
        return FRAME_ERR_KIND;
    out->type = get16(buf + 6);
    out->request_id = get64(buf + 8);
    out->deadline_ms = get32(buf + 16);
    out->header_len = get32(buf + 20);
    out->payload_len = get64(buf + 24);
    memcpy(out->trace.trace_id, buf + 32, FRAME_TRACE_ID_LEN);
    memcpy(out->trace.span_id, buf + 48, FRAME_SPAN_ID_LEN);
    out->trace.flags = buf[56];
    if (out->trace.flags & ~FRAME_TRACE_SAMPLED)
        return FRAME_ERR_RESERVED;
    for (int i = 57; i < FRAME_FIXED_SIZE; i++)
        if (buf[i] != 0)
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
