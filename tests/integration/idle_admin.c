// SPDX-License-Identifier: Apache-2.0
/*
 * idle_admin — slow and idle clients of the admin HTTP port (src/obs/http.c):
 *   - a slow-loris client trickling header bytes (one every 100 ms, so libmicrohttpd's
 *     inactivity timeout never fires) is cut at the request deadline;
 *   - connections beyond the connection limit are refused at once, and the held ones are cut
 *     at the deadline, after which the server answers again;
 *   - a keep-alive client whose requests each complete is not cut (the deadline is per request);
 *   - a slow reader (pipelined GETs as fast as the server takes them, never reading a response)
 *     is cut at the request deadline: its response cannot finish, so its request period does not
 *     end; another client is served meanwhile and after.
 * Real loopback sockets; every loop is bounded in count and time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "env/clock.h"
#include "obs/http.h"

#define DEADLINE_MS 1000

static struct obs_http *start(void)
{
    struct obs_http_config hc = {.request_deadline_ms = DEADLINE_MS};
    struct obs_http *h;
    assert_int_equal(obs_http_start(&hc, &h), 0);
    return h;
}

static int connect_to(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* true once the server closed fd (EOF or reset); waits at most wait_ms */
static bool closed_by_server(int fd, int wait_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0)
        return false;
    char b[512];
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN);
}

/* One GET /healthz on fd; returns the status code (0 on failure). */
static int get_healthz(int fd, bool keep_alive)
{
    char req[128];
    snprintf(req, sizeof(req), "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: %s\r\n\r\n",
             keep_alive ? "keep-alive" : "close");
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        return 0;
    char b[4096];
    size_t got = 0;
    uint64_t end = env_clock_mono_ms() + 10000;
    while (got < sizeof(b) - 1 && env_clock_mono_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = recv(fd, b + got, sizeof(b) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        b[got] = 0;
        char *body = strstr(b, "\r\n\r\n");
        const char *cl = strstr(b, "Content-Length: ");
        if (body && cl && got >= (size_t)(body + 4 - b) + (size_t)atoi(cl + 16))
            break;
    }
    b[got] = 0;
    int code = 0;
    return sscanf(b, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

/* A fresh connection gets a GET /healthz answered. */
static void assert_served(struct obs_http *h)
{
    int ok = connect_to(obs_http_port(h));
    assert_int_equal(get_healthz(ok, false), 200);
    close(ok);
}

static void test_slow_loris_cut(void **state)
{
    (void)state;
    struct obs_http *h = start();
    int fd = connect_to(obs_http_port(h));
    const char *head = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
    assert_int_equal(send(fd, head, strlen(head), 0), (ssize_t)strlen(head));
    bool cut = false;
    for (int i = 0; i < 80 && !cut; i++) { /* 8 s of trickling at most */
        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1)
            cut = true;
        else
            cut = closed_by_server(fd, 100);
    }
    assert_true(cut);
    close(fd);
    assert_served(h);
    obs_http_stop(h);
}

static void test_connection_limit_and_recovery(void **state)
{
    (void)state;
    struct obs_http *h = start();
    enum { N = OBS_HTTP_CONN_LIMIT + 8 };
    int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = connect_to(obs_http_port(h));
    int refused = 0;
    for (int i = 0; i < N; i++)
        refused += closed_by_server(fds[i], 50);
    assert_true(refused >= N - OBS_HTTP_CONN_LIMIT); /* the limit holds */
    assert_true(refused < N);                        /* (not before the deadline) */
    int open_left = 0;
    for (int i = 0; i < N; i++)
        open_left += !closed_by_server(fds[i], 5000); /* each cut at the deadline */
    assert_int_equal(open_left, 0);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    assert_served(h);
    obs_http_stop(h);
}

static void test_keep_alive_not_cut(void **state)
{
    (void)state;
    struct obs_http *h = start();
    int fd = connect_to(obs_http_port(h));
    for (int i = 0; i < 4; i++) { /* 4 x 600 ms: longer than the deadline in all */
        assert_int_equal(get_healthz(fd, true), 200);
        usleep(600 * 1000);
    }
    close(fd);
    obs_http_stop(h);
}

static void test_slow_reader_cut(void **state)
{
    (void)state;
    struct obs_http *h = start();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int rcvbuf = 4096; /* set before connect: a small window */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(obs_http_port(h))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n";
    size_t len = strlen(req), sent = 0;
    /* pipeline until the server stops taking requests (its responses fill every buffer) */
    for (int i = 0; i < 100000; i++) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, 500) <= 0)
            break;
        if (send(fd, req, len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)len)
            break;
        sent++;
    }
    assert_true(sent > 1);
    assert_served(h); /* meanwhile */
    /* cut at the deadline (the reset is seen without reading a byte) */
    bool cut = false;
    for (int i = 0; i < 80 && !cut; i++) { /* 8 s at most */
        struct pollfd p = {fd, 0, 0};
        cut = poll(&p, 1, 100) > 0 && (p.revents & (POLLERR | POLLHUP));
    }
    assert_true(cut);
    close(fd);
    assert_served(h);
    obs_http_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_loris_cut),
        cmocka_unit_test(test_connection_limit_and_recovery),
        cmocka_unit_test(test_keep_alive_not_cut),
        cmocka_unit_test(test_slow_reader_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
