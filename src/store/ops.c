/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c — the loop side of object operations (spec "Write path", "Read path", "Delete and
 * reclaim"): kvm_ops_run dispatches an op to its steps — placement (ops_place.c), route
 * publication, tombstones and drain handoff (ops_publish.c), lookups with replica access
 * information (below, on ops_item.c's route calls) — and runs the admin ops (members, stats,
 * drain, segments). Every function runs on the loop thread; it reads only the cached membership
 * snapshot (never metadata) and reaches routes only through route.h.
 *
 * Per item of an op: each step is a state of the item's state machine (ops_item.c,
 * docs/store.md "Item states"); the item ends exactly once, DONE or FAILED, and the op completes
 * when every item ended. The files' layering: ops_int.h.
 */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "store/ops_int.h"
#include "store/quota.h"
#include "store/slot_batch.h"
#include "store/store.h"

/* ---- lookups -------------------------------------------------------------------------------- */

static void looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_ictx_free(c, rc);
    if (rc == 0 && r)
        kvm_hint_put(op->rt, r);
    else if (rc == KVMESH_ENOENT)
        kvm_hint_drop(op->rt, &it->ident);
    if (rc == 0 && r && !kvm_route_is_tombstone(r)) {
        if (kvm_item_route_take(it, &it->route, r) != 0) { /* (the item's identity borrowed) */
            kvm_item_fail(op, it, KVMESH_ENOMEM, "out of memory");
            return;
        }
        it->have_route = true;
        kvm_ops_fill_access(op->rt, it);
        it->rc = 0;
        kvm_item_done(op, it);
    } else if (rc == 0 || rc == KVMESH_ENOENT) {
        it->rc = KVMESH_ENOENT;
        kvm_item_done(op, it);
    } else {
        kvm_item_fail(op, it, rc, "route lookup failed: %s", kvmesh_strerror(rc));
    }
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
        snprintf(o->local_rpc, sizeof(o->local_rpc), "%s", m->rpc_local ? m->rpc_local : "");
        snprintf(o->host, sizeof(o->host), "%s", m->host ? m->host : "");
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
    kvm_slot_batch_attach(rt); /* owner notifications grouped with route answers (once) */
    switch (op->type) {
    case KVM_OP_PLACE:
        kvm_ops_place_run(op);
        return;
    case KVM_OP_PUBLISH:
        route_batch_begin(rt->route); /* the CAS items: one batch per shard primary */
        for (size_t i = 0; i < op->n; i++)
            kvm_ops_publish_start(op, &op->items[i]);
        route_batch_end(rt->route);
        return;
    case KVM_OP_ABORT:
        for (size_t i = 0; i < op->n; i++) {
            kvm_ops_release_res_traced(rt, &op->items[i], op->span);
            kvm_quota_abort(rt, &op->items[i]); /* the transfer failed: before any CAS */
            kvm_item_done(op, &op->items[i]);   /* NEW -> DONE */
        }
        return;
    case KVM_OP_LOOKUP:
        route_batch_begin(rt->route); /* the lookups: one batch per authority */
        for (size_t i = 0; i < op->n; i++)
            kvm_ops_start_lookup(op, &op->items[i], KVM_ITEM_LOOKING_UP, looked_up);
        route_batch_end(rt->route);
        return;
    case KVM_OP_REMOVE:
        route_batch_begin(rt->route);
        for (size_t i = 0; i < op->n; i++)
            kvm_ops_remove_start(op, &op->items[i]);
        route_batch_end(rt->route);
        return;
    case KVM_OP_HANDOFF:
        for (size_t i = 0; i < op->n; i++)
            kvm_ops_handoff_start(op, &op->items[i]);
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
}
