/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slot_batch.h — COMMIT and RELEASE notifications to remote owners, batched per owner while the
 * route service handles a group of answers (docs/store.md "Batched COMMIT and RELEASE",
 * docs/protocol.md "Store messages").
 *
 * Requester: kvm_slot_notify sends one slot message (COMMIT or RELEASE) to a remote owner. While
 * a group is open (kvm_slot_batch_begin/end: the route service's group hooks, set by
 * kvm_slot_batch_attach), an untraced message joins its owner's STORE_RPC_SLOT_BATCH instead,
 * sent when the group closes, when the batch is full, at kvm_slot_batch_flush, or before a
 * traced message to the same owner (so one owner's messages keep their order). A batch of one
 * goes as the plain notification. A batch is a call until its owner's answer says the owner
 * takes it as a notification (STORE_SLOT_BATCH_TAKES_NOTE); that owner (id and epoch) is
 * remembered and gets its batches as notifications from then on (no answer: one message per
 * batch, as a group's COMMIT and RELEASE to one owner are two). An owner answering without the
 * flag (older) keeps the call form. An owner answering KVMESH_ENOTSUP (older still) is
 * remembered and gets the items, and from then on every message, as single notifications. Best
 * effort like the single notification: a lost one is settled by the reservation's TTL and the
 * route.
 *
 * Owner: kvm_slot_batch_serve registers the STORE_RPC_SLOT_BATCH request and notification
 * handlers, which run apply for every item in order, exactly as the item's own notification
 * would (owner.c on_slot); the request is answered 0 with the flag.
 *
 * Loop thread. The outbox lives in kvm_rt_t (slotb_*): allocated by the first group's first
 * message and kept, with one spare batch record, until kvm_slot_batch_close (runtime close), so
 * a steady stream of groups (each overwriting put's COMMIT and RELEASE) allocates neither;
 * rt->slotb_allocs counts what it allocated (tests read it).
 */
#ifndef KVMESH_STORE_SLOT_BATCH_H
#define KVMESH_STORE_SLOT_BATCH_H

#include <stdint.h>

#include "store/slot_core.h"
#include "store/store.h"

#define STORE_SLOTB_OWNERS     16    /* owners one group batches; messages to more go alone */
#define STORE_SLOTB_TIMEOUT_MS 30000 /* how long a batch's answer is waited for */

/* Sets the route service's group hooks to begin/end (once; rt->route must exist). */
void kvm_slot_batch_attach(kvm_rt_t *rt);
void kvm_slot_batch_begin(kvm_rt_t *rt);
void kvm_slot_batch_end(kvm_rt_t *rt); /* outermost: sends every owner's batch */
/* Sends every owner's batch now (the group stays open). NULL rt: a no-op. */
void kvm_slot_batch_flush(kvm_rt_t *rt);
/* Runtime close, once the route service is freed (runtime.c close_start, while the endpoint
 * still sends): a group it left open (freed in the middle of one) never ends, so what the group
 * queued is sent now, the outbox freed and the group closed; later messages go alone. Batches
 * awaiting their answer are freed by it (the endpoint's close cancels them). */
void kvm_slot_batch_close(kvm_rt_t *rt);

/* Frees what kvm_slot_batch_close would, sending nothing: for a runtime whose loop has stopped
 * without running its close (rt_free). No-op after kvm_slot_batch_close. */
void kvm_slot_batch_free(kvm_rt_t *rt);

/* COMMIT (type STORE_RPC_COMMIT) or RELEASE of (seg, off) to the remote owner `owner` (this
 * runtime's member record; its epoch is the target). note: the slot's identity (NULL: none).
 * parent: the request's span (NULL = untraced; a sampled one goes alone with a span). */
void kvm_slot_notify(kvm_rt_t *rt, uint16_t type, const struct kvm_member *owner, uint64_t seg,
                     uint64_t off, const slot_note_t *note, struct obs_span *parent);

/* Owner side: registers the STORE_RPC_SLOT_BATCH handlers (request and notification) on rt->ep;
 * apply: one item's effect. */
void kvm_slot_batch_serve(kvm_rt_t *rt, kvm_slot_apply_fn apply);

/* Test-only, on rt's loop: rt serves STORE_RPC_SLOT_BATCH as an owner that predates the
 * notification form (answers without the flag, drops the notification). */
void kvm_slot_batch_test_old_owner(kvm_rt_t *rt);
/* Test-only, on rt's loop: rt forgets what owners answered (the notification form taken, the
 * batch refused), as a requester that never sent them a batch. */
void kvm_slot_batch_test_forget(kvm_rt_t *rt);

#endif
