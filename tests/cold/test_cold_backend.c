// SPDX-License-Identifier: Apache-2.0
/*
 * test_cold_backend.c — the file cold backends on real files (ctest cold_backend): LocalDir,
 * ExtentStore with io_uring and ExtentStore buffered each run every case. Round trips from 1 B
 * to 64 MiB and odd sizes (single and multi-iovec puts, get and get_batch), idempotent put
 * (same locator, no second copy on disk), idempotent delete, ENOSPC at capacity, a flipped
 * payload byte -> KVMESH_ECHECKSUM and a flipped header byte / truncated file ->
 * KVMESH_ECORRUPT with the buffer cleared, find() and usage after reopen, configuration
 * validation messages, and ExtentStore cleaning and journal compaction.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cold/extent.h"
#include "cold/localdir.h"
#include "cold_testutil.h"
#include "core/hash.h"

typedef struct fx {
    const cold_variant_t *v;
    char root[PATH_MAX];
    cold_backend_t b;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    f->v = *state;
    ct_mkroot(f->root, sizeof(f->root), f->v->name);
    cold_backend_err_t err;
    int rc = ct_open(f->v, f->root, 1ull << 32, 1ull << 20, &f->b, &err);
    if (rc != 0) {
        fprintf(stderr, "open %s: %s\n", f->v->name, err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    cold_backend_close(&f->b);
    ct_rmroot(f->root);
    free(f);
    return 0;
}

static void reopen(fx_t *f, uint64_t cap)
{
    cold_backend_close(&f->b);
    cold_backend_err_t err;
    int rc = ct_open(f->v, f->root, cap, 1ull << 20, &f->b, &err);
    if (rc != 0)
        fprintf(stderr, "reopen: %s\n", err.msg);
    assert_int_equal(rc, 0);
}

static void check_get(fx_t *f, const cold_locator_t *loc, const uint8_t *want, uint64_t len)
{
    uint8_t *got = malloc(len ? len : 1);
    cold_backend_err_t err;
    int rc = f->b.ops->get(f->b.be, loc, len, kvm_checksum(want, len), got, &err);
    if (rc != 0)
        fprintf(stderr, "get %llu: %s\n", (unsigned long long)len, err.msg);
    assert_int_equal(rc, 0);
    assert_memory_equal(got, want, len);
    free(got);
}

static void test_round_trips(void **state)
{
    fx_t *f = *state;
    static const uint64_t sizes[] = {0,        1,        7,    63,   64,    65,     4031,
                                     4032,     4095,     4096, 4097, 65537, 999983, (1u << 20) + 1,
                                     3u << 20, 64u << 20};
    uint64_t total = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t len = sizes[i];
        uint8_t *p = malloc(len ? len : 1);
        ct_fill(p, len, i + 1);
        cold_locator_t loc;
        cold_backend_err_t err;
        int rc = ct_put(&f->b, i + 1, p, len, &loc, &err);
        if (rc != 0)
            fprintf(stderr, "put %llu: %s\n", (unsigned long long)len, err.msg);
        assert_int_equal(rc, 0);
        assert_true(loc.len > 0 && loc.len <= COLD_LOCATOR_MAX);
        check_get(f, &loc, p, len);
        cold_locator_t found;
        cold_opid_t op = ct_op(i + 1);
        assert_int_equal(f->b.ops->find(f->b.be, &op, &found, NULL), 0);
        assert_int_equal(cold_locator_fingerprint(&found), cold_locator_fingerprint(&loc));
        total += len;
        free(p);
    }
    cold_backend_stat_t st;
    assert_int_equal(f->b.ops->stat(f->b.be, &st), 0);
    assert_int_equal(st.used_bytes, total);
    assert_int_equal(st.objects, sizeof(sizes) / sizeof(sizes[0]));
    assert_true(st.healthy);
    /* after reopen: the same objects, the same bytes, usage rebuilt from the files */
    reopen(f, 1ull << 32);
    cold_backend_stat_t st2;
    assert_int_equal(f->b.ops->stat(f->b.be, &st2), 0);
    assert_int_equal(st2.used_bytes, total);
    assert_int_equal(st2.objects, st.objects);
    assert_int_equal(st2.file_bytes, ct_file_bytes(f->root));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t len = sizes[i];
        uint8_t *p = malloc(len ? len : 1);
        ct_fill(p, len, i + 1);
        cold_locator_t loc;
        cold_opid_t op = ct_op(i + 1);
        assert_int_equal(f->b.ops->find(f->b.be, &op, &loc, NULL), 0);
        check_get(f, &loc, p, len);
        free(p);
    }
}

static void test_iovecs_and_batch(void **state)
{
    fx_t *f = *state;
    enum { N = 12 };
    uint8_t *bufs[N], *outs[N];
    uint64_t lens[N];
    cold_read_t reads[N + 1];
    for (int i = 0; i < N; i++) {
        lens[i] = (uint64_t)(i * 37777 + i * i * 13 + 1);
        bufs[i] = malloc(lens[i]);
        outs[i] = malloc(lens[i]);
        ct_fill(bufs[i], lens[i], 100 + i);
        /* split the payload into up to 20 iovecs of uneven sizes (some empty) */
        struct iovec v[20];
        int nv = 0;
        uint64_t at = 0;
        for (; nv < 19 && at < lens[i]; nv++) {
            uint64_t piece = KVM_MIN(lens[i] - at, (uint64_t)(nv * 5003 % 70001));
            v[nv] = (struct iovec){.iov_base = bufs[i] + at, .iov_len = piece};
            at += piece;
        }
        v[nv++] = (struct iovec){.iov_base = bufs[i] + at, .iov_len = lens[i] - at};
        cold_opid_t op = ct_op(500 + i);
        cold_backend_err_t err;
        int rc = f->b.ops->put(f->b.be, &op, v, nv, lens[i], kvm_checksum(bufs[i], lens[i]),
                               &reads[i].loc, &err);
        if (rc != 0)
            fprintf(stderr, "put: %s\n", err.msg);
        assert_int_equal(rc, 0);
        reads[i].len = lens[i];
        reads[i].checksum = kvm_checksum(bufs[i], lens[i]);
        reads[i].buf = outs[i];
        reads[i].rc = 12345;
    }
    /* one unknown locator in the batch answers ENOENT without failing the others */
    uint8_t spare[16];
    reads[N] = reads[0];
    reads[N].buf = spare;
    reads[N].len = sizeof(spare);
    {
        cold_opid_t op = ct_op(999999);
        uint8_t tmp[16] = {0};
        cold_locator_t l;
        assert_int_equal(ct_put(&f->b, 999999, tmp, sizeof(tmp), &l, NULL), 0);
        reads[N].loc = l;
        reads[N].checksum = kvm_checksum(tmp, sizeof(tmp));
        assert_int_equal(f->b.ops->del(f->b.be, &l, NULL), 0);
        assert_int_equal(f->b.ops->find(f->b.be, &op, &l, NULL), KVMESH_ENOENT);
    }
    assert_int_equal(f->b.ops->get_batch(f->b.be, reads, N + 1, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(reads[i].rc, 0);
        assert_memory_equal(outs[i], bufs[i], lens[i]);
        free(bufs[i]);
        free(outs[i]);
    }
    assert_int_equal(reads[N].rc, KVMESH_ENOENT);
}

static void test_idempotent(void **state)
{
    fx_t *f = *state;
    uint8_t p[10000];
    ct_fill(p, sizeof(p), 7);
    cold_locator_t a, b;
    assert_int_equal(ct_put(&f->b, 1, p, sizeof(p), &a, NULL), 0);
    cold_backend_stat_t s1, s2;
    f->b.ops->stat(f->b.be, &s1);
    uint64_t disk1 = ct_file_bytes(f->root);
    assert_int_equal(ct_put(&f->b, 1, p, sizeof(p), &b, NULL), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.b, b.b, a.len);
    f->b.ops->stat(f->b.be, &s2);
    assert_int_equal(s1.used_bytes, s2.used_bytes);
    assert_int_equal(s1.objects, s2.objects);
    assert_int_equal(disk1, ct_file_bytes(f->root)); /* no second copy */
    /* the same id with other bytes is refused, the first payload stays */
    uint8_t q[10000];
    ct_fill(q, sizeof(q), 8);
    cold_backend_err_t err;
    assert_int_equal(ct_put(&f->b, 1, q, sizeof(q), &b, &err), KVMESH_EEXIST);
    assert_non_null(strstr(err.msg, "must not be reused"));
    check_get(f, &a, p, sizeof(p));
    /* delete is idempotent; a deleted payload is gone */
    assert_int_equal(f->b.ops->del(f->b.be, &a, NULL), 0);
    assert_int_equal(f->b.ops->del(f->b.be, &a, NULL), 0);
    uint8_t out[10000];
    assert_int_equal(f->b.ops->get(f->b.be, &a, sizeof(p), kvm_checksum(p, sizeof(p)), out, NULL),
                     KVMESH_ENOENT);
    cold_opid_t op = ct_op(1);
    assert_int_equal(f->b.ops->find(f->b.be, &op, &b, NULL), KVMESH_ENOENT);
    f->b.ops->stat(f->b.be, &s2);
    assert_int_equal(s2.used_bytes, 0);
    assert_int_equal(s2.objects, 0);
    reopen(f, 1ull << 32);
    assert_int_equal(f->b.ops->find(f->b.be, &op, &b, NULL), KVMESH_ENOENT);
    assert_int_equal(f->b.ops->del(f->b.be, &a, NULL), 0);
    /* a put after delete and reopen works again */
    assert_int_equal(ct_put(&f->b, 1, p, sizeof(p), &b, NULL), 0);
    check_get(f, &b, p, sizeof(p));
}

static void test_enospc(void **state)
{
    fx_t *f = *state;
    reopen(f, 100000);
    uint8_t p[30000];
    ct_fill(p, sizeof(p), 3);
    cold_locator_t l[4];
    for (int i = 0; i < 3; i++)
        assert_int_equal(ct_put(&f->b, 10 + i, p, sizeof(p), &l[i], NULL), 0);
    cold_backend_err_t err;
    assert_int_equal(ct_put(&f->b, 20, p, sizeof(p), &l[3], &err), KVMESH_ENOSPC);
    assert_non_null(strstr(err.msg, "full"));
    assert_non_null(strstr(err.msg, f->root));
    /* 10000 bytes still fit exactly */
    assert_int_equal(ct_put(&f->b, 21, p, 10000, &l[3], NULL), 0);
    assert_int_equal(ct_put(&f->b, 22, p, 1, &l[3], NULL), KVMESH_ENOSPC);
    /* deleting frees room */
    assert_int_equal(f->b.ops->del(f->b.be, &l[0], NULL), 0);
    assert_int_equal(ct_put(&f->b, 23, p, sizeof(p), &l[0], NULL), 0);
}

/* Flips one byte of the file holding the payload at `at` bytes past its header start. */
static void payload_file(fx_t *f, const cold_locator_t *loc, char *path, uint64_t *base)
{
    if (f->v->kind == COLD_BACKEND_LOCALDIR) {
        cold_opid_t op;
        assert_int_equal(cold_ld_loc_decode(loc, &op), 0);
        char hex[33];
        for (int i = 0; i < 16; i++)
            sprintf(hex + 2 * i, "%02x", op.b[i]);
        snprintf(path, PATH_MAX + 64, "%s/ld/%02x/%s.obj", f->root, op.b[0], hex);
        *base = 0;
    } else {
        cold_ext_loc_t l;
        assert_int_equal(cold_ext_loc_decode(loc, &l), 0);
        snprintf(path, PATH_MAX + 64, "%s/ext/seg-%08x.dat", f->root, l.seg);
        *base = l.off;
    }
}

static void flip(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, (off_t)off), 1);
    c ^= 0x20;
    assert_int_equal(pwrite(fd, &c, 1, (off_t)off), 1);
    close(fd);
}

static void test_corruption(void **state)
{
    fx_t *f = *state;
    enum { LEN = 50000 };
    uint8_t p[LEN], out[LEN];
    ct_fill(p, LEN, 11);
    uint64_t sum = kvm_checksum(p, LEN);
    cold_locator_t a, b, c;
    assert_int_equal(ct_put(&f->b, 1, p, LEN, &a, NULL), 0);
    assert_int_equal(ct_put(&f->b, 2, p, LEN, &b, NULL), 0);
    assert_int_equal(ct_put(&f->b, 3, p, LEN, &c, NULL), 0);
    char path[PATH_MAX + 64];
    uint64_t base;
    cold_backend_err_t err;

    /* a flipped payload byte: ECHECKSUM, the buffer holds no payload bytes */
    payload_file(f, &a, path, &base);
    flip(path, base + 64 + 12345);
    memset(out, 0xAB, LEN);
    assert_int_equal(f->b.ops->get(f->b.be, &a, LEN, sum, out, &err), KVMESH_ECHECKSUM);
    assert_non_null(strstr(err.msg, path));
    for (int i = 0; i < LEN; i++)
        assert_int_equal(out[i], 0);
    /* in a batch too */
    cold_read_t r = {.loc = a, .len = LEN, .checksum = sum, .buf = out};
    assert_int_equal(f->b.ops->get_batch(f->b.be, &r, 1, NULL), 0);
    assert_int_equal(r.rc, KVMESH_ECHECKSUM);

    /* a flipped header byte: ECORRUPT */
    payload_file(f, &b, path, &base);
    flip(path, base + 20);
    assert_int_equal(f->b.ops->get(f->b.be, &b, LEN, sum, out, &err), KVMESH_ECORRUPT);
    assert_non_null(strstr(err.msg, path));

    /* the wrong expected length or checksum: ECORRUPT / ECHECKSUM */
    assert_int_equal(f->b.ops->get(f->b.be, &c, LEN - 1, sum, out, NULL), KVMESH_ECORRUPT);
    assert_int_equal(f->b.ops->get(f->b.be, &c, LEN, sum ^ 1, out, NULL), KVMESH_ECHECKSUM);
    check_get(f, &c, p, LEN);

    /* a truncated file: ECORRUPT (LocalDir: the object file; ExtentStore: the segment ends
     * inside the last extent) */
    payload_file(f, &c, path, &base);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 100), 0);
    memset(out, 0xAB, LEN);
    assert_int_equal(f->b.ops->get(f->b.be, &c, LEN, sum, out, &err), KVMESH_ECORRUPT);
    assert_non_null(strstr(err.msg, "truncated"));
    for (int i = 0; i < LEN; i++)
        assert_int_equal(out[i], 0);
}

static void test_config_errors(void **state)
{
    (void)state;
    char root[PATH_MAX];
    ct_mkroot(root, sizeof(root), "cfg");
    cold_backend_t b;
    cold_backend_err_t err;
    for (size_t k = 0; k < 2; k++) {
        const cold_variant_t *v = &COLD_VARIANTS[k];
        char missing[PATH_MAX + 16];
        snprintf(missing, sizeof(missing), "%s/nope", root);
        assert_int_equal(ct_open(v, missing, 1 << 20, 0, &b, &err), KVMESH_ECONFIG);
        assert_non_null(strstr(err.msg, missing));
        assert_non_null(strstr(err.msg, "errno 2"));
        assert_non_null(strstr(err.msg, "create the directory"));

        char file[PATH_MAX + 16];
        snprintf(file, sizeof(file), "%s/afile", root);
        FILE *fp = fopen(file, "w");
        fclose(fp);
        assert_int_equal(ct_open(v, file, 1 << 20, 0, &b, &err), KVMESH_ECONFIG);
        assert_non_null(strstr(err.msg, "not a directory"));

        /* sysfs refuses new files even to root */
        assert_int_equal(ct_open(v, "/sys", 1 << 20, 0, &b, &err), KVMESH_ECONFIG);
        assert_non_null(strstr(err.msg, "not writable"));
        assert_non_null(strstr(err.msg, "errno"));

        assert_int_equal(ct_open(v, root, 0, 0, &b, &err), KVMESH_ECONFIG);
        assert_non_null(strstr(err.msg, "capacity"));
        assert_int_equal(ct_open(v, root, UINT64_MAX / 2, 0, &b, &err), KVMESH_ECONFIG);
        assert_non_null(strstr(err.msg, "more than the filesystem"));
    }
    assert_int_equal(ct_open(&COLD_VARIANTS[1], root, 1 << 20, 4096, &b, &err), KVMESH_ECONFIG);
    assert_non_null(strstr(err.msg, "segment size"));
    ct_rmroot(root);
}

/* ExtentStore: deletes make segments mostly dead; maintain() moves the live extents out in
 * bounded steps, removes the segments, keeps every live payload readable (also after reopen)
 * and brings file bytes down; a journal of many deletes is compacted. */
static void test_extent_cleaning(void **state)
{
    fx_t *f = *state;
    if (f->v->kind != COLD_BACKEND_EXTENT)
        return;
    enum { N = 400, LEN = 20000 };
    static cold_locator_t locs[N];
    uint8_t p[LEN];
    for (int i = 0; i < N; i++) {
        ct_fill(p, LEN, 1000 + i);
        assert_int_equal(ct_put(&f->b, 1000 + i, p, LEN, &locs[i], NULL), 0);
    }
    for (int i = 0; i < N; i++)
        if (i % 5 != 0)
            assert_int_equal(f->b.ops->del(f->b.be, &locs[i], NULL), 0);
    cold_backend_stat_t before, after;
    f->b.ops->stat(f->b.be, &before);
    assert_int_equal(before.used_bytes, (uint64_t)(N / 5) * LEN);
    int steps = 0;
    int64_t w;
    cold_backend_err_t err;
    while ((w = f->b.ops->maintain(f->b.be, 256 << 10, &err)) > 0) {
        assert_true(steps++ < 1000);
        /* bounded: one step moves at most the budget plus one extent */
        assert_true(w <= (256 << 10) + 24576 || w > (64 << 10) /* a journal compaction */);
    }
    assert_int_equal(w, 0);
    f->b.ops->stat(f->b.be, &after);
    assert_int_equal(after.used_bytes, before.used_bytes);
    assert_true(after.file_bytes < before.file_bytes / 2);
    assert_int_equal(after.file_bytes, ct_file_bytes(f->root));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < N; i += 5) {
            ct_fill(p, LEN, 1000 + i);
            check_get(f, &locs[i], p, LEN);
            cold_locator_t l;
            cold_opid_t op = ct_op(1000 + i);
            assert_int_equal(f->b.ops->find(f->b.be, &op, &l, NULL), 0);
            assert_memory_equal(l.b, locs[i].b, l.len); /* the locator survives moves */
        }
        reopen(f, 1ull << 32);
        f->b.ops->stat(f->b.be, &after);
        assert_int_equal(after.used_bytes, before.used_bytes);
        assert_int_equal(after.file_bytes, ct_file_bytes(f->root));
    }
}

static void test_extent_journal_compaction(void **state)
{
    fx_t *f = *state;
    if (f->v->kind != COLD_BACKEND_EXTENT)
        return;
    uint8_t p[1];
    ct_fill(p, 1, 5);
    cold_locator_t keep;
    assert_int_equal(ct_put(&f->b, 1, p, 1, &keep, NULL), 0);
    /* 700 put+delete pairs: about 112 KiB of journal describing one live extent */
    for (int i = 0; i < 700; i++) {
        cold_locator_t l;
        assert_int_equal(ct_put(&f->b, 10 + i, p, 1, &l, NULL), 0);
        assert_int_equal(f->b.ops->del(f->b.be, &l, NULL), 0);
    }
    char jp[PATH_MAX + 32];
    snprintf(jp, sizeof(jp), "%s/ext/journal.log", f->root);
    struct stat st;
    assert_int_equal(stat(jp, &st), 0);
    assert_true(st.st_size > (64 << 10));
    for (int i = 0; i < 100 && f->b.ops->maintain(f->b.be, 64 << 20, NULL) > 0; i++)
        ;
    assert_int_equal(stat(jp, &st), 0);
    assert_true(st.st_size < 4096);
    reopen(f, 1ull << 32);
    check_get(f, &keep, p, 1);
    cold_backend_stat_t s;
    f->b.ops->stat(f->b.be, &s);
    assert_int_equal(s.objects, 1);
    assert_int_equal(s.file_bytes, ct_file_bytes(f->root));
}

/* ExtentStore: a torn journal tail (a crash mid-append) is discarded at open. */
static void test_extent_torn_tail(void **state)
{
    fx_t *f = *state;
    if (f->v->kind != COLD_BACKEND_EXTENT)
        return;
    uint8_t p[3000];
    ct_fill(p, sizeof(p), 9);
    cold_locator_t a;
    assert_int_equal(ct_put(&f->b, 1, p, sizeof(p), &a, NULL), 0);
    cold_backend_close(&f->b);
    char jp[PATH_MAX + 32];
    snprintf(jp, sizeof(jp), "%s/ext/journal.log", f->root);
    struct stat st;
    assert_int_equal(stat(jp, &st), 0);
    FILE *fp = fopen(jp, "ab");
    fwrite("KVJR\x01\x01\x40\x00garbage", 1, 15, fp); /* half a PUT record */
    fclose(fp);
    reopen(f, 1ull << 32);
    struct stat st2;
    assert_int_equal(stat(jp, &st2), 0);
    assert_int_equal(st2.st_size, st.st_size);
    check_get(f, &a, p, sizeof(p));
    cold_locator_t b;
    assert_int_equal(ct_put(&f->b, 2, p, sizeof(p), &b, NULL), 0);
    reopen(f, 1ull << 32);
    check_get(f, &b, p, sizeof(p));
}

/* A device error (here: the file size limit, EFBIG) fails the put with KVMESH_EIO and a
 * message naming the file and the errno, marks the backend unhealthy, and leaves nothing
 * readable behind; once the limit is gone a put works and the backend is healthy again. */
static void test_io_error(void **state)
{
    fx_t *f = *state;
    enum { LEN = 3 << 20 };
    uint8_t *p = malloc(LEN);
    ct_fill(p, LEN, 21);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1 << 20;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    cold_locator_t loc;
    cold_backend_err_t err;
    int rc = ct_put(&f->b, 77, p, LEN, &loc, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(rc, KVMESH_EIO);
    assert_non_null(strstr(err.msg, f->root));
    assert_non_null(strstr(err.msg, "errno 27"));
    assert_non_null(strstr(err.msg, "check the device"));
    cold_backend_stat_t st;
    f->b.ops->stat(f->b.be, &st);
    assert_false(st.healthy);
    assert_int_equal(st.used_bytes, 0);
    cold_opid_t op = ct_op(77);
    assert_int_equal(f->b.ops->find(f->b.be, &op, &loc, NULL), KVMESH_ENOENT);
    if (f->b.ops->maintain)
        assert_true(f->b.ops->maintain(f->b.be, 1 << 20, NULL) >= 0);
    assert_int_equal(ct_put(&f->b, 77, p, LEN, &loc, &err), 0);
    f->b.ops->stat(f->b.be, &st);
    assert_true(st.healthy);
    check_get(f, &loc, p, LEN);
    reopen(f, 1ull << 32);
    f->b.ops->stat(f->b.be, &st);
    assert_int_equal(st.used_bytes, LEN);
    assert_int_equal(st.file_bytes, ct_file_bytes(f->root)); /* no leftover temporary file */
    check_get(f, &loc, p, LEN);
    free(p);
}

/* Temporary files a crash left behind (LocalDir's .tmp.*, ExtentStore's journal.tmp and a
 * segment that was created but never journaled) are removed at open. */
static void test_stale_temp(void **state)
{
    fx_t *f = *state;
    uint8_t p[5000];
    ct_fill(p, sizeof(p), 31);
    cold_locator_t loc;
    assert_int_equal(ct_put(&f->b, 5, p, sizeof(p), &loc, NULL), 0);
    cold_backend_close(&f->b);
    char a[PATH_MAX + 64], b[PATH_MAX + 64];
    if (f->v->kind == COLD_BACKEND_LOCALDIR) {
        snprintf(a, sizeof(a), "%s/ld/00/.tmp.0123456789abcdef0123456789abcdef.1.2", f->root);
        snprintf(b, sizeof(b), "%s/ld/ff/.tmp.ffffffffffffffffffffffffffffffff.3.4", f->root);
    } else {
        snprintf(a, sizeof(a), "%s/ext/journal.tmp", f->root);
        snprintf(b, sizeof(b), "%s/ext/seg-0000ffff.dat", f->root);
    }
    for (int i = 0; i < 2; i++) {
        FILE *fp = fopen(i ? b : a, "wb");
        assert_non_null(fp);
        fwrite(p, 1, sizeof(p), fp);
        fclose(fp);
    }
    reopen(f, 1ull << 32);
    struct stat st;
    assert_int_equal(stat(a, &st), -1);
    assert_int_equal(stat(b, &st), -1);
    cold_backend_stat_t s2;
    f->b.ops->stat(f->b.be, &s2);
    assert_int_equal(s2.objects, 1);
    assert_int_equal(s2.file_bytes, ct_file_bytes(f->root));
    check_get(f, &loc, p, sizeof(p));
    /* the new segment id is past the removed one: a put still works */
    assert_int_equal(ct_put(&f->b, 6, p, sizeof(p), &loc, NULL), 0);
    check_get(f, &loc, p, sizeof(p));
}

static void test_io_name(void **state)
{
    fx_t *f = *state;
    const char *n = cold_backend_io_name(&f->b);
    if (f->v->kind == COLD_BACKEND_LOCALDIR)
        assert_string_equal(n, "file");
    else if (f->v->io == COLD_IO_BUFFERED)
        assert_string_equal(n, "buffered");
    else
        assert_true(strcmp(n, "io_uring") == 0 || strcmp(n, "buffered") == 0);
}

#define VARIANT_TESTS(i)                                                                           \
    cmocka_unit_test_prestate_setup_teardown(test_round_trips, setup, teardown,                    \
                                             (void *)&COLD_VARIANTS[i]),                           \
        cmocka_unit_test_prestate_setup_teardown(test_iovecs_and_batch, setup, teardown,           \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_idempotent, setup, teardown,                 \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_enospc, setup, teardown,                     \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_corruption, setup, teardown,                 \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_extent_cleaning, setup, teardown,            \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_extent_journal_compaction, setup, teardown,  \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_extent_torn_tail, setup, teardown,           \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_io_error, setup, teardown,                   \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_stale_temp, setup, teardown,                 \
                                                 (void *)&COLD_VARIANTS[i]),                       \
        cmocka_unit_test_prestate_setup_teardown(test_io_name, setup, teardown,                    \
                                                 (void *)&COLD_VARIANTS[i])

int main(void)
{
    const struct CMUnitTest tests[] = {
        VARIANT_TESTS(0),
        VARIANT_TESTS(1),
        VARIANT_TESTS(2),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
