/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_store_proto.c — libFuzzer target for the store's peer message decoders (src/store/
 * proto.c), the batched cold read (cases 6, 7), both COMMIT / RELEASE body versions (case 2) and
 * the inline reservation with its payload (case 8) and the batched COMMIT / RELEASE (case 9)
 * included, and its answer's flags (case 10), the put at the primary's request (first byte
 * 0xf0) and answer (0xf1), and its raw-payload form's request (0xf2: a u32 of the frame's raw
 * payload length, then the body), the batch put at the primary's request (0xf8) and answer
 * (0xf9). The first input byte selects the
 * decoder; an accepted message is re-encoded and must decode to the same fields (round trip), so
 * decoders never accept what encoders cannot produce.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++, size--;
    static uint8_t buf[STORE_PROTO_MAX];
    size_t len = 0;
    if (sel == 0xf0) { /* the put at the primary: request (with its payload) */
        store_put_primary_req_t m, m2;
        static uint8_t big[STORE_PUT_PRIMARY_HEAD_MAX + STORE_INLINE_WRITE_MAX];
        if (store_put_primary_req_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(m.w.payload && m.w.r.length > 0 && m.w.r.length <= STORE_INLINE_WRITE_MAX);
        KVM_ASSERT(store_put_primary_head_encode(&m, big, STORE_PUT_PRIMARY_HEAD_MAX, &len) == 0);
        memcpy(big + len, m.w.payload, (size_t)m.w.r.length);
        KVM_ASSERT(store_put_primary_req_decode(big, len + m.w.r.length, &m2) == 0);
        KVM_ASSERT(m.w.r.length == m2.w.r.length && m.w.r.ttl_ms == m2.w.r.ttl_ms &&
                   m.w.r.target_epoch == m2.w.r.target_epoch && m.w.checksum == m2.w.checksum &&
                   m.budget_ms == m2.budget_ms && kvm_ident_equal(&m.w.r.ident, &m2.w.r.ident) &&
                   memcmp(m.w.payload, m2.w.payload, (size_t)m.w.r.length) == 0);
        kvm_ident_free(&m.w.r.ident);
        kvm_ident_free(&m2.w.r.ident);
        return 0;
    }
    if (sel == 0xf2) { /* the raw-payload form: the body alone, the value's length apart */
        if (size < 4)
            return 0;
        uint64_t raw_len = (uint64_t)data[0] | (uint64_t)data[1] << 8 | (uint64_t)data[2] << 16 |
                           (uint64_t)data[3] << 24;
        store_put_primary_req_t m, m2;
        static uint8_t head[STORE_PUT_PRIMARY_HEAD_MAX];
        if (store_put_primary_raw_decode(data + 4, size - 4, raw_len, &m) != 0)
            return 0;
        KVM_ASSERT(!m.w.payload && m.w.r.length == raw_len && raw_len > 0 &&
                   raw_len <= STORE_PUT_PRIMARY_RAW_MAX);
        KVM_ASSERT(store_put_primary_raw_encode(&m, head, sizeof(head), &len) == 0);
        KVM_ASSERT(store_put_primary_raw_decode(head, len, raw_len, &m2) == 0);
        KVM_ASSERT(m.w.r.length == m2.w.r.length && m.w.r.ttl_ms == m2.w.r.ttl_ms &&
                   m.w.r.target_epoch == m2.w.r.target_epoch && m.w.checksum == m2.w.checksum &&
                   m.budget_ms == m2.budget_ms && kvm_ident_equal(&m.w.r.ident, &m2.w.r.ident));
        kvm_ident_free(&m.w.r.ident);
        kvm_ident_free(&m2.w.r.ident);
        return 0;
    }
    if (sel == 0xf8) { /* the batch put at the primary: request (values inline) */
        static store_prim_batch_req_t m, m2;
        if (store_prim_batch_req_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(m.n > 0 && m.n <= STORE_PUT_PRIMARY_BATCH_MAX);
        KVM_ASSERT(store_prim_batch_req_len(&m) == size); /* (canonical: the exact bytes) */
        uint8_t *big = malloc(size);
        KVM_ASSERT(big);
        KVM_ASSERT(store_prim_batch_req_encode(&m, big, size, &len) == 0 && len == size);
        KVM_ASSERT(memcmp(big, data, size) == 0);
        KVM_ASSERT(store_prim_batch_req_decode(big, len, &m2) == 0 && m2.n == m.n);
        for (uint16_t i = 0; i < m.n; i++)
            KVM_ASSERT(m.it[i].length == m2.it[i].length && m.it[i].checksum == m2.it[i].checksum &&
                       kvm_ident_equal(&m.it[i].ident, &m2.it[i].ident) &&
                       memcmp(m.it[i].payload, m2.it[i].payload, (size_t)m.it[i].length) == 0);
        store_prim_batch_req_free(&m);
        store_prim_batch_req_free(&m2);
        free(big);
        return 0;
    }
    if (sel == 0xf9) { /* and its answer */
        static store_prim_batch_resp_t m, m2;
        if (store_prim_batch_resp_decode(data, size, &m) != 0)
            return 0;
        uint8_t *rb = malloc(size); /* (re-encoded: the same length) */
        KVM_ASSERT(rb);
        KVM_ASSERT(store_prim_batch_resp_encode(&m, rb, size, &len) == 0 && len == size);
        KVM_ASSERT(store_prim_batch_resp_decode(rb, len, &m2) == 0 && m2.n == m.n);
        for (uint16_t i = 0; i < m.n; i++) {
            const store_put_primary_resp_t *x = &m.r[i], *y = &m2.r[i];
            KVM_ASSERT(x->outcome == y->outcome && x->status == y->status && x->seg == y->seg &&
                       x->offset == y->offset && x->token == y->token &&
                       x->route_len == y->route_len && x->msg_len == y->msg_len &&
                       (x->route_len == 0 || memcmp(x->route, y->route, x->route_len) == 0) &&
                       (x->msg_len == 0 || memcmp(x->msg, y->msg, x->msg_len) == 0));
        }
        free(rb);
        return 0;
    }
    if (sel == 0xf1) { /* and its answer */
        store_put_primary_resp_t m, m2;
        static uint8_t rb[STORE_PUT_PRIMARY_RESP_MAX];
        if (store_put_primary_resp_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_put_primary_resp_encode(&m, rb, sizeof(rb), &len) == 0);
        KVM_ASSERT(store_put_primary_resp_decode(rb, len, &m2) == 0);
        KVM_ASSERT(m.outcome == m2.outcome && m.status == m2.status && m.seg == m2.seg &&
                   m.offset == m2.offset && m.token == m2.token && m.route_len == m2.route_len &&
                   m.msg_len == m2.msg_len &&
                   (m.route_len == 0 || memcmp(m.route, m2.route, m.route_len) == 0) &&
                   (m.msg_len == 0 || memcmp(m.msg, m2.msg, m.msg_len) == 0));
        return 0;
    }
    switch (sel % 11) {
    case 0: {
        store_reserve_req_t m, m2;
        if (store_reserve_req_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_reserve_req_encode(&m, buf, sizeof(buf), &len) == 0);
        KVM_ASSERT(store_reserve_req_decode(buf, len, &m2) == 0);
        KVM_ASSERT(m.length == m2.length && m.ttl_ms == m2.ttl_ms &&
                   m.target_epoch == m2.target_epoch && kvm_ident_equal(&m.ident, &m2.ident));
        kvm_ident_free(&m.ident);
        kvm_ident_free(&m2.ident);
        break;
    }
    case 1: {
        store_reserve_resp_t m, m2;
        if (store_reserve_resp_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_reserve_resp_encode(&m, buf, sizeof(buf), &len) == 0);
        KVM_ASSERT(store_reserve_resp_decode(buf, len, &m2) == 0 &&
                   memcmp(&m, &m2, sizeof(m)) == 0);
        break;
    }
    case 2: {
        store_slot_msg_t m, m2;
        if (store_slot_msg_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_slot_msg_encode(&m, buf, sizeof(buf), &len) == 0);
        KVM_ASSERT(store_slot_msg_decode(buf, len, &m2) == 0 && m.target_epoch == m2.target_epoch &&
                   m.seg == m2.seg && m.offset == m2.offset && m.has == m2.has &&
                   m.token == m2.token && m.ident_hash == m2.ident_hash && m.len == m2.len);
        break;
    }
    case 3: {
        static store_hit_msg_t m, m2;
        if (store_hit_msg_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_hit_msg_encode(&m, buf, sizeof(buf), &len) == 0);
        KVM_ASSERT(store_hit_msg_decode(buf, len, &m2) == 0 && m.n == m2.n &&
                   memcmp(m.slots, m2.slots, m.n * sizeof(m.slots[0])) == 0);
        break;
    }
    case 4: {
        static store_reserve_batch_req_t m, m2;
        static uint8_t big[STORE_RESERVE_BATCH_REQ_MAX(STORE_RESERVE_BATCH_MAX)];
        if (store_reserve_batch_req_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_reserve_batch_req_encode(&m, big, sizeof(big), &len) == 0);
        KVM_ASSERT(store_reserve_batch_req_decode(big, len, &m2) == 0);
        KVM_ASSERT(m.n == m2.n && m.ttl_ms == m2.ttl_ms && m.target_epoch == m2.target_epoch);
        for (uint16_t i = 0; i < m.n; i++)
            KVM_ASSERT(m.length[i] == m2.length[i] && kvm_ident_equal(&m.ident[i], &m2.ident[i]));
        store_reserve_batch_req_free(&m);
        store_reserve_batch_req_free(&m2);
        break;
    }
    case 5: {
        static store_reserve_batch_resp_t m, m2;
        static uint8_t rb[STORE_RESERVE_BATCH_RESP_MAX];
        if (store_reserve_batch_resp_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_reserve_batch_resp_encode(&m, rb, sizeof(rb), &len) == 0);
        KVM_ASSERT(store_reserve_batch_resp_decode(rb, len, &m2) == 0 && m.n == m2.n &&
                   memcmp(m.r, m2.r, m.n * sizeof(m.r[0])) == 0);
        break;
    }
    case 6: {
        static store_cold_batch_req_t m, m2;
        static uint8_t big[STORE_COLD_BATCH_REQ_MAX(STORE_COLD_BATCH_MAX)];
        if (store_cold_batch_req_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_cold_batch_req_encode(&m, big, sizeof(big), &len) == 0);
        KVM_ASSERT(store_cold_batch_req_decode(big, len, &m2) == 0);
        KVM_ASSERT(m.n == m2.n && kvm_id128_equal(&m.owner, &m2.owner));
        for (uint16_t i = 0; i < m.n; i++)
            KVM_ASSERT(m.it[i].version_h == m2.it[i].version_h &&
                       m.it[i].locator_fp == m2.it[i].locator_fp &&
                       m.it[i].length == m2.it[i].length && m.it[i].checksum == m2.it[i].checksum &&
                       m.it[i].namespace_h == m2.it[i].namespace_h &&
                       kvm_ident_equal(&m.it[i].ident, &m2.it[i].ident));
        store_cold_batch_req_free(&m);
        store_cold_batch_req_free(&m2);
        break;
    }
    case 7: {
        static store_cold_batch_resp_t m, m2;
        static uint8_t rb[STORE_COLD_BATCH_RESP_MAX];
        if (store_cold_batch_resp_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(store_cold_batch_resp_encode(&m, rb, sizeof(rb), &len) == 0);
        KVM_ASSERT(store_cold_batch_resp_decode(rb, len, &m2) == 0 && m.n == m2.n &&
                   memcmp(m.r, m2.r, m.n * sizeof(m.r[0])) == 0);
        break;
    }
    case 8: {
        store_reserve_inline_req_t m, m2;
        static uint8_t big[STORE_RESERVE_INLINE_HEAD_MAX + STORE_INLINE_WRITE_MAX];
        if (store_reserve_inline_req_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(m.payload && m.r.length > 0 && m.r.length <= STORE_INLINE_WRITE_MAX);
        KVM_ASSERT(store_reserve_inline_head_encode(&m, big, STORE_RESERVE_INLINE_HEAD_MAX, &len) ==
                   0);
        memcpy(big + len, m.payload, (size_t)m.r.length);
        KVM_ASSERT(store_reserve_inline_req_decode(big, len + m.r.length, &m2) == 0);
        KVM_ASSERT(m.r.length == m2.r.length && m.r.ttl_ms == m2.r.ttl_ms &&
                   m.r.target_epoch == m2.r.target_epoch && m.checksum == m2.checksum &&
                   kvm_ident_equal(&m.r.ident, &m2.r.ident) &&
                   memcmp(m.payload, m2.payload, (size_t)m.r.length) == 0);
        kvm_ident_free(&m.r.ident);
        kvm_ident_free(&m2.r.ident);
        break;
    }
    case 9: {
        static store_slot_batch_t m, m2;
        static uint8_t sb[STORE_SLOT_BATCH_LEN(STORE_SLOT_BATCH_MAX)];
        if (store_slot_batch_decode(data, size, &m) != 0)
            return 0;
        KVM_ASSERT(m.n >= 1 && m.n <= STORE_SLOT_BATCH_MAX && size == STORE_SLOT_BATCH_LEN(m.n));
        KVM_ASSERT(store_slot_batch_encode(&m, sb, sizeof(sb), &len) == 0 && len == size &&
                   memcmp(sb, data, size) == 0);
        KVM_ASSERT(store_slot_batch_decode(sb, len, &m2) == 0 && m.n == m2.n &&
                   m.target_epoch == m2.target_epoch);
        for (uint16_t i = 0; i < m.n; i++)
            KVM_ASSERT(m.it[i].kind == m2.it[i].kind && m.it[i].m.has == m2.it[i].m.has &&
                       m.it[i].m.seg == m2.it[i].m.seg && m.it[i].m.offset == m2.it[i].m.offset &&
                       m.it[i].m.token == m2.it[i].m.token &&
                       m.it[i].m.ident_hash == m2.it[i].m.ident_hash &&
                       m.it[i].m.len == m2.it[i].m.len);
        break;
    }
    case 10: {
        uint8_t f = 0xff, f2 = 0xff, ab[STORE_SLOT_BATCH_ANS_LEN];
        if (store_slot_batch_ans_decode(data, size, &f) != 0) {
            KVM_ASSERT(f == 0); /* a refused answer takes no flag */
            return 0;
        }
        KVM_ASSERT(size == 0 || size == STORE_SLOT_BATCH_ANS_LEN);
        KVM_ASSERT(store_slot_batch_ans_encode(f, ab, sizeof(ab), &len) == 0 &&
                   len == STORE_SLOT_BATCH_ANS_LEN);
        KVM_ASSERT(store_slot_batch_ans_decode(ab, len, &f2) == 0 && f == f2);
        break;
    }
    }
    return 0;
}
