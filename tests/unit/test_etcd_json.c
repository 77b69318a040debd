/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_etcd_json.c — unit tests of the etcd JSON gateway codec (src/meta/etcd_json.c): URL
 * parsing, base64, range bounds, request bodies (checked by parsing them back), and strict
 * decoding of well-formed, error and malformed replies (shapes taken from etcd 3.4's gateway).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "kvmesh.h"
#include "meta/etcd_json.h"

/* ---- URL ---------------------------------------------------------------------------------- */

static void test_url_ok(void **state)
{
    (void)state;
    etcd_url_t u;
    char err[256];
    assert_int_equal(etcd_url_parse("etcd://127.0.0.1:2379", &u, err, sizeof(err)), 0);
    assert_int_equal(u.n_eps, 1);
    assert_string_equal(u.eps[0].host, "127.0.0.1");
    assert_int_equal(u.eps[0].port, 2379);
    assert_int_equal(
        etcd_url_parse("etcd://a.example:1,[::1]:65535,host-b:22/", &u, err, sizeof(err)), 0);
    assert_int_equal(u.n_eps, 3);
    assert_string_equal(u.eps[0].host, "a.example");
    assert_string_equal(u.eps[1].host, "[::1]");
    assert_int_equal(u.eps[1].port, 65535);
    assert_string_equal(u.eps[2].host, "host-b");
    assert_int_equal(u.eps[2].port, 22);
}

static void test_url_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "etcd://",
        "etcd:///",
        "redis://127.0.0.1:1",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:",
        "etcd://127.0.0.1:0",
        "etcd://127.0.0.1:65536",
        "etcd://127.0.0.1:12a",
        "etcd://:2379",
        "etcd://a:1,",
        "etcd://,a:1",
        "etcd://a:1,,b:2",
        "etcd://a:1,a:1",
        "etcd://user:pw@a:1",
        "etcd://a:1/path",
        "etcd://a:1?x=y",
        "etcd://[::1:2379",
        "etcd://[]:2379",
        "etcd://[zz]:2379",
        "etcd://a b:1",
        "etcd://a:99999999999999999999",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        etcd_url_t u;
        char err[256] = "";
        int rc = etcd_url_parse(bad[i], &u, err, sizeof(err));
        if (rc != KVMESH_EURL)
            fail_msg("URL '%s' accepted (rc %d)", bad[i], rc);
        assert_true(err[0] != '\0');
    }
    /* too many endpoints */
    char big[4096] = "etcd://";
    for (int i = 0; i <= ETCD_MAX_ENDPOINTS; i++) {
        char part[32];
        snprintf(part, sizeof(part), "%sh:%d", i ? "," : "", i + 1);
        strcat(big, part);
    }
    etcd_url_t u;
    char err[256];
    assert_int_equal(etcd_url_parse(big, &u, err, sizeof(err)), KVMESH_EURL);
    assert_non_null(strstr(err, "more than"));
}

/* ---- base64 ------------------------------------------------------------------------------- */

static void test_b64(void **state)
{
    (void)state;
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char out[32];
        etcd_b64_encode((const uint8_t *)plain[i], strlen(plain[i]), out);
        assert_string_equal(out, enc[i]);
        assert_int_equal(etcd_b64_len(strlen(plain[i])), strlen(enc[i]));
        uint8_t *d;
        size_t n;
        assert_int_equal(etcd_b64_decode(enc[i], strlen(enc[i]), &d, &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(d, plain[i], n);
        free(d);
    }
    /* every byte value round-trips */
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    char e[400];
    etcd_b64_encode(all, 256, e);
    uint8_t *d;
    size_t n;
    assert_int_equal(etcd_b64_decode(e, strlen(e), &d, &n), 0);
    assert_int_equal(n, 256);
    assert_memory_equal(d, all, 256);
    free(d);
    static const char *const bad[] = {"Z", "Zg=", "Zg=a", "Z===", "Zm9v!A==", "=Zm9", "Zg==Zg=="};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(etcd_b64_decode(bad[i], strlen(bad[i]), &d, &n), -1);
}

/* ---- range bounds -------------------------------------------------------------------------- */

static void check_bounds(const char *prefix, const char *after, const char *key, size_t kn,
                         const char *end, size_t en, bool empty)
{
    uint8_t *k, *e;
    size_t gk, ge;
    bool em;
    assert_int_equal(etcd_range_bounds(prefix, after, &k, &gk, &e, &ge, &em), 0);
    assert_int_equal(gk, kn);
    assert_memory_equal(k, key, kn);
    assert_int_equal(ge, en);
    assert_memory_equal(e, end, en);
    assert_int_equal(em, empty);
    free(k);
    free(e);
}

static void test_range_bounds(void **state)
{
    (void)state;
    check_bounds("a/", NULL, "a/", 2, "a0", 2, false);
    check_bounds("a/", "a/x", "a/x\0", 4, "a0", 2, false);
    check_bounds("a/", "0", "a/", 2, "a0", 2, false);       /* start_after below the prefix */
    check_bounds("a/", "a0", "a0\0", 3, "a0", 2, true);     /* start_after beyond the prefix */
    check_bounds("", NULL, "\0", 1, "\0", 1, false);        /* everything */
    check_bounds("", "k", "k\0", 2, "\0", 1, false);        /* everything after k */
    check_bounds("a\xff", NULL, "a\xff", 2, "b", 1, false); /* trailing 0xff dropped */
    check_bounds("\xff\xff", NULL, "\xff\xff", 2, "\0", 1, false);
}

/* ---- request bodies ------------------------------------------------------------------------ */

static json_t *parse(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    assert_non_null(j);
    return j;
}

static const char *sget(json_t *o, const char *path)
{
    /* path "a.b" or "a[0].b" style via json_object_get chain; enough for these checks */
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *cur = o;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, ".")) {
        char *br = strchr(tok, '[');
        if (br) {
            *br = '\0';
            cur = json_object_get(cur, tok);
            cur = json_array_get(cur, (size_t)atoi(br + 1));
        } else {
            cur = json_object_get(cur, tok);
        }
    }
    assert_non_null(cur);
    assert_true(json_is_string(cur));
    return json_string_value(cur);
}

static void test_requests(void **state)
{
    (void)state;
    char err[256];
    char *body;
    assert_int_equal(etcd_json_get_req("foo", &body, err, sizeof(err)), 0);
    json_t *j = parse(body);
    assert_string_equal(sget(j, "key"), "Zm9v");
    json_decref(j);
    free(body);

    assert_int_equal(etcd_json_range_req("a/", "a/x", 10, &body, err, sizeof(err)), 0);
    j = parse(body);
    assert_string_equal(sget(j, "key"), "YS94AA==");   /* "a/x\0" */
    assert_string_equal(sget(j, "range_end"), "YTA="); /* "a0" */
    assert_string_equal(sget(j, "limit"), "10");
    json_decref(j);
    free(body);

    assert_int_equal(etcd_json_lease_grant_req(1, &body, err, sizeof(err)), 0);
    j = parse(body);
    assert_string_equal(sget(j, "TTL"), "1");
    json_decref(j);
    free(body);
    assert_int_equal(etcd_json_lease_grant_req(2001, &body, err, sizeof(err)), 0);
    j = parse(body);
    assert_string_equal(sget(j, "TTL"), "3");
    json_decref(j);
    free(body);
    assert_int_equal(etcd_json_lease_id_req(7587871234567890123LL, &body, err, sizeof(err)), 0);
    j = parse(body);
    assert_string_equal(sget(j, "ID"), "7587871234567890123");
    json_decref(j);
    free(body);

    meta_cmp_t cmps[] = {
        {.key = "k", .target = META_CMP_EXISTS, .op = META_EQ, .num = 0},
        {.key = "k", .target = META_CMP_EXISTS, .op = META_EQ, .num = 1},
        {.key = "k",
         .target = META_CMP_VALUE,
         .op = META_NE,
         .value = (const uint8_t *)"v",
         .value_len = 1},
        {.key = "k", .target = META_CMP_VERSION, .op = META_LT, .num = 3},
        {.key = "k", .target = META_CMP_MOD_REV, .op = META_GT, .num = 4},
        {.key = "k", .target = META_CMP_CREATE_REV, .op = META_EQ, .num = 5},
        {.key = "k", .target = META_CMP_LEASE, .op = META_EQ, .num = 6},
    };
    meta_op_t then_ops[] = {
        {.type = META_OP_PUT,
         .key = "p",
         .value = (const uint8_t *)"xy",
         .value_len = 2,
         .lease = 9},
        {.type = META_OP_DEL, .key = "d"},
    };
    meta_op_t else_ops[] = {{.type = META_OP_GET, .key = "g"}};
    assert_int_equal(etcd_json_txn_req(cmps, 7, then_ops, 2, else_ops, 1, &body, err, sizeof(err)),
                     0);
    j = parse(body);
    assert_string_equal(sget(j, "compare[0].target"), "CREATE");
    assert_string_equal(sget(j, "compare[0].result"), "EQUAL");
    assert_string_equal(sget(j, "compare[0].create_revision"), "0");
    assert_string_equal(sget(j, "compare[1].target"), "CREATE");
    assert_string_equal(sget(j, "compare[1].result"), "GREATER");
    assert_string_equal(sget(j, "compare[1].create_revision"), "0");
    assert_string_equal(sget(j, "compare[2].target"), "VALUE");
    assert_string_equal(sget(j, "compare[2].result"), "NOT_EQUAL");
    assert_string_equal(sget(j, "compare[2].value"), "dg==");
    assert_string_equal(sget(j, "compare[3].target"), "VERSION");
    assert_string_equal(sget(j, "compare[3].result"), "LESS");
    assert_string_equal(sget(j, "compare[3].version"), "3");
    assert_string_equal(sget(j, "compare[4].target"), "MOD");
    assert_string_equal(sget(j, "compare[4].mod_revision"), "4");
    assert_string_equal(sget(j, "compare[5].create_revision"), "5");
    assert_string_equal(sget(j, "compare[6].target"), "LEASE");
    assert_string_equal(sget(j, "compare[6].lease"), "6");
    assert_string_equal(sget(j, "success[0].request_put.key"), "cA==");
    assert_string_equal(sget(j, "success[0].request_put.value"), "eHk=");
    assert_string_equal(sget(j, "success[0].request_put.lease"), "9");
    assert_string_equal(sget(j, "success[1].request_delete_range.key"), "ZA==");
    assert_string_equal(sget(j, "failure[0].request_range.key"), "Zw==");
    json_decref(j);
    free(body);

    meta_cmp_t bad = {.key = "k", .target = META_CMP_EXISTS, .op = META_LT, .num = 1};
    assert_int_equal(etcd_json_txn_req(&bad, 1, NULL, 0, NULL, 0, &body, err, sizeof(err)),
                     KVMESH_EINVAL);
    assert_null(body);
}

/* ---- replies ------------------------------------------------------------------------------- */

#define HDR                                                                                        \
    "\"header\":{\"cluster_id\":\"1\",\"member_id\":\"2\",\"revision\":\"42\",\"raft_term\":"      \
    "\"2\"}"

static int dec(enum etcd_resp_kind k, const char *body, long status, const etcd_txn_shape_t *sh,
               etcd_resp_t *r)
{
    int rc = etcd_json_decode(k, body, strlen(body), status, sh, r);
    assert_int_equal(rc, r->res.rc);
    assert_non_null(r->res.errmsg);
    return rc;
}

static void test_decode_get_range(void **state)
{
    (void)state;
    etcd_resp_t r;
    assert_int_equal(
        dec(ETCD_RESP_GET,
            "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"2\",\"mod_revision\":\"5\","
            "\"version\":\"3\",\"value\":\"YmFy\",\"lease\":\"77\"}],\"count\":\"1\"}",
            200, NULL, &r),
        0);
    assert_int_equal(r.res.rev, 42);
    assert_true(r.res.kv.found);
    assert_string_equal(r.res.kv.key, "foo");
    assert_int_equal(r.res.kv.value_len, 3);
    assert_memory_equal(r.res.kv.value, "bar", 3);
    assert_int_equal(r.res.kv.create_rev, 2);
    assert_int_equal(r.res.kv.mod_rev, 5);
    assert_int_equal(r.res.kv.version, 3);
    assert_int_equal(r.res.kv.lease, 77);
    etcd_resp_free(&r);

    /* absent key; empty value omitted */
    assert_int_equal(dec(ETCD_RESP_GET, "{" HDR "}", 200, NULL, &r), 0);
    assert_false(r.res.kv.found);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_GET,
                         "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"4\","
                         "\"mod_revision\":\"5\",\"version\":\"2\"}]}",
                         200, NULL, &r),
                     0);
    assert_true(r.res.kv.found);
    assert_int_equal(r.res.kv.value_len, 0);
    etcd_resp_free(&r);

    etcd_txn_shape_t sh = {.range_limit = 2};
    assert_int_equal(dec(ETCD_RESP_RANGE,
                         "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"create_revision\":\"1\","
                         "\"mod_revision\":\"1\",\"version\":\"1\"},{\"key\":\"Yg==\","
                         "\"create_revision\":\"2\",\"mod_revision\":\"2\",\"version\":\"1\"}],"
                         "\"more\":true,\"count\":\"3\"}",
                         200, &sh, &r),
                     0);
    assert_int_equal(r.res.n_kvs, 2);
    assert_string_equal(r.res.kvs[0].key, "a");
    assert_string_equal(r.res.kvs[1].key, "b");
    assert_true(r.res.more);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_RANGE, "{" HDR "}", 200, &sh, &r), 0);
    assert_int_equal(r.res.n_kvs, 0);
    assert_false(r.res.more);
    etcd_resp_free(&r);
}

static void test_decode_txn(void **state)
{
    (void)state;
    meta_op_t then_ops[] = {{.type = META_OP_PUT, .key = "a"}, {.type = META_OP_DEL, .key = "b"}};
    meta_op_t else_ops[] = {{.type = META_OP_GET, .key = "a"}};
    etcd_txn_shape_t sh = {.then_ops = then_ops, .n_then = 2, .else_ops = else_ops, .n_else = 1};
    etcd_resp_t r;
    assert_int_equal(dec(ETCD_RESP_TXN,
                         "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_put\":{"
                         "\"header\":{\"revision\":\"42\"}}},{\"response_delete_range\":{"
                         "\"header\":{\"revision\":\"42\"},\"deleted\":\"1\"}}]}",
                         200, &sh, &r),
                     0);
    assert_true(r.res.succeeded);
    assert_int_equal(r.res.n_ops, 2);
    assert_false(r.res.ops[0].found);
    assert_int_equal(r.res.n_deleted, 1);
    etcd_resp_free(&r);
    /* failed compare: "succeeded" omitted */
    assert_int_equal(dec(ETCD_RESP_TXN,
                         "{" HDR ",\"responses\":[{\"response_range\":{\"header\":{},\"kvs\":["
                         "{\"key\":\"YQ==\",\"create_revision\":\"3\",\"mod_revision\":\"3\","
                         "\"version\":\"1\",\"value\":\"eA==\"}],\"count\":\"1\"}}]}",
                         200, &sh, &r),
                     0);
    assert_false(r.res.succeeded);
    assert_int_equal(r.res.n_ops, 1);
    assert_true(r.res.ops[0].found);
    assert_string_equal(r.res.ops[0].key, "a");
    assert_memory_equal(r.res.ops[0].value, "x", 1);
    etcd_resp_free(&r);
    /* wrong number or kind of responses */
    assert_int_equal(
        dec(ETCD_RESP_TXN, "{" HDR ",\"succeeded\":true,\"responses\":[]}", 200, &sh, &r),
        KVMESH_EBACKEND);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_TXN,
                         "{" HDR ",\"responses\":[{\"response_put\":{\"header\":{}}}]}", 200, &sh,
                         &r),
                     KVMESH_EBACKEND);
    assert_non_null(strstr(r.res.errmsg, "response_range"));
    etcd_resp_free(&r);
}

static void test_decode_leases(void **state)
{
    (void)state;
    etcd_resp_t r;
    assert_int_equal(dec(ETCD_RESP_LEASE_GRANT,
                         "{" HDR ",\"ID\":\"4111120392948072456\",\"TTL\":\"5\"}", 200, NULL, &r),
                     0);
    assert_int_equal(r.res.lease, 4111120392948072456LL);
    assert_int_equal(r.res.ttl_ms, 5000);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_LEASE_KEEPALIVE,
                         "{\"result\":{" HDR ",\"ID\":\"12\",\"TTL\":\"2\"}}", 200, NULL, &r),
                     0);
    assert_int_equal(r.res.lease, 12);
    assert_int_equal(r.res.ttl_ms, 2000);
    etcd_resp_free(&r);
    /* keepalive of an unknown lease: TTL omitted */
    assert_int_equal(
        dec(ETCD_RESP_LEASE_KEEPALIVE, "{\"result\":{" HDR ",\"ID\":\"1\"}}", 200, NULL, &r),
        KVMESH_ENOENT);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_LEASE_TTL,
                         "{" HDR ",\"ID\":\"7\",\"TTL\":\"1\",\"grantedTTL\":\"2\"}", 200, NULL,
                         &r),
                     0);
    assert_int_equal(r.res.ttl_ms, 1000);
    etcd_resp_free(&r);
    assert_int_equal(
        dec(ETCD_RESP_LEASE_TTL, "{" HDR ",\"ID\":\"7\",\"TTL\":\"-1\"}", 200, NULL, &r),
        KVMESH_ENOENT);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_LEASE_REVOKE,
                         "{\"error\":\"etcdserver: requested lease not found\",\"message\":"
                         "\"etcdserver: requested lease not found\",\"code\":5}",
                         404, NULL, &r),
                     KVMESH_ENOENT);
    assert_non_null(strstr(r.res.errmsg, "requested lease not found"));
    assert_int_equal(r.grpc_code, 5);
    etcd_resp_free(&r);
    assert_int_equal(dec(ETCD_RESP_LEASE_REVOKE, "{" HDR "}", 200, NULL, &r), 0);
    assert_int_equal(r.res.rev, 42);
    etcd_resp_free(&r);
    /* streaming error wrapper */
    assert_int_equal(dec(ETCD_RESP_LEASE_KEEPALIVE,
                         "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"etcdserver: "
                         "no leader\",\"http_status\":\"Service Unavailable\"}}",
                         200, NULL, &r),
                     KVMESH_EUNAVAILABLE);
    assert_non_null(strstr(r.res.errmsg, "no leader"));
    etcd_resp_free(&r);
}

static void test_decode_errors(void **state)
{
    (void)state;
    etcd_txn_shape_t sh = {.range_limit = 1};
    static const struct {
        enum etcd_resp_kind kind;
        const char *body;
        long status;
        int rc;
    } cases[] = {
        {ETCD_RESP_GET, "", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "not json", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "[]", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{}", 200, KVMESH_EBACKEND},              /* no header */
        {ETCD_RESP_GET, "{\"header\":{}}", 200, KVMESH_EBACKEND}, /* no revision */
        {ETCD_RESP_GET, "{\"header\":[]}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{\"header\":{\"revision\":\"x1\"}}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{\"header\":{\"revision\":true}}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{\"header\":{\"revision\":\"99999999999999999999\"}}", 200,
         KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{\"header\":{\"revision\":\"-3\"}}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{" HDR ",\"kvs\":{}}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{" HDR ",\"kvs\":[1]}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{" HDR ",\"kvs\":[{}]}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{" HDR ",\"kvs\":[{\"key\":\"!!!!\"}]}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET,
         "{" HDR ",\"kvs\":[{\"key\":\"AA==\",\"create_revision\":\"1\","
         "\"mod_revision\":\"1\",\"version\":\"1\"}]}",
         200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\"}]}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET,
         "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"create_revision\":\"1\","
         "\"mod_revision\":\"1\",\"version\":\"1\",\"value\":5}]}",
         200, KVMESH_EBACKEND},
        {ETCD_RESP_GET,
         "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"create_revision\":\"1\","
         "\"mod_revision\":\"1\",\"version\":\"1\"},{\"key\":\"Yg==\","
         "\"create_revision\":\"1\",\"mod_revision\":\"1\",\"version\":\"1\"}]}",
         200, KVMESH_EBACKEND},
        {ETCD_RESP_RANGE,
         "{" HDR ",\"kvs\":[{\"key\":\"Yg==\",\"create_revision\":\"1\","
         "\"mod_revision\":\"1\",\"version\":\"1\"},{\"key\":\"YQ==\","
         "\"create_revision\":\"1\",\"mod_revision\":\"1\",\"version\":\"1\"}]}",
         200, KVMESH_EBACKEND}, /* more than the limit (and out of order) */
        {ETCD_RESP_RANGE, "{" HDR ",\"more\":\"yes\"}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "{\"header\":{\"revision\":\"1\"},\"header\":{\"revision\":\"2\"}}", 200,
         KVMESH_EBACKEND}, /* duplicate keys */
        {ETCD_RESP_LEASE_GRANT, "{" HDR "}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_LEASE_GRANT, "{" HDR ",\"ID\":\"0\",\"TTL\":\"5\"}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_LEASE_GRANT, "{" HDR ",\"ID\":\"1\",\"TTL\":\"5\",\"error\":\"boom\"}", 200,
         KVMESH_EBACKEND},
        {ETCD_RESP_LEASE_KEEPALIVE, "{" HDR ",\"ID\":\"1\",\"TTL\":\"5\"}", 200,
         KVMESH_EBACKEND}, /* not wrapped in "result" */
        {ETCD_RESP_LEASE_TTL, "{" HDR ",\"TTL\":\"9223372036854775807\"}", 200, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "Not Found", 404, KVMESH_EBACKEND},
        {ETCD_RESP_GET, "<html>", 503, KVMESH_EUNAVAILABLE},
        {ETCD_RESP_GET, "{}", 502, KVMESH_EUNAVAILABLE},
        {ETCD_RESP_TXN,
         "{\"error\":\"etcdserver: duplicate key given in txn request\",\"message\":\"etcdserver: "
         "duplicate key given in txn request\",\"code\":3}",
         400, KVMESH_EINVAL},
        {ETCD_RESP_TXN,
         "{\"error\":\"x\",\"message\":\"etcdserver: request timed out\","
         "\"code\":14}",
         503, KVMESH_EUNAVAILABLE},
        {ETCD_RESP_GET, "{\"error\":\"x\",\"code\":0}", 500, KVMESH_EBACKEND},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        etcd_resp_t r;
        meta_op_t op = {.type = META_OP_PUT, .key = "a"};
        etcd_txn_shape_t tsh = {.then_ops = &op, .n_then = 1, .else_ops = &op, .n_else = 1};
        const etcd_txn_shape_t *s = cases[i].kind == ETCD_RESP_TXN ? &tsh : &sh;
        int rc = etcd_json_decode(cases[i].kind, cases[i].body, strlen(cases[i].body),
                                  cases[i].status, s, &r);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s): rc %d, want %d (%s)", i, cases[i].body, rc, cases[i].rc,
                     r.res.errmsg);
        assert_int_equal(r.res.rc, rc);
        assert_true(r.res.errmsg != NULL && r.res.errmsg[0] != '\0');
        etcd_resp_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_ok),        cmocka_unit_test(test_url_bad),
        cmocka_unit_test(test_b64),           cmocka_unit_test(test_range_bounds),
        cmocka_unit_test(test_requests),      cmocka_unit_test(test_decode_get_range),
        cmocka_unit_test(test_decode_txn),    cmocka_unit_test(test_decode_leases),
        cmocka_unit_test(test_decode_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
