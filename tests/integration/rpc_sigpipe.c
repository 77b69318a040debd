/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_sigpipe — the RPC write path raises no SIGPIPE: this process keeps SIGPIPE at SIG_DFL and
 * unblocked on the thread that runs the endpoints' loop (as an application thread that runs a
 * runtime's loop while the process switched SIGPIPE back to SIG_DFL, docs/api.md "Signals"), and
 * a peer closes a connection in use over a unix socket, where a write to the closed peer fails
 * with EPIPE at once. Each case writes on that connection before the loop has seen the close:
 *
 *   call:  a request is written inside rpc_call (the write the socket takes at once);
 *   reply: a held request is answered with a payload and a sent callback (the write that waits
 *          for its completion callback).
 *
 * The write must fail with an error (the call's callback with KVMESH_ECONN, the sent callback
 * with KVMESH_ECONN, the connection closed) and the process must live: a write that could raise
 * SIGPIPE ends this test with that signal.
 */
#include <signal.h>
#include <unistd.h>

#include "rpc_testutil.h"
#include "tmpdir.h"

static char dir[256];

struct fx {
    uv_loop_t loop;
    rpc_endpoint *srv, *cli;
    rpc_peer *p;
    struct held held;
};

static struct fx *fx_new(const char *name)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    struct rpc_config c;
    cfg_make(&c, "dep", "srv", NULL);
    assert_int_equal(rpc_endpoint_new(&f->loop, &c, &f->srv), 0);
    cfg_make(&c, "dep", "cli", NULL);
    assert_int_equal(rpc_endpoint_new(&f->loop, &c, &f->cli), 0);
    assert_int_equal(rpc_register_handler(f->srv, T_ECHO, echo_handler, NULL), 0);
    assert_int_equal(rpc_register_handler(f->srv, T_HOLD, hold_handler, &f->held), 0);
    char path[512], addr[600];
    snprintf(path, sizeof(path), "%s/%s.sock", dir, name);
    assert_int_equal(rpc_listen_unix(f->srv, path), 0);
    snprintf(addr, sizeof(addr), "unix:%s", path);
    assert_int_equal(rpc_peer_get(f->cli, "srv", addr, &f->p), 0);
    /* Warm up: the connection is READY and in use. */
    struct rpc_msg m = {.type = T_ECHO, .timeout_ms = 10000};
    struct result r = {0};
    assert_int_equal(rpc_call(f->p, &m, result_cb, &r, NULL), 0);
    assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, 0);
    result_free(&r);
    return f;
}

static void sigpipe_default_unblocked(void)
{
    struct sigaction sa;
    assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
    assert_true(sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO));
    sigset_t cur;
    assert_int_equal(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    assert_false(sigismember(&cur, SIGPIPE));
}

/* The client calls a server whose endpoint closed (its sockets are closed at once, before the
 * loop runs again). */
static void test_call_after_peer_closed(void **state)
{
    (void)state;
    struct fx *f = fx_new("call");
    int srv_closed = 0;
    rpc_endpoint_close(f->srv, closed_flag, &srv_closed); /* the server's socket is closed now */
    size_t big = 1u << 20;
    uint8_t *payload = malloc(big);
    assert_non_null(payload);
    memset(payload, 0x33, big);
    uv_buf_t b = uv_buf_init((char *)payload, (unsigned)big);
    struct rpc_msg m = {.type = T_ECHO, .iov = &b, .niov = 1, .timeout_ms = 10000};
    struct result r = {0};
    sigpipe_default_unblocked();
    assert_int_equal(rpc_call(f->p, &m, result_cb, &r, NULL), 0); /* writes to the closed peer */
    assert_false(r.done);                                         /* never inside rpc_call */
    assert_true(run_until(&f->loop, pred_result, &r, T_WAIT));
    assert_int_equal(r.status, KVMESH_ECONN);
    struct rpc_stats st;
    rpc_get_stats(f->cli, &st);
    assert_int_equal(st.close[RPC_CLOSE_IO_ERROR] + st.close[RPC_CLOSE_PEER_EOF], 1);
    assert_int_equal(st.queued_bytes, 0);
    assert_true(run_until(&f->loop, pred_flag, &srv_closed, T_WAIT));
    ep_close_wait(&f->loop, f->cli);
    loop_finish(&f->loop);
    free(payload);
    free(f);
}

struct sent {
    int done, status;
};

static void sent_cb(int status, void *arg)
{
    struct sent *s = arg;
    s->done = 1;
    s->status = status;
}

static int pred_sent(void *arg)
{
    return ((struct sent *)arg)->done;
}

static int pred_held(void *arg)
{
    return ((struct held *)arg)->n > 0;
}

/* The server's reply goes to a client whose endpoint closed. */
static void test_reply_after_peer_closed(void **state)
{
    (void)state;
    struct fx *f = fx_new("reply");
    struct rpc_msg hm = {.type = T_HOLD, .timeout_ms = 10000};
    struct result r = {0};
    assert_int_equal(rpc_call(f->p, &hm, result_cb, &r, NULL), 0);
    assert_true(run_until(&f->loop, pred_held, &f->held, T_WAIT));
    assert_int_equal(f->held.n, 1);
    int cli_closed = 0;
    rpc_endpoint_close(f->cli, closed_flag, &cli_closed); /* the client's socket is closed now */
    assert_true(r.done && r.status == KVMESH_ECLOSED);
    size_t big = 1u << 20;
    uint8_t *payload = malloc(big);
    assert_non_null(payload);
    memset(payload, 0x44, big);
    uv_buf_t b = uv_buf_init((char *)payload, (unsigned)big);
    struct rpc_msg m = {.iov = &b, .niov = 1};
    struct sent s = {0};
    sigpipe_default_unblocked();
    /* The server has not seen the close yet: the reply is written to the closed peer. */
    assert_int_equal(rpc_reply_send(f->held.r[0], 0, NULL, &m, sent_cb, &s), 0);
    f->held.n = 0;
    assert_false(s.done);
    assert_true(run_until(&f->loop, pred_sent, &s, T_WAIT));
    assert_int_equal(s.status, KVMESH_ECONN);
    struct rpc_stats st;
    rpc_get_stats(f->srv, &st);
    assert_int_equal(st.close[RPC_CLOSE_IO_ERROR] + st.close[RPC_CLOSE_PEER_EOF], 1);
    assert_true(run_until(&f->loop, pred_flag, &cli_closed, T_WAIT));
    ep_close_wait(&f->loop, f->srv);
    loop_finish(&f->loop);
    free(payload);
    free(f);
}

int main(void)
{
    /* SIGPIPE at its default and unblocked on this thread, whatever the caller set. */
    signal(SIGPIPE, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    if (ttmp_make_auto(dir, sizeof(dir), "kvmesh-rpc-sigpipe") != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_call_after_peer_closed),
        cmocka_unit_test(test_reply_after_peer_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
