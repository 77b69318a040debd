/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_rereplicate — background re-replication (src/store/repair.c) on real runtimes and a
 * real metadata server.
 *
 *   itest_store_rereplicate redis|etcd kill|drain   the test (starts the server with testsrv)
 *   itest_store_rereplicate --runtime URL DEPLOYMENT
 *                                      one runtime process: kvmesh_open with an admin port,
 *                                      prints "READY <id> <epoch> <admin port>", then obeys
 *                                      stdin ("drain" -> kvmesh_drain, prints "DRAINED <rc>";
 *                                      EOF -> close and exit)
 *
 * Three runtime processes (replicas 2, 32 MiB each, a re-replication rate of 8 MiB/s) and an
 * in-process client runtime (no memory):
 *   1. 2,000 objects of 4 KiB, each a distinct pattern; every route has 2 replicas on 2 distinct
 *      runtimes; K = the objects with a replica on runtime 0;
 *   2. kill -9 of runtime 0 (or: its graceful drain), then, within a bounded time, every object's
 *      route lists 2 replicas on 2 distinct live runtimes (1 and 2), and the re-replication of
 *      both survivors is idle (no owner pending, no copy in flight);
 *   3. every object reads back byte for byte;
 *      Meanwhile /metrics is sampled: the re-replication gauges (under-replicated objects,
 *      pending owners) are non-zero at some sample and 0 once idle;
 *   4. the counters agree, summed over runtimes 1 and 2, in /stats and in /metrics alike:
 *      found == repaired + superseded + failed, bytes copied == repaired x 4 KiB; after a kill
 *      (nothing else moves the objects) repaired == K exactly; after a drain the drain and the
 *      re-replication race and repaired <= K;
 *   5. kill -9 of runtime 1: one owner is left for replica count 2, so runtime 2's
 *      re-replication reports paused in /stats, and every object still reads back byte for byte
 *      — from runtime 2's replicas alone, which verifies each of them.
 * Every loop is bounded in count and time; every process started here is killed by pid.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "curl_body.h"
#include "obs_prom.h"
#include "proc.h"
#include "testsrv.h"

struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
uint16_t kvm_rt_admin_port(struct kvm_rt *rt);

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define NPROC 3
#define NOBJ  2000
#define VAL   4096
#define BATCH 200

struct proc {
    tproc_t p;
    char id[64];
    uint16_t admin;
};

static struct proc procs[NPROC];
static testsrv_t *srv;
static const char *self_exe;
static char url[256];
static const char *deployment = "rerepl";
static const kvmesh_scope_t sc = {"rr", NULL};
static kvmesh_t *client;

static void cleanup_all(void)
{
    for (int i = 0; i < NPROC; i++)
        tproc_kill(&procs[i].p, SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
}

static void set_common(kvmesh_config_t *c, const char *meta_url, const char *dep)
{
    kvmesh_config_set(c, "metadata_url", meta_url);
    kvmesh_config_set(c, "deployment", dep);
    kvmesh_config_set(c, "lease_ttl_ms", "2000");
    kvmesh_config_set(c, "request_timeout_ms", "5000");
    kvmesh_config_set(c, "replicas", "2");
    kvmesh_config_set(c, "transport", "tcp");
}

/* ---- the runtime process ------------------------------------------------------------------- */

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    set_common(c, argv[2], argv[3]);
    kvmesh_config_set(c, "admin_listen", "127.0.0.1:0");
    kvmesh_config_set(c, "memory_size", "33554432");
    kvmesh_config_set(c, "segment_size", "33554432");
    kvmesh_config_set(c, "max_object_size", "1048576");
    kvmesh_config_set(c, "reclaim_grace_ms", "200");
    kvmesh_config_set(c, "rereplicate_bytes_per_sec", "8MiB");
    kvmesh_config_set(c, "rereplicate_max_copies", "16");
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    tproc_child_ready(kv, true);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        if (strncmp(line, "drain", 5) == 0) {
            int rc = kvmesh_drain(kv, 60000);
            if (rc)
                fprintf(stderr, "drain: %s\n", kvmesh_last_error());
            printf("DRAINED %d\n", rc);
            fflush(stdout);
        }
    }
    kvmesh_close(kv);
    return 0;
}

static void spawn(int slot)
{
    const char *argv[] = {self_exe, "--runtime", url, deployment};
    struct proc *p = &procs[slot];
    char line[256];
    unsigned port = 0;
    uint64_t epoch = 0;
    CHECK(tproc_start(&p->p, 4, argv, "READY ", line, sizeof(line), 30000) == 0);
    CHECK(sscanf(line, "READY %63s %" SCNu64 " %u", p->id, &epoch, &port) == 3);
    CHECK(port > 0 && port < 65536);
    p->admin = (uint16_t)port;
}

/* ---- admin endpoints ------------------------------------------------------------------------ */

/* GET path of a runtime's admin port into *out (malloc'd, NUL-terminated); 0 or -1. */
static int http_get(uint16_t port, const char *path, char **out)
{
    struct tcurl_body b = {0};
    long code = tcurl_get_local(port, path, &b);
    if (code != 200 || !b.data) {
        free(b.data);
        return -1;
    }
    *out = b.data;
    return 0;
}

struct rr_stats {
    uint64_t found, repaired, superseded, failed, bytes, pending, inflight, under;
    bool paused;
};

static uint64_t json_u64(const char *obj, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(obj, k);
    CHECK(p != NULL);
    return strtoull(p + strlen(k), NULL, 10);
}

static void stats_of(int r, struct rr_stats *s)
{
    char *body = NULL;
    CHECK(http_get(procs[r].admin, "/stats", &body) == 0);
    const char *o = strstr(body, "\"rereplication\":{");
    CHECK(o != NULL);
    s->found = json_u64(o, "found");
    s->repaired = json_u64(o, "repaired");
    s->superseded = json_u64(o, "superseded");
    s->failed = json_u64(o, "failed");
    s->bytes = json_u64(o, "bytes_copied");
    s->pending = json_u64(o, "pending_owners");
    s->inflight = json_u64(o, "copies_in_flight");
    s->under = json_u64(o, "under_replicated");
    const char *pz = strstr(o, "\"paused\":");
    CHECK(pz != NULL);
    s->paused = strncmp(pz + 9, "true", 4) == 0;
    free(body);
}

/* Runtime r's /metrics, parsed (prom_free it). */
static void metrics_of(int r, struct prom *p)
{
    char *body = NULL;
    CHECK(http_get(procs[r].admin, "/metrics", &body) == 0);
    memset(p, 0, sizeof(*p));
    CHECK(prom_parse(p, body, strlen(body)) == 0);
    free(body);
}

/* The /metrics families of runtime r against its /stats (one way to count each thing). */
static void metrics_agree(int r, const struct rr_stats *s)
{
    struct prom p;
    metrics_of(r, &p);
    double found = prom_value(&p, "kvmesh_rereplication_found_total", NULL, NULL, NULL, NULL);
    double rep =
        prom_value(&p, "kvmesh_rereplication_objects_total", "result", "repaired", NULL, NULL);
    double noop =
        prom_value(&p, "kvmesh_rereplication_objects_total", "result", "noop", NULL, NULL);
    double fail =
        prom_value(&p, "kvmesh_rereplication_objects_total", "result", "failed", NULL, NULL);
    double bytes = prom_value(&p, "kvmesh_rereplication_bytes_total", NULL, NULL, NULL, NULL);
    prom_free(&p);
    printf("runtime %d /metrics: found %.0f repaired %.0f noop %.0f failed %.0f bytes %.0f\n", r,
           found, rep, noop, fail, bytes);
    /* /stats was read first: a later copy can only have added to /metrics */
    CHECK(found >= (double)s->found && rep >= (double)s->repaired);
    CHECK(noop >= (double)s->superseded && fail >= (double)s->failed);
    CHECK(bytes >= (double)s->bytes);
    CHECK(found == rep + noop + fail); /* idle: every found object has an outcome */
    CHECK(bytes == rep * VAL);
}

/* The re-replication gauges of runtime r's /metrics: under-replicated objects, pending owners,
 * copies in flight. */
static void gauges_of(int r, double g[3])
{
    struct prom p;
    metrics_of(r, &p);
    g[0] = prom_value(&p, "kvmesh_rereplication_under_replicated_objects", NULL, NULL, NULL, NULL);
    g[1] = prom_value(&p, "kvmesh_rereplication_pending_owners", NULL, NULL, NULL, NULL);
    g[2] = prom_value(&p, "kvmesh_rereplication_copies_in_flight", NULL, NULL, NULL, NULL);
    prom_free(&p);
    CHECK(g[0] >= 0 && g[1] >= 0 && g[2] >= 0); /* present (NaN fails) and never negative */
}

/* Samples the gauges of runtimes 1 and 2 every 50 ms (the main thread's checks take seconds
 * each) until told to stop: the largest under-replicated + pending owners sum seen. */
static atomic_bool sampler_stop;
static double busy_max;

static void *gauge_sampler(void *arg)
{
    (void)arg;
    for (int i = 0; i < 4000 && !atomic_load(&sampler_stop); i++) { /* 200 s at most */
        for (int r = 1; r < NPROC; r++) {
            double g[3];
            gauges_of(r, g);
            if (g[0] + g[1] > busy_max)
                busy_max = g[0] + g[1];
        }
        usleep(50000);
    }
    return NULL;
}

/* ---- objects ----------------------------------------------------------------------------------
 */

static void key_of(int i, char *key, size_t cap)
{
    snprintf(key, cap, "obj-%05d", i);
}

static void put_all(void)
{
    static uint8_t vals[BATCH][VAL];
    char keys[BATCH][32];
    for (int base = 0; base < NOBJ; base += BATCH) {
        kvmesh_batch_item_t items[BATCH];
        for (int i = 0; i < BATCH; i++) {
            key_of(base + i, keys[i], sizeof(keys[i]));
            tproc_fill(vals[i], VAL, 1000u + (uint64_t)(base + i));
            items[i] = (kvmesh_batch_item_t){
                .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = VAL};
        }
        int rc = kvmesh_batch_put(client, &sc, items, BATCH, NULL);
        if (rc)
            fprintf(stderr, "batch put at %d: %s\n", base, kvmesh_last_error());
        CHECK(rc == 0);
    }
}

static int proc_of(const char *owner)
{
    for (int r = 0; r < NPROC; r++)
        if (strcmp(procs[r].id, owner) == 0)
            return r;
    return -1;
}

/* How many objects have a replica on runtime r (every route must have 2 distinct owners). */
static int count_on(int r)
{
    int k = 0;
    for (int i = 0; i < NOBJ; i++) {
        char key[32];
        key_of(i, key, sizeof(key));
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(client, &sc, key, strlen(key), &ri) == 0);
        CHECK(ri.n_replicas == 2 && strcmp(ri.replicas[0].owner, ri.replicas[1].owner) != 0);
        k += proc_of(ri.replicas[0].owner) == r || proc_of(ri.replicas[1].owner) == r;
    }
    return k;
}

/* Objects whose route does not list 2 replicas on 2 distinct runtimes among `live` (bitmask). */
static int misplaced(unsigned live)
{
    int bad = 0;
    for (int i = 0; i < NOBJ; i++) {
        char key[32];
        key_of(i, key, sizeof(key));
        kvmesh_route_info_t ri;
        if (kvmesh_route_query(client, &sc, key, strlen(key), &ri) != 0) {
            bad++;
            continue;
        }
        int a = ri.n_replicas == 2 ? proc_of(ri.replicas[0].owner) : -1;
        int b = ri.n_replicas == 2 ? proc_of(ri.replicas[1].owner) : -1;
        bad += !(a >= 0 && b >= 0 && a != b && (live >> a & 1) && (live >> b & 1));
    }
    return bad;
}

/* Every object reads back as its pattern (bounded retries of unavailable/timeouts per object). */
static void verify_all(void)
{
    static uint8_t want[VAL], got[VAL];
    for (int i = 0; i < NOBJ; i++) {
        char key[32];
        key_of(i, key, sizeof(key));
        tproc_fill(want, VAL, 1000u + (uint64_t)i);
        int rc = 0;
        size_t n = 0;
        for (uint64_t end = env_clock_mono_ms() + 30000;;) {
            rc = kvmesh_get_into(client, &sc, key, strlen(key), got, sizeof(got), &n);
            if (rc == 0 || (rc != KVMESH_EUNAVAILABLE && rc != KVMESH_ETIMEDOUT) ||
                env_clock_mono_ms() > end)
                break;
            usleep(50000);
        }
        if (rc)
            fprintf(stderr, "get %s: %s\n", key, kvmesh_last_error());
        CHECK(rc == 0);
        CHECK(n == VAL && memcmp(got, want, VAL) == 0);
    }
}

static void wait_members(size_t want)
{
    CHECK(tproc_wait_storage(client, want, 30000) == 0);
}

int main(int argc, char **argv)
{
    self_exe = argv[0];
    if (argc >= 4 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    if (argc < 3 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd")) ||
        (strcmp(argv[2], "kill") && strcmp(argv[2], "drain"))) {
        fprintf(stderr, "usage: %s redis|etcd kill|drain\n", argv[0]);
        return 2;
    }
    bool drain = strcmp(argv[2], "drain") == 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = testsrv_start_named(&srv, argv[1]);
    if (rc)
        return 1;
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    for (int i = 0; i < NPROC; i++)
        spawn(i);
    {
        kvmesh_config_t *c = kvmesh_config_new();
        set_common(c, url, deployment);
        CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
        rc = kvmesh_open(&client, c);
        if (rc)
            fprintf(stderr, "client open: %s\n", kvmesh_last_error());
        CHECK(rc == 0);
        kvmesh_config_free(c);
    }
    wait_members(NPROC);

    /* 1. the objects */
    put_all();
    int k = count_on(0);
    printf("1: %d objects, %d with a replica on runtime 0\n", NOBJ, k);
    CHECK(k > 0 && k < NOBJ);

    /* 2. runtime 0 goes; the replica count comes back */
    uint64_t t0 = env_clock_mono_ms();
    if (drain) {
        char line[64];
        /* (a replica that the drain could not move on a loaded host, e.g. a CAS that lost the
         * race with re-replication or timed out, stays where it is: the drain is asked again) */
        int drained = tproc_drain(&procs[0].p, 3, line, sizeof(line), 90000);
        printf("2: %s after %" PRIu64 " ms\n", line, env_clock_since_ms(t0));
        CHECK(drained == 0);
    } else {
        tproc_kill(&procs[0].p, SIGKILL);
    }
    struct rr_stats st[NPROC];
    int bad = NOBJ;
    pthread_t gth;
    CHECK(pthread_create(&gth, NULL, gauge_sampler, NULL) == 0);
    for (uint64_t end = env_clock_mono_ms() + 120000;;) {
        bad = misplaced(1u << 1 | 1u << 2);
        bool idle = true;
        for (int r = 1; r < NPROC; r++) {
            stats_of(r, &st[r]);
            idle &= st[r].pending == 0 && st[r].inflight == 0 && st[r].under == 0;
        }
        if ((bad == 0 && idle) || env_clock_mono_ms() > end)
            break;
        usleep(500000);
    }
    atomic_store(&sampler_stop, true);
    pthread_join(gth, NULL);
    printf("2: %d objects not on 2 live runtimes %" PRIu64 " ms after runtime 0 %s\n", bad,
           env_clock_since_ms(t0), drain ? "drained" : "was killed");
    CHECK(bad == 0);
    printf("2: largest re-replication backlog in /metrics: %.0f\n", busy_max);
    CHECK(busy_max > 0); /* the gauges saw the work */

    /* 3. the bytes */
    verify_all();
    printf("3: %d objects read back byte for byte\n", NOBJ);

    /* 4. the counters */
    uint64_t found = 0, repaired = 0, superseded = 0, failed = 0, bytes = 0;
    for (int r = 1; r < NPROC; r++) {
        stats_of(r, &st[r]);
        printf("runtime %d /stats: found %" PRIu64 " repaired %" PRIu64 " superseded %" PRIu64
               " failed %" PRIu64 " bytes %" PRIu64 " pending %" PRIu64 " in flight %" PRIu64 "\n",
               r, st[r].found, st[r].repaired, st[r].superseded, st[r].failed, st[r].bytes,
               st[r].pending, st[r].inflight);
        CHECK(st[r].pending == 0 && st[r].inflight == 0 && !st[r].paused);
        metrics_agree(r, &st[r]);
        double g[3];
        gauges_of(r, g);
        CHECK(g[0] == 0 && g[1] == 0 && g[2] == 0); /* idle: the gauges are back to 0 */
        found += st[r].found;
        repaired += st[r].repaired;
        superseded += st[r].superseded;
        failed += st[r].failed;
        bytes += st[r].bytes;
    }
    CHECK(found == repaired + superseded + failed);
    CHECK(bytes == repaired * VAL);
    if (drain) {
        CHECK(repaired <= (uint64_t)k);
    } else {
        CHECK(repaired == (uint64_t)k); /* each object once, by its one live holder */
        CHECK(superseded == 0);         /* nothing else wrote */
    }
    printf("4: K %d; found %" PRIu64 ", repaired %" PRIu64 ", superseded %" PRIu64
           ", failed %" PRIu64 ", bytes %" PRIu64 "\n",
           k, found, repaired, superseded, failed, bytes);

    /* 5. one owner left for replica count 2: paused; runtime 2's replicas alone serve all */
    if (drain)
        tproc_kill(&procs[0].p, SIGKILL);
    tproc_kill(&procs[1].p, SIGKILL);
    wait_members(1);
    bool paused = false;
    for (uint64_t end = env_clock_mono_ms() + 30000; !paused && env_clock_mono_ms() < end;) {
        stats_of(2, &st[2]);
        paused = st[2].paused;
        if (!paused)
            usleep(200000);
    }
    printf("5: runtime 2 re-replication paused: %s\n", paused ? "yes" : "no");
    CHECK(paused);
    verify_all();
    printf("5: %d objects read back from runtime 2 alone\n", NOBJ);

    kvmesh_close(client);
    tproc_close_stdin(&procs[2].p);
    (void)tproc_stop(&procs[2].p, 60000);
    cleanup_all();
    curl_global_cleanup();
    printf("store_rereplicate %s %s: ok\n", argv[1], argv[2]);
    return 0;
}
