/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_tcp.c — the tcp data-plane transport.
 *
 * Owner side (server): one listening socket and an accept thread; each accepted data
 * connection is served by its own thread with blocking I/O (at most TP_MAX_SERVER_CONN; an
 * idle connection is closed after idle_timeout_ms without a request (0 = never), a started
 * request is bounded by io_timeout_ms). A
 * request header is checked against the segment registry (seg_check: grant, rights, range,
 * bounds) before any payload moves: a READ is answered with sendmsg(header, segment memory), a
 * WRITE's payload is received straight into segment memory. A refused WRITE's payload is read
 * and dropped (bounded by the header's length) so the stream stays in step.
 *
 * Client side: one peer per owner address with N data connections (tp_engine.nconns), each
 * with its own I/O thread and a FIFO of chunks. A request longer than stripe_min is split over
 * the N connections in chunks of at most chunk_max bytes; each chunk goes to the connection with
 * the fewest queued bytes. Chunks on one
 * connection run one at a time (request, then response). READ payload is received directly into
 * the caller's registered buffer, WRITE payload is sent from it: no intermediate buffer.
 *
 * A request with a checksum to fold into (tp_request.sum) moves its payload in TCP_SUM_BLOCK
 * blocks; each block is reported to the request's struct tcp_sum right after it was received or
 * sent (so it is in this core's cache), and whichever I/O thread finds the bytes at the sum's
 * cursor landed folds them, in order: the chunks of a striped request land in parallel, XXH3
 * takes its input in order. The sum is complete when every chunk of the request succeeded.
 *
 * A client connection that carried nothing for idle_timeout_ms / 2 closes its socket (before the
 * owner's idle close can race a request) and connects again when its next chunk arrives.
 *
 * Peer state (one per peer, guarded by peer.mu):
 *
 *     LIVE --(any I/O error, EOF, timeout, protocol error)--> DEAD --(last segment closed,
 *                                                                   engine stop)--> freed
 *
 * On LIVE -> DEAD every connection is shut down, so threads blocked in recv/send wake at once;
 * queued chunks fail with KVMESH_ECONN, new submits fail at once. A later tp_open_segment to the
 * same address makes a new peer.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/util.h"
#include "env/env_thread.h"
#include "net/transport_int.h"
#include "net/transport_wire.h"

#define TCP_DISCARD_BUF (64u << 10)
#define TCP_CHUNK_ALIGN 4096u
#define TCP_MAX_CHUNKS  8192u /* pieces of one request */
/*
 * A started exchange (request header, payload, response) must finish within io_timeout_ms per
 * started TCP_MIN_PACE bytes of payload (plus one io_timeout_ms): with the per-operation socket
 * timeouts alone, a peer trickling a byte now and then would hold an I/O thread (and, on the
 * owner, a segment pin) forever.
 */
#define TCP_MIN_PACE (1u << 20)
/* Receive/send + hash step of a request with a sum: small enough that the block is still in L2
 * when hashed (and that a 256 KiB request is hashed in two steps, not after its whole receive),
 * large enough that the extra syscalls and the cursor lock do not count (64, 128 and 256 KiB
 * measured: docs/performance.md "Large values over tcp"). */
#define TCP_SUM_BLOCK (128u << 10)

static uint64_t tcp_deadline(int io_timeout_ms, uint64_t length)
{
    return tp_io_now_ms() + (uint64_t)io_timeout_ms * (1 + length / TCP_MIN_PACE);
}

/* ---- server -------------------------------------------------------------------------------- */

struct tcp_sconn {
    struct tp_tcp_server *srv;
    int fd;
    pthread_t th;
    int done; /* atomic: thread finished */
    struct tcp_sconn *next;
};

struct tp_tcp_server {
    struct tp_engine *e;
    int lfd;
    pthread_t accept_th;
    pthread_mutex_t mu;
    struct tcp_sconn *conns;
    unsigned nconns;
    int stopping; /* atomic */
};

static int tcp_discard(int fd, uint64_t len, uint64_t deadline)
{
    char buf[4096];
    while (len > 0) {
        size_t n = (size_t)KVM_MIN(len, (uint64_t)sizeof(buf));
        int rc = tp_io_recv_all_by(fd, buf, n, deadline);
        if (rc)
            return rc;
        len -= n;
    }
    return 0;
}

/* Serves one request; returns non-zero when the connection must close. */
static int tcp_serve_one(struct tp_engine *e, int fd)
{
    uint8_t hb[TPW_REQ_SIZE], rb[TPW_RESP_SIZE];
    /* an idle connection waits for its next request at most idle_timeout_ms (then it is closed:
     * a client that connected and went silent does not keep a slot); once a request starts,
     * every socket operation is bounded by io_timeout_ms (a stalled client frees the thread) */
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int idle_ms = e->idle_timeout_ms ? (int)KVM_MIN(e->idle_timeout_ms, (uint32_t)INT32_MAX) : -1;
    int pr;
    while ((pr = poll(&pf, 1, idle_ms)) < 0)
        if (errno != EINTR)
            return KVMESH_ECONN;
    if (pr == 0)
        return KVMESH_ETIMEDOUT; /* idle: closed */
    int rc = tp_io_recv_all_by(fd, hb, sizeof(hb), tcp_deadline(e->io_timeout_ms, 0));
    if (rc)
        return rc;
    struct tpw_req q;
    if ((rc = tpw_req_decode(hb, sizeof(hb), &q)) != 0)
        return rc; /* a stream we cannot parse cannot be resynchronized */
    uint64_t dl = tcp_deadline(e->io_timeout_ms, q.length);
    uint8_t *ptr = NULL;
    struct seg *pin = NULL;
    enum seg_reason reason = SEG_OK;
    uint32_t op = q.op == TP_READ ? SEG_READ : SEG_WRITE;
    int st = seg_check(e->reg, q.seg_id, q.offset, q.length, op, q.token, &ptr, &pin, &reason);
    struct tpw_resp resp = {.status = st, .reason = (uint8_t)reason, .req_id = q.req_id};
    if (st) {
        if (q.op == TP_WRITE && (rc = tcp_discard(fd, q.length, dl)) != 0)
            return rc;
        tpw_resp_encode(&resp, rb);
        struct iovec iov[1] = {{rb, sizeof(rb)}};
        return tp_io_send_all_by(fd, iov, 1, dl);
    }
    if (q.op == TP_READ) {
        resp.length = q.length;
        tpw_resp_encode(&resp, rb);
        struct iovec iov[2] = {{rb, sizeof(rb)}, {ptr, q.length}};
        rc = tp_io_send_all_by(fd, iov, 2, dl);
        seg_unpin(e->reg, pin);
        return rc;
    }
    rc = tp_io_recv_all_by(fd, ptr, q.length, dl);
    seg_unpin(e->reg, pin);
    if (rc)
        return rc;
    tpw_resp_encode(&resp, rb);
    struct iovec iov[1] = {{rb, sizeof(rb)}};
    return tp_io_send_all_by(fd, iov, 1, dl);
}

static void *tcp_sconn_main(void *arg)
{
    struct tcp_sconn *c = arg;
    while (!__atomic_load_n(&c->srv->stopping, __ATOMIC_ACQUIRE)) {
        if (tcp_serve_one(c->srv->e, c->fd) != 0)
            break;
    }
    shutdown(c->fd, SHUT_RDWR);
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Joins finished connection threads (called with srv->mu held). */
static void tcp_reap_locked(struct tp_tcp_server *srv)
{
    struct tcp_sconn **pp = &srv->conns;
    while (*pp) {
        struct tcp_sconn *c = *pp;
        if (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
            *pp = c->next;
            pthread_join(c->th, NULL);
            close(c->fd);
            free(c);
            srv->nconns--;
        } else {
            pp = &c->next;
        }
    }
}

static void *tcp_accept_main(void *arg)
{
    struct tp_tcp_server *srv = arg;
    for (;;) {
        int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
            if (fd >= 0)
                close(fd);
            break;
        }
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            break;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        tp_io_set_timeout(fd, srv->e->io_timeout_ms);
        pthread_mutex_lock(&srv->mu);
        tcp_reap_locked(srv);
        struct tcp_sconn *c = NULL;
        if (srv->nconns < TP_MAX_SERVER_CONN && (c = seg_calloc(1, sizeof(*c))) != NULL) {
            c->srv = srv;
            c->fd = fd;
            if (env_thread_create(&c->th, tcp_sconn_main, c) == 0) {
                c->next = srv->conns;
                srv->conns = c;
                srv->nconns++;
            } else {
                free(c);
                c = NULL;
            }
        }
        pthread_mutex_unlock(&srv->mu);
        if (!c)
            close(fd); /* over the limit: the client sees EOF and fails its requests */
    }
    return NULL;
}

static int tcp_server_start(struct tp_engine *e)
{
    char host[sizeof(e->tcp_listen)];
    memcpy(host, e->tcp_listen, sizeof(host));
    char *colon = strrchr(host, ':');
    KVM_ASSERT(colon);
    *colon = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(e->cfg.listen_port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return kvm_errf(KVMESH_ECONFIG, "tcp listen host \"%s\" is not an IPv4 address", host);
    struct tp_tcp_server *srv = seg_calloc(1, sizeof(*srv));
    if (!srv)
        return kvm_errf(KVMESH_ENOMEM, "tcp server allocation failed");
    srv->e = e;
    pthread_mutex_init(&srv->mu, NULL);
    int one = 1, rc = 0;
    srv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv->lfd < 0) {
        rc = kvm_errf(KVMESH_EIO, "socket: %s", strerror(errno));
        goto fail;
    }
    setsockopt(srv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(srv->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(srv->lfd, 128) != 0) {
        rc = kvm_errf(KVMESH_EIO, "tcp data server cannot listen on %s:%u: %s", host,
                      e->cfg.listen_port, strerror(errno));
        goto fail;
    }
    socklen_t sl = sizeof(sa);
    getsockname(srv->lfd, (struct sockaddr *)&sa, &sl);
    int n = snprintf(e->tcp_listen, sizeof(e->tcp_listen), "%s:%u", host, ntohs(sa.sin_port));
    KVM_ASSERT(n > 0 && (size_t)n < sizeof(e->tcp_listen)); /* an IPv4 address and a port */
    if (env_thread_create(&srv->accept_th, tcp_accept_main, srv) != 0) {
        rc = kvm_errf(KVMESH_ENOMEM, "cannot start the tcp accept thread");
        goto fail;
    }
    e->tcp_srv = srv;
    return 0;
fail:
    if (srv->lfd >= 0)
        close(srv->lfd);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
    return rc;
}

static void tcp_server_stop(struct tp_engine *e)
{
    struct tp_tcp_server *srv = e->tcp_srv;
    if (!srv)
        return;
    __atomic_store_n(&srv->stopping, 1, __ATOMIC_RELEASE);
    shutdown(srv->lfd, SHUT_RDWR); /* wakes accept() */
    pthread_join(srv->accept_th, NULL);
    close(srv->lfd);
    pthread_mutex_lock(&srv->mu);
    for (struct tcp_sconn *c = srv->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&srv->mu);
    for (struct tcp_sconn *c = srv->conns, *n; c; c = n) {
        n = c->next;
        pthread_join(c->th, NULL);
        close(c->fd);
        free(c);
    }
    pthread_mutex_destroy(&srv->mu);
    free(srv);
    e->tcp_srv = NULL;
}

/* ---- client -------------------------------------------------------------------------------- */

/*
 * The checksum of one request (tp_request.sum), shared by its chunks. Chunk i covers
 * [i * piece, +piece) of the request; landed[i] is the prefix of it received or sent so far.
 * The bytes [0, hashed) are folded into sum; one thread at a time folds (busy), the others only
 * report what landed and leave: the folding thread looks again under mu before it stops, so
 * nothing that landed is left behind. Freed by the last chunk (refs).
 */
struct tcp_sum {
    pthread_mutex_t mu;
    struct kvm_sum *sum; /* borrowed from the request */
    const uint8_t *local;
    uint64_t length, piece, hashed;
    bool busy;
    unsigned refs;
    uint64_t landed[];
};

struct tcp_chunk {
    struct tp_batch *b;
    unsigned idx;
    uint8_t op;
    uint8_t *local;
    uint64_t seg_id, offset, length, token;
    struct tcp_sum *sum; /* NULL without one; ci: this chunk's index in it */
    uint64_t ci;
    struct tcp_chunk *next;
};

static struct tcp_sum *tcp_sum_new(const struct tp_request *r, uint64_t piece, uint64_t nk)
{
    struct tcp_sum *t = seg_calloc(1, sizeof(*t) + nk * sizeof(t->landed[0]));
    if (!t)
        return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->sum = r->sum;
    t->local = r->local;
    t->length = r->length;
    t->piece = piece;
    t->refs = (unsigned)nk;
    return t;
}

static void tcp_sum_unref(struct tcp_sum *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    KVM_ASSERT(t->refs > 0);
    bool last = --t->refs == 0;
    pthread_mutex_unlock(&t->mu);
    if (last) {
        pthread_mutex_destroy(&t->mu);
        free(t);
    }
}

/* Bytes landed right after the cursor (t->mu held). */
static uint64_t tcp_sum_ready_locked(const struct tcp_sum *t)
{
    if (t->hashed >= t->length)
        return 0;
    uint64_t c = t->hashed / t->piece;
    return c * t->piece + t->landed[c] - t->hashed;
}

/* n more bytes of chunk ci landed; folds every landed byte at the cursor unless another thread
 * is folding already (it then folds these too). */
static void tcp_sum_landed(struct tcp_sum *t, uint64_t ci, uint64_t n)
{
    pthread_mutex_lock(&t->mu);
    t->landed[ci] += n;
    KVM_ASSERT(t->landed[ci] <= t->piece);
    if (t->busy) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    t->busy = true;
    for (uint64_t k; (k = KVM_MIN(tcp_sum_ready_locked(t), (uint64_t)TCP_SUM_BLOCK)) != 0;) {
        uint64_t at = t->hashed;
        pthread_mutex_unlock(&t->mu);
        kvm_sum_update(t->sum, t->local + at, (size_t)k);
        pthread_mutex_lock(&t->mu);
        t->hashed += k;
    }
    t->busy = false;
    pthread_mutex_unlock(&t->mu);
}

static void tcp_chunk_free(struct tcp_chunk *k)
{
    tcp_sum_unref(k->sum);
    free(k);
}

static void tcp_chunks_free(struct tcp_chunk *list)
{
    while (list) {
        struct tcp_chunk *n = list->next;
        tcp_chunk_free(list);
        list = n;
    }
}

struct tcp_peer;

struct tcp_conn {
    struct tcp_peer *p;
    int fd;
    pthread_t th;
    bool started;
    struct tcp_chunk *cur; /* the chunk being exchanged (guarded by peer.mu) */
    uint64_t last_ms;      /* tp_io_now_ms() of the last exchange (guarded by peer.mu) */
    struct tcp_chunk *head, *tail;
    uint64_t qbytes;   /* bytes queued or in flight */
    pthread_cond_t cv; /* work for this connection (waited on with peer.mu): a submit wakes only
                        * the connections it queued chunks on, not every I/O thread of the peer */
};

struct tcp_peer {
    char key[SEG_OWNER_KEY_MAX];
    struct tp_engine *e;
    pthread_mutex_t mu;
    int dead;
    int stopping;
    unsigned refs; /* open segments */
    unsigned n;
    uint64_t next_req_id;
    struct tcp_conn conns[TP_MAX_CONNS];
    struct tp_addr addr; /* to connect again after an idle close */
    struct tcp_peer *next;
};

static int tcp_connect(const struct tp_addr *a, int timeout_ms, int *fd_out);

/* Waits for work on c (p->mu held). With an idle timeout, a connection that carried nothing for
 * half of it closes its socket (fd = -1; reconnected by tcp_conn_ready when work arrives). */
static void tcp_conn_wait_locked(struct tcp_conn *c, struct tcp_peer *p)
{
    uint32_t idle = p->e->idle_timeout_ms / 2;
    if (!idle) {
        pthread_cond_wait(&c->cv, &p->mu);
        return;
    }
    uint64_t now = tp_io_now_ms();
    if (c->fd >= 0 && !c->cur && now - c->last_ms >= idle) {
        close(c->fd);
        c->fd = -1;
    }
    uint64_t due = c->fd >= 0 ? c->last_ms + idle : now + idle;
    struct timespec ts = {.tv_sec = (time_t)(due / 1000), .tv_nsec = (long)(due % 1000) * 1000000L};
    pthread_cond_timedwait(&c->cv, &p->mu, &ts);
}

/* Makes sure c has a socket before a chunk runs (p->mu held; connects without it). */
static int tcp_conn_ready_locked(struct tcp_conn *c, struct tcp_peer *p)
{
    if (c->fd >= 0)
        return 0;
    pthread_mutex_unlock(&p->mu);
    int fd = -1;
    int rc = tcp_connect(&p->addr, p->e->io_timeout_ms, &fd);
    pthread_mutex_lock(&p->mu);
    if (rc)
        return rc;
    if (p->dead) {
        close(fd);
        return KVMESH_ECONN;
    }
    c->fd = fd;
    return 0;
}

struct tp_tcp_client {
    pthread_mutex_t mu;
    struct tcp_peer *peers;
    unsigned npeers;
};

/* Marks the peer dead and wakes every connection thread (called with p->mu held). */
static void tcp_peer_kill_locked(struct tcp_peer *p)
{
    if (!p->dead) {
        p->dead = 1;
        for (unsigned i = 0; i < p->n; i++)
            if (p->conns[i].fd >= 0)
                shutdown(p->conns[i].fd, SHUT_RDWR);
    }
    for (unsigned i = 0; i < p->n; i++)
        pthread_cond_broadcast(&p->conns[i].cv);
}

/* Sends the header (with the payload of a WRITE); with a sum, the payload in TCP_SUM_BLOCK
 * blocks, each reported to the sum once it was handed to the socket. */
static int tcp_send_req(int fd, const struct tcp_chunk *k, uint8_t *hb, uint64_t dl)
{
    struct iovec iov[2] = {{hb, TPW_REQ_SIZE}, {k->local, k->length}};
    if (k->op != TP_WRITE)
        return tp_io_send_all_by(fd, iov, 1, dl);
    if (!k->sum)
        return tp_io_send_all_by(fd, iov, 2, dl);
    for (uint64_t done = 0; done < k->length;) {
        size_t n = (size_t)KVM_MIN((uint64_t)TCP_SUM_BLOCK, k->length - done);
        iov[1] = (struct iovec){k->local + done, n};
        int rc = done ? tp_io_send_all_by(fd, &iov[1], 1, dl) : tp_io_send_all_by(fd, iov, 2, dl);
        if (rc)
            return rc;
        tcp_sum_landed(k->sum, k->ci, n);
        done += n;
    }
    return 0;
}

/* Receives a READ's payload; with a sum, in TCP_SUM_BLOCK blocks, each reported on arrival. */
static int tcp_recv_payload(int fd, const struct tcp_chunk *k, uint64_t dl)
{
    if (!k->sum)
        return tp_io_recv_all_by(fd, k->local, k->length, dl);
    for (uint64_t done = 0; done < k->length;) {
        size_t n = (size_t)KVM_MIN((uint64_t)TCP_SUM_BLOCK, k->length - done);
        int rc = tp_io_recv_all_by(fd, k->local + done, n, dl);
        if (rc)
            return rc;
        tcp_sum_landed(k->sum, k->ci, n);
        done += n;
    }
    return 0;
}

/* Exchanges chunk k on c (request, answer, a READ's payload); bound (0 = none) caps the
 * exchange's io_timeout_ms-based deadline. */
static int tcp_run_chunk(struct tcp_conn *c, struct tcp_chunk *k, uint64_t req_id, uint64_t bound,
                         uint8_t *reason)
{
    uint8_t hb[TPW_REQ_SIZE], rb[TPW_RESP_SIZE];
    struct tpw_req q = {.op = k->op,
                        .req_id = req_id,
                        .seg_id = k->seg_id,
                        .offset = k->offset,
                        .length = k->length,
                        .token = k->token};
    tpw_req_encode(&q, hb);
    uint64_t dl = tcp_deadline(c->p->e->io_timeout_ms, k->length);
    if (bound && bound < dl)
        dl = bound;
    int rc = tcp_send_req(c->fd, k, hb, dl);
    if (rc)
        return rc;
    if ((rc = tp_io_recv_all_by(c->fd, rb, sizeof(rb), dl)) != 0)
        return rc;
    struct tpw_resp resp;
    if ((rc = tpw_resp_decode(rb, sizeof(rb), &resp)) != 0 || resp.req_id != req_id)
        return KVMESH_EPROTO;
    if (resp.status) {
        *reason = resp.reason;
        return resp.status; /* refused by the owner; the connection stays usable */
    }
    if (k->op == TP_WRITE)
        return resp.length == 0 ? 0 : KVMESH_EPROTO;
    if (resp.length != k->length)
        return KVMESH_EPROTO;
    return tcp_recv_payload(c->fd, k, dl);
}

static bool rc_breaks_stream(int rc)
{
    return rc == KVMESH_ECONN || rc == KVMESH_ETIMEDOUT || rc == KVMESH_EPROTO;
}

/* An idle data connection of p with a socket, or NULL (p->mu held). */
static struct tcp_conn *tcp_idle_conn_locked(struct tcp_peer *p)
{
    for (unsigned i = 0; i < p->n; i++)
        if (!p->conns[i].head && !p->conns[i].cur && p->conns[i].fd >= 0)
            return &p->conns[i];
    return NULL;
}

/*
 * Runs chunk k, its request's only one, on c (idle, connected) on the submitting thread, bounded
 * by deadline (tp_batch_set_deadline; in the future), and completes it (p->mu held, released
 * meanwhile). c->cur == k keeps c's I/O thread from starting anything and from its idle close;
 * tcp_abort finds the chunk there as on an I/O thread. The socket timeouts are lowered to the
 * time left for the exchange, so a blocked send or receive returns by the deadline.
 */
static void tcp_run_here_locked(struct tcp_peer *p, struct tcp_conn *c, struct tcp_chunk *k,
                                uint64_t deadline)
{
    KVM_ASSERT(!c->cur && !c->head && c->fd >= 0 && !k->next);
    c->cur = k;
    c->qbytes += k->length;
    uint64_t req_id = ++p->next_req_id;
    int fd = c->fd, io_ms = (int)p->e->io_timeout_ms;
    pthread_mutex_unlock(&p->mu);
    uint64_t now = tp_io_now_ms(), left = deadline > now ? deadline - now : 1;
    bool lowered = left < (uint64_t)io_ms;
    if (lowered)
        tp_io_set_timeout(fd, (int)left);
    uint8_t why = 0;
    int rc =
        tp_batch_canceled(k->b) ? KVMESH_ECANCELED : tcp_run_chunk(c, k, req_id, deadline, &why);
    if (lowered)
        tp_io_set_timeout(fd, io_ms);
    pthread_mutex_lock(&p->mu);
    c->cur = NULL;
    c->last_ms = tp_io_now_ms();
    if (rc && p->dead && tp_batch_canceled(k->b))
        rc = KVMESH_ECANCELED; /* ended by tp_batch_abort */
    c->qbytes -= k->length;
    if (rc_breaks_stream(rc))
        tcp_peer_kill_locked(p);
    else if (c->head)
        pthread_cond_signal(&c->cv); /* queued behind this exchange meanwhile */
    pthread_mutex_unlock(&p->mu);
    tp_chunk_done(k->b, k->idx, rc, why);
    tcp_chunk_free(k);
    pthread_mutex_lock(&p->mu);
}

static void *tcp_conn_main(void *arg)
{
    struct tcp_conn *c = arg;
    struct tcp_peer *p = c->p;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while ((!c->head || c->cur) && !p->dead && !p->stopping)
            tcp_conn_wait_locked(c, p); /* (c->cur: tcp_run_here_locked has the connection) */
        if (p->dead || (p->stopping && !c->head)) {
            /* fail what is queued here, outside the lock (callbacks may submit) */
            struct tcp_chunk *list = c->head;
            c->head = c->tail = NULL;
            c->qbytes = 0;
            pthread_mutex_unlock(&p->mu);
            while (list) {
                struct tcp_chunk *n = list->next;
                tp_chunk_done(list->b, list->idx, KVMESH_ECONN, 0);
                tcp_chunk_free(list);
                list = n;
            }
            pthread_mutex_lock(&p->mu);
            if (!c->head)
                break;
            continue;
        }
        struct tcp_chunk *k = c->head;
        c->head = k->next;
        if (!c->head)
            c->tail = NULL;
        uint64_t req_id = ++p->next_req_id;
        c->cur = k;
        int rc = tp_batch_canceled(k->b) ? KVMESH_ECANCELED : tcp_conn_ready_locked(c, p);
        pthread_mutex_unlock(&p->mu);
        uint8_t reason = 0;
        if (!rc)
            rc = tcp_run_chunk(c, k, req_id, 0, &reason);
        pthread_mutex_lock(&p->mu);
        c->cur = NULL;
        c->last_ms = tp_io_now_ms();
        if (rc && p->dead && tp_batch_canceled(k->b))
            rc = KVMESH_ECANCELED; /* ended by tp_batch_abort */
        c->qbytes -= k->length;
        if (rc_breaks_stream(rc))
            tcp_peer_kill_locked(p);
        pthread_mutex_unlock(&p->mu);
        tp_chunk_done(k->b, k->idx, rc, reason);
        tcp_chunk_free(k);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void tcp_peer_free(struct tcp_peer *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    tcp_peer_kill_locked(p);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n; i++) {
        if (p->conns[i].started)
            pthread_join(p->conns[i].th, NULL);
        if (p->conns[i].fd >= 0)
            close(p->conns[i].fd);
    }
    for (unsigned i = 0; i < p->n; i++)
        pthread_cond_destroy(&p->conns[i].cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static int tcp_connect(const struct tp_addr *a, int timeout_ms, int *fd_out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(a->tcp_port)};
    if (inet_pton(AF_INET, a->tcp_ip, &sa.sin_addr) != 1)
        return kvm_errf(KVMESH_EINVAL, "tcp address %s is not IPv4", a->tcp_ip);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return kvm_errf(KVMESH_EIO, "socket: %s", strerror(errno));
    tp_io_set_timeout(fd, timeout_ms); /* also bounds connect() */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int err = errno;
        close(fd);
        return kvm_errf(KVMESH_ECONN, "cannot connect to %s:%u: %s", a->tcp_ip, a->tcp_port,
                        strerror(err));
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *fd_out = fd;
    return 0;
}

static int tcp_peer_new(struct tp_engine *e, const struct tp_addr *a, const char *key,
                        struct tcp_peer **out)
{
    struct tcp_peer *p = seg_calloc(1, sizeof(*p));
    if (!p)
        return kvm_errf(KVMESH_ENOMEM, "tcp peer allocation failed");
    snprintf(p->key, sizeof(p->key), "%s", key);
    p->e = e;
    p->n = e->nconns;
    p->addr = *a;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* idle waits use tp_io_now_ms() */
    for (unsigned i = 0; i < p->n; i++)
        pthread_cond_init(&p->conns[i].cv, &ca);
    pthread_condattr_destroy(&ca);
    for (unsigned i = 0; i < p->n; i++) {
        p->conns[i].fd = -1;
        p->conns[i].last_ms = tp_io_now_ms();
    }
    int rc = 0;
    for (unsigned i = 0; i < p->n; i++) {
        p->conns[i].p = p;
        if ((rc = tcp_connect(a, e->io_timeout_ms, &p->conns[i].fd)) != 0)
            goto fail;
        if (env_thread_create(&p->conns[i].th, tcp_conn_main, &p->conns[i]) != 0) {
            rc = kvm_errf(KVMESH_ENOMEM, "cannot start a tcp I/O thread");
            goto fail;
        }
        p->conns[i].started = true;
    }
    *out = p;
    return 0;
fail:
    tcp_peer_free(p);
    return rc;
}

static int tcp_open(struct tp_engine *e, const struct tp_addr *a, struct tp_segment *s)
{
    pthread_mutex_lock(&e->mu);
    if (!e->tcp_cli) {
        e->tcp_cli = seg_calloc(1, sizeof(*e->tcp_cli));
        if (!e->tcp_cli) {
            pthread_mutex_unlock(&e->mu);
            return kvm_errf(KVMESH_ENOMEM, "tcp client allocation failed");
        }
        pthread_mutex_init(&e->tcp_cli->mu, NULL);
    }
    struct tp_tcp_client *cl = e->tcp_cli;
    pthread_mutex_unlock(&e->mu);

    pthread_mutex_lock(&cl->mu);
    struct tcp_peer *found = NULL, *reap = NULL;
    for (struct tcp_peer **pp = &cl->peers; *pp;) {
        struct tcp_peer *p = *pp;
        pthread_mutex_lock(&p->mu);
        bool dead = p->dead, unused = p->refs == 0;
        if (!dead && strcmp(p->key, s->owner) == 0) {
            p->refs++;
            found = p;
        }
        pthread_mutex_unlock(&p->mu);
        if (dead && unused) { /* reap dead peers nobody uses */
            *pp = p->next;
            cl->npeers--;
            p->next = reap;
            reap = p;
            continue;
        }
        pp = &p->next;
    }
    int rc = 0;
    if (!found) {
        if (cl->npeers >= TP_MAX_PEERS) {
            rc = kvm_errf(KVMESH_ENOSPC, "too many tcp peers (max %d)", TP_MAX_PEERS);
        } else if ((rc = tcp_peer_new(e, a, s->owner, &found)) == 0) {
            found->refs = 1;
            found->next = cl->peers;
            cl->peers = found;
            cl->npeers++;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    while (reap) {
        struct tcp_peer *n = reap->next;
        tcp_peer_free(reap);
        reap = n;
    }
    if (rc)
        return rc;
    s->peer = found;
    return 0;
}

static void tcp_close(struct tp_segment *s)
{
    struct tcp_peer *p = s->peer;
    pthread_mutex_lock(&p->mu);
    KVM_ASSERT(p->refs > 0);
    p->refs--;
    pthread_mutex_unlock(&p->mu);
}

static int tcp_submit(struct tp_batch *b, unsigned idx, enum seg_reason *reason)
{
    const struct tp_request *r = &b->slots[idx].r;
    struct tp_segment *s = r->segment;
    struct tcp_peer *p = s->peer;
    struct tp_engine *e = b->e;
    /* pieces: spread over the connections, at most chunk_max each (small pieces keep the
     * bytes in flight cache-resident; see docs/performance.md), at most TCP_MAX_CHUNKS */
    uint64_t nk = 1;
    if (r->length > e->stripe_min)
        nk = KVM_MIN((uint64_t)p->n, (r->length + e->stripe_min - 1) / e->stripe_min);
    uint64_t piece = (r->length + nk - 1) / nk;
    if (piece > e->chunk_max)
        piece = KVM_MAX(e->chunk_max, (r->length + TCP_MAX_CHUNKS - 1) / TCP_MAX_CHUNKS);
    piece = (piece + TCP_CHUNK_ALIGN - 1) / TCP_CHUNK_ALIGN * TCP_CHUNK_ALIGN;
    nk = (r->length + piece - 1) / piece;
    KVM_ASSERT(nk >= 1 && nk <= TCP_MAX_CHUNKS);
    struct tcp_sum *sum = NULL; /* one reference per chunk */
    if (r->sum && (sum = tcp_sum_new(r, piece, nk)) == NULL)
        return kvm_errf(KVMESH_ENOMEM, "checksum state allocation failed");
    struct tcp_chunk *list = NULL, **tailp = &list;
    for (uint64_t i = 0; i < nk; i++) {
        struct tcp_chunk *k = seg_calloc(1, sizeof(*k));
        if (!k) {
            tcp_chunks_free(list);
            for (uint64_t j = i; j < nk; j++)
                tcp_sum_unref(sum);
            return kvm_errf(KVMESH_ENOMEM, "chunk allocation failed");
        }
        uint64_t off = i * piece;
        *k = (struct tcp_chunk){.b = b,
                                .idx = idx,
                                .op = (uint8_t)r->op,
                                .local = (uint8_t *)r->local + off,
                                .seg_id = s->seg_id,
                                .offset = r->remote_offset + off,
                                .length = KVM_MIN(piece, r->length - off),
                                .token = r->token,
                                .sum = sum,
                                .ci = i};
        *tailp = k;
        tailp = &k->next;
    }
    pthread_mutex_lock(&p->mu);
    if (p->dead) {
        pthread_mutex_unlock(&p->mu);
        tcp_chunks_free(list);
        (void)reason;
        return kvm_errf(KVMESH_ECONN, "connection to %s lost; reopen the segment", p->key);
    }
    tp_slot_set_chunks(b, idx, (uint32_t)nk);
    /* a lone one-chunk request whose caller only waits for it, with time left: run it here */
    uint64_t deadline = b->cap == 1 && nk == 1 ? tp_batch_deadline(b) : 0;
    struct tcp_conn *idle = deadline > tp_io_now_ms() ? tcp_idle_conn_locked(p) : NULL;
    if (idle) {
        tcp_run_here_locked(p, idle, list, deadline);
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    bool woke[TP_MAX_CONNS] = {false};
    while (list) {
        struct tcp_chunk *k = list;
        list = k->next;
        k->next = NULL;
        struct tcp_conn *best = &p->conns[0];
        for (unsigned j = 1; j < p->n; j++)
            if (p->conns[j].qbytes < best->qbytes)
                best = &p->conns[j];
        best->qbytes += k->length;
        if (best->tail)
            best->tail->next = k;
        else
            best->head = k;
        best->tail = k;
        unsigned bi = (unsigned)(best - p->conns);
        if (!woke[bi]) {
            woke[bi] = true;
            pthread_cond_signal(&best->cv); /* its I/O thread is the only waiter */
        }
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* Shuts down every peer with a connection exchanging a chunk of b: the blocked recv/send
 * returns at once. The peer is dead afterwards (the stream is out of step); its segment
 * handles report !usable and are opened again by their users. */
static void tcp_abort(struct tp_engine *e, struct tp_batch *b)
{
    pthread_mutex_lock(&e->mu);
    struct tp_tcp_client *cl = e->tcp_cli;
    pthread_mutex_unlock(&e->mu);
    if (!cl)
        return;
    pthread_mutex_lock(&cl->mu);
    for (struct tcp_peer *p = cl->peers; p; p = p->next) {
        pthread_mutex_lock(&p->mu);
        for (unsigned i = 0; i < p->n; i++)
            if (p->conns[i].cur && p->conns[i].cur->b == b) {
                tcp_peer_kill_locked(p);
                break;
            }
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&cl->mu);
}

static bool tcp_usable(const struct tp_segment *s)
{
    struct tcp_peer *p = s->peer;
    pthread_mutex_lock(&p->mu);
    bool ok = !p->dead;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

static void tcp_client_stop(struct tp_engine *e)
{
    struct tp_tcp_client *cl = e->tcp_cli;
    if (!cl)
        return;
    for (struct tcp_peer *p = cl->peers, *n; p; p = n) {
        n = p->next;
        tcp_peer_free(p);
    }
    pthread_mutex_destroy(&cl->mu);
    free(cl);
    e->tcp_cli = NULL;
}

const struct tp_ops tp_tcp_ops = {
    .name = "tcp",
    .server_start = tcp_server_start,
    .server_stop = tcp_server_stop,
    .client_stop = tcp_client_stop,
    .open = tcp_open,
    .close = tcp_close,
    .submit = tcp_submit,
    .abort = tcp_abort,
    .usable = tcp_usable,
};
