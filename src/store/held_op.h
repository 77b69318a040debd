/* SPDX-License-Identifier: Apache-2.0 */
/*
 * held_op.h — the owner's check of a held reservation's quota operation (docs/tenancy.md
 * "Replaying a put", step 2). A RESERVED slot past its TTL that the exact route lookup shows
 * unreferenced is freed today; a put whose writer died between its claim and its route CAS
 * could still be replayed onto it. Before freeing, the owner reads the object's accounting row
 * (objects/<tenant>/<domain>/<key>) and, when it is locked, the locking operation
 * (acct-ops/<tenant>/<op>): the lock names the object's one non-terminal operation, so no
 * reservation message has to carry the operation id (older writers are covered too).
 *
 *   verdict KEEP   — the lock's operation is PENDING (it may still be claimed), or PUBLISHING
 *                    with a put payload that names this slot (a replay may publish it): the slot
 *                    stays held and is looked at again later;
 *   verdict REREAD — anything else (no row, unlocked, the lock's operation terminal or absent,
 *                    a delete, a payload naming other slots or none): the owner looks the route
 *                    up again (after this read, see the safety argument) and commits when it
 *                    references the slot, frees it otherwise.
 *
 * Loop thread only. The check reads metadata directly (rt->meta), so it works on owners that
 * have no quota policy for the tenant.
 */
#ifndef KVMESH_STORE_HELD_OP_H
#define KVMESH_STORE_HELD_OP_H

#include <stdbool.h>

#include "core/route.h"
#include "tenant/tenant.h"

enum kvm_held_verdict { KVM_HELD_KEEP = 1, KVM_HELD_REREAD = 2 };

/* Pure decision. row NULL: no accounting row; op NULL: the lock's operation record is absent.
 * slot: this owner's (owner, segment, offset). */
enum kvm_held_verdict kvm_held_decide(const tn_objrow_t *row, const tn_op_t *op,
                                      const kvm_hot_replica_t *slot);

struct kvm_rt;
/* rc 0 with a verdict; KVMESH_ECANCELED when the runtime closes; any other rc: unknown (the
 * caller keeps the slot held and asks again later). */
typedef void (*kvm_held_cb)(void *arg, int rc, enum kvm_held_verdict v);

/* Starts the exact reads for the held slot `slot` of identity id (copied; the caller's memory
 * may go after the call). cb runs once, never inside this call. Returns 0, or an error (no
 * metadata handle, out of memory) with cb never called. */
int kvm_held_op_check(struct kvm_rt *rt, const kvm_ident_t *id, const kvm_hot_replica_t *slot,
                      kvm_held_cb cb, void *arg);

#endif
