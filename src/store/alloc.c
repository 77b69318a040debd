/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.c — two-level segregated-fit allocator (see alloc.h).
 *
 * Size classes are computed in units of ALLOC_ALIGN: u < ALLOC_SL_COUNT maps to (fl 0, sl u);
 * otherwise fl = log2(u) - ALLOC_SL_LOG2 + 1 and sl = the ALLOC_SL_LOG2 bits below the top bit.
 * Block records come from a free-record pool (no malloc on the common path once warm) and are
 * indexed by offset in an open hash table with chaining, sized to the block count.
 */
#include "store/alloc.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct blk {
    uint64_t off, size; /* bytes; multiples of ALLOC_ALIGN */
    uint64_t requested; /* allocated: the caller's length */
    bool is_free;
    struct blk *phys_prev, *phys_next; /* physical neighbours */
    struct blk *fnext, *fprev;         /* free list */
    struct blk *hnext;                 /* hash chain (allocated blocks only) */
    void *user;
};

struct alloc {
    uint64_t size;
    uint64_t used, requested;
    uint64_t n_used, n_free;
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[ALLOC_FL_COUNT];
    struct blk *lists[ALLOC_FL_COUNT][ALLOC_SL_COUNT];
    struct blk **htab; /* allocated blocks by offset */
    size_t hcap;       /* power of two */
    struct blk *pool;  /* recycled records */
};

static unsigned log2_u64(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

static void mapping(uint64_t size, unsigned *fl, unsigned *sl)
{
    uint64_t u = size / ALLOC_ALIGN;
    if (u < ALLOC_SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)u;
        return;
    }
    unsigned t = log2_u64(u);
    *fl = t - ALLOC_SL_LOG2 + 1;
    *sl = (unsigned)((u >> (t - ALLOC_SL_LOG2)) - ALLOC_SL_COUNT);
}

/* Rounds a request up to the start of the next class so any block in its list fits. */
static uint64_t round_request(uint64_t size)
{
    uint64_t u = size / ALLOC_ALIGN;
    if (u < ALLOC_SL_COUNT)
        return size;
    unsigned t = log2_u64(u);
    uint64_t step = (1ull << (t - ALLOC_SL_LOG2)) * ALLOC_ALIGN;
    return (size + step - 1) & ~(step - 1);
}

static uint64_t hslot(const alloc_t *a, uint64_t off)
{
    uint64_t h = (off / ALLOC_ALIGN) * 0x9E3779B97F4A7C15ull;
    return (h >> 17) & (a->hcap - 1);
}

static struct blk *blk_get(alloc_t *a)
{
    struct blk *b = a->pool;
    if (b)
        a->pool = b->fnext;
    else
        b = malloc(sizeof(*b));
    if (b)
        memset(b, 0, sizeof(*b));
    return b;
}

static void blk_put(alloc_t *a, struct blk *b)
{
    b->fnext = a->pool;
    a->pool = b;
}

static void list_insert(alloc_t *a, struct blk *b)
{
    unsigned fl, sl;
    mapping(b->size, &fl, &sl);
    b->is_free = true;
    b->fprev = NULL;
    b->fnext = a->lists[fl][sl];
    if (b->fnext)
        b->fnext->fprev = b;
    a->lists[fl][sl] = b;
    a->fl_bitmap |= 1ull << fl;
    a->sl_bitmap[fl] |= 1u << sl;
    a->n_free++;
}

static void list_remove(alloc_t *a, struct blk *b)
{
    unsigned fl, sl;
    mapping(b->size, &fl, &sl);
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        a->lists[fl][sl] = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    if (!a->lists[fl][sl]) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (!a->sl_bitmap[fl])
            a->fl_bitmap &= ~(1ull << fl);
    }
    b->is_free = false;
    b->fnext = b->fprev = NULL;
    a->n_free--;
}

static int htab_grow(alloc_t *a)
{
    size_t ncap = a->hcap ? a->hcap * 2 : 64;
    struct blk **nt = calloc(ncap, sizeof(*nt));
    if (!nt)
        return KVMESH_ENOMEM;
    struct blk **old = a->htab;
    size_t ocap = a->hcap;
    a->htab = nt;
    a->hcap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        for (struct blk *b = old[i], *n; b; b = n) {
            n = b->hnext;
            uint64_t s = hslot(a, b->off);
            b->hnext = nt[s];
            nt[s] = b;
        }
    }
    free(old);
    return 0;
}

static struct blk *htab_find(const alloc_t *a, uint64_t off)
{
    if (!a->hcap)
        return NULL;
    for (struct blk *b = a->htab[hslot(a, off)]; b; b = b->hnext)
        if (b->off == off)
            return b;
    return NULL;
}

static void htab_del(alloc_t *a, struct blk *x)
{
    struct blk **pp = &a->htab[hslot(a, x->off)];
    while (*pp != x)
        pp = &(*pp)->hnext;
    *pp = x->hnext;
    x->hnext = NULL;
}

int alloc_new(alloc_t **out, uint64_t size)
{
    *out = NULL;
    size &= ~(uint64_t)(ALLOC_ALIGN - 1);
    if (size == 0 || size > ALLOC_MAX_SIZE)
        return kvm_errf(KVMESH_EINVAL, "allocator size %llu is outside [%u, %llu]",
                        (unsigned long long)size, ALLOC_ALIGN, (unsigned long long)ALLOC_MAX_SIZE);
    alloc_t *a = calloc(1, sizeof(*a));
    if (!a)
        return KVMESH_ENOMEM;
    a->size = size;
    struct blk *b = blk_get(a);
    if (!b || htab_grow(a) != 0) {
        free(b);
        free(a->htab);
        free(a);
        return KVMESH_ENOMEM;
    }
    b->off = 0;
    b->size = size;
    list_insert(a, b);
    *out = a;
    return 0;
}

void alloc_free(alloc_t *a)
{
    if (!a)
        return;
    /* Walk the physical chain from the first block. */
    struct blk *first = NULL;
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT && !first; fl++)
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT && !first; sl++)
            if (a->lists[fl][sl])
                first = a->lists[fl][sl];
    for (size_t i = 0; i < a->hcap && !first; i++)
        if (a->htab[i])
            first = a->htab[i];
    while (first && first->phys_prev)
        first = first->phys_prev;
    for (struct blk *b = first, *n; b; b = n) {
        n = b->phys_next;
        free(b);
    }
    for (struct blk *b = a->pool, *n; b; b = n) {
        n = b->fnext;
        free(b);
    }
    free(a->htab);
    free(a);
}

static struct blk *find_suitable(alloc_t *a, uint64_t size)
{
    unsigned fl, sl;
    mapping(size, &fl, &sl);
    if (fl >= ALLOC_FL_COUNT)
        return NULL;
    uint32_t slmap = a->sl_bitmap[fl] & (~0u << sl);
    if (!slmap) {
        uint64_t flmap = fl + 1 < 64 ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
        if (!flmap)
            return NULL;
        fl = (unsigned)__builtin_ctzll(flmap);
        slmap = a->sl_bitmap[fl];
    }
    sl = (unsigned)__builtin_ctz(slmap);
    return a->lists[fl][sl];
}

int alloc_reserve(alloc_t *a, uint64_t len, void *user, uint64_t *offset)
{
    if (len == 0 || len > a->size)
        return kvm_errf(KVMESH_ENOSPC, "allocation of %llu bytes cannot fit a %llu-byte segment",
                        (unsigned long long)len, (unsigned long long)a->size);
    uint64_t size = (len + ALLOC_ALIGN - 1) & ~(uint64_t)(ALLOC_ALIGN - 1);
    uint64_t want = round_request(size);
    struct blk *b = find_suitable(a, want);
    if (!b)
        return KVMESH_ENOSPC;
    if (a->n_used + 1 > a->hcap && htab_grow(a) != 0)
        return KVMESH_ENOMEM;
    list_remove(a, b);
    if (b->size - size >= ALLOC_ALIGN) {
        struct blk *rest = blk_get(a);
        if (!rest) {
            list_insert(a, b);
            return KVMESH_ENOMEM;
        }
        rest->off = b->off + size;
        rest->size = b->size - size;
        rest->phys_prev = b;
        rest->phys_next = b->phys_next;
        if (b->phys_next)
            b->phys_next->phys_prev = rest;
        b->phys_next = rest;
        b->size = size;
        list_insert(a, rest);
    }
    b->requested = len;
    b->user = user;
    uint64_t s = hslot(a, b->off);
    b->hnext = a->htab[s];
    a->htab[s] = b;
    a->used += b->size;
    a->requested += len;
    a->n_used++;
    *offset = b->off;
    return 0;
}

/* Splits free block b (removed from its list) at off: returns the record now starting at off
 * (b itself when off == b->off); the part before goes back to its list. */
static struct blk *split_front(alloc_t *a, struct blk *b, uint64_t off)
{
    if (off == b->off)
        return b;
    struct blk *r = blk_get(a);
    if (!r)
        return NULL;
    r->off = off;
    r->size = b->off + b->size - off;
    r->phys_prev = b;
    r->phys_next = b->phys_next;
    if (b->phys_next)
        b->phys_next->phys_prev = r;
    b->phys_next = r;
    b->size = off - b->off;
    list_insert(a, b);
    return r;
}

int alloc_reserve_at(alloc_t *a, uint64_t offset, uint64_t len, void *user)
{
    if (len == 0 || offset % ALLOC_ALIGN || offset >= a->size || len > a->size - offset)
        return kvm_errf(
            KVMESH_EINVAL, "block [%llu, +%llu) is misaligned or outside the %llu-byte segment",
            (unsigned long long)offset, (unsigned long long)len, (unsigned long long)a->size);
    uint64_t size = (len + ALLOC_ALIGN - 1) & ~(uint64_t)(ALLOC_ALIGN - 1);
    if (size > a->size - offset)
        return kvm_errf(KVMESH_EINVAL, "block at %llu rounded to %llu bytes overruns the segment",
                        (unsigned long long)offset, (unsigned long long)size);
    /* The free block containing offset, if any (free lists are not ordered by offset). */
    struct blk *b = NULL;
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT && !b; fl++) {
        if (!(a->fl_bitmap & (1ull << fl)))
            continue;
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT && !b; sl++)
            for (struct blk *x = a->lists[fl][sl]; x && !b; x = x->fnext)
                if (offset >= x->off && offset - x->off < x->size)
                    b = x;
    }
    if (!b || size > b->off + b->size - offset)
        return kvm_errf(KVMESH_EEXIST, "bytes of [%llu, +%llu) are already allocated",
                        (unsigned long long)offset, (unsigned long long)size);
    if (a->n_used + 1 > a->hcap && htab_grow(a) != 0)
        return KVMESH_ENOMEM;
    /* Two records at most are needed: get them first so that a failure changes nothing. */
    struct blk *spare1 = blk_get(a), *spare2 = blk_get(a);
    if (!spare1 || !spare2) {
        if (spare1)
            blk_put(a, spare1);
        if (spare2)
            blk_put(a, spare2);
        return KVMESH_ENOMEM;
    }
    blk_put(a, spare2);
    blk_put(a, spare1);
    list_remove(a, b);
    b = split_front(a, b, offset);
    KVM_ASSERT(b);
    if (b->size - size >= ALLOC_ALIGN) {
        struct blk *rest = blk_get(a);
        KVM_ASSERT(rest);
        rest->off = b->off + size;
        rest->size = b->size - size;
        rest->phys_prev = b;
        rest->phys_next = b->phys_next;
        if (b->phys_next)
            b->phys_next->phys_prev = rest;
        b->phys_next = rest;
        b->size = size;
        list_insert(a, rest);
    }
    b->requested = len;
    b->user = user;
    uint64_t s = hslot(a, b->off);
    b->hnext = a->htab[s];
    a->htab[s] = b;
    a->used += b->size;
    a->requested += len;
    a->n_used++;
    return 0;
}

int alloc_release(alloc_t *a, uint64_t offset)
{
    struct blk *b = htab_find(a, offset);
    if (!b)
        return kvm_errf(KVMESH_ENOENT, "no allocated block at offset %llu",
                        (unsigned long long)offset);
    htab_del(a, b);
    a->used -= b->size;
    a->requested -= b->requested;
    a->n_used--;
    b->user = NULL;
    b->requested = 0;
    struct blk *p = b->phys_prev, *n = b->phys_next;
    if (n && n->is_free) {
        list_remove(a, n);
        b->size += n->size;
        b->phys_next = n->phys_next;
        if (n->phys_next)
            n->phys_next->phys_prev = b;
        blk_put(a, n);
    }
    if (p && p->is_free) {
        list_remove(a, p);
        p->size += b->size;
        p->phys_next = b->phys_next;
        if (b->phys_next)
            b->phys_next->phys_prev = p;
        blk_put(a, b);
        b = p;
    }
    list_insert(a, b);
    return 0;
}

int alloc_lookup(const alloc_t *a, uint64_t offset, void **user, uint64_t *len)
{
    struct blk *b = htab_find(a, offset);
    if (!b)
        return KVMESH_ENOENT;
    if (user)
        *user = b->user;
    if (len)
        *len = b->requested;
    return 0;
}

bool alloc_can_fit(const alloc_t *a, uint64_t len)
{
    if (len == 0 || len > a->size)
        return false;
    uint64_t size = (len + ALLOC_ALIGN - 1) & ~(uint64_t)(ALLOC_ALIGN - 1);
    return find_suitable((alloc_t *)a, round_request(size)) != NULL;
}

void alloc_stats(const alloc_t *a, alloc_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->size = a->size;
    out->used = a->used;
    out->requested = a->requested;
    out->free = a->size - a->used;
    out->n_used = a->n_used;
    out->n_free = a->n_free;
    /* The largest free block is in the highest non-empty list; scan that list only. */
    if (a->fl_bitmap) {
        unsigned fl = log2_u64(a->fl_bitmap);
        unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
        for (const struct blk *b = a->lists[fl][sl]; b; b = b->fnext)
            if (b->size > out->largest_free)
                out->largest_free = b->size;
    }
    out->fragmentation = out->free ? 1.0 - (double)out->largest_free / (double)out->free : 0.0;
}

int alloc_check(const alloc_t *a)
{
    /* Find the first physical block through any block we know. */
    const struct blk *any = NULL;
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT && !any; fl++)
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT && !any; sl++)
            any = a->lists[fl][sl];
    for (size_t i = 0; i < a->hcap && !any; i++)
        any = a->htab[i];
    if (!any)
        return kvm_errf(KVMESH_EINTERNAL, "allocator has no blocks");
    while (any->phys_prev)
        any = any->phys_prev;
    uint64_t off = 0, used = 0, nfree = 0, nused = 0;
    bool prev_free = false;
    for (const struct blk *b = any; b; b = b->phys_next) {
        if (b->off != off || b->size == 0 || b->size % ALLOC_ALIGN)
            return kvm_errf(KVMESH_EINTERNAL, "blocks do not tile at offset %llu",
                            (unsigned long long)off);
        if (b->is_free) {
            if (prev_free)
                return kvm_errf(KVMESH_EINTERNAL, "adjacent free blocks at %llu",
                                (unsigned long long)off);
            unsigned fl, sl;
            mapping(b->size, &fl, &sl);
            const struct blk *x = a->lists[fl][sl];
            while (x && x != b)
                x = x->fnext;
            if (!x)
                return kvm_errf(KVMESH_EINTERNAL, "free block at %llu not in its list",
                                (unsigned long long)off);
            nfree++;
        } else {
            if (htab_find(a, b->off) != b)
                return kvm_errf(KVMESH_EINTERNAL, "used block at %llu not indexed",
                                (unsigned long long)off);
            used += b->size;
            nused++;
        }
        prev_free = b->is_free;
        off += b->size;
    }
    if (off != a->size || used != a->used || nfree != a->n_free || nused != a->n_used)
        return kvm_errf(KVMESH_EINTERNAL, "allocator counters disagree with the blocks");
    return 0;
}
