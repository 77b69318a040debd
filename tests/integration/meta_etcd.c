/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_etcd.c — etcd-specific integration tests of the etcd metadata backend against real etcd
 * processes on free loopback ports (the backend-neutral semantics are covered by
 * meta_conformance):
 *   - basic round trip (put/get/range/txn/lease) on the gateway, and a burst of concurrent
 *     calls larger than the in-flight bound (queueing);
 *   - failover: the first listed member is a port with nothing listening;
 *   - unreachable members: the error names every endpoint tried;
 *   - a member killed (SIGKILL) mid-run and restarted: every txn that reported success is
 *     durable, every txn that reported ECONN ("never sent") was not applied;
 *   - a stopped (SIGSTOP) member: calls time out at their deadline;
 *   - a 3-member cluster on loopback: the preferred member is killed during a stream of writes
 *     and reads; the client fails over to the survivors and every acknowledged write is there.
 *
 * The test drives a meta_t on its own libuv loop on the main thread (calls "block" by spinning
 * the loop until the callback ran).
 *
 * argv[1] selects one test ("basic", "failover", "unreachable", "killrestart", "stopped",
 * "cluster"); no argument runs them all.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include <jansson.h>
#include <uv.h>

#include "env/clock.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "testsrv.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK_RC(res, want)                                                                        \
    do {                                                                                           \
        if ((res)->rc != (want)) {                                                                 \
            fprintf(stderr, "%s:%d: rc %s (%s), want %s\n", __FILE__, __LINE__,                    \
                    kvmesh_errname((res)->rc), (res)->errmsg, kvmesh_errname(want));               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- a meta_t on a loop driven by this thread --------------------------------------------- */

typedef struct tloop {
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
} tloop_t;

typedef struct waiter {
    bool done;
    meta_result_t *res;
} waiter_t;

static void wait_cb(void *arg, const meta_result_t *res)
{
    waiter_t *w = arg;
    w->res = meta_result_dup(res);
    CHECK(w->res != NULL);
    w->done = true;
}

typedef struct close_waiter {
    tloop_t *t;
    bool done;
    int rc;
} close_waiter_t;

/* The first successful answer closes the handle from inside its callback. */
static void close_cb(void *arg, const meta_result_t *res)
{
    close_waiter_t *w = arg;
    w->done = true;
    w->rc = res->rc;
    if (res->rc == 0 && w->t->m) {
        meta_t *m = w->t->m;
        w->t->m = NULL;
        meta_close(m);
    }
}

static meta_result_t *fake_result(int rc)
{
    static const meta_result_t r0;
    meta_result_t r = r0;
    r.rc = rc;
    r.errmsg = kvmesh_last_error();
    return meta_result_dup(&r);
}

static meta_result_t *wait_for(tloop_t *t, waiter_t *w, int rc)
{
    if (rc != 0)
        return fake_result(rc);
    while (!w->done)
        uv_run(&t->loop, UV_RUN_ONCE);
    return w->res;
}

static void tl_open(tloop_t *t, const char *url)
{
    memset(t, 0, sizeof(*t));
    CHECK(uv_loop_init(&t->loop) == 0);
    CHECK(env_uv_new(&t->env, &t->loop, 0) == 0);
    int rc = meta_open(&t->m, t->env, url, NULL);
    if (rc != 0) {
        fprintf(stderr, "meta_open(%s): %s: %s\n", url, kvmesh_errname(rc), kvmesh_last_error());
        exit(1);
    }
    CHECK(strcmp(meta_backend_name(t->m), "etcd") == 0);
}

static void tl_close(tloop_t *t)
{
    meta_close(t->m);
    env_uv_free(t->env);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&t->loop) == 0);
}

static meta_result_t *do_get(tloop_t *t, const char *key, uint32_t timeout_ms)
{
    waiter_t w = {0};
    return wait_for(t, &w, meta_get(t->m, key, timeout_ms, wait_cb, &w));
}

static meta_result_t *do_put(tloop_t *t, const char *key, const char *val, meta_lease_t lease,
                             uint32_t timeout_ms)
{
    meta_op_t op = {.type = META_OP_PUT,
                    .key = key,
                    .value = (const uint8_t *)val,
                    .value_len = strlen(val),
                    .lease = lease};
    waiter_t w = {0};
    return wait_for(t, &w, meta_txn(t->m, NULL, 0, &op, 1, NULL, 0, timeout_ms, wait_cb, &w));
}

static meta_result_t *do_range(tloop_t *t, const char *prefix, const char *after, uint32_t limit)
{
    waiter_t w = {0};
    return wait_for(t, &w, meta_range(t->m, prefix, after, limit, 0, wait_cb, &w));
}

/* Waits (bounded) until every thread of pid is in the stopped state: SIGSTOP takes effect
 * asynchronously, and a request must not slip in before it does. */
static void wait_stopped(pid_t pid)
{
    uint64_t end = env_clock_mono_ms() + 5000;
    for (;;) {
        char dir[64];
        snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
        DIR *d = opendir(dir);
        CHECK(d != NULL);
        bool all = true;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char path[384], buf[512];
            snprintf(path, sizeof(path), "%s/%s/stat", dir, de->d_name);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *rp = strrchr(buf, ')');
            if (rp && rp[1] == ' ' && rp[2] != 'T' && rp[2] != 't')
                all = false;
        }
        closedir(d);
        if (all)
            return;
        CHECK(env_clock_mono_ms() < end);
        usleep(2000);
    }
}

static void start_etcd(testsrv_t **s)
{
    int rc = testsrv_start_etcd(s);
    if (rc != 0) {
        fprintf(stderr, "cannot start etcd: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        exit(1);
    }
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_basic(void)
{
    testsrv_t *s;
    start_etcd(&s);
    tloop_t t;
    tl_open(&t, testsrv_url(s));

    meta_result_t *r = do_get(&t, "basic/absent", 0);
    CHECK_RC(r, 0);
    CHECK(!r->kv.found && r->rev >= 1);
    int64_t rev0 = r->rev;
    meta_result_free(r);

    r = do_put(&t, "basic/a", "one", 0, 0);
    CHECK_RC(r, 0);
    CHECK(r->succeeded && r->rev == rev0 + 1);
    meta_result_free(r);
    r = do_put(&t, "basic/a", "two", 0, 0);
    CHECK_RC(r, 0);
    meta_result_free(r);
    r = do_get(&t, "basic/a", 0);
    CHECK_RC(r, 0);
    CHECK(r->kv.found && r->kv.value_len == 3 && memcmp(r->kv.value, "two", 3) == 0);
    CHECK(r->kv.version == 2 && r->kv.create_rev == rev0 + 1 && r->kv.mod_rev == rev0 + 2);
    meta_result_free(r);

    /* binary-safe value, empty value */
    uint8_t bin[256];
    for (int i = 0; i < 256; i++)
        bin[i] = (uint8_t)(255 - i);
    meta_op_t ops[] = {{.type = META_OP_PUT, .key = "basic/bin", .value = bin, .value_len = 256},
                       {.type = META_OP_PUT, .key = "basic/empty", .value = NULL, .value_len = 0},
                       {.type = META_OP_GET, .key = "basic/a"}};
    meta_cmp_t cmp = {.key = "basic/a", .target = META_CMP_VERSION, .op = META_EQ, .num = 2};
    waiter_t w = {0};
    r = wait_for(&t, &w, meta_txn(t.m, &cmp, 1, ops, 3, NULL, 0, 0, wait_cb, &w));
    CHECK_RC(r, 0);
    CHECK(r->succeeded && r->n_ops == 3 && r->ops[2].found && r->ops[2].version == 2);
    meta_result_free(r);
    r = do_get(&t, "basic/bin", 0);
    CHECK(r->kv.found && r->kv.value_len == 256 && memcmp(r->kv.value, bin, 256) == 0);
    meta_result_free(r);

    /* pagination across a prefix with a sibling prefix around it */
    for (int i = 0; i < 7; i++) {
        char k[32];
        snprintf(k, sizeof(k), "page/%02d", i);
        meta_result_free(do_put(&t, k, "x", 0, 0));
    }
    meta_result_free(do_put(&t, "pagf", "x", 0, 0));
    meta_result_free(do_put(&t, "page", "x", 0, 0));
    char after[64] = "";
    int seen = 0;
    for (int round = 0; round < 10; round++) {
        r = do_range(&t, "page/", after[0] ? after : NULL, 3);
        CHECK_RC(r, 0);
        for (size_t i = 0; i < r->n_kvs; i++) {
            char k[32];
            snprintf(k, sizeof(k), "page/%02d", seen++);
            CHECK(strcmp(r->kvs[i].key, k) == 0);
        }
        bool more = r->more;
        if (r->n_kvs)
            snprintf(after, sizeof(after), "%s", r->kvs[r->n_kvs - 1].key);
        meta_result_free(r);
        if (!more)
            break;
    }
    CHECK(seen == 7);
    r = do_range(&t, "page/", "page0", 3); /* start_after beyond the prefix: empty */
    CHECK_RC(r, 0);
    CHECK(r->n_kvs == 0 && !r->more && r->rev > rev0);
    meta_result_free(r);
    r = do_range(&t, "page/", "pag", 3); /* start_after below the prefix: from the start */
    CHECK_RC(r, 0);
    CHECK(r->n_kvs == 3 && r->more && strcmp(r->kvs[0].key, "page/00") == 0);
    meta_result_free(r);

    /* leases: grant, bind, keepalive, ttl, revoke -> key gone, then ENOENT */
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_grant(t.m, 5000, 0, wait_cb, &w));
    CHECK_RC(r, 0);
    meta_lease_t lease = r->lease;
    CHECK(lease != 0 && r->ttl_ms >= 5000);
    meta_result_free(r);
    meta_result_free(do_put(&t, "basic/leased", "v", lease, 0));
    r = do_get(&t, "basic/leased", 0);
    CHECK(r->kv.found && r->kv.lease == lease);
    meta_result_free(r);
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_keepalive(t.m, lease, 0, wait_cb, &w));
    CHECK_RC(r, 0);
    CHECK(r->ttl_ms >= 4000);
    meta_result_free(r);
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_ttl(t.m, lease, 0, wait_cb, &w));
    CHECK_RC(r, 0);
    CHECK(r->ttl_ms > 0 && r->ttl_ms <= 5000);
    meta_result_free(r);
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_revoke(t.m, lease, 0, wait_cb, &w));
    CHECK_RC(r, 0);
    meta_result_free(r);
    r = do_get(&t, "basic/leased", 0);
    CHECK(!r->kv.found);
    meta_result_free(r);
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_keepalive(t.m, lease, 0, wait_cb, &w));
    CHECK_RC(r, KVMESH_ENOENT);
    meta_result_free(r);
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_ttl(t.m, lease, 0, wait_cb, &w));
    CHECK_RC(r, KVMESH_ENOENT);
    meta_result_free(r);
    w = (waiter_t){0};
    r = wait_for(&t, &w, meta_lease_revoke(t.m, lease, 0, wait_cb, &w));
    CHECK_RC(r, KVMESH_ENOENT);
    meta_result_free(r);
    /* a put bound to an unknown lease is refused */
    r = do_put(&t, "basic/badlease", "v", lease, 0);
    CHECK_RC(r, KVMESH_ENOENT);
    meta_result_free(r);

    /* a burst larger than the in-flight bound: every call completes, in any order */
    enum { BURST = 300 };
    static waiter_t ws[BURST];
    memset(ws, 0, sizeof(ws));
    for (int i = 0; i < BURST; i++)
        CHECK(meta_get(t.m, "basic/a", 0, wait_cb, &ws[i]) == 0);
    for (int i = 0; i < BURST; i++) {
        r = wait_for(&t, &ws[i], 0);
        CHECK_RC(r, 0);
        CHECK(r->kv.found);
        meta_result_free(r);
    }

    /* close from inside a callback while other calls are in flight and queued */
    {
        tloop_t t2;
        tl_open(&t2, testsrv_url(s));
        static close_waiter_t cw[100];
        memset(cw, 0, sizeof(cw));
        for (int i = 0; i < 100; i++) {
            cw[i].t = &t2;
            CHECK(meta_get(t2.m, "basic/a", 0, close_cb, &cw[i]) == 0);
        }
        int done = 0;
        while (done < 100) {
            uv_run(&t2.loop, UV_RUN_ONCE);
            done = 0;
            for (int i = 0; i < 100; i++)
                done += cw[i].done;
        }
        int ok = 0, canceled = 0;
        for (int i = 0; i < 100; i++) {
            CHECK(cw[i].rc == 0 || cw[i].rc == KVMESH_ECANCELED);
            ok += cw[i].rc == 0;
            canceled += cw[i].rc == KVMESH_ECANCELED;
        }
        CHECK(ok >= 1 && canceled >= 1);
        for (int i = 0; i < 10; i++) /* the deferred release of the closed handle runs */
            uv_run(&t2.loop, UV_RUN_NOWAIT);
        env_uv_free(t2.env);
        uv_run(&t2.loop, UV_RUN_DEFAULT);
        CHECK(uv_loop_close(&t2.loop) == 0); /* every handle of the backend was closed */
    }

    /* close with calls in flight: each completes with ECANCELED */
    waiter_t wc[8];
    memset(wc, 0, sizeof(wc));
    for (int i = 0; i < 8; i++)
        CHECK(meta_get(t.m, "basic/a", 0, wait_cb, &wc[i]) == 0);
    tl_close(&t);
    for (int i = 0; i < 8; i++) {
        CHECK(wc[i].done);
        CHECK_RC(wc[i].res, KVMESH_ECANCELED);
        meta_result_free(wc[i].res);
    }
    testsrv_stop(s);
    printf("basic: ok\n");
}

static void test_failover(void)
{
    testsrv_t *s;
    start_etcd(&s);
    uint16_t dead = testsrv_free_port();
    CHECK(dead != 0);
    char url[128];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u,127.0.0.1:%u", dead, testsrv_port(s));
    tloop_t t;
    tl_open(&t, url);
    /* a txn is retried on the next member only because the dead one refused the connection
     * (it was never sent) */
    meta_result_t *r = do_put(&t, "fo/k", "v", 0, 2000);
    CHECK_RC(r, 0);
    meta_result_free(r);
    for (int i = 0; i < 20; i++) {
        r = do_get(&t, "fo/k", 2000);
        CHECK_RC(r, 0);
        CHECK(r->kv.found);
        meta_result_free(r);
    }
    tl_close(&t);
    testsrv_stop(s);
    printf("failover: ok\n");
}

static void test_unreachable(void)
{
    uint16_t p1 = testsrv_free_port(), p2 = testsrv_free_port();
    CHECK(p1 && p2 && p1 != p2);
    char url[128], n1[32], n2[32];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u,127.0.0.1:%u", p1, p2);
    snprintf(n1, sizeof(n1), "127.0.0.1:%u", p1);
    snprintf(n2, sizeof(n2), "127.0.0.1:%u", p2);
    tloop_t t;
    tl_open(&t, url); /* lazy: opening does not connect */
    uint64_t t0 = env_clock_mono_ms();
    meta_result_t *r = do_get(&t, "x", 3000);
    CHECK_RC(r, KVMESH_ECONN);
    CHECK(strstr(r->errmsg, n1) && strstr(r->errmsg, n2));
    meta_result_free(r);
    r = do_put(&t, "x", "y", 0, 3000);
    CHECK_RC(r, KVMESH_ECONN); /* never sent: a definite failure, not indeterminate */
    CHECK(strstr(r->errmsg, n1) && strstr(r->errmsg, n2));
    meta_result_free(r);
    CHECK(env_clock_mono_ms() - t0 < 3000); /* bounded retries, not the deadline */
    tl_close(&t);

    /* an unresolvable host is named too */
    tl_open(&t, "etcd://kvmesh-no-such-host.invalid:2379");
    r = do_get(&t, "x", 3000);
    CHECK(r->rc == KVMESH_ECONN || r->rc == KVMESH_ETIMEDOUT);
    if (r->rc == KVMESH_ECONN)
        CHECK(strstr(r->errmsg, "kvmesh-no-such-host.invalid:2379") != NULL);
    meta_result_free(r);
    tl_close(&t);
    printf("unreachable: ok\n");
}

/* ---- kill/restart mid-run ------------------------------------------------------------------ */

enum { MID_N = 120, MID_KILL_AT = 40, MID_RESTART_AT = 80 };

typedef struct mid_run {
    tloop_t *t;
    testsrv_t *s;
    waiter_t w[MID_N];
    int next;
} mid_run_t;

static void test_killrestart(void)
{
    testsrv_t *s;
    start_etcd(&s);
    tloop_t t;
    tl_open(&t, testsrv_url(s));
    meta_result_t *r = do_put(&t, "kr/durable", "yes", 0, 0);
    CHECK_RC(r, 0);
    meta_result_free(r);

    /* a stream of txns, 4 in flight at a time; SIGKILL at MID_KILL_AT, restart at
     * MID_RESTART_AT, while requests are in flight */
    static mid_run_t mr;
    memset(&mr, 0, sizeof(mr));
    int issued = 0, completed = 0, ok = 0, conn = 0, indet = 0;
    while (completed < MID_N) {
        while (issued < MID_N && issued - completed < 4) {
            if (issued == MID_KILL_AT)
                CHECK(testsrv_kill(s, SIGKILL) == 0);
            if (issued == MID_RESTART_AT)
                CHECK(testsrv_restart(s) == 0);
            char k[32];
            snprintf(k, sizeof(k), "kr/%03d", issued);
            meta_op_t op = {
                .type = META_OP_PUT, .key = k, .value = (const uint8_t *)"v", .value_len = 1};
            CHECK(meta_txn(t.m, NULL, 0, &op, 1, NULL, 0, 3000, wait_cb, &mr.w[issued]) == 0);
            issued++;
        }
        uv_run(&t.loop, UV_RUN_ONCE);
        while (completed < MID_N && mr.w[completed].done)
            completed++;
    }
    /* after restart: the durable key survived; success means applied, ECONN means not */
    r = do_get(&t, "kr/durable", 0);
    CHECK_RC(r, 0);
    CHECK(r->kv.found);
    meta_result_free(r);
    for (int i = 0; i < MID_N; i++) {
        char k[32];
        snprintf(k, sizeof(k), "kr/%03d", i);
        meta_result_t *g = do_get(&t, k, 0);
        CHECK_RC(g, 0);
        int rc = mr.w[i].res->rc;
        if (rc == 0) {
            ok++;
            CHECK(g->kv.found);
        } else if (rc == KVMESH_ECONN) {
            conn++;
            CHECK(!g->kv.found);
            CHECK(strstr(mr.w[i].res->errmsg, testsrv_url(s) + strlen("etcd://")) != NULL);
        } else if (rc == KVMESH_EINDETERMINATE || rc == KVMESH_ETIMEDOUT) {
            indet++;
        } else {
            fprintf(stderr, "txn %d: unexpected %s (%s)\n", i, kvmesh_errname(rc),
                    mr.w[i].res->errmsg);
            exit(1);
        }
        meta_result_free(g);
        meta_result_free(mr.w[i].res);
    }
    printf("killrestart: %d ok, %d refused (not applied), %d indeterminate\n", ok, conn, indet);

    /* deterministic in-flight case: the server is stopped, txns are sent (the kernel accepts
     * them), then the server dies: each txn was sent and got no reply, so it must be reported
     * EINDETERMINATE (never ECONN, never success); a concurrent read fails over and names the
     * member. The server never read them: after restart none is applied. */
    CHECK(testsrv_kill(s, SIGSTOP) == 0);
    wait_stopped(testsrv_pid(s));
    enum { INF = 4 };
    waiter_t wi[INF + 1];
    memset(wi, 0, sizeof(wi));
    for (int i = 0; i < INF; i++) {
        char k[32];
        snprintf(k, sizeof(k), "kr/inflight/%d", i);
        meta_op_t op = {
            .type = META_OP_PUT, .key = k, .value = (const uint8_t *)"v", .value_len = 1};
        CHECK(meta_txn(t.m, NULL, 0, &op, 1, NULL, 0, 5000, wait_cb, &wi[i]) == 0);
    }
    uint64_t until = env_clock_mono_ms() + 1000; /* generous: a loaded 2-core machine */
    while (env_clock_mono_ms() < until)
        uv_run(&t.loop, UV_RUN_NOWAIT); /* let curl connect and write the requests */
    for (int i = 0; i < INF; i++)
        CHECK(!wi[i].done);
    CHECK(testsrv_kill(s, SIGKILL) == 0);
    CHECK(meta_get(t.m, "kr/durable", 5000, wait_cb, &wi[INF]) == 0);
    for (int i = 0; i <= INF; i++) {
        r = wait_for(&t, &wi[i], 0);
        if (i < INF) {
            CHECK_RC(r, KVMESH_EINDETERMINATE);
        } else {
            CHECK_RC(r, KVMESH_ECONN);
        }
        CHECK(strstr(r->errmsg, testsrv_url(s) + strlen("etcd://")) != NULL);
        meta_result_free(r);
    }
    CHECK(testsrv_restart(s) == 0);
    for (int i = 0; i < INF; i++) {
        char k[32];
        snprintf(k, sizeof(k), "kr/inflight/%d", i);
        r = do_get(&t, k, 0);
        CHECK_RC(r, 0);
        CHECK(!r->kv.found);
        meta_result_free(r);
    }
    CHECK(ok >= MID_N - (MID_RESTART_AT - MID_KILL_AT) - 4); /* all before kill / after restart */
    CHECK(conn > 0);                                         /* the outage was observed */
    tl_close(&t);
    testsrv_stop(s);
    printf("killrestart: ok\n");
}

static void test_stopped(void)
{
    testsrv_t *s;
    start_etcd(&s);
    tloop_t t;
    tl_open(&t, testsrv_url(s));
    meta_result_free(do_put(&t, "st/k", "v", 0, 0));
    CHECK(testsrv_kill(s, SIGSTOP) == 0);
    wait_stopped(testsrv_pid(s));
    uint64_t t0 = env_clock_mono_ms();
    meta_result_t *r = do_get(&t, "st/k", 300);
    uint64_t el = env_clock_mono_ms() - t0;
    CHECK_RC(r, KVMESH_ETIMEDOUT);
    CHECK(el >= 250 && el < 2000);
    meta_result_free(r);
    r = do_put(&t, "st/k2", "v", 0, 300);
    CHECK(r->rc == KVMESH_ETIMEDOUT || r->rc == KVMESH_EINDETERMINATE);
    meta_result_free(r);
    CHECK(testsrv_kill(s, SIGCONT) == 0);
    r = do_get(&t, "st/k", 3000);
    CHECK_RC(r, 0);
    CHECK(r->kv.found);
    meta_result_free(r);
    tl_close(&t);

    /* a hung member listed first: a txn sent to it times out (its outcome is unknown, so it is
     * not retried elsewhere), and the member stops being preferred, so the next txn goes to the
     * other listed member. (Two independent single-member etcds stand in for two members: only
     * the client's routing is under test.) */
    testsrv_t *s2;
    start_etcd(&s2);
    char url[128];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u,127.0.0.1:%u", testsrv_port(s),
             testsrv_port(s2));
    tl_open(&t, url);
    r = do_put(&t, "st/warm", "v", 0, 3000); /* the first member answers */
    CHECK_RC(r, 0);
    meta_result_free(r);
    CHECK(testsrv_kill(s, SIGSTOP) == 0);
    wait_stopped(testsrv_pid(s));
    r = do_put(&t, "st/hung", "v", 0, 300);
    CHECK(r->rc == KVMESH_ETIMEDOUT || r->rc == KVMESH_EINDETERMINATE);
    meta_result_free(r);
    /* the abandoned attempt ends 50 ms after the deadline; then the member is demoted */
    uint64_t until = env_clock_mono_ms() + 1000;
    while (env_clock_mono_ms() < until)
        uv_run(&t.loop, UV_RUN_NOWAIT);
    r = do_put(&t, "st/after", "v", 0, 3000);
    CHECK_RC(r, 0);
    meta_result_free(r);
    tl_close(&t);
    CHECK(testsrv_kill(s, SIGCONT) == 0);
    tl_open(&t, testsrv_url(s2));
    r = do_get(&t, "st/after", 3000);
    CHECK_RC(r, 0);
    CHECK(r->kv.found); /* it went to the second member */
    meta_result_free(r);
    tl_close(&t);
    testsrv_stop(s2);
    testsrv_stop(s);
    printf("stopped: ok\n");
}

/* ---- 3-member cluster ---------------------------------------------------------------------- */

enum { CL_N = 3 };

typedef struct member {
    pid_t pid;
    uint16_t client, peer;
    char dir[256];
} member_t;

static void cl_spawn(member_t *ms, int i, const char *cluster, const char *state)
{
    member_t *mb = &ms[i];
    char a[12][512];
    char *argv[13];
    snprintf(a[0], sizeof(a[0]), "etcd");
    snprintf(a[1], sizeof(a[1]), "--name=m%d", i);
    snprintf(a[2], sizeof(a[2]), "--data-dir=%s/data", mb->dir);
    snprintf(a[3], sizeof(a[3]), "--listen-client-urls=http://127.0.0.1:%u", mb->client);
    snprintf(a[4], sizeof(a[4]), "--advertise-client-urls=http://127.0.0.1:%u", mb->client);
    snprintf(a[5], sizeof(a[5]), "--listen-peer-urls=http://127.0.0.1:%u", mb->peer);
    snprintf(a[6], sizeof(a[6]), "--initial-advertise-peer-urls=http://127.0.0.1:%u", mb->peer);
    snprintf(a[7], sizeof(a[7]), "--initial-cluster=%s", cluster);
    snprintf(a[8], sizeof(a[8]), "--initial-cluster-state=%s", state);
    snprintf(a[9], sizeof(a[9]), "--heartbeat-interval=50");
    snprintf(a[10], sizeof(a[10]), "--election-timeout=300");
    snprintf(a[11], sizeof(a[11]), "--log-level=warn");
    for (int k = 0; k < 12; k++)
        argv[k] = a[k];
    argv[12] = NULL;
    char logp[300];
    snprintf(logp, sizeof(logp), "%s/log", mb->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp("etcd", argv);
        _exit(127);
    }
    mb->pid = pid;
}

static void cl_kill(member_t *mb)
{
    if (mb->pid > 0) {
        kill(mb->pid, SIGKILL);
        waitpid(mb->pid, NULL, 0);
        mb->pid = 0;
    }
}

static void cl_rmdir(const char *dir)
{
    /* the data dir is etcd's; remove it with rm -rf on our own temp dir only */
    char cmd[600];
    CHECK(strncmp(dir, "/tmp/kvmesh-etcdcl-", 19) == 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static size_t collect(char *p, size_t sz, size_t n, void *arg)
{
    char *buf = arg;
    size_t have = strlen(buf), add = sz * n;
    if (have + add >= 4096)
        return 0;
    memcpy(buf + have, p, add);
    buf[have + add] = '\0';
    return add;
}

/* Index of the member that is the raft leader, asked through /v3/maintenance/status, or -1. */
static int cl_leader(const member_t *ms)
{
    for (int i = 0; i < CL_N; i++) {
        if (ms[i].pid <= 0)
            continue;
        char url[128], body[4096] = "";
        snprintf(url, sizeof(url), "http://127.0.0.1:%u/v3/maintenance/status", ms[i].client);
        CURL *e = curl_easy_init();
        CHECK(e != NULL);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "{}");
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 2000L);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)body);
        CURLcode cc = curl_easy_perform(e);
        curl_easy_cleanup(e);
        if (cc != CURLE_OK)
            continue;
        json_t *j = json_loads(body, 0, NULL);
        const char *me =
            json_string_value(json_object_get(json_object_get(j, "header"), "member_id"));
        const char *leader = json_string_value(json_object_get(j, "leader"));
        int found = me && leader && strcmp(me, leader) == 0;
        json_decref(j);
        if (found)
            return i;
    }
    return -1;
}

static void test_cluster(void)
{
    member_t ms[CL_N];
    memset(ms, 0, sizeof(ms));
    char cluster[512] = "";
    for (int i = 0; i < CL_N; i++) {
        ms[i].client = testsrv_free_port();
        ms[i].peer = testsrv_free_port();
        CHECK(ms[i].client && ms[i].peer);
        snprintf(ms[i].dir, sizeof(ms[i].dir), "/tmp/kvmesh-etcdcl-XXXXXX");
        CHECK(mkdtemp(ms[i].dir) != NULL);
        size_t n = strlen(cluster);
        snprintf(cluster + n, sizeof(cluster) - n, "%sm%d=http://127.0.0.1:%u", i ? "," : "", i,
                 ms[i].peer);
    }
    for (int i = 0; i < CL_N; i++)
        cl_spawn(ms, i, cluster, "new");
    char url[256];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u,127.0.0.1:%u,127.0.0.1:%u", ms[0].client,
             ms[1].client, ms[2].client);
    tloop_t t;
    tl_open(&t, url);
    /* wait (bounded) until the cluster answers a write and has a leader */
    meta_result_t *r = NULL;
    uint64_t t0 = env_clock_mono_ms();
    int lead;
    for (;;) {
        r = do_put(&t, "cl/ready", "1", 0, 1000);
        int rc = r->rc;
        meta_result_free(r);
        if (rc == 0 && (lead = cl_leader(ms)) >= 0)
            break;
        CHECK(env_clock_mono_ms() - t0 < 30000);
        usleep(100000);
    }
    tl_close(&t);
    /* the client prefers the first listed member: list the leader first, then kill it */
    int o1 = (lead + 1) % CL_N, o2 = (lead + 2) % CL_N;
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u,127.0.0.1:%u,127.0.0.1:%u", ms[lead].client,
             ms[o1].client, ms[o2].client);
    tl_open(&t, url);

    /* a stream of writes and reads; the leader (the preferred member) is killed at write 15 */
    enum { N = 45, KILL_AT = 15 };
    int acked[N];
    int indet = 0;
    for (int i = 0; i < N; i++) {
        if (i == KILL_AT)
            cl_kill(&ms[lead]);
        char k[32];
        snprintf(k, sizeof(k), "cl/%02d", i);
        acked[i] = 0;
        for (int attempt = 0; attempt < 10 && !acked[i]; attempt++) {
            r = do_put(&t, k, "v", 0, 3000);
            if (r->rc == 0)
                acked[i] = 1;
            else if (r->rc == KVMESH_EINDETERMINATE || r->rc == KVMESH_ETIMEDOUT ||
                     r->rc == KVMESH_EUNAVAILABLE)
                indet++; /* election in progress: retry the (idempotent) put */
            else {
                fprintf(stderr, "cluster put %d: %s (%s)\n", i, kvmesh_errname(r->rc), r->errmsg);
                exit(1);
            }
            meta_result_free(r);
        }
        CHECK(acked[i]);
        meta_result_t *g = do_get(&t, k, 3000);
        CHECK_RC(g, 0);
        CHECK(g->kv.found);
        meta_result_free(g);
    }
    r = do_range(&t, "cl/", NULL, 100);
    CHECK_RC(r, 0);
    CHECK(r->n_kvs == N + 1); /* cl/00..cl/44 and cl/ready */
    meta_result_free(r);
    tl_close(&t);

    /* a client listing only the dead member and one survivor still works */
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u,127.0.0.1:%u", ms[lead].client, ms[o2].client);
    tl_open(&t, url);
    r = do_get(&t, "cl/00", 3000);
    CHECK_RC(r, 0);
    CHECK(r->kv.found);
    meta_result_free(r);
    tl_close(&t);
    for (int i = 0; i < CL_N; i++) {
        cl_kill(&ms[i]);
        cl_rmdir(ms[i].dir);
    }
    printf("cluster: ok (leader m%d killed; %d writes retried during the election)\n", lead, indet);
}

/* ---- curl's silent re-send of a request on a reused connection ----------------------------- */

/*
 * A fake etcd gateway on a thread: answers range requests (keep-alive), reads the FIRST txn to
 * its end and then closes the connection without a reply (as a member that applied it and died,
 * or a proxy in front of a failing-over cluster, would), and answers later txns with success.
 * libcurl re-sends a request whose REUSED connection died before any reply byte, on a fresh
 * connection to the same URL: for a txn that copy would be applied a second time, and the caller
 * would be told the outcome of the second copy only.
 */
typedef struct fake_gw {
    int lfd;
    uint16_t port;
    _Atomic int txns_seen;
    _Atomic int ranges_seen;
    _Atomic bool stop;
    pthread_t th;
} fake_gw_t;

/* Reads one HTTP request (headers + Content-Length body); returns 1, 0 on EOF, -1 on error. */
static int gw_read_request(int fd, char *path, size_t cap)
{
    char buf[65536];
    size_t n = 0;
    char *hdr_end = NULL;
    while (!hdr_end) {
        if (n == sizeof(buf) - 1)
            return -1;
        ssize_t k = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (k <= 0)
            return k == 0 && n == 0 ? 0 : -1;
        n += (size_t)k;
        buf[n] = '\0';
        hdr_end = strstr(buf, "\r\n\r\n");
    }
    size_t body_have = n - (size_t)(hdr_end + 4 - buf);
    const char *cl = strcasestr(buf, "content-length:");
    size_t body_len = cl ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
    if (sscanf(buf, "POST %255s", path) != 1 || cap < 256)
        return -1;
    while (body_have < body_len) {
        char tmp[4096];
        ssize_t k = read(fd, tmp, sizeof(tmp));
        if (k <= 0)
            return -1;
        body_have += (size_t)k;
    }
    return 1;
}

static void gw_reply(int fd, const char *json)
{
    char out[1024];
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\n\r\n%s",
                     strlen(json), json);
    CHECK(send(fd, out, (size_t)n, MSG_NOSIGNAL) == n); /* the client may be gone already */
}

static void *gw_main(void *arg)
{
    fake_gw_t *g = arg;
    uint64_t end = env_clock_mono_ms() + 20000;
    struct pollfd p[9];
    int n = 1; /* p[0] listens, p[1..] are connections */
    p[0] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
    while (!g->stop && env_clock_mono_ms() < end) {
        if (poll(p, (nfds_t)n, 50) <= 0)
            continue;
        for (int i = n - 1; i >= 1; i--) {
            if (!p[i].revents)
                continue;
            char path[256];
            bool drop = gw_read_request(p[i].fd, path, sizeof(path)) != 1;
            if (!drop && strcmp(path, "/v3/kv/txn") == 0) {
                if (++g->txns_seen == 1)
                    drop = true; /* read to the end, "applied", then gone without a reply */
                else
                    gw_reply(p[i].fd,
                             "{\"header\":{\"revision\":\"7\"},\"succeeded\":true,\"responses\":"
                             "[{\"response_put\":{\"header\":{\"revision\":\"7\"}}}]}");
            } else if (!drop) {
                g->ranges_seen++;
                gw_reply(p[i].fd, "{\"header\":{\"revision\":\"6\"},\"count\":\"0\"}");
            }
            if (drop) {
                close(p[i].fd);
                p[i] = p[--n];
            }
        }
        if (p[0].revents && n < 9) {
            int fd = accept(g->lfd, NULL, NULL);
            if (fd >= 0)
                p[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
    }
    for (int i = 1; i < n; i++)
        close(p[i].fd);
    return NULL;
}

static void gw_start(fake_gw_t *g)
{
    memset(g, 0, sizeof(*g));
    g->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(g->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(g->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(g->lfd, 16) == 0);
    socklen_t al = sizeof(a);
    CHECK(getsockname(g->lfd, (struct sockaddr *)&a, &al) == 0);
    g->port = ntohs(a.sin_port);
    CHECK(pthread_create(&g->th, NULL, gw_main, g) == 0);
}

static void gw_stop(fake_gw_t *g)
{
    g->stop = true;
    pthread_join(g->th, NULL);
    close(g->lfd);
}

static void test_resend(void)
{
    fake_gw_t g;
    gw_start(&g);
    char url[64];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%u", g.port);
    tloop_t t;
    tl_open(&t, url);
    /* a read first, so that an idle kept-alive connection waits in curl's pool */
    meta_result_t *r = do_get(&t, "rs/k", 3000);
    CHECK_RC(r, 0);
    CHECK(!r->kv.found && r->rev == 6);
    meta_result_free(r);
    CHECK(g.ranges_seen == 1);
    /* the txn reaches the server once, which goes away without a reply: the outcome is unknown,
     * and the txn must not have been sent a second time */
    r = do_put(&t, "rs/k", "v", 0, 3000);
    int copies = g.txns_seen;
    if (copies != 1 || r->rc != KVMESH_EINDETERMINATE) {
        fprintf(stderr, "resend: the txn reached the server %d times; result %s (%s)\n", copies,
                kvmesh_errname(r->rc), r->errmsg);
        exit(1);
    }
    meta_result_free(r);
    /* reads after it are answered, and a later txn is sent once */
    r = do_get(&t, "rs/k", 3000);
    CHECK_RC(r, 0);
    meta_result_free(r);
    r = do_put(&t, "rs/k", "v2", 0, 3000);
    CHECK_RC(r, 0);
    CHECK(r->succeeded && r->rev == 7);
    meta_result_free(r);
    CHECK(g.txns_seen == 2);
    tl_close(&t);
    gw_stop(&g);
    printf("resend: ok (a txn whose connection died unanswered was sent once: indeterminate)\n");
}

/* TIME_WAIT sockets to or from port (from /proc/net/tcp). */
static int time_wait_count(uint16_t port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    CHECK(f != NULL);
    char line[512];
    int n = 0;
    CHECK(fgets(line, sizeof(line), f) != NULL); /* header */
    while (fgets(line, sizeof(line), f)) {
        unsigned lp = 0, rp = 0, st = 0;
        if (sscanf(line, " %*d: %*8x:%x %*8x:%x %x", &lp, &rp, &st) == 3 && st == 0x06 &&
            (lp == port || rp == port))
            n++;
    }
    fclose(f);
    return n;
}

/* A connection per txn (no silent re-send, see test_resend) must not leave a TIME_WAIT entry per
 * txn behind (the ephemeral ports would run out at a few hundred txns per second). */
static void test_txn_sockets(void)
{
    testsrv_t *s;
    start_etcd(&s);
    tloop_t t;
    tl_open(&t, testsrv_url(s));
    int before = time_wait_count(testsrv_port(s));
    enum { N = 200 };
    for (int i = 0; i < N; i++) {
        meta_result_t *r = do_put(&t, "tw/k", "v", 0, 5000);
        CHECK_RC(r, 0);
        meta_result_free(r);
    }
    int after = time_wait_count(testsrv_port(s));
    tl_close(&t);
    testsrv_stop(s);
    if (after - before > 16) {
        fprintf(stderr, "txn_sockets: %d txns left %d TIME_WAIT sockets\n", N, after - before);
        exit(1);
    }
    printf("txn_sockets: ok (%d txns, %d TIME_WAIT sockets)\n", N, after - before);
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"basic", test_basic},
        {"failover", test_failover},
        {"unreachable", test_unreachable},
        {"killrestart", test_killrestart},
        {"stopped", test_stopped},
        {"cluster", test_cluster},
        {"resend", test_resend},
        {"txn_sockets", test_txn_sockets},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        if (only && strcmp(only, tests[i].name) != 0)
            continue;
        tests[i].fn();
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "unknown test '%s'\n", only);
        return 2;
    }
    return 0;
}
