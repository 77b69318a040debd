/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_hdr.h — the hand-written codec of the RPC frame's header message (rpc.proto `RpcHeader`:
 * sint32 status = 1, string error = 2, bytes body = 3), used by rpc.c on every REQUEST, RESPONSE
 * and NOTIFY frame instead of protobuf-c's descriptor-driven pack/unpack (which allocated the
 * unpacked message and a copy of the body per frame; docs/performance.md "RPC layer CPU").
 *
 * Wire compatibility (docs/rpc.md "RpcHeader codec"): the encoder writes exactly the bytes
 * protobuf-c 1.4 writes (fields in number order, proto3 defaults omitted). The decoder accepts
 * exactly what protobuf-c 1.4's unpack accepts and yields the same values: tags of at most 5
 * bytes (a first byte without field bits is malformed); varints of at most 10 bytes; length
 * prefixes of at most 5 bytes, <= INT_MAX and in bounds; wire types 3, 4, 6, 7 malformed; a
 * known field with another wire type malformed; unknown fields skipped; the last occurrence of
 * a field wins; status keeps the varint's low 32 bits, zigzag-decoded. The protobuf-c codec stays
 * the test oracle (tests/unit/test_rpc_hdr.c, tests/fuzz/fuzz_rpc_hdr_diff.c).
 *
 * Ownership: a decoded header points into the input (nothing allocated); error is NOT
 * NUL-terminated (protobuf-c's C string ends at the first NUL byte: rpc_hdr_error_cstr).
 */
#ifndef KVMESH_NET_RPC_HDR_H
#define KVMESH_NET_RPC_HDR_H

#include <stddef.h>
#include <stdint.h>

struct rpc_hdr {
    int32_t status;
    const char *error; /* error_len bytes in the input ("" when absent) */
    size_t error_len;
    const uint8_t *body; /* body_len bytes in the input; NULL when body_len == 0 */
    size_t body_len;
};

/* Encoded size of a header with these fields. */
size_t rpc_hdr_size(int32_t status, size_t error_len, size_t body_len);

/* Writes the header into out (rpc_hdr_size bytes, which it returns). error: error_len bytes. */
size_t rpc_hdr_encode(uint8_t *out, int32_t status, const char *error, size_t error_len,
                      const uint8_t *body, size_t body_len);

/* Decodes len bytes (buf may be NULL when len is 0). Returns 0, or KVMESH_EPROTO with a message
 * when protobuf-c would refuse the bytes. */
int rpc_hdr_decode(const uint8_t *buf, size_t len, struct rpc_hdr *out);

/* The decoded error as protobuf-c gives it (a C string cut at the first NUL), copied into a
 * malloc'd string the caller frees; NULL when out of memory. */
char *rpc_hdr_error_cstr(const struct rpc_hdr *h);

#endif
