/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_item.c — the bottom of the loop side of object operations (ops_int.h): the per-item state
 * machine and an item's end, the COMMIT / RELEASE notifications to owners, read hits, and the
 * route-call contexts and lookups the steps above share. Calls no other ops*.c file.
 *
 * Per item of an op: every step is a kvm_item_set_state on the table below; the item ends
 * exactly once, DONE or FAILED (kvm_item_done / kvm_item_fail), and the op completes when
 * every item ended (kvm_op_item_done).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/cas_lane.h"
#include "store/get_inline.h"
#include "store/ops_int.h"
#include "store/proto.h"
#include "store/slot_batch.h"
#include "store/slot_core.h"
#include "store/store.h"

/* ---- item states ----------------------------------------------------------------------------- */

#define S(x) (1u << KVM_ITEM_##x)

/* The legal edges, by source state (docs/store.md "Item states"); a self-edge is a repeated
 * step (the next placement round, the gate checked again after its record was written). */
static const uint32_t item_edges[KVM_ITEM_N_STATES] = {
    [KVM_ITEM_NEW] = S(QUOTA_RESERVING) | S(PLACING) | S(LOOKING_UP) | S(COLD_GATE) | S(DONE),
    [KVM_ITEM_QUOTA_RESERVING] = S(PLACING) | S(CLAIMING) | S(COLD_GATE) | S(FAILED),
    [KVM_ITEM_PLACING] = S(PLACING) | S(PARKED) | S(DONE) | S(FAILED),
    [KVM_ITEM_PARKED] = S(PLACING) | S(FAILED),
    [KVM_ITEM_LOOKING_UP] =
        S(QUOTA_RESERVING) | S(CLAIMING) | S(COLD_GATE) | S(CAS) | S(DONE) | S(FAILED),
    /* CAS: only the test fault failing the CAS after the claim (kvm_quota_test_fail_after_claim) */
    [KVM_ITEM_CLAIMING] = S(COLD_GATE) | S(CAS) | S(FAILED),
    [KVM_ITEM_COLD_GATE] = S(COLD_GATE) | S(CAS) | S(FAILED),
    /* LOOKING_UP: a handoff's retry; CLAIMING / COLD_GATE: a put's or remove's retry */
    [KVM_ITEM_CAS] = S(LOOKING_UP) | S(CLAIMING) | S(COLD_GATE) | S(SETTLING) | S(FINALIZING) |
                     S(DURABLE_WAIT) | S(DONE) | S(FAILED),
    [KVM_ITEM_SETTLING] =
        S(CLAIMING) | S(COLD_GATE) | S(FINALIZING) | S(DURABLE_WAIT) | S(DONE) | S(FAILED),
    [KVM_ITEM_FINALIZING] = S(DURABLE_WAIT) | S(DONE),
    [KVM_ITEM_DURABLE_WAIT] = S(DONE) | S(FAILED),
    [KVM_ITEM_DONE] = 0,
    [KVM_ITEM_FAILED] = 0,
};

#undef S

static const char *const item_state_names[KVM_ITEM_N_STATES] = {
    [KVM_ITEM_NEW] = "new",
    [KVM_ITEM_QUOTA_RESERVING] = "quota_reserving",
    [KVM_ITEM_PLACING] = "placing",
    [KVM_ITEM_PARKED] = "parked",
    [KVM_ITEM_LOOKING_UP] = "looking_up",
    [KVM_ITEM_CLAIMING] = "claiming",
    [KVM_ITEM_COLD_GATE] = "cold_gate",
    [KVM_ITEM_CAS] = "cas",
    [KVM_ITEM_SETTLING] = "settling",
    [KVM_ITEM_FINALIZING] = "finalizing",
    [KVM_ITEM_DURABLE_WAIT] = "durable_wait",
    [KVM_ITEM_DONE] = "done",
    [KVM_ITEM_FAILED] = "failed",
};

bool kvm_item_edge_legal(enum kvm_item_state from, enum kvm_item_state to)
{
    if ((unsigned)from >= KVM_ITEM_N_STATES || (unsigned)to >= KVM_ITEM_N_STATES)
        return false;
    return (item_edges[from] >> to) & 1u;
}

const char *kvm_item_state_name(enum kvm_item_state s)
{
    return (unsigned)s < KVM_ITEM_N_STATES ? item_state_names[s] : "?";
}

void kvm_item_set_state(struct kvm_item *it, enum kvm_item_state to)
{
    bool legal = kvm_item_edge_legal(it->state, to);
    if (!legal)
        fprintf(stderr, "kvmesh: illegal item state change %s -> %s\n",
                kvm_item_state_name(it->state), kvm_item_state_name(to));
    KVM_ASSERT(legal);
    it->state = to;
}

/* Before an op's last item ends (and its caller wakes), the notifications its items queued for
 * owners (slot_batch.c) leave: the caller's next request reaches each owner after them. */
static void item_end(kvm_op_t *op)
{
    if (op->pending == 1)
        kvm_slot_batch_flush(op->rt);
    kvm_op_item_done(op);
}

/* A put's or remove's item ends: its conflict retries are counted, and the publication lane of
 * its key passes on (cas_lane.h: the next item is resumed by kvm_cas_lane_run after item_end). */
static void item_ending(kvm_op_t *op, struct kvm_item *it)
{
    kvm_rt_t *rt = op->rt;
    if (op->type == KVM_OP_PUBLISH || op->type == KVM_OP_REMOVE)
        kvm_cas_lane_count_retries(rt,
                                   op->cp_op                   ? (unsigned)op->cp_op - 1u
                                   : op->type == KVM_OP_REMOVE ? OBS_OP_REMOVE
                                                               : OBS_OP_PUT,
                                   it->tries);
    kvm_cas_lane_leave(rt, it);
}

void kvm_item_done(kvm_op_t *op, struct kvm_item *it)
{
    kvm_rt_t *rt = op->rt;
    kvm_item_set_state(it, KVM_ITEM_DONE); /* (asserts it had not ended) */
    item_ending(op, it);
    item_end(op); /* (op and it may be gone after this) */
    kvm_cas_lane_run(rt);
}

void kvm_item_fail(kvm_op_t *op, struct kvm_item *it, int rc, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kvm_rt_t *rt = op->rt;
    kvm_op_fail(op, it, rc, "%s", msg);
    kvm_item_set_state(it, KVM_ITEM_FAILED);
    item_ending(op, it);
    item_end(op); /* (op and it may be gone after this) */
    kvm_cas_lane_run(rt);
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
    if (m) /* (none: the owner is gone, and its memory with it) */
        kvm_slot_notify(rt, type, m, seg, off, note, parent); /* batched in a route group */
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
void kvm_ops_release_replica_of(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep)
{
    slot_note_t n = object_note(id, rep);
    notify_slot(rt, STORE_RPC_RELEASE, &rep->owner, rep->segment, rep->offset, &n);
}

void kvm_ops_commit_res(kvm_rt_t *rt, struct kvm_item *it, uint32_t i, struct obs_span *parent)
{
    slot_note_t n = res_note(it, i);
    notify_slot_traced(rt, STORE_RPC_COMMIT, &it->res[i].owner.id, it->res[i].seg,
                       it->res[i].offset, &n, parent);
}

void kvm_ops_release_res_traced(kvm_rt_t *rt, struct kvm_item *it, struct obs_span *parent)
{
    for (uint32_t i = 0; i < it->n_res; i++) {
        slot_note_t n = res_note(it, i);
        notify_slot_traced(rt, STORE_RPC_RELEASE, &it->res[i].owner.id, it->res[i].seg,
                           it->res[i].offset, &n, parent);
    }
    it->n_res = 0;
}

void kvm_ops_release_res(kvm_rt_t *rt, struct kvm_item *it)
{
    kvm_ops_release_res_traced(rt, it, NULL);
}

/* Releases the replicas of `old` that `now` does not list. */
void kvm_ops_release_obsolete(kvm_rt_t *rt, const kvm_route_t *old, const kvm_route_t *now)
{
    for (uint32_t i = 0; i < old->n_replicas; i++)
        if (!now || kvm_route_find_replica(now, &old->replicas[i]) < 0)
            kvm_ops_release_replica_of(rt, &old->ident, &old->replicas[i]);
}

/* ---- hits ------------------------------------------------------------------------------------ */

struct kvm_hitbuf {
    kvm_runtime_id_t owner;
    store_hit_msg_t msg;
};

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

/* ---- access information of a looked-up route ------------------------------------------------ */

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

/* ---- route calls ------------------------------------------------------------------------------
 */

struct item_ctx *kvm_ictx_named(kvm_op_t *op, struct kvm_item *it, const char *name)
{
    kvm_rt_t *rt = op->rt;
    struct item_ctx *c = rt ? rt->ictx_spare : NULL;
    if (c) {
        rt->ictx_spare = c->next_spare;
        rt->n_ictx_spare--;
    } else {
        c = malloc(sizeof(*c));
    }
    if (c) {
        c->rt = rt;
        c->next_spare = NULL;
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

struct item_ctx *kvm_ictx(kvm_op_t *op, struct kvm_item *it)
{
    return kvm_ictx_named(op, it, NULL);
}

void kvm_ictx_free(struct item_ctx *c, int rc)
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
    kvm_rt_t *rt = c->rt;
    if (rt && rt->n_ictx_spare < STORE_ICTX_SPARE_MAX && !atomic_load(&rt->closing)) {
        c->next_spare = rt->ictx_spare;
        rt->ictx_spare = c;
        rt->n_ictx_spare++;
        return;
    }
    free(c);
}

void kvm_ictx_spare_free(kvm_rt_t *rt)
{
    while (rt->ictx_spare) {
        struct item_ctx *c = rt->ictx_spare;
        rt->ictx_spare = c->next_spare;
        free(c);
    }
    rt->n_ictx_spare = 0;
}

void kvm_ops_start_lookup(kvm_op_t *op, struct kvm_item *it, enum kvm_item_state state,
                          route_lookup_cb cb)
{
    KVM_ASSERT(state == KVM_ITEM_LOOKING_UP || state == KVM_ITEM_SETTLING);
    kvm_item_set_state(it, state); /* (before the call: its answer may come synchronously) */
    struct item_ctx *c = kvm_ictx_named(op, it, "control.route_lookup");
    if (c)
        c->stage = OBS_CPSTAGE_ROUTE_LOOKUP;
    struct obs_span *saved = kvm_trace_scope_enter(c ? c->sp : NULL);
    int rc = c ? route_lookup_inline(op->rt->route, &it->ident, cb, c, &c->cost,
                                     kvm_get_inline_sink(op, it, state))
               : KVMESH_ENOMEM;
    kvm_trace_scope_leave(saved);
    if (rc) {
        kvm_ictx_free(c, rc);
        kvm_item_fail(op, it, rc, "route lookup could not start: %s", kvmesh_strerror(rc));
    }
}
