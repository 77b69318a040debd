/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_pack.h — the compact in-memory form of a route that a route table keeps per entry
 * (route_table.c), and the id interning it relies on. Memory only: never on the wire or in
 * metadata (the wire form is wire_route_encode's), so it may change with the code.
 *
 * A packed route is a byte string of LEB128 varints in which every 16-byte id (op writers,
 * replica owners, the cold owner and tier) and every segment id is replaced by its index in
 * the table's interning sets, replica length/checksum are omitted when they equal the route's
 * (the validated case), and absent parts (predecessor op, retention, cold backing) take no
 * bytes. A typical one-replica route packs into ~30 bytes instead of kvm_route_t's 928.
 * Packing is lossless for every field kvm_route_equal compares (unpack(pack(r)) equals r).
 *
 * Layout (F_* flags in the first byte):
 *   u8 flags | v n_replicas | per replica (at most KVM_MAX_REPLICAS):
 *       v owner | v segment | v offset | [!F_EXACT: v length | u64 checksum]
 *   | v version.token | v version.seq | [F_SAME_TOKEN: v pred.seq | else v pred.token, v pred.seq]
 *   | op content | [F_PRED_OP: op predecessor] | v length | u64 checksum | v tomb
 *   | [F_RETAIN: v retain_until_ms] | [F_COLD: v kind | op cold_op | op content_op | v owner
 *       | v tier | PENDING: v expected_length, u64 expected_checksum
 *                | MATERIALIZED: v length, u64 checksum, v locator_len, locator bytes]
 *   where op = v writer | v epoch | v seq, and u64 is 8 bytes little-endian.
 * The replicas come first so an owner-index probe (rp_has_owner) reads only them.
 *
 * Interning (rp_intern_t): a set of 16-byte keys with a reference count each; an index is
 * stable while referenced and is reused after its last reference goes. Each packed route holds
 * one reference per id occurrence. `orefs` additionally counts the occurrences as a replica
 * owner, so an owner scan for an owner no entry holds answers at once.
 *
 * Ownership: an rp_intern_t owns its arrays (rp_intern_fini releases them). Loop thread only.
 */
#ifndef KVMESH_ROUTE_ROUTE_PACK_H
#define KVMESH_ROUTE_ROUTE_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "core/route.h"

#define RP_MAX_PACKED 1280u /* bound of a packed route (asserted by rp_pack) */

typedef struct rp_intern {
    kvm_id128_t *keys;
    uint32_t *refs, *orefs; /* references; of them as a replica owner */
    uint32_t n, cap;        /* slots in use (live or free) and allocated */
    uint32_t *free_list, n_free;
    uint32_t *map; /* open addressing, linear probing: index + 1, 0 = empty */
    uint32_t mcap; /* power of two, or 0 */
    uint32_t live;
} rp_intern_t;

/* The two interning sets of a table: 16-byte runtime/tier ids and 64-bit segment ids. */
typedef struct rp_sets {
    rp_intern_t ids, segs;
} rp_sets_t;

void rp_sets_fini(rp_sets_t *s);
/* Bytes the sets' arrays take (for the footprint accounting). */
size_t rp_sets_bytes(const rp_sets_t *s);
/* Index of id, or -1 when no packed route references it. */
int64_t rp_intern_find(const rp_intern_t *in, const kvm_id128_t *id);
/* Occurrences of id idx as a replica owner. */
uint32_t rp_owner_refs(const rp_intern_t *in, uint32_t idx);

/* Packs r into out (RP_MAX_PACKED bytes), taking one reference per id it names: *len gets
 * the bytes. KVMESH_ENOMEM (nothing referenced then). */
int rp_pack(rp_sets_t *s, const kvm_route_t *r, uint8_t *out, size_t *len);
/* Drops the references a packed route holds (its bytes are not needed after). */
void rp_unref(rp_sets_t *s, const uint8_t *p, size_t len);
/* Unpacks into out (kvm_route_init'ed here); out->ident is left zeroed for the caller. */
void rp_unpack(const rp_sets_t *s, const uint8_t *p, size_t len, kvm_route_t *out);
/* The version alone (reads the replicas and the version only). */
kvm_route_version_t rp_version(const uint8_t *p, size_t len);
/* The fields a CAS decides on (route_auth.c), read without unpacking the rest. */
typedef struct rp_head {
    kvm_route_version_t version;
    kvm_op_id_t content_op;
    kvm_tomb_state_t tomb;
    uint64_t retain_until_ms;
} rp_head_t;
/* Those fields alone: what rp_unpack gives for them, with no replica, predecessor or cold
 * backing read (only the content op's writer is looked up). */
void rp_head(const rp_sets_t *s, const uint8_t *p, size_t len, rp_head_t *out);
/* Does the packed route list owner index idx among its replicas? */
bool rp_has_owner(const uint8_t *p, size_t len, uint32_t idx);
/* Recounts the references of every packed route given (counts arrays of in->n entries,
 * zeroed by the caller) — route_table_check compares them with refs/orefs. */
void rp_count(const uint8_t *p, size_t len, uint32_t *id_refs, uint32_t *id_orefs,
              uint32_t *seg_refs);

#endif
