/* SPDX-License-Identifier: Apache-2.0 */
/*
 * put_inline.c — inline writes of a single small put (put_inline.h, docs/store.md "Inline
 * writes", docs/protocol.md "Inline writes").
 *
 * Requester: a single put (one item) of 1..inline_write_max bytes, not under transport shm,
 * checksums its value before the reservation (the pass the payload write would fuse) and each
 * reservation to a remote owner (not one on this host under transport auto, whose writes go
 * through shared memory; not one that refused the message) is a STORE_RPC_RESERVE_INLINE that
 * carries the value. A replica whose owner answered it is written (kvm_res.written): the
 * payload stage skips it; every other replica (local, shm, a fallback) is written as before.
 * An owner that predates the message answers KVMESH_ENOTSUP (no handler): ops_place.c sends the
 * plain reservation and remembers the owner (id and epoch) here.
 *
 * Owner: the reservation is made exactly as a STORE_RPC_RESERVE's (same slot core call, TTL,
 * quota of space, eviction wait); once granted, the bytes go into the reserved range through
 * seg_check with the reservation's write grant (what a transport WRITE with that grant passes),
 * with the checksum fused into the copy. A mismatch, or a range the check refuses, releases the
 * reservation (by its token) and fails it; only then does the requester get an answer, so a
 * successful answer means the bytes are in the slot. The request body is borrowed while the
 * handler runs; a reservation that waits (for eviction) gets its own copy of the bytes. A traced
 * request records control.owner_reserve (kvmesh.inline 1, kvmesh.waited) until the answer.
 * Tested by tests/unit/test_store_inline_write.c (kvm_put_inline_test_bad_sums: its hook).
 */
#include "store/put_inline.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "net/seg.h"
#include "store/get_inline.h"
#include "store/proto.h"
#include "store/slot_core.h"
#include "store/test_hook.h"

static _Atomic uint32_t test_bad_sums; /* kvm_put_inline_test_bad_sums: bodies still to spoil */

uint32_t kvm_put_inline_test_bad_sums(uint32_t n)
{
    return kvm_test_arm(&test_bad_sums, n);
}

bool kvm_put_inline_test_bad_sum(void)
{
    return kvm_test_take(&test_bad_sums);
}

/* ---- requester ------------------------------------------------------------------------------ */

void kvm_put_inline_prepare(kvm_rt_t *rt, kvm_op_t *place, const struct kvm_sg *sgs, size_t n)
{
    place->winl.on = false;
    place->winl.sum_later = false;
    if (n != 1 || rt->cfg.inline_write_max == 0 || sgs[0].len == 0)
        return;
    /* the largest value a reservation or a put at the primary may carry (put_primary.c): under
     * shm only the latter, up to its shm bound; above inline_write_max only the latter over tcp,
     * for a put that may take it (one replica, no cold tier) */
    uint64_t max = rt->cfg.inline_write_max < STORE_INLINE_WRITE_MAX ? rt->cfg.inline_write_max
                                                                     : STORE_INLINE_WRITE_MAX;
    if (rt->cfg.transport == TP_SHM)
        max = max < STORE_PUT_PRIMARY_SHM_MAX ? max : STORE_PUT_PRIMARY_SHM_MAX;
    else if (place->replicas == 1 && rt->cfg.cold_kind == KVM_STORE_COLD_OFF &&
             !rt->cfg.cold_write_through)
        max = STORE_PUT_PRIMARY_RAW_MAX;
    if (sgs[0].len > max)
        return;
    place->winl.iov = sgs[0].iov;
    place->winl.iovcnt = sgs[0].iovcnt;
    place->winl.on = true;
    /* a value only a put at the primary's raw form may take: summed by the loop as it stages
     * the value, or by the payload stage if the put goes another way (store.h winl.sum_later) */
    place->winl.sum_later = sgs[0].len > rt->cfg.inline_write_max;
    if (place->winl.sum_later)
        return;
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    for (int i = 0; i < sgs[0].iovcnt; i++)
        kvm_sum_update(&st, sgs[0].iov[i].iov_base, sgs[0].iov[i].iov_len);
    place->items[0].checksum = kvm_sum_digest(&st);
    KVM_CP_COUNT(place, op_checksum_passes_total, OBS_NONE, 1);
}

static bool refused(const kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    uint32_t n =
        rt->n_winl_refused < STORE_WINL_REFUSED_MAX ? rt->n_winl_refused : STORE_WINL_REFUSED_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (kvm_runtime_equal(&rt->winl_refused[i], owner))
            return true;
    return false;
}

bool kvm_put_inline_wants(kvm_rt_t *rt, const kvm_op_t *op, const kvm_runtime_t *owner,
                          const char *data_addr)
{
    if (!op->winl.on || op->n != 1 || atomic_load(&op->abandoned) ||
        kvm_id128_equal(&owner->id, &rt->self.id) || rt->cfg.transport == TP_SHM ||
        op->items[0].len > rt->cfg.inline_write_max || op->items[0].len > STORE_INLINE_WRITE_MAX)
        return false; /* (an abandoned op's caller may have freed the value; a value prepared
                         for a put at the primary alone: put_primary.c) */
    if (rt->cfg.transport == TP_AUTO && data_addr && kvm_inline_same_host(rt, data_addr))
        return false;
    return !refused(rt, owner);
}

uint8_t *kvm_put_inline_body(const kvm_op_t *op, const struct kvm_item *it,
                             const kvm_runtime_t *owner, uint32_t ttl_ms, size_t *len)
{
    KVM_ASSERT(op->winl.on && it->len > 0 && it->len <= STORE_INLINE_WRITE_MAX);
    size_t cap = STORE_RESERVE_INLINE_HEAD_MAX + (size_t)it->len, head = 0;
    uint8_t *body = malloc(cap);
    if (!body) {
        kvm_errf(KVMESH_ENOMEM, "inline reservation of %" PRIu64 " bytes: out of memory", it->len);
        return NULL;
    }
    store_reserve_inline_req_t m = {.r = {.target_epoch = owner->epoch,
                                          .length = it->len,
                                          .ttl_ms = ttl_ms,
                                          .ident = it->ident},
                                    .checksum = it->checksum};
    if (kvm_put_inline_test_bad_sum())
        m.checksum ^= 1; /* test-only: the owner must refuse these bytes */
    if (store_reserve_inline_head_encode(&m, body, STORE_RESERVE_INLINE_HEAD_MAX, &head) != 0) {
        free(body);
        return NULL;
    }
    uint64_t pos = 0;
    for (int i = 0; i < op->winl.iovcnt; i++) {
        KVM_ASSERT(pos + op->winl.iov[i].iov_len <= it->len);
        memcpy(body + head + pos, op->winl.iov[i].iov_base, op->winl.iov[i].iov_len);
        pos += op->winl.iov[i].iov_len;
    }
    KVM_ASSERT(pos == it->len); /* (the value's length is the sum of its list) */
    *len = head + (size_t)pos;
    return body;
}

void kvm_put_inline_reserved(kvm_op_t *op, struct kvm_res *r, bool inl)
{
    if (op->winl.sum_later) /* reserved without the value: the payload stage sums it */
        op->winl.on = false;
    r->written = inl;
    if (!inl)
        return;
    /* the sender's and the receiver's socket copies, as a tcp write's */
    KVM_CP_COUNT(op, op_payload_copies_total, OBS_TRANSPORT_TCP, 2);
    /* the replica's bytes were written over tcp (in the reservation's RPC exchange): counted as
     * the tcp write a transport batch would have made (kvmesh_transport_*{operation="write"}) */
    obs_count(op->rt->metrics, transport_operations_total, OBS_TRANSPORT_TCP, OBS_XOP_WRITE, 1);
    obs_count(op->rt->metrics, transport_bytes_total, OBS_TRANSPORT_TCP, OBS_XOP_WRITE,
              op->items[0].len);
}

void kvm_put_inline_refused(kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    if (refused(rt, owner))
        return;
    rt->winl_refused[rt->n_winl_refused++ % STORE_WINL_REFUSED_MAX] = *owner;
}

/* ---- owner ---------------------------------------------------------------------------------- */

struct inl_serve {
    kvm_rt_t *rt;
    rpc_reply *reply;
    uint64_t len, checksum;
    const uint8_t *src; /* the bytes: the request body's (handler running) or own; NULL: none */
    uint8_t *own;       /* the copy of a reservation that waited; NULL otherwise */
    bool *answered;     /* the handler's flag while it runs; NULL after */
    struct obs_span span;
    struct obs_span *sp; /* &span while traced (control.owner_reserve); NULL: untraced */
};

static void reply_err(rpc_reply *reply, int rc, const char *msg)
{
    if (rpc_reply_send(reply, rc, msg, NULL, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply); /* the caller times out */
}

void kvm_put_inline_release(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token)
{
    slot_note_t note = {.has = SLOT_NOTE_TOKEN, .token = token};
    kvm_owner_release_note(rt, seg, off, &note);
}

static void release_slot(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token)
{
    kvm_put_inline_release(rt, seg, off, token);
}

/* Copies s's bytes into the reserved range with the checksum fused; 0 or an error (msg). */
static int fill(struct inl_serve *s, uint64_t seg, uint64_t off, uint64_t token, char *msg,
                size_t cap)
{
    return kvm_put_inline_fill(s->rt, s->src, s->len, s->checksum, seg, off, token, msg, cap);
}

int kvm_put_inline_fill(kvm_rt_t *rt, const uint8_t *src, uint64_t len, uint64_t checksum,
                        uint64_t seg, uint64_t off, uint64_t token, char *msg, size_t cap)
{
    if (!src) {
        snprintf(msg, cap, "inline reservation: out of memory for its %" PRIu64 " bytes", len);
        return KVMESH_ENOMEM;
    }
    uint8_t *p = NULL;
    struct seg *pin = NULL;
    enum seg_reason why;
    if (seg_check(rt->reg, seg, off, len, SEG_WRITE, token, &p, &pin, &why) != 0) {
        snprintf(msg, cap, "inline reservation: the reserved range refused the bytes: %s",
                 seg_reason_str(why));
        return KVMESH_EUNAVAILABLE;
    }
    /* One pass: each stripe of src loaded once, stored into the slot and hashed (core/hash.h),
     * so the bytes hashed are the bytes stored; a copy and then a hash of the slot were two
     * passes (docs/performance.md "Batch items, eleventh round"). */
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    kvm_sum_update_copy(&st, p, src, (size_t)len);
    seg_unpin(rt->reg, pin);
    if (kvm_sum_digest(&st) != checksum) {
        snprintf(msg, cap, "inline reservation: the %" PRIu64 " bytes do not match their checksum",
                 len);
        return KVMESH_ECHECKSUM;
    }
    return 0;
}

static void inline_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                            uint64_t token)
{
    struct inl_serve *s = arg;
    if (s->answered)
        *s->answered = true;
    char msg[160];
    if (!rc && (rc = fill(s, seg, off, token, msg, sizeof(msg))) != 0) {
        release_slot(s->rt, seg, off, token);
        err = msg;
    }
    if (s->sp) {
        obs_span_set_int(s->sp, "kvmesh.waited", s->answered == NULL);
        if (!rc) {
            obs_span_set_int(s->sp, "kvmesh.segment", (int64_t)seg);
            obs_span_set_int(s->sp, "kvmesh.offset", (int64_t)off);
        }
    }
    kvm_span_finish(s->sp, rc);
    if (rc) {
        reply_err(s->reply, rc, err);
    } else {
        uint8_t body[64];
        size_t len = 0;
        store_reserve_resp_t resp = {seg, off, token};
        store_reserve_resp_encode(&resp, body, sizeof(body), &len);
        struct rpc_msg m = {.type = STORE_RPC_RESERVE_INLINE, .body = body, .body_len = len};
        if (rpc_reply_send(s->reply, 0, NULL, &m, NULL, NULL) == KVMESH_EAGAIN)
            rpc_reply_drop(s->reply); /* the caller times out; the reservation expires by TTL */
    }
    free(s->own);
    free(s);
}

static void on_reserve_inline(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    store_reserve_inline_req_t m;
    if (store_reserve_inline_req_decode(req->body, req->body_len, &m) != 0) {
        reply_err(reply, KVMESH_EPROTO, kvmesh_last_error());
        return;
    }
    struct inl_serve *s = calloc(1, sizeof(*s));
    if (m.r.target_epoch != rt->self.epoch || !s) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "inline reservation for epoch %" PRIu64 " reached epoch %" PRIu64,
                 m.r.target_epoch, rt->self.epoch);
        reply_err(reply, s ? KVMESH_EUNAVAILABLE : KVMESH_ENOMEM, s ? msg : "out of memory");
        free(s);
        kvm_ident_free(&m.r.ident);
        return;
    }
    bool answered = false;
    *s = (struct inl_serve){.rt = rt,
                            .reply = reply,
                            .len = m.r.length,
                            .checksum = m.checksum,
                            .src = m.payload,
                            .answered = &answered};
    /* the owner's span, STORE_RPC_RESERVE's control.owner_reserve marked inline; it lasts
     * until the answer (a reservation may wait for eviction) */
    if (req->trace.flags & OBS_TRACE_FLAG_SAMPLED &&
        (s->sp = kvm_span_remote(rt, &req->trace, "control.owner_reserve", &s->span))) {
        obs_span_set_int(s->sp, "kvmesh.bytes", (int64_t)m.r.length);
        obs_span_set_int(s->sp, "kvmesh.inline", 1);
    }
    kvm_owner_reserve(rt, &m.r.ident, m.r.length, m.r.ttl_ms, inline_reserved, s);
    if (!answered) { /* the reservation waits: the body is gone once the handler returns */
        s->answered = NULL;
        s->own = malloc((size_t)m.r.length);
        if (s->own)
            memcpy(s->own, m.payload, (size_t)m.r.length);
        s->src = s->own; /* (NULL: the answer fails with KVMESH_ENOMEM and releases the slot) */
    }
    kvm_ident_free(&m.r.ident);
}

void kvm_put_inline_register(kvm_rt_t *rt)
{
    rpc_register_handler(rt->ep, STORE_RPC_RESERVE_INLINE, on_reserve_inline, rt);
}
