// SPDX-License-Identifier: Apache-2.0
/*
 * cold_store.c — the cold tier wired into a real runtime (docs/cold.md "Store wiring"): a
 * runtime with 4 MiB of DRAM, the tcp transport, in-memory metadata and a LocalDir cold device
 * in a temporary directory takes a working set of 4x its DRAM (256 objects of 64 KiB). Shows:
 *   - every object reads back with its bytes (cold-only ones restored from the device files and
 *     verified by checksum), and some objects are cold-only (no hot replica left);
 *   - /metrics counts offloads, last-hot evictions to cold and restores (> 0), and the device's
 *     capacity and used bytes under tier="cold";
 *   - with a byte flipped in the payload of every cold file, a get of a cold-only object fails
 *     with KVMESH_ECHECKSUM and returns no bytes; objects still hot read back intact;
 *   - an overwrite of a cold-only object reads back the new value.
 *   - a client-only runtime without a cold tier reads the same objects (cold-only ones restored
 *     by the device's owner over RPC and verified by the client), and is refused the corrupted
 *     ones with KVMESH_ECHECKSUM too;
 *   - (argv[2] = restart: metadata_only routes) after the storage runtime is closed and reopened
 *     on the same device directory, every object with a cold copy reads back with its bytes;
 *   - (argv[2] = pair) with a second storage runtime B and its own device, objects that A writes
 *     onto B are offloaded to B's device (B learns of them from the commit):
 *     every object gets a cold copy, both devices hold some, every object reads back;
 *     (argv[3] = durable, as ctest runs it) with cold_write_through on A: every put through
 *     A, the ones pinned on B included (A polls B's cold op record), has a materialized cold
 *     copy when it returns;
 *   - a cold_root that does not exist fails the open with KVMESH_ECONFIG naming it, and so does
 *     the (local) device directory with cold_nfs = true, naming the filesystem type found;
 *   - removing cold-only objects reclaims their cold copies (device used bytes fall by their
 *     size); argv[1] picks the backend (localdir, extent).
 *   - (argv[2] = staging, argv[3] = tcp | shm) the remote restores go through a 2-slot staging
 *     pool with a 3 s TTL, the transport forced to argv[3], and KVMESH_TEST_COLD_LATE_ACKS=2 in
 *     the environment (the first two remote reads hold their ACK back until the next remote
 *     read finished): the slots they hold expire, their ACKs arrive late (ignored),
 *     the next remote reads meet backpressure and retry, every read still returns its verified
 *     bytes, and the owner's kvmesh_cold_staging_* families show it (acquired >= the remote
 *     restores, backpressure > 0, expiries >= 1 (the second held slot may be ACKed, late but before
 * its expiry, once the first one expired), late > 0, 2 slots, occupancy back to 0). Every wait is
 * bounded; the directory is removed at the end (also on failure).
 *   - (extent, argv[2] = clean: 1 MiB segments) background cleaning in a running runtime: the
 *     storage runtime overwrites every cold-only object of the upper half twice and the client
 *     removes the lower half (their extents die when the owner runs the reclaim records, at
 *     least 1 s later); the bytes of the segment files on disk then fall below what they were
 *     right after the churn, kvmesh_cold_clean_runs_total{result=ok} and
 *     kvmesh_cold_cleaned_bytes_total rise, and every live object reads back with its last
 *     bytes (removed ones: KVMESH_ENOENT).
 */
#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvmesh.h"
#include "coldfiles.h"
#include "curl_body.h"
#include "cold_itest.h"
#include "proc.h"
#include "obs_prom.h"
#include "tmpdir.h"

struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
uint16_t kvm_rt_admin_port(struct kvm_rt *rt);

#define NOBJ      256
#define OBJ_LEN   (64u << 10)
#define DRAM      "4MiB"
#define PUT_TRIES 400

static char tmpdir[64];
static const char *kind = "localdir";
static kvmesh_t *kv, *kvc; /* the storage runtime; a client-only runtime (no cold tier) */
static kvmesh_t *kv2;      /* pair mode: a second storage runtime with its own device */
static const kvmesh_scope_t sc = {"tenant-a", NULL};

static void cleanup(void)
{
    if (kv2) {
        kvmesh_close(kv2);
        kv2 = NULL;
    }
    if (kvc) {
        kvmesh_close(kvc);
        kvc = NULL;
    }
    if (kv) {
        kvmesh_close(kv);
        kv = NULL;
    }
    tcold_remove_dir(tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static void fill(uint8_t *buf, uint32_t i, uint32_t gen)
{
    cold_itest_fill(buf, OBJ_LEN, 0x9e3779b97f4a7c15ull * (i + 1) + gen * 0xbf58476d1ce4e5b9ull);
}

static void key_of(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "cold-obj-%04u", i);
}

static double metric(const char *name, const char *l, const char *v)
{
    double x = 0;
    CHECK(cold_itest_metric(kvm_rt_admin_port(kvmesh_runtime_of(kv)), name, l, v, &x) == 0);
    return x;
}

static bool cold_only(uint32_t i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    kvmesh_route_info_t ri;
    int rc = kvmesh_route_query(kv, &sc, k, strlen(k), &ri);
    CHECK(rc == 0 || rc == KVMESH_ENOENT); /* ENOENT: removed in step 5 */
    return rc == 0 && ri.n_replicas == 0 && ri.cold_backed;
}

/* Overwrites up to max cold-only objects (from the highest index down) through who with
 * generation gen, each read back with its new bytes at once; returns how many. */
static size_t overwrite_cold_only(kvmesh_t *who, uint8_t *buf, uint32_t gen, size_t max)
{
    size_t n = 0;
    for (uint32_t i = NOBJ; i-- > 0 && n < max;) {
        if (!cold_only(i))
            continue;
        char k[32];
        key_of(i, k, sizeof(k));
        fill(buf, i, gen);
        CHECK(kvmesh_put(who, &sc, k, strlen(k), buf, OBJ_LEN, NULL) == 0);
        void *out = NULL;
        size_t len = 0;
        CHECK(kvmesh_get(who, &sc, k, strlen(k), &out, &len) == 0);
        CHECK(len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
        kvmesh_free(out);
        n++;
    }
    return n;
}

/* A put through who, retried while eviction waits for an offload (bounded). */
static int put_retry(kvmesh_t *who, const char *k, const uint8_t *buf,
                     const kvmesh_put_opts_t *opts)
{
    int rc = -1;
    for (int t = 0; t < PUT_TRIES && rc != 0; t++) {
        rc = kvmesh_put(who, &sc, k, strlen(k), buf, OBJ_LEN, opts);
        if (rc)
            usleep(20000);
    }
    return rc;
}

/* Calls fn with the path of every ExtentStore segment file under root/ext. */
static void each_segment(const char *root, void (*fn)(const char *f, void *arg), void *arg)
{
    char ext[256];
    snprintf(ext, sizeof(ext), "%s/ext", root);
    DIR *dir = opendir(ext);
    CHECK(dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strncmp(e->d_name, "seg-", 4) != 0)
            continue;
        char f[512];
        snprintf(f, sizeof(f), "%s/%s", ext, e->d_name);
        fn(f, arg);
    }
    closedir(dir);
}

static void add_size(const char *f, void *arg)
{
    struct stat st;
    if (stat(f, &st) == 0) /* (a segment removed by cleaning meanwhile counts 0) */
        *(uint64_t *)arg += (uint64_t)st.st_size;
}

/* Bytes of the ExtentStore segment files under root/ext. */
static uint64_t segment_file_bytes(const char *root)
{
    uint64_t sum = 0;
    each_segment(root, add_size, &sum);
    return sum;
}

#define REMOVED UINT32_MAX

/* Cleaning in a running runtime (argv[2] = clean, see the top). */
static void clean_churn(const char *root, uint8_t *buf)
{
    uint32_t gen[NOBJ] = {0};
    size_t over = 0;
    for (uint32_t g = 1; g <= 2; g++)
        for (uint32_t i = NOBJ / 2; i < NOBJ; i++) {
            if (!cold_only(i))
                continue;
            char k[32];
            key_of(i, k, sizeof(k));
            fill(buf, i, g);
            CHECK(put_retry(kv, k, buf, NULL) == 0);
            gen[i] = g;
            over++;
        }
    for (uint32_t i = 0; i < NOBJ / 2; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        CHECK(kvmesh_remove(kvc, &sc, k, strlen(k)) == 0);
        gen[i] = REMOVED;
    }
    uint64_t after = segment_file_bytes(root), now = after;
    for (int t = 0; t < 600 && now >= after; t++) { /* bounded: 60 s */
        usleep(100000);
        now = segment_file_bytes(root);
    }
    double runs = 0, cleaned = 0;
    for (int t = 0; t < 50 && (runs == 0 || cleaned == 0); t++) {
        runs = metric("kvmesh_cold_clean_runs_total", "result", "ok");
        cleaned = metric("kvmesh_cold_cleaned_bytes_total", NULL, NULL);
        if (runs == 0 || cleaned == 0)
            usleep(100000);
    }
    printf("clean: %zu overwrites, %u removes; segment files %" PRIu64 " -> %" PRIu64
           " bytes; clean runs %.0f, cleaned bytes %.0f\n",
           over, NOBJ / 2, after, now, runs, cleaned);
    CHECK(over > 0 && now < after && runs > 0 && cleaned > 0);
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        void *out = NULL;
        size_t len = 0;
        int rc = kvmesh_get(kv, &sc, k, strlen(k), &out, &len);
        if (gen[i] == REMOVED) {
            CHECK(rc == KVMESH_ENOENT && out == NULL);
            continue;
        }
        fill(buf, i, gen[i]);
        CHECK(rc == 0 && len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
        kvmesh_free(out);
    }
}

static void flip(const char *f, off_t at)
{
    int fd = open(f, O_RDWR);
    CHECK(fd >= 0);
    uint8_t b;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
}

/* ExtentStore: extents sit at 4 KiB-aligned offsets from 4096 in each segment file, a 64-byte
 * header then the payload; with equal object sizes they follow each other at a fixed stride.
 * Flips one payload byte of every extent. */
static void corrupt_segment(const char *f, void *arg)
{
    const off_t stride = ((64 + OBJ_LEN + 4095) / 4096) * 4096;
    struct stat st;
    CHECK(stat(f, &st) == 0);
    for (off_t at = 4096; at + 64 + (off_t)OBJ_LEN <= st.st_size; at += stride, ++*(size_t *)arg)
        flip(f, at + 64 + OBJ_LEN / 2);
}

static size_t corrupt_extents(const char *root)
{
    size_t n = 0;
    each_segment(root, corrupt_segment, &n);
    return n;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        kind = argv[1];
    bool restart = argc > 2 && strcmp(argv[2], "restart") == 0;
    bool pair = argc > 2 && strcmp(argv[2], "pair") == 0;
    bool staging = argc > 2 && strcmp(argv[2], "staging") == 0;
    bool clean = argc > 2 && strcmp(argv[2], "clean") == 0;
    /* pair durable: A and B run cold_write_through; A's puts pinned on B wait for B's offload */
    bool durable = pair && argc > 3 && strcmp(argv[3], "durable") == 0;
    const char *transport = staging && argc > 3 ? argv[3] : "tcp";
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-store") == 0);
    char root[128];
    snprintf(root, sizeof(root), "%s/dev", tmpdir);
    CHECK(mkdir(root, 0700) == 0);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    char dep[64];
    snprintf(dep, sizeof(dep), "coldstore%d", (int)getpid());
    char url[96];
    snprintf(url, sizeof(url), "memory://%s", dep);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", dep) == 0);
    CHECK(kvmesh_config_set(c, "transport", transport) == 0);
    if (staging) {
        CHECK(kvmesh_config_set(c, "cold_staging_slots", "2") == 0);
        CHECK(kvmesh_config_set(c, "cold_staging_bytes", "1MiB") == 0);
        CHECK(kvmesh_config_set(c, "cold_staging_ttl_ms", "3000") == 0);
    }
    /* no re-promotion (its room is below evict_low_watermark; cold_store_evict tests it): a read
     * of a cold-only object would otherwise give it a hot replica again, racing what this test
     * counts (the client's remote restores, the corrupted cold-only gets refused) */
    CHECK(kvmesh_config_set(c, "evict_low_watermark", "0") == 0);
    CHECK(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", DRAM) == 0);
    CHECK(kvmesh_config_set(c, "segment_size", DRAM) == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "reclaim_grace_ms", "50") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "10000") == 0);
    CHECK(kvmesh_config_set(c, "cold_kind", kind) == 0);
    CHECK(kvmesh_config_set(c, "cold_root", root) == 0);
    CHECK(kvmesh_config_set(c, "cold_capacity", "64MiB") == 0);
    if (durable)
        CHECK(kvmesh_config_set(c, "cold_write_through", "true") == 0);
    if (clean) /* small segments: cleaning has whole ones to reclaim */
        CHECK(kvmesh_config_set(c, "cold_segment_bytes", "1MiB") == 0);
    if (restart) { /* routes in metadata and a fixed runtime id: they outlive the runtime */
        CHECK(kvmesh_config_set(c, "route_mode", "metadata_only") == 0);
        CHECK(kvmesh_config_set(c, "runtime_id", "c01dc01dc01dc01dc01dc01dc01dc01d") == 0);
    }
    kvmesh_config_t *cs = kvmesh_config_new(); /* the storage runtime's config, for a reopen */
    CHECK(cs);
    size_t nf;
    const kvmesh_config_field_t *fields = kvmesh_config_fields(&nf);
    for (size_t f = 0; f < nf; f++) {
        char v[600];
        CHECK(kvmesh_config_get(c, fields[f].name, v, sizeof(v)) == 0);
        CHECK(kvmesh_config_set(cs, fields[f].name, v) == 0);
    }
    /* a device directory that does not exist fails the open, naming it */
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/missing", tmpdir);
    CHECK(kvmesh_config_set(c, "cold_root", missing) == 0);
    int orc = kvmesh_open(&kv, c);
    printf("open with a missing cold_root: %s: %s\n", kvmesh_errname(orc), kvmesh_last_error());
    CHECK(orc == KVMESH_ECONFIG && strstr(kvmesh_last_error(), missing) != NULL && kv == NULL);
    CHECK(kvmesh_config_set(c, "cold_root", root) == 0);
    /* a local directory (tmpfs/ext4) configured as an NFS target is refused, naming it and the
     * filesystem type found */
    CHECK(kvmesh_config_set(c, "cold_nfs", "true") == 0);
    orc = kvmesh_open(&kv, c);
    printf("open with cold_nfs on a local directory: %s: %s\n", kvmesh_errname(orc),
           kvmesh_last_error());
    CHECK(orc == KVMESH_ECONFIG && strstr(kvmesh_last_error(), root) != NULL &&
          strstr(kvmesh_last_error(), "configured as NFS") != NULL && kv == NULL);
    CHECK(kvmesh_config_set(c, "cold_nfs", "false") == 0);
    CHECK(kvmesh_open(&kv, c) == 0);
    /* the client: same deployment, no memory, no cold tier: it reads cold-only objects from the
     * device's owner over RPC (STORE_RPC_COLD_READ) */
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "cold_kind", "off") == 0);
    CHECK(kvmesh_config_set(c, "cold_write_through", "false") == 0);
    CHECK(kvmesh_config_set(c, "admin_listen", "") == 0);
    CHECK(kvmesh_config_set(c, "runtime_id", "") == 0);
    /* its reclaim records (step 5) are due for the device's owner after 1 s */
    CHECK(kvmesh_config_set(c, "cold_reconcile_after_ms", "1000") == 0);
    CHECK(kvmesh_open(&kvc, c) == 0);
    char root2[160], idb[KVMESH_ID_HEX_LEN + 1] = "";
    snprintf(root2, sizeof(root2), "%s/dev2", tmpdir);
    if (pair) { /* B: the same storage settings, its own device directory */
        CHECK(mkdir(root2, 0700) == 0);
        CHECK(kvmesh_config_set(cs, "cold_write_through", "false") == 0); /* B: the default */
        CHECK(kvmesh_config_set(cs, "cold_root", root2) == 0);
        CHECK(kvmesh_config_set(cs, "admin_listen", "") == 0);
        CHECK(kvmesh_open(&kv2, cs) == 0);
        /* A places on B once its membership snapshot lists B with capacity (bounded wait) */
        CHECK(cold_itest_wait_storage(kv, 2));
        uint64_t epb = 0;
        CHECK(kvmesh_self(kv2, idb, &epb) == 0);
    }
    /* pair: odd objects are written by A onto B (pinned there) */
    const char *pin_b[1] = {idb};
    kvmesh_put_opts_t on_b = {.preferred_owners = pin_b, .n_preferred = 1, .hard_pin = true};
    kvmesh_config_free(c);

    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);
    /* 1. a working set of 4x DRAM; a put refused while eviction waits for an offload retries */
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        fill(buf, i, 0);
        CHECK(put_retry(kv, k, buf, pair && i % 2 ? &on_b : NULL) == 0);
        if (durable) { /* acknowledged = its cold copy is committed, on A's device or on B's */
            kvmesh_route_info_t ri;
            CHECK(kvmesh_route_query(kvc, &sc, k, strlen(k), &ri) == 0);
            if (!ri.cold_backed)
                fprintf(stderr, "durable put %s acknowledged without a cold copy\n", k);
            CHECK(ri.cold_backed);
        }
    }
    /* 2. every object reads back with its bytes */
    size_t cold = 0, remote = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        bool co = cold_only(i);
        cold += co;
        void *out = NULL;
        size_t len = 0;
        int rc = kvmesh_get(kv, &sc, k, strlen(k), &out, &len);
        if (rc)
            fprintf(stderr, "get %s (cold-only %d): %s: %s\n", k, co, kvmesh_errname(rc),
                    kvmesh_last_error());
        CHECK(rc == 0);
        fill(buf, i, 0);
        CHECK(len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
        kvmesh_free(out);
        out = NULL;
        if (co) { /* still cold-only after the owner's read (it re-promotes when DRAM has room) */
            kvmesh_route_info_t ri;
            CHECK(kvmesh_route_query(kvc, &sc, k, strlen(k), &ri) == 0);
            remote += ri.n_replicas == 0 && ri.cold_backed;
        }
        rc = kvmesh_get(kvc, &sc, k, strlen(k), &out, &len); /* remote restore when cold-only */
        if (rc)
            fprintf(stderr, "client get %s (cold-only %d): %s: %s\n", k, co, kvmesh_errname(rc),
                    kvmesh_last_error());
        CHECK(rc == 0 && len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
        kvmesh_free(out);
    }
    printf("cold-only objects: %zu of %u (read through the owner and through a client)\n", cold,
           NOBJ);
    CHECK(cold > 0);
    if (pair) {
        /* 3p. writes through A placed replicas on B too (WRH): those went to B's device (B
         * learned of them from the commit), so every object has a materialized cold copy; each
         * device holds some; B reads every object back as well */
        size_t backed = 0;
        for (int t = 0; t < 100; t++) {
            backed = 0;
            for (uint32_t i = 0; i < NOBJ; i++) {
                char k[32];
                key_of(i, k, sizeof(k));
                kvmesh_route_info_t ri;
                CHECK(kvmesh_route_query(kvc, &sc, k, strlen(k), &ri) == 0);
                backed += ri.cold_backed;
            }
            if (backed == NOBJ)
                break;
            usleep(100000);
        }
        for (uint32_t i = 0; i < NOBJ; i++) {
            char k[32];
            key_of(i, k, sizeof(k));
            fill(buf, i, 0);
            void *out = NULL;
            size_t len = 0;
            CHECK(kvmesh_get(kv2, &sc, k, strlen(k), &out, &len) == 0);
            CHECK(len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
            kvmesh_free(out);
        }
        size_t f1 = 0, f2 = 0;
        if (strcmp(kind, "localdir") == 0) {
            f1 = tcold_count_files(root);
            f2 = tcold_count_files(root2);
        }
        printf("pair: %zu of %u objects with a cold copy; device files A %zu, B %zu\n", backed,
               NOBJ, f1, f2);
        CHECK(backed == NOBJ && f1 > 0 && f2 > 0);
        kvmesh_config_free(cs);
        free(buf);
        cleanup();
        curl_global_cleanup();
        printf("cold_store: ok\n");
        return 0;
    }
    if (restart) {
        /* 3r. the storage runtime restarts (its DRAM is gone; the same device directory): every
         * object with a materialized cold copy reads back with its bytes through both runtimes */
        bool *mat = calloc(NOBJ, sizeof(bool));
        CHECK(mat);
        size_t nmat = 0;
        for (uint32_t i = 0; i < NOBJ; i++) {
            char k[32];
            key_of(i, k, sizeof(k));
            kvmesh_route_info_t ri;
            CHECK(kvmesh_route_query(kv, &sc, k, strlen(k), &ri) == 0);
            nmat += mat[i] = ri.cold_backed;
        }
        kvmesh_close(kv);
        kv = NULL;
        CHECK(kvmesh_open(&kv, cs) == 0);
        size_t back = 0;
        for (uint32_t i = 0; i < NOBJ; i++) {
            if (!mat[i])
                continue;
            char k[32];
            key_of(i, k, sizeof(k));
            fill(buf, i, 0);
            kvmesh_t *hs[2] = {kv, kvc};
            for (int h = 0; h < 2; h++) {
                void *out = NULL;
                size_t len = 0;
                int rc = kvmesh_get(hs[h], &sc, k, strlen(k), &out, &len);
                if (rc)
                    fprintf(stderr, "after restart, get %s via %s: %s: %s\n", k,
                            h ? "client" : "owner", kvmesh_errname(rc), kvmesh_last_error());
                CHECK(rc == 0 && len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
                kvmesh_free(out);
            }
            back++;
        }
        printf("after a restart of the storage runtime: %zu of %zu objects with a cold copy read "
               "back (through the owner and the client)\n",
               back, nmat);
        CHECK(nmat >= cold && back == nmat);
        free(mat);
        free(buf);
        kvmesh_config_free(cs);
        cleanup();
        curl_global_cleanup();
        printf("cold_store: ok\n");
        return 0;
    }
    kvmesh_config_free(cs);
    if (clean) {
        clean_churn(root, buf);
        free(buf);
        cleanup();
        curl_global_cleanup();
        printf("cold_store: ok\n");
        return 0;
    }
    if (staging) { /* 2s. the owner's staging pool */
        double acq = metric("kvmesh_cold_staging_acquired_total", NULL, NULL);
        double bp = metric("kvmesh_cold_staging_backpressure_total", NULL, NULL);
        double slots = metric("kvmesh_cold_staging_slots", NULL, NULL);
        double exp = 0, in_use = -1, bytes = -1, late = 0;
        for (int t = 0; t < 100; t++) { /* bounded: the held slots expire (3 s TTL) */
            acq = metric("kvmesh_cold_staging_acquired_total", NULL, NULL); /* exported per tick */
            exp = metric("kvmesh_cold_staging_expiries_total", NULL, NULL);
            in_use = metric("kvmesh_cold_staging_slots_used", NULL, NULL);
            bytes = metric("kvmesh_cold_staging_bytes_used", NULL, NULL);
            late = metric("kvmesh_cold_staging_late_total", NULL, NULL);
            if (exp >= 1 && in_use == 0 && bytes == 0 && late > 0 && acq >= (double)remote)
                break;
            usleep(100000);
        }
        printf("staging (%s): acquired %.0f for %zu remote restores, backpressure %.0f, expiries "
               "%.0f, late acks/completions %.0f, slots %.0f, in use %.0f (%.0f bytes)\n",
               transport, acq, remote, bp, exp, late, slots, in_use, bytes);
        CHECK(remote == cold && acq >= (double)remote && bp > 0 && exp >= 1 && late > 0 &&
              slots == 2);
        CHECK(in_use == 0 && bytes == 0);
    }
    /* 3. the cold metric families */
    double off = metric("kvmesh_cold_offloads_total", "result", "ok");
    double ev = metric("kvmesh_cold_evictions_total", NULL, NULL);
    double rs = metric("kvmesh_cold_restores_total", "result", "ok");
    double cap = metric("kvmesh_segment_capacity_bytes", "tier", "cold");
    double used = metric("kvmesh_segment_used_bytes", "tier", "cold");
    printf("offloads %.0f, evictions to cold %.0f, restores %.0f, device used %.0f of %.0f\n", off,
           ev, rs, used, cap);
    CHECK(off > 0 && ev > 0 && rs >= (double)cold && cap == 64.0 * 1048576.0 && used > 0);
    /* 4. a corrupted cold file is detected and never returned */
    size_t files = strcmp(kind, "extent") == 0 ? corrupt_extents(root)
                                               : tcold_corrupt_files(root, 64 + OBJ_LEN / 2);
    CHECK(files != (size_t)-1 && files >= cold);
    size_t refused = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        bool co = cold_only(i);
        void *out = NULL;
        size_t len = 0;
        int rc = kvmesh_get(kv, &sc, k, strlen(k), &out, &len);
        if (co) {
            CHECK(rc == KVMESH_ECHECKSUM && out == NULL);
            rc = kvmesh_get(kvc, &sc, k, strlen(k), &out, &len);
            CHECK(rc == KVMESH_ECHECKSUM && out == NULL);
            refused++;
        } else {
            CHECK(rc == 0);
            fill(buf, i, 0);
            CHECK(len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
            kvmesh_free(out);
        }
    }
    printf("corrupted files: %zu, cold-only gets refused with KVMESH_ECHECKSUM: %zu\n", files,
           refused);
    CHECK(refused == cold);
    CHECK(metric("kvmesh_cold_restores_total", "result", "error") >= (double)refused);
    /* 5. removing or overwriting cold-only objects reclaims their cold copies: the device's used
     * bytes fall by exactly their size (bounded wait: the gauge follows the device record every
     * 200 ms). 8 removes through the storage runtime (its cold core runs the reclaim at once),
     * 8 removes and 4 overwrites through the client, which has no cold tier: its reclaim records
     * are run by the device's owner from its due index (kvm_cold_reclaim_gate's planner) */
    double before = metric("kvmesh_segment_used_bytes", "tier", "cold");
    double reclaims0 = metric("kvmesh_cold_reclaims_total", "result", "ok");
    size_t removed = 0, rm_client = 0, overwritten = 0; /* (each overwrite reads back at once) */
    for (uint32_t i = 0; i < NOBJ && removed < 16; i++) {
        if (!cold_only(i))
            continue;
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_t *who = removed < 8 ? kv : kvc;
        CHECK(kvmesh_remove(who, &sc, k, strlen(k)) == 0);
        void *out = NULL;
        size_t len = 0;
        CHECK(kvmesh_get(kv, &sc, k, strlen(k), &out, &len) == KVMESH_ENOENT);
        rm_client += who == kvc;
        removed++;
    }
    CHECK(removed > 8 && rm_client > 0);
    overwritten = overwrite_cold_only(kvc, buf, 2, 4);
    CHECK(overwritten > 0);
    double want = before - (double)(removed + overwritten) * OBJ_LEN, now = before;
    for (int t = 0; t < 200 && now != want; t++) {
        usleep(100000);
        now = metric("kvmesh_segment_used_bytes", "tier", "cold");
    }
    printf("removed %zu cold-only objects (%zu through the client) and overwrote %zu through the "
           "client: device used %.0f -> %.0f (want %.0f)\n",
           removed, rm_client, overwritten, before, now, want);
    CHECK(now == want);
    double reclaims = 0;
    for (int t = 0; t < 50 && reclaims < (double)(removed + overwritten); t++) {
        reclaims = metric("kvmesh_cold_reclaims_total", "result", "ok") - reclaims0;
        if (reclaims < (double)(removed + overwritten))
            usleep(100000); /* (exported every 200 ms) */
    }
    printf("kvmesh_cold_reclaims_total{result=ok} rose by %.0f\n", reclaims);
    CHECK(reclaims >= (double)(removed + overwritten));
    /* 6. an overwrite of a cold-only object through the storage runtime reads back the new
     * value */
    CHECK(overwrite_cold_only(kv, buf, 1, 1) == 1);
    free(buf);
    cleanup();
    curl_global_cleanup();
    printf("cold_store: ok\n");
    return 0;
}
