/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config.c — the configuration table: defaults, every field rejecting a bad value with a
 * message naming the field, the value and what is allowed, sizes with units, get/set round
 * trips, and the cross-field rules of kvm_config_validate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "api/config_table.h"
#include "core/util.h"
#include "route/route.h"

/* One bad value per field with the exact message it must produce. Every field of the table
 * must appear here (test_every_field_has_a_bad_value_case enforces it). */
static const struct {
    const char *field, *value, *message;
} bad_cases[] = {
    {"metadata_url", "mysql://x",
     "metadata_url: \"mysql://x\" is invalid; allowed memory://NAME, "
     "redis://[user:pass@]host:port[/db] "
     "or etcd://host:port[,...], at most 511 bytes"},
    {"deployment", "a b",
     "deployment: \"a b\" is invalid; allowed 1..63 characters of [A-Za-z0-9_.-], at most 63 "
     "bytes"},
    {"runtime_id", "xyz",
     "runtime_id: \"xyz\" is invalid; allowed empty or 32 hex digits, at most 32 bytes"},
    {"listen", "localhost",
     "listen: \"localhost\" is invalid; allowed host:port with port 0..65535, at most 127 bytes"},
    {"advertise", "h:70000",
     "advertise: \"h:70000\" is invalid; allowed empty or host:port with port 0..65535, at most "
     "127 bytes"},
    {"admin_listen", ":80",
     "admin_listen: \":80\" is invalid; allowed empty or host:port with port 0..65535, at most 127 "
     "bytes"},
    {"secret", "a\nb",
     "secret: \"a?b\" is invalid; allowed printable characters, at most 255 bytes"},
    {"default_tenant", "-x",
     "default_tenant: \"-x\" is invalid; allowed 1..64 characters of [A-Za-z0-9_.-], first "
     "alphanumeric, at most 64 bytes"},
    {"memory_size", "5TiB",
     "memory_size: \"5TiB\" is out of range; allowed 0..4TiB (a byte count with optional unit B, "
     "KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"segment_size", "12XB",
     "segment_size: \"12XB\" is not a size; allowed 1MiB..64GiB (a byte count with optional unit "
     "B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"max_object_size", "1KiB",
     "max_object_size: \"1KiB\" is out of range; allowed 4KiB..4294967295 (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    /* an object is at most 4 GiB - 1 byte (the allocator's 32-bit block length) */
    {"max_object_size", "4GiB",
     "max_object_size: \"4GiB\" is out of range; allowed 4KiB..4294967295 (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"replicas", "0", "replicas: \"0\" is out of range; allowed 1..8"},
    {"route_mode", "wrh", "route_mode: \"wrh\" is not allowed; allowed embedded_wrh|metadata_only"},
    {"top_k", "33", "top_k: \"33\" is out of range; allowed 1..32"},
    {"shards", "-1", "shards: \"-1\" is not an unsigned integer; allowed 1..1048576"},
    {"transport", "udp", "transport: \"udp\" is not allowed; allowed auto|tcp|shm"},
    {"verify_reads", "sometimes",
     "verify_reads: \"sometimes\" is not allowed; allowed always|remote|never"},
    {"inline_read_max", "5MiB",
     "inline_read_max: \"5MiB\" is out of range; allowed 0..4MiB (a byte count with optional "
     "unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"inline_write_max", "512KiB",
     "inline_write_max: \"512KiB\" is out of range; allowed 0..256KiB (a byte count with optional "
     "unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"rpc_local", "tcp", "rpc_local: \"tcp\" is not allowed; allowed off|unix"},
    {"weight", "0", "weight: \"0\" is out of range; allowed 0.001..1e+06"},
    {"lease_ttl_ms", "50", "lease_ttl_ms: \"50\" is out of range; allowed 100..600000"},
    {"request_timeout_ms", "5s",
     "request_timeout_ms: \"5s\" is not an unsigned integer; allowed 1..3600000"},
    {"idle_timeout_ms", "-1",
     "idle_timeout_ms: \"-1\" is not an unsigned integer; allowed 0..86400000"},
    {"drain_timeout_ms", "0", "drain_timeout_ms: \"0\" is out of range; allowed 1..86400000"},
    {"reclaim_grace_ms", "99999999999999999999999",
     "reclaim_grace_ms: \"99999999999999999999999\" is out of range; allowed 0..600000"},
    {"rereplicate_bytes_per_sec", "fast",
     "rereplicate_bytes_per_sec: \"fast\" is not a size; allowed 0..4TiB (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"rereplicate_max_copies", "1025",
     "rereplicate_max_copies: \"1025\" is out of range; allowed 0..1024"},
    {"tombstone_retention_ms", "999",
     "tombstone_retention_ms: \"999\" is out of range; allowed 1000..86400000"},
    {"evict_high_watermark", "1.5",
     "evict_high_watermark: \"1.5\" is out of range; allowed 0.01..1"},
    {"evict_low_watermark", "nan", "evict_low_watermark: \"nan\" is out of range; allowed 0..0.99"},
    {"io_threads", "", "io_threads: \"\" is not an unsigned integer; allowed 1..64"},
    {"hugepages", "maybe",
     "hugepages: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, 1|0)"},
    {"prefault_segments", "2",
     "prefault_segments: \"2\" is not a boolean; allowed true|false (also yes|no, on|off, 1|0)"},
    {"trace_sample_rate", "1.5", "trace_sample_rate: \"1.5\" is out of range; allowed 0..1"},
    {"trace_capture_dir", "a\tb",
     "trace_capture_dir: \"a?b\" is invalid; allowed printable characters, at most 511 "
     "bytes"},
    {"trace_otlp_url", "grpc://collector:4317",
     "trace_otlp_url: \"grpc://collector:4317\" is invalid; allowed empty or an http:// or "
     "https:// URL without spaces, at most 511 bytes"},
    {"trace_service_name", "",
     "trace_service_name: \"\" is invalid; allowed 1..63 characters of [A-Za-z0-9_.-], at "
     "most 63 bytes"},
    {"cold_kind", "nvme", "cold_kind: \"nvme\" is not allowed; allowed off|localdir|extent"},
    {"cold_root", "a\nb",
     "cold_root: \"a?b\" is invalid; allowed printable characters, at most 511 bytes"},
    {"cold_capacity", "0",
     "cold_capacity: \"0\" is out of range; allowed 1..4TiB (a byte count with optional unit "
     "B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"cold_offload", "maybe",
     "cold_offload: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, 1|0)"},
    {"cold_record_retention_ms", "86400001",
     "cold_record_retention_ms: \"86400001\" is out of range; allowed 0..86400000"},
    {"cold_write_through", "maybe",
     "cold_write_through: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, "
     "1|0)"},
    {"cold_queue", "5000", "cold_queue: \"5000\" is out of range; allowed 1..4096"},
    {"cold_offload_mode", "lazy",
     "cold_offload_mode: \"lazy\" is not allowed; allowed passthrough|evict"},
    {"cold_offload_order", "lifo",
     "cold_offload_order: \"lifo\" is not allowed; allowed fifo|size"},
    {"cold_offload_bytes_per_sec", "-1",
     "cold_offload_bytes_per_sec: \"-1\" is not a size; allowed 0..4TiB (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"cold_high_watermark", "1.5", "cold_high_watermark: \"1.5\" is out of range; allowed 0..1"},
    {"cold_low_watermark", "1.0", "cold_low_watermark: \"1.0\" is out of range; allowed 0..0.99"},
    {"cold_retry_backoff_ms", "0",
     "cold_retry_backoff_ms: \"0\" is out of range; allowed 1..60000"},
    {"cold_reconcile_after_ms", "5",
     "cold_reconcile_after_ms: \"5\" is out of range; allowed 100..3600000"},
    {"cold_retry_backoff_max_ms", "0",
     "cold_retry_backoff_max_ms: \"0\" is out of range; allowed 1..600000"},
    {"cold_nfs", "maybe",
     "cold_nfs: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, 1|0)"},
    {"cold_staging_slots", "0", "cold_staging_slots: \"0\" is out of range; allowed 1..4096"},
    {"cold_staging_bytes", "1KiB",
     "cold_staging_bytes: \"1KiB\" is out of range; allowed 64KiB..4TiB (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"cold_staging_ttl_ms", "5", "cold_staging_ttl_ms: \"5\" is out of range; allowed 10..600000"},
    {"cold_clean_bytes_per_tick", "-1",
     "cold_clean_bytes_per_tick: \"-1\" is not a size; allowed 0..4TiB (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"cold_segment_bytes", "1KiB",
     "cold_segment_bytes: \"1KiB\" is out of range; allowed 64KiB..4TiB (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"cold_devices", "localdir:/a:0",
     "cold_devices: \"localdir:/a:0\" device 1: capacity '0' is not a size 1..4TiB (e.g. 8GiB; "
     "empty = cold_capacity); allowed empty or up to 7 ';'-separated "
     "kind:root[:capacity[:tag,tag...]] (kind localdir or extent, root 1..255 bytes without ':' "
     "or ';', each root once, capacity a size 1..4TiB, tags of [A-Za-z0-9_.-] in 127 bytes), at "
     "most 511 bytes"},
    {"tenant_quota_evict", "maybe",
     "tenant_quota_evict: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, "
     "1|0)"},
    {"tenant_policies", "acme:0:3",
     "tenant_policies: \"acme:0:3\" policy 1 (acme): max_bytes '0' is not a size >= 1; allowed "
     "empty or up to 16 comma-separated tenant:max_bytes:max_objects[:policy_version] (tenant "
     "by the tenant id rule, max_bytes a size >= 1, max_objects and policy_version 1..2^32-1, "
     "each tenant once), at most 511 bytes"},
    {"fairness", "maybe",
     "fairness: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, 1|0)"},
    {"max_remote_batch_items_per_tenant", "0",
     "max_remote_batch_items_per_tenant: \"0\" is out of range; allowed 1..1024"},
    {"max_remote_batch_bytes", "1KiB",
     "max_remote_batch_bytes: \"1KiB\" is out of range; allowed 4KiB..4TiB (a byte count with "
     "optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"max_remote_batch_burst_items", "0",
     "max_remote_batch_burst_items: \"0\" is out of range; allowed 1..65536"},
    {"max_inflight_bytes_per_batch", "100",
     "max_inflight_bytes_per_batch: \"100\" is out of range; allowed 4KiB..4TiB (a byte count "
     "with optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB)"},
    {"fair_queue_depth", "4097", "fair_queue_depth: \"4097\" is out of range; allowed 1..4096"},
    {"tenant_weights", "acme:0",
     "tenant_weights: \"acme:0\" entry 1 (acme): weight '0' is not an integer 1..64; allowed "
     "empty or up to 16 comma-separated tenant:weight (tenant by the tenant id rule, weight "
     "1..64, each tenant once), at most 511 bytes"},
    {"tenant_placement", "acme:xyz",
     "tenant_placement: \"acme:xyz\" entry 1 (acme): owner 'xyz' is not a runtime id (32 hex "
     "digits); allowed empty or up to 16 comma-separated tenant:owner[+owner...][:soft|hard] "
     "(1..4 owners of 32 hex digits, each tenant once), at most 511 bytes"},
    {"place_on_primary", "maybe",
     "place_on_primary: \"maybe\" is not a boolean; allowed true|false (also yes|no, on|off, "
     "1|0)"},
};

static void test_defaults(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    assert_non_null(c);
    assert_string_equal(c->metadata_url, "memory://default");
    assert_string_equal(c->deployment, "default");
    assert_string_equal(c->listen, "127.0.0.1:0");
    assert_string_equal(c->runtime_id, "");
    assert_string_equal(c->admin_listen, "");
    assert_string_equal(c->default_tenant, "default");
    assert_int_equal(c->memory_size, 256ull << 20);
    assert_int_equal(c->segment_size, 64ull << 20);
    assert_int_equal(c->max_object_size, 64ull << 20);
    assert_int_equal(c->inline_read_max, 256u << 10);
    assert_int_equal(c->inline_write_max, 64u << 10);
    assert_int_equal(c->rpc_local, 1); /* unix */
    assert_int_equal(c->replicas, 1);
    assert_int_equal(c->route_mode, ROUTE_MODE_EMBEDDED_WRH);
    assert_int_equal(c->top_k, 3);
    assert_int_equal(c->shards, 64);
    assert_int_equal(c->transport, KVM_TRANSPORT_AUTO);
    assert_true(c->weight == 1.0);
    assert_int_equal(c->lease_ttl_ms, 2000);
    assert_int_equal(c->request_timeout_ms, 5000);
    assert_int_equal(c->drain_timeout_ms, 30000);
    assert_int_equal(c->idle_timeout_ms, 300000);
    assert_int_equal(c->reclaim_grace_ms, 2000);
    assert_int_equal(c->rereplicate_bytes_per_sec, 256ull << 20);
    assert_int_equal(c->rereplicate_max_copies, 16);
    assert_true(c->evict_high_watermark == 0.90);
    assert_true(c->evict_low_watermark == 0.80);
    assert_int_equal(c->io_threads, 2);
    assert_false(c->hugepages);
    assert_false(c->prefault_segments);
    assert_true(c->trace_sample_rate == 0.0);
    assert_string_equal(c->trace_capture_dir, "");
    assert_string_equal(c->trace_otlp_url, "");
    assert_string_equal(c->trace_service_name, "kvmesh");
    assert_int_equal(kvm_config_validate(c), 0);
    kvmesh_config_free(c);
}

static void test_every_field_rejects_a_bad_value(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    for (size_t i = 0; i < KVM_ARRAY_SIZE(bad_cases); i++) {
        struct kvmesh_config before = *c;
        int rc = kvmesh_config_set(c, bad_cases[i].field, bad_cases[i].value);
        if (rc != KVMESH_ECONFIG || strcmp(kvmesh_last_error(), bad_cases[i].message) != 0)
            fail_msg("field %s value \"%s\": rc %d message\n  got:  %s\n  want: %s",
                     bad_cases[i].field, bad_cases[i].value, rc, kvmesh_last_error(),
                     bad_cases[i].message);
        /* A rejected value leaves the config unchanged. */
        assert_memory_equal(&before, c, sizeof(before));
    }
    kvmesh_config_free(c);
}

static void test_every_field_has_a_bad_value_case(void **state)
{
    (void)state;
    size_t n;
    const kvm_cfg_field_t *t = kvm_config_table(&n);
    size_t np;
    const kvmesh_config_field_t *pub = kvmesh_config_fields(&np);
    assert_int_equal(n, np);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (size_t j = 0; j < KVM_ARRAY_SIZE(bad_cases); j++)
            found |= strcmp(bad_cases[j].field, t[i].name) == 0;
        if (!found)
            fail_msg("field %s has no bad-value case", t[i].name);
        assert_string_equal(pub[i].name, t[i].name);
        assert_string_equal(pub[i].default_value, t[i].default_value);
        assert_true(strlen(pub[i].help) > 10);
        assert_ptr_equal(kvm_config_lookup(t[i].name), &t[i]);
    }
}

static void test_roundtrip_every_field(void **state)
{
    (void)state;
    size_t n;
    const kvm_cfg_field_t *t = kvm_config_table(&n);
    kvmesh_config_t *c = kvmesh_config_new();
    kvmesh_config_t *d = kvmesh_config_new();
    char buf[KVM_CFG_STR_MAX + 8];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvmesh_config_get(c, t[i].name, buf, sizeof(buf)), 0);
        assert_int_equal(kvmesh_config_set(d, t[i].name, buf), 0);
    }
    assert_memory_equal(c, d, sizeof(*c));
    /* The default strings read back as written (sizes canonicalised). */
    assert_int_equal(kvmesh_config_get(c, "memory_size", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "256MiB");
    assert_int_equal(kvmesh_config_get(c, "weight", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "1");
    assert_int_equal(kvmesh_config_get(c, "transport", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "auto");
    assert_int_equal(kvmesh_config_set(c, "weight", "0.1"), 0);
    assert_int_equal(kvmesh_config_get(c, "weight", buf, sizeof(buf)), 0);
    assert_int_equal(kvmesh_config_set(d, "weight", buf), 0);
    assert_true(c->weight == d->weight);
    /* Buffer too small. */
    assert_int_equal(kvmesh_config_get(c, "metadata_url", buf, 4), KVMESH_ERANGE);
    kvmesh_config_free(c);
    kvmesh_config_free(d);
}

static void test_sizes_and_values(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"0", 0},           {"4096", 4096},        {"1KiB", 1024},   {"1K", 1024},
              {"1KB", 1000},      {"2 MiB", 2ull << 20}, {"3MB", 3000000}, {"1GiB", 1ull << 30},
              {"1G", 1ull << 30}, {"2TiB", 2ull << 40},  {"512B", 512}};
    for (size_t i = 0; i < KVM_ARRAY_SIZE(ok); i++) {
        uint64_t v = 0;
        assert_int_equal(kvm_config_parse_size("x", ok[i].s, &v), 0);
        assert_int_equal(v, ok[i].v);
    }
    uint64_t v;
    assert_int_equal(kvm_config_parse_size("x", "18446744073709551616", &v), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "overflows"));
    assert_int_equal(kvm_config_parse_size("x", "99999999TiB", &v), KVMESH_ECONFIG);
    assert_int_equal(kvm_config_parse_size("x", "1.5GiB", &v), KVMESH_ECONFIG);
    assert_int_equal(kvm_config_parse_size("x", "GiB", &v), KVMESH_ECONFIG);
    assert_int_equal(kvm_config_parse_size("x", "-1", &v), KVMESH_ECONFIG);
    assert_int_equal(kvm_config_parse_size("x", "1 gib", &v), KVMESH_ECONFIG);

    assert_int_equal(kvmesh_config_set(c, "memory_size", "1GiB"), 0);
    assert_int_equal(c->memory_size, 1ull << 30);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "0"), 0);
    assert_int_equal(c->memory_size, 0);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "redis://127.0.0.1:6379/2"), 0);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "etcd://h1:2379,h2:2379"), 0);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://"), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "runtime_id", "0123456789abcdef0123456789ABCDEF"), 0);
    assert_int_equal(kvmesh_config_set(c, "listen", "[::1]:7000"), 0);
    assert_int_equal(kvmesh_config_set(c, "advertise", ""), 0);
    assert_int_equal(kvmesh_config_set(c, "transport", "shm"), 0);
    assert_int_equal(c->transport, KVM_TRANSPORT_SHM);
    assert_int_equal(kvmesh_config_set(c, "rpc_local", "off"), 0);
    assert_int_equal(c->rpc_local, 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(c->route_mode, ROUTE_MODE_METADATA_ONLY);
    assert_int_equal(kvmesh_config_set(c, "hugepages", "yes"), 0);
    assert_true(c->hugepages);
    assert_int_equal(kvmesh_config_set(c, "replicas", "8"), 0);
    assert_int_equal(kvmesh_config_set(c, "replicas", "9"), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "replicas", "2x"), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "weight", "1e3"), 0);
    assert_int_equal(kvmesh_config_set(c, "weight", " 1"), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "weight", "inf"), KVMESH_ECONFIG);

    /* Too long string. */
    char longv[600];
    memset(longv, 'a', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    assert_int_equal(kvmesh_config_set(c, "secret", longv), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "secret: \"aaaa"));
    assert_non_null(strstr(kvmesh_last_error(), "is too long (599 bytes)"));

    /* Unknown field, NULL arguments. */
    assert_int_equal(kvmesh_config_set(c, "replica", "1"), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(),
                        "unknown configuration field \"replica\" (did you mean \"replicas\"?); "
                        "see docs/configuration.md for the field list");
    assert_int_equal(kvmesh_config_set(c, "zz", "1"), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "replicas", NULL), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(NULL, "replicas", "1"), KVMESH_EINVAL);
    char buf[8];
    assert_int_equal(kvmesh_config_get(c, "nope", buf, sizeof(buf)), KVMESH_ECONFIG);
    kvmesh_config_free(c);
    kvmesh_config_free(NULL);
}

static void test_validate_cross_fields(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    assert_int_equal(kvmesh_config_set(c, "evict_low_watermark", "0.95"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(),
                        "evict_low_watermark (0.95) must be below evict_high_watermark (0.9)");
    kvm_config_defaults(c);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", "128MiB"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "max_object_size (128MiB) must not exceed "
                                                "segment_size (64MiB)"));
    kvm_config_defaults(c);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "32MiB"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "memory_size (32MiB) is smaller than"));
    assert_int_equal(kvmesh_config_set(c, "memory_size", "0"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    /* memory_size is carved into at most STORE_MAX_SEGS (64) segments of segment_size: 64 of
     * the default 64MiB pass, one byte more would need a 65th (refused at open only after
     * mapping 64 segments) */
    assert_int_equal(kvmesh_config_set(c, "memory_size", "4GiB"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "4294967297"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(),
                        "memory_size (4294967297) needs more than 64 segments of segment_size "
                        "(64MiB); a runtime holds at most 64 segments: raise segment_size to at "
                        "least 65MiB or lower memory_size");
    assert_int_equal(kvmesh_config_set(c, "memory_size", "4TiB"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "raise segment_size to at least 64GiB"));
    assert_int_equal(kvmesh_config_set(c, "segment_size", "64GiB"), 0);
    assert_int_equal(kvm_config_validate(c), 0); /* the largest memory_size fits 64 segments */
    kvm_config_defaults(c);
    /* cold tier watermarks: low below high, high at most evict_high_watermark */
    kvm_config_defaults(c);
    assert_int_equal(kvmesh_config_set(c, "cold_high_watermark", "0.95"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "cold_high_watermark (0.95) needs"));
    assert_int_equal(kvmesh_config_set(c, "cold_high_watermark", "0.7"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_low_watermark", "0.7"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "cold_low_watermark", "0.5"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_retry_backoff_ms", "500"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_retry_backoff_max_ms", "100"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "cold_retry_backoff_ms (500) must not exceed"));
    /* A struct filled by hand is held to the table. */
    kvm_config_defaults(c);
    c->replicas = 0;
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(), "replicas: \"0\" is out of range; allowed 1..8");
    kvm_config_defaults(c);
    c->transport = (enum kvm_transport_choice)7;
    assert_int_equal(kvm_config_validate(c), KVMESH_EINTERNAL);
    kvm_config_defaults(c);
    strcpy(c->deployment, "bad name");
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_int_equal(kvm_config_validate(NULL), KVMESH_EINVAL);
    /* a cold tier needs its device directory */
    kvm_config_defaults(c);
    assert_int_equal(kvmesh_config_set(c, "cold_kind", "extent"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(),
                        "cold_kind is extent but cold_root is empty; set cold_root to the cold "
                        "device's directory or cold_kind to off");
    assert_int_equal(kvmesh_config_set(c, "cold_root", "/srv/cold0"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    struct kvm_store_config sc;
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.cold_kind, KVM_STORE_COLD_EXTENT);
    assert_string_equal(sc.cold_root, "/srv/cold0");
    assert_true(sc.cold_offload && sc.cold_queue == 1024 && sc.cold_capacity == (1ull << 30));
    assert_true(sc.cold_offload_mode == KVM_STORE_COLD_MODE_PASSTHROUGH &&
                sc.cold_offload_order == 0 && sc.cold_offload_bytes_per_sec == 0 &&
                sc.cold_high_watermark == 0.0 && sc.cold_retry_backoff_ms == 2 &&
                sc.cold_retry_backoff_max_ms == 10000);
    assert_false(sc.cold_write_through);
    /* cold_write_through: needs a device, offload on and passthrough mode */
    assert_int_equal(kvmesh_config_set(c, "cold_write_through", "true"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    kvm_config_to_store(c, &sc);
    assert_true(sc.cold_write_through);
    assert_int_equal(kvmesh_config_set(c, "cold_offload_mode", "evict"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "cold_write_through needs a cold device"));
    assert_int_equal(kvmesh_config_set(c, "cold_offload_mode", "passthrough"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_offload", "false"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "cold_offload", "true"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_kind", "off"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_int_equal(kvmesh_config_set(c, "cold_kind", "extent"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_write_through", "false"), 0);
    kvm_config_to_store(c, &sc);
    assert_true(sc.cold_clean_bytes_per_tick == (64ull << 20) &&
                sc.cold_segment_bytes == (256ull << 20));
    kvmesh_config_free(c);
}

/* tombstone_retention_ms above the longest a route CAS can be in flight: request_timeout_ms +
 * ROUTE_CAS_LATE_MS (550); at, just below and just above the floor, both values named */
static void test_tombstone_retention_floor(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    assert_int_equal(kvm_config_validate(c), 0); /* defaults: 60000 > 5000 + 550 */
    assert_int_equal(kvmesh_config_set(c, "tombstone_retention_ms", "5550"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(),
                        "tombstone_retention_ms (5550) must be above the longest a route CAS can "
                        "be in flight, request_timeout_ms (5000) + 550 ms (its last attempt): a "
                        "delayed CAS could meet a removed object's due tombstone and apply "
                        "again; raise tombstone_retention_ms above 5550 or lower "
                        "request_timeout_ms");
    assert_int_equal(kvmesh_config_set(c, "tombstone_retention_ms", "5551"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    /* the floor follows request_timeout_ms */
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", "5002"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "tombstone_retention_ms (5551) must be above"));
    assert_non_null(strstr(kvmesh_last_error(), "request_timeout_ms (5002) + 550 ms"));
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", "449"), 0);
    assert_int_equal(kvmesh_config_set(c, "tombstone_retention_ms", "1000"), 0);
    assert_int_equal(kvm_config_validate(c), 0); /* the table's minimum, above 449 + 550 */
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", "450"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    /* kvmesh_open refuses it with the same message, before connecting anywhere */
    kvmesh_t *kv = NULL;
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://floor"), 0);
    assert_int_equal(kvmesh_open(&kv, c), KVMESH_ECONFIG);
    assert_null(kv);
    assert_non_null(strstr(kvmesh_last_error(), "request_timeout_ms (450) + 550 ms"));
    kvmesh_config_free(c);
}

static void test_allowed_text(void **state)
{
    (void)state;
    char buf[256];
    kvm_config_allowed(kvm_config_lookup("transport"), buf, sizeof(buf));
    assert_string_equal(buf, "auto|tcp|shm");
    kvm_config_allowed(kvm_config_lookup("replicas"), buf, sizeof(buf));
    assert_string_equal(buf, "1..8");
    kvm_config_format_size(1536, buf, sizeof(buf));
    assert_string_equal(buf, "1536");
    kvm_config_format_size(3ull << 30, buf, sizeof(buf));
    assert_string_equal(buf, "3GiB");
    assert_string_equal(kvm_config_type_name(KVM_CFG_SIZE), "size");
}

/* docs/configuration.md carries the field table exactly as the table generates it
 * (`kvmesh config markdown`), so the documentation cannot drift from the code. */
static void test_docs_match_table(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", KVMESH_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char doc[1 << 18];
    size_t len = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[len] = '\0';
    assert_non_null(strstr(doc, KVM_CONFIG_MARKDOWN_HEADER));
    size_t n;
    const kvm_cfg_field_t *t = kvm_config_table(&n);
    char row[1100];
    for (size_t i = 0; i < n; i++) {
        kvm_config_markdown_row(&t[i], row, sizeof(row) - 1);
        strcat(row, "\n");
        if (!strstr(doc, row))
            fail_msg("docs/configuration.md lacks or has a stale row for %s; regenerate the "
                     "table with `kvmesh config markdown`; expected:\n%s",
                     t[i].name, row);
    }
}

/* tenant_policies: parsed into the store config; each bad part named */
/* soft isolation fields: parsed into the store config; each bad part named; burst >= items */
static void test_soft_isolation_fields(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    struct kvm_store_config sc;
    kvm_config_to_store(c, &sc);
    assert_true(sc.fairness);
    assert_int_equal(sc.fair_batch_items, 128);
    assert_int_equal(sc.fair_batch_bytes, 16ull << 20);
    assert_int_equal(sc.fair_burst_items, 256);
    assert_int_equal(sc.fair_inflight_bytes, 256ull << 20);
    assert_int_equal(sc.fair_queue_depth, 256);
    assert_int_equal(sc.n_tenant_weights, 0);
    assert_int_equal(sc.n_tenant_placement, 0);
    assert_int_equal(kvmesh_config_set(c, "fairness", "off"), 0);
    assert_int_equal(kvmesh_config_set(c, "tenant_weights", "acme:3,b.2:64"), 0);
    assert_int_equal(
        kvmesh_config_set(c, "tenant_placement",
                          "acme:0123456789abcdef0123456789abcdef+1123456789abcdef0123456789abcdef:"
                          "hard,b:2123456789abcdef0123456789abcdef"),
        0);
    kvm_config_to_store(c, &sc);
    assert_false(sc.fairness);
    assert_int_equal(sc.n_tenant_weights, 2);
    assert_string_equal(sc.tenant_weights[1].tenant, "b.2");
    assert_int_equal(sc.tenant_weights[1].weight, 64);
    assert_int_equal(sc.n_tenant_placement, 2);
    assert_int_equal(sc.tenant_placement[0].n_owners, 2);
    assert_true(sc.tenant_placement[0].hard);
    assert_string_equal(sc.tenant_placement[0].owners[1], "1123456789abcdef0123456789abcdef");
    assert_false(sc.tenant_placement[1].hard); /* soft by default */
    static const struct {
        const char *f, *v, *want;
    } bad[] = {
        {"tenant_weights", "acme", "entry 1 is not tenant:weight"},
        {"tenant_weights", "acme:3,acme:2", "listed twice"},
        {"tenant_weights", "acme:65", "weight '65'"},
        {"tenant_weights", "-x:1", "tenant id rule"},
        {"tenant_weights", "acme:1,", "ends with a comma"},
        {"tenant_placement", "acme:0123456789abcdef0123456789abcdef:firm", "mode 'firm'"},
        {"tenant_placement", "acme", "is not tenant:owner"},
        {"tenant_placement",
         "a:0123456789abcdef0123456789abcdef+0123456789abcdef0123456789abcdef+0123456789abcdef"
         "0123456789abcdef+0123456789abcdef0123456789abcdef+0123456789abcdef0123456789abcdef",
         "more than 4 preferred owners"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(kvmesh_config_set(c, bad[i].f, bad[i].v), KVMESH_ECONFIG);
        if (!strstr(kvmesh_last_error(), bad[i].want) || !strstr(kvmesh_last_error(), bad[i].f))
            fail_msg("%s=%s: %s", bad[i].f, bad[i].v, kvmesh_last_error());
    }
    /* cross-field: burst at (ok), just below (refused) the per-tenant item limit */
    assert_int_equal(kvmesh_config_set(c, "max_remote_batch_items_per_tenant", "32"), 0);
    assert_int_equal(kvmesh_config_set(c, "max_remote_batch_burst_items", "32"), 0);
    assert_int_equal(kvm_config_validate(c), 0);
    assert_int_equal(kvmesh_config_set(c, "max_remote_batch_burst_items", "31"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "max_remote_batch_burst_items (31)"));
    kvmesh_config_free(c);
}

/* cold_devices: devices 1.. parsed into the store config (capacity defaults to cold_capacity);
 * every bad field refused with the device index and the field named; cross-field rules. */
static void test_cold_devices(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    struct kvm_store_config sc;
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_cold_extra, 0);
    assert_int_equal(kvmesh_config_set(c, "cold_kind", "localdir"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_root", "/d0"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_capacity", "3GiB"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_devices",
                                       "extent:/d1:8GiB:ssd,fast;localdir:/d2;localdir:/d3::"
                                       "nvme"),
                     0);
    assert_int_equal(kvm_config_validate(c), 0);
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_cold_extra, 3);
    assert_int_equal(sc.cold_extra[0].kind, KVM_STORE_COLD_EXTENT);
    assert_string_equal(sc.cold_extra[0].root, "/d1");
    assert_int_equal(sc.cold_extra[0].capacity, 8ull << 30);
    assert_string_equal(sc.cold_extra[0].tags, "ssd,fast");
    assert_int_equal(sc.cold_extra[1].kind, KVM_STORE_COLD_LOCALDIR);
    assert_int_equal(sc.cold_extra[1].capacity, 3ull << 30); /* cold_capacity */
    assert_string_equal(sc.cold_extra[1].tags, "");
    assert_int_equal(sc.cold_extra[2].capacity, 3ull << 30);
    assert_string_equal(sc.cold_extra[2].tags, "nvme");
    static const struct {
        const char *v, *want;
    } bad[] = {
        {"nvme:/d1", "device 1: kind 'nvme' is not localdir or extent"},
        {"localdir:/d1;flash:/d2", "device 2: kind 'flash'"},
        {"localdir", "device 1: 'localdir' is not kind:root[:capacity[:tags]]"},
        {"localdir:/d1:1G:a:b", "device 1: 'localdir:/d1:1G:a:b' is not kind:root"},
        {"localdir:", "device 1: root must be 1..255 bytes"},
        {"localdir:/d1;localdir:/d1", "device 2: root '/d1' is device 1's root too"},
        {"localdir:/d1:1XB", "device 1: capacity '1XB'"},
        {"localdir:/d1:0", "device 1: capacity '0'"},
        {"localdir:/d1:5TiB", "device 1: capacity '5TiB'"},
        {"localdir:/d1:1G:a,,b", "device 1: tags have an empty tag"},
        {"localdir:/d1:1G:a b", "device 1: tags 'a b'"},
        {"localdir:/d1;", "ends with a ';'"},
        {";localdir:/d1", "device 1: empty entry"},
        {"localdir:/a;localdir:/b;localdir:/c;localdir:/d;localdir:/e;localdir:/f;localdir:/g;"
         "localdir:/h",
         "more than 7 devices"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(kvmesh_config_set(c, "cold_devices", bad[i].v), KVMESH_ECONFIG);
        if (!strstr(kvmesh_last_error(), bad[i].want) ||
            !strstr(kvmesh_last_error(), "cold_devices"))
            fail_msg("%s: %s", bad[i].v, kvmesh_last_error());
    }
    /* unchanged by the refusals */
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_cold_extra, 3);
    /* a list of 7 (8 devices with device 0) is accepted */
    assert_int_equal(kvmesh_config_set(c, "cold_devices",
                                       "localdir:/a;localdir:/b;localdir:/c;localdir:/d;"
                                       "localdir:/e;localdir:/f;localdir:/g"),
                     0);
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_cold_extra, 7);
    /* cross-field: a device's root is cold_root; devices 1.. without device 0 */
    assert_int_equal(kvmesh_config_set(c, "cold_devices", "localdir:/d0"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "cold_devices: device 1: root '/d0' is cold_root"));
    assert_int_equal(kvmesh_config_set(c, "cold_devices", "localdir:/d1"), 0);
    assert_int_equal(kvmesh_config_set(c, "cold_kind", "off"), 0);
    assert_int_equal(kvm_config_validate(c), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "cold_devices lists devices 1.. but cold_kind"));
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_cold_extra, 0);
    kvmesh_config_free(c);
}

static void test_tenant_policies(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    assert_int_equal(kvmesh_config_set(c, "tenant_policies", "acme:64MiB:1000,b.2:1:1:7"), 0);
    assert_int_equal(kvmesh_config_set(c, "tenant_quota_evict", "on"), 0);
    struct kvm_store_config sc;
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_tenant_policies, 2);
    assert_string_equal(sc.tenant_policies[0].tenant, "acme");
    assert_int_equal(sc.tenant_policies[0].max_bytes, 64ull << 20);
    assert_int_equal(sc.tenant_policies[0].max_objects, 1000);
    assert_int_equal(sc.tenant_policies[0].policy_version, 1);
    assert_string_equal(sc.tenant_policies[1].tenant, "b.2");
    assert_int_equal(sc.tenant_policies[1].policy_version, 7);
    assert_true(sc.tenant_quota_evict);
    static const struct {
        const char *v, *want;
    } bad[] = {
        {"acme", "policy 1 is not tenant:max_bytes:max_objects"},
        {"acme:1:1:1:1", "policy 1 is not tenant:max_bytes:max_objects"},
        {"acme:1:1,", "ends with a comma"},
        {",acme:1:1", "empty policy"},
        {"-x:1:1", "tenant id rule"},
        {"acme:1:1,acme:2:2", "listed twice"},
        {"acme:0:1", "max_bytes '0'"},
        {"acme:1XB:1", "max_bytes '1XB'"},
        {"acme:1:0", "max_objects '0'"},
        {"acme:1:4294967296", "max_objects '4294967296'"},
        {"acme:1:1:0", "policy_version '0'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(kvmesh_config_set(c, "tenant_policies", bad[i].v), KVMESH_ECONFIG);
        if (!strstr(kvmesh_last_error(), bad[i].want) ||
            !strstr(kvmesh_last_error(), "tenant_policies"))
            fail_msg("%s: %s", bad[i].v, kvmesh_last_error());
    }
    /* unchanged by the refusals */
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_tenant_policies, 2);
    assert_int_equal(kvmesh_config_set(c, "tenant_policies", ""), 0);
    kvm_config_to_store(c, &sc);
    assert_int_equal(sc.n_tenant_policies, 0);
    kvmesh_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_field_rejects_a_bad_value),
        cmocka_unit_test(test_every_field_has_a_bad_value_case),
        cmocka_unit_test(test_roundtrip_every_field),
        cmocka_unit_test(test_sizes_and_values),
        cmocka_unit_test(test_validate_cross_fields),
        cmocka_unit_test(test_tombstone_retention_floor),
        cmocka_unit_test(test_allowed_text),
        cmocka_unit_test(test_docs_match_table),
        cmocka_unit_test(test_tenant_policies),
        cmocka_unit_test(test_cold_devices),
        cmocka_unit_test(test_soft_isolation_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
