/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bufpool.h — a bounded cache of large message buffers for one RPC endpoint (rpc.c): frame heads
 * and bodies sent, protobuf headers and payloads received. glibc gives freed blocks of a few
 * hundred KiB back to the kernel (heap trim, or munmap above the mmap threshold), so without a
 * cache every 256 KiB message faults its pages in again (docs/performance.md "tcp 256 KiB-1
 * MiB"). docs/rpc.md "Message buffers" describes it.
 *
 * Size classes are powers of two from BUFPOOL_MIN_BYTES to BUFPOOL_MAX_BYTES; smaller and larger
 * requests are plain malloc/free and never cached. At most BUFPOOL_PER_CLASS buffers per class,
 * and at most cap_bytes in all (counted by malloc_usable_size), are kept; a buffer that would
 * exceed either is freed.
 *
 * Ownership: every buffer bufpool_get returns is a plain malloc() block (of the class size), so
 * a holder may free() it instead of returning it (an RPC payload taken by a handler); and
 * bufpool_put takes any malloc() block (its class is found from malloc_usable_size), so a
 * buffer never has to remember where it came from. The pool itself is not thread-safe: one
 * endpoint, one loop thread.
 */
#ifndef KVMESH_NET_BUFPOOL_H
#define KVMESH_NET_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

#define BUFPOOL_MIN_SHIFT   16 /* 64 KiB: below it malloc keeps blocks in its bins anyway */
#define BUFPOOL_MAX_SHIFT   23 /* 8 MiB */
#define BUFPOOL_MIN_BYTES   (1ull << BUFPOOL_MIN_SHIFT)
#define BUFPOOL_MAX_BYTES   (1ull << BUFPOOL_MAX_SHIFT)
#define BUFPOOL_NCLASS      (BUFPOOL_MAX_SHIFT - BUFPOOL_MIN_SHIFT + 1)
#define BUFPOOL_PER_CLASS   8
#define BUFPOOL_DEFAULT_CAP (16ull << 20)

struct bufpool_stats {
    uint64_t hits;         /* bufpool_get served from the cache */
    uint64_t misses;       /* bufpool_get of a pooled size that had to malloc */
    uint64_t dropped;      /* bufpool_put of a pooled size freed: class or byte cap full */
    uint64_t cached_bytes; /* gauge: bytes held now (malloc_usable_size) */
    uint64_t cached_bufs;  /* gauge: buffers held now */
};

struct bufpool {
    uint64_t cap; /* bytes held at most; 0 = cache nothing */
    void *free[BUFPOOL_NCLASS][BUFPOOL_PER_CLASS];
    unsigned n[BUFPOOL_NCLASS];
    struct bufpool_stats st;
};

/* An empty pool that holds at most cap_bytes. */
void bufpool_init(struct bufpool *p, uint64_t cap_bytes);
/* Frees every cached buffer (buffers handed out stay valid: they are plain malloc blocks). */
void bufpool_clear(struct bufpool *p);

/* A malloc() block of at least n bytes (n > 0), or NULL when out of memory. */
void *bufpool_get(struct bufpool *p, size_t n);
/* Takes b (any malloc() block, or NULL): cached when its class has room, else freed. */
void bufpool_put(struct bufpool *p, void *b);

/* protobuf-c allocator callbacks over a pool (allocator_data = the pool). */
void *bufpool_pb_alloc(void *pool, size_t n);
void bufpool_pb_free(void *pool, void *b);

#endif
