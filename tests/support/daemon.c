// SPDX-License-Identifier: Apache-2.0
/*
 * daemon.c — the tool-process harness (see daemon.h): fork/exec into capture files, bounded
 * waits by pid, kvmeshd with a ready file and an admin port, HTTP/1.0 to the admin port.
 */
#include "daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env/clock.h"
#include "testsrv.h"
#include "tmpdir.h"

int tdaemon_env_setup(tdaemon_env_t *e, const char *prefix)
{
    const char *bin = getenv("KVMESH_BIN_DIR");
    snprintf(e->bin_kvmesh, sizeof(e->bin_kvmesh), "%s/kvmesh", bin ? bin : KVMESH_BIN_DIR);
    snprintf(e->bin_kvmeshd, sizeof(e->bin_kvmeshd), "%s/kvmeshd", bin ? bin : KVMESH_BIN_DIR);
    e->tmpdir[0] = '\0';
    /* before the directory: a test that cannot run leaves nothing behind */
    if (access(e->bin_kvmesh, X_OK) != 0 || access(e->bin_kvmeshd, X_OK) != 0) {
        fprintf(stderr, "tools not built: %s, %s\n", e->bin_kvmesh, e->bin_kvmeshd);
        return -1;
    }
    return ttmp_make(e->tmpdir, sizeof(e->tmpdir), prefix);
}

int tdaemon_env_teardown(tdaemon_env_t *e)
{
    return ttmp_remove(e->tmpdir);
}

char *tdaemon_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (len)
            *len = 0;
        return strdup("");
    }
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

int tdaemon_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

int tdaemon_wait_exit(pid_t pid, uint64_t timeout_ms)
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

pid_t tdaemon_spawn(const char *const argv[], const char *out_path, const char *err_path,
                    const char *in_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
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

void tdaemon_runv(const tdaemon_env_t *e, tdaemon_out_t *o, const char *in_path,
                  const char *const *argv, uint64_t timeout_ms)
{
    char op[300], ep[300];
    snprintf(op, sizeof(op), "%s/cmd.out", e->tmpdir);
    snprintf(ep, sizeof(ep), "%s/cmd.err", e->tmpdir);
    uint64_t t0 = env_clock_mono_ms();
    pid_t pid = tdaemon_spawn(argv, op, ep, in_path);
    o->status = pid > 0 ? tdaemon_wait_exit(pid, timeout_ms) : -1;
    if (o->status == -1 && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    o->ms = env_clock_mono_ms() - t0;
    o->out = tdaemon_slurp(op, &o->out_len);
    o->err = tdaemon_slurp(ep, NULL);
}

void tdaemon_runl(const tdaemon_env_t *e, tdaemon_out_t *o, const char *in_path,
                  uint64_t timeout_ms, const char *first, va_list ap)
{
    const char *argv[TDAEMON_MAX_ARGS + 1];
    size_t n = 0;
    for (const char *a = first; a && n < TDAEMON_MAX_ARGS; a = va_arg(ap, const char *))
        argv[n++] = a;
    argv[n] = NULL;
    tdaemon_runv(e, o, in_path, argv, timeout_ms);
}

void tdaemon_out_free(tdaemon_out_t *o)
{
    free(o->out);
    free(o->err);
    memset(o, 0, sizeof(*o));
}

/* One start on a fresh admin port: 0 ready, -1 not ready (*log: the daemon's log, the caller's
 * to free; *port_taken: it exited because the admin port was taken meanwhile). */
static int start_once(const tdaemon_env_t *e, tdaemon_t *d, int i, const char *cfg_path,
                      const char *const *extra, uint64_t timeout_ms, char **log, bool *port_taken)
{
    char ready[300], out[300], admin[64];
    snprintf(ready, sizeof(ready), "%s/ready-%d", e->tmpdir, i);
    snprintf(out, sizeof(out), "%s/daemon-%d.out", e->tmpdir, i);
    snprintf(d->log, sizeof(d->log), "%s/daemon-%d.log", e->tmpdir, i);
    d->admin_port = testsrv_free_port();
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", d->admin_port);
    unlink(ready);
    const char *argv[TDAEMON_MAX_ARGS + 1] = {
        e->bin_kvmeshd, "--config", cfg_path, "--ready-file", ready, "--admin-listen", admin};
    size_t n = 7;
    for (size_t k = 0; extra && extra[k] && n < TDAEMON_MAX_ARGS; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    d->pid = tdaemon_spawn(argv, out, d->log, NULL);
    uint64_t t0 = env_clock_mono_ms();
    bool exited = false;
    while (d->pid > 0 && env_clock_mono_ms() - t0 < timeout_ms) {
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
            exited = true;
            break;
        }
        usleep(20000);
    }
    if (d->pid < 0)
        d->pid = 0;
    *log = tdaemon_slurp(d->log, NULL);
    *port_taken = exited && *log && strstr(*log, "port in use") != NULL;
    return -1;
}

int tdaemon_start(const tdaemon_env_t *e, tdaemon_t *d, int i, const char *cfg_path,
                  const char *const *extra, uint64_t timeout_ms)
{
    /* The admin port is free when chosen and bound by the daemon a moment later: a parallel
     * test can take it in between. A daemon that exited for that alone is started again on
     * another port (bounded: 3 starts). */
    for (int attempt = 0;; attempt++) {
        char *log = NULL;
        bool port_taken = false;
        if (start_once(e, d, i, cfg_path, extra, timeout_ms, &log, &port_taken) == 0)
            return 0;
        if (port_taken && attempt < 2) {
            fprintf(stderr, "daemon %d: admin port %u was taken meanwhile; another port\n", i,
                    (unsigned)d->admin_port);
            free(log);
            continue;
        }
        fprintf(stderr, "daemon %d did not become ready; log:\n%s\n", i, log ? log : "");
        free(log);
        return -1;
    }
}

void tdaemon_stop(tdaemon_t *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

int tdaemon_http(uint16_t port, const char *method, const char *path, const char *accept,
                 tdaemon_http_t *r)
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
    if (n < 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char *buf = malloc(TDAEMON_HTTP_MAX + 1);
    if (!buf) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t k;
    while (got < TDAEMON_HTTP_MAX && (k = read(fd, buf + got, TDAEMON_HTTP_MAX - got)) > 0)
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

void tdaemon_http_free(tdaemon_http_t *r)
{
    free(r->head);
    r->head = NULL;
    r->body = NULL;
}
