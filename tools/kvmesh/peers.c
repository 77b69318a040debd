/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peers.c — redis-server / memcached processes for the benchmark and their clients (see
 * peers.h). The memcached client speaks the text protocol: "set" with the value sent in the
 * same sendmsg (MSG_NOSIGNAL: a closed peer is an error, never SIGPIPE), "get k1 k2 ..." for
 * multi-gets, values received straight into the caller's buffer. The Redis client is hiredis:
 * SET/GET, pipelined with redisAppendCommand for batches, with SIGPIPE blocked around its calls
 * (its write(2) takes no MSG_NOSIGNAL).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "peers.h"

#define MC_RBUF      (256u << 10)
#define MC_LINE_MAX  1024
#define MC_IOV_BATCH 64 /* iovecs per writev */

struct peer_client {
    enum peer_kind kind;
    redisContext *rc;
    int fd;
    char *rbuf;
    size_t rpos, rlen;
    char err[256];
    bool rd_guard; /* redis: SIGPIPE was not ignored at connect: block it around hiredis calls */
};

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    uint16_t port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int peer_start(enum peer_kind kind, peer_proc_t **out, char *err, size_t err_cap)
{
    peer_proc_t *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    p->kind = kind;
    p->port = free_port();
    if (!p->port) {
        snprintf(err, err_cap, "no free loopback port");
        free(p);
        return -1;
    }
    if (kind == PEER_REDIS) {
        snprintf(p->dir, sizeof(p->dir), "/tmp/kvmesh-bench-redis-XXXXXX");
        if (!mkdtemp(p->dir)) {
            snprintf(err, err_cap, "mkdtemp: %s", strerror(errno));
            free(p);
            return -1;
        }
    }
    const char *bin = kind == PEER_REDIS ? "redis-server" : "memcached";
    char port[16], mem[16];
    snprintf(port, sizeof(port), "%u", p->port);
    snprintf(mem, sizeof(mem), "%d", PEER_MC_MEMORY_MB);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, err_cap, "fork: %s", strerror(errno));
        free(p);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
        }
        if (kind == PEER_REDIS)
            execlp(bin, bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                   "no", "--protected-mode", "no", "--dir", p->dir, "--daemonize", "no",
                   (char *)NULL);
        else if (geteuid() == 0) /* memcached refuses to run as root without -u */
            execlp(bin, bin, "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", mem, "-I",
                   PEER_MC_ITEM_MAX, "-t", "2", "-u", "root", (char *)NULL);
        else
            execlp(bin, bin, "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", mem, "-I",
                   PEER_MC_ITEM_MAX, "-t", "2", (char *)NULL);
        _exit(127);
    }
    p->pid = pid;
    /* Wait until it accepts and answers. */
    for (unsigned waited = 0; waited < PEER_READY_TIMEOUT_MS; waited += 20) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            p->pid = 0;
            snprintf(err, err_cap,
                     "%s exited during start-up (status %d); is it installed? "
                     "(Debian package %s)",
                     bin, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                     kind == PEER_REDIS ? "redis-server" : "memcached");
            peer_stop(p);
            return -1;
        }
        peer_client_t *c;
        char e2[64];
        if (peer_connect(p, &c, e2, sizeof(e2)) == 0) {
            int ok = kind == PEER_REDIS ? 0 : peer_flush(c);
            if (kind == PEER_REDIS) {
                redisReply *r = redisCommand(c->rc, "PING");
                ok = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;
                if (r)
                    freeReplyObject(r);
            }
            peer_close(c);
            if (ok == 0) {
                *out = p;
                return 0;
            }
        }
        sleep_ms(20);
    }
    snprintf(err, err_cap, "%s on port %u did not become ready within %d ms", bin, p->port,
             PEER_READY_TIMEOUT_MS);
    peer_stop(p);
    return -1;
}

void peer_stop(peer_proc_t *p)
{
    if (!p)
        return;
    if (p->pid > 0) {
        kill(p->pid, SIGTERM);
        int st;
        unsigned waited = 0;
        while (waitpid(p->pid, &st, WNOHANG) == 0) {
            if (waited >= PEER_STOP_TIMEOUT_MS) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, &st, 0);
                break;
            }
            sleep_ms(10);
            waited += 10;
        }
    }
    if (p->dir[0]) {
        char path[256];
        snprintf(path, sizeof(path), "%s/dump.rdb", p->dir);
        unlink(path);
        rmdir(p->dir);
    }
    free(p);
}

int peer_connect(const peer_proc_t *p, peer_client_t **out, char *err, size_t err_cap)
{
    peer_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    c->kind = p->kind;
    c->fd = -1;
    if (p->kind == PEER_REDIS) {
        c->rc = redisConnect("127.0.0.1", p->port);
        if (!c->rc || c->rc->err) {
            snprintf(err, err_cap, "redis connect: %s", c->rc ? c->rc->errstr : "out of memory");
            peer_close(c);
            return -1;
        }
        int one = 1;
        setsockopt(c->rc->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        /* a process that ignores SIGPIPE (kvmesh bench, from its start) needs no guard: the
         * peer's rows then pay no signal-mask calls */
        struct sigaction sa;
        c->rd_guard = sigaction(SIGPIPE, NULL, &sa) != 0 || sa.sa_handler != SIG_IGN;
        *out = c;
        return 0;
    }
    c->rbuf = malloc(MC_RBUF);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(p->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (!c->rbuf || c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        snprintf(err, err_cap, "memcached connect: %s", strerror(errno));
        peer_close(c);
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *out = c;
    return 0;
}

void peer_close(peer_client_t *c)
{
    if (!c)
        return;
    if (c->rc)
        redisFree(c->rc);
    if (c->fd >= 0)
        close(c->fd);
    free(c->rbuf);
    free(c);
}

const char *peer_error(const peer_client_t *c)
{
    return c->err;
}

static int cerr(peer_client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cerr(peer_client_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- memcached text protocol --------------------------------------------------------------- */

/* Sends iov[0..n-1] whole. With MSG_NOSIGNAL: a memcached that closed the connection fails the
 * call with EPIPE (after ECONNRESET) instead of raising SIGPIPE, whatever the caller's SIGPIPE
 * disposition (a plain writev would end a process that left it at SIG_DFL). */
static int mc_writev_all(peer_client_t *c, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n)};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return cerr(c, "memcached write: %s", strerror(errno));
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static int mc_fill(peer_client_t *c)
{
    if (c->rpos > 0 && c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    if (c->rpos > 0 && c->rlen == MC_RBUF) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    ssize_t r;
    do
        r = recv(c->fd, c->rbuf + c->rlen, MC_RBUF - c->rlen, 0);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return cerr(c, "memcached read: %s", r == 0 ? "connection closed" : strerror(errno));
    c->rlen += (size_t)r;
    return 0;
}

/* Reads one line without its CRLF into line (cap bytes). */
static int mc_line(peer_client_t *c, char *line, size_t cap)
{
    for (;;) {
        char *s = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        char *nl = avail ? memchr(s, '\n', avail) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - s);
            if (n && s[n - 1] == '\r')
                n--;
            if (n >= cap)
                return cerr(c, "memcached: reply line too long");
            memcpy(line, s, n);
            line[n] = '\0';
            c->rpos += (size_t)(nl - s) + 1;
            return 0;
        }
        if (avail >= MC_LINE_MAX)
            return cerr(c, "memcached: reply line too long");
        if (mc_fill(c) != 0)
            return -1;
    }
}

/* Reads exactly n bytes into dst (NULL = discard): buffered bytes first, then straight from
 * the socket into dst. */
static int mc_read(peer_client_t *c, void *dst, size_t n)
{
    size_t avail = c->rlen - c->rpos;
    size_t take = avail < n ? avail : n;
    if (dst)
        memcpy(dst, c->rbuf + c->rpos, take);
    c->rpos += take;
    size_t got = take;
    while (got < n) {
        if (!dst) {
            if (mc_fill(c) != 0)
                return -1;
            size_t a = c->rlen - c->rpos, t = a < n - got ? a : n - got;
            c->rpos += t;
            got += t;
            continue;
        }
        ssize_t r = recv(c->fd, (char *)dst + got, n - got, MSG_WAITALL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return cerr(c, "memcached read: %s", r == 0 ? "connection closed" : strerror(errno));
        got += (size_t)r;
    }
    return 0;
}

static int mc_send_sets(peer_client_t *c, peer_item_t *items, size_t n)
{
    char hdr[MC_IOV_BATCH][300];
    struct iovec iov[MC_IOV_BATCH * 3];
    for (size_t i = 0; i < n;) {
        int k = 0, h = 0;
        for (; i < n && h < MC_IOV_BATCH; i++, h++) {
            int hl = snprintf(hdr[h], sizeof(hdr[h]), "set %.*s 0 0 %zu\r\n", (int)items[i].key_len,
                              items[i].key, items[i].len);
            iov[k++] = (struct iovec){hdr[h], (size_t)hl};
            iov[k++] = (struct iovec){items[i].buf, items[i].len};
            iov[k++] = (struct iovec){(void *)"\r\n", 2};
        }
        if (mc_writev_all(c, iov, k) != 0)
            return -1;
    }
    return 0;
}

static int mc_put_items(peer_client_t *c, peer_item_t *items, size_t n)
{
    if (mc_send_sets(c, items, n) != 0)
        return -1;
    int rc = 0;
    char line[MC_LINE_MAX];
    for (size_t i = 0; i < n; i++) {
        if (mc_line(c, line, sizeof(line)) != 0)
            return -1;
        items[i].rc = strcmp(line, "STORED") == 0 ? 0 : -1;
        if (items[i].rc) {
            rc = cerr(c, "memcached set: %s", line);
        }
    }
    return rc;
}

static int mc_get_items(peer_client_t *c, peer_item_t *items, size_t n)
{
    /* Send every get line first (pipelined), then parse the replies in order. */
    char *cmd = malloc(PEER_MC_KEYS_PER_GET * 260 + 16);
    if (!cmd)
        return cerr(c, "out of memory");
    for (size_t i = 0; i < n; i += PEER_MC_KEYS_PER_GET) {
        size_t off = (size_t)snprintf(cmd, 8, "get");
        for (size_t j = i; j < n && j < i + PEER_MC_KEYS_PER_GET; j++) {
            cmd[off++] = ' ';
            memcpy(cmd + off, items[j].key, items[j].key_len);
            off += items[j].key_len;
        }
        cmd[off++] = '\r';
        cmd[off++] = '\n';
        struct iovec iov = {cmd, off};
        if (mc_writev_all(c, &iov, 1) != 0) {
            free(cmd);
            return -1;
        }
    }
    free(cmd);
    int rc = 0;
    char line[MC_LINE_MAX];
    for (size_t i = 0; i < n; i += PEER_MC_KEYS_PER_GET) {
        size_t end = i + PEER_MC_KEYS_PER_GET < n ? i + PEER_MC_KEYS_PER_GET : n;
        for (size_t j = i; j < end; j++)
            items[j].rc = -1;
        for (;;) {
            if (mc_line(c, line, sizeof(line)) != 0)
                return -1;
            if (strcmp(line, "END") == 0)
                break;
            char key[256];
            unsigned flags;
            size_t len;
            if (sscanf(line, "VALUE %255s %u %zu", key, &flags, &len) != 3)
                return cerr(c, "memcached get: unexpected reply \"%s\"", line);
            peer_item_t *it = NULL;
            for (size_t j = i; j < end; j++) {
                if (items[j].rc != 0 && strlen(key) == items[j].key_len &&
                    memcmp(key, items[j].key, items[j].key_len) == 0) {
                    it = &items[j];
                    break;
                }
            }
            void *dst = it && len <= it->len ? it->buf : NULL;
            if (mc_read(c, dst, len) != 0 || mc_read(c, NULL, 2) != 0)
                return -1;
            if (it && dst) {
                it->rc = 0;
                it->out_len = len;
            }
        }
        for (size_t j = i; j < end; j++)
            if (items[j].rc)
                rc = cerr(c, "memcached get: %.*s missing", (int)items[j].key_len, items[j].key);
    }
    return rc;
}

/* ---- redis ---------------------------------------------------------------------------------- */

/* hiredis's blocking client writes with write(2), which raises SIGPIPE when redis closed the
 * connection: unless the process ignored SIGPIPE when it connected (c->rd_guard), its calls run
 * with SIGPIPE blocked on this thread, and one raised meanwhile is dropped before the mask is
 * restored, so a closed peer is a failed call (hiredis sees EPIPE). */
static void rd_pipe_hold(const peer_client_t *c, sigset_t *old)
{
    if (!c->rd_guard)
        return;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, old);
}

static void rd_pipe_release(const peer_client_t *c, const sigset_t *old)
{
    if (!c->rd_guard)
        return;
    if (!sigismember(old, SIGPIPE)) {
        sigset_t pend, s;
        sigemptyset(&s);
        sigaddset(&s, SIGPIPE);
        const struct timespec zero = {0, 0};
        while (sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) &&
               sigtimedwait(&s, NULL, &zero) == SIGPIPE)
            ;
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static int rd_put_items(peer_client_t *c, peer_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommand(c->rc, "SET %b %b", items[i].key, items[i].key_len, items[i].buf,
                               items[i].len) != REDIS_OK)
            return cerr(c, "redis: %s", c->rc->errstr);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c->rc, (void **)&r) != REDIS_OK)
            return cerr(c, "redis: %s", c->rc->errstr);
        items[i].rc = r->type == REDIS_REPLY_STATUS ? 0 : -1;
        if (items[i].rc)
            rc = cerr(c, "redis SET: %s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        freeReplyObject(r);
    }
    return rc;
}

static int rd_get_items(peer_client_t *c, peer_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommand(c->rc, "GET %b", items[i].key, items[i].key_len) != REDIS_OK)
            return cerr(c, "redis: %s", c->rc->errstr);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c->rc, (void **)&r) != REDIS_OK)
            return cerr(c, "redis: %s", c->rc->errstr);
        if (r->type == REDIS_REPLY_STRING && (size_t)r->len <= items[i].len) {
            memcpy(items[i].buf, r->str, (size_t)r->len);
            items[i].out_len = (size_t)r->len;
            items[i].rc = 0;
        } else {
            items[i].rc = -1;
            rc = cerr(c, "redis GET %.*s: %s", (int)items[i].key_len, items[i].key,
                      r->type == REDIS_REPLY_NIL ? "missing" : "bad reply");
        }
        freeReplyObject(r);
    }
    return rc;
}

/* ---- generic -------------------------------------------------------------------------------- */

int peer_put(peer_client_t *c, const char *key, size_t klen, const void *val, size_t len)
{
    peer_item_t it = {.key = key, .key_len = klen, .buf = (void *)val, .len = len};
    return peer_batch_put(c, &it, 1);
}

int peer_get(peer_client_t *c, const char *key, size_t klen, void *buf, size_t cap, size_t *out_len)
{
    peer_item_t it = {.key = key, .key_len = klen, .buf = buf, .len = cap};
    int rc = peer_batch_get(c, &it, 1);
    *out_len = it.out_len;
    return rc;
}

int peer_batch_put(peer_client_t *c, peer_item_t *items, size_t n)
{
    if (c->kind != PEER_REDIS)
        return mc_put_items(c, items, n);
    sigset_t old;
    rd_pipe_hold(c, &old);
    int rc = rd_put_items(c, items, n);
    rd_pipe_release(c, &old);
    return rc;
}

int peer_batch_get(peer_client_t *c, peer_item_t *items, size_t n)
{
    if (c->kind != PEER_REDIS)
        return mc_get_items(c, items, n);
    sigset_t old;
    rd_pipe_hold(c, &old);
    int rc = rd_get_items(c, items, n);
    rd_pipe_release(c, &old);
    return rc;
}

int peer_flush(peer_client_t *c)
{
    if (c->kind == PEER_REDIS) {
        sigset_t old;
        rd_pipe_hold(c, &old);
        redisReply *r = redisCommand(c->rc, "FLUSHALL");
        rd_pipe_release(c, &old);
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        return ok ? 0 : cerr(c, "redis FLUSHALL failed");
    }
    struct iovec iov = {(void *)"flush_all\r\n", 11};
    char line[MC_LINE_MAX];
    if (mc_writev_all(c, &iov, 1) != 0 || mc_line(c, line, sizeof(line)) != 0)
        return -1;
    return strcmp(line, "OK") == 0 ? 0 : cerr(c, "memcached flush_all: %s", line);
}

int peer_redis_info_u64(peer_client_t *c, const char *section, const char *field, uint64_t *out)
{
    if (c->kind != PEER_REDIS)
        return cerr(c, "INFO is a redis command");
    sigset_t old;
    rd_pipe_hold(c, &old);
    redisReply *r = redisCommand(c->rc, "INFO %s", section);
    rd_pipe_release(c, &old);
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return cerr(c, "redis INFO %s failed", section);
    }
    size_t fl = strlen(field);
    int rc = -1;
    for (const char *p = r->str; p && *p;) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
            *out = strtoull(p + fl + 1, NULL, 10);
            rc = 0;
            break;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    freeReplyObject(r);
    return rc == 0 ? 0 : cerr(c, "redis INFO %s has no field %s", section, field);
}
