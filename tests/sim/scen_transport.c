/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_transport.c — the simulated data plane (sim_transport.h) under faults: 2 owners serve a
 * segment of TT_SLOTS slots each (plus a small spare segment); 3-4 clients write checksummed
 * blobs (XXH3) into the slots they own on both owners through fresh grants, read slots back,
 * and mix in deliberately bad requests (outside the grant, offset overflow, wrong rights, wrong
 * or revoked token, expired grant, another segment's grant, unknown segment), under message
 * delays/drops/reorders, injected transport failures and torn transfers, canceled batches,
 * partitions, one-way cuts, isolation and crashes/restarts of owners and clients. After the fault
 * phase every client reads its blobs back.
 *
 * Checks:
 *   - a WRITE reported successful put exactly its bytes into the owner's segment (XXH3 of the
 *     owner's memory at completion equals the source's); a READ reported successful returned
 *     exactly the slot's bytes (the checksum of the last acknowledged blob, or zeros);
 *   - no access outside a grant ever succeeds, and a refusal carries the reason the owner must
 *     give (the order of seg_check); a valid access is never refused;
 *   - every request completes exactly once (one callback per batch, no status left pending) and
 *     by its deadline (checked after every step: nothing pending past it);
 *   - after the faults stop, every client reads all of its blobs back within TT_LIVE_NS, and a
 *     final audit of the owners' memory matches the model (acknowledged blobs, untouched zeros).
 * A failed WRITE (connection lost, timeout, client crash) may have landed partly or later: its
 * slot is "poisoned" for the owner's incarnation (never verified nor rewritten); a canceled WRITE
 * never reached the owner, so its slot keeps its verified content; an owner crash loses its
 * memory: its slots restart as zeros.
 *
 * Test-only variants (--variant) break the transport, and must be caught: nobounds (the owner
 * skips the grant-range check), tornok (a torn transfer reports success), noexpiry (expired
 * grants are honoured), nodeadline (a request may stay pending past its deadline), cancelland
 * (a canceled request still reaches the owner: a canceled WRITE, which must never land, does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/util.h"
#include "kvmesh.h"
#include "sim.h"
#include "sim_transport.h"

#define TT_OWNERS      2u
#define TT_MAX_CLIENTS 4u
#define TT_SLOTS       16u
#define TT_SLOT        4096u
#define TT_SEG         (TT_SLOTS * TT_SLOT)
#define TT_SPARE       4096u
#define TT_BATCH       3u /* requests per batch */
#define TT_FAULT_NS    (2000ull * SIM_MSG_NS)
#define TT_LIVE_NS     (3000ull * SIM_MSG_NS)
#define TT_TIMEOUT_NS  (150ull * SIM_MSG_NS)
#define TT_GOOD_TTL_NS (2 * TT_TIMEOUT_NS) /* outlives every request made with it */
#define TT_BLOB_MIN    64u

enum tt_slot_state { SLOT_ZERO = 0, SLOT_KNOWN, SLOT_POISONED };

typedef struct tt_slot {
    enum tt_slot_state state;
    uint32_t len;
    uint64_t hash;
    uint32_t readers; /* READs in flight */
    bool writing;     /* a WRITE in flight */
} tt_slot_t;

typedef struct tt_owner {
    uint32_t inc; /* incarnation the model below describes */
    uint64_t seg, spare;
    tt_slot_t slot[TT_SLOTS];
} tt_owner_t;

enum tt_kind {
    K_WRITE = 0,
    K_READ,
    /* bad requests, with the reason the owner must give */
    K_BAD_AFTER,    /* crosses the end of the grant: RANGE */
    K_BAD_BEFORE,   /* starts before the grant: RANGE */
    K_BAD_OVERFLOW, /* offset near 2^64: RANGE */
    K_BAD_RIGHTS,   /* WRITE with a read-only grant: RIGHTS */
    K_BAD_TOKEN,    /* made-up token: NOGRANT */
    K_BAD_REVOKED,  /* revoked grant: NOGRANT */
    K_BAD_EXPIRED,  /* 1 ns grant: EXPIRED */
    K_BAD_WRONGSEG, /* grant of the spare segment: WRONGSEG */
    K_BAD_NOSEG,    /* unknown segment id: NOSEG */
    K_KINDS
};

static const char *const kind_names[K_KINDS] = {
    "write",     "read",        "bad-after",   "bad-before",   "bad-overflow", "bad-rights",
    "bad-token", "bad-revoked", "bad-expired", "bad-wrongseg", "bad-noseg"};

typedef struct tt_req {
    enum tt_kind kind;
    uint32_t owner, owner_inc, slot;
    uint64_t offset;
    uint32_t len;
    uint64_t hash; /* WRITE: of the source; READ: expected */
    uint64_t token;
    enum seg_reason want;
    sim_tp_seg_t h;
} tt_req_t;

typedef struct tt tt_t;

typedef struct tt_node_arg { /* argument of a world callback about one node */
    tt_t *tt;
    uint32_t node;
} tt_node_arg_t;

typedef struct tt_client {
    tt_t *tt;
    uint32_t node, cid;
    env_t *env;
    env_timer_id timer;
    env_timer_id cancel_timer; /* cancels the batch in flight (some batches) */
    uint8_t *mem;              /* registered: TT_BATCH areas of TT_SLOT bytes */
    sim_tp_batch_t *batch;
    tt_req_t req[TT_BATCH];
    unsigned nreq;
    bool busy;
    unsigned callbacks;
    uint64_t seq;
    /* final read-back */
    unsigned next_verify;
} tt_client_t;

struct tt {
    sim_t *sim;
    sim_tp_t *tp;
    uint32_t C;
    tt_owner_t own[TT_OWNERS];
    tt_client_t *cl[TT_MAX_CLIENTS]; /* node state of client c, NULL while down */
    bool final;
    bool verified[TT_MAX_CLIENTS][TT_OWNERS][TT_SLOTS];
    uint64_t zero_hash;
    uint64_t cancels;
    uint64_t batches, checked_writes, checked_reads, refusals, bad_failed_otherwise;
    const char *variant;
    tt_node_arg_t node_arg[TT_OWNERS + TT_MAX_CLIENTS];
};

static bool is_owner(uint32_t node)
{
    return node < TT_OWNERS;
}

static uint32_t slot_writer(const tt_t *tt, uint32_t slot)
{
    return slot % tt->C;
}

static bool owner_current(const tt_t *tt, uint32_t o, uint32_t inc)
{
    return sim_node_up(tt->sim, o) && sim_node_incarnation(tt->sim, o) == inc &&
           tt->own[o].inc == inc;
}

/* ---- the "control plane": grants are obtained and revoked by direct calls (an RPC in the real
 * system), only when the owner is up and reachable both ways --------------------------------- */

static bool reachable(tt_t *tt, uint32_t client, uint32_t o)
{
    return sim_node_up(tt->sim, o) && sim_link_ok(tt->sim, client, o) &&
           sim_link_ok(tt->sim, o, client) && tt->own[o].inc == sim_node_incarnation(tt->sim, o);
}

static int grant(tt_t *tt, tt_client_t *c, uint32_t o, uint64_t seg, uint64_t off, uint64_t len,
                 uint32_t rights, uint64_t ttl, struct seg_grant *g)
{
    if (!reachable(tt, c->node, o))
        return KVMESH_ECONN;
    int rc = sim_tp_grant(tt->tp, o, seg, off, len, rights, ttl, g);
    KVM_ASSERT(rc == 0);
    return 0;
}

static void revoke(tt_t *tt, uint32_t o, uint32_t inc, uint64_t token)
{
    if (owner_current(tt, o, inc))
        (void)sim_tp_revoke(tt->tp, o, token); /* ENOENT: already revoked (bad-revoked) */
}

/* ---- building a batch ---------------------------------------------------------------------- */

static uint64_t crand(tt_client_t *c, uint64_t n)
{
    return env_rand_u64(c->env) % n;
}

/* Adds request i of kind k at owner o; returns false when it does not apply right now. */
static bool build(tt_client_t *c, unsigned i, enum tt_kind k, uint32_t o, uint32_t slot,
                  sim_tp_req_t *q)
{
    tt_t *tt = c->tt;
    tt_owner_t *ow = &tt->own[o];
    tt_slot_t *s = &ow->slot[slot];
    tt_req_t *r = &c->req[i];
    uint8_t *buf = c->mem + (size_t)i * TT_SLOT;
    uint64_t base = (uint64_t)slot * TT_SLOT;
    struct seg_grant g;
    *r = (tt_req_t){.kind = k, .owner = o, .owner_inc = ow->inc, .slot = slot, .want = SEG_OK};
    switch (k) {
    case K_WRITE:
        if (slot_writer(tt, slot) != c->cid || s->state == SLOT_POISONED || s->readers ||
            s->writing)
            return false;
        r->len = TT_BLOB_MIN + (uint32_t)crand(c, TT_SLOT - TT_BLOB_MIN + 1);
        r->offset = base;
        if (grant(tt, c, o, ow->seg, base, TT_SLOT, SEG_READ | SEG_WRITE, TT_GOOD_TTL_NS, &g))
            return false;
        {
            uint64_t hdr[4] = {0x424c4f42u, o, slot, ((uint64_t)c->cid << 48) | ++c->seq};
            memcpy(buf, hdr, sizeof(hdr));
            for (uint32_t j = sizeof(hdr); j < r->len; j += 8) {
                uint64_t v = env_rand_u64(c->env);
                memcpy(buf + j, &v, KVM_MIN(8u, r->len - j));
            }
        }
        r->hash = XXH3_64bits(buf, r->len);
        s->writing = true;
        break;
    case K_READ:
        if (s->state == SLOT_POISONED || s->writing)
            return false;
        r->len = s->state == SLOT_KNOWN ? s->len : TT_SLOT;
        r->hash = s->state == SLOT_KNOWN ? s->hash : tt->zero_hash;
        r->offset = base;
        if (grant(tt, c, o, ow->seg, base, r->len, SEG_READ, TT_GOOD_TTL_NS, &g))
            return false;
        memset(buf, 0xa5, r->len);
        s->readers++;
        break;
    default: {
        uint32_t rights = SEG_READ | SEG_WRITE;
        uint64_t ttl = TT_GOOD_TTL_NS, seg = ow->seg;
        enum tp_op op = crand(c, 2) ? TP_READ : TP_WRITE;
        r->len = 1 + (uint32_t)crand(c, TT_SLOT / 2);
        r->offset = base;
        r->want = SEG_R_RANGE;
        if (k == K_BAD_BEFORE && slot == 0)
            return false;
        if (k == K_BAD_RIGHTS) {
            rights = SEG_READ;
            r->want = SEG_R_RIGHTS;
        } else if (k == K_BAD_EXPIRED) {
            ttl = 1;
            r->want = SEG_R_EXPIRED;
        } else if (k == K_BAD_WRONGSEG) {
            seg = ow->spare;
            r->want = SEG_R_WRONGSEG;
        }
        uint64_t glen = k == K_BAD_WRONGSEG ? TT_SPARE : TT_SLOT;
        if (grant(tt, c, o, seg, k == K_BAD_WRONGSEG ? 0 : base, glen, rights, ttl, &g))
            return false;
        if (k == K_BAD_AFTER)
            r->offset = base + TT_SLOT - crand(c, r->len); /* ends past the grant */
        else if (k == K_BAD_BEFORE)
            r->offset = base - 1 - crand(c, 64);
        else if (k == K_BAD_OVERFLOW)
            r->offset = UINT64_MAX - crand(c, r->len);
        if (k == K_BAD_RIGHTS)
            op = TP_WRITE;
        if (k == K_BAD_TOKEN) {
            revoke(tt, o, ow->inc, g.token);
            g.token = env_rand_u64(c->env) | 1;
            r->want = SEG_R_NOGRANT;
        } else if (k == K_BAD_REVOKED) {
            revoke(tt, o, ow->inc, g.token);
            r->want = SEG_R_NOGRANT;
        } else if (k == K_BAD_NOSEG) {
            r->want = SEG_R_NOSEG;
        }
        memset(buf, 0x5a, r->len);
        r->token = g.token;
        int rc = sim_tp_open_segment(
            tt->tp, c->node, o, k == K_BAD_NOSEG ? ow->seg ^ 0x5555u : ow->seg, g.token, &r->h);
        KVM_ASSERT(rc == 0);
        *q = (sim_tp_req_t){.op = op,
                            .local = buf,
                            .length = r->len,
                            .segment = &r->h,
                            .remote_offset = r->offset,
                            .token = g.token};
        return true;
    }
    }
    r->token = g.token;
    int rc = sim_tp_open_segment(tt->tp, c->node, o, ow->seg, g.token, &r->h);
    KVM_ASSERT(rc == 0);
    *q = (sim_tp_req_t){.op = k == K_WRITE ? TP_WRITE : TP_READ,
                        .local = buf,
                        .length = r->len,
                        .segment = &r->h,
                        .remote_offset = r->offset,
                        .token = g.token};
    return true;
}

/* ---- checking completions ------------------------------------------------------------------- */

enum tt_outcome {
    OUT_OK,       /* succeeded */
    OUT_FAILED,   /* failed: a WRITE may have landed partly, or may still land */
    OUT_CANCELED, /* canceled before it reached the owner: a WRITE never lands */
};

/* Releases the model's in-flight marks of request r. */
static void release(tt_t *tt, tt_req_t *r, enum tt_outcome out)
{
    tt_owner_t *ow = &tt->own[r->owner];
    if (ow->inc != r->owner_inc)
        return; /* the owner restarted: a fresh model */
    tt_slot_t *s = &ow->slot[r->slot];
    if (r->kind == K_WRITE) {
        s->writing = false;
        if (out == OUT_OK) {
            s->state = SLOT_KNOWN;
            s->len = r->len;
            s->hash = r->hash;
        } else if (out == OUT_FAILED) {
            s->state = SLOT_POISONED;
        } /* OUT_CANCELED: the slot keeps its content, which reads and the audit verify */
    } else if (r->kind == K_READ) {
        KVM_ASSERT(s->readers > 0);
        s->readers--;
    }
}

static void check_req(tt_client_t *c, unsigned i, int st, enum seg_reason reason)
{
    tt_t *tt = c->tt;
    tt_req_t *r = &c->req[i];
    const uint8_t *buf = c->mem + (size_t)i * TT_SLOT;
    const char *kn = kind_names[r->kind];
    bool net_fail = st == KVMESH_ECONN || st == KVMESH_ETIMEDOUT || st == KVMESH_ECANCELED;
    if (r->kind == K_WRITE || r->kind == K_READ) {
        if (st != 0 && !net_fail) {
            sim_fail(tt->sim, "client %u %s owner %u slot %u: valid access refused: %s %s", c->cid,
                     kn, r->owner, r->slot, kvmesh_errname(st), seg_reason_str(reason));
            return;
        }
        if (st == 0 && r->kind == K_WRITE && owner_current(tt, r->owner, r->owner_inc)) {
            uint8_t *mem;
            int rc = sim_tp_seg_mem(tt->tp, r->owner, r->h.seg_id, &mem, NULL);
            KVM_ASSERT(rc == 0);
            if (XXH3_64bits(mem + r->offset, r->len) != r->hash ||
                memcmp(mem + r->offset, buf, r->len)) {
                sim_fail(tt->sim,
                         "client %u write owner %u slot %u len %u reported ok but the owner's "
                         "bytes differ",
                         c->cid, r->owner, r->slot, r->len);
                return;
            }
            tt->checked_writes++;
        }
        if (st == 0 && r->kind == K_READ) {
            if (XXH3_64bits(buf, r->len) != r->hash) {
                sim_fail(tt->sim,
                         "client %u read owner %u slot %u len %u reported ok with wrong bytes "
                         "(checksum mismatch)",
                         c->cid, r->owner, r->slot, r->len);
                return;
            }
            tt->checked_reads++;
            if (tt->final && slot_writer(tt, r->slot) == c->cid)
                tt->verified[c->cid][r->owner][r->slot] = true;
        }
        release(tt, r, st == 0 ? OUT_OK : st == KVMESH_ECANCELED ? OUT_CANCELED : OUT_FAILED);
        return;
    }
    /* a bad request */
    if (st == 0) {
        sim_fail(tt->sim,
                 "client %u %s owner %u slot %u offset %llu len %u: access outside its "
                 "grant succeeded (owner must refuse with %s)",
                 c->cid, kn, r->owner, r->slot, (unsigned long long)r->offset, r->len,
                 seg_reason_str(r->want));
        return;
    }
    if (st == KVMESH_ENOENT || st == KVMESH_EAUTH || st == KVMESH_ERANGE) {
        if (reason != r->want) {
            sim_fail(tt->sim, "client %u %s: refused with %s (%s), the owner must say %s", c->cid,
                     kn, kvmesh_errname(st), seg_reason_str(reason), seg_reason_str(r->want));
            return;
        }
        tt->refusals++;
    } else if (net_fail) {
        tt->bad_failed_otherwise++;
    } else {
        sim_fail(tt->sim, "client %u %s: unexpected status %s", c->cid, kn, kvmesh_errname(st));
        return;
    }
    revoke(tt, r->owner, r->owner_inc, r->token);
}

static void client_next(void *arg);

static void on_batch(sim_tp_batch_t *b, void *arg)
{
    tt_client_t *c = arg;
    tt_t *tt = c->tt;
    if (++c->callbacks != 1) {
        sim_fail(tt->sim, "client %u: batch callback ran %u times", c->cid, c->callbacks);
        return;
    }
    for (unsigned i = 0; i < c->nreq && !sim_failed(tt->sim); i++) {
        enum seg_reason reason;
        int st = sim_tp_status(b, i, &reason);
        if (st == TP_STATUS_PENDING) {
            sim_fail(tt->sim, "client %u: callback with request %u pending", c->cid, i);
            return;
        }
        if (sim_tp_done_ns(b, i) > sim_tp_deadline_ns(b, i)) {
            sim_fail(tt->sim, "client %u request %u completed %.3f ms after its deadline", c->cid,
                     i, (double)(sim_tp_done_ns(b, i) - sim_tp_deadline_ns(b, i)) / 1e6);
            return;
        }
        check_req(c, i, st, reason);
    }
    c->nreq = 0;
    c->busy = false;
    env_timer_cancel(c->env, c->cancel_timer);
    c->cancel_timer = 0;
    c->timer = env_timer_start(c->env, crand(c, 5) * SIM_MSG_NS, client_next, c);
}

/* ---- clients -------------------------------------------------------------------------------- */

static bool client_final_done(const tt_t *tt, uint32_t cid)
{
    for (uint32_t o = 0; o < TT_OWNERS; o++)
        for (uint32_t s = 0; s < TT_SLOTS; s++)
            if (slot_writer(tt, s) == cid && !tt->verified[cid][o][s] &&
                tt->own[o].slot[s].state != SLOT_POISONED)
                return false;
    return true;
}

static void client_cancel(void *arg)
{
    tt_client_t *c = arg;
    c->cancel_timer = 0;
    if (c->busy && c->batch) {
        c->tt->cancels++;
        sim_tp_cancel(c->batch); /* may complete the batch (and run on_batch) right here */
    }
}

static void client_submit(tt_client_t *c, sim_tp_req_t *q, unsigned n)
{
    tt_t *tt = c->tt;
    int rc = sim_tp_batch_new(tt->tp, c->node, TT_BATCH, &c->batch);
    KVM_ASSERT(rc == 0);
    sim_tp_batch_set_callback(c->batch, on_batch, c);
    c->nreq = n;
    c->callbacks = 0;
    c->busy = true;
    tt->batches++;
    rc = sim_tp_submit(c->batch, q, n);
    KVM_ASSERT(rc == 0);
    if (!tt->final && crand(c, 100) < 5)
        c->cancel_timer = env_timer_start(c->env, crand(c, 4 * SIM_MSG_NS), client_cancel, c);
}

static void client_next(void *arg)
{
    tt_client_t *c = arg;
    tt_t *tt = c->tt;
    c->timer = 0;
    sim_tp_batch_free(c->batch);
    c->batch = NULL;
    sim_tp_req_t q[TT_BATCH];
    unsigned n = 0;
    if (tt->final) {
        if (client_final_done(tt, c->cid))
            return;
        for (unsigned k = 0; k < TT_OWNERS * TT_SLOTS && n < TT_BATCH; k++) {
            unsigned x = (c->next_verify + k) % (TT_OWNERS * TT_SLOTS);
            uint32_t o = x / TT_SLOTS, s = x % TT_SLOTS;
            if (slot_writer(tt, s) != c->cid || tt->verified[c->cid][o][s])
                continue;
            if (build(c, n, K_READ, o, s, &q[n]))
                n++;
        }
        c->next_verify += TT_BATCH;
    } else {
        unsigned want = 1 + (unsigned)crand(c, TT_BATCH);
        for (unsigned tries = 0; tries < 8 && n < want; tries++) {
            uint64_t p = crand(c, 100);
            enum tt_kind k = p < 40 ? K_WRITE
                             : p < 80
                                 ? K_READ
                                 : (enum tt_kind)(K_BAD_AFTER + crand(c, K_KINDS - K_BAD_AFTER));
            uint32_t o = (uint32_t)crand(c, TT_OWNERS);
            uint32_t s =
                k == K_WRITE
                    ? c->cid + tt->C * (uint32_t)crand(c, (TT_SLOTS - c->cid + tt->C - 1) / tt->C)
                    : (uint32_t)crand(c, TT_SLOTS);
            if (build(c, n, k, o, s, &q[n]))
                n++;
        }
    }
    if (n == 0) {
        c->timer = env_timer_start(c->env, (1 + crand(c, 5)) * SIM_MSG_NS, client_next, c);
        return;
    }
    client_submit(c, q, n);
}

/* ---- node hooks ----------------------------------------------------------------------------- */

static void *tt_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    tt_t *tt = ctx;
    if (is_owner(node)) {
        tt_owner_t *ow = &tt->own[node];
        memset(ow, 0, sizeof(*ow));
        ow->inc = sim_node_incarnation(sim, node);
        int rc = sim_tp_seg_create(tt->tp, node, TT_SEG, &ow->seg, NULL);
        KVM_ASSERT(rc == 0);
        rc = sim_tp_seg_create(tt->tp, node, TT_SPARE, &ow->spare, NULL);
        KVM_ASSERT(rc == 0);
        return NULL;
    }
    tt_client_t *c = calloc(1, sizeof(*c));
    KVM_ASSERT(c != NULL);
    c->tt = tt;
    c->node = node;
    c->cid = node - TT_OWNERS;
    c->env = env;
    c->mem = calloc(TT_BATCH, TT_SLOT);
    KVM_ASSERT(c->mem != NULL);
    int rc = sim_tp_register_memory(tt->tp, node, c->mem, (size_t)TT_BATCH * TT_SLOT);
    KVM_ASSERT(rc == 0);
    c->next_verify = (unsigned)crand(c, TT_OWNERS * TT_SLOTS);
    c->timer = env_timer_start(env, crand(c, 5) * SIM_MSG_NS, client_next, c);
    tt->cl[c->cid] = c;
    return c;
}

static void tt_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    tt_t *tt = ctx;
    (void)sim;
    if (!is_owner(node)) {
        tt_client_t *c = state;
        if (c->busy) /* its requests will never complete: a WRITE may still land */
            for (unsigned i = 0; i < c->nreq; i++)
                release(tt, &c->req[i], OUT_FAILED);
        env_timer_cancel(c->env, c->timer);
        env_timer_cancel(c->env, c->cancel_timer);
        sim_tp_batch_free(c->batch);
        tt->cl[c->cid] = NULL;
        free(c->mem);
        free(c);
    }
    sim_tp_node_down(tt->tp, node); /* segments, grants, regions of this incarnation */
}

/* Nothing pending past its deadline (after every step). */
static int tt_invariant(void *ctx, sim_t *sim)
{
    tt_t *tt = ctx;
    for (uint32_t i = 0; i < tt->C; i++) {
        tt_client_t *c = tt->cl[i];
        if (!c || !c->busy || !c->batch)
            continue;
        for (unsigned j = 0; j < sim_tp_batch_count(c->batch); j++) {
            if (sim_tp_status(c->batch, j, NULL) == TP_STATUS_PENDING &&
                sim_now(sim) > sim_tp_deadline_ns(c->batch, j)) {
                sim_fail(sim, "client %u %s request %u still pending %.3f ms after its deadline",
                         c->cid, kind_names[c->req[j].kind], j,
                         (double)(sim_now(sim) - sim_tp_deadline_ns(c->batch, j)) / 1e6);
                return 1;
            }
        }
    }
    return 0;
}

/* ---- nemesis -------------------------------------------------------------------------------- */

static void restart_cb(void *arg)
{
    tt_node_arg_t *a = arg;
    sim_restart(a->tt->sim, a->node);
}

static void nemesis(void *arg)
{
    tt_t *tt = arg;
    sim_t *sim = tt->sim;
    if (tt->final)
        return;
    uint32_t n = sim_n_nodes(sim);
    uint32_t v = (uint32_t)sim_rand_range(sim, 0, n - 1);
    uint64_t p = sim_rand_range(sim, 0, 99);
    if (p < 20) {
        uint32_t group[SIM_MAX_NODES];
        for (uint32_t i = 0; i < n; i++)
            group[i] = (uint32_t)sim_rand_range(sim, 0, 1);
        sim_partition(sim, group);
    } else if (p < 35) {
        sim_isolate(sim, v);
    } else if (p < 45) {
        uint32_t w = (uint32_t)sim_rand_range(sim, 0, n - 1);
        if (w != v)
            sim_block(sim, v, w, true);
    } else if (p < 70) {
        sim_heal(sim);
    } else if (p < 90) {
        sim_crash(sim, v);
        sim_schedule(sim, sim_rand_range(sim, 5, 100) * SIM_MSG_NS, restart_cb, &tt->node_arg[v]);
    }
    sim_schedule(sim, sim_rand_range(sim, 10, 50) * SIM_MSG_NS, nemesis, tt);
}

static void end_faults(void *arg)
{
    tt_t *tt = arg;
    tt->final = true;
    sim_heal(tt->sim);
    for (uint32_t i = 0; i < sim_n_nodes(tt->sim); i++)
        sim_restart(tt->sim, i);
    sim_log(tt->sim, "faults end: every client reads its blobs back");
}

static bool all_verified(void *ctx)
{
    tt_t *tt = ctx;
    for (uint32_t c = 0; c < tt->C; c++)
        if (!client_final_done(tt, c))
            return false;
    return true;
}

/* The owners' memory against the model: acknowledged blobs intact, untouched slots zero. */
static void audit(tt_t *tt)
{
    for (uint32_t o = 0; o < TT_OWNERS && !sim_failed(tt->sim); o++) {
        tt_owner_t *ow = &tt->own[o];
        KVM_ASSERT(owner_current(tt, o, ow->inc));
        uint8_t *mem, *spare;
        int rc = sim_tp_seg_mem(tt->tp, o, ow->seg, &mem, NULL);
        KVM_ASSERT(rc == 0);
        rc = sim_tp_seg_mem(tt->tp, o, ow->spare, &spare, NULL);
        KVM_ASSERT(rc == 0);
        for (uint32_t i = 0; i < TT_SPARE; i++)
            if (spare[i]) {
                sim_fail(tt->sim, "owner %u: spare segment byte %u written", o, i);
                return;
            }
        for (uint32_t s = 0; s < TT_SLOTS; s++) {
            const tt_slot_t *sl = &ow->slot[s];
            const uint8_t *p = mem + (size_t)s * TT_SLOT;
            if (sl->state == SLOT_KNOWN && XXH3_64bits(p, sl->len) != sl->hash)
                sim_fail(tt->sim, "audit: owner %u slot %u does not hold its acknowledged blob", o,
                         s);
            else if (sl->state == SLOT_ZERO && XXH3_64bits(p, TT_SLOT) != tt->zero_hash)
                sim_fail(tt->sim,
                         "audit: owner %u slot %u was never written successfully but "
                         "is not zero",
                         o, s);
        }
    }
}

static int tt_run(const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    sim_tp_knobs_t k;
    sim_tp_knobs_init(&k);
    k.fail_p = 0.02;
    k.torn_p = 0.03;
    k.timeout_ns = TT_TIMEOUT_NS;
    k.retrans_ns = 20 * SIM_MSG_NS;
    k.bytes_per_sec = 10ull * 1000 * 1000; /* 4 KiB: 0.4 ms of copy on the owner */
    if (strcmp(v, "nobounds") == 0)
        k.bug_no_range_check = true;
    else if (strcmp(v, "tornok") == 0)
        k.bug_torn_ok = true;
    else if (strcmp(v, "noexpiry") == 0)
        k.bug_no_expiry_check = true;
    else if (strcmp(v, "nodeadline") == 0)
        k.bug_no_deadline = true;
    else if (strcmp(v, "cancelland") == 0)
        k.bug_cancel_lands = true;
    else if (*v) {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (transport knows nobounds, tornok, noexpiry, nodeadline, "
                 "cancelland)",
                 v);
        return 1;
    }
    uint32_t C = 3 + (uint32_t)(ro->seed % 2);
    tt_t *tt = calloc(1, sizeof(*tt));
    KVM_ASSERT(tt != NULL);
    tt->C = C;
    tt->variant = v;
    static const uint8_t zeros[TT_SLOT];
    tt->zero_hash = XXH3_64bits(zeros, TT_SLOT);
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = TT_OWNERS + C;
    cfg.clock_drift_max_ppm = 1000;
    cfg.net = (sim_net_t){.delay_min_ns = SIM_MSG_NS,
                          .delay_max_ns = 5 * SIM_MSG_NS,
                          .drop_p = 0.05,
                          .reorder_p = 0.05,
                          .reorder_max_ns = 10 * SIM_MSG_NS};
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    tt->sim = sim;
    tt->tp = sim_tp_new(sim, &k);
    for (uint32_t i = 0; i < cfg.n_nodes; i++)
        tt->node_arg[i] = (tt_node_arg_t){.tt = tt, .node = i};
    sim_set_node_hooks(sim, tt_start, tt_stop, tt);
    sim_set_invariant(sim, tt_invariant, tt);
    sim_start(sim);
    sim_schedule(sim, sim_rand_range(sim, 10, 50) * SIM_MSG_NS, nemesis, tt);
    sim_schedule(sim, TT_FAULT_NS * (ro->soak ? ro->soak : 1), end_faults, tt);
    uint64_t live_end = TT_FAULT_NS * (ro->soak ? ro->soak : 1) + TT_LIVE_NS;
    sim_run_until(sim, TT_FAULT_NS * (ro->soak ? ro->soak : 1));
    if (!sim_failed(sim) && sim_run_while_not(sim, all_verified, tt, live_end) == SIM_IDLE) {
        unsigned left = 0;
        for (uint32_t c = 0; c < C; c++)
            left += !client_final_done(tt, c);
        sim_fail(sim, "liveness: %u clients did not read all their blobs back within %.0f ms", left,
                 (double)TT_LIVE_NS / 1e6);
    }
    if (!sim_failed(sim))
        audit(tt);
    sim_tp_stats_t st;
    sim_tp_get_stats(tt->tp, &st);
    sim_log(sim,
            "transport: %llu batches, %llu requests: %llu ok, %llu refused, %llu conn, %llu "
            "timeout, %llu torn, %llu owner lost mid-copy, %llu dropped completions; checked %llu "
            "writes %llu reads, %llu "
            "bad requests refused, %llu failed otherwise, %llu cancels",
            (unsigned long long)tt->batches, (unsigned long long)st.submitted,
            (unsigned long long)st.ok, (unsigned long long)st.refused,
            (unsigned long long)st.conn_failed, (unsigned long long)st.timed_out,
            (unsigned long long)st.torn, (unsigned long long)st.owner_lost,
            (unsigned long long)st.dropped_completions, (unsigned long long)tt->checked_writes,
            (unsigned long long)tt->checked_reads, (unsigned long long)tt->refusals,
            (unsigned long long)tt->bad_failed_otherwise, (unsigned long long)tt->cancels);
    uint64_t w[4] = {tt->checked_writes, tt->checked_reads, tt->refusals, st.submitted};
    sim_trace_mix(sim, w, sizeof(w));
    int out = sim_finish(sim, res); /* stop hooks still use tt->tp */
    sim_tp_free(tt->tp);
    free(tt);
    return out;
}

const sim_scenario_t scen_transport = {
    .name = "transport",
    .description = "checksummed blobs over the simulated data plane: grants, faults, crashes",
    .run = tt_run,
};
