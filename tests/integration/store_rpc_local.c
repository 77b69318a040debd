/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_rpc_local — peer RPC between runtimes of one host over a unix socket (rpc_local = unix;
 * docs/performance.md "Peer RPC over a unix socket, s11").
 *
 *   itest_store_rpc_local
 *
 * Runtimes in this process (one host, one network namespace) on embedded in-memory metadata,
 * transport tcp: a storage runtime S and a client-only runtime C, opened afresh per case. Which
 * socket C's calls took is read from C's kvmesh_transport_operations_total{transport="tcp"|"unix",
 * operation="rpc_send"} over 16 puts and 16 gets of 4 KiB values (each read back byte for byte),
 * after a warm-up that is not counted. Counts only, no timing; every wait is bounded.
 *   - both on: every call over unix, none over tcp; S's socket file exists while S is open and
 *     is gone after it closed;
 *   - both off: every call over tcp, no socket;
 *   - both on, S advertising another network namespace (test hook: a "host" of the chaos
 *     harness): tcp;
 *   - C on, S off (S's record has no rpc_local fields, as an older runtime's): tcp;
 *   - both on, S's socket file removed before C's first call (its connect fails: ENOENT), or
 *     replaced by a socket that nobody listens on (ECONNREFUSED): no warm-up, C's very first put
 *     and get each succeed on their first try (the calls queued on the unix peer when its connect
 *     failed went over tcp), C gives the socket up once and for all, and says so in exactly one
 *     line on stderr naming the socket's path, the error and tcp;
 *   - stale sockets (what a runtime killed with SIGKILL leaves: a socket file nobody listens on):
 *     a runtime opening with rpc_local = unix removes one of another id that is 2 minutes old,
 *     and leaves a young one, an old one that is listening (a live runtime's), an old regular file
 *     of that name pattern, and an old name of another pattern; a runtime opened with the id of a
 *     stale file replaces it with its own listening socket.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "obs/metrics.h"
#include "store/store.h"
#include "store/test_hook.h"
#include "tcheck.h"
#include "trt.h"

#define CHECK(c) TCHECK_FATAL(c)

#define OPS  16
#define VLEN 4096

/* What kv sent over one kind of socket: calls (rpc_call) and bytes (calls, replies and
 * notifications, the route messages among them). */
struct sent {
    int64_t calls, bytes;
};

static struct sent sent_over(kvmesh_t *kv, unsigned transport)
{
    struct sent s = {0, 0};
    const struct obs_registry *m = kvmesh_runtime_of(kv)->metrics;
    CHECK(obs_metrics_read(m, "transport_operations_total", transport, OBS_XOP_RPC_SEND,
                           &s.calls) == 0);
    CHECK(obs_metrics_read(m, "transport_bytes_total", transport, OBS_XOP_RPC_SEND, &s.bytes) == 0);
    return s;
}

static kvmesh_t *open_rt(const char *url, bool storage, const char *rpc_local)
{
    const char *const base[][2] = {{"transport", "tcp"},
                                   {"memory_size", storage ? "16777216" : "0"},
                                   {"segment_size", "16777216"},
                                   {"max_object_size", "1048576"},
                                   {"replicas", "1"},
                                   {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url}, {"rpc_local", rpc_local}, {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    CHECK(kv);
    return kv;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

struct failed_arg {
    size_t n;
};

static void read_failed(kvm_rt_t *rt, void *arg)
{
    ((struct failed_arg *)arg)->n = rt->n_rpc_local_failed;
}

/* What becomes of S's socket file before C opens. */
enum sock_fault {
    SOCK_KEEP,
    SOCK_GONE, /* removed: connect fails with ENOENT */
    SOCK_DEAF, /* a socket bound at the path, never listening: ECONNREFUSED */
};

/* Where this process's stderr goes while C runs with a faulty socket (the lines counted after). */
struct err_capture {
    char path[64];
    int saved;
};

static void capture_start(struct err_capture *e)
{
    snprintf(e->path, sizeof(e->path), "/tmp/rpclocal-err-%ld.txt", (long)getpid());
    printf("stderr goes to %s until C closes (a failed check there is in it)\n", e->path);
    fflush(stdout);
    fflush(stderr);
    e->saved = dup(2);
    int fd = open(e->path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(e->saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
    close(fd);
}

/* Restores stderr; the number of captured lines containing every one of want[] (NULL-ended);
 * *rpc_local: of those naming rpc_local at all. */
static int capture_end(struct err_capture *e, const char *const *want, int *rpc_local)
{
    *rpc_local = 0;
    fflush(stderr);
    CHECK(dup2(e->saved, 2) == 2);
    close(e->saved);
    FILE *f = fopen(e->path, "r");
    CHECK(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        fputs(line, stderr); /* (kept in the test's log) */
        bool all = true;
        for (size_t i = 0; want[i]; i++)
            all = all && strstr(line, want[i]) != NULL;
        n += all;
        *rpc_local += strstr(line, "kvmesh: rpc_local:") != NULL;
    }
    fclose(f);
    unlink(e->path);
    return n;
}

/* One case: S and C opened with rpc_local s_on / c_on; want_unix: C's calls go over unix. */
static void run_case(const char *name, const char *s_on, const char *c_on, bool other_netns,
                     enum sock_fault fault, bool want_unix)
{
    bool remove_socket = fault != SOCK_KEEP;
    int deaf = -1;
    struct err_capture cap;
    char url[96];
    snprintf(url, sizeof(url), "memory://rpclocal-%ld-%s", (long)getpid(), name);
    if (other_netns)
        kvm_test_arm(&kvm_test_rpc_local_netns, 1); /* taken by S's open */
    kvmesh_t *S = open_rt(url, true, s_on);
    CHECK(atomic_load(&kvm_test_rpc_local_netns) == 0);
    kvm_rt_t *s = kvmesh_runtime_of(S);
    bool s_unix = strcmp(s_on, "unix") == 0;
    CHECK(s_unix == (s->rpc_local_addr[0] != 0));
    char path[STORE_ADDR_MAX] = "";
    if (s_unix) {
        CHECK(strncmp(s->rpc_local_addr, "unix:", 5) == 0);
        snprintf(path, sizeof(path), "%s", s->rpc_local_addr + 5);
        CHECK(exists(path));
        if (remove_socket)
            CHECK(unlink(path) == 0);
        if (fault == SOCK_DEAF) {
            struct sockaddr_un sa = {.sun_family = AF_UNIX};
            snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
            deaf = socket(AF_UNIX, SOCK_STREAM, 0);
            CHECK(deaf >= 0 && bind(deaf, (struct sockaddr *)&sa, sizeof(sa)) == 0);
        }
    }
    if (remove_socket)
        capture_start(&cap);
    kvmesh_t *C = open_rt(url, false, c_on);
    kvm_rt_t *c = kvmesh_runtime_of(C);
    CHECK((strcmp(c_on, "unix") == 0) == (c->rpc_local_addr[0] != 0));
    if (s_unix && strcmp(c_on, "unix") == 0)
        CHECK((strcmp(s->host_id, c->host_id) == 0) == !other_netns);

    const kvmesh_scope_t sc = {"rpclocal", NULL};
    if (!remove_socket) /* (a faulty socket: the first ops must succeed without any warm-up) */
        CHECK(trt_warm(&C, 1, &sc, 32, 120000) == 0);

    struct sent u0 = sent_over(C, OBS_TRANSPORT_UNIX), t0 = sent_over(C, OBS_TRANSPORT_TCP);
    static uint8_t v[VLEN], out[VLEN];
    for (int i = 0; i < OPS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k-%d", i);
        for (size_t j = 0; j < VLEN; j++)
            v[j] = (uint8_t)(i * 31 + j * 7);
        CHECK(kvmesh_put(C, &sc, key, strlen(key), v, VLEN, NULL) == 0);
        size_t got = 0;
        memset(out, 0, sizeof(out));
        CHECK(kvmesh_get_into(C, &sc, key, strlen(key), out, sizeof(out), &got) == 0);
        CHECK(got == VLEN && memcmp(out, v, VLEN) == 0);
    }
    struct sent u1 = sent_over(C, OBS_TRANSPORT_UNIX), t1 = sent_over(C, OBS_TRANSPORT_TCP);
    struct sent du = {u1.calls - u0.calls, u1.bytes - u0.bytes};
    struct sent dt = {t1.calls - t0.calls, t1.bytes - t0.bytes};
    printf("%s: C sent over unix %lld calls %lld bytes, over tcp %lld calls %lld bytes\n", name,
           (long long)du.calls, (long long)du.bytes, (long long)dt.calls, (long long)dt.bytes);
    /* every put is at least one call; the 32 ops' messages carry at least their values */
    struct sent *on = want_unix ? &du : &dt, *off = want_unix ? &dt : &du;
    CHECK(on->calls >= OPS && on->bytes >= (int64_t)OPS * VLEN);
    /* (no warm-up with a faulty socket: S's own first calls to C, over C's good unix socket,
     * fall in the window; C's replies to them are bytes C sent over unix, but no call of C's) */
    CHECK(off->calls == 0 && (off->bytes == 0 || (remove_socket && off == &du)));
    struct failed_arg fa = {0};
    CHECK(trt_on_loop(C, read_failed, &fa, 10000) == 0);
    CHECK(fa.n == (remove_socket ? 1u : 0u));

    kvmesh_close(C);
    if (remove_socket) {
        char unix_addr[STORE_ADDR_MAX + 8];
        snprintf(unix_addr, sizeof(unix_addr), "unix:%s", path);
        const char *why = fault == SOCK_GONE ? "no such file or directory" : "connection refused";
        const char *const want[] = {"kvmesh: rpc_local:", unix_addr, why, "over tcp", NULL};
        int any = 0, lines = capture_end(&cap, want, &any);
        CHECK(lines == 1 && any == 1); /* once, saying what failed and that tcp is used */
    }
    kvmesh_close(S);
    if (deaf >= 0)
        close(deaf); /* (its file went with S's close, which removes its socket's path) */
    if (path[0])
        CHECK(!exists(path)); /* removed on close */
}

/* A unix socket file at path, its mtime age_s ago; listening or not (then the descriptor is
 * closed at once: nobody will ever accept on it). Returns the listening descriptor or -1. */
static int make_sock(const char *path, bool listening, int age_s)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    (void)unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    if (listening)
        CHECK(listen(fd, 8) == 0);
    struct timeval tv[2];
    CHECK(gettimeofday(&tv[0], NULL) == 0);
    tv[0].tv_sec -= age_s;
    tv[1] = tv[0];
    CHECK(utimes(path, tv) == 0);
    if (!listening) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool connectable(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    bool ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static void sweep_case(void)
{
    char url[96], stale[96], young[96], live[96], plain[96], other[96], own[96], own_id[40];
    long pid = (long)getpid();
    snprintf(url, sizeof(url), "memory://rpclocal-%ld-sweep", pid);
    /* ids of this process's own (the pid in them): no other run's files are touched here */
    snprintf(stale, sizeof(stale), "/tmp/kvmesh-rpc-%08lx00000000000000000000000a.sock", pid);
    snprintf(young, sizeof(young), "/tmp/kvmesh-rpc-%08lx00000000000000000000000b.sock", pid);
    snprintf(live, sizeof(live), "/tmp/kvmesh-rpc-%08lx00000000000000000000000c.sock", pid);
    snprintf(plain, sizeof(plain), "/tmp/kvmesh-rpc-%08lx00000000000000000000000d.sock", pid);
    snprintf(other, sizeof(other), "/tmp/kvmesh-rpc-%08lx-e.sock", pid);
    snprintf(own_id, sizeof(own_id), "%08lx00000000000000000000000f", pid);
    snprintf(own, sizeof(own), "/tmp/kvmesh-rpc-%s.sock", own_id);
    make_sock(stale, false, 120);
    make_sock(young, false, 0);
    int lfd = make_sock(live, true, 120);
    make_sock(other, false, 120);
    make_sock(own, false, 0); /* young: only its own runtime may take it */
    FILE *f = fopen(plain, "w");
    CHECK(f && fclose(f) == 0);
    struct timeval tv[2];
    CHECK(gettimeofday(&tv[0], NULL) == 0);
    tv[0].tv_sec -= 120;
    tv[1] = tv[0];
    CHECK(utimes(plain, tv) == 0);
    CHECK(!connectable(stale) && !connectable(own) && connectable(live));

    kvmesh_t *A = open_rt(url, false, "unix");
    CHECK(kvmesh_runtime_of(A)->rpc_local_swept >= 1); /* (a crashed run's file may count too) */
    CHECK(!exists(stale));
    CHECK(exists(young) && exists(live) && exists(plain) && exists(other) && exists(own));

    /* the runtime whose id a stale file bears: listens there itself */
    const char *const base[][2] = {{"transport", "tcp"},   {"memory_size", "0"},
                                   {"metadata_url", url},  {"rpc_local", "unix"},
                                   {"runtime_id", own_id}, {NULL, NULL}};
    kvmesh_t *B = trt_open(base, NULL);
    CHECK(B);
    char want[STORE_ADDR_MAX];
    snprintf(want, sizeof(want), "unix:%s", own);
    CHECK(strcmp(kvmesh_runtime_of(B)->rpc_local_addr, want) == 0);
    CHECK(connectable(own));
    kvmesh_close(B);
    CHECK(!exists(own));
    kvmesh_close(A);

    close(lfd);
    CHECK(unlink(young) == 0 && unlink(live) == 0 && unlink(plain) == 0 && unlink(other) == 0);
    printf("sweep: a stale socket removed at open; young, live, non-socket and other names kept\n");
}

int main(void)
{
    run_case("on", "unix", "unix", false, SOCK_KEEP, true);
    run_case("off", "off", "off", false, SOCK_KEEP, false);
    run_case("netns", "unix", "unix", true, SOCK_KEEP, false);
    run_case("old", "off", "unix", false, SOCK_KEEP, false);
    run_case("gone", "unix", "unix", false, SOCK_GONE, false);
    run_case("deaf", "unix", "unix", false, SOCK_DEAF, false);
    sweep_case();
    printf("peer RPC over unix sockets between same-host runtimes only\n");
    return 0;
}
