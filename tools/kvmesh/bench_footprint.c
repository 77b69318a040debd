// SPDX-License-Identifier: Apache-2.0
/*
 * bench_footprint.c — `kvmesh bench --footprint N`: memory per object. Stores N small objects
 * (default 1,000,000; --footprint-value bytes each, keys "fp%010u") in ONE storage runtime
 * (also the only route authority, so routes, owner records and payload all live in this
 * process) and reports the runtime's bytes per object beyond the payload, measured three ways
 * around the puts:
 *   - RSS (VmRSS of this process: heap and the segment pages written),
 *   - the allocator's bytes in use over every arena (malloc_info),
 *   - the store's own accounting: the segment bytes its allocator handed out (used_bytes: the
 *     payload rounded to its slot class) and the routes held by its authorities;
 * next to redis-server's `used_memory` per key for the same keys and values in the same run
 * (started like the benchmark's Redis peer), and prints the ratio. Not run by CI (it takes
 * time and memory); docs/performance.md "Memory per object" has a run.
 *
 * Ownership: everything it opens it closes; the redis-server is stopped by pid.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "cli.h"
#include "peers.h"

#define FP_BATCH 128

int bench_footprint(uint64_t count, uint64_t vsize, bool no_peers, const struct cli_sets *sets);

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/* Bytes the allocator has in use over every arena: the totals at the end of malloc_info's
 * report (system current minus the free fast and rest chunks, plus mmapped chunks). */
static uint64_t heap_in_use(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return 0;
    malloc_info(0, f);
    fclose(f);
    uint64_t fast = 0, rest = 0, mmap = 0, cur = 0;
    const char *p = buf, *q;
    /* the per-arena blocks come first; the process totals are the last of each kind */
    while ((q = strstr(p, "<total type=\"fast\""))) {
        sscanf(q, "<total type=\"fast\" count=\"%*u\" size=\"%" SCNu64 "\"", &fast);
        p = q + 1;
    }
    p = buf;
    while ((q = strstr(p, "<total type=\"rest\""))) {
        sscanf(q, "<total type=\"rest\" count=\"%*u\" size=\"%" SCNu64 "\"", &rest);
        p = q + 1;
    }
    p = buf;
    while ((q = strstr(p, "<total type=\"mmap\""))) {
        sscanf(q, "<total type=\"mmap\" count=\"%*u\" size=\"%" SCNu64 "\"", &mmap);
        p = q + 1;
    }
    p = buf;
    while ((q = strstr(p, "<system type=\"current\""))) {
        sscanf(q, "<system type=\"current\" size=\"%" SCNu64 "\"", &cur);
        p = q + 1;
    }
    free(buf);
    return cur > fast + rest ? cur - fast - rest + mmap : mmap;
}

static uint64_t used_bytes(kvmesh_t *kv)
{
    char id[KVMESH_ID_HEX_LEN + 1];
    uint64_t epoch;
    kvmesh_member_info_t m[8];
    size_t n = 0;
    if (kvmesh_self(kv, id, &epoch) || kvmesh_members(kv, m, 8, &n))
        return 0;
    for (size_t i = 0; i < n && i < 8; i++)
        if (strcmp(m[i].id, id) == 0)
            return m[i].used_bytes;
    return 0;
}

static void key_of(char *buf, size_t cap, uint64_t i)
{
    snprintf(buf, cap, "fp%010" PRIu64, i);
}

/* Redis: used_memory per key for the same keys and values. 0 when it could not run. */
static int redis_footprint(uint64_t count, const uint8_t *val, uint64_t vsize, double *per_key,
                           uint64_t *delta)
{
    peer_proc_t *pp = NULL;
    peer_client_t *pc = NULL;
    char err[256];
    int rc = -1;
    if (peer_start(PEER_REDIS, &pp, err, sizeof(err)) || peer_connect(pp, &pc, err, sizeof(err))) {
        fprintf(stderr, "kvmesh bench --footprint: redis-server: %s (use --no-peers)\n", err);
        goto out;
    }
    uint64_t before = 0, after = 0;
    if (peer_flush(pc) || peer_redis_info_u64(pc, "memory", "used_memory", &before))
        goto fail;
    static char keys[FP_BATCH][24];
    peer_item_t it[FP_BATCH];
    for (uint64_t i = 0; i < count; i += FP_BATCH) {
        size_t n = (size_t)(count - i < FP_BATCH ? count - i : FP_BATCH);
        for (size_t j = 0; j < n; j++) {
            key_of(keys[j], sizeof(keys[j]), i + j);
            it[j] = (peer_item_t){
                .key = keys[j], .key_len = strlen(keys[j]), .buf = (void *)val, .len = vsize};
        }
        if (peer_batch_put(pc, it, n) != 0)
            goto fail;
    }
    if (peer_redis_info_u64(pc, "memory", "used_memory", &after))
        goto fail;
    *delta = after > before ? after - before : 0;
    *per_key = (double)*delta / (double)count;
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "kvmesh bench --footprint: redis: %s\n", peer_error(pc));
out:
    peer_close(pc);
    peer_stop(pp);
    return rc;
}

int bench_footprint(uint64_t count, uint64_t vsize, bool no_peers, const struct cli_sets *sets)
{
    uint8_t *val = malloc(vsize);
    if (!val)
        return CLI_EXIT_FAIL;
    for (uint64_t i = 0; i < vsize; i++)
        val[i] = (uint8_t)(i * 131 + 7);
    printf("kvmesh bench --footprint: %" PRIu64 " objects of %" PRIu64
           " bytes (keys of 12 bytes) in one storage runtime%s\n",
           count, vsize, no_peers ? "" : ", vs redis-server used_memory");
    fflush(stdout);
    double redis_per_key = 0;
    uint64_t redis_delta = 0;
    bool have_redis = false;
    if (!no_peers) {
        if (redis_footprint(count, val, vsize, &redis_per_key, &redis_delta) != 0) {
            free(val);
            return CLI_EXIT_FAIL;
        }
        have_redis = true;
    }
    /* one storage runtime with room for every slot (64-byte aligned classes) and headroom */
    uint64_t slot = (vsize + 63) / 64 * 64;
    uint64_t mem = count * slot * 2 + (64ull << 20);
    mem = (mem + (1ull << 20) - 1) & ~((1ull << 20) - 1);
    char url[96], num[32];
    snprintf(url, sizeof(url), "memory://kvmesh-footprint-%ld", (long)getpid());
    kvmesh_config_t *cfg = kvmesh_config_new();
    kvmesh_t *kv = NULL;
    int rc = CLI_EXIT_FAIL;
    snprintf(num, sizeof(num), "%" PRIu64, mem);
    if (!cfg || kvmesh_config_set(cfg, "metadata_url", url) ||
        kvmesh_config_set(cfg, "deployment", "footprint") ||
        kvmesh_config_set(cfg, "memory_size", num) || kvmesh_config_set(cfg, "segment_size", num) ||
        kvmesh_config_set(cfg, "request_timeout_ms", "30000")) {
        fprintf(stderr, "kvmesh bench --footprint: %s\n", kvmesh_last_error());
        goto out;
    }
    for (size_t i = 0; i < sets->n; i++)
        if (cli_apply_set(cfg, sets->items[i], "bench") != 0)
            goto out;
    if (cli_open_runtime(&kv, cfg, "bench") != 0)
        goto out;
    kvmesh_scope_t scope = {.tenant = "bench"};
    /* warm up (first-use allocations: hint table, shard tables, views) with other keys */
    {
        kvmesh_batch_item_t it[FP_BATCH];
        char keys[FP_BATCH][24];
        for (size_t j = 0; j < FP_BATCH; j++) {
            snprintf(keys[j], sizeof(keys[j]), "warm%zu", j);
            it[j] = (kvmesh_batch_item_t){
                .key = keys[j], .key_len = strlen(keys[j]), .buf = val, .len = vsize};
        }
        kvmesh_batch_put(kv, &scope, it, FP_BATCH, NULL);
    }
    uint64_t rss0 = rss_bytes(), heap0 = heap_in_use(), used0 = used_bytes(kv);
    uint64_t t0 = kvmesh_tools_now_ns(), failed = 0;
    for (uint64_t i = 0; i < count; i += FP_BATCH) {
        size_t n = (size_t)(count - i < FP_BATCH ? count - i : FP_BATCH);
        kvmesh_batch_item_t it[FP_BATCH];
        char keys[FP_BATCH][24];
        for (size_t j = 0; j < n; j++) {
            key_of(keys[j], sizeof(keys[j]), i + j);
            it[j] = (kvmesh_batch_item_t){
                .key = keys[j], .key_len = strlen(keys[j]), .buf = val, .len = vsize};
        }
        kvmesh_batch_put(kv, &scope, it, n, NULL);
        for (size_t j = 0; j < n; j++)
            failed += it[j].rc != 0;
    }
    double secs = (double)(kvmesh_tools_now_ns() - t0) / 1e9;
    uint64_t rss1 = rss_bytes(), heap1 = heap_in_use(), used1 = used_bytes(kv), routes1 = 0;
    /* the route counts are refreshed by the authorities' housekeeping tick: wait (bounded) */
    for (int i = 0; i < 100 && routes1 < count + FP_BATCH; i++) {
        kvmesh_tools_route_footprint_t fp;
        if (kvmesh_tools_route_footprint(kv, &fp) == 0)
            routes1 = fp.routes;
        if (routes1 < count + FP_BATCH)
            usleep(20 * 1000);
    }
    if (failed) {
        fprintf(stderr, "kvmesh bench --footprint: %" PRIu64 " puts failed (last: %s)\n", failed,
                kvmesh_last_error());
        goto out;
    }
    double n = (double)count, v = (double)vsize;
    double rss_per = (double)(rss1 - rss0) / n, heap_per = (double)(heap1 - heap0) / n;
    double seg_per = (double)(used1 - used0) / n;
    printf("stored %" PRIu64 " objects in %.1f s; routes held by this runtime's authorities: "
           "%" PRIu64 "\n",
           count, secs, routes1);
    printf("%-44s %12s %12s\n", "per object (bytes)", "total", "beyond payload");
    printf("%-44s %12.1f %12.1f\n", "kvmesh RSS", rss_per, rss_per - v);
    printf("%-44s %12.1f %12s\n", "  of it: segment slots (store used_bytes)", seg_per, "");
    printf("%-44s %12.1f %12.1f\n", "    slot rounding beyond the payload", seg_per - v,
           seg_per - v);
    printf("%-44s %12.1f %12.1f\n", "  of it: heap in use (malloc_info, all arenas)", heap_per,
           heap_per);
    kvmesh_tools_route_footprint_t fp;
    (void)kvmesh_tools_route_footprint(kv, &fp);
    /* the route tables' own accounting (entry records of their pools, the pools' spare bytes
     * included; index nodes), over the routes they hold */
    double nr = routes1 ? (double)routes1 : 1.0;
    double ent = (double)fp.entry_bytes / nr, pk = (double)fp.packed_bytes / nr;
    double idb = (double)fp.ident_bytes / nr, oth = (double)fp.other_bytes / nr;
    printf("%-44s %12.1f %12.1f\n", "    route tables (entries + indexes)", ent + oth, ent + oth);
    printf("%-44s %12.1f %12s\n", "      entry records (pools)", ent, "");
    printf("%-44s %12.1f %12s\n", "        of it: packed route", pk, "");
    printf("%-44s %12.1f %12s\n", "        of it: identity encoding", idb, "");
    printf("%-44s %12.1f %12s\n", "        of it: header, rounding, pool spare", ent - pk - idb,
           "");
    printf("%-44s %12.1f %12s\n", "      ident/expiry indexes, interning sets", oth, "");
    printf("%-44s %12.1f %12.1f\n", "    store side (heap - route tables)", heap_per - ent - oth,
           heap_per - ent - oth);
    printf("%-44s %12.1f %12.1f\n", "  of it: the rest (RSS - slots - heap)",
           rss_per - seg_per - heap_per, rss_per - seg_per - heap_per);
    printf("(a route view unpacks into a kvm_route_t of %zu bytes on demand; not per entry)\n",
           fp.route_size);
    printf("route hints: a fixed table of %u entries (allocated at first use, not per object)\n",
           fp.hint_entries);
    if (have_redis) {
        printf("%-44s %12.1f %12.1f\n", "redis-server used_memory per key", redis_per_key,
               redis_per_key - v);
        printf("ratio kvmesh RSS / redis used_memory per object: total %.2fx, beyond the "
               "payload %.2fx (goal <= 1.5x)\n",
               rss_per / redis_per_key,
               redis_per_key > v ? (rss_per - v) / (redis_per_key - v) : 0.0);
    }
    rc = 0;
out:
    if (kv)
        kvmesh_close(kv);
    kvmesh_config_free(cfg);
    free(val);
    return rc;
}
