/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_keyspace.c — the metadata key layout: golden keys per family, parse(build(x)) == x for
 * random parts (any byte but NUL), no two tuples share a key, prefixes never cover another
 * family or another leading part, due-index keys sort in deadline order (also through a real
 * range() on the memory backend), and every malformed input is rejected with a message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"
#include "core/util.h"
#include "meta/keyspace.h"
#include "meta/meta.h"

static void test_golden(void **state)
{
    (void)state;
    char k[KS_KEY_CAP];
    assert_int_equal(ks_member_key(k, sizeof(k), "prod", "node-1"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/members/node-1");
    assert_int_equal(ks_cluster_policy_key(k, sizeof(k), "prod"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/cluster-policy");
    assert_int_equal(ks_shard_key(k, sizeof(k), "prod", 0x1234), 0);
    assert_string_equal(k, "kvmesh/v1/prod/shards/00001234");
    assert_int_equal(ks_tenant_policy_key(k, sizeof(k), "prod", "acme"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/tenant-policies/acme");
    assert_int_equal(ks_quota_key(k, sizeof(k), "prod", "acme"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/quotas/acme");
    assert_int_equal(ks_object_key(k, sizeof(k), "prod", "acme", NULL, "a/b c~%"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/objects/acme/~/a%2Fb%20c%7E%25");
    assert_int_equal(ks_object_key(k, sizeof(k), "prod", "acme", "chat", "x"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/objects/acme/chat/x");
    char op[KS_OPID_LEN + 1];
    ks_opid_format(op, 7, 255);
    assert_string_equal(op, "0000000000000007-00000000000000ff");
    uint64_t e, s;
    assert_int_equal(ks_opid_parse(op, &e, &s), 0);
    assert_int_equal(e, 7);
    assert_int_equal(s, 255);
    assert_int_equal(ks_acct_op_key(k, sizeof(k), "prod", "acme", op), 0);
    assert_string_equal(k, "kvmesh/v1/prod/acct-ops/acme/0000000000000007-00000000000000ff");
    assert_int_equal(ks_acct_due_key(k, sizeof(k), "prod", "acme", "pending", 1000, op), 0);
    assert_string_equal(
        k,
        "kvmesh/v1/prod/acct-due/acme/pending/00000000000003e8/0000000000000007-00000000000000ff");
    assert_int_equal(ks_acct_due_prefix(k, sizeof(k), "prod", "acme", "pending"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/acct-due/acme/pending/");
    assert_int_equal(ks_cold_device_key(k, sizeof(k), "prod", "ssd0"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/cold-devices/ssd0");
    assert_int_equal(ks_cold_op_key(k, sizeof(k), "prod", "c1"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/cold-ops/c1");
    assert_int_equal(ks_cold_due_key(k, sizeof(k), "prod", "reserved", 16, "c1"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/cold-due/reserved/0000000000000010/c1");
    assert_int_equal(ks_reclaim_key(k, sizeof(k), "prod", "r1"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/cold-reclaims/r1");
    assert_int_equal(ks_route_key(k, sizeof(k), "prod", "acme", "", "obj"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/routes/acme/~/obj");
    assert_int_equal(ks_deployment_prefix(k, sizeof(k), "prod"), 0);
    assert_string_equal(k, "kvmesh/v1/prod/");
    assert_int_equal(ks_prefix(k, sizeof(k), "prod", KS_OBJECT, (ks_part_t[]){{.s = "acme"}}, 1),
                     0);
    assert_string_equal(k, "kvmesh/v1/prod/objects/acme/");
    assert_int_equal(ks_prefix(k, sizeof(k), "prod", KS_MEMBER, NULL, 0), 0);
    assert_string_equal(k, "kvmesh/v1/prod/members/");
}

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random string over an alphabet rich in separators and escape characters. */
static void rand_str(char *out, size_t maxlen, bool may_be_empty)
{
    static const char alpha[] = "aZ09._-/%~ \x01\x7f\x80\xff";
    size_t n = rnd() % (maxlen + 1);
    if (n == 0 && !may_be_empty)
        n = 1;
    for (size_t i = 0; i < n; i++)
        out[i] = alpha[rnd() % (sizeof(alpha) - 1)];
    out[n] = '\0';
}

static void test_roundtrip_and_injective(void **state)
{
    (void)state;
    enum { N = 3000 };
    char(*keys)[KS_KEY_CAP] = calloc(N, KS_KEY_CAP);
    ks_parsed_t *p = malloc(sizeof(*p));
    for (int i = 0; i < N; i++) {
        enum ks_family f = (enum ks_family)(rnd() % KS_FAMILY_COUNT);
        char strs[KS_MAX_PARTS][24];
        ks_part_t parts[KS_MAX_PARTS] = {{0}};
        for (size_t j = 0; j < ks_family_parts(f); j++) {
            bool optional =
                ((f == KS_OBJECT || f == KS_ROUTE) && j == 1) || (f == KS_ROUTE_DUE && j == 2);
            rand_str(strs[j], 4, optional);
            parts[j].s = strs[j];
            parts[j].u = rnd() >> (rnd() % 64);
            if (f == KS_SHARD || f == KS_ROUTE_FLOOR)
                parts[j].u &= 0xffffffffu;
        }
        const char *dep = (rnd() & 1) ? "d1" : "d1.x";
        int rc = ks_key(keys[i], KS_KEY_CAP, dep, f, parts);
        assert_int_equal(rc, 0);
        assert_int_equal(ks_parse(keys[i], p), 0);
        assert_int_equal(p->family, f);
        assert_string_equal(p->deployment, dep);
        assert_int_equal(p->n_parts, ks_family_parts(f));
        for (size_t j = 0; j < p->n_parts; j++) {
            bool numeric = (f == KS_SHARD && j == 0) || (f == KS_ACCT_DUE && j == 2) ||
                           (f == KS_COLD_DUE && j == 1) || (f == KS_ROUTE_DUE && j == 0) ||
                           (f == KS_ROUTE_FLOOR && j == 0);
            if (numeric)
                assert_int_equal(p->parts[j].u, parts[j].u);
            else
                assert_string_equal(p->parts[j].s, parts[j].s);
        }
        /* rebuilding from the parsed parts gives the same bytes */
        ks_part_t again[KS_MAX_PARTS];
        for (size_t j = 0; j < p->n_parts; j++)
            again[j] = (ks_part_t){.s = p->parts[j].s, .u = p->parts[j].u};
        char k2[KS_KEY_CAP];
        assert_int_equal(ks_key(k2, sizeof(k2), p->deployment, f, again), 0);
        assert_string_equal(k2, keys[i]);
    }
    /* parse(build(x)) == x for every x above is what makes build injective */
    free(p);
    free(keys);
}

static void test_prefix_isolation(void **state)
{
    (void)state;
    /* tenants that are prefixes of each other or differ only by separators */
    const char *tenants[] = {"a", "ab", "a/b", "a%2Fb", "a~", "a.b", "a b"};
    char pfx[KS_KEY_CAP], k[KS_KEY_CAP];
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(
            ks_prefix(pfx, sizeof(pfx), "dep", KS_OBJECT, (ks_part_t[]){{.s = tenants[i]}}, 1), 0);
        for (size_t j = 0; j < 7; j++) {
            assert_int_equal(ks_object_key(k, sizeof(k), "dep", tenants[j], "d", "key"), 0);
            bool in = strncmp(k, pfx, strlen(pfx)) == 0;
            assert_int_equal(in, i == j);
            assert_int_equal(ks_route_key(k, sizeof(k), "dep", tenants[j], "d", "key"), 0);
            assert_int_equal(strncmp(k, pfx, strlen(pfx)) == 0, 0); /* another family */
        }
        /* domain "" and "~" are different */
        char k1[KS_KEY_CAP], k2[KS_KEY_CAP];
        assert_int_equal(ks_object_key(k1, sizeof(k1), "dep", tenants[i], "", "x"), 0);
        assert_int_equal(ks_object_key(k2, sizeof(k2), "dep", tenants[i], "~", "x"), 0);
        assert_string_not_equal(k1, k2);
    }
    /* a family prefix covers no key of any other family, nor another deployment */
    for (int f = 0; f < KS_FAMILY_COUNT; f++) {
        if (ks_family_parts((enum ks_family)f) == 0)
            continue;
        assert_int_equal(ks_prefix(pfx, sizeof(pfx), "dep", (enum ks_family)f, NULL, 0), 0);
        for (int g = 0; g < KS_FAMILY_COUNT; g++) {
            ks_part_t parts[KS_MAX_PARTS] = {
                {.s = "x", .u = 1}, {.s = "x", .u = 1}, {.s = "x", .u = 1}, {.s = "x", .u = 1}};
            assert_int_equal(ks_key(k, sizeof(k), "dep", (enum ks_family)g, parts), 0);
            assert_int_equal(strncmp(k, pfx, strlen(pfx)) == 0, f == g);
            assert_int_equal(ks_key(k, sizeof(k), "dep2", (enum ks_family)g, parts), 0);
            assert_int_equal(strncmp(k, pfx, strlen(pfx)), strncmp("kvmesh/v1/dep2", pfx, 14));
        }
    }
    assert_int_equal(ks_prefix(pfx, sizeof(pfx), "dep2", KS_MEMBER, NULL, 0), 0);
    assert_int_equal(ks_member_key(k, sizeof(k), "dep", "n"), 0);
    assert_int_not_equal(strncmp(k, pfx, strlen(pfx)), 0);
    assert_int_equal(ks_deployment_prefix(pfx, sizeof(pfx), "dep"), 0);
    assert_int_equal(ks_member_key(k, sizeof(k), "dep2", "n"), 0);
    assert_int_not_equal(strncmp(k, pfx, strlen(pfx)), 0);
}

static void test_due_order(void **state)
{
    (void)state;
    const uint64_t deadlines[] = {
        0, 9, 10, 15, 16, 255, 256, 1000, 65535, 65536, 1733140000000ull, UINT64_MAX};
    enum { N = sizeof(deadlines) / sizeof(deadlines[0]) };
    char keys[N][KS_KEY_CAP];
    char op[KS_OPID_LEN + 1];
    for (int i = 0; i < N; i++) {
        ks_opid_format(op, 1, (uint64_t)(N - i)); /* op ids in the opposite order */
        assert_int_equal(
            ks_acct_due_key(keys[i], KS_KEY_CAP, "dep", "t", "pending", deadlines[i], op), 0);
        if (i > 0)
            assert_true(strcmp(keys[i - 1], keys[i]) < 0);
    }
    /* through a real range() on the memory backend, inserted in reverse order */
    meta_sync_t *s = NULL;
    assert_int_equal(meta_sync_open(&s, "memory://", NULL), 0);
    for (int i = N - 1; i >= 0; i--) {
        meta_op_t o = {
            .type = META_OP_PUT, .key = keys[i], .value = (const uint8_t *)"", .value_len = 0};
        meta_result_t *r = NULL;
        assert_int_equal(meta_sync_txn(s, NULL, 0, &o, 1, NULL, 0, &r), 0);
        meta_result_free(r);
    }
    /* a neighbouring state and tenant must not show up */
    char other[KS_KEY_CAP];
    assert_int_equal(ks_acct_due_key(other, sizeof(other), "dep", "t", "publishing", 1, op), 0);
    meta_op_t o = {.type = META_OP_PUT, .key = other, .value = (const uint8_t *)"", .value_len = 0};
    meta_result_t *r = NULL;
    assert_int_equal(meta_sync_txn(s, NULL, 0, &o, 1, NULL, 0, &r), 0);
    meta_result_free(r);
    char pfx[KS_KEY_CAP];
    assert_int_equal(ks_acct_due_prefix(pfx, sizeof(pfx), "dep", "t", "pending"), 0);
    assert_int_equal(meta_sync_range(s, pfx, NULL, 100, &r), 0);
    assert_int_equal(r->n_kvs, N);
    ks_parsed_t *p = malloc(sizeof(*p));
    for (int i = 0; i < N; i++) {
        assert_int_equal(ks_parse(r->kvs[i].key, p), 0);
        assert_int_equal(p->family, KS_ACCT_DUE);
        assert_int_equal(p->parts[2].u, deadlines[i]);
    }
    free(p);
    meta_result_free(r);
    meta_sync_close(s);
}

static void test_rejects(void **state)
{
    (void)state;
    char k[KS_KEY_CAP];
    assert_int_equal(ks_member_key(k, sizeof(k), "", "n"), KVMESH_EINVAL);
    assert_int_equal(ks_member_key(k, sizeof(k), "a/b", "n"), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "deployment"));
    assert_int_equal(ks_member_key(k, sizeof(k), "..", "n"), KVMESH_EINVAL);
    assert_int_equal(ks_member_key(k, sizeof(k), NULL, "n"), KVMESH_EINVAL);
    char longdep[KS_DEPLOYMENT_MAX + 2];
    memset(longdep, 'd', sizeof(longdep) - 1);
    longdep[sizeof(longdep) - 1] = '\0';
    assert_int_equal(ks_member_key(k, sizeof(k), longdep, "n"), KVMESH_EINVAL);
    assert_int_equal(ks_member_key(k, sizeof(k), "d", ""), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "runtime id is empty"));
    assert_int_equal(ks_member_key(k, sizeof(k), "d", NULL), KVMESH_EINVAL);
    assert_int_equal(ks_key(k, sizeof(k), "d", KS_SHARD, (ks_part_t[]){{.u = 1ull << 32}}),
                     KVMESH_EINVAL);
    assert_int_equal(ks_prefix(k, sizeof(k), "d", KS_MEMBER, (ks_part_t[]){{.s = "x"}}, 1),
                     KVMESH_EINVAL);
    assert_int_equal(ks_key(k, sizeof(k), "d", (enum ks_family)99, NULL), KVMESH_EINVAL);
    /* too long once escaped: 400 '/' become 1200 bytes */
    char big[401];
    memset(big, '/', 400);
    big[400] = '\0';
    assert_int_equal(ks_object_key(k, sizeof(k), "d", "t", "", big), KVMESH_ETOOBIG);
    assert_string_equal(k, "");
    char small[20];
    assert_int_equal(ks_member_key(small, sizeof(small), "d", "node"), KVMESH_ETOOBIG);
    ks_parsed_t *p = malloc(sizeof(*p));
    const char *bad[] = {
        "",
        "kvmesh/v2/d/members/x",
        "kvmesh/v1/",
        "kvmesh/v1/d",
        "kvmesh/v1/d/",
        "kvmesh/v1//members/x",
        "kvmesh/v1/d/nofamily/x",
        "kvmesh/v1/d/members",
        "kvmesh/v1/d/members/",
        "kvmesh/v1/d/members/x/y",
        "kvmesh/v1/d/members/%41",     /* 'A' must not be escaped */
        "kvmesh/v1/d/members/%2f",     /* lower-case escape is not canonical */
        "kvmesh/v1/d/members/%2",      /* truncated escape */
        "kvmesh/v1/d/members/%00",     /* NUL */
        "kvmesh/v1/d/members/~",       /* '~' only for optional parts */
        "kvmesh/v1/d/members/a b",     /* raw space */
        "kvmesh/v1/d/shards/1234",     /* width */
        "kvmesh/v1/d/shards/0000ABCD", /* upper-case hex */
        "kvmesh/v1/d/objects/t/~",
        "kvmesh/v1/d/objects/t//k",
        "kvmesh/v1/d/cluster-policy/x",
        "kvmesh/v1/d%2F/members/x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kvm_err_clear();
        if (ks_parse(bad[i], p) != KVMESH_EINVAL)
            fail_msg("parse accepted '%s'", bad[i]);
        assert_true(strlen(kvmesh_last_error()) > 0);
    }
    assert_int_equal(ks_parse("kvmesh/v1/d/cluster-policy", p), 0);
    assert_int_equal(p->family, KS_CLUSTER_POLICY);
    assert_int_equal(ks_parse("kvmesh/v1/d/shards/0000abcd", p), 0);
    assert_int_equal(p->parts[0].u, 0xabcd);
    free(p);
    uint64_t e, s;
    assert_int_equal(ks_opid_parse("00-00", &e, &s), KVMESH_EINVAL);
    assert_int_equal(ks_opid_parse("0000000000000007_00000000000000ff", &e, &s), KVMESH_EINVAL);
    assert_int_equal(ks_opid_parse("000000000000000G-00000000000000ff", &e, &s), KVMESH_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),           cmocka_unit_test(test_roundtrip_and_injective),
        cmocka_unit_test(test_prefix_isolation), cmocka_unit_test(test_due_order),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
