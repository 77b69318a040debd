/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_env_uv.c — the libuv environment binding: timer order and cancellation, defer turns,
 * the bounded thread-safe post queue (several threads, runs under TSan), message hooks, the RNG,
 * release with work pending, and the private loop thread helper.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>

#include "core/util.h"
#include "env/env_uv.h"

#define MS 1000000ull

typedef struct rec {
    env_t *env;
    int order[32];
    int n;
    uint64_t start_ns;
    uint64_t fired_ns[32];
    env_timer_id ids[32];
} rec_t;

typedef struct tctx {
    rec_t *r;
    int tag;
    uint64_t delay_ns;
} tctx_t;

static void on_fire(void *arg)
{
    tctx_t *c = arg;
    c->r->fired_ns[c->r->n] = env_now_ns(c->r->env);
    c->r->order[c->r->n++] = c->tag;
    assert_true(env_now_ns(c->r->env) >= c->r->start_ns + c->delay_ns); /* never early */
}

static void run_loop_to_end(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
}

static void close_env(uv_loop_t *loop, env_t *env)
{
    env_uv_free(env);
    uv_run(loop, UV_RUN_DEFAULT); /* close callbacks release the env */
    assert_int_equal(uv_loop_close(loop), 0);
}

static void test_timer_order(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 7), 0);
    assert_int_equal(env_self(env), 7);
    assert_ptr_equal(env_uv_loop(env), &loop);
    rec_t r = {.env = env, .start_ns = env_now_ns(env)};
    tctx_t c[5] = {{&r, 0, 30 * MS}, {&r, 1, 10 * MS}, {&r, 2, 20 * MS}, {&r, 3, 0}, {&r, 4, 0}};
    for (int i = 0; i < 5; i++) {
        r.ids[i] = env_timer_start(env, c[i].delay_ns, on_fire, &c[i]);
        assert_true(r.ids[i] != 0);
    }
    /* ids are distinct */
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            assert_true(r.ids[i] != r.ids[j]);
    assert_int_equal(env_uv_timer_count(env), 5);
    run_loop_to_end(&loop);
    assert_int_equal(r.n, 5);
    /* same deadline: start order; then by deadline. (3 and 4 have delay 0; 3 started first) */
    int want[] = {3, 4, 1, 2, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(r.order[i], want[i]);
    assert_int_equal(env_uv_timer_count(env), 0);
    close_env(&loop, env);
}

typedef struct cancel_ctx {
    env_t *env;
    env_timer_id victim;
    env_timer_id self_id;
    int fired_self, fired_victim;
} cancel_ctx_t;

static void on_victim(void *arg)
{
    ((cancel_ctx_t *)arg)->fired_victim++;
}

static void on_canceller(void *arg)
{
    cancel_ctx_t *c = arg;
    c->fired_self++;
    env_timer_cancel(c->env, c->self_id); /* its own, already fired id: no-op */
    env_timer_cancel(c->env, c->victim);  /* a pending timer: removed */
}

static void test_timer_cancel(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    cancel_ctx_t c = {.env = env};
    /* cancel before run */
    env_timer_id a = env_timer_start(env, 5 * MS, on_victim, &c);
    env_timer_cancel(env, a);
    env_timer_cancel(env, a);      /* twice: no-op */
    env_timer_cancel(env, 0);      /* zero: no-op */
    env_timer_cancel(env, 999999); /* unknown: no-op */
    /* a callback cancels another pending timer and its own id */
    c.self_id = env_timer_start(env, 1 * MS, on_canceller, &c);
    c.victim = env_timer_start(env, 40 * MS, on_victim, &c);
    assert_int_equal(env_uv_timer_count(env), 2);
    run_loop_to_end(&loop);
    assert_int_equal(c.fired_self, 1);
    assert_int_equal(c.fired_victim, 0);
    assert_int_equal(env_uv_timer_count(env), 0);
    env_timer_cancel(env, c.self_id); /* fired: no-op */
    /* release with timers still armed frees them (ASan checks for leaks) */
    for (int i = 0; i < 10; i++)
        assert_true(env_timer_start(env, 1000 * MS, on_victim, &c) != 0);
    assert_int_equal(env_uv_timer_count(env), 10);
    close_env(&loop, env);
    assert_int_equal(c.fired_victim, 0);
}

/* Fired and cancelled timer records are kept for reuse, at most ENV_UV_TIMER_SPARE of them;
 * reused ones fire in order, never early, and cancel like new ones. */
static void test_timer_spares(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    assert_int_equal(env_uv_timer_spare_count(env), 0);
    cancel_ctx_t c = {.env = env};
    env_timer_id ids[2 * ENV_UV_TIMER_SPARE];
    for (size_t i = 0; i < 2 * ENV_UV_TIMER_SPARE; i++)
        assert_true((ids[i] = env_timer_start(env, 1000 * MS, on_victim, &c)) != 0);
    for (size_t i = 0; i < 2 * ENV_UV_TIMER_SPARE; i++)
        env_timer_cancel(env, ids[i]);
    assert_int_equal(env_uv_timer_count(env), 0);
    assert_int_equal(env_uv_timer_spare_count(env), ENV_UV_TIMER_SPARE); /* bounded */
    rec_t r = {.env = env, .start_ns = env_now_ns(env)};
    tctx_t t[4] = {{&r, 0, 20 * MS}, {&r, 1, 0}, {&r, 2, 5 * MS}, {&r, 3, 1000 * MS}};
    for (int i = 0; i < 4; i++)
        assert_true((r.ids[i] = env_timer_start(env, t[i].delay_ns, on_fire, &t[i])) != 0);
    assert_int_equal(env_uv_timer_spare_count(env), ENV_UV_TIMER_SPARE - 4);
    for (int i = 0; i < 4; i++) /* new ids, not the cancelled ones of the reused records */
        assert_true(r.ids[i] > ids[2 * ENV_UV_TIMER_SPARE - 1]);
    env_timer_cancel(env, ids[0]);   /* an id whose record was reused: a no-op */
    env_timer_cancel(env, r.ids[3]); /* a reused record cancelled again */
    run_loop_to_end(&loop);
    assert_int_equal(r.n, 3);
    int want[] = {1, 2, 0};
    for (int i = 0; i < 3; i++)
        assert_int_equal(r.order[i], want[i]);
    assert_int_equal(c.fired_victim, 0);
    assert_int_equal(env_uv_timer_spare_count(env), ENV_UV_TIMER_SPARE);
    close_env(&loop, env); /* spares freed (ASan checks for leaks) */
}

/* Cancelling the first timer leaves the uv timer armed for its deadline (no re-arm, no clock
 * read): the later timers still fire in order and never early, and cancelling the last one
 * stops the uv timer, so the loop ends instead of waiting for a cancelled deadline. */
static void test_timer_cancel_first(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    cancel_ctx_t c = {.env = env};
    rec_t r = {.env = env, .start_ns = env_now_ns(env)};
    tctx_t t[2] = {{&r, 0, 20 * MS}, {&r, 1, 30 * MS}};
    env_timer_id first = env_timer_start(env, 5 * MS, on_victim, &c);
    assert_true((r.ids[0] = env_timer_start(env, t[0].delay_ns, on_fire, &t[0])) != 0);
    env_timer_id far = env_timer_start(env, 1000000 * MS, on_victim, &c);
    assert_true((r.ids[1] = env_timer_start(env, t[1].delay_ns, on_fire, &t[1])) != 0);
    env_timer_cancel(env, first); /* the first: the uv timer stays armed for 5 ms */
    env_timer_cancel(env, far);
    assert_int_equal(env_uv_timer_count(env), 2);
    run_loop_to_end(&loop); /* on_fire asserts each fires no earlier than its deadline */
    assert_int_equal(r.n, 2);
    assert_int_equal(r.order[0], 0);
    assert_int_equal(r.order[1], 1);
    /* the only timer, far away, cancelled: the loop has nothing left and ends at once (a uv
     * timer left armed would hold it for 1000 s) */
    env_timer_id only = env_timer_start(env, 1000000 * MS, on_victim, &c);
    assert_true(only != 0);
    env_timer_cancel(env, only);
    assert_int_equal(env_uv_timer_count(env), 0);
    run_loop_to_end(&loop);
    assert_int_equal(c.fired_victim, 0);
    close_env(&loop, env);
}

typedef struct defer_ctx {
    env_t *env;
    char log[16];
    int n;
    int in_call;
} defer_ctx_t;

static void d_b(void *arg)
{
    defer_ctx_t *d = arg;
    d->log[d->n++] = 'b';
}

static void d_c(void *arg)
{
    defer_ctx_t *d = arg;
    d->log[d->n++] = 'c';
}

static void d_a(void *arg)
{
    defer_ctx_t *d = arg;
    assert_int_equal(d->in_call, 0);
    d->log[d->n++] = 'a';
    assert_int_equal(env_defer(d->env, d_b, d), 0); /* runs on a later turn, after c */
}

static void test_defer(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    defer_ctx_t d = {.env = env};
    d.in_call = 1;
    assert_int_equal(env_defer(env, d_a, &d), 0);
    assert_int_equal(env_defer(env, d_c, &d), 0);
    d.in_call = 0;
    assert_int_equal(d.n, 0); /* never inside the defer call */
    run_loop_to_end(&loop);
    assert_int_equal(d.n, 3);
    assert_memory_equal(d.log, "acb", 3);
    /* pending deferred work at release is dropped without running or leaking */
    assert_int_equal(env_defer(env, d_c, &d), 0);
    close_env(&loop, env);
    assert_int_equal(d.n, 3);
}

static void count_cb(void *arg)
{
    (*(int *)arg)++;
}

static void noop_timer(uv_timer_t *h)
{
    (void)h;
}
#define NULL_TIMER_CB noop_timer

static void test_post_bounded(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    int n = 0;
    for (unsigned i = 0; i < ENV_UV_POST_CAP; i++)
        assert_int_equal(env_post(env, count_cb, &n), 0);
    assert_int_equal(env_post(env, count_cb, &n), KVMESH_EAGAIN);
    /* the env's async handle is unreferenced: an idle loop would not run, so keep it alive with
     * a referenced timer of our own and run turns until drained */
    uv_timer_t keepalive;
    uv_timer_init(&loop, &keepalive);
    uv_timer_start(&keepalive, NULL_TIMER_CB, 3600000, 0);
    for (int turns = 0; n < (int)ENV_UV_POST_CAP && turns < 1000; turns++)
        uv_run(&loop, UV_RUN_NOWAIT);
    uv_close((uv_handle_t *)&keepalive, NULL);
    assert_int_equal(n, ENV_UV_POST_CAP);
    assert_int_equal(env_post(env, count_cb, &n), 0);
    env_uv_free(env);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(n, ENV_UV_POST_CAP); /* the last one was dropped at release */
    assert_int_equal(uv_loop_close(&loop), 0);
}

#define POSTERS    4
#define PER_THREAD 20000

typedef struct poster {
    env_uv_thread_t *t;
    long *counter;
    int eagain;
} poster_t;

static void incr(void *arg)
{
    (*(long *)arg)++; /* loop thread only: no lock */
}

static void *poster_main(void *arg)
{
    poster_t *p = arg;
    env_t *env = env_uv_thread_env(p->t);
    for (int i = 0; i < PER_THREAD; i++) {
        int rc;
        while ((rc = env_post(env, incr, p->counter)) == KVMESH_EAGAIN) {
            p->eagain++;
            sched_yield();
        }
        assert_int_equal(rc, 0);
    }
    return NULL;
}

typedef struct read_ctx {
    env_uv_thread_t *t;
    long *counter;
    long value;
    int on_loop;
} read_ctx_t;

static void read_counter(void *arg)
{
    read_ctx_t *r = arg;
    r->on_loop = env_uv_thread_is_current(r->t);
    r->value = *r->counter;
}

static void test_post_threads(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 3), 0);
    assert_false(env_uv_thread_is_current(t));
    long counter = 0;
    pthread_t th[POSTERS];
    poster_t p[POSTERS];
    for (int i = 0; i < POSTERS; i++) {
        p[i] = (poster_t){.t = t, .counter = &counter};
        assert_int_equal(pthread_create(&th[i], NULL, poster_main, &p[i]), 0);
    }
    for (int i = 0; i < POSTERS; i++)
        pthread_join(th[i], NULL);
    /* FIFO per queue: a call posted after every increment observes all of them */
    read_ctx_t r = {.t = t, .counter = &counter};
    assert_int_equal(env_uv_thread_call(t, read_counter, &r), 0);
    assert_int_equal(r.value, (long)POSTERS * PER_THREAD);
    assert_int_equal(r.on_loop, 1);
    env_uv_thread_stop(t);
}

typedef struct timer_on_thread {
    env_uv_thread_t *t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fired;
} timer_on_thread_t;

static void tot_fire(void *arg)
{
    timer_on_thread_t *c = arg;
    pthread_mutex_lock(&c->mu);
    c->fired++;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void tot_arm(void *arg)
{
    timer_on_thread_t *c = arg;
    env_t *env = env_uv_thread_env(c->t);
    assert_true(env_timer_start(env, 2 * MS, tot_fire, c) != 0);
    env_timer_start(env, 3600000 * MS, tot_fire, c); /* left armed: dropped at stop */
}

static void test_thread_timer_and_stop(void **state)
{
    (void)state;
    env_uv_thread_t *t;
    assert_int_equal(env_uv_thread_start(&t, 1), 0);
    timer_on_thread_t c = {.t = t};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    assert_int_equal(env_uv_thread_call(t, tot_arm, &c), 0);
    pthread_mutex_lock(&c.mu);
    while (c.fired == 0)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    env_uv_thread_stop(t);
    assert_int_equal(c.fired, 1);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
}

typedef struct msg_ctx {
    env_node_t to;
    uint32_t type;
    char buf[16];
    size_t len;
    int calls;
    int rc;
} msg_ctx_t;

static int sender(void *ctx, env_node_t to, uint32_t type, const void *data, size_t len)
{
    msg_ctx_t *m = ctx;
    m->to = to;
    m->type = type;
    memcpy(m->buf, data, len);
    m->len = len;
    m->calls++;
    return m->rc;
}

static void receiver(void *ctx, const env_msg_t *msg)
{
    msg_ctx_t *m = ctx;
    m->to = msg->to;
    m->type = msg->type;
    memcpy(m->buf, msg->data, msg->len);
    m->len = msg->len;
    m->calls++;
}

static void test_messages(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 2), 0);
    assert_int_equal(env_send(env, 1, 9, "x", 1), KVMESH_EUNAVAILABLE);
    msg_ctx_t out = {0};
    env_uv_set_sender(env, sender, &out);
    assert_int_equal(env_send(env, 5, 42, "hello", 5), 0);
    assert_int_equal(out.calls, 1);
    assert_int_equal(out.to, 5);
    assert_int_equal(out.type, 42);
    assert_memory_equal(out.buf, "hello", 5);
    out.rc = KVMESH_ECONN;
    assert_int_equal(env_send(env, 5, 42, "hello", 5), KVMESH_ECONN);

    env_msg_t msg = {.from = 5, .to = 2, .type = 43, .data = (const uint8_t *)"pong", .len = 4};
    assert_int_equal(env_uv_deliver(env, &msg), KVMESH_EUNAVAILABLE);
    msg_ctx_t in = {0};
    env_set_recv(env, receiver, &in);
    assert_int_equal(env_uv_deliver(env, &msg), 0);
    assert_int_equal(in.calls, 1);
    assert_int_equal(in.type, 43);
    assert_memory_equal(in.buf, "pong", 4);
    close_env(&loop, env);
}

static int g_att_calls;
static const env_att_t *g_att_seen;

static int sender_att(void *ctx, env_node_t to, uint32_t type, const void *data, size_t len,
                      const env_att_t *att)
{
    (void)ctx, (void)to, (void)type, (void)data, (void)len;
    g_att_calls++;
    g_att_seen = att;
    return 0;
}

static void att_sent(int status, void *arg)
{
    (void)status, (void)arg;
}

/* env_send_att: KVMESH_ENOTSUP without a hook (the caller sends the copied form), the hook gets
 * the attachment as given (not copied), and removing the hook answers ENOTSUP again. */
static void test_messages_att(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 2), 0);
    static const uint8_t bytes[3] = {1, 2, 3};
    env_att_t att = {.data = bytes, .len = sizeof(bytes), .sent = att_sent, .arg = env};
    assert_int_equal(env_send_att(env, 5, 42, "h", 1, &att), KVMESH_ENOTSUP);
    env_uv_set_sender_att(env, sender_att, NULL);
    assert_int_equal(env_send_att(env, 5, 42, "h", 1, &att), 0);
    assert_int_equal(g_att_calls, 1);
    assert_ptr_equal(g_att_seen, &att);
    assert_ptr_equal(g_att_seen->data, bytes);
    env_uv_set_sender_att(env, NULL, NULL);
    assert_int_equal(env_send_att(env, 5, 42, "h", 1, &att), KVMESH_ENOTSUP);
    assert_int_equal(g_att_calls, 1);
    close_env(&loop, env);
}

static void test_clock_and_rng(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *a, *b;
    assert_int_equal(env_uv_new(&a, &loop, 0), 0);
    assert_int_equal(env_uv_new(&b, &loop, 1), 0);
    /* fresh envs are seeded from the OS: different streams */
    assert_true(env_rand_u64(a) != env_rand_u64(b));
    env_uv_seed(a, 1234);
    env_uv_seed(b, 1234);
    for (int i = 0; i < 100; i++)
        assert_true(env_rand_u64(a) == env_rand_u64(b));
    env_uv_seed(b, 1235);
    assert_true(env_rand_u64(a) != env_rand_u64(b));
    uint64_t t0 = env_now_ns(a);
    uint64_t t1 = env_now_ns(a);
    assert_true(t1 >= t0);
    /* wall clock is Unix ms: after 2020-01-01 */
    assert_true(env_wall_ms(a) > 1577836800000ull);
    env_uv_free(b);
    close_env(&loop, a);
}

typedef struct self_free {
    env_t *env;
    int ran;
} self_free_t;

static void free_from_callback(void *arg)
{
    self_free_t *f = arg;
    f->ran++;
    env_uv_free(f->env); /* allowed on the loop thread, also inside the env's own callbacks */
    assert_int_equal(env_post(f->env, count_cb, &f->ran), KVMESH_ECLOSED);
}

static void test_free_inside_callbacks(void **state)
{
    (void)state;
    /* from a timer callback, with another timer due in the same batch */
    uv_loop_t loop;
    uv_loop_init(&loop);
    self_free_t f = {0};
    int dropped = 0;
    assert_int_equal(env_uv_new(&f.env, &loop, 0), 0);
    env_timer_start(f.env, 1 * MS, free_from_callback, &f);
    env_timer_start(f.env, 1 * MS, count_cb, &dropped); /* same deadline, later id: dropped */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(f.ran, 1);
    assert_int_equal(dropped, 0);
    assert_int_equal(uv_loop_close(&loop), 0);

    /* from a defer callback, with more deferred work in the same batch */
    uv_loop_init(&loop);
    f = (self_free_t){0};
    assert_int_equal(env_uv_new(&f.env, &loop, 0), 0);
    assert_int_equal(env_defer(f.env, free_from_callback, &f), 0);
    assert_int_equal(env_defer(f.env, count_cb, &dropped), 0); /* same batch: dropped */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(f.ran, 1);
    assert_int_equal(dropped, 0);
    assert_int_equal(uv_loop_close(&loop), 0);

    /* from a posted callback, with more posted work queued */
    uv_loop_init(&loop);
    f = (self_free_t){0};
    assert_int_equal(env_uv_new(&f.env, &loop, 0), 0);
    assert_int_equal(env_post(f.env, free_from_callback, &f), 0);
    assert_int_equal(env_post(f.env, count_cb, &dropped), 0); /* dropped */
    uv_timer_t keepalive;
    uv_timer_init(&loop, &keepalive);
    uv_timer_start(&keepalive, noop_timer, 3600000, 0);
    for (int turns = 0; f.ran == 0 && turns < 100; turns++)
        uv_run(&loop, UV_RUN_NOWAIT);
    uv_close((uv_handle_t *)&keepalive, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(f.ran, 1);
    assert_int_equal(dropped, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_zero_delay_timers(void **state)
{
    (void)state;
    /* 0-delay timers and deferred work all run, timers in start order */
    uv_loop_t loop;
    uv_loop_init(&loop);
    env_t *env;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    rec_t r = {.env = env, .start_ns = env_now_ns(env)};
    tctx_t c[3] = {{&r, 0, 0}, {&r, 1, 0}, {&r, 2, 0}};
    /* a timer at the end of time stays armed without disturbing the others */
    env_timer_id never = env_timer_start(env, UINT64_MAX, on_fire, &c[0]);
    assert_true(never != 0);
    env_timer_start(env, 0, on_fire, &c[0]);
    env_timer_start(env, 0, on_fire, &c[1]);
    assert_int_equal(env_defer(env, on_fire, &c[2]), 0);
    for (int turns = 0; r.n < 3 && turns < 1000; turns++)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(r.n, 3);
    assert_int_equal(env_uv_timer_count(env), 1);
    env_timer_cancel(env, never);
    assert_int_equal(env_uv_timer_count(env), 0);
    run_loop_to_end(&loop); /* nothing armed: returns */
    close_env(&loop, env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_order),
        cmocka_unit_test(test_timer_cancel),
        cmocka_unit_test(test_timer_spares),
        cmocka_unit_test(test_timer_cancel_first),
        cmocka_unit_test(test_defer),
        cmocka_unit_test(test_post_bounded),
        cmocka_unit_test(test_post_threads),
        cmocka_unit_test(test_thread_timer_and_stop),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_messages_att),
        cmocka_unit_test(test_clock_and_rng),
        cmocka_unit_test(test_free_inside_callbacks),
        cmocka_unit_test(test_zero_delay_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
