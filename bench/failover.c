// SPDX-License-Identifier: Apache-2.0
/*
 * bench_failover — failover time after a runtime's death (docs/performance.md "Failover time").
 *
 * A real cluster: a redis-server (metadata), three storage runtime processes (this binary
 * re-executed, tcp transport, otherwise the default configuration: lease_ttl_ms,
 * request_timeout_ms, top_k, shards as shipped), and one client-only runtime in this process
 * (replicas 2). Each round:
 *   1. writes a set of keys and reads, for each, its replica owners (kvmesh_route_query) and the
 *      primary of its shard (the shard-authority records in metadata);
 *   2. picks an "owner" key (one replica on the victim, its shard led by another runtime) and an
 *      "authority" key (its shard led by the victim, no replica on it), and a control key
 *      (neither);
 *   3. kill -9 the victim (the runtimes take turns); from the kill on, one thread per kind and
 *      operation repeats put (resp. get) of its key until one succeeds: the time from the kill to
 *      the end of that first successful call is the failover time of that kind and operation;
 *      meanwhile a control thread keeps putting the control key (its completions during the
 *      window show that other keys proceed);
 *   4. restarts the victim and waits until every shard is led by a live runtime again.
 * Prints median, p90 and max per kind and operation over the rounds. A benchmark, not a test: it
 * asserts nothing about the numbers. Bounded: every wait has a limit (ROUND_LIMIT_MS per round).
 *
 *   bench_failover [rounds (default 20)] [field=value ...]
 *
 * field=value pairs (configuration fields, e.g. lease_ttl_ms=5000) are set on every runtime,
 * the storage runtimes and the client alike, to compare settings; none = the defaults.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "core/ident.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "testsrv.h"

#define N_RT           3
#define N_SHARDS       64 /* the default `shards` */
#define N_KEYS         96 /* keys written per round to find one of each kind */
#define VLEN           4096
#define ROUND_LIMIT_MS 30000 /* a kind that has not recovered by then counts as this */
#define SETTLE_MS      60000 /* restart + every shard led by a live runtime */
#define MAX_ROUNDS     200

static tproc_t procs[N_RT];
static char ids[N_RT][KVMESH_ID_HEX_LEN + 1];
static testsrv_t *srv;
static char url[256];
static const char *deployment = "benchfo";
static const kvmesh_scope_t sc = {"bench", "fo"};

static void cleanup_all(void)
{
    for (int i = 0; i < N_RT; i++)
        tproc_kill(&procs[i], SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
}

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define MAX_OVERRIDES 8
static int n_over;
static const char *over[MAX_OVERRIDES]; /* "field=value", applied to every runtime */

static void base_config(kvmesh_config_t *c, const char *u, const char *dep)
{
    kvmesh_config_set(c, "metadata_url", u);
    kvmesh_config_set(c, "deployment", dep);
    kvmesh_config_set(c, "transport", "tcp");
    for (int i = 0; i < n_over; i++) {
        char f[128];
        const char *eq = strchr(over[i], '=');
        if (!eq || (size_t)(eq - over[i]) >= sizeof(f))
            continue;
        memcpy(f, over[i], (size_t)(eq - over[i]));
        f[eq - over[i]] = 0;
        if (kvmesh_config_set(c, f, eq + 1) != 0)
            fprintf(stderr, "bench_failover: %s: %s\n", over[i], kvmesh_last_error());
    }
}

static int runtime_main(int argc, char **argv)
{
    for (int i = 4; i < argc && n_over < MAX_OVERRIDES; i++)
        over[n_over++] = argv[i];
    kvmesh_config_t *c = kvmesh_config_new();
    base_config(c, argv[2], argv[3]);
    kvmesh_config_set(c, "memory_size", "64MiB");
    kvmesh_config_set(c, "segment_size", "64MiB");
    return tproc_child_run(c, false);
}

static void start_rt(int i, bool restart)
{
    char line[256];
    if (restart)
        CHECK(tproc_restart(&procs[i], line, sizeof(line), 30000) == 0);
    else {
        static char exe[4096];
        CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
        const char *av[4 + MAX_OVERRIDES] = {exe, "--runtime", url, deployment};
        for (int k = 0; k < n_over; k++)
            av[4 + k] = over[k];
        CHECK(tproc_start(&procs[i], 4 + n_over, av, "READY", line, sizeof(line), 30000) == 0);
    }
    uint64_t epoch = 0;
    CHECK(sscanf(line, "READY %32s %" SCNu64, ids[i], &epoch) == 2);
}

/* ---- cluster state --------------------------------------------------------------------------- */

static kvmesh_admin_t *adm;
static char primary[N_SHARDS][KVMESH_ID_HEX_LEN + 1];

/* Reads every shard record; true when each is active and led by one of the live runtimes. */
static bool read_shards(void)
{
    kvmesh_admin_shard_t recs[N_SHARDS];
    size_t n = 0;
    bool more = false;
    memset(primary, 0, sizeof(primary));
    if (kvmesh_admin_shards(adm, 0, N_SHARDS, recs, &n, &more) != 0)
        return false;
    size_t settled = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].shard >= N_SHARDS || recs[i].malformed)
            continue;
        bool live = false;
        for (int r = 0; r < N_RT; r++)
            live |= strcmp(recs[i].primary, ids[r]) == 0;
        if (live && strcmp(recs[i].state, "active") == 0) {
            snprintf(primary[recs[i].shard], sizeof(primary[0]), "%s", recs[i].primary);
            settled++;
        }
    }
    return settled == N_SHARDS;
}

static void wait_settled(kvmesh_t *kv)
{
    CHECK(tproc_wait_storage(kv, N_RT, SETTLE_MS) == 0);
    uint64_t end = env_clock_mono_ms() + SETTLE_MS;
    while (!read_shards()) {
        CHECK(env_clock_mono_ms() < end);
        usleep(100000);
    }
}

static uint32_t shard_of(const char *key)
{
    kvm_ident_t id;
    CHECK(kvm_ident_init(&id, sc.tenant, sc.domain, key, strlen(key)) == 0);
    uint32_t s = kvm_ident_shard(&id, N_SHARDS);
    kvm_ident_free(&id);
    return s;
}

/* ---- the timed loops ------------------------------------------------------------------------- */

enum kind { K_OWNER, K_AUTH, K__N };
static const char *const kind_name[K__N] = {"owner death", "authority death"};

struct probe {
    kvmesh_t *kv;
    const char *key;
    bool write;
    uint64_t t_kill; /* mono ns */
    uint64_t took_ns;
    unsigned failed; /* failed calls before the first success */
};

static void *probe_main(void *arg)
{
    struct probe *p = arg;
    uint8_t v[VLEN], out[VLEN];
    tproc_fill(v, VLEN, 7);
    uint64_t end = p->t_kill + (uint64_t)ROUND_LIMIT_MS * 1000000u;
    p->took_ns = (uint64_t)ROUND_LIMIT_MS * 1000000u;
    while (env_clock_mono_ns() < end) {
        size_t got = 0;
        int rc = p->write ? kvmesh_put(p->kv, &sc, p->key, strlen(p->key), v, VLEN, NULL)
                          : kvmesh_get_into(p->kv, &sc, p->key, strlen(p->key), out, VLEN, &got);
        if (rc == 0 && (p->write || got == VLEN)) {
            p->took_ns = env_clock_mono_ns() - p->t_kill;
            return NULL;
        }
        p->failed++;
        if (getenv("BENCH_FAILOVER_VERBOSE"))
            fprintf(stderr, "  %s %s: %s at %.0f ms: %s\n", p->write ? "put" : "get", p->key,
                    kvmesh_errname(rc), (double)(env_clock_mono_ns() - p->t_kill) / 1e6,
                    kvmesh_last_error());
        usleep(1000);
    }
    return NULL;
}

struct control {
    kvmesh_t *kv;
    const char *key;
    atomic_bool stop;
    uint64_t ok, failed, max_ns;
};

static void *control_main(void *arg)
{
    struct control *c = arg;
    uint8_t v[VLEN];
    tproc_fill(v, VLEN, 9);
    for (unsigned i = 0; i < 1000000 && !atomic_load(&c->stop); i++) {
        uint64_t t0 = env_clock_mono_ns();
        int rc = kvmesh_put(c->kv, &sc, c->key, strlen(c->key), v, VLEN, NULL);
        uint64_t el = env_clock_mono_ns() - t0;
        if (rc == 0)
            c->ok++;
        else {
            c->failed++;
            if (getenv("BENCH_FAILOVER_VERBOSE"))
                fprintf(stderr, "  control put: %s after %.0f ms: %s\n", kvmesh_errname(rc),
                        (double)el / 1e6, kvmesh_last_error());
        }
        if (el > c->max_ns)
            c->max_ns = el;
    }
    return NULL;
}

/* ---- results --------------------------------------------------------------------------------- */

static uint64_t res[K__N][2][MAX_ROUNDS]; /* [kind][read=0/write=1][round] */
static uint64_t res_ctl[MAX_ROUNDS];      /* the control key's slowest put of each round */
static size_t n_ctl;
static size_t n_res[K__N];
static unsigned res_fail[K__N][2];

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double q_ms(uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return (double)v[i] / 1e6;
}

/* One round: victim slot v. Returns false when no key of some kind was found (skipped). */
static bool round_run(kvmesh_t *kv, int round, int v, struct control *ctl_out)
{
    static char keys[N_KEYS][32];
    uint8_t val[VLEN];
    tproc_fill(val, VLEN, 1);
    int pick[K__N] = {-1, -1}, ctl = -1;
    for (int i = 0; i < N_KEYS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "r%d-k%d", round, i);
        CHECK(kvmesh_put(kv, &sc, keys[i], strlen(keys[i]), val, VLEN, NULL) == 0);
    }
    CHECK(read_shards());
    for (int i = 0; i < N_KEYS; i++) {
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(kv, &sc, keys[i], strlen(keys[i]), &ri) == 0);
        bool owner = false;
        for (uint32_t r = 0; r < ri.n_replicas; r++)
            owner |= strcmp(ri.replicas[r].owner, ids[v]) == 0;
        bool auth = strcmp(primary[shard_of(keys[i])], ids[v]) == 0;
        if (owner && !auth && pick[K_OWNER] < 0)
            pick[K_OWNER] = i;
        if (auth && !owner && pick[K_AUTH] < 0)
            pick[K_AUTH] = i;
        if (!auth && !owner && ctl < 0)
            ctl = i;
    }
    if (pick[K_OWNER] < 0 || pick[K_AUTH] < 0 || ctl < 0)
        return false;

    struct probe pr[K__N][2];
    pthread_t th[K__N][2], cth;
    struct control *c = ctl_out;
    *c = (struct control){.kv = kv, .key = keys[ctl]};
    uint64_t t_kill = env_clock_mono_ns();
    CHECK(tproc_kill(&procs[v], SIGKILL) == 0); /* returns once the process is reaped */
    CHECK(pthread_create(&cth, NULL, control_main, c) == 0);
    for (int k = 0; k < K__N; k++)
        for (int w = 0; w < 2; w++) {
            pr[k][w] = (struct probe){.kv = kv, .key = keys[pick[k]], .write = w, .t_kill = t_kill};
            CHECK(pthread_create(&th[k][w], NULL, probe_main, &pr[k][w]) == 0);
        }
    for (int k = 0; k < K__N; k++)
        for (int w = 0; w < 2; w++)
            pthread_join(th[k][w], NULL);
    atomic_store(&c->stop, true);
    pthread_join(cth, NULL);
    uint64_t window = 0;
    for (int k = 0; k < K__N; k++) {
        for (int w = 0; w < 2; w++) {
            res[k][w][n_res[k]] = pr[k][w].took_ns;
            res_fail[k][w] += pr[k][w].failed;
            if (pr[k][w].took_ns > window)
                window = pr[k][w].took_ns;
        }
        n_res[k]++;
    }
    fprintf(stderr,
            "round %2d: killed runtime %d; owner key write %.0f ms read %.0f ms; authority key "
            "write %.0f ms read %.0f ms; control key: %" PRIu64 " puts ok, %" PRIu64
            " failed, slowest %.0f ms (window %.0f ms)\n",
            round, v, (double)pr[K_OWNER][1].took_ns / 1e6, (double)pr[K_OWNER][0].took_ns / 1e6,
            (double)pr[K_AUTH][1].took_ns / 1e6, (double)pr[K_AUTH][0].took_ns / 1e6, c->ok,
            c->failed, (double)c->max_ns / 1e6, (double)window / 1e6);
    return true;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argc, argv);
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (rounds < 1 || rounds > MAX_ROUNDS || argc - 2 > MAX_OVERRIDES) {
        fprintf(stderr, "usage: %s [rounds 1..%d] [field=value ... (at most %d)]\n", argv[0],
                MAX_ROUNDS, MAX_OVERRIDES);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        over[n_over++] = argv[i];
    signal(SIGPIPE, SIG_IGN);
    uint64_t t_start = env_clock_mono_ms();
    CHECK(testsrv_start_redis(&srv, NULL) == 0);
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    for (int i = 0; i < N_RT; i++)
        start_rt(i, false);
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    base_config(c, url, deployment);
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "2") == 0);
    CHECK(kvmesh_admin_open(c, &adm) == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "client open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    wait_settled(kv);

    uint64_t ctl_ok = 0, ctl_fail = 0, ctl_max = 0;
    int done = 0, skipped = 0;
    for (int r = 0; done < rounds && r < 2 * rounds; r++) {
        int v = r % N_RT;
        struct control ctl;
        if (!round_run(kv, r, v, &ctl)) {
            skipped++;
            continue;
        }
        done++;
        res_ctl[n_ctl++] = ctl.max_ns;
        ctl_ok += ctl.ok;
        ctl_fail += ctl.failed;
        if (ctl.max_ns > ctl_max)
            ctl_max = ctl.max_ns;
        start_rt(v, true);
        wait_settled(kv);
    }

    printf("bench_failover: %d kills (kill -9, the 3 storage runtimes in turn), %d rounds "
           "skipped (no key of each kind); redis metadata, tcp transport, replicas 2; %.0f s in "
           "all; configuration: defaults",
           done, skipped, (double)(env_clock_mono_ms() - t_start) / 1e3);
    for (int i = 0; i < n_over; i++)
        printf(" %s", over[i]);
    printf("\n\n");
    printf("| time from kill -9 to the first successful call (ms) | median | p90 | max | failed "
           "calls before it |\n");
    printf("| --- | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < K__N; k++)
        for (int w = 1; w >= 0; w--) {
            size_t n = n_res[k];
            double p50 = q_ms(res[k][w], n, 0.5), p90 = q_ms(res[k][w], n, 0.9),
                   mx = q_ms(res[k][w], n, 1.0);
            printf("| %s: %s | %.0f | %.0f | %.0f | %u |\n", kind_name[k], w ? "put" : "get", p50,
                   p90, mx, res_fail[k][w]);
        }
    printf("| other key (no replica on the victim, shard led by another runtime): slowest put "
           "during the window | %.0f | %.0f | %.0f | %" PRIu64 " |\n",
           q_ms(res_ctl, n_ctl, 0.5), q_ms(res_ctl, n_ctl, 0.9), q_ms(res_ctl, n_ctl, 1.0),
           ctl_fail);
    printf("\nother key, put in a loop during every failover window: %" PRIu64 " ok, %" PRIu64
           " failed, slowest %.0f ms\n",
           ctl_ok, ctl_fail, (double)ctl_max / 1e6);
    kvmesh_close(kv);
    kvmesh_admin_close(adm);
    for (int i = 0; i < N_RT; i++)
        tproc_close_stdin(&procs[i]);
    for (int i = 0; i < N_RT; i++)
        tproc_stop(&procs[i], 30000);
    testsrv_stop(srv);
    return 0;
}
