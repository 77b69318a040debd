/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_glue.h — the store's wiring of the cold tier core (src/cold/cold.h; docs/cold.md "Store
 * wiring"): one cold device per runtime from its configuration (cold_kind, cold_root,
 * cold_capacity), the cold I/O worker thread that runs backend work, the route callbacks the
 * core calls (exact lookup, hot read, materialize CAS, last-hot eviction CAS) over the store's
 * route client, and the few calls the store's own paths make: the PendingOffload backing of a
 * write, the offload and reclaim after a publication, last-hot eviction, cold-only reads.
 *
 * Threads: everything is [loop] except kvm_cold_read, which an application thread calls (it
 * hands the restore to the loop and waits for it). The glue state is rt->cold (NULL: the cold
 * tier is off, and every call here is a no-op or answers KVMESH_ENOTSUP).
 */
#ifndef KVMESH_STORE_COLD_GLUE_H
#define KVMESH_STORE_COLD_GLUE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "store/store.h"

/* The owner's slot calls the glue makes to promote a restored object into a hot slot: runtime.c
 * passes owner.c's kvm_owner_reserve / kvm_owner_commit / kvm_owner_release at open, so that
 * cold_glue.c never calls owner.c, which calls it (docs/architecture.md "Store layering"). */
typedef struct kvm_cold_owner_ops {
    void (*reserve)(kvm_rt_t *rt, const kvm_ident_t *id, uint64_t len, uint32_t ttl_ms,
                    kvm_reserve_cb cb, void *arg);
    void (*commit)(kvm_rt_t *rt, uint64_t seg, uint64_t off);
    void (*release)(kvm_rt_t *rt, uint64_t seg, uint64_t off);
} kvm_cold_owner_ops_t;

/* [loop] Opens the backend, the core, registers the device, refreshes the view, starts the
 * worker thread and the timers; cb(rt, 0, "") at once when cold_kind is off (then rt->cold is
 * only a reclaim planner without a device, or NULL: see kvm_cold_has_device). owner (all three
 * set) is copied. On failure cb gets the code and a message naming what to fix; kvm_cold_close
 * still cleans up. */
void kvm_cold_open(kvm_rt_t *rt, const kvm_cold_owner_ops_t *owner, kvm_done_cb cb);
/* [loop] cold_close, then the worker is drained and joined, then the backend closed. Before the
 * route service and the metadata handle close. Idempotent. */
void kvm_cold_close(kvm_rt_t *rt);
/* [any] Whether this runtime has a cold device (cold_kind != off). */
bool kvm_cold_has_device(kvm_rt_t *rt);

/* Per-owner totals of this runtime's cold device view (GET /cluster, member "cold"). */
#define KVM_COLD_VIEW_OWNERS_MAX 64 /* owners one view can name (its device bound) */
typedef struct kvm_cold_owner_sum {
    kvm_runtime_id_t owner;
    uint32_t devices;
    uint64_t capacity, used, reserved;
    const char *health; /* the worst of the owner's devices: "healthy", "degraded", "failed" */
} kvm_cold_owner_sum_t;
/* [loop] Sums the device view per owner into out[0..cap) and returns the number of owners; -1
 * when this runtime has no device view (cold_kind = off: its core is only the reclaim planner,
 * whose view is never refreshed; or no cold core at all). Reads the view as the last tick's
 * refresh left it: no metadata I/O. */
int kvm_cold_owner_sums(kvm_rt_t *rt, kvm_cold_owner_sum_t *out, size_t cap);

/* [loop] Write path: when offload applies (cold tier on here, offload on, a device with room
 * owned by a runtime that holds one of the new replicas: this runtime's own first, with its
 * queue not full) sets next->cold to a PendingOffload backing of a fresh cold op for
 * next->content_op on that device. next has its replicas. The owner queues the offload: this
 * runtime after the CAS (kvm_cold_published), another when the commit reaches it
 * (kvm_cold_slot_committed). Returns 0, or with cold_write_through on, when no device takes the
 * object (next->cold left empty), KVMESH_ENOSPC / KVMESH_EAGAIN / KVMESH_EUNAVAILABLE with
 * kvmesh_last_error() saying why: the put must fail without its CAS. */
int kvm_cold_backing_for(kvm_rt_t *rt, kvm_route_t *next);
/* [loop] After a put's route CAS applied: queues the offload of now's PendingOffload backing on
 * this runtime's device. */
void kvm_cold_published(kvm_rt_t *rt, const kvm_route_t *now);

/* [loop] cold_write_through (docs/cold.md "Durable puts"): after a put's route CAS applied with
 * `now` (its content op, its cold backing), waits until that cold op is USAGE_COMMITTED: on this
 * runtime's device through the offload job's completion (the job runs urgent), on another
 * runtime's by polling the op record. Returns false when write-through is off (finish the item
 * now); true when cont(op, it, rc, msg) will run exactly once on the loop: rc 0 (durable), or
 * an error with a message (the offload was released or parked, no cold backing, the request
 * deadline passed, the runtime closed). op and it stay the caller's; they must stay valid until
 * cont ran (an unfinished item keeps its op alive). */
typedef void (*kvm_cold_durable_cb)(kvm_op_t *op, struct kvm_item *it, int rc, const char *msg);
bool kvm_cold_durable_wait(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, const kvm_route_t *now,
                           kvm_cold_durable_cb cont);

/* [loop] Owner side: a slot of `ident` was committed for a writer elsewhere; looks the route up
 * and queues the offload when it carries a PendingOffload on this runtime's device. */
void kvm_cold_slot_committed(kvm_rt_t *rt, const kvm_ident_t *ident);

/* [loop] Before a route CAS that replaces it->cur (put or remove): when cur carries a
 * MATERIALIZED backing that has no planned reclaim yet, plans one (cold_reclaim_plan, durable)
 * and returns true: cont(op, it, rc) then runs once (rc 0: planned, do the CAS now; else fail
 * the item without a CAS). false: nothing to plan, go on. A plan for an older cur (a conflict
 * retry) is cancelled first. */
typedef void (*kvm_cold_gate_cb)(kvm_op_t *op, struct kvm_item *it, int rc);
bool kvm_cold_reclaim_gate(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, kvm_cold_gate_cb cont);
/* [loop] After the CAS: applied = run the planned reclaim (cold_reclaim_run when the device is
 * here; the owner's reconciliation runs it otherwise); refused for good = cold_reclaim_cancel.
 * An outcome that may have applied is settled by neither: the record stays due. */
void kvm_cold_reclaim_settle(kvm_rt_t *rt, struct kvm_item *it, bool applied);

/* [loop] Last-hot eviction of `rep` (the route's only hot replica, the backing materialized):
 * cold_evict; cb(arg, 0) when the replica left the route (the caller frees its bytes then),
 * another code otherwise (keep the bytes). Returns 0 or an error (cb then never runs). */
typedef void (*kvm_cold_evict_cb)(void *arg, int rc);
int kvm_cold_evict_last(kvm_rt_t *rt, const kvm_ident_t *ident, const kvm_hot_replica_t *rep,
                        kvm_cold_evict_cb cb, void *arg);
/* [loop] True when `route` may not lose its last hot replica yet: its backing is still
 * PendingOffload on this runtime's device while offload jobs are queued or in flight (the
 * eviction waits for the materialization; with none pending it is evicted as a cache object). */
bool kvm_cold_pins_last(kvm_rt_t *rt, const kvm_route_t *route);

/* [loop] cold_offload_mode = evict: true when the eviction may claim `r` (its only hot replica
 * is this runtime's, no cold backing, this runtime's device has room and its queue is not full).
 * kvm_cold_evict_claim then CASes a PendingOffload of a fresh cold op on this runtime's device
 * into the route, runs it as an urgent offload job, and evicts the replica once the cold copy is
 * usage-committed: cb(arg, 0) when the replica left the route (free its bytes then), another
 * code otherwise (keep them). Returns 0 or an error (cb then never runs). */
bool kvm_cold_claims(kvm_rt_t *rt, const kvm_route_t *r);
int kvm_cold_evict_claim(kvm_rt_t *rt, const kvm_route_t *r, const kvm_hot_replica_t *rep,
                         kvm_cold_evict_cb cb, void *arg);

/* [app thread] Reads a cold-only object (route->cold MATERIALIZED) into iov: cold_restore on
 * the loop, bytes verified there against the route's length and checksum, copied before the
 * callback returns. 0, KVMESH_ECHECKSUM / KVMESH_ECORRUPT (verification failed: no bytes
 * returned), KVMESH_ENOTSUP (the device belongs to another runtime: remote restore is not
 * built), KVMESH_ETIMEDOUT (deadline_ms passed), or the core's error. */
int kvm_cold_read(kvm_rt_t *rt, const kvm_route_t *route, const struct iovec *iov, int iovcnt,
                  uint64_t deadline_ms);

/* Batch restore (docs/cold.md "Batch restore"). kvm_cold_read_batch (cold_batch.c) restores
 * the cold-only items of a batch get, grouped by the cold copy's owner runtime and device: the
 * local group in one device read per device on the cold I/O worker, straight into the caller's
 * buffers, each remote group in STORE_RPC_COLD_READ_BATCH requests of up to
 * STORE_COLD_BATCH_MAX items (more when the owner's staging pool holds only part of a group:
 * the rest is asked for again, never failed for it). items[i].rc is each item's result, as
 * kvm_cold_read would answer it alone. [app thread] */
typedef struct kvm_cold_bitem {
    const kvm_route_t *route; /* borrowed; route->cold MATERIALIZED */
    const struct iovec *iov;  /* the caller's buffers, route->length bytes */
    int iovcnt;
    int rc;       /* out */
    bool counted; /* internal: its restore metrics are counted already */
} kvm_cold_bitem_t;
void kvm_cold_read_batch(kvm_rt_t *rt, kvm_cold_bitem_t *items, size_t n, uint64_t deadline_ms);

/* Internal to cold_batch.c. [loop] The local group's reads on this runtime's cold core
 * (cold_restore_batch into items' buffers): cb(arg, 0) once every item has its rc (possibly
 * before the return), or cb(arg, KVMESH_ECANCELED) from kvm_cold_close after the worker
 * finished every read (the buffers are no longer written either way). Returns 0 or an error
 * (cb then never runs). */
struct cold_batch_item;
typedef void (*kvm_cold_local_cb)(void *arg, int rc);
int kvm_cold_local_batch(kvm_rt_t *rt, struct cold_batch_item *items, size_t n,
                         kvm_cold_local_cb cb, void *arg, size_t *jobs);
/* [any] STORE_RPC_COLD_ACK of a staged token to its owner (lost: the owner's expiry recycles) */
void kvm_cold_ack_post(kvm_rt_t *rt, const kvm_runtime_id_t *owner, uint64_t token);
/* Tests only: while on, this process's owners answer STORE_RPC_COLD_READ_BATCH with
 * KVMESH_ENOTSUP, as a release without it does (the readers fall back to kvm_cold_read). */
void kvm_cold_test_refuse_batch(bool on);
/* Tests only: while on, placement on this process's runtimes picks only their device 0 (the
 * test of several devices per runtime, cold_store_multi, fails so). */
void kvm_cold_test_pin_device0(bool on);
/* Tests only: while on, this process's runtimes keep their device view as it is (no refresh on
 * the tick), so a put places its cold copy from a view of before an operator's drain. */
void kvm_cold_test_freeze_view(bool on);
/* Tests only: while on, a PendingOffload on this process's own devices is not queued when it is
 * published (as if the device owner died right after the route CAS, before planning its op). */
void kvm_cold_test_skip_offload(bool on);
/* The hashes a cold read request carries (the owner's staging validation compares them). */
uint64_t kvm_cold_version_hash(const kvm_route_version_t *v);
uint64_t kvm_cold_namespace_hash(const kvm_ident_t *id);

#endif
