/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_msg.c — codec of the route protocol messages (route_msg.h).
 *
 * One layout for every kind (fields a kind does not use are written as zero and must decode
 * as zero-or-ignored), after the common header of route_msg.h:
 *   expected (u64 token, u64 seq) | u8 has_ident [u32 len, ident frame] | owner (16 bytes)
 *   | u32 limit | u64 remaining_ns | u32 flags | primary (16 + u64 epoch) | u32 primary_node
 *   | u32 n_set, n_set x (16 + u64 epoch + u32 node) | u8 more | u32 n_routes,
 *   n_routes x (u32 len, route frame)
 * Per-kind checks on decode: the number of routes (exactly 1 for CAS_REQ, MIRROR_REQ and
 * REPAIR; at most 1 for CAS_RESP/READ_RESP; at most ROUTE_MSG_MAX_ROUTES for pages), an ident
 * for READ_REQ, a known kind that matches the env type, and no trailing bytes.
 * CAS_CLAIM_REQ/RESP (and only they) end with u32 claim_len, claim bytes (<= ROUTE_MSG_MAX_CLAIM).
 * A READ_RESP with RMSG_READ_INLINE in flags (and only it) ends with u32 len, the payload bytes
 * (<= ROUTE_MSG_MAX_INLINE, exactly its one route's length; route_msg.h "Inline reads"); one with
 * RMSG_READ_ATT instead ends with u32 len alone (<= ROUTE_MSG_MAX_INLINE_ATT: the bytes travel as
 * the attachment, route_msg_attach; both flags together are refused).
 */
#include "route/route_msg.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "core/wire.h"
#include "route/route.h"

static void w_rt(kvm_wr_t *w, const kvm_runtime_t *rt)
{
    kvm_wr_bytes(w, rt->id.b, KVM_ID128_LEN);
    kvm_wr_u64le(w, rt->epoch);
}

static void r_rt(kvm_rd_t *r, kvm_runtime_t *rt)
{
    kvm_rd_copy(r, rt->id.b, KVM_ID128_LEN);
    rt->epoch = kvm_rd_u64le(r);
}

void route_msg_init(route_msg_t *m, uint16_t kind)
{
    memset(m, 0, offsetof(route_msg_t, set)); /* set[] and the decode storage: route_msg.h */
    m->kind = kind;
    m->primary_node = ENV_NODE_NONE;
}

void route_msg_clear(route_msg_t *m)
{
    route_msg_check_decoded(m); /* a copy by value would free the original's storage */
    uint16_t kind = m->kind;
    if (m->ident.enc != m->ident_buf) /* (in the decode storage: not owned) */
        kvm_ident_free(&m->ident);
    free(m->claim);
    if (m->routes == &m->route1) { /* decoded into the storage: only a long identity to free */
        if (m->n_routes && m->route1.ident.enc != m->rident_buf)
            kvm_ident_free(&m->route1.ident);
    } else if (m->routes) {
        for (uint32_t i = 0; i < m->n_routes; i++)
            kvm_route_free(&m->routes[i]);
        free(m->routes);
    }
    route_msg_init(m, kind);
}

const char *route_msg_kind_name(uint16_t kind)
{
    static const char *const names[] = {
        [RMSG_CAS_REQ] = "cas_req",
        [RMSG_CAS_RESP] = "cas_resp",
        [RMSG_READ_REQ] = "read_req",
        [RMSG_READ_RESP] = "read_resp",
        [RMSG_MIRROR_REQ] = "mirror_req",
        [RMSG_MIRROR_RESP] = "mirror_resp",
        [RMSG_GRANT_REQ] = "grant_req",
        [RMSG_GRANT_RESP] = "grant_resp",
        [RMSG_FETCH_REQ] = "fetch_req",
        [RMSG_FETCH_RESP] = "fetch_resp",
        [RMSG_INSTALL_REQ] = "install_req",
        [RMSG_INSTALL_RESP] = "install_resp",
        [RMSG_REPAIR] = "repair",
        [RMSG_OWNER_REQ] = "owner_req",
        [RMSG_OWNER_RESP] = "owner_resp",
        [RMSG_CAS_CLAIM_REQ] = "cas_claim_req",
        [RMSG_CAS_CLAIM_RESP] = "cas_claim_resp",
    };
    if (kind == RMSG_BATCH) /* a container (route_batch_*), never a message of its own */
        return "batch";
    if (kind == 0 || kind > RMSG_KIND_MAX || !names[kind])
        return "unknown";
    return names[kind];
}

/* Whether a kind ends with a claim blob. */
static bool has_claim(uint16_t kind)
{
    return kind == RMSG_CAS_CLAIM_REQ || kind == RMSG_CAS_CLAIM_RESP;
}

/* Whether a message ends with inline payload bytes (or, RMSG_READ_ATT, their length only). */
static bool has_inline(uint16_t kind, uint32_t flags)
{
    return kind == RMSG_READ_RESP && (flags & (RMSG_READ_INLINE | RMSG_READ_ATT));
}

/* Whether the bytes travel as the attachment (the head form: the length alone is encoded). */
static bool is_att(uint16_t kind, uint32_t flags)
{
    return kind == RMSG_READ_RESP && (flags & RMSG_READ_ATT);
}

/* Encode-side check of the inline payload: only a READ_RESP flagged inline carries it, with its
 * one non-tombstone route, exactly that route's length, within ROUTE_MSG_MAX_INLINE (attached:
 * ROUTE_MSG_MAX_INLINE_ATT). */
static int check_inline(const route_msg_t *m)
{
    if (!has_inline(m->kind, m->flags))
        return m->inl_len == 0 && m->att_len == 0
                   ? 0
                   : kvm_errf(KVMESH_EINVAL, "route message %s: inline bytes not allowed",
                              route_msg_kind_name(m->kind));
    const kvm_route_t *r = m->n_routes != 1 ? NULL : m->rptrs ? m->rptrs[0] : &m->routes[0];
    bool att = is_att(m->kind, m->flags);
    uint32_t n = att ? m->att_len : m->inl_len;
    if (att && ((m->flags & RMSG_READ_INLINE) || m->inl_len))
        return kvm_errf(KVMESH_EINVAL,
                        "read answer: inline bytes both in the message and attached");
    if (!r || n > (att ? ROUTE_MSG_MAX_INLINE_ATT : ROUTE_MSG_MAX_INLINE) ||
        (!att && ((m->inl_len && !m->inl) || m->att_len)) || r->length != n)
        return kvm_errf(KVMESH_EINVAL, "read answer: %u inline bytes for a route of %llu", n,
                        r ? (unsigned long long)r->length : 0ull);
    return 0;
}

/* Largest route count a kind may carry, and the smallest. */
static void kind_route_bounds(uint16_t kind, uint32_t *lo, uint32_t *hi)
{
    *lo = 0;
    *hi = 0;
    switch (kind) {
    case RMSG_CAS_REQ:
    case RMSG_CAS_CLAIM_REQ:
    case RMSG_MIRROR_REQ:
    case RMSG_REPAIR:
        *lo = *hi = 1;
        break;
    case RMSG_CAS_RESP:
    case RMSG_CAS_CLAIM_RESP:
    case RMSG_READ_RESP:
        *hi = 1;
        break;
    case RMSG_FETCH_RESP:
    case RMSG_OWNER_RESP:
    case RMSG_INSTALL_REQ:
        *hi = ROUTE_MSG_MAX_ROUTES;
        break;
    default:
        break;
    }
}

size_t route_msg_size_bound(const route_msg_t *m)
{
    size_t n = 256 + (size_t)m->n_set * 32;
    if (m->has_ident)
        n += 4 + KVM_WIRE_MAX_RECORD_LEN;
    n += (size_t)m->n_routes * (4 + KVM_WIRE_MAX_RECORD_LEN);
    n += 4 + (size_t)m->claim_len;
    n += 4 + (size_t)m->inl_len;
    return KVM_MIN(n, (size_t)ROUTE_MSG_MAX_LEN);
}

int route_msg_encode(const route_msg_t *m, uint8_t *buf, size_t cap, size_t *out_len)
{
    uint32_t lo, hi;
    if (m->kind == 0 || m->kind > RMSG_KIND_MAX || m->kind == RMSG_BATCH ||
        !strcmp(route_msg_kind_name(m->kind), "unknown"))
        return kvm_errf(KVMESH_EINVAL, "route message kind %u unknown", m->kind);
    if (m->claim_len > ROUTE_MSG_MAX_CLAIM || (m->claim_len && !m->claim) ||
        (m->claim_len && !has_claim(m->kind)))
        return kvm_errf(KVMESH_EINVAL, "route message %s: claim of %u bytes not allowed",
                        route_msg_kind_name(m->kind), m->claim_len);
    kind_route_bounds(m->kind, &lo, &hi);
    if (m->n_routes < lo || m->n_routes > hi || m->n_set > ROUTE_MSG_MAX_SET)
        return kvm_errf(KVMESH_EINVAL, "route message %s: %u routes, %u members out of range",
                        route_msg_kind_name(m->kind), m->n_routes, m->n_set);
    if (m->kind == RMSG_READ_REQ && !m->has_ident)
        return kvm_errf(KVMESH_EINVAL, "read request without an identity");
    int irc = check_inline(m);
    if (irc)
        return irc;
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, 'R');
    kvm_wr_u8(&w, ROUTE_MSG_VERSION);
    kvm_wr_u16le(&w, m->kind);
    kvm_wr_u64le(&w, m->req_id);
    kvm_wr_u32le(&w, m->shard);
    kvm_wr_u64le(&w, m->generation);
    kvm_wr_u64le(&w, m->token);
    kvm_wr_u32le(&w, (uint32_t)m->status);
    w_rt(&w, &m->target);
    kvm_wr_u64le(&w, m->expected.fencing_token);
    kvm_wr_u64le(&w, m->expected.primary_sequence);
    kvm_wr_u8(&w, m->has_ident ? 1 : 0);
    if (m->has_ident) { /* the frame in place after its length */
        size_t at = w.len, avail = 0, n = 0;
        kvm_wr_u32le(&w, 0);
        uint8_t *tail = kvm_wr_tail(&w, 0, &avail);
        int rc = tail ? wire_ident_encode_fast(&m->ident, tail, avail, &n) : 0;
        if (rc == KVMESH_ETOOBIG)
            kvm_wr_fail(&w, KVMESH_ETOOBIG);
        else if (rc)
            return rc;
        else if (tail) {
            kvm_wr_advance(&w, n);
            kvm_wr_patch_u32le(&w, at, (uint32_t)n);
        }
    }
    kvm_wr_bytes(&w, m->owner.b, KVM_ID128_LEN);
    kvm_wr_u32le(&w, m->limit);
    kvm_wr_u64le(&w, m->remaining_ns);
    kvm_wr_u32le(&w, m->flags);
    w_rt(&w, &m->primary);
    kvm_wr_u32le(&w, m->primary_node);
    kvm_wr_u32le(&w, m->n_set);
    for (uint32_t i = 0; i < m->n_set; i++) {
        w_rt(&w, &m->set[i].rt);
        kvm_wr_u32le(&w, m->set[i].node);
    }
    kvm_wr_u8(&w, m->more ? 1 : 0);
    kvm_wr_u32le(&w, m->n_routes);
    for (uint32_t i = 0; i < m->n_routes; i++) {
        /* write the frame in place after its length */
        size_t at = w.len, avail = 0;
        kvm_wr_u32le(&w, 0);
        uint8_t *tail = kvm_wr_tail(&w, 0, &avail);
        if (!tail)
            break;
        size_t n = m->rframe_len;
        int rc = 0;
        if (i == 0 && m->rframe) { /* encoded once by the sender */
            if (n > avail)
                rc = KVMESH_ETOOBIG;
            else
                memcpy(tail, m->rframe, n);
        } else {
            rc = wire_route_encode(m->rptrs ? m->rptrs[i] : &m->routes[i], tail, avail, &n);
        }
        if (rc == KVMESH_ETOOBIG) {
            kvm_wr_fail(&w, KVMESH_ETOOBIG);
            break;
        }
        if (rc)
            return rc;
        kvm_wr_advance(&w, n);
        kvm_wr_patch_u32le(&w, at, (uint32_t)n);
    }
    if (has_claim(m->kind))
        kvm_wr_lp32le(&w, m->claim, m->claim_len);
    if (is_att(m->kind, m->flags))
        kvm_wr_u32le(&w, m->att_len); /* the bytes follow as the attachment */
    else if (has_inline(m->kind, m->flags))
        kvm_wr_lp32le(&w, m->inl, m->inl_len);
    size_t len = 0;
    if (kvm_wr_finish(&w, &len) != 0 || len > ROUTE_MSG_MAX_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "route message %s does not fit %zu bytes",
                        route_msg_kind_name(m->kind), cap);
    *out_len = len;
    return 0;
}

static int bad(route_msg_t *out, const char *what)
{
    route_msg_clear(out);
    return kvm_errf(KVMESH_EPROTO, "route message: %s", what);
}

int route_msg_decode(uint32_t type, const uint8_t *buf, size_t len, route_msg_t *out)
{
    route_msg_init(out, 0);
    out->decoded_at = out;
    if (len > ROUTE_MSG_MAX_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "route message of %zu bytes; max %u", len,
                        ROUTE_MSG_MAX_LEN);
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    if (kvm_rd_u8(&r) != 'R')
        return bad(out, "bad magic");
    uint8_t ver = kvm_rd_u8(&r);
    if (!kvm_rd_ok(&r))
        return bad(out, "truncated header");
    if (ver != ROUTE_MSG_VERSION)
        return kvm_errf(KVMESH_EINCOMPAT, "route message codec version %u; this build speaks %u",
                        ver, ROUTE_MSG_VERSION);
    out->kind = kvm_rd_u16le(&r);
    if (out->kind == 0 || out->kind > RMSG_KIND_MAX || out->kind == RMSG_BATCH ||
        !strcmp(route_msg_kind_name(out->kind), "unknown"))
        return bad(out, "unknown kind");
    if (type != ROUTE_MSG_BASE + out->kind)
        return bad(out, "kind does not match the message type");
    out->req_id = kvm_rd_u64le(&r);
    out->shard = kvm_rd_u32le(&r);
    out->generation = kvm_rd_u64le(&r);
    out->token = kvm_rd_u64le(&r);
    out->status = (int32_t)kvm_rd_u32le(&r);
    r_rt(&r, &out->target);
    out->expected.fencing_token = kvm_rd_u64le(&r);
    out->expected.primary_sequence = kvm_rd_u64le(&r);
    uint8_t has_ident = kvm_rd_u8(&r);
    if (has_ident > 1)
        return bad(out, "bad ident flag");
    if (has_ident) {
        uint32_t n = 0;
        const uint8_t *p = kvm_rd_lp32le(&r, &n);
        if (!p)
            return bad(out, "truncated ident");
        if (wire_ident_decode_in(p, n, &out->ident, out->ident_buf, sizeof(out->ident_buf)) != 0)
            return bad(out, "bad ident frame");
        out->has_ident = true;
    }
    kvm_rd_copy(&r, out->owner.b, KVM_ID128_LEN);
    out->limit = kvm_rd_u32le(&r);
    out->remaining_ns = kvm_rd_u64le(&r);
    out->flags = kvm_rd_u32le(&r);
    r_rt(&r, &out->primary);
    out->primary_node = kvm_rd_u32le(&r);
    out->n_set = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r))
        return bad(out, "truncated body");
    if (out->n_set > ROUTE_MSG_MAX_SET)
        return bad(out, "authority set too large");
    for (uint32_t i = 0; i < out->n_set; i++) {
        r_rt(&r, &out->set[i].rt);
        out->set[i].node = kvm_rd_u32le(&r);
    }
    uint8_t more = kvm_rd_u8(&r);
    if (more > 1)
        return bad(out, "bad more flag");
    out->more = more != 0;
    uint32_t nr = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r))
        return bad(out, "truncated body");
    uint32_t lo, hi;
    kind_route_bounds(out->kind, &lo, &hi);
    if (nr < lo || nr > hi)
        return bad(out, "route count out of range for the kind");
    if (out->kind == RMSG_READ_REQ && !out->has_ident)
        return bad(out, "read request without an identity");
    if (nr == 1) { /* in the message's own storage: no allocation */
        uint32_t n = 0;
        const uint8_t *p = kvm_rd_lp32le(&r, &n);
        if (!p)
            return bad(out, "truncated route");
        out->routes = &out->route1;
        out->n_routes = 1;
        if (wire_route_decode_in(p, n, &out->route1, out->rident_buf, sizeof(out->rident_buf)) !=
            0) {
            out->n_routes = 0; /* (a failed decode owns nothing) */
            return bad(out, "bad route frame");
        }
    } else if (nr) {
        out->routes = calloc(nr, sizeof(kvm_route_t));
        if (!out->routes) {
            route_msg_clear(out);
            return kvm_errf(KVMESH_ENOMEM, "route message: out of memory");
        }
        for (uint32_t i = 0; i < nr; i++) {
            uint32_t n = 0;
            const uint8_t *p = kvm_rd_lp32le(&r, &n);
            if (!p)
                return bad(out, "truncated route");
            out->n_routes = i + 1; /* so that clear frees what was decoded */
            if (wire_route_decode(p, n, &out->routes[i]) != 0)
                return bad(out, "bad route frame");
        }
    }
    if (has_claim(out->kind)) {
        uint32_t n = 0;
        const uint8_t *p = kvm_rd_lp32le(&r, &n);
        if (!p)
            return bad(out, "truncated claim");
        if (n > ROUTE_MSG_MAX_CLAIM)
            return bad(out, "claim too large");
        if (n) {
            out->claim = malloc(n);
            if (!out->claim) {
                route_msg_clear(out);
                return kvm_errf(KVMESH_ENOMEM, "route message: out of memory");
            }
            memcpy(out->claim, p, n);
            out->claim_len = n;
        }
    }
    if (is_att(out->kind, out->flags)) {
        uint32_t n = kvm_rd_u32le(&r);
        if (!kvm_rd_ok(&r))
            return bad(out, "truncated attachment length");
        if ((out->flags & RMSG_READ_INLINE) || n > ROUTE_MSG_MAX_INLINE_ATT || out->n_routes != 1 ||
            out->routes[0].length != n)
            return bad(out, "attached inline bytes do not match the route");
        out->att_len = n;
    } else if (has_inline(out->kind, out->flags)) {
        uint32_t n = 0;
        const uint8_t *p = kvm_rd_lp32le(&r, &n);
        if (!p)
            return bad(out, "truncated inline bytes");
        if (n > ROUTE_MSG_MAX_INLINE || out->n_routes != 1 || out->routes[0].length != n)
            return bad(out, "inline bytes do not match the route");
        out->inl = p;
        out->inl_len = n;
    }
    if (!kvm_rd_end(&r))
        return bad(out, "trailing bytes");
    return 0;
}

void route_msg_attach(route_msg_t *m, env_payload_t *payload)
{
    if (!is_att(m->kind, m->flags))
        return;
    m->flags &= ~RMSG_READ_ATT;
    if (!payload || !payload->buf || payload->len != m->att_len || m->n_routes != 1 ||
        m->routes[0].length != m->att_len) {
        m->att_len = 0; /* a plain answer: the requester reads the replica */
        return;
    }
    m->flags |= RMSG_READ_INLINE;
    m->inl = payload->buf;
    m->inl_len = m->att_len;
    m->inl_att = payload;
    m->att_len = 0;
}

/* ---- batch messages (route_msg.h) ----------------------------------------------------------- */

#define BATCH_HDR_LEN 8 /* magic, version, kind, count */

bool route_msg_batchable(uint16_t kind)
{
    switch (kind) {
    case RMSG_CAS_REQ:
    case RMSG_CAS_RESP:
    case RMSG_READ_REQ:
    case RMSG_READ_RESP:
    case RMSG_MIRROR_REQ:
    case RMSG_MIRROR_RESP:
        return true;
    default:
        return false;
    }
}

/* The kind of an encoded single message, 0 when its header is not a route message's. */
static uint16_t peek_kind(const uint8_t *msg, size_t len)
{
    if (len < 4 || msg[0] != 'R' || msg[1] != ROUTE_MSG_VERSION)
        return 0;
    return (uint16_t)(msg[2] | (msg[3] << 8));
}

void route_batch_buf_init(route_batch_buf_t *b)
{
    memset(b, 0, sizeof(*b));
}

void route_batch_buf_free(route_batch_buf_t *b)
{
    free(b->buf);
    route_batch_buf_init(b);
}

int route_batch_append(route_batch_buf_t *b, const uint8_t *msg, size_t len)
{
    if (!route_msg_batchable(peek_kind(msg, len)))
        return kvm_errf(KVMESH_EINVAL, "route batch: item of kind %u is not batchable",
                        peek_kind(msg, len));
    size_t need = (b->n ? b->len : BATCH_HDR_LEN) + 4 + len;
    if (b->n >= KVM_ROUTE_BATCH_MAX || need > ROUTE_MSG_MAX_LEN)
        return KVMESH_ETOOBIG; /* the caller sends this batch and starts another */
    if (need > b->cap) {
        size_t cap = KVM_MAX(need, b->cap * 2);
        cap = KVM_MIN(KVM_MAX(cap, (size_t)4096), (size_t)ROUTE_MSG_MAX_LEN);
        uint8_t *nb = realloc(b->buf, cap);
        if (!nb)
            return KVMESH_ENOMEM;
        b->buf = nb;
        b->cap = cap;
    }
    if (b->n == 0)
        b->len = BATCH_HDR_LEN;
    uint8_t *p = b->buf + b->len;
    p[0] = (uint8_t)len;
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 24);
    memcpy(p + 4, msg, len);
    if (b->n == 0) {
        b->first_off = b->len + 4;
        b->first_len = len;
    }
    b->len += 4 + len;
    b->n++;
    return 0;
}

int route_batch_reserve(route_batch_buf_t *b, size_t cap, uint8_t **out)
{
    size_t need = (b->n ? b->len : BATCH_HDR_LEN) + 4 + cap;
    if (b->n >= KVM_ROUTE_BATCH_MAX || need > ROUTE_MSG_MAX_LEN)
        return KVMESH_ETOOBIG; /* the caller sends this batch and starts another */
    if (need > b->cap) {
        size_t ncap = KVM_MAX(need, b->cap * 2);
        ncap = KVM_MIN(KVM_MAX(ncap, (size_t)4096), (size_t)ROUTE_MSG_MAX_LEN);
        uint8_t *nb = realloc(b->buf, ncap);
        if (!nb)
            return KVMESH_ENOMEM;
        b->buf = nb;
        b->cap = ncap;
    }
    if (b->n == 0)
        b->len = BATCH_HDR_LEN;
    *out = b->buf + b->len + 4;
    return 0;
}

void route_batch_commit(route_batch_buf_t *b, size_t len)
{
    uint8_t *p = b->buf + b->len;
    KVM_ASSERT(b->n < KVM_ROUTE_BATCH_MAX && b->len + 4 + len <= b->cap);
    KVM_ASSERT(route_msg_batchable(peek_kind(p + 4, len)));
    p[0] = (uint8_t)len;
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 24);
    if (b->n == 0) {
        b->first_off = b->len + 4;
        b->first_len = len;
    }
    b->len += 4 + len;
    b->n++;
}

const uint8_t *route_batch_bytes(route_batch_buf_t *b, size_t *len)
{
    KVM_ASSERT(b->n >= 2);
    kvm_wr_t w;
    kvm_wr_fixed(&w, b->buf, BATCH_HDR_LEN);
    kvm_wr_u8(&w, 'R');
    kvm_wr_u8(&w, ROUTE_MSG_VERSION);
    kvm_wr_u16le(&w, RMSG_BATCH);
    kvm_wr_u32le(&w, b->n);
    size_t hl = 0;
    int rc = kvm_wr_finish(&w, &hl);
    KVM_ASSERT(rc == 0 && hl == BATCH_HDR_LEN);
    *len = b->len;
    return b->buf;
}

int route_batch_decode(uint32_t type, const uint8_t *buf, size_t len, route_batch_view_t *out)
{
    out->n = 0;
    if (type != ROUTE_MSG_BASE + RMSG_BATCH)
        return kvm_errf(KVMESH_EPROTO, "route batch: message type %u is not a batch", type);
    if (len > ROUTE_MSG_MAX_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "route batch of %zu bytes; max %u", len, ROUTE_MSG_MAX_LEN);
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    uint8_t magic = kvm_rd_u8(&r);
    uint8_t ver = kvm_rd_u8(&r);
    uint16_t kind = kvm_rd_u16le(&r);
    uint32_t n = kvm_rd_u32le(&r);
    if (!kvm_rd_ok(&r) || magic != 'R')
        return kvm_errf(KVMESH_EPROTO, "route batch: truncated header or bad magic");
    if (ver != ROUTE_MSG_VERSION)
        return kvm_errf(KVMESH_EINCOMPAT, "route batch codec version %u; this build speaks %u", ver,
                        ROUTE_MSG_VERSION);
    if (kind != RMSG_BATCH)
        return kvm_errf(KVMESH_EPROTO, "route batch: kind %u in a batch message", kind);
    if (n < 2 || n > KVM_ROUTE_BATCH_MAX)
        return kvm_errf(KVMESH_EPROTO, "route batch of %u items; expected 2..%u", n,
                        KVM_ROUTE_BATCH_MAX);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t il = 0;
        const uint8_t *p = kvm_rd_lp32le(&r, &il);
        if (!p)
            return kvm_errf(KVMESH_EPROTO, "route batch: item %u truncated", i);
        uint16_t k = peek_kind(p, il);
        if (!route_msg_batchable(k))
            return kvm_errf(KVMESH_EPROTO, "route batch: item %u of kind %u is not batchable", i,
                            k);
        out->kind[i] = k;
        out->item[i] = p;
        out->len[i] = il;
    }
    if (!kvm_rd_end(&r))
        return kvm_errf(KVMESH_EPROTO, "route batch: trailing bytes");
    out->n = n;
    return 0;
}
