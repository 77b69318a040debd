/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.h — identities and versions of the core model (pure values, no allocation):
 *
 *   kvm_id128_t         a 16-byte opaque identifier (random at creation, e.g. UUIDv4 bytes);
 *                       the representation of runtime ids and cold tier (device) ids. All-zero
 *                       is the nil id and never names a real runtime or device.
 *   kvm_runtime_id_t    a runtime's stable identity (kvm_id128_t). Membership, route authority
 *                       and transports key their tables on it (kvm_id128_hash / _cmp).
 *   kvm_runtime_t       (runtime_id, epoch): one process incarnation. The epoch is assigned by
 *                       metadata, starts at 1, and only grows for a given runtime id; an older
 *                       epoch of the same id is stale and must be fenced.
 *   kvm_route_version_t (fencing_token, primary_sequence), totally ordered lexicographically.
 *                       (0, 0) is "no version" (before the first publication).
 *   kvm_op_id_t         an operation id (writer runtime id, writer epoch, sequence): the writer
 *                       numbers its operations 1, 2, ... within one epoch, so the triple is
 *                       unique in the deployment. All-zero is the nil op id. Used for
 *                       accounting/content, cold, and reclaim operations alike.
 *
 * All functions are pure and thread-safe.
 */
#ifndef KVMESH_CORE_VERSION_H
#define KVMESH_CORE_VERSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVM_ID128_LEN     16
#define KVM_ID128_HEX_LEN 32 /* kvm_id128_fmt writes 32 lowercase hex digits + NUL */

typedef struct kvm_id128 {
    uint8_t b[KVM_ID128_LEN];
} kvm_id128_t;

typedef kvm_id128_t kvm_runtime_id_t;
typedef kvm_id128_t kvm_tier_id_t; /* cold tier / device id */

bool kvm_id128_is_nil(const kvm_id128_t *a);
bool kvm_id128_equal(const kvm_id128_t *a, const kvm_id128_t *b);
/* memcmp order: <0, 0, >0. */
int kvm_id128_cmp(const kvm_id128_t *a, const kvm_id128_t *b);
/* Hash for tables (XXH3-64 of the 16 bytes). */
uint64_t kvm_id128_hash(const kvm_id128_t *a);
/* Writes 32 lowercase hex digits and a NUL into buf (at least KVM_ID128_HEX_LEN + 1 bytes).
 * Returns buf. */
char *kvm_id128_fmt(const kvm_id128_t *a, char *buf);
/* Parses exactly 32 hex digits (either case), or the 36-char dashed UUID form. Returns 0 or
 * KVMESH_EINVAL (message set). */
int kvm_id128_parse(const char *s, kvm_id128_t *out);
/* Builds an id from two 64-bit words (big-endian: hi first). Handy for tests and simulators. */
kvm_id128_t kvm_id128_from_u64(uint64_t hi, uint64_t lo);

typedef struct kvm_runtime {
    kvm_runtime_id_t id;
    uint64_t epoch; /* >= 1 for a registered incarnation */
} kvm_runtime_t;

bool kvm_runtime_equal(const kvm_runtime_t *a, const kvm_runtime_t *b);
/* True when a and b are the same runtime id and a's epoch is older than b's. */
bool kvm_runtime_is_stale(const kvm_runtime_t *a, const kvm_runtime_t *current);

typedef struct kvm_route_version {
    uint64_t fencing_token;
    uint64_t primary_sequence;
} kvm_route_version_t;

#define KVM_ROUTE_VERSION_NONE ((kvm_route_version_t){0, 0})

/* Total order: by fencing_token, then primary_sequence. <0, 0, >0. */
int kvm_route_version_cmp(const kvm_route_version_t *a, const kvm_route_version_t *b);
bool kvm_route_version_equal(const kvm_route_version_t *a, const kvm_route_version_t *b);
bool kvm_route_version_is_none(const kvm_route_version_t *a);
/*
 * The version a primary assigns to its next mutation: under the same token, sequence + 1; under
 * a newer token (after rollover), (token, 1). token must be >= last->fencing_token (asserted),
 * and the sequence must not overflow (KVMESH_ERANGE).
 */
int kvm_route_version_next(const kvm_route_version_t *last, uint64_t token,
                           kvm_route_version_t *out);

typedef struct kvm_op_id {
    kvm_runtime_id_t writer;
    uint64_t epoch;
    uint64_t seq;
} kvm_op_id_t;

bool kvm_op_id_is_nil(const kvm_op_id_t *a);
bool kvm_op_id_equal(const kvm_op_id_t *a, const kvm_op_id_t *b);
/* Total order by (writer, epoch, seq): for indexes only; it is not a causal order. */
int kvm_op_id_cmp(const kvm_op_id_t *a, const kvm_op_id_t *b);
uint64_t kvm_op_id_hash(const kvm_op_id_t *a);
/* A non-nil op id must have a non-nil writer, epoch >= 1 and seq >= 1. */
bool kvm_op_id_is_valid(const kvm_op_id_t *a);
/* "<writer hex>:<epoch>:<seq>" into buf of KVM_OP_ID_FMT_LEN bytes. Returns buf. */
#define KVM_OP_ID_FMT_LEN (KVM_ID128_HEX_LEN + 2 * 21 + 1)
char *kvm_op_id_fmt(const kvm_op_id_t *a, char *buf);

#endif
