/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config_yaml.c — the configuration file loader: the accepted subset, an error naming the
 * line and the field for every kind of malformed file, no change to the config on failure, the
 * dump/load round trip, and the shipped example file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "api/config_table.h"
#include "api/yaml_config.h"
#include "core/util.h"

static int load(struct kvmesh_config *c, const char *text)
{
    return kvm_config_load_yaml(c, text, strlen(text), "t.yaml");
}

static void test_good_file(void **state)
{
    (void)state;
    struct kvmesh_config c;
    kvm_config_defaults(&c);
    const char *text = "\xEF\xBB\xBF# kvmeshd\n"
                       "---\n"
                       "\n"
                       "metadata_url: redis://127.0.0.1:6379/1   # the backend\n"
                       "deployment: 'prod-a'\n"
                       "memory_size: 1GiB\r\n"
                       "replicas: 2\n"
                       "secret: \"s3cr#t \\\"x\\\"\"\n"
                       "weight: 2.5\n"
                       "admin_listen:\n"
                       "transport: tcp # comment\n"
                       "hugepages: on\n"
                       "default_tenant: 'it''s'\n"
                       "...\n"
                       "# trailing comment\n";
    assert_int_equal(load(&c, text), KVMESH_ECONFIG); /* it's: the quote is not a tenant char */
    assert_string_equal(kvmesh_last_error(),
                        "t.yaml:13: default_tenant: \"it's\" is invalid; allowed 1..64 characters "
                        "of [A-Za-z0-9_.-], first alphanumeric, at most 64 bytes");
    kvm_config_defaults(&c);
    char *fixed = strdup(text);
    char *q = strstr(fixed, "'it''s'");
    memcpy(q, "'tn_1' ", 7);
    assert_int_equal(load(&c, fixed), 0);
    free(fixed);
    assert_string_equal(c.metadata_url, "redis://127.0.0.1:6379/1");
    assert_string_equal(c.deployment, "prod-a");
    assert_int_equal(c.memory_size, 1ull << 30);
    assert_int_equal(c.replicas, 2);
    assert_string_equal(c.secret, "s3cr#t \"x\"");
    assert_true(c.weight == 2.5);
    assert_string_equal(c.admin_listen, "");
    assert_int_equal(c.transport, KVM_TRANSPORT_TCP);
    assert_true(c.hugepages);
    assert_string_equal(c.default_tenant, "tn_1");
    /* Fields not in the file keep their values. */
    assert_int_equal(c.top_k, 3);
    /* Empty file. */
    assert_int_equal(kvm_config_load_yaml(&c, "", 0, "e"), 0);
}

static const struct {
    const char *text, *message;
} bad_files[] = {
    {"replicas: 2\nreplicas: 3\n",
     "t.yaml:2: field \"replicas\": duplicate field (first set on line 1)"},
    {"deployment: x\n\nreplicas: 0\n", "t.yaml:3: replicas: \"0\" is out of range; allowed 1..8"},
    {"replica: 2\n", "t.yaml:1: field \"replica\": unknown configuration field \"replica\" (did "
                     "you mean \"replicas\"?); see docs/configuration.md for the field list"},
    {"# c\n  replicas: 2\n", "t.yaml:2: indented line: the configuration is one flat mapping of "
                             "`field: value` lines starting at column 1"},
    {"replicas:\t2\n", "t.yaml:1: tab character; YAML indentation and separators use spaces"},
    {"replicas 2\n", "t.yaml:1: expected `field: value`"},
    {"replicas:2\n", "t.yaml:1: field \"replicas\": expected a space after ':'"},
    {"secret: \"abc\n", "t.yaml:1: field \"secret\": unterminated quoted value"},
    {"secret: \"a\\qb\"\n",
     "t.yaml:1: field \"secret\": unsupported escape in double-quoted value (allowed \\\" \\\\ \\n "
     "\\t)"},
    {"secret: 'a' b\n", "t.yaml:1: field \"secret\": unexpected text after quoted value"},
    {"listen: [a, b]\n", "t.yaml:1: field \"listen\": flow collections, anchors, aliases, tags "
                         "and block scalars are not supported; quote the value"},
    {"listen: - a\n",
     "t.yaml:1: field \"listen\": sequences are not supported; each field takes one scalar value"},
    {"- replicas\n", "t.yaml:1: sequences are not supported; expected `field: value`"},
    {"listen: a: b\n", "t.yaml:1: field \"listen\": a plain value may not contain \": \" (nested "
                       "mappings are not supported); quote the value"},
    {"replicas: 1\n---\n", "t.yaml:2: only one YAML document is allowed"},
    {"...\nreplicas: 1\n", "t.yaml:2: content after the document end marker \"...\""},
    {"--- x\n", "t.yaml:1: unexpected text after \"---\""},
    {"secret: a\x01\n", "t.yaml:1: control character in configuration file"},
    {"memory_size: |\n", "t.yaml:1: field \"memory_size\": flow collections, anchors, aliases, "
                         "tags and block scalars are not supported; quote the value"},
    {"transport: udp\n", "t.yaml:1: transport: \"udp\" is not allowed; allowed auto|tcp|shm"},
};

static void test_bad_files(void **state)
{
    (void)state;
    struct kvmesh_config c, before;
    kvm_config_defaults(&c);
    assert_int_equal(kvmesh_config_set(&c, "top_k", "5"), 0);
    before = c;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(bad_files); i++) {
        int rc = load(&c, bad_files[i].text);
        if (rc != KVMESH_ECONFIG || strcmp(kvmesh_last_error(), bad_files[i].message) != 0)
            fail_msg("case %zu: rc %d\n  got:  %s\n  want: %s", i, rc, kvmesh_last_error(),
                     bad_files[i].message);
        assert_memory_equal(&before, &c, sizeof(c));
    }
    /* NUL byte and an over-long line. */
    assert_int_equal(kvm_config_load_yaml(&c, "top_k: 4\n\0x\n", 12, "n"), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(), "n:2: NUL byte in configuration file");
    char *big = malloc(KVM_YAML_LINE_MAX + 20);
    memset(big, 'a', KVM_YAML_LINE_MAX + 19);
    big[KVM_YAML_LINE_MAX + 19] = '\0';
    memcpy(big, "\nsecret: ", 9);
    assert_int_equal(load(&c, big), KVMESH_ECONFIG);
    assert_string_equal(kvmesh_last_error(), "t.yaml:2: line too long");
    free(big);
}

static void test_every_field_bad_in_file(void **state)
{
    (void)state;
    /* A file setting each field to a value its type rejects names that line and field. */
    size_t n;
    const kvm_cfg_field_t *t = kvm_config_table(&n);
    for (size_t i = 0; i < n; i++) {
        struct kvmesh_config c;
        kvm_config_defaults(&c);
        const char *badv = "\"bad value\\n\"";
        char text[256], want[64];
        snprintf(text, sizeof(text), "# header\n%s: %s\n", t[i].name, badv);
        assert_int_equal(load(&c, text), KVMESH_ECONFIG);
        snprintf(want, sizeof(want), "t.yaml:2: %s: ", t[i].name);
        if (strncmp(kvmesh_last_error(), want, strlen(want)) != 0)
            fail_msg("field %s: got %s", t[i].name, kvmesh_last_error());
    }
}

static void test_dump_roundtrip(void **state)
{
    (void)state;
    struct kvmesh_config a, b;
    kvm_config_defaults(&a);
    assert_int_equal(kvmesh_config_set(&a, "secret", "q\"uo\\te # x"), 0);
    assert_int_equal(kvmesh_config_set(&a, "memory_size", "1536"), 0);
    assert_int_equal(kvmesh_config_set(&a, "weight", "0.3"), 0);
    assert_int_equal(kvmesh_config_set(&a, "route_mode", "metadata_only"), 0);
    char buf[16384];
    size_t len = kvm_config_dump_yaml(&a, buf, sizeof(buf));
    assert_true(len < sizeof(buf));
    kvm_config_defaults(&b);
    assert_int_equal(kvm_config_load_yaml(&b, buf, len, "dump"), 0);
    assert_memory_equal(&a, &b, sizeof(a));
    /* Truncation reports the full length. */
    char small[16];
    assert_int_equal(kvm_config_dump_yaml(&a, small, sizeof(small)), len);
}

static void test_example_file(void **state)
{
    (void)state;
    struct kvmesh_config c;
    kvm_config_defaults(&c);
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/kvmeshd.yaml", KVMESH_SOURCE_DIR);
    int rc = kvm_config_load_file(&c, path);
    if (rc != 0)
        fail_msg("%s", kvmesh_last_error());
    assert_int_equal(kvm_config_validate(&c), 0);
    assert_int_equal(kvm_config_load_file(&c, "/nonexistent/kvmeshd.yaml"), KVMESH_EIO);
    assert_non_null(strstr(kvmesh_last_error(), "/nonexistent/kvmeshd.yaml"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_every_field_bad_in_file),
        cmocka_unit_test(test_dump_roundtrip),
        cmocka_unit_test(test_example_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
