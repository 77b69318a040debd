/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_status_page.c — the status page in a real browser. Three kvmeshd processes on a real
 * redis-server (daemon 0 with a LocalDir cold device in the test's temporary directory), and an
 * application runtime in this process (memory_size 0, its own admin port) that issues a bounded
 * load of puts and gets:
 *   - under load, headless Chromium renders daemon 0's page to a screenshot (artifact);
 *   - once the load has finished and the member records have settled, Chromium renders the
 *     pages of daemon 0 and of the application runtime (--dump-dom), and every number the
 *     test reads from the rendered DOM (data-k/data-v) equals what /stats, /cluster and
 *     /metrics of the same runtime answer right after: live members, every member's capacity
 *     and used bytes (the self row also against the daemon's own /stats), shard counts (one
 *     primary per shard, top_k authorities per shard), route CAS totals, request totals, bytes
 *     and p50/p99 (recomputed here from the histogram buckets of /metrics); the tenants' quota
 *     section: tenant "spq" (tenant_policies) after three puts, its used/pending/limit bytes
 *     and objects against daemon 0's /stats?tenant=spq and against what was put; the Cold column
 *     of the members table: daemon 0's cold devices, capacity, used and reserved bytes and health
 *     against its /cluster, and /cluster against `kvmesh admin devices --json`; no cold device
 *     for daemons 1 and 2, and no device view at all on the application runtime (cold_kind off);
 *     every daemon's local_rpc (its unix socket: rpc_local = unix, the default) and host identity
 *     in /cluster;
 *   - screenshots of both pages are saved in <build>/test-artifacts/.
 * Bounded: the load stops after OPS_LOAD_MAX operations or OPS_LOAD_MAX_MS; every wait is
 * bounded; every process is started here and stopped by pid.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "ops_util.h"

#define OPS_DAEMONS     3
#define OPS_SHARDS      64
#define OPS_TOP_K       2
#define OPS_LOAD_MAX    20000
#define OPS_LOAD_MAX_MS 60000
#define OPS_VALUE_LEN   4096
#define OPS_SETTLE_MS   30000
#define OPS_BUDGET_MS   "6000" /* chromium virtual time: at least two refreshes */
#define OPS_MAX_MEMBERS 16
#define OPS_QT          "spq" /* the tenant with a hard policy */
#define OPS_QT_MAX      (1ull << 20)
#define OPS_QT_OBJECTS  100
#define OPS_QT_PUTS     3
#define OPS_COLD_CAP    "64MiB" /* daemon 0's LocalDir cold device */
#define OPS_COLD_BYTES  (64ull << 20)

static char artifacts[512];

static int group_setup(void **state)
{
    (void)state;
    if (ops_setup() != 0)
        return -1;
    const char *bin = getenv("KVMESH_BIN_DIR");
    snprintf(artifacts, sizeof(artifacts), "%s/../test-artifacts", bin ? bin : KVMESH_BIN_DIR);
    mkdir(artifacts, 0755);
    if (access("/usr/bin/chromium", X_OK) != 0) {
        fprintf(stderr, "chromium is not installed (Debian package chromium; scripts/deps.sh)\n");
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return ops_teardown();
}

/* ---- chromium ------------------------------------------------------------------------------ */

static void chromium(tdaemon_out_t *o, const char *mode, const char *url)
{
    char ud[300];
    static int run_no;
    snprintf(ud, sizeof(ud), "--user-data-dir=%s/chromium-%d", ops_tmpdir, run_no++);
    const char *argv[] = {"/usr/bin/chromium",
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--disable-dev-shm-usage",
                          "--no-first-run",
                          "--hide-scrollbars",
                          "--window-size=1500,1100",
                          ud,
                          "--virtual-time-budget=" OPS_BUDGET_MS,
                          mode,
                          url,
                          NULL};
    ops_runv(o, argv);
}

static void screenshot(const char *name, uint16_t port)
{
    char mode[700], url[64], path[600];
    snprintf(path, sizeof(path), "%s/%s", artifacts, name);
    unlink(path);
    snprintf(mode, sizeof(mode), "--screenshot=%s", path);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/", port);
    tdaemon_out_t o;
    chromium(&o, mode, url);
    struct stat st;
    if (o.status != 0 || stat(path, &st) != 0 || st.st_size < 10000)
        fail_msg("chromium screenshot of %s failed (exit %d, %s)\n%s", url, o.status, path, o.err);
    printf("status page screenshot: %s (%lld bytes)\n", path, (long long)st.st_size);
    tdaemon_out_free(&o);
}

/* The rendered DOM of a runtime's page, after at least two refreshes. */
static char *dump_dom(uint16_t port)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/", port);
    tdaemon_out_t o;
    chromium(&o, "--dump-dom", url);
    if (o.status != 0)
        fail_msg("chromium --dump-dom %s: exit %d\n%s", url, o.status, o.err);
    if (!strstr(o.out, "data-state=\"ready\""))
        fail_msg("the page of %s did not render (no data-state=ready):\n%.4000s", url, o.out);
    char *dom = o.out;
    o.out = NULL;
    tdaemon_out_free(&o);
    return dom;
}

/* data-v of the element whose data-k is key (text with entities as written), or NULL. */
static const char *dom_value(const char *dom, const char *key, char *buf, size_t cap)
{
    char pat[256];
    snprintf(pat, sizeof(pat), "data-k=\"%s\"", key);
    const char *p = strstr(dom, pat);
    if (!p)
        return NULL;
    const char *end = strchr(p, '>');
    const char *v = strstr(p, "data-v=\"");
    if (!v || (end && v > end))
        return NULL;
    v += 8;
    const char *q = strchr(v, '"');
    if (!q)
        return NULL;
    size_t n = (size_t)(q - v) < cap - 1 ? (size_t)(q - v) : cap - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return buf;
}

static unsigned long long dom_u64(const char *dom, const char *key)
{
    char b[128];
    if (!dom_value(dom, key, b, sizeof(b)))
        fail_msg("the rendered page has no value %s", key);
    char *end;
    unsigned long long v = strtoull(b, &end, 10);
    if (end == b || *end)
        fail_msg("the rendered page's %s is \"%s\", not a number", key, b);
    return v;
}

static void dom_expect(const char *dom, const char *key, const char *want)
{
    char b[256];
    if (!dom_value(dom, key, b, sizeof(b)))
        fail_msg("the rendered page has no value %s", key);
    if (strcmp(b, want) != 0)
        fail_msg("the page shows %s = \"%s\"; the endpoint says \"%s\"", key, b, want);
}

/* ---- /metrics ---------------------------------------------------------------------------- */

/* The value of one series ("name{labels}") of a Prometheus text body. */
static bool metric(const char *text, const char *series, double *out)
{
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)) != NULL; p += n) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ') {
            *out = strtod(p + n + 1, NULL);
            return true;
        }
    }
    return false;
}

static const char *const les[] = {"5e-06",  "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025",
                                  "0.0005", "0.001", "0.0025",  "0.005", "0.01",   "0.025",
                                  "0.05",   "0.1",   "0.25",    "0.5",   "1",      "2.5",
                                  "5",      "10",    "+Inf"};

/* The quantile as the page computes it: the first bucket whose cumulative count reaches
 * ceil(q * count); "" without observations. */
static const char *quantile(const char *text, const char *op, double q)
{
    size_t nb = sizeof(les) / sizeof(les[0]);
    double cum[sizeof(les) / sizeof(les[0])];
    for (size_t i = 0; i < nb; i++) {
        char s[160];
        snprintf(s, sizeof(s), "kvmesh_request_duration_seconds_bucket{operation=\"%s\",le=\"%s\"}",
                 op, les[i]);
        if (!metric(text, s, &cum[i]))
            fail_msg("/metrics has no series %s", s);
    }
    double total = cum[nb - 1];
    if (total <= 0)
        return "";
    double want = (double)(uint64_t)(q * total);
    if (want < q * total)
        want += 1; /* ceil */
    for (size_t i = 0; i < nb; i++)
        if (cum[i] >= want)
            return les[i];
    return "+Inf";
}

/* ---- the load ---------------------------------------------------------------------------- */

struct load {
    kvmesh_t *kv;
    atomic_bool stop;
    atomic_uint_fast64_t puts, gets, failures;
    uint64_t qt_puts, qt_bytes; /* puts of tenant OPS_QT after the load */
};

static void *load_main(void *arg)
{
    struct load *l = arg;
    char *val = malloc(OPS_VALUE_LEN);
    memset(val, 'v', OPS_VALUE_LEN);
    kvmesh_scope_t s = {.tenant = "status-page"};
    uint64_t t0 = env_clock_mono_ms();
    for (unsigned i = 0; i < OPS_LOAD_MAX / 2 && !atomic_load(&l->stop) &&
                         env_clock_mono_ms() - t0 < OPS_LOAD_MAX_MS;
         i++) {
        char key[32];
        snprintf(key, sizeof(key), "sp-%06u", i);
        snprintf(val, 32, "%06u", i);
        if (kvmesh_put(l->kv, &s, key, strlen(key), val, OPS_VALUE_LEN, NULL) == 0)
            atomic_fetch_add(&l->puts, 1);
        else
            atomic_fetch_add(&l->failures, 1);
        void *out = NULL;
        size_t len = 0;
        if (kvmesh_get(l->kv, &s, key, strlen(key), &out, &len) == 0 && len == OPS_VALUE_LEN &&
            memcmp(out, val, OPS_VALUE_LEN) == 0)
            atomic_fetch_add(&l->gets, 1);
        else
            atomic_fetch_add(&l->failures, 1);
        kvmesh_free(out);
    }
    free(val);
    return NULL;
}

/* ---- the test ---------------------------------------------------------------------------- */

static char *get_body(uint16_t port, const char *path)
{
    tdaemon_http_t r;
    int code = tdaemon_http(port, "GET", path, NULL, &r);
    if (code != 200)
        fail_msg("GET %s on port %u: %d", path, port, code);
    char *b = strdup(r.body);
    tdaemon_http_free(&r);
    return b;
}

/* Every member's used_bytes in daemon 0's /cluster equals that daemon's own /stats. */
static bool settled(const tdaemon_t *d)
{
    char *cl = get_body(d[0].admin_port, "/cluster");
    bool ok = true;
    for (int i = 0; i < OPS_DAEMONS && ok; i++) {
        char *st = get_body(d[i].admin_port, "/stats");
        unsigned long long used = 0, rec = 0;
        const char *dram = strstr(st, "\"dram\":");
        ok = dram && ops_json_u64(dram, "used_bytes", &used);
        char pat[80];
        snprintf(pat, sizeof(pat), "{\"id\":\"%s\"", d[i].id);
        const char *m = strstr(cl, pat);
        ok = ok && m && ops_json_u64(m, "used_bytes", &rec) && rec == used;
        free(st);
    }
    free(cl);
    return ok;
}

static void check_daemon_page(const tdaemon_t *d, const char *dom)
{
    char *st = get_body(d[0].admin_port, "/stats");
    char *cl = get_body(d[0].admin_port, "/cluster");
    char *me = get_body(d[0].admin_port, "/metrics");
    unsigned long long v;
    assert_non_null(ops_json_u64(st, "live_members", &v));
    assert_int_equal(dom_u64(dom, "runtime.live_members"), v);
    dom_expect(dom, "runtime.id", d[0].id);
    dom_expect(dom, "health", "ok");
    dom_expect(dom, "tracing", "off");
    const char *dram = strstr(st, "\"dram\":");
    assert_non_null(ops_json_u64(dram, "capacity_bytes", &v));
    assert_int_equal(dom_u64(dom, "storage.dram.capacity_bytes"), v);
    assert_int_equal(v, 64ull << 20);
    assert_non_null(ops_json_u64(dram, "used_bytes", &v));
    assert_int_equal(dom_u64(dom, "storage.dram.used_bytes"), v);
    assert_true(v > 0);
    unsigned long long prim = 0, auth = 0;
    for (int i = 0; i < OPS_DAEMONS; i++) {
        char pat[80], key[128];
        snprintf(pat, sizeof(pat), "{\"id\":\"%s\"", d[i].id);
        const char *m = strstr(cl, pat);
        if (!m)
            fail_msg("/cluster of daemon 0 does not list daemon %d (%s):\n%s", i, d[i].id, cl);
        static const char *fields[] = {"capacity_bytes", "used_bytes", "shards_primary",
                                       "shards_authority", "epoch"};
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
            assert_non_null(ops_json_u64(m, fields[f], &v));
            snprintf(key, sizeof(key), "member.%s.%s", d[i].id, fields[f]);
            if (dom_u64(dom, key) != v)
                fail_msg("page %s = %llu, /cluster %llu", key, dom_u64(dom, key), v);
        }
        snprintf(key, sizeof(key), "member.%s.state", d[i].id);
        dom_expect(dom, key, "active");
        snprintf(key, sizeof(key), "member.%s.shards_primary", d[i].id);
        prim += dom_u64(dom, key);
        snprintf(key, sizeof(key), "member.%s.shards_authority", d[i].id);
        auth += dom_u64(dom, key);
        /* The row of each daemon against that daemon's own /stats. */
        char *sti = get_body(d[i].admin_port, "/stats");
        unsigned long long used;
        assert_non_null(ops_json_u64(strstr(sti, "\"dram\":"), "used_bytes", &used));
        snprintf(key, sizeof(key), "member.%s.used_bytes", d[i].id);
        assert_int_equal(dom_u64(dom, key), used);
        free(sti);
    }
    assert_int_equal(prim, OPS_SHARDS);
    assert_int_equal(auth, OPS_SHARDS * OPS_TOP_K);
    double cas;
    assert_true(metric(me, "kvmesh_route_cas_total{result=\"applied\"}", &cas));
    assert_int_equal(dom_u64(dom, "route_cas.applied.total"), (unsigned long long)cas);
    double allocs;
    assert_true(metric(me, "kvmesh_allocations_total{tier=\"dram\",result=\"ok\"}", &allocs));
    assert_int_equal(dom_u64(dom, "alloc.dram.ok.total"), (unsigned long long)allocs);
    assert_true(allocs > 0); /* daemon 0 holds replicas (used bytes > 0 above) */
    free(st);
    free(cl);
    free(me);
}

/* ---- the cold tier per owner ------------------------------------------------------------- */

static json_t *get_json(uint16_t port, const char *path)
{
    char *body = get_body(port, path);
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    if (!j)
        fail_msg("GET %s on port %u is not JSON (%s):\n%s", path, port, je.text, body);
    free(body);
    return j;
}

/* The member object of `id` in a /cluster answer (fails the test when it is not listed). */
static json_t *cluster_member(json_t *cl, const char *id)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(cl, "members"), i, m)
    {
        json_t *v = json_object_get(m, "id");
        if (json_is_string(v) && strcmp(json_string_value(v), id) == 0)
            return m;
    }
    fail_msg("/cluster does not list member %s", id);
    return NULL;
}

static unsigned long long jnum(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        fail_msg("no integer \"%s\"", k);
    return (unsigned long long)json_integer_value(v);
}

static const char *const cold_nums[] = {"devices", "capacity_bytes", "used_bytes",
                                        "reserved_bytes"};

/* Daemon 0 (cold_kind localdir) lists its own device in its /cluster: one device of
 * OPS_COLD_BYTES whose numbers equal its record as `kvmesh admin devices --json` reads it from
 * metadata, and the page's Cold column shows exactly that; daemons 1 and 2 (cold_kind off) own no
 * device ("cold":null, the page shows none). */
static void check_cold(const tdaemon_t *d, const char *cfg_path, const char *dom)
{
    json_t *cl = get_json(d[0].admin_port, "/cluster");
    assert_true(json_is_true(json_object_get(cl, "cold_view")));
    json_t *c = json_object_get(cluster_member(cl, d[0].id), "cold");
    if (!json_is_object(c))
        fail_msg("/cluster of daemon 0 has no cold block for itself");
    assert_int_equal(jnum(c, "devices"), 1);
    assert_int_equal(jnum(c, "capacity_bytes"), OPS_COLD_BYTES);
    char key[160];
    for (size_t f = 0; f < sizeof(cold_nums) / sizeof(cold_nums[0]); f++) {
        snprintf(key, sizeof(key), "member.%s.cold.%s", d[0].id, cold_nums[f]);
        if (dom_u64(dom, key) != jnum(c, cold_nums[f]))
            fail_msg("page %s = %llu, /cluster %llu", key, dom_u64(dom, key),
                     jnum(c, cold_nums[f]));
    }
    const char *health = json_string_value(json_object_get(c, "health"));
    assert_non_null(health);
    assert_string_equal(health, "healthy");
    snprintf(key, sizeof(key), "member.%s.cold.health", d[0].id);
    dom_expect(dom, key, health);
    for (int i = 1; i < OPS_DAEMONS; i++) {
        assert_true(json_is_null(json_object_get(cluster_member(cl, d[i].id), "cold")));
        snprintf(key, sizeof(key), "member.%s.cold", d[i].id);
        dom_expect(dom, key, "none");
    }
    /* rpc_local = unix (the default): each member's unix socket and host identity, as published */
    for (int i = 0; i < OPS_DAEMONS; i++) {
        json_t *m = cluster_member(cl, d[i].id);
        const char *lr = json_string_value(json_object_get(m, "local_rpc"));
        snprintf(key, sizeof(key), "unix:/tmp/kvmesh-rpc-%s.sock", d[i].id);
        if (!lr || strcmp(lr, key) != 0)
            fail_msg("/cluster: member %s local_rpc %s, want %s", d[i].id, lr ? lr : "null", key);
        assert_true(json_string_length(json_object_get(m, "host")) > 0);
    }

    /* /cluster against the device record in metadata. */
    tdaemon_out_t o;
    ops_run(&o, ops_bin_kvmesh, "admin", "--config", cfg_path, "devices", "--json", NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_error_t je;
    json_t *adm = json_loads(o.out, 0, &je);
    if (!adm)
        fail_msg("kvmesh admin devices --json is not JSON (%s):\n%s", je.text, o.out);
    tdaemon_out_free(&o);
    size_t i, owned = 0;
    json_t *dev;
    json_array_foreach(json_object_get(adm, "devices"), i, dev)
    {
        json_t *owner = json_object_get(dev, "owner");
        if (!json_is_string(owner) || strcmp(json_string_value(owner), d[0].id) != 0)
            continue;
        owned++;
        for (size_t f = 1; f < sizeof(cold_nums) / sizeof(cold_nums[0]); f++)
            if (jnum(dev, cold_nums[f]) != jnum(c, cold_nums[f]))
                fail_msg("device record %s = %llu, /cluster %llu", cold_nums[f],
                         jnum(dev, cold_nums[f]), jnum(c, cold_nums[f]));
        assert_string_equal(json_string_value(json_object_get(dev, "health")), health);
    }
    assert_int_equal(owned, jnum(c, "devices"));
    json_decref(adm);
    json_decref(cl);
}

/* The application runtime (cold_kind off) has no device view: /cluster says so and its page
 * shows it for every member. */
static void check_client_cold(const tdaemon_t *d, uint16_t port, const char *dom)
{
    json_t *cl = get_json(port, "/cluster");
    assert_true(json_is_false(json_object_get(cl, "cold_view")));
    for (int i = 0; i < OPS_DAEMONS; i++) {
        assert_true(json_is_null(json_object_get(cluster_member(cl, d[i].id), "cold")));
        char key[160];
        snprintf(key, sizeof(key), "member.%s.cold", d[i].id);
        dom_expect(dom, key, "no-view");
    }
    json_decref(cl);
}

/* The quota section of daemon 0's page against its /stats?tenant= and the puts made. */
static void check_quota(const tdaemon_t *d, const char *dom, uint64_t put_bytes)
{
    char *st = get_body(d[0].admin_port, "/stats");
    if (!strstr(st, "\"quota_tenants\":[\"" OPS_QT "\"]"))
        fail_msg("/stats of daemon 0 does not list quota tenant " OPS_QT ":\n%s", st);
    free(st);
    char *tq = get_body(d[0].admin_port, "/stats?tenant=" OPS_QT);
    const char *q = strstr(tq, "\"quota\":");
    if (!q)
        fail_msg("/stats?tenant=" OPS_QT " has no quota:\n%s", tq);
    static const char *fields[] = {"policy_version", "used_bytes",   "pending_bytes",
                                   "max_bytes",      "used_objects", "pending_objects",
                                   "max_objects",    "recon_backlog"};
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
        unsigned long long v;
        char key[96];
        assert_non_null(ops_json_u64(q, fields[f], &v));
        snprintf(key, sizeof(key), "quota." OPS_QT ".%s", fields[f]);
        if (dom_u64(dom, key) != v)
            fail_msg("page %s = %llu, /stats?tenant=" OPS_QT " %llu", key, dom_u64(dom, key), v);
    }
    free(tq);
    assert_int_equal(dom_u64(dom, "quota." OPS_QT ".used_bytes"), put_bytes);
    assert_int_equal(dom_u64(dom, "quota." OPS_QT ".used_objects"), OPS_QT_PUTS);
    assert_int_equal(dom_u64(dom, "quota." OPS_QT ".pending_bytes"), 0);
    assert_int_equal(dom_u64(dom, "quota." OPS_QT ".max_bytes"), OPS_QT_MAX);
    assert_int_equal(dom_u64(dom, "quota." OPS_QT ".max_objects"), OPS_QT_OBJECTS);
}

static void check_client_page(uint16_t port, const char *dom, const struct load *l)
{
    char *st = get_body(port, "/stats");
    char *me = get_body(port, "/metrics");
    static const char *ops[] = {"put", "get"};
    for (size_t i = 0; i < 2; i++) {
        char pat[64], key[64];
        snprintf(pat, sizeof(pat), "\"%s\":{", ops[i]);
        const char *o = strstr(strstr(st, "\"requests\":"), pat);
        assert_non_null(o);
        static const char *fields[] = {"total", "errors", "bytes", "in_flight"};
        for (size_t f = 0; f < 4; f++) {
            unsigned long long v;
            assert_non_null(ops_json_u64(o, fields[f], &v));
            snprintf(key, sizeof(key), "req.%s.%s", ops[i], fields[f]);
            if (dom_u64(dom, key) != v)
                fail_msg("page %s = %llu, /stats %llu", key, dom_u64(dom, key), v);
        }
        snprintf(key, sizeof(key), "req.%s.p50", ops[i]);
        dom_expect(dom, key, quantile(me, ops[i], 0.5));
        snprintf(key, sizeof(key), "req.%s.p99", ops[i]);
        dom_expect(dom, key, quantile(me, ops[i], 0.99));
    }
    assert_int_equal(dom_u64(dom, "req.put.total"), atomic_load(&l->puts) + l->qt_puts);
    assert_int_equal(dom_u64(dom, "req.get.total"), atomic_load(&l->gets));
    assert_int_equal(dom_u64(dom, "req.put.bytes"),
                     atomic_load(&l->puts) * OPS_VALUE_LEN + l->qt_bytes);
    free(st);
    free(me);
}

static void test_status_page_in_chromium(void **state)
{
    (void)state;
    testsrv_t *redis = NULL;
    if (testsrv_start_redis(&redis, NULL) != 0)
        fail_msg("cannot start redis-server: %s", kvmesh_last_error());
    char cfg_path[300], cfg[1024], dep[64];
    snprintf(cfg_path, sizeof(cfg_path), "%s/kvmeshd.yaml", ops_tmpdir);
    snprintf(dep, sizeof(dep), "opsp-%ld", (long)getpid());
    snprintf(cfg, sizeof(cfg),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 64MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nreplicas: 2\nlease_ttl_ms: 2000\nshards: %d\ntop_k: %d\n"
             "tenant_policies: %s:%llu:%d\n",
             testsrv_url(redis), dep, OPS_SHARDS, OPS_TOP_K, OPS_QT, OPS_QT_MAX, OPS_QT_OBJECTS);
    ops_write_file(cfg_path, cfg);
    tdaemon_t d[OPS_DAEMONS];
    memset(d, 0, sizeof(d));
    /* Daemon 0 has a LocalDir cold device (its root in the test's directory, removed with it). */
    char cold_root[300];
    snprintf(cold_root, sizeof(cold_root), "%s/cold-0", ops_tmpdir);
    assert_int_equal(mkdir(cold_root, 0700), 0);
    const char *cold[] = {"--cold-kind",     "localdir",   "--cold-root", cold_root,
                          "--cold-capacity", OPS_COLD_CAP, NULL};
    for (int i = 0; i < OPS_DAEMONS; i++)
        if (ops_daemon_start(&d[i], i, cfg_path, i == 0 ? cold : NULL) != 0)
            fail_msg("daemon %d failed to start", i);

    /* The application runtime: joins as a client, serves its own admin port. */
    kvmesh_config_t *kc = kvmesh_config_new();
    assert_int_equal(kvmesh_tools_config_load_file(kc, cfg_path), 0);
    uint16_t cport = testsrv_free_port();
    char admin[64];
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", cport);
    assert_int_equal(kvmesh_config_set(kc, "memory_size", "0"), 0);
    assert_int_equal(kvmesh_config_set(kc, "admin_listen", admin), 0);
    struct load l = {0};
    if (kvmesh_open(&l.kv, kc) != 0)
        fail_msg("application runtime: %s", kvmesh_last_error());
    kvmesh_config_free(kc);

    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, load_main, &l), 0);
    /* Under load: wait for the first requests, then render daemon 0's page. */
    for (uint64_t t0 = env_clock_mono_ms();
         atomic_load(&l.puts) < 50 && env_clock_mono_ms() - t0 < 30000;)
        usleep(10000);
    assert_true(atomic_load(&l.puts) >= 50);
    screenshot("status-page-under-load.png", d[0].admin_port);
    for (uint64_t t1 = env_clock_mono_ms();
         atomic_load(&l.puts) < 500 && env_clock_mono_ms() - t1 < 30000;)
        usleep(10000);
    atomic_store(&l.stop, true);
    pthread_join(th, NULL);
    printf("load: %llu puts, %llu gets, %llu failures\n", (unsigned long long)atomic_load(&l.puts),
           (unsigned long long)atomic_load(&l.gets), (unsigned long long)atomic_load(&l.failures));
    assert_int_equal(atomic_load(&l.failures), 0);
    /* objects of the tenant with a policy: its quota row counts them */
    for (int i = 0; i < OPS_QT_PUTS; i++) {
        kvmesh_scope_t qs = {.tenant = OPS_QT};
        char key[16], val[64];
        snprintf(key, sizeof(key), "q%d", i);
        memset(val, 'q', sizeof(val));
        size_t len = 10 + (size_t)i * 20;
        if (kvmesh_put(l.kv, &qs, key, strlen(key), val, len, NULL) != 0)
            fail_msg("put %s of tenant " OPS_QT ": %s", key, kvmesh_last_error());
        l.qt_puts++;
        l.qt_bytes += len;
    }

    /* Settled: the member records carry every daemon's final used bytes. */
    uint64_t t0 = env_clock_mono_ms();
    while (!settled(d)) {
        if (env_clock_mono_ms() - t0 > OPS_SETTLE_MS)
            fail_msg("member records did not settle within %d ms", OPS_SETTLE_MS);
        usleep(200000);
    }

    char *dom = dump_dom(d[0].admin_port);
    check_daemon_page(d, dom);
    check_quota(d, dom, l.qt_bytes);
    check_cold(d, cfg_path, dom);
    free(dom);
    dom = dump_dom(cport);
    check_client_page(cport, dom, &l);
    check_client_cold(d, cport, dom);
    free(dom);
    screenshot("status-page.png", d[0].admin_port);
    screenshot("status-page-application.png", cport);

    kvmesh_close(l.kv);
    for (int i = 0; i < OPS_DAEMONS; i++)
        tdaemon_stop(&d[i]);
    testsrv_stop(redis);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_page_in_chromium),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
