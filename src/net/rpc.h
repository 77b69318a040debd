/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc.h — the kvmesh peer RPC control plane on a libuv loop: framed messages (frame.h), a
 * compatibility/authentication handshake (handshake.h), request/response with deadlines and
 * cancellation, one-way notifications, one reused connection per peer with reconnect backoff,
 * bounded send queues with backpressure (KVMESH_EAGAIN), a maximum frame size enforced before
 * any allocation, and per-reason connection close counters. docs/rpc.md is the reference.
 *
 * Threading: an endpoint belongs to one loop thread. Every function here must be called on that
 * thread, and every callback runs on it. Other threads hand work to the loop through their own
 * queue + uv_async_t (the runtime's hand-off, not this module's concern).
 *
 * Ownership summary:
 *  - rpc_msg.body bytes are copied at submit; rpc_msg.iov payload buffers are NOT copied (they go
 *    to sendmsg as iovecs) and must stay valid until the call's callback (rpc_call) or the
 *    sent callback (rpc_notify / rpc_reply_send) has run. With a NULL sent callback the payload
 *    is copied instead. A call's payload marked rpc_msg.lend need only stay valid until
 *    rpc_call returns (its unwritten rest is copied then).
 *  - Received payloads are malloc'd buffers of at least the announced length (large ones come
 *    from the endpoint's buffer pool, bufpool.h, but are plain malloc blocks); a callback/handler
 *    may take one by setting ->payload = NULL after saving the pointer (then it must free() it).
 *  - rpc_call handles stay valid until their callback returns; rpc_reply handles until
 *    rpc_reply_send() consumes them or rpc_reply_drop().
 */
#ifndef KVMESH_NET_RPC_H
#define KVMESH_NET_RPC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "net/frame.h"
#include "net/handshake.h"

#define RPC_MAX_IOV               16           /* payload iovecs per message */
#define RPC_MAX_FRAME_LIMIT       (1ull << 31) /* upper bound of max_frame_bytes */
#define RPC_MAX_ERROR_LEN         512          /* response error text bound */
#define RPC_DEFAULT_MAX_FRAME     ((64ull << 20) + (1ull << 20)) /* 64 MiB payload + headers */
#define RPC_DEFAULT_QUEUE_BYTES   (256ull << 20)
#define RPC_DEFAULT_QUEUE_MSGS    4096
#define RPC_DEFAULT_HANDSHAKE_MS  5000
#define RPC_DEFAULT_RECONNECT_MIN 20
#define RPC_DEFAULT_RECONNECT_MAX 2000
#define RPC_DEFAULT_MAX_CONNS     1024          /* inbound connections */
#define RPC_DEFAULT_POOL_BYTES    (16ull << 20) /* message buffers kept for reuse */
#define RPC_MAX_PEERS             4096
#define RPC_MAX_PENDING_CALLS     8192 /* calls outstanding per peer (queued, written, unanswered) */
/* Drain rate bound (with idle_timeout_ms): a connection whose frames stay in flight for a whole
 * idle period must have finished writing at least this many bytes per second of it. */
#define RPC_MIN_DRAIN_BPS         (64ull << 10)
#define RPC_MAX_REQUESTS_PER_CONN 8192 /* requests in service per inbound connection */
#define RPC_MAX_ADDRESS           256
#define RPC_RX_STAGING            (64u << 10) /* small-frame staging buffer per connection */
/* After a frame whose payload was read directly (>= RPC_RX_STAGING), the next frame's first read
 * into the staging buffer takes at most this many bytes: its headers and little more, so a large
 * payload that follows is read straight into its buffer rather than its first 64 KiB staged and
 * copied (rpc_conn.c alloc_cb). */
#define RPC_RX_HEAD_READ    4096u
#define RPC_TIMERS_PER_TURN 1024 /* bounded deadline expiries per timer callback */

/* Reserved message type for runtime environment messages (env_send), payload opaque. */
#define RPC_TYPE_ENV_MESSAGE 1

/* Why a connection was closed. Counted per reason (rpc_stats.close). Never renumber. */
#define RPC_CLOSE_REASON_LIST(X)                                                                   \
    X(RPC_CLOSE_LOCAL, "local")                                                                    \
    X(RPC_CLOSE_PEER_EOF, "peer_eof")                                                              \
    X(RPC_CLOSE_TRUNCATED, "truncated")                                                            \
    X(RPC_CLOSE_IO_ERROR, "io_error")                                                              \
    X(RPC_CLOSE_CONNECT_FAILED, "connect_failed")                                                  \
    X(RPC_CLOSE_BAD_MAGIC, "bad_magic")                                                            \
    X(RPC_CLOSE_BAD_VERSION, "bad_version")                                                        \
    X(RPC_CLOSE_BAD_FRAME, "bad_frame")                                                            \
    X(RPC_CLOSE_OVERSIZED, "oversized")                                                            \
    X(RPC_CLOSE_BAD_HEADER, "bad_header")                                                          \
    X(RPC_CLOSE_UNEXPECTED, "unexpected_frame")                                                    \
    X(RPC_CLOSE_HANDSHAKE_TIMEOUT, "handshake_timeout")                                            \
    X(RPC_CLOSE_REFUSED, "refused")                                                                \
    X(RPC_CLOSE_REFUSED_BY_PEER, "refused_by_peer")                                                \
    X(RPC_CLOSE_NOMEM, "no_memory")                                                                \
    X(RPC_CLOSE_CONN_LIMIT, "conn_limit")                                                          \
    X(RPC_CLOSE_WRITE_TIMEOUT, "write_timeout")                                                    \
    X(RPC_CLOSE_IDLE, "idle")

enum rpc_close_reason {
#define RPC_X(n, s) n,
    RPC_CLOSE_REASON_LIST(RPC_X)
#undef RPC_X
        RPC_CLOSE_COUNT
};

typedef struct rpc_endpoint rpc_endpoint;
typedef struct rpc_peer rpc_peer;
typedef struct rpc_call rpc_call_t;
typedef struct rpc_reply rpc_reply;

struct rpc_config {
    struct hs_descriptor local; /* this runtime's compatibility descriptor (required) */
    const uint8_t *secret;      /* deployment secret, HS_SECRET_MIN..MAX bytes; NULL = no auth */
    size_t secret_len;          /* copied by rpc_endpoint_new */
    uint64_t max_frame_bytes;   /* 64 + header + payload bound on send and receive */
    uint64_t max_queue_bytes;   /* per connection: bytes submitted and not yet written */
    uint32_t max_queue_msgs;    /* per connection: messages submitted and not yet written */
    uint32_t handshake_timeout_ms;
    uint32_t reconnect_min_ms, reconnect_max_ms; /* backoff after failed attempts, doubling */
    uint32_t max_conns;                          /* inbound connections */
    struct obs_registry *metrics; /* borrowed, outlives the endpoint; NULL: a private registry */
    /* Idle close (0 = never): an inbound connection with no request in service and no complete
     * frame received for idle_timeout_ms is closed (a peer trickling a frame forever, or one
     * that connected and went silent, loses its slot); an outbound one with no call pending and
     * no frame for idle_timeout_ms / 2 is closed by this side first (the next call reconnects),
     * so a peer's inbound idle close never races a new call. Write stall bound (same field):
     * while frames are being written on a connection, one must finish within idle_timeout_ms
     * of the previous one (or of the first submission), else the connection is closed
     * (write_timeout): a peer that stops reading holds neither its queued bytes nor its slot.
     * Drain rate bound (same field): frames in flight for a whole idle period must have
     * finished at least RPC_MIN_DRAIN_BPS x that period of bytes, else write_timeout too (a
     * peer reading slowly but steadily keeps neither its queue nor its slot). */
    uint32_t idle_timeout_ms;
    /* Message buffers of 64 KiB - 8 MiB (frame heads and copied payloads sent, headers and
     * payloads received) are kept for reuse, at most this many bytes in all (0 = none): a freed
     * block of that size would go back to the kernel and fault its pages in again next time. */
    uint64_t pool_bytes;
};

/* Fills defaults (descriptor and secret left zero: the caller must set local). */
void rpc_config_init(struct rpc_config *c);

struct rpc_msg {
    uint16_t type;                   /* message type (method), 1..65535 */
    const uint8_t *body;             /* method message, copied */
    size_t body_len;                 /* <= FRAME_MAX_HEADER_BYTES - 64 */
    const uv_buf_t *iov;             /* payload, not copied (see ownership above) */
    unsigned niov;                   /* <= RPC_MAX_IOV */
    uint32_t timeout_ms;             /* rpc_call only: 0 = no deadline */
    const struct frame_trace *trace; /* NULL = zero trace context */
    /* rpc_call only: the iov payload is lent until rpc_call returns, not until the callback
     * (docs/rpc.md "Lent payloads"): rpc_call writes what the socket takes now and copies what
     * is left of the payload (the socket full, or the peer not connected yet) into a buffer of
     * its own before it returns, so the caller may reuse or free the bytes at once after. */
    int lend;
};

/* Result of a call, valid during the callback only (payload may be taken, see above). */
struct rpc_result {
    int status;        /* 0, a KVMESH_E* from the peer, or local: ETIMEDOUT, ECANCELED, ECONN,
                          EINCOMPAT, EAUTH, ECLOSED, EPROTO */
    const char *error; /* detail, never NULL ("" when none) */
    const uint8_t *body;
    size_t body_len;
    uint8_t *payload;
    size_t payload_len;
    struct frame_trace trace;
};

typedef void (*rpc_call_cb)(rpc_call_t *call, struct rpc_result *res, void *arg);
typedef void (*rpc_sent_cb)(int status, void *arg); /* 0 = written, or KVMESH_ECONN/ECLOSED */

/* A received request or notification. */
struct rpc_request {
    uint16_t type;
    int one_way;          /* notification: no reply handle */
    uint64_t request_id;  /* 0 for notifications */
    uint32_t deadline_ms; /* the caller's remaining budget when sent, 0 = none */
    struct frame_trace trace;
    const uint8_t *body;
    size_t body_len;
    uint8_t *payload;
    size_t payload_len;
    const char *peer_runtime_id;
    /* A request whose type has a payload sink (rpc_register_sink): what the sink returned as
     * its ctx (NULL: none), and whether the payload went to the sink's dst or was discarded
     * (then payload is NULL; payload_len still the frame's). */
    void *sink_ctx;
    int sunk;
};

/*
 * A handler. Request handlers (rpc_register_handler) get a reply handle they complete now or
 * later with rpc_reply_send/rpc_reply_drop; `req` stays valid until then. Notification handlers
 * (rpc_register_notify_handler) get reply == NULL and req valid during the call only.
 */
typedef void (*rpc_handler_fn)(rpc_reply *reply, struct rpc_request *req, void *arg);

/*
 * Payload sinks (docs/rpc.md "Payload sinks"): a request type may name where its raw payload is
 * received before the payload is read. Once a request frame's fixed header and RpcHeader arrived
 * (its body readable, payload_len known, payload not yet read), the sink runs with a view of the
 * request (payload NULL; the view is valid during the call only) and the handler's arg, and
 * fills *out (zeroed before the call):
 *  - dst: payload_len bytes of room the payload is received into straight from the socket (no
 *    intermediate buffer); it must stay valid until the handler or abort ran. NULL: the payload
 *    goes to a pooled buffer as for any request (req->payload), unless discard;
 *  - discard (dst NULL): the payload is read and dropped (the stream stays in step);
 *  - landed (optional, with dst): runs after each run of bytes landed in dst, in order, while
 *    they are in this core's cache (at most RPC_SINK_BLOCK bytes per run);
 *  - ctx: handed to the handler as req->sink_ctx; with ctx set, abort is required: it runs
 *    instead of the handler when the handler will not run for this frame (the connection
 *    closed before the payload was whole, the request was refused before its handler, or the
 *    handler was removed meanwhile), and ctx ends there.
 *  - hold / release (optional, with dst): hold runs before each write into dst (a socket read
 *    straight into it, or a copy of staged bytes) and release after that write and its landed
 *    call; a hold that returns false (the owner of dst let it go) sends the rest of the payload
 *    to discard, and no byte lands in dst from then on (ctx still ends at the handler or
 *    abort). They let another thread take dst back at any time: it waits out one write at most.
 * The handler then runs as usual once the whole frame is in (req->sunk set when dst or
 * discard). A sink runs only for requests whose type has a handler too, and for notifications
 * whose type has a notification handler (rpc_register_notify_sink): the notification handler
 * gets req->sink_ctx and req->sunk as a request handler does.
 */
#define RPC_SINK_BLOCK (128u << 10) /* bytes per landed run (one socket read at most) */
struct rpc_sink {
    uint8_t *dst;
    int discard;
    void (*landed)(void *ctx, const uint8_t *p, size_t n);
    void (*abort)(void *ctx);
    bool (*hold)(void *ctx);
    void (*release)(void *ctx);
    void *ctx;
};
typedef void (*rpc_sink_fn)(const struct rpc_request *req, void *arg, struct rpc_sink *out);

/* Test hook (0 in production): while set, a connection whose payload is being received into a
 * sink with a hold (a get's lent buffer) stops reading after the first run that landed there
 * and resumes once the hook is cleared (checked every RPC_TEST_STALL_POLL_MS): the frame stays
 * half received for as long as a test needs. */
extern _Atomic uint32_t rpc_test_sink_stall;
#define RPC_TEST_STALL_POLL_MS 10

/* Registers the payload sink for request type (replacing any previous; fn NULL removes it). The
 * sink gets the arg of the type's request handler. */
int rpc_register_sink(rpc_endpoint *ep, uint16_t type, rpc_sink_fn fn);
/* The same for notifications of type: the sink gets the arg of the type's notification
 * handler (rpc_register_notify_handler). */
int rpc_register_notify_sink(rpc_endpoint *ep, uint16_t type, rpc_sink_fn fn);

/* Endpoint counters. calls_ok, calls_failed, requests_received, bytes_in and bytes_out are a
 * view of the endpoint's metrics registry (kvmesh_transport_*{transport="tcp"|"unix",
 * operation="rpc_send"|"rpc_receive"}, both transports summed: unix counts the connections over
 * unix sockets); the rest are connection diagnostics kept here. */
struct rpc_stats {
    uint64_t close[RPC_CLOSE_COUNT];            /* connections closed, by reason */
    uint64_t refused_local[HS_REASON_MAX + 1];  /* handshakes we refused, by hs_reason */
    uint64_t refused_remote[HS_REASON_MAX + 1]; /* handshakes the peer refused, by hs_reason */
    uint64_t conns_accepted, conns_connected, conns_open, handshakes_ok;
    uint64_t calls_started, calls_ok, calls_failed, calls_timed_out, calls_canceled;
    uint64_t requests_received, replies_sent, notifies_sent, notifies_received, notifies_dropped;
    uint64_t responses_late; /* for an unknown/cancelled/timed-out request id: dropped */
    uint64_t eagain;         /* submissions refused by backpressure */
    uint64_t frames_in, frames_out, bytes_in, bytes_out;
    uint64_t queued_bytes, queued_msgs; /* gauges: all connections */
    /* the message buffer pool (rpc_config.pool_bytes; docs/rpc.md "Message buffers"):
     * buffers of 64 KiB - 8 MiB reused, newly allocated, freed because the pool was full, and
     * the bytes it holds now */
    uint64_t pool_hits, pool_misses, pool_dropped, pool_cached_bytes;
    /* payload sinks: requests whose payload went straight to a sink's dst, was discarded by
     * one, and sink contexts aborted (the handler did not run) */
    uint64_t sink_direct, sink_discarded, sink_aborted;
    /* payloads whose sink's hold refused (its dst let go): their rest discarded */
    uint64_t sink_let_go;
    /* lent payloads (rpc_msg.lend): calls sent with one, those whose unwritten rest rpc_call
     * copied before it returned, and the bytes it copied */
    uint64_t lent, lent_copied, lent_copied_bytes;
};

/* Creates an endpoint on loop. cfg is copied. */
int rpc_endpoint_new(uv_loop_t *loop, const struct rpc_config *cfg, rpc_endpoint **out);

/*
 * Closes every connection and listener, fails outstanding calls with KVMESH_ECLOSED (callbacks
 * run), and frees the endpoint once all handles closed and all reply handles were completed;
 * then closed_cb (may be NULL) runs. No other call on ep after this.
 */
void rpc_endpoint_close(rpc_endpoint *ep, void (*closed_cb)(void *arg), void *arg);

/* Listens on TCP ip ("127.0.0.1", "::1", ...) and port (0 = any; *bound_port receives it). */
int rpc_listen_tcp(rpc_endpoint *ep, const char *ip, int port, int *bound_port);
/* Listens on a unix socket path (the file must not exist). */
int rpc_listen_unix(rpc_endpoint *ep, const char *path);

/*
 * Serves an already-connected stream socket (TCP or unix; e.g. from socket activation or a
 * socketpair) as an inbound connection. On 0 the endpoint owns fd (closes it); on error the
 * caller keeps it.
 */
int rpc_accept_fd(rpc_endpoint *ep, int fd);

/*
 * Registers the request handler for type (replacing any previous; fn NULL removes it). Requests
 * of a type without one are answered with KVMESH_ENOTSUP. Request handlers always get a reply
 * handle; notifications never reach them.
 */
int rpc_register_handler(rpc_endpoint *ep, uint16_t type, rpc_handler_fn fn, void *arg);
/*
 * Registers the notification handler for type (reply is always NULL). Notifications of a type
 * without one are dropped and counted (notifies_dropped).
 */
int rpc_register_notify_handler(rpc_endpoint *ep, uint16_t type, rpc_handler_fn fn, void *arg);

/*
 * The peer (runtime_id, address) — created on first use, then the same object (one connection,
 * reused). address: "tcp:IP:PORT", "tcp:[IPv6]:PORT" or "unix:PATH". Lives until endpoint close.
 * The handshake refuses a server whose runtime id differs from runtime_id.
 */
int rpc_peer_get(rpc_endpoint *ep, const char *runtime_id, const char *address, rpc_peer **out);

/* The last handshake refusal or connection error seen for this peer ("" when none). */
const char *rpc_peer_last_error(const rpc_peer *p);
/*
 * The runtime epoch the peer announced at its last accepted handshake (0 = never connected). A
 * higher value after a reconnect means the peer restarted; a lower one is refused (stale_epoch).
 */
uint64_t rpc_peer_epoch(const rpc_peer *p);
/* 1 when the peer's connection finished its handshake. */
int rpc_peer_connected(const rpc_peer *p);

/*
 * A fallback for p (the same runtime at another address: a unix-socket peer's tcp peer). When a
 * connection to p fails before p ever completed a handshake (epoch 0: its connect failed, was
 * refused or timed out), p falls back for good: the frames waiting on p move to fb in order (their
 * callers see no error, their deadlines unchanged), cb(p, why, arg) runs once (on the loop), and
 * every later call and notification on p goes to fb. fb must be another peer of the same runtime
 * id with no fallback of its own; setting it again replaces it.
 */
typedef void (*rpc_fallback_cb)(rpc_peer *p, const char *why, void *arg);
void rpc_peer_set_fallback(rpc_peer *p, rpc_peer *fb, rpc_fallback_cb cb, void *arg);
/* 1 once p fell back (its calls go to its fallback peer). */
int rpc_peer_fell_back(const rpc_peer *p);
/* p's fallback peer (NULL when none was set), its runtime id and its address. */
rpc_peer *rpc_peer_fallback(const rpc_peer *p);
const char *rpc_peer_runtime_id(const rpc_peer *p);
const char *rpc_peer_address(const rpc_peer *p);

/*
 * Sends a request. On 0, cb runs exactly once (later, never inside rpc_call); *out (may be NULL)
 * receives the handle for rpc_cancel. Errors (cb not called): KVMESH_EAGAIN (send queue full),
 * KVMESH_EINVAL/ETOOBIG (bad message), KVMESH_ECLOSED.
 */
int rpc_call(rpc_peer *p, const struct rpc_msg *m, rpc_call_cb cb, void *arg, rpc_call_t **out);

/* Cancels a call: its callback runs with KVMESH_ECANCELED (deferred until its payload write
 * finished); the server is told (CANCEL frame) when the request was already sent. */
void rpc_cancel(rpc_call_t *c);

/* One-way notification. sent_cb (may be NULL: payload copied) runs once. Errors as rpc_call. */
int rpc_notify(rpc_peer *p, const struct rpc_msg *m, rpc_sent_cb sent_cb, void *arg);

/*
 * Completes a request. status 0 or a negative KVMESH_E*; error text optional; m may be NULL
 * (type ignored). Returns 0 (consumed; sent_cb runs once), KVMESH_EAGAIN (NOT consumed: retry
 * or drop), or another error (consumed, nothing sent, sent_cb not called): KVMESH_ECONN when
 * the connection is gone, KVMESH_ECANCELED when the caller cancelled (neither is a bug: the
 * caller's call has completed already).
 */
int rpc_reply_send(rpc_reply *r, int status, const char *error, const struct rpc_msg *m,
                   rpc_sent_cb sent_cb, void *arg);
/* Completes a request without a response (the caller will time out or was cancelled). */
void rpc_reply_drop(rpc_reply *r);
/* The request a reply handle answers (valid until the handle is consumed). */
const struct rpc_request *rpc_reply_request(const rpc_reply *r);
/* 1 when the client cancelled the request or its connection closed. */
int rpc_reply_canceled(const rpc_reply *r);

/*
 * Environment messages (the real env binding's env_send): a notification of type
 * RPC_TYPE_ENV_MESSAGE whose body is 8 bytes (sender node id, env message type; big-endian u32
 * each) and whose payload is the message bytes, copied before this returns. Errors as rpc_notify.
 */
int rpc_env_notify(rpc_peer *p, uint32_t from_node, uint32_t env_type, const void *data,
                   size_t len);
/* Reads the sender node and env type of a received env message; KVMESH_EPROTO if malformed. */
int rpc_env_decode(const struct rpc_request *req, uint32_t *from_node, uint32_t *env_type);

void rpc_get_stats(const rpc_endpoint *ep, struct rpc_stats *out);
const char *rpc_close_reason_name(int reason);
/* The last handshake refusal at this endpoint, either direction ("" when none). */
const char *rpc_last_refusal(const rpc_endpoint *ep);
/* Milliseconds of the loop clock (uv_now). */
uint64_t rpc_now(const rpc_endpoint *ep);

#endif
