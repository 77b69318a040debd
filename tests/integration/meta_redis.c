/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_redis.c — Redis-specific integration tests of the redis:// metadata backend, against real
 * redis-server processes on free loopback ports (tests/support/testsrv). The backend-independent
 * semantics are covered by the conformance suite (meta_conformance redis); these tests cover what
 * only the Redis backend has:
 *   - NOSCRIPT reload: SCRIPT FLUSH between calls, the next calls still succeed;
 *   - ACL user/password: a good user works; a bad password or a missing one fails with
 *     KVMESH_EAUTH and a message naming the user and the server;
 *   - expiry inside the scripts: with no reaper running, the first call that meets a key of an
 *     expired lease sees it absent and drops the lease's keys in one revision;
 *   - the lease reaper removes an expired lease's keys from Redis (checked with a raw client)
 *     without any kvmesh call touching them, and advances the revision;
 *   - a backlog of expired leases larger than one reaper call drains (one revision per lease);
 *   - the limits of meta.h (1 MiB value of every byte value, META_KEY_MAX key of bytes
 *     0x01..0xff, a full META_RANGE_MAX page) pass through the scripts unchanged;
 *   - reconnect after a restart: calls during the outage fail with KVMESH_ECONN naming
 *     host:port, calls after it succeed on the same handle, data (AOF) is still there;
 *   - an unreachable server: KVMESH_ECONN naming host:port, at once; a server that accepts but
 *     never answers: KVMESH_ECONN at the connect timeout, then recovery on the same handle;
 *   - the URL's /db and ?ns= place the data (raw client check) and namespaces are isolated;
 *   - a seeded random differential run against the memory backend: every txn/range/get/lease
 *     result (values, revisions, versions, pages, more, errors) must be identical.
 * Every wait is bounded (deadline loops of a few seconds).
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "core/util.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "testsrv.h"

static void nap_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    nanosleep(&ts, NULL);
}

static testsrv_t *start_redis(const char *conf)
{
    testsrv_t *s = NULL;
    int rc = testsrv_start_redis(&s, conf);
    if (rc)
        print_error("testsrv_start_redis: %s (%s)\n", kvmesh_strerror(rc), kvmesh_last_error());
    assert_int_equal(rc, 0);
    return s;
}

static meta_sync_t *open_url(const char *url)
{
    meta_sync_t *s = NULL;
    meta_opts_t o = {.default_timeout_ms = 3000, .name = "itest"};
    int rc = meta_sync_open(&s, url, &o);
    if (rc)
        print_error("meta_sync_open(%s): %s\n", url, kvmesh_last_error());
    assert_int_equal(rc, 0);
    return s;
}

/* Raw client (for checks and for SCRIPT FLUSH); authenticates when user is set. */
static redisContext *raw(const testsrv_t *srv, const char *user, const char *pass)
{
    redisContext *c = redisConnect("127.0.0.1", testsrv_port(srv));
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    if (user) {
        redisReply *r = redisCommand(c, "AUTH %s %s", user, pass);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    return c;
}

static long long raw_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    else if (r->type == REDIS_REPLY_NIL)
        v = 0;
    else
        print_error("unexpected raw reply type %d (%s)\n", r->type,
                    r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    return v;
}

static int put(meta_sync_t *s, const char *key, const char *val, meta_lease_t lease,
               meta_result_t **out)
{
    meta_op_t op = {.type = META_OP_PUT,
                    .key = key,
                    .value = (const uint8_t *)val,
                    .value_len = strlen(val),
                    .lease = lease};
    return meta_sync_txn(s, NULL, 0, &op, 1, NULL, 0, out);
}

static void put_ok(meta_sync_t *s, const char *key, const char *val, meta_lease_t lease)
{
    meta_result_t *r = NULL;
    int rc = put(s, key, val, lease, &r);
    if (rc)
        print_error("put %s: %s\n", key, r ? r->errmsg : "?");
    assert_int_equal(rc, 0);
    if (!r) {
        fail();
        return;
    }
    assert_true(r->succeeded);
    meta_result_free(r);
}

static void check_value(meta_sync_t *s, const char *key, const char *val)
{
    meta_result_t *r = NULL;
    int rc = meta_sync_get(s, key, &r);
    if (rc)
        print_error("get %s: %s\n", key, r ? r->errmsg : "?");
    assert_int_equal(rc, 0);
    if (!r) {
        fail();
        return;
    }
    if (val) {
        assert_true(r->kv.found);
        assert_int_equal(r->kv.value_len, strlen(val));
        assert_memory_equal(r->kv.value, val, strlen(val));
    } else {
        assert_false(r->kv.found);
    }
    meta_result_free(r);
}

/* SCRIPT FLUSH between calls: the backend gets NOSCRIPT, reloads and retries transparently. */
static void test_noscript_reload(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    redisContext *c = raw(srv, NULL, NULL);
    put_ok(s, "a", "1", 0);
    for (int round = 0; round < 3; round++) {
        redisReply *r = redisCommand(c, "SCRIPT FLUSH");
        assert_non_null(r);
        freeReplyObject(r);
        /* a read, a write and a lease call, each first hitting NOSCRIPT */
        check_value(s, "a", "1");
        char v[8];
        snprintf(v, sizeof(v), "v%d", round);
        put_ok(s, "b", v, 0);
        check_value(s, "b", v);
        redisReply *f = redisCommand(c, "SCRIPT FLUSH");
        freeReplyObject(f);
        meta_result_t *g = NULL;
        assert_int_equal(meta_sync_lease_grant(s, 5000, &g), 0);
        assert_true(g->lease > 0);
        meta_result_free(g);
    }
    /* the calls above really met NOSCRIPT (6 times: get, put and grant after each flush of 3
     * rounds) and recovered from it */
    redisReply *es = redisCommand(c, "INFO errorstats");
    assert_non_null(es);
    const char *ns = strstr(es->str, "errorstat_NOSCRIPT:count=");
    if (!ns || strtol(ns + strlen("errorstat_NOSCRIPT:count="), NULL, 10) < 6) {
        print_error("INFO errorstats: %s\n", es->str);
        fail();
    }
    freeReplyObject(es);
    /* the handle names its connection after meta_opts.name */
    redisReply *cl = redisCommand(c, "CLIENT LIST");
    assert_non_null(cl);
    assert_non_null(strstr(cl->str, "name=kvmesh:itest "));
    freeReplyObject(cl);
    /* the scripts are back in the cache after the reload (SCRIPT LOAD, then EVALSHA) */
    redisReply *info = redisCommand(c, "INFO memory");
    assert_non_null(info);
    assert_non_null(strstr(info->str, "number_of_cached_scripts:"));
    assert_null(strstr(info->str, "number_of_cached_scripts:0\r"));
    freeReplyObject(info);
    redisFree(c);
    meta_sync_close(s);
    testsrv_stop(srv);
}

static void test_acl(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis("user alice on >s3cret ~* &* +@all\n"
                                 "user bob on >pw ~kvm:* +@all -client\n"
                                 "user default off\n");
    uint16_t port = testsrv_port(srv);
    char url[256];

    /* good user/password */
    snprintf(url, sizeof(url), "redis://alice:s3cret@127.0.0.1:%u", port);
    meta_sync_t *s = open_url(url);
    put_ok(s, "k", "v", 0);
    check_value(s, "k", "v");
    meta_sync_close(s);

    /* a user confined to kvm:* keys and without CLIENT (SETNAME refused, which is ignored) */
    snprintf(url, sizeof(url), "redis://bob:pw@127.0.0.1:%u?ns=bobs", port);
    s = open_url(url);
    put_ok(s, "k", "bob", 0);
    check_value(s, "k", "bob");
    meta_sync_close(s);

    /* wrong password: EAUTH naming the user and the server */
    snprintf(url, sizeof(url), "redis://alice:wrong@127.0.0.1:%u", port);
    s = open_url(url);
    meta_result_t *r = NULL;
    assert_int_equal(meta_sync_get(s, "k", &r), KVMESH_EAUTH);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", port);
    if (!strstr(r->errmsg, "authentication failed for user 'alice'") || !strstr(r->errmsg, where)) {
        print_error("message: %s\n", r->errmsg);
        fail();
    }
    meta_result_free(r);
    meta_sync_close(s);

    /* unknown user */
    snprintf(url, sizeof(url), "redis://mallory:s3cret@127.0.0.1:%u", port);
    s = open_url(url);
    assert_int_equal(meta_sync_get(s, "k", &r), KVMESH_EAUTH);
    assert_non_null(strstr(r->errmsg, "user 'mallory'"));
    meta_result_free(r);
    meta_sync_close(s);

    /* no credentials while the default user is off */
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
    s = open_url(url);
    assert_int_equal(meta_sync_get(s, "k", &r), KVMESH_EAUTH);
    assert_non_null(strstr(r->errmsg, where));
    assert_non_null(strstr(r->errmsg, "user:password@"));
    meta_result_free(r);
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* An expired lease's keys vanish from Redis without any client reading them. */
static void test_reaper(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    redisContext *c = raw(srv, NULL, NULL);
    meta_result_t *g = NULL;
    put_ok(s, "keep", "z", 0);
    assert_int_equal(meta_sync_lease_grant(s, 2000, &g), 0);
    meta_lease_t lease = g->lease;
    meta_result_free(g);
    /* both keys in one txn, so that the revision after it is known even if the lease expires
     * right away on a stalled machine */
    meta_op_t two[2] = {{.type = META_OP_PUT,
                         .key = "eph/1",
                         .value = (const uint8_t *)"x",
                         .value_len = 1,
                         .lease = lease},
                        {.type = META_OP_PUT,
                         .key = "eph/2",
                         .value = (const uint8_t *)"y",
                         .value_len = 1,
                         .lease = lease}};
    assert_int_equal(meta_sync_txn(s, NULL, 0, two, 2, NULL, 0, &g), 0);
    long long rev0 = g->rev;
    meta_result_free(g);
    /* no kvmesh call from here on: only the handle's background reaper runs */
    uint64_t deadline = env_clock_mono_ms() + 15000;
    while (raw_int(c, "EXISTS kvm:{kvmesh}:k:eph/1 kvm:{kvmesh}:k:eph/2") != 0 &&
           env_clock_mono_ms() < deadline)
        nap_ms(50);
    assert_int_equal(raw_int(c, "EXISTS kvm:{kvmesh}:k:eph/1 kvm:{kvmesh}:k:eph/2"), 0);
    assert_int_equal(raw_int(c, "ZCARD kvm:{kvmesh}:keys"), 1);
    assert_int_equal(raw_int(c, "ZCARD kvm:{kvmesh}:ldl"), 0);
    assert_int_equal(raw_int(c, "EXISTS kvm:{kvmesh}:l:%lld kvm:{kvmesh}:lk:%lld", (long long)lease,
                             (long long)lease),
                     0);
    /* both keys went in one step: exactly one revision */
    assert_int_equal(raw_int(c, "GET kvm:{kvmesh}:rev"), rev0 + 1);
    check_value(s, "keep", "z");
    meta_result_t *r = NULL;
    assert_int_equal(meta_sync_lease_keepalive(s, lease, &r), KVMESH_ENOENT);
    meta_result_free(r);
    redisFree(c);
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* Expiry is enforced inside the scripts: with no reaper running (the only handle that could reap
 * is closed), a key of an expired lease is still stored in Redis, yet the first call that meets
 * it treats it as absent and drops the lease with all its keys in one revision. */
static void test_expiry_inside_scripts(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    redisContext *c = raw(srv, NULL, NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    meta_result_t *g = NULL;
    put_ok(s, "x/3", "c", 0);
    assert_int_equal(meta_sync_lease_grant(s, 2000, &g), 0);
    meta_lease_t lease = g->lease;
    meta_result_free(g);
    put_ok(s, "x/1", "a", lease);
    put_ok(s, "x/2", "b", lease);
    meta_sync_close(s); /* no reaper from here on */
    long long rev0 = raw_int(c, "GET kvm:{kvmesh}:rev");
    nap_ms(2300);
    /* expired by Redis's clock, still stored */
    assert_int_equal(raw_int(c, "EXISTS kvm:{kvmesh}:k:x/1 kvm:{kvmesh}:k:x/2"), 2);
    s = open_url(testsrv_url(srv));
    meta_result_t *r = NULL;
    assert_int_equal(meta_sync_range(s, "x/", NULL, 10, &r), 0); /* first call of the handle */
    assert_int_equal(r->n_kvs, 1);
    assert_string_equal(r->kvs[0].key, "x/3");
    assert_false(r->more);
    assert_int_equal(r->rev, rev0 + 1); /* both keys went in one step */
    meta_result_free(r);
    assert_int_equal(raw_int(c, "EXISTS kvm:{kvmesh}:k:x/1 kvm:{kvmesh}:k:x/2"), 0);
    assert_int_equal(raw_int(c, "ZCARD kvm:{kvmesh}:keys"), 1);
    assert_int_equal(meta_sync_lease_ttl(s, lease, &r), KVMESH_ENOENT);
    meta_result_free(r);
    redisFree(c);
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* A backlog of expired leases larger than one reaper call (META_REDIS_REAP_MAX = 64) drains with
 * no client reading the keys; each lease goes in its own revision. */
static void test_reaper_backlog(void **state)
{
    (void)state;
    enum { N = 150 };
    testsrv_t *srv = start_redis(NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    redisContext *c = raw(srv, NULL, NULL);
    /* the revision before the first write: early leases may already expire (and be reaped)
     * while later ones are still being written on a slow machine */
    long long rev0 = raw_int(c, "GET kvm:{kvmesh}:rev");
    if (rev0 == 0)
        rev0 = 1; /* an empty store is at revision 1 */
    for (int i = 0; i < N; i++) {
        meta_result_t *g = NULL;
        assert_int_equal(meta_sync_lease_grant(s, 2000, &g), 0);
        char key[32];
        snprintf(key, sizeof(key), "many/%03d", i);
        put_ok(s, key, "v", g->lease);
        meta_result_free(g);
    }
    uint64_t deadline = env_clock_mono_ms() + 20000;
    while (raw_int(c, "ZCARD kvm:{kvmesh}:keys") != 0 && env_clock_mono_ms() < deadline)
        nap_ms(50);
    assert_int_equal(raw_int(c, "ZCARD kvm:{kvmesh}:keys"), 0);
    assert_int_equal(raw_int(c, "ZCARD kvm:{kvmesh}:ldl"), 0);
    assert_int_equal(raw_int(c, "GET kvm:{kvmesh}:rev"), rev0 + N + N); /* N puts, N expiries */
    redisFree(c);
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* Extremes of meta.h's limits survive the trip through Lua unchanged: a 1 MiB value holding
 * every byte value, a key of META_KEY_MAX bytes 0x01..0xff, a full page of META_RANGE_MAX. */
static void test_limits_and_bytes(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    uint8_t *val = malloc(META_VALUE_MAX);
    assert_non_null(val);
    for (size_t i = 0; i < META_VALUE_MAX; i++)
        val[i] = (uint8_t)(i * 7 + (i >> 8));
    char key[META_KEY_MAX + 1];
    for (size_t i = 0; i < META_KEY_MAX; i++)
        key[i] = (char)(1 + i % 255);
    key[META_KEY_MAX] = '\0';
    meta_op_t op = {.type = META_OP_PUT, .key = key, .value = val, .value_len = META_VALUE_MAX};
    meta_result_t *r = NULL;
    assert_int_equal(meta_sync_txn(s, NULL, 0, &op, 1, NULL, 0, &r), 0);
    meta_result_free(r);
    assert_int_equal(meta_sync_get(s, key, &r), 0);
    assert_true(r->kv.found);
    assert_int_equal(r->kv.value_len, META_VALUE_MAX);
    assert_memory_equal(r->kv.value, val, META_VALUE_MAX);
    meta_result_free(r);
    /* the value compare sees the same bytes */
    meta_cmp_t cmp = {.key = key,
                      .target = META_CMP_VALUE,
                      .op = META_EQ,
                      .value = val,
                      .value_len = META_VALUE_MAX};
    meta_op_t get = {.type = META_OP_GET, .key = key};
    assert_int_equal(meta_sync_txn(s, &cmp, 1, &get, 1, NULL, 0, &r), 0);
    assert_true(r->succeeded);
    assert_int_equal(r->n_ops, 1);
    assert_int_equal(r->ops[0].value_len, META_VALUE_MAX);
    meta_result_free(r);
    free(val);
    /* META_RANGE_MAX + 1 keys: one full page with more, then the last one */
    for (int i = 0; i <= META_RANGE_MAX; i += 50) {
        meta_op_t ops[50];
        char keys[50][32];
        int n = 0;
        for (; n < 50 && i + n <= META_RANGE_MAX; n++) {
            snprintf(keys[n], sizeof(keys[n]), "page/%05d", i + n);
            ops[n] = (meta_op_t){
                .type = META_OP_PUT, .key = keys[n], .value = (const uint8_t *)"p", .value_len = 1};
        }
        assert_int_equal(meta_sync_txn(s, NULL, 0, ops, (size_t)n, NULL, 0, &r), 0);
        meta_result_free(r);
    }
    assert_int_equal(meta_sync_range(s, "page/", NULL, META_RANGE_MAX, &r), 0);
    assert_int_equal(r->n_kvs, META_RANGE_MAX);
    assert_true(r->more);
    assert_string_equal(r->kvs[META_RANGE_MAX - 1].key, "page/00999");
    meta_result_free(r);
    assert_int_equal(meta_sync_range(s, "page/", "page/00999", META_RANGE_MAX, &r), 0);
    assert_int_equal(r->n_kvs, 1);
    assert_false(r->more);
    assert_string_equal(r->kvs[0].key, "page/01000");
    meta_result_free(r);
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* Restart the server under an open handle: calls fail with ECONN while it is down and succeed
 * after it is back, on the same handle; AOF keeps the data. */
static void test_reconnect_after_restart(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis("appendonly yes\nappendfsync always\n");
    meta_sync_t *s = open_url(testsrv_url(srv));
    put_ok(s, "persist", "before", 0);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", testsrv_port(srv));

    assert_int_equal(testsrv_kill(srv, SIGKILL), 0);
    meta_result_t *r = NULL;
    int rc = meta_sync_get(s, "persist", &r);
    assert_int_equal(rc, KVMESH_ECONN);
    if (!strstr(r->errmsg, where)) {
        print_error("message: %s\n", r->errmsg);
        fail();
    }
    meta_result_free(r);

    assert_int_equal(testsrv_restart(srv), 0);
    uint64_t deadline = env_clock_mono_ms() + 10000;
    do {
        r = NULL;
        rc = meta_sync_get(s, "persist", &r);
        if (rc == 0)
            break;
        assert_true(rc == KVMESH_ECONN || rc == KVMESH_ETIMEDOUT);
        meta_result_free(r);
        nap_ms(50);
    } while (env_clock_mono_ms() < deadline);
    assert_int_equal(rc, 0);
    assert_true(r->kv.found);
    assert_memory_equal(r->kv.value, "before", 6);
    meta_result_free(r);
    put_ok(s, "persist", "after", 0);
    check_value(s, "persist", "after");
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* A server that accepts connections but never answers (stopped with SIGSTOP): the attempt ends
 * at the connect timeout with KVMESH_ECONN naming host:port, before the call's deadline; once
 * the server runs again the same handle reconnects. */
static void test_connect_timeout(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    assert_int_equal(testsrv_kill(srv, SIGSTOP), 0);
    meta_sync_t *s = NULL;
    meta_opts_t o = {.default_timeout_ms = 8000, .name = "itest"};
    assert_int_equal(meta_sync_open(&s, testsrv_url(srv), &o), 0);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", testsrv_port(srv));
    uint64_t t0 = env_clock_mono_ms();
    meta_result_t *r = NULL;
    assert_int_equal(meta_sync_get(s, "k", &r), KVMESH_ECONN);
    uint64_t took = env_clock_mono_ms() - t0;
    if (!strstr(r->errmsg, where) || !strstr(r->errmsg, "no connection within")) {
        print_error("message: %s\n", r->errmsg);
        fail();
    }
    meta_result_free(r);
    assert_true(took >= 2500 && took < 7500);
    assert_int_equal(testsrv_kill(srv, SIGCONT), 0);
    int rc;
    uint64_t deadline = env_clock_mono_ms() + 10000;
    do {
        r = NULL;
        rc = meta_sync_get(s, "k", &r);
        meta_result_free(r);
        if (rc == 0)
            break;
        nap_ms(50);
    } while (env_clock_mono_ms() < deadline);
    assert_int_equal(rc, 0);
    meta_sync_close(s);
    testsrv_stop(srv);
}

static void test_unreachable(void **state)
{
    (void)state;
    uint16_t port = testsrv_free_port();
    assert_true(port != 0);
    char url[64], where[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u", port);
    snprintf(where, sizeof(where), "127.0.0.1:%u", port);
    meta_sync_t *s = open_url(url);
    meta_result_t *r = NULL;
    uint64_t t0 = env_clock_mono_ms();
    assert_int_equal(meta_sync_get(s, "k", &r), KVMESH_ECONN);
    if (!strstr(r->errmsg, where)) {
        print_error("message: %s\n", r->errmsg);
        fail();
    }
    meta_result_free(r);
    assert_int_equal(meta_sync_lease_grant(s, 2000, &r), KVMESH_ECONN);
    meta_result_free(r);
    /* refused connections are reported at once, not at the deadline */
    assert_true(env_clock_mono_ms() - t0 < 2900);
    meta_sync_close(s);
}

static void test_db_and_namespace(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    char url[128];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u/3?ns=teamA", testsrv_port(srv));
    meta_sync_t *a = open_url(url);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%u/3?ns=teamB", testsrv_port(srv));
    meta_sync_t *b = open_url(url);
    put_ok(a, "shared/name", "from-a", 0);
    check_value(b, "shared/name", NULL);
    put_ok(b, "shared/name", "from-b", 0);
    check_value(a, "shared/name", "from-a");
    redisContext *c = raw(srv, NULL, NULL);
    assert_int_equal(raw_int(c, "DBSIZE"), 0); /* nothing in db 0 */
    redisReply *sel = redisCommand(c, "SELECT 3");
    freeReplyObject(sel);
    assert_int_equal(raw_int(c, "EXISTS kvm:{teamA}:k:shared/name kvm:{teamB}:k:shared/name"), 2);
    redisFree(c);
    meta_sync_close(a);
    meta_sync_close(b);
    testsrv_stop(srv);
}

/* ---- differential test against the memory backend ------------------------------------------ */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void same_kv(const meta_kv_t *a, const meta_kv_t *b, const char *what, int step)
{
    if (a->found != b->found || a->create_rev != b->create_rev || a->mod_rev != b->mod_rev ||
        a->version != b->version || a->lease != b->lease || a->value_len != b->value_len ||
        (a->value_len && memcmp(a->value, b->value, a->value_len) != 0) ||
        (a->found && strcmp(a->key, b->key) != 0)) {
        print_error("step %d %s: memory {found %d key %s c %lld m %lld ver %lld lease %lld} vs "
                    "redis {found %d key %s c %lld m %lld ver %lld lease %lld}\n",
                    step, what, a->found, a->found ? a->key : "-", (long long)a->create_rev,
                    (long long)a->mod_rev, (long long)a->version, (long long)a->lease, b->found,
                    b->found ? b->key : "-", (long long)b->create_rev, (long long)b->mod_rev,
                    (long long)b->version, (long long)b->lease);
        fail();
    }
}

static void same_result(int rca, const meta_result_t *a, int rcb, const meta_result_t *b,
                        const char *what, int step)
{
    if (rca != rcb || (rca == 0 && a->rev != b->rev)) {
        print_error("step %d %s: memory rc %d rev %lld (%s) vs redis rc %d rev %lld (%s)\n", step,
                    what, rca, (long long)a->rev, a->errmsg, rcb, (long long)b->rev, b->errmsg);
        fail();
    }
    if (rca)
        return;
    same_kv(&a->kv, &b->kv, what, step);
    assert_int_equal(a->n_kvs, b->n_kvs);
    assert_int_equal(a->more, b->more);
    for (size_t i = 0; i < a->n_kvs; i++)
        same_kv(&a->kvs[i], &b->kvs[i], what, step);
    assert_int_equal(a->succeeded, b->succeeded);
    assert_int_equal(a->n_deleted, b->n_deleted);
    assert_int_equal(a->n_ops, b->n_ops);
    for (size_t i = 0; i < a->n_ops; i++)
        same_kv(&a->ops[i], &b->ops[i], what, step);
    assert_int_equal(a->lease, b->lease);
}

/* A seeded random mix of txns (compares on every target, put/del/get, leases), ranges with
 * prefixes, start_after and small limits, and lease grant/revoke/keepalive, run on memory:// and
 * on redis://; every result must be identical (values, revisions, versions, pages, more). */
static void test_matches_memory_backend(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    meta_sync_t *r = open_url(testsrv_url(srv));
    meta_sync_t *m = open_url("memory://itest_meta_redis_diff");
    static const char *const keys[] = {"a",          "a/1", "a/2", "a/10", "ab",   "b",
                                       "b/\xc3\xa9", "b/z", "c",   "\x7f", "\xff", "\xff\xff"};
    static const char *const prefixes[] = {"", "a", "a/", "b/", "c", "\xff", "zz"};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    meta_lease_t leases[8];
    size_t n_leases = 0;
    const int steps = (int)testsrv_env_ms("KVMESH_META_REDIS_DIFF_STEPS", 600);
    for (int step = 0; step < steps; step++) {
        meta_result_t *ra = NULL, *rb = NULL;
        int rca, rcb;
        uint64_t x = rng_next(&seed);
        unsigned kind = (unsigned)(x % 10);
        if (kind < 6) {
            meta_cmp_t cmps[3];
            meta_op_t then_ops[3], else_ops[2];
            char vals[5][8];
            size_t nc = rng_next(&seed) % 3, nt = 1 + rng_next(&seed) % 3, ne = rng_next(&seed) % 3;
            for (size_t i = 0; i < nc; i++) {
                meta_cmp_t *c = &cmps[i];
                memset(c, 0, sizeof(*c));
                c->key = keys[rng_next(&seed) % KVM_ARRAY_SIZE(keys)];
                c->target = (enum meta_cmp_target)(rng_next(&seed) % 6);
                c->op = (enum meta_cmp_op)(rng_next(&seed) % 4);
                c->num = (int64_t)(rng_next(&seed) % 8);
                if (c->target == META_CMP_EXISTS) {
                    c->op = META_EQ;
                    c->num = (int64_t)(rng_next(&seed) % 2);
                } else if (c->target == META_CMP_VALUE) {
                    c->op = rng_next(&seed) % 2 ? META_EQ : META_NE;
                    snprintf(vals[i], sizeof(vals[i]), "v%u", (unsigned)(rng_next(&seed) % 4));
                    c->value = (const uint8_t *)vals[i];
                    c->value_len = strlen(vals[i]);
                } else if (c->target == META_CMP_LEASE) {
                    c->num = n_leases ? leases[rng_next(&seed) % n_leases] : 0;
                }
            }
            for (size_t br = 0; br < 2; br++) {
                meta_op_t *ops = br ? else_ops : then_ops;
                size_t n = br ? ne : nt;
                for (size_t i = 0; i < n; i++) {
                    meta_op_t *o = &ops[i];
                    memset(o, 0, sizeof(*o));
                    o->key = keys[rng_next(&seed) % KVM_ARRAY_SIZE(keys)];
                    unsigned t = (unsigned)(rng_next(&seed) % 5);
                    o->type = t < 3 ? META_OP_PUT : t == 3 ? META_OP_DEL : META_OP_GET;
                    if (o->type == META_OP_PUT) {
                        char *v = vals[2 + (br ? 0 : i % 3)];
                        snprintf(v, 8, "v%u", (unsigned)(rng_next(&seed) % 4));
                        o->value = (const uint8_t *)v;
                        o->value_len = strlen(v) - (rng_next(&seed) % 7 == 0 ? strlen(v) : 0);
                        if (n_leases && rng_next(&seed) % 4 == 0)
                            o->lease = leases[rng_next(&seed) % n_leases];
                    }
                }
            }
            rca = meta_sync_txn(m, cmps, nc, then_ops, nt, else_ops, ne, &ra);
            rcb = meta_sync_txn(r, cmps, nc, then_ops, nt, else_ops, ne, &rb);
            same_result(rca, ra, rcb, rb, "txn", step);
        } else if (kind < 8) {
            const char *pfx = prefixes[rng_next(&seed) % KVM_ARRAY_SIZE(prefixes)];
            const char *after =
                rng_next(&seed) % 2 ? keys[rng_next(&seed) % KVM_ARRAY_SIZE(keys)] : NULL;
            uint32_t limit = 1 + (uint32_t)(rng_next(&seed) % 4);
            rca = meta_sync_range(m, pfx, after, limit, &ra);
            rcb = meta_sync_range(r, pfx, after, limit, &rb);
            same_result(rca, ra, rcb, rb, "range", step);
        } else if (kind == 8) {
            const char *k = keys[rng_next(&seed) % KVM_ARRAY_SIZE(keys)];
            rca = meta_sync_get(m, k, &ra);
            rcb = meta_sync_get(r, k, &rb);
            same_result(rca, ra, rcb, rb, "get", step);
        } else {
            unsigned w = (unsigned)(rng_next(&seed) % 3);
            if (w == 0 || n_leases == 0) {
                rca = meta_sync_lease_grant(m, 60000, &ra);
                rcb = meta_sync_lease_grant(r, 60000, &rb);
                same_result(rca, ra, rcb, rb, "grant", step);
                if (rca == 0 && n_leases < KVM_ARRAY_SIZE(leases))
                    leases[n_leases++] = ra->lease;
            } else {
                meta_lease_t l = leases[rng_next(&seed) % n_leases];
                if (w == 1) {
                    rca = meta_sync_lease_revoke(m, l, &ra);
                    rcb = meta_sync_lease_revoke(r, l, &rb);
                    same_result(rca, ra, rcb, rb, "revoke", step);
                } else {
                    rca = meta_sync_lease_keepalive(m, l, &ra);
                    rcb = meta_sync_lease_keepalive(r, l, &rb);
                    same_result(rca, ra, rcb, rb, "keepalive", step);
                }
            }
        }
        meta_result_free(ra);
        meta_result_free(rb);
    }
    meta_sync_close(m);
    meta_sync_close(r);
    testsrv_stop(srv);
}

/* Numbers inside Lua are doubles. Lease ids from 1e14 on used to be written into key names by
 * Lua's tostring ("1e+14"), so a granted lease was unknown to keepalive; revisions beyond 2^53-1
 * would round (two writes with one mod_rev). Lease ids stay exact up to 2^53-1 and a write that
 * would take the revision beyond 2^53-1 is refused with KVMESH_ERANGE, changing nothing. */
static void test_large_numbers(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    redisContext *c = raw(srv, NULL, NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    meta_result_t *r = NULL;

    /* lease ids at 1e14 - 1, 1e14, 1e14 + 1 (the first decimal ids Lua would print as 1e+14) */
    freeReplyObject(redisCommand(c, "SET kvm:{kvmesh}:lid 99999999999998"));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(meta_sync_lease_grant(s, 30000, &r), 0);
        meta_lease_t l = r->lease;
        assert_int_equal(l, 99999999999999LL + i);
        meta_result_free(r);
        int rc = meta_sync_lease_keepalive(s, l, &r);
        if (rc)
            print_error("keepalive of lease %lld: %s\n", (long long)l, r->errmsg);
        assert_int_equal(rc, 0);
        assert_int_equal(r->lease, l);
        meta_result_free(r);
        put_ok(s, "big/leased", "v", l);
        assert_int_equal(meta_sync_get(s, "big/leased", &r), 0);
        assert_int_equal(r->kv.lease, l);
        meta_result_free(r);
        assert_int_equal(meta_sync_lease_revoke(s, l, &r), 0);
        meta_result_free(r);
        check_value(s, "big/leased", NULL);
    }

    /* revisions up to 2^53-1 are exact; the write beyond is refused and applies nothing */
    const long long top = 9007199254740991LL; /* 2^53 - 1 */
    freeReplyObject(redisCommand(c, "SET kvm:{kvmesh}:rev %lld", top - 3));
    for (long long want = top - 2; want <= top; want++) {
        char k[32];
        snprintf(k, sizeof(k), "big/%lld", want);
        meta_result_t *w = NULL;
        assert_int_equal(put(s, k, "v", 0, &w), 0);
        assert_int_equal(w->rev, want);
        meta_result_free(w);
        assert_int_equal(meta_sync_get(s, k, &r), 0);
        assert_int_equal(r->kv.mod_rev, want);
        assert_int_equal(r->kv.create_rev, want);
        assert_int_equal(r->rev, want);
        meta_result_free(r);
    }
    int rc = put(s, "big/over", "v", 0, &r);
    assert_int_equal(rc, KVMESH_ERANGE);
    assert_non_null(strstr(r->errmsg, "2^53"));
    meta_result_free(r);
    check_value(s, "big/over", NULL);
    assert_int_equal(raw_int(c, "GET kvm:{kvmesh}:rev"), top);
    assert_int_equal(raw_int(c, "EXISTS kvm:{kvmesh}:k:big/over"), 0);
    /* reads and compare-only txns still work at the limit */
    check_value(s, "big/9007199254740991", "v");
    meta_cmp_t cmp = {
        .key = "big/9007199254740991", .target = META_CMP_MOD_REV, .op = META_EQ, .num = top};
    assert_int_equal(meta_sync_txn(s, &cmp, 1, NULL, 0, NULL, 0, &r), 0);
    assert_true(r->succeeded);
    meta_result_free(r);
    redisFree(c);
    meta_sync_close(s);
    testsrv_stop(srv);
}

/* A txn that was handed to the connection when it broke may or may not have run: the caller must
 * be told KVMESH_EINDETERMINATE (as the etcd backend does), not KVMESH_ECONN, which callers read
 * as "not applied". Writes are paused (CLIENT PAUSE WRITE) so the txn waits inside Redis, then
 * the connection is killed. Calls made while the connection is down (never sent) stay ECONN. */
struct paused_txn {
    meta_sync_t *s;
    int rc;
    char msg[256];
};

static void *paused_txn_main(void *arg)
{
    struct paused_txn *p = arg;
    meta_result_t *r = NULL;
    p->rc = put(p->s, "ind/k", "v", 0, &r);
    snprintf(p->msg, sizeof(p->msg), "%s", r ? r->errmsg : "");
    meta_result_free(r);
    return NULL;
}

static void test_inflight_txn_indeterminate(void **state)
{
    (void)state;
    testsrv_t *srv = start_redis(NULL);
    redisContext *c = raw(srv, NULL, NULL);
    meta_sync_t *s = open_url(testsrv_url(srv));
    put_ok(s, "ind/warm", "x", 0); /* connected, scripts loaded */
    freeReplyObject(redisCommand(c, "CLIENT PAUSE 3000 WRITE"));
    struct paused_txn p = {.s = s};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, paused_txn_main, &p), 0);
    /* wait until the txn is blocked inside Redis */
    uint64_t end = env_clock_mono_ms() + 2000;
    while (env_clock_mono_ms() < end) {
        redisReply *i = redisCommand(c, "INFO clients");
        bool blocked = i && i->type == REDIS_REPLY_STRING && strstr(i->str, "blocked_clients:1");
        freeReplyObject(i);
        if (blocked)
            break;
        nap_ms(10);
    }
    freeReplyObject(redisCommand(c, "CLIENT KILL TYPE normal SKIPME yes"));
    pthread_join(th, NULL);
    freeReplyObject(redisCommand(c, "CLIENT UNPAUSE"));
    if (p.rc != KVMESH_EINDETERMINATE)
        print_error("in-flight txn on a killed connection: %s (%s)\n", kvmesh_errname(p.rc), p.msg);
    assert_int_equal(p.rc, KVMESH_EINDETERMINATE);
    assert_non_null(strstr(p.msg, "unknown"));
    /* the handle reconnects; here the txn did not run (it was still paused) */
    end = env_clock_mono_ms() + 5000;
    meta_result_t *r = NULL;
    int rc;
    while ((rc = meta_sync_get(s, "ind/k", &r)) != 0 && env_clock_mono_ms() < end) {
        meta_result_free(r);
        r = NULL;
        nap_ms(50);
    }
    assert_int_equal(rc, 0);
    assert_false(r->kv.found);
    meta_result_free(r);
    redisFree(c);
    meta_sync_close(s);
    testsrv_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noscript_reload),
        cmocka_unit_test(test_acl),
        cmocka_unit_test(test_reaper),
        cmocka_unit_test(test_expiry_inside_scripts),
        cmocka_unit_test(test_reaper_backlog),
        cmocka_unit_test(test_limits_and_bytes),
        cmocka_unit_test(test_reconnect_after_restart),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_db_and_namespace),
        cmocka_unit_test(test_matches_memory_backend),
        cmocka_unit_test(test_large_numbers),
        cmocka_unit_test(test_inflight_txn_indeterminate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
