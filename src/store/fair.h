/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fair.h — the store side of soft tenant isolation (docs/tenancy.md "Soft isolation"): the
 * runtime's gate for remote payload batches, a thread-safe wrapper around the sans-I/O
 * scheduler of src/tenant/sched.h.
 *
 * A put plans its items into remote batches (kvm_fair_plan: consecutive items of one tenant,
 * within max_remote_batch_items_per_tenant and max_remote_batch_bytes of wire bytes), and for
 * each batch that writes to another runtime takes a ticket (kvm_fair_acquire) before the
 * transport submission and gives it back (kvm_fair_release) after the batch completed or
 * failed. A get's read rounds do the same with kvm_fair_plan_wire (data.c read_gate).
 * kvm_fair_acquire waits on the calling (application) thread for the tenant's turn,
 * at most until the call's deadline; the loop thread never waits here.
 *
 * Off (fairness = false, or a store config filled without it): rt->fair is NULL, planning cuts
 * at the historical 16 items and acquire/release do nothing.
 */
#ifndef KVMESH_STORE_FAIR_H
#define KVMESH_STORE_FAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "tenant/sched.h"

struct kvm_fair;

/* Creates rt->fair from rt->cfg (NULL when fairness is off). Any thread, before the loop. */
int kvm_fair_open(kvm_rt_t *rt);
/* After every application thread left the runtime. */
void kvm_fair_close(kvm_rt_t *rt);

/* Wire bytes of one placed item: its length times its replicas on other runtimes. */
uint64_t kvm_fair_item_bytes(const struct kvm_item *it);

/* Planning: the number of items from items[base] (< n) in the next remote batch: >= 1, at most
 * max, one tenant, within the item and byte limits (a single larger item goes alone). */
size_t kvm_fair_plan(kvm_rt_t *rt, const struct kvm_item *items, size_t base, size_t n, size_t max);

/* The same from explicit wire bytes: items[0..n) with wire[k] the remote bytes of items[k]
 * (gets: the object length when this round reads it from another runtime, else 0). */
size_t kvm_fair_plan_wire(kvm_rt_t *rt, const struct kvm_item *items, const uint64_t *wire,
                          size_t n);

/* One remote batch's place in the scheduler; caller-owned (stack), used by one thread. */
struct kvm_fair_ticket {
    ts_unit_t u;
    bool granted; /* [fair mutex] handed out by the scheduler */
    bool held;    /* acquired and not yet released */
};

/* Waits for tenant's turn to submit a batch of `items` items and `bytes` wire bytes, at most
 * until deadline_ms (CLOCK_MONOTONIC ms; 0 = no deadline). 0 (t->held, or fairness off),
 * KVMESH_ETIMEDOUT (the deadline passed in the queue: nothing was submitted), KVMESH_EAGAIN
 * (the tenant's queue is full). Each failure sets a message naming the tenant. */
int kvm_fair_acquire(kvm_rt_t *rt, const kvm_ident_t *scope, uint32_t items, uint64_t bytes,
                     uint64_t deadline_ms, struct kvm_fair_ticket *t);
/* The batch completed or failed terminally: releases its in-flight accounting. No-op when the
 * ticket is not held. */
void kvm_fair_release(kvm_rt_t *rt, struct kvm_fair_ticket *t);

/* Snapshot of the scheduler's counters (zero when off). */
void kvm_fair_stats(kvm_rt_t *rt, ts_stats_t *out);

#endif
