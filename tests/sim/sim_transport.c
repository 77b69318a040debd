/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_transport.c — the simulated data plane (see sim_transport.h for the contract and
 * docs/simulator.md, "Simulated data plane", for the guide).
 *
 * A request's life (one state at a time; `gen` invalidates scheduled legs when a crash moves a
 * request on early):
 *
 *            leg 1                     checks ok                copy done
 *   submit ---------> TO_OWNER --arrive--> AT_OWNER ---------------------> TO_CLIENT
 *                        |   \ refused / owner gone / fail_p -----------> TO_CLIENT
 *                        | \ owner crash ----------------------------->  |
 *                        |                    | owner crash (node_down)   |  leg 2
 *                        |                    +-------------------------> |
 *                        | client gave up (deadline, cancel): dropped     v
 *                        +----------------------------------------> GONE <-- arrive at client:
 *                                                                         status, callback
 *
 * Invariants:
 *   - a request completes (status leaves TP_STATUS_PENDING) at most once, and while its client is
 *     alive and its batch attached, exactly once, at the latest at its deadline (a deadline ticket
 *     is scheduled at submit), unless knobs.bug_no_deadline;
 *   - a READ writes into the client's local buffer only in the completion that reports it, so
 *     after a request completed (e.g. timed out) its buffer is never touched again;
 *   - segment bytes change only by a WRITE that passed every owner-side check, or (knobs) never
 *     outside the segment: the check always includes the segment bounds;
 *   - a request is freed once no scheduled event (ticket) refers to it; every live request is in
 *     tp->reqs, so sim_tp_free releases what a freed world never ran.
 */
#include "sim_transport.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/rng.h"
#include "core/util.h"
#include "kvmesh.h"

#define STP_TICKETS 4 /* deadline + a stale leg + the live leg, with one to spare */

typedef struct stp_seg {
    uint64_t id;
    uint8_t *mem;
    uint64_t size;
    uint32_t pins; /* requests the owner is copying */
    bool dead;     /* destroyed while pinned: freed at the last unpin */
} stp_seg_t;

typedef struct stp_region {
    uintptr_t addr;
    size_t len;
} stp_region_t;

typedef struct stp_node {
    uint32_t inc; /* the node incarnation this state belongs to */
    bool purged;  /* state of `inc` already released (node_down) */
    bool has_epoch;
    uint32_t epoch, next_seg;
    stp_seg_t *segs[SIM_TP_MAX_SEGS];
    size_t nsegs;
    struct seg_grant *grants; /* SIM_TP_MAX_GRANTS, allocated on first grant */
    size_t ngrants;
    stp_region_t regions[TP_MAX_REGIONS];
    size_t nregions;
    size_t nbatches;
} stp_node_t;

enum stp_state { RQ_TO_OWNER = 1, RQ_AT_OWNER, RQ_TO_CLIENT, RQ_GONE };

typedef struct stp_req stp_req_t;

typedef struct stp_ticket {
    stp_req_t *req;
    uint32_t gen;
    bool deadline;
    bool used;
} stp_ticket_t;

struct stp_req {
    sim_tp_t *tp;
    stp_req_t *prev, *next;
    uint64_t id;
    sim_tp_batch_t *b; /* NULL once detached (batch freed, client crashed) */
    unsigned idx;
    uint32_t client, client_inc, owner, owner_inc;
    enum tp_op op;
    uint64_t seg_id, offset, length, token;
    uint8_t *local;
    uint8_t *data; /* WRITE: snapshot taken at submit; READ: bytes staged by the owner */
    uint64_t moved;
    int result;
    uint8_t reason;
    stp_seg_t *pin;
    uint64_t deadline;
    enum stp_state state;
    uint32_t gen;
    bool completed;
    bool canceled;
    unsigned live;
    stp_ticket_t tk[STP_TICKETS];
};

typedef struct stp_slot {
    int status;
    uint8_t reason;
    uint64_t done_ns, deadline_ns;
    stp_req_t *req;
} stp_slot_t;

struct sim_tp_batch {
    sim_tp_t *tp;
    sim_tp_batch_t *prev, *next;
    uint32_t client, client_inc;
    unsigned cap, n, pending;
    stp_slot_t *slots;
    sim_tp_batch_cb cb;
    void *cb_arg;
    bool canceled, in_cb, dead;
};

struct sim_tp {
    sim_t *sim;
    sim_tp_knobs_t k;
    kvm_rng_t rng;
    uint64_t next_id;
    stp_node_t nodes[SIM_MAX_NODES];
    stp_req_t *reqs;
    sim_tp_batch_t *batches;
    sim_tp_stats_t st;
};

/* ---- random stream (xoshiro256**, seeded once from the world stream) --------------------------
 */

static uint64_t stp_range(sim_tp_t *tp, uint64_t lo, uint64_t hi)
{
    return kvm_rng_range(&tp->rng, lo, hi);
}

static bool stp_chance(sim_tp_t *tp, double p)
{
    return kvm_rng_chance(&tp->rng, p);
}

/* ---- knobs, lifecycle ----------------------------------------------------------------------- */

void sim_tp_knobs_init(sim_tp_knobs_t *k)
{
    memset(k, 0, sizeof(*k));
    k->timeout_ns = SIM_SEC_NS;
    k->retrans_ns = 50 * SIM_MSG_NS;
}

void sim_tp_set_knobs(sim_tp_t *tp, const sim_tp_knobs_t *knobs)
{
    KVM_ASSERT(knobs->fail_p >= 0.0 && knobs->fail_p <= 1.0);
    KVM_ASSERT(knobs->torn_p >= 0.0 && knobs->torn_p <= 1.0);
    tp->k = *knobs;
    if (!tp->k.timeout_ns)
        tp->k.timeout_ns = SIM_SEC_NS;
    if (!tp->k.retrans_ns)
        tp->k.retrans_ns = 50 * SIM_MSG_NS;
}

const sim_tp_knobs_t *sim_tp_get_knobs(const sim_tp_t *tp)
{
    return &tp->k;
}

void sim_tp_get_stats(const sim_tp_t *tp, sim_tp_stats_t *out)
{
    *out = tp->st;
}

sim_tp_t *sim_tp_new(sim_t *sim, const sim_tp_knobs_t *knobs)
{
    sim_tp_t *tp = calloc(1, sizeof(*tp));
    KVM_ASSERT(tp != NULL);
    tp->sim = sim;
    sim_tp_knobs_t k;
    sim_tp_knobs_init(&k);
    sim_tp_set_knobs(tp, knobs ? knobs : &k);
    kvm_rng_seed(&tp->rng, sim_rand_u64(sim)); /* splitmix64 expansion of one world draw */
    tp->next_id = 1;
    return tp;
}

static void stp_seg_free(stp_seg_t *s)
{
    free(s->mem);
    free(s);
}

static void stp_req_unlink_free(stp_req_t *r)
{
    sim_tp_t *tp = r->tp;
    if (r->prev)
        r->prev->next = r->next;
    else
        tp->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    if (r->b)
        r->b->slots[r->idx].req = NULL;
    free(r->data);
    free(r);
}

static void stp_batch_unlink(sim_tp_batch_t *b)
{
    sim_tp_t *tp = b->tp;
    if (b->prev)
        b->prev->next = b->next;
    else
        tp->batches = b->next;
    if (b->next)
        b->next->prev = b->prev;
}

void sim_tp_free(sim_tp_t *tp)
{
    if (!tp)
        return;
    while (tp->reqs) {
        stp_req_t *r = tp->reqs;
        r->b = NULL;
        stp_req_unlink_free(r);
    }
    while (tp->batches) {
        sim_tp_batch_t *b = tp->batches;
        stp_batch_unlink(b);
        free(b->slots);
        free(b);
    }
    for (uint32_t i = 0; i < SIM_MAX_NODES; i++) {
        stp_node_t *n = &tp->nodes[i];
        for (size_t j = 0; j < n->nsegs; j++)
            stp_seg_free(n->segs[j]);
        free(n->grants);
    }
    free(tp);
}

/* ---- node state and crashes ----------------------------------------------------------------- */

static bool stp_client_alive(const sim_tp_t *tp, const stp_req_t *r)
{
    return sim_node_up(tp->sim, r->client) &&
           sim_node_incarnation(tp->sim, r->client) == r->client_inc;
}

static void stp_reply(stp_req_t *r, int rc, enum seg_reason reason);

/* Releases everything node's incarnation tp->nodes[node].inc held. */
static void stp_purge(sim_tp_t *tp, uint32_t node)
{
    stp_node_t *n = &tp->nodes[node];
    /* owner side: requests being copied fail now (the reset travels back as leg 2) */
    for (stp_req_t *r = tp->reqs; r; r = r->next) {
        if (r->owner == node && r->state == RQ_TO_OWNER && r->owner_inc == n->inc &&
            !r->completed) {
            r->gen++; /* on its way to a dead connection: the reset comes back now */
            stp_reply(r, KVMESH_ECONN, SEG_OK);
        } else if (r->owner == node && r->state == RQ_AT_OWNER) {
            r->pin = NULL; /* the memory goes with the process */
            r->gen++;      /* the scheduled end-of-copy leg is stale */
            tp->st.owner_lost++;
            sim_log(tp->sim, "tp req %llu: owner n%u crashed mid-transfer",
                    (unsigned long long)r->id, node);
            stp_reply(r, KVMESH_ECONN, SEG_OK);
        }
    }
    for (size_t j = 0; j < n->nsegs; j++)
        stp_seg_free(n->segs[j]);
    n->nsegs = 0;
    free(n->grants);
    n->grants = NULL;
    n->ngrants = 0;
    n->nregions = 0;
    n->has_epoch = false;
    /* client side: completions of its batches are dropped from now on */
    for (sim_tp_batch_t *b = tp->batches; b; b = b->next) {
        if (b->client != node || b->dead)
            continue;
        b->dead = true;
        for (unsigned i = 0; i < b->n; i++) {
            if (b->slots[i].req) {
                b->slots[i].req->b = NULL;
                b->slots[i].req = NULL;
            }
        }
    }
    n->nbatches = 0;
    n->purged = true;
}

/* Brings tp's view of node up to the simulator's current incarnation (lazy crash detection). */
static void stp_sync(sim_tp_t *tp, uint32_t node)
{
    stp_node_t *n = &tp->nodes[node];
    uint32_t cur = sim_node_incarnation(tp->sim, node);
    if (cur == n->inc)
        return;
    if (!n->purged)
        stp_purge(tp, node);
    n->inc = cur;
    n->purged = false;
}

void sim_tp_node_down(sim_tp_t *tp, uint32_t node)
{
    KVM_ASSERT(node < sim_n_nodes(tp->sim));
    stp_sync(tp, node);
    if (!tp->nodes[node].purged)
        stp_purge(tp, node);
}

static stp_node_t *stp_enter(sim_tp_t *tp, uint32_t node)
{
    KVM_ASSERT(node < sim_n_nodes(tp->sim));
    KVM_ASSERT(sim_node_up(tp->sim, node)); /* only a running node's code calls the transport */
    stp_sync(tp, node);
    return &tp->nodes[node];
}

static stp_seg_t *stp_find_seg(stp_node_t *n, uint64_t seg_id)
{
    for (size_t i = 0; i < n->nsegs; i++)
        if (n->segs[i]->id == seg_id && !n->segs[i]->dead)
            return n->segs[i];
    return NULL;
}

static void stp_unpin(stp_node_t *n, stp_seg_t *s)
{
    KVM_ASSERT(s->pins > 0);
    if (--s->pins > 0 || !s->dead)
        return;
    for (size_t i = 0; i < n->nsegs; i++) {
        if (n->segs[i] == s) {
            n->segs[i] = n->segs[--n->nsegs];
            break;
        }
    }
    stp_seg_free(s);
}

/* ---- owner side ----------------------------------------------------------------------------- */

int sim_tp_seg_create(sim_tp_t *tp, uint32_t node, uint64_t size, uint64_t *seg_id, uint8_t **base)
{
    stp_node_t *n = stp_enter(tp, node);
    if (size == 0 || size > SIM_TP_MAX_SEG)
        return kvm_errf(KVMESH_EINVAL, "segment size %llu outside [1, %u]",
                        (unsigned long long)size, SIM_TP_MAX_SEG);
    if (n->nsegs >= SIM_TP_MAX_SEGS)
        return kvm_errf(KVMESH_ENOSPC, "node %u has %d segments; destroy one first", node,
                        SIM_TP_MAX_SEGS);
    if (!n->has_epoch) { /* like the real registry: a random epoch per process */
        n->epoch = (uint32_t)env_rand_u64(sim_env(tp->sim, node));
        n->next_seg = 1;
        n->has_epoch = true;
    }
    stp_seg_t *s = calloc(1, sizeof(*s));
    KVM_ASSERT(s != NULL);
    s->mem = calloc(1, size);
    KVM_ASSERT(s->mem != NULL);
    s->size = size;
    s->id = ((uint64_t)n->epoch << 32) | n->next_seg++;
    n->segs[n->nsegs++] = s;
    *seg_id = s->id;
    if (base)
        *base = s->mem;
    return 0;
}

int sim_tp_seg_destroy(sim_tp_t *tp, uint32_t node, uint64_t seg_id)
{
    stp_node_t *n = stp_enter(tp, node);
    stp_seg_t *s = stp_find_seg(n, seg_id);
    if (!s)
        return kvm_errf(KVMESH_ENOENT, "segment %#llx not found", (unsigned long long)seg_id);
    size_t w = 0;
    for (size_t i = 0; i < n->ngrants; i++)
        if (n->grants[i].seg_id != seg_id)
            n->grants[w++] = n->grants[i];
    n->ngrants = w;
    s->dead = true;
    if (s->pins == 0) {
        s->pins = 1;
        stp_unpin(n, s);
    }
    return 0;
}

int sim_tp_seg_mem(sim_tp_t *tp, uint32_t node, uint64_t seg_id, uint8_t **base, uint64_t *size)
{
    stp_node_t *n = stp_enter(tp, node);
    stp_seg_t *s = stp_find_seg(n, seg_id);
    if (!s)
        return KVMESH_ENOENT;
    if (base)
        *base = s->mem;
    if (size)
        *size = s->size;
    return 0;
}

static uint64_t stp_owner_now(sim_tp_t *tp, uint32_t node)
{
    return env_now_ns(sim_env(tp->sim, node)); /* the owner's own (drifting) clock */
}

int sim_tp_grant(sim_tp_t *tp, uint32_t node, uint64_t seg_id, uint64_t offset, uint64_t length,
                 uint32_t rights, uint64_t ttl_ns, struct seg_grant *out)
{
    stp_node_t *n = stp_enter(tp, node);
    if (rights == 0 || (rights & ~(uint32_t)(SEG_READ | SEG_WRITE)))
        return kvm_errf(KVMESH_EINVAL, "grant rights %#x invalid; use SEG_READ|SEG_WRITE", rights);
    stp_seg_t *s = stp_find_seg(n, seg_id);
    if (!s)
        return kvm_errf(KVMESH_ENOENT, "segment %#llx not found", (unsigned long long)seg_id);
    if (length == 0 || offset > s->size || length > s->size - offset)
        return kvm_errf(KVMESH_ERANGE, "grant [%llu, +%llu) outside segment of %llu bytes",
                        (unsigned long long)offset, (unsigned long long)length,
                        (unsigned long long)s->size);
    uint64_t now = stp_owner_now(tp, node);
    if (!n->grants) {
        n->grants = calloc(SIM_TP_MAX_GRANTS, sizeof(*n->grants));
        KVM_ASSERT(n->grants != NULL);
    }
    if (n->ngrants >= SIM_TP_MAX_GRANTS) { /* sweep expired grants, as the real registry */
        size_t w = 0;
        for (size_t i = 0; i < n->ngrants; i++)
            if (!n->grants[i].expiry_ns || n->grants[i].expiry_ns > now)
                n->grants[w++] = n->grants[i];
        n->ngrants = w;
    }
    if (n->ngrants >= SIM_TP_MAX_GRANTS)
        return kvm_errf(KVMESH_ENOSPC, "too many live grants (max %d); revoke unused ones",
                        SIM_TP_MAX_GRANTS);
    struct seg_grant g = {.seg_id = seg_id,
                          .offset = offset,
                          .length = length,
                          .rights = rights,
                          .expiry_ns = ttl_ns ? now + ttl_ns : 0};
    do {
        g.token = env_rand_u64(sim_env(tp->sim, node));
    } while (g.token == 0);
    n->grants[n->ngrants++] = g;
    *out = g;
    return 0;
}

int sim_tp_revoke(sim_tp_t *tp, uint32_t node, uint64_t token)
{
    stp_node_t *n = stp_enter(tp, node);
    for (size_t i = 0; i < n->ngrants; i++) {
        if (n->grants[i].token == token) {
            n->grants[i] = n->grants[--n->ngrants];
            return 0;
        }
    }
    return kvm_errf(KVMESH_ENOENT, "no grant with this token");
}

size_t sim_tp_grant_count(sim_tp_t *tp, uint32_t node)
{
    return stp_enter(tp, node)->ngrants;
}

/* ---- client side: regions, handles, batches ------------------------------------------------- */

int sim_tp_register_memory(sim_tp_t *tp, uint32_t node, void *addr, size_t len)
{
    stp_node_t *n = stp_enter(tp, node);
    if (!addr || len == 0)
        return kvm_errf(KVMESH_EINVAL, "cannot register an empty or NULL region");
    if (n->nregions >= TP_MAX_REGIONS)
        return kvm_errf(KVMESH_ENOSPC, "too many registered regions (max %d)", TP_MAX_REGIONS);
    n->regions[n->nregions++] = (stp_region_t){.addr = (uintptr_t)addr, .len = len};
    return 0;
}

int sim_tp_unregister_memory(sim_tp_t *tp, uint32_t node, void *addr)
{
    stp_node_t *n = stp_enter(tp, node);
    for (size_t i = 0; i < n->nregions; i++) {
        if (n->regions[i].addr == (uintptr_t)addr) {
            n->regions[i] = n->regions[--n->nregions];
            return 0;
        }
    }
    return kvm_errf(KVMESH_ENOENT, "region %p is not registered", addr);
}

static bool stp_in(uintptr_t base, uint64_t blen, uintptr_t p, uint64_t len)
{
    return p >= base && len <= blen && p - base <= blen - len;
}

static bool stp_registered(stp_node_t *n, const void *p, uint64_t len)
{
    for (size_t i = 0; i < n->nregions; i++)
        if (stp_in(n->regions[i].addr, n->regions[i].len, (uintptr_t)p, len))
            return true;
    for (size_t i = 0; i < n->nsegs; i++)
        if (!n->segs[i]->dead &&
            stp_in((uintptr_t)n->segs[i]->mem, n->segs[i]->size, (uintptr_t)p, len))
            return true;
    return false;
}

int sim_tp_open_segment(sim_tp_t *tp, uint32_t client, uint32_t owner, uint64_t seg_id,
                        uint64_t token, sim_tp_seg_t *out)
{
    stp_enter(tp, client);
    if (owner >= sim_n_nodes(tp->sim))
        return kvm_errf(KVMESH_EINVAL, "owner node %u does not exist", owner);
    *out = (sim_tp_seg_t){.client = client,
                          .owner = owner,
                          .owner_inc = sim_node_incarnation(tp->sim, owner),
                          .seg_id = seg_id,
                          .token = token};
    return 0;
}

int sim_tp_batch_new(sim_tp_t *tp, uint32_t client, unsigned capacity, sim_tp_batch_t **out)
{
    stp_node_t *n = stp_enter(tp, client);
    if (capacity == 0 || capacity > TP_MAX_BATCH)
        return kvm_errf(KVMESH_EINVAL, "batch capacity %u outside [1, %d]", capacity, TP_MAX_BATCH);
    if (n->nbatches >= SIM_TP_MAX_BATCHES)
        return kvm_errf(KVMESH_ENOSPC, "node %u has %d live batches", client, SIM_TP_MAX_BATCHES);
    sim_tp_batch_t *b = calloc(1, sizeof(*b));
    KVM_ASSERT(b != NULL);
    b->slots = calloc(capacity, sizeof(*b->slots));
    KVM_ASSERT(b->slots != NULL);
    b->tp = tp;
    b->client = client;
    b->client_inc = sim_node_incarnation(tp->sim, client);
    b->cap = capacity;
    b->next = tp->batches;
    if (tp->batches)
        tp->batches->prev = b;
    tp->batches = b;
    n->nbatches++;
    *out = b;
    return 0;
}

void sim_tp_batch_free(sim_tp_batch_t *b)
{
    if (!b)
        return;
    KVM_ASSERT(!b->in_cb); /* as tp_batch_free: never from the batch's own callback */
    sim_tp_t *tp = b->tp;
    for (unsigned i = 0; i < b->n; i++)
        if (b->slots[i].req)
            b->slots[i].req->b = NULL; /* detached: its completion is dropped */
    if (!b->dead) {
        stp_sync(tp, b->client);
        if (!b->dead) {
            KVM_ASSERT(tp->nodes[b->client].nbatches > 0);
            tp->nodes[b->client].nbatches--;
        }
    }
    stp_batch_unlink(b);
    free(b->slots);
    free(b);
}

void sim_tp_batch_set_callback(sim_tp_batch_t *b, sim_tp_batch_cb cb, void *arg)
{
    b->cb = cb;
    b->cb_arg = arg;
}

unsigned sim_tp_batch_count(const sim_tp_batch_t *b)
{
    return b->n;
}

unsigned sim_tp_batch_pending(const sim_tp_batch_t *b)
{
    return b->pending;
}

int sim_tp_status(const sim_tp_batch_t *b, unsigned i, enum seg_reason *reason)
{
    int st = i < b->n ? b->slots[i].status : KVMESH_EINVAL;
    if (reason)
        *reason =
            i < b->n && st != TP_STATUS_PENDING ? (enum seg_reason)b->slots[i].reason : SEG_OK;
    return st;
}

uint64_t sim_tp_done_ns(const sim_tp_batch_t *b, unsigned i)
{
    return i < b->n ? b->slots[i].done_ns : 0;
}

uint64_t sim_tp_deadline_ns(const sim_tp_batch_t *b, unsigned i)
{
    return i < b->n ? b->slots[i].deadline_ns : 0;
}

int sim_tp_batch_result(const sim_tp_batch_t *b)
{
    for (unsigned i = 0; i < b->n; i++)
        if (b->slots[i].status != 0)
            return b->slots[i].status;
    return 0;
}

/* ---- completion ----------------------------------------------------------------------------- */

/* Completes slot idx of b with status (exactly once); runs the callback when nothing is pending. */
static void stp_slot_done(sim_tp_batch_t *b, unsigned idx, int status, uint8_t reason, uint64_t id,
                          uint64_t moved, const uint8_t *bytes)
{
    sim_tp_t *tp = b->tp;
    stp_slot_t *s = &b->slots[idx];
    KVM_ASSERT(s->status == TP_STATUS_PENDING); /* every request completes once */
    s->status = status;
    s->reason = reason;
    s->done_ns = sim_now(tp->sim);
    uint64_t w[8] = {0x5e7a0001u, id,    b->client, idx, (uint64_t)(int64_t)status,
                     reason,      moved, s->done_ns};
    sim_trace_mix(tp->sim, w, sizeof(w));
    if (bytes && moved)
        sim_trace_mix(tp->sim, bytes, moved);
    if (status == 0)
        tp->st.ok++;
    else if (status == KVMESH_ETIMEDOUT)
        tp->st.timed_out++;
    else if (status == KVMESH_ECANCELED)
        tp->st.canceled++;
    else if (status == KVMESH_ECONN)
        tp->st.conn_failed++;
    else if (status == KVMESH_EINVAL)
        tp->st.invalid++;
    else
        tp->st.refused++;
    sim_log(tp->sim, "tp n%u batch slot %u: %s%s%s", b->client, idx,
            status ? kvmesh_errname(status) : "ok", reason ? " " : "",
            reason ? seg_reason_str((enum seg_reason)reason) : "");
    KVM_ASSERT(b->pending > 0);
    if (--b->pending == 0 && b->cb) {
        b->in_cb = true;
        b->cb(b, b->cb_arg);
        b->in_cb = false;
    }
}

static void stp_complete(stp_req_t *r, int status, uint8_t reason)
{
    KVM_ASSERT(!r->completed && r->b);
    r->completed = true;
    sim_tp_batch_t *b = r->b;
    unsigned idx = r->idx;
    b->slots[idx].req = NULL;
    r->b = NULL;
    bool read_bytes = r->op == TP_READ && status == 0;
    stp_slot_done(b, idx, status, reason, r->id, status == 0 ? r->length : r->moved,
                  read_bytes ? r->local : NULL);
}

/* ---- events --------------------------------------------------------------------------------- */

static void stp_fire(void *arg);

static void stp_schedule(stp_req_t *r, uint64_t delay_ns, bool deadline)
{
    for (int i = 0; i < STP_TICKETS; i++) {
        stp_ticket_t *t = &r->tk[i];
        if (t->used)
            continue;
        *t = (stp_ticket_t){.req = r, .gen = r->gen, .deadline = deadline, .used = true};
        r->live++;
        sim_schedule(r->tp->sim, delay_ns, stp_fire, t);
        return;
    }
    KVM_ASSERT(!"sim_transport: request out of event tickets");
}

/* One leg over the simulated network: the current sim_net_t distribution, plus a retransmission
 * interval for each drop_p loss (bounded). */
static uint64_t stp_leg_delay(sim_tp_t *tp)
{
    const sim_net_t *net = sim_get_net(tp->sim);
    uint64_t d = stp_range(tp, net->delay_min_ns, KVM_MAX(net->delay_min_ns, net->delay_max_ns));
    if (stp_chance(tp, net->reorder_p))
        d += stp_range(tp, 0, net->reorder_max_ns);
    for (int i = 0; i < SIM_TP_RETRANS_MAX && stp_chance(tp, net->drop_p); i++)
        d += tp->k.retrans_ns;
    return d;
}

static void stp_reply(stp_req_t *r, int rc, enum seg_reason reason)
{
    if (rc)
        sim_log(r->tp->sim, "tp req %llu: n%u answers %s%s%s", (unsigned long long)r->id, r->owner,
                kvmesh_errname(rc), reason ? " " : "", reason ? seg_reason_str(reason) : "");
    r->result = rc;
    r->reason = (uint8_t)reason;
    if (rc)
        r->moved = 0;
    r->state = RQ_TO_CLIENT;
    stp_schedule(r, stp_leg_delay(r->tp), false);
}

/* Leg 1 arrived: the owner checks the access exactly as seg_check does. */
static void stp_at_owner(stp_req_t *r)
{
    sim_tp_t *tp = r->tp;
    if (r->completed && !(r->canceled && tp->k.bug_cancel_lands)) { /* BUG knob */
        /* the client gave up before the request got there */
        r->state = RQ_GONE;
        return;
    }
    if (!sim_link_ok(tp->sim, r->client, r->owner)) {
        stp_schedule(r, tp->k.retrans_ns, false); /* cut link: the stream retries */
        return;
    }
    stp_sync(tp, r->owner); /* may fail r itself: a lazily noticed crash of its owner */
    if (r->state != RQ_TO_OWNER)
        return;
    if (!sim_node_up(tp->sim, r->owner) ||
        sim_node_incarnation(tp->sim, r->owner) != r->owner_inc) {
        stp_reply(r, KVMESH_ECONN, SEG_OK); /* reset: no such connection any more */
        return;
    }
    stp_node_t *n = &tp->nodes[r->owner];
    stp_seg_t *s = stp_find_seg(n, r->seg_id);
    if (!s) {
        stp_reply(r, KVMESH_ENOENT, SEG_R_NOSEG);
        return;
    }
    const struct seg_grant *gp = NULL;
    for (size_t i = 0; i < n->ngrants && !gp; i++)
        if (n->grants[i].token == r->token)
            gp = &n->grants[i];
    if (!gp) {
        stp_reply(r, KVMESH_EAUTH, SEG_R_NOGRANT);
        return;
    }
    struct seg_grant g = *gp;
    if (tp->k.bug_no_expiry_check) /* BUG (test-only knob) */
        g.expiry_ns = 0;
    if (tp->k.bug_no_range_check && g.seg_id == r->seg_id) { /* BUG (test-only knob) */
        g.offset = 0;
        g.length = UINT64_MAX;
    }
    enum seg_reason reason = SEG_OK;
    int rc = seg_grant_allows(&g, r->seg_id, s->size, r->offset, r->length,
                              r->op == TP_READ ? SEG_READ : SEG_WRITE, stp_owner_now(tp, r->owner),
                              &reason);
    if (rc) {
        stp_reply(r, rc, reason);
        return;
    }
    if (stp_chance(tp, tp->k.fail_p)) {
        stp_reply(r, KVMESH_ECONN, SEG_OK);
        return;
    }
    s->pins++;
    r->pin = s;
    r->state = RQ_AT_OWNER;
    uint64_t copy_ns = 0;
    if (tp->k.bytes_per_sec)
        copy_ns = (uint64_t)(((unsigned __int128)r->length * SIM_SEC_NS) / tp->k.bytes_per_sec);
    stp_schedule(r, copy_ns, false);
}

/* The owner finished copying (segment pinned, owner alive in the same incarnation). */
static void stp_copied(stp_req_t *r)
{
    sim_tp_t *tp = r->tp;
    stp_seg_t *s = r->pin;
    uint8_t *mem = s->mem + r->offset;
    r->pin = NULL;
    bool torn = false;
    if (r->op == TP_WRITE && (r->completed || !stp_client_alive(tp, r))) {
        /* the client's connection died mid-payload: a random prefix landed */
        r->moved = stp_range(tp, 0, r->length);
        memcpy(mem, r->data, r->moved);
        tp->st.client_lost_writes++;
        uint64_t w[3] = {0x5e7a0002u, r->id, r->moved};
        sim_trace_mix(tp->sim, w, sizeof(w));
        sim_log(tp->sim, "tp req %llu: client gone, %llu of %llu bytes landed",
                (unsigned long long)r->id, (unsigned long long)r->moved,
                (unsigned long long)r->length);
        stp_unpin(&tp->nodes[r->owner], s);
        r->state = RQ_GONE;
        return;
    }
    if (stp_chance(tp, tp->k.torn_p)) {
        torn = true;
        r->moved = stp_range(tp, 0, r->length - 1);
        tp->st.torn++;
    } else {
        r->moved = r->length;
    }
    if (r->op == TP_WRITE) {
        memcpy(mem, r->data, r->moved);
        uint64_t w[3] = {0x5e7a0003u, r->id, r->moved};
        sim_trace_mix(tp->sim, w, sizeof(w));
    } else if (r->moved) {
        r->data = malloc(r->moved);
        KVM_ASSERT(r->data != NULL);
        memcpy(r->data, mem, r->moved);
    }
    stp_unpin(&tp->nodes[r->owner], s);
    r->result = torn && !tp->k.bug_torn_ok ? KVMESH_ECONN : 0; /* BUG knob: torn reported ok */
    r->reason = SEG_OK;
    r->state = RQ_TO_CLIENT;
    stp_schedule(r, stp_leg_delay(tp), false);
}

/* Leg 2 arrived at the client: deliver the bytes and the status. */
static void stp_at_client(stp_req_t *r)
{
    sim_tp_t *tp = r->tp;
    if (r->completed) {
        r->state = RQ_GONE;
        return;
    }
    if (!r->b || !stp_client_alive(tp, r)) {
        tp->st.dropped_completions++;
        r->state = RQ_GONE;
        return;
    }
    if (!sim_link_ok(tp->sim, r->owner, r->client)) {
        stp_schedule(r, tp->k.retrans_ns, false);
        return;
    }
    r->state = RQ_GONE;
    if (r->op == TP_READ && r->moved)
        memcpy(r->local, r->data, r->moved);
    if (r->result == 0) {
        if (r->op == TP_READ)
            tp->st.bytes_read += r->moved;
        else
            tp->st.bytes_written += r->moved;
    }
    stp_complete(r, r->result, r->reason);
}

static void stp_deadline(stp_req_t *r)
{
    if (r->completed || !r->b || !stp_client_alive(r->tp, r))
        return;
    sim_log(r->tp->sim, "tp req %llu: deadline", (unsigned long long)r->id);
    stp_complete(r, KVMESH_ETIMEDOUT, SEG_OK);
}

static void stp_fire(void *arg)
{
    stp_ticket_t *t = arg;
    stp_req_t *r = t->req;
    KVM_ASSERT(t->used && r->live > 0);
    t->used = false;
    r->live--;
    if (t->deadline)
        stp_deadline(r);
    else if (t->gen == r->gen) {
        switch (r->state) {
        case RQ_TO_OWNER:
            stp_at_owner(r);
            break;
        case RQ_AT_OWNER:
            stp_copied(r);
            break;
        case RQ_TO_CLIENT:
            stp_at_client(r);
            break;
        case RQ_GONE:
            break;
        }
    }
    if (r->live == 0) {
        KVM_ASSERT(r->state == RQ_GONE || r->completed);
        KVM_ASSERT(r->pin == NULL);
        stp_req_unlink_free(r);
    }
}

/* ---- submit and cancel ---------------------------------------------------------------------- */

int sim_tp_submit(sim_tp_batch_t *b, const sim_tp_req_t *reqs, unsigned n)
{
    sim_tp_t *tp = b->tp;
    stp_node_t *node = stp_enter(tp, b->client);
    KVM_ASSERT(!b->dead && b->client_inc == sim_node_incarnation(tp->sim, b->client));
    if (n == 0)
        return 0;
    if (!reqs)
        return kvm_errf(KVMESH_EINVAL, "NULL request array");
    if (n > b->cap - b->n)
        return kvm_errf(KVMESH_ETOOBIG, "batch has room for %u more requests, %u submitted",
                        b->cap - b->n, n);
    unsigned first = b->n;
    uint64_t now = sim_now(tp->sim);
    for (unsigned i = 0; i < n; i++)
        b->slots[first + i] =
            (stp_slot_t){.status = TP_STATUS_PENDING, .deadline_ns = now + tp->k.timeout_ns};
    b->n += n;
    b->pending += n;
    for (unsigned i = 0; i < n; i++) {
        unsigned idx = first + i;
        const sim_tp_req_t *q = &reqs[i];
        uint64_t id = tp->next_id++;
        tp->st.submitted++;
        int rc = 0;
        if (q->op != TP_READ && q->op != TP_WRITE)
            rc = KVMESH_EINVAL;
        else if (q->length == 0 || q->length > SIM_TP_MAX_SEG)
            rc = KVMESH_EINVAL;
        else if (!q->segment || q->segment->client != b->client ||
                 q->segment->owner >= sim_n_nodes(tp->sim))
            rc = KVMESH_EINVAL;
        else if (!q->local || !stp_registered(node, q->local, q->length))
            rc = KVMESH_EINVAL;
        else if (b->canceled)
            rc = KVMESH_ECANCELED;
        if (rc) {
            stp_slot_done(b, idx, rc, SEG_OK, id, 0, NULL);
            continue;
        }
        stp_req_t *r = calloc(1, sizeof(*r));
        KVM_ASSERT(r != NULL);
        *r = (stp_req_t){.tp = tp,
                         .id = id,
                         .b = b,
                         .idx = idx,
                         .client = b->client,
                         .client_inc = b->client_inc,
                         .owner = q->segment->owner,
                         .owner_inc = q->segment->owner_inc,
                         .op = q->op,
                         .seg_id = q->segment->seg_id,
                         .offset = q->remote_offset,
                         .length = q->length,
                         .token = q->token,
                         .local = q->local,
                         .deadline = now + tp->k.timeout_ns,
                         .state = RQ_TO_OWNER};
        if (r->op == TP_WRITE) { /* the bytes leave the client now (they are "on the wire") */
            r->data = malloc(r->length);
            KVM_ASSERT(r->data != NULL);
            memcpy(r->data, r->local, r->length);
        }
        r->next = tp->reqs;
        if (tp->reqs)
            tp->reqs->prev = r;
        tp->reqs = r;
        b->slots[idx].req = r;
        uint64_t w[7] = {0x5e7a0004u, id, r->client, r->owner, r->op, r->offset, r->length};
        sim_trace_mix(tp->sim, w, sizeof(w));
        sim_log(tp->sim, "tp req %llu: n%u -> n%u %s seg %#llx [%llu, +%llu) (batch slot %u)",
                (unsigned long long)id, r->client, r->owner, r->op == TP_READ ? "READ" : "WRITE",
                (unsigned long long)r->seg_id, (unsigned long long)r->offset,
                (unsigned long long)r->length, idx);
        if (!tp->k.bug_no_deadline) /* BUG knob: no deadline */
            stp_schedule(r, tp->k.timeout_ns, true);
        stp_schedule(r, stp_leg_delay(tp), false);
    }
    return 0;
}

void sim_tp_cancel(sim_tp_batch_t *b)
{
    b->canceled = true;
    for (unsigned i = 0; i < b->n; i++) {
        stp_req_t *r = b->slots[i].req;
        if (r && r->state == RQ_TO_OWNER && !r->completed) {
            r->canceled = true;
            stp_complete(r, KVMESH_ECANCELED, SEG_OK);
        }
    }
}
