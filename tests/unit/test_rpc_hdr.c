/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rpc_hdr.c — the hand-written RpcHeader codec (net/rpc_hdr.h) against protobuf-c: known
 * encodings, protobuf-c's acceptance rules (last occurrence wins, unknown fields skipped, a known
 * field with another wire type refused, truncated values refused), and a differential run over
 * mutated encodings (tests/fuzz/rpc_hdr_diff.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../fuzz/rpc_hdr_diff.h"
#include "kvmesh.h"

static void test_encode_matches_protobuf_c(void **state)
{
    (void)state;
    static const int32_t statuses[] = {0, 1, -1, -1234, INT32_MAX, INT32_MIN};
    static const char *errors[] = {"", "x", "no handler for message type 7"};
    uint8_t body[300];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 7);
    static const size_t blens[] = {0, 1, 127, 128, 300};
    for (size_t s = 0; s < 6; s++)
        for (size_t e = 0; e < 3; e++)
            for (size_t b = 0; b < 5; b++) {
                Kvmesh__Rpc__RpcHeader h = KVMESH__RPC__RPC_HEADER__INIT;
                h.status = statuses[s];
                h.error = (char *)errors[e];
                h.body.data = blens[b] ? body : NULL;
                h.body.len = blens[b];
                uint8_t want[512], got[512];
                size_t n = kvmesh__rpc__rpc_header__pack(&h, want);
                assert_int_equal(rpc_hdr_size(h.status, strlen(h.error), blens[b]), n);
                assert_int_equal(
                    rpc_hdr_encode(got, h.status, h.error, strlen(h.error), h.body.data, blens[b]),
                    n);
                assert_memory_equal(got, want, n);
                assert_int_equal(rpc_hdr_diff(got, n), 1);
            }
}

static void test_decode_rules(void **state)
{
    (void)state;
    struct rpc_hdr h;
    /* empty: defaults */
    assert_int_equal(rpc_hdr_decode(NULL, 0, &h), 0);
    assert_int_equal(h.status, 0);
    assert_string_equal(h.error, "");
    assert_null(h.body);
    /* status -3 (zigzag 5), body "ab" twice: the last wins; unknown varint field 4 skipped */
    static const uint8_t a[] = {0x08, 0x05, 0x1a, 0x01, 'x', 0x20, 0x09, 0x1a, 0x02, 'a', 'b'};
    assert_int_equal(rpc_hdr_decode(a, sizeof(a), &h), 0);
    assert_int_equal(h.status, -3);
    assert_int_equal(h.body_len, 2);
    assert_memory_equal(h.body, "ab", 2);
    assert_int_equal(rpc_hdr_diff(a, sizeof(a)), 1);
    /* a known field with another wire type, truncated length, group wire type: refused */
    static const uint8_t b1[] = {0x0a, 0x01, 'x'}, b2[] = {0x1a, 0x05, 'a'}, b3[] = {0x1b};
    assert_int_equal(rpc_hdr_decode(b1, sizeof(b1), &h), KVMESH_EPROTO);
    assert_int_equal(rpc_hdr_decode(b2, sizeof(b2), &h), KVMESH_EPROTO);
    assert_int_equal(rpc_hdr_decode(b3, sizeof(b3), &h), KVMESH_EPROTO);
    assert_int_equal(rpc_hdr_diff(b1, sizeof(b1)), 0);
    assert_int_equal(rpc_hdr_diff(b2, sizeof(b2)), 0);
    assert_int_equal(rpc_hdr_diff(b3, sizeof(b3)), 0);
    /* an error text with a NUL: protobuf-c's C string ends there */
    static const uint8_t c[] = {0x12, 0x03, 'a', 0, 'b'};
    assert_int_equal(rpc_hdr_decode(c, sizeof(c), &h), 0);
    char *e = rpc_hdr_error_cstr(&h);
    assert_string_equal(e, "a");
    free(e);
    assert_int_equal(rpc_hdr_diff(c, sizeof(c)), 1);
}

/* Deterministic mutations (byte flips, truncations, insertions) of valid encodings. */
static void test_differential_mutations(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    unsigned accepted = 0, refused = 0;
    for (int round = 0; round < 20000; round++) {
        uint8_t buf[64];
        size_t n = rpc_hdr_encode(buf, (int32_t)(x >> 40) - (1 << 23), "err", (size_t)(x % 4),
                                  (const uint8_t *)"bodybody", (size_t)((x >> 8) % 9));
        for (int k = 0; k < 3; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t at = n ? (size_t)(x % n) : 0;
            switch ((x >> 20) % 4) {
            case 0:
                if (n)
                    buf[at] = (uint8_t)(x >> 32);
                break;
            case 1:
                n = at;
                break;
            case 2:
                if (n < sizeof(buf)) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = (uint8_t)(x >> 40);
                    n++;
                }
                break;
            default:
                if (n)
                    buf[at] ^= 0x80;
                break;
            }
        }
        if (rpc_hdr_diff(buf, n))
            accepted++;
        else
            refused++;
    }
    assert_true(accepted > 100); /* both outcomes were exercised */
    assert_true(refused > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_matches_protobuf_c),
        cmocka_unit_test(test_decode_rules),
        cmocka_unit_test(test_differential_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
