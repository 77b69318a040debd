/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched.h — soft tenant isolation (spec "Soft isolation"): the per-tenant scheduler for remote
 * work of one runtime. Sans-I/O: no clock, no threads, no I/O and no allocation after ts_new;
 * the caller (src/store/fair.c) owns locking, waiting and the transport.
 *
 * Model. A *unit* is one remote batch a caller wants to submit (items, bytes). Units are queued
 * per tenant (the fairness key is the canonical tenant id) in bounded FIFO queues. ts_next hands
 * out the next unit to submit: tenants take *turns* in rotation over the non-empty queues; in one
 * turn a tenant of weight w is given units while the turn stays within w x items_per_turn items
 * and w x batch_bytes bytes (the first unit of a turn always fits: planning keeps a unit within
 * one turn of weight 1, except an item larger than batch_bytes, which travels alone). A turn
 * ends when the head unit does not fit the rest of the budget, the queue is empty, or the tenant
 * reached its burst cap; the next non-empty tenant in rotation then gets a turn. Unused budget is
 * not carried over, so shares are exactly the weights when a tenant's units are of one size.
 *
 * Limits (docs/tenancy.md "Soft isolation"; the names are the specification's):
 *   items_per_turn  max_remote_batch_items_per_tenant: items of one tenant in one remote batch
 *                   (ts_plan) and in one turn (x weight);
 *   batch_bytes     max_remote_batch_bytes: bytes of one remote batch (ts_plan) and of one turn
 *                   (x weight);
 *   burst_items     max_remote_batch_burst_items: items one tenant may have in flight at once; a
 *                   tenant at its cap is not runnable (a unit larger than the cap goes alone);
 *   inflight_bytes  max_inflight_bytes_per_batch: bytes of remote batches in flight in this
 *                   runtime, all tenants together; checked before a unit is handed out (a unit
 *                   larger than the cap goes alone, when nothing else is in flight).
 * ts_enqueue refuses a unit that planning would not have produced (KVMESH_EINVAL) and a unit of
 * a tenant whose queue holds queue_depth units (KVMESH_EAGAIN).
 *
 * Unit states (ts_unit_t.state; ts_set_state-like edges asserted in sched.c):
 *
 *     ts_enqueue         ts_next           ts_complete
 *   IDLE ------> QUEUED ---------> INFLIGHT -----------> IDLE   (completion or terminal failure)
 *                  |
 *                  +--- ts_cancel ---> IDLE                     (the caller gave up waiting)
 *
 * In-flight accounting (per tenant and in total) is released only by ts_complete; it is
 * asserted never to go negative. Ownership: units are caller-owned memory, linked into the
 * scheduler between ts_enqueue and ts_complete/ts_cancel (the caller must not free or reuse a
 * unit in between). Tenant ids are copied.
 *
 * Tenant slots: at most TS_MAX_TENANTS tenants are tracked; a slot of a tenant without a
 * configured weight is recycled when its queue is empty and nothing of it is in flight. When
 * every slot is busy, further tenants share one overflow slot (counted in ts_stats_t.overflow).
 */
#ifndef KVMESH_TENANT_SCHED_H
#define KVMESH_TENANT_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"

#define TS_MAX_TENANTS   64       /* tracked tenant slots (plus one overflow slot) */
#define TS_MAX_WEIGHT    64       /* weights are 1..TS_MAX_WEIGHT */
#define TS_QUEUE_MAX     4096     /* largest queue_depth */
#define TS_OVERFLOW_NAME "~other" /* name of the shared overflow slot (not a valid tenant id) */

typedef struct ts_limits {
    uint32_t items_per_turn; /* >= 1 */
    uint64_t batch_bytes;    /* >= 1 */
    uint32_t burst_items;    /* >= items_per_turn */
    uint64_t inflight_bytes; /* >= 1 */
    uint32_t queue_depth;    /* 1..TS_QUEUE_MAX */
    unsigned test_bugs;      /* TS_TEST_BUG_* (tests only; 0 in every real use) */
} ts_limits_t;

/* test-only broken variants (ts_limits_t.test_bugs), caught by the simulator's fair_sched */
#define TS_TEST_BUG_NO_TURN_END 1u /* a turn never ends on its budget */
#define TS_TEST_BUG_NO_INFLIGHT 2u /* the in-flight byte cap is not checked */
#define TS_TEST_BUG_NO_BURST    4u /* the burst cap is not checked */
#define TS_TEST_BUG_NO_ROTATE   8u /* every turn search starts at slot 0 (no rotation) */

enum ts_unit_state { TS_UNIT_IDLE = 0, TS_UNIT_QUEUED = 1, TS_UNIT_INFLIGHT = 2 };

typedef struct ts_unit {
    uint32_t items; /* >= 1 */
    uint64_t bytes;
    void *user;
    /* private to sched.c */
    enum ts_unit_state state;
    int slot;
    uint64_t seq; /* enqueue order (diagnostics) */
    struct ts_unit *next;
} ts_unit_t;

typedef struct ts ts_t;

/* 0 or KVMESH_EINVAL with a message naming the limit. */
int ts_limits_validate(const ts_limits_t *lim);
int ts_new(ts_t **out, const ts_limits_t *lim);
/* Asserts nothing is queued or in flight. */
void ts_free(ts_t *s);

/* Configures tenant's weight (1..TS_MAX_WEIGHT); its slot is kept for the scheduler's life.
 * KVMESH_EINVAL (weight), KVMESH_ENOSPC (TS_MAX_TENANTS configured tenants). Unconfigured
 * tenants have weight 1. */
int ts_set_weight(ts_t *s, const char *tenant, uint32_t weight);

/*
 * Planning: splits n items (in order, lens[i] bytes each) into consecutive remote batches of at
 * most items_per_turn items and batch_bytes bytes (an item larger than batch_bytes is a batch of
 * its own). Writes the index one past each batch's last item into ends[] (at most cap entries)
 * and the count into *n_batches. KVMESH_ERANGE when cap is too small. Pure.
 */
int ts_plan(const ts_limits_t *lim, const uint64_t *lens, size_t n, size_t *ends, size_t cap,
            size_t *n_batches);

/* Queues u (u->items, u->bytes set by the caller) for tenant. KVMESH_EINVAL: u->items is 0 or
 * above items_per_turn, or a unit of several items is above batch_bytes (message names the
 * limit); KVMESH_EAGAIN: the tenant's queue is full (queue_depth). */
int ts_enqueue(ts_t *s, const char *tenant, ts_unit_t *u);

/* The next unit to submit now (QUEUED -> INFLIGHT, charged to in-flight accounting), or NULL
 * when nothing is runnable or the in-flight byte cap blocks the unit whose turn it is (then no
 * other unit overtakes it). Call it again after every ts_enqueue and ts_complete. */
ts_unit_t *ts_next(ts_t *s);

/* INFLIGHT -> IDLE: the unit completed or failed terminally; releases its accounting. */
void ts_complete(ts_t *s, ts_unit_t *u);

/* QUEUED -> IDLE: removes a unit that was not handed out. KVMESH_EINVAL when u is not queued
 * (it may have just been handed out: the caller then owns an in-flight unit). */
int ts_cancel(ts_t *s, ts_unit_t *u);

typedef struct ts_stats {
    uint64_t enqueued, dispatched, completed, canceled;
    uint64_t refused_full, refused_limit; /* ts_enqueue refusals */
    uint64_t turns;                       /* turns started */
    uint64_t blocked_inflight;            /* ts_next calls stopped by inflight_bytes */
    uint64_t overflow;                    /* units queued in the overflow slot */
    uint64_t queued_units, inflight_units, inflight_items, inflight_bytes; /* current */
    uint64_t peak_inflight_bytes;        /* highest inflight_bytes seen */
    uint64_t peak_tenant_inflight_items; /* highest in-flight items of one tenant seen */
    uint32_t tenants;                    /* slots in use */
} ts_stats_t;
void ts_get_stats(const ts_t *s, ts_stats_t *out);

/* Per-tenant view (tests, /stats): 0, or KVMESH_ENOENT when the tenant has no slot. */
typedef struct ts_tenant_view {
    uint32_t weight;
    uint32_t queued_units;
    uint64_t inflight_items, inflight_bytes;
    uint64_t dispatched_items, dispatched_bytes;
} ts_tenant_view_t;
int ts_tenant(const ts_t *s, const char *tenant, ts_tenant_view_t *out);

/* Name of the tenant whose turn it is ("" when no turn is active) and what the turn took. */
const char *ts_turn_tenant(const ts_t *s, uint32_t *items, uint64_t *bytes);

/* Counters and queues consistent; 0 or KVMESH_ECORRUPT with a message. */
int ts_check_invariants(const ts_t *s);

#endif
