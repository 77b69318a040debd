/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/meta.c — metadata plane throughput and latency per backend (memory, redis, etcd) on
 * this machine, through the blocking wrapper (meta_sync): get and txn (a CAS put) with one
 * thread (latency p50/p99) and with BENCH_THREADS threads (throughput). Redis and etcd servers
 * are started with testsrv. For the Redis server, redis-benchmark GET/SET figures are measured in
 * the same run against the same server with matching client counts, and the ratio printed.
 * Backends whose URL scheme is not in this build print "not built".
 *
 *   bench_meta [memory|redis|etcd ...]      KVMESH_BENCH_MS = duration per measurement (1000)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "testsrv.h"

#define BENCH_THREADS  4
#define BENCH_MAX_LAT  2000000 /* latency samples kept per measurement */
#define BENCH_KEYSPACE 1000

static uint64_t g_ms;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct run {
    const char *url;
    bool txn;
    int id;
    uint64_t ops, errors;
    uint64_t *lat;
    size_t n_lat;
};

static void *worker(void *arg)
{
    struct run *r = arg;
    meta_sync_t *s = NULL;
    if (meta_sync_open(&s, r->url, NULL) != 0) {
        r->errors++;
        return NULL;
    }
    char key[64], val[64];
    uint64_t end = env_clock_mono_ns() + g_ms * 1000000u;
    for (uint64_t i = 0; env_clock_mono_ns() < end; i++) {
        snprintf(key, sizeof(key), "bench/k%05" PRIu64,
                 (i * 7919u + (uint64_t)r->id) % BENCH_KEYSPACE);
        meta_result_t *res = NULL;
        uint64_t t0 = env_clock_mono_ns();
        int rc;
        if (r->txn) {
            snprintf(val, sizeof(val), "v%" PRIu64, i);
            meta_cmp_t c = {
                .key = key, .target = META_CMP_VERSION, .op = META_LT, .num = INT64_MAX};
            meta_op_t p = {.type = META_OP_PUT,
                           .key = key,
                           .value = (const uint8_t *)val,
                           .value_len = strlen(val)};
            rc = meta_sync_txn(s, &c, 1, &p, 1, NULL, 0, &res);
        } else {
            rc = meta_sync_get(s, key, &res);
        }
        uint64_t dt = env_clock_mono_ns() - t0;
        meta_result_free(res);
        if (rc) {
            r->errors++;
            continue;
        }
        r->ops++;
        if (r->lat && r->n_lat < BENCH_MAX_LAT)
            r->lat[r->n_lat++] = dt;
    }
    meta_sync_close(s);
    return NULL;
}

struct figures {
    double ops_1, p50_us, p99_us, ops_n;
    uint64_t errors;
};

static void measure(const char *url, bool txn, struct figures *f)
{
    memset(f, 0, sizeof(*f));
    struct run one = {.url = url, .txn = txn};
    one.lat = malloc(sizeof(uint64_t) * BENCH_MAX_LAT);
    worker(&one);
    f->ops_1 = (double)one.ops * 1000.0 / (double)g_ms;
    if (one.n_lat) {
        qsort(one.lat, one.n_lat, sizeof(uint64_t), cmp_u64);
        f->p50_us = (double)one.lat[one.n_lat / 2] / 1000.0;
        f->p99_us = (double)one.lat[(one.n_lat * 99) / 100] / 1000.0;
    }
    free(one.lat);
    f->errors = one.errors;
    struct run many[BENCH_THREADS];
    pthread_t th[BENCH_THREADS];
    for (int i = 0; i < BENCH_THREADS; i++) {
        many[i] = (struct run){.url = url, .txn = txn, .id = i};
        pthread_create(&th[i], NULL, worker, &many[i]);
    }
    uint64_t total = 0;
    for (int i = 0; i < BENCH_THREADS; i++) {
        pthread_join(th[i], NULL);
        total += many[i].ops;
        f->errors += many[i].errors;
    }
    f->ops_n = (double)total * 1000.0 / (double)g_ms;
}

/* redis-benchmark requests/second for GET and SET with `clients` connections. */
static int redis_benchmark(uint16_t port, int clients, double *get_rps, double *set_rps)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "redis-benchmark -h 127.0.0.1 -p %u -q -n 20000 -c %d -t get,set -r %d 2>/dev/null",
             port, clients, BENCH_KEYSPACE);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512];
    *get_rps = *set_rps = 0;
    while (fgets(line, sizeof(line), p)) {
        /* lines may carry carriage-return progress output before the final figure */
        char *l = strrchr(line, '\r');
        l = l ? l + 1 : line;
        double v;
        if (sscanf(l, "SET: %lf requests per second", &v) == 1)
            *set_rps = v;
        else if (sscanf(l, "GET: %lf requests per second", &v) == 1)
            *get_rps = v;
    }
    int st = pclose(p);
    return (st == 0 && *get_rps > 0 && *set_rps > 0) ? 0 : -1;
}

static void bench_backend(const char *backend)
{
    testsrv_t *srv = NULL;
    char url[128];
    if (!strcmp(backend, "memory")) {
        snprintf(url, sizeof(url), "memory://bench");
    } else {
        int rc =
            !strcmp(backend, "redis") ? testsrv_start_redis(&srv, NULL) : testsrv_start_etcd(&srv);
        if (rc) {
            printf("%-7s server did not start: %s\n", backend, kvmesh_last_error());
            return;
        }
        snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    }
    double g1 = 0, s1 = 0, gn = 0, sn = 0;
    bool peer = srv && testsrv_kind(srv) == TESTSRV_REDIS &&
                redis_benchmark(testsrv_port(srv), 1, &g1, &s1) == 0 &&
                redis_benchmark(testsrv_port(srv), BENCH_THREADS, &gn, &sn) == 0;
    if (peer)
        printf("  redis-benchmark (same server): GET %.0f/s (1 client), %.0f/s (%d clients); "
               "SET %.0f/s, %.0f/s\n",
               g1, gn, BENCH_THREADS, s1, sn);
    else if (srv && testsrv_kind(srv) == TESTSRV_REDIS)
        printf("  redis-benchmark: not available or failed\n");
    meta_sync_t *keep = NULL; /* keeps a memory store alive; probes the scheme */
    if (meta_sync_open(&keep, url, NULL) != 0) {
        if (strstr(kvmesh_last_error(), "unsupported"))
            printf("%-7s not built\n", backend);
        else
            printf("%-7s open failed: %s\n", backend, kvmesh_last_error());
        testsrv_stop(srv);
        return;
    }
    struct figures g, t;
    measure(url, false, &g);
    measure(url, true, &t);
    printf("%-7s %-4s %10.0f %9.1f %9.1f %12.0f %7" PRIu64 "\n", backend, "get", g.ops_1, g.p50_us,
           g.p99_us, g.ops_n, g.errors);
    printf("%-7s %-4s %10.0f %9.1f %9.1f %12.0f %7" PRIu64 "\n", backend, "txn", t.ops_1, t.p50_us,
           t.p99_us, t.ops_n, t.errors);
    if (peer)
        printf("  ratio kvmesh/redis-benchmark: get %.2f (1), %.2f (%d); txn vs SET %.2f "
               "(1), %.2f (%d)\n",
               g.ops_1 / g1, g.ops_n / gn, BENCH_THREADS, t.ops_1 / s1, t.ops_n / sn,
               BENCH_THREADS);
    meta_sync_close(keep);
    testsrv_stop(srv);
}

int main(int argc, char **argv)
{
    g_ms = testsrv_env_ms("KVMESH_BENCH_MS", 1000);
    printf("metadata bench: %" PRIu64 " ms per measurement, %d threads for throughput, "
           "blocking calls (meta_sync)\n",
           g_ms, BENCH_THREADS);
    printf("%-7s %-4s %10s %9s %9s %12s %7s\n", "backend", "op", "ops/s(1)", "p50(us)", "p99(us)",
           "ops/s(4 thr)", "errors");
    const char *all[] = {"memory", "redis", "etcd"};
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            bench_backend(argv[i]);
    } else {
        for (size_t i = 0; i < 3; i++)
            bench_backend(all[i]);
    }
    return 0;
}
