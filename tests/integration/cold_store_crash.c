// SPDX-License-Identifier: Apache-2.0
/*
 * cold_store_crash.c — kill -9 of a storage runtime process while it offloads (docs/cold.md
 * "Store wiring", crash test). Real processes, real files, a real Redis (tests/support/testsrv):
 * a runtime child with a LocalDir device, routes in metadata (route_mode = metadata_only) and a
 * fixed runtime id writes 96 objects of 64 KiB, acknowledging each on its stdout; its offloads
 * are rate-limited (1 MiB/s) so that they trail the writes, and the child is SIGKILLed while
 * they run. It is then restarted on the same device directory with the same runtime id. Shows,
 * through a client-only runtime in this process:
 *   - the kill came during the offload stream: some objects, not all, had a cold copy;
 *   - after the restart, every acknowledged object whose route has a cold copy reads back with
 *     its bytes (restored by the restarted owner over RPC, verified by the client); an object
 *     whose only copy was in the dead process's DRAM is refused, never answered with other
 *     bytes;
 *   - after reconciliation (cold_reconcile_after_ms = 1 s: the unfinished cold ops resume) the
 *     device's accounting matches the files: used + reserved bytes (the cold gauge of the
 *     owner's /metrics) = the object files on the device x 64 KiB = the routes with a cold copy
 *     x 64 KiB; no reservation is left behind.
 *
 * With --durable (ctest cold_store_crash_durable) the child runs cold_write_through = true: a put
 * acknowledges only once its cold copy is usage-committed (docs/cold.md "Durable puts"). The child
 * is SIGKILLed once a quarter of the objects are acknowledged, while a put's payload write is in
 * progress; every ACK it printed before it died is read. Then every acknowledged object already
 * has a cold copy before the restart, and after it every acknowledged object reads back with its
 * bytes; device used + reserved = the files = the cold-backed routes, as above. Without the
 * put's wait (kvm_cold_durable_wait answering at once) acknowledged objects lack a cold copy and
 * the check fails.
 *
 * Every wait is bounded; the children are killed by pid and the directory removed at the end.
 */
#include <curl/curl.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "coldfiles.h"
#include "curl_body.h"
#include "cold_itest.h"
#include "obs_prom.h"
#include "proc.h"
#include "testsrv.h"
#include "tmpdir.h"

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define NOBJ    96
#define OBJ_LEN (64u << 10)
#define RT_ID   "c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5"

static tproc_t child;
static testsrv_t *srv;
static kvmesh_t *client;
static char tmpdir[64];
static char cold_root_dir[128]; /* the device directory */
static const kvmesh_scope_t sc = {"crash", NULL};
static bool durable; /* --durable: cold_write_through = true */

static void cleanup_all(void)
{
    if (client) {
        kvmesh_close(client);
        client = NULL;
    }
    tproc_kill(&child, SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
    tcold_remove_dir(tmpdir);
}

static void key_of(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "crash-obj-%04u", i);
}

static void set_common(kvmesh_config_t *c, const char *url, const char *dep)
{
    const char *const cfg[][2] = {{"metadata_url", url},
                                  {"deployment", dep},
                                  {"route_mode", "metadata_only"},
                                  {"lease_ttl_ms", "2000"},
                                  {"request_timeout_ms", "5000"},
                                  {"replicas", "1"},
                                  {"transport", "tcp"},
                                  {NULL, NULL}};
    (void)tproc_config_setv(c, cfg); /* (known keys; a refusal is named on stderr) */
}

/* ---- the runtime child: argv = --runtime write|serve url dep root durable(0|1) -----------------
 */

static int runtime_main(char **argv)
{
    bool write = strcmp(argv[2], "write") == 0;
    kvmesh_config_t *c = kvmesh_config_new();
    set_common(c, argv[3], argv[4]);
    kvmesh_config_set(c, "runtime_id", RT_ID);
    const char *const cold[][2] = {{"admin_listen", "127.0.0.1:0"},
                                   {"memory_size", "8MiB"},
                                   {"segment_size", "8MiB"},
                                   {"max_object_size", "1MiB"},
                                   {"cold_kind", "localdir"},
                                   {"cold_root", argv[5]},
                                   {"cold_capacity", "64MiB"},
                                   {"cold_offload_bytes_per_sec", "1MiB"},
                                   {"cold_reconcile_after_ms", "1000"},
                                   {NULL, NULL}};
    (void)tproc_config_setv(c, cold);
    if (strcmp(argv[6], "1") == 0)
        kvmesh_config_set(c, "cold_write_through", "true");
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    tproc_child_ready(kv, true);
    if (write) {
        (void)tproc_child_put_acked(kv, &sc, NOBJ, OBJ_LEN, key_of);
        printf("DONE\n");
        fflush(stdout);
    }
    return tproc_child_serve(kv);
}

/* ---- parent -----------------------------------------------------------------------------------
 */

static double cold_gauge(uint16_t port)
{
    double x = 0;
    CHECK(cold_itest_metric(port, "kvmesh_segment_used_bytes", "tier", "cold", &x) == 0);
    return x;
}

/* Whether a LocalDir put is writing now (a ".tmp." file exists: reserved, payload not renamed). */
static bool not_tmp(const char *dir, const char *name, void *arg)
{
    (void)dir;
    *(bool *)arg = strncmp(name, ".tmp.", 5) == 0;
    return !*(bool *)arg;
}

static bool writing_now(const char *root)
{
    bool found = false;
    (void)cold_itest_localdir_walk(root, not_tmp, &found);
    return found;
}

static size_t backed_count(bool *backed)
{
    size_t n = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_route_info_t ri;
        int rc = kvmesh_route_query(client, &sc, k, strlen(k), &ri);
        CHECK(rc == 0 || (durable && rc == KVMESH_ENOENT)); /* --durable: never written */
        bool b = rc == 0 && ri.cold_backed;
        if (backed)
            backed[i] = b;
        n += b;
    }
    return n;
}

/* Reads ACK lines until want acknowledgements or DONE (or EOF: the child died); marks acked[].
 * Returns the count. */
static size_t read_acks(bool *acked, size_t want)
{
    char line[256];
    size_t n = 0;
    for (int t = 0; t < NOBJ + 1 && n < want; t++) {
        if (tproc_read_line(&child, line, sizeof(line), 30000) != 0)
            break;
        unsigned i;
        if (strcmp(line, "DONE") == 0)
            break;
        CHECK(sscanf(line, "ACK %u", &i) == 1 && i < NOBJ);
        acked[i] = true;
        n++;
    }
    return n;
}

/* SIGKILL aimed at a backend write in progress (bounded: 3 s of polling, then kill anyway); the
 * child is reaped (the slot emptied) by the caller's tproc_kill. */
static bool kill_mid_write(const char *root)
{
    bool mid_write = false;
    uint64_t end = env_clock_mono_ms() + 3000;
    while (!(mid_write = writing_now(root)) && env_clock_mono_ms() < end) {
    }
    CHECK(kill(child.pid, SIGKILL) == 0);
    return mid_write;
}

/* --durable: a quarter of the puts acknowledged, then SIGKILL during a payload write (the put in
 * progress waits for it); every ACK printed before the death is read (EOF ends the pipe), then
 * the dead child is reaped. Returns the acknowledged count. */
static size_t durable_kill(bool *acked, bool *mid_write)
{
    size_t n = read_acks(acked, NOBJ / 4);
    CHECK(n == NOBJ / 4);
    *mid_write = kill_mid_write(cold_root_dir);
    n += read_acks(acked, NOBJ);
    CHECK(tproc_kill(&child, SIGKILL) == 0); /* reaps it */
    return n;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    durable = argc >= 2 && strcmp(argv[1], "--durable") == 0;
    const char *dflag = durable ? "1" : "0";
    curl_global_init(CURL_GLOBAL_DEFAULT);
    testsrv_sweep_stale();
    if (testsrv_start_redis(&srv, NULL) != 0) {
        fprintf(stderr, "cannot start redis: %s\n", kvmesh_last_error());
        return 1;
    }
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-crash") == 0);
    char root[128], exe[512], dep[64];
    snprintf(root, sizeof(root), "%s/dev", tmpdir);
    CHECK(mkdir(root, 0700) == 0);
    snprintf(cold_root_dir, sizeof(cold_root_dir), "%s", root);
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    snprintf(dep, sizeof(dep), "coldcrash%d", (int)getpid());
    const char *url = testsrv_url(srv);

    /* 1. the writer: 96 acknowledged objects; its offloads trail at 1 MiB/s */
    const char *wargs[] = {exe, "--runtime", "write", url, dep, root, dflag};
    char line[256];
    CHECK(tproc_start(&child, 7, wargs, "READY", line, sizeof(line), 30000) == 0);
    {
        kvmesh_config_t *c = kvmesh_config_new();
        set_common(c, url, dep);
        kvmesh_config_set(c, "memory_size", "0");
        CHECK(kvmesh_open(&client, c) == 0);
        kvmesh_config_free(c);
    }
    bool *acked = calloc(NOBJ, sizeof(bool));
    bool *backed = calloc(NOBJ, sizeof(bool));
    CHECK(acked && backed);
    size_t n_acked = 0;
    size_t before = 0;
    bool mid_write = false;
    if (durable) {
        n_acked = durable_kill(acked, &mid_write);
        before = backed_count(backed);
    } else {
        n_acked = read_acks(acked, NOBJ);
        CHECK(n_acked == NOBJ);
        /* 2. kill -9 while the offloads run: wait until some (not all) have a cold copy */
        uint64_t end = env_clock_mono_ms() + 20000;
        while ((before = backed_count(NULL)) < NOBJ / 4 && env_clock_mono_ms() < end)
            usleep(20000);
        mid_write = kill_mid_write(root);
        CHECK(tproc_kill(&child, SIGKILL) == 0); /* reaps it */
        before = backed_count(backed);
    }
    size_t files0 = tcold_count_files(root);
    printf("killed the writer %s a payload write, with %zu of %zu acknowledged objects holding "
           "a cold copy (%zu device files)\n",
           mid_write ? "during" : "between", before, n_acked, files0);
    if (durable) { /* every acknowledged object is durable before the restart */
        for (uint32_t i = 0; i < NOBJ; i++) {
            if (acked[i] && !backed[i])
                fprintf(stderr, "acknowledged object %u has no cold copy\n", i);
            CHECK(!acked[i] || backed[i]);
        }
        CHECK(n_acked >= NOBJ / 4 && n_acked < NOBJ);
    } else {
        CHECK(before > 0 && before < NOBJ);
    }

    /* 3. restart on the same device directory with the same runtime id */
    const char *sargs[] = {exe, "--runtime", "serve", url, dep, root, dflag};
    CHECK(tproc_start(&child, 7, sargs, "READY", line, sizeof(line), 30000) == 0);
    char id[64];
    uint64_t epoch = 0;
    unsigned port = 0;
    CHECK(sscanf(line, "READY %63s %" SCNu64 " %u", id, &epoch, &port) == 3 && port > 0);

    /* 4. reconciliation settles: device usage = files = cold-backed routes (bounded wait) */
    size_t after = 0, files = 0;
    double gauge = -1;
    int stable = 0, polls = 0;
    double gauge0 = cold_gauge((uint16_t)port);
    uint64_t end = env_clock_mono_ms() + 30000;
    while (env_clock_mono_ms() < end && stable < 3) {
        usleep(200000);
        after = backed_count(backed);
        files = tcold_count_files(root);
        gauge = cold_gauge((uint16_t)port);
        bool ok = gauge == (double)files * OBJ_LEN && files == after;
        stable = ok ? stable + 1 : 0;
        polls++;
    }
    printf("at the restart the device record held %.0f bytes (%.1f x 64 KiB) for %zu files; "
           "settled after %d polls\n",
           gauge0, gauge0 / OBJ_LEN, files0, polls);
    printf("after the restart and reconciliation: %zu routes with a cold copy, %zu device "
           "files, device used + reserved %.0f bytes (= %.0f x 64 KiB)\n",
           after, files, gauge, gauge / OBJ_LEN);
    CHECK(stable >= 3 && after >= before);

    /* 5. every acknowledged object with a cold copy reads back with its bytes; the others are
     * refused (their only copy died with the process), never answered with other bytes */
    uint8_t *want = malloc(OBJ_LEN), *got = malloc(OBJ_LEN);
    CHECK(want && got);
    size_t read_ok = 0, refused = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        tproc_fill(want, OBJ_LEN, i + 1);
        size_t n = 0;
        int rc = kvmesh_get_into(client, &sc, k, strlen(k), got, OBJ_LEN, &n);
        if (backed[i] || (durable && acked[i])) {
            if (rc)
                fprintf(stderr, "get %s: %s: %s\n", k, kvmesh_errname(rc), kvmesh_last_error());
            CHECK(rc == 0 && n == OBJ_LEN && memcmp(got, want, OBJ_LEN) == 0);
            read_ok++;
        } else {
            CHECK(rc != 0 || (n == OBJ_LEN && memcmp(got, want, OBJ_LEN) == 0));
            refused += rc != 0;
        }
    }
    printf("acknowledged %zu: %zu with a cold copy read back with their bytes, %zu refused "
           "(%s)\n",
           n_acked, read_ok, refused,
           durable ? "never acknowledged: not written, or in flight at the kill"
                   : "hot-only copies lost with the process");
    CHECK(read_ok == after || durable);
    CHECK(!durable || read_ok >= n_acked);
    free(want);
    free(got);
    free(acked);
    free(backed);
    CHECK(tproc_stop(&child, 20000) == 0);
    cleanup_all();
    curl_global_cleanup();
    printf("cold_store_crash: ok\n");
    return 0;
}
