/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c — the loop side of object operations (spec "Write path", "Read path", "Delete and
 * reclaim"): placement and reservation, route publication by fenced CAS, lookups with replica
 * access information, tombstones, drain handoff, and the release of replicas a route no longer
 * references. Every function runs on the loop thread; it reads only the cached membership
 * snapshot (never metadata) and reaches routes only through route.h.
 *
 * Per item of an op: finished exactly once (kvm_op_item_done); the op completes when every item
 * finished. Reservations of a failed put are released here (or by their TTL when the outcome of
 * the publication is indeterminate: the owner then asks the route).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/wrh.h"
#include "store/place.h"
#include "store/place_wait.h"
#include "store/cold_glue.h"
#include "store/proto.h"
#include "store/quota.h"
#include "store/repair_plan.h"
#include "store/slot_core.h"
#include "store/store.h"

struct kvm_hitbuf {
    kvm_runtime_id_t owner;
    store_hit_msg_t msg;
};

static size_t item_index(kvm_op_t *op, struct kvm_item *it)
{
    return (size_t)(it - op->items);
}

static void item_finish(kvm_op_t *op, struct kvm_item *it)
{
    KVM_ASSERT(!it->finished);
    it->finished = true;
    kvm_op_item_done(op);
}

static void item_fail(kvm_op_t *op, struct kvm_item *it, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void item_fail(kvm_op_t *op, struct kvm_item *it, int rc, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kvm_op_fail(op, it, rc, "%s", msg);
    item_finish(op, it);
}

/* ---- notifications to owners ----------------------------------------------------------------- */

/* COMMIT / RELEASE name the slot by (owner epoch, segment, offset) and by its identity
 * (slot_note_t, docs/store.md "Slot identity in COMMIT and RELEASE"), so that a notification
 * delayed past the reclaim grace cannot reach a later slot reusing the bytes: a reservation of
 * this runtime's own is named by its write-grant token, a replica known from a route by its
 * object (identity hash and length). */
static slot_note_t res_note(const struct kvm_item *it, uint32_t i)
{
    slot_note_t n = {SLOT_NOTE_OBJECT, 0, it->ident.hash, it->len};
    if (it->res[i].token) {
        n.has |= SLOT_NOTE_TOKEN;
        n.token = it->res[i].token;
    }
    return n;
}

static slot_note_t object_note(const kvm_ident_t *id, const kvm_hot_replica_t *rep)
{
    return (slot_note_t){SLOT_NOTE_OBJECT, 0, id->hash, rep->length};
}

static void notify_slot_traced(kvm_rt_t *rt, uint16_t type, const kvm_runtime_id_t *owner,
                               uint64_t seg, uint64_t off, const slot_note_t *note,
                               struct obs_span *parent);

static void notify_slot(kvm_rt_t *rt, uint16_t type, const kvm_runtime_id_t *owner, uint64_t seg,
                        uint64_t off, const slot_note_t *note)
{
    notify_slot_traced(rt, type, owner, seg, off, note, NULL);
}

/* note: the slot's identity (NULL: none, as an older peer sends). parent: the request's span
 * (NULL = untraced); a sampled notification carries the context of a control.commit /
 * control.release span so the owner's handling joins the trace. */
static void notify_slot_traced(kvm_rt_t *rt, uint16_t type, const kvm_runtime_id_t *owner,
                               uint64_t seg, uint64_t off, const slot_note_t *note,
                               struct obs_span *parent)
{
    if (kvm_id128_equal(owner, &rt->self.id)) {
        if (type == STORE_RPC_COMMIT)
            kvm_owner_commit_note(rt, seg, off, note);
        else
            kvm_owner_release_note(rt, seg, off, note);
        kvm_waitq_signal(&rt->wq_slots); /* a local slot settled (kvm_store_wait_slots) */
        return;
    }
    const struct kvm_member *m = kvm_member_find(rt, owner);
    rpc_peer *p = m ? kvm_rt_peer(rt, m) : NULL;
    if (!p)
        return; /* owner gone: its memory went with it; a restarted incarnation has new segments */
    uint8_t body[STORE_SLOT_MSG_MAX];
    size_t len = 0;
    store_slot_msg_t sm = {.target_epoch = m->rt.epoch, .seg = seg, .offset = off};
    if (note) {
        sm.has = (uint8_t)note->has;
        sm.token = note->token;
        sm.ident_hash = note->ident_hash;
        sm.len = note->len;
    }
    int erc = store_slot_msg_encode(&sm, body, sizeof(body), &len);
    KVM_ASSERT(erc == 0);
    struct obs_span sp,
        *s = kvm_span_begin(rt, parent, false,
                            type == STORE_RPC_COMMIT ? "control.commit" : "control.release", &sp);
    struct frame_trace ft;
    kvm_span_wire(s, &ft);
    struct rpc_msg msg = {.type = type, .body = body, .body_len = len, .trace = s ? &ft : NULL};
    /* best effort: TTL expiry asks the route when lost */
    kvm_span_finish(s, rpc_notify(p, &msg, NULL, NULL));
}

/* The quota hooks' release_replica / commit_replica: a replica known from a route, named by its
 * object (key hash and length) when the route's identity is at hand, else by (segment, offset)
 * alone (docs/store.md "Slot identity in COMMIT and RELEASE"). */
void kvm_ops_release_replica(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep)
{
    slot_note_t n = id && id->enc ? object_note(id, rep) : (slot_note_t){0};
    notify_slot(rt, STORE_RPC_RELEASE, &rep->owner, rep->segment, rep->offset,
                id && id->enc ? &n : NULL);
}

void kvm_ops_commit_replica(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep)
{
    slot_note_t n = id && id->enc ? object_note(id, rep) : (slot_note_t){0};
    notify_slot(rt, STORE_RPC_COMMIT, &rep->owner, rep->segment, rep->offset,
                id && id->enc ? &n : NULL);
}

/* A replica of object id known from a route: named by the object. */
static void release_replica_of(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep)
{
    slot_note_t n = object_note(id, rep);
    notify_slot(rt, STORE_RPC_RELEASE, &rep->owner, rep->segment, rep->offset, &n);
}

static void commit_res(kvm_rt_t *rt, struct kvm_item *it, uint32_t i, struct obs_span *parent)
{
    slot_note_t n = res_note(it, i);
    notify_slot_traced(rt, STORE_RPC_COMMIT, &it->res[i].owner.id, it->res[i].seg,
                       it->res[i].offset, &n, parent);
}

static void release_res_traced(kvm_rt_t *rt, struct kvm_item *it, struct obs_span *parent)
{
    for (uint32_t i = 0; i < it->n_res; i++) {
        slot_note_t n = res_note(it, i);
        notify_slot_traced(rt, STORE_RPC_RELEASE, &it->res[i].owner.id, it->res[i].seg,
                           it->res[i].offset, &n, parent);
    }
    it->n_res = 0;
}

static void release_res(kvm_rt_t *rt, struct kvm_item *it)
{
    release_res_traced(rt, it, NULL);
}

/* Releases the replicas of `old` that `now` does not list. */
static void release_obsolete(kvm_rt_t *rt, const kvm_route_t *old, const kvm_route_t *now)
{
    for (uint32_t i = 0; i < old->n_replicas; i++)
        if (!now || kvm_route_find_replica(now, &old->replicas[i]) < 0)
            release_replica_of(rt, &old->ident, &old->replicas[i]);
}

/* ---- hits ------------------------------------------------------------------------------------ */

static void hits_flush(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->hit_timer = 0;
    for (size_t i = 0; i < rt->n_hitbufs; i++) {
        struct kvm_hitbuf *hb = &rt->hitbufs[i];
        const struct kvm_member *m = kvm_member_find(rt, &hb->owner);
        rpc_peer *p = m ? kvm_rt_peer(rt, m) : NULL;
        if (p && hb->msg.n) {
            uint8_t *body = malloc(STORE_PROTO_MAX);
            size_t len = 0;
            if (body && store_hit_msg_encode(&hb->msg, body, STORE_PROTO_MAX, &len) == 0) {
                struct rpc_msg msg = {.type = STORE_RPC_HIT, .body = body, .body_len = len};
                rpc_notify(p, &msg, NULL, NULL);
            }
            free(body);
        }
        hb->msg.n = 0;
    }
    rt->n_hitbufs = 0;
}

static void hit_record(kvm_rt_t *rt, const kvm_hot_replica_t *rep)
{
    if (kvm_id128_equal(&rep->owner, &rt->self.id)) {
        kvm_owner_hit(rt, rep->segment, rep->offset);
        return;
    }
    if (!rt->hitbufs) {
        rt->hitbufs = calloc(16, sizeof(*rt->hitbufs));
        if (!rt->hitbufs)
            return;
    }
    struct kvm_hitbuf *hb = NULL;
    for (size_t i = 0; i < rt->n_hitbufs && !hb; i++)
        if (kvm_id128_equal(&rt->hitbufs[i].owner, &rep->owner))
            hb = &rt->hitbufs[i];
    if (!hb) {
        if (rt->n_hitbufs == 16)
            return; /* best effort */
        hb = &rt->hitbufs[rt->n_hitbufs++];
        hb->owner = rep->owner;
        hb->msg.n = 0;
    }
    if (hb->msg.n < STORE_HIT_MAX) {
        hb->msg.slots[hb->msg.n].seg = rep->segment;
        hb->msg.slots[hb->msg.n].offset = rep->offset;
        hb->msg.n++;
    }
    if (!rt->hit_timer)
        rt->hit_timer = env_timer_start(rt->env, STORE_HIT_FLUSH_MS * 1000000ull, hits_flush, rt);
}

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
 * rest by weighted rendezvous rank of the object's hash. NULL when none is left. */
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
    struct kvm_seg_info segs[STORE_MAX_SEGS];
    struct obs_span *sp; /* control.reserve (allocated when traced; NULL when untraced) */
    uint32_t budget_ms;  /* the RPC's timeout: what the call had left */
    rpc_peer *peer;      /* queued for a batched reservation (rsv_flush) */
    struct reserve_ctx *next;
};

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
    free(c);
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
        snprintf(err, sizeof(err), "reservation on %s failed: %s%s%s", m ? m->idhex : "(gone)",
                 kvmesh_strerror(irc), rc && res->error[0] ? ": " : "", rc ? res->error : "");
        reserved(rb->c[i], irc, err, irc ? 0 : r->r[i].seg, irc ? 0 : r->r[i].offset,
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
        if (rb->n == 1) {
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
    snprintf(err, sizeof(err), "reservation on %s failed: %s%s%s",
             kvm_member_find(c->op->rt, &c->owner.id)
                 ? kvm_member_find(c->op->rt, &c->owner.id)->idhex
                 : "(gone)",
             kvmesh_strerror(rc), res->error[0] ? ": " : "", res->error);
    reserved(arg, rc, err, r.seg, r.offset, r.token);
}

static void place_start(kvm_op_t *op, struct kvm_item *it, const struct kvm_member *m)
{
    kvm_rt_t *rt = op->rt;
    struct reserve_ctx *c = calloc(1, sizeof(*c));
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
    int rc = p ? store_reserve_req_encode(&req, body, sizeof(body), &len) : KVMESH_ECONN;
    uint32_t left_ms = kvm_deadline_left_ms(op->deadline_ms);
    c->budget_ms = left_ms;
    if (!rc && left_ms == 0)
        rc = KVMESH_ETIMEDOUT;
    if (!rc) {
        struct frame_trace ft;
        kvm_span_wire(c->sp, &ft);
        struct rpc_msg msg = {.type = STORE_RPC_RESERVE,
                              .body = body,
                              .body_len = len,
                              .timeout_ms = left_ms, /* only what the call has left */
                              .trace = c->sp ? &ft : NULL};
        rc = rpc_call(p, &msg, rpc_reserved, c, NULL);
        if (!rc)
            KVM_CP_COUNT(op, op_round_trips_total, OBS_CPSTAGE_RESERVE, 1);
    }
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
        release_res_traced(rt, it, op->span);
        kvm_quota_abort(rt, it);
        item_fail(op, it, KVMESH_ECLOSED,
                  "the runtime closed while the put waited for storage members");
    }
}

static void place_item(kvm_op_t *op, struct kvm_item *it)
{
    if (it->finished)
        return;
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
        item_finish(op, it);
        return;
    }
    if (!late && place_park(op, it))
        return;
    place_fail(op, it, late, "");
}

/* `it` got fewer replicas than it wants: releases what it holds and fails it. */
static void place_fail(kvm_op_t *op, struct kvm_item *it, bool late, const char *why)
{
    uint32_t got = it->n_res;
    release_res_traced(op->rt, it, op->span);
    kvm_quota_abort(op->rt, it);
    if (late || atomic_load(&op->abandoned)) {
        item_fail(op, it, KVMESH_ETIMEDOUT,
                  "deadline passed after placing %u of %u replicas; the put was not applied "
                  "(owners slow or unreachable; retry)%s%s",
                  got, it->want, op->lasterr[0] ? "; last error: " : "", op->lasterr);
        return;
    }
    char pin[400];
    if (kvm_place_pin_failed(op->rt, op, it, got, it->want, pin, sizeof(pin))) {
        item_fail(op, it, KVMESH_EUNAVAILABLE, "%s", pin);
        return;
    }
    int rc = it->rc && it->rc != KVMESH_ECONN && it->rc != KVMESH_ETIMEDOUT ? it->rc
                                                                            : KVMESH_EUNAVAILABLE;
    item_fail(op, it, rc,
              "placed %u of %u replicas of a %" PRIu64 "-byte object (%zu live members%s)%s%s%s",
              got, it->want, it->len, op->rt->n_members, op->hard_pin ? ", hard pin" : "", why,
              op->lasterr[0] ? "; last error: " : "", op->lasterr);
}

static void place_reserved(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    place_item(op, it);
}

/* ---- lookups ------------------------------------------------------------------------------- */

void kvm_ops_fill_access(kvm_rt_t *rt, struct kvm_item *it)
{
    kvm_route_t *r = &it->route;
    /* Order: local first, then healthy remotes, quarantined owners last. */
    kvm_hot_replica_t reps[KVM_MAX_REPLICAS];
    struct kvm_access acc[KVM_MAX_REPLICAS];
    uint32_t n = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (uint32_t i = 0; i < r->n_replicas; i++) {
            const kvm_hot_replica_t *rep = &r->replicas[i];
            bool local = kvm_id128_equal(&rep->owner, &rt->self.id);
            bool suspect = !local && kvm_member_is_suspect(rt, &rep->owner);
            int want_pass = local ? 0 : suspect ? 2 : 1;
            if (want_pass != pass)
                continue;
            struct kvm_access a = {.local = local, .suspect = suspect};
            if (local) {
                for (uint32_t s = 0; s < rt->n_segs; s++)
                    if (rt->segs[s].seg && rt->segs[s].seg->id == rep->segment) {
                        a.known = true;
                        a.seg_read_token = rt->segs[s].read_token;
                    }
            } else {
                const struct kvm_member *m = kvm_member_find(rt, &rep->owner);
                a.unseen = !m && !kvm_member_ever_seen(rt, &rep->owner);
                for (uint32_t s = 0; m && s < m->n_segs; s++)
                    if (m->segs[s].id == rep->segment) {
                        a.known = true;
                        a.seg_read_token = m->segs[s].read_token;
                        a.data_addr = m->data_addr;
                    }
            }
            reps[n] = *rep;
            acc[n++] = a;
        }
    }
    memcpy(r->replicas, reps, n * sizeof(reps[0]));
    memcpy(it->acc, acc, n * sizeof(acc[0]));
    for (uint32_t i = 0; i < n; i++)
        if (acc[i].known) {
            hit_record(rt, &reps[i]);
            break;
        }
}

struct item_ctx {
    kvm_op_t *op;
    struct kvm_item *it;
    struct obs_span *sp; /* the route call's control.* span; NULL when untraced */
    int stage;           /* OBS_CPSTAGE_* of the route call (-1: not counted) */
    route_cost_t cost;   /* its round trips, counted into op_round_trips_total by ictx_free */
};

/* A route call's context; with a traced op it also starts the call's span `name` (a child of
 * the request's span), ended by ictx_free with the call's result. */
static struct item_ctx *ictx_named(kvm_op_t *op, struct kvm_item *it, const char *name)
{
    struct item_ctx *c = malloc(sizeof(*c));
    if (c) {
        c->op = op;
        c->it = it;
        c->sp = NULL;
        c->stage = -1;
        c->cost.rounds = 0;
        if (op->span && name && obs_span_sampled(op->span)) {
            struct obs_span *s = malloc(sizeof(*s));
            if (s)
                c->sp = kvm_span_begin(op->rt, op->span, false, name, s);
            if (!c->sp)
                free(s);
        }
    }
    return c;
}

static struct item_ctx *ictx(kvm_op_t *op, struct kvm_item *it)
{
    return ictx_named(op, it, NULL);
}

static void ictx_free(struct item_ctx *c, int rc)
{
    if (!c)
        return;
    if (c->stage >= 0)
        KVM_CP_COUNT(c->op, op_round_trips_total, (unsigned)c->stage, c->cost.rounds);
    if (c->sp) {
        if (rc == KVMESH_ENOENT) /* a lookup miss is an answer, not a failure */
            obs_span_set_int(c->sp, "kvmesh.found", 0);
        kvm_span_finish(c->sp, rc == KVMESH_ENOENT ? 0 : rc);
        free(c->sp);
    }
    free(c);
}

static void looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    ictx_free(c, rc);
    if (rc == 0 && r)
        kvm_hint_put(op->rt, r);
    else if (rc == KVMESH_ENOENT)
        kvm_hint_drop(op->rt, &it->ident);
    if (rc == 0 && r && !kvm_route_is_tombstone(r)) {
        if (kvm_route_copy(&it->route, r) != 0) {
            item_fail(op, it, KVMESH_ENOMEM, "out of memory");
            return;
        }
        it->have_route = true;
        kvm_ops_fill_access(op->rt, it);
        it->rc = 0;
        item_finish(op, it);
    } else if (rc == 0 || rc == KVMESH_ENOENT) {
        it->rc = KVMESH_ENOENT;
        item_finish(op, it);
    } else {
        item_fail(op, it, rc, "route lookup failed: %s", kvmesh_strerror(rc));
    }
}

static void start_lookup(kvm_op_t *op, struct kvm_item *it, route_lookup_cb cb)
{
    struct item_ctx *c = ictx_named(op, it, "control.route_lookup");
    if (c)
        c->stage = OBS_CPSTAGE_ROUTE_LOOKUP;
    struct obs_span *saved = kvm_trace_scope_enter(c ? c->sp : NULL);
    int rc = c ? route_lookup_costed(op->rt->route, &it->ident, cb, c, &c->cost) : KVMESH_ENOMEM;
    kvm_trace_scope_leave(saved);
    if (rc) {
        ictx_free(c, rc);
        item_fail(op, it, rc, "route lookup could not start: %s", kvmesh_strerror(rc));
    }
}

/* ---- publish -------------------------------------------------------------------------------- */

static void publish_cas(kvm_op_t *op, struct kvm_item *it);
static void published(void *arg, int rc, const kvm_route_t *r);

/*
 * After an indeterminate CAS (the primary applied it, mirroring did not complete), the exact
 * route lookup settles it: our content op is there => the write is published; the route we
 * meant to replace is still there (or the key is still absent) => it did not apply, and the
 * same reservations are published again; anything else (another writer came after) => it may
 * have applied and been replaced, so the replicas may be gone: indeterminate stays the answer.
 */
static void indet_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    if (rc == 0 && r && kvm_op_id_equal(&r->content_op, &it->pub_op)) {
        published(c, 0, r); /* frees c */
        return;
    }
    ictx_free(c, rc);
    bool unchanged =
        (rc == KVMESH_ENOENT && !it->have_route) ||
        (rc == 0 && r && it->have_route && kvm_route_version_equal(&r->version, &it->cur.version));
    if (unchanged && kvm_deadline_left_ms(op->deadline_ms) > 0) {
        publish_cas(op, it);
        return;
    }
    if (it->rc && it->rc != KVMESH_ETIMEDOUT && it->rc != KVMESH_EINDETERMINATE) {
        /* a quota put whose CAS failed outright after its claim (quota_settle_wanted) */
        item_fail(op, it, it->rc,
                  "route update failed after the quota claim (%s) and could not be published "
                  "again in time; the operation is left to reconciliation: read the key back or "
                  "retry the put",
                  kvmesh_strerror(it->rc));
        return;
    }
    if (it->rc == KVMESH_ETIMEDOUT) { /* settling a CAS whose answer was lost */
        item_fail(op, it, KVMESH_ETIMEDOUT,
                  "route update did not complete (deadline exceeded); the put may have been "
                  "applied: read the key back or retry the put");
        return;
    }
    item_fail(op, it, KVMESH_EINDETERMINATE,
              "route publication is indeterminate; the put may have been applied (and since "
              "replaced); read the key back or retry the put");
}

/* Whether a failed route CAS is known not to have been applied: an answer that refused it.
 * Anything else (timeout, lost connection, indeterminate mirroring, an authority that went
 * unavailable while the update was in flight, a metadata error after the transaction was sent)
 * may have been applied. */
static bool cas_refused(int rc)
{
    return kvm_cas_refused(rc); /* store/repair_plan.c: shared with the handoff and the simulator */
}

/* cold_write_through: the item's answer once its cold copy committed (or did not). */
static void durable_done(kvm_op_t *op, struct kvm_item *it, int rc, const char *msg)
{
    if (rc) {
        item_fail(op, it, rc, "%s", msg);
        return;
    }
    item_finish(op, it);
}

/* Tenant quota: a route CAS that failed outright (neither refused nor possibly applied) after
 * the item's claim may have been made — EmbeddedWrh: the primary claimed and then could not
 * apply (it lost the shard, its route service stayed unavailable); MetadataOnly: the writer
 * claimed and the metadata CAS failed. Left there, the operation stays PUBLISHING: charged,
 * locked (further writes answer EAGAIN) and degraded until reconciliation. While the deadline
 * allows, the writer settles it itself with the reservations it still holds: an exact lookup
 * re-resolves the shard's current primary, a route carrying our content op is published, an
 * unchanged predecessor is published again with the same content op and publish token
 * (indet_looked_up -> publish_cas: a claim-carrying CAS, which the current primary claims
 * again PUBLISHING -> PUBLISHING with its generation and token, or, after the writer's own
 * claim, a plain CAS whose version finalize's replay claim records). */
static bool quota_claim_made(const struct kvm_item *it)
{
    const struct kvm_qitem *q = it->q;
    return q && (q->state == KVM_Q_CLAIMED ||
                 (q->state == KVM_Q_RESERVED && q->cas_claim_sent && !q->cas_claim_off));
}

static bool quota_settle_wanted(kvm_op_t *op, struct kvm_item *it, int rc, bool time_left)
{
    return quota_claim_made(it) && !cas_refused(rc) && rc != KVMESH_EINDETERMINATE &&
           rc != KVMESH_ETIMEDOUT && time_left && ++it->indet_tries <= STORE_INDET_RETRIES &&
           op->rt->route;
}

static void publish_ok(kvm_op_t *op, struct kvm_item *it, const kvm_route_t *r)
{
    kvm_rt_t *rt = op->rt;
    obs_count(rt->metrics, replicas_published_total, OBS_OUTCOME_OK, OBS_NONE, it->n_res);
    kvm_hint_put(rt, r);
    for (uint32_t i = 0; i < it->n_res; i++)
        commit_res(rt, it, i, op->span);
    kvm_cold_published(rt, r);             /* offload of the new value */
    kvm_cold_reclaim_settle(rt, it, true); /* the old value's cold copy */
    if (it->have_route && !kvm_route_is_tombstone(&it->cur))
        release_obsolete(rt, &it->cur, r);
    kvm_route_free(&it->route);
    if (kvm_route_copy(&it->route, r) == 0)
        it->have_route = true;
    it->rc = 0;
    if (kvm_cold_durable_wait(rt, op, it, r, durable_done))
        return; /* cold_write_through: acknowledged once its cold copy is usage-committed */
    item_finish(op, it);
}

static void publish_finalized(kvm_op_t *op, struct kvm_item *it, int rc)
{
    (void)rc; /* the write is published either way; a failed finalize is reconciled */
    publish_ok(op, it, &it->q->route);
}

static void published(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    ictx_free(c, rc);
    /* A republish after an indeterminate CAS that finds our own content already there (the
     * partial mirror was repaired meanwhile) is published too. */
    bool ours = rc == KVMESH_ECONFLICT && r && it->pub_op_set &&
                kvm_op_id_equal(&r->content_op, &it->pub_op);
    /* settled by a lookup after a claim-carrying CAS: a route with our op proves its claim */
    if ((rc == 0 || ours) && r && it->q && it->q->state == KVM_Q_RESERVED)
        kvm_quota_cas_claimed(op, it, KVMESH_ECONFLICT, r, NULL, 0);
    if ((rc == 0 || ours) && it->q && it->q->state == KVM_Q_CLAIMED) {
        kvm_quota_finalize(op, it, r, publish_finalized); /* tenant quota: after the CAS */
        return;
    }
    if (rc == 0 || ours) {
        publish_ok(op, it, r);
        return;
    }
    bool time_left = kvm_deadline_left_ms(op->deadline_ms) > 0;
    if (rc == KVMESH_ECONFLICT && !time_left) {
        kvm_cold_reclaim_settle(rt, it, false);
        release_res(rt, it); /* a conflict is definite: this update was not applied */
        item_fail(op, it, KVMESH_ETIMEDOUT,
                  "deadline passed while retrying the route update after conflicts; the put "
                  "was not applied (retry the put)");
        return;
    }
    if (rc == KVMESH_ECONFLICT) { /* the authority's current route: the next expectation */
        if (r)
            kvm_hint_put(rt, r);
        else
            kvm_hint_drop(rt, &it->ident);
    }
    if (rc == KVMESH_ECONFLICT && ++it->tries <= STORE_CAS_RETRIES) {
        kvm_route_free(&it->cur);
        it->have_route = false;
        if (r) {
            if (kvm_route_copy(&it->cur, r) != 0) {
                release_res(rt, it);
                item_fail(op, it, KVMESH_ENOMEM, "out of memory");
                return;
            }
            it->have_route = true;
        }
        publish_cas(op, it);
        return;
    }
    if (rc == KVMESH_EINDETERMINATE && time_left && ++it->indet_tries <= STORE_INDET_RETRIES) {
        /* Maybe published: keep the reservations and settle it by an exact lookup. */
        start_lookup(op, it, indet_looked_up);
        return;
    }
    if (rc == KVMESH_ETIMEDOUT && time_left && it->pub_op_set &&
        ++it->indet_tries <= STORE_INDET_RETRIES) {
        /* The CAS's answer was lost (e.g. a primary that died: the put no longer looks the
         * route up first, and the lookup is what refreshes the shard view): settled like an
         * indeterminate CAS, by an exact lookup that finds our content op or the unchanged
         * route; a republish carries the same content op, so it applies at most once. */
        it->rc = KVMESH_ETIMEDOUT;
        start_lookup(op, it, indet_looked_up);
        return;
    }
    if (quota_settle_wanted(op, it, rc, time_left)) {
        it->rc = rc; /* the final answer if it cannot be published again */
        start_lookup(op, it, indet_looked_up);
        return;
    }
    if (rc == KVMESH_EINDETERMINATE) {
        obs_count(rt->metrics, replicas_published_total, OBS_OUTCOME_ERROR, OBS_NONE, it->n_res);
        /* Maybe published: keep the reservations; their TTL expiry asks the route. */
        item_fail(op, it, rc,
                  "route publication is indeterminate; the put may have been applied "
                  "(repair pending); read the key back or retry the put");
        return;
    }
    if (!cas_refused(rc)) {
        obs_count(rt->metrics, replicas_published_total, OBS_OUTCOME_ERROR, OBS_NONE, it->n_res);
        /* The update may have reached the authority: the route may reference the reserved
         * space, so it is not released here; the owner's reservation expiry asks the route
         * (exact lookup) before it frees anything (the chaos harness's netem-timeout-unreadable
         * finding: released slots under a lost CAS reply left a key unreadable). */
        item_fail(op, it, rc,
                  "route update did not complete (%s); the put may have been applied: read "
                  "the key back or retry the put",
                  kvmesh_strerror(rc));
        return;
    }
    obs_count(rt->metrics, replicas_published_total, OBS_OUTCOME_ERROR, OBS_NONE, it->n_res);
    kvm_cold_reclaim_settle(rt, it, false);
    if (quota_claim_made(it) && rc != KVMESH_ECONFLICT && !it->q->is_delete) {
        /* Refused after a claim, but not by a newer route: the predecessor may still be current
         * and the reconciler may replay this put onto its reservations (docs/tenancy.md
         * "Replaying a put"), so they are not released here; the owners keep them while the
         * operation is PUBLISHING and free them once it is settled (held_op.h). A conflict
         * proves the predecessor replaced (versions only grow): no replay can apply. */
        item_fail(op, it, rc,
                  "route publication refused after the quota claim (%s); the operation is left "
                  "to reconciliation",
                  kvmesh_strerror(rc));
        return;
    }
    release_res(rt, it);
    item_fail(op, it, rc, "route publication failed (the put was not applied): %s",
              kvmesh_strerror(rc));
}

static void publish_cas_now(kvm_op_t *op, struct kvm_item *it);

static void publish_claimed(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) { /* e.g. ECANCELED: the reservation expired and was aborted: no route CAS */
        release_res(op->rt, it);
        kvm_quota_abort(op->rt, it); /* still PENDING: release the charge now */
        item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    int fault = kvm_quota_test_fault(op->rt); /* test-only: the CAS fails after the claim */
    struct item_ctx *c = fault ? ictx_named(op, it, NULL) : NULL;
    if (c) {
        published(c, kvm_errf(fault, "test fault: route CAS failed after the claim"), NULL);
        return;
    }
    publish_cas_now(op, it);
}

/* Tenant quota: the claim (PENDING -> PUBLISHING) is made here, immediately before the first
 * route CAS of this item. A conflict retry is the same publication and needs no new claim: the
 * version the CAS finally returns is recorded by finalize's replay claim when it differs. */
static void publish_cas(kvm_op_t *op, struct kvm_item *it)
{
    if (kvm_quota_cas_claim_wanted(op, it)) { /* EmbeddedWrh: the primary claims in its CAS */
        it->pub_op = it->q->content_op;
        it->pub_op_set = true;
        publish_cas_now(op, it);
        return;
    }
    if (it->q && it->q->state == KVM_Q_RESERVED) {
        it->pub_op = it->q->content_op;
        it->pub_op_set = true;
        kvm_route_version_t expected = it->have_route ? it->cur.version : KVM_ROUTE_VERSION_NONE;
        kvm_quota_claim(op, it, &expected, publish_claimed);
        return;
    }
    publish_cas_now(op, it);
}

static void publish_gated(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        release_res(op->rt, it);
        item_fail(op, it, rc, "%s (the put was not applied)", kvmesh_last_error());
        return;
    }
    publish_cas_now(op, it);
}

/* The answer of a route CAS that carried the quota claim (EmbeddedWrh): the claim's outcome
 * first (quota.c), then the CAS's as for any publication; a primary that cannot claim sends
 * the item back through the writer's own claim. */
static void published_claim(void *arg, int rc, const kvm_route_t *r, const uint8_t *reply,
                            size_t reply_len)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_quota_cas_claimed(op, it, rc, r, reply, reply_len);
    if (rc == KVMESH_ENOTSUP) { /* nothing claimed, nothing applied */
        ictx_free(c, 0);
        publish_cas(op, it);
        return;
    }
    if (rc == KVMESH_ECANCELED) { /* the reservation was aborted: the CAS was not applied */
        ictx_free(c, rc);
        kvm_cold_reclaim_settle(op->rt, it, false);
        release_res(op->rt, it);
        item_fail(op, it, rc,
                  "quota claim at the route primary refused: the reservation was "
                  "aborted (expired); the put was not applied");
        return;
    }
    published(c, rc, r);
}

/* A route CAS that carries the item's quota claim (put or remove), answered to cb. */
static int cas_with_claim(kvm_op_t *op, struct kvm_item *it, const kvm_route_version_t *expected,
                          const kvm_route_t *next, route_cas_claim_cb cb, struct item_ctx *c)
{
    static _Thread_local uint8_t blob[ROUTE_CLAIM_MAX];
    size_t n = 0;
    int rc = kvm_quota_cas_claim_blob(op, it, blob, sizeof(blob), &n);
    return rc ? rc : route_cas_claim(op->rt->route, expected, next, blob, n, cb, c, &c->cost);
}

static void publish_cas_now(kvm_op_t *op, struct kvm_item *it)
{
    kvm_rt_t *rt = op->rt;
    if (kvm_cold_reclaim_gate(rt, op, it, publish_gated))
        return; /* the old value's cold copy gets its reclaim record first */
    kvm_route_t next;
    kvm_route_init(&next);
    int rc = kvm_ident_copy(&next.ident, &it->ident);
    if (rc) {
        release_res(rt, it);
        item_fail(op, it, rc, "out of memory");
        return;
    }
    if (!it->pub_op_set) {
        it->pub_op = kvm_rt_next_op_id(rt);
        it->pub_op_set = true;
    }
    next.content_op = it->pub_op;
    if (it->have_route && kvm_op_id_is_valid(&it->cur.content_op))
        next.predecessor_op = it->cur.content_op;
    next.length = it->len;
    next.checksum = it->checksum;
    next.tomb = KVM_TOMB_NONE;
    for (uint32_t i = 0; i < it->n_res; i++)
        next.replicas[next.n_replicas++] = (kvm_hot_replica_t){.owner = it->res[i].owner.id,
                                                               .segment = it->res[i].seg,
                                                               .offset = it->res[i].offset,
                                                               .length = it->len,
                                                               .checksum = it->checksum};
    rc = kvm_cold_backing_for(rt, &next); /* PendingOffload when the cold tier takes it */
    if (rc) {                             /* cold_write_through and no device takes it: no CAS */
        kvm_route_free(&next);
        kvm_cold_reclaim_settle(rt, it, false);
        release_res(rt, it);
        item_fail(op, it, rc, "%s (the put was not applied)", kvmesh_last_error());
        return;
    }
    kvm_route_version_t expected = it->have_route ? it->cur.version : KVM_ROUTE_VERSION_NONE;
    struct item_ctx *c = ictx_named(op, it, "control.route_cas");
    if (c)
        c->stage = OBS_CPSTAGE_ROUTE_CAS;
    struct obs_span *saved = kvm_trace_scope_enter(c ? c->sp : NULL);
    if (c && kvm_quota_cas_claim_wanted(op, it))
        rc = cas_with_claim(op, it, &expected, &next, published_claim, c);
    else
        rc = c ? route_cas_costed(rt->route, &expected, &next, published, c, &c->cost)
               : KVMESH_ENOMEM;
    kvm_trace_scope_leave(saved);
    kvm_route_free(&next);
    if (rc) {
        ictx_free(c, rc);
        release_res(rt, it);
        item_fail(op, it, rc, "route CAS could not start: %s", kvmesh_last_error());
    }
}

static void publish_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    ictx_free(c, rc);
    if (rc != 0 && rc != KVMESH_ENOENT) {
        release_res(op->rt, it);
        item_fail(op, it, rc,
                  "route lookup before publication failed (the put was not applied): %s",
                  kvmesh_strerror(rc));
        return;
    }
    if (rc == 0 && r) {
        if (kvm_route_copy(&it->cur, r) != 0) {
            release_res(op->rt, it);
            item_fail(op, it, KVMESH_ENOMEM, "out of memory");
            return;
        }
        it->have_route = true;
    }
    it->tries = 0;
    publish_cas(op, it);
}

/* A put's publication. Without tenant quota the route CAS goes out at once, expecting the
 * version of this runtime's route hint for the key (none: absent): the fenced primary confirms
 * or refuses it, and a refusal carries the current route, from which the CAS is retried
 * (published). One exchange instead of lookup + CAS whenever the hint is current. With quota
 * the claim needs the current version first (quota.c), so the route is looked up. */
static void publish_start(kvm_op_t *op, struct kvm_item *it)
{
    if (it->q) {
        start_lookup(op, it, publish_looked_up);
        return;
    }
    it->have_route = kvm_hint_get(op->rt, &it->ident, &it->cur);
    it->tries = 0;
    publish_cas(op, it);
}

/* ---- remove ------------------------------------------------------------------------------- */

static void tomb_finalized(void *arg, int rc, const kvm_route_t *r)
{
    (void)arg, (void)rc, (void)r; /* best effort: a pending tombstone reads as absent too */
}

static void remove_cas(kvm_op_t *op, struct kvm_item *it);

static void remove_finalized(kvm_op_t *op, struct kvm_item *it, int rc)
{
    (void)rc; /* the tombstone is published; a failed finalize is reconciled */
    it->rc = 0;
    item_finish(op, it);
}

static void removed(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    ictx_free(c, rc);
    if (rc == 0 && it->q && it->q->state == KVM_Q_CLAIMED) {
        /* tenant quota: refund by finalize; the tombstone stays PENDING, without a purge
         * deadline, so that the route version stays the one the accounting row records */
        release_obsolete(rt, &it->cur, NULL);
        kvm_cold_reclaim_settle(rt, it, true); /* the removed value's cold copy */
        kvm_quota_finalize(op, it, r, remove_finalized);
        return;
    }
    kvm_hint_drop(rt, &it->ident); /* (the finalize below changes the version again) */
    if (rc == 0) {
        release_obsolete(rt, &it->cur, NULL);
        kvm_cold_reclaim_settle(rt, it, true); /* the removed value's cold copy */
        /* No quota accounting to wait for: finalize the tombstone at once (best effort). */
        kvm_route_t fin;
        kvm_route_init(&fin);
        if (kvm_route_copy(&fin, r) == 0) {
            fin.tomb = KVM_TOMB_FINALIZED;
            fin.retain_until_ms = kvm_rt_tomb_deadline(rt);
            route_cas(rt->route, &r->version, &fin, tomb_finalized, NULL);
        }
        kvm_route_free(&fin);
        it->rc = 0;
        item_finish(op, it);
        return;
    }
    bool time_left = kvm_deadline_left_ms(op->deadline_ms) > 0;
    if (rc == KVMESH_ECONFLICT && !time_left) {
        kvm_cold_reclaim_settle(rt, it, false);
        item_fail(op, it, KVMESH_ETIMEDOUT,
                  "deadline passed while retrying the tombstone after conflicts; the remove was "
                  "not applied (retry the remove)");
        return;
    }
    if (rc == KVMESH_ECONFLICT && ++it->tries <= STORE_CAS_RETRIES) {
        kvm_route_free(&it->cur);
        if (!r || kvm_route_is_tombstone(r)) {
            kvm_cold_reclaim_settle(rt, it, false); /* someone else removed it */
            it->rc = KVMESH_ENOENT;
            item_finish(op, it);
            return;
        }
        if (kvm_route_copy(&it->cur, r) != 0) {
            item_fail(op, it, KVMESH_ENOMEM, "out of memory");
            return;
        }
        remove_cas(op, it);
        return;
    }
    if (!cas_refused(rc))
        item_fail(op, it, rc,
                  "tombstone update did not complete (%s); the remove may have been applied: "
                  "retry the remove",
                  kvmesh_strerror(rc));
    else {
        kvm_cold_reclaim_settle(rt, it, false);
        item_fail(op, it, rc, "tombstone publication failed (the remove was not applied): %s",
                  kvmesh_strerror(rc));
    }
}

static void remove_cas_now(kvm_op_t *op, struct kvm_item *it);

static void remove_claimed(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        kvm_quota_abort(op->rt, it);
        item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    remove_cas_now(op, it);
}

static void remove_cas(kvm_op_t *op, struct kvm_item *it)
{
    if (kvm_quota_cas_claim_wanted(op, it)) { /* EmbeddedWrh: the primary claims in its CAS */
        remove_cas_now(op, it);
        return;
    }
    if (it->q && it->q->state == KVM_Q_RESERVED) {
        kvm_quota_claim(op, it, &it->cur.version, remove_claimed); /* just before the CAS */
        return;
    }
    remove_cas_now(op, it);
}

static void remove_reserved(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    remove_cas(op, it);
}

static void remove_gated(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        item_fail(op, it, rc, "%s (the remove was not applied)", kvmesh_last_error());
        return;
    }
    remove_cas_now(op, it);
}

/* The answer of a tombstone CAS that carried the quota claim (EmbeddedWrh), as
 * published_claim for puts. */
static void removed_claim(void *arg, int rc, const kvm_route_t *r, const uint8_t *reply,
                          size_t reply_len)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_quota_cas_claimed(op, it, rc, r, reply, reply_len);
    if (rc == KVMESH_ENOTSUP) { /* nothing claimed, nothing applied */
        ictx_free(c, 0);
        remove_cas(op, it);
        return;
    }
    if (rc == KVMESH_ECANCELED) { /* the reservation was aborted: the CAS was not applied */
        ictx_free(c, rc);
        kvm_cold_reclaim_settle(op->rt, it, false);
        item_fail(op, it, rc,
                  "quota claim at the route primary refused: the reservation was "
                  "aborted (expired); the remove was not applied");
        return;
    }
    removed(c, rc, r);
}

static void remove_cas_now(kvm_op_t *op, struct kvm_item *it)
{
    if (kvm_cold_reclaim_gate(op->rt, op, it, remove_gated))
        return; /* the removed value's cold copy gets its reclaim record first */
    kvm_route_t next;
    kvm_route_init(&next);
    int rc = kvm_ident_copy(&next.ident, &it->ident);
    if (!rc) {
        next.content_op = it->q ? it->q->content_op : kvm_rt_next_op_id(op->rt);
        next.predecessor_op = it->cur.content_op;
        next.tomb = KVM_TOMB_PENDING;
        /* purged at its deadline even if its finalize CAS fails; with accounting the finalize
         * records it (docs/tenancy.md "Purging a quota tenant's tombstones") */
        next.retain_until_ms = kvm_rt_tomb_deadline(op->rt);
        struct item_ctx *c = ictx_named(op, it, "control.route_cas");
        if (c)
            c->stage = OBS_CPSTAGE_ROUTE_CAS;
        struct obs_span *saved = kvm_trace_scope_enter(c ? c->sp : NULL);
        if (c && kvm_quota_cas_claim_wanted(op, it))
            rc = cas_with_claim(op, it, &it->cur.version, &next, removed_claim, c);
        else
            rc = c ? route_cas_costed(op->rt->route, &it->cur.version, &next, removed, c, &c->cost)
                   : KVMESH_ENOMEM;
        kvm_trace_scope_leave(saved);
        if (rc)
            ictx_free(c, rc);
    }
    kvm_route_free(&next);
    if (rc)
        item_fail(op, it, rc, "tombstone CAS could not start: %s", kvmesh_strerror(rc));
}

static void remove_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    ictx_free(c, rc);
    if (rc == KVMESH_ENOENT || (rc == 0 && kvm_route_is_tombstone(r))) {
        it->rc = KVMESH_ENOENT;
        item_finish(op, it);
        return;
    }
    if (rc) {
        item_fail(op, it, rc, "route lookup failed (the remove was not applied): %s",
                  kvmesh_strerror(rc));
        return;
    }
    if (kvm_route_copy(&it->cur, r) != 0) {
        item_fail(op, it, KVMESH_ENOMEM, "out of memory");
        return;
    }
    it->have_route = true;
    it->tries = 0;
    if (!it->q && kvm_quota_applies(op->rt, &it->ident)) {
        kvm_quota_del_reserve(op, it, &it->cur, remove_reserved); /* the refund's reservation */
        return;
    }
    remove_cas(op, it);
}

/* ---- drain handoff ------------------------------------------------------------------------- */

static void handoff_start(kvm_op_t *op, struct kvm_item *it);

static void handed_off(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    ictx_free(c, rc);
    (void)r;
    kvm_hint_drop(rt, &it->ident);
    enum kvm_handoff_step step = kvm_handoff_outcome(rc, &it->tries, STORE_CAS_RETRIES);
    if (step == KVM_HANDOFF_PUBLISHED) {
        commit_res(rt, it, 0, NULL);
        release_replica_of(rt, &it->ident, &it->moving);
        it->rc = 0;
        item_finish(op, it);
    } else if (step == KVM_HANDOFF_RETRY) {
        handoff_start(op, it);
    } else if (step == KVM_HANDOFF_KEEP) {
        /* may have been applied: the new replica is kept (its reservation expiry asks the route) */
        item_fail(op, it, rc, "handoff publication did not complete (%s); it may have been applied",
                  kvmesh_strerror(rc));
    } else {
        release_res(rt, it);
        item_fail(op, it, rc, "handoff CAS failed: %s", kvmesh_strerror(rc));
    }
}

static void handoff_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    ictx_free(c, rc);
    if (rc != 0 && rc != KVMESH_ENOENT) {
        release_res(rt, it);
        item_fail(op, it, rc, "route lookup for handoff failed: %s", kvmesh_strerror(rc));
        return;
    }
    /* the handoff's decisions are shared with the simulator (store/repair_plan.h) */
    kvm_hot_replica_t nr = {
        .owner = it->res[0].owner.id, .segment = it->res[0].seg, .offset = it->res[0].offset};
    kvm_route_t next;
    kvm_route_init(&next);
    int plan = kvm_handoff_next(rc == KVMESH_ENOENT ? NULL : r, &it->moving, &nr, &next);
    if (plan == 2) { /* our earlier attempt applied (answered as a conflict): published */
        commit_res(rt, it, 0, NULL);
        release_replica_of(rt, &it->ident, &it->moving);
        it->rc = 0;
        item_finish(op, it);
        return;
    }
    if (plan == 1) {
        /* Nothing references the replica any more: drop the copy and the original. */
        it->superseded = true;
        release_res(rt, it);
        release_replica_of(rt, &it->ident, &it->moving);
        it->rc = 0;
        item_finish(op, it);
        return;
    }
    if (plan != 0) {
        kvm_route_free(&next);
        release_res(rt, it);
        item_fail(op, it, KVMESH_ENOMEM, "out of memory");
        return;
    }
    struct item_ctx *c2 = ictx(op, it);
    rc = c2 ? route_cas(rt->route, &r->version, &next, handed_off, c2) : KVMESH_ENOMEM;
    kvm_route_free(&next);
    if (rc) {
        free(c2);
        release_res(rt, it);
        item_fail(op, it, rc, "handoff CAS could not start");
    }
}

static void handoff_start(kvm_op_t *op, struct kvm_item *it)
{
    start_lookup(op, it, handoff_looked_up);
}

/* ---- members ------------------------------------------------------------------------------- */

static void members_copy(kvm_op_t *op)
{
    kvm_rt_t *rt = op->rt;
    op->members_n = rt->n_members;
    for (size_t i = 0; i < rt->n_members && i < op->members_cap; i++) {
        const struct kvm_member *m = &rt->members[i];
        kvmesh_member_info_t *o = &op->members[i];
        memset(o, 0, sizeof(*o));
        snprintf(o->id, sizeof(o->id), "%s", m->idhex);
        o->epoch = m->rt.epoch;
        snprintf(o->address, sizeof(o->address), "%s", m->rpc_addr);
        snprintf(o->state, sizeof(o->state), "%s", kvm_member_state_name(m->state));
        o->weight = m->weight;
        o->capacity_bytes = m->capacity;
        o->used_bytes = kvm_id128_equal(&m->rt.id, &rt->self.id) ? rt->used : m->used;
    }
}

static void state_published(kvm_rt_t *rt, int rc, const char *err)
{
    kvm_op_t *op = rt->state_op;
    rt->state_op = NULL;
    if (!op)
        return;
    if (rc)
        kvm_op_fail(op, NULL, rc, "member record update failed: %s", err);
    kvm_op_complete(op, rc);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

void kvm_ops_run(kvm_op_t *op)
{
    kvm_rt_t *rt = op->rt;
    switch (op->type) {
    case KVM_OP_PLACE: {
        for (size_t i = 0; i < op->n; i++)
            op->items[i].want = op->replicas;
        bool batched = kvm_quota_put_batch(op, place_reserved); /* all-or-nothing reserve */
        rsv_begin(); /* remote reservations: one batch per owner (rsv_flush) */
        for (size_t i = 0; i < op->n; i++) {
            struct kvm_item *it = &op->items[i];
            if (!kvm_quota_applies(rt, &it->ident))
                place_item(op, it);
            else if (!batched)
                kvm_quota_put_reserve(op, it, place_reserved); /* before any data transfer */
        }
        rsv_flush();
        return;
    }
    case KVM_OP_PUBLISH:
        route_batch_begin(rt->route); /* the CAS items: one batch per shard primary */
        for (size_t i = 0; i < op->n; i++)
            publish_start(op, &op->items[i]);
        route_batch_end(rt->route);
        return;
    case KVM_OP_ABORT:
        for (size_t i = 0; i < op->n; i++) {
            release_res_traced(rt, &op->items[i], op->span);
            kvm_quota_abort(rt, &op->items[i]); /* the transfer failed: before any CAS */
            item_finish(op, &op->items[i]);
        }
        return;
    case KVM_OP_LOOKUP:
        route_batch_begin(rt->route); /* the lookups: one batch per authority */
        for (size_t i = 0; i < op->n; i++)
            start_lookup(op, &op->items[i], looked_up);
        route_batch_end(rt->route);
        return;
    case KVM_OP_REMOVE:
        route_batch_begin(rt->route);
        for (size_t i = 0; i < op->n; i++)
            start_lookup(op, &op->items[i], remove_looked_up);
        route_batch_end(rt->route);
        return;
    case KVM_OP_HANDOFF:
        for (size_t i = 0; i < op->n; i++)
            handoff_start(op, &op->items[i]);
        return;
    case KVM_OP_REPORT:
        kvm_member_quarantine(rt, &op->bad_owner);
        kvm_op_complete(op, 0);
        return;
    case KVM_OP_HITS:
        kvm_op_complete(op, 0);
        return;
    case KVM_OP_MEMBERS:
        members_copy(op);
        kvm_op_complete(op, 0);
        return;
    case KVM_OP_STATS: {
        kvm_owner_stats(rt, op->stats);
        op->stats->generation = rt->generation;
        op->stats->n_members = rt->n_members;
        meta_stats_t ms;
        meta_get_stats(rt->meta, &ms);
        op->stats->meta_calls = ms.gets + ms.ranges + ms.txns + ms.lease_grants +
                                ms.lease_keepalives + ms.lease_revokes + ms.lease_ttls;
        route_stats_t rs;
        route_get_stats(rt->route, &rs);
        op->stats->route_meta_calls = rs.meta_calls;
        kvm_op_complete(op, 0);
        return;
    }
    case KVM_OP_DRAIN_BEGIN:
    case KVM_OP_DRAIN_END:
        if (rt->state_op) {
            kvm_op_fail(op, NULL, KVMESH_EAGAIN, "another drain step is in flight");
            kvm_op_complete(op, KVMESH_EAGAIN);
            return;
        }
        if (op->type == KVM_OP_DRAIN_BEGIN) {
            rt->admin_drained = false; /* leaving: an activate request no longer applies */
            if (rt->state == KVM_MS_ACTIVE)
                kvm_member_set_state(rt, KVM_MS_DRAINING);
        } else {
            kvm_member_set_state(rt, KVM_MS_GONE);
        }
        rt->state_op = op;
        kvm_member_publish(rt, state_published);
        return;
    case KVM_OP_DRAIN_LIST:
        op->list_n = kvm_owner_list(rt, op->seg_arg, &op->list_cursor, op->list, op->list_ident,
                                    op->list_tokens, op->list_cap);
        kvm_op_complete(op, 0);
        return;
    case KVM_OP_SEG_ADD:
    case KVM_OP_SEG_RETIRE:
    case KVM_OP_SEG_REMOVE: {
        int rc = op->type == KVM_OP_SEG_ADD ? kvm_owner_add_segment(rt, op->seg_arg, &op->seg_arg)
                 : op->type == KVM_OP_SEG_RETIRE ? kvm_owner_retire_segment(rt, op->seg_arg)
                                                 : kvm_owner_remove_segment(rt, op->seg_arg);
        if (rc || op->type == KVM_OP_SEG_RETIRE || rt->state_op) {
            if (rc)
                kvm_op_fail(op, NULL, rc, "%s", kvmesh_last_error());
            kvm_op_complete(op, rc);
            if (!rc && rt->state_op == NULL)
                kvm_member_publish(rt, NULL);
            return;
        }
        rt->state_op = op; /* completes once the record lists the new segment set */
        kvm_member_publish(rt, state_published);
        return;
    }
    }
    (void)item_index;
}
