/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_uv.c — the real environment binding on libuv (see env_uv.h for the contract).
 *
 * Invariants:
 *   - every armed timer is in both trees: by_deadline (ordered by (deadline, id)) and by_id;
 *     the uv timer is armed for the earliest deadline whenever by_deadline is non-empty;
 *   - a fired or cancelled timer is removed from both trees and freed before its callback runs,
 *     so a callback may start and cancel timers freely (including its own, now stale, id);
 *   - the idle handle is active exactly while the defer list is non-empty;
 *   - post_q holds at most ENV_UV_POST_CAP entries and is touched only under post_mu;
 *   - the env memory is freed only after all four handles reported their close callbacks;
 *   - the check handle is active (unreferenced) for the env's life: each pass ends with the
 *     timers and deferred callbacks already due (on_uv_check, bounded rounds);
 *   - spare holds at most ENV_UV_TIMER_SPARE freed timer records, linked through next_spare and
 *     in neither tree (a record is reused by the next timer_start instead of a calloc per timer:
 *     route and store ops arm and cancel several timers per op).
 */
#include "env/env_uv.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <bsd/sys/tree.h>

#include "core/rng.h"
#include "core/util.h"
#include "env/clock.h"

typedef struct uvtimer {
    RB_ENTRY(uvtimer) by_deadline;
    RB_ENTRY(uvtimer) by_id;
    uint64_t deadline_ns;
    env_timer_id id;
    env_cb cb;
    void *arg;
    struct uvtimer *next_spare; /* in u->spare only */
} uvtimer_t;

static int cmp_deadline(const uvtimer_t *a, const uvtimer_t *b)
{
    if (a->deadline_ns != b->deadline_ns)
        return a->deadline_ns < b->deadline_ns ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id ? 1 : 0);
}

static int cmp_id(const uvtimer_t *a, const uvtimer_t *b)
{
    return a->id < b->id ? -1 : (a->id > b->id ? 1 : 0);
}

RB_HEAD(deadline_tree, uvtimer);
RB_HEAD(id_tree, uvtimer);
/* libbsd's RB_GENERATE_STATIC expands to an undefined __unused; spell the attribute out */
#define ENV_UV_RB_ATTR __attribute__((unused)) static
RB_GENERATE_INTERNAL(deadline_tree, uvtimer, by_deadline, cmp_deadline, ENV_UV_RB_ATTR)
RB_GENERATE_INTERNAL(id_tree, uvtimer, by_id, cmp_id, ENV_UV_RB_ATTR)

typedef struct defer_item {
    struct defer_item *next;
    env_cb cb;
    void *arg;
} defer_item_t;

typedef struct post_item {
    env_cb cb;
    void *arg;
} post_item_t;

typedef struct env_uv {
    env_t env;
    uv_loop_t *loop;
    env_node_t self;
    kvm_rng_t rng;

    /* timers */
    uv_timer_t timer;
    struct deadline_tree by_deadline;
    struct id_tree by_id;
    env_timer_id next_timer_id;
    size_t n_timers;
    uvtimer_t *spare; /* freed records for reuse (at most ENV_UV_TIMER_SPARE) */
    size_t n_spare;

    /* defer */
    uv_idle_t idle;
    uv_check_t check; /* runs the work a pass's callbacks left due at once (drain_due) */
    defer_item_t *defer_head, *defer_tail;
    size_t n_defer;

    /* post (post_mu guards post_q, post_head, post_count, post_closed) */
    uv_async_t async;
    pthread_mutex_t post_mu;
    post_item_t *post_q;
    uint32_t post_head, post_count;
    bool post_closed;
    env_cb post_hook; /* env_uv_set_post_hook: run after each accepted post, on the poster */
    void *post_hook_ctx;

    /* messages */
    env_uv_sender_fn sender;
    void *sender_ctx;
    env_uv_sender_att_fn sender_att;
    void *sender_att_ctx;
    env_recv_fn recv;
    void *recv_ctx;

    int open_handles; /* handles not yet closed; memory freed when it reaches 0 after free */
    bool freeing;
} env_uv_t;

static env_uv_t *to_uv(env_t *env)
{
    return (env_uv_t *)env->impl;
}

/* ---- rng: xoshiro256** seeded through splitmix64 -------------------------------------------- */

static void rng_seed(env_uv_t *u, uint64_t seed)
{
    kvm_rng_seed(&u->rng, seed);
}

static uint64_t rng_next(env_uv_t *u)
{
    return kvm_rng_next(&u->rng);
}

static uint64_t seed_from_os(void)
{
    uint64_t seed = 0;
    ssize_t n = getrandom(&seed, sizeof(seed), 0);
    if (n != (ssize_t)sizeof(seed)) {
        /* getrandom cannot fail for 8 bytes after boot; keep a usable fallback anyway */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)uv_hrtime();
    }
    return seed;
}

/* ---- ops ------------------------------------------------------------------------------------ */

static uint64_t op_now_ns(env_t *env)
{
    (void)env;
    return uv_hrtime();
}

static uint64_t op_wall_ms(env_t *env)
{
    (void)env;
    return env_clock_wall_ms();
}

static uint64_t op_rand_u64(env_t *env)
{
    return rng_next(to_uv(env));
}

static void on_uv_timer(uv_timer_t *h);

static void timer_rearm(env_uv_t *u)
{
    uvtimer_t *first = RB_MIN(deadline_tree, &u->by_deadline);
    if (!first) {
        uv_timer_stop(&u->timer);
        return;
    }
    uint64_t now = uv_hrtime();
    uint64_t ms = 0;
    if (first->deadline_ns > now) {
        uint64_t diff = first->deadline_ns - now;
        ms = diff / 1000000u + (diff % 1000000u != 0); /* round up (no overflow): never early */
    }
    /* uv_now() lags uv_hrtime() by up to a loop turn; uv timers measure from uv_now(), so after
     * uv_update_time() the delay above is exact enough and only ever rounds late. */
    uv_update_time(u->loop);
    uv_timer_start(&u->timer, on_uv_timer, ms, 0);
}

static void timer_unlink(env_uv_t *u, uvtimer_t *t)
{
    RB_REMOVE(deadline_tree, &u->by_deadline, t);
    RB_REMOVE(id_tree, &u->by_id, t);
    u->n_timers--;
}

/* A zeroed timer record: a spare one, else a new one (NULL: no memory). */
static uvtimer_t *timer_alloc(env_uv_t *u)
{
    uvtimer_t *t = u->spare;
    if (!t)
        return calloc(1, sizeof(*t));
    u->spare = t->next_spare;
    u->n_spare--;
    memset(t, 0, sizeof(*t));
    return t;
}

/* Frees t (unlinked from both trees), keeping it as a spare while there is room. */
static void timer_release(env_uv_t *u, uvtimer_t *t)
{
    if (u->n_spare >= ENV_UV_TIMER_SPARE || u->freeing) {
        free(t);
        return;
    }
    t->next_spare = u->spare;
    u->spare = t;
    u->n_spare++;
}

static void spares_free(env_uv_t *u)
{
    while (u->spare) {
        uvtimer_t *t = u->spare;
        u->spare = t->next_spare;
        free(t);
    }
    u->n_spare = 0;
}

/* Runs the timers due at now that were armed before this call (timers armed by these callbacks
 * wait for the next batch, even with delay 0), then re-arms the uv timer for the first left.
 * Returns the number run; stops early when a callback freed the env. */
static unsigned timers_run(env_uv_t *u, uint64_t now)
{
    env_timer_id id_limit = u->next_timer_id;
    unsigned ran = 0;
    for (;;) {
        uvtimer_t *t = RB_MIN(deadline_tree, &u->by_deadline);
        if (!t || t->deadline_ns > now || t->id >= id_limit)
            break;
        timer_unlink(u, t);
        env_cb cb = t->cb;
        void *arg = t->arg;
        timer_release(u, t);
        cb(arg);
        ran++;
        if (u->freeing)
            return ran;
    }
    timer_rearm(u);
    return ran;
}

static void on_uv_timer(uv_timer_t *h)
{
    env_uv_t *u = h->data;
    timers_run(u, uv_hrtime());
}

static env_timer_id op_timer_start(env_t *env, uint64_t delay_ns, env_cb cb, void *arg)
{
    env_uv_t *u = to_uv(env);
    KVM_ASSERT(cb != NULL);
    KVM_ASSERT(!u->freeing);
    uvtimer_t *t = timer_alloc(u);
    if (!t)
        return 0;
    uint64_t now = uv_hrtime();
    t->deadline_ns = delay_ns > UINT64_MAX - now ? UINT64_MAX : now + delay_ns;
    t->id = u->next_timer_id++;
    t->cb = cb;
    t->arg = arg;
    RB_INSERT(deadline_tree, &u->by_deadline, t);
    RB_INSERT(id_tree, &u->by_id, t);
    u->n_timers++;
    if (RB_MIN(deadline_tree, &u->by_deadline) == t)
        timer_rearm(u);
    return t->id;
}

static void op_timer_cancel(env_t *env, env_timer_id id)
{
    env_uv_t *u = to_uv(env);
    if (id == 0)
        return;
    uvtimer_t key = {.id = id};
    uvtimer_t *t = RB_FIND(id_tree, &u->by_id, &key);
    if (!t)
        return;
    timer_unlink(u, t);
    timer_release(u, t);
    /* The uv timer stays armed for the deadline of the first timer it was armed for, which is
     * at or before every remaining one: it fires early at worst, and on_uv_timer re-arms for
     * the new first. Re-arming here read the clock twice and re-sorted libuv's heap for every
     * cancelled call and attempt (a batch's answers cancel their calls' timers oldest first,
     * each one the first). Nothing left: stop it, so an idle loop does not wake. */
    if (u->n_timers == 0)
        uv_timer_stop(&u->timer);
}

static void on_uv_idle(uv_idle_t *h)
{
    env_uv_t *u = h->data;
    /* Run the batch present now; callbacks deferred meanwhile go to the next turn. */
    defer_item_t *it = u->defer_head;
    u->defer_head = u->defer_tail = NULL;
    while (it) {
        defer_item_t *next = it->next;
        env_cb cb = it->cb;
        void *arg = it->arg;
        free(it);
        u->n_defer--;
        cb(arg);
        it = next;
        if (u->freeing) {
            /* env_uv_free() ran inside a callback: drop the rest of the batch */
            while (it) {
                next = it->next;
                free(it);
                it = next;
            }
            return;
        }
    }
    if (!u->defer_head)
        uv_idle_stop(&u->idle);
}

/*
 * The check phase of every loop pass (after its I/O callbacks): the timers due by now and the
 * deferred callbacks that the pass's callbacks left run here, in rounds (timers, then the defer
 * batch, as the next pass would run them), up to ENV_UV_DRAIN_ROUNDS rounds while a round found
 * work. Without it each step of a chain of 0-delay timers and deferred callbacks (a route op's
 * first attempt, a message to this node itself, its answer, the put that completes) cost one
 * more loop pass, i.e. one more epoll_wait, and, on a loop thread that sleeps between passes,
 * one more sleep-set poll. The bound keeps the loop polling I/O between rounds of a chain that
 * never ends.
 */
static void on_uv_check(uv_check_t *h)
{
    env_uv_t *u = h->data;
    for (unsigned round = 0; round < ENV_UV_DRAIN_ROUNDS; round++) {
        bool ran = false;
        uvtimer_t *first = RB_MIN(deadline_tree, &u->by_deadline);
        if (first) {
            uint64_t now = uv_hrtime();
            if (first->deadline_ns <= now) {
                ran = timers_run(u, now) > 0;
                if (u->freeing)
                    return;
            }
        }
        if (u->defer_head) {
            on_uv_idle(&u->idle);
            ran = true;
            if (u->freeing)
                return;
        }
        if (!ran)
            return;
    }
}

static int op_defer(env_t *env, env_cb cb, void *arg)
{
    env_uv_t *u = to_uv(env);
    KVM_ASSERT(cb != NULL);
    if (u->freeing)
        return KVMESH_ECLOSED;
    if (u->n_defer >= ENV_UV_DEFER_MAX)
        return KVMESH_EAGAIN;
    defer_item_t *it = malloc(sizeof(*it));
    if (!it)
        return KVMESH_ENOMEM;
    it->next = NULL;
    it->cb = cb;
    it->arg = arg;
    if (u->defer_tail)
        u->defer_tail->next = it;
    else
        u->defer_head = it;
    u->defer_tail = it;
    u->n_defer++;
    uv_idle_start(&u->idle, on_uv_idle); /* no-op when already active */
    return 0;
}

static void on_uv_async(uv_async_t *h)
{
    env_uv_t *u = h->data;
    post_item_t batch[ENV_UV_POST_BATCH];
    uint32_t n = 0;
    bool more;
    pthread_mutex_lock(&u->post_mu);
    while (n < ENV_UV_POST_BATCH && u->post_count > 0) {
        batch[n++] = u->post_q[u->post_head];
        u->post_head = (u->post_head + 1) % ENV_UV_POST_CAP;
        u->post_count--;
    }
    more = u->post_count > 0;
    pthread_mutex_unlock(&u->post_mu);
    for (uint32_t i = 0; i < n; i++) {
        batch[i].cb(batch[i].arg);
        if (u->freeing)
            return;
    }
    if (more)
        uv_async_send(&u->async); /* bounded work per turn: continue on the next one */
}

static int op_post(env_t *env, env_cb cb, void *arg)
{
    env_uv_t *u = to_uv(env);
    KVM_ASSERT(cb != NULL);
    int rc = 0;
    pthread_mutex_lock(&u->post_mu);
    if (u->post_closed) {
        rc = KVMESH_ECLOSED;
    } else if (u->post_count >= ENV_UV_POST_CAP) {
        rc = KVMESH_EAGAIN;
    } else {
        u->post_q[(u->post_head + u->post_count) % ENV_UV_POST_CAP] = (post_item_t){cb, arg};
        u->post_count++;
        /* sent under the lock: env_uv_free() closes the handle only after taking post_mu */
        uv_async_send(&u->async);
        if (u->post_hook) /* likewise: the env (and the hook's owner) outlives the lock */
            u->post_hook(u->post_hook_ctx);
    }
    pthread_mutex_unlock(&u->post_mu);
    return rc;
}

static int op_send(env_t *env, env_node_t to, uint32_t type, const void *data, size_t len)
{
    env_uv_t *u = to_uv(env);
    if (!u->sender)
        return KVMESH_EUNAVAILABLE;
    return u->sender(u->sender_ctx, to, type, data, len);
}

static int op_send_att(env_t *env, env_node_t to, uint32_t type, const void *data, size_t len,
                       const env_att_t *att)
{
    env_uv_t *u = to_uv(env);
    if (!u->sender_att)
        return KVMESH_ENOTSUP;
    return u->sender_att(u->sender_att_ctx, to, type, data, len, att);
}

static void op_set_recv(env_t *env, env_recv_fn fn, void *ctx)
{
    env_uv_t *u = to_uv(env);
    u->recv = fn;
    u->recv_ctx = ctx;
}

static env_node_t op_self(env_t *env)
{
    return to_uv(env)->self;
}

static void *op_uv_loop(env_t *env)
{
    return to_uv(env)->loop;
}

static const struct env_ops env_uv_ops = {
    .now_ns = op_now_ns,
    .wall_ms = op_wall_ms,
    .rand_u64 = op_rand_u64,
    .timer_start = op_timer_start,
    .timer_cancel = op_timer_cancel,
    .defer = op_defer,
    .post = op_post,
    .send = op_send,
    .send_att = op_send_att,
    .set_recv = op_set_recv,
    .self = op_self,
    .uv_loop = op_uv_loop,
};

/* ---- lifecycle ------------------------------------------------------------------------------ */

static void release(env_uv_t *u)
{
    pthread_mutex_destroy(&u->post_mu);
    free(u->post_q);
    free(u);
}

static void on_handle_closed(uv_handle_t *h)
{
    env_uv_t *u = h->data;
    if (--u->open_handles == 0 && u->freeing)
        release(u);
}

int env_uv_new(env_t **out, uv_loop_t *loop, env_node_t self)
{
    KVM_ASSERT(out != NULL && loop != NULL);
    *out = NULL;
    env_uv_t *u = calloc(1, sizeof(*u));
    if (!u)
        return KVMESH_ENOMEM;
    u->post_q = calloc(ENV_UV_POST_CAP, sizeof(*u->post_q));
    if (!u->post_q) {
        free(u);
        return KVMESH_ENOMEM;
    }
    if (pthread_mutex_init(&u->post_mu, NULL) != 0) {
        free(u->post_q);
        free(u);
        return KVMESH_ENOMEM;
    }
    u->env.ops = &env_uv_ops;
    u->env.impl = u;
    u->loop = loop;
    u->self = self;
    u->next_timer_id = 1;
    RB_INIT(&u->by_deadline);
    RB_INIT(&u->by_id);
    rng_seed(u, seed_from_os());

    /* uv_timer_init and uv_idle_init cannot fail; uv_async_init can (eventfd) */
    uv_timer_init(loop, &u->timer);
    u->timer.data = u;
    u->open_handles++;
    uv_idle_init(loop, &u->idle);
    u->idle.data = u;
    u->open_handles++;
    uv_check_init(loop, &u->check); /* cannot fail either */
    u->check.data = u;
    u->open_handles++;
    uv_check_start(&u->check, on_uv_check);
    uv_unref((uv_handle_t *)&u->check); /* active in every pass, keeps no loop alive */
    int rc = uv_async_init(loop, &u->async, on_uv_async);
    if (rc != 0) {
        u->freeing = true;
        uv_close((uv_handle_t *)&u->timer, on_handle_closed);
        uv_close((uv_handle_t *)&u->idle, on_handle_closed);
        uv_close((uv_handle_t *)&u->check, on_handle_closed);
        /* the memory is released by the close callbacks on the next loop turn */
        return kvm_errf(KVMESH_EIO, "uv_async_init failed: %s; check the fd limit",
                        uv_strerror(rc));
    }
    u->async.data = u;
    uv_unref((uv_handle_t *)&u->async);
    u->open_handles++;
    *out = &u->env;
    return 0;
}

void env_uv_free(env_t *env)
{
    if (!env)
        return;
    env_uv_t *u = to_uv(env);
    KVM_ASSERT(!u->freeing);
    u->freeing = true;
    uvtimer_t *t;
    while ((t = RB_MIN(deadline_tree, &u->by_deadline)) != NULL) {
        timer_unlink(u, t);
        free(t);
    }
    spares_free(u);
    defer_item_t *it = u->defer_head;
    while (it) {
        defer_item_t *next = it->next;
        free(it);
        it = next;
    }
    u->defer_head = u->defer_tail = NULL;
    u->n_defer = 0;
    pthread_mutex_lock(&u->post_mu);
    u->post_closed = true;
    u->post_count = 0;
    pthread_mutex_unlock(&u->post_mu);
    uv_close((uv_handle_t *)&u->timer, on_handle_closed);
    uv_close((uv_handle_t *)&u->idle, on_handle_closed);
    uv_close((uv_handle_t *)&u->check, on_handle_closed);
    uv_close((uv_handle_t *)&u->async, on_handle_closed);
}

void env_uv_set_sender(env_t *env, env_uv_sender_fn fn, void *ctx)
{
    env_uv_t *u = to_uv(env);
    u->sender = fn;
    u->sender_ctx = ctx;
}

void env_uv_set_post_hook(env_t *env, env_cb fn, void *ctx)
{
    env_uv_t *u = to_uv(env);
    u->post_hook = fn;
    u->post_hook_ctx = ctx;
}

bool env_uv_post_pending(env_t *env)
{
    env_uv_t *u = to_uv(env);
    pthread_mutex_lock(&u->post_mu);
    bool pending = u->post_count > 0;
    pthread_mutex_unlock(&u->post_mu);
    return pending;
}

void env_uv_set_sender_att(env_t *env, env_uv_sender_att_fn fn, void *ctx)
{
    env_uv_t *u = to_uv(env);
    u->sender_att = fn;
    u->sender_att_ctx = ctx;
}

int env_uv_deliver(env_t *env, const env_msg_t *msg)
{
    env_uv_t *u = to_uv(env);
    KVM_ASSERT(msg != NULL);
    if (!u->recv)
        return KVMESH_EUNAVAILABLE;
    u->recv(u->recv_ctx, msg);
    return 0;
}

void env_uv_seed(env_t *env, uint64_t seed)
{
    rng_seed(to_uv(env), seed);
}

size_t env_uv_timer_count(env_t *env)
{
    return to_uv(env)->n_timers;
}

size_t env_uv_timer_spare_count(env_t *env)
{
    return to_uv(env)->n_spare;
}
