/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_place.c — placement (spec "Write path"): a PLACE op reserves every item's replicas at
 * distinct owners (preferred owners, then this runtime, then the key's shard primary, then by
 * weighted rendezvous rank: docs/store.md "Placement order"), batching the remote reservations
 * per (op, owner), and parks an item while too few storage members are in the snapshot
 * (place_wait.h). Item states: NEW / QUOTA_RESERVING -> PLACING (<-> PARKED) -> DONE or FAILED
 * (docs/store.md "Item states"). Loop thread only; calls ops_item.c (ops_int.h), never ops.c or
 * ops_publish.c.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/wrh.h"
#include "store/ops_int.h"
#include "store/place.h"
#include "store/place_wait.h"
#include "store/proto.h"
#include "store/put_inline.h"
#include "store/put_primary.h"
#include "store/quota.h"
#include "store/store.h"

/* ---- placement --------------------------------------------------------------------------------
 */

static bool item_excluded(const struct kvm_item *it, const kvm_runtime_id_t *id)
{
    for (uint32_t i = 0; i < it->exclude_n; i++)
        if (kvm_id128_equal(&it->exclude[i], id))
            return true;
    for (uint32_t i = 0; i < it->n_res; i++)
        if (kvm_id128_equal(&it->res[i].owner.id, id))
            return true;
    return false;
}

static void item_exclude(struct kvm_item *it, const kvm_runtime_id_t *id)
{
    if (it->exclude_n < KVM_ARRAY_SIZE(it->exclude))
        it->exclude[it->exclude_n++] = *id;
}

static bool storage_member(kvm_rt_t *rt, const struct kvm_member *m)
{
    return m->state == KVM_MS_ACTIVE && m->n_segs > 0 && m->data_addr[0] != 0 &&
           !kvm_member_is_suspect(rt, &m->rt.id);
}

/* The next owner for item `it`: preferred owners, then this runtime (local first), then the
 * key's shard primary in this runtime's route view (place_on_primary: a small put from a client
 * is one exchange there, and a get's lookup at the primary carries the bytes), then the rest by
 * weighted rendezvous rank of the object's hash. A candidate already holding a replica of the
 * item or excluded (refused, failed) is skipped: the next in that order is taken. NULL when none
 * is left (docs/store.md "Placement order"). */
static const struct kvm_member *next_candidate(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it)
{
    const kvm_runtime_id_t *pref; /* the request's, else the tenant's (place.c) */
    size_t n_pref;
    bool hard, tenant_pin;
    kvm_place_pref(rt, op, it, &pref, &n_pref, &hard, &tenant_pin);
    for (size_t i = 0; i < n_pref; i++) {
        const struct kvm_member *m = kvm_member_find(rt, &pref[i]);
        if (m && storage_member(rt, m) && !item_excluded(it, &m->rt.id))
            return m;
    }
    if (hard)
        return NULL;
    const struct kvm_member *self = kvm_member_find(rt, &rt->self.id);
    if (self && storage_member(rt, self) && !item_excluded(it, &self->rt.id))
        return self;
    kvm_runtime_t prim;
    if (kvm_place_primary(rt, &it->ident, &prim)) {
        const struct kvm_member *m = kvm_member_find(rt, &prim.id);
        if (m && kvm_runtime_equal(&m->rt, &prim) && storage_member(rt, m) &&
            !item_excluded(it, &m->rt.id))
            return m;
    }
    const struct kvm_member *best = NULL;
    double best_score = -1;
    for (size_t i = 0; i < rt->n_members; i++) {
        const struct kvm_member *m = &rt->members[i];
        if (!storage_member(rt, m) || item_excluded(it, &m->rt.id))
            continue;
        double s = wrh_score(wrh_id_hash(&m->rt.id), m->weight, it->ident.hash);
        if (s > best_score) {
            best_score = s;
            best = m;
        }
    }
    return best;
}

static void place_item(kvm_op_t *op, struct kvm_item *it);

struct reserve_ctx {
    kvm_op_t *op;
    struct kvm_item *it;
    kvm_runtime_t owner;
    /* the owner's transport address and segments as the snapshot had them when the reservation
     * started (a refresh may replace the snapshot before the reply arrives) */
    const char *data_addr;
    uint32_t n_segs;
    struct obs_span *sp; /* control.reserve (allocated when traced; NULL when untraced) */
    uint32_t budget_ms;  /* the RPC's timeout: what the call had left */
    rpc_peer *peer;      /* queued for a batched reservation (rsv_flush) */
    bool inl;            /* sent as an inline reservation with the payload (put_inline.c) */
    bool prim_off;       /* not (again) as a put at the primary: declined or refused */
    bool prim_raw;       /* the put at the primary in flight is the raw-payload form */
    uint8_t *prim_val; /* its value staged for the frame (rpc_msg.iov): given back at the answer */
    uv_buf_t prim_iov;
    struct reserve_ctx *next; /* rsv_q's queue, or rt->rsv_spare's list */
    /* last: only segs[0, n_segs) is ever read, so a context is reset up to here (rsv_ctx_new) */
    struct kvm_seg_info segs[STORE_MAX_SEGS];
};

/*
 * Reservation contexts come from the runtime's spare list (rt->rsv_spare, loop thread only, at
 * most STORE_RSV_SPARE_MAX) instead of a calloc of ~2.2 KiB and a free per reservation: a
 * 128-item batch put made 128 of each (docs/performance.md "Store CPU per batch item, tenth
 * round"). A context freed once the runtime is closing is freed outright; the list at runtime
 * free (kvm_rsv_spare_free).
 */
#define STORE_RSV_SPARE_MAX 256 /* ~570 KiB at most per runtime: two 128-item batches in flight */

static struct reserve_ctx *rsv_ctx_new(kvm_rt_t *rt)
{
    struct reserve_ctx *c = rt->rsv_spare;
    if (c) {
        rt->rsv_spare = c->next;
        rt->n_rsv_spare--;
    } else if ((c = malloc(sizeof(*c))) != NULL) {
        rt->rsv_allocs++;
    } else {
        return NULL;
    }
    memset(c, 0, offsetof(struct reserve_ctx, segs));
    return c;
}

static void rsv_ctx_free(kvm_rt_t *rt, struct reserve_ctx *c)
{
    if (rt->n_rsv_spare < STORE_RSV_SPARE_MAX && !atomic_load(&rt->closing)) {
        c->next = rt->rsv_spare;
        rt->rsv_spare = c;
        rt->n_rsv_spare++;
        return;
    }
    free(c);
}

void kvm_rsv_spare_free(kvm_rt_t *rt)
{
    while (rt->rsv_spare) {
        struct reserve_ctx *c = rt->rsv_spare;
        rt->rsv_spare = c->next;
        free(c);
    }
    rt->n_rsv_spare = 0;
}

/*
 * Batched reservations [loop]: while a PLACE op dispatches its items (or a batched reply is
 * processed, whose failed items may try their next owner), remote reservations are queued
 * instead of sent; rsv_flush then sends one STORE_RPC_RESERVE_BATCH per (op, owner), up to
 * STORE_RESERVE_BATCH_MAX items each, or the single STORE_RPC_RESERVE for a lone item. Each item
 * keeps its own result. Per loop thread (runtimes in one process have their own loops).
 */
static _Thread_local struct {
    unsigned depth;
    struct reserve_ctx *head, *tail;
} rsv_q;

static void rsv_begin(void)
{
    rsv_q.depth++;
}
static void rsv_flush(void);

static void reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off, uint64_t token)
{
    struct reserve_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    kvm_span_finish(c->sp, rc);
    free(c->sp);
    it->placing--;
    if (rc == 0) {
        struct kvm_res *r = &it->res[it->n_res++];
        memset(r, 0, sizeof(*r));
        r->owner = c->owner;
        r->local = kvm_id128_equal(&c->owner.id, &rt->self.id);
        r->seg = seg;
        r->offset = off;
        r->token = token;
        const struct kvm_member *m = kvm_member_find(rt, &c->owner.id);
        const struct kvm_seg_info *segs = c->segs;
        uint32_t n_segs = c->n_segs;
        r->data_addr = c->data_addr;
        if (m && kvm_runtime_equal(&m->rt, &c->owner)) {
            /* a segment added since the reservation started is in the newer snapshot */
            segs = m->segs;
            n_segs = m->n_segs;
        }
        for (uint32_t i = 0; i < n_segs; i++)
            if (segs[i].id == seg)
                r->seg_read_token = segs[i].read_token;
        kvm_put_inline_reserved(op, r, c->inl);
        kvm_place_count(rt, op, it, &c->owner.id);
    } else {
        item_exclude(it, &c->owner.id);
        /* a timeout only says something about the owner when it had a fair share of time */
        if (rc == KVMESH_ECONN ||
            (rc == KVMESH_ETIMEDOUT && c->budget_ms >= rt->cfg.request_timeout_ms / 2))
            kvm_member_quarantine(rt, &c->owner.id);
        snprintf(op->lasterr, sizeof(op->lasterr), "%s", err ? err : "");
        it->rc = rc;
    }
    rsv_ctx_free(rt, c);
    if (it->in_place == 0)
        place_item(op, it);
}

struct reserve_batch {
    uint16_t n;
    struct reserve_ctx *c[STORE_RESERVE_BATCH_MAX];
};

static void rpc_reserved_batch(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct reserve_batch *rb = arg;
    store_reserve_batch_resp_t *r = malloc(sizeof(*r));
    int rc = res->status;
    if (!r)
        rc = KVMESH_ENOMEM;
    else if (!rc &&
             (store_reserve_batch_resp_decode(res->body, res->body_len, r) != 0 || r->n != rb->n))
        rc = KVMESH_EPROTO;
    kvm_rt_t *rt = rb->c[0]->op->rt;
    const struct kvm_member *m = kvm_member_find(rt, &rb->c[0]->owner.id);
    rsv_begin();
    for (uint16_t i = 0; i < rb->n; i++) {
        int irc = rc ? rc : r->r[i].status;
        char err[300];
        if (irc) /* (a granted item's message is never read: formatted only for a failed one) */
            snprintf(err, sizeof(err), "reservation on %s failed: %s%s%s", m ? m->idhex : "(gone)",
                     kvmesh_strerror(irc), rc && res->error[0] ? ": " : "", rc ? res->error : "");
        reserved(rb->c[i], irc, irc ? err : NULL, irc ? 0 : r->r[i].seg, irc ? 0 : r->r[i].offset,
                 irc ? 0 : r->r[i].token);
    }
    free(r);
    free(rb);
    rsv_flush();
}

/* Sends rb (n >= 2 items of one op to one owner); on failure every item fails with it. */
static void rsv_send_batch(struct reserve_batch *rb)
{
    struct reserve_ctx *c0 = rb->c[0];
    kvm_op_t *op = c0->op;
    store_reserve_batch_req_t *req = malloc(sizeof(*req));
    size_t cap = STORE_RESERVE_BATCH_REQ_MAX(rb->n), len = 0;
    uint8_t *body = malloc(cap);
    int rc = req && body ? 0 : KVMESH_ENOMEM;
    if (!rc) {
        req->target_epoch = c0->owner.epoch;
        req->ttl_ms = kvm_reserve_ttl_ms(op->rt);
        req->n = rb->n;
        for (uint16_t i = 0; i < rb->n; i++) {
            req->length[i] = rb->c[i]->it->len;
            req->ident[i] = rb->c[i]->it->ident; /* borrowed */
        }
        rc = store_reserve_batch_req_encode(req, body, cap, &len);
    }
    uint32_t left_ms = kvm_deadline_left_ms(op->deadline_ms);
    if (!rc && left_ms == 0)
        rc = KVMESH_ETIMEDOUT;
    if (!rc) {
        struct frame_trace ft;
        kvm_span_wire(c0->sp, &ft);
        struct rpc_msg msg = {.type = STORE_RPC_RESERVE_BATCH,
                              .body = body,
                              .body_len = len,
                              .timeout_ms = left_ms,
                              .trace = c0->sp ? &ft : NULL};
        rc = rpc_call(c0->peer, &msg, rpc_reserved_batch, rb, NULL);
        if (!rc)
            KVM_CP_COUNT(op, op_round_trips_total, OBS_CPSTAGE_RESERVE, 1);
    }
    free(body);
    free(req);
    if (rc) {
        rsv_begin();
        for (uint16_t i = 0; i < rb->n; i++)
            reserved(rb->c[i], rc, "cannot send the batched reservation", 0, 0, 0);
        free(rb);
        rsv_flush();
    }
}

static void rsv_send_one(struct reserve_ctx *c);

/*
 * Batch puts at the primary (put_primary.c "Batches"): of a group rsv_flush formed (one op, one
 * owner), the items that kvm_put_primary_batch_wants go as STORE_RPC_PUT_PRIMARY_BATCH messages
 * of at most STORE_PUT_PRIMARY_BATCH_BYTES value bytes each (the group holds at most
 * STORE_PUT_PRIMARY_BATCH_MAX items); the rest stay in the group (a batched reservation). A
 * message that cannot be sent leaves its items to the group (prim_off: not again).
 */
_Static_assert(STORE_RESERVE_BATCH_MAX <= STORE_PUT_PRIMARY_BATCH_MAX,
               "a reservation group fits one put-at-primary batch by count");

struct prim_batch {
    uint16_t n;
    struct reserve_ctx *c[STORE_PUT_PRIMARY_BATCH_MAX];
};

static void prim_answered(struct reserve_ctx *c, struct kvm_prim_answer *a);

static void rpc_prim_batch(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct prim_batch *pb = arg;
    kvm_rt_t *rt = pb->c[0]->op->rt;
    struct kvm_prim_answer *a = malloc((size_t)pb->n * sizeof(*a));
    rsv_begin(); /* fallbacks and next owners: batched again */
    if (a)
        kvm_put_primary_batch_answer(rt, &pb->c[0]->owner, res, pb->n, a);
    for (uint16_t i = 0; i < pb->n; i++) {
        if (a) {
            prim_answered(pb->c[i], &a[i]);
            continue;
        }
        static _Thread_local struct kvm_prim_answer oom; /* (the message may have applied) */
        memset(&oom, 0, sizeof(oom));
        kvm_route_init(&oom.route);
        oom.outcome = KVM_PRIM_UNKNOWN;
        oom.status = KVMESH_ENOMEM;
        snprintf(oom.msg, sizeof(oom.msg),
                 "out of memory reading the put-at-primary answer; the put may have been "
                 "applied: read the key back or retry the put");
        prim_answered(pb->c[i], &oom);
    }
    free(a);
    free(pb);
    rsv_flush();
}

/* Sends pb (its items' values read now); false (nothing sent) when it could not be sent. */
static bool prim_send(struct prim_batch *pb)
{
    struct reserve_ctx *c0 = pb->c[0];
    kvm_op_t *op = c0->op;
    uint32_t left_ms = kvm_deadline_left_ms(op->deadline_ms);
    if (!left_ms || left_ms == UINT32_MAX) /* (only before the deadline, as the single form) */
        return false;
    struct kvm_item *its[STORE_PUT_PRIMARY_BATCH_MAX];
    for (uint16_t i = 0; i < pb->n; i++) {
        its[i] = pb->c[i]->it;
        pb->c[i]->budget_ms = left_ms;
    }
    size_t len = 0;
    uint8_t *body = kvm_put_primary_batch_body(op, its, pb->n, &c0->owner,
                                               kvm_reserve_ttl_ms(op->rt), left_ms, &len);
    if (!body)
        return false;
    struct frame_trace ft;
    kvm_span_wire(c0->sp, &ft);
    struct rpc_msg msg = {.type = STORE_RPC_PUT_PRIMARY_BATCH,
                          .body = body,
                          .body_len = len,
                          .timeout_ms = left_ms,
                          .trace = c0->sp ? &ft : NULL};
    int rc = rpc_call(c0->peer, &msg, rpc_prim_batch, pb, NULL);
    free(body);
    if (rc)
        return false;
    KVM_CP_COUNT(op, op_round_trips_total, OBS_CPSTAGE_RESERVE, 1);
    atomic_store(&op->prim_sent, true); /* (an abandoned op: "may have been applied") */
    return true;
}

/* Sends pb, or gives its items back to rb (at rb->c[*keep...]) for the batched reservation. */
static void prim_go(struct prim_batch *pb, struct reserve_batch *rb, uint16_t *keep)
{
    if (prim_send(pb))
        return;
    for (uint16_t i = 0; i < pb->n; i++) {
        pb->c[i]->prim_off = true;
        rb->c[(*keep)++] = pb->c[i];
    }
    free(pb);
}

static void prim_split(struct reserve_batch *rb)
{
    if (!rb->c[0]->op->wbat)
        return;
    struct prim_batch *pb = NULL;
    uint64_t bytes = 0;
    uint16_t keep = 0; /* rb->c[0, keep): the items left to the reservation (keep <= i) */
    for (uint16_t i = 0; i < rb->n; i++) {
        struct reserve_ctx *c = rb->c[i];
        kvm_op_t *op = c->op;
        if (c->prim_off || !c->peer ||
            !kvm_put_primary_batch_wants(op->rt, op, c->it, &c->owner, c->data_addr)) {
            rb->c[keep++] = c;
            continue;
        }
        if (pb && bytes + c->it->len > STORE_PUT_PRIMARY_BATCH_BYTES) {
            prim_go(pb, rb, &keep);
            pb = NULL;
        }
        if (!pb && (pb = malloc(sizeof(*pb))) != NULL) {
            pb->n = 0;
            bytes = 0;
        }
        if (!pb) { /* out of memory: the reservation */
            c->prim_off = true;
            rb->c[keep++] = c;
            continue;
        }
        pb->c[pb->n++] = c;
        bytes += c->it->len;
    }
    if (pb)
        prim_go(pb, rb, &keep);
    rb->n = keep;
}

static void rsv_flush(void)
{
    KVM_ASSERT(rsv_q.depth > 0);
    if (--rsv_q.depth)
        return;
    while (rsv_q.head) { /* (a send that fails at once may queue retries: re-read the head) */
        struct reserve_ctx *first = rsv_q.head;
        struct reserve_batch *rb = calloc(1, sizeof(*rb));
        if (!rb) { /* out of memory: the item alone */
            rsv_q.head = first->next;
            if (!rsv_q.head)
                rsv_q.tail = NULL;
            first->next = NULL;
            rsv_send_one(first);
            continue;
        }
        /* the first queued item and every other queued item of the same op and owner */
        struct reserve_ctx **pp = &rsv_q.head, *last = NULL;
        while (*pp) {
            struct reserve_ctx *c = *pp;
            if (rb->n < STORE_RESERVE_BATCH_MAX && c->op == first->op &&
                kvm_runtime_equal(&c->owner, &first->owner)) {
                *pp = c->next;
                c->next = NULL;
                rb->c[rb->n++] = c;
                continue;
            }
            last = c;
            pp = &c->next;
        }
        rsv_q.tail = last;
        prim_split(rb); /* the items going at their shard primary leave as their own batch */
        if (rb->n == 0) {
            free(rb);
        } else if (rb->n == 1) {
            rsv_send_one(rb->c[0]);
            free(rb);
        } else {
            rsv_send_batch(rb);
        }
    }
}

static void rpc_reserved(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    store_reserve_resp_t r = {0};
    int rc = res->status;
    if (!rc && store_reserve_resp_decode(res->body, res->body_len, &r) != 0)
        rc = KVMESH_EPROTO;
    char err[300];
    struct reserve_ctx *c = arg;
    if (c->inl && rc == KVMESH_ENOTSUP) { /* an owner that predates inline reservations */
        kvm_put_inline_refused(c->op->rt, &c->owner);
        rsv_send_one(c); /* the plain reservation; the payload goes by the transport */
        return;
    }
    snprintf(err, sizeof(err), "reservation on %s failed: %s%s%s",
             kvm_member_find(c->op->rt, &c->owner.id)
                 ? kvm_member_find(c->op->rt, &c->owner.id)->idhex
                 : "(gone)",
             kvmesh_strerror(rc), res->error[0] ? ": " : "", res->error);
    reserved(arg, rc, err, r.seg, r.offset, r.token);
}

/* The answer of a put at the primary (put_primary.c), single or an item of a batch: the item
 * ends here when the owner published it (DONE: data.c publishes nothing) or its publication
 * failed; a failed reservation goes on as a reservation's; a decline or an older owner sends the
 * reservation (batched with others while rsv_q is open). */
static void prim_answered(struct reserve_ctx *c, struct kvm_prim_answer *a)
{
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    if (a->outcome == KVM_PRIM_FALLBACK) { /* nothing reserved: the put as before */
        kvm_route_free(&a->route);
        c->prim_off = true;
        if (rsv_q.depth && c->peer) {
            c->next = NULL;
            if (rsv_q.tail)
                rsv_q.tail->next = c;
            else
                rsv_q.head = c;
            rsv_q.tail = c;
        } else {
            rsv_send_one(c);
        }
        return;
    }
    if (a->outcome == KVM_PRIM_NOT_RESERVED) {
        kvm_route_free(&a->route);
        char err[600];
        const struct kvm_member *m = kvm_member_find(rt, &c->owner.id);
        snprintf(err, sizeof(err), "reservation on %s failed: %s%s%s", m ? m->idhex : "(gone)",
                 kvmesh_strerror(a->status), a->msg[0] ? ": " : "", a->msg);
        reserved(c, a->status, err, 0, 0, 0);
        return;
    }
    if (c->sp)
        obs_span_set_int(c->sp, "kvmesh.primary", 1);
    kvm_span_finish(c->sp, a->outcome == KVM_PRIM_PUBLISHED ? 0 : a->status);
    free(c->sp);
    it->placing--;
    if (a->outcome != KVM_PRIM_PUBLISHED) { /* FAILED or UNKNOWN: nothing is held here */
        kvm_route_free(&a->route);
        rsv_ctx_free(rt, c);
        kvm_item_fail(op, it, a->status, "%s", a->msg);
        return;
    }
    struct kvm_res *r = &it->res[it->n_res++];
    memset(r, 0, sizeof(*r));
    r->owner = c->owner;
    r->seg = a->seg;
    r->offset = a->offset;
    r->token = a->token;
    r->data_addr = c->data_addr;
    kvm_put_inline_reserved(op, r, true); /* written with the request: its copies counted */
    kvm_place_count(rt, op, it, &c->owner.id);
    kvm_hint_put(rt, &a->route); /* the published route: this runtime's next expectation */
    kvm_route_free(&a->route);
    it->published = true; /* committed and routed by the owner: no PUBLISH op follows */
    it->rc = 0;
    rsv_ctx_free(rt, c);
    kvm_item_done(op, it);
}

static void rpc_put_primary(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct reserve_ctx *c = arg;
    kvm_rt_t *rt = c->op->rt;
    static _Thread_local struct kvm_prim_answer a;
    kvm_put_primary_raw_free(rt, c->prim_val); /* (the frame's write has ended: rpc.h) */
    c->prim_val = NULL;
    kvm_put_primary_answer(rt, &c->owner, c->prim_raw, res, &a);
    prim_answered(c, &a);
}

static void place_start(kvm_op_t *op, struct kvm_item *it, const struct kvm_member *m)
{
    kvm_rt_t *rt = op->rt;
    struct reserve_ctx *c = rsv_ctx_new(rt);
    if (!c) {
        item_exclude(it, &m->rt.id);
        return;
    }
    c->op = op;
    c->it = it;
    c->owner = m->rt;
    c->data_addr = m->data_addr;
    c->n_segs = m->n_segs;
    memcpy(c->segs, m->segs, m->n_segs * sizeof(m->segs[0]));
    item_exclude(it, &m->rt.id); /* one reservation per owner: replicas on distinct owners */
    it->placing++;
    uint32_t ttl = rt->cfg.request_timeout_ms * 2;
    bool local = kvm_id128_equal(&m->rt.id, &rt->self.id);
    if (op->span && obs_span_sampled(op->span)) {
        struct obs_span *s = malloc(sizeof(*s));
        if (s && !(c->sp = kvm_span_begin(rt, op->span, false, "control.reserve", s)))
            free(s);
    }
    if (c->sp) {
        obs_span_set_str(c->sp, "kvmesh.owner", m->idhex);
        obs_span_set_int(c->sp, "kvmesh.local", local);
    }
    if (local) {
        kvm_owner_reserve(rt, &it->ident, it->len, ttl, reserved, c);
        return;
    }
    c->peer = kvm_rt_peer(rt, m);
    if (c->peer && rsv_q.depth) { /* sent by rsv_flush, batched with the op's other items */
        c->budget_ms = kvm_deadline_left_ms(op->deadline_ms);
        if (rsv_q.tail)
            rsv_q.tail->next = c;
        else
            rsv_q.head = c;
        rsv_q.tail = c;
        return;
    }
    rsv_send_one(c);
}

static void rsv_send_one(struct reserve_ctx *c)
{
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    rpc_peer *p = c->peer;
    uint8_t body[64 + KVM_IDENT_ENC_MAX_LEN];
    size_t len = 0;
    store_reserve_req_t req = {.target_epoch = c->owner.epoch,
                               .length = it->len,
                               .ttl_ms = kvm_reserve_ttl_ms(op->rt),
                               .ident = it->ident};
    uint32_t left_ms = kvm_deadline_left_ms(op->deadline_ms);
    c->budget_ms = left_ms;
    /* a small single put to the key's shard primary: reserve, write and publish in one exchange
     * (put_primary.c; only before the deadline, as an inline reservation) */
    if (p && left_ms && left_ms != UINT32_MAX && !c->prim_off &&
        kvm_put_primary_wants(op->rt, op, it, &c->owner, c->data_addr)) {
        /* (a value above inline_write_max goes as the frame's raw payload, lent from the
         * caller's buffer: the RPC layer copies what it did not write before rpc_call returns,
         * since the caller's buffer may be gone before the frame's write ends; from a staged
         * copy when it has more parts than a frame takes) */
        uint8_t head[STORE_PUT_PRIMARY_HEAD_MAX];
        uv_buf_t lent[RPC_MAX_IOV];
        unsigned nlent = 0;
        c->prim_raw = kvm_put_primary_raw(op->rt, it);
        uint8_t *pbody = NULL;
        int prc = 1;
        if (c->prim_raw)
            prc = kvm_put_primary_raw_lend(op, it, &c->owner, req.ttl_ms, left_ms, head, &len, lent,
                                           &nlent);
        if (prc == 1 && c->prim_raw)
            c->prim_val =
                kvm_put_primary_raw_body(op, it, &c->owner, req.ttl_ms, left_ms, head, &len);
        else if (prc == 1)
            pbody = kvm_put_primary_body(op, it, &c->owner, req.ttl_ms, left_ms, &len);
        if (prc == 1)
            prc = pbody || c->prim_val ? 0 : KVMESH_ENOMEM;
        if (!prc) {
            struct frame_trace ft;
            kvm_span_wire(c->sp, &ft);
            c->prim_iov = uv_buf_init((char *)c->prim_val, (unsigned)it->len);
            struct rpc_msg msg = {.type = c->prim_raw ? STORE_RPC_PUT_PRIMARY_RAW
                                                      : STORE_RPC_PUT_PRIMARY,
                                  .body = c->prim_raw ? head : pbody,
                                  .body_len = len,
                                  .iov = !c->prim_raw  ? NULL
                                         : c->prim_val ? &c->prim_iov
                                                       : lent,
                                  .niov = !c->prim_raw  ? 0
                                          : c->prim_val ? 1
                                                        : nlent,
                                  .timeout_ms = left_ms,
                                  .trace = c->sp ? &ft : NULL,
                                  .lend = c->prim_raw && !c->prim_val};
            prc = rpc_call(p, &msg, rpc_put_primary, c, NULL);
            if (!prc) {
                KVM_CP_COUNT(op, op_round_trips_total, OBS_CPSTAGE_RESERVE, 1);
                atomic_store(&op->prim_sent, true); /* (an abandoned op: "may have been applied") */
            }
        }
        free(pbody);
        if (!prc)
            return;
        kvm_put_primary_raw_free(op->rt, c->prim_val);
        c->prim_val = NULL;
        c->prim_off = true; /* not sent: the inline reservation below */
        len = 0;
    }
    /* a small single put's value goes with the reservation (put_inline.c; only before the
     * deadline: the caller's buffer is read now, and the caller waits until deadline + slack) */
    c->inl = p && left_ms && kvm_put_inline_wants(op->rt, op, &c->owner, c->data_addr);
    uint8_t *ibody = c->inl ? kvm_put_inline_body(op, it, &c->owner, req.ttl_ms, &len) : NULL;
    c->inl = ibody != NULL;
    int rc = c->inl ? 0
             : p    ? store_reserve_req_encode(&req, body, sizeof(body), &len)
                    : KVMESH_ECONN;
    if (!rc && left_ms == 0)
        rc = KVMESH_ETIMEDOUT;
    if (!rc) {
        struct frame_trace ft;
        kvm_span_wire(c->sp, &ft);
        struct rpc_msg msg = {.type = c->inl ? STORE_RPC_RESERVE_INLINE : STORE_RPC_RESERVE,
                              .body = c->inl ? ibody : body,
                              .body_len = len,
                              .timeout_ms = left_ms, /* only what the call has left */
                              .trace = c->sp ? &ft : NULL};
        rc = rpc_call(p, &msg, rpc_reserved, c, NULL);
        if (!rc)
            KVM_CP_COUNT(op, op_round_trips_total, OBS_CPSTAGE_RESERVE, 1);
    }
    free(ibody);
    if (rc)
        reserved(c, rc, "cannot send the reservation", 0, 0, 0);
}

/* ---- waiting for storage members (place_wait.h) ------------------------------------------- */

struct place_wait {
    struct place_wait *next, **pprev; /* in rt->place_waiters */
    kvm_op_t *op;
    struct kvm_item *it;
    env_timer_id timer; /* the call's deadline */
};

static void place_fail(kvm_op_t *op, struct kvm_item *it, bool late, const char *why);

static size_t storage_members(kvm_rt_t *rt)
{
    size_t n = 0;
    for (size_t i = 0; i < rt->n_members; i++)
        n += storage_member(rt, &rt->members[i]);
    return n;
}

static void wait_unlink(kvm_rt_t *rt, struct place_wait *w)
{
    env_timer_cancel(rt->env, w->timer);
    *w->pprev = w->next;
    if (w->next)
        w->next->pprev = w->pprev;
}

static void wait_expired(void *arg)
{
    struct place_wait *w = arg;
    kvm_op_t *op = w->op;
    struct kvm_item *it = w->it;
    w->timer = 0;
    wait_unlink(op->rt, w);
    free(w);
    place_fail(op, it, false, "; no storage member came back before the deadline");
}

/* An application's put (data.c marks it for the critical-path counters); a drain's or
 * re-replication's placement fails at once and is retried by its own pass. */
static bool caller_put(const kvm_op_t *op)
{
    return op->cp_op == 1 + OBS_OP_PUT || op->cp_op == 1 + OBS_OP_BATCH_PUT;
}

/* Too few storage members in the snapshot for `it`: park it until the next snapshot (a lease
 * that lapsed for a moment) or its deadline. False when it must fail now. */
static bool place_park(kvm_op_t *op, struct kvm_item *it)
{
    kvm_rt_t *rt = op->rt;
    uint32_t left = kvm_deadline_left_ms(op->deadline_ms);
    if (!caller_put(op) || left == 0 || left == UINT32_MAX || atomic_load(&rt->closing) ||
        atomic_load(&op->abandoned) || it->tries >= STORE_PLACE_TRIES * it->want ||
        it->exclude_n == KVM_ARRAY_SIZE(it->exclude) || storage_members(rt) >= it->want)
        return false; /* (no retry could place it: it fails now) */
    struct place_wait *w = calloc(1, sizeof(*w));
    if (!w)
        return false;
    w->op = op;
    w->it = it;
    w->timer = env_timer_start(rt->env, (uint64_t)left * 1000000ull, wait_expired, w);
    w->next = rt->place_waiters;
    w->pprev = &rt->place_waiters;
    if (w->next)
        w->next->pprev = &w->next;
    rt->place_waiters = w;
    kvm_item_set_state(it, KVM_ITEM_PARKED);
    return true;
}

void kvm_place_waiters_wake(kvm_rt_t *rt)
{
    struct place_wait *list = rt->place_waiters;
    if (!list)
        return;
    rt->place_waiters = NULL; /* a retry that still finds too few members parks anew */
    rsv_begin();
    while (list) {
        struct place_wait *w = list;
        list = w->next;
        env_timer_cancel(rt->env, w->timer);
        kvm_op_t *op = w->op;
        struct kvm_item *it = w->it;
        free(w);
        place_item(op, it);
    }
    rsv_flush();
}

void kvm_place_waiters_close(kvm_rt_t *rt)
{
    while (rt->place_waiters) {
        struct place_wait *w = rt->place_waiters;
        kvm_op_t *op = w->op;
        struct kvm_item *it = w->it;
        wait_unlink(rt, w);
        free(w);
        kvm_ops_release_res_traced(rt, it, op->span);
        kvm_quota_abort(rt, it);
        kvm_item_fail(op, it, KVMESH_ECLOSED,
                      "the runtime closed while the put waited for storage members");
    }
}

static void place_item(kvm_op_t *op, struct kvm_item *it)
{
    if (kvm_item_ended(it))
        return;
    kvm_item_set_state(it, KVM_ITEM_PLACING); /* (again: the next round after an answer) */
    it->in_place++;
    bool late = false;
    while (it->n_res + it->placing < it->want && it->tries < STORE_PLACE_TRIES * it->want) {
        if ((late = kvm_deadline_left_ms(op->deadline_ms) == 0))
            break; /* no new owner is tried once the call's deadline passed */
        const struct kvm_member *m = next_candidate(op->rt, op, it);
        if (!m || it->exclude_n == KVM_ARRAY_SIZE(it->exclude))
            break;
        it->tries++;
        place_start(op, it, m);
    }
    it->in_place--;
    if (it->in_place || it->placing)
        return;
    if (it->n_res == it->want && !atomic_load(&op->abandoned)) {
        it->rc = 0;
        kvm_item_done(op, it);
        return;
    }
    if (!late && place_park(op, it))
        return;
    if (late && caller_put(op) && storage_members(op->rt) < it->want) {
        /* The deadline passed while too few storage members were live (a snapshot woke the
         * parked put at its deadline): the same outcome as the park's own timer. */
        place_fail(op, it, false, "; no storage member came back before the deadline");
        return;
    }
    place_fail(op, it, late, "");
}

/* `it` got fewer replicas than it wants: releases what it holds and fails it. */
static void place_fail(kvm_op_t *op, struct kvm_item *it, bool late, const char *why)
{
    uint32_t got = it->n_res;
    kvm_ops_release_res_traced(op->rt, it, op->span);
    kvm_quota_abort(op->rt, it);
    if (late || atomic_load(&op->abandoned)) {
        kvm_item_fail(op, it, KVMESH_ETIMEDOUT,
                      "deadline passed after placing %u of %u replicas; the put was not applied "
                      "(owners slow or unreachable; retry)%s%s",
                      got, it->want, op->lasterr[0] ? "; last error: " : "", op->lasterr);
        return;
    }
    char pin[400];
    if (kvm_place_pin_failed(op->rt, op, it, got, it->want, pin, sizeof(pin))) {
        kvm_item_fail(op, it, KVMESH_EUNAVAILABLE, "%s", pin);
        return;
    }
    int rc = it->rc && it->rc != KVMESH_ECONN && it->rc != KVMESH_ETIMEDOUT ? it->rc
                                                                            : KVMESH_EUNAVAILABLE;
    kvm_item_fail(op, it, rc,
                  "placed %u of %u replicas of a %" PRIu64
                  "-byte object (%zu live members%s)%s%s%s",
                  got, it->want, it->len, op->rt->n_members, op->hard_pin ? ", hard pin" : "", why,
                  op->lasterr[0] ? "; last error: " : "", op->lasterr);
}

static void place_reserved(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        kvm_item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    place_item(op, it);
}

void kvm_ops_place_run(kvm_op_t *op)
{
    kvm_rt_t *rt = op->rt;
    for (size_t i = 0; i < op->n; i++) {
        struct kvm_item *it = &op->items[i];
        it->want = op->replicas;
        if (kvm_quota_applies(rt, &it->ident)) /* (before the batch: it may answer at once) */
            kvm_item_set_state(it, KVM_ITEM_QUOTA_RESERVING);
    }
    bool batched = kvm_quota_put_batch(op, place_reserved); /* all-or-nothing reserve */
    rsv_begin(); /* remote reservations: one batch per owner (rsv_flush) */
    for (size_t i = 0; i < op->n; i++) {
        struct kvm_item *it = &op->items[i];
        if (it->state == KVM_ITEM_NEW)
            place_item(op, it);
        else if (!batched && it->state == KVM_ITEM_QUOTA_RESERVING)
            kvm_quota_put_reserve(op, it, place_reserved); /* before any data transfer */
    }
    rsv_flush();
}
