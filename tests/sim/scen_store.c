/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_store.c — the storage owner's slot protocol (src/store/slot_core.h) in the simulator:
 * every owner node runs the real slot core; the scenario is its shell (write grants, route
 * lookups and the eviction CAS against a scenario-owned route table, the housekeeping timer)
 * and the clients around it (writers, readers, a segment drain). docs/store.md "Owner slot
 * core" lists the scenarios and what they show.
 *
 * Model:
 *   - routes: one authoritative table (key -> version, content op, replicas); a replica names
 *     (owner node, epoch, segment, offset). An owner's epoch is its incarnation: a restart
 *     starts empty with a new epoch, and the replicas of its old epochs are dead;
 *   - a writer: looks the route up, reserves on 1-2 owners (RPC delays), writes its op id into
 *     the reserved bytes through the write grant (refused once revoked or past its TTL), sends
 *     its route CAS (applied only if it arrives before the writer's deadline, half the TTL —
 *     the fenced primary's bound — and the version did not move), then commits the new slots and
 *     releases the replaced ones. Writers crash before the CAS, CAS answers come late
 *     (ST_ROUTE_NOTE_MAX_MS), commits come late (ST_LATE_MAX_MS: after the TTL and past the
 *     reclaim grace), commits and the releases of a writer's own reservations are delivered
 *     twice (the copy up to ST_LATE_MAX_MS later, when the bytes may hold a later slot) and
 *     commits get lost: held reservations are settled by the owner's exact lookup. A note
 *     names its slot as the store's does (slot_note_t): a writer's own reservation by its
 *     write-grant token, a replica known from a route by its object (key and length);
 *   - a reader: looks the route up, picks a live replica and reads it for up to READ_MAX
 *     (< the reclaim grace): every byte must still carry the route's content op;
 *   - eviction: the owner's lookup and route CAS removing its replica (the route disappears with
 *     its last replica);
 *   - drain: an owner's segment retires; the real drain core (src/store/drain_core.h) moves every
 *     committed slot in it (reserve elsewhere, copy, CAS replacing the replica, commit, release;
 *     CASes refused or answered indeterminate at random) in runs until the segment can be
 *     removed.
 *
 * Checkers: at every free (the core's freed effect), no route references the slot and no read
 * of it is in flight; every read sees its content op; every 32 steps each core's own invariants
 * (slot_core_check: queues, held count, allocator accounting: used bytes = live slots); after
 * quiescence no slot is RESERVED / HELD, no waiter or eviction is left, every COMMITTED slot is
 * referenced by a route (no leak) and every live replica of a route is a COMMITTED slot of that
 * key; a drained segment was removed.
 *
 * Broken variants (--variant): no_grace, free_held, evict_no_cas, remove_undrained, no_token
 * (enum slot_bug), release_early (enum drain_bug: the drain core releases the old replica before
 * its route CAS applied).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"
#include "core/ident.h"
#include "core/util.h"
#include "sim.h"
#include "store/drain_core.h"
#include "store/slot_core.h"

#define ST_MAX_OWNERS 4
#define ST_MAX_SEGS   2
#define ST_MAX_KEYS   32
#define ST_MAX_REP    2
#define ST_WRITERS    4
#define ST_READERS    3
#define ST_UNIT       64ull
#define ST_MS         1000000ull
#define ST_TICK       (20 * ST_MS)
#define ST_GRACE      (200 * ST_MS)
#define ST_DEADLINE   (150 * ST_MS) /* a writer's request deadline; its CAS applies before it */
#define ST_TTL_MS     300           /* reservation TTL: twice the deadline (store.h) */
#define ST_READ_MAX   (60 * ST_MS)  /* a read ends this long after its lookup at most */
#define ST_END        (60ull * SIM_SEC_NS)
#define ST_DRAIN_PAGE 4 /* replicas per drain listing: a segment takes several pages */
/* A note that names its slot by the write-grant token may arrive any time later: a late commit
 * and a late copy of a commit or of a writer's own release take up to ST_LATE_MAX_MS, beyond
 * the TTL and the reclaim grace. A late CAS answer (which carries the releases of the replaced
 * replicas, known from the route and named by their object only) takes at most
 * ST_ROUTE_NOTE_MAX_MS: a route-only release delayed past the grace could still reach a later
 * committed slot of the same key and length at the same bytes (docs/store.md "Slot identity in
 * COMMIT and RELEASE"). */
#define ST_ROUTE_NOTE_MAX_MS 80
#define ST_LATE_MAX_MS       (4 * ST_GRACE / ST_MS)

enum st_mode { M_EXPIRY, M_OVERWRITE, M_EVICT, M_DEATH, M_DRAIN };

typedef struct srep {
    uint32_t owner, epoch;
    uint64_t seg, off, len;
} srep_t;

typedef struct sroute {
    bool present;
    uint64_t version, content;
    uint32_t n;
    srep_t r[ST_MAX_REP];
} sroute_t;

typedef struct st st_t;

typedef struct sgrant {
    uint32_t segi;
    uint64_t off, len, expires;
    bool revoked;
} sgrant_t;

typedef struct sowner {
    st_t *t;
    uint32_t node, epoch;
    slot_core_t *core;
    uint64_t seg_id[ST_MAX_SEGS];
    uint64_t *stamp[ST_MAX_SEGS]; /* content op per ST_UNIT bytes */
    sgrant_t *grants;
    size_t n_grants, cap_grants;
} sowner_t;

/* Every message of a run (freed at its end: a message to a crashed node is dropped unrun). */
typedef struct smsg {
    struct smsg *all;
    st_t *t;
    uint32_t node, epoch, writer, attempt, key, idx;
    slot_t *slot;
    enum slot_lookup_why why;
    srep_t rep;
    srep_t old[ST_MAX_REP]; /* a CAS answer: the replaced replicas */
    uint32_t n_old;
    slot_note_t note; /* a commit or release: the slot's identity */
    uint64_t version, token;
    int rc;
    enum slot_answer ans;
} smsg_t;

enum wphase { W_IDLE, W_RESERVING, W_CAS, W_DONE };

typedef struct swriter {
    uint32_t id, attempt, ops_left;
    enum wphase phase;
    uint32_t key, want, answered;
    bool failed;
    uint64_t op, len, start, expect;
    srep_t res[ST_MAX_REP];
    uint64_t token[ST_MAX_REP];
} swriter_t;

typedef struct sread {
    bool active;
    srep_t rep;
    uint64_t content, end;
} sread_t;

typedef struct sditem {
    srep_t from, to;
    uint32_t key;
    uint64_t token; /* the new slot's write grant */
} sditem_t;

/* The drain: runs of the drain core (one at a time) until the segment is removed. */
typedef struct sdrain {
    bool started, removed;
    uint32_t owner, epoch, runs, n;
    uint64_t seg, moved, failed;
    drain_core_t *core;          /* the current run's; NULL between runs */
    sditem_t it[DRAIN_PAGE_MAX]; /* the current page */
} sdrain_t;

struct st {
    sim_t *sim;
    enum st_mode mode;
    unsigned bugs, drain_bugs; /* enum slot_bug, enum drain_bug */
    uint32_t n_owners, n_keys, n_segs;
    uint64_t seg_size;
    double p_wcrash, p_slow_cas, p_slow_answer, p_commit_lost, p_slow_commit, p_unknown, p_dup;
    double p_refuse; /* a drain CAS refused */
    double evict_high, evict_low;
    sroute_t routes[ST_MAX_KEYS];
    uint64_t next_version, next_op;
    swriter_t w[ST_WRITERS];
    uint32_t readers_left[ST_READERS];
    sread_t reads[ST_READERS];
    uint32_t writers_done, readers_done;
    sdrain_t drain;
    smsg_t *msgs;
    uint64_t reads_ok, frees, held_settled, evictions;
};

/* ---- helpers -------------------------------------------------------------------------------- */

static smsg_t *msg_new(st_t *t)
{
    smsg_t *m = calloc(1, sizeof(*m));
    KVM_ASSERT(m != NULL);
    m->t = t;
    m->all = t->msgs;
    t->msgs = m;
    return m;
}

static uint64_t delay(st_t *t)
{
    return sim_rand_range(t->sim, ST_MS / 2, 5 * ST_MS);
}

static sowner_t *owner_of(st_t *t, uint32_t node)
{
    return sim_node_up(t->sim, node) ? sim_node_state(t->sim, node) : NULL;
}

/* The owner node at epoch, when it is up in that epoch. */
static sowner_t *owner_at(st_t *t, uint32_t node, uint32_t epoch)
{
    sowner_t *o = owner_of(t, node);
    return o && o->epoch == epoch ? o : NULL;
}

static uint32_t key_of(const kvm_ident_t *id)
{
    char buf[16] = "";
    memcpy(buf, kvm_ident_key(id), id->key_len < 15 ? id->key_len : 15);
    return (uint32_t)strtoul(buf + 1, NULL, 10);
}

static uint32_t slot_key(const slot_t *s)
{
    kvm_ident_t id = slot_ident(s);
    return key_of(&id);
}

static void ident_of(uint32_t key, kvm_ident_t *id)
{
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "k%u", key);
    int rc = kvm_ident_init(id, "sim", NULL, buf, (size_t)n);
    KVM_ASSERT(rc == 0);
}

static bool rep_eq(const srep_t *a, const srep_t *b)
{
    return a->owner == b->owner && a->epoch == b->epoch && a->seg == b->seg && a->off == b->off;
}

static int route_find(const sroute_t *r, const srep_t *rep)
{
    for (uint32_t i = 0; r->present && i < r->n; i++)
        if (rep_eq(&r->r[i], rep))
            return (int)i;
    return -1;
}

static srep_t rep_of(const sowner_t *o, const slot_t *s)
{
    return (srep_t){o->node, o->epoch, o->seg_id[s->segi], slot_off(s), s->len};
}

static void stamp(sowner_t *o, uint32_t segi, uint64_t off, uint64_t len, uint64_t v)
{
    for (uint64_t u = off / ST_UNIT; u < (off + len + ST_UNIT - 1) / ST_UNIT; u++)
        o->stamp[segi][u] = v;
}

static bool stamped(const sowner_t *o, uint32_t segi, uint64_t off, uint64_t len, uint64_t v)
{
    for (uint64_t u = off / ST_UNIT; u < (off + len + ST_UNIT - 1) / ST_UNIT; u++)
        if (o->stamp[segi][u] != v)
            return false;
    return true;
}

static int segi_of(const sowner_t *o, uint64_t seg)
{
    return slot_core_seg_find(o->core, seg);
}

/* ---- the owner's effects (the shell) ------------------------------------------------------- */

static int fx_grant(void *ctx, uint32_t segi, uint64_t off, uint64_t len, uint32_t ttl_ms,
                    uint64_t *token)
{
    sowner_t *o = ctx;
    if (o->n_grants == o->cap_grants) {
        size_t nc = o->cap_grants ? 2 * o->cap_grants : 64;
        sgrant_t *g = realloc(o->grants, nc * sizeof(*g));
        KVM_ASSERT(g != NULL);
        o->grants = g;
        o->cap_grants = nc;
    }
    o->grants[o->n_grants] = (sgrant_t){segi, off, len, sim_now(o->t->sim) + ttl_ms * ST_MS, 0};
    *token = ++o->n_grants;
    return 0;
}

static void fx_revoke(void *ctx, uint64_t token)
{
    sowner_t *o = ctx;
    KVM_ASSERT(token >= 1 && token <= o->n_grants);
    o->grants[token - 1].revoked = true;
}

static void fx_freed(void *ctx, const slot_t *s)
{
    sowner_t *o = ctx;
    st_t *t = o->t;
    srep_t rep = rep_of(o, s);
    t->frees++;
    sim_log(t->sim, "n%u/e%u frees seg %" PRIu64 " off %" PRIu64 " (key %u)", o->node, o->epoch,
            rep.seg, rep.off, slot_key(s));
    for (uint32_t k = 0; k < t->n_keys; k++)
        if (route_find(&t->routes[k], &rep) >= 0)
            sim_fail(t->sim,
                     "owner n%u/e%u frees seg %" PRIu64 " off %" PRIu64
                     " while the route of key %u (v%" PRIu64 ") references it",
                     o->node, o->epoch, rep.seg, rep.off, k, t->routes[k].version);
    for (uint32_t i = 0; i < ST_READERS; i++)
        if (t->reads[i].active && rep_eq(&t->reads[i].rep, &rep))
            sim_fail(t->sim,
                     "owner n%u/e%u frees seg %" PRIu64 " off %" PRIu64
                     " while reader %u (started before its release) reads it",
                     o->node, o->epoch, rep.seg, rep.off, i);
    uint32_t segi = s->segi;
    stamp(o, segi, slot_off(s), s->len, 0);
}

static void lookup_arrive(void *arg);

static int fx_lookup(void *ctx, slot_t *s, enum slot_lookup_why why)
{
    sowner_t *o = ctx;
    st_t *t = o->t;
    smsg_t *m = msg_new(t);
    m->node = o->node;
    m->epoch = o->epoch;
    m->slot = s;
    m->why = why;
    m->key = slot_key(s);
    m->rep = rep_of(o, s);
    sim_schedule(t->sim, delay(t), lookup_arrive, m);
    return 0;
}

/* The further check of a held slot (slot_effects_t.held_check; the store's is the put
 * replay's quota operation record): answered later, KEEP or REREAD at random. */
static void check_answer(void *arg)
{
    smsg_t *m = arg;
    sowner_t *o = owner_at(m->t, m->node, m->epoch);
    KVM_ASSERT(o != NULL);
    sim_log(m->t->sim, "n%u held check: %s", m->node, m->rc ? "keep" : "reread");
    slot_core_held_check_answer(o->core, sim_now(m->t->sim), m->slot,
                                m->rc ? SLOT_CHECK_KEEP : SLOT_CHECK_REREAD);
}

static int fx_held_check(void *ctx, slot_t *s)
{
    sowner_t *o = ctx;
    st_t *t = o->t;
    if (sim_chance(t->sim, 0.1))
        return KVMESH_EUNAVAILABLE; /* not started: kept held */
    smsg_t *m = msg_new(t);
    m->node = o->node;
    m->epoch = o->epoch;
    m->slot = s;
    m->rc = sim_chance(t->sim, 0.3);
    sim_schedule_on(t->sim, o->node, delay(t), check_answer, m);
    return 0;
}

static void owner_tick(void *arg)
{
    sowner_t *o = arg;
    slot_core_tick(o->core, sim_now(o->t->sim));
    sim_schedule_on(o->t->sim, o->node, ST_TICK, owner_tick, o);
}

static const slot_effects_t st_fx = {
    .grant = fx_grant,
    .revoke = fx_revoke,
    .lookup = fx_lookup,
    .freed = fx_freed,
};

static void *st_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    (void)env;
    st_t *t = ctx;
    sowner_t *o = calloc(1, sizeof(*o));
    KVM_ASSERT(o != NULL);
    o->t = t;
    o->node = node;
    o->epoch = sim_node_incarnation(sim, node);
    slot_core_cfg_t cfg = {
        .name = "sim",
        .reclaim_grace_ns = ST_GRACE,
        .evict_high = t->evict_high,
        .evict_low = t->evict_low,
        .wait_timeout_ns = ST_DEADLINE / 2,
        .held_retry_ns = 100 * ST_MS,
        .tick_budget = 256,
        .evict_inflight_max = 8,
        .wait_max = 16,
    };
    slot_effects_t fx = st_fx;
    if (t->mode == M_EXPIRY || t->mode == M_DEATH)
        fx.held_check = fx_held_check;
    int rc = slot_core_new(&cfg, &fx, o, &o->core);
    KVM_ASSERT(rc == 0);
    slot_core_test_set_bugs(o->core, t->bugs);
    for (uint32_t i = 0; i < t->n_segs; i++) {
        uint32_t segi = 0;
        o->seg_id[i] = 100 * (uint64_t)o->epoch + i + 1;
        rc = slot_core_seg_add(o->core, o->seg_id[i], t->seg_size, &segi);
        KVM_ASSERT(rc == 0 && segi == i);
        o->stamp[i] = calloc(t->seg_size / ST_UNIT, sizeof(uint64_t));
        KVM_ASSERT(o->stamp[i] != NULL);
    }
    sim_schedule_on(sim, node, ST_TICK, owner_tick, o);
    return o;
}

static void st_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    (void)ctx, (void)sim, (void)node;
    sowner_t *o = state;
    slot_core_free(o->core); /* its waiters are never answered: their writers time out */
    for (uint32_t i = 0; i < ST_MAX_SEGS; i++)
        free(o->stamp[i]);
    free(o->grants);
    free(o);
}

/* ---- owner lookups and the eviction CAS (answered on the owner node) ----------------------- */

static void lookup_answer(void *arg)
{
    smsg_t *m = arg;
    sowner_t *o = owner_at(m->t, m->node, m->epoch);
    KVM_ASSERT(o != NULL); /* (scheduled on the node: dropped when it crashed) */
    uint64_t now = sim_now(m->t->sim);
    sim_log(m->t->sim, "n%u %s lookup seg %" PRIu64 " off %" PRIu64 " key %u: answer %d", m->node,
            m->why == SLOT_LOOKUP_EXPIRY ? "held" : "evict", m->rep.seg, m->rep.off, m->key,
            (int)m->ans);
    if (m->why == SLOT_LOOKUP_EXPIRY) {
        slot_settle_in_t in = {.route = m->ans};
        if (slot_core_held_answer(o->core, now, m->slot, &in) != SLOT_SETTLE_KEEP)
            m->t->held_settled++;
        return;
    }
    if (slot_core_evict_answer(o->core, now, m->slot, m->ans) == SLOT_EVICT_DONE)
        return;
    /* the eviction CAS: remove this replica from the version looked up */
    smsg_t *c = msg_new(m->t), *link = c->all;
    *c = *m;
    c->all = link;
    c->why = SLOT_LOOKUP_EVICT;
    c->rc = 1; /* a CAS */
    sim_schedule(m->t->sim, delay(m->t), lookup_arrive, c);
}

static void evict_answer(void *arg)
{
    smsg_t *m = arg;
    sowner_t *o = owner_at(m->t, m->node, m->epoch);
    KVM_ASSERT(o != NULL);
    slot_core_evict_end(o->core, sim_now(m->t->sim), m->slot,
                        m->ans == SLOT_ANS_REFERENCED ? SLOT_EVICT_REMOVED : SLOT_EVICT_CONFLICT);
}

/* At the route authority: a lookup (rc 0) or an eviction CAS (rc 1). */
static void lookup_arrive(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    sroute_t *r = &t->routes[m->key];
    if (m->rc == 1) { /* CAS: applied when the route is still the one looked up */
        int i = route_find(r, &m->rep);
        bool ok = i >= 0 && r->version == m->version;
        sim_log(t->sim, "evict CAS key %u n%u seg %" PRIu64 " off %" PRIu64 ": %s", m->key, m->node,
                m->rep.seg, m->rep.off, ok ? "applied" : "conflict");
        if (ok) {
            r->r[i] = r->r[--r->n];
            r->version = ++t->next_version;
            r->present = r->n > 0; /* the last replica: the object leaves the cache */
            t->evictions++;
        }
        m->ans = ok ? SLOT_ANS_REFERENCED : SLOT_ANS_UNREFERENCED;
        sim_schedule_on(t->sim, m->node, delay(t), evict_answer, m);
        return;
    }
    if (sim_chance(t->sim, t->p_unknown))
        m->ans = SLOT_ANS_UNKNOWN;
    else if (!r->present)
        m->ans = SLOT_ANS_ABSENT;
    else
        m->ans = route_find(r, &m->rep) >= 0 ? SLOT_ANS_REFERENCED : SLOT_ANS_UNREFERENCED;
    m->version = r->version;
    sim_schedule_on(t->sim, m->node, delay(t), lookup_answer, m);
}

/* ---- commit, release, hit (notifications to an owner) -------------------------------------- */

static void owner_note(void *arg)
{
    smsg_t *m = arg;
    sowner_t *o = owner_at(m->t, m->node, m->epoch);
    KVM_ASSERT(o != NULL);
    uint64_t now = sim_now(m->t->sim);
    if (m->rc != 2)
        sim_log(m->t->sim, "n%u/e%u %s seg %" PRIu64 " off %" PRIu64, m->node, m->epoch,
                m->rc == 0 ? "commit" : "release", m->rep.seg, m->rep.off);
    if (m->rc == 0)
        (void)slot_core_commit_note(o->core, now, m->rep.seg, m->rep.off, &m->note);
    else if (m->rc == 1)
        (void)slot_core_release_note(o->core, now, m->rep.seg, m->rep.off, &m->note);
    else
        slot_core_hit(o->core, m->rep.seg, m->rep.off);
}

/* kind: 0 commit, 1 release, 2 hit; only to the replica's owner in the replica's epoch. token:
 * the write grant of the sender's own reservation (0: a replica known from a route, named by its
 * object). A note with a token is sometimes delivered twice, the copy much later. */
static void note_send(st_t *t, const srep_t *rep, int kind, uint64_t d, uint32_t key,
                      uint64_t token)
{
    if (!owner_at(t, rep->owner, rep->epoch))
        return; /* a dead epoch: its slots died with it */
    smsg_t *m = msg_new(t);
    m->node = rep->owner;
    m->epoch = rep->epoch;
    m->rep = *rep;
    m->rc = kind;
    kvm_ident_t id;
    ident_of(key, &id);
    m->note = (slot_note_t){SLOT_NOTE_OBJECT, 0, id.hash, rep->len};
    kvm_ident_free(&id);
    if (token) {
        m->note.has |= SLOT_NOTE_TOKEN;
        m->note.token = token;
    }
    sim_schedule_on(t->sim, rep->owner, d, owner_note, m);
    if (kind != 2 && token && sim_chance(t->sim, t->p_dup)) {
        smsg_t *c = msg_new(t);
        smsg_t *keep = c->all;
        *c = *m;
        c->all = keep;
        sim_schedule_on(t->sim, rep->owner, d + sim_rand_range(t->sim, 20, ST_LATE_MAX_MS) * ST_MS,
                        owner_note, c);
    }
}

static void hit_send(st_t *t, const srep_t *rep, uint64_t d)
{
    if (!owner_at(t, rep->owner, rep->epoch))
        return;
    smsg_t *m = msg_new(t);
    m->node = rep->owner;
    m->epoch = rep->epoch;
    m->rep = *rep;
    m->rc = 2;
    sim_schedule_on(t->sim, rep->owner, d, owner_note, m);
}

/* ---- writers ------------------------------------------------------------------------------- */

static void writer_next(st_t *t, swriter_t *w);

static void writer_end(st_t *t, swriter_t *w, bool release)
{
    for (uint32_t i = 0; release && i < w->want; i++)
        if (w->res[i].len)
            note_send(t, &w->res[i], 1, delay(t), w->key, w->token[i]);
    w->phase = W_IDLE;
    w->attempt++;
    writer_next(t, w);
}

static void reserve_cb(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                       uint64_t token);
static void reserve_arrive(void *arg)
{
    smsg_t *m = arg;
    sowner_t *o = owner_at(m->t, m->node, m->epoch);
    KVM_ASSERT(o != NULL);
    kvm_ident_t id;
    ident_of(m->key, &id);
    slot_core_reserve(o->core, sim_now(m->t->sim), &id, m->rep.len, ST_TTL_MS, reserve_cb, m);
    kvm_ident_free(&id);
}

static void reserved_at_writer(void *arg);

static void reserve_cb(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                       uint64_t token)
{
    (void)err;
    smsg_t *m = arg;
    st_t *t = m->t;
    m->rc = rc;
    m->rep.seg = seg;
    m->rep.off = off;
    m->token = token;
    uint64_t d =
        sim_chance(t->sim, t->p_slow_answer) ? sim_rand_range(t->sim, 20, 200) * ST_MS : delay(t);
    sim_schedule(t->sim, d, reserved_at_writer, m);
}

static void writer_write(st_t *t, swriter_t *w);

static void reserved_at_writer(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    swriter_t *w = &t->w[m->writer];
    if (w->attempt != m->attempt || w->phase != W_RESERVING)
        return; /* a late answer: the reservation expires by its TTL */
    if (m->rc == 0) {
        w->res[m->idx] = m->rep;
        w->token[m->idx] = m->token;
    } else {
        w->failed = true;
    }
    if (++w->answered == w->want)
        writer_write(t, w);
}

static void writer_deadline(void *arg)
{
    smsg_t *m = arg;
    swriter_t *w = &m->t->w[m->writer];
    if (w->attempt == m->attempt && w->phase == W_RESERVING)
        writer_end(m->t, w, true); /* some reservation never answered */
}

/* Writes the op id through each write grant (the registry refuses a revoked or expired one). */
static bool grant_write(st_t *t, const srep_t *rep, uint64_t token, uint64_t v)
{
    sowner_t *o = owner_at(t, rep->owner, rep->epoch);
    if (!o || token == 0 || token > o->n_grants)
        return false;
    const sgrant_t *g = &o->grants[token - 1];
    if (g->revoked || sim_now(t->sim) >= g->expires)
        return false;
    int segi = segi_of(o, rep->seg);
    KVM_ASSERT(segi >= 0 && (uint32_t)segi == g->segi && g->off == rep->off);
    stamp(o, (uint32_t)segi, rep->off, rep->len, v);
    return true;
}

static void cas_arrive(void *arg);

static void writer_write(st_t *t, swriter_t *w)
{
    bool ok = !w->failed;
    for (uint32_t i = 0; ok && i < w->want; i++)
        ok = grant_write(t, &w->res[i], w->token[i], w->op);
    if (!ok) {
        writer_end(t, w, true);
        return;
    }
    if (sim_chance(t->sim, t->p_wcrash)) { /* the writer dies before its CAS */
        w->phase = W_IDLE;
        w->attempt++;
        writer_next(t, w);
        return;
    }
    w->phase = W_CAS;
    smsg_t *m = msg_new(t);
    m->writer = w->id;
    m->attempt = w->attempt;
    uint64_t d =
        sim_chance(t->sim, t->p_slow_cas) ? sim_rand_range(t->sim, 20, 250) * ST_MS : delay(t);
    sim_schedule(t->sim, d, cas_arrive, m);
}

static void cas_answer(void *arg);

static void cas_arrive(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    swriter_t *w = &t->w[m->writer];
    KVM_ASSERT(w->attempt == m->attempt && w->phase == W_CAS);
    sroute_t *r = &t->routes[w->key];
    uint64_t cur = r->present ? r->version : 0;
    m->rc = sim_now(t->sim) > w->start + ST_DEADLINE ? KVMESH_ETIMEDOUT
            : cur != w->expect                       ? KVMESH_ECONFLICT
                                                     : 0;
    sim_log(t->sim,
            "writer %u CAS key %u (%u replicas, first n%u seg %" PRIu64 " off %" PRIu64 "): rc %d",
            w->id, w->key, w->want, w->res[0].owner, w->res[0].seg, w->res[0].off, m->rc);
    if (m->rc == 0) { /* applied: the replaced replicas go back with the answer */
        m->n_old = r->present ? r->n : 0;
        memcpy(m->old, r->r, sizeof(m->old));
        r->present = true;
        r->version = ++t->next_version;
        r->content = w->op;
        r->n = w->want;
        memcpy(r->r, w->res, sizeof(r->r));
    }
    uint64_t d = sim_chance(t->sim, t->p_slow_answer)
                     ? sim_rand_range(t->sim, 20, ST_ROUTE_NOTE_MAX_MS) * ST_MS
                     : delay(t);
    sim_schedule(t->sim, d, cas_answer, m);
}

static void cas_answer(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    swriter_t *w = &t->w[m->writer];
    if (m->rc) {
        writer_end(t, w, true);
        return;
    }
    for (uint32_t i = 0; i < w->want; i++) {
        if (sim_chance(t->sim, t->p_commit_lost))
            continue; /* the held reservation's lookup commits it */
        uint64_t d = sim_chance(t->sim, t->p_slow_commit)
                         ? sim_rand_range(t->sim, 20, ST_LATE_MAX_MS) * ST_MS
                         : delay(t);
        note_send(t, &w->res[i], 0, d, w->key, w->token[i]);
    }
    for (uint32_t i = 0; i < m->n_old; i++) /* the replaced replicas (from the route): reclaim */
        note_send(t, &m->old[i], 1, delay(t), w->key, 0);
    w->phase = W_IDLE;
    w->attempt++;
    writer_next(t, w);
}

static void writer_start(void *arg)
{
    smsg_t *a = arg;
    st_t *t = a->t;
    swriter_t *w = &t->w[a->writer];
    if (w->ops_left == 0) {
        w->phase = W_DONE;
        t->writers_done++;
        return;
    }
    w->ops_left--;
    w->key = (uint32_t)sim_rand_range(t->sim, 0, t->n_keys - 1);
    const sroute_t *r = &t->routes[w->key];
    w->expect = r->present ? r->version : 0;
    w->op = ++t->next_op;
    w->len = sim_rand_range(t->sim, 1, t->seg_size / 8);
    w->start = sim_now(t->sim);
    w->answered = 0;
    w->failed = false;
    memset(w->res, 0, sizeof(w->res));
    memset(w->token, 0, sizeof(w->token));
    uint32_t up[ST_MAX_OWNERS], n_up = 0;
    for (uint32_t i = 0; i < t->n_owners; i++)
        if (owner_of(t, i))
            up[n_up++] = i;
    w->want = n_up < 2 ? n_up : (uint32_t)sim_rand_range(t->sim, 1, 2);
    if (w->want == 0) {
        writer_end(t, w, false);
        return;
    }
    w->phase = W_RESERVING;
    uint32_t first = (uint32_t)sim_rand_range(t->sim, 0, n_up - 1);
    for (uint32_t i = 0; i < w->want; i++) {
        sowner_t *o = owner_of(t, up[(first + i) % n_up]);
        smsg_t *m = msg_new(t);
        m->writer = w->id;
        m->attempt = w->attempt;
        m->idx = i;
        m->key = w->key;
        m->node = o->node;
        m->epoch = o->epoch;
        m->rep = (srep_t){o->node, o->epoch, 0, 0, w->len};
        sim_schedule_on(t->sim, o->node, delay(t), reserve_arrive, m);
    }
    smsg_t *d = msg_new(t);
    d->writer = w->id;
    d->attempt = w->attempt;
    sim_schedule(t->sim, ST_DEADLINE, writer_deadline, d);
}

static void writer_next(st_t *t, swriter_t *w)
{
    smsg_t *m = msg_new(t);
    m->writer = w->id;
    sim_schedule(t->sim, sim_rand_range(t->sim, 0, 20 * ST_MS), writer_start, m);
}

/* ---- readers ------------------------------------------------------------------------------- */

static void reader_next(st_t *t, uint32_t i);

static void read_end(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    sread_t *rd = &t->reads[m->idx];
    sowner_t *o = owner_at(t, rd->rep.owner, rd->rep.epoch);
    if (o) { /* (an owner that died meanwhile: a transport error, the reader retries) */
        int segi = segi_of(o, rd->rep.seg);
        if (segi < 0)
            sim_fail(t->sim, "reader %u: segment %" PRIu64 " of n%u was removed under its read",
                     m->idx, rd->rep.seg, o->node);
        else if (!stamped(o, (uint32_t)segi, rd->rep.off, rd->rep.len, rd->content))
            sim_fail(t->sim,
                     "reader %u: checksum failed reading n%u/e%u seg %" PRIu64 " off %" PRIu64
                     " (content op %" PRIu64 ") within the reclaim grace: bytes were reused",
                     m->idx, o->node, o->epoch, rd->rep.seg, rd->rep.off, rd->content);
        else
            t->reads_ok++;
    }
    rd->active = false;
    reader_next(t, m->idx);
}

static void reader_start(void *arg)
{
    smsg_t *a = arg;
    st_t *t = a->t;
    uint32_t i = a->idx;
    if (t->readers_left[i] == 0) {
        t->readers_done++;
        return;
    }
    t->readers_left[i]--;
    const sroute_t *r = &t->routes[sim_rand_range(t->sim, 0, t->n_keys - 1)];
    uint32_t live[ST_MAX_REP], n = 0;
    for (uint32_t k = 0; r->present && k < r->n; k++)
        if (owner_at(t, r->r[k].owner, r->r[k].epoch))
            live[n++] = k;
    if (n == 0) {
        reader_next(t, i);
        return;
    }
    sread_t *rd = &t->reads[i];
    rd->active = true;
    rd->rep = r->r[live[sim_rand_range(t->sim, 0, n - 1)]];
    rd->content = r->content;
    hit_send(t, &rd->rep, delay(t));
    smsg_t *m = msg_new(t);
    m->idx = i;
    sim_schedule(t->sim, sim_rand_range(t->sim, ST_MS, ST_READ_MAX), read_end, m);
}

static void reader_next(st_t *t, uint32_t i)
{
    smsg_t *m = msg_new(t);
    m->idx = i;
    sim_schedule(t->sim, sim_rand_range(t->sim, 0, 10 * ST_MS), reader_start, m);
}

/* ---- drain: the real drain core (store/drain_core.h) moves a retiring segment's slots ------- */

/* The drain's shell: the listing on the draining owner, reservations at a random owner, the copy
 * through the write grant, the route CAS at the scenario's route table, commits and releases as
 * notes, the writers period as a timer. A run that ends (whatever its rc) tries to remove the
 * segment; while slots are left there a new run starts (a retirement's retry). */

static sowner_t *drain_owner(st_t *t)
{
    sowner_t *o = owner_at(t, t->drain.owner, t->drain.epoch);
    KVM_ASSERT(o != NULL); /* (no owner dies in the drain scenario) */
    return o;
}

static smsg_t *drain_msg(st_t *t, uint32_t i)
{
    smsg_t *m = msg_new(t);
    m->attempt = t->drain.runs;
    m->idx = i;
    return m;
}

/* The answers of a run that ended are dropped (a run ends only once every item settled). */
static drain_core_t *drain_live(const smsg_t *m)
{
    const sdrain_t *dr = &m->t->drain;
    return dr->core && m->attempt == dr->runs ? dr->core : NULL;
}

static void drain_list_arrive(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    drain_core_t *c = drain_live(m);
    KVM_ASSERT(c != NULL);
    sowner_t *o = drain_owner(t);
    const slot_t *sel[DRAIN_PAGE_MAX];
    size_t n = slot_core_list(o->core, segi_of(o, t->drain.seg), m->version, sel, m->idx);
    uint64_t next = m->version;
    for (size_t i = 0; i < n; i++) {
        t->drain.it[i] = (sditem_t){.from = rep_of(o, sel[i]), .key = slot_key(sel[i])};
        next = KVM_MAX(next, sel[i]->seq);
    }
    t->drain.n = (uint32_t)n;
    sim_log(t->sim, "drain run %u lists %zu slots after %" PRIu64, t->drain.runs, n, m->version);
    drain_core_listed(c, sim_now(t->sim), 0, (uint32_t)n, next);
}

static void sfx_list(void *ctx, uint64_t cursor, uint32_t cap)
{
    st_t *t = ctx;
    smsg_t *m = drain_msg(t, cap);
    m->version = cursor;
    sim_schedule(t->sim, delay(t), drain_list_arrive, m);
}

static void drain_reserved_back(void *arg)
{
    smsg_t *m = arg;
    drain_core_t *c = drain_live(m);
    KVM_ASSERT(c != NULL);
    if (m->rc)
        sim_log(m->t->sim, "drain item %u: reserve failed: %d", m->idx, m->rc);
    drain_core_reserved(c, sim_now(m->t->sim), m->idx, m->rc);
}

static void drain_reserved_cb(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                              uint64_t token)
{
    (void)err;
    smsg_t *m = arg;
    sditem_t *it = &m->t->drain.it[m->idx];
    m->rc = rc;
    it->to.seg = seg;
    it->to.off = off;
    it->token = token;
    sim_schedule(m->t->sim, delay(m->t), drain_reserved_back, m);
}

static void drain_reserve_arrive(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    const sditem_t *it = &t->drain.it[m->idx];
    sowner_t *dst = owner_at(t, it->to.owner, it->to.epoch);
    KVM_ASSERT(dst != NULL);
    kvm_ident_t id;
    ident_of(it->key, &id);
    slot_core_reserve(dst->core, sim_now(t->sim), &id, it->from.len, ST_TTL_MS, drain_reserved_cb,
                      m);
    kvm_ident_free(&id);
}

static void sfx_reserve(void *ctx, uint32_t i)
{
    st_t *t = ctx;
    sditem_t *it = &t->drain.it[i];
    sowner_t *dst = owner_of(t, (uint32_t)sim_rand_range(t->sim, 0, t->n_owners - 1));
    KVM_ASSERT(dst != NULL);
    it->to = (srep_t){dst->node, dst->epoch, 0, 0, it->from.len};
    sim_schedule_on(t->sim, dst->node, delay(t), drain_reserve_arrive, drain_msg(t, i));
}

/* The copy: the source's bytes (one content op throughout) through the new slot's write grant. */
static void drain_copy(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    drain_core_t *c = drain_live(m);
    KVM_ASSERT(c != NULL);
    const sditem_t *it = &t->drain.it[m->idx];
    sowner_t *src = owner_at(t, it->from.owner, it->from.epoch);
    int segi = src ? segi_of(src, it->from.seg) : -1;
    uint64_t v = segi >= 0 ? src->stamp[segi][it->from.off / ST_UNIT] : 0;
    bool ok = v && stamped(src, (uint32_t)segi, it->from.off, it->from.len, v) &&
              grant_write(t, &it->to, it->token, v);
    if (!ok)
        sim_log(t->sim, "drain item %u: copy failed (source content %" PRIu64 ")", m->idx, v);
    drain_core_copied(c, sim_now(t->sim), m->idx, ok ? 0 : KVMESH_EIO);
}

static void sfx_copy(void *ctx, uint32_t i)
{
    st_t *t = ctx;
    sim_schedule(t->sim, delay(t), drain_copy, drain_msg(t, i));
}

static void drain_cas_back(void *arg)
{
    smsg_t *m = arg;
    drain_core_t *c = drain_live(m);
    KVM_ASSERT(c != NULL);
    drain_core_cas_answer(c, sim_now(m->t->sim), m->idx, (enum drain_cas)m->rc);
}

/* At the route authority: replace the old replica by the new one (the handoff's CAS); refused
 * at random (a conflict the runtime's retries did not resolve); the answer may be lost
 * (indeterminate) whether it applied or not. */
static void drain_cas_arrive(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    const sditem_t *it = &t->drain.it[m->idx];
    sroute_t *r = &t->routes[it->key];
    int i = route_find(r, &it->from);
    enum drain_cas ans = DRAIN_CAS_SUPERSEDED;
    if (i >= 0 && sim_chance(t->sim, t->p_refuse)) {
        ans = DRAIN_CAS_REFUSED;
    } else if (i >= 0) {
        r->r[i] = it->to;
        r->version = ++t->next_version;
        ans = DRAIN_CAS_APPLIED;
    }
    sim_log(t->sim,
            "drain CAS key %u seg %" PRIu64 " off %" PRIu64 " -> n%u seg %" PRIu64 " off %" PRIu64
            ": %d",
            it->key, it->from.seg, it->from.off, it->to.owner, it->to.seg, it->to.off, (int)ans);
    if (ans != DRAIN_CAS_SUPERSEDED && sim_chance(t->sim, t->p_unknown))
        ans = DRAIN_CAS_INDETERMINATE;
    m->rc = (int)ans;
    sim_schedule(t->sim, delay(t), drain_cas_back, m);
}

static void sfx_cas(void *ctx, uint32_t i)
{
    st_t *t = ctx;
    sim_schedule(t->sim, delay(t), drain_cas_arrive, drain_msg(t, i));
}

static void sfx_commit_new(void *ctx, uint32_t i)
{
    st_t *t = ctx;
    const sditem_t *it = &t->drain.it[i];
    note_send(t, &it->to, 0, delay(t), it->key, it->token);
}

static void sfx_release_new(void *ctx, uint32_t i, enum drain_release why)
{
    (void)why;
    st_t *t = ctx;
    const sditem_t *it = &t->drain.it[i];
    note_send(t, &it->to, 1, delay(t), it->key, it->token);
}

static void sfx_release_old(void *ctx, uint32_t i)
{
    st_t *t = ctx;
    const sditem_t *it = &t->drain.it[i];
    note_send(t, &it->from, 1, delay(t), it->key, 0);
}

static void drain_timer_fire(void *arg)
{
    smsg_t *m = arg;
    drain_core_t *c = drain_live(m);
    KVM_ASSERT(c != NULL);
    drain_core_timer(c, sim_now(m->t->sim));
}

static void sfx_arm_timer(void *ctx, uint64_t at_ns)
{
    st_t *t = ctx;
    uint64_t now = sim_now(t->sim);
    sim_schedule(t->sim, at_ns > now ? at_ns - now : 0, drain_timer_fire, drain_msg(t, 0));
}

static void drain_run(void *arg);

static bool drain_try_remove(st_t *t, sowner_t *o)
{
    uint64_t n_slots = 0;
    int segi = segi_of(o, t->drain.seg);
    KVM_ASSERT(segi >= 0);
    if (slot_core_seg_remove(o->core, (uint32_t)segi, &n_slots) != 0)
        return false;
    t->drain.removed = true;
    for (uint32_t k = 0; k < t->n_keys; k++)
        for (uint32_t i = 0; t->routes[k].present && i < t->routes[k].n; i++)
            if (t->routes[k].r[i].owner == o->node && t->routes[k].r[i].epoch == o->epoch &&
                t->routes[k].r[i].seg == t->drain.seg)
                sim_fail(t->sim, "segment %" PRIu64 " removed while key %u references it",
                         t->drain.seg, k);
    return true;
}

/* After a run: its core is freed (never inside its own effect), the segment removed or a new
 * run started once reservations and reclaims there settled. */
static void drain_after(void *arg)
{
    smsg_t *m = arg;
    st_t *t = m->t;
    sdrain_t *dr = &t->drain;
    KVM_ASSERT(dr->core != NULL && m->attempt == dr->runs);
    size_t moved, failed;
    drain_core_counts(dr->core, &moved, &failed);
    dr->moved += moved;
    dr->failed += failed;
    sim_log(t->sim,
            "drain run %u: %zu moved, %zu failed (all runs: %" PRIu64 " moved, %" PRIu64 " failed)",
            dr->runs, moved, failed, dr->moved, dr->failed);
    drain_core_free(dr->core);
    dr->core = NULL;
    if (!drain_try_remove(t, drain_owner(t)))
        sim_schedule(t->sim, 30 * ST_MS, drain_run, t);
}

static void sfx_done(void *ctx, int rc)
{
    st_t *t = ctx;
    sim_log(t->sim, "drain run %u done: %d", t->drain.runs, rc);
    sim_schedule(t->sim, 0, drain_after, drain_msg(t, 0));
}

static const drain_effects_t sdrain_fx = {
    .list = sfx_list,
    .reserve = sfx_reserve,
    .copy = sfx_copy,
    .cas = sfx_cas,
    .commit_new = sfx_commit_new,
    .release_new = sfx_release_new,
    .release_old = sfx_release_old,
    .arm_timer = sfx_arm_timer,
    .done = sfx_done,
};

static void drain_run(void *arg)
{
    st_t *t = arg;
    sdrain_t *dr = &t->drain;
    KVM_ASSERT(dr->core == NULL && !dr->removed);
    drain_core_cfg_t cfg = {.timeout_ms = 10000, .writers_ns = 50 * ST_MS, .page = ST_DRAIN_PAGE};
    int rc = drain_core_new(&cfg, &sdrain_fx, t, &dr->core);
    KVM_ASSERT(rc == 0);
    drain_core_test_set_bugs(dr->core, t->drain_bugs);
    dr->runs++;
    drain_core_start(dr->core, sim_now(t->sim));
}

static void drain_begin(void *arg)
{
    st_t *t = arg;
    sowner_t *o = owner_of(t, 0);
    KVM_ASSERT(o != NULL);
    t->drain = (sdrain_t){.started = true, .owner = 0, .epoch = o->epoch, .seg = o->seg_id[0]};
    slot_core_seg_retire(o->core, 0);
    drain_run(t);
}

/* ---- owner deaths --------------------------------------------------------------------------- */

static void restart(void *arg)
{
    smsg_t *m = arg;
    sim_restart(m->t->sim, m->node);
}

static void nemesis(void *arg)
{
    st_t *t = arg;
    if (t->writers_done == ST_WRITERS)
        return;
    uint32_t n = (uint32_t)sim_rand_range(t->sim, 0, t->n_owners - 1), up = 0;
    for (uint32_t i = 0; i < t->n_owners; i++)
        up += sim_node_up(t->sim, i);
    if (up > 1 && sim_node_up(t->sim, n)) {
        sim_crash(t->sim, n); /* mid-write: reservations, writes and commits in flight die */
        smsg_t *m = msg_new(t);
        m->node = n;
        sim_schedule(t->sim, sim_rand_range(t->sim, 20, 300) * ST_MS, restart, m);
    }
    sim_schedule(t->sim, sim_rand_range(t->sim, 200, 700) * ST_MS, nemesis, t);
}

/* ---- checkers ------------------------------------------------------------------------------- */

static int st_invariant(void *ctx, sim_t *sim)
{
    st_t *t = ctx;
    if (sim_steps(sim) % 32)
        return 0;
    for (uint32_t i = 0; i < t->n_owners; i++) {
        sowner_t *o = owner_of(t, i);
        if (o && slot_core_check(o->core) != 0) {
            sim_fail(sim, "owner n%u/e%u: %s", i, o->epoch, kvmesh_last_error());
            return 1;
        }
    }
    if (t->drain.core && drain_core_check(t->drain.core) != 0) {
        sim_fail(sim, "drain run %u: %s", t->drain.runs, kvmesh_last_error());
        return 1;
    }
    return 0;
}

static bool settled(void *ctx)
{
    st_t *t = ctx;
    if (t->writers_done < ST_WRITERS || t->readers_done < ST_READERS)
        return false;
    if (t->mode == M_DRAIN && !t->drain.removed)
        return false;
    for (uint32_t i = 0; i < t->n_owners; i++) {
        sowner_t *o = owner_of(t, i);
        if (!o)
            return false;
        slot_core_stats_t st;
        slot_core_stats(o->core, &st);
        if (!slot_core_settled(o->core) || st.n_reclaim)
            return false;
    }
    return true;
}

static int leak_check(void *arg, const slot_t *s)
{
    sowner_t *o = arg;
    st_t *t = o->t;
    srep_t rep = rep_of(o, s);
    if (s->state == SLOT_COMMITTED && route_find(&t->routes[slot_key(s)], &rep) < 0)
        sim_fail(t->sim,
                 "leak: n%u/e%u seg %" PRIu64 " off %" PRIu64
                 " is COMMITTED for key %u but no route references it",
                 o->node, o->epoch, rep.seg, rep.off, slot_key(s));
    return 0;
}

static void quiescence_check(st_t *t)
{
    for (uint32_t i = 0; i < t->n_owners; i++) {
        sowner_t *o = owner_of(t, i);
        if (!o)
            continue;
        if (slot_core_check(o->core) != 0)
            sim_fail(t->sim, "owner n%u: %s", i, kvmesh_last_error());
        (void)slot_core_visit(o->core, leak_check, o);
    }
    for (uint32_t k = 0; k < t->n_keys; k++) {
        const sroute_t *r = &t->routes[k];
        for (uint32_t i = 0; r->present && i < r->n; i++) {
            sowner_t *o = owner_at(t, r->r[i].owner, r->r[i].epoch);
            const slot_t *s = o ? slot_core_find(o->core, r->r[i].seg, r->r[i].off) : NULL;
            if (o && (!s || s->state != SLOT_COMMITTED || slot_key(s) != k))
                sim_fail(t->sim,
                         "key %u references n%u/e%u seg %" PRIu64 " off %" PRIu64
                         ", which is %s there",
                         k, o->node, o->epoch, r->r[i].seg, r->r[i].off,
                         s ? slot_state_name(s->state) : "no slot");
        }
    }
}

/* ---- runs ----------------------------------------------------------------------------------- */

static void profile(st_t *t, enum st_mode mode)
{
    t->mode = mode;
    t->n_owners = 3;
    t->n_segs = 1;
    t->n_keys = 16;
    t->seg_size = 256 * 1024;
    t->evict_high = 0.95;
    t->evict_low = 0.9;
    double p = 0.03;
    switch (mode) {
    case M_EXPIRY: /* placement, TTL expiry and the held lookup */
        p = 0.15;
        break;
    case M_OVERWRITE: /* few keys: every put replaces a route read in flight */
        t->n_keys = 3;
        break;
    case M_EVICT: /* little memory: eviction races reads and overwrites */
        t->n_keys = 32;
        t->seg_size = 64 * 1024;
        t->evict_high = 0.8;
        t->evict_low = 0.6;
        break;
    case M_DEATH:
        t->n_owners = 4;
        p = 0.08;
        break;
    case M_DRAIN:
        t->n_segs = 2;
        t->seg_size = 128 * 1024;
        break;
    }
    t->p_wcrash = p;
    t->p_slow_cas = p;
    t->p_slow_answer = p;
    t->p_commit_lost = p;
    t->p_slow_commit = p;
    t->p_unknown = p;
    t->p_dup = p;
    t->p_refuse = mode == M_DRAIN ? 0.05 : 0;
}

static int parse_variant(const char *v, unsigned *bugs, unsigned *drain_bugs, sim_result_t *res)
{
    *bugs = *drain_bugs = 0;
    if (!v || !*v)
        return 0;
    if (strcmp(v, "no_grace") == 0)
        *bugs = SLOT_BUG_NO_GRACE;
    else if (strcmp(v, "free_held") == 0)
        *bugs = SLOT_BUG_FREE_HELD;
    else if (strcmp(v, "evict_no_cas") == 0)
        *bugs = SLOT_BUG_EVICT_NO_CAS;
    else if (strcmp(v, "remove_undrained") == 0)
        *bugs = SLOT_BUG_REMOVE_UNDRAINED;
    else if (strcmp(v, "no_token") == 0)
        *bugs = SLOT_BUG_NO_TOKEN;
    else if (strcmp(v, "release_early") == 0)
        *drain_bugs = DRAIN_BUG_RELEASE_EARLY;
    else {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (store scenarios know no_grace, free_held, evict_no_cas, "
                 "remove_undrained, no_token, release_early)",
                 v);
        return 1;
    }
    return 0;
}

static void kick(void *arg)
{
    st_t *t = arg;
    for (uint32_t i = 0; i < ST_WRITERS; i++)
        writer_next(t, &t->w[i]);
    for (uint32_t i = 0; i < ST_READERS; i++)
        reader_next(t, i);
    if (t->mode == M_DEATH)
        sim_schedule(t->sim, sim_rand_range(t->sim, 20, 200) * ST_MS, nemesis, t);
    if (t->mode == M_DRAIN)
        sim_schedule(t->sim, sim_rand_range(t->sim, 100, 500) * ST_MS, drain_begin, t);
}

static int st_run(const sim_run_opts_t *ro, sim_result_t *res, enum st_mode mode)
{
    st_t *t = calloc(1, sizeof(*t));
    KVM_ASSERT(t != NULL);
    if (parse_variant(ro->variant, &t->bugs, &t->drain_bugs, res)) {
        free(t);
        return 1;
    }
    profile(t, mode);
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = t->n_owners;
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    t->sim = sim;
    uint32_t soak = ro->soak ? ro->soak : 1;
    for (uint32_t i = 0; i < ST_WRITERS; i++)
        t->w[i] = (swriter_t){.id = i, .ops_left = 60 * soak};
    for (uint32_t i = 0; i < ST_READERS; i++)
        t->readers_left[i] = 100 * soak;
    sim_set_node_hooks(sim, st_start, st_stop, t);
    sim_set_invariant(sim, st_invariant, t);
    sim_start(sim);
    sim_schedule(sim, 0, kick, t);
    /* settled twice: the second time after every notification still in flight arrived */
    sim_stop_t stop = sim_run_while_not(sim, settled, t, ST_END);
    if (stop == SIM_REACHED && sim_run_for(sim, 2 * ST_LATE_MAX_MS * ST_MS) != SIM_FAILED)
        stop = sim_run_while_not(sim, settled, t, ST_END);
    if (stop != SIM_REACHED && !sim_failed(sim))
        sim_fail(sim,
                 "liveness: %u of %u writers and %u of %u readers done, drain %s; owners "
                 "never settled (reservations, waiters, evictions or reclaims left)",
                 t->writers_done, ST_WRITERS, t->readers_done, ST_READERS,
                 t->mode != M_DRAIN ? "off"
                 : t->drain.removed ? "done"
                                    : "not done");
    if (!sim_failed(sim))
        quiescence_check(t);
    sim_log(sim,
            "done: %" PRIu64 " reads ok, %" PRIu64 " frees, %" PRIu64 " held settled, %" PRIu64
            " evictions",
            t->reads_ok, t->frees, t->held_settled, t->evictions);
    uint64_t mix[4] = {t->reads_ok, t->frees, t->held_settled, t->evictions};
    sim_trace_mix(sim, mix, sizeof(mix));
    int out = sim_finish(sim, res); /* (stops every owner: their cores are freed) */
    drain_core_free(t->drain.core); /* (a run left unfinished by a failure) */
    while (t->msgs) {
        smsg_t *m = t->msgs;
        t->msgs = m->all;
        free(m);
    }
    free(t);
    return out;
}

static int run_expiry(const sim_run_opts_t *ro, sim_result_t *res)
{
    return st_run(ro, res, M_EXPIRY);
}
static int run_overwrite(const sim_run_opts_t *ro, sim_result_t *res)
{
    return st_run(ro, res, M_OVERWRITE);
}
static int run_evict(const sim_run_opts_t *ro, sim_result_t *res)
{
    return st_run(ro, res, M_EVICT);
}
static int run_death(const sim_run_opts_t *ro, sim_result_t *res)
{
    return st_run(ro, res, M_DEATH);
}
static int run_drain(const sim_run_opts_t *ro, sim_result_t *res)
{
    return st_run(ro, res, M_DRAIN);
}

const sim_scenario_t scen_store_reserve_expiry = {
    .name = "store_reserve_expiry",
    .description = "owner slots: writers reserve, write, publish; crashes before the CAS, late "
                   "CAS answers and lost commits race the TTL and the held lookup",
    .run = run_expiry,
};
const sim_scenario_t scen_store_overwrite_reclaim = {
    .name = "store_overwrite_reclaim",
    .description = "owner slots: overwrites release predecessors, freed only after the grace "
                   "while readers are in flight",
    .run = run_overwrite,
};
const sim_scenario_t scen_store_evict_read = {
    .name = "store_evict_read",
    .description = "owner slots: CLOCK eviction by route CAS racing reads and overwrites",
    .run = run_evict,
};
const sim_scenario_t scen_store_owner_death = {
    .name = "store_owner_death",
    .description = "owner slots: owners die mid-write and restart with a new epoch",
    .run = run_death,
};
const sim_scenario_t scen_store_drain = {
    .name = "store_drain",
    .description = "owner slots: a segment retires; every committed object is moved, never lost",
    .run = run_drain,
};
