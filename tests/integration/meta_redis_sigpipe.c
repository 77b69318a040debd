/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_redis_sigpipe — the Redis metadata backend raises no SIGPIPE when its server goes away
 * mid-session (src/meta/meta_redis.c handle_write: hiredis's output buffer is sent with
 * MSG_NOSIGNAL, hiredis's own writes run with SIGPIPE blocked; docs/api.md "Signals"). This
 * process puts SIGPIPE at SIG_DFL, unblocked, and runs the backend's loop on its main thread (as
 * an application thread that leads a runtime's loop), so a SIGPIPE raised by a write there ends
 * it with signal 13: ctest reports the test failed.
 *
 *   killed:  a real redis-server; while pipelined puts of 256 KiB values are being written, the
 *            server is stopped (SIGSTOP: it reads nothing more, the client's output waits) and
 *            then killed (SIGKILL: its sockets reset with unread bytes); every call in flight
 *            and every call made while it is gone fails with an error and a message; after a
 *            restart on the same port, calls succeed again on the same handle. ROUNDS times.
 *   closer:  a loopback listener that accepts each connection, reads a little and closes it
 *            with a reset, without answering: every call fails with an error and a message.
 *
 * Every wait is bounded; the servers are stopped by pid.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "env/clock.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "testsrv.h"

#define ROUNDS   3
#define PIPELINE 16           /* puts in flight at once */
#define VAL_LEN  (256u << 10) /* bytes of each value: the output outgrows the socket */
#define CALL_MS  2000         /* each call's timeout */
#define WAIT_MS  20000        /* bound on every wait */

static uint8_t val[VAL_LEN];

struct call {
    bool done;
    int rc;
    char msg[160];
};

static void call_cb(void *arg, const meta_result_t *res)
{
    struct call *c = arg;
    c->done = true;
    c->rc = res->rc;
    snprintf(c->msg, sizeof(c->msg), "%s", res->errmsg ? res->errmsg : "");
}

struct fx {
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
};

static void sigpipe_default_unblocked(void)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    assert_int_equal(pthread_sigmask(SIG_UNBLOCK, &s, NULL), 0);
}

static void fx_open(struct fx *f, const char *url)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(env_uv_new(&f->env, &f->loop, 0), 0);
    meta_opts_t o = {.default_timeout_ms = CALL_MS, .name = "sigpipe"};
    if (meta_open(&f->m, f->env, url, &o) != 0)
        fail_msg("meta_open(%s): %s", url, kvmesh_last_error());
}

static void fx_close(struct fx *f)
{
    meta_close(f->m);
    env_uv_free(f->env);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* Runs the loop on this thread until every call of cs[0..n-1] answered (bounded). */
static void run_until_done(struct fx *f, struct call *cs, int n)
{
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !cs[i].done;
        if (!left)
            return;
        assert_true(env_clock_mono_ms() < end);
        uv_run(&f->loop, UV_RUN_ONCE);
    }
}

/* Sends n puts of VAL_LEN bytes (keys tag/0..n-1) without running the loop. */
static void send_puts(struct fx *f, const char *tag, struct call *cs, int n)
{
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof(key), "sigpipe/%s/%d", tag, i);
        meta_op_t op = {.type = META_OP_PUT, .key = key, .value = val, .value_len = VAL_LEN};
        cs[i] = (struct call){0};
        int rc = meta_txn(f->m, NULL, 0, &op, 1, NULL, 0, CALL_MS, call_cb, &cs[i]);
        if (rc) { /* refused at once (e.g. the backend knows the server is gone): an answer */
            cs[i].done = true;
            cs[i].rc = rc;
            snprintf(cs[i].msg, sizeof(cs[i].msg), "%s", kvmesh_last_error());
        }
    }
}

/* n puts, all answered; returns how many failed (each failure must carry a message) */
static int puts_failed(struct fx *f, const char *tag, int n)
{
    struct call cs[PIPELINE];
    send_puts(f, tag, cs, n);
    run_until_done(f, cs, n);
    int failed = 0;
    for (int i = 0; i < n; i++)
        if (cs[i].rc) {
            if (!failed)
                fprintf(stderr, "  put %s/%d: %s: %s\n", tag, i, kvmesh_errname(cs[i].rc),
                        cs[i].msg);
            failed++;
            assert_true(cs[i].msg[0] != '\0');
        }
    return failed;
}

static void test_server_killed(void **state)
{
    (void)state;
    sigpipe_default_unblocked();
    testsrv_t *srv = NULL;
    if (testsrv_start_redis(&srv, NULL) != 0)
        fail_msg("testsrv_start_redis: %s", kvmesh_last_error());
    struct fx f;
    fx_open(&f, testsrv_url(srv));
    uint64_t end = env_clock_mono_ms() + WAIT_MS; /* (the connection made and scripts loaded) */
    while (puts_failed(&f, "warm", PIPELINE) != 0)
        assert_true(env_clock_mono_ms() < end);
    for (int r = 0; r < ROUNDS; r++) {
        char tag[32];
        snprintf(tag, sizeof(tag), "r%d", r);
        /* a pipeline in flight, the server stopped mid-write, then killed */
        struct call cs[PIPELINE];
        send_puts(&f, tag, cs, PIPELINE);
        for (int i = 0; i < 4; i++)
            uv_run(&f.loop, UV_RUN_NOWAIT); /* the writes begin */
        assert_int_equal(testsrv_kill(srv, SIGSTOP), 0);
        for (int i = 0; i < 8; i++)
            uv_run(&f.loop, UV_RUN_NOWAIT); /* the output fills the socket */
        assert_int_equal(testsrv_kill(srv, SIGKILL), 0);
        run_until_done(&f, cs, PIPELINE);
        int failed = 0;
        for (int i = 0; i < PIPELINE; i++)
            if (cs[i].rc) {
                failed++;
                assert_true(cs[i].msg[0] != '\0');
            }
        /* while it is gone: every call fails, with a message */
        int gone = puts_failed(&f, "gone", 4);
        fprintf(stderr, "round %d: %d of %d puts in flight failed (%s); %d of 4 while gone\n", r,
                failed, PIPELINE, failed ? "e.g. see below" : "all had been answered", gone);
        for (int i = 0; i < PIPELINE; i++)
            if (cs[i].rc) {
                fprintf(stderr, "  %s: %s\n", kvmesh_errname(cs[i].rc), cs[i].msg);
                break;
            }
        assert_int_equal(gone, 4);
        /* back on the same port: the same handle works again (bounded) */
        assert_int_equal(testsrv_restart(srv), 0);
        end = env_clock_mono_ms() + WAIT_MS;
        while (puts_failed(&f, "back", 1) != 0)
            assert_true(env_clock_mono_ms() < end);
    }
    fx_close(&f);
    testsrv_stop(srv);
}

/* ---- a listener that resets every connection --------------------------------------------------
 */

struct closer {
    int lfd;
    uint16_t port;
    atomic_bool stop;
    atomic_int accepted;
    pthread_t th;
};

static void *closer_main(void *arg)
{
    struct closer *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {s->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        struct pollfd q = {fd, POLLIN, 0};
        char buf[256];
        if (poll(&q, 1, 200) > 0 && recv(fd, buf, sizeof(buf), 0) < 0)
            buf[0] = 0; /* (read a little of the first command, if it came) */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(fd);
        atomic_fetch_add(&s->accepted, 1);
    }
    return NULL;
}

static void test_closer(void **state)
{
    (void)state;
    sigpipe_default_unblocked();
    static struct closer s;
    s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_true(s.lfd >= 0);
    assert_int_equal(bind(s.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s.lfd, 64), 0);
    assert_int_equal(getsockname(s.lfd, (struct sockaddr *)&a, &al), 0);
    s.port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s.th, NULL, closer_main, &s), 0);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u", (unsigned)s.port);
    struct fx f;
    fx_open(&f, url);
    for (int r = 0; r < ROUNDS; r++) {
        char tag[32];
        snprintf(tag, sizeof(tag), "c%d", r);
        assert_int_equal(puts_failed(&f, tag, 4), 4);
    }
    fprintf(stderr, "closer: every put failed; %d connection(s) accepted and reset\n",
            atomic_load(&s.accepted));
    fx_close(&f);
    atomic_store(&s.stop, true);
    pthread_join(s.th, NULL);
    close(s.lfd);
}

int main(void)
{
    for (size_t i = 0; i < VAL_LEN; i++)
        val[i] = (uint8_t)(i * 13 + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_killed),
        cmocka_unit_test(test_closer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
