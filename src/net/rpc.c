/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc.c — peer RPC endpoint on one libuv loop (see rpc.h, docs/rpc.md).
 *
 * Owns: listeners, connections (inbound and one outbound per peer), the handshake driver, the
 * per-connection receive state machine, send queues, calls awaiting responses, server reply
 * handles, one deadline tree (calls, handshake timeouts, reconnect backoff) driven by a single
 * uv_timer, and the stats.
 *
 * Connection states:
 *
 *     CONNECTING --connected--> HS_HELLO --(ack sent | ack received, auth sent)--> HS_AUTH
 *         |                        |                                                 |
 *         |                        |                         verdict accepted        v
 *         +------------------------+--------------------------------------------> READY
 *         |                        |                                                 |
 *         v                        v                                                 v
 *                         CLOSING (uv_close issued; freed in the close callback)
 *
 * Inbound connections start in HS_HELLO. No REQUEST/RESPONSE/NOTIFY/CANCEL frame is accepted
 * before READY (a peer without the secret can issue nothing), and handshake frames are bounded
 * to HS_MAX_ENCODED bytes before allocation.
 *
 * Invariants: a call is in exactly one place (peer waiting queue with its frame, a connection's
 * pending tree, or finishing); its callback runs once and only after its payload write ended;
 * queued bytes/messages of a connection never exceed the configured bounds except for CANCEL and
 * handshake frames (fixed size) and a single message into an empty queue.
 */
#include "net/rpc.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#ifndef __unused
#define __unused __attribute__((__unused__)) /* libbsd tree.h static generators */
#endif
#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "rpc.pb-c.h"

/* ---- data structures ------------------------------------------------------------------------ */

struct rpc_timer {
    RB_ENTRY(rpc_timer) node;
    uint64_t due, seq;
    int armed;
    void (*fire)(struct rpc_timer *t);
};

static int timer_cmp(struct rpc_timer *a, struct rpc_timer *b)
{
    if (a->due != b->due)
        return a->due < b->due ? -1 : 1;
    return a->seq < b->seq ? -1 : (a->seq > b->seq);
}
RB_HEAD(rpc_timer_tree, rpc_timer);
RB_GENERATE_STATIC(rpc_timer_tree, rpc_timer, node, timer_cmp)

struct rpc_sendq {
    uint64_t bytes;
    uint32_t msgs;
};

/* One received frame (ownership moves with it). */
struct rpc_rx {
    struct frame_header fh;
    uint8_t *pb;
    uint8_t *payload;
};

TAILQ_HEAD(rpc_out_q, rpc_out);
struct rpc_out {
    TAILQ_ENTRY(rpc_out) q;
    struct rpc_out_q *inq; /* the waiting queue holding it, NULL once submitted */
    uv_write_t wr;
    struct rpc_conn *conn;
    struct rpc_sendq *sq;
    uint64_t bytes;
    uint8_t *head; /* fixed header + protobuf header */
    size_t head_len;
    uv_buf_t bufs[1 + RPC_MAX_IOV];
    unsigned nbufs;
    uint8_t *owned_payload;
    rpc_call_t *call;
    rpc_sent_cb sent_cb;
    void *sent_arg;
    uint8_t close_after; /* refusal verdict: close the connection once written */
};

struct rpc_call {
    RB_ENTRY(rpc_call) node; /* conn->pending */
    struct rpc_timer tmo;
    rpc_endpoint *ep;
    rpc_peer *peer;
    struct rpc_conn *conn; /* while in conn->pending */
    uint64_t id;
    uint64_t deadline;   /* loop ms, 0 = none */
    struct rpc_out *out; /* while waiting or being written */
    int done;            /* result decided */
    int status;
    char *error;
    struct rpc_rx *rx; /* deferred response */
    rpc_call_cb cb;
    void *arg;
};

static int call_cmp(rpc_call_t *a, rpc_call_t *b)
{
    return a->id < b->id ? -1 : (a->id > b->id);
}
RB_HEAD(rpc_call_tree, rpc_call);
RB_GENERATE_STATIC(rpc_call_tree, rpc_call, node, call_cmp)

struct rpc_reply {
    RB_ENTRY(rpc_reply) node; /* conn->replies */
    struct rpc_conn *conn;    /* NULL once the connection closed */
    rpc_endpoint *ep;
    struct rpc_request req;
    Kvmesh__Rpc__RpcHeader *hdr;
    int canceled;
};

static int reply_cmp(rpc_reply *a, rpc_reply *b)
{
    return a->req.request_id < b->req.request_id ? -1 : (a->req.request_id > b->req.request_id);
}
RB_HEAD(rpc_reply_tree, rpc_reply);
RB_GENERATE_STATIC(rpc_reply_tree, rpc_reply, node, reply_cmp)

enum conn_state { CONN_CONNECTING, CONN_HS_HELLO, CONN_HS_AUTH, CONN_READY, CONN_CLOSING };
enum rx_state { RX_FIXED, RX_PB, RX_PAYLOAD };

struct rpc_conn {
    union {
        uv_handle_t h;
        uv_stream_t s;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } u;
    uv_connect_t creq;
    LIST_ENTRY(rpc_conn) link;
    rpc_endpoint *ep;
    rpc_peer *peer; /* outbound only */
    int inbound;
    enum conn_state state;
    enum hs_reason refusal; /* why the handshake was refused (either side), HS_OK if not */
    struct rpc_timer hs_timer;
    uint8_t nonce_c[HS_NONCE_LEN], nonce_s[HS_NONCE_LEN];
    uint8_t *peer_desc_raw;
    size_t peer_desc_len;
    char peer_runtime_id[HS_ID_MAX + 1];
    uint64_t peer_epoch;
    /* receive */
    uint8_t *rbuf;
    size_t rlen, rpos;
    enum rx_state rxs;
    struct rpc_rx rx;
    size_t pb_got;
    uint64_t pay_got;
    /* send */
    struct rpc_sendq sq;
    unsigned writes; /* uv_write requests in flight */
    struct rpc_call_tree pending;
    struct rpc_reply_tree replies;
};
LIST_HEAD(rpc_conn_list, rpc_conn);

struct rpc_peer {
    LIST_ENTRY(rpc_peer) link;
    rpc_endpoint *ep;
    char runtime_id[HS_ID_MAX + 1];
    char address[RPC_MAX_ADDRESS];
    struct sockaddr_storage sa;
    int is_unix;
    char path[RPC_MAX_ADDRESS];
    struct rpc_conn *conn;
    struct rpc_out_q waiting; /* frames submitted before READY */
    struct rpc_sendq sq;
    struct rpc_timer retry;
    uint64_t next_attempt;
    uint32_t backoff;
    uint64_t epoch; /* highest runtime epoch seen from this peer, 0 = never connected */
    char last_error[HS_MSG_MAX + 128];
};
LIST_HEAD(rpc_peer_list, rpc_peer);

struct rpc_handler_slot {
    rpc_handler_fn fn; /* requests */
    void *arg;
    rpc_handler_fn nfn; /* notifications */
    void *narg;
};

struct rpc_listener {
    union {
        uv_handle_t h;
        uv_stream_t s;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } u;
    LIST_ENTRY(rpc_listener) link;
    rpc_endpoint *ep;
    int is_unix;
};
LIST_HEAD(rpc_listener_list, rpc_listener);

struct rpc_endpoint {
    uv_loop_t *loop;
    struct rpc_config cfg;
    uint8_t secret[HS_SECRET_MAX];
    uint8_t *desc_raw;
    size_t desc_raw_len;
    uv_timer_t timer;
    struct rpc_timer_tree timers;
    uint64_t timer_seq;
    uint64_t next_id;
    struct rpc_listener_list listeners;
    struct rpc_conn_list conns;
    struct rpc_peer_list peers;
    unsigned npeers, ninbound;
    struct rpc_handler_slot *handlers; /* 65536 slots */
    struct rpc_stats st;
    char last_refusal[HS_MSG_MAX + 64];
    int closing;
    unsigned handles; /* open uv handles */
    unsigned live_replies;
    void (*closed_cb)(void *);
    void *closed_arg;
};

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
}

static void ep_maybe_free(rpc_endpoint *ep);
static void conn_close(struct rpc_conn *c, enum rpc_close_reason reason);
static void peer_connect(rpc_peer *p);
static void conn_flush_waiting(struct rpc_conn *c);

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

static void timer_arm(rpc_endpoint *ep, struct rpc_timer *t, uint64_t due)
{
    KVM_ASSERT(!t->armed);
    t->due = due;
    t->seq = ++ep->timer_seq;
    t->armed = 1;
    RB_INSERT(rpc_timer_tree, &ep->timers, t);
    if (RB_MIN(rpc_timer_tree, &ep->timers) == t)
        timers_rearm(ep);
}

static void timer_disarm(rpc_endpoint *ep, struct rpc_timer *t)
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

/* Builds an outgoing frame; the fixed header is written again at submit time (deadline). */
static int out_new(uint8_t kind, uint64_t id, const struct rpc_msg *m, int status,
                   const char *error, int copy_payload, struct rpc_out **res)
{
    Kvmesh__Rpc__RpcHeader h = KVMESH__RPC__RPC_HEADER__INIT;
    char ebuf[RPC_MAX_ERROR_LEN + 1];
    size_t pb_len = 0;
    if (kind == FRAME_REQUEST || kind == FRAME_RESPONSE || kind == FRAME_NOTIFY) {
        h.status = status;
        snprintf(ebuf, sizeof(ebuf), "%s", error ? error : "");
        h.error = ebuf;
        if (m && m->body_len) {
            h.body.data = (uint8_t *)m->body;
            h.body.len = m->body_len;
        }
        pb_len = kvmesh__rpc__rpc_header__get_packed_size(&h);
    }
    struct rpc_out *o = calloc(1, sizeof(*o));
    if (!o)
        return KVMESH_ENOMEM;
    o->head_len = FRAME_FIXED_SIZE + pb_len;
    o->head = malloc(o->head_len);
    if (!o->head) {
        free(o);
        return KVMESH_ENOMEM;
    }
    if (pb_len)
        kvmesh__rpc__rpc_header__pack(&h, o->head + FRAME_FIXED_SIZE);
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
        o->owned_payload = malloc(plen);
        if (!o->owned_payload) {
            free(o->head);
            free(o);
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

/* A handshake or cancel frame (no protobuf RpcHeader). Takes ownership of pb (malloc'd). */
static struct rpc_out *out_raw(uint8_t kind, uint64_t id, uint8_t *pb, size_t pb_len)
{
    struct rpc_out *o = calloc(1, sizeof(*o));
    uint8_t *head = malloc(FRAME_FIXED_SIZE + pb_len);
    if (!o || !head) {
        free(o);
        free(head);
        free(pb);
        return NULL;
    }
    struct frame_header fh = {.kind = kind, .request_id = id, .header_len = (uint32_t)pb_len};
    frame_encode(&fh, head);
    if (pb_len)
        memcpy(head + FRAME_FIXED_SIZE, pb, pb_len);
    free(pb);
    o->head = head;
    o->head_len = FRAME_FIXED_SIZE + pb_len;
    o->bufs[0] = uv_buf_init((char *)head, (unsigned)o->head_len);
    o->nbufs = 1;
    o->bytes = o->head_len;
    return o;
}

static void out_free(struct rpc_out *o)
{
    free(o->head);
    free(o->owned_payload);
    free(o);
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

static void sendq_remove(rpc_endpoint *ep, struct rpc_out *o)
{
    if (!o->sq)
        return;
    o->sq->msgs--;
    o->sq->bytes -= o->bytes;
    ep->st.queued_msgs--;
    ep->st.queued_bytes -= o->bytes;
    o->sq = NULL;
}

static void call_deliver(rpc_call_t *c);

static void write_cb(uv_write_t *wr, int status)
{
    struct rpc_out *o = wr->data;
    struct rpc_conn *c = o->conn;
    rpc_endpoint *ep = c->ep;
    c->writes--;
    sendq_remove(ep, o);
    if (status == 0) {
        ep->st.frames_out++;
        ep->st.bytes_out += o->bytes;
    }
    rpc_call_t *call = o->call;
    rpc_sent_cb scb = o->sent_cb;
    void *sarg = o->sent_arg;
    int close_after = o->close_after;
    out_free(o);
    if (call) {
        call->out = NULL;
        if (call->done)
            call_deliver(call);
    }
    if (scb)
        scb(status == 0 ? 0 : KVMESH_ECONN, sarg);
    if (status != 0 && c->state != CONN_CLOSING)
        conn_close(c, RPC_CLOSE_IO_ERROR);
    else if (close_after && c->state != CONN_CLOSING)
        conn_close(c, RPC_CLOSE_REFUSED);
}

/* Hands a frame to libuv. The caller accounted it in a send queue already (or not: raw frames). */
static void conn_submit(struct rpc_conn *c, struct rpc_out *o)
{
    rpc_endpoint *ep = c->ep;
    o->conn = c;
    if (o->call && o->call->deadline) {
        /* Remaining budget at send time travels in the fixed header (bytes 16..19). */
        uint64_t now = uv_now(ep->loop);
        uint64_t left = o->call->deadline > now ? o->call->deadline - now : 1;
        if (left > UINT32_MAX)
            left = UINT32_MAX;
        for (int i = 0; i < 4; i++)
            o->head[16 + i] = (uint8_t)(left >> (24 - 8 * i));
    }
    o->wr.data = o;
    c->writes++;
    int rc = uv_write(&o->wr, &c->u.s, o->bufs, o->nbufs, write_cb);
    if (rc != 0) {
        /* Not queued in libuv: complete it as failed right away. */
        write_cb(&o->wr, rc);
    }
}

static int conn_send_raw(struct rpc_conn *c, uint8_t kind, uint8_t *pb, size_t pb_len,
                         int close_after)
{
    struct rpc_out *o = out_raw(kind, 0, pb, pb_len);
    if (!o) {
        conn_close(c, RPC_CLOSE_NOMEM);
        return KVMESH_ENOMEM;
    }
    o->close_after = (uint8_t)close_after;
    conn_submit(c, o);
    return 0;
}

/* ---- calls --------------------------------------------------------------------------------- */

static void call_free(rpc_call_t *c)
{
    if (c->rx) {
        free(c->rx->pb);
        free(c->rx->payload);
        free(c->rx);
    }
    free(c->error);
    free(c);
}

/* Runs the callback once the result is decided and the payload write ended. */
static void call_deliver(rpc_call_t *c)
{
    KVM_ASSERT(c->done && !c->out);
    rpc_endpoint *ep = c->ep;
    struct rpc_result res;
    memset(&res, 0, sizeof(res));
    res.status = c->status;
    res.error = c->error ? c->error : "";
    Kvmesh__Rpc__RpcHeader *h = NULL;
    if (c->rx) {
        res.trace = c->rx->fh.trace;
        h = kvmesh__rpc__rpc_header__unpack(NULL, c->rx->fh.header_len, c->rx->pb);
        if (!h) {
            res.status = KVMESH_EPROTO;
            res.error = "response header is not a valid RpcHeader";
        } else {
            res.status = h->status;
            if (res.status > 0 || (res.status < 0 && (res.status < KVMESH_ERROR_BAND_FIRST ||
                                                      res.status > KVMESH_ERROR_BAND_LAST)))
                res.status = KVMESH_EPROTO;
            res.error = h->error;
            res.body = h->body.data;
            res.body_len = h->body.len;
            res.payload = c->rx->payload;
            res.payload_len = c->rx->fh.payload_len;
        }
    }
    if (res.status == 0)
        ep->st.calls_ok++;
    else
        ep->st.calls_failed++;
    c->cb(c, &res, c->arg);
    if (c->rx && res.payload == NULL)
        c->rx->payload = NULL; /* taken by the callback */
    if (h)
        kvmesh__rpc__rpc_header__free_unpacked(h, NULL);
    call_free(c);
}

/* Decides a call's result (first decision wins) and detaches it from every index. */
static void call_finish(rpc_call_t *c, int status, const char *error, struct rpc_rx *rx)
{
    if (c->done) {
        if (rx) {
            free(rx->pb);
            free(rx->payload);
            free(rx);
        }
        return;
    }
    c->done = 1;
    c->status = status;
    c->rx = rx;
    if (error && *error)
        c->error = strdup(error);
    timer_disarm(c->ep, &c->tmo);
    if (c->conn) {
        RB_REMOVE(rpc_call_tree, &c->conn->pending, c);
        c->conn = NULL;
    }
    if (c->out && c->out->inq) {
        /* Still in a waiting queue: never written, drop the frame. */
        TAILQ_REMOVE(c->out->inq, c->out, q);
        sendq_remove(c->ep, c->out);
        out_free(c->out);
        c->out = NULL;
    }
    if (!c->out)
        call_deliver(c);
    /* else: write_cb delivers once libuv released the payload buffers. */
}

static void call_timeout(struct rpc_timer *t)
{
    rpc_call_t *c = KVM_CONTAINER_OF(t, struct rpc_call, tmo);
    c->ep->st.calls_timed_out++;
    call_finish(c, KVMESH_ETIMEDOUT, "deadline exceeded before a response arrived", NULL);
}

void rpc_cancel(rpc_call_t *c)
{
    if (c->done)
        return;
    c->ep->st.calls_canceled++;
    struct rpc_conn *conn = c->conn;
    uint64_t id = c->id;
    call_finish(c, KVMESH_ECANCELED, "cancelled by the caller", NULL);
    if (conn && conn->state == CONN_READY) {
        /* Best effort: tell the server (fixed-size frame, outside the queue bounds). */
        struct rpc_out *o = out_raw(FRAME_CANCEL, id, NULL, 0);
        if (o)
            conn_submit(conn, o);
    }
}

/* ---- peers and connections ----------------------------------------------------------------- */

static void set_state(struct rpc_conn *c, enum conn_state to)
{
    static const int legal[5][5] = {
        /* from CONNECTING */ {0, 1, 0, 0, 1},
        /* from HS_HELLO   */ {0, 0, 1, 0, 1},
        /* from HS_AUTH    */ {0, 0, 0, 1, 1},
        /* from READY      */ {0, 0, 0, 0, 1},
        /* from CLOSING    */ {0, 0, 0, 0, 0},
    };
    KVM_ASSERT(legal[c->state][to]);
    c->state = to;
}

static void conn_close_cb(uv_handle_t *h)
{
    struct rpc_conn *c = h->data;
    rpc_endpoint *ep = c->ep;
    KVM_ASSERT(c->writes == 0);
    free(c->rbuf);
    free(c->rx.pb);
    free(c->rx.payload);
    free(c->peer_desc_raw);
    free(c);
    ep->handles--;
    ep_maybe_free(ep);
}

static void peer_fail_waiting(rpc_peer *p, int status, const char *why)
{
    /* Detach the queue first: callbacks may submit new work to this peer. */
    struct rpc_out_q local = TAILQ_HEAD_INITIALIZER(local);
    struct rpc_out *o;
    TAILQ_CONCAT(&local, &p->waiting, q);
    TAILQ_FOREACH(o, &local, q)
    o->inq = &local;
    while ((o = TAILQ_FIRST(&local)) != NULL) {
        if (o->call) {
            call_finish(o->call, status, why, NULL); /* removes and frees o */
        } else {
            TAILQ_REMOVE(&local, o, q);
            sendq_remove(p->ep, o);
            rpc_sent_cb scb = o->sent_cb;
            void *sarg = o->sent_arg;
            out_free(o);
            if (scb)
                scb(status, sarg);
        }
    }
}

static void peer_retry(struct rpc_timer *t)
{
    rpc_peer *p = KVM_CONTAINER_OF(t, rpc_peer, retry);
    if (!p->conn && !TAILQ_EMPTY(&p->waiting) && !p->ep->closing)
        peer_connect(p);
}

static void conn_close(struct rpc_conn *c, enum rpc_close_reason reason)
{
    if (c->state == CONN_CLOSING)
        return;
    rpc_endpoint *ep = c->ep;
    int was_ready = c->state == CONN_READY;
    set_state(c, CONN_CLOSING);
    ep->st.close[reason]++;
    ep->st.conns_open--;
    timer_disarm(ep, &c->hs_timer);
    LIST_REMOVE(c, link);
    if (c->inbound)
        ep->ninbound--;
    uv_read_stop(&c->u.s);
    int status = ep->closing ? KVMESH_ECLOSED : KVMESH_ECONN;
    char why[HS_MSG_MAX + 128];
    rpc_peer *p = c->peer;
    if (p && reason == RPC_CLOSE_REFUSED_BY_PEER)
        snprintf(why, sizeof(why), "%s", p->last_error);
    else if (p && reason == RPC_CLOSE_REFUSED)
        snprintf(why, sizeof(why), "%s", p->last_error);
    else
        snprintf(why, sizeof(why), "connection %s: %s", was_ready ? "lost" : "failed",
                 rpc_close_reason_name(reason));
    if (p) {
        if (reason != RPC_CLOSE_REFUSED && reason != RPC_CLOSE_REFUSED_BY_PEER)
            snprintf(p->last_error, sizeof(p->last_error), "%s", why);
        else
            status = (c->refusal == HS_AUTH_REQUIRED || c->refusal == HS_AUTH_FAILED ||
                      c->refusal == HS_AUTH_UNEXPECTED)
                         ? KVMESH_EAUTH
                         : KVMESH_EINCOMPAT;
        p->conn = NULL;
        /*
         * Backoff: a lost established connection may be redialled at once; after a failed
         * attempt wait p->backoff (starting at reconnect_min_ms), then double it up to
         * reconnect_max_ms. A successful handshake resets it (conn_ready).
         */
        if (was_ready) {
            p->next_attempt = uv_now(ep->loop);
        } else {
            p->next_attempt = uv_now(ep->loop) + p->backoff;
            p->backoff = KVM_MIN(p->backoff * 2, ep->cfg.reconnect_max_ms);
        }
    }
    rpc_call_t *call;
    while ((call = RB_MIN(rpc_call_tree, &c->pending)) != NULL)
        call_finish(call, status, why, NULL);
    rpc_reply *r;
    while ((r = RB_MIN(rpc_reply_tree, &c->replies)) != NULL) {
        RB_REMOVE(rpc_reply_tree, &c->replies, r);
        r->conn = NULL;
        r->canceled = 1;
    }
    if (p && !was_ready)
        peer_fail_waiting(p, status, why);
    else if (p && !p->conn && !p->retry.armed && !TAILQ_EMPTY(&p->waiting) && !ep->closing)
        timer_arm(ep, &p->retry, p->next_attempt);
    uv_close(&c->u.h, conn_close_cb);
}

static void hs_timeout(struct rpc_timer *t)
{
    struct rpc_conn *c = KVM_CONTAINER_OF(t, struct rpc_conn, hs_timer);
    conn_close(c, RPC_CLOSE_HANDSHAKE_TIMEOUT);
}

static struct rpc_conn *conn_new(rpc_endpoint *ep, int is_unix)
{
    struct rpc_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->rbuf = malloc(RPC_RX_STAGING);
    if (!c->rbuf) {
        free(c);
        return NULL;
    }
    int rc = is_unix ? uv_pipe_init(ep->loop, &c->u.pipe, 0) : uv_tcp_init(ep->loop, &c->u.tcp);
    if (rc) {
        free(c->rbuf);
        free(c);
        return NULL;
    }
    if (!is_unix)
        uv_tcp_nodelay(&c->u.tcp, 1);
    c->u.h.data = c;
    c->ep = ep;
    c->state = CONN_CONNECTING;
    c->hs_timer.fire = hs_timeout;
    RB_INIT(&c->pending);
    RB_INIT(&c->replies);
    ep->handles++;
    ep->st.conns_open++;
    LIST_INSERT_HEAD(&ep->conns, c, link);
    timer_arm(ep, &c->hs_timer, uv_now(ep->loop) + ep->cfg.handshake_timeout_ms);
    return c;
}

static void refuse(struct rpc_conn *c, enum hs_reason reason, const char *msg)
{
    rpc_endpoint *ep = c->ep;
    c->refusal = reason;
    ep->st.refused_local[reason]++;
    snprintf(ep->last_refusal, sizeof(ep->last_refusal), "refused peer: %s: %s",
             hs_reason_name(reason), msg);
    if (c->peer)
        snprintf(c->peer->last_error, sizeof(c->peer->last_error), "refused peer: %s: %s",
                 hs_reason_name(reason), msg);
    uint8_t *pb;
    size_t n;
    if (hs_verdict_encode(reason, msg, &pb, &n) != 0) {
        conn_close(c, RPC_CLOSE_REFUSED);
        return;
    }
    uv_read_stop(&c->u.s);
    conn_send_raw(c, FRAME_VERDICT, pb, n, 1);
}

/* ---- receive ------------------------------------------------------------------------------- */

static void handle_hello(struct rpc_conn *c, struct rpc_rx *rx);
static void handle_ack(struct rpc_conn *c, struct rpc_rx *rx);
static void handle_auth(struct rpc_conn *c, struct rpc_rx *rx);
static void handle_verdict(struct rpc_conn *c, struct rpc_rx *rx);
static void handle_request(struct rpc_conn *c, struct rpc_rx *rx);
static void handle_response(struct rpc_conn *c, struct rpc_rx *rx);

static void rx_free(struct rpc_rx *rx)
{
    free(rx->pb);
    free(rx->payload);
    rx->pb = NULL;
    rx->payload = NULL;
}

/* A complete frame: dispatch (takes ownership of the rx buffers). */
static void frame_complete(struct rpc_conn *c)
{
    struct rpc_rx rx = c->rx;
    memset(&c->rx, 0, sizeof(c->rx));
    c->rxs = RX_FIXED;
    c->ep->st.frames_in++;
    switch (rx.fh.kind) {
    case FRAME_HELLO:
        handle_hello(c, &rx);
        break;
    case FRAME_HELLO_ACK:
        handle_ack(c, &rx);
        break;
    case FRAME_AUTH:
        handle_auth(c, &rx);
        break;
    case FRAME_VERDICT:
        handle_verdict(c, &rx);
        break;
    case FRAME_REQUEST:
    case FRAME_NOTIFY:
        handle_request(c, &rx);
        break;
    case FRAME_RESPONSE:
        handle_response(c, &rx);
        break;
    case FRAME_CANCEL: {
        rpc_reply key = {.req.request_id = rx.fh.request_id};
        rpc_reply *r = RB_FIND(rpc_reply_tree, &c->replies, &key);
        if (r)
            r->canceled = 1;
        rx_free(&rx);
        break;
    }
    default:
        KVM_ASSERT(0);
    }
}

/* Which frame kinds a connection accepts in its state (checked before any allocation). */
static int kind_allowed(const struct rpc_conn *c, uint8_t kind)
{
    switch (c->state) {
    case CONN_HS_HELLO:
        return c->inbound ? kind == FRAME_HELLO
                          : (kind == FRAME_HELLO_ACK || kind == FRAME_VERDICT);
    case CONN_HS_AUTH:
        /* A client that refuses the server's HelloAck says why with a VERDICT. */
        return c->inbound ? (kind == FRAME_AUTH || kind == FRAME_VERDICT) : kind == FRAME_VERDICT;
    case CONN_READY:
        if (c->inbound)
            return kind == FRAME_REQUEST || kind == FRAME_NOTIFY || kind == FRAME_CANCEL;
        return kind == FRAME_RESPONSE;
    default:
        return 0;
    }
}

static enum rpc_close_reason frame_err_reason(enum frame_error e)
{
    switch (e) {
    case FRAME_ERR_MAGIC:
        return RPC_CLOSE_BAD_MAGIC;
    case FRAME_ERR_VERSION:
        return RPC_CLOSE_BAD_VERSION;
    case FRAME_ERR_HEADER_SIZE:
    case FRAME_ERR_TOO_BIG:
        return RPC_CLOSE_OVERSIZED;
    default:
        return RPC_CLOSE_BAD_FRAME;
    }
}

/* Consumes staged bytes. Returns 0, or -1 when the connection was closed. */
static int rx_process(struct rpc_conn *c)
{
    rpc_endpoint *ep = c->ep;
    while (c->state != CONN_CLOSING) {
        size_t avail = c->rlen - c->rpos;
        uint8_t *p = c->rbuf + c->rpos;
        if (c->rxs == RX_FIXED) {
            if (avail < FRAME_FIXED_SIZE)
                return 0;
            enum frame_error fe = frame_decode(p, avail, ep->cfg.max_frame_bytes, &c->rx.fh);
            if (fe != FRAME_OK) {
                conn_close(c, frame_err_reason(fe));
                return -1;
            }
            if (!kind_allowed(c, c->rx.fh.kind)) {
                conn_close(c, RPC_CLOSE_UNEXPECTED);
                return -1;
            }
            if (c->state != CONN_READY && c->rx.fh.header_len > HS_MAX_ENCODED) {
                conn_close(c, RPC_CLOSE_OVERSIZED);
                return -1;
            }
            c->rpos += FRAME_FIXED_SIZE;
            c->pb_got = 0;
            c->pay_got = 0;
            if (c->rx.fh.header_len) {
                c->rx.pb = malloc(c->rx.fh.header_len);
                if (!c->rx.pb) {
                    conn_close(c, RPC_CLOSE_NOMEM);
                    return -1;
                }
            }
            if (c->rx.fh.payload_len) {
                c->rx.payload = malloc(c->rx.fh.payload_len);
                if (!c->rx.payload) {
                    conn_close(c, RPC_CLOSE_NOMEM);
                    return -1;
                }
            }
            c->rxs = RX_PB;
        } else if (c->rxs == RX_PB) {
            size_t need = c->rx.fh.header_len - c->pb_got;
            size_t n = KVM_MIN(need, avail);
            if (n)
                memcpy(c->rx.pb + c->pb_got, p, n);
            c->pb_got += n;
            c->rpos += n;
            if (c->pb_got < c->rx.fh.header_len)
                return 0;
            c->rxs = RX_PAYLOAD;
        } else {
            uint64_t need = c->rx.fh.payload_len - c->pay_got;
            size_t n = (size_t)KVM_MIN(need, (uint64_t)avail);
            if (n)
                memcpy(c->rx.payload + c->pay_got, p, n);
            c->pay_got += n;
            c->rpos += n;
            if (c->pay_got < c->rx.fh.payload_len)
                return 0;
            frame_complete(c);
        }
    }
    return -1;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rpc_conn *c = h->data;
    if (c->rxs == RX_PAYLOAD && c->rpos == c->rlen &&
        c->rx.fh.payload_len - c->pay_got >= RPC_RX_STAGING) {
        /* Large payload: read straight into its final buffer. */
        uint64_t left = c->rx.fh.payload_len - c->pay_got;
        if (left > (1u << 30))
            left = 1u << 30;
        *buf = uv_buf_init((char *)c->rx.payload + c->pay_got, (unsigned)left);
        return;
    }
    if (c->rpos == c->rlen) {
        c->rpos = c->rlen = 0;
    } else if (c->rpos > 0 && RPC_RX_STAGING - c->rlen < FRAME_FIXED_SIZE) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    *buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(RPC_RX_STAGING - c->rlen));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rpc_conn *c = s->data;
    rpc_endpoint *ep = c->ep;
    if (c->state == CONN_CLOSING)
        return;
    if (nread < 0) {
        int mid = c->rxs != RX_FIXED || c->rpos != c->rlen;
        if (nread == UV_EOF)
            conn_close(c, mid ? RPC_CLOSE_TRUNCATED : RPC_CLOSE_PEER_EOF);
        else
            conn_close(c, RPC_CLOSE_IO_ERROR);
        return;
    }
    if (nread == 0)
        return;
    ep->st.bytes_in += (uint64_t)nread;
    if ((uint8_t *)buf->base != c->rbuf + c->rlen) {
        /* Direct payload read. */
        c->pay_got += (uint64_t)nread;
        if (c->pay_got == c->rx.fh.payload_len)
            frame_complete(c);
        if (c->state != CONN_CLOSING)
            rx_process(c);
        return;
    }
    c->rlen += (size_t)nread;
    rx_process(c);
}

static void conn_start_read(struct rpc_conn *c)
{
    if (uv_read_start(&c->u.s, alloc_cb, read_cb) != 0)
        conn_close(c, RPC_CLOSE_IO_ERROR);
}

/* ---- handshake ----------------------------------------------------------------------------- */

static void handle_hello(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    struct hs_hello *h = malloc(sizeof(*h));
    char msg[HS_MSG_MAX];
    if (!h) {
        rx_free(rx);
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    if (hs_hello_decode(rx->pb, rx->fh.header_len, h) != 0) {
        rx_free(rx);
        free(h);
        refuse(c, HS_BAD_MESSAGE, "hello could not be decoded");
        return;
    }
    rx_free(rx);
    enum hs_reason r = hs_check_compat(&ep->cfg.local, &h->desc, NULL, NULL, msg, sizeof(msg));
    if (r == HS_OK && h->expect_runtime_id[0] &&
        strcmp(h->expect_runtime_id, ep->cfg.local.runtime_id) != 0) {
        r = HS_RUNTIME_MISMATCH;
        snprintf(msg, sizeof(msg), "client expected runtime '%s' but this is '%s'",
                 h->expect_runtime_id, ep->cfg.local.runtime_id);
    }
    if (r != HS_OK) {
        free(h);
        refuse(c, r, msg);
        return;
    }
    snprintf(c->peer_runtime_id, sizeof(c->peer_runtime_id), "%s", h->desc.runtime_id);
    memcpy(c->nonce_c, h->nonce, HS_NONCE_LEN);
    c->peer_desc_raw = malloc(h->desc_raw_len);
    uint8_t mac[HS_MAC_LEN];
    uint8_t *pb = NULL;
    size_t n = 0;
    int rc = c->peer_desc_raw ? hs_nonce(c->nonce_s) : KVMESH_ENOMEM;
    if (!rc) {
        memcpy(c->peer_desc_raw, h->desc_raw, h->desc_raw_len);
        c->peer_desc_len = h->desc_raw_len;
    }
    if (!rc && ep->cfg.secret)
        rc = hs_mac(ep->secret, ep->cfg.secret_len, 'S', c->nonce_c, c->nonce_s, c->peer_desc_raw,
                    c->peer_desc_len, ep->desc_raw, ep->desc_raw_len, mac);
    if (!rc)
        rc = hs_ack_encode(ep->desc_raw, ep->desc_raw_len, c->nonce_s, ep->cfg.secret != NULL,
                           ep->cfg.secret ? mac : NULL, &pb, &n);
    free(h);
    if (rc) {
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    set_state(c, CONN_HS_AUTH);
    conn_send_raw(c, FRAME_HELLO_ACK, pb, n, 0);
}

static void handle_ack(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    struct hs_hello *h = malloc(sizeof(*h));
    char msg[HS_MSG_MAX];
    if (!h) {
        rx_free(rx);
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    int rc = hs_ack_decode(rx->pb, rx->fh.header_len, h);
    rx_free(rx);
    if (rc) {
        free(h);
        refuse(c, HS_BAD_MESSAGE, "hello ack could not be decoded");
        return;
    }
    enum hs_reason r =
        hs_check_compat(&ep->cfg.local, &h->desc, c->peer->runtime_id, NULL, msg, sizeof(msg));
    if (r == HS_OK && h->desc.runtime_epoch < c->peer->epoch) {
        r = HS_STALE_EPOCH;
        snprintf(msg, sizeof(msg), "runtime '%s' epoch %llu is older than epoch %llu seen before",
                 h->desc.runtime_id, (unsigned long long)h->desc.runtime_epoch,
                 (unsigned long long)c->peer->epoch);
    }
    if (r == HS_OK && ep->cfg.secret && !h->auth_required) {
        r = HS_AUTH_UNEXPECTED;
        snprintf(msg, sizeof(msg), "peer did not prove knowledge of the deployment secret");
    }
    uint8_t mac[HS_MAC_LEN];
    if (r == HS_OK && ep->cfg.secret) {
        rc = hs_mac(ep->secret, ep->cfg.secret_len, 'S', c->nonce_c, h->nonce, ep->desc_raw,
                    ep->desc_raw_len, h->desc_raw, h->desc_raw_len, mac);
        if (rc || !hs_mac_equal(mac, h->mac)) {
            r = HS_AUTH_FAILED;
            snprintf(msg, sizeof(msg), "server proof does not match the deployment secret");
        }
    }
    if (r != HS_OK) {
        free(h);
        refuse(c, r, msg);
        return;
    }
    snprintf(c->peer_runtime_id, sizeof(c->peer_runtime_id), "%s", h->desc.runtime_id);
    c->peer_epoch = h->desc.runtime_epoch;
    uint8_t *pb = NULL;
    size_t n = 0;
    rc = 0;
    if (ep->cfg.secret)
        rc = hs_mac(ep->secret, ep->cfg.secret_len, 'C', c->nonce_c, h->nonce, ep->desc_raw,
                    ep->desc_raw_len, h->desc_raw, h->desc_raw_len, mac);
    if (!rc)
        rc = hs_auth_encode(ep->cfg.secret ? mac : NULL, &pb, &n);
    free(h);
    if (rc) {
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    set_state(c, CONN_HS_AUTH);
    conn_send_raw(c, FRAME_AUTH, pb, n, 0);
}

static void conn_ready(struct rpc_conn *c)
{
    rpc_endpoint *ep = c->ep;
    set_state(c, CONN_READY);
    timer_disarm(ep, &c->hs_timer);
    ep->st.handshakes_ok++;
    if (c->peer) {
        c->peer->backoff = ep->cfg.reconnect_min_ms;
        c->peer->last_error[0] = 0;
        c->peer->epoch = c->peer_epoch;
        conn_flush_waiting(c);
    }
}

static void handle_auth(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    uint8_t mac[HS_MAC_LEN], want[HS_MAC_LEN];
    int has_mac = 0;
    int rc = hs_auth_decode(rx->pb, rx->fh.header_len, mac, &has_mac);
    rx_free(rx);
    if (rc) {
        refuse(c, HS_BAD_MESSAGE, "auth could not be decoded");
        return;
    }
    if (ep->cfg.secret) {
        if (!has_mac) {
            refuse(c, HS_AUTH_REQUIRED, "this deployment requires peer authentication");
            return;
        }
        rc = hs_mac(ep->secret, ep->cfg.secret_len, 'C', c->nonce_c, c->nonce_s, c->peer_desc_raw,
                    c->peer_desc_len, ep->desc_raw, ep->desc_raw_len, want);
        if (rc || !hs_mac_equal(mac, want)) {
            refuse(c, HS_AUTH_FAILED, "client proof does not match the deployment secret");
            return;
        }
    }
    uint8_t *pb;
    size_t n;
    if (hs_verdict_encode(HS_OK, "", &pb, &n) != 0) {
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    conn_ready(c);
    conn_send_raw(c, FRAME_VERDICT, pb, n, 0);
}

static void handle_verdict(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    enum hs_reason r = HS_BAD_MESSAGE;
    char msg[HS_MSG_MAX];
    int rc = hs_verdict_decode(rx->pb, rx->fh.header_len, &r, msg, sizeof(msg));
    rx_free(rx);
    if (rc) {
        conn_close(c, RPC_CLOSE_BAD_HEADER);
        return;
    }
    if (r == HS_OK) {
        if (c->state != CONN_HS_AUTH || c->inbound) {
            conn_close(c, RPC_CLOSE_UNEXPECTED);
            return;
        }
        conn_ready(c);
        return;
    }
    c->refusal = r;
    ep->st.refused_remote[r]++;
    snprintf(ep->last_refusal, sizeof(ep->last_refusal), "refused by peer: %s: %s",
             hs_reason_name(r), msg);
    if (c->peer)
        snprintf(c->peer->last_error, sizeof(c->peer->last_error), "refused by peer: %s: %s",
                 hs_reason_name(r), msg);
    conn_close(c, RPC_CLOSE_REFUSED_BY_PEER);
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct rpc_conn *c = req->data;
    rpc_endpoint *ep = c->ep;
    if (c->state == CONN_CLOSING)
        return;
    if (status != 0) {
        if (c->peer)
            snprintf(c->peer->last_error, sizeof(c->peer->last_error), "connect to %s failed: %s",
                     c->peer->address, uv_strerror(status));
        conn_close(c, RPC_CLOSE_CONNECT_FAILED);
        return;
    }
    ep->st.conns_connected++;
    set_state(c, CONN_HS_HELLO);
    uint8_t *pb;
    size_t n;
    if (hs_nonce(c->nonce_c) != 0 || hs_hello_encode(ep->desc_raw, ep->desc_raw_len, c->nonce_c,
                                                     c->peer->runtime_id, &pb, &n) != 0) {
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    conn_start_read(c);
    if (c->state != CONN_CLOSING)
        conn_send_raw(c, FRAME_HELLO, pb, n, 0);
    else
        free(pb);
}

static void peer_connect(rpc_peer *p)
{
    rpc_endpoint *ep = p->ep;
    KVM_ASSERT(!p->conn);
    struct rpc_conn *c = conn_new(ep, p->is_unix);
    if (!c) {
        peer_fail_waiting(p, KVMESH_ENOMEM, "out of memory creating a connection");
        return;
    }
    c->peer = p;
    p->conn = c;
    c->creq.data = c;
    if (p->is_unix) {
        uv_pipe_connect(&c->creq, &c->u.pipe, p->path, connect_cb);
        return;
    }
    int rc = uv_tcp_connect(&c->creq, &c->u.tcp, (const struct sockaddr *)&p->sa, connect_cb);
    if (rc != 0) {
        snprintf(p->last_error, sizeof(p->last_error), "connect to %s failed: %s", p->address,
                 uv_strerror(rc));
        conn_close(c, RPC_CLOSE_CONNECT_FAILED);
    }
}

static void conn_flush_waiting(struct rpc_conn *c)
{
    rpc_peer *p = c->peer;
    struct rpc_out *o;
    while (c->state == CONN_READY && (o = TAILQ_FIRST(&p->waiting)) != NULL) {
        TAILQ_REMOVE(&p->waiting, o, q);
        o->inq = NULL;
        if (o->call) {
            o->call->conn = c;
            RB_INSERT(rpc_call_tree, &c->pending, o->call);
        }
        conn_submit(c, o);
    }
}

/* Queues a frame on the peer: written now when READY, else after the handshake. */
static void peer_enqueue(rpc_peer *p, struct rpc_out *o)
{
    rpc_endpoint *ep = p->ep;
    sendq_add(ep, o, &p->sq);
    TAILQ_INSERT_TAIL(&p->waiting, o, q);
    o->inq = &p->waiting;
    if (p->conn) {
        if (p->conn->state == CONN_READY)
            conn_flush_waiting(p->conn);
        return;
    }
    /* Connect from the timer (never inside rpc_call), no earlier than the backoff allows. */
    if (!p->retry.armed)
        timer_arm(ep, &p->retry, KVM_MAX(uv_now(ep->loop), p->next_attempt));
}

/* ---- requests, responses, notifications ---------------------------------------------------- */

static void handle_request(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    Kvmesh__Rpc__RpcHeader *h =
        kvmesh__rpc__rpc_header__unpack(NULL, rx->fh.header_len, rx->pb ? rx->pb : (uint8_t *)"");
    free(rx->pb);
    rx->pb = NULL;
    if (!h) {
        free(rx->payload);
        conn_close(c, RPC_CLOSE_BAD_HEADER);
        return;
    }
    struct rpc_request req = {
        .type = rx->fh.type,
        .one_way = rx->fh.kind == FRAME_NOTIFY,
        .request_id = rx->fh.kind == FRAME_NOTIFY ? 0 : rx->fh.request_id,
        .deadline_ms = rx->fh.deadline_ms,
        .trace = rx->fh.trace,
        .body = h->body.data,
        .body_len = h->body.len,
        .payload = rx->payload,
        .payload_len = rx->fh.payload_len,
        .peer_runtime_id = c->peer_runtime_id,
    };
    struct rpc_handler_slot *slot = &ep->handlers[rx->fh.type];
    if (req.one_way) {
        ep->st.notifies_received++;
        if (slot->nfn)
            slot->nfn(NULL, &req, slot->narg);
        else
            ep->st.notifies_dropped++;
        free(req.payload);
        kvmesh__rpc__rpc_header__free_unpacked(h, NULL);
        return;
    }
    ep->st.requests_received++;
    rpc_reply *r = calloc(1, sizeof(*r));
    if (!r) {
        free(req.payload);
        kvmesh__rpc__rpc_header__free_unpacked(h, NULL);
        conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    r->req = req;
    r->hdr = h;
    r->ep = ep;
    r->conn = c;
    if (RB_INSERT(rpc_reply_tree, &c->replies, r) != NULL) {
        /* A request id still in service was reused: protocol violation. */
        free(req.payload);
        kvmesh__rpc__rpc_header__free_unpacked(h, NULL);
        free(r);
        conn_close(c, RPC_CLOSE_UNEXPECTED);
        return;
    }
    r->req.peer_runtime_id = strdup(c->peer_runtime_id);
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

static void handle_response(struct rpc_conn *c, struct rpc_rx *rx)
{
    struct rpc_call key = {.id = rx->fh.request_id};
    rpc_call_t *call = RB_FIND(rpc_call_tree, &c->pending, &key);
    if (!call) {
        c->ep->st.responses_late++;
        rx_free(rx);
        return;
    }
    struct rpc_rx *own = malloc(sizeof(*own));
    if (!own) {
        rx_free(rx);
        call_finish(call, KVMESH_ENOMEM, "out of memory receiving a response", NULL);
        return;
    }
    *own = *rx;
    call_finish(call, 0, NULL, own);
}

static void reply_free(rpc_reply *r)
{
    rpc_endpoint *ep = r->ep;
    if (r->conn)
        RB_REMOVE(rpc_reply_tree, &r->conn->replies, r);
    free(r->req.payload);
    free((char *)r->req.peer_runtime_id);
    kvmesh__rpc__rpc_header__free_unpacked(r->hdr, NULL);
    free(r);
    ep->live_replies--;
    ep_maybe_free(ep);
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
    if (!c || c->state != CONN_READY || r->canceled) {
        rc = KVMESH_ECONN;
        goto consumed;
    }
    rc = sendq_admit(ep, &c->sq, plen);
    if (rc)
        return rc; /* not consumed */
    struct rpc_out *o;
    rc = out_new(FRAME_RESPONSE, r->req.request_id, m, status, error, sent_cb == NULL, &o);
    if (rc)
        goto consumed;
    o->sent_cb = sent_cb;
    o->sent_arg = arg;
    sendq_add(ep, o, &c->sq);
    ep->st.replies_sent++;
    reply_free(r);
    conn_submit(c, o);
    return 0;
consumed:
    reply_free(r);
    return rc;
}

static rpc_call_t *call_new(rpc_peer *p, rpc_call_cb cb, void *arg)
{
    rpc_call_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ep = p->ep;
    c->peer = p;
    c->id = ++p->ep->next_id;
    c->cb = cb;
    c->arg = arg;
    c->tmo.fire = call_timeout;
    return c;
}

int rpc_call(rpc_peer *p, const struct rpc_msg *m, rpc_call_cb cb, void *arg, rpc_call_t **out)
{
    rpc_endpoint *ep = p->ep;
    uint64_t plen;
    if (ep->closing)
        return kvm_errf(KVMESH_ECLOSED, "endpoint is closing");
    if (!cb || m->type == 0)
        return kvm_errf(KVMESH_EINVAL, "rpc_call needs a callback and a non-zero message type");
    int rc = msg_check(ep, m, &plen);
    if (rc)
        return rc;
    rc = sendq_admit(ep, &p->sq, plen);
    if (rc)
        return rc;
    rpc_call_t *c = call_new(p, cb, arg);
    if (!c)
        return KVMESH_ENOMEM;
    struct rpc_out *o;
    rc = out_new(FRAME_REQUEST, c->id, m, 0, NULL, 0, &o);
    if (rc) {
        free(c);
        return rc;
    }
    o->call = c;
    c->out = o;
    ep->st.calls_started++;
    if (m->timeout_ms) {
        c->deadline = uv_now(ep->loop) + m->timeout_ms;
        timer_arm(ep, &c->tmo, c->deadline);
    }
    if (out)
        *out = c;
    peer_enqueue(p, o);
    return 0;
}

int rpc_notify(rpc_peer *p, const struct rpc_msg *m, rpc_sent_cb sent_cb, void *arg)
{
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
    rc = out_new(FRAME_NOTIFY, 0, m, 0, NULL, sent_cb == NULL, &o);
    if (rc)
        return rc;
    o->sent_cb = sent_cb;
    o->sent_arg = arg;
    ep->st.notifies_sent++;
    peer_enqueue(p, o);
    return 0;
}

/* ---- listeners ----------------------------------------------------------------------------- */

static void listener_close_cb(uv_handle_t *h)
{
    struct rpc_listener *l = h->data;
    rpc_endpoint *ep = l->ep;
    free(l);
    ep->handles--;
    ep_maybe_free(ep);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct rpc_listener *l = server->data;
    rpc_endpoint *ep = l->ep;
    if (status != 0 || ep->closing)
        return;
    struct rpc_conn *c = conn_new(ep, l->is_unix);
    if (!c)
        return;
    c->inbound = 1;
    ep->ninbound++;
    if (uv_accept(server, &c->u.s) != 0) {
        conn_close(c, RPC_CLOSE_IO_ERROR);
        return;
    }
    ep->st.conns_accepted++;
    if (ep->ninbound > ep->cfg.max_conns) {
        conn_close(c, RPC_CLOSE_CONN_LIMIT);
        return;
    }
    set_state(c, CONN_HS_HELLO);
    conn_start_read(c);
}

int rpc_accept_fd(rpc_endpoint *ep, int fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    int type = 0;
    socklen_t tlen = sizeof(type);
    if (ep->closing)
        return kvm_errf(KVMESH_ECLOSED, "endpoint is closing");
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM ||
        (sa.ss_family != AF_UNIX && sa.ss_family != AF_INET && sa.ss_family != AF_INET6))
        return kvm_errf(KVMESH_EINVAL, "fd %d is not a connected stream socket", fd);
    int is_unix = sa.ss_family == AF_UNIX;
    struct rpc_conn *c = conn_new(ep, is_unix);
    if (!c)
        return KVMESH_ENOMEM;
    c->inbound = 1;
    ep->ninbound++;
    int rc = is_unix ? uv_pipe_open(&c->u.pipe, fd) : uv_tcp_open(&c->u.tcp, fd);
    if (rc != 0) {
        conn_close(c, RPC_CLOSE_IO_ERROR);
        return kvm_errf(KVMESH_EIO, "cannot adopt fd %d: %s", fd, uv_strerror(rc));
    }
    ep->st.conns_accepted++;
    if (ep->ninbound > ep->cfg.max_conns) {
        conn_close(c, RPC_CLOSE_CONN_LIMIT);
        return 0;
    }
    set_state(c, CONN_HS_HELLO);
    conn_start_read(c);
    return 0;
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
        rc = uv_listen(&l->u.s, 128, on_connection);
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
        rc = uv_listen(&l->u.s, 128, on_connection);
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
    if (cfg->secret) {
        memcpy(ep->secret, cfg->secret, cfg->secret_len);
        ep->cfg.secret = ep->secret;
    }
    rc = hs_descriptor_encode(&cfg->local, &ep->desc_raw, &ep->desc_raw_len);
    if (rc) {
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

void rpc_get_stats(const rpc_endpoint *ep, struct rpc_stats *out)
{
    *out = ep->st;
}

const char *rpc_last_refusal(const rpc_endpoint *ep)
{
    return ep->last_refusal;
}

static void ep_timer_close_cb(uv_handle_t *h)
{
    rpc_endpoint *ep = h->data;
    ep->handles--;
    ep_maybe_free(ep);
}

static void ep_maybe_free(rpc_endpoint *ep)
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
        conn_close(c, RPC_CLOSE_LOCAL);
    rpc_peer *p;
    LIST_FOREACH(p, &ep->peers, link)
    {
        timer_disarm(ep, &p->retry);
        peer_fail_waiting(p, KVMESH_ECLOSED, "endpoint closed");
    }
    /* Anything still armed now belongs to calls whose payload write is being cancelled. */
    uv_timer_stop(&ep->timer);
    uv_close((uv_handle_t *)&ep->timer, ep_timer_close_cb);
}
