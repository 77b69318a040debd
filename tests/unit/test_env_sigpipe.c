/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_env_sigpipe.c — the SIGPIPE mask around a call into a library that writes with write(2)
 * on the calling thread (env/env_thread.h: env_sigpipe_block, env_sigpipe_restore_drop): with
 * SIGPIPE at SIG_DFL a write to a closed peer inside fails with EPIPE and the signal never
 * reaches the thread (masked, then dropped), and the caller's mask is back afterwards; a caller
 * that blocks SIGPIPE itself keeps it pending. A SIGPIPE that reached the process would kill
 * this test (SIG_DFL). The Redis backend masks so around hiredis's own writes (meta_redis.c);
 * itest_rpc_sigpipe and itest_sigpipe_embed cover the RPC path and whole runtimes at SIG_DFL.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "env/env_thread.h"

static void set_disposition(void (*h)(int))
{
    struct sigaction sa = {0};
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGPIPE, &sa, NULL), 0);
}

static bool sigpipe_blocked(void)
{
    sigset_t cur;
    assert_int_equal(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    return sigismember(&cur, SIGPIPE);
}

static bool sigpipe_pending(void)
{
    sigset_t p;
    assert_int_equal(sigpending(&p), 0);
    return sigismember(&p, SIGPIPE);
}

/* write() (no MSG_NOSIGNAL, as libuv's) to a socket whose peer has closed: EPIPE. */
static void write_to_closed_peer(void)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[1]);
    char b = 'x';
    errno = 0;
    assert_int_equal(write(sv[0], &b, 1), -1);
    assert_int_equal(errno, EPIPE);
    close(sv[0]);
}

static void masked_write(void)
{
    sigset_t old;
    env_sigpipe_block(&old);
    assert_true(sigpipe_blocked());
    write_to_closed_peer();
    assert_true(sigpipe_pending());
    env_sigpipe_restore_drop(&old);
    assert_false(sigpipe_blocked());
    assert_false(sigpipe_pending());
}

static void test_default_masks(void **state)
{
    (void)state;
    set_disposition(SIG_DFL);
    for (int i = 0; i < 10; i++)
        masked_write();
}

/* The caller's own blocked SIGPIPE: kept, and a SIGPIPE raised inside stays pending for it. */
static void test_caller_blocked_keeps_pending(void **state)
{
    (void)state;
    set_disposition(SIG_DFL);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    assert_int_equal(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    sigset_t inner;
    env_sigpipe_block(&inner);
    write_to_closed_peer();
    env_sigpipe_restore_drop(&inner);
    assert_true(sigpipe_blocked());
    assert_true(sigpipe_pending());
    const struct timespec zero = {0, 0};
    assert_int_equal(sigtimedwait(&set, NULL, &zero), SIGPIPE);
    assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_masks),
        cmocka_unit_test(test_caller_blocked_keeps_pending),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
