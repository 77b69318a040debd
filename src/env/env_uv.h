/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_uv.h — the real environment binding (env.h) on a libuv loop, and a helper that runs such
 * an env on a private loop thread.
 *
 * What it owns: four libuv handles on the caller's loop (one uv_timer_t multiplexing every env
 * timer, one uv_idle_t driving deferred callbacks, one uv_check_t running the work a pass left
 * due at once, one uv_async_t draining the cross-thread post queue), the timer table, the defer
 * list, the bounded post queue and the RNG state.
 *
 * Semantics:
 *   - now_ns: uv_hrtime() (CLOCK_MONOTONIC, ns). wall_ms: CLOCK_REALTIME in ms.
 *   - rand_u64: xoshiro256** seeded from getrandom() (env_uv_seed() reseeds it, for tests).
 *   - timers: keyed by id; expiry order is (deadline, id), so timers armed with the same deadline
 *     fire in the order they were started. Resolution of the underlying uv timer is 1 ms; a timer
 *     never fires before its deadline. Cancelling a fired or unknown id is a no-op.
 *   - defer: the callback runs later on the loop, never inside the defer call; callbacks
 *     deferred during a defer batch run in a later batch. At most ENV_UV_DEFER_MAX pending.
 *   - work due at once runs in the pass that made it due: at the end of every loop pass (libuv's
 *     check phase, after the pass's I/O callbacks) the env runs the timers due by then and the
 *     deferred callbacks, in rounds (due timers, then the defer batch, as a new pass would), for
 *     up to ENV_UV_DRAIN_ROUNDS rounds while a round ran something; what is left runs on the
 *     next pass. A chain of 0-delay timers and deferred callbacks (a route op's first attempt, a
 *     message to this node itself and its answer) thus costs no loop pass (no epoll_wait) per
 *     step; the bound keeps a chain that never ends from holding off I/O.
 *   - post: any thread; a bounded queue (ENV_UV_POST_CAP) plus uv_async; returns KVMESH_EAGAIN
 *     when full, KVMESH_ECLOSED after env_uv_free() started. Runs in FIFO order on the loop
 *     thread, at most ENV_UV_POST_BATCH per turn.
 *   - send: handed to the sender hook (env_uv_set_sender), which the RPC layer installs; without
 *     a hook send returns KVMESH_EUNAVAILABLE. send_att: likewise (env_uv_set_sender_att;
 *     without a hook KVMESH_ENOTSUP). Inbound messages enter through env_uv_deliver().
 *   - uv_loop: returns the loop.
 *
 * Loop liveness: the async handle is unreferenced, so an env alone does not keep uv_run() alive;
 * pending timers and deferred callbacks do (their handles are active while work is pending).
 *
 * Threading: everything except env_post() and the env_uv_thread_* functions (documented below)
 * must be called on the loop thread (for an env_uv_thread: the thread that runs its loop at that
 * moment, see below).
 */
#ifndef KVMESH_ENV_ENV_UV_H
#define KVMESH_ENV_ENV_UV_H

#include <stdbool.h>
#include <uv.h>

#include "env/env.h"

#define ENV_UV_POST_CAP     4096u    /* posted callbacks waiting for the loop, per env */
#define ENV_UV_TIMER_SPARE  64u      /* fired or cancelled timer records kept for reuse, per env */
#define ENV_UV_POST_BATCH   256u     /* posted callbacks run per loop turn */
#define ENV_UV_DEFER_MAX    1048576u /* deferred callbacks pending, per env */
#define ENV_UV_DRAIN_ROUNDS 8u       /* rounds of due timers + defer batch at the end of a pass */

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

/* Installs a hook that env_post() runs on the posting thread for each post it accepted, after
 * the loop's async handle was signalled, under the post queue's lock (so the env is not released
 * meanwhile; the hook must not post): env_uv_thread wakes its sleeping loop thread through it
 * while that thread does not watch the loop's I/O. Set before any other thread may post; ctx is
 * borrowed. */
void env_uv_set_post_hook(env_t *env, env_cb fn, void *ctx);

/* Whether posted callbacks wait for the loop (any thread; takes the post queue's lock). */
bool env_uv_post_pending(env_t *env);

/* Outbound hook of env_send_att (env.h has its contract: the attachment is not copied; on 0
 * att->sent runs once, later; KVMESH_ENOTSUP when the peer cannot take it). Without one,
 * env_send_att answers KVMESH_ENOTSUP. Installed like env_uv_set_sender. */
typedef int (*env_uv_sender_att_fn)(void *ctx, env_node_t to, uint32_t type, const void *data,
                                    size_t len, const env_att_t *att);
void env_uv_set_sender_att(env_t *env, env_uv_sender_att_fn fn, void *ctx);

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
/* Number of freed timer records kept for reuse by the next timer starts (at most
 * ENV_UV_TIMER_SPARE); for tests. */
size_t env_uv_timer_spare_count(env_t *env);

/*
 * A loop on a private thread with one env on it, for code that must offer blocking calls to
 * application threads (the store runtime, the metadata blocking wrapper). Implemented in
 * env_uv_thread.c.
 *
 *   env_uv_thread_start() creates the loop, the env and the thread; the loop runs until
 *   env_uv_thread_stop(), which must be called from another thread (never from the loop thread
 *   nor from a thread leading it): it lets a thread that leads finish its current turn, runs the
 *   env's release on the loop (on the loop thread, or on a leader when one runs the loop at that
 *   moment), waits until the loop has finished (every handle that the user opened on the loop
 *   must be closed before, e.g. through env_uv_thread_call()), joins the thread and frees
 *   everything. Work still posted is dropped.
 *
 * Who runs the loop (leader/follower): while threads lead, the loop thread does not block inside
 * uv_run. It runs one uv_run(UV_RUN_NOWAIT) pass at a time under a mutex (run_mu) and sleeps
 * outside it, in epoll_wait on uv_backend_fd() for uv_backend_timeout() (libuv's embedding
 * pattern). An application thread that is about to wait for work of its own on the loop may instead
 * run the loop itself while it waits (env_uv_thread_lead): when run_mu is free it runs its callback
 * directly (no post, no eventfd wake of the loop thread) and then the loop, blocking in the loop's
 * own epoll, until its work is done; the answer that completes its work wakes it directly, so one
 * waiting call costs the caller's thread no hand-off to the loop thread and no condition-variable
 * wake-up back. When run_mu is taken (the loop thread is in a pass, or another thread leads), it is
 * refused and the caller posts as before. A loop that nobody has led for 100 ms (a storage
 * daemon's) has its thread sleep in the loop's own poll instead (uv_run(UV_RUN_ONCE) under run_mu:
 * one epoll_wait per wake, not two); a lead tried then is refused and wakes it, and it sleeps
 * outside the loop again while leads are recent. Everything the loop owns passes between its
 * runners through run_mu (a happens-before edge for TSan as for the hardware); "loop thread only"
 * below means "on the thread that runs the loop at that moment": the loop thread, or a leader
 * inside its lead.
 */
typedef struct env_uv_thread env_uv_thread_t;

int env_uv_thread_start(env_uv_thread_t **out, env_node_t self);
void env_uv_thread_stop(env_uv_thread_t *t);

/* The env of the thread (valid until env_uv_thread_stop). Use it on the thread that runs the
 * loop (the loop thread, or a leader inside its lead), except env_post(), which any thread may
 * call. */
env_t *env_uv_thread_env(env_uv_thread_t *t);

/* True when called on the loop thread of t, or on a thread while it leads t's loop (a
 * thread-local mark): code that may run either on the loop or on an application thread uses it
 * to choose between a direct call and a post. */
bool env_uv_thread_is_current(env_uv_thread_t *t);

/*
 * Runs cb(arg) on the loop and waits for it to return. Called on the thread that runs the loop
 * (the loop thread, or inside a lead) it runs cb directly. Retries a full post queue for up to
 * ~1 s, then returns KVMESH_EAGAIN; returns KVMESH_ECLOSED when the thread is stopping. Returns
 * 0 once cb has run. Must not race with env_uv_thread_stop() (the caller orders its last call
 * before stop).
 */
int env_uv_thread_call(env_uv_thread_t *t, env_cb cb, void *arg);
/* The same without waiting for cb (called from a thread that does not run t's loop): cb(arg)
 * runs on the loop later, unless the thread stops first (then it is dropped). arg must stay
 * valid until cb runs. Returns 0 once posted, KVMESH_EAGAIN or KVMESH_ECLOSED as above. */
int env_uv_thread_post(env_uv_thread_t *t, env_cb cb, void *arg);

/* The condition a leader waits for; called on the leading thread, with the loop in its hands. */
typedef bool (*env_uv_done_fn)(void *arg);

enum env_uv_lead {
    ENV_UV_LEAD_REFUSED,  /* cb did not run: the loop is busy (its thread is in a pass, or another
                           * thread leads), the caller already runs a loop (t's or another one),
                           * or t is stopping. Post cb instead (env_post) and wait as usual. */
    ENV_UV_LEAD_DONE,     /* cb ran on the calling thread, and done(darg) became true */
    ENV_UV_LEAD_DEADLINE, /* cb ran; deadline_ms passed first (the caller decides what that means;
                           * work cb started goes on on the loop) */
    ENV_UV_LEAD_STOPPED,  /* cb ran; t began stopping (or its loop ended) first: wait by other
                           * means (the work ends the way it would have had cb been posted) */
};

/*
 * Leads t's loop for the calling application thread: when t's loop is free (a trylock on run_mu;
 * never waits for it), runs cb(arg) on the calling thread as if posted, then runs the loop
 * (uv_run UV_RUN_ONCE) until done(darg) is true, deadline_ms (env_clock_mono_ms() time; 0 = none)
 * has passed, or t stops, and lets the loop go (to its thread, which it wakes when it left work
 * due earlier than that thread would wake by itself). Inside, env_uv_thread_is_current(t) is
 * true, so cb and every loop callback behave as on the loop thread (env_uv_thread_call runs
 * directly). Returns an enum env_uv_lead (see above).
 *
 * Fairness: the leader runs whatever the loop has (other threads' posts, timers, I/O), which is
 * the loop's work either way, and lets go at the first check after done(darg): done is checked
 * between passes, so a pass that completes the caller's work finishes its other callbacks first.
 * Before letting go, while the loop thread sleeps, it runs at most two more passes without
 * waiting if work is due at once (callbacks its passes queued: cheaper than waking the loop
 * thread for them). A leader holds the loop only as long as its own wait lasts, plus those.
 * Leads in a row (each beginning within 1 ms of the last one's end, no thread waiting for the
 * loop without leading) leave the loop's I/O to the leaders: between two of them, I/O nobody
 * leads for is run by the next lead or by the loop thread within 1 ms (env_uv_thread.c, "The
 * loop's I/O after a lead"); posts, timers and an isolated lead's I/O wake the loop thread at
 * once, as before.
 * The calling thread keeps its own state: its signal mask is not touched (loop code's socket
 * writes raise no SIGPIPE, env_thread.h) and its kvmesh_last_error() message is the same
 * afterwards. Must not race with env_uv_thread_stop() (as
 * env_uv_thread_call).
 */
enum env_uv_lead env_uv_thread_lead(env_uv_thread_t *t, env_cb cb, void *arg, env_uv_done_fn done,
                                    void *darg, uint64_t deadline_ms);

/* A loop thread sleeps inside the loop's own poll once no thread has tried to lead its loop,
 * nor let go of a lead, for this long (env_uv_thread.c). Long enough that an application making
 * an op every second keeps leading (a refused lead posts its op: one wake-up of the loop thread
 * more), short enough that a daemon's loop, which nothing leads, sleeps in its poll. */
#define ENV_UV_LEAD_RECENT_MS 1000

/* Counters of t since start (any thread; for tests and benchmarks): leads taken (led), leads
 * refused (refused), wake-ups of the sleeping loop thread through its kick fd (kicks: by a
 * leaving leader, a post while the loop thread does not watch I/O, stop), and epoll_ctl calls
 * that turned the loop's I/O off or on in the loop thread's sleep set (io_toggles); the loop
 * thread's polls (polls: each of its loop passes, one epoll_wait of the loop's, and each of its
 * sleeps outside the loop, one epoll_wait or poll), of them the passes that slept in the loop's
 * own poll (loop_sleeps: no thread led lately), and refused leads that woke the loop thread out
 * of such a sleep (lead_wakes). */
typedef struct env_uv_thread_stats {
    uint64_t led, refused, kicks, io_toggles;
    uint64_t polls, loop_sleeps, lead_wakes;
} env_uv_thread_stats_t;
void env_uv_thread_stats(env_uv_thread_t *t, env_uv_thread_stats_t *out);

/* An application thread that handed work to t's loop without leading it (a post, then a wait
 * for the answer) brackets its wait with begin true / false: while one waits, the loop thread
 * watches the loop's I/O itself (the leaders' grace, env_uv_thread_lead, is off), so the answer
 * wakes it at once. Any thread; env_uv_thread_call does it for its own wait. */
void env_uv_thread_waiting(env_uv_thread_t *t, bool begin);

/* Whether the loop thread sleeps between passes now (it runs none; a leader may run the loop):
 * a lead tried then is refused only if the loop thread wakes first. False while it sleeps inside
 * the loop's own poll (nobody led lately), where no lead can take the loop: the call then counts
 * as a lead wanted (like a refused lead: it wakes the loop thread, which sleeps outside the loop
 * from its next pass on), so a caller that waits for true before it leads gets there. For tests
 * and diagnostics; any thread; must not race with env_uv_thread_stop(). */
bool env_uv_thread_parked(env_uv_thread_t *t);

#endif
