// SPDX-License-Identifier: Apache-2.0
/*
 * cold_resume_crash.c — a PendingOffload whose device owner is killed (kill -9) before it planned
 * the cold op, with replicas = 2 (docs/cold.md "Resuming after the device owner's crash"). Real
 * processes, real files, a real Redis (tests/support/testsrv), routes in metadata
 * (route_mode = metadata_only):
 *   - runtime B, in this process: storage, its own LocalDir device;
 *   - runtime A, a child process with a fixed runtime id and a LocalDir device: it writes 16
 *     objects of 64 KiB with replicas = 2 (one replica on A, one on B; the PendingOffload on A's
 *     device, A's own), acknowledging each on its stdout. The test hook kvm_cold_test_skip_offload
 *     keeps A from queueing the offloads, as if it died right after each route CAS; then it is
 *     SIGKILLed. No op was planned by A, no file is on its device;
 *   - A is restarted on the same device directory with the same runtime id. Its DRAM copies are
 *     gone; B's replicas are alive.
 * Shows: every object's route becomes MATERIALIZED on A's device (B, a replica owner, had planned
 * each op from the commit of its replica; A's reconciliation resumed them and read B's replica
 * through the transport), A's device holds exactly one file per object whose payload is that
 * object's bytes, its record used = 16 x 64 KiB and reserved 0, and every object reads back.
 * Without B's plan the ops are never resumed; without the remote hot read they park at RESERVED:
 * either way the wait for the materialized routes fails.
 *
 * Every wait is bounded; the child is killed by pid and the directory removed at the end.
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

#include "api/kvmesh_tools.h"
#include "cold_itest.h"
#include "coldfiles.h"
#include "core/hash.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "testsrv.h"
#include "tmpdir.h"

void kvm_cold_test_skip_offload(bool on); /* (store/cold_glue.h) */

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define NOBJ    16u
#define OBJ_LEN (64u << 10)
#define RT_ID   "c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a6"
#define WAIT_MS 40000u

static tproc_t child;
static testsrv_t *srv;
static kvmesh_t *kb;
static kvmesh_admin_t *adm;
static char tmpdir[64];
static const kvmesh_scope_t sc = {"resume", NULL};

static void cleanup_all(void)
{
    tcold_cleanup(&kb, &adm, NULL);
    tproc_kill(&child, SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
    tcold_remove_dir(tmpdir);
}

static void key_of(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "resume-obj-%04u", i);
}

static void set_common(kvmesh_config_t *c, const char *url, const char *dep, const char *root)
{
    const char *const cfg[][2] = {{"metadata_url", url},
                                  {"deployment", dep},
                                  {"route_mode", "metadata_only"},
                                  {"lease_ttl_ms", "2000"},
                                  {"request_timeout_ms", "5000"},
                                  {"replicas", "2"},
                                  {"transport", "tcp"},
                                  {"memory_size", "8MiB"},
                                  {"segment_size", "8MiB"},
                                  {"max_object_size", "1MiB"},
                                  {"cold_kind", "localdir"},
                                  {"cold_root", root},
                                  {"cold_capacity", "64MiB"},
                                  {"cold_reconcile_after_ms", "1000"},
                                  {NULL, NULL}};
    (void)tproc_config_setv(c, cfg); /* (known keys; a refusal is named on stderr) */
}

/* ---- runtime A, the child: argv = --runtime write|serve url dep root ------------------------ */

static int runtime_main(char **argv)
{
    bool write = strcmp(argv[2], "write") == 0;
    kvm_cold_test_skip_offload(write);
    kvmesh_config_t *c = kvmesh_config_new();
    set_common(c, argv[3], argv[4], argv[5]);
    kvmesh_config_set(c, "runtime_id", RT_ID);
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    tproc_child_ready(kv, false);
    if (write && tproc_wait_storage(kv, 2, 20000) == 0)
        (void)tproc_child_put_acked(kv, &sc, NOBJ, OBJ_LEN, key_of);
    printf("DONE\n");
    fflush(stdout);
    return tproc_child_serve(kv);
}

/* ---- parent -------------------------------------------------------------------------------- */

/* Routes of the objects: materialized count; every one has 2 replicas listed and, before the
 * restart, none is materialized. */
static size_t materialized(void)
{
    size_t n = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(kb, &sc, k, strlen(k), &ri) == 0);
        n += ri.cold_backed;
    }
    return n;
}

/* The device record whose root is root. */
static kvmesh_admin_device_t device_of(const char *root)
{
    kvmesh_admin_device_t dv[8];
    size_t n = 0;
    bool more = false;
    CHECK(kvmesh_admin_devices(adm, NULL, 8, dv, &n, &more) == 0 && n == 2);
    for (size_t i = 0; i < n; i++)
        if (strcmp(dv[i].root, root) == 0)
            return dv[i];
    CHECK(!"device record of the root");
    return dv[0];
}

struct payloads {
    uint64_t want[NOBJ];
    bool seen[NOBJ];
    size_t files, bad;
};

/* Each LocalDir object file: a 64-byte header, then the payload: it must be one object's bytes,
 * each object once. */
static bool check_file(const char *dir, const char *name, void *arg)
{
    struct payloads *p = arg;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    uint8_t *b = malloc(64 + OBJ_LEN);
    size_t got = f && b ? fread(b, 1, 64 + OBJ_LEN + 1, f) : 0;
    if (f)
        fclose(f);
    p->files++;
    bool ok = false;
    if (got == 64 + OBJ_LEN) {
        uint64_t sum = kvm_checksum(b + 64, OBJ_LEN);
        for (uint32_t i = 0; i < NOBJ; i++)
            if (sum == p->want[i] && !p->seen[i])
                ok = p->seen[i] = true;
    }
    p->bad += !ok;
    free(b);
    return true;
}

static void open_b(const char *url, const char *dep, const char *root)
{
    kvmesh_config_t *c = kvmesh_config_new();
    set_common(c, url, dep, root);
    CHECK(kvmesh_open(&kb, c) == 0);
    kvmesh_config_free(c);
    CHECK(tproc_admin_open(url, dep, &adm) == 0);
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    uint64_t t0 = env_clock_mono_ms();
    testsrv_sweep_stale();
    if (testsrv_start_redis(&srv, NULL) != 0) {
        fprintf(stderr, "cannot start redis: %s\n", kvmesh_last_error());
        return 1;
    }
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-resume") == 0);
    char ra[128], rb[128], exe[512], dep[64], line[256];
    snprintf(ra, sizeof(ra), "%s/a", tmpdir);
    snprintf(rb, sizeof(rb), "%s/b", tmpdir);
    CHECK(mkdir(ra, 0700) == 0 && mkdir(rb, 0700) == 0);
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    snprintf(dep, sizeof(dep), "coldresume%d", (int)getpid());
    const char *url = testsrv_url(srv);
    open_b(url, dep, rb);

    /* 1. A writes; its offloads are never queued; kill -9 */
    const char *wargs[] = {exe, "--runtime", "write", url, dep, ra};
    CHECK(tproc_start(&child, 6, wargs, "READY", line, sizeof(line), 30000) == 0);
    uint32_t acked = 0;
    while (acked < NOBJ && tproc_read_line(&child, line, sizeof(line), 30000) == 0 &&
           strncmp(line, "ACK ", 4) == 0)
        acked++;
    CHECK(acked == NOBJ);
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(kb, &sc, k, strlen(k), &ri) == 0);
        CHECK(ri.n_replicas == 2 && !ri.cold_backed);
    }
    usleep(300 * 1000); /* (B's plans are one metadata write each after its commits) */
    CHECK(kill(child.pid, SIGKILL) == 0);
    CHECK(tproc_kill(&child, SIGKILL) == 0); /* reaps it */
    CHECK(tcold_count_files(ra) == 0 && materialized() == 0);
    printf("A wrote %u objects (replicas 2, PendingOffload on A's device, not offloaded) and was "
           "killed at %" PRIu64 " ms\n",
           acked, env_clock_mono_ms() - t0);

    /* 2. A restarts on the same directory and id: the ops resume */
    const char *sargs[] = {exe, "--runtime", "serve", url, dep, ra};
    CHECK(tproc_start(&child, 6, sargs, "READY", line, sizeof(line), 30000) == 0);
    uint64_t t1 = env_clock_mono_ms();
    size_t n = 0;
    while ((n = materialized()) < NOBJ && env_clock_mono_ms() - t1 < WAIT_MS)
        usleep(200 * 1000);
    printf("after the restart: %zu of %u routes materialized in %" PRIu64 " ms\n", n, NOBJ,
           env_clock_mono_ms() - t1);
    CHECK(n == NOBJ);

    /* 3. A's device: one file per object with its bytes; its record = the files */
    struct payloads p = {.files = 0};
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);
    for (uint32_t i = 0; i < NOBJ; i++) {
        tproc_fill(buf, OBJ_LEN, i + 1);
        p.want[i] = kvm_checksum(buf, OBJ_LEN);
    }
    kvmesh_admin_device_t da;
    uint64_t t2 = env_clock_mono_ms();
    do { /* (the usage commit follows the route CAS) */
        da = device_of(ra);
        if (da.used == (uint64_t)NOBJ * OBJ_LEN && da.reserved == 0)
            break;
        usleep(100 * 1000);
    } while (env_clock_mono_ms() - t2 < 10000);
    (void)cold_itest_localdir_walk(ra, check_file, &p);
    printf("A's device: %zu files (%zu not an object's bytes), used %" PRIu64 ", reserved %" PRIu64
           "\n",
           p.files, p.bad, da.used, da.reserved);
    CHECK(p.files == NOBJ && p.bad == 0);
    CHECK(da.used == (uint64_t)NOBJ * OBJ_LEN && da.reserved == 0);

    /* 4. every object reads back */
    uint8_t *got = malloc(OBJ_LEN);
    CHECK(got);
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        size_t len = 0;
        tproc_fill(buf, OBJ_LEN, i + 1);
        CHECK(kvmesh_get_into(kb, &sc, k, strlen(k), got, OBJ_LEN, &len) == 0 && len == OBJ_LEN &&
              memcmp(got, buf, OBJ_LEN) == 0);
    }
    free(got);
    free(buf);
    CHECK(tproc_stop(&child, 20000) == 0);
    cleanup_all();
    printf("cold_resume_crash: ok (%" PRIu64 " ms)\n", env_clock_mono_ms() - t0);
    return 0;
}
