/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slot_batch.c — COMMIT and RELEASE notifications to remote owners, one STORE_RPC_SLOT_BATCH
 * per owner for a group of route answers (slot_batch.h). Before, a 128-item batch put sent each
 * owner 128 COMMITs and up to 128 RELEASEs, each its own frame and socket write (and, on the
 * owner, its own read and dispatch): about a fifth of the batch's CPU.
 */
#include "store/slot_batch.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/proto.h"

struct slotb_owner {
    kvm_runtime_t rt; /* the owner (id and epoch) */
    rpc_peer *peer;
    store_slot_batch_t *b; /* owned; NULL = nothing queued */
};

/* Kept from the first group to the runtime's close (kvm_slot_batch_close), with one spare batch
 * record, so a steady stream of groups (a put's COMMIT and RELEASE) allocates neither. */
struct kvm_slotb_box {
    uint32_t n;                /* owners of the group open (0 between groups) */
    store_slot_batch_t *spare; /* owned; NULL = none: one sent record kept for the next */
    struct slotb_owner o[STORE_SLOTB_OWNERS];
};

#define STORE_SLOTB_SMALL 8 /* items of a batch encoded on the stack */

/* A batch waiting for its answer (owns b). */
struct slotb_call {
    kvm_rt_t *rt;
    kvm_runtime_t owner;
    store_slot_batch_t *b;
};

/* ---- single notifications ------------------------------------------------------------------- */

static void send_one(kvm_rt_t *rt, rpc_peer *p, uint16_t type, const store_slot_msg_t *sm,
                     struct obs_span *parent)
{
    uint8_t body[STORE_SLOT_MSG_MAX];
    size_t len = 0;
    int erc = store_slot_msg_encode(sm, body, sizeof(body), &len);
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

static uint16_t item_type(uint8_t kind)
{
    return kind == STORE_SLOT_BATCH_COMMIT ? STORE_RPC_COMMIT : STORE_RPC_RELEASE;
}

static void send_items(kvm_rt_t *rt, rpc_peer *p, const store_slot_batch_t *b)
{
    for (uint16_t i = 0; i < b->n; i++)
        send_one(rt, p, item_type(b->it[i].kind), &b->it[i].m, NULL);
}

/* ---- refusals (older owners) ---------------------------------------------------------------- */

static bool refused(const kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    uint32_t n = rt->n_slotb_refused < STORE_SLOTB_REFUSED_MAX ? rt->n_slotb_refused
                                                               : STORE_SLOTB_REFUSED_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (kvm_runtime_equal(&rt->slotb_refused[i], owner))
            return true;
    return false;
}

static void refuse(kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    if (!refused(rt, owner))
        rt->slotb_refused[rt->n_slotb_refused++ % STORE_SLOTB_REFUSED_MAX] = *owner;
}

/* ---- owners that take the batch as a notification ------------------------------------------ */

static bool takes_note(const kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    uint32_t n =
        rt->n_slotb_notes < STORE_SLOTB_NOTES_MAX ? rt->n_slotb_notes : STORE_SLOTB_NOTES_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (kvm_runtime_equal(&rt->slotb_notes[i], owner))
            return true;
    return false;
}

/* owner's answer said it takes the notification form: remembered (id and epoch; a ring, so an
 * owner pushed out is asked again with a call, which answers the same). */
static void note_taker(kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    if (!takes_note(rt, owner))
        rt->slotb_notes[rt->n_slotb_notes++ % STORE_SLOTB_NOTES_MAX] = *owner;
}

/* ---- batches -------------------------------------------------------------------------------- */

static void on_answer(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct slotb_call *c = arg;
    uint8_t flags = 0;
    if (res->status == 0 && store_slot_batch_ans_decode(res->body, res->body_len, &flags) == 0 &&
        (flags & STORE_SLOT_BATCH_TAKES_NOTE))
        note_taker(c->rt, &c->owner);    /* (a malformed answer: the call form stays) */
    if (res->status == KVMESH_ENOTSUP) { /* an older owner: the items go one by one */
        kvm_rt_t *rt = c->rt;
        refuse(rt, &c->owner);
        const struct kvm_member *m = kvm_member_find(rt, &c->owner.id);
        rpc_peer *p = m && m->rt.epoch == c->owner.epoch ? kvm_rt_peer(rt, m) : NULL;
        if (p)
            send_items(rt, p, c->b);
    }
    free(c->b);
    free(c);
}

/* A batch record for the outbox: the spare, else a new one (NULL: no memory). */
static store_slot_batch_t *batch_new(kvm_rt_t *rt)
{
    struct kvm_slotb_box *box = rt->slotb_box;
    store_slot_batch_t *b = box ? box->spare : NULL;
    if (b) {
        box->spare = NULL;
        return b;
    }
    b = malloc(sizeof(*b));
    if (b)
        rt->slotb_allocs++;
    return b;
}

/* A record whose items went (b owned): kept as the spare when there is none, else freed. */
static void batch_done(kvm_rt_t *rt, store_slot_batch_t *b)
{
    struct kvm_slotb_box *box = rt->slotb_box;
    if (box && !box->spare)
        box->spare = b;
    else
        free(b);
}

/* Sends o's queued items (one request; one item: the plain notification) and empties o. */
static void owner_send(kvm_rt_t *rt, struct slotb_owner *o)
{
    store_slot_batch_t *b = o->b;
    o->b = NULL;
    if (!b)
        return;
    if (b->n == 1) {
        send_one(rt, o->peer, item_type(b->it[0].kind), &b->it[0].m, NULL);
        batch_done(rt, b);
        return;
    }
    uint8_t small[STORE_SLOT_BATCH_LEN(STORE_SLOTB_SMALL)]; /* (a put's COMMIT and RELEASE) */
    size_t cap = STORE_SLOT_BATCH_LEN(b->n), len = 0;
    uint8_t *body = cap <= sizeof(small) ? small : malloc(cap);
    int rc = body ? store_slot_batch_encode(b, body, cap, &len) : KVMESH_ENOMEM;
    KVM_ASSERT(rc == 0 || rc == KVMESH_ENOMEM); /* the items were checked as they came */
    struct slotb_call *c = NULL;
    if (rc == 0 && takes_note(rt, &o->rt)) { /* no answer: best effort, as each item's own */
        struct rpc_msg msg = {.type = STORE_RPC_SLOT_BATCH, .body = body, .body_len = len};
        rc = rpc_notify(o->peer, &msg, NULL, NULL); /* (the body is copied) */
    } else if (rc == 0 && !(c = malloc(sizeof(*c)))) {
        rc = KVMESH_ENOMEM;
    } else if (rc == 0) {
        *c = (struct slotb_call){rt, o->rt, b};
        struct rpc_msg msg = {.type = STORE_RPC_SLOT_BATCH,
                              .body = body,
                              .body_len = len,
                              .timeout_ms = STORE_SLOTB_TIMEOUT_MS};
        rc = rpc_call(o->peer, &msg, on_answer, c, NULL); /* (the body is copied) */
    }
    if (body != small)
        free(body);
    if (rc != 0) { /* not sent (queue full, no memory): as single notifications */
        free(c);
        send_items(rt, o->peer, b);
    }
    if (rc != 0 || !c)
        batch_done(rt, b); /* (a call's batch is its answer's: on_answer frees it) */
}

void kvm_slot_batch_flush(kvm_rt_t *rt)
{
    if (!rt) /* an op without a runtime (the item state machine's unit tests) */
        return;
    struct kvm_slotb_box *box = rt->slotb_box;
    if (!box)
        return;
    for (uint32_t i = 0; i < box->n; i++)
        owner_send(rt, &box->o[i]);
}

static struct slotb_owner *owner_slot(kvm_rt_t *rt, const kvm_runtime_t *owner)
{
    struct kvm_slotb_box *box = rt->slotb_box;
    for (uint32_t i = 0; box && i < box->n; i++)
        if (kvm_runtime_equal(&box->o[i].rt, owner))
            return &box->o[i];
    return NULL;
}

/* Queues sm for o (a new owner entry when o is NULL); false when it must go alone. */
static bool enqueue(kvm_rt_t *rt, struct slotb_owner *o, const kvm_runtime_t *owner, rpc_peer *p,
                    uint8_t kind, const store_slot_msg_t *sm)
{
    if (!o) {
        if (!rt->slotb_box) {
            if (!(rt->slotb_box = calloc(1, sizeof(*rt->slotb_box))))
                return false;
            rt->slotb_allocs++;
        }
        if (rt->slotb_box->n >= STORE_SLOTB_OWNERS)
            return false;
        o = &rt->slotb_box->o[rt->slotb_box->n++];
        *o = (struct slotb_owner){.rt = *owner, .peer = p};
    }
    if (!o->b) {
        if (!(o->b = batch_new(rt)))
            return false;
        o->b->n = 0;
        o->b->target_epoch = owner->epoch;
    }
    KVM_ASSERT(sm->target_epoch == o->b->target_epoch);
    o->b->it[o->b->n].kind = kind;
    o->b->it[o->b->n].m = *sm;
    if (++o->b->n == STORE_SLOT_BATCH_MAX)
        owner_send(rt, o); /* full: this one goes now, the next item starts another */
    return true;
}

void kvm_slot_notify(kvm_rt_t *rt, uint16_t type, const struct kvm_member *owner, uint64_t seg,
                     uint64_t off, const slot_note_t *note, struct obs_span *parent)
{
    rpc_peer *p = kvm_rt_peer(rt, owner);
    if (!p)
        return; /* owner gone: its memory went with it; a restarted incarnation has new segments */
    store_slot_msg_t sm = {.target_epoch = owner->rt.epoch, .seg = seg, .offset = off};
    if (note) {
        sm.has = (uint8_t)note->has;
        sm.token = note->has & SLOT_NOTE_TOKEN ? note->token : 0;
        sm.ident_hash = note->has & SLOT_NOTE_OBJECT ? note->ident_hash : 0;
        sm.len = note->has & SLOT_NOTE_OBJECT ? note->len : 0;
    }
    struct slotb_owner *o = owner_slot(rt, &owner->rt);
    bool traced = rt->tracer && parent && obs_span_sampled(parent);
    if (rt->slotb_depth > 0 && !traced && !refused(rt, &owner->rt) &&
        enqueue(rt, o, &owner->rt, p,
                type == STORE_RPC_COMMIT ? STORE_SLOT_BATCH_COMMIT : STORE_SLOT_BATCH_RELEASE, &sm))
        return;
    if (o)
        owner_send(rt, o); /* what was queued for this owner goes first */
    send_one(rt, p, type, &sm, parent);
}

/* ---- the group ------------------------------------------------------------------------------ */

void kvm_slot_batch_begin(kvm_rt_t *rt)
{
    rt->slotb_depth++;
}

void kvm_slot_batch_end(kvm_rt_t *rt)
{
    KVM_ASSERT(rt->slotb_depth > 0);
    if (--rt->slotb_depth)
        return;
    kvm_slot_batch_flush(rt);
    if (rt->slotb_box) /* kept (with its spare record) for the next group */
        rt->slotb_box->n = 0;
}

void kvm_slot_batch_close(kvm_rt_t *rt)
{
    kvm_slot_batch_flush(rt); /* best effort, as the group's end would have sent them */
    kvm_slot_batch_free(rt);
    rt->slotb_depth = 0; /* no end will come: later messages go alone */
}

void kvm_slot_batch_free(kvm_rt_t *rt)
{
    if (rt->slotb_box)
        free(rt->slotb_box->spare);
    free(rt->slotb_box);
    rt->slotb_box = NULL;
}

static void group_begin(void *ctx)
{
    kvm_slot_batch_begin(ctx);
}

static void group_end(void *ctx)
{
    kvm_slot_batch_end(ctx);
}

void kvm_slot_batch_attach(kvm_rt_t *rt)
{
    if (rt->slotb_hooked || !rt->route)
        return;
    route_set_group_hooks(rt->route, group_begin, group_end, rt);
    rt->slotb_hooked = true;
}

/* ---- owner side ----------------------------------------------------------------------------- */

/* Applies every item of the batch in body, in order; 0 or an error (set). */
static int apply_batch(kvm_rt_t *rt, const uint8_t *body, size_t len)
{
    store_slot_batch_t *b = malloc(sizeof(*b));
    int rc = b ? store_slot_batch_decode(body, len, b) : KVMESH_ENOMEM;
    if (rc == 0 && b->target_epoch != rt->self.epoch)
        rc = kvm_errf(KVMESH_EUNAVAILABLE, "slot batch for another epoch of this runtime");
    for (uint16_t i = 0; rc == 0 && i < b->n; i++) {
        const store_slot_msg_t *m = &b->it[i].m;
        slot_note_t note = {m->has, m->token, m->ident_hash, m->len};
        rt->slotb_apply(rt, b->it[i].kind == STORE_SLOT_BATCH_COMMIT, m->seg, m->offset,
                        m->has ? &note : NULL);
    }
    free(b);
    return rc;
}

static void on_slot_batch(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    int rc = apply_batch(rt, req->body, req->body_len);
    uint8_t ans[STORE_SLOT_BATCH_ANS_LEN];
    size_t len = 0;
    struct rpc_msg m = {.type = STORE_RPC_SLOT_BATCH, .body = ans};
    if (rc == 0 && rt->slotb_serve_note) { /* (an empty answer: as an owner before the flag) */
        int erc = store_slot_batch_ans_encode(STORE_SLOT_BATCH_TAKES_NOTE, ans, sizeof(ans), &len);
        KVM_ASSERT(erc == 0);
        m.body_len = len;
    }
    if (rpc_reply_send(reply, rc, rc ? kvmesh_last_error() : NULL, len ? &m : NULL, NULL, NULL) ==
        KVMESH_EAGAIN)
        rpc_reply_drop(reply); /* the caller's call times out; its items were applied */
}

/* The notification form: the same body, no answer (a malformed or misdirected one is dropped,
 * as a single COMMIT / RELEASE notification's is). */
static void on_slot_batch_note(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    kvm_rt_t *rt = arg;
    if (rt->slotb_serve_note)
        (void)apply_batch(rt, req->body, req->body_len);
}

void kvm_slot_batch_serve(kvm_rt_t *rt, kvm_slot_apply_fn apply)
{
    KVM_ASSERT(apply != NULL);
    rt->slotb_apply = apply;
    rt->slotb_serve_note = true;
    rpc_register_handler(rt->ep, STORE_RPC_SLOT_BATCH, on_slot_batch, rt);
    rpc_register_notify_handler(rt->ep, STORE_RPC_SLOT_BATCH, on_slot_batch_note, rt);
}

void kvm_slot_batch_test_old_owner(kvm_rt_t *rt)
{
    rt->slotb_serve_note = false;
    rpc_register_notify_handler(rt->ep, STORE_RPC_SLOT_BATCH, NULL, NULL);
}

void kvm_slot_batch_test_forget(kvm_rt_t *rt)
{
    rt->n_slotb_notes = 0;
    rt->n_slotb_refused = 0;
}
