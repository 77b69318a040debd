/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seg.h — memory segments, access grants and the mapping of remote segments.
 *
 * A segment is a memfd (optionally backed by huge pages) mapped read/write in the owner's
 * process; the owner can pass its fd to same-host peers, which map it once. The registry owns:
 *   - local segments: id -> {fd, base, size}; ids carry a random per-registry epoch in the high
 *     32 bits so an id from an earlier incarnation of the owner does not name a new segment;
 *   - grants: token -> {segment, offset, length, rights, expiry}; every remote access is
 *     checked against a grant (rights, range inside the grant, not expired) and against the
 *     segment bounds (seg_check);
 *   - remote mappings: (owner key, segment id) -> one mapping per process (seg_remote_map).
 *
 * Invariants: a grant's range lies inside its segment; a pinned segment (seg_check succeeded and
 * seg_unpin not yet called) stays mapped even if seg_destroy() runs meanwhile; the last unpin
 * unmaps it. Every table is bounded (SEG_MAX_*).
 *
 * Threading: every function is thread-safe (one mutex per registry; the I/O threads of the
 * transports call seg_check/seg_unpin concurrently with the owner's loop creating grants).
 */
#ifndef KVMESH_NET_SEG_H
#define KVMESH_NET_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEG_MAX_LOCAL     1024         /* local segments per registry */
#define SEG_MAX_REMOTE    1024         /* remote mappings per registry */
#define SEG_MAX_GRANTS    65536        /* live grants per registry */
#define SEG_MAX_SIZE      (1ull << 40) /* one segment: 1 TiB */
#define SEG_OWNER_KEY_MAX 160          /* owner key of a remote mapping, with NUL */
#define SEG_HUGE_2M       (2ull << 20)

enum seg_flags {
    SEG_F_HUGE = 1u << 0, /* try MFD_HUGETLB (2 MiB pages); falls back to normal pages */
};

enum seg_rights {
    SEG_READ = 1u << 0,  /* the grantee may READ (copy out of the segment) */
    SEG_WRITE = 1u << 1, /* the grantee may WRITE (copy into the segment) */
};

/* Why a check refused an access (also carried on the wire, see transport_wire.h). */
enum seg_reason {
    SEG_OK = 0,
    SEG_R_NOSEG = 1,    /* no such segment (destroyed, or never existed) */
    SEG_R_NOGRANT = 2,  /* token unknown: wrong or revoked */
    SEG_R_EXPIRED = 3,  /* grant expired */
    SEG_R_RIGHTS = 4,   /* the grant lacks the right for this op */
    SEG_R_RANGE = 5,    /* access outside the granted range */
    SEG_R_BOUNDS = 6,   /* access outside the segment / mapping */
    SEG_R_WRONGSEG = 7, /* the grant is for another segment */
    SEG_R_MAX
};

/* A local segment. Read-only for callers; base/size/fd are valid until seg_destroy(). */
struct seg {
    uint64_t id;
    int fd;
    uint8_t *base;
    uint64_t size;
    bool huge; /* huge pages were obtained */
    /* registry-private */
    uint32_t refs;
    bool dead;
};

/* A grant descriptor: what the owner returns to a grantee (plain data, copyable). */
struct seg_grant {
    uint64_t seg_id;
    uint64_t offset;
    uint64_t length;
    uint32_t rights;    /* SEG_READ | SEG_WRITE */
    uint64_t expiry_ns; /* CLOCK_MONOTONIC of the owner's host; 0 = never */
    uint64_t token;     /* random 64-bit, never 0 */
};

/* A mapping of a remote (same-host) segment. Valid until the registry is freed. */
struct seg_remote {
    char owner[SEG_OWNER_KEY_MAX];
    uint64_t seg_id;
    uint8_t *base;
    uint64_t size;
};

struct seg_registry;

typedef uint64_t (*seg_clock_fn)(void *arg);

/* Creates a registry. *out is owned by the caller, freed with seg_registry_free. */
int seg_registry_new(struct seg_registry **out);
/* Unmaps every local segment and remote mapping. No pin may be outstanding. NULL is a no-op. */
void seg_registry_free(struct seg_registry *reg);
/* Replaces the monotonic clock used for grant expiry (tests). fn NULL restores the default. */
void seg_registry_set_clock(struct seg_registry *reg, seg_clock_fn fn, void *arg);
uint64_t seg_now_ns(struct seg_registry *reg);
/* With on, every segment created or adopted and every remote mapping made afterwards is
 * populated when mapped (all its pages faulted in at once: MADV_POPULATE_WRITE, Linux >= 5.14;
 * best effort), so the data path takes no page faults; the cost moves to the open (a new
 * segment's memory is allocated and zeroed there). Off by default. */
void seg_registry_set_prefault(struct seg_registry *reg, bool on);

/* Creates a segment of `size` bytes (rounded up to the page size, 2 MiB when huge pages were
 * obtained). *out is owned by the registry and valid until seg_destroy(). */
int seg_create(struct seg_registry *reg, uint64_t size, unsigned flags, struct seg **out);
/* Takes over a segment created by another process (a hot-upgrade predecessor handed its fd
 * over SCM_RIGHTS): the fd must be sealed against resizing and hold at least `size` bytes
 * (a multiple of the page size); it is mapped MAP_SHARED, so the memory is shared with the
 * predecessor, never copied. The segment keeps the id `seg_id` (routes name it); ids this
 * registry creates later never collide with it. Takes ownership of fd on success only.
 * KVMESH_EPROTO (fd not sealed, too small), KVMESH_EEXIST (id in use), KVMESH_EINVAL. */
int seg_adopt(struct seg_registry *reg, uint64_t seg_id, int fd, uint64_t size, struct seg **out);
/* Removes a segment and revokes its grants; unmapped once no pin remains. */
int seg_destroy(struct seg_registry *reg, uint64_t seg_id);
/* Finds a live local segment (no pin taken: use seg_check for remote access). */
struct seg *seg_find(struct seg_registry *reg, uint64_t seg_id);

/* Grants [offset, offset+length) of a segment with `rights` for ttl_ns (0 = no expiry).
 * The descriptor (with a fresh random token) is written to *out. */
int seg_grant(struct seg_registry *reg, uint64_t seg_id, uint64_t offset, uint64_t length,
              uint32_t rights, uint64_t ttl_ns, struct seg_grant *out);
/* Revokes a grant by token. KVMESH_ENOENT if unknown. */
int seg_revoke(struct seg_registry *reg, uint64_t token);
/* Copies the live grant for a token into *out (KVMESH_EAUTH if unknown or expired). */
int seg_grant_lookup(struct seg_registry *reg, uint64_t seg_id, uint64_t token,
                     struct seg_grant *out, enum seg_reason *reason);
size_t seg_grant_count(struct seg_registry *reg);
/* True when [p, p+len) lies inside one live local segment's mapping. */
bool seg_local_contains(struct seg_registry *reg, const void *p, uint64_t len);

/*
 * Owner-side check of one remote access: op is SEG_READ or SEG_WRITE. On success *ptr points at
 * segment memory for [offset, offset+length), *pin holds the segment pinned until seg_unpin().
 * Failures: KVMESH_ENOENT (no segment), KVMESH_EAUTH (token wrong/revoked/expired, rights),
 * KVMESH_ERANGE (outside grant or segment); *reason says which.
 */
int seg_check(struct seg_registry *reg, uint64_t seg_id, uint64_t offset, uint64_t length,
              uint32_t op, uint64_t token, uint8_t **ptr, struct seg **pin,
              enum seg_reason *reason);
void seg_unpin(struct seg_registry *reg, struct seg *pin);

/* Pure check of an access against a grant descriptor and a mapping size (used client-side by
 * the shm transport). now_ns is the same host's CLOCK_MONOTONIC. Same errors as seg_check. */
int seg_grant_allows(const struct seg_grant *g, uint64_t seg_id, uint64_t map_size, uint64_t offset,
                     uint64_t length, uint32_t op, uint64_t now_ns, enum seg_reason *reason);

/* Maps a remote segment's fd once per (owner, seg_id). Takes ownership of fd in every case
 * (closed after mmap, or immediately if the mapping already exists). *out is owned by the
 * registry, valid until seg_registry_free. */
int seg_remote_map(struct seg_registry *reg, const char *owner, uint64_t seg_id, int fd,
                   uint64_t size, struct seg_remote **out);
struct seg_remote *seg_remote_find(struct seg_registry *reg, const char *owner, uint64_t seg_id);
size_t seg_remote_count(struct seg_registry *reg);

const char *seg_reason_str(enum seg_reason r);

/*
 * Allocation fault injection (tests), process-wide: after seg_fault_alloc_after(n), n >= 1, the
 * n-th allocation made by src/net/seg* and src/net/transport* fails once; 0 disarms.
 * seg_fault_armed() says whether the countdown has not reached its failure yet.
 */
void seg_fault_alloc_after(unsigned n);
bool seg_fault_armed(void);
/* calloc honouring the injected fault; free with free(). */
void *seg_calloc(size_t n, size_t size);
/* Allocations seg_calloc made so far, process-wide (tests pin that a steady stream of requests
 * allocates nothing per request: tcp chunks and grant entries are reused). */
uint64_t seg_alloc_count(void);

#endif
