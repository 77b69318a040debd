/* SPDX-License-Identifier: Apache-2.0 */
/*
 * obs_runtime_trace.c — tracing in the real store runtime: two runtimes opened with kvmesh_open
 * in one process (shared memory:// metadata, real RPC over loopback TCP, the auto data
 * transport), the caller A sampling every request and the owner B never sampling on its own.
 *   - a remote put (hard-pinned to B) yields one connected trace: the store.put root on A,
 *     control.reserve / control.route_cas / control.commit and data.write on A (no
 *     control.route_lookup: the CAS expects the route hint, none for a new key),
 *     control.owner_reserve and control.owner_commit on B parented by A's spans across the
 *     socket, and metadata.* spans under the route calls (metadata_only route mode, where the
 *     route really is a metadata call);
 *   - a remote get yields one connected trace: store.get -> control.route_lookup (-> metadata.get)
 *     and data.read;
 *   - the same spans arrive in both runtimes' JSONL captures and at a fake OTLP/HTTP receiver
 *     (libmicrohttpd), with the same ids;
 *   - with A's sampling rate 0 (B at 1) a remote put and get produce no span anywhere.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "env/clock.h"
#include "jsonl.h"
#include "kvmesh.h"
#include "otlp_fake.h"
#include "tmpdir.h"

#define MAX_SPANS 512

/* ---- JSONL captures ------------------------------------------------------------------------ */

static size_t capture_read(const char *dir, const char *id, tspan_t *out, size_t max)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/trace-%s.jsonl", dir, id);
    long n = tjsonl_read_spans(p, out, max, NULL, NULL);
    assert_true(n >= 0);
    return (size_t)n;
}

/* ---- trace checks -------------------------------------------------------------------------- */

static const tspan_t *by_id(const tspan_t *s, size_t n, const char *trace, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].trace_id, trace) == 0 && strcmp(s[i].span_id, id) == 0)
            return &s[i];
    return NULL;
}

static const tspan_t *one(const tspan_t *s, size_t n, const char *trace, const char *name)
{
    const tspan_t *hit = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].trace_id, trace) == 0 && strcmp(s[i].name, name) == 0) {
            if (hit)
                fail_msg("more than one %s span in trace %s", name, trace);
            hit = &s[i];
        }
    if (!hit) {
        fail_msg("no %s span in trace %s", name, trace);
        return NULL;
    }
    return hit;
}

/* Exactly one span named name whose parent is parent. */
static const tspan_t *child(const tspan_t *s, size_t n, const char *trace, const char *name,
                            const tspan_t *parent)
{
    const tspan_t *hit = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].trace_id, trace) == 0 && strcmp(s[i].name, name) == 0 &&
            strcmp(s[i].parent, parent->span_id) == 0) {
            if (hit)
                fail_msg("more than one %s span under %s", name, parent->name);
            hit = &s[i];
        }
    if (!hit)
        fail_msg("no %s span under %s in trace %s", name, parent->name, trace);
    return hit;
}

static size_t count_prefix(const tspan_t *s, size_t n, const char *trace, const char *prefix)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += strcmp(s[i].trace_id, trace) == 0 && strncmp(s[i].name, prefix, strlen(prefix)) == 0;
    return k;
}

/* The one trace rooted at root_name: exactly one root, every other span's parent in the same
 * trace, nothing outside the two runtimes. Returns the trace id in tid. */
static const tspan_t *check_connected(const tspan_t *s, size_t n, const char *root_name,
                                      char tid[33])
{
    const tspan_t *root = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, root_name) == 0) {
            assert_null(root);
            root = &s[i];
        }
    if (!root) {
        fail_msg("no %s span", root_name);
        return NULL;
    }
    assert_string_equal(root->parent, "");
    assert_string_equal(root->service, "rt-a");
    snprintf(tid, 33, "%s", root->trace_id);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s[i].trace_id, tid) != 0 || &s[i] == root)
            continue;
        if (s[i].parent[0] == '\0' || !by_id(s, n, tid, s[i].parent))
            fail_msg("span %s (%s) has no parent in trace %s", s[i].name, s[i].span_id, tid);
        assert_true(strcmp(s[i].service, "rt-a") == 0 || strcmp(s[i].service, "rt-b") == 0);
    }
    return root;
}

static void check_put(const tspan_t *s, size_t n, char tid[33])
{
    const tspan_t *root = check_connected(s, n, "store.put", tid);
    const tspan_t *res = one(s, n, tid, "control.reserve");
    const tspan_t *ores = one(s, n, tid, "control.owner_reserve");
    const tspan_t *dw = one(s, n, tid, "data.write");
    const tspan_t *cas = one(s, n, tid, "control.route_cas");
    const tspan_t *cm = one(s, n, tid, "control.commit");
    const tspan_t *ocm = one(s, n, tid, "control.owner_commit");
    assert_string_equal(res->parent, root->span_id);
    assert_string_equal(dw->parent, root->span_id);
    assert_string_equal(cas->parent, root->span_id);
    assert_string_equal(cm->parent, root->span_id);
    /* across the RPC socket: B's spans are children of A's */
    assert_string_equal(ores->parent, res->span_id);
    assert_string_equal(ocm->parent, cm->span_id);
    assert_string_equal(res->service, "rt-a");
    assert_string_equal(dw->service, "rt-a");
    assert_string_equal(ores->service, "rt-b");
    assert_string_equal(ocm->service, "rt-b");
    /* the route's metadata calls (metadata_only mode), under the route call that made them:
     * the CAS's read (the route and its shard's version floor in one read-only transaction)
     * then its compare-and-put transaction; no lookup precedes the CAS */
    assert_int_equal(count_prefix(s, n, tid, "control.route_lookup"), 0);
    size_t cas_txns = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].trace_id, tid) == 0 && strcmp(s[i].name, "metadata.txn") == 0 &&
            strcmp(s[i].parent, cas->span_id) == 0 && strcmp(s[i].service, "rt-a") == 0)
            cas_txns++;
    assert_int_equal(cas_txns, 2);
    assert_int_equal(count_prefix(s, n, tid, "metadata.get"), 0);
    assert_int_equal(count_prefix(s, n, tid, "metadata."), 2);
    assert_int_equal(count_prefix(s, n, tid, "control."), 5);
    assert_int_equal(count_prefix(s, n, tid, "data."), 1);
    assert_int_equal(count_prefix(s, n, tid, ""), 9);
}

static void check_get(const tspan_t *s, size_t n, char tid[33])
{
    const tspan_t *root = check_connected(s, n, "store.get", tid);
    const tspan_t *lk = one(s, n, tid, "control.route_lookup");
    const tspan_t *dr = one(s, n, tid, "data.read");
    const tspan_t *mg = one(s, n, tid, "metadata.get");
    assert_string_equal(lk->parent, root->span_id);
    assert_string_equal(dr->parent, root->span_id);
    assert_string_equal(mg->parent, lk->span_id);
    assert_string_equal(dr->service, "rt-a"); /* a one-sided read: the owner runs no code */
    assert_int_equal(count_prefix(s, n, tid, ""), 4);
}

/* ---- runtimes ------------------------------------------------------------------------------ */

static const char *route_mode = "metadata_only";

static kvmesh_t *rt_open(const char *meta, const char *svc, const char *rate, const char *dir,
                         const char *otlp)
{
    kvmesh_config_t *c = kvmesh_config_new();
    assert_non_null(c);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", meta), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", route_mode), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "8MiB"), 0);
    assert_int_equal(kvmesh_config_set(c, "segment_size", "4MiB"), 0);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", "1MiB"), 0);
    assert_int_equal(kvmesh_config_set(c, "lease_ttl_ms", "2000"), 0);
    assert_int_equal(kvmesh_config_set(c, "trace_sample_rate", rate), 0);
    assert_int_equal(kvmesh_config_set(c, "trace_capture_dir", dir), 0);
    assert_int_equal(kvmesh_config_set(c, "trace_otlp_url", otlp), 0);
    assert_int_equal(kvmesh_config_set(c, "trace_service_name", svc), 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fail_msg("kvmesh_open: %s", kvmesh_last_error());
    kvmesh_config_free(c);
    return kv;
}

static void wait_active(kvmesh_t *kv, const char *id)
{
    uint64_t end = env_clock_mono_ms() + 15000;
    for (;;) {
        kvmesh_member_info_t m[8];
        size_t n = 0;
        assert_int_equal(kvmesh_members(kv, m, 8, &n), 0);
        for (size_t i = 0; i < n && i < 8; i++)
            if (strcmp(m[i].id, id) == 0 && strcmp(m[i].state, "active") == 0)
                return;
        if (env_clock_mono_ms() > end)
            fail_msg("runtime %s never became active in the peer's snapshot", id);
        usleep(20000);
    }
}

struct pair {
    kvmesh_t *a, *b;
    char ida[KVMESH_ID_HEX_LEN + 1], idb[KVMESH_ID_HEX_LEN + 1];
    char *dira, *dirb; /* dir_a, dir_b */
};

/* The runtimes' capture directories under $TMPDIR (tests/support/tmpdir.h): removed at exit when
 * a failed assertion left a test before rm_dirs, and by the next pair_open. */
static char dir_a[PATH_MAX], dir_b[PATH_MAX];

static void pair_open(struct pair *p, const char *meta, const char *rate_a, const char *rate_b,
                      const char *otlp)
{
    p->dira = dir_a;
    p->dirb = dir_b;
    (void)ttmp_remove(dir_a); /* (left by a test that failed: nothing when empty) */
    (void)ttmp_remove(dir_b);
    assert_int_equal(ttmp_make_auto(dir_a, sizeof(dir_a), "kvmesh-rtt-a"), 0);
    assert_int_equal(ttmp_make_auto(dir_b, sizeof(dir_b), "kvmesh-rtt-b"), 0);
    p->a = rt_open(meta, "rt-a", rate_a, p->dira, otlp);
    p->b = rt_open(meta, "rt-b", rate_b, p->dirb, otlp);
    uint64_t ep;
    assert_int_equal(kvmesh_self(p->a, p->ida, &ep), 0);
    assert_int_equal(kvmesh_self(p->b, p->idb, &ep), 0);
    wait_active(p->a, p->idb);
}

/* A remote put (hard-pinned to B) and a remote get of it, issued on A. */
static void remote_put_get(struct pair *p, const char *key, size_t len)
{
    kvmesh_scope_t sc = {.tenant = "tenant-x"};
    uint8_t *v = malloc(len);
    assert_non_null(v);
    for (size_t i = 0; i < len; i++)
        v[i] = (uint8_t)(i * 31 + 7);
    const char *pref[1] = {p->idb};
    kvmesh_put_opts_t o = {
        .replicas = 1, .preferred_owners = pref, .n_preferred = 1, .hard_pin = true};
    if (kvmesh_put(p->a, &sc, key, strlen(key), v, len, &o) != 0)
        fail_msg("put: %s", kvmesh_last_error());
    void *out = NULL;
    size_t out_len = 0;
    if (kvmesh_get(p->a, &sc, key, strlen(key), &out, &out_len) != 0)
        fail_msg("get: %s", kvmesh_last_error());
    assert_int_equal(out_len, len);
    assert_memory_equal(out, v, len);
    kvmesh_free(out);
    free(v);
    /* the replica is B's */
    kvmesh_member_info_t m[8];
    size_t n = 0;
    assert_int_equal(kvmesh_members(p->b, m, 8, &n), 0);
    for (size_t i = 0; i < n && i < 8; i++)
        if (strcmp(m[i].id, p->idb) == 0)
            assert_true(m[i].used_bytes >= len);
}

static void pair_close(struct pair *p)
{
    kvmesh_close(p->a); /* closing flushes each runtime's exporter */
    kvmesh_close(p->b);
}

static void rm_dirs(struct pair *p)
{
    assert_int_equal(ttmp_remove(p->dira), 0);
    assert_int_equal(ttmp_remove(p->dirb), 0);
}

static bool has_span(const char *dir, const char *id, const char *name)
{
    static tspan_t s[MAX_SPANS];
    size_t n = capture_read(dir, id, s, MAX_SPANS);
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0)
            return true;
    return false;
}

static void test_remote_put_get_one_trace_each(void **state)
{
    (void)state;
    otlp_fake_t *rx = otlp_fake_start(0);
    assert_non_null(rx);
    const char *url = rx->url;
    struct pair p;
    /* B never samples on its own: its spans exist only because A's context says so */
    pair_open(&p, "memory://obs-rtt-sampled", "1", "0", url);
    remote_put_get(&p, "object/alpha", 65536);
    /* the commit notification is one-way: wait (bounded) until B's capture shows it */
    uint64_t end = env_clock_mono_ms() + 10000;
    while (!has_span(p.dirb, p.idb, "control.owner_commit") && env_clock_mono_ms() < end)
        usleep(50000);
    pair_close(&p);

    static tspan_t js[MAX_SPANS];
    size_t n = capture_read(p.dira, p.ida, js, MAX_SPANS);
    size_t na = n;
    n += capture_read(p.dirb, p.idb, js + n, MAX_SPANS - n);
    assert_true(na > 0 && n > na); /* both runtimes captured spans */
    char t_put[33], t_get[33];
    check_put(js, n, t_put);
    check_get(js, n, t_get);
    assert_string_not_equal(t_put, t_get);
    assert_int_equal(n, 13); /* nothing else was sampled (put 9, get 4) */

    /* the collector got the same spans (both runtimes export to it) */
    pthread_mutex_lock(&rx->mu);
    assert_int_equal(rx->n, n);
    char o_put[33], o_get[33];
    check_put(rx->spans, rx->n, o_put);
    check_get(rx->spans, rx->n, o_get);
    for (size_t i = 0; i < n; i++)
        assert_non_null(by_id(rx->spans, rx->n, js[i].trace_id, js[i].span_id));
    pthread_mutex_unlock(&rx->mu);
    assert_string_equal(o_put, t_put);
    assert_string_equal(o_get, t_get);
    otlp_fake_stop(rx);
    rm_dirs(&p);
}

static void test_unsampled_no_spans(void **state)
{
    (void)state;
    otlp_fake_t *rx = otlp_fake_start(0);
    assert_non_null(rx);
    const char *url = rx->url;
    struct pair p;
    /* the caller decides: A at 0 means no trace, even though B would sample its own requests */
    pair_open(&p, "memory://obs-rtt-unsampled", "0", "1", url);
    remote_put_get(&p, "object/beta", 4096);
    usleep(300000); /* let a (wrongly) sampled one-way commit reach B */
    pair_close(&p);
    static tspan_t js[MAX_SPANS];
    assert_int_equal(capture_read(p.dira, p.ida, js, MAX_SPANS), 0);
    assert_int_equal(capture_read(p.dirb, p.idb, js, MAX_SPANS), 0);
    pthread_mutex_lock(&rx->mu);
    assert_int_equal(rx->n, 0);
    pthread_mutex_unlock(&rx->mu);
    otlp_fake_stop(rx);
    rm_dirs(&p);
}

/* The default route mode: routes live in the runtimes' route authorities, so the request's trace
 * is connected across both runtimes the same way; any metadata.* span can only sit under a route
 * call (the steady state makes none). */
static void test_embedded_wrh_connected(void **state)
{
    (void)state;
    otlp_fake_t *rx = otlp_fake_start(0);
    assert_non_null(rx);
    const char *url = rx->url;
    struct pair p;
    route_mode = "embedded_wrh";
    pair_open(&p, "memory://obs-rtt-embedded", "1", "0", url);
    route_mode = "metadata_only";
    remote_put_get(&p, "object/gamma", 8192);
    uint64_t end = env_clock_mono_ms() + 10000;
    while (!has_span(p.dirb, p.idb, "control.owner_commit") && env_clock_mono_ms() < end)
        usleep(50000);
    pair_close(&p);
    static tspan_t js[MAX_SPANS];
    size_t n = capture_read(p.dira, p.ida, js, MAX_SPANS);
    n += capture_read(p.dirb, p.idb, js + n, MAX_SPANS - n);
    char t_put[33], t_get[33];
    const tspan_t *put = check_connected(js, n, "store.put", t_put);
    const tspan_t *get = check_connected(js, n, "store.get", t_get);
    const tspan_t *res = child(js, n, t_put, "control.reserve", put);
    assert_string_equal(child(js, n, t_put, "control.owner_reserve", res)->service, "rt-b");
    child(js, n, t_put, "data.write", put);
    assert_int_equal(count_prefix(js, n, t_put, "control.route_lookup"), 0);
    child(js, n, t_put, "control.route_cas", put);
    const tspan_t *cm = child(js, n, t_put, "control.commit", put);
    assert_string_equal(child(js, n, t_put, "control.owner_commit", cm)->service, "rt-b");
    child(js, n, t_get, "control.route_lookup", get);
    child(js, n, t_get, "data.read", get);
    for (size_t i = 0; i < n; i++) {
        if (strncmp(js[i].name, "metadata.", 9) != 0)
            continue;
        const tspan_t *par = by_id(js, n, js[i].trace_id, js[i].parent);
        assert_non_null(par);
        assert_true(strncmp(par->name, "control.route_", 14) == 0);
    }
    pthread_mutex_lock(&rx->mu);
    assert_int_equal(rx->n, n);
    pthread_mutex_unlock(&rx->mu);
    otlp_fake_stop(rx);
    rm_dirs(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_put_get_one_trace_each),
        cmocka_unit_test(test_unsampled_no_spans),
        cmocka_unit_test(test_embedded_wrh_connected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
