// SPDX-License-Identifier: Apache-2.0
/*
 * idle_data — idle limits of the tcp data port (transport_tcp.c, idle_timeout_ms):
 *   - a client that connects to an owner's data port and stays silent is closed by the owner
 *     after idle_timeout_ms (it does not keep a connection slot); with idle_timeout_ms 0 the
 *     same connection stays open (the control);
 *   - a client engine closes its own idle connections at half the timeout and reconnects when
 *     the next request comes: a read after a pause longer than the owner's idle timeout
 *     succeeds, with the right bytes, on the same segment handle;
 *   - a slow reader (a raw client that asks to READ 32 MiB and never reads the response) is cut
 *     by the owner within the exchange deadline (io_timeout_ms per started MiB plus one): read
 *     after that deadline, the stream ends (EOF) short of the full response; another client
 *     reads from the same segment meanwhile.
 * Real loopback sockets; every wait is bounded.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "env/clock.h"
#include "net/seg.h"
#include "net/transport.h"
#include "net/transport_wire.h"

/* rcvbuf > 0: the socket's receive buffer, set before connect (a small window) */
static int raw_connect(const char *addr, int rcv_timeout_s, int rcvbuf)
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
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = rcv_timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* recv on a silent connection: 0 = the owner closed it, -1 = still open at the timeout */
static int silent_outcome(uint32_t idle_ms, int rcv_timeout_s)
{
    struct seg_registry *reg;
    struct tp_engine *owner;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct tp_config oc = {.kind = TP_TCP, .idle_timeout_ms = idle_ms};
    assert_int_equal(tp_engine_new(&oc, reg, &owner), 0);
    int fd = raw_connect(tp_engine_address(owner), rcv_timeout_s, 0);
    char byte;
    ssize_t n = recv(fd, &byte, 1, 0);
    close(fd);
    tp_engine_free(owner);
    seg_registry_free(reg);
    return n == 0 ? 0 : -1;
}

static void test_silent_client_closed(void **state)
{
    (void)state;
    assert_int_equal(silent_outcome(300, 20), 0); /* closed by the owner (bound: loaded host) */
    assert_int_equal(silent_outcome(0, 1), -1);   /* control: no idle limit, still open */
}

static int read1(struct tp_engine *cli, struct tp_segment *rs, void *buf, uint64_t len,
                 uint64_t token)
{
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(cli, 1, &b), 0);
    struct tp_request r = {.op = TP_READ,
                           .local = buf,
                           .length = len,
                           .segment = rs,
                           .remote_offset = 0,
                           .token = token};
    assert_int_equal(tp_submit(b, &r, 1), 0);
    assert_int_equal(tp_batch_wait(b, 20000), 0);
    int st = tp_status(b, 0, NULL);
    tp_batch_free(b);
    return st;
}

/* An owner engine with one segment (its first 64 KiB a pattern, a READ|WRITE grant), and a
 * client engine with that segment open and a registered 64 KiB buffer. */
struct datafx {
    struct seg_registry *oreg, *creg;
    struct tp_engine *owner, *cli;
    struct seg *s;
    struct seg_grant g;
    struct tp_segment *rs;
    uint8_t *buf;
};

static void fx_start(struct datafx *f, const struct tp_config *oc, const struct tp_config *cc,
                     uint64_t seg_size)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(seg_registry_new(&f->oreg), 0);
    assert_int_equal(seg_registry_new(&f->creg), 0);
    assert_int_equal(tp_engine_new(oc, f->oreg, &f->owner), 0);
    assert_int_equal(tp_engine_new(cc, f->creg, &f->cli), 0);
    assert_int_equal(seg_create(f->oreg, seg_size, 0, &f->s), 0);
    assert_int_equal(seg_grant(f->oreg, f->s->id, 0, f->s->size, SEG_READ | SEG_WRITE, 0, &f->g),
                     0);
    for (uint64_t i = 0; i < 65536; i++)
        f->s->base[i] = (uint8_t)(i * 13 + 1);
    assert_int_equal(
        tp_open_segment(f->cli, tp_engine_address(f->owner), f->s->id, f->g.token, &f->rs), 0);
    f->buf = calloc(1, 65536);
    assert_non_null(f->buf);
    assert_int_equal(tp_register_memory(f->cli, f->buf, 65536), 0);
}

static void fx_stop(struct datafx *f)
{
    tp_unregister_memory(f->cli, f->buf);
    free(f->buf);
    tp_close_segment(f->rs);
    tp_engine_free(f->cli);
    tp_engine_free(f->owner);
    seg_registry_free(f->creg);
    seg_registry_free(f->oreg);
}

static void test_client_reconnects_after_idle(void **state)
{
    (void)state;
    struct datafx f;
    struct tp_config oc = {.kind = TP_TCP, .idle_timeout_ms = 400};
    struct tp_config cc = {
        .kind = TP_TCP, .no_server = true, .conns_per_peer = 2, .idle_timeout_ms = 400};
    fx_start(&f, &oc, &cc, 1u << 20);
    for (int round = 0; round < 3; round++) {
        memset(f.buf, 0, 65536);
        assert_int_equal(read1(f.cli, f.rs, f.buf, 65536, f.g.token), 0);
        assert_memory_equal(f.buf, f.s->base, 65536);
        assert_true(tp_segment_usable(f.rs));
        usleep(700 * 1000); /* longer than the owner's idle timeout: both sides closed */
    }
    fx_stop(&f);
}

#define SLOW_LEN (32ull << 20)
#define SLOW_IO  100 /* io_timeout_ms: exchange deadline 100 ms x (1 + 32) = 3.3 s */

static void test_slow_reader_cut(void **state)
{
    (void)state;
    struct datafx f;
    struct tp_config oc = {.kind = TP_TCP, .io_timeout_ms = SLOW_IO};
    struct tp_config cc = {.kind = TP_TCP, .no_server = true, .conns_per_peer = 1};
    fx_start(&f, &oc, &cc, SLOW_LEN);

    /* a raw READ of the whole segment, with a small receive window, never read */
    int fd = raw_connect(tp_engine_address(f.owner), 10, 4096);
    uint8_t hb[TPW_REQ_SIZE];
    struct tpw_req q = {.op = TP_READ,
                        .req_id = 1,
                        .seg_id = f.s->id,
                        .offset = 0,
                        .length = SLOW_LEN,
                        .token = f.g.token};
    tpw_req_encode(&q, hb);
    assert_int_equal(send(fd, hb, sizeof(hb), MSG_NOSIGNAL), (ssize_t)sizeof(hb));
    uint64_t start = env_clock_mono_ms();

    /* another client is served meanwhile */
    assert_int_equal(read1(f.cli, f.rs, f.buf, 65536, f.g.token), 0);
    assert_memory_equal(f.buf, f.s->base, 65536);

    /* past the exchange deadline (plus slack for a loaded host) the owner gave up: reading now
     * drains what the socket buffers held, then EOF, short of the whole response */
    uint64_t bound = (uint64_t)SLOW_IO * (1 + SLOW_LEN / (1u << 20)) + 3000;
    while (env_clock_mono_ms() < start + bound)
        usleep(50 * 1000);
    uint64_t got = 0;
    ssize_t n = 1;
    static char sink[1 << 16];
    while (got <= SLOW_LEN + TPW_RESP_SIZE && (n = recv(fd, sink, sizeof(sink), 0)) > 0)
        got += (uint64_t)n;
    assert_int_equal(n, 0); /* EOF: the owner closed it */
    assert_true(got < SLOW_LEN + TPW_RESP_SIZE);
    close(fd);
    fx_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silent_client_closed),
        cmocka_unit_test(test_client_reconnects_after_idle),
        cmocka_unit_test(test_slow_reader_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
