/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route.h — the route record of one object (spec "Hot/Cold Storage > Route model", "Write
 * path", "Delete and reclaim") and the cold reclaim record.
 *
 * kvm_route_t carries two identities: the fenced route version (changes on every CAS:
 * placement, offload, eviction, restore, cleanup) and the accounting/content operation id
 * (content_op: names the logical value, stable while it moves between tiers; for a tombstone it
 * is the delete's accounting operation). `replicas` lists hot (DRAM) replicas only; `cold` is
 * the at most one active cold backing of the current content, a tagged union:
 *
 *   KVM_COLD_NONE             no cold backing
 *   KVM_COLD_PENDING_OFFLOAD  cold_op, content_op, owner, tier, expected_length/_checksum
 *   KVM_COLD_MATERIALIZED     cold_op, content_op, owner, tier, locator, length, checksum
 *
 * Route invariants (kvm_route_validate; the wire decoder enforces them on every input):
 *   - ident valid; version != NONE; predecessor_version < version;
 *   - content_op valid; predecessor_op nil or valid and != content_op;
 *   - n_replicas <= KVM_MAX_REPLICAS; every replica has a non-nil owner, length == route length,
 *     checksum == route checksum, offset + length does not overflow; no two replicas share
 *     (owner, segment, offset);
 *   - live route: at least one hot replica or a materialized cold backing (a cold-only route
 *     has replicas = [] and cold = MATERIALIZED); PENDING_OFFLOAD needs a hot replica to read;
 *     retain_until_ms == 0;
 *   - cold backing (when not NONE): cold_op valid and != content_op, cold.content_op ==
 *     route content_op, owner and tier non-nil, lengths/checksums equal the route's, a
 *     materialized locator has 1..KVM_COLD_LOCATOR_MAX_LEN bytes;
 *   - tombstone: no replicas, no cold backing, length = checksum = 0;
 *     TOMB_FINALIZED has retain_until_ms > 0; TOMB_PENDING has its purge deadline there, or 0
 *     (none: kept until finalized; written so by runtimes before pending purge).
 *
 * Tombstone life (kvm_route_tomb_transition_ok):
 *
 *        put CAS                delete CAS               delete accounting finalized
 *   LIVE --------> LIVE   LIVE ------------> TOMB_PENDING ---------------------> TOMB_FINALIZED
 *     ^                                           |                                  |
 *     +-------------------- put CAS --------------+----------------------------------+
 *   A tombstone (either state) with retain_until_ms > 0 is removed from the authority once
 *   retain_until_ms has passed (docs/reliability.md "Tombstone purge").
 *
 * Cold reclaim record state (kvm_cold_reclaim_set_state, asserted, monotonic):
 *
 *   PLANNED --backend delete/mark-dead--> BACKEND_DELETED --usage handoff--> USAGE_RELEASED
 *
 * Ownership: kvm_route_t owns its ident (heap); init zeroes, free releases, copy deep-copies.
 * Everything else in both records is inline (no heap): kvm_cold_backing_t and
 * kvm_cold_reclaim_t are plain values that may be assigned with `=`.
 */
#ifndef KVMESH_CORE_ROUTE_H
#define KVMESH_CORE_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ident.h"
#include "core/limits.h"
#include "core/version.h"

typedef struct kvm_hot_replica {
    kvm_runtime_id_t owner; /* storage owner runtime */
    uint64_t segment;       /* owner-local segment id */
    uint64_t offset;        /* byte offset in the segment */
    uint64_t length;        /* bytes; equals the route length */
    uint64_t checksum;      /* XXH3-64 of the payload (kvm_checksum) */
} kvm_hot_replica_t;

bool kvm_hot_replica_equal(const kvm_hot_replica_t *a, const kvm_hot_replica_t *b);
/* Same slot: same (owner, segment, offset). */
bool kvm_hot_replica_same_slot(const kvm_hot_replica_t *a, const kvm_hot_replica_t *b);

typedef enum kvm_cold_kind {
    KVM_COLD_NONE = 0,
    KVM_COLD_PENDING_OFFLOAD = 1,
    KVM_COLD_MATERIALIZED = 2,
} kvm_cold_kind_t;

typedef struct kvm_cold_backing {
    kvm_cold_kind_t kind;
    kvm_op_id_t cold_op;
    kvm_op_id_t content_op;
    kvm_runtime_id_t owner; /* runtime owning the cold device */
    kvm_tier_id_t tier;     /* cold tier / device id */
    union {
        struct {
            uint64_t expected_length;
            uint64_t expected_checksum;
        } pending;
        struct {
            uint64_t length;
            uint64_t checksum;
            uint16_t locator_len;
            uint8_t locator[KVM_COLD_LOCATOR_MAX_LEN];
        } mat;
    } u;
} kvm_cold_backing_t;

const char *kvm_cold_kind_name(kvm_cold_kind_t k);
/* Compares only the fields of the active variant. */
bool kvm_cold_backing_equal(const kvm_cold_backing_t *a, const kvm_cold_backing_t *b);
/* Builds a PENDING_OFFLOAD backing (zeroes everything else). */
void kvm_cold_backing_pending(kvm_cold_backing_t *out, const kvm_op_id_t *cold_op,
                              const kvm_op_id_t *content_op, const kvm_runtime_id_t *owner,
                              const kvm_tier_id_t *tier, uint64_t expected_length,
                              uint64_t expected_checksum);
/*
 * PendingOffload -> Materialized, preserving cold_op, content_op, owner and tier. Fails with
 * KVMESH_EINVAL when `b` is not pending, the locator is empty or too long, or length/checksum
 * differ from the expected ones (message set); `b` is unchanged on failure.
 */
int kvm_cold_backing_materialize(kvm_cold_backing_t *b, const void *locator, size_t locator_len,
                                 uint64_t length, uint64_t checksum);
/* Fingerprint of a materialized backing (XXH3-64 over tier, locator, length, checksum, cold op),
 * which last-hot eviction CAS-matches. Asserts kind == MATERIALIZED. */
uint64_t kvm_cold_backing_fingerprint(const kvm_cold_backing_t *b);

typedef enum kvm_tomb_state {
    KVM_TOMB_NONE = 0,      /* live route */
    KVM_TOMB_PENDING = 1,   /* tombstone published; delete accounting not yet finalized */
    KVM_TOMB_FINALIZED = 2, /* accounting finalized; kept until retain_until_ms */
} kvm_tomb_state_t;

const char *kvm_tomb_state_name(kvm_tomb_state_t s);
bool kvm_route_tomb_transition_ok(kvm_tomb_state_t from, kvm_tomb_state_t to);

typedef struct kvm_route {
    kvm_ident_t ident; /* owned */
    kvm_route_version_t version;
    kvm_route_version_t predecessor_version; /* version this mutation replaced (NONE = first) */
    kvm_op_id_t content_op;                  /* accounting/content operation id */
    kvm_op_id_t predecessor_op;              /* content op of the replaced value, or nil */
    uint64_t length;                         /* object bytes (0 for a tombstone) */
    uint64_t checksum;                       /* XXH3-64 of the object (0 for a tombstone) */
    kvm_tomb_state_t tomb;
    uint64_t retain_until_ms; /* wall ms purge deadline: FINALIZED always, PENDING 0 or set */
    uint32_t n_replicas;
    kvm_hot_replica_t replicas[KVM_MAX_REPLICAS];
    kvm_cold_backing_t cold;
} kvm_route_t;

void kvm_route_init(kvm_route_t *r); /* zeroes; no allocation */
/* Empties r for a decoder that then writes every field of the route it decodes (wire_route.c,
 * src/route/route_pack.c): as kvm_route_init, but the replica slots and the cold locator's
 * bytes are left as they are (no field is read at or above n_replicas, nor past locator_len:
 * kvm_route_equal, kvm_route_validate, the codecs). KVM_ROUTE_SPARSE_ZEROED: the bytes it
 * zeroes (282 of the record's 928 on x86-64). */
void kvm_route_init_sparse(kvm_route_t *r);
#define KVM_ROUTE_SPARSE_ZEROED                                                                    \
    (offsetof(kvm_route_t, replicas) + offsetof(kvm_cold_backing_t, u.mat.locator))
void kvm_route_free(kvm_route_t *r); /* frees the ident; r is zeroed after */
/* Deep copy; dst must be initialized and not own an ident (or be freed first). ENOMEM. */
int kvm_route_copy(kvm_route_t *dst, const kvm_route_t *src);
bool kvm_route_equal(const kvm_route_t *a, const kvm_route_t *b);
/* Checks every invariant above. Returns 0, or KVMESH_ECORRUPT with a message naming the first
 * violated invariant. */
int kvm_route_validate(const kvm_route_t *r);
static inline bool kvm_route_is_tombstone(const kvm_route_t *r)
{
    return r->tomb != KVM_TOMB_NONE;
}
/* Index of the replica in the same slot as `rep`, or -1. */
int kvm_route_find_replica(const kvm_route_t *r, const kvm_hot_replica_t *rep);
/* Appends a replica: KVMESH_ENOSPC when full, KVMESH_EEXIST when the slot is already listed. */
int kvm_route_add_replica(kvm_route_t *r, const kvm_hot_replica_t *rep);
/* Removes the replica in `rep`'s slot, keeping order: KVMESH_ENOENT when absent. */
int kvm_route_remove_replica(kvm_route_t *r, const kvm_hot_replica_t *rep);

typedef enum kvm_reclaim_state {
    KVM_RECLAIM_PLANNED = 1,
    KVM_RECLAIM_BACKEND_DELETED = 2,
    KVM_RECLAIM_USAGE_RELEASED = 3,
} kvm_reclaim_state_t;

typedef struct kvm_cold_reclaim {
    kvm_op_id_t reclaim_op;
    kvm_op_id_t content_op;
    kvm_op_id_t cold_op;
    kvm_tier_id_t tier;
    uint16_t locator_len;
    uint8_t locator[KVM_COLD_LOCATOR_MAX_LEN];
    uint64_t length;
    kvm_reclaim_state_t state;
} kvm_cold_reclaim_t;

const char *kvm_reclaim_state_name(kvm_reclaim_state_t s);
bool kvm_reclaim_transition_ok(kvm_reclaim_state_t from, kvm_reclaim_state_t to);
/* Advances the state; asserts the transition is legal (a programmer error otherwise). */
void kvm_cold_reclaim_set_state(kvm_cold_reclaim_t *rec, kvm_reclaim_state_t to);
/* Plans the reclaim of a materialized backing (state PLANNED). Asserts kind == MATERIALIZED. */
void kvm_cold_reclaim_plan(kvm_cold_reclaim_t *out, const kvm_op_id_t *reclaim_op,
                           const kvm_cold_backing_t *materialized);
bool kvm_cold_reclaim_equal(const kvm_cold_reclaim_t *a, const kvm_cold_reclaim_t *b);
/* All three op ids valid and pairwise distinct, tier non-nil, locator 1..max bytes, known
 * state. Returns 0 or KVMESH_ECORRUPT with a message. */
int kvm_cold_reclaim_validate(const kvm_cold_reclaim_t *rec);

#endif
