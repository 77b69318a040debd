/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_conn.c — one RPC connection (see rpc_impl.h): its write path (sendmsg with MSG_NOSIGNAL,
 * libuv for writable readiness; send queue accounting), its receive state machine (fixed header ->
 * protobuf header -> payload, with every limit checked before allocating), the handshake driver on
 * both sides, dialing, accepting and closing with a counted reason.
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
 * to HS_MAX_ENCODED bytes before allocation. A refusing side sends a VERDICT and closes once it
 * is written.
 */
#include "net/rpc_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/util.h"

/*
 * Write path. Frames are written with sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT) on the socket, never
 * with libuv's write/writev: a write to a peer that closed then fails with EPIPE instead of
 * raising SIGPIPE, whatever the calling thread's mask and the process's disposition (the loop
 * may run on an application thread, docs/api.md "Signals"). libuv still tells when the socket
 * is writable: wpoll watches a dup of the socket (libuv allows one handle per fd; the stream
 * handle keeps reading on the original). Frames go out in submission order from c->wq.
 *
 * A frame written whole inside rpc_conn_submit whose completion runs no callback ends there; one
 * whose completion runs a callback (a sent callback, a decided call, a refusal that closes)
 * waits, so no callback runs inside rpc_call/rpc_notify/rpc_reply_send: it ends at the end of
 * the loop pass that wrote it (done_check, a check handle: after the pass's I/O callbacks, which
 * is where a handler answers a request) or, if that pass's check phase has begun already (a
 * frame written by another check callback, or outside a pass), before the next pass polls
 * (done_idle). Either handle that runs stops both. An idle handle alone made the next pass poll
 * with timeout 0 (libuv's UV_RUN_ONCE does not sleep when an idle handle is active as the pass
 * begins): a loop that answered a request polled twice before it slept. A frame
 * the socket does not take whole waits in c->wq for wpoll. A write error is kept in c->werr and
 * ends every frame still in c->wq (status werr), and the connection closes (io_error); frames
 * left when the connection closes end with UV_ECANCELED in its close path.
 */

/* A frame's write ended (status 0 or a negative errno): accounting, then its call and
 * callbacks. The frame is off c->wq. */
static void out_done(struct rpc_out *o, int status)
{
    struct rpc_conn *c = o->conn;
    rpc_endpoint *ep = c->ep;
    c->writes--;
    c->write_progress = uv_now(ep->loop);
    c->drained += o->bytes;
    rpc_sendq_remove(ep, o);
    if (status == 0) {
        ep->st.frames_out++;
        obs_count(ep->metrics, transport_bytes_total, rpc_conn_transport(c), OBS_XOP_RPC_SEND,
                  o->bytes);
    }
    rpc_call_t *call = o->call;
    rpc_sent_cb scb = o->sent_cb;
    void *sarg = o->sent_arg;
    int close_after = o->close_after;
    rpc_out_free(ep, o);
    if (call) {
        call->out = NULL;
        if (call->done)
            rpc_call_deliver(call);
    }
    if (scb)
        scb(status == 0 ? 0 : KVMESH_ECONN, sarg);
    if (status != 0 && c->state != CONN_CLOSING)
        rpc_conn_close(c, RPC_CLOSE_IO_ERROR);
    else if (close_after && c->state != CONN_CLOSING)
        rpc_conn_close(c, RPC_CLOSE_REFUSED);
}

_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec) &&
                   offsetof(uv_buf_t, base) == offsetof(struct iovec, iov_base) &&
                   offsetof(uv_buf_t, len) == offsetof(struct iovec, iov_len),
               "uv_buf_t is an iovec on unix");

/*
 * Writes what the socket takes now of o's bufs (advanced past what was written; nbufs 0 when
 * all of it): one sendmsg, again only after EINTR. Returns 0 (written whole, or the socket took
 * part or nothing: wait for room) or a negative errno.
 */
static int out_write(struct rpc_conn *c, struct rpc_out *o)
{
    while (o->nbufs > 0) {
        struct msghdr m = {.msg_iov = (struct iovec *)o->bufs, .msg_iovlen = o->nbufs};
        ssize_t n = sendmsg(c->wfd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
        }
        size_t left = (size_t)n;
        unsigned i = 0;
        while (i < o->nbufs && left >= o->bufs[i].len)
            left -= o->bufs[i++].len;
        memmove(o->bufs, o->bufs + i, (o->nbufs - i) * sizeof(o->bufs[0]));
        o->nbufs -= i;
        if (o->nbufs == 0)
            return 0;
        o->bufs[0].base += left;
        o->bufs[0].len -= left;
        return 0; /* a short write: the socket is full (another try would only see EAGAIN) */
    }
    return 0;
}

/* Ends the frames at the head of c->wq that were written whole (all of them with c->werr once a
 * write failed); stops at the first one still being written, or when the connection closed
 * (its close path ends the rest). */
static void wq_complete(struct rpc_conn *c)
{
    struct rpc_out *o;
    while (c->state != CONN_CLOSING && (o = TAILQ_FIRST(&c->wq)) != NULL &&
           (o->nbufs == 0 || c->werr)) {
        TAILQ_REMOVE(&c->wq, o, wq);
        out_done(o, o->nbufs == 0 ? 0 : c->werr);
    }
}

static void wpoll_cb(uv_poll_t *h, int status, int events);

/* Writes the frames of c->wq the socket takes, then ends those written; wpoll watches for room
 * while a frame is left. */
static void wq_flush(struct rpc_conn *c)
{
    struct rpc_out *o;
    TAILQ_FOREACH(o, &c->wq, wq)
    {
        if (c->werr)
            break;
        if (o->nbufs == 0)
            continue;
        c->werr = out_write(c, o);
        if (!c->werr && o->nbufs > 0)
            break; /* the socket is full */
    }
    wq_complete(c);
    if (c->state == CONN_CLOSING)
        return;
    if (!TAILQ_EMPTY(&c->wq))
        uv_poll_start(&c->wpoll, UV_WRITABLE, wpoll_cb);
    else if (uv_is_active((uv_handle_t *)&c->wpoll))
        uv_poll_stop(&c->wpoll); /* (libuv's stop costs an epoll_ctl even when not started) */
}

static void wpoll_cb(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct rpc_conn *c = h->data;
    if (c->state == CONN_CLOSING)
        return;
    if (status < 0 && !c->werr)
        c->werr = status; /* a socket error (libuv stopped the poll): sendmsg would report it */
    wq_flush(c);
}

/* Runs the completions a submit left (see "Write path"): whichever of done_check and done_idle
 * runs first stops both. */
static void done_run(struct rpc_conn *c)
{
    uv_idle_stop(&c->done_idle);
    uv_check_stop(&c->done_check);
    if (c->state != CONN_CLOSING)
        wq_flush(c);
}

static void done_idle_cb(uv_idle_t *h)
{
    done_run(h->data);
}

static void done_check_cb(uv_check_t *h)
{
    done_run(h->data);
}

/* Hands a frame to the write path. The caller accounted it in a send queue already (or not:
 * raw frames). */
void rpc_conn_submit(struct rpc_conn *c, struct rpc_out *o)
{
    rpc_endpoint *ep = c->ep;
    o->conn = c;
    c->last_active = uv_now(ep->loop);
    if (o->call && o->call->deadline) {
        /* Remaining budget at send time travels in the fixed header (bytes 16..19). */
        uint64_t now = uv_now(ep->loop);
        uint64_t left = o->call->deadline > now ? o->call->deadline - now : 1;
        if (left > UINT32_MAX)
            left = UINT32_MAX;
        for (int i = 0; i < 4; i++)
            o->head[16 + i] = (uint8_t)(left >> (24 - 8 * i));
    }
    if (c->writes++ == 0) {
        c->write_progress = c->drain_start = uv_now(ep->loop);
        c->drained = 0;
    }
    if (c->state == CONN_CLOSING || c->wfd < 0) {
        out_done(o, UV_EBADF); /* (as libuv's write on a closed stream) */
        return;
    }
    if (!TAILQ_EMPTY(&c->wq)) {
        TAILQ_INSERT_TAIL(&c->wq, o, wq); /* behind frames still being written */
        return;
    }
    if (!c->werr)
        c->werr = out_write(c, o);
    /* Ended here only when its completion runs no callback (nothing runs inside rpc_call,
     * rpc_notify or rpc_reply_send: the call's callback waits for the response). */
    if (o->nbufs == 0 && !c->werr && !o->sent_cb && !o->close_after &&
        !(o->call && o->call->done)) {
        out_done(o, 0);
        return;
    }
    TAILQ_INSERT_TAIL(&c->wq, o, wq);
    if (o->nbufs == 0 || c->werr) {
        /* (a check handle started inside the check phase runs in the next pass only: the idle
         * handle then runs it before that pass polls) */
        uv_check_start(&c->done_check, done_check_cb);
        uv_idle_start(&c->done_idle, done_idle_cb);
    } else
        uv_poll_start(&c->wpoll, UV_WRITABLE, wpoll_cb);
}

/* The socket is connected: sets up the write path (wfd, wpoll). 0, or closes c (io_error). */
static int conn_attach_fd(struct rpc_conn *c)
{
    uv_os_fd_t fd;
    if (uv_fileno(&c->u.h, &fd) != 0 || (c->wfd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        goto fail;
    if (uv_poll_init(c->ep->loop, &c->wpoll, c->wfd) != 0) {
        close(c->wfd);
        c->wfd = -1;
        goto fail;
    }
    c->wpoll.data = c;
    c->nhandles++;
    return 0;
fail:
    rpc_conn_close(c, RPC_CLOSE_IO_ERROR);
    return -1;
}

static int conn_send_raw(struct rpc_conn *c, uint8_t kind, uint8_t *pb, size_t pb_len,
                         int close_after)
{
    struct rpc_out *o = rpc_out_raw(c->ep, kind, 0, pb, pb_len);
    if (!o) {
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
        return KVMESH_ENOMEM;
    }
    o->close_after = (uint8_t)close_after;
    rpc_conn_submit(c, o);
    return 0;
}

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

static void stall_fire(struct rpc_timer *t);

static void conn_close_cb(uv_handle_t *h)
{
    struct rpc_conn *c = h->data;
    rpc_endpoint *ep = c->ep;
    struct rpc_out *o;
    while ((o = TAILQ_FIRST(&c->wq)) != NULL) { /* (once: a callback cannot submit here) */
        TAILQ_REMOVE(&c->wq, o, wq);
        out_done(o, UV_ECANCELED);
    }
    if (--c->nhandles > 0)
        return;
    KVM_ASSERT(c->writes == 0);
    free(c->rbuf);
    rpc_sink_abort(ep, &c->rx); /* a request whose payload never came whole */
    rpc_rx_free(ep, &c->rx);
    free(c->peer_desc_raw);
    free(c);
    ep->handles--;
    rpc_ep_maybe_free(ep);
}

void rpc_conn_close(struct rpc_conn *c, enum rpc_close_reason reason)
{
    if (c->state == CONN_CLOSING)
        return;
    rpc_endpoint *ep = c->ep;
    int was_ready = c->state == CONN_READY;
    set_state(c, CONN_CLOSING);
    ep->st.close[reason]++;
    ep->st.conns_open--;
    rpc_timer_disarm(ep, &c->hs_timer);
    rpc_timer_disarm(ep, &c->idle_timer);
    rpc_timer_disarm(ep, &c->stall_timer);
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
    else if (p && reason == RPC_CLOSE_CONNECT_FAILED && p->last_error[0])
        snprintf(why, sizeof(why), "%s", p->last_error); /* "connect to ADDR failed: ERRNO" */
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
        rpc_call_finish(call, status, why, NULL);
    rpc_reply *r;
    while ((r = RB_MIN(rpc_reply_tree, &c->replies)) != NULL) {
        RB_REMOVE(rpc_reply_tree, &c->replies, r);
        r->conn = NULL;
        r->canceled = 1;
    }
    c->nreplies = 0;
    if (p && !was_ready && !rpc_peer_fall_back(p, why))
        rpc_peer_fail_waiting(p, status, why);
    else if (p && !p->conn && !p->retry.armed && !TAILQ_EMPTY(&p->waiting) && !ep->closing)
        rpc_timer_arm(ep, &p->retry, p->next_attempt);
    uv_close((uv_handle_t *)&c->done_idle, conn_close_cb);
    uv_close((uv_handle_t *)&c->done_check, conn_close_cb);
    if (c->wfd >= 0) {
        /* The poll stops watching at once (as uv_close closes the stream's socket now): the
         * socket's last descriptor goes with the stream's, so the peer sees the close now. */
        uv_close((uv_handle_t *)&c->wpoll, conn_close_cb);
        close(c->wfd);
        c->wfd = -1;
    }
    uv_close(&c->u.h, conn_close_cb);
}

static void hs_timeout(struct rpc_timer *t)
{
    struct rpc_conn *c = KVM_CONTAINER_OF(t, struct rpc_conn, hs_timer);
    rpc_conn_close(c, RPC_CLOSE_HANDSHAKE_TIMEOUT);
}

/* Idle limit of a connection: inbound the configured time, outbound half of it. */
static uint64_t idle_limit(const struct rpc_conn *c)
{
    uint64_t t = c->ep->cfg.idle_timeout_ms;
    return c->inbound ? t : (t / 2 ? t / 2 : 1);
}

/*
 * Idle close and write stall bound (both need cfg.idle_timeout_ms). A connection with a write in
 * flight is busy, never idle; but while writes are in flight, one of them must complete within
 * idle_timeout_ms (in either direction) of the previous completion, or of the submission that
 * found none in flight; and frames in flight for a whole idle period must have finished at least
 * RPC_MIN_DRAIN_BPS x that period of bytes (drain rate bound). A peer that stops reading its
 * replies, or reads them slowly but steadily, is closed with write_timeout: its queued frames
 * end (their bytes leave the send queue) and its slot is freed.
 */
static void idle_fire(struct rpc_timer *t)
{
    struct rpc_conn *c = KVM_CONTAINER_OF(t, struct rpc_conn, idle_timer);
    rpc_endpoint *ep = c->ep;
    if (c->state != CONN_READY)
        return;
    uint64_t now = uv_now(ep->loop), limit = idle_limit(c), stall = ep->cfg.idle_timeout_ms;
    if (c->writes > 0 && now - c->write_progress >= stall) {
        rpc_conn_close(c, RPC_CLOSE_WRITE_TIMEOUT);
        return;
    }
    if (c->writes > 0 && now - c->drain_start >= stall) { /* a whole period in flight */
        if (c->drained < RPC_MIN_DRAIN_BPS * (now - c->drain_start) / 1000) {
            rpc_conn_close(c, RPC_CLOSE_WRITE_TIMEOUT);
            return;
        }
        c->drain_start = now;
        c->drained = 0;
    }
    bool busy = c->writes > 0 || !RB_EMPTY(&c->pending) || c->nreplies > 0 ||
                (c->peer && !TAILQ_EMPTY(&c->peer->waiting));
    if (!busy && now - c->last_active >= limit) {
        rpc_conn_close(c, RPC_CLOSE_IDLE);
        return;
    }
    uint64_t due = busy ? now + limit : c->last_active + limit;
    if (c->writes > 0)
        due = KVM_MIN(due, KVM_MIN(c->write_progress, c->drain_start) + stall);
    rpc_timer_arm(ep, &c->idle_timer, due);
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
    /* Small request/response frames: without TCP_NODELAY, Nagle + delayed ACK hold each
     * follow-up frame ~40 ms (measured: kvmesh bench put 23 -> 5400 ops/s at 256 KiB). */
    if (!is_unix)
        uv_tcp_nodelay(&c->u.tcp, 1);
    c->u.h.data = c;
    uv_idle_init(ep->loop, &c->done_idle);   /* cannot fail */
    uv_check_init(ep->loop, &c->done_check); /* cannot fail either */
    c->done_idle.data = c;
    c->done_check.data = c;
    c->nhandles = 3;
    c->wfd = -1;
    TAILQ_INIT(&c->wq);
    c->ep = ep;
    c->state = CONN_CONNECTING;
    c->hs_timer.fire = hs_timeout;
    c->stall_timer.fire = stall_fire;
    c->idle_timer.fire = idle_fire;
    RB_INIT(&c->pending);
    RB_INIT(&c->replies);
    ep->handles++;
    ep->st.conns_open++;
    LIST_INSERT_HEAD(&ep->conns, c, link);
    rpc_timer_arm(ep, &c->hs_timer, uv_now(ep->loop) + ep->cfg.handshake_timeout_ms);
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
        rpc_conn_close(c, RPC_CLOSE_REFUSED);
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

void rpc_rx_free(rpc_endpoint *ep, struct rpc_rx *rx)
{
    rpc_hdrbuf_put(ep, rx->pb);
    bufpool_put(&ep->pool, rx->payload);
    rx->pb = NULL;
    rx->payload = NULL;
}

/* A complete frame: dispatch (takes ownership of the rx buffers). */
static void frame_complete(struct rpc_conn *c)
{
    struct rpc_rx rx = c->rx;
    memset(&c->rx, 0, sizeof(c->rx));
    c->rxs = RX_FIXED;
    c->rx_head_first = rx.fh.payload_len >= RPC_RX_STAGING;
    c->ep->st.frames_in++;
    c->last_active = uv_now(c->ep->loop); /* complete frames only: trickled bytes do not count */
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
        rpc_handle_request(c, &rx);
        break;
    case FRAME_RESPONSE:
        rpc_handle_response(c, &rx);
        break;
    case FRAME_CANCEL: {
        rpc_reply key = {.req.request_id = rx.fh.request_id};
        rpc_reply *r = RB_FIND(rpc_reply_tree, &c->replies, &key);
        if (r)
            r->canceled = 1;
        rpc_rx_free(c->ep, &rx);
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

/* The frame's headers are whole: where its payload goes (a request's sink, rpc.h, else a pooled
 * buffer), then RX_PAYLOAD. 0, or -1 when the connection was closed (out of memory). */
static int rx_payload_begin(struct rpc_conn *c)
{
    rpc_endpoint *ep = c->ep;
    c->rxs = RX_PAYLOAD;
    if (!c->rx.fh.payload_len)
        return 0;
    if (c->inbound && c->state == CONN_READY &&
        (c->rx.fh.kind == FRAME_REQUEST || c->rx.fh.kind == FRAME_NOTIFY))
        rpc_sink_offer(c, &c->rx);
    if (c->rx.sink.dst || c->rx.sink.discard) {
        c->rx.dst = c->rx.sink.dst; /* (NULL: discarded) */
        return 0;
    }
    c->rx.payload = bufpool_get(&ep->pool, c->rx.fh.payload_len);
    if (!c->rx.payload) {
        rpc_conn_close(c, RPC_CLOSE_NOMEM); /* (its close path aborts the sink's ctx) */
        return -1;
    }
    c->rx.dst = c->rx.payload;
    return 0;
}

/* Before a write into the payload's dst: whether the bytes may land there. A sink with a hold
 * (rpc.h) is held (the caller releases it after the write, rx_sink_release); one whose hold
 * refuses has let its dst go: the rest of the payload is discarded (dst NULL). */
static bool rx_sink_hold(struct rpc_conn *c)
{
    if (!c->rx.dst)
        return false;
    if (!c->rx.sink.hold || c->rx.dst != c->rx.sink.dst)
        return true;
    if (c->rx.sink.hold(c->rx.sink.ctx))
        return true;
    c->rx.dst = NULL;
    c->ep->st.sink_let_go++;
    return false;
}

static void rx_sink_release(struct rpc_conn *c)
{
    if (c->rx.sink.release && c->rx.dst && c->rx.dst == c->rx.sink.dst)
        c->rx.sink.release(c->rx.sink.ctx);
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
                rpc_conn_close(c, frame_err_reason(fe));
                return -1;
            }
            if (!kind_allowed(c, c->rx.fh.kind)) {
                rpc_conn_close(c, RPC_CLOSE_UNEXPECTED);
                return -1;
            }
            if (c->state != CONN_READY && c->rx.fh.header_len > HS_MAX_ENCODED) {
                rpc_conn_close(c, RPC_CLOSE_OVERSIZED);
                return -1;
            }
            c->rpos += FRAME_FIXED_SIZE;
            c->pb_got = 0;
            c->pay_got = 0;
            if (c->rx.fh.header_len) {
                c->rx.pb = rpc_hdrbuf_get(ep, c->rx.fh.header_len);
                if (!c->rx.pb) {
                    rpc_conn_close(c, RPC_CLOSE_NOMEM);
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
            if (rx_payload_begin(c) != 0)
                return -1;
        } else {
            uint64_t need = c->rx.fh.payload_len - c->pay_got;
            size_t n = (size_t)KVM_MIN(need, (uint64_t)avail);
            if (n && rx_sink_hold(c)) {
                memcpy(c->rx.dst + c->pay_got, p, n);
                if (c->rx.sink.landed && c->rx.sink.dst)
                    c->rx.sink.landed(c->rx.sink.ctx, c->rx.dst + c->pay_got, n);
                rx_sink_release(c);
            }
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
    if (c->rxs == RX_PAYLOAD && c->rpos == c->rlen && c->rx.dst &&
        c->rx.fh.payload_len - c->pay_got >= RPC_RX_STAGING && rx_sink_hold(c)) {
        /* (held until read_cb: the read lands in dst between the two) */
        c->rx_held = c->rx.sink.hold && c->rx.dst == c->rx.sink.dst;
        /* Large payload: read straight into its final buffer (a sink's, rpc.h, in runs of at
         * most RPC_SINK_BLOCK when it folds the bytes as they land: still in cache). */
        uint64_t left = c->rx.fh.payload_len - c->pay_got;
        uint64_t cap = c->rx.sink.landed && c->rx.sink.dst ? RPC_SINK_BLOCK : 1u << 30;
        if (left > cap)
            left = cap;
        *buf = uv_buf_init((char *)c->rx.dst + c->pay_got, (unsigned)left);
        return;
    }
    if (c->rxs == RX_PB && c->rpos == c->rlen &&
        c->rx.fh.header_len - c->pb_got >= RPC_RX_STAGING) {
        /* Large header (a message carried in the RpcHeader): straight into its buffer too. */
        *buf = uv_buf_init((char *)c->rx.pb + c->pb_got, c->rx.fh.header_len - (unsigned)c->pb_got);
        return;
    }
    if (c->rpos == c->rlen) {
        c->rpos = c->rlen = 0;
        if (c->rxs == RX_FIXED && c->rx_head_first) {
            /* A frame begins and the last one was large: a large one likely follows (a stream
             * of raw puts, of large answers), whose payload past its first RPC_RX_HEAD_READ
             * bytes is then read straight into its buffer instead of being staged and copied.
             * A small frame that follows takes one read more (its end sets the flag off). */
            *buf = uv_buf_init((char *)c->rbuf, RPC_RX_HEAD_READ);
            return;
        }
    } else if (c->rpos > 0 && RPC_RX_STAGING - c->rlen < FRAME_FIXED_SIZE) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    *buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(RPC_RX_STAGING - c->rlen));
}

_Atomic uint32_t rpc_test_sink_stall;

static void conn_start_read(struct rpc_conn *c);

/* The test hook's stall (rpc.h rpc_test_sink_stall): reading resumes once the hook is off. */
static void stall_fire(struct rpc_timer *t)
{
    struct rpc_conn *c = KVM_CONTAINER_OF(t, struct rpc_conn, stall_timer);
    if (c->state == CONN_CLOSING)
        return;
    if (atomic_load(&rpc_test_sink_stall))
        rpc_timer_arm(c->ep, &c->stall_timer, uv_now(c->ep->loop) + RPC_TEST_STALL_POLL_MS);
    else
        conn_start_read(c);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rpc_conn *c = s->data;
    rpc_endpoint *ep = c->ep;
    bool held = c->rx_held; /* (alloc_cb held the sink for this read: released once it landed) */
    c->rx_held = false;
    if (held && (c->state == CONN_CLOSING || nread <= 0)) {
        rx_sink_release(c);
        held = false;
    }
    if (c->state == CONN_CLOSING)
        return;
    if (nread < 0) {
        int mid = c->rxs != RX_FIXED || c->rpos != c->rlen;
        if (nread == UV_EOF)
            rpc_conn_close(c, mid ? RPC_CLOSE_TRUNCATED : RPC_CLOSE_PEER_EOF);
        else
            rpc_conn_close(c, RPC_CLOSE_IO_ERROR);
        return;
    }
    if (nread == 0)
        return;
    obs_count(ep->metrics, transport_bytes_total, rpc_conn_transport(c), OBS_XOP_RPC_RECEIVE,
              (uint64_t)nread);
    if ((uint8_t *)buf->base != c->rbuf + c->rlen && c->rxs == RX_PB) {
        /* Direct header read: rx_process moves on once it is whole (and completes a frame
         * without payload). */
        c->pb_got += (size_t)nread;
        rx_process(c);
        return;
    }
    if ((uint8_t *)buf->base != c->rbuf + c->rlen) {
        /* Direct payload read. */
        if (c->rx.sink.landed && c->rx.sink.dst)
            c->rx.sink.landed(c->rx.sink.ctx, (const uint8_t *)buf->base, (size_t)nread);
        if (held)
            rx_sink_release(c);
        c->pay_got += (uint64_t)nread;
        if (held && c->pay_got < c->rx.fh.payload_len && atomic_load(&rpc_test_sink_stall)) {
            uv_read_stop(&c->u.s); /* (the test hook: the rest waits, stall_fire) */
            rpc_timer_arm(ep, &c->stall_timer, uv_now(ep->loop) + RPC_TEST_STALL_POLL_MS);
            return;
        }
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
        rpc_conn_close(c, RPC_CLOSE_IO_ERROR);
}

/* ---- handshake ----------------------------------------------------------------------------- */

static void handle_hello(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    struct hs_hello *h = malloc(sizeof(*h));
    char msg[HS_MSG_MAX];
    if (!h) {
        rpc_rx_free(c->ep, rx);
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    if (hs_hello_decode(rx->pb, rx->fh.header_len, h) != 0) {
        rpc_rx_free(c->ep, rx);
        free(h);
        refuse(c, HS_BAD_MESSAGE, "hello could not be decoded");
        return;
    }
    rpc_rx_free(c->ep, rx);
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
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
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
        rpc_rx_free(c->ep, rx);
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    int rc = hs_ack_decode(rx->pb, rx->fh.header_len, h);
    rpc_rx_free(c->ep, rx);
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
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    set_state(c, CONN_HS_AUTH);
    conn_send_raw(c, FRAME_AUTH, pb, n, 0);
}

static void conn_ready(struct rpc_conn *c)
{
    rpc_endpoint *ep = c->ep;
    set_state(c, CONN_READY);
    rpc_timer_disarm(ep, &c->hs_timer);
    ep->st.handshakes_ok++;
    c->last_active = uv_now(ep->loop);
    if (ep->cfg.idle_timeout_ms)
        rpc_timer_arm(ep, &c->idle_timer, c->last_active + idle_limit(c));
    if (c->peer) {
        c->peer->backoff = ep->cfg.reconnect_min_ms;
        c->peer->last_error[0] = 0;
        c->peer->epoch = c->peer_epoch;
        rpc_conn_flush_waiting(c);
    }
}

static void handle_auth(struct rpc_conn *c, struct rpc_rx *rx)
{
    rpc_endpoint *ep = c->ep;
    uint8_t mac[HS_MAC_LEN], want[HS_MAC_LEN];
    int has_mac = 0;
    int rc = hs_auth_decode(rx->pb, rx->fh.header_len, mac, &has_mac);
    rpc_rx_free(c->ep, rx);
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
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
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
    rpc_rx_free(c->ep, rx);
    if (rc) {
        rpc_conn_close(c, RPC_CLOSE_BAD_HEADER);
        return;
    }
    if (r == HS_OK) {
        if (c->state != CONN_HS_AUTH || c->inbound) {
            rpc_conn_close(c, RPC_CLOSE_UNEXPECTED);
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
    rpc_conn_close(c, RPC_CLOSE_REFUSED_BY_PEER);
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
        rpc_conn_close(c, RPC_CLOSE_CONNECT_FAILED);
        return;
    }
    ep->st.conns_connected++;
    if (conn_attach_fd(c) != 0)
        return;
    set_state(c, CONN_HS_HELLO);
    uint8_t *pb;
    size_t n;
    if (hs_nonce(c->nonce_c) != 0 || hs_hello_encode(ep->desc_raw, ep->desc_raw_len, c->nonce_c,
                                                     c->peer->runtime_id, &pb, &n) != 0) {
        rpc_conn_close(c, RPC_CLOSE_NOMEM);
        return;
    }
    conn_start_read(c);
    if (c->state != CONN_CLOSING)
        conn_send_raw(c, FRAME_HELLO, pb, n, 0);
    else
        free(pb);
}

void rpc_conn_dial(rpc_peer *p)
{
    rpc_endpoint *ep = p->ep;
    KVM_ASSERT(!p->conn);
    struct rpc_conn *c = conn_new(ep, p->is_unix);
    if (!c) {
        rpc_peer_fail_waiting(p, KVMESH_ENOMEM, "out of memory creating a connection");
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
        rpc_conn_close(c, RPC_CLOSE_CONNECT_FAILED);
    }
}

void rpc_conn_flush_waiting(struct rpc_conn *c)
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
        rpc_conn_submit(c, o);
    }
}

/* Queues a frame on the peer: written now when READY, else after the handshake. */
void rpc_conn_on_connection(uv_stream_t *server, int status)
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
        rpc_conn_close(c, RPC_CLOSE_IO_ERROR);
        return;
    }
    ep->st.conns_accepted++;
    if (ep->ninbound > ep->cfg.max_conns) {
        rpc_conn_close(c, RPC_CLOSE_CONN_LIMIT);
        return;
    }
    if (conn_attach_fd(c) != 0)
        return;
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
        rpc_conn_close(c, RPC_CLOSE_IO_ERROR);
        return kvm_errf(KVMESH_EIO, "cannot adopt fd %d: %s", fd, uv_strerror(rc));
    }
    ep->st.conns_accepted++;
    if (ep->ninbound > ep->cfg.max_conns) {
        rpc_conn_close(c, RPC_CLOSE_CONN_LIMIT);
        return 0;
    }
    if (conn_attach_fd(c) != 0)
        return 0;
    set_state(c, CONN_HS_HELLO);
    conn_start_read(c);
    return 0;
}
