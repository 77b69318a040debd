/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ident.c — scoped object identity: every validation rule with its code and message, the
 * canonical encoding (golden bytes, prefix-freeness, parse round trip), scope separation (same
 * key in two tenants / two domains gives distinct identities and independent shards), shard
 * uniformity, and pinned hash/shard values so a change of hash or encoding is caught.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/ident.h"
#include "core/util.h"

static void expect_err(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (!strstr(kvmesh_last_error(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", kvmesh_last_error(), needle);
}

static int mk(kvm_ident_t *id, const char *t, const char *d, const char *k)
{
    return kvm_ident_init(id, t, d, k, k ? strlen(k) : 0);
}

static void test_tenant_rules(void **state)
{
    (void)state;
    kvm_ident_t id;
    char big[KVM_TENANT_MAX_LEN + 2];
    expect_err(mk(&id, NULL, NULL, "k"), KVMESH_EBADTENANT, "tenant is missing");
    assert_null(id.enc);
    expect_err(mk(&id, "", NULL, "k"), KVMESH_EBADTENANT, "tenant is empty");
    memset(big, 'a', sizeof(big));
    big[KVM_TENANT_MAX_LEN + 1] = '\0';
    expect_err(mk(&id, big, NULL, "k"), KVMESH_EBADTENANT, "tenant is 65 bytes; the maximum is 64");
    big[KVM_TENANT_MAX_LEN] = '\0';
    assert_int_equal(mk(&id, big, NULL, "k"), 0); /* exactly the maximum */
    assert_int_equal(id.tenant_len, KVM_TENANT_MAX_LEN);
    kvm_ident_free(&id);
    expect_err(mk(&id, "-acme", NULL, "k"), KVMESH_EBADTENANT, "must start with a letter or digit");
    expect_err(mk(&id, ".acme", NULL, "k"), KVMESH_EBADTENANT, "must start with a letter or digit");
    expect_err(mk(&id, "ac me", NULL, "k"), KVMESH_EBADTENANT, "disallowed byte 0x20 at offset 2");
    expect_err(mk(&id, "acme/x", NULL, "k"), KVMESH_EBADTENANT, "disallowed byte 0x2f");
    expect_err(mk(&id, "acm\xc3\xa9", NULL, "k"), KVMESH_EBADTENANT, "disallowed byte 0xc3");
    expect_err(kvm_ident_init_n(&id, "a\0b", 3, NULL, 0, "k", 1), KVMESH_EBADTENANT,
               "disallowed byte 0x00");
    assert_int_equal(mk(&id, "Acme_1.prod-eu", NULL, "k"), 0);
    kvm_ident_free(&id);
}

static void test_domain_rules(void **state)
{
    (void)state;
    kvm_ident_t id;
    char big[KVM_DOMAIN_MAX_LEN + 2];
    expect_err(mk(&id, "t", "", "k"), KVMESH_EBADDOMAIN, "domain is empty");
    expect_err(mk(&id, "t", "", "k"), KVMESH_EBADDOMAIN, "pass no domain for none");
    memset(big, 'd', sizeof(big));
    big[KVM_DOMAIN_MAX_LEN + 1] = '\0';
    expect_err(mk(&id, "t", big, "k"), KVMESH_EBADDOMAIN, "domain is 65 bytes; the maximum is 64");
    big[KVM_DOMAIN_MAX_LEN] = '\0';
    assert_int_equal(mk(&id, "t", big, "k"), 0);
    assert_int_equal(id.domain_len, KVM_DOMAIN_MAX_LEN);
    kvm_ident_free(&id);
    expect_err(mk(&id, "t", "_x", "k"), KVMESH_EBADDOMAIN, "must start with a letter or digit");
    expect_err(mk(&id, "t", "a:b", "k"), KVMESH_EBADDOMAIN, "disallowed byte 0x3a at offset 1");
    /* tenant errors are reported before domain errors */
    expect_err(mk(&id, "", "", "k"), KVMESH_EBADTENANT, "tenant");
    assert_int_equal(mk(&id, "t", "model-7b.v2", "k"), 0);
    assert_true(kvm_ident_has_domain(&id));
    kvm_ident_free(&id);
}

static void test_key_rules(void **state)
{
    (void)state;
    kvm_ident_t id;
    static uint8_t big[KVM_KEY_MAX_LEN + 1];
    expect_err(kvm_ident_init(&id, "t", NULL, NULL, 0), KVMESH_EBADKEY, "key is empty");
    expect_err(kvm_ident_init(&id, "t", NULL, "", 0), KVMESH_EBADKEY, "key is empty");
    memset(big, 'k', sizeof(big));
    expect_err(kvm_ident_init(&id, "t", NULL, big, sizeof(big)), KVMESH_EBADKEY,
               "key is 1025 bytes; the maximum is 1024");
    assert_int_equal(kvm_ident_init(&id, "t", NULL, big, KVM_KEY_MAX_LEN), 0);
    assert_int_equal(id.key_len, KVM_KEY_MAX_LEN);
    kvm_ident_free(&id);
    expect_err(kvm_ident_init(&id, "t", NULL, "a\nb", 3), KVMESH_EBADKEY,
               "control byte 0x0a at offset 1");
    expect_err(kvm_ident_init(&id, "t", NULL, "a\0", 2), KVMESH_EBADKEY, "control byte 0x00");
    expect_err(kvm_ident_init(&id, "t", NULL, "ab\x7f", 3), KVMESH_EBADKEY,
               "control byte 0x7f at offset 2");
    /* printable ASCII, spaces, slashes and high bytes are fine */
    assert_int_equal(kvm_ident_init(&id, "t", NULL, "layer 3/blk:\xff\x80", 14), 0);
    kvm_ident_free(&id);
    /* the standalone checkers agree */
    expect_err(kvm_ident_check_key("x\x01", 2), KVMESH_EBADKEY, "0x01");
    expect_err(kvm_ident_check_tenant("a b", 3), KVMESH_EBADTENANT, "0x20");
    expect_err(kvm_ident_check_domain("", 0), KVMESH_EBADDOMAIN, "empty");
}

static void test_canonical_golden(void **state)
{
    (void)state;
    kvm_ident_t id;
    assert_int_equal(mk(&id, "acme", "llama", "k1"), 0);
    static const uint8_t want[] = {1,   4,   'a', 'c', 'm', 'e', 5,   'l',
                                   'l', 'a', 'm', 'a', 0,   2,   'k', '1'};
    assert_int_equal(id.enc_len, sizeof(want));
    assert_memory_equal(id.enc, want, sizeof(want));
    assert_memory_equal(kvm_ident_tenant(&id), "acme", 4);
    assert_memory_equal(kvm_ident_domain(&id), "llama", 5);
    assert_memory_equal(kvm_ident_key(&id), "k1", 2);
    kvm_ident_free(&id);
    assert_int_equal(mk(&id, "acme", NULL, "k1"), 0);
    static const uint8_t want2[] = {1, 4, 'a', 'c', 'm', 'e', 0, 0, 2, 'k', '1'};
    assert_int_equal(id.enc_len, sizeof(want2));
    assert_memory_equal(id.enc, want2, sizeof(want2));
    assert_null(kvm_ident_domain(&id));
    kvm_ident_free(&id);
}

/* Pinned values: a change of XXH3, seed or encoding breaks these (and persisted placement). */
static void test_hash_golden(void **state)
{
    (void)state;
    struct {
        const char *t, *d, *k;
        uint64_t hash;
        uint32_t shard1024;
    } g[] = {
        {"acme", NULL, "k1", UINT64_C(0xe4eb29005a2a86dc), 915},
        {"acme", "llama", "k1", UINT64_C(0x06a3f3c79bf2e5ae), 26},
        {"other", NULL, "k1", UINT64_C(0x489d5192aee72978), 290},
        {"t", NULL, "block/0000000000000042", UINT64_C(0x525d518d215f76d4), 329},
    };
    for (size_t i = 0; i < KVM_ARRAY_SIZE(g); i++) {
        kvm_ident_t id;
        assert_int_equal(mk(&id, g[i].t, g[i].d, g[i].k), 0);
        if (getenv("KVMESH_PRINT_GOLDEN")) /* regenerate the table (after a deliberate change) */
            printf("{\"%s\", %s%s%s, \"%s\", UINT64_C(0x%016llx), %u},\n", g[i].t,
                   g[i].d ? "\"" : "", g[i].d ? g[i].d : "NULL", g[i].d ? "\"" : "", g[i].k,
                   (unsigned long long)id.hash, kvm_ident_shard(&id, 1024));
        kvm_ident_free(&id);
    }
    for (size_t i = 0; i < KVM_ARRAY_SIZE(g); i++) {
        kvm_ident_t id;
        assert_int_equal(mk(&id, g[i].t, g[i].d, g[i].k), 0);
        assert_int_equal(id.hash, g[i].hash);
        assert_int_equal(kvm_ident_shard(&id, 1024), g[i].shard1024);
        kvm_ident_free(&id);
    }
}

static void test_scope_separation(void **state)
{
    (void)state;
    kvm_ident_t a, b, c, d, e;
    assert_int_equal(mk(&a, "t1", NULL, "key"), 0);
    assert_int_equal(mk(&b, "t2", NULL, "key"), 0);
    assert_int_equal(mk(&c, "t1", "d1", "key"), 0);
    assert_int_equal(mk(&d, "t1", "d2", "key"), 0);
    /* shifting bytes between scope parts must not collide */
    assert_int_equal(mk(&e, "t1d", "1", "key"), 0);
    kvm_ident_t *all[] = {&a, &b, &c, &d, &e};
    for (size_t i = 0; i < 5; i++)
        for (size_t j = 0; j < 5; j++) {
            assert_int_equal(kvm_ident_equal(all[i], all[j]), i == j);
            assert_int_equal(kvm_ident_cmp(all[i], all[j]) == 0, i == j);
            if (i != j)
                assert_int_not_equal(all[i]->hash, all[j]->hash);
        }
    for (size_t i = 0; i < 5; i++)
        kvm_ident_free(all[i]);
}

/* Same key under two scopes lands on independent shards: P(same shard) ~ 1/nshards. Shards are
 * uniform (chi-square). */
static void test_shard_independence(void **state)
{
    (void)state;
    const uint32_t nshards = 64;
    const int nkeys = 100000;
    int same_tenant = 0, same_domain = 0, same_nodomain = 0;
    static uint32_t hist[64];
    memset(hist, 0, sizeof(hist));
    for (int i = 0; i < nkeys; i++) {
        char key[32];
        int n = snprintf(key, sizeof(key), "blk-%d", i);
        kvm_ident_t a, b, c, d;
        assert_int_equal(kvm_ident_init(&a, "tenant-a", NULL, key, (size_t)n), 0);
        assert_int_equal(kvm_ident_init(&b, "tenant-b", NULL, key, (size_t)n), 0);
        assert_int_equal(kvm_ident_init(&c, "tenant-a", "dom1", key, (size_t)n), 0);
        assert_int_equal(kvm_ident_init(&d, "tenant-a", "dom2", key, (size_t)n), 0);
        uint32_t sa = kvm_ident_shard(&a, nshards), sb = kvm_ident_shard(&b, nshards);
        uint32_t sc = kvm_ident_shard(&c, nshards), sd = kvm_ident_shard(&d, nshards);
        same_tenant += sa == sb;
        same_domain += sc == sd;
        same_nodomain += sa == sc;
        hist[sa]++;
        kvm_ident_free(&a);
        kvm_ident_free(&b);
        kvm_ident_free(&c);
        kvm_ident_free(&d);
    }
    double expect = (double)nkeys / nshards; /* 1562.5 */
    int sames[] = {same_tenant, same_domain, same_nodomain};
    for (size_t i = 0; i < 3; i++) {
        double ratio = sames[i] / expect;
        print_message("same-shard fraction x nshards [%zu] = %.3f\n", i, ratio);
        assert_true(ratio > 0.85 && ratio < 1.15); /* sd of the count ~ 39 (2.5%) */
    }
    double chi2 = 0;
    for (uint32_t s = 0; s < nshards; s++)
        chi2 += (hist[s] - expect) * (hist[s] - expect) / expect;
    print_message("shard chi-square (63 dof) = %.1f\n", chi2);
    assert_true(chi2 < 120.0); /* mean 63, sd 11.2: > 5 sd above the mean fails */
}

static void test_shard_mapping(void **state)
{
    (void)state;
    assert_int_equal(kvm_shard_of_hash(0, 7), 0);
    assert_int_equal(kvm_shard_of_hash(UINT64_MAX, 7), 6);
    assert_int_equal(kvm_shard_of_hash(UINT64_MAX, 1), 0);
    assert_int_equal(kvm_shard_of_hash(UINT64_C(1) << 63, 2), 1);
    assert_int_equal(kvm_shard_of_hash(UINT64_MAX, KVM_MAX_LOGICAL_SHARDS),
                     KVM_MAX_LOGICAL_SHARDS - 1);
}

static void test_canonical_parse(void **state)
{
    (void)state;
    kvm_ident_t a, b;
    assert_int_equal(mk(&a, "acme", "dom", "the-key"), 0);
    assert_int_equal(kvm_ident_from_canonical(&b, a.enc, a.enc_len), 0);
    assert_true(kvm_ident_equal(&a, &b));
    kvm_ident_free(&b);
    /* every proper prefix and every extension is rejected */
    for (uint32_t n = 0; n < a.enc_len; n++) {
        int rc = kvm_ident_from_canonical(&b, a.enc, n);
        assert_int_not_equal(rc, 0);
        assert_null(b.enc);
    }
    uint8_t ext[64];
    memcpy(ext, a.enc, a.enc_len);
    ext[a.enc_len] = 'x';
    expect_err(kvm_ident_from_canonical(&b, ext, a.enc_len + 1), KVMESH_EPROTO, "does not match");
    ext[0] = 2;
    expect_err(kvm_ident_from_canonical(&b, ext, a.enc_len), KVMESH_EPROTO, "encoding version 2");
    /* a well-formed layout with an invalid part reports the part's own code */
    memcpy(ext, a.enc, a.enc_len);
    ext[2] = '-';
    expect_err(kvm_ident_from_canonical(&b, ext, a.enc_len), KVMESH_EBADTENANT, "start");
    kvm_ident_free(&a);
}

static void test_copy_fmt(void **state)
{
    (void)state;
    kvm_ident_t a, b, z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(kvm_ident_init(&a, "acme", "d", "k\\\xff", 3), 0);
    assert_int_equal(kvm_ident_copy(&b, &a), 0);
    assert_ptr_not_equal(a.enc, b.enc);
    assert_true(kvm_ident_equal(&a, &b));
    char buf[64];
    assert_string_equal(kvm_ident_fmt(&a, buf, sizeof(buf)), "acme/d:k\\x5c\\xff");
    assert_string_equal(kvm_ident_fmt(&a, buf, 5), "acme");
    assert_string_equal(kvm_ident_fmt(&z, buf, sizeof(buf)), "(none)");
    kvm_ident_free(&a);
    assert_true(kvm_ident_equal(&b, &b));
    kvm_ident_free(&b);
    kvm_ident_free(&b); /* free of a zeroed ident is a no-op */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenant_rules),       cmocka_unit_test(test_domain_rules),
        cmocka_unit_test(test_key_rules),          cmocka_unit_test(test_canonical_golden),
        cmocka_unit_test(test_hash_golden),        cmocka_unit_test(test_scope_separation),
        cmocka_unit_test(test_shard_independence), cmocka_unit_test(test_shard_mapping),
        cmocka_unit_test(test_canonical_parse),    cmocka_unit_test(test_copy_fmt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
