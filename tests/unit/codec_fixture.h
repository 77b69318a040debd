/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_fixture.h — sample values shared by the codec unit tests (test_frame.c,
 * test_route_msg.c, test_codec_golden.c). The golden bytes of test_codec_golden.c were captured
 * from messages built with these, so a change here changes those bytes. Include after cmocka.h.
 */
#ifndef KVMESH_TESTS_UNIT_CODEC_FIXTURE_H
#define KVMESH_TESTS_UNIT_CODEC_FIXTURE_H

#include <string.h>

#include "core/route.h"
#include "net/frame.h"

/* A REQUEST header with every field set (sampled trace). */
static inline struct frame_header fixture_frame_header(void)
{
    struct frame_header h = {.kind = FRAME_REQUEST,
                             .type = 0x1234,
                             .request_id = 0x0102030405060708ull,
                             .deadline_ms = 1500,
                             .header_len = 77,
                             .payload_len = 1u << 20};
    for (int i = 0; i < FRAME_TRACE_ID_LEN; i++)
        h.trace.trace_id[i] = (uint8_t)(i + 1);
    for (int i = 0; i < FRAME_SPAN_ID_LEN; i++)
        h.trace.span_id[i] = (uint8_t)(0xF0 + i);
    h.trace.flags = FRAME_TRACE_SAMPLED;
    return h;
}

/* A valid route of ("tenant", no domain, key) with one hot replica on owner (9, owner). */
static inline void fixture_route(kvm_route_t *r, const char *key, uint64_t owner, uint64_t seq)
{
    kvm_route_init(r);
    assert_int_equal(kvm_ident_init(&r->ident, "tenant", NULL, key, strlen(key)), 0);
    r->version = (kvm_route_version_t){3, seq};
    r->content_op = (kvm_op_id_t){.writer = kvm_id128_from_u64(1, 2), .epoch = 1, .seq = seq};
    r->length = 100;
    r->checksum = 77 + seq;
    r->n_replicas = 1;
    r->replicas[0] = (kvm_hot_replica_t){.owner = kvm_id128_from_u64(9, owner),
                                         .segment = 1,
                                         .offset = seq * 100,
                                         .length = 100,
                                         .checksum = r->checksum};
}

#endif
