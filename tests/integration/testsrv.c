/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testsrv.c (integration) — proves the real-server launchers: redis and etcd start on free
 * loopback ports and answer, SIGKILL makes the port refuse connections, restart brings the
 * server back on the same port with the same data dir (persistence when configured), an ACL
 * user from extra_conf works, stop removes the temporary dir, and a missing binary gives a clear
 * error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testsrv.h"
#include "kvmesh.h"

/* Sends req to 127.0.0.1:port and returns the first reply bytes in buf ("" on failure). */
static void roundtrip(uint16_t port, const char *req, char *buf, size_t cap)
{
    buf[0] = '\0';
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
        size_t have = 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (have < cap - 1 && poll(&p, 1, 2000) > 0) {
            ssize_t n = recv(fd, buf + have, cap - 1 - have, 0);
            if (n <= 0)
                break;
            have += (size_t)n;
            buf[have] = '\0';
            if (strstr(buf, "\r\n") && strncmp(req, "GET", 3) != 0)
                break;
        }
    }
    close(fd);
}

static bool dir_exists(const char *d)
{
    struct stat st;
    return stat(d, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_redis_lifecycle(void **state)
{
    (void)state;
    testsrv_t *s = NULL;
    int rc = testsrv_start_redis(&s, "appendonly yes\nappendfsync always\n");
    if (rc)
        fail_msg("start redis: %s", kvmesh_last_error());
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u", testsrv_port(s));
    assert_string_equal(testsrv_url(s), url);
    assert_true(testsrv_pid(s) > 0);
    char buf[512];
    roundtrip(testsrv_port(s), "SET k v1\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "+OK\r\n");

    pid_t old = testsrv_pid(s);
    assert_int_equal(testsrv_kill(s, SIGKILL), 0);
    assert_int_equal(testsrv_pid(s), 0);
    assert_true(kill(old, 0) != 0); /* reaped, gone */
    roundtrip(testsrv_port(s), "PING\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "");
    assert_int_equal(testsrv_kill(s, SIGKILL), KVMESH_EINVAL);

    uint16_t port = testsrv_port(s);
    rc = testsrv_restart(s);
    if (rc)
        fail_msg("restart redis: %s", kvmesh_last_error());
    assert_int_equal(testsrv_port(s), port);
    roundtrip(port, "GET k\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "$2\r\nv1\r\n"); /* AOF survived the SIGKILL */

    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", testsrv_dir(s));
    assert_true(dir_exists(dir));
    testsrv_stop(s);
    assert_false(dir_exists(dir));
}

static void test_redis_acl(void **state)
{
    (void)state;
    testsrv_t *s = NULL;
    int rc = testsrv_start_redis(&s, "user alice on >s3cret ~* &* +@all\nuser default off\n");
    if (rc)
        fail_msg("start redis: %s", kvmesh_last_error());
    char buf[512];
    roundtrip(testsrv_port(s), "PING\r\n", buf, sizeof(buf));
    assert_memory_equal(buf, "-NOAUTH", 7);
    roundtrip(testsrv_port(s), "AUTH alice s3cret\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "+OK\r\n");
    roundtrip(testsrv_port(s), "AUTH alice wrong\r\n", buf, sizeof(buf));
    assert_true(buf[0] == '-');
    testsrv_stop(s);
}

static void test_no_persistence_by_default(void **state)
{
    (void)state;
    testsrv_t *s = NULL;
    if (testsrv_start_redis(&s, NULL))
        fail_msg("start redis: %s", kvmesh_last_error());
    char buf[512];
    roundtrip(testsrv_port(s), "SET k v\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "+OK\r\n");
    if (testsrv_restart(s)) /* SIGTERM: a "save" would happen here if persistence were on */
        fail_msg("restart: %s", kvmesh_last_error());
    roundtrip(testsrv_port(s), "GET k\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "$-1\r\n");
    testsrv_stop(s);
}

static void test_etcd_lifecycle(void **state)
{
    (void)state;
    testsrv_t *s = NULL;
    int rc = testsrv_start_etcd(&s);
    if (rc)
        fail_msg("start etcd: %s", kvmesh_last_error());
    char url[64];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u", testsrv_port(s));
    assert_string_equal(testsrv_url(s), url);
    char buf[2048];
    /* put k=v through the v3 JSON gateway (base64 "aw==" = "k", "dg==" = "v") */
    const char *body = "{\"key\":\"aw==\",\"value\":\"dg==\"}";
    char req[512];
    snprintf(req, sizeof(req),
             "POST /v3/kv/put HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    roundtrip(testsrv_port(s), req, buf, sizeof(buf));
    assert_non_null(strstr(buf, " 200 "));
    assert_int_equal(testsrv_kill(s, SIGKILL), 0);
    roundtrip(testsrv_port(s), "GET /health HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_string_equal(buf, "");
    if (testsrv_restart(s))
        fail_msg("restart etcd: %s", kvmesh_last_error());
    const char *rb = "{\"key\":\"aw==\"}";
    snprintf(req, sizeof(req),
             "POST /v3/kv/range HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(rb), rb);
    roundtrip(testsrv_port(s), req, buf, sizeof(buf));
    assert_non_null(strstr(buf, "\"value\":\"dg==\"")); /* same data dir after restart */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", testsrv_dir(s));
    testsrv_stop(s);
    assert_false(dir_exists(dir));
}

/* true when pid is gone or a zombie (reparented children are reaped by init eventually) */
static bool pid_dead(pid_t pid)
{
    if (kill(pid, 0) != 0)
        return true;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* A test process that dies without stopping its server takes the server with it. */
static void test_server_dies_with_parent(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        testsrv_t *s = NULL;
        struct {
            pid_t pid;
            char dir[4000];
        } msg = {0};
        if (testsrv_start_redis(&s, NULL) == 0) {
            msg.pid = testsrv_pid(s);
            snprintf(msg.dir, sizeof(msg.dir), "%s", testsrv_dir(s));
        }
        if (write(fds[1], &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
            _exit(2);
        _exit(0); /* no atexit, no testsrv_stop: only PDEATHSIG can end the server */
    }
    close(fds[1]);
    struct {
        pid_t pid;
        char dir[4000];
    } msg;
    assert_int_equal(read(fds[0], &msg, sizeof(msg)), (ssize_t)sizeof(msg));
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(msg.pid > 0);
    bool dead = false;
    for (int i = 0; i < 500 && !dead; i++) {
        dead = pid_dead(msg.pid);
        if (!dead)
            usleep(10000);
    }
    assert_true(dead);
    /* the dead owner's temporary dir is swept by the next run; live owners' dirs are kept */
    assert_true(dir_exists(msg.dir));
    testsrv_t *live = NULL;
    if (testsrv_start_redis(&live, NULL))
        fail_msg("start redis: %s", kvmesh_last_error());
    testsrv_sweep_stale();
    assert_false(dir_exists(msg.dir));
    assert_true(dir_exists(testsrv_dir(live)));
    assert_int_equal(testsrv_kill(live, SIGCONT), 0); /* still running */
    testsrv_stop(live);
}

static void test_missing_binary(void **state)
{
    (void)state;
    testsrv_t *s = (testsrv_t *)1;
    setenv("KVMESH_REDIS_SERVER", "/nonexistent/redis-server", 1);
    assert_int_equal(testsrv_start_redis(&s, NULL), KVMESH_ENOENT);
    assert_null(s);
    assert_non_null(strstr(kvmesh_last_error(), "/nonexistent/redis-server"));
    unsetenv("KVMESH_REDIS_SERVER");
    char path[256];
    snprintf(path, sizeof(path), "%s", getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", "/nonexistent", 1);
    assert_int_equal(testsrv_start_etcd(&s), KVMESH_ENOENT);
    assert_non_null(strstr(kvmesh_last_error(), "etcd not found in PATH"));
    setenv("PATH", path, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_lifecycle),           cmocka_unit_test(test_redis_acl),
        cmocka_unit_test(test_no_persistence_by_default), cmocka_unit_test(test_etcd_lifecycle),
        cmocka_unit_test(test_server_dies_with_parent),   cmocka_unit_test(test_missing_binary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
