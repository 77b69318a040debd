/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_get_batch_inline — batch gets over tcp whose items' bytes come with the lookups' answers:
 * one exchange per route authority when the authority owns the items' replicas (docs/store.md
 * "Inline reads", "Batch gets"; docs/performance.md "4 KiB batch gets in one exchange").
 *
 *   itest_store_get_batch_inline
 *
 * Runtimes in this process on embedded in-memory metadata, default route mode (EmbeddedWrh),
 * top_k 1 (each shard's one authority is its primary), transport tcp: a storage runtime S (the
 * only route authority, the owner of every replica) and a client-only runtime C; last a second
 * storage runtime S2. Every count is read from C's kvmesh_op_* families for batch_get (round
 * trips by stage, hand-offs, checksum passes) and kvmesh_transport_operations_total (tcp reads:
 * an item served inline counts as one, as a transport READ does); no timing is asserted and
 * every wait is bounded.
 *   - 128 x 4 KiB, every key at S: 1 round trip (the lookups' batch), no payload exchange, 128
 *     tcp reads counted, 128 checksum passes, every value byte for byte; every item's bytes in
 *     the answer batch's attachment (S's att_items_batched, C's att_items_taken: 128 a call);
 *     with verify_reads never at C none attached (the bytes in the answers), still 1 round trip;
 *   - past the bound: 24 x 64 KiB (1.5 MiB, over KVM_GET_INLINE_BATCH_MAX): the first 16 items
 *     inline, the other 8 read from the replica: 2 round trips, every value exact; 2 x 128 KiB
 *     (over KVM_GET_INLINE_BATCH_ITEM_MAX): 2, exact;
 *   - an authority that declines (S with inline_read_max 0, as one that predates inline reads
 *     answers) or is bounded below the items (2 KiB): 2 round trips, every value exact; with S
 *     current again, 1;
 *   - item results exact: a missing key KVMESH_ENOENT, a buffer smaller than its value
 *     KVMESH_ETOOBIG with its size and the buffer untouched, the others exact, in one batch;
 *   - with S2: keys whose primary is S or S2 (one batch message to each authority) in 1 round
 *     trip; keys pinned to the storage runtime that is not their primary read from their owners
 *     (a payload round more: one READ batch per owner); last, one corrupted replica (a byte of
 *     its slot flipped) refused (KVMESH_ECHECKSUM) while the others of the same batch are exact.
 */
#include <inttypes.h>
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

#define KIB   1024
#define NMAX  128
#define SMALL (4 * KIB)
#define MID   (64 * KIB) /* KVM_GET_INLINE_BATCH_ITEM_MAX */
#define N_MID 24         /* 1.5 MiB of MID items: past KVM_GET_INLINE_BATCH_MAX */

_Static_assert(MID == KVM_GET_INLINE_BATCH_ITEM_MAX, "the item bound");
_Static_assert(KVM_GET_INLINE_BATCH_MAX / MID < N_MID, "past the batch bound");

static trt_cp_t snap(kvmesh_t *kv)
{
    return trt_cp_snap(kv, OBS_OP_BATCH_GET);
}

/* A value of size bytes, distinct per (size, b). */
static void fill(uint8_t *v, size_t size, uint8_t b)
{
    for (size_t i = 0; i < size; i++)
        v[i] = (uint8_t)(b + i * 7 + (i >> 12));
}

/* Puts key at R (R owns it, its shard primary when R is). Retried, bounded, while the key's
 * shard is unavailable or slow (S2 joining moves shard primaries). */
static void put_at(kvmesh_t *R, const kvmesh_scope_t *sc, const char *key, const uint8_t *v,
                   size_t size, const kvmesh_put_opts_t *o)
{
    uint64_t end = env_clock_mono_ms() + 120000;
    int rc;
    while ((rc = kvmesh_put(R, sc, key, strlen(key), v, size, o)) != 0) {
        CHECK(rc == KVMESH_EUNAVAILABLE || rc == KVMESH_ETIMEDOUT);
        CHECK(env_clock_mono_ms() < end);
        usleep(50 * 1000);
    }
}

/* n keys "<prefix>-<i>" of size bytes each, put at S; their values in vals (n * size). */
static void put_keys(kvmesh_t *S, const kvmesh_scope_t *sc, const char *prefix, int n, size_t size,
                     uint8_t *vals, char keys[][32])
{
    for (int i = 0; i < n; i++) {
        snprintf(keys[i], 32, "%s-%d", prefix, i);
        fill(vals + (size_t)i * size, size, (uint8_t)(i * 13 + size / KIB));
        put_at(S, sc, keys[i], vals + (size_t)i * size, size, NULL);
    }
}

/* A batch get of keys[0..n) into buffers of size bytes each; every item exact. Returns the
 * counts. A first batch get of the same keys, not counted, gives C views of their shards (a
 * shard's first lookup takes a round more). */
/* batch_exact with `sums` checksum passes expected (n: every item verified, 0: none). */
static trt_cp_t batch_exact_sums(kvmesh_t *C, const kvmesh_scope_t *sc, char keys[][32], int n,
                                 size_t size, const uint8_t *vals, const char *what, int sums)
{
    kvmesh_batch_item_t *it = calloc((size_t)n, sizeof(*it));
    uint8_t *out = calloc((size_t)n, size);
    CHECK(it && out);
    for (int i = 0; i < n; i++)
        it[i] = (kvmesh_batch_item_t){
            .key = keys[i], .key_len = strlen(keys[i]), .buf = out + (size_t)i * size, .len = size};
    CHECK(kvmesh_batch_get(C, sc, it, (size_t)n) == 0); /* (views) */
    memset(out, 0, (size_t)n * size);
    trt_cp_t a = snap(C), d;
    CHECK(kvmesh_batch_get(C, sc, it, (size_t)n) == 0);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show(what, &d);
    for (int i = 0; i < n; i++) {
        CHECK(it[i].rc == 0 && it[i].out_len == size);
        CHECK(memcmp(out + (size_t)i * size, vals + (size_t)i * size, size) == 0);
    }
    CHECK(d.reserve == 0 && d.cas == 0 && d.handoffs == 1);
    CHECK(d.checksums == sums); /* one pass per item, inline or read (when verified) */
    CHECK(d.reads == n);        /* each item one tcp read (inline ones counted as such) */
    CHECK(d.lookup == 1);       /* the lookups of one window: one batch message per authority */
    free(it);
    free(out);
    return d;
}

static trt_cp_t batch_exact(kvmesh_t *C, const kvmesh_scope_t *sc, char keys[][32], int n,
                            size_t size, const uint8_t *vals, const char *what)
{
    return batch_exact_sums(C, sc, keys, n, size, vals, what, n);
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

static void set_verify(kvm_rt_t *rt, void *arg)
{
    rt->cfg.verify_reads = *(enum kvm_verify_reads *)arg;
}

static void read_route_stats(kvm_rt_t *rt, void *arg)
{
    route_get_stats(rt->route, arg); /* (the service's fields: read on its loop) */
}

/* The READ answers R's authority sent in an answer batch's attachment, and those whose bytes
 * R's client took from one (route.h route_stats_t). */
static void att_counts(kvmesh_t *R, uint64_t *batched, uint64_t *taken)
{
    route_stats_t st;
    on_loop(R, read_route_stats, &st);
    *batched = st.att_items_batched;
    *taken = st.att_items_taken;
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void check_all_inline(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static char keys[NMAX][32];
    static uint8_t vals[NMAX * SMALL];
    put_keys(S, sc, "small", NMAX, SMALL, vals, keys);
    uint64_t sb0, st0, cb0, ct0, sb1, st1, cb1, ct1;
    att_counts(S, &sb0, &st0);
    att_counts(C, &cb0, &ct0);
    trt_cp_t d = batch_exact(C, sc, keys, NMAX, SMALL, vals, "batch_get 128 x 4 KiB");
    CHECK(d.payload == 0 &&
          trt_cp_round_trips(&d) == 1); /* one exchange: the bytes came with the routes */
    /* (batch_exact gets twice: the first call, uncounted above, settles the views) every item's
     * bytes went in the answer batch's attachment, copied once at S, and C took each slice */
    att_counts(S, &sb1, &st1);
    att_counts(C, &cb1, &ct1);
    printf("attached answers: S sent %" PRIu64 ", C took %" PRIu64 "\n", sb1 - sb0, ct1 - ct0);
    CHECK(sb1 - sb0 == 2 * NMAX && ct1 - ct0 == 2 * NMAX && cb1 == cb0 && st1 == st0);

    /* verify_reads never at C: its items do not ask for the attached form (the bytes come in
     * the answers themselves: one exchange still, nothing attached) */
    enum kvm_verify_reads never = KVM_VERIFY_NEVER, was = kvmesh_runtime_of(C)->cfg.verify_reads;
    on_loop(C, set_verify, &never);
    d = batch_exact_sums(C, sc, keys, NMAX, SMALL, vals,
                         "batch_get 128 x 4 KiB (verify_reads never)", 0);
    CHECK(d.payload == 0 && trt_cp_round_trips(&d) == 1);
    att_counts(S, &sb0, &st0);
    att_counts(C, &cb0, &ct0);
    CHECK(sb0 == sb1 && ct0 == ct1);
    on_loop(C, set_verify, &was);
}

static void check_bounds(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static char keys[N_MID][32];
    static uint8_t vals[N_MID * MID];
    put_keys(S, sc, "mid", N_MID, MID, vals, keys);
    /* 16 inline (1 MiB), the rest read from the replica: the lookup, then one payload round */
    trt_cp_t d = batch_exact(C, sc, keys, N_MID, MID, vals, "batch_get 24 x 64 KiB (past 1 MiB)");
    CHECK(d.payload == 1 && trt_cp_round_trips(&d) == 2);
    /* the first 16 alone: within the bound, one exchange */
    d = batch_exact(C, sc, keys, (int)(KVM_GET_INLINE_BATCH_MAX / MID), MID, vals,
                    "batch_get 16 x 64 KiB (1 MiB)");
    CHECK(d.payload == 0 && trt_cp_round_trips(&d) == 1);
    static char bkeys[2][32];
    static uint8_t bvals[2 * 2 * MID];
    put_keys(S, sc, "big", 2, 2 * MID, bvals, bkeys);
    d = batch_exact(C, sc, bkeys, 2, 2 * MID, bvals, "batch_get 2 x 128 KiB (items past 64 KiB)");
    CHECK(d.payload == 1 && trt_cp_round_trips(&d) == 2);
}

static void check_declining(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static char keys[16][32];
    static uint8_t vals[16 * SMALL];
    put_keys(S, sc, "decl", 16, SMALL, vals, keys);
    uint32_t was = kvmesh_runtime_of(S)->cfg.inline_read_max, off = 0, low = 2 * KIB;
    on_loop(S, set_read_max, &off); /* answers as an authority that predates inline reads */
    trt_cp_t d = batch_exact(C, sc, keys, 16, SMALL, vals, "batch_get 16 x 4 KiB (S declines)");
    CHECK(d.payload == 1 && trt_cp_round_trips(&d) == 2);
    on_loop(S, set_read_max, &low);
    d = batch_exact(C, sc, keys, 16, SMALL, vals, "batch_get 16 x 4 KiB (S bounded at 2 KiB)");
    CHECK(d.payload == 1 && trt_cp_round_trips(&d) == 2);
    on_loop(S, set_read_max, &was);
    d = batch_exact(C, sc, keys, 16, SMALL, vals, "batch_get 16 x 4 KiB (S current again)");
    CHECK(d.payload == 0 && trt_cp_round_trips(&d) == 1);
}

/* A missing key and a buffer smaller than its value beside exact items. */
static void check_item_results(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static char keys[8][32];
    static uint8_t vals[8 * SMALL], out[8 * SMALL];
    put_keys(S, sc, "res", 8, SMALL, vals, keys);
    kvmesh_batch_item_t it[10];
    for (int i = 0; i < 8; i++)
        it[i] = (kvmesh_batch_item_t){
            .key = keys[i], .key_len = strlen(keys[i]), .buf = out + i * SMALL, .len = SMALL};
    static uint8_t small[SMALL / 2];
    memset(small, 0xcc, sizeof(small));
    it[3].buf = small; /* (keys[3]'s value is SMALL bytes) */
    it[3].len = sizeof(small);
    it[8] = (kvmesh_batch_item_t){.key = "res-missing", .key_len = 11, .buf = out, .len = SMALL};
    it[9] = it[0]; /* the same key twice */
    static uint8_t twice[SMALL];
    it[9].buf = twice;
    memset(out, 0, sizeof(out));
    trt_cp_t a = snap(C), d;
    int rc = kvmesh_batch_get(C, sc, it, 10);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("batch_get 10 (missing, short buffer, twice)", &d);
    CHECK(rc == KVMESH_ETOOBIG); /* the first failing item's */
    for (int i = 0; i < 8; i++) {
        if (i == 3) {
            CHECK(it[i].rc == KVMESH_ETOOBIG && it[i].out_len == SMALL);
            for (size_t k = 0; k < sizeof(small); k++)
                CHECK(small[k] == 0xcc);
            continue;
        }
        CHECK(it[i].rc == 0 && it[i].out_len == SMALL);
        CHECK(memcmp(out + i * SMALL, vals + i * SMALL, SMALL) == 0);
    }
    CHECK(it[8].rc == KVMESH_ENOENT);
    CHECK(it[9].rc == 0 && it[9].out_len == SMALL && memcmp(twice, vals, SMALL) == 0);
    CHECK(d.lookup == 1 && d.payload == 0 && trt_cp_round_trips(&d) == 1);
    CHECK(d.checksums == 8 && d.reads == 8); /* 7 + the key twice; none for the two others */
}

static kvmesh_t *open_rt(const char *url, bool storage)
{
    const char *const base[][2] = {{"transport", "tcp"},
                                   {"memory_size", storage ? "67108864" : "0"},
                                   {"segment_size", "67108864"},
                                   {"max_object_size", "1048576"},
                                   {"replicas", "1"},
                                   /* one authority per shard, its primary: a lookup asks the
                                    * primary alone */
                                   {"top_k", "1"},
                                   {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url}, {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    CHECK(kv);
    return kv;
}

#define N_TWO   8 /* keys on their primaries, of S and of S2 */
#define N_AWAY  2 /* keys pinned off their primary */
#define N_MIXED (N_TWO + N_AWAY)

/* Last: S2 joins. Keys on their primaries at S and at S2 (two authorities: one batch message to
 * each) in 1 round trip; keys pinned to the runtime that is not their primary read from their
 * owners (2); then one corrupted replica refused while the rest of the batch is exact. */
static void check_two_authorities(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc,
                                  const char *url)
{
    kvmesh_t *S2 = open_rt(url, true);
    kvmesh_t *R[2] = {S, S2};
    kvm_rt_t *rr[2] = {kvmesh_runtime_of(S), kvmesh_runtime_of(S2)};
    char hex[2][KVM_ID128_HEX_LEN + 1];
    kvm_id128_fmt(&rr[0]->self.id, hex[0]);
    kvm_id128_fmt(&rr[1]->self.id, hex[1]);
    static char keys[N_MIXED][32];
    static uint8_t vals[N_MIXED * SMALL], out[N_MIXED * SMALL];
    int prim[N_MIXED]; /* which runtime is the key's primary */
    uint64_t end = env_clock_mono_ms() + 120000;
    int k = 0;
    /* (S2 takes over its shards for a while after it joined: keys are placed again, new ones,
     * until none of the placed ones' primaries moved before they were read) */
    for (int round = 0;; round++) {
        int at_prim[2] = {0, 0}, n = 0;
        for (; n < N_MIXED; k++) {
            CHECK(env_clock_mono_ms() < end);
            char key[32];
            snprintf(key, sizeof(key), "two-%d", k);
            uint8_t probe[8];
            size_t got = 0;
            (void)kvmesh_get_into(C, sc, key, strlen(key), probe, sizeof(probe), &got); /* view */
            kvm_runtime_t p;
            if (trt_primary_of(C, sc, key, &p) != 0) {
                usleep(10000); /* (S2 joining: a shard may be unavailable for a moment) */
                continue;
            }
            int pi = kvm_runtime_equal(&p, &rr[0]->self)   ? 0
                     : kvm_runtime_equal(&p, &rr[1]->self) ? 1
                                                           : -1;
            bool want_away = n >= N_TWO; /* the first N_TWO on their primaries, half at each */
            if (pi < 0 || (!want_away && at_prim[pi] >= N_TWO / 2))
                continue;
            const char *pin[1] = {hex[want_away ? 1 - pi : pi]};
            kvmesh_put_opts_t o = {.preferred_owners = pin, .n_preferred = 1, .hard_pin = true};
            fill(vals + (size_t)n * SMALL, SMALL, (uint8_t)(0x40 + k));
            if (kvmesh_put(C, sc, key, strlen(key), vals + (size_t)n * SMALL, SMALL, &o) != 0)
                continue;
            kvmesh_route_info_t ri;
            if (kvmesh_route_query(C, sc, key, strlen(key), &ri) != 0 || ri.n_replicas != 1 ||
                strcmp(ri.replicas[0].owner, pin[0]) != 0)
                continue;
            snprintf(keys[n], sizeof(keys[n]), "%s", key);
            prim[n] = pi;
            if (!want_away)
                at_prim[pi]++;
            n++;
        }
        kvmesh_batch_item_t it[N_MIXED];
        for (int i = 0; i < N_MIXED; i++)
            it[i] = (kvmesh_batch_item_t){.key = keys[i],
                                          .key_len = strlen(keys[i]),
                                          .buf = out + (size_t)i * SMALL,
                                          .len = SMALL};
        memset(out, 0, sizeof(out));
        trt_cp_t a = snap(C), d;
        CHECK(kvmesh_batch_get(C, sc, it, N_TWO) == 0);
        d = trt_cp_delta(a, snap(C));
        for (int i = 0; i < N_TWO; i++)
            CHECK(it[i].rc == 0 && memcmp(out + i * SMALL, vals + i * SMALL, SMALL) == 0);
        bool moved = false;
        for (int i = 0; i < N_MIXED; i++) {
            kvm_runtime_t p;
            moved |= trt_primary_of(C, sc, keys[i], &p) != 0 ||
                     !kvm_runtime_equal(&p, &rr[prim[i]]->self);
        }
        if (moved || d.lookup != 1) {
            printf("(round %d: %s, %" PRId64 " lookup rounds: placed again)\n", round,
                   moved ? "a primary moved" : "a lookup retried", d.lookup);
            usleep(200 * 1000);
            continue;
        }
        /* the keys on their primaries: one exchange with each authority, in parallel */
        trt_cp_show("batch_get 8 x 4 KiB (at S and at S2)", &d);
        CHECK(d.payload == 0 && trt_cp_round_trips(&d) == 1 && d.reads == N_TWO &&
              d.checksums == N_TWO);
        /* the whole mixed batch: the two off their primaries take a payload round */
        a = snap(C);
        memset(out, 0, sizeof(out));
        CHECK(kvmesh_batch_get(C, sc, it, N_MIXED) == 0);
        d = trt_cp_delta(a, snap(C));
        trt_cp_show("batch_get 10 x 4 KiB (2 off their primary)", &d);
        for (int i = 0; i < N_MIXED; i++)
            CHECK(it[i].rc == 0 && memcmp(out + i * SMALL, vals + i * SMALL, SMALL) == 0);
        /* (one READ batch per owner: the two may be at S and at S2) */
        CHECK(d.payload >= 1 && d.payload <= N_AWAY && d.lookup >= 1);
        CHECK(d.reads == N_MIXED && d.checksums == N_MIXED);
        break;
    }
    /* one replica on its primary corrupted: refused (its inline bytes and its READ fail their
     * checksum), every other item exact */
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(C, sc, keys[1], strlen(keys[1]), &ri) == 0 && ri.n_replicas == 1);
    int owner = strcmp(ri.replicas[0].owner, hex[0]) == 0 ? 0 : 1;
    /* (through the segment's memfd: trt_flip_byte) */
    uint64_t seg = ri.replicas[0].segment, off = ri.replicas[0].offset + 100;
    CHECK(trt_flip_byte(R[owner], seg, off) == 0);
    kvmesh_batch_item_t it[N_MIXED];
    for (int i = 0; i < N_MIXED; i++)
        it[i] = (kvmesh_batch_item_t){.key = keys[i],
                                      .key_len = strlen(keys[i]),
                                      .buf = out + (size_t)i * SMALL,
                                      .len = SMALL};
    memset(out, 0, sizeof(out));
    trt_cp_t a = snap(C), d;
    int rc = kvmesh_batch_get(C, sc, it, N_MIXED);
    d = trt_cp_delta(a, snap(C));
    trt_cp_show("batch_get 10 x 4 KiB (one corrupted replica)", &d);
    CHECK(rc == KVMESH_ECHECKSUM && it[1].rc == KVMESH_ECHECKSUM);
    for (int i = 0; i < N_MIXED; i++)
        CHECK(i == 1 || (it[i].rc == 0 && memcmp(out + i * SMALL, vals + i * SMALL, SMALL) == 0));
    CHECK(d.payload >= 1);                         /* (the corrupted item's READs) */
    CHECK(trt_flip_byte(R[owner], seg, off) == 0); /* restored */
    kvmesh_close(S2);
}

int main(void)
{
    char url[64];
    snprintf(url, sizeof(url), "memory://getbatchinl-%ld", (long)getpid());
    kvmesh_t *S = open_rt(url, true), *C = open_rt(url, false);
    const kvmesh_scope_t sc = {"getbatchinl", NULL};

    /* Warm-up (not counted): until the client can write and read keys across the shards (the
     * shard primary acquires its leases right after start). Bounded: 120 s. */
    uint64_t end = env_clock_mono_ms() + 120000;
    for (int k = 0; k < 64; k++) {
        char key[32];
        snprintf(key, sizeof(key), "warm-%d", k);
        uint8_t v[64] = {(uint8_t)k}, out[64];
        size_t got = 0;
        while (kvmesh_put(C, &sc, key, strlen(key), v, sizeof(v), NULL) != 0 ||
               kvmesh_get_into(C, &sc, key, strlen(key), out, sizeof(out), &got) != 0) {
            CHECK(env_clock_mono_ms() < end);
            usleep(100 * 1000);
        }
    }

    check_all_inline(S, C, &sc);
    check_bounds(S, C, &sc);
    check_declining(S, C, &sc);
    check_item_results(S, C, &sc);
    check_two_authorities(S, C, &sc, url); /* (last: C reports the corrupted replica's owner) */
    kvmesh_close(C);
    kvmesh_close(S);
    printf("batch gets with inline reads within their bounds\n");
    return 0;
}
