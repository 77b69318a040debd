/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.c — codecs of the store's peer messages (see proto.h). Pure functions.
 */
#include "store/proto.h"

#include <string.h>

#include "core/util.h"

struct wbuf {
    uint8_t *p;
    size_t cap, n;
    bool over;
};

static void put_bytes(struct wbuf *w, const void *src, size_t n)
{
    if (w->over || w->cap - w->n < n) {
        w->over = true;
        return;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void put_u64(struct wbuf *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, b, 8);
}

static void put_u32(struct wbuf *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put_bytes(w, b, 4);
}

static void put_u16(struct wbuf *w, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put_bytes(w, b, 2);
}

static int wdone(struct wbuf *w, size_t *len)
{
    if (w->over)
        return KVMESH_ETOOBIG;
    *len = w->n;
    return 0;
}

struct rbuf {
    const uint8_t *p;
    size_t len, off;
    bool bad;
};

static const uint8_t *get_bytes(struct rbuf *r, size_t n)
{
    if (r->bad || r->len - r->off < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

static uint64_t get_u64(struct rbuf *r)
{
    const uint8_t *b = get_bytes(r, 8);
    uint64_t v = 0;
    for (int i = 0; b && i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static uint32_t get_u32(struct rbuf *r)
{
    const uint8_t *b = get_bytes(r, 4);
    return b ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24
             : 0;
}

static uint16_t get_u16(struct rbuf *r)
{
    const uint8_t *b = get_bytes(r, 2);
    return b ? (uint16_t)(b[0] | b[1] << 8) : 0;
}

static int get_version(struct rbuf *r)
{
    const uint8_t *v = get_bytes(r, 1);
    if (!v || *v != STORE_PROTO_VERSION)
        return kvm_errf(KVMESH_EPROTO, "store message version %d is not %d", v ? *v : -1,
                        STORE_PROTO_VERSION);
    return 0;
}

static int rdone(struct rbuf *r, const char *what)
{
    if (r->bad || r->off != r->len)
        return kvm_errf(KVMESH_EPROTO, "malformed %s message (%zu bytes)", what, r->len);
    return 0;
}

int store_reserve_req_encode(const store_reserve_req_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    struct wbuf w = {buf, cap, 0, false};
    uint8_t v = STORE_PROTO_VERSION;
    put_bytes(&w, &v, 1);
    put_u64(&w, m->target_epoch);
    put_u64(&w, m->length);
    put_u32(&w, m->ttl_ms);
    put_u16(&w, (uint16_t)m->ident.enc_len);
    put_bytes(&w, m->ident.enc, m->ident.enc_len);
    return wdone(&w, len);
}

int store_reserve_req_decode(const uint8_t *buf, size_t len, store_reserve_req_t *out)
{
    memset(out, 0, sizeof(*out));
    struct rbuf r = {buf, len, 0, false};
    int rc = get_version(&r);
    if (rc)
        return rc;
    out->target_epoch = get_u64(&r);
    out->length = get_u64(&r);
    out->ttl_ms = get_u32(&r);
    uint16_t il = get_u16(&r);
    const uint8_t *enc = get_bytes(&r, il);
    if ((rc = rdone(&r, "reserve")) != 0)
        return rc;
    if (out->length == 0)
        return kvm_errf(KVMESH_EPROTO, "reserve of 0 bytes");
    if (kvm_ident_from_canonical(&out->ident, enc, il) != 0)
        return kvm_errf(KVMESH_EPROTO, "reserve message carries a malformed identity");
    return 0;
}

int store_reserve_resp_encode(const store_reserve_resp_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    struct wbuf w = {buf, cap, 0, false};
    put_u64(&w, m->seg);
    put_u64(&w, m->offset);
    put_u64(&w, m->token);
    return wdone(&w, len);
}

int store_reserve_resp_decode(const uint8_t *buf, size_t len, store_reserve_resp_t *out)
{
    struct rbuf r = {buf, len, 0, false};
    out->seg = get_u64(&r);
    out->offset = get_u64(&r);
    out->token = get_u64(&r);
    return rdone(&r, "reserve response");
}

int store_slot_msg_encode(const store_slot_msg_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    struct wbuf w = {buf, cap, 0, false};
    uint8_t v = STORE_PROTO_VERSION;
    put_bytes(&w, &v, 1);
    put_u64(&w, m->target_epoch);
    put_u64(&w, m->seg);
    put_u64(&w, m->offset);
    return wdone(&w, len);
}

int store_slot_msg_decode(const uint8_t *buf, size_t len, store_slot_msg_t *out)
{
    struct rbuf r = {buf, len, 0, false};
    int rc = get_version(&r);
    if (rc)
        return rc;
    out->target_epoch = get_u64(&r);
    out->seg = get_u64(&r);
    out->offset = get_u64(&r);
    return rdone(&r, "slot");
}

int store_hit_msg_encode(const store_hit_msg_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    if (m->n > STORE_HIT_MAX)
        return KVMESH_EINVAL;
    struct wbuf w = {buf, cap, 0, false};
    uint8_t v = STORE_PROTO_VERSION;
    put_bytes(&w, &v, 1);
    put_u16(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        put_u64(&w, m->slots[i].seg);
        put_u64(&w, m->slots[i].offset);
    }
    return wdone(&w, len);
}

int store_hit_msg_decode(const uint8_t *buf, size_t len, store_hit_msg_t *out)
{
    struct rbuf r = {buf, len, 0, false};
    int rc = get_version(&r);
    if (rc)
        return rc;
    out->n = get_u16(&r);
    if (out->n > STORE_HIT_MAX)
        return kvm_errf(KVMESH_EPROTO, "hit report of %u slots (max %d)", out->n, STORE_HIT_MAX);
    for (uint16_t i = 0; i < out->n; i++) {
        out->slots[i].seg = get_u64(&r);
        out->slots[i].offset = get_u64(&r);
    }
    return rdone(&r, "hit");
}
