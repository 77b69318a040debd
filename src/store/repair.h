/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair.h — background re-replication (docs/reliability.md "Re-replication").
 *
 * When a membership snapshot shows a storage owner gone (absent: its lease expired or it left;
 * present with another epoch: superseded) or draining, every storage runtime notes the owner and
 * its repair thread scans the routes that reference it, in bounded pages, through the route
 * service's owner enumeration (the shard authorities' owner index in EmbeddedWrh; a range of
 * the route keys in MetadataOnly). A route has fewer live replicas than its replica count when
 * one of its replicas is on an owner that is not an ACTIVE member holding that segment. A
 * DRAINING owner moves its own replicas (kvm_store_drain); they are replaced here only once the
 * owner is gone with them still referenced (a drain that died or timed out): copying them
 * during the drain too would race the drain's own handoff, which then finds no free owner in a
 * small cluster and fails the drain (seen with 3 runtimes and 2 replicas). The
 * runtime designated to repair it is the owner of its first live replica (in route order), so
 * exactly one runtime copies each object, and the copy is local: it checks the checksum of its
 * own replica, reserves a slot on a new owner (PLACE with every current owner excluded), writes
 * the bytes there, and publishes the route with the dead replica replaced by the new one (the
 * HANDOFF op: a fenced route CAS against the version just read). A racing overwrite or delete
 * wins: the replica is no longer in the route, and the copy is released.
 *
 * Limits: copies per round (rereplicate_max_copies), bytes per second (rereplicate_bytes_per_sec,
 * a token bucket; 0 = unlimited). Paused while the cluster has fewer ACTIVE storage owners than
 * the configured replica count (a copy would have nowhere to go). An owner stays noted until a
 * complete pass over its routes finds nothing for this runtime to do.
 *
 * Threads: the membership hook (rt->on_members, which kvm_repair_new sets; member.c calls it for
 * each installed snapshot) runs on the loop thread;
 * the repair thread is an application-like thread that talks to the loop only through ops
 * (kvm_op_run) and posted scan calls; kvm_repair_stats is [any].
 * Ownership: the runtime owns the repair state (rt->repair), created before the loop starts,
 * started once open succeeded, stopped (joined) at close before the loop is told to close.
 */
#ifndef KVMESH_STORE_REPAIR_H
#define KVMESH_STORE_REPAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvm_rt;
struct kvm_member;

/* What /stats shows (and tests read). Gauges are this runtime's view now. */
struct kvm_repair_stats {
    uint64_t pending_owners;   /* departed/draining owners whose routes are still to be passed */
    uint64_t under_replicated; /* objects found by the current pass that this runtime repairs */
    uint64_t copies_in_flight;
    uint64_t lost;         /* objects of the last pass with no live replica left (not repairable) */
    uint64_t found;        /* total under-replicated objects found (kvmesh_rereplication_found) */
    uint64_t repaired;     /* total copies published */
    uint64_t superseded;   /* total copies dropped because an overwrite/delete won */
    uint64_t failed;       /* total copies that failed (retried by the next pass) */
    uint64_t bytes_copied; /* total bytes of published copies */
    uint64_t passes;       /* complete passes over an owner's routes */
    bool paused;           /* fewer ACTIVE storage owners than the replica count */
};

/* Creates the state (no thread yet) and sets rt->on_members. 0 or KVMESH_ENOMEM. */
int kvm_repair_new(struct kvm_rt *rt);
/* Starts the repair thread (storage runtimes only; a client-only runtime holds no replica). */
int kvm_repair_start(struct kvm_rt *rt);
/* Stops and joins the thread, frees the state; NULL-safe, idempotent. Call with rt->closing set
 * and the loop still running (in-flight ops then finish or fail with KVMESH_ECLOSED). */
void kvm_repair_stop(struct kvm_rt *rt);
/* Frees the state once the loop stopped (rt_free); NULL-safe. */
void kvm_repair_free(struct kvm_rt *rt);
/* [any] */
void kvm_repair_stats(struct kvm_rt *rt, struct kvm_repair_stats *out);

/* [loop] Whether a reader could get bytes from rep now, by this runtime's snapshot: its owner is
 * an ACTIVE or DRAINING member that lists the replica's segment (a closed, expired or restarted
 * owner's replica is not). Eviction keeps this invariant with it (owner.c evict_looked_up): it
 * never publishes a live route whose replicas are all unreadable — when the replica it evicts is
 * the last readable one, the object leaves the cache as a whole (a tombstone), so readers get a
 * clean miss instead of a route that points only at a closed runtime's memory. */
struct kvm_hot_replica;
bool kvm_replica_readable(struct kvm_rt *rt, const struct kvm_hot_replica *rep);

#endif
