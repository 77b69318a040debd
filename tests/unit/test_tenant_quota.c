/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tenant_quota.c — the quota operation protocol (src/tenant) on the real env binding
 * (libuv) with the in-memory metadata backend:
 *   - policy bootstrap: create-if-absent, an equal policy starts, a differing hard field is
 *     refused naming it, a reserve for a tenant this runtime did not bootstrap is refused;
 *   - limits at, below and above the boundary for bytes and objects (EQUOTA naming bytes or
 *     objects and the limit; ETOOBIG for an object larger than the tenant's max_bytes);
 *   - every transition and refusal of the state machine: reserve -> claim -> finalize, repeats
 *     are idempotent, abort only from PENDING, claim/finalize of an aborted operation refused,
 *     finalize of another version refused, one non-terminal operation per object (EAGAIN),
 *     stale predecessor refused (ECONFLICT), overwrite and delete deltas derived from the
 *     committed row (a smaller overwrite is admitted at a full quota; delete refunds once);
 *   - batch acquisition: all-or-nothing in canonical key order;
 *   - one reconciliation pass with a scripted route side: expired PENDING aborted, a published
 *     operation finalized, a replayable one replayed then finalized, an unprovable one left
 *     charged and locked (degraded) and rescheduled, terminal history purged after retention.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "tenant/tenant.h"

typedef struct fx {
    uv_loop_t loop;
    env_t *env;
    meta_t *meta;
    tn_t *tn;
} fx_t;

typedef struct res {
    bool done;
    int rc;
    bool repeated, has_op;
    tn_op_t op;
    tn_usage_t u;
    char err[512];
} res_t;

static void on_res(void *arg, int rc, const tn_op_view_t *v)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->repeated = v->repeated;
    r->u = v->usage;
    r->has_op = v->op != NULL;
    if (v->op)
        r->op = *v->op;
    snprintf(r->err, sizeof(r->err), "%s", rc ? kvmesh_last_error() : "");
}

static void run_until(fx_t *f, const bool *done)
{
    for (int i = 0; !*done && i < 100000; i++)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(*done);
}

static tn_config_t g_cfg;

static void fx_open(fx_t *f, const char *url, const tn_config_t *cfg)
{
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(env_uv_new(&f->env, &f->loop, 0), 0);
    assert_int_equal(meta_open(&f->meta, f->env, url, NULL), 0);
    g_cfg = cfg ? *cfg : (tn_config_t){.deployment = "unit", .writer_epoch = 5};
    assert_int_equal(tn_new(&f->tn, f->env, f->meta, &g_cfg), 0);
}

static void fx_close(fx_t *f)
{
    assert_int_equal(tn_check_invariants(f->tn), 0);
    tn_close(f->tn);
    meta_close(f->meta);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    env_uv_free(f->env);
    while (uv_run(&f->loop, UV_RUN_NOWAIT))
        ;
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

static int boot(fx_t *f, const char *tenant, const tn_policy_t *p, char *err)
{
    res_t r = {0};
    assert_int_equal(tn_bootstrap(f->tn, tenant, p, on_res, &r), 0);
    run_until(f, &r.done);
    if (err)
        snprintf(err, 512, "%s", r.err);
    return r.rc;
}

static res_t reserve(fx_t *f, const char *tenant, const char *domain, const char *key, bool del,
                     uint64_t len, kvm_route_version_t pred, char *op_id)
{
    if (!op_id[0])
        tn_next_op_id(f->tn, op_id);
    tn_reserve_req_t q = {.tenant = tenant,
                          .domain = domain,
                          .key = key,
                          .op_id = op_id,
                          .is_delete = del,
                          .next_len = len,
                          .expected_route = pred};
    res_t r = {0};
    assert_int_equal(tn_reserve(f->tn, &q, on_res, &r), 0);
    run_until(f, &r.done);
    return r;
}

static res_t claim_ex(fx_t *f, const char *tenant, const char *domain, const char *key,
                      const char *op_id, kvm_route_version_t next, uint64_t token, bool cas_follows)
{
    tn_claim_req_t q = {.tenant = tenant,
                        .domain = domain,
                        .key = key,
                        .op_id = op_id,
                        .generation = next.fencing_token,
                        .fencing_token = next.fencing_token,
                        .publish_token = token,
                        .next_version = next,
                        .payload = (const uint8_t *)"route",
                        .payload_len = 5,
                        .cas_follows = cas_follows};
    res_t r = {0};
    assert_int_equal(tn_claim(f->tn, &q, on_res, &r), 0);
    run_until(f, &r.done);
    return r;
}

static res_t claim(fx_t *f, const char *tenant, const char *domain, const char *key,
                   const char *op_id, kvm_route_version_t next, uint64_t token)
{
    return claim_ex(f, tenant, domain, key, op_id, next, token, false);
}

static res_t finalize(fx_t *f, const char *tenant, const char *domain, const char *key,
                      const char *op_id, kvm_route_version_t v)
{
    res_t r = {0};
    assert_int_equal(tn_finalize(f->tn, tenant, domain, key, op_id, v, on_res, &r), 0);
    run_until(f, &r.done);
    return r;
}

static res_t abort_op(fx_t *f, const char *tenant, const char *domain, const char *key,
                      const char *op_id)
{
    res_t r = {0};
    assert_int_equal(tn_abort(f->tn, tenant, domain, key, op_id, on_res, &r), 0);
    run_until(f, &r.done);
    return r;
}

typedef struct ures {
    bool done;
    int rc;
    tn_usage_t u;
} ures_t;

static void on_usage(void *arg, int rc, const tn_usage_t *u)
{
    ures_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->u = *u;
}

static tn_usage_t usage(fx_t *f, const char *tenant)
{
    ures_t r = {0};
    assert_int_equal(tn_get_usage(f->tn, tenant, on_usage, &r), 0);
    run_until(f, &r.done);
    assert_int_equal(r.rc, 0);
    return r.u;
}

#define V(t, s) ((kvm_route_version_t){(t), (s)})
#define NONE    KVM_ROUTE_VERSION_NONE

/* a full write: reserve, claim, finalize; returns the finalized version */
static kvm_route_version_t put(fx_t *f, const char *tenant, const char *domain, const char *key,
                               uint64_t len, kvm_route_version_t pred, bool del)
{
    char id[TN_OPID_CAP] = "";
    res_t r = reserve(f, tenant, domain, key, del, len, pred, id);
    assert_int_equal(r.rc, 0);
    kvm_route_version_t next;
    assert_int_equal(kvm_route_version_next(&pred, 1, &next), 0);
    assert_int_equal(claim(f, tenant, domain, key, id, next, 77).rc, 0);
    r = finalize(f, tenant, domain, key, id, next);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.state, TN_ST_FINALIZED);
    return next;
}

static const tn_policy_t P1 = {.policy_version = 1, .max_bytes = 1000, .max_objects = 2};

static void test_bootstrap(void **state)
{
    (void)state;
    fx_t f, g;
    fx_open(&f, "memory://tq_boot", NULL);
    fx_open(&g, "memory://tq_boot", NULL);
    char err[512];
    assert_int_equal(boot(&f, "acme", &P1, err), 0); /* creates */
    assert_int_equal(boot(&g, "acme", &P1, err), 0); /* matches */
    tn_policy_t soft = P1;
    soft.max_remote_batch_bytes = 12345;
    assert_int_equal(boot(&g, "acme", &soft, err), 0); /* soft fields are runtime-local */
    tn_policy_t q = P1;
    q.max_objects = 3;
    assert_int_equal(boot(&g, "acme", &q, err), KVMESH_EINCOMPAT);
    assert_non_null(strstr(err, "max_objects"));
    q = P1;
    q.policy_version = 2;
    assert_int_equal(boot(&g, "acme", &q, err), KVMESH_EINCOMPAT);
    assert_non_null(strstr(err, "policy_version"));
    /* another tenant is independent */
    assert_int_equal(boot(&g, "globex", &q, err), 0);
    /* a runtime that did not bootstrap a tenant cannot reserve for it */
    fx_t h;
    fx_open(&h, "memory://tq_boot", NULL);
    char id[TN_OPID_CAP] = "";
    res_t r = reserve(&h, "acme", NULL, "k", false, 1, NONE, id);
    assert_int_equal(r.rc, KVMESH_EINCOMPAT);
    id[0] = '\0';
    r = reserve(&h, "nobody", NULL, "k", false, 1, NONE, id);
    assert_int_equal(r.rc, KVMESH_EINCOMPAT);
    assert_non_null(strstr(r.err, "in metadata"));
    /* synchronous refusals */
    tn_policy_t bad = P1;
    bad.max_bytes = 0;
    assert_int_equal(tn_bootstrap(h.tn, "acme", &bad, on_res, NULL), KVMESH_ECONFIG);
    assert_int_equal(tn_bootstrap(h.tn, "-bad", &P1, on_res, NULL), KVMESH_EBADTENANT);
    fx_close(&h);
    fx_close(&g);
    fx_close(&f);
}

static void test_limits(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "memory://tq_limits", NULL);
    assert_int_equal(boot(&f, "acme", &P1, NULL), 0);
    char a[TN_OPID_CAP] = "", b[TN_OPID_CAP] = "", c[TN_OPID_CAP] = "";
    /* above the byte limit by itself: refused at once, nothing charged */
    res_t r = reserve(&f, "acme", NULL, "big", false, 1001, NONE, a);
    assert_int_equal(r.rc, KVMESH_ETOOBIG);
    assert_non_null(strstr(r.err, "max_bytes 1000"));
    /* exactly at the limit: admitted */
    a[0] = '\0';
    r = reserve(&f, "acme", NULL, "k1", false, 1000, NONE, a);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.u.pending_bytes, 1000);
    assert_int_equal(r.u.pending_objects, 1);
    /* one byte more (pending counts): refused, naming bytes and the limit */
    r = reserve(&f, "acme", NULL, "k2", false, 1, NONE, b);
    assert_int_equal(r.rc, KVMESH_EQUOTA);
    assert_non_null(strstr(r.err, "bytes quota exceeded"));
    assert_non_null(strstr(r.err, "max_bytes 1000"));
    assert_int_equal(abort_op(&f, "acme", NULL, "k1", a).rc, 0);
    tn_usage_t u = usage(&f, "acme");
    assert_int_equal(u.pending_bytes, 0);
    assert_int_equal(u.n_pending, 0);
    /* below: two objects fit, a third is refused on objects */
    put(&f, "acme", NULL, "k1", 400, NONE, false);
    put(&f, "acme", NULL, "k2", 599, NONE, false);
    r = reserve(&f, "acme", NULL, "k3", false, 1, NONE, c);
    assert_int_equal(r.rc, KVMESH_EQUOTA);
    assert_non_null(strstr(r.err, "objects quota exceeded"));
    assert_non_null(strstr(r.err, "max_objects 2"));
    u = usage(&f, "acme");
    assert_int_equal(u.committed_bytes, 999);
    assert_int_equal(u.committed_objects, 2);
    /* the same key in another domain and another tenant is another object */
    assert_int_equal(boot(&f, "globex", &P1, NULL), 0);
    put(&f, "globex", NULL, "k1", 1000, NONE, false);
    u = usage(&f, "acme");
    assert_int_equal(u.committed_bytes, 999);
    fx_close(&f);
}

static void test_cycle(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "memory://tq_cycle", NULL);
    assert_int_equal(boot(&f, "acme", &P1, NULL), 0);
    char id[TN_OPID_CAP] = "";
    res_t r = reserve(&f, "acme", "d", "obj", false, 600, NONE, id);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.state, TN_ST_PENDING);
    assert_int_equal(r.op.kind, TN_KIND_CREATE);
    /* repeating the reserve is idempotent: same state, nothing charged twice */
    r = reserve(&f, "acme", "d", "obj", false, 600, NONE, id);
    assert_int_equal(r.rc, 0);
    assert_true(r.repeated);
    assert_int_equal(r.u.pending_bytes, 600);
    /* finalize before the claim is refused */
    assert_int_equal(finalize(&f, "acme", "d", "obj", id, V(1, 1)).rc, KVMESH_ECONFLICT);
    r = claim(&f, "acme", "d", "obj", id, V(1, 1), 5);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.state, TN_ST_PUBLISHING);
    assert_int_equal(r.u.n_publishing, 1);
    assert_int_equal(r.u.n_pending, 0);
    /* the same claim again: a repeat; another publish token: refused */
    assert_true(claim(&f, "acme", "d", "obj", id, V(1, 1), 5).repeated);
    assert_int_equal(claim(&f, "acme", "d", "obj", id, V(1, 1), 6).rc, KVMESH_ECONFLICT);
    /* publishing cannot be aborted */
    r = abort_op(&f, "acme", "d", "obj", id);
    assert_int_equal(r.rc, KVMESH_ECONFLICT);
    assert_non_null(strstr(r.err, "publishing"));
    /* finalize of another version refused; the right one commits */
    assert_int_equal(finalize(&f, "acme", "d", "obj", id, V(1, 2)).rc, KVMESH_ECONFLICT);
    r = finalize(&f, "acme", "d", "obj", id, V(1, 1));
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.u.committed_bytes, 600);
    assert_int_equal(r.u.pending_bytes, 0);
    assert_int_equal(r.u.n_publishing, 0);
    assert_true(finalize(&f, "acme", "d", "obj", id, V(1, 1)).repeated);
    assert_int_equal(abort_op(&f, "acme", "d", "obj", id).rc, KVMESH_ECONFLICT);
    /* overwrite with a smaller length at a full quota: delta derived, nothing positive */
    put(&f, "acme", NULL, "filler", 400, NONE, false); /* 1000 bytes, 2 objects */
    char ov[TN_OPID_CAP] = "";
    r = reserve(&f, "acme", "d", "obj", false, 100, V(1, 1), ov);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.kind, TN_KIND_OVERWRITE);
    assert_int_equal(r.op.delta_bytes, -500);
    assert_int_equal(r.u.pending_bytes, 0);
    assert_int_equal(claim(&f, "acme", "d", "obj", ov, V(1, 2), 9).rc, 0);
    r = finalize(&f, "acme", "d", "obj", ov, V(1, 2));
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.u.committed_bytes, 500);
    /* a larger overwrite charges only the growth */
    char g2[TN_OPID_CAP] = "";
    r = reserve(&f, "acme", "d", "obj", false, 600, V(1, 2), g2);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.delta_bytes, 500);
    assert_int_equal(r.u.pending_bytes, 500);
    assert_int_equal(abort_op(&f, "acme", "d", "obj", g2).rc, 0);
    /* delete refunds the committed length, once */
    char d1[TN_OPID_CAP] = "";
    r = reserve(&f, "acme", "d", "obj", true, 0, V(1, 2), d1);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.kind, TN_KIND_DELETE);
    assert_int_equal(r.op.delta_bytes, -100);
    assert_int_equal(r.op.delta_objects, -1);
    assert_int_equal(claim(&f, "acme", "d", "obj", d1, V(1, 3), 4).rc, 0);
    r = finalize(&f, "acme", "d", "obj", d1, V(1, 3));
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.u.committed_bytes, 400);
    assert_int_equal(r.u.committed_objects, 1);
    assert_true(finalize(&f, "acme", "d", "obj", d1, V(1, 3)).repeated);
    assert_int_equal(usage(&f, "acme").committed_bytes, 400);
    /* nothing left to delete */
    char d2[TN_OPID_CAP] = "";
    assert_int_equal(reserve(&f, "acme", "d", "obj", true, 0, V(1, 3), d2).rc, KVMESH_ENOENT);
    fx_close(&f);
}

/* The route primary's claim right before its CAS (cas_follows): a FINALIZED operation is a
 * delayed duplicate and refused ECONFLICT, nothing charged or changed; the same claim without
 * the flag (a writer's repeat) is still answered as a repeat. A PUBLISHING one is a replay. */
static void test_finalized_cas_duplicate(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "memory://tq_dup", NULL);
    assert_int_equal(boot(&f, "acme", &P1, NULL), 0);
    char id[TN_OPID_CAP] = "";
    assert_int_equal(reserve(&f, "acme", "d", "k", false, 300, NONE, id).rc, 0);
    res_t r = claim_ex(&f, "acme", "d", "k", id, V(1, 1), 5, true);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.state, TN_ST_PUBLISHING);
    r = claim_ex(&f, "acme", "d", "k", id, V(1, 2), 5, true); /* a replay at another version */
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.state, TN_ST_PUBLISHING);
    assert_int_equal(finalize(&f, "acme", "d", "k", id, V(1, 2)).rc, 0);
    r = claim_ex(&f, "acme", "d", "k", id, V(1, 3), 5, true);
    assert_int_equal(r.rc, KVMESH_ECONFLICT);
    assert_non_null(strstr(r.err, "is finalized"));
    assert_non_null(strstr(r.err, "must not apply again"));
    r = claim_ex(&f, "acme", "d", "k", id, V(1, 2), 5, false);
    assert_int_equal(r.rc, 0);
    assert_true(r.repeated);
    tn_usage_t u = usage(&f, "acme");
    assert_int_equal(u.committed_bytes, 300);
    assert_int_equal(u.committed_objects, 1);
    assert_int_equal(u.n_publishing + u.n_pending, 0);
    /* an aborted operation is refused with or without the flag (unchanged) */
    char ab[TN_OPID_CAP] = "";
    assert_int_equal(reserve(&f, "acme", "d", "k2", false, 100, NONE, ab).rc, 0);
    assert_int_equal(abort_op(&f, "acme", "d", "k2", ab).rc, 0);
    assert_int_equal(claim_ex(&f, "acme", "d", "k2", ab, V(1, 1), 6, true).rc, KVMESH_ECANCELED);
    fx_close(&f);
}

static void test_abort_and_lock(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "memory://tq_abort", NULL);
    assert_int_equal(boot(&f, "acme", &P1, NULL), 0);
    char a[TN_OPID_CAP] = "", b[TN_OPID_CAP] = "";
    assert_int_equal(reserve(&f, "acme", NULL, "x", false, 10, NONE, a).rc, 0);
    /* one non-terminal operation per object */
    res_t r = reserve(&f, "acme", NULL, "x", false, 10, NONE, b);
    assert_int_equal(r.rc, KVMESH_EAGAIN);
    assert_non_null(strstr(r.err, a));
    /* abort wins: the claim (route CAS) is rejected, finalize too; abort repeats */
    assert_int_equal(abort_op(&f, "acme", NULL, "x", a).rc, 0);
    assert_true(abort_op(&f, "acme", NULL, "x", a).repeated);
    assert_int_equal(claim(&f, "acme", NULL, "x", a, V(1, 1), 3).rc, KVMESH_ECANCELED);
    assert_int_equal(finalize(&f, "acme", NULL, "x", a, V(1, 1)).rc, KVMESH_ECANCELED);
    assert_int_equal(reserve(&f, "acme", NULL, "x", false, 10, NONE, a).rc, KVMESH_ECANCELED);
    /* the lock is released: a new operation proceeds; a stale predecessor is refused */
    b[0] = '\0';
    kvm_route_version_t v = put(&f, "acme", NULL, "x", 10, NONE, false);
    char c[TN_OPID_CAP] = "";
    r = reserve(&f, "acme", NULL, "x", false, 20, NONE, c);
    assert_int_equal(r.rc, KVMESH_ECONFLICT);
    assert_non_null(strstr(r.err, "predecessor"));
    c[0] = '\0';
    assert_int_equal(reserve(&f, "acme", NULL, "x", false, 20, v, c).rc, 0);
    /* an unknown operation */
    char u[TN_OPID_CAP];
    tn_next_op_id(f.tn, u);
    assert_int_equal(claim(&f, "acme", NULL, "x", u, V(1, 9), 3).rc, KVMESH_ENOENT);
    assert_int_equal(abort_op(&f, "acme", NULL, "x", u).rc, KVMESH_ENOENT);
    /* bad op ids are refused synchronously */
    assert_int_equal(tn_abort(f.tn, "acme", NULL, "x", "nope", on_res, NULL), KVMESH_EINVAL);
    fx_close(&f);
}

typedef struct bres {
    bool done;
    int rc;
    size_t idx;
} bres_t;

static void on_batch(void *arg, int rc, size_t idx)
{
    bres_t *b = arg;
    b->done = true;
    b->rc = rc;
    b->idx = idx;
}

static void test_batch(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "memory://tq_batch", NULL);
    tn_policy_t p = {.policy_version = 1, .max_bytes = 1000, .max_objects = 3};
    assert_int_equal(boot(&f, "acme", &p, NULL), 0);
    const char *keys[4] = {"d", "b", "a", "c"}; /* canonical order: a b c d */
    char ids[4][TN_OPID_CAP];
    tn_reserve_req_t q[4];
    for (int i = 0; i < 4; i++) {
        tn_next_op_id(f.tn, ids[i]);
        q[i] =
            (tn_reserve_req_t){.tenant = "acme", .key = keys[i], .op_id = ids[i], .next_len = 100};
    }
    bres_t b = {0};
    assert_int_equal(tn_reserve_batch(f.tn, q, 4, on_batch, &b), 0);
    run_until(&f, &b.done);
    assert_int_equal(b.rc, KVMESH_EQUOTA); /* a, b, c fit; d (index 0) does not */
    assert_int_equal(b.idx, 0);
    tn_usage_t u = usage(&f, "acme");
    assert_int_equal(u.pending_bytes, 0); /* all-or-nothing */
    assert_int_equal(u.pending_objects, 0);
    assert_int_equal(u.n_pending, 0);
    for (int i = 0; i < 3; i++)
        tn_next_op_id(f.tn, ids[i]);
    b = (bres_t){0};
    assert_int_equal(tn_reserve_batch(f.tn, q, 3, on_batch, &b), 0);
    run_until(&f, &b.done);
    assert_int_equal(b.rc, 0);
    assert_int_equal(usage(&f, "acme").n_pending, 3);
    q[1].key = q[0].key;
    assert_int_equal(tn_reserve_batch(f.tn, q, 2, on_batch, &b), KVMESH_EINVAL);
    fx_close(&f);
}

/* ---- reconciliation with a scripted route side ------------------------------------------ */

typedef struct script {
    fx_t *f;
    int mode[8]; /* per key "r0".."r7": 0 published, 1 at predecessor (replay ok), 2 the
                  * lookup fails (unprovable), 3 published by its operation at another version
                  * than the claim's, 4 another operation's route above the predecessor
                  * (superseded) */
    char ops[8][TN_OPID_CAP];
    uint32_t replays;
} script_t;

static int key_idx(const char *key)
{
    return key[1] - '0';
}

static void sc_lookup(void *ctx, const char *tenant, const char *domain, const char *key,
                      tn_lookup_cb cb, void *arg)
{
    script_t *s = ctx;
    int i = key_idx(key);
    tn_route_obs_t o = {.found = true, .predecessor = NONE};
    (void)tenant;
    (void)domain;
    switch (s->mode[i]) {
    case 0:
        o.version = V(1, 1);
        snprintf(o.content_op, sizeof(o.content_op), "%s", s->ops[i]);
        break;
    case 1:
        o.found = false;
        break;
    case 3:
        o.version = V(1, 4);
        snprintf(o.content_op, sizeof(o.content_op), "%s", s->ops[i]);
        break;
    case 4:
        o.version = V(1, 7);
        ks_opid_format(o.content_op, 99, 99);
        break;
    default:
        cb(arg, KVMESH_EUNAVAILABLE, &o);
        return;
    }
    cb(arg, 0, &o);
}

static void sc_replay(void *ctx, const tn_op_t *op, tn_replay_cb cb, void *arg)
{
    script_t *s = ctx;
    s->replays++;
    assert_int_equal(op->publish_token, 77);
    cb(arg, 0, op->next_version);
}

typedef struct rres {
    bool done;
    tn_recon_report_t rep;
} rres_t;

static void on_recon(void *arg, const tn_recon_report_t *r)
{
    rres_t *x = arg;
    x->done = true;
    x->rep = *r;
}

static void test_recon(void **state)
{
    (void)state;
    fx_t f;
    tn_config_t cfg = {.deployment = "unit",
                       .writer_epoch = 9,
                       .pending_ttl_ms = 1,
                       .publish_ttl_ms = 1,
                       .backoff_max_ms = 50,
                       .retain_ms = 1};
    fx_open(&f, "memory://tq_recon", &cfg);
    tn_policy_t p = {.policy_version = 1, .max_bytes = 10000, .max_objects = 10};
    assert_int_equal(boot(&f, "acme", &p, NULL), 0);
    script_t s = {.f = &f, .mode = {0, 1, 2, 0, 3, 4}};
    /* r0, r1, r2, r4, r5 claimed (publishing); r3 only reserved (pending, expires) */
    for (int i = 0; i < 6; i++) {
        char key[4];
        snprintf(key, sizeof(key), "r%d", i);
        s.ops[i][0] = '\0';
        assert_int_equal(reserve(&f, "acme", NULL, key, false, 100, NONE, s.ops[i]).rc, 0);
        if (i != 3)
            assert_int_equal(claim(&f, "acme", NULL, key, s.ops[i], V(1, 1), 77).rc, 0);
    }
    /* the writer's own abort of a publishing operation stays refused */
    assert_int_equal(abort_op(&f, "acme", NULL, "r5", s.ops[5]).rc, KVMESH_ECONFLICT);
    usleep(5000); /* past every deadline (wall clock) */
    tn_route_ops_t ops = {.lookup = sc_lookup, .replay = sc_replay, .ctx = &s};
    rres_t x = {0};
    assert_int_equal(tn_recon_pass(f.tn, "acme", &ops, 16, on_recon, &x), 0);
    assert_int_equal(tn_recon_pass(f.tn, "acme", &ops, 16, on_recon, &x), KVMESH_EAGAIN);
    run_until(&f, &x.done);
    assert_int_equal(x.rep.rc, 0);
    assert_int_equal(x.rep.aborted, 1); /* r3 */
    /* r0 (published), r1 (replayed), r4 (published at (1,4): recorded by a replay claim) */
    assert_int_equal(x.rep.finalized, 3);
    assert_int_equal(x.rep.replayed, 1);
    assert_int_equal(x.rep.degraded, 1);   /* r2: cannot prove: stays charged and locked */
    assert_int_equal(x.rep.superseded, 1); /* r5: a route above its predecessor: aborted */
    assert_int_equal(s.replays, 1);
    uint32_t purged = x.rep.purged; /* terminal records may already be past their 1 ms */
    tn_usage_t u = usage(&f, "acme");
    assert_int_equal(u.committed_bytes, 300);
    assert_int_equal(u.pending_bytes, 100); /* r2's conservative charge; r5's refunded */
    assert_int_equal(u.n_publishing, 1);
    assert_int_equal(u.n_pending, 0);
    /* r5 is unlocked: the next write is admitted (its row never recorded a route) */
    char n5[TN_OPID_CAP] = "";
    res_t r5 = reserve(&f, "acme", NULL, "r5", false, 1, NONE, n5);
    assert_int_equal(r5.rc, 0);
    assert_int_equal(abort_op(&f, "acme", NULL, "r5", n5).rc, 0);
    char nid[TN_OPID_CAP] = "";
    assert_int_equal(reserve(&f, "acme", NULL, "r2", false, 1, NONE, nid).rc, KVMESH_EAGAIN);
    /* r4's row records the version its route was published at: the next write expects it */
    nid[0] = '\0';
    assert_int_equal(reserve(&f, "acme", NULL, "r4", false, 1, V(1, 1), nid).rc, KVMESH_ECONFLICT);
    nid[0] = '\0';
    res_t r4 = reserve(&f, "acme", NULL, "r4", false, 1, V(1, 4), nid);
    assert_int_equal(r4.rc, 0);
    assert_int_equal(abort_op(&f, "acme", NULL, "r4", nid).rc, 0);
    /* later passes: r2 is retried with backoff, terminal history is purged after retention */
    usleep(5000);
    x = (rres_t){0};
    assert_int_equal(tn_recon_pass(f.tn, "acme", &ops, 16, on_recon, &x), 0);
    run_until(&f, &x.done);
    assert_true(purged + x.rep.purged >= 5); /* r0, r1, r4 finalized, r3, r5 aborted (+ ...) */
    assert_true(x.rep.degraded <= 1);
    /* the route turns out published: the next due pass finalizes r2 */
    s.mode[2] = 0;
    usleep(60000); /* past the capped backoff */
    x = (rres_t){0};
    assert_int_equal(tn_recon_pass(f.tn, "acme", &ops, 16, on_recon, &x), 0);
    run_until(&f, &x.done);
    assert_int_equal(x.rep.finalized, 1);
    u = usage(&f, "acme");
    assert_int_equal(u.committed_bytes, 400);
    assert_int_equal(u.pending_bytes, 0);
    assert_int_equal(u.n_publishing, 0);
    tn_stats_t st;
    tn_get_stats(f.tn, &st);
    assert_int_equal(st.recon_finalized, 4);
    assert_true(st.recon_degraded >= 1);
    fx_close(&f);
}

/* one quota write between a writer runtime and a route primary runtime, records handed over as
 * hints (as the store carries them in the route CAS request and reply) */
static kvm_route_version_t hinted_write(fx_t *f, tn_t *prim, const char *key, uint64_t len)
{
    char id[TN_OPID_CAP] = "";
    res_t r = reserve(f, "acme", NULL, key, false, len, NONE, id);
    assert_int_equal(r.rc, 0);
    uint8_t hint[TN_HINT_MAX];
    size_t hl;
    assert_int_equal(tn_hint_export(f->tn, "acme", id, hint, sizeof(hint), &hl), 0);
    assert_int_equal(tn_hint_import(prim, hint, hl), 0);
    tn_claim_req_t q = {.tenant = "acme",
                        .key = key,
                        .op_id = id,
                        .generation = 1,
                        .fencing_token = 1,
                        .publish_token = 3,
                        .next_version = V(1, 1),
                        .payload = (const uint8_t *)"p",
                        .payload_len = 1};
    r = (res_t){0};
    assert_int_equal(tn_claim(prim, &q, on_res, &r), 0);
    run_until(f, &r.done);
    assert_int_equal(r.rc, 0);
    assert_int_equal(tn_hint_export(prim, "acme", id, hint, sizeof(hint), &hl), 0);
    assert_int_equal(tn_hint_import(f->tn, hint, hl), 0);
    r = finalize(f, "acme", NULL, key, id, V(1, 1));
    assert_int_equal(r.rc, 0);
    return V(1, 1);
}

static void test_round_trips(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "memory://tq_rt", NULL);
    meta_t *pm;
    tn_t *prim;
    assert_int_equal(meta_open(&pm, f.env, "memory://tq_rt", NULL), 0);
    assert_int_equal(
        tn_new(&prim, f.env, pm, &(tn_config_t){.deployment = "unit", .writer_epoch = 6}), 0);
    tn_policy_t p = {.policy_version = 1, .max_bytes = 1 << 20, .max_objects = 100};
    assert_int_equal(boot(&f, "acme", &p, NULL), 0);
    hinted_write(&f, prim, "warm", 10); /* fills the writer's cache (usage row) */
    meta_stats_t w0, p0, w1, p1;
    meta_get_stats(f.meta, &w0);
    meta_get_stats(pm, &p0);
    hinted_write(&f, prim, "k1", 100);
    meta_get_stats(f.meta, &w1);
    meta_get_stats(pm, &p1);
    uint64_t txns = (w1.txns - w0.txns) + (p1.txns - p0.txns);
    printf("metadata round trips of one quota write: %llu (writer %llu, primary %llu)\n",
           (unsigned long long)txns, (unsigned long long)(w1.txns - w0.txns),
           (unsigned long long)(p1.txns - p0.txns));
    assert_int_equal(txns, 3); /* reserve, claim-publish, finalize */
    assert_int_equal(w1.gets + w1.ranges, w0.gets + w0.ranges);
    assert_int_equal(usage(&f, "acme").committed_bytes, 110);
    /* a stale hint costs a failed compare, not a wrong result: import an old usage row */
    char id[TN_OPID_CAP] = "";
    res_t r = reserve(&f, "acme", NULL, "k2", false, 5, NONE, id);
    assert_int_equal(r.rc, 0);
    uint8_t hint[TN_HINT_MAX];
    size_t hl;
    assert_int_equal(tn_hint_export(f.tn, "acme", id, hint, sizeof(hint), &hl), 0);
    assert_int_equal(abort_op(&f, "acme", NULL, "k2", id).rc, 0); /* the hint is now stale */
    assert_int_equal(tn_hint_import(prim, hint, hl), 0);
    tn_t *mine = f.tn;
    f.tn = prim; /* the primary's claim */
    assert_int_equal(claim(&f, "acme", NULL, "k2", id, V(1, 1), 4).rc, KVMESH_ECANCELED);
    f.tn = mine;
    /* malformed hints are refused */
    assert_int_equal(tn_hint_import(prim, hint, hl - 1), KVMESH_EPROTO);
    hint[3] ^= 0x20; /* the key's text */
    assert_int_equal(tn_hint_import(prim, hint, hl), KVMESH_EPROTO);
    assert_int_equal(tn_hint_import(prim, (const uint8_t *)"\x03", 1), KVMESH_EPROTO);
    tn_close(prim);
    meta_close(pm);
    fx_close(&f);
}

/* ---- purging a quota tenant's tombstones (docs/tenancy.md) ---------------------------------- */

typedef struct rowres {
    bool done, found;
    tn_objrow_t row;
} rowres_t;

static void on_rowget(void *arg, const meta_result_t *res)
{
    rowres_t *x = arg;
    x->done = true;
    assert_int_equal(res->rc, 0);
    x->found = res->kv.found;
    if (x->found)
        assert_int_equal(tn_objrow_decode(res->kv.value, res->kv.value_len, &x->row), 0);
}

static rowres_t read_row(fx_t *f, const char *key)
{
    char k[KS_KEY_CAP];
    assert_int_equal(ks_object_key(k, sizeof(k), "unit", "acme", NULL, key), 0);
    rowres_t x = {0};
    assert_int_equal(meta_get(f->meta, k, 1000, on_rowget, &x), 0);
    run_until(f, &x.done);
    return x;
}

static uint64_t wall_ms(fx_t *f)
{
    return env_wall_ms(f->env);
}

static void sleep_until(fx_t *f, uint64_t ms)
{
    while (wall_ms(f) < ms)
        usleep(2000);
}

/* a delete of key (live at pred) published at next with tombstone deadline d */
static void delete_with(fx_t *f, const char *key, kvm_route_version_t pred,
                        kvm_route_version_t next, uint64_t d)
{
    char id[TN_OPID_CAP] = "";
    assert_int_equal(reserve(f, "acme", NULL, key, true, 0, pred, id).rc, 0);
    assert_int_equal(claim(f, "acme", NULL, key, id, next, 77).rc, 0);
    res_t r = {0};
    assert_int_equal(tn_finalize_tomb(f->tn, "acme", NULL, key, id, next, d, on_res, &r), 0);
    run_until(f, &r.done);
    assert_int_equal(r.rc, 0);
}

/* steps 1 and 3: the row records D; NONE is admitted only at now >= D + M, a stale NONE before
 * (sim_quota_crash_before_cas seed 127 of the withdrawn rule) is refused; a row deleted without
 * a deadline (D = 0, the old layout) never admits NONE */
static void test_tomb_reserve(void **state)
{
    (void)state;
    fx_t f;
    tn_config_t cfg = {.deployment = "unit", .writer_epoch = 11, .purge_margin_ms = 40};
    fx_open(&f, "memory://tq_tomb", &cfg);
    tn_policy_t p = {.policy_version = 1, .max_bytes = 10000, .max_objects = 10};
    assert_int_equal(boot(&f, "acme", &p, NULL), 0);
    put(&f, "acme", NULL, "k", 100, NONE, false); /* (1,1) */
    uint64_t d = wall_ms(&f) + 40;
    delete_with(&f, "k", V(1, 1), V(1, 2), d);
    rowres_t x = read_row(&f, "k");
    assert_true(x.found);
    assert_false(x.row.live);
    assert_int_equal(x.row.tomb_until_ms, d);
    assert_true(kvm_route_version_equal(&x.row.route_version, &V(1, 2)));
    char id[TN_OPID_CAP] = "";
    res_t r = reserve(&f, "acme", NULL, "k", false, 10, NONE, id);
    assert_int_equal(r.rc, KVMESH_ECONFLICT); /* tombstone (1,2) may still be live for the CAS */
    id[0] = '\0';
    r = reserve(&f, "acme", NULL, "k", false, 10, V(1, 2), id); /* the writer saw it: as before */
    assert_int_equal(r.rc, 0);
    assert_int_equal(abort_op(&f, "acme", NULL, "k", id).rc, 0);
    sleep_until(&f, d + 40);
    id[0] = '\0';
    r = reserve(&f, "acme", NULL, "k", false, 10, NONE, id);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.op.kind, TN_KIND_CREATE);
    assert_true(kvm_route_version_equal(&r.op.expected_route, &V(1, 2))); /* tombstone or none */
    /* versions stay monotone across the purge: the claim must follow the tombstone's */
    assert_int_equal(claim(&f, "acme", NULL, "k", id, V(1, 1), 77).rc, KVMESH_EINVAL);
    assert_int_equal(claim(&f, "acme", NULL, "k", id, V(1, 3), 77).rc, 0);
    assert_int_equal(finalize(&f, "acme", NULL, "k", id, V(1, 3)).rc, 0);
    x = read_row(&f, "k");
    assert_true(x.row.live);
    assert_int_equal(x.row.tomb_until_ms, 0);
    /* a delete finalized without a deadline keeps today's rule */
    char d0[TN_OPID_CAP] = "";
    assert_int_equal(reserve(&f, "acme", NULL, "k", true, 0, V(1, 3), d0).rc, 0);
    assert_int_equal(claim(&f, "acme", NULL, "k", d0, V(1, 4), 77).rc, 0);
    assert_int_equal(finalize(&f, "acme", NULL, "k", d0, V(1, 4)).rc, 0);
    usleep(50000);
    id[0] = '\0';
    assert_int_equal(reserve(&f, "acme", NULL, "k", false, 10, NONE, id).rc, KVMESH_ECONFLICT);
    fx_close(&f);
}

static void abs_lookup(void *ctx, const char *tenant, const char *domain, const char *key,
                       tn_lookup_cb cb, void *arg)
{
    (void)ctx;
    (void)tenant;
    (void)domain;
    (void)key;
    tn_route_obs_t o = {.found = false}; /* the tombstone was purged */
    cb(arg, 0, &o);
}

static rres_t pass(fx_t *f, const tn_route_ops_t *ops)
{
    rres_t x = {0};
    assert_int_equal(tn_recon_pass(f->tn, "acme", ops, 16, on_recon, &x), 0);
    run_until(f, &x.done);
    return x;
}

/* step 5: a PUBLISHING delete whose route is absent is finalized (D = 1); step 6: the done stage
 * removes a finalized delete's row with its record once D + M has passed, and then a put
 * expecting NONE finds no row (a stale expected version: ECONFLICT) */
static void test_tomb_recon(void **state)
{
    (void)state;
    for (int bug = 0; bug < 2; bug++) {
        fx_t f;
        tn_config_t cfg = {.deployment = "unit",
                           .writer_epoch = 12,
                           .publish_ttl_ms = 1,
                           .backoff_max_ms = 5,
                           .retain_ms = 40, /* the first pass does not reach the done entry */
                           .purge_margin_ms = 30,
                           .test_bugs = bug ? TN_TEST_BUG_NO_ABSENT_FINAL : 0};
        fx_open(&f, bug ? "memory://tq_tombr_bug" : "memory://tq_tombr", &cfg);
        tn_policy_t p = {.policy_version = 1, .max_bytes = 10000, .max_objects = 10};
        assert_int_equal(boot(&f, "acme", &p, NULL), 0);
        put(&f, "acme", NULL, "a", 100, NONE, false); /* (1,1) */
        char id[TN_OPID_CAP] = "";
        assert_int_equal(reserve(&f, "acme", NULL, "a", true, 0, V(1, 1), id).rc, 0);
        assert_int_equal(claim(&f, "acme", NULL, "a", id, V(1, 2), 77).rc, 0);
        usleep(5000);
        tn_route_ops_t ops = {.lookup = abs_lookup, .ctx = NULL};
        rres_t x = pass(&f, &ops);
        if (bug) { /* without step 5 the delete stays PUBLISHING, charged and locked */
            assert_int_equal(x.rep.finalized, 0);
            assert_int_equal(x.rep.degraded, 1);
            assert_int_equal(usage(&f, "acme").n_publishing, 1);
            fx_close(&f);
            continue;
        }
        assert_int_equal(x.rep.finalized, 1);
        tn_usage_t u = usage(&f, "acme");
        assert_int_equal(u.committed_bytes, 0);
        assert_int_equal(u.committed_objects, 0);
        assert_int_equal(u.n_publishing, 0);
        rowres_t row = read_row(&f, "a");
        assert_true(row.found);
        assert_int_equal(row.row.tomb_until_ms, 1);
        /* the done stage: past retain_ms and D + M (D = 1): record and row removed */
        usleep(50000);
        x = pass(&f, &ops);
        assert_true(x.rep.purged >= 1);
        assert_false(read_row(&f, "a").found);
        char n1[TN_OPID_CAP] = "";
        assert_int_equal(reserve(&f, "acme", NULL, "a", false, 5, V(1, 2), n1).rc,
                         KVMESH_ECONFLICT);
        n1[0] = '\0';
        res_t r = reserve(&f, "acme", NULL, "a", false, 5, NONE, n1);
        assert_int_equal(r.rc, 0);
        assert_int_equal(r.op.expected_acct, 0);
        assert_int_equal(abort_op(&f, "acme", NULL, "a", n1).rc, 0);
        /* a delete whose D + M is later: its done entry moves to D + M, then the row goes */
        put(&f, "acme", NULL, "b", 100, NONE, false);
        uint64_t d = wall_ms(&f) + 100;
        delete_with(&f, "b", V(1, 1), V(1, 2), d);
        usleep(45000); /* past retain_ms, before D + M */
        x = pass(&f, &ops);
        assert_true(read_row(&f, "b").found);
        sleep_until(&f, d + 31);
        x = pass(&f, &ops);
        assert_true(x.rep.purged >= 1);
        assert_false(read_row(&f, "b").found);
        fx_close(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bootstrap),   cmocka_unit_test(test_limits),
        cmocka_unit_test(test_cycle),       cmocka_unit_test(test_abort_and_lock),
        cmocka_unit_test(test_batch),       cmocka_unit_test(test_recon),
        cmocka_unit_test(test_round_trips), cmocka_unit_test(test_tomb_reserve),
        cmocka_unit_test(test_tomb_recon),  cmocka_unit_test(test_finalized_cas_duplicate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
