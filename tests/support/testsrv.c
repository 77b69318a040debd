/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testsrv.c — real-server launchers for tests (see testsrv.h).
 *
 * Invariants:
 *   - a handle with pid != 0 has a live (or not yet reaped) child; every child is reaped by
 *     testsrv_kill/testsrv_restart/testsrv_stop or the atexit handler, never left as a zombie;
 *   - every running handle is on the exit registry, so a normal exit() kills it;
 *   - the child process runs only async-signal-safe code between fork() and execv(): everything
 *     it needs (argv, paths, the log fd) is prepared before fork().
 */
#include "testsrv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "env/clock.h"

#define TESTSRV_START_ATTEMPTS 3 /* fresh ports per attempt when a child exits early */
#define TESTSRV_PROBE_MS       500
#define TESTSRV_MAX_ARGS       32

struct testsrv {
    enum testsrv_kind kind;
    pid_t pid;
    uint16_t port;      /* client port */
    uint16_t peer_port; /* etcd only */
    char dir[PATH_MAX];
    char log[PATH_MAX + 16];
    char conf[PATH_MAX + 16];
    char data[PATH_MAX + 16];
    char bin[PATH_MAX];
    char url[64];
    struct testsrv *next; /* exit registry */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static struct testsrv *reg_head;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *dir)
{
    if (dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Reaps pid, waiting at most ms; escalates to SIGKILL at the bound. Returns once reaped. */
static void reap(pid_t pid, unsigned ms)
{
    uint64_t end = env_clock_mono_ms() + ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return;
        if (env_clock_mono_ms() >= end) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
            return;
        }
        sleep_ms(5);
    }
}

static void exit_handler(void)
{
    pthread_mutex_lock(&reg_lock);
    for (struct testsrv *s = reg_head; s; s = s->next) {
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            reap(s->pid, 2000);
            s->pid = 0;
        }
        rm_tree(s->dir);
    }
    reg_head = NULL;
    pthread_mutex_unlock(&reg_lock);
}

/* Start time of a process (clock ticks since boot, /proc/PID/stat field 22), 0 if gone. */
static unsigned long long proc_start(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field <= 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
        if (field == 22 && p)
            return strtoull(p, NULL, 10);
    }
    return 0;
}

/* Records the owning process in dir/owner so a later run can sweep the dir if this process
 * dies without cleaning up (SIGKILL, ctest timeout). */
static void write_owner(const char *dir)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/owner", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d %llu\n", (int)getpid(), proc_start(getpid()));
        fclose(f);
    }
}

/* Removes kvmesh-{redis,etcd}-* temporary dirs whose owner process no longer exists (its
 * servers died with it through PR_SET_PDEATHSIG). Dirs of live owners are never touched. */
void testsrv_sweep_stale(void)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    DIR *d = opendir(tmp);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "kvmesh-redis-", 13) != 0 &&
            strncmp(de->d_name, "kvmesh-etcd-", 12) != 0)
            continue;
        char path[PATH_MAX], owner[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%s", tmp, de->d_name);
        snprintf(owner, sizeof(owner), "%s/owner", path);
        FILE *f = fopen(owner, "r");
        if (!f)
            continue; /* not ours to judge */
        char line[64] = "";
        char *ok = fgets(line, sizeof(line), f);
        fclose(f);
        char *end = NULL;
        long pid = ok ? strtol(line, &end, 10) : 0;
        if (pid <= 0 || !end || *end != ' ')
            continue;
        unsigned long long start = strtoull(end + 1, NULL, 10);
        if (proc_start((pid_t)pid) != start)
            rm_tree(path);
    }
    closedir(d);
}

static void reg_init(void)
{
    atexit(exit_handler);
    testsrv_sweep_stale();
}

static void reg_add(struct testsrv *s)
{
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    s->next = reg_head;
    reg_head = s;
    pthread_mutex_unlock(&reg_lock);
}

static void reg_del(struct testsrv *s)
{
    pthread_mutex_lock(&reg_lock);
    for (struct testsrv **pp = &reg_head; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

uint64_t testsrv_env_ms(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || end == v)
        return def;
    return x;
}

uint16_t testsrv_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int find_binary(const char *name, const char *envvar, const char *pkg, char *out, size_t cap)
{
    const char *ov = getenv(envvar);
    if (ov && *ov) {
        if (access(ov, X_OK) != 0)
            return kvm_errf(KVMESH_ENOENT, "%s=%s is not an executable file (%s)", envvar, ov,
                            strerror(errno));
        snprintf(out, cap, "%s", ov);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t n = colon ? (size_t)(colon - path) : strlen(path);
        if (n > 0 && n + strlen(name) + 2 <= cap) {
            snprintf(out, cap, "%.*s/%s", (int)n, path, name);
            if (access(out, X_OK) == 0)
                return 0;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    out[0] = '\0';
    return kvm_errf(KVMESH_ENOENT,
                    "%s not found in PATH; install it (Debian: apt-get install %s) or set %s to "
                    "its path",
                    name, pkg, envvar);
}

/* Last bytes of the server log, single line, for error messages. */
static void log_tail(const struct testsrv *s, char *buf, size_t cap)
{
    buf[0] = '\0';
    int fd = open(s->log, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)(cap - 1) ? end - (off_t)(cap - 1) : 0;
    ssize_t n = pread(fd, buf, cap - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
}

static void build_argv(struct testsrv *s, char **argv, char store[][PATH_MAX + 64])
{
    int i = 0;
    if (s->kind == TESTSRV_REDIS) {
        argv[i++] = s->bin;
        argv[i++] = s->conf;
    } else {
        int k = 0;
        argv[i++] = s->bin;
#define ARG(...)                                                                                   \
    do {                                                                                           \
        snprintf(store[k], sizeof(store[k]), __VA_ARGS__);                                         \
        argv[i++] = store[k++];                                                                    \
    } while (0)
        ARG("--name=kvmesh-test");
        ARG("--data-dir=%s", s->data);
        ARG("--listen-client-urls=http://127.0.0.1:%u", s->port);
        ARG("--advertise-client-urls=http://127.0.0.1:%u", s->port);
        ARG("--listen-peer-urls=http://127.0.0.1:%u", s->peer_port);
        ARG("--initial-advertise-peer-urls=http://127.0.0.1:%u", s->peer_port);
        ARG("--initial-cluster=kvmesh-test=http://127.0.0.1:%u", s->peer_port);
        ARG("--initial-cluster-state=new");
        ARG("--initial-cluster-token=kvmesh-test-%d", (int)getpid());
        ARG("--heartbeat-interval=50");
        ARG("--election-timeout=300");
        ARG("--logger=zap");
        ARG("--log-outputs=stderr");
        ARG("--log-level=warn");
#undef ARG
    }
    argv[i] = NULL;
    KVM_ASSERT(i < TESTSRV_MAX_ARGS);
}

static int spawn(struct testsrv *s)
{
    char *argv[TESTSRV_MAX_ARGS];
    char(*store)[PATH_MAX + 64] = calloc(TESTSRV_MAX_ARGS, PATH_MAX + 64);
    if (!store)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    build_argv(s, argv, store);

    int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) {
        free(store);
        return kvm_errf(KVMESH_EIO, "cannot open server log %s: %s", s->log, strerror(errno));
    }
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nullfd < 0) {
        close(logfd);
        free(store);
        return kvm_errf(KVMESH_EIO, "cannot open /dev/null: %s", strerror(errno));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(logfd);
        close(nullfd);
        free(store);
        return kvm_errf(KVMESH_EIO, "fork failed: %s", strerror(e));
    }
    if (pid == 0) {
        /* child: async-signal-safe calls only */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &dfl, NULL);
        sigaction(SIGINT, &dfl, NULL);
        sigaction(SIGTERM, &dfl, NULL);
        dup2(nullfd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
            for (int fd = 3; fd < 4096; fd++)
                close(fd);
        execv(argv[0], argv);
        _exit(127);
    }
    close(logfd);
    close(nullfd);
    free(store); /* the child has its own copy */
    s->pid = pid;
    return 0;
}

/* One readiness probe: 1 = ready, 0 = not yet. */
static int probe(const struct testsrv *s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int ready = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto out;
    const char *req =
        s->kind == TESTSRV_REDIS ? "PING\r\n" : "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        goto out;
    char buf[2048];
    size_t have = 0;
    uint64_t end = env_clock_mono_ms() + TESTSRV_PROBE_MS;
    while (have < sizeof(buf) - 1) {
        uint64_t now = env_clock_mono_ms();
        if (now >= end)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - now)) <= 0)
            break;
        ssize_t n = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        if (s->kind == TESTSRV_REDIS && memchr(buf, '\n', have))
            break;
    }
    buf[have] = '\0';
    if (s->kind == TESTSRV_REDIS)
        ready = strncmp(buf, "+PONG", 5) == 0 || strncmp(buf, "-NOAUTH", 7) == 0 ||
                strncmp(buf, "-NOPERM", 7) == 0;
    else
        ready = strstr(buf, " 200 ") != NULL && strstr(buf, "\"health\":\"true\"") != NULL;
out:
    close(fd);
    return ready;
}

/* Waits for readiness. Returns 0, KVMESH_EAGAIN when the child exited early (port race or bad
 * config; message set), KVMESH_ETIMEDOUT at the bound. */
static int wait_ready(struct testsrv *s)
{
    uint64_t end = env_clock_mono_ms() + TESTSRV_READY_TIMEOUT_MS;
    char tail[360];
    for (;;) {
        int st;
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid) {
            s->pid = 0;
            log_tail(s, tail, sizeof(tail));
            if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
                return kvm_errf(KVMESH_ENOENT, "could not execute %s", s->bin);
            return kvm_errf(KVMESH_EAGAIN, "%s exited during start-up (status 0x%x); log %s: %s",
                            s->bin, st, s->log, tail);
        }
        if (probe(s))
            return 0;
        if (env_clock_mono_ms() >= end) {
            log_tail(s, tail, sizeof(tail));
            return kvm_errf(KVMESH_ETIMEDOUT, "%s not ready on port %u after %d ms; log %s: %s",
                            s->bin, s->port, TESTSRV_READY_TIMEOUT_MS, s->log, tail);
        }
        sleep_ms(20);
    }
}

static int write_redis_conf(struct testsrv *s, const char *extra)
{
    FILE *f = fopen(s->conf, "w");
    if (!f)
        return kvm_errf(KVMESH_EIO, "cannot write %s: %s", s->conf, strerror(errno));
    fprintf(f,
            "port %u\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nlogfile \"\"\n"
            "save \"\"\nappendonly no\nloglevel warning\n",
            s->port, s->dir);
    if (extra)
        fprintf(f, "%s\n", extra);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return kvm_errf(KVMESH_EIO, "cannot write %s", s->conf);
    return 0;
}

static int alloc_ports(struct testsrv *s)
{
    s->port = testsrv_free_port();
    s->peer_port = s->kind == TESTSRV_ETCD ? testsrv_free_port() : 0;
    if (!s->port || (s->kind == TESTSRV_ETCD && (!s->peer_port || s->peer_port == s->port)))
        return kvm_errf(KVMESH_EIO, "no free loopback port");
    return 0;
}

static int start_common(testsrv_t **out, enum testsrv_kind kind, const char *extra_conf)
{
    *out = NULL;
    struct testsrv *s = calloc(1, sizeof(*s));
    if (!s)
        return KVMESH_ENOMEM;
    s->kind = kind;
    int rc = kind == TESTSRV_REDIS
                 ? find_binary("redis-server", "KVMESH_REDIS_SERVER", "redis-server", s->bin,
                               sizeof(s->bin))
                 : find_binary("etcd", "KVMESH_ETCD", "etcd-server", s->bin, sizeof(s->bin));
    if (rc)
        goto fail;
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof(s->dir), "%s/kvmesh-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp",
             kind == TESTSRV_REDIS ? "redis" : "etcd");
    if (!mkdtemp(s->dir)) {
        rc = kvm_errf(KVMESH_EIO, "mkdtemp %s: %s", s->dir, strerror(errno));
        s->dir[0] = '\0';
        goto fail;
    }
    write_owner(s->dir);
    snprintf(s->log, sizeof(s->log), "%s/server.log", s->dir);
    snprintf(s->conf, sizeof(s->conf), "%s/redis.conf", s->dir);
    snprintf(s->data, sizeof(s->data), "%s/data", s->dir);
    reg_add(s);
    for (int attempt = 0; attempt < TESTSRV_START_ATTEMPTS; attempt++) {
        if ((rc = alloc_ports(s)) != 0)
            goto fail;
        if (kind == TESTSRV_REDIS && (rc = write_redis_conf(s, extra_conf)) != 0)
            goto fail;
        if ((rc = spawn(s)) != 0)
            goto fail;
        rc = wait_ready(s);
        if (rc == 0)
            break;
        if (rc != KVMESH_EAGAIN)
            goto fail;
        /* early exit (likely a port taken between probe and bind): fresh ports, fresh data */
        if (kind == TESTSRV_ETCD)
            rm_tree(s->data);
    }
    if (rc)
        goto fail;
    snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%u", kind == TESTSRV_REDIS ? "redis" : "etcd",
             s->port);
    *out = s;
    return 0;
fail:
    if (s->dir[0]) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        testsrv_stop(s);
        kvm_errf(rc, "%s", msg);
    } else {
        free(s);
    }
    return rc;
}

int testsrv_start_redis(testsrv_t **out, const char *extra_conf)
{
    return start_common(out, TESTSRV_REDIS, extra_conf);
}

int testsrv_start_etcd(testsrv_t **out)
{
    return start_common(out, TESTSRV_ETCD, NULL);
}

int testsrv_start_named(testsrv_t **out, const char *kind)
{
    int rc = strcmp(kind, "redis") == 0  ? testsrv_start_redis(out, NULL)
             : strcmp(kind, "etcd") == 0 ? testsrv_start_etcd(out)
                                         : kvm_errf(KVMESH_EINVAL, "not redis or etcd");
    if (rc)
        fprintf(stderr, "cannot start %s: %s\n", kind, kvmesh_last_error());
    return rc;
}

const char *testsrv_url(const testsrv_t *s)
{
    return s->url;
}

uint16_t testsrv_port(const testsrv_t *s)
{
    return s->port;
}

const char *testsrv_dir(const testsrv_t *s)
{
    return s->dir;
}

const char *testsrv_log_path(const testsrv_t *s)
{
    return s->log;
}

enum testsrv_kind testsrv_kind(const testsrv_t *s)
{
    return s->kind;
}

pid_t testsrv_pid(const testsrv_t *s)
{
    return s->pid;
}

bool testsrv_running(const testsrv_t *s)
{
    return s->pid > 0;
}

int testsrv_kill(testsrv_t *s, int sig)
{
    if (s->pid <= 0)
        return kvm_errf(KVMESH_EINVAL, "server is not running");
    if (kill(s->pid, sig) != 0)
        return kvm_errf(KVMESH_EIO, "kill(%d, %d): %s", (int)s->pid, sig, strerror(errno));
    if (sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
        if (sig != SIGKILL)
            kill(s->pid, SIGCONT); /* a stopped server must run to terminate */
        reap(s->pid, TESTSRV_STOP_TIMEOUT_MS);
        s->pid = 0;
    }
    return 0;
}

int testsrv_restart(testsrv_t *s)
{
    if (s->pid > 0)
        testsrv_kill(s, SIGTERM);
    int rc = spawn(s);
    if (rc)
        return rc;
    rc = wait_ready(s);
    if (rc && s->pid > 0) {
        kill(s->pid, SIGKILL);
        reap(s->pid, TESTSRV_STOP_TIMEOUT_MS);
        s->pid = 0;
    }
    return rc;
}

void testsrv_stop(testsrv_t *s)
{
    if (!s)
        return;
    reg_del(s);
    if (s->pid > 0) {
        kill(s->pid, SIGCONT);
        kill(s->pid, SIGTERM);
        reap(s->pid, TESTSRV_STOP_TIMEOUT_MS);
        s->pid = 0;
    }
    rm_tree(s->dir);
    free(s);
}
