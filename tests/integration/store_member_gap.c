/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_member_gap — a put waits for storage members that are missing from the membership
 * snapshot for a moment, within its deadline (real kvmeshd, the kvmesh CLI, a real redis-server
 * or etcd):
 *
 *   itest_store_member_gap redis|etcd
 *
 * gap: one storage daemon (replicas 1, lease_ttl_ms T_LEASE_MS). A first put succeeds. The daemon
 *   is stopped with SIGSTOP until its lease lapsed and `kvmesh members` no longer lists it (its
 *   member record is gone from the metadata store, as on a loaded machine that missed its
 *   heartbeats); a put (request_timeout_ms T_PUT_MS) starts, the daemon gets SIGCONT T_GAP_MS
 *   later and registers again; the put must succeed and read back. Before puts waited, this put
 *   failed at once with "placed 0 of 1 replicas ... (1 live members)".
 * none: a deployment without any storage daemon; a put with request_timeout_ms T_NONE_MS fails
 *   with "placed 0 of 1 replicas", no earlier than T_NONE_MS - T_MARGIN_MS after it started.
 *
 * Every process is started by this test and stopped by pid; every wait is bounded.
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

#define T_LEASE_MS  1000  /* the daemon's membership lease */
#define T_ABSENT_MS 20000 /* bound: the stopped daemon's record expires and members drops it */
#define T_GAP_MS    1500  /* the put runs this long before the daemon continues */
#define T_PUT_MS    15000 /* the waiting put's deadline */
#define T_NONE_MS   3000  /* the deadline of the put that finds no storage member at all */
#define T_MARGIN_MS 1000  /* how much earlier than its deadline that put may fail */
#define T_CMD_MS    30000 /* one CLI invocation */
#define T_READY_MS  20000 /* the daemon joining */

static tdaemon_env_t env;
static testsrv_t *srv;
static tdaemon_t d;
static char cfg_path[300], cfg_none[300];

static void stop_all(void)
{
    if (d.pid > 0)
        kill(d.pid, SIGCONT);
    tdaemon_stop(&d);
    testsrv_stop(srv);
    srv = NULL;
    tdaemon_env_teardown(&env);
}

#define CHECK(c, ...) TDAEMON_CHECK(c, stop_all, __VA_ARGS__)

static void cli(tdaemon_out_t *o, const char *cfg, const char *verb, const char *key,
                const char *val)
{
    const char *argv[] = {env.bin_kvmesh, verb, "--config", cfg, key, val, NULL};
    tdaemon_runv(&env, o, NULL, argv, T_CMD_MS);
}

static bool daemon_listed(void)
{
    tdaemon_out_t o;
    cli(&o, cfg_path, "members", NULL, NULL);
    CHECK(o.status == 0, "members: exit %d: %s", o.status, o.err);
    bool listed = strstr(o.out, d.id) != NULL;
    tdaemon_out_free(&o);
    return listed;
}

static void write_cfg(const char *path, const char *dep, unsigned timeout_ms)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "# store_member_gap integration test\n"
             "metadata_url: %s\n"
             "deployment: %s\n"
             "memory_size: 64MiB\n"
             "segment_size: 16MiB\n"
             "max_object_size: 1MiB\n"
             "replicas: 1\n"
             "lease_ttl_ms: %d\n"
             "request_timeout_ms: %u\n",
             testsrv_url(srv), dep, T_LEASE_MS, timeout_ms);
    CHECK(tdaemon_write_file(path, cfg) == 0, "config file %s", path);
}

static void run_gap(void)
{
    CHECK(tdaemon_start(&env, &d, 0, cfg_path, NULL, T_READY_MS) == 0, "daemon start");
    tdaemon_out_t o;
    cli(&o, cfg_path, "put", "before-gap", "v-before");
    CHECK(o.status == 0, "first put: exit %d: %s", o.status, o.err);
    tdaemon_out_free(&o);

    CHECK(kill(d.pid, SIGSTOP) == 0, "SIGSTOP");
    uint64_t t0 = env_clock_mono_ms();
    while (daemon_listed())
        CHECK(env_clock_mono_ms() - t0 < T_ABSENT_MS, "the stopped daemon is still a member");
    printf("daemon absent from the membership %llu ms after SIGSTOP\n",
           (unsigned long long)(env_clock_mono_ms() - t0));

    char out[400], err[400];
    snprintf(out, sizeof(out), "%s/gap-put.out", env.tmpdir);
    snprintf(err, sizeof(err), "%s/gap-put.err", env.tmpdir);
    const char *argv[] = {env.bin_kvmesh, "put", "--config", cfg_path, "in-gap", "v-gap", NULL};
    uint64_t p0 = env_clock_mono_ms();
    pid_t put = tdaemon_spawn(argv, out, err, NULL);
    CHECK(put > 0, "spawn the put");
    /* (the put's own process is not watched here: it waits for the member, or fails at once) */
    int st = tdaemon_wait_exit(put, T_GAP_MS);
    if (st >= 0) {
        char *e = tdaemon_slurp(err, NULL);
        fprintf(stderr, "the put ended (exit %d) %llu ms into the gap: %s\n", st,
                (unsigned long long)(env_clock_mono_ms() - p0), e);
        free(e);
    }
    CHECK(kill(d.pid, SIGCONT) == 0, "SIGCONT");
    if (st < 0)
        st = tdaemon_wait_exit(put, T_PUT_MS + T_CMD_MS);
    char *e = tdaemon_slurp(err, NULL);
    printf("put during the gap: exit %d after %llu ms%s%s\n", st,
           (unsigned long long)(env_clock_mono_ms() - p0), e[0] ? ": " : "", e);
    CHECK(st == 0, "the put issued while the only storage member was absent failed (exit %d): %s",
          st, e);
    free(e);

    cli(&o, cfg_path, "get", "in-gap", NULL);
    CHECK(o.status == 0 && o.out_len == 5 && memcmp(o.out, "v-gap", 5) == 0,
          "get in-gap: exit %d, %zu bytes: %s", o.status, o.out_len, o.err);
    tdaemon_out_free(&o);
}

static void run_none(void)
{
    tdaemon_out_t o;
    uint64_t t0 = env_clock_mono_ms();
    cli(&o, cfg_none, "put", "no-member", "v");
    uint64_t el = env_clock_mono_ms() - t0;
    printf("put without a storage member: exit %d after %llu ms: %s", o.status,
           (unsigned long long)el, o.err);
    CHECK(o.status != 0, "a put without any storage member succeeded");
    CHECK(strstr(o.err, "placed 0 of 1 replicas") != NULL, "unexpected message: %s", o.err);
    CHECK(el + T_MARGIN_MS >= T_NONE_MS,
          "the put failed after %llu ms, before its deadline of %d ms (margin %d ms)",
          (unsigned long long)el, T_NONE_MS, T_MARGIN_MS);
    tdaemon_out_free(&o);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s redis|etcd\n", argv[0]);
        return 2;
    }
    if (tdaemon_env_setup(&env, "kvmesh-gap") != 0)
        return 1;
    if (testsrv_start_named(&srv, argv[1]) != 0) {
        tdaemon_env_teardown(&env);
        return 1;
    }
    char dep[64];
    snprintf(cfg_path, sizeof(cfg_path), "%s/kvmeshd.yaml", env.tmpdir);
    snprintf(dep, sizeof(dep), "gap-%ld", (long)getpid());
    write_cfg(cfg_path, dep, T_PUT_MS);
    snprintf(cfg_none, sizeof(cfg_none), "%s/none.yaml", env.tmpdir);
    snprintf(dep, sizeof(dep), "gapnone-%ld", (long)getpid());
    write_cfg(cfg_none, dep, T_NONE_MS);
    run_gap();
    run_none();
    printf("store_member_gap %s: ok\n", argv[1]);
    stop_all();
    return 0;
}
