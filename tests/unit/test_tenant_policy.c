/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tenant_policy.c — the tenant layer's pure parts (src/tenant/record.c):
 *   - the state machine: tn_transition_ok holds exactly the edges of the diagram;
 *   - the policy fingerprint: deterministic (a fixed value for a fixed policy, so every host and
 *     build computes the same), changed by every hard field, unchanged by soft fields;
 *   - tn_policy_match names the first differing hard field; validation names the bad field;
 *   - codecs: round trips of every record; truncated, extended or corrupted input is refused
 *     with KVMESH_EPROTO, never a crash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "kvmesh.h"
#include "tenant/tenant.h"

static void test_transitions(void **state)
{
    (void)state;
    const enum tn_state all[] = {TN_ST_NONE, TN_ST_PENDING, TN_ST_PUBLISHING, TN_ST_FINALIZED,
                                 TN_ST_ABORTED};
    for (size_t i = 0; i < 5; i++)
        for (size_t j = 0; j < 5; j++) {
            enum tn_state a = all[i], b = all[j];
            bool want = (a == TN_ST_NONE && b == TN_ST_PENDING) ||
                        (a == TN_ST_PENDING && (b == TN_ST_ABORTED || b == TN_ST_PUBLISHING)) ||
                        (a == TN_ST_PUBLISHING && (b == TN_ST_PUBLISHING || b == TN_ST_FINALIZED ||
                                                   b == TN_ST_ABORTED /* guarded: recon only */));
            assert_int_equal(tn_transition_ok(a, b), want);
        }
    assert_true(tn_state_is_terminal(TN_ST_FINALIZED));
    assert_true(tn_state_is_terminal(TN_ST_ABORTED));
    assert_false(tn_state_is_terminal(TN_ST_PUBLISHING));
    assert_string_equal(tn_state_name(TN_ST_PUBLISHING), "publishing");
    assert_int_equal(tn_pos(-5), 0);
    assert_int_equal(tn_pos(7), 7);
}

static tn_policy_t base_policy(void)
{
    return (tn_policy_t){.policy_version = 3,
                         .max_bytes = 1 << 30,
                         .max_objects = 10000,
                         .max_remote_batch_items_per_tenant = 16,
                         .max_remote_batch_bytes = 1 << 20};
}

static void test_fingerprint(void **state)
{
    (void)state;
    tn_policy_t p = base_policy();
    uint64_t fp = tn_policy_fingerprint(&p);
    assert_int_equal(fp, 0x290d9b9dfc4c235aull);
    /* XXH3-64 (seed "tenantpo") of the canonical 32 bytes (1, 3, 2^30, 10000 as big-endian
     * u64): stable across hosts, builds and runs */
    assert_int_equal(fp, tn_policy_fingerprint(&(tn_policy_t){
                             .policy_version = 3, .max_bytes = 1 << 30, .max_objects = 10000}));
    tn_policy_t q = p;
    q.max_remote_batch_items_per_tenant = 1;
    q.max_remote_batch_bytes = 7;
    assert_int_equal(tn_policy_fingerprint(&q), fp); /* soft fields are runtime-local */
    q = p;
    q.policy_version++;
    assert_int_not_equal(tn_policy_fingerprint(&q), fp);
    q = p;
    q.max_bytes++;
    assert_int_not_equal(tn_policy_fingerprint(&q), fp);
    q = p;
    q.max_objects--;
    assert_int_not_equal(tn_policy_fingerprint(&q), fp);
    /* swapping two fields' values does not collide (positional encoding) */
    tn_policy_t a = {.policy_version = 1, .max_bytes = 5, .max_objects = 9};
    tn_policy_t b = {.policy_version = 1, .max_bytes = 9, .max_objects = 5};
    assert_int_not_equal(tn_policy_fingerprint(&a), tn_policy_fingerprint(&b));
    tn_policy_rec_t r;
    tn_policy_record(&p, &r);
    assert_int_equal(r.schema_version, TN_SCHEMA_VERSION);
    assert_int_equal(r.fingerprint, fp);
}

static void test_match_names_field(void **state)
{
    (void)state;
    tn_policy_t p = base_policy();
    tn_policy_rec_t stored;
    tn_policy_record(&p, &stored);
    assert_int_equal(tn_policy_match(&stored, &p, "acme"), 0);
    tn_policy_t q = p;
    q.policy_version = 4;
    assert_int_equal(tn_policy_match(&stored, &q, "acme"), KVMESH_EINCOMPAT);
    assert_non_null(strstr(kvmesh_last_error(), "policy_version"));
    assert_non_null(strstr(kvmesh_last_error(), "acme"));
    q = p;
    q.max_bytes = 5;
    assert_int_equal(tn_policy_match(&stored, &q, "acme"), KVMESH_EINCOMPAT);
    assert_non_null(strstr(kvmesh_last_error(), "max_bytes"));
    assert_non_null(strstr(kvmesh_last_error(), "stored 1073741824, configured 5"));
    q = p;
    q.max_objects = 5;
    assert_int_equal(tn_policy_match(&stored, &q, "acme"), KVMESH_EINCOMPAT);
    assert_non_null(strstr(kvmesh_last_error(), "max_objects"));
    tn_policy_rec_t s2 = stored;
    s2.schema_version = 2;
    assert_int_equal(tn_policy_match(&s2, &p, "acme"), KVMESH_EINCOMPAT);
    assert_non_null(strstr(kvmesh_last_error(), "schema_version"));
    s2 = stored;
    s2.fingerprint ^= 1;
    assert_int_equal(tn_policy_match(&s2, &p, "acme"), KVMESH_EINCOMPAT);
    assert_non_null(strstr(kvmesh_last_error(), "fingerprint"));
    /* soft fields never refuse */
    q = p;
    q.max_remote_batch_bytes = 1;
    assert_int_equal(tn_policy_match(&stored, &q, "acme"), 0);
    /* validation */
    q = p;
    q.max_bytes = 0;
    assert_int_equal(tn_policy_validate(&q), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "max_bytes"));
    q = p;
    q.max_objects = 0;
    assert_int_equal(tn_policy_validate(&q), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "max_objects"));
    q = p;
    q.policy_version = 0;
    assert_int_equal(tn_policy_validate(&q), KVMESH_ECONFIG);
    assert_non_null(strstr(kvmesh_last_error(), "policy_version"));
}

static void sample_op(tn_op_t *op)
{
    memset(op, 0, sizeof(*op));
    ks_opid_format(op->id, 7, 42);
    op->state = TN_ST_PUBLISHING;
    op->kind = TN_KIND_OVERWRITE;
    snprintf(op->tenant, sizeof(op->tenant), "acme");
    snprintf(op->domain, sizeof(op->domain), "d1");
    snprintf(op->key, sizeof(op->key), "block/with spaces\x80");
    op->expected_route = (kvm_route_version_t){3, 9};
    op->expected_acct = 4;
    op->next_len = 100;
    op->delta_bytes = -20;
    op->deadline_ms = 1234567;
    op->writer_epoch = 7;
    op->generation = 3;
    op->fencing_token = 3;
    op->next_version = (kvm_route_version_t){3, 10};
    op->publish_token = 99;
    op->payload_len = 5;
    memcpy(op->payload, "hello", 5);
    op->payload_fp = kvm_checksum("hello", 5);
}

static void test_codecs(void **state)
{
    (void)state;
    uint8_t buf[TN_OP_ENC_MAX];
    size_t len;
    tn_op_t op, back;
    sample_op(&op);
    assert_int_equal(tn_op_encode(&op, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_op_decode(buf, len, &back), 0);
    assert_memory_equal(&op, &back, sizeof(op));
    /* every truncation and one extra byte are refused */
    for (size_t n = 0; n < len; n++)
        assert_int_equal(tn_op_decode(buf, n, &back), KVMESH_EPROTO);
    buf[len] = 0;
    assert_int_equal(tn_op_decode(buf, len + 1, &back), KVMESH_EPROTO);
    /* a corrupted payload no longer matches its fingerprint */
    buf[len - 1] ^= 1;
    assert_int_equal(tn_op_decode(buf, len, &back), KVMESH_EPROTO);
    /* an invalid record is never encoded */
    op.kind = TN_KIND_DELETE; /* delete with a positive length */
    assert_int_equal(tn_op_encode(&op, buf, sizeof(buf), &len), KVMESH_EINVAL);

    tn_usage_t u = {.committed_bytes = 10,
                    .committed_objects = 1,
                    .pending_bytes = 5,
                    .pending_objects = 1,
                    .n_pending = 1,
                    .policy_version = 2},
               ub;
    assert_int_equal(tn_usage_encode(&u, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_usage_decode(buf, len, &ub), 0);
    assert_memory_equal(&u, &ub, sizeof(u));
    u.n_pending = 0; /* pending bytes without an operation */
    assert_int_equal(tn_usage_encode(&u, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_usage_decode(buf, len, &ub), KVMESH_EPROTO);

    tn_objrow_t r = {.acct_version = 3, .live = true, .len = 77, .route_version = {2, 5}}, rb;
    ks_opid_format(r.last_op, 1, 2);
    ks_opid_format(r.lock_op, 1, 3);
    assert_int_equal(tn_objrow_encode(&r, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_objrow_decode(buf, len, &rb), 0);
    assert_memory_equal(&r, &rb, sizeof(r));
    for (size_t n = 0; n < len - 8; n++)
        assert_int_equal(tn_objrow_decode(buf, n, &rb), KVMESH_EPROTO);
    for (size_t n = len - 7; n < len; n++)
        assert_int_equal(tn_objrow_decode(buf, n, &rb), KVMESH_EPROTO);
    /* a deleted row records its tombstone's purge deadline; the old layout (without it) decodes
     * as 0 = no deadline */
    r = (tn_objrow_t){.acct_version = 4, .route_version = {2, 6}, .tomb_until_ms = 12345};
    ks_opid_format(r.last_op, 1, 4);
    assert_int_equal(tn_objrow_encode(&r, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_objrow_decode(buf, len, &rb), 0);
    assert_memory_equal(&r, &rb, sizeof(r));
    assert_int_equal(tn_objrow_decode(buf, len - 8, &rb), 0);
    assert_int_equal(rb.tomb_until_ms, 0);
    r.live = true; /* a live row has no tombstone deadline */
    r.len = 1;
    assert_int_equal(tn_objrow_encode(&r, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_objrow_decode(buf, len, &rb), KVMESH_EPROTO);

    tn_policy_rec_t p, pb;
    tn_policy_t pol = base_policy();
    tn_policy_record(&pol, &p);
    assert_int_equal(tn_policy_encode(&p, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_policy_decode(buf, len, &pb), 0);
    assert_memory_equal(&p, &pb, sizeof(p));
    /* a stored fingerprint that does not match its fields is refused */
    pb = p;
    pb.fingerprint ^= 1;
    assert_int_equal(tn_policy_encode(&pb, buf, sizeof(buf), &len), 0);
    assert_int_equal(tn_policy_decode(buf, len, &pb), KVMESH_EPROTO);
    assert_int_equal(tn_policy_encode(&p, buf, sizeof(buf), &len), 0);
    /* a record of another schema is refused */
    assert_int_equal(tn_usage_decode(buf, len, &ub), KVMESH_EPROTO);
    assert_int_equal(tn_policy_encode(&p, buf, 3, &len), KVMESH_ETOOBIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transitions),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_match_names_field),
        cmocka_unit_test(test_codecs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
