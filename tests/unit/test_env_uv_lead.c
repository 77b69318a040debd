/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_env_uv_lead.c — an application thread leading an env_uv_thread's loop
 * (env_uv_thread_lead, env_uv.h): the callback runs on the caller with is_current true and the
 * loop's work done there (posts from other threads, env_uv_thread_call from inside), a busy loop
 * refuses the lead, nested leads are refused, the deadline, a timer armed by a leader fires after
 * it left (the sleeping loop thread is woken), stop while a thread leads, the caller's signal
 * mask (untouched while it leads) and error message survive a lead, and several threads racing for
 * the lead against the loop thread's own passes (counted without locks: runs under TSan), leads in
 * a row that leave the loop's I/O to the leaders (no epoll_ctl pair per lead, counted) while I/O
 * and posts that come after such a run still wake the loop thread, and a loop nobody leads whose
 * thread sleeps in the loop's own poll (one poll per request served, counted; a lead then wakes
 * it and gets the loop). Every wait is bounded; no timing is asserted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/util.h"
#include "env/clock.h"
#include "env/env_uv.h"

#define MS          1000000ull
#define WAIT_MS     20000 /* bound on every wait for another thread (never reached when correct) */
#define RACERS      4
#define RACE_ROUNDS 3000

/* A flag one thread sets and another waits for, bounded. */
typedef struct flag {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set;
} flag_t;

static void flag_init(flag_t *f)
{
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    f->set = false;
}

static void flag_destroy(flag_t *f)
{
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

static void flag_set(flag_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->set = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static bool flag_is_set(flag_t *f)
{
    pthread_mutex_lock(&f->mu);
    bool s = f->set;
    pthread_mutex_unlock(&f->mu);
    return s;
}

static bool flag_wait(flag_t *f)
{
    struct timespec ts;
    env_clock_after(CLOCK_MONOTONIC, WAIT_MS, &ts);
    pthread_mutex_lock(&f->mu);
    int e = 0;
    while (!f->set && e == 0)
        e = pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    bool s = f->set;
    pthread_mutex_unlock(&f->mu);
    return s;
}

static void flag_set_cb(void *arg)
{
    flag_set(arg);
}

static bool flag_done(void *arg)
{
    return flag_is_set(arg);
}

static bool always_done(void *arg)
{
    (void)arg;
    return true;
}

static bool never_done(void *arg)
{
    (void)arg;
    return false;
}

/* Leads until the loop is free (the loop thread may be in a pass: a refusal). */
static enum env_uv_lead lead(env_uv_thread_t *t, env_cb cb, void *arg, env_uv_done_fn done,
                             void *darg, uint64_t deadline_ms)
{
    enum env_uv_lead r;
    while ((r = env_uv_thread_lead(t, cb, arg, done, darg, deadline_ms)) == ENV_UV_LEAD_REFUSED)
        sched_yield();
    return r;
}

/* ---- the callback runs on the caller, as on the loop --------------------------------------- */

typedef struct basic {
    env_uv_thread_t *t;
    pthread_t caller;
    int ran, on_caller, current, nested, called_direct;
    flag_t posted; /* set by a callback another thread posted during the lead */
} basic_t;

static void mark_direct(void *arg)
{
    basic_t *b = arg;
    b->called_direct = pthread_equal(pthread_self(), b->caller) && env_uv_thread_is_current(b->t);
}

static void basic_cb(void *arg)
{
    basic_t *b = arg;
    b->ran++;
    b->on_caller = pthread_equal(pthread_self(), b->caller);
    b->current = env_uv_thread_is_current(b->t);
    /* a lead inside a lead is refused; a blocking call runs directly (no deadlock) */
    b->nested = env_uv_thread_lead(b->t, basic_cb, b, always_done, NULL, 0);
    assert_int_equal(env_uv_thread_call(b->t, mark_direct, b), 0);
}

static void set_posted(void *arg)
{
    basic_t *b = arg;
    assert_true(env_uv_thread_is_current(b->t));
    flag_set(&b->posted);
}

static void *poster_main(void *arg)
{
    basic_t *b = arg;
    assert_int_equal(env_uv_thread_post(b->t, set_posted, b), 0);
    return NULL;
}

static void start_poster(void *arg)
{
    basic_t *b = arg;
    pthread_t th; /* detached: it only posts */
    assert_int_equal(pthread_create(&th, NULL, poster_main, b), 0);
    pthread_detach(th);
}

static void test_lead_runs_on_caller(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 1), 0);
    basic_t b = {.t = t, .caller = pthread_self()};
    flag_init(&b.posted);
    assert_false(env_uv_thread_is_current(t));
    assert_int_equal(lead(t, basic_cb, &b, always_done, NULL, 0), ENV_UV_LEAD_DONE);
    assert_int_equal(b.ran, 1);
    assert_true(b.on_caller);
    assert_true(b.current);
    assert_int_equal(b.nested, ENV_UV_LEAD_REFUSED);
    assert_true(b.called_direct);
    assert_false(env_uv_thread_is_current(t)); /* only while leading */

    /* The leader does the loop's work: a callback another thread posts meanwhile runs on the
     * loop (the leader, or the loop thread if it got the loop between two leads) and ends the
     * lead; bounded by a deadline in case it never came. */
    assert_int_equal(lead(t, start_poster, &b, flag_done, &b.posted, env_clock_mono_ms() + WAIT_MS),
                     ENV_UV_LEAD_DONE);
    assert_true(flag_is_set(&b.posted));

    env_uv_thread_stats_t st;
    env_uv_thread_stats(t, &st);
    assert_true(st.led >= 2);
    assert_true(st.refused >= 1); /* the nested one */
    env_uv_thread_stop(t);
    flag_destroy(&b.posted);
}

/* ---- a busy loop refuses; the loop thread cannot lead ---------------------------------------- */

typedef struct busy {
    env_uv_thread_t *t;
    flag_t entered, release;
    int from_loop;
} busy_t;

static void count_cb(void *arg)
{
    (*(int *)arg)++;
}

static void block_loop(void *arg)
{
    busy_t *b = arg;
    int n = 0;
    b->from_loop = env_uv_thread_lead(b->t, count_cb, &n, always_done, NULL, 0);
    assert_int_equal(n, 0);
    flag_set(&b->entered);
    assert_true(flag_wait(&b->release));
}

static void test_lead_refused_when_busy(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 2), 0);
    busy_t b = {.t = t};
    flag_init(&b.entered);
    flag_init(&b.release);
    assert_int_equal(env_uv_thread_post(t, block_loop, &b), 0);
    assert_true(flag_wait(&b.entered)); /* the loop thread is inside a pass, blocked */
    assert_int_equal(b.from_loop, ENV_UV_LEAD_REFUSED);
    int n = 0;
    env_uv_thread_stats_t before, after;
    env_uv_thread_stats(t, &before);
    assert_int_equal(env_uv_thread_lead(t, count_cb, &n, always_done, NULL, 0),
                     ENV_UV_LEAD_REFUSED);
    assert_int_equal(n, 0); /* not run: the caller posts it instead */
    env_uv_thread_stats(t, &after);
    assert_int_equal(after.refused, before.refused + 1);
    assert_int_equal(after.led, before.led);
    flag_set(&b.release);
    assert_int_equal(env_uv_thread_call(t, count_cb, &n), 0);
    assert_int_equal(n, 1);
    env_uv_thread_stop(t);
    flag_destroy(&b.entered);
    flag_destroy(&b.release);
}

/* ---- deadline -------------------------------------------------------------------------------- */

static void noop(void *arg)
{
    (void)arg;
}

static void test_lead_deadline(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 3), 0);
    enum env_uv_lead r;
    uint64_t deadline;
    do {
        deadline = env_clock_mono_ms() + 30;
        r = env_uv_thread_lead(t, noop, NULL, never_done, NULL, deadline);
    } while (r == ENV_UV_LEAD_REFUSED);
    assert_int_equal(r, ENV_UV_LEAD_DEADLINE);
    assert_true(env_clock_mono_ms() >= deadline); /* never before the deadline */
    /* a deadline already passed: the callback still runs, then the lead ends at once */
    int n = 0;
    assert_int_equal(lead(t, count_cb, &n, never_done, NULL, 1), ENV_UV_LEAD_DEADLINE);
    assert_int_equal(n, 1);
    env_uv_thread_stop(t);
}

/* ---- a leader's timer fires after it left: the sleeping loop thread is woken ----------------- */

typedef struct armer {
    env_uv_thread_t *t;
    flag_t fired;
} armer_t;

static void fire(void *arg)
{
    armer_t *a = arg;
    assert_true(env_uv_thread_is_current(a->t));
    flag_set(&a->fired);
}

static void arm(void *arg)
{
    armer_t *a = arg;
    assert_true(env_timer_start(env_uv_thread_env(a->t), 2 * MS, fire, a) != 0);
}

static void test_leader_timer_fires_later(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 4), 0);
    armer_t a = {.t = t};
    flag_init(&a.fired);
    /* The loop has no timer: its thread sleeps without a timeout. The leader arms one and leaves
     * before it is due; nothing else would wake the loop thread. */
    int n = 0;
    assert_int_equal(env_uv_thread_call(t, count_cb, &n), 0); /* the thread has started a pass */
    assert_int_equal(lead(t, arm, &a, always_done, NULL, 0), ENV_UV_LEAD_DONE);
    assert_true(flag_wait(&a.fired));
    env_uv_thread_stop(t);
    flag_destroy(&a.fired);
}

/* ---- stop while a thread leads ----------------------------------------------------------------
 */

typedef struct stopper {
    env_uv_thread_t *t;
    flag_t leading;
    enum env_uv_lead result;
} stopper_t;

static void say_leading(void *arg)
{
    flag_set(&((stopper_t *)arg)->leading);
}

static void *long_leader(void *arg)
{
    stopper_t *s = arg;
    s->result = lead(s->t, say_leading, s, never_done, NULL, 0);
    return NULL;
}

static void test_stop_while_leading(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 5), 0);
    stopper_t s = {.t = t, .result = ENV_UV_LEAD_REFUSED};
    flag_init(&s.leading);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, long_leader, &s), 0);
    assert_true(flag_wait(&s.leading));
    /* the leader waits for a condition that never holds and has no deadline: stop makes it let
     * go, then runs the release and ends the loop */
    env_uv_thread_stop(t);
    pthread_join(th, NULL);
    assert_int_equal(s.result, ENV_UV_LEAD_STOPPED);
    flag_destroy(&s.leading);
}

/* ---- the caller's own state ------------------------------------------------------------------ */

/* Loop code on the leader: a failure message, and whether SIGPIPE was blocked meanwhile (*arg). */
static void noisy(void *arg)
{
    kvm_errf(KVMESH_EIO, "a loop-side failure the caller must not see");
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    if (arg)
        *(int *)arg = sigismember(&cur, SIGPIPE);
}

static void test_lead_keeps_caller_state(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 6), 0);
    /* SIGPIPE at its default and unblocked here, whatever the test was started with. A lead
     * leaves the mask alone (loop code's socket writes use MSG_NOSIGNAL: itest_rpc_sigpipe): no
     * signal-mask call per lead. */
    signal(SIGPIPE, SIG_DFL);
    sigset_t pipe_set, after;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &pipe_set, NULL);
    kvm_errf(KVMESH_EINVAL, "the caller's message");
    int blocked = -1;
    assert_int_equal(lead(t, noisy, &blocked, always_done, NULL, 0), ENV_UV_LEAD_DONE);
    assert_int_equal(blocked, 0);
    assert_string_equal(kvmesh_last_error(), "the caller's message");
    pthread_sigmask(SIG_SETMASK, NULL, &after);
    assert_false(sigismember(&after, SIGPIPE));
    sigset_t pending;
    sigpending(&pending);
    assert_false(sigismember(&pending, SIGPIPE));
    kvm_err_clear();
    assert_int_equal(lead(t, noisy, NULL, always_done, NULL, 0), ENV_UV_LEAD_DONE);
    assert_string_equal(kvmesh_last_error(), "");
    env_uv_thread_stop(t);
}

/* ---- threads racing for the lead --------------------------------------------------------------
 */

typedef struct race {
    env_uv_thread_t *t;
    long counter; /* loop only: no lock (TSan checks the hand-over) */
    long final;   /* counter, read on the loop at the end */
    atomic_long led, posted;
} race_t;

typedef struct race_op {
    race_t *r;
    flag_t done;
} race_op_t;

static void race_step(void *arg)
{
    race_op_t *o = arg;
    assert_true(env_uv_thread_is_current(o->r->t));
    o->r->counter++;
    /* completes on a later loop turn, as an op completed by an answer would */
    assert_int_equal(env_defer(env_uv_thread_env(o->r->t), flag_set_cb, &o->done), 0);
}

static void *racer_main(void *arg)
{
    race_t *r = arg;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        race_op_t o = {.r = r};
        flag_init(&o.done);
        enum env_uv_lead res = env_uv_thread_lead(r->t, race_step, &o, flag_done, &o.done,
                                                  env_clock_mono_ms() + WAIT_MS);
        if (res == ENV_UV_LEAD_REFUSED) {
            assert_int_equal(env_uv_thread_post(r->t, race_step, &o), 0);
            atomic_fetch_add(&r->posted, 1);
        } else {
            assert_int_equal(res, ENV_UV_LEAD_DONE);
            atomic_fetch_add(&r->led, 1);
        }
        assert_true(flag_wait(&o.done));
        flag_destroy(&o.done);
    }
    return NULL;
}

static void tick(void *arg);

static void tick_arm(race_t *r)
{
    env_timer_start(env_uv_thread_env(r->t), 1 * MS, tick, r);
}

static void tick(void *arg)
{
    race_t *r = arg;
    r->counter += 0; /* a loop-side access from whoever runs the timer */
    tick_arm(r);
}

static void tick_start(void *arg)
{
    tick_arm(arg);
}

static void read_counter(void *arg)
{
    race_t *r = arg;
    r->final = r->counter;
}

static void test_lead_race(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 7), 0);
    race_t r = {.t = t};
    atomic_init(&r.led, 0);
    atomic_init(&r.posted, 0);
    assert_int_equal(env_uv_thread_call(t, tick_start, &r), 0); /* the loop thread passes too */
    pthread_t th[RACERS];
    for (int i = 0; i < RACERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, racer_main, &r), 0);
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    long led = atomic_load(&r.led), posted = atomic_load(&r.posted);
    assert_int_equal(led + posted, (long)RACERS * RACE_ROUNDS);
    assert_true(led > 0);
    assert_int_equal(env_uv_thread_call(t, read_counter, &r), 0);
    assert_int_equal(r.final, (long)RACERS * RACE_ROUNDS);
    env_uv_thread_stop(t); /* drops the ticking timer */
}

/* ---- leads in a row: the loop's I/O stays with the leaders ------------------------------------
 */

#define ROW_LEADS 400

typedef struct io_watch {
    env_uv_thread_t *t;
    int fds[2]; /* socketpair: the loop watches fds[0], the test writes fds[1] */
    uv_poll_t poll;
    flag_t readable, posted;
} io_watch_t;

static void on_readable(uv_poll_t *h, int status, int events)
{
    io_watch_t *w = h->data;
    (void)status;
    (void)events;
    assert_true(env_uv_thread_is_current(w->t));
    char c;
    ssize_t n = read(w->fds[0], &c, 1);
    (void)n;
    uv_poll_stop(h);
    flag_set(&w->readable);
}

static void watch_start(void *arg)
{
    io_watch_t *w = arg;
    uv_loop_t *loop = env_uv_loop(env_uv_thread_env(w->t));
    assert_int_equal(uv_poll_init(loop, &w->poll, w->fds[0]), 0);
    w->poll.data = w;
    assert_int_equal(uv_poll_start(&w->poll, UV_READABLE, on_readable), 0);
}

static void watch_close(void *arg)
{
    io_watch_t *w = arg;
    uv_close((uv_handle_t *)&w->poll, NULL);
}

static void set_flag_posted(void *arg)
{
    io_watch_t *w = arg;
    assert_true(env_uv_thread_is_current(w->t));
    flag_set(&w->posted);
}

static void test_leads_in_a_row(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 8), 0);
    io_watch_t w = {.t = t};
    flag_init(&w.readable);
    flag_init(&w.posted);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w.fds), 0);
    assert_int_equal(env_uv_thread_call(t, watch_start, &w), 0);

    /* Leads one after the other: the first turns the loop's I/O off in the loop thread's sleep
     * set; the others leave it so (before: an epoll_ctl to turn it off and one to turn it back on
     * per lead, 2 x ROW_LEADS). A thread preempted for over the grace between two leads lets the
     * loop thread take the I/O back (a pair more): far below one pair per lead on any host. */
    env_uv_thread_stats_t before, after;
    env_uv_thread_stats(t, &before);
    int n = 0;
    for (int i = 0; i < ROW_LEADS; i++)
        assert_int_equal(lead(t, count_cb, &n, always_done, NULL, 0), ENV_UV_LEAD_DONE);
    env_uv_thread_stats(t, &after);
    assert_int_equal(n, ROW_LEADS);
    assert_int_equal(after.led - before.led, ROW_LEADS);
    fprintf(stderr, "%d leads in a row: %llu epoll_ctl on the sleep set, %llu kicks\n", ROW_LEADS,
            (unsigned long long)(after.io_toggles - before.io_toggles),
            (unsigned long long)(after.kicks - before.kicks));
    assert_true(after.io_toggles - before.io_toggles < ROW_LEADS / 4);

    /* After the run nobody leads: I/O that nobody leads for still wakes the loop thread (within
     * the grace, or at once once it watches I/O again), and so does a post. */
    assert_int_equal(write(w.fds[1], "x", 1), 1);
    assert_true(flag_wait(&w.readable));
    for (int i = 0; i < ROW_LEADS; i++)
        assert_int_equal(lead(t, count_cb, &n, always_done, NULL, 0), ENV_UV_LEAD_DONE);
    assert_int_equal(env_uv_thread_post(t, set_flag_posted, &w), 0);
    assert_true(flag_wait(&w.posted));

    assert_int_equal(env_uv_thread_call(t, watch_close, &w), 0);
    env_uv_thread_stop(t);
    close(w.fds[0]);
    close(w.fds[1]);
    flag_destroy(&w.readable);
    flag_destroy(&w.posted);
}

/* ---- a loop nobody leads: its thread sleeps in the loop's own poll ----------------------------
 */

#define SERVE_REQS 300

typedef struct echo {
    env_uv_thread_t *t;
    int fds[2]; /* socketpair: the loop answers on fds[0] each byte the test writes to fds[1] */
    uv_poll_t poll;
} echo_t;

static void on_request(uv_poll_t *h, int status, int events)
{
    echo_t *e = h->data;
    (void)status;
    (void)events;
    char c;
    if (read(e->fds[0], &c, 1) == 1)
        assert_int_equal(write(e->fds[0], &c, 1), 1);
}

static void echo_start(void *arg)
{
    echo_t *e = arg;
    uv_loop_t *loop = env_uv_loop(env_uv_thread_env(e->t));
    assert_int_equal(uv_poll_init(loop, &e->poll, e->fds[0]), 0);
    e->poll.data = e;
    assert_int_equal(uv_poll_start(&e->poll, UV_READABLE, on_request), 0);
}

static void echo_close(void *arg)
{
    echo_t *e = arg;
    uv_close((uv_handle_t *)&e->poll, NULL);
}

/* One request a peer would send: a byte, then its answer (bounded). */
static bool echo_request(echo_t *e)
{
    if (write(e->fds[1], "r", 1) != 1)
        return false;
    struct pollfd p = {.fd = e->fds[1], .events = POLLIN};
    char c;
    return poll(&p, 1, WAIT_MS) == 1 && read(e->fds[1], &c, 1) == 1;
}

static void test_unled_loop_sleeps_in_its_poll(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 9), 0);
    echo_t e = {.t = t};
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, e.fds), 0);
    assert_int_equal(env_uv_thread_call(t, echo_start, &e), 0);
    assert_true(echo_request(&e));

    /* No thread leads (a storage daemon's loop): each request wakes the loop thread once, in the
     * loop's own poll, and that pass serves it: one poll per request. Before, the loop thread
     * slept in its own epoll set and then ran a pass whose poll was a second epoll_wait: two per
     * request. Requests come one at a time, and nothing else wakes this loop (no timer). */
    env_uv_thread_stats_t before, after;
    env_uv_thread_stats(t, &before);
    for (int i = 0; i < SERVE_REQS; i++)
        assert_true(echo_request(&e));
    env_uv_thread_stats(t, &after);
    uint64_t polls = after.polls - before.polls;
    fprintf(stderr, "%d requests nobody leads for: %llu loop-thread polls, %llu in the loop\n",
            SERVE_REQS, (unsigned long long)polls,
            (unsigned long long)(after.loop_sleeps - before.loop_sleeps));
    /* (a pass is counted as it starts: the one under way at the first count may serve the first
     * request, and the one waiting for the next after the last is counted too) */
    assert_true(polls >= SERVE_REQS - 1);
    assert_true(polls <= SERVE_REQS + SERVE_REQS / 4);

    /* Asking whether the loop thread sleeps between passes (where a lead can take the loop) is
     * false while it sleeps in the loop, and wakes it: it then parks outside (bounded wait). */
    assert_false(env_uv_thread_parked(t));
    uint64_t until = env_clock_mono_ms() + WAIT_MS;
    while (!env_uv_thread_parked(t) && env_clock_mono_ms() < until)
        sched_yield();
    assert_true(env_uv_thread_parked(t));
    assert_true(echo_request(&e)); /* I/O wakes it there too */
    /* nobody leads for long enough: it sleeps in the loop again (I/O wakes it after
     * ENV_UV_LEAD_RECENT_MS) */
    env_uv_thread_stats_t mid;
    env_uv_thread_stats(t, &mid);
    usleep((ENV_UV_LEAD_RECENT_MS + 100) * 1000);
    assert_true(echo_request(&e));
    env_uv_thread_stats(t, &after);
    assert_true(after.loop_sleeps > mid.loop_sleeps);

    /* A thread that wants to lead then is refused while the loop thread sleeps in the loop, and
     * wakes it: from its next pass on the loop thread sleeps outside the loop, and a lead tried
     * again finds the loop free (bounded; a loop thread left asleep would refuse for good). */
    int n = 0;
    enum env_uv_lead r = ENV_UV_LEAD_REFUSED;
    env_uv_thread_stats(t, &after);
    until = env_clock_mono_ms() + WAIT_MS;
    while (r == ENV_UV_LEAD_REFUSED && env_clock_mono_ms() < until) {
        r = env_uv_thread_lead(t, count_cb, &n, always_done, NULL, 0);
        if (r == ENV_UV_LEAD_REFUSED)
            sched_yield();
    }
    assert_int_equal(r, ENV_UV_LEAD_DONE);
    assert_int_equal(n, 1);
    env_uv_thread_stats_t led;
    env_uv_thread_stats(t, &led);
    assert_true(led.lead_wakes - after.lead_wakes <= led.refused - after.refused);
    /* and requests still wake the loop thread, now asleep outside the loop */
    for (int i = 0; i < 10; i++)
        assert_true(echo_request(&e));

    assert_int_equal(env_uv_thread_call(t, echo_close, &e), 0);
    env_uv_thread_stop(t);
    close(e.fds[0]);
    close(e.fds[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lead_runs_on_caller),
        cmocka_unit_test(test_lead_refused_when_busy),
        cmocka_unit_test(test_lead_deadline),
        cmocka_unit_test(test_leader_timer_fires_later),
        cmocka_unit_test(test_stop_while_leading),
        cmocka_unit_test(test_lead_keeps_caller_state),
        cmocka_unit_test(test_lead_race),
        cmocka_unit_test(test_leads_in_a_row),
        cmocka_unit_test(test_unled_loop_sleeps_in_its_poll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
