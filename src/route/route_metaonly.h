/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_metaonly.h — ROUTE_MODE_METADATA_ONLY: object routes stored directly in the metadata
 * backend (keyspace family KS_ROUTE), for bring-up, debugging and compatibility testing. Same
 * semantics as the route.h functions it backs (route_dispatch.c forwards route_* to route_mo_*):
 *
 *   - lookup: one meta_get of routes/<tenant>/<domain|~>/<key>; a finalized tombstone whose
 *     retention passed reads as absent;
 *   - CAS: one txn reading the route and its shard's version floor (route-floors/<shard>),
 *     compare the stored version with `expected`, then one meta_txn guarded by the key's
 *     mod_rev, and for an absent key by the floor's mod_rev too (a concurrent writer or purge
 *     makes the txn fail, and the CAS re-reads; bounded by ROUTE_MO_CAS_RETRIES). The version is
 *     (ROUTE_MO_TOKEN, max(previous sequence, floor) + 1): strictly increasing per key, also
 *     across deletes and purges. Writing a tombstone with a purge deadline (finalized, or
 *     pending with retain_until_ms set) also writes its expiry index
 *     entry (route-due/<retain until>/<tenant>/<domain>/<key>) in the same txn;
 *   - purge: every runtime, once a second (at once again while a whole page was due), ranges
 *     the expiry index from its start and deletes each due tombstone with its entry in one txn
 *     guarded by the route's and the floor's mod_rev, raising the floor to its sequence;
 *   - owner scan: a paginated range over the whole route family (cursor = last key read),
 *     filtered by replica owner; `complete` only when the range reported no more keys.
 *
 * Every operation is a metadata call: this mode is proportional to the request count by
 * design (the EmbeddedWrh mesh is the mode that keeps the hot path off metadata).
 *
 * Threading and ownership as route.h: one loop thread; routes passed to callbacks are valid
 * during the callback only. route_mo_free completes pending calls with KVMESH_ECANCELED.
 */
#ifndef KVMESH_ROUTE_ROUTE_METAONLY_H
#define KVMESH_ROUTE_ROUTE_METAONLY_H

#include "route/route.h"

#define ROUTE_MO_TOKEN       1u /* fencing token of every MetadataOnly version */
#define ROUTE_MO_CAS_RETRIES 16 /* re-reads after a concurrent writer changed the key */

typedef struct route_mo route_mo_t;

int route_mo_new(route_mo_t **out, const route_svc_opts_t *opts, void (*cb)(void *, int),
                 void *arg);
void route_mo_free(route_mo_t *mo);
void route_mo_set_members(route_mo_t *mo, uint64_t generation, const route_member_t *members,
                          size_t n);
void route_mo_on_message(route_mo_t *mo, const env_msg_t *msg);
int route_mo_lookup(route_mo_t *mo, const kvm_ident_t *ident, route_lookup_cb cb, void *arg);
int route_mo_cas(route_mo_t *mo, const kvm_route_version_t *expected, const kvm_route_t *next,
                 route_cas_cb cb, void *arg);
int route_mo_owner_scan(route_mo_t *mo, const kvm_runtime_id_t *owner, const uint8_t *cursor,
                        size_t cursor_len, uint32_t limit, route_owner_cb cb, void *arg);
void route_mo_get_stats(const route_mo_t *mo, route_stats_t *out);
/* Any thread: tombstones this runtime purged from metadata (route_table_counts). */
uint64_t route_mo_purged(const route_mo_t *mo);
/* Any thread: purge txns that failed without a definite answer (their tombstone may be gone
 * uncounted; route_table_purge_unknown). */
uint64_t route_mo_purge_unknown(const route_mo_t *mo);

/* Encodes / checks the cluster policy record (text "mode=M top_k=K shards=S proto=P"). */

#endif
