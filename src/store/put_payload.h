/* SPDX-License-Identifier: Apache-2.0 */
/*
 * put_payload.h — the mutation payload a put's quota claim records (tn_claim_req_t.payload;
 * docs/tenancy.md "Replaying a put"). Pure codec, no state.
 *
 * Version 1 (16 bytes, written by older runtimes): length u64 | checksum u64 (big-endian). It
 * names no replica: a put claimed with it is never replayed.
 * Version 2: the same 16 bytes, then u8 format (2) | writer runtime id (16) | u8 n |
 * n * (owner runtime id (16) | segment u64 | offset u64 | length u64), big-endian, with
 * 1 <= n <= KVM_MAX_REPLICAS. The claim's fingerprint covers all of it, so a replay rebuilds
 * exactly the route the writer sent (content op = writer id + the operation id; the replicas in
 * this order; length and checksum) and an owner can tell whether the operation names its slot.
 * A delete's payload is empty.
 */
#ifndef KVMESH_STORE_PUT_PAYLOAD_H
#define KVMESH_STORE_PUT_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/route.h"

#define KVM_PUT_PAYLOAD_V1_LEN  16
#define KVM_PUT_PAYLOAD_FORMAT  2
#define KVM_PUT_PAYLOAD_LOC_LEN 40
#define KVM_PUT_PAYLOAD_MAX     (KVM_PUT_PAYLOAD_V1_LEN + 2 + 16 + KVM_MAX_REPLICAS * 40)

typedef struct kvm_put_payload {
    uint64_t length, checksum;
    bool has_locators;                       /* version 2 */
    kvm_runtime_id_t writer;                 /* version 2: the content op's writer */
    uint32_t n;                              /* version 2: replicas */
    kvm_hot_replica_t rep[KVM_MAX_REPLICAS]; /* checksum = the object's */
} kvm_put_payload_t;

/* Encodes p (version 2 when p->has_locators, else version 1) into buf (cap bytes). 0, or
 * KVMESH_EINVAL (n out of range) / KVMESH_ETOOBIG (cap). */
int kvm_put_payload_encode(const kvm_put_payload_t *p, uint8_t *buf, size_t cap, size_t *len);
/* Decodes version 1 or 2; KVMESH_EPROTO for anything else (a replica length that is not the
 * object's, trailing bytes, n out of range). */
int kvm_put_payload_decode(const uint8_t *buf, size_t len, kvm_put_payload_t *out);
/* Whether the payload names the slot (owner, segment, offset). False for version 1. */
bool kvm_put_payload_names(const kvm_put_payload_t *p, const kvm_runtime_id_t *owner,
                           uint64_t segment, uint64_t offset);

#endif
