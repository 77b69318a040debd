/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slot_reclaim.c (bench_slot_reclaim) — how long the owner's reclaim blocks its loop when a
 * large backlog comes due at once: a hot upgrade adopting its predecessor's whole reclaim queue
 * (src/store/slot_core.h slot_core_adopt, slot_core_start), here N slots of 1 KiB.
 *
 * For each round, alternately:
 *   one pass   reclaim_cap UINT32_MAX: the tick frees the whole backlog in one call (the
 *              behaviour before the cap);
 *   capped     the default cap (SLOT_RECLAIM_CAP): the tick, then slot_core_reclaim re-runs
 *              (the owner runs them on a zero-delay timer, the loop's next turn) until none is due.
 * Prints the passes, the longest pass (how long the loop is blocked at once), the total and the
 * time per slot (wall clock; CPU bound, one thread). docs/store.md "Owner slot core".
 *
 * Usage: bench_slot_reclaim [--slots N] [--rounds R]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/ident.h"
#include "kvmesh.h"
#include "store/slot_core.h"

#define SLOT_LEN 1024u

static int no_lookup(void *ctx, slot_t *s, enum slot_lookup_why why)
{
    (void)ctx, (void)s, (void)why;
    return 0;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* A core holding n adopted RECLAIM slots whose grace ends at 1 ms; NULL on failure. */
static slot_core_t *backlog(uint32_t cap, uint32_t n)
{
    slot_core_cfg_t cfg = {.name = "bench",
                           .reclaim_grace_ns = 1000000,
                           .evict_high = 1.0,
                           .evict_low = 0.5,
                           .wait_timeout_ns = 1,
                           .held_retry_ns = 1,
                           .tick_budget = 256,
                           .reclaim_cap = cap,
                           .evict_inflight_max = 1,
                           .wait_max = 1};
    slot_effects_t fx = {.lookup = no_lookup};
    slot_core_t *c = NULL;
    uint32_t segi = 0;
    kvm_ident_t id;
    if (slot_core_new(&cfg, &fx, NULL, &c) != 0)
        return NULL;
    if (slot_core_seg_add(c, 1, (uint64_t)n * SLOT_LEN, &segi) != 0 ||
        kvm_ident_init(&id, "tenant", NULL, "bench/key/000000", 16) != 0) {
        slot_core_free(c);
        return NULL;
    }
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++)
        rc = slot_core_adopt(c, segi, (uint64_t)i * SLOT_LEN, SLOT_LEN, SLOT_RECLAIM, 0, &id);
    kvm_ident_free(&id);
    if (rc) {
        slot_core_free(c);
        return NULL;
    }
    slot_core_start(c, 0);
    return c;
}

static int run(const char *name, uint32_t cap, uint32_t n)
{
    slot_core_t *c = backlog(cap, n);
    if (!c) {
        fprintf(stderr, "bench_slot_reclaim: %s\n", kvmesh_last_error());
        return 1;
    }
    const uint64_t due = 2000000; /* every grace passed */
    double t0 = now_us(), longest = 0;
    unsigned passes = 0;
    for (bool more = true; more; passes++) {
        double a = now_us();
        more = passes == 0 ? slot_core_tick(c, due) : slot_core_reclaim(c, due);
        double d = now_us() - a;
        longest = d > longest ? d : longest;
    }
    double total = now_us() - t0;
    slot_core_stats_t st;
    slot_core_stats(c, &st);
    printf("%-8s slots %u: passes %u, longest pass %.1f ms, total %.1f ms, %.3f us/slot%s\n", name,
           n, passes, longest / 1e3, total / 1e3, total / n,
           st.reclaimed == n ? "" : " (NOT ALL FREED)");
    slot_core_free(c);
    return st.reclaimed == n ? 0 : 1;
}

int main(int argc, char **argv)
{
    uint32_t n = 500000, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--slots") == 0)
            n = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    }
    if (n == 0 || argc % 2 == 0) {
        fprintf(stderr, "usage: bench_slot_reclaim [--slots N] [--rounds R]\n");
        return 2;
    }
    int rc = 0;
    for (uint32_t r = 0; r < rounds && rc == 0; r++) {
        rc |= run("one pass", UINT32_MAX, n);
        rc |= run("capped", 0, n);
    }
    return rc;
}
