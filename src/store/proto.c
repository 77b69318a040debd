/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.c — codecs of the store's peer messages (see proto.h), written with the core byte codec
 * (core/bytes.h). Pure functions.
 */
#include "store/proto.h"

#include <inttypes.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"

/* A writer into the caller's buffer that starts with the version byte (ver = true). */
static void wstart(kvm_wr_t *w, uint8_t *buf, size_t cap, bool ver)
{
    kvm_wr_fixed(w, buf, cap);
    if (ver)
        kvm_wr_u8(w, STORE_PROTO_VERSION);
}

static int wdone(const kvm_wr_t *w, size_t *len)
{
    return kvm_wr_finish(w, len) != 0 ? KVMESH_ETOOBIG : 0;
}

/* A reader over buf; with ver, the leading version byte is read and checked. */
static int rstart(kvm_rd_t *r, const uint8_t *buf, size_t len, bool ver)
{
    kvm_rd_init(r, buf, len);
    if (!ver)
        return 0;
    int v = len ? kvm_rd_u8(r) : -1;
    if (v != STORE_PROTO_VERSION)
        return kvm_errf(KVMESH_EPROTO, "store message version %d is not %d", v,
                        STORE_PROTO_VERSION);
    return 0;
}

static int rdone(kvm_rd_t *r, const char *what)
{
    if (!kvm_rd_end(r))
        return kvm_errf(KVMESH_EPROTO, "malformed %s message (%zu bytes)", what, r->len);
    return 0;
}

int store_reserve_req_encode(const store_reserve_req_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u64le(&w, m->target_epoch);
    kvm_wr_u64le(&w, m->length);
    kvm_wr_u32le(&w, m->ttl_ms);
    kvm_wr_lp16le(&w, m->ident.enc, m->ident.enc_len);
    return wdone(&w, len);
}

int store_reserve_req_decode(const uint8_t *buf, size_t len, store_reserve_req_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->target_epoch = kvm_rd_u64le(&r);
    out->length = kvm_rd_u64le(&r);
    out->ttl_ms = kvm_rd_u32le(&r);
    uint16_t il = 0;
    const uint8_t *enc = kvm_rd_lp16le(&r, &il);
    if ((rc = rdone(&r, "reserve")) != 0)
        return rc;
    if (out->length == 0)
        return kvm_errf(KVMESH_EPROTO, "reserve of 0 bytes");
    if (kvm_ident_from_canonical(&out->ident, enc, il) != 0)
        return kvm_errf(KVMESH_EPROTO, "reserve message carries a malformed identity");
    return 0;
}

int store_reserve_inline_head_encode(const store_reserve_inline_req_t *m, uint8_t *buf, size_t cap,
                                     size_t *len)
{
    if (m->r.length == 0 || m->r.length > STORE_INLINE_WRITE_MAX)
        return kvm_errf(KVMESH_EINVAL, "inline reservation of %" PRIu64 " bytes (1..%u)",
                        m->r.length, STORE_INLINE_WRITE_MAX);
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u64le(&w, m->r.target_epoch);
    kvm_wr_u64le(&w, m->r.length);
    kvm_wr_u32le(&w, m->r.ttl_ms);
    kvm_wr_lp16le(&w, m->r.ident.enc, m->r.ident.enc_len);
    kvm_wr_u64le(&w, m->checksum);
    return wdone(&w, len);
}

int store_reserve_inline_req_decode(const uint8_t *buf, size_t len, store_reserve_inline_req_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->r.target_epoch = kvm_rd_u64le(&r);
    out->r.length = kvm_rd_u64le(&r);
    out->r.ttl_ms = kvm_rd_u32le(&r);
    uint16_t il = 0;
    const uint8_t *enc = kvm_rd_lp16le(&r, &il);
    out->checksum = kvm_rd_u64le(&r);
    if (!kvm_rd_ok(&r))
        return kvm_errf(KVMESH_EPROTO, "malformed inline reserve message (%zu bytes)", len);
    if (out->r.length == 0 || out->r.length > STORE_INLINE_WRITE_MAX)
        return kvm_errf(KVMESH_EPROTO, "inline reserve of %" PRIu64 " bytes (1..%u)", out->r.length,
                        STORE_INLINE_WRITE_MAX);
    if (kvm_rd_remaining(&r) != out->r.length)
        return kvm_errf(KVMESH_EPROTO,
                        "inline reserve of %" PRIu64 " bytes carries %zu payload bytes",
                        out->r.length, kvm_rd_remaining(&r));
    out->payload = kvm_rd_bytes(&r, (size_t)out->r.length);
    if (kvm_ident_from_canonical(&out->r.ident, enc, il) != 0)
        return kvm_errf(KVMESH_EPROTO, "inline reserve message carries a malformed identity");
    return 0;
}

int store_put_primary_head_encode(const store_put_primary_req_t *m, uint8_t *buf, size_t cap,
                                  size_t *len)
{
    size_t n = 0;
    int rc = store_reserve_inline_head_encode(&m->w, buf, cap, &n);
    if (rc)
        return rc;
    if (cap - n < 4)
        return KVMESH_ETOOBIG;
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf + n, cap - n);
    kvm_wr_u32le(&w, m->budget_ms);
    rc = wdone(&w, len);
    *len += n;
    return rc;
}

/* The PUT_PRIMARY head's fields into out (not yet checked for length or payload). */
static int prim_head_decode(kvm_rd_t *r, size_t len, store_put_primary_req_t *out,
                            const uint8_t **enc, uint16_t *il)
{
    store_reserve_inline_req_t *w = &out->w;
    w->r.target_epoch = kvm_rd_u64le(r);
    w->r.length = kvm_rd_u64le(r);
    w->r.ttl_ms = kvm_rd_u32le(r);
    *enc = kvm_rd_lp16le(r, il);
    w->checksum = kvm_rd_u64le(r);
    out->budget_ms = kvm_rd_u32le(r);
    if (!kvm_rd_ok(r))
        return kvm_errf(KVMESH_EPROTO, "malformed put-at-primary message (%zu bytes)", len);
    return 0;
}

int store_put_primary_req_decode(const uint8_t *buf, size_t len, store_put_primary_req_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    store_reserve_inline_req_t *w = &out->w;
    uint16_t il = 0;
    const uint8_t *enc = NULL;
    if ((rc = prim_head_decode(&r, len, out, &enc, &il)) != 0)
        return rc;
    if (w->r.length == 0 || w->r.length > STORE_INLINE_WRITE_MAX)
        return kvm_errf(KVMESH_EPROTO, "put at the primary of %" PRIu64 " bytes (1..%u)",
                        w->r.length, STORE_INLINE_WRITE_MAX);
    if (kvm_rd_remaining(&r) != w->r.length)
        return kvm_errf(KVMESH_EPROTO, "put at the primary of %" PRIu64 " bytes carries %zu bytes",
                        w->r.length, kvm_rd_remaining(&r));
    w->payload = kvm_rd_bytes(&r, (size_t)w->r.length);
    if (kvm_ident_from_canonical(&w->r.ident, enc, il) != 0)
        return kvm_errf(KVMESH_EPROTO, "put-at-primary message carries a malformed identity");
    return 0;
}

int store_put_primary_raw_encode(const store_put_primary_req_t *m, uint8_t *buf, size_t cap,
                                 size_t *len)
{
    if (m->w.r.length == 0 || m->w.r.length > STORE_PUT_PRIMARY_RAW_MAX)
        return kvm_errf(KVMESH_EINVAL, "put at the primary of %" PRIu64 " raw bytes (1..%u)",
                        m->w.r.length, STORE_PUT_PRIMARY_RAW_MAX);
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u64le(&w, m->w.r.target_epoch);
    kvm_wr_u64le(&w, m->w.r.length);
    kvm_wr_u32le(&w, m->w.r.ttl_ms);
    kvm_wr_lp16le(&w, m->w.r.ident.enc, m->w.r.ident.enc_len);
    kvm_wr_u64le(&w, m->w.checksum);
    kvm_wr_u32le(&w, m->budget_ms);
    return wdone(&w, len);
}

int store_put_primary_raw_decode(const uint8_t *buf, size_t len, uint64_t raw_len,
                                 store_put_primary_req_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    store_reserve_inline_req_t *w = &out->w;
    uint16_t il = 0;
    const uint8_t *enc = NULL;
    if ((rc = prim_head_decode(&r, len, out, &enc, &il)) != 0)
        return rc;
    if ((rc = rdone(&r, "put-at-primary (raw)")) != 0)
        return rc;
    if (w->r.length == 0 || w->r.length > STORE_PUT_PRIMARY_RAW_MAX || raw_len != w->r.length)
        return kvm_errf(KVMESH_EPROTO,
                        "put at the primary of %" PRIu64 " bytes (1..%u) carries %" PRIu64
                        " raw bytes",
                        w->r.length, STORE_PUT_PRIMARY_RAW_MAX, raw_len);
    if (kvm_ident_from_canonical(&w->r.ident, enc, il) != 0)
        return kvm_errf(KVMESH_EPROTO, "put-at-primary message carries a malformed identity");
    return 0;
}

int store_put_primary_resp_encode(const store_put_primary_resp_t *m, uint8_t *buf, size_t cap,
                                  size_t *len)
{
    if (m->outcome > STORE_PRIM_FAILED || (m->route_len && m->outcome != STORE_PRIM_PUBLISHED))
        return kvm_errf(KVMESH_EINVAL, "put-at-primary answer: outcome %u with a route",
                        m->outcome);
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u8(&w, m->outcome);
    kvm_wr_u32le(&w, (uint32_t)m->status);
    kvm_wr_u64le(&w, m->seg);
    kvm_wr_u64le(&w, m->offset);
    kvm_wr_u64le(&w, m->token);
    kvm_wr_lp16le(&w, m->route, m->route_len);
    kvm_wr_lp16le(&w, m->msg, m->msg_len < STORE_PRIM_MSG_MAX ? m->msg_len : STORE_PRIM_MSG_MAX);
    return wdone(&w, len);
}

int store_put_primary_resp_decode(const uint8_t *buf, size_t len, store_put_primary_resp_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->outcome = kvm_rd_u8(&r);
    out->status = (int32_t)kvm_rd_u32le(&r);
    out->seg = kvm_rd_u64le(&r);
    out->offset = kvm_rd_u64le(&r);
    out->token = kvm_rd_u64le(&r);
    out->route = kvm_rd_lp16le(&r, &out->route_len);
    out->msg = (const char *)kvm_rd_lp16le(&r, &out->msg_len);
    if ((rc = rdone(&r, "put-at-primary answer")) != 0)
        return rc;
    if (out->outcome > STORE_PRIM_FAILED || out->msg_len > STORE_PRIM_MSG_MAX ||
        (out->outcome == STORE_PRIM_PUBLISHED) != (out->route_len > 0) ||
        (out->outcome == STORE_PRIM_PUBLISHED || out->outcome == STORE_PRIM_DECLINED) !=
            (out->status == 0) ||
        out->status > 0)
        return kvm_errf(KVMESH_EPROTO,
                        "put-at-primary answer: outcome %u, status %d, %u route bytes",
                        out->outcome, out->status, out->route_len);
    return 0;
}

/* ---- PUT_PRIMARY_BATCH ----------------------------------------------------------------------- */

int store_prim_batch_head_encode(uint64_t target_epoch, uint32_t ttl_ms, uint32_t budget_ms,
                                 uint16_t n, uint8_t *buf, size_t cap, size_t *len)
{
    if (n == 0 || n > STORE_PUT_PRIMARY_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "put at the primary of %u items (1..%d)", n,
                        STORE_PUT_PRIMARY_BATCH_MAX);
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u64le(&w, target_epoch);
    kvm_wr_u32le(&w, ttl_ms);
    kvm_wr_u32le(&w, budget_ms);
    kvm_wr_u16le(&w, n);
    return wdone(&w, len);
}

int store_prim_batch_item_head_encode(uint64_t length, const kvm_ident_t *ident, uint8_t *buf,
                                      size_t cap, size_t *len)
{
    if (length == 0 || length > STORE_PUT_PRIMARY_BATCH_ITEM_MAX)
        return kvm_errf(KVMESH_EINVAL, "put at the primary: an item of %" PRIu64 " bytes (1..%u)",
                        length, STORE_PUT_PRIMARY_BATCH_ITEM_MAX);
    kvm_wr_t w;
    wstart(&w, buf, cap, false);
    kvm_wr_u32le(&w, (uint32_t)length);
    kvm_wr_lp16le(&w, ident->enc, ident->enc_len);
    return wdone(&w, len);
}

void store_prim_batch_item_sum(uint8_t *buf, uint64_t checksum)
{
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(checksum >> (8 * i));
}

size_t store_prim_batch_req_len(const store_prim_batch_req_t *m)
{
    size_t n = STORE_PRIM_BATCH_HEAD_LEN;
    for (uint16_t i = 0; i < m->n && i < STORE_PUT_PRIMARY_BATCH_MAX; i++)
        n += 14 + (size_t)m->it[i].ident.enc_len + (size_t)m->it[i].length;
    return n;
}

int store_prim_batch_req_encode(const store_prim_batch_req_t *m, uint8_t *buf, size_t cap,
                                size_t *len)
{
    size_t at = 0, n = 0;
    uint64_t bytes = 0;
    int rc =
        store_prim_batch_head_encode(m->target_epoch, m->ttl_ms, m->budget_ms, m->n, buf, cap, &at);
    for (uint16_t i = 0; !rc && i < m->n; i++) {
        if ((bytes += m->it[i].length) > STORE_PUT_PRIMARY_BATCH_BYTES)
            return kvm_errf(KVMESH_EINVAL, "put at the primary of more than %u bytes",
                            STORE_PUT_PRIMARY_BATCH_BYTES);
        if ((rc = store_prim_batch_item_head_encode(m->it[i].length, &m->it[i].ident, buf + at,
                                                    cap - at, &n)) != 0)
            break;
        at += n;
        if (cap - at < m->it[i].length + 8)
            return KVMESH_ETOOBIG;
        memcpy(buf + at, m->it[i].payload, (size_t)m->it[i].length);
        at += (size_t)m->it[i].length;
        store_prim_batch_item_sum(buf + at, m->it[i].checksum);
        at += 8;
    }
    if (!rc)
        *len = at;
    return rc;
}

void store_prim_batch_req_free(store_prim_batch_req_t *m)
{
    for (uint16_t i = 0; i < m->n && i < STORE_PUT_PRIMARY_BATCH_MAX; i++)
        kvm_ident_free(&m->it[i].ident);
    m->n = 0;
}

int store_prim_batch_req_decode(const uint8_t *buf, size_t len, store_prim_batch_req_t *out)
{
    out->n = 0;
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->target_epoch = kvm_rd_u64le(&r);
    out->ttl_ms = kvm_rd_u32le(&r);
    out->budget_ms = kvm_rd_u32le(&r);
    uint16_t n = kvm_rd_u16le(&r);
    if (!kvm_rd_ok(&r) || n == 0 || n > STORE_PUT_PRIMARY_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "malformed put-at-primary batch (%zu bytes, %u items)", len,
                        n);
    uint64_t bytes = 0;
    for (uint16_t i = 0; i < n; i++) {
        uint64_t l = kvm_rd_u32le(&r);
        uint16_t il = 0;
        const uint8_t *enc = kvm_rd_lp16le(&r, &il);
        if (!kvm_rd_ok(&r) || l == 0 || l > STORE_PUT_PRIMARY_BATCH_ITEM_MAX ||
            (bytes += l) > STORE_PUT_PRIMARY_BATCH_BYTES || kvm_rd_remaining(&r) < l + 8) {
            rc = kvm_errf(KVMESH_EPROTO,
                          "malformed put-at-primary batch: item %u (%" PRIu64 " bytes)", i, l);
            break;
        }
        out->it[i].length = l;
        out->it[i].payload = kvm_rd_bytes(&r, (size_t)l);
        out->it[i].checksum = kvm_rd_u64le(&r);
        if (kvm_ident_from_canonical(&out->it[i].ident, enc, il) != 0) {
            rc = kvm_errf(KVMESH_EPROTO, "put-at-primary batch: item %u has a malformed identity",
                          i);
            break;
        }
        out->n = (uint16_t)(i + 1);
    }
    if (!rc)
        rc = rdone(&r, "put-at-primary batch");
    if (rc)
        store_prim_batch_req_free(out);
    return rc;
}

/* Whether a PUT_PRIMARY answer's (or answer item's) fields agree with each other. */
static bool prim_ans_ok(const store_put_primary_resp_t *m)
{
    return m->outcome <= STORE_PRIM_FAILED && m->msg_len <= STORE_PRIM_MSG_MAX &&
           (m->outcome == STORE_PRIM_PUBLISHED) == (m->route_len > 0) &&
           (m->outcome == STORE_PRIM_PUBLISHED || m->outcome == STORE_PRIM_DECLINED) ==
               (m->status == 0) &&
           m->status <= 0;
}

int store_prim_batch_resp_encode(const store_prim_batch_resp_t *m, uint8_t *buf, size_t cap,
                                 size_t *len)
{
    if (m->n == 0 || m->n > STORE_PUT_PRIMARY_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "put-at-primary batch answer of %u items", m->n);
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        const store_put_primary_resp_t *a = &m->r[i];
        store_put_primary_resp_t c = *a;
        if (c.msg_len > STORE_PRIM_MSG_MAX)
            c.msg_len = STORE_PRIM_MSG_MAX;
        if (!prim_ans_ok(&c))
            return kvm_errf(KVMESH_EINVAL,
                            "put-at-primary batch answer: item %u: outcome %u, "
                            "status %d, %u route bytes",
                            i, c.outcome, c.status, c.route_len);
        kvm_wr_u8(&w, c.outcome);
        kvm_wr_u32le(&w, (uint32_t)c.status);
        kvm_wr_u64le(&w, c.seg);
        kvm_wr_u64le(&w, c.offset);
        kvm_wr_u64le(&w, c.token);
        kvm_wr_lp16le(&w, c.route, c.route_len);
        kvm_wr_lp16le(&w, c.msg, c.msg_len);
    }
    return wdone(&w, len);
}

int store_prim_batch_resp_decode(const uint8_t *buf, size_t len, store_prim_batch_resp_t *out)
{
    out->n = 0;
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    uint16_t n = kvm_rd_u16le(&r);
    if (!kvm_rd_ok(&r) || n == 0 || n > STORE_PUT_PRIMARY_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "malformed put-at-primary batch answer (%zu bytes)", len);
    for (uint16_t i = 0; i < n; i++) {
        store_put_primary_resp_t *a = &out->r[i];
        memset(a, 0, sizeof(*a));
        a->outcome = kvm_rd_u8(&r);
        a->status = (int32_t)kvm_rd_u32le(&r);
        a->seg = kvm_rd_u64le(&r);
        a->offset = kvm_rd_u64le(&r);
        a->token = kvm_rd_u64le(&r);
        a->route = kvm_rd_lp16le(&r, &a->route_len);
        a->msg = (const char *)kvm_rd_lp16le(&r, &a->msg_len);
        if (!kvm_rd_ok(&r) || !prim_ans_ok(a))
            return kvm_errf(KVMESH_EPROTO, "malformed put-at-primary batch answer: item %u", i);
    }
    if ((rc = rdone(&r, "put-at-primary batch answer")) != 0)
        return rc;
    out->n = n;
    return 0;
}

int store_reserve_resp_encode(const store_reserve_resp_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    kvm_wr_t w;
    wstart(&w, buf, cap, false);
    kvm_wr_u64le(&w, m->seg);
    kvm_wr_u64le(&w, m->offset);
    kvm_wr_u64le(&w, m->token);
    return wdone(&w, len);
}

int store_reserve_resp_decode(const uint8_t *buf, size_t len, store_reserve_resp_t *out)
{
    kvm_rd_t r;
    rstart(&r, buf, len, false);
    out->seg = kvm_rd_u64le(&r);
    out->offset = kvm_rd_u64le(&r);
    out->token = kvm_rd_u64le(&r);
    return rdone(&r, "reserve response");
}

int store_reserve_batch_req_encode(const store_reserve_batch_req_t *m, uint8_t *buf, size_t cap,
                                   size_t *len)
{
    if (m->n == 0 || m->n > STORE_RESERVE_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "batched reservation of %u items (1..%d)", m->n,
                        STORE_RESERVE_BATCH_MAX);
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u64le(&w, m->target_epoch);
    kvm_wr_u32le(&w, m->ttl_ms);
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        kvm_wr_u64le(&w, m->length[i]);
        kvm_wr_lp16le(&w, m->ident[i].enc, m->ident[i].enc_len);
    }
    return wdone(&w, len);
}

void store_reserve_batch_req_free(store_reserve_batch_req_t *m)
{
    for (uint16_t i = 0; i < m->n && i < STORE_RESERVE_BATCH_MAX; i++)
        kvm_ident_free(&m->ident[i]);
    m->n = 0;
}

int store_reserve_batch_req_decode(const uint8_t *buf, size_t len, store_reserve_batch_req_t *out)
{
    out->n = 0;
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->target_epoch = kvm_rd_u64le(&r);
    out->ttl_ms = kvm_rd_u32le(&r);
    uint16_t n = kvm_rd_u16le(&r);
    if (n == 0 || n > STORE_RESERVE_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "batched reservation of %u items (1..%d)", n,
                        STORE_RESERVE_BATCH_MAX);
    const uint8_t *enc[STORE_RESERVE_BATCH_MAX];
    uint16_t il[STORE_RESERVE_BATCH_MAX];
    for (uint16_t i = 0; i < n; i++) {
        out->length[i] = kvm_rd_u64le(&r);
        il[i] = 0;
        enc[i] = kvm_rd_lp16le(&r, &il[i]);
    }
    if ((rc = rdone(&r, "batched reserve")) != 0)
        return rc;
    for (uint16_t i = 0; i < n; i++) {
        if (out->length[i] == 0 || kvm_ident_from_canonical(&out->ident[i], enc[i], il[i]) != 0) {
            store_reserve_batch_req_free(out);
            return kvm_errf(KVMESH_EPROTO, "batched reserve item %u: %s", i,
                            out->length[i] == 0 ? "0 bytes" : "malformed identity");
        }
        out->n = (uint16_t)(i + 1);
    }
    return 0;
}

int store_reserve_batch_resp_encode(const store_reserve_batch_resp_t *m, uint8_t *buf, size_t cap,
                                    size_t *len)
{
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        kvm_wr_u32le(&w, (uint32_t)m->r[i].status);
        kvm_wr_u64le(&w, m->r[i].seg);
        kvm_wr_u64le(&w, m->r[i].offset);
        kvm_wr_u64le(&w, m->r[i].token);
    }
    return wdone(&w, len);
}

int store_reserve_batch_resp_decode(const uint8_t *buf, size_t len, store_reserve_batch_resp_t *out)
{
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->n = kvm_rd_u16le(&r);
    if (out->n > STORE_RESERVE_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "batched reserve response of %u items", out->n);
    for (uint16_t i = 0; i < out->n; i++) {
        out->r[i].status = (int32_t)kvm_rd_u32le(&r);
        out->r[i].seg = kvm_rd_u64le(&r);
        out->r[i].offset = kvm_rd_u64le(&r);
        out->r[i].token = kvm_rd_u64le(&r);
        if (out->r[i].status > 0)
            return kvm_errf(KVMESH_EPROTO, "batched reserve response: status %d", out->r[i].status);
    }
    return rdone(&r, "batched reserve response");
}

int store_slot_msg_encode(const store_slot_msg_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    if (m->has & ~(STORE_SLOT_HAS_TOKEN | STORE_SLOT_HAS_OBJECT))
        return kvm_errf(KVMESH_EINVAL, "slot message with unknown identity bits 0x%x", m->has);
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, m->has ? STORE_SLOT_MSG_VERSION : STORE_PROTO_VERSION);
    kvm_wr_u64le(&w, m->target_epoch);
    kvm_wr_u64le(&w, m->seg);
    kvm_wr_u64le(&w, m->offset);
    if (m->has) {
        kvm_wr_u8(&w, m->has);
        kvm_wr_u64le(&w, m->token);
        kvm_wr_u64le(&w, m->ident_hash);
        kvm_wr_u64le(&w, m->len);
    }
    return wdone(&w, len);
}

/* Version 1 (an older peer: no identity, has = 0) or 2 (with the slot's identity). */
int store_slot_msg_decode(const uint8_t *buf, size_t len, store_slot_msg_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    int v = len ? kvm_rd_u8(&r) : -1;
    if (v != STORE_PROTO_VERSION && v != STORE_SLOT_MSG_VERSION)
        return kvm_errf(KVMESH_EPROTO, "slot message version %d is not %d or %d", v,
                        STORE_PROTO_VERSION, STORE_SLOT_MSG_VERSION);
    out->target_epoch = kvm_rd_u64le(&r);
    out->seg = kvm_rd_u64le(&r);
    out->offset = kvm_rd_u64le(&r);
    if (v == STORE_SLOT_MSG_VERSION) {
        out->has = kvm_rd_u8(&r);
        out->token = kvm_rd_u64le(&r);
        out->ident_hash = kvm_rd_u64le(&r);
        out->len = kvm_rd_u64le(&r);
        if (kvm_rd_ok(&r) &&
            (out->has == 0 || (out->has & ~(STORE_SLOT_HAS_TOKEN | STORE_SLOT_HAS_OBJECT))))
            return kvm_errf(KVMESH_EPROTO, "slot message version 2 with identity bits 0x%x",
                            out->has);
    }
    return rdone(&r, "slot");
}

/* 0 when item i's kind and identity are well formed (the encoder's and decoder's rule). */
static bool slot_batch_item_ok(const store_slot_batch_t *m, uint16_t i)
{
    const store_slot_msg_t *s = &m->it[i].m;
    if (m->it[i].kind != STORE_SLOT_BATCH_COMMIT && m->it[i].kind != STORE_SLOT_BATCH_RELEASE)
        return false;
    if (s->has & ~(STORE_SLOT_HAS_TOKEN | STORE_SLOT_HAS_OBJECT))
        return false;
    if (!(s->has & STORE_SLOT_HAS_TOKEN) && s->token != 0)
        return false;
    return (s->has & STORE_SLOT_HAS_OBJECT) || (s->ident_hash == 0 && s->len == 0);
}

int store_slot_batch_encode(const store_slot_batch_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    if (m->n == 0 || m->n > STORE_SLOT_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "slot batch of %u items (1..%d)", m->n,
                        STORE_SLOT_BATCH_MAX);
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, STORE_SLOT_BATCH_VERSION);
    kvm_wr_u64le(&w, m->target_epoch);
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        if (!slot_batch_item_ok(m, i))
            return kvm_errf(KVMESH_EINVAL, "slot batch item %u: kind %u, identity bits 0x%x", i,
                            m->it[i].kind, m->it[i].m.has);
        const store_slot_msg_t *s = &m->it[i].m;
        kvm_wr_u8(&w, m->it[i].kind);
        kvm_wr_u8(&w, s->has);
        kvm_wr_u64le(&w, s->seg);
        kvm_wr_u64le(&w, s->offset);
        kvm_wr_u64le(&w, s->token);
        kvm_wr_u64le(&w, s->ident_hash);
        kvm_wr_u64le(&w, s->len);
    }
    return wdone(&w, len);
}

int store_slot_batch_decode(const uint8_t *buf, size_t len, store_slot_batch_t *out)
{
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    int v = len ? kvm_rd_u8(&r) : -1;
    if (v != STORE_SLOT_BATCH_VERSION)
        return kvm_errf(KVMESH_EPROTO, "slot batch version %d is not %d", v,
                        STORE_SLOT_BATCH_VERSION);
    out->target_epoch = kvm_rd_u64le(&r);
    out->n = kvm_rd_u16le(&r);
    if (!kvm_rd_ok(&r) || out->n == 0 || out->n > STORE_SLOT_BATCH_MAX ||
        len != STORE_SLOT_BATCH_LEN(out->n))
        return kvm_errf(KVMESH_EPROTO, "malformed slot batch (%zu bytes, %u items)", len, out->n);
    for (uint16_t i = 0; i < out->n; i++) {
        store_slot_msg_t *s = &out->it[i].m;
        out->it[i].kind = kvm_rd_u8(&r);
        s->target_epoch = out->target_epoch;
        s->has = kvm_rd_u8(&r);
        s->seg = kvm_rd_u64le(&r);
        s->offset = kvm_rd_u64le(&r);
        s->token = kvm_rd_u64le(&r);
        s->ident_hash = kvm_rd_u64le(&r);
        s->len = kvm_rd_u64le(&r);
        if (!slot_batch_item_ok(out, i))
            return kvm_errf(KVMESH_EPROTO, "slot batch item %u: kind %u, identity bits 0x%x", i,
                            out->it[i].kind, s->has);
    }
    return rdone(&r, "slot batch");
}

int store_slot_batch_ans_encode(uint8_t flags, uint8_t *buf, size_t cap, size_t *len)
{
    if (flags & ~STORE_SLOT_BATCH_TAKES_NOTE)
        return kvm_errf(KVMESH_EINVAL, "slot batch answer flags 0x%x", flags);
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, STORE_SLOT_BATCH_VERSION);
    kvm_wr_u8(&w, flags);
    return wdone(&w, len);
}

int store_slot_batch_ans_decode(const uint8_t *buf, size_t len, uint8_t *flags)
{
    *flags = 0;
    if (len == 0)
        return 0; /* an owner that predates the flags */
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    int v = kvm_rd_u8(&r);
    if (v != STORE_SLOT_BATCH_VERSION)
        return kvm_errf(KVMESH_EPROTO, "slot batch answer version %d is not %d", v,
                        STORE_SLOT_BATCH_VERSION);
    uint8_t f = kvm_rd_u8(&r);
    if (!kvm_rd_ok(&r) || (f & ~STORE_SLOT_BATCH_TAKES_NOTE))
        return kvm_errf(KVMESH_EPROTO, "malformed slot batch answer (%zu bytes, flags 0x%x)", len,
                        f);
    int rc = rdone(&r, "slot batch answer");
    if (rc == 0)
        *flags = f;
    return rc;
}

int store_hit_msg_encode(const store_hit_msg_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    if (m->n > STORE_HIT_MAX)
        return KVMESH_EINVAL;
    kvm_wr_t w;
    wstart(&w, buf, cap, true);
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        kvm_wr_u64le(&w, m->slots[i].seg);
        kvm_wr_u64le(&w, m->slots[i].offset);
    }
    return wdone(&w, len);
}

int store_hit_msg_decode(const uint8_t *buf, size_t len, store_hit_msg_t *out)
{
    kvm_rd_t r;
    int rc = rstart(&r, buf, len, true);
    if (rc)
        return rc;
    out->n = kvm_rd_u16le(&r);
    if (out->n > STORE_HIT_MAX)
        return kvm_errf(KVMESH_EPROTO, "hit report of %u slots (max %d)", out->n, STORE_HIT_MAX);
    for (uint16_t i = 0; i < out->n; i++) {
        out->slots[i].seg = kvm_rd_u64le(&r);
        out->slots[i].offset = kvm_rd_u64le(&r);
    }
    return rdone(&r, "hit");
}

uint8_t *store_env_msg_encode(uint32_t env_type, const void *data, size_t len, size_t *out_len)
{
    kvm_wr_t w;
    kvm_wr_growing(&w, 4 + len);
    kvm_wr_u32le(&w, env_type);
    kvm_wr_bytes(&w, data, len);
    return kvm_wr_take(&w, out_len);
}

size_t store_env_msg_put(uint8_t *buf, size_t cap, uint32_t env_type, const void *data, size_t len)
{
    if (cap < 4 || len > cap - 4)
        return 0;
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u32le(&w, env_type);
    kvm_wr_bytes(&w, data, len);
    size_t n = 0;
    return kvm_wr_finish(&w, &n) == 0 ? n : 0;
}

int store_env_msg_decode(const uint8_t *buf, size_t len, uint32_t *env_type, const uint8_t **data,
                         size_t *data_len)
{
    kvm_rd_t r;
    rstart(&r, buf, len, false);
    uint32_t t = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r))
        return kvm_errf(KVMESH_EPROTO, "env message of %zu bytes; shorter than its type", len);
    *env_type = t;
    *data_len = kvm_rd_remaining(&r);
    *data = kvm_rd_bytes(&r, *data_len);
    return 0;
}

/* ---- batched cold reads (STORE_RPC_COLD_READ_BATCH) ------------------------------------------ */

static int cold_batch_ver(kvm_rd_t *r, const uint8_t *buf, size_t len, const char *what)
{
    kvm_rd_init(r, buf, len);
    int v = len ? kvm_rd_u8(r) : -1;
    if (v != STORE_COLD_BATCH_VERSION)
        return kvm_errf(KVMESH_EPROTO,
                        "%s: body version %d, this runtime speaks version %d: the older of the "
                        "two runtimes needs an upgrade",
                        what, v, STORE_COLD_BATCH_VERSION);
    return 0;
}

int store_cold_batch_req_encode(const store_cold_batch_req_t *m, uint8_t *buf, size_t cap,
                                size_t *len)
{
    if (m->n == 0 || m->n > STORE_COLD_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "batched cold read of %u items (1..%d)", m->n,
                        STORE_COLD_BATCH_MAX);
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, STORE_COLD_BATCH_VERSION);
    kvm_wr_bytes(&w, m->owner.b, sizeof(m->owner.b));
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        kvm_wr_u64le(&w, m->it[i].version_h);
        kvm_wr_u64le(&w, m->it[i].locator_fp);
        kvm_wr_u64le(&w, m->it[i].length);
        kvm_wr_u64le(&w, m->it[i].checksum);
        kvm_wr_u64le(&w, m->it[i].namespace_h);
        kvm_wr_lp16le(&w, m->it[i].ident.enc, m->it[i].ident.enc_len);
    }
    return wdone(&w, len);
}

void store_cold_batch_req_free(store_cold_batch_req_t *m)
{
    for (uint16_t i = 0; i < m->n && i < STORE_COLD_BATCH_MAX; i++)
        kvm_ident_free(&m->it[i].ident);
    m->n = 0;
}

int store_cold_batch_req_decode(const uint8_t *buf, size_t len, store_cold_batch_req_t *out)
{
    out->n = 0;
    kvm_rd_t r;
    int rc = cold_batch_ver(&r, buf, len, "batched cold read");
    if (rc)
        return rc;
    kvm_rd_copy(&r, out->owner.b, sizeof(out->owner.b));
    uint16_t n = kvm_rd_u16le(&r);
    if (!kvm_rd_ok(&r) || n == 0 || n > STORE_COLD_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "batched cold read of %u items (1..%d)", n,
                        STORE_COLD_BATCH_MAX);
    const uint8_t *enc[STORE_COLD_BATCH_MAX];
    uint16_t il[STORE_COLD_BATCH_MAX];
    for (uint16_t i = 0; i < n; i++) {
        out->it[i].version_h = kvm_rd_u64le(&r);
        out->it[i].locator_fp = kvm_rd_u64le(&r);
        out->it[i].length = kvm_rd_u64le(&r);
        out->it[i].checksum = kvm_rd_u64le(&r);
        out->it[i].namespace_h = kvm_rd_u64le(&r);
        il[i] = 0;
        enc[i] = kvm_rd_lp16le(&r, &il[i]);
    }
    if ((rc = rdone(&r, "batched cold read")) != 0)
        return rc;
    for (uint16_t i = 0; i < n; i++) {
        if (kvm_ident_from_canonical(&out->it[i].ident, enc[i], il[i]) != 0) {
            store_cold_batch_req_free(out);
            return kvm_errf(KVMESH_EPROTO, "batched cold read item %u: malformed identity", i);
        }
        out->n = (uint16_t)(i + 1);
    }
    return 0;
}

int store_cold_batch_resp_encode(const store_cold_batch_resp_t *m, uint8_t *buf, size_t cap,
                                 size_t *len)
{
    if (m->n > STORE_COLD_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "batched cold read response of %u items", m->n);
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, STORE_COLD_BATCH_VERSION);
    kvm_wr_u16le(&w, m->n);
    for (uint16_t i = 0; i < m->n; i++) {
        kvm_wr_u32le(&w, (uint32_t)m->r[i].status);
        kvm_wr_u64le(&w, m->r[i].seg);
        kvm_wr_u64le(&w, m->r[i].offset);
        kvm_wr_u64le(&w, m->r[i].length);
        kvm_wr_u64le(&w, m->r[i].grant);
        kvm_wr_u64le(&w, m->r[i].token);
    }
    return wdone(&w, len);
}

int store_cold_batch_resp_decode(const uint8_t *buf, size_t len, store_cold_batch_resp_t *out)
{
    out->n = 0;
    kvm_rd_t r;
    int rc = cold_batch_ver(&r, buf, len, "batched cold read response");
    if (rc)
        return rc;
    uint16_t n = kvm_rd_u16le(&r);
    if (!kvm_rd_ok(&r) || n > STORE_COLD_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "batched cold read response of %u items", n);
    for (uint16_t i = 0; i < n; i++) {
        out->r[i].status = (int32_t)kvm_rd_u32le(&r);
        out->r[i].seg = kvm_rd_u64le(&r);
        out->r[i].offset = kvm_rd_u64le(&r);
        out->r[i].length = kvm_rd_u64le(&r);
        out->r[i].grant = kvm_rd_u64le(&r);
        out->r[i].token = kvm_rd_u64le(&r);
        if (out->r[i].status > 0)
            return kvm_errf(KVMESH_EPROTO, "batched cold read response: status %d",
                            out->r[i].status);
    }
    if ((rc = rdone(&r, "batched cold read response")) != 0)
        return rc;
    out->n = n;
    return 0;
}
