/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_route_msg.c — libFuzzer target for the route protocol decoders: route_msg_decode (the
 * first input byte picks the env message type) and, on the same bytes, the shard-authority
 * record and cluster policy decoders (metadata values). A message that decodes must re-encode
 * and decode to the same header fields and routes, the same READ_REQ accepted size (limit) and
 * the same inline READ_RESP bytes (route_msg.h "Inline reads"), or the same attachment length of
 * a head-form answer (RMSG_READ_ATT). When the type is the batch
 * message's (RMSG_BATCH), route_batch_decode runs too: every item it admits is decoded as the
 * single message it is, and a batch that decodes is rebuilt byte for byte by the builder. Never a
 * crash, never a leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "route/route_int.h"
#include "route/route_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t type = ROUTE_MSG_BASE + (data[0] % (RMSG_KIND_MAX + 2));
    route_msg_t m;
    if (route_msg_decode(type, data + 1, size - 1, &m) == 0) {
        uint8_t *buf = malloc(ROUTE_MSG_MAX_LEN);
        size_t len;
        KVM_ASSERT(buf != NULL);
        KVM_ASSERT(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len) == 0);
        route_msg_t d;
        KVM_ASSERT(route_msg_decode(type, buf, len, &d) == 0);
        KVM_ASSERT(d.kind == m.kind && d.req_id == m.req_id && d.token == m.token &&
                   d.n_routes == m.n_routes && d.n_set == m.n_set);
        for (uint32_t i = 0; i < d.n_routes; i++)
            KVM_ASSERT(kvm_route_equal(&d.routes[i], &m.routes[i]));
        KVM_ASSERT(d.limit == m.limit && d.flags == m.flags && d.inl_len == m.inl_len &&
                   d.att_len == m.att_len);
        KVM_ASSERT(d.att_len == 0 || (d.n_routes == 1 && d.routes[0].length == d.att_len &&
                                      d.inl_len == 0 && !(d.flags & RMSG_READ_INLINE)));
        KVM_ASSERT(d.inl_len == 0 || (d.n_routes == 1 && d.routes[0].length == d.inl_len &&
                                      memcmp(d.inl, m.inl, d.inl_len) == 0));
        route_msg_clear(&d);
        free(buf);
        route_msg_clear(&m);
    }
    if (type == ROUTE_MSG_BASE + RMSG_BATCH) {
        route_batch_view_t *v = malloc(sizeof(*v));
        KVM_ASSERT(v != NULL);
        if (route_batch_decode(type, data + 1, size - 1, v) == 0) {
            KVM_ASSERT(v->n >= 2 && v->n <= KVM_ROUTE_BATCH_MAX);
            route_batch_buf_t b;
            route_batch_buf_init(&b);
            for (uint32_t i = 0; i < v->n; i++) {
                KVM_ASSERT(route_msg_batchable(v->kind[i]));
                route_msg_t one;
                if (route_msg_decode(ROUTE_MSG_BASE + v->kind[i], v->item[i], v->len[i], &one) ==
                    0) {
                    KVM_ASSERT(one.kind == v->kind[i]);
                    route_msg_clear(&one);
                }
                KVM_ASSERT(route_batch_append(&b, v->item[i], v->len[i]) == 0);
            }
            size_t len = 0;
            const uint8_t *p = route_batch_bytes(&b, &len);
            KVM_ASSERT(len == size - 1 && memcmp(p, data + 1, len) == 0);
            route_batch_buf_free(&b);
        }
        free(v);
    }
    route_rec_t rec;
    if (route_rec_decode(data, size, &rec) == 0) {
        uint8_t buf[ROUTE_REC_MAX_LEN];
        size_t len;
        KVM_ASSERT(route_rec_encode(&rec, buf, sizeof(buf), &len) == 0);
        KVM_ASSERT(len == size && memcmp(buf, data, size) == 0);
    }
    route_policy_t p;
    (void)route_policy_decode(data, size, &p);
    return 0;
}
