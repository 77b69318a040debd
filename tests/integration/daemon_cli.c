/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon_cli.c — kvmeshd and the kvmesh CLI as real processes on a real redis-server:
 *   - help of kvmeshd, kvmesh and every verb is complete; unknown flags fail clearly;
 *   - a malformed config file names the line and the field; an unreachable metadata URL fails
 *     fast with the URL in the message (daemon and CLI);
 *   - 3 kvmeshd processes on one deployment: the CLI puts, gets, stats, routes and removes;
 *     /healthz answers on the admin port; SIGTERM to a daemon that holds replicas drains it
 *     (its replicas move to the other daemons, the replica count is kept), it exits 0, and
 *     every object still reads back intact; a second SIGINT exits a draining daemon at once.
 * Every process is started by this test (free loopback ports) and stopped by pid; every wait
 * is bounded.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
/* cmocka needs the three above it */
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

#include "api/config_table.h"
#include "daemon.h"
#include "testsrv.h"

#define T_CMD_TIMEOUT_MS   60000 /* one CLI invocation */
#define T_READY_TIMEOUT_MS 30000 /* a daemon joining */
#define T_DRAIN_WAIT_MS    60000 /* a daemon draining and exiting */
#define T_FAST_FAIL_MS     10000 /* "fails fast" bound for an unreachable metadata URL */
#define T_DAEMONS          3
#define T_KEYS_MIN         12
#define T_KEYS_MAX         40

static tdaemon_env_t env;
#define tmpdir      (env.tmpdir)
#define bin_kvmesh  (env.bin_kvmesh)
#define bin_kvmeshd (env.bin_kvmeshd)

/* Runs a tool to completion (bounded) and captures its output. */
static void run(tdaemon_out_t *o, const char *in_path, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    tdaemon_runl(&env, o, in_path, T_CMD_TIMEOUT_MS, first, ap);
    va_end(ap);
}

#define ASSERT_RUN TDAEMON_ASSERT_RUN
#define ASSERT_HAS TDAEMON_ASSERT_HAS

static void write_file(const char *path, const char *text)
{
    assert_int_equal(tdaemon_write_file(path, text), 0);
}

static int group_setup(void **state)
{
    (void)state;
    return tdaemon_env_setup(&env, "kvmesh-daemon-cli");
}

static int group_teardown(void **state)
{
    (void)state;
    return tdaemon_env_teardown(&env);
}

/* ---- help and usage ----------------------------------------------------------------------- */

static void test_help(void **state)
{
    (void)state;
    tdaemon_out_t o;
    run(&o, NULL, bin_kvmesh, "--help", NULL);
    ASSERT_RUN(&o, 0);
    static const char *verbs[] = {"put",     "get",    "rm",   "stat", "route",
                                  "members", "config", "demo", "bench"};
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        char line[64];
        snprintf(line, sizeof(line), "  %s ", verbs[i]);
        ASSERT_HAS(o.out, line);
    }
    tdaemon_out_free(&o);
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        run(&o, NULL, bin_kvmesh, verbs[i], "--help", NULL);
        ASSERT_RUN(&o, 0);
        char want[64];
        snprintf(want, sizeof(want), "usage: kvmesh %s ", verbs[i]);
        ASSERT_HAS(o.out, want);
        ASSERT_HAS(o.out, "--help");
        tdaemon_out_free(&o);
        /* Unknown flags name the flag and the verb. */
        run(&o, NULL, bin_kvmesh, verbs[i], "--no-such-flag", NULL);
        ASSERT_RUN(&o, 2);
        snprintf(want, sizeof(want), "kvmesh %s: unknown option \"--no-such-flag\"", verbs[i]);
        ASSERT_HAS(o.err, want);
        tdaemon_out_free(&o);
    }
    run(&o, NULL, bin_kvmesh, "frobnicate", NULL);
    ASSERT_RUN(&o, 2);
    ASSERT_HAS(o.err, "unknown command \"frobnicate\"");
    tdaemon_out_free(&o);

    /* kvmeshd --help lists every configuration field as a flag with its default. */
    run(&o, NULL, bin_kvmeshd, "--help", NULL);
    ASSERT_RUN(&o, 0);
    size_t n;
    const kvm_cfg_field_t *t = kvm_config_table(&n);
    for (size_t i = 0; i < n; i++) {
        char flag[80];
        snprintf(flag, sizeof(flag), "--%s", t[i].name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        ASSERT_HAS(o.out, flag);
        ASSERT_HAS(o.out, t[i].help);
    }
    ASSERT_HAS(o.out, "SIGTERM");
    ASSERT_HAS(o.out, "--config FILE");
    tdaemon_out_free(&o);
    run(&o, NULL, bin_kvmeshd, "--no-such-flag", "1", NULL);
    ASSERT_RUN(&o, 2);
    ASSERT_HAS(o.err, "unknown option \"--no-such-flag\"");
    tdaemon_out_free(&o);
    run(&o, NULL, bin_kvmeshd, "--replicas", "0", NULL);
    ASSERT_RUN(&o, 2);
    ASSERT_HAS(o.err, "replicas: \"0\" is out of range; allowed 1..8");
    tdaemon_out_free(&o);
}

static void test_bad_config_names_line_and_field(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/bad.yaml", tmpdir);
    write_file(path, "# kvmeshd\nmemory_size: 64MiB\nreplicas: 0\n");
    tdaemon_out_t o;
    run(&o, NULL, bin_kvmeshd, "--config", path, NULL);
    ASSERT_RUN(&o, 2);
    char want[400];
    snprintf(want, sizeof(want), "%s:3: replicas: \"0\" is out of range; allowed 1..8", path);
    ASSERT_HAS(o.err, want);
    tdaemon_out_free(&o);

    write_file(path, "memory_size: 64MiB\n  segment_size: 16MiB\n");
    run(&o, NULL, bin_kvmeshd, "--config", path, NULL);
    ASSERT_RUN(&o, 2);
    snprintf(want, sizeof(want), "%s:2: indented line", path);
    ASSERT_HAS(o.err, want);
    tdaemon_out_free(&o);

    write_file(path, "memory_size: 64MiB\ntransport: [tcp]\n");
    run(&o, NULL, bin_kvmeshd, "--config", path, NULL);
    ASSERT_RUN(&o, 2);
    snprintf(want, sizeof(want), "%s:2: field \"transport\":", path);
    ASSERT_HAS(o.err, want);
    tdaemon_out_free(&o);

    /* The same file through the CLI. */
    write_file(path, "deployment: ok\nsegment_size: 3 apples\n");
    run(&o, NULL, bin_kvmesh, "get", "--config", path, "k", NULL);
    ASSERT_RUN(&o, 2);
    snprintf(want, sizeof(want), "%s:2: segment_size: \"3 apples\" is not a size", path);
    ASSERT_HAS(o.err, want);
    tdaemon_out_free(&o);

    /* The shipped example passes the daemon's check. */
    snprintf(path, sizeof(path), "%s/examples/kvmeshd.yaml", KVMESH_SOURCE_DIR);
    run(&o, NULL, bin_kvmeshd, "--config", path, "--check-config", NULL);
    ASSERT_RUN(&o, 0);
    ASSERT_HAS(o.out, "replicas: \"2\"");
    tdaemon_out_free(&o);
}

static void test_unreachable_metadata_fails_fast(void **state)
{
    (void)state;
    uint16_t port = testsrv_free_port();
    assert_true(port > 0);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
    tdaemon_out_t o;
    run(&o, NULL, bin_kvmeshd, "--metadata-url", url, NULL);
    ASSERT_RUN(&o, 1);
    ASSERT_HAS(o.err, url);
    if (o.ms > T_FAST_FAIL_MS)
        fail_msg("kvmeshd took %llu ms to report an unreachable %s", (unsigned long long)o.ms, url);
    tdaemon_out_free(&o);
    run(&o, NULL, bin_kvmesh, "get", "--metadata", url, "k", NULL);
    ASSERT_RUN(&o, 1);
    ASSERT_HAS(o.err, url);
    assert_true(o.ms <= T_FAST_FAIL_MS);
    tdaemon_out_free(&o);
}

/* ---- the cluster -------------------------------------------------------------------------- */

struct route {
    int n;
    char owner[8][40];
};

static int route_of(const char *const *common, const char *key, struct route *rt)
{
    tdaemon_out_t o;
    run(&o, NULL, bin_kvmesh, "route", common[0], common[1], common[2], common[3], common[4],
        common[5], key, NULL);
    int st = o.status;
    memset(rt, 0, sizeof(*rt));
    if (st == 0) {
        for (char *p = strstr(o.out, "replica "); p && rt->n < 8; p = strstr(p + 1, "replica ")) {
            int idx;
            char owner[40];
            if (sscanf(p, "replica %d: owner %39s", &idx, owner) == 2)
                snprintf(rt->owner[rt->n++], sizeof(rt->owner[0]), "%s", owner);
        }
    } else {
        fprintf(stderr, "route %s: exit %d: %s\n", key, st, o.err);
    }
    tdaemon_out_free(&o);
    return st;
}

static void value_of(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "value-%d-%08x-kv-block", i, (unsigned)(i * 2654435761u));
}

static void test_cluster_cli_and_drain(void **state)
{
    (void)state;
    testsrv_t *redis = NULL;
    if (testsrv_start_redis(&redis, NULL) != 0)
        fail_msg("cannot start redis-server: %s", kvmesh_last_error());
    char cfg_path[300], cfg[1024], dep[64];
    snprintf(cfg_path, sizeof(cfg_path), "%s/kvmeshd.yaml", tmpdir);
    snprintf(dep, sizeof(dep), "dcli-%ld", (long)getpid());
    snprintf(cfg, sizeof(cfg),
             "# daemon_cli integration test\n"
             "metadata_url: %s\n"
             "deployment: %s\n"
             "memory_size: 64MiB\n"
             "segment_size: 16MiB\n"
             "max_object_size: 16MiB\n"
             "replicas: 2\n"
             "lease_ttl_ms: 2000\n"
             "drain_timeout_ms: 30000\n",
             testsrv_url(redis), dep);
    write_file(cfg_path, cfg);
    tdaemon_t d[T_DAEMONS];
    memset(d, 0, sizeof(d));
    for (int i = 0; i < T_DAEMONS; i++)
        if (tdaemon_start(&env, &d[i], i, cfg_path, NULL, T_READY_TIMEOUT_MS) != 0)
            fail_msg("daemon %d failed to start", i);

    /* The CLI reads the daemons' config file (replicas, route mode) and names the deployment
     * explicitly with --metadata/--deployment (which override the file). */
    const char *common[] = {"--config",         cfg_path,       "--metadata",
                            testsrv_url(redis), "--deployment", dep};
    tdaemon_out_t o;

    /* /healthz on each daemon's admin port. */
    for (int i = 0; i < T_DAEMONS; i++) {
        tdaemon_http_t r;
        int code = tdaemon_http(d[i].admin_port, "GET", "/healthz", NULL, &r);
        if (code != 200)
            fail_msg("daemon %d /healthz: %d %s", i, code, r.body ? r.body : "");
        ASSERT_HAS(r.body, "\"ready\":true");
        tdaemon_http_free(&r);
    }

    /* members lists the three daemons. */
    run(&o, NULL, bin_kvmesh, "members", common[0], common[1], common[2], common[3], common[4],
        common[5], NULL);
    ASSERT_RUN(&o, 0);
    for (int i = 0; i < T_DAEMONS; i++)
        ASSERT_HAS(o.out, d[i].id);
    tdaemon_out_free(&o);

    /* put / get / stat. Keys until daemon 0 holds a replica of at least 3 of them. */
    char key[64], val[128];
    int nkeys = 0, on_d0 = 0;
    struct route rt;
    while (nkeys < T_KEYS_MAX && (nkeys < T_KEYS_MIN || on_d0 < 3)) {
        snprintf(key, sizeof(key), "key-%d", nkeys);
        value_of(nkeys, val, sizeof(val));
        run(&o, NULL, bin_kvmesh, "put", common[0], common[1], common[2], common[3], common[4],
            common[5], key, val, NULL);
        ASSERT_RUN(&o, 0);
        tdaemon_out_free(&o);
        assert_int_equal(route_of(common, key, &rt), 0);
        assert_int_equal(rt.n, 2);
        for (int r = 0; r < rt.n; r++)
            on_d0 += strcmp(rt.owner[r], d[0].id) == 0;
        nkeys++;
    }
    if (on_d0 == 0)
        fail_msg("no replica landed on daemon 0 after %d keys", nkeys);
    /* A 1 MiB value from a file and one from stdin. */
    char big_path[300];
    snprintf(big_path, sizeof(big_path), "%s/big.bin", tmpdir);
    {
        FILE *f = fopen(big_path, "wb");
        assert_non_null(f);
        for (int i = 0; i < (1 << 20); i++)
            fputc((i * 131 + 7) & 0xff, f);
        fclose(f);
    }
    run(&o, NULL, bin_kvmesh, "put", common[0], common[1], common[2], common[3], common[4],
        common[5], "--file", big_path, "big", NULL);
    ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    run(&o, big_path, bin_kvmesh, "put", common[0], common[1], common[2], common[3], common[4],
        common[5], "big-stdin", "-", NULL);
    ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    size_t big_len;
    char *big = tdaemon_slurp(big_path, &big_len);
    assert_int_equal(big_len, 1 << 20);

    for (int i = 0; i < nkeys; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        value_of(i, val, sizeof(val));
        run(&o, NULL, bin_kvmesh, "get", common[0], common[1], common[2], common[3], common[4],
            common[5], key, NULL);
        ASSERT_RUN(&o, 0);
        assert_int_equal(o.out_len, strlen(val));
        assert_memory_equal(o.out, val, strlen(val));
        tdaemon_out_free(&o);
    }
    run(&o, NULL, bin_kvmesh, "get", common[0], common[1], common[2], common[3], common[4],
        common[5], "big", NULL);
    ASSERT_RUN(&o, 0);
    assert_int_equal(o.out_len, big_len);
    assert_memory_equal(o.out, big, big_len);
    tdaemon_out_free(&o);

    run(&o, NULL, bin_kvmesh, "stat", common[0], common[1], common[2], common[3], common[4],
        common[5], "big-stdin", NULL);
    ASSERT_RUN(&o, 0);
    ASSERT_HAS(o.out, "exists: yes\nsize: 1048576\n");
    ASSERT_HAS(o.out, "replicas: 2\n");
    tdaemon_out_free(&o);

    /* rm, then get/stat report the absence with exit status 3. */
    run(&o, NULL, bin_kvmesh, "rm", common[0], common[1], common[2], common[3], common[4],
        common[5], "big-stdin", NULL);
    ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    run(&o, NULL, bin_kvmesh, "get", common[0], common[1], common[2], common[3], common[4],
        common[5], "big-stdin", NULL);
    ASSERT_RUN(&o, 3);
    tdaemon_out_free(&o);
    run(&o, NULL, bin_kvmesh, "stat", common[0], common[1], common[2], common[3], common[4],
        common[5], "big-stdin", NULL);
    ASSERT_RUN(&o, 3);
    ASSERT_HAS(o.out, "exists: no");
    tdaemon_out_free(&o);

    /* SIGTERM daemon 0: it drains (replicas move), exits 0. */
    kill(d[0].pid, SIGTERM);
    int st = tdaemon_wait_exit(d[0].pid, T_DRAIN_WAIT_MS);
    char *log0 = tdaemon_slurp(d[0].log, NULL);
    if (st != 0)
        fail_msg("daemon 0 exit %d after SIGTERM; log:\n%s", st, log0);
    d[0].pid = 0;
    ASSERT_HAS(log0, "SIGTERM: draining");
    ASSERT_HAS(log0, "drained");
    free(log0);

    /* Nothing lost: every replica left daemon 0, every object keeps 2 replicas and reads back. */
    for (int i = 0; i < nkeys; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        assert_int_equal(route_of(common, key, &rt), 0);
        for (int r = 0; r < rt.n; r++)
            if (strcmp(rt.owner[r], d[0].id) == 0)
                fail_msg("%s still has a replica on the drained daemon %s", key, d[0].id);
        if (rt.n != 2)
            fail_msg("%s has %d replicas after the drain (want 2)", key, rt.n);
        value_of(i, val, sizeof(val));
        run(&o, NULL, bin_kvmesh, "get", common[0], common[1], common[2], common[3], common[4],
            common[5], key, NULL);
        ASSERT_RUN(&o, 0);
        assert_int_equal(o.out_len, strlen(val));
        assert_memory_equal(o.out, val, strlen(val));
        tdaemon_out_free(&o);
    }
    run(&o, NULL, bin_kvmesh, "get", common[0], common[1], common[2], common[3], common[4],
        common[5], "big", NULL);
    ASSERT_RUN(&o, 0);
    assert_int_equal(o.out_len, big_len);
    assert_memory_equal(o.out, big, big_len);
    tdaemon_out_free(&o);
    free(big);
    run(&o, NULL, bin_kvmesh, "members", common[0], common[1], common[2], common[3], common[4],
        common[5], NULL);
    ASSERT_RUN(&o, 0);
    if (strstr(o.out, d[0].id))
        fail_msg("drained daemon %s still listed:\n%s", d[0].id, o.out);
    tdaemon_out_free(&o);

    /* A second SIGINT during a drain exits at once with 130. */
    kill(d[1].pid, SIGINT);
    usleep(100000);
    kill(d[1].pid, SIGINT);
    st = tdaemon_wait_exit(d[1].pid, T_DRAIN_WAIT_MS);
    char *log1 = tdaemon_slurp(d[1].log, NULL);
    if (st != 130)
        fail_msg("daemon 1 exit %d after two SIGINTs; log:\n%s", st, log1);
    ASSERT_HAS(log1, "second SIGINT");
    free(log1);
    d[1].pid = 0;

    for (int i = 0; i < T_DAEMONS; i++)
        tdaemon_stop(&d[i]);
    testsrv_stop(redis);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_config_names_line_and_field),
        cmocka_unit_test(test_unreachable_metadata_fails_fast),
        cmocka_unit_test(test_cluster_cli_and_drain),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
