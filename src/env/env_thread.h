/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_thread.h — how the library starts threads so that no signal it provokes reaches its host.
 *
 * The library writes to sockets through libuv (write/writev), hiredis and libcurl; a write to a
 * socket whose peer has closed raises SIGPIPE, whose default action kills the whole process. An
 * embedding program must not have to ignore SIGPIPE, so every thread the library creates, and
 * every thread a library it uses creates from one of them (libuv's thread pool, curl's resolver)
 * or on its behalf (libmicrohttpd's polling thread), runs with SIGPIPE blocked: such a write then
 * fails with EPIPE and the signal stays pending on that thread, never delivered. Writes the
 * library makes from a caller's thread use send/sendmsg with MSG_NOSIGNAL instead (net/), and
 * curl handles are set CURLOPT_NOSIGNAL.
 *
 * Use: env_thread_create() instead of pthread_create(); around a call that creates a thread the
 * library cannot start itself (uv_thread_create, MHD_start_daemon), env_sigpipe_block() before
 * and env_sigmask_restore() after, so the new thread inherits the blocked mask and the caller's
 * own mask is left as it was. A caller's thread that runs a runtime's loop for a while (a leader,
 * env_uv.h) blocks SIGPIPE with env_sigpipe_guard_enter() and ends with env_sigpipe_guard_leave().
 *
 * Threading: every function acts on the calling thread only; any thread.
 */
#ifndef KVMESH_ENV_ENV_THREAD_H
#define KVMESH_ENV_ENV_THREAD_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

/* Adds SIGPIPE to the calling thread's blocked set; the previous mask goes to *old. */
void env_sigpipe_block(sigset_t *old);

/* Puts back a mask saved by env_sigpipe_block(). */
void env_sigmask_restore(const sigset_t *old);

/* The same, for a caller's thread that ran library code (socket writes without MSG_NOSIGNAL)
 * between the two calls: a SIGPIPE that became pending meanwhile is discarded first, unless old
 * blocked SIGPIPE too (then the caller's own mask keeps it pending, as it would have). A SIGPIPE
 * sent to the whole process while the mask was set may be discarded with it. */
void env_sigpipe_restore_drop(const sigset_t *old);

/* What a caller's thread that runs library code for a while (a leader, env_uv.h) sets around it:
 * SIGPIPE blocked only when the process's disposition for it is not SIG_IGN. An ignored SIGPIPE
 * is discarded when raised (the write fails with EPIPE), so no mask is needed and the guard costs
 * one sigaction() read instead of the mask, the pending check and the restore (3 system calls).
 * The disposition is read again at every enter while it is SIG_IGN (an application that puts it
 * back to SIG_DFL between two calls is covered from the next call on); while it is not, a thread
 * masks without reading it for ENV_SIGPIPE_RECHECK enters (masking is safe either way). Limit: an
 * application that switches SIGPIPE from SIG_IGN to SIG_DFL on one thread while a call of the
 * library runs on another may see that call's write raise it. */
typedef struct env_sigpipe_guard {
    sigset_t mask; /* the caller's mask, when masked */
    bool masked;
} env_sigpipe_guard_t;

#define ENV_SIGPIPE_RECHECK 64

/* env_sigpipe_block() unless SIGPIPE is ignored (above); *g is the caller's, filled here. */
void env_sigpipe_guard_enter(env_sigpipe_guard_t *g);

/* env_sigpipe_restore_drop() when the guard masked; nothing otherwise. */
void env_sigpipe_guard_leave(const env_sigpipe_guard_t *g);

/* pthread_create(th, NULL, fn, arg) whose thread starts with SIGPIPE blocked (and so does every
 * thread it creates); the caller's mask is unchanged. Returns pthread_create's result. */
int env_thread_create(pthread_t *th, void *(*fn)(void *), void *arg);

#endif
