/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_testutil.h — helpers of the cold backend tests: a fresh temporary root directory (and
 * its recursive removal), deterministic payloads, op ids from a counter, the byte count of the
 * files a backend left on disk, and opening a backend of a given kind and I/O mode.
 */
#ifndef KVMESH_TESTS_COLD_TESTUTIL_H
#define KVMESH_TESTS_COLD_TESTUTIL_H

#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cold/cold_backend.h"
#include "cold/cold_backend_open.h"
#include "core/util.h"

typedef struct cold_variant {
    const char *name;
    cold_backend_kind_t kind;
    cold_io_mode_t io;
} cold_variant_t;

static const cold_variant_t COLD_VARIANTS[] = {
    {"localdir", COLD_BACKEND_LOCALDIR, COLD_IO_AUTO},
    {"extent-uring", COLD_BACKEND_EXTENT, COLD_IO_AUTO},
    {"extent-buffered", COLD_BACKEND_EXTENT, COLD_IO_BUFFERED},
};

static inline void ct_mkroot(char *buf, size_t cap, const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/kvmesh-cold-%s-XXXXXX", t && t[0] ? t : "/tmp", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        abort();
    }
}

static inline int ct_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

static inline void ct_rmroot(const char *root)
{
    nftw(root, ct_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t ct_du_total;
static inline int ct_du_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)p;
    (void)f;
    if (flag == FTW_F)
        ct_du_total += (uint64_t)st->st_size;
    return 0;
}

/* Sum of the sizes of the regular files under dir. */
static inline uint64_t ct_file_bytes(const char *dir)
{
    ct_du_total = 0;
    nftw(dir, ct_du_one, 16, FTW_PHYS);
    return ct_du_total;
}

static inline cold_opid_t ct_op(uint64_t n)
{
    cold_opid_t op;
    memset(&op, 0, sizeof(op));
    uint64_t x = n * 0x9E3779B97F4A7C15ull + 0x1234;
    memcpy(op.b, &x, 8);
    memcpy(op.b + 8, &n, 8);
    return op;
}

static inline void ct_fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static inline int ct_open(const cold_variant_t *v, const char *root, uint64_t cap,
                          uint64_t seg_bytes, cold_backend_t *b, cold_backend_err_t *err)
{
    cold_backend_config_t c = {.kind = v->kind,
                               .root = root,
                               .capacity_bytes = cap,
                               .segment_bytes = seg_bytes,
                               .io_mode = v->io};
    return cold_backend_open(&c, b, err);
}

static inline int ct_put(cold_backend_t *b, uint64_t opn, const void *p, uint64_t len,
                         cold_locator_t *loc, cold_backend_err_t *err)
{
    cold_opid_t op = ct_op(opn);
    struct iovec v = {.iov_base = (void *)p, .iov_len = len};
    return b->ops->put(b->be, &op, &v, len ? 1 : 0, len, kvm_checksum(p, len), loc, err);
}

#endif
