/* SPDX-License-Identifier: Apache-2.0 */
/*
 * obs_endpoints.c — the admin endpoints of a (test) runtime over real HTTP (libcurl):
 *   - /metrics parses with a strict Prometheus parser, every family is present with HELP/TYPE,
 *     and after a workload of 10,000 distinct keys, 1,000 distinct tenants and as many request
 *     ids, no label value comes from a key, request id, tenant outside the label set or
 *     address, and the series count did not grow;
 *   - counters match the workload exactly (requests, per-tenant labels with `other` overflow);
 *   - /stats, /stats?tenant=, /breakdown, /healthz stay bounded in size, exact tenant lookups
 *     match the counts the test kept itself;
 *   - bad query strings answer 400 with a message; control endpoints need the secret;
 *   - /healthz reports readiness with reasons.
 * With OBS_DOC_DIR set, the responses are also written there (docs/operations.md examples).
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "obs_prom.h"
#include "obs_testrt.h"
#include "tmpdir.h"

#define N_KEYS     10000
#define N_TENANTS  1000
#define N_THREADS  2
#define TENANT_CAP 256 /* tenant table capacity: fewer than N_TENANTS on purpose */
#define SECRET     "s3cret-deployment"

static const char *const bootstrap[] = {"tenant-0000", "tenant-0001", "tenant-0002", "tenant-0003",
                                        "tenant-0004"};
#define LABEL_CAP 4 /* tenant-0004 is in the bootstrap set but beyond the cap -> other */

static struct trt *rt;
static char capdir[256];
static char keys[N_KEYS][48];
static char reqids[N_KEYS][40];
static uint64_t tenant_reqs[N_TENANTS], tenant_bytes[N_TENANTS];
static size_t series_before;
static double puts_ok_before, other_before, t0_before;

static void doc_write(const char *name, const char *body)
{
    const char *dir = getenv("OBS_DOC_DIR");
    if (!dir)
        return;
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(body, f);
        fclose(f);
    }
}

static size_t tenant_of(size_t i)
{
    return i % N_TENANTS;
}

static void scrape(struct prom *p)
{
    struct tcurl_body b;
    long code = trt_http(trt_port(rt), "GET", "/metrics", NULL, &b);
    assert_int_equal(code, 200);
    if (prom_parse(p, b.data, b.len) != 0) {
        fprintf(stderr, "prometheus parse error: %s\n", p->err);
        fail();
    }
    free(b.data);
}

struct worker {
    int id;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    for (size_t i = (size_t)w->id; i < N_KEYS; i += N_THREADS) {
        char tenant[16];
        snprintf(tenant, sizeof(tenant), "tenant-%04zu", tenant_of(i));
        uint32_t size = 1024u * (uint32_t)(1 + i % 512);
        assert_int_equal(trt_put(rt, NULL, tenant, keys[i], size), 0);
        __atomic_fetch_add(&tenant_reqs[tenant_of(i)], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&tenant_bytes[tenant_of(i)], size, __ATOMIC_RELAXED);
        if (i % 100 == 0)
            trt_tick(rt);
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(ttmp_make_auto(capdir, sizeof(capdir), "kvmesh-obs-ep"), 0);
    assert_int_equal(obs_metrics_set_tenants(bootstrap, 5, LABEL_CAP), 0);
    struct trt_config c = {.name = "rt-endpoints",
                           .sample_rate = 0.01,
                           .capture_dir = capdir,
                           .secret = SECRET,
                           .tenant_capacity = TENANT_CAP};
    trt_open(&c, &rt);
    for (size_t i = 0; i < N_KEYS; i++) {
        /* keys and request ids look like what must never become labels */
        snprintf(keys[i], sizeof(keys[i]), "key-%05zu-%08x", i, (unsigned)(i * 2654435761u));
        snprintf(reqids[i], sizeof(reqids[i]), "req-%016llx",
                 (unsigned long long)(i * 0x9e3779b97f4a7c15ull));
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    trt_close(rt);
    assert_int_equal(ttmp_remove(capdir), 0);
    obs_metrics_shutdown();
    return 0;
}

static void test_scrape_before(void **state)
{
    (void)state;
    struct prom p;
    scrape(&p);
    series_before = p.ns;
    puts_ok_before = prom_value(&p, "kvmesh_requests_total", "operation", "put", "result", "ok");
    other_before = prom_value(&p, "kvmesh_tenant_requests_total", "tenant", "other", NULL, NULL);
    t0_before = prom_value(&p, "kvmesh_tenant_requests_total", "tenant", "tenant-0000", NULL, NULL);
    assert_false(isnan(puts_ok_before));
    assert_false(isnan(other_before));
    prom_free(&p);
}

static void test_workload_and_metrics(void **state)
{
    (void)state;
    /* the first TENANT_CAP tenants arrive first (one get each, a miss), so the tenant table
     * tracks exactly tenant-0000..0255 */
    for (size_t t = 0; t < N_TENANTS; t++) {
        char tenant[16];
        snprintf(tenant, sizeof(tenant), "tenant-%04zu", t);
        assert_int_equal(trt_get(rt, NULL, tenant, "absent-key", 0), KVMESH_ENOENT);
        tenant_reqs[t]++;
    }
    pthread_t th[N_THREADS];
    struct worker w[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    for (size_t i = 0; i < N_KEYS; i += 7) { /* request ids on sampled spans too */
        struct obs_span s;
        obs_span_start(rt->tracer, NULL, "store.get", &s);
        obs_span_set_str(&s, "kvmesh.request_id", reqids[i]);
        obs_span_end(&s);
    }

    struct prom p;
    scrape(&p);
    size_t nfam;
    const char *const *names = obs_metrics_family_names(&nfam);
    assert_true(nfam >= 30);
    for (size_t i = 0; i < nfam; i++) {
        int f = prom_find(&p, names[i]);
        if (f < 0)
            fprintf(stderr, "family %s missing\n", names[i]);
        assert_true(f >= 0);
        assert_true(p.fam[f].help && p.fam[f].typed);
    }
    assert_int_equal((size_t)p.nfam, nfam);
    /* the series count did not grow with 10,000 keys and 1,000 tenants */
    assert_int_equal(p.ns, series_before);
    assert_true(p.ns < 2000);
    /* label names from the closed sets only; values never keys, request ids, addresses */
    static const char *const allowed[] = {
        "operation", "result", "transport", "backend", "tier", "le",  "tenant",
        "stage",     "device", "direction", "reason",  "side", "kind"};
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%u", (unsigned)trt_port(rt));
    size_t tenant_series = 0;
    for (size_t i = 0; i < p.ns; i++) {
        const struct prom_sample *s = &p.s[i];
        for (int l = 0; l < s->nl; l++) {
            bool ok = false;
            for (size_t a = 0; a < KVM_ARRAY_SIZE(allowed); a++)
                ok |= strcmp(s->lname[l], allowed[a]) == 0;
            assert_true(ok);
            const char *v = s->lval[l];
            assert_null(strstr(v, "key-"));
            assert_null(strstr(v, "req-"));
            assert_null(strstr(v, "127.0.0.1"));
            assert_null(strstr(v, capdir));
            if (strcmp(s->lname[l], "le") != 0)
                assert_string_not_equal(v, portstr);
            if (strcmp(s->lname[l], "device") == 0) /* a cold device's configuration index */
                assert_true(strlen(v) == 1 && v[0] >= '0' && v[0] <= '7');
            if (strcmp(s->lname[l], "tenant") == 0) {
                tenant_series++;
                bool known = strcmp(v, "other") == 0;
                for (int b = 0; b < LABEL_CAP; b++)
                    known |= strcmp(v, bootstrap[b]) == 0;
                assert_true(known);
            }
        }
    }
    for (size_t i = 0; i < p.ns; i += 97)
        for (size_t k = 0; k < N_KEYS; k += 13)
            assert_null(strstr(p.s[i].name, keys[k]));
    /* 3 tenant families x (LABEL_CAP + other) */
    assert_int_equal(tenant_series, 3 * (LABEL_CAP + 1));

    /* exact values */
    double puts = prom_value(&p, "kvmesh_requests_total", "operation", "put", "result", "ok");
    assert_true(puts - puts_ok_before == (double)N_KEYS);
    double t0 = prom_value(&p, "kvmesh_tenant_requests_total", "tenant", "tenant-0000", NULL, NULL);
    assert_true(t0 - t0_before == (double)tenant_reqs[0]);
    double other = prom_value(&p, "kvmesh_tenant_requests_total", "tenant", "other", NULL, NULL);
    uint64_t want_other = 0;
    for (size_t t = LABEL_CAP; t < N_TENANTS; t++)
        want_other += tenant_reqs[t];
    assert_true(other - other_before == (double)want_other);
    double hc =
        prom_value(&p, "kvmesh_request_duration_seconds_count", "operation", "put", NULL, NULL);
    assert_true(hc >= (double)N_KEYS);
    assert_true(prom_value(&p, "process_resident_memory_bytes", NULL, NULL, NULL, NULL) > 0);
    assert_true(prom_value(&p, "process_open_fds", NULL, NULL, NULL, NULL) > 2);
    assert_true(prom_value(&p, "process_start_time_seconds", NULL, NULL, NULL, NULL) > 1e9);
    prom_free(&p);

    struct tcurl_body b;
    assert_int_equal(trt_http(trt_port(rt), "GET", "/metrics", NULL, &b), 200);
    doc_write("metrics.txt", b.data);
    free(b.data);
}

static json_t *get_json(const char *path, long want_code, size_t *len)
{
    struct tcurl_body b;
    long code = trt_http(trt_port(rt), "GET", path, NULL, &b);
    if (code != want_code)
        fprintf(stderr, "%s -> %ld: %s\n", path, code, b.data);
    assert_int_equal(code, want_code);
    json_error_t e;
    json_t *j = json_loadb(b.data, b.len, 0, &e);
    if (!j)
        fprintf(stderr, "%s: invalid JSON (%s): %s\n", path, e.text, b.data);
    assert_non_null(j);
    if (len)
        *len = b.len;
    free(b.data);
    return j;
}

static void test_bounded_endpoints(void **state)
{
    (void)state;
    size_t len;
    json_t *j = get_json("/stats", 200, &len);
    assert_true(len < 8192);
    json_t *ten = json_object_get(j, "tenants");
    assert_int_equal(json_integer_value(json_object_get(ten, "capacity")), TENANT_CAP);
    assert_int_equal(json_integer_value(json_object_get(ten, "tracked")), TENANT_CAP);
    assert_int_equal(json_array_size(json_object_get(ten, "top_by_bytes")), OBS_STATS_TOP_DEFAULT);
    /* top_by_bytes is exact: compare with the test's own tally over tracked tenants */
    uint64_t best = 0;
    for (size_t t = 0; t < TENANT_CAP; t++)
        best = KVM_MAX(best, tenant_bytes[t]);
    json_t *first = json_array_get(json_object_get(ten, "top_by_bytes"), 0);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(first, "counters"), "bytes_in")), best);
    uint64_t puts = 0;
    json_t *put = json_object_get(json_object_get(j, "requests"), "put");
    puts = (uint64_t)json_integer_value(json_object_get(put, "total"));
    assert_true(puts >= N_KEYS);
    json_decref(j);

    j = get_json("/stats?top=16", 200, &len);
    assert_true(len < 12288);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(j, "tenants"), "top_by_bytes")), 16);
    json_decref(j);

    /* exact per-tenant lookup for a tracked tenant, "not tracked" for a late one */
    j = get_json("/stats?tenant=tenant-0007", 200, &len);
    assert_true(len < 1024);
    assert_true(json_is_true(json_object_get(j, "tracked")));
    json_t *c = json_object_get(j, "counters");
    assert_int_equal(json_integer_value(json_object_get(c, "requests")), tenant_reqs[7]);
    assert_int_equal(json_integer_value(json_object_get(c, "bytes_in")), tenant_bytes[7]);
    json_decref(j);
    j = get_json("/stats?tenant=tenant-0900", 200, NULL);
    assert_true(json_is_false(json_object_get(j, "tracked")));
    json_decref(j);
    j = get_json("/stats?tenant=tenant%2D0007", 200, NULL); /* percent-encoded */
    assert_true(json_is_true(json_object_get(j, "tracked")));
    json_decref(j);

    j = get_json("/breakdown?limit=128", 200, &len);
    assert_true(len < 65536);
    assert_true(json_array_size(json_object_get(j, "entries")) <= OBS_BREAKDOWN_RING);
    assert_true(json_array_size(json_object_get(j, "entries")) > 0);
    json_decref(j);

    j = get_json("/healthz", 200, &len);
    assert_true(len < 2048);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);

    struct tcurl_body b;
    const char *docs[][2] = {{"/stats?top=3", "stats.json"},
                             {"/stats?tenant=tenant-0007", "stats_tenant.json"},
                             {"/healthz", "healthz.json"},
                             {"/trace", "trace.json"}};
    for (size_t i = 0; i < KVM_ARRAY_SIZE(docs); i++) {
        assert_int_equal(trt_http(trt_port(rt), "GET", docs[i][0], NULL, &b), 200);
        doc_write(docs[i][1], b.data);
        free(b.data);
    }
}

static void test_bad_queries(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "/stats?tenant=",
        "/stats?top=0",
        "/stats?top=17",
        "/stats?top=-1",
        "/stats?top=1e3",
        "/stats?foo=1",
        "/stats?tenant=a&tenant=b",
        "/stats?tenant=%zz",
        "/stats?tenant=%4",
        "/stats?&",
        "/stats?top=1&",
        "/stats?tenant",
        "/stats?tenant=a%20b",
        "/stats?tenant=a&top=2",
        "/breakdown?limit=abc",
        "/breakdown?limit=129",
        "/healthz?probe=x",
        "/metrics?x=1",
        "/trace?rate=1",
        "/stats?=1",
    };
    for (size_t i = 0; i < KVM_ARRAY_SIZE(bad); i++) {
        struct tcurl_body b;
        long code = trt_http(trt_port(rt), "GET", bad[i], NULL, &b);
        if (code != 400)
            fprintf(stderr, "%s -> %ld\n", bad[i], code);
        assert_int_equal(code, 400);
        json_error_t e;
        json_t *j = json_loads(b.data, 0, &e);
        assert_non_null(j);
        const char *msg = json_string_value(json_object_get(j, "error"));
        assert_non_null(msg);
        assert_true(strlen(msg) > 10);
        if (i == 0)
            doc_write("bad_query.json", b.data);
        json_decref(j);
        free(b.data);
    }
    struct tcurl_body b;
    assert_int_equal(trt_http(trt_port(rt), "GET", "/nope", NULL, &b), 404);
    free(b.data);
    assert_int_equal(trt_http(trt_port(rt), "DELETE", "/metrics", NULL, &b), 405);
    free(b.data);
}

static void test_control_needs_secret(void **state)
{
    (void)state;
    struct tcurl_body b;
    assert_int_equal(trt_http(trt_port(rt), "POST", "/trace/sampling?rate=0.5", NULL, &b), 401);
    free(b.data);
    assert_int_equal(trt_http(trt_port(rt), "POST", "/trace/sampling?rate=0.5", "Bearer wrong", &b),
                     401);
    free(b.data);
    assert_int_equal(trt_http(trt_port(rt), "GET", "/trace/sampling?rate=0.5", NULL, &b), 405);
    free(b.data);
    assert_true(obs_tracer_sample_rate(rt->tracer) < 0.02);
    assert_int_equal(
        trt_http(trt_port(rt), "POST", "/trace/sampling?rate=0.5", "Bearer " SECRET, &b), 200);
    free(b.data);
    assert_true(obs_tracer_sample_rate(rt->tracer) == 0.5);
    assert_int_equal(trt_http(trt_port(rt), "POST", "/trace/sampling?rate=2", "Bearer " SECRET, &b),
                     400);
    free(b.data);
    /* capture start/stop: a file appears in the capture directory and receives spans */
    assert_int_equal(trt_http(trt_port(rt), "POST", "/trace/capture?action=start&name=cap2.jsonl",
                              "Bearer " SECRET, &b),
                     200);
    free(b.data);
    assert_int_equal(trt_http(trt_port(rt), "POST", "/trace/capture?action=start&name=../x",
                              "Bearer " SECRET, &b),
                     400);
    free(b.data);
    assert_int_equal(trt_http(trt_port(rt), "POST", "/trace/sampling?rate=1", "Bearer " SECRET, &b),
                     200);
    free(b.data);
    assert_int_equal(trt_put(rt, NULL, "tenant-0001", "capture-probe", 4096), 0);
    assert_int_equal(obs_tracer_flush(rt->tracer, 5000), 0);
    assert_int_equal(trt_http(trt_port(rt), "GET", "/breakdown?limit=1", NULL, &b), 200);
    assert_non_null(strstr(b.data, "\"name\":\"store.put\""));
    doc_write("breakdown.json", b.data);
    free(b.data);
    assert_int_equal(
        trt_http(trt_port(rt), "POST", "/trace/capture?action=stop", "Bearer " SECRET, &b), 200);
    free(b.data);
    char path[512];
    snprintf(path, sizeof(path), "%s/cap2.jsonl", capdir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 0);
}

static void test_health_reasons(void **state)
{
    (void)state;
    __atomic_store_n(&rt->ready, false, __ATOMIC_RELAXED);
    json_t *j = get_json("/healthz", 503, NULL);
    assert_true(json_is_false(json_object_get(j, "ready")));
    assert_int_equal(json_array_size(json_object_get(j, "reasons")), 2);
    struct tcurl_body b;
    assert_int_equal(trt_http(trt_port(rt), "GET", "/healthz", NULL, &b), 503);
    doc_write("healthz_not_ready.json", b.data);
    free(b.data);
    json_decref(j);
    j = get_json("/healthz?probe=live", 200, NULL);
    json_decref(j);
    __atomic_store_n(&rt->ready, true, __ATOMIC_RELAXED);
    j = get_json("/healthz", 200, NULL);
    json_decref(j);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scrape_before),        cmocka_unit_test(test_workload_and_metrics),
        cmocka_unit_test(test_bounded_endpoints),    cmocka_unit_test(test_bad_queries),
        cmocka_unit_test(test_control_needs_secret), cmocka_unit_test(test_health_reasons),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
