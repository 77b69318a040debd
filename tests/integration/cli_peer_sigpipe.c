/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_peer_sigpipe — the CLI's peer clients (tools/kvmesh/peers.c: the memcached text protocol
 * client and the hiredis client that `kvmesh bench` measures against) raise no SIGPIPE when the
 * peer closes the connection mid-answer: each call fails with a message, and the process lives,
 * whatever its SIGPIPE disposition (the bench ignores SIGPIPE itself; peers.c must not depend
 * on it).
 *
 * For each kind (memcached, redis) a child process puts SIGPIPE at SIG_DFL, unblocked, and runs
 * PUTS_EACH puts and gets against a loopback listener of this test that reads each request, sends
 * the first bytes of an answer and closes the connection with a reset (SO_LINGER 0): the first
 * call reads the partial answer and the reset; every later call writes to the reset connection,
 * which the kernel fails with EPIPE (and a signal, unless the write says MSG_NOSIGNAL or SIGPIPE
 * is blocked). The child must exit 0 with every call failed and a message for each; a SIGPIPE
 * ends it with signal 13, which the parent reports. Every wait is bounded; the child is killed
 * by pid.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env/clock.h"
#include "peers.h"
#include "proc.h"

#define PUTS_EACH     4
#define CHILD_WAIT_MS 30000

/* ---- the peer that closes mid-answer ------------------------------------------------------- */

struct closer {
    int lfd;
    uint16_t port;
    const char *partial; /* the first bytes of an answer */
    atomic_bool stop;
    atomic_int served;
    pthread_t th;
};

/* Reads until the request's first line ends (bounded), answers `partial`, resets. */
static void serve_one(struct closer *s, int fd)
{
    char buf[4096];
    uint64_t end = env_clock_mono_ms() + 5000;
    bool line = false;
    while (!line && env_clock_mono_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        line = memmem(buf, (size_t)n, "\r\n", 2) != NULL;
    }
    if (send(fd, s->partial, strlen(s->partial), MSG_NOSIGNAL) < 0)
        fprintf(stderr, "closer: send: %s\n", strerror(errno));
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* close with a reset */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    atomic_fetch_add(&s->served, 1);
}

static void *closer_main(void *arg)
{
    struct closer *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {s->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd >= 0)
            serve_one(s, fd);
    }
    return NULL;
}

static int closer_start(struct closer *s, const char *partial)
{
    memset(s, 0, sizeof(*s));
    s->partial = partial;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(s->lfd, 16) != 0 || getsockname(s->lfd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    s->port = ntohs(a.sin_port);
    return 0;
}

static void closer_stop(struct closer *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->th, NULL);
    close(s->lfd);
}

/* ---- the child: the client's calls with SIGPIPE at SIG_DFL ---------------------------------- */

/* Exit status: 0 when every call failed with a message (and the process lived), 1 otherwise. */
static int client_main(enum peer_kind kind, uint16_t port)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    const char *name = kind == PEER_REDIS ? "redis" : "memcached";
    peer_proc_t pp = {.kind = kind, .pid = 0, .port = port};
    peer_client_t *c = NULL;
    char err[256];
    if (peer_connect(&pp, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: connect: %s\n", name, err);
        return 1;
    }
    static char val[64 << 10], out[64 << 10];
    memset(val, 'v', sizeof(val));
    int bad = 0;
    for (int i = 0; i < PUTS_EACH * 2; i++) {
        size_t got = 0;
        int rc = i < PUTS_EACH ? peer_put(c, "k", 1, val, sizeof(val))
                               : peer_get(c, "k", 1, out, sizeof(out), &got);
        const char *e = peer_error(c);
        fprintf(stderr, "%s %s #%d: %s\n", name, i < PUTS_EACH ? "put" : "get", i,
                rc ? e : "succeeded");
        bad += rc == 0 || !e[0];
    }
    peer_close(c);
    return bad ? 1 : 0;
}

/* ---- parent --------------------------------------------------------------------------------- */

static int run_kind(enum peer_kind kind, const char *partial)
{
    const char *name = kind == PEER_REDIS ? "redis" : "memcached";
    struct closer s;
    if (closer_start(&s, partial) != 0) {
        fprintf(stderr, "%s: cannot listen: %s\n", name, strerror(errno));
        return 1;
    }
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(s.lfd);
        return 1;
    }
    if (pid == 0)
        _exit(client_main(kind, s.port));
    /* the peer's thread starts after the fork (the child is forked from one thread); the child
     * connects meanwhile into the listen backlog */
    if (pthread_create(&s.th, NULL, closer_main, &s) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(s.lfd);
        return 1;
    }
    int st = 0;
    uint64_t end = env_clock_mono_ms() + CHILD_WAIT_MS;
    pid_t w = 0;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && env_clock_mono_ms() < end)
        usleep(10000);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fprintf(stderr, "%s: the client did not finish within %d ms\n", name, CHILD_WAIT_MS);
    }
    closer_stop(&s);
    char how[96];
    fprintf(stderr, "%s: client %s after the peer served %d connection(s)\n", name,
            tproc_status_str(st, how, sizeof(how)), atomic_load(&s.served));
    bool ok = w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 && atomic_load(&s.served) >= 1;
    return ok ? 0 : 1;
}

int main(void)
{
    int failed = 0;
    /* memcached: a set answers "STORED\r\n", a get "VALUE k 0 <len>\r\n<bytes>\r\nEND\r\n" */
    failed += run_kind(PEER_MEMCACHED, "STO");
    /* redis: SET answers "+OK\r\n", GET "$<len>\r\n<bytes>\r\n" */
    failed += run_kind(PEER_REDIS, "+O");
    fprintf(stderr, "cli_peer_sigpipe: %s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
