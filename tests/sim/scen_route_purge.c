/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_route_purge.c — the tombstone purge of the EmbeddedWrh route mesh (route_svc.c
 * purge_tick) when deletes meet lost or late mirror answers: a tombstone whose mirror did not
 * complete is dirty at its primary, and a removed key that nothing touches again must still
 * lose its tombstone everywhere once its retention passed, without the removed value coming
 * back. Every node runs a route_svc_t on its env, all share one in-memory metadata store
 * (memory://purgeSEED, as in scen_route_mesh.c).
 *
 * Run:
 *   1. setup (no faults): every key gets a live route (an acknowledged CAS from absence);
 *   2. deletes under faults: each key is removed once, the way the store removes
 *      (src/store/ops_publish.c): a CAS to a PENDING tombstone with a purge deadline
 *      (retain_until_ms = now + PG_RETENTION_MS), and once that is acknowledged a best-effort
 *      CAS to FINALIZED whose result is ignored. A refused CAS (conflict, busy) is retried; any
 *      other answer (indeterminate, unavailable, timed out) ends the remove: like an
 *      application told "the remove may have been applied", nothing touches the key again.
 *      Meanwhile one-way link cuts (lost mirror requests and answers), drops, duplicates and
 *      reorders beyond the mirror call deadline (late answers) hit every link; in
 *      route_purge_failover, primaries also crash or are cut off (lease lost, rollover);
 *   3. heal, then PG_SETTLE_S of silence: no client touches any key.
 *
 * Checks (after the silence):
 *   purge        no runtime that is a member of its shard's current authority set holds a
 *                tombstone (each is due: its retention ended seconds ago); route_purge also
 *                requires it of every runtime (there nothing changes the sets);
 *   agreement    every member of a shard's current set holds the same copy of each key (a
 *                divergent set, one member absent and another with the removed value, answers
 *                lookups with that value, and a later rollover keeps or drops the removal
 *                depending on which member it takes its state from);
 *   resurrection a key whose PENDING tombstone was acknowledged reads absent at every member
 *                and through a lookup from every node; a key whose remove ended unknown reads
 *                absent or its one live value (the agreement check covers the members).
 *
 * Variants (test-only, must be caught): purge_no_repair (the purge skips a dirty tombstone and
 * never repairs it: the code before the purge repaired), purge_dirty (the purge drops a dirty
 * tombstone without repairing it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ident.h"
#include "core/route.h"
#include "core/util.h"
#include "meta/meta.h"
#include "meta/meta_memory.h"
#include "route/route.h"
#include "route/route_test.h"
#include "sim.h"

#define PG_MAX_NODES    6
#define PG_KEYS         8
#define PG_LEASE_MS     1000
#define PG_TIMEOUT_MS   1500
#define PG_RETENTION_MS 1500
/* silence after the heal: retention + the purge margin (1 s) + clock skew + a late CAS applied
 * after its answer was given up (request timeout) + the sets settling after a rollover */
#define PG_SETTLE_S     12
#define PG_REMOVE_TRIES 20

typedef struct pg_profile {
    const char *name;
    bool failover; /* primaries crash or are cut off while the deletes run */
} pg_profile_t;

/* per key: where its remove stands */
enum pg_kstate {
    PK_NEW,        /* setup write not acknowledged yet */
    PK_LIVE,       /* live route acknowledged; remove not started */
    PK_REMOVING,   /* PENDING tombstone CAS in flight (or waiting for a retry) */
    PK_FINALIZING, /* acknowledged; the best-effort FINALIZED CAS in flight */
    PK_ACKED,      /* the PENDING tombstone was acknowledged */
    PK_MAYBE,      /* the remove ended unknown (may or may not have applied) */
};

typedef struct pg pg_t;

typedef struct pg_node {
    pg_t *pg;
    uint32_t id;
    env_t *env;
    route_svc_t *svc;
    bool ready;
} pg_node_t;

typedef struct pg_key {
    kvm_ident_t ident;
    enum pg_kstate st;
    kvm_route_version_t ver; /* the live route's version (or the last one a conflict showed) */
    uint64_t value;          /* the live route's content op seq */
    uint32_t tries;
    int last_rc;
} pg_key_t;

struct pg {
    sim_t *sim;
    const pg_profile_t *prof;
    unsigned bugs;
    uint32_t n, shards, k;
    char url[64];
    meta_t *world_m;
    meta_t *node_m[PG_MAX_NODES];
    uint64_t gen;
    bool in_members[PG_MAX_NODES];
    uint32_t epoch[PG_MAX_NODES];
    bool faults;
    pg_key_t keys[PG_KEYS];
    uint64_t next_value;
    uint32_t final_pending;
    /* world events in flight when the run ends are dropped: their args are freed at the end */
    void **allocs;
    size_t n_allocs, cap_allocs;
};

typedef struct pg_req {
    pg_t *pg;
    uint32_t key;
    uint32_t node;
} pg_req_t;

static kvm_runtime_id_t rt_id(uint32_t node)
{
    return kvm_id128_from_u64(0x70757267656eull, node + 1);
}

static void *pg_alloc(pg_t *pg, size_t size)
{
    if (pg->n_allocs == pg->cap_allocs) {
        pg->cap_allocs = pg->cap_allocs ? 2 * pg->cap_allocs : 64;
        pg->allocs = realloc(pg->allocs, pg->cap_allocs * sizeof(void *));
        KVM_ASSERT(pg->allocs != NULL);
    }
    void *p = calloc(1, size);
    KVM_ASSERT(p != NULL);
    pg->allocs[pg->n_allocs++] = p;
    return p;
}

static pg_req_t *req(pg_t *pg, uint32_t key, uint32_t node)
{
    pg_req_t *q = pg_alloc(pg, sizeof(*q));
    q->pg = pg;
    q->key = key;
    q->node = node;
    return q;
}

/* ---- membership ----------------------------------------------------------------------------- */

typedef struct pg_push {
    pg_t *pg;
    uint32_t node, inc;
    uint64_t gen;
    size_t n;
    route_member_t m[PG_MAX_NODES];
} pg_push_t;

static void push_deliver(void *arg)
{
    pg_push_t *p = arg;
    pg_t *pg = p->pg;
    if (sim_node_up(pg->sim, p->node) && sim_node_incarnation(pg->sim, p->node) == p->inc) {
        pg_node_t *nd = sim_node_state(pg->sim, p->node);
        if (nd && nd->svc)
            route_set_members(nd->svc, p->gen, p->m, p->n);
    }
}

static void push_members(pg_t *pg)
{
    pg->gen++;
    for (uint32_t i = 0; i < pg->n; i++) {
        if (!sim_node_up(pg->sim, i))
            continue;
        pg_push_t *p = pg_alloc(pg, sizeof(*p));
        p->pg = pg;
        p->node = i;
        p->inc = sim_node_incarnation(pg->sim, i);
        p->gen = pg->gen;
        for (uint32_t j = 0; j < pg->n; j++) {
            if (!pg->in_members[j])
                continue;
            route_member_t *m = &p->m[p->n++];
            m->rt.id = rt_id(j);
            m->rt.epoch = pg->epoch[j];
            m->node = j;
            m->weight = 1.0;
            m->route_capable = true;
            m->route_version = ROUTE_PROTOCOL_VERSION;
        }
        sim_schedule(pg->sim, sim_rand_range(pg->sim, 0, 50) * SIM_MSG_NS, push_deliver, p);
    }
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static void on_ready(void *arg, int rc)
{
    pg_node_t *nd = arg;
    if (rc != 0) {
        sim_fail(nd->pg->sim, "n%u: route service failed to start: %s", nd->id, kvmesh_errname(rc));
        return;
    }
    nd->ready = true;
}

static void on_recv(void *ctx, const env_msg_t *msg)
{
    pg_node_t *nd = ctx;
    if (nd->svc)
        route_on_message(nd->svc, msg);
}

static void set_meta(pg_t *pg, uint32_t i, bool cut)
{
    meta_memory_faults_t f = {.latency_min_ms = 1, .latency_max_ms = 8, .partitioned = cut};
    meta_memory_set_faults(pg->node_m[i], &f);
}

static void *pg_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    pg_t *pg = ctx;
    pg_node_t *nd = calloc(1, sizeof(*nd));
    KVM_ASSERT(nd != NULL);
    nd->pg = pg;
    nd->id = node;
    nd->env = env;
    pg->epoch[node] = sim_node_incarnation(sim, node);
    env_set_recv(env, on_recv, nd);
    route_svc_opts_t o = {.env = env,
                          .meta = pg->node_m[node],
                          .deployment = "simpurge",
                          .self = {.id = rt_id(node), .epoch = pg->epoch[node]},
                          .policy = {.mode = ROUTE_MODE_EMBEDDED_WRH,
                                     .top_k = pg->k,
                                     .n_shards = pg->shards,
                                     .protocol_version = ROUTE_PROTOCOL_VERSION},
                          .shard_lease_ms = PG_LEASE_MS,
                          .request_timeout_ms = PG_TIMEOUT_MS};
    int rc = route_svc_new(&nd->svc, &o, on_ready, nd);
    KVM_ASSERT(rc == 0);
    route_test_set_bugs(nd->svc, pg->bugs);
    return nd;
}

static void pg_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    pg_node_t *nd = state;
    route_svc_free(nd->svc); /* pending client ops complete with ECANCELED */
    free(nd);
    (void)ctx;
    (void)sim;
    (void)node;
}

/* A ready node to issue a client operation from, -1 when none. */
static int pick_node(pg_t *pg)
{
    uint32_t start = (uint32_t)sim_rand_range(pg->sim, 0, pg->n - 1);
    for (uint32_t j = 0; j < pg->n; j++) {
        uint32_t i = (start + j) % pg->n;
        pg_node_t *nd = sim_node_up(pg->sim, i) ? sim_node_state(pg->sim, i) : NULL;
        if (nd && nd->ready && nd->svc)
            return (int)i;
    }
    return -1;
}

/* ---- setup writes and removes --------------------------------------------------------------- */

static void build_route(pg_t *pg, uint32_t node, uint32_t key, kvm_route_t *r)
{
    kvm_route_init(r);
    int rc = kvm_ident_copy(&r->ident, &pg->keys[key].ident);
    KVM_ASSERT(rc == 0);
    r->version = (kvm_route_version_t){0, 1};
    r->content_op =
        (kvm_op_id_t){.writer = rt_id(node), .epoch = pg->epoch[node], .seq = ++pg->next_value};
}

static void write_start(void *arg);

static void write_retry(pg_t *pg, uint32_t key)
{
    sim_schedule(pg->sim, sim_rand_range(pg->sim, 20, 80) * SIM_MSG_NS, write_start,
                 req(pg, key, 0));
}

static void on_written(void *arg, int rc, const kvm_route_t *route)
{
    pg_req_t *q = arg;
    pg_t *pg = q->pg;
    pg_key_t *k = &pg->keys[q->key];
    if (route && (rc == 0 || (rc == KVMESH_ECONFLICT && !kvm_route_is_tombstone(route)))) {
        k->st = PK_LIVE; /* (a conflict: an earlier attempt of ours applied) */
        k->ver = route->version;
        k->value = route->content_op.seq;
        return;
    }
    write_retry(pg, q->key);
}

static void write_start(void *arg)
{
    pg_req_t *q = arg;
    pg_t *pg = q->pg;
    int node = pick_node(pg);
    if (node < 0) {
        write_retry(pg, q->key);
        return;
    }
    kvm_route_t r;
    build_route(pg, (uint32_t)node, q->key, &r);
    r.length = 4096;
    r.checksum = r.content_op.seq * 0x9e3779b97f4a7c15ull;
    r.n_replicas = 1;
    r.replicas[0] = (kvm_hot_replica_t){.owner = rt_id((uint32_t)node),
                                        .segment = 1,
                                        .offset = r.content_op.seq * 4096,
                                        .length = 4096,
                                        .checksum = r.checksum};
    pg_node_t *nd = sim_node_state(pg->sim, (uint32_t)node);
    pg_req_t *q2 = req(pg, q->key, (uint32_t)node);
    if (route_cas(nd->svc, &KVM_ROUTE_VERSION_NONE, &r, on_written, q2) != 0)
        write_retry(pg, q->key);
    kvm_route_free(&r);
}

static void remove_start(void *arg);

static void remove_retry(pg_t *pg, uint32_t key)
{
    sim_schedule(pg->sim, sim_rand_range(pg->sim, 20, 150) * SIM_MSG_NS, remove_start,
                 req(pg, key, 0));
}

static void on_finalized(void *arg, int rc, const kvm_route_t *route)
{
    pg_req_t *q = arg;
    pg_key_t *k = &q->pg->keys[q->key];
    k->st = PK_ACKED; /* best effort, as the store's: the result is not looked at again */
    k->last_rc = rc;
    sim_log(q->pg->sim, "k%u: FINALIZED tombstone CAS from n%u: %s", q->key, q->node,
            kvmesh_errname(rc));
    (void)route;
}

static void on_removed(void *arg, int rc, const kvm_route_t *route)
{
    pg_req_t *q = arg;
    pg_t *pg = q->pg;
    pg_key_t *k = &pg->keys[q->key];
    k->last_rc = rc;
    sim_log(pg->sim, "k%u: PENDING tombstone CAS from n%u: %s", q->key, q->node,
            kvmesh_errname(rc));
    if (rc == KVMESH_ECONFLICT && route && !kvm_route_is_tombstone(route) &&
        k->tries < PG_REMOVE_TRIES) {
        k->ver = route->version;
        remove_retry(pg, q->key);
        return;
    }
    if (rc == KVMESH_EAGAIN && k->tries < PG_REMOVE_TRIES) {
        remove_retry(pg, q->key);
        return;
    }
    if (rc != 0 || !route) {
        k->st = PK_MAYBE; /* "the remove may have been applied": not touched again */
        return;
    }
    pg_node_t *nd = sim_node_up(pg->sim, q->node) ? sim_node_state(pg->sim, q->node) : NULL;
    kvm_route_t fin;
    kvm_route_init(&fin);
    int crc = nd && nd->svc ? kvm_route_copy(&fin, route) : KVMESH_EUNAVAILABLE;
    k->st = PK_FINALIZING;
    if (crc == 0) {
        fin.tomb = KVM_TOMB_FINALIZED;
        fin.retain_until_ms = env_wall_ms(nd->env) + PG_RETENTION_MS;
        crc = route_cas(nd->svc, &route->version, &fin, on_finalized, req(pg, q->key, q->node));
    }
    kvm_route_free(&fin);
    if (crc != 0)
        k->st = PK_ACKED;
}

static void remove_start(void *arg)
{
    pg_req_t *q = arg;
    pg_t *pg = q->pg;
    pg_key_t *k = &pg->keys[q->key];
    int node = pick_node(pg);
    k->st = PK_REMOVING;
    if (node < 0) {
        remove_retry(pg, q->key);
        return;
    }
    k->tries++;
    kvm_route_t t;
    build_route(pg, (uint32_t)node, q->key, &t);
    pg_node_t *nd = sim_node_state(pg->sim, (uint32_t)node);
    t.tomb = KVM_TOMB_PENDING;
    t.retain_until_ms = env_wall_ms(nd->env) + PG_RETENTION_MS;
    if (route_cas(nd->svc, &k->ver, &t, on_removed, req(pg, q->key, (uint32_t)node)) != 0)
        remove_retry(pg, q->key);
    kvm_route_free(&t);
}

/* ---- faults --------------------------------------------------------------------------------- */

typedef struct pg_ev {
    pg_t *pg;
    uint32_t a, b;
} pg_ev_t;

static pg_ev_t *ev(pg_t *pg, uint32_t a, uint32_t b)
{
    pg_ev_t *e = pg_alloc(pg, sizeof(*e));
    e->pg = pg;
    e->a = a;
    e->b = b;
    return e;
}

static void unblock(void *arg)
{
    pg_ev_t *e = arg;
    if (e->pg->faults)
        sim_block(e->pg->sim, e->a, e->b, false);
}

static uint32_t down_count(pg_t *pg)
{
    uint32_t d = 0;
    for (uint32_t i = 0; i < pg->n; i++)
        d += !sim_node_up(pg->sim, i) || !pg->in_members[i];
    return d;
}

static void rejoin(void *arg)
{
    pg_ev_t *e = arg;
    pg_t *pg = e->pg;
    if (!pg->faults)
        return;
    if (!sim_node_up(pg->sim, e->a))
        sim_restart(pg->sim, e->a);
    sim_heal(pg->sim);
    set_meta(pg, e->a, false);
    pg->in_members[e->a] = true;
    push_members(pg);
}

static void leave(void *arg)
{
    pg_ev_t *e = arg;
    pg_t *pg = e->pg;
    if (!pg->faults)
        return;
    pg->in_members[e->a] = false; /* membership notices after its lease ran out */
    push_members(pg);
}

/* The primary of a random shard crashes, or is cut off from its peers and from metadata (its
 * leases run out, membership drops it, the next runtime rolls the shard over), then comes back. */
static void fail_primary(pg_t *pg)
{
    uint32_t s = (uint32_t)sim_rand_range(pg->sim, 0, pg->shards - 1);
    for (uint32_t i = 0; i < pg->n; i++) {
        pg_node_t *nd = sim_node_up(pg->sim, i) ? sim_node_state(pg->sim, i) : NULL;
        if (!nd || !nd->svc || !route_test_is_primary(nd->svc, s, NULL))
            continue;
        bool crash = sim_chance(pg->sim, 0.5);
        sim_log(pg->sim, "failover: n%u, primary of shard %u, %s", i, s,
                crash ? "crashes" : "is cut off from peers and metadata");
        if (crash)
            sim_crash(pg->sim, i);
        else {
            sim_isolate(pg->sim, i);
            set_meta(pg, i, true);
        }
        sim_schedule(pg->sim, (PG_LEASE_MS + sim_rand_range(pg->sim, 50, 300)) * SIM_MSG_NS, leave,
                     ev(pg, i, 0));
        sim_schedule(pg->sim, sim_rand_range(pg->sim, 1500, 3000) * SIM_MSG_NS, rejoin,
                     ev(pg, i, 0));
        return;
    }
}

static void nemesis(void *arg)
{
    pg_t *pg = arg;
    if (!pg->faults)
        return;
    for (int j = 0; j < 3; j++) { /* one-way cuts: mirror requests or their answers lost */
        uint32_t a = (uint32_t)sim_rand_range(pg->sim, 0, pg->n - 1);
        uint32_t b = (uint32_t)sim_rand_range(pg->sim, 0, pg->n - 1);
        if (a == b)
            continue;
        sim_block(pg->sim, a, b, true);
        sim_schedule(pg->sim, sim_rand_range(pg->sim, 100, 700) * SIM_MSG_NS, unblock,
                     ev(pg, a, b));
    }
    if (pg->prof->failover && down_count(pg) == 0 && sim_chance(pg->sim, 0.3))
        fail_primary(pg);
    sim_schedule(pg->sim, sim_rand_range(pg->sim, 200, 600) * SIM_MSG_NS, nemesis, pg);
}

/* ---- waiting -------------------------------------------------------------------------------- */

static bool all_ready(void *ctx)
{
    pg_t *pg = ctx;
    for (uint32_t s = 0; s < pg->shards; s++) {
        bool any = false;
        for (uint32_t i = 0; i < pg->n; i++) {
            pg_node_t *nd = sim_node_state(pg->sim, i);
            any |= nd && nd->ready && route_test_is_primary(nd->svc, s, NULL);
        }
        if (!any)
            return false;
    }
    for (uint32_t i = 0; i < pg->n; i++) {
        pg_node_t *nd = sim_node_state(pg->sim, i);
        if (!nd || !nd->ready)
            return false;
    }
    return true;
}

static bool all_live(void *ctx)
{
    pg_t *pg = ctx;
    for (uint32_t k = 0; k < PG_KEYS; k++)
        if (pg->keys[k].st != PK_LIVE)
            return false;
    return true;
}

static bool all_removed(void *ctx)
{
    pg_t *pg = ctx;
    for (uint32_t k = 0; k < PG_KEYS; k++)
        if (pg->keys[k].st != PK_ACKED && pg->keys[k].st != PK_MAYBE)
            return false;
    return true;
}

static bool final_done(void *ctx)
{
    return ((pg_t *)ctx)->final_pending == 0;
}

/* ---- checks --------------------------------------------------------------------------------- */

static const char *kstate_name(enum pg_kstate st)
{
    return st == PK_ACKED ? "remove acknowledged" : "remove ended unknown";
}

/* The current primary of shard s and its token; -1 when none serves. */
static int primary_of(pg_t *pg, uint32_t s, uint64_t *token)
{
    for (uint32_t i = 0; i < pg->n; i++) {
        pg_node_t *nd = sim_node_up(pg->sim, i) ? sim_node_state(pg->sim, i) : NULL;
        if (nd && nd->svc && route_test_is_primary(nd->svc, s, token))
            return (int)i;
    }
    return -1;
}

/* Every member of each shard's current set: no tombstone (purge) and the same copy of every
 * key (agreement); an acknowledged remove has no live copy anywhere (resurrection). */
static void check_authorities(pg_t *pg, bool purge_pass)
{
    for (uint32_t key = 0; key < PG_KEYS && !sim_failed(pg->sim); key++) {
        pg_key_t *k = &pg->keys[key];
        uint32_t s = kvm_ident_shard(&k->ident, pg->shards);
        uint64_t tok = 0;
        int p = primary_of(pg, s, &tok);
        if (p < 0) {
            sim_fail(pg->sim, "shard %u has no serving primary after the silence", s);
            return;
        }
        int first = -1;
        bool ref_live = false;
        kvm_route_t ref;
        kvm_route_init(&ref);
        for (uint32_t i = 0; i < pg->n && !sim_failed(pg->sim); i++) {
            pg_node_t *nd = sim_node_state(pg->sim, i);
            kvm_route_t r;
            uint64_t t = 0;
            int rc = nd && nd->svc ? route_test_local(nd->svc, &k->ident, &r, &t) : KVMESH_ENOENT;
            if (t != tok) { /* not a member of the current set (an old table is never read) */
                if (rc == 0)
                    kvm_route_free(&r);
                continue;
            }
            bool tomb = rc == 0 && kvm_route_is_tombstone(&r);
            bool live = rc == 0 && !tomb;
            const char *role = (int)i == p ? "primary" : "secondary";
            if (purge_pass) {
                if (tomb)
                    sim_fail(pg->sim,
                             "purge: n%u (%s of shard %u) still holds k%u's tombstone v(%llu,%llu) "
                             "%d s after the heal (%s, last rc %s)",
                             i, role, s, key, (unsigned long long)r.version.fencing_token,
                             (unsigned long long)r.version.primary_sequence, PG_SETTLE_S,
                             kstate_name(k->st), kvmesh_errname(k->last_rc));
            } else if (live && k->st == PK_ACKED)
                sim_fail(pg->sim,
                         "resurrection: n%u (%s of shard %u) holds k%u's live value %llu after "
                         "its remove was acknowledged",
                         i, role, s, key, (unsigned long long)r.content_op.seq);
            else if (first >= 0 && (live != ref_live || (live && !kvm_route_equal(&r, &ref))))
                sim_fail(pg->sim,
                         "agreement: members of shard %u disagree on k%u (%s): n%d %s, n%u %s", s,
                         key, kstate_name(k->st), first, ref_live ? "live" : "absent", i,
                         live ? "live" : "absent");
            if (first < 0) {
                first = (int)i;
                ref_live = live;
                if (live && kvm_route_copy(&ref, &r) != 0)
                    sim_fail(pg->sim, "out of memory");
            }
            if (rc == 0)
                kvm_route_free(&r);
        }
        kvm_route_free(&ref);
    }
}

typedef struct pg_look {
    pg_t *pg;
    uint32_t key, node;
} pg_look_t;

static void on_final(void *arg, int rc, const kvm_route_t *route)
{
    pg_look_t *l = arg;
    pg_t *pg = l->pg;
    pg_key_t *k = &pg->keys[l->key];
    pg->final_pending--;
    bool absent = rc == KVMESH_ENOENT || (rc == 0 && route && kvm_route_is_tombstone(route));
    bool old = rc == 0 && route && !kvm_route_is_tombstone(route) &&
               route->content_op.seq == k->value && k->st == PK_MAYBE;
    if (!absent && !old)
        sim_fail(pg->sim, "resurrection: a lookup of k%u (%s) from n%u answered %s%s%llu", l->key,
                 kstate_name(k->st), l->node, kvmesh_errname(rc), rc == 0 ? " value " : " ",
                 rc == 0 && route ? (unsigned long long)route->content_op.seq : 0ull);
    free(l);
}

static void check_lookups(pg_t *pg)
{
    for (uint32_t i = 0; i < pg->n && !sim_failed(pg->sim); i++) {
        pg_node_t *nd = sim_node_state(pg->sim, i);
        for (uint32_t key = 0; key < PG_KEYS && !sim_failed(pg->sim); key++) {
            pg_look_t *l = calloc(1, sizeof(*l));
            KVM_ASSERT(l != NULL);
            *l = (pg_look_t){pg, key, i};
            pg->final_pending++;
            if (route_lookup(nd->svc, &pg->keys[key].ident, on_final, l) != 0) {
                pg->final_pending--;
                free(l);
                sim_fail(pg->sim, "n%u: final lookup of k%u did not start", i, key);
                return;
            }
            if (sim_run_while_not(pg->sim, final_done, pg, sim_now(pg->sim) + 3 * SIM_SEC_NS) !=
                    SIM_REACHED &&
                !sim_failed(pg->sim))
                sim_fail(pg->sim, "n%u: final lookup of k%u did not complete", i, key);
        }
    }
}

/* ---- the run -------------------------------------------------------------------------------- */

static void run_phases(pg_t *pg)
{
    sim_t *sim = pg->sim;
    if (sim_run_while_not(sim, all_ready, pg, 10 * SIM_SEC_NS) != SIM_REACHED) {
        sim_fail(sim, "setup: the shards did not become active");
        return;
    }
    for (uint32_t k = 0; k < PG_KEYS; k++)
        write_start(req(pg, k, 0));
    if (sim_run_while_not(sim, all_live, pg, sim_now(sim) + 10 * SIM_SEC_NS) != SIM_REACHED) {
        sim_fail(sim, "setup: not every key got its live route");
        return;
    }
    /* deletes under faults */
    pg->faults = true;
    sim_set_net(sim, &(sim_net_t){.delay_min_ns = SIM_MSG_NS,
                                  .delay_max_ns = 5 * SIM_MSG_NS,
                                  .drop_p = 0.02,
                                  .dup_p = 0.01,
                                  .reorder_p = 0.05,
                                  .reorder_max_ns = 700 * SIM_MSG_NS});
    sim_schedule(sim, 0, nemesis, pg);
    for (uint32_t k = 0; k < PG_KEYS; k++)
        sim_schedule(sim, sim_rand_range(sim, 0, 2500) * SIM_MSG_NS, remove_start, req(pg, k, 0));
    if (sim_run_while_not(sim, all_removed, pg, sim_now(sim) + 30 * SIM_SEC_NS) != SIM_REACHED) {
        if (!sim_failed(sim))
            sim_fail(sim, "deletes: not every remove ended");
        return;
    }
    /* heal; then silence: nothing touches any key */
    pg->faults = false;
    sim_set_net(sim, &(sim_net_t){.delay_min_ns = SIM_MSG_NS, .delay_max_ns = 5 * SIM_MSG_NS});
    sim_heal(sim);
    for (uint32_t i = 0; i < pg->n; i++) {
        if (!sim_node_up(sim, i))
            sim_restart(sim, i);
        set_meta(pg, i, false);
        pg->in_members[i] = true;
    }
    push_members(pg);
    sim_run_for(sim, PG_SETTLE_S * SIM_SEC_NS);
    if (sim_failed(sim))
        return;
    uint64_t left = 0; /* every runtime's count (a table of a set it left included) */
    for (uint32_t i = 0; i < pg->n; i++) {
        uint64_t entries, tombs, purged;
        route_table_counts(((pg_node_t *)sim_node_state(sim, i))->svc, &entries, &tombs, &purged);
        left += tombs;
    }
    check_authorities(pg, true); /* every tombstone first: a leftover one explains the rest */
    if (!sim_failed(sim))
        check_authorities(pg, false);
    /* route_purge changes no set, so every runtime is a member; in route_purge_failover a
     * runtime left out of a set keeps its old table, which is never read (docs/reliability.md
     * "Tombstone purge"): counted in the log only */
    if (left && !pg->prof->failover && !sim_failed(sim))
        sim_fail(sim, "purge: %llu tombstones left outside the current sets",
                 (unsigned long long)left);
    sim_log(sim, "purge: %llu tombstones left at any runtime", (unsigned long long)left);
    if (!sim_failed(sim))
        check_lookups(pg);
    uint32_t acked = 0, maybe = 0;
    for (uint32_t k = 0; k < PG_KEYS; k++) {
        acked += pg->keys[k].st == PK_ACKED;
        maybe += pg->keys[k].st == PK_MAYBE;
    }
    sim_log(sim, "purge: %u removes acknowledged, %u unknown", acked, maybe);
}

static int pg_run(const pg_profile_t *prof, const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    unsigned bugs = 0;
    if (strcmp(v, "purge_no_repair") == 0)
        bugs = ROUTE_TEST_BUG_PURGE_NO_REPAIR;
    else if (strcmp(v, "purge_dirty") == 0)
        bugs = ROUTE_TEST_BUG_PURGE_DIRTY;
    else if (*v) {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (route_purge scenarios know purge_no_repair, purge_dirty)",
                 v);
        return 1;
    }
    pg_t *pg = calloc(1, sizeof(*pg));
    KVM_ASSERT(pg != NULL);
    pg->prof = prof;
    pg->bugs = bugs;
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    pg->n = 4 + (uint32_t)(ro->seed % 2);
    pg->shards = 1 + (uint32_t)(ro->seed % 3);
    pg->k = 2 + (uint32_t)((ro->seed / 3) % 2);
    cfg.n_nodes = pg->n;
    cfg.clock_drift_max_ppm = 10000;
    cfg.clock_skew_max_ms = 200;
    cfg.max_steps = 50000000;
    snprintf(pg->url, sizeof(pg->url), "memory://purge%llu", (unsigned long long)ro->seed);
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    pg->sim = sim;
    sim_set_net(sim, &(sim_net_t){.delay_min_ns = SIM_MSG_NS, .delay_max_ns = 5 * SIM_MSG_NS});
    int rc = meta_open(&pg->world_m, sim_world_env(sim), pg->url, NULL);
    KVM_ASSERT(rc == 0);
    for (uint32_t i = 0; i < pg->n; i++) {
        rc = meta_open(&pg->node_m[i], sim_world_env(sim), pg->url, NULL);
        KVM_ASSERT(rc == 0);
        set_meta(pg, i, false);
        pg->in_members[i] = true;
        pg->epoch[i] = 1;
    }
    for (uint32_t k = 0; k < PG_KEYS; k++) { /* key k lives in shard k % shards */
        for (uint32_t j = 0;; j++) {
            char key[32];
            int len = snprintf(key, sizeof(key), "p%u-%u", k, j);
            rc = kvm_ident_init(&pg->keys[k].ident, "tenant", NULL, key, (size_t)len);
            KVM_ASSERT(rc == 0);
            if (kvm_ident_shard(&pg->keys[k].ident, pg->shards) == k % pg->shards)
                break;
            kvm_ident_free(&pg->keys[k].ident);
        }
    }
    sim_set_node_hooks(sim, pg_start, pg_stop, pg);
    sim_start(sim);
    push_members(pg);
    run_phases(pg);
    if (sim_failed(sim) && ro->verbose && ro->out) {
        for (uint32_t k = 0; k < PG_KEYS; k++)
            fprintf(ro->out, "k%u: state %d last rc %s\n", k, pg->keys[k].st,
                    kvmesh_errname(pg->keys[k].last_rc));
        for (uint32_t i = 0; i < pg->n; i++) {
            pg_node_t *nd = sim_node_state(sim, i);
            fprintf(ro->out, "n%u:\n", i);
            if (nd && nd->svc)
                route_test_dump(nd->svc, ro->out);
        }
    }
    for (uint32_t i = 0; i < pg->n; i++)
        sim_crash(sim, i);
    for (uint32_t i = 0; i < pg->n; i++)
        meta_close(pg->node_m[i]);
    meta_close(pg->world_m);
    int out = sim_finish(sim, res);
    for (size_t i = 0; i < pg->n_allocs; i++)
        free(pg->allocs[i]);
    free(pg->allocs);
    for (uint32_t k = 0; k < PG_KEYS; k++)
        kvm_ident_free(&pg->keys[k].ident);
    free(pg);
    return out;
}

#define PG_SCENARIO(NAME, DESC, ...)                                                               \
    static const pg_profile_t prof_##NAME = {.name = #NAME, __VA_ARGS__};                          \
    static int run_##NAME(const sim_run_opts_t *ro, sim_result_t *res)                             \
    {                                                                                              \
        return pg_run(&prof_##NAME, ro, res);                                                      \
    }                                                                                              \
    const sim_scenario_t scen_##NAME = {.name = #NAME, .description = DESC, .run = run_##NAME};

PG_SCENARIO(route_purge,
            "route mesh: removes while mirror answers are lost or late, then silence past the "
            "retention: no tombstone left, the sets agree, no removed value back",
            .failover = false)
PG_SCENARIO(route_purge_failover,
            "route mesh: route_purge while primaries crash or are cut off (dirty tombstones at "
            "a runtime that lost primaryship)",
            .failover = true)
