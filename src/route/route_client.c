/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_client.c — the caller side of the route protocol: lookup, CAS and owner enumeration
 * against a shard's authority set, with the shard view (generation, token, primary, set) cached
 * per shard and refreshed from the shard-authority record in metadata only when an authority
 * answers stale_generation/unavailable (never per request in steady state).
 *
 * Client operation life:  WAIT_VIEW <-> IN_FLIGHT -> (backoff) -> ... -> DONE
 *   lookup: one READ to every member of the view's set; the attempt ends when every READ call
 *           ended (answered, or its deadline ROUTE_ATTEMPT_NS passed); any stale_generation ->
 *           refresh and retry; no valid answer -> refresh and retry; else the highest version
 *           wins, equal versions with different values fail the read (KVMESH_ECORRUPT,
 *           protocol_conflicts++), lower/missing copies get a REPAIR;
 *   CAS:    one CAS to the view's primary, never retransmitted (a duplicate could apply twice);
 *           stale/unavailable/busy answers (not applied) retry; a lost reply is ETIMEDOUT;
 *   owner:  one shard at a time from the cursor, from the shard primary's owner index.
 * Every operation ends by its deadline (request_timeout_ms). An op is freed once it is done and
 * none of its peer calls is pending.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "meta/keyspace.h"
#include "route/route_int.h"
#include "route/route_metaonly.h"

enum op_kind { OP_LOOKUP, OP_CAS, OP_OWNER };

struct route_op {
    route_op_t *next, *prev;
    route_svc_t *svc;
    enum op_kind kind;
    uint32_t shard;
    kvm_ident_t ident;
    kvm_route_version_t expected;
    route_lookup_cb lcb;
    route_cas_cb ccb;
    route_cas_claim_cb kcb; /* CAS with a claim (route_cas_claim): ccb is NULL */
    uint8_t *claim;         /* its claim (owned) */
    uint32_t claim_len;
    uint8_t *claim_reply; /* the primary's reply blob of the answer being finished (owned) */
    uint32_t claim_reply_len;
    route_owner_cb ocb;
    void *arg;
    uint64_t deadline;
    uint64_t attempt;
    uint32_t calls_pending;
    bool done;
    env_timer_id timer;
    int last_rc;
    route_cost_t *cost; /* caller's accounting (route_*_costed), NULL = none; not touched after
                           the callback */
    /* batching window (route_batch_begin/end): started with the window's turn; win_sent and
     * win_node say where its first attempt went (counted by window_run) */
    bool in_window, win_sent;
    bool win_park; /* its shard had no view: moved to the window that waits for views */
    env_node_t win_node;
    /* read attempt (its per-member arrays are at the end of the record) */
    uint32_t n_wait, n_members;
    /* the answers: got[i] is set where has[i] (owned); allocated by the first attempt for
     * got_cap >= n_members entries (not inline: an op is allocated per lookup and CAS, and 32
     * inline routes made it ~40 KiB to zero each time) */
    kvm_route_t *got;
    uint32_t got_cap;
    /* the ident's encoding of a lookup (op->ident) or a CAS (op->route.ident), which borrow it:
     * kept with the record like got (grown, never shrunk), so an op copies its caller's ident
     * (the caller's may go when the call returns) without an allocation of its own */
    uint8_t *enc_buf;
    uint32_t enc_cap;
    bool stale;
    /* inline read (route_lookup_inline): the caller's sink, and the version whose payload its
     * buffer holds in this attempt (inl_have) */
    route_inline_t *inl;
    bool inl_have;
    kvm_route_version_t inl_ver;
    /* owner scan */
    kvm_runtime_id_t owner;
    uint32_t limit, n_page;
    kvm_route_t *page;
    bool has_after;
    uint8_t *cursor; /* OWNER_CURSOR_CAP bytes (owned), allocated by route_owner_scan */
    /* Not zeroed by op_record (~2.1 KiB per op), from here on. route: a CAS's next route,
     * written whole by cas_op_new before it is read; of a reused record only its identity is
     * cleared (op_free frees it, op_record empties it), the rest is never read by a lookup.
     * The read attempt's per-member state: members[i] is written by the attempt before it is
     * read; st/has/unconf are clear at and above n_members (never set) and below it once
     * attempt_clear ran, which op_free does before a record becomes a spare (a new record is
     * calloc'd). */
    kvm_route_t route; /* CAS: the next route */
    route_msg_member_t members[ROUTE_MSG_MAX_SET];
    int st[ROUTE_MSG_MAX_SET];
    bool has[ROUTE_MSG_MAX_SET];
    bool unconf[ROUTE_MSG_MAX_SET]; /* got[i] answered EAGAIN: not known mirrored */
};

#define OWNER_CURSOR_CAP (8 + KVM_WIRE_MAX_RECORD_LEN)
#define ROUTE_OP_ENC_MIN 64 /* bytes of an op record's first ident buffer (op_ident_copy) */

static void op_step(void *arg);

static void op_unlink(route_svc_t *svc, route_op_t *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        svc->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    svc->n_ops--;
}

/* Whether op->got[i] owns its identity's encoding (got_take: a moved one does, a borrowed one
 * is op->ident's). */
static bool got_owned(const route_op_t *op, uint32_t i)
{
    return op->got[i].ident.enc != op->ident.enc;
}

/* Clears the answers of op's last attempt: entries at n_members and above are never set (an
 * attempt sets only its members' entries; a record starts zeroed), so a CAS (no member) clears
 * nothing instead of ROUTE_MSG_MAX_SET entries of three arrays. */
static void attempt_clear(route_op_t *op)
{
    KVM_ASSERT(op->n_members <= ROUTE_MSG_MAX_SET);
    for (uint32_t i = 0; i < op->n_members; i++) {
        if (op->has[i]) {
            if (!got_owned(op, i))
                op->got[i].ident.enc = NULL; /* op->ident's (got_take) */
            kvm_route_free(&op->got[i]);
        }
        op->has[i] = false;
        op->unconf[i] = false;
        op->st[i] = 0;
    }
    op->n_wait = 0;
    op->stale = false;
    op->inl_have = false;
}

/* Ends op's record (its contents already freed): kept as a spare with its answer array (its
 * routes cleared by attempt_clear) while there is room, so a batch's lookups and CASes reuse
 * the records of the previous batch's instead of a calloc and a free (and the answer array's)
 * each. */
static void op_release_record(route_op_t *op)
{
    route_svc_t *svc = op->svc;
    if (svc->freeing || svc->n_op_spare >= ROUTE_OP_SPARE) {
        free(op->got);
        free(op->enc_buf);
        free(op);
        return;
    }
    op->next = svc->op_spare;
    svc->op_spare = op;
    svc->n_op_spare++;
}

/* A zeroed op record: a spare (its answer array kept), else a new one (NULL: no memory). */
static route_op_t *op_record(route_svc_t *svc)
{
    route_op_t *op = svc->op_spare;
    if (!op)
        return calloc(1, sizeof(*op));
    svc->op_spare = op->next;
    svc->n_op_spare--;
    kvm_route_t *got = op->got;
    uint32_t got_cap = op->got_cap;
    uint8_t *enc_buf = op->enc_buf;
    uint32_t enc_cap = op->enc_cap;
    memset(op, 0, offsetof(route_op_t, route)); /* (the route and the attempt's arrays: above) */
    memset(&op->route.ident, 0, sizeof(op->route.ident));
    op->got = got; /* every entry cleared (attempt_clear): reusable as got_reserve's */
    op->got_cap = got_cap;
    op->enc_buf = enc_buf; /* nothing borrows it now (op_free) */
    op->enc_cap = enc_cap;
    return op;
}

static void op_spares_free(route_svc_t *svc)
{
    while (svc->op_spare) {
        route_op_t *op = svc->op_spare;
        svc->op_spare = op->next;
        free(op->got);
        free(op->enc_buf);
        free(op);
    }
    svc->n_op_spare = 0;
}

static void op_free(route_op_t *op)
{
    attempt_clear(op);
    if (op->ident.enc && op->ident.enc == op->enc_buf)
        op->ident.enc = NULL; /* borrowed (op_ident_copy): kept with the record */
    if (op->route.ident.enc && op->route.ident.enc == op->enc_buf)
        op->route.ident.enc = NULL;
    kvm_ident_free(&op->ident);
    kvm_ident_free(&op->route.ident); /* (the rest of the route: written by the next CAS) */
    free(op->cursor);
    free(op->claim);
    free(op->claim_reply);
    if (op->page) {
        for (uint32_t i = 0; i < op->n_page; i++)
            kvm_route_free(&op->page[i]);
        free(op->page);
    }
    op_release_record(op);
}

static void op_release(route_op_t *op)
{
    if (op->done && op->calls_pending == 0 && !op->in_window)
        op_free(op);
}

static void finish(route_op_t *op, int rc, const kvm_route_t *r)
{
    route_svc_t *svc = op->svc;
    KVM_ASSERT(!op->done);
    op->done = true;
    env_timer_cancel(svc->env, op->timer);
    op->timer = 0;
    op_unlink(svc, op);
    switch (op->kind) {
    case OP_LOOKUP:
        if (op->inl) { /* the bytes are the returned version's, or not given at all */
            op->inl->got = rc == 0 && r && op->inl_have &&
                           kvm_route_version_cmp(&r->version, &op->inl_ver) == 0;
            if (!op->inl->got) {
                if (op->inl->buf != op->inl->dst && op->inl->buf != op->inl->lent)
                    free(op->inl->buf); /* (the caller's room is the caller's) */
                op->inl->buf = NULL;
                op->inl->len = 0;
            }
        }
        obs_count(svc->metrics, route_lookups_total,
                  rc == 0               ? OBS_LOOKUP_FOUND
                  : rc == KVMESH_ENOENT ? OBS_LOOKUP_NOT_FOUND
                                        : OBS_LOOKUP_ERROR,
                  OBS_NONE, 1);
        op->lcb(op->arg, rc, r);
        break;
    case OP_CAS:
        if (op->kcb)
            op->kcb(op->arg, rc, r, op->claim_reply, op->claim_reply_len);
        else
            op->ccb(op->arg, rc, r);
        break;
    case OP_OWNER:
        op->ocb(op->arg, rc, NULL);
        break;
    }
    op_release(op);
}

static void windows_free(route_svc_t *svc);

void route_client_cancel_all(route_svc_t *svc)
{
    while (svc->ops)
        finish(svc->ops, KVMESH_ECANCELED, NULL);
    windows_free(svc);
    op_spares_free(svc); /* (svc->freeing: ops ending from now on are freed, not kept) */
}

void route_client_view_from_rec(route_svc_t *svc, route_shard_t *sh, const route_rec_t *rec)
{
    if (sh->v_valid && rec->token < sh->view.token)
        return;
    sh->view = *rec;
    sh->v_valid = rec->state == ROUTE_REC_ACTIVE;
}

static void window_wait_check(route_svc_t *svc);

static void on_view(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    route_shard_t *sh = &svc->shards[q->shard];
    sh->v_refreshing = false;
    route_rec_t rec;
    if (res->rc == 0 && res->kv.found &&
        route_rec_decode(res->kv.value, res->kv.value_len, &rec) == 0) {
        route_localize_rec(svc, &rec);
        route_client_view_from_rec(svc, sh, &rec);
    }
    window_wait_check(svc);
}

static void view_refresh(route_svc_t *svc, route_shard_t *sh)
{
    uint64_t now = route_now(svc);
    if (sh->v_refreshing || now < sh->v_next_refresh_ns)
        return;
    char key[KS_KEY_CAP];
    if (route_shard_meta_key(svc, sh->id, key, sizeof(key)) != 0)
        return;
    route_mreq_t *q = route_mreq_new(svc, on_view, NULL, sh->id);
    if (!q)
        return;
    sh->v_next_refresh_ns = now + 2 * ROUTE_RETRY_NS;
    if (meta_get(svc->meta, key, ROUTE_META_TIMEOUT_MS, route_mreq_cb, q) != 0) {
        q->svc = NULL;
        route_mreq_cb(q, &(meta_result_t){.rc = KVMESH_EUNAVAILABLE, .errmsg = ""});
        return;
    }
    sh->v_refreshing = true;
}

static void invalidate_view(route_svc_t *svc, route_shard_t *sh)
{
    sh->v_valid = false;
    view_refresh(svc, sh);
}

static void backoff(route_op_t *op, uint64_t ns)
{
    route_svc_t *svc = op->svc;
    ns += env_rand_u64(svc->env) % ROUTE_RETRY_NS;
    op->timer = env_timer_start(svc->env, ns, op_step, op);
}

/* ---- lookup --------------------------------------------------------------------------------- */

static void lookup_evaluate(route_op_t *op)
{
    route_svc_t *svc = op->svc;
    route_shard_t *sh = &svc->shards[op->shard];
    env_timer_cancel(svc->env, op->timer);
    op->timer = 0;
    if (op->stale) {
        invalidate_view(svc, sh);
        backoff(op, 0);
        return;
    }
    int best = -1;
    bool any = false;
    for (uint32_t i = 0; i < op->n_members; i++) {
        if (op->st[i] == KVMESH_ENOENT)
            any = true;
        if (!op->has[i])
            continue;
        any = true;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        int c = kvm_route_version_cmp(&op->got[i].version, &op->got[best].version);
        if (c == 0 && !kvm_route_equal(&op->got[i], &op->got[best])) {
            svc->stats.protocol_conflicts++;
            finish(op,
                   kvm_errf(KVMESH_ECORRUPT,
                            "route protocol conflict: two authorities hold version "
                            "(%llu,%llu) with different values",
                            (unsigned long long)op->got[i].version.fencing_token,
                            (unsigned long long)op->got[i].version.primary_sequence),
                   NULL);
            return;
        }
        if (c > 0)
            best = (int)i;
    }
    if (!any) {
        op->last_rc = KVMESH_EUNAVAILABLE;
        invalidate_view(svc, sh);
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    if (best >= 0 && op->unconf[best]) {
        /* The newest copy is not known to be mirrored (its write is in flight or partial): use
         * a member that confirms the same version, else ask again until it settles or the
         * deadline passes — never return a value that a failover could undo. */
        int conf = -1;
        for (uint32_t i = 0; i < op->n_members && conf < 0; i++)
            if (op->has[i] && !op->unconf[i] &&
                kvm_route_version_cmp(&op->got[i].version, &op->got[best].version) == 0)
                conf = (int)i;
        if (conf < 0) {
            op->last_rc = KVMESH_EUNAVAILABLE;
            backoff(op, ROUTE_RETRY_NS);
            return;
        }
        best = conf;
    }
    if (best >= 0) {
        for (uint32_t i = 0; i < op->n_members; i++) {
            bool lower = op->st[i] == KVMESH_ENOENT ||
                         (op->has[i] &&
                          kvm_route_version_cmp(&op->got[i].version, &op->got[best].version) < 0);
            if (!lower)
                continue;
            route_msg_t m;
            route_msg_init(&m, RMSG_REPAIR);
            m.shard = op->shard;
            m.generation = sh->view.generation;
            m.token = sh->view.token;
            m.target = op->members[i].rt;
            const kvm_route_t *rp = &op->got[best];
            m.rptrs = &rp;
            m.n_routes = 1;
            route_send(svc, op->members[i].node, &m); /* counted where it lands (on_repair) */
        }
    }
    finish(op, best >= 0 ? 0 : KVMESH_ENOENT, best >= 0 ? &op->got[best] : NULL);
}

/* An answer i that carries inline bytes: kept in the caller's buffer when its version is newer
 * than the bytes held (the answers of one version are one route: lookup_evaluate). */
static void inline_take(route_op_t *op, uint32_t i, const route_msg_t *resp)
{
    route_inline_t *inl = op->inl;
    if (!inl || resp->status != 0 || !(resp->flags & RMSG_READ_INLINE) ||
        resp->inl_len > inl->max || resp->inl_len != op->got[i].length)
        return;
    if (op->inl_have && kvm_route_version_cmp(&op->got[i].version, &op->inl_ver) <= 0)
        return;
    uint8_t *b = NULL;
    if (inl->dst) { /* the caller's room (a batch get's item): copied there */
        b = inl->dst;
        if (resp->inl_len)
            memcpy(b, resp->inl, resp->inl_len);
    } else if (resp->inl_att && !resp->inl_shared &&
               resp->inl_att->buf == resp->inl) { /* attached alone: taken */
        b = resp->inl_att->buf;
        resp->inl_att->buf = NULL;
    } else if ((b = malloc(resp->inl_len ? resp->inl_len : 1)) && resp->inl_len) {
        memcpy(b, resp->inl, resp->inl_len);
    }
    if (!b)
        return; /* no inline bytes: the caller reads the replica */
    if (resp->inl_shared)
        op->svc->stats.att_items_taken++;
    if (inl->buf != inl->dst && inl->buf != inl->lent)
        free(inl->buf);
    inl->buf = b;
    inl->len = resp->inl_len;
    inl->from = op->members[i].rt.id;
    op->inl_ver = op->got[i].version;
    op->inl_have = true;
}

static void on_read_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp);

route_inline_t *route_inline_pending(route_svc_t *svc, const env_msg_t *msg, uint32_t *att_len)
{
    if (svc->mo || !svc->ready || svc->freeing || msg->type != ROUTE_MSG_BASE + RMSG_READ_RESP)
        return NULL;
    route_msg_t m;
    if (route_msg_decode(msg->type, msg->data, msg->len, &m) != 0)
        return NULL;
    route_inline_t *inl = NULL;
    if (m.status == 0 && (m.flags & RMSG_READ_ATT) && m.n_routes == 1 &&
        m.att_len == m.routes[0].length) {
        for (route_call_t *c = svc->calls_tail; c; c = c->prev) {
            if (c->req_id != m.req_id)
                continue;
            route_op_t *op = c->fn == on_read_resp ? c->ctx : NULL;
            if (op && c->resp_kind == RMSG_READ_RESP && c->node == msg->from && !op->done &&
                c->u64 == op->attempt && op->inl && m.att_len <= op->inl->max) {
                inl = op->inl;
                *att_len = m.att_len;
            }
            break;
        }
    }
    route_msg_clear(&m);
    return inl;
}

/* Takes the answer's route into op->got[i] (zeroed: got_reserve / attempt_clear), with no
 * allocation. The answer is the message route_on_message decoded for this call and clears when
 * it returns (route_svc.c on_response), and its identity equals op->ident (the caller checked):
 * a route whose identity encoding is on the heap is moved; one whose encoding lies in the
 * message's own decode storage (route_msg.h ROUTE_MSG_IDENT_INLINE: every short key) borrows
 * op->ident's encoding, the same bytes, which the op keeps until attempt_clear has released
 * every answer (op_free clears the attempt first). got[i] is read only while the op lives (its
 * callback gets it borrowed), so the borrow never outlives its lender. */
static void got_take(route_op_t *op, uint32_t i, const route_msg_t *resp)
{
    route_msg_check_decoded(resp); /* (a copy's storage is not where the check below looks) */
    kvm_route_t *r = (kvm_route_t *)&resp->routes[0], *dst = &op->got[i];
    const uint8_t *enc = r->ident.enc;
    KVM_ASSERT(dst->ident.enc == NULL && r->ident.enc_len == op->ident.enc_len);
    *dst = *r;
    if (enc >= (const uint8_t *)resp && enc < (const uint8_t *)(resp + 1))
        dst->ident.enc = op->ident.enc; /* borrowed: got_owned is false */
    else
        memset(&r->ident, 0, sizeof(r->ident)); /* moved: the message frees nothing of it */
}

static void on_read_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    route_op_t *op = c->ctx;
    op->calls_pending--;
    if (op->done || c->u64 != op->attempt || svc->freeing) {
        op_release(op);
        return;
    }
    uint32_t i = c->idx;
    route_shard_t *sh = &svc->shards[op->shard];
    if (resp) {
        op->st[i] = resp->status;
        if (resp->status == KVMESH_ESTALE_GENERATION) {
            svc->stats.stale_answers++;
            if (resp->token > sh->view.token)
                op->stale = true;
        }
        if ((resp->status == 0 || resp->status == KVMESH_EAGAIN) && resp->n_routes == 1 &&
            kvm_ident_equal(&resp->routes[0].ident, &op->ident)) {
            got_take(op, i, resp);
            op->has[i] = true;
            op->unconf[i] = resp->status == KVMESH_EAGAIN;
            inline_take(op, i, resp);
        }
    } else {
        op->st[i] = KVMESH_ETIMEDOUT;
    }
    if (--op->n_wait == 0)
        lookup_evaluate(op);
}

/* Room for n answers in op->got (zeroed: kvm_route_copy's destination); the answers of an
 * earlier attempt are cleared (attempt_clear) before. */
static bool got_reserve(route_op_t *op, uint32_t n)
{
    KVM_ASSERT(n <= ROUTE_MSG_MAX_SET);
    if (n <= op->got_cap)
        return true;
    kvm_route_t *got = calloc(n, sizeof(*got));
    if (!got)
        return false;
    free(op->got);
    op->got = got;
    op->got_cap = n;
    return true;
}

static void lookup_send(route_op_t *op, route_shard_t *sh)
{
    route_svc_t *svc = op->svc;
    attempt_clear(op);
    op->attempt++;
    if (!got_reserve(op, sh->view.n_set)) {
        op->last_rc = KVMESH_ENOMEM;
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    op->n_members = sh->view.n_set;
    memcpy(op->members, sh->view.set, op->n_members * sizeof(op->members[0]));
    for (uint32_t i = 0; i < op->n_members; i++) {
        route_msg_t m;
        route_msg_init(&m, RMSG_READ_REQ);
        m.shard = op->shard;
        m.generation = sh->view.generation;
        m.token = sh->view.token;
        m.target = op->members[i].rt;
        m.has_ident = true;
        m.ident = op->ident; /* borrowed */
        if (op->inl && op->members[i].node != svc->self_node)
            m.limit = op->inl->max; /* (this runtime's own authority: its replica is local) */
        if (m.limit && op->inl->att)
            m.flags |= RMSG_READ_ATT; /* the bytes may come as the answer's attachment */
        route_call_t *c = route_call(svc, op->members[i].node, &m, RMSG_READ_RESP, ROUTE_ATTEMPT_NS,
                                     true, on_read_resp, op);
        if (!c) {
            op->st[i] = KVMESH_EAGAIN;
            continue;
        }
        c->idx = i;
        c->u64 = op->attempt;
        op->calls_pending++;
        op->n_wait++;
    }
    if (op->n_wait == 0) {
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    bool remote = false;
    for (uint32_t i = 0; i < op->n_members && !remote; i++)
        remote = op->members[i].node != svc->self_node;
    if (op->in_window)
        op->win_sent = remote; /* the window counts its fan-out once (window_run) */
    else if (op->cost && remote)
        op->cost->rounds++;
    /* No timer of the op's own: each READ call ends by its deadline (ROUTE_ATTEMPT_NS), with
     * an answer or with none from the service's one call timer (route_svc.c calls_sweep), and
     * the last of them to end evaluates the attempt (on_read_resp). Every call ends so (none
     * is cancelled without its callback), so the attempt timer this replaced, armed per lookup
     * for ROUTE_ATTEMPT_NS + ROUTE_RETRY_NS, never fired first: it cost a timer start and a
     * cancel per lookup. */
}

/* ---- CAS ------------------------------------------------------------------------------------ */

static void on_cas_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    route_op_t *op = c->ctx;
    op->calls_pending--;
    if (op->done || svc->freeing) {
        op_release(op);
        return;
    }
    route_shard_t *sh = &svc->shards[op->shard];
    if (!resp) {
        finish(op, KVMESH_ETIMEDOUT, NULL);
        return;
    }
    const kvm_route_t *r = resp->n_routes ? &resp->routes[0] : NULL;
    switch (resp->status) {
    case 0:
    case KVMESH_ECONFLICT:
    case KVMESH_EINDETERMINATE:
        if (op->kcb && resp->claim_len) { /* the claim's reply: handed to the callback */
            op->claim_reply = malloc(resp->claim_len);
            if (op->claim_reply) {
                memcpy(op->claim_reply, resp->claim, resp->claim_len);
                op->claim_reply_len = resp->claim_len;
            }
        }
        finish(op, resp->status, r);
        return;
    case KVMESH_ESTALE_GENERATION:
        svc->stats.stale_answers++;
        op->last_rc = KVMESH_ESTALE_GENERATION;
        invalidate_view(svc, sh);
        backoff(op, 0);
        return;
    case KVMESH_EUNAVAILABLE:
        op->last_rc = KVMESH_EUNAVAILABLE;
        invalidate_view(svc, sh);
        backoff(op, ROUTE_RETRY_NS);
        return;
    case KVMESH_EAGAIN:
        backoff(op, ROUTE_RETRY_NS / 4);
        return;
    default:
        finish(op, resp->status, NULL);
        return;
    }
}

static void cas_send(route_op_t *op, route_shard_t *sh)
{
    route_svc_t *svc = op->svc;
    route_msg_member_t to = {.rt = sh->view.primary, .node = sh->view.primary_node};
    if ((svc->bugs & ROUTE_BUG_SECONDARY_CAS) && sh->view.n_set > 0)
        to = sh->view.set[env_rand_u64(svc->env) % sh->view.n_set];
    route_msg_t m;
    route_msg_init(&m, op->kcb ? RMSG_CAS_CLAIM_REQ : RMSG_CAS_REQ);
    m.shard = op->shard;
    m.generation = sh->view.generation;
    m.token = sh->view.token;
    m.target = to.rt;
    m.expected = op->expected;
    const kvm_route_t *rp = &op->route;
    m.rptrs = &rp;
    m.n_routes = 1;
    m.claim = op->claim;
    m.claim_len = op->claim_len;
    /* a claim CAS also waits for the primary's metadata transaction: two metadata timeouts
     * more, within the op's deadline */
    uint64_t wait_ns = ROUTE_PEER_CALL_NS + ROUTE_ATTEMPT_NS;
    if (op->kcb) { /* (the clock is read for a claim CAS only) */
        uint64_t now = route_now(svc);
        uint64_t longer = wait_ns + 2ull * ROUTE_META_TIMEOUT_MS * 1000000;
        uint64_t left = op->deadline > now ? op->deadline - now : 0;
        wait_ns = left > wait_ns ? (left < longer ? left : longer) : wait_ns;
    }
    route_call_t *c = route_call(svc, to.node, &m, op->kcb ? RMSG_CAS_CLAIM_RESP : RMSG_CAS_RESP,
                                 wait_ns, false, on_cas_resp, op);
    if (!c) {
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    if (op->in_window) { /* one round per destination of the window (window_run) */
        op->win_sent = true;
        op->win_node = to.node;
    } else if (op->cost && to.node != svc->self_node) {
        op->cost->rounds++;
    }
    op->calls_pending++;
}

/* ---- owner scan ----------------------------------------------------------------------------- */

static void owner_finish_page(route_op_t *op, bool complete)
{
    route_svc_t *svc = op->svc;
    size_t clen = 0;
    if (!complete) {
        /* cursor: u32le shard | u8 has_after | ident canonical bytes */
        kvm_wr_t w;
        kvm_wr_fixed(&w, op->cursor, OWNER_CURSOR_CAP);
        kvm_wr_u32le(&w, op->shard);
        kvm_wr_u8(&w, op->has_after ? 1 : 0);
        if (op->has_after)
            kvm_wr_bytes(&w, op->ident.enc, op->ident.enc_len);
        int rc = kvm_wr_finish(&w, &clen);
        KVM_ASSERT(rc == 0); /* the cursor buffer holds the largest identity */
    }
    route_owner_page_t pg = {.routes = op->page,
                             .n = op->n_page,
                             .next_cursor = complete ? NULL : op->cursor,
                             .next_cursor_len = clen,
                             .complete = complete};
    op->done = true;
    env_timer_cancel(svc->env, op->timer);
    op->timer = 0;
    op_unlink(svc, op);
    op->ocb(op->arg, 0, &pg);
    op_release(op);
}

static void on_owner_resp(route_svc_t *svc, route_call_t *c, const route_msg_t *resp)
{
    route_op_t *op = c->ctx;
    op->calls_pending--;
    if (op->done || svc->freeing || c->u64 != op->attempt) {
        op_release(op);
        return;
    }
    route_shard_t *sh = &svc->shards[op->shard];
    if (!resp || resp->status != 0) {
        if (resp && resp->status == KVMESH_ESTALE_GENERATION) {
            svc->stats.stale_answers++;
            op->last_rc = KVMESH_ESTALE_GENERATION;
        }
        invalidate_view(svc, sh);
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    for (uint32_t i = 0; i < resp->n_routes && op->n_page < op->limit; i++) {
        kvm_route_init(&op->page[op->n_page]);
        if (kvm_route_copy(&op->page[op->n_page], &resp->routes[i]) != 0) {
            finish(op, KVMESH_ENOMEM, NULL);
            return;
        }
        op->n_page++;
        kvm_ident_free(&op->ident);
        if (kvm_ident_copy(&op->ident, &resp->routes[i].ident) != 0) {
            finish(op, KVMESH_ENOMEM, NULL);
            return;
        }
        op->has_after = true;
    }
    if (!resp->more || resp->n_routes == 0) {
        op->shard++;
        op->has_after = false;
        kvm_ident_free(&op->ident);
    }
    if (op->shard >= svc->policy.n_shards) {
        owner_finish_page(op, true);
        return;
    }
    if (op->n_page >= op->limit) {
        owner_finish_page(op, false);
        return;
    }
    op_step(op);
}

static void owner_send(route_op_t *op, route_shard_t *sh)
{
    route_svc_t *svc = op->svc;
    route_msg_t m;
    route_msg_init(&m, RMSG_OWNER_REQ);
    m.shard = op->shard;
    m.generation = sh->view.generation;
    m.token = sh->view.token;
    m.target = sh->view.primary;
    m.owner = op->owner;
    m.limit = op->limit - op->n_page;
    if (op->has_after) {
        m.has_ident = true;
        m.ident = op->ident;
    }
    op->attempt++;
    route_call_t *c = route_call(svc, sh->view.primary_node, &m, RMSG_OWNER_RESP, ROUTE_ATTEMPT_NS,
                                 true, on_owner_resp, op);
    if (!c) {
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    c->u64 = op->attempt;
    op->calls_pending++;
}

/* ---- driver --------------------------------------------------------------------------------- */

static void op_step(void *arg)
{
    route_op_t *op = arg;
    route_svc_t *svc = op->svc;
    op->timer = 0;
    if (route_now(svc) >= op->deadline) {
        int rc = op->last_rc ? op->last_rc : KVMESH_ETIMEDOUT;
        if (rc == KVMESH_ESTALE_GENERATION)
            rc = KVMESH_EUNAVAILABLE;
        finish(op,
               kvm_errf(rc,
                        "route %s: shard %u has no serving authority set before the "
                        "deadline; retry later",
                        op->kind == OP_CAS      ? "cas"
                        : op->kind == OP_LOOKUP ? "lookup"
                                                : "scan",
                        op->shard),
               NULL);
        return;
    }
    route_shard_t *sh = &svc->shards[op->shard];
    if (!sh->v_valid || sh->view.n_set == 0) {
        op->last_rc = KVMESH_EUNAVAILABLE;
        view_refresh(svc, sh);
        if (op->in_window && svc->win_parking) {
            op->win_park = true; /* joins the window that waits for the views (window_run) */
            return;
        }
        backoff(op, ROUTE_RETRY_NS);
        return;
    }
    switch (op->kind) {
    case OP_LOOKUP:
        lookup_send(op, sh);
        break;
    case OP_CAS:
        cas_send(op, sh);
        break;
    case OP_OWNER:
        owner_send(op, sh);
        break;
    }
}

/* *dst = a copy of src whose encoding is op's buffer (grown when src's does not fit): dst
 * borrows it until op_free. dst must be empty (NULL encoding). */
static int op_ident_copy(route_op_t *op, kvm_ident_t *dst, const kvm_ident_t *src)
{
    KVM_ASSERT(dst->enc == NULL);
    *dst = *src;
    dst->enc = NULL;
    if (!src->enc || src->enc_len == 0)
        return 0; /* no encoding (a CAS's validation refuses it) */
    if (src->enc_len > op->enc_cap) {
        uint32_t cap = src->enc_len < ROUTE_OP_ENC_MIN ? ROUTE_OP_ENC_MIN : src->enc_len;
        uint8_t *b = malloc(cap);
        if (!b)
            return KVMESH_ENOMEM;
        free(op->enc_buf);
        op->enc_buf = b;
        op->enc_cap = cap;
        op->svc->stats.op_enc_allocs++;
    }
    memcpy(op->enc_buf, src->enc, src->enc_len);
    dst->enc = op->enc_buf;
    return 0;
}

static route_op_t *op_new(route_svc_t *svc, enum op_kind kind, void *arg)
{
    if (!svc->ready || svc->n_ops >= ROUTE_MAX_OPS)
        return NULL;
    route_op_t *op = op_record(svc);
    if (!op)
        return NULL;
    op->svc = svc;
    op->kind = kind;
    op->arg = arg;
    op->deadline = route_now(svc) + svc->timeout_ns; /* (op->route: cas_op_new writes it) */
    return op;
}

static bool window_add(route_svc_t *svc, route_op_t *op);

static void op_start(route_svc_t *svc, route_op_t *op)
{
    op->next = svc->ops;
    if (svc->ops)
        svc->ops->prev = op;
    svc->ops = op;
    svc->n_ops++;
    if (svc->win_depth > 0 && window_add(svc, op))
        return; /* started by the window's turn (window_run) */
    op->timer = env_timer_start(svc->env, 0, op_step, op);
}

int route_lookup(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg)
{
    return route_lookup_costed(svc, ident, cb, arg, NULL);
}

int route_lookup_costed(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg,
                        route_cost_t *cost)
{
    return route_lookup_inline(svc, ident, cb, arg, cost, NULL);
}

int route_lookup_inline(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg,
                        route_cost_t *cost, route_inline_t *inl)
{
    if (inl) {
        if (inl->max > ROUTE_INLINE_MAX || inl->buf)
            return kvm_errf(KVMESH_EINVAL,
                            "route_lookup_inline: max %u over %u, or a buffer given (the "
                            "service allocates it)",
                            inl->max, ROUTE_INLINE_MAX);
        inl->got = false;
        inl->len = 0;
        if (inl->max == 0)
            inl = NULL;
    }
    if (svc->mo) {
        if (cost)
            cost->rounds++; /* before the call: its callback may run first */
        int rc = route_mo_lookup(svc->mo, ident, cb, arg);
        if (rc && cost)
            cost->rounds--;
        return rc;
    }
    if (!ident || !ident->enc || !cb)
        return kvm_errf(KVMESH_EINVAL, "route_lookup: ident and cb are required");
    route_op_t *op = op_new(svc, OP_LOOKUP, arg);
    if (!op)
        return kvm_errf(KVMESH_EAGAIN, "route_lookup: service not ready or %d ops in flight",
                        ROUTE_MAX_OPS);
    if (op_ident_copy(op, &op->ident, ident) != 0) {
        op_free(op);
        return KVMESH_ENOMEM;
    }
    op->lcb = cb;
    op->cost = cost;
    op->inl = inl;
    op->shard = kvm_ident_shard(ident, svc->policy.n_shards);
    op_start(svc, op);
    return 0;
}

int route_primary_hint(const route_svc_t *svc, const kvm_ident_t *ident, kvm_runtime_t *primary)
{
    if (svc->mo)
        return KVMESH_ENOTSUP;
    if (!svc->ready || !svc->shards || !ident || !ident->enc)
        return KVMESH_EUNAVAILABLE;
    const route_shard_t *sh = &svc->shards[kvm_ident_shard(ident, svc->policy.n_shards)];
    if (!sh->v_valid)
        return KVMESH_EUNAVAILABLE;
    *primary = sh->view.primary;
    return 0;
}

bool route_is_primary_now(route_svc_t *svc, const kvm_ident_t *ident)
{
    if (svc->mo || !svc->ready || !svc->shards || !ident || !ident->enc)
        return false;
    route_shard_t *sh = &svc->shards[kvm_ident_shard(ident, svc->policy.n_shards)];
    return sh->ps == RP_ACTIVE && sh->rec.token == sh->m_token && route_auth_read_valid(svc, sh);
}

int route_cas(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
              route_cas_cb cb, void *arg)
{
    return route_cas_costed(svc, expected, next, cb, arg, NULL);
}

/* An EmbeddedWrh CAS op, built but not started: the caller sets its callback, then
 * op_start (it runs on the loop's next turn, never inside the call). */
static int cas_op_new(route_svc_t *svc, const kvm_route_version_t *expected,
                      const kvm_route_t *next, void *arg, route_cost_t *cost, route_op_t **out)
{
    route_op_t *op = op_new(svc, OP_CAS, arg);
    if (!op)
        return kvm_errf(KVMESH_EAGAIN, "route_cas: service not ready or %d ops in flight",
                        ROUTE_MAX_OPS);
    op->route = *next; /* its ident's encoding copied into the record's buffer */
    op->route.ident.enc = NULL;
    if (op_ident_copy(op, &op->route.ident, &next->ident) != 0) {
        op_free(op);
        return KVMESH_ENOMEM;
    }
    /* the authority assigns both versions; fixed values that pass validation travel */
    op->route.version = (kvm_route_version_t){0, 1};
    op->route.predecessor_version = KVM_ROUTE_VERSION_NONE;
    memset(&op->route.predecessor_op, 0, sizeof(op->route.predecessor_op));
    int rc = kvm_route_validate(&op->route);
    if (rc != 0) {
        op_free(op);
        return rc;
    }
    op->cost = cost;
    op->expected = *expected;
    op->shard = kvm_ident_shard(&next->ident, svc->policy.n_shards);
    *out = op;
    return 0;
}

int route_cas_costed(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
                     route_cas_cb cb, void *arg, route_cost_t *cost)
{
    if (svc->mo) {
        if (cost)
            cost->rounds++;
        int rc = route_mo_cas(svc->mo, expected, next, cb, arg);
        if (rc && cost)
            cost->rounds--;
        return rc;
    }
    if (!expected || !next || !cb)
        return kvm_errf(KVMESH_EINVAL, "route_cas: expected, next and cb are required");
    route_op_t *op;
    int rc = cas_op_new(svc, expected, next, arg, cost, &op);
    if (rc)
        return rc;
    op->ccb = cb;
    op_start(svc, op);
    return 0;
}

int route_cas_claim(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
                    const uint8_t *claim, size_t claim_len, route_cas_claim_cb cb, void *arg,
                    route_cost_t *cost)
{
    if (svc->mo)
        return kvm_errf(KVMESH_ENOTSUP, "route_cas_claim: MetadataOnly routes have no primary");
    if (!expected || !next || !cb || !claim || claim_len == 0 || claim_len > ROUTE_CLAIM_MAX)
        return kvm_errf(KVMESH_EINVAL,
                        "route_cas_claim: expected, next, cb and a claim of 1..%u bytes required",
                        ROUTE_CLAIM_MAX);
    uint8_t *copy = malloc(claim_len);
    if (!copy)
        return KVMESH_ENOMEM;
    memcpy(copy, claim, claim_len);
    route_op_t *op;
    int rc = cas_op_new(svc, expected, next, arg, cost, &op);
    if (rc) {
        free(copy);
        return rc;
    }
    op->kcb = cb;
    op->claim = copy;
    op->claim_len = (uint32_t)claim_len;
    op_start(svc, op);
    return 0;
}

int route_owner_scan(route_svc_t *svc, const kvm_runtime_id_t *owner, const uint8_t *cursor,
                     size_t cursor_len, uint32_t limit, route_owner_cb cb, void *arg)
{
    if (svc->mo)
        return route_mo_owner_scan(svc->mo, owner, cursor, cursor_len, limit, cb, arg);
    if (!owner || !cb || limit == 0 || limit > ROUTE_OWNER_PAGE_MAX)
        return kvm_errf(KVMESH_EINVAL, "route_owner_scan: owner, cb and limit 1..%d required",
                        ROUTE_OWNER_PAGE_MAX);
    route_op_t *op = op_new(svc, OP_OWNER, arg);
    if (!op)
        return kvm_errf(KVMESH_EAGAIN, "route_owner_scan: service not ready or busy");
    op->ocb = cb;
    op->owner = *owner;
    op->limit = limit;
    op->page = calloc(limit, sizeof(kvm_route_t));
    op->cursor = malloc(OWNER_CURSOR_CAP);
    if (!op->page || !op->cursor) {
        op_free(op);
        return KVMESH_ENOMEM;
    }
    if (cursor && cursor_len) {
        kvm_rd_t r;
        kvm_rd_init(&r, cursor, cursor_len);
        op->shard = kvm_rd_u32le(&r);
        uint8_t has_after = kvm_rd_u8(&r);
        size_t enc_len = kvm_rd_remaining(&r);
        const uint8_t *enc = kvm_rd_bytes(&r, enc_len);
        if (!kvm_rd_end(&r) || has_after > 1 || op->shard >= svc->policy.n_shards ||
            (has_after && kvm_ident_from_canonical(&op->ident, enc, enc_len) != 0) ||
            (!has_after && enc_len != 0)) {
            op_free(op);
            return kvm_errf(KVMESH_EINVAL, "route_owner_scan: malformed cursor");
        }
        op->has_after = has_after != 0;
    }
    op_start(svc, op);
    return 0;
}

/* ---- batching windows (route.h route_batch_begin) -------------------------------------------- */

#define ROUTE_WINDOW_SPARE_CAP 64 /* the spare window keeps an ops array of at most this many */

struct route_window {
    struct route_window *next;
    route_svc_t *svc;
    route_op_t **ops;
    uint32_t n, cap;
    env_timer_id timer;
    bool retry; /* the second turn of items that waited for their shard views */
};

static bool window_append(struct route_window *w, route_op_t *op)
{
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 64;
        route_op_t **ops = realloc(w->ops, cap * sizeof(*ops));
        if (!ops)
            return false;
        w->ops = ops;
        w->cap = cap;
    }
    KVM_ASSERT(w->n < ROUTE_MAX_OPS); /* every op of a window is one of svc->ops */
    w->ops[w->n++] = op;
    op->in_window = true;
    return true;
}

/* An empty window: the spare one (its ops array kept), else a new one (NULL: no memory). A
 * single op opens and releases a window per call, so one is kept instead of two allocations and
 * two frees per op. */
static struct route_window *window_new(route_svc_t *svc)
{
    struct route_window *w = svc->win_spare;
    if (w) {
        svc->win_spare = NULL;
        *w = (struct route_window){.svc = svc, .ops = w->ops, .cap = w->cap};
        return w;
    }
    if ((w = calloc(1, sizeof(*w))))
        w->svc = svc;
    return w;
}

static bool window_add(route_svc_t *svc, route_op_t *op)
{
    struct route_window *w = svc->win_open;
    if (!w) {
        if (!(w = window_new(svc)))
            return false;
        svc->win_open = w;
    }
    return window_append(w, op);
}

static void window_unlink(route_svc_t *svc, struct route_window *w)
{
    for (struct route_window **pp = &svc->win_pending; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

/* Releases the window's hold on its ops (each is freed once it is done and idle) and frees it;
 * parked ops belong to the waiting window now. */
static void window_release(struct route_window *w)
{
    for (uint32_t i = 0; i < w->n; i++) {
        if (w->ops[i]->win_park)
            continue;
        w->ops[i]->in_window = false;
        op_release(w->ops[i]);
    }
    route_svc_t *svc = w->svc;
    if (!svc->win_spare && w->cap <= ROUTE_WINDOW_SPARE_CAP) {
        svc->win_spare = w; /* (a batch's larger array is not kept) */
        return;
    }
    free(w->ops);
    free(w);
}

/* Round trips of the window's first attempts, charged to the first costed item of each: one
 * per remote CAS destination (a shard primary's batch), one for every lookup together (their
 * READ batches fan out in parallel, as one lookup's READs do). */
static void window_count(route_svc_t *svc, struct route_window *w)
{
    env_node_t charged[ROUTE_OUTBOX_NODES];
    uint32_t n_charged = 0;
    bool lookup_charged = false;
    for (uint32_t i = 0; i < w->n; i++) {
        route_op_t *op = w->ops[i];
        if (op->done || !op->win_sent || !op->cost)
            continue;
        if (op->kind == OP_LOOKUP) {
            if (!lookup_charged)
                op->cost->rounds++;
            lookup_charged = true;
            continue;
        }
        if (op->win_node == svc->self_node)
            continue;
        bool seen = false;
        for (uint32_t j = 0; j < n_charged && !seen; j++)
            seen = charged[j] == op->win_node;
        if (seen)
            continue;
        op->cost->rounds++;
        if (n_charged < ROUTE_OUTBOX_NODES)
            charged[n_charged++] = op->win_node;
    }
}

/* The window's turn: every op's first attempt, coalesced into one batch per destination. */
/*
 * Items whose shard had no view on the window's turn (a shard this runtime has not used yet,
 * or whose view an authority change invalidated) are parked in one waiting window instead of
 * backing off one by one: it runs (as a second batch) once no shard of its items is still
 * being refreshed (window_wait_check, from each refresh's completion), or after
 * ROUTE_RETRY_NS at the latest; what still has no view then backs off alone.
 */
static void window_run(void *arg);

static void window_park(route_svc_t *svc, route_op_t *op)
{
    struct route_window *w = svc->win_wait;
    if (!w) {
        if (!(w = window_new(svc)) ||
            !(w->timer = env_timer_start(svc->env, ROUTE_RETRY_NS, window_run, w))) {
            if (w)
                window_release(w); /* (empty: back to the spare) */
            op->win_park = false;
            backoff(op, ROUTE_RETRY_NS);
            return;
        }
        w->svc = svc;
        w->retry = true;
        w->next = svc->win_pending;
        svc->win_pending = w;
        svc->win_wait = w;
    }
    if (!window_append(w, op)) {
        op->win_park = false;
        backoff(op, ROUTE_RETRY_NS);
    }
}

static void window_wait_check(route_svc_t *svc)
{
    struct route_window *w = svc->win_wait;
    if (!w)
        return;
    for (uint32_t i = 0; i < w->n; i++)
        if (!w->ops[i]->done && svc->shards[w->ops[i]->shard].v_refreshing)
            return;
    env_timer_cancel(svc->env, w->timer);
    w->timer = env_timer_start(svc->env, 0, window_run, w);
    if (!w->timer) {
        window_unlink(svc, w);
        svc->win_wait = NULL;
        for (uint32_t i = 0; i < w->n; i++) {
            w->ops[i]->win_park = false;
            if (!w->ops[i]->done)
                backoff(w->ops[i], ROUTE_RETRY_NS);
        }
        window_release(w);
    }
}

static void window_run(void *arg)
{
    struct route_window *w = arg;
    route_svc_t *svc = w->svc;
    w->timer = 0;
    window_unlink(svc, w);
    if (svc->win_wait == w)
        svc->win_wait = NULL;
    for (uint32_t i = 0; i < w->n; i++)
        w->ops[i]->win_park = false;
    route_coalesce_begin(svc);
    svc->win_parking = !w->retry;
    for (uint32_t i = 0; i < w->n; i++)
        if (!w->ops[i]->done)
            op_step(w->ops[i]);
    svc->win_parking = false;
    window_count(svc, w);
    for (uint32_t i = 0; i < w->n; i++)
        if (w->ops[i]->win_park)
            window_park(svc, w->ops[i]);
    route_coalesce_end(svc); /* the batches go out */
    window_release(w);
    window_wait_check(svc); /* every view it waits for may be there already */
}

void route_batch_begin(route_svc_t *svc)
{
    if (svc->mo)
        return; /* MetadataOnly: each call is its own metadata round trip */
    svc->win_depth++;
}

void route_batch_end(route_svc_t *svc)
{
    if (svc->mo)
        return;
    KVM_ASSERT(svc->win_depth > 0);
    if (--svc->win_depth)
        return;
    struct route_window *w = svc->win_open;
    svc->win_open = NULL;
    if (!w)
        return;
    w->timer = env_timer_start(svc->env, 0, window_run, w);
    if (w->timer) {
        w->next = svc->win_pending;
        svc->win_pending = w;
        return;
    }
    for (uint32_t i = 0; i < w->n; i++) /* no timer (out of memory): each op on its own */
        if (!w->ops[i]->done)
            w->ops[i]->timer = env_timer_start(svc->env, 0, op_step, w->ops[i]);
    window_release(w);
}

static void windows_free(route_svc_t *svc)
{
    if (svc->win_open) {
        window_release(svc->win_open);
        svc->win_open = NULL;
    }
    svc->win_wait = NULL;
    while (svc->win_pending) {
        struct route_window *w = svc->win_pending;
        svc->win_pending = w->next;
        env_timer_cancel(svc->env, w->timer);
        for (uint32_t i = 0; i < w->n; i++)
            w->ops[i]->win_park = false;
        window_release(w);
    }
    if (svc->win_spare) {
        free(svc->win_spare->ops);
        free(svc->win_spare);
        svc->win_spare = NULL;
    }
}
