/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testsrv.h — launchers for real servers (redis-server, etcd) used by integration tests and
 * benchmarks. Each server runs as a child process on free 127.0.0.1 ports with its own temporary
 * directory, and never outlives the test:
 *   - the child gets PR_SET_PDEATHSIG(SIGKILL): it dies when the thread that started it exits
 *     (so start servers from the main thread, or from a thread that outlives them);
 *   - an atexit() handler stops every server still running at a normal exit();
 *   - testsrv_stop() kills by pid, reaps with waitpid() and removes the temporary directory.
 *
 * Readiness is awaited (bounded: TESTSRV_READY_TIMEOUT_MS) before start/restart return: redis
 * answers PING (+PONG, or -NOAUTH when the default user is disabled), etcd answers GET /health
 * with "health":"true". When the binary is missing, start returns KVMESH_ENOENT with a message
 * naming the binary and the package to install (kvmesh_last_error()). The binaries are looked up
 * in PATH; KVMESH_REDIS_SERVER / KVMESH_ETCD override the path.
 *
 * Ownership: testsrv_start_* allocate *out; testsrv_stop() frees it (NULL is a no-op). Strings
 * returned by testsrv_url()/testsrv_dir() live as long as the handle.
 *
 * Threading: a handle may be used from one thread at a time; start/stop of different handles may
 * happen from different threads (the exit registry is locked).
 */
#ifndef KVMESH_TESTS_SUPPORT_TESTSRV_H
#define KVMESH_TESTS_SUPPORT_TESTSRV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TESTSRV_READY_TIMEOUT_MS 30000 /* bound on waiting for a (re)started server */
#define TESTSRV_STOP_TIMEOUT_MS  5000  /* SIGTERM grace before SIGKILL in stop/restart */

typedef struct testsrv testsrv_t;

enum testsrv_kind { TESTSRV_REDIS, TESTSRV_ETCD };

/*
 * Starts redis-server on a free port, "dir" = a fresh temporary directory, no persistence
 * (save "" and appendonly no) unless extra_conf turns it on. extra_conf (may be NULL) is appended
 * verbatim to the generated redis.conf, e.g.
 *   "user alice on >secret ~* &* +@all\nuser default off\n"   (ACL user, default user disabled)
 *   "appendonly yes\nappendfsync always\n"                   (persistence across restart)
 */
int testsrv_start_redis(testsrv_t **out, const char *extra_conf);

/* Starts a single-member etcd with a temporary data dir; client and peer URLs on free ports. */
int testsrv_start_etcd(testsrv_t **out);

/* testsrv_start_redis(out, NULL) or testsrv_start_etcd(out) for kind "redis" or "etcd" (a
 * test's command-line argument). On failure prints "cannot start KIND: reason" to stderr and
 * returns non-zero (KVMESH_EINVAL for another kind). */
int testsrv_start_named(testsrv_t **out, const char *kind);

/* "redis://127.0.0.1:PORT" or "etcd://127.0.0.1:PORT" (the client port). */
const char *testsrv_url(const testsrv_t *s);
uint16_t testsrv_port(const testsrv_t *s);   /* client port */
const char *testsrv_dir(const testsrv_t *s); /* temporary directory (data, config, log) */
const char *testsrv_log_path(const testsrv_t *s);
enum testsrv_kind testsrv_kind(const testsrv_t *s);
pid_t testsrv_pid(const testsrv_t *s); /* 0 when not running */
bool testsrv_running(const testsrv_t *s);

/*
 * Sends sig to the server. For terminating signals (SIGKILL, SIGTERM, SIGINT, SIGQUIT) waits
 * for the process to exit (bounded; escalates to SIGKILL) and reaps it, so that the port is free
 * when this returns. Other signals (SIGSTOP, SIGCONT, ...) are only sent. Returns 0, or
 * KVMESH_EINVAL when the server is not running.
 */
int testsrv_kill(testsrv_t *s, int sig);

/* Starts the server again on the same port(s) with the same data dir (stopping it first with
 * SIGTERM if it still runs) and waits until it is ready. */
int testsrv_restart(testsrv_t *s);

/* Kills the server (SIGTERM, then SIGKILL), reaps it, removes the temporary dir, frees s. */
void testsrv_stop(testsrv_t *s);

/* Removes temporary dirs left by test processes that died without cleaning up (their servers
 * died with them): every kvmesh-{redis,etcd}-* dir under $TMPDIR (or /tmp) whose "owner" file
 * names a process that no longer exists. Runs automatically at the first start in a process. */
void testsrv_sweep_stale(void);

/* A port on 127.0.0.1 that was free a moment ago (bind to port 0), or 0 on failure. */
uint16_t testsrv_free_port(void);

/* Milliseconds from an environment variable (e.g. a test duration), or def when unset/invalid. */
uint64_t testsrv_env_ms(const char *name, uint64_t def);

#endif
