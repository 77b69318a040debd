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

static int raw_connect(const char *addr, int rcv_timeout_s)
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
    int fd = raw_connect(tp_engine_address(owner), rcv_timeout_s);
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

static void test_client_reconnects_after_idle(void **state)
{
    (void)state;
    struct seg_registry *oreg, *creg;
    struct tp_engine *owner, *cli;
    struct seg *s;
    struct seg_grant g;
    assert_int_equal(seg_registry_new(&oreg), 0);
    assert_int_equal(seg_registry_new(&creg), 0);
    struct tp_config oc = {.kind = TP_TCP, .idle_timeout_ms = 400};
    assert_int_equal(tp_engine_new(&oc, oreg, &owner), 0);
    struct tp_config cc = {
        .kind = TP_TCP, .no_server = true, .conns_per_peer = 2, .idle_timeout_ms = 400};
    assert_int_equal(tp_engine_new(&cc, creg, &cli), 0);
    assert_int_equal(seg_create(oreg, 1u << 20, 0, &s), 0);
    assert_int_equal(seg_grant(oreg, s->id, 0, s->size, SEG_READ | SEG_WRITE, 0, &g), 0);
    for (uint64_t i = 0; i < 65536; i++)
        s->base[i] = (uint8_t)(i * 13 + 1);
    struct tp_segment *rs;
    assert_int_equal(tp_open_segment(cli, tp_engine_address(owner), s->id, g.token, &rs), 0);
    uint8_t *buf = malloc(65536);
    assert_non_null(buf);
    assert_int_equal(tp_register_memory(cli, buf, 65536), 0);
    for (int round = 0; round < 3; round++) {
        memset(buf, 0, 65536);
        assert_int_equal(read1(cli, rs, buf, 65536, g.token), 0);
        assert_memory_equal(buf, s->base, 65536);
        assert_true(tp_segment_usable(rs));
        usleep(700 * 1000); /* longer than the owner's idle timeout: both sides closed */
    }
    tp_unregister_memory(cli, buf);
    free(buf);
    tp_close_segment(rs);
    tp_engine_free(cli);
    tp_engine_free(owner);
    seg_registry_free(creg);
    seg_registry_free(oreg);
}

#define SLOW_LEN (32ull << 20)
#define SLOW_IO  100 /* io_timeout_ms: exchange deadline 100 ms x (1 + 32) = 3.3 s */

static void test_slow_reader_cut(void **state)
{
    (void)state;
    struct seg_registry *oreg, *creg;
    struct tp_engine *owner, *cli;
    struct seg *s;
    struct seg_grant g;
    assert_int_equal(seg_registry_new(&oreg), 0);
    assert_int_equal(seg_registry_new(&creg), 0);
    struct tp_config oc = {.kind = TP_TCP, .io_timeout_ms = SLOW_IO};
    assert_int_equal(tp_engine_new(&oc, oreg, &owner), 0);
    assert_int_equal(seg_create(oreg, SLOW_LEN, 0, &s), 0);
    assert_int_equal(seg_grant(oreg, s->id, 0, s->size, SEG_READ, 0, &g), 0);
    for (uint64_t i = 0; i < 65536; i++)
        s->base[i] = (uint8_t)(i * 7 + 3);

    /* a raw READ of the whole segment, with a small receive window, never read */
    const char *addr = strstr(tp_engine_address(owner), "tcp=");
    assert_non_null(addr);
    char ip[64];
    unsigned port;
    assert_int_equal(sscanf(addr + 4, "%63[^:]:%u", ip, &port), 2);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int rcvbuf = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    uint8_t hb[TPW_REQ_SIZE];
    struct tpw_req q = {.op = TP_READ,
                        .req_id = 1,
                        .seg_id = s->id,
                        .offset = 0,
                        .length = SLOW_LEN,
                        .token = g.token};
    tpw_req_encode(&q, hb);
    assert_int_equal(send(fd, hb, sizeof(hb), MSG_NOSIGNAL), (ssize_t)sizeof(hb));
    uint64_t start = env_clock_mono_ms();

    /* another client is served meanwhile */
    struct tp_config cc = {.kind = TP_TCP, .no_server = true, .conns_per_peer = 1};
    assert_int_equal(tp_engine_new(&cc, creg, &cli), 0);
    struct tp_segment *rs;
    assert_int_equal(tp_open_segment(cli, tp_engine_address(owner), s->id, g.token, &rs), 0);
    uint8_t *buf = calloc(1, 65536);
    assert_non_null(buf);
    assert_int_equal(tp_register_memory(cli, buf, 65536), 0);
    assert_int_equal(read1(cli, rs, buf, 65536, g.token), 0);
    assert_memory_equal(buf, s->base, 65536);

    /* past the exchange deadline (plus slack for a loaded host) the owner gave up: reading now
     * drains what the socket buffers held, then EOF, short of the whole response */
    uint64_t bound = (uint64_t)SLOW_IO * (1 + SLOW_LEN / (1u << 20)) + 3000;
    while (env_clock_mono_ms() < start + bound)
        usleep(50 * 1000);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint64_t got = 0;
    ssize_t n = 1;
    static char sink[1 << 16];
    while (got <= SLOW_LEN + TPW_RESP_SIZE && (n = recv(fd, sink, sizeof(sink), 0)) > 0)
        got += (uint64_t)n;
    assert_int_equal(n, 0); /* EOF: the owner closed it */
    assert_true(got < SLOW_LEN + TPW_RESP_SIZE);
    close(fd);

    tp_unregister_memory(cli, buf);
    free(buf);
    tp_close_segment(rs);
    tp_engine_free(cli);
    tp_engine_free(owner);
    seg_registry_free(creg);
    seg_registry_free(oreg);
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
