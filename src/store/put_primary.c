/* SPDX-License-Identifier: Apache-2.0 */
/*
 * put_primary.c — puts at the primary (put_primary.h, docs/store.md "Puts at the primary",
 * docs/protocol.md "Put at the primary").
 *
 * Requester (ops_place.c): a reservation that would be an inline one (put_inline.c) of a single
 * API put wanting one replica, without tenant quota (its claim needs the writer's flow) and
 * without a cold tier here, whose owner is the primary of the key's shard in this runtime's route
 * view, goes as STORE_RPC_PUT_PRIMARY. The answer ends the item: PUBLISHED (the owner's replica
 * is written, committed and routed: the item ends DONE in the PLACE op, data.c publishes nothing),
 * NOT_RESERVED (a failed reservation: the next owner is tried), FAILED (the owner's publication
 * failed: the item fails with its status and message), FALLBACK (declined, or an older owner:
 * the inline reservation is sent instead and the put goes on as before), or UNKNOWN (no answer:
 * the owner may have published, so nothing is retried elsewhere: the put fails "may have been
 * applied", as a publication whose answer was lost and could not be settled does).
 *
 * Owner: declines (nothing reserved) unless its route service is the active primary of the
 * key's shard now (route_is_primary_now: active, token installed, lease valid), the key has no
 * tenant quota here and this runtime has no cold tier. Otherwise it reserves exactly as
 * STORE_RPC_RESERVE_INLINE does (same slot core call, TTL, eviction wait) and writes the bytes
 * through the reservation's write grant with the checksum fused (kvm_put_inline_fill); a failure
 * releases the slot and answers NOT_RESERVED. Then it checks once more that it is the active
 * primary (a reservation may have waited for eviction): if not, it releases the slot and
 * declines. Else it runs a PUBLISH op of that one replica on its own loop (kvm_op_t.on_done: no
 * thread waits): the same code as the requester's publication (ops_publish.c) — the fenced route
 * CAS through this runtime's route service (its own authority: no round trip; mirrored to the
 * shard's set), expecting this runtime's route hint (which its own publications keep current),
 * conflicts retried from the current route up to STORE_CONFLICT_RETRIES (last writer wins), an
 * indeterminate or unanswered CAS settled by an exact lookup (the reservation is held meanwhile;
 * if it stays unsettled it is kept and its expiry asks the route), the slot committed and the
 * replaced replicas released. Its deadline is the requester's budget from the message, so the
 * answer comes before the requester stops waiting (barring a slow network: then UNKNOWN above).
 * The answer carries the outcome and, once published, the route (the requester's hint).
 * A traced request records control.owner_reserve (kvmesh.inline 1, kvmesh.primary 1) until the
 * answer, with the publication's control.route_cas under it.
 */
#include "store/put_primary.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "core/wire.h"
#include "net/bufpool.h"
#include "route/route.h"
#include "store/get_inline.h"
#include "store/put_inline.h"
#include "store/quota.h"
#include "store/test_hook.h"

/* Bytes of staged values a runtime keeps for its next puts at the primary (two of the largest) */
#define PRIM_POOL_BYTES (2ull * STORE_PUT_PRIMARY_RAW_MAX)

static _Atomic uint32_t test_declines; /* kvm_put_primary_test_decline: puts still to decline */

uint32_t kvm_put_primary_test_decline(uint32_t n)
{
    return kvm_test_arm(&test_declines, n);
}

static _Atomic uint32_t test_expire_landing; /* kvm_put_primary_test_expire_landing */

uint32_t kvm_put_primary_test_expire_landing(uint32_t n)
{
    return kvm_test_arm(&test_expire_landing, n);
}

/* ---- requester ------------------------------------------------------------------------------ */

static bool in_ring(const kvm_runtime_t *ring, uint32_t count, const kvm_runtime_t *owner)
{
    uint32_t n = count < STORE_WINL_REFUSED_MAX ? count : STORE_WINL_REFUSED_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (kvm_runtime_equal(&ring[i], owner))
            return true;
    return false;
}

static bool refused(const kvm_rt_t *rt, const kvm_runtime_t *owner, bool raw)
{
    return raw ? in_ring(rt->prim_raw_refused, rt->n_prim_raw_refused, owner)
               : in_ring(rt->prim_refused, rt->n_prim_refused, owner);
}

bool kvm_put_primary_raw(const kvm_rt_t *rt, const struct kvm_item *it)
{
    return it->len > rt->cfg.inline_write_max;
}

bool kvm_put_primary_wants(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                           const kvm_runtime_t *owner, const char *data_addr)
{
    if (!op->winl.on || op->cp_op != 1 + OBS_OP_PUT || op->n != 1 || it->want != 1 ||
        it->n_res != 0 || it->q || !rt->route || rt->cfg.cold_kind != KVM_STORE_COLD_OFF ||
        rt->cfg.cold_write_through || atomic_load(&op->abandoned) ||
        kvm_id128_equal(&owner->id, &rt->self.id))
        return false; /* (an abandoned op's caller may have freed the value) */
    /* an owner whose payload writes go through shared memory takes small values only */
    bool shm = rt->cfg.transport == TP_SHM ||
               (rt->cfg.transport == TP_AUTO && data_addr && kvm_inline_same_host(rt, data_addr));
    bool raw = kvm_put_primary_raw(rt, it);
    if (shm ? it->len > STORE_PUT_PRIMARY_SHM_MAX || raw
            : it->len > (raw ? STORE_PUT_PRIMARY_RAW_MAX : STORE_INLINE_WRITE_MAX))
        return false;
    if (refused(rt, owner, raw))
        return false;
    kvm_runtime_t prim;
    return route_primary_hint(rt->route, &it->ident, &prim) == 0 && kvm_runtime_equal(&prim, owner);
}

static store_put_primary_req_t request(const struct kvm_item *it, const kvm_runtime_t *owner,
                                       uint32_t ttl_ms, uint32_t budget_ms)
{
    store_put_primary_req_t m = {.w = {.r = {.target_epoch = owner->epoch,
                                             .length = it->len,
                                             .ttl_ms = ttl_ms,
                                             .ident = it->ident},
                                       .checksum = it->checksum},
                                 .budget_ms = budget_ms};
    if (kvm_put_inline_test_bad_sum())
        m.w.checksum ^= 1; /* test-only: the owner must refuse these bytes */
    return m;
}

/* Gathers the value of op (winl) into dst (it->len bytes). */
static void gather(const kvm_op_t *op, const struct kvm_item *it, uint8_t *dst)
{
    uint64_t pos = 0;
    for (int i = 0; i < op->winl.iovcnt; i++) {
        KVM_ASSERT(pos + op->winl.iov[i].iov_len <= it->len);
        memcpy(dst + pos, op->winl.iov[i].iov_base, op->winl.iov[i].iov_len);
        pos += op->winl.iov[i].iov_len;
    }
    KVM_ASSERT(pos == it->len); /* (the value's length is the sum of its list) */
}

uint8_t *kvm_put_primary_body(const kvm_op_t *op, const struct kvm_item *it,
                              const kvm_runtime_t *owner, uint32_t ttl_ms, uint32_t budget_ms,
                              size_t *len)
{
    KVM_ASSERT(op->winl.on && it->len > 0 && it->len <= STORE_INLINE_WRITE_MAX);
    size_t cap = STORE_PUT_PRIMARY_HEAD_MAX + (size_t)it->len, head = 0;
    uint8_t *body = malloc(cap);
    if (!body) {
        kvm_errf(KVMESH_ENOMEM, "put at the primary of %" PRIu64 " bytes: out of memory", it->len);
        return NULL;
    }
    store_put_primary_req_t m = request(it, owner, ttl_ms, budget_ms);
    if (store_put_primary_head_encode(&m, body, STORE_PUT_PRIMARY_HEAD_MAX, &head) != 0) {
        free(body);
        return NULL;
    }
    gather(op, it, body + head);
    *len = head + (size_t)it->len;
    return body;
}

uint8_t *kvm_put_primary_raw_body(kvm_op_t *op, struct kvm_item *it, const kvm_runtime_t *owner,
                                  uint32_t ttl_ms, uint32_t budget_ms, uint8_t *head,
                                  size_t *head_len)
{
    KVM_ASSERT(op->winl.on && it->len > 0 && it->len <= STORE_PUT_PRIMARY_RAW_MAX);
    kvm_rt_t *rt = op->rt;
    if (!rt->prim_pool && (rt->prim_pool = malloc(sizeof(*rt->prim_pool))) != NULL)
        bufpool_init(rt->prim_pool, PRIM_POOL_BYTES);
    uint8_t *val = rt->prim_pool ? bufpool_get(rt->prim_pool, (size_t)it->len) : NULL;
    if (!val) {
        kvm_errf(KVMESH_ENOMEM, "put at the primary of %" PRIu64 " bytes: out of memory", it->len);
        return NULL;
    }
    if (op->winl.sum_later) { /* the value's checksum, fused with this copy */
        struct kvm_sum st;
        kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
        uint64_t pos = 0;
        for (int i = 0; i < op->winl.iovcnt; i++) {
            KVM_ASSERT(pos + op->winl.iov[i].iov_len <= it->len);
            kvm_sum_update_copy(&st, val + pos, op->winl.iov[i].iov_base, op->winl.iov[i].iov_len);
            pos += op->winl.iov[i].iov_len;
        }
        KVM_ASSERT(pos == it->len);
        it->checksum = kvm_sum_digest(&st);
        op->winl.sum_later = false;
        KVM_CP_COUNT(op, op_checksum_passes_total, OBS_NONE, 1);
    } else {
        gather(op, it, val);
    }
    store_put_primary_req_t m = request(it, owner, ttl_ms, budget_ms);
    if (store_put_primary_raw_encode(&m, head, STORE_PUT_PRIMARY_HEAD_MAX, head_len) != 0) {
        bufpool_put(rt->prim_pool, val);
        return NULL;
    }
    return val;
}

int kvm_put_primary_raw_lend(kvm_op_t *op, struct kvm_item *it, const kvm_runtime_t *owner,
                             uint32_t ttl_ms, uint32_t budget_ms, uint8_t *head, size_t *head_len,
                             uv_buf_t *iov, unsigned *niov)
{
    KVM_ASSERT(op->winl.on && it->len > 0 && it->len <= STORE_PUT_PRIMARY_RAW_MAX);
    if (op->winl.iovcnt > RPC_MAX_IOV)
        return 1;
    bool sum = op->winl.sum_later;
    struct kvm_sum st;
    if (sum)
        kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    uint64_t pos = 0;
    unsigned n = 0;
    for (int i = 0; i < op->winl.iovcnt; i++) {
        const struct iovec *v = &op->winl.iov[i];
        KVM_ASSERT(pos + v->iov_len <= it->len);
        if (sum)
            kvm_sum_update(&st, v->iov_base, v->iov_len);
        if (v->iov_len)
            iov[n++] = uv_buf_init((char *)v->iov_base, (unsigned)v->iov_len);
        pos += v->iov_len;
    }
    KVM_ASSERT(pos == it->len); /* (the value's length is the sum of its list) */
    if (sum) {                  /* the value's checksum: its one pass on this side */
        it->checksum = kvm_sum_digest(&st);
        op->winl.sum_later = false;
        KVM_CP_COUNT(op, op_checksum_passes_total, OBS_NONE, 1);
    }
    store_put_primary_req_t m = request(it, owner, ttl_ms, budget_ms);
    int rc = store_put_primary_raw_encode(&m, head, STORE_PUT_PRIMARY_HEAD_MAX, head_len);
    if (rc)
        return rc;
    *niov = n;
    return 0;
}

void kvm_put_primary_raw_free(kvm_rt_t *rt, uint8_t *val)
{
    if (val)
        bufpool_put(rt->prim_pool, val); /* (the pool exists: it gave val) */
}

void kvm_put_primary_fini(kvm_rt_t *rt)
{
    if (!rt->prim_pool)
        return;
    bufpool_clear(rt->prim_pool);
    free(rt->prim_pool);
    rt->prim_pool = NULL;
}

static void answer_of(const store_put_primary_resp_t *m, struct kvm_prim_answer *a);

void kvm_put_primary_answer(kvm_rt_t *rt, const kvm_runtime_t *owner, bool raw,
                            const struct rpc_result *res, struct kvm_prim_answer *a)
{
    memset(a, 0, sizeof(*a));
    kvm_route_init(&a->route);
    if (res->status == KVMESH_ENOTSUP) { /* an owner that predates the message: nothing done */
        if (refused(rt, owner, raw))
            ;
        else if (raw)
            rt->prim_raw_refused[rt->n_prim_raw_refused++ % STORE_WINL_REFUSED_MAX] = *owner;
        else
            rt->prim_refused[rt->n_prim_refused++ % STORE_WINL_REFUSED_MAX] = *owner;
        a->outcome = KVM_PRIM_FALLBACK;
        return;
    }
    store_put_primary_resp_t m;
    int rc = res->status;
    const char *why = res->error;
    if (!rc && store_put_primary_resp_decode(res->body, res->body_len, &m) != 0) {
        rc = KVMESH_EPROTO;
        why = kvmesh_last_error();
    }
    if (rc) {
        a->outcome = KVM_PRIM_UNKNOWN;
        a->status = rc == KVMESH_ECONN || rc == KVMESH_ECANCELED ? rc : KVMESH_ETIMEDOUT;
        snprintf(a->msg, sizeof(a->msg),
                 "put at the route primary got no answer (%s%s%s); the put may have been applied: "
                 "read the key back or retry the put",
                 kvmesh_strerror(rc), why && why[0] ? ": " : "", why ? why : "");
        return;
    }
    answer_of(&m, a);
}

/* a from a decoded answer (or answer item) m. */
static void answer_of(const store_put_primary_resp_t *mp, struct kvm_prim_answer *a)
{
    const store_put_primary_resp_t m = *mp;
    a->status = m.status;
    snprintf(a->msg, sizeof(a->msg), "%.*s", (int)m.msg_len, m.msg ? m.msg : "");
    switch (m.outcome) {
    case STORE_PRIM_PUBLISHED:
        if (wire_route_decode(m.route, m.route_len, &a->route) != 0) {
            a->outcome = KVM_PRIM_UNKNOWN; /* published, but the route is unreadable */
            a->status = KVMESH_EPROTO;
            snprintf(a->msg, sizeof(a->msg),
                     "put at the route primary answered a malformed route; the put may have been "
                     "applied: read the key back");
            return;
        }
        a->outcome = KVM_PRIM_PUBLISHED;
        a->seg = m.seg;
        a->offset = m.offset;
        a->token = m.token;
        return;
    case STORE_PRIM_DECLINED:
        a->outcome = KVM_PRIM_FALLBACK;
        return;
    case STORE_PRIM_NOT_RESERVED:
        a->outcome = KVM_PRIM_NOT_RESERVED;
        return;
    default:
        a->outcome = KVM_PRIM_FAILED;
        return;
    }
}

/* ---- batches: requester --------------------------------------------------------------------- */

bool kvm_put_primary_batch_wants(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                                 const kvm_runtime_t *owner, const char *data_addr)
{
    if (!op->wbat || op->cp_op != 1 + OBS_OP_BATCH_PUT || it->want != 1 || it->n_res != 0 ||
        it->q || it->len == 0 || !rt->route || rt->cfg.cold_kind != KVM_STORE_COLD_OFF ||
        rt->cfg.cold_write_through || atomic_load(&op->abandoned) ||
        kvm_id128_equal(&owner->id, &rt->self.id))
        return false; /* (an abandoned op's caller may have freed the values) */
    /* an owner whose payload writes go through shared memory takes small values only, as the
     * single form (docs/performance.md "Batch puts at the primary": 4 KiB measured) */
    bool shm = rt->cfg.transport == TP_SHM ||
               (rt->cfg.transport == TP_AUTO && data_addr && kvm_inline_same_host(rt, data_addr));
    uint64_t max =
        KVM_MIN((uint64_t)rt->cfg.inline_write_max, (uint64_t)STORE_PUT_PRIMARY_BATCH_ITEM_MAX);
    if (shm)
        max = KVM_MIN(max, (uint64_t)STORE_PUT_PRIMARY_SHM_MAX);
    if (it->len > max || in_ring(rt->prim_batch_refused, rt->n_prim_batch_refused, owner))
        return false;
    kvm_runtime_t prim;
    return route_primary_hint(rt->route, &it->ident, &prim) == 0 && kvm_runtime_equal(&prim, owner);
}

uint8_t *kvm_put_primary_batch_body(kvm_op_t *op, struct kvm_item *const *its, uint16_t n,
                                    const kvm_runtime_t *owner, uint32_t ttl_ms, uint32_t budget_ms,
                                    size_t *len)
{
    KVM_ASSERT(op->wbat && n > 0 && n <= STORE_PUT_PRIMARY_BATCH_MAX);
    size_t cap = STORE_PRIM_BATCH_HEAD_LEN;
    uint64_t bytes = 0;
    for (uint16_t i = 0; i < n; i++) {
        cap += 14 + (size_t)its[i]->ident.enc_len + (size_t)its[i]->len;
        bytes += its[i]->len;
    }
    if (bytes > STORE_PUT_PRIMARY_BATCH_BYTES) {
        kvm_errf(KVMESH_EINVAL, "put at the primary of %" PRIu64 " bytes in one message", bytes);
        return NULL;
    }
    uint8_t *body = malloc(cap);
    if (!body) {
        kvm_errf(KVMESH_ENOMEM, "put at the primary of %u items: out of memory", n);
        return NULL;
    }
    size_t at = 0, hl = 0;
    if (store_prim_batch_head_encode(owner->epoch, ttl_ms, budget_ms, n, body, cap, &at) != 0)
        goto fail;
    for (uint16_t i = 0; i < n; i++) {
        struct kvm_item *it = its[i];
        const struct kvm_sg *sg = &op->wbat[it - op->items];
        KVM_ASSERT(sg->len == it->len);
        if (store_prim_batch_item_head_encode(it->len, &it->ident, body + at, cap - at, &hl) != 0)
            goto fail;
        at += hl;
        struct kvm_sum st; /* the value's checksum, fused with its copy into the body */
        kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
        uint64_t pos = 0;
        for (int k = 0; k < sg->iovcnt; k++) {
            KVM_ASSERT(pos + sg->iov[k].iov_len <= it->len);
            kvm_sum_update_copy(&st, body + at + pos, sg->iov[k].iov_base, sg->iov[k].iov_len);
            pos += sg->iov[k].iov_len;
        }
        KVM_ASSERT(pos == it->len);
        at += (size_t)it->len;
        it->checksum = kvm_sum_digest(&st);
        KVM_CP_COUNT(op, op_checksum_passes_total, OBS_NONE, 1);
        /* test-only: the owner must refuse these bytes */
        store_prim_batch_item_sum(body + at,
                                  it->checksum ^ (kvm_put_inline_test_bad_sum() ? 1u : 0u));
        at += 8;
    }
    KVM_ASSERT(at == cap);
    *len = at;
    return body;
fail:
    free(body);
    return NULL;
}

void kvm_put_primary_batch_answer(kvm_rt_t *rt, const kvm_runtime_t *owner,
                                  const struct rpc_result *res, uint16_t n,
                                  struct kvm_prim_answer *a)
{
    for (uint16_t i = 0; i < n; i++) {
        memset(&a[i], 0, sizeof(a[i]));
        kvm_route_init(&a[i].route);
    }
    if (res->status == KVMESH_ENOTSUP) { /* an owner that predates the message: nothing done */
        if (!in_ring(rt->prim_batch_refused, rt->n_prim_batch_refused, owner))
            rt->prim_batch_refused[rt->n_prim_batch_refused++ % STORE_WINL_REFUSED_MAX] = *owner;
        for (uint16_t i = 0; i < n; i++)
            a[i].outcome = KVM_PRIM_FALLBACK;
        return;
    }
    store_prim_batch_resp_t *m = malloc(sizeof(*m));
    int rc = res->status;
    const char *why = res->error;
    if (!rc && !m) {
        rc = KVMESH_ENOMEM;
        why = "out of memory decoding the answer";
    } else if (!rc && store_prim_batch_resp_decode(res->body, res->body_len, m) != 0) {
        rc = KVMESH_EPROTO;
        why = kvmesh_last_error();
    } else if (!rc && m->n != n) {
        rc = KVMESH_EPROTO;
        why = "the answer's item count is not the request's";
    }
    for (uint16_t i = 0; i < n; i++) {
        if (!rc) {
            answer_of(&m->r[i], &a[i]);
            continue;
        }
        a[i].outcome = KVM_PRIM_UNKNOWN;
        a[i].status = rc == KVMESH_ECONN || rc == KVMESH_ECANCELED ? rc : KVMESH_ETIMEDOUT;
        snprintf(a[i].msg, sizeof(a[i].msg),
                 "put at the route primary got no answer (%s%s%s); the put may have been applied: "
                 "read the key back or retry the put",
                 kvmesh_strerror(rc), why && why[0] ? ": " : "", why ? why : "");
    }
    free(m);
    /* (each PUBLISHED item's route becomes this runtime's hint next: prim_answered) */
    kvm_hint_prefetch(rt, &a[0].route.ident, sizeof(a[0]), n);
}

/* ---- owner ---------------------------------------------------------------------------------- */

/* Where a raw request served through the RPC layer's payload sink stands (sink_* below). */
enum prim_sink_state {
    PS_NONE,    /* not through the sink (the body form, or the sink made no context) */
    PS_VERDICT, /* answered without a reservation (verdict, status, msg): payload discarded */
    PS_WAIT,    /* the reservation waits (eviction): the payload goes to a pooled buffer */
    PS_FAILED,  /* the reservation failed (status, msg): payload discarded */
    PS_DIRECT,  /* reserved: the payload is received into the slot (pin), its checksum folded */
    PS_HELD,    /* reserved after a wait: the bytes are copied from the pooled buffer */
};

struct prim_serve {
    struct kvm_sum sum; /* PS_DIRECT: the bytes folded as they land (64-byte aligned: first) */
    kvm_rt_t *rt;
    rpc_reply *reply;
    uint16_t type;     /* the request's: STORE_RPC_PUT_PRIMARY or _RAW (the answer's) */
    kvm_ident_t ident; /* owned */
    uint64_t len, checksum;
    uint32_t budget_ms;
    const uint8_t *src; /* the bytes: the request body's (handler running) or own */
    uint8_t *own;       /* the copy of a body's bytes for a reservation that waited (the raw
                           form borrows the frame's payload until the answer); NULL otherwise */
    bool *answered;     /* the handler's flag while it runs; NULL after */
    uint64_t seg, off, token;
    struct obs_span span;
    struct obs_span *sp; /* &span while traced; NULL: untraced */
    /* the payload sink's part (raw form): */
    enum prim_sink_state st;
    bool in_sink;    /* the sink's reservation call is running */
    bool frame_in;   /* the handler ran (reply set) */
    bool aborted;    /* the RPC layer ended the context (no handler will run) */
    uint8_t verdict; /* PS_VERDICT: the answer's outcome */
    int status;      /* PS_VERDICT, PS_FAILED: the answer's status */
    struct seg *pin; /* PS_DIRECT: the segment pinned while the bytes land */
    uint64_t landed; /* PS_DIRECT: bytes folded so far */
    char msg[160];   /* PS_VERDICT, PS_FAILED: the answer's message */
};

/* A zeroed prim_serve (aligned for its kvm_sum); NULL when out of memory. */
static struct prim_serve *serve_new(void)
{
    size_t n = (sizeof(struct prim_serve) + 63) & ~(size_t)63;
    struct prim_serve *s = aligned_alloc(64, n);
    if (s)
        memset(s, 0, n);
    return s;
}

static void serve_free(struct prim_serve *s)
{
    kvm_ident_free(&s->ident);
    free(s->own);
    free(s);
}

static void answer(rpc_reply *reply, uint16_t type, uint8_t outcome, int status, const char *msg,
                   const kvm_route_t *route, uint64_t seg, uint64_t off, uint64_t token)
{
    uint8_t rbuf[KVM_WIRE_MAX_RECORD_LEN];
    size_t rlen = 0;
    if (route && wire_route_encode(route, rbuf, sizeof(rbuf), &rlen) != 0) {
        /* (cannot happen for a route the authority accepted) the requester settles nothing: */
        outcome = STORE_PRIM_FAILED;
        status = KVMESH_EINDETERMINATE;
        msg = "the published route could not be encoded; the put was applied: read the key back";
        rlen = 0;
    }
    static _Thread_local uint8_t body[STORE_PUT_PRIMARY_RESP_MAX];
    size_t len = 0;
    store_put_primary_resp_t m = {.outcome = outcome,
                                  .status = status,
                                  .seg = seg,
                                  .offset = off,
                                  .token = token,
                                  .route = rlen ? rbuf : NULL,
                                  .route_len = (uint16_t)rlen,
                                  .msg = msg,
                                  .msg_len = msg ? (uint16_t)strnlen(msg, STORE_PRIM_MSG_MAX) : 0};
    int rc = store_put_primary_resp_encode(&m, body, sizeof(body), &len);
    KVM_ASSERT(rc == 0); /* (the buffer holds the largest answer) */
    struct rpc_msg r = {.type = type, .body = body, .body_len = len};
    if (rpc_reply_send(reply, 0, NULL, &r, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply); /* the requester times out: "may have been applied" */
}

static void reply_err(rpc_reply *reply, int rc, const char *msg)
{
    if (rpc_reply_send(reply, rc, msg, NULL, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply);
}

/* Whether this runtime may publish `id` as its primary (and takes puts at the primary). */
static bool may_publish(kvm_rt_t *rt, const kvm_ident_t *id)
{
    return rt->route && !atomic_load(&rt->closing) && rt->cfg.cold_kind == KVM_STORE_COLD_OFF &&
           !rt->cfg.cold_write_through && !kvm_quota_applies(rt, id) &&
           route_is_primary_now(rt->route, id) && !kvm_test_take(&test_declines);
}

static void published(kvm_op_t *op)
{
    struct prim_serve *s = op->done_arg;
    struct kvm_item *it = &op->items[0];
    int rc = it->rc ? it->rc : op->rc;
    if (s->sp)
        obs_span_set_int(s->sp, "kvmesh.published", rc == 0);
    kvm_span_finish(s->sp, rc);
    if (rc == 0 && it->have_route)
        answer(s->reply, s->type, STORE_PRIM_PUBLISHED, 0, NULL, &it->route, s->seg, s->off,
               s->token);
    else if (rc == 0) /* (published; its route was not kept: out of memory) */
        answer(s->reply, s->type, STORE_PRIM_FAILED, KVMESH_EINDETERMINATE,
               "the put was published at the route primary, which could not send its route (out "
               "of memory): read the key back",
               NULL, 0, 0, 0);
    else
        answer(s->reply, s->type, STORE_PRIM_FAILED, rc,
               op->err_set ? op->err : "the publication at the route primary failed", NULL, 0, 0,
               0);
    serve_free(s);
}

/* The reservation and its bytes are in place: publish them as the shard's primary. */
static void publish(struct prim_serve *s)
{
    kvm_rt_t *rt = s->rt;
    kvm_op_t *op = may_publish(rt, &s->ident) ? kvm_op_new(rt, KVM_OP_PUBLISH, 1) : NULL;
    if (!op) { /* no longer the primary (or out of memory): nothing was published */
        kvm_put_inline_release(rt, s->seg, s->off, s->token);
        kvm_span_finish(s->sp, 0);
        answer(s->reply, s->type, STORE_PRIM_DECLINED, 0, NULL, NULL, 0, 0, 0);
        serve_free(s);
        return;
    }
    struct kvm_item *it = &op->items[0];
    it->ident = s->ident; /* moved */
    memset(&s->ident, 0, sizeof(s->ident));
    it->len = s->len;
    it->checksum = s->checksum;
    it->n_res = 1;
    it->res[0] = (struct kvm_res){.owner = rt->self,
                                  .local = true,
                                  .seg = s->seg,
                                  .offset = s->off,
                                  .token = s->token,
                                  .written = true};
    op->deadline_ms = env_clock_mono_ms() + (s->budget_ms ? s->budget_ms : 1);
    op->span = s->sp; /* the publication's control.* spans join the owner's span */
    op->on_done = published;
    op->done_arg = s;
    op->pending = 1;
    atomic_fetch_add(&op->refs, 1); /* the items may all end inside ops_run */
    rt->ops_run(op);
    kvm_op_unref(op);
}

static void prim_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                          uint64_t token)
{
    struct prim_serve *s = arg;
    if (s->answered)
        *s->answered = true;
    char msg[160];
    if (!rc && (rc = kvm_put_inline_fill(s->rt, s->src, s->len, s->checksum, seg, off, token, msg,
                                         sizeof(msg))) != 0) {
        kvm_put_inline_release(s->rt, seg, off, token);
        err = msg;
    }
    if (s->sp)
        obs_span_set_int(s->sp, "kvmesh.waited", s->answered == NULL);
    if (rc) {
        kvm_span_finish(s->sp, rc);
        answer(s->reply, s->type, STORE_PRIM_NOT_RESERVED, rc, err ? err : kvmesh_strerror(rc),
               NULL, 0, 0, 0);
        serve_free(s);
        return;
    }
    s->seg = seg;
    s->off = off;
    s->token = token;
    if (s->sp) {
        obs_span_set_int(s->sp, "kvmesh.segment", (int64_t)seg);
        obs_span_set_int(s->sp, "kvmesh.offset", (int64_t)off);
    }
    publish(s);
}

/* Serves a decoded request m (its identity moved here); raw: the value is the frame's raw
 * payload (taken from req), else the body's bytes (m->w.payload, borrowed while this runs). */
static void serve(kvm_rt_t *rt, rpc_reply *reply, struct rpc_request *req,
                  store_put_primary_req_t *m, bool raw)
{
    if (m->w.r.target_epoch != rt->self.epoch) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "put at the primary for epoch %" PRIu64 " reached epoch %" PRIu64,
                 m->w.r.target_epoch, rt->self.epoch);
        answer(reply, req->type, STORE_PRIM_NOT_RESERVED, KVMESH_EUNAVAILABLE, msg, NULL, 0, 0, 0);
        kvm_ident_free(&m->w.r.ident);
        return;
    }
    struct prim_serve *s = may_publish(rt, &m->w.r.ident) ? serve_new() : NULL;
    if (!s) { /* not the active primary now (or out of memory): nothing reserved */
        answer(reply, req->type, STORE_PRIM_DECLINED, 0, NULL, NULL, 0, 0, 0);
        kvm_ident_free(&m->w.r.ident);
        return;
    }
    bool answered = false;
    *s = (struct prim_serve){.rt = rt,
                             .reply = reply,
                             .type = req->type,
                             .ident = m->w.r.ident, /* moved */
                             .len = m->w.r.length,
                             .checksum = m->w.checksum,
                             .budget_ms = m->budget_ms,
                             .src = m->w.payload,
                             .answered = &answered};
    if (raw) /* the frame's payload, borrowed until the answer (rpc.h: req lives until then),
                which gives it back to the endpoint's buffer pool */
        s->src = req->payload;
    if (req->trace.flags & OBS_TRACE_FLAG_SAMPLED &&
        (s->sp = kvm_span_remote(rt, &req->trace, "control.owner_reserve", &s->span))) {
        obs_span_set_int(s->sp, "kvmesh.bytes", (int64_t)m->w.r.length);
        obs_span_set_int(s->sp, "kvmesh.inline", 1);
        obs_span_set_int(s->sp, "kvmesh.primary", 1);
        obs_span_set_int(s->sp, "kvmesh.raw", raw);
    }
    kvm_owner_reserve(rt, &s->ident, s->len, m->w.r.ttl_ms, prim_reserved, s);
    if (!answered && !raw) { /* the reservation waits: the body is gone once the handler returns */
        s->answered = NULL;
        s->own = malloc((size_t)s->len);
        if (s->own)
            memcpy(s->own, m->w.payload, (size_t)s->len);
        s->src = s->own; /* (NULL: the answer fails with KVMESH_ENOMEM and releases the slot) */
    } else if (!answered) {
        s->answered = NULL; /* (the raw payload stays the request's until the answer) */
    }
}

static void on_put_primary(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    store_put_primary_req_t m;
    if (store_put_primary_req_decode(req->body, req->body_len, &m) != 0) {
        reply_err(reply, KVMESH_EPROTO, kvmesh_last_error());
        return;
    }
    serve(arg, reply, req, &m, false);
}

/*
 * The raw form through the RPC layer's payload sink (rpc.h "Payload sinks"): once the request's
 * head is in and before its payload is read, sink_offer decides as serve() does (epoch, active
 * primary) and reserves the slot. Reserved at once (the usual case): the payload is received
 * straight into the reserved range (the segment pinned meanwhile) with the checksum folded as
 * each run lands (sink_landed), and the handler checks the sum and publishes — one user-space
 * copy fewer than a receive buffer and a copy into the slot. Declined, or a reservation that
 * failed: the payload is discarded (the stream stays in step) and the handler answers. A
 * reservation that waits (eviction): the payload goes to a pooled buffer as before, and
 * whichever comes second, the reservation or the whole frame, copies it into the slot and
 * publishes (sink_go). The RPC layer aborts the context when the frame never completes
 * (connection lost) or its handler does not run: the slot is released (sink_abort).
 */
static void sink_go(struct prim_serve *s);

static void sink_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                          uint64_t token)
{
    struct prim_serve *s = arg;
    if (rc) {
        s->st = PS_FAILED;
        s->status = rc;
        snprintf(s->msg, sizeof(s->msg), "%s", err ? err : kvmesh_strerror(rc));
    } else {
        s->st = PS_HELD;
        s->seg = seg;
        s->off = off;
        s->token = token;
    }
    if (s->in_sink)
        return;       /* (sink_offer goes on) */
    if (s->aborted) { /* the frame never came whole: nothing to publish */
        if (!rc)
            kvm_put_inline_release(s->rt, seg, off, token);
        kvm_span_finish(s->sp, rc ? rc : KVMESH_ECONN);
        serve_free(s);
        return;
    }
    if (!s->frame_in)
        return; /* the handler goes on once the frame is whole */
    if (rc) {
        kvm_span_finish(s->sp, rc);
        answer(s->reply, s->type, STORE_PRIM_NOT_RESERVED, rc, s->msg, NULL, 0, 0, 0);
        serve_free(s);
        return;
    }
    sink_go(s); /* the bytes waited in the pooled buffer */
}

static void sink_landed(void *ctx, const uint8_t *p, size_t n)
{
    struct prim_serve *s = ctx;
    kvm_sum_update(&s->sum, p, n);
    if (s->landed == 0 && kvm_test_take(&test_expire_landing))
        kvm_owner_test_expire(s->rt, s->seg, s->off, s->token);
    s->landed += n;
}

static void sink_abort(void *ctx)
{
    struct prim_serve *s = ctx;
    switch (s->st) {
    case PS_WAIT:
        s->aborted = true; /* sink_reserved ends it */
        return;
    case PS_DIRECT:
        seg_unpin(s->rt->reg, s->pin);
        s->pin = NULL;
        (void)kvm_owner_land_end(s->rt, s->seg, s->off, s->token);
        /* fall through */
    case PS_HELD:
        kvm_put_inline_release(s->rt, s->seg, s->off, s->token);
        break;
    default:
        break;
    }
    kvm_span_finish(s->sp, KVMESH_ECONN);
    serve_free(s);
}

static void sink_offer(const struct rpc_request *req, void *arg, struct rpc_sink *out)
{
    kvm_rt_t *rt = arg;
    store_put_primary_req_t m;
    if (store_put_primary_raw_decode(req->body, req->body_len, req->payload_len, &m) != 0)
        return; /* the handler answers KVMESH_EPROTO */
    struct prim_serve *s = serve_new();
    if (!s) { /* the handler serves it as before */
        kvm_ident_free(&m.w.r.ident);
        return;
    }
    *out = (struct rpc_sink){.discard = 1, .abort = sink_abort, .ctx = s};
    s->rt = rt;
    s->type = req->type;
    s->ident = m.w.r.ident; /* moved */
    s->len = m.w.r.length;
    s->checksum = m.w.checksum;
    s->budget_ms = m.budget_ms;
    if (m.w.r.target_epoch != rt->self.epoch) {
        s->st = PS_VERDICT;
        s->verdict = STORE_PRIM_NOT_RESERVED;
        s->status = KVMESH_EUNAVAILABLE;
        snprintf(s->msg, sizeof(s->msg),
                 "put at the primary for epoch %" PRIu64 " reached epoch %" PRIu64,
                 m.w.r.target_epoch, rt->self.epoch);
        return;
    }
    if (!may_publish(rt, &s->ident)) { /* not the active primary now: nothing reserved */
        s->st = PS_VERDICT;
        s->verdict = STORE_PRIM_DECLINED;
        return;
    }
    if (req->trace.flags & OBS_TRACE_FLAG_SAMPLED &&
        (s->sp = kvm_span_remote(rt, &req->trace, "control.owner_reserve", &s->span))) {
        obs_span_set_int(s->sp, "kvmesh.bytes", (int64_t)s->len);
        obs_span_set_int(s->sp, "kvmesh.inline", 1);
        obs_span_set_int(s->sp, "kvmesh.primary", 1);
        obs_span_set_int(s->sp, "kvmesh.raw", 1);
    }
    s->st = PS_WAIT;
    s->in_sink = true;
    kvm_owner_reserve(rt, &s->ident, s->len, m.w.r.ttl_ms, sink_reserved, s);
    s->in_sink = false;
    if (s->sp)
        obs_span_set_int(s->sp, "kvmesh.waited", s->st == PS_WAIT);
    if (s->st == PS_WAIT) { /* the bytes wait in a pooled buffer for the reservation */
        out->discard = 0;
        return;
    }
    if (s->st == PS_FAILED)
        return;
    uint8_t *p = NULL;
    enum seg_reason why;
    if (seg_check(rt->reg, s->seg, s->off, s->len, SEG_WRITE, s->token, &p, &s->pin, &why) != 0) {
        kvm_put_inline_release(rt, s->seg, s->off, s->token);
        s->st = PS_FAILED;
        s->status = KVMESH_EUNAVAILABLE;
        snprintf(s->msg, sizeof(s->msg),
                 "inline reservation: the reserved range refused the bytes: %s",
                 seg_reason_str(why));
        return;
    }
    if (kvm_owner_land_begin(rt, s->seg, s->off, s->token) != 0) { /* (the late-payload fence) */
        seg_unpin(rt->reg, s->pin);
        s->pin = NULL;
        kvm_put_inline_release(rt, s->seg, s->off, s->token);
        s->st = PS_FAILED;
        s->status = KVMESH_ETIMEDOUT;
        snprintf(s->msg, sizeof(s->msg), "%s", kvmesh_last_error());
        return;
    }
    s->st = PS_DIRECT;
    kvm_sum_init(&s->sum, KVM_HASH_SEED_CHECKSUM);
    out->discard = 0;
    out->dst = p;
    out->landed = sink_landed;
}

/* The frame is whole and the reservation held (PS_DIRECT: the bytes are in the slot; PS_HELD:
 * in s->src): check the sum, then publish; or answer why not. */
static void sink_go(struct prim_serve *s)
{
    kvm_rt_t *rt = s->rt;
    int rc = 0;
    char msg[160];
    if (s->st == PS_DIRECT) {
        seg_unpin(rt->reg, s->pin);
        s->pin = NULL;
        KVM_ASSERT(s->landed == s->len);
        if (kvm_owner_land_end(rt, s->seg, s->off, s->token) != 0) { /* its TTL passed meanwhile */
            rc = KVMESH_ETIMEDOUT;
            snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        } else if (kvm_sum_digest(&s->sum) != s->checksum) {
            rc = KVMESH_ECHECKSUM;
            snprintf(msg, sizeof(msg),
                     "inline reservation: the %" PRIu64 " bytes do not match their checksum",
                     s->len);
        }
    } else {
        KVM_ASSERT(s->st == PS_HELD);
        rc = kvm_put_inline_fill(rt, s->src, s->len, s->checksum, s->seg, s->off, s->token, msg,
                                 sizeof(msg));
    }
    s->src = NULL; /* (the request's payload: gone with the answer) */
    if (rc) {
        kvm_put_inline_release(rt, s->seg, s->off, s->token);
        kvm_span_finish(s->sp, rc);
        answer(s->reply, s->type, STORE_PRIM_NOT_RESERVED, rc, msg, NULL, 0, 0, 0);
        serve_free(s);
        return;
    }
    if (s->sp) {
        obs_span_set_int(s->sp, "kvmesh.segment", (int64_t)s->seg);
        obs_span_set_int(s->sp, "kvmesh.offset", (int64_t)s->off);
    }
    s->st = PS_NONE; /* publish() owns it from here */
    publish(s);
}

static void on_put_primary_raw(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct prim_serve *s = req->sink_ctx;
    if (s) { /* through the payload sink */
        s->reply = reply;
        s->frame_in = true;
        switch (s->st) {
        case PS_VERDICT:
            answer(reply, req->type, s->verdict, s->status, s->msg[0] ? s->msg : NULL, NULL, 0, 0,
                   0);
            serve_free(s);
            return;
        case PS_FAILED:
            kvm_span_finish(s->sp, s->status);
            answer(reply, req->type, STORE_PRIM_NOT_RESERVED, s->status, s->msg, NULL, 0, 0, 0);
            serve_free(s);
            return;
        case PS_WAIT:              /* the reservation is still waiting: the bytes wait for it */
            s->src = req->payload; /* (borrowed until the answer: rpc.h) */
            return;
        default: /* PS_DIRECT, or PS_HELD after a wait */
            s->src = req->payload;
            sink_go(s);
            return;
        }
    }
    store_put_primary_req_t m;
    if (!req->payload ||
        store_put_primary_raw_decode(req->body, req->body_len, req->payload_len, &m) != 0) {
        reply_err(reply, KVMESH_EPROTO,
                  req->payload ? kvmesh_last_error() : "put at the primary without its bytes");
        return;
    }
    serve(arg, reply, req, &m, true);
}

/*
 * Batches at the owner (STORE_RPC_PUT_PRIMARY_BATCH): each item is served as the body form
 * serves one (epoch, active primary, quota and cold tier checked per item; reserved as
 * RESERVE_INLINE reserves; its bytes copied into the slot with the checksum fused); once every
 * item's reservation has answered, the items still held and whose shard this runtime is still
 * the active primary of are published by ONE PUBLISH op (kvm_ops_run: one route CAS batch, one
 * mirror batch per secondary), and the answer carries each item's outcome. An item's failure
 * (declined, not reserved, publication failed) is its own: the others go on.
 */
struct bserve_item {
    struct prim_bserve *b;
    kvm_ident_t ident; /* owned until moved into the publication */
    uint64_t len, checksum;
    const uint8_t *src; /* the bytes: the request body's (handler running) or own */
    uint8_t *own;       /* the copy of the bytes of a reservation that waited; NULL otherwise */
    uint64_t seg, off, token;
    bool waiting;    /* its reservation has not answered yet */
    bool held;       /* reserved and written: to publish */
    uint16_t pub;    /* held: its index in the publication op */
    uint8_t outcome; /* STORE_PRIM_* */
    int status;
    const kvm_route_t *route; /* PUBLISHED: the publication op's (valid while it answers) */
    char msg[200];
};

struct prim_bserve {
    kvm_rt_t *rt;
    rpc_reply *reply;
    uint32_t budget_ms;
    uint16_t n, waiting; /* items; reservations not answered yet */
    bool in_handler;     /* the handler is still running (it publishes once they all answered) */
    struct obs_span span;
    struct obs_span *sp; /* &span while traced; NULL: untraced */
    struct bserve_item it[];
};

static void bserve_free(struct prim_bserve *b)
{
    for (uint16_t i = 0; i < b->n; i++) {
        kvm_ident_free(&b->it[i].ident);
        free(b->it[i].own);
    }
    free(b);
}

/* Sends the answer of every item and frees b. */
static void banswer(struct prim_bserve *b)
{
    store_prim_batch_resp_t *m = malloc(sizeof(*m));
    uint8_t *routes = NULL, *body = NULL;
    size_t rcap = 0, rlen = 0, cap = STORE_PRIM_BATCH_ANS_HEAD_LEN, len = 0;
    size_t roff[STORE_PUT_PRIMARY_BATCH_MAX];
    int rc = m ? 0 : KVMESH_ENOMEM;
    for (uint16_t i = 0; !rc && i < b->n; i++) {
        struct bserve_item *x = &b->it[i];
        store_put_primary_resp_t *a = &m->r[i];
        *a = (store_put_primary_resp_t){.outcome = x->outcome, .status = x->status};
        if (x->outcome == STORE_PRIM_PUBLISHED) {
            uint8_t rb[KVM_WIRE_MAX_RECORD_LEN];
            size_t rl = 0;
            if (wire_route_encode(x->route, rb, sizeof(rb), &rl) != 0 || rl == 0 ||
                rl > UINT16_MAX) { /* (cannot happen for a route the authority accepted) */
                a->outcome = STORE_PRIM_FAILED;
                a->status = KVMESH_EINDETERMINATE;
                snprintf(x->msg, sizeof(x->msg),
                         "the published route could not be encoded; the "
                         "put was applied: read the key back");
            } else {
                if (rlen + rl > rcap) {
                    size_t nc = KVM_MAX(rcap * 2, rlen + rl + 4096);
                    uint8_t *p = realloc(routes, nc);
                    if (!p) {
                        rc = KVMESH_ENOMEM;
                        break;
                    }
                    routes = p;
                    rcap = nc;
                }
                memcpy(routes + rlen, rb, rl);
                roff[i] = rlen;
                rlen += rl;
                a->seg = x->seg;
                a->offset = x->off;
                a->token = x->token;
                a->route_len = (uint16_t)rl;
            }
        }
        if (a->outcome != STORE_PRIM_PUBLISHED && a->outcome != STORE_PRIM_DECLINED) {
            a->msg = x->msg;
            a->msg_len = (uint16_t)strnlen(x->msg, STORE_PRIM_MSG_MAX);
        }
        cap += STORE_PRIM_BATCH_ANS_ITEM_LEN(a->route_len, a->msg_len);
    }
    if (!rc) {
        m->n = b->n;
        for (uint16_t i = 0; i < b->n; i++)
            if (m->r[i].route_len)
                m->r[i].route = routes + roff[i];
        body = malloc(cap);
        rc = body ? store_prim_batch_resp_encode(m, body, cap, &len) : KVMESH_ENOMEM;
        KVM_ASSERT(rc == 0 || rc == KVMESH_ENOMEM); /* (the buffer holds the answer) */
    }
    if (!rc) {
        struct rpc_msg r = {.type = STORE_RPC_PUT_PRIMARY_BATCH, .body = body, .body_len = len};
        if (rpc_reply_send(b->reply, 0, NULL, &r, NULL, NULL) == KVMESH_EAGAIN)
            rpc_reply_drop(b->reply); /* the requester times out: "may have been applied" */
    } else { /* the requester's items fail "may have been applied" (some may be published) */
        reply_err(b->reply, KVMESH_ENOMEM, "the put-at-primary batch answer: out of memory");
    }
    free(body);
    free(routes);
    free(m);
    bserve_free(b);
}

static void bpublished(kvm_op_t *op)
{
    struct prim_bserve *b = op->done_arg;
    int pubs = 0;
    for (uint16_t i = 0; i < b->n; i++) {
        struct bserve_item *x = &b->it[i];
        if (!x->held)
            continue;
        struct kvm_item *it = &op->items[x->pub];
        int rc = it->rc ? it->rc : op->rc;
        if (rc == 0 && it->have_route) {
            x->outcome = STORE_PRIM_PUBLISHED;
            x->route = &it->route;
            pubs++;
        } else if (rc == 0) { /* (published; its route was not kept: out of memory) */
            x->outcome = STORE_PRIM_FAILED;
            x->status = KVMESH_EINDETERMINATE;
            snprintf(x->msg, sizeof(x->msg),
                     "the put was published at the route primary, which could not send its route "
                     "(out of memory): read the key back");
        } else {
            x->outcome = STORE_PRIM_FAILED;
            x->status = rc;
            /* (the op keeps its first failure's message only: named as such) */
            snprintf(x->msg, sizeof(x->msg),
                     "the publication at the route primary failed: %s%s%.100s%s",
                     kvmesh_strerror(rc), op->err_set ? " (the batch's first failure: " : "",
                     op->err_set ? op->err : "", op->err_set ? ")" : "");
        }
    }
    if (b->sp)
        obs_span_set_int(b->sp, "kvmesh.published", pubs);
    kvm_span_finish(b->sp, 0);
    banswer(b); /* (before the op's routes go with it) */
}

/* Every reservation answered: publish the items held (one PUBLISH op), or answer. */
static void bpublish(struct prim_bserve *b)
{
    kvm_rt_t *rt = b->rt;
    uint16_t k = 0;
    for (uint16_t i = 0; i < b->n; i++) {
        struct bserve_item *x = &b->it[i];
        if (!x->held)
            continue;
        if (may_publish(rt, &x->ident)) { /* (a reservation may have waited for space) */
            k++;
            continue;
        }
        kvm_put_inline_release(rt, x->seg, x->off, x->token); /* nothing was published */
        x->held = false;
        x->outcome = STORE_PRIM_DECLINED;
    }
    kvm_op_t *op = k ? kvm_op_new(rt, KVM_OP_PUBLISH, k) : NULL;
    if (!op) { /* nothing to publish (or out of memory: declined, released) */
        for (uint16_t i = 0; i < b->n; i++)
            if (b->it[i].held) {
                kvm_put_inline_release(rt, b->it[i].seg, b->it[i].off, b->it[i].token);
                b->it[i].held = false;
                b->it[i].outcome = STORE_PRIM_DECLINED;
            }
        kvm_span_finish(b->sp, 0);
        banswer(b);
        return;
    }
    uint16_t j = 0;
    for (uint16_t i = 0; i < b->n; i++) {
        struct bserve_item *x = &b->it[i];
        if (!x->held)
            continue;
        struct kvm_item *it = &op->items[j];
        x->pub = j++;
        it->ident = x->ident; /* moved */
        memset(&x->ident, 0, sizeof(x->ident));
        it->len = x->len;
        it->checksum = x->checksum;
        it->n_res = 1;
        it->res[0] = (struct kvm_res){.owner = rt->self,
                                      .local = true,
                                      .seg = x->seg,
                                      .offset = x->off,
                                      .token = x->token,
                                      .written = true};
    }
    /* (the publication reads each item's hint as its CAS's expectation, then keeps the route) */
    kvm_hint_prefetch(rt, &op->items[0].ident, sizeof(op->items[0]), k);
    op->deadline_ms = env_clock_mono_ms() + (b->budget_ms ? b->budget_ms : 1);
    op->span = b->sp; /* the publication's control.* spans join the owner's span */
    op->on_done = bpublished;
    op->done_arg = b;
    op->pending = k;
    atomic_fetch_add(&op->refs, 1); /* the items may all end inside ops_run */
    rt->ops_run(op);
    kvm_op_unref(op);
}

static void bres_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                          uint64_t token)
{
    struct bserve_item *x = arg;
    struct prim_bserve *b = x->b;
    KVM_ASSERT(x->waiting && b->waiting > 0);
    x->waiting = false;
    b->waiting--;
    char msg[160];
    if (!rc && (rc = kvm_put_inline_fill(b->rt, x->src, x->len, x->checksum, seg, off, token, msg,
                                         sizeof(msg))) != 0) {
        kvm_put_inline_release(b->rt, seg, off, token);
        err = msg;
    }
    free(x->own);
    x->own = NULL;
    x->src = NULL;
    if (rc) {
        x->outcome = STORE_PRIM_NOT_RESERVED;
        x->status = rc;
        snprintf(x->msg, sizeof(x->msg), "%s", err ? err : kvmesh_strerror(rc));
    } else {
        x->held = true;
        x->seg = seg;
        x->off = off;
        x->token = token;
    }
    if (b->waiting == 0 && !b->in_handler)
        bpublish(b);
}

static void on_put_primary_batch(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    store_prim_batch_req_t *m = malloc(sizeof(*m));
    if (!m) {
        reply_err(reply, KVMESH_ENOMEM, "put-at-primary batch: out of memory");
        return;
    }
    if (store_prim_batch_req_decode(req->body, req->body_len, m) != 0) {
        reply_err(reply, KVMESH_EPROTO, kvmesh_last_error());
        free(m);
        return;
    }
    struct prim_bserve *b = calloc(1, sizeof(*b) + (size_t)m->n * sizeof(b->it[0]));
    if (!b) { /* nothing reserved: the requester's items fail "may have been applied" */
        store_prim_batch_req_free(m);
        free(m);
        reply_err(reply, KVMESH_ENOMEM, "put-at-primary batch: out of memory");
        return;
    }
    *b = (struct prim_bserve){
        .rt = rt, .reply = reply, .budget_ms = m->budget_ms, .n = m->n, .in_handler = true};
    if (req->trace.flags & OBS_TRACE_FLAG_SAMPLED &&
        (b->sp = kvm_span_remote(rt, &req->trace, "control.owner_reserve", &b->span))) {
        obs_span_set_int(b->sp, "kvmesh.items", (int64_t)m->n);
        obs_span_set_int(b->sp, "kvmesh.inline", 1);
        obs_span_set_int(b->sp, "kvmesh.primary", 1);
    }
    bool epoch_ok = m->target_epoch == rt->self.epoch;
    for (uint16_t i = 0; i < m->n; i++) {
        struct bserve_item *x = &b->it[i];
        x->b = b;
        x->ident = m->it[i].ident; /* moved */
        memset(&m->it[i].ident, 0, sizeof(m->it[i].ident));
        x->len = m->it[i].length;
        x->checksum = m->it[i].checksum;
        x->src = m->it[i].payload;
        if (!epoch_ok) {
            x->outcome = STORE_PRIM_NOT_RESERVED;
            x->status = KVMESH_EUNAVAILABLE;
            snprintf(x->msg, sizeof(x->msg),
                     "put at the primary for epoch %" PRIu64 " reached epoch %" PRIu64,
                     m->target_epoch, rt->self.epoch);
            continue;
        }
        if (!may_publish(rt, &x->ident)) { /* not the active primary now: nothing reserved */
            x->outcome = STORE_PRIM_DECLINED;
            continue;
        }
        x->waiting = true;
        b->waiting++;
        kvm_owner_reserve(rt, &x->ident, x->len, m->ttl_ms, bres_reserved, x);
        if (x->waiting) { /* the reservation waits: the body is gone once the handler returns */
            x->own = malloc((size_t)x->len);
            if (x->own)
                memcpy(x->own, x->src, (size_t)x->len);
            x->src = x->own; /* (NULL: the item fails with KVMESH_ENOMEM, its slot released) */
        }
    }
    store_prim_batch_req_free(m); /* (identities moved: nothing left but the struct) */
    free(m);
    b->in_handler = false;
    if (b->waiting == 0)
        bpublish(b);
}

void kvm_put_primary_register(kvm_rt_t *rt)
{
    rpc_register_handler(rt->ep, STORE_RPC_PUT_PRIMARY, on_put_primary, rt);
    rpc_register_handler(rt->ep, STORE_RPC_PUT_PRIMARY_RAW, on_put_primary_raw, rt);
    rpc_register_sink(rt->ep, STORE_RPC_PUT_PRIMARY_RAW, sink_offer);
    rpc_register_handler(rt->ep, STORE_RPC_PUT_PRIMARY_BATCH, on_put_primary_batch, rt);
}
