/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The owner's two inline-write paths that the critical-path tests do not reach (docs/store.md
 * "Inline writes"), each with a client-only runtime C putting to a storage runtime S over tcp
 * (STORE_RPC_RESERVE_INLINE):
 *
 * - checksum mismatch: the inline body carries a wrong checksum (kvm_put_inline_test_bad_sums);
 *   S copies the bytes, finds the mismatch, releases the slot it reserved and answers
 *   KVMESH_ECHECKSUM. S is C's only owner, so the put fails with that error. S holds no
 *   reservation right after, and once the released slot's grace ends its used bytes and
 *   committed slots are where they were; a put of the same key then succeeds and reads back.
 * - the waited reservation: S is full of committed objects (high watermark 1.0: no background
 *   eviction), so the next inline reservation waits for eviction (S's reserve_waits counts it);
 *   the late grant copies the bytes S kept and verifies them against the checksum: the put
 *   succeeds with no payload exchange and the value reads back byte for byte.
 * - the owner's span: a traced inline put leaves control.owner_reserve (kvmesh.inline) in S's
 *   JSONL capture, as a plain reservation does.
 * - the waited raw put at the primary (embedded_wrh, C's inline_write_max below OBJ): its
 *   payload waits in S's pooled buffer instead of landing in the slot through S's payload
 *   sink, and is copied, verified and published once the late grant comes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <stdatomic.h>

#include "api/kvmesh_tools.h"
#include "env/env.h"
#include "kvmesh.h"
#include "net/rpc.h"
#include "obs/metrics.h"
#include "store/data.h"
#include "store/put_inline.h"
#include "store/slot_core.h"
#include "store/store.h"
#include "tmpdir.h"
#include "trt.h"

#define MEM (1u << 20)  /* S's memory: one segment */
#define OBJ (32u << 10) /* under inline_write_max (64 KiB): every put here is inline */

static const kvmesh_scope_t SC = {"inl", NULL};

struct pair {
    kvmesh_t *s, *c;
};

/* trace_dir: NULL, or the JSONL capture directory (rate: the sampling rate) */
static kvmesh_t *open_rt(const char *url, const char *mem, const char *trace_dir, const char *rate)
{
    static const char *const base[][2] = {
        {"route_mode", "metadata_only"}, {"transport", "tcp"},
        {"segment_size", "1048576"},     {"max_object_size", "65536"},
        {"evict_high_watermark", "1.0"}, {"evict_low_watermark", "0.5"},
        {"reclaim_grace_ms", "30"},      {NULL, NULL}};
    const char *const traced[][2] = {{"trace_capture_dir", trace_dir},
                                     {"trace_sample_rate", rate},
                                     {"metadata_url", url},
                                     {"memory_size", mem},
                                     {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, trace_dir ? traced : traced + 2);
    assert_non_null(kv);
    return kv;
}

/* trace_dir: NULL, or both capture spans there, C sampling every request and S none */
static struct pair open_pair(const char *url, const char *trace_dir)
{
    struct pair p = {.s = open_rt(url, "1048576", trace_dir, "0"),
                     .c = open_rt(url, "0", trace_dir, "1")};
    for (int t = 0; t < 200; t++) {
        size_t n = 0;
        kvmesh_members(p.c, NULL, 0, &n);
        if (n == 2)
            return p;
        usleep(20000);
    }
    fail_msg("C never saw S");
    return p;
}

static void close_pair(struct pair *p)
{
    kvmesh_close(p->c);
    kvmesh_close(p->s);
}

static struct kvm_rt_stats stats(kvmesh_t *kv)
{
    struct kvm_rt_stats st;
    assert_int_equal(kvm_store_stats(kvmesh_runtime_of(kv), &st), 0);
    return st;
}

static int64_t payload_trips(kvmesh_t *kv)
{
    int64_t v = 0;
    assert_int_equal(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, "op_round_trips_total",
                                      OBS_OP_PUT, OBS_CPSTAGE_PAYLOAD, &v),
                     0);
    return v;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 11);
}

static void put_ok(kvmesh_t *kv, const char *key, const uint8_t *v, size_t n)
{
    int rc = kvmesh_put(kv, &SC, key, strlen(key), v, n, NULL);
    if (rc)
        fprintf(stderr, "put %s: %s\n", key, kvmesh_last_error());
    assert_int_equal(rc, 0);
}

static void reads_back(kvmesh_t *kv, const char *key, const uint8_t *v, size_t n)
{
    uint8_t *out = malloc(n);
    size_t got = 0;
    assert_int_equal(kvmesh_get_into(kv, &SC, key, strlen(key), out, n, &got), 0);
    assert_int_equal(got, n);
    assert_memory_equal(out, v, n);
    free(out);
}

/* S's slot core figures, read on S's loop (the core is the loop's). */
struct core_snap {
    kvm_rt_t *rt;
    slot_core_stats_t cs;
    atomic_bool done;
};

static void core_read(void *arg)
{
    struct core_snap *s = arg;
    slot_core_stats(s->rt->slots, &s->cs);
    atomic_store(&s->done, true);
}

static slot_core_stats_t core(kvmesh_t *kv)
{
    struct core_snap s = {.rt = kvmesh_runtime_of(kv)};
    assert_int_equal(env_post(s.rt->env, core_read, &s), 0);
    for (int t = 0; t < 10000 && !atomic_load(&s.done); t++)
        usleep(1000);
    assert_true(atomic_load(&s.done));
    return s.cs;
}

/* S holds no reservation and no slot in reclaim (bounded wait: the one-way COMMIT of the last
 * put, a released slot's grace) */
static slot_core_stats_t core_settled(kvmesh_t *kv)
{
    slot_core_stats_t cs = core(kv);
    for (int t = 0; t < 500 && (cs.n_reserved || cs.n_reclaim); t++) {
        usleep(10000);
        cs = core(kv);
    }
    assert_int_equal(cs.n_reserved, 0);
    assert_int_equal(cs.n_reclaim, 0);
    return cs;
}

static void test_checksum_mismatch(void **state)
{
    (void)state;
    struct pair p = open_pair("memory://inline-sum", NULL);
    uint8_t *v = malloc(OBJ);
    fill(v, OBJ, 1);
    put_ok(p.c, "before", v, OBJ); /* S holds something: the figures below are not all zero */
    slot_core_stats_t cs0 = core_settled(p.s);
    assert_int_equal(cs0.n_committed, 1);
    assert_int_equal(cs0.used, OBJ);

    fill(v, OBJ, 2);
    assert_int_equal(kvm_put_inline_test_bad_sums(1), 0);
    int rc = kvmesh_put(p.c, &SC, "k", 1, v, OBJ, NULL);
    print_message("put with a spoilt checksum: %s: %s\n", kvmesh_strerror(rc), kvmesh_last_error());
    assert_int_equal(rc, KVMESH_ECHECKSUM);
    assert_non_null(strstr(kvmesh_last_error(), "do not match their checksum"));
    assert_int_equal(kvm_put_inline_test_bad_sums(0), 0); /* the one spoilt body was sent */

    /* nothing stays reserved on S (released before the answer) nor charged (once the released
     * slot's grace ended) */
    assert_int_equal(core(p.s).n_reserved, 0);
    slot_core_stats_t cs1 = core_settled(p.s);
    assert_int_equal(cs1.n_committed, cs0.n_committed);
    assert_int_equal(cs1.used, cs0.used);
    size_t got = 0;
    assert_int_equal(kvmesh_get_into(p.c, &SC, "k", 1, v, OBJ, &got), KVMESH_ENOENT);

    /* the same key then goes in and reads back */
    put_ok(p.c, "k", v, OBJ);
    reads_back(p.c, "k", v, OBJ);
    reads_back(p.s, "k", v, OBJ);
    assert_int_equal(core_settled(p.s).used, cs0.used + OBJ);
    free(v);
    close_pair(&p);
}

static void test_waited_reservation(void **state)
{
    (void)state;
    struct pair p = open_pair("memory://inline-wait", NULL);
    uint8_t *v = malloc(OBJ);
    uint64_t cap = stats(p.s).capacity;
    assert_true(cap >= 4 * OBJ);
    /* fill S up to its capacity with committed objects (no background eviction at 1.0) */
    uint32_t n = 0;
    for (; n < 2 * cap / OBJ && stats(p.s).used + OBJ <= cap; n++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", n);
        fill(v, OBJ, n);
        put_ok(p.c, key, v, OBJ);
    }
    struct kvm_rt_stats st0 = stats(p.s);
    print_message("S full after %u puts: %llu of %llu bytes used, waits %llu\n", n,
                  (unsigned long long)st0.used, (unsigned long long)st0.capacity,
                  (unsigned long long)st0.reserve_waits);
    assert_true(st0.used + OBJ > cap);

    /* the next put's inline reservation waits for eviction, then is copied and verified */
    fill(v, OBJ, 0xfeed);
    int64_t payload0 = payload_trips(p.c);
    put_ok(p.c, "late", v, OBJ);
    struct kvm_rt_stats st1 = stats(p.s);
    print_message("late put: waits %llu, evictions %llu\n", (unsigned long long)st1.reserve_waits,
                  (unsigned long long)st1.evictions);
    assert_true(st1.reserve_waits > st0.reserve_waits); /* it did wait */
    assert_true(st1.evictions > st0.evictions);
    assert_int_equal(payload_trips(p.c), payload0); /* inline: no payload exchange */
    reads_back(p.c, "late", v, OBJ);
    reads_back(p.s, "late", v, OBJ);
    free(v);
    close_pair(&p);
}

/* S's RPC counters, read on S's loop (the endpoint is the loop's). */
struct rpc_snap {
    kvm_rt_t *rt;
    struct rpc_stats rs;
    atomic_bool done;
};

static void rpc_read(void *arg)
{
    struct rpc_snap *s = arg;
    rpc_get_stats(s->rt->ep, &s->rs);
    atomic_store(&s->done, true);
}

static struct rpc_stats rpc_of(kvmesh_t *kv)
{
    struct rpc_snap s = {.rt = kvmesh_runtime_of(kv)};
    assert_int_equal(env_post(s.rt->env, rpc_read, &s), 0);
    for (int t = 0; t < 10000 && !atomic_load(&s.done); t++)
        usleep(1000);
    assert_true(atomic_load(&s.done));
    return s.rs;
}

/*
 * The raw form of a put at the primary whose reservation waits (docs/store.md "Puts at the
 * primary"): S is the only storage runtime and route authority (embedded_wrh), C's
 * inline_write_max is below OBJ, so C's puts go to S as STORE_RPC_PUT_PRIMARY_RAW and land in
 * the reserved slot through S's payload sink. Once S is full of committed objects, the next
 * put's reservation waits for eviction when its head arrives: its payload goes to S's pooled
 * buffer instead (no sink_direct), and once both the frame and the late grant are in, S copies
 * the bytes into the slot, verifies them and publishes: one exchange (no payload trip), the
 * value reads back byte for byte, nothing stays reserved.
 */
static void test_waited_raw_primary(void **state)
{
    (void)state;
    static const char *const raw[][2] = {{"route_mode", "embedded_wrh"},
                                         {"inline_write_max", "16384"},
                                         {"metadata_url", "memory://inline-raw-wait"},
                                         {"memory_size", "1048576"},
                                         {NULL, NULL}};
    static const char *const base[][2] = {{"transport", "tcp"},
                                          {"segment_size", "1048576"},
                                          {"max_object_size", "65536"},
                                          {"evict_high_watermark", "1.0"},
                                          {"evict_low_watermark", "0.5"},
                                          {"reclaim_grace_ms", "30"},
                                          {NULL, NULL}};
    struct pair p = {.s = trt_open(base, raw)};
    assert_non_null(p.s);
    const char *const rawc[][2] = {{"route_mode", "embedded_wrh"},
                                   {"inline_write_max", "16384"},
                                   {"metadata_url", "memory://inline-raw-wait"},
                                   {"memory_size", "0"},
                                   {NULL, NULL}};
    p.c = trt_open(base, rawc);
    assert_non_null(p.c);
    for (int t = 0; t < 200; t++) {
        size_t n = 0;
        kvmesh_members(p.c, NULL, 0, &n);
        if (n == 2)
            break;
        usleep(20000);
    }
    uint8_t *v = malloc(OBJ);
    uint64_t cap = stats(p.s).capacity;
    assert_true(cap >= 4 * OBJ);
    /* "late" first: C's view of its shard then names S as the primary (a put to a shard C has
     * not seen yet takes the plain path) */
    fill(v, OBJ, 7);
    put_ok(p.c, "late", v, OBJ);
    uint32_t n = 0;
    for (; n < 2 * cap / OBJ && stats(p.s).used + OBJ <= cap; n++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", n);
        fill(v, OBJ, n);
        put_ok(p.c, key, v, OBJ);
    }
    struct kvm_rt_stats st0 = stats(p.s);
    struct rpc_stats rs0 = rpc_of(p.s);
    print_message("S full after %u raw puts: %llu of %llu bytes used, waits %llu, landed in the "
                  "slot %llu\n",
                  n, (unsigned long long)st0.used, (unsigned long long)st0.capacity,
                  (unsigned long long)st0.reserve_waits, (unsigned long long)rs0.sink_direct);
    assert_true(st0.used + OBJ > cap);
    assert_true(rs0.sink_direct > 0);

    fill(v, OBJ, 0xbeef);
    int64_t payload0 = payload_trips(p.c);
    put_ok(p.c, "late", v, OBJ);
    struct kvm_rt_stats st1 = stats(p.s);
    struct rpc_stats rs1 = rpc_of(p.s);
    print_message("late raw put: waits %llu, evictions %llu, landed in the slot %llu\n",
                  (unsigned long long)st1.reserve_waits, (unsigned long long)st1.evictions,
                  (unsigned long long)rs1.sink_direct);
    assert_true(st1.reserve_waits > st0.reserve_waits); /* it did wait */
    assert_true(st1.evictions > st0.evictions);
    assert_int_equal(rs1.sink_direct, rs0.sink_direct); /* the bytes waited in a buffer */
    assert_int_equal(rs1.sink_aborted, rs0.sink_aborted);
    assert_int_equal(payload_trips(p.c), payload0); /* at the primary: no payload exchange */
    reads_back(p.c, "late", v, OBJ);
    reads_back(p.s, "late", v, OBJ);
    assert_int_equal(core_settled(p.s).n_reserved, 0);
    free(v);
    close_pair(&p);
}

/* Whether the file at path holds both strings (on one line: one span). */
static bool file_has(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192];
    bool has = false;
    while (!has && fgets(line, sizeof(line), f))
        has = strstr(line, a) && strstr(line, b);
    fclose(f);
    return has;
}

/* A traced inline put: S records control.owner_reserve, marked kvmesh.inline, in its capture. */
static void test_owner_span(void **state)
{
    (void)state;
    static char dir[256]; /* removed at exit also when an assertion fails below */
    assert_int_equal(ttmp_make_auto(dir, sizeof(dir), "kvmesh-inline-trace"), 0);
    struct pair p = open_pair("memory://inline-trace", dir);
    char path[512];
    snprintf(path, sizeof(path), "%s/trace-%s.jsonl", dir, kvmesh_runtime_of(p.s)->idhex);
    uint8_t *v = malloc(OBJ);
    fill(v, OBJ, 3);
    int64_t payload0 = payload_trips(p.c);
    put_ok(p.c, "traced", v, OBJ);
    assert_int_equal(payload_trips(p.c), payload0); /* inline */
    close_pair(&p);                                 /* closing flushes the captures */
    assert_true(file_has(path, "\"control.owner_reserve\"", "kvmesh.inline"));
    assert_true(file_has(path, "\"control.owner_commit\"", "")); /* (the capture is S's) */
    free(v);
    assert_int_equal(ttmp_remove(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checksum_mismatch), cmocka_unit_test(test_waited_reservation),
        cmocka_unit_test(test_waited_raw_primary), cmocka_unit_test(test_owner_span)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
