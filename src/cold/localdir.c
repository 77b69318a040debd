// SPDX-License-Identifier: Apache-2.0
/*
 * localdir.c — the LocalDir cold backend (localdir.h has the format; docs/cold.md
 * "Backends"). Owns the files under <root>/ld: one object file per cold operation at a path
 * derived from the operation id, written as a temporary file, fdatasync'ed, renamed into place
 * and made durable by an fsync of its directory, so a file under its final name is always
 * complete. put/del are idempotent by operation id; get verifies header, length and checksum.
 *
 * In memory: an op-id map of the objects the files hold (rebuilt by scanning at open, which
 * also removes stale temporary files) for find(), idempotence and the usage counters. One mutex
 * guards the map and counters; file I/O runs outside it.
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
#include "cold/localdir.h"
#include "core/bytes.h"
#include "core/hash.h"
#include "core/util.h"

#define COLD_LD_WILLNEED_MIN (256u << 10)

typedef struct ld_obj {
    cold_map_node_t node; /* first: the map hands back nodes */
    uint64_t len;
    uint64_t checksum;
} ld_obj_t;

typedef struct ld {
    char dir[PATH_MAX]; /* <root>/ld */
    pthread_mutex_t mu;
    cold_map_t objs; /* guarded by mu */
    uint64_t cap;
    uint64_t used, reserved, file_bytes, objects; /* guarded by mu */
    bool healthy;                                 /* guarded by mu */
    atomic_uint_fast64_t tmp_seq;
} ld_t;

/* ---- format -------------------------------------------------------------------------------- */

void cold_ld_hdr_encode(const cold_ld_hdr_t *h, uint8_t out[COLD_LD_HDR_LEN])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, COLD_LD_HDR_LEN);
    kvm_wr_bytes(&w, COLD_LD_MAGIC, 8);
    kvm_wr_u16le(&w, COLD_LD_VERSION);
    kvm_wr_u16le(&w, COLD_LD_HDR_LEN);
    kvm_wr_u32le(&w, 0);
    kvm_wr_u64le(&w, h->len);
    kvm_wr_u64le(&w, h->checksum);
    kvm_wr_bytes(&w, h->op.b, COLD_OPID_LEN);
    kvm_wr_zeros(&w, 8);
    kvm_wr_u64le(&w, kvm_hash_seeded(out, COLD_LD_HDR_LEN - 8, COLD_LD_HDR_SEED));
    size_t n = 0;
    KVM_ASSERT(kvm_wr_finish(&w, &n) == 0 && n == COLD_LD_HDR_LEN);
}

int cold_ld_hdr_decode(const void *p, size_t n, cold_ld_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    kvm_rd_t r;
    kvm_rd_init(&r, p, n);
    const uint8_t *magic = kvm_rd_bytes(&r, 8);
    uint16_t ver = kvm_rd_u16le(&r);
    uint16_t hlen = kvm_rd_u16le(&r);
    uint32_t flags = kvm_rd_u32le(&r);
    h->len = kvm_rd_u64le(&r);
    h->checksum = kvm_rd_u64le(&r);
    kvm_rd_copy(&r, h->op.b, COLD_OPID_LEN);
    kvm_rd_zeros(&r, 8);
    uint64_t hsum = kvm_rd_u64le(&r);
    if (!kvm_rd_end(&r) || memcmp(magic, COLD_LD_MAGIC, 8) != 0 || ver != COLD_LD_VERSION ||
        hlen != COLD_LD_HDR_LEN || flags != 0 ||
        hsum != kvm_hash_seeded(p, COLD_LD_HDR_LEN - 8, COLD_LD_HDR_SEED) ||
        h->len > UINT64_MAX - COLD_LD_HDR_LEN) {
        memset(h, 0, sizeof(*h));
        return KVMESH_ECORRUPT;
    }
    return 0;
}

void cold_ld_loc_encode(const cold_opid_t *op, cold_locator_t *out)
{
    memset(out, 0, sizeof(*out));
    out->len = COLD_LD_LOC_LEN;
    out->b[0] = COLD_BACKEND_LOCALDIR;
    out->b[1] = 1;
    memcpy(out->b + 2, op->b, COLD_OPID_LEN);
}

int cold_ld_loc_decode(const cold_locator_t *loc, cold_opid_t *op)
{
    if (!loc || loc->len != COLD_LD_LOC_LEN || loc->b[0] != COLD_BACKEND_LOCALDIR || loc->b[1] != 1)
        return KVMESH_EINVAL;
    memcpy(op->b, loc->b + 2, COLD_OPID_LEN);
    return 0;
}

/* ---- paths --------------------------------------------------------------------------------- */

static void sub_path(const ld_t *l, const cold_opid_t *op, char *buf, size_t cap)
{
    cold_pathf(buf, cap, "%s/%02x", l->dir, op->b[0]);
}

static void obj_path(const ld_t *l, const cold_opid_t *op, char *buf, size_t cap)
{
    char hex[2 * COLD_OPID_LEN + 1];
    cold_opid_hex(op, hex);
    cold_pathf(buf, cap, "%s/%02x/%s.obj", l->dir, op->b[0], hex);
}

static int io_fail(ld_t *l, cold_backend_err_t *err, const char *what, const char *path, int e)
{
    int code = cold_errno_code(e);
    if (code == KVMESH_EIO) {
        pthread_mutex_lock(&l->mu);
        l->healthy = false;
        pthread_mutex_unlock(&l->mu);
    }
    return cold_seterr(err, code, "localdir: %s %s: %s (errno %d); %s", what, path, strerror(e), e,
                       cold_errno_hint(e));
}

/* Reads and checks the header of an open object file against op. 0, KVMESH_ECORRUPT, or a
 * negative errno-based code. *size gets the file size. */
static int read_header(int fd, const cold_opid_t *op, cold_ld_hdr_t *h, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    *size = (uint64_t)st.st_size;
    uint8_t hb[COLD_LD_HDR_LEN];
    int rc = cold_pread_all(fd, hb, sizeof(hb), 0);
    if (rc < 0)
        return rc;
    if (rc > 0)
        return KVMESH_ECORRUPT;
    if (cold_ld_hdr_decode(hb, sizeof(hb), h) != 0 || memcmp(h->op.b, op->b, COLD_OPID_LEN) != 0)
        return KVMESH_ECORRUPT;
    return 0;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static int ld_put(void *be, const cold_opid_t *op, const struct iovec *iov, int iovcnt,
                  uint64_t len, uint64_t checksum, cold_locator_t *out, cold_backend_err_t *err)
{
    ld_t *l = be;
    if (!op || !out || iovcnt < 0 || (iovcnt > 0 && !iov) || cold_iov_len(iov, iovcnt) != len)
        return cold_seterr(err, KVMESH_EINVAL,
                           "localdir: put with a bad argument (iovecs hold %llu bytes, len %llu)",
                           (unsigned long long)cold_iov_len(iov, iovcnt), (unsigned long long)len);
    char path[PATH_MAX];
    obj_path(l, op, path, sizeof(path));

    pthread_mutex_lock(&l->mu);
    ld_obj_t *o = (ld_obj_t *)cold_map_find(&l->objs, op);
    if (o) {
        bool same = o->len == len && o->checksum == checksum;
        pthread_mutex_unlock(&l->mu);
        if (!same)
            return cold_seterr(err, KVMESH_EEXIST,
                               "localdir: %s already holds a different payload for this cold "
                               "operation (%llu bytes); a cold operation id must not be reused",
                               path, (unsigned long long)o->len);
        cold_ld_loc_encode(op, out);
        return 0;
    }
    if (l->used + l->reserved + len > l->cap || l->used + l->reserved + len < len) {
        uint64_t used = l->used, res = l->reserved;
        pthread_mutex_unlock(&l->mu);
        return cold_seterr(err, KVMESH_ENOSPC,
                           "localdir: %s is full: %llu bytes used, %llu being written, capacity "
                           "%llu, this payload %llu; delete objects or raise the capacity",
                           l->dir, (unsigned long long)used, (unsigned long long)res,
                           (unsigned long long)l->cap, (unsigned long long)len);
    }
    l->reserved += len;
    pthread_mutex_unlock(&l->mu);

    char tmp[PATH_MAX], dir[PATH_MAX];
    sub_path(l, op, dir, sizeof(dir));
    char hex[2 * COLD_OPID_LEN + 1];
    cold_opid_hex(op, hex);
    cold_pathf(tmp, sizeof(tmp), "%s/" COLD_LD_TMP_PREFIX "%s.%ld.%llu", dir, hex, (long)getpid(),
               (unsigned long long)atomic_fetch_add(&l->tmp_seq, 1));

    int rc = 0;
    uint64_t replaced = 0;
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = io_fail(l, err, "create", tmp, errno);
        goto out;
    }
    uint8_t hb[COLD_LD_HDR_LEN];
    cold_ld_hdr_t h = {.len = len, .checksum = checksum, .op = *op};
    cold_ld_hdr_encode(&h, hb);
    struct iovec hv = {.iov_base = hb, .iov_len = sizeof(hb)};
    int e = cold_pwritev_all(fd, &hv, 1, 0);
    if (e == 0 && iovcnt > 0)
        e = cold_pwritev_all(fd, iov, iovcnt, COLD_LD_HDR_LEN);
    if (e == 0 && fdatasync(fd) != 0)
        e = -errno;
    if (close(fd) != 0 && e == 0)
        e = -errno;
    if (e != 0) {
        rc = io_fail(l, err, "write", tmp, -e);
        unlink(tmp);
        goto out;
    }
    struct stat st;
    if (lstat(path, &st) == 0)
        replaced = (uint64_t)st.st_size; /* an unreadable leftover found at open */
    if (rename(tmp, path) != 0) {
        rc = io_fail(l, err, "rename into", path, errno);
        unlink(tmp);
        goto out;
    }
    e = cold_fsync_dir(dir);
    if (e != 0) {
        rc = io_fail(l, err, "fsync directory", dir, -e);
        /* The file may or may not survive a crash; leave it, it is complete. */
        goto out;
    }
out:
    pthread_mutex_lock(&l->mu);
    l->reserved -= len;
    if (rc == 0) {
        o = calloc(1, sizeof(*o));
        if (o) {
            o->node.op = *op;
            o->len = len;
            o->checksum = checksum;
            cold_map_insert(&l->objs, &o->node);
            l->used += len;
            l->objects++;
            l->file_bytes = l->file_bytes - replaced + COLD_LD_HDR_LEN + len;
            l->healthy = true;
        } else {
            rc = cold_seterr(err, KVMESH_ENOMEM, "localdir: out of memory indexing %s", path);
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (rc == 0)
        cold_ld_loc_encode(op, out);
    return rc;
}

static int ld_get(void *be, const cold_locator_t *loc, uint64_t len, uint64_t checksum, void *buf,
                  cold_backend_err_t *err)
{
    ld_t *l = be;
    cold_opid_t op;
    if (cold_ld_loc_decode(loc, &op) != 0 || (len > 0 && !buf))
        return cold_seterr(err, KVMESH_EINVAL, "localdir: get with a bad locator or buffer");
    char path[PATH_MAX];
    obj_path(l, &op, path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return cold_seterr(err, KVMESH_ENOENT, "localdir: no object %s", path);
        return io_fail(l, err, "open", path, e);
    }
    cold_ld_hdr_t h;
    uint64_t size = 0;
    int rc = read_header(fd, &op, &h, &size);
    if (rc == KVMESH_ECORRUPT) {
        rc = cold_seterr(err, KVMESH_ECORRUPT,
                         "localdir: %s has a damaged header (%llu bytes on file); the payload "
                         "is lost from this device: restore it from another copy and delete it",
                         path, (unsigned long long)size);
    } else if (rc < 0) {
        rc = io_fail(l, err, "read header of", path, -rc);
    } else if (h.len != len) {
        rc = cold_seterr(err, KVMESH_ECORRUPT,
                         "localdir: %s holds %llu payload bytes, the locator expects %llu; the "
                         "route and the device disagree: delete and re-offload",
                         path, (unsigned long long)h.len, (unsigned long long)len);
    } else if (size != COLD_LD_HDR_LEN + len) {
        rc = cold_seterr(err, KVMESH_ECORRUPT,
                         "localdir: %s is %llu bytes, its header says %llu (truncated or "
                         "extended on disk); the payload is not served: restore from another "
                         "copy",
                         path, (unsigned long long)size,
                         (unsigned long long)(COLD_LD_HDR_LEN + len));
    } else if (h.checksum != checksum) {
        rc = cold_seterr(err, KVMESH_ECHECKSUM,
                         "localdir: %s stores checksum %016llx, the locator expects %016llx; "
                         "not served",
                         path, (unsigned long long)h.checksum, (unsigned long long)checksum);
    } else {
        /* Ask for the whole payload at once: readahead of a fresh file starts small. */
        if (len >= COLD_LD_WILLNEED_MIN)
            (void)posix_fadvise(fd, COLD_LD_HDR_LEN, (off_t)len, POSIX_FADV_WILLNEED);
        uint64_t sum = 0;
        int e = cold_pread_sum(fd, buf, len, COLD_LD_HDR_LEN, &sum);
        if (e > 0) {
            rc = cold_seterr(err, KVMESH_ECORRUPT, "localdir: %s was truncated while read", path);
        } else if (e < 0) {
            rc = io_fail(l, err, "read", path, -e);
        } else if (sum != checksum) {
            rc = cold_seterr(err, KVMESH_ECHECKSUM,
                             "localdir: %s: payload checksum mismatch (the file is damaged); "
                             "not served: restore it from another copy and delete it",
                             path);
        }
    }
    close(fd);
    if (rc != 0 && len > 0 && buf)
        memset(buf, 0, len); /* never leave unverified bytes behind */
    return rc;
}

static int ld_get_batch(void *be, cold_read_t *reads, size_t n, cold_backend_err_t *err)
{
    if (n > 0 && !reads)
        return cold_seterr(err, KVMESH_EINVAL, "localdir: get_batch without reads");
    for (size_t i = 0; i < n; i++)
        reads[i].rc = ld_get(be, &reads[i].loc, reads[i].len, reads[i].checksum, reads[i].buf,
                             i == 0 ? err : NULL);
    return 0;
}

static int ld_del(void *be, const cold_locator_t *loc, cold_backend_err_t *err)
{
    ld_t *l = be;
    cold_opid_t op;
    if (cold_ld_loc_decode(loc, &op) != 0)
        return cold_seterr(err, KVMESH_EINVAL, "localdir: delete with a bad locator");
    char path[PATH_MAX], dir[PATH_MAX];
    obj_path(l, &op, path, sizeof(path));
    sub_path(l, &op, dir, sizeof(dir));
    struct stat st;
    uint64_t size = lstat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (unlink(path) != 0) {
        int e = errno;
        if (e != ENOENT)
            return io_fail(l, err, "unlink", path, e);
        return 0; /* already gone: idempotent */
    }
    int e = cold_fsync_dir(dir);
    pthread_mutex_lock(&l->mu);
    ld_obj_t *o = (ld_obj_t *)cold_map_remove(&l->objs, &op);
    if (o) {
        l->used -= o->len;
        l->objects--;
    }
    l->file_bytes -= KVM_MIN(size, l->file_bytes);
    pthread_mutex_unlock(&l->mu);
    free(o);
    if (e != 0)
        return io_fail(l, err, "fsync directory", dir, -e);
    return 0;
}

static int ld_find(void *be, const cold_opid_t *op, cold_locator_t *out, cold_backend_err_t *err)
{
    ld_t *l = be;
    if (!op || !out)
        return cold_seterr(err, KVMESH_EINVAL, "localdir: find with a bad argument");
    pthread_mutex_lock(&l->mu);
    bool have = cold_map_find(&l->objs, op) != NULL;
    pthread_mutex_unlock(&l->mu);
    if (!have) {
        char hex[2 * COLD_OPID_LEN + 1];
        cold_opid_hex(op, hex);
        return cold_seterr(err, KVMESH_ENOENT, "localdir: no payload for cold operation %s", hex);
    }
    cold_ld_loc_encode(op, out);
    return 0;
}

static int ld_stat(void *be, cold_backend_stat_t *out)
{
    ld_t *l = be;
    pthread_mutex_lock(&l->mu);
    *out = (cold_backend_stat_t){.capacity_bytes = l->cap,
                                 .used_bytes = l->used,
                                 .file_bytes = l->file_bytes,
                                 .objects = l->objects,
                                 .healthy = l->healthy};
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* Background step: after an I/O error, probe the directory (create, fsync, unlink a file). */
static int64_t ld_maintain(void *be, uint64_t budget_bytes, cold_backend_err_t *err)
{
    ld_t *l = be;
    pthread_mutex_lock(&l->mu);
    bool healthy = l->healthy;
    pthread_mutex_unlock(&l->mu);
    if (healthy)
        return 0;
    char probe[PATH_MAX];
    cold_pathf(probe, sizeof(probe), "%s/" COLD_LD_TMP_PREFIX "probe.%ld", l->dir, (long)getpid());
    int fd = open(probe, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return io_fail(l, err, "probe", probe, errno);
    int ok = write(fd, "p", 1) == 1 && fdatasync(fd) == 0;
    int e = errno;
    close(fd);
    unlink(probe);
    if (!ok)
        return io_fail(l, err, "probe", probe, e);
    pthread_mutex_lock(&l->mu);
    l->healthy = true;
    pthread_mutex_unlock(&l->mu);
    return 1;
}

static void free_node(cold_map_node_t *n, void *arg)
{
    (void)arg;
    free(n);
}

static void ld_close(void *be)
{
    ld_t *l = be;
    if (!l)
        return;
    /* Nodes are freed while walking: collect first, the walk must not see freed nodes. */
    size_t n = 0;
    cold_map_node_t **all = l->objs.n ? malloc(l->objs.n * sizeof(*all)) : NULL;
    for (size_t i = 0; all && i < l->objs.nb; i++)
        for (cold_map_node_t *x = l->objs.b[i]; x; x = x->hnext)
            all[n++] = x;
    for (size_t i = 0; i < n; i++)
        free_node(all[i], NULL);
    free(all);
    cold_map_free(&l->objs);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static const cold_backend_ops_t ld_ops = {
    .kind = COLD_BACKEND_LOCALDIR,
    .name = "localdir",
    .put = ld_put,
    .get = ld_get,
    .get_batch = ld_get_batch,
    .del = ld_del,
    .find = ld_find,
    .stat = ld_stat,
    .maintain = ld_maintain,
    .close = ld_close,
};

/* ---- open: scan the fan-out directories ---------------------------------------------------- */

static int scan_sub(ld_t *l, const char *dir, cold_backend_err_t *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return io_fail(l, err, "open directory", dir, errno);
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        char path[PATH_MAX];
        cold_pathf(path, sizeof(path), "%s/%s", dir, nm);
        if (strncmp(nm, COLD_LD_TMP_PREFIX, strlen(COLD_LD_TMP_PREFIX)) == 0) {
            if (unlink(path) != 0 && errno != ENOENT) {
                rc = io_fail(l, err, "remove stale temporary file", path, errno);
                break;
            }
            continue;
        }
        size_t nl = strlen(nm);
        cold_opid_t op;
        if (nl != 2 * COLD_OPID_LEN + 4 || strcmp(nm + 2 * COLD_OPID_LEN, ".obj") != 0 ||
            !cold_opid_parse(nm, 2 * COLD_OPID_LEN, &op))
            continue; /* not ours: left alone */
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = io_fail(l, err, "open", path, errno);
            break;
        }
        cold_ld_hdr_t h;
        uint64_t size = 0;
        int hr = read_header(fd, &op, &h, &size);
        close(fd);
        if (hr < 0 && hr != KVMESH_ECORRUPT) {
            rc = io_fail(l, err, "read header of", path, -hr);
            break;
        }
        l->file_bytes += size;
        if (hr != 0 || size != COLD_LD_HDR_LEN + h.len)
            continue; /* damaged: counted on disk, not as a payload; get reports it */
        ld_obj_t *o = calloc(1, sizeof(*o));
        if (!o) {
            rc = cold_seterr(err, KVMESH_ENOMEM, "localdir: out of memory indexing %s", dir);
            break;
        }
        o->node.op = op;
        o->len = h.len;
        o->checksum = h.checksum;
        cold_map_insert(&l->objs, &o->node);
        l->used += h.len;
        l->objects++;
    }
    closedir(d);
    return rc;
}

int cold_localdir_open(const cold_backend_config_t *cfg, cold_backend_t *out,
                       cold_backend_err_t *err)
{
    ld_t *l = calloc(1, sizeof(*l));
    if (!l || cold_map_init(&l->objs) != 0) {
        free(l);
        return cold_seterr(err, KVMESH_ENOMEM, "localdir: out of memory opening %s", cfg->root);
    }
    pthread_mutex_init(&l->mu, NULL);
    l->cap = cfg->capacity_bytes;
    l->healthy = true;
    cold_pathf(l->dir, sizeof(l->dir), "%s/" COLD_LD_SUBDIR, cfg->root);
    int rc = 0;
    int e = cold_mkdir_durable(l->dir, cfg->root);
    if (e != 0) {
        rc = io_fail(l, err, "create directory", l->dir, -e);
        goto fail;
    }
    bool created = false;
    for (int i = 0; i < COLD_LD_FANOUT; i++) {
        char sub[PATH_MAX];
        cold_pathf(sub, sizeof(sub), "%s/%02x", l->dir, i);
        if (mkdir(sub, 0755) == 0) {
            created = true;
        } else if (errno != EEXIST) {
            rc = io_fail(l, err, "create directory", sub, errno);
            goto fail;
        }
        rc = scan_sub(l, sub, err);
        if (rc != 0)
            goto fail;
    }
    if (created && (e = cold_fsync_dir(l->dir)) != 0) {
        rc = io_fail(l, err, "fsync directory", l->dir, -e);
        goto fail;
    }
    out->ops = &ld_ops;
    out->be = l;
    return 0;
fail:
    ld_close(l);
    return rc;
}
