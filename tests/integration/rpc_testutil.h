/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_testutil.h — helpers shared by the RPC integration tests (header-only, static): endpoint
 * configs, a bounded "run the loop until" helper, echo/hold handlers, and a raw TCP client that
 * writes arbitrary bytes to a server on the same loop.
 */
#ifndef KVMESH_TESTS_RPC_TESTUTIL_H
#define KVMESH_TESTS_RPC_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "kvmesh.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/rpc.h"

#define T_ECHO  10 /* replies with the request body, payload and trace */
#define T_HOLD  11 /* keeps the reply handle in the held list */
#define T_NOTE  12 /* notification sink */
#define T_STALL 13 /* (fork test) blocks the child's loop */

static inline void cfg_make(struct rpc_config *c, const char *deployment, const char *runtime,
                            const char *secret)
{
    rpc_config_init(c);
    snprintf(c->local.deployment_id, sizeof(c->local.deployment_id), "%s", deployment);
    snprintf(c->local.runtime_id, sizeof(c->local.runtime_id), "%s", runtime);
    c->local.runtime_epoch = 1;
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        c->local.proto[i].min = 1;
        c->local.proto[i].max = 2;
    }
    if (secret) {
        c->secret = (const uint8_t *)secret;
        c->secret_len = strlen(secret);
    }
}

/*
 * Upper bound of every "wait until it happens" in these tests: generous, because a loaded 2-core
 * CI host running ThreadSanitizer can be slow; a passing test never waits for it.
 */
#define T_WAIT 30000

typedef int (*until_fn)(void *arg);

static inline void until_tick(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until pred(arg) holds or timeout_ms passes; returns pred's final value. */
static inline int run_until(uv_loop_t *loop, until_fn pred, void *arg, uint64_t timeout_ms)
{
    uv_timer_t tick;
    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, until_tick, 1, 1);
    uint64_t end = uv_now(loop) + timeout_ms;
    int ok;
    while (!(ok = pred(arg)) && uv_now(loop) < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

static inline int pred_int_ge(void *arg)
{
    int *p = arg;
    return p[0] >= p[1];
}

/* Runs the loop for ms milliseconds. */
static inline int pred_never(void *arg)
{
    (void)arg;
    return 0;
}
static inline void run_for(uv_loop_t *loop, uint64_t ms)
{
    run_until(loop, pred_never, NULL, ms);
}

/* ---- server handlers ---- */

#define HELD_MAX 16384

struct held {
    rpc_reply *r[HELD_MAX];
    int n;
    int calls;
};

static inline void echo_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    int *count = arg;
    if (count)
        (*count)++;
    uv_buf_t iov = uv_buf_init((char *)req->payload, (unsigned)req->payload_len);
    struct rpc_msg m = {.body = req->body,
                        .body_len = req->body_len,
                        .iov = &iov,
                        .niov = req->payload_len ? 1 : 0,
                        .trace = &req->trace};
    /* NULL sent callback: the payload is copied, the reply handle (and req) may go now. */
    int rc = rpc_reply_send(reply, 0, NULL, &m, NULL, NULL);
    assert_int_equal(rc, 0);
}

static inline void hold_handler(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    struct held *h = arg;
    (void)req;
    h->calls++;
    assert_true(h->n < HELD_MAX);
    h->r[h->n++] = reply;
}

static inline void held_drop_all(struct held *h)
{
    for (int i = 0; i < h->n; i++)
        rpc_reply_drop(h->r[i]);
    h->n = 0;
}

/* ---- endpoint lifetime ---- */

static inline void closed_flag(void *arg)
{
    *(int *)arg = 1;
}

static inline int pred_flag(void *arg)
{
    return *(int *)arg;
}

static inline void ep_close_wait(uv_loop_t *loop, rpc_endpoint *ep)
{
    int done = 0;
    rpc_endpoint_close(ep, closed_flag, &done);
    assert_true(run_until(loop, pred_flag, &done, T_WAIT));
}

static inline void loop_finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* ---- call results ---- */

struct result {
    int done;
    int status;
    char error[600];
    uint8_t *body;
    size_t body_len;
    uint8_t *payload;
    size_t payload_len;
    struct frame_trace trace;
    uint64_t at;
    int order;
    int *order_counter;
};

static inline void result_cb(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    struct result *r = arg;
    (void)call;
    r->done = 1;
    r->status = res->status;
    snprintf(r->error, sizeof(r->error), "%s", res->error);
    if (res->body_len) {
        r->body = malloc(res->body_len);
        memcpy(r->body, res->body, res->body_len);
    }
    r->body_len = res->body_len;
    r->payload = res->payload; /* take ownership */
    res->payload = NULL;
    r->payload_len = res->payload_len;
    r->trace = res->trace;
    if (r->order_counter)
        r->order = (*r->order_counter)++;
}

static inline void result_free(struct result *r)
{
    free(r->body);
    free(r->payload);
    r->body = r->payload = NULL;
}

static inline int pred_result(void *arg)
{
    return ((struct result *)arg)->done;
}

/* ---- raw client: writes bytes, optionally closes; tracks whether the server closed it ---- */

struct raw {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wr;
    uv_shutdown_t sreq;
    uint8_t *data;
    size_t len;
    int close_after_write;
    int connected, eof, closed;
    char rbuf[4096];
};

static inline void raw_close_cb(uv_handle_t *h)
{
    struct raw *r = h->data;
    r->closed = 1;
}

static inline void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    struct raw *r = h->data;
    (void)s;
    *b = uv_buf_init(r->rbuf, sizeof(r->rbuf));
}

static inline void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct raw *r = s->data;
    (void)b;
    if (n < 0) {
        r->eof = 1;
        if (!uv_is_closing((uv_handle_t *)&r->tcp))
            uv_close((uv_handle_t *)&r->tcp, raw_close_cb);
    }
}

static inline void raw_written(uv_write_t *w, int status)
{
    struct raw *r = w->data;
    (void)status;
    /* Half-close (FIN) and keep reading: closing with unread data would send a reset. */
    if (r->close_after_write && !uv_is_closing((uv_handle_t *)&r->tcp))
        uv_shutdown(&r->sreq, (uv_stream_t *)&r->tcp, NULL);
}

static inline void raw_connected(uv_connect_t *c, int status)
{
    struct raw *r = c->data;
    assert_int_equal(status, 0);
    r->connected = 1;
    uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_read);
    if (r->len) {
        uv_buf_t b = uv_buf_init((char *)r->data, (unsigned)r->len);
        r->wr.data = r;
        uv_write(&r->wr, (uv_stream_t *)&r->tcp, &b, 1, raw_written);
    }
}

/* Starts a raw connection to 127.0.0.1:port writing data (kept by the caller until closed). */
static inline void raw_start(uv_loop_t *loop, struct raw *r, int port, uint8_t *data, size_t len,
                             int close_after_write)
{
    memset(r, 0, sizeof(*r));
    r->data = data;
    r->len = len;
    r->close_after_write = close_after_write;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    uv_tcp_init(loop, &r->tcp);
    r->tcp.data = r;
    r->creq.data = r;
    assert_int_equal(uv_tcp_connect(&r->creq, &r->tcp, (struct sockaddr *)&sa, raw_connected), 0);
}

static inline int pred_raw_closed(void *arg)
{
    return ((struct raw *)arg)->closed;
}

/* ---- raw frames (tests that speak the wire protocol by hand) ---- */

/* Appends a frame (fixed header + protobuf part + payload) to out; returns its length. */
static inline size_t put_frame(uint8_t *out, uint8_t kind, uint16_t type, uint64_t id,
                               const uint8_t *pb, size_t pb_len, const uint8_t *payload,
                               size_t payload_len)
{
    struct frame_header h = {.kind = kind,
                             .type = type,
                             .request_id = id,
                             .header_len = (uint32_t)pb_len,
                             .payload_len = payload_len};
    frame_encode(&h, out);
    if (pb_len)
        memcpy(out + FRAME_FIXED_SIZE, pb, pb_len);
    if (payload_len)
        memcpy(out + FRAME_FIXED_SIZE + pb_len, payload, payload_len);
    return FRAME_FIXED_SIZE + pb_len + payload_len;
}

/*
 * Builds a pipelined handshake as a raw client (HELLO + AUTH, no secret) followed by a valid
 * REQUEST, so that bytes appended after it reach a connection in the READY state.
 */
static inline size_t handshake_and_request(uint8_t *buf)
{
    struct hs_descriptor d;
    memset(&d, 0, sizeof(d));
    snprintf(d.deployment_id, sizeof(d.deployment_id), "dep");
    snprintf(d.runtime_id, sizeof(d.runtime_id), "raw");
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        d.proto[i].min = 1;
        d.proto[i].max = 2;
    }
    uint8_t *draw, *pb, nonce[HS_NONCE_LEN] = {1};
    size_t dn, n, off = 0;
    assert_int_equal(hs_descriptor_encode(&d, &draw, &dn), 0);
    assert_int_equal(hs_hello_encode(draw, dn, nonce, "srv", &pb, &n), 0);
    off += put_frame(buf + off, FRAME_HELLO, 0, 0, pb, n, NULL, 0);
    free(pb);
    free(draw);
    assert_int_equal(hs_auth_encode(NULL, &pb, &n), 0);
    off += put_frame(buf + off, FRAME_AUTH, 0, 0, pb, n, NULL, 0);
    free(pb);
    /* RpcHeader with an empty body encodes to zero bytes. */
    off += put_frame(buf + off, FRAME_REQUEST, T_ECHO, 1, NULL, 0, (const uint8_t *)"abc", 3);
    return off;
}

#endif
