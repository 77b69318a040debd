/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seg.c — memfd segments, the grant table and remote mappings (see seg.h for the invariants).
 *
 * Tables: local segments and remote mappings are bounded arrays scanned linearly (a runtime
 * has a handful of segments: its storage pools); grants are a chained hash keyed by token
 * (bounded by SEG_MAX_GRANTS; expired grants are swept when the table is full).
 */
#include "net/seg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/memfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "env/clock.h"

#define SEG_GRANT_BUCKETS 4096

struct seg_grant_ent {
    struct seg_grant g;
    struct seg_grant_ent *next;
};

/* Revoked grant entries are kept (wiped) for the next grants, at most SEG_GRANT_SPARE of them
 * (56 KiB), so that a steady stream of grants and revokes (one write grant per put item)
 * allocates nothing; freed with the registry. */
#define SEG_GRANT_SPARE 1024

/*
 * Grant tokens come from getrandom in blocks of SEG_TOKEN_POOL (one syscall per block instead of
 * one per grant: a batch put grants one write range per item), kept in a page marked
 * MADV_WIPEONFORK so that a forked child finds the block empty and draws its own instead of its
 * parent's next tokens. A drawn token is cleared from the block. Where the kernel refuses the
 * mark, each token is drawn alone as before.
 */
#define SEG_TOKEN_POOL 32 /* 256 bytes: one getrandom call, never cut short */
struct seg_tokens {
    uint64_t v[SEG_TOKEN_POOL];
    unsigned n; /* v[0, n) not yet drawn */
};

struct seg_registry {
    pthread_mutex_t mu;
    struct seg_tokens *tok; /* NULL: a getrandom per token (guarded by mu) */
    uint32_t epoch;
    uint32_t next_id;
    struct seg *local[SEG_MAX_LOCAL];
    size_t nlocal;
    struct seg_remote *remote[SEG_MAX_REMOTE];
    size_t nremote;
    struct seg_grant_ent *grants[SEG_GRANT_BUCKETS];
    size_t ngrants;
    struct seg_grant_ent *spare; /* revoked entries kept for reuse, linked by next */
    size_t nspare;               /* at most SEG_GRANT_SPARE */
    seg_clock_fn clock;
    void *clock_arg;
    bool prefault; /* atomic: seg_registry_set_prefault */
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux >= 5.14 */
#endif

/* With the registry's prefault on, faults every page of a new mapping in now (a new segment's
 * memory is allocated and zeroed, an existing one's pages are mapped), so that copies on the
 * data path take no page faults. Best effort: a kernel before 5.14 refuses (EINVAL) and the
 * pages are faulted in on first touch, as without it. The content is not changed. */
static void seg_prefault(struct seg_registry *reg, void *p, uint64_t size)
{
    if (__atomic_load_n(&reg->prefault, __ATOMIC_RELAXED))
        (void)madvise(p, size, MADV_POPULATE_WRITE);
}

void seg_registry_set_prefault(struct seg_registry *reg, bool on)
{
    __atomic_store_n(&reg->prefault, on, __ATOMIC_RELAXED);
}

static uint64_t rand_u64(void)
{
    uint64_t v = 0;
    while (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        if (errno != EINTR)
            KVM_ASSERT(!"getrandom failed");
    }
    return v;
}

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18 /* Linux >= 4.14 */
#endif

/* The token block's page, or NULL when it cannot be marked to be wiped on fork. */
static struct seg_tokens *tokens_new(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (madvise(p, 4096, MADV_WIPEONFORK) != 0) {
        munmap(p, 4096);
        return NULL;
    }
    return p;
}

/* A fresh grant token (reg->mu held). */
static uint64_t token_next_locked(struct seg_registry *reg)
{
    struct seg_tokens *t = reg->tok;
    if (!t)
        return rand_u64();
    if (t->n == 0) {
        while (getrandom(t->v, sizeof(t->v), 0) != (ssize_t)sizeof(t->v)) {
            if (errno != EINTR)
                KVM_ASSERT(!"getrandom failed");
        }
        t->n = SEG_TOKEN_POOL;
    }
    uint64_t v = t->v[--t->n];
    t->v[t->n] = 0;
    return v;
}

static uint64_t mono_ns(void *arg)
{
    (void)arg;
    return env_clock_mono_ns();
}

static unsigned fault_countdown; /* atomic */

void seg_fault_alloc_after(unsigned n)
{
    __atomic_store_n(&fault_countdown, n, __ATOMIC_SEQ_CST);
}

bool seg_fault_armed(void)
{
    return __atomic_load_n(&fault_countdown, __ATOMIC_SEQ_CST) != 0;
}

static uint64_t alloc_count; /* atomic: seg_alloc_count */

uint64_t seg_alloc_count(void)
{
    return __atomic_load_n(&alloc_count, __ATOMIC_RELAXED);
}

void *seg_calloc(size_t n, size_t size)
{
    unsigned v = __atomic_load_n(&fault_countdown, __ATOMIC_SEQ_CST);
    while (v != 0) {
        if (__atomic_compare_exchange_n(&fault_countdown, &v, v - 1, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
            if (v == 1)
                return NULL;
            break;
        }
    }
    void *p = calloc(n, size);
    if (p)
        __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
    return p;
}

const char *seg_reason_str(enum seg_reason r)
{
    switch (r) {
    case SEG_OK:
        return "ok";
    case SEG_R_NOSEG:
        return "no such segment";
    case SEG_R_NOGRANT:
        return "token unknown (wrong or revoked)";
    case SEG_R_EXPIRED:
        return "grant expired";
    case SEG_R_RIGHTS:
        return "grant lacks the right for this operation";
    case SEG_R_RANGE:
        return "access outside the granted range";
    case SEG_R_BOUNDS:
        return "access outside the segment bounds";
    case SEG_R_WRONGSEG:
        return "token granted for another segment";
    default:
        return "unknown reason";
    }
}

int seg_registry_new(struct seg_registry **out)
{
    struct seg_registry *reg = seg_calloc(1, sizeof(*reg));
    if (!reg)
        return kvm_errf(KVMESH_ENOMEM, "segment registry allocation failed");
    pthread_mutex_init(&reg->mu, NULL);
    reg->epoch = (uint32_t)rand_u64() | 1u;
    reg->next_id = 1;
    reg->tok = tokens_new();
    reg->clock = mono_ns;
    *out = reg;
    return 0;
}

static void seg_unmap(struct seg *s)
{
    munmap(s->base, s->size);
    close(s->fd);
    free(s);
}

void seg_registry_free(struct seg_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->nlocal; i++) {
        KVM_ASSERT(reg->local[i]->refs == 0);
        seg_unmap(reg->local[i]);
    }
    for (size_t i = 0; i < reg->nremote; i++) {
        munmap(reg->remote[i]->base, reg->remote[i]->size);
        free(reg->remote[i]);
    }
    for (size_t b = 0; b < SEG_GRANT_BUCKETS; b++) {
        struct seg_grant_ent *e = reg->grants[b];
        while (e) {
            struct seg_grant_ent *n = e->next;
            free(e);
            e = n;
        }
    }
    for (struct seg_grant_ent *e = reg->spare, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    if (reg->tok) {
        explicit_bzero(reg->tok, sizeof(*reg->tok));
        munmap(reg->tok, 4096);
    }
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

void seg_registry_set_clock(struct seg_registry *reg, seg_clock_fn fn, void *arg)
{
    pthread_mutex_lock(&reg->mu);
    reg->clock = fn ? fn : mono_ns;
    reg->clock_arg = fn ? arg : NULL;
    pthread_mutex_unlock(&reg->mu);
}

uint64_t seg_now_ns(struct seg_registry *reg)
{
    pthread_mutex_lock(&reg->mu);
    uint64_t t = reg->clock(reg->clock_arg);
    pthread_mutex_unlock(&reg->mu);
    return t;
}

/*
 * Seals a segment's size: same-host peers map the fd, and a file shrunk under their mapping would
 * make their copies fault (SIGBUS). seg_remote_map refuses fds without SEG_SIZE_SEALS.
 */
#define SEG_SIZE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static int seal_size(int fd)
{
    return fcntl(fd, F_ADD_SEALS, SEG_SIZE_SEALS | F_SEAL_SEAL);
}

static int seg_open_memfd(uint64_t size, unsigned flags, int *fd_out, uint8_t **base_out,
                          uint64_t *size_out, bool *huge_out)
{
    long pg = sysconf(_SC_PAGESIZE);
    if ((flags & SEG_F_HUGE) && size <= SEG_MAX_SIZE - SEG_HUGE_2M) {
        int fd = memfd_create("kvmesh-seg",
                              MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | MFD_HUGE_2MB);
        if (fd >= 0) {
            uint64_t sz = (size + SEG_HUGE_2M - 1) & ~(SEG_HUGE_2M - 1);
            if (ftruncate(fd, (off_t)sz) == 0 && seal_size(fd) == 0) {
                void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (p != MAP_FAILED) {
                    *fd_out = fd;
                    *base_out = p;
                    *size_out = sz;
                    *huge_out = true;
                    return 0;
                }
            }
            close(fd);
        }
        /* fall back to normal pages */
    }
    uint64_t sz = (size + (uint64_t)pg - 1) & ~((uint64_t)pg - 1);
    int fd = memfd_create("kvmesh-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return kvm_errf(KVMESH_EIO, "memfd_create failed: %s", strerror(errno));
    if (ftruncate(fd, (off_t)sz) != 0) {
        int e = errno;
        close(fd);
        return kvm_errf(KVMESH_ENOSPC, "ftruncate of a %llu-byte segment failed: %s",
                        (unsigned long long)sz, strerror(e));
    }
    if (seal_size(fd) != 0) {
        int e = errno;
        close(fd);
        return kvm_errf(KVMESH_EIO, "sealing a segment's size failed: %s", strerror(e));
    }
    void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return kvm_errf(KVMESH_ENOMEM, "mmap of a %llu-byte segment failed: %s",
                        (unsigned long long)sz, strerror(e));
    }
    *fd_out = fd;
    *base_out = p;
    *size_out = sz;
    *huge_out = false;
    return 0;
}

static struct seg *find_locked(struct seg_registry *reg, uint64_t seg_id, size_t *idx);

int seg_create(struct seg_registry *reg, uint64_t size, unsigned flags, struct seg **out)
{
    if (size == 0 || size > SEG_MAX_SIZE)
        return kvm_errf(KVMESH_EINVAL, "segment size %llu outside [1, %llu]",
                        (unsigned long long)size, (unsigned long long)SEG_MAX_SIZE);
    struct seg *s = seg_calloc(1, sizeof(*s));
    if (!s)
        return kvm_errf(KVMESH_ENOMEM, "segment allocation failed");
    int rc = seg_open_memfd(size, flags, &s->fd, &s->base, &s->size, &s->huge);
    if (rc) {
        free(s);
        return rc;
    }
    seg_prefault(reg, s->base, s->size);
    pthread_mutex_lock(&reg->mu);
    if (reg->nlocal >= SEG_MAX_LOCAL) {
        pthread_mutex_unlock(&reg->mu);
        seg_unmap(s);
        return kvm_errf(KVMESH_ENOSPC, "too many segments (max %d); destroy unused ones",
                        SEG_MAX_LOCAL);
    }
    do { /* never an id an adopted segment (seg_adopt) already has */
        s->id = ((uint64_t)reg->epoch << 32) | reg->next_id++;
    } while (find_locked(reg, s->id, NULL));
    reg->local[reg->nlocal++] = s;
    pthread_mutex_unlock(&reg->mu);
    *out = s;
    return 0;
}

static struct seg *find_locked(struct seg_registry *reg, uint64_t seg_id, size_t *idx)
{
    for (size_t i = 0; i < reg->nlocal; i++) {
        if (reg->local[i]->id == seg_id) {
            if (idx)
                *idx = i;
            return reg->local[i];
        }
    }
    return NULL;
}

int seg_adopt(struct seg_registry *reg, uint64_t seg_id, int fd, uint64_t size, struct seg **out)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (seg_id == 0 || size == 0 || size > SEG_MAX_SIZE || size % (uint64_t)pg)
        return kvm_errf(KVMESH_EINVAL,
                        "adopted segment %#llx: size %llu is not a page multiple "
                        "in [1, %llu]",
                        (unsigned long long)seg_id, (unsigned long long)size,
                        (unsigned long long)SEG_MAX_SIZE);
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SEG_SIZE_SEALS) != SEG_SIZE_SEALS)
        return kvm_errf(KVMESH_EPROTO,
                        "adopted segment %#llx: the fd is not a memfd sealed "
                        "against resizing",
                        (unsigned long long)seg_id);
    off_t real = lseek(fd, 0, SEEK_END);
    if (real < 0 || (uint64_t)real < size)
        return kvm_errf(KVMESH_EPROTO,
                        "adopted segment %#llx: the fd holds %lld bytes, %llu "
                        "announced",
                        (unsigned long long)seg_id, (long long)real, (unsigned long long)size);
    struct seg *s = seg_calloc(1, sizeof(*s));
    if (!s)
        return kvm_errf(KVMESH_ENOMEM, "segment allocation failed");
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        free(s);
        return kvm_errf(KVMESH_ENOMEM, "mmap of adopted segment %#llx failed: %s",
                        (unsigned long long)seg_id, strerror(e));
    }
    seg_prefault(reg, p, size);
    s->id = seg_id;
    s->fd = fd;
    s->base = p;
    s->size = size;
    pthread_mutex_lock(&reg->mu);
    int rc = 0;
    if (find_locked(reg, seg_id, NULL))
        rc = kvm_errf(KVMESH_EEXIST, "segment %#llx exists already", (unsigned long long)seg_id);
    else if (reg->nlocal >= SEG_MAX_LOCAL)
        rc = kvm_errf(KVMESH_ENOSPC, "too many segments (max %d)", SEG_MAX_LOCAL);
    else
        reg->local[reg->nlocal++] = s;
    pthread_mutex_unlock(&reg->mu);
    if (rc) {
        munmap(p, size);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

struct seg *seg_find(struct seg_registry *reg, uint64_t seg_id)
{
    pthread_mutex_lock(&reg->mu);
    struct seg *s = find_locked(reg, seg_id, NULL);
    pthread_mutex_unlock(&reg->mu);
    return s;
}

bool seg_local_contains(struct seg_registry *reg, const void *p, uint64_t len)
{
    uintptr_t a = (uintptr_t)p;
    bool ok = false;
    pthread_mutex_lock(&reg->mu);
    for (size_t i = 0; i < reg->nlocal && !ok; i++) {
        uintptr_t b = (uintptr_t)reg->local[i]->base;
        ok = a >= b && a - b <= reg->local[i]->size && len <= reg->local[i]->size - (a - b);
    }
    pthread_mutex_unlock(&reg->mu);
    return ok;
}

static size_t bucket_of(uint64_t token)
{
    return (size_t)((token * 0x9E3779B97F4A7C15ull) >> 52) % SEG_GRANT_BUCKETS;
}

/* Forgets a revoked grant entry (reg->mu held): kept for the next grant, its token wiped, or
 * freed when enough are kept. */
static void grant_drop_locked(struct seg_registry *reg, struct seg_grant_ent *e)
{
    reg->ngrants--;
    if (reg->nspare >= SEG_GRANT_SPARE) {
        free(e);
        return;
    }
    explicit_bzero(&e->g, sizeof(e->g));
    e->next = reg->spare;
    reg->spare = e;
    reg->nspare++;
}

static void revoke_where_locked(struct seg_registry *reg, uint64_t seg_id, uint64_t expired_at)
{
    /* seg_id != 0: drop grants of that segment; expired_at != 0: drop grants expired by then */
    for (size_t b = 0; b < SEG_GRANT_BUCKETS; b++) {
        struct seg_grant_ent **pp = &reg->grants[b];
        while (*pp) {
            struct seg_grant_ent *e = *pp;
            bool drop = (seg_id && e->g.seg_id == seg_id) ||
                        (expired_at && e->g.expiry_ns && e->g.expiry_ns <= expired_at);
            if (drop) {
                *pp = e->next;
                grant_drop_locked(reg, e);
            } else {
                pp = &e->next;
            }
        }
    }
}

int seg_destroy(struct seg_registry *reg, uint64_t seg_id)
{
    pthread_mutex_lock(&reg->mu);
    size_t idx;
    struct seg *s = find_locked(reg, seg_id, &idx);
    if (!s) {
        pthread_mutex_unlock(&reg->mu);
        return kvm_errf(KVMESH_ENOENT, "segment %#llx not found", (unsigned long long)seg_id);
    }
    reg->local[idx] = reg->local[--reg->nlocal];
    revoke_where_locked(reg, seg_id, 0);
    s->dead = true;
    bool unmap_now = s->refs == 0;
    pthread_mutex_unlock(&reg->mu);
    if (unmap_now)
        seg_unmap(s);
    return 0;
}

int seg_grant(struct seg_registry *reg, uint64_t seg_id, uint64_t offset, uint64_t length,
              uint32_t rights, uint64_t ttl_ns, struct seg_grant *out)
{
    if (rights == 0 || (rights & ~(uint32_t)(SEG_READ | SEG_WRITE)))
        return kvm_errf(KVMESH_EINVAL, "grant rights %#x invalid; use SEG_READ|SEG_WRITE", rights);
    struct seg_grant_ent *e = NULL;
    pthread_mutex_lock(&reg->mu);
    struct seg *s = find_locked(reg, seg_id, NULL);
    int rc = 0;
    if (!s) {
        rc = kvm_errf(KVMESH_ENOENT, "segment %#llx not found", (unsigned long long)seg_id);
        goto fail;
    }
    if (length == 0 || offset > s->size || length > s->size - offset) {
        rc = kvm_errf(KVMESH_ERANGE, "grant [%llu, +%llu) outside segment of %llu bytes",
                      (unsigned long long)offset, (unsigned long long)length,
                      (unsigned long long)s->size);
        goto fail;
    }
    uint64_t now = reg->clock(reg->clock_arg);
    if (reg->ngrants >= SEG_MAX_GRANTS)
        revoke_where_locked(reg, 0, now);
    if (reg->ngrants >= SEG_MAX_GRANTS) {
        rc = kvm_errf(KVMESH_ENOSPC, "too many live grants (max %d); revoke unused ones",
                      SEG_MAX_GRANTS);
        goto fail;
    }
    if ((e = reg->spare) != NULL) {
        reg->spare = e->next;
        reg->nspare--;
    } else if ((e = seg_calloc(1, sizeof(*e))) == NULL) {
        rc = kvm_errf(KVMESH_ENOMEM, "grant allocation failed");
        goto fail;
    }
    e->g.seg_id = seg_id;
    e->g.offset = offset;
    e->g.length = length;
    e->g.rights = rights;
    e->g.expiry_ns = ttl_ns ? now + ttl_ns : 0;
    do {
        e->g.token = token_next_locked(reg);
    } while (e->g.token == 0);
    size_t b = bucket_of(e->g.token);
    e->next = reg->grants[b];
    reg->grants[b] = e;
    reg->ngrants++;
    *out = e->g;
    pthread_mutex_unlock(&reg->mu);
    return 0;
fail:
    pthread_mutex_unlock(&reg->mu);
    return rc;
}

int seg_revoke(struct seg_registry *reg, uint64_t token)
{
    pthread_mutex_lock(&reg->mu);
    struct seg_grant_ent **pp = &reg->grants[bucket_of(token)];
    while (*pp) {
        if ((*pp)->g.token == token) {
            struct seg_grant_ent *e = *pp;
            *pp = e->next;
            grant_drop_locked(reg, e);
            pthread_mutex_unlock(&reg->mu);
            return 0;
        }
        pp = &(*pp)->next;
    }
    pthread_mutex_unlock(&reg->mu);
    return kvm_errf(KVMESH_ENOENT, "no grant with this token");
}

size_t seg_grant_count(struct seg_registry *reg)
{
    pthread_mutex_lock(&reg->mu);
    size_t n = reg->ngrants;
    pthread_mutex_unlock(&reg->mu);
    return n;
}

static const struct seg_grant *grant_find_locked(struct seg_registry *reg, uint64_t token)
{
    for (struct seg_grant_ent *e = reg->grants[bucket_of(token)]; e; e = e->next)
        if (e->g.token == token)
            return &e->g;
    return NULL;
}

int seg_grant_allows(const struct seg_grant *g, uint64_t seg_id, uint64_t map_size, uint64_t offset,
                     uint64_t length, uint32_t op, uint64_t now_ns, enum seg_reason *reason)
{
    enum seg_reason r = SEG_OK;
    int rc = 0;
    if (g->seg_id != seg_id) {
        r = SEG_R_WRONGSEG;
        rc = KVMESH_EAUTH;
    } else if (g->expiry_ns && now_ns >= g->expiry_ns) {
        r = SEG_R_EXPIRED;
        rc = KVMESH_EAUTH;
    } else if ((g->rights & op) != op || op == 0) {
        r = SEG_R_RIGHTS;
        rc = KVMESH_EAUTH;
    } else if (offset < g->offset || length > g->length ||
               offset - g->offset > g->length - length) {
        r = SEG_R_RANGE;
        rc = KVMESH_ERANGE;
    } else if (offset > map_size || length > map_size - offset) {
        r = SEG_R_BOUNDS;
        rc = KVMESH_ERANGE;
    }
    if (reason)
        *reason = r;
    return rc;
}

int seg_grant_lookup(struct seg_registry *reg, uint64_t seg_id, uint64_t token,
                     struct seg_grant *out, enum seg_reason *reason)
{
    pthread_mutex_lock(&reg->mu);
    const struct seg_grant *g = grant_find_locked(reg, token);
    enum seg_reason r = SEG_OK;
    int rc = 0;
    if (!find_locked(reg, seg_id, NULL)) {
        r = SEG_R_NOSEG;
        rc = KVMESH_ENOENT;
    } else if (!g) {
        r = SEG_R_NOGRANT;
        rc = KVMESH_EAUTH;
    } else if (g->seg_id != seg_id) {
        r = SEG_R_WRONGSEG;
        rc = KVMESH_EAUTH;
    } else if (g->expiry_ns && reg->clock(reg->clock_arg) >= g->expiry_ns) {
        r = SEG_R_EXPIRED;
        rc = KVMESH_EAUTH;
    } else {
        *out = *g;
    }
    pthread_mutex_unlock(&reg->mu);
    if (reason)
        *reason = r;
    return rc;
}

int seg_check(struct seg_registry *reg, uint64_t seg_id, uint64_t offset, uint64_t length,
              uint32_t op, uint64_t token, uint8_t **ptr, struct seg **pin, enum seg_reason *reason)
{
    pthread_mutex_lock(&reg->mu);
    struct seg *s = find_locked(reg, seg_id, NULL);
    enum seg_reason r = SEG_OK;
    int rc = 0;
    if (!s) {
        r = SEG_R_NOSEG;
        rc = KVMESH_ENOENT;
        goto out;
    }
    const struct seg_grant *g = grant_find_locked(reg, token);
    if (!g) {
        r = SEG_R_NOGRANT;
        rc = KVMESH_EAUTH;
        goto out;
    }
    rc = seg_grant_allows(g, seg_id, s->size, offset, length, op, reg->clock(reg->clock_arg), &r);
    if (rc)
        goto out;
    s->refs++;
    *ptr = s->base + offset;
    *pin = s;
out:
    pthread_mutex_unlock(&reg->mu);
    if (reason)
        *reason = r;
    return rc;
}

void seg_unpin(struct seg_registry *reg, struct seg *pin)
{
    pthread_mutex_lock(&reg->mu);
    KVM_ASSERT(pin->refs > 0);
    bool unmap_now = --pin->refs == 0 && pin->dead;
    pthread_mutex_unlock(&reg->mu);
    if (unmap_now)
        seg_unmap(pin);
}

static struct seg_remote *remote_find_locked(struct seg_registry *reg, const char *owner,
                                             uint64_t seg_id)
{
    for (size_t i = 0; i < reg->nremote; i++)
        if (reg->remote[i]->seg_id == seg_id && strcmp(reg->remote[i]->owner, owner) == 0)
            return reg->remote[i];
    return NULL;
}

struct seg_remote *seg_remote_find(struct seg_registry *reg, const char *owner, uint64_t seg_id)
{
    pthread_mutex_lock(&reg->mu);
    struct seg_remote *r = remote_find_locked(reg, owner, seg_id);
    pthread_mutex_unlock(&reg->mu);
    return r;
}

size_t seg_remote_count(struct seg_registry *reg)
{
    pthread_mutex_lock(&reg->mu);
    size_t n = reg->nremote;
    pthread_mutex_unlock(&reg->mu);
    return n;
}

int seg_remote_map(struct seg_registry *reg, const char *owner, uint64_t seg_id, int fd,
                   uint64_t size, struct seg_remote **out)
{
    int rc = 0;
    struct seg_remote *r = NULL;
    if (strlen(owner) >= SEG_OWNER_KEY_MAX) {
        rc = kvm_errf(KVMESH_EINVAL, "owner key longer than %d bytes", SEG_OWNER_KEY_MAX - 1);
        goto out_close;
    }
    if (size == 0 || size > SEG_MAX_SIZE) {
        rc = kvm_errf(KVMESH_EPROTO, "remote segment size %llu invalid", (unsigned long long)size);
        goto out_close;
    }
    pthread_mutex_lock(&reg->mu);
    r = remote_find_locked(reg, owner, seg_id);
    pthread_mutex_unlock(&reg->mu);
    if (r) {
        *out = r;
        goto out_close;
    }
    /* the size must be sealed (the owner cannot shrink it under the mapping: SIGBUS) ... */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SEG_SIZE_SEALS) != SEG_SIZE_SEALS) {
        rc = kvm_errf(KVMESH_EPROTO, "remote segment fd is not sealed against resizing");
        goto out_close;
    }
    /* ... and the fd's real size must cover what the owner announced, or a copy would fault */
    off_t real = lseek(fd, 0, SEEK_END);
    if (real < 0 || (uint64_t)real < size) {
        rc = kvm_errf(KVMESH_EPROTO, "remote segment fd is %lld bytes, owner announced %llu",
                      (long long)real, (unsigned long long)size);
        goto out_close;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = kvm_errf(KVMESH_ENOMEM, "mmap of remote segment failed: %s", strerror(errno));
        goto out_close;
    }
    seg_prefault(reg, p, size);
    r = seg_calloc(1, sizeof(*r));
    if (!r) {
        munmap(p, size);
        rc = kvm_errf(KVMESH_ENOMEM, "remote mapping allocation failed");
        goto out_close;
    }
    snprintf(r->owner, sizeof(r->owner), "%s", owner);
    r->seg_id = seg_id;
    r->base = p;
    r->size = size;
    pthread_mutex_lock(&reg->mu);
    struct seg_remote *dup = remote_find_locked(reg, owner, seg_id);
    if (dup || reg->nremote >= SEG_MAX_REMOTE) {
        pthread_mutex_unlock(&reg->mu);
        munmap(p, size);
        free(r);
        if (dup) {
            *out = dup;
            goto out_close;
        }
        rc = kvm_errf(KVMESH_ENOSPC, "too many remote mappings (max %d)", SEG_MAX_REMOTE);
        goto out_close;
    }
    reg->remote[reg->nremote++] = r;
    pthread_mutex_unlock(&reg->mu);
    *out = r;
out_close:
    close(fd);
    return rc;
}
