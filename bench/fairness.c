/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_fairness — soft tenant isolation under a noisy neighbour (docs/tenancy.md "Soft
 * isolation", docs/performance.md "Fairness").
 *
 * A real cluster: a redis-server (metadata), two storage runtime processes (this binary
 * re-executed, tcp transport), and one client runtime in this process shared by two tenants:
 *   noisy  NOISY threads, each putting batches of 64 items of 64 KiB back to back, unbounded;
 *   quiet  one thread putting 4 KiB objects one at a time (closed loop), each put timed.
 * The same workload runs twice on the same cluster, with a fresh client runtime: fairness off,
 * then on (2 items / 256 KiB per batch and turn, burst 4 items, 1 MiB in flight), alternating
 * for a number of rounds; the samples of each mode are pooled. The quiet
 * tenant's put latency (p50, p90, p99, p99.9, max) and the noisy tenant's throughput are
 * printed side by side. A benchmark, not a test: it asserts nothing about the numbers.
 *
 *   bench_fairness [seconds per mode and round (default 4)] [noisy threads (default 3)]
 *                  [rounds (default 2)]
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "testsrv.h"

#define NOISY_BATCH   64
#define NOISY_LEN     (64 * 1024)
#define QUIET_LEN     4096
#define QUIET_MAX     200000 /* latency samples kept per mode */
#define NOISY_MAX_THR 16
/* the limits of the "fairness on" runs */
#define FAIR_ITEMS    "2"
#define FAIR_BYTES    "256KiB"
#define FAIR_BURST    "4"
#define FAIR_INFLIGHT "1MiB"

static tproc_t procs[2];
static testsrv_t *srv;
static char url[256];
static const char *deployment = "benchfair";

static void cleanup_all(void)
{
    for (int i = 0; i < 2; i++)
        tproc_kill(&procs[i], SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
}

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    kvmesh_config_set(c, "metadata_url", argv[2]);
    kvmesh_config_set(c, "deployment", argv[3]);
    kvmesh_config_set(c, "memory_size", "512MiB");
    kvmesh_config_set(c, "segment_size", "64MiB");
    kvmesh_config_set(c, "reclaim_grace_ms", "200");
    kvmesh_config_set(c, "transport", "tcp");
    return tproc_child_run(c, false);
}

static kvmesh_t *open_client(bool fair)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", deployment) == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "transport", "tcp") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "30000") == 0);
    CHECK(kvmesh_config_set(c, "fairness", fair ? "on" : "off") == 0);
    CHECK(kvmesh_config_set(c, "max_remote_batch_items_per_tenant", FAIR_ITEMS) == 0);
    CHECK(kvmesh_config_set(c, "max_remote_batch_bytes", FAIR_BYTES) == 0);
    CHECK(kvmesh_config_set(c, "max_remote_batch_burst_items", FAIR_BURST) == 0);
    CHECK(kvmesh_config_set(c, "max_inflight_bytes_per_batch", FAIR_INFLIGHT) == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "client open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

struct run {
    kvmesh_t *kv;
    int round;
    atomic_bool stop;
    atomic_uint_fast64_t noisy_bytes, noisy_fail;
    uint64_t *lat_ns;
    size_t n_lat;
    uint64_t quiet_fail;
};

struct noisy_arg {
    struct run *r;
    int id;
};

static void *noisy_main(void *arg)
{
    struct noisy_arg *a = arg;
    struct run *r = a->r;
    const kvmesh_scope_t sc = {"noisy", NULL};
    char *buf = malloc((size_t)NOISY_BATCH * NOISY_LEN);
    if (!buf)
        return NULL;
    memset(buf, 'n', (size_t)NOISY_BATCH * NOISY_LEN);
    char keys[NOISY_BATCH][32];
    kvmesh_batch_item_t items[NOISY_BATCH];
    for (int round = 0; !atomic_load(&r->stop); round++) {
        for (int i = 0; i < NOISY_BATCH; i++) {
            snprintf(keys[i], sizeof(keys[i]), "n%d-%d", a->id, i); /* overwritten each round */
            items[i] = (kvmesh_batch_item_t){.key = keys[i],
                                             .key_len = strlen(keys[i]),
                                             .buf = buf + (size_t)i * NOISY_LEN,
                                             .len = NOISY_LEN};
        }
        if (kvmesh_batch_put(r->kv, &sc, items, NOISY_BATCH, NULL) == 0)
            atomic_fetch_add(&r->noisy_bytes, (uint64_t)NOISY_BATCH * NOISY_LEN);
        else
            atomic_fetch_add(&r->noisy_fail, 1);
    }
    free(buf);
    return NULL;
}

static size_t quiet_cap; /* samples the current run may still add */

static void *quiet_main(void *arg)
{
    struct run *r = arg;
    const kvmesh_scope_t sc = {"quiet", NULL};
    char v[QUIET_LEN];
    memset(v, 'q', sizeof(v));
    for (uint64_t i = 0; !atomic_load(&r->stop) && r->n_lat < quiet_cap; i++) {
        char k[32];
        snprintf(k, sizeof(k), "q%d-%" PRIu64, r->round, i % 1024);
        uint64_t t0 = env_clock_mono_ns();
        int rc = kvmesh_put(r->kv, &sc, k, strlen(k), v, sizeof(v), NULL);
        uint64_t t1 = env_clock_mono_ns();
        if (rc) {
            r->quiet_fail++;
            continue;
        }
        r->lat_ns[r->n_lat++] = t1 - t0;
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct result {
    size_t n;
    double p50, p90, p99, p999, max, noisy_mbs;
    uint64_t noisy_fail, quiet_fail;
};

static double pct(const uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1));
    return (double)v[i] / 1e3; /* microseconds */
}

/* Latency samples of one mode, pooled over the rounds. */
struct pool {
    uint64_t *lat_ns;
    size_t n;
    uint64_t noisy_bytes, noisy_ns, noisy_fail, quiet_fail;
};

static void run_mode(bool fair, int seconds, int noisy, int round, struct pool *pl)
{
    struct run r = {0};
    r.round = round;
    r.kv = open_client(fair);
    r.lat_ns = pl->lat_ns + pl->n;
    /* warm-up: connections, segment handles */
    const kvmesh_scope_t qs = {"quiet", NULL};
    for (int i = 0; i < 50; i++)
        CHECK(kvmesh_put(r.kv, &qs, "warm", 4, "w", 1, NULL) == 0);
    pthread_t nt[NOISY_MAX_THR], qt;
    struct noisy_arg na[NOISY_MAX_THR];
    for (int i = 0; i < noisy; i++) {
        na[i] = (struct noisy_arg){&r, i};
        CHECK(pthread_create(&nt[i], NULL, noisy_main, &na[i]) == 0);
    }
    usleep(300000); /* the noisy tenant is backlogged before the quiet one starts */
    uint64_t t0 = env_clock_mono_ns(), b0 = atomic_load(&r.noisy_bytes);
    quiet_cap = QUIET_MAX - pl->n;
    CHECK(pthread_create(&qt, NULL, quiet_main, &r) == 0);
    sleep((unsigned)seconds);
    atomic_store(&r.stop, true);
    pthread_join(qt, NULL);
    uint64_t t1 = env_clock_mono_ns(), b1 = atomic_load(&r.noisy_bytes);
    for (int i = 0; i < noisy; i++)
        pthread_join(nt[i], NULL);
    pl->n += r.n_lat;
    pl->noisy_bytes += b1 - b0;
    pl->noisy_ns += t1 - t0;
    pl->noisy_fail += atomic_load(&r.noisy_fail);
    pl->quiet_fail += r.quiet_fail;
    kvmesh_close(r.kv);
}

static struct result summarize(struct pool *pl)
{
    qsort(pl->lat_ns, pl->n, sizeof(uint64_t), cmp_u64);
    return (struct result){
        .n = pl->n,
        .p50 = pct(pl->lat_ns, pl->n, 0.50),
        .p90 = pct(pl->lat_ns, pl->n, 0.90),
        .p99 = pct(pl->lat_ns, pl->n, 0.99),
        .p999 = pct(pl->lat_ns, pl->n, 0.999),
        .max = pl->n ? (double)pl->lat_ns[pl->n - 1] / 1e3 : 0,
        .noisy_mbs =
            pl->noisy_ns ? (double)pl->noisy_bytes / (double)pl->noisy_ns * 1e9 / (1 << 20) : 0,
        .noisy_fail = pl->noisy_fail,
        .quiet_fail = pl->quiet_fail,
    };
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    int seconds = argc > 1 ? atoi(argv[1]) : 4;
    int noisy = argc > 2 ? atoi(argv[2]) : 3;
    int rounds = argc > 3 ? atoi(argv[3]) : 2;
    if (seconds < 1 || seconds > 600 || noisy < 1 || noisy > NOISY_MAX_THR || rounds < 1 ||
        rounds > 20) {
        fprintf(stderr, "usage: %s [seconds 1..600] [noisy threads 1..%d] [rounds 1..20]\n",
                argv[0], NOISY_MAX_THR);
        return 2;
    }
    static char exe[4096];
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    CHECK(testsrv_start_redis(&srv, NULL) == 0);
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    for (int i = 0; i < 2; i++) {
        const char *av[] = {exe, "--runtime", url, deployment};
        CHECK(tproc_start(&procs[i], 4, av, "READY", NULL, 0, 30000) == 0);
    }
    sleep(1); /* both storage runtimes in every snapshot */
    struct pool poff = {.lat_ns = calloc(QUIET_MAX, sizeof(uint64_t))},
                pon = {.lat_ns = calloc(QUIET_MAX, sizeof(uint64_t))};
    CHECK(poff.lat_ns && pon.lat_ns);
    for (int k = 0; k < rounds; k++) { /* alternate, so that load changes hit both modes */
        run_mode(false, seconds, noisy, 2 * k, &poff);
        run_mode(true, seconds, noisy, 2 * k + 1, &pon);
    }
    struct result off = summarize(&poff), on = summarize(&pon);
    free(poff.lat_ns);
    free(pon.lat_ns);
    printf("bench_fairness: %d rounds of %d s per mode (alternating), %d noisy threads (batches "
           "of %d x %d KiB), one quiet thread (%d-byte puts); 2 storage runtimes (tcp), one "
           "shared client runtime\n",
           rounds, seconds, noisy, NOISY_BATCH, NOISY_LEN / 1024, QUIET_LEN);
    printf("fairness on: max_remote_batch_items_per_tenant " FAIR_ITEMS
           ", max_remote_batch_bytes " FAIR_BYTES ", max_remote_batch_burst_items " FAIR_BURST
           ", max_inflight_bytes_per_batch " FAIR_INFLIGHT "\n\n");
    printf("| quiet tenant put latency (us) | fairness off | fairness on |\n");
    printf("| --- | ---: | ---: |\n");
    printf("| puts measured | %zu | %zu |\n", off.n, on.n);
    printf("| p50 | %.0f | %.0f |\n", off.p50, on.p50);
    printf("| p90 | %.0f | %.0f |\n", off.p90, on.p90);
    printf("| p99 | %.0f | %.0f |\n", off.p99, on.p99);
    printf("| p99.9 | %.0f | %.0f |\n", off.p999, on.p999);
    printf("| max | %.0f | %.0f |\n", off.max, on.max);
    printf("| noisy tenant throughput (MiB/s) | %.0f | %.0f |\n", off.noisy_mbs, on.noisy_mbs);
    printf("| failed calls (noisy batches / quiet puts) | %" PRIu64 " / %" PRIu64 " | %" PRIu64
           " / %" PRIu64 " |\n",
           off.noisy_fail, off.quiet_fail, on.noisy_fail, on.quiet_fail);
    for (int i = 0; i < 2; i++)
        tproc_close_stdin(&procs[i]);
    for (int i = 0; i < 2; i++)
        tproc_stop(&procs[i], 30000);
    testsrv_stop(srv);
    return 0;
}
