/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_obs_metrics.c — the metrics registry: bucket layouts at their boundaries, exact sums of
 * per-thread shards under concurrent updates, monotonic counters across thread exit (shard
 * reuse), gauges (set and add), the tenant label table (cap, `other`, validation), the capped
 * output buffer, and the exposition text of a few known series.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "obs/metrics.h"

static struct obs_registry *reg; /* the registry every test counts into */

static int64_t rd(const char *id, unsigned a, unsigned b)
{
    int64_t v = -1;
    assert_int_equal(obs_metrics_read(reg, id, a, b, &v), 0);
    return v;
}

static void test_buckets(void **state)
{
    (void)state;
    assert_int_equal(obs_lat_bucket(0), 0);
    assert_int_equal(obs_lat_bucket(5000), 0); /* le=5us is inclusive */
    assert_int_equal(obs_lat_bucket(5001), 1);
    assert_int_equal(obs_lat_bucket(1000000), 7); /* 1ms */
    assert_int_equal(obs_lat_bucket(10000000000ull), 19);
    assert_int_equal(obs_lat_bucket(10000000001ull), OBS_LAT_BUCKETS); /* +Inf */
    assert_int_equal(obs_bytes_bucket(0), 0);
    assert_int_equal(obs_bytes_bucket(1024), 0);
    assert_int_equal(obs_bytes_bucket(1025), 1);
    assert_int_equal(obs_bytes_bucket(4096), 1);
    assert_int_equal(obs_bytes_bucket(4097), 2);
    assert_int_equal(obs_bytes_bucket(262144), 4);
    assert_int_equal(obs_bytes_bucket(1ull << 30), 10);
    assert_int_equal(obs_bytes_bucket((1ull << 30) + 1), OBS_BYTES_BUCKETS);
    assert_int_equal(obs_bytes_bucket(UINT64_MAX), OBS_BYTES_BUCKETS);
    /* brute force: every value lands in the first bucket whose bound is >= it */
    for (uint64_t v = 1; v < (1ull << 32); v = v * 3 + 1) {
        unsigned k = obs_bytes_bucket(v);
        if (k < OBS_BYTES_BUCKETS)
            assert_true(v <= (1024ull << (2 * k)));
        if (k > 0)
            assert_true(v > (1024ull << (2 * (k - 1))));
    }
}

#define NTHREADS 4
#define NITERS   100000

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < NITERS; i++) {
        obs_count(reg, route_cas_total, OBS_CAS_CONFLICT, OBS_NONE, 1);
        obs_observe(reg, request_duration_seconds, OBS_OP_EXIST, OBS_NONE, 3000);
        obs_gauge_add(reg, requests_in_flight, OBS_OP_EXIST, OBS_NONE, 1);
        obs_gauge_add(reg, requests_in_flight, OBS_OP_EXIST, OBS_NONE, -1);
    }
    obs_gauge_add(reg, requests_in_flight, OBS_OP_EXIST, OBS_NONE, 2);
    return NULL;
}

static void test_concurrent_sums_and_thread_exit(void **state)
{
    (void)state;
    int64_t c0 = rd("route_cas_total", OBS_CAS_CONFLICT, 0);
    int64_t h0 = rd("request_duration_seconds", OBS_OP_EXIST, 0);
    for (int round = 0; round < 3; round++) { /* threads exit; new ones reuse the shards */
        pthread_t th[NTHREADS];
        for (int i = 0; i < NTHREADS; i++)
            assert_int_equal(pthread_create(&th[i], NULL, hammer, NULL), 0);
        /* scrape concurrently with the updates: monotonic */
        int64_t last = c0;
        for (int k = 0; k < 50; k++) {
            int64_t v = rd("route_cas_total", OBS_CAS_CONFLICT, 0);
            assert_true(v >= last);
            last = v;
        }
        for (int i = 0; i < NTHREADS; i++)
            pthread_join(th[i], NULL);
        int64_t want = (int64_t)(round + 1) * NTHREADS * NITERS;
        assert_int_equal(rd("route_cas_total", OBS_CAS_CONFLICT, 0) - c0, want);
        assert_int_equal(rd("request_duration_seconds", OBS_OP_EXIST, 0) - h0, want);
        assert_int_equal(rd("requests_in_flight", OBS_OP_EXIST, 0), 2 * (round + 1) * NTHREADS);
    }
}

static void test_gauges_and_read_errors(void **state)
{
    (void)state;
    obs_gauge_set(reg, segment_capacity_bytes, OBS_TIER_COLD, OBS_NONE, 12345);
    assert_int_equal(rd("segment_capacity_bytes", OBS_TIER_COLD, 0), 12345);
    obs_gauge_set(reg, segment_capacity_bytes, OBS_TIER_COLD, OBS_NONE, 7);
    assert_int_equal(rd("segment_capacity_bytes", OBS_TIER_COLD, 0), 7);
    int64_t v;
    assert_int_equal(obs_metrics_read(reg, "no_such_family", 0, 0, &v), KVMESH_ENOENT);
    assert_int_equal(obs_metrics_read(reg, "route_cas_total", 99, 0, &v), KVMESH_ERANGE);
}

static void test_tenant_labels(void **state)
{
    (void)state;
    const char *bad1[] = {"ok", "has space"};
    assert_int_equal(obs_metrics_set_tenants(bad1, 2, 2), KVMESH_EINVAL);
    const char *bad2[] = {"a", "a"};
    assert_int_equal(obs_metrics_set_tenants(bad2, 2, 2), KVMESH_EINVAL);
    const char *bad3[] = {"other"};
    assert_int_equal(obs_metrics_set_tenants(bad3, 1, 1), KVMESH_EINVAL);
    assert_int_equal(obs_metrics_set_tenants(bad3, 1, OBS_TENANT_LABEL_CAP_MAX + 1), KVMESH_EINVAL);
    assert_int_equal(obs_tenant_slot("a", 1), OBS_TENANT_OTHER); /* nothing configured */
    const char *ids[] = {"alpha", "beta", "gamma"};
    assert_int_equal(obs_metrics_set_tenants(ids, 3, 2), 0);
    assert_int_equal(obs_tenant_slot("alpha", 5), 0);
    assert_int_equal(obs_tenant_slot("beta", 4), 1);
    assert_int_equal(obs_tenant_slot("gamma", 5), OBS_TENANT_OTHER); /* beyond the cap */
    assert_int_equal(obs_tenant_slot("alph", 4), OBS_TENANT_OTHER);
    assert_int_equal(obs_tenant_slot("", 0), OBS_TENANT_OTHER);
    for (int i = 0; i < 1000; i++) {
        char t[32];
        int n = snprintf(t, sizeof(t), "tenant-%d", i);
        obs_tenant_count(reg, tenant_requests_total, obs_tenant_slot(t, (size_t)n), 1);
    }
    obs_tenant_count(reg, tenant_requests_total, obs_tenant_slot("beta", 4), 5);
    assert_int_equal(rd("tenant_requests_total", OBS_TENANT_OTHER, 0), 1000);
    assert_int_equal(rd("tenant_requests_total", 1, 0), 5);
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    obs_metrics_render(reg, &b);
    assert_false(b.overflow);
    assert_non_null(strstr(b.data, "kvmesh_tenant_requests_total{tenant=\"beta\"} 5\n"));
    assert_non_null(strstr(b.data, "kvmesh_tenant_requests_total{tenant=\"other\"} 1000\n"));
    assert_null(strstr(b.data, "tenant=\"gamma\""));
    assert_null(strstr(b.data, "tenant-1"));
    obs_buf_free(&b);
}

static void test_render_known_series(void **state)
{
    (void)state;
    obs_count(reg, metadata_operations_total, OBS_BACKEND_ETCD, OBS_MCALL_TXN, 3);
    obs_observe(reg, request_payload_bytes, OBS_OP_BATCH_GET, OBS_NONE, 5000);
    obs_observe(reg, metadata_duration_seconds, OBS_BACKEND_REDIS, OBS_MCALL_LEASE_KEEPALIVE,
                1500000);
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    obs_metrics_render(reg, &b);
    assert_non_null(strstr(b.data, "# TYPE kvmesh_metadata_operations_total counter\n"));
    assert_non_null(
        strstr(b.data, "kvmesh_metadata_operations_total{backend=\"etcd\",operation=\"txn\"} 3\n"));
    assert_non_null(strstr(
        b.data, "kvmesh_request_payload_bytes_bucket{operation=\"batch_get\",le=\"4096\"} 0\n"));
    assert_non_null(strstr(
        b.data, "kvmesh_request_payload_bytes_bucket{operation=\"batch_get\",le=\"16384\"} 1\n"));
    assert_non_null(strstr(b.data, "kvmesh_request_payload_bytes_sum{operation=\"batch_get\"} "
                                   "5000\n"));
    assert_non_null(strstr(b.data, "kvmesh_metadata_duration_seconds_bucket{backend=\"redis\","
                                   "operation=\"lease_keepalive\",le=\"0.001\"} 0\n"));
    assert_non_null(strstr(b.data, "kvmesh_metadata_duration_seconds_bucket{backend=\"redis\","
                                   "operation=\"lease_keepalive\",le=\"0.0025\"} 1\n"));
    assert_non_null(strstr(b.data, "kvmesh_metadata_duration_seconds_sum{backend=\"redis\","
                                   "operation=\"lease_keepalive\"} 0.0015\n"));
    assert_non_null(strstr(b.data, "# TYPE process_cpu_seconds_total counter\n"));
    assert_non_null(strstr(b.data, "kvmesh_lease_healthy 0\n"));
    obs_buf_free(&b);
}

static void test_buf_cap(void **state)
{
    (void)state;
    struct obs_buf b;
    obs_buf_init(&b, 16);
    obs_buf_puts(&b, "0123456789");
    assert_false(b.overflow);
    obs_buf_printf(&b, "%s", "abcdefgh"); /* would pass 16 with the NUL */
    assert_true(b.overflow);
    assert_int_equal(b.len, 10);
    obs_buf_free(&b);
    obs_buf_init(&b, 64);
    obs_buf_json_str(&b, "a\"b\\c\n\x01", 7);
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\u000a\\u0001\"");
    obs_buf_free(&b);
    struct obs_process_stats ps;
    assert_int_equal(obs_process_read(&ps), 0);
    assert_true(ps.resident_bytes > 0 && ps.open_fds >= 3 && ps.threads >= 1);
    assert_true(ps.start_time_seconds > 1e9 && ps.start_time_seconds <= (double)time(NULL) + 1);
}

static void *count_into(void *arg)
{
    struct obs_registry *r = arg;
    for (int i = 0; i < 1000; i++)
        obs_count(r, route_lookups_total, OBS_LOOKUP_FOUND, OBS_NONE, 1);
    return NULL;
}

/* Registries are separate: counts into one never show in another, more registries than the
 * thread cache has ways still count exactly, and a freed registry's shards come back zeroed. */
static void test_registries_are_separate(void **state)
{
    (void)state;
    enum { NREG = OBS_TLS_WAYS + 3 };
    struct obs_registry *rs[NREG];
    for (int i = 0; i < NREG; i++)
        assert_int_equal(obs_registry_new(&rs[i]), 0);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < NREG; i++)
            obs_count(rs[i], route_cas_total, OBS_CAS_APPLIED, OBS_NONE, (uint64_t)i + 1);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&th[i], NULL, count_into, rs[1]), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NREG; i++) {
        int64_t v = -1;
        assert_int_equal(obs_metrics_read(rs[i], "route_cas_total", OBS_CAS_APPLIED, 0, &v), 0);
        assert_int_equal(v, 3 * (i + 1));
        assert_int_equal(obs_metrics_read(rs[i], "route_lookups_total", OBS_LOOKUP_FOUND, 0, &v),
                         0);
        assert_int_equal(v, i == 1 ? 3000 : 0);
    }
    obs_gauge_set(rs[0], lease_healthy, OBS_NONE, OBS_NONE, 1);
    int64_t g = -1;
    assert_int_equal(obs_metrics_read(rs[1], "lease_healthy", 0, 0, &g), 0);
    assert_int_equal(g, 0);
    for (int i = 0; i < NREG; i++)
        obs_registry_free(rs[i]);
    struct obs_registry *fresh;
    assert_int_equal(obs_registry_new(&fresh), 0);
    obs_count(fresh, route_lookups_total, OBS_LOOKUP_FOUND, OBS_NONE, 1);
    int64_t v = -1;
    assert_int_equal(obs_metrics_read(fresh, "route_cas_total", OBS_CAS_APPLIED, 0, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(obs_metrics_read(fresh, "route_lookups_total", OBS_LOOKUP_FOUND, 0, &v), 0);
    assert_int_equal(v, 1);
    obs_registry_free(fresh);
    obs_count(NULL, route_lookups_total, OBS_LOOKUP_FOUND, OBS_NONE, 1); /* counts nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_concurrent_sums_and_thread_exit),
        cmocka_unit_test(test_gauges_and_read_errors),
        cmocka_unit_test(test_tenant_labels),
        cmocka_unit_test(test_render_known_series),
        cmocka_unit_test(test_buf_cap),
        cmocka_unit_test(test_registries_are_separate),
    };
    if (obs_registry_new(&reg) != 0)
        return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    obs_registry_free(reg);
    obs_metrics_shutdown();
    return rc;
}
