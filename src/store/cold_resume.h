/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_resume.h — resuming a PendingOffload whose device owner crashed before it planned the
 * cold op (docs/cold.md "Resuming after the device owner's crash"). Two parts:
 *
 *   - a replica owner's note: a runtime that holds a replica of a route whose PendingOffload
 *     is on another runtime's device plans the op (cold_op_plan: create-if-absent, idempotent by
 *     cold op id). The PLANNED record is in the due index, so the device owner's reconciliation
 *     resumes the op after a restart even when its own job never started;
 *   - a remote hot read: read_hot on the device owner falls back to a replica held by another
 *     live runtime when none of its own is readable (its DRAM died with the crash), reading it
 *     through the transport on the cold I/O worker and verifying the route's checksum.
 *
 * [loop] for both entry points; the read runs on the worker, its callback on the loop.
 */
#ifndef KVMESH_STORE_COLD_RESUME_H
#define KVMESH_STORE_COLD_RESUME_H

#include <stdbool.h>
#include <stdint.h>

#include "cold/cold.h"
#include "store/store.h"

/* [loop] When r is a live route with a PendingOffload on another runtime's device and this
 * runtime holds one of its replicas, plans the op in metadata (fire and forget: a failure leaves
 * the normal path, the device owner's own job, as it was). */
void kvm_cold_note_pending(kvm_rt_t *rt, cold_t *c, const kvm_route_t *r);

/* The glue's worker queue: false when the job could not be queued (closing). */
typedef bool (*kvm_cold_enqueue_fn)(void *ctx, cold_exec_t *job);

/* [loop] Reads r's payload (len bytes into buf, both the caller's until cb) from a replica held by
 * another live runtime of the membership, on the worker through the transport, bounded by
 * request_timeout_ms; the bytes must match r's checksum. cb(arg, rc) runs on the loop: 0, or the
 * read's error (KVMESH_ECHECKSUM, KVMESH_ETIMEDOUT, a transport error). Returns 0 when started;
 * KVMESH_EUNAVAILABLE when no such replica is reachable (cb never runs), KVMESH_ENOMEM. */
int kvm_cold_read_hot_remote(kvm_rt_t *rt, const kvm_route_t *r, void *buf, uint64_t len,
                             kvm_cold_enqueue_fn enq, void *ectx, cold_rc_cb cb, void *arg);

#endif
