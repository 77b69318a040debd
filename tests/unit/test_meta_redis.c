/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_meta_redis.c — unit tests of the Redis backend's URL parser (meta_redis_url.c): every
 * accepted form with its parsed fields, and malformed URLs rejected with KVMESH_EURL and a
 * message that names the problem. The backend's behaviour against a real Redis is tested in
 * tests/integration/meta_redis.c and the conformance suite.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <uv.h>

#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "meta/meta_redis_url.h"

static void test_minimal(void **state)
{
    (void)state;
    meta_redis_url_t u;
    assert_int_equal(meta_redis_url_parse("redis://127.0.0.1:6380", &u), 0);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 0);
    assert_false(u.has_user);
    assert_false(u.has_pass);
    assert_string_equal(u.ns, META_REDIS_NS_DEFAULT);
}

static void test_defaults_and_db(void **state)
{
    (void)state;
    meta_redis_url_t u;
    assert_int_equal(meta_redis_url_parse("redis://localhost", &u), 0);
    assert_string_equal(u.host, "localhost");
    assert_int_equal(u.port, 6379);
    assert_int_equal(meta_redis_url_parse("redis://localhost/", &u), 0);
    assert_int_equal(u.db, 0);
    assert_int_equal(meta_redis_url_parse("redis://redis-1.example.org:7000/15", &u), 0);
    assert_string_equal(u.host, "redis-1.example.org");
    assert_int_equal(u.port, 7000);
    assert_int_equal(u.db, 15);
    assert_int_equal(meta_redis_url_parse("redis://h:1/0?ns=tenant_a.prod-1", &u), 0);
    assert_string_equal(u.ns, "tenant_a.prod-1");
    assert_int_equal(u.port, 1);
    assert_int_equal(meta_redis_url_parse("redis://h:65535?ns=x", &u), 0);
    assert_int_equal(u.port, 65535);
    assert_string_equal(u.ns, "x");
}

static void test_credentials(void **state)
{
    (void)state;
    meta_redis_url_t u;
    assert_int_equal(meta_redis_url_parse("redis://alice:s3cret@10.0.0.1:6379/2", &u), 0);
    assert_true(u.has_user);
    assert_true(u.has_pass);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.pass, "s3cret");
    assert_string_equal(u.host, "10.0.0.1");
    assert_int_equal(u.db, 2);
    /* password only: the default user */
    assert_int_equal(meta_redis_url_parse("redis://:pw@h:1", &u), 0);
    assert_false(u.has_user);
    assert_true(u.has_pass);
    assert_string_equal(u.pass, "pw");
    /* percent-escapes, and '@' / ':' inside the password */
    assert_int_equal(meta_redis_url_parse("redis://bob:p%40ss%3Aw%2Fd@h:1", &u), 0);
    assert_string_equal(u.user, "bob");
    assert_string_equal(u.pass, "p@ss:w/d");
    /* a raw '@' in the password: the last '@' ends the credentials */
    assert_int_equal(meta_redis_url_parse("redis://bob:a@b@h:1", &u), 0);
    assert_string_equal(u.pass, "a@b");
    assert_string_equal(u.host, "h");
}

static void test_ipv6(void **state)
{
    (void)state;
    meta_redis_url_t u;
    assert_int_equal(meta_redis_url_parse("redis://[::1]:6390/3", &u), 0);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 6390);
    assert_int_equal(u.db, 3);
    assert_int_equal(meta_redis_url_parse("redis://[fe80::1]", &u), 0);
    assert_int_equal(u.port, 6379);
}

/* A rejected URL: KVMESH_EURL and a message containing want. */
static void bad(const char *url, const char *want)
{
    meta_redis_url_t u;
    int rc = meta_redis_url_parse(url, &u);
    if (rc != KVMESH_EURL || !strstr(kvmesh_last_error(), want)) {
        print_error("url '%s': rc %d, message '%s', wanted '%s'\n", url ? url : "(null)", rc,
                    kvmesh_last_error(), want);
        fail();
    }
}

static void test_bad_urls(void **state)
{
    (void)state;
    bad("rediss://h:6379", "TLS");
    bad("rediss://user:pw@h:6379/1", "no TLS support");
    bad("http://h:6379", "must start with redis://");
    bad("REDIS://h:1", "must start with redis://");
    bad("redis://", "missing host");
    bad("redis://:6379", "missing host");
    bad("redis://h:", "port '' is not a number");
    bad("redis://h:0", "port '0'");
    bad("redis://h:65536", "port '65536'");
    bad("redis://h:12ab", "port '12ab'");
    bad("redis://h:1:2", "more than one ':'");
    bad("redis://::1:6379", "more than one ':'");
    bad("redis://[::1:6379", "without closing ']'");
    bad("redis://[::g]:1", "IPv6 literal");
    bad("redis://[::1]x", "expected ':port'");
    bad("redis://h_1:1", "bad character '_' in host");
    bad("redis://h:1/x", "database 'x'");
    bad("redis://h:1/-1", "database '-1'");
    bad("redis://h:1/99999999999", "database");
    bad("redis://h:1/1/2", "database '1/2'");
    bad("redis://alice@h:1", "user without password");
    bad("redis://alice:@h:1", "empty password");
    bad("redis://a:%4@h:1", "truncated percent-escape in the password");
    bad("redis://a:%zz@h:1", "bad percent-escape in the password");
    bad("redis://a%00:p@h:1", "%00");
    bad("redis://h:1?db=2", "unknown or empty parameter 'db=2'");
    bad("redis://h:1?ns=", "unknown or empty parameter 'ns='");
    bad("redis://h:1?ns=a&ns=b", "ns given twice");
    bad("redis://h:1?ns=a&", "trailing '&'");
    bad("redis://h:1?ns=a{b}", "bad character '{' in ns");
    bad("redis://h:1#frag", "fragment");
    bad("redis://h :1", "0x20");
    bad("redis://h:1\n", "0x0a");
    bad(NULL, "missing");
    char big[META_REDIS_URL_MAX + 32];
    memset(big, 'a', sizeof(big) - 1);
    memcpy(big, "redis://", 8);
    big[sizeof(big) - 1] = '\0';
    bad(big, "longer than");
    char host[META_REDIS_HOST_MAX + 32];
    snprintf(host, sizeof(host), "redis://%0*d:1", META_REDIS_HOST_MAX + 1, 0);
    bad(host, "host name longer than");
    char ns[128];
    snprintf(ns, sizeof(ns), "redis://h:1?ns=%0*d", META_REDIS_NS_MAX + 1, 0);
    bad(ns, "ns longer than");
    char cred[600];
    snprintf(cred, sizeof(cred), "redis://u:%0*d@h:1", META_REDIS_CRED_MAX + 1, 0);
    bad(cred, "password is longer than");
}

/* Through meta_open: rediss:// is refused (TLS), a malformed redis:// URL gets the parser's
 * message, and nothing is left open. */
static void test_open_refusals(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    env_t *env = NULL;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    meta_t *m = NULL;
    assert_int_equal(meta_open(&m, env, "rediss://127.0.0.1:6379", NULL), KVMESH_EURL);
    assert_non_null(strstr(kvmesh_last_error(), "TLS"));
    assert_null(m);
    assert_int_equal(meta_open(&m, env, "redis://127.0.0.1:99999", NULL), KVMESH_EURL);
    assert_non_null(strstr(kvmesh_last_error(), "port '99999'"));
    assert_null(m);
    assert_int_equal(meta_open(&m, env, "redis://bob@127.0.0.1:1", NULL), KVMESH_EURL);
    assert_non_null(strstr(kvmesh_last_error(), "user without password"));
    assert_null(m);
    env_uv_free(env);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal),     cmocka_unit_test(test_defaults_and_db),
        cmocka_unit_test(test_credentials), cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_bad_urls),    cmocka_unit_test(test_open_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
