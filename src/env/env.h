/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env.h — the environment: the only door to the outside world for protocol cores.
 *
 * Every protocol state machine (shard leases and fencing, route CAS and mirroring, membership,
 * quota, cold operations) asks for time, timers, randomness, deferred work and peer messages
 * through this interface and never calls time(), opens a socket or spawns a thread itself.
 *
 * Two bindings implement it:
 *   - the real one (env_uv.c): a libuv loop; peer messages are carried by the RPC layer;
 *   - the simulated one (tests/sim): a virtual clock, a seeded RNG, an event queue and a
 *     simulated network with delay/drop/duplicate/reorder/partition knobs.
 *
 * Threading: an env belongs to one loop thread. Every function here must be called on that
 * thread, except env_post(), which any thread may call. Callbacks always run on the loop thread.
 *
 * Ownership: message bytes passed to env_send() are copied before it returns; a received
 * message's bytes are valid only during the receive callback. An attachment (env_send_att) is
 * not copied: its bytes stay the sender's and must stay unchanged until its sent callback ran.
 */
#ifndef KVMESH_ENV_ENV_H
#define KVMESH_ENV_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "kvmesh.h" /* KVMESH_ENOTSUP */

typedef struct env env_t;

/* Node identity within one env's address space (the simulator numbers nodes 0..N-1; the real
 * binding maps ids to peers through the RPC layer). */
typedef uint32_t env_node_t;
#define ENV_NODE_NONE UINT32_MAX

/* Timer handle: never 0 for a started timer; cancelling an id that fired or is unknown is a
 * no-op, so callers may keep stale ids safely. */
typedef uint64_t env_timer_id;

typedef void (*env_cb)(void *arg);

/* A received attachment (the real binding: the RPC frame's raw payload). buf is a malloc'd
 * block; a receiver that keeps it past the receive callback sets buf to NULL and later frees it
 * with free(); otherwise the binding frees it after the callback. */
typedef struct env_payload {
    uint8_t *buf;
    size_t len;
} env_payload_t;

typedef struct env_msg {
    env_node_t from;
    env_node_t to;
    uint32_t type;       /* protocol message type, owned by the protocol that sends it */
    const uint8_t *data; /* valid only during the receive callback */
    size_t len;
    env_payload_t *payload; /* the attachment sent with env_send_att, NULL when none */
} env_msg_t;

/* Runs once when an attachment's bytes are no longer read by the binding: status 0 (written)
 * or a KVMESH_E* code (not sent: the connection closed). Loop thread. */
typedef void (*env_sent_fn)(int status, void *arg);

/* An attachment to send (env_send_att): borrowed until sent(status, arg) ran. */
typedef struct env_att {
    const uint8_t *data;
    size_t len;
    env_sent_fn sent;
    void *arg;
} env_att_t;

typedef void (*env_recv_fn)(void *ctx, const env_msg_t *msg);

struct env_ops {
    uint64_t (*now_ns)(env_t *env);   /* monotonic clock */
    uint64_t (*wall_ms)(env_t *env);  /* Unix time in milliseconds (lease records, logs) */
    uint64_t (*rand_u64)(env_t *env); /* seeded in the simulator, from getrandom() for real */
    env_timer_id (*timer_start)(env_t *env, uint64_t delay_ns, env_cb cb, void *arg);
    void (*timer_cancel)(env_t *env, env_timer_id id);
    int (*defer)(env_t *env, env_cb cb, void *arg); /* run on a later loop turn */
    int (*post)(env_t *env, env_cb cb, void *arg);  /* thread-safe defer */
    int (*send)(env_t *env, env_node_t to, uint32_t type, const void *data, size_t len);
    /* NULL: the binding sends no attachments (env_send_att answers KVMESH_ENOTSUP) */
    int (*send_att)(env_t *env, env_node_t to, uint32_t type, const void *data, size_t len,
                    const env_att_t *att);
    void (*set_recv)(env_t *env, env_recv_fn fn, void *ctx);
    env_node_t (*self)(env_t *env);
    void *(*uv_loop)(env_t *env); /* uv_loop_t * for the real binding; NULL in the simulator */
};

struct env {
    const struct env_ops *ops;
    void *impl;
};

static inline uint64_t env_now_ns(env_t *e)
{
    return e->ops->now_ns(e);
}
static inline uint64_t env_wall_ms(env_t *e)
{
    return e->ops->wall_ms(e);
}
static inline uint64_t env_rand_u64(env_t *e)
{
    return e->ops->rand_u64(e);
}
/* Returns 0 only when the timer could not be armed (out of memory). */
static inline env_timer_id env_timer_start(env_t *e, uint64_t delay_ns, env_cb cb, void *arg)
{
    return e->ops->timer_start(e, delay_ns, cb, arg);
}
static inline void env_timer_cancel(env_t *e, env_timer_id id)
{
    e->ops->timer_cancel(e, id);
}
static inline int env_defer(env_t *e, env_cb cb, void *arg)
{
    return e->ops->defer(e, cb, arg);
}
static inline int env_post(env_t *e, env_cb cb, void *arg)
{
    return e->ops->post(e, cb, arg);
}
/* Best-effort datagram to a peer: may be lost, delayed, duplicated or reordered. */
static inline int env_send(env_t *e, env_node_t to, uint32_t type, const void *data, size_t len)
{
    return e->ops->send(e, to, type, data, len);
}
/* env_send with an attachment that travels after the message bytes without being copied (the
 * receiver gets it as env_msg_t.payload). On 0, att->sent runs once, later (never inside this
 * call). KVMESH_ENOTSUP: the binding or the peer cannot carry it (nothing sent, sent not called:
 * send the message another way); another error: not sent, sent not called. */
static inline int env_send_att(env_t *e, env_node_t to, uint32_t type, const void *data, size_t len,
                               const env_att_t *att)
{
    if (!e->ops->send_att)
        return KVMESH_ENOTSUP;
    return e->ops->send_att(e, to, type, data, len, att);
}
static inline void env_set_recv(env_t *e, env_recv_fn fn, void *ctx)
{
    e->ops->set_recv(e, fn, ctx);
}
static inline env_node_t env_self(env_t *e)
{
    return e->ops->self(e);
}
static inline void *env_uv_loop(env_t *e)
{
    return e->ops->uv_loop(e);
}

#endif
