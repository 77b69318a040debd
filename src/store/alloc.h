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
 *     and must never hold allocator metadata); blocks are found by offset in a hash table;
 *   - one 40-byte record per block (alloc_blk_t). A caller may embed the record of each of its
 *     allocated blocks in its own object (alloc_reserve_rec / alloc_reserve_at_rec): the store's
 *     replica slot is its block's record, so a stored object costs one allocation, not two.
 *
 * Invariants (alloc_check): blocks tile [0, size) in offset order; every free block is in
 * exactly the list of its class; no two physically adjacent blocks are both free; the used and
 * free byte counters equal the sums over the blocks.
 *
 * Ownership: alloc_new allocates; alloc_free releases every record the allocator owns (the
 * segment memory is not touched). A block's `user` pointer is the caller's. An embedded record
 * (alloc_reserve_rec) is the caller's while its block is allocated and must be the start of an
 * object from malloc (from the caller's rec_new's source with alloc_new_recs); alloc_release
 * hands that object to the allocator, which keeps it as the record of the free block it becomes
 * (or frees it, free() or rec_free, when the block merges with a neighbour).
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
/* The largest segment an allocator manages: 256 GiB, so that a block offset in ALLOC_ALIGN
 * units and a free block's size in units (less one) fit 32 bits (alloc_blk_t). */
#define ALLOC_MAX_SIZE (1ull << 38)
/* The largest block a caller may ask for: 4 GiB - 1 byte (an allocated block's length is a
 * 32-bit byte count). The store's max_object_size is validated against it (api/config.c). */
#define ALLOC_MAX_LEN UINT32_MAX

typedef struct alloc alloc_t;

/* A block record (40 bytes). While the block is allocated the allocator reads and writes every
 * word but fprev, which a caller embedding the record may overlay with a field of its own (the
 * store's slot keeps its deadline / commit sequence there: src/store/slot_core.h); off_u and len
 * are the caller's to read (alloc_blk_off), never to write. The record is the allocator's once the
 * block is free. */
typedef struct alloc_blk {
    uint32_t off_u; /* the offset in ALLOC_ALIGN units (alloc_blk_off: bytes) */
    union {
        uint32_t len;     /* allocated: the caller's length in bytes (the block is len rounded
                             up to ALLOC_ALIGN) */
        uint32_t size_m1; /* free: its size in ALLOC_ALIGN units, less one (a free block is at
                             least one unit; a whole 256 GiB segment is 2^32 units) */
    };
    uintptr_t prev_flags;        /* the physical predecessor | ALLOC_BLK_* flags (alloc.c) */
    struct alloc_blk *phys_next; /* the physical successor */
    struct alloc_blk *link;      /* allocated: hash chain; free: next in its free list */
    struct alloc_blk *fprev;     /* free: previous in its free list; allocated: unused */
} alloc_blk_t;

/* The offset of b's block in bytes. */
static inline uint64_t alloc_blk_off(const alloc_blk_t *b)
{
    return (uint64_t)b->off_u * ALLOC_ALIGN;
}

typedef struct alloc_stats {
    uint64_t size;           /* managed bytes */
    uint64_t used;           /* bytes in allocated blocks (rounded sizes) */
    uint64_t requested;      /* bytes callers asked for (sum over live allocations) */
    uint64_t free;           /* size - used */
    uint64_t largest_free;   /* the largest free block */
    uint64_t n_used, n_free; /* blocks */
    double fragmentation;    /* 1 - largest_free / free (0 when nothing is free) */
} alloc_stats_t;

/* Manages [0, size) (size rounded down to ALLOC_ALIGN; 0 < size <= ALLOC_MAX_SIZE). The
 * records of free blocks come from calloc and go to free(). */
int alloc_new(alloc_t **out, uint64_t size);

/* Where an allocator's records come from and go (alloc_new_recs): rec_new returns a zeroed
 * record of at least sizeof(alloc_blk_t) bytes for a free block (NULL: out of memory); rec_free
 * takes back every record the allocator lets go: its own, and the embedded records released to
 * it. The store's slot core keeps both kinds in its record pool (core/slab.h). */
typedef struct alloc_recs {
    alloc_blk_t *(*rec_new)(void *ctx);
    void (*rec_free)(void *ctx, alloc_blk_t *rec);
    void *ctx;
} alloc_recs_t;
/* alloc_new with the caller's records (recs copied). Such an allocator takes embedded records
 * only: alloc_reserve and alloc_reserve_at answer KVMESH_EINVAL. */
int alloc_new_recs(alloc_t **out, uint64_t size, const alloc_recs_t *recs);
void alloc_free(alloc_t *a);

/* Allocates len bytes (1..size): *offset receives the block offset. KVMESH_ENOSPC when no free
 * block is large enough, KVMESH_ETOOBIG above ALLOC_MAX_LEN. user is stored with the block. */
int alloc_reserve(alloc_t *a, uint64_t len, void *user, uint64_t *offset);
/* Allocates exactly [offset, offset + len) (offset a multiple of ALLOC_ALIGN; the block is len
 * rounded up to ALLOC_ALIGN): the hot-upgrade successor rebuilds the predecessor's allocation
 * state with it (src/store/handoff.c). KVMESH_EINVAL for a misaligned or out-of-range request
 * (KVMESH_ETOOBIG above ALLOC_MAX_LEN),
 * KVMESH_EEXIST when any byte of the range is already allocated. O(free blocks). */
int alloc_reserve_at(alloc_t *a, uint64_t offset, uint64_t len, void *user);
/* alloc_reserve and alloc_reserve_at with the caller's record rec (see Ownership): rec->off and
 * rec->len receive the block; no allocation is made (alloc_reserve_at_rec may allocate one free
 * record when the block splits a free block on both sides). On an error rec is not written
 * and stays the caller's. */
int alloc_reserve_rec(alloc_t *a, uint64_t len, alloc_blk_t *rec);
int alloc_reserve_at_rec(alloc_t *a, uint64_t offset, uint64_t len, alloc_blk_t *rec);
/* Frees the block at offset: KVMESH_ENOENT when no allocated block starts there. An embedded
 * record passes to the allocator (see Ownership). */
int alloc_release(alloc_t *a, uint64_t offset);
/* The user pointer and requested length of the allocated block at offset (ENOENT). For a
 * block reserved with an embedded record, *user is that record. */
int alloc_lookup(const alloc_t *a, uint64_t offset, void **user, uint64_t *len);
/* Would a request of len bytes succeed now? */
bool alloc_can_fit(const alloc_t *a, uint64_t len);

void alloc_stats(const alloc_t *a, alloc_stats_t *out);
/* Checks every invariant above; 0 or KVMESH_EINTERNAL with a message (tests). O(blocks). */
int alloc_check(const alloc_t *a);

#endif
