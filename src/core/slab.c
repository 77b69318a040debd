/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slab.c — pool of small records in chunks with one free list per rounded size (slab.h). A free
 * record's first word links it to the next free record of its class.
 */
#include "core/slab.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct slab_chunk {
    struct slab_chunk *next;
    size_t size; /* bytes of the chunk, this header included */
    /* records follow, from offset sizeof(struct slab_chunk) */
};

_Static_assert(sizeof(struct slab_chunk) % SLAB_ALIGN == 0, "records after a chunk are aligned");
_Static_assert(SLAB_ALIGN >= sizeof(void *), "a free record holds its link");

static size_t class_of(size_t rounded)
{
    return rounded / SLAB_ALIGN - 1;
}

void slab_init(slab_t *s)
{
    memset(s, 0, sizeof(*s));
    s->chunk_next = SLAB_CHUNK_MIN;
}

void slab_set_limit(slab_t *s, size_t bytes)
{
    s->limit = bytes;
}

void slab_fini(slab_t *s)
{
    for (struct slab_chunk *c = s->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    size_t limit = s->limit, big = s->big_live;
    slab_init(s);
    s->limit = limit;
    s->big_live = big; /* (malloc'd records are the caller's to free) */
}

bool slab_reset_if_empty(slab_t *s)
{
    if (s->live_bytes != 0 || !s->chunks)
        return false;
    slab_fini(s);
    return true;
}

static void push_free(slab_t *s, void *p, size_t rounded)
{
    void **link = p;
    size_t k = class_of(rounded);
    *link = s->free[k];
    s->free[k] = p;
}

/* A new chunk becomes the one records are carved from; the old chunk's tail goes to the free
 * list of its size. false when out of memory or past the limit. */
static bool add_chunk(slab_t *s)
{
    size_t size = s->chunk_next;
    if (s->limit && s->chunk_bytes + size > s->limit)
        return false;
    struct slab_chunk *c = malloc(size);
    if (!c)
        return false;
    size_t tail = (size_t)(s->end - s->bump);
    if (tail >= SLAB_ALIGN)
        push_free(s, s->bump, tail);
    c->next = s->chunks;
    c->size = size;
    s->chunks = c;
    s->chunk_bytes += size;
    s->bump = (uint8_t *)c + sizeof(*c);
    s->end = (uint8_t *)c + size;
    /* the next chunk is a quarter of what the pool holds (within [MIN, MAX]): the unused tail
     * of the newest chunk stays below ~25% of a pool and below SLAB_CHUNK_MAX */
    size_t next = slab_size(s->chunk_bytes / 4);
    s->chunk_next = next < SLAB_CHUNK_MIN   ? SLAB_CHUNK_MIN
                    : next > SLAB_CHUNK_MAX ? SLAB_CHUNK_MAX
                                            : next;
    return true;
}

void *slab_alloc(slab_t *s, size_t size)
{
    KVM_ASSERT(size > 0);
    if (size > SLAB_MAX) {
        void *p = calloc(1, size);
        s->big_live += p != NULL;
        return p;
    }
    size_t r = slab_size(size), k = class_of(r);
    void *p = s->free[k];
    if (p) {
        s->free[k] = *(void **)p;
    } else {
        if ((size_t)(s->end - s->bump) < r && !add_chunk(s))
            return NULL;
        p = s->bump;
        s->bump += r;
    }
    s->live_bytes += r;
    memset(p, 0, r);
    return p;
}

void slab_free(slab_t *s, void *p, size_t size)
{
    if (!p)
        return;
    KVM_ASSERT(size > 0);
    if (size > SLAB_MAX) {
        KVM_ASSERT(s->big_live > 0);
        s->big_live--;
        free(p);
        return;
    }
    size_t r = slab_size(size);
    KVM_ASSERT(s->live_bytes >= r);
    s->live_bytes -= r;
    push_free(s, p, r);
}

static size_t free_bytes(const slab_t *s)
{
    size_t b = 0;
    for (size_t k = 0; k < SLAB_CLASSES; k++)
        for (void *p = s->free[k]; p; p = *(void **)p)
            b += (k + 1) * SLAB_ALIGN;
    return b;
}

void slab_stats(const slab_t *s, slab_stats_t *out)
{
    *out = (slab_stats_t){.chunk_bytes = s->chunk_bytes,
                          .live_bytes = s->live_bytes,
                          .free_bytes = free_bytes(s),
                          .big_live = s->big_live};
}

static bool in_chunk(const slab_t *s, const uint8_t *p, size_t len)
{
    for (const struct slab_chunk *c = s->chunks; c; c = c->next) {
        const uint8_t *lo = (const uint8_t *)c + sizeof(*c), *hi = (const uint8_t *)c + c->size;
        if (p >= lo && p + len <= hi)
            return ((uintptr_t)p % SLAB_ALIGN) == 0;
    }
    return false;
}

int slab_check(const slab_t *s)
{
    size_t headers = 0, tail = (size_t)(s->end - s->bump);
    for (const struct slab_chunk *c = s->chunks; c; c = c->next)
        headers += sizeof(*c);
    for (size_t k = 0; k < SLAB_CLASSES; k++)
        for (void *p = s->free[k]; p; p = *(void **)p)
            if (!in_chunk(s, p, (k + 1) * SLAB_ALIGN))
                return kvm_errf(KVMESH_EINTERNAL,
                                "slab: a free record of %zu bytes is outside "
                                "every chunk",
                                (k + 1) * SLAB_ALIGN);
    size_t want = s->chunk_bytes - headers;
    size_t have = s->live_bytes + free_bytes(s) + tail;
    if (have != want)
        return kvm_errf(KVMESH_EINTERNAL,
                        "slab: %zu live + free + tail bytes in %zu bytes of chunks", have, want);
    return 0;
}
