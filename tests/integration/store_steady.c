/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_steady — metadata calls on the hot path (spec "Hot-path invariant").
 *
 *   itest_store_steady embedded_wrh   3 runtimes, no quota: the metadata calls made while 10,000
 *                                     puts and gets run must be background traffic only
 *                                     (keepalives, snapshot refreshes): at most the idle rate
 *                                     measured over the same duration plus a small constant,
 *                                     and independent of the number of operations;
 *   itest_store_steady metadata_only  the same workload with routes in metadata: the count is
 *                                     proportional to the operations (>= 1 call per op), which
 *                                     is what that mode is for; the test asserts it honestly.
 *
 * The counts come from meta_get_stats() of every runtime's metadata handle.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "store/data.h"
#include "tcheck.h"
#include "trt.h"

#define NRT 3
#define OPS 10000

#define CHECK(c) TCHECK_FATAL(c)

static kvmesh_t *rts[NRT];

static uint64_t meta_calls(void)
{
    uint64_t sum = 0;
    for (int i = 0; i < NRT; i++) {
        struct kvm_rt_stats st;
        CHECK(kvm_store_stats(kvmesh_runtime_of(rts[i]), &st) == 0);
        sum += st.meta_calls;
    }
    return sum;
}

/* Runs n operations (half puts, half gets) and returns the metadata calls made meanwhile. */
static uint64_t workload(int n, int round, uint64_t *ms)
{
    const kvmesh_scope_t sc = {"steady", NULL};
    uint8_t v[4096], out[4096];
    uint64_t before = meta_calls(), t0 = env_clock_mono_ms();
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d-%d", round, i / 2);
        if (i % 2 == 0) {
            memset(v, i, sizeof(v));
            CHECK(kvmesh_put(rts[i % NRT], &sc, key, strlen(key), v, sizeof(v), NULL) == 0);
        } else {
            size_t got = 0;
            CHECK(kvmesh_get_into(rts[(i + 1) % NRT], &sc, key, strlen(key), out, sizeof(out),
                                  &got) == 0);
            CHECK(got == sizeof(v) && out[0] == (uint8_t)(i - 1));
        }
    }
    *ms = env_clock_mono_ms() - t0;
    return meta_calls() - before;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "embedded_wrh") && strcmp(argv[1], "metadata_only"))) {
        fprintf(stderr, "usage: %s embedded_wrh|metadata_only\n", argv[0]);
        return 2;
    }
    bool mesh = strcmp(argv[1], "embedded_wrh") == 0;
    char url[64];
    snprintf(url, sizeof(url), "memory://steady-%s", argv[1]);
    for (int i = 0; i < NRT; i++) {
        kvmesh_config_t *c = kvmesh_config_new();
        CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
        CHECK(kvmesh_config_set(c, "route_mode", argv[1]) == 0);
        CHECK(kvmesh_config_set(c, "memory_size", "67108864") == 0);
        CHECK(kvmesh_config_set(c, "segment_size", "67108864") == 0);
        CHECK(kvmesh_config_set(c, "max_object_size", "1048576") == 0);
        int rc = kvmesh_open(&rts[i], c);
        if (rc)
            fprintf(stderr, "open: %s\n", kvmesh_last_error());
        CHECK(rc == 0);
        kvmesh_config_free(c);
    }
    usleep(1000 * 1000); /* every runtime sees the others */
    /* Warm-up (not measured): until every runtime can write and read keys spread over the
     * shards — in EmbeddedWrh mode the shard primaries are still acquiring their leases and
     * installing their authority sets right after start. Bounded: 120 s. */
    {
        const kvmesh_scope_t sc = {"steady", NULL};
        CHECK(trt_warm(rts, NRT, &sc, 256, 120000) == 0);
    }

    /* Background rate: calls while idle for a while. */
    uint64_t i0 = meta_calls(), t0 = env_clock_mono_ms();
    usleep(2000 * 1000);
    double idle_rate =
        (double)(meta_calls() - i0) / (double)(env_clock_mono_ms() - t0); /* per ms */

    uint64_t ms_small, ms_big;
    uint64_t small = workload(OPS / 10, 1, &ms_small);
    uint64_t big = workload(OPS, 2, &ms_big);
    double bg_small = idle_rate * (double)ms_small, bg_big = idle_rate * (double)ms_big;
    printf(
        "mode %s: idle %.3f calls/s; %d ops: %" PRIu64 " calls in %" PRIu64
        " ms (background ~%.0f); %d ops: %" PRIu64 " calls in %" PRIu64 " ms (background ~%.0f)\n",
        argv[1], idle_rate * 1000, OPS / 10, small, ms_small, bg_small, OPS, big, ms_big, bg_big);
    printf("metadata calls per operation: %.3f\n", (double)big / OPS);
    if (mesh) {
        /* Background only: within 1.5x the idle rate over the run, plus a small constant. */
        CHECK((double)big <= bg_big * 1.5 + 50);
        CHECK((double)small <= bg_small * 1.5 + 50);
    } else {
        /* MetadataOnly: every lookup/CAS is a metadata call, so proportional to the ops. */
        CHECK(big >= (uint64_t)OPS);
        CHECK(big > 5 * small);
    }
    for (int i = 0; i < NRT; i++)
        kvmesh_close(rts[i]);
    return 0;
}
