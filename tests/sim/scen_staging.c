/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_staging.c — the remote-restore staging pool (src/cold/staging.c) driven by a simulated
 * owner and readers over the lossy simulated network (docs/cold.md "Staging pool").
 *
 * Node 0 is the cold-backing owner: it holds a small pool (4 slots, 8 KiB), answers READ by
 * acquiring a slot (backpressure answered BUSY, a stale route version CONFLICT), fills it after a
 * simulated backend delay, readies it with a TTL and answers STAGED with the token. Its
 * simulated transport server serves XFER_START (a transfer reading the slot) while the grant is
 * live and answers XFER_DATA with the checksum of the bytes it read; XFER_CANCEL ends a transfer
 * early. The readers send DONE (terminal transport completion) and ACK. An expiry timer fences
 * slots past their deadline, revokes their grant and reports the terminal transport state once
 * no transfer still reads the slot. Promotion pins are taken and released on their own timers.
 *
 * Scenarios (the knobs differ): staging_late_transfer (transfers start and run past the TTL),
 * staging_late_ack (ACKs and completions arrive after expiry, duplicated), staging_cancel
 * (readers cancel transfers or abandon slots), staging_promotion_expiry (promotion pins that
 * overlap expiry).
 *
 * Checkers: staging_check after every step (occupancy counters = the table, no overlap, no live
 * token on a fenced slot); a slot a transfer is reading is never FREE or reused (its current
 * token is the transfer's); a completion or ACK reported as applied never carries a fenced
 * token; bytes a reader received always match the checksum staged; after the workload, pool
 * occupancy returns to zero and every read finished.
 *
 * Broken variant: no_wait — the owner reports the terminal transport state at expiry without
 * waiting for the transfers reading the slot; the reuse checker catches it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/staging.h"
#include "core/hash.h"
#include "core/util.h"
#include "sim.h"

#define STG_SLOTS    4u
#define STG_BYTES    8192u
#define STG_READERS  3u
#define STG_OPS      8u
#define STG_TTL_NS   (20 * SIM_MSG_NS)
#define STG_RTO_NS   (120 * SIM_MSG_NS)
#define STG_TRIES    60u
#define STG_TOKENS   1024u /* tokens issued per run (bounded: STG_READERS*STG_OPS*STG_TRIES) */
#define STG_TEVS     512u
#define STG_DEADLINE (60 * SIM_SEC_NS)

enum {
    M_READ = 1,   /* reader -> owner: req, route version */
    M_BUSY,       /* owner -> reader: req, rc */
    M_STAGED,     /* owner -> reader: req, token, slot, len, checksum */
    M_XFER_START, /* reader -> owner: req, token, slot */
    M_XFER_DATA,  /* owner -> reader: req, token, status, checksum of the bytes read */
    M_XFER_CANCEL,
    M_DONE, /* reader -> owner: token (terminal transport completion) */
    M_ACK,  /* reader -> owner: token */
};

enum mode { MODE_LATE_TRANSFER, MODE_LATE_ACK, MODE_CANCEL, MODE_PROMOTION };
enum tev_kind { T_FILL, T_SERVE, T_PROMO_END, T_EXPIRE, T_RSEND, T_RTO };

typedef struct stg stg_t;

typedef struct tev {
    stg_t *t;
    bool used;
    enum tev_kind kind;
    uint32_t node, a;
    uint64_t w[4];
} tev_t;

typedef struct {
    uint64_t token;
    uint32_t slot;
    bool fenced, served; /* served: the token's one transfer started (a grant is single-use) */
} issued_t;

typedef struct {
    uint32_t ops_left, tries;
    uint64_t req; /* current request id (0 = idle) */
    uint64_t token;
    uint32_t slot;
    uint64_t len, checksum;
    bool transferring;
    env_timer_id rto;
    tev_t *rto_tev;
} reader_t;

struct stg {
    sim_t *sim;
    enum mode mode;
    bool no_wait;
    staging_pool_t *pool;
    uint8_t mem[STG_BYTES];
    /* owner's model of each slot */
    uint64_t cur_token[STG_SLOTS], deadline[STG_SLOTS];
    uint64_t inflight[STG_SLOTS]; /* token of the transfer reading the slot (0 = none) */
    uint64_t inflight_req[STG_SLOTS];
    uint32_t inflight_node[STG_SLOTS];
    tev_t *serve_tev[STG_SLOTS];
    bool wait_terminal[STG_SLOTS];
    issued_t issued[STG_TOKENS];
    uint32_t n_issued;
    tev_t tev[STG_TEVS];
    reader_t rd[STG_READERS];
    uint64_t next_req;
    uint32_t readers_done, reads_ok, reads_given_up;
    uint64_t applied_late;
};

static tev_t *tev_new(stg_t *t, enum tev_kind k, uint32_t node)
{
    for (uint32_t i = 0; i < STG_TEVS; i++)
        if (!t->tev[i].used) {
            memset(&t->tev[i], 0, sizeof(t->tev[i]));
            t->tev[i] = (tev_t){.t = t, .used = true, .kind = k, .node = node};
            return &t->tev[i];
        }
    sim_fail(t->sim, "scenario: more than %u timers pending", STG_TEVS);
    return NULL;
}

static void tev_fire(void *arg);

static void tev_arm(stg_t *t, tev_t *e, uint64_t ns)
{
    env_timer_start(sim_env(t->sim, e->node), ns, tev_fire, e);
}

static void send_w(stg_t *t, uint32_t from, uint32_t to, uint32_t type, const uint64_t *w, size_t n)
{
    int rc = env_send(sim_env(t->sim, from), to, type, w, n * sizeof(*w));
    KVM_ASSERT(rc == 0);
}

static issued_t *issued_find(stg_t *t, uint64_t token)
{
    for (uint32_t i = 0; i < t->n_issued; i++)
        if (t->issued[i].token == token)
            return &t->issued[i];
    return NULL;
}

static staging_expect_t expect_of(uint64_t version, uint64_t len, uint64_t sum)
{
    staging_expect_t e;
    memset(&e, 0, sizeof(e));
    e.namespace_hash = 0x6e73;
    e.owner.b[0] = 1;
    e.route_version = version;
    e.locator_fp = 0x10c;
    e.length = len;
    e.checksum = sum;
    return e;
}

/* ---- owner ----------------------------------------------------------------------------------- */

static void pattern(uint64_t req, uint8_t *b, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        b[i] = (uint8_t)(req * 131 + i * 7);
}

static void owner_read(stg_t *t, uint32_t from, const uint64_t *w)
{
    uint64_t req = w[0], version = w[1];
    uint64_t len = 64 + (req * 977) % 2900; /* the object's length, as the route says */
    uint8_t tmp[STG_BYTES];
    pattern(req, tmp, len);
    uint64_t sum = kvm_checksum(tmp, len);
    staging_expect_t want = expect_of(version, len, sum), have = expect_of(2, len, sum);
    staging_handle_t h;
    int rc = staging_acquire(t->pool, &want, &have, &h);
    if (rc) {
        uint64_t o[2] = {req, (uint64_t)(int64_t)rc};
        send_w(t, 0, from, M_BUSY, o, 2);
        return;
    }
    tev_t *e = tev_new(t, T_FILL, 0);
    if (!e)
        return;
    e->a = h.slot;
    e->w[0] = req;
    e->w[1] = from;
    e->w[2] = len;
    e->w[3] = sum;
    tev_arm(t, e, sim_rand_range(t->sim, 0, 3 * SIM_MSG_NS));
}

static void owner_fill(stg_t *t, tev_t *e)
{
    uint64_t req = e->w[0], len = e->w[2], sum = e->w[3];
    uint64_t off, blen;
    uint8_t *b = staging_buf(t->pool, e->a, &off, &blen);
    KVM_ASSERT(blen == len);
    pattern(req, b, len);
    if (sim_chance(t->sim, 0.03)) { /* a backend read that fails: the slot is aborted */
        staging_abort(t->pool, e->a);
        uint64_t o[2] = {req, (uint64_t)(int64_t)KVMESH_EIO};
        send_w(t, 0, (uint32_t)e->w[1], M_BUSY, o, 2);
        return;
    }
    uint64_t now = sim_now(t->sim);
    staging_handle_t h = {.slot = e->a};
    int rc = staging_ready(t->pool, &h, kvm_checksum(b, len), now + STG_TTL_NS);
    KVM_ASSERT(rc == 0);
    if (t->n_issued == STG_TOKENS) {
        sim_fail(t->sim, "scenario: more than %u tokens", STG_TOKENS);
        return;
    }
    t->issued[t->n_issued++] = (issued_t){.token = h.token, .slot = h.slot};
    t->cur_token[h.slot] = h.token;
    t->deadline[h.slot] = now + STG_TTL_NS;
    double pp = t->mode == MODE_PROMOTION ? 0.9 : 0.2;
    if (sim_chance(t->sim, pp) && staging_promote_pin(t->pool, h.token) == 0) {
        tev_t *p = tev_new(t, T_PROMO_END, 0);
        if (p) {
            p->a = h.slot;
            uint64_t hi = t->mode == MODE_PROMOTION ? 3 * STG_TTL_NS : STG_TTL_NS;
            tev_arm(t, p, sim_rand_range(t->sim, 0, hi));
        }
    }
    uint64_t o[4] = {req, h.token, h.slot, len};
    (void)sum;
    send_w(t, 0, (uint32_t)e->w[1], M_STAGED, o, 4);
}

static void serve_end(stg_t *t, uint32_t slot, int status)
{
    uint64_t token = t->inflight[slot];
    uint64_t off, len;
    uint8_t *b = staging_buf(t->pool, slot, &off, &len);
    uint64_t o[4] = {t->inflight_req[slot], token, (uint64_t)(int64_t)status,
                     status == 0 ? kvm_checksum(b, len) : 0};
    uint32_t to = t->inflight_node[slot];
    t->inflight[slot] = 0;
    t->serve_tev[slot] = NULL;
    send_w(t, 0, to, M_XFER_DATA, o, 4);
    if (t->wait_terminal[slot]) { /* the transfer the fenced slot waited for ended */
        t->wait_terminal[slot] = false;
        staging_transfer_terminal(t->pool, slot);
    }
}

static void owner_xfer_start(stg_t *t, uint32_t from, const uint64_t *w)
{
    uint64_t req = w[0], token = w[1];
    uint32_t slot = (uint32_t)w[2];
    if (slot < STG_SLOTS && t->inflight[slot] == token && token)
        return; /* a duplicate of the start being served */
    issued_t *is = issued_find(t, token);
    bool live = is && !is->fenced && !is->served && slot < STG_SLOTS &&
                t->cur_token[slot] == token && staging_state_of(t->pool, slot) == STAGING_STAGED &&
                t->inflight[slot] == 0;
    if (!live) { /* the grant is revoked (or the slot moved on): the transport refuses */
        uint64_t o[4] = {req, token, (uint64_t)(int64_t)KVMESH_EAUTH, 0};
        send_w(t, 0, from, M_XFER_DATA, o, 4);
        return;
    }
    is->served = true;
    t->inflight[slot] = token;
    t->inflight_req[slot] = req;
    t->inflight_node[slot] = from;
    tev_t *e = tev_new(t, T_SERVE, 0);
    if (!e)
        return;
    e->a = slot;
    e->w[0] = token;
    t->serve_tev[slot] = e;
    uint64_t hi = t->mode == MODE_LATE_TRANSFER ? 2 * STG_TTL_NS : 4 * SIM_MSG_NS;
    tev_arm(t, e, sim_rand_range(t->sim, SIM_MSG_NS / 10, hi));
}

static void owner_xfer_cancel(stg_t *t, const uint64_t *w)
{
    uint64_t token = w[1];
    uint32_t slot = (uint32_t)w[2];
    if (slot < STG_SLOTS && t->inflight[slot] == token && token) {
        t->serve_tev[slot]->w[0] = 0; /* its timer fires into nothing */
        serve_end(t, slot, KVMESH_ECANCELED);
    }
}

static void owner_release(stg_t *t, uint32_t type, uint64_t token)
{
    bool applied = false;
    int rc = type == M_DONE ? staging_transfer_done(t->pool, token, &applied)
                            : staging_ack(t->pool, token, &applied);
    if (rc) {
        sim_fail(t->sim, "owner: %s of token %llx: %s", type == M_DONE ? "completion" : "ack",
                 (unsigned long long)token, kvmesh_strerror(rc));
        return;
    }
    issued_t *is = issued_find(t, token);
    if (applied && (!is || is->fenced))
        sim_fail(t->sim, "owner: a %s with the fenced token %llx was applied",
                 type == M_DONE ? "completion" : "ack", (unsigned long long)token);
    if (!applied)
        t->applied_late++;
}

static void owner_expire(stg_t *t)
{
    uint64_t now = sim_now(t->sim);
    uint32_t due = 0;
    for (uint32_t s = 0; s < STG_SLOTS; s++)
        if (staging_state_of(t->pool, s) == STAGING_STAGED && t->deadline[s] <= now) {
            issued_t *is = issued_find(t, t->cur_token[s]);
            KVM_ASSERT(is);
            is->fenced = true; /* the grant is revoked with the fence */
            due++;
        }
    uint32_t n = staging_expire(t->pool, now, STG_SLOTS);
    if (n != due)
        sim_fail(t->sim, "owner: expiry fenced %u slots, %u were due", n, due);
    uint32_t pend[STG_SLOTS];
    uint32_t k = staging_fenced_pending(t->pool, pend, STG_SLOTS);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = pend[i];
        /* cancel: no new transfer starts (grant revoked); one in flight is waited for */
        if (t->inflight[s] && !t->no_wait)
            t->wait_terminal[s] = true;
        else
            staging_transfer_terminal(t->pool, s);
    }
    tev_t *e = tev_new(t, T_EXPIRE, 0);
    if (e)
        tev_arm(t, e, STG_TTL_NS / 4);
}

/* ---- readers --------------------------------------------------------------------------------- */

static uint32_t rnode(uint32_t i)
{
    return 1 + i;
}

static void reader_send_read(stg_t *t, uint32_t i);

static void rto_cancel(stg_t *t, uint32_t i)
{
    reader_t *r = &t->rd[i];
    if (r->rto) {
        env_timer_cancel(sim_env(t->sim, rnode(i)), r->rto);
        r->rto_tev->used = false;
    }
    r->rto = 0;
    r->rto_tev = NULL;
}

static void reader_op_end(stg_t *t, uint32_t i, bool ok)
{
    reader_t *r = &t->rd[i];
    rto_cancel(t, i);
    r->req = 0;
    r->transferring = false;
    if (ok)
        t->reads_ok++;
    else
        t->reads_given_up++;
    sim_trace_mix(t->sim, &ok, sizeof(ok));
    if (--r->ops_left == 0) {
        t->readers_done++;
        return;
    }
    r->tries = 0;
    reader_send_read(t, i);
}

static void reader_retry(stg_t *t, uint32_t i)
{
    reader_t *r = &t->rd[i];
    if (++r->tries >= STG_TRIES) {
        reader_op_end(t, i, false);
        return;
    }
    r->req = 0;
    r->transferring = false;
    tev_t *e = tev_new(t, T_RSEND, rnode(i));
    if (!e)
        return;
    e->a = i;
    tev_arm(t, e, sim_rand_range(t->sim, SIM_MSG_NS, 4 * SIM_MSG_NS * (1 + r->tries % 8)));
}

static void reader_send_read(stg_t *t, uint32_t i)
{
    reader_t *r = &t->rd[i];
    r->req = ++t->next_req;
    uint64_t version = sim_chance(t->sim, 0.05) ? 1 : 2; /* a stale route now and then */
    uint64_t w[2] = {r->req, version};
    send_w(t, rnode(i), 0, M_READ, w, 2);
    rto_cancel(t, i);
    tev_t *e = tev_new(t, T_RTO, rnode(i));
    if (!e)
        return;
    e->a = i;
    e->w[0] = r->req;
    r->rto = env_timer_start(sim_env(t->sim, rnode(i)), STG_RTO_NS, tev_fire, e);
    r->rto_tev = e;
}

/* Sends DONE and ACK for a token (each after its own delay: late in the late_ack mode). */
static void reader_finish_token(stg_t *t, uint32_t i, uint64_t token, bool done_too)
{
    uint64_t hi = t->mode == MODE_LATE_ACK ? 2 * STG_TTL_NS : 2 * SIM_MSG_NS;
    for (int k = done_too ? 0 : 1; k < 2; k++) {
        tev_t *e = tev_new(t, T_RSEND, rnode(i));
        if (!e)
            return;
        e->a = i;
        e->w[0] = k == 0 ? M_DONE : M_ACK;
        e->w[1] = token;
        tev_arm(t, e, sim_rand_range(t->sim, 0, hi));
    }
}

static void reader_recv(stg_t *t, uint32_t i, const env_msg_t *m)
{
    reader_t *r = &t->rd[i];
    uint64_t w[4] = {0};
    if (m->len > sizeof(w) || m->len < 8) {
        sim_fail(t->sim, "reader %u: malformed message", i);
        return;
    }
    memcpy(w, m->data, m->len);
    bool cur = r->req != 0 && w[0] == r->req;
    if (m->type == M_STAGED) {
        if (!cur || r->transferring) { /* an old request's slot: left to expire */
            return;
        }
        r->token = w[1];
        r->slot = (uint32_t)w[2];
        r->len = w[3];
        uint8_t tmp[STG_BYTES];
        pattern(r->req, tmp, r->len);
        r->checksum = kvm_checksum(tmp, r->len);
        if (t->mode == MODE_CANCEL && sim_chance(t->sim, 0.25)) { /* abandon the slot */
            reader_retry(t, i);
            return;
        }
        r->transferring = true;
        tev_t *e = tev_new(t, T_RSEND, rnode(i));
        if (!e)
            return;
        e->a = i;
        e->w[0] = M_XFER_START;
        e->w[1] = r->token;
        e->w[2] = r->slot;
        e->w[3] = r->req;
        uint64_t hi = t->mode == MODE_LATE_TRANSFER ? 2 * STG_TTL_NS : 2 * SIM_MSG_NS;
        tev_arm(t, e, sim_rand_range(t->sim, 0, hi));
        if (t->mode == MODE_CANCEL && sim_chance(t->sim, 0.3)) { /* cancel mid-way */
            tev_t *c = tev_new(t, T_RSEND, rnode(i));
            if (!c)
                return;
            c->a = i;
            c->w[0] = M_XFER_CANCEL;
            c->w[1] = r->token;
            c->w[2] = r->slot;
            c->w[3] = r->req;
            tev_arm(t, c, sim_rand_range(t->sim, 0, 4 * SIM_MSG_NS));
        }
    } else if (m->type == M_BUSY) {
        if (cur && !r->transferring)
            reader_retry(t, i);
    } else if (m->type == M_XFER_DATA) {
        int status = (int)(int64_t)w[2];
        if (status != KVMESH_EAUTH) /* the transfer reached a terminal state */
            reader_finish_token(t, i, w[1], true);
        if (!cur || !r->transferring || w[1] != r->token)
            return;
        if (status == 0 && w[3] != r->checksum) {
            sim_fail(t->sim, "reader %u: the bytes read from slot %u fail the staged checksum", i,
                     r->slot);
            return;
        }
        if (status == 0)
            reader_op_end(t, i, true);
        else
            reader_retry(t, i);
    }
}

/* ---- dispatch, hooks, checker ---------------------------------------------------------------- */

static void tev_fire(void *arg)
{
    tev_t *slot = arg, copy = *slot, *e = &copy; /* the entry is free for reuse from here */
    stg_t *t = e->t;
    slot->used = false;
    if (sim_failed(t->sim))
        return;
    reader_t *r = e->node ? &t->rd[e->a] : NULL;
    switch (e->kind) {
    case T_FILL:
        owner_fill(t, e);
        break;
    case T_SERVE:
        if (t->serve_tev[e->a] == slot)
            t->serve_tev[e->a] = NULL;
        if (e->w[0] && t->inflight[e->a] == e->w[0])
            serve_end(t, e->a, 0);
        break;
    case T_PROMO_END:
        staging_promote_unpin(t->pool, e->a);
        break;
    case T_EXPIRE:
        owner_expire(t);
        break;
    case T_RTO:
        if (r->rto_tev == slot) {
            r->rto = 0;
            r->rto_tev = NULL;
        }
        if (r->req == e->w[0]) {
            reader_retry(t, e->a);
        }
        break;
    case T_RSEND:
        if (e->w[0] == 0) {
            if (r->req == 0 && r->ops_left)
                reader_send_read(t, e->a);
        } else if (e->w[0] == M_DONE || e->w[0] == M_ACK) {
            send_w(t, e->node, 0, (uint32_t)e->w[0], &e->w[1], 1);
        } else {
            uint64_t o[3] = {e->w[3], e->w[1], e->w[2]};
            send_w(t, e->node, 0, (uint32_t)e->w[0], o, 3);
        }
        break;
    }
}

static void stg_recv(void *ctx, const env_msg_t *m)
{
    stg_t *t = ctx;
    uint64_t w[4] = {0};
    if (m->to != 0) {
        reader_recv(t, m->to - 1, m);
        return;
    }
    if (m->len > sizeof(w) || m->len < 8) {
        sim_fail(t->sim, "owner: malformed message type %u", m->type);
        return;
    }
    memcpy(w, m->data, m->len);
    switch (m->type) {
    case M_READ:
        owner_read(t, m->from, w);
        break;
    case M_XFER_START:
        owner_xfer_start(t, m->from, w);
        break;
    case M_XFER_CANCEL:
        owner_xfer_cancel(t, w);
        break;
    case M_DONE:
    case M_ACK:
        owner_release(t, m->type, w[0]);
        break;
    default:
        sim_fail(t->sim, "owner: unexpected message type %u", m->type);
    }
}

static void *stg_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    (void)sim;
    (void)node;
    env_set_recv(env, stg_recv, ctx);
    return ctx;
}

static void stg_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    (void)ctx;
    (void)sim;
    (void)node;
    (void)state;
}

static int stg_invariant(void *ctx, sim_t *sim)
{
    stg_t *t = ctx;
    if (staging_check(t->pool) != 0) {
        sim_fail(sim, "staging pool: %s", kvmesh_last_error());
        return 1;
    }
    for (uint32_t s = 0; s < STG_SLOTS; s++) {
        if (!t->inflight[s])
            continue;
        enum staging_state st = staging_state_of(t->pool, s);
        if ((st != STAGING_STAGED && st != STAGING_FENCED) || t->cur_token[s] != t->inflight[s]) {
            sim_fail(sim, "slot %u is %s (token %llx) while a transfer with token %llx reads it", s,
                     staging_state_name(st), (unsigned long long)t->cur_token[s],
                     (unsigned long long)t->inflight[s]);
            return 1;
        }
    }
    return 0;
}

static bool settled(void *ctx)
{
    stg_t *t = ctx;
    staging_stats_t st;
    staging_get_stats(t->pool, &st);
    return t->readers_done == STG_READERS && st.slots_used == 0 && st.bytes_used == 0;
}

static void kick(void *arg)
{
    stg_t *t = arg;
    for (uint32_t i = 0; i < STG_READERS; i++)
        reader_send_read(t, i);
}

static int stg_run(const sim_run_opts_t *ro, sim_result_t *res, enum mode mode)
{
    stg_t *t = calloc(1, sizeof(*t));
    KVM_ASSERT(t != NULL);
    const char *v = ro->variant ? ro->variant : "";
    t->mode = mode;
    t->no_wait = strcmp(v, "no_wait") == 0;
    if (*v && !t->no_wait) {
        free(t);
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg), "unknown variant '%s' (staging knows no_wait)", v);
        return 1;
    }
    int rc = staging_new(&t->pool, t->mem, STG_BYTES, STG_SLOTS);
    KVM_ASSERT(rc == 0);
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = 1 + STG_READERS;
    cfg.clock_drift_max_ppm = 20000;
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    t->sim = sim;
    sim_net_t net = {
        .delay_min_ns = SIM_MSG_NS / 2,
        .delay_max_ns = sim_rand_range(sim, 1, 6) * SIM_MSG_NS,
        .drop_p = (double)sim_rand_range(sim, 0, 8) / 100.0,
        .dup_p = (double)sim_rand_range(sim, 0, mode == MODE_LATE_ACK ? 30 : 10) / 100.0,
        .reorder_p = (double)sim_rand_range(sim, 0, 30) / 100.0,
        .reorder_max_ns = 2 * STG_TTL_NS,
    };
    sim_set_net(sim, &net);
    for (uint32_t i = 0; i < STG_READERS; i++)
        t->rd[i].ops_left = STG_OPS * (ro->soak ? ro->soak : 1);
    sim_set_node_hooks(sim, stg_start, stg_stop, t);
    sim_set_invariant(sim, stg_invariant, t);
    sim_start(sim);
    tev_t *e = tev_new(t, T_EXPIRE, 0);
    tev_arm(t, e, STG_TTL_NS / 4);
    sim_schedule(sim, 0, kick, t);
    if (sim_run_while_not(sim, settled, t, STG_DEADLINE) != SIM_REACHED && !sim_failed(sim)) {
        staging_stats_t st;
        staging_get_stats(t->pool, &st);
        sim_fail(sim,
                 "liveness: %u of %u readers finished, pool occupancy %u slots / %llu bytes "
                 "(must return to zero)",
                 t->readers_done, STG_READERS, st.slots_used, (unsigned long long)st.bytes_used);
    }
    if (!sim_failed(sim)) {
        staging_stats_t st;
        staging_get_stats(t->pool, &st);
        sim_log(sim,
                "done: %u reads ok, %u given up; acquired %llu recycled %llu backpressure %llu "
                "expiries %llu late completions %llu late acks %llu",
                t->reads_ok, t->reads_given_up, (unsigned long long)st.acquired,
                (unsigned long long)st.recycled, (unsigned long long)st.backpressure,
                (unsigned long long)st.expiries, (unsigned long long)st.late_completions,
                (unsigned long long)st.late_acks);
        sim_trace_mix(sim, &st, sizeof(st));
    }
    int out = sim_finish(sim, res);
    staging_free(t->pool, false);
    free(t);
    return out;
}

static int run_late_transfer(const sim_run_opts_t *ro, sim_result_t *res)
{
    return stg_run(ro, res, MODE_LATE_TRANSFER);
}
static int run_late_ack(const sim_run_opts_t *ro, sim_result_t *res)
{
    return stg_run(ro, res, MODE_LATE_ACK);
}
static int run_cancel(const sim_run_opts_t *ro, sim_result_t *res)
{
    return stg_run(ro, res, MODE_CANCEL);
}
static int run_promotion(const sim_run_opts_t *ro, sim_result_t *res)
{
    return stg_run(ro, res, MODE_PROMOTION);
}

const sim_scenario_t scen_staging_late_transfer = {
    .name = "staging_late_transfer",
    .description = "staging pool: transfers that start and end after the slot's expiry",
    .run = run_late_transfer,
};
const sim_scenario_t scen_staging_late_ack = {
    .name = "staging_late_ack",
    .description = "staging pool: completions and ACKs late, duplicated, after expiry",
    .run = run_late_ack,
};
const sim_scenario_t scen_staging_cancel = {
    .name = "staging_cancel",
    .description = "staging pool: cancelled transfers and abandoned slots reach terminal state",
    .run = run_cancel,
};
const sim_scenario_t scen_staging_promotion_expiry = {
    .name = "staging_promotion_expiry",
    .description = "staging pool: promotion pins overlapping expiry",
    .run = run_promotion,
};
