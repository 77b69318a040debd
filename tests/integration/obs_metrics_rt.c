/* SPDX-License-Identifier: Apache-2.0 */
/*
 * obs_metrics_rt — the metrics of real runtimes, against a real metadata server.
 *
 *   itest_obs_metrics_rt redis|etcd     the test (starts the server with testsrv)
 *   itest_obs_metrics_rt --runtime URL DEPLOYMENT CAPDIR
 *                                       one runtime process: kvmesh_open with an admin port,
 *                                       prints "READY <id> <epoch> <admin port>", then waits
 *                                       for EOF on stdin (close and exit)
 *
 * Three runtime processes (16 MiB of memory each, replicas 2, the default EmbeddedWrh routes) and
 * one in-process client runtime (no memory, tracing on, a bootstrap tenant label set) run a
 * scripted workload; every runtime's /metrics is scraped over HTTP and parsed by the strict
 * parser (obs_prom.h):
 *   E. the RPC layer's families (kvmesh_rpc_*) under real traffic: 8 single puts and gets of
 *      64 KiB over tcp (each value in one RPC message): the client's calls started, frames sent
 *      and received, the others' replies sent and the message buffer pool must all move;
 *   A. exact counts: P acknowledged puts (new keys and overwrites), gets, misses and R removes;
 *      then, summed over every runtime: route CAS applied == P + 2R (a remove publishes a
 *      tombstone and then finalizes it: two CAS); transport write bytes >= bytes written x 2
 *      replicas; per runtime, metadata operations >= membership refreshes; the client's
 *      requests_total equals the calls made, by operation and result;
 *   C. kill -9 of one owner process, then reads of the phase-A keys (some fail over), and one
 *      put that must fail (over max_object_size);
 *   B. 10,000 distinct keys (more bytes than the cluster holds, so objects are evicted, and
 *      their bytes reclaimed after the grace window); requests_in_flight seen > 0 by a scraper
 *      running meanwhile; afterwards no label name outside the closed sets and no label value
 *      that is a key, an address, a port or a runtime id, and the series count did not grow;
 *   D. a scripted route fault: SIGSTOP of one runtime (the one killed in C) while a batch of
 *      puts pinned on the two others runs, SIGCONT after 1 s (under the 2 s lease); the shards
 *      whose authority set holds the stopped runtime as a secondary are left with dirty
 *      (partially mirrored) entries, which the reads that follow re-mirror: the repairs counted
 *      at the primaries (kvmesh_route_repairs_total) must move (bounded rounds);
 *   C'. before the kill, 16 single-replica objects pinned on the victim; right after the kill
 *      one batch get of them reaches the dead owner while membership still lists it (the lease
 *      is 2 s): the client's kvmesh_transport_failures_total must move;
 *   finally every exported family must have moved from the registry's initial state (summed
 *   over the runtimes; the killed one contributes its last scrape): a dead metric fails here.
 *   Two subsystems are off in this workload, so their families are required as series but
 *   not required to move here: kvmesh_quota_* (no runtime has tenant_policies; moved by
 *   integration_ops_quota_metrics) and kvmesh_cold_* (no runtime has a cold tier; moved by
 *   cold_store, tests/integration/cold_store.c). Likewise the re-replication gauges that are 0
 *   again once idle (kvmesh_rereplication_under_replicated_objects, _copies_in_flight:
 *   store_rereplicate samples them while re-replication runs) and kvmesh_reservations_* (no
 *   put here loses its route update's answer; tests/unit/test_store_local.c holds and releases
 *   one), and kvmesh_op_conflict_retries_max (no two writers race for one key here:
 *   tests/unit/test_store_contend.c reads it after conflicts).
 * Every loop is bounded in count and time; every process started here is killed by pid.
 */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmesh.h"
#include "env/clock.h"
#include "obs/metrics.h"
#include "curl_body.h"
#include "obs_prom.h"
#include "proc.h"
#include "testsrv.h"
#include "tmpdir.h"
#include "trt.h"

struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
uint16_t kvm_rt_admin_port(struct kvm_rt *rt);

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define NPROC      3
#define NRT        (NPROC + 1) /* + the client, last */
#define A_KEYS     300
#define A_OVER     100
#define A_REMOVE   50
#define A_MISSES   100
#define VAL        4096
#define B_KEYS     10000
#define MAX_SERIES 4000

struct proc {
    tproc_t p; /* the runtime process (tests/support/proc.h) */
    char id[64];
    uint16_t admin;
};

static struct proc procs[NPROC];
static testsrv_t *srv;
static const char *self_exe;
static char url[256];
static char capdir[256];
static const char *deployment = "obsmetrics";
static const kvmesh_scope_t sc = {"tenant-a", NULL};
static const kvmesh_scope_t sc_other = {"tenant-unlisted", NULL};
static kvmesh_t *client;

static pthread_mutex_t cleanup_mu = PTHREAD_MUTEX_INITIALIZER;

/* Kills what this test started; once, even when several threads fail a CHECK together. */
static void cleanup_all(void)
{
    static bool done;
    pthread_mutex_lock(&cleanup_mu);
    if (done) {
        pthread_mutex_unlock(&cleanup_mu);
        return;
    }
    done = true;
    for (int i = 0; i < NPROC; i++)
        tproc_kill(&procs[i].p, SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
    (void)ttmp_remove(capdir); /* what it could not remove is named on stderr */
    pthread_mutex_unlock(&cleanup_mu);
}

/* ---- the runtime process ------------------------------------------------------------------- */

static void set_common(kvmesh_config_t *c, const char *meta_url, const char *dep)
{
    kvmesh_config_set(c, "metadata_url", meta_url);
    kvmesh_config_set(c, "deployment", dep);
    kvmesh_config_set(c, "admin_listen", "127.0.0.1:0");
    kvmesh_config_set(c, "lease_ttl_ms", "2000");
    kvmesh_config_set(c, "request_timeout_ms", "5000");
    kvmesh_config_set(c, "max_object_size", "1048576");
    kvmesh_config_set(c, "replicas", "2");
    kvmesh_config_set(c, "transport", "tcp");
}

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    set_common(c, argv[2], argv[3]);
    kvmesh_config_set(c, "memory_size", "16777216");
    kvmesh_config_set(c, "segment_size", "16777216");
    kvmesh_config_set(c, "reclaim_grace_ms", "200");
    kvmesh_config_set(c, "trace_sample_rate", "0.05");
    kvmesh_config_set(c, "trace_capture_dir", argv[4]);
    return tproc_child_run(c, true);
}

static void spawn(int slot)
{
    const char *argv[] = {self_exe, "--runtime", url, deployment, capdir};
    struct proc *p = &procs[slot];
    char line[256];
    unsigned port = 0;
    uint64_t epoch = 0;
    CHECK(tproc_start(&p->p, 5, argv, "READY ", line, sizeof(line), 30000) == 0);
    CHECK(sscanf(line, "READY %63s %" SCNu64 " %u", p->id, &epoch, &port) == 3);
    CHECK(port > 0 && port < 65536);
    p->admin = (uint16_t)port;
}

/* ---- scraping ------------------------------------------------------------------------------- */

static const char *dump_path; /* OBS_METRICS_DUMP: where the final scrapes are appended */

/* GET /metrics of the admin port and parse it strictly; 0 or -1 (unreachable). */
static int scrape(uint16_t port, struct prom *p)
{
    struct tcurl_body b = {0};
    long code = tcurl_get_local(port, "/metrics", &b);
    if (code != 200) {
        free(b.data);
        return -1;
    }
    if (dump_path) {
        FILE *f = fopen(dump_path, "a");
        if (f) {
            fprintf(f, "# ---- runtime admin port %u\n%s", (unsigned)port, b.data);
            fclose(f);
        }
    }
    memset(p, 0, sizeof(*p));
    int rc = prom_parse(p, b.data, b.len);
    if (rc != 0)
        fprintf(stderr, "/metrics of port %u does not parse: %s\n", (unsigned)port, p->err);
    free(b.data);
    CHECK(rc == 0);
    return 0;
}

static uint16_t client_port(void)
{
    return kvm_rt_admin_port(kvmesh_runtime_of(client));
}

static uint16_t port_of(int r)
{
    return r < NPROC ? procs[r].admin : client_port();
}

/* Sum over the series of a family: counters and gauges by value, histograms by _count. Series
 * whose label `lname` (if given) is `lval` only. */
static double fam_sum(const struct prom *p, const char *fam, const char *lname, const char *lval)
{
    char cnt[160];
    snprintf(cnt, sizeof(cnt), "%s_count", fam);
    double s = 0;
    for (size_t i = 0; i < p->ns; i++) {
        const struct prom_sample *x = &p->s[i];
        if (strcmp(x->name, fam) != 0 && strcmp(x->name, cnt) != 0)
            continue;
        if (lname) {
            const char *v = prom_label(x, lname);
            if (!v || strcmp(v, lval) != 0)
                continue;
        }
        s += x->v;
    }
    return s;
}

static double sum_all(struct prom *ps, int n, const char *fam, const char *lname, const char *lval)
{
    double s = 0;
    for (int r = 0; r < n; r++)
        s += fam_sum(&ps[r], fam, lname, lval);
    return s;
}

static void scrape_all(struct prom *ps)
{
    for (int r = 0; r < NRT; r++)
        CHECK(scrape(port_of(r), &ps[r]) == 0);
}

static void free_all(struct prom *ps, int n)
{
    for (int r = 0; r < n; r++)
        prom_free(&ps[r]);
}

/* ---- the in-flight scraper ------------------------------------------------------------------ */

static volatile int scraper_stop;
static double inflight_max;

static void *scraper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5000 && !scraper_stop; i++) {
        struct prom p;
        if (scrape(client_port(), &p) == 0) {
            double v = fam_sum(&p, "kvmesh_requests_in_flight", NULL, NULL);
            if (v > inflight_max)
                inflight_max = v;
            prom_free(&p);
        }
        usleep(2000);
    }
    return NULL;
}

static int bulk_ok, bulk_failed;

struct bput {
    int from, step;
    const char *prefix;
};

static void *bulk_put(void *arg)
{
    struct bput *w = arg;
    uint8_t v[VAL];
    for (int i = w->from; i < B_KEYS; i += w->step) {
        char key[48];
        snprintf(key, sizeof(key), "%s-%05d", w->prefix, i);
        tproc_fill(v, sizeof(v), (uint64_t)i + 7777);
        int rc = kvmesh_put(client, &sc, key, strlen(key), v, sizeof(v), NULL);
        /* under eviction pressure a put may be refused or time out; anything else is a bug */
        CHECK(rc == 0 || rc == KVMESH_ENOSPC || rc == KVMESH_EUNAVAILABLE ||
              rc == KVMESH_ETIMEDOUT);
        __atomic_fetch_add(rc == 0 ? &bulk_ok : &bulk_failed, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* ---- the scripted faults (phases D and C') --------------------------------------------------- */

#define D_KEYS   24
#define D_ROUNDS 5
#define T_KEYS   16

struct fault_batch {
    kvmesh_batch_item_t *items;
    size_t n;
    const kvmesh_put_opts_t *opts;
};

static void *fault_put(void *arg)
{
    struct fault_batch *f = arg;
    (void)kvmesh_batch_put(client, &sc, f->items, f->n, f->opts); /* per-item results judged */
    return NULL;
}

/* Sum of a family over the live runtime processes 1..NPROC-1 (the primaries that re-mirror). */
static double live_sum(const char *fam, const char *lname, const char *lval)
{
    double s = 0;
    for (int r = 1; r < NPROC; r++) {
        struct prom p;
        CHECK(scrape(procs[r].admin, &p) == 0);
        s += fam_sum(&p, fam, lname, lval);
        prom_free(&p);
    }
    return s;
}

static double client_sum(const char *fam)
{
    struct prom p;
    CHECK(scrape(client_port(), &p) == 0);
    double s = fam_sum(&p, fam, NULL, NULL);
    prom_free(&p);
    return s;
}

/* Reads key until it is the value (retrying unavailable/timeouts, bounded): an acknowledged put
 * of the fault phase must be readable once the stopped runtime runs again. */
static void read_back(const char *key, uint64_t seed)
{
    uint8_t v[VAL], out[VAL];
    tproc_fill(v, sizeof(v), seed);
    int rc = 0;
    for (uint64_t end = env_clock_mono_ms() + 30000;;) {
        size_t got = 0;
        rc = kvmesh_get_into(client, &sc, key, strlen(key), out, sizeof(out), &got);
        if (rc == 0) {
            CHECK(got == sizeof(v) && memcmp(out, v, got) == 0);
            return;
        }
        if ((rc != KVMESH_EUNAVAILABLE && rc != KVMESH_ETIMEDOUT) || env_clock_mono_ms() > end)
            break;
        usleep(50000);
    }
    fprintf(stderr, "acknowledged %s unreadable: %s\n", key, kvmesh_last_error());
    CHECK(rc == 0);
}

/*
 * Phase D: SIGSTOP runtime 0 while a batch of puts pinned on runtimes 1 and 2 runs; SIGCONT after
 * 1 s (half the lease, so the stopped runtime keeps its membership and its authority sets). A put
 * whose shard has the stopped runtime as a secondary times its mirror out (400 ms): the entry
 * stays dirty at the primary and the put is indeterminate; the put's own settling lookup and the
 * reads below make the primary re-mirror it: a route repair. Rounds until repairs moved (bounded).
 */
static void phase_route_fault(void)
{
    double rep0 = live_sum("kvmesh_route_repairs_total", NULL, NULL), rep = rep0;
    const char *pins[] = {procs[1].id, procs[2].id};
    kvmesh_put_opts_t opts = {.preferred_owners = pins, .n_preferred = 2, .hard_pin = true};
    static uint8_t vals[D_KEYS][VAL];
    char keys[D_KEYS][32];
    int round = 0, acked = 0, indet = 0;
    for (; round < D_ROUNDS && rep == rep0; round++) {
        kvmesh_batch_item_t items[D_KEYS];
        for (int i = 0; i < D_KEYS; i++) {
            snprintf(keys[i], sizeof(keys[i]), "fault-%d-%02d", round, i);
            tproc_fill(vals[i], VAL, 50000u + (uint64_t)round * 100 + (uint64_t)i);
            items[i] = (kvmesh_batch_item_t){
                .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = VAL};
        }
        struct fault_batch fb = {items, D_KEYS, &opts};
        pthread_t th;
        CHECK(kill(procs[0].p.pid, SIGSTOP) == 0);
        CHECK(pthread_create(&th, NULL, fault_put, &fb) == 0);
        usleep(1000000);
        CHECK(kill(procs[0].p.pid, SIGCONT) == 0);
        pthread_join(th, NULL);
        for (int i = 0; i < D_KEYS; i++) {
            int rc = items[i].rc;
            /* a stopped authority makes a put indeterminate or late, never anything else */
            if (rc != 0 && rc != KVMESH_EINDETERMINATE && rc != KVMESH_ETIMEDOUT &&
                rc != KVMESH_EUNAVAILABLE)
                fprintf(stderr, "fault put %s: %s\n", keys[i], kvmesh_errname(rc));
            CHECK(rc == 0 || rc == KVMESH_EINDETERMINATE || rc == KVMESH_ETIMEDOUT ||
                  rc == KVMESH_EUNAVAILABLE);
            acked += rc == 0;
            indet += rc != 0;
        }
        for (int i = 0; i < D_KEYS; i++) {
            if (items[i].rc == 0) {
                read_back(keys[i], 50000u + (uint64_t)round * 100 + (uint64_t)i);
            } else { /* not known either way: any answer but a wrong value */
                uint8_t out[VAL];
                size_t got = 0;
                if (kvmesh_get_into(client, &sc, keys[i], strlen(keys[i]), out, sizeof(out),
                                    &got) == 0)
                    CHECK(got == VAL && memcmp(out, vals[i], VAL) == 0);
            }
        }
        for (uint64_t end = env_clock_mono_ms() + 5000; rep == rep0;) {
            rep = live_sum("kvmesh_route_repairs_total", NULL, NULL);
            if (env_clock_mono_ms() > end)
                break;
            if (rep == rep0)
                usleep(100000);
        }
    }
    printf("D: %d round(s) of %d puts with runtime 0 stopped for 1 s: %d acknowledged, %d not; "
           "route repairs at the live primaries %.0f -> %.0f\n",
           round, D_KEYS, acked, indet, rep0, rep);
    CHECK(rep > rep0);
}

/* Phase C' (first half): T_KEYS single-replica objects pinned on runtime 0, the one killed next. */
/*
 * E: the RPC layer's families (kvmesh_rpc_*, exported from the endpoints' figures at scrape)
 * under real traffic: single puts and gets of 64 KiB over tcp from the client, each of which
 * carries its value in one RPC message (an inline write / inline read, default limits 64 KiB),
 * so the message buffer pool (64 KiB - 8 MiB buffers) is used as well.
 */
#define E_KEYS 8
#define E_VAL  (64u << 10)

static double e_diff(struct prom *a, struct prom *b, const char *fam, const char *l, const char *v)
{
    return sum_all(b, NRT, fam, l, v) - sum_all(a, NRT, fam, l, v);
}

static void phase_rpc(void)
{
    struct prom e0[NRT], e1[NRT];
    scrape_all(e0);
    uint8_t *v = malloc(E_VAL), *out = malloc(E_VAL);
    CHECK(v && out);
    for (int i = 0; i < E_KEYS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "rpc-%02d", i);
        tproc_fill(v, E_VAL, (uint64_t)(1000 + i));
        CHECK(kvmesh_put(client, &sc, key, strlen(key), v, E_VAL, NULL) == 0);
        size_t got = 0;
        CHECK(kvmesh_get_into(client, &sc, key, strlen(key), out, E_VAL, &got) == 0);
        CHECK(got == E_VAL && memcmp(out, v, E_VAL) == 0);
    }
    free(v);
    free(out);
    scrape_all(e1);
    const struct prom *c0 = &e0[NRT - 1], *c1 = &e1[NRT - 1];
    double started = fam_sum(c1, "kvmesh_rpc_calls_started_total", NULL, NULL) -
                     fam_sum(c0, "kvmesh_rpc_calls_started_total", NULL, NULL);
    double fsent = fam_sum(c1, "kvmesh_rpc_frames_total", "direction", "sent") -
                   fam_sum(c0, "kvmesh_rpc_frames_total", "direction", "sent");
    double frecv = fam_sum(c1, "kvmesh_rpc_frames_total", "direction", "received") -
                   fam_sum(c0, "kvmesh_rpc_frames_total", "direction", "received");
    double replies = e_diff(e0, e1, "kvmesh_rpc_messages_total", "kind", "reply_sent");
    double pool = e_diff(e0, e1, "kvmesh_rpc_pool_buffers_total", NULL, NULL);
    double open = fam_sum(c1, "kvmesh_rpc_connections_open", NULL, NULL);
    double conns = fam_sum(c1, "kvmesh_rpc_connections_total", NULL, NULL); /* both directions */
    double hs = fam_sum(c1, "kvmesh_rpc_handshakes_total", NULL, NULL);
    printf("E: %d puts + %d gets of %u bytes: client RPC calls started %.0f, frames sent %.0f, "
           "received %.0f; replies sent by the others %.0f; pool buffers (all) %.0f; client "
           "connections open %.0f, opened %.0f, handshakes %.0f\n",
           E_KEYS, E_KEYS, E_VAL, started, fsent, frecv, replies, pool, open, conns, hs);
    /* every put and get of the client (no memory) waits on at least one RPC call */
    CHECK(started >= 2 * E_KEYS);
    CHECK(fsent >= started && frecv >= 2 * E_KEYS);
    CHECK(replies >= 2 * E_KEYS);
    CHECK(pool >= E_KEYS); /* at least each put's message was received into a pooled buffer */
    CHECK(open >= 1 && conns >= open && hs >= 1);
    free_all(e0, NRT);
    free_all(e1, NRT);
}

static void put_on_victim(char keys[T_KEYS][32], uint8_t vals[T_KEYS][64])
{
    const char *pin[] = {procs[0].id};
    kvmesh_put_opts_t opts = {
        .replicas = 1, .preferred_owners = pin, .n_preferred = 1, .hard_pin = true};
    for (int i = 0; i < T_KEYS; i++) {
        snprintf(keys[i], 32, "victim-%02d", i);
        tproc_fill(vals[i], 64, 70000u + (uint64_t)i);
        int rc = 0;
        for (uint64_t end = env_clock_mono_ms() + 30000;;) {
            rc = kvmesh_put(client, &sc, keys[i], strlen(keys[i]), vals[i], 64, &opts);
            if (rc == 0 || env_clock_mono_ms() > end)
                break;
            usleep(50000);
        }
        if (rc)
            fprintf(stderr, "put %s on runtime 0: %s\n", keys[i], kvmesh_last_error());
        CHECK(rc == 0);
    }
}

/* ---- the test ------------------------------------------------------------------------------- */

static void wait_members(size_t want)
{
    CHECK(tproc_wait_storage(client, want, 30000) == 0);
}

static void warm_up(void)
{
    CHECK(trt_warm(&client, 1, &sc, 64, 120000) == 0);
}

static const char *const allowed_labels[] = {
    "operation", "result", "transport", "backend", "tier", "le",  "tenant",
    "stage",     "device", "direction", "reason",  "side", "kind"};

static void check_labels(const struct prom *p)
{
    for (size_t i = 0; i < p->ns; i++) {
        const struct prom_sample *s = &p->s[i];
        for (int l = 0; l < s->nl; l++) {
            bool ok = false;
            for (size_t a = 0; a < sizeof(allowed_labels) / sizeof(allowed_labels[0]); a++)
                ok |= strcmp(s->lname[l], allowed_labels[a]) == 0;
            if (!ok)
                fprintf(stderr, "label %s on %s is not in a closed set\n", s->lname[l], s->name);
            CHECK(ok);
            const char *v = s->lval[l];
            CHECK(strstr(v, "key-") == NULL && strstr(v, "bulk-") == NULL);
            CHECK(strstr(v, "127.0.0.1") == NULL && strstr(v, "tcp:") == NULL);
            CHECK(strstr(v, "tenant-unlisted") == NULL);
            for (int r = 0; r < NPROC; r++) {
                char port[16];
                snprintf(port, sizeof(port), "%u", (unsigned)procs[r].admin);
                CHECK(strcmp(v, port) != 0);
                CHECK(strstr(v, procs[r].id) == NULL);
            }
            if (strcmp(s->lname[l], "tenant") == 0)
                CHECK(strcmp(v, "tenant-a") == 0 || strcmp(v, "other") == 0);
        }
    }
}

int main(int argc, char **argv)
{
    self_exe = argv[0];
    if (argc >= 5 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    if (argc < 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s redis|etcd\n", argv[0]);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = testsrv_start_named(&srv, argv[1]);
    if (rc)
        return 1;
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    CHECK(ttmp_make(capdir, sizeof(capdir), "kvmesh-obs-metrics") == 0);
    const char *backend = strcmp(argv[1], "redis") == 0 ? "redis" : "etcd";

    /* the client: the bootstrap tenant label set is {tenant-a}; tracing samples everything */
    const char *boot[] = {"tenant-a"};
    CHECK(obs_metrics_set_tenants(boot, 1, 1) == 0);
    for (int i = 0; i < NPROC; i++)
        spawn(i);
    {
        kvmesh_config_t *c = kvmesh_config_new();
        set_common(c, url, deployment);
        CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
        CHECK(kvmesh_config_set(c, "trace_sample_rate", "1") == 0);
        CHECK(kvmesh_config_set(c, "trace_capture_dir", capdir) == 0);
        rc = kvmesh_open(&client, c);
        if (rc)
            fprintf(stderr, "client open: %s\n", kvmesh_last_error());
        CHECK(rc == 0);
        kvmesh_config_free(c);
    }
    wait_members(NPROC);
    warm_up();

    /* ---- E: the RPC layer's families ---- */
    phase_rpc();

    struct prom before[NRT], after[NRT];
    scrape_all(before);
    size_t series_before[NRT];
    for (int r = 0; r < NRT; r++)
        series_before[r] = before[r].ns;

    /* ---- A: exact counts ---- */
    uint8_t v[VAL], out[VAL];
    uint64_t puts = 0, put_bytes = 0, gets = 0, misses = 0, removes = 0;
    for (int i = 0; i < A_KEYS + A_OVER; i++) {
        int k = i < A_KEYS ? i : i - A_KEYS; /* the last A_OVER puts overwrite */
        char key[32];
        snprintf(key, sizeof(key), "key-%04d", k);
        tproc_fill(v, sizeof(v), (uint64_t)i);
        rc = kvmesh_put(client, i % 2 ? &sc_other : &sc, key, strlen(key), v, sizeof(v), NULL);
        if (rc)
            fprintf(stderr, "put %s: %s\n", key, kvmesh_last_error());
        CHECK(rc == 0);
        puts++;
        put_bytes += sizeof(v);
    }
    for (int k = 0; k < A_KEYS; k++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%04d", k);
        int last = k < A_OVER ? A_KEYS + k : k;
        const kvmesh_scope_t *s = last % 2 ? &sc_other : &sc;
        size_t got = 0;
        CHECK(kvmesh_get_into(client, s, key, strlen(key), out, sizeof(out), &got) == 0);
        tproc_fill(v, sizeof(v), (uint64_t)last);
        CHECK(got == sizeof(v) && memcmp(out, v, got) == 0);
        gets++;
    }
    for (int k = 0; k < A_MISSES; k++) {
        char key[32];
        snprintf(key, sizeof(key), "absent-%04d", k);
        size_t got = 0;
        CHECK(kvmesh_get_into(client, &sc, key, strlen(key), out, sizeof(out), &got) ==
              KVMESH_ENOENT);
        misses++;
    }
    for (int k = A_KEYS - A_REMOVE; k < A_KEYS; k++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%04d", k);
        CHECK(kvmesh_remove(client, k % 2 ? &sc_other : &sc, key, strlen(key)) == 0);
        removes++;
    }
    /* the tombstone finalization is asynchronous: wait (bounded) for the CAS count to settle */
    double want_cas = (double)(puts + 2 * removes), applied = 0;
    for (uint64_t end = env_clock_mono_ms() + 15000;;) {
        scrape_all(after);
        applied = sum_all(after, NRT, "kvmesh_route_cas_total", "result", "applied") -
                  sum_all(before, NRT, "kvmesh_route_cas_total", "result", "applied");
        if (applied >= want_cas || env_clock_mono_ms() > end)
            break;
        free_all(after, NRT);
        usleep(100000);
    }
    printf("A: %" PRIu64 " puts, %" PRIu64 " gets, %" PRIu64 " misses, %" PRIu64
           " removes; route CAS applied %.0f (want %.0f)\n",
           puts, gets, misses, removes, applied, want_cas);
    CHECK(applied == want_cas);
    double wbytes = sum_all(after, NRT, "kvmesh_transport_bytes_total", "operation", "write") -
                    sum_all(before, NRT, "kvmesh_transport_bytes_total", "operation", "write");
    printf("A: transport write bytes %.0f, bytes written x replicas %" PRIu64 "\n", wbytes,
           put_bytes * 2);
    CHECK(wbytes >= (double)(put_bytes * 2));
    for (int r = 0; r < NRT; r++) {
        double mops = fam_sum(&after[r], "kvmesh_metadata_operations_total", "backend", backend);
        double refr = fam_sum(&after[r], "kvmesh_membership_refreshes_total", NULL, NULL);
        CHECK(refr > 0 && mops >= refr);
    }
    const struct prom *ca = &after[NRT - 1], *cb = &before[NRT - 1];
#define DIFF(fam, l1, v1, l2, v2)                                                                  \
    (prom_value(ca, fam, l1, v1, l2, v2) - prom_value(cb, fam, l1, v1, l2, v2))
    CHECK(DIFF("kvmesh_requests_total", "operation", "put", "result", "ok") == (double)puts);
    CHECK(DIFF("kvmesh_requests_total", "operation", "get", "result", "ok") == (double)gets);
    CHECK(DIFF("kvmesh_requests_total", "operation", "get", "result", "not_found") ==
          (double)misses);
    CHECK(DIFF("kvmesh_requests_total", "operation", "remove", "result", "ok") == (double)removes);
    CHECK(DIFF("kvmesh_request_bytes_total", "operation", "put", NULL, NULL) == (double)put_bytes);
    CHECK(DIFF("kvmesh_tenant_requests_total", "tenant", "tenant-a", NULL, NULL) > 0);
    CHECK(DIFF("kvmesh_tenant_requests_total", "tenant", "other", NULL, NULL) > 0);
    struct prom victim_last = after[0]; /* the killed runtime contributes its last scrape */
    for (int r = 1; r < NRT; r++)
        prom_free(&after[r]);

    /* ---- D: a stopped secondary authority leaves dirty entries; reads repair them ---- */
    phase_route_fault();

    /* ---- C: kill -9 of an owner, then reads that fail over ---- */
    char vkeys[T_KEYS][32];
    uint8_t vvals[T_KEYS][64];
    put_on_victim(vkeys, vvals);
    double tf0 = client_sum("kvmesh_transport_failures_total");
    tproc_kill(&procs[0].p, SIGKILL);
    {
        /* C': at once, in one batch, so the reads reach the dead owner while it is a member */
        kvmesh_batch_item_t items[T_KEYS];
        uint8_t outs[T_KEYS][64];
        for (int i = 0; i < T_KEYS; i++)
            items[i] = (kvmesh_batch_item_t){
                .key = vkeys[i], .key_len = strlen(vkeys[i]), .buf = outs[i], .len = 64};
        (void)kvmesh_batch_get(client, &sc, items, T_KEYS);
        int ok = 0;
        for (int i = 0; i < T_KEYS; i++) {
            /* the only replica died: no read may return bytes that are not the value */
            if (items[i].rc == 0)
                CHECK(items[i].out_len == 64 && memcmp(outs[i], vvals[i], 64) == 0);
            ok += items[i].rc == 0;
        }
        double tf1 = client_sum("kvmesh_transport_failures_total");
        printf("C': %d of %d objects whose only replica was on the killed runtime read; client "
               "transport failures %.0f -> %.0f\n",
               ok, T_KEYS, tf0, tf1);
        CHECK(tf1 > tf0);
    }
    int readable = 0;
    for (int k = 0; k < A_KEYS - A_REMOVE; k++) {
        char key[32];
        snprintf(key, sizeof(key), "key-%04d", k);
        int last = k < A_OVER ? A_KEYS + k : k;
        size_t got = 0;
        readable += kvmesh_get_into(client, last % 2 ? &sc_other : &sc, key, strlen(key), out,
                                    sizeof(out), &got) == 0;
    }
    printf("C: %d of %d phase-A keys readable after the kill\n", readable, A_KEYS - A_REMOVE);
    CHECK(readable > 0);
    wait_members(NPROC - 1);
    for (int k = 0; k < A_KEYS - A_REMOVE; k++) { /* again, through the new authority sets */
        char key[32];
        snprintf(key, sizeof(key), "key-%04d", k);
        int last = k < A_OVER ? A_KEYS + k : k;
        size_t got = 0;
        (void)kvmesh_get_into(client, last % 2 ? &sc_other : &sc, key, strlen(key), out,
                              sizeof(out), &got);
    }
    /* a request that must fail: a value over max_object_size (1 MiB) */
    {
        size_t big = (1u << 20) + 1;
        uint8_t *huge = calloc(1, big);
        CHECK(huge);
        CHECK(kvmesh_put(client, &sc, "key-too-big", 11, huge, big, NULL) != 0);
        free(huge);
    }

    /* ---- B: 10,000 distinct keys, more than the cluster holds ---- */
    pthread_t sth, wth[2];
    struct bput w[2] = {{0, 2, "bulk"}, {1, 2, "bulk"}};
    CHECK(pthread_create(&sth, NULL, scraper, NULL) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&wth[i], NULL, bulk_put, &w[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(wth[i], NULL);
    scraper_stop = 1;
    pthread_join(sth, NULL);
    printf("B: %d puts acknowledged, %d refused or timed out; requests_in_flight seen up to %.0f\n",
           bulk_ok, bulk_failed, inflight_max);
    CHECK(bulk_ok >= B_KEYS / 2);
    CHECK(inflight_max > 0);
    /* reclaim runs after the grace window (200 ms in the runtimes): wait for it, bounded */
    for (uint64_t end = env_clock_mono_ms() + 20000;;) {
        for (int r = 1; r < NRT; r++)
            CHECK(scrape(port_of(r), &after[r]) == 0);
        after[0] = victim_last;
        double rec = sum_all(after, NRT, "kvmesh_reclaimed_bytes_total", NULL, NULL);
        if (rec > 0 || env_clock_mono_ms() > end)
            break;
        for (int r = 1; r < NRT; r++)
            prom_free(&after[r]);
        usleep(200000);
    }
    for (int r = 1; r < NRT; r++) {
        check_labels(&after[r]);
        CHECK(after[r].ns == series_before[r]); /* no series from 10,000 keys */
        CHECK(after[r].ns < MAX_SERIES);
    }
    printf("B: evictions %.0f, evicted bytes %.0f, reclaimed bytes %.0f, series per runtime %zu\n",
           sum_all(after, NRT, "kvmesh_evictions_total", NULL, NULL),
           sum_all(after, NRT, "kvmesh_evicted_bytes_total", NULL, NULL),
           sum_all(after, NRT, "kvmesh_reclaimed_bytes_total", NULL, NULL), after[1].ns);

    for (int r = 1; r < NRT; r++)
        prom_free(&after[r]);

    /* ---- every family moved ---- */
    struct prom fin[NRT];
    fin[0] = victim_last;
    dump_path = getenv("OBS_METRICS_DUMP");
    for (int r = 1; r < NRT; r++)
        CHECK(scrape(port_of(r), &fin[r]) == 0);
    dump_path = NULL;
    size_t nfam;
    const char *const *names = obs_metrics_family_names(&nfam);
    int dead = 0;
    for (size_t i = 0; i < nfam; i++) {
        double total = 0;
        for (int r = 0; r < NRT; r++) {
            CHECK(prom_find(&fin[r], names[i]) >= 0);
            total += fam_sum(&fin[r], names[i], NULL, NULL);
        }
        if (strcmp(names[i], "kvmesh_requests_in_flight") == 0)
            total = inflight_max; /* back to 0 once idle: judged by the scraper's samples */
        /* no runtime here has tenant_policies or a cold tier: integration_ops_quota_metrics
         * and cold_store move these */
        bool quota = strncmp(names[i], "kvmesh_quota_", 13) == 0;
        bool cold_tier = strncmp(names[i], "kvmesh_cold_", 12) == 0;
        /* gauges back to 0 once idle: store_rereplicate samples them while they move */
        bool rerep = strcmp(names[i], "kvmesh_rereplication_under_replicated_objects") == 0 ||
                     strcmp(names[i], "kvmesh_rereplication_copies_in_flight") == 0;
        /* no put here loses its route update's answer: test_store_local holds one */
        bool held = strncmp(names[i], "kvmesh_reservations_", 20) == 0;
        /* a COMMIT / RELEASE naming a slot no longer there: test_store_local test_stale_note
         * makes one and reads this family from the runtime's /metrics and /stats */
        bool stale = strcmp(names[i], "kvmesh_notes_stale_total") == 0;
        /* no two writers race for one key here (its histogram, kvmesh_op_conflict_retries,
         * moves with every put): test_store_contend reads this gauge after conflicts */
        bool no_race = strcmp(names[i], "kvmesh_op_conflict_retries_max") == 0;
        /* RPC refusals, unanswered calls and backpressure do not happen here, and the send
         * queues are empty once idle: test_store_rpc_metrics exports every rpc_stats field
         * into its series; rpc_basic and idle_rpc make each happen at the RPC layer */
        bool rpc_quiet = strcmp(names[i], "kvmesh_rpc_handshake_refusals_total") == 0 ||
                         strcmp(names[i], "kvmesh_rpc_calls_unanswered_total") == 0 ||
                         strcmp(names[i], "kvmesh_rpc_backpressure_refusals_total") == 0 ||
                         strcmp(names[i], "kvmesh_rpc_queued_bytes") == 0 ||
                         strcmp(names[i], "kvmesh_rpc_queued_messages") == 0;
        /* values here are 4 KiB: no raw put at the primary, no payload sink (store_late_payload
         * reads this family from an owner's /metrics after raw puts) */
        bool no_sink = strcmp(names[i], "kvmesh_rpc_payload_sinks_total") == 0;
        printf("  %-52s %.6g%s\n", names[i], total,
               quota       ? "  (quota protocol off here: moved by integration_ops_quota_metrics)"
               : cold_tier ? "  (cold tier off here: moves in cold_store)"
               : rerep     ? "  (0 once idle: sampled by store_rereplicate)"
               : held      ? "  (no lost route update here: moved by test_store_local)"
               : stale     ? "  (no stale slot note here: moved by test_store_local)"
               : rpc_quiet ? "  (none here: test_store_rpc_metrics, rpc_basic)"
               : no_race   ? "  (no conflict here: moved by test_store_contend)"
               : no_sink   ? "  (no raw put here: moved by store_late_payload)"
                           : "");
        if (total == 0 && !quota && !cold_tier && !rerep && !held && !stale && !rpc_quiet &&
            !no_race && !no_sink) {
            fprintf(stderr, "family %s never moved\n", names[i]);
            dead++;
        }
    }
    CHECK(dead == 0);
    free_all(fin, NRT);
    free_all(before, NRT);
    kvmesh_close(client);
    for (int i = 1; i < NPROC; i++)
        tproc_close_stdin(&procs[i].p); /* EOF: close and exit */
    for (int i = 1; i < NPROC; i++)
        (void)tproc_stop(&procs[i].p, 60000); /* its exit status is not judged here */
    cleanup_all();
    obs_metrics_shutdown();
    curl_global_cleanup();
    printf("obs_metrics_rt %s: ok\n", argv[1]);
    return 0;
}
