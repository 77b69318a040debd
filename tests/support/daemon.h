/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.h — the tool-process harness of the tests that run the installed programs (kvmesh,
 * kvmeshd) as real processes: a scratch directory and the programs' paths, a tool run to
 * completion with its stdout/stderr captured (bounded), kvmeshd daemons started with a ready
 * file and a fresh admin port and killed by pid, and plain HTTP/1.0 requests to an admin port.
 *
 * Unlike proc.h (a re-executed test binary talking over pipes), the children here write to
 * files in the scratch directory, so a test can read a daemon's whole log after it exited.
 *
 * Ownership: tdaemon_env_t, tdaemon_out_t, tdaemon_t and tdaemon_http_t are the caller's; the
 * buffers in a tdaemon_out_t / tdaemon_http_t are malloc'd here and freed by the matching
 * *_free(). Every child is stopped by pid; every wait is bounded (the timeouts in the calls).
 * Children get PR_SET_PDEATHSIG(SIGKILL), so a test that dies leaves none behind.
 *
 * Threading: one thread at a time per env (the capture files are shared by the runs).
 */
#ifndef KVMESH_TESTS_SUPPORT_DAEMON_H
#define KVMESH_TESTS_SUPPORT_DAEMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define TDAEMON_MAX_ARGS 48
#define TDAEMON_HTTP_MAX (2u << 20) /* bound on one admin response */

/* The scratch directory and the programs of one test binary. */
typedef struct tdaemon_env {
    char tmpdir[256];
    char bin_kvmesh[512], bin_kvmeshd[512];
} tdaemon_env_t;

/* One finished tool run. */
typedef struct tdaemon_out {
    int status; /* exit status, 128+sig when signalled, -1 on timeout (then SIGKILLed) */
    char *out, *err;
    size_t out_len;
    uint64_t ms; /* how long it ran */
} tdaemon_out_t;

/* One kvmeshd process. pid 0: not running. */
typedef struct tdaemon {
    pid_t pid;
    char id[40];   /* its member id, from the ready file */
    char log[300]; /* its stderr */
    uint16_t admin_port;
} tdaemon_t;

/* One admin-port answer. */
typedef struct tdaemon_http {
    int code;   /* status code, -1 when the request failed */
    char *head; /* status line and headers (owns the buffer) */
    char *body; /* points into head's buffer */
} tdaemon_http_t;

/*
 * Fills e: the programs from $KVMESH_BIN_DIR (else the build's bin directory) and a fresh
 * <$TMPDIR or /tmp>/<prefix>-XXXXXX directory (tmpdir.h). 0, or -1 (with the reason on stderr)
 * when a program is not built (then no directory is made) or the directory cannot be made.
 */
int tdaemon_env_setup(tdaemon_env_t *e, const char *prefix);

/* Removes the scratch directory and everything in it (none: a no-op). 0 or -1. Safe twice. */
int tdaemon_env_teardown(tdaemon_env_t *e);

/* The whole file at path, NUL-terminated, malloc'd (an empty string when it cannot be read);
 * its length into *len (may be NULL). */
char *tdaemon_slurp(const char *path, size_t *len);

/* Writes text to path (truncating). 0, or -1 with the reason on stderr. */
int tdaemon_write_file(const char *path, const char *text);

/* Waits up to timeout_ms for pid to exit: its exit status, 128+sig when signalled, -1 when it
 * is still running at the bound (it is left running). */
int tdaemon_wait_exit(pid_t pid, uint64_t timeout_ms);

/* Starts argv (NULL-terminated; argv[0] a path) with stdin from in_path (NULL: /dev/null) and
 * stdout/stderr truncated into out_path/err_path. The child's pid, or -1. */
pid_t tdaemon_spawn(const char *const argv[], const char *out_path, const char *err_path,
                    const char *in_path);

/* Runs argv (NULL-terminated) to completion within timeout_ms, stdin from in_path (NULL:
 * /dev/null), capturing stdout and stderr through files in e's directory. */
void tdaemon_runv(const tdaemon_env_t *e, tdaemon_out_t *o, const char *in_path,
                  const char *const *argv, uint64_t timeout_ms);

/* tdaemon_runv() of the arguments first, ... up to a NULL (at most TDAEMON_MAX_ARGS taken),
 * given as a va_list (the variadic wrappers of the tests pass theirs through). */
void tdaemon_runl(const tdaemon_env_t *e, tdaemon_out_t *o, const char *in_path,
                  uint64_t timeout_ms, const char *first, va_list ap);

void tdaemon_out_free(tdaemon_out_t *o);

/*
 * Starts kvmeshd --config cfg_path --ready-file F --admin-listen 127.0.0.1:<fresh port>
 * [extra...] (extra NULL-terminated, may be NULL) as daemon number i of e, and waits up to
 * timeout_ms until its ready file names its member id. 0, or -1 with its log on stderr (d->pid
 * is 0 when it exited; one still running at the bound is left to tdaemon_stop()).
 */
int tdaemon_start(const tdaemon_env_t *e, tdaemon_t *d, int i, const char *cfg_path,
                  const char *const *extra, uint64_t timeout_ms);

/* SIGKILLs and reaps the daemon if it runs; leaves d->pid 0. */
void tdaemon_stop(tdaemon_t *d);

/* method path on 127.0.0.1:port with an optional Accept header (NULL: none); reads the whole
 * answer (10 s receive timeout, TDAEMON_HTTP_MAX bytes). Returns r->code. */
int tdaemon_http(uint16_t port, const char *method, const char *path, const char *accept,
                 tdaemon_http_t *r);

void tdaemon_http_free(tdaemon_http_t *r);

/* The cmocka checks on a run (expand in a cmocka test, which includes <cmocka.h>): the exit
 * status, with both outputs on failure; a substring of a text, with the text on failure. */
#define TDAEMON_ASSERT_RUN(o, want)                                                                \
    do {                                                                                           \
        if ((o)->status != (want))                                                                 \
            fail_msg("exit %d (want %d)\nstdout: %s\nstderr: %s", (o)->status, (want), (o)->out,   \
                     (o)->err);                                                                    \
    } while (0)

#define TDAEMON_ASSERT_HAS(hay, needle)                                                            \
    do {                                                                                           \
        if (!strstr((hay), (needle)))                                                              \
            fail_msg("expected \"%s\" in:\n%s", (needle), (hay));                                  \
    } while (0)

/* The fatal check of the daemon tests (outside cmocka): on failure says where and what, then a
 * printf-style message, runs cleanup() (which stops the test's daemons by pid) and exits 1. */
#define TDAEMON_CHECK(c, cleanup, ...)                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "CHECK failed %s:%d: %s: ", __FILE__, __LINE__, #c);                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            cleanup();                                                                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
