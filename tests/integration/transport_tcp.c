/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_tcp.c — integration tests of the tcp data-plane transport (the shared body is in
 * transport_common.h), plus tcp-only checks of a raw, buggy peer: a malformed header closes
 * only that connection, a stalled or trickled request is cut (io_timeout_ms, exchange deadline),
 * and the owner keeps serving well-behaved clients throughout; and a fake owner trickling a
 * READ's payload fails the client's request at the exchange deadline. A batch of one request with
 * a deadline (tp_batch_set_deadline) runs on the submitting thread: the bytes and the checksum
 * are right, and a trickling owner fails it at the batch's deadline, inside tp_submit. Batches of
 * small requests in a steady state (a write grant per request, as the store's owners make for
 * put items) allocate nothing per request: chunks and grant entries are reused.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/hash.h"
#include "net/transport_wire.h"

static void test_raw_buggy_peer(void **state);
static void test_trickling_owner(void **state);
static void test_trickling_owner_batch_deadline(void **state);
static void test_lone_request_on_submitter(void **state);
static void test_steady_batches_allocate_nothing(void **state);
#define TPT_EXTRA_TESTS                                                                            \
    cmocka_unit_test(test_raw_buggy_peer), cmocka_unit_test(test_trickling_owner),                 \
        cmocka_unit_test(test_trickling_owner_batch_deadline),                                     \
        cmocka_unit_test_setup_teardown(test_lone_request_on_submitter, setup, teardown),          \
        cmocka_unit_test_setup_teardown(test_steady_batches_allocate_nothing, setup, teardown),

#define TPT_KIND TP_TCP
#include "transport_common.h"

static int raw_connect(const char *addr)
{
    const char *t = strstr(addr, "tcp=");
    assert_non_null(t);
    char ip[64];
    unsigned port;
    assert_int_equal(sscanf(t + 4, "%63[^:]:%u", ip, &port), 2);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void test_raw_buggy_peer(void **state)
{
    (void)state;
    struct seg_registry *reg;
    struct tp_engine *owner;
    struct seg *s;
    struct seg_grant g;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct tp_config oc = {.io_timeout_ms = 300};
    assert_int_equal(tp_engine_new(&oc, reg, &owner), 0);
    assert_int_equal(seg_create(reg, 1u << 20, 0, &s), 0);
    assert_int_equal(seg_grant(reg, s->id, 0, s->size, SEG_READ | SEG_WRITE, 0, &g), 0);
    fill(s->base, s->size, 5);
    XXH64_hash_t before = XXH3_64bits(s->base, s->size);
    char byte;

    /* garbage header: the owner closes this connection */
    int bad = raw_connect(tp_engine_address(owner));
    uint8_t junk[TPW_REQ_SIZE];
    memset(junk, 0xee, sizeof(junk));
    assert_int_equal(send(bad, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
    assert_int_equal(recv(bad, &byte, 1, 0), 0);
    close(bad);

    /* a refused WRITE (wrong token) with its payload: error response, connection still usable */
    int fd = raw_connect(tp_engine_address(owner));
    struct tpw_req q = {.op = TP_WRITE,
                        .req_id = 9,
                        .seg_id = s->id,
                        .offset = 0,
                        .length = 4096,
                        .token = g.token + 1};
    uint8_t hb[TPW_REQ_SIZE + 4096];
    tpw_req_encode(&q, hb);
    memset(hb + TPW_REQ_SIZE, 0x11, 4096);
    assert_int_equal(send(fd, hb, sizeof(hb), 0), (ssize_t)sizeof(hb));
    uint8_t rb[TPW_RESP_SIZE];
    assert_int_equal(recv(fd, rb, sizeof(rb), MSG_WAITALL), (ssize_t)sizeof(rb));
    struct tpw_resp resp;
    assert_int_equal(tpw_resp_decode(rb, sizeof(rb), &resp), 0);
    assert_int_equal(resp.status, KVMESH_EAUTH);
    assert_int_equal(resp.reason, SEG_R_NOGRANT);
    assert_int_equal(resp.req_id, 9);
    /* a stalled request (half a header) is cut after io_timeout_ms (bound: a loaded CI host) */
    uint64_t t0 = env_clock_mono_ms();
    assert_int_equal(send(fd, hb, 10, 0), 10);
    assert_int_equal(recv(fd, &byte, 1, 0), 0);
    assert_true(env_clock_mono_ms() - t0 < 15000);
    close(fd);
    /*
     * a trickling request (one byte every 50 ms, so no single socket operation ever waits
     * io_timeout_ms) is cut too: a started exchange has an overall deadline, else one peer could
     * hold a server thread and a segment pin forever
     */
    fd = raw_connect(tp_engine_address(owner));
    q.token = g.token; /* a valid WRITE: the owner receives its payload into the segment */
    tpw_req_encode(&q, hb);
    int cut = 0;
    t0 = env_clock_mono_ms();
    for (size_t i = 0; i < sizeof(hb) && env_clock_mono_ms() - t0 < 20000 && !cut; i++) {
        if (send(fd, hb + i, 1, MSG_NOSIGNAL) != 1)
            cut = 1;
        else if (recv(fd, &byte, 1, MSG_DONTWAIT) == 0)
            cut = 1;
        usleep(50 * 1000);
    }
    assert_true(cut);
    close(fd);

    /* the owner is unaffected and still serves a proper client */
    assert_true(XXH3_64bits(s->base, s->size) == before);
    struct seg_registry *creg;
    struct tp_engine *cl;
    struct tp_segment *rs;
    assert_int_equal(seg_registry_new(&creg), 0);
    struct tp_config cc = client_cfg();
    assert_int_equal(tp_engine_new(&cc, creg, &cl), 0);
    assert_int_equal(tp_open_segment(cl, tp_engine_address(owner), s->id, g.token, &rs), 0);
    uint8_t *buf = malloc(s->size);
    assert_non_null(buf);
    assert_int_equal(tp_register_memory(cl, buf, s->size), 0);
    struct tp_batch *b;
    struct tp_request r = {
        .op = TP_READ, .local = buf, .length = s->size, .segment = rs, .token = g.token};
    assert_int_equal(tp_batch_new(cl, 1, &b), 0);
    assert_int_equal(tp_submit(b, &r, 1), 0);
    assert_int_equal(tp_batch_wait(b, 10000), 0);
    assert_int_equal(tp_status(b, 0, NULL), 0);
    assert_true(XXH3_64bits(buf, s->size) == before);
    tp_batch_free(b);
    tp_close_segment(rs);
    tp_engine_free(cl);
    seg_registry_free(creg);
    free(buf);
    tp_engine_free(owner);
    seg_registry_free(reg);
}

/* ---- a fake owner that answers a READ one payload byte per 50 ms ---- */

struct trickler {
    int lfd, fd;
    int stop; /* atomic */
    pthread_t th;
};

static void *trickler_main(void *arg)
{
    struct trickler *t = arg;
    t->fd = accept(t->lfd, NULL, NULL);
    if (t->fd < 0)
        return NULL;
    uint8_t hb[TPW_REQ_SIZE], rb[TPW_RESP_SIZE];
    struct tpw_req q;
    if (recv(t->fd, hb, sizeof(hb), MSG_WAITALL) != (ssize_t)sizeof(hb) ||
        tpw_req_decode(hb, sizeof(hb), &q) != 0)
        return NULL;
    struct tpw_resp resp = {.status = 0, .req_id = q.req_id, .length = q.length};
    tpw_resp_encode(&resp, rb);
    if (send(t->fd, rb, sizeof(rb), MSG_NOSIGNAL) != (ssize_t)sizeof(rb))
        return NULL;
    uint8_t byte = 7;
    for (uint64_t i = 0; i < q.length && !__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE); i++) {
        if (send(t->fd, &byte, 1, MSG_NOSIGNAL) != 1)
            break;
        usleep(50 * 1000);
    }
    return NULL;
}

/*
 * The client side of the exchange deadline: an owner that answers a READ by trickling its
 * payload (no single receive ever waits io_timeout_ms) fails the request with KVMESH_ETIMEDOUT
 * instead of holding the I/O thread and the batch forever.
 */
/* Starts a trickler on a loopback port; its transport address goes to addr. */
static void trickler_start(struct trickler *t, char *addr, size_t cap)
{
    *t = (struct trickler){.fd = -1};
    t->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(t->lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr), 1);
    assert_int_equal(bind(t->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(t->lfd, 4), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(t->lfd, (struct sockaddr *)&sa, &sl), 0);
    assert_int_equal(pthread_create(&t->th, NULL, trickler_main, t), 0);
    snprintf(addr, cap, "kvt1;host=trickler;tcp=127.0.0.1:%u", ntohs(sa.sin_port));
}

static void trickler_stop(struct trickler *t)
{
    __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
    pthread_join(t->th, NULL);
    if (t->fd >= 0)
        close(t->fd);
    close(t->lfd);
}

/*
 * The same owner against a batch of one request with a deadline: the exchange runs on the
 * submitting thread and is cut at the batch's deadline (300 ms), not at the exchange deadline of
 * io_timeout_ms (30 s here): tp_submit returns with the request already failed, and the peer is
 * dead (the stream is out of step), as after tp_batch_abort.
 */
static void test_trickling_owner_batch_deadline(void **state)
{
    (void)state;
    struct trickler t;
    char addr[TP_ADDR_MAX];
    trickler_start(&t, addr, sizeof(addr));
    struct seg_registry *reg;
    struct tp_engine *e;
    struct tp_segment *rs;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct tp_config cc = {
        .kind = TP_TCP, .no_server = true, .conns_per_peer = 2, .io_timeout_ms = 30000};
    assert_int_equal(tp_engine_new(&cc, reg, &e), 0);
    assert_int_equal(tp_open_segment(e, addr, 1, 1, &rs), 0);
    uint8_t *buf = malloc(4096);
    assert_int_equal(tp_register_memory(e, buf, 4096), 0);
    struct tp_batch *b;
    struct tp_request r = {.op = TP_READ, .local = buf, .length = 4096, .segment = rs, .token = 1};
    assert_int_equal(tp_batch_new(e, 1, &b), 0);
    tp_batch_set_deadline(b, env_clock_mono_ms() + 300);
    assert_int_equal(tp_submit(b, &r, 1), 0);
    assert_int_equal(tp_status(b, 0, NULL), KVMESH_ETIMEDOUT); /* done inside tp_submit */
    assert_false(tp_segment_usable(rs));
    tp_batch_free(b);
    tp_close_segment(rs);
    tp_engine_free(e);
    seg_registry_free(reg);
    free(buf);
    trickler_stop(&t);
}

/* Runs one request with a deadline and a checksum; it is complete when tp_submit returns. */
static void run_here(struct fixture *f, enum tp_op op, void *local, uint64_t off, uint64_t len)
{
    struct tp_batch *b;
    struct kvm_sum sum;
    kvm_sum_init(&sum, KVM_HASH_SEED_CHECKSUM);
    assert_int_equal(tp_batch_new(f->client, 1, &b), 0);
    tp_batch_set_deadline(b, env_clock_mono_ms() + 20000);
    struct tp_request r = {.op = op,
                           .local = local,
                           .length = len,
                           .segment = f->rs,
                           .remote_offset = off,
                           .token = f->g.token,
                           .sum = &sum};
    assert_int_equal(tp_submit(b, &r, 1), 0);
    if (len <= (256u << 10)) /* one chunk (stripe_min): run by this thread */
        assert_int_equal(tp_status(b, 0, NULL), 0);
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    assert_int_equal(tp_status(b, 0, NULL), 0);
    assert_true(kvm_sum_digest(&sum) == kvm_checksum(local, len));
    tp_batch_free(b);
}

/* Bytes and checksum of requests run on the submitting thread (and, above one chunk, striped
 * over the I/O threads as without a deadline), READ and WRITE, with neighbours untouched. */
static void test_lone_request_on_submitter(void **state)
{
    struct fixture *f = *state;
    static const uint64_t lens[] = {1, 4096, 65537, 200000, 256u << 10, (1u << 20) + 17};
    for (int round = 0; round < 2; round++) /* the second finds connections used before */
        for (size_t i = 0; i < KVM_ARRAY_SIZE(lens); i++) {
            uint64_t n = lens[i], off = 4099 + i * 7, woff = (80ull << 20) + 3 + i;
            fill(f->seg->base + off, n, i + 1 + 100 * (uint64_t)round);
            memset(f->buf, 0, n);
            run_here(f, TP_READ, f->buf, off, n);
            assert_memory_equal(f->buf, f->seg->base + off, n);
            fill(f->buf2, n, 1000 + i + 100 * (uint64_t)round);
            f->seg->base[woff - 1] = 0xA5;
            f->seg->base[woff + n] = 0x5A;
            run_here(f, TP_WRITE, f->buf2, woff, n);
            assert_memory_equal(f->seg->base + woff, f->buf2, n);
            assert_int_equal(f->seg->base[woff - 1], 0xA5);
            assert_int_equal(f->seg->base[woff + n], 0x5A);
        }
}

static void test_trickling_owner(void **state)
{
    (void)state;
    struct trickler t = {.fd = -1};
    t.lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(t.lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr), 1);
    assert_int_equal(bind(t.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(t.lfd, 4), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(t.lfd, (struct sockaddr *)&sa, &sl), 0);
    assert_int_equal(pthread_create(&t.th, NULL, trickler_main, &t), 0);
    char addr[TP_ADDR_MAX];
    snprintf(addr, sizeof(addr), "kvt1;host=trickler;tcp=127.0.0.1:%u", ntohs(sa.sin_port));

    struct seg_registry *reg;
    struct tp_engine *e;
    struct tp_segment *rs;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct tp_config cc = {
        .kind = TP_TCP, .no_server = true, .conns_per_peer = 1, .io_timeout_ms = 300};
    assert_int_equal(tp_engine_new(&cc, reg, &e), 0);
    assert_int_equal(tp_open_segment(e, addr, 1, 1, &rs), 0);
    uint8_t *buf = malloc(4096);
    assert_int_equal(tp_register_memory(e, buf, 4096), 0);
    struct tp_batch *b;
    struct tp_request r = {.op = TP_READ, .local = buf, .length = 4096, .segment = rs, .token = 1};
    assert_int_equal(tp_batch_new(e, 1, &b), 0);
    assert_int_equal(tp_submit(b, &r, 1), 0);
    /* the trickle would take 200 s; the deadline is 300 ms (+ one socket timeout) */
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    assert_int_equal(tp_status(b, 0, NULL), KVMESH_ETIMEDOUT);
    tp_batch_free(b);
    tp_close_segment(rs);
    tp_engine_free(e);
    seg_registry_free(reg);
    free(buf);
    __atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t.th, NULL);
    if (t.fd >= 0)
        close(t.fd);
    close(t.lfd);
}

/* One round of the steady-state test: 128 4 KiB requests (READs and WRITEs alternating), each
 * under its own grant made and revoked around the batch as an owner does per put item. Returns
 * the allocations of src/net made from the batch's submit to the last revoke. */
static uint64_t steady_round(struct fixture *f, unsigned round)
{
    enum { N = 128, LEN = 4096 };
    struct tp_request r[N];
    struct seg_grant g[N];
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, N, &b), 0);
    for (unsigned i = 0; i < N; i++) {
        uint64_t off = (uint64_t)i * LEN;
        fill(f->buf + off, LEN, 7000 + 1000 * (uint64_t)round + i);
        fill(f->seg->base + off, LEN, 9000 + 1000 * (uint64_t)round + i);
    }
    uint64_t before = seg_alloc_count();
    for (unsigned i = 0; i < N; i++) {
        uint64_t off = (uint64_t)i * LEN;
        assert_int_equal(seg_grant(f->oreg, f->seg->id, off, LEN, SEG_READ | SEG_WRITE, 0, &g[i]),
                         0);
        r[i] = (struct tp_request){.op = i % 2 ? TP_WRITE : TP_READ,
                                   .local = f->buf + off,
                                   .length = LEN,
                                   .segment = f->rs,
                                   .remote_offset = off,
                                   .token = g[i].token};
    }
    assert_int_equal(tp_submit(b, r, N), 0);
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(tp_status(b, i, NULL), 0);
        assert_int_equal(seg_revoke(f->oreg, g[i].token), 0);
    }
    uint64_t allocs = seg_alloc_count() - before;
    assert_memory_equal(f->buf, f->seg->base, (size_t)N * LEN); /* both ways, same bytes */
    tp_batch_free(b);
    return allocs;
}

static void test_steady_batches_allocate_nothing(void **state)
{
    struct fixture *f = *state;
    uint64_t first = steady_round(f, 0); /* fills the chunk pool and the spare grants */
    assert_true(first >= 128);           /* (one grant entry per request, at least) */
    for (unsigned round = 1; round <= 3; round++)
        assert_int_equal(steady_round(f, round), 0);
}
