/* SPDX-License-Identifier: Apache-2.0 */
/* tcpproxy.c — the loopback fault-injection proxy of tcpproxy.h. */
#include "tcpproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define IOBUF 65536

struct pair {
    int cfd, ufd;  /* client side, upstream side; -1 when unused */
    uint8_t *held; /* upstream -> client bytes kept back (or not yet written) */
    size_t n_held; /* bytes in held */
};

struct tcpproxy {
    int lfd, wake[2];
    uint16_t port, up_port;
    atomic_bool hold, stop;
    pthread_mutex_t mu; /* the trigger below */
    uint8_t pat[256];
    size_t pat_len;
    unsigned nth, matches;
    atomic_uint_fast64_t held_total;
    pthread_t thr;
    struct pair pairs[TCPPROXY_MAX_CONNS];
};

static void pair_close(struct pair *p)
{
    if (p->cfd >= 0)
        close(p->cfd);
    if (p->ufd >= 0)
        close(p->ufd);
    free(p->held);
    *p = (struct pair){.cfd = -1, .ufd = -1};
}

static int connect_up(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void accept_one(tcpproxy_t *x)
{
    int cfd = accept4(x->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0)
        return;
    struct pair *p = NULL;
    for (int i = 0; i < TCPPROXY_MAX_CONNS && !p; i++)
        if (x->pairs[i].cfd < 0)
            p = &x->pairs[i];
    int ufd = p ? connect_up(x->up_port) : -1;
    if (ufd < 0) {
        close(cfd);
        return;
    }
    int one = 1;
    (void)setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *p = (struct pair){.cfd = cfd, .ufd = ufd};
}

/* Writes all of buf to fd (blocking socket, loopback): false on an error. */
static bool write_all(int fd, const uint8_t *buf, size_t n)
{
    for (size_t off = 0, tries = 0; off < n && tries < 1000000; tries++) {
        ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        off += (size_t)w;
    }
    return true;
}

/* Delivers what was kept back (hold off); false when the client is gone. */
static bool flush_held(struct pair *p)
{
    if (!p->n_held)
        return true;
    bool ok = write_all(p->cfd, p->held, p->n_held);
    p->n_held = 0;
    return ok;
}

/* A request chunk: counts a match of the armed pattern, and turns the hold on at the nth. */
static void trigger(tcpproxy_t *x, const uint8_t *buf, size_t n)
{
    pthread_mutex_lock(&x->mu);
    if (x->pat_len && memmem(buf, n, x->pat, x->pat_len) && ++x->matches == x->nth) {
        atomic_store(&x->hold, true);
        x->pat_len = 0;
    }
    pthread_mutex_unlock(&x->mu);
}

/* One readable side of a pair: false when the pair is done. */
static bool pump(tcpproxy_t *x, struct pair *p, bool from_client)
{
    uint8_t buf[IOBUF];
    ssize_t n = recv(from_client ? p->cfd : p->ufd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR)
        return true;
    if (n <= 0)
        return false;
    if (from_client) {
        trigger(x, buf, (size_t)n);
        return write_all(p->ufd, buf, (size_t)n);
    }
    if (!atomic_load(&x->hold))
        return flush_held(p) && write_all(p->cfd, buf, (size_t)n);
    if (p->n_held + (size_t)n > TCPPROXY_HOLD_MAX)
        return false; /* bounded: the connection is cut */
    if (!p->held && !(p->held = malloc(TCPPROXY_HOLD_MAX)))
        return false;
    memcpy(p->held + p->n_held, buf, (size_t)n);
    p->n_held += (size_t)n;
    atomic_fetch_add(&x->held_total, (uint64_t)n);
    return true;
}

static void *run(void *arg)
{
    tcpproxy_t *x = arg;
    struct pollfd fds[2 + 2 * TCPPROXY_MAX_CONNS];
    int who[2 + 2 * TCPPROXY_MAX_CONNS];
    while (!atomic_load(&x->stop)) {
        bool hold = atomic_load(&x->hold);
        int nf = 0;
        fds[nf] = (struct pollfd){.fd = x->lfd, .events = POLLIN};
        who[nf++] = -1;
        fds[nf] = (struct pollfd){.fd = x->wake[0], .events = POLLIN};
        who[nf++] = -2;
        for (int i = 0; i < TCPPROXY_MAX_CONNS; i++) {
            struct pair *p = &x->pairs[i];
            if (p->cfd < 0)
                continue;
            if (!hold && !flush_held(p)) {
                pair_close(p);
                continue;
            }
            fds[nf] = (struct pollfd){.fd = p->cfd, .events = POLLIN};
            who[nf++] = 2 * i;
            fds[nf] = (struct pollfd){.fd = p->ufd, .events = POLLIN};
            who[nf++] = 2 * i + 1;
        }
        if (poll(fds, (nfds_t)nf, 100) <= 0)
            continue;
        for (int k = 0; k < nf; k++) {
            if (!fds[k].revents)
                continue;
            if (who[k] == -1) {
                accept_one(x);
            } else if (who[k] == -2) {
                uint8_t b[64];
                (void)!read(x->wake[0], b, sizeof(b));
            } else {
                struct pair *p = &x->pairs[who[k] / 2];
                if (p->cfd >= 0 && !pump(x, p, who[k] % 2 == 0))
                    pair_close(p);
            }
        }
    }
    return NULL;
}

int tcpproxy_start(tcpproxy_t **out, uint16_t up_port)
{
    tcpproxy_t *x = calloc(1, sizeof(*x));
    if (!x)
        return -1;
    for (int i = 0; i < TCPPROXY_MAX_CONNS; i++)
        x->pairs[i] = (struct pair){.cfd = -1, .ufd = -1};
    x->up_port = up_port;
    pthread_mutex_init(&x->mu, NULL);
    x->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (x->lfd < 0 || bind(x->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(x->lfd, 64) != 0 || getsockname(x->lfd, (struct sockaddr *)&a, &al) != 0 ||
        pipe2(x->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        if (x->lfd >= 0)
            close(x->lfd);
        free(x);
        return -1;
    }
    x->port = ntohs(a.sin_port);
    if (pthread_create(&x->thr, NULL, run, x) != 0) {
        close(x->lfd);
        close(x->wake[0]);
        close(x->wake[1]);
        free(x);
        return -1;
    }
    *out = x;
    return 0;
}

uint16_t tcpproxy_port(const tcpproxy_t *p)
{
    return p->port;
}

void tcpproxy_hold(tcpproxy_t *p, bool hold)
{
    atomic_store(&p->hold, hold);
    (void)!write(p->wake[1], "h", 1);
}

void tcpproxy_hold_on(tcpproxy_t *p, const void *pat, size_t len, unsigned nth)
{
    pthread_mutex_lock(&p->mu);
    p->pat_len = len <= sizeof(p->pat) ? len : 0;
    memcpy(p->pat, pat, p->pat_len);
    p->nth = nth;
    p->matches = 0;
    pthread_mutex_unlock(&p->mu);
}

unsigned tcpproxy_matches(const tcpproxy_t *p)
{
    tcpproxy_t *x = (tcpproxy_t *)p;
    pthread_mutex_lock(&x->mu);
    unsigned m = x->matches;
    pthread_mutex_unlock(&x->mu);
    return m;
}

uint64_t tcpproxy_held_bytes(const tcpproxy_t *p)
{
    return atomic_load(&((tcpproxy_t *)p)->held_total);
}

void tcpproxy_stop(tcpproxy_t *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, true);
    (void)!write(p->wake[1], "s", 1);
    pthread_join(p->thr, NULL);
    for (int i = 0; i < TCPPROXY_MAX_CONNS; i++)
        pair_close(&p->pairs[i]);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
