/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h — encode/decode of the core records (identity, runtime, route version, operation id,
 * cold backing, route, cold reclaim record) for the wire and for durable metadata.
 *
 * Frame: a 4-byte header, then the protobuf body (proto/records.proto, package kvmesh.core):
 *   u16 schema id (big-endian) | u16 schema version (big-endian) | protobuf message
 * Schema ids 1..255 are reserved for core records (enum wire_schema below); other modules may
 * take ids from 256 up and reuse wire_header_put/get. A decoder accepts versions
 * [WIRE_MIN_VERSION, WIRE_VERSION]; a newer version gives KVMESH_EINCOMPAT. Compatible changes
 * (new optional fields) keep the version: protobuf ignores unknown fields.
 *
 * Encoders validate the record first (KVMESH_EINVAL for an invalid record: never emit one) and
 * write into a caller buffer (KVMESH_ETOOBIG when cap is too small; KVM_WIRE_MAX_RECORD_LEN
 * always suffices). Decoders never crash on any input: KVMESH_ETOOBIG for input longer than
 * KVM_WIRE_MAX_RECORD_LEN, KVMESH_EINCOMPAT for a newer version, KVMESH_EPROTO for anything
 * malformed (bad header, wrong schema id, protobuf errors, and semantic violations: id lengths,
 * replica count, lengths, tagged-union consistency, every kvm_route_validate invariant).
 * Every failure sets a kvm_errf message. On failure the output is zeroed and owns nothing.
 *
 * Ownership: decoded idents and routes own heap memory (kvm_ident_free / kvm_route_free);
 * other decoded records are plain values. Other .proto files should embed these records as
 * `bytes` fields holding a full frame from these encoders. Thread-safe (no shared state).
 */
#ifndef KVMESH_CORE_WIRE_H
#define KVMESH_CORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/ident.h"
#include "core/route.h"
#include "core/version.h"

#define WIRE_HEADER_LEN  4
#define WIRE_VERSION     1 /* version every core encoder writes */
#define WIRE_MIN_VERSION 1 /* oldest version the decoders read */

enum wire_schema {
    WIRE_SCHEMA_IDENT = 1,
    WIRE_SCHEMA_RUNTIME = 2,
    WIRE_SCHEMA_ROUTE_VERSION = 3,
    WIRE_SCHEMA_OP_ID = 4,
    WIRE_SCHEMA_COLD_BACKING = 5,
    WIRE_SCHEMA_ROUTE = 6,
    WIRE_SCHEMA_COLD_RECLAIM = 7,
};

/* Writes the header into buf (>= WIRE_HEADER_LEN bytes). */
void wire_header_put(uint8_t *buf, uint16_t schema, uint16_t version);
/* Checks the header of buf[0..len): schema must equal `schema` and the version must be in
 * [min_version, max_version]. Returns 0 (and *version) or EPROTO / EINCOMPAT. */
int wire_header_get(const uint8_t *buf, size_t len, uint16_t schema, uint16_t min_version,
                    uint16_t max_version, uint16_t *version);

int wire_ident_encode(const kvm_ident_t *in, uint8_t *buf, size_t cap, size_t *out_len);
int wire_ident_decode(const uint8_t *buf, size_t len, kvm_ident_t *out);

int wire_runtime_encode(const kvm_runtime_t *in, uint8_t *buf, size_t cap, size_t *out_len);
int wire_runtime_decode(const uint8_t *buf, size_t len, kvm_runtime_t *out);

int wire_route_version_encode(const kvm_route_version_t *in, uint8_t *buf, size_t cap,
                              size_t *out_len);
int wire_route_version_decode(const uint8_t *buf, size_t len, kvm_route_version_t *out);

int wire_op_id_encode(const kvm_op_id_t *in, uint8_t *buf, size_t cap, size_t *out_len);
int wire_op_id_decode(const uint8_t *buf, size_t len, kvm_op_id_t *out);

/* A standalone cold backing must be PENDING_OFFLOAD or MATERIALIZED (NONE is EINVAL/EPROTO). */
int wire_cold_backing_encode(const kvm_cold_backing_t *in, uint8_t *buf, size_t cap,
                             size_t *out_len);
int wire_cold_backing_decode(const uint8_t *buf, size_t len, kvm_cold_backing_t *out);

/* The route codec is hand-written (wire_route.c): the same bytes protobuf-c writes for
 * records.proto `Route`, and it accepts exactly what protobuf-c 1.4 accepts (unknown fields,
 * any field order, repeated occurrences merged as protobuf-c merges them), with the same
 * validation, error codes and messages as the protobuf-c path it replaced (docs/protocol.md
 * section 7a). */
int wire_route_encode(const kvm_route_t *in, uint8_t *buf, size_t cap, size_t *out_len);
int wire_route_decode(const uint8_t *buf, size_t len, kvm_route_t *out);
/* wire_route_decode with the identity's encoding written into ident_store (cap bytes) when it
 * fits (kvm_ident_init_n_in: the route then does not own it; a failed decode leaves nothing
 * owned), so that a decoder with room of its own takes no allocation per route. */
int wire_route_decode_in(const uint8_t *buf, size_t len, kvm_route_t *out, uint8_t *ident_store,
                         size_t cap);
/* The identity frame, hand-written like the route codec (wire_route.c): the bytes, accept and
 * reject, values, codes and messages of wire_ident_encode / wire_ident_decode (their oracle),
 * with the decoded encoding in store when it fits (as wire_route_decode_in). */
int wire_ident_encode_fast(const kvm_ident_t *in, uint8_t *buf, size_t cap, size_t *out_len);
int wire_ident_decode_in(const uint8_t *buf, size_t len, kvm_ident_t *out, uint8_t *store,
                         size_t cap);

/* Test oracle: the protobuf-c route codec that wire_route_encode/_decode replaced, kept
 * unchanged so that tests/unit/test_wire_route_codec.c and tests/fuzz/fuzz_wire_route_diff.c
 * can compare the two on bytes, accept/reject and decoded values. Same contracts as above;
 * slower; not for production paths. */
int wire_route_encode_pb(const kvm_route_t *in, uint8_t *buf, size_t cap, size_t *out_len);
int wire_route_decode_pb(const uint8_t *buf, size_t len, kvm_route_t *out);

int wire_cold_reclaim_encode(const kvm_cold_reclaim_t *in, uint8_t *buf, size_t cap,
                             size_t *out_len);
int wire_cold_reclaim_decode(const uint8_t *buf, size_t len, kvm_cold_reclaim_t *out);

#endif
