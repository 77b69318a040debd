/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_meta_memory.c — unit tests of the metadata dispatcher (meta.c) and the in-memory backend
 * on a deterministic virtual-clock env defined here: callbacks never run inside the call,
 * deadlines fire at the virtual deadline, lease expiry follows the virtual clock, fault injection
 * (fail next N, probability, after-apply, latency, partition), close with pending calls and close
 * from inside a callback, validation messages, stats, store sharing by name, result copies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"
#include "meta/meta.h"
#include "meta/meta_backend.h"
#include "meta/meta_memory.h"
#include "tenv.h"

/* ---- the deterministic env (tests/support/tenv.h) ------------------------------------------ */

static void run_idle(struct tenv *t)
{
    for (int i = 0; i < 1000000 && tenv_step(t, UINT64_MAX); i++) {
    }
}

static void run_until(struct tenv *t, uint64_t abs_ns)
{
    while (tenv_step(t, abs_ns)) {
    }
    if (t->now < abs_ns)
        t->now = abs_ns;
}

#define MS 1000000ull

static struct tenv *tenv_new(void)
{
    struct tenv *t = malloc(sizeof(*t));
    tenv_init(t, 0x9e3779b97f4a7c15ull);
    return t;
}

/* ---- result capture ------------------------------------------------------------------------- */

struct cap {
    int calls;
    meta_result_t *res;
    uint64_t at;
    struct tenv *t;
    bool submitted; /* set by the test after the meta_* call returned */
    meta_t *close_me;
};

static void on_res(void *arg, const meta_result_t *res)
{
    struct cap *c = arg;
    assert_true(c->submitted); /* never inside the call that submitted it */
    c->calls++;
    meta_result_free(c->res);
    c->res = meta_result_dup(res);
    c->at = c->t ? c->t->now : 0;
    if (c->close_me) {
        meta_t *m = c->close_me;
        c->close_me = NULL;
        meta_close(m);
    }
}

static void cap_reset(struct cap *c)
{
    meta_result_free(c->res);
    memset(c, 0, sizeof(*c));
}

struct fx {
    struct tenv *t;
    meta_t *m;
};

static meta_t *open_mem(struct tenv *t, const char *url)
{
    meta_t *m = NULL;
    int rc = meta_open(&m, &t->env, url, NULL);
    if (rc)
        fail_msg("meta_open(%s): %s", url, kvmesh_last_error());
    return m;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->t = tenv_new();
    f->m = open_mem(f->t, "memory://");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    meta_close(f->m);
    run_idle(f->t);
    assert_int_equal(f->t->n, 0); /* every timer cancelled or fired */
    free(f->t);
    free(f);
    return 0;
}

/* Synchronous helpers on the virtual env. */
static meta_result_t *do_txn(struct fx *f, const meta_cmp_t *c, size_t nc, const meta_op_t *t,
                             size_t nt, const meta_op_t *e, size_t ne)
{
    struct cap cp = {.t = f->t};
    assert_int_equal(meta_txn(f->m, c, nc, t, nt, e, ne, 0, on_res, &cp), 0);
    cp.submitted = true;
    assert_int_equal(cp.calls, 0);
    run_idle(f->t);
    assert_int_equal(cp.calls, 1);
    return cp.res;
}

static meta_result_t *do_get(struct fx *f, meta_t *m, const char *key)
{
    struct cap cp = {.t = f->t};
    assert_int_equal(meta_get(m, key, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.calls, 1);
    return cp.res;
}

static int64_t do_put(struct fx *f, const char *key, const char *val, meta_lease_t lease)
{
    meta_op_t o = {.type = META_OP_PUT,
                   .key = key,
                   .value = (const uint8_t *)val,
                   .value_len = strlen(val),
                   .lease = lease};
    meta_result_t *r = do_txn(f, NULL, 0, &o, 1, NULL, 0);
    assert_int_equal(r->rc, 0);
    int64_t rev = r->rev;
    meta_result_free(r);
    return rev;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_semantics(void **state)
{
    struct fx *f = *state;
    meta_result_t *r = do_get(f, f->m, "a");
    assert_int_equal(r->rc, 0);
    assert_false(r->kv.found);
    assert_int_equal(r->rev, 1);
    assert_string_equal(r->errmsg, "");
    meta_result_free(r);
    assert_int_equal(do_put(f, "a", "1", 0), 2);
    assert_int_equal(do_put(f, "b", "2", 0), 3);
    assert_int_equal(do_put(f, "a", "3", 0), 4);
    r = do_get(f, f->m, "a");
    assert_int_equal(r->kv.version, 2);
    assert_int_equal(r->kv.create_rev, 2);
    assert_int_equal(r->kv.mod_rev, 4);
    meta_result_free(r);
    /* deleting nothing does not bump; deleting two keys in one txn bumps once */
    meta_op_t d[3] = {{.type = META_OP_DEL, .key = "zz"}};
    r = do_txn(f, NULL, 0, d, 1, NULL, 0);
    assert_int_equal(r->rev, 4);
    assert_int_equal(r->n_deleted, 0);
    meta_result_free(r);
    d[0].key = "a";
    d[1] = (meta_op_t){.type = META_OP_DEL, .key = "b"};
    d[2] = (meta_op_t){.type = META_OP_GET, .key = "a"};
    r = do_txn(f, NULL, 0, d, 3, NULL, 0);
    assert_int_equal(r->rev, 5);
    assert_int_equal(r->n_deleted, 2);
    assert_false(r->ops[2].found);
    meta_result_free(r);
    /* else branch applied when a compare fails; compares see the state before the txn */
    meta_cmp_t c = {.key = "a", .target = META_CMP_EXISTS, .op = META_EQ, .num = 1};
    meta_op_t t = {
        .type = META_OP_PUT, .key = "then", .value = (const uint8_t *)"t", .value_len = 1};
    meta_op_t e = {
        .type = META_OP_PUT, .key = "else", .value = (const uint8_t *)"e", .value_len = 1};
    r = do_txn(f, &c, 1, &t, 1, &e, 1);
    assert_false(r->succeeded);
    assert_int_equal(r->n_ops, 1);
    meta_result_free(r);
    r = do_get(f, f->m, "then");
    assert_false(r->kv.found);
    meta_result_free(r);
    /* range: start_after before the prefix, inside it, and past its end */
    do_put(f, "p/1", "x", 0);
    do_put(f, "p/2", "x", 0);
    do_put(f, "p/3", "x", 0);
    do_put(f, "p0", "x", 0);
    do_put(f, "o", "x", 0);
    struct cap cp = {.t = f->t};
    assert_int_equal(meta_range(f->m, "p/", "a", 2, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->n_kvs, 2);
    assert_string_equal(cp.res->kvs[0].key, "p/1");
    assert_true(cp.res->more);
    cap_reset(&cp);
    cp.t = f->t;
    assert_int_equal(meta_range(f->m, "p/", "p/2", 5, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->n_kvs, 1);
    assert_string_equal(cp.res->kvs[0].key, "p/3");
    assert_false(cp.res->more);
    cap_reset(&cp);
    cp.t = f->t;
    assert_int_equal(meta_range(f->m, "p/", "q", 5, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->n_kvs, 0);
    assert_false(cp.res->more);
    cap_reset(&cp);
    cp.t = f->t;
    assert_int_equal(meta_range(f->m, "", NULL, 1000, 0, on_res, &cp), 0); /* all keys */
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->n_kvs, 6);
    cap_reset(&cp);
}

static void test_lease_virtual_clock(void **state)
{
    struct fx *f = *state;
    struct cap cp = {.t = f->t};
    assert_int_equal(meta_lease_grant(f->m, 10, 0, on_res, &cp), 0); /* raised to 1 s */
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->ttl_ms, 1000);
    meta_lease_t l = cp.res->lease;
    uint64_t granted = cp.at;
    cap_reset(&cp);
    do_put(f, "l/1", "x", l);
    int64_t rev = do_put(f, "l/2", "x", l);
    run_until(f->t, granted + 999 * MS);
    meta_result_t *r = do_get(f, f->m, "l/1");
    assert_true(r->kv.found);
    assert_int_equal(r->kv.lease, l);
    assert_int_equal(r->rev, rev);
    meta_result_free(r);
    cp.t = f->t;
    assert_int_equal(meta_lease_ttl(f->m, l, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->ttl_ms, 1);
    cap_reset(&cp);
    run_until(f->t, granted + 1000 * MS);
    r = do_get(f, f->m, "l/1");
    assert_false(r->kv.found);
    assert_int_equal(r->rev, rev + 1); /* both keys went in one step */
    meta_result_free(r);
    r = do_get(f, f->m, "l/2");
    assert_false(r->kv.found);
    meta_result_free(r);
    cp.t = f->t;
    assert_int_equal(meta_lease_keepalive(f->m, l, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->rc, KVMESH_ENOENT);
    assert_non_null(strstr(cp.res->errmsg, "not found"));
    cap_reset(&cp);
    /* keepalive pushes expiry out from the keepalive time */
    cp.t = f->t;
    assert_int_equal(meta_lease_grant(f->m, 2500, 0, on_res, &cp), 0); /* rounds to 3 s */
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->ttl_ms, 3000);
    l = cp.res->lease;
    uint64_t t0 = cp.at;
    cap_reset(&cp);
    do_put(f, "l/3", "x", l);
    run_until(f->t, t0 + 2000 * MS);
    cp.t = f->t;
    assert_int_equal(meta_lease_keepalive(f->m, l, 0, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.res->rc, 0);
    cap_reset(&cp);
    run_until(f->t, t0 + 4900 * MS);
    r = do_get(f, f->m, "l/3");
    assert_true(r->kv.found);
    meta_result_free(r);
    run_until(f->t, t0 + 5000 * MS);
    r = do_get(f, f->m, "l/3");
    assert_false(r->kv.found);
    meta_result_free(r);
}

static void test_deadline_and_partition(void **state)
{
    struct fx *f = *state;
    meta_memory_faults_t fl = {.partitioned = true};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    uint64_t t0 = f->t->now;
    struct cap cp = {.t = f->t};
    assert_int_equal(meta_get(f->m, "k", 100, on_res, &cp), 0);
    cp.submitted = true;
    run_idle(f->t);
    assert_int_equal(cp.calls, 1);
    assert_int_equal(cp.res->rc, KVMESH_ETIMEDOUT);
    assert_int_equal(cp.at - t0, 100 * MS);
    cap_reset(&cp);
    /* latency beyond the deadline: the user gets ETIMEDOUT at the deadline, and the txn still
     * applies later (like a request that reached a server after the client gave up) */
    fl = (meta_memory_faults_t){.latency_min_ms = 500, .latency_max_ms = 500};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    t0 = f->t->now;
    meta_op_t o = {
        .type = META_OP_PUT, .key = "late", .value = (const uint8_t *)"v", .value_len = 1};
    cp.t = f->t;
    assert_int_equal(meta_txn(f->m, NULL, 0, &o, 1, NULL, 0, 100, on_res, &cp), 0);
    cp.submitted = true;
    run_until(f->t, t0 + 100 * MS);
    assert_int_equal(cp.calls, 1);
    assert_int_equal(cp.res->rc, KVMESH_ETIMEDOUT);
    run_idle(f->t);
    assert_int_equal(cp.calls, 1); /* the late completion was dropped */
    cap_reset(&cp);
    fl = (meta_memory_faults_t){0};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    meta_result_t *r = do_get(f, f->m, "late");
    assert_true(r->kv.found);
    meta_result_free(r);
}

static void test_fault_injection(void **state)
{
    struct fx *f = *state;
    meta_memory_faults_t fl = {.fail_next = 2, .fail_rc = KVMESH_ECONN};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    for (int i = 0; i < 3; i++) {
        meta_result_t *r = do_get(f, f->m, "k");
        assert_int_equal(r->rc, i < 2 ? KVMESH_ECONN : 0);
        if (i < 2)
            assert_non_null(strstr(r->errmsg, "injected failure"));
        meta_result_free(r);
    }
    /* failure after apply: the write happened, the caller saw an error */
    fl = (meta_memory_faults_t){.fail_next = 1, .fail_after_apply = true};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    meta_op_t o = {
        .type = META_OP_PUT, .key = "applied", .value = (const uint8_t *)"v", .value_len = 1};
    meta_result_t *r = do_txn(f, NULL, 0, &o, 1, NULL, 0);
    assert_int_equal(r->rc, KVMESH_EUNAVAILABLE);
    meta_result_free(r);
    r = do_get(f, f->m, "applied");
    assert_true(r->kv.found);
    meta_result_free(r);
    /* probability 1 and 0 */
    fl = (meta_memory_faults_t){.fail_ppm = 1000000};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    for (int i = 0; i < 5; i++) {
        r = do_get(f, f->m, "k");
        assert_int_equal(r->rc, KVMESH_EUNAVAILABLE);
        meta_result_free(r);
    }
    fl = (meta_memory_faults_t){.fail_ppm = 500000};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    int fails = 0;
    for (int i = 0; i < 200; i++) {
        r = do_get(f, f->m, "k");
        fails += r->rc != 0;
        meta_result_free(r);
    }
    assert_true(fails > 50 && fails < 150);
    /* latency draws fall in [min, max] */
    fl = (meta_memory_faults_t){.latency_min_ms = 10, .latency_max_ms = 30};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), 0);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 50; i++) {
        uint64_t t0 = f->t->now;
        struct cap cp = {.t = f->t};
        assert_int_equal(meta_get(f->m, "k", 0, on_res, &cp), 0);
        cp.submitted = true;
        run_idle(f->t);
        uint64_t d = cp.at - t0;
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        cap_reset(&cp);
    }
    assert_true(lo >= 10 * MS && hi <= 30 * MS && hi > lo);
    fl = (meta_memory_faults_t){.latency_min_ms = 5, .latency_max_ms = 1};
    assert_int_equal(meta_memory_set_faults(f->m, &fl), KVMESH_EINVAL);
}

static void test_close_with_pending(void **state)
{
    struct fx *f = *state;
    meta_t *m = open_mem(f->t, "memory://pending");
    meta_memory_faults_t fl = {.latency_min_ms = 50, .latency_max_ms = 50};
    assert_int_equal(meta_memory_set_faults(m, &fl), 0);
    struct cap cp[5];
    for (int i = 0; i < 5; i++) {
        cp[i] = (struct cap){.t = f->t};
        assert_int_equal(meta_get(m, "k", 0, on_res, &cp[i]), 0);
        cp[i].submitted = true;
    }
    meta_close(m);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(cp[i].calls, 1);
        assert_int_equal(cp[i].res->rc, KVMESH_ECANCELED);
    }
    run_idle(f->t);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(cp[i].calls, 1);
        cap_reset(&cp[i]);
    }
    /* closing from inside a callback: the others are canceled, memory released next turn */
    m = open_mem(f->t, "memory://pending");
    struct cap a = {.t = f->t, .close_me = m}, b = {.t = f->t};
    assert_int_equal(meta_get(m, "k", 0, on_res, &a), 0);
    assert_int_equal(meta_get(m, "k", 0, on_res, &b), 0);
    fl = (meta_memory_faults_t){.latency_min_ms = 100, .latency_max_ms = 100};
    assert_int_equal(meta_memory_set_faults(m, &fl), 0);
    struct cap c = {.t = f->t};
    assert_int_equal(meta_get(m, "k", 0, on_res, &c), 0);
    a.submitted = b.submitted = c.submitted = true;
    run_idle(f->t);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.res->rc, 0);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.res->rc, KVMESH_ECANCELED);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res->rc, KVMESH_ECANCELED);
    cap_reset(&a);
    cap_reset(&b);
    cap_reset(&c);
}

static void test_validation(void **state)
{
    struct fx *f = *state;
    struct cap cp = {.t = f->t};
    meta_stats_t st;
    meta_get_stats(f->m, &st);
    uint64_t errs = st.errors;
    assert_int_equal(meta_get(f->m, NULL, 0, on_res, &cp), KVMESH_EINVAL);
    assert_int_equal(meta_get(f->m, "", 0, on_res, &cp), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "empty"));
    assert_int_equal(meta_get(f->m, "k", 0, NULL, NULL), KVMESH_EINVAL);
    assert_int_equal(meta_range(f->m, "p", NULL, 0, 0, on_res, &cp), KVMESH_ERANGE);
    assert_non_null(strstr(kvmesh_last_error(), "1..1000"));
    assert_int_equal(meta_range(f->m, NULL, NULL, 1, 0, on_res, &cp), KVMESH_EINVAL);
    assert_int_equal(meta_lease_grant(f->m, -5, 0, on_res, &cp), KVMESH_ERANGE);
    assert_int_equal(meta_lease_keepalive(f->m, 0, 0, on_res, &cp), KVMESH_EINVAL);
    meta_op_t big = {.type = META_OP_PUT,
                     .key = "k",
                     .value = (const uint8_t *)"x",
                     .value_len = META_VALUE_MAX + 1};
    assert_int_equal(meta_txn(f->m, NULL, 0, &big, 1, NULL, 0, 0, on_res, &cp), KVMESH_ETOOBIG);
    meta_op_t nullv = {.type = META_OP_PUT, .key = "k", .value = NULL, .value_len = 3};
    assert_int_equal(meta_txn(f->m, NULL, 0, &nullv, 1, NULL, 0, 0, on_res, &cp), KVMESH_EINVAL);
    meta_op_t badtype = {.type = (enum meta_op_type)9, .key = "k"};
    assert_int_equal(meta_txn(f->m, NULL, 0, &badtype, 1, NULL, 0, 0, on_res, &cp), KVMESH_EINVAL);
    meta_cmp_t ex = {.key = "k", .target = META_CMP_EXISTS, .op = META_EQ, .num = 2};
    assert_int_equal(meta_txn(f->m, &ex, 1, NULL, 0, NULL, 0, 0, on_res, &cp), KVMESH_EINVAL);
    meta_cmp_t badt = {.key = "k", .target = (enum meta_cmp_target)42};
    assert_int_equal(meta_txn(f->m, &badt, 1, NULL, 0, NULL, 0, 0, on_res, &cp), KVMESH_EINVAL);
    assert_int_equal(meta_txn(f->m, NULL, 1, NULL, 0, NULL, 0, 0, on_res, &cp), KVMESH_EINVAL);
    /* total txn bytes */
    static uint8_t half[META_VALUE_MAX / 2 + 40000];
    meta_op_t two[2] = {
        {.type = META_OP_PUT, .key = "a", .value = half, .value_len = sizeof(half)},
        {.type = META_OP_PUT, .key = "b", .value = half, .value_len = sizeof(half)}};
    assert_int_equal(meta_txn(f->m, NULL, 0, two, 2, NULL, 0, 0, on_res, &cp), KVMESH_ETOOBIG);
    assert_non_null(strstr(kvmesh_last_error(), "split"));
    assert_int_equal(cp.calls, 0);
    meta_get_stats(f->m, &st);
    assert_int_equal(st.errors - errs, 14);
    assert_int_equal(st.txns, 0);
    run_idle(f->t);
}

static void test_urls_and_sharing(void **state)
{
    struct fx *f = *state;
    meta_t *m = NULL;
    assert_int_equal(meta_open(&m, &f->t->env, "memory://a/b", NULL), KVMESH_EURL);
    assert_non_null(strstr(kvmesh_last_error(), "invalid character"));
    assert_int_equal(meta_open(&m, &f->t->env, "rediss://h:1", NULL), KVMESH_EURL);
    assert_non_null(strstr(kvmesh_last_error(), "TLS not available"));
    assert_int_equal(meta_open(&m, &f->t->env, "gopher://x", NULL), KVMESH_EURL);
    assert_non_null(strstr(kvmesh_last_error(), "memory://"));
    assert_int_equal(meta_open(&m, &f->t->env, "memory:/x", NULL), KVMESH_EURL);
    assert_int_equal(meta_open(&m, &f->t->env, NULL, NULL), KVMESH_EURL);
    assert_null(m);
    meta_t *a = open_mem(f->t, "MEMORY://shared");
    meta_t *b = open_mem(f->t, "memory://shared");
    meta_t *c = open_mem(f->t, "memory://other");
    assert_string_equal(meta_backend_name(a), "memory");
    meta_t *keep = f->m;
    f->m = a;
    do_put(f, "s", "1", 0);
    f->m = keep;
    meta_result_t *r = do_get(f, b, "s");
    assert_true(r->kv.found);
    meta_result_free(r);
    r = do_get(f, c, "s");
    assert_false(r->kv.found);
    meta_result_free(r);
    r = do_get(f, f->m, "s"); /* the private store */
    assert_false(r->kv.found);
    meta_result_free(r);
    meta_close(a);
    meta_close(b);
    b = open_mem(f->t, "memory://shared"); /* last handle gone: a fresh store */
    r = do_get(f, b, "s");
    assert_false(r->kv.found);
    meta_result_free(r);
    meta_close(b);
    meta_close(c);
    /* calls on a closing handle are refused (tested through a callback that closes) */
}

static void test_result_dup(void **state)
{
    (void)state;
    meta_kv_t kvs[2] = {
        {.found = true,
         .key = "k1",
         .value = (const uint8_t *)"v\0x",
         .value_len = 3,
         .mod_rev = 7},
        {.found = false},
    };
    meta_result_t r = {.rc = 0, .errmsg = NULL, .rev = 9, .kvs = kvs, .n_kvs = 2, .more = true};
    meta_result_t *d = meta_result_dup(&r);
    assert_non_null(d);
    assert_ptr_not_equal(d->kvs, kvs);
    assert_string_equal(d->kvs[0].key, "k1");
    assert_memory_equal(d->kvs[0].value, "v\0x", 3);
    assert_int_equal(d->kvs[0].mod_rev, 7);
    assert_false(d->kvs[1].found);
    assert_string_equal(d->errmsg, "");
    assert_int_equal(d->rev, 9);
    assert_true(d->more);
    assert_null(d->ops);
    meta_result_free(d);
    meta_result_free(NULL);
    assert_null(meta_result_dup(NULL));
}

/* ---- the dispatcher with a fake backend ------------------------------------------------------ */

static meta_call_t *fake_held;

static void fake_submit_sync(meta_t *m, meta_call_t *c)
{
    char key[8] = "x";
    meta_result_t r;
    memset(&r, 0, sizeof(r));
    r.kv.found = true;
    r.kv.key = key; /* backend-owned storage, gone after this function */
    r.rev = 42;
    meta_call_complete(c, &r);
    key[0] = 'Z';
}

static void fake_submit_hold(meta_t *m, meta_call_t *c)
{
    fake_held = c;
}

static int fake_open(meta_t *m, const char *url)
{
    return 0;
}

static void fake_close(meta_t *m)
{
    if (fake_held) {
        meta_call_t *c = fake_held;
        fake_held = NULL;
        meta_call_fail(c, KVMESH_ECANCELED, "fake: closed");
    }
}

static meta_t *fake_handle(struct tenv *t, void (*submit)(meta_t *, meta_call_t *))
{
    static struct meta_backend_ops ops;
    ops = (struct meta_backend_ops){
        .name = "fake", .open = fake_open, .close = fake_close, .submit = submit};
    meta_t *m = NULL;
    meta_opts_t mo = {.default_timeout_ms = 1000};
    assert_int_equal(meta_open_backend(&m, &t->env, &ops, NULL, &mo), 0);
    return m;
}

/* A backend completing inside submit(): the user is answered on a later turn, with a copy. */
static void test_sync_completion_is_deferred(void **state)
{
    (void)state;
    struct tenv *t = tenv_new();
    meta_t *m = fake_handle(t, fake_submit_sync);
    struct cap cp = {.t = t};
    assert_int_equal(meta_get(m, "k", 0, on_res, &cp), 0);
    assert_int_equal(cp.calls, 0);
    cp.submitted = true;
    run_idle(t);
    assert_int_equal(cp.calls, 1);
    assert_string_equal(cp.res->kv.key, "x");
    assert_int_equal(cp.res->rev, 42);
    cap_reset(&cp);
    meta_close(m);
    run_idle(t);
    free(t);
}

/* A backend answering after the deadline: the user got ETIMEDOUT once; the late answer is
 * dropped and the call freed once (ASan checks the memory); abandoned() tells the backend. */
static void test_late_backend_completion(void **state)
{
    (void)state;
    struct tenv *t = tenv_new();
    meta_t *m = fake_handle(t, fake_submit_hold);
    struct cap cp = {.t = t};
    assert_int_equal(meta_get(m, "k", 50, on_res, &cp), 0);
    cp.submitted = true;
    assert_non_null(fake_held);
    assert_false(meta_call_abandoned(fake_held));
    run_idle(t);
    assert_int_equal(cp.calls, 1);
    assert_int_equal(cp.res->rc, KVMESH_ETIMEDOUT);
    assert_non_null(strstr(cp.res->errmsg, "timed out"));
    assert_int_equal(cp.at, 50 * MS);
    assert_true(meta_call_abandoned(fake_held));
    meta_call_t *c = fake_held;
    fake_held = NULL;
    meta_result_t r;
    memset(&r, 0, sizeof(r));
    meta_call_complete(c, &r);
    run_idle(t);
    assert_int_equal(cp.calls, 1);
    cap_reset(&cp);
    /* a call still held at close: the user gets ECANCELED, the backend's close releases it */
    cp.t = t;
    assert_int_equal(meta_get(m, "k", 0, on_res, &cp), 0);
    cp.submitted = true;
    meta_close(m);
    assert_int_equal(cp.calls, 1);
    assert_int_equal(cp.res->rc, KVMESH_ECANCELED);
    assert_null(fake_held);
    cap_reset(&cp);
    run_idle(t);
    assert_int_equal(t->n, 0);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_semantics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_virtual_clock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_and_partition, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_injection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_urls_and_sharing, setup, teardown),
        cmocka_unit_test(test_result_dup),
        cmocka_unit_test(test_sync_completion_is_deferred),
        cmocka_unit_test(test_late_backend_completion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
