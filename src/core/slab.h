/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab.h — a pool of small fixed-size records carved from larger chunks (the route table's
 * entries, the owner's slot records: docs/performance.md "Memory per object"). Sizes are
 * rounded up to SLAB_ALIGN and each rounded size is a class with its own free list; a record
 * costs its rounded size, without malloc's per-allocation header and 16-byte rounding (~8-16
 * bytes per record at a million records).
 *
 *   - slab_alloc takes a record of the class from its free list, else carves it from the current
 *     chunk; a new chunk is malloc'd when the current one is used up (a quarter of the pool's
 *     bytes, within [SLAB_CHUNK_MIN, SLAB_CHUNK_MAX]: a pool with few records stays small and
 *     the newest chunk's unused tail stays below ~25% of the pool), and the tail left in the old
 *     chunk goes to the free list of its own size;
 *   - slab_free is sized: the caller gives the size it allocated with (the records know their
 *     own sizes), so no per-record header is needed;
 *   - a size above SLAB_MAX goes to malloc/free unchanged.
 * A freed record stays in its class (it is not merged or handed to another size) until the pool
 * is reset or finished: the memory of a pool is the peak of each class, not the live records.
 *
 * Invariants (slab_check): every free record lies inside a chunk; live + free + unused tail
 * bytes = chunk bytes (less the chunk headers).
 *
 * Ownership: the pool owns its chunks; a record is the caller's from slab_alloc to slab_free.
 * slab_fini / slab_reset release every chunk (records not freed become invalid). Not
 * thread-safe: one pool per owner thread (the route table's and the slot core's loop thread).
 */
#ifndef KVMESH_CORE_SLAB_H
#define KVMESH_CORE_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLAB_ALIGN     8u                      /* record sizes and addresses: multiples of this */
#define SLAB_MAX       256u                    /* larger records go to malloc */
#define SLAB_CLASSES   (SLAB_MAX / SLAB_ALIGN) /* one free list per rounded size */
#define SLAB_CHUNK_MIN 1024u                   /* the first chunk of a pool */
#define SLAB_CHUNK_MAX (64u * 1024u)           /* the largest chunk */

struct slab_chunk;

typedef struct slab {
    void *free[SLAB_CLASSES]; /* class i: records of (i + 1) * SLAB_ALIGN bytes */
    struct slab_chunk *chunks;
    uint8_t *bump, *end; /* the unused tail of the newest chunk */
    size_t chunk_next;   /* the size of the next chunk */
    size_t chunk_bytes;  /* bytes of every chunk (headers included) */
    size_t live_bytes;   /* rounded sizes of the records handed out (slab-sized ones) */
    size_t big_live;     /* records above SLAB_MAX handed out (malloc'd) */
    size_t limit;        /* chunk_bytes at most (0: no limit); slab_alloc fails past it */
} slab_t;

typedef struct slab_stats {
    size_t chunk_bytes; /* memory the pool holds in chunks */
    size_t live_bytes;  /* of it: records handed out (rounded sizes) */
    size_t free_bytes;  /* of it: records on the free lists */
    size_t big_live;    /* records above SLAB_MAX (malloc'd, not in chunks) */
} slab_stats_t;

void slab_init(slab_t *s);
void slab_fini(slab_t *s); /* releases every chunk; s is empty (and usable) afterwards */
/* Releases every chunk when no record is live (nothing handed out); returns whether it did. */
bool slab_reset_if_empty(slab_t *s);
/* Caps the pool's chunk bytes (tests force the out-of-memory path with it). */
void slab_set_limit(slab_t *s, size_t bytes);

/* The bytes a record of size bytes costs in the pool (size rounded up to SLAB_ALIGN). */
static inline size_t slab_size(size_t size)
{
    return (size + SLAB_ALIGN - 1) & ~(size_t)(SLAB_ALIGN - 1);
}

/* A zeroed record of size (>= 1) bytes, aligned to SLAB_ALIGN (to malloc's above SLAB_MAX), or
 * NULL when out of memory (or past the limit). */
void *slab_alloc(slab_t *s, size_t size);
/* Returns p (NULL: nothing), allocated by slab_alloc(s, size) with this size. */
void slab_free(slab_t *s, void *p, size_t size);

void slab_stats(const slab_t *s, slab_stats_t *out); /* O(free records) */
/* Checks the invariants above; 0 or KVMESH_EINTERNAL with a message. O(chunks * free). */
int slab_check(const slab_t *s);

#endif
