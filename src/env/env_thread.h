/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_thread.h — how the library starts threads so that no signal it provokes reaches its host.
 *
 * A write to a socket whose peer has closed raises SIGPIPE, whose default action kills the whole
 * process; an embedding program must not have to ignore it. The library's own socket writes use
 * send/sendmsg with MSG_NOSIGNAL (net/rpc_conn.c, the transports, the Redis backend's sends) and
 * curl handles are set CURLOPT_NOSIGNAL, so they are safe on any thread, an application's thread
 * that runs a runtime's loop (a leader, env_uv.h) included. Libraries the library uses may still
 * write with write(2) on threads they own, so every thread the library creates, and every thread
 * a library it uses creates from one of them (libuv's thread pool, curl's resolver) or on its
 * behalf (libmicrohttpd's polling thread), runs with SIGPIPE blocked: such a write then fails with
 * EPIPE and the signal stays pending on that thread, never delivered.
 *
 * Use: env_thread_create() instead of pthread_create(); around a call that creates a thread the
 * library cannot start itself (uv_thread_create, MHD_start_daemon), env_sigpipe_block() before
 * and env_sigmask_restore() after, so the new thread inherits the blocked mask and the caller's
 * own mask is left as it was. Around a call into a library that may write with write(2) on the
 * calling thread (hiredis completing a connect, meta_redis.c), env_sigpipe_block() before and
 * env_sigpipe_restore_drop() after.
 *
 * Threading: every function acts on the calling thread only; any thread.
 */
#ifndef KVMESH_ENV_ENV_THREAD_H
#define KVMESH_ENV_ENV_THREAD_H

#include <pthread.h>
#include <signal.h>

/* Adds SIGPIPE to the calling thread's blocked set; the previous mask goes to *old. */
void env_sigpipe_block(sigset_t *old);

/* Puts back a mask saved by env_sigpipe_block(). */
void env_sigmask_restore(const sigset_t *old);

/* The same, for a caller's thread that ran library code (socket writes without MSG_NOSIGNAL)
 * between the two calls: a SIGPIPE that became pending meanwhile is discarded first, unless old
 * blocked SIGPIPE too (then the caller's own mask keeps it pending, as it would have). A SIGPIPE
 * sent to the whole process while the mask was set may be discarded with it. */
void env_sigpipe_restore_drop(const sigset_t *old);

/* pthread_create(th, NULL, fn, arg) whose thread starts with SIGPIPE blocked (and so does every
 * thread it creates); the caller's mask is unchanged. Returns pthread_create's result. */
int env_thread_create(pthread_t *th, void *(*fn)(void *), void *arg);

#endif
