/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_endpoints.c — the admin port of a real kvmeshd process (single-node embedded deployment,
 * memory:// metadata) as an operator meets it:
 *   - tracing off: /breakdown, /trace, POST /trace/sampling and /trace/capture answer 409 with
 *     a JSON error that says tracing is off and names trace_sample_rate and the flag; /api says
 *     "tracing":false with the same note; with --trace-sample-rate the same endpoints answer 200;
 *   - content negotiation at /: Accept: text/html gets the status page (self-contained: no
 *     external script, style or image reference), Accept: application/json (or none) the JSON
 *     endpoint index, which /api also serves; a query string on / is still validated;
 *   - /cluster lists the daemon itself with its capacity, and the designated route authority
 *     counts add up (every shard has one primary and top_k authorities).
 */
#include "ops_util.h"

static void single_node_config(char *path, size_t cap, const char *name)
{
    char cfg[512];
    snprintf(path, cap, "%s/%s.yaml", ops_tmpdir, name);
    snprintf(cfg, sizeof(cfg),
             "metadata_url: memory://%s\n"
             "deployment: %s\n"
             "memory_size: 64MiB\n"
             "segment_size: 16MiB\n"
             "max_object_size: 16MiB\n"
             "shards: 32\n"
             "top_k: 1\n",
             name, name);
    ops_write_file(path, cfg);
}

static void expect_tracing_off(uint16_t port, const char *method, const char *path)
{
    tdaemon_http_t r;
    int code = tdaemon_http(port, method, path, NULL, &r);
    if (code != 409)
        fail_msg("%s %s with tracing off: %d (want 409)\n%s", method, path, code, r.body);
    OPS_ASSERT_HAS(r.body, "\"error\":\"tracing is off in this runtime");
    OPS_ASSERT_HAS(r.body, "trace_sample_rate");
    OPS_ASSERT_HAS(r.body, "--trace-sample-rate");
    OPS_ASSERT_HAS(r.head, "Content-Type: application/json");
    tdaemon_http_free(&r);
}

static void test_tracing_off_and_on(void **state)
{
    (void)state;
    char cfg[300];
    single_node_config(cfg, sizeof(cfg), "opsep-trace");
    tdaemon_t d = {0};
    if (ops_daemon_start(&d, 0, cfg, NULL) != 0)
        fail_msg("kvmeshd did not start");
    expect_tracing_off(d.admin_port, "GET", "/breakdown");
    expect_tracing_off(d.admin_port, "GET", "/breakdown?limit=3");
    expect_tracing_off(d.admin_port, "GET", "/trace");
    expect_tracing_off(d.admin_port, "POST", "/trace/sampling?rate=0.5");
    expect_tracing_off(d.admin_port, "POST", "/trace/capture?action=stop");
    tdaemon_http_t r;
    /* A wrong method is still a 405, an unknown path a 404. */
    assert_int_equal(tdaemon_http(d.admin_port, "POST", "/trace", NULL, &r), 405);
    tdaemon_http_free(&r);
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/tracex", NULL, &r), 404);
    OPS_ASSERT_HAS(r.body, "GET /api lists them");
    tdaemon_http_free(&r);
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/api", NULL, &r), 200);
    OPS_ASSERT_HAS(r.body, "\"tracing\":false");
    OPS_ASSERT_HAS(r.body, "\"tracing_note\":\"tracing is off in this runtime");
    OPS_ASSERT_HAS(r.body, "\"/breakdown\"");
    tdaemon_http_free(&r);
    tdaemon_stop(&d);

    /* The same daemon with tracing on. */
    const char *on[] = {"--trace-sample-rate", "0.5", NULL};
    if (ops_daemon_start(&d, 1, cfg, on) != 0)
        fail_msg("kvmeshd --trace-sample-rate 0.5 did not start");
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/trace", NULL, &r), 200);
    OPS_ASSERT_HAS(r.body, "\"sample_rate\":0.5");
    tdaemon_http_free(&r);
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/breakdown?limit=3", NULL, &r), 200);
    OPS_ASSERT_HAS(r.body, "\"entries\":[");
    tdaemon_http_free(&r);
    assert_int_equal(tdaemon_http(d.admin_port, "POST", "/trace/sampling?rate=0.25", NULL, &r),
                     200);
    OPS_ASSERT_HAS(r.body, "\"sample_rate\":0.25");
    tdaemon_http_free(&r);
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/api", NULL, &r), 200);
    OPS_ASSERT_HAS(r.body, "\"tracing\":true");
    if (strstr(r.body, "tracing_note"))
        fail_msg("/api with tracing on still carries the note: %s", r.body);
    tdaemon_http_free(&r);
    tdaemon_stop(&d);
}

static void test_index_negotiation_and_cluster(void **state)
{
    (void)state;
    char cfg[300];
    single_node_config(cfg, sizeof(cfg), "opsep-index");
    tdaemon_t d = {0};
    if (ops_daemon_start(&d, 2, cfg, NULL) != 0)
        fail_msg("kvmeshd did not start");
    tdaemon_http_t r;
    /* A browser's Accept header gets the page. */
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/",
                                  "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                                  &r),
                     200);
    OPS_ASSERT_HAS(r.head, "Content-Type: text/html; charset=utf-8");
    OPS_ASSERT_HAS(r.body, "<title>kvmesh status</title>");
    OPS_ASSERT_HAS(r.body, "fetch(u,");
    /* Self-contained: nothing loaded from elsewhere. */
    static const char *external[] = {"<script src", "<link",    "<img", "@import",
                                     "http://",     "https://", "url("};
    for (size_t i = 0; i < sizeof(external) / sizeof(external[0]); i++)
        if (strstr(r.body, external[i]))
            fail_msg("status page references an external asset (%s)", external[i]);
    tdaemon_http_free(&r);
    /* Scripts and curl get JSON. */
    const char *json_accepts[] = {NULL, "application/json", "*/*"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(tdaemon_http(d.admin_port, "GET", "/", json_accepts[i], &r), 200);
        OPS_ASSERT_HAS(r.head, "Content-Type: application/json");
        OPS_ASSERT_HAS(r.body, "{\"endpoints\":[\"/\",\"/api\",\"/healthz\",\"/metrics\"");
        OPS_ASSERT_HAS(r.body, "\"/cluster\"");
        tdaemon_http_free(&r);
    }
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/api", "text/html", &r), 200);
    OPS_ASSERT_HAS(r.head, "Content-Type: application/json");
    OPS_ASSERT_HAS(r.body, "\"status_page\":\"GET / with Accept: text/html\"");
    tdaemon_http_free(&r);
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/?x=1", "text/html", &r), 400);
    tdaemon_http_free(&r);

    /* /cluster: the daemon itself, its capacity, shards adding up. */
    assert_int_equal(tdaemon_http(d.admin_port, "GET", "/cluster", NULL, &r), 200);
    OPS_ASSERT_HAS(r.body, "\"schema\":1");
    char want[128];
    snprintf(want, sizeof(want), "{\"id\":\"%s\",\"self\":true", d.id);
    OPS_ASSERT_HAS(r.body, want);
    OPS_ASSERT_HAS(r.body, "\"route_mode\":\"embedded_wrh\",\"shards\":32,\"top_k\":1");
    OPS_ASSERT_HAS(r.body, "\"capacity_bytes\":67108864");
    OPS_ASSERT_HAS(r.body, "\"shards_primary\":32,\"shards_authority\":32");
    tdaemon_http_free(&r);
    tdaemon_stop(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tracing_off_and_on),
        cmocka_unit_test(test_index_negotiation_and_cluster),
    };
    return cmocka_run_group_tests(tests, ops_group_setup, ops_group_teardown);
}
