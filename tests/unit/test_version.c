/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_version.c — 128-bit ids (format/parse/order/hash), runtime incarnations (stale epochs),
 * route versions (total order, next() across token rollover and overflow) and operation ids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/util.h"
#include "core/version.h"

static void test_id128(void **state)
{
    (void)state;
    kvm_id128_t a = kvm_id128_from_u64(0x0123456789abcdefULL, 0xfedcba9876543210ULL), b;
    char hex[KVM_ID128_HEX_LEN + 1];
    assert_string_equal(kvm_id128_fmt(&a, hex), "0123456789abcdeffedcba9876543210");
    assert_int_equal(kvm_id128_parse(hex, &b), 0);
    assert_true(kvm_id128_equal(&a, &b));
    assert_int_equal(kvm_id128_parse("01234567-89AB-CDEF-FEDC-BA9876543210", &b), 0);
    assert_true(kvm_id128_equal(&a, &b));
    assert_int_equal(kvm_id128_parse("0123", &b), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "4 characters"));
    assert_int_equal(kvm_id128_parse("0123456789abcdeffedcba987654321g", &b), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "position 31"));
    assert_int_equal(kvm_id128_parse("01234567x89ab-cdef-fedc-ba9876543210", &b), KVMESH_EINVAL);
    assert_int_equal(kvm_id128_parse(NULL, &b), KVMESH_EINVAL);
    kvm_id128_t nil = {{0}};
    assert_true(kvm_id128_is_nil(&nil));
    assert_false(kvm_id128_is_nil(&a));
    kvm_id128_t lo = kvm_id128_from_u64(0, 1), hi = kvm_id128_from_u64(1, 0);
    assert_true(kvm_id128_cmp(&lo, &hi) < 0);
    assert_true(kvm_id128_cmp(&hi, &lo) > 0);
    assert_int_equal(kvm_id128_cmp(&a, &b), 0);
    assert_int_equal(kvm_id128_hash(&a), kvm_id128_hash(&b));
    assert_int_not_equal(kvm_id128_hash(&lo), kvm_id128_hash(&hi));
}

static void test_runtime(void **state)
{
    (void)state;
    kvm_runtime_t a = {kvm_id128_from_u64(1, 2), 3}, b = a, c = {kvm_id128_from_u64(1, 3), 9};
    assert_true(kvm_runtime_equal(&a, &b));
    b.epoch = 4;
    assert_false(kvm_runtime_equal(&a, &b));
    assert_true(kvm_runtime_is_stale(&a, &b));
    assert_false(kvm_runtime_is_stale(&b, &a));
    assert_false(kvm_runtime_is_stale(&a, &a));
    assert_false(kvm_runtime_is_stale(&a, &c)); /* another runtime is never "newer" */
}

static void test_route_version_order(void **state)
{
    (void)state;
    kvm_route_version_t v[] = {{0, 0},          {0, 5}, {1, 0},          {1, 1},
                               {1, UINT64_MAX}, {2, 1}, {UINT64_MAX, 0}, {UINT64_MAX, UINT64_MAX}};
    size_t n = KVM_ARRAY_SIZE(v);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            int c = kvm_route_version_cmp(&v[i], &v[j]);
            int want = i < j ? -1 : i > j ? 1 : 0;
            assert_int_equal(c, want);
            assert_int_equal(kvm_route_version_equal(&v[i], &v[j]), i == j);
        }
    assert_true(kvm_route_version_is_none(&v[0]));
    assert_false(kvm_route_version_is_none(&v[1]));
    /* random triples: antisymmetry and transitivity */
    srand(7);
    for (int it = 0; it < 20000; it++) {
        kvm_route_version_t a = {(uint64_t)(rand() % 4), (uint64_t)(rand() % 4)};
        kvm_route_version_t b = {(uint64_t)(rand() % 4), (uint64_t)(rand() % 4)};
        kvm_route_version_t c = {(uint64_t)(rand() % 4), (uint64_t)(rand() % 4)};
        assert_int_equal(kvm_route_version_cmp(&a, &b), -kvm_route_version_cmp(&b, &a));
        if (kvm_route_version_cmp(&a, &b) <= 0 && kvm_route_version_cmp(&b, &c) <= 0)
            assert_true(kvm_route_version_cmp(&a, &c) <= 0);
    }
}

static void test_route_version_next(void **state)
{
    (void)state;
    kvm_route_version_t v = KVM_ROUTE_VERSION_NONE, n;
    assert_int_equal(kvm_route_version_next(&v, 1, &n), 0);
    assert_true(n.fencing_token == 1 && n.primary_sequence == 1);
    v = n;
    assert_int_equal(kvm_route_version_next(&v, 1, &n), 0);
    assert_true(n.fencing_token == 1 && n.primary_sequence == 2);
    assert_true(kvm_route_version_cmp(&v, &n) < 0);
    v = n;
    assert_int_equal(kvm_route_version_next(&v, 5, &n), 0); /* rollover restarts the sequence */
    assert_true(n.fencing_token == 5 && n.primary_sequence == 1);
    assert_true(kvm_route_version_cmp(&v, &n) < 0);
    v = (kvm_route_version_t){5, UINT64_MAX};
    assert_int_equal(kvm_route_version_next(&v, 5, &n), KVMESH_ERANGE);
    assert_non_null(strstr(kvmesh_last_error(), "new fencing token"));
    assert_int_equal(kvm_route_version_next(&v, 6, &n), 0);
}

static void test_op_id(void **state)
{
    (void)state;
    kvm_op_id_t nil = {0}, a = {kvm_id128_from_u64(0, 1), 1, 1}, b = a;
    assert_true(kvm_op_id_is_nil(&nil));
    assert_false(kvm_op_id_is_valid(&nil));
    assert_true(kvm_op_id_is_valid(&a));
    assert_true(kvm_op_id_equal(&a, &b));
    assert_int_equal(kvm_op_id_hash(&a), kvm_op_id_hash(&b));
    b.seq = 2;
    assert_false(kvm_op_id_equal(&a, &b));
    assert_true(kvm_op_id_cmp(&a, &b) < 0);
    assert_int_not_equal(kvm_op_id_hash(&a), kvm_op_id_hash(&b));
    b = a;
    b.epoch = 2;
    assert_true(kvm_op_id_cmp(&a, &b) < 0);
    b = a;
    b.writer = kvm_id128_from_u64(0, 2);
    b.epoch = 0; /* writer dominates the order */
    assert_true(kvm_op_id_cmp(&a, &b) < 0);
    assert_false(kvm_op_id_is_valid(&b)); /* epoch 0 */
    kvm_op_id_t half = {kvm_id128_from_u64(0, 1), 0, 0};
    assert_false(kvm_op_id_is_nil(&half));
    assert_false(kvm_op_id_is_valid(&half));
    char buf[KVM_OP_ID_FMT_LEN];
    kvm_op_id_t big = {kvm_id128_from_u64(UINT64_MAX, UINT64_MAX), UINT64_MAX, UINT64_MAX};
    assert_string_equal(kvm_op_id_fmt(&big, buf),
                        "ffffffffffffffffffffffffffffffff:18446744073709551615:"
                        "18446744073709551615");
    assert_string_equal(kvm_op_id_fmt(&a, buf), "00000000000000000000000000000001:1:1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id128),
        cmocka_unit_test(test_runtime),
        cmocka_unit_test(test_route_version_order),
        cmocka_unit_test(test_route_version_next),
        cmocka_unit_test(test_op_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
