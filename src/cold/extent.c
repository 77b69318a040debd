// SPDX-License-Identifier: Apache-2.0
/*
 * extent.c — the ExtentStore cold backend (extent.h has the formats; docs/cold.md "Backends").
 * Owns the segment files and the journal under <root>/ext, the in-memory index (op id -> the
 * extent's current place), per-segment liveness and the usage counters.
 *
 * Write path: allocate an aligned extent at the end of the writer's active segment (one per
 * stripe, EXT_STRIPES, so concurrent writers append and sync apart; under mu), write the
 * extent header and payload there (the I/O engine: io_uring or buffered), fdatasync the
 * segment, then append a PUT record to the journal, publish the extent in the index, and wait
 * for the journal's group commit (one fdatasync for every record written before it started).
 * So every journaled extent's bytes are durable before its record, and a put that returned 0
 * survives kill -9: recovery replays the journal (discarding a torn tail) and finds it by id.
 * Delete appends DEL; cleaning (maintain) copies the live extents of a mostly-dead segment to
 * the active one, journaling MOVE after each copy is durable, and removes the segment after a
 * SEGFREE record, so a crash at any point leaves each live extent at its old or its new place,
 * both complete. The journal is compacted (rewritten with one PUT per live extent, temp +
 * fsync + rename) when it has grown well past what it describes.
 *
 * Locks: jmu (journal appends and every index change that a record describes) is taken before
 * mu (index, segments, counters) and before smu (the group commit's state); data I/O and the
 * journal fdatasync run with none held, pinned by segment refs. clean_mu makes maintain()
 * single-threaded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cold/backend_impl.h"
#include "cold/extent.h"
#include "cold/extent_impl.h"
#include "core/bytes.h"
#include "core/hash.h"
#include "core/util.h"

#define JRN_NAME        "journal.log"
#define JRN_TMP         "journal.tmp"
#define JRN_COMPACT_MIN (64u << 10) /* never compact a journal smaller than this */
#define COPY_CHUNK      (1u << 20)
#define PUT_REC_BYTES   80

#define EXT_STRIPES 4 /* active segments: concurrent writers append (and sync) apart */

typedef struct ent ent_t;

/* A journal append's place: durable once the epoch's synced offset reaches off. */
typedef struct jticket {
    uint64_t epoch, off;
} jticket_t;

static _Thread_local int tl_stripe = -1;
static atomic_uint next_stripe;

static int my_stripe(void)
{
    if (tl_stripe < 0)
        tl_stripe = (int)(atomic_fetch_add(&next_stripe, 1) % EXT_STRIPES);
    return tl_stripe;
}

typedef struct seg {
    uint32_t id;
    int fd;
    uint64_t alloc;     /* next append offset (aligned) */
    uint64_t file_size; /* bytes of the file */
    uint64_t live;      /* aligned bytes of live extents */
    uint64_t pending;   /* aligned bytes allocated to writes not yet journaled */
    unsigned refs;      /* I/O in flight on fd */
    bool retired;       /* removed from the table; fd closes at refs == 0 */
    bool bad;           /* header unreadable at open: its extents report ECORRUPT */
    ent_t *head;        /* live extents */
} seg_t;

struct ent {
    cold_map_node_t node; /* first */
    uint64_t len, checksum, gen;
    uint32_t orig_seg, seg;
    uint64_t orig_off, off;
    ent_t *sprev, *snext;
};

typedef struct ext {
    char dir[PATH_MAX];
    cold_io_t *io;
    uint64_t cap, seg_bytes;

    pthread_mutex_t jmu;
    int jfd;        /* guarded by jmu */
    uint64_t jsize; /* guarded by jmu */
    /* Group commit: appends write under jmu and then wait, under smu, until an fdatasync that
     * started after their write returns; one thread syncs for all the waiters. A compaction
     * starts a new epoch (its file was fsynced whole, so older tickets are durable). */
    pthread_mutex_t smu;
    pthread_cond_t scv;
    uint64_t jepoch;   /* guarded by smu */
    uint64_t jwritten; /* guarded by smu: journal bytes written in this epoch */
    uint64_t jsynced;  /* guarded by smu: journal bytes known durable in this epoch */
    bool syncing;      /* guarded by smu: a thread is in fdatasync */
    bool jbroken;      /* guarded by smu: an append or sync failed; reopen to recover */

    pthread_mutex_t mu;
    cold_map_t idx; /* guarded by mu, changed with jmu held too */
    seg_t **segs;
    size_t nsegs, segcap;
    seg_t *active[EXT_STRIPES]; /* where appends go; a thread keeps to one stripe */
    uint32_t next_seg_id;
    uint64_t next_gen;
    uint64_t used, reserved, objects;
    bool healthy;

    pthread_mutex_t clean_mu;
    uint32_t victim; /* segment being cleaned, 0 none (ids start at 1) */
} ext_t;

static uint64_t ext_bytes(uint64_t len)
{
    return (COLD_EXT_HDR_LEN + len + COLD_EXT_ALIGN - 1) / COLD_EXT_ALIGN * COLD_EXT_ALIGN;
}

static void seg_path(const ext_t *x, uint32_t id, char *buf, size_t cap)
{
    cold_pathf(buf, cap, "%s/seg-%08x.dat", x->dir, id);
}

static int io_fail(ext_t *x, cold_backend_err_t *err, const char *what, const char *path, int e)
{
    int code = cold_errno_code(e);
    if (code == KVMESH_ENOENT)
        code = KVMESH_EIO; /* a file of ours vanished: the device is not what we wrote */
    if (code == KVMESH_EIO) {
        pthread_mutex_lock(&x->mu);
        x->healthy = false;
        pthread_mutex_unlock(&x->mu);
    }
    return cold_seterr(err, code, "extent: %s %s: %s (errno %d); %s", what, path, strerror(e), e,
                       cold_errno_hint(e));
}

/* ---- segments (mu held) -------------------------------------------------------------------- */

static seg_t *seg_find(const ext_t *x, uint32_t id)
{
    for (size_t i = 0; i < x->nsegs; i++)
        if (x->segs[i]->id == id)
            return x->segs[i];
    return NULL;
}

static int seg_add(ext_t *x, seg_t *s)
{
    if (x->nsegs == x->segcap) {
        size_t nc = x->segcap ? x->segcap * 2 : 16;
        seg_t **n = realloc(x->segs, nc * sizeof(*n));
        if (!n)
            return KVMESH_ENOMEM;
        x->segs = n;
        x->segcap = nc;
    }
    x->segs[x->nsegs++] = s;
    return 0;
}

static void seg_free(seg_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}

/* Takes s out of the table; it is freed now or by the last seg_unref. */
static void seg_retire(ext_t *x, seg_t *s)
{
    for (size_t i = 0; i < x->nsegs; i++) {
        if (x->segs[i] == s) {
            x->segs[i] = x->segs[--x->nsegs];
            break;
        }
    }
    for (int i = 0; i < EXT_STRIPES; i++)
        if (x->active[i] == s)
            x->active[i] = NULL;
    s->retired = true;
    if (s->refs == 0)
        seg_free(s);
}

static bool is_active(const ext_t *x, const seg_t *s)
{
    for (int i = 0; i < EXT_STRIPES; i++)
        if (x->active[i] == s)
            return true;
    return false;
}

static void seg_unref(seg_t *s)
{
    KVM_ASSERT(s->refs > 0);
    if (--s->refs == 0 && s->retired)
        seg_free(s);
}

static void seg_link(seg_t *s, ent_t *e)
{
    e->sprev = NULL;
    e->snext = s->head;
    if (s->head)
        s->head->sprev = e;
    s->head = e;
    s->live += ext_bytes(e->len);
}

static void seg_unlink(seg_t *s, ent_t *e)
{
    if (e->sprev)
        e->sprev->snext = e->snext;
    else
        s->head = e->snext;
    if (e->snext)
        e->snext->sprev = e->sprev;
    e->sprev = e->snext = NULL;
    KVM_ASSERT(s->live >= ext_bytes(e->len));
    s->live -= ext_bytes(e->len);
}

/* Creates segment id (file, header, fdatasync, directory fsync). Called with mu held. */
static int seg_create(ext_t *x, seg_t **out, cold_backend_err_t *err)
{
    uint32_t id = x->next_seg_id++;
    char path[PATH_MAX];
    seg_path(x, id, path, sizeof(path));
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        pthread_mutex_unlock(&x->mu);
        int rc = io_fail(x, err, "create segment", path, e);
        pthread_mutex_lock(&x->mu);
        return rc;
    }
    uint8_t hb[COLD_EXT_HDR_LEN];
    cold_ext_seg_hdr_t h = {.id = id, .gen = x->next_gen};
    cold_ext_seg_hdr_encode(&h, hb);
    struct iovec v = {.iov_base = hb, .iov_len = sizeof(hb)};
    int e = cold_pwritev_all(fd, &v, 1, 0);
    if (e == 0 && fdatasync(fd) != 0)
        e = -errno;
    if (e == 0)
        e = cold_fsync_dir(x->dir);
    seg_t *s = e == 0 ? calloc(1, sizeof(*s)) : NULL;
    if (!s || seg_add(x, s) != 0) {
        close(fd);
        unlink(path);
        free(s);
        pthread_mutex_unlock(&x->mu);
        int rc = e ? io_fail(x, err, "write segment header", path, -e)
                   : cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory adding %s", path);
        pthread_mutex_lock(&x->mu);
        return rc;
    }
    s->id = id;
    s->fd = fd;
    s->alloc = COLD_EXT_DATA_OFF;
    s->file_size = COLD_EXT_HDR_LEN;
    *out = s;
    return 0;
}

/* Allocates need bytes at the end of the active segment (rolling to a new one). mu held. */
static int alloc_space(ext_t *x, uint64_t need, seg_t **seg, uint64_t *off, cold_backend_err_t *err)
{
    int stripe = my_stripe();
    seg_t *a = x->active[stripe];
    if (!a || (a->alloc + need > x->seg_bytes && a->alloc > COLD_EXT_DATA_OFF)) {
        seg_t *n = NULL;
        int rc = seg_create(x, &n, err);
        if (rc != 0)
            return rc;
        x->active[stripe] = n;
        a = n;
    }
    *seg = a;
    *off = a->alloc;
    a->alloc += need;
    a->pending += need;
    a->refs++;
    return 0;
}

/* ---- journal (jmu held) -------------------------------------------------------------------- */

/* Writes one record at the journal's end (jmu held); *t says when it is durable (jrn_wait). */
static int jrn_append(ext_t *x, const cold_ext_rec_t *rec, jticket_t *t, cold_backend_err_t *err)
{
    char path[PATH_MAX];
    cold_pathf(path, sizeof(path), "%s/" JRN_NAME, x->dir);
    pthread_mutex_lock(&x->smu);
    bool broken = x->jbroken;
    pthread_mutex_unlock(&x->smu);
    if (broken)
        return cold_seterr(err, KVMESH_EIO,
                           "extent: journal %s failed to write or sync earlier; reopen the "
                           "backend (restart) after checking the device",
                           path);
    uint8_t buf[COLD_EXT_REC_MAX];
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, sizeof(buf));
    cold_ext_rec_encode(rec, &w);
    size_t n = 0;
    KVM_ASSERT(kvm_wr_finish(&w, &n) == 0);
    struct iovec v = {.iov_base = buf, .iov_len = n};
    int e = cold_pwritev_all(x->jfd, &v, 1, x->jsize);
    if (e != 0) {
        /* Undo a partial record so that later records follow a clean tail. */
        if (ftruncate(x->jfd, (off_t)x->jsize) != 0) {
            pthread_mutex_lock(&x->smu);
            x->jbroken = true;
            pthread_mutex_unlock(&x->smu);
        }
        return io_fail(x, err, "append to journal", path, -e);
    }
    x->jsize += n;
    pthread_mutex_lock(&x->smu);
    x->jwritten = x->jsize;
    t->epoch = x->jepoch;
    t->off = x->jsize;
    pthread_mutex_unlock(&x->smu);
    return 0;
}

/* Waits until the record of t is durable, syncing for everyone when no one else is (jmu not
 * held). 0, or KVMESH_EIO when the sync failed (the journal is then refused until reopen). */
static int jrn_wait(ext_t *x, const jticket_t *t, cold_backend_err_t *err)
{
    pthread_mutex_lock(&x->smu);
    for (;;) {
        if (t->epoch != x->jepoch || x->jsynced >= t->off) {
            pthread_mutex_unlock(&x->smu);
            return 0;
        }
        if (x->jbroken)
            break;
        if (x->syncing) {
            pthread_cond_wait(&x->scv, &x->smu);
            continue;
        }
        x->syncing = true;
        uint64_t target = x->jwritten;
        int fd = x->jfd; /* compaction swaps it only while no one syncs */
        pthread_mutex_unlock(&x->smu);
        int rc = fdatasync(fd);
        int e = errno;
        pthread_mutex_lock(&x->smu);
        x->syncing = false;
        if (rc == 0)
            x->jsynced = KVM_MAX(x->jsynced, target);
        else
            x->jbroken = true;
        pthread_cond_broadcast(&x->scv);
        if (rc != 0) {
            pthread_mutex_unlock(&x->smu);
            char path[PATH_MAX];
            cold_pathf(path, sizeof(path), "%s/" JRN_NAME, x->dir);
            return io_fail(x, err, "fdatasync journal", path, e);
        }
    }
    pthread_mutex_unlock(&x->smu);
    return cold_seterr(err, KVMESH_EIO,
                       "extent: journal of %s failed to sync; the last operations may not be "
                       "durable: reopen the backend (restart) after checking the device",
                       x->dir);
}

static void rec_of(const ent_t *e, cold_ext_rec_t *r)
{
    *r = (cold_ext_rec_t){.type = COLD_EXT_REC_PUT,
                          .op = e->node.op,
                          .gen = e->gen,
                          .len = e->len,
                          .checksum = e->checksum,
                          .orig_seg = e->orig_seg,
                          .seg = e->seg,
                          .orig_off = e->orig_off,
                          .off = e->off};
}

static void loc_of(const ent_t *e, cold_locator_t *out)
{
    cold_ext_loc_t l = {
        .op = e->node.op, .seg = e->orig_seg, .off = e->orig_off, .len = e->len, .gen = e->gen};
    cold_ext_loc_encode(&l, out);
}

/* Rewrites the journal as one PUT per live extent (jmu held; takes mu for the snapshot). */
static int jrn_compact(ext_t *x, cold_backend_err_t *err)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    cold_pathf(tmp, sizeof(tmp), "%s/" JRN_TMP, x->dir);
    cold_pathf(path, sizeof(path), "%s/" JRN_NAME, x->dir);
    kvm_wr_t w;
    kvm_wr_growing(&w, SIZE_MAX / 2);
    pthread_mutex_lock(&x->mu);
    uint8_t hb[COLD_EXT_HDR_LEN];
    cold_ext_jrn_hdr_encode(x->next_gen, hb);
    kvm_wr_bytes(&w, hb, sizeof(hb));
    for (size_t i = 0; i < x->idx.nb; i++) {
        for (cold_map_node_t *n = x->idx.b[i]; n; n = n->hnext) {
            cold_ext_rec_t r;
            rec_of((const ent_t *)n, &r);
            cold_ext_rec_encode(&r, &w);
        }
    }
    pthread_mutex_unlock(&x->mu);
    size_t len = 0;
    if (kvm_wr_finish(&w, &len) != 0) {
        kvm_wr_free(&w);
        return cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory compacting %s", path);
    }
    int fd = open(tmp, O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        kvm_wr_free(&w);
        return io_fail(x, err, "create", tmp, e);
    }
    struct iovec v = {.iov_base = w.p, .iov_len = len};
    int e = cold_pwritev_all(fd, &v, 1, 0);
    kvm_wr_free(&w);
    if (e == 0 && fdatasync(fd) != 0)
        e = -errno;
    if (e == 0 && rename(tmp, path) != 0)
        e = -errno;
    if (e == 0)
        e = cold_fsync_dir(x->dir);
    if (e != 0) {
        close(fd);
        unlink(tmp);
        return io_fail(x, err, "compact journal into", path, -e);
    }
    pthread_mutex_lock(&x->smu);
    while (x->syncing)
        pthread_cond_wait(&x->scv, &x->smu);
    close(x->jfd);
    x->jfd = fd;
    x->jsize = len;
    x->jepoch++;
    x->jwritten = x->jsynced = len;
    pthread_cond_broadcast(&x->scv);
    pthread_mutex_unlock(&x->smu);
    return 0;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static int ext_put(void *be, const cold_opid_t *op, const struct iovec *iov, int iovcnt,
                   uint64_t len, uint64_t checksum, cold_locator_t *out, cold_backend_err_t *err)
{
    ext_t *x = be;
    if (!op || !out || iovcnt < 0 || (iovcnt > 0 && !iov) || cold_iov_len(iov, iovcnt) != len ||
        len > (UINT64_C(1) << 40))
        return cold_seterr(err, KVMESH_EINVAL,
                           "extent: put with a bad argument (iovecs hold %llu bytes, len %llu)",
                           (unsigned long long)cold_iov_len(iov, iovcnt), (unsigned long long)len);
    uint64_t need = ext_bytes(len);
    pthread_mutex_lock(&x->mu);
    ent_t *e = (ent_t *)cold_map_find(&x->idx, op);
    if (e) {
        bool same = e->len == len && e->checksum == checksum;
        if (same)
            loc_of(e, out);
        uint64_t elen = e->len;
        pthread_mutex_unlock(&x->mu);
        if (!same)
            return cold_seterr(err, KVMESH_EEXIST,
                               "extent: %s already holds a different payload (%llu bytes) for "
                               "this cold operation; a cold operation id must not be reused",
                               x->dir, (unsigned long long)elen);
        return 0;
    }
    if (x->used + x->reserved + len > x->cap) {
        uint64_t used = x->used, res = x->reserved;
        pthread_mutex_unlock(&x->mu);
        return cold_seterr(err, KVMESH_ENOSPC,
                           "extent: %s is full: %llu bytes used, %llu being written, capacity "
                           "%llu, this payload %llu; delete objects or raise the capacity",
                           x->dir, (unsigned long long)used, (unsigned long long)res,
                           (unsigned long long)x->cap, (unsigned long long)len);
    }
    seg_t *s = NULL;
    uint64_t off = 0;
    int rc = alloc_space(x, need, &s, &off, err);
    if (rc != 0) {
        pthread_mutex_unlock(&x->mu);
        return rc;
    }
    uint64_t gen = x->next_gen++;
    x->reserved += len;
    int fd = s->fd;
    uint32_t sid = s->id;
    pthread_mutex_unlock(&x->mu);

    uint8_t hb[COLD_EXT_HDR_LEN];
    cold_ext_xhdr_t xh = {.len = len, .checksum = checksum, .gen = gen, .op = *op};
    cold_ext_xhdr_encode(&xh, hb);
    struct iovec stackv[17];
    struct iovec *v = iovcnt < 16 ? stackv : malloc(((size_t)iovcnt + 1) * sizeof(*v));
    char path[PATH_MAX];
    seg_path(x, sid, path, sizeof(path));
    if (!v) {
        rc = cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory writing %s", path);
    } else {
        v[0] = (struct iovec){.iov_base = hb, .iov_len = sizeof(hb)};
        if (iovcnt > 0)
            memcpy(v + 1, iov, (size_t)iovcnt * sizeof(*iov));
        cold_io_job_t job = {.fd = fd, .write = true, .iov = v, .iovcnt = iovcnt + 1, .off = off};
        cold_io_run(x->io, &job, 1);
        int ioe = job.rc;
        if (ioe == 0 && fdatasync(fd) != 0)
            ioe = -errno;
        if (ioe != 0)
            rc = io_fail(x, err, "write extent to", path, ioe > 0 ? EIO : -ioe);
        if (v != stackv)
            free(v);
    }
    ent_t *ne = rc == 0 ? calloc(1, sizeof(*ne)) : NULL;
    if (rc == 0 && !ne)
        rc = cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory indexing %s", path);
    if (rc == 0) {
        ne->node.op = *op;
        ne->len = len;
        ne->checksum = checksum;
        ne->gen = gen;
        ne->orig_seg = ne->seg = sid;
        ne->orig_off = ne->off = off;
        cold_ext_rec_t r;
        rec_of(ne, &r);
        jticket_t t = {0, 0};
        pthread_mutex_lock(&x->jmu);
        rc = jrn_append(x, &r, &t, err);
        pthread_mutex_lock(&x->mu);
        if (rc == 0) {
            cold_map_insert(&x->idx, &ne->node);
            seg_link(s, ne);
            x->used += len;
            x->objects++;
            x->healthy = true;
        }
        s->file_size = KVM_MAX(s->file_size, off + COLD_EXT_HDR_LEN + len);
        s->pending -= need;
        x->reserved -= len;
        seg_unref(s);
        pthread_mutex_unlock(&x->mu);
        pthread_mutex_unlock(&x->jmu);
        if (rc != 0) {
            free(ne);
            return rc;
        }
        /* Indexed before durable: the core calls nothing else on this op id until put returns,
         * and a failed sync refuses the journal until reopen replays what is durable. */
        loc_of(ne, out);
        return jrn_wait(x, &t, err);
    }
    pthread_mutex_lock(&x->mu);
    x->reserved -= len;
    s->pending -= need;
    seg_unref(s);
    pthread_mutex_unlock(&x->mu);
    return rc;
}

/* A read prepared under mu: the pinned segment, the place, the header scratch. */
typedef struct prep {
    seg_t *s;
    uint64_t off;
    uint64_t gen;
    cold_opid_t op;
    uint8_t hb[COLD_EXT_HDR_LEN];
    struct iovec v[2];
    char path[PATH_MAX];
} prep_t;

/* Looks the locator up and pins its segment (mu held). 0 or a verdict. */
static int prep_read(ext_t *x, const cold_locator_t *loc, uint64_t len, uint64_t checksum,
                     void *buf, prep_t *p, cold_backend_err_t *err)
{
    cold_ext_loc_t l;
    if (cold_ext_loc_decode(loc, &l) != 0 || (len > 0 && !buf))
        return cold_seterr(err, KVMESH_EINVAL, "extent: get with a bad locator or buffer");
    ent_t *e = (ent_t *)cold_map_find(&x->idx, &l.op);
    if (!e || e->gen != l.gen) {
        char hex[2 * COLD_OPID_LEN + 1];
        cold_opid_hex(&l.op, hex);
        return cold_seterr(err, KVMESH_ENOENT, "extent: %s holds no extent for operation %s",
                           x->dir, hex);
    }
    seg_path(x, e->seg, p->path, sizeof(p->path));
    if (e->len != len || l.len != len)
        return cold_seterr(err, KVMESH_ECORRUPT,
                           "extent: %s: the extent holds %llu bytes, the locator expects %llu; "
                           "the route and the device disagree: delete and re-offload",
                           p->path, (unsigned long long)e->len, (unsigned long long)len);
    if (e->checksum != checksum)
        return cold_seterr(err, KVMESH_ECHECKSUM,
                           "extent: %s: stored checksum %016llx, expected %016llx; not served",
                           p->path, (unsigned long long)e->checksum, (unsigned long long)checksum);
    seg_t *s = seg_find(x, e->seg);
    if (!s || s->bad)
        return cold_seterr(err, KVMESH_ECORRUPT,
                           "extent: segment %s of this extent is %s; the payload is lost from "
                           "this device: restore it from another copy and delete it",
                           p->path, s ? "damaged" : "missing");
    s->refs++;
    p->s = s;
    p->off = e->off;
    p->gen = e->gen;
    p->op = l.op;
    p->v[0] = (struct iovec){.iov_base = p->hb, .iov_len = sizeof(p->hb)};
    p->v[1] = (struct iovec){.iov_base = buf, .iov_len = len};
    return 0;
}

/* Verifies what was read (no lock); sum, when given, is the payload's checksum computed while
 * reading. */
static int verify_read(const prep_t *p, int iorc, uint64_t len, uint64_t checksum, void *buf,
                       const uint64_t *sum, ext_t *x, cold_backend_err_t *err)
{
    int rc = 0;
    cold_ext_xhdr_t h;
    if (iorc > 0) {
        rc = cold_seterr(err, KVMESH_ECORRUPT,
                         "extent: %s ends inside the extent at offset %llu (truncated); the "
                         "payload is not served: restore it from another copy",
                         p->path, (unsigned long long)p->off);
    } else if (iorc < 0) {
        rc = io_fail(x, err, "read extent from", p->path, -iorc);
    } else if (cold_ext_xhdr_decode(p->hb, sizeof(p->hb), &h) != 0 || h.gen != p->gen ||
               h.len != len || memcmp(h.op.b, p->op.b, COLD_OPID_LEN) != 0) {
        rc = cold_seterr(err, KVMESH_ECORRUPT,
                         "extent: %s: the extent header at offset %llu is damaged or belongs "
                         "to another extent; not served: restore from another copy",
                         p->path, (unsigned long long)p->off);
    } else if (h.checksum != checksum || (sum ? *sum : kvm_checksum(buf, len)) != checksum) {
        rc = cold_seterr(err, KVMESH_ECHECKSUM,
                         "extent: %s: payload checksum mismatch at offset %llu (damaged on "
                         "disk); not served: restore it from another copy and delete it",
                         p->path, (unsigned long long)p->off);
    }
    return rc;
}

static int ext_get(void *be, const cold_locator_t *loc, uint64_t len, uint64_t checksum, void *buf,
                   cold_backend_err_t *err)
{
    ext_t *x = be;
    prep_t p;
    pthread_mutex_lock(&x->mu);
    int rc = prep_read(x, loc, len, checksum, buf, &p, err);
    pthread_mutex_unlock(&x->mu);
    if (rc == 0) {
        if (cold_io_is_uring(x->io)) {
            cold_io_job_t job = {
                .fd = p.s->fd, .write = false, .iov = p.v, .iovcnt = 2, .off = p.off};
            cold_io_run(x->io, &job, 1);
            rc = verify_read(&p, job.rc, len, checksum, buf, NULL, x, err);
        } else {
            /* buffered: hash each chunk while the kernel reads the next ones ahead */
            if (len >= (256u << 10))
                (void)posix_fadvise(p.s->fd, (off_t)p.off, (off_t)(COLD_EXT_HDR_LEN + len),
                                    POSIX_FADV_WILLNEED);
            uint64_t sum = 0;
            int e = cold_pread_all(p.s->fd, p.hb, sizeof(p.hb), p.off);
            if (e == 0)
                e = cold_pread_sum(p.s->fd, buf, len, p.off + COLD_EXT_HDR_LEN, &sum);
            rc = verify_read(&p, e, len, checksum, buf, &sum, x, err);
        }
        pthread_mutex_lock(&x->mu);
        seg_unref(p.s);
        pthread_mutex_unlock(&x->mu);
    }
    if (rc != 0 && len > 0 && buf)
        memset(buf, 0, len);
    return rc;
}

static int ext_get_batch(void *be, cold_read_t *reads, size_t n, cold_backend_err_t *err)
{
    ext_t *x = be;
    if (n == 0)
        return 0;
    if (!reads)
        return cold_seterr(err, KVMESH_EINVAL, "extent: get_batch without reads");
    prep_t *p = calloc(n, sizeof(*p));
    cold_io_job_t *jobs = calloc(n, sizeof(*jobs));
    size_t *which = calloc(n, sizeof(*which));
    if (!p || !jobs || !which) {
        free(p);
        free(jobs);
        free(which);
        return cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory for a batch of %zu", n);
    }
    size_t nj = 0;
    pthread_mutex_lock(&x->mu);
    for (size_t i = 0; i < n; i++) {
        cold_read_t *r = &reads[i];
        r->rc = prep_read(x, &r->loc, r->len, r->checksum, r->buf, &p[i], NULL);
        if (r->rc == 0) {
            jobs[nj] = (cold_io_job_t){
                .fd = p[i].s->fd, .write = false, .iov = p[i].v, .iovcnt = 2, .off = p[i].off};
            which[nj++] = i;
        }
    }
    pthread_mutex_unlock(&x->mu);
    cold_io_run(x->io, jobs, nj); /* one submission for the whole batch */
    for (size_t k = 0; k < nj; k++) {
        cold_read_t *r = &reads[which[k]];
        r->rc = verify_read(&p[which[k]], jobs[k].rc, r->len, r->checksum, r->buf, NULL, x, NULL);
    }
    pthread_mutex_lock(&x->mu);
    for (size_t k = 0; k < nj; k++)
        seg_unref(p[which[k]].s);
    pthread_mutex_unlock(&x->mu);
    for (size_t i = 0; i < n; i++)
        if (reads[i].rc != 0 && reads[i].len > 0 && reads[i].buf)
            memset(reads[i].buf, 0, reads[i].len);
    free(p);
    free(jobs);
    free(which);
    return 0;
}

static int ext_del(void *be, const cold_locator_t *loc, cold_backend_err_t *err)
{
    ext_t *x = be;
    cold_ext_loc_t l;
    if (cold_ext_loc_decode(loc, &l) != 0)
        return cold_seterr(err, KVMESH_EINVAL, "extent: delete with a bad locator");
    pthread_mutex_lock(&x->jmu);
    pthread_mutex_lock(&x->mu);
    ent_t *e = (ent_t *)cold_map_find(&x->idx, &l.op);
    bool have = e && e->gen == l.gen;
    pthread_mutex_unlock(&x->mu);
    if (!have) {
        pthread_mutex_unlock(&x->jmu);
        return 0; /* absent: idempotent */
    }
    cold_ext_rec_t r = {.type = COLD_EXT_REC_DEL, .op = l.op, .gen = l.gen};
    jticket_t t = {0, 0};
    int rc = jrn_append(x, &r, &t, err);
    if (rc == 0) {
        pthread_mutex_lock(&x->mu);
        e = (ent_t *)cold_map_remove(&x->idx, &l.op);
        KVM_ASSERT(e && e->gen == l.gen); /* jmu held: nothing else changed the index */
        seg_t *s = seg_find(x, e->seg);
        if (s)
            seg_unlink(s, e);
        x->used -= e->len;
        x->objects--;
        pthread_mutex_unlock(&x->mu);
        free(e);
    }
    pthread_mutex_unlock(&x->jmu);
    return rc != 0 ? rc : jrn_wait(x, &t, err);
}

static int ext_find(void *be, const cold_opid_t *op, cold_locator_t *out, cold_backend_err_t *err)
{
    ext_t *x = be;
    if (!op || !out)
        return cold_seterr(err, KVMESH_EINVAL, "extent: find with a bad argument");
    pthread_mutex_lock(&x->mu);
    ent_t *e = (ent_t *)cold_map_find(&x->idx, op);
    if (e)
        loc_of(e, out);
    pthread_mutex_unlock(&x->mu);
    if (!e) {
        char hex[2 * COLD_OPID_LEN + 1];
        cold_opid_hex(op, hex);
        return cold_seterr(err, KVMESH_ENOENT, "extent: no payload for cold operation %s", hex);
    }
    return 0;
}

static int ext_stat(void *be, cold_backend_stat_t *out)
{
    ext_t *x = be;
    pthread_mutex_lock(&x->jmu);
    uint64_t j = x->jsize;
    pthread_mutex_unlock(&x->jmu);
    pthread_mutex_lock(&x->mu);
    uint64_t fb = j;
    for (size_t i = 0; i < x->nsegs; i++)
        fb += x->segs[i]->file_size;
    *out = (cold_backend_stat_t){.capacity_bytes = x->cap,
                                 .used_bytes = x->used,
                                 .file_bytes = fb,
                                 .objects = x->objects,
                                 .healthy = x->healthy};
    pthread_mutex_unlock(&x->mu);
    return 0;
}

/* ---- cleaning ------------------------------------------------------------------------------ */

/* The non-active segment with the most dead bytes, when they are at least half of it. mu. */
static seg_t *pick_victim(ext_t *x)
{
    seg_t *best = NULL;
    uint64_t best_dead = 0;
    for (size_t i = 0; i < x->nsegs; i++) {
        seg_t *s = x->segs[i];
        if (is_active(x, s) || s->bad || s->pending > 0)
            continue;
        uint64_t span = s->alloc - COLD_EXT_DATA_OFF;
        uint64_t dead = span - KVM_MIN(s->live, span);
        if (span == 0 || dead * 2 < span)
            continue;
        if (!best || dead > best_dead) {
            best = s;
            best_dead = dead;
        }
    }
    return best;
}

/* Copies one extent's bytes (header + payload) between files in bounded chunks. */
static int copy_extent(int from, uint64_t foff, int to, uint64_t toff, uint64_t n, void *buf)
{
    while (n > 0) {
        size_t c = (size_t)KVM_MIN(n, (uint64_t)COPY_CHUNK);
        int e = cold_pread_all(from, buf, c, foff);
        if (e != 0)
            return e > 0 ? -EIO : e;
        struct iovec v = {.iov_base = buf, .iov_len = c};
        e = cold_pwritev_all(to, &v, 1, toff);
        if (e != 0)
            return e;
        foff += c;
        toff += c;
        n -= c;
    }
    return 0;
}

/* Moves one live extent of victim v; returns bytes moved, 0 when v has none left, or < 0. */
static int64_t move_one(ext_t *x, uint32_t vid, void *buf, cold_backend_err_t *err)
{
    pthread_mutex_lock(&x->mu);
    seg_t *v = seg_find(x, vid);
    if (!v || !v->head) {
        pthread_mutex_unlock(&x->mu);
        return 0;
    }
    ent_t *e = v->head;
    cold_opid_t op = e->node.op;
    uint64_t gen = e->gen, len = e->len, from = e->off;
    uint64_t need = ext_bytes(len);
    seg_t *d = NULL;
    uint64_t to = 0;
    int rc = alloc_space(x, need, &d, &to, err);
    if (rc != 0) {
        pthread_mutex_unlock(&x->mu);
        return rc;
    }
    v->refs++;
    int vfd = v->fd, dfd = d->fd;
    uint32_t did = d->id;
    pthread_mutex_unlock(&x->mu);

    int e2 = copy_extent(vfd, from, dfd, to, COLD_EXT_HDR_LEN + len, buf);
    if (e2 == 0 && fdatasync(dfd) != 0)
        e2 = -errno;
    if (e2 != 0) {
        char path[PATH_MAX];
        seg_path(x, did, path, sizeof(path));
        rc = io_fail(x, err, "move extent into", path, -e2);
    }
    if (rc == 0) {
        cold_ext_rec_t r = {.type = COLD_EXT_REC_MOVE, .op = op, .gen = gen, .seg = did, .off = to};
        jticket_t t = {0, 0};
        pthread_mutex_lock(&x->jmu);
        rc = jrn_append(x, &r, &t, err);
        pthread_mutex_lock(&x->mu);
        ent_t *cur = (ent_t *)cold_map_find(&x->idx, &op);
        if (rc == 0 && cur && cur->gen == gen && cur->seg == vid && cur->off == from) {
            seg_unlink(v, cur);
            cur->seg = did;
            cur->off = to;
            seg_link(d, cur);
        }
        pthread_mutex_unlock(&x->mu);
        pthread_mutex_unlock(&x->jmu);
        if (rc == 0)
            rc = jrn_wait(x, &t, err);
    }
    pthread_mutex_lock(&x->mu);
    d->file_size = KVM_MAX(d->file_size, to + COLD_EXT_HDR_LEN + len);
    d->pending -= need;
    seg_unref(d);
    seg_unref(v);
    pthread_mutex_unlock(&x->mu);
    return rc != 0 ? rc : (int64_t)need;
}

/* Journals SEGFREE for an empty victim and removes its file. */
static int free_segment(ext_t *x, uint32_t vid, cold_backend_err_t *err)
{
    char path[PATH_MAX];
    seg_path(x, vid, path, sizeof(path));
    cold_ext_rec_t r = {.type = COLD_EXT_REC_SEGFREE, .seg = vid};
    pthread_mutex_lock(&x->jmu);
    pthread_mutex_lock(&x->mu);
    seg_t *v = seg_find(x, vid);
    /* Nothing live and no write still on its way to the journal (a put allocated before the
     * segment stopped being active may not have journaled yet). */
    bool empty = v && !v->head && !is_active(x, v) && v->pending == 0;
    pthread_mutex_unlock(&x->mu);
    jticket_t t = {0, 0};
    int rc = empty ? jrn_append(x, &r, &t, err) : 0;
    if (rc == 0 && empty) {
        pthread_mutex_lock(&x->mu);
        v = seg_find(x, vid);
        if (v)
            seg_retire(x, v);
        pthread_mutex_unlock(&x->mu);
    }
    pthread_mutex_unlock(&x->jmu);
    if (rc == 0 && empty)
        rc = jrn_wait(x, &t, err);
    if (rc != 0 || !empty)
        return rc;
    if (unlink(path) != 0 && errno != ENOENT)
        return io_fail(x, err, "remove cleaned segment", path, errno);
    int e = cold_fsync_dir(x->dir);
    return e ? io_fail(x, err, "fsync directory", x->dir, -e) : 0;
}

static int64_t ext_maintain(void *be, uint64_t budget_bytes, cold_backend_err_t *err)
{
    ext_t *x = be;
    if (pthread_mutex_trylock(&x->clean_mu) != 0)
        return 0; /* another thread is cleaning */
    int64_t work = 0;
    void *buf = NULL;
    if (x->victim == 0) {
        pthread_mutex_lock(&x->mu);
        seg_t *v = pick_victim(x);
        x->victim = v ? v->id : 0;
        pthread_mutex_unlock(&x->mu);
    }
    if (x->victim != 0) {
        buf = malloc(COPY_CHUNK);
        if (!buf) {
            pthread_mutex_unlock(&x->clean_mu);
            return cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory cleaning %s", x->dir);
        }
        while ((uint64_t)work < budget_bytes) {
            int64_t m = move_one(x, x->victim, buf, err);
            if (m < 0) {
                free(buf);
                pthread_mutex_unlock(&x->clean_mu);
                return m;
            }
            if (m == 0) {
                int rc = free_segment(x, x->victim, err);
                if (rc != 0) {
                    free(buf);
                    pthread_mutex_unlock(&x->clean_mu);
                    return rc;
                }
                x->victim = 0;
                work += 1;
                break;
            }
            work += m;
        }
        free(buf);
    }
    /* Journal compaction when it is more than 4x what a fresh one would be. */
    pthread_mutex_lock(&x->jmu);
    pthread_mutex_lock(&x->mu);
    uint64_t fresh = COLD_EXT_HDR_LEN + x->objects * PUT_REC_BYTES;
    pthread_mutex_unlock(&x->mu);
    if (x->jsize > JRN_COMPACT_MIN && x->jsize > 4 * fresh && (uint64_t)work < budget_bytes) {
        uint64_t before = x->jsize;
        int rc = jrn_compact(x, err);
        if (rc != 0) {
            pthread_mutex_unlock(&x->jmu);
            pthread_mutex_unlock(&x->clean_mu);
            return rc;
        }
        work += (int64_t)KVM_MIN(before, (uint64_t)INT64_MAX / 2);
    }
    pthread_mutex_unlock(&x->jmu);
    pthread_mutex_unlock(&x->clean_mu);
    return work;
}

/* ---- close / open -------------------------------------------------------------------------- */

static void ext_close(void *be)
{
    ext_t *x = be;
    if (!x)
        return;
    size_t n = 0;
    cold_map_node_t **all = x->idx.n ? malloc(x->idx.n * sizeof(*all)) : NULL;
    for (size_t i = 0; all && i < x->idx.nb; i++)
        for (cold_map_node_t *m = x->idx.b[i]; m; m = m->hnext)
            all[n++] = m;
    for (size_t i = 0; i < n; i++)
        free(all[i]);
    free(all);
    cold_map_free(&x->idx);
    for (size_t i = 0; i < x->nsegs; i++) {
        KVM_ASSERT(x->segs[i]->refs == 0);
        seg_free(x->segs[i]);
    }
    free(x->segs);
    if (x->jfd >= 0)
        close(x->jfd);
    cold_io_close(x->io);
    pthread_mutex_destroy(&x->jmu);
    pthread_mutex_destroy(&x->mu);
    pthread_mutex_destroy(&x->clean_mu);
    pthread_mutex_destroy(&x->smu);
    pthread_cond_destroy(&x->scv);
    free(x);
}

static const cold_backend_ops_t ext_ops = {
    .kind = COLD_BACKEND_EXTENT,
    .name = "extent",
    .put = ext_put,
    .get = ext_get,
    .get_batch = ext_get_batch,
    .del = ext_del,
    .find = ext_find,
    .stat = ext_stat,
    .maintain = ext_maintain,
    .close = ext_close,
};

const char *cold_extent_io_name(void *be)
{
    ext_t *x = be;
    return cold_io_is_uring(x->io) ? "io_uring" : "buffered";
}

/* Opens every seg-*.dat (header checked; a damaged one is kept as bad). */
static int load_segments(ext_t *x, cold_backend_err_t *err)
{
    DIR *d = opendir(x->dir);
    if (!d)
        return io_fail(x, err, "open directory", x->dir, errno);
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        unsigned id = 0;
        char tail[8] = {0};
        if (sscanf(de->d_name, "seg-%8x.%3s", &id, tail) != 2 || strcmp(tail, "dat") != 0 ||
            strlen(de->d_name) != 16 || id == 0)
            continue;
        char path[PATH_MAX];
        seg_path(x, id, path, sizeof(path));
        int fd = open(path, O_RDWR | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            rc = io_fail(x, err, "open segment", path, errno);
            if (fd >= 0)
                close(fd);
            break;
        }
        uint8_t hb[COLD_EXT_HDR_LEN];
        cold_ext_seg_hdr_t h;
        int e = cold_pread_all(fd, hb, sizeof(hb), 0);
        if (e < 0) {
            close(fd);
            rc = io_fail(x, err, "read segment header of", path, -e);
            break;
        }
        seg_t *s = calloc(1, sizeof(*s));
        if (!s || seg_add(x, s) != 0) {
            free(s);
            close(fd);
            rc = cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory loading %s", path);
            break;
        }
        s->id = id;
        s->fd = fd;
        s->file_size = (uint64_t)st.st_size;
        s->alloc = KVM_MAX((s->file_size + COLD_EXT_ALIGN - 1) / COLD_EXT_ALIGN * COLD_EXT_ALIGN,
                           (uint64_t)COLD_EXT_DATA_OFF);
        s->bad = e > 0 || cold_ext_seg_hdr_decode(hb, sizeof(hb), &h) != 0 || h.id != id;
        if (id >= x->next_seg_id)
            x->next_seg_id = id + 1;
    }
    closedir(d);
    return rc;
}

static int apply(ext_t *x, const cold_ext_rec_t *r)
{
    if (r->type == COLD_EXT_REC_SEGFREE || r->type == COLD_EXT_REC_MOVE ||
        r->type == COLD_EXT_REC_PUT) {
        uint32_t m = KVM_MAX(r->seg, r->orig_seg);
        if (m >= x->next_seg_id)
            x->next_seg_id = m + 1;
    }
    if (r->gen >= x->next_gen)
        x->next_gen = r->gen + 1;
    ent_t *e = r->type == COLD_EXT_REC_SEGFREE ? NULL : (ent_t *)cold_map_find(&x->idx, &r->op);
    switch (r->type) {
    case COLD_EXT_REC_PUT:
        if (e) {
            cold_map_remove(&x->idx, &r->op);
            free(e);
        }
        e = calloc(1, sizeof(*e));
        if (!e)
            return KVMESH_ENOMEM;
        e->node.op = r->op;
        e->len = r->len;
        e->checksum = r->checksum;
        e->gen = r->gen;
        e->orig_seg = r->orig_seg;
        e->seg = r->seg;
        e->orig_off = r->orig_off;
        e->off = r->off;
        cold_map_insert(&x->idx, &e->node);
        break;
    case COLD_EXT_REC_DEL:
        if (e && e->gen == r->gen) {
            cold_map_remove(&x->idx, &r->op);
            free(e);
        }
        break;
    case COLD_EXT_REC_MOVE:
        if (e && e->gen == r->gen) {
            e->seg = r->seg;
            e->off = r->off;
        }
        break;
    default:
        break;
    }
    return 0;
}

static void link_loaded(cold_map_node_t *n, void *arg)
{
    ext_t *x = arg;
    ent_t *e = (ent_t *)n;
    seg_t *s = seg_find(x, e->seg);
    if (s)
        seg_link(s, e);
    x->used += e->len;
    x->objects++;
}

static int replay(ext_t *x, cold_backend_err_t *err)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    cold_pathf(path, sizeof(path), "%s/" JRN_NAME, x->dir);
    cold_pathf(tmp, sizeof(tmp), "%s/" JRN_TMP, x->dir);
    if (unlink(tmp) != 0 && errno != ENOENT)
        return io_fail(x, err, "remove stale", tmp, errno);
    x->jfd = open(path, O_RDWR | O_CLOEXEC);
    if (x->jfd < 0 && errno == ENOENT) {
        /* A fresh store: write the journal header to a temp file and rename it in. */
        int fd = open(tmp, O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0644);
        if (fd < 0)
            return io_fail(x, err, "create", tmp, errno);
        uint8_t hb[COLD_EXT_HDR_LEN];
        cold_ext_jrn_hdr_encode(1, hb);
        struct iovec v = {.iov_base = hb, .iov_len = sizeof(hb)};
        int e = cold_pwritev_all(fd, &v, 1, 0);
        if (e == 0 && fdatasync(fd) != 0)
            e = -errno;
        if (e == 0 && rename(tmp, path) != 0)
            e = -errno;
        if (e == 0)
            e = cold_fsync_dir(x->dir);
        if (e != 0) {
            close(fd);
            return io_fail(x, err, "create journal", path, -e);
        }
        x->jfd = fd;
    }
    if (x->jfd < 0)
        return io_fail(x, err, "open journal", path, errno);
    struct stat st;
    if (fstat(x->jfd, &st) != 0)
        return io_fail(x, err, "stat journal", path, errno);
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory reading %s (%zu bytes)", path,
                           size);
    int e = cold_pread_all(x->jfd, buf, size, 0);
    uint64_t base = 0;
    if (e != 0 || cold_ext_jrn_hdr_decode(buf, KVM_MIN(size, (size_t)COLD_EXT_HDR_LEN), &base)) {
        free(buf);
        if (e < 0)
            return io_fail(x, err, "read journal", path, -e);
        return cold_seterr(err, KVMESH_ECORRUPT,
                           "extent: journal %s has a damaged header; the store's index is "
                           "lost: move the directory %s aside and start with an empty one",
                           path, x->dir);
    }
    x->next_gen = KVM_MAX(base, (uint64_t)1);
    size_t off = COLD_EXT_HDR_LEN;
    while (off < size) {
        cold_ext_rec_t r;
        size_t used = 0;
        if (cold_ext_rec_decode(buf + off, size - off, &r, &used) != 0)
            break; /* the torn tail of an append a crash interrupted */
        if (apply(x, &r) != 0) {
            free(buf);
            return cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory replaying %s", path);
        }
        off += used;
    }
    free(buf);
    if (off < size) {
        if (ftruncate(x->jfd, (off_t)off) != 0 || fdatasync(x->jfd) != 0)
            return io_fail(x, err, "truncate the torn tail of", path, errno);
    }
    x->jsize = off;
    x->jwritten = x->jsynced = off;
    return 0;
}

int cold_extent_open(const cold_backend_config_t *cfg, cold_backend_t *out, cold_backend_err_t *err)
{
    ext_t *x = calloc(1, sizeof(*x));
    if (!x || cold_map_init(&x->idx) != 0) {
        free(x);
        return cold_seterr(err, KVMESH_ENOMEM, "extent: out of memory opening %s", cfg->root);
    }
    pthread_mutex_init(&x->jmu, NULL);
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_init(&x->clean_mu, NULL);
    pthread_mutex_init(&x->smu, NULL);
    pthread_cond_init(&x->scv, NULL);
    x->jfd = -1;
    x->cap = cfg->capacity_bytes;
    x->seg_bytes = cfg->segment_bytes ? cfg->segment_bytes : COLD_EXTENT_DEFAULT_SEGMENT_BYTES;
    x->healthy = true;
    x->next_seg_id = 1;
    cold_pathf(x->dir, sizeof(x->dir), "%s/" COLD_EXT_SUBDIR, cfg->root);
    char why[160];
    int rc = cold_io_open(cfg->io_mode, &x->io, why, sizeof(why));
    if (rc != 0) {
        rc = cold_seterr(err, rc == KVMESH_ENOMEM ? rc : KVMESH_ECONFIG,
                         "extent: io_uring was required for %s but %s; use io mode auto or "
                         "buffered, or allow io_uring (kernel.io_uring_disabled, seccomp)",
                         cfg->root, why);
        goto fail;
    }
    int e = cold_mkdir_durable(x->dir, cfg->root);
    if (e != 0) {
        rc = io_fail(x, err, "create directory", x->dir, -e);
        goto fail;
    }
    if ((rc = load_segments(x, err)) != 0 || (rc = replay(x, err)) != 0)
        goto fail;
    cold_map_each(&x->idx, link_loaded, x);
    /* Segments with nothing live (all deleted, cleaned, or written but never journaled) go. */
    for (size_t i = 0; i < x->nsegs;) {
        seg_t *s = x->segs[i];
        if (s->head) {
            i++;
            continue;
        }
        char path[PATH_MAX];
        seg_path(x, s->id, path, sizeof(path));
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = io_fail(x, err, "remove empty segment", path, errno);
            goto fail;
        }
        seg_retire(x, s);
    }
    if ((e = cold_fsync_dir(x->dir)) != 0) {
        rc = io_fail(x, err, "fsync directory", x->dir, -e);
        goto fail;
    }
    /* A journal far larger than its live content is compacted now, so restarts stay bounded. */
    if (x->jsize > JRN_COMPACT_MIN &&
        x->jsize > 4 * (COLD_EXT_HDR_LEN + x->objects * PUT_REC_BYTES)) {
        pthread_mutex_lock(&x->jmu);
        rc = jrn_compact(x, err);
        pthread_mutex_unlock(&x->jmu);
        if (rc != 0)
            goto fail;
    }
    out->ops = &ext_ops;
    out->be = x;
    return 0;
fail:
    ext_close(x);
    return rc;
}
