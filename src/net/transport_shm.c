/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_shm.c — the same-host shared-memory transport.
 *
 * Owner side: one thread polls an abstract unix SOCK_SEQPACKET socket and its connections (at
 * most TP_MAX_SERVER_CONN). Each message is a grant request {seg_id, token, want_fd}; the owner
 * looks the grant up in its registry and replies with the grant descriptor and the segment size,
 * plus the segment's memfd (SCM_RIGHTS) when asked. That is all the owner ever does: READ and
 * WRITE never reach it.
 *
 * Client side: one control connection per owner (the shm peer). A segment is mapped once per
 * process (seg_remote_map). Each request is checked client-side against the grant descriptor
 * the owner returned for its token (segment, rights, range, expiry; or the one the caller was
 * handed by the owner over another channel: tp_segment_note_grant) and against the mapping
 * size, then copied by the submitting thread (shm_copy: memcpy, or streaming stores for a
 * write of TP_SHM_STREAM_MIN bytes or more and a read of SHM_READ_STREAM_MIN bytes or more; a
 * request with a checksum to fold into, tp_request.sum, copies and hashes in one pass:
 * kvm_sum_update_copy{,_stream}), in TP_SHM_COPY_STEP steps; between steps it checks cancellation
 * and that the owner's control connection is still up, so an owner killed mid-transfer fails the
 * request with KVMESH_ECONN promptly. Grant descriptors are cached per segment and re-asked after
 * TP_SHM_GRANT_RECHECK, so a revocation reaches same-host clients within that time (expiry is
 * exact: checked on every request).
 *
 * Peer state: LIVE --(control connection hung up / I/O error)--> DEAD (sticky; reopen makes a
 * new peer).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/copy.h"
#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_thread.h"
#include "net/transport_int.h"
#include "net/transport_wire.h"

static socklen_t shm_sockaddr(const char *name, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = KVM_MIN(strlen(name), sizeof(sa->sun_path) - 2);
    memcpy(sa->sun_path + 1, name, n); /* abstract namespace: leading NUL, no file */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* ---- server -------------------------------------------------------------------------------- */

struct tp_shm_server {
    struct tp_engine *e;
    int lfd;
    int stop_fd; /* eventfd */
    pthread_t th;
    int fds[TP_MAX_SERVER_CONN];
    unsigned nfds;
};

static void shm_serve_msg(struct tp_engine *e, int fd, const uint8_t *buf, size_t len)
{
    struct tpw_shmq q;
    struct tpw_shmr r = {0};
    struct seg *pin = NULL;
    int seg_fd = -1;
    if (tpw_shmq_decode(buf, len, &q) != 0) {
        r.status = KVMESH_EPROTO;
    } else {
        enum seg_reason reason = SEG_OK;
        r.status = seg_grant_lookup(e->reg, q.seg_id, q.token, &r.grant, &reason);
        r.reason = reason;
        if (r.status == 0) {
            /* pin the segment so its fd stays open while we pass it */
            uint8_t *ptr;
            uint32_t op = (r.grant.rights & SEG_READ) ? SEG_READ : SEG_WRITE;
            r.status = seg_check(e->reg, q.seg_id, r.grant.offset, r.grant.length, op, q.token,
                                 &ptr, &pin, &reason);
            r.reason = reason;
            if (r.status == 0) {
                r.seg_size = pin->size;
                if (q.flags & TPW_SHMQ_WANT_FD)
                    seg_fd = pin->fd;
            }
        }
        if (r.status)
            memset(&r.grant, 0, sizeof(r.grant));
    }
    uint8_t out[TPW_SHMR_SIZE];
    tpw_shmr_encode(&r, out);
    struct iovec iov = {out, sizeof(out)};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (seg_fd >= 0) {
        memset(&cm, 0, sizeof(cm));
        m.msg_control = cm.buf;
        m.msg_controllen = sizeof(cm.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &seg_fd, sizeof(int));
    }
    (void)sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT); /* a full client socket loses a reply */
    if (pin)
        seg_unpin(e->reg, pin);
}

static void *shm_server_main(void *arg)
{
    struct tp_shm_server *srv = arg;
    struct pollfd pf[TP_MAX_SERVER_CONN + 2];
    for (;;) {
        pf[0] = (struct pollfd){.fd = srv->stop_fd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = srv->lfd, .events = POLLIN};
        for (unsigned i = 0; i < srv->nfds; i++)
            pf[2 + i] = (struct pollfd){.fd = srv->fds[i], .events = POLLIN};
        int n = poll(pf, 2 + srv->nfds, -1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (pf[0].revents)
            break;
        /* serve existing connections first (bounded: one message each per turn) */
        for (unsigned i = srv->nfds; i-- > 0;) {
            if (!pf[2 + i].revents)
                continue;
            uint8_t buf[128];
            ssize_t got = recv(srv->fds[i], buf, sizeof(buf), MSG_DONTWAIT);
            if (got > 0) {
                shm_serve_msg(srv->e, srv->fds[i], buf, (size_t)got);
                continue;
            }
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            close(srv->fds[i]);
            srv->fds[i] = srv->fds[--srv->nfds];
        }
        if (pf[1].revents & POLLIN) {
            int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                if (srv->nfds < TP_MAX_SERVER_CONN)
                    srv->fds[srv->nfds++] = fd;
                else
                    close(fd);
            }
        }
    }
    return NULL;
}

static int shm_server_start(struct tp_engine *e)
{
    struct tp_shm_server *srv = seg_calloc(1, sizeof(*srv));
    if (!srv)
        return kvm_errf(KVMESH_ENOMEM, "shm server allocation failed");
    srv->e = e;
    srv->lfd = srv->stop_fd = -1;
    int rc = 0;
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)env_clock_mono_ns();
    snprintf(e->shm_name, sizeof(e->shm_name), "kvmesh-shm-%d-%016llx", (int)getpid(),
             (unsigned long long)rnd);
    struct sockaddr_un sa;
    socklen_t sl = shm_sockaddr(e->shm_name, &sa);
    srv->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    srv->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (srv->lfd < 0 || srv->stop_fd < 0) {
        rc = kvm_errf(KVMESH_EIO, "shm server socket: %s", strerror(errno));
        goto fail;
    }
    if (bind(srv->lfd, (struct sockaddr *)&sa, sl) != 0 || listen(srv->lfd, 64) != 0) {
        rc = kvm_errf(KVMESH_EIO, "shm server cannot listen on @%s: %s", e->shm_name,
                      strerror(errno));
        goto fail;
    }
    if (env_thread_create(&srv->th, shm_server_main, srv) != 0) {
        rc = kvm_errf(KVMESH_ENOMEM, "cannot start the shm server thread");
        goto fail;
    }
    e->shm_srv = srv;
    return 0;
fail:
    if (srv->lfd >= 0)
        close(srv->lfd);
    if (srv->stop_fd >= 0)
        close(srv->stop_fd);
    free(srv);
    return rc;
}

static void shm_server_stop(struct tp_engine *e)
{
    struct tp_shm_server *srv = e->shm_srv;
    if (!srv)
        return;
    uint64_t one = 1;
    ssize_t w = write(srv->stop_fd, &one, sizeof(one));
    (void)w;
    pthread_join(srv->th, NULL);
    for (unsigned i = 0; i < srv->nfds; i++)
        close(srv->fds[i]);
    close(srv->lfd);
    close(srv->stop_fd);
    free(srv);
    e->shm_srv = NULL;
}

/* ---- client -------------------------------------------------------------------------------- */

struct shm_peer {
    char key[SEG_OWNER_KEY_MAX];
    int fd;
    pthread_mutex_t mu; /* one exchange at a time; dead */
    int dead;           /* atomic */
    uint64_t alive_ns;  /* atomic: monotonic time of the last poll that found it alive (0: none) */
    unsigned refs;
    struct shm_peer *next;
};

struct tp_shm_client {
    pthread_mutex_t mu;
    struct shm_peer *peers;
    unsigned npeers;
};

static uint64_t alive_polls; /* atomic: liveness polls made (tp_shm_test_alive_recheck) */

static bool shm_peer_alive(struct shm_peer *p)
{
    if (__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
        return false;
    /* hang-up or error only: a reply to another thread's exchange may be readable meanwhile */
    __atomic_fetch_add(&alive_polls, 1, __ATOMIC_RELAXED);
    struct pollfd pf = {.fd = p->fd, .events = POLLRDHUP};
    if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
        __atomic_store_n(&p->dead, 1, __ATOMIC_RELEASE);
        return false;
    }
    return true;
}

/* Before a request's first step the owner's liveness is polled at most once per
 * TP_SHM_ALIVE_RECHECK_NS (transport.h): a poll(2) per 4 KiB item cost more than the item's
 * copy (9.5% of a shm batch_get's samples against 2.8% for the copies), and with a 100 us window
 * a stream of single 4 KiB gets (one every 50-70 us) still polled before about every second one.
 * A request that starts within that window after the owner died copies from or into its
 * segment's mapping, which stays valid (the memfd is held by the mapping): a read is verified
 * against the route's checksum and a write is not published without the owner; the window only
 * bounds how late a death is noticed before the first step. Each further step of a large
 * request polls. */
static uint64_t alive_recheck_ns = TP_SHM_ALIVE_RECHECK_NS; /* atomic; tests may change it */

uint64_t tp_shm_test_alive_recheck(uint64_t ns)
{
    __atomic_store_n(&alive_recheck_ns, ns ? ns : TP_SHM_ALIVE_RECHECK_NS, __ATOMIC_RELAXED);
    return __atomic_load_n(&alive_polls, __ATOMIC_RELAXED);
}

static bool shm_peer_alive_recent(struct shm_peer *p, uint64_t now)
{
    /* (now is the request's one clock read, taken before its grant lookup: another thread may
     * have found the owner alive after it, last > now, which is as recent as can be) */
    uint64_t last = __atomic_load_n(&p->alive_ns, __ATOMIC_RELAXED);
    if (last && (now < last || now - last < __atomic_load_n(&alive_recheck_ns, __ATOMIC_RELAXED)) &&
        !__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
        return true;
    if (!shm_peer_alive(p))
        return false;
    __atomic_store_n(&p->alive_ns, now, __ATOMIC_RELAXED);
    return true;
}

/* One grant exchange. *fd_out (may be NULL) receives a passed fd or -1. */
static int shm_exchange(struct shm_peer *p, uint64_t seg_id, uint64_t token, bool want_fd,
                        struct tpw_shmr *rep, int *fd_out)
{
    if (fd_out)
        *fd_out = -1;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    if (!shm_peer_alive(p)) {
        rc = kvm_errf(KVMESH_ECONN, "shm owner %s is gone; reopen the segment", p->key);
        goto out;
    }
    uint8_t qb[TPW_SHMQ_SIZE], rb[TPW_SHMR_SIZE + 8];
    struct tpw_shmq q = {.flags = want_fd ? TPW_SHMQ_WANT_FD : 0, .seg_id = seg_id, .token = token};
    tpw_shmq_encode(&q, qb);
    if (send(p->fd, qb, sizeof(qb), MSG_NOSIGNAL) != (ssize_t)sizeof(qb)) {
        rc = KVMESH_ECONN;
        goto broken;
    }
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } cm;
    struct iovec iov = {rb, sizeof(rb)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf)};
    ssize_t n;
    do {
        n = recvmsg(p->fd, &m, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    int got_fd = -1;
    for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int f;
                memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (got_fd < 0)
                    got_fd = f;
                else
                    close(f);
            }
        }
    }
    if (n <= 0) {
        rc = (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ? KVMESH_ETIMEDOUT : KVMESH_ECONN;
        goto broken;
    }
    if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || tpw_shmr_decode(rb, (size_t)n, rep) != 0) {
        if (got_fd >= 0)
            close(got_fd);
        rc = KVMESH_EPROTO;
        goto broken;
    }
    if (rep->status == 0 && rep->grant.token != token) {
        if (got_fd >= 0)
            close(got_fd);
        rc = KVMESH_EPROTO;
        goto broken;
    }
    if (fd_out && rep->status == 0 && want_fd)
        *fd_out = got_fd;
    else if (got_fd >= 0)
        close(got_fd);
    goto out;
broken:
    __atomic_store_n(&p->dead, 1, __ATOMIC_RELEASE);
    kvm_errf(rc, "shm control connection to %s failed", p->key);
out:
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static void shm_peer_free(struct shm_peer *p)
{
    close(p->fd);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static int shm_peer_get(struct tp_engine *e, const struct tp_addr *a, const char *key,
                        struct shm_peer **out)
{
    pthread_mutex_lock(&e->mu);
    if (!e->shm_cli) {
        e->shm_cli = seg_calloc(1, sizeof(*e->shm_cli));
        if (!e->shm_cli) {
            pthread_mutex_unlock(&e->mu);
            return kvm_errf(KVMESH_ENOMEM, "shm client allocation failed");
        }
        pthread_mutex_init(&e->shm_cli->mu, NULL);
    }
    struct tp_shm_client *cl = e->shm_cli;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&cl->mu);
    struct shm_peer *found = NULL, *reap = NULL;
    for (struct shm_peer **pp = &cl->peers; *pp;) {
        struct shm_peer *p = *pp;
        bool alive = shm_peer_alive(p);
        if (!alive && p->refs == 0) {
            *pp = p->next;
            cl->npeers--;
            p->next = reap;
            reap = p;
            continue;
        }
        if (alive && !found && strcmp(p->key, key) == 0)
            found = p;
        pp = &p->next;
    }
    int rc = 0;
    if (!found) {
        struct sockaddr_un sa;
        socklen_t sl = shm_sockaddr(a->shm, &sa);
        int fd = -1;
        if (cl->npeers >= TP_MAX_PEERS) {
            rc = kvm_errf(KVMESH_ENOSPC, "too many shm peers (max %d)", TP_MAX_PEERS);
        } else if ((fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0) {
            rc = kvm_errf(KVMESH_EIO, "socket: %s", strerror(errno));
        } else if (connect(fd, (struct sockaddr *)&sa, sl) != 0) {
            rc = kvm_errf(KVMESH_ECONN, "cannot reach shm owner @%s: %s", a->shm, strerror(errno));
            close(fd);
        } else if (!(found = seg_calloc(1, sizeof(*found)))) {
            rc = kvm_errf(KVMESH_ENOMEM, "shm peer allocation failed");
            close(fd);
        } else {
            tp_io_set_timeout(fd, e->io_timeout_ms);
            snprintf(found->key, sizeof(found->key), "%s", key);
            found->fd = fd;
            pthread_mutex_init(&found->mu, NULL);
            found->next = cl->peers;
            cl->peers = found;
            cl->npeers++;
        }
    }
    if (found)
        found->refs++;
    pthread_mutex_unlock(&cl->mu);
    while (reap) {
        struct shm_peer *n = reap->next;
        shm_peer_free(reap);
        reap = n;
    }
    if (!rc)
        *out = found;
    return rc;
}

static void shm_cache_put(struct tp_segment *s, const struct seg_grant *g, uint64_t now)
{
    /* called with s->mu held */
    for (unsigned i = 0; i < s->ngrants; i++) {
        if (s->grants[i].token == g->token) {
            s->grants[i] = *g;
            s->grant_fetched[i] = now;
            return;
        }
    }
    unsigned slot = s->ngrants < TP_SHM_GRANT_CACHE ? s->ngrants++ : s->grant_next++;
    s->grant_next %= TP_SHM_GRANT_CACHE;
    s->grants[slot] = *g;
    s->grant_fetched[slot] = now;
}

static void shm_cache_drop(struct tp_segment *s, uint64_t token)
{
    for (unsigned i = 0; i < s->ngrants; i++) {
        if (s->grants[i].token == token) {
            s->grants[i] = s->grants[--s->ngrants];
            s->grant_fetched[i] = s->grant_fetched[s->ngrants];
            return;
        }
    }
}

void tp_shm_note_grant(struct tp_segment *s, const struct seg_grant *g)
{
    pthread_mutex_lock(&s->mu);
    shm_cache_put(s, g, env_clock_mono_ns());
    pthread_mutex_unlock(&s->mu);
}

/* The grant descriptor for token: cached, or asked from the owner. *now: the caller's clock read,
 * one per request for the cache's age, the grant's expiry and the owner's liveness window; read
 * again after an exchange with the owner. */
static int shm_grant_get(struct tp_segment *s, uint64_t token, struct seg_grant *g,
                         enum seg_reason *reason, struct tp_batch *b, uint64_t *now_io)
{
    uint64_t now = *now_io;
    pthread_mutex_lock(&s->mu);
    for (unsigned i = 0; i < s->ngrants; i++) {
        /* (now may be older than a fetch another thread made since: that fetch is fresh) */
        if (s->grants[i].token == token &&
            (now < s->grant_fetched[i] || now - s->grant_fetched[i] < TP_SHM_GRANT_RECHECK)) {
            *g = s->grants[i];
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
    struct tpw_shmr rep;
    __atomic_fetch_add(&b->exchanges, 1, __ATOMIC_RELAXED); /* a round trip to the owner */
    int rc = shm_exchange(s->peer, s->seg_id, token, false, &rep, NULL);
    if (rc)
        return rc;
    *now_io = env_clock_mono_ns(); /* (the grant's expiry is checked against the time after it) */
    /* the owner answered: alive now, as a liveness poll would have found (the request's first step
     * then polls no more: one poll, the exchange's own, per request that asks for a grant) */
    __atomic_store_n(&((struct shm_peer *)s->peer)->alive_ns, *now_io, __ATOMIC_RELAXED);
    pthread_mutex_lock(&s->mu);
    if (rep.status) {
        shm_cache_drop(s, token);
        pthread_mutex_unlock(&s->mu);
        *reason = (enum seg_reason)rep.reason;
        return kvm_errf(rep.status, "owner refused token: %s",
                        seg_reason_str((enum seg_reason)rep.reason));
    }
    shm_cache_put(s, &rep.grant, now);
    *g = rep.grant;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int shm_open(struct tp_engine *e, const struct tp_addr *a, struct tp_segment *s)
{
    struct shm_peer *p = NULL;
    int rc = shm_peer_get(e, a, s->owner, &p);
    if (rc)
        return rc;
    s->peer = p;
    struct seg_remote *map = seg_remote_find(e->reg, s->owner, s->seg_id);
    struct tpw_shmr rep;
    int fd = -1;
    rc = shm_exchange(p, s->seg_id, s->token, map == NULL, &rep, &fd);
    if (rc)
        goto fail;
    if (rep.status) {
        rc = kvm_errf(rep.status, "owner refused to open segment %#llx: %s",
                      (unsigned long long)s->seg_id, seg_reason_str((enum seg_reason)rep.reason));
        goto fail;
    }
    if (!map) {
        if (fd < 0) {
            rc = kvm_errf(KVMESH_EPROTO, "shm owner sent no segment fd");
            goto fail;
        }
        if ((rc = seg_remote_map(e->reg, s->owner, s->seg_id, fd, rep.seg_size, &map)) != 0)
            goto fail;
    } else if (fd >= 0) {
        close(fd);
    }
    s->map = map;
    pthread_mutex_lock(&s->mu);
    shm_cache_put(s, &rep.grant, env_clock_mono_ns());
    pthread_mutex_unlock(&s->mu);
    return 0;
fail:
    pthread_mutex_lock(&e->shm_cli->mu);
    p->refs--;
    pthread_mutex_unlock(&e->shm_cli->mu);
    s->peer = NULL;
    return rc;
}

static void shm_close(struct tp_segment *s)
{
    struct tp_shm_client *cl = s->e->shm_cli;
    struct shm_peer *p = s->peer;
    pthread_mutex_lock(&cl->mu);
    KVM_ASSERT(p->refs > 0);
    p->refs--;
    pthread_mutex_unlock(&cl->mu);
}

/* A read this large goes into the caller's buffer with streaming stores: a destination of
 * 16 MiB is far larger than this core's L2 and is evicted while it is written anyway; plain
 * stores then pay a read-for-ownership of every line and push its dirty lines through the
 * caches. Smaller reads keep plain stores (the caller's buffer may stay in cache for it:
 * measured slower with streaming at 1-8 MiB; docs/performance.md "Large shm gets: streaming
 * stores into the caller's buffer"). */
#define SHM_READ_STREAM_MIN (16u << 20)

/* Whether request r's copies use streaming stores (writes: TP_SHM_STREAM_MIN, reads:
 * SHM_READ_STREAM_MIN; core/copy.h). */
static bool shm_streams(const struct tp_request *r)
{
    return r->length >= (r->op == TP_WRITE ? TP_SHM_STREAM_MIN : SHM_READ_STREAM_MIN);
}

/* One step of a request: n bytes at offset done. With r->sum, the copy and the hash are one
 * pass (kvm_sum_update_copy{,_stream}: each 64-byte stripe of the source loaded once, stored
 * and folded from the same register, the lines 4 KiB ahead prefetched: the owner's pages are
 * read once, at memory speed, and hashed as copied, so a torn read fails verification;
 * docs/performance.md "Large shm gets: the copy and the checksum"). A write of at least
 * TP_SHM_STREAM_MIN bytes goes into the owner's pages with streaming stores (core/copy.h: nobody
 * reads them soon; no read-for-ownership, no eviction of the caller's cache), and so does a read
 * of at least SHM_READ_STREAM_MIN into the caller's buffer; fenced at the end of the step. */
static void shm_copy(const struct tp_request *r, uint8_t *remote, uint64_t done, size_t n)
{
    uint8_t *local = (uint8_t *)r->local + done;
    remote += done;
    bool stream = shm_streams(r);
    uint8_t *dst = r->op == TP_READ ? local : remote;
    const uint8_t *src = r->op == TP_READ ? remote : local;
    if (r->sum && stream)
        kvm_sum_update_copy_stream(r->sum, dst, src, n);
    else if (r->sum)
        kvm_sum_update_copy(r->sum, dst, src, n);
    else if (stream)
        kvm_copy_stream(dst, src, n);
    else
        memcpy(dst, src, n);
    if (stream)
        kvm_copy_stream_fence();
}

static int shm_submit(struct tp_batch *b, unsigned idx, enum seg_reason *reason)
{
    const struct tp_request *r = &b->slots[idx].r;
    struct tp_segment *s = r->segment;
    struct shm_peer *p = s->peer;
    struct seg_grant g;
    uint64_t now = env_clock_mono_ns();
    int rc = shm_grant_get(s, r->token, &g, reason, b, &now);
    if (rc)
        return rc;
    uint32_t op = r->op == TP_READ ? SEG_READ : SEG_WRITE;
    rc =
        seg_grant_allows(&g, s->seg_id, s->map->size, r->remote_offset, r->length, op, now, reason);
    if (rc)
        return kvm_errf(rc, "shm request refused: %s", seg_reason_str(*reason));
    uint8_t *remote = s->map->base + r->remote_offset;
    for (uint64_t done = 0; done < r->length;) {
        if (tp_batch_canceled(b))
            return KVMESH_ECANCELED;
        if (done == 0 ? !shm_peer_alive_recent(p, now) : !shm_peer_alive(p))
            return kvm_errf(KVMESH_ECONN, "shm owner %s died during the transfer", p->key);
        size_t n = (size_t)KVM_MIN((uint64_t)TP_SHM_COPY_STEP, r->length - done);
        shm_copy(r, remote, done, n);
        done += n;
    }
    tp_chunk_done(b, idx, 0, 0);
    return 0;
}

static void shm_client_stop(struct tp_engine *e)
{
    struct tp_shm_client *cl = e->shm_cli;
    if (!cl)
        return;
    for (struct shm_peer *p = cl->peers, *n; p; p = n) {
        n = p->next;
        shm_peer_free(p);
    }
    pthread_mutex_destroy(&cl->mu);
    free(cl);
    e->shm_cli = NULL;
}

const struct tp_ops tp_shm_ops = {
    .name = "shm",
    .server_start = shm_server_start,
    .server_stop = shm_server_stop,
    .client_stop = shm_client_stop,
    .open = shm_open,
    .close = shm_close,
    .submit = shm_submit,
};
