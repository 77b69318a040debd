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
#include <cmocka.h>

#include "obs/metrics.h"

static int64_t rd(const char *id, unsigned a, unsigned b)
{
    int64_t v = -1;
    assert_int_equal(obs_metrics_read(id, a, b, &v), 0);
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
        obs_count(route_cas_total, OBS_CAS_CONFLICT, OBS_NONE, 1);
        obs_observe(request_duration_seconds, OBS_OP_EXIST, OBS_NONE, 3000);
        obs_gauge_add(requests_in_flight, OBS_OP_EXIST, OBS_NONE, 1);
        obs_gauge_add(requests_in_flight, OBS_OP_EXIST, OBS_NONE, -1);
    }
    obs_gauge_add(requests_in_flight, OBS_OP_EXIST, OBS_NONE, 2);
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
    obs_gauge_set(segment_capacity_bytes, OBS_TIER_COLD, OBS_NONE, 12345);
    assert_int_equal(rd("segment_capacity_bytes", OBS_TIER_COLD, 0), 12345);
    obs_gauge_set(segment_capacity_bytes, OBS_TIER_COLD, OBS_NONE, 7);
    assert_int_equal(rd("segment_capacity_bytes", OBS_TIER_COLD, 0), 7);
    int64_t v;
    assert_int_equal(obs_metrics_read("no_such_family", 0, 0, &v), KVMESH_ENOENT);
    assert_int_equal(obs_metrics_read("route_cas_total", 99, 0, &v), KVMESH_ERANGE);
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
        obs_tenant_count(tenant_requests_total, obs_tenant_slot(t, (size_t)n), 1);
    }
    obs_tenant_count(tenant_requests_total, obs_tenant_slot("beta", 4), 5);
    assert_int_equal(rd("tenant_requests_total", OBS_TENANT_OTHER, 0), 1000);
    assert_int_equal(rd("tenant_requests_total", 1, 0), 5);
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    obs_metrics_render(&b);
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
    obs_count(metadata_operations_total, OBS_BACKEND_ETCD, OBS_MCALL_TXN, 3);
    obs_observe(request_payload_bytes, OBS_OP_BATCH_GET, OBS_NONE, 5000);
    obs_observe(metadata_duration_seconds, OBS_BACKEND_REDIS, OBS_MCALL_LEASE, 1500000);
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    obs_metrics_render(&b);
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
                                   "operation=\"lease\",le=\"0.001\"} 0\n"));
    assert_non_null(strstr(b.data, "kvmesh_metadata_duration_seconds_bucket{backend=\"redis\","
                                   "operation=\"lease\",le=\"0.0025\"} 1\n"));
    assert_non_null(strstr(b.data, "kvmesh_metadata_duration_seconds_sum{backend=\"redis\","
                                   "operation=\"lease\"} 0.0015\n"));
    assert_non_null(strstr(b.data, "# TYPE kvmesh_process_cpu_seconds_total counter\n"));
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
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    obs_metrics_shutdown();
    return rc;
}
