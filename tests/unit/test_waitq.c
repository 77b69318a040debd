/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of src/store/waitq.c with real threads: a signal wakes a waiter long before its
 * deadline, a wait with no signal ends at its deadline (not before), close wakes waiters and
 * pauses with KVMESH_ECLOSED and later waits return at once, and a signal given between the
 * waiter's enter and its wait is not lost. Bounds are generous (seconds): they tell "woken" from
 * "waited for the deadline", not speed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sched.h>

#include <cmocka.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "store/waitq.h"

#define LONG_MS  30000 /* a deadline no passing test reaches */
#define SHORT_MS 200   /* a deadline a test waits out */

struct waiter {
    struct kvm_waitq *q;
    atomic_bool entered;
    atomic_int state; /* set by the signaller before its signal */
    bool pause;       /* kvm_waitq_pause instead of waiting for state */
    int rc;
    uint64_t ms;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    uint64_t t0 = env_clock_mono_ms();
    if (w->pause) {
        atomic_store(&w->entered, true);
        w->rc = kvm_waitq_pause(w->q, t0 + LONG_MS);
    } else {
        uint64_t gen = kvm_waitq_enter(w->q);
        atomic_store(&w->entered, true);
        w->rc = 0;
        while (atomic_load(&w->state) == 0 && w->rc == 0)
            w->rc = kvm_waitq_wait(w->q, &gen, t0 + LONG_MS);
        kvm_waitq_leave(w->q);
    }
    w->ms = env_clock_mono_ms() - t0;
    return NULL;
}

static void start(pthread_t *t, struct waiter *w)
{
    assert_int_equal(pthread_create(t, NULL, wait_thread, w), 0);
    while (!atomic_load(&w->entered))
        sched_yield();
}

/* One waiter on q: it enters, the state changes and q is signalled; it returns 0, promptly. */
static void signal_one_waiter(struct kvm_waitq *q)
{
    struct waiter w = {.q = q};
    pthread_t t;
    start(&t, &w);
    atomic_store(&w.state, 1);
    kvm_waitq_signal(q);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_true(w.ms < LONG_MS / 2);
}

static void signal_wakes_waiter(void **state)
{
    (void)state;
    struct kvm_waitq q;
    assert_int_equal(kvm_waitq_init(&q), 0);
    signal_one_waiter(&q);
    kvm_waitq_destroy(&q);
}

static void deadline_ends_wait(void **state)
{
    (void)state;
    struct kvm_waitq q;
    assert_int_equal(kvm_waitq_init(&q), 0);
    uint64_t t0 = env_clock_mono_ms();
    uint64_t gen = kvm_waitq_enter(&q);
    assert_int_equal(kvm_waitq_wait(&q, &gen, t0 + SHORT_MS), KVMESH_ETIMEDOUT);
    kvm_waitq_leave(&q);
    assert_true(env_clock_mono_ms() - t0 >= SHORT_MS);
    /* a signal with nobody waiting changes nothing for a later waiter's generation */
    kvm_waitq_signal(&q);
    t0 = env_clock_mono_ms();
    assert_int_equal(kvm_waitq_pause(&q, t0 + SHORT_MS), 0);
    assert_true(env_clock_mono_ms() - t0 >= SHORT_MS);
    kvm_waitq_destroy(&q);
}

static void close_wakes_everyone(void **state)
{
    (void)state;
    struct kvm_waitq q;
    assert_int_equal(kvm_waitq_init(&q), 0);
    struct waiter w = {.q = &q}, p = {.q = &q, .pause = true};
    pthread_t tw, tp;
    start(&tw, &w);
    start(&tp, &p);
    kvm_waitq_close(&q);
    pthread_join(tw, NULL);
    pthread_join(tp, NULL);
    assert_int_equal(w.rc, KVMESH_ECLOSED);
    assert_int_equal(p.rc, KVMESH_ECLOSED);
    assert_true(w.ms < LONG_MS / 2 && p.ms < LONG_MS / 2);
    uint64_t gen = kvm_waitq_enter(&q);
    assert_int_equal(kvm_waitq_wait(&q, &gen, env_clock_mono_ms() + LONG_MS), KVMESH_ECLOSED);
    kvm_waitq_leave(&q);
    kvm_waitq_destroy(&q);
}

/* The signaller changes the state and signals right after the waiter entered but (likely) before
 * it waits: the generation moved, so the wait returns at once. Many rounds. */
static void signal_after_enter_not_lost(void **state)
{
    (void)state;
    struct kvm_waitq q;
    assert_int_equal(kvm_waitq_init(&q), 0);
    for (int i = 0; i < 200; i++)
        signal_one_waiter(&q);
    kvm_waitq_destroy(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(signal_wakes_waiter),
        cmocka_unit_test(deadline_ends_wait),
        cmocka_unit_test(close_wakes_everyone),
        cmocka_unit_test(signal_after_enter_not_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
