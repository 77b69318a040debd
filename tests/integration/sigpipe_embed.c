/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigpipe_embed — the library is safe to embed with default signal dispositions: no SIGPIPE it
 * provokes reaches its host (docs/api.md, "Signals"). Every process here puts SIGPIPE at SIG_DFL,
 * unblocked in its main thread, before it opens a runtime, so a SIGPIPE delivered to it kills it.
 *
 * itest_sigpipe_embed masks: two runtimes (tcp and shm transports, tracing to a fake collector,
 * admin endpoints) against a real redis-server, with traffic between them; every thread that
 * appeared since the start (loop, transport I/O, tracer exporter, admin HTTP server) must block
 * SIGPIPE (SigBlk of /proc/self/task/TID/status), the calling thread must not, and the
 * disposition must still be SIG_DFL after close.
 *
 * itest_sigpipe_embed chaos: 2 peer runtime processes and this process as a client against a
 * real redis-server, all moving values with each other over tcp (CHAOS_LARGE threads of 1..4 MiB
 * values, the others batches of CHAOS_BATCH small values: bursts of control calls). CHAOS_ROUNDS
 * times, during the traffic, a peer goes away mid-transfer (SIGKILL every third round, otherwise
 * kvmesh_close on EOF) and comes back, redis closes every client connection (CLIENT KILL), and
 * every fourth round redis-server is killed and restarted. Fails if this process or a peer dies
 * of a signal the test did not send (peers are checked before each fault and must exit 0 when
 * they close), if any value reads back wrong, or if no traffic succeeds after the last fault.
 * With the library's SIGPIPE blocking reverted, peers die of SIGPIPE within the first rounds.
 *
 * itest_sigpipe_embed --runtime URL DEPLOYMENT: one peer; kvmesh_open, "READY", traffic threads
 * like the client's; EOF on stdin stops them, closes and exits 0.
 *
 * Every loop is bounded in count and time; every process started here is killed by pid.
 */
#include <dirent.h>
#include <hiredis/hiredis.h>
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
#include "otlp_fake.h"
#include "proc.h"
#include "testsrv.h"
#include "tmpdir.h"

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define CHAOS_PEERS  2
#define CHAOS_ROUNDS 8 /* ends on a close round: round % 3 == 0 kills (see below) */
/* traffic threads in a process: the first CHAOS_LARGE large, the rest batches. Under TSan
 * (several times slower, on shared cores) fewer, so that leases keep up and traffic recovers. */
#if defined(__SANITIZE_THREAD__)
#define CHAOS_THREADS 4
#else
#define CHAOS_THREADS 6
#endif
#define CHAOS_LARGE      2
#define CHAOS_BATCH      32 /* items per batch (x 4 KiB: within CHAOS_MAX_VALUE) */
#define CHAOS_MAX_VALUE  (4 << 20)
#define CHAOS_KEYS       8       /* per traffic thread */
#define CHAOS_ROUND_MS   300     /* traffic between two faults */
#define CHAOS_RECOVER_MS 60000   /* bound: traffic succeeds again after the last fault */
#define CHAOS_WARM_MS    60000   /* bound: traffic succeeds before the first fault */
#define CHAOS_OPS_MAX    1000000 /* bound on one traffic thread's operations */

static tproc_t peers[CHAOS_PEERS];
static testsrv_t *srv;
static otlp_fake_t *collector;
static const char *deployment = "itest-sigpipe";
static const kvmesh_scope_t sc = {"it", "sigpipe"};

static void cleanup_all(void)
{
    for (int i = 0; i < CHAOS_PEERS; i++)
        tproc_kill(&peers[i], SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
    otlp_fake_stop(collector);
    collector = NULL;
}

/* SIGPIPE is at SIG_DFL and not blocked in the calling thread. */
static bool sigpipe_default(void)
{
    struct sigaction sa;
    sigset_t cur;
    if (sigaction(SIGPIPE, NULL, &sa) != 0 || pthread_sigmask(SIG_BLOCK, NULL, &cur) != 0)
        return false;
    return sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO) && !sigismember(&cur, SIGPIPE);
}

/* The embedding program's start: default dispositions. A launcher may have ignored or blocked
 * SIGPIPE (both are inherited across exec); put them back to what a plain program has. */
static void default_signals(void)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    if (!sigpipe_default()) {
        fprintf(stderr, "SIGPIPE is not at its default disposition at start\n");
        exit(1);
    }
}

static void set_common(kvmesh_config_t *c, const char *url, const char *mem)
{
    const char *kv[][2] = {{"metadata_url", url},       {"deployment", deployment},
                           {"memory_size", mem},        {"segment_size", "16MiB"},
                           {"max_object_size", "4MiB"}, {"transport", "tcp"},
                           {"lease_ttl_ms", "2000"},    {"request_timeout_ms", "2000"}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
        CHECK(kvmesh_config_set(c, kv[i][0], kv[i][1]) == 0);
}

/* ---- traffic: puts and gets of large values, errors tolerated, wrong bytes not ----------- */

struct traffic {
    kvmesh_t *kv;
    uint32_t who;
    bool large; /* 1..4 MiB values (payload-heavy), else batches of 4 KiB (many calls at once) */
    atomic_bool stop;
    atomic_long ok, failed, wrong;
    char last_error[256]; /* the newest failure's message (read after the join) */
    pthread_t th;
};

static void note_failure(struct traffic *t)
{
    atomic_fetch_add(&t->failed, 1);
    snprintf(t->last_error, sizeof(t->last_error), "%s", kvmesh_last_error());
    usleep(10000);
}

/* A read that came back with bytes that were never put under its key: says what differs (the
 * lengths, the first and last differing offsets, how many bytes differ) so that a failure shows
 * whether it was a short read, another object's bytes or a torn copy. */
static void note_wrong(struct traffic *t, const char *key, const uint8_t *want, size_t want_len,
                       const uint8_t *got, size_t got_len)
{
    atomic_fetch_add(&t->wrong, 1);
    size_t n = want_len < got_len ? want_len : got_len, first = n, last = n, diff = 0;
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i]) {
            if (first == n)
                first = i;
            last = i;
            diff++;
        }
    fprintf(stderr,
            "WRONG pid %d key %s: length %zu want %zu; %zu bytes differ, first at %zu, last at "
            "%zu\n",
            (int)getpid(), key, got_len, want_len, diff, first, last);
}

/* One large value: put, then get it back. */
static void large_op(struct traffic *t, uint32_t i, uint8_t *v, uint8_t *out)
{
    uint32_t k = i % CHAOS_KEYS;
    size_t len = ((size_t)1 << 20) + (size_t)(k % 4) * (1 << 20) - (k % 4 == 3) * 64;
    char key[48];
    snprintf(key, sizeof(key), "v-%u-%u", t->who, k);
    tproc_fill(v, len, (uint64_t)t->who << 32 | k);
    if (kvmesh_put(t->kv, &sc, key, strlen(key), v, len, NULL) != 0) {
        note_failure(t);
        return;
    }
    size_t got = 0;
    int rc = kvmesh_get_into(t->kv, &sc, key, strlen(key), out, CHAOS_MAX_VALUE, &got);
    if (rc == 0 && (got != len || memcmp(out, v, len) != 0))
        note_wrong(t, key, v, len, out, got);
    else if (rc == 0)
        atomic_fetch_add(&t->ok, 1);
    else
        note_failure(t);
}

/* A batch of small values: one hand-off, CHAOS_BATCH control calls at once (reserve, route,
 * commit) towards every owner, then a batch get of them. */
static void batch_op(struct traffic *t, uint32_t i, uint8_t *v, uint8_t *out)
{
    static const size_t len = 4096;
    kvmesh_batch_item_t it[CHAOS_BATCH];
    char keys[CHAOS_BATCH][48];
    for (uint32_t j = 0; j < CHAOS_BATCH; j++) {
        snprintf(keys[j], sizeof(keys[j]), "b-%u-%u-%u", t->who, i % 4, j);
        tproc_fill(v + j * len, len, (uint64_t)t->who << 32 | (i % 4) << 16 | j);
        it[j] = (kvmesh_batch_item_t){
            .key = keys[j], .key_len = strlen(keys[j]), .buf = v + j * len, .len = len};
    }
    if (kvmesh_batch_put(t->kv, &sc, it, CHAOS_BATCH, NULL) != 0) {
        note_failure(t);
        return;
    }
    for (uint32_t j = 0; j < CHAOS_BATCH; j++)
        it[j].buf = out + j * len;
    int rc = kvmesh_batch_get(t->kv, &sc, it, CHAOS_BATCH);
    for (uint32_t j = 0; rc == 0 && j < CHAOS_BATCH; j++)
        if (it[j].out_len != len || memcmp(out + j * len, v + j * len, len) != 0) {
            note_wrong(t, keys[j], v + j * len, len, out + j * len, it[j].out_len);
            return;
        }
    if (rc == 0)
        atomic_fetch_add(&t->ok, 1);
    else
        note_failure(t);
}

static void *traffic_main(void *arg)
{
    struct traffic *t = arg;
    uint8_t *v = malloc(CHAOS_MAX_VALUE), *out = malloc(CHAOS_MAX_VALUE);
    if (!v || !out) {
        atomic_fetch_add(&t->wrong, 1);
        free(v);
        free(out);
        return NULL;
    }
    for (uint32_t i = 0; i < CHAOS_OPS_MAX && !atomic_load(&t->stop); i++) {
        if (t->large)
            large_op(t, i, v, out);
        else
            batch_op(t, i, v, out);
    }
    free(v);
    free(out);
    return NULL;
}

static int traffic_start(struct traffic *t, kvmesh_t *kv, uint32_t who, bool large)
{
    t->kv = kv;
    t->who = who;
    t->large = large;
    return pthread_create(&t->th, NULL, traffic_main, t);
}

static void traffic_stop(struct traffic *t)
{
    atomic_store(&t->stop, true);
    pthread_join(t->th, NULL);
}

/* ---- the peer process -------------------------------------------------------------------- */

static int runtime_main(char **argv)
{
    default_signals();
    kvmesh_config_t *c = kvmesh_config_new();
    if (!c)
        return 1;
    set_common(c, argv[2], "128MiB");
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    static struct traffic t[CHAOS_THREADS];
    uint32_t base = 100u * (1u + (uint32_t)getpid() % 1000u);
    for (int i = 0; i < CHAOS_THREADS; i++)
        if (traffic_start(&t[i], kv, base + (uint32_t)i, i < CHAOS_LARGE) != 0)
            return 1;
    printf("READY\n");
    fflush(stdout);
    char b[64];
    while (read(0, b, sizeof(b)) > 0)
        ;
    long wrong = 0;
    for (int i = 0; i < CHAOS_THREADS; i++) {
        traffic_stop(&t[i]);
        wrong += atomic_load(&t[i].wrong);
    }
    kvmesh_close(kv);
    return wrong == 0 && sigpipe_default() ? 0 : 3;
}

/* ---- masks: every library thread blocks SIGPIPE ------------------------------------------- */

#define MAX_TASKS 512

/* Thread ids of this process (at most cap). */
static size_t tasks(pid_t *out, size_t cap)
{
    DIR *d = opendir("/proc/self/task");
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < cap)
        if (e->d_name[0] != '.')
            out[n++] = (pid_t)atoi(e->d_name);
    if (d)
        closedir(d);
    return n;
}

/* Whether thread tid blocks SIGPIPE (SigBlk of its status); name gets its comm. -1: gone. */
static int task_blocks_sigpipe(pid_t tid, char *name, size_t cap)
{
    char p[96], line[256];
    snprintf(p, sizeof(p), "/proc/self/task/%d/comm", (int)tid);
    FILE *f = fopen(p, "r");
    snprintf(name, cap, "?");
    if (f) {
        if (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(name, cap, "%.31s", line); /* comm: at most 15 characters */
        }
        fclose(f);
    }
    snprintf(p, sizeof(p), "/proc/self/task/%d/status", (int)tid);
    if (!(f = fopen(p, "r")))
        return -1;
    int r = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "SigBlk:", 7) == 0) {
            unsigned long long m = strtoull(line + 7, NULL, 16);
            r = (m >> (SIGPIPE - 1)) & 1;
        }
    fclose(f);
    return r;
}

static bool in_set(const pid_t *s, size_t n, pid_t x)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == x)
            return true;
    return false;
}

static int masks_main(void)
{
    CHECK(testsrv_start_redis(&srv, NULL) == 0);
    collector = otlp_fake_start(0); /* the test's own thread: not checked below */
    CHECK(collector != NULL);
    static pid_t before[MAX_TASKS], after[MAX_TASKS];
    size_t n_before = tasks(before, MAX_TASKS);

    /* two runtimes, one per data transport, with tracing to a collector and admin endpoints */
    kvmesh_t *kv[2] = {NULL, NULL};
    const char *transport[2] = {"tcp", "shm"};
    static char dir[256]; /* removed at exit also when a CHECK fails */
    CHECK(ttmp_make_auto(dir, sizeof(dir), "kvmesh-sigpipe") == 0);
    for (int i = 0; i < 2; i++) {
        kvmesh_config_t *c = kvmesh_config_new();
        CHECK(c);
        set_common(c, testsrv_url(srv), "32MiB");
        CHECK(kvmesh_config_set(c, "transport", transport[i]) == 0);
        CHECK(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0") == 0);
        CHECK(kvmesh_config_set(c, "trace_sample_rate", "1") == 0);
        CHECK(kvmesh_config_set(c, "trace_capture_dir", dir) == 0);
        CHECK(kvmesh_config_set(c, "trace_otlp_url", collector->url) == 0);
        int rc = kvmesh_open(&kv[i], c);
        if (rc)
            fprintf(stderr, "open (%s): %s\n", transport[i], kvmesh_last_error());
        CHECK(rc == 0);
        kvmesh_config_free(c);
    }
    /* traffic between them, so that connection threads exist */
    static uint8_t v[1 << 20], out[1 << 20];
    tproc_fill(v, sizeof(v), 5);
    int ok = 0;
    uint64_t end = env_clock_mono_ms() + 15000;
    for (int i = 0; i < 200 && ok < 40 && env_clock_mono_ms() < end; i++) {
        char key[32];
        snprintf(key, sizeof(key), "m-%d", i);
        size_t got = 0;
        if (kvmesh_put(kv[i % 2], &sc, key, strlen(key), v, sizeof(v), NULL) == 0 &&
            kvmesh_get_into(kv[(i + 1) % 2], &sc, key, strlen(key), out, sizeof(out), &got) == 0)
            ok++;
        else
            usleep(20000);
    }
    CHECK(ok > 0);

    size_t n_after = tasks(after, MAX_TASKS);
    size_t checked = 0, bad = 0;
    for (size_t i = 0; i < n_after; i++) {
        if (in_set(before, n_before, after[i]))
            continue; /* this thread or the test's own collector */
        char name[64];
        int b = task_blocks_sigpipe(after[i], name, sizeof(name));
        if (b < 0)
            continue; /* exited meanwhile */
        checked++;
        if (!b) {
            fprintf(stderr, "library thread %d (%s) does not block SIGPIPE\n", (int)after[i], name);
            bad++;
        }
    }
    char name[64];
    CHECK(task_blocks_sigpipe(getpid(), name, sizeof(name)) == 0); /* the caller's mask */
    fprintf(stderr, "masks: %zu library threads checked, %zu without SIGPIPE blocked\n", checked,
            bad);
    CHECK(checked >= 4); /* at least loop, transport, exporter and admin server threads */
    CHECK(bad == 0);
    kvmesh_close(kv[0]);
    kvmesh_close(kv[1]);
    CHECK(sigpipe_default()); /* the library left the disposition and the mask alone */
    CHECK(ttmp_remove(dir) == 0);
    cleanup_all();
    return 0;
}

/* ---- chaos: peers and the metadata server close connections mid-write -------------------- */

/* A peer that died on its own (not by our kill) fails the test. */
static void check_peer_alive(int i)
{
    if (tproc_exited(&peers[i])) {
        char st[64];
        fprintf(stderr, "peer %d died on its own: %s\n", i,
                tproc_status_str(peers[i].status, st, sizeof(st)));
        CHECK(!"a peer process died");
    }
}

/* Redis closes every normal client connection (the library's included). */
static void redis_client_kill(void)
{
    redisContext *r = redisConnect("127.0.0.1", testsrv_port(srv));
    CHECK(r && !r->err);
    redisReply *rep = redisCommand(r, "CLIENT KILL TYPE normal SKIPME yes");
    CHECK(rep != NULL);
    freeReplyObject(rep);
    redisFree(r);
}

static long sum_ok(struct traffic *t, int n)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        s += atomic_load(&t[i].ok);
    return s;
}

static int chaos_main(const char *self_exe)
{
    CHECK(testsrv_start_redis(&srv, NULL) == 0);
    const char *url = testsrv_url(srv);
    for (int i = 0; i < CHAOS_PEERS; i++) {
        const char *argv[] = {self_exe, "--runtime", url, deployment};
        CHECK(tproc_start(&peers[i], 4, argv, "READY", NULL, 0, 30000) == 0);
    }
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    set_common(c, url, "0"); /* a client: every value goes to a peer and comes back */
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    kvmesh_config_free(c);
    CHECK(rc == 0);
    static struct traffic t[CHAOS_THREADS];
    for (int i = 0; i < CHAOS_THREADS; i++)
        CHECK(traffic_start(&t[i], kv, (uint32_t)i, i < CHAOS_LARGE) == 0);

    uint64_t warm = env_clock_mono_ms() + CHAOS_WARM_MS;
    while (sum_ok(t, CHAOS_THREADS) < 1 && env_clock_mono_ms() < warm)
        usleep(20000);
    CHECK(sum_ok(t, CHAOS_THREADS) >= 1);
    uint64_t t0 = env_clock_mono_ms();
    int peer_closes = 0, peer_kills = 0, client_kills = 0, redis_kills = 0;
    for (int round = 0; round < CHAOS_ROUNDS; round++) {
        usleep(CHAOS_ROUND_MS * 1000);
        int v = round % CHAOS_PEERS;
        for (int i = 0; i < CHAOS_PEERS; i++)
            check_peer_alive(i);
        /* mid-transfer: the traffic never pauses; every third round the peer is killed, the
         * others it closes itself (EOF on stdin: kvmesh_close while the others still talk to
         * it, which is how a peer most often goes away under an embedding program) */
        if (round % 3 == 0) {
            tproc_kill(&peers[v], SIGKILL);
            peer_kills++;
        } else {
            char st[64];
            int src = tproc_stop(&peers[v], 30000);
            if (src)
                fprintf(stderr, "peer %d: %s\n", v,
                        tproc_status_str(peers[v].status, st, sizeof(st)));
            CHECK(src == 0);
            peer_closes++;
        }
        redis_client_kill();
        client_kills++;
        if (round % 4 == 3) {
            CHECK(testsrv_kill(srv, SIGKILL) == 0);
            usleep(100000);
            CHECK(testsrv_restart(srv) == 0);
            redis_kills++;
        }
        CHECK(tproc_restart(&peers[v], NULL, 0, 30000) == 0);
        fprintf(stderr, "round %d: ok %ld (%" PRIu64 " ms)\n", round, sum_ok(t, CHAOS_THREADS),
                env_clock_mono_ms() - t0);
    }
    /* traffic succeeds again after the last fault */
    long at_end = sum_ok(t, CHAOS_THREADS);
    uint64_t end = env_clock_mono_ms() + CHAOS_RECOVER_MS;
    while (sum_ok(t, CHAOS_THREADS) < at_end + 1 && env_clock_mono_ms() < end)
        usleep(50000);
    long wrong = 0, failed = 0;
    for (int i = 0; i < CHAOS_THREADS; i++) {
        traffic_stop(&t[i]);
        wrong += atomic_load(&t[i].wrong);
        failed += atomic_load(&t[i].failed);
        if (t[i].last_error[0])
            fprintf(stderr, "traffic %d: last failure: %s\n", i, t[i].last_error);
    }
    fprintf(stderr,
            "chaos: %d peer kills, %d peer closes, %d client-kill sweeps, %d redis kills; %ld ok, "
            "%ld failed, "
            "%ld wrong\n",
            peer_kills, peer_closes, client_kills, redis_kills, sum_ok(t, CHAOS_THREADS), failed,
            wrong);
    CHECK(wrong == 0);
    CHECK(sum_ok(t, CHAOS_THREADS) >= at_end + 1);
    kvmesh_close(kv);
    for (int i = 0; i < CHAOS_PEERS; i++) {
        check_peer_alive(i);
        tproc_close_stdin(&peers[i]);
    }
    for (int i = 0; i < CHAOS_PEERS; i++) {
        char st[64];
        int src = tproc_stop(&peers[i], 30000);
        if (src)
            fprintf(stderr, "peer %d: %s\n", i, tproc_status_str(peers[i].status, st, sizeof(st)));
        CHECK(src == 0);
    }
    CHECK(sigpipe_default());
    cleanup_all();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    default_signals();
    static char exe[4096];
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    if (argc == 2 && strcmp(argv[1], "masks") == 0)
        return masks_main();
    if (argc == 2 && strcmp(argv[1], "chaos") == 0)
        return chaos_main(exe);
    fprintf(stderr, "usage: %s masks|chaos\n", argv[0]);
    return 2;
}
