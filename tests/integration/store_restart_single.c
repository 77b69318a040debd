/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_restart_single — a deployment whose every route authority restarts serves again
 * (EmbeddedWrh, real kvmeshd processes and the kvmesh CLI on a real redis-server or etcd):
 *
 *   itest_store_restart_single redis|etcd [rolling]
 *
 * single (default): one daemon (replicas 1, lease_ttl_ms T_LEASE_MS). A put succeeds; the
 *   daemon gets SIGTERM (its drain cannot move the replica: it exits anyway); a new daemon starts
 *   on the same deployment, and a put must succeed within T_LEASE_MS + T_GONE_MS + T_SLACK_MS of
 * its start (the new daemon has a new runtime id, so the old one is absent, not restarted: its
 * state counts as lost only ROUTE_SRC_GONE_LEASES shard leases later, docs/protocol.md section 5).
 *   The same again with SIGKILL (its leases are not revoked: they expire first). The keys written
 *   before a restart read back as absent (their routes and data lived only in the dead daemon's
 *   memory); the keys written after it read back intact.
 * rolling: three daemons; each is SIGKILLed and replaced in turn without waiting for the shards to
 *   move, so the last ACTIVE authority set of some shards is entirely gone; a put must succeed
 *   within the same bound after the last replacement started, and read back (the key written
 *   before reads as absent: its one replica and its routes were on the killed daemons).
 *
 * Every process is started by this test (free loopback ports) and stopped by pid; every wait
 * and retry loop is bounded in time.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "testsrv.h"

#define T_LEASE_MS     2000
#define T_GONE_MS      9000  /* ROUTE_SRC_GONE_LEASES (3) x the shard lease (<= 3 s) */
#define T_SLACK_MS     6000  /* beyond the lease: membership refresh, acquisition, a CLI join */
#define T_CMD_MS       20000 /* one CLI invocation */
#define T_READY_MS     20000 /* a daemon joining */
#define T_EXIT_MS      20000 /* a daemon exiting after a signal */
#define T_RETRY_MS     200   /* pause between put attempts */
#define T_MAX_DAEMONS  6
#define T_ROLLING_RUNS 3

static tdaemon_env_t env;
static testsrv_t *srv;
static tdaemon_t d[T_MAX_DAEMONS];
static char cfg_path[300];

static void stop_all(void)
{
    for (int i = 0; i < T_MAX_DAEMONS; i++)
        tdaemon_stop(&d[i]);
    testsrv_stop(srv);
    srv = NULL;
    tdaemon_env_teardown(&env);
}

#define CHECK(c, ...) TDAEMON_CHECK(c, stop_all, __VA_ARGS__)

static void cli(tdaemon_out_t *o, const char *verb, const char *key, const char *val)
{
    const char *argv[] = {env.bin_kvmesh, verb, "--config", cfg_path, key, val, NULL};
    tdaemon_runv(&env, o, NULL, argv, T_CMD_MS);
}

static void dump_state(const char *why)
{
    tdaemon_out_t o;
    const char *argv[] = {env.bin_kvmesh, "admin", "shards", "--config", cfg_path, NULL};
    tdaemon_runv(&env, &o, NULL, argv, T_CMD_MS);
    fprintf(stderr, "%s\nadmin shards (exit %d):\n%s%s\n", why, o.status, o.out, o.err);
    tdaemon_out_free(&o);
    for (int i = 0; i < T_MAX_DAEMONS; i++) {
        if (!d[i].log[0])
            continue;
        char *log = tdaemon_slurp(d[i].log, NULL);
        fprintf(stderr, "--- daemon %d (pid %d) log:\n%s\n", i, (int)d[i].pid, log);
        free(log);
    }
}

/* Puts key=val, retrying until it succeeds or bound_ms passed since t0_ms. */
static void put_within(const char *key, const char *val, uint64_t t0_ms, uint64_t bound_ms)
{
    tdaemon_out_t o;
    for (int attempt = 1;; attempt++) {
        cli(&o, "put", key, val);
        uint64_t el = env_clock_mono_ms() - t0_ms;
        if (o.status == 0) {
            printf("put %s: ok %llu ms after the restart, attempt %d (last %llu ms)\n", key,
                   (unsigned long long)el, attempt, (unsigned long long)o.ms);
            tdaemon_out_free(&o);
            return;
        }
        if (el > bound_ms) {
            char why[512];
            snprintf(why, sizeof(why),
                     "put %s still fails %llu ms after the restart (bound %llu ms, %d attempts): "
                     "exit %d: %s",
                     key, (unsigned long long)el, (unsigned long long)bound_ms, attempt, o.status,
                     o.err);
            tdaemon_out_free(&o);
            dump_state(why);
            CHECK(false, "no put after the restart");
        }
        tdaemon_out_free(&o);
        usleep(T_RETRY_MS * 1000);
    }
}

static void expect_get(const char *key, const char *val)
{
    tdaemon_out_t o;
    cli(&o, "get", key, NULL);
    if (val)
        CHECK(o.status == 0 && o.out_len == strlen(val) && memcmp(o.out, val, o.out_len) == 0,
              "get %s: exit %d, %zu bytes (want \"%s\"): %s", key, o.status, o.out_len, val, o.err);
    else /* absent: exit status 3 */
        CHECK(o.status == 3, "get %s: exit %d (want 3, absent): %s%s", key, o.status, o.out, o.err);
    tdaemon_out_free(&o);
}

static void start(int i)
{
    CHECK(i < T_MAX_DAEMONS, "daemon slot %d", i);
    uint64_t t0 = env_clock_mono_ms();
    CHECK(tdaemon_start(&env, &d[i], i, cfg_path, NULL, T_READY_MS) == 0, "daemon %d start", i);
    printf("daemon %d ready in %llu ms\n", i, (unsigned long long)(env_clock_mono_ms() - t0));
}

static void stop_by(int i, int sig)
{
    CHECK(d[i].pid > 0, "daemon %d runs", i);
    kill(d[i].pid, sig);
    uint64_t t0 = env_clock_mono_ms();
    int st = tdaemon_wait_exit(d[i].pid, T_EXIT_MS);
    printf("daemon %d exited %d in %llu ms after signal %d\n", i, st,
           (unsigned long long)(env_clock_mono_ms() - t0), sig);
    CHECK(st >= 0, "daemon %d did not exit within %d ms of signal %d", i, T_EXIT_MS, sig);
    d[i].pid = 0;
}

static void run_single(void)
{
    start(0);
    tdaemon_out_t o;
    cli(&o, "put", "before-term", "v-before-term");
    CHECK(o.status == 0, "first put: exit %d: %s", o.status, o.err);
    tdaemon_out_free(&o);

    /* SIGTERM: the drain finds no other daemon for the replica and the daemon exits. */
    stop_by(0, SIGTERM);
    uint64_t t0 = env_clock_mono_ms();
    start(1);
    put_within("after-term", "v-after-term", t0, T_LEASE_MS + T_GONE_MS + T_SLACK_MS);
    expect_get("after-term", "v-after-term");
    expect_get("before-term", NULL);

    /* SIGKILL: nothing is revoked; the leases expire. */
    stop_by(1, SIGKILL);
    t0 = env_clock_mono_ms();
    start(2);
    put_within("after-kill", "v-after-kill", t0, T_LEASE_MS + T_GONE_MS + T_SLACK_MS);
    expect_get("after-kill", "v-after-kill");
}

static void run_rolling(void)
{
    for (int i = 0; i < T_ROLLING_RUNS; i++)
        start(i);
    tdaemon_out_t o;
    cli(&o, "put", "before-rolling", "v-before-rolling");
    CHECK(o.status == 0, "first put: exit %d: %s", o.status, o.err);
    tdaemon_out_free(&o);
    /* Each daemon in turn is killed and replaced at once: the shards have no time to move. */
    uint64_t t0 = 0;
    for (int i = 0; i < T_ROLLING_RUNS; i++) {
        stop_by(i, SIGKILL);
        t0 = env_clock_mono_ms();
        start(T_ROLLING_RUNS + i);
    }
    put_within("after-rolling", "v-after-rolling", t0, T_LEASE_MS + T_GONE_MS + T_SLACK_MS);
    expect_get("after-rolling", "v-after-rolling");
    expect_get("before-rolling", NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd")) ||
        (argc > 2 && strcmp(argv[2], "rolling"))) {
        fprintf(stderr, "usage: %s redis|etcd [rolling]\n", argv[0]);
        return 2;
    }
    bool rolling = argc > 2;
    if (tdaemon_env_setup(&env, "kvmesh-restart") != 0)
        return 1;
    if (testsrv_start_named(&srv, argv[1]) != 0) {
        tdaemon_env_teardown(&env);
        return 1;
    }
    char cfg[1024], dep[64];
    snprintf(cfg_path, sizeof(cfg_path), "%s/kvmeshd.yaml", env.tmpdir);
    snprintf(dep, sizeof(dep), "rst%s-%ld", rolling ? "r" : "s", (long)getpid());
    snprintf(cfg, sizeof(cfg),
             "# store_restart_single integration test\n"
             "metadata_url: %s\n"
             "deployment: %s\n"
             "memory_size: 64MiB\n"
             "segment_size: 16MiB\n"
             "max_object_size: 16MiB\n"
             "replicas: 1\n"
             "lease_ttl_ms: %d\n"
             "drain_timeout_ms: 2000\n",
             testsrv_url(srv), dep, T_LEASE_MS);
    CHECK(tdaemon_write_file(cfg_path, cfg) == 0, "config file");
    if (rolling)
        run_rolling();
    else
        run_single();
    printf("store_restart_single %s%s: ok\n", argv[1], rolling ? " rolling" : "");
    stop_all();
    return 0;
}
