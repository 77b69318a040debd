/* SPDX-License-Identifier: Apache-2.0 */
/* A put claim's payload with the replicas' locators (src/store/put_payload.c) and the owner's
 * decision for a held reservation from its quota operation (kvm_held_decide, src/store/held_op.c;
 * docs/tenancy.md "Replaying a put", steps 1 and 2): the version 2 payload round-trips and
 * names exactly its slots, version 1 (16 bytes) still decodes and names none, malformed
 * payloads are refused; a slot is kept while the object's locking operation is PENDING or
 * PUBLISHING with a payload naming it, and reread (commit or free by the route) otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvmesh.h"
#include "store/held_op.h"
#include "store/put_payload.h"

static kvm_runtime_id_t rid(uint8_t b)
{
    kvm_runtime_id_t id;
    memset(id.b, b, sizeof(id.b));
    return id;
}

static kvm_put_payload_t sample(uint32_t n)
{
    kvm_put_payload_t p = {.length = 4096, .checksum = 0x1122334455667788ull, .has_locators = true};
    p.writer = rid(9);
    p.n = n;
    for (uint32_t i = 0; i < n; i++)
        p.rep[i] = (kvm_hot_replica_t){.owner = rid((uint8_t)(i + 1)),
                                       .segment = 100 + i,
                                       .offset = 8192 * i,
                                       .length = 4096,
                                       .checksum = p.checksum};
    return p;
}

static void test_payload_roundtrip(void **state)
{
    (void)state;
    for (uint32_t n = 1; n <= KVM_MAX_REPLICAS; n++) {
        kvm_put_payload_t p = sample(n), d;
        uint8_t buf[KVM_PUT_PAYLOAD_MAX + 1]; /* + 1: the extra byte below */
        size_t len = 0;
        assert_int_equal(kvm_put_payload_encode(&p, buf, sizeof(buf), &len), 0);
        assert_int_equal(len, 16 + 2 + 16 + 40 * n);
        assert_true(len <= TN_PAYLOAD_MAX);
        assert_int_equal(kvm_put_payload_decode(buf, len, &d), 0);
        assert_true(d.has_locators);
        assert_int_equal(d.n, n);
        assert_memory_equal(d.writer.b, p.writer.b, 16);
        for (uint32_t i = 0; i < n; i++)
            assert_true(kvm_hot_replica_equal(&d.rep[i], &p.rep[i]));
        for (uint32_t i = 0; i < n; i++) {
            kvm_runtime_id_t o = rid((uint8_t)(i + 1));
            assert_true(kvm_put_payload_names(&d, &o, 100 + i, 8192 * i));
            assert_false(kvm_put_payload_names(&d, &o, 100 + i, 8192 * i + 1));
            assert_false(kvm_put_payload_names(&d, &o, 101 + i, 8192 * i));
        }
        kvm_runtime_id_t other = rid(0x77);
        assert_false(kvm_put_payload_names(&d, &other, 100, 0));
        /* every truncation and one extra byte are refused, except the 16-byte version 1 prefix */
        for (size_t cut = 0; cut < len; cut++)
            assert_int_equal(kvm_put_payload_decode(buf, cut, &d) == 0, cut == 16);
        buf[len] = 0;
        assert_int_equal(kvm_put_payload_decode(buf, len + 1, &d), KVMESH_EPROTO);
    }
    kvm_put_payload_t p = sample(1);
    uint8_t small[40];
    size_t len = 0;
    assert_int_equal(kvm_put_payload_encode(&p, small, sizeof(small), &len), KVMESH_ETOOBIG);
    p.n = 0;
    assert_int_equal(kvm_put_payload_encode(&p, small, sizeof(small), &len), KVMESH_EINVAL);
}

static void test_payload_v1_and_malformed(void **state)
{
    (void)state;
    kvm_put_payload_t p = sample(2), d;
    p.has_locators = false;
    uint8_t buf[KVM_PUT_PAYLOAD_MAX];
    size_t len = 0;
    assert_int_equal(kvm_put_payload_encode(&p, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, 16);
    /* the layout older runtimes wrote: length, checksum, big-endian */
    assert_int_equal(buf[7], 0x00);
    assert_int_equal(buf[6], 0x10);
    assert_int_equal(buf[8], 0x11);
    assert_int_equal(buf[15], 0x88);
    assert_int_equal(kvm_put_payload_decode(buf, len, &d), 0);
    assert_false(d.has_locators);
    assert_int_equal(d.length, 4096);
    kvm_runtime_id_t o = rid(1);
    assert_false(kvm_put_payload_names(&d, &o, 100, 0));

    p = sample(2);
    assert_int_equal(kvm_put_payload_encode(&p, buf, sizeof(buf), &len), 0);
    buf[16] = 3; /* unknown format */
    assert_int_equal(kvm_put_payload_decode(buf, len, &d), KVMESH_EPROTO);
    buf[16] = KVM_PUT_PAYLOAD_FORMAT;
    buf[16 + 1 + 16] = 3; /* n says 3, 2 present */
    assert_int_equal(kvm_put_payload_decode(buf, len, &d), KVMESH_EPROTO);
    buf[16 + 1 + 16] = 2;
    buf[16 + 2 + 16 + 39] ^= 1; /* replica 0's length differs from the object's */
    assert_int_equal(kvm_put_payload_decode(buf, len, &d), KVMESH_EPROTO);
}

static void op_init(tn_op_t *op, const char *id, enum tn_state st, enum tn_kind kind,
                    const kvm_put_payload_t *p)
{
    memset(op, 0, sizeof(*op));
    snprintf(op->id, sizeof(op->id), "%s", id);
    op->state = st;
    op->kind = kind;
    size_t len = 0;
    if (p) {
        assert_int_equal(kvm_put_payload_encode(p, op->payload, sizeof(op->payload), &len), 0);
        op->payload_len = (uint32_t)len;
    }
}

static void test_held_decide(void **state)
{
    (void)state;
    kvm_put_payload_t p = sample(3);
    kvm_hot_replica_t mine = p.rep[1], other = p.rep[1];
    other.offset += 4096;
    tn_objrow_t row;
    memset(&row, 0, sizeof(row));
    snprintf(row.lock_op, sizeof(row.lock_op), "%s", "a-1");
    tn_op_t op;

    /* no row, an unlocked row, a lock without its record: reread */
    assert_int_equal(kvm_held_decide(NULL, NULL, &mine), KVM_HELD_REREAD);
    op_init(&op, "a-1", TN_ST_PUBLISHING, TN_KIND_CREATE, &p);
    tn_objrow_t unlocked = row;
    unlocked.lock_op[0] = 0;
    assert_int_equal(kvm_held_decide(&unlocked, &op, &mine), KVM_HELD_REREAD);
    assert_int_equal(kvm_held_decide(&row, NULL, &mine), KVM_HELD_REREAD);

    /* PUBLISHING naming the slot: kept; naming others: reread */
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_KEEP);
    assert_int_equal(kvm_held_decide(&row, &op, &other), KVM_HELD_REREAD);
    op.kind = TN_KIND_OVERWRITE;
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_KEEP);

    /* a record of another operation than the lock's is not this lock's: reread */
    snprintf(op.id, sizeof(op.id), "%s", "a-2");
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_REREAD);

    /* PENDING: kept whatever its (empty) payload */
    op_init(&op, "a-1", TN_ST_PENDING, TN_KIND_CREATE, NULL);
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_KEEP);
    assert_int_equal(kvm_held_decide(&row, &op, &other), KVM_HELD_KEEP);

    /* terminal states, a delete, a version 1 payload: reread */
    op_init(&op, "a-1", TN_ST_FINALIZED, TN_KIND_CREATE, &p);
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_REREAD);
    op_init(&op, "a-1", TN_ST_ABORTED, TN_KIND_CREATE, &p);
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_REREAD);
    op_init(&op, "a-1", TN_ST_PUBLISHING, TN_KIND_DELETE, NULL);
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_REREAD);
    kvm_put_payload_t v1 = p;
    v1.has_locators = false;
    op_init(&op, "a-1", TN_ST_PUBLISHING, TN_KIND_CREATE, &v1);
    assert_int_equal(kvm_held_decide(&row, &op, &mine), KVM_HELD_REREAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_payload_roundtrip),
                                       cmocka_unit_test(test_payload_v1_and_malformed),
                                       cmocka_unit_test(test_held_decide)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
