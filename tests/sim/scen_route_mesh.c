/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_route_mesh.c — the EmbeddedWrh route authority mesh in the simulator: every node runs a
 * route_svc_t on its env; all share one in-memory metadata store (memory://routeSEED, kept
 * alive by a handle on the world env; each node's handle is also on the world env so that the
 * store's lease clock is the true virtual time while node clocks drift). A world-level harness
 * pushes membership snapshots (optionally lagged per node), drives clients that issue lookups
 * and CAS with unique values, injects the faults of the scenario's profile, and checks the
 * history.
 *
 * Checks:
 *   per step   at most one runtime serves as fenced primary of a shard at any instant;
 *              every 256 steps, each service's own invariants (route_test_check);
 *   history    per key: no two acknowledged CAS from one predecessor; acknowledged versions are
 *              unique, ordered like real time, and each one's predecessor is >= every earlier
 *              acknowledged version (one linear chain); a read (lookup) never returns a version
 *              older than an acknowledged write that completed before it began, and a version
 *              that an acknowledged write produced carries that write's value; no read fails
 *              with a protocol conflict (except in route_conflict, where it must);
 *   liveness   after the faults stop (heal, restart, full membership) every key (and so every
 *              shard: key k lives in shard k % shards) gets an acknowledged CAS within
 *              ROUTE_SIM_LIVENESS_S; a final lookup of every key then
 *              must see the newest acknowledged version (no acknowledged write lost).
 *
 * Scenarios (one profile each): route_basic, route_crash, route_partition, route_membership,
 * route_mirror, route_conflict, route_stale (scripted rollover with a stale client),
 * route_restart_all (every runtime restarts at once: takeover with the state lost),
 * route_steady (metadata call counting), route_batch (clients also issue batching windows over
 * many keys: per-item results checked by the same history rules, and every acknowledged CAS
 * must answer with the route it wrote: its own key and value). Variants (test-only,
 * must be caught): secondary_cas (secondaries accept CAS and clients send there),
 * skip_transfer (acquire without waiting for the lease and without state transfer),
 * strand_lost (a shard whose every source is gone never takes over: liveness fails),
 * batch_one_result (route_batch scenarios only: a client takes the first CAS answer of a batch
 * for every item in it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ident.h"
#include "core/route.h"
#include "core/util.h"
#include "core/wrh.h"
#include "meta/meta.h"
#include "meta/meta_memory.h"
#include "route/route.h"
#include "route/route_test.h"
#include "route_history.h"
#include "sim.h"

#define RS_MAX_NODES         6
#define RS_KEYS              6
#define RS_MAX_OPS           20000
#define ROUTE_SIM_LIVENESS_S 8
#define RS_LEASE_MS          1000
#define RS_TIMEOUT_MS        1500
#define RS_KEEPALIVE_PER_S   5 /* the service renews every lease/4 = 250 ms, plus slack */

enum { OPK_LOOKUP = 1, OPK_CAS = 2 };

typedef struct rs_profile {
    const char *name;
    uint32_t fault_s; /* seconds of fault phase */
    bool crashes;
    bool partitions;
    bool lag;           /* lagged membership pushes, joins */
    bool mirror_faults; /* one-way link cuts */
    bool conflict;      /* plant a protocol conflict */
    bool steady;        /* metadata call counting */
    bool stale;         /* scripted rollover with a stale client */
    bool restart_all;   /* every runtime restarts at once after the traffic phase */
    bool batch;         /* clients also issue batches (route_batch_begin/end) over many keys */
} rs_profile_t;

typedef struct rs rs_t;

typedef struct rs_node {
    rs_t *rs;
    uint32_t id;
    env_t *env;
    meta_t *m;
    route_svc_t *svc;
    bool ready, stopping;
    env_timer_id think;
    bool busy;
    uint32_t next_key;
    uint32_t outstanding; /* items of the node's batch still in flight (batch profile) */
} rs_node_t;

typedef struct rs_req {
    rs_node_t *nd;
    int64_t hid;
    uint32_t key;
    bool chain; /* lookup that continues into a CAS */
    uint64_t value;
} rs_req_t;

struct rs {
    sim_t *sim;
    const rs_profile_t *prof;
    uint32_t n, shards, k;
    unsigned bugs;
    char url[64];
    meta_t *world_m;
    meta_t *node_m[RS_MAX_NODES];
    uint64_t gen;
    bool in_members[RS_MAX_NODES];
    bool meta_cut[RS_MAX_NODES];
    uint32_t epoch[RS_MAX_NODES];
    sim_hist_t *hist;
    uint64_t next_value;
    kvm_ident_t keys[RS_KEYS];
    kvm_route_version_t seen[RS_MAX_NODES][RS_KEYS];
    bool liveness;
    uint64_t heal_ns;
    bool live_ok[RS_KEYS];
    uint32_t final_pending;
    bool final_started;
    /* conflict scenario */
    bool planted;
    uint32_t planted_key;
    kvm_route_t last_ok[RS_KEYS];
    bool has_last_ok[RS_KEYS];
    uint64_t corrupt_reads;
    uint64_t steps_checked;
    /* world events in flight when the run ends are dropped: their args are freed at the end */
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* steady scenario */
    uint64_t steady_ops, steady_target;
};

static uint64_t vpack(const kvm_route_version_t *v)
{
    return v->fencing_token << 32 | (v->primary_sequence & 0xffffffffu);
}

static kvm_runtime_id_t rt_id(uint32_t node)
{
    return kvm_id128_from_u64(0x6b766d657368ull, node + 1);
}

static void *rs_alloc(rs_t *rs, size_t size)
{
    if (rs->n_allocs == rs->cap_allocs) {
        rs->cap_allocs = rs->cap_allocs ? 2 * rs->cap_allocs : 64;
        rs->allocs = realloc(rs->allocs, rs->cap_allocs * sizeof(void *));
        KVM_ASSERT(rs->allocs != NULL);
    }
    void *p = calloc(1, size);
    KVM_ASSERT(p != NULL);
    rs->allocs[rs->n_allocs++] = p;
    return p;
}

/* ---- membership ----------------------------------------------------------------------------- */

typedef struct rs_push {
    rs_t *rs;
    uint32_t node;
    uint32_t inc;
    uint64_t gen;
    size_t n;
    route_member_t m[RS_MAX_NODES];
} rs_push_t;

static void push_deliver(void *arg)
{
    rs_push_t *p = arg;
    rs_t *rs = p->rs;
    if (sim_node_up(rs->sim, p->node) && sim_node_incarnation(rs->sim, p->node) == p->inc) {
        rs_node_t *nd = sim_node_state(rs->sim, p->node);
        if (nd && nd->svc)
            route_set_members(nd->svc, p->gen, p->m, p->n);
    }
}

static void push_members(rs_t *rs, bool lag)
{
    rs->gen++;
    for (uint32_t i = 0; i < rs->n; i++) {
        if (!sim_node_up(rs->sim, i))
            continue;
        rs_push_t *p = rs_alloc(rs, sizeof(*p));
        p->rs = rs;
        p->node = i;
        p->inc = sim_node_incarnation(rs->sim, i);
        p->gen = rs->gen;
        for (uint32_t j = 0; j < rs->n; j++) {
            if (!rs->in_members[j])
                continue;
            route_member_t *m = &p->m[p->n++];
            m->rt.id = rt_id(j);
            m->rt.epoch = rs->epoch[j];
            m->node = j;
            m->weight = 1.0;
            m->route_capable = true;
            m->route_version = ROUTE_PROTOCOL_VERSION;
        }
        uint64_t d = lag ? sim_rand_range(rs->sim, 0, 400) * SIM_MSG_NS : 0;
        sim_schedule(rs->sim, d, push_deliver, p);
    }
}

/* ---- clients -------------------------------------------------------------------------------- */

static void client_next(void *arg);

/* One of the node's operations ended: true when the node is idle now (the last item of a
 * batch, or its only operation). */
static bool nd_release(rs_node_t *nd)
{
    if (nd->outstanding > 1) {
        nd->outstanding--;
        return false;
    }
    nd->outstanding = 0;
    nd->busy = false;
    return true;
}

static void client_arm(rs_node_t *nd)
{
    if (nd->stopping)
        return;
    uint64_t d =
        nd->rs->prof->steady ? SIM_MSG_NS / 10 : sim_rand_range(nd->rs->sim, 2, 25) * SIM_MSG_NS;
    nd->think = env_timer_start(nd->env, d, client_next, nd);
}

static void build_route(rs_t *rs, rs_node_t *nd, uint32_t key, uint64_t value, bool tomb,
                        kvm_route_t *r)
{
    kvm_route_init(r);
    int rc = kvm_ident_copy(&r->ident, &rs->keys[key]);
    KVM_ASSERT(rc == 0);
    r->version = (kvm_route_version_t){0, 1};
    r->content_op =
        (kvm_op_id_t){.writer = rt_id(nd->id), .epoch = rs->epoch[nd->id], .seq = value};
    if (tomb) {
        r->tomb = KVM_TOMB_PENDING;
        return;
    }
    r->length = 4096;
    r->checksum = value * 0x9e3779b97f4a7c15ull;
    r->n_replicas = 1;
    r->replicas[0] = (kvm_hot_replica_t){.owner = rt_id(nd->id),
                                         .segment = 1,
                                         .offset = value * 4096,
                                         .length = 4096,
                                         .checksum = r->checksum};
}

static void on_cas_done(void *arg, int rc, const kvm_route_t *route)
{
    rs_req_t *q = arg;
    rs_node_t *nd = q->nd;
    rs_t *rs = nd->rs;
    const sim_op_t *op = sim_hist_get(rs->hist, (size_t)q->hid);
    uint64_t newv = 0;
    if (rs->prof->batch && rc == 0 &&
        (!route || !kvm_ident_equal(&route->ident, &rs->keys[q->key]) ||
         route->content_op.seq != q->value))
        sim_fail(rs->sim, "CAS on k%u (value %llu) acknowledged with another route (%s)", q->key,
                 (unsigned long long)q->value,
                 !route                                              ? "none"
                 : kvm_ident_equal(&route->ident, &rs->keys[q->key]) ? "same key, another value"
                                                                     : "another key");
    if (rc == 0 && route) {
        newv = vpack(&route->version);
        rs->seen[nd->id][q->key] = route->version;
        if (rs->has_last_ok[q->key])
            kvm_route_free(&rs->last_ok[q->key]);
        kvm_route_init(&rs->last_ok[q->key]);
        if (kvm_route_copy(&rs->last_ok[q->key], route) == 0)
            rs->has_last_ok[q->key] = true;
        if (rs->liveness && sim_now(rs->sim) >= rs->heal_ns)
            rs->live_ok[q->key] = true;
        if (rs->prof->steady)
            rs->steady_ops++;
    } else if (rc == KVMESH_ECONFLICT) {
        rs->seen[nd->id][q->key] = route ? route->version : KVM_ROUTE_VERSION_NONE;
    }
    /* out_a: new version; out_b: the predecessor the caller expected (kept in the request) */
    sim_hist_end(rs->hist, q->hid, rc, newv, op->out_b);
    free(q);
    if (nd_release(nd))
        client_arm(nd);
}

static void start_cas(rs_node_t *nd, uint32_t key, const kvm_route_version_t *expected)
{
    rs_t *rs = nd->rs;
    uint64_t value = ++rs->next_value;
    bool tomb = !rs->prof->steady && !rs->prof->stale && sim_chance(rs->sim, 0.1);
    kvm_route_t r;
    build_route(rs, nd, key, value, tomb, &r);
    rs_req_t *q = calloc(1, sizeof(*q));
    KVM_ASSERT(q != NULL);
    q->nd = nd;
    q->key = key;
    q->value = value;
    q->hid = sim_hist_begin(rs->hist, nd->id, OPK_CAS, key, value);
    if (q->hid < 0) {
        free(q);
        kvm_route_free(&r);
        nd_release(nd);
        return;
    }
    /* record the expected version as the op's out_b until completion */
    ((sim_op_t *)sim_hist_get(rs->hist, (size_t)q->hid))->out_b = vpack(expected);
    nd->busy = true;
    int rc = route_cas(nd->svc, expected, &r, on_cas_done, q);
    kvm_route_free(&r);
    if (rc != 0) {
        sim_hist_end(rs->hist, q->hid, rc, 0, vpack(expected));
        free(q);
        if (nd_release(nd))
            client_arm(nd);
    }
}

static void on_lookup_done(void *arg, int rc, const kvm_route_t *route)
{
    rs_req_t *q = arg;
    rs_node_t *nd = q->nd;
    rs_t *rs = nd->rs;
    uint64_t v = 0, val = 0;
    if (rc == 0 && route) {
        v = vpack(&route->version);
        val = route->content_op.seq;
        rs->seen[nd->id][q->key] = route->version;
    } else if (rc == KVMESH_ENOENT) {
        rs->seen[nd->id][q->key] = KVM_ROUTE_VERSION_NONE;
    }
    if (rc == KVMESH_ECORRUPT)
        rs->corrupt_reads++;
    sim_hist_end(rs->hist, q->hid, rc, v, val);
    if (q->chain && !nd->stopping && (rc == 0 || rc == KVMESH_ENOENT)) {
        uint32_t key = q->key;
        free(q);
        kvm_route_version_t e = rs->seen[nd->id][key];
        start_cas(nd, key, &e);
        return;
    }
    if (rs->final_started && rs->final_pending > 0)
        rs->final_pending--;
    free(q);
    if (nd_release(nd))
        client_arm(nd);
}

static void start_lookup(rs_node_t *nd, uint32_t key, bool chain)
{
    rs_t *rs = nd->rs;
    rs_req_t *q = calloc(1, sizeof(*q));
    KVM_ASSERT(q != NULL);
    q->nd = nd;
    q->key = key;
    q->chain = chain;
    q->hid = sim_hist_begin(rs->hist, nd->id, OPK_LOOKUP, key, 0);
    if (q->hid < 0) {
        free(q);
        if (nd->outstanding)
            nd_release(nd);
        return;
    }
    nd->busy = true;
    int rc = route_lookup(nd->svc, &rs->keys[key], on_lookup_done, q);
    if (rc != 0) {
        sim_hist_end(rs->hist, q->hid, rc, 0, 0);
        free(q);
        if (nd_release(nd))
            client_arm(nd);
    }
}

/* Batch profile: one route batching window over 2..RS_KEYS distinct keys, each item a lookup
 * that continues into a CAS, a lone lookup, a CAS from the node's last seen version, or a CAS
 * from absence (which conflicts once the key exists: batches mix applied and refused items);
 * items to one shard primary travel as one batch, each keeps its own result in the history. */
static void start_batch(rs_node_t *nd)
{
    rs_t *rs = nd->rs;
    uint32_t keys[RS_KEYS];
    for (uint32_t k = 0; k < RS_KEYS; k++)
        keys[k] = k;
    for (uint32_t k = RS_KEYS - 1; k > 0; k--) { /* shuffle */
        uint32_t j = (uint32_t)sim_rand_range(rs->sim, 0, k);
        uint32_t t = keys[k];
        keys[k] = keys[j];
        keys[j] = t;
    }
    uint32_t n = (uint32_t)sim_rand_range(rs->sim, 2, RS_KEYS);
    uint32_t kind[RS_KEYS];
    for (uint32_t i = 0; i < n; i++)
        kind[i] = (uint32_t)sim_rand_range(rs->sim, 0, 3);
    nd->outstanding = n;
    nd->busy = true;
    route_batch_begin(nd->svc);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t key = keys[i];
        if (kind[i] == 0)
            start_lookup(nd, key, true);
        else if (kind[i] == 1)
            start_lookup(nd, key, false);
        else if (kind[i] == 2)
            start_cas(nd, key, &rs->seen[nd->id][key]);
        else /* from absence: a conflict once the key exists, beside items that apply */
            start_cas(nd, key, &KVM_ROUTE_VERSION_NONE);
    }
    route_batch_end(nd->svc);
}

static void client_next(void *arg)
{
    rs_node_t *nd = arg;
    rs_t *rs = nd->rs;
    nd->think = 0;
    if (nd->busy || !nd->ready || nd->stopping || rs->final_started || rs->prof->stale)
        return;
    if (rs->prof->steady && rs->steady_target && rs->steady_ops >= rs->steady_target)
        return;
    uint32_t key;
    if (rs->liveness)
        key = nd->next_key++ % RS_KEYS;
    else
        key = (uint32_t)sim_rand_range(rs->sim, 0, RS_KEYS - 1);
    double p = (double)(sim_rand_u64(rs->sim) >> 11) / 9007199254740992.0;
    if (rs->prof->batch && !rs->liveness && p < 0.5)
        start_batch(nd);
    else if (rs->planted && key == rs->planted_key && rs->liveness)
        start_cas(nd, key, &rs->seen[nd->id][key]); /* a write over the conflict resolves it */
    else if (rs->planted && key == rs->planted_key)
        start_lookup(nd, key, false); /* keep the conflict in place until the liveness phase */
    else if (rs->liveness || p < 0.5)
        start_lookup(nd, key, true);
    else if (p < 0.8)
        start_lookup(nd, key, false);
    else
        start_cas(nd, key, &rs->seen[nd->id][key]);
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static void on_ready(void *arg, int rc)
{
    rs_node_t *nd = arg;
    if (rc != 0) {
        sim_fail(nd->rs->sim, "n%u: route service failed to start: %s", nd->id, kvmesh_errname(rc));
        return;
    }
    nd->ready = true;
    client_arm(nd);
}

static void on_recv(void *ctx, const env_msg_t *msg)
{
    rs_node_t *nd = ctx;
    if (nd->svc)
        route_on_message(nd->svc, msg);
}

static void *rs_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    rs_t *rs = ctx;
    rs_node_t *nd = calloc(1, sizeof(*nd));
    KVM_ASSERT(nd != NULL);
    nd->rs = rs;
    nd->id = node;
    nd->env = env;
    nd->m = rs->node_m[node];
    rs->epoch[node] = sim_node_incarnation(sim, node);
    env_set_recv(env, on_recv, nd);
    route_svc_opts_t o = {.env = env,
                          .meta = nd->m,
                          .deployment = "simdep",
                          .self = {.id = rt_id(node), .epoch = rs->epoch[node]},
                          .policy = {.mode = ROUTE_MODE_EMBEDDED_WRH,
                                     .top_k = rs->k,
                                     .n_shards = rs->shards,
                                     .protocol_version = ROUTE_PROTOCOL_VERSION},
                          .shard_lease_ms = RS_LEASE_MS,
                          .request_timeout_ms = RS_TIMEOUT_MS};
    int rc = route_svc_new(&nd->svc, &o, on_ready, nd);
    KVM_ASSERT(rc == 0);
    route_test_set_bugs(nd->svc, rs->bugs);
    return nd;
}

static void rs_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    rs_node_t *nd = state;
    nd->stopping = true;
    env_timer_cancel(nd->env, nd->think);
    route_svc_free(nd->svc); /* pending client ops complete with ECANCELED */
    nd->svc = NULL;
    free(nd);
    (void)ctx;
    (void)sim;
}

/* ---- faults --------------------------------------------------------------------------------- */

static void set_meta_cut(rs_t *rs, uint32_t i, bool cut)
{
    rs->meta_cut[i] = cut;
    meta_memory_faults_t f = {.latency_min_ms = 1, .latency_max_ms = 8, .partitioned = cut};
    if (rs->prof->crashes || rs->prof->partitions)
        f.fail_ppm = 10000;
    meta_memory_set_faults(rs->node_m[i], &f);
}

typedef struct rs_ev {
    rs_t *rs;
    uint32_t node;
} rs_ev_t;

static rs_ev_t *ev(rs_t *rs, uint32_t node)
{
    rs_ev_t *e = rs_alloc(rs, sizeof(*e));
    e->rs = rs;
    e->node = node;
    return e;
}

static void drop_member(void *arg)
{
    rs_ev_t *e = arg;
    rs_t *rs = e->rs;
    if (!rs->liveness && (!sim_node_up(rs->sim, e->node) || rs->meta_cut[e->node])) {
        rs->in_members[e->node] = false;
        push_members(rs, rs->prof->lag);
    }
}

static void restart_node(void *arg)
{
    rs_ev_t *e = arg;
    rs_t *rs = e->rs;
    if (!sim_node_up(rs->sim, e->node)) {
        sim_restart(rs->sim, e->node);
        rs->in_members[e->node] = true;
        push_members(rs, rs->prof->lag);
    }
}

static void heal_node(void *arg)
{
    rs_ev_t *e = arg;
    rs_t *rs = e->rs;
    if (!rs->liveness) {
        sim_heal(rs->sim);
        set_meta_cut(rs, e->node, false);
        rs->in_members[e->node] = sim_node_up(rs->sim, e->node);
        push_members(rs, rs->prof->lag);
    }
}

static void unblock(void *arg)
{
    rs_ev_t *e = arg;
    rs_t *rs = e->rs;
    sim_block(rs->sim, e->node >> 8, e->node & 0xff, false);
}

static uint32_t down_count(rs_t *rs)
{
    uint32_t d = 0;
    for (uint32_t i = 0; i < rs->n; i++)
        if (!sim_node_up(rs->sim, i) || rs->meta_cut[i])
            d++;
    return d;
}

static void nemesis(void *arg)
{
    rs_t *rs = arg;
    if (rs->liveness)
        return;
    const rs_profile_t *p = rs->prof;
    uint64_t next = sim_rand_range(rs->sim, 2200, 3200) * SIM_MSG_NS;
    uint32_t v = (uint32_t)sim_rand_range(rs->sim, 0, rs->n - 1);
    if (p->crashes && down_count(rs) == 0 && sim_chance(rs->sim, 0.8)) {
        sim_crash(rs->sim, v);
        /* membership notices after the runtime's lease expired */
        sim_schedule(rs->sim, (RS_LEASE_MS + sim_rand_range(rs->sim, 50, 300)) * SIM_MSG_NS,
                     drop_member, ev(rs, v));
        sim_schedule(rs->sim, sim_rand_range(rs->sim, 200, 1800) * SIM_MSG_NS, restart_node,
                     ev(rs, v));
    }
    if (p->partitions && down_count(rs) == 0) {
        if (sim_chance(rs->sim, 0.5)) {
            /* isolated from peers and metadata: its leases run out, membership drops it */
            sim_isolate(rs->sim, v);
            set_meta_cut(rs, v, true);
            sim_schedule(rs->sim, (RS_LEASE_MS + sim_rand_range(rs->sim, 50, 300)) * SIM_MSG_NS,
                         drop_member, ev(rs, v));
        } else {
            /* a peer partition with metadata reachable everywhere: no membership change */
            uint32_t group[SIM_MAX_NODES] = {0};
            for (uint32_t i = 0; i < rs->n; i++)
                group[i] = sim_chance(rs->sim, 0.5) ? 1 : 0;
            sim_partition(rs->sim, group);
        }
        sim_schedule(rs->sim, sim_rand_range(rs->sim, 800, 2000) * SIM_MSG_NS, heal_node,
                     ev(rs, v));
    }
    if (p->mirror_faults) {
        for (int j = 0; j < 3; j++) {
            uint32_t a = (uint32_t)sim_rand_range(rs->sim, 0, rs->n - 1);
            uint32_t b = (uint32_t)sim_rand_range(rs->sim, 0, rs->n - 1);
            if (a == b)
                continue;
            sim_block(rs->sim, a, b, true);
            sim_schedule(rs->sim, sim_rand_range(rs->sim, 100, 600) * SIM_MSG_NS, unblock,
                         ev(rs, a << 8 | b));
        }
        next = sim_rand_range(rs->sim, 300, 900) * SIM_MSG_NS;
    }
    if (p->lag) {
        /* a member leaves or joins (route-capable set changes: rollover) */
        if (rs->in_members[v] && down_count(rs) == 0) {
            uint32_t in = 0;
            for (uint32_t i = 0; i < rs->n; i++)
                in += rs->in_members[i];
            if (in > 2) {
                rs->in_members[v] = false;
                push_members(rs, true);
            }
        } else if (!rs->in_members[v] && sim_node_up(rs->sim, v) && !rs->meta_cut[v]) {
            rs->in_members[v] = true;
            push_members(rs, true);
        }
        next = sim_rand_range(rs->sim, 1200, 2500) * SIM_MSG_NS;
    }
    sim_schedule(rs->sim, next, nemesis, rs);
}

static void plant_conflict(void *arg)
{
    rs_t *rs = arg;
    if (rs->liveness)
        return;
    for (uint32_t key = 0; key < RS_KEYS; key++) {
        if (rs->planted && key != rs->planted_key)
            continue;
        if (!rs->has_last_ok[key])
            continue;
        uint32_t shard = kvm_ident_shard(&rs->keys[key], rs->shards);
        bool any = false;
        for (uint32_t i = 0; i < rs->n; i++) {
            rs_node_t *nd = sim_node_state(rs->sim, i);
            int crc = -1;
            if (nd && nd->svc && !route_test_is_primary(nd->svc, shard, NULL))
                crc = route_test_corrupt(nd->svc, &rs->keys[key]);
            if (crc == 0) {
                sim_log(rs->sim, "corrupted k%u on n%u", key, i);
                any = true;
            }
        }
        if (any && !rs->planted) {
            sim_log(rs->sim, "planted a conflict on k%u (shard %u)", key, shard);
            rs->planted = true;
            rs->planted_key = key;
            for (uint32_t i = 0; i < rs->n; i++)
                rs->seen[i][key] = rs->last_ok[key].version;
        }
        if (rs->planted)
            break;
    }
    /* again later: a CAS that was in flight at the first plant may have overwritten it */
    sim_schedule(rs->sim, 300 * SIM_MSG_NS, plant_conflict, rs);
}

/* ---- checks --------------------------------------------------------------------------------- */

static void check_history(rs_t *rs);

/* restart_all: every runtime crashes at once, so every shard's last ACTIVE set is gone with its
 * state. The history so far is checked on its own; the routes are lost by design (the new
 * primaries take over empty: route_stats.state_lost), so the history after the restart starts
 * afresh, and the liveness phase that follows (every runtime restarted with a new epoch) must
 * still get an acknowledged CAS on every key and keep every acknowledged write from then on. */
static void restart_all_begin(rs_t *rs, const sim_run_opts_t *ro)
{
    for (uint32_t i = 0; i < rs->n; i++)
        sim_crash(rs->sim, i);
    check_history(rs);
    sim_hist_free(rs->hist);
    rs->hist = sim_hist_new(rs->sim, RS_MAX_OPS * ro->soak);
    memset(rs->seen, 0, sizeof(rs->seen));
}

static int rs_invariant(void *ctx, sim_t *sim)
{
    rs_t *rs = ctx;
    for (uint32_t s = 0; s < rs->shards; s++) {
        int who = -1;
        uint64_t tok = 0;
        for (uint32_t i = 0; i < rs->n; i++) {
            rs_node_t *nd = sim_node_state(sim, i);
            uint64_t t;
            if (!nd || !nd->svc || !nd->ready || !route_test_is_primary(nd->svc, s, &t))
                continue;
            if (who >= 0) {
                sim_fail(sim,
                         "shard %u: n%d (token %llu) and n%u (token %llu) both serve as "
                         "fenced primary",
                         s, who, (unsigned long long)tok, i, (unsigned long long)t);
                return 1;
            }
            who = (int)i;
            tok = t;
        }
    }
    if ((++rs->steps_checked & 255) == 0) {
        for (uint32_t i = 0; i < rs->n; i++) {
            rs_node_t *nd = sim_node_state(sim, i);
            if (nd && nd->svc && route_test_check(nd->svc) != 0) {
                sim_fail(sim, "n%u: route service invariant: %s", i, kvmesh_last_error());
                return 1;
            }
        }
    }
    return 0;
}

/* The per-key history checks live in tests/support/route_history.c (shared with the
 * real-process tests): convert the simulator's records and run them. */
static void check_history(rs_t *rs)
{
    size_t n = sim_hist_len(rs->hist);
    route_hist_op_t *ops = calloc(n ? n : 1, sizeof(*ops));
    KVM_ASSERT(ops != NULL);
    for (size_t i = 0; i < n; i++) {
        const sim_op_t *o = sim_hist_get(rs->hist, i);
        route_hist_op_t *h = &ops[i];
        h->kind = o->kind == OPK_CAS ? ROUTE_HIST_CAS : ROUTE_HIST_LOOKUP;
        h->client = o->client;
        h->key = o->in_a;
        h->status = o->status;
        h->done = o->done;
        h->begin = o->start_ns;
        h->end = o->end_ns;
        h->version = o->out_a;
        if (o->kind == OPK_CAS) {
            h->value = o->in_b;
            h->expected = o->out_b;
        } else {
            h->value = o->out_b;
        }
    }
    char msg[512];
    if (route_hist_check(ops, n, RS_KEYS, rs->planted ? (uint64_t)rs->planted_key : UINT64_MAX,
                         SIM_MSG_NS, msg, sizeof(msg)) != 0)
        sim_fail(rs->sim, "%s", msg);
    free(ops);
}

static bool live_done(void *ctx)
{
    rs_t *rs = ctx;
    for (uint32_t k = 0; k < RS_KEYS; k++)
        if (!rs->live_ok[k])
            return false;
    return true;
}

static bool final_done(void *ctx)
{
    rs_t *rs = ctx;
    return rs->final_pending == 0;
}

static bool all_busy_free(void *ctx)
{
    rs_t *rs = ctx;
    for (uint32_t i = 0; i < rs->n; i++) {
        rs_node_t *nd = sim_node_state(rs->sim, i);
        if (nd && nd->busy)
            return false;
    }
    return true;
}

static bool steady_ready(void *ctx)
{
    rs_t *rs = ctx;
    for (uint32_t s = 0; s < rs->shards; s++) {
        bool any = false;
        for (uint32_t i = 0; i < rs->n; i++) {
            rs_node_t *nd = sim_node_state(rs->sim, i);
            if (nd && nd->svc && nd->ready && route_test_is_primary(nd->svc, s, NULL))
                any = true;
        }
        if (!any)
            return false;
    }
    return true;
}

static bool steady_done(void *ctx)
{
    rs_t *rs = ctx;
    return rs->steady_ops >= rs->steady_target && all_busy_free(ctx);
}

/* The steady-state check: 10,000 acknowledged route operations (lookups + CAS) with zero
 * metadata reads, ranges, txns or grants; only lease keepalives, bounded by time. */
static void run_steady(rs_t *rs, const sim_run_opts_t *ro)
{
    sim_t *sim = rs->sim;
    if (sim_run_while_not(sim, steady_ready, rs, 5 * SIM_SEC_NS) != SIM_REACHED) {
        sim_fail(sim, "steady: shards did not become active");
        return;
    }
    /* warm every client's view of every shard */
    rs->steady_target = rs->steady_ops + 200;
    sim_run_while_not(sim, steady_done, rs, sim_now(sim) + 20 * SIM_SEC_NS);
    meta_stats_t before[RS_MAX_NODES], after[RS_MAX_NODES];
    route_stats_t rb[RS_MAX_NODES], ra[RS_MAX_NODES];
    uint64_t lookups0 = 0;
    for (uint32_t i = 0; i < rs->n; i++) {
        meta_get_stats(rs->node_m[i], &before[i]);
        route_get_stats(((rs_node_t *)sim_node_state(sim, i))->svc, &rb[i]);
        lookups0 += rb[i].lookups;
    }
    uint64_t t0 = sim_now(sim);
    uint64_t ops0 = rs->steady_ops;
    rs->steady_target = ops0 + 5000 * ro->soak; /* acknowledged CAS, each after a lookup */
    for (uint32_t i = 0; i < rs->n; i++)
        client_arm(sim_node_state(sim, i));
    if (sim_run_while_not(sim, steady_done, rs, sim_now(sim) + 600 * SIM_SEC_NS) != SIM_REACHED) {
        sim_fail(sim, "steady: workload did not finish");
        return;
    }
    uint64_t secs = (sim_now(sim) - t0) / SIM_SEC_NS + 1;
    uint64_t lookups = 0, cas = rs->steady_ops - ops0, ka = 0, calls = 0;
    for (uint32_t i = 0; i < rs->n; i++) {
        meta_get_stats(rs->node_m[i], &after[i]);
        route_get_stats(((rs_node_t *)sim_node_state(sim, i))->svc, &ra[i]);
        lookups += ra[i].lookups;
        meta_stats_t *a = &after[i], *b = &before[i];
        if (a->gets != b->gets || a->ranges != b->ranges || a->txns != b->txns ||
            a->lease_grants != b->lease_grants || a->lease_ttls != b->lease_ttls ||
            a->lease_revokes != b->lease_revokes) {
            sim_fail(sim,
                     "steady: n%u made metadata calls on the route path: gets %llu ranges %llu "
                     "txns %llu grants %llu ttls %llu",
                     i, (unsigned long long)(a->gets - b->gets),
                     (unsigned long long)(a->ranges - b->ranges),
                     (unsigned long long)(a->txns - b->txns),
                     (unsigned long long)(a->lease_grants - b->lease_grants),
                     (unsigned long long)(a->lease_ttls - b->lease_ttls));
            return;
        }
        ka += a->lease_keepalives - b->lease_keepalives;
        calls += ra[i].meta_calls - rb[i].meta_calls;
    }
    lookups -= lookups0;
    uint64_t ka_bound = rs->n * (secs * RS_KEEPALIVE_PER_S + 2);
    if (ka > ka_bound || calls != ka)
        sim_fail(sim, "steady: %llu keepalives (bound %llu), %llu route metadata calls",
                 (unsigned long long)ka, (unsigned long long)ka_bound, (unsigned long long)calls);
    if (lookups + cas < 10000u * ro->soak)
        sim_fail(sim, "steady: only %llu lookups + %llu CAS", (unsigned long long)lookups,
                 (unsigned long long)cas);
    sim_log(sim,
            "steady: %llu lookups + %llu CAS in %llu s virtual: 0 gets, 0 ranges, 0 txns, "
            "%llu keepalives (%u runtimes)",
            (unsigned long long)lookups, (unsigned long long)cas, (unsigned long long)secs,
            (unsigned long long)ka, rs->n);
    if (ro->verbose && ro->out)
        fprintf(ro->out,
                "steady: %llu lookups + %llu CAS, %llu s virtual: metadata gets 0, ranges 0, "
                "txns 0, keepalives %llu (bound %llu)\n",
                (unsigned long long)lookups, (unsigned long long)cas, (unsigned long long)secs,
                (unsigned long long)ka, (unsigned long long)ka_bound);
}

/* ---- scripted rollover with a stale client (route_stale) ------------------------------------ */

typedef struct rs_probe {
    rs_t *rs;
    uint32_t node;
    uint64_t min_token;
} rs_probe_t;

static bool probe_primary(void *ctx)
{
    rs_probe_t *p = ctx;
    rs_node_t *nd = sim_node_state(p->rs->sim, p->node);
    uint64_t t = 0;
    return nd && nd->svc && nd->ready && route_test_is_primary(nd->svc, 0, &t) && t >= p->min_token;
}

static const sim_op_t *last_op(rs_t *rs, uint32_t client, uint32_t kind)
{
    for (size_t i = sim_hist_len(rs->hist); i-- > 0;) {
        const sim_op_t *o = sim_hist_get(rs->hist, i);
        if (o->client == client && o->kind == kind)
            return o;
    }
    return NULL;
}

static kvm_route_version_t vunpack(uint64_t v)
{
    return (kvm_route_version_t){v >> 32, v & 0xffffffffu};
}

/* One shard, k = 3, five runtimes; N (the WRH-first runtime) joins late. X (not an authority)
 * caches the view of generation 1 {A, B, C}; N joins, the set becomes {N, A, B} under a new token
 * and A writes a new value; X's lookup must get stale_generation from the old primary A and the
 * old secondary B, refresh, retry and return the new value; its CAS from the old version must
 * conflict. */
static void run_stale(rs_t *rs)
{
    sim_t *sim = rs->sim;
    uint32_t rank[RS_MAX_NODES];
    size_t got = 0;
    wrh_candidate_t c[RS_MAX_NODES];
    for (uint32_t i = 0; i < rs->n; i++) {
        kvm_runtime_id_t id = rt_id(i);
        c[i] = (wrh_candidate_t){.id_hash = wrh_id_hash(&id), .weight = 1.0};
    }
    KVM_ASSERT(wrh_top_k(c, rs->n, wrh_shard_key(0), rs->n, rank, &got) == 0 && got == rs->n);
    uint32_t N = rank[0], A = rank[1], X = rank[4];
    rs_probe_t p = {rs, A, 1};
    if (sim_run_while_not(sim, probe_primary, &p, 5 * SIM_SEC_NS) != SIM_REACHED) {
        sim_fail(sim, "stale: n%u did not become primary", A);
        return;
    }
    rs_node_t *x = sim_node_state(sim, X), *a = sim_node_state(sim, A);
    start_lookup(x, 0, true);
    sim_run_while_not(sim, all_busy_free, rs, sim_now(sim) + 5 * SIM_SEC_NS);
    const sim_op_t *w1 = last_op(rs, X, OPK_CAS);
    if (!w1 || w1->status != 0) {
        sim_fail(sim, "stale: first write failed (%d)", w1 ? w1->status : 0);
        return;
    }
    uint64_t t1 = w1->out_a >> 32;
    route_stats_t st0, st1;
    route_get_stats(x->svc, &st0);
    rs->in_members[N] = true;
    push_members(rs, false);
    p = (rs_probe_t){rs, N, t1 + 1};
    if (sim_run_while_not(sim, probe_primary, &p, sim_now(sim) + 10 * SIM_SEC_NS) != SIM_REACHED) {
        sim_fail(sim, "stale: n%u did not take over the shard after joining", N);
        return;
    }
    start_lookup(a, 0, true);
    sim_run_while_not(sim, all_busy_free, rs, sim_now(sim) + 5 * SIM_SEC_NS);
    const sim_op_t *w2 = last_op(rs, A, OPK_CAS);
    if (!w2 || w2->status != 0 || (w2->out_a >> 32) <= t1) {
        sim_fail(sim, "stale: new-generation write failed (%d)", w2 ? w2->status : 0);
        return;
    }
    start_lookup(x, 0, false);
    sim_run_while_not(sim, all_busy_free, rs, sim_now(sim) + 5 * SIM_SEC_NS);
    const sim_op_t *r = last_op(rs, X, OPK_LOOKUP);
    route_get_stats(x->svc, &st1);
    if (!r || r->status != 0 || r->out_a != w2->out_a ||
        st1.stale_answers < st0.stale_answers + 2) {
        sim_fail(sim,
                 "stale: stale client's lookup returned %d version %llx (want %llx) after %llu "
                 "stale_generation answers (want >= 2: old primary and old secondary)",
                 r ? r->status : 0, r ? (unsigned long long)r->out_a : 0ull,
                 (unsigned long long)w2->out_a,
                 (unsigned long long)(st1.stale_answers - st0.stale_answers));
        return;
    }
    kvm_route_version_t old = vunpack(w1->out_a);
    start_cas(x, 0, &old);
    sim_run_while_not(sim, all_busy_free, rs, sim_now(sim) + 5 * SIM_SEC_NS);
    const sim_op_t *w3 = last_op(rs, X, OPK_CAS);
    if (!w3 || w3->status != KVMESH_ECONFLICT)
        sim_fail(sim, "stale: CAS from the pre-rollover version answered %d, want a conflict",
                 w3 ? w3->status : 0);
    sim_log(sim, "stale: n%u saw %llu stale_generation answers, then read %llx", X,
            (unsigned long long)(st1.stale_answers - st0.stale_answers),
            (unsigned long long)r->out_a);
}

static int rs_run(const rs_profile_t *prof, const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    unsigned bugs = 0;
    if (strcmp(v, "secondary_cas") == 0)
        bugs = ROUTE_TEST_BUG_SECONDARY_CAS;
    else if (strcmp(v, "skip_transfer") == 0)
        bugs = ROUTE_TEST_BUG_SKIP_TRANSFER;
    else if (strcmp(v, "strand_lost") == 0)
        bugs = ROUTE_TEST_BUG_STRAND_LOST;
    else if (strcmp(v, "batch_one_result") == 0 && prof->batch)
        bugs = ROUTE_TEST_BUG_BATCH_ONE_RESULT;
    else if (*v) {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (route scenarios know secondary_cas, skip_transfer, "
                 "strand_lost; the route_batch ones also batch_one_result)",
                 v);
        return 1;
    }
    rs_t *rs = calloc(1, sizeof(*rs));
    KVM_ASSERT(rs != NULL);
    rs->prof = prof;
    rs->bugs = bugs;
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    rs->n = prof->steady ? 3 : prof->stale ? 5 : 4 + (uint32_t)(ro->seed % 2);
    rs->shards = prof->steady ? 4 : prof->stale ? 1 : 2 + (uint32_t)(ro->seed % 3);
    rs->k = prof->steady || prof->stale ? 3 : 2 + (uint32_t)((ro->seed / 3) % 2);
    cfg.n_nodes = rs->n;
    cfg.clock_drift_max_ppm = 10000;
    cfg.clock_skew_max_ms = 200;
    cfg.max_steps = 50000000;
    snprintf(rs->url, sizeof(rs->url), "memory://route%llu", (unsigned long long)ro->seed);
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    rs->sim = sim;
    bool noisy = !prof->steady && !prof->conflict && !prof->stale;
    sim_set_net(sim, &(sim_net_t){.delay_min_ns = SIM_MSG_NS,
                                  .delay_max_ns = 5 * SIM_MSG_NS,
                                  .drop_p = noisy ? 0.01 : 0,
                                  .dup_p = noisy ? 0.01 : 0,
                                  .reorder_p = noisy ? 0.02 : 0,
                                  .reorder_max_ns = 10 * SIM_MSG_NS});
    int rc = meta_open(&rs->world_m, sim_world_env(sim), rs->url, NULL);
    KVM_ASSERT(rc == 0);
    for (uint32_t i = 0; i < rs->n; i++) {
        rc = meta_open(&rs->node_m[i], sim_world_env(sim), rs->url, NULL);
        KVM_ASSERT(rc == 0);
        set_meta_cut(rs, i, false);
        rs->in_members[i] = true;
        rs->epoch[i] = 1;
    }
    /* key k lives in shard k % shards, so that the liveness phase covers every shard */
    for (uint32_t k = 0; k < RS_KEYS; k++) {
        for (uint32_t j = 0;; j++) {
            char key[32];
            int len = snprintf(key, sizeof(key), "k%u-%u", k, j);
            rc = kvm_ident_init(&rs->keys[k], "tenant", NULL, key, (size_t)len);
            KVM_ASSERT(rc == 0);
            if (kvm_ident_shard(&rs->keys[k], rs->shards) == k % rs->shards)
                break;
            kvm_ident_free(&rs->keys[k]);
        }
    }
    rs->hist = sim_hist_new(sim, RS_MAX_OPS * (prof->steady ? 2 * ro->soak : ro->soak));
    sim_set_node_hooks(sim, rs_start, rs_stop, rs);
    sim_set_invariant(sim, rs_invariant, rs);
    if (prof->stale) { /* the WRH-first runtime of shard 0 joins later */
        uint32_t rank[RS_MAX_NODES];
        size_t got = 0;
        wrh_candidate_t c[RS_MAX_NODES];
        for (uint32_t i = 0; i < rs->n; i++) {
            kvm_runtime_id_t id = rt_id(i);
            c[i] = (wrh_candidate_t){.id_hash = wrh_id_hash(&id), .weight = 1.0};
        }
        KVM_ASSERT(wrh_top_k(c, rs->n, wrh_shard_key(0), 1, rank, &got) == 0 && got == 1);
        rs->in_members[rank[0]] = false;
    }
    sim_start(sim);
    push_members(rs, false);
    if (prof->steady) {
        run_steady(rs, ro);
        goto out;
    }
    if (prof->stale) {
        run_stale(rs);
        goto out;
    }
    if (prof->crashes || prof->partitions || prof->mirror_faults || prof->lag)
        sim_schedule(sim, sim_rand_range(sim, 800, 1500) * SIM_MSG_NS, nemesis, rs);
    if (prof->conflict)
        sim_schedule(sim, 1500 * SIM_MSG_NS, plant_conflict, rs);
    uint64_t fault_end = (uint64_t)prof->fault_s * ro->soak * SIM_SEC_NS;
    sim_run_until(sim, fault_end);
    if (sim_failed(sim))
        goto out;
    if (prof->restart_all)
        restart_all_begin(rs, ro);
    if (sim_failed(sim))
        goto out;
    /* liveness: heal, restart, full membership, no lag */
    rs->liveness = true;
    sim_heal(sim);
    for (uint32_t i = 0; i < rs->n; i++) {
        if (!sim_node_up(sim, i))
            sim_restart(sim, i);
        set_meta_cut(rs, i, false);
        rs->in_members[i] = true;
    }
    push_members(rs, false);
    rs->heal_ns = sim_now(sim);
    if (sim_run_while_not(sim, live_done, rs, sim_now(sim) + ROUTE_SIM_LIVENESS_S * SIM_SEC_NS) !=
            SIM_REACHED &&
        !sim_failed(sim)) {
        char which[64] = "";
        for (uint32_t k = 0; k < RS_KEYS; k++)
            if (!rs->live_ok[k])
                snprintf(which + strlen(which), sizeof(which) - strlen(which), " k%u", k);
        sim_fail(sim, "liveness: no acknowledged CAS within %d s after healing for:%s",
                 ROUTE_SIM_LIVENESS_S, which);
        goto out;
    }
    /* final reads from every node after the clients went quiet */
    rs->final_started = true;
    sim_run_while_not(sim, all_busy_free, rs, sim_now(sim) + 3 * SIM_SEC_NS);
    for (uint32_t i = 0; i < rs->n && !sim_failed(sim); i++) {
        rs_node_t *nd = sim_node_state(sim, i);
        for (uint32_t k = 0; k < RS_KEYS; k++) {
            nd->busy = false;
            nd->outstanding = 0;
            rs->final_pending++;
            start_lookup(nd, k, false);
            sim_run_while_not(sim, final_done, rs, sim_now(sim) + 3 * SIM_SEC_NS);
        }
    }
    if (!sim_failed(sim) && rs->final_pending)
        sim_fail(sim, "final lookups did not complete");
    if (prof->restart_all && !sim_failed(sim)) {
        route_stats_t st;
        uint64_t lost = 0;
        for (uint32_t i = 0; i < rs->n; i++) {
            route_get_stats(((rs_node_t *)sim_node_state(sim, i))->svc, &st);
            lost += st.state_lost;
        }
        if (lost == 0)
            sim_fail(sim, "restart_all: no takeover counted its state as lost");
    }
    if (prof->batch && !sim_failed(sim)) {
        route_stats_t st;
        uint64_t sent = 0, received = 0;
        for (uint32_t i = 0; i < rs->n; i++) {
            route_get_stats(((rs_node_t *)sim_node_state(sim, i))->svc, &st);
            sent += st.batches_sent;
            received += st.batches_received;
        }
        if (sent == 0 || received == 0) /* per service life: restarted nodes start from 0 */
            sim_fail(sim, "batch: %llu route batches sent, %llu received; expected some",
                     (unsigned long long)sent, (unsigned long long)received);
    }
    if (prof->conflict && !sim_failed(sim)) {
        route_stats_t st;
        uint64_t conflicts = 0;
        for (uint32_t i = 0; i < rs->n; i++) {
            route_get_stats(((rs_node_t *)sim_node_state(sim, i))->svc, &st);
            conflicts += st.protocol_conflicts;
        }
        if (!rs->planted || rs->corrupt_reads == 0 || conflicts == 0)
            sim_fail(sim, "conflict: planted %d, %llu conflicting reads, %llu counted", rs->planted,
                     (unsigned long long)rs->corrupt_reads, (unsigned long long)conflicts);
    }
out:
    if (!sim_failed(sim))
        check_history(rs);
    if (sim_failed(sim) && ro->verbose && ro->out) {
        sim_hist_dump(rs->hist, ro->out);
        for (uint32_t i = 0; i < rs->n; i++) {
            rs_node_t *nd = sim_node_state(sim, i);
            fprintf(ro->out, "n%u:\n", i);
            if (nd && nd->svc)
                route_test_dump(nd->svc, ro->out);
        }
    }
    for (uint32_t i = 0; i < rs->n; i++)
        sim_crash(sim, i);
    for (uint32_t i = 0; i < rs->n; i++)
        meta_close(rs->node_m[i]);
    meta_close(rs->world_m);
    int out = sim_finish(sim, res);
    sim_hist_free(rs->hist);
    for (size_t i = 0; i < rs->n_allocs; i++)
        free(rs->allocs[i]);
    free(rs->allocs);
    for (uint32_t k = 0; k < RS_KEYS; k++) {
        kvm_ident_free(&rs->keys[k]);
        if (rs->has_last_ok[k])
            kvm_route_free(&rs->last_ok[k]);
    }
    free(rs);
    return out;
}

#define RS_SCENARIO(NAME, DESC, ...)                                                               \
    static const rs_profile_t prof_##NAME = {.name = #NAME, __VA_ARGS__};                          \
    static int run_##NAME(const sim_run_opts_t *ro, sim_result_t *res)                             \
    {                                                                                              \
        return rs_run(&prof_##NAME, ro, res);                                                      \
    }                                                                                              \
    const sim_scenario_t scen_##NAME = {.name = #NAME, .description = DESC, .run = run_##NAME};

RS_SCENARIO(route_basic, "route mesh: lookups and CAS under network noise, static membership",
            .fault_s = 3)
RS_SCENARIO(route_crash,
            "route mesh: primary/secondary crashes, lease expiry, rollover, state transfer, "
            "stale epochs",
            .fault_s = 7, .crashes = true)
RS_SCENARIO(route_partition,
            "route mesh: peer partitions and isolation from peers and metadata (fail-closed)",
            .fault_s = 7, .partitions = true)
RS_SCENARIO(route_membership,
            "route mesh: lagged membership snapshots, members leaving and joining (rollover)",
            .fault_s = 7, .lag = true)
RS_SCENARIO(route_mirror, "route mesh: one-way link cuts: partial mirrors, repair, indeterminate",
            .fault_s = 4, .mirror_faults = true)
RS_SCENARIO(route_conflict,
            "route mesh: a planted equal-version/different-value copy fails reads, is counted",
            .fault_s = 3, .conflict = true)
RS_SCENARIO(route_stale,
            "route mesh: a stale client after rollover gets stale_generation from the old "
            "primary and secondary, refreshes, retries",
            .stale = true)
RS_SCENARIO(route_restart_all,
            "route mesh: every runtime restarts at once: the shards take over empty and serve "
            "again (the lost routes are not checked across the restart)",
            .fault_s = 2, .restart_all = true)
RS_SCENARIO(route_batch,
            "route mesh: batched lookups and CAS (one message per primary/authority, mirrored "
            "as one batch) under network noise and one-way link cuts",
            .fault_s = 4, .mirror_faults = true, .batch = true)
RS_SCENARIO(route_batch_crash,
            "route mesh: batched lookups and CAS while primaries and secondaries crash and roll "
            "over",
            .fault_s = 7, .crashes = true, .batch = true)
RS_SCENARIO(route_steady,
            "route mesh: 10,000 lookups+CAS in steady state make no metadata route call",
            .steady = true)
