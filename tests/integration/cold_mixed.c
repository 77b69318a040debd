// SPDX-License-Identifier: Apache-2.0
/*
 * cold_mixed.c — one runtime with a LocalDir and an ExtentStore cold device, and the per-device
 * metric series (docs/cold.md "Several devices"; docs/operations.md kvmesh_cold_dev_*). One
 * storage runtime, in-memory metadata, /metrics over HTTP, device 0 LocalDir (cold_root), device 1
 * ExtentStore (cold_devices, 1 MiB segments), cold_write_through on (a put's success means its
 * cold copy is usage-committed), 2 MiB of DRAM, reclaim_grace_ms 0:
 *   1. offload: 192 x 32 KiB (3x DRAM): both device records hold used bytes, reserved 0; the
 *      LocalDir's used = its files x 32 KiB; used0 + used1 = every object;
 *      kvmesh_cold_dev_offloads_total{device="i",result="ok"} = device i's objects and
 *      kvmesh_cold_dev_{used,capacity}_bytes{device="i"} = its record;
 *   2. last-hot eviction and restore: 96 more objects (more than the DRAM holds) make the first
 *      192 cold-only; every one of them reads back byte-exact; both devices served
 *      restores of cold-only objects (kvmesh_cold_dev_restores_total{device="i",result="ok"} > 0
 *      for each: their last hot replicas were evicted), kvmesh_cold_evictions_total > 0;
 *   3. the series move with their device: after device 0 is drained, 16 more puts raise
 *      device 1's offload counter and used gauge by exactly 16 objects; device 0's stay;
 *   4. reclaim: the even-numbered objects are removed; both records' used fall (both devices
 *      reclaimed) to exactly the remaining objects, LocalDir files = its used;
 *   5. after close, each backend reopened on its directory reports used bytes = its record's.
 * Every wait is bounded.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "cold/cold_backend_open.h"
#include "cold_itest.h"
#include "coldfiles.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "tmpdir.h"

struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);
uint16_t kvm_rt_admin_port(struct kvm_rt *rt);

#define OBJ_LEN   (32u << 10)
#define N_OBJ     192u   /* 6 MiB: 3x the 2 MiB of DRAM */
#define N_DRAINED 16u    /* puts after the drain */
#define TRIES_MAX 200u   /* bounded: puts tried after the drain */
#define N_FILL    96u    /* 3 MiB more than the first N_OBJ: more than the DRAM holds */
#define FILL_BASE 10000u /* their keys, apart from the first N_OBJ and the drained ones */
#define SETTLE_MS 20000u

static char tmpdir[64];
/* puts acknowledged (a refused write-through put may still be published in DRAM, without a
 * cold copy: its removal releases nothing on a device) */
static bool acked_put[N_OBJ + TRIES_MAX];
static kvmesh_t *kv;
static kvmesh_admin_t *adm;
static uint16_t port;
static const kvmesh_scope_t sc = {"mixed", NULL};

static void cleanup(void)
{
    tcold_cleanup(&kv, &adm, tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static void key(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "mixed-%05u", i);
}

static int put(uint32_t i, uint8_t *buf)
{
    char k[32];
    key(i, k, sizeof(k));
    tcold_fill_words(buf, OBJ_LEN, i);
    return kvmesh_put(kv, &sc, k, strlen(k), buf, OBJ_LEN, NULL);
}

/* One series of /metrics: name{device="dev"} or name{device="dev",result="res"}. */
static double metric(const char *name, unsigned dev, const char *res)
{
    char d[4];
    snprintf(d, sizeof(d), "%u", dev);
    double v = NAN;
    CHECK(cold_itest_metric2(port, name, "device", d, res ? "result" : NULL, res, &v) == 0 &&
          !isnan(v));
    return v;
}

/* Counters reach /metrics at the export after each 200 ms device view refresh: waits (bounded)
 * until cond holds. */
#define SETTLE(cond)                                                                               \
    do {                                                                                           \
        uint64_t s0_ = env_clock_mono_ms();                                                        \
        while (!(cond)) {                                                                          \
            CHECK(env_clock_mono_ms() - s0_ < SETTLE_MS);                                          \
            usleep(50 * 1000);                                                                     \
        }                                                                                          \
    } while (0)

/* The records of device 0 (LocalDir, root ends in /dev0) and device 1 (ExtentStore, /dev1). */
static void devices(kvmesh_admin_device_t *d0, kvmesh_admin_device_t *d1)
{
    CHECK(tcold_devices2(adm, d0, d1));
    CHECK(strcmp(d0->kind, "localdir") == 0 && strcmp(d1->kind, "extent") == 0);
}

/* The gauges of both devices equal their records (the gauges follow the view, which the 200 ms
 * tick refreshes: bounded wait). */
static void gauges_match(void)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        kvmesh_admin_device_t d0, d1;
        devices(&d0, &d1);
        bool ok = metric("kvmesh_cold_dev_used_bytes", 0, NULL) == (double)d0.used &&
                  metric("kvmesh_cold_dev_used_bytes", 1, NULL) == (double)d1.used &&
                  metric("kvmesh_cold_dev_reserved_bytes", 0, NULL) == (double)d0.reserved &&
                  metric("kvmesh_cold_dev_reserved_bytes", 1, NULL) == (double)d1.reserved &&
                  metric("kvmesh_cold_dev_capacity_bytes", 0, NULL) == (double)d0.capacity &&
                  metric("kvmesh_cold_dev_capacity_bytes", 1, NULL) == (double)d1.capacity &&
                  metric("kvmesh_cold_dev_health", 0, NULL) == 1 &&
                  metric("kvmesh_cold_dev_health", 1, NULL) == 1;
        if (ok)
            return;
        CHECK(env_clock_mono_ms() - t0 < SETTLE_MS);
        usleep(50 * 1000);
    }
}

static void open_all(const char *root0, const char *root1, const char *url, const char *dep)
{
    char extra[160];
    snprintf(extra, sizeof(extra), "extent:%s:64MiB", root1);
    const char *const cfg[][2] = {
        {"metadata_url", url},
        {"deployment", dep},
        {"admin_listen", "127.0.0.1:0"},
        {"memory_size", "2MiB"},
        {"segment_size", "1MiB"},
        {"max_object_size", "256KiB"},
        {"reclaim_grace_ms", "0"},
        {"replicas", "1"},
        {"request_timeout_ms", "3000"},
        {"cold_kind", "localdir"},
        {"cold_root", root0},
        {"cold_capacity", "64MiB"},
        {"cold_devices", extra},
        {"cold_segment_bytes", "1MiB"},
        {"cold_write_through", "true"},
        /* a reclaim deferred under load (KVMESH_EAGAIN) is rerun by reconciliation after this */
        {"cold_reconcile_after_ms", "500"},
        {NULL, NULL}};
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(tproc_config_setv(c, cfg) == 0);
    CHECK(kvmesh_open(&kv, c) == 0);
    kvmesh_config_free(c);
    port = kvm_rt_admin_port(kvmesh_runtime_of(kv));
    CHECK(tproc_admin_open(url, dep, &adm) == 0);
}

static void read_all(uint32_t n)
{
    CHECK(tcold_read_back_words(kv, &sc, n, OBJ_LEN, key));
}

/* After close: the backend reopened on root reports `used` live payload bytes. */
static void backend_used(cold_backend_kind_t kind, const char *root, uint64_t used)
{
    cold_backend_config_t bc = {
        .kind = kind, .root = root, .capacity_bytes = 64ull << 20, .segment_bytes = 1ull << 20};
    cold_backend_t be;
    cold_backend_err_t err;
    CHECK(cold_backend_open(&bc, &be, &err) == 0);
    cold_backend_stat_t st;
    int rc = be.ops->stat(be.be, &st);
    cold_backend_close(&be);
    printf("%s reopened: used %" PRIu64 " in %" PRIu64 " objects, %" PRIu64
           " file bytes; record used %" PRIu64 "\n",
           root, st.used_bytes, st.objects, st.file_bytes, used);
    CHECK(rc == 0 && st.used_bytes == used && st.objects * OBJ_LEN == used);
}

int main(void)
{
    uint64_t t0 = env_clock_mono_ms();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-mixed") == 0);
    char root0[128], root1[128], dep[64], url[96];
    snprintf(root0, sizeof(root0), "%s/dev0", tmpdir);
    snprintf(root1, sizeof(root1), "%s/dev1", tmpdir);
    CHECK(mkdir(root0, 0700) == 0 && mkdir(root1, 0700) == 0);
    snprintf(dep, sizeof(dep), "coldmixed%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    open_all(root0, root1, url, dep);
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);

    /* 1. offload onto both kinds */
    for (uint32_t i = 0; i < N_OBJ; i++) {
        CHECK(put(i, buf) == 0);
        acked_put[i] = true;
    }
    kvmesh_admin_device_t d0, d1;
    devices(&d0, &d1);
    size_t f0 = tcold_count_files(root0);
    printf("phase 1 (%" PRIu64 " ms): LocalDir used %" PRIu64 " (%zu files), ExtentStore used "
           "%" PRIu64 "\n",
           env_clock_mono_ms() - t0, d0.used, f0, d1.used);
    CHECK(d0.used > 0 && d1.used > 0 && d0.reserved == 0 && d1.reserved == 0);
    CHECK(d0.used == (uint64_t)f0 * OBJ_LEN);
    CHECK(d0.used + d1.used == (uint64_t)N_OBJ * OBJ_LEN);
    gauges_match();
    double off0 = (double)(d0.used / OBJ_LEN), off1 = (double)(d1.used / OBJ_LEN);
    SETTLE(metric("kvmesh_cold_dev_offloads_total", 0, "ok") == off0 &&
           metric("kvmesh_cold_dev_offloads_total", 1, "ok") == off1);
    printf("offloads by device: %.0f, %.0f\n", off0, off1);
    CHECK(metric("kvmesh_cold_dev_offloads_total", 0, "error") == 0 &&
          metric("kvmesh_cold_dev_offloads_total", 1, "error") == 0);
    CHECK(metric("kvmesh_cold_dev_used_bytes", 2, NULL) == 0); /* not configured */

    /* 2. last-hot eviction happened on both; restores from both. Which of the first N_OBJ are
     * still hot depends on the order in which placement used the devices (all of device 0's
     * objects may be among the last written); N_FILL more objects than the DRAM holds make
     * every one of them cold-only, so reading them back restores from both devices. */
    for (uint32_t i = 0; i < N_FILL; i++)
        CHECK(put(FILL_BASE + i, buf) == 0);
    devices(&d0, &d1);
    off0 = (double)(d0.used / OBJ_LEN);
    off1 = (double)(d1.used / OBJ_LEN);
    CHECK(off0 + off1 == N_OBJ + N_FILL && d0.reserved == 0 && d1.reserved == 0);
    SETTLE(metric("kvmesh_cold_dev_offloads_total", 0, "ok") == off0 &&
           metric("kvmesh_cold_dev_offloads_total", 1, "ok") == off1);
    read_all(N_OBJ);
    SETTLE(metric("kvmesh_cold_dev_restores_total", 0, "ok") > 0 &&
           metric("kvmesh_cold_dev_restores_total", 1, "ok") > 0);
    double r0 = metric("kvmesh_cold_dev_restores_total", 0, "ok");
    double r1 = metric("kvmesh_cold_dev_restores_total", 1, "ok");
    double ev = 0;
    CHECK(cold_itest_metric(port, "kvmesh_cold_evictions_total", NULL, NULL, &ev) == 0);
    printf("phase 2 (%" PRIu64 " ms): restores by device %.0f, %.0f; last-hot evictions %.0f\n",
           env_clock_mono_ms() - t0, r0, r1, ev);
    CHECK(r0 > 0 && r1 > 0 && ev >= r0 + r1 - 0.5);
    CHECK(metric("kvmesh_cold_dev_restores_total", 0, "error") == 0 &&
          metric("kvmesh_cold_dev_restores_total", 1, "error") == 0);
    CHECK(metric("kvmesh_cold_dev_errors_total", 0, NULL) == 0 &&
          metric("kvmesh_cold_dev_errors_total", 1, NULL) == 0);

    /* 3. drain device 0: only device 1's series move */
    bool changed = false;
    CHECK(kvmesh_admin_device_lifecycle(adm, d0.id, "drain", &d0, &changed) == 0 && changed);
    uint32_t acked = 0, n_put = N_OBJ;
    for (uint32_t t = 0; t < TRIES_MAX && acked < N_DRAINED; t++, n_put++) {
        acked_put[n_put] = put(n_put, buf) == 0;
        acked += acked_put[n_put];
    }
    CHECK(acked == N_DRAINED);
    kvmesh_admin_device_t e0, e1;
    devices(&e0, &e1);
    CHECK(e0.used == d0.used && e1.used == d1.used + (uint64_t)N_DRAINED * OBJ_LEN);
    gauges_match();
    SETTLE(metric("kvmesh_cold_dev_offloads_total", 1, "ok") == off1 + N_DRAINED);
    CHECK(metric("kvmesh_cold_dev_offloads_total", 0, "ok") == off0);
    printf("phase 3 (%" PRIu64 " ms): after the drain device 1 took %u offloads, device 0 none\n",
           env_clock_mono_ms() - t0, N_DRAINED);

    /* 4. reclaim on both: remove the even-numbered objects */
    uint64_t live = (uint64_t)e0.used + e1.used;
    for (uint32_t i = 0; i < n_put; i += 2) {
        char k[32];
        key(i, k, sizeof(k));
        int rc = kvmesh_remove(kv, &sc, k, strlen(k));
        CHECK(rc == 0 || (rc == KVMESH_ENOENT && !acked_put[i]));
        if (acked_put[i])
            live -= OBJ_LEN;
    }
    uint64_t t4 = env_clock_mono_ms();
    for (;;) {
        devices(&e0, &e1);
        if (e0.used + e1.used == live && e0.reserved == 0 && e1.reserved == 0)
            break;
        if (env_clock_mono_ms() - t4 >= SETTLE_MS)
            printf("not settled: used %" PRIu64 " + %" PRIu64 " (reserved %" PRIu64 " + %" PRIu64
                   "), want %" PRIu64 "\n",
                   e0.used, e1.used, e0.reserved, e1.reserved, live);
        CHECK(env_clock_mono_ms() - t4 < SETTLE_MS);
        usleep(50 * 1000);
    }
    size_t g0 = tcold_count_files(root0);
    printf("phase 4 (%" PRIu64 " ms): LocalDir used %" PRIu64 " (%zu files), ExtentStore used "
           "%" PRIu64 "\n",
           env_clock_mono_ms() - t0, e0.used, g0, e1.used);
    CHECK(e0.used < d0.used && e1.used < d1.used + (uint64_t)N_DRAINED * OBJ_LEN);
    CHECK(e0.used == (uint64_t)g0 * OBJ_LEN);
    gauges_match();

    /* 5. each backend's own accounting equals its record */
    kvmesh_close(kv);
    kv = NULL;
    backend_used(COLD_BACKEND_LOCALDIR, root0, e0.used);
    backend_used(COLD_BACKEND_EXTENT, root1, e1.used);
    free(buf);
    cleanup();
    curl_global_cleanup();
    printf("cold_mixed: ok (%" PRIu64 " ms)\n", env_clock_mono_ms() - t0);
    return 0;
}
