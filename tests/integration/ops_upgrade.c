/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_upgrade.c — hot upgrade of a kvmeshd daemon, as real processes on a real Redis: three
 * daemons (daemon 0 with a stable runtime id and --upgrade-socket), an application runtime in
 * this process (memory_size 0, tcp transport) writing UP_OBJECTS objects pinned to daemon 0
 * (UP_OBJECTS x UP_OBJ_BYTES of payload, the only replica of each), then:
 *   - objects overwritten right before the hand-over leave reclaiming slots, which are handed
 *     over too and freed by the successor once their grace window passed (/stats used bytes);
 *   - a successor with another runtime id is refused (it exits 1, the predecessor keeps going);
 *   - a successor with the same id starts with --upgrade-from and waits (standby);
 *   - SIGTERM to the predecessor: it hands its memory over and exits 0; the successor takes
 *     over, joins with a larger epoch and writes its ready file;
 *   - every object reads back byte for byte through the application runtime, and every route
 *     still names the same (owner, segment, offset) as before: the bytes are served by the
 *     successor out of the handed-over memory, nothing was copied or re-replicated;
 *   - RSS: /proc/PID/smaps_rollup Pss of both processes, sampled every few ms from the SIGTERM
 *     until the predecessor exited and the successor is ready: their sum never exceeds the
 *     total before by half the payload (a copy would add all of it); afterwards the successor's
 *     private memory (RssAnon) exceeds the predecessor's by less than half the payload while
 *     its RssShmem covers the payload;
 *   - new objects pinned to the successor are written and read back, and then every old object
 *     again (the successor's allocators hold the adopted slots: new ones never overwrite them).
 *   - the successor listens for the next upgrade on the same socket: a standby (this process)
 *     that takes the state and leaves before MAPPED makes it fall back to its ordinary drain
 *     (exit 0), after which every object reads back from the daemons it moved to.
 * Bounded: every wait has a limit; every process is started here and stopped by pid.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "ops_util.h"
#include "store/handoff.h"

#define UP_DAEMONS     3
#define UP_OBJECTS     96
#define UP_OBJ_BYTES   (256u << 10)
#define UP_PAYLOAD     ((uint64_t)UP_OBJECTS * UP_OBJ_BYTES)
#define UP_NEW_OBJECTS 32
#define UP_OVERWRITE   8
#define UP_WAIT_MS     30000
#define UP_ID          "0dd5000000000000000000000000abcd"
#define UP_OTHER_ID    "0dd5000000000000000000000000ffff"

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    char sock[300];
    tdaemon_t d[UP_DAEMONS];
    kvmesh_t *kv;
    kvmesh_replica_info_t where[UP_OBJECTS];
    int gen[UP_OBJECTS];
};

static void value_of(uint8_t *buf, size_t len, int i)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[k] = (uint8_t)x;
    }
}

/* ---- /proc sampling ----------------------------------------------------------------------- */

/* kB of `field` ("Pss:", "RssAnon:") in /proc/pid/<file>; -1 when unreadable (exited). */
static long proc_kb(pid_t pid, const char *file, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/%s", (long)pid, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, fl) == 0) {
            v = strtol(line + fl, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

struct sampler {
    pid_t pred, succ;
    atomic_bool stop;
    long max_sum_kb; /* max over samples of Pss(pred) + Pss(succ) */
    unsigned samples;
};

static void *sample_main(void *arg)
{
    struct sampler *s = arg;
    for (unsigned i = 0; i < 20000 && !atomic_load(&s->stop); i++) {
        long a = proc_kb(s->pred, "smaps_rollup", "Pss:");
        long b = proc_kb(s->succ, "smaps_rollup", "Pss:");
        long sum = (a > 0 ? a : 0) + (b > 0 ? b : 0);
        if (sum > s->max_sum_kb)
            s->max_sum_kb = sum;
        s->samples++;
        usleep(2000);
    }
    return NULL;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static bool log_has(const char *path, const char *needle)
{
    char *log = tdaemon_slurp(path, NULL);
    bool has = strstr(log, needle) != NULL;
    free(log);
    return has;
}

static void wait_log(const char *path, const char *needle)
{
    uint64_t t0 = env_clock_mono_ms();
    while (!log_has(path, needle)) {
        if (env_clock_mono_ms() - t0 > UP_WAIT_MS) {
            char *log = tdaemon_slurp(path, NULL);
            fail_msg("\"%s\" never appeared in %s:\n%s", needle, path, log);
        }
        usleep(20000);
    }
}

/* Starts a successor kvmeshd (runtime id `id`, --upgrade-from the predecessor's socket) as
 * daemon number i; returns at once (its ready file appears only after a take-over). */
static void successor_spawn(struct cluster *c, tdaemon_t *d, int i, const char *id, char *ready,
                            size_t ready_cap)
{
    char out[300], admin[64];
    snprintf(ready, ready_cap, "%s/ready-%d", ops_tmpdir, i);
    snprintf(out, sizeof(out), "%s/daemon-%d.out", ops_tmpdir, i);
    snprintf(d->log, sizeof(d->log), "%s/daemon-%d.log", ops_tmpdir, i);
    d->admin_port = testsrv_free_port();
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", d->admin_port);
    unlink(ready);
    const char *argv[] = {ops_bin_kvmeshd,
                          "--config",
                          c->cfg,
                          "--ready-file",
                          ready,
                          "--admin-listen",
                          admin,
                          "--runtime-id",
                          id,
                          "--upgrade-from",
                          c->sock,
                          "--upgrade-socket",
                          c->sock,
                          NULL};
    d->pid = tdaemon_spawn(argv, out, d->log, NULL);
    assert_true(d->pid > 0);
}

static uint64_t read_ready(const char *ready, char *id, size_t cap)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        FILE *f = fopen(ready, "r");
        if (f) {
            char idb[40];
            unsigned long long ep = 0;
            int ok = fscanf(f, "%39s %llu", idb, &ep) == 2;
            fclose(f);
            if (ok) {
                snprintf(id, cap, "%s", idb);
                return ep;
            }
        }
        if (env_clock_mono_ms() - t0 > UP_WAIT_MS)
            fail_msg("ready file %s never appeared", ready);
        usleep(5000);
    }
}

/* The epoch of member id in the application runtime's snapshot (0: not there). */
static uint64_t app_epoch(struct cluster *c, const char *id)
{
    kvmesh_member_info_t m[16];
    size_t n = 0;
    assert_int_equal(kvmesh_members(c->kv, m, 16, &n), 0);
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(m[i].id, id) == 0 && strcmp(m[i].state, "active") == 0)
            return m[i].epoch;
    return 0;
}

/* Puts objects [first, first + n) with generation gen (their values depend on it). */
static void put_range(struct cluster *c, uint8_t *buf, int first, int n, int gen)
{
    kvmesh_scope_t sc = {.tenant = "up"};
    const char *pref[] = {UP_ID};
    kvmesh_put_opts_t po = {
        .replicas = 1, .preferred_owners = pref, .n_preferred = 1, .hard_pin = true};
    for (int i = first; i < first + n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "obj-%d", i);
        c->gen[i] = gen;
        value_of(buf, UP_OBJ_BYTES, i + 1000 * gen);
        int rc = kvmesh_put(c->kv, &sc, key, strlen(key), buf, UP_OBJ_BYTES, &po);
        if (rc)
            fail_msg("put %s: %s: %s", key, kvmesh_strerror(rc), kvmesh_last_error());
        kvmesh_route_info_t ri;
        assert_int_equal(kvmesh_route_query(c->kv, &sc, key, strlen(key), &ri), 0);
        assert_int_equal(ri.n_replicas, 1);
        assert_string_equal(ri.replicas[0].owner, UP_ID);
        c->where[i] = ri.replicas[0];
    }
}

static void check_all(struct cluster *c, uint8_t *want)
{
    kvmesh_scope_t sc = {.tenant = "up"};
    for (int i = 0; i < UP_OBJECTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "obj-%d", i);
        value_of(want, UP_OBJ_BYTES, i + 1000 * c->gen[i]);
        void *out = NULL;
        size_t len = 0;
        int rc = kvmesh_get(c->kv, &sc, key, strlen(key), &out, &len);
        if (rc)
            fail_msg("get %s after the hand-over: %s: %s", key, kvmesh_strerror(rc),
                     kvmesh_last_error());
        assert_int_equal(len, UP_OBJ_BYTES);
        assert_memory_equal(out, want, len);
        kvmesh_free(out);
        kvmesh_route_info_t ri;
        assert_int_equal(kvmesh_route_query(c->kv, &sc, key, strlen(key), &ri), 0);
        assert_int_equal(ri.n_replicas, 1);
        assert_string_equal(ri.replicas[0].owner, c->where[i].owner);
        assert_int_equal(ri.replicas[0].segment, c->where[i].segment);
        assert_int_equal(ri.replicas[0].offset, c->where[i].offset);
    }
}

/* ---- the scenario ------------------------------------------------------------------------- */

static void check_refused(struct cluster *c)
{
    tdaemon_t bad;
    memset(&bad, 0, sizeof(bad));
    char ready[300];
    successor_spawn(c, &bad, 7, UP_OTHER_ID, ready, sizeof(ready));
    int st = tdaemon_wait_exit(bad.pid, UP_WAIT_MS);
    if (st != 1) {
        char *log = tdaemon_slurp(bad.log, NULL);
        fail_msg("a successor with another runtime id exited %d (want 1):\n%s", st, log);
    }
    bad.pid = 0;
    if (!log_has(bad.log, "the handoff peer refused") ||
        !log_has(bad.log, "runtime_id is not this runtime's")) {
        char *log = tdaemon_slurp(bad.log, NULL), *plog = tdaemon_slurp(c->d[0].log, NULL);
        fail_msg("the refused successor's log does not say why:\n%s\npredecessor:\n%s", log, plog);
    }
    wait_log(c->d[0].log, "upgrade connection refused");
    assert_true(kill(c->d[0].pid, 0) == 0); /* still running */
}

static void check_upgrade(struct cluster *c)
{
    uint8_t *buf = malloc(UP_OBJ_BYTES);
    assert_non_null(buf);
    put_range(c, buf, 0, UP_OBJECTS, 0);
    uint64_t old_epoch = app_epoch(c, UP_ID);
    assert_true(old_epoch > 0);
    check_refused(c);

    tdaemon_t *pred = &c->d[0], succ;
    memset(&succ, 0, sizeof(succ));
    char ready[300];
    successor_spawn(c, &succ, 5, UP_ID, ready, sizeof(ready));
    wait_log(succ.log, "standby: successor of runtime");
    wait_log(pred->log, "standby successor connected");
    /* overwritten just before the hand-over: their old slots are in their reclaim grace window
     * (reclaim_grace_ms 3000) when the index is exported, and the successor adopts them too */
    put_range(c, buf, 0, UP_OVERWRITE, 1);

    long pss_before =
        proc_kb(pred->pid, "smaps_rollup", "Pss:") + proc_kb(succ.pid, "smaps_rollup", "Pss:");
    long pred_shmem = proc_kb(pred->pid, "status", "RssShmem:");
    long pred_anon = proc_kb(pred->pid, "status", "RssAnon:");
    if (pred_shmem < (long)(UP_PAYLOAD / 1024)) /* the payload is resident in its segments */
        fail_msg("the predecessor's RssShmem %ld kB is below the payload %llu kB", pred_shmem,
                 (unsigned long long)(UP_PAYLOAD / 1024));

    struct sampler sm = {.pred = pred->pid, .succ = succ.pid};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sample_main, &sm), 0);
    uint64_t t0 = env_clock_mono_ms();
    assert_int_equal(kill(pred->pid, SIGTERM), 0);
    int st = tdaemon_wait_exit(pred->pid, UP_WAIT_MS);
    pid_t old_pid = pred->pid;
    pred->pid = 0;
    char id[40];
    uint64_t new_epoch = read_ready(ready, id, sizeof(id));
    uint64_t window_ms = env_clock_mono_ms() - t0;
    atomic_store(&sm.stop, true);
    pthread_join(th, NULL);
    (void)old_pid;
    if (st != 0) {
        char *log = tdaemon_slurp(pred->log, NULL);
        fail_msg("the predecessor exited %d after SIGTERM:\n%s", st, log);
    }
    assert_true(log_has(pred->log, "handing the memory over to the standby successor"));
    assert_true(log_has(pred->log, "handed over in"));
    char took[96];
    snprintf(took, sizeof(took), "took over: 4 segments and %d slots", UP_OBJECTS + UP_OVERWRITE);
    if (!log_has(succ.log, took)) {
        char *log = tdaemon_slurp(succ.log, NULL);
        fail_msg("expected \"%s\" in the successor's log:\n%s", took, log);
    }
    assert_string_equal(id, UP_ID);
    assert_true(new_epoch > old_epoch);
    fprintf(stderr,
            "hand-over window %llu ms, %u samples: Pss before %ld kB, max during %ld kB, "
            "payload %llu kB\n",
            (unsigned long long)window_ms, sm.samples, pss_before, sm.max_sum_kb,
            (unsigned long long)(UP_PAYLOAD / 1024));
    assert_true(sm.samples > 0);
    if (sm.max_sum_kb > pss_before + (long)(UP_PAYLOAD / 2048))
        fail_msg("the two processes together held %ld kB during the hand-over, %ld kB before: "
                 "the payload (%llu kB) was copied",
                 sm.max_sum_kb, pss_before, (unsigned long long)(UP_PAYLOAD / 1024));

    /* the application runtime sees the new incarnation; every object reads back */
    uint64_t w0 = env_clock_mono_ms();
    while (app_epoch(c, UP_ID) != new_epoch) {
        if (env_clock_mono_ms() - w0 > UP_WAIT_MS)
            fail_msg("the application runtime never saw epoch %llu of %s",
                     (unsigned long long)new_epoch, UP_ID);
        usleep(50000);
    }
    check_all(c, buf);
    /* the adopted reclaiming slots are freed once their new grace window has passed */
    w0 = env_clock_mono_ms();
    for (;;) {
        tdaemon_http_t hs;
        assert_int_equal(tdaemon_http(succ.admin_port, "GET", "/stats", NULL, &hs), 200);
        const char *dram = strstr(hs.body, "\"dram\":");
        unsigned long long used = 0;
        assert_non_null(dram);
        assert_non_null(ops_json_u64(dram, "used_bytes", &used));
        tdaemon_http_free(&hs);
        if (used == UP_PAYLOAD)
            break;
        if (used != UP_PAYLOAD + (uint64_t)UP_OVERWRITE * UP_OBJ_BYTES ||
            env_clock_mono_ms() - w0 > UP_WAIT_MS)
            fail_msg("the successor's used bytes are %llu, want %llu once the reclaiming slots "
                     "are freed",
                     used, (unsigned long long)UP_PAYLOAD);
        usleep(100000);
    }
    long anon = proc_kb(succ.pid, "status", "RssAnon:");
    long shmem = proc_kb(succ.pid, "status", "RssShmem:");
    fprintf(
        stderr,
        "successor after the reads: RssAnon %ld kB (predecessor before: %ld kB), RssShmem %ld kB\n",
        anon, pred_anon, shmem);
    /* a copy would be private memory of the size of the payload; the same binary's own heap
     * (the predecessor's before the hand-over: sanitizer builds have a large one) is not */
    if (anon < 0 || anon > pred_anon + (long)(UP_PAYLOAD / 2048))
        fail_msg("the successor's private memory is %ld kB (the predecessor's was %ld kB): the "
                 "payload (%llu kB) was copied",
                 anon, pred_anon, (unsigned long long)(UP_PAYLOAD / 1024));
    assert_true(shmem >= (long)(UP_PAYLOAD / 1024) * 9 / 10);

    /* the successor serves new writes, and they land beside the adopted slots, never over
     * them (its allocators were rebuilt from the index): the old objects still read back */
    kvmesh_scope_t sc = {.tenant = "up"};
    const char *pref[] = {UP_ID};
    kvmesh_put_opts_t po = {
        .replicas = 1, .preferred_owners = pref, .n_preferred = 1, .hard_pin = true};
    for (int i = 0; i < UP_NEW_OBJECTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "after-%d", i);
        value_of(buf, UP_OBJ_BYTES, 100000 + i);
        int rc = kvmesh_put(c->kv, &sc, key, strlen(key), buf, UP_OBJ_BYTES, &po);
        if (rc)
            fail_msg("put %s on the successor: %s: %s", key, kvmesh_strerror(rc),
                     kvmesh_last_error());
    }
    for (int i = 0; i < UP_NEW_OBJECTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "after-%d", i);
        value_of(buf, UP_OBJ_BYTES, 100000 + i);
        void *out = NULL;
        size_t len = 0;
        assert_int_equal(kvmesh_get(c->kv, &sc, key, strlen(key), &out, &len), 0);
        assert_int_equal(len, UP_OBJ_BYTES);
        assert_memory_equal(out, buf, len);
        kvmesh_free(out);
    }
    check_all(c, buf);
    c->d[0] = succ;
    free(buf);
}

/* The successor listens on the same socket for the next upgrade. A standby (played by this
 * process) that takes the state and goes away without MAPPED: the daemon keeps its memory,
 * drains as without a successor (the objects move to the other daemons) and exits 0. */
static void check_fallback(struct cluster *c)
{
    tdaemon_t *d = &c->d[0];
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    assert_true(strlen(c->sock) < sizeof(a.sun_path));
    memcpy(a.sun_path, c->sock, strlen(c->sock));
    assert_true(sock >= 0);
    assert_int_equal(connect(sock, (struct sockaddr *)&a, sizeof(a)), 0);
    kvmesh_config_t *kc = kvmesh_config_new();
    assert_int_equal(kvmesh_config_set(kc, "runtime_id", UP_ID), 0);
    assert_int_equal(kvmesh_upgrade_hello(kc, sock, 5000), 0);
    kvmesh_config_free(kc);
    wait_log(d->log, "standby successor connected");
    assert_int_equal(kill(d->pid, SIGTERM), 0);
    uint8_t type = 0, *p = NULL;
    size_t len = 0;
    int fds[KVM_HANDOFF_MAX_SEGS];
    uint32_t nf = 0;
    assert_int_equal(
        kvm_handoff_recv_msg(sock, &type, &p, &len, fds, KVM_HANDOFF_MAX_SEGS, &nf, UP_WAIT_MS), 0);
    assert_int_equal(type, KVM_HANDOFF_STATE);
    assert_int_equal(nf, 4);
    free(p);
    for (uint32_t i = 0; i < nf; i++)
        close(fds[i]);
    close(sock); /* gone before MAPPED */
    int st = tdaemon_wait_exit(d->pid, UP_WAIT_MS);
    d->pid = 0;
    char *log = tdaemon_slurp(d->log, NULL);
    if (st != 0 || !strstr(log, "hand-over failed") || !strstr(log, "draining instead") ||
        !strstr(log, "drained: replicas moved"))
        fail_msg("exit %d; the daemon did not fall back to its drain:\n%s", st, log);
    free(log);
    /* every object, old and new, reads back from the owners it was drained to */
    uint8_t *want = malloc(UP_OBJ_BYTES);
    assert_non_null(want);
    kvmesh_scope_t sc = {.tenant = "up"};
    for (int i = 0; i < UP_OBJECTS + UP_NEW_OBJECTS; i++) {
        char key[32];
        if (i < UP_OBJECTS) {
            snprintf(key, sizeof(key), "obj-%d", i);
            value_of(want, UP_OBJ_BYTES, i + 1000 * c->gen[i]);
        } else {
            snprintf(key, sizeof(key), "after-%d", i - UP_OBJECTS);
            value_of(want, UP_OBJ_BYTES, 100000 + i - UP_OBJECTS);
        }
        void *out = NULL;
        size_t olen = 0;
        int rc = kvmesh_get(c->kv, &sc, key, strlen(key), &out, &olen);
        if (rc)
            fail_msg("get %s after the drain: %s: %s", key, kvmesh_strerror(rc),
                     kvmesh_last_error());
        assert_int_equal(olen, UP_OBJ_BYTES);
        assert_memory_equal(out, want, olen);
        kvmesh_free(out);
        kvmesh_route_info_t ri;
        assert_int_equal(kvmesh_route_query(c->kv, &sc, key, strlen(key), &ri), 0);
        assert_int_equal(ri.n_replicas, 1);
        assert_string_not_equal(ri.replicas[0].owner, UP_ID);
    }
    free(want);
}

static void run_cluster(void **state)
{
    (void)state;
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url = ops_backend_start(false, &c.srv, "opsup", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    snprintf(c.sock, sizeof(c.sock), "%s/upgrade.sock", ops_tmpdir);
    char text[600];
    snprintf(text, sizeof(text),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 64MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nlease_ttl_ms: 2000\nshards: 16\ntop_k: 2\n"
             "transport: tcp\ndrain_timeout_ms: 20000\nreclaim_grace_ms: 3000\n",
             c.url, c.dep);
    ops_write_file(c.cfg, text);
    for (int i = 0; i < UP_DAEMONS; i++) {
        const char *extra[] = {"--runtime-id", UP_ID, "--upgrade-socket", c.sock, NULL};
        if (ops_daemon_start(&c.d[i], i, c.cfg, i == 0 ? extra : NULL) != 0)
            fail_msg("daemon %d did not start", i);
    }
    kvmesh_config_t *kc = kvmesh_config_new();
    assert_int_equal(kvmesh_tools_config_load_file(kc, c.cfg), 0);
    assert_int_equal(kvmesh_config_set(kc, "memory_size", "0"), 0);
    if (kvmesh_open(&c.kv, kc) != 0)
        fail_msg("application runtime: %s", kvmesh_last_error());
    kvmesh_config_free(kc);
    check_upgrade(&c);
    check_fallback(&c);
    kvmesh_close(c.kv);
    for (int i = 0; i < UP_DAEMONS; i++)
        tdaemon_stop(&c.d[i]);
    testsrv_stop(c.srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_cluster),
    };
    return cmocka_run_group_tests(tests, ops_group_setup, ops_group_teardown);
}
