/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_op.c — the cold capacity operation: its state machine (the one set_state, the diagram in
 * cold.h), its record's invariants and codec, and the decisions of the op calls (plan, advance,
 * get) that the engine (cold_tx.c) runs as metadata transactions together with the device's
 * accounting (cold_device_account).
 *
 * Idempotency: every call is keyed by the cold op id. A plan finds an existing record and returns
 * it; an advance to the state the op is already in is a repeat that writes nothing; an advance
 * the diagram does not allow from the stored state is refused with KVMESH_ECONFLICT and the view
 * carries the stored record, from which the caller resumes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold_int.h"
#include "core/util.h"

const char *cold_op_state_name(enum cold_op_state s)
{
    switch (s) {
    case COLD_OP_NONE:
        return "none";
    case COLD_OP_PLANNED:
        return "planned";
    case COLD_OP_RESERVED:
        return "reserved";
    case COLD_OP_PAYLOAD_WRITTEN:
        return "payload-written";
    case COLD_OP_ROUTE_COMMITTED:
        return "route-committed";
    case COLD_OP_USAGE_COMMITTED:
        return "usage-committed";
    case COLD_OP_RECLAIMING:
        return "reclaiming";
    case COLD_OP_RELEASED:
        return "released";
    }
    return "?";
}

bool cold_op_transition_ok(enum cold_op_state from, enum cold_op_state to)
{
    switch (from) {
    case COLD_OP_NONE:
        return to == COLD_OP_PLANNED;
    case COLD_OP_PLANNED:
        return to == COLD_OP_RESERVED || to == COLD_OP_RELEASED;
    case COLD_OP_RESERVED:
        return to == COLD_OP_PAYLOAD_WRITTEN || to == COLD_OP_RELEASED;
    case COLD_OP_PAYLOAD_WRITTEN:
        return to == COLD_OP_ROUTE_COMMITTED || to == COLD_OP_RECLAIMING;
    case COLD_OP_ROUTE_COMMITTED:
        return to == COLD_OP_USAGE_COMMITTED || to == COLD_OP_RELEASED;
    case COLD_OP_USAGE_COMMITTED:
        return to == COLD_OP_RELEASED;
    case COLD_OP_RECLAIMING:
        return to == COLD_OP_RELEASED;
    case COLD_OP_RELEASED:
        return false;
    }
    return false;
}

char cold_op_state_holds(enum cold_op_state s)
{
    switch (s) {
    case COLD_OP_RESERVED:
    case COLD_OP_PAYLOAD_WRITTEN:
    case COLD_OP_ROUTE_COMMITTED:
    case COLD_OP_RECLAIMING:
        return 'r';
    case COLD_OP_USAGE_COMMITTED:
        return 'u';
    default:
        return 0;
    }
}

void cold_op_set_state(cold_op_t *op, enum cold_op_state to)
{
    KVM_ASSERT(cold_op_transition_ok(op->state, to));
    if (to == COLD_OP_RELEASED)
        op->released_from = op->state;
    op->state = to;
}

void cold_opkey(const kvm_op_id_t *id, char out[COLD_OPKEY_CAP])
{
    kvm_op_id_fmt(id, out);
}

int cold_op_check(const cold_op_t *op)
{
    if (!kvm_op_id_is_valid(&op->id) || !kvm_op_id_is_valid(&op->content_op))
        return kvm_errf(KVMESH_ECORRUPT, "cold op: cold or content op id is not valid");
    if (kvm_op_id_equal(&op->id, &op->content_op))
        return kvm_errf(KVMESH_ECORRUPT, "cold op: cold op id equals the content op id");
    if (kvm_id128_is_nil(&op->device) || kvm_id128_is_nil(&op->owner))
        return kvm_errf(KVMESH_ECORRUPT, "cold op: nil device or owner");
    if (op->state < COLD_OP_PLANNED || op->state > COLD_OP_STATE_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "cold op: bad state %d", (int)op->state);
    bool has_loc = op->state >= COLD_OP_PAYLOAD_WRITTEN && op->state != COLD_OP_RELEASED;
    if (has_loc && (op->loc.len == 0 || op->loc.len > COLD_LOCATOR_MAX))
        return kvm_errf(KVMESH_ECORRUPT, "cold op in %s: no locator",
                        cold_op_state_name(op->state));
    if (op->loc.len > COLD_LOCATOR_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "cold op: locator too long");
    if (op->state == COLD_OP_RELEASED) {
        if (op->released_from < COLD_OP_PLANNED || op->released_from == COLD_OP_RELEASED ||
            op->released_from > COLD_OP_STATE_MAX ||
            !cold_op_transition_ok(op->released_from, COLD_OP_RELEASED))
            return kvm_errf(KVMESH_ECORRUPT, "cold op: released from an impossible state");
    } else if (op->released_from != COLD_OP_NONE) {
        return kvm_errf(KVMESH_ECORRUPT, "cold op: released_from set in %s",
                        cold_op_state_name(op->state));
    }
    if (op->ident_len == 0 || op->ident_len > KVM_IDENT_ENC_MAX_LEN)
        return kvm_errf(KVMESH_ECORRUPT, "cold op: no object identity");
    return 0;
}

int cold_op_encode(const cold_op_t *op, uint8_t *buf, size_t cap, size_t *len)
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    cw_header(&w, COLD_SCHEMA_OP);
    cw_opid(&w, &op->id);
    cw_opid(&w, &op->content_op);
    cw_id128(&w, &op->device);
    cw_id128(&w, &op->owner);
    kvm_wr_u8(&w, (uint8_t)op->state);
    kvm_wr_u8(&w, (uint8_t)op->released_from);
    cw_opid(&w, &op->released_by);
    kvm_wr_bytes(&w, op->be_id.b, COLD_OPID_LEN);
    kvm_wr_u64le(&w, op->length);
    kvm_wr_u64le(&w, op->checksum);
    kvm_wr_lp16le(&w, op->loc.b, op->loc.len);
    kvm_wr_u64le(&w, op->payload_fp);
    kvm_wr_u64le(&w, op->deadline_ms);
    kvm_wr_u32le(&w, op->attempts);
    kvm_wr_lp16le(&w, op->ident, op->ident_len);
    return kvm_wr_finish(&w, len);
}

int cold_op_decode(const uint8_t *buf, size_t len, cold_op_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    cr_header(&r, COLD_SCHEMA_OP);
    cr_opid(&r, &out->id);
    cr_opid(&r, &out->content_op);
    cr_id128(&r, &out->device);
    cr_id128(&r, &out->owner);
    uint8_t st = kvm_rd_u8(&r), rf = kvm_rd_u8(&r);
    cr_opid(&r, &out->released_by);
    kvm_rd_copy(&r, out->be_id.b, COLD_OPID_LEN);
    out->length = kvm_rd_u64le(&r);
    out->checksum = kvm_rd_u64le(&r);
    cr_lp16(&r, out->loc.b, COLD_LOCATOR_MAX, &out->loc.len);
    out->payload_fp = kvm_rd_u64le(&r);
    out->deadline_ms = kvm_rd_u64le(&r);
    out->attempts = kvm_rd_u32le(&r);
    cr_lp16(&r, out->ident, KVM_IDENT_ENC_MAX_LEN, &out->ident_len);
    if (!kvm_rd_end(&r) || st > COLD_OP_STATE_MAX || rf > COLD_OP_STATE_MAX) {
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "cold op record: malformed (%zu bytes)", len);
    }
    out->state = (enum cold_op_state)st;
    out->released_from = (enum cold_op_state)rf;
    if (cold_op_check(out) != 0) {
        memset(out, 0, sizeof(*out));
        return cold_errctx(KVMESH_EPROTO, "cold op record");
    }
    return 0;
}

/* The materialized backing an op's payload gives its route (fingerprint input). */
static uint64_t payload_fp(const cold_op_t *op, const cold_locator_t *loc)
{
    kvm_cold_backing_t b;
    kvm_cold_backing_pending(&b, &op->id, &op->content_op, &op->owner, &op->device, op->length,
                             op->checksum);
    if (kvm_cold_backing_materialize(&b, loc->b, loc->len, op->length, op->checksum) != 0)
        return 0;
    return kvm_cold_backing_fingerprint(&b);
}

static void done(cold_decision_t *d, int rc, bool repeated)
{
    d->done = true;
    d->rc = rc;
    d->repeated = repeated;
}

void cold_decide_op(cold_call_t *call, cold_decision_t *d)
{
    cold_t *c = call->c;
    char id[COLD_OPKEY_CAP];
    switch (call->kind) {
    case CK_OP_GET:
        done(d, call->found[CR_OP] ? 0 : kvm_errf(KVMESH_ENOENT, "cold op: no record"), false);
        return;
    case CK_OP_PURGE: /* the record and its "released" due entry (nop stays empty: no new one) */
        if (!call->found[CR_OP] || call->op.state != COLD_OP_RELEASED || !call->op.deadline_ms ||
            call->op.deadline_ms > env_wall_ms(c->env)) {
            done(d, 0, true);
            return;
        }
        d->del[CR_OP] = true;
        return;
    case CK_OP_PLAN: {
        const cold_op_t *q = &call->q_op;
        if (call->found[CR_OP]) {
            const cold_op_t *o = &call->op;
            bool same = kvm_op_id_equal(&o->content_op, &q->content_op) &&
                        kvm_id128_equal(&o->device, &q->device) && o->length == q->length &&
                        o->checksum == q->checksum;
            done(d,
                 same ? 0
                      : kvm_errf(KVMESH_ECONFLICT,
                                 "cold op %s already planned for another content or device",
                                 kvm_op_id_fmt(&q->id, id)),
                 same);
            return;
        }
        if (!call->found[CR_DEV]) {
            done(d,
                 kvm_errf(KVMESH_ENOENT, "cold op %s: device is not registered",
                          kvm_op_id_fmt(&q->id, id)),
                 false);
            return;
        }
        call->nop = *q;
        call->nop.state = COLD_OP_PLANNED;
        call->nop.owner = call->dev.owner;
        uint64_t a = env_rand_u64(c->env), b = env_rand_u64(c->env);
        memcpy(call->nop.be_id.b, &a, 8);
        memcpy(call->nop.be_id.b + 8, &b, 8);
        call->nop.deadline_ms = cold_deadline(c, 0);
        d->put[CR_OP] = true;
        return;
    }
    case CK_OP_ADVANCE: {
        if (!call->found[CR_OP]) {
            done(d, kvm_errf(KVMESH_ENOENT, "cold op: no record"), false);
            return;
        }
        const cold_op_t *o = &call->op;
        enum cold_op_state to = call->q_to;
        if (o->state == to) {
            done(d, 0, true);
            return;
        }
        if (!cold_op_transition_ok(o->state, to)) {
            done(d,
                 kvm_errf(KVMESH_ECONFLICT, "cold op %s is %s: -> %s is not an edge",
                          kvm_op_id_fmt(&o->id, id), cold_op_state_name(o->state),
                          cold_op_state_name(to)),
                 false);
            return;
        }
        call->nop = *o;
        if (to == COLD_OP_RESERVED) {
            if (!call->found[CR_DEV]) {
                done(d, kvm_errf(KVMESH_ENOENT, "cold op: device is not registered"), false);
                return;
            }
            if (!cold_device_fits(&call->dev, o->length)) {
                const cold_device_t *v = &call->dev;
                bool up = v->health == COLD_DEV_HEALTHY && v->schedulable &&
                          v->lifecycle == COLD_DEV_ACTIVE;
                done(d,
                     up ? kvm_errf(KVMESH_ENOSPC,
                                   "cold device full: capacity %llu, used %llu, reserved %llu, "
                                   "need %llu more",
                                   (unsigned long long)v->capacity, (unsigned long long)v->used,
                                   (unsigned long long)v->reserved, (unsigned long long)o->length)
                        : kvm_errf(KVMESH_EUNAVAILABLE, "cold device is %s, %s, %s: not placeable",
                                   cold_dev_health_name(v->health),
                                   cold_dev_lifecycle_name(v->lifecycle),
                                   v->schedulable ? "schedulable" : "unschedulable"),
                     false);
                return;
            }
        }
        if (to == COLD_OP_PAYLOAD_WRITTEN) {
            if (call->q_loc.len == 0 || call->q_loc.len > COLD_LOCATOR_MAX) {
                done(d, kvm_errf(KVMESH_EINVAL, "cold op: PAYLOAD_WRITTEN needs a locator"), false);
                return;
            }
            call->nop.loc = call->q_loc;
            call->nop.payload_fp = payload_fp(o, &call->q_loc);
        }
        if (cold_op_state_holds(o->state) != cold_op_state_holds(to)) {
            if (!call->found[CR_DEV]) {
                done(d, kvm_errf(KVMESH_ECORRUPT, "cold op: its device record is missing"), false);
                return;
            }
            call->ndev = call->dev;
            int rc = cold_device_account(&call->ndev, o->state, to, o->length);
            if (rc) {
                done(d, rc, false);
                return;
            }
            d->put[CR_DEV] = true;
        }
        cold_op_set_state(&call->nop, to);
        call->nop.deadline_ms =
            to == COLD_OP_RELEASED ? cold_purge_deadline(c) : cold_deadline(c, 0);
        d->put[CR_OP] = true;
        return;
    }
    default:
        KVM_ASSERT(!"not an op call");
    }
}

/* ---- calls ------------------------------------------------------------------------------------
 */

int cold_op_plan(cold_t *c, const cold_plan_req_t *req, cold_op_cb cb, void *arg)
{
    if (!c || !req || !req->ident || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_op_plan: NULL argument");
    cold_call_t *call = cold_call_new(c, CK_OP_PLAN, (1u << CR_OP) | (1u << CR_DEV));
    if (!call)
        return KVMESH_ENOMEM;
    cold_op_t *q = &call->q_op;
    q->id = req->cold_op;
    q->content_op = req->content_op;
    q->device = req->device;
    q->length = req->length;
    q->checksum = req->checksum;
    q->state = COLD_OP_PLANNED;
    q->owner = c->cfg.self; /* replaced by the device's owner */
    if (req->ident->enc_len == 0 || req->ident->enc_len > KVM_IDENT_ENC_MAX_LEN) {
        free(call);
        return kvm_errf(KVMESH_EINVAL, "cold_op_plan: bad identity");
    }
    memcpy(q->ident, req->ident->enc, req->ident->enc_len);
    q->ident_len = (uint16_t)req->ident->enc_len;
    int rc = cold_op_check(q);
    if (rc == 0 && (rc = cold_key_op(c, call->k[CR_OP], &q->id)) == 0)
        rc = cold_key_dev(c, call->k[CR_DEV], &q->device);
    if (rc) {
        free(call);
        return rc;
    }
    call->op_cb = cb;
    call->arg = arg;
    return cold_call_start(call);
}

int cold_op_advance(cold_t *c, const kvm_op_id_t *id, enum cold_op_state to,
                    const cold_locator_t *loc, cold_op_cb cb, void *arg)
{
    if (!c || !id || !cb || to <= COLD_OP_PLANNED || to > COLD_OP_STATE_MAX)
        return kvm_errf(KVMESH_EINVAL, "cold_op_advance: bad argument");
    if (to == COLD_OP_PAYLOAD_WRITTEN && (!loc || loc->len == 0 || loc->len > COLD_LOCATOR_MAX))
        return kvm_errf(KVMESH_EINVAL, "cold_op_advance: PAYLOAD_WRITTEN needs a locator");
    cold_call_t *call = cold_call_new(c, CK_OP_ADVANCE, 1u << CR_OP);
    if (!call)
        return KVMESH_ENOMEM;
    call->q_to = to;
    if (loc)
        call->q_loc = *loc;
    int rc = cold_key_op(c, call->k[CR_OP], id);
    if (rc) {
        free(call);
        return rc;
    }
    call->op_cb = cb;
    call->arg = arg;
    return cold_call_start(call); /* the engine learns the device from the op record */
}

static int op_read_call(cold_t *c, cold_ck_t kind, const kvm_op_id_t *id, cold_op_cb cb, void *arg)
{
    if (!c || !id || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_op_get: NULL argument");
    cold_call_t *call = cold_call_new(c, kind, 1u << CR_OP);
    if (!call)
        return KVMESH_ENOMEM;
    int rc = cold_key_op(c, call->k[CR_OP], id);
    if (rc) {
        free(call);
        return rc;
    }
    call->op_cb = cb;
    call->arg = arg;
    return cold_call_start(call);
}

int cold_op_get(cold_t *c, const kvm_op_id_t *id, cold_op_cb cb, void *arg)
{
    return op_read_call(c, CK_OP_GET, id, cb, arg);
}

int cold_op_purge(cold_t *c, const kvm_op_id_t *id, cold_op_cb cb, void *arg)
{
    return op_read_call(c, CK_OP_PURGE, id, cb, arg);
}
