/* SPDX-License-Identifier: Apache-2.0 */
/*
 * obs_trace.c — distributed tracing across two runtimes over a real loopback socket:
 *   - a sampled remote put and a sampled remote get each yield one connected trace
 *     (store.* -> control.* -> data.* -> metadata.*, correct parents, spans from both runtimes)
 *     in both runtimes' JSONL captures and at a fake OTLP/HTTP receiver (libmicrohttpd);
 *   - the receiving runtime follows the caller's sampling decision, not its own rate;
 *   - the breakdown ring attributes the root's time to stages exactly;
 *   - a dead collector (closed port) and a stalled one (accepts, never answers in time) make
 *     the exporter drop spans and count the drops, in the tracer stats and in /metrics.
 * The runtime calls go through obs_testrt.h (trt_put/trt_get) so the test can be re-pointed at
 * the real runtime.
 */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "jsonl.h"
#include "obs_testrt.h"
#include "otlp_fake.h"
#include "tmpdir.h"

/* ---- JSONL reading ----------------------------------------------------------------------- */

/* Debug records: the key only ever appears hashed. */
static void check_debug_attrs(json_t *rec, const tspan_t *s, void *arg)
{
    (void)arg;
    json_t *attrs = json_object_get(rec, "attrs");
    assert_null(json_object_get(attrs, "kvmesh.key"));
    if (strncmp(s->name, "data.", 5) == 0)
        assert_non_null(json_object_get(attrs, "kvmesh.key_hash"));
}

static size_t jsonl_read(const char *path, tspan_t *out, size_t max)
{
    long n = tjsonl_read_spans(path, out, max, check_debug_attrs, NULL);
    assert_true(n >= 0);
    return (size_t)n;
}

/* Every body the collector got was OTLP JSON and every span carries its start time. */
static void check_received(otlp_fake_t *rx)
{
    assert_int_equal(rx->bad_bodies, 0);
    for (size_t i = 0; i < rx->n; i++)
        assert_true(rx->spans[i].has_start);
}

static const tspan_t *find_span(const tspan_t *s, size_t n, const char *trace, const char *name)
{
    const tspan_t *hit = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].trace_id, trace) == 0 && strcmp(s[i].name, name) == 0) {
            assert_null(hit); /* exactly one */
            hit = &s[i];
        }
    assert_non_null(hit);
    return hit;
}

/* Checks the trace of one remote request: 5 spans, parents as drawn in obs_testrt.h. */
static void check_trace(const tspan_t *s, size_t n, const char *root_name, const char *rpc,
                        const char *data, const char *meta, char *trace_out)
{
    const tspan_t *root = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, root_name) == 0 && s[i].parent[0] == '\0') {
            assert_null(root);
            root = &s[i];
        }
    assert_non_null(root);
    const char *tid = root->trace_id;
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += strcmp(s[i].trace_id, tid) == 0;
    assert_int_equal(count, 5);
    const tspan_t *lk = find_span(s, n, tid, "control.route_lookup");
    const tspan_t *r = find_span(s, n, tid, rpc);
    const tspan_t *d = find_span(s, n, tid, data);
    const tspan_t *m = find_span(s, n, tid, meta);
    assert_string_equal(lk->parent, root->span_id);
    assert_string_equal(r->parent, root->span_id);
    assert_string_equal(d->parent, r->span_id); /* across the socket */
    assert_string_equal(m->parent, d->span_id);
    assert_string_equal(root->service, "rt-a");
    assert_string_equal(r->service, "rt-a");
    assert_string_equal(d->service, "rt-b");
    assert_string_equal(m->service, "rt-b");
    snprintf(trace_out, 33, "%s", tid);
}

static char dir_a[256], dir_b[256]; /* removed at exit also when an assertion fails */

static void test_connected_trace(void **state)
{
    (void)state;
    otlp_fake_t *rx = otlp_fake_start(0);
    assert_non_null(rx);
    const char *url = rx->url;
    assert_int_equal(ttmp_make_auto(dir_a, sizeof(dir_a), "kvmesh-obs-a"), 0);
    assert_int_equal(ttmp_make_auto(dir_b, sizeof(dir_b), "kvmesh-obs-b"), 0);
    /* B never samples on its own: its spans exist only because A's context says so */
    struct trt_config ca = {
        .name = "rt-a", .sample_rate = 1.0, .capture_dir = dir_a, .otlp_url = url};
    struct trt_config cb = {
        .name = "rt-b", .sample_rate = 0.0, .capture_dir = dir_b, .otlp_url = url};
    struct trt *a, *b;
    trt_open(&ca, &a);
    trt_open(&cb, &b);

    assert_int_equal(trt_put(a, b, "tenant-x", "object/alpha", 262144), 0);
    assert_int_equal(trt_get(a, b, "tenant-x", "object/alpha", 262144), 0);
    /* unsampled: A at rate 0, B at rate 1 -> no spans anywhere */
    assert_int_equal(obs_tracer_set_sample_rate(a->tracer, 0.0), 0);
    assert_int_equal(obs_tracer_set_sample_rate(b->tracer, 1.0), 0);
    assert_int_equal(trt_put(a, b, "tenant-x", "object/beta", 4096), 0);
    assert_int_equal(obs_tracer_flush(a->tracer, 5000), 0);
    assert_int_equal(obs_tracer_flush(b->tracer, 5000), 0);

    /* the breakdown on A: root spans with stages summing to the total */
    struct obs_buf bd;
    obs_buf_init(&bd, 1 << 20);
    obs_tracer_breakdown_json(a->tracer, 10, &bd);
    json_error_t e;
    json_t *j = json_loads(bd.data, 0, &e);
    assert_non_null(j);
    json_t *ents = json_object_get(j, "entries");
    assert_int_equal(json_array_size(ents), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *en = json_array_get(ents, i);
        json_t *st = json_object_get(en, "stages_us");
        double sum = json_real_value(json_object_get(st, "store")) +
                     json_real_value(json_object_get(st, "control")) +
                     json_real_value(json_object_get(st, "data")) +
                     json_real_value(json_object_get(st, "metadata"));
        double total = json_real_value(json_object_get(en, "total_us"));
        assert_true(fabs(sum - total) < 0.01);
        assert_true(json_real_value(json_object_get(st, "control")) > 0);
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(ents, 0), "name")),
                        "store.get");
    json_decref(j);
    obs_buf_free(&bd);

    trt_close(a);
    trt_close(b);

    /* JSONL: both runtimes' captures together hold the two traces */
    static tspan_t js[256];
    char p[300];
    snprintf(p, sizeof(p), "%s/spans.jsonl", dir_a);
    size_t n = jsonl_read(p, js, 256);
    snprintf(p, sizeof(p), "%s/spans.jsonl", dir_b);
    n += jsonl_read(p, js + n, 256 - n);
    assert_int_equal(n, 10);
    char t_put[33], t_get[33];
    check_trace(js, n, "store.put", "control.rpc_put", "data.write", "metadata.cas", t_put);
    check_trace(js, n, "store.get", "control.rpc_get", "data.read", "metadata.get", t_get);
    assert_string_not_equal(t_put, t_get);

    /* OTLP: the same ten spans at the collector */
    pthread_mutex_lock(&rx->mu);
    check_received(rx);
    assert_int_equal(rx->n, 10);
    char o_put[33], o_get[33];
    check_trace(rx->spans, rx->n, "store.put", "control.rpc_put", "data.write", "metadata.cas",
                o_put);
    check_trace(rx->spans, rx->n, "store.get", "control.rpc_get", "data.read", "metadata.get",
                o_get);
    pthread_mutex_unlock(&rx->mu);
    assert_string_equal(o_put, t_put);
    assert_string_equal(o_get, t_get);
    otlp_fake_stop(rx);
    assert_int_equal(ttmp_remove(dir_a), 0);
    assert_int_equal(ttmp_remove(dir_b), 0);
}

static struct obs_registry *spans_reg; /* the tracers of this test count here */

static int64_t spans_metric(unsigned res)
{
    int64_t v = 0;
    assert_int_equal(obs_metrics_read(spans_reg, "trace_spans_total", res, 0, &v), 0);
    return v;
}

static void test_dead_collector_drops_counted(void **state)
{
    (void)state;
    /* a port that was free a moment ago: nothing listens there */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/traces", (unsigned)ntohs(sa.sin_port));
    struct obs_tracer_config c = {.service = "rt-dead",
                                  .sample_rate = 1.0,
                                  .otlp_url = url,
                                  .export_timeout_ms = 200,
                                  .flush_interval_ms = 20,
                                  .metrics = spans_reg};
    struct obs_tracer *t;
    assert_int_equal(obs_tracer_create(&c, &t), 0);
    int64_t before = spans_metric(OBS_SPANRES_DROPPED_EXPORT_FAILED);
    for (int i = 0; i < 50; i++) {
        struct obs_span s;
        obs_span_start(t, NULL, "store.put", &s);
        obs_span_end(&s);
    }
    assert_int_equal(obs_tracer_flush(t, 10000), 0);
    struct obs_tracer_stats st;
    obs_tracer_stats(t, &st);
    assert_int_equal(st.dropped_export_failed, 50);
    assert_int_equal(st.exported_otlp, 0);
    assert_true(st.batches_failed >= 1);
    assert_int_equal(spans_metric(OBS_SPANRES_DROPPED_EXPORT_FAILED) - before, 50);
    obs_tracer_destroy(t);
}

static void test_stalled_collector_queue_drops(void **state)
{
    (void)state;
    otlp_fake_t *rx = otlp_fake_start(400); /* slower than the exporter's timeout */
    assert_non_null(rx);
    const char *url = rx->url;
    struct obs_tracer_config c = {.service = "rt-slow",
                                  .sample_rate = 1.0,
                                  .otlp_url = url,
                                  .queue_cap = 16,
                                  .batch_max = 8,
                                  .export_timeout_ms = 100,
                                  .flush_interval_ms = 10,
                                  .metrics = spans_reg};
    struct obs_tracer *t;
    assert_int_equal(obs_tracer_create(&c, &t), 0);
    int64_t before = spans_metric(OBS_SPANRES_DROPPED_QUEUE_FULL);
    for (int i = 0; i < 500; i++) {
        struct obs_span s;
        obs_span_start(t, NULL, "store.get", &s);
        obs_span_end(&s);
    }
    struct obs_tracer_stats st;
    obs_tracer_stats(t, &st);
    assert_true(st.dropped_queue_full > 0);
    assert_true(st.queue_len <= 16);
    assert_int_equal(spans_metric(OBS_SPANRES_DROPPED_QUEUE_FULL) - before,
                     (int64_t)st.dropped_queue_full);
    assert_int_equal(obs_tracer_flush(t, 20000), 0);
    obs_tracer_stats(t, &st);
    /* every span is accounted for: exported, dropped at the queue or dropped by the export */
    assert_int_equal(st.exported_otlp + st.dropped_queue_full + st.dropped_export_failed, 500);
    assert_true(st.dropped_export_failed > 0);
    obs_tracer_destroy(t);
    pthread_mutex_lock(&rx->mu);
    check_received(rx);
    pthread_mutex_unlock(&rx->mu);
    otlp_fake_stop(rx);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connected_trace),
        cmocka_unit_test(test_dead_collector_drops_counted),
        cmocka_unit_test(test_stalled_collector_queue_drops),
    };
    if (obs_registry_new(&spans_reg) != 0)
        return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    obs_registry_free(spans_reg);
    curl_global_cleanup();
    return rc;
}
