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

/*
 * A served connection reads requests through a buffer (one recv takes every header, and the
 * small WRITE payloads between them, that a pipelining client sent) and gathers the responses
 * of the requests it found there into one sendmsg (a READ's payload straight from segment
 * memory, its segment pinned until sent), sent before the thread waits for more bytes: a client
 * that sends one request at a time gets its response as before.
 */
#define TCP_SRV_RBUF      (64u << 10)
#define TCP_SRV_OUT       64u          /* responses gathered at most */
#define TCP_SRV_OUT_BYTES (256u << 10) /* READ payload bytes gathered at most */

struct tcp_sout {
    uint8_t rb[TCP_SRV_OUT][TPW_RESP_SIZE];
    struct iovec iov[2 * TCP_SRV_OUT];
    struct seg *pin[TCP_SRV_OUT];
    unsigned n, niov;
    uint64_t bytes;
};

struct tcp_sconn {
    struct tp_tcp_server *srv;
    int fd;
    pthread_t th;
    int done; /* atomic: thread finished */
    struct tcp_sconn *next;
    size_t rlo, rhi; /* rbuf[rlo, rhi): received, not yet taken */
    bool drained;    /* the last recv found no more bytes than it returned */
    struct tcp_sout out;
    uint8_t rbuf[TCP_SRV_RBUF];
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

/* Releases the pins of the gathered responses and forgets them. */
static void tcp_sout_drop(struct tp_engine *e, struct tcp_sout *o)
{
    for (unsigned i = 0; i < o->n; i++)
        if (o->pin[i])
            seg_unpin(e->reg, o->pin[i]);
    o->n = o->niov = 0;
    o->bytes = 0;
}

/* Sends the gathered responses; 0 or an error that closes the connection. */
static int tcp_sout_flush(struct tp_engine *e, int fd, struct tcp_sout *o)
{
    int rc = 0;
    if (o->niov)
        rc = tp_io_send_all_by(fd, o->iov, (int)o->niov, tcp_deadline(e->io_timeout_ms, o->bytes));
    tcp_sout_drop(e, o);
    return rc;
}

/* Gathers a response (with the READ payload at ptr, pinned by pin, when length > 0); sends the
 * gathered ones when the gathering is full. */
static int tcp_sout_add(struct tp_engine *e, int fd, struct tcp_sout *o,
                        const struct tpw_resp *resp, uint8_t *ptr, struct seg *pin)
{
    KVM_ASSERT(o->n < TCP_SRV_OUT);
    tpw_resp_encode(resp, o->rb[o->n]);
    o->iov[o->niov++] = (struct iovec){o->rb[o->n], TPW_RESP_SIZE};
    if (resp->length) {
        o->iov[o->niov++] = (struct iovec){ptr, resp->length};
        o->bytes += resp->length;
    }
    o->pin[o->n++] = pin;
    if (o->n == TCP_SRV_OUT || o->bytes >= TCP_SRV_OUT_BYTES)
        return tcp_sout_flush(e, fd, o);
    return 0;
}

/* Waits for the connection to become readable: an idle one (nothing of a request buffered) at
 * most idle_timeout_ms (then it is closed), a started request by its deadline hdr_dl. */
static int tcp_sconn_wait(struct tcp_sconn *c, uint64_t hdr_dl)
{
    struct tp_engine *e = c->srv->e;
    int ms = -1;
    if (c->rhi > c->rlo) {
        uint64_t now = tp_io_now_ms();
        if (now >= hdr_dl)
            return KVMESH_ETIMEDOUT;
        ms = (int)KVM_MIN(hdr_dl - now, (uint64_t)e->io_timeout_ms);
    } else if (e->idle_timeout_ms) {
        ms = (int)KVM_MIN(e->idle_timeout_ms, (uint32_t)INT32_MAX);
    }
    struct pollfd pf = {.fd = c->fd, .events = POLLIN};
    int pr;
    while ((pr = poll(&pf, 1, ms)) < 0)
        if (errno != EINTR)
            return KVMESH_ECONN;
    return pr == 0 ? KVMESH_ETIMEDOUT : 0; /* idle or stalled: closed */
}

/* Makes the buffer hold a whole request header; the gathered responses are sent before the
 * thread waits for bytes. */
static int tcp_sconn_fill(struct tcp_sconn *c)
{
    struct tp_engine *e = c->srv->e;
    uint64_t hdr_dl = 0;
    while (c->rhi - c->rlo < TPW_REQ_SIZE) {
        if (c->rlo > 0) { /* to the front */
            memmove(c->rbuf, c->rbuf + c->rlo, c->rhi - c->rlo);
            c->rhi -= c->rlo;
            c->rlo = 0;
        }
        int rc;
        if (c->drained) {
            if ((rc = tcp_sout_flush(e, c->fd, &c->out)) != 0)
                return rc;
            if (c->rhi > 0 && !hdr_dl)
                hdr_dl = tcp_deadline(e->io_timeout_ms, 0);
            if ((rc = tcp_sconn_wait(c, hdr_dl)) != 0)
                return rc;
        }
        size_t cap = TCP_SRV_RBUF - c->rhi;
        ssize_t n = recv(c->fd, c->rbuf + c->rhi, cap, MSG_DONTWAIT);
        if (n == 0)
            return KVMESH_ECONN;
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return KVMESH_ECONN;
            c->drained = errno != EINTR;
            continue;
        }
        c->rhi += (size_t)n;
        c->drained = (size_t)n < cap;
    }
    return 0;
}

/* Moves up to len bytes of a request's payload from the buffer to dst (NULL: drops them);
 * returns how many. */
static uint64_t tcp_sconn_take(struct tcp_sconn *c, uint8_t *dst, uint64_t len)
{
    uint64_t n = KVM_MIN(len, (uint64_t)(c->rhi - c->rlo));
    if (dst)
        memcpy(dst, c->rbuf + c->rlo, (size_t)n);
    c->rlo += (size_t)n;
    return n;
}

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
static int tcp_serve_one(struct tcp_sconn *c)
{
    struct tp_engine *e = c->srv->e;
    /* an idle connection waits for its next request at most idle_timeout_ms (then it is closed:
     * a client that connected and went silent does not keep a slot); once a request starts,
     * every socket operation is bounded by io_timeout_ms (a stalled client frees the thread) */
    int rc = tcp_sconn_fill(c);
    if (rc)
        return rc;
    struct tpw_req q;
    if ((rc = tpw_req_decode(c->rbuf + c->rlo, TPW_REQ_SIZE, &q)) != 0)
        return rc; /* a stream we cannot parse cannot be resynchronized */
    c->rlo += TPW_REQ_SIZE;
    uint64_t dl = tcp_deadline(e->io_timeout_ms, q.length);
    uint8_t *ptr = NULL;
    struct seg *pin = NULL;
    enum seg_reason reason = SEG_OK;
    uint32_t op = q.op == TP_READ ? SEG_READ : SEG_WRITE;
    int st = seg_check(e->reg, q.seg_id, q.offset, q.length, op, q.token, &ptr, &pin, &reason);
    struct tpw_resp resp = {.status = st, .reason = (uint8_t)reason, .req_id = q.req_id};
    if (st) {
        if (q.op == TP_WRITE) {
            uint64_t rest = q.length - tcp_sconn_take(c, NULL, q.length);
            if (rest && (rc = tcp_discard(c->fd, rest, dl)) != 0)
                return rc;
        }
        return tcp_sout_add(e, c->fd, &c->out, &resp, NULL, NULL);
    }
    if (q.op == TP_READ) {
        resp.length = q.length;
        return tcp_sout_add(e, c->fd, &c->out, &resp, ptr, pin);
    }
    uint64_t got = tcp_sconn_take(c, ptr, q.length);
    rc = got < q.length ? tp_io_recv_all_by(c->fd, ptr + got, q.length - got, dl) : 0;
    seg_unpin(e->reg, pin);
    if (rc)
        return rc;
    return tcp_sout_add(e, c->fd, &c->out, &resp, NULL, NULL);
}

static void *tcp_sconn_main(void *arg)
{
    struct tcp_sconn *c = arg;
    c->drained = true;
    while (!__atomic_load_n(&c->srv->stopping, __ATOMIC_ACQUIRE)) {
        if (tcp_serve_one(c) != 0)
            break;
    }
    tcp_sout_drop(c->srv->e, &c->out);
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
    struct kvm_sum *dsum; /* a one-chunk request's sum (borrowed), folded in order directly */
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

/* n bytes of k at [at, at + n) landed (received or sent), after every byte before them. */
static void tcp_chunk_landed(const struct tcp_chunk *k, uint64_t at, uint64_t n)
{
    if (k->sum)
        tcp_sum_landed(k->sum, k->ci, n);
    else if (k->dsum)
        kvm_sum_update(k->dsum, k->local + at, (size_t)n);
}

static bool tcp_chunk_sums(const struct tcp_chunk *k)
{
    return k->sum || k->dsum;
}

struct tcp_peer;
struct tcp_win;

struct tcp_conn {
    struct tcp_peer *p;
    int fd;
    pthread_t th;
    bool started;
    struct tcp_chunk *cur; /* the chunks being exchanged, linked by next (guarded by peer.mu) */
    struct tcp_win *win;   /* the I/O thread's window state (owned by the connection) */
    uint64_t last_ms;      /* tp_io_now_ms() of the last exchange (guarded by peer.mu) */
    int tmo_ms;            /* the socket's timeouts (tcp_conn_timeout; the exchanging thread) */
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
    struct tp_addr addr;    /* to connect again after an idle close */
    struct tcp_chunk *pool; /* finished chunks kept for the next submits, linked by next */
    unsigned npool;         /* at most TCP_CHUNK_POOL; freed with the peer */
    struct tcp_peer *next;
};

/*
 * Chunks of queued requests come from their peer's pool (refilled as the I/O threads finish
 * them): a steady stream of requests allocates nothing per request. TCP_CHUNK_POOL keeps four
 * full windows (TCP_WIN_MAX) per peer, beyond which finished chunks are freed.
 */
#define TCP_CHUNK_POOL 256u

/* A chunk for a request (p->mu held): from the pool, else allocated; NULL when that fails. */
static struct tcp_chunk *tcp_chunk_get_locked(struct tcp_peer *p)
{
    struct tcp_chunk *k = p->pool;
    if (!k)
        return seg_calloc(1, sizeof(*k));
    p->pool = k->next;
    p->npool--;
    return k;
}

/* Returns a finished chunk to p's pool (dropping its checksum reference), or frees it when the
 * pool is full (p->mu held). The I/O threads return a window's chunks before they complete
 * them, so the pool holds every chunk of a batch by the time its waiter wakes. */
static void tcp_chunk_put_locked(struct tcp_peer *p, struct tcp_chunk *k)
{
    tcp_sum_unref(k->sum); /* (takes only the sum's own lock) */
    k->sum = NULL;
    if (p->npool >= TCP_CHUNK_POOL) {
        free(k);
        return;
    }
    k->b = NULL;
    k->next = p->pool;
    p->pool = k;
    p->npool++;
}

/* Returns the chunks of list (finished, not linked elsewhere) to p (p->mu held). */
static void tcp_chunks_put_locked(struct tcp_peer *p, struct tcp_chunk *list)
{
    while (list) {
        struct tcp_chunk *n = list->next;
        tcp_chunk_put_locked(p, list);
        list = n;
    }
}

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
    c->tmo_ms = p->e->io_timeout_ms; /* (tcp_connect) */
    return 0;
}

/* Sets the socket timeouts of c to ms unless they are so already (the thread exchanging on c):
 * two setsockopt calls only when the bound changes. */
static void tcp_conn_timeout(struct tcp_conn *c, int ms)
{
    if (c->tmo_ms != ms) {
        tp_io_set_timeout(c->fd, ms);
        c->tmo_ms = ms;
    }
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
    if (!tcp_chunk_sums(k))
        return tp_io_send_all_by(fd, iov, 2, dl);
    for (uint64_t done = 0; done < k->length;) {
        size_t n = (size_t)KVM_MIN((uint64_t)TCP_SUM_BLOCK, k->length - done);
        iov[1] = (struct iovec){k->local + done, n};
        int rc = done ? tp_io_send_all_by(fd, &iov[1], 1, dl) : tp_io_send_all_by(fd, iov, 2, dl);
        if (rc)
            return rc;
        tcp_chunk_landed(k, done, n);
        done += n;
    }
    return 0;
}

/* Receives a READ's payload; with a sum, in TCP_SUM_BLOCK blocks, each reported on arrival. */
static int tcp_recv_payload(int fd, const struct tcp_chunk *k, uint64_t dl)
{
    if (!tcp_chunk_sums(k))
        return tp_io_recv_all_by(fd, k->local, k->length, dl);
    for (uint64_t done = 0; done < k->length;) {
        size_t n = (size_t)KVM_MIN((uint64_t)TCP_SUM_BLOCK, k->length - done);
        int rc = tp_io_recv_all_by(fd, k->local + done, n, dl);
        if (rc)
            return rc;
        tcp_chunk_landed(k, done, n);
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

/* The result of chunk k whose exchange ended with rc (p->mu held): a failure after its batch
 * was aborted (tp_batch_abort shut the peer down) is KVMESH_ECANCELED. */
static int tcp_chunk_rc_locked(const struct tcp_peer *p, const struct tcp_chunk *k, int rc)
{
    return rc && p->dead && tp_batch_canceled(k->b) ? KVMESH_ECANCELED : rc;
}

/* Ends the exchange of c's current chunks (p->mu held; call after tcp_chunk_rc_locked for each
 * of them): c is free again, its queue drops their bytes, and an error that broke the stream
 * (stream_rc) kills the peer. The one end-of-exchange path of the lone, single and windowed
 * exchanges. */
static void tcp_conn_end_locked(struct tcp_conn *c, struct tcp_peer *p, uint64_t bytes,
                                int stream_rc)
{
    c->cur = NULL;
    c->last_ms = tp_io_now_ms();
    c->qbytes -= bytes;
    if (rc_breaks_stream(stream_rc))
        tcp_peer_kill_locked(p);
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
 * time left for the exchange, so a blocked send or receive returns by the deadline; a lowered
 * timeout of an earlier exchange that lies within [3/4, 1] of the time left is kept (calls with
 * one request timeout find about the same time left each time: no setsockopt per exchange), and
 * the I/O thread puts io_timeout_ms back before it blocks on c (tcp_conn_run_one_locked). k
 * stays the caller's (on its stack): nothing refers to it once this returns.
 */
static void tcp_run_here_locked(struct tcp_peer *p, struct tcp_conn *c, struct tcp_chunk *k,
                                uint64_t deadline)
{
    KVM_ASSERT(!c->cur && !c->head && c->fd >= 0 && !k->next);
    c->cur = k;
    c->qbytes += k->length;
    uint64_t req_id = ++p->next_req_id;
    int io_ms = (int)p->e->io_timeout_ms;
    pthread_mutex_unlock(&p->mu);
    uint64_t now = tp_io_now_ms(), left = deadline > now ? deadline - now : 1;
    if (left < (uint64_t)io_ms) {
        uint64_t kept = (uint64_t)c->tmo_ms;
        tcp_conn_timeout(c, kept <= left && kept >= left - left / 4 ? c->tmo_ms : (int)left);
    } else {
        tcp_conn_timeout(c, io_ms);
    }
    uint8_t why = 0;
    int rc =
        tp_batch_canceled(k->b) ? KVMESH_ECANCELED : tcp_run_chunk(c, k, req_id, deadline, &why);
    pthread_mutex_lock(&p->mu);
    int st = tcp_chunk_rc_locked(p, k, rc);
    tcp_conn_end_locked(c, p, k->length, rc);
    if (!p->dead && c->head)
        pthread_cond_signal(&c->cv); /* queued behind this exchange meanwhile */
    pthread_mutex_unlock(&p->mu);
    tp_chunk_done(k->b, k->idx, st, why); /* k is the caller's (tcp_submit_lone) */
    pthread_mutex_lock(&p->mu);
}

/* ---- pipelined windows of small chunks ----------------------------------------------------- */

/*
 * An I/O thread sends the small chunks queued on its connection back to back, up to a window
 * (TCP_WIN_MAX chunks of at most TCP_WIN_ITEM bytes, TCP_WIN_BYTES in all), in one sendmsg, then
 * takes their responses, which the owner sends in request order, from a receive buffer filled
 * by as few recv calls as the bytes allow. The wire format is the one-request protocol's: an
 * owner serves a connection's requests one after another whether or not they were pipelined.
 * The socket is used without blocking (MSG_DONTWAIT) and the thread polls for both directions
 * while requests are left to send, so a window cannot deadlock with an owner blocked sending
 * responses the client is not yet reading.
 */
#define TCP_WIN_MAX    64u
#define TCP_WIN_ITEM   (64u << 10)
#define TCP_WIN_BYTES  (512u << 10)
#define TCP_RBUF       (64u << 10)
#define TCP_WIN_DIRECT (16u << 10) /* a payload rest this large is received in place */

struct tcp_win {
    struct tcp_chunk *k[TCP_WIN_MAX];
    uint64_t id[TCP_WIN_MAX];
    struct tp_batch *b[TCP_WIN_MAX]; /* k[i]->b and ->idx, kept for tp_chunks_done once the */
    unsigned idx[TCP_WIN_MAX];       /* chunks are back in the pool */
    int rc[TCP_WIN_MAX];
    uint8_t why[TCP_WIN_MAX];
    uint8_t hb[TCP_WIN_MAX][TPW_REQ_SIZE];
    struct iovec iov[2 * TCP_WIN_MAX];
    unsigned n, niov, sent; /* chunks; iovecs; iovecs sent whole */
    unsigned r;             /* responses taken */
    bool have;              /* response r's header taken, its payload not yet whole */
    uint64_t got;           /* payload bytes of response r taken */
    uint64_t bytes;         /* payload bytes of the window's chunks */
    uint64_t left;          /* at most this many response bytes are still to come */
    size_t rlo, rhi;        /* rbuf[rlo, rhi): received, not yet taken */
    uint8_t rbuf[TCP_RBUF];
};

static bool tcp_win_fits(const struct tcp_chunk *k)
{
    return k->length <= TCP_WIN_ITEM;
}

/* Encodes the window's requests into one iovec list. */
static void tcp_win_prepare(struct tcp_win *w)
{
    w->niov = w->sent = w->r = 0;
    w->have = false;
    w->got = w->left = 0;
    w->rlo = w->rhi = 0;
    for (unsigned i = 0; i < w->n; i++) {
        const struct tcp_chunk *k = w->k[i];
        struct tpw_req q = {.op = k->op,
                            .req_id = w->id[i],
                            .seg_id = k->seg_id,
                            .offset = k->offset,
                            .length = k->length,
                            .token = k->token};
        tpw_req_encode(&q, w->hb[i]);
        w->iov[w->niov++] = (struct iovec){w->hb[i], TPW_REQ_SIZE};
        if (k->op == TP_WRITE)
            w->iov[w->niov++] = (struct iovec){k->local, k->length};
        w->left += TPW_RESP_SIZE + (k->op == TP_READ ? k->length : 0);
        w->rc[i] = 0;
        w->why[i] = 0;
    }
}

/* Sends what the socket takes now; 0 or an error that breaks the stream. */
static int tcp_win_send(int fd, struct tcp_win *w)
{
    struct msghdr m = {.msg_iov = &w->iov[w->sent], .msg_iovlen = w->niov - w->sent};
    ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : KVMESH_ECONN;
    size_t rest = (size_t)n;
    while (w->sent < w->niov && rest >= w->iov[w->sent].iov_len)
        rest -= w->iov[w->sent++].iov_len;
    if (rest) {
        w->iov[w->sent].iov_base = (uint8_t *)w->iov[w->sent].iov_base + rest;
        w->iov[w->sent].iov_len -= rest;
    }
    return 0;
}

/* Response r is whole: records its result (status, refusal reason) and folds its sum. */
static void tcp_win_finish(struct tcp_win *w, int status, uint8_t why)
{
    struct tcp_chunk *k = w->k[w->r];
    w->rc[w->r] = status;
    w->why[w->r] = why;
    /* a WRITE's bytes were sent (folded as sent, whatever the answer); a READ's landed */
    if (k->op == TP_WRITE || status == 0)
        tcp_chunk_landed(k, 0, k->length);
    w->have = false;
    w->got = 0;
    w->r++;
}

/* Takes response r's header from the buffer; 0 or KVMESH_EPROTO. */
static int tcp_win_header(struct tcp_win *w)
{
    const struct tcp_chunk *k = w->k[w->r];
    struct tpw_resp resp;
    if (tpw_resp_decode(w->rbuf + w->rlo, TPW_RESP_SIZE, &resp) != 0 || resp.req_id != w->id[w->r])
        return KVMESH_EPROTO;
    w->rlo += TPW_RESP_SIZE;
    if (resp.status) {
        if (k->op == TP_READ)
            w->left -= k->length; /* refused: no payload follows */
        tcp_win_finish(w, resp.status, resp.reason);
        return 0;
    }
    if (k->op == TP_WRITE) {
        if (resp.length != 0)
            return KVMESH_EPROTO;
        tcp_win_finish(w, 0, 0);
        return 0;
    }
    if (resp.length != k->length)
        return KVMESH_EPROTO;
    w->have = true;
    return 0;
}

/* Takes every whole header and payload byte the buffer holds; 0 or KVMESH_EPROTO. */
static int tcp_win_take(struct tcp_win *w)
{
    while (w->r < w->n) {
        if (!w->have) {
            if (w->rhi - w->rlo < TPW_RESP_SIZE)
                break;
            int rc = tcp_win_header(w);
            if (rc)
                return rc;
            continue;
        }
        struct tcp_chunk *k = w->k[w->r];
        size_t n = (size_t)KVM_MIN((uint64_t)(w->rhi - w->rlo), k->length - w->got);
        memcpy(k->local + w->got, w->rbuf + w->rlo, n);
        w->rlo += n;
        w->got += n;
        if (w->got < k->length)
            break;
        tcp_win_finish(w, 0, 0);
    }
    if (w->rlo == w->rhi) {
        w->rlo = w->rhi = 0;
    } else if (w->rlo > 0) { /* a partial header: to the front */
        memmove(w->rbuf, w->rbuf + w->rlo, w->rhi - w->rlo);
        w->rhi -= w->rlo;
        w->rlo = 0;
    }
    return 0;
}

/* Receives what the socket holds now (never beyond the window's responses) and takes it.
 * *more: the socket may hold more. 0 or an error that breaks the stream. */
static int tcp_win_recv(int fd, struct tcp_win *w, bool *more)
{
    *more = false;
    uint8_t *dst;
    size_t cap;
    const struct tcp_chunk *k = w->r < w->n ? w->k[w->r] : NULL;
    bool direct = w->have && w->rlo == w->rhi && k->length - w->got >= TCP_WIN_DIRECT;
    if (direct) {
        dst = k->local + w->got;
        cap = (size_t)(k->length - w->got);
    } else {
        dst = w->rbuf + w->rhi;
        cap = (size_t)KVM_MIN((uint64_t)(TCP_RBUF - w->rhi), w->left);
    }
    if (cap == 0)
        return KVMESH_EPROTO; /* more bytes than the window's responses */
    ssize_t n = recv(fd, dst, cap, MSG_DONTWAIT);
    if (n == 0)
        return KVMESH_ECONN;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : KVMESH_ECONN;
    w->left -= (uint64_t)n;
    *more = (size_t)n == cap;
    if (direct)
        w->got += (uint64_t)n;
    else
        w->rhi += (size_t)n;
    return tcp_win_take(w);
}

/* Waits until fd is readable (or writable, with want_out) by the exchange deadline dl, at most
 * io_ms; *in: readable (or hung up). 0 or KVMESH_ETIMEDOUT / KVMESH_ECONN. */
static int tcp_win_poll(int fd, bool want_out, uint64_t dl, int io_ms, bool *in)
{
    uint64_t now = tp_io_now_ms();
    if (now >= dl)
        return KVMESH_ETIMEDOUT;
    int ms = (int)KVM_MIN((uint64_t)io_ms, dl - now);
    struct pollfd pf = {.fd = fd, .events = (short)(POLLIN | (want_out ? POLLOUT : 0))};
    int pr = poll(&pf, 1, ms);
    if (pr < 0)
        return errno == EINTR ? 0 : KVMESH_ECONN;
    if (pr == 0)
        return KVMESH_ETIMEDOUT;
    *in = (pf.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    return 0;
}

/* Exchanges the window on fd: sends its requests, takes its responses (per-chunk results in
 * w->rc / w->why). 0, or the error that broke the stream (responses from w->r on are lost). */
static int tcp_win_run(int fd, struct tcp_win *w, int io_ms)
{
    tcp_win_prepare(w);
    uint64_t dl = tcp_deadline(io_ms, w->bytes);
    bool in = false;
    int rc = 0;
    while (!rc && w->r < w->n) {
        if (w->sent < w->niov && (rc = tcp_win_send(fd, w)) != 0)
            break;
        if (in)
            rc = tcp_win_recv(fd, w, &in);
        else
            rc = tcp_win_poll(fd, w->sent < w->niov, dl, io_ms, &in);
    }
    return rc;
}

/* Runs the chunks at the head of c's queue that fit one window (p->mu held, released
 * meanwhile) and completes them; canceled ones complete with KVMESH_ECANCELED unsent. */
static void tcp_conn_run_win_locked(struct tcp_conn *c, struct tcp_peer *p)
{
    struct tcp_win *w = c->win;
    struct tcp_chunk *dropped = NULL, **last = &c->cur;
    w->n = 0;
    w->bytes = 0;
    while (c->head && w->n < TCP_WIN_MAX && tcp_win_fits(c->head) &&
           w->bytes + c->head->length <= TCP_WIN_BYTES) {
        struct tcp_chunk *k = c->head;
        c->head = k->next;
        k->next = NULL;
        if (tp_batch_canceled(k->b)) {
            c->qbytes -= k->length;
            k->next = dropped;
            dropped = k;
            continue;
        }
        w->id[w->n] = ++p->next_req_id;
        w->idx[w->n] = k->idx;
        w->k[w->n++] = k;
        w->bytes += k->length;
        *last = k; /* c->cur lists the window's chunks (tcp_abort looks at them) */
        last = &k->next;
    }
    if (!c->head)
        c->tail = NULL;
    int rc = w->n ? tcp_conn_ready_locked(c, p) : 0;
    pthread_mutex_unlock(&p->mu);
    for (struct tcp_chunk *k = dropped; k; k = k->next)
        tp_chunk_done(k->b, k->idx, KVMESH_ECANCELED, 0);
    if (!rc && w->n)
        rc = tcp_win_run(c->fd, w, p->e->io_timeout_ms);
    for (unsigned i = w->r; rc && i < w->n; i++)
        w->rc[i] = rc;
    pthread_mutex_lock(&p->mu);
    for (unsigned i = 0; i < w->n; i++) {
        w->rc[i] = tcp_chunk_rc_locked(p, w->k[i], w->rc[i]);
        w->b[i] = w->k[i]->b;
    }
    tcp_conn_end_locked(c, p, w->bytes, rc);
    for (unsigned i = 0; i < w->n; i++)
        tcp_chunk_put_locked(p, w->k[i]);
    tcp_chunks_put_locked(p, dropped);
    pthread_mutex_unlock(&p->mu);
    /* the window's chunks complete per batch under one lock each, with one clock read */
    uint64_t now_ns = 0;
    for (unsigned i = 0, j; i < w->n; i = j) {
        for (j = i + 1; j < w->n && w->b[j] == w->b[i]; j++)
            ;
        tp_chunks_done(w->b[i], &w->idx[i], &w->rc[i], &w->why[i], j - i, &now_ns);
    }
    pthread_mutex_lock(&p->mu);
}

/* Runs the chunk at the head of c's queue alone (p->mu held, released meanwhile). */
static void tcp_conn_run_one_locked(struct tcp_conn *c, struct tcp_peer *p)
{
    struct tcp_chunk *k = c->head;
    c->head = k->next;
    if (!c->head)
        c->tail = NULL;
    k->next = NULL;
    uint64_t req_id = ++p->next_req_id;
    c->cur = k;
    int rc = tp_batch_canceled(k->b) ? KVMESH_ECANCELED : tcp_conn_ready_locked(c, p);
    pthread_mutex_unlock(&p->mu);
    uint8_t reason = 0;
    if (!rc) {
        tcp_conn_timeout(c, (int)p->e->io_timeout_ms); /* (lowered by tcp_run_here_locked) */
        rc = tcp_run_chunk(c, k, req_id, 0, &reason);
    }
    pthread_mutex_lock(&p->mu);
    int st = tcp_chunk_rc_locked(p, k, rc);
    tcp_conn_end_locked(c, p, k->length, rc);
    struct tp_batch *b = k->b;
    unsigned idx = k->idx;
    tcp_chunk_put_locked(p, k);
    pthread_mutex_unlock(&p->mu);
    tp_chunk_done(b, idx, st, reason);
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
            for (struct tcp_chunk *k = list; k; k = k->next)
                tp_chunk_done(k->b, k->idx, KVMESH_ECONN, 0);
            pthread_mutex_lock(&p->mu);
            tcp_chunks_put_locked(p, list);
            if (!c->head)
                break;
            continue;
        }
        if (tcp_win_fits(c->head))
            tcp_conn_run_win_locked(c, p);
        else
            tcp_conn_run_one_locked(c, p);
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
    for (unsigned i = 0; i < p->n; i++) {
        pthread_cond_destroy(&p->conns[i].cv);
        free(p->conns[i].win);
    }
    for (struct tcp_chunk *k = p->pool, *n; k; k = n) {
        n = k->next;
        free(k);
    }
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
        if ((p->conns[i].win = seg_calloc(1, sizeof(struct tcp_win))) == NULL) {
            rc = kvm_errf(KVMESH_ENOMEM, "tcp window allocation failed");
            goto fail;
        }
        if ((rc = tcp_connect(a, e->io_timeout_ms, &p->conns[i].fd)) != 0)
            goto fail;
        p->conns[i].tmo_ms = e->io_timeout_ms;
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

/* Fills k with chunk i (of nk, each piece bytes) of request r (slot idx of b). */
static void tcp_chunk_init(struct tcp_chunk *k, struct tp_batch *b, unsigned idx,
                           const struct tp_request *r, uint64_t piece, uint64_t i, uint64_t nk,
                           struct tcp_sum *sum)
{
    uint64_t off = i * piece;
    *k = (struct tcp_chunk){.b = b,
                            .idx = idx,
                            .op = (uint8_t)r->op,
                            .local = (uint8_t *)r->local + off,
                            .seg_id = r->segment->seg_id,
                            .offset = r->remote_offset + off,
                            .length = KVM_MIN(piece, r->length - off),
                            .token = r->token,
                            .sum = sum,
                            .dsum = nk == 1 ? r->sum : NULL,
                            .ci = i};
}

/* Queues the chunks of list on p's connections, the least loaded first (p->mu held), and marks
 * in wake[] the connections that got one: tcp_wake_locked signals them once the submit queued
 * all it has. */
static void tcp_enqueue_locked(struct tcp_peer *p, struct tcp_chunk *list, bool *wake)
{
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
        wake[best - p->conns] = true;
    }
}

/* Wakes the I/O threads of the connections marked in wake[] and clears the marks (p->mu held). */
static void tcp_wake_locked(struct tcp_peer *p, bool *wake)
{
    for (unsigned i = 0; i < p->n; i++)
        if (wake[i]) {
            wake[i] = false;
            pthread_cond_signal(&p->conns[i].cv); /* its I/O thread is the only waiter */
        }
}

/*
 * A lone one-chunk request whose caller only waits for it (b->cap == 1): the chunk lives on this
 * stack while it runs here (tcp_run_here_locked, with time left and an idle connection), so the
 * common single get or put allocates nothing; only a chunk queued for an I/O thread is copied to
 * the heap (that thread frees it).
 */
static int tcp_submit_lone(struct tp_batch *b, unsigned idx, uint64_t piece)
{
    const struct tp_request *r = &b->slots[idx].r;
    struct tcp_peer *p = r->segment->peer;
    struct tcp_chunk k;
    tcp_chunk_init(&k, b, idx, r, piece, 0, 1, NULL);
    pthread_mutex_lock(&p->mu);
    if (p->dead) {
        pthread_mutex_unlock(&p->mu);
        return kvm_errf(KVMESH_ECONN, "connection to %s lost; reopen the segment", p->key);
    }
    uint64_t deadline = tp_batch_deadline(b);
    struct tcp_conn *idle = deadline > tp_io_now_ms() ? tcp_idle_conn_locked(p) : NULL;
    struct tcp_chunk *heap = NULL;
    if (!idle && (heap = tcp_chunk_get_locked(p)) == NULL) {
        pthread_mutex_unlock(&p->mu);
        return kvm_errf(KVMESH_ENOMEM, "chunk allocation failed");
    }
    tp_slot_set_chunks(b, idx, 1);
    if (idle) {
        tcp_run_here_locked(p, idle, &k, deadline); /* k is not referenced after it returns */
    } else {
        bool wake[TP_MAX_CONNS] = {false};
        *heap = k;
        tcp_enqueue_locked(p, heap, wake);
        tcp_wake_locked(p, wake);
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* The chunk size request r is split into on p; returns the number of chunks. */
static uint64_t tcp_pieces(const struct tp_engine *e, const struct tcp_peer *p,
                           const struct tp_request *r, uint64_t *piece_out)
{
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
    *piece_out = piece;
    return nk;
}

/* Queues request idx of b on p's connections (p->mu held), marking in wake[] the connections
 * to wake. 0, or the error the request completes with (nothing of it queued). */
static int tcp_queue_locked(struct tcp_peer *p, struct tp_batch *b, unsigned idx, bool *wake)
{
    const struct tp_request *r = &b->slots[idx].r;
    if (p->dead)
        return kvm_errf(KVMESH_ECONN, "connection to %s lost; reopen the segment", p->key);
    uint64_t piece;
    uint64_t nk = tcp_pieces(b->e, p, r, &piece);
    struct tcp_sum *sum = NULL; /* one reference per chunk */
    if (r->sum && nk > 1 && (sum = tcp_sum_new(r, piece, nk)) == NULL)
        return kvm_errf(KVMESH_ENOMEM, "checksum state allocation failed");
    struct tcp_chunk *list = NULL, **tailp = &list;
    for (uint64_t i = 0; i < nk; i++) {
        struct tcp_chunk *k = tcp_chunk_get_locked(p);
        if (!k) {
            for (struct tcp_chunk *q = list; q; q = q->next)
                q->sum = NULL; /* (references dropped below, outside the chunks) */
            tcp_chunks_put_locked(p, list);
            if (sum) { /* nobody else holds it: free it whole */
                pthread_mutex_destroy(&sum->mu);
                free(sum);
            }
            return kvm_errf(KVMESH_ENOMEM, "chunk allocation failed");
        }
        tcp_chunk_init(k, b, idx, r, piece, i, nk, sum);
        *tailp = k;
        tailp = &k->next;
    }
    tp_slot_set_chunks(b, idx, (uint32_t)nk);
    tcp_enqueue_locked(p, list, wake);
    return 0;
}

/* Starts requests [first, first + n) of b: each peer's requests of the run are queued under
 * one lock, and its I/O threads are woken once they are all queued (a window then carries as
 * many of them as fit, instead of the first request alone). A lone one-chunk request of a
 * batch of one may run on this thread (tcp_submit_lone). */
static void tcp_submit_run(struct tp_batch *b, unsigned first, unsigned n)
{
    if (n == 1 && b->cap == 1) {
        const struct tp_request *r = &b->slots[first].r;
        uint64_t piece;
        if (tcp_pieces(b->e, r->segment->peer, r, &piece) == 1) {
            int rc = tcp_submit_lone(b, first, piece);
            if (rc)
                tp_chunk_done(b, first, rc, 0);
            return;
        }
    }
    struct tcp_peer *p = NULL;
    bool wake[TP_MAX_CONNS] = {false};
    for (unsigned idx = first; idx < first + n; idx++) {
        struct tcp_peer *q = b->slots[idx].r.segment->peer;
        if (q != p) {
            if (p) {
                tcp_wake_locked(p, wake);
                pthread_mutex_unlock(&p->mu);
            }
            p = q;
            pthread_mutex_lock(&p->mu);
        }
        int rc = tcp_queue_locked(p, b, idx, wake);
        if (rc) { /* completed outside the lock (its callback may submit) */
            tcp_wake_locked(p, wake);
            pthread_mutex_unlock(&p->mu);
            p = NULL;
            tp_chunk_done(b, idx, rc, 0);
        }
    }
    if (p) {
        tcp_wake_locked(p, wake);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Whether c is exchanging a chunk of b (its peer's mu held). */
static bool tcp_conn_carries(const struct tcp_conn *c, const struct tp_batch *b)
{
    for (const struct tcp_chunk *k = c->cur; k; k = k->next)
        if (k->b == b)
            return true;
    return false;
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
            if (tcp_conn_carries(&p->conns[i], b)) {
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
    .submit_run = tcp_submit_run,
    .abort = tcp_abort,
    .usable = tcp_usable,
};
