/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_obs_trace.c — trace context on the wire (exactly 25 bytes, round trip, inconsistent
 * blocks rejected), head sampling at the root and inheritance by children and remote spans,
 * per-item debug records (off by default, hashed keys by default), exclusive per-stage
 * breakdown, capture control and the JSONL line format.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <cmocka.h>

#include "obs/trace.h"
#include "tmpdir.h"

static struct obs_tracer *mk(double rate, const char *capdir, bool debug, bool plain)
{
    struct obs_tracer_config c = {.service = "unit",
                                  .sample_rate = rate,
                                  .capture_dir = capdir,
                                  .capture_name = capdir ? "t.jsonl" : NULL,
                                  .debug_records = debug,
                                  .debug_plain_keys = plain,
                                  .key_hash_seed = 7,
                                  .flush_interval_ms = 10};
    struct obs_tracer *t = NULL;
    assert_int_equal(obs_tracer_create(&c, &t), 0);
    return t;
}

static void test_ctx_wire(void **state)
{
    (void)state;
    struct obs_tracer *t = mk(1.0, NULL, false, false);
    struct obs_span s;
    obs_span_start(t, NULL, "store.put", &s);
    struct obs_trace_ctx c, d;
    obs_span_context(&s, &c);
    uint8_t wire[OBS_TRACE_CTX_WIRE_LEN + 1];
    memset(wire, 0xee, sizeof(wire));
    obs_trace_ctx_inject(&c, wire);
    assert_int_equal(wire[OBS_TRACE_CTX_WIRE_LEN], 0xee); /* exactly 25 bytes written */
    assert_memory_equal(wire, s.trace_id, 16);
    assert_memory_equal(wire + 16, s.span_id, 8);
    assert_int_equal(wire[24], OBS_TRACE_FLAG_SAMPLED);
    assert_int_equal(obs_trace_ctx_extract(wire, &d), 0);
    assert_memory_equal(&c, &d, sizeof(c));
    /* reserved flag bits are ignored */
    wire[24] = 0xfe;
    assert_int_equal(obs_trace_ctx_extract(wire, &d), 0);
    assert_int_equal(d.flags, 0);
    /* all zero: no context */
    uint8_t z[OBS_TRACE_CTX_WIRE_LEN] = {0};
    assert_int_equal(obs_trace_ctx_extract(z, &d), 0);
    assert_false(obs_trace_ctx_present(&d));
    z[24] = 1; /* sampled without ids */
    assert_int_equal(obs_trace_ctx_extract(z, &d), KVMESH_EPROTO);
    z[24] = 0;
    z[20] = 1; /* span id without trace id */
    assert_int_equal(obs_trace_ctx_extract(z, &d), KVMESH_EPROTO);
    memset(z, 0, sizeof(z));
    z[3] = 1; /* trace id without span id */
    assert_int_equal(obs_trace_ctx_extract(z, &d), KVMESH_EPROTO);
    obs_span_end(&s);
    obs_tracer_destroy(t);
}

static void test_sampling(void **state)
{
    (void)state;
    struct obs_tracer *t = mk(0.0, NULL, false, false);
    int sampled = 0;
    for (int i = 0; i < 1000; i++) {
        struct obs_span s;
        obs_span_start(t, NULL, "store.get", &s);
        sampled += obs_span_sampled(&s);
        obs_span_end(&s);
    }
    assert_int_equal(sampled, 0);
    assert_int_equal(obs_tracer_set_sample_rate(t, 0.5), 0);
    assert_int_equal(obs_tracer_set_sample_rate(t, 1.5), KVMESH_EINVAL);
    assert_int_equal(obs_tracer_set_sample_rate(t, -0.1), KVMESH_EINVAL);
    sampled = 0;
    for (int i = 0; i < 10000; i++) {
        struct obs_span s, c;
        obs_span_start(t, NULL, "store.get", &s);
        obs_span_start(t, &s, "control.route_lookup", &c);
        assert_int_equal(obs_span_sampled(&c), obs_span_sampled(&s)); /* inherited */
        assert_memory_equal(c.trace_id, s.trace_id, 16);
        assert_memory_equal(c.parent_id, s.span_id, 8);
        sampled += obs_span_sampled(&s);
        obs_span_end(&c);
        obs_span_end(&s);
    }
    assert_true(sampled > 4000 && sampled < 6000);
    /* remote: follows the context, not the local rate */
    assert_int_equal(obs_tracer_set_sample_rate(t, 1.0), 0);
    struct obs_trace_ctx ctx = {.trace_id = {1}, .span_id = {2}, .flags = 0};
    struct obs_span r;
    obs_span_start_remote(t, &ctx, "data.read", &r);
    assert_false(obs_span_sampled(&r));
    assert_memory_equal(r.parent_id, ctx.span_id, 8);
    obs_span_end(&r);
    struct obs_trace_ctx none;
    memset(&none, 0, sizeof(none));
    obs_span_start_remote(t, &none, "data.read", &r); /* no context: a new, sampled root */
    assert_true(obs_span_sampled(&r));
    assert_memory_not_equal(r.trace_id, none.trace_id, 16);
    obs_span_end(&r);
    obs_tracer_destroy(t);
    /* no tracer: spans are never sampled, even under a sampled remote context */
    struct obs_span n1, n2;
    obs_span_start(NULL, NULL, "store.put", &n1);
    assert_false(obs_span_sampled(&n1));
    ctx.flags = OBS_TRACE_FLAG_SAMPLED;
    obs_span_start_remote(NULL, &ctx, "data.write", &n2);
    assert_false(obs_span_sampled(&n2));
    obs_span_set_key(&n2, "k", 1);
    obs_span_end(&n2);
    obs_span_end(&n1);
}

static json_t *last_line(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192], last[8192] = "";
    while (fgets(line, sizeof(line), f))
        memcpy(last, line, sizeof(line));
    fclose(f);
    json_error_t e;
    json_t *j = json_loads(last, 0, &e);
    assert_non_null(j);
    return j;
}

static void test_debug_records_and_jsonl(void **state)
{
    (void)state;
    static char dir[256]; /* removed at exit also when an assertion fails */
    assert_int_equal(ttmp_make_auto(dir, sizeof(dir), "kvmesh-obs-unit"), 0);
    char path[300];
    snprintf(path, sizeof(path), "%s/t.jsonl", dir);
    const char *key = "secret-object-key";

    struct obs_tracer *t = mk(1.0, dir, false, false); /* records off */
    struct obs_span s;
    obs_span_start(t, NULL, "store.put", &s);
    obs_span_set_key(&s, key, strlen(key));
    obs_span_set_int(&s, "kvmesh.bytes", 42);
    obs_span_set_status(&s, KVMESH_EQUOTA);
    obs_span_end(&s);
    assert_int_equal(obs_tracer_flush(t, 5000), 0);
    json_t *j = last_line(path);
    assert_string_equal(json_string_value(json_object_get(j, "name")), "store.put");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "error");
    assert_string_equal(json_string_value(json_object_get(j, "error")), "KVMESH_EQUOTA");
    assert_string_equal(json_string_value(json_object_get(j, "parent_span_id")), "");
    json_t *attrs = json_object_get(j, "attrs");
    assert_int_equal(json_integer_value(json_object_get(attrs, "kvmesh.bytes")), 42);
    assert_null(json_object_get(attrs, "kvmesh.key_hash"));
    assert_null(json_object_get(attrs, "kvmesh.key"));
    json_decref(j);
    obs_tracer_destroy(t);

    t = mk(1.0, dir, true, false); /* records on: hashed */
    obs_span_start(t, NULL, "store.put", &s);
    obs_span_set_key(&s, key, strlen(key));
    obs_span_end(&s);
    assert_int_equal(obs_tracer_flush(t, 5000), 0);
    j = last_line(path);
    attrs = json_object_get(j, "attrs");
    char want[17];
    snprintf(want, sizeof(want), "%016llx",
             (unsigned long long)XXH3_64bits_withSeed(key, strlen(key), 7));
    assert_string_equal(json_string_value(json_object_get(attrs, "kvmesh.key_hash")), want);
    assert_null(json_object_get(attrs, "kvmesh.key"));
    json_decref(j);
    obs_tracer_destroy(t);

    t = mk(1.0, dir, true, true); /* explicitly plain */
    obs_span_start(t, NULL, "store.put", &s);
    obs_span_set_key(&s, key, strlen(key));
    obs_span_end(&s);
    assert_int_equal(obs_tracer_flush(t, 5000), 0);
    j = last_line(path);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "attrs"), "kvmesh.key")), key);
    json_decref(j);
    /* capture control */
    assert_int_equal(obs_tracer_capture_start(t, "../escape"), KVMESH_EINVAL);
    assert_int_equal(obs_tracer_capture_start(t, ".hidden"), KVMESH_EINVAL);
    assert_int_equal(obs_tracer_capture_start(t, "second.jsonl"), 0);
    obs_tracer_capture_stop(t);
    obs_tracer_destroy(t);

    t = mk(1.0, NULL, false, false);
    assert_int_equal(obs_tracer_capture_start(t, "x"), KVMESH_ENOTSUP);
    obs_tracer_destroy(t);
    assert_int_equal(ttmp_remove(dir), 0);
}

static void test_breakdown_exclusive(void **state)
{
    (void)state;
    struct obs_tracer *t = mk(1.0, NULL, false, false);
    struct obs_span root, ctl, data, meta;
    obs_span_start(t, NULL, "store.put", &root);
    usleep(2000);
    obs_span_start(t, &root, "control.route_cas", &ctl);
    usleep(2000);
    obs_span_start(t, &ctl, "metadata.cas", &meta);
    usleep(3000);
    obs_span_end(&meta);
    obs_span_end(&ctl);
    obs_span_start(t, &root, "data.write", &data);
    usleep(2000);
    obs_span_end(&data);
    obs_span_end(&root);
    int64_t sum = 0;
    for (int i = 0; i < OBS_STAGE__COUNT; i++) {
        assert_true(root.stage_ns[i] >= 1500000); /* each stage had >= 2ms of its own */
        sum += root.stage_ns[i];
    }
    assert_int_equal(sum, (int64_t)(root.end_unix_ns - root.start_unix_ns));
    assert_true(root.stage_ns[OBS_STAGE_METADATA] >= 2500000);
    struct obs_buf b;
    obs_buf_init(&b, 1 << 16);
    obs_tracer_breakdown_json(t, 5, &b);
    json_error_t e;
    json_t *j = json_loads(b.data, 0, &e);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "entries")), 1);
    json_decref(j);
    obs_buf_free(&b);
    /* the ring is bounded */
    for (int i = 0; i < 3 * OBS_BREAKDOWN_RING; i++) {
        obs_span_start(t, NULL, "store.get", &root);
        obs_span_end(&root);
    }
    obs_buf_init(&b, 1 << 20);
    obs_tracer_breakdown_json(t, 100000, &b);
    j = json_loads(b.data, 0, &e);
    assert_int_equal(json_array_size(json_object_get(j, "entries")), OBS_BREAKDOWN_RING);
    json_decref(j);
    obs_buf_free(&b);
    obs_tracer_destroy(t);
}

static void test_config_errors(void **state)
{
    (void)state;
    struct obs_tracer *t;
    struct obs_tracer_config c = {.service = "", .sample_rate = 0.1};
    assert_int_equal(obs_tracer_create(&c, &t), KVMESH_EINVAL);
    c.service = "x";
    c.sample_rate = 2;
    assert_int_equal(obs_tracer_create(&c, &t), KVMESH_EINVAL);
    c.sample_rate = 0;
    c.queue_cap = OBS_TRACE_QUEUE_MAX + 1;
    assert_int_equal(obs_tracer_create(&c, &t), KVMESH_EINVAL);
    c.queue_cap = 0;
    c.capture_dir = "/nonexistent-dir-kvmesh";
    c.capture_name = "x";
    assert_int_equal(obs_tracer_create(&c, &t), KVMESH_EIO);
}

/* OOM loop: every allocation of tracer creation fails once in turn; each failure is a clean
 * KVMESH_ENOMEM (ASan checks nothing leaks), and the loop ends in a working tracer. */
static void test_create_alloc_failures(void **state)
{
    (void)state;
    static char dir[256]; /* removed at exit also when an assertion fails */
    assert_int_equal(ttmp_make_auto(dir, sizeof(dir), "kvmesh-obs-oom"), 0);
    struct obs_tracer_config c = {.service = "oom",
                                  .sample_rate = 1.0,
                                  .capture_dir = dir,
                                  .capture_name = "x.jsonl",
                                  .otlp_url = "http://127.0.0.1:9/v1/traces"};
    int n;
    for (n = 0; n < 50; n++) {
        struct obs_tracer *t = NULL;
        obs_test_fail_alloc_after(n);
        int rc = obs_tracer_create(&c, &t);
        obs_test_fail_alloc_after(-1);
        if (rc == 0) {
            struct obs_span s;
            obs_span_start(t, NULL, "store.put", &s);
            obs_span_end(&s);
            obs_tracer_destroy(t);
            break;
        }
        assert_int_equal(rc, KVMESH_ENOMEM);
        assert_null(t);
    }
    assert_true(n >= 4 && n < 50); /* tracer, queue, batch, two strings */
    assert_int_equal(ttmp_remove(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctx_wire),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_debug_records_and_jsonl),
        cmocka_unit_test(test_breakdown_exclusive),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_create_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
