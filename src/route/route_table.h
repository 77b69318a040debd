/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_table.h — the routes one authority holds for one logical shard: an ordered map
 * ident -> route (red-black tree, canonical-encoding order), the owner-to-key index
 * (owner runtime id, ident) -> entry over every hot replica owner of every route held, and the
 * tombstone expiry index (retain_until_ms, ident) -> entry over every finalized tombstone, which
 * the purge reads from its earliest end (route_table_tomb_first), never by scanning the map.
 *
 * Invariants (route_table_check): every entry's route validates; the owner index holds exactly
 * one ref per distinct replica owner of every entry, and nothing else; the expiry index holds
 * exactly the entries whose route is a finalized tombstone.
 *
 * Ownership: the table owns its entries and their routes (deep copies of what was put). An
 * entry pointer is valid until the next put/del/clear of that key or table. Loop thread only.
 */
#ifndef KVMESH_ROUTE_ROUTE_TABLE_H
#define KVMESH_ROUTE_ROUTE_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/route.h"

typedef struct route_entry route_entry_t;
typedef struct route_table route_table_t;

struct route_entry {
    kvm_route_t route;
    bool busy;  /* primary: a mirror of this key is in flight */
    bool dirty; /* primary: the last mirror was partial; re-mirror before the next mutation */
    void *priv_tree[4];                 /* tree links (route_table.c) */
    void *priv_owner[KVM_MAX_REPLICAS]; /* owner index refs (route_table.c) */
    unsigned n_owner_refs;
    void *priv_tomb; /* expiry index ref (route_table.c); NULL unless a finalized tombstone */
};

route_table_t *route_table_new(void); /* NULL when out of memory */
void route_table_free(route_table_t *t);
void route_table_clear(route_table_t *t);
size_t route_table_count(const route_table_t *t);

route_entry_t *route_table_get(route_table_t *t, const kvm_ident_t *ident);
/* Inserts or replaces the route of r->ident with a deep copy of r (busy/dirty kept on replace).
 * KVMESH_ENOMEM. *out (may be NULL) gets the entry. */
int route_table_put(route_table_t *t, const kvm_route_t *r, route_entry_t **out);
void route_table_del(route_table_t *t, route_entry_t *e);

/* First entry with ident > after (after NULL = the first entry), or NULL. */
route_entry_t *route_table_next(route_table_t *t, const kvm_ident_t *after);
/* First entry referencing owner with ident > after (NULL = from the start), or NULL. */
route_entry_t *route_table_owner_next(route_table_t *t, const kvm_runtime_id_t *owner,
                                      const kvm_ident_t *after);

/* The finalized tombstone with the earliest retain_until_ms (ties by ident), or NULL; and the
 * next one after e in that order. */
route_entry_t *route_table_tomb_first(route_table_t *t);
route_entry_t *route_table_tomb_next(route_table_t *t, route_entry_t *e);
size_t route_table_tomb_count(const route_table_t *t);

/* Checks the invariants above; returns 0 or KVMESH_ECORRUPT with a message. O(n). */
int route_table_check(route_table_t *t);

#endif
