/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_obs_http.c — query-string parsing (accepted and rejected forms per endpoint), the
 * constant-time secret comparison, the bounded tenant table (exact lookups, capacity, untracked
 * aggregate, top-K equal to a brute-force ranking), and endpoint rendering without a client
 * (status codes for unknown paths, wrong methods, missing secret).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "obs/http.h"

static void test_query_accepts(void **state)
{
    (void)state;
    struct obs_query q;
    assert_int_equal(obs_query_parse(OBS_EP_STATS, "", 0, &q), 0);
    assert_int_equal(q.present, 0);
    const char *s = "tenant=acme%2Dprod";
    assert_int_equal(obs_query_parse(OBS_EP_STATS, s, strlen(s), &q), 0);
    assert_string_equal(q.tenant, "acme-prod");
    assert_int_equal(q.tenant_len, 9);
    s = "top=16";
    assert_int_equal(obs_query_parse(OBS_EP_STATS, s, strlen(s), &q), 0);
    assert_int_equal(q.top, 16);
    s = "limit=128";
    assert_int_equal(obs_query_parse(OBS_EP_BREAKDOWN, s, strlen(s), &q), 0);
    assert_int_equal(q.limit, 128);
    s = "rate=0.25";
    assert_int_equal(obs_query_parse(OBS_EP_TRACE_SAMPLING, s, strlen(s), &q), 0);
    assert_true(q.rate == 0.25);
    s = "rate=1";
    assert_int_equal(obs_query_parse(OBS_EP_TRACE_SAMPLING, s, strlen(s), &q), 0);
    s = "probe=live";
    assert_int_equal(obs_query_parse(OBS_EP_HEALTHZ, s, strlen(s), &q), 0);
    assert_int_equal(q.probe, OBS_PROBE_LIVE);
    s = "action=start&name=cap-1.jsonl";
    assert_int_equal(obs_query_parse(OBS_EP_TRACE_CAPTURE, s, strlen(s), &q), 0);
    assert_int_equal(q.action, OBS_ACTION_START);
    assert_string_equal(q.name, "cap-1.jsonl");
    s = "action=stop";
    assert_int_equal(obs_query_parse(OBS_EP_TRACE_CAPTURE, s, strlen(s), &q), 0);
}

static void test_query_rejects(void **state)
{
    (void)state;
    static const struct {
        enum obs_endpoint ep;
        const char *qs;
    } bad[] = {
        {OBS_EP_STATS, "tenant="},
        {OBS_EP_STATS, "tenant=a b"},
        {OBS_EP_STATS, "tenant=acme%2Fprod"}, /* the tenant id rule, not just printable */
        {OBS_EP_STATS, "tenant=-acme"},
        {OBS_EP_STATS, "tenant=a%00b"},
        {OBS_EP_STATS, "tenant=a%20b"},
        {OBS_EP_STATS, "tenant=%"},
        {OBS_EP_STATS, "tenant=%4"},
        {OBS_EP_STATS, "tenant=%g1"},
        {OBS_EP_STATS, "top=0"},
        {OBS_EP_STATS, "top=17"},
        {OBS_EP_STATS, "top=0000001"},
        {OBS_EP_STATS, "top=+1"},
        {OBS_EP_STATS, "top="},
        {OBS_EP_STATS, "top"},
        {OBS_EP_STATS, "=1"},
        {OBS_EP_STATS, "&"},
        {OBS_EP_STATS, "top=1&"},
        {OBS_EP_STATS, "&top=1"},
        {OBS_EP_STATS, "top=1&&top=2"},
        {OBS_EP_STATS, "top=1&top=2"},
        {OBS_EP_STATS, "tenant=a&top=1"},
        {OBS_EP_STATS, "limit=1"},
        {OBS_EP_STATS, "TOP=1"},
        {OBS_EP_METRICS, "x=1"},
        {OBS_EP_BREAKDOWN, "limit=129"},
        {OBS_EP_BREAKDOWN, "limit=-1"},
        {OBS_EP_HEALTHZ, "probe=LIVE"},
        {OBS_EP_TRACE_SAMPLING, ""},
        {OBS_EP_TRACE_SAMPLING, "rate=1.5"},
        {OBS_EP_TRACE_SAMPLING, "rate=."},
        {OBS_EP_TRACE_SAMPLING, "rate=0..1"},
        {OBS_EP_TRACE_SAMPLING, "rate=1e-3"},
        {OBS_EP_TRACE_SAMPLING, "rate=nan"},
        {OBS_EP_TRACE_CAPTURE, "action=start"},
        {OBS_EP_TRACE_CAPTURE, "action=stop&name=x"},
        {OBS_EP_TRACE_CAPTURE, "action=start&name=../x"},
        {OBS_EP_TRACE_CAPTURE, "action=start&name=.x"},
        {OBS_EP_TRACE_CAPTURE, "name=x"},
        {OBS_EP__COUNT, ""},
    };
    for (size_t i = 0; i < KVM_ARRAY_SIZE(bad); i++) {
        struct obs_query q;
        kvm_err_clear();
        int rc = obs_query_parse(bad[i].ep, bad[i].qs, strlen(bad[i].qs), &q);
        if (rc != KVMESH_EINVAL)
            fprintf(stderr, "accepted: ep %d '%s'\n", bad[i].ep, bad[i].qs);
        assert_int_equal(rc, KVMESH_EINVAL);
        assert_true(strlen(kvmesh_last_error()) > 5);
    }
    char big[OBS_QUERY_MAX_LEN + 10];
    memset(big, 'a', sizeof(big));
    memcpy(big, "tenant=", 7);
    struct obs_query q;
    assert_int_equal(obs_query_parse(OBS_EP_STATS, big, sizeof(big), &q), KVMESH_EINVAL);
    const char *many = "top=1&top=1&top=1&top=1&top=1&top=1&top=1&top=1&top=1";
    assert_int_equal(obs_query_parse(OBS_EP_STATS, many, strlen(many), &q), KVMESH_EINVAL);
}

static void test_paths_and_secret(void **state)
{
    (void)state;
    assert_int_equal(obs_endpoint_lookup("/metrics", 8), OBS_EP_METRICS);
    assert_int_equal(obs_endpoint_lookup("/metrics/", 9), -1);
    assert_int_equal(obs_endpoint_lookup("/trace/capture", 14), OBS_EP_TRACE_CAPTURE);
    assert_true(obs_secret_equal("abc", 3, "abc", 3));
    assert_false(obs_secret_equal("abd", 3, "abc", 3));
    assert_false(obs_secret_equal("ab", 2, "abc", 3));
    assert_false(obs_secret_equal("", 0, "abc", 3));
}

static void test_tenant_table(void **state)
{
    (void)state;
    struct obs_tenant_table *t;
    assert_int_equal(obs_tenant_table_create(0, &t), KVMESH_EINVAL);
    assert_int_equal(obs_tenant_table_create(100, &t), 0);
    enum { NT = 300 };
    static uint64_t reqs[NT], bytes[NT];
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = (seed >> 8) % NT;
        /* the first 100 distinct tenants get tracked: make them 0..99 by a warm-up below */
        if (i < 100)
            k = (unsigned)i;
        char id[32];
        int n = snprintf(id, sizeof(id), "t%u", k);
        uint64_t b = (seed >> 4) % 100000;
        struct obs_tenant_counters d = {.requests = 1, .bytes_in = b};
        int rc = obs_tenant_table_record(t, id, (size_t)n, &d);
        assert_int_equal(rc, k < 100 ? 0 : KVMESH_ENOSPC);
        reqs[k]++;
        bytes[k] += b;
    }
    struct obs_tenant_counters c;
    for (unsigned k = 0; k < NT; k++) {
        char id[32];
        int n = snprintf(id, sizeof(id), "t%u", k);
        int rc = obs_tenant_table_lookup(t, id, (size_t)n, &c);
        if (k < 100) {
            assert_int_equal(rc, 0);
            assert_int_equal(c.requests, reqs[k]);
            assert_int_equal(c.bytes_in, bytes[k]);
        } else {
            assert_int_equal(rc, KVMESH_ENOENT);
        }
    }
    struct obs_tenant_table_info ti;
    obs_tenant_table_info(t, &ti);
    assert_int_equal(ti.tracked, 100);
    uint64_t untracked = 0;
    for (unsigned k = 100; k < NT; k++)
        untracked += reqs[k];
    assert_int_equal(ti.untracked.requests, untracked);
    /* top-K equals a brute-force ranking of the tracked tenants */
    struct obs_tenant_top_ent top[OBS_TENANT_TOP_K];
    size_t n = obs_tenant_table_top(t, top, OBS_TENANT_TOP_K);
    assert_int_equal(n, OBS_TENANT_TOP_K);
    for (size_t i = 0; i < n; i++) {
        unsigned k = (unsigned)atoi(top[i].id + 1);
        assert_int_equal(top[i].c.bytes_in, bytes[k]);
        if (i > 0)
            assert_true(top[i - 1].c.bytes_in >= top[i].c.bytes_in);
        size_t greater = 0;
        for (unsigned j = 0; j < 100; j++)
            greater += bytes[j] > bytes[k];
        assert_true(greater <= i);
    }
    assert_int_equal(obs_tenant_table_record(t, "", 0, &c), KVMESH_EINVAL);
    obs_tenant_table_destroy(t);
}

/* A full table of the largest capacity: an exact lookup inspects a handful of slots, never the
 * table (hits and misses alike). */
static void test_tenant_lookup_is_not_a_scan(void **state)
{
    (void)state;
    struct obs_tenant_table *t;
    assert_int_equal(obs_tenant_table_create(OBS_TENANT_TABLE_MAX, &t), 0);
    struct obs_tenant_counters d = {.requests = 1};
    char id[32];
    for (unsigned k = 0; k < OBS_TENANT_TABLE_MAX; k++) {
        int n = snprintf(id, sizeof(id), "tenant-%u", k);
        assert_int_equal(obs_tenant_table_record(t, id, (size_t)n, &d), 0);
    }
    int n = snprintf(id, sizeof(id), "late-tenant");
    assert_int_equal(obs_tenant_table_record(t, id, (size_t)n, &d), KVMESH_ENOSPC);
    struct obs_tenant_counters c;
    uint64_t worst = 0;
    struct obs_tenant_table_info before, after;
    for (unsigned k = 0; k < 2000; k++) {
        obs_tenant_table_info(t, &before);
        n = snprintf(id, sizeof(id), k % 2 ? "tenant-%u" : "absent-%u", k * 31);
        int rc = obs_tenant_table_lookup(t, id, (size_t)n, &c);
        assert_int_equal(rc, k % 2 ? 0 : KVMESH_ENOENT);
        obs_tenant_table_info(t, &after);
        assert_int_equal(after.lookups - before.lookups, 1);
        uint64_t p = after.lookup_probes - before.lookup_probes;
        worst = p > worst ? p : worst;
    }
    obs_tenant_table_info(t, &after);
    assert_true((double)after.lookup_probes / (double)after.lookups < 4.0);
    assert_true(worst < 64); /* vs. 65,536 entries */
    obs_tenant_table_destroy(t);
}

static void test_render_status_codes(void **state)
{
    (void)state;
    struct obs_tracer *tr;
    struct obs_tracer_config tc = {.service = "u", .sample_rate = 0.0};
    assert_int_equal(obs_tracer_create(&tc, &tr), 0);
    struct obs_http_config hc = {.secret = "k", .tracer = tr};
    struct obs_http *h;
    assert_int_equal(obs_http_start(&hc, &h), 0);
    assert_true(obs_http_port(h) > 0);
    static const struct {
        const char *method, *uri, *auth;
        int code;
    } cases[] = {
        {"GET", "/", NULL, 200},
        {"GET", "/healthz", NULL, 200},
        {"GET", "/metrics", NULL, 200},
        {"GET", "/stats", NULL, 200},
        {"GET", "/stats?tenant=x", NULL, 200},
        {"GET", "/breakdown", NULL, 200},
        {"GET", "/trace", NULL, 200},
        {"GET", "/nope", NULL, 404},
        {"POST", "/metrics", NULL, 405},
        {"GET", "/trace/sampling?rate=1", NULL, 405},
        {"POST", "/trace/sampling?rate=1", NULL, 401},
        {"POST", "/trace/sampling?rate=1", "Bearer x", 401},
        {"POST", "/trace/sampling?rate=1", "Basic k", 401},
        {"POST", "/trace/sampling?rate=9", "Bearer k", 400},
        {"POST", "/trace/sampling?rate=1", "Bearer k", 200},
        {"POST", "/trace/capture?action=start&name=x", "Bearer k", 409}, /* no capture dir */
        {"POST", "/trace/capture?action=stop", "Bearer k", 200},
    };
    for (size_t i = 0; i < KVM_ARRAY_SIZE(cases); i++) {
        struct obs_buf b;
        obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
        const char *ct;
        int code = obs_http_render(h, cases[i].method, cases[i].uri, cases[i].auth, &b, &ct);
        if (code != cases[i].code)
            fprintf(stderr, "%s %s -> %d\n", cases[i].method, cases[i].uri, code);
        assert_int_equal(code, cases[i].code);
        assert_true(b.len > 0);
        obs_buf_free(&b);
    }
    assert_true(obs_tracer_sample_rate(tr) == 1.0);
    obs_http_stop(h);
    obs_tracer_destroy(tr);
    /* a bad bind address */
    struct obs_http_config bad = {.bind_addr = "not-an-ip"};
    assert_int_equal(obs_http_start(&bad, &h), KVMESH_EINVAL);
}

/* OOM loops over the tenant table, the admin server and a rendered response. */
static void test_alloc_failures(void **state)
{
    (void)state;
    int n;
    for (n = 0; n < 20; n++) {
        struct obs_tenant_table *t = NULL;
        obs_test_fail_alloc_after(n);
        int rc = obs_tenant_table_create(1000, &t);
        obs_test_fail_alloc_after(-1);
        if (rc == 0) {
            obs_tenant_table_destroy(t);
            break;
        }
        assert_int_equal(rc, KVMESH_ENOMEM);
        assert_null(t);
    }
    assert_int_equal(n, 3);
    struct obs_registry *reg;
    assert_int_equal(obs_registry_new(&reg), 0);
    struct obs_http_config hc = {.secret = "k", .metrics = reg};
    for (n = 0; n < 20; n++) {
        struct obs_http *h = NULL;
        obs_test_fail_alloc_after(n);
        int rc = obs_http_start(&hc, &h);
        obs_test_fail_alloc_after(-1);
        if (rc == 0) {
            obs_http_stop(h);
            break;
        }
        assert_int_equal(rc, KVMESH_ENOMEM);
        assert_null(h);
    }
    assert_int_equal(n, 2);
    /* a response whose buffer cannot grow is a 500, never a truncated 200 */
    struct obs_http *h;
    assert_int_equal(obs_http_start(&hc, &h), 0);
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    const char *ct;
    obs_test_fail_alloc_after(1);
    int code = obs_http_render(h, "GET", "/metrics", NULL, &b, &ct);
    obs_test_fail_alloc_after(-1);
    assert_int_equal(code, 500);
    assert_non_null(strstr(b.data, "error"));
    obs_buf_free(&b);
    obs_http_stop(h);
    obs_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_accepts),
        cmocka_unit_test(test_query_rejects),
        cmocka_unit_test(test_paths_and_secret),
        cmocka_unit_test(test_tenant_table),
        cmocka_unit_test(test_render_status_codes),
        cmocka_unit_test(test_tenant_lookup_is_not_a_scan),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
