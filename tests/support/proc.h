/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proc.h — the runtime-process harness of the multi-process tests: a child process (usually the
 * test binary re-executed with its own arguments) with a pipe on its stdin and one on its
 * stdout, started and awaited until it reports ready, killed by pid with a signal, reaped with a
 * bounded wait, and restarted with the same arguments.
 *
 * The protocol with the child: it prints one line starting with the ready word given to
 * tproc_start() (e.g. "READY ...") on stdout when it is up; EOF on its stdin asks it to close and
 * exit (tproc_stop()); anything else on the pipes is the test's own business (tproc_write(),
 * tproc_read_line()).
 *
 * Ownership: a tproc_t is the caller's (a static array slot is typical); tproc_start() copies the
 * arguments into it, so a restart needs nothing else. A slot with pid 0 runs nothing.
 * tproc_kill()/tproc_stop() always leave the slot empty (pid 0, pipes closed), whatever the
 * child did. Every wait here is bounded (the timeouts in the calls; TPROC_REAP_TIMEOUT_MS after
 * SIGKILL). Pipes are close-on-exec, so one child never holds another's.
 *
 * Threading: a slot is used from one thread at a time.
 */
#ifndef KVMESH_TESTS_SUPPORT_PROC_H
#define KVMESH_TESTS_SUPPORT_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "kvmesh.h"

#define TPROC_MAX_ARGS        16
#define TPROC_ARG_CAP         512
#define TPROC_REAP_TIMEOUT_MS 10000 /* bound on reaping after SIGKILL */

/* The multi-process tests' fatal check: on failure says where and what (with the library's
 * last error), runs cleanup() (which kills the test's children by pid) and exits 1. */
#define TPROC_CHECK(c, cleanup)                                                                    \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "CHECK failed %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #c,   \
                    kvmesh_last_error());                                                          \
            cleanup();                                                                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct tproc {
    pid_t pid;  /* 0: not running */
    int in_fd;  /* write end of the child's stdin, -1 when closed */
    int out_fd; /* read end of the child's stdout, -1 when closed */
    int status; /* waitpid() status of the last child reaped in this slot */
    int argc;
    char argv[TPROC_MAX_ARGS][TPROC_ARG_CAP];
    char ready_word[32];
} tproc_t;

/* The child side: kvmesh_open(c), then frees c. NULL on failure, with the reason on stderr (the
 * parent's tproc_start() then reports the missing ready line). */
kvmesh_t *tproc_child_open(kvmesh_config_t *c);

/* The child side's ready line, once kv is open: "READY <member id> <epoch>" on stdout, with
 * " <admin port>" after it when admin_port (0 without admin_listen), flushed. Parents parse it
 * with "READY %63s %" SCNu64 [" %u"]. */
void tproc_child_ready(kvmesh_t *kv, bool admin_port);

/* The whole child of a test that needs nothing but a running runtime: tproc_child_open(c),
 * tproc_child_ready(), then reads stdin until EOF and closes the runtime. Returns the child's
 * exit status: 0, or 1 when the open failed (reason on stderr). */
int tproc_child_run(kvmesh_config_t *c, bool admin_port);

/* The rest of a child after its ready line: reads stdin until EOF (the parent's tproc_stop()),
 * then closes kv. Returns 0, the child's exit status. */
int tproc_child_serve(kvmesh_t *kv);

/* The writer child's loop: puts n objects of len bytes under sc with kv, object i keyed by
 * key_of(i) (at most 63 characters) and filled by tproc_fill(seed i + 1), and prints "ACK <i>"
 * on stdout (flushed) after each acknowledged put; stops at the first refused put (the reason on
 * stderr) or when the buffer cannot be allocated. Returns the count acknowledged. */
uint32_t tproc_child_put_acked(kvmesh_t *kv, const kvmesh_scope_t *sc, uint32_t n, size_t len,
                               void (*key_of)(uint32_t i, char *k, size_t cap));

/* Sets the pairs {key, value} on c, in order, up to a {NULL, NULL} pair. 0, or -1 at the first
 * one refused (named on stderr with the library's last error); NULL c is refused. */
int tproc_config_setv(kvmesh_config_t *c, const char *const pairs[][2]);

/* Opens an admin handle on the metadata of deployment dep at url into *adm. 0, or -1 (the
 * library's last error tells why). */
struct kvmesh_admin; /* kvmesh_admin_t (api/kvmesh_tools.h) */
int tproc_admin_open(const char *url, const char *dep, struct kvmesh_admin **adm);

/* Waits up to timeout_ms until kv's membership snapshot shows exactly want active storage
 * members (capacity > 0), polling every 50 ms. 0, or -1 when the bound passed or the snapshot
 * could not be read (the count seen last on stderr). */
int tproc_wait_storage(kvmesh_t *kv, size_t want, int timeout_ms);

/* The running executable's path (/proc/self/exe) into buf. 0, or a negative KVMESH_E* code. */
int tproc_self_exe(char *buf, size_t cap);

/*
 * Starts argv[0] with the arguments argv[0..argc-1] (argc <= TPROC_MAX_ARGS, each shorter than
 * TPROC_ARG_CAP) and waits up to timeout_ms for a stdout line that begins with ready_word; that
 * line goes to line (may be NULL). On any failure the child is killed and reaped, and a negative
 * KVMESH_E* code is returned with the reason in stderr.
 */
int tproc_start(tproc_t *p, int argc, const char *const argv[], const char *ready_word, char *line,
                size_t line_cap, int timeout_ms);

/* Starts the slot again with the arguments of its last start (the slot must be empty). */
int tproc_restart(tproc_t *p, char *line, size_t line_cap, int timeout_ms);

/* Reads one line (without the newline) from the child's stdout within timeout_ms. 0 or -1. */
int tproc_read_line(tproc_t *p, char *buf, size_t cap, int timeout_ms);

/* Writes all of s to the child's stdin. 0 or -1. */
int tproc_write(tproc_t *p, const char *s);

/* Asks a runtime child that obeys "drain" (prints "DRAINED <rc>") to drain, each answer within
 * timeout_ms, and asks again while it answers KVMESH_EUNAVAILABLE ("could not move N replicas":
 * an item that failed, e.g. a reservation or route CAS that timed out on a loaded host, keeps
 * its old replica, and a later drain moves it), at most `attempts` drains. Each answer is
 * printed on stderr; the last one is left in line. 0 when a drain answered 0, else -1. */
int tproc_drain(tproc_t *p, int attempts, char *line, size_t cap, int timeout_ms);

/* Sends sig, then reaps the child (bounded: TPROC_REAP_TIMEOUT_MS, then SIGKILL) and closes the
 * pipes. Returns 0, or -1 when the slot ran nothing. */
int tproc_kill(tproc_t *p, int sig);

/* Closes the child's stdin (EOF: it closes and exits), waits up to timeout_ms for it to exit,
 * then SIGKILLs it; reaps it and closes the pipes. Returns 0 when it exited by itself within the
 * bound with status 0, -1 otherwise (p->status tells how it ended). */
int tproc_stop(tproc_t *p, int timeout_ms);

/* Closes the child's stdin (EOF asks it to exit) without waiting; tproc_stop() then waits. Lets
 * a test ask several children at once and wait for them one after the other. */
void tproc_close_stdin(tproc_t *p);

/* Whether the child has exited by itself: if so it is reaped now (p->status set, slot emptied). */
bool tproc_exited(tproc_t *p);

/* Fills p with n bytes of a deterministic pattern of seed (xorshift), so that a reader can tell
 * the bytes of one value from another's. */
void tproc_fill(uint8_t *p, size_t n, uint64_t seed);

/* A one-line description of a waitpid() status ("exit 0", "signal 13 (Broken pipe)"). */
const char *tproc_status_str(int status, char *buf, size_t cap);

#endif
