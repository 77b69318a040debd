// SPDX-License-Identifier: Apache-2.0
/*
 * idle_rpc — idle limits of the peer RPC port (rpc_config.idle_timeout_ms) over real sockets:
 *   - a raw peer that completes the handshake and a request, then goes silent, is closed with
 *     reason "idle";
 *   - a slow-loris peer trickling one byte of a frame every 50 ms (never completing it) is
 *     closed with reason "idle": bytes of an incomplete frame are not activity;
 *   - a connection with a request in service is not idle: it stays open while the handler holds
 *     the request, the reply arrives, and only then does the idle close come;
 *   - a client closes its own idle outbound connection at half the timeout and the next call
 *     reconnects and succeeds;
 *   - a slow reader (a raw peer that sends many requests with large replies and never reads) is
 *     closed with reason "write_timeout" once no reply write completed for idle_timeout_ms: the
 *     queued reply bytes never pass max_queue_bytes, return to 0 after the close, and another
 *     client is served meanwhile.
 * Before the handshake, the handshake timeout bounds a silent peer (rpc_faults.c). Every wait
 * is bounded (T_WAIT).
 */
#include "rpc_testutil.h"

#include <inttypes.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/frame.h"

struct srvfx {
    uv_loop_t loop;
    rpc_endpoint *srv;
    int port;
    char addr[64];
    int echo_count;
    struct held held;
};

static void srv_start(struct srvfx *f, uint32_t idle_ms)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    struct rpc_config c;
    cfg_make(&c, "dep", "srv", NULL);
    c.idle_timeout_ms = idle_ms;
    assert_int_equal(rpc_endpoint_new(&f->loop, &c, &f->srv), 0);
    assert_int_equal(rpc_listen_tcp(f->srv, "127.0.0.1", 0, &f->port), 0);
    snprintf(f->addr, sizeof(f->addr), "tcp:127.0.0.1:%d", f->port);
    rpc_register_handler(f->srv, T_ECHO, echo_handler, &f->echo_count);
    rpc_register_handler(f->srv, T_HOLD, hold_handler, &f->held);
}

static void srv_stop(struct srvfx *f)
{
    held_drop_all(&f->held);
    ep_close_wait(&f->loop, f->srv);
    loop_finish(&f->loop);
}

static uint64_t closes(rpc_endpoint *ep, int reason)
{
    struct rpc_stats st;
    rpc_get_stats(ep, &st);
    return st.close[reason];
}

static void test_silent_after_handshake(void **state)
{
    (void)state;
    struct srvfx f;
    srv_start(&f, 300);
    uint8_t buf[1024];
    size_t off = handshake_and_request(buf);
    struct raw r;
    raw_start(&f.loop, &r, f.port, buf, off, 0);
    assert_true(run_until(&f.loop, pred_raw_closed, &r, T_WAIT));
    assert_int_equal(f.echo_count, 1); /* it was served, then closed for idleness */
    for (int g = 0; g < 5000 && closes(f.srv, RPC_CLOSE_IDLE) == 0; g++)
        run_for(&f.loop, 1);
    assert_int_equal(closes(f.srv, RPC_CLOSE_IDLE), 1);
    srv_stop(&f);
}

/* ---- slow loris ---- */

struct loris {
    struct raw *r;
    uv_timer_t t;
    uint8_t frame[64];
    size_t len, sent;
};

static void loris_tick(uv_timer_t *t)
{
    struct loris *l = t->data;
    if (l->r->eof || l->r->closed || uv_is_closing((uv_handle_t *)&l->r->tcp) ||
        l->sent == l->len) {
        uv_timer_stop(t);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)l->frame + l->sent, 1);
    if (uv_try_write((uv_stream_t *)&l->r->tcp, &b, 1) == 1)
        l->sent++;
}

static void test_slow_loris_closed(void **state)
{
    (void)state;
    struct srvfx f;
    srv_start(&f, 300);
    uint8_t buf[1024];
    size_t off = handshake_and_request(buf);
    struct raw r;
    raw_start(&f.loop, &r, f.port, buf, off, 0);
    /* then a 40-byte request, one byte per 50 ms (2 s in all, far beyond the idle limit) */
    struct loris l = {.r = &r};
    uint8_t payload[16] = {0};
    l.len = put_frame(l.frame, FRAME_REQUEST, T_ECHO, 2, NULL, 0, payload, sizeof(payload));
    uv_timer_init(&f.loop, &l.t);
    l.t.data = &l;
    uv_timer_start(&l.t, loris_tick, 50, 50);
    assert_true(run_until(&f.loop, pred_raw_closed, &r, T_WAIT));
    uv_timer_stop(&l.t);
    uv_close((uv_handle_t *)&l.t, NULL);
    assert_true(l.sent < l.len); /* closed before the frame was complete */
    assert_int_equal(f.echo_count, 1);
    for (int g = 0; g < 5000 && closes(f.srv, RPC_CLOSE_IDLE) == 0; g++)
        run_for(&f.loop, 1);
    assert_int_equal(closes(f.srv, RPC_CLOSE_IDLE), 1);
    srv_stop(&f);
}

/* ---- busy is not idle; outbound idle close and reconnect ---- */

static rpc_endpoint *client(uv_loop_t *loop, uint32_t idle_ms)
{
    struct rpc_config c;
    cfg_make(&c, "dep", "cli", NULL);
    c.idle_timeout_ms = idle_ms;
    rpc_endpoint *cli;
    assert_int_equal(rpc_endpoint_new(loop, &c, &cli), 0);
    return cli;
}

static void test_request_in_service_is_not_idle(void **state)
{
    (void)state;
    struct srvfx f;
    srv_start(&f, 1000); /* (the request must arrive before a first idle check on a slow host) */
    rpc_endpoint *cli = client(&f.loop, 0);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(cli, "srv", f.addr, &p), 0);
    struct result r = {0};
    struct rpc_msg m = {.type = T_HOLD, .timeout_ms = 20000};
    assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
    for (int g = 0; g < T_WAIT && f.held.calls == 0; g++)
        run_for(&f.loop, 1);
    assert_int_equal(f.held.calls, 1);
    run_for(&f.loop, 2500); /* > 2 idle periods with the request held */
    assert_int_equal(closes(f.srv, RPC_CLOSE_IDLE), 0);
    assert_int_equal(rpc_reply_send(f.held.r[0], 0, NULL, NULL, NULL, NULL), 0);
    f.held.n = 0;
    assert_true(run_until(&f.loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, 0);
    result_free(&r);
    /* now idle: the server closes it */
    for (int g = 0; g < T_WAIT && closes(f.srv, RPC_CLOSE_IDLE) == 0; g++)
        run_for(&f.loop, 1);
    assert_int_equal(closes(f.srv, RPC_CLOSE_IDLE), 1);
    ep_close_wait(&f.loop, cli);
    srv_stop(&f);
}

static void echo_once(uv_loop_t *loop, rpc_peer *p)
{
    struct result r = {0};
    uv_buf_t b = uv_buf_init("ping", 4);
    struct rpc_msg m = {.type = T_ECHO, .iov = &b, .niov = 1, .timeout_ms = 5000};
    assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
    assert_true(run_until(loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, 0);
    assert_int_equal(r.payload_len, 4);
    result_free(&r);
}

static void test_outbound_idle_close_and_reconnect(void **state)
{
    (void)state;
    struct srvfx f;
    srv_start(&f, 0);
    rpc_endpoint *cli = client(&f.loop, 400); /* outbound idle close at 200 ms */
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(cli, "srv", f.addr, &p), 0);
    for (uint64_t round = 1; round <= 3; round++) {
        echo_once(&f.loop, p);
        for (int g = 0; g < T_WAIT && closes(cli, RPC_CLOSE_IDLE) < round; g++)
            run_for(&f.loop, 1);
        assert_int_equal(closes(cli, RPC_CLOSE_IDLE), round);
    }
    assert_int_equal(f.echo_count, 3);
    ep_close_wait(&f.loop, cli);
    srv_stop(&f);
}

/* ---- slow reader ---- */

#define T_BIG      14
#define BIG_REPLY  (1u << 20)
#define SLOW_QUEUE (16ull << 20) /* more than the kernel's socket buffers take (tcp_wmem) */
#define SLOW_REQS  64

struct big {
    uint8_t *reply;
    int served, dropped;
};

/* Replies BIG_REPLY bytes; a reply refused by the full send queue is dropped (counted). */
static void big_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct big *b = arg;
    (void)req;
    uv_buf_t iov = uv_buf_init((char *)b->reply, BIG_REPLY);
    struct rpc_msg m = {.iov = &iov, .niov = 1};
    int rc = rpc_reply_send(reply, 0, NULL, &m, NULL, NULL);
    if (rc == KVMESH_EAGAIN) {
        rpc_reply_drop(reply);
        b->dropped++;
        return;
    }
    assert_int_equal(rc, 0);
    b->served++;
}

/* A raw client that writes its bytes and never reads (small receive buffer). */
struct deaf {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wr;
    uint8_t *data;
    size_t len;
    int written, closed;
};

static void deaf_written(uv_write_t *w, int status)
{
    ((struct deaf *)w->data)->written = status == 0 ? 1 : -1;
}

static void deaf_connected(uv_connect_t *c, int status)
{
    struct deaf *d = c->data;
    assert_int_equal(status, 0);
    uv_buf_t b = uv_buf_init((char *)d->data, (unsigned)d->len);
    d->wr.data = d;
    assert_int_equal(uv_write(&d->wr, (uv_stream_t *)&d->tcp, &b, 1, deaf_written), 0);
}

static void deaf_closed(uv_handle_t *h)
{
    ((struct deaf *)h->data)->closed = 1;
}

struct slow_watch {
    rpc_endpoint *srv;
    uint64_t peak_bytes;
};

static void slow_watch_check(uv_check_t *h)
{
    struct slow_watch *w = h->data;
    struct rpc_stats st;
    rpc_get_stats(w->srv, &st);
    if (st.queued_bytes > w->peak_bytes)
        w->peak_bytes = st.queued_bytes;
}

static int pred_queue_refused(void *arg)
{
    struct rpc_stats st;
    rpc_get_stats(arg, &st);
    return st.eagain > 0;
}

static int pred_write_timeout(void *arg)
{
    return closes(arg, RPC_CLOSE_WRITE_TIMEOUT) > 0;
}

static void test_slow_reader_closed(void **state)
{
    (void)state;
    struct srvfx f;
    memset(&f, 0, sizeof(f));
    assert_int_equal(uv_loop_init(&f.loop), 0);
    struct rpc_config c;
    cfg_make(&c, "dep", "srv", NULL);
    c.idle_timeout_ms = 1000;
    c.max_queue_bytes = SLOW_QUEUE;
    assert_int_equal(rpc_endpoint_new(&f.loop, &c, &f.srv), 0);
    assert_int_equal(rpc_listen_tcp(f.srv, "127.0.0.1", 0, &f.port), 0);
    snprintf(f.addr, sizeof(f.addr), "tcp:127.0.0.1:%d", f.port);
    rpc_register_handler(f.srv, T_ECHO, echo_handler, &f.echo_count);
    struct big big = {.reply = calloc(1, BIG_REPLY)};
    assert_non_null(big.reply);
    rpc_register_handler(f.srv, T_BIG, big_handler, &big);
    struct slow_watch w = {.srv = f.srv};
    uv_check_t chk;
    uv_check_init(&f.loop, &chk);
    chk.data = &w;
    uv_check_start(&chk, slow_watch_check);

    /* handshake + echo, then SLOW_REQS requests whose replies (64 MiB) far exceed the queue
     * bound and the socket buffers of a peer that reads nothing */
    uint8_t *buf = malloc(1024 + SLOW_REQS * FRAME_FIXED_SIZE);
    assert_non_null(buf);
    size_t off = handshake_and_request(buf);
    for (uint64_t i = 0; i < SLOW_REQS; i++)
        off += put_frame(buf + off, FRAME_REQUEST, T_BIG, 2 + i, NULL, 0, NULL, 0);
    struct deaf d = {.data = buf, .len = off};
    assert_int_equal(uv_tcp_init_ex(&f.loop, &d.tcp, AF_INET), 0);
    int rcvbuf = 4096;
    uv_recv_buffer_size((uv_handle_t *)&d.tcp, &rcvbuf);
    d.tcp.data = &d;
    d.creq.data = &d;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", f.port, &sa);
    assert_int_equal(uv_tcp_connect(&d.creq, &d.tcp, (struct sockaddr *)&sa, deaf_connected), 0);

    /* the reply queue fills: replies are refused (EAGAIN) */
    assert_true(run_until(&f.loop, pred_queue_refused, f.srv, T_WAIT));
    assert_true(big.dropped > 0);
    /* another client is served meanwhile */
    rpc_endpoint *cli = client(&f.loop, 0);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(cli, "srv", f.addr, &p), 0);
    echo_once(&f.loop, p);
    /* the slow reader is cut (no write completed for idle_timeout_ms) */
    assert_true(run_until(&f.loop, pred_write_timeout, f.srv, T_WAIT));
    assert_int_equal(closes(f.srv, RPC_CLOSE_WRITE_TIMEOUT), 1);
    assert_int_equal(d.written, 1); /* every request reached the server: none was lost */
    assert_int_equal(big.served + big.dropped, SLOW_REQS);
    struct rpc_stats st;
    rpc_get_stats(f.srv, &st);
    assert_int_equal(st.queued_bytes, 0); /* the queued replies were released */
    assert_int_equal(st.queued_msgs, 0);
    assert_true(w.peak_bytes > 0);
    /* the per-connection bound held (the other client's echo replies are a few bytes, far
     * below the gap between 15 queued big replies and the bound) */
    assert_true(w.peak_bytes <= SLOW_QUEUE);
    echo_once(&f.loop, p); /* still serving */
    assert_int_equal(f.echo_count, 3);

    uv_check_stop(&chk);
    uv_close((uv_handle_t *)&chk, NULL);
    uv_close((uv_handle_t *)&d.tcp, deaf_closed);
    assert_true(run_until(&f.loop, pred_flag, &d.closed, T_WAIT));
    ep_close_wait(&f.loop, cli);
    srv_stop(&f);
    free(buf);
    free(big.reply);
}

/* ---- slow but steady reader ---- */

#define T_SMALL     15
#define SMALL_REPLY 4096
#define STEADY_REQS 2048 /* 8 MiB of replies: far more than the socket takes */
#define STEADY_READ 2048 /* bytes read every STEADY_MS: 40 KiB/s, below RPC_MIN_DRAIN_BPS */
#define STEADY_MS   50
#define STEADY_IDLE 6000 /* ms: longer than one socket refill at 40 KiB/s (see below) */

static void small_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct big *b = arg;
    (void)req;
    uv_buf_t iov = uv_buf_init((char *)b->reply, SMALL_REPLY);
    struct rpc_msg m = {.iov = &iov, .niov = 1};
    if (rpc_reply_send(reply, 0, NULL, &m, NULL, NULL) == KVMESH_EAGAIN) {
        rpc_reply_drop(reply);
        b->dropped++;
        return;
    }
    b->served++;
}

/* A raw client on the unix socket: writes its requests, then reads STEADY_READ bytes every
 * STEADY_MS straight from the socket (never through libuv's reader). */
struct steady {
    uv_pipe_t pipe;
    uv_connect_t creq;
    uv_write_t wr;
    uv_timer_t timer;
    uint8_t *data;
    size_t len;
    uint64_t got;
    int written, eof, closed, timer_closed;
};

static void steady_written(uv_write_t *w, int status)
{
    ((struct steady *)w->data)->written = status == 0 ? 1 : -1;
}

static void steady_connected(uv_connect_t *c, int status)
{
    struct steady *s = c->data;
    assert_int_equal(status, 0);
    uv_buf_t b = uv_buf_init((char *)s->data, (unsigned)s->len);
    s->wr.data = s;
    assert_int_equal(uv_write(&s->wr, (uv_stream_t *)&s->pipe, &b, 1, steady_written), 0);
}

static void steady_tick(uv_timer_t *t)
{
    struct steady *s = t->data;
    uv_os_fd_t fd;
    if (s->eof || uv_fileno((uv_handle_t *)&s->pipe, &fd) != 0)
        return;
    uint8_t b[STEADY_READ];
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    if (n > 0)
        s->got += (uint64_t)n;
    else if (n == 0)
        s->eof = 1;
}

static void steady_closed(uv_handle_t *h)
{
    struct steady *s = h->data;
    if (h == (uv_handle_t *)&s->timer)
        s->timer_closed = 1;
    else
        s->closed = 1;
}

/*
 * A peer that reads slowly but steadily keeps no slot: over a unix socket (the kernel takes
 * about 200 KiB in flight, and lets the writer in again each time about 3/4 of that was read) a
 * raw peer asks for 8 MiB of 4 KiB replies and reads 40 KiB/s. Frames finish every few seconds,
 * within the 6 s write stall bound, so that bound alone never cuts it (checked: with the drain
 * rate check removed the wait runs out); the drain rate bound does (40 KiB/s < 64 KiB/s): the
 * connection is closed with write_timeout and its queued bytes return to 0.
 */
static void test_steady_slow_reader_closed(void **state)
{
    (void)state;
    struct srvfx f;
    memset(&f, 0, sizeof(f));
    assert_int_equal(uv_loop_init(&f.loop), 0);
    struct rpc_config c;
    cfg_make(&c, "dep", "srv", NULL);
    c.idle_timeout_ms = STEADY_IDLE;
    c.max_queue_bytes = SLOW_QUEUE;
    assert_int_equal(rpc_endpoint_new(&f.loop, &c, &f.srv), 0);
    char path[108];
    snprintf(path, sizeof(path), "/tmp/kvmesh-idle-rpc-%d.sock", (int)getpid());
    unlink(path);
    assert_int_equal(rpc_listen_unix(f.srv, path), 0);
    rpc_register_handler(f.srv, T_ECHO, echo_handler, &f.echo_count);
    struct big small = {.reply = calloc(1, SMALL_REPLY)};
    assert_non_null(small.reply);
    rpc_register_handler(f.srv, T_SMALL, small_handler, &small);

    struct steady s;
    memset(&s, 0, sizeof(s));
    s.data = malloc(1024 + (size_t)STEADY_REQS * FRAME_FIXED_SIZE);
    assert_non_null(s.data);
    size_t off = handshake_and_request(s.data);
    for (uint64_t i = 0; i < STEADY_REQS; i++)
        off += put_frame(s.data + off, FRAME_REQUEST, T_SMALL, 2 + i, NULL, 0, NULL, 0);
    s.len = off;
    assert_int_equal(uv_pipe_init(&f.loop, &s.pipe, 0), 0);
    s.pipe.data = &s;
    s.creq.data = &s;
    uv_pipe_connect(&s.creq, &s.pipe, path, steady_connected);
    uv_timer_init(&f.loop, &s.timer);
    s.timer.data = &s;
    uv_timer_start(&s.timer, steady_tick, STEADY_MS, STEADY_MS);

    assert_true(run_until(&f.loop, pred_write_timeout, f.srv, T_WAIT));
    assert_int_equal(closes(f.srv, RPC_CLOSE_WRITE_TIMEOUT), 1);
    assert_int_equal(s.written, 1);
    assert_true(s.got > 0); /* it was reading all along */
    struct rpc_stats st;
    rpc_get_stats(f.srv, &st);
    assert_int_equal(st.queued_bytes, 0); /* the queued replies were released */
    printf("steady reader: read %" PRIu64 " bytes before the close; %d replies queued\n", s.got,
           small.served);

    uv_timer_stop(&s.timer);
    uv_close((uv_handle_t *)&s.timer, steady_closed);
    uv_close((uv_handle_t *)&s.pipe, steady_closed);
    assert_true(run_until(&f.loop, pred_flag, &s.closed, T_WAIT));
    assert_true(run_until(&f.loop, pred_flag, &s.timer_closed, T_WAIT));
    srv_stop(&f);
    unlink(path);
    free(s.data);
    free(small.reply);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silent_after_handshake),
        cmocka_unit_test(test_slow_loris_closed),
        cmocka_unit_test(test_request_in_service_is_not_idle),
        cmocka_unit_test(test_outbound_idle_close_and_reconnect),
        cmocka_unit_test(test_slow_reader_closed),
        cmocka_unit_test(test_steady_slow_reader_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
