// SPDX-License-Identifier: Apache-2.0
/*
 * store_hol — no head-of-line blocking across keys in one client (issue "Failover time"): while
 * one call waits on an owner that is stopped, the other threads of the same client keep
 * completing calls on keys whose owners (and route authorities) are alive.
 *
 *   itest_store_hol redis          the test (starts redis-server with testsrv); the route mode
 *                                  comes from KVMESH_TEST_ROUTE_MODE (default embedded_wrh)
 *   itest_store_hol --runtime URL DEPLOYMENT ROUTE_MODE
 *                                  one storage runtime process: prints "READY <id> <epoch>",
 *                                  then waits for EOF on stdin
 *
 * Three runtime processes A, B, C (tcp) on a real redis-server and one client runtime in this
 * process. top_k is 1, so a shard's routes live on one authority only: the workers' keys are
 * chosen on shards that A or B lead (embedded_wrh), and hard-pinned to A or B (replicas 1), so
 * nothing of theirs touches C. C holds one key of its own. C is stopped with SIGSTOP (its lease
 * is long, so it stays a listed member: the worst case for callers); then two threads call on
 * C's key (a get, and a put hard-pinned to C) and block until their deadline, while WORKERS
 * threads put and read back (verified) their own keys in a loop. Each worker must complete calls
 * that start after the blocked calls started and end before they returned, without an error. No
 * timing assertion beyond "progress happened while the other calls were blocked"; every loop is
 * bounded in count and time; every process started here is killed by pid.
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

#define N_RT        3
#define N_SHARDS    64
#define WORKERS     4
#define KEYS_PER_W  4
#define VLEN        4096
#define DEADLINE_MS "2000"
#define MAX_CALLS   200000 /* per worker */

static tproc_t procs[N_RT];
static char ids[N_RT][KVMESH_ID_HEX_LEN + 1];
static testsrv_t *srv;
static char url[256];
static const char *deployment = "hol";
static const kvmesh_scope_t sc = {"hol", "d"};

static void cleanup_all(void)
{
    for (int i = 0; i < N_RT; i++)
        if (procs[i].pid > 0) {
            kill(procs[i].pid, SIGCONT);
            tproc_kill(&procs[i], SIGKILL);
        }
    testsrv_stop(srv);
    srv = NULL;
}

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

static const char *route_mode(void)
{
    const char *m = getenv("KVMESH_TEST_ROUTE_MODE");
    return m && *m ? m : "embedded_wrh";
}

static void common_config(kvmesh_config_t *c, const char *u, const char *mode)
{
    kvmesh_config_set(c, "metadata_url", u);
    kvmesh_config_set(c, "deployment", deployment);
    kvmesh_config_set(c, "route_mode", mode);
    kvmesh_config_set(c, "top_k", "1");
    kvmesh_config_set(c, "request_timeout_ms", DEADLINE_MS);
    kvmesh_config_set(c, "lease_ttl_ms", "60000"); /* C stays listed while stopped */
    kvmesh_config_set(c, "transport", "tcp");
}

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    common_config(c, argv[2], argv[4]);
    kvmesh_config_set(c, "deployment", argv[3]);
    kvmesh_config_set(c, "memory_size", "64MiB");
    return tproc_child_run(c, false);
}

/* ---- shard primaries (embedded_wrh) ---------------------------------------------------------- */

static kvmesh_admin_t *adm;
static char primary[N_SHARDS][KVMESH_ID_HEX_LEN + 1];

static bool shards_settled(void)
{
    kvmesh_admin_shard_t recs[N_SHARDS];
    size_t n = 0, ok = 0;
    bool more = false;
    memset(primary, 0, sizeof(primary));
    if (kvmesh_admin_shards(adm, 0, N_SHARDS, recs, &n, &more) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool live = false;
        for (int r = 0; r < N_RT; r++)
            live |= strcmp(recs[i].primary, ids[r]) == 0;
        if (recs[i].shard < N_SHARDS && !recs[i].malformed && live &&
            strcmp(recs[i].state, "active") == 0) {
            snprintf(primary[recs[i].shard], sizeof(primary[0]), "%s", recs[i].primary);
            ok++;
        }
    }
    return ok == N_SHARDS;
}

static bool led_by_c(const char *key)
{
    if (strcmp(route_mode(), "metadata_only") == 0)
        return false;
    kvm_ident_t id;
    CHECK(kvm_ident_init(&id, sc.tenant, sc.domain, key, strlen(key)) == 0);
    uint32_t s = kvm_ident_shard(&id, N_SHARDS);
    kvm_ident_free(&id);
    return strcmp(primary[s], ids[2]) == 0;
}

/* ---- the blocked calls and the workers ------------------------------------------------------- */

static kvmesh_t *kv;
static atomic_int n_blocked_done;
static atomic_bool blocked_started;
static uint64_t blocked_start_ms; /* the later start of the two blocked calls */

struct blocked {
    bool put;
    _Atomic uint64_t t0; /* read by the main thread while the call is blocked */
    uint64_t t1;
    int rc;
};

static void *blocked_main(void *arg)
{
    struct blocked *b = arg;
    uint8_t buf[VLEN];
    size_t got = 0;
    const char *c_id[1] = {ids[2]};
    kvmesh_put_opts_t pin = {
        .replicas = 1, .preferred_owners = c_id, .n_preferred = 1, .hard_pin = true};
    tproc_fill(buf, VLEN, 99);
    atomic_store(&b->t0, env_clock_mono_ms());
    b->rc = b->put ? kvmesh_put(kv, &sc, "c-new", 5, buf, VLEN, &pin)
                   : kvmesh_get_into(kv, &sc, "c-0", 3, buf, VLEN, &got);
    b->t1 = env_clock_mono_ms();
    atomic_fetch_add(&n_blocked_done, 1);
    return NULL;
}

struct worker {
    int id;
    char keys[KEYS_PER_W][32];
    int owner[KEYS_PER_W]; /* 0 = A, 1 = B */
    unsigned inside, errors, calls;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint8_t v[VLEN], out[VLEN];
    while (!atomic_load(&blocked_started))
        usleep(1000);
    for (unsigned i = 0; atomic_load(&n_blocked_done) < 2 && i < MAX_CALLS; i++) {
        int k = (int)(i % KEYS_PER_W);
        const char *own[1] = {ids[w->owner[k]]};
        kvmesh_put_opts_t pin = {
            .replicas = 1, .preferred_owners = own, .n_preferred = 1, .hard_pin = true};
        tproc_fill(v, VLEN, (uint64_t)w->id * 1000003u + i);
        uint64_t t0 = env_clock_mono_ms();
        size_t got = 0;
        int rc = kvmesh_put(kv, &sc, w->keys[k], strlen(w->keys[k]), v, VLEN, &pin);
        if (rc == 0)
            rc = kvmesh_get_into(kv, &sc, w->keys[k], strlen(w->keys[k]), out, VLEN, &got);
        bool done_before = atomic_load(&n_blocked_done) == 0;
        w->calls++;
        if (rc != 0 || got != VLEN || memcmp(v, out, VLEN) != 0) {
            w->errors++;
            fprintf(stderr, "  worker %d key %s: %s: %s\n", w->id, w->keys[k], kvmesh_errname(rc),
                    rc ? kvmesh_last_error() : "bytes differ");
            continue;
        }
        if (done_before && t0 >= blocked_start_ms)
            w->inside++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 5 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    if (argc < 2 || strcmp(argv[1], "redis") != 0) {
        fprintf(stderr, "usage: %s redis\n", argv[0]);
        return 2;
    }
    uint64_t t_begin = env_clock_mono_ms();
    static char exe[4096];
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    CHECK(testsrv_start_redis(&srv, NULL) == 0);
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    for (int i = 0; i < N_RT; i++) {
        const char *av[] = {exe, "--runtime", url, deployment, route_mode()};
        char line[256];
        uint64_t epoch = 0;
        CHECK(tproc_start(&procs[i], 5, av, "READY", line, sizeof(line), 30000) == 0);
        CHECK(sscanf(line, "READY %32s %" SCNu64, ids[i], &epoch) == 2);
    }
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    common_config(c, url, route_mode());
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_admin_open(c, &adm) == 0);
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "client open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    CHECK(tproc_wait_storage(kv, N_RT, 30000) == 0);
    if (strcmp(route_mode(), "metadata_only") != 0) {
        /* Every shard active under a live primary, and the same primaries over 1 s (three reads
         * 500 ms apart): shards whose WRH winner is the runtime that joined last move to it
         * after a transfer, and a key chosen by its primary before that move would be led by C. */
        uint64_t end = env_clock_mono_ms() + 30000;
        static char last[N_SHARDS][KVMESH_ID_HEX_LEN + 1];
        for (int stable = 0; stable < 3;) {
            CHECK(env_clock_mono_ms() < end);
            bool ok = shards_settled();
            stable = ok && memcmp(last, primary, sizeof(primary)) == 0 ? stable + 1 : ok;
            memcpy(last, primary, sizeof(primary));
            if (stable < 3)
                usleep(500000);
        }
    }

    /* C's key, and the workers' keys on shards that C does not lead, pinned to A or B */
    uint8_t v[VLEN];
    tproc_fill(v, VLEN, 1);
    const char *c_id[1] = {ids[2]};
    kvmesh_put_opts_t pin_c = {
        .replicas = 1, .preferred_owners = c_id, .n_preferred = 1, .hard_pin = true};
    CHECK(kvmesh_put(kv, &sc, "c-0", 3, v, VLEN, &pin_c) == 0);
    static struct worker ws[WORKERS];
    unsigned cand = 0;
    for (int w = 0; w < WORKERS; w++) {
        ws[w].id = w;
        for (int k = 0; k < KEYS_PER_W; k++) {
            do {
                CHECK(cand < 10000);
                snprintf(ws[w].keys[k], sizeof(ws[w].keys[k]), "w%d-%u", w, cand++);
            } while (led_by_c(ws[w].keys[k]));
            ws[w].owner[k] = (w + k) % 2;
            const char *own[1] = {ids[ws[w].owner[k]]};
            kvmesh_put_opts_t pin = {
                .replicas = 1, .preferred_owners = own, .n_preferred = 1, .hard_pin = true};
            CHECK(kvmesh_put(kv, &sc, ws[w].keys[k], strlen(ws[w].keys[k]), v, VLEN, &pin) == 0);
        }
    }

    /* stop C; block two calls on it; the workers run meanwhile */
    CHECK(kill(procs[2].pid, SIGSTOP) == 0);
    /* the signal is asynchronous: wait (bounded) until every thread of C is stopped, or a call
     * started right after it can still be served (seen once: the get on C's key answered in 1 ms)
     */
    {
        char path[64], st[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)procs[2].pid);
        bool stopped = false;
        for (int t = 0; t < 1000 && !stopped; t++) {
            FILE *f = fopen(path, "r");
            size_t n = f ? fread(st, 1, sizeof(st) - 1, f) : 0;
            if (f)
                fclose(f);
            st[n] = 0;
            const char *rp = strrchr(st, ')'); /* "pid (comm) S ..." */
            stopped = rp && rp[1] == ' ' && rp[2] == 'T';
            if (!stopped)
                usleep(1000);
        }
        CHECK(stopped);
        usleep(20000); /* its in-flight replies, if any, are out before the blocked calls start */
    }
    pthread_t wt[WORKERS], bt[2];
    for (int w = 0; w < WORKERS; w++)
        CHECK(pthread_create(&wt[w], NULL, worker_main, &ws[w]) == 0);
    struct blocked bl[2] = {{.put = false}, {.put = true}};
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&bt[i], NULL, blocked_main, &bl[i]) == 0);
    uint64_t t0[2] = {0, 0}, wait_end = env_clock_mono_ms() + 10000;
    while ((t0[0] = atomic_load(&bl[0].t0)) == 0 || (t0[1] = atomic_load(&bl[1].t0)) == 0) {
        CHECK(env_clock_mono_ms() < wait_end);
        usleep(1000);
    }
    usleep(50000); /* both blocked calls are past their start */
    blocked_start_ms = t0[0] > t0[1] ? t0[0] : t0[1];
    atomic_store(&blocked_started, true);
    for (int i = 0; i < 2; i++)
        pthread_join(bt[i], NULL);
    for (int w = 0; w < WORKERS; w++)
        pthread_join(wt[w], NULL);
    CHECK(kill(procs[2].pid, SIGCONT) == 0);

    uint64_t window = (bl[0].t1 < bl[1].t1 ? bl[0].t1 : bl[1].t1) - blocked_start_ms;
    fprintf(stderr,
            "store_hol[%s]: C stopped; get on C's key: %s after %" PRIu64
            " ms; put pinned to C: %s after %" PRIu64 " ms\n",
            route_mode(), kvmesh_errname(bl[0].rc), bl[0].t1 - t0[0], kvmesh_errname(bl[1].rc),
            bl[1].t1 - t0[1]);
    unsigned total = 0, errors = 0;
    for (int w = 0; w < WORKERS; w++) {
        fprintf(stderr,
                "  worker %d: %u put+get pairs completed inside the %" PRIu64
                " ms blocked window (%u calls, %u errors)\n",
                w, ws[w].inside, window, ws[w].calls, ws[w].errors);
        total += ws[w].inside;
        errors += ws[w].errors;
    }
    fprintf(stderr, "  %u pairs in all (%.0f per second); test took %" PRIu64 " ms\n", total,
            window ? (double)total * 1000.0 / (double)window : 0.0, env_clock_mono_ms() - t_begin);
    CHECK(bl[0].rc != 0 && bl[1].rc != 0); /* C was stopped: neither can have succeeded */
    CHECK(errors == 0);
    for (int w = 0; w < WORKERS; w++)
        CHECK(ws[w].inside > 0);

    kvmesh_close(kv);
    kvmesh_admin_close(adm);
    for (int i = 0; i < N_RT; i++)
        tproc_close_stdin(&procs[i]);
    for (int i = 0; i < N_RT; i++)
        tproc_stop(&procs[i], 30000);
    testsrv_stop(srv);
    return 0;
}
