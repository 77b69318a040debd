/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.c — two-level segregated-fit allocator (see alloc.h).
 *
 * Size classes are computed in units of ALLOC_ALIGN: u < ALLOC_SL_COUNT maps to (fl 0, sl u);
 * otherwise fl = log2(u) - ALLOC_SL_LOG2 + 1 and sl = the ALLOC_SL_LOG2 bits below the top bit.
 * Every block has one alloc_blk_t record: a free block's record is the allocator's (allocated
 * here, or the embedded record of a block that was released); an allocated block's record is
 * either the caller's (alloc_reserve_rec) or an allocator-owned struct blk_user carrying the
 * caller's user pointer (alloc_reserve). Reserving reuses the free block's record for the
 * remainder (or frees it on an exact fit), and releasing turns the block's own record into the
 * free record, so neither allocates a record on the common path. Allocated blocks are indexed
 * by offset in a hash table with chaining (at most two blocks per bucket on average).
 */
#include "store/alloc.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define BLK_FREE  ((uintptr_t)1) /* the block is free */
#define BLK_OWNED ((uintptr_t)2) /* allocated, with an allocator-owned struct blk_user record */
#define BLK_FLAGS (BLK_FREE | BLK_OWNED)

_Static_assert(sizeof(alloc_blk_t) == 48, "alloc_blk_t is six words");
_Static_assert(_Alignof(alloc_blk_t) > BLK_FLAGS, "record pointers leave the flag bits clear");

struct blk_user { /* the record of a block reserved by alloc_reserve / alloc_reserve_at */
    alloc_blk_t b;
    void *user;
};

struct alloc {
    uint64_t size;
    uint64_t used, requested;
    uint64_t n_used, n_free;
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[ALLOC_FL_COUNT];
    alloc_blk_t *lists[ALLOC_FL_COUNT][ALLOC_SL_COUNT];
    alloc_blk_t **htab; /* allocated blocks by offset */
    size_t hcap;        /* power of two */
    alloc_recs_t recs;  /* where free blocks' records come from and go (alloc_new_recs) */
    bool own_recs;      /* recs are the caller's: embedded records only */
};

static alloc_blk_t *calloc_rec(void *ctx)
{
    (void)ctx;
    return calloc(1, sizeof(alloc_blk_t));
}

static void free_rec(void *ctx, alloc_blk_t *rec)
{
    (void)ctx;
    free(rec);
}

static alloc_blk_t *rec_new(alloc_t *a)
{
    return a->recs.rec_new(a->recs.ctx);
}

static void rec_free(alloc_t *a, alloc_blk_t *rec)
{
    a->recs.rec_free(a->recs.ctx, rec);
}

static unsigned log2_u64(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

static uint64_t round_align(uint64_t len)
{
    return (len + ALLOC_ALIGN - 1) & ~(uint64_t)(ALLOC_ALIGN - 1);
}

static bool is_free(const alloc_blk_t *b)
{
    return (b->prev_flags & BLK_FREE) != 0;
}

static alloc_blk_t *prev_of(const alloc_blk_t *b)
{
    return (alloc_blk_t *)(b->prev_flags & ~BLK_FLAGS);
}

static void set_prev(alloc_blk_t *b, alloc_blk_t *p)
{
    b->prev_flags = (uintptr_t)p | (b->prev_flags & BLK_FLAGS);
}

/* Bytes of the block (an allocated block's size is its length rounded up to ALLOC_ALIGN). */
static uint64_t bsize(const alloc_blk_t *b)
{
    return is_free(b) ? b->size : round_align(b->len);
}

/* Links two physical neighbours (either may be NULL at the ends). */
static void phys_link(alloc_blk_t *l, alloc_blk_t *r)
{
    if (l)
        l->phys_next = r;
    if (r)
        set_prev(r, l);
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

/* b (its off and size set) becomes a free block in the list of its class. */
static void list_insert(alloc_t *a, alloc_blk_t *b)
{
    unsigned fl, sl;
    mapping(b->size, &fl, &sl);
    b->prev_flags = (b->prev_flags & ~BLK_FLAGS) | BLK_FREE;
    b->fprev = NULL;
    b->link = a->lists[fl][sl];
    if (b->link)
        b->link->fprev = b;
    a->lists[fl][sl] = b;
    a->fl_bitmap |= 1ull << fl;
    a->sl_bitmap[fl] |= 1u << sl;
    a->n_free++;
}

static void list_remove(alloc_t *a, alloc_blk_t *b)
{
    KVM_ASSERT(is_free(b));
    unsigned fl, sl;
    mapping(b->size, &fl, &sl);
    if (b->fprev)
        b->fprev->link = b->link;
    else
        a->lists[fl][sl] = b->link;
    if (b->link)
        b->link->fprev = b->fprev;
    if (!a->lists[fl][sl]) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (!a->sl_bitmap[fl])
            a->fl_bitmap &= ~(1ull << fl);
    }
    b->prev_flags &= ~BLK_FREE;
    b->link = b->fprev = NULL;
    a->n_free--;
}

static int htab_grow(alloc_t *a)
{
    size_t ncap = a->hcap ? a->hcap * 2 : 64;
    alloc_blk_t **nt = calloc(ncap, sizeof(*nt));
    if (!nt)
        return KVMESH_ENOMEM;
    alloc_blk_t **old = a->htab;
    size_t ocap = a->hcap;
    a->htab = nt;
    a->hcap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        for (alloc_blk_t *b = old[i], *n; b; b = n) {
            n = b->link;
            uint64_t s = hslot(a, b->off);
            b->link = nt[s];
            nt[s] = b;
        }
    }
    free(old);
    return 0;
}

/* Room in the index for one more allocated block (grown at two blocks per bucket). */
static int htab_room(alloc_t *a)
{
    return a->n_used + 1 > 2 * (uint64_t)a->hcap ? htab_grow(a) : 0;
}

static alloc_blk_t *htab_find(const alloc_t *a, uint64_t off)
{
    if (!a->hcap)
        return NULL;
    for (alloc_blk_t *b = a->htab[hslot(a, off)]; b; b = b->link)
        if (b->off == off)
            return b;
    return NULL;
}

static void htab_del(alloc_t *a, alloc_blk_t *x)
{
    alloc_blk_t **pp = &a->htab[hslot(a, x->off)];
    while (*pp != x)
        pp = &(*pp)->link;
    *pp = x->link;
    x->link = NULL;
}

int alloc_new(alloc_t **out, uint64_t size)
{
    return alloc_new_recs(out, size, NULL);
}

int alloc_new_recs(alloc_t **out, uint64_t size, const alloc_recs_t *recs)
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
    a->recs = recs ? *recs : (alloc_recs_t){.rec_new = calloc_rec, .rec_free = free_rec};
    a->own_recs = recs != NULL;
    alloc_blk_t *b = rec_new(a);
    if (!b || htab_grow(a) != 0) {
        if (b)
            rec_free(a, b);
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

/* Any block, then its physical chain back to the first. */
static alloc_blk_t *first_block(const alloc_t *a)
{
    alloc_blk_t *any = NULL;
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT && !any; fl++)
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT && !any; sl++)
            any = a->lists[fl][sl];
    for (size_t i = 0; i < a->hcap && !any; i++)
        any = a->htab[i];
    while (any && prev_of(any))
        any = prev_of(any);
    return any;
}

void alloc_free(alloc_t *a)
{
    if (!a)
        return;
    for (alloc_blk_t *b = first_block(a), *n; b; b = n) {
        n = b->phys_next;
        if (is_free(b))
            rec_free(a, b);
        else if (b->prev_flags & BLK_OWNED)
            free(b); /* (an allocated block's embedded record is the caller's) */
    }
    free(a->htab);
    free(a);
}

static alloc_blk_t *find_suitable(alloc_t *a, uint64_t size)
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

/* Carves the allocated block [offset, offset + round_align(len)) with record rec out of the free
 * block b, which contains it: what remains before and after stays free (b's record serves one
 * part; a new record is allocated only when both remain). Nothing changes on an error. */
static int place(alloc_t *a, alloc_blk_t *b, alloc_blk_t *rec, uint64_t offset, uint64_t len,
                 uintptr_t flags)
{
    uint64_t size = round_align(len), start = b->off, end = b->off + b->size;
    KVM_ASSERT(is_free(b) && offset >= start && size <= end - offset);
    bool front = offset > start, tail = offset + size < end;
    alloc_blk_t *extra = NULL;
    if (front && tail && !(extra = rec_new(a)))
        return KVMESH_ENOMEM;
    int rc = htab_room(a);
    if (rc) {
        if (extra)
            rec_free(a, extra);
        return rc;
    }
    list_remove(a, b);
    alloc_blk_t *p = prev_of(b), *n = b->phys_next, *fr = NULL, *tl = NULL;
    if (front) {
        fr = b;
        tl = extra;
    } else if (tail) {
        tl = b;
    } else {
        rec_free(a, b);
    }
    alloc_blk_t *left = p;
    if (fr) {
        fr->size = offset - start;
        phys_link(left, fr);
        left = fr;
    }
    rec->off = offset;
    rec->len = len;
    rec->prev_flags = flags;
    phys_link(left, rec);
    left = rec;
    if (tl) {
        tl->off = offset + size;
        tl->size = end - tl->off;
        phys_link(left, tl);
        left = tl;
    }
    phys_link(left, n);
    if (fr)
        list_insert(a, fr);
    if (tl)
        list_insert(a, tl);
    uint64_t s = hslot(a, offset);
    rec->link = a->htab[s];
    a->htab[s] = rec;
    a->used += size;
    a->requested += len;
    a->n_used++;
    return 0;
}

static int reserve(alloc_t *a, uint64_t len, alloc_blk_t *rec, uintptr_t flags)
{
    if (len == 0 || len > a->size)
        return kvm_errf(KVMESH_ENOSPC, "allocation of %llu bytes cannot fit a %llu-byte segment",
                        (unsigned long long)len, (unsigned long long)a->size);
    alloc_blk_t *b = find_suitable(a, round_request(round_align(len)));
    if (!b)
        return KVMESH_ENOSPC;
    return place(a, b, rec, b->off, len, flags);
}

int alloc_reserve_rec(alloc_t *a, uint64_t len, alloc_blk_t *rec)
{
    return reserve(a, len, rec, 0);
}

static int refuse_owned(const alloc_t *a)
{
    return a->own_recs ? kvm_errf(KVMESH_EINVAL, "this allocator takes embedded records only") : 0;
}

int alloc_reserve(alloc_t *a, uint64_t len, void *user, uint64_t *offset)
{
    if (refuse_owned(a))
        return KVMESH_EINVAL;
    struct blk_user *r = calloc(1, sizeof(*r));
    if (!r)
        return KVMESH_ENOMEM;
    int rc = reserve(a, len, &r->b, BLK_OWNED);
    if (rc) {
        free(r);
        return rc;
    }
    r->user = user;
    *offset = r->b.off;
    return 0;
}

static int reserve_at(alloc_t *a, uint64_t offset, uint64_t len, alloc_blk_t *rec, uintptr_t flags)
{
    if (len == 0 || offset % ALLOC_ALIGN || offset >= a->size || len > a->size - offset)
        return kvm_errf(
            KVMESH_EINVAL, "block [%llu, +%llu) is misaligned or outside the %llu-byte segment",
            (unsigned long long)offset, (unsigned long long)len, (unsigned long long)a->size);
    uint64_t size = round_align(len);
    if (size > a->size - offset)
        return kvm_errf(KVMESH_EINVAL, "block at %llu rounded to %llu bytes overruns the segment",
                        (unsigned long long)offset, (unsigned long long)size);
    /* The free block containing offset, if any (free lists are not ordered by offset). */
    alloc_blk_t *b = NULL;
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT && !b; fl++) {
        if (!(a->fl_bitmap & (1ull << fl)))
            continue;
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT && !b; sl++)
            for (alloc_blk_t *x = a->lists[fl][sl]; x && !b; x = x->link)
                if (offset >= x->off && offset - x->off < x->size)
                    b = x;
    }
    if (!b || size > b->off + b->size - offset)
        return kvm_errf(KVMESH_EEXIST, "bytes of [%llu, +%llu) are already allocated",
                        (unsigned long long)offset, (unsigned long long)size);
    return place(a, b, rec, offset, len, flags);
}

int alloc_reserve_at_rec(alloc_t *a, uint64_t offset, uint64_t len, alloc_blk_t *rec)
{
    return reserve_at(a, offset, len, rec, 0);
}

int alloc_reserve_at(alloc_t *a, uint64_t offset, uint64_t len, void *user)
{
    if (refuse_owned(a))
        return KVMESH_EINVAL;
    struct blk_user *r = calloc(1, sizeof(*r));
    if (!r)
        return KVMESH_ENOMEM;
    int rc = reserve_at(a, offset, len, &r->b, BLK_OWNED);
    if (rc) {
        free(r);
        return rc;
    }
    r->user = user;
    return 0;
}

int alloc_release(alloc_t *a, uint64_t offset)
{
    alloc_blk_t *b = htab_find(a, offset);
    if (!b)
        return kvm_errf(KVMESH_ENOENT, "no allocated block at offset %llu",
                        (unsigned long long)offset);
    htab_del(a, b);
    uint64_t size = bsize(b);
    a->used -= size;
    a->requested -= b->len;
    a->n_used--;
    alloc_blk_t *p = prev_of(b), *n = b->phys_next;
    /* b's record becomes the free block's, unless the free predecessor absorbs it. */
    if (p && is_free(p)) {
        list_remove(a, p);
        p->size += size;
        phys_link(p, n);
        rec_free(a, b);
        b = p;
    } else {
        b->size = size;
        b->prev_flags = (uintptr_t)p;
    }
    if (n && is_free(n)) {
        list_remove(a, n);
        b->size += n->size;
        phys_link(b, n->phys_next);
        rec_free(a, n);
    }
    list_insert(a, b);
    return 0;
}

int alloc_lookup(const alloc_t *a, uint64_t offset, void **user, uint64_t *len)
{
    alloc_blk_t *b = htab_find(a, offset);
    if (!b)
        return KVMESH_ENOENT;
    if (user)
        *user = (b->prev_flags & BLK_OWNED) ? ((struct blk_user *)b)->user : (void *)b;
    if (len)
        *len = b->len;
    return 0;
}

bool alloc_can_fit(const alloc_t *a, uint64_t len)
{
    if (len == 0 || len > a->size)
        return false;
    return find_suitable((alloc_t *)a, round_request(round_align(len))) != NULL;
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
        for (const alloc_blk_t *b = a->lists[fl][sl]; b; b = b->link)
            if (b->size > out->largest_free)
                out->largest_free = b->size;
    }
    out->fragmentation = out->free ? 1.0 - (double)out->largest_free / (double)out->free : 0.0;
}

int alloc_check(const alloc_t *a)
{
    const alloc_blk_t *first = first_block(a);
    if (!first)
        return kvm_errf(KVMESH_EINTERNAL, "allocator has no blocks");
    uint64_t off = 0, used = 0, requested = 0, nfree = 0, nused = 0;
    bool prev_free = false;
    const alloc_blk_t *prev = NULL;
    for (const alloc_blk_t *b = first; b; prev = b, b = b->phys_next) {
        uint64_t size = bsize(b);
        if (b->off != off || size == 0 || size % ALLOC_ALIGN || prev_of(b) != prev)
            return kvm_errf(KVMESH_EINTERNAL, "blocks do not tile at offset %llu",
                            (unsigned long long)off);
        if (is_free(b)) {
            if (prev_free)
                return kvm_errf(KVMESH_EINTERNAL, "adjacent free blocks at %llu",
                                (unsigned long long)off);
            if (b->prev_flags & BLK_OWNED)
                return kvm_errf(KVMESH_EINTERNAL, "free block at %llu flagged as allocated",
                                (unsigned long long)off);
            unsigned fl, sl;
            mapping(b->size, &fl, &sl);
            const alloc_blk_t *x = a->lists[fl][sl];
            while (x && x != b)
                x = x->link;
            if (!x)
                return kvm_errf(KVMESH_EINTERNAL, "free block at %llu not in its list",
                                (unsigned long long)off);
            nfree++;
        } else {
            if (htab_find(a, b->off) != b)
                return kvm_errf(KVMESH_EINTERNAL, "used block at %llu not indexed",
                                (unsigned long long)off);
            used += size;
            requested += b->len;
            nused++;
        }
        prev_free = is_free(b);
        off += size;
    }
    if (off != a->size || used != a->used || requested != a->requested || nfree != a->n_free ||
        nused != a->n_used)
        return kvm_errf(KVMESH_EINTERNAL, "allocator counters disagree with the blocks");
    return 0;
}
