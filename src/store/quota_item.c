// SPDX-License-Identifier: Apache-2.0
/*
 * quota_item.c — one item's side of the tenant quota protocol (quota.h, docs/tenancy.md): reserve
 * before the data transfer (with tenant-local recovery on a refusal), the writer's claim before
 * the route CAS, finalize after it, abort on a failure before it. Loop thread only.
 */
#include <signal.h>
#include <stdio.h>

#include "store/quota_int.h"

#define QUOTA_EVICT_MAX 16u /* objects one recovery may evict */

static void fifo_push(struct qfifo *f, const char *domain, const char *key, uint64_t len)
{
    if (f->n == QUOTA_FIFO_MAX) { /* forget the oldest */
        free(f->e[f->head].key);
        f->head = (f->head + 1) % QUOTA_FIFO_MAX;
        f->n--;
    }
    struct qfifo_ent *e = &f->e[(f->head + f->n) % QUOTA_FIFO_MAX];
    e->key = strdup(key);
    if (!e->key)
        return;
    snprintf(e->domain, sizeof(e->domain), "%s", domain);
    e->len = len;
    f->n++;
}

/* Pops the oldest entry that is not (domain, key); false when none is left. */
static bool fifo_pop(struct qfifo *f, const char *domain, const char *key, struct qfifo_ent *out)
{
    for (uint32_t i = 0; i < f->n; i++) {
        uint32_t at = (f->head + i) % QUOTA_FIFO_MAX;
        struct qfifo_ent *e = &f->e[at];
        if (strcmp(e->domain, domain) == 0 && strcmp(e->key, key) == 0)
            continue;
        *out = *e;
        /* close the gap (bounded by QUOTA_FIFO_MAX) */
        for (uint32_t j = i; j + 1 < f->n; j++)
            f->e[(f->head + j) % QUOTA_FIFO_MAX] = f->e[(f->head + j + 1) % QUOTA_FIFO_MAX];
        f->n--;
        return true;
    }
    return false;
}

void kvm_quota_fifo_clear(struct qfifo *f)
{
    for (uint32_t i = 0; i < f->n; i++)
        free(f->e[(f->head + i) % QUOTA_FIFO_MAX].key);
    f->n = 0;
}

/* ---- per item --------------------------------------------------------------------------- */

int kvm_quota_item_init(kvm_rt_t *rt, struct kvm_item *it, bool is_delete)
{
    struct kvm_qitem *qi = calloc(1, sizeof(*qi));
    if (!qi)
        return KVMESH_ENOMEM;
    const kvm_ident_t *id = &it->ident;
    if (memchr(kvm_ident_key(id), 0, id->key_len)) {
        free(qi);
        return kvm_errf(KVMESH_EINVAL, "a key of a tenant with a quota policy must not contain "
                                       "NUL bytes (accounting rows are named by the key)");
    }
    memcpy(qi->tenant, kvm_ident_tenant(id), id->tenant_len);
    if (kvm_ident_has_domain(id))
        memcpy(qi->domain, kvm_ident_domain(id), id->domain_len);
    memcpy(qi->key, kvm_ident_key(id), id->key_len);
    qi->content_op = kvm_rt_next_op_id(rt);
    ks_opid_format(qi->op_id, qi->content_op.epoch, qi->content_op.seq);
    qi->is_delete = is_delete;
    kvm_route_init(&qi->route);
    it->q = qi;
    return 0;
}

void kvm_quota_item_free(struct kvm_item *it)
{
    if (!it->q)
        return;
    kvm_route_free(&it->q->route);
    free(it->q);
    it->q = NULL;
}

static void reserve_send(kvm_op_t *op, struct kvm_item *it, const kvm_route_version_t *expected);

/* ---- tenant-local quota recovery ---------------------------------------------------------
 *
 * A put refused with EQUOTA (tenant_quota_evict on) removes the oldest objects this runtime
 * wrote for the SAME tenant (its per-tenant FIFO; nothing of another tenant is ever looked at),
 * each through the full delete protocol (reserve, claim, tombstone CAS, release, finalize: the
 * refund is the protocol's), until the shortfall the refusal reported is covered, at most
 * QUOTA_EVICT_MAX objects; then the reservation is retried once.
 */
struct rec {
    kvm_op_t *op;
    struct kvm_item *it;
    struct qfifo *fifo;
    int64_t need_b, need_o;
    uint32_t evicted;
    struct qfifo_ent e;
    kvm_route_t cur;
    kvm_route_version_t predicted;
    uint64_t until; /* the tombstone's purge deadline D */
    kvm_op_id_t cop;
    char op_id[TN_OPID_CAP];
};

static void rec_next(struct rec *r);

static void rec_end(struct rec *r)
{
    kvm_op_t *op = r->op;
    struct kvm_item *it = r->it;
    kvm_route_free(&r->cur);
    free(r);
    if (!op->rt->quota) {
        it->q->cont(op, it, kvm_errf(KVMESH_ECANCELED, "runtime closing"));
        return;
    }
    reserve_send(op, it, &it->q->expected); /* the one retry */
}

static void rec_skip(struct rec *r)
{
    free(r->e.key);
    r->e.key = NULL;
    kvm_route_free(&r->cur);
    kvm_route_init(&r->cur);
    rec_next(r);
}

static void rec_finalized(void *arg, int rc, const tn_op_view_t *v)
{
    (void)rc, (void)v; /* a failed finalize is the reconciler's (the tombstone carries the op) */
    rec_skip(arg);
}

static void rec_reclaimed(void *arg, int rc, const tn_op_view_t *v)
{
    struct rec *r = arg;
    (void)v;
    struct kvm_quota *q = r->op->rt->quota;
    if (rc || !q) {
        rec_skip(r);
        return;
    }
    if (tn_finalize_tomb(q->tn, r->it->q->tenant, r->e.domain, r->e.key, r->op_id, r->predicted,
                         r->until, rec_finalized, r) != 0)
        rec_skip(r);
}

static void rec_cased(void *arg, int rc, const kvm_route_t *route)
{
    struct rec *r = arg;
    kvm_rt_t *rt = r->op->rt;
    struct kvm_quota *q = rt->quota;
    if (rc || !route || !q) { /* claimed: left PUBLISHING for the reconciler */
        rec_skip(r);
        return;
    }
    for (uint32_t i = 0; i < r->cur.n_replicas; i++)
        q->hooks.release_replica(rt, &r->cur.ident, &r->cur.replicas[i]);
    r->need_b -= (int64_t)r->cur.length;
    r->need_o -= 1;
    r->evicted++;
    q->recovery_evictions++;
    obs_count(r->op->rt->metrics, quota_recovery_evictions_total, OBS_NONE, OBS_NONE, 1);
    if (!kvm_route_version_equal(&route->version, &r->predicted)) {
        r->predicted = route->version;
        tn_claim_req_t req = {.tenant = r->it->q->tenant,
                              .domain = r->e.domain,
                              .key = r->e.key,
                              .op_id = r->op_id,
                              .generation = rt->generation,
                              .fencing_token = route->version.fencing_token,
                              .publish_token = r->cop.seq,
                              .next_version = route->version};
        if (tn_claim(q->tn, &req, rec_reclaimed, r) != 0)
            rec_skip(r);
        return;
    }
    rec_reclaimed(r, 0, NULL);
}

static void rec_claimed(void *arg, int rc, const tn_op_view_t *v)
{
    struct rec *r = arg;
    (void)v;
    kvm_rt_t *rt = r->op->rt;
    if (!rt->quota || !rt->route) {
        rec_skip(r);
        return;
    }
    if (rc) {
        tn_abort(rt->quota->tn, r->it->q->tenant, r->e.domain, r->e.key, r->op_id, NULL, NULL);
        rec_skip(r);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    if (kvm_ident_copy(&next.ident, &r->cur.ident) != 0) {
        rec_skip(r);
        return;
    }
    next.content_op = r->cop;
    next.predecessor_op = r->cur.content_op;
    next.tomb = KVM_TOMB_PENDING;
    /* purged at D (docs/tenancy.md "Purging a quota tenant's tombstones"); finalize records D */
    next.retain_until_ms = r->until = kvm_rt_tomb_deadline(rt);
    rc = route_cas(rt->route, &r->cur.version, &next, rec_cased, r);
    kvm_route_free(&next);
    if (rc)
        rec_skip(r);
}

static void rec_reserved(void *arg, int rc, const tn_op_view_t *v)
{
    struct rec *r = arg;
    (void)v;
    kvm_rt_t *rt = r->op->rt;
    if (rc || !rt->quota) {
        rec_skip(r);
        return;
    }
    kvm_route_version_t *e = &r->cur.version;
    r->predicted =
        (kvm_route_version_t){e->fencing_token ? e->fencing_token : 1, e->primary_sequence + 1};
    tn_claim_req_t req = {.tenant = r->it->q->tenant,
                          .domain = r->e.domain,
                          .key = r->e.key,
                          .op_id = r->op_id,
                          .generation = rt->generation,
                          .fencing_token = r->predicted.fencing_token,
                          .publish_token = r->cop.seq,
                          .next_version = r->predicted};
    if (tn_claim(rt->quota->tn, &req, rec_claimed, r) != 0)
        rec_skip(r);
}

static void rec_looked(void *arg, int rc, const kvm_route_t *route)
{
    struct rec *r = arg;
    kvm_rt_t *rt = r->op->rt;
    if (rc || !route || kvm_route_is_tombstone(route) || !rt->quota ||
        kvm_route_copy(&r->cur, route) != 0) {
        rec_skip(r);
        return;
    }
    r->cop = kvm_rt_next_op_id(rt);
    ks_opid_format(r->op_id, r->cop.epoch, r->cop.seq);
    tn_reserve_req_t req = {.tenant = r->it->q->tenant,
                            .domain = r->e.domain,
                            .key = r->e.key,
                            .op_id = r->op_id,
                            .is_delete = true,
                            .expected_route = r->cur.version};
    if (tn_reserve(rt->quota->tn, &req, rec_reserved, r) != 0)
        rec_skip(r);
}

static void rec_next(struct rec *r)
{
    kvm_rt_t *rt = r->op->rt;
    struct kvm_qitem *qi = r->it->q;
    if ((r->need_b <= 0 && r->need_o <= 0) || r->evicted >= QUOTA_EVICT_MAX || !rt->quota ||
        !rt->route || !fifo_pop(r->fifo, qi->domain, qi->key, &r->e)) {
        rec_end(r);
        return;
    }
    kvm_ident_t id;
    int rc = kvm_ident_init(&id, qi->tenant, r->e.domain[0] ? r->e.domain : NULL, r->e.key,
                            strlen(r->e.key));
    if (rc == 0) {
        rc = route_lookup(rt->route, &id, rec_looked, r);
        kvm_ident_free(&id);
    }
    if (rc)
        rec_skip(r);
}

static bool recover_start(kvm_op_t *op, struct kvm_item *it, const tn_op_view_t *v)
{
    kvm_rt_t *rt = op->rt;
    struct kvm_quota *q = rt->quota;
    struct kvm_qitem *qi = it->q;
    if (!q || !rt->cfg.tenant_quota_evict || qi->recoveries || qi->is_delete)
        return false;
    uint32_t pidx = 0;
    while (pidx < q->n && strcmp(q->pol[pidx].tenant, qi->tenant) != 0)
        pidx++;
    if (pidx == q->n || q->fifo[pidx].n == 0)
        return false;
    struct rec *r = calloc(1, sizeof(*r));
    if (!r)
        return false;
    qi->recoveries++;
    r->op = op;
    r->it = it;
    r->fifo = &q->fifo[pidx];
    kvm_route_init(&r->cur);
    const tn_usage_t *u = v ? &v->usage : NULL;
    const struct kvm_store_tenant_policy *p = &q->pol[pidx];
    if (u && (u->committed_bytes || u->committed_objects)) {
        r->need_b =
            (int64_t)(u->committed_bytes + u->pending_bytes + it->len) - (int64_t)p->max_bytes;
        r->need_o =
            (int64_t)(u->committed_objects + u->pending_objects + 1) - (int64_t)p->max_objects;
    } else {
        r->need_b = 1; /* unknown: one object */
        r->need_o = 1;
    }
    rec_next(r);
    return true;
}

static void reserved_cb(void *arg, int rc, const tn_op_view_t *v)
{
    struct qctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    free(c);
    struct kvm_qitem *qi = it->q;
    kvm_q_cont cont = qi->cont;
    if (rc == KVMESH_ECONFLICT && !qi->none_retry) {
        /* the route predates the tenant's accounting (or the row is at NONE): reserve as the
         * accounting sees the object */
        qi->none_retry = true;
        kvm_route_version_t none = KVM_ROUTE_VERSION_NONE;
        reserve_send(op, it, &none);
        return;
    }
    if (rc == KVMESH_EQUOTA && recover_start(op, it, v))
        return;
    qcount(op->rt, OBS_QOP_RESERVE, rc == KVMESH_ENOENT && qi->is_delete ? 0 : rc);
    if (rc == KVMESH_ENOENT && qi->is_delete) {
        /* nothing committed in accounting (written before the policy): remove without it */
        kvm_quota_item_free(it);
        qi = NULL;
        rc = 0;
    } else if (rc == 0) {
        qi->state = KVM_Q_RESERVED;
        qi->acct_pred = v->op ? v->op->expected_route : KVM_ROUTE_VERSION_NONE;
        it->pub_op = qi->content_op;
        it->pub_op_set = true;
    }
    if (rc) {
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        kvm_errf(rc, "%s", msg);
    }
    cont(op, it, rc);
}

static void reserve_send(kvm_op_t *op, struct kvm_item *it, const kvm_route_version_t *expected)
{
    kvm_rt_t *rt = op->rt;
    struct kvm_qitem *qi = it->q;
    if (!rt->quota) {
        qi->cont(op, it, kvm_errf(KVMESH_ECANCELED, "runtime closing"));
        return;
    }
    tn_reserve_req_t req = {.tenant = qi->tenant,
                            .domain = qi->domain,
                            .key = qi->key,
                            .op_id = qi->op_id,
                            .is_delete = qi->is_delete,
                            .next_len = qi->is_delete ? 0 : it->len,
                            .expected_route = *expected};
    struct qctx *c = qctx_new(op, it);
    int rc = c ? tn_reserve(rt->quota->tn, &req, reserved_cb, c) : KVMESH_ENOMEM;
    if (rc) {
        free(c);
        qi->cont(op, it, rc);
    }
}

static void put_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct qctx *c = arg;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    free(c);
    if (rc != 0 && rc != KVMESH_ENOENT) {
        it->q->cont(op, it,
                    kvm_errf(rc, "route lookup before the quota reservation failed: %s",
                             kvmesh_strerror(rc)));
        return;
    }
    it->q->expected = rc == 0 && r ? r->version : KVM_ROUTE_VERSION_NONE;
    reserve_send(op, it, &it->q->expected);
}

void kvm_quota_put_reserve(kvm_op_t *op, struct kvm_item *it, kvm_q_cont cont)
{
    int rc = kvm_quota_item_init(op->rt, it, false);
    if (rc) {
        cont(op, it, rc);
        return;
    }
    it->q->cont = cont;
    struct qctx *c = qctx_new(op, it);
    rc = c ? route_lookup(op->rt->route, &it->ident, put_looked_up, c) : KVMESH_ENOMEM;
    if (rc) {
        free(c);
        cont(op, it, rc);
    }
}

void kvm_quota_del_reserve(kvm_op_t *op, struct kvm_item *it, const kvm_route_t *cur,
                           kvm_q_cont cont)
{
    int rc = kvm_quota_item_init(op->rt, it, true);
    if (rc) {
        cont(op, it, rc);
        return;
    }
    it->q->cont = cont;
    reserve_send(op, it, &cur->version);
}

static void claimed_cb(void *arg, int rc, const tn_op_view_t *v)
{
    struct qctx *c = arg;
    (void)v;
    struct kvm_item *it = c->it;
    kvm_op_t *op = c->op;
    free(c);
    qcount(op->rt, OBS_QOP_CLAIM, rc);
    if (rc == 0 && op->rt->quota && atomic_load(&op->rt->quota->test_kill))
        raise(SIGKILL); /* test-only: the writer dies between its claim and its route CAS */
    if (rc == 0)
        it->q->state = KVM_Q_CLAIMED;
    else
        kvm_errf(rc, "quota claim before the route CAS refused: %s", kvmesh_last_error());
    it->q->cont(op, it, rc);
}

static void claim_send(kvm_op_t *op, struct kvm_item *it, const kvm_route_version_t *next,
                       kvm_q_cont cont)
{
    struct kvm_qitem *qi = it->q;
    if (!op->rt->quota) {
        cont(op, it, kvm_errf(KVMESH_ECANCELED, "runtime closing"));
        return;
    }
    uint8_t payload[KVM_PUT_PAYLOAD_MAX];
    size_t pl = kvm_quota_put_payload(it, payload);
    qi->predicted = *next;
    qi->cont = cont;
    tn_claim_req_t req = {.tenant = qi->tenant,
                          .domain = qi->domain,
                          .key = qi->key,
                          .op_id = qi->op_id,
                          .generation = op->rt->generation,
                          .fencing_token = next->fencing_token,
                          .publish_token = qi->content_op.seq,
                          .next_version = *next,
                          .payload = payload,
                          .payload_len = pl};
    struct qctx *c = qctx_new(op, it);
    int rc = c ? tn_claim(op->rt->quota->tn, &req, claimed_cb, c) : KVMESH_ENOMEM;
    if (rc) {
        free(c);
        cont(op, it, rc);
    }
}

void kvm_quota_claim(kvm_op_t *op, struct kvm_item *it, const kvm_route_version_t *expected,
                     kvm_q_cont cont)
{
    /* The primary assigns the version; under a stable primary it is the next of its token.
     * A put admitted with NONE against a row deleted at V (its tombstone due or purged) follows
     * V: the route side writes above it (shard sequence, route floor), and tn_claim requires
     * next > V. */
    kvm_route_version_t base = *expected;
    if (kvm_route_version_cmp(&it->q->acct_pred, &base) > 0)
        base = it->q->acct_pred;
    kvm_route_version_t next = {base.fencing_token ? base.fencing_token : 1,
                                base.primary_sequence + 1};
    if (kvm_route_version_is_none(&base))
        next = (kvm_route_version_t){1, 1};
    claim_send(op, it, &next, cont);
}

static void finalized_cb(void *arg, int rc, const tn_op_view_t *v)
{
    struct qctx *c = arg;
    (void)v;
    struct kvm_item *it = c->it;
    kvm_op_t *op = c->op;
    free(c);
    struct kvm_qitem *qi = it->q;
    qcount(op->rt, OBS_QOP_FINALIZE, rc);
    if (rc == 0) {
        qi->state = KVM_Q_FINALIZED;
        struct kvm_quota *q = op->rt->quota;
        for (uint32_t i = 0; q && !qi->is_delete && i < q->n; i++)
            if (strcmp(q->pol[i].tenant, qi->tenant) == 0)
                fifo_push(&q->fifo[i], qi->domain, qi->key, it->len);
    }
    /* a failed finalize is the reconciler's: the route carries the operation id */
    it->q->cont(op, it, 0);
}

static void finalize_send(kvm_op_t *op, struct kvm_item *it)
{
    struct kvm_qitem *qi = it->q;
    if (!op->rt->quota) {
        qi->cont(op, it, 0);
        return;
    }
    struct qctx *c = qctx_new(op, it);
    /* a remove records its tombstone's deadline D, the one the applied route carries */
    uint64_t d = qi->is_delete ? qi->route.retain_until_ms : 0;
    int rc = c ? tn_finalize_tomb(op->rt->quota->tn, qi->tenant, qi->domain, qi->key, qi->op_id,
                                  qi->route.version, d, finalized_cb, c)
               : KVMESH_ENOMEM;
    if (rc) {
        free(c);
        qi->cont(op, it, 0);
    }
}

static void reclaimed_then_finalize(kvm_op_t *op, struct kvm_item *it, int rc)
{
    struct kvm_qitem *qi = it->q;
    qi->cont = qi->final_cont;
    if (rc) { /* left PUBLISHING: the reconciler finalizes it from the route */
        qi->cont(op, it, 0);
        return;
    }
    finalize_send(op, it);
}

void kvm_quota_finalize(kvm_op_t *op, struct kvm_item *it, const kvm_route_t *r, kvm_q_cont cont)
{
    struct kvm_qitem *qi = it->q;
    kvm_route_free(&qi->route);
    int rc = kvm_route_copy(&qi->route, r);
    qi->cont = cont;
    if (rc) {
        cont(op, it, 0);
        return;
    }
    if (!kvm_route_version_equal(&qi->predicted, &r->version)) {
        /* the primary assigned another version: record it by a replay claim (same token) */
        qi->final_cont = cont;
        claim_send(op, it, &r->version, reclaimed_then_finalize);
        return;
    }
    finalize_send(op, it);
}

static void aborted_cb(void *arg, int rc, const tn_op_view_t *v)
{
    (void)v;
    qcount(arg, OBS_QOP_ABORT, rc); /* tn_close: no callback after it, so rt is alive */
}

void kvm_quota_abort(kvm_rt_t *rt, struct kvm_item *it)
{
    struct kvm_qitem *qi = it->q;
    if (!qi || !rt->quota || qi->state != KVM_Q_RESERVED)
        return;
    qi->state = KVM_Q_ABORTED;
    if (tn_abort(rt->quota->tn, qi->tenant, qi->domain, qi->key, qi->op_id, aborted_cb, rt) != 0)
        qcount(rt, OBS_QOP_ABORT, KVMESH_EINTERNAL);
}
