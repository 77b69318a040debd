/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_publish.c — route publication (spec "Write path", "Delete and reclaim"): a put's route
 * CAS (fenced, expecting the route hint's version; conflicts retried from the current route),
 * with tenant quota's claim before it and finalize after it, the cold tier's reclaim gate before
 * it and write-through wait after it, and the settling of a CAS whose outcome is indeterminate by
 * an exact lookup; a remove's tombstone CAS; a drain's handoff CAS. Reservations of a failed put
 * are released here (or by their TTL when the publication may have applied: the owner then asks
 * the route). Item states: LOOKING_UP / CLAIMING / COLD_GATE / CAS / SETTLING / FINALIZING /
 * DURABLE_WAIT -> DONE or FAILED (docs/store.md "Item states"). Loop thread only; calls
 * ops_item.c (ops_int.h), never ops.c or ops_place.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/cas_lane.h"
#include "store/cold_glue.h"
#include "store/ops_int.h"
#include "store/quota.h"
#include "store/repair_plan.h"
#include "store/slot_batch.h"
#include "store/store.h"

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
    kvm_ictx_free(c, rc);
    bool unchanged =
        (rc == KVMESH_ENOENT && !it->have_route) ||
        (rc == 0 && r && it->have_route && kvm_route_version_equal(&r->version, &it->cur.version));
    if (unchanged && kvm_deadline_left_ms(op->deadline_ms) > 0) {
        publish_cas(op, it);
        return;
    }
    if (it->rc && it->rc != KVMESH_ETIMEDOUT && it->rc != KVMESH_EINDETERMINATE) {
        /* a quota put whose CAS failed outright after its claim (quota_settle_wanted) */
        kvm_item_fail(
            op, it, it->rc,
            "route update failed after the quota claim (%s) and could not be published "
            "again in time; the operation is left to reconciliation: read the key back or "
            "retry the put",
            kvmesh_strerror(it->rc));
        return;
    }
    if (it->rc == KVMESH_ETIMEDOUT) { /* settling a CAS whose answer was lost */
        kvm_item_fail(op, it, KVMESH_ETIMEDOUT,
                      "route update did not complete (deadline exceeded); the put may have been "
                      "applied: read the key back or retry the put");
        return;
    }
    kvm_item_fail(op, it, KVMESH_EINDETERMINATE,
                  "route publication is indeterminate; the put may have been applied (and since "
                  "replaced); read the key back or retry the put");
}

/* Whether a failed route CAS is known not to have been applied: an answer that refused it
 * (EAGAIN included: the primary answers it only without applying). Anything else (timeout, lost
 * connection, indeterminate mirroring, an authority that went unavailable while the update was
 * in flight, a metadata error after the transaction was sent) may have been applied. */
static bool cas_refused(int rc)
{
    return kvm_cas_refused(rc); /* store/repair_plan.c: shared with the handoff and the simulator */
}

/* cold_write_through: the item's answer once its cold copy committed (or did not). */
static void durable_done(kvm_op_t *op, struct kvm_item *it, int rc, const char *msg)
{
    if (rc) {
        kvm_item_fail(op, it, rc, "%s", msg);
        return;
    }
    kvm_item_done(op, it);
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
    /* (EAGAIN was not applied, but "not now" is worth publishing again, as a failure is) */
    return quota_claim_made(it) && (!cas_refused(rc) || rc == KVMESH_EAGAIN) &&
           rc != KVMESH_EINDETERMINATE && rc != KVMESH_ETIMEDOUT && time_left &&
           ++it->indet_tries <= STORE_INDET_RETRIES && op->rt->route;
}

static void publish_ok(kvm_op_t *op, struct kvm_item *it, const kvm_route_t *r)
{
    kvm_rt_t *rt = op->rt;
    obs_count(rt->metrics, replicas_published_total, OBS_OUTCOME_OK, OBS_NONE, it->n_res);
    kvm_hint_put(rt, r);
    kvm_cas_lane_leave(rt, it); /* the next put of the key expects r (resumed at our end) */
    /* the new replicas' COMMITs and the old ones' RELEASEs as one group: to one owner (an
     * overwrite in place) they leave as one batch, not two notifications (slot_batch.h) */
    kvm_slot_batch_begin(rt);
    for (uint32_t i = 0; i < it->n_res; i++)
        kvm_ops_commit_res(rt, it, i, op->span);
    kvm_cold_published(rt, r);             /* offload of the new value */
    kvm_cold_reclaim_settle(rt, it, true); /* the old value's cold copy */
    if (it->have_route && !kvm_route_is_tombstone(&it->cur))
        kvm_ops_release_obsolete(rt, &it->cur, r);
    kvm_slot_batch_end(rt);
    /* kept with the item's identity borrowed (no copy of its own: kvm_item_route_take) */
    kvm_item_route_drop(it, &it->route);
    if (kvm_item_route_take(it, &it->route, r) == 0)
        it->have_route = true;
    it->rc = 0;
    if (rt->cfg.cold_write_through) /* (the wait may answer at once) */
        kvm_item_set_state(it, KVM_ITEM_DURABLE_WAIT);
    if (kvm_cold_durable_wait(rt, op, it, r, durable_done)) {
        kvm_cas_lane_run(rt); /* (the next put of the key does not wait for our cold copy) */
        return; /* cold_write_through: acknowledged once its cold copy is usage-committed */
    }
    kvm_item_done(op, it);
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
    kvm_ictx_free(c, rc);
    /* A republish after an indeterminate CAS that finds our own content already there (the
     * partial mirror was repaired meanwhile) is published too. */
    bool ours = rc == KVMESH_ECONFLICT && r && it->pub_op_set &&
                kvm_op_id_equal(&r->content_op, &it->pub_op);
    /* settled by a lookup after a claim-carrying CAS: a route with our op proves its claim */
    if ((rc == 0 || ours) && r && it->q && it->q->state == KVM_Q_RESERVED)
        kvm_quota_cas_claimed(op, it, KVMESH_ECONFLICT, r, NULL, 0);
    if ((rc == 0 || ours) && it->q && it->q->state == KVM_Q_CLAIMED) {
        kvm_item_set_state(it, KVM_ITEM_FINALIZING);
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
        kvm_ops_release_res(rt, it); /* a conflict is definite: this update was not applied */
        kvm_item_fail(op, it, KVMESH_ETIMEDOUT,
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
    if (rc == KVMESH_ECONFLICT && ++it->tries <= STORE_CONFLICT_RETRIES) {
        kvm_item_route_drop(it, &it->cur);
        it->have_route = false;
        if (r) {
            if (kvm_item_route_take(it, &it->cur, r) != 0) {
                kvm_ops_release_res(rt, it);
                kvm_item_fail(op, it, KVMESH_ENOMEM, "out of memory");
                return;
            }
            it->have_route = true;
        }
        publish_cas(op, it);
        return;
    }
    if (rc == KVMESH_EINDETERMINATE && time_left && ++it->indet_tries <= STORE_INDET_RETRIES) {
        /* Maybe published: keep the reservations and settle it by an exact lookup. */
        kvm_ops_start_lookup(op, it, KVM_ITEM_SETTLING, indet_looked_up);
        return;
    }
    if (rc == KVMESH_ETIMEDOUT && time_left && it->pub_op_set &&
        ++it->indet_tries <= STORE_INDET_RETRIES) {
        /* The CAS's answer was lost (e.g. a primary that died: the put no longer looks the
         * route up first, and the lookup is what refreshes the shard view): settled like an
         * indeterminate CAS, by an exact lookup that finds our content op or the unchanged
         * route; a republish carries the same content op, so it applies at most once. */
        it->rc = KVMESH_ETIMEDOUT;
        kvm_ops_start_lookup(op, it, KVM_ITEM_SETTLING, indet_looked_up);
        return;
    }
    if (quota_settle_wanted(op, it, rc, time_left)) {
        it->rc = rc; /* the final answer if it cannot be published again */
        kvm_ops_start_lookup(op, it, KVM_ITEM_SETTLING, indet_looked_up);
        return;
    }
    if (rc == KVMESH_EINDETERMINATE) {
        obs_count(rt->metrics, replicas_published_total, OBS_OUTCOME_ERROR, OBS_NONE, it->n_res);
        /* Maybe published: keep the reservations; their TTL expiry asks the route. */
        kvm_item_fail(op, it, rc,
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
        kvm_item_fail(op, it, rc,
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
        kvm_item_fail(op, it, rc,
                      "route publication refused after the quota claim (%s); the operation is left "
                      "to reconciliation",
                      kvmesh_strerror(rc));
        return;
    }
    kvm_ops_release_res(rt, it);
    kvm_item_fail(op, it, rc, "route publication failed (the put was not applied): %s",
                  kvmesh_strerror(rc));
}

static void publish_cas_now(kvm_op_t *op, struct kvm_item *it);

static void publish_claimed(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) { /* e.g. ECANCELED: the reservation expired and was aborted: no route CAS */
        kvm_ops_release_res(op->rt, it);
        kvm_quota_abort(op->rt, it); /* still PENDING: release the charge now */
        kvm_item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    int fault = kvm_quota_test_fault(op->rt); /* test-only: the CAS fails after the claim */
    struct item_ctx *c = fault ? kvm_ictx_named(op, it, NULL) : NULL;
    if (c) {
        kvm_item_set_state(it, KVM_ITEM_CAS); /* as if the CAS went out and failed */
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
        kvm_item_set_state(it, KVM_ITEM_CLAIMING);
        kvm_quota_claim(op, it, &expected, publish_claimed);
        return;
    }
    publish_cas_now(op, it);
}

static void publish_gated(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        kvm_ops_release_res(op->rt, it);
        kvm_item_fail(op, it, rc, "%s (the put was not applied)", kvmesh_last_error());
        return;
    }
    publish_cas_now(op, it);
}

/* The answer of a route CAS that carried the quota claim (EmbeddedWrh): the claim's outcome
 * first (quota_claim.c), then the CAS's as for any publication; a primary that cannot claim sends
 * the item back through the writer's own claim. */
static void published_claim(void *arg, int rc, const kvm_route_t *r, const uint8_t *reply,
                            size_t reply_len)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_quota_cas_claimed(op, it, rc, r, reply, reply_len);
    if (rc == KVMESH_ENOTSUP) { /* nothing claimed, nothing applied */
        kvm_ictx_free(c, 0);
        publish_cas(op, it);
        return;
    }
    if (rc == KVMESH_ECANCELED) { /* the reservation was aborted: the CAS was not applied */
        kvm_ictx_free(c, rc);
        kvm_cold_reclaim_settle(op->rt, it, false);
        kvm_ops_release_res(op->rt, it);
        kvm_item_fail(op, it, rc,
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

/* The lane of the item's key passed to it (cas_lane.h): the item that held it ended and left
 * the route hint its CAS proved (or its last conflict answer's route), the expectation now. */
static void lane_resumed(kvm_op_t *op, struct kvm_item *it)
{
    /* (past its deadline too: the CAS is sent once, and a conflict then ends it, ETIMEDOUT) */
    kvm_item_route_drop(it, &it->cur);
    it->have_route = kvm_hint_get_borrowed(op->rt, &it->ident, &it->cur);
    publish_cas_now(op, it);
}

static void publish_cas_now(kvm_op_t *op, struct kvm_item *it)
{
    kvm_rt_t *rt = op->rt;
    /* One CAS of a key in flight from this runtime (a put without tenant quota: a claimed
     * publication keeps its claim's expectation): later puts of the key wait in its lane; the
     * holder's conflict retries go ahead of them. */
    if (!it->q && !kvm_cas_lane_enter(rt, op, it, lane_resumed))
        return;
    kvm_item_set_state(it, KVM_ITEM_COLD_GATE); /* (the gate may answer at once) */
    if (kvm_cold_reclaim_gate(rt, op, it, publish_gated))
        return; /* the old value's cold copy gets its reclaim record first */
    /* next borrows the item's identity (route_cas copies what it keeps): never kvm_route_free'd */
    kvm_route_t next;
    kvm_route_init(&next);
    next.ident = it->ident;
    int rc;
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
        kvm_cold_reclaim_settle(rt, it, false);
        kvm_ops_release_res(rt, it);
        kvm_item_fail(op, it, rc, "%s (the put was not applied)", kvmesh_last_error());
        return;
    }
    kvm_route_version_t expected = it->have_route ? it->cur.version : KVM_ROUTE_VERSION_NONE;
    kvm_item_set_state(it, KVM_ITEM_CAS);
    struct item_ctx *c = kvm_ictx_named(op, it, "control.route_cas");
    if (c)
        c->stage = OBS_CPSTAGE_ROUTE_CAS;
    struct obs_span *saved = kvm_trace_scope_enter(c ? c->sp : NULL);
    if (c && kvm_quota_cas_claim_wanted(op, it))
        rc = cas_with_claim(op, it, &expected, &next, published_claim, c);
    else
        rc = c ? route_cas_costed(rt->route, &expected, &next, published, c, &c->cost)
               : KVMESH_ENOMEM;
    kvm_trace_scope_leave(saved);
    if (rc) {
        kvm_ictx_free(c, rc);
        kvm_ops_release_res(rt, it);
        kvm_item_fail(op, it, rc, "route CAS could not start: %s", kvmesh_last_error());
    }
}

static void publish_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_ictx_free(c, rc);
    if (rc != 0 && rc != KVMESH_ENOENT) {
        kvm_ops_release_res(op->rt, it);
        kvm_item_fail(op, it, rc,
                      "route lookup before publication failed (the put was not applied): %s",
                      kvmesh_strerror(rc));
        return;
    }
    if (rc == 0 && r) {
        if (kvm_item_route_take(it, &it->cur, r) != 0) {
            kvm_ops_release_res(op->rt, it);
            kvm_item_fail(op, it, KVMESH_ENOMEM, "out of memory");
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
 * the claim needs the current version first (quota_item.c), so the route is looked up. */
void kvm_ops_publish_start(kvm_op_t *op, struct kvm_item *it)
{
    it->tries = 0; /* (counted per item at its end: kvm_cas_lane_count_retries) */
    if (it->q) {
        kvm_ops_start_lookup(op, it, KVM_ITEM_LOOKING_UP, publish_looked_up);
        return;
    }
    kvm_item_route_drop(it, &it->cur); /* (empty: a new item) */
    it->have_route = kvm_hint_get_borrowed(op->rt, &it->ident, &it->cur);
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
    kvm_item_done(op, it);
}

static void removed(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    kvm_ictx_free(c, rc);
    if (rc == 0 && it->q && it->q->state == KVM_Q_CLAIMED) {
        /* tenant quota: refund by finalize; the tombstone stays PENDING, without a purge
         * deadline, so that the route version stays the one the accounting row records */
        kvm_ops_release_obsolete(rt, &it->cur, NULL);
        kvm_cold_reclaim_settle(rt, it, true); /* the removed value's cold copy */
        kvm_item_set_state(it, KVM_ITEM_FINALIZING);
        kvm_quota_finalize(op, it, r, remove_finalized);
        return;
    }
    kvm_hint_drop(rt, &it->ident); /* (the finalize below changes the version again) */
    if (rc == 0) {
        kvm_ops_release_obsolete(rt, &it->cur, NULL);
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
        kvm_item_done(op, it);
        return;
    }
    bool time_left = kvm_deadline_left_ms(op->deadline_ms) > 0;
    if (rc == KVMESH_ECONFLICT && !time_left) {
        kvm_cold_reclaim_settle(rt, it, false);
        kvm_item_fail(
            op, it, KVMESH_ETIMEDOUT,
            "deadline passed while retrying the tombstone after conflicts; the remove was "
            "not applied (retry the remove)");
        return;
    }
    if (rc == KVMESH_ECONFLICT && ++it->tries <= STORE_CONFLICT_RETRIES) {
        kvm_item_route_drop(it, &it->cur);
        if (!r || kvm_route_is_tombstone(r)) {
            kvm_cold_reclaim_settle(rt, it, false); /* someone else removed it */
            it->rc = KVMESH_ENOENT;
            kvm_item_done(op, it);
            return;
        }
        if (kvm_item_route_take(it, &it->cur, r) != 0) {
            kvm_item_fail(op, it, KVMESH_ENOMEM, "out of memory");
            return;
        }
        remove_cas(op, it);
        return;
    }
    if (!cas_refused(rc))
        kvm_item_fail(op, it, rc,
                      "tombstone update did not complete (%s); the remove may have been applied: "
                      "retry the remove",
                      kvmesh_strerror(rc));
    else {
        kvm_cold_reclaim_settle(rt, it, false);
        kvm_item_fail(op, it, rc, "tombstone publication failed (the remove was not applied): %s",
                      kvmesh_strerror(rc));
    }
}

static void remove_cas_now(kvm_op_t *op, struct kvm_item *it);

static void remove_claimed(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        kvm_quota_abort(op->rt, it);
        kvm_item_fail(op, it, rc, "%s", kvmesh_last_error());
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
        kvm_item_set_state(it, KVM_ITEM_CLAIMING);
        kvm_quota_claim(op, it, &it->cur.version, remove_claimed); /* just before the CAS */
        return;
    }
    remove_cas_now(op, it);
}

static void remove_reserved(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        kvm_item_fail(op, it, rc, "%s", kvmesh_last_error());
        return;
    }
    remove_cas(op, it);
}

static void remove_gated(kvm_op_t *op, struct kvm_item *it, int rc)
{
    if (rc) {
        kvm_item_fail(op, it, rc, "%s (the remove was not applied)", kvmesh_last_error());
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
        kvm_ictx_free(c, 0);
        remove_cas(op, it);
        return;
    }
    if (rc == KVMESH_ECANCELED) { /* the reservation was aborted: the CAS was not applied */
        kvm_ictx_free(c, rc);
        kvm_cold_reclaim_settle(op->rt, it, false);
        kvm_item_fail(op, it, rc,
                      "quota claim at the route primary refused: the reservation was "
                      "aborted (expired); the remove was not applied");
        return;
    }
    removed(c, rc, r);
}

static void remove_cas_now(kvm_op_t *op, struct kvm_item *it)
{
    kvm_item_set_state(it, KVM_ITEM_COLD_GATE); /* (the gate may answer at once) */
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
        kvm_item_set_state(it, KVM_ITEM_CAS);
        struct item_ctx *c = kvm_ictx_named(op, it, "control.route_cas");
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
            kvm_ictx_free(c, rc);
    }
    kvm_route_free(&next);
    if (rc)
        kvm_item_fail(op, it, rc, "tombstone CAS could not start: %s", kvmesh_strerror(rc));
}

static void remove_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_ictx_free(c, rc);
    if (rc == KVMESH_ENOENT || (rc == 0 && kvm_route_is_tombstone(r))) {
        it->rc = KVMESH_ENOENT;
        kvm_item_done(op, it);
        return;
    }
    if (rc) {
        kvm_item_fail(op, it, rc, "route lookup failed (the remove was not applied): %s",
                      kvmesh_strerror(rc));
        return;
    }
    if (kvm_item_route_take(it, &it->cur, r) != 0) {
        kvm_item_fail(op, it, KVMESH_ENOMEM, "out of memory");
        return;
    }
    it->have_route = true;
    it->tries = 0;
    if (!it->q && kvm_quota_applies(op->rt, &it->ident)) {
        kvm_item_set_state(it, KVM_ITEM_QUOTA_RESERVING);
        kvm_quota_del_reserve(op, it, &it->cur, remove_reserved); /* the refund's reservation */
        return;
    }
    remove_cas(op, it);
}

/* ---- drain handoff ------------------------------------------------------------------------- */

static void handed_off(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    kvm_ictx_free(c, rc);
    (void)r;
    kvm_hint_drop(rt, &it->ident);
    enum kvm_handoff_step step = kvm_handoff_outcome(rc, &it->tries, STORE_CAS_RETRIES);
    if (step == KVM_HANDOFF_PUBLISHED) {
        kvm_ops_commit_res(rt, it, 0, NULL);
        kvm_ops_release_replica_of(rt, &it->ident, &it->moving);
        it->rc = 0;
        kvm_item_done(op, it);
    } else if (step == KVM_HANDOFF_RETRY) {
        kvm_ops_handoff_start(op, it);
    } else if (step == KVM_HANDOFF_KEEP) {
        /* may have been applied: the new replica is kept (its reservation expiry asks the route) */
        kvm_item_fail(op, it, rc,
                      "handoff publication did not complete (%s); it may have been applied",
                      kvmesh_strerror(rc));
    } else {
        kvm_ops_release_res(rt, it);
        kvm_item_fail(op, it, rc, "handoff CAS failed: %s", kvmesh_strerror(rc));
    }
}

static void handoff_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct item_ctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_rt_t *rt = op->rt;
    kvm_ictx_free(c, rc);
    if (rc != 0 && rc != KVMESH_ENOENT) {
        kvm_ops_release_res(rt, it);
        kvm_item_fail(op, it, rc, "route lookup for handoff failed: %s", kvmesh_strerror(rc));
        return;
    }
    /* the handoff's decisions are shared with the simulator (store/repair_plan.h) */
    kvm_hot_replica_t nr = {
        .owner = it->res[0].owner.id, .segment = it->res[0].seg, .offset = it->res[0].offset};
    kvm_route_t next;
    kvm_route_init(&next);
    int plan = kvm_handoff_next(rc == KVMESH_ENOENT ? NULL : r, &it->moving, &nr, &next);
    if (plan == 2) { /* our earlier attempt applied (answered as a conflict): published */
        kvm_ops_commit_res(rt, it, 0, NULL);
        kvm_ops_release_replica_of(rt, &it->ident, &it->moving);
        it->rc = 0;
        kvm_item_done(op, it);
        return;
    }
    if (plan == 1) {
        /* Nothing references the replica any more: drop the copy and the original. */
        it->superseded = true;
        kvm_ops_release_res(rt, it);
        kvm_ops_release_replica_of(rt, &it->ident, &it->moving);
        it->rc = 0;
        kvm_item_done(op, it);
        return;
    }
    if (plan != 0) {
        kvm_route_free(&next);
        kvm_ops_release_res(rt, it);
        kvm_item_fail(op, it, KVMESH_ENOMEM, "out of memory");
        return;
    }
    struct item_ctx *c2 = kvm_ictx(op, it);
    kvm_item_set_state(it, KVM_ITEM_CAS);
    rc = c2 ? route_cas(rt->route, &r->version, &next, handed_off, c2) : KVMESH_ENOMEM;
    kvm_route_free(&next);
    if (rc) {
        free(c2);
        kvm_ops_release_res(rt, it);
        kvm_item_fail(op, it, rc, "handoff CAS could not start");
    }
}

void kvm_ops_handoff_start(kvm_op_t *op, struct kvm_item *it)
{
    kvm_ops_start_lookup(op, it, KVM_ITEM_LOOKING_UP, handoff_looked_up);
}

void kvm_ops_remove_start(kvm_op_t *op, struct kvm_item *it)
{
    kvm_ops_start_lookup(op, it, KVM_ITEM_LOOKING_UP, remove_looked_up);
}
