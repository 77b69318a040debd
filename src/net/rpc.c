/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc.c — peer RPC endpoint on one libuv loop (see rpc.h, docs/rpc.md).
 *
 * Owns: the endpoint (config, handler table, stats), listeners, peers (one outbound connection
 * each, reconnect backoff, the queue of frames waiting for the handshake), calls awaiting
 * responses, server reply handles, outgoing frame construction and send-queue accounting, and
 * one deadline tree (calls, handshake timeouts, reconnect backoff) driven by a single uv_timer.
 * Connections themselves (write path, receive state machine, handshake) are in rpc_conn.c; the
 * shared structures are in rpc_impl.h.
 *
 * Invariants: a call is in exactly one place (peer waiting queue with its frame, a connection's
 * pending tree, or finishing); its callback runs once and only after its payload write ended;
 * queued bytes/messages of a connection never exceed the configured bounds except for CANCEL and
 * handshake frames (fixed size) and a single message into an empty queue.
 */
#include "net/rpc_impl.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "net/rpc_hdr.h"

static int timer_cmp(struct rpc_timer *a, struct rpc_timer *b)
{
    if (a->due != b->due)
        return a->due < b->due ? -1 : 1;
    return a->seq < b->seq ? -1 : (a->seq > b->seq);
}

static int call_cmp(rpc_call_t *a, rpc_call_t *b)
{
    return a->id < b->id ? -1 : (a->id > b->id);
}

static int reply_cmp(rpc_reply *a, rpc_reply *b)
{
    return a->req.request_id < b->req.request_id ? -1 : (a->req.request_id > b->req.request_id);
}

RB_GENERATE(rpc_timer_tree, rpc_timer, node, timer_cmp)
RB_GENERATE(rpc_call_tree, rpc_call, node, call_cmp)
RB_GENERATE(rpc_reply_tree, rpc_reply, node, reply_cmp)

/* ---- small helpers -------------------------------------------------------------------------- */

uint64_t rpc_now(const rpc_endpoint *ep)
{
    return uv_now(ep->loop);
}

const char *rpc_close_reason_name(int reason)
{
    switch (reason) {
#define RPC_X(n, s)                                                                                \
    case n:                                                                                        \
        return s;
        RPC_CLOSE_REASON_LIST(RPC_X)
#undef RPC_X
    }
    return "unknown";
}

void rpc_config_init(struct rpc_config *c)
{
    memset(c, 0, sizeof(*c));
    c->max_frame_bytes = RPC_DEFAULT_MAX_FRAME;
    c->max_queue_bytes = RPC_DEFAULT_QUEUE_BYTES;
    c->max_queue_msgs = RPC_DEFAULT_QUEUE_MSGS;
    c->handshake_timeout_ms = RPC_DEFAULT_HANDSHAKE_MS;
    c->reconnect_min_ms = RPC_DEFAULT_RECONNECT_MIN;
    c->reconnect_max_ms = RPC_DEFAULT_RECONNECT_MAX;
    c->max_conns = RPC_DEFAULT_MAX_CONNS;
    c->pool_bytes = RPC_DEFAULT_POOL_BYTES;
}

/* ---- deadline tree ------------------------------------------------------------------------- */

static void timers_rearm(rpc_endpoint *ep);

static void timer_cb(uv_timer_t *h)
{
    rpc_endpoint *ep = h->data;
    uint64_t now = uv_now(ep->loop);
    for (int n = 0; n < RPC_TIMERS_PER_TURN; n++) {
        struct rpc_timer *t = RB_MIN(rpc_timer_tree, &ep->timers);
        if (!t || t->due > now)
            break;
        RB_REMOVE(rpc_timer_tree, &ep->timers, t);
        t->armed = 0;
        t->fire(t);
    }
    timers_rearm(ep);
}

static void timers_rearm(rpc_endpoint *ep)
{
    struct rpc_timer *t = RB_MIN(rpc_timer_tree, &ep->timers);
    if (!t) {
        uv_timer_stop(&ep->timer);
        return;
    }
    uint64_t now = uv_now(ep->loop);
    uv_timer_start(&ep->timer, timer_cb, t->due > now ? t->due - now : 0, 0);
}

void rpc_timer_arm(rpc_endpoint *ep, struct rpc_timer *t, uint64_t due)
{
    KVM_ASSERT(!t->armed);
    t->due = due;
    t->seq = ++ep->timer_seq;
    t->armed = 1;
    RB_INSERT(rpc_timer_tree, &ep->timers, t);
    if (RB_MIN(rpc_timer_tree, &ep->timers) == t)
        timers_rearm(ep);
}

void rpc_timer_disarm(rpc_endpoint *ep, struct rpc_timer *t)
{
    if (!t->armed)
        return;
    RB_REMOVE(rpc_timer_tree, &ep->timers, t);
    t->armed = 0;
}

/* ---- frames out ---------------------------------------------------------------------------- */

static int msg_check(const rpc_endpoint *ep, const struct rpc_msg *m, uint64_t *payload_len)
{
    if (m->niov > RPC_MAX_IOV || (m->niov && !m->iov))
        return kvm_errf(KVMESH_EINVAL, "%u payload iovecs; at most %d", m->niov, RPC_MAX_IOV);
    if (m->body_len && !m->body)
        return kvm_errf(KVMESH_EINVAL, "body_len %zu with a NULL body", m->body_len);
    if (m->trace && (m->trace->flags & ~FRAME_TRACE_SAMPLED))
        return kvm_errf(KVMESH_EINVAL, "trace flags 0x%x has unknown bits", m->trace->flags);
    uint64_t n = 0;
    for (unsigned i = 0; i < m->niov; i++)
        n += m->iov[i].len;
    *payload_len = n;
    if (m->body_len + RPC_MAX_ERROR_LEN + 64 > FRAME_MAX_HEADER_BYTES ||
        FRAME_FIXED_SIZE + m->body_len + RPC_MAX_ERROR_LEN + 64 + n > ep->cfg.max_frame_bytes)
        return kvm_errf(KVMESH_ETOOBIG,
                        "message of %zu body + %llu payload bytes exceeds the frame limit of %llu",
                        m->body_len, (unsigned long long)n,
                        (unsigned long long)ep->cfg.max_frame_bytes);
    return 0;
}

/* ---- record free lists (rpc_impl.h) ------------------------------------------------------- */

/* A record of `size` bytes, its first `zero` bytes zeroed (all of it when newly allocated). */
static void *fl_get(struct rpc_freelist *fl, size_t size, size_t zero)
{
    void *p = fl->head;
    if (!p)
        return calloc(1, size);
    fl->head = *(void **)p;
    fl->n--;
    memset(p, 0, zero);
    return p;
}

/* Keeps p (a record of this list's size, or NULL) for reuse, or frees it when the list is full. */
static void fl_put(struct rpc_freelist *fl, void *p)
{
    if (!p)
        return;
    if (fl->n >= RPC_FREE_MAX) {
        free(p);
        return;
    }
    *(void **)p = fl->head;
    fl->head = p;
    fl->n++;
}

static void fl_clear(struct rpc_freelist *fl)
{
    while (fl->head) {
        void *p = fl->head;
        fl->head = *(void **)p;
        free(p);
    }
    fl->n = 0;
}

void *rpc_hdrbuf_get(rpc_endpoint *ep, size_t n)
{
    if (n > RPC_HDRBUF_SMALL)
        return bufpool_get(&ep->pool, n);
    void *b = fl_get(&ep->free_hdrbufs, RPC_HDRBUF_SMALL, 0);
    return b;
}

void rpc_hdrbuf_put(rpc_endpoint *ep, void *b)
{
    if (!b)
        return;
    size_t usable = malloc_usable_size(b);
    if (usable >= RPC_HDRBUF_SMALL && usable < 2 * RPC_HDRBUF_SMALL)
        fl_put(&ep->free_hdrbufs, b);
    else
        bufpool_put(&ep->pool, b);
}

/* An rpc_out with a head of head_len bytes (inline when small, else from the pool). */
static struct rpc_out *out_alloc(rpc_endpoint *ep, size_t head_len)
{
    struct rpc_out *o = fl_get(&ep->free_outs, sizeof(*o), offsetof(struct rpc_out, head_inline));
    if (!o)
        return NULL;
    o->head_len = head_len;
    o->head = head_len <= RPC_HEAD_INLINE ? o->head_inline : bufpool_get(&ep->pool, head_len);
    if (!o->head) {
        fl_put(&ep->free_outs, o);
        return NULL;
    }
    return o;
}

/*
 * Builds an outgoing frame; the fixed header is written again at submit time (deadline). No
 * string is formatted: the error text (at most RPC_MAX_ERROR_LEN bytes of it) is encoded
 * straight from the caller's string.
 */
static int out_new(rpc_endpoint *ep, uint8_t kind, uint64_t id, const struct rpc_msg *m, int status,
                   const char *error, int copy_payload, struct rpc_out **res)
{
    size_t pb_len = 0, elen = 0, blen = 0;
    if (kind == FRAME_REQUEST || kind == FRAME_RESPONSE || kind == FRAME_NOTIFY) {
        elen = error ? strnlen(error, RPC_MAX_ERROR_LEN) : 0; /* cut to RPC_MAX_ERROR_LEN */
        blen = m ? m->body_len : 0;
        pb_len = rpc_hdr_size(status, elen, blen);
    }
    struct rpc_out *o = out_alloc(ep, FRAME_FIXED_SIZE + pb_len);
    if (!o)
        return KVMESH_ENOMEM;
    if (pb_len)
        rpc_hdr_encode(o->head + FRAME_FIXED_SIZE, status, error, elen, blen ? m->body : NULL,
                       blen);
    struct frame_header fh = {.kind = kind, .request_id = id, .header_len = (uint32_t)pb_len};
    uint64_t plen = 0;
    unsigned niov = m ? m->niov : 0;
    for (unsigned i = 0; i < niov; i++)
        plen += m->iov[i].len;
    if (m && kind != FRAME_RESPONSE)
        fh.type = m->type;
    if (m && m->trace)
        fh.trace = *m->trace;
    fh.payload_len = plen;
    frame_encode(&fh, o->head);
    o->bufs[0] = uv_buf_init((char *)o->head, (unsigned)o->head_len);
    o->nbufs = 1;
    if (plen && copy_payload) {
        o->owned_payload = bufpool_get(&ep->pool, plen);
        if (!o->owned_payload) {
            rpc_out_free(ep, o);
            return KVMESH_ENOMEM;
        }
        size_t off = 0;
        for (unsigned i = 0; i < niov; i++) {
            if (m->iov[i].len)
                memcpy(o->owned_payload + off, m->iov[i].base, m->iov[i].len);
            off += m->iov[i].len;
        }
        o->bufs[o->nbufs++] = uv_buf_init((char *)o->owned_payload, (unsigned)plen);
    } else {
        for (unsigned i = 0; i < niov; i++)
            if (m->iov[i].len)
                o->bufs[o->nbufs++] = m->iov[i];
    }
    o->bytes = o->head_len + plen;
    *res = o;
    return 0;
}

/* A lent payload (rpc_msg.lend) whose frame is not written whole when rpc_call returns: what is
 * left of its payload (every buf after the head's; the head is bufs[0] while any of it is left)
 * is copied into own (pooled, room for the whole payload), which the frame keeps and frees. */
static void out_own_rest(rpc_endpoint *ep, struct rpc_out *o, uint8_t *own)
{
    KVM_ASSERT(!o->owned_payload);
    unsigned first = o->nbufs > 0 && (uint8_t *)o->bufs[0].base >= o->head &&
                             (uint8_t *)o->bufs[0].base < o->head + o->head_len
                         ? 1
                         : 0;
    size_t rest = 0;
    for (unsigned i = first; i < o->nbufs; i++) {
        memcpy(own + rest, o->bufs[i].base, o->bufs[i].len);
        rest += o->bufs[i].len;
    }
    if (rest == 0) { /* (only the head was left) */
        bufpool_put(&ep->pool, own);
        return;
    }
    o->bufs[first] = uv_buf_init((char *)own, (unsigned)rest);
    o->nbufs = first + 1;
    o->owned_payload = own;
    ep->st.lent_copied++;
    ep->st.lent_copied_bytes += rest;
}

/* A handshake or cancel frame (no protobuf RpcHeader). Takes ownership of pb (malloc'd). */
struct rpc_out *rpc_out_raw(rpc_endpoint *ep, uint8_t kind, uint64_t id, uint8_t *pb, size_t pb_len)
{
    struct rpc_out *o = out_alloc(ep, FRAME_FIXED_SIZE + pb_len);
    if (!o) {
        free(pb);
        return NULL;
    }
    struct frame_header fh = {.kind = kind, .request_id = id, .header_len = (uint32_t)pb_len};
    frame_encode(&fh, o->head);
    if (pb_len)
        memcpy(o->head + FRAME_FIXED_SIZE, pb, pb_len);
    free(pb);
    o->bufs[0] = uv_buf_init((char *)o->head, (unsigned)o->head_len);
    o->nbufs = 1;
    o->bytes = o->head_len;
    return o;
}

void rpc_out_free(rpc_endpoint *ep, struct rpc_out *o)
{
    if (o->head != o->head_inline)
        bufpool_put(&ep->pool, o->head);
    bufpool_put(&ep->pool, o->owned_payload);
    fl_put(&ep->free_outs, o);
}

static int sendq_admit(rpc_endpoint *ep, struct rpc_sendq *sq, uint64_t bytes)
{
    if (sq->msgs == 0)
        return 0; /* one message always fits an empty queue (frame size is bounded) */
    if (sq->msgs + 1 > ep->cfg.max_queue_msgs || sq->bytes + bytes > ep->cfg.max_queue_bytes) {
        ep->st.eagain++;
        return kvm_errf(KVMESH_EAGAIN, "send queue full (%u messages, %llu bytes); retry later",
                        sq->msgs, (unsigned long long)sq->bytes);
    }
    return 0;
}

static void sendq_add(rpc_endpoint *ep, struct rpc_out *o, struct rpc_sendq *sq)
{
    o->sq = sq;
    sq->msgs++;
    sq->bytes += o->bytes;
    ep->st.queued_msgs++;
    ep->st.queued_bytes += o->bytes;
}

void rpc_sendq_remove(rpc_endpoint *ep, struct rpc_out *o)
{
    if (!o->sq)
        return;
    o->sq->msgs--;
    o->sq->bytes -= o->bytes;
    ep->st.queued_msgs--;
    ep->st.queued_bytes -= o->bytes;
    o->sq = NULL;
}

/* ---- calls --------------------------------------------------------------------------------- */

static void call_free(rpc_call_t *c)
{
    KVM_ASSERT(c->peer->ncalls > 0);
    c->peer->ncalls--;
    if (c->rx)
        rpc_rx_free(c->ep, c->rx);
    free(c->error);
    fl_put(&c->ep->free_calls, c);
}

/* Runs the callback once the result is decided and the payload write ended. */
void rpc_call_deliver(rpc_call_t *c)
{
    KVM_ASSERT(c->done && !c->out);
    rpc_endpoint *ep = c->ep;
    rpc_timer_disarm(ep, &c->tmo); /* kept armed while a decided call's write was in flight */
    struct rpc_result res;
    memset(&res, 0, sizeof(res));
    res.status = c->status;
    res.error = c->error ? c->error : "";
    char *etxt = NULL; /* a response's error text (error responses only) */
    struct rpc_hdr h;
    if (c->rx) {
        res.trace = c->rx->fh.trace;
        if (rpc_hdr_decode(c->rx->pb, c->rx->fh.header_len, &h) != 0) {
            res.status = KVMESH_EPROTO;
            res.error = "response header is not a valid RpcHeader";
        } else {
            res.status = h.status;
            if (res.status > 0 || (res.status < 0 && (res.status < KVMESH_ERROR_BAND_FIRST ||
                                                      res.status > KVMESH_ERROR_BAND_LAST)))
                res.status = KVMESH_EPROTO;
            if (h.error_len && (etxt = rpc_hdr_error_cstr(&h)) != NULL)
                res.error = etxt;
            else
                res.error = "";
            res.body = h.body;
            res.body_len = h.body_len;
            res.payload = c->rx->payload;
            res.payload_len = c->rx->fh.payload_len;
        }
    }
    unsigned tr = c->peer->is_unix ? OBS_TRANSPORT_UNIX : OBS_TRANSPORT_TCP;
    obs_count(ep->metrics, transport_operations_total, tr, OBS_XOP_RPC_SEND, 1);
    if (res.status != 0)
        obs_count(ep->metrics, transport_failures_total, tr, OBS_XOP_RPC_SEND, 1);
    obs_observe(ep->metrics, transport_duration_seconds, tr, OBS_XOP_RPC_SEND,
                uv_hrtime() - c->start_ns);
    c->cb(c, &res, c->arg);
    if (c->rx && res.payload == NULL)
        c->rx->payload = NULL; /* taken by the callback */
    free(etxt);
    call_free(c);
}

/* Decides a call's result (first decision wins) and detaches it from every index. */
void rpc_call_finish(rpc_call_t *c, int status, const char *error, struct rpc_rx *rx)
{
    if (c->done) {
        if (rx)
            rpc_rx_free(c->ep, rx);
        return;
    }
    c->done = 1;
    c->status = status;
    if (rx) {
        c->rx_store = *rx;
        c->rx = &c->rx_store;
    }
    if (error && *error)
        c->error = strdup(error);
    if (c->conn) {
        RB_REMOVE(rpc_call_tree, &c->conn->pending, c);
        c->conn = NULL;
    }
    if (c->out && c->out->inq) {
        /* Still in a waiting queue: never written, drop the frame. */
        TAILQ_REMOVE(c->out->inq, c->out, q);
        rpc_sendq_remove(c->ep, c->out);
        rpc_out_free(c->ep, c->out);
        c->out = NULL;
    }
    if (!c->out)
        rpc_call_deliver(c);
    /*
     * else: the write path delivers once the frame's write ended (rpc_conn.c). The deadline
     * timer stays armed meanwhile: if the frame is still being written at the deadline (the peer
     * stopped reading), call_timeout closes the connection so the write ends and the callback runs.
     */
}

static void call_timeout(struct rpc_timer *t)
{
    rpc_call_t *c = KVM_CONTAINER_OF(t, struct rpc_call, tmo);
    /* The frame is in its connection's write path (not in a waiting queue), not yet ended. */
    struct rpc_out *o = c->out && !c->out->inq ? c->out : NULL;
    if (!c->done) {
        c->ep->st.calls_timed_out++;
        rpc_call_finish(c, KVMESH_ETIMEDOUT, "deadline exceeded before a response arrived", NULL);
    }
    /*
     * A half-written frame cannot be withdrawn from the stream and its payload buffers belong to
     * the write path until the write ends: close the connection (its writes end with
     * UV_ECANCELED, then the call is delivered), so a peer that stops reading cannot hold a call
     * past its deadline. Here c is still alive when o is set (delivery waits for the write).
     */
    if (o)
        rpc_conn_close(o->conn, RPC_CLOSE_WRITE_TIMEOUT);
}

void rpc_cancel(rpc_call_t *c)
{
    if (c->done)
        return;
    rpc_endpoint *ep = c->ep;
    ep->st.calls_canceled++;
    struct rpc_conn *conn = c->conn;
    uint64_t id = c->id; /* c may be reused once finished */
    rpc_call_finish(c, KVMESH_ECANCELED, "cancelled by the caller", NULL);
    if (conn && conn->state == CONN_READY) {
        /* Best effort: tell the server (fixed-size frame, outside the queue bounds). */
        struct rpc_out *o = rpc_out_raw(ep, FRAME_CANCEL, id, NULL, 0);
        if (o)
            rpc_conn_submit(conn, o);
    }
}

/* ---- peers and connections ----------------------------------------------------------------- */

void rpc_peer_fail_waiting(rpc_peer *p, int status, const char *why)
{
    /* Detach the queue first: callbacks may submit new work to this peer. */
    struct rpc_out_q local = TAILQ_HEAD_INITIALIZER(local);
    struct rpc_out *o;
    TAILQ_CONCAT(&local, &p->waiting, q);
    TAILQ_FOREACH(o, &local, q)
    o->inq = &local;
    while ((o = TAILQ_FIRST(&local)) != NULL) {
        if (o->call) {
            rpc_call_finish(o->call, status, why, NULL); /* removes and frees o */
        } else {
            TAILQ_REMOVE(&local, o, q);
            rpc_sendq_remove(p->ep, o);
            rpc_sent_cb scb = o->sent_cb;
            void *sarg = o->sent_arg;
            rpc_out_free(p->ep, o);
            if (scb)
                scb(status, sarg);
        }
    }
}

static void peer_retry(struct rpc_timer *t)
{
    rpc_peer *p = KVM_CONTAINER_OF(t, rpc_peer, retry);
    if (!p->conn && !TAILQ_EMPTY(&p->waiting) && !p->ep->closing)
        rpc_conn_dial(p);
}

static void peer_enqueue(rpc_peer *p, struct rpc_out *o)
{
    rpc_endpoint *ep = p->ep;
    sendq_add(ep, o, &p->sq);
    TAILQ_INSERT_TAIL(&p->waiting, o, q);
    o->inq = &p->waiting;
    if (p->conn) {
        if (p->conn->state == CONN_READY)
            rpc_conn_flush_waiting(p->conn);
        return;
    }
    /* Connect from the timer (never inside rpc_call), no earlier than the backoff allows. */
    if (!p->retry.armed)
        rpc_timer_arm(ep, &p->retry, KVM_MAX(uv_now(ep->loop), p->next_attempt));
}

int rpc_peer_fall_back(rpc_peer *p, const char *why)
{
    rpc_peer *fb = p->fallback;
    if (!fb || p->fell_back || p->epoch != 0 || p->ep->closing)
        return 0;
    p->fell_back = 1;
    /* Detach the queue first (as rpc_peer_fail_waiting): the frames keep their order on fb. */
    struct rpc_out_q local = TAILQ_HEAD_INITIALIZER(local);
    struct rpc_out *o;
    TAILQ_CONCAT(&local, &p->waiting, q);
    while ((o = TAILQ_FIRST(&local)) != NULL) {
        TAILQ_REMOVE(&local, o, q);
        o->inq = NULL;
        rpc_sendq_remove(p->ep, o);
        if (o->call) {
            KVM_ASSERT(p->ncalls > 0);
            p->ncalls--;
            fb->ncalls++;
            o->call->peer = fb;
        }
        peer_enqueue(fb, o);
    }
    if (p->fallback_cb)
        p->fallback_cb(p, why, p->fallback_arg);
    return 1;
}

void rpc_peer_set_fallback(rpc_peer *p, rpc_peer *fb, rpc_fallback_cb cb, void *arg)
{
    KVM_ASSERT(fb != p && !fb->fallback && strcmp(fb->runtime_id, p->runtime_id) == 0);
    p->fallback = fb;
    p->fallback_cb = cb;
    p->fallback_arg = arg;
}

int rpc_peer_fell_back(const rpc_peer *p)
{
    return p->fell_back;
}

rpc_peer *rpc_peer_fallback(const rpc_peer *p)
{
    return p->fallback;
}

const char *rpc_peer_runtime_id(const rpc_peer *p)
{
    return p->runtime_id;
}

const char *rpc_peer_address(const rpc_peer *p)
{
    return p->address;
}

/* The peer that carries p's frames: its fallback once it fell back. */
static rpc_peer *peer_route(rpc_peer *p)
{
    return p->fell_back ? p->fallback : p;
}

/* ---- requests, responses, notifications ---------------------------------------------------- */

void rpc_sink_offer(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    struct rpc_handler_slot *slot = &ep->handlers[rx->fh.type];
    struct rpc_hdr h;
    memset(&rx->sink, 0, sizeof(rx->sink));
    bool one_way = rx->fh.kind == FRAME_NOTIFY;
    rpc_sink_fn fn = one_way ? (slot->nfn ? slot->nsfn : NULL) : (slot->fn ? slot->sfn : NULL);
    if (!fn || ep->closing || (rx->fh.kind != FRAME_REQUEST && !one_way) ||
        rpc_hdr_decode(rx->pb, rx->fh.header_len, &h) != 0)
        return; /* (a bad header closes the connection once the frame is whole) */
    struct rpc_request req = {
        .type = rx->fh.type,
        .one_way = one_way,
        .request_id = one_way ? 0 : rx->fh.request_id,
        .deadline_ms = rx->fh.deadline_ms,
        .trace = rx->fh.trace,
        .body = h.body,
        .body_len = h.body_len,
        .payload_len = rx->fh.payload_len,
        .peer_runtime_id = c->peer_runtime_id,
    };
    fn(&req, one_way ? slot->narg : slot->arg, &rx->sink);
    KVM_ASSERT(!rx->sink.ctx || rx->sink.abort);
    if (rx->sink.dst)
        ep->st.sink_direct++;
    else if (rx->sink.discard)
        ep->st.sink_discarded++;
}

void rpc_sink_abort(rpc_endpoint *ep, struct rpc_rx *rx)
{
    void *ctx = rx->sink.ctx;
    void (*abort_fn)(void *) = rx->sink.abort;
    memset(&rx->sink, 0, sizeof(rx->sink));
    rx->dst = NULL;
    if (ctx) {
        ep->st.sink_aborted++;
        abort_fn(ctx);
    }
}

void rpc_handle_request(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    struct rpc_hdr h;
    if (rpc_hdr_decode(rx->pb, rx->fh.header_len, &h) != 0) {
        rpc_sink_abort(ep, rx);
        rpc_rx_free(ep, rx);
        rpc_conn_close(c, RPC_CLOSE_BAD_HEADER);
        return;
    }
    uint8_t *pb = rx->pb; /* h.body points into it: freed with the request */
    struct rpc_request req = {
        .type = rx->fh.type,
        .one_way = rx->fh.kind == FRAME_NOTIFY,
        .request_id = rx->fh.kind == FRAME_NOTIFY ? 0 : rx->fh.request_id,
        .deadline_ms = rx->fh.deadline_ms,
        .trace = rx->fh.trace,
        .body = h.body,
        .body_len = h.body_len,
        .payload = rx->payload,
        .payload_len = rx->fh.payload_len,
        .peer_runtime_id = c->peer_runtime_id,
        .sink_ctx = rx->sink.ctx,
        .sunk = rx->sink.dst || rx->sink.discard,
    };
    struct rpc_handler_slot *slot = &ep->handlers[rx->fh.type];
    if (req.one_way ? !slot->nfn : (c->nreplies >= RPC_MAX_REQUESTS_PER_CONN || !slot->fn)) {
        rpc_sink_abort(ep, rx); /* (no handler runs for it below) */
        req.sink_ctx = NULL;
    }
    if (req.one_way) {
        ep->st.notifies_received++;
        if (slot->nfn)
            slot->nfn(NULL, &req, slot->narg); /* (a sink's ctx ends there) */
        else
            ep->st.notifies_dropped++;
        bufpool_put(&ep->pool, req.payload);
        rpc_hdrbuf_put(ep, pb);
        return;
    }
    obs_count(ep->metrics, transport_operations_total, rpc_conn_transport(c), OBS_XOP_RPC_RECEIVE,
              1);
    if (c->nreplies >= RPC_MAX_REQUESTS_PER_CONN) {
        /* Too many requests in service on this connection: answer busy, run no handler. */
        char e[96];
        snprintf(e, sizeof(e), "%u requests in service on this connection (limit %d)", c->nreplies,
                 RPC_MAX_REQUESTS_PER_CONN);
        uint64_t id = rx->fh.request_id;
        bufpool_put(&ep->pool, req.payload);
        rpc_hdrbuf_put(ep, pb);
        struct rpc_out *o;
        if (sendq_admit(ep, &c->sq, 0) == 0 &&
            out_new(ep, FRAME_RESPONSE, id, NULL, KVMESH_EAGAIN, e, 1, &o) == 0) {
            sendq_add(ep, o, &c->sq);
            ep->st.replies_sent++;
            rpc_conn_submit(c, o);
        }
        return;
    }
    rpc_reply *r = fl_get(&ep->free_replies, sizeof(*r), sizeof(*r));
    if (!r) {
        rpc_sink_abort(ep, rx);
        bufpool_put(&ep->pool, req.payload);
        rpc_hdrbuf_put(ep, pb);
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    r->req = req;
    r->pb = pb;
    r->ep = ep;
    r->conn = c;
    if (RB_INSERT(rpc_reply_tree, &c->replies, r) != NULL) {
        /* A request id still in service was reused: protocol violation. */
        rpc_sink_abort(ep, rx);
        bufpool_put(&ep->pool, req.payload);
        rpc_hdrbuf_put(ep, pb);
        fl_put(&ep->free_replies, r);
        rpc_conn_close(c, RPC_CLOSE_UNEXPECTED);
        return;
    }
    c->nreplies++;
    memcpy(r->peer_id, c->peer_runtime_id, strlen(c->peer_runtime_id) + 1);
    r->req.peer_runtime_id = r->peer_id;
    ep->live_replies++;
    if (!slot->fn) {
        char e[96];
        snprintf(e, sizeof(e), "no handler for message type %u", (unsigned)req.type);
        if (rpc_reply_send(r, KVMESH_ENOTSUP, e, NULL, NULL, NULL) == KVMESH_EAGAIN)
            rpc_reply_drop(r);
        return;
    }
    slot->fn(r, &r->req, slot->arg);
}

void rpc_handle_response(struct rpc_conn *c, struct rpc_rx *rx)
{
    struct rpc_call key = {.id = rx->fh.request_id};
    rpc_call_t *call = RB_FIND(rpc_call_tree, &c->pending, &key);
    if (!call) {
        c->ep->st.responses_late++;
        rpc_rx_free(c->ep, rx);
        return;
    }
    rpc_call_finish(call, 0, NULL, rx);
}

static void reply_free(rpc_reply *r)
{
    rpc_endpoint *ep = r->ep;
    if (r->conn) {
        RB_REMOVE(rpc_reply_tree, &r->conn->replies, r);
        r->conn->nreplies--;
    }
    bufpool_put(&ep->pool, r->req.payload);
    rpc_hdrbuf_put(ep, r->pb);
    fl_put(&ep->free_replies, r);
    ep->live_replies--;
    rpc_ep_maybe_free(ep);
}

const struct rpc_request *rpc_reply_request(const rpc_reply *r)
{
    return &r->req;
}

int rpc_reply_canceled(const rpc_reply *r)
{
    return r->canceled || !r->conn;
}

void rpc_reply_drop(rpc_reply *r)
{
    reply_free(r);
}

int rpc_reply_send(rpc_reply *r, int status, const char *error, const struct rpc_msg *m,
                   rpc_sent_cb sent_cb, void *arg)
{
    rpc_endpoint *ep = r->ep;
    struct rpc_conn *c = r->conn;
    int rc;
    uint64_t plen = 0;
    if (status > 0 ||
        (status < 0 && (status < KVMESH_ERROR_BAND_FIRST || status > KVMESH_ERROR_BAND_LAST)))
        status = KVMESH_EINTERNAL;
    if (m && (rc = msg_check(ep, m, &plen)) != 0)
        goto consumed;
    if (!c || c->state != CONN_READY) {
        rc = KVMESH_ECONN;
        goto consumed;
    }
    if (r->canceled) {
        rc = KVMESH_ECANCELED; /* the caller no longer waits: nothing is sent */
        goto consumed;
    }
    rc = sendq_admit(ep, &c->sq, plen);
    if (rc)
        return rc; /* not consumed */
    struct rpc_out *o;
    rc = out_new(ep, FRAME_RESPONSE, r->req.request_id, m, status, error, sent_cb == NULL, &o);
    if (rc)
        goto consumed;
    o->sent_cb = sent_cb;
    o->sent_arg = arg;
    sendq_add(ep, o, &c->sq);
    ep->st.replies_sent++;
    reply_free(r);
    rpc_conn_submit(c, o);
    return 0;
consumed:
    reply_free(r);
    return rc;
}

static rpc_call_t *call_new(rpc_peer *p, rpc_call_cb cb, void *arg)
{
    rpc_call_t *c = fl_get(&p->ep->free_calls, sizeof(*c), sizeof(*c));
    if (!c)
        return NULL;
    c->ep = p->ep;
    c->peer = p;
    c->id = ++p->ep->next_id;
    c->start_ns = uv_hrtime();
    c->cb = cb;
    c->arg = arg;
    c->tmo.fire = call_timeout;
    return c;
}

int rpc_call(rpc_peer *p, const struct rpc_msg *m, rpc_call_cb cb, void *arg, rpc_call_t **out)
{
    p = peer_route(p);
    rpc_endpoint *ep = p->ep;
    uint64_t plen;
    if (ep->closing)
        return kvm_errf(KVMESH_ECLOSED, "endpoint is closing");
    if (!cb || m->type == 0)
        return kvm_errf(KVMESH_EINVAL, "rpc_call needs a callback and a non-zero message type");
    int rc = msg_check(ep, m, &plen);
    if (rc)
        return rc;
    if (p->ncalls >= RPC_MAX_PENDING_CALLS) {
        ep->st.eagain++;
        return kvm_errf(KVMESH_EAGAIN, "%u calls to %s outstanding (limit %d); retry later",
                        p->ncalls, p->runtime_id, RPC_MAX_PENDING_CALLS);
    }
    rc = sendq_admit(ep, &p->sq, plen);
    if (rc)
        return rc;
    /* a lent payload: the room for its unwritten rest is taken first, so that nothing can fail
     * once part of it was written (a pooled buffer, given back when the socket took it all) */
    uint8_t *spare = m->lend && plen ? bufpool_get(&ep->pool, plen) : NULL;
    if (m->lend && plen && !spare)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for a lent payload of %llu bytes",
                        (unsigned long long)plen);
    rpc_call_t *c = call_new(p, cb, arg);
    if (!c) {
        bufpool_put(&ep->pool, spare);
        return KVMESH_ENOMEM;
    }
    struct rpc_out *o;
    rc = out_new(ep, FRAME_REQUEST, c->id, m, 0, NULL, 0, &o);
    if (rc) {
        bufpool_put(&ep->pool, spare);
        fl_put(&ep->free_calls, c);
        return rc;
    }
    p->ncalls++;
    o->call = c;
    c->out = o;
    ep->st.calls_started++;
    if (m->timeout_ms) {
        c->deadline = uv_now(ep->loop) + m->timeout_ms;
        rpc_timer_arm(ep, &c->tmo, c->deadline);
    }
    if (out)
        *out = c;
    peer_enqueue(p, o);
    if (spare) {
        ep->st.lent++;
        if (c->out) /* (the frame not written whole: waiting for the connection, or for room) */
            out_own_rest(ep, c->out, spare);
        else
            bufpool_put(&ep->pool, spare);
    }
    return 0;
}

int rpc_notify(rpc_peer *p, const struct rpc_msg *m, rpc_sent_cb sent_cb, void *arg)
{
    p = peer_route(p);
    rpc_endpoint *ep = p->ep;
    uint64_t plen;
    if (ep->closing)
        return kvm_errf(KVMESH_ECLOSED, "endpoint is closing");
    if (m->type == 0)
        return kvm_errf(KVMESH_EINVAL, "message type 0 is reserved");
    int rc = msg_check(ep, m, &plen);
    if (rc)
        return rc;
    rc = sendq_admit(ep, &p->sq, plen);
    if (rc)
        return rc;
    struct rpc_out *o;
    rc = out_new(ep, FRAME_NOTIFY, 0, m, 0, NULL, sent_cb == NULL, &o);
    if (rc)
        return rc;
    o->sent_cb = sent_cb;
    o->sent_arg = arg;
    ep->st.notifies_sent++;
    peer_enqueue(p, o);
    return 0;
}

int rpc_env_notify(rpc_peer *p, uint32_t from_node, uint32_t env_type, const void *data, size_t len)
{
    uint8_t body[8]; /* u32be from node | u32be env type */
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u32be(&w, from_node);
    kvm_wr_u32be(&w, env_type);
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    struct rpc_msg m = {.type = RPC_TYPE_ENV_MESSAGE,
                        .body = body,
                        .body_len = sizeof(body),
                        .iov = &b,
                        .niov = len ? 1 : 0};
    if (len > UINT32_MAX)
        return kvm_errf(KVMESH_ETOOBIG, "env message of %zu bytes", len);
    return rpc_notify(p, &m, NULL, NULL); /* NULL callback: payload copied */
}

int rpc_env_decode(const struct rpc_request *req, uint32_t *from_node, uint32_t *env_type)
{
    if (req->type != RPC_TYPE_ENV_MESSAGE || req->body_len != 8)
        return kvm_errf(KVMESH_EPROTO, "not an env message (type %u, %zu body bytes)",
                        (unsigned)req->type, req->body_len);
    kvm_rd_t r;
    kvm_rd_init(&r, req->body, req->body_len);
    *from_node = kvm_rd_u32be(&r);
    *env_type = kvm_rd_u32be(&r);
    return 0;
}

/* ---- listeners ----------------------------------------------------------------------------- */

static void listener_close_cb(uv_handle_t *h)
{
    struct rpc_listener *l = h->data;
    rpc_endpoint *ep = l->ep;
    free(l);
    ep->handles--;
    rpc_ep_maybe_free(ep);
}

static int listener_new(rpc_endpoint *ep, int is_unix, struct rpc_listener **out)
{
    struct rpc_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return KVMESH_ENOMEM;
    int rc = is_unix ? uv_pipe_init(ep->loop, &l->u.pipe, 0) : uv_tcp_init(ep->loop, &l->u.tcp);
    if (rc) {
        free(l);
        return kvm_errf(KVMESH_EIO, "listener init: %s", uv_strerror(rc));
    }
    l->u.h.data = l;
    l->ep = ep;
    l->is_unix = is_unix;
    ep->handles++;
    LIST_INSERT_HEAD(&ep->listeners, l, link);
    *out = l;
    return 0;
}

static void listener_fail(struct rpc_listener *l)
{
    LIST_REMOVE(l, link);
    uv_close(&l->u.h, listener_close_cb);
}

int rpc_listen_tcp(rpc_endpoint *ep, const char *ip, int port, int *bound_port)
{
    struct sockaddr_storage sa;
    if (port < 0 || port > 65535 ||
        (uv_ip4_addr(ip, port, (struct sockaddr_in *)&sa) != 0 &&
         uv_ip6_addr(ip, port, (struct sockaddr_in6 *)&sa) != 0))
        return kvm_errf(KVMESH_EINVAL, "listen address '%s' port %d is not a numeric IP/port",
                        ip ? ip : "(null)", port);
    struct rpc_listener *l;
    int rc = listener_new(ep, 0, &l);
    if (rc)
        return rc;
    rc = uv_tcp_bind(&l->u.tcp, (const struct sockaddr *)&sa, 0);
    if (!rc)
        rc = uv_listen(&l->u.s, 128, rpc_conn_on_connection);
    if (rc) {
        listener_fail(l);
        return kvm_errf(KVMESH_EIO, "listen on %s:%d: %s", ip, port, uv_strerror(rc));
    }
    if (bound_port) {
        struct sockaddr_storage b;
        int len = sizeof(b);
        uv_tcp_getsockname(&l->u.tcp, (struct sockaddr *)&b, &len);
        *bound_port = ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                                    : ((struct sockaddr_in *)&b)->sin_port);
    }
    return 0;
}

int rpc_listen_unix(rpc_endpoint *ep, const char *path)
{
    if (!path || !*path || strlen(path) >= 100)
        return kvm_errf(KVMESH_EINVAL, "unix socket path must be 1..99 bytes");
    struct rpc_listener *l;
    int rc = listener_new(ep, 1, &l);
    if (rc)
        return rc;
    rc = uv_pipe_bind(&l->u.pipe, path);
    if (!rc)
        rc = uv_listen(&l->u.s, 128, rpc_conn_on_connection);
    if (rc) {
        listener_fail(l);
        return kvm_errf(KVMESH_EIO, "listen on unix:%s: %s", path, uv_strerror(rc));
    }
    return 0;
}

/* ---- endpoint ------------------------------------------------------------------------------ */

int rpc_endpoint_new(uv_loop_t *loop, const struct rpc_config *cfg, rpc_endpoint **out)
{
    int rc = hs_descriptor_validate(&cfg->local);
    if (rc)
        return rc;
    if (cfg->secret && (cfg->secret_len < HS_SECRET_MIN || cfg->secret_len > HS_SECRET_MAX))
        return kvm_errf(KVMESH_EINVAL, "deployment secret is %zu bytes; need %d..%d",
                        cfg->secret_len, HS_SECRET_MIN, HS_SECRET_MAX);
    if (cfg->max_frame_bytes < 4096 || cfg->max_frame_bytes > RPC_MAX_FRAME_LIMIT ||
        cfg->max_queue_msgs == 0 || cfg->max_queue_bytes == 0 || cfg->handshake_timeout_ms == 0 ||
        cfg->reconnect_min_ms == 0 || cfg->reconnect_max_ms < cfg->reconnect_min_ms ||
        cfg->max_conns == 0)
        return kvm_errf(KVMESH_EINVAL, "rpc config limits invalid; start from rpc_config_init()");
    rpc_endpoint *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return KVMESH_ENOMEM;
    ep->handlers = calloc(65536, sizeof(*ep->handlers));
    if (!ep->handlers) {
        free(ep);
        return KVMESH_ENOMEM;
    }
    ep->loop = loop;
    ep->cfg = *cfg;
    bufpool_init(&ep->pool, cfg->pool_bytes);
    ep->metrics = cfg->metrics;
    if (!ep->metrics) {
        if (obs_registry_new(&ep->metrics) != 0) {
            free(ep->handlers);
            free(ep);
            return KVMESH_ENOMEM;
        }
        ep->own_metrics = true;
    }
    if (cfg->secret) {
        memcpy(ep->secret, cfg->secret, cfg->secret_len);
        ep->cfg.secret = ep->secret;
    }
    rc = hs_descriptor_encode(&cfg->local, &ep->desc_raw, &ep->desc_raw_len);
    if (rc) {
        if (ep->own_metrics)
            obs_registry_free(ep->metrics);
        free(ep->handlers);
        free(ep);
        return rc;
    }
    RB_INIT(&ep->timers);
    LIST_INIT(&ep->listeners);
    LIST_INIT(&ep->conns);
    LIST_INIT(&ep->peers);
    uv_timer_init(loop, &ep->timer);
    ep->timer.data = ep;
    ep->handles = 1;
    *out = ep;
    return 0;
}

int rpc_register_handler(rpc_endpoint *ep, uint16_t type, rpc_handler_fn fn, void *arg)
{
    if (type == 0)
        return kvm_errf(KVMESH_EINVAL, "message type 0 is reserved");
    ep->handlers[type].fn = fn;
    ep->handlers[type].arg = arg;
    return 0;
}

int rpc_register_sink(rpc_endpoint *ep, uint16_t type, rpc_sink_fn fn)
{
    if (type == 0)
        return kvm_errf(KVMESH_EINVAL, "message type 0 is reserved");
    ep->handlers[type].sfn = fn;
    return 0;
}

int rpc_register_notify_sink(rpc_endpoint *ep, uint16_t type, rpc_sink_fn fn)
{
    if (type == 0)
        return kvm_errf(KVMESH_EINVAL, "message type 0 is reserved");
    ep->handlers[type].nsfn = fn;
    return 0;
}

int rpc_register_notify_handler(rpc_endpoint *ep, uint16_t type, rpc_handler_fn fn, void *arg)
{
    if (type == 0)
        return kvm_errf(KVMESH_EINVAL, "message type 0 is reserved");
    ep->handlers[type].nfn = fn;
    ep->handlers[type].narg = arg;
    return 0;
}

static int parse_address(rpc_peer *p, const char *address)
{
    if (strncmp(address, "unix:", 5) == 0) {
        const char *path = address + 5;
        if (!*path || strlen(path) >= 100)
            return -1;
        p->is_unix = 1;
        snprintf(p->path, sizeof(p->path), "%s", path);
        return 0;
    }
    if (strncmp(address, "tcp:", 4) != 0)
        return -1;
    char host[RPC_MAX_ADDRESS];
    const char *s = address + 4, *colon;
    if (*s == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':' || (size_t)(e - s - 1) >= sizeof(host))
            return -1;
        memcpy(host, s + 1, (size_t)(e - s - 1));
        host[e - s - 1] = 0;
        colon = e + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof(host))
            return -1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port <= 0 || port > 65535)
        return -1;
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&p->sa) != 0 &&
        uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&p->sa) != 0)
        return -1;
    return 0;
}

int rpc_peer_get(rpc_endpoint *ep, const char *runtime_id, const char *address, rpc_peer **out)
{
    if (ep->closing)
        return kvm_errf(KVMESH_ECLOSED, "endpoint is closing");
    if (!runtime_id || !*runtime_id || strlen(runtime_id) > HS_ID_MAX || !address ||
        strlen(address) >= RPC_MAX_ADDRESS)
        return kvm_errf(KVMESH_EINVAL, "peer needs a runtime id (1..%d bytes) and an address",
                        HS_ID_MAX);
    rpc_peer *p;
    LIST_FOREACH(p, &ep->peers, link)
    {
        if (strcmp(p->runtime_id, runtime_id) == 0 && strcmp(p->address, address) == 0) {
            *out = p;
            return 0;
        }
    }
    if (ep->npeers >= RPC_MAX_PEERS)
        return kvm_errf(KVMESH_ENOSPC, "more than %d peers", RPC_MAX_PEERS);
    p = calloc(1, sizeof(*p));
    if (!p)
        return KVMESH_ENOMEM;
    if (parse_address(p, address) != 0) {
        free(p);
        return kvm_errf(KVMESH_EURL,
                        "peer address '%s' invalid; use tcp:IP:PORT, tcp:[IPv6]:PORT or unix:PATH",
                        address);
    }
    p->ep = ep;
    snprintf(p->runtime_id, sizeof(p->runtime_id), "%s", runtime_id);
    snprintf(p->address, sizeof(p->address), "%s", address);
    TAILQ_INIT(&p->waiting);
    p->retry.fire = peer_retry;
    p->backoff = ep->cfg.reconnect_min_ms;
    LIST_INSERT_HEAD(&ep->peers, p, link);
    ep->npeers++;
    *out = p;
    return 0;
}

const char *rpc_peer_last_error(const rpc_peer *p)
{
    return p->last_error;
}

uint64_t rpc_peer_epoch(const rpc_peer *p)
{
    return p->epoch;
}

int rpc_peer_connected(const rpc_peer *p)
{
    return p->conn && p->conn->state == CONN_READY;
}

/* An RPC figure of the registry: its tcp and unix rows together. */
static uint64_t rd_rpc(const rpc_endpoint *ep, const char *family, unsigned xop)
{
    int64_t v = 0, u = 0;
    (void)obs_metrics_read(ep->metrics, family, OBS_TRANSPORT_TCP, xop, &v);
    (void)obs_metrics_read(ep->metrics, family, OBS_TRANSPORT_UNIX, xop, &u);
    return (uint64_t)v + (uint64_t)u;
}

void rpc_get_stats(const rpc_endpoint *ep, struct rpc_stats *out)
{
    *out = ep->st;
    out->pool_hits = ep->pool.st.hits;
    out->pool_misses = ep->pool.st.misses;
    out->pool_dropped = ep->pool.st.dropped;
    out->pool_cached_bytes = ep->pool.st.cached_bytes;
    /* the fields counted in the registry (once, where they happen) */
    uint64_t done = rd_rpc(ep, "transport_operations_total", OBS_XOP_RPC_SEND);
    out->calls_failed = rd_rpc(ep, "transport_failures_total", OBS_XOP_RPC_SEND);
    out->calls_ok = done - out->calls_failed;
    out->requests_received = rd_rpc(ep, "transport_operations_total", OBS_XOP_RPC_RECEIVE);
    out->bytes_out = rd_rpc(ep, "transport_bytes_total", OBS_XOP_RPC_SEND);
    out->bytes_in = rd_rpc(ep, "transport_bytes_total", OBS_XOP_RPC_RECEIVE);
}

const char *rpc_last_refusal(const rpc_endpoint *ep)
{
    return ep->last_refusal;
}

static void ep_timer_close_cb(uv_handle_t *h)
{
    rpc_endpoint *ep = h->data;
    ep->handles--;
    rpc_ep_maybe_free(ep);
}

void rpc_ep_maybe_free(rpc_endpoint *ep)
{
    if (!ep->closing || ep->handles || ep->live_replies)
        return;
    rpc_peer *p;
    while ((p = LIST_FIRST(&ep->peers)) != NULL) {
        LIST_REMOVE(p, link);
        KVM_ASSERT(TAILQ_EMPTY(&p->waiting));
        free(p);
    }
    void (*cb)(void *) = ep->closed_cb;
    void *arg = ep->closed_arg;
    free(ep->desc_raw);
    free(ep->handlers);
    bufpool_clear(&ep->pool);
    fl_clear(&ep->free_outs);
    fl_clear(&ep->free_calls);
    fl_clear(&ep->free_replies);
    fl_clear(&ep->free_hdrbufs);
    if (ep->own_metrics)
        obs_registry_free(ep->metrics);
    free(ep);
    if (cb)
        cb(arg);
}

void rpc_endpoint_close(rpc_endpoint *ep, void (*closed_cb)(void *arg), void *arg)
{
    KVM_ASSERT(!ep->closing);
    ep->closing = 1;
    ep->closed_cb = closed_cb;
    ep->closed_arg = arg;
    struct rpc_listener *l;
    while ((l = LIST_FIRST(&ep->listeners)) != NULL) {
        LIST_REMOVE(l, link);
        uv_close(&l->u.h, listener_close_cb);
    }
    struct rpc_conn *c;
    while ((c = LIST_FIRST(&ep->conns)) != NULL)
        rpc_conn_close(c, RPC_CLOSE_LOCAL);
    rpc_peer *p;
    LIST_FOREACH(p, &ep->peers, link)
    {
        rpc_timer_disarm(ep, &p->retry);
        rpc_peer_fail_waiting(p, KVMESH_ECLOSED, "endpoint closed");
    }
    /* Anything still armed now belongs to calls whose payload write is being cancelled. */
    uv_timer_stop(&ep->timer);
    uv_close((uv_handle_t *)&ep->timer, ep_timer_close_cb);
}
