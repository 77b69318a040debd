/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_table.h — the routes one authority holds for one logical shard: an ordered map
 * ident -> route (a B-tree of entry pointers, route_index.h, canonical-encoding order), owner scans
 * (owner runtime id, ident) over every hot replica owner of every route held, and the tombstone
 * expiry index (retain_until_ms, ident) -> entry over every tombstone with a purge deadline
 * (finalized, or pending with retain_until_ms set), which the purge reads from its earliest end
 * (route_table_tomb_first), never by scanning the map.
 *
 * Memory (docs/performance.md "Memory per object"): an entry is one record of the table's pool
 * (core/slab.h: no malloc header, sizes rounded to 8 bytes) holding a small header, the
 * identity's canonical encoding and the route in its packed form (route_pack.h: interned ids,
 * varints, replicas and cold backing sized to their content), ~56 bytes plus ~9 of index for a
 * one-replica route instead of a kvm_route_t's 928. A freed entry's record is reused by entries
 * of its size; the pool's chunks are released when the table is cleared. A caller reads a route
 * through a view (route_table_view) unpacked on demand. Owner scans walk the map from the cursor
 * and test each entry's replicas (no per-owner index nodes): O(entries skipped) per call, and O(1)
 * for an owner that no entry of the table names (the interning set counts replica-owner
 * references).
 *
 * Invariants (route_table_check): every entry's route validates; the interning reference
 * counts equal the references the packed routes hold; the expiry index holds exactly the
 * entries whose route is a tombstone with retain_until_ms != 0.
 *
 * Ownership: the table owns its entries and their routes (packed copies of what was put). An
 * entry pointer, and every view or ident taken from it, is valid until the next put/del/clear
 * of that key or table. Loop thread only.
 */
#ifndef KVMESH_ROUTE_ROUTE_TABLE_H
#define KVMESH_ROUTE_ROUTE_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/route.h"
#include "route/route_pack.h"

typedef struct route_entry route_entry_t;
typedef struct route_table route_table_t;

struct route_entry {
    bool busy;  /* primary: a mirror of this key is in flight */
    bool dirty; /* primary: the last mirror was partial; re-mirror before the next mutation */
    uint16_t priv_enc_len, priv_len; /* route_table.c: ident encoding and packed route bytes */
};

route_table_t *route_table_new(void); /* NULL when out of memory */
void route_table_free(route_table_t *t);
void route_table_clear(route_table_t *t);
size_t route_table_count(const route_table_t *t);

route_entry_t *route_table_get(route_table_t *t, const kvm_ident_t *ident);
/* Inserts or replaces the route of r->ident with a packed copy of r (busy/dirty kept on
 * replace; r may be a view of this table). KVMESH_ENOMEM. *out (may be NULL) gets the entry. */
int route_table_put(route_table_t *t, const kvm_route_t *r, route_entry_t **out);
/* route_table_put with r->ident's entry already looked up: at is route_table_get(t, &r->ident)
 * (NULL: absent), unchanged since. A replacing route that packs to the entry's size is written
 * over the entry in place (*out == at then). */
int route_table_put_at(route_table_t *t, route_entry_t *at, const kvm_route_t *r,
                       route_entry_t **out);
void route_table_del(route_table_t *t, route_entry_t *e);

/*
 * The route of e, unpacked into *out. out->ident is a borrowed view of the entry's identity
 * (route_entry_ident): never kvm_route_free a view; kvm_route_copy it to keep it.
 */
void route_table_view(const route_table_t *t, const route_entry_t *e, kvm_route_t *out);
/* The identity of e, as a borrowed view (enc points into the entry; never kvm_ident_free it). */
kvm_ident_t route_entry_ident(const route_entry_t *e);
/* The version of e's route (without unpacking the rest). */
kvm_route_version_t route_entry_version(const route_entry_t *e);
/* The version, content op, tombstone state and retention of e's route (rp_head: without
 * unpacking the rest; what a CAS decides on). */
void route_table_head(const route_table_t *t, const route_entry_t *e, rp_head_t *out);

/* First entry with ident > after (after NULL = the first entry), or NULL. */
route_entry_t *route_table_next(route_table_t *t, const kvm_ident_t *after);
/* The entry after e in ident order, or NULL. */
route_entry_t *route_table_after(route_table_t *t, route_entry_t *e);
/* First entry referencing owner with ident > after (NULL = from the start), or NULL. */
route_entry_t *route_table_owner_next(route_table_t *t, const kvm_runtime_id_t *owner,
                                      const kvm_ident_t *after);
/* The first entry after e in ident order referencing owner, or NULL. */
route_entry_t *route_table_owner_after(route_table_t *t, const kvm_runtime_id_t *owner,
                                       route_entry_t *e);

/* The indexed tombstone with the earliest retain_until_ms (ties by ident), or NULL; and the
 * next one after e in that order. */
route_entry_t *route_table_tomb_first(route_table_t *t);
route_entry_t *route_table_tomb_next(route_table_t *t, route_entry_t *e);
size_t route_table_tomb_count(const route_table_t *t);

/* What the table's memory is (kept up to date by put/del): the entry records (their pool's
 * chunks, its spare records and tail included), the expiry index nodes, the interning sets and the
 * table header. */
typedef struct route_table_mem {
    size_t entries;      /* entries held */
    size_t entry_bytes;  /* their records (header, ident encoding, packed route) and the pool's
                            spare bytes */
    size_t packed_bytes; /* of it: the packed routes alone */
    size_t ident_bytes;  /* of it: the identity encodings */
    size_t index_bytes;  /* the ident order's index nodes (route_index.h) */
    size_t tomb_bytes;   /* expiry index nodes */
    size_t intern_bytes; /* interning sets (ids and segments) */
} route_table_mem_t;
void route_table_mem(const route_table_t *t, route_table_mem_t *out);

/* Checks the invariants above; returns 0 or KVMESH_ECORRUPT with a message. O(n). */
int route_table_check(route_table_t *t);

#endif
