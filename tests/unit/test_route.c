/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_route.c — the route record: every invariant of kvm_route_validate rejected with
 * KVMESH_ECORRUPT and a message (one mutation of a valid route per case), cold-only and
 * tombstone shapes accepted, replica list edits, the cold backing tagged union (pending ->
 * materialized preserving identities, fingerprint), tombstone and reclaim transitions, and
 * ownership (copy / equal / free).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "core/route.h"
#include "core/util.h"

static kvm_op_id_t op(uint64_t seq)
{
    return (kvm_op_id_t){kvm_id128_from_u64(0xabc, 1), 1, seq};
}

static kvm_hot_replica_t rep(uint64_t owner, uint64_t off)
{
    return (kvm_hot_replica_t){kvm_id128_from_u64(0, owner), 7, off, 4096, 0x1234};
}

/* A valid live route with 2 hot replicas and a pending offload. */
static void base(kvm_route_t *r)
{
    kvm_route_init(r);
    assert_int_equal(kvm_ident_init(&r->ident, "acme", "m1", "k", 1), 0);
    r->version = (kvm_route_version_t){3, 9};
    r->predecessor_version = (kvm_route_version_t){3, 8};
    r->content_op = op(10);
    r->predecessor_op = op(5);
    r->length = 4096;
    r->checksum = 0x1234;
    kvm_hot_replica_t a = rep(1, 0), b = rep(2, 8192);
    assert_int_equal(kvm_route_add_replica(r, &a), 0);
    assert_int_equal(kvm_route_add_replica(r, &b), 0);
    kvm_op_id_t cold = op(11);
    kvm_runtime_id_t owner = kvm_id128_from_u64(0, 9);
    kvm_tier_id_t tier = kvm_id128_from_u64(0x7, 0x7);
    kvm_cold_backing_pending(&r->cold, &cold, &r->content_op, &owner, &tier, 4096, 0x1234);
    assert_int_equal(kvm_route_validate(r), 0);
}

typedef void (*mutate_fn)(kvm_route_t *r);
#define MUT(name, ...)                                                                             \
    static void name(kvm_route_t *r)                                                               \
    {                                                                                              \
        __VA_ARGS__;                                                                               \
    }
MUT(m_no_ident, kvm_ident_free(&r->ident))
MUT(m_version_none, r->version = KVM_ROUTE_VERSION_NONE)
MUT(m_pred_not_older, r->predecessor_version = r->version)
MUT(m_pred_newer, r->predecessor_version = (kvm_route_version_t){4, 0})
MUT(m_content_nil, memset(&r->content_op, 0, sizeof(r->content_op)))
MUT(m_content_seq0, r->content_op.seq = 0)
MUT(m_pred_op_invalid, r->predecessor_op.epoch = 0)
MUT(m_pred_op_same, r->predecessor_op = r->content_op)
MUT(m_too_many, r->n_replicas = KVM_MAX_REPLICAS + 1)
MUT(m_rep_nil_owner, memset(&r->replicas[1].owner, 0, sizeof(kvm_id128_t)))
MUT(m_rep_length, r->replicas[0].length = 1)
MUT(m_rep_checksum, r->replicas[1].checksum = 1)
MUT(m_rep_overflow, r->replicas[1].offset = UINT64_MAX - 10)
MUT(m_rep_dup_slot, r->replicas[1] = r->replicas[0])
MUT(m_live_retain, r->retain_until_ms = 5)
MUT(m_live_empty, r->n_replicas = 0)
MUT(m_cold_kind, r->cold.kind = (kvm_cold_kind_t)9)
MUT(m_cold_op_invalid, r->cold.cold_op.seq = 0)
MUT(m_cold_op_is_content, r->cold.cold_op = r->content_op)
MUT(m_cold_other_content, r->cold.content_op = op(99))
MUT(m_cold_nil_tier, memset(&r->cold.tier, 0, sizeof(kvm_id128_t)))
MUT(m_cold_nil_owner, memset(&r->cold.owner, 0, sizeof(kvm_id128_t)))
MUT(m_cold_expect_len, r->cold.u.pending.expected_length = 1)
MUT(m_tomb_with_replicas, r->tomb = KVM_TOMB_PENDING)
MUT(m_tomb_kind, r->tomb = (kvm_tomb_state_t)7)

static void test_invariants(void **state)
{
    (void)state;
    struct {
        mutate_fn f;
        const char *msg;
    } cases[] = {
        {m_no_ident, "missing object identity"},
        {m_version_none, "version is none"},
        {m_pred_not_older, "not older"},
        {m_pred_newer, "not older"},
        {m_content_nil, "invalid content operation id"},
        {m_content_seq0, "invalid content operation id"},
        {m_pred_op_invalid, "invalid predecessor operation id"},
        {m_pred_op_same, "predecessor op id equals"},
        {m_too_many, "9 hot replicas"},
        {m_rep_nil_owner, "replica 1 has a nil owner"},
        {m_rep_length, "replica 0 length/checksum"},
        {m_rep_checksum, "replica 1 length/checksum"},
        {m_rep_overflow, "overflows"},
        {m_rep_dup_slot, "share a slot"},
        {m_live_retain, "retention deadline"},
        {m_live_empty, "without a hot replica or materialized"},
        {m_cold_kind, "unknown cold backing kind"},
        {m_cold_op_invalid, "invalid cold operation id"},
        {m_cold_op_is_content, "cold operation id equals"},
        {m_cold_other_content, "another content operation"},
        {m_cold_nil_tier, "owner or tier id is nil"},
        {m_cold_nil_owner, "owner or tier id is nil"},
        {m_cold_expect_len, "pending offload expects"},
        {m_tomb_with_replicas, "tombstone references"},
        {m_tomb_kind, "unknown tombstone state"},
    };
    for (size_t i = 0; i < KVM_ARRAY_SIZE(cases); i++) {
        kvm_route_t r;
        base(&r);
        cases[i].f(&r);
        assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT);
        if (!strstr(kvmesh_last_error(), cases[i].msg))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, kvmesh_last_error(), cases[i].msg);
        kvm_route_free(&r);
    }
}

static void test_cold_only_and_pending_rules(void **state)
{
    (void)state;
    kvm_route_t r;
    base(&r);
    /* pending offload with no hot replica: nothing to offload from */
    r.n_replicas = 0;
    assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT);
    assert_non_null(strstr(kvmesh_last_error(), "without a hot replica or materialized backing"));
    r.n_replicas = 2;
    /* materialize: identities preserved, payload must match the expectation */
    kvm_cold_backing_t before = r.cold;
    assert_int_equal(kvm_cold_backing_materialize(&r.cold, "loc", 3, 4096, 0x9999), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "does not match the pending offload"));
    assert_true(kvm_cold_backing_equal(&r.cold, &before));
    assert_int_equal(kvm_cold_backing_materialize(&r.cold, "loc", 0, 4096, 0x1234), KVMESH_EINVAL);
    static uint8_t longloc[KVM_COLD_LOCATOR_MAX_LEN + 1];
    assert_int_equal(kvm_cold_backing_materialize(&r.cold, longloc, sizeof(longloc), 4096, 0x1234),
                     KVMESH_EINVAL);
    assert_int_equal(kvm_cold_backing_materialize(&r.cold, "dir/ab/cd", 9, 4096, 0x1234), 0);
    assert_int_equal(r.cold.kind, KVM_COLD_MATERIALIZED);
    assert_true(kvm_op_id_equal(&r.cold.cold_op, &before.cold_op));
    assert_true(kvm_op_id_equal(&r.cold.content_op, &before.content_op));
    assert_true(kvm_id128_equal(&r.cold.tier, &before.tier));
    assert_int_equal(kvm_cold_backing_materialize(&r.cold, "x", 1, 4096, 0x1234), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "only pending_offload"));
    assert_int_equal(kvm_route_validate(&r), 0);
    /* last-hot eviction: removing every replica leaves a valid cold-only route */
    kvm_hot_replica_t a = rep(1, 0), b = rep(2, 8192), c = rep(3, 0);
    assert_int_equal(kvm_route_remove_replica(&r, &c), KVMESH_ENOENT);
    assert_int_equal(kvm_route_remove_replica(&r, &a), 0);
    assert_int_equal(r.n_replicas, 1);
    assert_true(kvm_hot_replica_equal(&r.replicas[0], &b));
    assert_int_equal(kvm_route_remove_replica(&r, &b), 0);
    assert_int_equal(r.n_replicas, 0);
    assert_int_equal(kvm_route_validate(&r), 0);
    /* materialized locator length checks */
    r.cold.u.mat.locator_len = 0;
    assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT);
    r.cold.u.mat.locator_len = KVM_COLD_LOCATOR_MAX_LEN + 1;
    assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT);
    r.cold.u.mat.locator_len = 9;
    r.cold.u.mat.checksum = 1;
    assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT);
    assert_non_null(strstr(kvmesh_last_error(), "materialized backing has another"));
    kvm_route_free(&r);
}

static void test_replica_edits(void **state)
{
    (void)state;
    kvm_route_t r;
    base(&r);
    kvm_hot_replica_t a = rep(1, 0);
    assert_int_equal(kvm_route_add_replica(&r, &a), KVMESH_EEXIST);
    for (uint64_t i = 3; r.n_replicas < KVM_MAX_REPLICAS; i++) {
        kvm_hot_replica_t x = rep(i, 0);
        assert_int_equal(kvm_route_add_replica(&r, &x), 0);
    }
    kvm_hot_replica_t extra = rep(100, 0);
    assert_int_equal(kvm_route_add_replica(&r, &extra), KVMESH_ENOSPC);
    assert_int_equal(kvm_route_validate(&r), 0);
    assert_int_equal(kvm_route_find_replica(&r, &a), 0);
    kvm_hot_replica_t other_off = rep(1, 4096); /* same owner, other slot */
    assert_int_equal(kvm_route_find_replica(&r, &other_off), -1);
    kvm_route_free(&r);
}

static void test_tombstone(void **state)
{
    (void)state;
    kvm_route_t r;
    base(&r);
    r.n_replicas = 0;
    memset(&r.replicas, 0, sizeof(r.replicas));
    memset(&r.cold, 0, sizeof(r.cold));
    r.tomb = KVM_TOMB_PENDING;
    assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT); /* length/checksum kept */
    assert_non_null(strstr(kvmesh_last_error(), "tombstone with a length"));
    r.length = r.checksum = 0;
    assert_int_equal(kvm_route_validate(&r), 0);
    r.retain_until_ms = 100; /* a pending tombstone's purge deadline */
    assert_int_equal(kvm_route_validate(&r), 0);
    r.tomb = KVM_TOMB_FINALIZED;
    assert_int_equal(kvm_route_validate(&r), 0);
    r.retain_until_ms = 0;
    assert_int_equal(kvm_route_validate(&r), KVMESH_ECORRUPT);
    assert_non_null(strstr(kvmesh_last_error(), "must have a retention deadline"));
    assert_true(kvm_route_is_tombstone(&r));
    kvm_route_free(&r);

    kvm_tomb_state_t N = KVM_TOMB_NONE, P = KVM_TOMB_PENDING, F = KVM_TOMB_FINALIZED;
    bool ok[3][3] = {{true, true, false}, {true, false, true}, {true, false, false}};
    kvm_tomb_state_t s[3] = {N, P, F};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            assert_int_equal(kvm_route_tomb_transition_ok(s[i], s[j]), ok[i][j]);
    assert_string_equal(kvm_tomb_state_name(P), "tomb_pending");
}

static void test_copy_equal(void **state)
{
    (void)state;
    kvm_route_t a, b;
    base(&a);
    kvm_route_init(&b);
    assert_int_equal(kvm_route_copy(&b, &a), 0);
    assert_ptr_not_equal(a.ident.enc, b.ident.enc);
    assert_true(kvm_route_equal(&a, &b));
    b.replicas[1].segment++;
    assert_false(kvm_route_equal(&a, &b));
    b.replicas[1].segment--;
    b.cold.u.pending.expected_checksum++;
    assert_false(kvm_route_equal(&a, &b));
    b.cold.u.pending.expected_checksum--;
    b.version.primary_sequence++;
    assert_false(kvm_route_equal(&a, &b));
    kvm_route_free(&a);
    assert_true(kvm_route_equal(&b, &b));
    kvm_route_free(&b);
    assert_null(b.ident.enc);
}

static void test_cold_backing_union(void **state)
{
    (void)state;
    kvm_cold_backing_t a, b;
    kvm_op_id_t c1 = op(1), c2 = op(2);
    kvm_id128_t o = kvm_id128_from_u64(0, 1), t = kvm_id128_from_u64(0, 2);
    kvm_cold_backing_pending(&a, &c1, &c2, &o, &t, 10, 20);
    b = a;
    assert_true(kvm_cold_backing_equal(&a, &b));
    assert_int_equal(kvm_cold_backing_materialize(&b, "L1", 2, 10, 20), 0);
    assert_false(kvm_cold_backing_equal(&a, &b)); /* kind differs */
    kvm_cold_backing_t c = a;
    assert_int_equal(kvm_cold_backing_materialize(&c, "L2", 2, 10, 20), 0);
    assert_false(kvm_cold_backing_equal(&b, &c)); /* locator differs */
    assert_int_not_equal(kvm_cold_backing_fingerprint(&b), kvm_cold_backing_fingerprint(&c));
    kvm_cold_backing_t d = a;
    assert_int_equal(kvm_cold_backing_materialize(&d, "L1", 2, 10, 20), 0);
    /* garbage in the inactive part of the union does not affect equality */
    d.u.mat.locator[100] = 0x55;
    assert_true(kvm_cold_backing_equal(&b, &d));
    assert_int_equal(kvm_cold_backing_fingerprint(&b), kvm_cold_backing_fingerprint(&d));
    kvm_cold_backing_t n1 = {0}, n2 = {0};
    n2.cold_op = c1; /* NONE compares equal regardless of stale fields */
    assert_true(kvm_cold_backing_equal(&n1, &n2));
    assert_string_equal(kvm_cold_kind_name(KVM_COLD_MATERIALIZED), "materialized");
}

static void test_reclaim(void **state)
{
    (void)state;
    kvm_cold_backing_t m;
    kvm_op_id_t c1 = op(1), c2 = op(2), r1 = op(3);
    kvm_id128_t o = kvm_id128_from_u64(0, 1), t = kvm_id128_from_u64(0, 2);
    kvm_cold_backing_pending(&m, &c1, &c2, &o, &t, 10, 20);
    assert_int_equal(kvm_cold_backing_materialize(&m, "obj/1", 5, 10, 20), 0);
    kvm_cold_reclaim_t rec;
    kvm_cold_reclaim_plan(&rec, &r1, &m);
    assert_int_equal(rec.state, KVM_RECLAIM_PLANNED);
    assert_true(kvm_op_id_equal(&rec.cold_op, &c1));
    assert_true(kvm_op_id_equal(&rec.content_op, &c2));
    assert_int_equal(rec.length, 10);
    assert_memory_equal(rec.locator, "obj/1", 5);
    assert_int_equal(kvm_cold_reclaim_validate(&rec), 0);
    kvm_cold_reclaim_t copy = rec;
    assert_true(kvm_cold_reclaim_equal(&rec, &copy));
    kvm_cold_reclaim_set_state(&rec, KVM_RECLAIM_BACKEND_DELETED);
    assert_false(kvm_cold_reclaim_equal(&rec, &copy));
    kvm_cold_reclaim_set_state(&rec, KVM_RECLAIM_USAGE_RELEASED);
    assert_int_equal(kvm_cold_reclaim_validate(&rec), 0);
    kvm_reclaim_state_t P = KVM_RECLAIM_PLANNED, B = KVM_RECLAIM_BACKEND_DELETED,
                        U = KVM_RECLAIM_USAGE_RELEASED;
    kvm_reclaim_state_t s[3] = {P, B, U};
    bool ok[3][3] = {{false, true, false}, {false, false, true}, {false, false, false}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            assert_int_equal(kvm_reclaim_transition_ok(s[i], s[j]), ok[i][j]);
    assert_string_equal(kvm_reclaim_state_name(B), "backend_deleted");
    /* validation failures */
    kvm_cold_reclaim_t bad = copy;
    bad.cold_op = bad.content_op;
    assert_int_equal(kvm_cold_reclaim_validate(&bad), KVMESH_ECORRUPT);
    assert_non_null(strstr(kvmesh_last_error(), "distinct"));
    bad = copy;
    bad.reclaim_op.seq = 0;
    assert_int_equal(kvm_cold_reclaim_validate(&bad), KVMESH_ECORRUPT);
    bad = copy;
    memset(&bad.tier, 0, sizeof(bad.tier));
    assert_int_equal(kvm_cold_reclaim_validate(&bad), KVMESH_ECORRUPT);
    bad = copy;
    bad.locator_len = 0;
    assert_int_equal(kvm_cold_reclaim_validate(&bad), KVMESH_ECORRUPT);
    bad = copy;
    bad.state = (kvm_reclaim_state_t)0;
    assert_int_equal(kvm_cold_reclaim_validate(&bad), KVMESH_ECORRUPT);
    assert_non_null(strstr(kvmesh_last_error(), "unknown state"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariants),    cmocka_unit_test(test_cold_only_and_pending_rules),
        cmocka_unit_test(test_replica_edits), cmocka_unit_test(test_tombstone),
        cmocka_unit_test(test_copy_equal),    cmocka_unit_test(test_cold_backing_union),
        cmocka_unit_test(test_reclaim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
