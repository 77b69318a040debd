/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_uv.h — the real environment binding (env.h) on a libuv loop, and a helper that runs such
 * an env on a private loop thread.
 *
 * What it owns: three libuv handles on the caller's loop (one uv_timer_t multiplexing every env
 * timer, one uv_idle_t driving deferred callbacks, one uv_async_t draining the cross-thread post
 * queue), the timer table, the defer list, the bounded post queue and the RNG state.
 *
 * Semantics:
 *   - now_ns: uv_hrtime() (CLOCK_MONOTONIC, ns). wall_ms: CLOCK_REALTIME in ms.
 *   - rand_u64: xoshiro256** seeded from getrandom() (env_uv_seed() reseeds it, for tests).
 *   - timers: keyed by id; expiry order is (deadline, id), so timers armed with the same deadline
 *     fire in the order they were started. Resolution of the underlying uv timer is 1 ms; a timer
 *     never fires before its deadline. Cancelling a fired or unknown id is a no-op.
 *   - defer: the callback runs on a later loop turn (never inside the defer call); callbacks
 *     deferred during a defer batch run on the turn after. At most ENV_UV_DEFER_MAX pending.
 *   - post: any thread; a bounded queue (ENV_UV_POST_CAP) plus uv_async; returns KVMESH_EAGAIN
 *     when full, KVMESH_ECLOSED after env_uv_free() started. Runs in FIFO order on the loop
 *     thread, at most ENV_UV_POST_BATCH per turn.
 *   - send: handed to the sender hook (env_uv_set_sender), which the RPC layer installs; without
 *     a hook send returns KVMESH_EUNAVAILABLE. Inbound messages enter through env_uv_deliver().
 *   - uv_loop: returns the loop.
 *
 * Loop liveness: the async handle is unreferenced, so an env alone does not keep uv_run() alive;
 * pending timers and deferred callbacks do (their handles are active while work is pending).
 *
 * Threading: everything except env_post() and the env_uv_thread_* functions (documented below)
 * must be called on the loop thread.
 */
#ifndef KVMESH_ENV_ENV_UV_H
#define KVMESH_ENV_ENV_UV_H

#include <stdbool.h>
#include <uv.h>

#include "env/env.h"

#define ENV_UV_POST_CAP   4096u    /* posted callbacks waiting for the loop, per env */
#define ENV_UV_POST_BATCH 256u     /* posted callbacks run per loop turn */
#define ENV_UV_DEFER_MAX  1048576u /* deferred callbacks pending, per env */

/* Outbound message hook: copies or sends (data, len) before returning; returns 0 or a KVMESH_E*
 * code, which env_send() returns to its caller. Called on the loop thread. */
typedef int (*env_uv_sender_fn)(void *ctx, env_node_t to, uint32_t type, const void *data,
                                size_t len);

/*
 * Creates an env bound to loop (which the caller owns and must outlive the env) for node self.
 * *out is owned by the caller and released with env_uv_free(). Returns 0, KVMESH_ENOMEM, or
 * KVMESH_EIO (a libuv handle could not be initialised).
 */
int env_uv_new(env_t **out, uv_loop_t *loop, env_node_t self);

/*
 * Releases an env (loop thread only). Pending timers, deferred and posted callbacks are dropped
 * without running; later env_post() calls that still reach it return KVMESH_ECLOSED until the
 * memory is released. The libuv handles are closed asynchronously: the memory is released by
 * their close callbacks, so the loop must run (uv_run) once more afterwards. NULL is a no-op.
 */
void env_uv_free(env_t *env);

/* Installs the outbound hook (NULL fn removes it). ctx is borrowed. Loop thread only. */
void env_uv_set_sender(env_t *env, env_uv_sender_fn fn, void *ctx);

/*
 * Delivers an inbound message to the receiver set with env_set_recv(), synchronously. msg and its
 * bytes are borrowed for the duration of the call. Returns 0, or KVMESH_EUNAVAILABLE when no
 * receiver is set (the message is dropped). Loop thread only.
 */
int env_uv_deliver(env_t *env, const env_msg_t *msg);

/* Reseeds the RNG deterministically (tests). Loop thread only. */
void env_uv_seed(env_t *env, uint64_t seed);

/* Number of armed (not fired, not cancelled) timers; for tests and leak checks. */
size_t env_uv_timer_count(env_t *env);

/*
 * A loop on a private thread with one env on it, for code that must offer blocking calls to
 * application threads (for example the metadata blocking wrapper).
 *
 *   env_uv_thread_start() creates the loop, the env and the thread; the loop runs until
 *   env_uv_thread_stop(), which must be called from another thread (never from the loop thread):
 *   it runs the env's release on the loop thread, waits until the loop has finished (every handle
 *   that the user opened on the loop must be closed before, e.g. through env_uv_thread_call()),
 *   joins the thread and frees everything. Work still posted is dropped.
 */
typedef struct env_uv_thread env_uv_thread_t;

int env_uv_thread_start(env_uv_thread_t **out, env_node_t self);
void env_uv_thread_stop(env_uv_thread_t *t);

/* The env of the thread (valid until env_uv_thread_stop). Use it from the loop thread, except
 * env_post(), which any thread may call. */
env_t *env_uv_thread_env(env_uv_thread_t *t);

/* True when called on the loop thread of t. */
bool env_uv_thread_is_current(env_uv_thread_t *t);

/*
 * Runs cb(arg) on the loop thread and waits for it to return. Called on the loop thread itself it
 * runs cb directly. Retries a full post queue for up to ~1 s, then returns KVMESH_EAGAIN; returns
 * KVMESH_ECLOSED when the thread is stopping. Returns 0 once cb has run. Must not race with
 * env_uv_thread_stop() (the caller orders its last call before stop).
 */
int env_uv_thread_call(env_uv_thread_t *t, env_cb cb, void *arg);
/* The same without waiting for cb (called from another thread than t's loop): cb(arg) runs on the
 * loop thread later, unless the thread stops first (then it is dropped). arg must stay valid
 * until cb runs. Returns 0 once posted, KVMESH_EAGAIN or KVMESH_ECLOSED as above. */
int env_uv_thread_post(env_uv_thread_t *t, env_cb cb, void *arg);

#endif
