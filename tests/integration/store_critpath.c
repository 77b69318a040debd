/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_critpath — the critical-path counts of each operation kind, pinned on a real cluster
 * (docs/operations.md "Critical-path counters", docs/performance.md).
 *
 *   itest_store_critpath tcp|shm
 *
 * Two runtimes in this process on embedded in-memory metadata, default route mode
 * (EmbeddedWrh), the given data-plane transport: a storage runtime S (the only route authority:
 * a client-only runtime is not route-capable) and a client-only runtime C, so from C every
 * replica and every route authority is remote, and from S both are local (co-located). Each
 * case runs one API call and reads the deltas of the kvmesh_op_* families from the calling
 * runtime's registry: round trips by stage, loop hand-offs, payload copies by transport,
 * checksum passes. The deterministic stages (reservation, payload, hand-offs, copies,
 * checksums) are asserted exactly; single route lookups and CAS are asserted >= 1 (they must
 * reach S) and bounded with the total (a route attempt may be retried on a stale view); a
 * 128-item batch's route CAS and lookups go as one route batch message to S (route.h
 * route_batch_begin), asserted exactly where every shard view is current. The bounds are the
 * issue's goals.
 * Hand-offs count every op handed to the client's loop, whether the loop thread ran it or the
 * calling thread led the loop itself (docs/architecture.md "Threads"); the led ones
 * (op_loop_leads_total) are a part of them that depends on timing, so only the total is pinned.
 * Inline reads (docs/store.md "Inline reads"): over tcp a single get of a value up to
 * inline_read_max (256 KiB default) takes its payload from the lookup's answer, as S is both
 * the authority and the owner: 1 round trip and no transport READ (counted by C's
 * kvmesh_transport_operations_total); a larger value still takes 2; 64 KiB and a value at the
 * bound 1. Over shm no inline bytes are asked for (the reads are shared-memory copies).
 * A 128-item 4 KiB batch get over tcp takes the bytes with the lookups' answers likewise (S is the
 * primary and the owner of every key): 1 round trip, 128 tcp reads counted, no transport READ.
 * Inline writes (docs/store.md "Inline writes"): over tcp a single put of a value up to
 * inline_write_max (64 KiB default) from C sends it with the reservation to S: 2 round trips
 * (reserve, route CAS) and no transport WRITE; a larger value still takes 3; over shm the
 * reservation is plain and the payload a shared-memory copy: a put above
 * STORE_PUT_PRIMARY_SHM_MAX (16 KiB, 64 KiB, 256 KiB, 1 MiB) is exactly 2 round trips (reserve,
 * C's route CAS) and 2 hand-offs, new key and overwrite alike. An owner that predates inline
 * writes (S with its STORE_RPC_RESERVE_INLINE handler removed: the RPC layer answers
 * KVMESH_ENOTSUP) still takes the put: the first one sends the plain reservation after the
 * refusal and the payload by a transport WRITE, later ones the plain reservation at once.
 * Puts at the primary (docs/store.md "Puts at the primary"): over tcp a single put of a value up
 * to inline_write_max whose owner S is also the key's shard primary (C's route view says so) is
 * one exchange: S reserves, writes and publishes (1 round trip, 1 hand-off, no route CAS from
 * C). Where S declines (test hook: as if no longer the primary) C falls back to the inline
 * reservation and its own CAS; an owner without the message's handler (older) answers
 * KVMESH_ENOTSUP once and is sent the inline reservation from then on (the old counts); a value
 * above the bound takes 3 round trips as before. Four threads of C put one key at once while a
 * fifth reads it: every put succeeds, every read is one whole written value, a last put is what
 * is read back, and S holds no reservation after. With a second storage runtime S2, a put whose
 * owner is not the key's primary in C's view takes the normal path (reservation + C's CAS).
 * Batch puts at the primary (docs/store.md "Puts at the primary", "Batches"): over tcp a
 * 128 x 4 KiB overwrite whose owner S is every key's shard primary is one exchange (one
 * STORE_RPC_PUT_PRIMARY_BATCH: reserve 1, no payload, no CAS from C) and one hand-off, also over
 * versions S wrote; over shm the batch keeps the batched reservation, the shared-memory copies
 * and C's CAS batch (2).
 * Batched COMMIT / RELEASE (docs/store.md "Batched COMMIT and RELEASE"): a 128-item batch put's
 * notifications reach the owner S as one message, not 128 or 256 notifications; an S without
 * the message's handler (older) still gets every COMMIT, one by one (over tcp S declines those
 * batches at the primary by the test hook, so C's own publication path runs). A race:
 * S overwrites and removes one key in a thread, and writes more filler bytes than it holds (so
 * it evicts), while C gets the key; every answer C returns is one whole written value (no torn
 * or mixed bytes) or absent.
 * No timing is asserted. Every wait is bounded.
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
#include "obs/metrics.h"
#include "net/rpc.h"
#include "route/route.h"
#include "store/proto.h"
#include "store/put_inline.h"
#include "store/put_primary.h"
#include "store/slot_batch.h"
#include "store/slot_core.h"
#include "store/store.h"
#include "tcheck.h"
#include "trt.h"

#define CHECK(c) TCHECK_FATAL(c)

#define BATCH          128
#define VSIZE          4096
#define INLINE_DEFAULT (64 * 1024)  /* inline_write_max's default */
#define READ_INLINE    (256 * 1024) /* inline_read_max's default (store_get_large: more) */
#define RACE_SIZE      8192
#define RACE_GETS      400
#define FILL_SIZE      (512 * 1024)
#define FILL_KEYS      200 /* 100 MiB of fillers into the 64 MiB of S */

/* Bounds on the round trips of one call (goal from the issue, or today's count where the goal
 * is not reached yet). */
#define BOUND_GET_REMOTE        2 /* goal <= 2 */
#define BOUND_GET_INLINE        1 /* tcp, value <= inline_read_max, the authority owns the replica */
#define BOUND_GET_LOCAL         1 /* goal <= 1 co-located */
#define BOUND_PUT               3 /* goal <= 3: reserve + payload + CAS (no lookup: route hint) */
#define BOUND_PUT_INLINE        2 /* tcp, value <= inline_write_max: reserve with the bytes + CAS */
#define BOUND_PUT_PRIMARY       1 /* tcp, value <= inline_write_max, the owner is the shard primary */
#define BOUND_BATCH_PUT         4 /* goal <= 4: 1 reserve, 1 payload, 1 route CAS batch */
#define BOUND_BATCH_PUT_PRIMARY 1 /* tcp, 4 KiB items, their owner S the shards' primary */
#define BOUND_BATCH_GET         4 /* goal <= 4: 1 route lookup batch, 1 payload */
#define BOUND_BGET_INLINE       1 /* tcp, 4 KiB items, the authority owns every replica */
#define BOUND_REMOVE            2
#define BOUND_PUT_SHM                                                                              \
    2 /* shm, value > STORE_PUT_PRIMARY_SHM_MAX: reserve + C's CAS (goal                           \
         1: docs/performance.md "shm puts in one round trip") */

struct cp {
    int64_t rt[OBS__N_cpstage];
    int64_t handoffs, leads, checksums;
    int64_t copies[OBS__N_transport];
};

static int64_t rd(kvmesh_t *kv, const char *fam, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, i1, i2, &v) == 0);
    return v;
}

static struct cp snap(kvmesh_t *kv, unsigned op)
{
    struct cp c;
    memset(&c, 0, sizeof(c));
    for (unsigned s = 0; s < OBS__N_cpstage; s++)
        c.rt[s] = rd(kv, "op_round_trips_total", op, s);
    for (unsigned t = 0; t < OBS__N_transport; t++)
        c.copies[t] = rd(kv, "op_payload_copies_total", op, t);
    c.handoffs = rd(kv, "op_handoffs_total", op, OBS_NONE);
    c.leads = rd(kv, "op_loop_leads_total", op, OBS_NONE);
    c.checksums = rd(kv, "op_checksum_passes_total", op, OBS_NONE);
    return c;
}

static struct cp delta(struct cp a, struct cp b)
{
    struct cp d;
    for (unsigned s = 0; s < OBS__N_cpstage; s++)
        d.rt[s] = b.rt[s] - a.rt[s];
    for (unsigned t = 0; t < OBS__N_transport; t++)
        d.copies[t] = b.copies[t] - a.copies[t];
    d.handoffs = b.handoffs - a.handoffs;
    d.leads = b.leads - a.leads;
    /* a led hand-off is one of the hand-offs; which path an op takes depends on whether the
     * loop thread was in a pass at that instant, so only the total is pinned */
    CHECK(d.leads >= 0 && d.leads <= d.handoffs);
    d.checksums = b.checksums - a.checksums;
    return d;
}

static int64_t total(const struct cp *d)
{
    int64_t t = 0;
    for (unsigned s = 0; s < OBS__N_cpstage; s++)
        t += d->rt[s];
    return t;
}

static void show(const char *what, const struct cp *d)
{
    printf("%-28s round trips %3" PRId64 " (reserve %" PRId64 ", payload %" PRId64
           ", route_lookup %" PRId64 ", route_cas %" PRId64 "); hand-offs %" PRId64 " (led %" PRId64
           "); copies local %" PRId64 " shm %" PRId64 " tcp %" PRId64 "; checksum passes %" PRId64
           "\n",
           what, total(d), d->rt[OBS_CPSTAGE_RESERVE], d->rt[OBS_CPSTAGE_PAYLOAD],
           d->rt[OBS_CPSTAGE_ROUTE_LOOKUP], d->rt[OBS_CPSTAGE_ROUTE_CAS], d->handoffs, d->leads,
           d->copies[OBS_TRANSPORT_LOCAL], d->copies[OBS_TRANSPORT_SHM],
           d->copies[OBS_TRANSPORT_TCP], d->checksums);
    fflush(stdout);
}

/* Transport READ operations the runtime issued over tcp (payload reads, not route messages). */
static int64_t tcp_reads(kvmesh_t *kv)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, "transport_operations_total",
                           OBS_TRANSPORT_TCP, OBS_XOP_READ, &v) == 0);
    return v;
}

/* Transport WRITE operations the runtime issued over tcp (payload writes). */
static atomic_bool inline_dropped; /* S's inline reservation handler is gone */

static int64_t tcp_writes(kvmesh_t *kv)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, "transport_operations_total",
                           OBS_TRANSPORT_TCP, OBS_XOP_WRITE, &v) == 0);
    return v;
}

/* The race: S rewrites key "race" (a whole value of one fill byte per write), now and then
 * removes it, and writes new filler keys of FILL_SIZE bytes, until C is done reading and
 * FILL_KEYS fillers (more than S's 64 MiB) went in: S must evict (slots leave COMMITTED while
 * their routes are looked up). */
struct racer {
    kvmesh_t *S;
    const kvmesh_scope_t *sc;
    atomic_bool stop;
    atomic_int fills;
    int writes;
};

static void *race_writer(void *arg)
{
    struct racer *r = arg;
    static uint8_t v[RACE_SIZE], fill[FILL_SIZE];
    memset(fill, 0xee, sizeof(fill));
    for (int i = 1; !atomic_load(&r->stop); i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%d", i);
        if (kvmesh_put(r->S, r->sc, key, strlen(key), fill, sizeof(fill), NULL) == 0)
            atomic_fetch_add(&r->fills, 1);
        if (i % 7 == 0) {
            (void)kvmesh_remove(r->S, r->sc, "race", 4);
            continue;
        }
        memset(v, (uint8_t)(i % 251 + 1), sizeof(v));
        if (kvmesh_put(r->S, r->sc, "race", 4, v, sizeof(v), NULL) == 0)
            r->writes++;
    }
    return NULL;
}

/* A single get of a value of `size` bytes from C: 1 round trip inline, else 2. */
static void check_get_size(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc, bool tcp,
                           size_t size, bool inl)
{
    uint8_t *v = malloc(size), *out = malloc(size);
    CHECK(v && out);
    memset(v, 0x5a, size);
    v[size - 1] = 0xa5;
    char key[32];
    snprintf(key, sizeof(key), "sized-%zu", size);
    CHECK(kvmesh_put(S, sc, key, strlen(key), v, size, NULL) == 0);
    size_t got = 0;
    int64_t r0 = tcp_reads(C);
    struct cp a = snap(C, OBS_OP_GET), d;
    CHECK(kvmesh_get_into(C, sc, key, strlen(key), out, size, &got) == 0);
    d = delta(a, snap(C, OBS_OP_GET));
    int64_t reads = tcp_reads(C) - r0;
    char what[64];
    snprintf(what, sizeof(what), "get %zu B (%s the bound)", size, inl ? "at" : "above");
    show(what, &d);
    CHECK(got == size && memcmp(out, v, size) == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] >= 1);
    if (tcp && inl) {
        /* no payload exchange; the inline bytes count as one tcp read in
         * kvmesh_transport_operations_total (the replica was read over tcp) */
        CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0 && reads == 1);
        CHECK(total(&d) == d.rt[OBS_CPSTAGE_ROUTE_LOOKUP]);
    } else if (tcp) {
        CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 1 && reads >= 1);
    } else {
        CHECK(reads == 0); /* shm: no tcp read, and no inline bytes asked for */
    }
    CHECK(d.checksums == 1);
    free(v);
    free(out);
}

/* How a single put of a given size from C goes (docs/store.md "Inline writes", "Puts at the
 * primary"). */
enum put_mode {
    PUT_INLINE,   /* tcp, <= inline_write_max: at the primary (1), or inline + C's CAS (2) */
    PUT_RAW,      /* tcp, inline_write_max < size <= STORE_PUT_PRIMARY_RAW_MAX: at the primary
                     with the value as the frame's raw payload (1), or the plain path (3) */
    PUT_PLAIN,    /* tcp, above STORE_PUT_PRIMARY_RAW_MAX: reserve + WRITE + C's CAS (3) */
    PUT_SHM_PRIM, /* shm, <= STORE_PUT_PRIMARY_SHM_MAX: at the primary (1), or a shared-memory
                     copy + C's CAS */
    PUT_SHM,      /* shm, above it: a shared-memory copy + C's CAS */
};

/* A single put of a value of `size` bytes from C (a new key, then an overwrite), read back. A
 * new key's put may find no view of its shard in C yet and take the path without the primary;
 * the overwrite finds it current, so where a put at the primary applies it is one exchange. */
static void check_put_size(kvmesh_t *C, const kvmesh_scope_t *sc, size_t size, enum put_mode mode)
{
    static const char *names[] = {"inline", "raw", "plain", "shm prim", "shm"};
    uint8_t *v = malloc(size), *out = malloc(size);
    CHECK(v && out);
    char key[32];
    snprintf(key, sizeof(key), "put-sized-%zu", size);
    bool may_prim = mode == PUT_INLINE || mode == PUT_RAW || mode == PUT_SHM_PRIM;
    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < size; k++)
            v[k] = (uint8_t)(k * 7 + round * 13 + size);
        int64_t w0 = tcp_writes(C);
        struct cp a = snap(C, OBS_OP_PUT), d;
        CHECK(kvmesh_put(C, sc, key, strlen(key), v, size, NULL) == 0);
        d = delta(a, snap(C, OBS_OP_PUT));
        int64_t writes = tcp_writes(C) - w0;
        char what[64];
        snprintf(what, sizeof(what), "put %zu B (%s)", size, names[mode]);
        show(what, &d);
        CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 1 && d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
        CHECK(d.checksums == 1);
        /* a put at the primary makes no CAS of its own (the owner S publishes) */
        bool prim = d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0;
        CHECK(may_prim || !prim);
        CHECK(round == 0 || prim == may_prim); /* (the overwrite: C's view is current) */
        if (prim) {
            /* one exchange; the bytes count as one tcp write in
             * kvmesh_transport_operations_total (the replica was written over tcp) */
            CHECK(total(&d) == BOUND_PUT_PRIMARY && d.handoffs == 1);
            CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0 && writes == 1);
            CHECK(d.copies[OBS_TRANSPORT_TCP] == 2 && d.copies[OBS_TRANSPORT_SHM] == 0);
        } else if (mode == PUT_INLINE) {
            CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0 && writes == 1);
            CHECK(d.copies[OBS_TRANSPORT_TCP] == 2);
            CHECK(total(&d) <= BOUND_PUT_INLINE + 1);
        } else if (mode == PUT_RAW || mode == PUT_PLAIN) {
            CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 1 && writes >= 1);
            CHECK(round == 0 || total(&d) == BOUND_PUT);
        } else {
            /* the plain reservation (1), the shared-memory copy by C's thread (no payload round
             * trip), C's route CAS (1); two hand-offs (PLACE, PUBLISH) */
            CHECK(writes == 0 && d.copies[OBS_TRANSPORT_SHM] == 1);
            CHECK(d.copies[OBS_TRANSPORT_TCP] == 0 && d.rt[OBS_CPSTAGE_PAYLOAD] == 0);
            CHECK(total(&d) == BOUND_PUT_SHM && d.rt[OBS_CPSTAGE_ROUTE_CAS] == 1);
            CHECK(d.handoffs == 2);
        }
        size_t got = 0;
        CHECK(kvmesh_get_into(C, sc, key, strlen(key), out, size, &got) == 0);
        CHECK(got == size && memcmp(out, v, size) == 0);
    }
    free(v);
    free(out);
}

/* On S's loop: S forgets the inline reservation message and the batched COMMIT / RELEASE, as
 * a build that predates them. */
static void drop_inline_handler(void *arg)
{
    kvm_rt_t *rt = arg;
    CHECK(rpc_register_handler(rt->ep, STORE_RPC_RESERVE_INLINE, NULL, NULL) == 0);
    CHECK(rpc_register_handler(rt->ep, STORE_RPC_SLOT_BATCH, NULL, NULL) == 0);
    kvm_slot_batch_test_old_owner(rt); /* (and its notification form) */
    atomic_store(&inline_dropped, true);
}

/* S's RPC counters and owner figures, read on S's loop. */
struct owner_snap {
    kvm_rt_t *rt;
    struct rpc_stats rs;
    slot_core_stats_t cs;
    bool staged; /* the runtime staged a put at the primary's raw value (its pool exists) */
    atomic_bool done;
};

static void owner_read(void *arg)
{
    struct owner_snap *s = arg;
    rpc_get_stats(s->rt->ep, &s->rs);
    slot_core_stats(s->rt->slots, &s->cs);
    s->staged = s->rt->prim_pool != NULL;
    atomic_store(&s->done, true);
}

static struct owner_snap *owner_snap(kvmesh_t *S, struct owner_snap *s)
{
    s->rt = kvmesh_runtime_of(S);
    atomic_store(&s->done, false);
    CHECK(env_post(s->rt->env, owner_read, s) == 0);
    uint64_t end = env_clock_mono_ms() + 10000;
    while (!atomic_load(&s->done)) {
        CHECK(env_clock_mono_ms() < end);
        usleep(1000);
    }
    return s;
}

/* Waits (bounded) until S holds no reservation: every slot of the last put was committed (a
 * COMMIT that never came would hold its reservation for its TTL, minutes). */
static struct owner_snap *owner_settled(kvmesh_t *S, struct owner_snap *s)
{
    uint64_t end = env_clock_mono_ms() + 10000;
    while (owner_snap(S, s)->cs.n_reserved != 0) {
        CHECK(env_clock_mono_ms() < end);
        usleep(1000);
    }
    return s;
}

/* Runs fn on R's loop and waits for it (bounded). */
struct loop_call {
    void (*fn)(kvm_rt_t *rt);
    kvm_rt_t *rt;
    atomic_bool done;
};

static void loop_call_run(void *arg)
{
    struct loop_call *c = arg;
    c->fn(c->rt);
    atomic_store(&c->done, true);
}

static void on_loop(kvmesh_t *R, void (*fn)(kvm_rt_t *rt))
{
    struct loop_call c = {.fn = fn, .rt = kvmesh_runtime_of(R)};
    atomic_store(&c.done, false);
    CHECK(env_post(c.rt->env, loop_call_run, &c) == 0);
    uint64_t end = env_clock_mono_ms() + 10000;
    while (!atomic_load(&c.done)) {
        CHECK(env_clock_mono_ms() < end);
        usleep(1000);
    }
}

#define SLOT_MSG_PUTS 8 /* overwrites counted by check_put_slot_msgs */

static uint64_t slotb_allocs; /* C's rt->slotb_allocs, read on its loop (read_slotb_allocs) */

static void read_slotb_allocs(kvm_rt_t *rt)
{
    slotb_allocs = rt->slotb_allocs;
}

/* Single overwrites of one key from C, S its only owner and the shard's primary: what S
 * receives per put. The overwrite's COMMIT (new slot) and RELEASE (old slot) leave as one group,
 * so S gets them as one STORE_RPC_SLOT_BATCH: after the first overwrite (a call, whose answer
 * says S takes the notification form) one notification, beside the route CAS's (before: two
 * notifications, 3 per put). old_owner: S serves the batch as an owner that predates the
 * notification form and C forgot what S answered: the batch is a call every time (2 requests
 * per put), and every slot still settles. The puts are waited for one by one (S settled: no
 * reservation left) and read back after the counted window. C's outbox and batch record are
 * kept between groups (slot_batch.c): the counted notification-form overwrites allocate neither
 * (before: one outbox and one record per put). */
static void check_put_slot_msgs(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc, bool old_owner)
{
    if (old_owner) {
        on_loop(S, kvm_slot_batch_test_old_owner);
        on_loop(C, kvm_slot_batch_test_forget);
    }
    static uint8_t v[VSIZE], out[VSIZE];
    struct owner_snap s0, s1;
    uint64_t a0 = 0;
    for (int round = 0; round < SLOT_MSG_PUTS + 2; round++) {
        if (round == 2) { /* (0: a new key, no RELEASE; 1: the first overwrite, a call) */
            owner_settled(S, &s0);
            on_loop(C, read_slotb_allocs);
            a0 = slotb_allocs;
        }
        memset(v, 0x31 + round, sizeof(v));
        CHECK(kvmesh_put(C, sc, "slot-msgs", 9, v, sizeof(v), NULL) == 0);
        owner_settled(S, &s1); /* its COMMIT arrived */
    }
    uint64_t notes = s1.rs.notifies_received - s0.rs.notifies_received;
    uint64_t reqs = s1.rs.requests_received - s0.rs.requests_received;
    on_loop(C, read_slotb_allocs);
    uint64_t allocs = slotb_allocs - a0;
    printf("put overwrites x%d at the owner%s: %" PRIu64 " notifications, %" PRIu64
           " requests; %" PRIu64 " slot-batch allocations at the requester\n",
           SLOT_MSG_PUTS, old_owner ? " (old owner)" : "", notes, reqs, allocs);
    fflush(stdout);
    if (old_owner) {
        CHECK(reqs >= 2 * SLOT_MSG_PUTS); /* each reservation and each batch, a call */
    } else {
        CHECK(reqs == SLOT_MSG_PUTS);          /* each reservation; no batch as a call */
        CHECK(notes <= 2 * SLOT_MSG_PUTS + 2); /* route CAS + the batch (before: 3 per put) */
        CHECK(allocs == 0); /* the kept outbox and spare record (before: 2 per put) */
    }
    size_t got = 0;
    CHECK(kvmesh_get_into(C, sc, "slot-msgs", 9, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
}

/* A 128-item batch put from C: the owner S gets its COMMITs and RELEASEs as one batched
 * message (a few notifications at most: the route batch and the slot batch), not one
 * notification per item. */
static void check_slot_batch(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc,
                             kvmesh_batch_item_t *items)
{
    struct owner_snap s0, s1;
    owner_settled(S, &s0);
    CHECK(kvmesh_batch_put(C, sc, items, BATCH, NULL) == 0);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    owner_settled(S, &s1);
    uint64_t notes = s1.rs.notifies_received - s0.rs.notifies_received;
    uint64_t reqs = s1.rs.requests_received - s0.rs.requests_received;
    printf("batch_put 128 at the owner: %" PRIu64 " notifications, %" PRIu64 " requests\n", notes,
           reqs);
    fflush(stdout);
    CHECK(notes < BATCH); /* per item: 128 COMMITs + 128 RELEASEs */
    CHECK(reqs >= 1);     /* the batched reservation */
    /* the route batch and the batched COMMIT / RELEASE: a request, or a notification once S
     * answered that it takes it so (S did, to the single overwrites before) */
    CHECK(notes + reqs >= 3);
}

/* Tcp, after S dropped STORE_RPC_SLOT_BATCH: C's batch puts still commit every slot (the refused
 * batch's items go as single notifications, and later ones at once); read back. */
static void check_slot_batch_fallback(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[BATCH][VSIZE], out[BATCH][VSIZE];
    static char keys[BATCH][16];
    kvmesh_batch_item_t items[BATCH];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < BATCH; i++) {
            memset(v[i], 0x40 + round + i, VSIZE);
            snprintf(keys[i], sizeof(keys[i]), "ob%d", i);
            items[i] = (kvmesh_batch_item_t){
                .key = keys[i], .key_len = strlen(keys[i]), .buf = v[i], .len = VSIZE};
        }
        struct owner_snap s0, s1;
        owner_settled(S, &s0);
        kvm_put_primary_test_decline(BATCH); /* (C's own path: S declines the batch at the
                                                primary) */
        CHECK(kvmesh_batch_put(C, sc, items, BATCH, NULL) == 0);
        kvm_put_primary_test_decline(0); /* (disarmed: items without a shard view took none) */
        for (int i = 0; i < BATCH; i++)
            CHECK(items[i].rc == 0);
        owner_settled(S, &s1); /* every COMMIT arrived, one by one */
        printf("batch_put 128 at an old owner (%s): %" PRIu64 " notifications\n",
               round ? "known" : "refused", s1.rs.notifies_received - s0.rs.notifies_received);
        CHECK(s1.rs.notifies_received - s0.rs.notifies_received >= BATCH);
        for (int i = 0; i < BATCH; i++)
            items[i].buf = out[i];
        CHECK(kvmesh_batch_get(C, sc, items, BATCH) == 0);
        for (int i = 0; i < BATCH; i++)
            CHECK(items[i].rc == 0 && items[i].out_len == VSIZE &&
                  memcmp(out[i], v[i], VSIZE) == 0);
    }
}

/* Tcp: after S drops the handler, C's single small puts fall back to the plain reservation. */
static void check_put_fallback(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    kvm_rt_t *srt = kvmesh_runtime_of(S);
    CHECK(env_post(srt->env, drop_inline_handler, srt) == 0);
    uint64_t end = env_clock_mono_ms() + 10000;
    while (!atomic_load(&inline_dropped)) {
        CHECK(env_clock_mono_ms() < end);
        usleep(1000);
    }
    static uint8_t v[VSIZE], out[VSIZE];
    for (int round = 0; round < 2; round++) {
        memset(v, 0x71 + round, sizeof(v));
        int64_t w0 = tcp_writes(C);
        struct cp a = snap(C, OBS_OP_PUT), d;
        CHECK(kvmesh_put(C, sc, "old-owner", 9, v, sizeof(v), NULL) == 0);
        d = delta(a, snap(C, OBS_OP_PUT));
        show(round ? "put (old owner, known)" : "put (old owner, refused)", &d);
        /* first: the refused inline reservation, then the plain one; then the plain one only */
        CHECK(d.rt[OBS_CPSTAGE_RESERVE] == (round ? 1 : 2));
        CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 1 && tcp_writes(C) - w0 >= 1);
        CHECK(d.copies[OBS_TRANSPORT_TCP] == 2 && d.checksums == 1);
        size_t got = 0;
        CHECK(kvmesh_get_into(C, sc, "old-owner", 9, out, sizeof(out), &got) == 0);
        CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
    }
}

/* On S's loop: S forgets STORE_RPC_PUT_PRIMARY, as a build that predates it. */
static atomic_bool prim_dropped;

static void drop_primary_handler(kvm_rt_t *rt)
{
    CHECK(rpc_register_handler(rt->ep, STORE_RPC_PUT_PRIMARY, NULL, NULL) == 0);
    atomic_store(&prim_dropped, true);
}

/* Four writer threads of C put one key (whole values of one byte each) while a reader thread of
 * C reads it. */
#define SAME_WRITERS 4
#define SAME_PUTS    40

struct same_key {
    kvmesh_t *C;
    const kvmesh_scope_t *sc;
    int id;
    atomic_int *writers_left;
    int failed;
    int torn, reads;
};

static void *same_writer(void *arg)
{
    struct same_key *w = arg;
    static _Thread_local uint8_t v[VSIZE];
    for (int i = 0; i < SAME_PUTS; i++) {
        memset(v, (uint8_t)(1 + w->id * SAME_PUTS + i), sizeof(v));
        if (kvmesh_put(w->C, w->sc, "same", 4, v, sizeof(v), NULL) != 0) {
            fprintf(stderr, "same-key put failed: %s\n", kvmesh_last_error());
            w->failed++;
        }
    }
    atomic_fetch_sub(w->writers_left, 1);
    return NULL;
}

static void *same_reader(void *arg)
{
    struct same_key *r = arg;
    static _Thread_local uint8_t out[VSIZE];
    uint64_t end = env_clock_mono_ms() + 120000;
    while (atomic_load(r->writers_left) > 0 && env_clock_mono_ms() < end) {
        size_t got = 0;
        int rc = kvmesh_get_into(r->C, r->sc, "same", 4, out, sizeof(out), &got);
        if (rc == KVMESH_ENOENT)
            continue;
        r->reads++;
        if (rc != 0 || got != VSIZE) {
            r->torn++;
            continue;
        }
        for (size_t k = 1; k < VSIZE; k++)
            if (out[k] != out[0]) {
                r->torn++;
                break;
            }
    }
    return NULL;
}

/* On S's loop: S forgets STORE_RPC_PUT_PRIMARY_RAW alone, as a build that predates it. */
static atomic_bool prim_raw_dropped;

static void drop_primary_raw_handler(kvm_rt_t *rt)
{
    CHECK(rpc_register_handler(rt->ep, STORE_RPC_PUT_PRIMARY_RAW, NULL, NULL) == 0);
    atomic_store(&prim_raw_dropped, true);
}

#define RAW_SIZE (256 * 1024) /* above inline_write_max: a put at the primary's raw form */

/* One put of RAW_SIZE bytes (fill byte b) of key "prim-raw" from C: its return code, the deltas
 * in *d. */
static int put_raw(kvmesh_t *C, const kvmesh_scope_t *sc, uint8_t *v, uint8_t b, struct cp *d)
{
    memset(v, b, RAW_SIZE);
    v[RAW_SIZE - 1] = (uint8_t)~b;
    struct cp a = snap(C, OBS_OP_PUT);
    int rc = kvmesh_put(C, sc, "prim-raw", 8, v, RAW_SIZE, NULL);
    *d = delta(a, snap(C, OBS_OP_PUT));
    return rc;
}

static void check_raw_value(kvmesh_t *C, const kvmesh_scope_t *sc, const uint8_t *v, uint8_t *out)
{
    size_t got = 0;
    CHECK(kvmesh_get_into(C, sc, "prim-raw", 8, out, RAW_SIZE, &got) == 0);
    CHECK(got == RAW_SIZE && memcmp(out, v, RAW_SIZE) == 0);
}

/* Tcp: the raw form of a put at the primary (a value above inline_write_max) and its fallbacks:
 * S declines -> the plain path (reservation, transport WRITE, C's CAS); bytes that fail their
 * checksum -> KVMESH_ECHECKSUM, nothing published, nothing left reserved; an S without the raw
 * form's handler -> refused once, then the plain path at once, while small puts still go at the
 * primary. */
static void check_put_primary_raw(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    uint8_t *v = malloc(RAW_SIZE), *out = malloc(RAW_SIZE);
    CHECK(v && out);
    struct cp d;
    struct owner_snap os, os2;
    struct owner_snap cs, cs2;
    CHECK(put_raw(C, sc, v, 0x31, &d) == 0); /* (C's view of its shard) */
    owner_snap(S, &os);
    owner_snap(C, &cs);
    CHECK(put_raw(C, sc, v, 0x32, &d) == 0);
    show("put raw (primary)", &d);
    CHECK(total(&d) == BOUND_PUT_PRIMARY && d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0);
    /* C sent the caller's own bytes (a lent payload, rpc_msg.lend): no staged copy of the value
     * (the staging pool was never made); what rpc_call did not write it copied (shown: how much
     * a loopback socket takes at once is the kernel's) */
    owner_snap(C, &cs2);
    CHECK(cs2.rs.lent == cs.rs.lent + 1 && !cs2.staged);
    printf("  lent payload: %" PRIu64 " bytes of %d copied by rpc_call\n",
           cs2.rs.lent_copied_bytes - cs.rs.lent_copied_bytes, RAW_SIZE);
    /* S received the value straight into the reserved slot (its RPC payload sink: no receive
     * buffer, no copy from it) */
    owner_snap(S, &os2);
    CHECK(os2.rs.sink_direct == os.rs.sink_direct + 1);
    CHECK(os2.rs.sink_discarded == os.rs.sink_discarded &&
          os2.rs.sink_aborted == os.rs.sink_aborted);
    check_raw_value(C, sc, v, out);

    kvm_put_primary_test_decline(1);
    owner_snap(S, &os);
    CHECK(put_raw(C, sc, v, 0x33, &d) == 0);
    show("put raw (primary declines)", &d);
    CHECK(kvm_put_primary_test_decline(0) == 0); /* (the decline was taken) */
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 2 && d.rt[OBS_CPSTAGE_PAYLOAD] == 1);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1 && d.handoffs == 2 && d.checksums == 1);
    /* the declined request's bytes were read and dropped (nothing reserved for them), and the
     * connection stayed in step: the fallback's messages went over it */
    owner_settled(S, &os2);
    CHECK(os2.rs.sink_discarded == os.rs.sink_discarded + 1);
    CHECK(os2.rs.sink_direct == os.rs.sink_direct && os2.rs.sink_aborted == os.rs.sink_aborted);
    CHECK(os2.rs.conns_accepted == os.rs.conns_accepted);
    check_raw_value(C, sc, v, out);

    uint8_t *bad = malloc(RAW_SIZE);
    CHECK(bad);
    kvm_put_inline_test_bad_sums(1);
    owner_snap(S, &os);
    int rc = put_raw(C, sc, bad, 0x34, &d);
    show("put raw (primary, bad checksum)", &d);
    CHECK(rc == KVMESH_ECHECKSUM);
    CHECK(kvm_put_inline_test_bad_sums(0) == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0 && total(&d) == 1);
    /* received into the slot, then refused by the sum folded as it landed: released */
    owner_settled(S, &os2);
    CHECK(os2.rs.sink_direct == os.rs.sink_direct + 1 && os2.rs.sink_aborted == os.rs.sink_aborted);
    check_raw_value(C, sc, v, out); /* the value before it */
    free(bad);

    on_loop(S, drop_primary_raw_handler);
    CHECK(atomic_load(&prim_raw_dropped));
    owner_snap(S, &os);
    for (int round = 0; round < 2; round++) {
        CHECK(put_raw(C, sc, v, (uint8_t)(0x35 + round), &d) == 0);
        show(round ? "put raw (primary older, known)" : "put raw (primary older, refused)", &d);
        CHECK(d.rt[OBS_CPSTAGE_RESERVE] == (round ? 1 : 2) && d.rt[OBS_CPSTAGE_PAYLOAD] == 1);
        CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1);
        CHECK(round == 0 || total(&d) == BOUND_PUT);
        check_raw_value(C, sc, v, out);
    }
    /* without its handler the type's sink is not offered (the refusal reserves nothing) */
    owner_snap(S, &os2);
    CHECK(os2.rs.sink_direct == os.rs.sink_direct &&
          os2.rs.sink_discarded == os.rs.sink_discarded &&
          os2.rs.sink_aborted == os.rs.sink_aborted);
    /* the small form still goes at the primary */
    static uint8_t sv[VSIZE], so[VSIZE];
    memset(sv, 0x37, sizeof(sv));
    CHECK(kvmesh_put(C, sc, "prim-raw", 8, sv, sizeof(sv), NULL) == 0);
    struct cp a = snap(C, OBS_OP_PUT);
    memset(sv, 0x38, sizeof(sv));
    CHECK(kvmesh_put(C, sc, "prim-raw", 8, sv, sizeof(sv), NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put (small, raw refused)", &d);
    CHECK(total(&d) == BOUND_PUT_PRIMARY && d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0);
    size_t got = 0;
    CHECK(kvmesh_get_into(C, sc, "prim-raw", 8, so, sizeof(so), &got) == 0);
    CHECK(got == VSIZE && memcmp(so, sv, VSIZE) == 0);
    free(v);
    free(out);
}

/* Shm: a small put at the primary and its fallbacks: S declines -> the plain reservation, a
 * shared-memory copy and C's CAS; bytes that fail their checksum -> KVMESH_ECHECKSUM, nothing
 * published, nothing left reserved. */
static void check_put_primary_shm(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[VSIZE], out[VSIZE], bad[VSIZE];
    struct cp a, d;
    size_t got = 0;
    memset(v, 0x41, sizeof(v));
    CHECK(kvmesh_put(C, sc, "prim-shm", 8, v, sizeof(v), NULL) == 0); /* (C's view) */

    memset(v, 0x42, sizeof(v));
    kvm_put_primary_test_decline(1);
    a = snap(C, OBS_OP_PUT);
    CHECK(kvmesh_put(C, sc, "prim-shm", 8, v, sizeof(v), NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put shm (primary declines)", &d);
    CHECK(kvm_put_primary_test_decline(0) == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 2 && d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1);
    CHECK(d.handoffs == 2 && d.copies[OBS_TRANSPORT_SHM] == 1 && d.checksums == 1);
    CHECK(kvmesh_get_into(C, sc, "prim-shm", 8, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);

    memset(bad, 0x43, sizeof(bad));
    kvm_put_inline_test_bad_sums(1);
    a = snap(C, OBS_OP_PUT);
    int rc = kvmesh_put(C, sc, "prim-shm", 8, bad, sizeof(bad), NULL);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put shm (primary, bad checksum)", &d);
    CHECK(rc == KVMESH_ECHECKSUM);
    CHECK(kvm_put_inline_test_bad_sums(0) == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0 && total(&d) == 1);
    struct owner_snap os;
    owner_settled(S, &os);
    CHECK(kvmesh_get_into(C, sc, "prim-shm", 8, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
}

/* Tcp, S the only owner and every shard's primary: puts at the primary and their fallbacks. */
static void check_put_primary(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    static uint8_t v[VSIZE], out[VSIZE];
    struct cp a, d;
    size_t got = 0;
    memset(v, 0x21, sizeof(v));
    CHECK(kvmesh_put(C, sc, "prim", 4, v, sizeof(v), NULL) == 0); /* (C's view of its shard) */

    /* S declines (as if it were no longer the primary): nothing reserved, C sends the inline
     * reservation and makes its own CAS; the value is there */
    memset(v, 0x22, sizeof(v));
    kvm_put_primary_test_decline(1);
    a = snap(C, OBS_OP_PUT);
    CHECK(kvmesh_put(C, sc, "prim", 4, v, sizeof(v), NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put (primary declines)", &d);
    CHECK(kvm_put_primary_test_decline(0) == 0); /* (the decline was taken) */
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 2 && d.rt[OBS_CPSTAGE_PAYLOAD] == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1 && d.handoffs == 2);
    CHECK(d.copies[OBS_TRANSPORT_TCP] == 2 && d.checksums == 1);
    CHECK(kvmesh_get_into(C, sc, "prim", 4, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);

    /* bytes that do not match their checksum: S refuses them before any CAS and holds nothing;
     * the put fails and the previous value stays */
    static uint8_t bad[VSIZE];
    memset(bad, 0x23, sizeof(bad));
    kvm_put_inline_test_bad_sums(1);
    a = snap(C, OBS_OP_PUT);
    int rc = kvmesh_put(C, sc, "prim", 4, bad, sizeof(bad), NULL);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put (primary, bad checksum)", &d);
    CHECK(rc == KVMESH_ECHECKSUM);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0 && total(&d) == 1);
    struct owner_snap os;
    owner_settled(S, &os);
    CHECK(kvmesh_get_into(C, sc, "prim", 4, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);

    /* one key, four writers and a reader at once: S publishes every put (conflicts retried
     * at S: none reaches C), every read is one whole value, nothing is left reserved */
    atomic_int left;
    atomic_init(&left, SAME_WRITERS);
    struct same_key w[SAME_WRITERS], r = {.C = C, .sc = sc, .writers_left = &left};
    pthread_t th[SAME_WRITERS], rth;
    a = snap(C, OBS_OP_PUT);
    CHECK(pthread_create(&rth, NULL, same_reader, &r) == 0);
    for (int i = 0; i < SAME_WRITERS; i++) {
        w[i] = (struct same_key){.C = C, .sc = sc, .id = i, .writers_left = &left};
        CHECK(pthread_create(&th[i], NULL, same_writer, &w[i]) == 0);
    }
    int failed = 0;
    for (int i = 0; i < SAME_WRITERS; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        failed += w[i].failed;
    }
    CHECK(pthread_join(rth, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put x160 (one key, 4 threads)", &d);
    printf("same key: %d reads, %d torn, %d failed puts\n", r.reads, r.torn, failed);
    CHECK(failed == 0 && r.torn == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == SAME_WRITERS * SAME_PUTS);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0 && d.rt[OBS_CPSTAGE_PAYLOAD] == 0);
    CHECK(kvmesh_get_into(C, sc, "same", 4, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE);
    for (size_t k = 1; k < VSIZE; k++)
        CHECK(out[k] == out[0]);
    memset(v, 0xfe, sizeof(v)); /* the last writer wins */
    CHECK(kvmesh_put(C, sc, "same", 4, v, sizeof(v), NULL) == 0);
    CHECK(kvmesh_get_into(S, sc, "same", 4, out, sizeof(out), &got) == 0);
    CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
    owner_settled(S, &os); /* every slot committed or released */

    /* an owner that predates the message: KVMESH_ENOTSUP, the inline reservation and C's CAS
     * (2 reservation exchanges), then the inline reservation at once (the old count) */
    kvm_rt_t *srt = kvmesh_runtime_of(S);
    on_loop(S, drop_primary_handler);
    CHECK(atomic_load(&prim_dropped) && srt);
    for (int round = 0; round < 2; round++) {
        memset(v, 0x24 + round, sizeof(v));
        a = snap(C, OBS_OP_PUT);
        CHECK(kvmesh_put(C, sc, "prim", 4, v, sizeof(v), NULL) == 0);
        d = delta(a, snap(C, OBS_OP_PUT));
        show(round ? "put (primary older, known)" : "put (primary older, refused)", &d);
        CHECK(d.rt[OBS_CPSTAGE_RESERVE] == (round ? 1 : 2));
        CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0 && d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1);
        CHECK(round == 0 || total(&d) == BOUND_PUT_INLINE);
        CHECK(d.handoffs == 2 && d.copies[OBS_TRANSPORT_TCP] == 2);
        CHECK(kvmesh_get_into(C, sc, "prim", 4, out, sizeof(out), &got) == 0);
        CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
    }
}

/* C's route view: the primary of key's shard (read on C's loop). */
static kvm_ident_t hint_ident;
static kvm_runtime_t hint_primary;
static int hint_rc;

static void read_hint(kvm_rt_t *rt)
{
    hint_rc = route_primary_hint(rt->route, &hint_ident, &hint_primary);
}

static int primary_of(kvmesh_t *C, const kvmesh_scope_t *sc, const char *key, kvm_runtime_t *p)
{
    CHECK(kvm_ident_init(&hint_ident, sc->tenant, sc->domain, key, strlen(key)) == 0);
    on_loop(C, read_hint);
    kvm_ident_free(&hint_ident);
    *p = hint_primary;
    return hint_rc;
}

/* Tcp, last: a second storage runtime S2 joins (route-capable: shard primaries may move to it).
 * A put from C pinned to an owner that is not the key's primary in C's view before and after
 * the put takes the normal path: a reservation and C's own route CAS. */
static kvmesh_t *open_rt(const char *url, const char *transport, bool storage);

static void check_not_primary(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc, const char *url)
{
    kvmesh_t *S2 = open_rt(url, "tcp", true);
    kvm_rt_t *s1 = kvmesh_runtime_of(S), *s2 = kvmesh_runtime_of(S2);
    char hex[2][KVM_ID128_HEX_LEN + 1];
    kvm_id128_fmt(&s1->self.id, hex[0]);
    kvm_id128_fmt(&s2->self.id, hex[1]);
    static uint8_t v[VSIZE], out[VSIZE];
    int normal = 0;
    uint64_t end = env_clock_mono_ms() + 120000;
    for (int k = 0; normal < 4; k++) {
        CHECK(env_clock_mono_ms() < end);
        char key[32];
        snprintf(key, sizeof(key), "np-%d", k);
        memset(v, 0x50 + k % 100, sizeof(v));
        kvm_runtime_t p0, p1;
        /* (a first put through any path gives C a view of the key's shard) */
        int rc = kvmesh_put(C, sc, key, strlen(key), v, sizeof(v), NULL);
        if (rc != 0 || primary_of(C, sc, key, &p0) != 0) {
            usleep(10000); /* (S2 joining: a shard may be unavailable for a moment) */
            continue;
        }
        /* pin the value to the storage runtime that is not the primary in C's view */
        bool prim_s1 = kvm_runtime_equal(&p0, &s1->self);
        if (!prim_s1 && !kvm_runtime_equal(&p0, &s2->self))
            continue;
        const char *pin[1] = {hex[prim_s1 ? 1 : 0]};
        kvmesh_put_opts_t o = {.preferred_owners = pin, .n_preferred = 1, .hard_pin = true};
        struct cp a = snap(C, OBS_OP_PUT);
        rc = kvmesh_put(C, sc, key, strlen(key), v, sizeof(v), &o);
        struct cp d = delta(a, snap(C, OBS_OP_PUT));
        if (rc != 0 || primary_of(C, sc, key, &p1) != 0 || !kvm_runtime_equal(&p0, &p1))
            continue; /* (the view moved meanwhile: another key) */
        show(prim_s1 ? "put (owner S2, primary S)" : "put (owner S, primary S2)", &d);
        CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 1 && d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1);
        CHECK(d.handoffs == 2);
        size_t got = 0;
        CHECK(kvmesh_get_into(C, sc, key, strlen(key), out, sizeof(out), &got) == 0);
        CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
        normal++;
    }
    kvmesh_close(S2);
}

static void check_race(kvmesh_t *S, kvmesh_t *C, const kvmesh_scope_t *sc)
{
    struct racer r = {.S = S, .sc = sc, .writes = 0};
    atomic_init(&r.stop, false);
    atomic_init(&r.fills, 0);
    int64_t ev0 = 0, ev1 = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(S)->metrics, "evictions_total", OBS_TIER_DRAM,
                           OBS_NONE, &ev0) == 0);
    uint64_t end = env_clock_mono_ms() + 120000; /* bound of the whole race */
    pthread_t th;
    CHECK(pthread_create(&th, NULL, race_writer, &r) == 0);
    static uint8_t out[RACE_SIZE];
    int found = 0, absent = 0;
    for (int i = 0; i < RACE_GETS || atomic_load(&r.fills) < FILL_KEYS; i++) {
        CHECK(env_clock_mono_ms() < end);
        size_t got = 0;
        memset(out, 0, sizeof(out));
        int rc = kvmesh_get_into(C, sc, "race", 4, out, sizeof(out), &got);
        if (rc == KVMESH_ENOENT) {
            absent++;
            continue;
        }
        CHECK(rc == 0 && got == RACE_SIZE && out[0] != 0);
        for (size_t k = 1; k < RACE_SIZE; k++)
            CHECK(out[k] == out[0]); /* one whole written value, never a mix */
        found++;
    }
    atomic_store(&r.stop, true);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(obs_metrics_read(kvmesh_runtime_of(S)->metrics, "evictions_total", OBS_TIER_DRAM,
                           OBS_NONE, &ev1) == 0);
    printf("race: %d gets found a whole value, %d absent, %d writes, %d fillers, %" PRId64
           " evictions\n",
           found, absent, r.writes, atomic_load(&r.fills), ev1 - ev0);
    CHECK(found > 0);
    CHECK(ev1 > ev0); /* the fillers did not fit: S evicted while C was reading */
}

static kvmesh_t *open_rt(const char *url, const char *transport, bool storage)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "transport", transport) == 0);
    CHECK(kvmesh_config_set(c, "memory_size", storage ? "67108864" : "0") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "67108864") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1048576") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "shm"))) {
        fprintf(stderr, "usage: %s tcp|shm\n", argv[0]);
        return 2;
    }
    const char *xp = argv[1];
    bool tcp = strcmp(xp, "tcp") == 0;
    unsigned xt = tcp ? OBS_TRANSPORT_TCP : OBS_TRANSPORT_SHM;
    int64_t per_copy = tcp ? 2 : 1; /* tcp: the sender's and the receiver's socket copy */
    char url[64];
    snprintf(url, sizeof(url), "memory://critpath-%s-%ld", xp, (long)getpid());
    kvmesh_t *S = open_rt(url, xp, true), *C = open_rt(url, xp, false);
    const kvmesh_scope_t sc = {"critpath", NULL};

    /* Warm-up (not counted): until the client can write and read keys across the shards (the
     * shard primary acquires its leases right after start). Bounded: 120 s. */
    CHECK(trt_warm(&C, 1, &sc, 64, 120000) == 0);

    static uint8_t vals[BATCH][VSIZE], outs[BATCH][VSIZE];
    for (int i = 0; i < BATCH; i++) {
        memset(vals[i], i + 1, VSIZE);
        CHECK(kvmesh_register_buffer(C, vals[i], VSIZE) == 0);
        CHECK(kvmesh_register_buffer(C, outs[i], VSIZE) == 0);
    }
    struct cp a, d;

    /* ---- single put, new key, from the client: every stage remote; over tcp the 4 KiB value
     * goes with the reservation (no transport WRITE) ---- */
    int64_t writes0 = tcp_writes(C);
    a = snap(C, OBS_OP_PUT);
    CHECK(kvmesh_put(C, &sc, "one", 3, vals[0], VSIZE, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put (new key, remote)", &d);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 1);
    CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0); /* tcp: inline; shm: a shared-memory copy */
    /* a put at the primary (no CAS from C, one hand-off, the bytes in the request over tcp:
     * counted as a tcp write) when C's view of the key's shard is current, else over tcp the
     * inline reservation and C's CAS, over shm the plain reservation, a shared-memory copy and
     * C's CAS */
    bool np = d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0;
    int64_t w_first = tcp || np ? 1 : 0;
    CHECK(tcp_writes(C) == writes0 + w_first);
    CHECK(total(&d) <= (tcp ? BOUND_PUT_INLINE + 1 : BOUND_PUT)); /* (a new key's CAS may retry) */
    CHECK(d.handoffs == (np ? 1 : 2));
    CHECK(tcp || np ? d.copies[OBS_TRANSPORT_TCP] == 2 && d.copies[OBS_TRANSPORT_SHM] == 0
                    : d.copies[xt] == per_copy);
    CHECK(d.copies[OBS_TRANSPORT_LOCAL] == 0);
    CHECK(d.checksums == 1);

    /* ---- single put, overwrite ---- */
    a = snap(C, OBS_OP_PUT);
    CHECK(kvmesh_put(C, &sc, "one", 3, vals[1], VSIZE, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put (overwrite, remote)", &d);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 1);
    CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0);
    CHECK(tcp_writes(C) == writes0 + w_first + 1); /* the bytes in the request, no WRITE */
    /* one exchange with S, the owner and the shard's primary, which publishes (shm too: a
     * value up to STORE_PUT_PRIMARY_SHM_MAX goes in the request over the control connection) */
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0);
    CHECK(total(&d) == BOUND_PUT_PRIMARY);
    CHECK(d.handoffs == 1);
    CHECK(d.copies[OBS_TRANSPORT_TCP] == 2 && d.copies[OBS_TRANSPORT_SHM] == 0);
    CHECK(d.checksums == 1);

    /* ---- single put over a version this runtime has not seen: its hint is stale, the first
     * CAS is refused with the current route and the second applies ---- */
    CHECK(kvmesh_put(C, &sc, "other", 5, vals[4], VSIZE, NULL) == 0); /* (C's view and hint) */
    CHECK(kvmesh_put(S, &sc, "other", 5, vals[2], VSIZE, NULL) == 0);
    a = snap(C, OBS_OP_PUT);
    CHECK(kvmesh_put(C, &sc, "other", 5, vals[3], VSIZE, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_PUT));
    show("put (written elsewhere)", &d);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    /* S publishes, expecting its own hint (current: S wrote it): one exchange */
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0 && total(&d) == BOUND_PUT_PRIMARY);
    CHECK(d.handoffs == 1);
    {
        size_t g = 0;
        CHECK(kvmesh_get_into(C, &sc, "other", 5, outs[0], VSIZE, &g) == 0);
        CHECK(g == VSIZE && memcmp(outs[0], vals[3], VSIZE) == 0);
    }

    /* ---- single get from the client: lookup + payload; over tcp the payload comes inline
     * with the lookup's answer (S, the authority, owns the replica) ---- */
    size_t got = 0;
    int64_t reads0 = tcp_reads(C);
    a = snap(C, OBS_OP_GET);
    CHECK(kvmesh_get_into(C, &sc, "one", 3, outs[0], VSIZE, &got) == 0);
    d = delta(a, snap(C, OBS_OP_GET));
    show("get (remote)", &d);
    CHECK(got == VSIZE && memcmp(outs[0], vals[1], VSIZE) == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] >= 1);
    /* shm: a copy, plus one grant exchange when the segment's read grant was cached more than
     * TP_SHM_GRANT_RECHECK (100 ms) ago (the re-check that carries revocations) */
    CHECK(tcp ? d.rt[OBS_CPSTAGE_PAYLOAD] == 0 : d.rt[OBS_CPSTAGE_PAYLOAD] <= 1);
    CHECK(tcp_reads(C) == reads0 + (tcp ? 1 : 0)); /* tcp: the inline read; shm: a copy */
    CHECK(total(&d) <= (tcp ? BOUND_GET_INLINE : BOUND_GET_REMOTE));
    CHECK(d.handoffs == 1);
    CHECK(d.copies[xt] == per_copy);
    CHECK(d.checksums == 1);

    /* ---- single get on the storage runtime: owner and authority co-located ---- */
    static uint8_t sbuf[VSIZE];
    a = snap(S, OBS_OP_GET);
    CHECK(kvmesh_get_into(S, &sc, "one", 3, sbuf, VSIZE, &got) == 0);
    d = delta(a, snap(S, OBS_OP_GET));
    show("get (co-located)", &d);
    CHECK(got == VSIZE && memcmp(sbuf, vals[1], VSIZE) == 0);
    CHECK(total(&d) <= BOUND_GET_LOCAL);
    CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0);
    CHECK(d.handoffs == 1);
    CHECK(d.copies[OBS_TRANSPORT_LOCAL] == 1 && d.copies[xt] == 0);
    CHECK(d.checksums == 1);

    /* ---- batch put of 128 x 4 KiB, one owner, one authority ---- */
    kvmesh_batch_item_t items[BATCH];
    char keys[BATCH][16];
    for (int i = 0; i < BATCH; i++) {
        snprintf(keys[i], sizeof(keys[i]), "b%d", i);
        items[i] = (kvmesh_batch_item_t){
            .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = VSIZE};
    }
    a = snap(C, OBS_OP_BATCH_PUT);
    CHECK(kvmesh_batch_put(C, &sc, items, BATCH, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_BATCH_PUT));
    show("batch_put 128 (new keys)", &d);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    {
        /* the items whose shard C has a view of go at their primary S (one batch message: S
         * reserves, writes and publishes them); the others, if any, take the batched
         * reservation, one transport batch (tcp; shm: copies) and C's route CAS batch(es), one
         * for the items whose shard C had no view of yet (they wait for the views together) */
        bool all_prim = d.handoffs == 1; /* (no PUBLISH op of C's) */
        CHECK(all_prim ? total(&d) == 1 : d.rt[OBS_CPSTAGE_RESERVE] <= 2);
        CHECK(d.rt[OBS_CPSTAGE_RESERVE] >= 1);
        CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] <= (tcp ? 1 : 0) && d.rt[OBS_CPSTAGE_ROUTE_CAS] <= 2);
        CHECK(total(&d) <= BOUND_BATCH_PUT);
        CHECK(d.handoffs == 1 || d.handoffs == 2);
        /* 2 tcp copies per item in the message (shm too) or by the tcp transport; 1 shm copy per
         * item the shm transport wrote */
        CHECK(d.copies[OBS_TRANSPORT_TCP] % 2 == 0 &&
              d.copies[OBS_TRANSPORT_TCP] / 2 + d.copies[OBS_TRANSPORT_SHM] == BATCH);
    }
    CHECK(d.checksums == BATCH);

    /* ---- the same batch again (overwrites; every shard view and route hint is current) ---- */
    a = snap(C, OBS_OP_BATCH_PUT);
    CHECK(kvmesh_batch_put(C, &sc, items, BATCH, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_BATCH_PUT));
    show("batch_put 128 (overwrite)", &d);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 1);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    /* one STORE_RPC_PUT_PRIMARY_BATCH to S, which publishes all 128: no CAS from C, no
     * transport WRITE (shm: no copy), no PUBLISH hand-off; the bytes in the message count as
     * tcp copies, shm too */
    CHECK(d.rt[OBS_CPSTAGE_PAYLOAD] == 0 && d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0);
    CHECK(total(&d) == BOUND_BATCH_PUT_PRIMARY);
    CHECK(d.handoffs == 1);
    CHECK(d.copies[OBS_TRANSPORT_TCP] == BATCH * 2 && d.copies[OBS_TRANSPORT_SHM] == 0);
    CHECK(d.checksums == BATCH);
    /* and a batch put's notifications to the owner, batched (S declines the batch at the
     * primary by the test hook, so C's reservation, payload and CAS path runs) */
    kvm_put_primary_test_decline(BATCH);
    check_slot_batch(S, C, &sc, items);
    CHECK(kvm_put_primary_test_decline(0) == 0); /* (every decline was taken) */

    /* ---- the same batch over versions written elsewhere: every hint of C is stale, the first
     * CAS batch is refused item by item (each answer carries the current route) and the 128
     * retries leave together as ONE second batch (route_batch.c: what the answers' callbacks
     * start joins one window), not one message per item ---- */
    CHECK(kvmesh_batch_put(S, &sc, items, BATCH, NULL) == 0);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    a = snap(C, OBS_OP_BATCH_PUT);
    CHECK(kvmesh_batch_put(C, &sc, items, BATCH, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_BATCH_PUT));
    show("batch_put 128 (written elsewhere)", &d);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 1);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    /* S publishes at the primary, expecting its own hints (current: S wrote them) */
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 0 && total(&d) == BOUND_BATCH_PUT_PRIMARY);
    CHECK(d.handoffs == 1);
    /* C's own CAS path over versions written elsewhere (S declines the batch at the primary by
     * the test hook): the refused CAS batch, then the 128 retries as one batch */
    CHECK(kvmesh_batch_put(S, &sc, items, BATCH, NULL) == 0);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    kvm_put_primary_test_decline(BATCH);
    a = snap(C, OBS_OP_BATCH_PUT);
    CHECK(kvmesh_batch_put(C, &sc, items, BATCH, NULL) == 0);
    d = delta(a, snap(C, OBS_OP_BATCH_PUT));
    CHECK(kvm_put_primary_test_decline(0) == 0); /* (every decline was taken) */
    show("batch_put 128 (elsewhere, declined)", &d);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0);
    CHECK(d.rt[OBS_CPSTAGE_RESERVE] == 2); /* the declined message, the batched reservation */
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] == 2); /* the refused batch, then the retried batch */
    CHECK(total(&d) <= BOUND_BATCH_PUT + 1); /* (+1: the declined message) */
    CHECK(d.handoffs == 2);

    /* ---- batch get of the same 128 keys ---- */
    for (int i = 0; i < BATCH; i++)
        items[i].buf = outs[i];
    reads0 = tcp_reads(C);
    a = snap(C, OBS_OP_BATCH_GET);
    CHECK(kvmesh_batch_get(C, &sc, items, BATCH) == 0);
    d = delta(a, snap(C, OBS_OP_BATCH_GET));
    show("batch_get 128", &d);
    for (int i = 0; i < BATCH; i++)
        CHECK(items[i].rc == 0 && items[i].out_len == VSIZE &&
              memcmp(outs[i], vals[i], VSIZE) == 0);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_LOOKUP] == 1); /* all 128 lookups in one batch to S */
    /* tcp: S, the primary of every key, owns every replica: the bytes come with the lookups'
     * answers (batch inline reads, 128 x 4 KiB within KVM_GET_INLINE_BATCH_MAX), one exchange,
     * each item counted as a tcp read; shm: a shared-memory copy, plus at most one grant
     * exchange (as the single get's) */
    CHECK(tcp ? d.rt[OBS_CPSTAGE_PAYLOAD] == 0 : d.rt[OBS_CPSTAGE_PAYLOAD] <= 1);
    CHECK(tcp_reads(C) == reads0 + (tcp ? BATCH : 0));
    CHECK(total(&d) <= (tcp ? BOUND_BGET_INLINE : BOUND_BATCH_GET));
    CHECK(d.handoffs == 1);
    CHECK(d.copies[xt] == BATCH * per_copy);
    CHECK(d.checksums == BATCH);

    /* ---- remove from the client: tombstone CAS (its finalize is not waited for) ---- */
    a = snap(C, OBS_OP_REMOVE);
    CHECK(kvmesh_remove(C, &sc, "one", 3) == 0);
    d = delta(a, snap(C, OBS_OP_REMOVE));
    show("remove (remote)", &d);
    CHECK(d.rt[OBS_CPSTAGE_ROUTE_CAS] >= 1);
    CHECK(total(&d) <= BOUND_REMOVE);
    CHECK(d.handoffs == 1);
    CHECK(d.checksums == 0 && d.copies[xt] == 0);

    for (int i = 0; i < BATCH; i++) {
        kvmesh_unregister_buffer(C, vals[i]);
        kvmesh_unregister_buffer(C, outs[i]);
    }
    /* ---- (unregistered buffers from here: every registration slot is free again)
     * inline bound: up to inline_read_max inline, above it a transport read ---- */
    check_get_size(S, C, &sc, tcp, INLINE_DEFAULT, true);
    check_get_size(S, C, &sc, tcp, READ_INLINE, true);
    check_get_size(S, C, &sc, tcp, READ_INLINE + 1, false);
    check_get_size(S, C, &sc, tcp, 4 * READ_INLINE, false);
    /* inline_write_max (same default): at the bound with the reservation, above it a WRITE */
    if (tcp) {
        check_put_size(C, &sc, INLINE_DEFAULT, PUT_INLINE);
        /* above it, up to STORE_PUT_PRIMARY_RAW_MAX, the value as the frame's raw payload */
        check_put_size(C, &sc, INLINE_DEFAULT + 1, PUT_RAW);
        check_put_size(C, &sc, 256 * 1024, PUT_RAW);
        check_put_size(C, &sc, STORE_PUT_PRIMARY_RAW_MAX, PUT_RAW);
        check_put_size(C, &sc, STORE_PUT_PRIMARY_RAW_MAX + 1, PUT_PLAIN);
        check_put_size(C, &sc, 1024 * 1024, PUT_PLAIN);
    } else {
        check_put_size(C, &sc, STORE_PUT_PRIMARY_SHM_MAX, PUT_SHM_PRIM);
        check_put_size(C, &sc, STORE_PUT_PRIMARY_SHM_MAX + 1, PUT_SHM);
        check_put_size(C, &sc, INLINE_DEFAULT, PUT_SHM);
        check_put_size(C, &sc, 256 * 1024, PUT_SHM);
        check_put_size(C, &sc, 1024 * 1024, PUT_SHM); /* (streaming stores: TP_SHM_STREAM_MIN) */
    }
    if (tcp) { /* (then S forgets the messages: the puts below take the inline path) */
        check_put_primary_raw(S, C, &sc);
        check_put_primary(S, C, &sc);
    } else {
        check_put_primary_shm(S, C, &sc);
    }
    check_put_slot_msgs(S, C, &sc, false);
    if (tcp) { /* (last of the puts: S stays without the handlers) */
        check_put_slot_msgs(S, C, &sc, true);
        check_put_fallback(S, C, &sc);
        check_slot_batch_fallback(S, C, &sc);
    }

    /* ---- a get racing overwrites and removes of its key ---- */
    check_race(S, C, &sc);
    /* The client's one thread ran its ops on an otherwise idle loop: it led the loop for (nearly)
     * all of them; none led means the leader/follower path is off (docs/architecture.md). */
    int64_t led = 0;
    for (unsigned o = 0; o < OBS__N_op; o++)
        led += rd(C, "op_loop_leads_total", o, OBS_NONE);
    printf("client ops that led the loop: %" PRId64 "\n", led);
    CHECK(led > 0);
    if (tcp) /* (last: a second storage runtime moves shard primaries) */
        check_not_primary(S, C, &sc, url);
    kvmesh_close(C);
    kvmesh_close(S);
    printf("critical-path counts within their bounds (%s)\n", xp);
    return 0;
}
