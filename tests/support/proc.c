// SPDX-License-Identifier: Apache-2.0
/*
 * proc.c — the runtime-process harness (see proc.h): fork/exec with stdin/stdout pipes, the ready
 * line, kill by pid, bounded reaping, restart with the saved arguments.
 */
#include "env/clock.h"
#include "proc.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmesh.h"
#include "api/kvmesh_tools.h"
#include "store/store.h"

kvmesh_t *tproc_child_open(kvmesh_config_t *c)
{
    kvmesh_t *kv = NULL;
    int rc = c ? kvmesh_open(&kv, c) : KVMESH_ENOMEM;
    kvmesh_config_free(c);
    if (rc) {
        fprintf(stderr, "runtime open failed: %s\n", kvmesh_last_error());
        return NULL;
    }
    return kv;
}

void tproc_child_ready(kvmesh_t *kv, bool admin_port)
{
    char id[KVMESH_ID_HEX_LEN + 1];
    uint64_t epoch = 0;
    kvmesh_self(kv, id, &epoch);
    if (admin_port)
        printf("READY %s %" PRIu64 " %u\n", id, epoch,
               (unsigned)kvm_rt_admin_port(kvmesh_runtime_of(kv)));
    else
        printf("READY %s %" PRIu64 "\n", id, epoch);
    fflush(stdout);
}

int tproc_child_serve(kvmesh_t *kv)
{
    char line[64];
    while (fgets(line, sizeof(line), stdin))
        ;
    kvmesh_close(kv);
    return 0;
}

int tproc_child_run(kvmesh_config_t *c, bool admin_port)
{
    kvmesh_t *kv = tproc_child_open(c);
    if (!kv)
        return 1;
    tproc_child_ready(kv, admin_port);
    return tproc_child_serve(kv);
}

uint32_t tproc_child_put_acked(kvmesh_t *kv, const kvmesh_scope_t *sc, uint32_t n, size_t len,
                               void (*key_of)(uint32_t i, char *k, size_t cap))
{
    uint8_t *buf = malloc(len);
    uint32_t i = 0;
    for (; buf && i < n; i++) {
        char k[64];
        key_of(i, k, sizeof(k));
        tproc_fill(buf, len, i + 1);
        if (kvmesh_put(kv, sc, k, strlen(k), buf, len, NULL) != 0) {
            fprintf(stderr, "put %s: %s\n", k, kvmesh_last_error());
            break;
        }
        printf("ACK %u\n", i);
        fflush(stdout);
    }
    free(buf);
    return i;
}

int tproc_config_setv(kvmesh_config_t *c, const char *const pairs[][2])
{
    if (!c)
        return -1;
    for (size_t i = 0; pairs[i][0]; i++) {
        if (kvmesh_config_set(c, pairs[i][0], pairs[i][1]) != 0) {
            fprintf(stderr, "config %s = %s: %s\n", pairs[i][0], pairs[i][1], kvmesh_last_error());
            return -1;
        }
    }
    return 0;
}

int tproc_admin_open(const char *url, const char *dep, kvmesh_admin_t **adm)
{
    kvmesh_config_t *ac = kvmesh_config_new();
    int rc = ac && kvmesh_config_set(ac, "metadata_url", url) == 0 &&
                     kvmesh_config_set(ac, "deployment", dep) == 0 &&
                     kvmesh_admin_open(ac, adm) == 0
                 ? 0
                 : -1;
    kvmesh_config_free(ac);
    return rc;
}

int tproc_wait_storage(kvmesh_t *kv, size_t want, int timeout_ms)
{
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        kvmesh_member_info_t m[16];
        size_t n = 0, k = 0;
        if (kvmesh_members(kv, m, 16, &n) != 0) {
            fprintf(stderr, "tproc_wait_storage: members: %s\n", kvmesh_last_error());
            return -1;
        }
        for (size_t i = 0; i < n && i < 16; i++)
            k += m[i].capacity_bytes > 0 && strcmp(m[i].state, "active") == 0;
        if (k == want)
            return 0;
        if (env_clock_mono_ms() >= end) {
            fprintf(stderr,
                    "tproc_wait_storage: %zu active storage members after %d ms, want %zu\n", k,
                    timeout_ms, want);
            return -1;
        }
        usleep(50000);
    }
}

int tproc_self_exe(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) {
        fprintf(stderr, "tproc: cannot read /proc/self/exe: %s\n", strerror(errno));
        return KVMESH_EIO;
    }
    buf[n] = 0;
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Waits (bounded) for the child to exit, polling; escalates to SIGKILL at the bound. */
static void reap(tproc_t *p, int timeout_ms)
{
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid || (r < 0 && errno == ECHILD))
            break;
        if (env_clock_mono_ms() >= end) {
            kill(p->pid, SIGKILL);
            if (waitpid(p->pid, &p->status, 0) != p->pid)
                p->status = 0;
            break;
        }
        usleep(5000);
    }
    p->pid = 0;
    close_fd(&p->in_fd);
    close_fd(&p->out_fd);
}

int tproc_read_line(tproc_t *p, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    if (p->pid <= 0 || p->out_fd < 0 || cap == 0)
        return -1;
    while (n + 1 < cap) {
        struct pollfd pf = {p->out_fd, POLLIN, 0};
        int left = (int)(end - env_clock_mono_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            return -1;
        ssize_t r = read(p->out_fd, buf + n, 1);
        if (r <= 0)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

int tproc_write(tproc_t *p, const char *s)
{
    size_t len = strlen(s), off = 0;
    while (p->pid > 0 && p->in_fd >= 0 && off < len) {
        ssize_t w = write(p->in_fd, s + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return off == len ? 0 : -1;
}

int tproc_drain(tproc_t *p, int attempts, char *line, size_t cap, int timeout_ms)
{
    char want[32], again[32];
    snprintf(want, sizeof(want), "DRAINED 0");
    snprintf(again, sizeof(again), "DRAINED %d", KVMESH_EUNAVAILABLE);
    for (int a = 1; a <= attempts; a++) {
        if (tproc_write(p, "drain\n") != 0 || tproc_read_line(p, line, cap, timeout_ms) != 0) {
            fprintf(stderr, "tproc_drain: no answer to drain %d\n", a);
            return -1;
        }
        fprintf(stderr, "tproc_drain: drain %d of at most %d: %s\n", a, attempts, line);
        if (strcmp(line, want) == 0)
            return 0;
        if (strcmp(line, again) != 0)
            return -1;
    }
    return -1;
}

static int spawn(tproc_t *p, char *line, size_t line_cap, int timeout_ms)
{
    int in[2], out[2];
    char *argv[TPROC_MAX_ARGS + 1];
    for (int i = 0; i < p->argc; i++)
        argv[i] = p->argv[i];
    argv[p->argc] = NULL;
    if (pipe2(in, O_CLOEXEC) != 0)
        return KVMESH_EIO;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return KVMESH_EIO;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        fprintf(stderr, "tproc: fork: %s\n", strerror(errno));
        return KVMESH_EIO;
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    char buf[512];
    size_t wl = strlen(p->ready_word);
    if (tproc_read_line(p, buf, sizeof(buf), timeout_ms) != 0 || strncmp(buf, p->ready_word, wl)) {
        fprintf(stderr, "tproc: %s %s did not report %s within %d ms\n", p->argv[0],
                p->argc > 1 ? p->argv[1] : "", p->ready_word, timeout_ms);
        kill(p->pid, SIGKILL);
        reap(p, TPROC_REAP_TIMEOUT_MS);
        return KVMESH_ETIMEDOUT;
    }
    if (line)
        snprintf(line, line_cap, "%s", buf);
    return 0;
}

int tproc_start(tproc_t *p, int argc, const char *const argv[], const char *ready_word, char *line,
                size_t line_cap, int timeout_ms)
{
    if (p->pid > 0 || argc < 1 || argc > TPROC_MAX_ARGS ||
        strlen(ready_word) >= sizeof(p->ready_word))
        return KVMESH_EINVAL;
    for (int i = 0; i < argc; i++)
        if (strlen(argv[i]) >= TPROC_ARG_CAP)
            return KVMESH_EINVAL;
    p->argc = argc;
    for (int i = 0; i < argc; i++)
        snprintf(p->argv[i], TPROC_ARG_CAP, "%s", argv[i]);
    snprintf(p->ready_word, sizeof(p->ready_word), "%s", ready_word);
    return spawn(p, line, line_cap, timeout_ms);
}

int tproc_restart(tproc_t *p, char *line, size_t line_cap, int timeout_ms)
{
    if (p->pid > 0 || p->argc < 1)
        return KVMESH_EINVAL;
    return spawn(p, line, line_cap, timeout_ms);
}

int tproc_kill(tproc_t *p, int sig)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    reap(p, TPROC_REAP_TIMEOUT_MS);
    return 0;
}

void tproc_close_stdin(tproc_t *p)
{
    if (p->pid > 0)
        close_fd(&p->in_fd);
}

int tproc_stop(tproc_t *p, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    close_fd(&p->in_fd);
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    bool exited = false;
    while (!(exited = tproc_exited(p)) && env_clock_mono_ms() < end)
        usleep(10000);
    if (!exited) {
        fprintf(stderr,
                "tproc: %s (pid %d) did not exit within %d ms of its stdin closing; killed\n",
                p->argv[0], (int)p->pid, timeout_ms);
        kill(p->pid, SIGKILL);
        reap(p, TPROC_REAP_TIMEOUT_MS);
        return -1;
    }
    if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
        return 0;
    char buf[64];
    fprintf(stderr, "tproc: %s %s ended with %s\n", p->argv[0], p->argc > 1 ? p->argv[1] : "",
            tproc_status_str(p->status, buf, sizeof(buf)));
    return -1;
}

bool tproc_exited(tproc_t *p)
{
    if (p->pid <= 0)
        return false;
    if (waitpid(p->pid, &p->status, WNOHANG) != p->pid)
        return false;
    p->pid = 0;
    close_fd(&p->in_fd);
    close_fd(&p->out_fd);
    return true;
}

const char *tproc_status_str(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(buf, cap, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "status 0x%x", (unsigned)status);
    return buf;
}

void tproc_fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}
