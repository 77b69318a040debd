// SPDX-License-Identifier: Apache-2.0
/*
 * cold_backend.c — opens a cold backend from its configuration (cold_backend_open.h) after
 * validating it, and the helpers the file backends share (backend_impl.h): operator messages,
 * errno mapping, whole-buffer positional I/O, directory fsync, op-id names and the op-id map.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cold/backend_impl.h"
#include "cold/cold_nfs.h"
#include "core/hash.h"
#include "core/util.h"

#define COLD_MAP_SEED UINT64_C(0x636f6c646d617031) /* "coldmap1" */

int cold_seterr(cold_backend_err_t *err, int code, const char *fmt, ...)
{
    char buf[COLD_BACKEND_ERRMAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (err)
        memcpy(err->msg, buf, sizeof(buf));
    return kvm_errf(code, "%s", buf);
}

int cold_pathf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

int cold_errno_code(int e)
{
    if (e == ENOSPC || e == EDQUOT)
        return KVMESH_ENOSPC;
    if (e == ENOENT)
        return KVMESH_ENOENT;
    if (e == ENOMEM)
        return KVMESH_ENOMEM;
    return KVMESH_EIO;
}

const char *cold_errno_hint(int e)
{
    switch (e) {
    case ENOSPC:
    case EDQUOT:
        return "free space on the device or lower the cold tier's capacity";
    case EACCES:
    case EPERM:
    case EROFS:
        return "make the directory writable by this process (permissions, read-only mount)";
    case ENOENT:
        return "check that the cold root directory still exists and is mounted";
    case EMFILE:
    case ENFILE:
        return "raise the open-file limit (ulimit -n)";
    default:
        return "check the device and the kernel log (dmesg); the backend reports unhealthy";
    }
}

int cold_pwritev_all(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    struct iovec local[64];
    while (iovcnt > 0) {
        int n = KVM_MIN(iovcnt, (int)KVM_ARRAY_SIZE(local));
        memcpy(local, iov, (size_t)n * sizeof(*iov));
        struct iovec *v = local;
        int vn = n;
        while (vn > 0) {
            ssize_t w = pwritev(fd, v, vn, (off_t)off);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return -errno;
            }
            if (w == 0)
                return -EIO;
            off += (uint64_t)w;
            size_t left = (size_t)w;
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

int cold_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return 1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int cold_pread_sum(int fd, void *buf, size_t n, uint64_t off, uint64_t *sum)
{
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    char *p = buf;
    int e = 0;
    while (n > 0 && e == 0) {
        size_t c = KVM_MIN(n, (size_t)COLD_SUM_CHUNK);
        e = cold_pread_all(fd, p, c, off);
        if (e == 0)
            kvm_sum_update(&st, p, c);
        p += c;
        off += c;
        n -= c;
    }
    if (e == 0)
        *sum = kvm_sum_digest(&st);
    return e;
}

int cold_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

int cold_mkdir_durable(const char *dir, const char *parent)
{
    if (mkdir(dir, 0755) == 0)
        return parent ? cold_fsync_dir(parent) : 0;
    if (errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

void cold_opid_hex(const cold_opid_t *op, char out[2 * COLD_OPID_LEN + 1])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < COLD_OPID_LEN; i++) {
        out[2 * i] = d[op->b[i] >> 4];
        out[2 * i + 1] = d[op->b[i] & 15];
    }
    out[2 * COLD_OPID_LEN] = 0;
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

bool cold_opid_parse(const char *hex, size_t n, cold_opid_t *op)
{
    if (n != 2 * COLD_OPID_LEN)
        return false;
    for (int i = 0; i < COLD_OPID_LEN; i++) {
        int hi = hexv(hex[2 * i]), lo = hexv(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        op->b[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

uint64_t cold_iov_len(const struct iovec *iov, int iovcnt)
{
    uint64_t n = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (n + iov[i].iov_len < n)
            return UINT64_MAX;
        n += iov[i].iov_len;
    }
    return n;
}

/* ---- map ----------------------------------------------------------------------------------- */

static size_t map_slot(const cold_map_t *m, const cold_opid_t *op)
{
    return (size_t)kvm_hash_seeded(op->b, COLD_OPID_LEN, COLD_MAP_SEED) & (m->nb - 1);
}

int cold_map_init(cold_map_t *m)
{
    m->nb = 256;
    m->n = 0;
    m->b = calloc(m->nb, sizeof(*m->b));
    return m->b ? 0 : KVMESH_ENOMEM;
}

void cold_map_free(cold_map_t *m)
{
    free(m->b);
    m->b = NULL;
    m->nb = m->n = 0;
}

cold_map_node_t *cold_map_find(const cold_map_t *m, const cold_opid_t *op)
{
    for (cold_map_node_t *n = m->b[map_slot(m, op)]; n; n = n->hnext)
        if (memcmp(n->op.b, op->b, COLD_OPID_LEN) == 0)
            return n;
    return NULL;
}

static void map_grow(cold_map_t *m)
{
    size_t nb = m->nb * 2;
    cold_map_node_t **b = calloc(nb, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    cold_map_t g = {.b = b, .nb = nb, .n = 0};
    for (size_t i = 0; i < m->nb; i++) {
        cold_map_node_t *n = m->b[i];
        while (n) {
            cold_map_node_t *next = n->hnext;
            size_t s = map_slot(&g, &n->op);
            n->hnext = b[s];
            b[s] = n;
            n = next;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

void cold_map_insert(cold_map_t *m, cold_map_node_t *node)
{
    KVM_ASSERT(!cold_map_find(m, &node->op));
    if (m->n >= m->nb)
        map_grow(m);
    size_t s = map_slot(m, &node->op);
    node->hnext = m->b[s];
    m->b[s] = node;
    m->n++;
}

cold_map_node_t *cold_map_remove(cold_map_t *m, const cold_opid_t *op)
{
    cold_map_node_t **pp = &m->b[map_slot(m, op)];
    for (; *pp; pp = &(*pp)->hnext) {
        if (memcmp((*pp)->op.b, op->b, COLD_OPID_LEN) == 0) {
            cold_map_node_t *n = *pp;
            *pp = n->hnext;
            n->hnext = NULL;
            m->n--;
            return n;
        }
    }
    return NULL;
}

void cold_map_each(const cold_map_t *m, void (*fn)(cold_map_node_t *n, void *arg), void *arg)
{
    for (size_t i = 0; i < m->nb; i++)
        for (cold_map_node_t *n = m->b[i]; n; n = n->hnext)
            fn(n, arg);
}

/* ---- open ---------------------------------------------------------------------------------- */

static int validate_root(const cold_backend_config_t *cfg, cold_backend_err_t *err)
{
    const char *root = cfg->root;
    if (!root || !root[0])
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: no root directory configured; set the cold target's "
                           "root to an existing writable directory");
    if (strlen(root) > PATH_MAX - 128)
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: root path is %zu bytes, at most %d are supported; "
                           "use a shorter path",
                           strlen(root), PATH_MAX - 128);
    struct stat st;
    if (stat(root, &st) != 0) {
        int e = errno;
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: root %s: %s (errno %d); create the directory (and "
                           "mount the device) before starting, or fix the configured root",
                           root, strerror(e), e);
    }
    if (!S_ISDIR(st.st_mode))
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: root %s is not a directory; point the cold target at "
                           "a directory on the device",
                           root);
    /* Writable for real (access() ignores read-only mounts for root users' purposes). */
    char probe[PATH_MAX];
    snprintf(probe, sizeof(probe), "%s/.kvmesh-probe.%ld", root, (long)getpid());
    int fd = open(probe, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        unlink(probe);
        fd = open(probe, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        int e = errno;
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: root %s is not writable: creating %s failed: %s "
                           "(errno %d); %s",
                           root, probe, strerror(e), e, cold_errno_hint(e));
    }
    close(fd);
    unlink(probe);

    if (cfg->capacity_bytes == 0)
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: capacity of %s is 0; configure the bytes the cold "
                           "tier may use on this device",
                           root);
    struct statvfs vfs;
    if (statvfs(root, &vfs) != 0) {
        int e = errno;
        return cold_seterr(err, KVMESH_ECONFIG, "cold backend: statvfs %s: %s (errno %d); %s", root,
                           strerror(e), e, cold_errno_hint(e));
    }
    uint64_t fs_bytes = (uint64_t)vfs.f_blocks * (uint64_t)vfs.f_frsize;
    if (cfg->capacity_bytes > fs_bytes)
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: capacity %llu bytes is more than the filesystem of %s "
                           "holds (%llu bytes); lower the capacity",
                           (unsigned long long)cfg->capacity_bytes, root,
                           (unsigned long long)fs_bytes);
    return 0;
}

int cold_backend_open(const cold_backend_config_t *cfg, cold_backend_t *out,
                      cold_backend_err_t *err)
{
    if (err)
        err->msg[0] = 0;
    if (!cfg || !out)
        return cold_seterr(err, KVMESH_EINVAL, "cold backend: open without config or output");
    out->ops = NULL;
    out->be = NULL;
    if (cfg->kind != COLD_BACKEND_LOCALDIR && cfg->kind != COLD_BACKEND_EXTENT)
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: kind %d is not a file backend; use localdir or extent",
                           (int)cfg->kind);
    int rc = validate_root(cfg, err);
    if (rc == 0 && cfg->require_nfs)
        rc = cold_nfs_check(cfg->root, NULL, err);
    if (rc != 0)
        return rc;
    if (cfg->kind == COLD_BACKEND_LOCALDIR)
        return cold_localdir_open(cfg, out, err);
    if (cfg->segment_bytes != 0 && cfg->segment_bytes < COLD_EXTENT_MIN_SEGMENT_BYTES)
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: segment size %llu is below the minimum %llu bytes; "
                           "raise it (or 0 for the default)",
                           (unsigned long long)cfg->segment_bytes,
                           (unsigned long long)COLD_EXTENT_MIN_SEGMENT_BYTES);
    if (cfg->io_mode != COLD_IO_AUTO && cfg->io_mode != COLD_IO_URING &&
        cfg->io_mode != COLD_IO_BUFFERED)
        return cold_seterr(err, KVMESH_ECONFIG, "cold backend: unknown I/O mode %d",
                           (int)cfg->io_mode);
    return cold_extent_open(cfg, out, err);
}

void cold_backend_close(cold_backend_t *b)
{
    if (!b || !b->ops)
        return;
    b->ops->close(b->be);
    b->ops = NULL;
    b->be = NULL;
}

const char *cold_backend_io_name(const cold_backend_t *b)
{
    if (!b || !b->ops)
        return "none";
    if (b->ops->kind == COLD_BACKEND_EXTENT)
        return cold_extent_io_name(b->be);
    return "file";
}
