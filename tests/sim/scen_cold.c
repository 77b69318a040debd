/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_cold.c — the cold tier core (src/cold) in the simulator: every crash window of the
 * offload (capacity reserve, backend write, locator persist, materialized CAS, usage commit)
 * and the races of the specification's "Hot/cold storage" acceptance criteria.
 *
 * World:
 *   - two runtimes (nodes 0, 1); node i owns cold device i (an in-memory backend owned by the
 *     scenario, so payloads survive crashes like a disk). Each node has a meta_t on
 *     memory://coldSEED with latency and failures (node 0's after apply: indeterminate
 *     outcomes) and a cold_t; it registers its device, refreshes the device view, runs a
 *     reconciliation pass every 30-60 ms, evicts last-hot replicas of its objects and restores
 *     cold-only ones; on restart it resubmits the PendingOffload routes of its device (the
 *     store's route rebuild);
 *   - a scenario-owned route table of 3 objects (object k's payload goes to device k % 2) with
 *     fenced versions, reached only through cold_route_ops_t (lookups and CAS replies arrive
 *     as world events 0-2 ms later, so they race);
 *   - a writer on the world env (the store's write path): overwrite or delete of an object =
 *     cold_reclaim_plan for its materialized backing (on a world cold_t with its own faulty
 *     meta_t), then the route CAS against the version it started from (lost when an eviction,
 *     promotion or placement got in first; the reclaim plan is then cancelled, or — 40% — left
 *     behind as if the writer crashed), then the offload job to the device owner and the
 *     reclaim run after the CAS;
 *   - hot placements: a second hot replica added/removed on PendingOffload routes (bumps the
 *     version under a pending materialization CAS).
 * Crashes: at the profile's crash windows (cold_config_t.test_crash) and at random.
 *
 * Checks:
 *   always    every live route has a readable copy: a hot replica, or a materialized backing
 *             whose payload its device holds (the only readable copy is never removed); a
 *             PendingOffload route has a hot replica; no cold call ever ends KVMESH_ECORRUPT
 *             (a refused underflow or a bad record);
 *   eviction  the last-hot eviction CAS applies only while the cold op is USAGE_COMMITTED
 *             (read from metadata by the route table before it applies the CAS);
 *   restore   every restore returns bytes whose checksum is one the object was written with;
 *   converge  after the faults stop, within 6 s: no offload queued; every cold op is
 *             USAGE_COMMITTED (exactly those a materialized route references) or RELEASED (one
 *             terminal outcome: released_from, and for a handoff the reclaim's outcome agrees);
 *             no PendingOffload route left; per device reserved = 0 and used = the bytes of
 *             the live materialized routes on it (= the sum of its USAGE_COMMITTED ops), and
 *             the backend holds exactly those payloads (no orphan); every reclaim record is
 *             USAGE_RELEASED, or PLANNED for a locator still authoritative; the due index
 *             holds exactly one entry per record still open (those plans) and nothing else.
 *
 * Variants that must be caught: evict_no_usage (eviction while only ROUTE_COMMITTED),
 * reclaim_no_lookup (cleanup deletes without the exact route lookup), double_release (the handoff
 * releases again when repeated or when the op was already released), no_rebase (a materialize
 * conflict reclaims without looking the route up again).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold.h"
#include "cold/cold_simbe.h"
#include "core/hash.h"
#include "core/util.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "meta/meta_memory.h"
#include "sim.h"

#define CS_NODES  2
#define CS_OBJS   3
#define CS_DEP    "simc"
#define CS_HIST   256 /* checksums remembered per object */
#define CS_MAXLEN 200

typedef struct cs_profile {
    const char *name;
    double p_win[COLD_W_BEFORE_USAGE + 1]; /* crash probability per window */
    double p_delete;
    double p_nemesis;
    uint32_t write_lo, write_hi; /* ms between writes */
    uint32_t place_lo, place_hi; /* ms between hot placements (0 = none) */
    uint32_t evict_lo, evict_hi; /* ms between eviction attempts per node */
    uint32_t cas_delay_hi;       /* ms between reclaim plan and route CAS */
    uint32_t fault_ms;           /* length of the faulty phase */
} cs_profile_t;

typedef struct cs cs_t;

typedef struct cs_obj {
    kvm_ident_t id;
    cold_route_obs_t r;
    uint32_t dev;
    bool busy;
    uint64_t hist[CS_HIST];
    uint32_t n_hist;
} cs_obj_t;

typedef struct cs_node {
    cs_t *S;
    uint32_t id;
    env_t *env;
    meta_t *m;
    cold_t *c;
    env_timer_id t_view, t_recon, t_evict, t_read;
    bool registered;
} cs_node_t;

struct cs {
    const cs_profile_t *prof;
    sim_t *sim;
    unsigned bugs;
    bool quiet;
    char url[64];
    meta_t *wm;      /* the checkers' view of metadata (no faults) */
    meta_t *store_m; /* the writer's */
    cold_t *store_c; /* the writer's cold_t (reclaim plan / cancel only) */
    cold_simbe_t *sb[CS_NODES];
    cold_backend_t be[CS_NODES];
    cs_obj_t o[CS_OBJS];
    cold_exec_ops_t io;
    cold_route_ops_t ro;
    uint64_t seq;
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* final read */
    bool fin_busy, fin_done;
    int fin_rc;
    meta_result_t *fin[4]; /* ops, devices, reclaims, due index */
    int fin_pending;
    char why[512];
    uint64_t writes, cas_lost, evictions, restores, crashes;
    struct cs_owed **owed;
    size_t n_owed, cap_owed;
    bool paying; /* end of a failed run: replies are delivered without the world */
};

static void *cs_alloc(cs_t *S, size_t size)
{
    if (S->n_allocs == S->cap_allocs) {
        S->cap_allocs = S->cap_allocs ? 2 * S->cap_allocs : 256;
        S->allocs = realloc(S->allocs, S->cap_allocs * sizeof(void *));
        KVM_ASSERT(S->allocs != NULL);
    }
    void *p = calloc(1, size);
    KVM_ASSERT(p != NULL);
    S->allocs[S->n_allocs++] = p;
    return p;
}

/* A world event that completes a cold_t's request (a route reply, backend work). Tracked so
 * that, when a run stops early on a failure, the end of the run still delivers them and every
 * handle frees its work. */
typedef struct cs_owed {
    cs_t *S;
    env_cb fn;
    void *arg;
    bool fired;
} cs_owed_t;

static void owed_fire(void *arg)
{
    cs_owed_t *w = arg;
    if (w->fired)
        return;
    w->fired = true;
    w->fn(w->arg);
}

static void owe(cs_t *S, uint64_t delay, env_cb fn, void *arg)
{
    cs_owed_t *w = cs_alloc(S, sizeof(*w));
    *w = (cs_owed_t){S, fn, arg, false};
    if (S->n_owed == S->cap_owed) {
        S->cap_owed = S->cap_owed ? 2 * S->cap_owed : 256;
        S->owed = realloc(S->owed, S->cap_owed * sizeof(*S->owed));
        KVM_ASSERT(S->owed != NULL);
    }
    S->owed[S->n_owed++] = w;
    sim_schedule(S->sim, delay, owed_fire, w);
}

static void pay_owed(cs_t *S)
{
    S->paying = true;
    for (size_t i = 0; i < S->n_owed; i++) /* may grow while paying */
        owed_fire(S->owed[i]);
}

static kvm_runtime_id_t node_rid(uint32_t n)
{
    return kvm_id128_from_u64(0xB0, n + 1);
}
static kvm_tier_id_t dev_id(uint32_t d)
{
    return kvm_id128_from_u64(0xD0, d + 1);
}
static kvm_op_id_t next_op(cs_t *S)
{
    return (kvm_op_id_t){.writer = kvm_id128_from_u64(0xAA, 1), .epoch = 1, .seq = ++S->seq};
}

static void gen(const kvm_op_id_t *content, uint64_t len, uint8_t *out)
{
    for (uint64_t i = 0; i < len; i++)
        out[i] = (uint8_t)(content->seq * 131 + i * 7 + (i >> 3));
}
static uint64_t gen_sum(const kvm_op_id_t *content, uint64_t len)
{
    uint8_t b[CS_MAXLEN];
    gen(content, len, b);
    return kvm_checksum(b, len);
}

static cs_obj_t *obj_of(cs_t *S, const kvm_ident_t *id)
{
    for (int i = 0; i < CS_OBJS; i++)
        if (kvm_ident_equal(&S->o[i].id, id))
            return &S->o[i];
    KVM_ASSERT(!"unknown object");
    return NULL;
}

static void bump(cs_obj_t *o)
{
    o->r.version.primary_sequence++;
}

static uint64_t jitter(cs_t *S, uint32_t lo, uint32_t hi)
{
    return sim_rand_range(S->sim, lo, hi) * SIM_MSG_NS;
}

/* ---- the route table, through cold_route_ops_t -------------------------------------------- */

typedef struct cs_call {
    cs_t *S;
    cs_obj_t *o;
    cold_lookup_cb lcb;
    cold_rc_cb cb;
    void *arg;
    kvm_route_version_t exp;
    kvm_cold_backing_t mat;
    cold_evict_expect_t ev;
    kvm_op_id_t content;
    void *buf;
    uint64_t len;
} cs_call_t;

static void lookup_fire(void *arg)
{
    cs_call_t *k = arg;
    cold_route_obs_t obs = k->o->r;
    k->lcb(k->arg, 0, &obs);
}

static void rt_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    cs_t *S = ctx;
    cs_call_t *k = cs_alloc(S, sizeof(*k));
    *k = (cs_call_t){.S = S, .o = obj_of(S, id), .lcb = cb, .arg = arg};
    owe(S, jitter(S, 0, 2), lookup_fire, k);
}

static void read_fire(void *arg)
{
    cs_call_t *k = arg;
    cs_obj_t *o = k->o;
    if (!o->r.found || o->r.tombstone || !kvm_op_id_equal(&o->r.content_op, &k->content) ||
        o->r.n_replicas == 0 || k->len != o->r.replicas[0].length) {
        k->cb(k->arg, KVMESH_ENOENT);
        return;
    }
    gen(&k->content, k->len, k->buf);
    k->cb(k->arg, 0);
}

static void rt_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *content, void *buf,
                        uint64_t len, cold_rc_cb cb, void *arg)
{
    cs_t *S = ctx;
    cs_call_t *k = cs_alloc(S, sizeof(*k));
    *k = (cs_call_t){.S = S,
                     .o = obj_of(S, id),
                     .cb = cb,
                     .arg = arg,
                     .content = *content,
                     .buf = buf,
                     .len = len};
    owe(S, jitter(S, 0, 2), read_fire, k);
}

static void mat_fire(void *arg)
{
    cs_call_t *k = arg;
    cs_obj_t *o = k->o;
    if (!kvm_route_version_equal(&k->exp, &o->r.version) || !o->r.found || o->r.tombstone ||
        o->r.cold.kind != KVM_COLD_PENDING_OFFLOAD ||
        !kvm_op_id_equal(&o->r.cold.cold_op, &k->mat.cold_op) ||
        !kvm_op_id_equal(&o->r.content_op, &k->mat.content_op)) {
        k->cb(k->arg, KVMESH_ECONFLICT);
        return;
    }
    o->r.cold = k->mat;
    bump(o);
    k->cb(k->arg, 0);
}

static void rt_materialize(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *exp,
                           const kvm_cold_backing_t *mat, cold_rc_cb cb, void *arg)
{
    cs_t *S = ctx;
    cs_call_t *k = cs_alloc(S, sizeof(*k));
    *k = (cs_call_t){.S = S, .o = obj_of(S, id), .cb = cb, .arg = arg, .exp = *exp, .mat = *mat};
    owe(S, jitter(S, 0, 2), mat_fire, k);
}

static int find_rep(const cold_route_obs_t *r, const kvm_hot_replica_t *rep)
{
    for (uint32_t i = 0; i < r->n_replicas; i++)
        if (kvm_hot_replica_same_slot(&r->replicas[i], rep))
            return (int)i;
    return -1;
}

static void on_evict_opget(void *arg, const meta_result_t *res)
{
    cs_call_t *k = arg;
    cs_t *S = k->S;
    cs_obj_t *o = k->o;
    const cold_evict_expect_t *e = &k->ev;
    int at = find_rep(&o->r, &e->replica);
    bool match = kvm_route_version_equal(&e->version, &o->r.version) && o->r.found &&
                 !o->r.tombstone && kvm_op_id_equal(&e->content_op, &o->r.content_op) &&
                 o->r.cold.kind == KVM_COLD_MATERIALIZED &&
                 kvm_op_id_equal(&e->cold_op, &o->r.cold.cold_op) &&
                 e->locator_fp == kvm_cold_backing_fingerprint(&o->r.cold) && at >= 0;
    if (!match || res->rc == KVMESH_ECANCELED) {
        k->cb(k->arg, KVMESH_ECONFLICT);
        return;
    }
    cold_op_t op;
    if (res->rc || !res->kv.found || cold_op_decode(res->kv.value, res->kv.value_len, &op) != 0) {
        sim_fail(S->sim, "eviction CAS: cannot read the cold op record (rc %d)", res->rc);
        k->cb(k->arg, KVMESH_ECONFLICT);
        return;
    }
    if (op.state != COLD_OP_USAGE_COMMITTED) {
        char b[KVM_OP_ID_FMT_LEN];
        sim_fail(S->sim, "last-hot eviction CAS would apply while cold op %s is %s",
                 kvm_op_id_fmt(&op.id, b), cold_op_state_name(op.state));
        k->cb(k->arg, KVMESH_ECONFLICT);
        return;
    }
    for (uint32_t i = (uint32_t)at; i + 1 < o->r.n_replicas; i++)
        o->r.replicas[i] = o->r.replicas[i + 1];
    o->r.n_replicas--;
    bump(o);
    S->evictions++;
    k->cb(k->arg, 0);
}

static void evict_fire(void *arg)
{
    cs_call_t *k = arg;
    if (k->S->paying) {
        k->cb(k->arg, KVMESH_ECONFLICT);
        return;
    }
    char key[KS_KEY_CAP], s[KVM_OP_ID_FMT_LEN];
    int rc = ks_cold_op_key(key, sizeof(key), CS_DEP, kvm_op_id_fmt(&k->ev.cold_op, s));
    KVM_ASSERT(rc == 0);
    rc = meta_get(k->S->wm, key, 0, on_evict_opget, k);
    KVM_ASSERT(rc == 0);
}

static void rt_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                     void *arg)
{
    cs_t *S = ctx;
    cs_call_t *k = cs_alloc(S, sizeof(*k));
    *k = (cs_call_t){.S = S, .o = obj_of(S, id), .cb = cb, .arg = arg, .ev = *e};
    owe(S, jitter(S, 0, 2), evict_fire, k);
}

static void promote_fire(void *arg)
{
    cs_call_t *k = arg;
    cs_obj_t *o = k->o;
    if (!kvm_route_version_equal(&k->exp, &o->r.version) || o->r.n_replicas >= 2 ||
        o->r.cold.kind != KVM_COLD_MATERIALIZED) {
        k->cb(k->arg, KVMESH_ECONFLICT);
        return;
    }
    kvm_hot_replica_t rep = {.owner = node_rid(o->dev),
                             .segment = o->r.content_op.seq,
                             .offset = 8192 + 64 * o->r.version.primary_sequence,
                             .length = o->r.cold.u.mat.length,
                             .checksum = o->r.cold.u.mat.checksum};
    o->r.replicas[o->r.n_replicas++] = rep;
    bump(o);
    k->cb(k->arg, 0);
}

static void rt_promote(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *exp,
                       const void *buf, uint64_t len, cold_rc_cb cb, void *arg)
{
    cs_t *S = ctx;
    cs_obj_t *o = obj_of(S, id);
    if (len != o->r.cold.u.mat.length || kvm_checksum(buf, len) != o->r.cold.u.mat.checksum ||
        sim_chance(S->sim, 0.5)) {
        cb(arg, KVMESH_ECONFLICT); /* best effort: often skipped */
        return;
    }
    cs_call_t *k = cs_alloc(S, sizeof(*k));
    *k = (cs_call_t){.S = S, .o = o, .cb = cb, .arg = arg, .exp = *exp};
    owe(S, jitter(S, 0, 2), promote_fire, k);
}

/* Backend work runs as a world event 0-2 ms later (never dropped: a crashed node's cold_t
 * ends the work at its callback). */
static void io_fire(void *arg)
{
    cold_exec_t *io = arg;
    io->run(io);
    io->done(io);
}

static void io_submit(void *ctx, cold_exec_t *io)
{
    cs_t *S = ctx;
    owe(S, jitter(S, 0, 2), io_fire, io);
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static void restart_fire(void *arg);
typedef struct cs_rs {
    cs_t *S;
    uint32_t node;
} cs_rs_t;

static void crash_fire(void *arg)
{
    cs_rs_t *r = arg;
    if (!sim_node_up(r->S->sim, r->node))
        return;
    sim_crash(r->S->sim, r->node);
    r->S->crashes++;
    sim_schedule(r->S->sim, jitter(r->S, 5, 40), restart_fire, r);
}

static void restart_fire(void *arg)
{
    cs_rs_t *r = arg;
    sim_restart(r->S->sim, r->node);
}

static void crash_soon(cs_t *S, uint32_t node)
{
    cs_rs_t *r = cs_alloc(S, sizeof(*r));
    *r = (cs_rs_t){S, node};
    sim_schedule(S->sim, 0, crash_fire, r);
}

static bool test_crash(void *ctx, enum cold_window w, const kvm_op_id_t *op)
{
    cs_node_t *nd = ctx;
    cs_t *S = nd->S;
    (void)op;
    if (S->quiet || !sim_chance(S->sim, S->prof->p_win[w]))
        return false;
    sim_log(S->sim, "node %u crashes at cold window %d", nd->id, (int)w);
    crash_soon(S, nd->id);
    return true;
}

static void submit_obj(cs_node_t *nd, cs_obj_t *o)
{
    if (!o->r.found || o->r.tombstone || o->r.cold.kind != KVM_COLD_PENDING_OFFLOAD)
        return;
    cold_job_t j = {.ident = &o->id,
                    .cold_op = o->r.cold.cold_op,
                    .content_op = o->r.content_op,
                    .device = dev_id(o->dev),
                    .length = o->r.cold.u.pending.expected_length,
                    .checksum = o->r.cold.u.pending.expected_checksum};
    int rc = cold_offload_submit(nd->c, &j);
    KVM_ASSERT(rc == 0 || rc == KVMESH_EAGAIN);
}

static void on_view(void *arg, int rc)
{
    (void)arg;
    (void)rc;
}

static void view_tick(void *arg)
{
    cs_node_t *nd = arg;
    (void)cold_view_refresh(nd->c, on_view, NULL);
    nd->t_view = env_timer_start(nd->env, 40 * SIM_MSG_NS, view_tick, nd);
}

static void on_recon(void *arg, const cold_recon_report_t *r)
{
    (void)arg;
    (void)r;
}

static void recon_tick(void *arg)
{
    cs_node_t *nd = arg;
    (void)cold_recon_pass(nd->c, 16, on_recon, NULL);
    nd->t_recon = env_timer_start(nd->env, jitter(nd->S, 30, 60), recon_tick, nd);
}

static void on_evicted(void *arg, int rc)
{
    (void)arg;
    (void)rc;
}

static void evict_tick(void *arg)
{
    cs_node_t *nd = arg;
    cs_t *S = nd->S;
    cs_obj_t *o = &S->o[sim_rand_range(S->sim, 0, CS_OBJS - 1)];
    if (o->dev == nd->id && o->r.found && o->r.cold.kind == KVM_COLD_MATERIALIZED &&
        o->r.n_replicas > 0 && !S->quiet)
        (void)cold_evict(nd->c, &o->id, &o->r.replicas[o->r.n_replicas - 1], on_evicted, NULL);
    nd->t_evict =
        env_timer_start(nd->env, jitter(S, S->prof->evict_lo, S->prof->evict_hi), evict_tick, nd);
}

typedef struct cs_rd {
    cs_t *S;
    cs_obj_t *o;
} cs_rd_t;

static void on_restored(void *arg, int rc, const void *buf, uint64_t len)
{
    cs_rd_t *r = arg;
    cs_t *S = r->S;
    if (rc == KVMESH_ECHECKSUM || rc == KVMESH_ECORRUPT) {
        sim_fail(S->sim, "restore failed verification (%s): nothing corrupts payloads here",
                 kvmesh_errname(rc));
        return;
    }
    if (rc)
        return;
    uint64_t sum = kvm_checksum(buf, len);
    for (uint32_t i = 0; i < r->o->n_hist; i++)
        if (r->o->hist[i] == sum) {
            S->restores++;
            return;
        }
    sim_fail(S->sim, "restore returned %llu bytes the object was never written with",
             (unsigned long long)len);
}

static void read_tick(void *arg)
{
    cs_node_t *nd = arg;
    cs_t *S = nd->S;
    cs_obj_t *o = &S->o[sim_rand_range(S->sim, 0, CS_OBJS - 1)];
    if (o->dev == nd->id && o->r.found && o->r.cold.kind == KVM_COLD_MATERIALIZED) {
        cs_rd_t *r = cs_alloc(S, sizeof(*r));
        *r = (cs_rd_t){S, o};
        (void)cold_restore(nd->c, &o->id, on_restored, r);
        if (sim_chance(S->sim, 0.3)) /* a concurrent reader: singleflight */
            (void)cold_restore(nd->c, &o->id, on_restored, r);
    }
    nd->t_read = env_timer_start(nd->env, jitter(S, 20, 50), read_tick, nd);
}

static void on_registered(void *arg, int rc, const cold_device_t *d)
{
    cs_node_t *nd = arg;
    (void)d;
    if (rc == KVMESH_ECANCELED)
        return;
    if (rc) { /* transient: try again */
        cold_device_t q = {0};
        q.id = dev_id(nd->id);
        q.owner = node_rid(nd->id);
        q.owner_epoch = sim_node_incarnation(nd->S->sim, nd->id);
        q.kind = COLD_BACKEND_SIM;
        q.lifecycle = COLD_DEV_ACTIVE;
        q.schedulable = true;
        q.capacity = 1 << 20;
        q.health = COLD_DEV_HEALTHY;
        snprintf(q.root, sizeof(q.root), "sim://dev%u", nd->id);
        (void)cold_device_register(nd->c, &q, on_registered, nd);
        return;
    }
    nd->registered = true;
    /* the store's route rebuild: resubmit the PendingOffload routes of this device */
    for (int i = 0; i < CS_OBJS; i++)
        if (nd->S->o[i].dev == nd->id)
            submit_obj(nd, &nd->S->o[i]);
    view_tick(nd);
}

static void *cs_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    cs_t *S = ctx;
    cs_node_t *nd = calloc(1, sizeof(*nd));
    KVM_ASSERT(nd != NULL);
    nd->S = S;
    nd->id = node;
    nd->env = env;
    int rc = meta_open(&nd->m, env, S->url, NULL);
    KVM_ASSERT(rc == 0);
    meta_memory_faults_t f = {.latency_min_ms = 1, .latency_max_ms = 4};
    if (!S->quiet) {
        f.fail_ppm = 30000;
        f.fail_after_apply = node == 0;
    }
    meta_memory_set_faults(nd->m, &f);
    cold_config_t cfg = {.deployment = CS_DEP,
                         .self = node_rid(node),
                         .timeout_ms = 100,
                         .op_ttl_ms = 60,
                         .backoff_max_ms = 200,
                         .max_inflight = 4,
                         .queue_cap = 64,
                         .exec = &S->io,
                         .test_crash = test_crash,
                         .test_ctx = nd,
                         .test_bugs = S->bugs};
    rc = cold_new(&nd->c, env, nd->m, &S->ro, &cfg);
    KVM_ASSERT(rc == 0);
    kvm_tier_id_t d = dev_id(node);
    rc = cold_attach_backend(nd->c, &d, &S->be[node]);
    KVM_ASSERT(rc == 0);
    on_registered(nd, KVMESH_EAGAIN, NULL); /* first registration */
    nd->t_recon = env_timer_start(env, jitter(S, 10, 40), recon_tick, nd);
    nd->t_evict = env_timer_start(env, jitter(S, 5, 20), evict_tick, nd);
    nd->t_read = env_timer_start(env, jitter(S, 5, 30), read_tick, nd);
    (void)sim;
    return nd;
}

static void cs_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    cs_node_t *nd = state;
    (void)ctx;
    env_timer_cancel(nd->env, nd->t_view);
    env_timer_cancel(nd->env, nd->t_recon);
    env_timer_cancel(nd->env, nd->t_evict);
    env_timer_cancel(nd->env, nd->t_read);
    cold_close(nd->c);
    meta_close(nd->m);
    sim_drain_defers(sim, node);
    free(nd);
}

static void nemesis(void *arg)
{
    cs_t *S = arg;
    if (S->quiet)
        return;
    if (sim_chance(S->sim, S->prof->p_nemesis))
        crash_soon(S, (uint32_t)sim_rand_range(S->sim, 0, CS_NODES - 1));
    sim_schedule(S->sim, jitter(S, 80, 200), nemesis, S);
}

/* ---- the writer (world) --------------------------------------------------------------------- */

typedef struct cs_write {
    cs_t *S;
    cs_obj_t *o;
    kvm_route_version_t seen;
    bool del, has_reclaim;
    kvm_op_id_t content, cold, reclaim;
    uint64_t len;
} cs_write_t;

static void on_cancel(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)arg;
    (void)rc;
    (void)v;
}

static void reclaim_fire(void *arg);

static void do_cas(void *arg)
{
    cs_write_t *w = arg;
    cs_t *S = w->S;
    cs_obj_t *o = w->o;
    o->busy = false;
    if (!kvm_route_version_equal(&w->seen, &o->r.version)) {
        S->cas_lost++;
        if (w->has_reclaim && sim_chance(S->sim, 0.6))
            (void)cold_reclaim_cancel(S->store_c, &w->reclaim, on_cancel, NULL);
        return; /* 40%: the plan stays behind, as if the writer crashed */
    }
    bump(o);
    o->r.found = true;
    o->r.content_op = w->content;
    if (w->del) {
        o->r.tombstone = true;
        o->r.n_replicas = 0;
        memset(&o->r.cold, 0, sizeof(o->r.cold));
    } else {
        o->r.tombstone = false;
        uint64_t sum = gen_sum(&w->content, w->len);
        o->r.n_replicas = 1;
        o->r.replicas[0] = (kvm_hot_replica_t){.owner = node_rid(o->dev),
                                               .segment = w->content.seq,
                                               .offset = 0,
                                               .length = w->len,
                                               .checksum = sum};
        kvm_runtime_id_t own = node_rid(o->dev);
        kvm_tier_id_t t = dev_id(o->dev);
        kvm_cold_backing_pending(&o->r.cold, &w->cold, &w->content, &own, &t, w->len, sum);
        if (o->n_hist < CS_HIST)
            o->hist[o->n_hist++] = sum;
        cs_node_t *nd = sim_node_state(S->sim, o->dev);
        if (nd && nd->registered)
            submit_obj(nd, o);
    }
    S->writes++;
    if (w->has_reclaim)
        sim_schedule(S->sim, jitter(S, 0, 10), reclaim_fire, w);
}

static void on_reclaim_run(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)arg;
    (void)rc;
    (void)v;
}

static void reclaim_fire(void *arg)
{
    cs_write_t *w = arg;
    cs_node_t *nd = sim_node_state(w->S->sim, w->o->dev);
    if (nd) /* a down owner: its reconciliation runs it after restart */
        (void)cold_reclaim_run(nd->c, &w->reclaim, on_reclaim_run, NULL);
}

static void on_plan(void *arg, int rc, const cold_reclaim_view_t *v)
{
    cs_write_t *w = arg;
    (void)v;
    if (rc) { /* not planned (or unknown): the write fails before its CAS */
        w->o->busy = false;
        return;
    }
    sim_schedule(w->S->sim, jitter(w->S, 0, w->S->prof->cas_delay_hi), do_cas, w);
}

static void write_tick(void *arg)
{
    cs_t *S = arg;
    if (S->quiet)
        return;
    cs_obj_t *o = &S->o[sim_rand_range(S->sim, 0, CS_OBJS - 1)];
    if (!o->busy) {
        cs_write_t *w = cs_alloc(S, sizeof(*w));
        w->S = S;
        w->o = o;
        w->seen = o->r.version;
        bool live = o->r.found && !o->r.tombstone;
        w->del = live && sim_chance(S->sim, S->prof->p_delete);
        w->content = next_op(S);
        w->cold = next_op(S);
        w->len = sim_rand_range(S->sim, 16, CS_MAXLEN);
        o->busy = true;
        if (live && o->r.cold.kind == KVM_COLD_MATERIALIZED) {
            w->has_reclaim = true;
            w->reclaim = next_op(S);
            kvm_cold_backing_t old = o->r.cold;
            int rc = cold_reclaim_plan(S->store_c, &w->reclaim, &o->id, &old, on_plan, w);
            KVM_ASSERT(rc == 0);
        } else {
            sim_schedule(S->sim, jitter(S, 0, S->prof->cas_delay_hi), do_cas, w);
        }
    }
    sim_schedule(S->sim, jitter(S, S->prof->write_lo, S->prof->write_hi), write_tick, S);
}

static void place_tick(void *arg)
{
    cs_t *S = arg;
    if (S->quiet || !S->prof->place_hi)
        return;
    cs_obj_t *o = &S->o[sim_rand_range(S->sim, 0, CS_OBJS - 1)];
    if (o->r.found && !o->r.tombstone && o->r.cold.kind == KVM_COLD_PENDING_OFFLOAD &&
        o->r.n_replicas > 0) {
        if (o->r.n_replicas == 1) {
            kvm_hot_replica_t r = o->r.replicas[0];
            r.owner = node_rid(1 - o->dev);
            r.offset = 4096;
            o->r.replicas[o->r.n_replicas++] = r;
        } else {
            o->r.n_replicas--;
        }
        bump(o);
    }
    sim_schedule(S->sim, jitter(S, S->prof->place_lo, S->prof->place_hi), place_tick, S);
}

/* ---- checks --------------------------------------------------------------------------------- */

static int cs_invariant(void *ctx, sim_t *sim)
{
    cs_t *S = ctx;
    for (int i = 0; i < CS_OBJS; i++) {
        const cs_obj_t *o = &S->o[i];
        if (!o->r.found || o->r.tombstone)
            continue;
        if (o->r.cold.kind == KVM_COLD_PENDING_OFFLOAD && o->r.n_replicas == 0) {
            sim_fail(sim, "object %d: PendingOffload route without a hot replica", i);
            return 1;
        }
        if (o->r.n_replicas > 0)
            continue;
        if (o->r.cold.kind != KVM_COLD_MATERIALIZED ||
            !cold_simbe_has(S->sb[o->dev], o->r.cold.u.mat.locator, o->r.cold.u.mat.locator_len)) {
            sim_fail(sim, "object %d: no readable copy (cold-only route whose payload is gone)", i);
            return 1;
        }
    }
    for (uint32_t n = 0; n < CS_NODES; n++) {
        cs_node_t *nd = sim_node_state(sim, n);
        if (!nd)
            continue;
        cold_stats_t st;
        cold_get_stats(nd->c, &st);
        if (st.corrupt) {
            sim_fail(sim, "node %u: a cold call ended KVMESH_ECORRUPT (%s)", n,
                     kvmesh_last_error());
            return 1;
        }
        if (cold_check_invariants(nd->c) != 0) {
            sim_fail(sim, "node %u: %s", n, kvmesh_last_error());
            return 1;
        }
    }
    cold_stats_t st;
    cold_get_stats(S->store_c, &st);
    if (st.corrupt) {
        sim_fail(sim, "writer: a cold call ended KVMESH_ECORRUPT (%s)", kvmesh_last_error());
        return 1;
    }
    return 0;
}

static void on_fin(void *arg, const meta_result_t *res)
{
    meta_result_t **slot = arg;
    *slot = meta_result_dup(res);
    KVM_ASSERT(*slot != NULL);
}

static bool fin_ready(void *ctx)
{
    cs_t *S = ctx;
    return S->fin[0] && S->fin[1] && S->fin[2] && S->fin[3];
}

static bool read_final(cs_t *S)
{
    for (int i = 0; i < 4; i++) {
        meta_result_free(S->fin[i]);
        S->fin[i] = NULL;
    }
    char p[4][KS_KEY_CAP];
    int rc = ks_prefix(p[0], KS_KEY_CAP, CS_DEP, KS_COLD_OP, NULL, 0);
    rc |= ks_cold_device_prefix(p[1], KS_KEY_CAP, CS_DEP);
    rc |= ks_prefix(p[2], KS_KEY_CAP, CS_DEP, KS_RECLAIM, NULL, 0);
    rc |= ks_prefix(p[3], KS_KEY_CAP, CS_DEP, KS_COLD_DUE, NULL, 0);
    KVM_ASSERT(rc == 0);
    for (int i = 0; i < 4; i++) {
        rc = meta_range(S->wm, p[i], NULL, META_RANGE_MAX, 0, on_fin, &S->fin[i]);
        KVM_ASSERT(rc == 0);
    }
    sim_run_while_not(S->sim, fin_ready, S, sim_now(S->sim) + SIM_SEC_NS);
    return fin_ready(S) && !S->fin[0]->rc && !S->fin[1]->rc && !S->fin[2]->rc && !S->fin[0]->more &&
           !S->fin[2]->more;
}

#define WHY(...)                                                                                   \
    do {                                                                                           \
        snprintf(S->why, sizeof(S->why), __VA_ARGS__);                                             \
        return false;                                                                              \
    } while (0)

static const cs_obj_t *route_of_op(const cs_t *S, const kvm_op_id_t *id)
{
    for (int i = 0; i < CS_OBJS; i++)
        if (S->o[i].r.found && !S->o[i].r.tombstone &&
            S->o[i].r.cold.kind == KVM_COLD_MATERIALIZED &&
            kvm_op_id_equal(&S->o[i].r.cold.cold_op, id))
            return &S->o[i];
    return NULL;
}

/* The converged state (see the file comment); false with S->why when not (yet) there. */
static bool converged(cs_t *S)
{
    char b[KVM_OP_ID_FMT_LEN];
    for (uint32_t n = 0; n < CS_NODES; n++) {
        cs_node_t *nd = sim_node_state(S->sim, n);
        if (!nd || !nd->registered)
            WHY("node %u not up", n);
        if (cold_offload_pending(nd->c))
            WHY("node %u: %zu offloads pending", n, cold_offload_pending(nd->c));
    }
    for (int i = 0; i < CS_OBJS; i++)
        if (S->o[i].r.found && S->o[i].r.cold.kind == KVM_COLD_PENDING_OFFLOAD)
            WHY("object %d still PendingOffload", i);
    if (!read_final(S))
        WHY("final metadata read failed");
    uint64_t used[CS_NODES] = {0}, n_used[CS_NODES] = {0}, route_used[CS_NODES] = {0},
             route_n[CS_NODES] = {0};
    for (int i = 0; i < CS_OBJS; i++) {
        const cs_obj_t *o = &S->o[i];
        if (o->r.found && !o->r.tombstone && o->r.cold.kind == KVM_COLD_MATERIALIZED) {
            route_used[o->dev] += o->r.cold.u.mat.length;
            route_n[o->dev]++;
        }
    }
    const meta_result_t *ops = S->fin[0], *devs = S->fin[1], *recs = S->fin[2];
    for (size_t i = 0; i < ops->n_kvs; i++) {
        cold_op_t op;
        if (cold_op_decode(ops->kvs[i].value, ops->kvs[i].value_len, &op) != 0)
            WHY("cold op record %s does not decode", ops->kvs[i].key);
        const cs_obj_t *o = route_of_op(S, &op.id);
        uint32_t d = op.device.b[15] - 1;
        if (d >= CS_NODES)
            WHY("cold op on an unknown device");
        if (op.state == COLD_OP_USAGE_COMMITTED) {
            if (!o || o->r.cold.u.mat.locator_len != op.loc.len ||
                memcmp(o->r.cold.u.mat.locator, op.loc.b, op.loc.len) != 0)
                WHY("cold op %s is USAGE_COMMITTED but no route references its locator",
                    kvm_op_id_fmt(&op.id, b));
            used[d] += op.length;
            n_used[d]++;
        } else if (op.state == COLD_OP_RELEASED) {
            if (o)
                WHY("cold op %s is RELEASED but a route still references it",
                    kvm_op_id_fmt(&op.id, b));
            if (!kvm_op_id_is_nil(&op.released_by)) {
                bool ok = false;
                for (size_t j = 0; j < recs->n_kvs; j++) {
                    cold_reclaim_t r;
                    if (cold_reclaim_decode(recs->kvs[j].value, recs->kvs[j].value_len, &r) == 0 &&
                        kvm_op_id_equal(&r.r.reclaim_op, &op.released_by))
                        ok = r.r.state == KVM_RECLAIM_USAGE_RELEASED &&
                             (r.outcome == op.released_from ||
                              (r.outcome == COLD_OP_PAYLOAD_WRITTEN &&
                               op.released_from == COLD_OP_RECLAIMING));
                }
                if (!ok)
                    WHY("cold op %s released by a reclaim whose record disagrees",
                        kvm_op_id_fmt(&op.id, b));
            }
        } else {
            WHY("cold op %s still %s", kvm_op_id_fmt(&op.id, b), cold_op_state_name(op.state));
        }
    }
    for (int i = 0; i < CS_OBJS; i++) {
        const cs_obj_t *o = &S->o[i];
        if (!o->r.found || o->r.tombstone || o->r.cold.kind != KVM_COLD_MATERIALIZED)
            continue;
        bool seen = false;
        for (size_t j = 0; j < ops->n_kvs && !seen; j++) {
            cold_op_t op;
            if (cold_op_decode(ops->kvs[j].value, ops->kvs[j].value_len, &op) == 0 &&
                kvm_op_id_equal(&op.id, &o->r.cold.cold_op))
                seen = op.state == COLD_OP_USAGE_COMMITTED;
        }
        if (!seen)
            WHY("object %d: materialized backing whose cold op is not USAGE_COMMITTED", i);
    }
    if (devs->n_kvs != CS_NODES)
        WHY("%zu device records", devs->n_kvs);
    for (size_t i = 0; i < devs->n_kvs; i++) {
        cold_device_t dv;
        if (cold_device_decode(devs->kvs[i].value, devs->kvs[i].value_len, &dv) != 0)
            WHY("device record does not decode");
        uint32_t d = dv.id.b[15] - 1;
        if (d >= CS_NODES)
            WHY("unknown device");
        if (dv.reserved || dv.n_reserved)
            WHY("device %u: %llu bytes still reserved by %llu ops", d,
                (unsigned long long)dv.reserved, (unsigned long long)dv.n_reserved);
        if (dv.used != used[d] || dv.n_used != n_used[d])
            WHY("device %u: used %llu by %llu ops, its USAGE_COMMITTED ops hold %llu in %llu", d,
                (unsigned long long)dv.used, (unsigned long long)dv.n_used,
                (unsigned long long)used[d], (unsigned long long)n_used[d]);
        if (dv.used != route_used[d])
            WHY("device %u: used %llu, live materialized routes hold %llu", d,
                (unsigned long long)dv.used, (unsigned long long)route_used[d]);
        uint64_t objs = 0;
        cold_simbe_stat(S->sb[d], NULL, &objs);
        if (objs != route_n[d])
            WHY("device %u: the backend holds %llu payloads, routes reference %llu", d,
                (unsigned long long)objs, (unsigned long long)route_n[d]);
    }
    size_t n_open = 0;
    for (size_t j = 0; j < recs->n_kvs; j++) {
        cold_reclaim_t r;
        if (cold_reclaim_decode(recs->kvs[j].value, recs->kvs[j].value_len, &r) != 0)
            WHY("reclaim record does not decode");
        if (r.r.state == KVM_RECLAIM_USAGE_RELEASED)
            continue;
        const cs_obj_t *o = route_of_op(S, &r.r.cold_op);
        bool auth = o && o->r.cold.u.mat.locator_len == r.r.locator_len &&
                    memcmp(o->r.cold.u.mat.locator, r.r.locator, r.r.locator_len) == 0;
        if (r.r.state != KVM_RECLAIM_PLANNED || !auth)
            WHY("reclaim %s is %s for a locator no longer authoritative",
                kvm_op_id_fmt(&r.r.reclaim_op, b), kvm_reclaim_state_name(r.r.state));
        n_open++;
    }
    /* the due index holds exactly one entry per non-terminal record: here, the open plans */
    const meta_result_t *due = S->fin[3];
    if (due->n_kvs != n_open)
        WHY("due index has %zu entries, %zu records are not terminal", due->n_kvs, n_open);
    for (size_t j = 0; j < due->n_kvs; j++) {
        ks_parsed_t *pk = malloc(sizeof(*pk));
        KVM_ASSERT(pk != NULL);
        bool ok =
            ks_parse(due->kvs[j].key, pk) == 0 && strcmp(pk->parts[0].s, "reclaim-planned") == 0;
        free(pk);
        if (!ok)
            WHY("due entry %s does not belong to an open reclaim plan", due->kvs[j].key);
    }
    return true;
}

static int cs_run(const cs_profile_t *prof, const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    unsigned bugs = 0;
    if (!strcmp(v, "evict_no_usage"))
        bugs = COLD_BUG_EVICT_NO_USAGE;
    else if (!strcmp(v, "reclaim_no_lookup"))
        bugs = COLD_BUG_RECLAIM_NO_LOOKUP;
    else if (!strcmp(v, "double_release"))
        bugs = COLD_BUG_DOUBLE_RELEASE;
    else if (!strcmp(v, "no_rebase"))
        bugs = COLD_BUG_NO_REBASE;
    else if (*v) {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (cold scenarios know evict_no_usage, reclaim_no_lookup, "
                 "double_release, no_rebase)",
                 v);
        return 1;
    }
    cs_t *S = calloc(1, sizeof(*S));
    KVM_ASSERT(S != NULL);
    S->prof = prof;
    S->bugs = bugs;
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = CS_NODES;
    cfg.max_steps = 5000000;
    snprintf(S->url, sizeof(S->url), "memory://cold%llu", (unsigned long long)ro->seed);
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    S->sim = sim;
    S->io = (cold_exec_ops_t){.submit = io_submit, .ctx = S};
    S->ro = (cold_route_ops_t){.lookup = rt_lookup,
                               .read_hot = rt_read_hot,
                               .materialize = rt_materialize,
                               .evict = rt_evict,
                               .promote = rt_promote,
                               .ctx = S};
    for (int i = 0; i < CS_NODES; i++) {
        S->sb[i] = cold_simbe_new(1 << 20);
        S->be[i] = cold_simbe_backend(S->sb[i]);
    }
    for (int i = 0; i < CS_OBJS; i++) {
        char key[8];
        snprintf(key, sizeof(key), "k%d", i);
        int rc = kvm_ident_init(&S->o[i].id, "acme", NULL, key, strlen(key));
        KVM_ASSERT(rc == 0);
        S->o[i].dev = (uint32_t)i % CS_NODES;
        S->o[i].r.version.fencing_token = 1;
    }
    int rc = meta_open(&S->wm, sim_world_env(sim), S->url, NULL);
    KVM_ASSERT(rc == 0);
    rc = meta_open(&S->store_m, sim_world_env(sim), S->url, NULL);
    KVM_ASSERT(rc == 0);
    meta_memory_set_faults(S->store_m, &(meta_memory_faults_t){.latency_min_ms = 1,
                                                               .latency_max_ms = 4,
                                                               .fail_ppm = 30000,
                                                               .fail_after_apply = true});
    cold_config_t scfg = {.deployment = CS_DEP,
                          .self = kvm_id128_from_u64(0xAA, 1),
                          .timeout_ms = 100,
                          .op_ttl_ms = 60,
                          .backoff_max_ms = 200};
    rc = cold_new(&S->store_c, sim_world_env(sim), S->store_m, &S->ro, &scfg);
    KVM_ASSERT(rc == 0);
    sim_set_node_hooks(sim, cs_start, cs_stop, S);
    sim_set_invariant(sim, cs_invariant, S);
    sim_start(sim);
    sim_schedule(sim, jitter(S, 5, 20), write_tick, S);
    if (prof->place_hi)
        sim_schedule(sim, jitter(S, prof->place_lo, prof->place_hi), place_tick, S);
    sim_schedule(sim, jitter(S, 50, 150), nemesis, S);
    sim_run_until(sim, (uint64_t)prof->fault_ms * ro->soak * SIM_MSG_NS);
    if (sim_failed(sim))
        goto out;
    /* quiet phase: no writes, no crashes, metadata without failures; everything converges */
    S->quiet = true;
    for (uint32_t i = 0; i < CS_NODES; i++)
        if (!sim_node_up(sim, i))
            sim_restart(sim, i);
    for (uint32_t i = 0; i < CS_NODES; i++) {
        cs_node_t *nd = sim_node_state(sim, i);
        meta_memory_set_faults(nd->m,
                               &(meta_memory_faults_t){.latency_min_ms = 1, .latency_max_ms = 3});
    }
    meta_memory_set_faults(S->store_m,
                           &(meta_memory_faults_t){.latency_min_ms = 1, .latency_max_ms = 3});
    uint64_t deadline = sim_now(sim) + 6 * SIM_SEC_NS;
    bool ok = false;
    while (!sim_failed(sim) && sim_now(sim) < deadline) {
        sim_run_for(sim, 150 * SIM_MSG_NS);
        if (!sim_failed(sim) && converged(S)) {
            ok = true;
            break;
        }
    }
    if (!sim_failed(sim) && !ok)
        sim_fail(sim, "cold tier did not converge within 6 s: %s", S->why);
out:
    sim_log(sim, "writes %llu, lost CAS %llu, evictions %llu, restores %llu, crashes %llu",
            (unsigned long long)S->writes, (unsigned long long)S->cas_lost,
            (unsigned long long)S->evictions, (unsigned long long)S->restores,
            (unsigned long long)S->crashes);
    {
        uint64_t w[4] = {S->writes, S->cas_lost, S->evictions, S->restores};
        sim_trace_mix(sim, w, sizeof(w));
    }
    S->quiet = true;
    sim_set_invariant(sim, NULL, NULL);
    for (uint32_t i = 0; i < CS_NODES; i++)
        sim_crash(sim, i);
    sim_run_for(sim, SIM_SEC_NS); /* world events reach the closed handles */
    pay_owed(S);                  /* after a failure the world stopped before they landed */
    cold_close(S->store_c);
    sim_run_for(sim, SIM_SEC_NS);
    meta_close(S->store_m);
    meta_close(S->wm);
    for (int i = 0; i < 4; i++)
        meta_result_free(S->fin[i]);
    int out = sim_finish(sim, res);
    for (int i = 0; i < CS_NODES; i++)
        cold_simbe_free(S->sb[i]);
    for (int i = 0; i < CS_OBJS; i++)
        kvm_ident_free(&S->o[i].id);
    for (size_t i = 0; i < S->n_allocs; i++)
        free(S->allocs[i]);
    free(S->allocs);
    free(S->owed);
    free(S);
    return out;
}

#define CS_SCENARIO(NAME, DESC, ...)                                                               \
    static const cs_profile_t prof_##NAME = {.name = #NAME, __VA_ARGS__};                          \
    static int run_##NAME(const sim_run_opts_t *ro, sim_result_t *res)                             \
    {                                                                                              \
        return cs_run(&prof_##NAME, ro, res);                                                      \
    }                                                                                              \
    const sim_scenario_t scen_##NAME = {.name = #NAME, .description = DESC, .run = run_##NAME};

#define CS_BASE(PDEL, WLO, WHI, ELO, EHI, CDH)                                                     \
    .p_delete = PDEL, .p_nemesis = 0.1, .write_lo = WLO, .write_hi = WHI, .evict_lo = ELO,         \
    .evict_hi = EHI, .cas_delay_hi = CDH, .fault_ms = 500
#define CS_DEFAULT CS_BASE(0.15, 15, 50, 8, 25, 4)

CS_SCENARIO(cold_crash_reserve,
            "cold: runtimes crash before the capacity reserve; restart resumes from PLANNED",
            CS_DEFAULT, .p_win[COLD_W_BEFORE_RESERVE] = 0.3)
CS_SCENARIO(cold_crash_write,
            "cold: crashes before and after the backend write (locator not persisted); the "
            "idempotent put or find+delete resumes",
            CS_DEFAULT, .p_win[COLD_W_BEFORE_PUT] = 0.15, .p_win[COLD_W_BEFORE_PERSIST] = 0.25)
CS_SCENARIO(cold_crash_locator,
            "cold: crashes after PAYLOAD_WRITTEN is persisted, before the materialize CAS",
            CS_DEFAULT, .p_win[COLD_W_BEFORE_CAS] = 0.3)
CS_SCENARIO(cold_crash_cas,
            "cold: crashes after the materialize CAS, before ROUTE_COMMITTED is persisted; "
            "reconciliation finds the route materialized by the op",
            CS_DEFAULT, .p_win[COLD_W_BEFORE_COMMITTED] = 0.3)
CS_SCENARIO(cold_crash_usage,
            "cold: crashes between ROUTE_COMMITTED and the usage commit; eviction waits for "
            "USAGE_COMMITTED",
            CS_BASE(0.15, 15, 50, 3, 10, 4), .p_win[COLD_W_BEFORE_USAGE] = 0.35)
CS_SCENARIO(cold_race_hot_placement,
            "cold: hot placement CAS races the materialize CAS; the worker rebases while the same "
            "content/cold op stays authoritative",
            CS_DEFAULT, .place_lo = 1, .place_hi = 6, .p_win[COLD_W_BEFORE_CAS] = 0.05)
CS_SCENARIO(cold_race_evict_overwrite,
            "cold: last-hot eviction races overwrite/delete; at most one wins, the only readable "
            "copy is never removed",
            CS_BASE(0.3, 5, 20, 1, 5, 8), .p_win[COLD_W_BEFORE_USAGE] = 0.05)
CS_SCENARIO(cold_race_overwrite_usage,
            "cold: overwrite/delete reclaim races ROUTE_COMMITTED -> USAGE_COMMITTED; exactly one "
            "RELEASED, no underflow",
            CS_BASE(0.3, 4, 15, 8, 25, 4), .p_win[COLD_W_BEFORE_USAGE] = 0.25,
            .p_win[COLD_W_BEFORE_COMMITTED] = 0.1)
