/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_handshake.c — compatibility descriptors (round trip, validation), the compatibility rule
 * for every protocol, handshake message codecs, and the HMAC proofs (role, nonce and descriptor
 * binding; wrong secrets).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvmesh.h"
#include "net/handshake.h"

static struct hs_descriptor desc(const char *dep, const char *rt)
{
    struct hs_descriptor d;
    memset(&d, 0, sizeof(d));
    snprintf(d.deployment_id, sizeof(d.deployment_id), "%s", dep);
    snprintf(d.runtime_id, sizeof(d.runtime_id), "%s", rt);
    d.runtime_epoch = 42;
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        d.proto[i].min = 1;
        d.proto[i].max = 3;
    }
    return d;
}

static void test_descriptor_roundtrip(void **state)
{
    (void)state;
    struct hs_descriptor d = desc("prod-eu", "rt-7"), e;
    d.proto[HS_PROTO_STAGING_ACK].max = 9;
    uint8_t *buf;
    size_t n;
    assert_int_equal(hs_descriptor_encode(&d, &buf, &n), 0);
    assert_int_equal(hs_descriptor_decode(buf, n, &e), 0);
    assert_memory_equal(&d, &e, sizeof(d));
    /* Every strict prefix is rejected (fields missing or cut). */
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(hs_descriptor_decode(buf, i, &e), 0);
    free(buf);
}

static void test_descriptor_validation(void **state)
{
    (void)state;
    struct hs_descriptor d = desc("dep", "rt");
    uint8_t *buf;
    size_t n;
    d.deployment_id[0] = 0;
    assert_int_equal(hs_descriptor_encode(&d, &buf, &n), KVMESH_EINVAL);
    d = desc("dep", "has space");
    assert_int_equal(hs_descriptor_validate(&d), KVMESH_EINVAL);
    d = desc("dep", "rt");
    d.proto[HS_PROTO_QUOTA].min = 0;
    assert_int_equal(hs_descriptor_validate(&d), KVMESH_EINVAL);
    d.proto[HS_PROTO_QUOTA].min = 4;
    assert_int_equal(hs_descriptor_validate(&d), KVMESH_EINVAL);
}

static void test_compat_rules(void **state)
{
    (void)state;
    struct hs_descriptor a = desc("dep", "a"), b = desc("dep", "b");
    struct hs_negotiated neg;
    char msg[256];
    b.proto[HS_PROTO_ROUTE].min = 2;
    b.proto[HS_PROTO_ROUTE].max = 8;
    assert_int_equal(hs_check_compat(&a, &b, "b", &neg, msg, sizeof(msg)), HS_OK);
    assert_int_equal(neg.version[HS_PROTO_ROUTE], 3);
    assert_int_equal(neg.version[HS_PROTO_QUOTA], 3);
    assert_int_equal(hs_check_compat(&a, &b, "c", NULL, msg, sizeof(msg)), HS_RUNTIME_MISMATCH);
    assert_non_null(strstr(msg, "'c'"));
    struct hs_descriptor self = desc("dep", "a");
    assert_int_equal(hs_check_compat(&a, &self, NULL, NULL, msg, sizeof(msg)), HS_SELF_CONNECT);
    struct hs_descriptor other = desc("dep2", "b");
    assert_int_equal(hs_check_compat(&a, &other, NULL, NULL, msg, sizeof(msg)),
                     HS_DEPLOYMENT_MISMATCH);
    for (int p = 0; p < HS_PROTO_COUNT; p++) {
        struct hs_descriptor c = desc("dep", "c");
        c.proto[p].min = 4;
        c.proto[p].max = 6;
        assert_int_equal(hs_check_compat(&a, &c, NULL, NULL, msg, sizeof(msg)),
                         HS_PROTOCOL_MISMATCH);
        assert_non_null(strstr(msg, hs_protocol_name(p)));
    }
    assert_string_equal(hs_reason_name(HS_AUTH_FAILED), "auth_failed");
}

static void test_messages(void **state)
{
    (void)state;
    struct hs_descriptor d = desc("dep", "a");
    uint8_t *draw, *buf, nonce[HS_NONCE_LEN], mac[HS_MAC_LEN];
    size_t dn, n;
    struct hs_hello h;
    assert_int_equal(hs_descriptor_encode(&d, &draw, &dn), 0);
    assert_int_equal(hs_nonce(nonce), 0);
    memset(mac, 0x77, sizeof(mac));
    assert_int_equal(hs_hello_encode(draw, dn, nonce, "srv", &buf, &n), 0);
    assert_int_equal(hs_hello_decode(buf, n, &h), 0);
    assert_string_equal(h.expect_runtime_id, "srv");
    assert_memory_equal(h.nonce, nonce, HS_NONCE_LEN);
    assert_int_equal(h.desc_raw_len, dn);
    assert_memory_equal(h.desc_raw, draw, dn);
    assert_string_equal(h.desc.runtime_id, "a");
    free(buf);
    assert_int_equal(hs_ack_encode(draw, dn, nonce, 1, mac, &buf, &n), 0);
    assert_int_equal(hs_ack_decode(buf, n, &h), 0);
    assert_true(h.auth_required && h.has_mac);
    assert_memory_equal(h.mac, mac, HS_MAC_LEN);
    free(buf);
    /* auth_required without a proof is malformed */
    assert_int_equal(hs_ack_encode(draw, dn, nonce, 1, NULL, &buf, &n), 0);
    assert_int_equal(hs_ack_decode(buf, n, &h), KVMESH_EPROTO);
    free(buf);
    int has = 0;
    uint8_t got[HS_MAC_LEN];
    assert_int_equal(hs_auth_encode(mac, &buf, &n), 0);
    assert_int_equal(hs_auth_decode(buf, n, got, &has), 0);
    assert_true(has);
    assert_memory_equal(got, mac, HS_MAC_LEN);
    free(buf);
    enum hs_reason r;
    char msg[64];
    assert_int_equal(hs_verdict_encode(HS_PROTOCOL_MISMATCH, "quota\x01 differs", &buf, &n), 0);
    assert_int_equal(hs_verdict_decode(buf, n, &r, msg, sizeof(msg)), 0);
    assert_int_equal(r, HS_PROTOCOL_MISMATCH);
    assert_string_equal(msg, "quota? differs");
    free(buf);
    /* Garbage never decodes into anything. */
    uint8_t junk[40];
    memset(junk, 0xff, sizeof(junk));
    assert_int_equal(hs_hello_decode(junk, sizeof(junk), &h), KVMESH_EPROTO);
    assert_int_equal(hs_ack_decode(junk, sizeof(junk), &h), KVMESH_EPROTO);
    assert_int_not_equal(hs_verdict_decode(junk, sizeof(junk), &r, msg, sizeof(msg)), 0);
    free(draw);
}

static void test_mac(void **state)
{
    (void)state;
    const uint8_t *s1 = (const uint8_t *)"0123456789abcdef-secret";
    const uint8_t *s2 = (const uint8_t *)"0123456789abcdef-secreT";
    uint8_t nc[HS_NONCE_LEN], ns[HS_NONCE_LEN], a[HS_MAC_LEN], b[HS_MAC_LEN];
    memset(nc, 1, sizeof(nc));
    memset(ns, 2, sizeof(ns));
    const uint8_t dc[] = "client-desc", ds[] = "server-desc";
    assert_int_equal(hs_mac(s1, 23, 'C', nc, ns, dc, 11, ds, 11, a), 0);
    assert_int_equal(hs_mac(s1, 23, 'C', nc, ns, dc, 11, ds, 11, b), 0);
    assert_true(hs_mac_equal(a, b));
    assert_int_equal(hs_mac(s2, 23, 'C', nc, ns, dc, 11, ds, 11, b), 0);
    assert_false(hs_mac_equal(a, b));
    assert_int_equal(hs_mac(s1, 23, 'S', nc, ns, dc, 11, ds, 11, b), 0);
    assert_false(hs_mac_equal(a, b));
    ns[5] ^= 1;
    assert_int_equal(hs_mac(s1, 23, 'C', nc, ns, dc, 11, ds, 11, b), 0);
    assert_false(hs_mac_equal(a, b));
    ns[5] ^= 1;
    /* Moving a byte between the two descriptors changes the proof (length-prefixed). */
    assert_int_equal(hs_mac(s1, 23, 'C', nc, ns, dc, 10, dc + 10, 1, b), 0);
    uint8_t c2[HS_MAC_LEN];
    assert_int_equal(hs_mac(s1, 23, 'C', nc, ns, dc, 11, NULL, 0, c2), 0);
    assert_false(hs_mac_equal(b, c2));
    assert_int_equal(hs_mac(s1, 4, 'C', nc, ns, dc, 11, ds, 11, b), KVMESH_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_roundtrip),
        cmocka_unit_test(test_descriptor_validation),
        cmocka_unit_test(test_compat_rules),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_mac),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
