// SPDX-License-Identifier: Apache-2.0
/*
 * quota.c — owns the store's side of the tenant quota protocol (quota.h, docs/tenancy.md): the
 * runtime's tn_t, policy bootstrap at open, per-item reserve/claim/finalize/abort around the
 * put and remove paths of ops.c, and the reconciliation timer. Loop thread only.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "store/put_payload.h"
#include "store/quota.h"
#include "store/store.h"

#define QUOTA_RECON_MS   1000u /* reconciliation period */
#define QUOTA_RECON_PAGE 64u   /* due entries per state per pass */
#define QUOTA_FIFO_MAX   1024u /* recently written objects remembered per tenant (recovery) */
#define QUOTA_EVICT_MAX  16u   /* objects one recovery may evict */

/* An object this runtime finalized for a tenant, oldest first (tenant-local recovery). */
struct qfifo_ent {
    char domain[TN_DOMAIN_CAP];
    char *key;
    uint64_t len;
};
struct qfifo {
    struct qfifo_ent e[QUOTA_FIFO_MAX];
    uint32_t head, n;
};

struct kvm_quota {
    tn_t *tn;
    uint32_t n;
    struct kvm_store_tenant_policy pol[KVM_STORE_TENANT_POLICIES_MAX];
    struct qfifo fifo[KVM_STORE_TENANT_POLICIES_MAX]; /* per policy: this runtime's writes */
    uint64_t recovery_evictions;
    /* open */
    uint32_t boot_next;
    kvm_q_open_cb open_cb;
    kvm_quota_hooks_t hooks; /* calls up into ops.c and quota_tomb.c (kvm_quota_open) */
    /* reconciliation */
    env_timer_id recon_timer;
    uint32_t recon_next;
    bool recon_running, closing;
    uint32_t degraded_passes;
    uint64_t recon_trips_at_start, recon_round_trips; /* metadata calls made by passes */
    uint64_t round_backlog, round_degraded;           /* sums of the round in progress */
    void *tomb_waiting; /* quota_tomb.c: its tombstones waiting for a tenant-layer callback */
    /* test-only (kvm_quota_test_fail_after_claim): claims still to be followed by a failed CAS */
    _Atomic uint32_t test_fail_n;
    _Atomic int test_fail_rc;
    _Atomic bool test_kill; /* kvm_quota_test_kill_after_claim */
};

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

static void fifo_clear(struct qfifo *f)
{
    for (uint32_t i = 0; i < f->n; i++)
        free(f->e[(f->head + i) % QUOTA_FIFO_MAX].key);
    f->n = 0;
}

static tn_policy_t to_tn(const struct kvm_store_tenant_policy *p)
{
    return (tn_policy_t){.policy_version = p->policy_version,
                         .max_bytes = p->max_bytes,
                         .max_objects = p->max_objects};
}

static const struct kvm_store_tenant_policy *find_policy(struct kvm_quota *q, const char *t,
                                                         size_t len)
{
    for (uint32_t i = 0; q && i < q->n; i++)
        if (strlen(q->pol[i].tenant) == len && memcmp(q->pol[i].tenant, t, len) == 0)
            return &q->pol[i];
    return NULL;
}

/* The result label of a quota call's rc (kvmesh_quota_operations_total). A refusal names bytes or
 * objects in its message (src/tenant/quota.c check_fits, the batch messages below). */
static enum obs_dim_qres qres_of(int rc)
{
    switch (rc) {
    case 0:
        return OBS_QRES_OK;
    case KVMESH_EQUOTA:
        return strstr(kvmesh_last_error(), "objects quota") ? OBS_QRES_QUOTA_OBJECTS
                                                            : OBS_QRES_QUOTA_BYTES;
    case KVMESH_ETOOBIG:
        return OBS_QRES_TOO_BIG;
    case KVMESH_EAGAIN:
        return OBS_QRES_BUSY;
    case KVMESH_ECONFLICT:
        return OBS_QRES_CONFLICT;
    case KVMESH_ECANCELED:
        return OBS_QRES_CANCELED;
    default:
        return OBS_QRES_ERROR;
    }
}

static void qcount(kvm_rt_t *rt, enum obs_dim_qop what, int rc)
{
    obs_count(rt->metrics, quota_operations_total, what, qres_of(rc), 1);
}

bool kvm_quota_applies(kvm_rt_t *rt, const kvm_ident_t *id)
{
    return rt->quota && find_policy(rt->quota, kvm_ident_tenant(id), id->tenant_len) != NULL;
}

/* ---- reconciliation --------------------------------------------------------------------- */

struct lk_ctx {
    tn_lookup_cb cb;
    void *arg;
};

static void recon_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct lk_ctx *c = arg;
    tn_route_obs_t obs = {0};
    if (rc == KVMESH_ENOENT || (rc == 0 && !r)) {
        rc = 0;
    } else if (rc == 0) {
        obs.found = true;
        obs.tombstone = kvm_route_is_tombstone(r);
        obs.version = r->version;
        obs.predecessor = r->predecessor_version;
        obs.retain_until_ms = obs.tombstone ? r->retain_until_ms : 0;
        ks_opid_format(obs.content_op, r->content_op.epoch, r->content_op.seq);
    }
    c->cb(c->arg, rc, rc ? NULL : &obs);
    free(c);
}

static void recon_lookup(void *ctx, const char *tenant, const char *domain, const char *key,
                         tn_lookup_cb cb, void *arg)
{
    kvm_rt_t *rt = ctx;
    kvm_ident_t id;
    struct lk_ctx *c = malloc(sizeof(*c));
    int rc = c ? kvm_ident_init(&id, tenant, domain && domain[0] ? domain : NULL, key, strlen(key))
               : KVMESH_ENOMEM;
    if (rc == 0) {
        c->cb = cb;
        c->arg = arg;
        rc = rt->route ? route_lookup(rt->route, &id, recon_looked_up, c) : KVMESH_ECANCELED;
        kvm_ident_free(&id);
        if (rc == 0)
            return;
    }
    free(c);
    cb(arg, rc, NULL);
}

static void recon_arm(kvm_rt_t *rt);

static void recon_step(kvm_rt_t *rt);

static void recon_count(kvm_rt_t *rt, const tn_recon_report_t *r)
{
    struct obs_registry *m = rt->metrics;
    obs_count(m, quota_reconciliations_total, OBS_QRECON_ABORTED, OBS_NONE,
              r->aborted + r->superseded); /* expired PENDING, or superseded PUBLISHING */
    obs_count(m, quota_reconciliations_total, OBS_QRECON_FINALIZED, OBS_NONE, r->finalized);
    obs_count(m, quota_reconciliations_total, OBS_QRECON_REPLAYED, OBS_NONE, r->replayed);
    obs_count(m, quota_reconciliations_total, OBS_QRECON_DEGRADED, OBS_NONE, r->degraded);
    obs_count(m, quota_reconciliations_total, OBS_QRECON_PURGED, OBS_NONE, r->purged);
}

/* After a tenant's pass: its usage row (one exact read) for the backlog gauge, then the next
 * tenant. The read counts as reconciliation round trips. */
static void recon_usage(void *arg, int rc, const tn_usage_t *u)
{
    kvm_rt_t *rt = arg;
    struct kvm_quota *q = rt->quota;
    if (!q || q->closing)
        return;
    tn_stats_t st;
    tn_get_stats(q->tn, &st);
    q->recon_round_trips += st.meta_round_trips - q->recon_trips_at_start;
    if (rc == 0 && u)
        q->round_backlog += u->n_pending + u->n_publishing;
    q->recon_running = false;
    q->recon_next++;
    recon_step(rt);
}

static void recon_done(void *arg, const tn_recon_report_t *r)
{
    kvm_rt_t *rt = arg;
    struct kvm_quota *q = rt->quota;
    tn_stats_t st;
    tn_get_stats(q->tn, &st);
    q->recon_round_trips += st.meta_round_trips - q->recon_trips_at_start;
    if (r->degraded)
        q->degraded_passes++;
    recon_count(rt, r);
    q->round_degraded += r->degraded;
    q->recon_running = false;
    if (q->closing)
        return;
    if (r->more) { /* the same tenant again at once: bounded pages, no unbounded pass */
        recon_step(rt);
        return;
    }
    q->recon_trips_at_start = st.meta_round_trips;
    q->recon_running = true;
    if (tn_get_usage(q->tn, q->pol[q->recon_next].tenant, recon_usage, rt) != 0)
        recon_usage(rt, KVMESH_EINTERNAL, NULL);
}

static void recon_step(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    if (q->recon_next >= q->n) { /* a round over every tenant ended */
        obs_gauge_set(rt->metrics, quota_reconciliation_backlog, OBS_NONE, OBS_NONE,
                      (int64_t)q->round_backlog);
        obs_gauge_set(rt->metrics, quota_reconciliation_degraded, OBS_NONE, OBS_NONE,
                      (int64_t)q->round_degraded);
        q->round_backlog = q->round_degraded = 0;
        q->recon_next = 0;
        recon_arm(rt);
        return;
    }
    /* replay: a delete's tombstone through the current fenced primary (quota_tomb.c) */
    tn_route_ops_t ops = {.lookup = recon_lookup, .replay = q->hooks.replay, .ctx = rt};
    q->recon_running = true;
    tn_stats_t st;
    tn_get_stats(q->tn, &st);
    q->recon_trips_at_start = st.meta_round_trips;
    if (tn_recon_pass(q->tn, q->pol[q->recon_next].tenant, &ops, QUOTA_RECON_PAGE, recon_done,
                      rt) != 0) {
        q->recon_running = false;
        q->recon_next = 0;
        recon_arm(rt);
    }
}

static void recon_tick(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->quota->recon_timer = 0;
    if (!rt->quota->closing && !rt->quota->recon_running)
        recon_step(rt);
}

static void recon_arm(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    if (!q->closing && !q->recon_timer)
        q->recon_timer = env_timer_start(rt->env, QUOTA_RECON_MS * 1000000ull, recon_tick, rt);
}

/* ---- open / close ---------------------------------------------------------------------- */

static void boot_next(kvm_rt_t *rt);

static void booted(void *arg, int rc, const tn_op_view_t *v)
{
    kvm_rt_t *rt = arg;
    (void)v;
    struct kvm_quota *q = rt->quota;
    if (rc) {
        char msg[600];
        snprintf(msg, sizeof(msg), "tenant_policies: tenant '%s' refused at startup: %s",
                 q->pol[q->boot_next].tenant, kvmesh_last_error());
        q->open_cb(rt, rc, msg);
        return;
    }
    q->boot_next++;
    boot_next(rt);
}

static void boot_next(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    if (q->boot_next == q->n) {
        recon_arm(rt);
        kvm_quota_claim_hook(rt, true); /* this runtime's primaries claim in their CAS */
        q->open_cb(rt, 0, "");
        return;
    }
    tn_policy_t p = to_tn(&q->pol[q->boot_next]);
    int rc = tn_bootstrap(q->tn, q->pol[q->boot_next].tenant, &p, booted, rt);
    if (rc)
        booted(rt, rc, NULL);
}

void kvm_quota_open(kvm_rt_t *rt, const kvm_quota_hooks_t *hooks, kvm_q_open_cb cb)
{
    KVM_ASSERT(hooks && hooks->release_replica && hooks->commit_replica && hooks->replay &&
               hooks->tomb_close);
    if (rt->cfg.n_tenant_policies == 0) {
        cb(rt, 0, "");
        return;
    }
    struct kvm_quota *q = calloc(1, sizeof(*q));
    if (!q) {
        cb(rt, KVMESH_ENOMEM, "out of memory");
        return;
    }
    q->n = rt->cfg.n_tenant_policies;
    memcpy(q->pol, rt->cfg.tenant_policies, q->n * sizeof(q->pol[0]));
    q->open_cb = cb;
    q->hooks = *hooks;
    /* terminal history (and, with it, the rows of deletes) is kept as long as tombstones:
     * bounded retention under churn; no retry of an operation outlives it */
    tn_config_t tc = {.deployment = rt->cfg.deployment,
                      .writer_epoch = rt->self.epoch,
                      .timeout_ms = rt->cfg.request_timeout_ms,
                      .retain_ms = rt->cfg.tombstone_retention_ms};
    int rc = tn_new(&q->tn, rt->env, rt->meta, &tc);
    if (rc) {
        free(q);
        cb(rt, rc, kvmesh_last_error());
        return;
    }
    rt->quota = q;
    boot_next(rt);
}

void kvm_quota_close(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    if (!q)
        return;
    q->closing = true;
    kvm_quota_claim_hook(rt, false); /* before tn_close: no claim answers after it */
    env_timer_cancel(rt->env, q->recon_timer);
    q->recon_timer = 0;
    tn_close(q->tn);
    q->hooks.tomb_close(rt); /* what waited for a callback tn_close will not run */
    for (uint32_t i = 0; i < q->n; i++)
        fifo_clear(&q->fifo[i]);
    rt->quota = NULL;
    free(q);
}

void kvm_quota_stats(kvm_rt_t *rt, tn_stats_t *out, uint32_t *degraded_passes)
{
    memset(out, 0, sizeof(*out));
    *degraded_passes = 0;
    if (rt->quota) {
        tn_get_stats(rt->quota->tn, out);
        *degraded_passes = rt->quota->degraded_passes;
    }
}

struct usage_ctx {
    kvm_q_usage_cb cb;
    void *arg;
    tn_policy_t pol;
};

static void usage_read(void *arg, int rc, const tn_usage_t *u)
{
    struct usage_ctx *c = arg;
    c->cb(c->arg, rc, u, &c->pol);
    free(c);
}

int kvm_quota_usage(kvm_rt_t *rt, const char *tenant, kvm_q_usage_cb cb, void *arg)
{
    const struct kvm_store_tenant_policy *p = find_policy(rt->quota, tenant, strlen(tenant));
    if (!p)
        return kvm_errf(KVMESH_ENOENT, "tenant '%s' has no quota policy on this runtime", tenant);
    struct usage_ctx *c = malloc(sizeof(*c));
    if (!c)
        return KVMESH_ENOMEM;
    c->cb = cb;
    c->arg = arg;
    c->pol = to_tn(p);
    int rc = tn_get_usage(rt->quota->tn, tenant, usage_read, c);
    if (rc)
        free(c);
    return rc;
}

/* ---- per item --------------------------------------------------------------------------- */

struct qctx {
    kvm_op_t *op;
    struct kvm_item *it;
};

static struct qctx *qctx_new(kvm_op_t *op, struct kvm_item *it)
{
    struct qctx *c = malloc(sizeof(*c));
    if (c) {
        c->op = op;
        c->it = it;
    }
    return c;
}

static int qitem_init(kvm_rt_t *rt, struct kvm_item *it, bool is_delete)
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
    int rc = qitem_init(op->rt, it, false);
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
    int rc = qitem_init(op->rt, it, true);
    if (rc) {
        cont(op, it, rc);
        return;
    }
    it->q->cont = cont;
    reserve_send(op, it, &cur->version);
}

/* The claim's payload of a put (put_payload.h, version 2: length, checksum, the writer and the
 * replicas' locators, exactly as publish_cas_now builds the route); a delete's is empty. */
static size_t payload_of(const struct kvm_item *it, uint8_t buf[KVM_PUT_PAYLOAD_MAX])
{
    const struct kvm_qitem *qi = it->q;
    if (qi->is_delete)
        return 0;
    kvm_put_payload_t p = {.length = it->len,
                           .checksum = it->checksum,
                           .has_locators = it->n_res > 0,
                           .writer = qi->content_op.writer,
                           .n = it->n_res};
    for (uint32_t i = 0; i < it->n_res && i < KVM_MAX_REPLICAS; i++)
        p.rep[i] = (kvm_hot_replica_t){.owner = it->res[i].owner.id,
                                       .segment = it->res[i].seg,
                                       .offset = it->res[i].offset,
                                       .length = it->len,
                                       .checksum = it->checksum};
    size_t n = 0;
    int rc = kvm_put_payload_encode(&p, buf, KVM_PUT_PAYLOAD_MAX, &n);
    KVM_ASSERT(rc == 0); /* n_res <= KVM_MAX_REPLICAS and the buffer is the largest payload */
    return n;
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
    size_t pl = payload_of(it, payload);
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

/* ---- the claim carried by the route CAS (EmbeddedWrh) ----------------------------------------
 * The claim blob: u8 version (1) | lp16 tenant | lp16 domain | lp16 key | lp16 op id
 * | u64 publish token | lp16 payload | lp32 hint (tn_hint_export of the writer's records).
 * The reply blob: the primary's hint after its claim (tn_hint_export), or empty. */
#define QCLAIM_VERSION 1

bool kvm_quota_cas_claim_wanted(kvm_op_t *op, struct kvm_item *it)
{
    return it->q && it->q->state == KVM_Q_RESERVED && !it->q->cas_claim_off && op->rt->quota &&
           op->rt->cfg.route_mode == ROUTE_MODE_EMBEDDED_WRH;
}

int kvm_quota_claim_blob_raw(kvm_rt_t *rt, const char *tenant, const char *domain, const char *key,
                             const char *op_id, uint64_t publish_token, const uint8_t *payload,
                             size_t payload_len, uint8_t *buf, size_t cap, size_t *len)
{
    static _Thread_local uint8_t hint[TN_HINT_MAX];
    size_t hl = 0;
    if (!rt->quota || tn_hint_export(rt->quota->tn, tenant, op_id, hint, sizeof(hint), &hl) != 0)
        hl = 0; /* no hint: the primary's claim reads first */
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, QCLAIM_VERSION);
    kvm_wr_lp16le(&w, tenant, strlen(tenant));
    kvm_wr_lp16le(&w, domain, strlen(domain));
    kvm_wr_lp16le(&w, key, strlen(key));
    kvm_wr_lp16le(&w, op_id, strlen(op_id));
    kvm_wr_u64le(&w, publish_token);
    kvm_wr_lp16le(&w, payload, payload_len);
    kvm_wr_lp32le(&w, hint, hl);
    if (kvm_wr_finish(&w, len) != 0)
        return kvm_errf(KVMESH_ETOOBIG, "quota claim does not fit %zu bytes", cap);
    return 0;
}

void **kvm_quota_tomb_head(kvm_rt_t *rt)
{
    return rt->quota ? &rt->quota->tomb_waiting : NULL;
}

kvm_q_release_fn kvm_quota_release_fn(kvm_rt_t *rt)
{
    KVM_ASSERT(rt->quota);
    return rt->quota->hooks.release_replica;
}

kvm_q_release_fn kvm_quota_commit_fn(kvm_rt_t *rt)
{
    KVM_ASSERT(rt->quota);
    return rt->quota->hooks.commit_replica;
}

tn_t *kvm_quota_tn(kvm_rt_t *rt)
{
    return rt->quota && !rt->quota->closing ? rt->quota->tn : NULL;
}

int kvm_quota_cas_claim_blob(kvm_op_t *op, struct kvm_item *it, uint8_t *buf, size_t cap,
                             size_t *len)
{
    struct kvm_qitem *qi = it->q;
    uint8_t payload[KVM_PUT_PAYLOAD_MAX];
    size_t pl = payload_of(it, payload);
    qi->cas_claim_sent = true;
    return kvm_quota_claim_blob_raw(op->rt, qi->tenant, qi->domain, qi->key, qi->op_id,
                                    qi->content_op.seq, payload, pl, buf, cap, len);
}

void kvm_quota_cas_claimed(kvm_op_t *op, struct kvm_item *it, int rc, const kvm_route_t *r,
                           const uint8_t *reply, size_t reply_len)
{
    struct kvm_qitem *qi = it->q;
    if (!qi || qi->state != KVM_Q_RESERVED || !qi->cas_claim_sent)
        return;
    if (rc == KVMESH_ENOTSUP) { /* the primary cannot claim: the writer does (4 round trips) */
        qi->cas_claim_off = true;
        return;
    }
    bool ours = r && kvm_op_id_equal(&r->content_op, &qi->content_op);
    if (rc && !ours && op->rt->quota && atomic_load(&op->rt->quota->test_kill))
        raise(SIGKILL);    /* test-only: the primary may have claimed; the writer dies unsettled */
    if (rc == 0 || ours) { /* published with a claim made by its primary */
        qcount(op->rt, OBS_QOP_CLAIM, 0);
        qi->state = KVM_Q_CLAIMED;
        qi->predicted = r ? r->version : qi->predicted;
        if (reply_len && op->rt->quota)
            (void)tn_hint_import(op->rt->quota->tn, reply, reply_len); /* stale: a compare */
    }
}

struct qhook {
    kvm_rt_t *rt;
    route_claim_done_fn done;
    void *done_arg;
    char tenant[TN_TENANT_CAP];
    char op_id[TN_OPID_CAP];
};

uint32_t kvm_quota_test_fail_after_claim(kvm_rt_t *rt, uint32_t n, int rc)
{
    if (!rt->quota)
        return 0;
    atomic_store(&rt->quota->test_fail_rc, rc ? rc : KVMESH_EUNAVAILABLE);
    return atomic_exchange(&rt->quota->test_fail_n, n);
}

void kvm_quota_test_kill_after_claim(kvm_rt_t *rt, bool on)
{
    if (rt->quota)
        atomic_store(&rt->quota->test_kill, on);
}

int kvm_quota_test_fault(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    uint32_t n = q ? atomic_load(&q->test_fail_n) : 0;
    while (n && !atomic_compare_exchange_weak(&q->test_fail_n, &n, n - 1))
        ;
    return n ? atomic_load(&q->test_fail_rc) : 0;
}

static void hook_claimed(void *arg, int rc, const tn_op_view_t *v)
{
    (void)v;
    struct qhook *h = arg;
    int fault = rc == 0 ? kvm_quota_test_fault(h->rt) : 0;
    if (fault) { /* test-only: claimed, and the CAS fails outright (nothing applied) */
        h->done(h->done_arg, kvm_errf(fault, "test fault: route CAS failed after the claim"), NULL,
                0);
        free(h);
        return;
    }
    static _Thread_local uint8_t hint[TN_HINT_MAX];
    size_t hl = 0;
    if (rc == 0 && h->rt->quota && !h->rt->quota->closing &&
        tn_hint_export(h->rt->quota->tn, h->tenant, h->op_id, hint, sizeof(hint), &hl) != 0)
        hl = 0;
    if (rc)
        kvm_errf(rc, "quota claim at the route primary refused: %s", kvmesh_last_error());
    h->done(h->done_arg, rc, hint, hl <= ROUTE_CLAIM_MAX ? hl : 0);
    free(h);
}

static int rd_str(kvm_rd_t *r, char *out, size_t cap)
{
    uint16_t n = 0;
    const uint8_t *p = kvm_rd_lp16le(r, &n);
    if (!p || n >= cap)
        return -1;
    memcpy(out, p, n);
    out[n] = 0;
    return 0;
}

/* route_claim_fn: the claim of a CAS this runtime's primary is about to apply. */
static int claim_hook(void *ctx, const uint8_t *claim, size_t claim_len, const route_claim_at_t *at,
                      route_claim_done_fn done, void *done_arg)
{
    kvm_rt_t *rt = ctx;
    struct kvm_quota *q = rt->quota;
    if (!q || q->closing)
        return kvm_errf(KVMESH_ENOTSUP, "no tenant quota handle here");
    struct qhook *h = calloc(1, sizeof(*h));
    if (!h)
        return KVMESH_ENOMEM;
    char domain[TN_DOMAIN_CAP], key[TN_KEY_CAP];
    kvm_rd_t r;
    kvm_rd_init(&r, claim, claim_len);
    uint8_t ver = kvm_rd_u8(&r);
    int bad = ver != QCLAIM_VERSION;
    bad = bad || rd_str(&r, h->tenant, sizeof(h->tenant)) || rd_str(&r, domain, sizeof(domain)) ||
          rd_str(&r, key, sizeof(key)) || rd_str(&r, h->op_id, sizeof(h->op_id));
    uint64_t publish_token = kvm_rd_u64le(&r);
    uint16_t pl = 0;
    const uint8_t *payload = kvm_rd_lp16le(&r, &pl);
    uint32_t hl = 0;
    const uint8_t *hint = kvm_rd_lp32le(&r, &hl);
    if (bad || !payload || !hint || !kvm_rd_end(&r)) {
        free(h);
        return kvm_errf(KVMESH_EPROTO, "malformed quota claim in a route CAS");
    }
    if (!find_policy(q, h->tenant, strlen(h->tenant))) {
        int rc =
            kvm_errf(KVMESH_ENOTSUP, "tenant '%s' has no quota policy at this primary", h->tenant);
        free(h);
        return rc;
    }
    if (hl)
        (void)tn_hint_import(q->tn, hint, hl); /* a stale or bad hint costs a read, no more */
    h->rt = rt;
    h->done = done;
    h->done_arg = done_arg;
    tn_claim_req_t req = {.tenant = h->tenant,
                          .domain = domain,
                          .key = key,
                          .op_id = h->op_id,
                          .generation = at->generation,
                          .fencing_token = at->fencing_token,
                          .publish_token = publish_token,
                          .next_version = at->next_version,
                          .payload = payload,
                          .payload_len = pl};
    int rc = tn_claim(q->tn, &req, hook_claimed, h);
    if (rc)
        free(h);
    return rc; /* counted by the writer (kvm_quota_cas_claimed), as its own claims are */
}

void kvm_quota_claim_hook(kvm_rt_t *rt, bool on)
{
    if (rt->route && rt->cfg.route_mode == ROUTE_MODE_EMBEDDED_WRH)
        route_set_claim_hook(rt->route, on && rt->quota ? claim_hook : NULL, rt);
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

/* ---- /stats?tenant=ID ----------------------------------------------------------------------- */

struct hop {
    kvm_rt_t *rt;
    char tenant[TN_TENANT_CAP];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs; /* the waiting thread + the loop */
    bool done;
    int rc;
    tn_usage_t u;
    tn_policy_t p;
    tn_stats_t st;
    uint64_t evictions, recon_trips;
    uint32_t degraded_passes;
};

static void hop_unref(struct hop *h)
{
    if (atomic_fetch_sub(&h->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

static void hop_finish(struct hop *h, int rc)
{
    pthread_mutex_lock(&h->mu);
    h->rc = rc;
    h->done = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    hop_unref(h);
}

static void hop_usage(void *arg, int rc, const tn_usage_t *u, const tn_policy_t *p)
{
    struct hop *h = arg;
    if (rc == 0) {
        h->u = *u;
        h->p = *p;
    }
    hop_finish(h, rc);
}

/* The counters are taken before this answer's own usage read, and a reconciliation pass in
 * flight counts its calls so far as reconciliation calls: so meta_round_trips minus
 * recon_round_trips moves only by the calls of writes and earlier answers' reads, whenever it
 * is read (before, a pass in flight at one read and finished at the next shifted its calls from
 * one counter to the other: tenant_store saw -1 quota calls of an idle runtime). */
static void hop_run(void *arg)
{
    struct hop *h = arg;
    struct kvm_quota *q = h->rt->quota;
    if (q) {
        kvm_quota_stats(h->rt, &h->st, &h->degraded_passes);
        h->evictions = q->recovery_evictions;
        h->recon_trips = q->recon_round_trips +
                         (q->recon_running ? h->st.meta_round_trips - q->recon_trips_at_start : 0);
    }
    int rc = q ? kvm_quota_usage(h->rt, h->tenant, hop_usage, h) : KVMESH_ENOENT;
    if (rc)
        hop_finish(h, rc);
}

int kvm_quota_render(kvm_rt_t *rt, const char *tenant, char *buf, size_t cap)
{
    bool configured = false;
    for (uint32_t i = 0; i < rt->cfg.n_tenant_policies; i++)
        configured |= strcmp(rt->cfg.tenant_policies[i].tenant, tenant) == 0;
    if (!configured)
        return KVMESH_ENOENT;
    struct hop *h = calloc(1, sizeof(*h));
    if (!h)
        return KVMESH_ENOMEM;
    h->rt = rt;
    snprintf(h->tenant, sizeof(h->tenant), "%s", tenant);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    atomic_init(&h->refs, 2);
    if (env_post(rt->env, hop_run, h) != 0) {
        atomic_store(&h->refs, 1);
        hop_unref(h);
        return KVMESH_ECANCELED;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += rt->cfg.request_timeout_ms / 1000 + 1;
    pthread_mutex_lock(&h->mu);
    while (!h->done)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until) != 0)
            break;
    bool done = h->done;
    int rc = h->rc;
    pthread_mutex_unlock(&h->mu);
    if (!done) {
        hop_unref(h);
        return KVMESH_ETIMEDOUT;
    }
    if (rc == 0) {
        const tn_usage_t *u = &h->u;
        snprintf(buf, cap,
                 "{\"policy_version\":%" PRIu32 ",\"max_bytes\":%" PRIu64
                 ",\"max_objects\":%" PRIu64 ",\"used_bytes\":%" PRIu64 ",\"used_objects\":%" PRIu64
                 ",\"committed_bytes\":%" PRIu64 ",\"committed_objects\":%" PRIu64
                 ",\"pending_bytes\":%" PRIu64 ",\"pending_objects\":%" PRIu64
                 ",\"ops_pending\":%" PRIu64 ",\"ops_publishing\":%" PRIu64
                 ",\"recon_backlog\":%" PRIu64 ",\"recon_degraded\":%" PRIu64
                 ",\"recovery_evictions\":%" PRIu64 ",\"meta_round_trips\":%" PRIu64
                 ",\"recon_round_trips\":%" PRIu64 ",\"last_error\":\"%s\"}",
                 h->p.policy_version, h->p.max_bytes, h->p.max_objects,
                 u->committed_bytes + u->pending_bytes, u->committed_objects + u->pending_objects,
                 u->committed_bytes, u->committed_objects, u->pending_bytes, u->pending_objects,
                 u->n_pending, u->n_publishing, u->n_pending + u->n_publishing,
                 h->st.recon_degraded, h->evictions, h->st.meta_round_trips, h->recon_trips,
                 h->st.last_error ? kvmesh_strerror(h->st.last_error) : "");
    }
    hop_unref(h);
    return rc;
}

/* ---- a pass on request (kvmesh admin quota TENANT reconcile --apply) --------------------- */

#define QUOTA_NOW_RETRY_MS 50u

struct rnow {
    kvm_rt_t *rt;
    char tenant[TN_TENANT_CAP];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs; /* the waiting thread + the loop */
    bool done;
    int rc;
    uint32_t tries;
    tn_recon_report_t rep;
    tn_stats_t st; /* the runtime's protocol counters after the pass */
};

static void rnow_unref(struct rnow *n)
{
    if (atomic_fetch_sub(&n->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n);
}

static void rnow_finish(struct rnow *n, int rc, const tn_recon_report_t *r)
{
    pthread_mutex_lock(&n->mu);
    n->rc = rc;
    if (r)
        n->rep = *r;
    n->done = true;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    rnow_unref(n);
}

static void rnow_done(void *arg, const tn_recon_report_t *r)
{
    struct rnow *n = arg;
    struct kvm_quota *q = n->rt->quota;
    q->recon_running = false;
    if (r->degraded)
        q->degraded_passes++;
    recon_count(n->rt, r);
    recon_arm(n->rt); /* a timer tick that found this pass running did not re-arm */
    tn_get_stats(q->tn, &n->st);
    q->recon_round_trips += n->st.meta_round_trips - q->recon_trips_at_start;
    rnow_finish(n, 0, r);
}

static void rnow_run(void *arg)
{
    struct rnow *n = arg;
    kvm_rt_t *rt = n->rt;
    struct kvm_quota *q = rt->quota;
    if (!q || q->closing || !find_policy(q, n->tenant, strlen(n->tenant))) {
        rnow_finish(n, KVMESH_ENOENT, NULL);
        return;
    }
    if (q->recon_running) { /* the timer's pass: try again shortly (bounded) */
        if (++n->tries > 200) {
            rnow_finish(n, KVMESH_EAGAIN, NULL);
            return;
        }
        env_timer_start(rt->env, QUOTA_NOW_RETRY_MS * 1000000ull, rnow_run, n);
        return;
    }
    /* replay: a delete's tombstone through the current fenced primary (quota_tomb.c) */
    tn_route_ops_t ops = {.lookup = recon_lookup, .replay = q->hooks.replay, .ctx = rt};
    q->recon_running = true;
    tn_stats_t st;
    tn_get_stats(q->tn, &st);
    q->recon_trips_at_start = st.meta_round_trips; /* counted as a pass's, as the timer's */
    if (tn_recon_pass(q->tn, n->tenant, &ops, QUOTA_RECON_PAGE, rnow_done, n) != 0) {
        q->recon_running = false;
        rnow_finish(n, KVMESH_EAGAIN, NULL);
    }
}

int kvm_quota_reconcile_now(kvm_rt_t *rt, const char *tenant, tn_recon_report_t *out,
                            tn_stats_t *totals)
{
    memset(out, 0, sizeof(*out));
    memset(totals, 0, sizeof(*totals));
    struct rnow *n = calloc(1, sizeof(*n));
    if (!n)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    n->rt = rt;
    snprintf(n->tenant, sizeof(n->tenant), "%s", tenant);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    atomic_init(&n->refs, 2);
    if (env_post(rt->env, rnow_run, n) != 0) {
        atomic_store(&n->refs, 1);
        rnow_unref(n);
        return kvm_errf(KVMESH_ECANCELED, "the runtime is closing");
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(8 * (uint64_t)rt->cfg.request_timeout_ms / 1000 + 1 + 10);
    pthread_mutex_lock(&n->mu);
    while (!n->done)
        if (pthread_cond_timedwait(&n->cv, &n->mu, &until) != 0)
            break;
    bool done = n->done;
    int rc = done ? n->rc : KVMESH_ETIMEDOUT;
    if (done) {
        *out = n->rep;
        *totals = n->st;
    }
    pthread_mutex_unlock(&n->mu);
    rnow_unref(n);
    if (rc == KVMESH_ENOENT)
        return kvm_errf(rc, "tenant '%s' has no policy in this runtime", tenant);
    if (rc)
        return kvm_errf(rc, "reconciliation pass of tenant '%s' did not run (%s)", tenant,
                        done ? "the reconciler stayed busy" : "no answer in time");
    return 0;
}

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
        int rc = qitem_init(rt, it, false);
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
