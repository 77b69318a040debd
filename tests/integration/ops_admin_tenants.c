/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_admin_tenants.c — `kvmesh admin tenants` and `kvmesh admin quota` as real processes on a
 * real Redis and a real etcd (the same checks on each), beside two kvmeshd daemons that enforce
 * tenant "td" (tenant_policies):
 *   - tenants: every policy (table, JSON parsed here, pages of one, --max truncation) with its
 *     usage row; `tenants TENANT` for one; the usage of td after `kvmesh put` of three objects
 *     equals their bytes and count exactly;
 *   - quota TENANT: usage and the reservations of tenant "tq", made here through the quota
 *     protocol (tn_reserve on this process's own loop: a writer that reserved and died before
 *     its claim) — three pending operations, two with a short deadline; the listing shows them
 *     in the due index with kinds, keys, deltas and how many are past their deadline;
 *   - quota TENANT abort: the dry run lists exactly the two expired ones and changes nothing;
 *     --apply aborts them (usage: the third one's bytes remain pending); --op ID --apply aborts
 *     the third before its deadline; again: exit 3 (no longer pending);
 *   - quota TENANT reconcile: a fourth expired reservation is listed by the dry run; --apply
 *     joins as a client runtime with the stored policy and its pass aborts it (report JSON);
 *     usage ends with nothing pending;
 *   - policy list / policy get TENANT: the policy records alone (no usage row), JSON and table;
 *   - quota TENANT object KEY: the accounting row of each object put into td (live, its length,
 *     acct version 1, unlocked; JSON parsed here, and the table), of a pending reservation of tq
 *     (not live, locked by its operation), --domain; no row: exit 3;
 *   - bad arguments: a tenant id breaking the rule, an unknown tenant (3), no tenant, an unknown
 *     action, --apply or --op where they do not belong, a malformed --op (2).
 *   - policy set TENANT: the dry run (table and JSON: stored and new record, new version and
 *     fingerprint, changed fields, the live daemons); --apply refused while they are live, then
 *     written once they are stopped (policy get shows version 2); a runtime with the old
 *     tenant_policies entry is refused naming policy_version, one with the new limits but the
 *     old version naming max_bytes; a daemon restarted with the new entry serves td and enforces
 *     the new max_objects; bad assignments (2), an unknown tenant (3); two plans of tq from one
 *     read: the second apply fails its compare (KVMESH_ECONFLICT).
 * No daemon enforces "tq", so nothing but the commands under test reconciles it.
 */
#include <jansson.h>
#include <uv.h>

#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "api/kvmesh_tools.h"
#include "ops_util.h"
#include "redis_etcd_main.h"
#include "tenant/tenant.h"

#define TT_DAEMONS   2
#define TT_SHORT_TTL 1500u   /* ms: the reservations that expire during the test */
#define TT_LONG_TTL  600000u /* ms: the one that does not */

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    tdaemon_t d[TT_DAEMONS];
};

static void admin(tdaemon_out_t *o, struct cluster *c, const char *a1, const char *a2,
                  const char *a3, const char *a4, const char *a5)
{
    const char *argv[20] = {ops_bin_kvmesh, "admin", "--config", c->cfg};
    size_t n = 4;
    const char *extra[] = {a1, a2, a3, a4, a5};
    for (size_t i = 0; i < 5 && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ops_runv(o, argv);
}

/* kvmesh admin --config CFG ARGS... (NULL-terminated). */
static void adminl(tdaemon_out_t *o, struct cluster *c, ...)
{
    const char *argv[24] = {ops_bin_kvmesh, "admin", "--config", c->cfg};
    size_t n = 4;
    va_list ap;
    va_start(ap, c);
    for (const char *a; n < 23 && (a = va_arg(ap, const char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    ops_runv(o, argv);
}

static json_t *admin_json(struct cluster *c, const char *a1, const char *a2, const char *a3,
                          const char *a4)
{
    tdaemon_out_t o;
    const char *a[5] = {a1, a2, a3, a4, NULL};
    size_t n = 0;
    while (n < 4 && a[n])
        n++;
    a[n] = "--json";
    admin(&o, c, a[0], a[1], a[2], a[3], a[4]);
    OPS_ASSERT_RUN(&o, 0);
    json_error_t je;
    json_t *j = json_loads(o.out, 0, &je);
    if (!j)
        fail_msg("not JSON (%s):\n%s", je.text, o.out);
    tdaemon_out_free(&o);
    return j;
}

static long long jint(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (path2)
        v = json_object_get(v, path2);
    if (!json_is_integer(v))
        fail_msg("no integer %s%s%s", path1, path2 ? "." : "", path2 ? path2 : "");
    return json_integer_value(v);
}

/* ---- a writer that reserves and never claims (on this thread's own loop) -------------------- */

struct writer {
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
    tn_t *tn;
};

struct wait {
    bool done;
    int rc;
};

static void on_view(void *arg, int rc, const tn_op_view_t *v)
{
    (void)v;
    struct wait *w = arg;
    w->done = true;
    w->rc = rc;
}

static void writer_open(struct writer *w, struct cluster *c, uint32_t pending_ttl_ms,
                        uint64_t epoch)
{
    memset(w, 0, sizeof(*w));
    assert_int_equal(uv_loop_init(&w->loop), 0);
    assert_int_equal(env_uv_new(&w->env, &w->loop, 0), 0);
    meta_opts_t o = {.default_timeout_ms = 5000};
    assert_int_equal(meta_open(&w->m, w->env, c->url, &o), 0);
    tn_config_t cfg = {.deployment = c->dep,
                       .writer_epoch = epoch,
                       .timeout_ms = 5000,
                       .pending_ttl_ms = pending_ttl_ms};
    assert_int_equal(tn_new(&w->tn, w->env, w->m, &cfg), 0);
    tn_policy_t p = {.policy_version = 1, .max_bytes = 1 << 20, .max_objects = 100};
    struct wait r = {0};
    assert_int_equal(tn_bootstrap(w->tn, "tq", &p, on_view, &r), 0);
    while (!r.done)
        uv_run(&w->loop, UV_RUN_ONCE);
    assert_int_equal(r.rc, 0);
}

static void writer_reserve(struct writer *w, const char *key, uint64_t len, char *op_id)
{
    tn_next_op_id(w->tn, op_id);
    tn_reserve_req_t q = {.tenant = "tq",
                          .domain = "dom",
                          .key = key,
                          .op_id = op_id,
                          .next_len = len,
                          .expected_route = KVM_ROUTE_VERSION_NONE};
    struct wait r = {0};
    assert_int_equal(tn_reserve(w->tn, &q, on_view, &r), 0);
    while (!r.done)
        uv_run(&w->loop, UV_RUN_ONCE);
    assert_int_equal(r.rc, 0);
}

static void writer_close(struct writer *w)
{
    tn_close(w->tn);
    meta_close(w->m);
    uv_run(&w->loop, UV_RUN_NOWAIT);
    env_uv_free(w->env);
    while (uv_run(&w->loop, UV_RUN_NOWAIT))
        ;
    uv_loop_close(&w->loop);
}

/* ---- checks ---------------------------------------------------------------------------------- */

static json_t *parse_json(tdaemon_out_t *o);

/* quota td object kN: each object put into td has a live, unlocked row of its length. */
static void check_objects(struct cluster *c, const char *const *vals, int n)
{
    tdaemon_out_t o;
    for (int i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        json_t *j = admin_json(c, "quota", "td", "object", key);
        assert_string_equal(json_string_value(json_object_get(j, "key")), key);
        assert_string_equal(json_string_value(json_object_get(j, "domain")), "");
        assert_true(json_is_true(json_object_get(j, "live")));
        assert_int_equal(jint(j, "length", NULL), (long long)strlen(vals[i]));
        assert_int_equal(jint(j, "acct_version", NULL), 1);
        assert_true(jint(j, "route_version", "fencing_token") > 0);
        assert_true(jint(j, "mod_rev", NULL) > 0);
        assert_int_equal(strlen(json_string_value(json_object_get(j, "last_op"))),
                         KVMESH_ADMIN_OPID_LEN);
        assert_true(json_is_null(json_object_get(j, "lock_op")));
        json_decref(j);
    }
    adminl(&o, c, "quota", "td", "object", "k1", NULL);
    OPS_ASSERT_RUN(&o, 0);
    char want[64];
    snprintf(want, sizeof(want), "length         %zu\n", strlen(vals[1]));
    OPS_ASSERT_HAS(o.out, want);
    OPS_ASSERT_HAS(o.out, "live           yes\n");
    OPS_ASSERT_HAS(o.out, "- (unlocked)");
    tdaemon_out_free(&o);
    /* a domain or key that breaks its rule */
    static const char *bad[][2] = {{"k1", "--domain=bad domain!"}, {"", NULL}};
    for (size_t i = 0; i < 2; i++) {
        adminl(&o, c, "quota", "td", "object", bad[i][0], bad[i][1], NULL);
        OPS_ASSERT_RUN(&o, 2);
        OPS_ASSERT_HAS(o.err, "kvmesh admin quota object: bad argument");
        tdaemon_out_free(&o);
    }
    /* another domain has no such row */
    adminl(&o, c, "quota", "td", "object", "k1", "--domain=elsewhere", NULL);
    OPS_ASSERT_RUN(&o, 3);
    OPS_ASSERT_HAS(o.err, "in domain \"elsewhere\"");
    tdaemon_out_free(&o);
}

static void check_tenants(struct cluster *c)
{
    /* td: three objects through a client that enforces its policy (the config's) */
    static const char *vals[] = {"alpha", "bravo-bravo", "charlie-charlie-charlie"};
    uint64_t bytes = 0;
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        tdaemon_out_t o;
        ops_run(&o, ops_bin_kvmesh, "put", "--config", c->cfg, "--tenant", "td", key, vals[i],
                NULL);
        OPS_ASSERT_RUN(&o, 0);
        tdaemon_out_free(&o);
        bytes += strlen(vals[i]);
    }
    check_objects(c, vals, 3);
    json_t *j = admin_json(c, "tenants", "td", NULL, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "tenant")), "td");
    assert_int_equal(jint(j, "max_bytes", NULL), 2 << 20);
    assert_int_equal(jint(j, "max_objects", NULL), 50);
    assert_int_equal(jint(j, "policy_version", NULL), 1);
    assert_int_equal(jint(j, "usage", "used_bytes"), (long long)bytes);
    assert_int_equal(jint(j, "usage", "used_objects"), 3);
    assert_int_equal(jint(j, "usage", "pending_bytes"), 0);
    json_decref(j);

    /* the list, in one page and in pages of one; --max truncates */
    static const char *pages[] = {NULL, "--page=1"};
    for (int pg = 0; pg < 2; pg++) {
        j = admin_json(c, "tenants", pages[pg], NULL, NULL);
        json_t *arr = json_object_get(j, "tenants");
        assert_int_equal(json_array_size(arr), 2);
        assert_false(json_is_true(json_object_get(j, "truncated")));
        assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 0), "tenant")),
                            "td");
        assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 1), "tenant")),
                            "tq");
        json_decref(j);
    }
    j = admin_json(c, "tenants", "--max=1", NULL, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "tenants")), 1);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    json_decref(j);
    tdaemon_out_t o;
    admin(&o, c, "tenants", NULL, NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "max bytes");
    OPS_ASSERT_HAS(o.out, "2MiB");
    OPS_ASSERT_HAS(o.out, "2 tenant policies");
    tdaemon_out_free(&o);

    /* policy list / get: the policy records alone */
    j = admin_json(c, "policy", "list", NULL, NULL);
    json_t *pol = json_object_get(j, "policies");
    assert_int_equal(json_array_size(pol), 2);
    assert_int_equal(jint(j, "count", NULL), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(pol, 0), "tenant")), "td");
    assert_null(json_object_get(json_array_get(pol, 0), "usage"));
    json_decref(j);
    j = admin_json(c, "policy", "get", "td", NULL);
    assert_string_equal(json_string_value(json_object_get(j, "tenant")), "td");
    assert_int_equal(jint(j, "max_bytes", NULL), 2 << 20);
    assert_int_equal(jint(j, "max_objects", NULL), 50);
    assert_int_equal(jint(j, "policy_version", NULL), 1);
    assert_null(json_object_get(j, "usage"));
    json_decref(j);
    admin(&o, c, "policy", "list", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "fingerprint");
    OPS_ASSERT_HAS(o.out, "2 tenant policies");
    tdaemon_out_free(&o);
}

static void wait_expired(struct cluster *c, size_t want)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        json_t *j = admin_json(c, "quota", "tq", NULL, NULL);
        long long backlog = jint(j, "backlog", NULL);
        json_decref(j);
        if (backlog == (long long)want)
            return;
        if (env_clock_mono_ms() - t0 > 30000)
            fail_msg("the backlog of tq did not reach %zu (%lld)", want, backlog);
        usleep(200000);
    }
}

static void check_quota(struct cluster *c)
{
    struct writer ws, wl;
    writer_open(&ws, c, TT_SHORT_TTL, 101);
    writer_open(&wl, c, TT_LONG_TTL, 102);
    char op1[TN_OPID_CAP], op2[TN_OPID_CAP], op3[TN_OPID_CAP], op4[TN_OPID_CAP];
    writer_reserve(&ws, "obj-1", 1000, op1);
    writer_reserve(&ws, "obj-2", 2000, op2);
    writer_reserve(&wl, "obj-3", 4000, op3);

    /* quota tq: three reservations */
    json_t *j = admin_json(c, "quota", "tq", NULL, NULL);
    assert_int_equal(jint(j, "count", NULL), 3);
    assert_int_equal(jint(j, "tenant", "max_bytes"), 1 << 20);
    json_t *u = json_object_get(json_object_get(j, "tenant"), "usage");
    assert_int_equal(jint(u, "pending_bytes", NULL), 7000);
    assert_int_equal(jint(u, "pending_objects", NULL), 3);
    assert_int_equal(jint(u, "ops_pending", NULL), 3);
    json_t *ops = json_object_get(j, "operations"), *e;
    size_t i;
    int seen = 0;
    json_array_foreach(ops, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        assert_string_equal(json_string_value(json_object_get(e, "state")), "pending");
        assert_string_equal(json_string_value(json_object_get(e, "kind")), "create");
        assert_string_equal(json_string_value(json_object_get(e, "domain")), "dom");
        assert_int_equal(jint(e, "delta_objects", NULL), 1);
        if (strcmp(id, op3) == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "key")), "obj-3");
            assert_int_equal(jint(e, "delta_bytes", NULL), 4000);
            assert_false(json_is_true(json_object_get(e, "expired")));
            seen |= 4;
        } else if (strcmp(id, op1) == 0) {
            assert_int_equal(jint(e, "delta_bytes", NULL), 1000);
            seen |= 1;
        } else if (strcmp(id, op2) == 0) {
            seen |= 2;
        }
    }
    assert_int_equal(seen, 7);
    json_decref(j);
    /* obj-3's row (domain dom): reserved, never finalized: not live, locked by op3 */
    tdaemon_out_t o;
    adminl(&o, c, "quota", "tq", "object", "obj-3", "--domain=dom", "--json", NULL);
    OPS_ASSERT_RUN(&o, 0);
    j = parse_json(&o);
    tdaemon_out_free(&o);
    assert_string_equal(json_string_value(json_object_get(j, "domain")), "dom");
    assert_false(json_is_true(json_object_get(j, "live")));
    assert_int_equal(jint(j, "length", NULL), 0);
    assert_int_equal(jint(j, "acct_version", NULL), 0);
    assert_string_equal(json_string_value(json_object_get(j, "lock_op")), op3);
    json_decref(j);
    adminl(&o, c, "quota", "tq", "object", "obj-3", "--domain=dom", NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, op3);
    OPS_ASSERT_HAS(o.out, "held by a non-terminal quota operation");
    tdaemon_out_free(&o);
    adminl(&o, c, "quota", "tq", "object", "obj-3", NULL); /* no --domain: no such row */
    OPS_ASSERT_RUN(&o, 3);
    tdaemon_out_free(&o);
    wait_expired(c, 2);
    admin(&o, c, "quota", "tq", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "3 non-terminal operation(s) (reservations) in the due index, 2 past");
    OPS_ASSERT_HAS(o.out, "dom/obj-3");
    tdaemon_out_free(&o);

    /* abort: the dry run lists the two expired ones and changes nothing */
    admin(&o, c, "quota", "tq", "abort", NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "abort dry run");
    OPS_ASSERT_HAS(o.out, op1);
    OPS_ASSERT_HAS(o.out, op2);
    OPS_ASSERT_HAS(o.out, "2 pending reservation(s) past their deadline (dry run)");
    if (strstr(o.out, op3))
        fail_msg("the dry run lists the unexpired %s:\n%s", op3, o.out);
    tdaemon_out_free(&o);
    j = admin_json(c, "quota", "tq", "abort", NULL); /* the dry run as JSON */
    assert_true(json_is_false(json_object_get(j, "apply")));
    assert_int_equal(jint(j, "candidates", NULL), 2);
    assert_int_equal(jint(j, "aborted", NULL), 0);
    json_array_foreach(json_object_get(j, "operations"), i, e)
    {
        assert_true(json_is_false(json_object_get(e, "aborted")));
        const char *id = json_string_value(json_object_get(json_object_get(e, "op"), "id"));
        assert_true(strcmp(id, op1) == 0 || strcmp(id, op2) == 0);
    }
    json_decref(j);
    j = admin_json(c, "tenants", "tq", NULL, NULL);
    assert_int_equal(jint(j, "usage", "ops_pending"), 3);
    json_decref(j);
    /* --apply */
    j = admin_json(c, "quota", "tq", "abort", "--apply");
    assert_int_equal(jint(j, "candidates", NULL), 2);
    assert_int_equal(jint(j, "aborted", NULL), 2);
    json_decref(j);
    j = admin_json(c, "tenants", "tq", NULL, NULL);
    assert_int_equal(jint(j, "usage", "ops_pending"), 1);
    assert_int_equal(jint(j, "usage", "pending_bytes"), 4000);
    json_decref(j);
    /* --op: the unexpired one */
    char opt[64];
    snprintf(opt, sizeof(opt), "--op=%s", op3);
    admin(&o, c, "quota", "tq", "abort", opt, "--apply");
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "-> aborted");
    OPS_ASSERT_HAS(o.out, "1 aborted");
    tdaemon_out_free(&o);
    admin(&o, c, "quota", "tq", "abort", opt, "--apply");
    OPS_ASSERT_RUN(&o, 3);
    OPS_ASSERT_HAS(o.err, "is not a pending reservation of tenant \"tq\"");
    tdaemon_out_free(&o);
    j = admin_json(c, "quota", "tq", NULL, NULL);
    assert_int_equal(jint(j, "count", NULL), 0);
    u = json_object_get(json_object_get(j, "tenant"), "usage");
    assert_int_equal(jint(u, "pending_bytes", NULL), 0);
    assert_int_equal(jint(u, "ops_pending", NULL), 0);
    json_decref(j);

    /* reconcile: one more expired reservation; the pass of a client runtime aborts it */
    writer_reserve(&ws, "obj-4", 500, op4);
    wait_expired(c, 1);
    admin(&o, c, "quota", "tq", "reconcile", NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "reconcile dry run");
    OPS_ASSERT_HAS(o.out, op4);
    OPS_ASSERT_HAS(o.out, "1 due pending, 0 due publishing (dry run)");
    tdaemon_out_free(&o);
    j = admin_json(c, "quota", "tq", "reconcile", NULL); /* the dry run as JSON: no pass */
    assert_true(json_is_false(json_object_get(j, "apply")));
    assert_int_equal(jint(j, "due_pending", NULL), 1);
    assert_int_equal(json_array_size(json_object_get(j, "due")), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "due"), 0), "id")),
        op4);
    assert_null(json_object_get(j, "pass"));
    json_decref(j);
    j = admin_json(c, "quota", "tq", "reconcile", "--apply");
    assert_int_equal(jint(j, "due_pending", NULL), 1);
    assert_int_equal(jint(j, "runtime_total", "aborted"), 1);
    assert_int_equal(jint(j, "pass", "rc"), 0);
    assert_int_equal(jint(j, "due_after", NULL), 0);
    json_decref(j);
    j = admin_json(c, "tenants", "tq", NULL, NULL);
    assert_int_equal(jint(j, "usage", "ops_pending"), 0);
    assert_int_equal(jint(j, "usage", "pending_bytes"), 0);
    assert_int_equal(jint(j, "usage", "committed_objects"), 0);
    json_decref(j);
    writer_close(&ws);
    writer_close(&wl);
}

static void check_bad_args(struct cluster *c)
{
    tdaemon_out_t o;
    struct {
        const char *a1, *a2, *a3, *a4, *msg;
        int status;
    } bad[] = {
        {"tenants", "bad tenant!", NULL, NULL, "tenant", 2},
        {"tenants", "nosuch", NULL, NULL, "tenant \"nosuch\" has no policy", 3},
        {"tenants", "a", "b", NULL, "expected at most one tenant", 2},
        {"policy", NULL, NULL, NULL, "expected \"list\", \"get TENANT\" or \"set", 2},
        {"policy", "get", NULL, NULL, "expected \"list\", \"get TENANT\" or \"set", 2},
        {"policy", "frob", NULL, NULL, "expected \"list\", \"get TENANT\" or \"set", 2},
        {"policy", "list", "td", NULL, "expected \"list\", \"get TENANT\" or \"set", 2},
        {"policy", "get", "nosuch", NULL, "kvmesh admin policy get: tenant \"nosuch\" has no", 3},
        {"policy", "get", "bad tenant!", NULL, "tenant", 2},
        {"quota", NULL, NULL, NULL, "expected a tenant and at most one action", 2},
        {"quota", "nosuch", NULL, NULL, "tenant \"nosuch\" has no policy", 3},
        {"quota", "tq", "frob", NULL, "unknown action \"frob\"", 2},
        {"quota", "tq", "--apply", NULL, "--apply belongs to cleanup, quota abort|reconcile", 2},
        {"tenants", "--apply", NULL, NULL, "--apply belongs to", 2},
        {"quota", "tq", "reconcile", "--op=x", "--op belongs to quota TENANT abort", 2},
        {"quota", "tq", "abort", "--op=x", "--op \"x\" is not an operation id", 2},
        {"quota", "td", "object", NULL, "expected \"TENANT object KEY\"", 2},
        {"quota", "td", "obj", "k0", "expected \"TENANT object KEY\"", 2},
        {"quota", "bad tenant!", "object", "k0", "tenant has a disallowed byte 0x20", 2},
        {"quota", "td", "object", "nosuch", "no accounting row for key \"nosuch\"", 3},
        {"quota", "td", "--domain=d", NULL, "--domain belongs to quota TENANT object KEY", 2},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        admin(&o, c, bad[i].a1, bad[i].a2, bad[i].a3, bad[i].a4, NULL);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
}

static void write_cfg(const char *path, struct cluster *c, const char *policies)
{
    char text[600];
    snprintf(text, sizeof(text),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 64MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nlease_ttl_ms: 2000\nshards: 16\ntop_k: 2\n"
             "tenant_policies: %s\n",
             c->url, c->dep, policies);
    ops_write_file(path, text);
}

static json_t *parse_json(tdaemon_out_t *o)
{
    json_error_t je;
    json_t *j = json_loads(o->out, 0, &je);
    if (!j)
        fail_msg("not JSON (%s):\n%s", je.text, o->out);
    return j;
}

static void put_with(tdaemon_out_t *o, const char *cfg, const char *key, const char *val)
{
    ops_run(o, ops_bin_kvmesh, "put", "--config", cfg, "--tenant", "td", key, val, NULL);
}

static void check_policy_set(struct cluster *c, bool etcd)
{
    tdaemon_out_t o;
    /* the dry run while both daemons are live: table and JSON; nothing is written */
    adminl(&o, c, "policy", "set", "td", "max_bytes=4MiB", "max_objects=4", NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "dry run (nothing is written");
    OPS_ASSERT_HAS(o.out, "policy_version  1                    2");
    OPS_ASSERT_HAS(o.out, "tenant_policies entry after the restart: td:4MiB:4:2");
    OPS_ASSERT_HAS(o.out, "2 live runtime(s); --apply is refused");
    OPS_ASSERT_HAS(o.out, c->d[0].id);
    OPS_ASSERT_HAS(o.out, c->d[1].id);
    tdaemon_out_free(&o);
    adminl(&o, c, "policy", "set", "td", "max_bytes=4MiB", "max_objects=4", "--json", NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_t *j = parse_json(&o);
    tdaemon_out_free(&o);
    json_t *st = json_object_get(j, "stored"), *nw = json_object_get(j, "new");
    assert_int_equal(jint(st, "policy_version", NULL), 1);
    assert_int_equal(jint(st, "max_bytes", NULL), 2 << 20);
    assert_int_equal(jint(nw, "policy_version", NULL), 2);
    assert_int_equal(jint(nw, "max_bytes", NULL), 4 << 20);
    assert_int_equal(jint(nw, "max_objects", NULL), 4);
    char new_fp[32];
    snprintf(new_fp, sizeof(new_fp), "%s", json_string_value(json_object_get(nw, "fingerprint")));
    assert_string_not_equal(new_fp, json_string_value(json_object_get(st, "fingerprint")));
    json_t *ch = json_object_get(j, "changed");
    assert_int_equal(json_array_size(ch), 2);
    assert_string_equal(json_string_value(json_array_get(ch, 0)), "max_bytes");
    assert_string_equal(json_string_value(json_array_get(ch, 1)), "max_objects");
    assert_int_equal(jint(j, "live_runtimes", NULL), 2);
    assert_int_equal(jint(j, "usage", "used_objects"), 3);
    assert_true(json_is_false(json_object_get(j, "applied")));
    assert_string_equal(json_string_value(json_object_get(j, "config_entry")), "td:4MiB:4:2");
    json_decref(j);
    j = admin_json(c, "policy", "get", "td", NULL);
    assert_int_equal(jint(j, "policy_version", NULL), 1);
    json_decref(j);

    /* --apply while the daemons are live: refused, naming them and what to do */
    adminl(&o, c, "policy", "set", "td", "max_bytes=4MiB", "max_objects=4", "--apply", NULL);
    OPS_ASSERT_RUN(&o, 1);
    OPS_ASSERT_HAS(o.err, "refused: 2 runtime(s) of deployment");
    OPS_ASSERT_HAS(o.err, c->d[0].id);
    OPS_ASSERT_HAS(o.err, "stop every runtime of the deployment");
    OPS_ASSERT_HAS(o.err, "restart them with tenant_policies entry td:4MiB:4:2");
    tdaemon_out_free(&o);

    /* bad arguments */
    struct {
        const char *tenant, *a1, *a2, *msg;
        int status;
    } bad[] = {
        {"td", "frob=1", NULL, "unknown policy field \"frob\"", 2},
        {"td", "max_bytes=lots", NULL, "max_bytes=lots: not a size >= 1", 2},
        {"td", "max_objects=0", NULL, "max_objects=0: not an integer 1..", 2},
        {"td", "max_objects", NULL, "\"max_objects\" is not field=value", 2},
        {"td", "max_objects=2", NULL, "max_objects=2 is below tenant 'td''s usage 3", 2},
        {"td", "max_bytes=10", NULL, "max_bytes=10 is below tenant 'td''s usage 39", 2},
        {"td", "policy_version=7", NULL, "policy_version is not set by hand", 2},
        {"td", "max_objects=5", "max_objects=6", "max_objects is given twice", 2},
        {"td", NULL, NULL, "no field to set", 2},
        {"nosuch", "max_objects=5", NULL, "tenant \"nosuch\" has no policy", 3},
        {"bad tenant!", "max_objects=5", NULL, "breaks the tenant id rule", 2},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        adminl(&o, c, "policy", "set", bad[i].tenant, bad[i].a1, bad[i].a2, NULL);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
    adminl(&o, c, "policy", "get", "td", "--apply", NULL);
    OPS_ASSERT_RUN(&o, 2);
    OPS_ASSERT_HAS(o.err, "--apply belongs to");
    tdaemon_out_free(&o);

    /* stop the daemons (SIGKILL: their leases expire within lease_ttl_ms); --apply then writes */
    for (int i = 0; i < TT_DAEMONS; i++)
        tdaemon_stop(&c->d[i]);
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        adminl(&o, c, "policy", "set", "td", "max_bytes=4MiB", "max_objects=4", "--apply", NULL);
        if (o.status == 0)
            break;
        OPS_ASSERT_RUN(&o, 1);
        OPS_ASSERT_HAS(o.err, "refused");
        tdaemon_out_free(&o);
        if (env_clock_mono_ms() - t0 > 15000)
            fail_msg("the leases of the stopped daemons did not expire");
        usleep(200000);
    }
    OPS_ASSERT_HAS(o.out, "written policy_version 2");
    tdaemon_out_free(&o);
    j = admin_json(c, "policy", "get", "td", NULL);
    assert_int_equal(jint(j, "policy_version", NULL), 2);
    assert_int_equal(jint(j, "max_bytes", NULL), 4 << 20);
    assert_int_equal(jint(j, "max_objects", NULL), 4);
    assert_string_equal(json_string_value(json_object_get(j, "fingerprint")), new_fp);
    json_decref(j);
    adminl(&o, c, "policy", "set", "td", "max_objects=4", "--apply", NULL); /* idempotent */
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "no change");
    tdaemon_out_free(&o);

    /* two plans of tq from the same records: the second write fails its compare */
    kvmesh_config_t *cfg = kvmesh_config_new();
    assert_non_null(cfg);
    assert_int_equal(kvmesh_config_set(cfg, "metadata_url", c->url), 0);
    assert_int_equal(kvmesh_config_set(cfg, "deployment", c->dep), 0);
    kvmesh_admin_t *a = NULL;
    assert_int_equal(kvmesh_admin_open(cfg, &a), 0);
    const char *as1[] = {"max_objects=60"}, *as2[] = {"max_objects=70"};
    kvmesh_admin_policy_plan_t p1, p2;
    bool found = false;
    assert_int_equal(kvmesh_admin_policy_plan(a, "tq", as1, 1, &p1, &found), 0);
    assert_true(found);
    assert_int_equal(kvmesh_admin_policy_plan(a, "tq", as2, 1, &p2, &found), 0);
    assert_int_equal(kvmesh_admin_policy_apply(a, &p2), 0);
    assert_int_equal(kvmesh_admin_policy_apply(a, &p1), KVMESH_ECONFLICT);
    assert_non_null(strstr(kvmesh_last_error(), "changed since they were read"));
    kvmesh_admin_close(a);
    kvmesh_config_free(cfg);
    j = admin_json(c, "policy", "get", "tq", NULL);
    assert_int_equal(jint(j, "max_objects", NULL), 70);
    assert_int_equal(jint(j, "policy_version", NULL), 2);
    json_decref(j);

    /* the old entry is refused naming the field; new limits with the old version too */
    put_with(&o, c->cfg, "k9", "v");
    if (o.status == 0)
        fail_msg("a runtime with the old policy started");
    OPS_ASSERT_HAS(o.err, "hard policy field policy_version differs: stored 2, configured 1");
    tdaemon_out_free(&o);
    char cfg2[sizeof(ops_tmpdir) + 80];
    snprintf(cfg2, sizeof(cfg2), "%s/%s-v2.yaml", ops_tmpdir, c->dep);
    write_cfg(cfg2, c, "td:2MiB:4:2");
    put_with(&o, cfg2, "k9", "v");
    if (o.status == 0)
        fail_msg("a runtime with another max_bytes at version 2 started");
    OPS_ASSERT_HAS(o.err, "hard policy field max_bytes differs");
    tdaemon_out_free(&o);
    /* the new entry: a daemon serves td under the new limit (4 objects, not 50) */
    write_cfg(cfg2, c, "td:4MiB:4:2");
    if (ops_daemon_start(&c->d[0], 20 + (etcd ? 10 : 0), cfg2, NULL) != 0)
        fail_msg("a daemon with the new policy did not start");
    /* the shards of the killed daemons move to it once their records' leases expired */
    for (uint64_t t1 = env_clock_mono_ms();; usleep(200000)) {
        put_with(&o, cfg2, "k3", "delta");
        if (o.status == 0 || !strstr(o.err, "temporarily unavailable") ||
            env_clock_mono_ms() - t1 > 15000)
            break;
        tdaemon_out_free(&o);
    }
    OPS_ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    put_with(&o, cfg2, "k4", "echo");
    if (o.status == 0)
        fail_msg("a fifth object was admitted under max_objects 4");
    OPS_ASSERT_HAS(o.err, "quota");
    tdaemon_out_free(&o);
    j = admin_json(c, "tenants", "td", NULL, NULL);
    assert_int_equal(jint(j, "usage", "used_objects"), 4);
    json_decref(j);
}

static void run_cluster(bool etcd)
{
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url = ops_backend_start(etcd, &c.srv, "opsten", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    write_cfg(c.cfg, &c, "td:2MiB:50");
    for (int i = 0; i < TT_DAEMONS; i++)
        if (ops_daemon_start(&c.d[i], i + (etcd ? 10 : 0), c.cfg, NULL) != 0)
            fail_msg("daemon %d did not start", i);
    struct writer w; /* bootstraps tq's policy */
    writer_open(&w, &c, TT_SHORT_TTL, 100);
    writer_close(&w);
    check_bad_args(&c);
    check_tenants(&c);
    check_quota(&c);
    check_policy_set(&c, etcd);
    for (int i = 0; i < TT_DAEMONS; i++)
        tdaemon_stop(&c.d[i]);
    testsrv_stop(c.srv);
}

KVMESH_REDIS_ETCD_MAIN(test_tenants, run_cluster, ops_group_setup, ops_group_teardown)
