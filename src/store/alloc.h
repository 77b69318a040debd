/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.h — the storage owner's allocator for one segment: a two-level segregated-fit
 * allocator (TLSF style) over the byte range [0, size) of a segment.
 *
 *   - O(1) allocate and free for every size: a first-level index (power of two) and
 *     ALLOC_SL_COUNT second-level subdivisions, each with a free list; two bitmaps find the
 *     first non-empty list at or above a size class with two find-first-set operations;
 *   - good fit: a request is rounded up to its class boundary, so any block of the found list
 *     fits; the remainder of a split block goes back to its own list; free merges with both
 *     physical neighbours at once (no two adjacent free blocks ever exist);
 *   - bounded fragmentation: internal waste per block < 1/ALLOC_SL_COUNT of its size plus
 *     ALLOC_ALIGN; alloc_stats() measures utilisation and external fragmentation;
 *   - bookkeeping lives outside the segment (the segment's bytes are written by remote peers
 *     and must never hold allocator metadata); blocks are found by offset in a hash table.
 *
 * Invariants (alloc_check): blocks tile [0, size) in offset order; every free block is in
 * exactly the list of its class; no two physically adjacent blocks are both free; the used and
 * free byte counters equal the sums over the blocks.
 *
 * Ownership: alloc_new allocates; alloc_free releases everything (the segment memory is not
 * touched). A block's `user` pointer is the caller's (the store keeps its replica record there).
 * Threading: none; the owner's loop thread only.
 */
#ifndef KVMESH_STORE_ALLOC_H
#define KVMESH_STORE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ALLOC_ALIGN    64u /* every block offset and size is a multiple of this */
#define ALLOC_SL_LOG2  4u
#define ALLOC_SL_COUNT (1u << ALLOC_SL_LOG2) /* second-level lists per first level */
#define ALLOC_FL_COUNT 40u                   /* first levels: up to 2^(40+4) * 64 bytes */
#define ALLOC_MAX_SIZE (1ull << 40)          /* largest segment an allocator manages */

typedef struct alloc alloc_t;

typedef struct alloc_stats {
    uint64_t size;           /* managed bytes */
    uint64_t used;           /* bytes in allocated blocks (rounded sizes) */
    uint64_t requested;      /* bytes callers asked for (sum over live allocations) */
    uint64_t free;           /* size - used */
    uint64_t largest_free;   /* the largest free block */
    uint64_t n_used, n_free; /* blocks */
    double fragmentation;    /* 1 - largest_free / free (0 when nothing is free) */
} alloc_stats_t;

/* Manages [0, size) (size rounded down to ALLOC_ALIGN; 0 < size <= ALLOC_MAX_SIZE). */
int alloc_new(alloc_t **out, uint64_t size);
void alloc_free(alloc_t *a);

/* Allocates len bytes (1..size): *offset receives the block offset. KVMESH_ENOSPC when no free
 * block is large enough. user is stored with the block. */
int alloc_reserve(alloc_t *a, uint64_t len, void *user, uint64_t *offset);
/* Allocates exactly [offset, offset + len) (offset a multiple of ALLOC_ALIGN; the block is len
 * rounded up to ALLOC_ALIGN): the hot-upgrade successor rebuilds the predecessor's allocation
 * state with it (src/store/handoff.c). KVMESH_EINVAL for a misaligned or out-of-range request,
 * KVMESH_EEXIST when any byte of the range is already allocated. O(free blocks). */
int alloc_reserve_at(alloc_t *a, uint64_t offset, uint64_t len, void *user);
/* Frees the block at offset: KVMESH_ENOENT when no allocated block starts there. */
int alloc_release(alloc_t *a, uint64_t offset);
/* The user pointer and requested length of the allocated block at offset (ENOENT). */
int alloc_lookup(const alloc_t *a, uint64_t offset, void **user, uint64_t *len);
/* Would a request of len bytes succeed now? */
bool alloc_can_fit(const alloc_t *a, uint64_t len);

void alloc_stats(const alloc_t *a, alloc_stats_t *out);
/* Checks every invariant above; 0 or KVMESH_EINTERNAL with a message (tests). O(blocks). */
int alloc_check(const alloc_t *a);

#endif
