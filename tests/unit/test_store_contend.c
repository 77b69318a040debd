/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_contend.c — one key put by many application threads at once through the C API
 * (docs/store.md "One key from many threads"): 2, 8 and 32 threads on one runtime, then split
 * over two runtimes that talk over loopback tcp. Each case records, from the runtimes'
 * kvmesh_op_conflict_retries histograms, how many route CAS conflicts each put retried (the
 * largest bucket and the p99 bucket), first without the per-key publication lanes (the test
 * switch: the behaviour before them), then with them.
 *
 * Pinned (counts, not timings): with lanes, puts of one key from one runtime never conflict
 * (every put's retries are 0, and no item is left waiting in a lane); every put succeeds and the
 * key reads back as one whole value. Without lanes the same one-runtime cases conflict (printed;
 * not asserted, as that depends on the scheduling).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "obs/metrics.h"
#include "store/cas_lane.h"
#include "store/store.h"
#include "trt.h"

#define VSIZE     4096
#define PUTS_EACH 20
#define MAX_THR   32
#define N_LE      8 /* the count layout's buckets, +Inf included */

static const kvmesh_scope_t sc = {"contend", NULL};
static const char *const les[N_LE] = {"0", "1", "2", "4", "8", "16", "32", "+Inf"};

static kvmesh_t *open_rt(const char *url)
{
    static const char *const base[][2] = {{"memory_size", "33554432"},
                                          {"segment_size", "33554432"},
                                          {"max_object_size", "1048576"},
                                          {"replicas", "1"},
                                          {"transport", "tcp"},
                                          {"request_timeout_ms", "5000"},
                                          {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url}, {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    assert_non_null(kv);
    return kv;
}

/* Until every runtime can put and read a key (leases held, members seen): bounded, 60 s. */
static void wait_ready(kvmesh_t **rts, int n)
{
    for (int i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "warm%d", i);
        assert_int_equal(trt_wait_put_get(rts[i], rts[(i + 1) % n], &sc, key, 60000), 0);
    }
}

/* Cumulative bucket counts of kvmesh_op_conflict_retries{operation="put"} at one runtime. */
static void read_buckets(kvmesh_t *kv, uint64_t cum[N_LE])
{
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    obs_metrics_render(kvmesh_runtime_of(kv)->metrics, &b);
    assert_false(b.overflow);
    obs_buf_append(&b, "", 1); /* NUL */
    for (int k = 0; k < N_LE; k++) {
        char pat[128];
        snprintf(pat, sizeof(pat),
                 "kvmesh_op_conflict_retries_bucket{operation=\"put\",le=\"%s\"} ", les[k]);
        const char *p = strstr(b.data, pat);
        assert_non_null(p);
        cum[k] = strtoull(p + strlen(pat), NULL, 10);
    }
    obs_buf_free(&b);
}

struct worker {
    kvmesh_t *kv;
    const char *key;
    int id;
    int failed;
};

static void *put_worker(void *p)
{
    struct worker *w = p;
    static _Thread_local uint8_t v[VSIZE];
    memset(v, w->id + 1, sizeof(v));
    for (int i = 0; i < PUTS_EACH; i++) {
        int rc = kvmesh_put(w->kv, &sc, w->key, strlen(w->key), v, sizeof(v), NULL);
        if (rc) {
            if (w->failed++ == 0)
                fprintf(stderr, "put %s: %s: %s\n", w->key, kvmesh_errname(rc),
                        kvmesh_last_error());
        }
    }
    return NULL;
}

struct outcome {
    int failed;         /* puts that failed (ECONFLICT once out of retries) */
    uint64_t puts;      /* observations (one per put) */
    uint64_t zero;      /* puts that retried no conflict */
    const char *max_le; /* the largest non-empty bucket */
    const char *p99_le; /* the bucket holding the 99th percentile */
};

/* n_thr threads over n runtimes (thread i on rts[i % n]) put `key` PUTS_EACH times each. */
static struct outcome contend(kvmesh_t **rts, int n, int n_thr, const char *key)
{
    uint64_t before[2][N_LE], after[2][N_LE];
    for (int i = 0; i < n; i++)
        read_buckets(rts[i], before[i]);
    pthread_t th[MAX_THR];
    struct worker w[MAX_THR];
    for (int i = 0; i < n_thr; i++) {
        w[i] = (struct worker){.kv = rts[i % n], .key = key, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, put_worker, &w[i]), 0);
    }
    int failed = 0;
    for (int i = 0; i < n_thr; i++) {
        pthread_join(th[i], NULL);
        failed += w[i].failed;
    }
    /* the key reads back whole (one writer's value) from every runtime */
    static uint8_t out[VSIZE];
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        assert_int_equal(kvmesh_get_into(rts[i], &sc, key, strlen(key), out, sizeof(out), &got), 0);
        assert_int_equal(got, VSIZE);
        for (size_t k = 1; k < got; k++)
            assert_int_equal(out[k], out[0]);
    }
    uint64_t d[N_LE] = {0}; /* cumulative deltas summed over the runtimes */
    for (int i = 0; i < n; i++) {
        read_buckets(rts[i], after[i]);
        for (int k = 0; k < N_LE; k++)
            d[k] += after[i][k] - before[i][k];
    }
    struct outcome o = {
        .failed = failed, .puts = d[N_LE - 1], .zero = d[0], .max_le = les[0], .p99_le = NULL};
    assert_int_equal(o.puts, (uint64_t)n_thr * PUTS_EACH);
    for (int k = 0; k < N_LE; k++) {
        if (k > 0 && d[k] > d[k - 1])
            o.max_le = les[k];
        if (!o.p99_le && d[k] * 100 >= o.puts * 99)
            o.p99_le = les[k];
    }
    return o;
}

static void run_cases(kvmesh_t **rts, int n, const char *tag)
{
    static const int thr[] = {2, 8, 32};
    bool conflicted = false;
    for (int off = 1; off >= 0; off--) {
        kvm_cas_lane_test_set_off(off);
        for (size_t t = 0; t < sizeof(thr) / sizeof(thr[0]); t++) {
            char key[48];
            snprintf(key, sizeof(key), "%s-%s-%d", tag, off ? "nolane" : "lane", thr[t]);
            struct outcome o = contend(rts, n, thr[t], key);
            fprintf(stderr,
                    "contend %s runtimes=%d threads=%2d lanes=%s: %llu puts, %d failed, %llu "
                    "without a conflict, max retries <= %s, p99 <= %s\n",
                    tag, n, thr[t], off ? "off" : "on", (unsigned long long)o.puts, o.failed,
                    (unsigned long long)o.zero, o.max_le, o.p99_le);
            if (!off) /* with lanes every put succeeds */
                assert_int_equal(o.failed, 0);
            if (!off && n == 1) /* one runtime with lanes: no put ever conflicts */
                assert_int_equal(o.zero, o.puts);
            conflicted |= o.zero < o.puts;
        }
    }
    /* the max gauge: 0 while no put conflicted, else at least 1, never past the bound + 1 */
    int64_t mx = 0;
    for (int i = 0; i < n; i++) {
        int64_t v = -1;
        assert_int_equal(obs_metrics_read(kvmesh_runtime_of(rts[i])->metrics,
                                          "op_conflict_retries_max", OBS_OP_PUT, OBS_NONE, &v),
                         0);
        mx = v > mx ? v : mx;
        /* every lane was handed on: nothing waits */
        assert_int_equal(kvm_cas_lane_waiting(kvmesh_runtime_of(rts[i])), 0);
    }
    fprintf(stderr, "contend %s: op_conflict_retries_max %lld\n", tag, (long long)mx);
    assert_int_equal(mx > 0, conflicted);
    assert_true(mx <= STORE_CONFLICT_RETRIES + 1);
}

static void test_one_runtime(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "memory://contend1-%ld", (long)getpid());
    kvmesh_t *rts[1] = {open_rt(url)};
    wait_ready(rts, 1);
    run_cases(rts, 1, "one");
    assert_int_equal(kvmesh_close(rts[0]), 0);
}

static void test_two_runtimes_tcp(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "memory://contend2-%ld", (long)getpid());
    kvmesh_t *rts[2] = {open_rt(url), open_rt(url)};
    wait_ready(rts, 2);
    run_cases(rts, 2, "two");
    assert_int_equal(kvmesh_close(rts[1]), 0);
    assert_int_equal(kvmesh_close(rts[0]), 0);
}

/* The count layout's buckets: 0, then (2^(k-2), 2^(k-1)], then +Inf past 32. */
static void test_count_buckets(void **state)
{
    (void)state;
    assert_int_equal(obs_count_bucket(0), 0);
    assert_int_equal(obs_count_bucket(1), 1);
    assert_int_equal(obs_count_bucket(2), 2);
    assert_int_equal(obs_count_bucket(3), 3);
    assert_int_equal(obs_count_bucket(4), 3);
    assert_int_equal(obs_count_bucket(5), 4);
    assert_int_equal(obs_count_bucket(32), 6);
    assert_int_equal(obs_count_bucket(33), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_buckets),
        cmocka_unit_test(test_one_runtime),
        cmocka_unit_test(test_two_runtimes_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
