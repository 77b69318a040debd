/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo_cold.c — `kvmesh demo --cold`: one runtime with a small DRAM budget and a cold device in
 * a fresh temporary directory (docs/cold.md "Store wiring"), given a working set of 4x its DRAM.
 * Every object is written (a put waiting for eviction retries), then every object is read back
 * and checked byte for byte; objects whose last hot copy was evicted are restored from the
 * device (verified by checksum). The summary counts, from the routes the runtime publishes:
 * offloaded objects (a materialized cold copy), cold-only objects (no hot replica left), restores
 * (cold-only objects read back correct), and lost = acknowledged - verified. The directory is
 * made under --dir, else $TMPDIR (when set and not empty), else /tmp, and removed at the end,
 * after a failure too, unless --keep is given.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define DCOLD_PUT_TRIES   400 /* x DCOLD_SLEEP_MS: a put waits for eviction behind offloads */
#define DCOLD_SLEEP_MS    20
#define DCOLD_OBJECTS_MAX 100000

/* nftw callback: removes each entry of the device directory, children first (links not
 * followed). */
static int dcold_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

static void dcold_fill(uint8_t *b, uint64_t len, uint64_t i, uint64_t seed)
{
    cli_fill(b, len, seed * 0x9e3779b97f4a7c15ull + i + 1);
}

int cmd_demo_cold(int argc, char **argv)
{
    const char *kind = "localdir", *dir = NULL;
    uint64_t memory = 16ull << 20, size = 256ull << 10, objects = 0, seed = 0;
    bool cold = false, keep = false, help = false;
    struct cli_sets sets = {0};
    const cli_opt_t opts[] = {
        {"cold", NULL, CLI_FLAG, &cold, "the cold tier demo (this mode)"},
        {"cold-kind", "KIND", CLI_STR, &kind, "cold device backend: localdir (default) or extent"},
        {"dir", "PATH", CLI_STR, &dir,
         "parent of the temporary device directory (default: $TMPDIR or /tmp)"},
        {"memory-size", "SIZE", CLI_SIZE, &memory, "DRAM of the runtime (default 16MiB)"},
        {"object-size", "SIZE", CLI_SIZE, &size, "bytes per object (default 256KiB)"},
        {"objects", "N", CLI_U64, &objects, "objects written (default: 4x DRAM worth)"},
        {"seed", "N", CLI_U64, &seed, "content seed (default: from the clock)"},
        {"keep", NULL, CLI_FLAG, &keep, "keep the device directory"},
        {"set", "FIELD=VALUE", CLI_SET, &sets, "set any configuration field of the runtime"},
        {"help", NULL, CLI_FLAG, &help, "show this help"},
    };
    const size_t nopts = sizeof(opts) / sizeof(opts[0]);
    const char *pos[1];
    size_t npos;
    int rc = cli_parse("demo", opts, nopts, argc, argv, pos, 0, &npos);
    if (rc)
        return rc;
    if (help) {
        cli_usage(stdout, "demo --cold", "[options]",
                  "Starts one runtime with a small DRAM budget and a cold device in a temporary "
                  "directory,\nwrites a working set of 4x its DRAM, reads every object back and "
                  "checks it. The summary\nshows offloaded objects, cold-only objects, restores "
                  "and lost: 0 (the exit status is\nnon-zero when anything was lost or read back "
                  "wrong).",
                  opts, nopts);
        return 0;
    }
    if (strcmp(kind, "localdir") != 0 && strcmp(kind, "extent") != 0) {
        fprintf(stderr, "kvmesh demo: --cold-kind '%s' is not allowed; allowed localdir|extent\n",
                kind);
        return CLI_EXIT_USAGE;
    }
    if (size < 1 || size > memory / 4) {
        fprintf(stderr, "kvmesh demo: --object-size must be 1..a quarter of --memory-size\n");
        return CLI_EXIT_USAGE;
    }
    if (!objects)
        objects = 4 * memory / size;
    if (objects > DCOLD_OBJECTS_MAX) {
        fprintf(stderr, "kvmesh demo: --objects %" PRIu64 " is out of range; allowed 1..%d\n",
                objects, DCOLD_OBJECTS_MAX);
        return CLI_EXIT_USAGE;
    }
    if (!seed)
        seed = kvmesh_tools_now_ns() | 1;
    const char *envtmp = getenv("TMPDIR");
    const char *tmp = dir ? dir : envtmp && *envtmp ? envtmp : "/tmp";
    char root[512];
    snprintf(root, sizeof(root), "%s/kvmesh-demo-cold-XXXXXX", tmp);
    if (!mkdtemp(root)) {
        fprintf(stderr, "kvmesh demo: cannot create a directory under %s; pass --dir\n", tmp);
        return CLI_EXIT_FAIL;
    }
    char sz[32], msz[32], osz[32], dep[64], url[96];
    kvmesh_tools_format_size(memory, msz, sizeof(msz));
    kvmesh_tools_format_size(size, osz, sizeof(osz));
    kvmesh_tools_format_size(objects * size * 2 + (64ull << 20), sz, sizeof(sz));
    snprintf(dep, sizeof(dep), "demo-cold-%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    kvmesh_config_t *cfg = kvmesh_config_new();
    kvmesh_t *kv = NULL;
    uint8_t *wbuf = malloc(size), *rbuf = malloc(size);
    if (!cfg || !wbuf || !rbuf) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    const char *kvs[][2] = {
        {"metadata_url", url},    {"deployment", dep},        {"transport", "tcp"},
        {"memory_size", msz},     {"segment_size", msz},      {"replicas", "1"},
        {"max_object_size", osz}, {"reclaim_grace_ms", "50"}, {"request_timeout_ms", "10000"},
        {"cold_kind", kind},      {"cold_root", root},        {"cold_capacity", sz}};
    for (size_t i = 0; i < sizeof(kvs) / sizeof(kvs[0]); i++)
        if ((rc = kvmesh_config_set(cfg, kvs[i][0], kvs[i][1])) != 0) {
            cli_report("demo", kvs[i][0], rc);
            rc = CLI_EXIT_FAIL;
            goto out;
        }
    for (size_t i = 0; i < sets.n; i++)
        if (cli_apply_set(cfg, sets.items[i], "demo") != 0) {
            rc = CLI_EXIT_USAGE;
            goto out;
        }
    if ((rc = cli_open_runtime(&kv, cfg, "demo")) != 0) {
        cli_report("demo", "open", rc);
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    printf("cold demo: 1 runtime, DRAM %s, %s device in %s, %" PRIu64 " objects of %s (%.1fx "
           "DRAM)\n",
           msz, kind, root, objects, osz, (double)(objects * size) / (double)memory);
    kvmesh_scope_t sc = {"demo", NULL};
    uint64_t acked = 0, verified = 0, wrong = 0, offloaded = 0, cold_only = 0, restores = 0;
    uint64_t t0 = kvmesh_tools_now_ns();
    for (uint64_t i = 0; i < objects; i++) {
        char key[48];
        snprintf(key, sizeof(key), "demo/cold/b%06" PRIu64, i);
        dcold_fill(wbuf, size, i, seed);
        int prc = -1;
        for (int t = 0; t < DCOLD_PUT_TRIES && prc != 0; t++)
            if ((prc = kvmesh_put(kv, &sc, key, strlen(key), wbuf, size, NULL)) != 0)
                usleep(DCOLD_SLEEP_MS * 1000);
        if (prc == 0)
            acked++;
        else
            cli_report("demo", key, prc);
    }
    double wsec = (double)(kvmesh_tools_now_ns() - t0) / 1e9;
    for (uint64_t i = 0; i < objects; i++) {
        char key[48];
        snprintf(key, sizeof(key), "demo/cold/b%06" PRIu64, i);
        kvmesh_route_info_t ri;
        bool co = false;
        if (kvmesh_route_query(kv, &sc, key, strlen(key), &ri) == 0) {
            offloaded += ri.cold_backed;
            co = ri.cold_backed && ri.n_replicas == 0;
            cold_only += co;
        }
        size_t got = 0;
        int grc = kvmesh_get_into(kv, &sc, key, strlen(key), rbuf, size, &got);
        if (grc != 0) {
            cli_report("demo", key, grc);
            continue;
        }
        dcold_fill(wbuf, size, i, seed);
        if (got != size || memcmp(rbuf, wbuf, size) != 0) {
            fprintf(stderr, "demo: WRONG DATA for %s\n", key);
            wrong++;
            continue;
        }
        verified++;
        restores += co;
    }
    double sec = (double)(kvmesh_tools_now_ns() - t0) / 1e9;
    printf("written in %.1f s, read back in %.1f s\n", wsec, sec - wsec);
    printf("offloads: %" PRIu64 ", cold-only objects: %" PRIu64 ", restores: %" PRIu64
           ", wrong: %" PRIu64 "\n",
           offloaded, cold_only, restores, wrong);
    uint64_t lost = acked - verified;
    printf("acknowledged: %" PRIu64 ", verified: %" PRIu64 ", lost: %" PRIu64 "\n", acked, verified,
           lost);
    rc = (lost == 0 && wrong == 0 && acked == objects && cold_only > 0) ? 0 : CLI_EXIT_FAIL;
out:
    if (kv)
        kvmesh_close(kv);
    kvmesh_config_free(cfg);
    free(wbuf);
    free(rbuf);
    if (!keep && nftw(root, dcold_rm, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "kvmesh demo: could not remove %s: %s\n", root, strerror(errno));
    return rc;
}
