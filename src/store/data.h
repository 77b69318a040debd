/* SPDX-License-Identifier: Apache-2.0 */
/*
 * data.h — the application-thread entry points of the store runtime (data.c), used by the
 * public API (src/api/kvmesh.c). Every function here blocks the calling thread until the
 * operation finished; any number of threads may call them on one runtime at once.
 *
 * Ownership: idents and buffers are borrowed for the call; kvm_sgout.alloc_buf (alloc mode) is
 * malloc'd and handed to the caller (kvmesh_free = free).
 */
#ifndef KVMESH_STORE_DATA_H
#define KVMESH_STORE_DATA_H

#include "store/store.h"

#define KVMESH_IOV_MAX 64 /* iovecs per scatter/gather call */

struct kvm_sg { /* a put's value: concatenation of iov */
    const struct iovec *iov;
    int iovcnt;
    uint64_t len;
};

struct kvm_sgout {              /* a get's destination */
    const struct iovec *iov_in; /* caller's list (NULL: `one`) */
    int iovcnt_in;
    uint64_t cap;     /* total capacity */
    bool alloc;       /* allocate alloc_buf of the object's size instead */
    bool read_failed; /* rc comes from the replica reads (not from the route lookup) */
    void *alloc_buf;
    struct iovec one;
    struct iovec trim[KVMESH_IOV_MAX];
    const struct iovec *iov;
    int iovcnt;
    uint64_t out_len;
    int rc;
};

int kvm_store_put(kvm_rt_t *rt, const kvm_ident_t *ids, const struct kvm_sg *sgs, size_t n,
                  const kvmesh_put_opts_t *opts, int *rcs);
int kvm_store_get(kvm_rt_t *rt, const kvm_ident_t *ids, struct kvm_sgout *outs, size_t n);
/* routes may be NULL (existence only); routes[i] must be initialized (kvm_route_init). */
int kvm_store_lookup(kvm_rt_t *rt, const kvm_ident_t *ids, size_t n, kvm_route_t *routes, int *rcs);
int kvm_store_remove(kvm_rt_t *rt, const kvm_ident_t *ids, size_t n, int *rcs);
int kvm_store_drain(kvm_rt_t *rt, uint32_t timeout_ms, size_t *moved, size_t *failed);
int kvm_store_stats(kvm_rt_t *rt, struct kvm_rt_stats *st);
/* An application thread waits for the owner's slots to settle (reservations commit or expire,
 * reclaims end, evictions finish) between checks of that state: returns 0 to check again,
 * KVMESH_ECLOSED at runtime close, KVMESH_ETIMEDOUT at deadline_ms (monotonic ms). *gen is from
 * kvm_waitq_enter(&rt->wq_slots), which the caller brackets its checks with. Local commits and
 * releases signal rt->wq_slots (ops_item.c), and so does the owner after every step of its slot
 * core (owner.c owner_sync: commits, releases, evictions, and the housekeeping tick that settles
 * expiries and reclaims every STORE_TICK_MS). */
int kvm_store_wait_slots(kvm_rt_t *rt, uint64_t *gen, uint64_t deadline_ms);
/* Storage resize at run time: a new segment of `size` bytes joins the record; a retired segment
 * takes no new slots, its replicas move (to other segments or owners, routes CAS'ed), then it is
 * removed from the record and unmapped. */
int kvm_store_add_segment(kvm_rt_t *rt, uint64_t size, uint64_t *seg_id);
int kvm_store_retire_segment(kvm_rt_t *rt, uint64_t seg_id, uint32_t timeout_ms);

#endif
