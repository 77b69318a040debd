/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_common.h — the data-plane transport tests shared by itest_transport_tcp and
 * itest_transport_shm (each sets TPT_KIND before including this file). Real sockets on
 * 127.0.0.1 / abstract unix sockets, an owner engine and a client engine with separate
 * registries, and a forked owner process killed with SIGKILL.
 *
 * What they show: payload integrity (XXH3 end to end) for 1 B, 4 KiB, 1 MiB, 64 MiB and odd
 * sizes at odd offsets, single and batched; refusals of out-of-bounds, wrong, revoked, expired
 * and insufficient-rights requests with their reason, the owner's memory and service unaffected;
 * an owner killed mid-transfer makes pending requests fail promptly with KVMESH_ECONN.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "core/util.h"
#include "env/clock.h"
#include "net/seg.h"
#include "net/transport.h"

#define SEG_BYTES (160ull << 20)
#define BUF_BYTES ((64ull << 20) + 4096)

struct fixture {
    struct seg_registry *oreg, *creg;
    struct tp_engine *owner, *client;
    struct seg *seg;
    struct seg_grant g; /* READ|WRITE over the whole segment */
    struct tp_segment *rs;
    uint8_t *buf, *buf2;
};

static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)(x >> (i % 8));
}

static struct tp_config client_cfg(void)
{
    struct tp_config c = {
        .kind = TPT_KIND, .no_server = true, .conns_per_peer = 4, .io_timeout_ms = 30000};
    return c;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(seg_registry_new(&f->oreg), 0);
    assert_int_equal(seg_registry_new(&f->creg), 0);
    struct tp_config oc = {.kind = TP_AUTO};
    assert_int_equal(tp_engine_new(&oc, f->oreg, &f->owner), 0);
    struct tp_config cc = client_cfg();
    assert_int_equal(tp_engine_new(&cc, f->creg, &f->client), 0);
    assert_int_equal(seg_create(f->oreg, SEG_BYTES, 0, &f->seg), 0);
    assert_int_equal(
        seg_grant(f->oreg, f->seg->id, 0, f->seg->size, SEG_READ | SEG_WRITE, 0, &f->g), 0);
    assert_int_equal(
        tp_open_segment(f->client, tp_engine_address(f->owner), f->seg->id, f->g.token, &f->rs), 0);
    assert_int_equal(tp_segment_kind(f->rs), TPT_KIND);
    f->buf = malloc(BUF_BYTES);
    f->buf2 = malloc(BUF_BYTES);
    assert_non_null(f->buf);
    assert_non_null(f->buf2);
    assert_int_equal(tp_register_memory(f->client, f->buf, BUF_BYTES), 0);
    assert_int_equal(tp_register_memory(f->client, f->buf2, BUF_BYTES), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    tp_close_segment(f->rs);
    tp_engine_free(f->client);
    tp_engine_free(f->owner);
    seg_registry_free(f->creg);
    seg_registry_free(f->oreg);
    free(f->buf);
    free(f->buf2);
    free(f);
    return 0;
}

static int run1(struct fixture *f, enum tp_op op, void *local, uint64_t off, uint64_t len,
                uint64_t token, enum seg_reason *reason)
{
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, 1, &b), 0);
    struct tp_request r = {.op = op,
                           .local = local,
                           .length = len,
                           .segment = f->rs,
                           .remote_offset = off,
                           .token = token};
    assert_int_equal(tp_submit(b, &r, 1), 0);
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    int st = tp_status(b, 0, reason);
    tp_batch_free(b);
    return st;
}

static const uint64_t sizes[] = {
    1, 4096, 1u << 20, 64u << 20, 12345, (1u << 20) + 17, (3u << 20) + 1, 65537};

static void test_integrity_single(void **state)
{
    struct fixture *f = *state;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(sizes); i++) {
        uint64_t n = sizes[i], off = 4099 + i * 7;
        /* READ: owner's bytes land in the client's buffer */
        fill(f->seg->base + off, n, i + 1);
        XXH64_hash_t want = XXH3_64bits(f->seg->base + off, n);
        memset(f->buf, 0, n);
        assert_int_equal(run1(f, TP_READ, f->buf, off, n, f->g.token, NULL), 0);
        assert_true(XXH3_64bits(f->buf, n) == want);
        /* WRITE: client's bytes land in the owner's segment, neighbours untouched */
        uint64_t woff = (80ull << 20) + 3 + i;
        fill(f->buf2, n, 1000 + i);
        want = XXH3_64bits(f->buf2, n);
        f->seg->base[woff - 1] = 0xA5;
        f->seg->base[woff + n] = 0x5A;
        assert_int_equal(run1(f, TP_WRITE, f->buf2, woff, n, f->g.token, NULL), 0);
        assert_true(XXH3_64bits(f->seg->base + woff, n) == want);
        assert_int_equal(f->seg->base[woff - 1], 0xA5);
        assert_int_equal(f->seg->base[woff + n], 0x5A);
    }
}

static int cb_calls;
static void count_cb(struct tp_batch *b, void *arg)
{
    (void)b;
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void test_integrity_batch(void **state)
{
    struct fixture *f = *state;
    enum { N = 48 };
    struct tp_request r[N];
    uint64_t off = 0, loff = 0;
    XXH64_hash_t want[N];
    fill(f->seg->base, 40u << 20, 77);
    for (unsigned i = 0; i < N; i++) {
        uint64_t n = sizes[i % KVM_ARRAY_SIZE(sizes)];
        if (n > (4u << 20))
            n = (2u << 20) + i;
        r[i] = (struct tp_request){.op = (i % 3 == 2) ? TP_WRITE : TP_READ,
                                   .local = f->buf + loff,
                                   .length = n,
                                   .segment = f->rs,
                                   .remote_offset = off,
                                   .token = f->g.token};
        if (r[i].op == TP_WRITE) {
            r[i].remote_offset += 100u << 20; /* write elsewhere, read regions stay intact */
            fill(f->buf + loff, n, 500 + i);
            want[i] = XXH3_64bits(f->buf + loff, n);
        } else {
            want[i] = XXH3_64bits(f->seg->base + off, n);
        }
        off += n + 13;
        loff += n + 5;
    }
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, N, &b), 0);
    cb_calls = 0;
    tp_batch_set_callback(b, count_cb, &cb_calls);
    assert_int_equal(tp_submit(b, r, N / 2), 0);
    assert_int_equal(tp_submit(b, r + N / 2, N - N / 2), 0);
    assert_int_equal(tp_batch_count(b), N);
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    assert_int_equal(tp_batch_result(b), 0);
    assert_true(__atomic_load_n(&cb_calls, __ATOMIC_SEQ_CST) >= 1);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(tp_status(b, i, NULL), 0);
        const uint8_t *p =
            r[i].op == TP_READ ? (uint8_t *)r[i].local : f->seg->base + r[i].remote_offset;
        assert_true(XXH3_64bits(p, r[i].length) == want[i]);
    }
    /* a full batch refuses more */
    assert_int_equal(tp_submit(b, r, 1), KVMESH_ETOOBIG);
    tp_batch_free(b);
}

/* Many small requests in one batch (over tcp: pipelined windows on each connection, the owner's
 * responses gathered), READs and WRITEs mixed with refused ones (wrong token) and with a few
 * larger than a window item: each request's status and bytes are its own, a refused READ leaves
 * its buffer alone and a refused WRITE the owner's bytes, and the streams stay in step. */
static void test_small_mixed_batch(void **state)
{
    struct fixture *f = *state;
    enum { N = 1000 };
    static const uint64_t lens[] = {4096, 1, 65536, 100, 65537, 4096, 333};
    struct tp_request *r = calloc(N, sizeof(*r));
    XXH64_hash_t *want = calloc(N, sizeof(*want));
    assert_non_null(r);
    assert_non_null(want);
    fill(f->seg->base, 40u << 20, 91);
    fill(f->seg->base + (100u << 20), 40u << 20, 92);
    uint64_t off = 0, loff = 0;
    for (unsigned i = 0; i < N; i++) {
        uint64_t n = lens[i % KVM_ARRAY_SIZE(lens)];
        bool bad = i % 11 == 5;
        r[i] = (struct tp_request){.op = i % 2 ? TP_WRITE : TP_READ,
                                   .local = f->buf + loff,
                                   .length = n,
                                   .segment = f->rs,
                                   .remote_offset = off + (i % 2 ? 100u << 20 : 0),
                                   .token = bad ? f->g.token ^ 0x5a5a : f->g.token};
        fill(f->buf + loff, n, 1000 + i);
        if (r[i].op == TP_WRITE && !bad)
            want[i] = XXH3_64bits(f->buf + loff, n); /* lands in the segment */
        else if (r[i].op == TP_WRITE)
            want[i] = XXH3_64bits(f->seg->base + r[i].remote_offset, n); /* stays */
        else if (!bad)
            want[i] = XXH3_64bits(f->seg->base + off, n); /* lands in the buffer */
        else
            want[i] = XXH3_64bits(f->buf + loff, n); /* stays */
        off += n + 3;
        loff += n + 7;
    }
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, N, &b), 0);
    for (unsigned i = 0; i < N; i += 100)
        assert_int_equal(tp_submit(b, r + i, 100), 0);
    assert_int_equal(tp_batch_wait(b, 30000), 0);
    for (unsigned i = 0; i < N; i++) {
        enum seg_reason why = SEG_OK;
        bool bad = i % 11 == 5;
        assert_int_equal(tp_status(b, i, &why), bad ? KVMESH_EAUTH : 0);
        if (bad)
            assert_int_equal(why, SEG_R_NOGRANT);
        const uint8_t *p =
            r[i].op == TP_WRITE ? f->seg->base + r[i].remote_offset : (const uint8_t *)r[i].local;
        assert_true(XXH3_64bits(p, r[i].length) == want[i]);
    }
    tp_batch_free(b);
    /* still in step: a READ after it all */
    assert_int_equal(run1(f, TP_READ, f->buf2, 4096, 8192, f->g.token, NULL), 0);
    assert_true(XXH3_64bits(f->buf2, 8192) == XXH3_64bits(f->seg->base + 4096, 8192));
    free(r);
    free(want);
}

static void test_refusals(void **state)
{
    struct fixture *f = *state;
    struct seg_registry *o = f->oreg;
    uint64_t id = f->seg->id;
    struct seg_grant ro, small, shortlived;
    assert_int_equal(seg_grant(o, id, 1u << 20, 1u << 20, SEG_READ, 0, &ro), 0);
    assert_int_equal(seg_grant(o, id, 2u << 20, 8192, SEG_READ | SEG_WRITE, 0, &small), 0);
    assert_int_equal(seg_grant(o, id, 0, 4096, SEG_READ | SEG_WRITE, 150ull * 1000000, &shortlived),
                     0);
    fill(f->seg->base, 8u << 20, 3);
    XXH64_hash_t before = XXH3_64bits(f->seg->base, 8u << 20);
    enum seg_reason why;

    /* within the small grant: fine */
    assert_int_equal(run1(f, TP_WRITE, f->buf, 2u << 20, 8192, small.token, NULL), 0);
    fill(f->seg->base + (2u << 20), 8192, 3 + 999); /* restore a known pattern */
    fill(f->seg->base, 8u << 20, 3);
    /* past the end of the grant */
    assert_int_equal(run1(f, TP_WRITE, f->buf, (2u << 20) + 4096, 8193, small.token, &why),
                     KVMESH_ERANGE);
    assert_int_equal(why, SEG_R_RANGE);
    assert_int_equal(run1(f, TP_READ, f->buf, (2u << 20) - 1, 2, small.token, &why), KVMESH_ERANGE);
    assert_int_equal(why, SEG_R_RANGE);
    /* past the end of the segment, with the whole-segment grant */
    assert_int_equal(run1(f, TP_READ, f->buf, f->seg->size - 10, 11, f->g.token, &why),
                     KVMESH_ERANGE);
    assert_int_equal(why, SEG_R_RANGE);
    assert_int_equal(run1(f, TP_READ, f->buf, UINT64_MAX - 5, 100, f->g.token, &why),
                     KVMESH_ERANGE);
    /* wrong token */
    assert_int_equal(run1(f, TP_READ, f->buf, 0, 4096, f->g.token ^ 0x1234, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_NOGRANT);
    /* rights: READ-only grant used for WRITE */
    assert_int_equal(run1(f, TP_WRITE, f->buf, 1u << 20, 4096, ro.token, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_RIGHTS);
    assert_int_equal(run1(f, TP_READ, f->buf, 1u << 20, 4096, ro.token, NULL), 0);
    /* revoked */
    assert_int_equal(seg_revoke(o, ro.token), 0);
    usleep(150 * 1000); /* shm clients re-ask the owner after TP_SHM_GRANT_RECHECK */
    assert_int_equal(run1(f, TP_READ, f->buf, 1u << 20, 4096, ro.token, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_NOGRANT);
    /* expired */
    assert_int_equal(run1(f, TP_READ, f->buf, 0, 4096, shortlived.token, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_EXPIRED);
    /* a batch mixing good and bad requests: per-request status */
    struct tp_request mix[3] = {
        {.op = TP_READ, .local = f->buf, .length = 4096, .segment = f->rs, .token = f->g.token},
        {.op = TP_WRITE,
         .local = f->buf2 + 8192,
         .length = 4096,
         .segment = f->rs,
         .remote_offset = 0,
         .token = 42},
        {.op = TP_READ,
         .local = f->buf2,
         .length = 100,
         .segment = f->rs,
         .remote_offset = 7,
         .token = f->g.token}};
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, 3, &b), 0);
    assert_int_equal(tp_submit(b, mix, 3), 0);
    assert_int_equal(tp_batch_wait(b, 10000), 0);
    assert_int_equal(tp_status(b, 0, NULL), 0);
    assert_int_equal(tp_status(b, 1, &why), KVMESH_EAUTH);
    assert_int_equal(tp_status(b, 2, NULL), 0);
    assert_int_equal(tp_batch_result(b), KVMESH_EAUTH);
    tp_batch_free(b);
    /* unregistered local memory is refused before anything moves */
    uint8_t stackbuf[64];
    assert_int_equal(run1(f, TP_READ, stackbuf, 0, sizeof(stackbuf), f->g.token, NULL),
                     KVMESH_EINVAL);
    /* the owner is unaffected: its bytes are the same and it still serves */
    assert_true(XXH3_64bits(f->seg->base, 8u << 20) == before);
    assert_int_equal(run1(f, TP_READ, f->buf, 4096, 1u << 20, f->g.token, NULL), 0);
    assert_true(XXH3_64bits(f->buf, 1u << 20) == XXH3_64bits(f->seg->base + 4096, 1u << 20));
}

static void test_cancel(void **state)
{
    struct fixture *f = *state;
    enum { N = 64 };
    struct tp_request r[N];
    for (unsigned i = 0; i < N; i++)
        r[i] = (struct tp_request){.op = TP_READ,
                                   .local = f->buf,
                                   .length = 1u << 20,
                                   .segment = f->rs,
                                   .remote_offset = 0,
                                   .token = f->g.token};
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, N, &b), 0);
    tp_cancel(b);
    assert_int_equal(tp_submit(b, r, N), 0);
    assert_int_equal(tp_batch_wait(b, 10000), 0);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(tp_status(b, i, NULL), KVMESH_ECANCELED);
    tp_batch_free(b);
}

/* ---- a segment destroyed by its owner ------------------------------------------------------ */

static void test_destroyed_segment(void **state)
{
    struct fixture *f = *state;
    struct seg *s2;
    struct seg_grant g2;
    assert_int_equal(seg_create(f->oreg, 1u << 20, 0, &s2), 0);
    assert_int_equal(seg_grant(f->oreg, s2->id, 0, s2->size, SEG_READ | SEG_WRITE, 0, &g2), 0);
    struct tp_segment *rs2;
    /* shm needs a valid grant to be handed the fd; tcp checks on every request */
    if (TPT_KIND == TP_SHM)
        assert_int_equal(
            tp_open_segment(f->client, tp_engine_address(f->owner), s2->id, g2.token ^ 1, &rs2),
            KVMESH_EAUTH);
    assert_int_equal(
        tp_open_segment(f->client, tp_engine_address(f->owner), s2->id, g2.token, &rs2), 0);
    memset(s2->base, 0x77, 4096);
    struct tp_segment *keep = f->rs;
    f->rs = rs2;
    assert_int_equal(run1(f, TP_READ, f->buf, 0, 4096, g2.token, NULL), 0);
    assert_int_equal(f->buf[4095], 0x77);
    uint64_t id2 = s2->id;
    assert_int_equal(seg_destroy(f->oreg, id2), 0);
    usleep(150 * 1000); /* shm clients re-ask the owner after TP_SHM_GRANT_RECHECK */
    enum seg_reason why;
    int st = run1(f, TP_WRITE, f->buf, 0, 4096, g2.token, &why);
    assert_int_equal(st, KVMESH_ENOENT);
    assert_int_equal(why, SEG_R_NOSEG);
    f->rs = keep;
    tp_close_segment(rs2);
    /* the other segment is still served */
    assert_int_equal(run1(f, TP_READ, f->buf, 0, 4096, f->g.token, NULL), 0);
}

/* ---- several application threads submitting at once -------------------------------------- */

struct submitter {
    struct fixture *f;
    unsigned id;
    int failures;
};

static void *submitter_main(void *arg)
{
    struct submitter *sm = arg;
    struct fixture *f = sm->f;
    enum { ROUNDS = 40, N = 4, PIECE = 256 << 10 };
    uint8_t *local = f->buf + (uint64_t)sm->id * N * PIECE;
    for (unsigned round = 0; round < ROUNDS; round++) {
        /* a fresh grant per round: the shm client asks the owner for every one of them */
        struct seg_grant g;
        uint64_t base = (uint64_t)((sm->id * ROUNDS + round) % 32) * N * PIECE;
        if (seg_grant(f->oreg, f->seg->id, base, N * PIECE, SEG_READ, 0, &g) != 0) {
            sm->failures++;
            continue;
        }
        struct tp_request r[N];
        for (unsigned i = 0; i < N; i++)
            r[i] = (struct tp_request){.op = TP_READ,
                                       .local = local + i * PIECE,
                                       .length = PIECE,
                                       .segment = f->rs,
                                       .remote_offset = base + i * PIECE,
                                       .token = g.token};
        struct tp_batch *b;
        if (tp_batch_new(f->client, N, &b) != 0) {
            sm->failures++;
            continue;
        }
        if (tp_submit(b, r, N) != 0 || tp_batch_wait(b, 20000) != 0 || tp_batch_result(b) != 0 ||
            XXH3_64bits(local, N * PIECE) != XXH3_64bits(f->seg->base + base, N * PIECE))
            sm->failures++;
        tp_batch_free(b);
        seg_revoke(f->oreg, g.token);
    }
    return NULL;
}

static void test_concurrent_submitters(void **state)
{
    struct fixture *f = *state;
    enum { T = 4 };
    fill(f->seg->base, 32u << 20, 21);
    struct submitter sm[T];
    pthread_t th[T];
    for (unsigned i = 0; i < T; i++) {
        sm[i] = (struct submitter){.f = f, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, submitter_main, &sm[i]), 0);
    }
    for (unsigned i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(sm[i].failures, 0);
    }
}

/* ---- allocation failures injected by count ------------------------------------------------- */

/* One whole session (owner, client, open, a batch of 3, teardown); every step may fail cleanly.
 * Returns 0 when everything succeeded and the data arrived intact. */
static int alloc_session(uint8_t *buf, size_t buflen)
{
    struct seg_registry *oreg = NULL, *creg = NULL;
    struct tp_engine *owner = NULL, *client = NULL;
    struct tp_segment *rs = NULL;
    struct tp_batch *b = NULL;
    struct seg *s;
    struct seg_grant g;
    int rc;
    if ((rc = seg_registry_new(&oreg)) || (rc = seg_registry_new(&creg)))
        goto out;
    struct tp_config oc = {0}, cc = client_cfg();
    if ((rc = tp_engine_new(&oc, oreg, &owner)) || (rc = tp_engine_new(&cc, creg, &client)))
        goto out;
    if ((rc = seg_create(oreg, buflen, 0, &s)) ||
        (rc = seg_grant(oreg, s->id, 0, buflen, SEG_READ | SEG_WRITE, 0, &g)))
        goto out;
    fill(s->base, buflen, 8);
    if ((rc = tp_open_segment(client, tp_engine_address(owner), s->id, g.token, &rs)) ||
        (rc = tp_register_memory(client, buf, buflen)) || (rc = tp_batch_new(client, 3, &b)))
        goto out;
    uint64_t third = buflen / 3;
    struct tp_request r[3];
    for (unsigned i = 0; i < 3; i++)
        r[i] = (struct tp_request){.op = TP_READ,
                                   .local = buf + i * third,
                                   .length = third,
                                   .segment = rs,
                                   .remote_offset = i * third,
                                   .token = g.token};
    if ((rc = tp_submit(b, r, 3)) || (rc = tp_batch_wait(b, 10000)) || (rc = tp_batch_result(b)))
        goto out;
    if (XXH3_64bits(buf, 3 * third) != XXH3_64bits(s->base, 3 * third))
        rc = KVMESH_ECHECKSUM;
out:
    tp_batch_free(b);
    tp_close_segment(rs);
    tp_engine_free(client);
    tp_engine_free(owner);
    seg_registry_free(creg);
    seg_registry_free(oreg);
    return rc;
}

static void test_alloc_faults(void **state)
{
    (void)state;
    size_t len = 3u << 20;
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    unsigned failed = 0, n;
    for (n = 1; n <= 200; n++) {
        seg_fault_alloc_after(n);
        int rc = alloc_session(buf, len);
        bool hit = !seg_fault_armed();
        seg_fault_alloc_after(0);
        if (!hit) { /* the session needed fewer than n allocations: all failure points seen */
            assert_int_equal(rc, 0);
            break;
        }
        if (rc != 0) {
            /* a failed allocation surfaces as ENOMEM, or as a lost connection when it hit a
             * server thread (the owner drops that connection) */
            assert_true(rc == KVMESH_ENOMEM || rc == KVMESH_ECONN);
            failed++;
        }
    }
    assert_true(n <= 200);
    assert_true(failed >= 5);
    assert_int_equal(alloc_session(buf, len), 0);
    free(buf);
}

/* ---- an owner process killed with SIGKILL mid-transfer -------------------------------------- */

static void child_owner(int wfd)
{
    struct seg_registry *reg;
    struct tp_engine *e;
    struct seg *s;
    struct seg_grant g;
    /* the segment is filled before the engine's threads exist, so the server threads are
     * ordered after the fill (ThreadSanitizer runs in this child too) */
    if (seg_registry_new(&reg) || seg_create(reg, 64ull << 20, 0, &s))
        _exit(3);
    memset(s->base, 0x3c, s->size);
    if (tp_engine_new(NULL, reg, &e) ||
        seg_grant(reg, s->id, 0, s->size, SEG_READ | SEG_WRITE, 0, &g))
        _exit(3);
    char line[TP_ADDR_MAX + 64];
    int n = snprintf(line, sizeof(line), "%llx %llx %s\n", (unsigned long long)s->id,
                     (unsigned long long)g.token, tp_engine_address(e));
    if (write(wfd, line, (size_t)n) != n)
        _exit(4);
    for (;;)
        pause();
}

struct killer {
    pid_t pid;
    uint64_t killed_at_ms;
};

static void *killer_main(void *arg)
{
    struct killer *k = arg;
    usleep(60 * 1000);
    k->killed_at_ms = env_clock_mono_ms();
    kill(k->pid, SIGKILL);
    return NULL;
}

static void test_owner_killed(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        child_owner(pfd[1]);
    }
    close(pfd[1]);
    char line[TP_ADDR_MAX + 64] = {0};
    size_t got = 0;
    while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
        ssize_t n = read(pfd[0], line + got, sizeof(line) - 1 - got);
        assert_true(n > 0);
        got += (size_t)n;
    }
    close(pfd[0]);
    unsigned long long sid, tok;
    char addr[TP_ADDR_MAX];
    assert_int_equal(sscanf(line, "%llx %llx %255s", &sid, &tok, addr), 3);

    struct seg_registry *reg;
    struct tp_engine *e;
    struct tp_segment *rs;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct tp_config cc = client_cfg();
    assert_int_equal(tp_engine_new(&cc, reg, &e), 0);
    assert_int_equal(tp_open_segment(e, addr, sid, tok, &rs), 0);
    uint8_t *buf = malloc(64u << 20);
    assert_non_null(buf);
    assert_int_equal(tp_register_memory(e, buf, 64u << 20), 0);
    /* one clean transfer first. READs stay in [0, 32 MiB) and WRITEs in [32, 64 MiB) of the
     * owner's segment: the owner's server threads then never READ a range that another thread
     * WRITEs later, an order ThreadSanitizer (in the forked owner) cannot see through sockets. */
    struct tp_batch *b;
    struct tp_request r = {
        .op = TP_READ, .local = buf, .length = 32u << 20, .segment = rs, .token = tok};
    assert_int_equal(tp_batch_new(e, 1, &b), 0);
    assert_int_equal(tp_submit(b, &r, 1), 0);
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    assert_int_equal(tp_status(b, 0, NULL), 0);
    assert_int_equal(buf[12345], 0x3c);
    tp_batch_free(b);

    struct killer k = {.pid = pid};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, killer_main, &k), 0);
    /* keep transfers going until they fail (bounded by count and time) */
    int failed = 0;
    uint64_t fail_ms = 0, start = env_clock_mono_ms();
    for (int round = 0; round < 100000 && !failed && env_clock_mono_ms() - start < 15000; round++) {
        enum { N = 8 };
        struct tp_request rr[N];
        for (unsigned i = 0; i < N; i++)
            rr[i] =
                (struct tp_request){.op = (i & 1) ? TP_WRITE : TP_READ,
                                    .local = buf + (i * (8u << 20)),
                                    .length = 8u << 20,
                                    .segment = rs,
                                    .remote_offset = (i & 1) * (32u << 20) + (i / 2) * (8u << 20),
                                    .token = tok};
        assert_int_equal(tp_batch_new(e, N, &b), 0);
        assert_int_equal(tp_submit(b, rr, N), 0);
        assert_int_equal(tp_batch_wait(b, 10000), 0); /* no hang */
        for (unsigned i = 0; i < N; i++) {
            int st = tp_status(b, i, NULL);
            if (st) {
                assert_true(st == KVMESH_ECONN || st == KVMESH_ECANCELED);
                failed = 1;
            }
        }
        tp_batch_free(b);
        if (failed)
            fail_ms = env_clock_mono_ms();
    }
    pthread_join(th, NULL);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
    assert_true(failed);
    assert_true(fail_ms >= k.killed_at_ms);
    /* promptly: well below the client's 30 s I/O timeout, with room for a loaded CI host */
    assert_true(fail_ms - k.killed_at_ms < 15000);
    /* later requests fail at once */
    assert_int_equal(tp_batch_new(e, 1, &b), 0);
    uint64_t t0 = env_clock_mono_ms();
    assert_int_equal(tp_submit(b, &r, 1), 0);
    assert_int_equal(tp_batch_wait(b, 5000), 0);
    assert_int_equal(tp_status(b, 0, NULL), KVMESH_ECONN);
    assert_true(env_clock_mono_ms() - t0 < 15000); /* at once, not after the 30 s I/O timeout */
    tp_batch_free(b);
    /* and reopening is refused cleanly (shm only: the dead owner's tcp port may already belong
     * to another process on this shared machine) */
    struct tp_segment *rs2 = NULL;
    if (TPT_KIND == TP_SHM)
        assert_int_equal(tp_open_segment(e, addr, sid, tok, &rs2), KVMESH_ECONN);
    tp_close_segment(rs);
    tp_engine_free(e);
    seg_registry_free(reg);
    free(buf);
}

static void test_engine_config(void **state)
{
    (void)state;
    struct seg_registry *reg;
    struct tp_engine *e;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct tp_config bad = {.kind = 7};
    assert_int_equal(tp_engine_new(&bad, reg, &e), KVMESH_ECONFIG);
    struct tp_config c = {.kind = TP_AUTO, .host_id = "another-host"};
    assert_int_equal(tp_engine_new(&c, reg, &e), 0);
    struct tp_segment *s = NULL;
    struct tp_engine *cl;
    struct tp_config cc = {.kind = TP_SHM, .no_server = true};
    assert_int_equal(tp_engine_new(&cc, reg, &cl), 0);
    /* shm forced towards another host is refused; auto picks tcp there */
    assert_int_equal(tp_open_segment(cl, tp_engine_address(e), 1, 1, &s), KVMESH_EINCOMPAT);
    tp_engine_free(cl);
    cc.kind = TP_AUTO;
    assert_int_equal(tp_engine_new(&cc, reg, &cl), 0);
    assert_int_equal(tp_open_segment(cl, tp_engine_address(e), 1, 1, &s), 0);
    assert_int_equal(tp_segment_kind(s), TP_TCP);
    tp_close_segment(s);
    assert_int_equal(tp_open_segment(cl, "garbage", 1, 1, &s), KVMESH_EINVAL);
    assert_int_equal(tp_open_segment(cl, "kvt1;host=x;tcp=1.2.3.4:99999", 1, 1, &s), KVMESH_EINVAL);
    tp_engine_free(cl);
    tp_engine_free(e);
    seg_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner_killed),
        cmocka_unit_test(test_engine_config),
        cmocka_unit_test_setup_teardown(test_integrity_single, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integrity_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_mixed_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_submitters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroyed_segment, setup, teardown),
        cmocka_unit_test(test_alloc_faults),
#ifdef TPT_EXTRA_TESTS
        TPT_EXTRA_TESTS
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
