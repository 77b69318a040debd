/* SPDX-License-Identifier: Apache-2.0 */
/*
 * place_wait — puts that found too few live storage members wait for the next membership
 * refresh instead of failing at once (ops_place.c).
 *
 * A storage runtime whose lease lapsed for a moment (a loaded machine missing a heartbeat) is
 * absent from the membership snapshot until it registers again. A put that finds fewer storage
 * members than it needs replicas keeps the reservations it holds and waits on rt->place_waiters:
 * each installed snapshot retries its placement (kvm_place_waiters_wake), the call's deadline
 * fails it with the usual "placed M of N replicas ... (k live members)" message (a per-item loop
 * timer), and runtime close fails it with KVMESH_ECLOSED (kvm_place_waiters_close). Loop thread
 * only; the list owns its entries, the op owns the items (an op never completes while one of its
 * items waits, so an entry never outlives its op).
 */
#ifndef KVMESH_STORE_PLACE_WAIT_H
#define KVMESH_STORE_PLACE_WAIT_H

#include "store/store.h"

/* A new membership snapshot is installed (member.c): every waiting put retries its placement. */
void kvm_place_waiters_wake(kvm_rt_t *rt);
/* The runtime is closing (close_start): every waiting put fails with KVMESH_ECLOSED. */
void kvm_place_waiters_close(kvm_rt_t *rt);

#endif
