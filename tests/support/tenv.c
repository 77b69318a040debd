/* SPDX-License-Identifier: Apache-2.0 */
/* tenv.c — see tenv.h. */
#include "tenv.h"

#include <string.h>

#include "kvmesh.h"

static struct tenv *T(env_t *e)
{
    return (struct tenv *)e->impl;
}
static uint64_t t_now(env_t *e)
{
    return T(e)->now;
}
static uint64_t t_wall(env_t *e)
{
    return 1700000000000ull + T(e)->now / 1000000u;
}
static uint64_t t_rand(env_t *e)
{
    uint64_t x = T(e)->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return T(e)->rng = x;
}
static env_timer_id t_start(env_t *e, uint64_t delay, env_cb cb, void *arg)
{
    struct tenv *t = T(e);
    if (t->n == TENV_MAX_TIMERS)
        return 0;
    t->t[t->n++] = (struct ttimer){.id = ++t->next_id, .due = t->now + delay, .cb = cb, .arg = arg};
    return t->next_id;
}
static void t_cancel(env_t *e, env_timer_id id)
{
    struct tenv *t = T(e);
    for (size_t i = 0; i < t->n; i++)
        if (t->t[i].id == id) {
            t->t[i] = t->t[--t->n];
            return;
        }
}
static int t_defer(env_t *e, env_cb cb, void *arg)
{
    return t_start(e, 0, cb, arg) ? 0 : KVMESH_ENOMEM;
}
static int t_send(env_t *e, env_node_t to, uint32_t type, const void *d, size_t l)
{
    (void)e, (void)to, (void)type, (void)d, (void)l;
    return KVMESH_EUNAVAILABLE;
}
static void t_set_recv(env_t *e, env_recv_fn fn, void *ctx)
{
    (void)e, (void)fn, (void)ctx;
}
static env_node_t t_self(env_t *e)
{
    (void)e;
    return 0;
}
static void *t_loop(env_t *e)
{
    (void)e;
    return NULL;
}

const struct env_ops tenv_ops = {
    .now_ns = t_now,
    .wall_ms = t_wall,
    .rand_u64 = t_rand,
    .timer_start = t_start,
    .timer_cancel = t_cancel,
    .defer = t_defer,
    .post = t_defer,
    .send = t_send,
    .set_recv = t_set_recv,
    .self = t_self,
    .uv_loop = t_loop,
};

void tenv_init(struct tenv *t, uint64_t seed)
{
    memset(t, 0, sizeof(*t));
    t->env.ops = &tenv_ops;
    t->env.impl = t;
    t->rng = seed;
}

bool tenv_step(struct tenv *t, uint64_t limit)
{
    if (!t->n)
        return false;
    size_t best = 0;
    for (size_t i = 1; i < t->n; i++)
        if (t->t[i].due < t->t[best].due ||
            (t->t[i].due == t->t[best].due && t->t[i].id < t->t[best].id))
            best = i;
    if (t->t[best].due > limit)
        return false;
    struct ttimer x = t->t[best];
    t->t[best] = t->t[--t->n];
    if (x.due > t->now)
        t->now = x.due;
    x.cb(x.arg);
    return true;
}
