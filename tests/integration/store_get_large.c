/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_get_large — single gets of large values over tcp in one exchange when the key's shard
 * primary (the route authority that answers the lookup) owns the replica (docs/store.md "Inline
 * reads", docs/performance.md "Large single gets at the primary in one exchange").
 *
 *   itest_store_get_large
 *
 * Runtimes in this process on embedded in-memory metadata, default route mode (EmbeddedWrh),
 * top_k 1 (each shard's one authority is its primary), transport tcp: a storage runtime S (the
 * only route authority, the owner of every replica) and a client-only runtime C. Every count is
 * read from C's kvmesh_op_* families (round trips by stage, hand-offs, checksum passes) and
 * kvmesh_transport_operations_total (tcp reads); no timing is asserted and every wait is bounded.
 *   - 128 KiB and 256 KiB (inline_read_max's default) into the caller's buffer, and 256 KiB
 * as an allocated result (kvmesh_get): 1 round trip (the lookup), no payload exchange, the bytes
 *     counted as one tcp read, one checksum pass, the value byte for byte;
 *   - 256 KiB + 1 and 1 MiB: 2 (the lookup, then a transport READ);
 *   - a caller's buffer smaller than the value: KVMESH_ETOOBIG with the size, the buffer
 *     untouched, and then the read of the same key into a big enough buffer is 1;
 *   - inline_read_max raised to 1 MiB on both sides: 1 MiB (into the caller's buffer and
 *     allocated) and 1 MiB - 1 take 1, past the requester's bound 2; an authority at 256 KiB
 *     (a runtime that predates the attached form's own bound) 2 for 1 MiB, 1 for 256 KiB; a
 *     requester with verify_reads never (the copied form, 256 KiB at most) 2 for 1 MiB;
 *   - an authority that predates large inline reads (S bounded as before, by the 64 KiB of an
 *     older inline_read_max): a 256 KiB get takes 2, a 64 KiB one still 1;
 *   - a get racing overwrites and removes of its 256 KiB key at S: every answer one whole
 *     written value or absent;
 *   - every get served in one exchange into the caller's buffer (verified reads) had its
 *     bytes received straight into that buffer (C's sink_direct, nothing let go); a get
 *     abandoned with its answer half received there (C stops reading that connection by a test
 *     hook until the get returned): the rest of the frame is discarded, the buffer the test then
 *     fills with a guard pattern stays whole, and the next gets on the connection are whole;
 *   - last, a second storage runtime S2: a 256 KiB value pinned to the storage runtime that is
 *     not its key's primary takes 2 (the lookup at the primary, the READ at the owner);
 *   - a corrupted replica (one byte of S's slot flipped): the inline bytes are refused and so is
 *     the transport read (each look: one more checksum pass than READs), KVMESH_ECHECKSUM; with
 *     the byte restored, 1 round trip again.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "net/seg.h"
#include "obs/metrics.h"
#include "route/route.h"
#include "store/get_inline.h"
#include "store/store.h"
#include "tcheck.h"
#include "trt.h"

#define CHECK(c) TCHECK_FATAL(c)

#define KIB         1024
#define BIG         ROUTE_INLINE_COPIED_MAX /* 256 KiB: inline_read_max's default */
#define OLD_BOUND   (64 * KIB)              /* an older runtime's inline_read_max default */
#define RAISED      (1024 * KIB) /* inline_read_max raised past the copied form's bound */
#define RACE_GETS   200
#define RACE_FOUND  20     /* whole values read, at least */
#define RACE_WRITES 20     /* rewrites made meanwhile, at least */
#define RACE_LIMIT  120000 /* ms: bound of the race */

static trt_cp_t snap(kvmesh_t *kv)
{
    return trt_cp_snap(kv, OBS_OP_GET);
}

/* A value of size bytes, distinct per (size, b). */
static void fill(uint8_t *v, size_t size, uint8_t b)
{
    for (size_t i = 0; i < size; i++)
        v[i] = (uint8_t)(b + i * 7 + (i >> 12));
}

/* Puts key at S (S owns it). Retried, bounded, while the key's shard is unavailable or slow
 * (after S2 left, its shards fail over to S once their leases expire). */
static void put_at(kvmesh_t *S, const kvmesh_scope_t *sc, const char *key, const uint8_t *v,
                   size_t size)
{
    uint64_t end = env_clock_mono_ms() + 120000;
    int rc;
    while ((rc = kvmesh_put(S, sc, key, strlen(key), v, size, NULL)) != 0) {
        CHECK(rc == KVMESH_EUNAVAILABLE || rc == KVMESH_ETIMEDOUT);
        CHECK(env_clock_mono_ms() < end);
        usleep(50 * 1000);
    }
}

static struct rpc_stats rpc_stats_of(kvmesh_t *R);

/* A get of key from C into a buffer of cap bytes; checks the value and the round trips: `one`
 * = 1 (the lookup carried the bytes), else 2 (the lookup and a transport READ). */
static void check_get(kvmesh_t *C, const kvmesh_scope_t *sc, const char *key, const uint8_t *v,
                      size_t size, bool one, const char *what)
{
    uint8_t *out = malloc(size);
    CHECK(out);
    memset(out, 0, size);
    size_t got = 0;
    struct rpc_stats s0 = rpc_stats_of(C), s1;
    trt_cp_t a = snap(C), d;
    CHECK(kvmesh_get_into(C, sc, key, strlen(key), out, size, &got) == 0);
    d = trt_cp_delta(a, snap(C));
    s1 = rpc_stats_of(C);
    trt_cp_show(what, &d);
    CHECK(got == size && memcmp(out, v, size) == 0);
    CHECK(d.lookup >= 1 && d.reserve == 0 && d.cas == 0);
    CHECK(d.handoffs == 1);
    CHECK(d.checksums == 1);
    if (one && kvmesh_runtime_of(C)->cfg.verify_reads != KVM_VERIFY_NEVER) {
        /* the answer's attachment received straight into out (get_inline.c) */
        CHECK(s1.sink_direct == s0.sink_direct + 1 && s1.sink_let_go == s0.sink_let_go);
    }
    if (one) {
        /* no payload exchange; the bytes count as one tcp read (the replica was read over tcp) */
        CHECK(d.payload == 0 && d.reads == 1);
    } else {
        CHECK(d.payload == 1 && d.reads >= 1);
    }
    free(out);
}

/* ---- on a runtime's loop ------------------------------------------------------------------- */

/* Runs fn on R's loop and waits for it (bounded). */
static void on_loop(kvmesh_t *R, void (*fn)(kvm_rt_t *rt, void *arg), void *arg)
{
    CHECK(trt_on_loop(R, fn, arg, 10000) == 0);
}

static void set_read_max(kvm_rt_t *rt, void *arg)
{
    rt->cfg.inline_read_max = *(uint32_t *)arg;
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void check_sizes(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static const struct {
        size_t size;
        bool one;
    } cases[] = {{128 * KIB, true}, {BIG, true}, {BIG + 1, false}, {1024 * KIB, false}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t size = cases[i].size;
        uint8_t *v = malloc(size);
        CHECK(v);
        fill(v, size, (uint8_t)(i + 1));
        char key[32], what[64];
        snprintf(key, sizeof(key), "large-%zu", size);
        put_at(S, sc, key, v, size);
        snprintf(what, sizeof(what), "get %zu B", size);
        check_get(C, sc, key, v, size, cases[i].one, what);
        free(v);
    }
}

/* kvmesh_get: the result allocated for the caller, filled from the lookup's answer. */
static void check_alloc(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[BIG];
    fill(v, sizeof(v), 0x31);
    put_at(S, sc, "alloc", v, sizeof(v));
    void *out = NULL;
    size_t len = 0;
    trt_cp_t a = snap(C), d;
    CHECK(kvmesh_get(C, sc, "alloc", 5, &out, &len) == 0);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("get 256 KiB (allocated result)", &d);
    CHECK(out && len == sizeof(v) && memcmp(out, v, sizeof(v)) == 0);
    CHECK(trt_cp_round_trips(&d) == 1 && d.lookup == 1 && d.payload == 0 && d.reads == 1);
    CHECK(d.checksums == 1);
    kvmesh_free(out);
}

/* A buffer smaller than the value: KVMESH_ETOOBIG, the size told, nothing written. */
static void check_small_buffer(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[BIG], out[BIG];
    fill(v, sizeof(v), 0x47);
    put_at(S, sc, "small-buf", v, sizeof(v));
    memset(out, 0xcc, sizeof(out));
    size_t got = 0;
    CHECK(kvmesh_get_into(C, sc, "small-buf", 9, out, 128 * KIB, &got) == KVMESH_ETOOBIG);
    CHECK(got == sizeof(v));
    for (size_t i = 0; i < sizeof(out); i++)
        CHECK(out[i] == 0xcc);
    check_get(C, sc, "small-buf", v, sizeof(v), true, "get 256 KiB (after a small buffer)");
}

/* A corrupted replica: refused inline and by the transport read (verify_reads always). */
static void check_corrupt(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[BIG], out[BIG];
    fill(v, sizeof(v), 0x63);
    put_at(S, sc, "corrupt", v, sizeof(v));
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(S, sc, "corrupt", 7, &ri) == 0);
    CHECK(ri.n_replicas == 1 && ri.length == sizeof(v));
    /* (through the segment's memfd: trt_flip_byte) */
    uint64_t seg = ri.replicas[0].segment, off = ri.replicas[0].offset + 1000;
    CHECK(trt_flip_byte(S, seg, off) == 0);
    size_t got = 0;
    trt_cp_t a = snap(C), d;
    int rc = kvmesh_get_into(C, sc, "corrupt", 7, out, sizeof(out), &got);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("get 256 KiB (corrupted replica)", &d);
    CHECK(rc == KVMESH_ECHECKSUM);
    /* per look (a checksum failure looks again, up to 3 within the deadline): the lookup's
     * bytes summed and refused, then the READ of the replica, refused too */
    CHECK(d.lookup >= 1 && d.payload >= 1 && d.checksums > d.payload);
    CHECK(trt_flip_byte(S, seg, off) == 0); /* restored */
    check_get(C, sc, "corrupt", v, sizeof(v), true, "get 256 KiB (replica restored)");
}

/* C's RPC counters, read on its loop. */
static void read_rpc_stats(kvm_rt_t *rt, void *arg)
{
    rpc_get_stats(rt->ep, arg);
}

static struct rpc_stats rpc_stats_of(kvmesh_t *R)
{
    struct rpc_stats st;
    on_loop(R, read_rpc_stats, &st);
    return st;
}

static void set_timeout(kvm_rt_t *rt, void *arg)
{
    rt->cfg.request_timeout_ms = *(uint32_t *)arg;
}

/* A get abandoned while its answer's bytes are half received into the caller's buffer: C's
 * connection from S stops reading after the first run landed there (rpc_test_sink_stall, held
 * until the get returned), so the get's deadline passes mid-payload and the get fails. The test
 * then fills the buffer with a guard pattern and lets the rest of the frame come: it is
 * discarded (sink_let_go), the guard stays whole, and the next gets on that connection read
 * whole values in one exchange (the stream is in step). */
static void check_stalled(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[BIG], out[BIG];
    fill(v, sizeof(v), 0x2b);
    put_at(S, sc, "stalled", v, sizeof(v));
    check_get(C, sc, "stalled", v, sizeof(v), true, "get 256 KiB (before the stall)");
    uint32_t was = kvmesh_runtime_of(C)->cfg.request_timeout_ms, shorter = 300;
    on_loop(C, set_timeout, &shorter);
    struct rpc_stats a = rpc_stats_of(C);
    atomic_store(&rpc_test_sink_stall, 1);
    memset(out, 0, sizeof(out));
    size_t got = 0;
    int rc = kvmesh_get_into(C, sc, "stalled", 7, out, sizeof(out), &got);
    struct rpc_stats b = rpc_stats_of(C);
    printf("stalled get: rc %d, sinks direct %" PRIu64 ", let go %" PRIu64 "\n", rc,
           b.sink_direct - a.sink_direct, b.sink_let_go - a.sink_let_go);
    CHECK(rc != 0);                            /* (its deadline passed with the bytes half in) */
    CHECK(b.sink_direct == a.sink_direct + 1); /* the answer went to the caller's buffer... */
    CHECK(b.sink_let_go == a.sink_let_go);     /* ...and is still half received */
    memset(out, 0xa5, sizeof(out));            /* the buffer is the caller's again */
    atomic_store(&rpc_test_sink_stall, 0);
    /* the rest of the frame comes (its notification is then handled: the connection stopped
     * reading mid-frame, so nothing else came from S meanwhile), and what S sent after it */
    uint64_t end = env_clock_mono_ms() + 60000;
    struct rpc_stats e;
    while ((e = rpc_stats_of(C)).notifies_received == b.notifies_received) {
        CHECK(env_clock_mono_ms() < end);
        usleep(5000);
    }
    usleep(100 * 1000);
    e = rpc_stats_of(C);
    for (size_t i = 0; i < sizeof(out); i++)
        CHECK(out[i] == 0xa5);
    CHECK(e.sink_let_go == a.sink_let_go + 1); /* its rest was discarded */
    on_loop(C, set_timeout, &was);
    for (int i = 0; i < 3; i++)
        check_get(C, sc, "stalled", v, sizeof(v), true, "get 256 KiB (after the stall)");
}

static void set_verify(kvm_rt_t *rt, void *arg)
{
    rt->cfg.verify_reads = *(enum kvm_verify_reads *)arg;
}

/* inline_read_max raised past the copied form's bound (ROUTE_INLINE_COPIED_MAX), on both sides:
 * a 1 MiB get is one exchange, its bytes the answer's raw payload (into the caller's buffer and
 * as an allocated result); 1 MiB + 1 (past the raised bound) takes 2. With the authority still
 * at 256 KiB (what a runtime that predates the raised bound lends), and with a requester that
 * does not verify (its bytes would come copied into the message, bounded at 256 KiB), 1 MiB
 * takes 2 and 256 KiB still 1. */
static void check_raised_bound(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    kvm_rt_t *s = kvmesh_runtime_of(S), *c = kvmesh_runtime_of(C);
    uint32_t was_s = s->cfg.inline_read_max, was_c = c->cfg.inline_read_max, raised = RAISED;
    enum kvm_verify_reads was_v = c->cfg.verify_reads, never = KVM_VERIFY_NEVER;
    CHECK(was_s == BIG && was_c == BIG && was_v != KVM_VERIFY_NEVER);
    on_loop(S, set_read_max, &raised);
    on_loop(C, set_read_max, &raised);
    uint8_t *v = malloc(RAISED), *w = malloc(RAISED - 1), *x = malloc(BIG);
    CHECK(v && w && x);
    fill(v, RAISED, 0x15);
    fill(w, RAISED - 1, 0x16);
    fill(x, BIG, 0x17);
    put_at(S, sc, "raised-1m", v, RAISED);
    put_at(S, sc, "raised-odd", w, RAISED - 1);
    put_at(S, sc, "raised-256k", x, BIG);
    check_get(C, sc, "raised-1m", v, RAISED, true, "get 1 MiB (inline_read_max 1 MiB)");
    check_get(C, sc, "raised-odd", w, RAISED - 1, true, "get 1 MiB - 1 (inline_read_max 1 MiB)");
    void *out = NULL;
    size_t len = 0;
    trt_cp_t a = snap(C), d;
    CHECK(kvmesh_get(C, sc, "raised-1m", 9, &out, &len) == 0);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("get 1 MiB (allocated result, inline_read_max 1 MiB)", &d);
    CHECK(out && len == RAISED && memcmp(out, v, RAISED) == 0);
    CHECK(trt_cp_round_trips(&d) == 1 && d.payload == 0 && d.reads == 1 && d.checksums == 1);
    kvmesh_free(out);
    /* past the raised bound: the lookup, then a transport READ */
    uint32_t lower = RAISED - 1;
    on_loop(C, set_read_max, &lower);
    check_get(C, sc, "raised-1m", v, RAISED, false, "get 1 MiB (requester at 1 MiB - 1)");
    on_loop(C, set_read_max, &raised);
    /* an authority that lends no more than 256 KiB */
    on_loop(S, set_read_max, &was_s);
    check_get(C, sc, "raised-1m", v, RAISED, false, "get 1 MiB (authority at 256 KiB)");
    check_get(C, sc, "raised-256k", x, BIG, true, "get 256 KiB (authority at 256 KiB)");
    on_loop(S, set_read_max, &raised);
    /* a requester that does not verify: the copied form, at most 256 KiB */
    on_loop(C, set_verify, &never);
    size_t got = 0;
    uint8_t *o = malloc(RAISED);
    CHECK(o);
    a = snap(C);
    CHECK(kvmesh_get_into(C, sc, "raised-1m", 9, o, RAISED, &got) == 0);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("get 1 MiB (verify_reads never)", &d);
    CHECK(got == RAISED && memcmp(o, v, RAISED) == 0);
    CHECK(d.payload == 1 && d.checksums == 0);
    a = snap(C);
    CHECK(kvmesh_get_into(C, sc, "raised-256k", 11, o, BIG, &got) == 0);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("get 256 KiB (verify_reads never)", &d);
    CHECK(got == BIG && memcmp(o, x, BIG) == 0);
    CHECK(d.payload == 0 && trt_cp_round_trips(&d) == 1 && d.checksums == 0);
    on_loop(C, set_verify, &was_v);
    on_loop(S, set_read_max, &was_s);
    on_loop(C, set_read_max, &was_c);
    free(o);
    free(v);
    free(w);
    free(x);
}

/* An authority that predates large inline reads: bounded by an older inline_read_max. */
static void check_old_authority(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    uint32_t was = kvmesh_runtime_of(S)->cfg.inline_read_max, old = OLD_BOUND;
    CHECK(was >= BIG);
    on_loop(S, set_read_max, &old);
    static uint8_t v[BIG], w[OLD_BOUND];
    fill(v, sizeof(v), 0x71);
    fill(w, sizeof(w), 0x72);
    put_at(S, sc, "old-big", v, sizeof(v));
    put_at(S, sc, "old-small", w, sizeof(w));
    check_get(C, sc, "old-big", v, sizeof(v), false, "get 256 KiB (older authority)");
    check_get(C, sc, "old-small", w, sizeof(w), true, "get 64 KiB (older authority)");
    on_loop(S, set_read_max, &was);
    check_get(C, sc, "old-big", v, sizeof(v), true, "get 256 KiB (authority current again)");
}

/* S rewrites (one fill byte per value) and now and then removes a 256 KiB key while C reads it:
 * every answer is one whole written value or absent. */
struct racer {
    kvmesh_t *S;
    const kvmesh_scope_t *sc;
    atomic_bool stop;
    atomic_int writes;
};

static void *race_writer(void *arg)
{
    struct racer *r = arg;
    static uint8_t v[BIG];
    for (int i = 1; !atomic_load(&r->stop); i++) {
        if (i % 7 == 0) {
            (void)kvmesh_remove(r->S, r->sc, "race", 4);
            continue;
        }
        memset(v, (uint8_t)(i % 251 + 1), sizeof(v));
        if (kvmesh_put(r->S, r->sc, "race", 4, v, sizeof(v), NULL) == 0)
            atomic_fetch_add(&r->writes, 1);
    }
    return NULL;
}

static void check_race(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t first[BIG];
    memset(first, 0xfe, sizeof(first));
    put_at(S, sc, "race", first, sizeof(first)); /* (present when the race starts) */
    struct racer r = {.S = S, .sc = sc};
    atomic_init(&r.stop, false);
    atomic_init(&r.writes, 0);
    uint64_t end = env_clock_mono_ms() + RACE_LIMIT;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, race_writer, &r) == 0);
    static uint8_t out[BIG];
    int found = 0, absent = 0, other = 0;
    /* (until enough gets, whole values and rewrites, however the two threads were scheduled) */
    for (int i = 0; i < RACE_GETS || found < RACE_FOUND || atomic_load(&r.writes) < RACE_WRITES;
         i++) {
        CHECK(env_clock_mono_ms() < end);
        size_t got = 0;
        memset(out, 0, sizeof(out));
        int rc = kvmesh_get_into(C, sc, "race", 4, out, sizeof(out), &got);
        if (rc == KVMESH_ENOENT) {
            absent++;
            continue;
        }
        if (rc == KVMESH_EUNAVAILABLE || rc == KVMESH_ECHECKSUM) {
            /* every replica read lost its race with a rewrite (its slot reused): refused by
             * the checksum, never returned */
            other++;
            continue;
        }
        CHECK(rc == 0 && got == BIG && out[0] != 0);
        for (size_t k = 1; k < BIG; k++)
            CHECK(out[k] == out[0]); /* one whole written value, never a mix */
        found++;
    }
    atomic_store(&r.stop, true);
    CHECK(pthread_join(th, NULL) == 0);
    printf("race: %d gets found a whole value, %d absent, %d refused, %d writes\n", found, absent,
           other, atomic_load(&r.writes));
}

static kvmesh_t *open_rt(const char *url, bool storage)
{
    const char *const base[][2] = {{"transport", "tcp"},
                                   {"memory_size", storage ? "67108864" : "0"},
                                   {"segment_size", "67108864"},
                                   {"max_object_size", "1048576"},
                                   {"replicas", "1"},
                                   /* one authority per shard, its primary: a lookup asks the
                                    * primary alone (with mirrors, a mirror that owns the
                                    * replica may answer with its bytes first) */
                                   {"top_k", "1"},
                                   {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url}, {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    CHECK(kv);
    return kv;
}

/* Last: S2 joins; a 256 KiB value pinned to the storage runtime that is not its key's primary
 * (in C's view before and after the get) is read in 2 round trips. */
static void check_elsewhere(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc, const char *url)
{
    kvmesh_t *S2 = open_rt(url, true);
    kvm_rt_t *s1 = kvmesh_runtime_of(S), *s2 = kvmesh_runtime_of(S2);
    char hex[2][KVM_ID128_HEX_LEN + 1];
    kvm_id128_fmt(&s1->self.id, hex[0]);
    kvm_id128_fmt(&s2->self.id, hex[1]);
    static uint8_t v[BIG], out[BIG];
    int seen = 0;
    uint64_t end = env_clock_mono_ms() + 120000;
    for (int k = 0; seen < 2; k++) {
        CHECK(env_clock_mono_ms() < end);
        char key[32];
        snprintf(key, sizeof(key), "away-%d", k);
        fill(v, sizeof(v), (uint8_t)(0x90 + k));
        kvm_runtime_t p0, p1;
        size_t got = 0;
        /* (a first get gives C a view of the key's shard) */
        (void)kvmesh_get_into(C, sc, key, strlen(key), out, sizeof(out), &got);
        if (trt_primary_of(C, sc, key, &p0) != 0) {
            usleep(10000); /* (S2 joining: a shard may be unavailable for a moment) */
            continue;
        }
        bool prim_s1 = kvm_runtime_equal(&p0, &s1->self);
        if (!prim_s1 && !kvm_runtime_equal(&p0, &s2->self))
            continue;
        const char *pin[1] = {hex[prim_s1 ? 1 : 0]};
        kvmesh_put_opts_t o = {.preferred_owners = pin, .n_preferred = 1, .hard_pin = true};
        if (kvmesh_put(C, sc, key, strlen(key), v, sizeof(v), &o) != 0)
            continue;
        kvmesh_route_info_t ri;
        if (kvmesh_route_query(C, sc, key, strlen(key), &ri) != 0 || ri.n_replicas != 1 ||
            strcmp(ri.replicas[0].owner, pin[0]) != 0)
            continue;
        memset(out, 0, sizeof(out));
        trt_cp_t a = snap(C), d;
        int rc = kvmesh_get_into(C, sc, key, strlen(key), out, sizeof(out), &got);
        d = trt_cp_delta(a, snap(C));
        if (rc != 0 || trt_primary_of(C, sc, key, &p1) != 0 || !kvm_runtime_equal(&p0, &p1) ||
            d.lookup != 1)
            continue; /* (the view moved meanwhile, or a lookup retried: another key) */
        trt_cp_show(prim_s1 ? "get 256 KiB (owner S2, primary S)"
                            : "get 256 KiB (owner S, primary S2)",
                    &d);
        CHECK(got == sizeof(v) && memcmp(out, v, sizeof(v)) == 0);
        CHECK(d.payload == 1 && trt_cp_round_trips(&d) == 2 && d.checksums == 1);
        seen++;
    }
    kvmesh_close(S2);
}

int main(void)
{
    char url[64];
    snprintf(url, sizeof(url), "memory://getlarge-%ld", (long)getpid());
    kvmesh_t *S = open_rt(url, true), *C = open_rt(url, false);
    const kvmesh_scope_t sc = {"getlarge", NULL};

    /* Warm-up (not counted): until the client can write and read keys across the shards (the
     * shard primary acquires its leases right after start). Bounded: 120 s. */
    CHECK(trt_warm(&C, 1, &sc, 64, 120000) == 0);

    check_sizes(S, C, &sc);
    check_alloc(S, C, &sc);
    check_small_buffer(S, C, &sc);
    check_old_authority(S, C, &sc);
    check_raised_bound(S, C, &sc);
    check_race(S, C, &sc);
    check_stalled(S, C, &sc);
    check_elsewhere(S, C, &sc, url);
    check_corrupt(S, C, &sc); /* (last: C reports S, whose replica failed its checksum) */
    kvmesh_close(C);
    kvmesh_close(S);
    printf("large single gets within their bounds\n");
    return 0;
}
