/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_basic.c — RPC over real loopback sockets (TCP IPv4/IPv6, unix): echo with body, payload
 * iovecs and trace context; many concurrent requests completed out of order on one reused
 * connection; deadlines; cancellation; notifications; backpressure; frame size limits; large
 * payloads; reconnect after the server restarts.
 */
#include "rpc_testutil.h"

#include "obs/metrics.h"
#include "tmpdir.h"

#include <unistd.h>

struct fx {
    uv_loop_t loop;
    rpc_endpoint *srv, *cli;
    int port;
    char addr[64];
    struct held held;
    int echo_count;
};

static struct fx *fx_new(const struct rpc_config *ccfg, const struct rpc_config *scfg)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct rpc_config a, b;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    cfg_make(&a, "dep", "srv", NULL);
    cfg_make(&b, "dep", "cli", NULL);
    assert_int_equal(rpc_endpoint_new(&f->loop, scfg ? scfg : &a, &f->srv), 0);
    assert_int_equal(rpc_endpoint_new(&f->loop, ccfg ? ccfg : &b, &f->cli), 0);
    assert_int_equal(rpc_listen_tcp(f->srv, "127.0.0.1", 0, &f->port), 0);
    snprintf(f->addr, sizeof(f->addr), "tcp:127.0.0.1:%d", f->port);
    rpc_register_handler(f->srv, T_ECHO, echo_handler, &f->echo_count);
    rpc_register_handler(f->srv, T_HOLD, hold_handler, &f->held);
    return f;
}

static void fx_free(struct fx *f)
{
    held_drop_all(&f->held);
    ep_close_wait(&f->loop, f->cli);
    ep_close_wait(&f->loop, f->srv);
    loop_finish(&f->loop);
    free(f);
}

static void do_echo(struct fx *f, rpc_peer *p, size_t payload_len, struct result *r)
{
    uint8_t *a = malloc(payload_len / 2 + 1), *b = malloc(payload_len - payload_len / 2 + 1);
    for (size_t i = 0; i < payload_len / 2; i++)
        a[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < payload_len - payload_len / 2; i++)
        b[i] = (uint8_t)(i * 13 + 1);
    uv_buf_t iov[2] = {uv_buf_init((char *)a, (unsigned)(payload_len / 2)),
                       uv_buf_init((char *)b, (unsigned)(payload_len - payload_len / 2))};
    struct frame_trace tr = {.flags = FRAME_TRACE_SAMPLED};
    for (int i = 0; i < 16; i++)
        tr.trace_id[i] = (uint8_t)(0xA0 + i);
    for (int i = 0; i < 8; i++)
        tr.span_id[i] = (uint8_t)(0x10 + i);
    struct rpc_msg m = {.type = T_ECHO,
                        .body = (const uint8_t *)"hello-body",
                        .body_len = 10,
                        .iov = iov,
                        .niov = 2,
                        .timeout_ms = 10000,
                        .trace = &tr};
    memset(r, 0, sizeof(*r));
    assert_int_equal(rpc_call(p, &m, result_cb, r, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, r, 15000));
    if (r->status)
        fprintf(stderr, "call failed: %s\n", r->error);
    assert_int_equal(r->status, 0);
    assert_int_equal(r->body_len, 10);
    assert_memory_equal(r->body, "hello-body", 10);
    assert_int_equal(r->payload_len, payload_len);
    if (payload_len) {
        assert_memory_equal(r->payload, a, payload_len / 2);
        assert_memory_equal(r->payload + payload_len / 2, b, payload_len - payload_len / 2);
    }
    assert_memory_equal(&r->trace, &tr, sizeof(tr));
    free(a);
    free(b);
}

static void test_echo_ipv4_reuses_connection(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p, *p2;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p2), 0);
    assert_ptr_equal(p, p2);
    struct result r;
    for (int i = 0; i < 3; i++) {
        do_echo(f, p, 1000 + (size_t)i, &r);
        result_free(&r);
    }
    do_echo(f, p, 0, &r);
    result_free(&r);
    struct rpc_stats cs, ss;
    rpc_get_stats(f->cli, &cs);
    rpc_get_stats(f->srv, &ss);
    assert_int_equal(cs.conns_connected, 1);
    assert_int_equal(ss.conns_accepted, 1);
    assert_int_equal(cs.calls_ok, 4);
    assert_int_equal(f->echo_count, 4);
    assert_true(rpc_peer_connected(p));
    fx_free(f);
}

static void test_large_payload(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r;
    do_echo(f, p, 24u << 20, &r);
    result_free(&r);
    fx_free(f);
}

/* ---- payload sinks (rpc.h) ---- */

#define T_SINK 20

enum sink_mode { SINK_DIRECT, SINK_DISCARD, SINK_POOLED };

struct sinkfx {
    enum sink_mode mode;
    uint8_t *dst; /* SINK_DIRECT: where the payload goes */
    uint64_t landed;
    int in_order; /* every landed run followed the one before, inside RPC_SINK_BLOCK */
    int offered, handled, aborted;
    int saw_payload;  /* the last handler call's req->payload was set */
    int sunk;         /* the last handler call's req->sunk */
    size_t first_run; /* length of the first landed run of the current payload */
};

static void sinkt_landed(void *ctx, const uint8_t *p, size_t n)
{
    struct sinkfx *s = ctx;
    if (p != s->dst + s->landed || n == 0 || n > RPC_SINK_BLOCK)
        s->in_order = 0;
    if (s->landed == 0)
        s->first_run = n;
    s->landed += n;
}

static void sinkt_abort(void *ctx)
{
    ((struct sinkfx *)ctx)->aborted++;
}

static void sinkt_offer(const struct rpc_request *req, void *arg, struct rpc_sink *out)
{
    struct sinkfx *s = arg;
    s->offered++;
    assert_null(req->payload);
    assert_true(req->payload_len > 0);
    assert_int_equal(req->body_len, 4);
    assert_memory_equal(req->body, "sink", 4);
    out->ctx = s;
    out->abort = sinkt_abort;
    if (s->mode == SINK_DIRECT) {
        out->dst = s->dst;
        out->landed = sinkt_landed;
    } else if (s->mode == SINK_DISCARD) {
        out->discard = 1;
    }
}

static void sinkt_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct sinkfx *s = arg;
    s->handled++;
    assert_ptr_equal(req->sink_ctx, s);
    s->saw_payload = req->payload != NULL;
    s->sunk = req->sunk;
    uint8_t b = req->payload ? req->payload[req->payload_len - 1] : 0;
    struct rpc_msg m = {.type = T_SINK, .body = &b, .body_len = 1};
    assert_int_equal(rpc_reply_send(reply, 0, NULL, &m, NULL, NULL), 0);
}

static void sink_call(struct fx *f, rpc_peer *p, const uint8_t *v, size_t len, struct result *r)
{
    uv_buf_t iov = uv_buf_init((char *)v, (unsigned)len);
    struct rpc_msg m = {.type = T_SINK,
                        .body = (const uint8_t *)"sink",
                        .body_len = 4,
                        .iov = &iov,
                        .niov = 1,
                        .timeout_ms = 20000};
    memset(r, 0, sizeof(*r));
    assert_int_equal(rpc_call(p, &m, result_cb, r, NULL), 0);
}

static int pred_landed(void *arg)
{
    return ((struct sinkfx *)arg)->landed > 0;
}

static int pred_aborted(void *arg)
{
    return ((struct sinkfx *)arg)->aborted > 0;
}

/* A request type with a payload sink: the payload lands in the sink's dst straight from the
 * socket, large (direct reads, in runs of at most RPC_SINK_BLOCK) and small (through the
 * staging buffer), every byte folded in order; a discarding sink keeps the stream in step (the
 * next request on the connection is served); a sink that names no dst leaves the payload in
 * req->payload; a connection lost in the middle of the payload aborts the sink's context and
 * runs no handler. */
static void test_payload_sink(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    const size_t big = (32u << 20) + 3;
    struct sinkfx s = {.dst = malloc(big)};
    uint8_t *v = malloc(big);
    assert_non_null(s.dst);
    assert_non_null(v);
    for (size_t i = 0; i < big; i++)
        v[i] = (uint8_t)(i * 131 + (i >> 12));
    assert_int_equal(rpc_register_handler(f->srv, T_SINK, sinkt_handler, &s), 0);
    assert_int_equal(rpc_register_sink(f->srv, T_SINK, sinkt_offer), 0);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r;
    struct rpc_stats st;
    const size_t sizes[] = {(1u << 20) + 5, 100}; /* direct reads, then the staging buffer */
    for (int i = 0; i < 2; i++) {
        memset(s.dst, 0, sizes[i]);
        s.landed = 0;
        s.in_order = 1;
        sink_call(f, p, v, sizes[i], &r);
        assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
        assert_int_equal(r.status, 0);
        assert_int_equal(s.offered, i + 1);
        assert_int_equal(s.handled, i + 1);
        assert_false(s.saw_payload);
        assert_true(s.sunk);
        assert_int_equal(s.landed, sizes[i]);
        assert_true(s.in_order);
        assert_memory_equal(s.dst, v, sizes[i]);
        result_free(&r);
    }
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.sink_direct, 2);

    s.mode = SINK_DISCARD;
    sink_call(f, p, v, 1u << 20, &r);
    assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, 0);
    assert_int_equal(s.handled, 3);
    assert_false(s.saw_payload);
    assert_true(s.sunk);
    result_free(&r);
    do_echo(f, p, 70000, &r); /* the stream is in step after the discarded payload */
    result_free(&r);

    s.mode = SINK_POOLED;
    sink_call(f, p, v, 200000, &r);
    assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, 0);
    assert_int_equal(s.handled, 4);
    assert_true(s.saw_payload);
    assert_false(s.sunk);
    assert_int_equal(r.body_len, 1);
    assert_int_equal(r.body[0], v[200000 - 1]);
    result_free(&r);
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.sink_direct, 2);
    assert_int_equal(st.sink_discarded, 1);
    assert_int_equal(st.sink_aborted, 0);
    assert_int_equal(st.conns_accepted, 1);

    /* A client endpoint closed while its large payload is being received: the server's
     * connection ends mid-frame, the sink's context is aborted, no handler runs. */
    s.mode = SINK_DIRECT;
    s.landed = 0;
    s.in_order = 1;
    struct rpc_config cc;
    cfg_make(&cc, "dep", "cli2", NULL);
    rpc_endpoint *cli2;
    assert_int_equal(rpc_endpoint_new(&f->loop, &cc, &cli2), 0);
    rpc_peer *p2;
    assert_int_equal(rpc_peer_get(cli2, "srv", f->addr, &p2), 0);
    sink_call(f, p2, v, big, &r);
    assert_true(run_until(&f->loop, pred_landed, &s, T_WAIT));
    assert_true(s.landed < big); /* (at most a few MiB land per loop turn) */
    ep_close_wait(&f->loop, cli2);
    assert_true(r.done && r.status != 0);
    assert_true(run_until(&f->loop, pred_aborted, &s, T_WAIT));
    assert_int_equal(s.aborted, 1);
    assert_int_equal(s.handled, 4);
    assert_true(s.in_order);
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.sink_aborted, 1);
    result_free(&r);
    free(v);
    free(s.dst);
    fx_free(f);
}

/* ---- notification sinks and holds (rpc.h) ---- */

#define T_NSINK 21

struct nsinkfx {
    uint8_t *dst;
    uint64_t landed;
    int holds, releases, held; /* held: inside a hold now */
    int allow;                 /* holds granted before the sink lets dst go (-1: all) */
    int offered, handled, aborted, nested;
    int sunk, saw_payload;
};

static bool nsink_hold(void *ctx)
{
    struct nsinkfx *s = ctx;
    if (s->allow >= 0 && s->holds >= s->allow)
        return false;
    s->nested += s->held;
    s->held = 1;
    s->holds++;
    return true;
}

static void nsink_release(void *ctx)
{
    struct nsinkfx *s = ctx;
    s->held = 0;
    s->releases++;
}

static void nsink_landed(void *ctx, const uint8_t *p, size_t n)
{
    struct nsinkfx *s = ctx;
    s->nested += !s->held; /* (runs inside its hold) */
    (void)p;
    s->landed += n;
}

static void nsink_abort(void *ctx)
{
    ((struct nsinkfx *)ctx)->aborted++;
}

static void nsink_offer(const struct rpc_request *req, void *arg, struct rpc_sink *out)
{
    struct nsinkfx *s = arg;
    s->offered++;
    assert_true(req->one_way);
    assert_null(req->payload);
    out->dst = s->dst;
    out->landed = nsink_landed;
    out->hold = nsink_hold;
    out->release = nsink_release;
    out->abort = nsink_abort;
    out->ctx = s;
}

static void nsink_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct nsinkfx *s = arg;
    assert_null(reply);
    assert_ptr_equal(req->sink_ctx, s);
    s->handled++;
    s->sunk = req->sunk;
    s->saw_payload = req->payload != NULL;
}

static int pred_nhandled(void *arg)
{
    return ((struct nsinkfx *)arg)->handled > 0;
}

/* A notification type with a payload sink (rpc_register_notify_sink): its payload lands in dst
 * under the sink's hold (every write between a hold and its release, landed inside), and the
 * notification handler gets the sink's ctx. A sink whose hold refuses after the first write (its
 * owner let dst go): the rest of the frame is discarded (sink_let_go), nothing past the bytes
 * landed before is written (the guard pattern there stays), the handler still ends the ctx, and
 * the connection stays in step (an echo after it). */
static void test_notify_sink_hold(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    const size_t len = (1u << 20) + 7;
    struct nsinkfx s = {.dst = malloc(len), .allow = -1};
    uint8_t *v = malloc(len);
    assert_non_null(s.dst);
    assert_non_null(v);
    for (size_t i = 0; i < len; i++)
        v[i] = (uint8_t)(i * 37 + (i >> 10));
    assert_int_equal(rpc_register_notify_handler(f->srv, T_NSINK, nsink_handler, &s), 0);
    assert_int_equal(rpc_register_notify_sink(f->srv, T_NSINK, nsink_offer), 0);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    uv_buf_t iov = uv_buf_init((char *)v, (unsigned)len);
    struct rpc_msg m = {
        .type = T_NSINK, .body = (const uint8_t *)"n", .body_len = 1, .iov = &iov, .niov = 1};
    memset(s.dst, 0, len);
    assert_int_equal(rpc_notify(p, &m, NULL, NULL), 0);
    assert_true(run_until(&f->loop, pred_nhandled, &s, T_WAIT));
    assert_int_equal(s.offered, 1);
    assert_true(s.sunk);
    assert_false(s.saw_payload);
    assert_int_equal(s.landed, len);
    assert_memory_equal(s.dst, v, len);
    assert_true(s.holds >= 2); /* (at least a staged copy and a direct read, or several reads) */
    assert_int_equal(s.holds, s.releases);
    assert_int_equal(s.nested, 0);
    struct rpc_stats st;
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.sink_direct, 1);
    assert_int_equal(st.sink_let_go, 0);

    /* the owner lets dst go after the first write */
    memset(s.dst, 0xa5, len);
    s.landed = 0;
    s.holds = s.releases = s.handled = 0;
    s.allow = 1;
    assert_int_equal(rpc_notify(p, &m, NULL, NULL), 0);
    assert_true(run_until(&f->loop, pred_nhandled, &s, T_WAIT));
    assert_int_equal(s.offered, 2);
    assert_int_equal(s.holds, 1);
    assert_int_equal(s.releases, 1);
    assert_int_equal(s.nested, 0);
    assert_true(s.landed > 0 && s.landed < len);
    assert_memory_equal(s.dst, v, s.landed);
    for (size_t i = s.landed; i < len; i++)
        assert_int_equal(s.dst[i], 0xa5);
    assert_int_equal(s.aborted, 0);
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.sink_direct, 2);
    assert_int_equal(st.sink_let_go, 1);
    struct result r;
    do_echo(f, p, 70000, &r); /* the stream is in step after the discarded rest */
    result_free(&r);
    free(v);
    free(s.dst);
    fx_free(f);
}

/* After a frame whose payload was read directly, the next frame's first read takes at most
 * RPC_RX_HEAD_READ bytes (rpc_conn.c alloc_cb): of a large payload that follows, at most that
 * much passes through the staging buffer (its first landed run), the rest is read straight into
 * the sink. Frames of every size that follow a large one arrive whole and in step. */
static void test_head_read_after_large(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    const size_t len = 256u << 10;
    struct sinkfx s = {.dst = malloc(len)};
    uint8_t *v = malloc(len);
    assert_non_null(s.dst);
    assert_non_null(v);
    for (size_t i = 0; i < len; i++)
        v[i] = (uint8_t)(i * 29 + (i >> 9));
    assert_int_equal(rpc_register_handler(f->srv, T_SINK, sinkt_handler, &s), 0);
    assert_int_equal(rpc_register_sink(f->srv, T_SINK, sinkt_offer), 0);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r;
    for (int i = 0; i < 4; i++) {
        memset(s.dst, 0, len);
        s.landed = 0;
        s.in_order = 1;
        sink_call(f, p, v, len, &r);
        assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
        assert_int_equal(r.status, 0);
        assert_int_equal(s.landed, len);
        assert_true(s.in_order);
        assert_memory_equal(s.dst, v, len);
        if (i > 0) /* the connection's previous frame was large */
            assert_true(s.first_run <= RPC_RX_HEAD_READ - FRAME_FIXED_SIZE);
        result_free(&r);
    }
    /* small, large (pooled), small and empty frames after large ones, both directions */
    const size_t sizes[] = {100, 70000, 3000, 300000, 0, 65536, 65535, 5000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        do_echo(f, p, sizes[i], &r);
        result_free(&r);
    }
    struct rpc_stats st;
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.sink_direct, 4);
    assert_int_equal(st.conns_accepted, 1);
    free(v);
    free(s.dst);
    fx_free(f);
}

/* ---- lent payloads (rpc_msg.lend) ---- */

/* A call whose len-byte payload is lent (rpc_msg.lend) from a malloc'd buffer that is scribbled
 * over and freed as soon as rpc_call returns (what a caller that abandoned its op may do): the
 * echo must still carry the original bytes. The server runs on this thread's loop, so it reads
 * nothing while rpc_call writes: a payload larger than the socket takes is written in part.
 * cancel: the call is cancelled right after (its callback: KVMESH_ECANCELED once the frame's
 * write ended), then an echo shows the connection still in step. */
static void lent_call(struct fx *f, rpc_peer *p, size_t len, int cancel)
{
    uint8_t *v = malloc(len), *orig = malloc(len);
    assert_non_null(v);
    assert_non_null(orig);
    for (size_t i = 0; i < len; i++)
        orig[i] = v[i] = (uint8_t)(i * 31 + (i >> 11) + len);
    uv_buf_t iov[2] = {uv_buf_init((char *)v, (unsigned)(len / 3)),
                       uv_buf_init((char *)v + len / 3, (unsigned)(len - len / 3))};
    struct rpc_msg m = {.type = T_ECHO,
                        .body = (const uint8_t *)"lent",
                        .body_len = 4,
                        .iov = iov,
                        .niov = 2,
                        .timeout_ms = 20000,
                        .lend = 1};
    struct result r;
    memset(&r, 0, sizeof(r));
    rpc_call_t *call = NULL;
    assert_int_equal(rpc_call(p, &m, result_cb, &r, &call), 0);
    memset(v, 0xA5, len); /* the caller's buffer is its own again */
    free(v);
    if (cancel)
        rpc_cancel(call);
    assert_true(run_until(&f->loop, pred_result, &r, 30000));
    if (cancel) {
        assert_int_equal(r.status, KVMESH_ECANCELED);
    } else {
        assert_int_equal(r.status, 0);
        assert_int_equal(r.payload_len, len);
        assert_memory_equal(r.payload, orig, len);
    }
    result_free(&r);
    free(orig);
}

/* rpc_msg.lend: the caller's payload is lent until rpc_call returns. Before the connection is up
 * the whole payload is copied; a payload the socket takes whole is not copied; of one it takes in
 * part, only the unwritten rest is; a call cancelled while its frame is half-written ends with
 * KVMESH_ECANCELED, its frame written from the copy (the connection stays in step). Without the
 * copy each echo would carry the scribbled bytes (or read freed memory). */
static void test_lent_payload(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct rpc_stats st;
    const size_t big = 16u << 20; /* more than a loopback socket pair holds */
    /* not connected yet: the frame waits for the handshake, all of its payload copied */
    lent_call(f, p, 300000, 0);
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.lent, 1);
    assert_int_equal(st.lent_copied, 1);
    assert_int_equal(st.lent_copied_bytes, 300000);
    /* connected, small: written whole inside rpc_call, nothing copied */
    lent_call(f, p, 4096, 0);
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.lent, 2);
    assert_int_equal(st.lent_copied, 1);
    /* larger than the socket takes: the rest copied, the part written not */
    lent_call(f, p, big, 0);
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.lent, 3);
    assert_int_equal(st.lent_copied, 2);
    uint64_t rest = st.lent_copied_bytes - 300000;
    assert_true(rest > 0 && rest < big);
    /* cancelled while half-written: ECANCELED, the frame ends from the copy */
    lent_call(f, p, big, 1);
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.lent_copied, 3);
    struct result r;
    do_echo(f, p, 70000, &r);
    result_free(&r);
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.conns_accepted, 1);
    fx_free(f);
}

static int64_t rd_reg(struct obs_registry *m, const char *family, unsigned tr, unsigned xop)
{
    int64_t v = -1;
    assert_int_equal(obs_metrics_read(m, family, tr, xop, &v), 0);
    return v;
}

/* Echoes over tcp (IPv6) and a unix socket; the RPC figures of the unix connection are labelled
 * transport="unix", those of the tcp one "tcp" (rpc_get_stats sums both). */
static void test_ipv6_and_unix(void **state)
{
    (void)state;
    struct obs_registry *ms, *mc;
    assert_int_equal(obs_registry_new(&ms), 0);
    assert_int_equal(obs_registry_new(&mc), 0);
    struct rpc_config sc, cc;
    cfg_make(&sc, "dep", "srv", NULL);
    cfg_make(&cc, "dep", "cli", NULL);
    sc.metrics = ms;
    cc.metrics = mc;
    struct fx *f = fx_new(&cc, &sc);
    int port6;
    assert_int_equal(rpc_listen_tcp(f->srv, "::1", 0, &port6), 0);
    /* the socket under this test's scratch directory, removed at exit also when an assertion
     * fails (tests/support/tmpdir.h) */
    static char dir[200];
    assert_int_equal(ttmp_make_auto(dir, sizeof(dir), "kvmesh-rpc-basic"), 0);
    char path[256], addr[300];
    assert_true((size_t)snprintf(path, sizeof(path), "%s/rpc.sock", dir) < sizeof(path));
    assert_int_equal(rpc_listen_unix(f->srv, path), 0);
    rpc_peer *p6, *pu;
    snprintf(addr, sizeof(addr), "tcp:[::1]:%d", port6);
    assert_int_equal(rpc_peer_get(f->cli, "srv", addr, &p6), 0);
    snprintf(addr, sizeof(addr), "unix:%s", path);
    assert_int_equal(rpc_peer_get(f->cli, "srv", addr, &pu), 0);
    assert_ptr_not_equal(p6, pu);
    struct result r;
    do_echo(f, p6, 5000, &r);
    result_free(&r);
    int64_t tcp_sent = rd_reg(mc, "transport_bytes_total", OBS_TRANSPORT_TCP, OBS_XOP_RPC_SEND);
    int64_t tcp_got = rd_reg(ms, "transport_bytes_total", OBS_TRANSPORT_TCP, OBS_XOP_RPC_RECEIVE);
    assert_true(tcp_sent > 5000 && tcp_got > 5000);
    assert_int_equal(rd_reg(mc, "transport_operations_total", OBS_TRANSPORT_TCP, OBS_XOP_RPC_SEND),
                     1);
    do_echo(f, pu, 200000, &r);
    result_free(&r);
    unlink(path);            /* connected already; the name is no longer needed */
    do_echo(f, pu, 100, &r); /* the established unix connection is reused */
    result_free(&r);
    /* the unix connection's calls, requests and bytes: under unix, none under tcp */
    assert_int_equal(rd_reg(mc, "transport_operations_total", OBS_TRANSPORT_UNIX, OBS_XOP_RPC_SEND),
                     2);
    assert_int_equal(
        rd_reg(ms, "transport_operations_total", OBS_TRANSPORT_UNIX, OBS_XOP_RPC_RECEIVE), 2);
    assert_true(rd_reg(mc, "transport_bytes_total", OBS_TRANSPORT_UNIX, OBS_XOP_RPC_SEND) > 200000);
    assert_true(rd_reg(ms, "transport_bytes_total", OBS_TRANSPORT_UNIX, OBS_XOP_RPC_RECEIVE) >
                200000);
    assert_int_equal(rd_reg(mc, "transport_bytes_total", OBS_TRANSPORT_TCP, OBS_XOP_RPC_SEND),
                     tcp_sent);
    assert_int_equal(rd_reg(ms, "transport_bytes_total", OBS_TRANSPORT_TCP, OBS_XOP_RPC_RECEIVE),
                     tcp_got);
    assert_int_equal(rd_reg(mc, "transport_operations_total", OBS_TRANSPORT_TCP, OBS_XOP_RPC_SEND),
                     1);
    struct rpc_stats st;
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.calls_ok, 3); /* both transports */
    fx_free(f);
    obs_registry_free(ms);
    obs_registry_free(mc);
    assert_int_equal(ttmp_remove(dir), 0);
}

#define NCONC 1000

struct conc {
    struct result r[NCONC];
    int counter;
    int done_count;
};

static int pred_conc_done(void *arg)
{
    struct conc *c = arg;
    for (int i = 0; i < NCONC; i++)
        if (!c->r[i].done)
            return 0;
    return 1;
}

static void test_concurrent_out_of_order(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct conc *c = calloc(1, sizeof(*c));
    for (int i = 0; i < NCONC; i++) {
        char body[16];
        int n = snprintf(body, sizeof(body), "req-%d", i);
        struct rpc_msg m = {
            .type = T_HOLD, .body = (uint8_t *)body, .body_len = (size_t)n, .timeout_ms = 15000};
        c->r[i].order_counter = &c->counter;
        assert_int_equal(rpc_call(p, &m, result_cb, &c->r[i], NULL), 0);
    }
    /* Wait until the server holds every request, then answer them in a shuffled order. */
    int want[2] = {0, NCONC};
    (void)want;
    for (int guard = 0; f->held.calls < NCONC && guard < 3000; guard++)
        run_for(&f->loop, 5);
    assert_int_equal(f->held.n, NCONC);
    struct rpc_stats ss;
    rpc_get_stats(f->srv, &ss);
    assert_int_equal(ss.conns_accepted, 1);
    unsigned seed = 12345;
    for (int i = NCONC - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1));
        rpc_reply *t = f->held.r[i];
        f->held.r[i] = f->held.r[j];
        f->held.r[j] = t;
    }
    int first_id = -1;
    for (int i = 0; i < NCONC; i++) {
        rpc_reply *rep = f->held.r[i];
        const struct rpc_request *rq = rpc_reply_request(rep);
        if (i == 0) {
            char num[16] = {0};
            memcpy(num, rq->body + 4, rq->body_len - 4 < 15 ? rq->body_len - 4 : 15);
            first_id = atoi(num);
        }
        struct rpc_msg m = {.body = rq->body, .body_len = rq->body_len};
        assert_int_equal(rpc_reply_send(rep, 0, NULL, &m, NULL, NULL), 0);
        /* Let some responses travel between batches so completion interleaves. */
        if (i % 100 == 99)
            run_for(&f->loop, 1);
    }
    f->held.n = 0;
    assert_true(run_until(&f->loop, pred_conc_done, c, 15000));
    int out_of_order = 0;
    for (int i = 0; i < NCONC; i++) {
        char want_body[16];
        int n = snprintf(want_body, sizeof(want_body), "req-%d", i);
        assert_int_equal(c->r[i].status, 0);
        assert_int_equal(c->r[i].body_len, (size_t)n);
        assert_memory_equal(c->r[i].body, want_body, (size_t)n);
        if (c->r[i].order != i)
            out_of_order++;
        result_free(&c->r[i]);
    }
    assert_true(out_of_order > NCONC / 2);
    assert_int_equal(c->r[first_id].order, 0); /* the first answered completed first */
    struct rpc_stats cs;
    rpc_get_stats(f->cli, &cs);
    assert_int_equal(cs.conns_connected, 1);
    assert_int_equal(cs.calls_ok, NCONC);
    (void)want;
    free(c);
    fx_free(f);
}

static void test_deadline_fires(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r = {0};
    /* Connect first, so the 150 ms call is written at once even on a slow host. */
    do_echo(f, p, 10, &r);
    result_free(&r);
    memset(&r, 0, sizeof(r));
    struct rpc_msg m = {.type = T_HOLD, .timeout_ms = 150};
    uint64_t t0 = uv_now(&f->loop);
    assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
    uint64_t el = uv_now(&f->loop) - t0;
    assert_int_equal(r.status, KVMESH_ETIMEDOUT);
    assert_true(el >= 140); /* not early; how late is the host's business, not a failure */
    for (int g = 0; g < 10000 && f->held.calls < 1; g++)
        run_for(&f->loop, 2);
    assert_int_equal(f->held.calls, 1);
    /* The server saw the caller's remaining budget in the fixed header. */
    uint32_t seen = rpc_reply_request(f->held.r[0])->deadline_ms;
    assert_true(seen > 0 && seen <= 150);
    struct rpc_stats cs;
    rpc_get_stats(f->cli, &cs);
    assert_int_equal(cs.calls_timed_out, 1);
    /* A late reply is dropped and counted, the connection stays healthy. */
    assert_int_equal(rpc_reply_send(f->held.r[0], 0, NULL, NULL, NULL, NULL), 0);
    f->held.n = 0;
    int want[2] = {0, 1};
    (void)want;
    for (int g = 0; g < 10000 && cs.responses_late < 1; g++) {
        run_for(&f->loop, 2);
        rpc_get_stats(f->cli, &cs);
    }
    assert_int_equal(cs.responses_late, 1);
    do_echo(f, p, 10, &r);
    result_free(&r);
    fx_free(f);
}

static void test_cancel_and_unknown_type(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    /* Cancel before the connection exists: the frame is never written. */
    struct result r0 = {0}, r1 = {0}, r2 = {0};
    rpc_call_t *h0, *h1;
    struct rpc_msg m = {.type = T_HOLD, .timeout_ms = 10000};
    assert_int_equal(rpc_call(p, &m, result_cb, &r0, &h0), 0);
    rpc_cancel(h0);
    assert_true(run_until(&f->loop, pred_result, &r0, T_WAIT));
    assert_int_equal(r0.status, KVMESH_ECANCELED);
    /* Cancel after the server received it: the server learns through a CANCEL frame. */
    assert_int_equal(rpc_call(p, &m, result_cb, &r1, &h1), 0);
    int want[2] = {0, 1};
    (void)want;
    for (int g = 0; g < 10000 && f->held.n < 1; g++)
        run_for(&f->loop, 2);
    assert_int_equal(f->held.n, 1);
    assert_false(rpc_reply_canceled(f->held.r[0]));
    rpc_cancel(h1);
    assert_true(run_until(&f->loop, pred_result, &r1, T_WAIT));
    assert_int_equal(r1.status, KVMESH_ECANCELED);
    for (int g = 0; g < 10000 && !rpc_reply_canceled(f->held.r[0]); g++)
        run_for(&f->loop, 2);
    assert_true(rpc_reply_canceled(f->held.r[0]));
    assert_int_equal(rpc_reply_send(f->held.r[0], 0, NULL, NULL, NULL, NULL), KVMESH_ECANCELED);
    f->held.n = 0;
    /* A type without a handler answers KVMESH_ENOTSUP. */
    struct rpc_msg u = {.type = 999, .timeout_ms = 5000};
    assert_int_equal(rpc_call(p, &u, result_cb, &r2, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r2, T_WAIT));
    assert_int_equal(r2.status, KVMESH_ENOTSUP);
    assert_non_null(strstr(r2.error, "no handler"));
    struct rpc_stats cs;
    rpc_get_stats(f->cli, &cs);
    assert_int_equal(cs.calls_canceled, 2);
    fx_free(f);
}

struct notes {
    int n;
    size_t bytes;
    uint8_t last[64];
    int one_way;
    int sent_ok;
};

static void note_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct notes *nt = arg;
    assert_null(reply);
    nt->n++;
    nt->one_way = req->one_way;
    uint32_t from, type;
    assert_int_equal(rpc_env_decode(req, &from, &type), 0);
    assert_int_equal(from, 7);
    assert_int_equal(type, 0x10000 + (uint32_t)req->payload[0]);
    nt->bytes += req->payload_len;
    if (req->payload_len <= sizeof(nt->last))
        memcpy(nt->last, req->payload, req->payload_len);
}

static void note_sent(int status, void *arg)
{
    struct notes *nt = arg;
    if (status == 0)
        nt->sent_ok++;
}

static int pred_notes(void *arg)
{
    struct notes *nt = arg;
    return nt->n >= 100 && nt->sent_ok >= 50;
}

static void test_notifications_env_type(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    struct notes nt = {0};
    rpc_register_notify_handler(f->srv, RPC_TYPE_ENV_MESSAGE, note_handler, &nt);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    static uint8_t fixed[32];
    for (int i = 0; i < 100; i++) {
        uint8_t tmp[32];
        memset(tmp, i, sizeof(tmp));
        memset(fixed, i, sizeof(fixed));
        uv_buf_t b = uv_buf_init((char *)(i % 2 ? tmp : fixed), sizeof(tmp));
        uint8_t envb[8] = {0, 0, 0, 7, 0, 1, 0, (uint8_t)i};
        struct rpc_msg m = {
            .type = RPC_TYPE_ENV_MESSAGE, .body = envb, .body_len = 8, .iov = &b, .niov = 1};
        /* Odd: rpc_env_notify (copied, stack buffer reused at once); even: zero-copy notify. */
        if (i % 2)
            assert_int_equal(rpc_env_notify(p, 7, 0x10000 + (uint32_t)i, tmp, sizeof(tmp)), 0);
        else {
            assert_int_equal(rpc_notify(p, &m, note_sent, &nt), 0);
            assert_true(run_until(&f->loop, pred_never, NULL, 0) == 0);
            /* wait for the zero-copy buffer to be released before reusing it */
            for (int g = 0; g < 15000 && nt.sent_ok < i / 2 + 1; g++)
                run_for(&f->loop, 1);
            assert_int_equal(nt.sent_ok, i / 2 + 1);
        }
    }
    assert_true(run_until(&f->loop, pred_notes, &nt, T_WAIT));
    assert_int_equal(nt.n, 100);
    assert_int_equal(nt.bytes, 100 * 32);
    assert_int_equal(nt.one_way, 1);
    assert_int_equal(nt.last[0], 99);
    struct rpc_stats ss;
    rpc_get_stats(f->srv, &ss);
    assert_int_equal(ss.notifies_received, 100);
    /* A notification of a type that only has a request handler is dropped and counted; the
     * request handler never sees a NULL reply handle. */
    struct rpc_msg en = {.type = T_ECHO};
    assert_int_equal(rpc_notify(p, &en, NULL, NULL), 0);
    for (int g = 0; g < 15000 && ss.notifies_dropped == 0; g++) {
        run_for(&f->loop, 1);
        rpc_get_stats(f->srv, &ss);
    }
    assert_int_equal(ss.notifies_dropped, 1);
    assert_int_equal(f->echo_count, 0);
    struct result r;
    do_echo(f, p, 10, &r);
    result_free(&r);
    fx_free(f);
}

static void test_backpressure_and_frame_limit(void **state)
{
    (void)state;
    struct rpc_config cc;
    cfg_make(&cc, "dep", "cli", NULL);
    cc.max_queue_msgs = 4;
    cc.max_queue_bytes = 1u << 20;
    struct fx *f = fx_new(&cc, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    /* Before the connection is up every frame waits in the queue: the 5th is refused. */
    struct result r[6];
    memset(r, 0, sizeof(r));
    struct rpc_msg m = {.type = T_ECHO, .timeout_ms = 5000};
    for (int i = 0; i < 4; i++)
        assert_int_equal(rpc_call(p, &m, result_cb, &r[i], NULL), 0);
    assert_int_equal(rpc_call(p, &m, result_cb, &r[4], NULL), KVMESH_EAGAIN);
    assert_int_equal(rpc_notify(p, &m, NULL, NULL), KVMESH_EAGAIN);
    for (int i = 0; i < 4; i++) {
        assert_true(run_until(&f->loop, pred_result, &r[i], T_WAIT));
        assert_int_equal(r[i].status, 0);
    }
    assert_false(r[4].done);
    /* Byte bound: 768 KiB fits the empty queue, a second one does not. */
    size_t big = 768u << 10;
    uint8_t *buf = calloc(1, big);
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)big);
    struct rpc_msg mb = {.type = T_ECHO, .iov = &b, .niov = 1, .timeout_ms = 5000};
    memset(r, 0, sizeof(r));
    assert_int_equal(rpc_call(p, &mb, result_cb, &r[0], NULL), 0);
    int rc = rpc_call(p, &mb, result_cb, &r[1], NULL);
    /* The first may already be fully written to the socket; then the second fits too. */
    struct rpc_stats cs;
    rpc_get_stats(f->cli, &cs);
    if (rc == KVMESH_EAGAIN)
        assert_true(cs.eagain >= 3);
    else
        assert_int_equal(rc, 0);
    assert_true(run_until(&f->loop, pred_result, &r[0], T_WAIT));
    assert_int_equal(r[0].status, 0);
    if (rc == 0) {
        assert_true(run_until(&f->loop, pred_result, &r[1], T_WAIT));
        result_free(&r[1]);
    }
    result_free(&r[0]);
    free(buf);
    /* Frame limit on send: refused locally. */
    struct rpc_config sc;
    cfg_make(&sc, "dep", "small", NULL);
    sc.max_frame_bytes = 64u << 10;
    rpc_endpoint *small;
    assert_int_equal(rpc_endpoint_new(&f->loop, &sc, &small), 0);
    rpc_peer *sp;
    assert_int_equal(rpc_peer_get(small, "srv", f->addr, &sp), 0);
    uint8_t *big2 = calloc(1, 128u << 10);
    uv_buf_t b2 = uv_buf_init((char *)big2, 128u << 10);
    struct rpc_msg m2 = {.type = T_ECHO, .iov = &b2, .niov = 1};
    assert_int_equal(rpc_call(sp, &m2, result_cb, &r[2], NULL), KVMESH_ETOOBIG);
    ep_close_wait(&f->loop, small);
    free(big2);
    fx_free(f);
}

static void test_oversized_received_frame_closes(void **state)
{
    (void)state;
    struct rpc_config scfg;
    cfg_make(&scfg, "dep", "srv", NULL);
    scfg.max_frame_bytes = 256u << 10;
    struct fx *f = fx_new(NULL, &scfg);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r = {0};
    do_echo(f, p, 1000, &r);
    result_free(&r);
    uint8_t *buf = calloc(1, 1u << 20);
    uv_buf_t b = uv_buf_init((char *)buf, 1u << 20);
    struct rpc_msg m = {.type = T_ECHO, .iov = &b, .niov = 1, .timeout_ms = 5000};
    memset(&r, 0, sizeof(r));
    assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, KVMESH_ECONN);
    struct rpc_stats ss;
    rpc_get_stats(f->srv, &ss);
    assert_int_equal(ss.close[RPC_CLOSE_OVERSIZED], 1);
    assert_int_equal(f->echo_count, 1);
    /* The peer reconnects on the next call and works again. */
    do_echo(f, p, 1000, &r);
    result_free(&r);
    struct rpc_stats cs;
    rpc_get_stats(f->cli, &cs);
    assert_int_equal(cs.conns_connected, 2);
    free(buf);
    fx_free(f);
}

/* A call result with the loop time its callback ran at (result.at). */
struct timed_result {
    struct result r; /* first: pred_result works on the struct */
    uv_loop_t *loop;
};

static void timed_result_cb(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    struct timed_result *t = arg;
    result_cb(call, res, &t->r);
    t->r.at = uv_now(t->loop);
}

static void test_reconnect_after_restart(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r;
    do_echo(f, p, 100, &r);
    result_free(&r);
    /* Stop the server: the client notices, calls fail with ECONN (connect refused). The server's
     * close callback can end ep_close_wait's run before a pass reads the client side's EOF: a
     * call made then would go out on the lost connection and fail without the failed attempt
     * whose backoff r2 measures (a lost ready connection is redialled at once), so the test
     * waits (bounded) for the client to see the loss first. */
    ep_close_wait(&f->loop, f->srv);
    for (int g = 0; g < 10000 && rpc_peer_connected(p); g++)
        run_for(&f->loop, 1);
    assert_false(rpc_peer_connected(p));
    struct timed_result r1 = {.loop = &f->loop};
    struct rpc_msg m = {.type = T_ECHO, .timeout_ms = 5000};
    assert_int_equal(rpc_call(p, &m, timed_result_cb, &r1, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r1.r, T_WAIT));
    assert_int_equal(r1.r.status, KVMESH_ECONN);
    assert_non_null(strstr(rpc_peer_last_error(p), "connect"));
    /* The next attempt waits for the backoff (>= reconnect_min_ms after the failed attempt,
     * whose failure r1's callback saw: measured from there, not from the next call, which a
     * loaded host may make well after the failure) and fails again. */
    struct timed_result r2 = {.loop = &f->loop};
    assert_int_equal(rpc_call(p, &m, timed_result_cb, &r2, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r2.r, T_WAIT));
    assert_int_equal(r2.r.status, KVMESH_ECONN);
    assert_true(r2.r.at - r1.r.at + 2 >= RPC_DEFAULT_RECONNECT_MIN);
    /* The backoff doubled: the third attempt waits about twice as long. */
    struct timed_result r3 = {.loop = &f->loop};
    assert_int_equal(rpc_call(p, &m, timed_result_cb, &r3, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r3.r, T_WAIT));
    assert_int_equal(r3.r.status, KVMESH_ECONN);
    assert_true(r3.r.at - r2.r.at + 2 >= 2 * RPC_DEFAULT_RECONNECT_MIN);
    assert_int_equal(rpc_peer_epoch(p), 1);
    /* Restart the server on the same port with an older epoch: refused as a stale incarnation. */
    struct rpc_config sc;
    cfg_make(&sc, "dep", "srv", NULL);
    sc.local.runtime_epoch = 0;
    assert_int_equal(rpc_endpoint_new(&f->loop, &sc, &f->srv), 0);
    int port0;
    assert_int_equal(rpc_listen_tcp(f->srv, "127.0.0.1", f->port, &port0), 0);
    struct result r4 = {0};
    assert_int_equal(rpc_call(p, &m, result_cb, &r4, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r4, T_WAIT));
    assert_int_equal(r4.status, KVMESH_EINCOMPAT);
    assert_non_null(strstr(r4.error, "stale_epoch"));
    ep_close_wait(&f->loop, f->srv);
    /* Restart with a newer epoch (a restarted runtime): the same peer object reconnects. */
    sc.local.runtime_epoch = 2;
    assert_int_equal(rpc_endpoint_new(&f->loop, &sc, &f->srv), 0);
    int port2;
    assert_int_equal(rpc_listen_tcp(f->srv, "127.0.0.1", f->port, &port2), 0);
    assert_int_equal(port2, f->port);
    rpc_register_handler(f->srv, T_ECHO, echo_handler, &f->echo_count);
    rpc_register_handler(f->srv, T_HOLD, hold_handler, &f->held);
    do_echo(f, p, 100, &r);
    result_free(&r);
    assert_int_equal(rpc_peer_epoch(p), 2);
    struct rpc_stats cs;
    rpc_get_stats(f->cli, &cs);
    assert_int_equal(cs.conns_connected, 3);
    assert_int_equal(cs.refused_local[HS_STALE_EPOCH], 1);
    assert_true(cs.close[RPC_CLOSE_CONNECT_FAILED] >= 3);
    fx_free(f);
}

/* Held-call helpers for the bound tests. */
struct heldwait {
    struct held *h;
    int want;
};

static int pred_held(void *arg)
{
    struct heldwait *w = arg;
    return w->h->n >= w->want;
}

/*
 * Calls outstanding per peer are bounded (RPC_MAX_PENDING_CALLS), not only the unwritten send
 * queue: a server that never answers cannot make a client grow without limit.
 */
static void test_pending_calls_bounded(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result *r = calloc(RPC_MAX_PENDING_CALLS + 1, sizeof(*r));
    struct rpc_msg m = {.type = T_HOLD}; /* no deadline: only an answer would end them */
    int n = 0;
    for (int g = 0; g < 20000 && n < RPC_MAX_PENDING_CALLS; g++) {
        while (n < RPC_MAX_PENDING_CALLS) {
            int rc = rpc_call(p, &m, result_cb, &r[n], NULL);
            if (rc == KVMESH_EAGAIN)
                break; /* send queue full: let it drain */
            assert_int_equal(rc, 0);
            n++;
        }
        run_for(&f->loop, 2);
    }
    assert_int_equal(n, RPC_MAX_PENDING_CALLS);
    struct heldwait w = {&f->held, RPC_MAX_PENDING_CALLS};
    assert_true(run_until(&f->loop, pred_held, &w, 30000));
    struct rpc_stats st;
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.queued_msgs, 0); /* everything written: only the pending bound is left */
    assert_int_equal(rpc_call(p, &m, result_cb, &r[n], NULL), KVMESH_EAGAIN);
    /* One answer frees one slot. */
    assert_int_equal(rpc_reply_send(f->held.r[0], 0, NULL, NULL, NULL, NULL), 0);
    f->held.r[0] = f->held.r[--f->held.n];
    assert_true(run_until(&f->loop, pred_result, &r[0], 30000));
    assert_int_equal(r[0].status, 0);
    assert_int_equal(rpc_call(p, &m, result_cb, &r[n], NULL), 0);
    assert_true(run_until(&f->loop, pred_held, &w, 30000)); /* held: fx_free drops it */
    fx_free(f);
    free(r);
}

/*
 * Requests in service per inbound connection are bounded (RPC_MAX_REQUESTS_PER_CONN): a client
 * that cancels calls its server still holds, and calls again, gets KVMESH_EAGAIN answers once
 * the bound is reached, and the handler does not run for them.
 */
static void test_server_requests_bounded(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result junk;
    rpc_call_t *wave[1024];
    struct rpc_msg m = {.type = T_HOLD};
    for (int g = 0; g < 1000 && f->held.n < RPC_MAX_REQUESTS_PER_CONN; g++) {
        int k = 0, want = RPC_MAX_REQUESTS_PER_CONN - f->held.n;
        if (want > 1024)
            want = 1024;
        while (k < want) {
            memset(&junk, 0, sizeof(junk));
            int rc = rpc_call(p, &m, result_cb, &junk, &wave[k]);
            if (rc == KVMESH_EAGAIN)
                break;
            assert_int_equal(rc, 0);
            k++;
        }
        struct heldwait w = {&f->held, f->held.n + k};
        assert_true(run_until(&f->loop, pred_held, &w, 30000));
        for (int i = 0; i < k; i++)
            rpc_cancel(wave[i]); /* the client forgets them; the server still holds them */
    }
    assert_int_equal(f->held.n, RPC_MAX_REQUESTS_PER_CONN);
    int calls = f->held.calls;
    struct result last = {0};
    assert_int_equal(rpc_call(p, &m, result_cb, &last, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &last, 30000));
    assert_int_equal(last.status, KVMESH_EAGAIN);
    assert_int_equal(f->held.calls, calls);
    /* Replies free slots: the next request reaches the handler again. */
    held_drop_all(&f->held);
    struct result again = {0};
    struct rpc_msg e = {.type = T_ECHO, .timeout_ms = 30000};
    assert_int_equal(rpc_call(p, &e, result_cb, &again, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &again, 30000));
    assert_int_equal(again.status, 0);
    fx_free(f);
}

/* One echo of a body of body_len bytes (carried in the RpcHeader) and payload_len payload bytes. */
static void echo_big_body(struct fx *f, rpc_peer *p, size_t body_len, size_t payload_len)
{
    uint8_t *body = malloc(body_len), *pay = malloc(payload_len + 1);
    for (size_t i = 0; i < body_len; i++)
        body[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < payload_len; i++)
        pay[i] = (uint8_t)(i * 3);
    uv_buf_t iov = uv_buf_init((char *)pay, (unsigned)payload_len);
    struct rpc_msg m = {.type = T_ECHO,
                        .body = body,
                        .body_len = body_len,
                        .iov = &iov,
                        .niov = payload_len ? 1 : 0,
                        .timeout_ms = 10000};
    struct result r = {0};
    assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r, 15000));
    assert_int_equal(r.status, 0);
    assert_int_equal(r.body_len, body_len);
    assert_memory_equal(r.body, body, body_len);
    assert_int_equal(r.payload_len, payload_len);
    if (payload_len)
        assert_memory_equal(r.payload, pay, payload_len);
    result_free(&r);
    free(body);
    free(pay);
}

/* Large message buffers (a 300 KiB body, read straight into its header buffer, and a 256 KiB
 * payload) come back from each endpoint's pool once it is warm: no new allocation of a pooled
 * size on either side for bodies, none on the server for payloads (the client's caller takes
 * each received payload and frees it). With pool_bytes 0 nothing is kept. */
static void test_buffer_pool_reuse(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct rpc_stats c0, s0, c1, s1;
    for (int i = 0; i < 2; i++)
        echo_big_body(f, p, 300u << 10, 256u << 10);
    rpc_get_stats(f->cli, &c0);
    rpc_get_stats(f->srv, &s0);
    for (int i = 0; i < 5; i++)
        echo_big_body(f, p, 300u << 10, 256u << 10);
    rpc_get_stats(f->cli, &c1);
    rpc_get_stats(f->srv, &s1);
    assert_int_equal(s1.pool_misses, s0.pool_misses);
    assert_true(s1.pool_hits >= s0.pool_hits + 5 * 4); /* header, body, reply head, payload x2 */
    assert_true(c1.pool_hits >= c0.pool_hits + 5 * 2); /* response header and body */
    assert_true(s1.pool_cached_bytes > 0 && s1.pool_cached_bytes <= RPC_DEFAULT_POOL_BYTES);
    fx_free(f);

    struct rpc_config a, b;
    cfg_make(&a, "dep", "cli", NULL);
    cfg_make(&b, "dep", "srv", NULL);
    a.pool_bytes = b.pool_bytes = 0;
    f = fx_new(&a, &b);
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    for (int i = 0; i < 3; i++)
        echo_big_body(f, p, 300u << 10, 256u << 10);
    rpc_get_stats(f->srv, &s1);
    assert_int_equal(s1.pool_hits, 0);
    assert_int_equal(s1.pool_cached_bytes, 0);
    assert_true(s1.pool_dropped > 0);
    fx_free(f);
}

/*
 * When a sent callback runs (rpc_conn.c "Write path"): a reply written whole by a handler (in
 * the poll phase of a loop pass) ends at the end of that same pass, so the loop's next pass may
 * sleep in its poll (no idle handle left active, which made libuv's UV_RUN_ONCE poll with
 * timeout 0 first); a reply written after that pass's completions ran (here from a check
 * callback of the test's own) still ends before the next pass polls. Never inside
 * rpc_reply_send itself.
 */
#define T_SENT 14

struct sent_fx {
    int handled;     /* the handler ran */
    int sent;        /* the reply's sent callback ran */
    int in_send;     /* inside rpc_reply_send */
    rpc_reply *held; /* reply kept for the check callback */
    uv_check_t check;
};

static void sent_flag_cb(int status, void *arg)
{
    struct sent_fx *s = arg;
    assert_int_equal(status, 0);
    assert_false(s->in_send);
    s->sent++;
}

static void sent_reply(struct sent_fx *s, rpc_reply *reply, const struct rpc_request *req)
{
    static const char pay[] = "sent-payload";
    uv_buf_t iov = uv_buf_init((char *)pay, sizeof(pay));
    struct rpc_msg m = {.body = req->body, .body_len = req->body_len, .iov = &iov, .niov = 1};
    s->in_send = 1;
    assert_int_equal(rpc_reply_send(reply, 0, NULL, &m, sent_flag_cb, s), 0);
    s->in_send = 0;
}

static void sent_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct sent_fx *s = arg;
    s->handled++;
    if (req->body_len == 4 && memcmp(req->body, "hold", 4) == 0)
        s->held = reply; /* answered by sent_check_cb */
    else
        sent_reply(s, reply, req);
}

static void sent_check_cb(uv_check_t *h)
{
    struct sent_fx *s = h->data;
    uv_check_stop(h);
    rpc_reply *r = s->held;
    s->held = NULL;
    sent_reply(s, r, rpc_reply_request(r));
}

static void count_active_idle(uv_handle_t *h, void *arg)
{
    if (h->type == UV_IDLE && uv_is_active(h))
        ++*(int *)arg;
}

/* Idle handles active on the loop: one makes libuv's next UV_RUN_ONCE pass poll without
 * sleeping. */
static int active_idles(uv_loop_t *loop)
{
    int n = 0;
    uv_walk(loop, count_active_idle, &n);
    return n;
}

/* Runs single passes (bounded) until *flag is set; the pass that set it is the last run. */
static void run_passes_until(uv_loop_t *loop, const int *flag)
{
    for (int i = 0; i < 100000 && !*flag; i++)
        uv_run(loop, UV_RUN_ONCE);
    assert_true(*flag);
}

static void test_sent_cb_same_pass(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, NULL);
    struct sent_fx s = {0};
    rpc_register_handler(f->srv, T_SENT, sent_handler, &s);
    rpc_peer *p;
    assert_int_equal(rpc_peer_get(f->cli, "srv", f->addr, &p), 0);
    struct result r;
    do_echo(f, p, 0, &r); /* connected and handshaken */
    result_free(&r);
    /* No idle handle of the test's own: one active after a pass is the RPC layer's. */
    for (int round = 0; round < 3; round++) {
        memset(&r, 0, sizeof(r));
        s.handled = s.sent = 0;
        struct rpc_msg m = {.type = T_SENT, .body = (const uint8_t *)"now", .body_len = 3};
        assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
        run_passes_until(&f->loop, &s.handled);
        assert_int_equal(s.sent, 1);                 /* ended in the pass that wrote it */
        assert_int_equal(active_idles(&f->loop), 0); /* the next pass may sleep */
        run_passes_until(&f->loop, &r.done);
        assert_int_equal(r.status, 0);
        assert_int_equal(r.payload_len, sizeof("sent-payload"));
        assert_memory_equal(r.payload, "sent-payload", sizeof("sent-payload"));
        result_free(&r);
    }
    /* A reply written in the check phase after the pass's completions ran. */
    memset(&r, 0, sizeof(r));
    s.handled = s.sent = 0;
    struct rpc_msg m = {.type = T_SENT, .body = (const uint8_t *)"hold", .body_len = 4};
    assert_int_equal(rpc_call(p, &m, result_cb, &r, NULL), 0);
    run_passes_until(&f->loop, &s.handled);
    assert_non_null(s.held);
    uv_check_init(&f->loop, &s.check);
    s.check.data = &s;
    uv_check_start(&s.check, sent_check_cb);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* (nothing would wake a blocking pass) */
    assert_null(s.held);             /* sent by sent_check_cb, in this pass's check phase */
    if (!s.sent) /* the next pass runs the completion before it polls: it does not sleep */
        assert_true(active_idles(&f->loop) > 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(s.sent, 1);
    run_passes_until(&f->loop, &r.done);
    assert_int_equal(r.status, 0);
    result_free(&r);
    uv_close((uv_handle_t *)&s.check, NULL);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_ipv4_reuses_connection),
        cmocka_unit_test(test_large_payload),
        cmocka_unit_test(test_payload_sink),
        cmocka_unit_test(test_head_read_after_large),
        cmocka_unit_test(test_notify_sink_hold),
        cmocka_unit_test(test_lent_payload),
        cmocka_unit_test(test_buffer_pool_reuse),
        cmocka_unit_test(test_sent_cb_same_pass),
        cmocka_unit_test(test_ipv6_and_unix),
        cmocka_unit_test(test_concurrent_out_of_order),
        cmocka_unit_test(test_deadline_fires),
        cmocka_unit_test(test_cancel_and_unknown_type),
        cmocka_unit_test(test_notifications_env_type),
        cmocka_unit_test(test_backpressure_and_frame_limit),
        cmocka_unit_test(test_oversized_received_frame_closes),
        cmocka_unit_test(test_reconnect_after_restart),
        cmocka_unit_test(test_pending_calls_bounded),
        cmocka_unit_test(test_server_requests_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
