/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_proc — the EmbeddedWrh route authority mesh across real processes, against a real
 * metadata server (redis-server or etcd started by the test):
 *
 *   itest_route_proc redis|etcd          the test
 *   itest_route_proc --runtime URL DEPLOYMENT STATUSFILE
 *                                        one runtime process: kvmesh_open (route_mode
 *                                        embedded_wrh, 8 shards, top_k 3, lease_ttl_ms 2000),
 *                                        prints "READY", then every ~20 ms writes
 *                                        "<primary shard bitmask> <fencing token of the lowest>"
 *                                        to STATUSFILE (route_test_is_primary per shard); EOF on
 *                                        stdin -> close and exit
 *
 * The test: 3 runtime processes + this process as a client runtime (memory_size 0, the lowest
 * WRH weight). It picks a shard whose fenced primary is one of the runtime processes and 4 keys
 * of that shard, and 2 client threads drive lookups and CAS (unique values) on them through the
 * client runtime's route service (route_lookup/route_cas posted to its loop thread), recording
 * every operation with monotonic begin/end stamps. During the traffic the primary's process is
 * killed with SIGKILL. The traffic continues until a CAS is acknowledged again (bound:
 * RP_RECOVER_BOUND_MS), then one more second; final lookups read every key. Assertions:
 *   - the shared history checker (tests/support/route_history.h) accepts the history: one linear
 *     chain of acknowledged CAS per key, no double success, no acknowledged write lost, no stale
 *     read;
 *   - CAS completing between the kill and recovery failed with unavailable/indeterminate/
 *     timeout (at least one did) and
 *     every CAS acknowledged after the kill carries a fencing token above the killed primary's
 *     (no success on a stale or non-primary authority); a live runtime process then serves as
 *     the shard's primary;
 *   - every CAS result is one the route service documents (0, conflict, indeterminate,
 *     unavailable, timeout).
 * Every loop is bounded in count and time; every process started here is killed by pid.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "env/clock.h"
#include "api/kvmesh_tools.h"
#include "core/ident.h"
#include "core/route.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "route/route.h"
#include "route/route_test.h"
#include "proc.h"
#include "route_history.h"
#include "store/store.h"
#include "testsrv.h"
#include "tmpdir.h"

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define RP_PROCS            3
#define RP_SHARDS           8
#define RP_KEYS             4
#define RP_THREADS          2
#define RP_MAX_OPS          150000 /* paced: ~1 ms between a thread's steps */
#define RP_WARM_MS          20000  /* bound: every shard gets a primary */
#define RP_PRE_KILL_MS      1500   /* traffic before the kill */
#define RP_RECOVER_BOUND_MS 30000  /* kill -> next acknowledged CAS (lease ttl + transfer) */
#define RP_AFTER_MS         1000   /* traffic after recovery */
#define RP_CALL_WAIT_S      30     /* bound on one route call (the service times out at 2 s) */

static tproc_t procs[RP_PROCS];
static char status_path[RP_PROCS][512]; /* each runtime process's primary status file */
static testsrv_t *srv;
static kvmesh_t *client;
static kvm_rt_t *crt;
static char tmpdir[256];
static char url[256];
static const char *deployment = "itest-route";

static void cleanup_all(void)
{
    for (int i = 0; i < RP_PROCS; i++)
        tproc_kill(&procs[i], SIGKILL);
    /* the status files, and the rt*.tmp a killed runtime left between its write and rename */
    (void)ttmp_remove(tmpdir);
    testsrv_stop(srv);
    srv = NULL;
}

static uint64_t vpack(const kvm_route_version_t *v)
{
    return v->fencing_token << 32 | (v->primary_sequence & 0xffffffffu);
}

static kvm_route_version_t vunpack(uint64_t p)
{
    return (kvm_route_version_t){p >> 32, p & 0xffffffffu};
}

static void set_common(kvmesh_config_t *c, const char *u, const char *dep)
{
    CHECK(kvmesh_config_set(c, "metadata_url", u) == 0);
    CHECK(kvmesh_config_set(c, "deployment", dep) == 0);
    CHECK(kvmesh_config_set(c, "route_mode", "embedded_wrh") == 0);
    CHECK(kvmesh_config_set(c, "shards", "8") == 0);
    CHECK(kvmesh_config_set(c, "top_k", "3") == 0);
    CHECK(kvmesh_config_set(c, "lease_ttl_ms", "2000") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "2000") == 0);
}

/* ---- the runtime process ---------------------------------------------------------------------*/

struct prim_query {
    kvm_rt_t *rt;
    uint32_t mask;
    uint64_t token;
};

static void prim_on_loop(void *arg)
{
    struct prim_query *q = arg;
    q->mask = 0;
    q->token = 0;
    if (!q->rt->route)
        return;
    for (uint32_t s = 0; s < RP_SHARDS; s++) {
        uint64_t t = 0;
        if (route_test_is_primary(q->rt->route, s, &t)) {
            if (!q->mask)
                q->token = t;
            q->mask |= 1u << s;
        }
    }
}

/* Test-only broken variants (route_test_set_bugs), from the environment variable
 * KVMESH_ROUTE_PROC_BUGS = secondary_cas | skip_transfer, applied on every runtime of the test;
 * the ctest entries route_proc_*_is_caught run them and expect the checks to fail. */
struct bug_set {
    kvm_rt_t *rt;
    unsigned bugs;
};

static void bugs_on_loop(void *arg)
{
    struct bug_set *b = arg;
    if (b->rt->route)
        route_test_set_bugs(b->rt->route, b->bugs);
}

static void apply_bugs(kvm_rt_t *rt)
{
    const char *v = getenv("KVMESH_ROUTE_PROC_BUGS");
    struct bug_set b = {.rt = rt, .bugs = 0};
    if (!v || !*v)
        return;
    if (strcmp(v, "secondary_cas") == 0)
        b.bugs = ROUTE_TEST_BUG_SECONDARY_CAS;
    else if (strcmp(v, "skip_transfer") == 0)
        b.bugs = ROUTE_TEST_BUG_SKIP_TRANSFER;
    else
        fprintf(stderr, "KVMESH_ROUTE_PROC_BUGS: unknown variant %s\n", v);
    if (b.bugs)
        env_uv_thread_call(rt->thread, bugs_on_loop, &b);
}

/* Which shards this runtime serves as fenced primary (mask; token of the lowest such shard). */
static int primary_of(kvm_rt_t *rt, uint32_t *mask, uint64_t *token)
{
    struct prim_query q = {.rt = rt};
    int rc = env_uv_thread_call(rt->thread, prim_on_loop, &q);
    *mask = q.mask;
    *token = q.token;
    return rc;
}

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    if (!c)
        return 1;
    set_common(c, argv[2], argv[3]);
    kvmesh_config_set(c, "memory_size", "16777216");
    kvmesh_config_set(c, "segment_size", "16777216");
    kvmesh_config_set(c, "max_object_size", "1048576");
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    apply_bugs(rt);
    printf("READY\n");
    fflush(stdout);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[4]);
    for (;;) {
        struct pollfd p = {0, POLLIN, 0};
        int r = poll(&p, 1, 20);
        if (r > 0) {
            char b[64];
            if (read(0, b, sizeof(b)) <= 0)
                break;
        }
        uint32_t mask;
        uint64_t token;
        if (primary_of(rt, &mask, &token) != 0)
            continue;
        FILE *f = fopen(tmp, "w");
        if (!f)
            continue;
        fprintf(f, "%" PRIu32 " %" PRIu64 "\n", mask, token);
        fclose(f);
        rename(tmp, argv[4]);
    }
    kvmesh_close(kv);
    unlink(tmp);
    unlink(argv[4]);
    /* EOF also when the test died without its cleanup: the last runtime out removes the then
     * empty directory (an error while others' files are still there) */
    char *slash = strrchr(tmp, '/');
    if (slash) {
        *slash = '\0';
        (void)rmdir(tmp);
    }
    return 0;
}

/* ---- parent side -----------------------------------------------------------------------------*/

static void spawn(int slot, const char *self_exe)
{
    snprintf(status_path[slot], sizeof(status_path[slot]), "%s/rt%d", tmpdir, slot);
    const char *argv[] = {self_exe, "--runtime", url, deployment, status_path[slot]};
    CHECK(tproc_start(&procs[slot], 5, argv, "READY", NULL, 0, 30000) == 0);
}

/* Reads a runtime process's primary status file; false when absent or unreadable. */
static bool proc_status(int slot, uint32_t *mask, uint64_t *token)
{
    FILE *f = fopen(status_path[slot], "r");
    if (!f)
        return false;
    bool ok = fscanf(f, "%" SCNu32 " %" SCNu64, mask, token) == 2;
    fclose(f);
    return ok;
}

/* One route call on the client runtime's loop thread, waited for by the calling thread. */
struct rcall {
    bool cas;
    const kvm_ident_t *ident;
    kvm_route_version_t expected;
    const kvm_route_t *next;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
    bool have;
    kvm_route_t route;
};

static void rcall_done(void *arg, int rc, const kvm_route_t *route)
{
    struct rcall *c = arg;
    pthread_mutex_lock(&c->mu);
    c->rc = rc;
    if (route && kvm_route_copy(&c->route, route) == 0)
        c->have = true;
    c->done = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void rcall_on_loop(void *arg)
{
    struct rcall *c = arg;
    int rc = c->cas ? route_cas(crt->route, &c->expected, c->next, rcall_done, c)
                    : route_lookup(crt->route, c->ident, rcall_done, c);
    if (rc)
        rcall_done(c, rc, NULL);
}

/* Returns the call's rc; *out (initialised here) holds the route the callback passed, if any. */
static int route_call(bool cas, const kvm_ident_t *ident, kvm_route_version_t expected,
                      const kvm_route_t *next, kvm_route_t *out, bool *have)
{
    struct rcall c = {.cas = cas, .ident = ident, .expected = expected, .next = next};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    kvm_route_init(&c.route);
    int rc = env_uv_thread_call(crt->thread, rcall_on_loop, &c);
    CHECK(rc == 0);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += RP_CALL_WAIT_S;
    pthread_mutex_lock(&c.mu);
    while (!c.done && rc == 0)
        rc = pthread_cond_timedwait(&c.cv, &c.mu, &dl);
    pthread_mutex_unlock(&c.mu);
    CHECK(c.done); /* the service bounds every call; this is its bound, generously */
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    *have = c.have;
    *out = c.route; /* ownership moves to the caller */
    return c.rc;
}

static kvm_ident_t keys[RP_KEYS];
static route_hist_op_t *hist;
static size_t n_hist;
static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool stop_traffic;
static atomic_uint_fast64_t next_value;
static atomic_uint_fast64_t last_ack_us; /* end stamp of the newest acknowledged CAS */
static uint64_t bad_rc_count;
static int bad_rc_example;

static size_t hist_begin(uint32_t kind, uint32_t client_no, uint64_t key, uint64_t value,
                         uint64_t expected)
{
    pthread_mutex_lock(&hist_mu);
    size_t i = n_hist < RP_MAX_OPS ? n_hist++ : SIZE_MAX;
    if (i != SIZE_MAX)
        hist[i] = (route_hist_op_t){.kind = kind,
                                    .client = client_no,
                                    .key = key,
                                    .value = value,
                                    .expected = expected,
                                    .begin = (env_clock_mono_ns() / 1000)};
    pthread_mutex_unlock(&hist_mu);
    return i;
}

static void hist_end(size_t i, int status, uint64_t version, uint64_t value)
{
    uint64_t t = (env_clock_mono_ns() / 1000);
    pthread_mutex_lock(&hist_mu);
    hist[i].status = status;
    hist[i].version = version;
    if (hist[i].kind == ROUTE_HIST_LOOKUP)
        hist[i].value = value;
    hist[i].end = t;
    hist[i].done = true;
    if (hist[i].kind == ROUTE_HIST_CAS && status == 0 && t > atomic_load(&last_ack_us))
        atomic_store(&last_ack_us, t);
    pthread_mutex_unlock(&hist_mu);
}

static bool hist_room(void)
{
    pthread_mutex_lock(&hist_mu);
    bool room = n_hist + 4 < RP_MAX_OPS;
    pthread_mutex_unlock(&hist_mu);
    return room;
}

/* A lookup of ident (history key index k), recorded; returns rc and the version seen (0 none). */
static int do_lookup(uint32_t who, uint32_t k, const kvm_ident_t *ident, uint64_t *seen)
{
    size_t h = hist_begin(ROUTE_HIST_LOOKUP, who, k, 0, 0);
    CHECK(h != SIZE_MAX);
    kvm_route_t r;
    bool have = false;
    int rc = route_call(false, ident, KVM_ROUTE_VERSION_NONE, NULL, &r, &have);
    uint64_t v = 0, val = 0;
    if (rc == 0 && have) {
        v = vpack(&r.version);
        val = r.content_op.seq;
    }
    hist_end(h, rc, v, val);
    if (rc == 0 || rc == KVMESH_ENOENT)
        *seen = v;
    kvm_route_free(&r);
    return rc;
}

static int do_cas(uint32_t who, uint32_t k, uint64_t *seen)
{
    uint64_t value = atomic_fetch_add(&next_value, 1) + 1;
    kvm_route_t next;
    kvm_route_init(&next);
    CHECK(kvm_ident_copy(&next.ident, &keys[k]) == 0);
    next.version = (kvm_route_version_t){0, 1};
    next.content_op = (kvm_op_id_t){.writer = crt->self.id, .epoch = crt->self.epoch, .seq = value};
    next.length = 4096;
    next.checksum = value * 0x9e3779b97f4a7c15ull;
    next.n_replicas = 1;
    next.replicas[0] = (kvm_hot_replica_t){.owner = crt->self.id,
                                           .segment = 1,
                                           .offset = value * 4096,
                                           .length = 4096,
                                           .checksum = next.checksum};
    size_t h = hist_begin(ROUTE_HIST_CAS, who, k, value, *seen);
    CHECK(h != SIZE_MAX);
    kvm_route_t r;
    bool have = false;
    int rc = route_call(true, NULL, vunpack(*seen), &next, &r, &have);
    uint64_t v = 0;
    if (rc == 0 && have) {
        v = vpack(&r.version);
        *seen = v;
    } else if (rc == KVMESH_ECONFLICT) {
        *seen = have ? vpack(&r.version) : 0;
    }
    hist_end(h, rc, v, 0);
    if (rc != 0 && rc != KVMESH_ECONFLICT && rc != KVMESH_EINDETERMINATE &&
        rc != KVMESH_EUNAVAILABLE && rc != KVMESH_ETIMEDOUT) {
        pthread_mutex_lock(&hist_mu);
        bad_rc_count++;
        bad_rc_example = rc;
        pthread_mutex_unlock(&hist_mu);
    }
    kvm_route_free(&r);
    kvm_route_free(&next);
    return rc;
}

static void *traffic(void *arg)
{
    uint32_t who = (uint32_t)(uintptr_t)arg;
    uint64_t seen[RP_KEYS] = {0};
    bool known[RP_KEYS] = {false};
    for (uint32_t i = who; !atomic_load(&stop_traffic) && hist_room(); i++) {
        uint32_t k = i % RP_KEYS;
        if (!known[k] || (i & 3) == 0) {
            int rc = do_lookup(who, k, &keys[k], &seen[k]);
            known[k] = rc == 0 || rc == KVMESH_ENOENT;
            if (!known[k]) {
                usleep(20000);
                continue;
            }
        }
        int rc = do_cas(who, k, &seen[k]);
        usleep(1000); /* paced, so that the history (checked pairwise per key) stays small */
        if (rc != 0 && rc != KVMESH_ECONFLICT) {
            known[k] = false; /* outcome unknown: read again */
            usleep(20000);
        }
    }
    return NULL;
}

static int test_main(const char *self_exe, const char *kind)
{
    int rc;
    if (strcmp(kind, "redis") == 0)
        rc = testsrv_start_redis(&srv, NULL);
    else if (strcmp(kind, "etcd") == 0)
        rc = testsrv_start_etcd(&srv);
    else {
        fprintf(stderr, "usage: itest_route_proc redis|etcd\n");
        return 2;
    }
    if (rc) {
        fprintf(stderr, "cannot start %s: %s\n", kind, kvmesh_last_error());
        return 1;
    }
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-route-proc") == 0);
    hist = calloc(RP_MAX_OPS, sizeof(*hist));
    CHECK(hist != NULL);

    uint64_t t0 = env_clock_mono_ms();
    for (int i = 0; i < RP_PROCS; i++)
        spawn(i, self_exe);
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    set_common(c, url, deployment);
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "weight", "0.001") == 0);
    rc = kvmesh_open(&client, c);
    kvmesh_config_free(c);
    CHECK(rc == 0);
    crt = kvmesh_runtime_of(client);
    apply_bugs(crt);
    fprintf(stderr, "route_proc[%s]: 3 runtimes + client up in %" PRIu64 " ms\n", kind,
            env_clock_mono_ms() - t0);

    /* keys for every shard; wait until each shard answers lookups and has a process primary */
    kvm_ident_t probe[RP_SHARDS];
    bool have_probe[RP_SHARDS] = {false};
    char name[32];
    for (uint32_t i = 0, found = 0; i < 10000 && found < RP_SHARDS; i++) {
        kvm_ident_t id;
        snprintf(name, sizeof(name), "probe-%u", i);
        CHECK(kvm_ident_init(&id, "it", "route", name, strlen(name)) == 0);
        uint32_t s = kvm_ident_shard(&id, RP_SHARDS);
        if (!have_probe[s]) {
            probe[s] = id;
            have_probe[s] = true;
            found++;
        } else {
            kvm_ident_free(&id);
        }
    }
    int shard = -1, victim = -1;
    uint64_t victim_token = 0;
    uint64_t warm_end = env_clock_mono_ms() + RP_WARM_MS;
    while (shard < 0 && env_clock_mono_ms() < warm_end) {
        for (uint32_t s = 0; s < RP_SHARDS; s++) {
            CHECK(have_probe[s]);
            uint64_t v;
            do_lookup(99, RP_KEYS + s, &probe[s], &v); /* outside the checked keys */
        }
        for (uint32_t s = 0; s < RP_SHARDS && shard < 0; s++) {
            int who = -1, n_claims = 0;
            uint64_t tok = 0;
            for (int i = 0; i < RP_PROCS; i++) {
                uint32_t m;
                uint64_t t;
                if (proc_status(i, &m, &t) && (m & (1u << s))) {
                    n_claims++;
                    who = i;
                    tok = (m & ((1u << s) - 1)) ? 0 : t; /* token known for its lowest shard */
                }
            }
            uint32_t cm;
            uint64_t ct;
            CHECK(primary_of(crt, &cm, &ct) == 0);
            if (n_claims == 1 && !(cm & (1u << s)) && tok != 0) {
                shard = (int)s;
                victim = who;
                victim_token = tok;
            }
        }
        if (shard < 0)
            usleep(100000);
    }
    for (uint32_t s = 0; s < RP_SHARDS; s++)
        kvm_ident_free(&probe[s]);
    CHECK(shard >= 0);
    for (uint32_t i = 0, found = 0; i < 100000 && found < RP_KEYS; i++) {
        kvm_ident_t id;
        snprintf(name, sizeof(name), "key-%u", i);
        CHECK(kvm_ident_init(&id, "it", "route", name, strlen(name)) == 0);
        if (kvm_ident_shard(&id, RP_SHARDS) == (uint32_t)shard)
            keys[found++] = id;
        else
            kvm_ident_free(&id);
    }
    fprintf(stderr,
            "route_proc[%s]: shard %d, primary = runtime process %d (pid %d, token %" PRIu64
            "), warm-up %" PRIu64 " ms\n",
            kind, shard, victim, (int)procs[victim].pid, victim_token, env_clock_mono_ms() - t0);

    /* traffic; kill -9 the primary during it */
    pthread_t th[RP_THREADS];
    for (uintptr_t i = 0; i < RP_THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, traffic, (void *)i) == 0);
    usleep(RP_PRE_KILL_MS * 1000);
    size_t acks_before = 0;
    pthread_mutex_lock(&hist_mu);
    for (size_t i = 0; i < n_hist; i++)
        acks_before += hist[i].kind == ROUTE_HIST_CAS && hist[i].done && hist[i].status == 0;
    pthread_mutex_unlock(&hist_mu);
    /* still the primary (status files are at most ~20 ms old); its current token */
    uint32_t vm = 0;
    uint64_t vt = 0;
    CHECK(proc_status(victim, &vm, &vt) && (vm & (1u << shard)));
    if (!(vm & ((1u << shard) - 1)))
        victim_token = vt;
    tproc_kill(&procs[victim], SIGKILL); /* returns once the process is reaped */
    /* Stamped after the victim is gone: a CAS that began between a stamp taken before kill() and
     * the process's death could still be answered by it, with its own token, legitimately. */
    uint64_t kill_us = (env_clock_mono_ns() / 1000);
    uint64_t recover_us = 0;
    uint64_t bound = env_clock_mono_ms() + RP_RECOVER_BOUND_MS;
    while (env_clock_mono_ms() < bound) {
        uint64_t a = atomic_load(&last_ack_us);
        if (a > kill_us) {
            /* the first acknowledged CAS that began after the kill */
            pthread_mutex_lock(&hist_mu);
            for (size_t i = 0; i < n_hist; i++)
                if (hist[i].kind == ROUTE_HIST_CAS && hist[i].done && hist[i].status == 0 &&
                    hist[i].begin > kill_us && (!recover_us || hist[i].end < recover_us))
                    recover_us = hist[i].end;
            pthread_mutex_unlock(&hist_mu);
            if (recover_us)
                break;
        }
        usleep(20000);
    }
    if (recover_us)
        usleep(RP_AFTER_MS * 1000);
    atomic_store(&stop_traffic, true);
    for (int i = 0; i < RP_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK(acks_before > 0);
    CHECK(recover_us != 0); /* writable again within RP_RECOVER_BOUND_MS */

    /* final reads: every key, after all traffic (bounded retries) */
    for (uint32_t k = 0; k < RP_KEYS; k++) {
        uint64_t v;
        int frc = -1;
        for (int tries = 0; tries < 50 && frc != 0 && frc != KVMESH_ENOENT; tries++)
            frc = do_lookup(7, k, &keys[k], &v);
        if (frc != 0) /* a key left unreadable after recovery is a history violation too */
            fprintf(stderr, "history check: k%u: final read failed: %s\n", k, kvmesh_strerror(frc));
        CHECK(frc == 0);
    }

    /* outage behaviour: failures were unavailable/indeterminate/timeout; successes after the
     * kill came from a newer fencing token */
    size_t outage_fail = 0, after_ok = 0, total_ok = 0, total_cas = 0;
    for (size_t i = 0; i < n_hist; i++) {
        const route_hist_op_t *o = &hist[i];
        if (o->kind != ROUTE_HIST_CAS || !o->done || o->key >= RP_KEYS)
            continue;
        total_cas++;
        total_ok += o->status == 0;
        if (o->end > kill_us && o->end < recover_us &&
            (o->status == KVMESH_EUNAVAILABLE || o->status == KVMESH_EINDETERMINATE ||
             o->status == KVMESH_ETIMEDOUT))
            outage_fail++;
        if (o->status == 0 && o->begin > kill_us) {
            after_ok++;
            if ((o->version >> 32) <= victim_token)
                fprintf(stderr, "CAS acknowledged after the kill with token %" PRIu64 "\n",
                        o->version >> 32);
            CHECK((o->version >> 32) > victim_token);
        }
    }
    if (bad_rc_count)
        fprintf(stderr, "unexpected CAS result %d (%s) x%" PRIu64 "\n", bad_rc_example,
                kvmesh_strerror(bad_rc_example), bad_rc_count);
    CHECK(bad_rc_count == 0);
    CHECK(outage_fail > 0);
    CHECK(after_ok > 0);

    /* a live runtime process now serves as the shard's primary */
    bool new_primary = false;
    for (int tries = 0; tries < 100 && !new_primary; tries++) {
        for (int i = 0; i < RP_PROCS; i++) {
            uint32_t m;
            uint64_t t;
            if (i != victim && proc_status(i, &m, &t) && (m & (1u << shard)))
                new_primary = true;
        }
        uint32_t cm;
        uint64_t ct;
        CHECK(primary_of(crt, &cm, &ct) == 0);
        new_primary = new_primary || (cm & (1u << shard));
        if (!new_primary)
            usleep(50000);
    }
    CHECK(new_primary);

    char msg[512];
    rc = route_hist_check(hist, n_hist, RP_KEYS, UINT64_MAX, 1000, msg, sizeof(msg));
    if (rc)
        fprintf(stderr, "history check: %s\n", msg);
    CHECK(rc == 0);
    fprintf(stderr,
            "route_proc[%s]: %zu CAS (%zu acknowledged, %zu before the kill, %zu after), "
            "%zu failed in the outage; writable again %" PRIu64 " ms after kill -9; history "
            "of %zu ops checked\n",
            kind, total_cas, total_ok, acks_before, after_ok, outage_fail,
            (recover_us - kill_us) / 1000, n_hist);

    kvmesh_close(client);
    client = NULL;
    for (uint32_t k = 0; k < RP_KEYS; k++)
        kvm_ident_free(&keys[k]);
    free(hist);
    /* graceful stop of the survivors: EOF on stdin, bounded wait, then SIGKILL */
    for (int i = 0; i < RP_PROCS; i++)
        tproc_close_stdin(&procs[i]);
    uint64_t end = env_clock_mono_ms() + 10000;
    for (int i = 0; i < RP_PROCS; i++)
        if (procs[i].pid > 0) {
            int left = (int)(end - env_clock_mono_ms());
            tproc_stop(&procs[i], left > 0 ? left : 0);
        }
    cleanup_all();
    fprintf(stderr, "route_proc[%s]: ok in %" PRIu64 " ms\n", kind, env_clock_mono_ms() - t0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    if (argc != 2) {
        fprintf(stderr, "usage: itest_route_proc redis|etcd\n");
        return 2;
    }
    return test_main(argv[0], argv[1]);
}
