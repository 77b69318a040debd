// SPDX-License-Identifier: Apache-2.0
/*
 * quota_tomb.c — owns the quota-governed tombstones that are not a client's remove (quota.h,
 * docs/tenancy.md): the owner's CLOCK eviction of the last readable copy of a quota tenant's
 * object (kvm_quota_evict), and the reconciler's replay of a PUBLISHING delete whose tombstone
 * CAS failed outright (kvm_quota_replay). Both publish the tombstone through the full delete
 * protocol: reserve (refund derived from the committed row) -> claim (by the fenced primary
 * inside its CAS with EmbeddedWrh, by this runtime with MetadataOnly) -> tombstone CAS carrying
 * the operation id -> finalize. The operation id makes every step idempotent; a crash between
 * steps is settled by the reconciliation worker (an expired PENDING is aborted, a PUBLISHING one
 * finalized from the tombstone that carries its id, or replayed here while its predecessor is
 * still the current route).
 *
 * One struct qt per tombstone in flight, owned by this file from start to its last callback.
 * While it waits for a tenant-layer callback it is linked on the runtime's waiting list
 * (kvm_quota_tomb_head): tn_close runs no callback after it returns, so kvm_quota_tomb_close
 * ends those at close (the eviction's slot goes back to its owner, the reconciler is answered
 * ECANCELED) instead of leaking them. Loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/put_payload.h"
#include "store/quota.h"
#include "store/store.h"

struct qt {
    kvm_rt_t *rt;
    bool replay;
    bool put; /* a put's replay: next is the writer's route, rebuilt from the claim's payload */
    char tenant[TN_TENANT_CAP], domain[TN_DOMAIN_CAP], key[TN_KEY_CAP];
    char op_id[TN_OPID_CAP];
    uint64_t publish_token;
    uint32_t payload_len;
    uint8_t payload[TN_PAYLOAD_MAX];
    kvm_route_t cur;  /* the route the tombstone replaces */
    kvm_route_t next; /* the tombstone */
    kvm_route_version_t predicted, published;
    /* eviction: told once, right after the CAS's outcome (the finalize follows on its own) */
    route_cas_cb evict_cb;
    void *evict_arg;
    /* replay: the reconciler's callback; how the replaced value's replicas are released */
    tn_replay_cb rcb;
    void *rarg;
    kvm_q_release_fn release, commit; /* the quota hooks' release_replica, commit_replica */
    /* on the runtime's waiting list while a tenant-layer call is in flight */
    struct qt *wnext, *wprev;
    bool waiting;
};

static void qt_wait(struct qt *t)
{
    struct qt **head = (struct qt **)kvm_quota_tomb_head(t->rt);
    KVM_ASSERT(head && !t->waiting);
    t->waiting = true;
    t->wprev = NULL;
    t->wnext = *head;
    if (*head)
        (*head)->wprev = t;
    *head = t;
}

static void qt_unwait(struct qt *t)
{
    if (!t->waiting)
        return;
    struct qt **head = (struct qt **)kvm_quota_tomb_head(t->rt);
    KVM_ASSERT(head);
    if (t->wprev)
        t->wprev->wnext = t->wnext;
    else
        *head = t->wnext;
    if (t->wnext)
        t->wnext->wprev = t->wprev;
    t->waiting = false;
}

static struct qt *qt_new(kvm_rt_t *rt, const kvm_route_t *cur)
{
    struct qt *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->rt = rt;
    kvm_route_init(&t->cur);
    kvm_route_init(&t->next);
    const kvm_ident_t *id = &cur->ident;
    if (kvm_route_copy(&t->cur, cur) != 0 || memchr(kvm_ident_key(id), 0, id->key_len)) {
        kvm_route_free(&t->cur);
        free(t);
        return NULL;
    }
    memcpy(t->tenant, kvm_ident_tenant(id), id->tenant_len);
    if (kvm_ident_has_domain(id))
        memcpy(t->domain, kvm_ident_domain(id), id->domain_len);
    memcpy(t->key, kvm_ident_key(id), id->key_len);
    return t;
}

static void qt_free(struct qt *t)
{
    kvm_route_free(&t->cur);
    kvm_route_free(&t->next);
    free(t);
}

static tn_t *qt_tn(struct qt *t)
{
    return kvm_quota_tn(t->rt);
}

/* The CAS's outcome for the caller: the eviction's slot or the reconciler. A replay is answered
 * after the version is recorded (qt_end), an eviction at once (its slot waits for nothing). */
static void qt_tell_evict(struct qt *t, int rc, const kvm_route_t *r)
{
    if (t->evict_cb) {
        route_cas_cb cb = t->evict_cb;
        t->evict_cb = NULL;
        cb(t->evict_arg, rc, r);
    }
}

static void qt_end(struct qt *t, int rc)
{
    if (t->replay) {
        if (rc == 0)
            obs_count(t->rt->metrics, quota_operations_total, OBS_QOP_CLAIM, OBS_QRES_OK, 1);
        t->rcb(t->rarg, rc, rc ? KVM_ROUTE_VERSION_NONE : t->published);
    } else {
        qt_tell_evict(t, rc, NULL);
    }
    qt_free(t);
}

static void qt_finalized(void *arg, int rc, const tn_op_view_t *v)
{
    struct qt *t = arg;
    qt_unwait(t);
    (void)v; /* a failed finalize is the reconciler's: the tombstone carries the operation id */
    obs_count(t->rt->metrics, quota_operations_total, OBS_QOP_FINALIZE,
              rc == 0 ? OBS_QRES_OK : OBS_QRES_ERROR, 1);
    qt_end(t, 0);
}

/* The tombstone is published at t->published and the operation records that version. */
static void qt_recorded(struct qt *t)
{
    /* A replay releases the replaced value's replicas, as a remove does; an eviction's own slot
     * is the owner's (reclaimed there), and its other replicas were not readable. */
    for (uint32_t i = 0; t->replay && i < t->cur.n_replicas; i++)
        t->release(t->rt, &t->cur.ident, &t->cur.replicas[i]);
    /* A put's replay: its owners held the slots (held_op.h); tell them the route has them (a
     * lost notice is settled by their next expiry lookup, which now finds the slot). */
    for (uint32_t i = 0; t->put && i < t->next.n_replicas; i++)
        t->commit(t->rt, &t->next.ident, &t->next.replicas[i]);
    if (t->replay || !qt_tn(t)) { /* the reconciler finalizes what it asked to replay */
        qt_end(t, 0);
        return;
    }
    qt_wait(t);
    if (tn_finalize_tomb(qt_tn(t), t->tenant, t->domain, t->key, t->op_id, t->published,
                         t->next.retain_until_ms, qt_finalized, t) != 0) {
        qt_unwait(t);
        qt_end(t, 0);
    }
}

static void qt_reclaimed(void *arg, int rc, const tn_op_view_t *v)
{
    struct qt *t = arg;
    qt_unwait(t);
    (void)v;
    if (rc) { /* published, the version unrecorded: PUBLISHING, the reconciler settles it */
        qt_end(t, t->replay ? rc : 0);
        return;
    }
    qt_recorded(t);
}

static int qt_claim(struct qt *t, const kvm_route_version_t *next, tn_cb cb)
{
    if (!qt_tn(t))
        return kvm_errf(KVMESH_ECANCELED, "runtime closing");
    tn_claim_req_t req = {.tenant = t->tenant,
                          .domain = t->domain,
                          .key = t->key,
                          .op_id = t->op_id,
                          .generation = t->rt->generation,
                          .fencing_token = next->fencing_token,
                          .publish_token = t->publish_token,
                          .next_version = *next,
                          .payload = t->payload,
                          .payload_len = t->payload_len};
    qt_wait(t);
    int rc = tn_claim(qt_tn(t), &req, cb, t);
    if (rc)
        qt_unwait(t);
    return rc;
}

/* The tombstone CAS applied at r->version (or found applied: r carries our operation). */
static void qt_applied(struct qt *t, const kvm_route_t *r)
{
    t->published = r->version;
    if (!t->replay)
        qt_tell_evict(t, 0, r);
    if (kvm_route_version_equal(&t->predicted, &r->version)) {
        qt_recorded(t);
        return;
    }
    /* another version than the claim predicted: record it (a replay claim, same token) */
    if (qt_claim(t, &r->version, qt_reclaimed) != 0)
        qt_end(t, t->replay ? KVMESH_EUNAVAILABLE : 0);
}

static bool carries_ours(const struct qt *t, const kvm_route_t *r)
{
    char id[TN_OPID_CAP];
    if (!r || kvm_route_is_tombstone(r) == t->put)
        return false;
    ks_opid_format(id, r->content_op.epoch, r->content_op.seq);
    return strcmp(id, t->op_id) == 0;
}

static void qt_aborted(void *arg, int rc, const tn_op_view_t *v)
{
    (void)arg, (void)rc, (void)v; /* refused: it was claimed (PUBLISHING), the reconciler's */
}

/* The CAS failed. Eviction: an operation still PENDING (nothing claimed, nothing applied) is
 * aborted at once; if it was claimed, the abort is refused and the reconciler replays or settles
 * it. Replay: reported, the operation stays PUBLISHING (retried with backoff). */
static void qt_failed(struct qt *t, int rc)
{
    if (!t->replay && qt_tn(t))
        (void)tn_abort(qt_tn(t), t->tenant, t->domain, t->key, t->op_id, qt_aborted, NULL);
    qt_end(t, rc ? rc : KVMESH_EINTERNAL);
}

static void qt_cased(void *arg, int rc, const kvm_route_t *r)
{
    struct qt *t = arg;
    if ((rc == 0 && r) ||
        ((rc == KVMESH_ECONFLICT || rc == KVMESH_EINDETERMINATE) && carries_ours(t, r))) {
        qt_applied(t, r);
        return;
    }
    qt_failed(t, rc);
}

static void qt_plain_cas(struct qt *t)
{
    if (!t->rt->route || route_cas(t->rt->route, &t->cur.version, &t->next, qt_cased, t) != 0)
        qt_failed(t, KVMESH_EUNAVAILABLE);
}

static void qt_claimed(void *arg, int rc, const tn_op_view_t *v)
{
    struct qt *t = arg;
    qt_unwait(t);
    (void)v;
    if (!t->replay)
        obs_count(t->rt->metrics, quota_operations_total, OBS_QOP_CLAIM,
                  rc == 0 ? OBS_QRES_OK : OBS_QRES_ERROR, 1);
    if (rc) { /* not claimed: no CAS (an eviction's reservation is aborted) */
        qt_failed(t, rc);
        return;
    }
    qt_plain_cas(t);
}

/* The writer's claim (MetadataOnly, or a primary without a claim hook): predicted version first,
 * then the CAS (the route CAS itself is the fence). */
static void qt_claim_then_cas(struct qt *t)
{
    kvm_route_version_t *e = &t->cur.version;
    t->predicted =
        (kvm_route_version_t){e->fencing_token ? e->fencing_token : 1, e->primary_sequence + 1};
    if (qt_claim(t, &t->predicted, qt_claimed) != 0)
        qt_failed(t, KVMESH_EUNAVAILABLE);
}

static void qt_cas_claim_done(void *arg, int rc, const kvm_route_t *r, const uint8_t *reply,
                              size_t reply_len)
{
    struct qt *t = arg;
    if (rc == KVMESH_ENOTSUP) { /* the primary cannot claim: nothing claimed or applied */
        qt_claim_then_cas(t);
        return;
    }
    if ((rc == 0 && r) || carries_ours(t, r)) {
        if (reply_len && qt_tn(t))
            (void)tn_hint_import(qt_tn(t), reply, reply_len); /* stale: a failed compare */
        t->predicted = r->version; /* the primary claimed with the version it published */
        if (!t->replay)
            obs_count(t->rt->metrics, quota_operations_total, OBS_QOP_CLAIM, OBS_QRES_OK, 1);
        qt_applied(t, r);
        return;
    }
    qt_failed(t, rc);
}

/* EmbeddedWrh: the CAS carries the claim; the fenced primary claims immediately before it
 * applies it (a conflict or a stale view is refused before anything is claimed). */
static void qt_publish(struct qt *t)
{
    kvm_rt_t *rt = t->rt;
    if (!rt->route || !qt_tn(t)) {
        qt_failed(t, KVMESH_ECANCELED);
        return;
    }
    if (rt->cfg.route_mode != ROUTE_MODE_EMBEDDED_WRH) {
        qt_claim_then_cas(t);
        return;
    }
    static _Thread_local uint8_t blob[ROUTE_CLAIM_MAX];
    size_t n = 0;
    int rc = kvm_quota_claim_blob_raw(rt, t->tenant, t->domain, t->key, t->op_id, t->publish_token,
                                      t->payload, t->payload_len, blob, sizeof(blob), &n);
    if (rc == 0)
        rc = route_cas_claim(rt->route, &t->cur.version, &t->next, blob, n, qt_cas_claim_done, t,
                             NULL);
    if (rc)
        qt_failed(t, rc);
}

static int qt_make_tomb(struct qt *t, kvm_op_id_t cop)
{
    int rc = kvm_ident_copy(&t->next.ident, &t->cur.ident);
    if (rc)
        return rc;
    t->next.content_op = cop;
    t->next.predecessor_op = t->cur.content_op;
    t->next.tomb = KVM_TOMB_PENDING;
    /* purged at D, a full retention from now also for a replay (docs/tenancy.md "Purging a quota
     * tenant's tombstones"); the finalize records D */
    t->next.retain_until_ms = kvm_rt_tomb_deadline(t->rt);
    ks_opid_format(t->op_id, cop.epoch, cop.seq);
    if (!t->replay) /* the store's publish token: the content op's sequence */
        t->publish_token = cop.seq;
    return 0;
}

/* ---- eviction ------------------------------------------------------------------------------ */

static void qt_plain_evicted(void *arg, int rc, const kvm_route_t *r)
{
    struct qt *t = arg;
    qt_tell_evict(t, rc, r);
    qt_free(t);
}

static void qt_evict_reserved(void *arg, int rc, const tn_op_view_t *v)
{
    struct qt *t = arg;
    qt_unwait(t);
    (void)v;
    obs_count(t->rt->metrics, quota_operations_total, OBS_QOP_RESERVE,
              rc == 0 || rc == KVMESH_ENOENT ? OBS_QRES_OK
              : rc == KVMESH_EAGAIN          ? OBS_QRES_BUSY
              : rc == KVMESH_ECONFLICT       ? OBS_QRES_CONFLICT
                                             : OBS_QRES_ERROR,
              1);
    if (rc == KVMESH_ENOENT && t->rt->route) {
        /* no committed accounting (written before the policy): nothing to refund */
        if (route_cas(t->rt->route, &t->cur.version, &t->next, qt_plain_evicted, t) == 0)
            return;
        rc = KVMESH_EUNAVAILABLE;
    }
    if (rc) { /* locked by a write in progress, or accounting at another version: not evicted */
        qt_tell_evict(t, rc, NULL);
        qt_free(t);
        return;
    }
    qt_publish(t);
}

int kvm_quota_evict(kvm_rt_t *rt, const kvm_route_t *cur, const kvm_route_t *tomb, route_cas_cb cb,
                    void *arg)
{
    KVM_ASSERT(tomb->tomb == KVM_TOMB_PENDING);
    if (!kvm_quota_tn(rt))
        return kvm_errf(KVMESH_ECANCELED, "runtime closing");
    struct qt *t = qt_new(rt, cur);
    if (!t)
        return KVMESH_ENOMEM;
    int rc = qt_make_tomb(t, tomb->content_op);
    if (rc) {
        qt_free(t);
        return rc;
    }
    t->evict_cb = cb;
    t->evict_arg = arg;
    tn_reserve_req_t req = {.tenant = t->tenant,
                            .domain = t->domain,
                            .key = t->key,
                            .op_id = t->op_id,
                            .is_delete = true,
                            .expected_route = cur->version};
    qt_wait(t);
    rc = tn_reserve(kvm_quota_tn(rt), &req, qt_evict_reserved, t);
    if (rc) {
        qt_unwait(t);
        t->evict_cb = NULL;
        qt_free(t);
    }
    return rc;
}

/* ---- replay (reconciliation) --------------------------------------------------------------- */

static void qt_replay_refuse(void *arg)
{
    struct qt *t = arg;
    kvm_errf(KVMESH_EUNAVAILABLE,
             "tenant '%s': operation %s cannot be replayed safely here (only an operation whose "
             "predecessor is the current route without a cold copy is replayed: a delete, or a "
             "put whose claim recorded its replicas' locators)",
             t->tenant, t->op_id);
    t->rcb(t->rarg, KVMESH_EUNAVAILABLE, KVM_ROUTE_VERSION_NONE);
    qt_free(t);
}

/* A put's route exactly as its writer sent it, rebuilt from the claim's payload (put_payload.h:
 * the writer, length, checksum, the replicas in order) over cur (NULL: the key is absent). The
 * cold tier is not asked again (no PendingOffload): the replayed route is hot only. */
static int qt_make_put(struct qt *t, const kvm_route_t *cur)
{
    kvm_put_payload_t p;
    uint64_t epoch = 0, seq = 0;
    char id[TN_OPID_CAP];
    snprintf(id, sizeof(id), "%s", t->op_id);
    int rc = kvm_put_payload_decode(t->payload, t->payload_len, &p);
    if (rc == 0 && !p.has_locators)
        rc = kvm_errf(KVMESH_ENOTSUP, "the claim's payload names no replica (an older writer)");
    if (rc == 0 && ks_opid_parse(id, &epoch, &seq) != 0)
        rc = kvm_errf(KVMESH_EPROTO, "operation id '%s' is malformed", t->op_id);
    if (rc == 0)
        rc = kvm_ident_init(&t->next.ident, t->tenant, t->domain[0] ? t->domain : NULL, t->key,
                            strlen(t->key));
    if (rc)
        return rc;
    t->next.content_op = (kvm_op_id_t){.writer = p.writer, .epoch = epoch, .seq = seq};
    if (cur && kvm_op_id_is_valid(&cur->content_op))
        t->next.predecessor_op = cur->content_op;
    t->next.length = p.length;
    t->next.checksum = p.checksum;
    t->next.tomb = KVM_TOMB_NONE;
    t->next.n_replicas = p.n;
    memcpy(t->next.replicas, p.rep, sizeof(p.rep[0]) * p.n); /* decode checked them */
    return 0; /* the version is the primary's (or the metadata CAS's) to assign */
}

/* Step 3 of "Replaying a put": the predecessor the reserve named is still the current route
 * (absent when it named none): the writer's route is published with the same content op,
 * publish token and payload, through the current fenced primary (EmbeddedWrh: a claim-carrying
 * CAS) or this runtime's replay claim and the metadata CAS (MetadataOnly). The owners kept the
 * slots while the operation was PUBLISHING (held_op.h), so the route never names freed space. */
static void qt_replay_put(struct qt *t, int rc, const kvm_route_t *r)
{
    kvm_rt_t *rt = t->rt;
    bool absent = rc == KVMESH_ENOENT || (rc == 0 && !r);
    bool pred = absent ? kvm_route_version_is_none(&t->predicted)
                       : rc == 0 && kvm_route_version_equal(&r->version, &t->predicted);
    if (!pred || (!absent && r->cold.kind != KVM_COLD_NONE) || !rt->route || !qt_tn(t) ||
        (!absent && kvm_route_copy(&t->cur, r) != 0) || qt_make_put(t, absent ? NULL : r) != 0) {
        qt_replay_refuse(t);
        return;
    }
    qt_publish(t);
}

static void qt_replay_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct qt *t = arg;
    kvm_rt_t *rt = t->rt;
    kvm_route_version_t expected = t->predicted; /* the operation's predecessor (stashed) */
    if (rc == 0 && r && carries_ours(t, r)) {    /* published meanwhile: record and report */
        t->replay = true;
        if (kvm_route_copy(&t->cur, r) != 0) {
            qt_replay_refuse(t);
            return;
        }
        t->cur.n_replicas = 0; /* its own route: nothing to release */
        t->predicted = KVM_ROUTE_VERSION_NONE;
        if (t->put && kvm_route_copy(&t->next, r) != 0) { /* the replicas to commit */
            qt_replay_refuse(t);
            return;
        }
        qt_applied(t, r);
        return;
    }
    if (t->put) {
        qt_replay_put(t, rc, r);
        return;
    }
    /* Safe only while the predecessor is the current live route (the tombstone then replaces
     * exactly what the reserve derived its refund from) and it has no cold copy (a remove's cold
     * reclaim is not replayed here). */
    if (rc || !r || kvm_route_is_tombstone(r) || !kvm_route_version_equal(&r->version, &expected) ||
        r->cold.kind != KVM_COLD_NONE || !rt->route || !qt_tn(t) ||
        kvm_route_copy(&t->cur, r) != 0) {
        qt_replay_refuse(t);
        return;
    }
    uint64_t epoch = 0, seq = 0;
    char id[TN_OPID_CAP];
    snprintf(id, sizeof(id), "%s", t->op_id);
    if (ks_opid_parse(id, &epoch, &seq) != 0 ||
        qt_make_tomb(t, (kvm_op_id_t){.writer = rt->self.id, .epoch = epoch, .seq = seq}) != 0) {
        qt_replay_refuse(t);
        return;
    }
    qt_publish(t);
}

void kvm_quota_replay(void *ctx, const tn_op_t *op, tn_replay_cb cb, void *arg)
{
    kvm_rt_t *rt = ctx;
    struct qt *t = calloc(1, sizeof(*t));
    if (!t) {
        cb(arg, KVMESH_ENOMEM, KVM_ROUTE_VERSION_NONE);
        return;
    }
    t->rt = rt;
    t->replay = true;
    t->rcb = cb;
    t->rarg = arg;
    t->release = kvm_quota_release_fn(rt); /* the reconciler runs only while quota is open */
    t->commit = kvm_quota_commit_fn(rt);
    kvm_route_init(&t->cur);
    kvm_route_init(&t->next);
    snprintf(t->tenant, sizeof(t->tenant), "%s", op->tenant);
    snprintf(t->domain, sizeof(t->domain), "%s", op->domain);
    snprintf(t->key, sizeof(t->key), "%s", op->key);
    snprintf(t->op_id, sizeof(t->op_id), "%s", op->id);
    t->publish_token = op->publish_token; /* the same publish token and payload */
    t->payload_len = op->payload_len <= TN_PAYLOAD_MAX ? op->payload_len : 0;
    memcpy(t->payload, op->payload, t->payload_len);
    t->predicted = op->expected_route;
    t->put = op->kind != TN_KIND_DELETE;
    kvm_ident_t id;
    int rc = rt->route ? kvm_ident_init(&id, op->tenant, op->domain[0] ? op->domain : NULL, op->key,
                                        strlen(op->key))
                       : KVMESH_ENOTSUP;
    if (rc == 0) {
        rc = route_lookup(rt->route, &id, qt_replay_looked_up, t); /* exact, the full route */
        kvm_ident_free(&id);
        if (rc == 0)
            return;
    }
    env_timer_start(rt->env, 0, qt_replay_refuse, t); /* callbacks never run inside the call */
}

/* ---- close --------------------------------------------------------------------------------- */

void kvm_quota_tomb_close(kvm_rt_t *rt)
{
    struct qt **head = (struct qt **)kvm_quota_tomb_head(rt);
    while (head && *head) {
        struct qt *t = *head;
        qt_unwait(t);
        if (t->replay) {
            t->rcb(t->rarg, KVMESH_ECANCELED, KVM_ROUTE_VERSION_NONE);
            qt_free(t);
        } else {
            qt_tell_evict(t, KVMESH_ECANCELED, NULL); /* the slot goes back to its owner */
            qt_free(t);
        }
    }
}
