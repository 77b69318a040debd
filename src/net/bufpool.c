/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bufpool.c — the bounded large-buffer cache of an RPC endpoint (bufpool.h).
 */
#include "net/bufpool.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void bufpool_init(struct bufpool *p, uint64_t cap_bytes)
{
    memset(p, 0, sizeof(*p));
    p->cap = cap_bytes;
}

void bufpool_clear(struct bufpool *p)
{
    for (unsigned k = 0; k < BUFPOOL_NCLASS; k++) {
        while (p->n[k] > 0)
            free(p->free[k][--p->n[k]]);
    }
    p->st.cached_bytes = 0;
    p->st.cached_bufs = 0;
}

/* The smallest class holding n bytes (n within the pooled range). */
static unsigned class_up(size_t n)
{
    unsigned k = 0;
    while ((BUFPOOL_MIN_BYTES << k) < n)
        k++;
    return k;
}

/* The largest class a block of `usable` bytes can serve (usable >= BUFPOOL_MIN_BYTES). */
static unsigned class_down(size_t usable)
{
    unsigned k = 0;
    while (k + 1 < BUFPOOL_NCLASS && (BUFPOOL_MIN_BYTES << (k + 1)) <= usable)
        k++;
    return k;
}

void *bufpool_get(struct bufpool *p, size_t n)
{
    KVM_ASSERT(n > 0);
    if (n < BUFPOOL_MIN_BYTES || n > BUFPOOL_MAX_BYTES)
        return malloc(n);
    unsigned k = class_up(n);
    if (p->n[k] > 0) {
        void *b = p->free[k][--p->n[k]];
        p->st.hits++;
        p->st.cached_bytes -= malloc_usable_size(b);
        p->st.cached_bufs--;
        return b;
    }
    p->st.misses++;
    return malloc((size_t)(BUFPOOL_MIN_BYTES << k));
}

void bufpool_put(struct bufpool *p, void *b)
{
    if (!b)
        return;
    size_t usable = malloc_usable_size(b);
    if (usable < BUFPOOL_MIN_BYTES) {
        free(b);
        return;
    }
    if (usable >= 2 * BUFPOOL_MAX_BYTES) {
        free(b); /* larger than any class: never cached */
        return;
    }
    unsigned k = class_down(usable);
    if (p->n[k] == BUFPOOL_PER_CLASS || p->st.cached_bytes + usable > p->cap) {
        p->st.dropped++;
        free(b);
        return;
    }
    p->free[k][p->n[k]++] = b;
    p->st.cached_bytes += usable;
    p->st.cached_bufs++;
}

void *bufpool_pb_alloc(void *pool, size_t n)
{
    return bufpool_get(pool, n ? n : 1);
}

void bufpool_pb_free(void *pool, void *b)
{
    bufpool_put(pool, b);
}
