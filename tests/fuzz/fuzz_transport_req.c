/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_transport_req.c — libFuzzer target for the data-plane decoders (transport_wire.c): the
 * first byte selects the decoder (tcp request, tcp response, shm grant request, shm grant
 * reply); the rest is the input. Whatever is accepted must re-encode to the same bytes and
 * satisfy the decoder's documented limits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "net/transport_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0] & 3;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    uint8_t out[TPW_SHMR_SIZE];
    switch (sel) {
    case 0: {
        struct tpw_req q;
        if (tpw_req_decode(p, n, &q) == 0) {
            KVM_ASSERT(q.length >= 1 && q.length <= TPW_MAX_LEN);
            KVM_ASSERT(q.op == 1 || q.op == 2);
            tpw_req_encode(&q, out);
            KVM_ASSERT(memcmp(out, p, TPW_REQ_SIZE) == 0);
        }
        break;
    }
    case 1: {
        struct tpw_resp r;
        if (tpw_resp_decode(p, n, &r) == 0) {
            KVM_ASSERT(r.status == 0 || r.length == 0);
            tpw_resp_encode(&r, out);
            KVM_ASSERT(memcmp(out, p, TPW_RESP_SIZE) == 0);
        }
        break;
    }
    case 2: {
        struct tpw_shmq q;
        if (tpw_shmq_decode(p, n, &q) == 0) {
            tpw_shmq_encode(&q, out);
            KVM_ASSERT(memcmp(out, p, TPW_SHMQ_SIZE) == 0);
        }
        break;
    }
    default: {
        struct tpw_shmr r;
        if (tpw_shmr_decode(p, n, &r) == 0) {
            if (r.status == 0)
                KVM_ASSERT(r.grant.offset + r.grant.length <= r.seg_size);
            tpw_shmr_encode(&r, out);
            KVM_ASSERT(memcmp(out, p, TPW_SHMR_SIZE) == 0);
        }
        break;
    }
    }
    return 0;
}
