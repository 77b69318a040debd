// SPDX-License-Identifier: Apache-2.0
/*
 * quota_batch.c — a put batch's quota reservation (quota.h kvm_quota_put_batch, docs/tenancy.md):
 * canonical order, chunks of TN_BATCH_MAX, all-or-nothing before any data transfer. Loop thread
 * only.
 */
#include <inttypes.h>
#include <stdio.h>

#include "store/quota_int.h"

/* ---- batches: canonical order, all-or-nothing before data transfer ------------------------ */

/* A put batch's quota items (any number up to KVMESH_BATCH_MAX) are reserved in canonical
 * scoped-key order (the objects/ key of each) in consecutive chunks of at most TN_BATCH_MAX, one
 * tn_reserve_batch each (which aborts its own chunk on a refusal); a refusal in chunk k aborts
 * the items of chunks 0..k-1 too, one after another in reverse order, before any item is
 * answered: all-or-nothing before any data transfer.
 *
 *   LOOKUPS --all looked up--> CHUNK(at) --chunk reserved, at < n--> CHUNK(at + m)
 *                                 |                  at == n: every item RESERVED, continued
 *                                 +--refused--> UNWIND (abort order[at-1] .. order[0]) --> every
 *                                               item answered with the refusal naming its item */
struct qbatch {
    kvm_op_t *op;
    kvm_q_cont cont;
    size_t n, looked, failed_index;
    int fail_rc;
    char fail_msg[400];
    struct kvm_item **its;
    kvm_route_version_t *expected;
    size_t *order;          /* canonical order: indexes into its */
    size_t at, chunk_n;     /* the chunk in flight: order[at .. at + chunk_n) */
    tn_reserve_req_t *reqs; /* the chunk's requests (TN_BATCH_MAX) */
};

struct qb_lk {
    struct qbatch *b;
    size_t i;
};

static void qbatch_free(struct qbatch *b)
{
    free(b->its);
    free(b->expected);
    free(b->order);
    free(b->reqs);
    free(b);
}

static void qbatch_fail_all(struct qbatch *b, int rc, const char *msg)
{
    for (size_t i = 0; i < b->n; i++) {
        kvm_errf(rc, "%s", msg);
        b->cont(b->op, b->its[i], rc);
    }
    qbatch_free(b);
}

/* The refusal's own message is gone by the time the batch callback runs (the aborts of the
 * reserved items ran first), so an EQUOTA is described again from the usage row. */
static void qbatch_usage(void *arg, int rc, const tn_usage_t *u, const tn_policy_t *p)
{
    struct qbatch *b = arg;
    char msg[500];
    uint64_t bytes = 0;
    for (size_t i = 0; i < b->n; i++)
        bytes += b->its[i]->len;
    const char *tenant = b->its[0]->q->tenant;
    const char *fkey = b->its[b->failed_index]->q->key;
    if (rc == 0 && u->committed_objects + u->pending_objects + b->n > p->max_objects)
        snprintf(
            msg, sizeof(msg),
            "batch refused as a whole (item %zu of %zu, key '%.80s'): tenant '%s': objects quota "
            "exceeded: committed %" PRIu64 " + pending %" PRIu64 " + up to %zu requested > "
            "max_objects %" PRIu64,
            b->failed_index, b->n, fkey, tenant, u->committed_objects, u->pending_objects, b->n,
            p->max_objects);
    else if (rc == 0)
        snprintf(
            msg, sizeof(msg),
            "batch refused as a whole (item %zu of %zu, key '%.80s'): tenant '%s': bytes quota "
            "exceeded: committed %" PRIu64 " + pending %" PRIu64 " + up to %" PRIu64
            " requested > max_bytes %" PRIu64,
            b->failed_index, b->n, fkey, tenant, u->committed_bytes, u->pending_bytes, bytes,
            p->max_bytes);
    else
        snprintf(msg, sizeof(msg),
                 "batch refused as a whole (item %zu of %zu, key '%.80s'): tenant '%s': quota "
                 "exceeded",
                 b->failed_index, b->n, fkey, tenant);
    obs_count(b->op->rt->metrics, quota_operations_total, OBS_QOP_RESERVE,
              strstr(msg, "objects quota") ? OBS_QRES_QUOTA_OBJECTS : OBS_QRES_QUOTA_BYTES, 1);
    qbatch_fail_all(b, KVMESH_EQUOTA, msg);
}

/* Every item is aborted again: answer the refusal (an EQUOTA described from the usage row). */
static void qbatch_refused(struct qbatch *b)
{
    int rc = b->fail_rc;
    if (rc != KVMESH_EQUOTA || !b->op->rt->quota)
        qcount(b->op->rt, OBS_QOP_RESERVE, rc); /* EQUOTA: counted once its reason is known */
    if (rc == KVMESH_EQUOTA && b->op->rt->quota &&
        kvm_quota_usage(b->op->rt, b->its[0]->q->tenant, qbatch_usage, b) == 0)
        return;
    char msg[500];
    snprintf(msg, sizeof(msg), "batch refused as a whole (item %zu of %zu, key '%.80s'): %s",
             b->failed_index, b->n, b->its[b->failed_index]->q->key, kvmesh_strerror(rc));
    qbatch_fail_all(b, rc, msg);
}

/* UNWIND: the items of the chunks reserved before the refused one, aborted one at a time. */
static void qbatch_unwind(struct qbatch *b);

static void qbatch_unwound(void *arg, int rc, const tn_op_view_t *v)
{
    struct qbatch *b = arg;
    (void)v; /* a failed abort stays PENDING: expiry reconciliation aborts it */
    qcount(b->op->rt, OBS_QOP_ABORT, rc);
    qbatch_unwind(b);
}

static void qbatch_unwind(struct qbatch *b)
{
    while (b->at > 0 && b->op->rt->quota) {
        struct kvm_qitem *qi = b->its[b->order[--b->at]]->q;
        if (tn_abort(b->op->rt->quota->tn, qi->tenant, qi->domain, qi->key, qi->op_id,
                     qbatch_unwound, b) == 0)
            return;
    }
    qbatch_refused(b);
}

static void qbatch_chunk(struct qbatch *b);

static void qbatch_reserved(void *arg, int rc, size_t failed_index)
{
    struct qbatch *b = arg;
    if (rc) { /* the chunk aborted its own items; failed_index is within the chunk */
        KVM_ASSERT(failed_index < b->chunk_n);
        b->fail_rc = rc;
        b->failed_index = b->order[b->at + failed_index];
        qbatch_unwind(b);
        return;
    }
    b->at += b->chunk_n;
    qbatch_chunk(b);
}

/* Every quota item of the batch is reserved: each continues to placement. */
static void qbatch_all_reserved(struct qbatch *b)
{
    obs_count(b->op->rt->metrics, quota_operations_total, OBS_QOP_RESERVE, OBS_QRES_OK, b->n);
    for (size_t i = 0; i < b->n; i++) {
        struct kvm_item *it = b->its[i];
        it->q->state = KVM_Q_RESERVED;
        it->pub_op = it->q->content_op;
        it->pub_op_set = true;
    }
    for (size_t i = 0; i < b->n; i++)
        b->cont(b->op, b->its[i], 0);
    qbatch_free(b);
}

/* CHUNK: reserves order[at .. at + TN_BATCH_MAX) with one tn_reserve_batch. */
static void qbatch_chunk(struct qbatch *b)
{
    kvm_rt_t *rt = b->op->rt;
    if (b->at == b->n) {
        qbatch_all_reserved(b);
        return;
    }
    b->chunk_n = b->n - b->at < TN_BATCH_MAX ? b->n - b->at : TN_BATCH_MAX;
    for (size_t j = 0; j < b->chunk_n; j++) {
        size_t i = b->order[b->at + j];
        struct kvm_qitem *qi = b->its[i]->q;
        b->reqs[j] = (tn_reserve_req_t){.tenant = qi->tenant,
                                        .domain = qi->domain,
                                        .key = qi->key,
                                        .op_id = qi->op_id,
                                        .next_len = b->its[i]->len,
                                        .expected_route = qi->expected};
    }
    int rc = rt->quota ? tn_reserve_batch(rt->quota->tn, b->reqs, b->chunk_n, qbatch_reserved, b)
                       : kvm_errf(KVMESH_ECANCELED, "runtime closing");
    if (rc) { /* nothing of this chunk reserved */
        b->fail_rc = rc;
        b->failed_index = b->order[b->at];
        qbatch_unwind(b);
    }
}

struct qb_key {
    char *key; /* the objects/ key (owned) */
    size_t i;
};

static int qb_key_cmp(const void *x, const void *y)
{
    return strcmp(((const struct qb_key *)x)->key, ((const struct qb_key *)y)->key);
}

/* The canonical order of the batch's items (their objects/ keys, as tn_reserve_batch orders a
 * chunk), so that consecutive chunks acquire in one global order. */
static int qbatch_order(struct qbatch *b)
{
    kvm_rt_t *rt = b->op->rt;
    struct qb_key *k = calloc(b->n, sizeof(*k));
    int rc = k ? 0 : KVMESH_ENOMEM;
    static _Thread_local char buf[KS_KEY_CAP];
    for (size_t i = 0; rc == 0 && i < b->n; i++) {
        const struct kvm_qitem *qi = b->its[i]->q;
        rc = ks_object_key(buf, sizeof(buf), rt->cfg.deployment, qi->tenant, qi->domain, qi->key);
        k[i].i = i;
        k[i].key = rc == 0 ? strdup(buf) : NULL;
        if (rc == 0 && !k[i].key)
            rc = KVMESH_ENOMEM;
    }
    if (rc == 0)
        qsort(k, b->n, sizeof(*k), qb_key_cmp);
    for (size_t i = 0; k && i < b->n; i++) {
        b->order[i] = k[i].i;
        free(k[i].key);
    }
    free(k);
    return rc;
}

static void qbatch_send(struct qbatch *b)
{
    kvm_rt_t *rt = b->op->rt;
    if (b->fail_rc || !rt->quota) {
        qbatch_fail_all(b, b->fail_rc ? b->fail_rc : KVMESH_ECANCELED,
                        b->fail_rc ? b->fail_msg : "runtime closing");
        return;
    }
    for (size_t i = 0; i < b->n; i++)
        b->its[i]->q->expected = b->expected[i];
    int rc = qbatch_order(b);
    if (rc) {
        char msg[400];
        snprintf(msg, sizeof(msg), "batch quota reservation: %s", kvmesh_strerror(rc));
        qbatch_fail_all(b, rc, msg);
        return;
    }
    qbatch_chunk(b);
}

static void qbatch_looked(void *arg, int rc, const kvm_route_t *r)
{
    struct qb_lk *l = arg;
    struct qbatch *b = l->b;
    size_t i = l->i;
    free(l);
    if (rc == 0 && r)
        b->expected[i] = r->version;
    else if (rc != KVMESH_ENOENT && rc != 0 && !b->fail_rc) {
        b->fail_rc = rc;
        snprintf(b->fail_msg, sizeof(b->fail_msg),
                 "route lookup before the batch's quota reservation failed: %s",
                 kvmesh_strerror(rc));
    }
    if (++b->looked == b->n + 1)
        qbatch_send(b);
}

bool kvm_quota_put_batch(kvm_op_t *op, kvm_q_cont cont)
{
    kvm_rt_t *rt = op->rt;
    size_t n = 0;
    for (size_t i = 0; i < op->n; i++)
        n += kvm_quota_applies(rt, &op->items[i].ident);
    if (n < 2)
        return false; /* one item: the single path (with recovery) */
    struct qbatch *b = calloc(1, sizeof(*b));
    if (b) {
        b->its = calloc(n, sizeof(*b->its));
        b->expected = calloc(n, sizeof(*b->expected));
        b->order = calloc(n, sizeof(*b->order));
        b->reqs = calloc(TN_BATCH_MAX, sizeof(*b->reqs));
    }
    if (!b || !b->its || !b->expected || !b->order || !b->reqs) {
        if (b)
            qbatch_free(b);
        return false;
    }
    b->op = op;
    b->cont = cont;
    for (size_t i = 0; i < op->n; i++) {
        struct kvm_item *it = &op->items[i];
        if (!kvm_quota_applies(rt, &it->ident))
            continue;
        int rc = kvm_quota_item_init(rt, it, false);
        if (rc && !b->fail_rc) {
            b->fail_rc = rc;
            snprintf(b->fail_msg, sizeof(b->fail_msg), "%s", kvmesh_last_error());
        }
        b->its[b->n++] = it;
    }
    if (b->fail_rc) { /* all or nothing: no item of the batch is reserved */
        for (size_t i = 0; i < b->n; i++) {
            kvm_errf(b->fail_rc, "%s", b->fail_msg);
            cont(op, b->its[i], b->fail_rc);
        }
        qbatch_free(b);
        return true;
    }
    /* one extra count held by this loop, so that a synchronous completion cannot free b */
    size_t total = b->n;
    for (size_t i = 0; i < total; i++) {
        struct qb_lk *l = malloc(sizeof(*l));
        int rc = KVMESH_ENOMEM;
        if (l) {
            l->b = b;
            l->i = i;
            rc = route_lookup(rt->route, &b->its[i]->ident, qbatch_looked, l);
        }
        if (rc) {
            if (!l) {
                l = malloc(sizeof(*l));
                if (!l) { /* count it without a context */
                    if (!b->fail_rc)
                        b->fail_rc = rc;
                    b->looked++;
                    continue;
                }
                l->b = b;
                l->i = i;
            }
            qbatch_looked(l, rc, NULL);
        }
    }
    if (++b->looked == b->n + 1)
        qbatch_send(b);
    return true;
}
