/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_getcost — what a steady-state single 4 KiB get costs in heap allocations, pinned on a
 * real cluster (docs/performance.md "Single 4 KiB get, eighth round").
 *
 *   itest_store_getcost tcp|shm [calls [get|batch_get|batch_put]]
 *
 * (calls 0: the default count of the row.) With batch_get or batch_put it counts instead the
 * allocations per item of steady batch calls of 128 4 KiB keys (as `kvmesh bench`'s batch rows)
 * over the same cluster: every key put once, 20 calls to warm, then `calls` calls (default 100).
 *
 * Two runtimes in this process on embedded in-memory metadata, the given data-plane transport:
 * a storage runtime S (the only route authority and the owner of every replica) and a
 * client-only runtime C, as in `kvmesh bench`. C puts one 4 KiB key, reads it back until every
 * cache a first read fills is warm (segment handles, read grants, route hints, record pools),
 * then reads it `gets` more times (default 2000) and counts the heap allocations of the whole
 * process meanwhile: both runtimes, every thread (the caller leading C's loop, C's loop thread,
 * S's loop and I/O threads). A get allocated 17 (shm) to 18 (tcp) times in all before the eighth
 * round; the lookup's op record (a runtime's spare), the route messages' env bodies and the
 * inline answer's head (on the stack), the lookup answer's route (moved out of the decoded
 * message, not copied) and the route ticks' candidate arrays no longer allocate, which left
 * 10 (8.1 with the route message decode of the same round). The ninth round took the API's
 * identity and request record onto the caller's stack, the route-call contexts from the
 * runtime's spare list and (shm) the transport batch from the engine's spare, which leaves about
 * 5.2 (tcp) and 3.1 (shm): at most GET_ALLOCS_MAX_TCP / _SHM per get is asserted, with room for
 * the background work of the same interval (lease keep-alives, membership refreshes, a read
 * grant's periodic re-check). s11 counts the aligned forms too (alloc_count.h) and the calling
 * thread's own count (which a sanitizer's slower run does not blur with background work: the
 * quietest of GET_ROUNDS short rounds): 2.0 per get over tcp, and over shm 2.0 before s11 (one
 * of them the sum its fused read folded, now on the stack), 1.0 after. What is
 * left per get: docs/performance.md "Store CPU per item, ninth round".
 *
 * Allocations are counted by the sanitizer's malloc hooks in a sanitizer build, else by this
 * program's own malloc, calloc and realloc, which take precedence over the C library's in every
 * library of the process and pass the call on to it. Counts only, no timing; every wait is
 * bounded.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_count.h"
#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "obs/metrics.h"
#include "store/store.h"
#include "tcheck.h"

#define CHECK(c) TCHECK_FATAL(c)

#define VSIZE      4096
#define WARM_GETS  500
#define GETS       2000
#define GET_ROUNDS 20 /* rounds of GET_ROUND gets: the calling thread's count per get */
#define GET_ROUND  50
/* per get, the background included (see above; 17-18 before the eighth round, 8.1-8.6 before
 * the ninth) */
#define GET_ALLOCS_MAX_TCP 7.0
#define GET_ALLOCS_MAX_SHM 5.0
/* per get on the calling thread (it leads C's loop), in the quietest round: 2.0 (tcp); shm 2.0
 * before s11 (the fused read's sum, aligned_alloc), 1.0 after */
#define GET_THREAD_ALLOCS_MAX_TCP 2.5
#define GET_THREAD_ALLOCS_MAX_SHM 1.5
#define BATCH_CALLS               100 /* batch calls counted (BATCH_N items each) */
/* per batch item, the background included (docs/performance.md "Store CPU per item, ninth
 * round") */
#define BGET_ALLOCS_MAX_TCP 4.0 /* 5.17 before the ninth round, 3.2 after */
#define BGET_ALLOCS_MAX_SHM 4.0 /* 5.17 before, 3.2 after */
#define BPUT_ALLOCS_MAX_TCP 6.2 /* 7.9 before the ninth round, 5.4 after, 4.4 after the tenth */
#define BPUT_ALLOCS_MAX_SHM 6.2 /* 7.8 before, 5.5 after, 4.45 after the tenth */

/* every allocation call of the process: tests/support/alloc_count.h */

static int64_t rd(kvmesh_t *kv, const char *fam, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, i1, i2, &v) == 0);
    return v;
}

static kvmesh_t *open_rt(const char *url, const char *transport, bool storage)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "transport", transport) == 0);
    CHECK(kvmesh_config_set(c, "memory_size", storage ? "67108864" : "0") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "67108864") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    /* (as `kvmesh bench`: a batch of 128 puts on a loaded 2-core machine ran past the default 5 s)
     */
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "30000") == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

static void get_once(kvmesh_t *C, const kvmesh_scope_t *sc, uint8_t *out, const uint8_t *v)
{
    size_t got = 0;
    out[0] = (uint8_t)~v[0];
    CHECK(kvmesh_get_into(C, sc, "g", 1, out, VSIZE, &got) == 0);
    CHECK(got == VSIZE && out[0] == v[0] && out[VSIZE - 1] == v[VSIZE - 1]);
}

#define BATCH_N 128 /* items per batch call, as in `kvmesh bench` */

static char bkeys[BATCH_N][16];
static uint8_t bvals[BATCH_N][VSIZE], bout[BATCH_N][VSIZE];

/* One batch call over the BATCH_N keys: a batch_put of their values or a batch_get of them. */
static void batch_once(kvmesh_t *C, const kvmesh_scope_t *sc, bool put)
{
    kvmesh_batch_item_t it[BATCH_N];
    for (int i = 0; i < BATCH_N; i++) {
        it[i] = (kvmesh_batch_item_t){.key = bkeys[i], .key_len = strlen(bkeys[i])};
        it[i].buf = put ? bvals[i] : bout[i];
        it[i].len = VSIZE;
        if (!put)
            bout[i][0] = (uint8_t)~bvals[i][0];
    }
    int rc =
        put ? kvmesh_batch_put(C, sc, it, BATCH_N, NULL) : kvmesh_batch_get(C, sc, it, BATCH_N);
    CHECK(rc == 0);
    for (int i = 0; i < BATCH_N && !put; i++)
        CHECK(it[i].out_len == VSIZE && bout[i][0] == bvals[i][0] &&
              bout[i][VSIZE - 1] == bvals[i][VSIZE - 1]);
}

/* The batch rows: `calls` batch_get (or batch_put) calls of BATCH_N 4 KiB items after a warm-up,
 * and their allocations per item against max_per_item. */
static void batch_cost(kvmesh_t *C, const kvmesh_scope_t *sc, const char *xp, bool put, long calls,
                       double max_per_item)
{
    for (int i = 0; i < BATCH_N; i++) {
        snprintf(bkeys[i], sizeof(bkeys[i]), "b%d", i);
        for (size_t j = 0; j < VSIZE; j++)
            bvals[i][j] = (uint8_t)(i * 31 + j * 7 + 3);
    }
    CHECK(kvmesh_register_buffer(C, bout, sizeof(bout)) == 0);
    CHECK(kvmesh_register_buffer(C, bvals, sizeof(bvals)) == 0);
    batch_once(C, sc, true);
    for (int i = 0; i < 20; i++)
        batch_once(C, sc, put);
    int op = put ? OBS_OP_BATCH_PUT : OBS_OP_BATCH_GET;
    int64_t h0 = rd(C, "op_handoffs_total", (unsigned)op, OBS_NONE);
    /* (rsv_allocs is the loop's; read after the calls that ran on it ended) */
    uint64_t r0 = kvmesh_runtime_of(C)->rsv_allocs;
    uint64_t a0 = alloc_count_now();
    for (long i = 0; i < calls; i++)
        batch_once(C, sc, put);
    uint64_t a = alloc_count_now() - a0;
    uint64_t r = kvmesh_runtime_of(C)->rsv_allocs - r0;
    int64_t h = rd(C, "op_handoffs_total", (unsigned)op, OBS_NONE) - h0;
    double per = (double)a / (double)(calls * BATCH_N);
    printf("%s: %ld %s calls of %d 4 KiB items: %" PRIu64
           " allocations (%.2f per item, %.1f per call), %" PRIu64
           " reservation contexts allocated, %" PRId64 " hand-offs\n",
           xp, calls, put ? "batch_put" : "batch_get", BATCH_N, a, per, (double)a / (double)calls,
           r, h);
    fflush(stdout);
    CHECK(h >= calls); /* (a batch_put hands off its place and its publish) */
    CHECK(per <= max_per_item);
    /* every reservation of a steady batch put reuses a context of the runtime's spare list
     * (ops_place.c; one calloc of ~2.2 KiB per item before the tenth round) */
    CHECK(r == 0);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "shm"))) {
        fprintf(stderr, "usage: %s tcp|shm [calls [get|batch_get|batch_put]]\n", argv[0]);
        return 2;
    }
    const char *xp = argv[1];
    const char *row = argc > 3 ? argv[3] : "get";
    CHECK(!strcmp(row, "get") || !strcmp(row, "batch_get") || !strcmp(row, "batch_put"));
    long gets = argc > 2 && strcmp(argv[2], "0") ? strtol(argv[2], NULL, 10)
                : strcmp(row, "get")             ? BATCH_CALLS
                                                 : GETS;
    CHECK(gets > 0 && gets <= 10000000);
    CHECK(alloc_count_start() == 0);
    char url[64];
    snprintf(url, sizeof(url), "memory://getcost-%s-%ld", xp, (long)getpid());
    kvmesh_t *S = open_rt(url, xp, true), *C = open_rt(url, xp, false);
    const kvmesh_scope_t sc = {"getcost", NULL};
    static uint8_t v[VSIZE], out[VSIZE];
    for (size_t i = 0; i < VSIZE; i++)
        v[i] = (uint8_t)(i * 7 + 1);
    CHECK(kvmesh_register_buffer(C, out, VSIZE) == 0);

    /* The first put waits until the shard's primary holds its lease (bounded: 120 s). */
    uint64_t end = env_clock_mono_ms() + 120000;
    while (kvmesh_put(C, &sc, "g", 1, v, VSIZE, NULL) != 0) {
        CHECK(env_clock_mono_ms() < end);
        usleep(100 * 1000);
    }
    if (strcmp(row, "get") != 0) {
        bool put = strcmp(row, "batch_put") == 0;
        bool tcp = strcmp(xp, "tcp") == 0;
        batch_cost(C, &sc, xp, put, gets,
                   put ? (tcp ? BPUT_ALLOCS_MAX_TCP : BPUT_ALLOCS_MAX_SHM)
                       : (tcp ? BGET_ALLOCS_MAX_TCP : BGET_ALLOCS_MAX_SHM));
        kvmesh_close(C);
        kvmesh_close(S);
        return 0;
    }
    for (int i = 0; i < WARM_GETS; i++)
        get_once(C, &sc, out, v);
    CHECK(memcmp(out, v, VSIZE) == 0);

    /* The calling thread's allocations per get, over the quietest of GET_ROUNDS rounds of
     * GET_ROUND gets (the background work a round may meet lands in a few rounds only). */
    uint64_t round_min = UINT64_MAX;
    for (int r = 0; r < GET_ROUNDS; r++) {
        uint64_t r0 = alloc_count_thread_now();
        for (int i = 0; i < GET_ROUND; i++)
            get_once(C, &sc, out, v);
        uint64_t ra = alloc_count_thread_now() - r0;
        round_min = ra < round_min ? ra : round_min;
    }
    int64_t h0 = rd(C, "op_handoffs_total", OBS_OP_GET, OBS_NONE);
    int64_t l0 = rd(C, "op_round_trips_total", OBS_OP_GET, OBS_CPSTAGE_ROUTE_LOOKUP);
    uint64_t a0 = alloc_count_now(), t0 = alloc_count_thread_now();
    for (long i = 0; i < gets; i++)
        get_once(C, &sc, out, v);
    uint64_t a = alloc_count_now() - a0, ta = alloc_count_thread_now() - t0;
    int64_t h = rd(C, "op_handoffs_total", OBS_OP_GET, OBS_NONE) - h0;
    int64_t l = rd(C, "op_round_trips_total", OBS_OP_GET, OBS_CPSTAGE_ROUTE_LOOKUP) - l0;
    CHECK(memcmp(out, v, VSIZE) == 0);
    printf("%s: %ld gets of 4 KiB: %" PRIu64 " allocations (%.2f per get; %.2f on the calling "
           "thread), %" PRId64 " hand-offs, %" PRId64 " route lookups\n",
           xp, gets, a, (double)a / (double)gets, (double)ta / (double)gets, h, l);
    fflush(stdout);
    CHECK(h == gets); /* one hand-off per get */
    CHECK(l >= gets); /* every get asked the authority (no cached route served) */
    printf("%s: the calling thread's allocations in the quietest of %d rounds of %d gets: %.2f "
           "per get\n",
           xp, GET_ROUNDS, GET_ROUND, (double)round_min / GET_ROUND);
    CHECK((double)round_min <= GET_ROUND * (strcmp(xp, "tcp") == 0 ? GET_THREAD_ALLOCS_MAX_TCP
                                                                   : GET_THREAD_ALLOCS_MAX_SHM));
    CHECK((double)a <=
          (double)gets * (strcmp(xp, "tcp") == 0 ? GET_ALLOCS_MAX_TCP : GET_ALLOCS_MAX_SHM));

    kvmesh_close(C);
    kvmesh_close(S);
    return 0;
}
