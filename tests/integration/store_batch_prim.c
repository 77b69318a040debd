/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_batch_prim — batch puts at the primary (docs/store.md "Puts at the primary", "Batches"):
 * exact per-item results and every value read back, on a real tcp cluster in this process.
 *
 *   itest_store_batch_prim
 *
 * A storage runtime S (the only route authority at first) and a client-only runtime C on
 * embedded in-memory metadata, transport tcp, one replica, and a tenant "quoted" with a quota
 * policy. Cases, each one batch_put call from C, counted by C's critical-path families:
 *   mixed      items at the primary beside an item above the per-item bound (64 KiB + 1: the
 *              batched reservation), one at the bound, and items S declines (test hook
 *              kvm_put_primary_test_decline: the batched reservation and C's CAS): every item
 *              rc 0; one batch message + one batched reservation, one payload batch, one CAS batch
 *   bad sum    the first item's checksum spoiled in the message (kvm_put_inline_test_bad_sums):
 *              S refuses that item alone (KVMESH_ECHECKSUM, nothing published: no other owner
 *              exists), every other item is published; the refused key keeps its old value
 *   quota      a batch in the tenant with a quota: none goes at the primary (the claim needs the
 *              writer's flow): the batched reservation, payload and C's CAS
 *   old owner  S without the batch message's handler: the first batch is refused once
 *              (KVMESH_ENOTSUP) and goes the batched-reservation way at once, later ones do not
 *              send it again
 *   two owners a second storage runtime S2 joins: a batch whose keys' primaries (in C's view) are
 *              S and S2 sends one message to each, no CAS from C
 * After each case every value is read back byte for byte. Counts only; no timing asserted.
 * Every wait is bounded.
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
#include "net/rpc.h"
#include "obs/metrics.h"
#include "route/route.h"
#include "store/proto.h"
#include "store/put_inline.h"
#include "store/put_primary.h"
#include "store/store.h"
#include "tcheck.h"
#include "trt.h"

#define CHECK(c) TCHECK_FATAL(c)

#define N       48
#define VSIZE   4096
#define BIG     (STORE_PUT_PRIMARY_BATCH_ITEM_MAX + 1) /* above the per-item bound */
#define AT      STORE_PUT_PRIMARY_BATCH_ITEM_MAX       /* at the bound */
#define TENANT  "quoted"
#define DECLINE 3

struct cp {
    int64_t res, pay, look, cas, handoffs;
};

static int64_t rd(kvmesh_t *kv, const char *fam, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, i1, i2, &v) == 0);
    return v;
}

static struct cp snap(kvmesh_t *kv)
{
    unsigned op = OBS_OP_BATCH_PUT;
    return (struct cp){.res = rd(kv, "op_round_trips_total", op, OBS_CPSTAGE_RESERVE),
                       .pay = rd(kv, "op_round_trips_total", op, OBS_CPSTAGE_PAYLOAD),
                       .look = rd(kv, "op_round_trips_total", op, OBS_CPSTAGE_ROUTE_LOOKUP),
                       .cas = rd(kv, "op_round_trips_total", op, OBS_CPSTAGE_ROUTE_CAS),
                       .handoffs = rd(kv, "op_handoffs_total", op, OBS_NONE)};
}

static struct cp delta(struct cp a, struct cp b)
{
    return (struct cp){.res = b.res - a.res,
                       .pay = b.pay - a.pay,
                       .look = b.look - a.look,
                       .cas = b.cas - a.cas,
                       .handoffs = b.handoffs - a.handoffs};
}

/* Replicas the runtime published itself (kvmesh_replicas_published_total, ok). */
static int64_t published(kvmesh_t *kv)
{
    return rd(kv, "replicas_published_total", OBS_OUTCOME_OK, OBS_NONE);
}

static void show(const char *what, const struct cp *d)
{
    printf("%-32s reserve %" PRId64 ", payload %" PRId64 ", route_lookup %" PRId64
           ", route_cas %" PRId64 "; hand-offs %" PRId64 "\n",
           what, d->res, d->pay, d->look, d->cas, d->handoffs);
    fflush(stdout);
}

static kvmesh_t *open_rt(const char *url, bool storage)
{
    const char *const base[][2] = {{"transport", "tcp"},
                                   {"memory_size", storage ? "67108864" : "0"},
                                   {"segment_size", "67108864"},
                                   {"max_object_size", "1048576"},
                                   {"replicas", "1"},
                                   {"tenant_policies", TENANT ":1GiB:1000000"},
                                   {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url}, {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    CHECK(kv);
    return kv;
}

/* The batch's keys and values: key "<prefix>-<i>", value i of vlen[i] bytes of fill byte
 * (gen + i) with its last byte inverted. */
static char keys[N][32];
static size_t vlen[N];
static uint8_t *vals[N], *outs[N];

static void fill(const char *prefix, uint8_t gen, kvmesh_batch_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s-%zu", prefix, i);
        memset(vals[i], (uint8_t)(gen + i), vlen[i]);
        vals[i][vlen[i] - 1] = (uint8_t) ~(gen + i);
        items[i] = (kvmesh_batch_item_t){
            .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = vlen[i]};
    }
}

/* Reads every key of items back from C: item i must hold value `want[i]` (vlen[i] bytes), or
 * be absent where want[i] is NULL. */
static void read_back(kvmesh_t *C, const kvmesh_scope_t *sc, const kvmesh_batch_item_t *items,
                      size_t n, uint8_t *const *want)
{
    for (size_t i = 0; i < n; i++) {
        size_t got = 0;
        memset(outs[i], 0, AT + 1);
        int rc = kvmesh_get_into(C, sc, items[i].key, items[i].key_len, outs[i], AT + 1, &got);
        if (!want[i]) {
            CHECK(rc == KVMESH_ENOENT);
            continue;
        }
        if (rc != 0 || got != vlen[i] || memcmp(outs[i], want[i], vlen[i]) != 0)
            fprintf(stderr, "item %zu (%s): rc %d, %zu bytes of %zu\n", i, keys[i], rc, got,
                    vlen[i]);
        CHECK(rc == 0 && got == vlen[i] && memcmp(outs[i], want[i], vlen[i]) == 0);
    }
}

/* Runs fn on R's loop and waits for it (bounded). */
static void on_loop(kvmesh_t *R, void (*fn)(kvm_rt_t *rt, void *arg))
{
    CHECK(trt_on_loop(R, fn, NULL, 10000) == 0);
}

static void drop_batch_handler(kvm_rt_t *rt, void *arg)
{
    (void)arg;
    CHECK(rpc_register_handler(rt->ep, STORE_RPC_PUT_PRIMARY_BATCH, NULL, NULL) == 0);
}

/* Puts the batch from C until every item succeeded (a shard may be unavailable for a moment
 * while leases settle). Bounded: 120 s. */
static void put_all(kvmesh_t *C, const kvmesh_scope_t *sc, kvmesh_batch_item_t *items, size_t n)
{
    uint64_t end = env_clock_mono_ms() + 120000;
    while (kvmesh_batch_put(C, sc, items, n, NULL) != 0) {
        CHECK(env_clock_mono_ms() < end);
        usleep(50 * 1000);
    }
}

int main(void)
{
    char url[64];
    snprintf(url, sizeof(url), "memory://batchprim-%ld", (long)getpid());
    kvmesh_t *S = open_rt(url, true), *C = open_rt(url, false);
    const kvmesh_scope_t sc = {"bprim", NULL}, sq = {TENANT, NULL};
    for (int i = 0; i < N; i++) {
        vlen[i] = VSIZE;
        CHECK((vals[i] = malloc(AT + 1)) != NULL && (outs[i] = malloc(AT + 1)) != NULL);
    }
    kvmesh_batch_item_t items[N];
    uint8_t *want[N];
    struct cp a, d;

    /* warm-up (not counted): every key of the batch written once, so C has a view of each
     * key's shard and a route hint */
    fill("k", 1, items, N);
    put_all(C, &sc, items, N);
    read_back(C, &sc, items, N, vals);

    /* ---- all at the primary: one message, no CAS from C ---- */
    fill("k", 2, items, N);
    int64_t ps = published(S), pc = published(C);
    a = snap(C);
    CHECK(kvmesh_batch_put(C, &sc, items, N, NULL) == 0);
    d = delta(a, snap(C));
    show("batch at the primary", &d);
    CHECK(d.res == 1 && d.pay == 0 && d.look == 0 && d.cas == 0 && d.handoffs == 1);
    CHECK(published(S) - ps == N && published(C) == pc); /* S published every item */
    read_back(C, &sc, items, N, vals);

    /* ---- mixed: above the bound, at the bound, declined ---- */
    vlen[N - 1] = BIG;
    vlen[N - 2] = AT;
    fill("k", 3, items, N);
    kvm_put_primary_test_decline(DECLINE);
    a = snap(C);
    CHECK(kvmesh_batch_put(C, &sc, items, N, NULL) == 0);
    d = delta(a, snap(C));
    show("batch mixed", &d);
    CHECK(kvm_put_primary_test_decline(0) == 0); /* (every decline was taken) */
    for (int i = 0; i < N; i++)
        CHECK(items[i].rc == 0);
    /* the message and the big item's reservation; then one batched reservation of the declined
     * items (after the answer), their payloads (unregistered buffers: transport rounds of 16
     * items, data.c DATA_CHUNK; the declined items are in the first, the big one in the third)
     * and one CAS batch for the four */
    CHECK(d.res == 3 && d.pay == 2 && d.look == 0 && d.cas == 1 && d.handoffs == 2);
    read_back(C, &sc, items, N, vals);

    /* ---- bad sum: the first item alone refused ---- */
    vlen[N - 1] = VSIZE; /* (every item at the primary) */
    vlen[N - 2] = VSIZE;
    static uint8_t old0[VSIZE];
    memcpy(old0, vals[0], VSIZE);
    fill("k", 4, items, N);
    kvm_put_inline_test_bad_sums(1);
    a = snap(C);
    int rc = kvmesh_batch_put(C, &sc, items, N, NULL);
    d = delta(a, snap(C));
    show("batch, one bad checksum", &d);
    CHECK(kvm_put_inline_test_bad_sums(0) == 0);
    printf("item 0: %s\n", kvmesh_strerror(items[0].rc));
    CHECK(rc == KVMESH_ECHECKSUM && items[0].rc == KVMESH_ECHECKSUM);
    for (int i = 1; i < N; i++)
        CHECK(items[i].rc == 0);
    CHECK(d.res == 1 && d.pay == 0 && d.cas == 0 && d.handoffs == 1);
    for (int i = 0; i < N; i++)
        want[i] = vals[i];
    want[0] = old0; /* nothing of it was published */
    read_back(C, &sc, items, N, want);

    /* ---- quota: the tenant's batch takes C's own path ---- */
    fill("q", 5, items, N);
    put_all(C, &sq, items, N); /* (new keys: C's views of their shards) */
    fill("q", 6, items, N);
    ps = published(S);
    pc = published(C);
    a = snap(C);
    CHECK(kvmesh_batch_put(C, &sq, items, N, NULL) == 0);
    d = delta(a, snap(C));
    show("batch with quota", &d);
    /* reservations (the quota's flow), payloads and C's CAS: C published every item, S none */
    CHECK(d.res >= 1 && d.pay >= 1 && d.cas >= 1 && d.handoffs == 2);
    CHECK(published(C) - pc == N && published(S) == ps);
    read_back(C, &sq, items, N, vals);

    /* ---- old owner: refused once, then not sent ---- */
    on_loop(S, drop_batch_handler);
    for (int round = 0; round < 2; round++) {
        fill("k", (uint8_t)(7 + round), items, N);
        a = snap(C);
        CHECK(kvmesh_batch_put(C, &sc, items, N, NULL) == 0);
        d = delta(a, snap(C));
        show(round ? "batch, old owner (known)" : "batch, old owner (refused)", &d);
        /* (unregistered buffers: a transport round per 16 items, data.c DATA_CHUNK) */
        CHECK(d.res == (round ? 1 : 2) && d.pay == (N + 15) / 16 && d.look == 0 && d.cas == 1 &&
              d.handoffs == 2);
        read_back(C, &sc, items, N, vals);
    }

    /* ---- two owners: S2 joins; C's views name S for some keys and S2 for others ---- */
    kvmesh_t *S2 = open_rt(url, true);
    kvm_rt_t *s1 = kvmesh_runtime_of(S), *s2 = kvmesh_runtime_of(S2);
    bool exact = false;
    uint64_t end = env_clock_mono_ms() + 120000;
    for (int t = 0; !exact; t++) {
        CHECK(env_clock_mono_ms() < end);
        int on1 = 0, on2 = 0;
        for (int i = 0; i < N; i++) {
            kvm_runtime_t p;
            if (trt_primary_of(C, &sc, keys[i], &p) != 0)
                continue;
            on1 += kvm_runtime_equal(&p, &s1->self);
            on2 += kvm_runtime_equal(&p, &s2->self);
        }
        fill("t", (uint8_t)(110 + t % 100), items, N);
        int64_t p2 = published(S2);
        pc = published(C);
        a = snap(C);
        rc = kvmesh_batch_put(C, &sc, items, N, NULL);
        d = delta(a, snap(C));
        if (rc != 0) { /* (S2 joining: a shard may be unavailable for a moment) */
            usleep(50 * 1000);
            continue;
        }
        read_back(C, &sc, items, N, vals);
        if (on1 + on2 < N || on1 == 0 || on2 == 0)
            continue; /* (not every view known yet, or one runtime primary of them all) */
        show("batch, two primaries", &d);
        printf("  %d keys with primary S (published by C), %d with primary S2 (published by S2: "
               "%" PRId64 ")\n",
               on1, on2, published(S2) - p2);
        /* S still refuses the message (its handler was dropped above): its items take C's
         * batched reservation, payload and CAS; S2's go at the primary in one message */
        exact = d.res == 2 && d.pay >= 1 && d.cas == 1 && d.handoffs == 2 &&
                published(S2) - p2 == on2 && published(C) - pc == on1;
        if (!exact)
            usleep(50 * 1000); /* (a view moved meanwhile: again) */
    }
    kvmesh_close(S2);
    kvmesh_close(C);
    kvmesh_close(S);
    for (int i = 0; i < N; i++) {
        free(vals[i]);
        free(outs[i]);
    }
    printf("batch puts at the primary: every per-item result exact, every value read back\n");
    return 0;
}
