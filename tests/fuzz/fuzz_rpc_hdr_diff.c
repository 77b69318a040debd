/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rpc_hdr_diff.c — differential libFuzzer target: the hand-written RpcHeader decoder and
 * encoder (net/rpc_hdr.h) against protobuf-c on arbitrary bytes (rpc_hdr_diff.h): the same
 * acceptance, the same decoded fields, and the same bytes when re-encoded.
 */
#include <stddef.h>
#include <stdint.h>

#include "rpc_hdr_diff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)rpc_hdr_diff(data, size);
    return 0;
}
