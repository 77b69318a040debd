// SPDX-License-Identifier: Apache-2.0
/*
 * extent_io.c — the ExtentStore's I/O engine (extent_impl.h): io_uring batches over a pool of
 * rings, or buffered preadv/pwritev. A job is split into chunks of at most IO_CHUNK bytes;
 * chunks of all the jobs of one call are queued in one ring (at most IO_QD in flight) and the
 * rest is submitted as completions arrive. A short completion (rare on regular files) finishes
 * its chunk synchronously.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cold/backend_impl.h"
#include "cold/extent_impl.h"
#include "core/util.h"

#define IO_RINGS        4
#define IO_QD           64
#define IO_CHUNK        (1u << 20)
#define IO_WILLNEED_MIN (256u << 10)

struct cold_io {
    bool uring;
    struct io_uring ring[IO_RINGS];
    pthread_mutex_t mu[IO_RINGS];
    atomic_uint next;
};

int cold_preadv_all(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    struct iovec local[64];
    while (iovcnt > 0) {
        int n = KVM_MIN(iovcnt, (int)KVM_ARRAY_SIZE(local));
        memcpy(local, iov, (size_t)n * sizeof(*iov));
        struct iovec *v = local;
        int vn = n;
        while (vn > 0 && v->iov_len == 0) {
            v++;
            vn--;
        }
        while (vn > 0) {
            ssize_t r = preadv(fd, v, vn, (off_t)off);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            if (r == 0)
                return 1;
            off += (uint64_t)r;
            size_t left = (size_t)r;
            while (vn > 0 && left >= v->iov_len) {
                left -= v->iov_len;
                v++;
                vn--;
            }
            if (vn > 0) {
                v->iov_base = (char *)v->iov_base + left;
                v->iov_len -= left;
            }
        }
        iov += n;
        iovcnt -= n;
    }
    return 0;
}

static int sync_job(const cold_io_job_t *j)
{
    return j->write ? cold_pwritev_all(j->fd, j->iov, j->iovcnt, j->off)
                    : cold_preadv_all(j->fd, j->iov, j->iovcnt, j->off);
}

int cold_io_open(cold_io_mode_t mode, cold_io_t **out, char *why, size_t why_cap)
{
    *out = NULL;
    if (why && why_cap)
        why[0] = 0;
    cold_io_t *io = calloc(1, sizeof(*io));
    if (!io)
        return KVMESH_ENOMEM;
    if (mode != COLD_IO_BUFFERED) {
        int i = 0, rc = 0;
        for (; i < IO_RINGS; i++) {
            rc = io_uring_queue_init(IO_QD, &io->ring[i], 0);
            if (rc < 0)
                break;
            pthread_mutex_init(&io->mu[i], NULL);
        }
        if (i == IO_RINGS) {
            io->uring = true;
        } else {
            for (int k = 0; k < i; k++) {
                io_uring_queue_exit(&io->ring[k]);
                pthread_mutex_destroy(&io->mu[k]);
            }
            if (why && why_cap)
                snprintf(why, why_cap, "io_uring_queue_init failed: %s (errno %d)", strerror(-rc),
                         -rc);
            if (mode == COLD_IO_URING) {
                free(io);
                return KVMESH_EIO;
            }
        }
    }
    *out = io;
    return 0;
}

bool cold_io_is_uring(const cold_io_t *io)
{
    return io && io->uring;
}

void cold_io_close(cold_io_t *io)
{
    if (!io)
        return;
    if (io->uring) {
        for (int i = 0; i < IO_RINGS; i++) {
            io_uring_queue_exit(&io->ring[i]);
            pthread_mutex_destroy(&io->mu[i]);
        }
    }
    free(io);
}

/* One chunk: a slice of a job's bytes with its own iovecs (into the call's iovec pool). */
typedef struct chunk {
    size_t job;
    uint64_t off;
    struct iovec *iov;
    int iovcnt;
    size_t len;
} chunk_t;

/* Slices job j into chunks appended to ch (with iovecs from pool). */
static void slice(const cold_io_job_t *j, size_t ji, chunk_t *ch, size_t *nch, struct iovec *pool,
                  size_t *npool)
{
    uint64_t off = j->off;
    int vi = 0;
    size_t vo = 0; /* offset into iov[vi] */
    while (vi < j->iovcnt) {
        if (j->iov[vi].iov_len == vo) {
            vi++;
            vo = 0;
            continue;
        }
        chunk_t *c = &ch[(*nch)++];
        c->job = ji;
        c->off = off;
        c->iov = &pool[*npool];
        c->iovcnt = 0;
        c->len = 0;
        while (vi < j->iovcnt && c->len < IO_CHUNK && c->iovcnt < 64) {
            size_t avail = j->iov[vi].iov_len - vo;
            if (avail == 0) {
                vi++;
                vo = 0;
                continue;
            }
            size_t take = KVM_MIN(avail, (size_t)IO_CHUNK - c->len);
            pool[(*npool)++] =
                (struct iovec){.iov_base = (char *)j->iov[vi].iov_base + vo, .iov_len = take};
            c->iovcnt++;
            c->len += take;
            vo += take;
            if (vo == j->iov[vi].iov_len) {
                vi++;
                vo = 0;
            }
        }
        off += c->len;
    }
}

static size_t chunks_bound(const cold_io_job_t *j)
{
    uint64_t len = cold_iov_len(j->iov, j->iovcnt);
    /* every chunk ends at IO_CHUNK bytes, at 64 iovecs, or at the end */
    return (size_t)(len / IO_CHUNK) + (size_t)j->iovcnt / 64 + (size_t)j->iovcnt + 1;
}

/* Runs chunk c (from byte `skip` of it) with preadv/pwritev; a failure sets its job's rc. */
static void finish_sync(chunk_t *c, cold_io_job_t *jobs, size_t skip)
{
    cold_io_job_t *j = &jobs[c->job];
    int vi = 0;
    uint64_t off = c->off + skip;
    while (vi < c->iovcnt && skip >= c->iov[vi].iov_len) {
        skip -= c->iov[vi].iov_len;
        vi++;
    }
    if (vi == c->iovcnt)
        return;
    c->iov[vi].iov_base = (char *)c->iov[vi].iov_base + skip;
    c->iov[vi].iov_len -= skip;
    cold_io_job_t tmp = *j;
    tmp.iov = &c->iov[vi];
    tmp.iovcnt = c->iovcnt - vi;
    tmp.off = off;
    int e = sync_job(&tmp);
    if (e != 0 && j->rc == 0)
        j->rc = e;
}

static void complete(struct io_uring *ring, struct io_uring_cqe *cqe, chunk_t *ch,
                     cold_io_job_t *jobs)
{
    size_t ci = (size_t)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    chunk_t *c = &ch[ci];
    cold_io_job_t *j = &jobs[c->job];
    if (res == -EAGAIN || res == -EINTR) {
        finish_sync(c, jobs, 0);
    } else if (res < 0) {
        if (j->rc == 0)
            j->rc = res;
    } else if ((size_t)res < c->len) {
        if (res == 0 && !j->write) {
            if (j->rc == 0)
                j->rc = 1; /* end of file */
        } else {
            finish_sync(c, jobs, (size_t)res); /* short: the tail synchronously */
        }
    }
}

static void run_uring(cold_io_t *io, cold_io_job_t *jobs, size_t n)
{
    size_t maxch = 0, maxv = 0;
    for (size_t i = 0; i < n; i++) {
        maxch += chunks_bound(&jobs[i]);
        maxv += chunks_bound(&jobs[i]) + (size_t)jobs[i].iovcnt;
    }
    chunk_t *ch = malloc(maxch * sizeof(*ch));
    struct iovec *pool = malloc(maxv * sizeof(*pool));
    if (!ch || !pool) {
        free(ch);
        free(pool);
        for (size_t i = 0; i < n; i++)
            jobs[i].rc = sync_job(&jobs[i]);
        return;
    }
    size_t nch = 0, npool = 0;
    for (size_t i = 0; i < n; i++) {
        jobs[i].rc = 0;
        slice(&jobs[i], i, ch, &nch, pool, &npool);
    }
    KVM_ASSERT(nch <= maxch && npool <= maxv);

    unsigned r = atomic_fetch_add(&io->next, 1) % IO_RINGS;
    for (unsigned k = 0; k < IO_RINGS; k++) {
        if (pthread_mutex_trylock(&io->mu[(r + k) % IO_RINGS]) == 0) {
            r = (r + k) % IO_RINGS;
            goto locked;
        }
    }
    pthread_mutex_lock(&io->mu[r]);
locked:;
    struct io_uring *ring = &io->ring[r];
    size_t next = 0, inflight = 0, done = 0;
    while (done < nch) {
        while (next < nch && inflight < IO_QD) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe)
                break;
            chunk_t *c = &ch[next];
            if (jobs[c->job].write)
                io_uring_prep_writev(sqe, jobs[c->job].fd, c->iov, (unsigned)c->iovcnt, c->off);
            else
                io_uring_prep_readv(sqe, jobs[c->job].fd, c->iov, (unsigned)c->iovcnt, c->off);
            io_uring_sqe_set_data64(sqe, next);
            next++;
            inflight++;
        }
        int rc = io_uring_submit_and_wait(ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* The ring failed: run what is not submitted synchronously, then reap the rest. */
            for (; next < nch; next++) {
                finish_sync(&ch[next], jobs, 0);
                done++;
            }
            while (inflight > 0) {
                struct io_uring_cqe *cqe;
                int w = io_uring_wait_cqe(ring, &cqe);
                if (w == -EINTR)
                    continue;
                KVM_ASSERT(w == 0); /* a ring with submitted entries always completes them */
                complete(ring, cqe, ch, jobs);
                inflight--;
                done++;
            }
            break;
        }
        struct io_uring_cqe *cqe;
        while (inflight > 0 && io_uring_peek_cqe(ring, &cqe) == 0) {
            complete(ring, cqe, ch, jobs);
            inflight--;
            done++;
        }
    }
    pthread_mutex_unlock(&io->mu[r]);
    free(ch);
    free(pool);
}

void cold_io_run(cold_io_t *io, cold_io_job_t *jobs, size_t n)
{
    if (n == 0)
        return;
    /* Large reads: ask for the whole range up front (the kernel then reads it with a deep
     * queue instead of growing a readahead window from a small start). */
    for (size_t i = 0; i < n; i++) {
        uint64_t len = cold_iov_len(jobs[i].iov, jobs[i].iovcnt);
        if (!jobs[i].write && len >= IO_WILLNEED_MIN)
            (void)posix_fadvise(jobs[i].fd, (off_t)jobs[i].off, (off_t)len, POSIX_FADV_WILLNEED);
    }
    if (io && io->uring) {
        run_uring(io, jobs, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        jobs[i].rc = sync_job(&jobs[i]);
}
