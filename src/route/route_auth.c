/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_auth.c — the shard authority: the primary state machine of route_int.h (acquire with a
 * metadata CAS, state transfer, activation, serving, resignation) and the server side of every
 * peer request (CAS, read, mirror, grant, fetch, install, repair, owner pages).
 *
 * Invariants (docs/protocol.md "Guarantees"):
 *   - a runtime applies a CAS only in RP_ACTIVE, with a valid local lease deadline, and with the
 *     request's token equal to the record token it activated and to its own fence (m_token);
 *   - m_token never decreases; a request with an older token gets stale_generation and the
 *     newest (generation, token) this runtime knows; a newer one gets unavailable;
 *   - a member serves reads only while installed for its token and before its local read
 *     deadline (the primary: its lease deadline; a secondary: a grant measured from its send);
 *   - the primary replies success only after every other member of the set acknowledged the
 *     mirror; a partial mirror marks the key dirty and is re-mirrored before its next mutation;
 *   - an acquisition takes token + 1 only when the record is absent, RESIGNED, bound to an
 *     expired lease, or bound to this runtime's own lease after its grants ran out; it serves
 *     only after every new member installed the state of one member of the last ACTIVE set,
 *     or (every member of that set gone from the membership: dead, restarted, or cut off from
 *     metadata past its lease) the empty state, counted in state_lost.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/wire.h"
#include "meta/keyspace.h"
#include "route/route_int.h"

static bool legal(enum route_pstate from, enum route_pstate to)
{
    if (to == RP_IDLE)
        return true;
    switch (from) {
    case RP_IDLE:
        return to == RP_READ_REC || to == RP_RESIGN;
    case RP_READ_REC:
        return to == RP_LEASE_CHECK || to == RP_ACQUIRE;
    case RP_LEASE_CHECK:
        return to == RP_ACQUIRE;
    case RP_ACQUIRE:
        return to == RP_FETCH || to == RP_INSTALL;
    case RP_FETCH:
        return to == RP_INSTALL;
    case RP_INSTALL:
        return to == RP_ACTIVATE;
    case RP_ACTIVATE:
        return to == RP_ACTIVE;
    case RP_ACTIVE:
        return to == RP_RESIGN;
    case RP_RESIGN:
        return to == RP_RESIGN_TXN || to == RP_READ_REC;
    case RP_RESIGN_TXN:
        return false;
    }
    return false;
}

static void xfer_reset(route_shard_t *sh)
{
    route_table_free(sh->xfer);
    sh->xfer = NULL;
    kvm_ident_free(&sh->fetch_after);
    sh->fetch_started = false;
    for (uint32_t i = 0; i < sh->n_inst; i++)
        kvm_ident_free(&sh->inst[i].after);
    memset(sh->inst, 0, sizeof(sh->inst));
    sh->n_inst = 0;
}

static void set_pstate(route_svc_t *svc, route_shard_t *sh, enum route_pstate to)
{
    KVM_ASSERT(legal(sh->ps, to));
    if (to == RP_IDLE) {
        xfer_reset(sh);
        sh->next_try_ns = route_now(svc) + svc->lease_ns / ROUTE_TICK_DIV;
    }
    sh->ps = to;
}

void route_shard_free(route_shard_t *sh)
{
    xfer_reset(sh);
    route_table_free(sh->table);
    route_table_free(sh->staging);
    sh->table = sh->staging = NULL;
}

static bool is_self(route_svc_t *svc, const kvm_runtime_t *rt)
{
    return kvm_runtime_equal(rt, &svc->self);
}

bool route_auth_read_valid(route_svc_t *svc, route_shard_t *sh)
{
    uint64_t now = route_now(svc);
    if (sh->ps == RP_ACTIVE && sh->rec.token == sh->m_token)
        return sh->m_installed && sh->rec.lease == svc->lease && now < svc->lease_deadline;
    if (sh->ps != RP_IDLE && is_self(svc, &sh->m_primary))
        return false; /* a primary that is not active serves nothing */
    return sh->m_installed && now < sh->m_read_deadline;
}

void route_auth_lease_lost(route_svc_t *svc)
{
    for (uint32_t i = 0; i < svc->policy.n_shards; i++) {
        route_shard_t *sh = &svc->shards[i];
        if (sh->ps != RP_IDLE && !sh->meta_busy)
            set_pstate(svc, sh, RP_IDLE);
    }
}

/* Inserts r into t unless t holds a version >= r's. */
static int put_if_newer(route_table_t *t, const kvm_route_t *r)
{
    route_entry_t *e = route_table_get(t, &r->ident);
    kvm_route_version_t ev = e ? route_entry_version(e) : KVM_ROUTE_VERSION_NONE;
    if (e && kvm_route_version_cmp(&ev, &r->version) >= 0)
        return 0;
    int rc = route_table_put(t, r, &e);
    if (rc == 0 && e) /* a newer version from the current primary: no unmirrored copy of ours */
        e->busy = e->dirty = false;
    return rc;
}

/* ---- replies -------------------------------------------------------------------------------- */

static void reply_framed(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                         uint16_t kind, route_shard_t *sh, int status,
                         const kvm_route_t *const *routes, uint32_t n, const uint8_t *frame,
                         uint32_t frame_len);

static void reply(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req, uint16_t kind,
                  route_shard_t *sh, int status, const kvm_route_t *const *routes, uint32_t n)
{
    reply_framed(svc, raw, req, kind, sh, status, routes, n, NULL, 0);
}

/* reply, with routes[0] sent as `frame` (its wire frame) when frame is not NULL. */
static void reply_framed(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                         uint16_t kind, route_shard_t *sh, int status,
                         const kvm_route_t *const *routes, uint32_t n, const uint8_t *frame,
                         uint32_t frame_len)
{
    route_msg_t m;
    route_msg_init(&m, kind);
    m.req_id = req->req_id;
    m.shard = req->shard;
    m.generation = sh->m_gen;
    m.token = sh->m_token;
    m.status = status;
    m.target = svc->self;
    m.rptrs = routes;
    m.n_routes = n;
    if (frame && n == 1) {
        m.rframe = frame;
        m.rframe_len = frame_len;
    }
    if (req->kind == RMSG_CAS_CLAIM_REQ && kind == RMSG_CAS_RESP) { /* route_claim.c */
        m.kind = RMSG_CAS_CLAIM_RESP;
        m.claim = status == 0 ? (uint8_t *)svc->claim_reply : NULL;
        m.claim_len = status == 0 && m.claim ? svc->claim_reply_len : 0;
    }
    if (route_inline_send(svc, raw->from, req, &m)) /* the bytes attached (route_inline.c) */
        return;
    route_inline_fill(svc, &m); /* a READ answered with a replica's bytes (route_inline.c) */
    route_send(svc, raw->from, &m);
}

/* Common admission of a request addressed to this authority for token req->token. */
static int admit(route_svc_t *svc, route_shard_t *sh, const route_msg_t *req, bool need_read)
{
    if (!is_self(svc, &req->target))
        return KVMESH_EUNAVAILABLE; /* addressed to another incarnation: epoch fencing */
    if (req->token < sh->m_token)
        return KVMESH_ESTALE_GENERATION;
    if (req->token > sh->m_token || !sh->m_installed)
        return KVMESH_EUNAVAILABLE;
    if (need_read && !route_auth_read_valid(svc, sh))
        return KVMESH_EUNAVAILABLE;
    return 0;
}

/* ---- mirroring ------------------------------------------------------------------------------ */

typedef struct mirror_op {
    uint32_t shard;
    kvm_ident_t ident; /* its encoding lives in this allocation, after frame (mirror_op_new) */
    kvm_route_version_t version;
    env_node_t reply_node; /* ENV_NODE_NONE: a repair re-mirror (no client) */
    uint64_t reply_req;
    uint32_t pending;
    bool failed;
    bool claim;           /* a CAS with a claim: answered with RMSG_CAS_CLAIM_RESP */
    uint8_t *claim_reply; /* its reply blob (owned), NULL = none */
    uint32_t claim_reply_len;
    /* the mirrored route's wire frame, encoded once for the mirrors and the CAS answer (the
     * answer sends it only while the entry still has op->version: the same route); 0 bytes:
     * not encoded (each message encodes the route itself) */
    uint32_t frame_len;
    uint8_t frame[];
} mirror_op_t;

/* A mirror op carrying the wire frame of r and a copy of r's identity, both in the op's one
 * allocation (the identity's encoding after the frame: op->ident is not kvm_ident_free'd).
 * Owned by the caller; mirror_op_free. */
static mirror_op_t *mirror_op_new(const kvm_route_t *r)
{
    uint8_t tmp[KVM_WIRE_MAX_RECORD_LEN];
    size_t n = 0;
    if (wire_route_encode(r, tmp, sizeof(tmp), &n) != 0)
        n = 0; /* (an invalid route: each message reports it when encoding) */
    mirror_op_t *op = calloc(1, sizeof(*op) + n + r->ident.enc_len);
    KVM_ASSERT(op != NULL);
    memcpy(op->frame, tmp, n);
    op->frame_len = (uint32_t)n;
    op->ident = r->ident;
    if (r->ident.enc) {
        op->ident.enc = op->frame + n;
        memcpy(op->ident.enc, r->ident.enc, r->ident.enc_len);
    }
    return op;
}

static void mirror_op_free(mirror_op_t *op)
{
    free(op->claim_reply);
    free(op); /* (op->ident's encoding is part of op) */
}

/* Sends m with op's route frame in place of encoding its first route again. */
static void use_frame(route_msg_t *m, const mirror_op_t *op)
{
    if (op->frame_len) {
        m->rframe = op->frame;
        m->rframe_len = op->frame_len;
    }
}

/* Ends op: the entry's flags, then the client's answer. e_now/r_now: when op ends within
 * mirror_start (no peer to wait for), the entry and the route it was started with (still
 * current: nothing ran in between), else NULL (looked up again: the entry may have changed). */
static void mirror_end(route_svc_t *svc, mirror_op_t *op, route_entry_t *e_now,
                       const kvm_route_t *r_now);

static void mirror_finish(route_svc_t *svc, mirror_op_t *op, route_entry_t *e_now,
                          const kvm_route_t *r_now)
{
    mirror_end(svc, op, e_now, r_now);
    mirror_op_free(op);
}

/* mirror_finish without freeing op (an op of mirror_route's stack: a set of one). */
static void mirror_end(route_svc_t *svc, mirror_op_t *op, route_entry_t *e_now,
                       const kvm_route_t *r_now)
{
    route_shard_t *sh = &svc->shards[op->shard];
    KVM_ASSERT(sh->mirrors_inflight > 0);
    KVM_ASSERT((e_now == NULL) == (r_now == NULL));
    sh->mirrors_inflight--;
    route_entry_t *e = e_now;
    bool current = e_now != NULL;
    if (!e_now) {
        e = sh->table ? route_table_get(sh->table, &op->ident) : NULL;
        kvm_route_version_t ev = e ? route_entry_version(e) : KVM_ROUTE_VERSION_NONE;
        current = e && kvm_route_version_equal(&ev, &op->version);
    }
    if (current) {
        e->busy = false;
        e->dirty = op->failed;
    }
    if (op->reply_node == ENV_NODE_NONE) /* the re-mirror of a dirty entry: a repair */
        obs_count(svc->metrics, route_repairs_total,
                  op->failed ? OBS_REPAIR_FAILED : OBS_REPAIR_REPAIRED, OBS_NONE, 1);
    if (op->reply_node != ENV_NODE_NONE) {
        route_msg_t req;
        route_msg_init(&req, op->claim ? RMSG_CAS_CLAIM_REQ : RMSG_CAS_REQ);
        req.req_id = op->reply_req;
        req.shard = op->shard;
        env_msg_t raw = {.from = op->reply_node};
        /* the answer's route: op's frame when it has one (the route is then not read:
         * reply_framed), else unpacked from the entry */
        kvm_route_t view;
        const kvm_route_t *rp = r_now;
        if (current && !rp && !op->frame_len) {
            route_table_view(sh->table, e, &view);
            rp = &view;
        }
        svc->claim_reply = op->claim_reply;
        svc->claim_reply_len = op->claim_reply_len;
        if (op->failed || !current) {
            obs_count(svc->metrics, route_cas_total, OBS_CAS_INDETERMINATE, OBS_NONE, 1);
            reply(svc, &raw, &req, RMSG_CAS_RESP, sh, KVMESH_EINDETERMINATE, NULL, 0);
        } else {
            obs_count(svc->metrics, route_cas_total, OBS_CAS_APPLIED, OBS_NONE, 1);
            /* current: the entry still has op->version, the route the frame encodes */
            reply_framed(svc, &raw, &req, RMSG_CAS_RESP, sh, 0, &rp, 1,
                         op->frame_len ? op->frame : NULL, op->frame_len);
        }
        svc->claim_reply = NULL;
        svc->claim_reply_len = 0;
    }
}

static void on_mirror_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    mirror_op_t *op = c->ctx;
    if (svc->freeing) {
        if (--op->pending == 0)
            mirror_op_free(op);
        return;
    }
    if (!resp || resp->status != 0)
        op->failed = true;
    obs_count(svc->metrics, route_mirror_publications_total,
              !resp               ? OBS_MIRROR_TIMEOUT
              : resp->status != 0 ? OBS_MIRROR_FAILED
                                  : OBS_MIRROR_ACKED,
              OBS_NONE, 1);
    if (--op->pending == 0)
        mirror_finish(svc, op, NULL, NULL);
}

/* Mirrors entry e, whose route is *r (a view of e, or the route e was just put from: equal,
 * route_pack.h), to every other member of the active set; answers the client at once when
 * there is no peer. r is read during the call only (the op keeps its frame and identity). */
static void mirror_route(route_svc_t *svc, route_shard_t *sh, route_entry_t *e,
                         const kvm_route_t *r, env_node_t reply_node, uint64_t reply_req)
{
    bool peers = false;
    for (uint32_t i = 0; i < sh->rec.n_set && !peers; i++)
        peers = !is_self(svc, &sh->rec.set[i].rt);
    if (!peers) {
        /* A set of one: nothing to wait for, so the op lives on this stack and ends now, with
         * no frame (the answer is the route's only encoding), no allocation and no copy of the
         * identity or of a claim's reply (both outlive the call). */
        mirror_op_t one;
        memset(&one, 0, sizeof(one));
        one.shard = sh->id;
        one.ident = r->ident;
        one.version = r->version;
        one.reply_node = reply_node;
        one.reply_req = reply_req;
        if (reply_node != ENV_NODE_NONE && svc->claim_seq) { /* a claimed CAS (route_claim.c) */
            one.claim = true;
            if (svc->claim_reply_len) { /* borrowed: mirror_end frees nothing */
                one.claim_reply = (uint8_t *)svc->claim_reply;
                one.claim_reply_len = svc->claim_reply_len;
            }
        }
        e->busy = true;
        sh->mirrors_inflight++;
        mirror_end(svc, &one, e, r);
        return;
    }
    mirror_op_t *op = mirror_op_new(r);
    op->shard = sh->id;
    op->version = r->version;
    op->reply_node = reply_node;
    op->reply_req = reply_req;
    if (reply_node != ENV_NODE_NONE && svc->claim_seq) { /* a claimed CAS (route_claim.c) */
        op->claim = true;
        if (svc->claim_reply_len) {
            op->claim_reply = malloc(svc->claim_reply_len);
            KVM_ASSERT(op->claim_reply != NULL);
            memcpy(op->claim_reply, svc->claim_reply, svc->claim_reply_len);
            op->claim_reply_len = svc->claim_reply_len;
        }
    }
    e->busy = true;
    sh->mirrors_inflight++;
    op->pending = 1; /* held until every call is issued */
#ifdef KVMESH_CHAOS_BROKEN_ACK_BEFORE_MIRROR
    /* Test-only broken variant (CMake KVMESH_CHAOS_BROKEN=ack_before_mirror): acknowledge the
     * CAS without mirroring it, so the chaos checker can show it catches a lost write. */
    if (--op->pending == 0)
        mirror_finish(svc, op, e, r);
    return;
#endif
    bool called = false; /* a peer was called: the entry is looked up again when it ends */
    for (uint32_t i = 0; i < sh->rec.n_set; i++) {
        const route_msg_member_t *mb = &sh->rec.set[i];
        if (is_self(svc, &mb->rt))
            continue;
        called = true;
        route_msg_t m;
        route_msg_init(&m, RMSG_MIRROR_REQ);
        m.shard = sh->id;
        m.generation = sh->rec.generation;
        m.token = sh->rec.token;
        m.target = mb->rt;
        m.rptrs = &r;
        m.n_routes = 1;
        use_frame(&m, op);
        op->pending++;
        if (!route_call(svc, mb->node, &m, RMSG_MIRROR_RESP, ROUTE_PEER_CALL_NS, true,
                        on_mirror_resp, op)) {
            op->pending--;
            op->failed = true;
            obs_count(svc->metrics, route_mirror_publications_total, OBS_MIRROR_FAILED, OBS_NONE,
                      1);
        }
    }
    if (--op->pending == 0) /* no peer: nothing ran since e was given r */
        mirror_finish(svc, op, called ? NULL : e, called ? NULL : r);
}

/* Mirrors entry e to every other member of the active set (done at once if no peer). */
static void mirror_start(route_svc_t *svc, route_shard_t *sh, route_entry_t *e,
                         env_node_t reply_node, uint64_t reply_req)
{
    kvm_route_t view;
    route_table_view(sh->table, e, &view);
    mirror_route(svc, sh, e, &view, reply_node, reply_req);
}

/* ---- request handlers ----------------------------------------------------------------------- */

static bool expected_matches(route_svc_t *svc, const rp_head_t *cur,
                             const kvm_route_version_t *expected)
{
    if (!cur)
        return kvm_route_version_is_none(expected);
    if (kvm_route_version_equal(&cur->version, expected))
        return true;
    /* a tombstone with a deadline (finalized, or pending: a quota tenant's delete) that is due
     * by this node's clock counts as absent; the replacing route takes the next version of the
     * shard's sequence, above the tombstone's (docs/tenancy.md "Purging a quota tenant's
     * tombstones", step 2) */
    return kvm_route_version_is_none(expected) && cur->tomb != KVM_TOMB_NONE &&
           cur->retain_until_ms != 0 && cur->retain_until_ms <= env_wall_ms(svc->env);
}

static void on_cas(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                   route_shard_t *sh)
{
    const kvm_route_t *next = &req->routes[0];
    bool as_primary = sh->ps == RP_ACTIVE && sh->rec.token == sh->m_token;
    int st = admit(svc, sh, req, true);
    bool not_primary = false;
    if (st == 0 && !as_primary && !(svc->bugs & ROUTE_BUG_SECONDARY_CAS)) {
        st = KVMESH_EUNAVAILABLE; /* secondaries never write */
        not_primary = true;
    }
    if (st == 0 && kvm_ident_shard(&next->ident, svc->policy.n_shards) != sh->id)
        st = KVMESH_EINVAL;
    if (st != 0) {
        if (st == KVMESH_ESTALE_GENERATION)
            obs_count(svc->metrics, route_cas_total, OBS_CAS_STALE_GENERATION, OBS_NONE, 1);
        else if (not_primary)
            obs_count(svc->metrics, route_cas_total, OBS_CAS_NOT_PRIMARY, OBS_NONE, 1);
        reply(svc, raw, req, RMSG_CAS_RESP, sh, st, NULL, 0);
        return;
    }
    route_entry_t *e = route_table_get(sh->table, &next->ident);
    if ((e && e->busy) ||
        (!svc->claim_seq && svc->n_claims && route_claim_holds(svc, sh->id, &next->ident))) {
        reply(svc, raw, req, RMSG_CAS_RESP, sh, KVMESH_EAGAIN, NULL, 0);
        return;
    }
    if (e && e->dirty && as_primary) {
        mirror_start(svc, sh, e, ENV_NODE_NONE, 0); /* repair first; the client retries */
        reply(svc, raw, req, RMSG_CAS_RESP, sh, KVMESH_EAGAIN, NULL, 0);
        return;
    }
    /* what the CAS decides on, read from the entry without unpacking its route (a refusal
     * sends the whole current route) */
    rp_head_t head;
    kvm_route_t view;
    if (e)
        route_table_head(sh->table, e, &head);
    if (!expected_matches(svc, e ? &head : NULL, &req->expected)) {
        obs_count(svc->metrics, route_cas_total, OBS_CAS_CONFLICT, OBS_NONE, 1);
        if (e)
            route_table_view(sh->table, e, &view);
        const kvm_route_t *cur = e ? &view : NULL;
        reply(svc, raw, req, RMSG_CAS_RESP, sh, KVMESH_ECONFLICT, cur ? &cur : NULL, cur ? 1 : 0);
        return;
    }
    if (req->kind == RMSG_CAS_CLAIM_REQ && !svc->claim_seq) {
        reply(svc, raw, req, RMSG_CAS_RESP, sh, KVMESH_EAGAIN, NULL, 0); /* never unclaimed */
        return;
    }
    /* The applied route: the request's with the version this primary assigns. A shallow copy
     * whose identity is borrowed from the request (which outlives this handler);
     * route_table_put copies what it keeps, so nr is never freed. */
    kvm_route_t nr = *next;
    kvm_route_version_t cur_v = e ? head.version : KVM_ROUTE_VERSION_NONE;
    uint64_t seq = svc->claim_seq ? svc->claim_seq /* reserved by its claim (route_claim.c) */
                   : as_primary   ? ++sh->seq
                                  : cur_v.primary_sequence + 1; /* BUG variant: local */
    nr.version = (kvm_route_version_t){sh->m_token, seq};
    nr.predecessor_version = cur_v;
    memset(&nr.predecessor_op, 0, sizeof(nr.predecessor_op));
    if (e)
        nr.predecessor_op = head.content_op;
    if (kvm_op_id_equal(&nr.predecessor_op, &nr.content_op))
        memset(&nr.predecessor_op, 0, sizeof(nr.predecessor_op));
    kvm_tomb_state_t from = e ? head.tomb : KVM_TOMB_NONE;
    int rc = kvm_route_version_cmp(&nr.version, &cur_v) > 0 ? 0 : KVMESH_ECONFLICT;
    if (rc == 0 && !kvm_route_tomb_transition_ok(from, nr.tomb) && from != KVM_TOMB_NONE &&
        nr.tomb != KVM_TOMB_NONE)
        rc = KVMESH_EINVAL;
    if (rc == 0)
        rc = kvm_route_validate(&nr) == 0 ? 0 : KVMESH_EINVAL;
    if (rc == 0)
        rc = route_table_put_at(sh->table, e, &nr, &e); /* (e: looked up above) */
    if (rc != 0) {
        reply(svc, raw, req, RMSG_CAS_RESP, sh, rc, NULL, 0);
        return;
    }
    if (!as_primary) { /* BUG variant: a secondary acknowledges its own write */
        obs_count(svc->metrics, route_cas_total, OBS_CAS_APPLIED, OBS_NONE, 1);
        route_table_view(sh->table, e, &view);
        const kvm_route_t *rp = &view;
        reply(svc, raw, req, RMSG_CAS_RESP, sh, 0, &rp, 1);
        return;
    }
    /* e holds nr now (packing is lossless: route_pack.h): mirrored and answered from nr
     * instead of unpacking e again */
    mirror_route(svc, sh, e, &nr, raw->from, req->req_id);
}

void route_auth_on_cas(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                       route_shard_t *sh)
{
    on_cas(svc, raw, req, sh);
}

bool route_auth_cas_would_apply(route_svc_t *svc, const route_msg_t *req, route_shard_t *sh)
{
    const kvm_route_t *next = &req->routes[0];
    if (admit(svc, sh, req, true) != 0 || sh->ps != RP_ACTIVE || sh->rec.token != sh->m_token ||
        kvm_ident_shard(&next->ident, svc->policy.n_shards) != sh->id)
        return false;
    route_entry_t *e = route_table_get(sh->table, &next->ident);
    if ((e && (e->busy || e->dirty)) || route_claim_holds(svc, sh->id, &next->ident))
        return false;
    rp_head_t head;
    if (e)
        route_table_head(sh->table, e, &head);
    return expected_matches(svc, e ? &head : NULL, &req->expected);
}

static void on_read(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                    route_shard_t *sh)
{
    int st = admit(svc, sh, req, true);
    if (st != 0) {
        reply(svc, raw, req, RMSG_READ_RESP, sh, st, NULL, 0);
        return;
    }
    route_entry_t *e = route_table_get(sh->table, &req->ident);
    if (!e) {
        reply(svc, raw, req, RMSG_READ_RESP, sh, KVMESH_ENOENT, NULL, 0);
        return;
    }
    if (e->busy || e->dirty) {
        /*
         * Not known to be on every member of the set (mirror in flight, or a partial mirror):
         * this copy could still be lost with this authority (a primary cut off from its set, whose
         * successor takes a secondary's state), so it is answered as unconfirmed (EAGAIN with the
         * route): a lookup never returns it unless a member confirms that version, and retries
         * while it is the newest copy (route_client.c lookup_evaluate); one that settles an
         * indeterminate put then keeps it indeterminate instead of acknowledging a write that a
         * failover would undo (found by the chaos harness: partition-minority-ack). A dirty entry
         * is re-mirrored now, so the key becomes readable again once the set is reachable.
         */
        bool as_primary = sh->ps == RP_ACTIVE && sh->rec.token == sh->m_token;
        if (e->dirty && !e->busy && as_primary)
            mirror_start(svc, sh, e, ENV_NODE_NONE, 0);
        kvm_route_t view;
        route_table_view(sh->table, e, &view);
        const kvm_route_t *up = &view; /* for the reader's conflict checks only */
        reply(svc, raw, req, RMSG_READ_RESP, sh, KVMESH_EAGAIN, &up, 1);
        return;
    }
    kvm_route_t view;
    route_table_view(sh->table, e, &view);
    const kvm_route_t *rp = &view;
    route_inline_begin(svc, req, rp);
    reply(svc, raw, req, RMSG_READ_RESP, sh, 0, &rp, 1);
    route_inline_end(svc);
}

static void on_mirror(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                      route_shard_t *sh)
{
    int st = admit(svc, sh, req, false);
    if (st == 0 && req->routes[0].version.fencing_token != sh->m_token)
        st = KVMESH_EPROTO;
    if (st == 0)
        st = put_if_newer(sh->table, &req->routes[0]);
    reply(svc, raw, req, RMSG_MIRROR_RESP, sh, st, NULL, 0);
}

/* A read repair from a client that saw this authority behind: counted here, at the repaired
 * authority, by outcome (applied / already current / refused). */
static void on_repair(route_svc_t *svc, const route_msg_t *req, route_shard_t *sh)
{
    if (admit(svc, sh, req, false) != 0 || req->routes[0].version.fencing_token > sh->m_token) {
        obs_count(svc->metrics, route_repairs_total, OBS_REPAIR_FAILED, OBS_NONE, 1);
        return;
    }
    route_entry_t *e = route_table_get(sh->table, &req->routes[0].ident);
    kvm_route_version_t ev = e ? route_entry_version(e) : KVM_ROUTE_VERSION_NONE;
    if (e && kvm_route_version_cmp(&ev, &req->routes[0].version) >= 0) {
        obs_count(svc->metrics, route_repairs_total, OBS_REPAIR_NOOP, OBS_NONE, 1);
        return;
    }
    int rc = route_table_put(sh->table, &req->routes[0], NULL);
    obs_count(svc->metrics, route_repairs_total, rc ? OBS_REPAIR_FAILED : OBS_REPAIR_REPAIRED,
              OBS_NONE, 1);
}

static void on_grant(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                     route_shard_t *sh)
{
    int st = admit(svc, sh, req, true);
    if (st == 0 && !(sh->ps == RP_ACTIVE && sh->rec.token == sh->m_token))
        st = KVMESH_EUNAVAILABLE;
    route_msg_t m;
    route_msg_init(&m, RMSG_GRANT_RESP);
    m.req_id = req->req_id;
    m.shard = sh->id;
    m.generation = sh->m_gen;
    m.token = sh->m_token;
    m.status = st;
    m.target = svc->self;
    if (st == 0) {
        uint64_t now = route_now(svc);
        uint64_t rem = svc->lease_deadline - now;
        if (rem > svc->lease_ns / ROUTE_GRANT_MAX_DIV)
            rem = svc->lease_ns / ROUTE_GRANT_MAX_DIV;
        if (now + rem > sh->max_grant_until)
            sh->max_grant_until = now + rem;
        m.remaining_ns = rem;
    }
    route_send(svc, raw->from, &m);
}

/* Adopts a newer token as this member's fence. */
static void fence(route_shard_t *sh, uint64_t gen, uint64_t token)
{
    if (token > sh->m_token) {
        sh->m_token = token;
        sh->m_gen = gen;
        sh->m_installed = false;
        sh->m_read_deadline = 0;
    }
}

static void on_fetch(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                     route_shard_t *sh)
{
    int st = 0;
    if (!is_self(svc, &req->target))
        st = KVMESH_EUNAVAILABLE;
    else if (req->token < sh->m_token)
        st = KVMESH_ESTALE_GENERATION;
    if (st != 0) {
        reply(svc, raw, req, RMSG_FETCH_RESP, sh, st, NULL, 0);
        return;
    }
    fence(sh, req->generation, req->token);
    const kvm_route_t *page[ROUTE_MSG_MAX_ROUTES];
    kvm_route_t views[ROUTE_MSG_MAX_ROUTES];
    uint32_t n = 0,
             lim = req->limit ? KVM_MIN(req->limit, ROUTE_MSG_MAX_ROUTES) : ROUTE_MSG_MAX_ROUTES;
    route_entry_t *e =
        sh->table ? route_table_next(sh->table, req->has_ident ? &req->ident : NULL) : NULL;
    for (; e && n < lim; e = route_table_after(sh->table, e)) {
        route_table_view(sh->table, e, &views[n]);
        page[n] = &views[n];
        n++;
    }
    route_msg_t m;
    route_msg_init(&m, RMSG_FETCH_RESP);
    m.req_id = req->req_id;
    m.shard = sh->id;
    m.generation = sh->m_gen;
    m.token = sh->m_token;
    m.target = svc->self;
    m.more = e != NULL;
    m.rptrs = page;
    m.n_routes = n;
    route_send(svc, raw->from, &m);
}

static void on_install(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                       route_shard_t *sh)
{
    int st = 0;
    if (!is_self(svc, &req->target))
        st = KVMESH_EUNAVAILABLE;
    else if (req->token < sh->m_token)
        st = KVMESH_ESTALE_GENERATION;
    if (st != 0) {
        reply(svc, raw, req, RMSG_INSTALL_RESP, sh, st, NULL, 0);
        return;
    }
    if (req->token == sh->m_token && sh->m_installed) {
        reply(svc, raw, req, RMSG_INSTALL_RESP, sh, 0, NULL, 0); /* a duplicate */
        return;
    }
    fence(sh, req->generation, req->token);
    sh->m_primary = req->primary;
    sh->m_primary_node = req->primary_node;
    sh->m_n_set = req->n_set;
    memcpy(sh->m_set, req->set, req->n_set * sizeof(req->set[0]));
    if (!sh->staging || sh->m_staging_token != req->token) {
        route_table_free(sh->staging);
        sh->staging = route_table_new();
        sh->m_staging_token = req->token;
        if (!sh->staging) {
            reply(svc, raw, req, RMSG_INSTALL_RESP, sh, KVMESH_ENOMEM, NULL, 0);
            return;
        }
    }
    for (uint32_t i = 0; i < req->n_routes; i++)
        if (put_if_newer(sh->staging, &req->routes[i]) != 0)
            st = KVMESH_ENOMEM;
    if (st == 0 && (req->flags & RMSG_INSTALL_DONE)) {
        route_table_free(sh->table);
        sh->table = sh->staging;
        sh->staging = NULL;
        sh->m_installed = true;
        sh->m_read_deadline = 0;
        sh->m_next_grant_ns = 0;
    }
    reply(svc, raw, req, RMSG_INSTALL_RESP, sh, st, NULL, 0);
}

static void on_owner(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                     route_shard_t *sh)
{
    int st = admit(svc, sh, req, true);
    const kvm_route_t *page[ROUTE_MSG_MAX_ROUTES];
    kvm_route_t views[ROUTE_MSG_MAX_ROUTES];
    uint32_t n = 0;
    route_entry_t *e = NULL;
    if (st == 0) {
        uint32_t lim =
            req->limit ? KVM_MIN(req->limit, ROUTE_MSG_MAX_ROUTES) : ROUTE_MSG_MAX_ROUTES;
        e = route_table_owner_next(sh->table, &req->owner, req->has_ident ? &req->ident : NULL);
        for (; e && n < lim; e = route_table_owner_after(sh->table, &req->owner, e)) {
            route_table_view(sh->table, e, &views[n]);
            page[n] = &views[n];
            n++;
        }
    }
    route_msg_t m;
    route_msg_init(&m, RMSG_OWNER_RESP);
    m.req_id = req->req_id;
    m.shard = sh->id;
    m.generation = sh->m_gen;
    m.token = sh->m_token;
    m.status = st;
    m.target = svc->self;
    m.more = e != NULL;
    m.rptrs = page;
    m.n_routes = n;
    route_send(svc, raw->from, &m);
}

/* The purge's repair of a dirty entry (route_svc.c purge_tick): re-mirrored when this runtime
 * is the shard's active primary, as a read of it would (a dirty tombstone no CAS or read touches
 * again would otherwise never be clean, and never purged). True when a repair started.
 * Elsewhere the dirty mark has no repair duty: any runtime answers a read of a dirty entry
 * unconfirmed, and the next primary's state transfer (or its install here) decides the key
 * (docs/reliability.md "Tombstone purge"). */
bool route_auth_repair(route_svc_t *svc, route_shard_t *sh, route_entry_t *e)
{
    bool as_primary = sh->ps == RP_ACTIVE && sh->rec.token == sh->m_token;
    if (!e->dirty || e->busy || !as_primary || (svc->bugs & ROUTE_BUG_PURGE_NO_REPAIR))
        return false;
    mirror_start(svc, sh, e, ENV_NODE_NONE, 0);
    return true;
}

void route_auth_on_request(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *m)
{
    route_shard_t *sh = &svc->shards[m->shard];
    if (!sh->table && !(sh->table = route_table_new()))
        return;
    switch (m->kind) {
    case RMSG_CAS_REQ:
        on_cas(svc, raw, m, sh);
        break;
    case RMSG_CAS_CLAIM_REQ:
        route_claim_on_req(svc, raw, m, sh);
        break;
    case RMSG_READ_REQ:
        on_read(svc, raw, m, sh);
        break;
    case RMSG_MIRROR_REQ:
        on_mirror(svc, raw, m, sh);
        break;
    case RMSG_GRANT_REQ:
        on_grant(svc, raw, m, sh);
        break;
    case RMSG_FETCH_REQ:
        on_fetch(svc, raw, m, sh);
        break;
    case RMSG_INSTALL_REQ:
        on_install(svc, raw, m, sh);
        break;
    case RMSG_REPAIR:
        on_repair(svc, m, sh);
        break;
    case RMSG_OWNER_REQ:
        on_owner(svc, raw, m, sh);
        break;
    default:
        break;
    }
}

/* ---- acquisition, transfer, activation, resignation ----------------------------------------- */

static bool lease_ok(route_svc_t *svc)
{
    return svc->lease != 0 && route_now(svc) < svc->lease_deadline;
}

static void to_idle(route_svc_t *svc, route_shard_t *sh)
{
    set_pstate(svc, sh, RP_IDLE);
}

static int rec_txn(route_svc_t *svc, route_shard_t *sh, const route_rec_t *nr, route_mreq_fn fn)
{
    char key[KS_KEY_CAP];
    uint8_t val[ROUTE_REC_MAX_LEN];
    size_t vlen;
    int rc = route_shard_meta_key(svc, sh->id, key, sizeof(key));
    if (rc == 0)
        rc = route_rec_encode(nr, val, sizeof(val), &vlen);
    if (rc != 0)
        return rc;
    meta_cmp_t cmp =
        sh->rec_mod_rev
            ? (meta_cmp_t){.key = key,
                           .target = META_CMP_MOD_REV,
                           .op = META_EQ,
                           .num = sh->rec_mod_rev}
            : (meta_cmp_t){.key = key, .target = META_CMP_EXISTS, .op = META_EQ, .num = 0};
    meta_op_t put = {.type = META_OP_PUT, .key = key, .value = val, .value_len = vlen};
    route_mreq_t *q = route_mreq_new(svc, fn, NULL, sh->id);
    if (!q)
        return KVMESH_ENOMEM;
    rc = meta_txn(svc->meta, &cmp, 1, &put, 1, NULL, 0, ROUTE_META_TIMEOUT_MS, route_mreq_cb, q);
    if (rc != 0) {
        q->svc = NULL;
        route_mreq_cb(q, &(meta_result_t){.rc = rc, .errmsg = ""});
        return rc;
    }
    sh->meta_busy = true;
    return 0;
}

static void start_install(route_svc_t *svc, route_shard_t *sh);
static void fetch_next(route_svc_t *svc, route_shard_t *sh);

static void on_activate(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    route_shard_t *sh = &svc->shards[q->shard];
    sh->meta_busy = false;
    if (sh->ps != RP_ACTIVATE)
        return;
    if (res->rc != 0 || !res->succeeded || !lease_ok(svc) || sh->rec.lease != svc->lease) {
        to_idle(svc, sh);
        return;
    }
    bool transferred = sh->rec.n_src > 0;
    sh->rec.state = ROUTE_REC_ACTIVE;
    sh->rec.n_src = sh->rec.n_set;
    memcpy(sh->rec.src, sh->rec.set, sizeof(sh->rec.set));
    sh->rec_mod_rev = res->rev;
    sh->seq = 0;
    if (transferred)
        svc->stats.state_transfers++;
    xfer_reset(sh); /* the transfer is complete */
    set_pstate(svc, sh, RP_ACTIVE);
}

static void activate(route_svc_t *svc, route_shard_t *sh)
{
    set_pstate(svc, sh, RP_ACTIVATE);
    route_rec_t nr = sh->rec;
    nr.state = ROUTE_REC_ACTIVE;
    nr.n_src = nr.n_set;
    memcpy(nr.src, nr.set, sizeof(nr.set));
    if (rec_txn(svc, sh, &nr, on_activate) != 0)
        to_idle(svc, sh);
}

static void install_page(route_svc_t *svc, route_shard_t *sh, uint32_t i);

static void on_install_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    if (svc->freeing)
        return;
    route_shard_t *sh = &svc->shards[c->idx];
    if (sh->ps != RP_INSTALL || c->u64 != sh->rec.token)
        return;
    uint32_t i = (uint32_t)(uintptr_t)c->ctx;
    route_install_peer_t *p = &sh->inst[i];
    p->busy = false;
    if (!resp || resp->status != 0) {
        to_idle(svc, sh);
        return;
    }
    if (p->done) {
        for (uint32_t j = 0; j < sh->n_inst; j++)
            if (!sh->inst[j].done || sh->inst[j].busy)
                return;
        activate(svc, sh);
        return;
    }
    install_page(svc, sh, i);
}

static void install_page(route_svc_t *svc, route_shard_t *sh, uint32_t i)
{
    route_install_peer_t *p = &sh->inst[i];
    const kvm_route_t *page[ROUTE_MSG_MAX_ROUTES];
    kvm_route_t views[ROUTE_MSG_MAX_ROUTES];
    uint32_t n = 0;
    route_entry_t *e = route_table_next(sh->xfer, p->begun ? &p->after : NULL);
    for (; e && n < ROUTE_MSG_MAX_ROUTES; e = route_table_after(sh->xfer, e)) {
        route_table_view(sh->xfer, e, &views[n]);
        page[n] = &views[n];
        n++;
    }
    route_msg_t m;
    route_msg_init(&m, RMSG_INSTALL_REQ);
    m.shard = sh->id;
    m.generation = sh->rec.generation;
    m.token = sh->rec.token;
    m.target = p->m.rt;
    m.flags = (p->begun ? 0 : RMSG_INSTALL_BEGIN) | (e ? 0 : RMSG_INSTALL_DONE);
    m.primary = svc->self;
    m.primary_node = svc->self_node;
    m.n_set = sh->rec.n_set;
    memcpy(m.set, sh->rec.set, sh->rec.n_set * sizeof(m.set[0]));
    m.rptrs = page;
    m.n_routes = n;
    if (n) {
        kvm_ident_free(&p->after);
        if (kvm_ident_copy(&p->after, &page[n - 1]->ident) != 0) {
            to_idle(svc, sh);
            return;
        }
    }
    p->begun = true;
    p->done = e == NULL;
    p->busy = true;
    route_call_t *c = route_call(svc, p->m.node, &m, RMSG_INSTALL_RESP, ROUTE_PEER_CALL_NS, true,
                                 on_install_resp, (void *)(uintptr_t)i);
    if (!c) {
        to_idle(svc, sh);
        return;
    }
    c->idx = sh->id;
    c->u64 = sh->rec.token;
}

static void start_install(route_svc_t *svc, route_shard_t *sh)
{
    sh->src_absent_since_ns = 0;
    set_pstate(svc, sh, RP_INSTALL);
    if (!sh->xfer && !(sh->xfer = route_table_new())) {
        to_idle(svc, sh);
        return;
    }
    /* install on self first (a copy: the transfer table keeps feeding the others) */
    route_table_t *mine = route_table_new();
    if (!mine) {
        to_idle(svc, sh);
        return;
    }
    kvm_route_t view;
    for (route_entry_t *e = route_table_next(sh->xfer, NULL); e; e = route_table_after(sh->xfer, e))
        if ((route_table_view(sh->xfer, e, &view), route_table_put(mine, &view, NULL)) != 0) {
            route_table_free(mine);
            to_idle(svc, sh);
            return;
        }
    route_table_free(sh->table);
    sh->table = mine;
    sh->m_installed = true;
    sh->n_inst = 0;
    for (uint32_t i = 0; i < sh->rec.n_set; i++) {
        if (is_self(svc, &sh->rec.set[i].rt))
            continue;
        memset(&sh->inst[sh->n_inst], 0, sizeof(sh->inst[0]));
        sh->inst[sh->n_inst++].m = sh->rec.set[i];
    }
    if (sh->n_inst == 0) {
        activate(svc, sh);
        return;
    }
    for (uint32_t i = 0; i < sh->n_inst && sh->ps == RP_INSTALL; i++)
        install_page(svc, sh, i);
}

static void on_fetch_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    if (svc->freeing)
        return;
    route_shard_t *sh = &svc->shards[c->idx];
    if (sh->ps != RP_FETCH || c->u64 != sh->rec.token)
        return;
    if (!resp || resp->status != 0) {
        /* this source failed: start over from the next one */
        route_table_clear(sh->xfer);
        kvm_ident_free(&sh->fetch_after);
        sh->fetch_started = false;
        sh->fetch_src++;
        fetch_next(svc, sh);
        return;
    }
    for (uint32_t i = 0; i < resp->n_routes; i++)
        if (put_if_newer(sh->xfer, &resp->routes[i]) != 0) {
            to_idle(svc, sh);
            return;
        }
    if (resp->n_routes) {
        kvm_ident_free(&sh->fetch_after);
        if (kvm_ident_copy(&sh->fetch_after, &resp->routes[resp->n_routes - 1].ident) != 0) {
            to_idle(svc, sh);
            return;
        }
        sh->fetch_started = true;
    }
    if (resp->more && resp->n_routes) {
        fetch_next(svc, sh);
        return;
    }
    start_install(svc, sh);
}

/*
 * True when no member of the state-transfer source (rec.src, the last ACTIVE set) can ever
 * answer a fetch. A source listed in the membership snapshot only as a newer incarnation of its
 * id (restarted) is gone at once: its state went with the old process. A source absent from the
 * snapshot is gone only after ROUTE_SRC_GONE_LEASES shard leases with no source listed: its
 * record lapses with its lease while a stalled process, or one cut off from metadata, still
 * holds its state and comes back with the same epoch (guarantee 3 of docs/protocol.md section
 * 5). A source that is a live member with the same epoch may answer a later fetch. Until then
 * the shard stays unavailable (fail-closed).
 */
static bool src_all_gone(route_svc_t *svc, route_shard_t *sh)
{
    bool absent = false;
    for (uint32_t i = 0; i < sh->rec.n_src; i++) {
        const kvm_runtime_t *rt = &sh->rec.src[i].rt;
        if (is_self(svc, rt)) {
            sh->src_absent_since_ns = 0;
            return false;
        }
        bool restarted = kvm_runtime_is_stale(rt, &svc->self); /* our own old incarnation */
        for (size_t j = 0; j < svc->n_members && !restarted; j++) {
            const kvm_runtime_t *m = &svc->members[j].rt;
            if (kvm_runtime_equal(m, rt)) {
                sh->src_absent_since_ns = 0;
                return false;
            }
            restarted = kvm_runtime_is_stale(rt, m);
        }
        absent |= !restarted;
    }
    if (!absent)
        return true;
    uint64_t set = sh->rec.n_src; /* the same src set across acquisition attempts */
    for (uint32_t i = 0; i < sh->rec.n_src; i++)
        set = set * 0x9e3779b97f4a7c15ull + kvm_id128_hash(&sh->rec.src[i].rt.id) +
              sh->rec.src[i].rt.epoch;
    uint64_t now = route_now(svc);
    if (!sh->src_absent_since_ns || sh->src_absent_set != set) {
        sh->src_absent_since_ns = now ? now : 1;
        sh->src_absent_set = set;
    }
    return now - sh->src_absent_since_ns >= ROUTE_SRC_GONE_LEASES * svc->lease_ns;
}

/* Fetches the next page from source rec.src[fetch_src] (or copies locally when it is us). */
static void fetch_next(route_svc_t *svc, route_shard_t *sh)
{
    while (sh->fetch_src < sh->rec.n_src) {
        const route_msg_member_t *src = &sh->rec.src[sh->fetch_src];
        if (is_self(svc, &src->rt)) {
            if (sh->table)
                for (route_entry_t *e = route_table_next(sh->table, NULL); e;
                     e = route_table_after(sh->table, e)) {
                    kvm_route_t view;
                    route_table_view(sh->table, e, &view);
                    if (put_if_newer(sh->xfer, &view) != 0) {
                        to_idle(svc, sh);
                        return;
                    }
                }
            start_install(svc, sh);
            return;
        }
        route_msg_t m;
        route_msg_init(&m, RMSG_FETCH_REQ);
        m.shard = sh->id;
        m.generation = sh->rec.generation;
        m.token = sh->rec.token;
        m.target = src->rt;
        m.limit = ROUTE_MSG_MAX_ROUTES;
        if (sh->fetch_started) {
            m.has_ident = true;
            m.ident = sh->fetch_after; /* borrowed for the encode */
        }
        route_call_t *c = route_call(svc, src->node, &m, RMSG_FETCH_RESP, ROUTE_PEER_CALL_NS, true,
                                     on_fetch_resp, NULL);
        if (c) {
            c->idx = sh->id;
            c->u64 = sh->rec.token;
            return;
        }
        sh->fetch_src++;
    }
    if (!(svc->bugs & ROUTE_BUG_STRAND_LOST) && src_all_gone(svc, sh)) {
        /* No source can ever answer: take over with the state recoverable, which is none
         * (docs/protocol.md section 5, guarantee 3). Fencing is unchanged: this acquisition
         * already waited for the old primary's lease (or its resignation). */
        svc->stats.state_lost++;
        route_table_clear(sh->xfer);
        start_install(svc, sh);
        return;
    }
    to_idle(svc, sh); /* no source answered yet: the shard stays unavailable, retried later */
}

static void on_acquire(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    route_shard_t *sh = &svc->shards[q->shard];
    sh->meta_busy = false;
    if (sh->ps != RP_ACQUIRE)
        return;
    if (res->rc != 0 || !res->succeeded) {
        to_idle(svc, sh);
        return;
    }
    sh->rec = sh->xfer_rec_pending;
    sh->rec_mod_rev = res->rev;
    /* this runtime is fenced at the new token too (it is a member of the new set) */
    sh->m_token = sh->rec.token;
    sh->m_gen = sh->rec.generation;
    sh->m_installed = false;
    sh->m_primary = svc->self;
    sh->m_primary_node = svc->self_node;
    sh->m_n_set = sh->rec.n_set;
    memcpy(sh->m_set, sh->rec.set, sizeof(sh->m_set));
    xfer_reset(sh);
    if (!(sh->xfer = route_table_new())) {
        to_idle(svc, sh);
        return;
    }
    if (sh->rec.n_src == 0 || (svc->bugs & ROUTE_BUG_SKIP_TRANSFER)) {
        start_install(svc, sh);
        return;
    }
    set_pstate(svc, sh, RP_FETCH);
    sh->fetch_src = 0;
    sh->fetch_started = false;
    fetch_next(svc, sh);
}

static void acquire(route_svc_t *svc, route_shard_t *sh)
{
    route_msg_member_t set[ROUTE_MSG_MAX_SET];
    uint32_t n;
    route_desired_set(svc, sh->id, set, &n);
    if (n == 0 || !is_self(svc, &set[0].rt) || !lease_ok(svc)) {
        to_idle(svc, sh);
        return;
    }
    set_pstate(svc, sh, RP_ACQUIRE);
    route_rec_t nr;
    memset(&nr, 0, sizeof(nr));
    nr.generation = svc->generation;
    nr.token = sh->rec.token + 1;
    nr.state = ROUTE_REC_TRANSFERRING;
    nr.primary = svc->self;
    nr.primary_node = svc->self_node;
    nr.lease = svc->lease;
    nr.n_set = n;
    memcpy(nr.set, set, n * sizeof(set[0]));
    if (sh->rec_mod_rev) {
        nr.n_src = sh->rec.n_src;
        memcpy(nr.src, sh->rec.src, sizeof(nr.src));
    }
    if (nr.token <= sh->m_token && !(svc->bugs & ROUTE_BUG_SKIP_TRANSFER))
        nr.token = sh->m_token + 1; /* never below a fence this runtime has seen */
    sh->xfer_rec_pending = nr;
    if (rec_txn(svc, sh, &nr, on_acquire) != 0)
        to_idle(svc, sh);
}

static void on_lease_ttl(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    route_shard_t *sh = &svc->shards[q->shard];
    sh->meta_busy = false;
    if (sh->ps != RP_LEASE_CHECK)
        return;
    if (res->rc == KVMESH_ENOENT) {
        acquire(svc, sh); /* the holder's lease expired in metadata */
        return;
    }
    to_idle(svc, sh); /* alive (or unknown): poll again later */
}

static void on_read_rec(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    route_shard_t *sh = &svc->shards[q->shard];
    sh->meta_busy = false;
    if (sh->ps != RP_READ_REC)
        return;
    if (res->rc != 0) {
        to_idle(svc, sh);
        return;
    }
    if (!res->kv.found) {
        memset(&sh->rec, 0, sizeof(sh->rec));
        sh->rec_mod_rev = 0;
        acquire(svc, sh);
        return;
    }
    route_rec_t rec;
    if (route_rec_decode(res->kv.value, res->kv.value_len, &rec) != 0) {
        to_idle(svc, sh);
        return;
    }
    route_localize_rec(svc, &rec);
    sh->rec = rec;
    sh->rec_mod_rev = res->kv.mod_rev;
    route_client_view_from_rec(svc, sh, &rec);
    bool mine = rec.lease == svc->lease && kvm_id128_equal(&rec.primary.id, &svc->self.id) &&
                rec.primary.epoch == svc->self.epoch;
    if (rec.state == ROUTE_REC_RESIGNED || (svc->bugs & ROUTE_BUG_SKIP_TRANSFER)) {
        acquire(svc, sh);
    } else if (mine) {
        if (route_now(svc) > sh->max_grant_until)
            acquire(svc, sh); /* re-acquire our own shard once our grants ran out */
        else
            to_idle(svc, sh);
    } else {
        set_pstate(svc, sh, RP_LEASE_CHECK);
        route_mreq_t *q2 = route_mreq_new(svc, on_lease_ttl, NULL, sh->id);
        if (!q2 ||
            meta_lease_ttl(svc->meta, rec.lease, ROUTE_META_TIMEOUT_MS, route_mreq_cb, q2) != 0) {
            if (q2) {
                q2->svc = NULL;
                route_mreq_cb(q2, &(meta_result_t){.rc = KVMESH_EUNAVAILABLE, .errmsg = ""});
            }
            to_idle(svc, sh);
            return;
        }
        sh->meta_busy = true;
    }
}

static void read_rec(route_svc_t *svc, route_shard_t *sh)
{
    char key[KS_KEY_CAP];
    if (route_shard_meta_key(svc, sh->id, key, sizeof(key)) != 0)
        return;
    set_pstate(svc, sh, RP_READ_REC);
    route_mreq_t *q = route_mreq_new(svc, on_read_rec, NULL, sh->id);
    if (!q || meta_get(svc->meta, key, ROUTE_META_TIMEOUT_MS, route_mreq_cb, q) != 0) {
        if (q) {
            q->svc = NULL;
            route_mreq_cb(q, &(meta_result_t){.rc = KVMESH_EUNAVAILABLE, .errmsg = ""});
        }
        to_idle(svc, sh);
        return;
    }
    sh->meta_busy = true;
}

static void on_resign(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    route_shard_t *sh = &svc->shards[q->shard];
    sh->meta_busy = false;
    if (res->rc == 0 && res->succeeded) {
        sh->rec.state = ROUTE_REC_RESIGNED;
        sh->rec_mod_rev = res->rev;
    } else if (res->rc == 0) {
        memset(&sh->rec, 0, sizeof(sh->rec)); /* someone else changed it: not ours any more */
        sh->rec_mod_rev = 0;
    }
    if (sh->ps == RP_RESIGN_TXN)
        to_idle(svc, sh);
}

/* ---- grants (secondary side) ---------------------------------------------------------------- */

static void on_grant_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    if (svc->freeing)
        return;
    route_shard_t *sh = &svc->shards[c->idx];
    sh->m_grant_busy = false;
    uint64_t now = route_now(svc);
    if (resp && resp->status == 0 && resp->token == sh->m_token && c->u64 == sh->m_token &&
        sh->m_installed) {
        uint64_t d = route_conservative_deadline(sh->m_grant_sent_ns, resp->remaining_ns);
        if (d > sh->m_read_deadline)
            sh->m_read_deadline = d;
        sh->m_next_grant_ns = now + svc->lease_ns / ROUTE_GRANT_RENEW_DIV;
    } else {
        if (resp && resp->status == KVMESH_ESTALE_GENERATION && resp->token > sh->m_token)
            fence(sh, resp->generation, resp->token);
        sh->m_next_grant_ns = now + 2 * ROUTE_RETRY_NS;
    }
}

static void grant_renew(route_svc_t *svc, route_shard_t *sh)
{
    uint64_t now = route_now(svc);
    if (!sh->m_installed || sh->m_grant_busy || now < sh->m_next_grant_ns ||
        is_self(svc, &sh->m_primary) || sh->m_primary_node == ENV_NODE_NONE)
        return;
    route_msg_t m;
    route_msg_init(&m, RMSG_GRANT_REQ);
    m.shard = sh->id;
    m.generation = sh->m_gen;
    m.token = sh->m_token;
    m.target = sh->m_primary;
    sh->m_grant_sent_ns = now;
    route_call_t *c = route_call(svc, sh->m_primary_node, &m, RMSG_GRANT_RESP, ROUTE_ATTEMPT_NS,
                                 false, on_grant_resp, NULL);
    if (c) {
        c->idx = sh->id;
        c->u64 = sh->m_token;
        sh->m_grant_busy = true;
    }
}

/* ---- tick ----------------------------------------------------------------------------------- */

void route_auth_tick(route_svc_t *svc, route_shard_t *sh)
{
    grant_renew(svc, sh);
    if (sh->meta_busy)
        return;
    route_msg_member_t set[ROUTE_MSG_MAX_SET];
    uint32_t n;
    route_desired_set(svc, sh->id, set, &n);
    bool desired = n > 0 && is_self(svc, &set[0].rt);
    uint64_t now = route_now(svc);
    switch (sh->ps) {
    case RP_IDLE:
        if (svc->tick_budget == 0)
            break;
        if (desired && lease_ok(svc) && now >= sh->next_try_ns) {
            svc->tick_budget--;
            read_rec(svc, sh);
        } else if (!desired && sh->rec_mod_rev && sh->rec.state != ROUTE_REC_RESIGNED &&
                   is_self(svc, &sh->rec.primary) && sh->rec.lease == svc->lease &&
                   now >= sh->next_try_ns) {
            svc->tick_budget--;
            set_pstate(svc, sh, RP_RESIGN); /* release a record we hold but abandoned */
        }
        break;
    case RP_ACTIVE:
        if (sh->m_token > sh->rec.token) {
            to_idle(svc, sh); /* fenced by a newer generation */
            break;
        }
        if (!desired || !route_set_eq(set, n, sh->rec.set, sh->rec.n_set))
            set_pstate(svc, sh, RP_RESIGN); /* stop serving and granting at once */
        break;
    case RP_RESIGN:
        if (now <= sh->max_grant_until || sh->mirrors_inflight)
            break;
        if (desired && lease_ok(svc)) {
            read_rec(svc, sh);
        } else {
            set_pstate(svc, sh, RP_RESIGN_TXN);
            route_rec_t nr = sh->rec;
            nr.state = ROUTE_REC_RESIGNED;
            if (rec_txn(svc, sh, &nr, on_resign) != 0)
                to_idle(svc, sh);
        }
        break;
    default:
        break;
    }
}
