/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_repair.c — background re-replication (src/store/repair.c) racing overwrites and deletes,
 * in the simulator, on the real route core (src/route: the EmbeddedWrh authority mesh, as in
 * scen_route_mesh.c) and the store's own repair decisions (src/store/repair_plan.h).
 *
 * World:
 *   - 4 or 5 runtimes, each a route_svc_t on its env and a storage owner of RP_SLOTS slots (a
 *     scenario-owned table: FREE / RESERVED / COMMITTED, the value written, the owner epoch it
 *     belongs to). A replica is {owner, segment = the owner's epoch, offset = slot}: a restarted
 *     owner has new segments, so its old replicas are dead, like the store's;
 *   - membership snapshots pushed by the world (lagged per node); each node keeps its view and,
 *     like repair.c's hook rt->on_members, notes every owner that left or changed epoch;
 *   - writers (one operation per key at a time, from a random node): put = reserve 2 slots on
 *     distinct owners of the node's view, write, look up, CAS from the version read (a conflict
 *     looks up and retries, <= 8 times); on success the replaced route's replicas are released;
 *     delete = a PENDING tombstone CAS the same way; a result that may have been applied keeps
 *     the slots (the reservation expiry below settles them);
 *   - readers: lookup, then the first replica whose owner epoch, slot and checksum match;
 *   - the repairer on every node (repair.c): per noted owner, passes over route_owner_scan pages
 *     (4 routes each); kvm_repair_plan on each route with the node's view; for its COPY tasks it
 *     checks its source slot against the route's checksum, reserves a slot on an owner outside
 *     the route (PLACE with every current owner excluded), copies after a delay, looks the route
 *     up and publishes kvm_handoff_next with route CAS against that lookup's version
 *     (superseded: the copy and the moving replica are released), and follows
 *     kvm_handoff_outcome (published / retry / keep / reclaim). A pass with failures retries after
 *     500 ms; a clean complete pass drops the owner; paused while the view has fewer owners than
 *     the replica count;
 *   - reservation expiry (the owner's): a reservation whose holder kept it (the CAS may have been
 *     applied) or whose holder crashed is settled 2 s later by an exact lookup: committed when
 *     the route references the slot, freed when it does not.
 * Faults: one owner crashes (it may be a route authority) and restarts with a new epoch 2.5-4.5 s
 * later; network delay, drops, duplicates, reordering; lagged membership; BUGGIFY slows copies.
 *
 * Checks:
 *   resurrection  a read never returns a value older than one acknowledged (put or delete)
 *                 before the read began (values of a key grow with its writes, which are
 *                 sequential per key);
 *   leak          after the faults, writers stopped and expiry done: no slot is RESERVED; every
 *                 COMMITTED slot is listed by its key's final route (keys whose own put or delete
 *                 ended "may have been applied" excuse their write slots, not repair copies);
 *                 every replica of a final route is a COMMITTED slot holding the route's value;
 *   restored      within RP_CONVERGE_S of healing, every live route has exactly 2 replicas, on
 *                 distinct owners, all live in the full membership.
 *
 * Scenario repair_race. Variants that must be caught: blind_cas (the handoff CAS publishes the
 * scanned route with the replica replaced over whatever version is current: no version
 * precondition; caught as a resurrected value), no_reclaim (a superseded copy is not released;
 * caught as a leak), no_own_check (the handoff before its fix: a CAS that applied but was
 * answered with a conflict — a retried or duplicated request — is re-planned, the moving replica
 * is gone, and the handoff releases its own copy, which the route lists; caught as a dangling
 * replica, about 3 seeds in 1,000).
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
#include "store/repair_plan.h"

#define RP_MAX_NODES  5
#define RP_KEYS       6
#define RP_SLOTS      48
#define RP_R          2 /* replica count */
#define RP_LEN        4096
#define RP_PAGE       4
#define RP_RETRIES    8 /* STORE_CAS_RETRIES */
#define RP_LEASE_MS   1000
#define RP_TIMEOUT_MS 1500
#define RP_EXPIRY_MS  2000
#define RP_FAULT_S    7
#define RP_CONVERGE_S 15
#define RP_MAX_ACKS   256
#define RP_NOT_SENT   KVMESH_ENOENT /* a write that ended before any CAS could apply */

enum slot_state { SL_FREE = 0, SL_RESERVED, SL_COMMITTED };
enum slot_origin { SO_WRITE = 0, SO_REPAIR };

typedef struct rp_slot {
    enum slot_state state;
    uint32_t epoch; /* owner incarnation it belongs to (0: never used) */
    uint64_t value; /* bytes (kept after release, until reuse) */
    uint32_t key;
    enum slot_origin origin;
    uint32_t holder, holder_inc;
    bool kept;
    uint64_t t_settle; /* kept or orphaned: earliest expiry settlement */
    uint64_t gen;      /* reservation instance (a settlement answers only its own) */
    bool settling;     /* an expiry lookup is in flight */
} rp_slot_t;

typedef struct rp rp_t;

typedef struct rp_view {
    bool in[RP_MAX_NODES];
    uint32_t epoch[RP_MAX_NODES];
} rp_view_t;

typedef struct rp_task {
    struct rp_node *nd;
    uint32_t inc;
    uint32_t key;
    kvm_route_t snap; /* the route as the scan saw it */
    kvm_hot_replica_t src, moving, fresh;
    uint32_t tries;
    bool have_fresh;
} rp_task_t;

typedef struct rp_node {
    rp_t *rp;
    uint32_t id;
    env_t *env;
    route_svc_t *svc;
    bool ready, stopping;
    rp_view_t view;
    bool have_view;
    /* repairer */
    bool noted[RP_MAX_NODES];
    uint64_t noted_gen[RP_MAX_NODES];
    uint64_t gen;
    bool passing;
    uint32_t pass_owner;
    uint64_t pass_gen;
    uint8_t cursor[512];
    size_t cursor_len;
    bool pass_complete, pass_found, pass_failed;
    rp_task_t **tasks;
    size_t n_tasks, next_task;
    env_timer_id kick_timer, expiry_timer;
} rp_node_t;

typedef struct rp_ack {
    uint64_t value, end_ns;
} rp_ack_t;

typedef struct rp_write {
    rp_t *rp;
    uint32_t node, inc, key;
    uint64_t value;
    bool del;
    uint32_t slot_node[RP_R], slot_idx[RP_R], slot_epoch[RP_R];
    uint32_t n_slots;
    kvm_route_t cur;
    bool have_cur;
    uint32_t tries;
} rp_write_t;

typedef struct rp_read {
    rp_t *rp;
    uint32_t node, inc, key, tries;
    uint64_t start_ns;
} rp_read_t;

struct rp {
    sim_t *sim;
    const sim_run_opts_t *ro;
    bool blind_cas, no_reclaim, no_own_check;
    uint32_t n, shards, k;
    char url[64];
    meta_t *world_m;
    meta_t *node_m[RP_MAX_NODES];
    uint64_t mgen;
    bool in_members[RP_MAX_NODES];
    uint32_t epoch[RP_MAX_NODES];
    rp_slot_t slots[RP_MAX_NODES][RP_SLOTS];
    kvm_ident_t keys[RP_KEYS];
    bool key_busy[RP_KEYS];
    bool key_indet[RP_KEYS];
    rp_ack_t acks[RP_KEYS][RP_MAX_ACKS];
    uint32_t n_acks[RP_KEYS];
    uint64_t next_value, slot_gen;
    bool writing, final;
    uint32_t victim;
    /* counters */
    uint64_t reads, reads_checked, writes_ok, deletes_ok, copies, published, superseded, kept,
        reclaimed, expiry_freed, expiry_committed;
    /* final lookups */
    kvm_route_t final_route[RP_KEYS];
    int final_rc[RP_KEYS];
    uint32_t final_pending;
    /* world events in flight when the run ends are dropped: their args are freed at the end */
    void **allocs;
    size_t n_allocs, cap_allocs;
    rp_task_t **all_tasks; /* their scanned routes are freed at the end */
    size_t n_tasks, cap_tasks;
};

static kvm_runtime_id_t rt_id(uint32_t node)
{
    return kvm_id128_from_u64(0x72657061697273ull, node + 1);
}

static int node_of(const rp_t *rp, const kvm_runtime_id_t *id)
{
    for (uint32_t j = 0; j < rp->n; j++) {
        kvm_runtime_id_t x = rt_id(j);
        if (kvm_id128_equal(&x, id))
            return (int)j;
    }
    return -1;
}

static uint64_t csum(uint64_t value)
{
    return value * 0x9e3779b97f4a7c15ull | 1;
}

static void *rp_alloc(rp_t *rp, size_t size)
{
    if (rp->n_allocs == rp->cap_allocs) {
        rp->cap_allocs = rp->cap_allocs ? 2 * rp->cap_allocs : 64;
        rp->allocs = realloc(rp->allocs, rp->cap_allocs * sizeof(void *));
        KVM_ASSERT(rp->allocs != NULL);
    }
    void *p = calloc(1, size);
    KVM_ASSERT(p != NULL);
    rp->allocs[rp->n_allocs++] = p;
    return p;
}

static bool node_live(rp_t *rp, uint32_t node, uint32_t inc)
{
    return sim_node_up(rp->sim, node) && sim_node_incarnation(rp->sim, node) == inc;
}

static rp_node_t *node_ready(rp_t *rp, uint32_t node)
{
    if (!sim_node_up(rp->sim, node))
        return NULL;
    rp_node_t *nd = sim_node_state(rp->sim, node);
    return nd && nd->svc && nd->ready && !nd->stopping ? nd : NULL;
}

/* ---- slots ---------------------------------------------------------------------------------- */

/* Reserves a free slot on `owner` for the epoch the caller believes it has; -1 when the owner is
 * not that incarnation (down or restarted: the reservation RPC fails) or full. */
static int slot_reserve(rp_t *rp, uint32_t owner, uint32_t epoch, uint32_t key,
                        enum slot_origin origin, uint32_t holder)
{
    if (!node_live(rp, owner, epoch))
        return -1;
    for (uint32_t s = 0; s < RP_SLOTS; s++) {
        rp_slot_t *sl = &rp->slots[owner][s];
        if (sl->state != SL_FREE)
            continue;
        *sl = (rp_slot_t){.gen = ++rp->slot_gen,
                          .state = SL_RESERVED,
                          .epoch = epoch,
                          .value = 0,
                          .key = key,
                          .origin = origin,
                          .holder = holder,
                          .holder_inc = sim_node_incarnation(rp->sim, holder)};
        return (int)s;
    }
    return -1;
}

static rp_slot_t *slot_of(rp_t *rp, const kvm_hot_replica_t *rep)
{
    int o = node_of(rp, &rep->owner);
    if (o < 0 || rep->offset >= RP_SLOTS)
        return NULL;
    rp_slot_t *sl = &rp->slots[o][rep->offset];
    if (!node_live(rp, (uint32_t)o, (uint32_t)rep->segment) || sl->epoch != rep->segment)
        return NULL; /* the owner's incarnation is gone: so is the slot */
    return sl;
}

/* kvm_ops_release_replica / release_res: frees the slot of that incarnation, if it still is. */
static void slot_release(rp_t *rp, const kvm_hot_replica_t *rep)
{
    rp_slot_t *sl = slot_of(rp, rep);
    if (sl)
        sl->state = SL_FREE;
}

static kvm_hot_replica_t rep_at(uint32_t owner, uint32_t epoch, uint32_t slot, uint64_t value)
{
    return (kvm_hot_replica_t){.owner = rt_id(owner),
                               .segment = epoch,
                               .offset = slot,
                               .length = RP_LEN,
                               .checksum = csum(value)};
}

/* ---- membership ----------------------------------------------------------------------------- */

static void repair_kick(rp_node_t *nd, uint64_t delay_ms);

typedef struct rp_push {
    rp_t *rp;
    uint32_t node, inc;
    uint64_t gen;
    rp_view_t view;
} rp_push_t;

/* repair.c's rt->on_members hook: note the owners that left or changed epoch. */
static void view_install(rp_node_t *nd, const rp_view_t *v)
{
    if (nd->have_view)
        for (uint32_t j = 0; j < nd->rp->n; j++) {
            if (!nd->view.in[j] || j == nd->id)
                continue;
            if (!v->in[j] || v->epoch[j] != nd->view.epoch[j]) {
                nd->noted[j] = true;
                nd->noted_gen[j] = ++nd->gen;
            }
        }
    nd->view = *v;
    nd->have_view = true;
    repair_kick(nd, 0);
}

static void push_deliver(void *arg)
{
    rp_push_t *p = arg;
    rp_t *rp = p->rp;
    if (!node_live(rp, p->node, p->inc))
        return;
    rp_node_t *nd = sim_node_state(rp->sim, p->node);
    if (!nd || !nd->svc)
        return;
    route_member_t m[RP_MAX_NODES];
    size_t n = 0;
    for (uint32_t j = 0; j < rp->n; j++) {
        if (!p->view.in[j])
            continue;
        m[n++] = (route_member_t){.rt = {.id = rt_id(j), .epoch = p->view.epoch[j]},
                                  .node = j,
                                  .weight = 1.0,
                                  .route_capable = true,
                                  .route_version = ROUTE_PROTOCOL_VERSION};
    }
    route_set_members(nd->svc, p->gen, m, n);
    view_install(nd, &p->view);
}

static void push_members(rp_t *rp, bool lag)
{
    rp->mgen++;
    for (uint32_t i = 0; i < rp->n; i++) {
        if (!sim_node_up(rp->sim, i))
            continue;
        rp_push_t *p = rp_alloc(rp, sizeof(*p));
        p->rp = rp;
        p->node = i;
        p->inc = sim_node_incarnation(rp->sim, i);
        p->gen = rp->mgen;
        for (uint32_t j = 0; j < rp->n; j++) {
            p->view.in[j] = rp->in_members[j];
            p->view.epoch[j] = rp->epoch[j];
        }
        uint64_t d = lag ? sim_rand_range(rp->sim, 0, 300) * SIM_MSG_NS : 0;
        sim_schedule(rp->sim, d, push_deliver, p);
    }
}

/* repair.c rep_state on this node's view: LIVE when the owner is a member with that epoch (the
 * segment), DEAD otherwise (this scenario has no draining owner). */
static enum kvm_rep_state rep_state(const rp_node_t *nd, const kvm_hot_replica_t *rep)
{
    int o = node_of(nd->rp, &rep->owner);
    if (o < 0 || !nd->view.in[o] || nd->view.epoch[o] != rep->segment)
        return KVM_REP_DEAD;
    return KVM_REP_LIVE;
}

static uint32_t view_owners(const rp_node_t *nd)
{
    uint32_t c = 0;
    for (uint32_t j = 0; j < nd->rp->n; j++)
        c += nd->view.in[j];
    return c;
}

/* ---- the repairer (repair.c on this node) --------------------------------------------------- */

static void pass_next(rp_node_t *nd);
static void task_run(rp_task_t *t);

static void kick_fire(void *arg)
{
    rp_node_t *nd = arg;
    nd->kick_timer = 0;
    if (nd->stopping || nd->passing || !nd->ready)
        return;
    uint32_t j = 0;
    while (j < nd->rp->n && !nd->noted[j])
        j++;
    if (j == nd->rp->n)
        return;
    if (view_owners(nd) < RP_R) { /* paused: a copy would have nowhere to go */
        repair_kick(nd, 500);
        return;
    }
    nd->passing = true;
    nd->pass_owner = j;
    nd->pass_gen = nd->noted_gen[j];
    nd->cursor_len = 0;
    nd->pass_found = nd->pass_failed = false;
    nd->pass_complete = false;
    pass_next(nd);
}

static void repair_kick(rp_node_t *nd, uint64_t delay_ms)
{
    if (nd->stopping || nd->kick_timer || nd->passing)
        return;
    nd->kick_timer = env_timer_start(nd->env, delay_ms * SIM_MSG_NS, kick_fire, nd);
}

static void pass_end(rp_node_t *nd)
{
    nd->passing = false;
    uint32_t j = nd->pass_owner;
    if (!nd->pass_failed && !nd->pass_found && nd->noted_gen[j] == nd->pass_gen)
        nd->noted[j] = false; /* a clean complete pass: done unless noted again */
    repair_kick(nd, nd->pass_failed ? 500 : nd->pass_found ? 20 : 0);
}

static void page_done(rp_node_t *nd)
{
    if (nd->next_task < nd->n_tasks) {
        task_run(nd->tasks[nd->next_task++]);
        return;
    }
    free(nd->tasks);
    nd->tasks = NULL;
    nd->n_tasks = nd->next_task = 0;
    if (nd->pass_complete)
        pass_end(nd);
    else
        pass_next(nd);
}

static void on_scan(void *arg, int rc, const route_owner_page_t *pg)
{
    rp_node_t *nd = arg;
    if (nd->stopping)
        return;
    rp_t *rp = nd->rp;
    if (rc != 0) {
        nd->pass_failed = true;
        pass_end(nd);
        return;
    }
    nd->tasks = calloc(pg->n ? pg->n : 1, sizeof(*nd->tasks));
    KVM_ASSERT(nd->tasks != NULL);
    uint32_t inc = sim_node_incarnation(rp->sim, nd->id);
    for (size_t i = 0; i < pg->n; i++) {
        const kvm_route_t *r = &pg->routes[i];
        enum kvm_rep_state st[KVM_MAX_REPLICAS];
        for (uint32_t j = 0; j < r->n_replicas && j < KVM_MAX_REPLICAS; j++)
            st[j] = rep_state(nd, &r->replicas[j]);
        kvm_repair_plan_t plan;
        kvm_runtime_id_t self = rt_id(nd->id);
        if (kvm_repair_plan(r, st, &self, &plan) != KVM_REPAIR_COPY)
            continue;
        if (r->replicas[plan.src].segment != inc)
            continue; /* not a segment this runtime serves (local_token) */
        int key = -1;
        for (uint32_t k = 0; k < RP_KEYS; k++)
            if (kvm_ident_equal(&rp->keys[k], &r->ident))
                key = (int)k;
        KVM_ASSERT(key >= 0);
        rp_task_t *t = rp_alloc(rp, sizeof(*t));
        if (rp->n_tasks == rp->cap_tasks) {
            rp->cap_tasks = rp->cap_tasks ? 2 * rp->cap_tasks : 64;
            rp->all_tasks = realloc(rp->all_tasks, rp->cap_tasks * sizeof(*rp->all_tasks));
            KVM_ASSERT(rp->all_tasks != NULL);
        }
        rp->all_tasks[rp->n_tasks++] = t;
        t->nd = nd;
        t->inc = inc;
        t->key = (uint32_t)key;
        kvm_route_init(&t->snap);
        KVM_ASSERT(kvm_route_copy(&t->snap, r) == 0);
        t->src = r->replicas[plan.src];
        t->moving = r->replicas[plan.dead];
        nd->tasks[nd->n_tasks++] = t;
    }
    nd->pass_found |= nd->n_tasks > 0;
    nd->pass_complete = pg->complete || !pg->next_cursor_len;
    if (!nd->pass_complete) {
        KVM_ASSERT(pg->next_cursor_len <= sizeof(nd->cursor));
        memcpy(nd->cursor, pg->next_cursor, pg->next_cursor_len);
        nd->cursor_len = pg->next_cursor_len;
    }
    page_done(nd);
}

static void pass_next(rp_node_t *nd)
{
    kvm_runtime_id_t owner = rt_id(nd->pass_owner);
    int rc = route_owner_scan(nd->svc, &owner, nd->cursor_len ? nd->cursor : NULL, nd->cursor_len,
                              RP_PAGE, on_scan, nd);
    if (rc != 0) {
        nd->pass_failed = true;
        pass_end(nd);
    }
}

static bool task_alive(rp_task_t *t)
{
    return node_live(t->nd->rp, t->nd->id, t->inc) && !t->nd->stopping;
}

static void task_end(rp_task_t *t, bool ok)
{
    if (!ok)
        t->nd->pass_failed = true;
    kvm_route_free(&t->snap);
    page_done(t->nd);
}

static void release_copy(rp_task_t *t)
{
    if (t->have_fresh)
        slot_release(t->nd->rp, &t->fresh);
    t->have_fresh = false;
}

static void on_handoff_cas(void *arg, int rc, const kvm_route_t *route);

static void handoff_lookup(rp_task_t *t);

static void on_handoff_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    rp_task_t *t = arg;
    if (!task_alive(t))
        return; /* crashed: the reservation is orphaned, the owner's expiry settles it */
    rp_t *rp = t->nd->rp;
    if (rc != 0 && rc != KVMESH_ENOENT) {
        release_copy(t);
        task_end(t, false);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    kvm_route_version_t expected;
    int plan;
    if (rp->blind_cas) {
        /* broken: the scanned route, replica replaced, over whatever version is current */
        plan = kvm_handoff_next(&t->snap, &t->moving, &t->fresh, &next);
        expected = rc == 0 ? r->version : KVM_ROUTE_VERSION_NONE;
    } else {
        plan = kvm_handoff_next(rc == KVMESH_ENOENT ? NULL : r, &t->moving, &t->fresh, &next);
        expected = plan == 0 ? r->version : KVM_ROUTE_VERSION_NONE;
    }
    KVM_ASSERT(plan >= 0 && plan <= 2);
    if (plan == 2 && rp->no_own_check)
        plan = 1; /* broken: the store's handoff before the fix took its own copy for a winner */
    if (plan == 2) {
        on_handoff_cas(t, 0, r); /* an earlier attempt of ours applied */
        return;
    }
    if (plan == 1) { /* an overwrite or delete won: release the copy and the moving replica */
        rp->superseded++;
        if (!rp->no_reclaim)
            release_copy(t);
        slot_release(rp, &t->moving);
        sim_log(rp->sim, "n%u: k%u copy superseded", t->nd->id, t->key);
        task_end(t, true);
        return;
    }
    int crc = route_cas(t->nd->svc, &expected, &next, on_handoff_cas, t);
    kvm_route_free(&next);
    if (crc != 0) {
        release_copy(t);
        task_end(t, false);
    }
}

static void handoff_lookup(rp_task_t *t)
{
    if (route_lookup(t->nd->svc, &t->nd->rp->keys[t->key], on_handoff_looked_up, t) != 0) {
        release_copy(t);
        task_end(t, false);
    }
}

static void on_handoff_cas(void *arg, int rc, const kvm_route_t *route)
{
    rp_task_t *t = arg;
    (void)route;
    if (!task_alive(t))
        return;
    rp_t *rp = t->nd->rp;
    sim_log(rp->sim, "n%u: k%u handoff CAS: %s", t->nd->id, t->key, rc ? kvmesh_errname(rc) : "ok");
    switch (kvm_handoff_outcome(rc, &t->tries, RP_RETRIES)) {
    case KVM_HANDOFF_PUBLISHED: {
        rp_slot_t *sl = slot_of(rp, &t->fresh);
        if (sl && sl->state == SL_RESERVED) {
            sl->state = SL_COMMITTED; /* STORE_RPC_COMMIT */
            sl->origin = SO_WRITE;    /* the route's replica now, like the writers' */
        }
        slot_release(rp, &t->moving);
        rp->published++;
        sim_log(rp->sim, "n%u: k%u copy published on n%d slot %llu", t->nd->id, t->key,
                node_of(rp, &t->fresh.owner), (unsigned long long)t->fresh.offset);
        task_end(t, true);
        return;
    }
    case KVM_HANDOFF_RETRY:
        handoff_lookup(t);
        return;
    case KVM_HANDOFF_KEEP: {
        rp_slot_t *sl = slot_of(rp, &t->fresh);
        if (sl && sl->state == SL_RESERVED) {
            sl->kept = true;
            sl->t_settle = sim_now(rp->sim) + RP_EXPIRY_MS * SIM_MSG_NS;
        }
        rp->kept++;
        task_end(t, false);
        return;
    }
    case KVM_HANDOFF_RECLAIM:
        rp->reclaimed++;
        release_copy(t);
        task_end(t, false);
        return;
    }
}

/* The copy lands after a delay: the source is checked against the route's checksum at copy time
 * (never spread a replica that does not match its route), then written to the reserved slot. */
static void copy_landed(void *arg)
{
    rp_task_t *t = arg;
    if (!task_alive(t))
        return;
    rp_t *rp = t->nd->rp;
    rp_slot_t *src = slot_of(rp, &t->src), *dst = slot_of(rp, &t->fresh);
    if (!src || csum(src->value) != t->snap.checksum || !dst || dst->state != SL_RESERVED) {
        release_copy(t);
        task_end(t, false);
        return;
    }
    dst->value = src->value;
    handoff_lookup(t);
}

static void task_run(rp_task_t *t)
{
    rp_node_t *nd = t->nd;
    rp_t *rp = nd->rp;
    /* PLACE: one replica, every current owner of the route excluded */
    uint32_t cand[RP_MAX_NODES], nc = 0;
    for (uint32_t j = 0; j < rp->n; j++) {
        if (!nd->view.in[j])
            continue;
        bool excl = false;
        for (uint32_t r = 0; r < t->snap.n_replicas; r++) {
            kvm_runtime_id_t id = rt_id(j);
            excl |= kvm_id128_equal(&t->snap.replicas[r].owner, &id);
        }
        if (!excl)
            cand[nc++] = j;
    }
    rp->copies++;
    if (nc == 0) {
        task_end(t, false);
        return;
    }
    uint32_t to = cand[sim_rand_range(rp->sim, 0, nc - 1)];
    int s = slot_reserve(rp, to, nd->view.epoch[to], t->key, SO_REPAIR, nd->id);
    if (s < 0) {
        task_end(t, false);
        return;
    }
    t->fresh = rep_at(to, nd->view.epoch[to], (uint32_t)s, 0);
    t->have_fresh = true;
    uint64_t d = sim_rand_range(rp->sim, 2, 40);
    if (SIM_BUGGIFY(rp->sim, "repair.slow_copy"))
        d = sim_rand_range(rp->sim, 200, 700);
    sim_schedule_on(rp->sim, nd->id, d * SIM_MSG_NS, copy_landed, t);
}

/* ---- reservation expiry (each owner) -------------------------------------------------------- */

typedef struct rp_settle {
    rp_node_t *nd;
    uint32_t inc, slot, epoch;
    uint64_t gen;
} rp_settle_t;

static void on_settle(void *arg, int rc, const kvm_route_t *r)
{
    rp_settle_t *q = arg;
    rp_t *rp = q->nd->rp;
    if (!node_live(rp, q->nd->id, q->inc) || q->nd->stopping)
        return;
    rp_slot_t *sl = &rp->slots[q->nd->id][q->slot];
    if (sl->gen != q->gen)
        return; /* released (and maybe reserved again) meanwhile */
    sl->settling = false;
    if (sl->state != SL_RESERVED || sl->epoch != q->epoch)
        return;
    kvm_hot_replica_t me = rep_at(q->nd->id, q->epoch, q->slot, sl->value);
    if (rc == 0 && !kvm_route_is_tombstone(r) && kvm_route_find_replica(r, &me) >= 0) {
        sl->state = SL_COMMITTED;
        sl->origin = SO_WRITE;
        sl->kept = false;
        rp->expiry_committed++;
    } else if (rc == 0 || rc == KVMESH_ENOENT) {
        sl->state = SL_FREE;
        rp->expiry_freed++;
        sim_log(rp->sim, "n%u: expiry freed slot %u (k%u)", q->nd->id, q->slot, sl->key);
    } /* otherwise the lookup failed: settled at the next sweep */
}

static void expiry_sweep(void *arg)
{
    rp_node_t *nd = arg;
    rp_t *rp = nd->rp;
    nd->expiry_timer = 0;
    if (nd->stopping)
        return;
    uint32_t inc = sim_node_incarnation(rp->sim, nd->id);
    for (uint32_t s = 0; s < RP_SLOTS && nd->ready; s++) {
        rp_slot_t *sl = &rp->slots[nd->id][s];
        if (sl->state != SL_RESERVED || sl->epoch != inc)
            continue;
        bool orphan = !node_live(rp, sl->holder, sl->holder_inc);
        if (orphan && !sl->kept) {
            sl->kept = true;
            sl->t_settle = sim_now(rp->sim) + RP_EXPIRY_MS * SIM_MSG_NS;
        }
        if (!sl->kept || sl->settling || sim_now(rp->sim) < sl->t_settle)
            continue;
        rp_settle_t *q = rp_alloc(rp, sizeof(*q));
        *q = (rp_settle_t){.nd = nd, .inc = inc, .slot = s, .epoch = inc, .gen = sl->gen};
        sl->settling = true;
        if (route_lookup(nd->svc, &rp->keys[sl->key], on_settle, q) != 0) {
            sl->settling = false;
            break;
        }
    }
    nd->expiry_timer = env_timer_start(nd->env, 250 * SIM_MSG_NS, expiry_sweep, nd);
}

/* ---- writers -------------------------------------------------------------------------------- */

static void write_lookup(rp_write_t *w);

static void write_end(rp_write_t *w, int rc)
{
    rp_t *rp = w->rp;
    if (rc == 0) {
        for (uint32_t i = 0; i < w->n_slots; i++) {
            rp_slot_t *sl = &rp->slots[w->slot_node[i]][w->slot_idx[i]];
            if (sl->epoch == w->slot_epoch[i] && sl->state == SL_RESERVED)
                sl->state = SL_COMMITTED;
        }
        if (w->have_cur) /* the replaced value's replicas */
            for (uint32_t i = 0; i < w->cur.n_replicas; i++) {
                sim_log(rp->sim, "k%u: release n%d/%llu slot %llu", w->key,
                        node_of(rp, &w->cur.replicas[i].owner),
                        (unsigned long long)w->cur.replicas[i].segment,
                        (unsigned long long)w->cur.replicas[i].offset);
                slot_release(rp, &w->cur.replicas[i]);
            }
        uint32_t *n = &rp->n_acks[w->key];
        if (*n < RP_MAX_ACKS)
            rp->acks[w->key][(*n)++] = (rp_ack_t){w->value, sim_now(rp->sim)};
        if (w->del)
            rp->deletes_ok++;
        else
            rp->writes_ok++;
    } else if (kvm_cas_refused(rc) || rc == RP_NOT_SENT || rc == KVMESH_ENOSPC) {
        for (uint32_t i = 0; i < w->n_slots; i++) {
            kvm_hot_replica_t rep = rep_at(w->slot_node[i], w->slot_epoch[i], w->slot_idx[i], 0);
            slot_release(rp, &rep);
        }
    } else { /* may have been applied: the reservations are kept for the expiry */
        rp->key_indet[w->key] = true;
        for (uint32_t i = 0; i < w->n_slots; i++) {
            rp_slot_t *sl = &rp->slots[w->slot_node[i]][w->slot_idx[i]];
            if (sl->epoch == w->slot_epoch[i] && sl->state == SL_RESERVED) {
                sl->kept = true;
                sl->t_settle = sim_now(rp->sim) + RP_EXPIRY_MS * SIM_MSG_NS;
            }
        }
    }
    sim_log(rp->sim, "k%u %s v%llu: %s", w->key, w->del ? "delete" : "put",
            (unsigned long long)w->value, rc ? kvmesh_errname(rc) : "ok");
    uint64_t mix[3] = {w->key, w->value, (uint64_t)(int64_t)rc};
    sim_trace_mix(rp->sim, mix, sizeof(mix));
    kvm_route_free(&w->cur);
    w->have_cur = false;
    rp->key_busy[w->key] = false;
}

static void on_write_cas(void *arg, int rc, const kvm_route_t *route)
{
    rp_write_t *w = arg;
    if (rc == KVMESH_ECONFLICT && route && route->content_op.seq == w->value) {
        write_end(w, 0); /* ours is there (a retried or duplicated request): published */
        return;
    }
    if (rc == KVMESH_ECONFLICT && ++w->tries <= RP_RETRIES && node_ready(w->rp, w->node) &&
        sim_node_incarnation(w->rp->sim, w->node) == w->inc) {
        write_lookup(w);
        return;
    }
    write_end(w, rc);
}

static void on_write_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    rp_write_t *w = arg;
    rp_t *rp = w->rp;
    rp_node_t *nd = node_ready(rp, w->node);
    if (!nd || sim_node_incarnation(rp->sim, w->node) != w->inc ||
        (rc != 0 && rc != KVMESH_ENOENT)) {
        write_end(w, RP_NOT_SENT); /* every earlier CAS attempt conflicted: nothing applied */
        return;
    }
    if (rc == 0 && r->content_op.seq == w->value) {
        write_end(w, 0); /* the conflicting attempt was ours: published over w->cur */
        return;
    }
    kvm_route_free(&w->cur);
    w->have_cur = rc == 0;
    if (rc == 0)
        KVM_ASSERT(kvm_route_copy(&w->cur, r) == 0);
    kvm_route_t next;
    kvm_route_init(&next);
    KVM_ASSERT(kvm_ident_copy(&next.ident, &rp->keys[w->key]) == 0);
    next.content_op = (kvm_op_id_t){.writer = rt_id(w->node), .epoch = w->inc, .seq = w->value};
    if (w->del) {
        next.tomb = KVM_TOMB_PENDING;
    } else {
        next.length = RP_LEN;
        next.checksum = csum(w->value);
        next.n_replicas = w->n_slots;
        for (uint32_t i = 0; i < w->n_slots; i++)
            next.replicas[i] = rep_at(w->slot_node[i], w->slot_epoch[i], w->slot_idx[i], w->value);
    }
    kvm_route_version_t e = rc == 0 ? r->version : KVM_ROUTE_VERSION_NONE;
    int crc = route_cas(nd->svc, &e, &next, on_write_cas, w);
    kvm_route_free(&next);
    if (crc != 0)
        write_end(w, RP_NOT_SENT);
}

static void write_lookup(rp_write_t *w)
{
    rp_node_t *nd = node_ready(w->rp, w->node);
    if (!nd || route_lookup(nd->svc, &w->rp->keys[w->key], on_write_looked_up, w) != 0)
        write_end(w, RP_NOT_SENT);
}

static void writer_tick(void *arg)
{
    rp_t *rp = arg;
    if (!rp->writing)
        return;
    sim_schedule(rp->sim, sim_rand_range(rp->sim, 30, 120) * SIM_MSG_NS, writer_tick, rp);
    uint32_t key = (uint32_t)sim_rand_range(rp->sim, 0, RP_KEYS - 1);
    uint32_t node = (uint32_t)sim_rand_range(rp->sim, 0, rp->n - 1);
    rp_node_t *nd = node_ready(rp, node);
    if (rp->key_busy[key] || !nd || !nd->have_view || !sim_chance(rp->sim, 0.25))
        return;
    rp_write_t *w = rp_alloc(rp, sizeof(*w));
    w->rp = rp;
    w->node = node;
    w->inc = sim_node_incarnation(rp->sim, node);
    w->key = key;
    w->value = ++rp->next_value;
    w->del = sim_chance(rp->sim, 0.25);
    kvm_route_init(&w->cur);
    rp->key_busy[key] = true;
    if (!w->del) { /* PLACE: 2 distinct owners of the view */
        uint32_t cand[RP_MAX_NODES], nc = 0;
        for (uint32_t j = 0; j < rp->n; j++)
            if (nd->view.in[j])
                cand[nc++] = j;
        for (uint32_t i = 0; i < RP_R && nc > 0; i++) {
            uint32_t pick = (uint32_t)sim_rand_range(rp->sim, 0, nc - 1);
            uint32_t to = cand[pick];
            cand[pick] = cand[--nc];
            int s = slot_reserve(rp, to, nd->view.epoch[to], key, SO_WRITE, node);
            if (s < 0)
                break;
            rp->slots[to][s].value = w->value; /* the data transfer */
            w->slot_node[w->n_slots] = to;
            w->slot_idx[w->n_slots] = (uint32_t)s;
            w->slot_epoch[w->n_slots] = nd->view.epoch[to];
            w->n_slots++;
        }
        if (w->n_slots < RP_R) {
            write_end(w, KVMESH_ENOSPC);
            return;
        }
    }
    write_lookup(w);
}

/* ---- readers -------------------------------------------------------------------------------- */

static void read_start(rp_read_t *q);

static void on_read(void *arg, int rc, const kvm_route_t *r)
{
    rp_read_t *q = arg;
    rp_t *rp = q->rp;
    if (rc != 0 && rc != KVMESH_ENOENT)
        return;
    uint64_t value = 0;
    bool got = rc == KVMESH_ENOENT;
    if (rc == 0 && kvm_route_is_tombstone(r)) {
        value = r->content_op.seq;
        got = true;
    } else if (rc == 0) {
        for (uint32_t i = 0; i < r->n_replicas && !got; i++) {
            rp_slot_t *sl = slot_of(rp, &r->replicas[i]);
            if (sl && csum(sl->value) == r->checksum) {
                value = sl->value;
                got = true;
            }
        }
        if (!got && ++q->tries < 3 && node_live(rp, q->node, q->inc)) {
            read_start(q); /* checksum mismatch or no readable replica: look up again */
            return;
        }
    }
    if (!got)
        return;
    rp->reads_checked++;
    uint64_t newest = 0, at = 0;
    for (uint32_t i = 0; i < rp->n_acks[q->key]; i++)
        if (rp->acks[q->key][i].end_ns < q->start_ns && rp->acks[q->key][i].value > newest) {
            newest = rp->acks[q->key][i].value;
            at = rp->acks[q->key][i].end_ns;
        }
    uint64_t mix[2] = {q->key, value};
    sim_trace_mix(rp->sim, mix, sizeof(mix));
    if (value < newest)
        sim_fail(rp->sim,
                 "resurrected value: n%u read k%u (began %llu ms) returned v%llu, but v%llu was "
                 "acknowledged at %llu ms",
                 q->node, q->key, (unsigned long long)(q->start_ns / SIM_MSG_NS),
                 (unsigned long long)value, (unsigned long long)newest,
                 (unsigned long long)(at / SIM_MSG_NS));
}

static void read_start(rp_read_t *q)
{
    rp_node_t *nd = node_ready(q->rp, q->node);
    if (nd)
        (void)route_lookup(nd->svc, &q->rp->keys[q->key], on_read, q);
}

static void reader_tick(void *arg)
{
    rp_t *rp = arg;
    if (!rp->writing)
        return;
    sim_schedule(rp->sim, sim_rand_range(rp->sim, 10, 40) * SIM_MSG_NS, reader_tick, rp);
    rp_read_t *q = rp_alloc(rp, sizeof(*q));
    q->rp = rp;
    q->node = (uint32_t)sim_rand_range(rp->sim, 0, rp->n - 1);
    q->inc = sim_node_incarnation(rp->sim, q->node);
    q->key = (uint32_t)sim_rand_range(rp->sim, 0, RP_KEYS - 1);
    q->start_ns = sim_now(rp->sim);
    rp->reads++;
    read_start(q);
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static void on_ready(void *arg, int rc)
{
    rp_node_t *nd = arg;
    if (rc != 0) {
        sim_fail(nd->rp->sim, "n%u: route service failed to start: %s", nd->id, kvmesh_errname(rc));
        return;
    }
    nd->ready = true;
    nd->expiry_timer = env_timer_start(nd->env, 250 * SIM_MSG_NS, expiry_sweep, nd);
    repair_kick(nd, 0);
}

static void on_recv(void *ctx, const env_msg_t *msg)
{
    rp_node_t *nd = ctx;
    if (nd->svc)
        route_on_message(nd->svc, msg);
}

static void *rp_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    rp_t *rp = ctx;
    rp_node_t *nd = calloc(1, sizeof(*nd));
    KVM_ASSERT(nd != NULL);
    nd->rp = rp;
    nd->id = node;
    nd->env = env;
    rp->epoch[node] = sim_node_incarnation(sim, node);
    env_set_recv(env, on_recv, nd);
    route_svc_opts_t o = {.env = env,
                          .meta = rp->node_m[node],
                          .deployment = "simrep",
                          .self = {.id = rt_id(node), .epoch = rp->epoch[node]},
                          .policy = {.mode = ROUTE_MODE_EMBEDDED_WRH,
                                     .top_k = rp->k,
                                     .n_shards = rp->shards,
                                     .protocol_version = ROUTE_PROTOCOL_VERSION},
                          .shard_lease_ms = RP_LEASE_MS,
                          .request_timeout_ms = RP_TIMEOUT_MS};
    int rc = route_svc_new(&nd->svc, &o, on_ready, nd);
    KVM_ASSERT(rc == 0);
    return nd;
}

static void rp_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    rp_t *rp = ctx;
    rp_node_t *nd = state;
    nd->stopping = true;
    env_timer_cancel(nd->env, nd->kick_timer);
    env_timer_cancel(nd->env, nd->expiry_timer);
    route_svc_free(nd->svc); /* pending calls complete with ECANCELED */
    nd->svc = NULL;
    free(nd->tasks);
    free(nd);
    /* the owner's memory goes with it */
    memset(rp->slots[node], 0, sizeof(rp->slots[node]));
    (void)sim;
}

/* ---- faults --------------------------------------------------------------------------------- */

static void drop_victim(void *arg)
{
    rp_t *rp = arg;
    if (!sim_node_up(rp->sim, rp->victim)) {
        rp->in_members[rp->victim] = false;
        push_members(rp, true);
    }
}

static void restart_victim(void *arg)
{
    rp_t *rp = arg;
    if (!sim_node_up(rp->sim, rp->victim)) {
        sim_restart(rp->sim, rp->victim);
        rp->in_members[rp->victim] = true;
        push_members(rp, true);
    }
}

static void kill_victim(void *arg)
{
    rp_t *rp = arg;
    sim_log(rp->sim, "crash n%u", rp->victim);
    sim_crash(rp->sim, rp->victim);
    /* membership notices after its lease expired */
    sim_schedule(rp->sim, (RP_LEASE_MS + sim_rand_range(rp->sim, 50, 300)) * SIM_MSG_NS,
                 drop_victim, rp);
    sim_schedule(rp->sim, sim_rand_range(rp->sim, 2500, 4500) * SIM_MSG_NS, restart_victim, rp);
}

/* ---- final checks --------------------------------------------------------------------------- */

typedef struct rp_fin {
    rp_t *rp;
    uint32_t key;
} rp_fin_t;

static void on_final(void *arg, int rc, const kvm_route_t *r)
{
    rp_fin_t *f = arg;
    rp_t *rp = f->rp;
    rp->final_rc[f->key] = rc;
    kvm_route_free(&rp->final_route[f->key]);
    if (rc == 0)
        KVM_ASSERT(kvm_route_copy(&rp->final_route[f->key], r) == 0);
    rp->final_pending--;
}

static bool final_done(void *ctx)
{
    rp_t *rp = ctx;
    return rp->final_pending == 0;
}

/* Looks every key up (from node 0, up in the final phase). */
static bool final_lookups(rp_t *rp)
{
    for (uint32_t k = 0; k < RP_KEYS; k++) {
        rp->final_rc[k] = KVMESH_ETIMEDOUT;
        rp_fin_t *f = rp_alloc(rp, sizeof(*f));
        f->key = k;
        f->rp = rp;
        rp_node_t *nd = node_ready(rp, 0);
        if (!nd)
            return false;
        rp->final_pending++;
        if (route_lookup(nd->svc, &rp->keys[k], on_final, f) != 0) {
            rp->final_pending--;
            return false;
        }
    }
    sim_run_while_not(rp->sim, final_done, rp, sim_now(rp->sim) + 3 * SIM_SEC_NS);
    return rp->final_pending == 0;
}

/* Whether every live route has RP_R replicas on distinct owners, all live in the full view. */
static bool restored(rp_t *rp, char *why, size_t cap)
{
    for (uint32_t k = 0; k < RP_KEYS; k++) {
        int rc = rp->final_rc[k];
        if (rc == KVMESH_ENOENT)
            continue;
        if (rc != 0) {
            snprintf(why, cap, "k%u: final lookup %s", k, kvmesh_errname(rc));
            return false;
        }
        const kvm_route_t *r = &rp->final_route[k];
        if (kvm_route_is_tombstone(r))
            continue;
        uint32_t live = 0;
        for (uint32_t i = 0; i < r->n_replicas; i++) {
            int o = node_of(rp, &r->replicas[i].owner);
            if (o >= 0 && rp->in_members[o] && rp->epoch[o] == r->replicas[i].segment &&
                sim_node_up(rp->sim, (uint32_t)o))
                live++;
            for (uint32_t j = 0; j < i; j++)
                if (kvm_id128_equal(&r->replicas[i].owner, &r->replicas[j].owner)) {
                    snprintf(why, cap, "k%u: two replicas on n%d", k, o);
                    return false;
                }
        }
        if (live != RP_R || r->n_replicas != RP_R) {
            snprintf(why, cap, "k%u: %u replicas, %u live (want %u)", k, r->n_replicas, live, RP_R);
            return false;
        }
    }
    return true;
}

static void check_leaks(rp_t *rp)
{
    for (uint32_t o = 0; o < rp->n && !sim_failed(rp->sim); o++) {
        for (uint32_t s = 0; s < RP_SLOTS; s++) {
            rp_slot_t *sl = &rp->slots[o][s];
            if (sl->state == SL_FREE)
                continue;
            if (sl->state == SL_RESERVED) {
                sim_fail(rp->sim,
                         "leaked replica: n%u slot %u (k%u, %s, holder n%u) is still reserved "
                         "after the faults stopped and expiry ran",
                         o, s, sl->key, sl->origin == SO_REPAIR ? "repair copy" : "write",
                         sl->holder);
                return;
            }
            const kvm_route_t *r = &rp->final_route[sl->key];
            kvm_hot_replica_t me = rep_at(o, sl->epoch, s, sl->value);
            bool listed = rp->final_rc[sl->key] == 0 && kvm_route_find_replica(r, &me) >= 0;
            if (!listed && !rp->key_indet[sl->key]) {
                sim_fail(rp->sim,
                         "leaked replica: n%u slot %u holds k%u v%llu, committed, but the final "
                         "route does not list it",
                         o, s, sl->key, (unsigned long long)sl->value);
                return;
            }
        }
    }
    for (uint32_t k = 0; k < RP_KEYS && !sim_failed(rp->sim); k++) {
        if (rp->final_rc[k] != 0)
            continue;
        const kvm_route_t *r = &rp->final_route[k];
        for (uint32_t i = 0; i < r->n_replicas; i++) {
            rp_slot_t *sl = slot_of(rp, &r->replicas[i]);
            if (!sl || sl->state != SL_COMMITTED || csum(sl->value) != r->checksum) {
                sim_fail(rp->sim,
                         "k%u: the final route's replica %u (n%d slot %llu) is not a committed "
                         "slot holding its value",
                         k, i, node_of(rp, &r->replicas[i].owner),
                         (unsigned long long)r->replicas[i].offset);
                return;
            }
        }
    }
}

/* ---- run ------------------------------------------------------------------------------------ */

static int rp_run(const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    rp_t *rp = calloc(1, sizeof(*rp));
    KVM_ASSERT(rp != NULL);
    rp->ro = ro;
    if (strcmp(v, "blind_cas") == 0)
        rp->blind_cas = true;
    else if (strcmp(v, "no_reclaim") == 0)
        rp->no_reclaim = true;
    else if (strcmp(v, "no_own_check") == 0)
        rp->no_own_check = true;
    else if (*v) {
        free(rp);
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (repair_race knows blind_cas, no_reclaim, no_own_check)", v);
        return 1;
    }
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    rp->n = 4 + (uint32_t)(ro->seed % 2);
    rp->shards = 2;
    rp->k = 2 + (uint32_t)((ro->seed / 2) % 2);
    cfg.n_nodes = rp->n;
    cfg.clock_drift_max_ppm = 10000;
    cfg.clock_skew_max_ms = 200;
    cfg.max_steps = 50000000;
    snprintf(rp->url, sizeof(rp->url), "memory://repair%llu", (unsigned long long)ro->seed);
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    rp->sim = sim;
    sim_set_net(sim, &(sim_net_t){.delay_min_ns = SIM_MSG_NS,
                                  .delay_max_ns = 5 * SIM_MSG_NS,
                                  .drop_p = 0.01,
                                  .dup_p = 0.01,
                                  .reorder_p = 0.02,
                                  .reorder_max_ns = 10 * SIM_MSG_NS});
    int rc = meta_open(&rp->world_m, sim_world_env(sim), rp->url, NULL);
    KVM_ASSERT(rc == 0);
    for (uint32_t i = 0; i < rp->n; i++) {
        rc = meta_open(&rp->node_m[i], sim_world_env(sim), rp->url, NULL);
        KVM_ASSERT(rc == 0);
        meta_memory_set_faults(rp->node_m[i],
                               &(meta_memory_faults_t){.latency_min_ms = 1, .latency_max_ms = 8});
        rp->in_members[i] = true;
        rp->epoch[i] = 1;
    }
    for (uint32_t k = 0; k < RP_KEYS; k++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "r%u", k);
        rc = kvm_ident_init(&rp->keys[k], "tenant", NULL, key, (size_t)len);
        KVM_ASSERT(rc == 0);
        kvm_route_init(&rp->final_route[k]);
    }
    sim_set_node_hooks(sim, rp_start, rp_stop, rp);
    sim_start(sim);
    push_members(rp, false);
    rp->writing = true;
    rp->victim = (uint32_t)sim_rand_range(sim, 0, rp->n - 1);
    sim_schedule(sim, 100 * SIM_MSG_NS, writer_tick, rp);
    sim_schedule(sim, 100 * SIM_MSG_NS, reader_tick, rp);
    sim_schedule(sim, sim_rand_range(sim, 1200, 2500) * SIM_MSG_NS, kill_victim, rp);
    sim_run_until(sim, (uint64_t)RP_FAULT_S * ro->soak * SIM_SEC_NS);
    if (sim_failed(sim))
        goto out;
    /* heal: writers stop, the victim is back (new epoch), full membership, quiet network */
    rp->writing = false;
    sim_set_net(sim, &(sim_net_t){.delay_min_ns = SIM_MSG_NS, .delay_max_ns = 5 * SIM_MSG_NS});
    if (!sim_node_up(sim, rp->victim))
        sim_restart(sim, rp->victim);
    for (uint32_t i = 0; i < rp->n; i++)
        rp->in_members[i] = true;
    push_members(rp, false);
    uint64_t heal = sim_now(sim);
    char why[160] = "no final lookup";
    bool ok = false;
    while (!sim_failed(sim) && sim_now(sim) < heal + RP_CONVERGE_S * SIM_SEC_NS) {
        sim_run_for(sim, 500 * SIM_MSG_NS);
        bool busy = false;
        for (uint32_t k = 0; k < RP_KEYS; k++)
            busy |= rp->key_busy[k];
        if (busy || !final_lookups(rp))
            continue;
        if ((ok = restored(rp, why, sizeof(why))))
            break;
    }
    if (!sim_failed(sim) && !ok) {
        sim_fail(sim, "replica count not restored within %d s of healing: %s", RP_CONVERGE_S, why);
        goto out;
    }
    /* reservations kept or orphaned settle within the expiry (+ a sweep), then no slot leaks */
    sim_run_for(sim, (RP_EXPIRY_MS + 1500) * SIM_MSG_NS);
    if (!sim_failed(sim) && final_lookups(rp))
        check_leaks(rp);
    else if (!sim_failed(sim))
        sim_fail(sim, "final lookups did not complete");
out:
    sim_log(sim,
            "reads %llu (checked %llu), puts %llu, deletes %llu, copies %llu: published %llu, "
            "superseded %llu, kept %llu, reclaimed %llu; expiry freed %llu, committed %llu",
            (unsigned long long)rp->reads, (unsigned long long)rp->reads_checked,
            (unsigned long long)rp->writes_ok, (unsigned long long)rp->deletes_ok,
            (unsigned long long)rp->copies, (unsigned long long)rp->published,
            (unsigned long long)rp->superseded, (unsigned long long)rp->kept,
            (unsigned long long)rp->reclaimed, (unsigned long long)rp->expiry_freed,
            (unsigned long long)rp->expiry_committed);
    for (uint32_t i = 0; i < rp->n; i++)
        sim_crash(sim, i);
    for (uint32_t i = 0; i < rp->n; i++)
        meta_close(rp->node_m[i]);
    meta_close(rp->world_m);
    int out = sim_finish(sim, res);
    for (size_t i = 0; i < rp->n_tasks; i++)
        kvm_route_free(&rp->all_tasks[i]->snap);
    free(rp->all_tasks);
    for (size_t i = 0; i < rp->n_allocs; i++)
        free(rp->allocs[i]);
    free(rp->allocs);
    for (uint32_t k = 0; k < RP_KEYS; k++) {
        kvm_ident_free(&rp->keys[k]);
        kvm_route_free(&rp->final_route[k]);
    }
    free(rp);
    return out;
}

const sim_scenario_t scen_repair_race = {
    .name = "repair_race",
    .description = "re-replication after an owner death racing overwrites and deletes: no "
                   "resurrected value, no leaked replica, replica count restored",
    .run = rp_run};
