// SPDX-License-Identifier: Apache-2.0
/*
 * quota.c — owns the runtime's tenant quota state (quota.h, docs/tenancy.md): the tn_t, policy
 * bootstrap at open, close, the reconciliation timer, and the admin answers (/stats?tenant=,
 * a reconciliation pass on request). One item's protocol is quota_item.c's, the claim carried by
 * the route CAS quota_claim.c's, a batch's reservation quota_batch.c's (shared: quota_int.h).
 * Loop thread only, except the admin answers' waiting threads.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "store/quota_int.h"

#define QUOTA_RECON_MS   1000u /* reconciliation period */
#define QUOTA_RECON_PAGE 64u   /* due entries per state per pass */

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
    kvm_quota_claims_close(rt);
    for (uint32_t i = 0; i < q->n; i++)
        kvm_quota_fifo_clear(&q->fifo[i]);
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
