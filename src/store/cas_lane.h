/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cas_lane.h — per-key publication lanes of one runtime [loop] (docs/store.md "One key from many
 * threads"): at most one route CAS of a key is in flight from this runtime; the items of other
 * operations publishing the same key meanwhile wait in the key's lane, in arrival order, and the
 * one that holds it keeps it through its conflict retries until it ends (DONE or FAILED). The
 * next one then sends its CAS expecting the route hint the ended one left (its own publication,
 * or the current route of its last conflict answer), so puts of one key from one runtime never
 * conflict with each other and a conflict retry never queues behind new work of this runtime.
 * Writers on other runtimes still compete at the authority (one contender per runtime).
 *
 * A lane is only an order of this runtime's own requests: nothing is published or skipped by it,
 * every CAS still goes to the fenced primary (or the metadata CAS) with its expected version. Keyed
 * by the identity's 64-bit hash: two keys with one hash share a lane (ordered, never wrong).
 *
 * Use (the caller's item functions; owner.c's path may use it the same way):
 *   if (!kvm_cas_lane_enter(rt, op, it, resume)) return;  before a first CAS; resume(op, it) later
 *   kvm_cas_lane_leave(rt, it)                          when the item ends (ops_item.c does it)
 *   kvm_cas_lane_run(rt)                                after the ending step: resumes the items
 *                                                       handed a lane (iteratively, never nested)
 * Bounded: one lane record per key with a CAS in flight (recycled, at most CAS_LANE_SPARE kept),
 * waiters are linked through their items (no allocation). Freed by kvm_cas_lanes_free at close,
 * after the loop stopped (waiting items belong to ops abandoned with the loop).
 */
#ifndef KVMESH_STORE_CAS_LANE_H
#define KVMESH_STORE_CAS_LANE_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

#define CAS_LANE_BUCKETS 256 /* hash buckets of the lane table (power of two) */
#define CAS_LANE_SPARE   512 /* ended lane records kept for reuse (a batch of 512 keys) */

typedef void (*kvm_cas_lane_fn)(kvm_op_t *op, struct kvm_item *it);

/* Whether `it` may send its route CAS now: true when it holds its key's lane (taken now, or held
 * already: a retry); false when it waits behind the holder: fn(op, it) is then called, once, when
 * the lane passes to it (from kvm_cas_lane_run). True also when the table cannot be allocated
 * (no ordering then: conflicts are retried as before). */
bool kvm_cas_lane_enter(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, kvm_cas_lane_fn fn);

/* `it` ends: its lane passes to the next waiter (resumed by kvm_cas_lane_run) or is closed. No-op
 * for an item holding no lane. */
void kvm_cas_lane_leave(kvm_rt_t *rt, struct kvm_item *it);

/* Resumes the items handed a lane, in order; a call made while one runs returns at once (the
 * running one resumes them), so a chain of items failing at once does not nest. */
void kvm_cas_lane_run(kvm_rt_t *rt);

/* Conflict retries of an ended put/remove item: the op_conflict_retries histogram and max
 * gauge (label: the item's API operation). */
void kvm_cas_lane_count_retries(kvm_rt_t *rt, unsigned obs_op, uint32_t retries);

/* Test-only: with `off`, every runtime of the process sends its CASes without lanes (the
 * behaviour before them), so a test measures both in one run. */
void kvm_cas_lane_test_set_off(bool off);

/* Items waiting in lanes now (tests). */
uint32_t kvm_cas_lane_waiting(const kvm_rt_t *rt);

void kvm_cas_lanes_free(kvm_rt_t *rt); /* after the loop stopped */

#endif
