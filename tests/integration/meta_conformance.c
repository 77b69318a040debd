/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_conformance.c — ONE set of tests for the semantics of meta.h, run against the backend
 * named by argv[1]: memory, redis or etcd. For redis/etcd the suite starts a real server with
 * testsrv (and a second one for the kill/restart test) and stops it afterwards. Every test's name
 * carries the backend ("redis: txn_compares").
 *
 *   itest_meta_conformance memory|redis|etcd [cmocka test filter]
 *
 * Environment: KVMESH_META_CONF_MS — duration of each concurrent-writer phase (default 5000).
 *
 * Internal mode (used by the multi-process writers of server backends):
 *   itest_meta_conformance --cas-writer URL KEY DURATION_MS   prints "successes N" on stdout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "env/clock.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "meta/meta_memory.h"
#include "testsrv.h"

#define N_WRITERS  8
#define RANGE_KEYS 10000
#define CALL_SLACK_MS                                                                              \
    3000                      /* a failing call must answer within its deadline plus this          \
                                     (scheduling slack of a loaded 2-core machine) */
#define FAIL_TIMEOUT_MS  2000 /* deadline used by the failure tests */
#define RECOVER_BOUND_MS 20000

static const char *g_backend; /* "memory", "redis", "etcd" */
static testsrv_t *g_srv;      /* redis/etcd */
static char g_url[256];
static meta_sync_t *g_m; /* the suite's main handle (keeps a memory store alive) */
static uint64_t g_phase_ms;

static bool is_server(void)
{
    return strcmp(g_backend, "memory") != 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#define LOG(...)                                                                                   \
    do {                                                                                           \
        printf("[%s] ", g_backend);                                                                \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

/* Asserts rc == 0 and shows the backend's message otherwise. */
#define OK(expr, res)                                                                              \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0)                                                                              \
            fail_msg("[%s] %s failed: %s (%s)", g_backend, #expr, kvmesh_errname(rc_),             \
                     (res) ? (res)->errmsg : kvmesh_last_error());                                 \
    } while (0)

static meta_sync_t *open_handle(uint32_t timeout_ms)
{
    meta_opts_t o = {.default_timeout_ms = timeout_ms, .name = "conformance"};
    meta_sync_t *s = NULL;
    int rc = meta_sync_open(&s, g_url, &o);
    if (rc)
        fail_msg("[%s] meta_sync_open(%s): %s", g_backend, g_url, kvmesh_last_error());
    return s;
}

/* ---- small helpers ------------------------------------------------------------------------- */

static meta_op_t put_op(const char *key, const char *val)
{
    meta_op_t o = {
        .type = META_OP_PUT, .key = key, .value = (const uint8_t *)val, .value_len = strlen(val)};
    return o;
}

static meta_op_t del_op(const char *key)
{
    meta_op_t o = {.type = META_OP_DEL, .key = key};
    return o;
}

static meta_op_t get_op(const char *key)
{
    meta_op_t o = {.type = META_OP_GET, .key = key};
    return o;
}

static int64_t put(meta_sync_t *s, const char *key, const char *val, meta_lease_t lease)
{
    meta_op_t o = put_op(key, val);
    o.lease = lease;
    meta_result_t *r = NULL;
    OK(meta_sync_txn(s, NULL, 0, &o, 1, NULL, 0, &r), r);
    assert_true(r->succeeded);
    int64_t rev = r->rev;
    meta_result_free(r);
    return rev;
}

static int64_t del(meta_sync_t *s, const char *key, int64_t *n_deleted)
{
    meta_op_t o = del_op(key);
    meta_result_t *r = NULL;
    OK(meta_sync_txn(s, NULL, 0, &o, 1, NULL, 0, &r), r);
    int64_t rev = r->rev;
    if (n_deleted)
        *n_deleted = r->n_deleted;
    meta_result_free(r);
    return rev;
}

static meta_result_t *get(meta_sync_t *s, const char *key)
{
    meta_result_t *r = NULL;
    OK(meta_sync_get(s, key, &r), r);
    return r;
}

static bool value_is(const meta_kv_t *kv, const char *v)
{
    return kv->found && kv->value_len == strlen(v) && memcmp(kv->value, v, kv->value_len) == 0;
}

static int64_t current_rev(meta_sync_t *s)
{
    meta_result_t *r = get(s, "conf/__rev_probe");
    int64_t rev = r->rev;
    meta_result_free(r);
    return rev;
}

/* ---- get / put / delete / revisions / versions ---------------------------------------------- */

static void test_kv_basics(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    const char *k = "conf/kv/a";
    meta_result_t *r = get(s, k);
    assert_false(r->kv.found);
    assert_true(r->rev >= 1);
    int64_t r0 = r->rev;
    meta_result_free(r);

    int64_t r1 = put(s, k, "v1", 0);
    assert_int_equal(r1, r0 + 1); /* one change, one revision (nobody else writes now) */
    r = get(s, k);
    assert_true(value_is(&r->kv, "v1"));
    assert_string_equal(r->kv.key, k);
    assert_int_equal(r->kv.create_rev, r1);
    assert_int_equal(r->kv.mod_rev, r1);
    assert_int_equal(r->kv.version, 1);
    assert_int_equal(r->kv.lease, 0);
    assert_true(r->rev >= r1);
    meta_result_free(r);

    int64_t r2 = put(s, k, "v2", 0);
    assert_int_equal(r2, r1 + 1);
    r = get(s, k);
    assert_true(value_is(&r->kv, "v2"));
    assert_int_equal(r->kv.create_rev, r1);
    assert_int_equal(r->kv.mod_rev, r2);
    assert_int_equal(r->kv.version, 2);
    meta_result_free(r);

    int64_t nd = -1;
    int64_t r3 = del(s, k, &nd);
    assert_int_equal(nd, 1);
    assert_true(r3 > r2);
    r = get(s, k);
    assert_false(r->kv.found);
    meta_result_free(r);

    /* deleting a missing key changes nothing */
    int64_t r4 = del(s, k, &nd);
    assert_int_equal(nd, 0);
    assert_int_equal(r4, r3);

    /* recreate: version restarts at 1 with a new create_rev */
    int64_t r5 = put(s, k, "v3", 0);
    assert_true(r5 > r3);
    r = get(s, k);
    assert_int_equal(r->kv.version, 1);
    assert_int_equal(r->kv.create_rev, r5);
    meta_result_free(r);

    /* a txn with only GETs does not advance the revision */
    meta_op_t g = get_op(k);
    int64_t before = current_rev(s);
    OK(meta_sync_txn(s, NULL, 0, &g, 1, NULL, 0, &r), r);
    assert_true(r->succeeded);
    assert_int_equal(r->n_ops, 1);
    assert_true(value_is(&r->ops[0], "v3"));
    meta_result_free(r);
    assert_int_equal(current_rev(s), before);

    /* binary values with NUL bytes, the empty value, and the largest value */
    uint8_t bin[5] = {0, 1, 0, 255, 0};
    meta_op_t pb = {.type = META_OP_PUT, .key = "conf/kv/bin", .value = bin, .value_len = 5};
    OK(meta_sync_txn(s, NULL, 0, &pb, 1, NULL, 0, &r), r);
    meta_result_free(r);
    r = get(s, "conf/kv/bin");
    assert_int_equal(r->kv.value_len, 5);
    assert_memory_equal(r->kv.value, bin, 5);
    meta_result_free(r);
    put(s, "conf/kv/empty", "", 0);
    r = get(s, "conf/kv/empty");
    assert_true(r->kv.found);
    assert_int_equal(r->kv.value_len, 0);
    meta_result_free(r);
    uint8_t *big = malloc(META_VALUE_MAX);
    for (size_t i = 0; i < META_VALUE_MAX; i++)
        big[i] = (uint8_t)(i * 7 + 3);
    meta_op_t pbig = {
        .type = META_OP_PUT, .key = "conf/kv/big", .value = big, .value_len = META_VALUE_MAX};
    OK(meta_sync_txn(s, NULL, 0, &pbig, 1, NULL, 0, &r), r);
    meta_result_free(r);
    r = get(s, "conf/kv/big");
    assert_int_equal(r->kv.value_len, META_VALUE_MAX);
    assert_memory_equal(r->kv.value, big, META_VALUE_MAX);
    meta_result_free(r);
    free(big);

    /* the longest key, and limits enforced before any I/O */
    char *longkey = malloc(META_KEY_MAX + 2);
    memset(longkey, 'k', META_KEY_MAX + 1);
    memcpy(longkey, "conf/kv/", 8);
    longkey[META_KEY_MAX] = '\0';
    put(s, longkey, "long", 0);
    r = get(s, longkey);
    assert_true(value_is(&r->kv, "long"));
    meta_result_free(r);
    longkey[META_KEY_MAX] = 'k';
    longkey[META_KEY_MAX + 1] = '\0';
    assert_int_equal(meta_sync_get(s, longkey, &r), KVMESH_ETOOBIG);
    assert_non_null(strstr(r->errmsg, "longer than"));
    meta_result_free(r);
    free(longkey);
    assert_int_equal(meta_sync_get(s, "", &r), KVMESH_EINVAL);
    meta_result_free(r);
    LOG("kv basics: revisions r1=%" PRId64 " r2=%" PRId64 " r3=%" PRId64 " r5=%" PRId64, r1, r2, r3,
        r5);
}

/* ---- txn ------------------------------------------------------------------------------------ */

struct cmp_case {
    const char *key;
    enum meta_cmp_target target;
    enum meta_cmp_op op;
    int64_t num;
    const char *value;
    bool expect;
};

static void run_cmp_case(meta_sync_t *s, const struct cmp_case *c, int idx)
{
    meta_cmp_t cmp = {.key = c->key, .target = c->target, .op = c->op, .num = c->num};
    if (c->value) {
        cmp.value = (const uint8_t *)c->value;
        cmp.value_len = strlen(c->value);
    }
    char tv[32], ev[32];
    snprintf(tv, sizeof(tv), "then-%d", idx);
    snprintf(ev, sizeof(ev), "else-%d", idx);
    meta_op_t t[2] = {put_op("conf/txn/mark", tv), get_op(c->key)};
    meta_op_t e[1] = {put_op("conf/txn/mark", ev)};
    meta_result_t *r = NULL;
    OK(meta_sync_txn(s, &cmp, 1, t, 2, e, 1, &r), r);
    if (r->succeeded != c->expect)
        fail_msg("[%s] compare case %d (target %d op %d num %" PRId64 " value %s on %s): got %d",
                 g_backend, idx, c->target, c->op, c->num, c->value ? c->value : "-", c->key,
                 r->succeeded);
    assert_int_equal(r->n_ops, c->expect ? 2 : 1);
    assert_false(r->ops[0].found); /* PUT entries carry no kv */
    meta_result_free(r);
    r = get(s, "conf/txn/mark");
    assert_true(value_is(&r->kv, c->expect ? tv : ev));
    meta_result_free(r);
}

static void test_txn_compares(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    const char *k = "conf/txn/k";
    put(s, k, "v1", 0);
    put(s, k, "v2", 0);
    meta_result_t *r = get(s, k);
    int64_t ver = r->kv.version, mod = r->kv.mod_rev, cre = r->kv.create_rev;
    meta_result_free(r);
    assert_int_equal(ver, 2);
    r = NULL;
    OK(meta_sync_lease_grant(s, 30000, &r), r);
    meta_lease_t lease = r->lease;
    meta_result_free(r);
    put(s, "conf/txn/leased", "x", lease);
    const char *absent = "conf/txn/absent";
    const struct cmp_case cases[] = {
        {k, META_CMP_EXISTS, META_EQ, 1, NULL, true},
        {k, META_CMP_EXISTS, META_EQ, 0, NULL, false},
        {absent, META_CMP_EXISTS, META_EQ, 0, NULL, true},
        {absent, META_CMP_EXISTS, META_EQ, 1, NULL, false},
        {k, META_CMP_VALUE, META_EQ, 0, "v2", true},
        {k, META_CMP_VALUE, META_EQ, 0, "v1", false},
        {k, META_CMP_VALUE, META_NE, 0, "v1", true},
        {k, META_CMP_VALUE, META_NE, 0, "v2", false},
        {absent, META_CMP_VALUE, META_EQ, 0, "", false},
        {absent, META_CMP_VALUE, META_NE, 0, "x", false},
        {k, META_CMP_VERSION, META_EQ, 2, NULL, true},
        {k, META_CMP_VERSION, META_EQ, 1, NULL, false},
        {k, META_CMP_VERSION, META_NE, 1, NULL, true},
        {k, META_CMP_VERSION, META_NE, 2, NULL, false},
        {k, META_CMP_VERSION, META_LT, 3, NULL, true},
        {k, META_CMP_VERSION, META_LT, 2, NULL, false},
        {k, META_CMP_VERSION, META_GT, 1, NULL, true},
        {k, META_CMP_VERSION, META_GT, 2, NULL, false},
        {absent, META_CMP_VERSION, META_EQ, 0, NULL, true},
        {k, META_CMP_MOD_REV, META_EQ, mod, NULL, true},
        {k, META_CMP_MOD_REV, META_NE, mod, NULL, false},
        {k, META_CMP_MOD_REV, META_LT, mod + 1, NULL, true},
        {k, META_CMP_MOD_REV, META_LT, mod, NULL, false},
        {k, META_CMP_MOD_REV, META_GT, mod - 1, NULL, true},
        {k, META_CMP_MOD_REV, META_GT, mod, NULL, false},
        {absent, META_CMP_MOD_REV, META_EQ, 0, NULL, true},
        {k, META_CMP_CREATE_REV, META_EQ, cre, NULL, true},
        {k, META_CMP_CREATE_REV, META_NE, cre, NULL, false},
        {k, META_CMP_CREATE_REV, META_LT, cre + 1, NULL, true},
        {k, META_CMP_CREATE_REV, META_GT, cre, NULL, false},
        {absent, META_CMP_CREATE_REV, META_EQ, 0, NULL, true},
        {"conf/txn/leased", META_CMP_LEASE, META_EQ, lease, NULL, true},
        {"conf/txn/leased", META_CMP_LEASE, META_NE, lease, NULL, false},
        {"conf/txn/leased", META_CMP_LEASE, META_GT, 0, NULL, true},
        {"conf/txn/leased", META_CMP_LEASE, META_LT, lease, NULL, false},
        {k, META_CMP_LEASE, META_EQ, 0, NULL, true},
        {absent, META_CMP_LEASE, META_EQ, 0, NULL, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_cmp_case(s, &cases[i], (int)i);

    /* several compares: all must hold */
    meta_cmp_t two[2] = {
        {.key = k, .target = META_CMP_VERSION, .op = META_EQ, .num = 2},
        {.key = absent, .target = META_CMP_EXISTS, .op = META_EQ, .num = 1},
    };
    meta_op_t t = put_op("conf/txn/mark", "both");
    meta_op_t e = put_op("conf/txn/mark", "not-both");
    OK(meta_sync_txn(s, two, 2, &t, 1, &e, 1, &r), r);
    assert_false(r->succeeded);
    meta_result_free(r);
    two[1].num = 0;
    OK(meta_sync_txn(s, two, 2, &t, 1, &e, 1, &r), r);
    assert_true(r->succeeded);
    meta_result_free(r);

    /* atomic multi-op: every write of the branch shares one new revision; GET sees prior ops */
    put(s, "conf/txn/m3", "old", 0);
    int64_t before = current_rev(s);
    meta_op_t multi[5] = {put_op("conf/txn/m1", "1"), put_op("conf/txn/m2", "2"),
                          del_op("conf/txn/m3"), get_op("conf/txn/m1"), get_op("conf/txn/m3")};
    OK(meta_sync_txn(s, NULL, 0, multi, 5, NULL, 0, &r), r);
    assert_true(r->succeeded);
    assert_int_equal(r->n_ops, 5);
    assert_int_equal(r->n_deleted, 1);
    int64_t trev = r->rev;
    assert_true(trev > before);
    assert_true(value_is(&r->ops[3], "1"));
    assert_int_equal(r->ops[3].mod_rev, trev);
    assert_false(r->ops[4].found);
    meta_result_free(r);
    meta_result_t *a = get(s, "conf/txn/m1"), *b = get(s, "conf/txn/m2");
    assert_int_equal(a->kv.mod_rev, trev);
    assert_int_equal(b->kv.mod_rev, trev);
    meta_result_free(a);
    meta_result_free(b);

    /* all-or-nothing: a put bound to an unknown lease fails the whole txn, nothing applied */
    int64_t rb = current_rev(s);
    meta_op_t bad[2] = {put_op("conf/txn/n1", "x"), put_op("conf/txn/n2", "y")};
    bad[1].lease = lease + 1000003;
    int rc = meta_sync_txn(s, NULL, 0, bad, 2, NULL, 0, &r);
    assert_int_equal(rc, KVMESH_ENOENT);
    assert_true(strlen(r->errmsg) > 0);
    meta_result_free(r);
    r = get(s, "conf/txn/n1");
    assert_false(r->kv.found);
    assert_int_equal(r->rev, rb);
    meta_result_free(r);

    /* refused before any I/O: two writes of one key, too many ops, bad compare shapes */
    meta_op_t dup[2] = {put_op("conf/txn/d", "1"), del_op("conf/txn/d")};
    assert_int_equal(meta_sync_txn(s, NULL, 0, dup, 2, NULL, 0, &r), KVMESH_EINVAL);
    assert_non_null(strstr(r->errmsg, "twice"));
    meta_result_free(r);
    meta_op_t many[META_TXN_MAX_OPS + 1];
    char keys[META_TXN_MAX_OPS + 1][32];
    for (int i = 0; i <= META_TXN_MAX_OPS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "conf/txn/many/%d", i);
        many[i] = put_op(keys[i], "v");
    }
    assert_int_equal(meta_sync_txn(s, NULL, 0, many, META_TXN_MAX_OPS + 1, NULL, 0, &r),
                     KVMESH_ERANGE);
    meta_result_free(r);
    OK(meta_sync_txn(s, NULL, 0, many, META_TXN_MAX_OPS, NULL, 0, &r), r); /* the max is fine */
    meta_result_free(r);
    meta_cmp_t badc = {.key = k, .target = META_CMP_VALUE, .op = META_LT};
    assert_int_equal(meta_sync_txn(s, &badc, 1, NULL, 0, NULL, 0, &r), KVMESH_EINVAL);
    meta_result_free(r);
    OK(meta_sync_lease_revoke(s, lease, &r), r);
    meta_result_free(r);
    LOG("txn: %zu compare cases, multi-op txn at rev %" PRId64, sizeof(cases) / sizeof(cases[0]),
        trev);
}

/* ---- range ---------------------------------------------------------------------------------- */

static void fill_keys(meta_sync_t *s, const char *fmt, int n)
{
    char keys[META_TXN_MAX_OPS][64];
    meta_op_t ops[META_TXN_MAX_OPS];
    int done = 0;
    while (done < n) {
        int k = 0;
        for (; k < META_TXN_MAX_OPS && done + k < n; k++) {
            snprintf(keys[k], sizeof(keys[k]), fmt, done + k);
            ops[k] = put_op(keys[k], keys[k]);
        }
        meta_result_t *r = NULL;
        OK(meta_sync_txn(s, NULL, 0, ops, (size_t)k, NULL, 0, &r), r);
        meta_result_free(r);
        done += k;
    }
}

/* Pages through prefix with limit; every stable key ("/s" keys) must be seen once, keys strictly
 * increase across pages (no duplicates), pages are <= limit. Returns the number of keys seen. */
static size_t scan_all(meta_sync_t *s, const char *prefix, uint32_t limit, int n_stable,
                       size_t *pages)
{
    char *seen = calloc((size_t)n_stable, 1);
    char last[META_KEY_MAX + 1] = "";
    bool have_last = false;
    size_t total = 0;
    *pages = 0;
    size_t plen = strlen(prefix);
    for (;;) {
        meta_result_t *r = NULL;
        OK(meta_sync_range(s, prefix, have_last ? last : NULL, limit, &r), r);
        (*pages)++;
        assert_true(r->n_kvs <= limit);
        for (size_t i = 0; i < r->n_kvs; i++) {
            const char *key = r->kvs[i].key;
            assert_int_equal(strncmp(key, prefix, plen), 0);
            if (have_last && strcmp(key, last) <= 0)
                fail_msg("[%s] range returned '%s' after '%s' (duplicate or out of order)",
                         g_backend, key, last);
            snprintf(last, sizeof(last), "%s", key);
            have_last = true;
            int idx;
            char tail;
            if (sscanf(key + plen, "s%d%c", &idx, &tail) == 1) {
                assert_true(idx >= 0 && idx < n_stable);
                assert_int_equal(seen[idx], 0);
                seen[idx] = 1;
                assert_true(value_is(&r->kvs[i], key));
            }
            total++;
        }
        bool more = r->more;
        if (more)
            assert_int_equal(r->n_kvs, limit);
        meta_result_free(r);
        if (!more)
            break;
        assert_true(*pages < 100000);
    }
    for (int i = 0; i < n_stable; i++)
        if (!seen[i])
            fail_msg("[%s] range skipped stable key %d", g_backend, i);
    free(seen);
    return total;
}

struct churn {
    const char *url;
    _Atomic bool stop;
    _Atomic uint64_t inserts, deletes;
};

static void *churn_main(void *arg)
{
    struct churn *c = arg;
    meta_opts_t o = {.default_timeout_ms = 10000};
    meta_sync_t *s = NULL;
    if (meta_sync_open(&s, c->url, &o) != 0)
        return NULL;
    uint64_t end = env_clock_mono_ms() + 60000;
    for (unsigned i = 0; !c->stop && env_clock_mono_ms() < end; i++) {
        /* new keys between stable ones and after them, then delete them again */
        char k1[64], k2[64];
        snprintf(k1, sizeof(k1), "conf/range/p/s%05u-x", (i * 7919u) % RANGE_KEYS);
        snprintf(k2, sizeof(k2), "conf/range/p/t%05u", i % 500);
        meta_op_t ops[2] = {put_op(k1, "churn"), put_op(k2, "churn")};
        meta_result_t *r = NULL;
        if (meta_sync_txn(s, NULL, 0, ops, 2, NULL, 0, &r) == 0)
            c->inserts += 2;
        meta_result_free(r);
        if (i % 2 == 1) {
            meta_op_t d[2] = {del_op(k1), del_op(k2)};
            if (meta_sync_txn(s, NULL, 0, d, 2, NULL, 0, &r) == 0)
                c->deletes += (uint64_t)r->n_deleted;
            meta_result_free(r);
        }
    }
    meta_sync_close(s);
    return NULL;
}

static void test_range_pagination(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    /* neighbours of the prefix that must never appear in its scans */
    put(s, "conf/range/p", "outside", 0);
    put(s, "conf/range/p0", "outside", 0);
    put(s, "conf/range/o/zz", "outside", 0);
    put(s, "conf/range/q", "outside", 0);
    uint64_t t0 = env_clock_mono_ms();
    fill_keys(s, "conf/range/p/s%05d", RANGE_KEYS);
    LOG("range: wrote %d keys in %" PRIu64 " ms", RANGE_KEYS, env_clock_mono_ms() - t0);
    const uint32_t limits[] = {META_RANGE_MAX, 333, 64};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        size_t pages;
        size_t n = scan_all(s, "conf/range/p/", limits[i], RANGE_KEYS, &pages);
        assert_int_equal(n, RANGE_KEYS);
        assert_int_equal(pages, (RANGE_KEYS + limits[i] - 1) / limits[i]);
        LOG("range: limit %u -> %zu pages, %zu keys", limits[i], pages, n);
    }
    /* limit 1, the first keys, and start_after a key that does not exist */
    meta_result_t *r = NULL;
    OK(meta_sync_range(s, "conf/range/p/", NULL, 1, &r), r);
    assert_int_equal(r->n_kvs, 1);
    assert_string_equal(r->kvs[0].key, "conf/range/p/s00000");
    assert_true(r->more);
    meta_result_free(r);
    OK(meta_sync_range(s, "conf/range/p/", "conf/range/p/s00041x", 2, &r), r);
    assert_int_equal(r->n_kvs, 2);
    assert_string_equal(r->kvs[0].key, "conf/range/p/s00042");
    assert_string_equal(r->kvs[1].key, "conf/range/p/s00043");
    meta_result_free(r);
    OK(meta_sync_range(s, "conf/range/p/", "conf/range/p/s09999", 10, &r), r);
    assert_int_equal(r->n_kvs, 0);
    assert_false(r->more);
    meta_result_free(r);
    OK(meta_sync_range(s, "conf/range/nothing/", NULL, 10, &r), r);
    assert_int_equal(r->n_kvs, 0);
    assert_false(r->more);
    meta_result_free(r);
    assert_int_equal(meta_sync_range(s, "conf/range/p/", NULL, 0, &r), KVMESH_ERANGE);
    meta_result_free(r);
    assert_int_equal(meta_sync_range(s, "conf/range/p/", NULL, META_RANGE_MAX + 1, &r),
                     KVMESH_ERANGE);
    assert_non_null(strstr(r->errmsg, "limit"));
    meta_result_free(r);

    /* the same walk while another writer inserts and deletes keys inside the range */
    struct churn c = {.url = g_url};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn_main, &c), 0);
    /* the writer must be writing before the walk starts (its handle may take a while to connect
     * on a loaded machine) */
    uint64_t wait_end = env_clock_mono_ms() + 20000;
    while (c.inserts == 0 && env_clock_mono_ms() < wait_end)
        sleep_ms(10);
    assert_true(c.inserts > 0);
    size_t pages;
    size_t n = scan_all(s, "conf/range/p/", 97, RANGE_KEYS, &pages);
    c.stop = true;
    pthread_join(th, NULL);
    assert_true(n >= RANGE_KEYS);
    assert_true(c.inserts > 0);
    LOG("range under churn: %zu keys in %zu pages while %" PRIu64 " inserts / %" PRIu64
        " deletes ran",
        n, pages, c.inserts, c.deletes);
}

/* ---- leases --------------------------------------------------------------------------------- */

/*
 * Timing on a loaded machine: the server applies a keepalive after we send it, so the lease lives
 * at least until (send time + ttl) by the server's clock; a GET answered before that instant must
 * find the key. A GET answered later proves nothing (the test thread may have stalled), so it is
 * not judged. The ttl (4 s) leaves room for stalls of several seconds between keepalives.
 */
#define LEASE_TTL_MS     4000
#define LEASE_MARGIN_MS  100   /* clock granularity between us and the server (ms resolution) */
#define LEASE_GONE_BOUND 10000 /* after the ttl, expiry must have removed the key by then */

static void test_lease_expiry(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    meta_result_t *r = NULL;
    OK(meta_sync_lease_grant(s, LEASE_TTL_MS - 500, &r), r); /* rounded up to 4 s */
    meta_lease_t lease = r->lease;
    assert_true(lease > 0);
    assert_int_equal(r->ttl_ms, LEASE_TTL_MS);
    meta_result_free(r);
    uint64_t ka_sent = env_clock_mono_ms(); /* the grant counts as the first keepalive */
    put(s, "conf/lease/k", "alive", lease);
    r = get(s, "conf/lease/k");
    assert_int_equal(r->kv.lease, lease);
    meta_result_free(r);
    /* keepalives for 6 s (> ttl): the key never vanishes */
    uint64_t end = env_clock_mono_ms() + LEASE_TTL_MS + 2000;
    unsigned judged = 0, stalls = 0;
    while (env_clock_mono_ms() < end) {
        uint64_t sent = env_clock_mono_ms();
        OK(meta_sync_lease_keepalive(s, lease, &r), r);
        assert_int_equal(r->ttl_ms, LEASE_TTL_MS);
        meta_result_free(r);
        ka_sent = sent;
        sleep_ms(400);
        r = get(s, "conf/lease/k");
        uint64_t answered = env_clock_mono_ms();
        if (answered + LEASE_MARGIN_MS < ka_sent + LEASE_TTL_MS) {
            if (!r->kv.found)
                fail_msg("[%s] leased key vanished %" PRIu64 " ms after a keepalive (ttl %d)",
                         g_backend, answered - ka_sent, LEASE_TTL_MS);
            judged++;
        } else {
            stalls++;
        }
        meta_result_free(r);
    }
    assert_true(judged > 0);
    uint64_t last_sent = env_clock_mono_ms();
    OK(meta_sync_lease_keepalive(s, lease, &r), r);
    meta_result_free(r);
    uint64_t last_ka = env_clock_mono_ms();
    OK(meta_sync_lease_ttl(s, lease, &r), r);
    assert_true(r->ttl_ms > 0 && r->ttl_ms <= LEASE_TTL_MS);
    meta_result_free(r);
    sleep_ms(700);
    r = get(s, "conf/lease/k");
    if (env_clock_mono_ms() + LEASE_MARGIN_MS < last_sent + LEASE_TTL_MS)
        assert_true(r->kv.found); /* inside the ttl */
    meta_result_free(r);
    /* then it disappears: not before the ttl, and within a bound after it */
    bool gone = false;
    uint64_t gone_at = 0;
    while (!gone && env_clock_mono_ms() < last_ka + LEASE_TTL_MS + LEASE_GONE_BOUND) {
        uint64_t sent = env_clock_mono_ms();
        r = get(s, "conf/lease/k");
        gone = !r->kv.found;
        meta_result_free(r);
        if (gone) {
            gone_at = sent;
            /* the GET was sent after the server applied the keepalive; it saw the key gone,
             * so the server judged the lease expired: at least ttl after the keepalive */
            if (sent + LEASE_MARGIN_MS < last_sent + LEASE_TTL_MS)
                fail_msg("[%s] leased key gone %" PRIu64 " ms after the last keepalive (ttl %d)",
                         g_backend, sent - last_sent, LEASE_TTL_MS);
        } else {
            sleep_ms(50);
        }
    }
    if (!gone)
        fail_msg("[%s] leased key still present %" PRIu64 " ms after the last keepalive", g_backend,
                 env_clock_mono_ms() - last_ka);
    LOG("lease: key vanished %" PRIu64 " ms after the last keepalive (ttl %d); %u checks inside "
        "the ttl, %u skipped after stalls",
        gone_at > last_ka ? gone_at - last_ka : 0, LEASE_TTL_MS, judged, stalls);
    int rc = meta_sync_lease_keepalive(s, lease, &r);
    assert_int_equal(rc, KVMESH_ENOENT);
    meta_result_free(r);
    assert_int_equal(meta_sync_lease_ttl(s, lease, &r), KVMESH_ENOENT);
    meta_result_free(r);
    assert_int_equal(meta_sync_lease_revoke(s, lease, &r), KVMESH_ENOENT);
    meta_result_free(r);
    assert_int_equal(meta_sync_lease_grant(s, 0, &r), KVMESH_ERANGE);
    meta_result_free(r);
    /* ttl rounding is the same everywhere: at least 1 s, whole seconds */
    OK(meta_sync_lease_grant(s, 1, &r), r);
    assert_int_equal(r->ttl_ms, 1000);
    meta_lease_t l1 = r->lease;
    meta_result_free(r);
    OK(meta_sync_lease_grant(s, 2001, &r), r);
    assert_int_equal(r->ttl_ms, 3000);
    meta_lease_t l3 = r->lease;
    meta_result_free(r);
    OK(meta_sync_lease_revoke(s, l3, &r), r);
    meta_result_free(r);
    rc = meta_sync_lease_revoke(s, l1, &r); /* may already have expired on a slow machine */
    assert_true(rc == 0 || rc == KVMESH_ENOENT);
    meta_result_free(r);
}

struct watcher {
    const char *url;
    _Atomic bool stop;
    _Atomic uint64_t observations, partial;
    size_t counts_seen[3]; /* 0 keys, all keys, other */
};

#define REVOKE_KEYS 50

static void *watch_main(void *arg)
{
    struct watcher *w = arg;
    meta_opts_t o = {.default_timeout_ms = 10000};
    meta_sync_t *s = NULL;
    if (meta_sync_open(&s, w->url, &o) != 0)
        return NULL;
    uint64_t end = env_clock_mono_ms() + 30000;
    while (!w->stop && env_clock_mono_ms() < end) {
        meta_result_t *r = NULL;
        if (meta_sync_range(s, "conf/revoke/", NULL, META_RANGE_MAX, &r) == 0) {
            w->observations++;
            if (r->n_kvs == 0) {
                w->counts_seen[0]++;
                w->stop = true; /* once gone, done */
            } else if (r->n_kvs == REVOKE_KEYS) {
                w->counts_seen[1]++;
            } else {
                w->counts_seen[2]++;
            }
        }
        meta_result_free(r);
    }
    meta_sync_close(s);
    return NULL;
}

static void test_lease_revoke_atomic(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    meta_result_t *r = NULL;
    OK(meta_sync_lease_grant(s, 60000, &r), r);
    meta_lease_t lease = r->lease;
    meta_result_free(r);
    char keys[REVOKE_KEYS][32];
    meta_op_t ops[REVOKE_KEYS];
    for (int i = 0; i < REVOKE_KEYS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "conf/revoke/%02d", i);
        ops[i] = put_op(keys[i], "v");
        ops[i].lease = lease;
    }
    OK(meta_sync_txn(s, NULL, 0, ops, REVOKE_KEYS, NULL, 0, &r), r);
    meta_result_free(r);
    /* a key re-put without the lease is detached from it and survives the revoke */
    put(s, "conf/revoke-detached", "v", lease);
    put(s, "conf/revoke-detached", "v2", 0);
    r = get(s, "conf/revoke-detached");
    assert_int_equal(r->kv.lease, 0);
    meta_result_free(r);

    struct watcher w = {.url = g_url};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch_main, &w), 0);
    /* the watcher must have seen the full set before the revoke (its handle may take a while to
     * connect on a loaded machine) */
    uint64_t wait_end = env_clock_mono_ms() + 20000;
    while (w.observations == 0 && env_clock_mono_ms() < wait_end)
        sleep_ms(10);
    int64_t before = current_rev(s);
    OK(meta_sync_lease_revoke(s, lease, &r), r);
    assert_true(r->rev > before);
    meta_result_free(r);
    pthread_join(th, NULL);
    assert_true(w.counts_seen[1] > 0);
    assert_true(w.counts_seen[0] > 0);
    if (w.counts_seen[2] != 0)
        fail_msg("[%s] a range saw a partial set of a revoked lease's keys %zu times", g_backend,
                 w.counts_seen[2]);
    OK(meta_sync_range(s, "conf/revoke/", NULL, META_RANGE_MAX, &r), r);
    assert_int_equal(r->n_kvs, 0);
    meta_result_free(r);
    r = get(s, "conf/revoke-detached");
    assert_true(value_is(&r->kv, "v2"));
    meta_result_free(r);
    LOG("revoke: %" PRIu64 " snapshots: %zu full, %zu empty, %zu partial", w.observations,
        w.counts_seen[1], w.counts_seen[0], w.counts_seen[2]);
}

/* ---- contract edges (branches, counts, revisions, re-bound leases) ----------------------------
 */

static meta_lease_t grant(meta_sync_t *s, int64_t ttl_ms)
{
    meta_result_t *r = NULL;
    OK(meta_sync_lease_grant(s, ttl_ms, &r), r);
    meta_lease_t l = r->lease;
    assert_true(l > 0);
    meta_result_free(r);
    return l;
}

static void test_txn_branches(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    const char *k = "conf/br/k", *gone = "conf/br/gone", *d1 = "conf/br/d1";
    put(s, k, "old", 0);
    put(s, d1, "x", 0);
    meta_result_t *r = get(s, k);
    int64_t kmod = r->kv.mod_rev, kcre = r->kv.create_rev;
    meta_result_free(r);

    /* then branch: GET before and after a PUT of the same key, GET of an absent key, a DEL of an
     * existing and of an absent key: n_deleted counts only what existed */
    meta_cmp_t c = {.key = k,
                    .target = META_CMP_VALUE,
                    .op = META_EQ,
                    .value = (const uint8_t *)"old",
                    .value_len = 3};
    meta_op_t t[6] = {get_op(k),    put_op(k, "new"), get_op(k),
                      get_op(gone), del_op(d1),       del_op("conf/br/never")};
    meta_op_t e[2] = {get_op(k), put_op("conf/br/else", "e")};
    int64_t before = current_rev(s);
    OK(meta_sync_txn(s, &c, 1, t, 6, e, 2, &r), r);
    assert_true(r->succeeded);
    assert_int_equal(r->rev, before + 1); /* one revision for the PUT and the DEL together */
    assert_int_equal(r->n_ops, 6);
    assert_int_equal(r->n_deleted, 1);
    assert_true(value_is(&r->ops[0], "old"));
    assert_int_equal(r->ops[0].mod_rev, kmod);
    assert_int_equal(r->ops[0].version, 1);
    assert_false(r->ops[1].found);
    assert_true(value_is(&r->ops[2], "new"));
    assert_string_equal(r->ops[2].key, k);
    assert_int_equal(r->ops[2].mod_rev, before + 1);
    assert_int_equal(r->ops[2].create_rev, kcre);
    assert_int_equal(r->ops[2].version, 2);
    assert_false(r->ops[3].found);
    assert_false(r->ops[4].found);
    assert_false(r->ops[5].found);
    meta_result_free(r);
    r = get(s, d1);
    assert_false(r->kv.found);
    meta_result_free(r);

    /* else branch: the same compare now fails; its GETs see the store, its DEL counts */
    put(s, d1, "x", 0);
    meta_op_t e2[4] = {get_op(k), del_op(d1), get_op(d1), get_op(gone)};
    before = current_rev(s);
    OK(meta_sync_txn(s, &c, 1, t, 6, e2, 4, &r), r);
    assert_false(r->succeeded);
    assert_int_equal(r->rev, before + 1);
    assert_int_equal(r->n_ops, 4);
    assert_int_equal(r->n_deleted, 1);
    assert_true(value_is(&r->ops[0], "new"));
    assert_int_equal(r->ops[0].version, 2);
    assert_false(r->ops[1].found);
    assert_false(r->ops[2].found); /* deleted by the op before it */
    assert_false(r->ops[3].found);
    meta_result_free(r);
    r = get(s, k);
    assert_true(value_is(&r->kv, "new")); /* the then branch did not run */
    meta_result_free(r);

    /* a failed compare with an empty else branch changes nothing: no revision */
    before = current_rev(s);
    OK(meta_sync_txn(s, &c, 1, t, 6, NULL, 0, &r), r);
    assert_false(r->succeeded);
    assert_int_equal(r->n_ops, 0);
    assert_int_equal(r->n_deleted, 0);
    assert_int_equal(r->rev, before);
    meta_result_free(r);
    /* a branch whose only writes delete absent keys changes nothing either */
    meta_op_t nd[2] = {del_op("conf/br/never"), get_op(k)};
    OK(meta_sync_txn(s, NULL, 0, nd, 2, NULL, 0, &r), r);
    assert_int_equal(r->n_deleted, 0);
    assert_int_equal(r->rev, before);
    meta_result_free(r);
    assert_int_equal(current_rev(s), before);
    /* a txn without compares or ops succeeds and changes nothing */
    OK(meta_sync_txn(s, NULL, 0, NULL, 0, NULL, 0, &r), r);
    assert_true(r->succeeded);
    assert_int_equal(r->rev, before);
    meta_result_free(r);

    /* compares of every numeric target with every op against an absent key (all zero), and
     * negative numbers */
    const char *absent = "conf/br/absent";
    const struct cmp_case cases[] = {
        {absent, META_CMP_VERSION, META_LT, 1, NULL, true},
        {absent, META_CMP_VERSION, META_GT, 0, NULL, false},
        {absent, META_CMP_VERSION, META_GT, -1, NULL, true},
        {absent, META_CMP_VERSION, META_NE, 0, NULL, false},
        {absent, META_CMP_MOD_REV, META_LT, 1, NULL, true},
        {absent, META_CMP_MOD_REV, META_GT, 0, NULL, false},
        {absent, META_CMP_MOD_REV, META_NE, 0, NULL, false},
        {absent, META_CMP_CREATE_REV, META_LT, 1, NULL, true},
        {absent, META_CMP_CREATE_REV, META_GT, 0, NULL, false},
        {absent, META_CMP_CREATE_REV, META_NE, 0, NULL, false},
        {absent, META_CMP_LEASE, META_GT, 0, NULL, false},
        {absent, META_CMP_LEASE, META_LT, 1, NULL, true},
        {absent, META_CMP_LEASE, META_NE, 0, NULL, false},
        {k, META_CMP_CREATE_REV, META_GT, kcre - 1, NULL, true},
        {k, META_CMP_CREATE_REV, META_LT, kcre, NULL, false},
        {k, META_CMP_LEASE, META_LT, 1, NULL, true},
        {k, META_CMP_LEASE, META_GT, 0, NULL, false},
        {k, META_CMP_LEASE, META_NE, 0, NULL, false},
        {k, META_CMP_VALUE, META_EQ, 0, "ne", false},
        {k, META_CMP_VALUE, META_NE, 0, "", true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_cmp_case(s, &cases[i], 1000 + (int)i);
    /* the empty value equals only the empty value */
    put(s, "conf/br/empty", "", 0);
    const struct cmp_case ecases[] = {
        {"conf/br/empty", META_CMP_VALUE, META_EQ, 0, "", true},
        {"conf/br/empty", META_CMP_VALUE, META_NE, 0, "", false},
        {"conf/br/empty", META_CMP_VALUE, META_EQ, 0, "x", false},
        {"conf/br/empty", META_CMP_EXISTS, META_EQ, 1, NULL, true},
    };
    for (size_t i = 0; i < sizeof(ecases) / sizeof(ecases[0]); i++)
        run_cmp_case(s, &ecases[i], 2000 + (int)i);

    /* LEASE compares on a key re-bound from one lease to another, then to none */
    meta_lease_t l1 = grant(s, 30000), l2 = grant(s, 30000);
    put(s, "conf/br/l", "a", l1);
    put(s, "conf/br/l", "b", l2);
    const struct cmp_case lcases[] = {
        {"conf/br/l", META_CMP_LEASE, META_EQ, l2, NULL, true},
        {"conf/br/l", META_CMP_LEASE, META_EQ, l1, NULL, false},
        {"conf/br/l", META_CMP_LEASE, META_GT, l1, NULL, l2 > l1},
        {"conf/br/l", META_CMP_LEASE, META_LT, l1, NULL, l2 < l1},
    };
    for (size_t i = 0; i < sizeof(lcases) / sizeof(lcases[0]); i++)
        run_cmp_case(s, &lcases[i], 3000 + (int)i);
    put(s, "conf/br/l", "c", 0);
    struct cmp_case none = {"conf/br/l", META_CMP_LEASE, META_EQ, 0, NULL, true};
    run_cmp_case(s, &none, 3100);
    /* revoking the leases no longer touches the key: no key removed, no revision */
    before = current_rev(s);
    OK(meta_sync_lease_revoke(s, l1, &r), r);
    meta_result_free(r);
    OK(meta_sync_lease_revoke(s, l2, &r), r);
    assert_int_equal(r->rev, before);
    meta_result_free(r);
    r = get(s, "conf/br/l");
    assert_true(value_is(&r->kv, "c"));
    assert_int_equal(r->kv.version, 3);
    meta_result_free(r);
}

/* Waits (bounded) until key is gone; returns the result of the GET that saw it gone. */
static meta_result_t *wait_gone(meta_sync_t *s, const char *key, uint64_t bound_ms)
{
    uint64_t end = env_clock_mono_ms() + bound_ms;
    for (;;) {
        meta_result_t *r = get(s, key);
        if (!r->kv.found)
            return r;
        meta_result_free(r);
        if (env_clock_mono_ms() > end)
            fail_msg("[%s] '%s' still present %" PRIu64 " ms later", g_backend, key, bound_ms);
        sleep_ms(50);
    }
}

static void test_lease_revisions(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    meta_result_t *r = NULL;
    /* grant, keepalive, ttl, and revoking a lease without keys change no key: no revision */
    int64_t before = current_rev(s);
    meta_lease_t empty = grant(s, 30000);
    OK(meta_sync_lease_keepalive(s, empty, &r), r);
    assert_int_equal(r->rev, before);
    meta_result_free(r);
    OK(meta_sync_lease_revoke(s, empty, &r), r);
    assert_int_equal(r->rev, before);
    meta_result_free(r);
    assert_int_equal(current_rev(s), before);

    /* revoke of a lease with keys: exactly one revision for all of them */
    meta_lease_t lr = grant(s, 30000);
    meta_op_t ops[3] = {put_op("conf/lrev/r1", "1"), put_op("conf/lrev/r2", "2"),
                        put_op("conf/lrev/r3", "3")};
    for (int i = 0; i < 3; i++)
        ops[i].lease = lr;
    OK(meta_sync_txn(s, NULL, 0, ops, 3, NULL, 0, &r), r);
    int64_t wrev = r->rev;
    meta_result_free(r);
    OK(meta_sync_lease_revoke(s, lr, &r), r);
    assert_int_equal(r->rev, wrev + 1);
    meta_result_free(r);
    assert_int_equal(current_rev(s), wrev + 1);

    /* expiry of a lease with keys: the keys go in one step and the revision advances by exactly
     * one; a key moved to no lease, and one moved to another lease, survive it */
    meta_lease_t le = grant(s, 1000), keep = grant(s, 60000);
    meta_op_t eops[4] = {put_op("conf/lexp/a", "1"), put_op("conf/lexp/b", "2"),
                         put_op("conf/lexp/detached", "3"), put_op("conf/lexp/moved", "4")};
    for (int i = 0; i < 4; i++)
        eops[i].lease = le;
    OK(meta_sync_txn(s, NULL, 0, eops, 4, NULL, 0, &r), r);
    meta_result_free(r);
    meta_op_t rebind[2] = {put_op("conf/lexp/detached", "3b"), put_op("conf/lexp/moved", "4b")};
    rebind[1].lease = keep;
    OK(meta_sync_txn(s, NULL, 0, rebind, 2, NULL, 0, &r), r);
    int64_t erev = r->rev;
    meta_result_free(r);
    r = wait_gone(s, "conf/lexp/a", 1000 + LEASE_GONE_BOUND); /* generous: loaded CI */
    assert_int_equal(r->rev, erev + 1);
    meta_result_free(r);
    r = get(s, "conf/lexp/b");
    assert_false(r->kv.found);
    assert_int_equal(r->rev, erev + 1);
    meta_result_free(r);
    r = get(s, "conf/lexp/detached");
    assert_true(value_is(&r->kv, "3b"));
    assert_int_equal(r->kv.lease, 0);
    assert_int_equal(r->kv.version, 2);
    meta_result_free(r);
    r = get(s, "conf/lexp/moved");
    assert_true(value_is(&r->kv, "4b"));
    assert_int_equal(r->kv.lease, keep);
    meta_result_free(r);
    /* the expired lease is unknown; putting a key with it fails the whole txn */
    assert_int_equal(meta_sync_lease_keepalive(s, le, &r), KVMESH_ENOENT);
    meta_result_free(r);
    meta_op_t late = put_op("conf/lexp/late", "x");
    late.lease = le;
    assert_int_equal(meta_sync_txn(s, NULL, 0, &late, 1, NULL, 0, &r), KVMESH_ENOENT);
    meta_result_free(r);
    assert_int_equal(current_rev(s), erev + 1);
    OK(meta_sync_lease_revoke(s, keep, &r), r);
    meta_result_free(r);
    r = get(s, "conf/lexp/moved");
    assert_false(r->kv.found);
    meta_result_free(r);

    /* a key re-created after its delete starts over: version 1, new create_rev, no lease */
    meta_lease_t lv = grant(s, 30000);
    put(s, "conf/lexp/re", "1", lv);
    put(s, "conf/lexp/re", "2", lv);
    del(s, "conf/lexp/re", NULL);
    int64_t rr = put(s, "conf/lexp/re", "3", 0);
    r = get(s, "conf/lexp/re");
    assert_int_equal(r->kv.version, 1);
    assert_int_equal(r->kv.create_rev, rr);
    assert_int_equal(r->kv.lease, 0);
    meta_result_free(r);
    OK(meta_sync_lease_revoke(s, lv, &r), r);
    assert_int_equal(r->rev, rr); /* its old binding is gone with the delete */
    meta_result_free(r);
    r = get(s, "conf/lexp/re");
    assert_true(value_is(&r->kv, "3"));
    meta_result_free(r);
}

/* Pages through prefix with limit from start_after; returns the keys seen, joined by '|'. */
static void range_walk(meta_sync_t *s, const char *prefix, const char *start_after, uint32_t limit,
                       char *out, size_t cap)
{
    char last[META_KEY_MAX + 1];
    bool have = start_after != NULL;
    if (have)
        snprintf(last, sizeof(last), "%s", start_after);
    out[0] = '\0';
    for (int pages = 0;; pages++) {
        assert_true(pages < 100);
        meta_result_t *r = NULL;
        OK(meta_sync_range(s, prefix, have ? last : NULL, limit, &r), r);
        assert_true(r->n_kvs <= limit);
        for (size_t i = 0; i < r->n_kvs; i++) {
            size_t u = strlen(out);
            snprintf(out + u, cap - u, "%s%s", u ? "|" : "", r->kvs[i].key);
            snprintf(last, sizeof(last), "%s", r->kvs[i].key);
            have = true;
        }
        bool more = r->more;
        if (more)
            assert_int_equal(r->n_kvs, limit);
        meta_result_free(r);
        if (!more)
            break;
    }
}

static void test_range_edges(void **state)
{
    (void)state;
    meta_sync_t *s = g_m;
    /* keys sharing prefixes, and bytes 0x7f-0xff, in bytewise order */
    static const char *const keys[] = {
        "conf/re/a",         "conf/re/a/b",   "conf/re/a\x7f", "conf/re/a\x80",
        "conf/re/a\xc3\xa9", "conf/re/a\xfe", "conf/re/a\xff", "conf/re/a\xff\x01",
        "conf/re/a\xff\xff", "conf/re/b",
    };
    const size_t n = sizeof(keys) / sizeof(keys[0]);
    meta_op_t ops[16];
    for (size_t i = 0; i < n; i++)
        ops[i] = put_op(keys[i], keys[i]);
    meta_result_t *r = NULL;
    OK(meta_sync_txn(s, NULL, 0, ops, n, NULL, 0, &r), r);
    meta_result_free(r);
    put(s, "conf/re", "outside", 0);
    put(s, "conf/rf", "outside", 0);
    for (size_t i = 0; i < n; i++) {
        r = get(s, keys[i]);
        assert_true(value_is(&r->kv, keys[i]));
        meta_result_free(r);
    }
    char all[2048], want[2048];
    want[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t u = strlen(want);
        snprintf(want + u, sizeof(want) - u, "%s%s", u ? "|" : "", keys[i]);
    }
    /* every page size, so that every key is once a page boundary (start_after) */
    for (uint32_t limit = 1; limit <= n + 1; limit++) {
        range_walk(s, "conf/re/", NULL, limit, all, sizeof(all));
        if (strcmp(all, want) != 0)
            fail_msg("[%s] range conf/re/ limit %u: got '%s'", g_backend, limit, all);
    }
    /* prefixes that end in 0x7f..0xff and prefixes of other keys */
    struct {
        const char *prefix, *start_after, *want;
    } cases[] = {
        {"conf/re/a", NULL,
         "conf/re/a|conf/re/a/b|conf/re/a\x7f|conf/re/a\x80|conf/re/a\xc3\xa9|conf/re/a\xfe|"
         "conf/re/a\xff|conf/re/a\xff\x01|conf/re/a\xff\xff"},
        {"conf/re/a\xff", NULL, "conf/re/a\xff|conf/re/a\xff\x01|conf/re/a\xff\xff"},
        {"conf/re/a\xff\xff", NULL, "conf/re/a\xff\xff"},
        {"conf/re/a\xff\xff\xff", NULL, ""},
        {"conf/re/a\x7f", NULL, "conf/re/a\x7f"},
        {"conf/re/a\xc3", NULL, "conf/re/a\xc3\xa9"},
        {"conf/re/a\xff", "conf/re/a\xff", "conf/re/a\xff\x01|conf/re/a\xff\xff"},
        {"conf/re/a\xff", "conf/re/a\xff\xff", ""},
        {"conf/re/a", "conf/re/a/b",
         "conf/re/a\x7f|conf/re/a\x80|conf/re/a\xc3\xa9|conf/re/a\xfe|"
         "conf/re/a\xff|conf/re/a\xff\x01|conf/re/a\xff\xff"},
        /* start_after before the prefix: from the prefix's first key */
        {"conf/re/a\xfe", "conf/re/a", "conf/re/a\xfe"},
        {"conf/re/b", "conf/", "conf/re/b"},
        /* start_after after the prefix's keys, or beyond the prefix altogether */
        {"conf/re/a", "conf/re/a\xff\xff\xff", ""},
        {"conf/re/a", "conf/re/b", ""},
        {"conf/re/", "conf/re/a\xfe\xff",
         "conf/re/a\xff|conf/re/a\xff\x01|conf/re/a\xff\xff|"
         "conf/re/b"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (uint32_t limit = 1; limit <= 3; limit += 2) {
            range_walk(s, cases[i].prefix, cases[i].start_after, limit, all, sizeof(all));
            if (strcmp(all, cases[i].want) != 0)
                fail_msg("[%s] range case %zu limit %u: got '%s', want '%s'", g_backend, i, limit,
                         all, cases[i].want);
        }
    }
    /* the empty prefix: every key; start_after near the top of the key space */
    put(s, "\xfe\xff", "top1", 0);
    put(s, "\xff", "top2", 0);
    put(s, "\xff\xff\xff", "top3", 0);
    for (uint32_t limit = 1; limit <= 4; limit++) {
        range_walk(s, "", "\xfe", limit, all, sizeof(all));
        if (strcmp(all, "\xfe\xff|\xff|\xff\xff\xff") != 0)
            fail_msg("[%s] empty-prefix range after 0xfe, limit %u: got '%s'", g_backend, limit,
                     all);
    }
    range_walk(s, "\xff", NULL, 1, all, sizeof(all));
    assert_string_equal(all, "\xff|\xff\xff\xff");
    OK(meta_sync_range(s, "", NULL, 2, &r), r);
    assert_int_equal(r->n_kvs, 2);
    assert_true(r->more);
    assert_true(strcmp(r->kvs[0].key, r->kvs[1].key) < 0);
    meta_result_free(r);
    /* clean the top of the key space for later tests */
    meta_op_t d[3] = {del_op("\xfe\xff"), del_op("\xff"), del_op("\xff\xff\xff")};
    OK(meta_sync_txn(s, NULL, 0, d, 3, NULL, 0, &r), r);
    assert_int_equal(r->n_deleted, 3);
    meta_result_free(r);
}

/* ---- results as the callback sees them (before any copy) ------------------------------------ */

/* meta.h: a meta_kv_t with found == false has every other field zero. meta_sync hands out deep
 * copies (which normalise that), so this test looks at the result inside the callback of a
 * meta_t on a loop driven by the test thread. */
struct raw_check {
    bool done;
    int rc;
    size_t n_ops, bad_entries;
    bool found[4];
};

static bool kv_zero_unless_found(const meta_kv_t *kv)
{
    return kv->found || (!kv->key && !kv->value && !kv->value_len && !kv->create_rev &&
                         !kv->mod_rev && !kv->version && !kv->lease);
}

static void raw_txn_cb(void *arg, const meta_result_t *res)
{
    struct raw_check *c = arg;
    c->done = true;
    c->rc = res->rc;
    c->n_ops = res->n_ops;
    for (size_t i = 0; i < res->n_ops && i < 4; i++) {
        c->found[i] = res->ops[i].found;
        if (!kv_zero_unless_found(&res->ops[i]))
            c->bad_entries++;
    }
    if (!kv_zero_unless_found(&res->kv))
        c->bad_entries++;
}

static void raw_get_cb(void *arg, const meta_result_t *res)
{
    struct raw_check *c = arg;
    c->done = true;
    c->rc = res->rc;
    c->found[0] = res->kv.found;
    if (!kv_zero_unless_found(&res->kv))
        c->bad_entries++;
}

static void test_raw_results(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    env_t *env = NULL;
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    meta_t *m = NULL;
    if (meta_open(&m, env, g_url, NULL) != 0)
        fail_msg("[%s] meta_open: %s", g_backend, kvmesh_last_error());
    meta_op_t ops[4] = {put_op("conf/raw/a", "1"), get_op("conf/raw/absent"),
                        del_op("conf/raw/absent"), get_op("conf/raw/a")};
    struct raw_check c = {0};
    assert_int_equal(meta_txn(m, NULL, 0, ops, 4, NULL, 0, 10000, raw_txn_cb, &c), 0);
    uint64_t end = env_clock_mono_ms() + 15000;
    while (!c.done && env_clock_mono_ms() < end)
        uv_run(&loop, UV_RUN_ONCE);
    assert_true(c.done);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.n_ops, 4);
    assert_false(c.found[0]);
    assert_false(c.found[1]);
    assert_false(c.found[2]);
    assert_true(c.found[3]);
    if (c.bad_entries)
        fail_msg("[%s] %zu not-found txn entries carry a key, value or numbers", g_backend,
                 c.bad_entries);
    struct raw_check g = {0};
    assert_int_equal(meta_get(m, "conf/raw/absent", 10000, raw_get_cb, &g), 0);
    while (!g.done && env_clock_mono_ms() < end)
        uv_run(&loop, UV_RUN_ONCE);
    assert_true(g.done);
    assert_int_equal(g.rc, 0);
    assert_false(g.found[0]);
    assert_int_equal(g.bad_entries, 0);
    meta_close(m);
    env_uv_free(env);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- atomicity under concurrent writers ------------------------------------------------------ */

static long parse_long(const meta_kv_t *kv)
{
    if (!kv->found)
        return 0;
    char buf[32];
    size_t n = kv->value_len < sizeof(buf) - 1 ? kv->value_len : sizeof(buf) - 1;
    memcpy(buf, kv->value, n);
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

/* One CAS-increment loop for duration_ms; returns the number of successful increments. */
static uint64_t cas_loop(meta_sync_t *s, const char *key, uint64_t duration_ms, uint64_t *errors)
{
    uint64_t ok = 0, end = env_clock_mono_ms() + duration_ms;
    while (env_clock_mono_ms() < end) {
        meta_result_t *r = NULL;
        if (meta_sync_get(s, key, &r) != 0) {
            (*errors)++;
            meta_result_free(r);
            continue;
        }
        long v = parse_long(&r->kv);
        meta_cmp_t c = {.key = key,
                        .target = META_CMP_MOD_REV,
                        .op = META_EQ,
                        .num = r->kv.found ? r->kv.mod_rev : 0};
        meta_result_free(r);
        char buf[32];
        snprintf(buf, sizeof(buf), "%ld", v + 1);
        meta_op_t p = put_op(key, buf);
        if (meta_sync_txn(s, &c, 1, &p, 1, NULL, 0, &r) == 0) {
            if (r->succeeded)
                ok++;
        } else {
            (*errors)++; /* indeterminate outcomes would break the count: none are expected */
        }
        meta_result_free(r);
    }
    return ok;
}

struct cas_writer {
    const char *key;
    uint64_t ok, errors;
};

static void *cas_thread(void *arg)
{
    struct cas_writer *w = arg;
    meta_sync_t *s = open_handle(10000);
    w->ok = cas_loop(s, w->key, g_phase_ms, &w->errors);
    meta_sync_close(s);
    return NULL;
}

static void test_cas_threads(void **state)
{
    (void)state;
    const char *key = "conf/cas/threads";
    struct cas_writer w[N_WRITERS];
    pthread_t th[N_WRITERS];
    for (int i = 0; i < N_WRITERS; i++) {
        w[i] = (struct cas_writer){.key = key};
        assert_int_equal(pthread_create(&th[i], NULL, cas_thread, &w[i]), 0);
    }
    uint64_t sum = 0, errs = 0;
    for (int i = 0; i < N_WRITERS; i++) {
        pthread_join(th[i], NULL);
        sum += w[i].ok;
        errs += w[i].errors;
    }
    meta_result_t *r = get(g_m, key);
    long final = parse_long(&r->kv);
    meta_result_free(r);
    LOG("cas threads: %d writers, %" PRIu64 " ms, final %ld, successes %" PRIu64
        ", errors %" PRIu64,
        N_WRITERS, g_phase_ms, final, sum, errs);
    assert_int_equal(errs, 0);
    assert_true(sum > 0);
    assert_int_equal((uint64_t) final, sum);
}

/* One meta_sync handle shared by several threads (meta_sync is documented usable from any
 * thread): each thread's results are its own, and CAS increments add up exactly. */
struct shared_writer {
    int id;
    uint64_t ok, errors, mismatches;
};

static void *shared_thread(void *arg)
{
    struct shared_writer *w = arg;
    char mine[64];
    snprintf(mine, sizeof(mine), "conf/shared/own/%d", w->id);
    for (int i = 0; i < 150; i++) {
        char v[32];
        snprintf(v, sizeof(v), "%d-%d", w->id, i);
        meta_op_t p = put_op(mine, v);
        meta_op_t g = get_op(mine);
        meta_op_t ops[2] = {p, g};
        meta_result_t *r = NULL;
        if (meta_sync_txn(g_m, NULL, 0, ops, 2, NULL, 0, &r) != 0)
            w->errors++;
        else if (!value_is(&r->ops[1], v))
            w->mismatches++; /* another thread's answer */
        meta_result_free(r);
        uint64_t dummy = 0;
        w->ok += cas_loop(g_m, "conf/shared/counter", 1, &dummy);
        w->errors += dummy;
    }
    return NULL;
}

static void test_shared_handle(void **state)
{
    (void)state;
    enum { N = 4 };
    struct shared_writer w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        w[i] = (struct shared_writer){.id = i};
        assert_int_equal(pthread_create(&th[i], NULL, shared_thread, &w[i]), 0);
    }
    uint64_t ok = 0, errs = 0, mism = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += w[i].ok;
        errs += w[i].errors;
        mism += w[i].mismatches;
    }
    meta_result_t *r = get(g_m, "conf/shared/counter");
    long final = parse_long(&r->kv);
    meta_result_free(r);
    LOG("shared handle: %d threads, %" PRIu64 " increments, %" PRIu64 " errors", N, ok, errs);
    assert_int_equal(errs, 0);
    assert_int_equal(mism, 0);
    assert_true(ok > 0);
    assert_int_equal((uint64_t) final, ok);
}

static int cas_writer_main(const char *url, const char *key, const char *ms)
{
    snprintf(g_url, sizeof(g_url), "%s", url);
    g_backend = "writer";
    meta_opts_t o = {.default_timeout_ms = 10000};
    meta_sync_t *s = NULL;
    if (meta_sync_open(&s, url, &o) != 0) {
        fprintf(stderr, "writer: open %s: %s\n", url, kvmesh_last_error());
        return 2;
    }
    uint64_t errors = 0;
    uint64_t ok = cas_loop(s, key, strtoull(ms, NULL, 10), &errors);
    meta_sync_close(s);
    printf("successes %" PRIu64 " errors %" PRIu64 "\n", ok, errors);
    return 0;
}

static void test_cas_processes(void **state)
{
    (void)state;
    if (!is_server()) {
        /* one process cannot share a memory:// store with another: the thread test covers it */
        LOG("cas processes: not applicable to the in-process memory backend");
        return;
    }
    const char *key = "conf/cas/procs";
    pid_t pids[N_WRITERS];
    int fds[N_WRITERS];
    char ms[32];
    snprintf(ms, sizeof(ms), "%" PRIu64, g_phase_ms);
    for (int i = 0; i < N_WRITERS; i++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            dup2(p[1], 1);
            close(p[0]);
            close(p[1]);
            execl("/proc/self/exe", "itest_meta_conformance", "--cas-writer", g_url, key, ms,
                  (char *)NULL);
            _exit(127);
        }
        close(p[1]);
        fds[i] = p[0];
    }
    uint64_t sum = 0, errs = 0;
    for (int i = 0; i < N_WRITERS; i++) {
        char buf[128] = "";
        FILE *f = fdopen(fds[i], "r");
        char *line = fgets(buf, sizeof(buf), f);
        fclose(f);
        int st;
        waitpid(pids[i], &st, 0);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        unsigned long long ok = 0, er = 0;
        assert_non_null(line);
        assert_int_equal(sscanf(buf, "successes %llu errors %llu", &ok, &er), 2);
        sum += ok;
        errs += er;
    }
    meta_result_t *r = get(g_m, key);
    long final = parse_long(&r->kv);
    meta_result_free(r);
    LOG("cas processes: %d writer processes, final %ld, successes %" PRIu64 ", errors %" PRIu64,
        N_WRITERS, final, sum, errs);
    assert_int_equal(errs, 0);
    assert_true(sum > 0);
    assert_int_equal((uint64_t) final, sum);
}

#define QUOTA_LIMIT 1500

struct quota_writer {
    int id;
    uint64_t accepted_sum, accepted, rejected_full, conflicts, errors;
};

static void *quota_thread(void *arg)
{
    struct quota_writer *w = arg;
    meta_sync_t *s = open_handle(10000);
    char limit_str[16];
    snprintf(limit_str, sizeof(limit_str), "%d", QUOTA_LIMIT);
    unsigned seed = (unsigned)w->id * 2654435761u + 1;
    uint64_t end = env_clock_mono_ms() + g_phase_ms;
    while (env_clock_mono_ms() < end) {
        long delta = 1 + (long)(rand_r(&seed) % 9);
        meta_result_t *r = NULL;
        /* read used and the policy limit */
        if (meta_sync_get(s, "conf/quota/used", &r) != 0) {
            w->errors++;
            meta_result_free(r);
            continue;
        }
        long used = parse_long(&r->kv);
        int64_t mod = r->kv.found ? r->kv.mod_rev : 0;
        meta_result_free(r);
        if (used + delta > QUOTA_LIMIT) {
            w->rejected_full++;
            if (used >= QUOTA_LIMIT)
                break;
            continue;
        }
        char nv[32], lk[64], dv[16];
        snprintf(nv, sizeof(nv), "%ld", used + delta);
        snprintf(lk, sizeof(lk), "conf/quota/ledger/%d/%06" PRIu64, w->id, w->accepted);
        snprintf(dv, sizeof(dv), "%ld", delta);
        meta_cmp_t c[2] = {
            {.key = "conf/quota/used", .target = META_CMP_MOD_REV, .op = META_EQ, .num = mod},
            {.key = "conf/quota/limit",
             .target = META_CMP_VALUE,
             .op = META_EQ,
             .value = (const uint8_t *)limit_str,
             .value_len = strlen(limit_str)},
        };
        meta_op_t ops[2] = {put_op("conf/quota/used", nv), put_op(lk, dv)};
        if (meta_sync_txn(s, c, 2, ops, 2, NULL, 0, &r) != 0) {
            w->errors++;
        } else if (r->succeeded) {
            w->accepted++;
            w->accepted_sum += (uint64_t)delta;
        } else {
            w->conflicts++;
        }
        meta_result_free(r);
    }
    meta_sync_close(s);
    return NULL;
}

static void test_quota_txn(void **state)
{
    (void)state;
    char limit_str[16];
    snprintf(limit_str, sizeof(limit_str), "%d", QUOTA_LIMIT);
    put(g_m, "conf/quota/limit", limit_str, 0);
    struct quota_writer w[N_WRITERS];
    pthread_t th[N_WRITERS];
    for (int i = 0; i < N_WRITERS; i++) {
        w[i] = (struct quota_writer){.id = i};
        assert_int_equal(pthread_create(&th[i], NULL, quota_thread, &w[i]), 0);
    }
    uint64_t sum = 0, n = 0, conflicts = 0, errs = 0;
    for (int i = 0; i < N_WRITERS; i++) {
        pthread_join(th[i], NULL);
        sum += w[i].accepted_sum;
        n += w[i].accepted;
        conflicts += w[i].conflicts;
        errs += w[i].errors;
    }
    meta_result_t *r = get(g_m, "conf/quota/used");
    long used = parse_long(&r->kv);
    meta_result_free(r);
    /* the ledger (every accepted reservation) read back by pagination */
    uint64_t ledger_sum = 0, ledger_n = 0;
    char last[128] = "";
    bool more = true;
    while (more) {
        OK(meta_sync_range(g_m, "conf/quota/ledger/", last[0] ? last : NULL, 250, &r), r);
        for (size_t i = 0; i < r->n_kvs; i++) {
            ledger_sum += (uint64_t)parse_long(&r->kvs[i]);
            ledger_n++;
            snprintf(last, sizeof(last), "%s", r->kvs[i].key);
        }
        more = r->more;
        meta_result_free(r);
    }
    LOG("quota: limit %d, used %ld, accepted %" PRIu64 " (sum %" PRIu64 "), conflicts %" PRIu64
        ", errors %" PRIu64 ", ledger %" PRIu64 " rows sum %" PRIu64,
        QUOTA_LIMIT, used, n, sum, conflicts, errs, ledger_n, ledger_sum);
    assert_int_equal(errs, 0);
    assert_true(used <= QUOTA_LIMIT);
    assert_int_equal((uint64_t)used, sum);
    assert_int_equal(ledger_sum, sum);
    assert_int_equal(ledger_n, n);
    assert_true(n > 0);
}

/* ---- failures ------------------------------------------------------------------------------- */

static bool is_outage_rc(int rc)
{
    return rc == KVMESH_ECONN || rc == KVMESH_ETIMEDOUT || rc == KVMESH_EUNAVAILABLE ||
           rc == KVMESH_EBACKEND || rc == KVMESH_EIO || rc == KVMESH_EINDETERMINATE;
}

/* A call against a dead/partitioned backend must fail with a named error within its deadline. */
static void expect_outage_call(meta_sync_t *s, int i)
{
    meta_result_t *r = NULL;
    uint64_t t0 = env_clock_mono_ms();
    int rc = (i % 2) ? meta_sync_get(s, "conf/fail/k", &r)
                     : meta_sync_txn(s, NULL, 0, (meta_op_t[]){put_op("conf/fail/k", "x")}, 1, NULL,
                                     0, &r);
    uint64_t took = env_clock_mono_ms() - t0;
    if (rc == 0)
        fail_msg("[%s] call succeeded while the backend was down", g_backend);
    if (!is_outage_rc(rc))
        fail_msg("[%s] outage gave %s (%s)", g_backend, kvmesh_errname(rc), r->errmsg);
    assert_true(strlen(r->errmsg) > 0);
    if (took > FAIL_TIMEOUT_MS + CALL_SLACK_MS)
        fail_msg("[%s] failing call took %" PRIu64 " ms (deadline %d ms)", g_backend, took,
                 FAIL_TIMEOUT_MS);
    if (i == 0)
        LOG("outage: %s after %" PRIu64 " ms: %s", kvmesh_errname(rc), took, r->errmsg);
    meta_result_free(r);
}

static void expect_recovery(meta_sync_t *s)
{
    uint64_t t0 = env_clock_mono_ms();
    int rc = -1;
    while (env_clock_mono_ms() - t0 < RECOVER_BOUND_MS) {
        meta_result_t *r = NULL;
        rc =
            meta_sync_txn(s, NULL, 0, (meta_op_t[]){put_op("conf/fail/k", "back")}, 1, NULL, 0, &r);
        meta_result_free(r);
        if (rc == 0)
            break;
        sleep_ms(100);
    }
    if (rc != 0)
        fail_msg("[%s] no recovery within %d ms: %s", g_backend, RECOVER_BOUND_MS,
                 kvmesh_last_error());
    meta_result_t *r = get(s, "conf/fail/k");
    assert_true(value_is(&r->kv, "back"));
    meta_result_free(r);
    LOG("recovered %" PRIu64 " ms after the backend came back", env_clock_mono_ms() - t0);
}

struct bg_load {
    meta_sync_t *s;
    _Atomic bool stop;
    uint64_t ok, failed, max_ms;
};

static void *bg_main(void *arg)
{
    struct bg_load *b = arg;
    uint64_t end = env_clock_mono_ms() + 120000;
    while (!b->stop && env_clock_mono_ms() < end) {
        meta_result_t *r = NULL;
        uint64_t t0 = env_clock_mono_ms();
        int rc = meta_sync_get(b->s, "conf/fail/bg", &r);
        uint64_t took = env_clock_mono_ms() - t0;
        if (took > b->max_ms)
            b->max_ms = took;
        if (rc == 0)
            b->ok++;
        else
            b->failed++;
        meta_result_free(r);
        sleep_ms(5);
    }
    return NULL;
}

static void test_backend_failure(void **state)
{
    (void)state;
    if (!is_server()) {
        /* the memory backend's outages are injected: partition, then failures, then healed */
        meta_sync_t *s = open_handle(FAIL_TIMEOUT_MS);
        meta_memory_faults_t f = {.partitioned = true};
        OK(meta_memory_set_faults(meta_sync_handle(s), &f), (meta_result_t *)NULL);
        for (int i = 0; i < 2; i++)
            expect_outage_call(s, i);
        f = (meta_memory_faults_t){.fail_next = 3, .fail_rc = KVMESH_ECONN};
        OK(meta_memory_set_faults(meta_sync_handle(s), &f), (meta_result_t *)NULL);
        for (int i = 0; i < 3; i++)
            expect_outage_call(s, i);
        expect_recovery(s);
        meta_sync_close(s);
        return;
    }
    /* a server of its own, killed with SIGKILL under load and restarted */
    testsrv_t *srv = NULL;
    int rc = strcmp(g_backend, "redis") == 0 ? testsrv_start_redis(&srv, NULL)
                                             : testsrv_start_etcd(&srv);
    if (rc)
        fail_msg("[%s] start server: %s", g_backend, kvmesh_last_error());
    meta_opts_t o = {.default_timeout_ms = FAIL_TIMEOUT_MS, .name = "failure"};
    meta_sync_t *s = NULL;
    if (meta_sync_open(&s, testsrv_url(srv), &o) != 0)
        fail_msg("[%s] open: %s", g_backend, kvmesh_last_error());
    meta_result_t *r = NULL;
    OK(meta_sync_txn(s, NULL, 0, (meta_op_t[]){put_op("conf/fail/k", "before")}, 1, NULL, 0, &r),
       r);
    meta_result_free(r);
    struct bg_load bg = {.s = s};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bg_main, &bg), 0);
    sleep_ms(300);
    assert_int_equal(testsrv_kill(srv, SIGKILL), 0);
    for (int i = 0; i < 4; i++)
        expect_outage_call(s, i);
    if (testsrv_restart(srv) != 0)
        fail_msg("[%s] restart: %s", g_backend, kvmesh_last_error());
    expect_recovery(s);
    sleep_ms(300);
    bg.stop = true;
    pthread_join(th, NULL);
    LOG("kill/restart under load: %" PRIu64 " ok, %" PRIu64 " failed, slowest call %" PRIu64 " ms",
        bg.ok, bg.failed, bg.max_ms);
    assert_true(bg.max_ms <= FAIL_TIMEOUT_MS + CALL_SLACK_MS);
    assert_true(bg.failed > 0);
    meta_sync_close(s);
    testsrv_stop(srv);
}

static void test_bad_urls(void **state)
{
    (void)state;
    struct {
        const char *url;
        const char *needle; /* the message must name the problem */
    } bad[] = {
        {"", "no scheme"},
        {"localhost:6379", "no scheme"},
        {"ftp://x", "unsupported"},
        {"rediss://127.0.0.1:6379", "TLS not available"},
        {"memory://has space", "space"},
        {"memory://a/b", "invalid character"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        meta_sync_t *s = NULL;
        int rc = meta_sync_open(&s, bad[i].url, NULL);
        assert_null(s);
        assert_int_equal(rc, KVMESH_EURL);
        if (!strstr(kvmesh_last_error(), bad[i].needle))
            fail_msg("[%s] '%s': message '%s' lacks '%s'", g_backend, bad[i].url,
                     kvmesh_last_error(), bad[i].needle);
    }
    if (!is_server())
        return;
    /* backend-specific malformed URLs */
    char u[128];
    snprintf(u, sizeof(u), "%s://127.0.0.1:notaport", g_backend);
    meta_sync_t *s = NULL;
    assert_int_equal(meta_sync_open(&s, u, NULL), KVMESH_EURL);
    if (!strstr(kvmesh_last_error(), "port"))
        fail_msg("[%s] '%s': message '%s' does not name the port", g_backend, u,
                 kvmesh_last_error());
    snprintf(u, sizeof(u), "%s://", g_backend);
    assert_int_equal(meta_sync_open(&s, u, NULL), KVMESH_EURL);
    assert_true(strlen(kvmesh_last_error()) > 0);
    /* unreachable: a free port nobody listens on */
    uint16_t port = testsrv_free_port();
    snprintf(u, sizeof(u), "%s://127.0.0.1:%u", g_backend, port);
    meta_opts_t o = {.default_timeout_ms = FAIL_TIMEOUT_MS};
    int rc = meta_sync_open(&s, u, &o);
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%u", port);
    if (rc == 0) {
        meta_result_t *r = NULL;
        uint64_t t0 = env_clock_mono_ms();
        rc = meta_sync_get(s, "conf/x", &r);
        uint64_t took = env_clock_mono_ms() - t0;
        assert_true(is_outage_rc(rc));
        assert_true(took <= FAIL_TIMEOUT_MS + CALL_SLACK_MS);
        if (!strstr(r->errmsg, portstr))
            fail_msg("[%s] unreachable %s: message '%s' does not name the address", g_backend, u,
                     r->errmsg);
        LOG("unreachable: %s: %s", kvmesh_errname(rc), r->errmsg);
        meta_result_free(r);
        meta_sync_close(s);
    } else {
        assert_true(is_outage_rc(rc));
        assert_non_null(strstr(kvmesh_last_error(), portstr));
    }
}

static void test_stats(void **state)
{
    (void)state;
    meta_sync_t *s = open_handle(0);
    meta_stats_t st;
    meta_get_stats(meta_sync_handle(s), &st);
    assert_int_equal(st.gets + st.txns + st.ranges + st.lease_grants, 0);
    meta_result_t *r = get(s, "conf/stats");
    meta_result_free(r);
    put(s, "conf/stats", "1", 0);
    OK(meta_sync_range(s, "conf/stats", NULL, 1, &r), r);
    meta_result_free(r);
    assert_int_equal(meta_sync_range(s, "conf/stats", NULL, 0, &r), KVMESH_ERANGE);
    meta_result_free(r);
    meta_get_stats(meta_sync_handle(s), &st);
    assert_int_equal(st.gets, 1);
    assert_int_equal(st.txns, 1);
    assert_int_equal(st.ranges, 1);
    assert_int_equal(st.errors, 1);
    assert_string_equal(meta_backend_name(meta_sync_handle(s)), g_backend);
    meta_sync_close(s);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int suite_setup(void **state)
{
    (void)state;
    if (strcmp(g_backend, "memory") == 0) {
        snprintf(g_url, sizeof(g_url), "memory://conformance-%d", (int)getpid());
    } else {
        int rc = strcmp(g_backend, "redis") == 0 ? testsrv_start_redis(&g_srv, NULL)
                                                 : testsrv_start_etcd(&g_srv);
        if (rc) {
            fprintf(stderr, "[%s] cannot start the server: %s\n", g_backend, kvmesh_last_error());
            return -1;
        }
        snprintf(g_url, sizeof(g_url), "%s", testsrv_url(g_srv));
    }
    meta_opts_t o = {.default_timeout_ms = 10000, .name = "conformance"};
    if (meta_sync_open(&g_m, g_url, &o) != 0) {
        fprintf(stderr, "[%s] meta_sync_open(%s): %s\n", g_backend, g_url, kvmesh_last_error());
        testsrv_stop(g_srv);
        g_srv = NULL;
        return -1;
    }
    printf("[%s] backend url %s\n", g_backend, g_url);
    return 0;
}

static int suite_teardown(void **state)
{
    (void)state;
    meta_sync_close(g_m);
    g_m = NULL;
    testsrv_stop(g_srv);
    g_srv = NULL;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "--cas-writer") == 0)
        return cas_writer_main(argv[2], argv[3], argv[4]);
    if (argc < 2 ||
        (strcmp(argv[1], "memory") && strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s memory|redis|etcd [test-filter]\n", argv[0]);
        return 2;
    }
    g_backend = argv[1];
    g_phase_ms = testsrv_env_ms("KVMESH_META_CONF_MS", 5000);
    if (argc >= 3)
        cmocka_set_test_filter(argv[2]);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_basics),
        cmocka_unit_test(test_txn_compares),
        cmocka_unit_test(test_range_pagination),
        cmocka_unit_test(test_lease_expiry),
        cmocka_unit_test(test_lease_revoke_atomic),
        cmocka_unit_test(test_txn_branches),
        cmocka_unit_test(test_lease_revisions),
        cmocka_unit_test(test_range_edges),
        cmocka_unit_test(test_raw_results),
        cmocka_unit_test(test_cas_threads),
        cmocka_unit_test(test_shared_handle),
        cmocka_unit_test(test_cas_processes),
        cmocka_unit_test(test_quota_txn),
        cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_backend_failure),
    };
    static char names[sizeof(tests) / sizeof(tests[0])][96];
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        snprintf(names[i], sizeof(names[i]), "%s: %s", g_backend, tests[i].name + 5);
        tests[i].name = names[i];
    }
    char group[64];
    snprintf(group, sizeof(group), "meta_conformance_%s", g_backend);
    return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), suite_setup,
                                   suite_teardown);
}
