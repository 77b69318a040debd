/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_reclaim.c — the cold reclaim record (an obsolete materialized locator on its way out):
 * invariants, codec, and the decisions of plan, cancel, backend-deleted, reschedule and the
 * metadata-atomic handoff keyed by (cold op, reclaim op).
 *
 *   PLANNED --exact lookup + backend delete--> BACKEND_DELETED --handoff--> USAGE_RELEASED
 *
 * The handoff is one transaction over the reclaim record, the cold op and its device:
 *   op ROUTE_COMMITTED            -> RELEASED, reserved -= length (reservation consumed);
 *   op USAGE_COMMITTED            -> RELEASED, used -= length;
 *   op PAYLOAD_WRITTEN/RECLAIMING -> RELEASED, reserved -= length;
 *   op already RELEASED           -> nothing (another path released it: outcome NONE);
 *   reclaim already USAGE_RELEASED: the existing result, nothing written.
 * The reclaim reaches USAGE_RELEASED only in that transaction, so neither a repeat nor a second
 * reclaim of the same cold op can release it twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold_int.h"
#include "core/util.h"

int cold_reclaim_check(const cold_reclaim_t *r)
{
    int rc = kvm_cold_reclaim_validate(&r->r);
    if (rc)
        return rc;
    if (r->r.locator_len > COLD_LOCATOR_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: locator longer than a backend's");
    if (r->outcome > COLD_OP_STATE_MAX ||
        (r->r.state != KVM_RECLAIM_USAGE_RELEASED && r->outcome != COLD_OP_NONE))
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: outcome set before USAGE_RELEASED");
    if (r->ident_len == 0 || r->ident_len > KVM_IDENT_ENC_MAX_LEN)
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: no object identity");
    return 0;
}

int cold_reclaim_encode(const cold_reclaim_t *x, uint8_t *buf, size_t cap, size_t *len)
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    cw_header(&w, COLD_SCHEMA_RECLAIM);
    cw_opid(&w, &x->r.reclaim_op);
    cw_opid(&w, &x->r.content_op);
    cw_opid(&w, &x->r.cold_op);
    cw_id128(&w, &x->r.tier);
    kvm_wr_lp16le(&w, x->r.locator, x->r.locator_len);
    kvm_wr_u64le(&w, x->r.length);
    kvm_wr_u8(&w, (uint8_t)x->r.state);
    kvm_wr_u8(&w, (uint8_t)x->outcome);
    kvm_wr_u64le(&w, x->deadline_ms);
    kvm_wr_u32le(&w, x->attempts);
    kvm_wr_lp16le(&w, x->ident, x->ident_len);
    return kvm_wr_finish(&w, len);
}

int cold_reclaim_decode(const uint8_t *buf, size_t len, cold_reclaim_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    cr_header(&r, COLD_SCHEMA_RECLAIM);
    cr_opid(&r, &out->r.reclaim_op);
    cr_opid(&r, &out->r.content_op);
    cr_opid(&r, &out->r.cold_op);
    cr_id128(&r, &out->r.tier);
    cr_lp16(&r, out->r.locator, KVM_COLD_LOCATOR_MAX_LEN, &out->r.locator_len);
    out->r.length = kvm_rd_u64le(&r);
    uint8_t st = kvm_rd_u8(&r), oc = kvm_rd_u8(&r);
    out->deadline_ms = kvm_rd_u64le(&r);
    out->attempts = kvm_rd_u32le(&r);
    cr_lp16(&r, out->ident, KVM_IDENT_ENC_MAX_LEN, &out->ident_len);
    if (!kvm_rd_end(&r) || st < KVM_RECLAIM_PLANNED || st > KVM_RECLAIM_USAGE_RELEASED) {
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "cold reclaim record: malformed (%zu bytes)", len);
    }
    out->r.state = (kvm_reclaim_state_t)st;
    out->outcome = (enum cold_op_state)oc;
    if (cold_reclaim_check(out) != 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "cold reclaim record: %s", msg);
    }
    return 0;
}

/* ---- decisions ------------------------------------------------------------------------------ */

static void done(cold_decision_t *d, int rc, bool repeated)
{
    d->done = true;
    d->rc = rc;
    d->repeated = repeated;
}

static void decide_handoff(cold_call_t *call, cold_decision_t *d)
{
    cold_t *c = call->c;
    const cold_reclaim_t *x = &call->rec;
    bool bug = (c->cfg.test_bugs & COLD_BUG_DOUBLE_RELEASE) != 0;
    if (x->r.state == KVM_RECLAIM_PLANNED) {
        done(d, kvm_errf(KVMESH_ECONFLICT, "cold reclaim: backend delete not done yet"), false);
        return;
    }
    if (!call->found[CR_OP] && c->cfg.purge_after_ms) {
        /* the op was RELEASED (by another reclaim) and purged since: nothing left to release */
        if (x->r.state == KVM_RECLAIM_USAGE_RELEASED) {
            done(d, 0, true);
            return;
        }
        call->nrec = *x;
        kvm_cold_reclaim_set_state(&call->nrec.r, KVM_RECLAIM_USAGE_RELEASED);
        call->nrec.outcome = COLD_OP_NONE;
        call->nrec.deadline_ms = cold_purge_deadline(c);
        d->put[CR_REC] = true;
        return;
    }
    if (!call->found[CR_OP] || !call->found[CR_DEV]) {
        done(d, kvm_errf(KVMESH_ECORRUPT, "cold reclaim: its cold op or device record is missing"),
             false);
        return;
    }
    const cold_op_t *o = &call->op;
    if (x->r.state == KVM_RECLAIM_USAGE_RELEASED || o->state == COLD_OP_RELEASED) {
        if (bug && o->state == COLD_OP_RELEASED) {
            /* broken on purpose: the repeat releases the op's bytes once more */
            call->ndev = call->dev;
            int rc =
                cold_device_account(&call->ndev, o->released_from, COLD_OP_RELEASED, o->length);
            if (rc) {
                done(d, rc, false);
                return;
            }
            d->put[CR_DEV] = true;
        }
        if (x->r.state == KVM_RECLAIM_USAGE_RELEASED) {
            if (!d->put[CR_DEV])
                done(d, 0, true);
            return;
        }
        call->nrec = *x;
        kvm_cold_reclaim_set_state(&call->nrec.r, KVM_RECLAIM_USAGE_RELEASED);
        call->nrec.outcome = COLD_OP_NONE;
        call->nrec.deadline_ms = cold_purge_deadline(c);
        d->put[CR_REC] = true;
        return;
    }
    switch (o->state) {
    case COLD_OP_PAYLOAD_WRITTEN:
    case COLD_OP_RECLAIMING:
    case COLD_OP_ROUTE_COMMITTED:
    case COLD_OP_USAGE_COMMITTED:
        break;
    default:
        done(d,
             kvm_errf(KVMESH_ECONFLICT, "cold reclaim: its cold op is %s (never materialized)",
                      cold_op_state_name(o->state)),
             false);
        return;
    }
    call->nop = *o;
    call->ndev = call->dev;
    int rc = cold_device_account(&call->ndev, o->state, COLD_OP_RELEASED, o->length);
    if (rc) {
        done(d, rc, false);
        return;
    }
    if (call->nop.state == COLD_OP_PAYLOAD_WRITTEN)
        cold_op_set_state(&call->nop, COLD_OP_RECLAIMING);
    cold_op_set_state(&call->nop, COLD_OP_RELEASED);
    call->nop.released_by = x->r.reclaim_op;
    call->nop.deadline_ms = cold_purge_deadline(c);
    call->nrec = *x;
    kvm_cold_reclaim_set_state(&call->nrec.r, KVM_RECLAIM_USAGE_RELEASED);
    call->nrec.outcome = o->state;
    call->nrec.deadline_ms = cold_purge_deadline(c);
    d->put[CR_OP] = d->put[CR_DEV] = d->put[CR_REC] = true;
}

void cold_decide_rec(cold_call_t *call, cold_decision_t *d)
{
    cold_t *c = call->c;
    const cold_reclaim_t *x = &call->rec;
    if (call->kind == CK_REC_PLAN) {
        if (call->found[CR_REC]) {
            bool same = kvm_op_id_equal(&x->r.cold_op, &call->q_rec.r.cold_op);
            done(d,
                 same ? 0
                      : kvm_errf(KVMESH_ECONFLICT,
                                 "cold reclaim id already planned for another cold op"),
                 same);
            return;
        }
        call->nrec = call->q_rec;
        call->nrec.deadline_ms = cold_deadline(c, 0);
        d->put[CR_REC] = true;
        return;
    }
    if (!call->found[CR_REC]) {
        if (call->kind == CK_REC_CANCEL || call->kind == CK_REC_PURGE)
            done(d, 0, true);
        else
            done(d, kvm_errf(KVMESH_ENOENT, "cold reclaim: no record"), false);
        return;
    }
    switch (call->kind) {
    case CK_REC_GET:
        done(d, 0, false);
        return;
    case CK_REC_CANCEL:
        if (x->r.state != KVM_RECLAIM_PLANNED) {
            done(d,
                 kvm_errf(KVMESH_ECONFLICT, "cold reclaim: %s, cannot cancel",
                          kvm_reclaim_state_name(x->r.state)),
                 false);
            return;
        }
        d->del[CR_REC] = true;
        return;
    case CK_REC_DELETED:
        if (x->r.state != KVM_RECLAIM_PLANNED) {
            done(d, 0, true);
            return;
        }
        call->nrec = *x;
        kvm_cold_reclaim_set_state(&call->nrec.r, KVM_RECLAIM_BACKEND_DELETED);
        call->nrec.deadline_ms = cold_deadline(c, 0);
        d->put[CR_REC] = true;
        return;
    case CK_REC_RESCHED:
        if (x->r.state == KVM_RECLAIM_USAGE_RELEASED) {
            done(d, 0, true);
            return;
        }
        call->nrec = *x;
        call->nrec.attempts = x->attempts + 1;
        call->nrec.deadline_ms = cold_deadline(c, call->nrec.attempts);
        d->put[CR_REC] = true;
        return;
    case CK_REC_HANDOFF:
        decide_handoff(call, d);
        return;
    case CK_REC_PURGE: /* the record and its "reclaim-done" due entry (nrec stays empty) */
        if (x->r.state != KVM_RECLAIM_USAGE_RELEASED || !x->deadline_ms ||
            x->deadline_ms > env_wall_ms(c->env)) {
            done(d, 0, true);
            return;
        }
        d->del[CR_REC] = true;
        return;
    default:
        KVM_ASSERT(!"not a reclaim call");
    }
}

/* ---- calls ---------------------------------------------------------------------------------- */

int cold_rec_call(cold_t *c, cold_ck_t kind, const kvm_op_id_t *reclaim_op, cold_reclaim_cb cb,
                  void *arg)
{
    if (!c || !reclaim_op || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold reclaim call: NULL argument");
    cold_call_t *call = cold_call_new(c, kind, 1u << CR_REC);
    if (!call)
        return KVMESH_ENOMEM;
    int rc = cold_key_rec(c, call->k[CR_REC], reclaim_op);
    if (rc) {
        free(call);
        return rc;
    }
    call->rec_cb = cb;
    call->arg = arg;
    return cold_call_start(call); /* a handoff learns its op and device from the record */
}

int cold_reclaim_plan(cold_t *c, const kvm_op_id_t *reclaim_op, const kvm_ident_t *ident,
                      const kvm_cold_backing_t *mat, cold_reclaim_cb cb, void *arg)
{
    if (!c || !reclaim_op || !ident || !mat || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_reclaim_plan: NULL argument");
    if (mat->kind != KVM_COLD_MATERIALIZED)
        return kvm_errf(KVMESH_EINVAL, "cold_reclaim_plan: the backing is not materialized");
    if (ident->enc_len == 0 || ident->enc_len > KVM_IDENT_ENC_MAX_LEN)
        return kvm_errf(KVMESH_EINVAL, "cold_reclaim_plan: bad identity");
    cold_call_t *call = cold_call_new(c, CK_REC_PLAN, 1u << CR_REC);
    if (!call)
        return KVMESH_ENOMEM;
    kvm_cold_reclaim_plan(&call->q_rec.r, reclaim_op, mat);
    memcpy(call->q_rec.ident, ident->enc, ident->enc_len);
    call->q_rec.ident_len = (uint16_t)ident->enc_len;
    int rc = cold_reclaim_check(&call->q_rec);
    if (rc == 0)
        rc = cold_key_rec(c, call->k[CR_REC], reclaim_op);
    if (rc) {
        free(call);
        return rc;
    }
    call->rec_cb = cb;
    call->arg = arg;
    return cold_call_start(call);
}

int cold_reclaim_cancel(cold_t *c, const kvm_op_id_t *reclaim_op, cold_reclaim_cb cb, void *arg)
{
    return cold_rec_call(c, CK_REC_CANCEL, reclaim_op, cb, arg);
}
