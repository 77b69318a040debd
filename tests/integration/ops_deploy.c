/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_deploy.c — the files of deploy/ hold against the real programs:
 *   - every example config (one .yaml per shape in deploy/config/) loads with the config
 *     loader and passes `kvmeshd --check-config`; its metadata URL has the scheme its shape
 *     names;
 *   - the systemd unit passes `systemd-analyze verify` without a single warning (with the
 *     binary path pointed at this build), runs kvmeshd with flags kvmeshd accepts, stops it with
 *     SIGTERM, and gives the drain more time than any example's drain_timeout_ms;
 *   - the alert rules pass `promtool check rules` and their unit tests (`promtool test rules`),
 *     the scrape config `promtool check config`; lease loss, metadata errors, transport
 *     failures, under-replicated objects and cold device health (the kvmesh_cold_device_health
 *     gauge) have alerts, the last two with unit tests;
 *   - every metric name used by an alert expression and by every dashboard query exists in
 *     the /metrics of a real kvmeshd started from the single-node example; the dashboard parses
 *     as JSON with unique panel ids, a grid position and at least one query per panel.
 */
#include <dirent.h>
#include <jansson.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "ops_util.h"

#define DEPLOY_MAX_NAMES 512

static char deploy_dir[400];

static int group_setup(void **state)
{
    (void)state;
    const char *src = getenv("KVMESH_SOURCE_DIR");
    snprintf(deploy_dir, sizeof(deploy_dir), "%s/deploy", src ? src : KVMESH_SOURCE_DIR);
    return ops_setup();
}

static int group_teardown(void **state)
{
    (void)state;
    return ops_teardown();
}

static const char *const shapes[][2] = {
    {"single-node.yaml", "memory://"},
    {"redis-3node.yaml", "redis://"},
    {"etcd-3node.yaml", "etcd://"},
};

static uint64_t max_drain_ms;

static void test_configs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/config/%s", deploy_dir, shapes[i][0]);
        kvmesh_config_t *c = kvmesh_config_new();
        if (kvmesh_tools_config_load_file(c, path) != 0)
            fail_msg("%s does not load: %s", path, kvmesh_last_error());
        if (kvmesh_tools_config_validate(c) != 0)
            fail_msg("%s fails the cross-field checks: %s", path, kvmesh_last_error());
        const char *url = kvmesh_tools_config_str(c, "metadata_url");
        if (strncmp(url, shapes[i][1], strlen(shapes[i][1])) != 0)
            fail_msg("%s: metadata_url %s is not %s...", path, url, shapes[i][1]);
        uint64_t drain = kvmesh_tools_config_uint(c, "drain_timeout_ms");
        if (drain > max_drain_ms)
            max_drain_ms = drain;
        kvmesh_config_free(c);
        tdaemon_out_t o;
        ops_run(&o, ops_bin_kvmeshd, "--config", path, "--check-config", NULL);
        OPS_ASSERT_RUN(&o, 0);
        OPS_ASSERT_HAS(o.err, "configuration OK");
        tdaemon_out_free(&o);
    }
    /* There is one example per shape and nothing else in the folder. */
    char dir[500];
    snprintf(dir, sizeof(dir), "%s/config", deploy_dir);
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dp);
    assert_int_equal(n, sizeof(shapes) / sizeof(shapes[0]));
}

static char *unit_value(const char *unit, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\n%s=", key);
    const char *p = strstr(unit, pat);
    if (!p)
        fail_msg("the unit has no %s=", key);
    p += strlen(pat);
    return strndup(p, strcspn(p, "\n"));
}

static void test_systemd_unit(void **state)
{
    (void)state;
    char path[600], tmp[400];
    snprintf(path, sizeof(path), "%s/systemd/kvmeshd.service", deploy_dir);
    char *unit = tdaemon_slurp(path, NULL);
    assert_true(strlen(unit) > 0);
    /* systemd's own check, with ExecStart pointing at this build's binary. */
    snprintf(tmp, sizeof(tmp), "%s/kvmeshd.service", ops_tmpdir);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    for (const char *p = unit; *p;) {
        const char *hit = strstr(p, "/usr/local/bin/kvmeshd");
        if (!hit) {
            fputs(p, f);
            break;
        }
        fwrite(p, 1, (size_t)(hit - p), f);
        fputs(ops_bin_kvmeshd, f);
        p = hit + strlen("/usr/local/bin/kvmeshd");
    }
    fclose(f);
    tdaemon_out_t o;
    ops_run(&o, "/usr/bin/systemd-analyze", "verify", tmp, NULL);
    OPS_ASSERT_RUN(&o, 0);
    if (o.err[0] || strstr(o.out, tmp))
        fail_msg("systemd-analyze verify warns about the unit:\n%s%s", o.out, o.err);
    tdaemon_out_free(&o);

    char *v = unit_value(unit, "KillSignal");
    assert_string_equal(v, "SIGTERM");
    free(v);
    v = unit_value(unit, "TimeoutStopSec");
    unsigned long stop_s = strtoul(v, NULL, 10);
    free(v);
    if (max_drain_ms == 0)
        max_drain_ms = 30000;
    if (stop_s * 1000 <= max_drain_ms)
        fail_msg("TimeoutStopSec=%lu does not cover drain_timeout_ms %llu of the examples", stop_s,
                 (unsigned long long)max_drain_ms);
    /* ExecStart and ExecStartPre use flags kvmeshd accepts: run them on the single-node example
     * (--check-config, so nothing starts). */
    static const char *execs[] = {"ExecStartPre", "ExecStart"};
    for (size_t i = 0; i < 2; i++) {
        v = unit_value(unit, execs[i]);
        const char *argv[OPS_MAX_ARGS + 1];
        size_t n = 0;
        char cfg[600];
        snprintf(cfg, sizeof(cfg), "%s/config/single-node.yaml", deploy_dir);
        for (char *save = NULL, *t = strtok_r(v, " ", &save); t && n < OPS_MAX_ARGS - 2;
             t = strtok_r(NULL, " ", &save)) {
            if (n == 0) {
                assert_string_equal(t, "/usr/local/bin/kvmeshd");
                argv[n++] = ops_bin_kvmeshd;
            } else if (strcmp(t, "/etc/kvmesh/kvmeshd.yaml") == 0) {
                argv[n++] = cfg;
            } else if (strncmp(t, "/run/kvmesh/", 12) == 0) {
                argv[n++] = "/dev/null";
            } else if (strcmp(t, "--check-config") != 0) {
                argv[n++] = t;
            }
        }
        argv[n++] = "--check-config";
        argv[n] = NULL;
        ops_runv(&o, argv);
        if (o.status != 0)
            fail_msg("%s flags are refused by kvmeshd: %s", execs[i], o.err);
        tdaemon_out_free(&o);
        free(v);
    }
    free(unit);
}

static void test_promtool(void **state)
{
    (void)state;
    char rules[600], tests[600], conf[600];
    snprintf(rules, sizeof(rules), "%s/prometheus/kvmesh-alerts.yml", deploy_dir);
    snprintf(tests, sizeof(tests), "%s/prometheus/kvmesh-alerts.test.yml", deploy_dir);
    snprintf(conf, sizeof(conf), "%s/prometheus/prometheus.yml", deploy_dir);
    tdaemon_out_t o;
    ops_run(&o, "/usr/bin/promtool", "check", "rules", rules, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "SUCCESS");
    tdaemon_out_free(&o);
    ops_run(&o, "/usr/bin/promtool", "test", "rules", tests, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "SUCCESS");
    tdaemon_out_free(&o);
    ops_run(&o, "/usr/bin/promtool", "check", "config", conf, NULL);
    OPS_ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    char *text = tdaemon_slurp(rules, NULL);
    static const char *must[] = {"alert: KvmeshLeaseLost",
                                 "alert: KvmeshMetadataErrors",
                                 "alert: KvmeshTransportFailures",
                                 "alert: KvmeshUnderReplicatedObjects",
                                 "alert: KvmeshColdDeviceUnhealthy",
                                 "expr: max by (instance) (kvmesh_cold_device_health) >= 2"};
    for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
        OPS_ASSERT_HAS(text, must[i]);
    free(text);
    /* the unit tests cover them (each alert named by an alert_rule_test) */
    text = tdaemon_slurp(tests, NULL);
    static const char *tested[] = {"alertname: KvmeshUnderReplicatedObjects",
                                   "alertname: KvmeshColdDeviceUnhealthy"};
    for (size_t i = 0; i < sizeof(tested) / sizeof(tested[0]); i++)
        OPS_ASSERT_HAS(text, tested[i]);
    free(text);
}

/* ---- metric names against a real /metrics --------------------------------------------------- */

struct names {
    size_t n;
    char *v[DEPLOY_MAX_NAMES];
};

static bool names_has(const struct names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

static void names_add(struct names *s, const char *name, size_t len)
{
    char *x = strndup(name, len);
    if (names_has(s, x) || s->n >= DEPLOY_MAX_NAMES) {
        free(x);
        return;
    }
    s->v[s->n++] = x;
}

static void names_free(struct names *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    s->n = 0;
}

/* Every metric identifier (kvmesh_* and the standard process_* families) in an expression;
 * returns how many. */
static size_t expr_names(const char *expr, struct names *out)
{
    static const char *const prefixes[] = {"kvmesh_", "process_"};
    size_t found = 0;
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
        for (const char *p = expr; (p = strstr(p, prefixes[k])) != NULL;) {
            if (p > expr && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                             (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9'))) {
                p++;
                continue;
            }
            size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
            names_add(out, p, n);
            found++;
            p += n;
        }
    }
    return found;
}

static void check_exported(const struct names *used, const struct names *exported, const char *what)
{
    for (size_t i = 0; i < used->n; i++)
        if (!names_has(exported, used->v[i]))
            fail_msg("%s uses %s, which a kvmeshd does not export at /metrics", what, used->v[i]);
}

static void test_metrics_exist(void **state)
{
    (void)state;
    /* A real runtime from the single-node example, on free ports. */
    char cfg[600], listen[64];
    snprintf(cfg, sizeof(cfg), "%s/config/single-node.yaml", deploy_dir);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", testsrv_free_port());
    const char *extra[] = {"--listen", listen, "--memory-size", "256MiB", NULL};
    tdaemon_t d = {0};
    if (ops_daemon_start(&d, 0, cfg, extra) != 0)
        fail_msg("kvmeshd from %s did not start", cfg);
    tdaemon_http_t r;
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/metrics", NULL, &r), 200);
    struct names exported = {0};
    for (const char *line = r.body; *line;) {
        size_t len = strcspn(line, "\n");
        if (line[0] != '#' && len > 0)
            names_add(&exported, line, strcspn(line, "{ \n"));
        line += len;
        if (*line == '\n')
            line++;
    }
    tdaemon_http_free(&r);
    tdaemon_stop(&d);
    assert_true(exported.n > 30);

    /* Alert rules: every expr: line. */
    char path[600];
    snprintf(path, sizeof(path), "%s/prometheus/kvmesh-alerts.yml", deploy_dir);
    char *rules = tdaemon_slurp(path, NULL);
    struct names used = {0};
    size_t exprs = 0;
    for (const char *p = rules; (p = strstr(p, "expr: ")) != NULL; p += 6) {
        char *e = strndup(p + 6, strcspn(p + 6, "\n"));
        if (expr_names(e, &used) == 0)
            fail_msg("alert expression uses no kvmesh metric: %s", e);
        free(e);
        exprs++;
    }
    assert_true(exprs >= 3);
    check_exported(&used, &exported, "an alert rule");
    printf("alert rules: %zu expressions, %zu metric names, all exported\n", exprs, used.n);
    names_free(&used);
    free(rules);

    /* Dashboard: every target of every panel, and the template query. */
    snprintf(path, sizeof(path), "%s/grafana/kvmesh-dashboard.json", deploy_dir);
    json_error_t je;
    json_t *dash = json_load_file(path, 0, &je);
    if (!dash)
        fail_msg("%s:%d: %s", path, je.line, je.text);
    json_t *panels = json_object_get(dash, "panels");
    assert_true(json_is_array(panels) && json_array_size(panels) > 10);
    size_t idx, queries = 0;
    json_t *p;
    long long ids[256];
    size_t nids = 0;
    json_array_foreach(panels, idx, p)
    {
        json_t *id = json_object_get(p, "id");
        assert_true(json_is_integer(id));
        for (size_t k = 0; k < nids; k++)
            if (ids[k] == json_integer_value(id))
                fail_msg("dashboard panel id %lld is used twice", ids[k]);
        if (nids < 256)
            ids[nids++] = json_integer_value(id);
        json_t *gp = json_object_get(p, "gridPos");
        assert_true(json_is_object(gp) && json_is_integer(json_object_get(gp, "w")));
        const char *type = json_string_value(json_object_get(p, "type"));
        assert_non_null(type);
        if (strcmp(type, "row") == 0)
            continue;
        json_t *targets = json_object_get(p, "targets"), *t;
        size_t ti;
        if (!json_is_array(targets) || json_array_size(targets) == 0)
            fail_msg("dashboard panel \"%s\" has no query",
                     json_string_value(json_object_get(p, "title")));
        json_array_foreach(targets, ti, t)
        {
            const char *e = json_string_value(json_object_get(t, "expr"));
            assert_non_null(e);
            if (expr_names(e, &used) == 0)
                fail_msg("dashboard query uses no kvmesh metric: %s", e);
            queries++;
        }
    }
    json_t *tl = json_object_get(json_object_get(dash, "templating"), "list"), *v;
    json_array_foreach(tl, idx, v)
    {
        const char *def = json_string_value(json_object_get(v, "definition"));
        if (def)
            expr_names(def, &used);
    }
    check_exported(&used, &exported, "the Grafana dashboard");
    printf("dashboard: %zu panels, %zu queries, %zu metric names, all exported\n",
           json_array_size(panels), queries, used.n);
    json_decref(dash);
    names_free(&used);
    names_free(&exported);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_systemd_unit),
        cmocka_unit_test(test_promtool),
        cmocka_unit_test(test_metrics_exist),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
