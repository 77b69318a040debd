// SPDX-License-Identifier: Apache-2.0
/*
 * cold_remote_proc.c — remote restore across processes (docs/cold.md "Remote restore"): the
 * cold device's owner runs in a child process (tests/support/proc.h), the reader is a
 * client-only runtime (no memory, no cold tier) in this process; a real Redis holds the
 * metadata (tests/support/testsrv). argv[1] = tcp | shm forces the transport of both runtimes.
 *
 * The owner: 4 MiB of DRAM, a LocalDir device in a temporary directory, a 2-slot / 1 MiB
 * staging pool; it writes 96 objects of 64 KiB (1.5x its DRAM), so some become cold-only.
 * Shows, through the reader:
 *   1. every object reads back with every byte it was written with (the cold-only ones staged
 *      by the owner, read over the forced transport and verified against the route's length and
 *      checksum by the reader); the owner's /metrics counts a staged slot per remote restore at
 *      least (kvmesh_cold_staging_acquired_total) and its occupancy returns to 0;
 *   2. re-promotion from the staging slot: once the owner removed its hot objects (its DRAM
 *      has room again), remote restores of cold-only objects put a hot replica back on the
 *      owner, copied from the staging slot under a promotion pin
 *      (kvmesh_cold_staging_promotions_total > 0, the route lists 1 replica and stays
 *      cold-backed); occupancy returns to 0 (the pin released);
 *   3. with one payload byte flipped in every cold file, every remote get of a cold-only object
 *      fails with KVMESH_ECHECKSUM and leaves the caller's buffer untouched (no byte returned);
 *      the promoted objects still read back intact from the owner's DRAM;
 *   4. a request of cold read version 1 (KVMESH_TEST_COLD_READ_VERSION=1, an older reader as the
 *      owner sees it) is refused with KVMESH_EPROTO saying the reader runs an older release and
 *      to upgrade it.
 * Every wait is bounded; the child is stopped by pid, Redis and the directory removed at the end.
 */
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
#include "daemon.h"
#include "obs_prom.h"
#include "proc.h"
#include "testsrv.h"
#include "tmpdir.h"

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

#define NOBJ     96
#define OBJ_LEN  (64u << 10)
#define NPROMOTE 8

static tproc_t child;
static testsrv_t *srv;
static kvmesh_t *client;
static char tmpdir[64];
static const kvmesh_scope_t sc = {"remote", NULL};

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
    snprintf(k, cap, "remote-obj-%04u", i);
}

static void set_common(kvmesh_config_t *c, const char *url, const char *dep, const char *tp)
{
    kvmesh_config_set(c, "metadata_url", url);
    kvmesh_config_set(c, "deployment", dep);
    kvmesh_config_set(c, "transport", tp);
    kvmesh_config_set(c, "replicas", "1");
    kvmesh_config_set(c, "request_timeout_ms", "10000");
}

/* ---- the owner child: argv = --owner url dep root transport --------------------------------
 * Writes the objects ("WROTE"), then on "FREE" removes every object that still has a hot
 * replica ("FREED n"); EOF on stdin closes it. */
static int owner_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    set_common(c, argv[2], argv[3], argv[5]);
    kvmesh_config_set(c, "admin_listen", "127.0.0.1:0");
    kvmesh_config_set(c, "memory_size", "4MiB");
    kvmesh_config_set(c, "segment_size", "4MiB");
    kvmesh_config_set(c, "max_object_size", "1MiB");
    kvmesh_config_set(c, "reclaim_grace_ms", "50");
    kvmesh_config_set(c, "cold_kind", "localdir");
    kvmesh_config_set(c, "cold_root", argv[4]);
    kvmesh_config_set(c, "cold_capacity", "64MiB");
    kvmesh_config_set(c, "cold_staging_slots", "2");
    kvmesh_config_set(c, "cold_staging_bytes", "1MiB");
    kvmesh_config_set(c, "cold_staging_ttl_ms", "3000");
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    tproc_child_ready(kv, true);
    uint8_t *buf = malloc(OBJ_LEN);
    int failed = buf == NULL;
    for (uint32_t i = 0; !failed && i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        tproc_fill(buf, OBJ_LEN, i + 1);
        int rc = -1;
        for (int t = 0; t < 400 && rc != 0; t++) /* refused while eviction waits for an offload */
            if ((rc = kvmesh_put(kv, &sc, k, strlen(k), buf, OBJ_LEN, NULL)) != 0)
                usleep(20000);
        if (rc) {
            fprintf(stderr, "put %s: %s\n", k, kvmesh_last_error());
            failed = 1;
        }
    }
    free(buf);
    printf(failed ? "FAILED\n" : "WROTE\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        if (strncmp(line, "FREE", 4) != 0)
            continue;
        unsigned n = 0;
        for (uint32_t i = 0; i < NOBJ; i++) {
            char k[32];
            key_of(i, k, sizeof(k));
            kvmesh_route_info_t ri;
            if (kvmesh_route_query(kv, &sc, k, strlen(k), &ri) == 0 && ri.n_replicas > 0)
                n += kvmesh_remove(kv, &sc, k, strlen(k)) == 0;
        }
        printf("FREED %u\n", n);
        fflush(stdout);
    }
    kvmesh_close(kv);
    return 0;
}

/* ---- the reader (parent) --------------------------------------------------------------------
 */

struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
uint16_t kvm_rt_admin_port(struct kvm_rt *rt);

static uint16_t admin_port; /* the owner's */

/* One series of a /metrics page (NAN when absent). */
static double metric_at(uint16_t port, const char *name, const char *l, const char *v)
{
    tdaemon_http_t r;
    CHECK(tdaemon_http(port, "GET", "/metrics", NULL, &r) == 200);
    struct prom p;
    memset(&p, 0, sizeof(p));
    CHECK(prom_parse(&p, r.body, strlen(r.body)) == 0);
    double x = prom_value(&p, name, l, v, NULL, NULL);
    prom_free(&p);
    tdaemon_http_free(&r);
    return x;
}

static double metric(const char *name)
{
    return metric_at(admin_port, name, NULL, NULL);
}

/* Waits (bounded: the pool's gauges are exported every 200 ms) until the owner's staging pool
 * holds no slot and no byte. */
static bool staging_idle(void)
{
    for (int t = 0; t < 100; t++) {
        if (metric("kvmesh_cold_staging_slots_used") == 0 &&
            metric("kvmesh_cold_staging_bytes_used") == 0)
            return true;
        usleep(100000);
    }
    return false;
}

static bool route_of(uint32_t i, kvmesh_route_info_t *ri)
{
    char k[32];
    key_of(i, k, sizeof(k));
    int rc = kvmesh_route_query(client, &sc, k, strlen(k), ri);
    CHECK(rc == 0 || rc == KVMESH_ENOENT);
    return rc == 0;
}

static bool cold_only(uint32_t i)
{
    kvmesh_route_info_t ri;
    return route_of(i, &ri) && ri.n_replicas == 0 && ri.cold_backed;
}

/* A get of object i through the reader into got (filled with 0xee first). */
static int read_obj(uint32_t i, uint8_t *got, size_t *n)
{
    char k[32];
    key_of(i, k, sizeof(k));
    memset(got, 0xee, OBJ_LEN);
    *n = 0;
    return kvmesh_get_into(client, &sc, k, strlen(k), got, OBJ_LEN, n);
}

static void read_verified(uint32_t i, uint8_t *want, uint8_t *got)
{
    size_t n = 0;
    int rc = read_obj(i, got, &n);
    if (rc)
        fprintf(stderr, "get %u: %s: %s\n", i, kvmesh_errname(rc), kvmesh_last_error());
    tproc_fill(want, OBJ_LEN, i + 1);
    CHECK(rc == 0 && n == OBJ_LEN && memcmp(got, want, OBJ_LEN) == 0);
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "--owner") == 0)
        return owner_main(argv);
    const char *tp = argc > 1 ? argv[1] : "tcp";
    CHECK(strcmp(tp, "tcp") == 0 || strcmp(tp, "shm") == 0);
    testsrv_sweep_stale();
    if (testsrv_start_redis(&srv, NULL) != 0) {
        fprintf(stderr, "cannot start redis: %s\n", kvmesh_last_error());
        return 1;
    }
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-remote") == 0);
    char root[128], exe[512], dep[64], line[256];
    snprintf(root, sizeof(root), "%s/dev", tmpdir);
    CHECK(mkdir(root, 0700) == 0);
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    snprintf(dep, sizeof(dep), "coldremote%d", (int)getpid());
    const char *url = testsrv_url(srv);

    /* the owner process writes the working set */
    const char *oargs[] = {exe, "--owner", url, dep, root, tp};
    CHECK(tproc_start(&child, 6, oargs, "READY", line, sizeof(line), 30000) == 0);
    char id[64];
    uint64_t epoch = 0;
    unsigned port = 0;
    CHECK(sscanf(line, "READY %63s %" SCNu64 " %u", id, &epoch, &port) == 3 && port > 0);
    admin_port = (uint16_t)port;
    CHECK(tproc_read_line(&child, line, sizeof(line), 60000) == 0 && strcmp(line, "WROTE") == 0);
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    set_common(c, url, dep, tp);
    kvmesh_config_set(c, "memory_size", "0");
    kvmesh_config_set(c, "admin_listen", "127.0.0.1:0");
    CHECK(kvmesh_open(&client, c) == 0);
    kvmesh_config_free(c);
    CHECK(tproc_wait_storage(client, 1, 10000) == 0);
    uint8_t *want = malloc(OBJ_LEN), *got = malloc(OBJ_LEN);
    CHECK(want && got);

    /* 1. every object reads back with its bytes; the cold-only ones through the staging pool */
    size_t cold = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        cold += cold_only(i);
        read_verified(i, want, got);
    }
    double acq = metric("kvmesh_cold_staging_acquired_total");
    for (int t = 0; t < 50 && acq < (double)cold; t++) { /* exported every 200 ms */
        usleep(100000);
        acq = metric("kvmesh_cold_staging_acquired_total");
    }
    printf("%s: %zu of %u objects cold-only, all %u read back verified; owner staged %.0f\n", tp,
           cold, NOBJ, NOBJ, acq);
    CHECK(cold > 0 && acq >= (double)cold && staging_idle());
    /* the cold-tier families: the reader's restores and their latency, the owner's device */
    uint16_t cport = kvm_rt_admin_port(kvmesh_runtime_of(client));
    double rs = metric_at(cport, "kvmesh_cold_restores_total", "result", "ok");
    double lat = metric_at(cport, "kvmesh_cold_restore_duration_seconds_count", NULL, NULL);
    double rtr = metric_at(cport, "kvmesh_cold_restore_retries_total", NULL, NULL);
    double health = metric("kvmesh_cold_device_health");
    double resv = metric("kvmesh_cold_device_reserved_bytes");
    double cap = metric_at(admin_port, "kvmesh_segment_capacity_bytes", "tier", "cold");
    double used = metric_at(admin_port, "kvmesh_segment_used_bytes", "tier", "cold");
    printf("reader: %.0f restores, latency histogram count %.0f, %.0f backpressure retries; "
           "owner device: health %.0f, %.0f of %.0f bytes used (%.0f reserved)\n",
           rs, lat, rtr, health, used, cap, resv);
    CHECK(rs >= (double)cold && lat >= rs && rtr >= 0 && health == 1 && resv >= 0 && resv <= used &&
          used >= (double)cold * OBJ_LEN && cap == 64.0 * 1048576.0);

    /* 2. the owner's DRAM gets room; remote restores re-promote from the staging slot */
    CHECK(tproc_write(&child, "FREE\n") == 0);
    unsigned freed = 0;
    CHECK(tproc_read_line(&child, line, sizeof(line), 30000) == 0 &&
          sscanf(line, "FREED %u", &freed) == 1);
    bool *promoted = calloc(NOBJ, sizeof(bool));
    CHECK(promoted);
    size_t tried = 0, back = 0;
    for (uint32_t i = 0; i < NOBJ && tried < NPROMOTE; i++) {
        if (!cold_only(i))
            continue;
        read_verified(i, want, got);
        tried++;
        for (int t = 0; t < 50; t++) { /* the promotion's CAS follows the reply (bounded) */
            kvmesh_route_info_t ri;
            CHECK(route_of(i, &ri));
            if (ri.n_replicas == 1 && ri.cold_backed) {
                promoted[i] = true;
                back++;
                break;
            }
            usleep(20000);
        }
    }
    double promos = metric("kvmesh_cold_staging_promotions_total");
    for (int t = 0; t < 50 && promos < (double)back; t++) {
        usleep(100000);
        promos = metric("kvmesh_cold_staging_promotions_total");
    }
    printf("owner removed %u hot objects; %zu remote restores, %zu re-promoted (hot replica "
           "next to the cold copy), %.0f promotions from a staging slot\n",
           freed, tried, back, promos);
    CHECK(freed > 0 && tried > 0 && back > 0 && promos >= (double)back && staging_idle());
    /* the removed objects' cold copies are reclaimed by the owner (the remover; bounded wait) */
    double rec = metric_at(admin_port, "kvmesh_cold_reclaims_total", "result", "ok");
    for (int t = 0; t < 50 && rec < 1; t++) {
        usleep(100000);
        rec = metric_at(admin_port, "kvmesh_cold_reclaims_total", "result", "ok");
    }
    printf("owner reclaimed %.0f cold copies of removed objects\n", rec);
    CHECK(rec >= 1);

    /* 3. a corrupted cold file is detected by the owner's and the reader's checks: refused,
     * never returned; promoted objects read from DRAM */
    size_t files = tcold_corrupt_files(root, 64 + OBJ_LEN / 2);
    CHECK(files != (size_t)-1 && files > 0);
    size_t refused = 0, from_dram = 0;
    memset(want, 0xee, OBJ_LEN);
    for (uint32_t i = 0; i < NOBJ; i++) {
        if (promoted[i]) {
            read_verified(i, want, got);
            from_dram++;
            continue;
        }
        if (!cold_only(i))
            continue; /* removed by the owner in step 2 */
        size_t n = 0;
        int rc = read_obj(i, got, &n);
        memset(want, 0xee, OBJ_LEN);
        if (rc != KVMESH_ECHECKSUM)
            fprintf(stderr, "get %u of a corrupted cold copy: %s: %s\n", i, kvmesh_errname(rc),
                    kvmesh_last_error());
        CHECK(rc == KVMESH_ECHECKSUM && memcmp(got, want, OBJ_LEN) == 0);
        refused++;
    }
    printf("corrupted %zu cold files: %zu cold-only gets refused with KVMESH_ECHECKSUM (no "
           "byte returned), %zu promoted objects read intact\n",
           files, refused, from_dram);
    CHECK(refused > 0 && from_dram == back && refused + from_dram == files && staging_idle());

    /* 4. an older reader (the test hook sends request version 1): the owner refuses it with
     * KVMESH_EPROTO naming the older side and what to do */
    bool asked = false;
    for (uint32_t i = 0; i < NOBJ && !asked; i++) {
        if (!cold_only(i))
            continue;
        asked = true;
        CHECK(setenv("KVMESH_TEST_COLD_READ_VERSION", "1", 1) == 0);
        size_t n = 0;
        int rc = read_obj(i, got, &n);
        CHECK(unsetenv("KVMESH_TEST_COLD_READ_VERSION") == 0);
        printf("a version 1 request: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        CHECK(rc == KVMESH_EPROTO && strstr(kvmesh_last_error(), "older release") &&
              strstr(kvmesh_last_error(), "upgrade"));
    }
    CHECK(asked);
    free(promoted);
    free(want);
    free(got);
    kvmesh_close(client);
    client = NULL;
    CHECK(tproc_stop(&child, 20000) == 0);
    cleanup_all();
    printf("cold_remote_proc %s: ok\n", tp);
    return 0;
}
