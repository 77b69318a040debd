/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_index.h — an ordered set of item pointers keyed by byte strings (a B-tree of pointers),
 * the route table's ident order (route_table.c). Items are the caller's; the index stores only
 * their pointers (8 bytes per item in nodes about 50-100% full, instead of per-item tree links)
 * and reads each item's key through the key function given at init. Keys compare as bytes
 * (memcmp, then the shorter first) and are unique in an index.
 *
 * Invariants (ridx_check): items in strictly increasing key order in-order; every node but
 * the root holds RIDX_MIN..RIDX_MAX items, an inner node one more child than items; all leaves
 * at the same depth; the count equals the items held.
 *
 * Ownership: the index owns its nodes, never the items. An item's key must not change while it
 * is in the index. An iterator is valid until the next insert/remove/replace/clear. Not
 * thread-safe (the route table's loop thread only).
 */
#ifndef KVMESH_ROUTE_ROUTE_INDEX_H
#define KVMESH_ROUTE_ROUTE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RIDX_T     16               /* minimum degree */
#define RIDX_MAX   (2 * RIDX_T - 1) /* items per node at most */
#define RIDX_MIN   (RIDX_T - 1)     /* items per non-root node at least */
#define RIDX_DEPTH 20               /* > log_RIDX_T(2^64) + 1 */

/* The key of item (borrowed; valid while the item is unchanged). */
typedef const uint8_t *(*ridx_key_fn)(const void *item, size_t *len);

typedef struct ridx_node ridx_node_t;

typedef struct ridx {
    ridx_node_t *root;
    ridx_key_fn key;
    size_t count;
    size_t bytes; /* node allocations (requested sizes) */
} ridx_t;

typedef struct ridx_iter {
    int depth; /* entries in node/pos; 0 = at the end */
    ridx_node_t *node[RIDX_DEPTH];
    uint16_t pos[RIDX_DEPTH];
} ridx_iter_t;

/* The order of the index: bytewise, a key before every longer key it is a prefix of (<0, 0, >0). */
int route_key_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb);

void ridx_init(ridx_t *x, ridx_key_fn key);
/* Frees the nodes; calls each(item, ctx) on every item first (each may be NULL; it may free the
 * item). The index is empty afterwards. */
void ridx_clear(ridx_t *x, void (*each)(void *item, void *ctx), void *ctx);

/* The item whose key equals k, or NULL. */
void *ridx_find(const ridx_t *x, const uint8_t *k, size_t len);
/* Inserts item (its key must not be in x). 0 or KVMESH_ENOMEM (x unchanged in content). */
int ridx_insert(ridx_t *x, void *item);
/* Replaces the item whose key equals item's key by item (no allocation); returns the old one,
 * or NULL when no item has that key (x unchanged). */
void *ridx_replace(ridx_t *x, void *item);
/* Removes and returns the item whose key equals k, or NULL. */
void *ridx_remove(ridx_t *x, const uint8_t *k, size_t len);

/* it at the first item with key >= k (> k when strict); k NULL: the first item. */
void ridx_seek(const ridx_t *x, ridx_iter_t *it, const uint8_t *k, size_t len, bool strict);
/* The item at it, or NULL at the end. */
void *ridx_iter_get(const ridx_iter_t *it);
/* Moves it to the next item in key order (no-op at the end). */
void ridx_iter_next(ridx_iter_t *it);

/* Checks the invariants above; 0 or KVMESH_ECORRUPT with a message. O(n). */
int ridx_check(const ridx_t *x);

#endif
