/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_impl.h — internal to the RPC module (rpc.c: endpoint, peers, calls, replies, timers,
 * listeners; rpc_conn.c: one connection's write path, receive state machine and handshake
 * driver). Not for use outside src/net/rpc*.c. All functions run on the endpoint's loop thread.
 */
#ifndef KVMESH_NET_RPC_IMPL_H
#define KVMESH_NET_RPC_IMPL_H

#ifndef __unused
#define __unused __attribute__((__unused__)) /* libbsd tree.h generators */
#endif
#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>
#include <sys/socket.h>

#include "net/bufpool.h"
#include "net/rpc.h"
#include "obs/metrics.h"

struct rpc_timer {
    RB_ENTRY(rpc_timer) node;
    uint64_t due, seq;
    int armed;
    void (*fire)(struct rpc_timer *t);
};

RB_HEAD(rpc_timer_tree, rpc_timer);
RB_PROTOTYPE(rpc_timer_tree, rpc_timer, node, timer_cmp)

struct rpc_sendq {
    uint64_t bytes;
    uint32_t msgs;
};

/* One received frame (ownership moves with it). */
struct rpc_rx {
    struct frame_header fh;
    uint8_t *pb;
    uint8_t *payload;
    uint8_t *dst;         /* where the payload is received: payload, sink.dst, or NULL (none,
                             or discarded) */
    struct rpc_sink sink; /* an inbound request's payload sink (rpc.h), zero when none */
};

/*
 * Small per-message records (rpc_out, rpc_call, rpc_reply) are reused from bounded per-endpoint
 * free lists (RPC_FREE_MAX each) instead of a malloc/free per message; the lists are freed with
 * the endpoint. A record taken from a list is zeroed (an rpc_out up to head_inline).
 */
#define RPC_FREE_MAX 256 /* records kept per list */
/* frame heads (fixed header + RpcHeader) up to this many bytes live inside their rpc_out */
#define RPC_HEAD_INLINE 512
/* received RpcHeaders up to this many bytes go in reused blocks of this size (rpc_hdrbuf_get) */
#define RPC_HDRBUF_SMALL 512

struct rpc_freelist {
    void *head; /* singly linked through each record's first word */
    unsigned n;
};

TAILQ_HEAD(rpc_out_q, rpc_out);
struct rpc_out {
    TAILQ_ENTRY(rpc_out) q;
    struct rpc_out_q *inq;   /* the waiting queue holding it, NULL once submitted */
    TAILQ_ENTRY(rpc_out) wq; /* its connection's write queue, once submitted (rpc_conn.c) */
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
    uint8_t close_after;                  /* refusal verdict: close the connection once written */
    uint8_t head_inline[RPC_HEAD_INLINE]; /* head when head_len <= RPC_HEAD_INLINE */
};

struct rpc_call {
    RB_ENTRY(rpc_call) node; /* conn->pending */
    struct rpc_timer tmo;
    rpc_endpoint *ep;
    rpc_peer *peer;
    struct rpc_conn *conn; /* while in conn->pending */
    uint64_t id;
    uint64_t deadline;   /* loop ms, 0 = none */
    uint64_t start_ns;   /* uv_hrtime() at rpc_call (latency) */
    struct rpc_out *out; /* while waiting or being written */
    int done;            /* result decided */
    int status;
    char *error;
    struct rpc_rx *rx; /* deferred response: &rx_store or NULL */
    struct rpc_rx rx_store;
    rpc_call_cb cb;
    void *arg;
};

RB_HEAD(rpc_call_tree, rpc_call);
RB_PROTOTYPE(rpc_call_tree, rpc_call, node, call_cmp)

struct rpc_reply {
    RB_ENTRY(rpc_reply) node; /* conn->replies */
    struct rpc_conn *conn;    /* NULL once the connection closed */
    rpc_endpoint *ep;
    struct rpc_request req;
    uint8_t *pb; /* the received RpcHeader bytes (req.body points into them) */
    int canceled;
    char peer_id[HS_ID_MAX + 1]; /* req.peer_runtime_id (outlives the connection) */
};

RB_HEAD(rpc_reply_tree, rpc_reply);
RB_PROTOTYPE(rpc_reply_tree, rpc_reply, node, reply_cmp)

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
    struct rpc_timer idle_timer;  /* armed while READY when cfg.idle_timeout_ms */
    struct rpc_timer stall_timer; /* the test hook rpc_test_sink_stall (rpc.h) */
    uint64_t last_active;         /* loop ms of the last complete frame in or frame submitted */
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
    bool rx_held;       /* a direct read into a sink's dst is under its hold (alloc_cb to
                           read_cb) */
    bool rx_head_first; /* the last frame's payload was read directly (>= RPC_RX_STAGING): the
                           next staged read takes at most RPC_RX_HEAD_READ (rpc_conn.c alloc_cb) */
    /* send (rpc_conn.c "Write path") */
    uv_poll_t wpoll;       /* writable readiness, on wfd */
    uv_idle_t done_idle;   /* runs completions of frames written inside a submit: before the
                              next pass polls (fallback, see rpc_conn.c "Write path") */
    uv_check_t done_check; /* the same completions at the end of the pass that wrote them */
    int wfd;               /* dup of the socket for wpoll, -1 until connected */
    int werr;              /* first write error (negative errno), 0 if none */
    unsigned nhandles;     /* open uv handles of this connection (freed at 0) */
    struct rpc_out_q wq;   /* submitted frames not yet completed, in order */
    struct rpc_sendq sq;
    unsigned writes;         /* frames submitted and not yet completed */
    uint64_t write_progress; /* loop ms of the last write completion, or of the submission that
                                found no write in flight (write stall bound, see idle_fire) */
    uint64_t drain_start;    /* loop ms: the drain window began (drain rate bound, idle_fire) */
    uint64_t drained;        /* bytes of frames finished writing in that window */
    struct rpc_call_tree pending;
    struct rpc_reply_tree replies;
    unsigned nreplies; /* in `replies`, <= RPC_MAX_REQUESTS_PER_CONN */
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
    uint64_t epoch;  /* highest runtime epoch seen from this peer, 0 = never connected */
    unsigned ncalls; /* calls not yet delivered, <= RPC_MAX_PENDING_CALLS */
    char last_error[HS_MSG_MAX + 128];
    struct rpc_peer *fallback; /* rpc_peer_set_fallback: used once fell_back */
    rpc_fallback_cb fallback_cb;
    void *fallback_arg;
    int fell_back;
};
LIST_HEAD(rpc_peer_list, rpc_peer);

struct rpc_handler_slot {
    rpc_handler_fn fn; /* requests */
    void *arg;
    rpc_handler_fn nfn; /* notifications */
    void *narg;
    rpc_sink_fn sfn;  /* requests' payload sink (rpc.h), with fn's arg */
    rpc_sink_fn nsfn; /* notifications' payload sink, with nfn's narg */
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
    struct obs_registry *metrics; /* transport families {tcp, rpc_*} are counted here */
    bool own_metrics;             /* private registry (config had none), freed with ep */
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
    struct bufpool pool; /* message buffers (bufpool.h), cleared when freed */
    struct rpc_freelist free_outs, free_calls, free_replies; /* reused records, see above */
    struct rpc_freelist free_hdrbufs; /* RPC_HDRBUF_SMALL blocks (rpc_hdrbuf_get) */
    char last_refusal[HS_MSG_MAX + 64];
    int closing;
    unsigned handles; /* open uv handles */
    unsigned live_replies;
    void (*closed_cb)(void *);
    void *closed_arg;
};

/* The `transport` label of a connection's RPC figures: unix for a unix socket, else tcp. */
static inline unsigned rpc_conn_transport(const struct rpc_conn *c)
{
    return c->u.h.type == UV_NAMED_PIPE ? OBS_TRANSPORT_UNIX : OBS_TRANSPORT_TCP;
}

/* ---- rpc.c ---- */
void rpc_timer_arm(rpc_endpoint *ep, struct rpc_timer *t, uint64_t due);
void rpc_timer_disarm(rpc_endpoint *ep, struct rpc_timer *t);
/* rx (may be NULL): a received response whose buffers move to the call (the struct is copied). */
void rpc_call_finish(rpc_call_t *c, int status, const char *error, struct rpc_rx *rx);
void rpc_call_deliver(rpc_call_t *c);
void rpc_peer_fail_waiting(rpc_peer *p, int status, const char *why);
/* A connection to p failed before its handshake: moves p's waiting frames to its fallback peer
 * (rpc_peer_set_fallback) when it has one and never connected; 0 when it did not (no fallback). */
int rpc_peer_fall_back(rpc_peer *p, const char *why);
void rpc_handle_request(struct rpc_conn *c, struct rpc_rx *rx);
void rpc_handle_response(struct rpc_conn *c, struct rpc_rx *rx);
/* A READY inbound request's RpcHeader is whole, its payload not yet read: runs the type's sink
 * (if any) into rx->sink. */
void rpc_sink_offer(struct rpc_conn *c, struct rpc_rx *rx);
/* The handler will not run for rx: its sink's ctx ends (abort), if any. */
void rpc_sink_abort(rpc_endpoint *ep, struct rpc_rx *rx);
struct rpc_out *rpc_out_raw(rpc_endpoint *ep, uint8_t kind, uint64_t id, uint8_t *pb,
                            size_t pb_len);
void rpc_out_free(rpc_endpoint *ep, struct rpc_out *o);
void rpc_sendq_remove(rpc_endpoint *ep, struct rpc_out *o);
void rpc_ep_maybe_free(rpc_endpoint *ep);
/* Received RpcHeader buffers: n <= RPC_HDRBUF_SMALL from a free list, larger from the pool.
 * put takes any malloc block (NULL ignored). */
void *rpc_hdrbuf_get(rpc_endpoint *ep, size_t n);
void rpc_hdrbuf_put(rpc_endpoint *ep, void *b);

/* ---- rpc_conn.c ---- */
void rpc_conn_submit(struct rpc_conn *c, struct rpc_out *o);
void rpc_conn_close(struct rpc_conn *c, enum rpc_close_reason reason);
void rpc_conn_dial(rpc_peer *p);
void rpc_conn_flush_waiting(struct rpc_conn *c);
void rpc_conn_on_connection(uv_stream_t *server, int status);
void rpc_rx_free(rpc_endpoint *ep, struct rpc_rx *rx);

#endif
