/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_util.h — helpers of the ops_* integration tests (header-only, static functions): running
 * the tools as real processes with bounded waits, kvmeshd daemons with a ready file and an
 * admin port, plain HTTP/1.0 requests to an admin port, and reading values out of JSON text.
 * Every process is started here and stopped by pid; every wait is bounded.
 */
#ifndef KVMESH_TESTS_OPS_UTIL_H
#define KVMESH_TESTS_OPS_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* cmocka needs the three above it */
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

#include "env/clock.h"
#include "testsrv.h"

#define OPS_CMD_TIMEOUT_MS   90000 /* one tool invocation (chromium included) */
#define OPS_READY_TIMEOUT_MS 30000 /* a daemon joining */
#define OPS_MAX_ARGS         48
#define OPS_HTTP_MAX         (2u << 20)

static char ops_tmpdir[256];
static char ops_bin_kvmesh[512], ops_bin_kvmeshd[512];

struct ops_out {
    int status; /* exit status, 128+sig when signalled, -1 on timeout */
    char *out, *err;
    size_t out_len;
};

static inline char *ops_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t r = fread(b, 1, (size_t)(n > 0 ? n : 0), f);
    b[r] = '\0';
    fclose(f);
    if (len)
        *len = r;
    return b;
}

static inline void ops_out_free(struct ops_out *o)
{
    free(o->out);
    free(o->err);
    memset(o, 0, sizeof(*o));
}

static inline int ops_wait_exit(pid_t pid, uint64_t timeout_ms)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (env_clock_mono_ms() - t0 > timeout_ms)
            return -1;
        usleep(10000);
    }
}

static inline pid_t ops_spawn(const char *const argv[], const char *out_path, const char *err_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int in = open("/dev/null", O_RDONLY);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Runs argv (NULL-terminated) to completion, bounded, capturing stdout and stderr. */
static inline void ops_runv(struct ops_out *o, const char *const *argv)
{
    char op[300], ep[300];
    snprintf(op, sizeof(op), "%s/cmd.out", ops_tmpdir);
    snprintf(ep, sizeof(ep), "%s/cmd.err", ops_tmpdir);
    pid_t pid = ops_spawn(argv, op, ep);
    o->status = ops_wait_exit(pid, OPS_CMD_TIMEOUT_MS);
    if (o->status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    o->out = ops_slurp(op, &o->out_len);
    o->err = ops_slurp(ep, NULL);
}

static inline void ops_run(struct ops_out *o, const char *first, ...)
{
    const char *argv[OPS_MAX_ARGS + 1];
    size_t n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < OPS_MAX_ARGS; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    ops_runv(o, argv);
}

#define OPS_ASSERT_RUN(o, want)                                                                    \
    do {                                                                                           \
        if ((o)->status != (want))                                                                 \
            fail_msg("exit %d (want %d)\nstdout: %s\nstderr: %s", (o)->status, (want), (o)->out,   \
                     (o)->err);                                                                    \
    } while (0)

#define OPS_ASSERT_HAS(hay, needle)                                                                \
    do {                                                                                           \
        if (!strstr((hay), (needle)))                                                              \
            fail_msg("expected \"%s\" in:\n%s", (needle), (hay));                                  \
    } while (0)

static inline void ops_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fail_msg("cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static inline int ops_setup(void)
{
    const char *bin = getenv("KVMESH_BIN_DIR");
    snprintf(ops_bin_kvmesh, sizeof(ops_bin_kvmesh), "%s/kvmesh", bin ? bin : KVMESH_BIN_DIR);
    snprintf(ops_bin_kvmeshd, sizeof(ops_bin_kvmeshd), "%s/kvmeshd", bin ? bin : KVMESH_BIN_DIR);
    snprintf(ops_tmpdir, sizeof(ops_tmpdir), "/tmp/kvmesh-ops-XXXXXX");
    if (!mkdtemp(ops_tmpdir))
        return -1;
    if (access(ops_bin_kvmesh, X_OK) != 0 || access(ops_bin_kvmeshd, X_OK) != 0) {
        fprintf(stderr, "tools not built: %s, %s\n", ops_bin_kvmesh, ops_bin_kvmeshd);
        return -1;
    }
    return 0;
}

static inline int ops_teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ops_tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- daemons ------------------------------------------------------------------------------ */

struct ops_daemon {
    pid_t pid;
    char id[40];
    char log[300];
    uint16_t admin_port;
};

/* Starts kvmeshd --config cfg_path [extra flags...] with a fresh admin port; waits until it
 * wrote its ready file. extra is a NULL-terminated list (may be NULL). */
static inline int ops_daemon_start(struct ops_daemon *d, int i, const char *cfg_path,
                                   const char *const *extra)
{
    char ready[300], out[300], admin[64];
    snprintf(ready, sizeof(ready), "%s/ready-%d", ops_tmpdir, i);
    snprintf(out, sizeof(out), "%s/daemon-%d.out", ops_tmpdir, i);
    snprintf(d->log, sizeof(d->log), "%s/daemon-%d.log", ops_tmpdir, i);
    d->admin_port = testsrv_free_port();
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", d->admin_port);
    unlink(ready);
    const char *argv[OPS_MAX_ARGS + 1] = {
        ops_bin_kvmeshd, "--config", cfg_path, "--ready-file", ready, "--admin-listen", admin};
    size_t n = 7;
    for (size_t k = 0; extra && extra[k] && n < OPS_MAX_ARGS; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    d->pid = ops_spawn(argv, out, d->log);
    uint64_t t0 = env_clock_mono_ms();
    while (env_clock_mono_ms() - t0 < OPS_READY_TIMEOUT_MS) {
        FILE *f = fopen(ready, "r");
        if (f) {
            unsigned long long ep;
            int ok = fscanf(f, "%39s %llu", d->id, &ep) == 2;
            fclose(f);
            if (ok)
                return 0;
        }
        if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
            d->pid = 0;
            break;
        }
        usleep(20000);
    }
    char *log = ops_slurp(d->log, NULL);
    fprintf(stderr, "daemon %d did not become ready; log:\n%s\n", i, log);
    free(log);
    return -1;
}

static inline void ops_daemon_stop(struct ops_daemon *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

/* ---- HTTP --------------------------------------------------------------------------------- */

struct ops_http {
    int code;
    char *head; /* status line and headers */
    char *body;
};

static inline void ops_http_free(struct ops_http *r)
{
    free(r->head);
    r->head = NULL;
    r->body = NULL;
}

/* method path on 127.0.0.1:port with an optional Accept header. Returns the status code (-1
 * when the request failed); r->body points into r->head's buffer. */
static inline int ops_http(uint16_t port, const char *method, const char *path, const char *accept,
                           struct ops_http *r)
{
    memset(r, 0, sizeof(*r));
    r->code = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char req[512];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: x\r\n%s%s%s\r\n", method, path,
                     accept ? "Accept: " : "", accept ? accept : "", accept ? "\r\n" : "");
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char *buf = malloc(OPS_HTTP_MAX + 1);
    size_t got = 0;
    ssize_t k;
    while (got < OPS_HTTP_MAX && (k = read(fd, buf + got, OPS_HTTP_MAX - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    close(fd);
    r->head = buf;
    char *sep = strstr(buf, "\r\n\r\n");
    r->body = sep ? sep + 4 : buf + got;
    if (sep)
        *sep = '\0';
    sscanf(buf, "HTTP/%*s %d", &r->code);
    return r->code;
}

/* ---- JSON / text scraping ------------------------------------------------------------------ */

/* The unsigned number after "key": in text at or after from (NULL: not found). */
static inline const char *ops_json_u64(const char *text, const char *key, unsigned long long *out)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(text, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    char *end;
    *out = strtoull(p, &end, 10);
    return end == p ? NULL : end;
}

#endif
