// SPDX-License-Identifier: Apache-2.0
/*
 * cold_evict_mode.c — the eviction-triggered offload mode in a real runtime (docs/cold.md
 * "Offload modes"): cold_offload_mode = evict, 4 MiB of DRAM, the tcp transport, in-memory
 * metadata, a LocalDir device in a temporary directory. Shows:
 *   - writes below the eviction watermark are not offloaded: no offload counted, no route with a
 *     cold backing, no object file on the device, the device's used + reserved bytes 0;
 *   - a working set of 2.5x DRAM then makes eviction claim victims: each is materialized on the
 *     device and only then evicted, so the offload count equals the count of last-hot evictions
 *     to cold, equals the routes with a cold copy, equals the device's object files, and every
 *     cold-only object has exactly one;
 *   - every object reads back with its bytes (cold-only ones restored from the device);
 *   - re-promotion: once DRAM has room again (the hot objects removed), a get of a cold-only
 *     object restores it and puts a hot replica back next to its cold copy; the next get is
 *     served from DRAM (the restore counter does not move).
 * Every wait is bounded; the directory is removed at the end (also on failure).
 */
#include <curl/curl.h>
#include <dirent.h>
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

#define NOBJ      160 /* 10 MiB = 2.5x DRAM */
#define NQUIET    24  /* 1.5 MiB: below evict_high_watermark (0.9 of 4 MiB) */
#define OBJ_LEN   (64u << 10)
#define DRAM      "4MiB"
#define PUT_TRIES 400

static char tmpdir[64];
static kvmesh_t *kv;
static const kvmesh_scope_t sc = {"tenant-a", NULL};

static void cleanup(void)
{
    if (kv) {
        kvmesh_close(kv);
        kv = NULL;
    }
    tcold_remove_dir(tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static void fill(uint8_t *buf, uint32_t i)
{
    cold_itest_fill(buf, OBJ_LEN, 0x9e3779b97f4a7c15ull * (i + 1));
}

static void key_of(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "evict-obj-%04u", i);
}

static double metric(const char *name, const char *l, const char *v)
{
    double x = 0;
    CHECK(cold_itest_metric(kvm_rt_admin_port(kvmesh_runtime_of(kv)), name, l, v, &x) == 0);
    return x;
}

static void routes(uint32_t n, size_t *backed, size_t *cold_only)
{
    *backed = *cold_only = 0;
    for (uint32_t i = 0; i < n; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(kv, &sc, k, strlen(k), &ri) == 0);
        *backed += ri.cold_backed;
        *cold_only += ri.cold_backed && ri.n_replicas == 0;
    }
}

static void put_all(uint32_t from, uint32_t to, uint8_t *buf)
{
    for (uint32_t i = from; i < to; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        fill(buf, i);
        int rc = -1;
        for (int t = 0; t < PUT_TRIES && rc != 0; t++) {
            rc = kvmesh_put(kv, &sc, k, strlen(k), buf, OBJ_LEN, NULL);
            if (rc)
                usleep(20000); /* eviction waits for the victims' offloads */
        }
        CHECK(rc == 0);
    }
}

int main(void)
{
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-evict") == 0);
    char root[128];
    snprintf(root, sizeof(root), "%s/dev", tmpdir);
    CHECK(mkdir(root, 0700) == 0);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    char dep[64], url[96];
    snprintf(dep, sizeof(dep), "coldevict%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", dep) == 0);
    CHECK(kvmesh_config_set(c, "transport", "tcp") == 0);
    CHECK(kvmesh_config_set(c, "admin_listen", "127.0.0.1:0") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", DRAM) == 0);
    CHECK(kvmesh_config_set(c, "segment_size", DRAM) == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "reclaim_grace_ms", "50") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "10000") == 0);
    CHECK(kvmesh_config_set(c, "cold_kind", "localdir") == 0);
    CHECK(kvmesh_config_set(c, "cold_root", root) == 0);
    CHECK(kvmesh_config_set(c, "cold_capacity", "64MiB") == 0);
    CHECK(kvmesh_config_set(c, "cold_offload_mode", "evict") == 0);
    CHECK(kvmesh_open(&kv, c) == 0);
    kvmesh_config_free(c);
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);

    /* 1. below the eviction watermark nothing is offloaded (waited past a few worker ticks) */
    put_all(0, NQUIET, buf);
    usleep(600000);
    size_t backed, cold_only;
    routes(NQUIET, &backed, &cold_only);
    double off0 = metric("kvmesh_cold_offloads_total", "result", "ok");
    double used0 = metric("kvmesh_segment_used_bytes", "tier", "cold");
    size_t files0 = tcold_count_files(root);
    printf("after %u writes (%.1f MiB of %s DRAM): offloads %.0f, routes with a cold copy %zu, "
           "device files %zu, device used %.0f\n",
           NQUIET, NQUIET * OBJ_LEN / 1048576.0, DRAM, off0, backed, files0, used0);
    CHECK(off0 == 0 && backed == 0 && files0 == 0 && used0 == 0);

    /* 2. 2.5x DRAM: eviction claims victims, materializes them, then evicts them */
    put_all(NQUIET, NOBJ, buf);
    double off = -1, ev = -2;
    size_t files = 0;
    for (int t = 0; t < 100; t++) { /* the counters are exported every 200 ms */
        off = metric("kvmesh_cold_offloads_total", "result", "ok");
        ev = metric("kvmesh_cold_evictions_total", NULL, NULL);
        routes(NOBJ, &backed, &cold_only);
        files = tcold_count_files(root);
        if (off > 0 && off == ev && (double)backed == off && (double)cold_only == off &&
            files == backed)
            break;
        usleep(100000);
    }
    double failed = metric("kvmesh_cold_offloads_total", "result", "error");
    printf("after %u writes: offloads %.0f (failed %.0f), last-hot evictions to cold %.0f, routes "
           "with a cold copy %zu (cold-only %zu), device files %zu\n",
           NOBJ, off, failed, ev, backed, cold_only, files);
    CHECK(off > 0 && off == ev && (double)backed == off && (double)cold_only == off);
    CHECK(files == backed && failed == 0);
    /* the scheduler's counters in /metrics: every offload was an urgent (eviction-triggered)
     * job; no rate and no watermark gate configured; the queue drained */
    double urgent = -1, depth = -1;
    for (int t = 0; t < 50; t++) { /* (exported every 200 ms) */
        urgent = metric("kvmesh_cold_offload_urgent_jobs_total", NULL, NULL);
        depth = metric("kvmesh_cold_offload_queue_depth", NULL, NULL);
        if (urgent >= off && depth == 0)
            break;
        usleep(100000);
    }
    double waits = metric("kvmesh_cold_offload_rate_waits_total", NULL, NULL);
    double gates = metric("kvmesh_cold_offload_gate_changes_total", NULL, NULL);
    double released = metric("kvmesh_cold_offloads_released_total", NULL, NULL);
    printf("scheduler: urgent jobs %.0f, released %.0f, rate waits %.0f, gate changes %.0f, "
           "queue depth %.0f\n",
           urgent, released, waits, gates, depth);
    CHECK(urgent >= off && urgent > 0 && depth == 0 && waits == 0 && gates == 0);
    CHECK(released >= 0);

    /* 3. every object reads back with its bytes */
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        void *out = NULL;
        size_t len = 0;
        int rc = kvmesh_get(kv, &sc, k, strlen(k), &out, &len);
        if (rc)
            fprintf(stderr, "get %s: %s: %s\n", k, kvmesh_errname(rc), kvmesh_last_error());
        CHECK(rc == 0);
        fill(buf, i);
        CHECK(len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
        kvmesh_free(out);
    }
    double rs = metric("kvmesh_cold_restores_total", "result", "ok");
    printf("all %u objects read back; restores from cold %.0f\n", NOBJ, rs);
    CHECK(rs >= (double)cold_only);

    /* 4. re-promotion: with DRAM freed (every object that is not cold-only removed), a restore
     * puts a hot replica back (best effort, only while DRAM has room): the route lists it next
     * to its cold copy, and the next get is served from DRAM (no further restore) */
    uint32_t removed = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(kv, &sc, k, strlen(k), &ri) == 0);
        if (ri.n_replicas > 0) {
            CHECK(kvmesh_remove(kv, &sc, k, strlen(k)) == 0);
            removed++;
        }
    }
    usleep(300000); /* reclaim_grace_ms = 50: the removed slots' bytes are free again */
    size_t promoted = 0, tried = 0;
    for (uint32_t i = 0; i < NOBJ && tried < 8; i++) {
        char k[32];
        key_of(i, k, sizeof(k));
        kvmesh_route_info_t ri;
        int qrc = kvmesh_route_query(kv, &sc, k, strlen(k), &ri);
        if (qrc == KVMESH_ENOENT || ri.n_replicas > 0)
            continue; /* removed above */
        tried++;
        void *out = NULL;
        size_t len = 0;
        CHECK(kvmesh_get(kv, &sc, k, strlen(k), &out, &len) == 0); /* restore + promotion */
        kvmesh_free(out);
        for (int t = 0; t < 50; t++) { /* the promotion runs after the read returned */
            CHECK(kvmesh_route_query(kv, &sc, k, strlen(k), &ri) == 0);
            if (ri.n_replicas == 1)
                break;
            usleep(20000);
        }
        CHECK(ri.n_replicas == 1 && ri.cold_backed);
        double before_get = metric("kvmesh_cold_restores_total", "result", "ok");
        fill(buf, i);
        out = NULL;
        CHECK(kvmesh_get(kv, &sc, k, strlen(k), &out, &len) == 0);
        CHECK(len == OBJ_LEN && memcmp(out, buf, OBJ_LEN) == 0);
        kvmesh_free(out);
        usleep(250000); /* the restore counter is exported every 200 ms */
        CHECK(metric("kvmesh_cold_restores_total", "result", "ok") == before_get);
        promoted++;
    }
    printf("removed %u hot objects; %zu of %zu cold-only objects re-promoted by their restore "
           "(hot replica + cold copy), then read from DRAM\n",
           removed, promoted, tried);
    CHECK(tried == 8 && promoted == 8);
    free(buf);
    cleanup();
    curl_global_cleanup();
    printf("cold_evict_mode: ok\n");
    return 0;
}
