/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_rand — deterministic random valid core records for the wire tests (test_wire.c's round
 * trips, test_wire_route_codec.c's differential checks against the protobuf-c oracle): one
 * xorshift generator (wr_seed sets its state), identities, op ids, cold backings and routes of
 * every shape. Values lean to the edges (0, small, near UINT64_MAX, maximal lengths) where an
 * encoder or decoder is most likely wrong. Not thread-safe (one state per process).
 */
#ifndef KVMESH_TEST_WIRE_RAND_H
#define KVMESH_TEST_WIRE_RAND_H

#include <stdint.h>

#include "core/route.h"

void wr_seed(uint64_t s);
uint64_t wr_rnd(void);
/* small, near UINT64_MAX, or any */
uint64_t wr_u64_any(void);
kvm_id128_t wr_id(void); /* never nil */
kvm_op_id_t wr_op(void); /* valid; sometimes epoch and seq UINT64_MAX */
void wr_ident(kvm_ident_t *id);
/* A pending (or, for KVM_COLD_MATERIALIZED, materialized) backing of `content`. */
void wr_cold(kvm_cold_backing_t *c, kvm_cold_kind_t kind, const kvm_op_id_t *content,
             uint64_t length, uint64_t checksum);
/* Shapes: 0 hot only, 1 hot + pending, 2 hot + materialized, 3 cold-only, 4/5 tombstones
 * (pending / finalized). r is initialised here; the caller frees it (kvm_route_free). */
void wr_route(kvm_route_t *r, int shape);

#endif
