/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_quota_metrics.c — the quota metric families of /metrics, moved by real quota traffic on a
 * real Redis and a real etcd: two kvmeshd daemons store the data (without the policy, so they
 * reconcile nothing), runtime A (in this process, admin port, tenant_policies tm) is the
 * writer whose /metrics is scraped (parsed by the strict parser of obs_prom.h), runtime B (in
 * this process, same policy) is another writer, and a quota-protocol writer on this thread's
 * own loop leaves operations behind as a crashed writer would:
 *   - refusals by reason: over max_bytes and over max_objects while only B's objects fill the
 *     tenant (A has nothing of its own to evict), an object larger than max_bytes (too_big);
 *   - ok counts: every admitted put is one reserve, at least one claim and one finalize;
 *   - tenant-local recovery: a put over the object limit with A's own older objects evicts one;
 *   - abort: a put whose placement fails after its reservation (hard-pinned to no member);
 *   - reconciliation: a reservation that expires is aborted by A's reconciler; a publishing
 *     operation whose route never appeared is left degraded; the backlog gauge counts the
 *     operation that stays publishing (exactly 1 once nothing else is in flight);
 *   - every kvmesh_quota_* family is exported with only its closed label values.
 * Every wait is bounded; every process is started here and stopped by pid.
 */
#include <math.h>
#include <uv.h>

#include "api/kvmesh_tools.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "obs_prom.h"
#include "ops_util.h"
#include "redis_etcd_main.h"
#include "tenant/tenant.h"

#define QM_DAEMONS 2
#define QM_WAIT_MS 30000

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    tdaemon_t d[QM_DAEMONS];
    kvmesh_t *a, *b;
    uint16_t a_port;
};

static void scrape(struct cluster *c, struct prom *p)
{
    tdaemon_http_t h;
    assert_int_equal(tdaemon_http(c->a_port, "GET", "/metrics", NULL, &h), 200);
    memset(p, 0, sizeof(*p));
    if (prom_parse(p, h.body, strlen(h.body)) != 0)
        fail_msg("/metrics does not parse: %s", p->err);
    tdaemon_http_free(&h);
}

static double qops(struct cluster *c, const char *op, const char *res)
{
    struct prom p;
    scrape(c, &p);
    double v = prom_value(&p, "kvmesh_quota_operations_total", "operation", op, "result", res);
    prom_free(&p);
    if (isnan(v))
        fail_msg("no series kvmesh_quota_operations_total{operation=\"%s\",result=\"%s\"}", op,
                 res);
    return v;
}

static double series(struct cluster *c, const char *name, const char *l, const char *v)
{
    struct prom p;
    scrape(c, &p);
    double x = prom_value(&p, name, l, v, NULL, NULL);
    prom_free(&p);
    if (isnan(x))
        fail_msg("no series %s%s%s%s", name, l ? "{" : "", l ? l : "", l ? "}" : "");
    return x;
}

/* Waits until series(name, l=v) satisfies value >= min (and, exact, == min). */
static void wait_series(struct cluster *c, const char *name, const char *l, const char *v,
                        double min, bool exact)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        double x = series(c, name, l, v);
        if (exact ? x == min : x >= min)
            return;
        if (env_clock_mono_ms() - t0 > QM_WAIT_MS)
            fail_msg("%s{%s=\"%s\"} stayed %g (want %s%g)", name, l ? l : "", v ? v : "", x,
                     exact ? "" : ">= ", min);
        usleep(100000);
    }
}

static int put(kvmesh_t *kv, const char *key, size_t len, const kvmesh_put_opts_t *o)
{
    static char buf[80000];
    memset(buf, 'q', sizeof(buf));
    kvmesh_scope_t sc = {.tenant = "tm"};
    return kvmesh_put(kv, &sc, key, strlen(key), buf, len, o);
}

static void rm(kvmesh_t *kv, const char *key)
{
    kvmesh_scope_t sc = {.tenant = "tm"};
    int rc = kvmesh_remove(kv, &sc, key, strlen(key));
    if (rc)
        fail_msg("remove %s: %s: %s", key, kvmesh_strerror(rc), kvmesh_last_error());
}

/* ---- a writer that reserves (and maybe claims) and then stops, on this thread's loop -------- */

struct writer {
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
    tn_t *tn;
};

struct wait {
    bool done;
    int rc;
};

static void on_view(void *arg, int rc, const tn_op_view_t *v)
{
    (void)v;
    struct wait *w = arg;
    w->done = true;
    w->rc = rc;
}

static void wait_for(struct writer *w, struct wait *r)
{
    while (!r->done)
        uv_run(&w->loop, UV_RUN_ONCE);
}

static void writer_open(struct writer *w, struct cluster *c)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(uv_loop_init(&w->loop), 0);
    assert_int_equal(env_uv_new(&w->env, &w->loop, 0), 0);
    meta_opts_t o = {.default_timeout_ms = 5000};
    assert_int_equal(meta_open(&w->m, w->env, c->url, &o), 0);
    tn_config_t cfg = {.deployment = c->dep,
                       .writer_epoch = 777,
                       .timeout_ms = 5000,
                       .pending_ttl_ms = 1000,
                       .publish_ttl_ms = 1000};
    assert_int_equal(tn_new(&w->tn, w->env, w->m, &cfg), 0);
    tn_policy_t p = {.policy_version = 1, .max_bytes = 64 << 10, .max_objects = 8};
    struct wait r = {0};
    assert_int_equal(tn_bootstrap(w->tn, "tm", &p, on_view, &r), 0);
    wait_for(w, &r);
    assert_int_equal(r.rc, 0);
}

static void writer_reserve(struct writer *w, const char *key, char *op_id)
{
    tn_next_op_id(w->tn, op_id);
    tn_reserve_req_t q = {.tenant = "tm",
                          .key = key,
                          .op_id = op_id,
                          .next_len = 100,
                          .expected_route = KVM_ROUTE_VERSION_NONE};
    struct wait r = {0};
    assert_int_equal(tn_reserve(w->tn, &q, on_view, &r), 0);
    wait_for(w, &r);
    assert_int_equal(r.rc, 0);
}

static void writer_claim(struct writer *w, const char *key, const char *op_id)
{
    static const uint8_t payload[] = "a route that is never published";
    tn_claim_req_t q = {.tenant = "tm",
                        .key = key,
                        .op_id = op_id,
                        .generation = 1,
                        .fencing_token = 1,
                        .publish_token = 42,
                        .next_version = {.fencing_token = 1, .primary_sequence = 1},
                        .payload = payload,
                        .payload_len = sizeof(payload)};
    struct wait r = {0};
    assert_int_equal(tn_claim(w->tn, &q, on_view, &r), 0);
    wait_for(w, &r);
    assert_int_equal(r.rc, 0);
}

static void writer_close(struct writer *w)
{
    tn_close(w->tn);
    meta_close(w->m);
    uv_run(&w->loop, UV_RUN_NOWAIT);
    env_uv_free(w->env);
    while (uv_run(&w->loop, UV_RUN_NOWAIT))
        ;
    uv_loop_close(&w->loop);
}

/* ---- the test -------------------------------------------------------------------------------- */

static kvmesh_t *open_rt(struct cluster *c, uint16_t admin_port)
{
    kvmesh_config_t *kc = kvmesh_config_new();
    assert_int_equal(kvmesh_tools_config_load_file(kc, c->cfg), 0);
    assert_int_equal(kvmesh_config_set(kc, "memory_size", "0"), 0);
    assert_int_equal(kvmesh_config_set(kc, "tenant_policies", "tm:64KiB:8"), 0);
    assert_int_equal(kvmesh_config_set(kc, "tenant_quota_evict", "true"), 0);
    if (admin_port) {
        char a[64];
        snprintf(a, sizeof(a), "127.0.0.1:%u", admin_port);
        assert_int_equal(kvmesh_config_set(kc, "admin_listen", a), 0);
    }
    kvmesh_t *kv = NULL;
    if (kvmesh_open(&kv, kc) != 0)
        fail_msg("runtime: %s", kvmesh_last_error());
    kvmesh_config_free(kc);
    return kv;
}

static void check_metrics(struct cluster *c)
{
    char key[64];
    /* every family is there before any quota traffic, all zero */
    assert_int_equal(qops(c, "reserve", "ok"), 0);
    assert_int_equal(series(c, "kvmesh_quota_recovery_evictions_total", NULL, NULL), 0);
    assert_int_equal(series(c, "kvmesh_quota_reconciliations_total", "result", "aborted"), 0);
    (void)series(c, "kvmesh_quota_reconciliation_backlog", NULL, NULL);
    (void)series(c, "kvmesh_quota_reconciliation_degraded", NULL, NULL);

    /* refusals by reason: B's objects fill the tenant, A has nothing of its own to evict */
    assert_int_equal(put(c->b, "b-big-0", 30000, NULL), 0);
    assert_int_equal(put(c->b, "b-big-1", 30000, NULL), 0);
    assert_int_equal(put(c->a, "a-0", 8000, NULL), KVMESH_EQUOTA);
    assert_int_equal(qops(c, "reserve", "quota_bytes"), 1);
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "b-small-%d", i);
        assert_int_equal(put(c->b, key, 100, NULL), 0);
    }
    assert_int_equal(put(c->a, "a-0", 100, NULL), KVMESH_EQUOTA);
    assert_int_equal(qops(c, "reserve", "quota_objects"), 1);
    assert_int_equal(put(c->a, "a-huge", 70000, NULL), KVMESH_ETOOBIG);
    assert_int_equal(qops(c, "reserve", "too_big"), 1);
    assert_int_equal(qops(c, "reserve", "ok"), 0);
    rm(c->b, "b-big-0");
    rm(c->b, "b-big-1");
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "b-small-%d", i);
        rm(c->b, key);
    }
    /* B has the same policy, so its reconciler would race A's for the expired reservations
     * below and A's kvmesh_quota_reconciliations_total could stay 0: B is done here */
    kvmesh_close(c->b);
    c->b = NULL;

    /* admitted writes: one reserve each, claimed and finalized */
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "a-%d", i);
        int rc = put(c->a, key, 100, NULL);
        if (rc)
            fail_msg("put %s: %s: %s", key, kvmesh_strerror(rc), kvmesh_last_error());
    }
    assert_int_equal(qops(c, "reserve", "ok"), 8);
    assert_true(qops(c, "claim", "ok") >= 8);
    assert_true(qops(c, "finalize", "ok") >= 8);
    /* over the object limit with A's own objects: recovery evicts one, the write is admitted */
    assert_int_equal(put(c->a, "a-8", 100, NULL), 0);
    assert_true(series(c, "kvmesh_quota_recovery_evictions_total", NULL, NULL) >= 1);
    assert_int_equal(qops(c, "reserve", "ok"), 9);
    for (int i = 0; i <= 8; i++) {
        snprintf(key, sizeof(key), "a-%d", i);
        kvmesh_scope_t sc = {.tenant = "tm"};
        (void)kvmesh_remove(c->a, &sc, key, strlen(key)); /* the evicted one is not found */
    }

    /* abort: the reservation of a put whose placement then fails */
    const char *nobody = "00000000000000000000000000000bad";
    kvmesh_put_opts_t pin = {.preferred_owners = &nobody, .n_preferred = 1, .hard_pin = true};
    assert_int_equal(put(c->a, "a-pinned", 100, &pin), KVMESH_EUNAVAILABLE);
    uint64_t t0 = env_clock_mono_ms();
    while (qops(c, "abort", "ok") < 1) { /* the abort is fire and forget */
        if (env_clock_mono_ms() - t0 > QM_WAIT_MS)
            fail_msg("the reservation of the failed put was never aborted");
        usleep(100000);
    }

    /* reconciliation: an expired reservation is aborted by A; a publishing operation whose
     * route never appeared stays degraded and is the backlog */
    struct writer w;
    writer_open(&w, c);
    char op1[TN_OPID_CAP], op2[TN_OPID_CAP];
    writer_reserve(&w, "stuck-pending", op1);
    writer_reserve(&w, "stuck-publishing", op2);
    writer_claim(&w, "stuck-publishing", op2);
    writer_close(&w);
    wait_series(c, "kvmesh_quota_reconciliations_total", "result", "aborted", 1, false);
    wait_series(c, "kvmesh_quota_reconciliations_total", "result", "degraded", 1, false);
    wait_series(c, "kvmesh_quota_reconciliation_backlog", NULL, NULL, 1, true);

    /* closed label sets only */
    struct prom p;
    scrape(c, &p);
    static const char *const ok_labels[] = {
        "reserve",       "claim",     "finalize", "abort",    "ok",       "quota_bytes",
        "quota_objects", "too_big",   "busy",     "conflict", "canceled", "error",
        "aborted",       "finalized", "replayed", "degraded", "purged"};
    size_t n_quota = 0;
    for (size_t i = 0; i < p.ns; i++) {
        const struct prom_sample *s = &p.s[i];
        if (strncmp(s->name, "kvmesh_quota_", 13) != 0)
            continue;
        n_quota++;
        for (int l = 0; l < s->nl; l++) {
            bool known = false;
            for (size_t k = 0; k < sizeof(ok_labels) / sizeof(ok_labels[0]); k++)
                known |= strcmp(s->lval[l], ok_labels[k]) == 0;
            if (!known)
                fail_msg("%s has the label value \"%s\"", s->name, s->lval[l]);
        }
    }
    /* 4 x 8 operations, 1 eviction counter, 5 reconciliation outcomes, 2 gauges */
    assert_int_equal(n_quota, 4 * 8 + 1 + 5 + 2);
    prom_free(&p);
}

static void run_cluster(bool etcd)
{
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url = ops_backend_start(etcd, &c.srv, "opsqm", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    char text[600];
    snprintf(text, sizeof(text),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 64MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nlease_ttl_ms: 2000\nshards: 16\ntop_k: 2\n",
             c.url, c.dep);
    ops_write_file(c.cfg, text);
    for (int i = 0; i < QM_DAEMONS; i++)
        if (ops_daemon_start(&c.d[i], i + (etcd ? 10 : 0), c.cfg, NULL) != 0)
            fail_msg("daemon %d did not start", i);
    c.a_port = testsrv_free_port();
    c.a = open_rt(&c, c.a_port);
    c.b = open_rt(&c, 0);
    check_metrics(&c);
    kvmesh_close(c.b);
    kvmesh_close(c.a);
    for (int i = 0; i < QM_DAEMONS; i++)
        tdaemon_stop(&c.d[i]);
    testsrv_stop(c.srv);
}

KVMESH_REDIS_ETCD_MAIN(test_quota_metrics, run_cluster, ops_group_setup, ops_group_teardown)
