/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_frame.c — libFuzzer target for the frame decoders: treats the input as a byte stream of
 * frames, as a connection's receiver does: decode and validate the fixed header (with a small
 * frame limit so "oversized" paths are reached), re-encode an accepted header and require the
 * same bytes back, then decode the protobuf RpcHeader of REQUEST/RESPONSE/NOTIFY frames. Stops
 * at the first rejected or truncated frame, like the receiver closing the connection.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "net/frame.h"
#include "rpc.pb-c.h"

#define FUZZ_MAX_FRAME (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    for (int frames = 0; frames < 64 && off < size; frames++) {
        struct frame_header h;
        enum frame_error e = frame_decode(data + off, size - off, FUZZ_MAX_FRAME, &h);
        if (e != FRAME_OK)
            return 0;
        uint8_t again[FRAME_FIXED_SIZE];
        frame_encode(&h, again);
        KVM_ASSERT(memcmp(again, data + off, FRAME_FIXED_SIZE) == 0);
        KVM_ASSERT(FRAME_FIXED_SIZE + (uint64_t)h.header_len + h.payload_len <= FUZZ_MAX_FRAME);
        off += FRAME_FIXED_SIZE;
        if (size - off < h.header_len)
            return 0; /* truncated */
        if (h.kind == FRAME_REQUEST || h.kind == FRAME_RESPONSE || h.kind == FRAME_NOTIFY) {
            Kvmesh__Rpc__RpcHeader *m =
                kvmesh__rpc__rpc_header__unpack(NULL, h.header_len, data + off);
            if (m) {
                KVM_ASSERT(m->error != NULL);
                KVM_ASSERT(m->body.len <= h.header_len);
                kvmesh__rpc__rpc_header__free_unpacked(m, NULL);
            }
        }
        off += h.header_len;
        if (size - off < h.payload_len)
            return 0;
        off += (size_t)h.payload_len;
    }
    return 0;
}
