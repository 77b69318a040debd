/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_deadline — every public call returns by its deadline (request_timeout_ms) plus the
 * documented slack, whatever an owner does (docs/api.md "Deadlines"), against a real Redis and
 * three real runtime processes on the tcp transport.
 *
 *   itest_store_deadline redis           the test (starts redis-server with testsrv)
 *   itest_store_deadline --runtime URL DEPLOYMENT MEMORY LISTEN ADVERTISE
 *                                        one runtime process: kvmesh_open, prints
 *                                        "READY <id> <epoch>", then waits for EOF on stdin
 *
 * Runtime C is reached for RPC through a socket proxy in this process (C advertises the proxy's
 * address), so the test can make C trickle: the proxy forwards C's replies one byte every
 * TRICKLE_MS. Phases, each with single and batch put/get/remove/exists/route calls on keys whose
 * only replica is on C:
 *   1. C stopped with SIGSTOP: every call returns within DEADLINE_MS + SLACK_MS, and while one
 *      thread is blocked on C, another thread of the same client completes calls on keys held by
 *      A (metadata_only mode, where nothing of those keys lives on C);
 *   2. C resumed (SIGCONT): C's objects are readable again (the client reopens the connections
 *      it cut at the deadline);
 *   3. C trickling its RPC replies: every call returns within DEADLINE_MS + SLACK_MS.
 * The slack is generous on purpose: this checks the API contract, not performance. Every loop is
 * bounded in count and time; every process started here is killed by pid.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "testsrv.h"

#define DEADLINE_MS 2000u
#define SLACK_MS    1000u /* test bound: deadline + this (documented slack is far smaller) */
#define TRICKLE_MS  50
#define N_KEYS      8
#define VLEN        4096
#define MAX_PROCS   3
#define MAX_PCONNS  64

static void cleanup_all(void);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "CHECK failed %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #c,   \
                    kvmesh_last_error());                                                          \
            cleanup_all();                                                                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct proc {
    pid_t pid;
    int in_fd, out_fd;
    char id[64];
};

static struct proc procs[MAX_PROCS];
static testsrv_t *srv;
static const char *self_exe;
static char url[256];
static const char *deployment = "dl";
static const kvmesh_scope_t sc = {"dl", "d"};

/* ---- the proxy in front of C's RPC port ------------------------------------------------------ */

struct pconn {
    int cfd, sfd; /* client side, C side */
    pthread_t th;
    bool used;
};

static struct {
    int lfd;
    uint16_t port, target_port;
    atomic_bool stop, trickle;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    struct pconn conns[MAX_PCONNS];
    unsigned n;
} px = {.lfd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *pconn_main(void *arg)
{
    struct pconn *c = arg;
    static char buf_unused;
    (void)buf_unused;
    char *buf = malloc(65536);
    while (buf && !atomic_load(&px.stop)) {
        struct pollfd p[2] = {{c->cfd, POLLIN, 0}, {c->sfd, POLLIN, 0}};
        int r = poll(p, 2, 100);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        if (p[0].revents) { /* client -> C: at full speed */
            ssize_t n = recv(c->cfd, buf, 65536, 0);
            if (n <= 0 || send_all(c->sfd, buf, (size_t)n) != 0)
                break;
        }
        if (p[1].revents) { /* C -> client: one byte per TRICKLE_MS while trickling */
            bool slow = atomic_load(&px.trickle);
            ssize_t n = recv(c->sfd, buf, slow ? 1 : 65536, 0);
            if (n <= 0 || send_all(c->cfd, buf, (size_t)n) != 0)
                break;
            if (slow)
                usleep(TRICKLE_MS * 1000);
        }
    }
    free(buf);
    shutdown(c->cfd, SHUT_RDWR);
    shutdown(c->sfd, SHUT_RDWR);
    return NULL;
}

static void *proxy_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&px.stop)) {
        struct pollfd p = {px.lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int cfd = accept4(px.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0)
            continue;
        int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(px.target_port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        pthread_mutex_lock(&px.mu);
        bool ok =
            sfd >= 0 && px.n < MAX_PCONNS && connect(sfd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (ok) {
            struct pconn *c = &px.conns[px.n];
            c->cfd = cfd;
            c->sfd = sfd;
            ok = pthread_create(&c->th, NULL, pconn_main, c) == 0;
            if (ok) {
                c->used = true;
                px.n++;
            }
        }
        pthread_mutex_unlock(&px.mu);
        if (!ok) {
            close(cfd);
            if (sfd >= 0)
                close(sfd);
        }
    }
    return NULL;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    return ntohs(a.sin_port);
}

static int listen_any(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0)
        return -1;
    return fd;
}

static void proxy_start(uint16_t target_port)
{
    px.lfd = listen_any();
    CHECK(px.lfd >= 0);
    px.port = bound_port(px.lfd);
    px.target_port = target_port;
    CHECK(pthread_create(&px.th, NULL, proxy_main, NULL) == 0);
    px.started = true;
}

static void proxy_stop(void)
{
    if (!px.started)
        return;
    atomic_store(&px.stop, true);
    pthread_join(px.th, NULL);
    for (unsigned i = 0; i < px.n; i++) {
        shutdown(px.conns[i].cfd, SHUT_RDWR);
        shutdown(px.conns[i].sfd, SHUT_RDWR);
        pthread_join(px.conns[i].th, NULL);
        close(px.conns[i].cfd);
        close(px.conns[i].sfd);
    }
    px.n = 0;
    close(px.lfd);
    px.started = false;
}

/* ---- processes ------------------------------------------------------------------------------- */

static void cleanup_all(void)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i].pid > 0) {
            kill(procs[i].pid, SIGCONT);
            kill(procs[i].pid, SIGKILL);
            waitpid(procs[i].pid, NULL, 0);
            procs[i].pid = 0;
        }
    proxy_stop();
    testsrv_stop(srv);
    srv = NULL;
}

static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(end - env_clock_mono_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

static void spawn(int slot, const char *listen, const char *advertise)
{
    int in[2], out[2];
    CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execl(self_exe, self_exe, "--runtime", url, deployment, "67108864", listen, advertise,
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    struct proc *p = &procs[slot];
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    char line[256];
    uint64_t epoch = 0;
    CHECK(read_line(p->out_fd, line, sizeof(line), 30000) == 0);
    CHECK(sscanf(line, "READY %63s %" SCNu64, p->id, &epoch) == 2);
}

static const char *route_mode(void)
{
    const char *m = getenv("KVMESH_TEST_ROUTE_MODE");
    return m && *m ? m : "embedded_wrh";
}

static bool metadata_only(void)
{
    return strcmp(route_mode(), "metadata_only") == 0;
}

static void common_config(kvmesh_config_t *c)
{
    char t[32];
    snprintf(t, sizeof(t), "%u", DEADLINE_MS);
    kvmesh_config_set(c, "metadata_url", url);
    kvmesh_config_set(c, "deployment", deployment);
    kvmesh_config_set(c, "route_mode", route_mode());
    kvmesh_config_set(c, "request_timeout_ms", t);
    /* a stopped runtime stays a listed member for the whole test: the worst case for callers */
    kvmesh_config_set(c, "lease_ttl_ms", "60000");
    kvmesh_config_set(c, "transport", "tcp");
    /* Peer RPC over tcp only: C is reached through the proxy at its advertised tcp address, which
     * a same-host peer's unix socket (rpc_local = unix, the default) would bypass. */
    kvmesh_config_set(c, "rpc_local", "off");
}

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    snprintf(url, sizeof(url), "%s", argv[2]);
    deployment = argv[3];
    common_config(c);
    kvmesh_config_set(c, "memory_size", argv[4]);
    kvmesh_config_set(c, "listen", argv[5]);
    if (strcmp(argv[6], "-") != 0)
        kvmesh_config_set(c, "advertise", argv[6]);
    return tproc_child_run(c, false);
}

static kvmesh_t *open_client(void)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    common_config(c);
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    /* every call traced: the loop side of an abandoned call must not touch the caller's span */
    CHECK(kvmesh_config_set(c, "trace_sample_rate", "1") == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "client open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

static void wait_members(kvmesh_t *kv, size_t want)
{
    CHECK(tproc_wait_storage(kv, want, 15000) == 0);
}

/* ---- timed calls ----------------------------------------------------------------------------- */

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 31 + i * 7);
}

static int n_timed, n_failed;

/* Asserts the bound on one call that started at t0 and returned rc. */
static void bounded(const char *what, uint64_t t0, int rc)
{
    uint64_t el = env_clock_mono_ms() - t0;
    n_timed++;
    n_failed += rc != 0 && rc != KVMESH_ENOENT;
    fprintf(stderr, "  %-34s %5" PRIu64 " ms  %s%s%s\n", what, el, kvmesh_errname(rc),
            rc ? ": " : "", rc ? kvmesh_last_error() : "");
    if (el > DEADLINE_MS + SLACK_MS)
        fprintf(stderr, "  ^ took %" PRIu64 " ms > deadline %u + slack %u\n", el, DEADLINE_MS,
                SLACK_MS);
    CHECK(el <= DEADLINE_MS + SLACK_MS);
}

#define TIMED(what, call)                                                                          \
    do {                                                                                           \
        uint64_t t0_ = env_clock_mono_ms();                                                        \
        int rc_ = (call);                                                                          \
        bounded(what, t0_, rc_);                                                                   \
    } while (0)

static kvmesh_put_opts_t pin_to(const char *const *owner)
{
    return (kvmesh_put_opts_t){
        .replicas = 1, .preferred_owners = owner, .n_preferred = 1, .hard_pin = true};
}

/* Every public call on keys whose only replica is on C (slot 2); `tag` keeps the keys of one
 * phase apart (n_failed counts the calls that failed). */
static void calls_on_c(kvmesh_t *kv, const char *tag)
{
    const char *c_id[1] = {procs[2].id};
    kvmesh_put_opts_t pc = pin_to(c_id);
    uint8_t v[VLEN], out[VLEN];
    size_t got = 0;
    bool ex = false;
    uint64_t sz = 0;
    kvmesh_route_info_t ri;
    char k[64];
    fill(v, VLEN, 5);
    snprintf(k, sizeof(k), "c-%d", 0);
    TIMED("get_into (only replica on C)", kvmesh_get_into(kv, &sc, k, strlen(k), out, VLEN, &got));
    void *heap = NULL;
    TIMED("get (only replica on C)", kvmesh_get(kv, &sc, k, strlen(k), &heap, &got));
    kvmesh_free(heap);
    snprintf(k, sizeof(k), "c-%d", 1);
    TIMED("exists", kvmesh_exists(kv, &sc, k, strlen(k), &ex));
    TIMED("size", kvmesh_size(kv, &sc, k, strlen(k), &sz));
    TIMED("route_query", kvmesh_route_query(kv, &sc, k, strlen(k), &ri));
    snprintf(k, sizeof(k), "new-%s-0", tag);
    TIMED("put hard-pinned to C", kvmesh_put(kv, &sc, k, strlen(k), v, VLEN, &pc));
    snprintf(k, sizeof(k), "c-%d", 2);
    TIMED("put overwrite pinned to C", kvmesh_put(kv, &sc, k, strlen(k), v, VLEN, &pc));
    snprintf(k, sizeof(k), "new-%s-1", tag);
    kvmesh_put_opts_t two = {.replicas = 2};
    TIMED("put 2 replicas, unpinned", kvmesh_put(kv, &sc, k, strlen(k), v, VLEN, &two));
    snprintf(k, sizeof(k), "c-%d", 3);
    TIMED("remove", kvmesh_remove(kv, &sc, k, strlen(k)));

    /* batches: one deadline for the whole batch */
    char bk[4][64];
    uint8_t bbuf[4][VLEN];
    kvmesh_batch_item_t items[4];
    for (int i = 0; i < 4; i++) {
        snprintf(bk[i], sizeof(bk[i]), i < 2 ? "c-%d" : "a-%d", 4 + i % 2);
        items[i] = (kvmesh_batch_item_t){
            .key = bk[i], .key_len = strlen(bk[i]), .buf = bbuf[i], .len = VLEN};
    }
    TIMED("batch_get (2 on C, 2 on A)", kvmesh_batch_get(kv, &sc, items, 4));
    TIMED("batch_exists", kvmesh_batch_exists(kv, &sc, items, 4));
    for (int i = 0; i < 4; i++) {
        snprintf(bk[i], sizeof(bk[i]), "bnew-%s-%d", tag, i);
        items[i] =
            (kvmesh_batch_item_t){.key = bk[i], .key_len = strlen(bk[i]), .buf = v, .len = VLEN};
    }
    TIMED("batch_put pinned to C", kvmesh_batch_put(kv, &sc, items, 4, &pc));
    for (int i = 0; i < 4; i++) {
        snprintf(bk[i], sizeof(bk[i]), "c-%d", 6 + i % 2);
        items[i] = (kvmesh_batch_item_t){.key = bk[i], .key_len = strlen(bk[i])};
    }
    TIMED("batch_remove", kvmesh_batch_remove(kv, &sc, items, 2));
}

/* ---- no head-of-line blocking ---------------------------------------------------------------- */

struct blocked {
    kvmesh_t *kv;
    atomic_bool started, done;
    uint64_t t_start, t_end;
    int rc;
};

static void *blocked_get(void *arg)
{
    struct blocked *b = arg;
    uint8_t out[VLEN];
    size_t got = 0;
    b->t_start = env_clock_mono_ms();
    atomic_store(&b->started, true);
    b->rc = kvmesh_get_into(b->kv, &sc, "c-0", 3, out, VLEN, &got);
    b->t_end = env_clock_mono_ms();
    atomic_store(&b->done, true);
    return NULL;
}

/* While one thread's get waits on the stopped C, this thread reads keys held by A: at least one
 * of those calls must start and finish strictly inside the blocked call. */
static void no_head_of_line(kvmesh_t *kv)
{
    struct blocked b = {.kv = kv};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, blocked_get, &b) == 0);
    while (!atomic_load(&b.started))
        usleep(1000);
    usleep(100000); /* the blocked get is past its lookup and waiting on C */
    int inside = 0, calls = 0, errors = 0;
    uint8_t out[VLEN], want[VLEN];
    while (!atomic_load(&b.done) && calls < 100000) {
        char k[32];
        snprintf(k, sizeof(k), "a-%d", calls % N_KEYS);
        size_t got = 0;
        uint64_t t0 = env_clock_mono_ms();
        int rc = kvmesh_get_into(kv, &sc, k, strlen(k), out, VLEN, &got);
        fill(want, VLEN, (uint64_t)(calls % N_KEYS) + 100);
        calls++;
        if (rc || got != VLEN || memcmp(out, want, VLEN) != 0) {
            errors++;
            continue;
        }
        if (!atomic_load(&b.done))
            inside += t0 > b.t_start;
    }
    pthread_join(th, NULL);
    fprintf(stderr,
            "  blocked get: %s after %" PRIu64 " ms; meanwhile %d reads of A's keys completed "
            "(%d errors)\n",
            kvmesh_errname(b.rc), b.t_end - b.t_start, inside, errors);
    CHECK(b.rc != 0);
    CHECK(b.t_end - b.t_start <= DEADLINE_MS + SLACK_MS);
    if (metadata_only()) { /* (embedded routes: C is also a route authority of A's keys) */
        CHECK(errors == 0);
        CHECK(inside > 0);
    }
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    if (argc >= 7 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    if (argc < 2 || strcmp(argv[1], "redis") != 0) {
        fprintf(stderr, "usage: %s redis\n", argv[0]);
        return 2;
    }
    static char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    CHECK(el > 0);
    exe[el] = 0;
    self_exe = exe;
    int rc = testsrv_start_redis(&srv, NULL);
    if (rc)
        fprintf(stderr, "server: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));

    /* C's RPC port: a free port for C, the proxy's port advertised to everyone */
    int probe = listen_any();
    CHECK(probe >= 0);
    uint16_t c_port = bound_port(probe);
    close(probe);
    proxy_start(c_port);
    char c_listen[64], c_adv[64];
    snprintf(c_listen, sizeof(c_listen), "127.0.0.1:%u", c_port);
    snprintf(c_adv, sizeof(c_adv), "127.0.0.1:%u", px.port);
    spawn(0, "127.0.0.1:0", "-");
    spawn(1, "127.0.0.1:0", "-");
    spawn(2, c_listen, c_adv);
    kvmesh_t *kv = open_client();
    wait_members(kv, 3);

    /* keys with their only replica on C (c-*) and on A (a-*) */
    const char *a_id[1] = {procs[0].id}, *c_id[1] = {procs[2].id};
    kvmesh_put_opts_t pa = pin_to(a_id), pc = pin_to(c_id);
    uint8_t v[VLEN], out[VLEN];
    for (int i = 0; i < N_KEYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "c-%d", i);
        fill(v, VLEN, (uint64_t)i);
        CHECK(kvmesh_put(kv, &sc, k, strlen(k), v, VLEN, &pc) == 0);
        snprintf(k, sizeof(k), "a-%d", i);
        fill(v, VLEN, (uint64_t)i + 100);
        CHECK(kvmesh_put(kv, &sc, k, strlen(k), v, VLEN, &pa) == 0);
    }

    fprintf(stderr, "phase 1: runtime C stopped (SIGSTOP), deadline %u ms\n", DEADLINE_MS);
    CHECK(kill(procs[2].pid, SIGSTOP) == 0);
    calls_on_c(kv, "stop");
    CHECK(n_failed > 0); /* C's only replicas cannot be read while it is stopped */
    no_head_of_line(kv);
    calls_on_c(kv, "stop2"); /* again, with C now quarantined by the client */

    fprintf(stderr, "phase 2: runtime C resumed (SIGCONT)\n");
    CHECK(kill(procs[2].pid, SIGCONT) == 0);
    bool back = false;
    uint64_t end = env_clock_mono_ms() + 20000;
    while (!back && env_clock_mono_ms() < end) {
        size_t got = 0;
        fill(v, VLEN, 0);
        uint64_t t0 = env_clock_mono_ms();
        rc = kvmesh_get_into(kv, &sc, "c-0", 3, out, VLEN, &got);
        bounded("get c-0 after SIGCONT", t0, rc);
        back = rc == 0 && got == VLEN && memcmp(out, v, VLEN) == 0;
        if (!back)
            usleep(200000);
    }
    CHECK(back);

    fprintf(stderr, "phase 3: runtime C trickles its RPC replies (1 byte / %d ms)\n", TRICKLE_MS);
    /* a fresh client: the first one quarantined C while it was stopped and would not ask it */
    kvmesh_t *kv3 = open_client();
    wait_members(kv3, 3);
    atomic_store(&px.trickle, true);
    int failed_before = n_failed;
    calls_on_c(kv3, "trickle");
    CHECK(n_failed > failed_before); /* a reservation on C cannot be answered in time */
    atomic_store(&px.trickle, false);
    kvmesh_close(kv3);

    fprintf(stderr, "%d calls, all within %u + %u ms\n", n_timed, DEADLINE_MS, SLACK_MS);
    kvmesh_close(kv);
    for (int i = 0; i < MAX_PROCS; i++) {
        close(procs[i].in_fd);
        waitpid(procs[i].pid, NULL, 0);
        close(procs[i].out_fd);
        procs[i].pid = 0;
    }
    proxy_stop();
    testsrv_stop(srv);
    fprintf(stderr, "store_deadline: passed\n");
    return 0;
}
