/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_int.h — what the files of the loop side of object operations share; private to them
 * (docs/architecture.md "Store layering", docs/store.md "Item states"):
 *
 *   ops_item.c     the bottom: an item's state machine (kvm_item_set_state, one table of legal
 *                  edges), its end (DONE or FAILED, exactly once), the COMMIT / RELEASE
 *                  notifications to owners, read hits, route-call contexts and route lookups;
 *   ops_place.c    placement: reservations at owners (batched per owner), parking while too few
 *                  storage members are there (place_wait.h);
 *   ops_publish.c  route publication by fenced CAS (tenant quota claim / finalize, the cold
 *                  reclaim gate and write-through, indeterminate results), tombstones, the drain
 *                  handoff;
 *   ops.c          kvm_ops_run: an op's dispatch to them, lookup answers, the admin ops.
 *
 * ops.c calls the three others; ops_place.c and ops_publish.c call ops_item.c (and lower files),
 * never each other or ops.c; ops_item.c calls none of them. Every function runs on the loop
 * thread. An item (struct kvm_item, store.h) belongs to its op; a callback context below
 * borrows both.
 */
#ifndef KVMESH_STORE_OPS_INT_H
#define KVMESH_STORE_OPS_INT_H

#include "store/store.h"

/* ---- item states (ops_item.c) --------------------------------------------------------------- */

/* Whether `from -> to` is an edge of the item state machine (docs/store.md "Item states"). */
bool kvm_item_edge_legal(enum kvm_item_state from, enum kvm_item_state to);

/* The state's name for logs ("placing", ...); "?" for a value out of range. */
const char *kvm_item_state_name(enum kvm_item_state s);

/* Moves `it` to `to`; asserts the edge is legal (an illegal one is a bug: it names both states on
 * stderr and aborts). Every step of an item goes through it, before the step's asynchronous call
 * is started (whose answer may come back synchronously). */
void kvm_item_set_state(struct kvm_item *it, enum kvm_item_state to);

/* Ends `it` as DONE (it->rc as set: 0, or an answer such as KVMESH_ENOENT) and counts it done in
 * its op (kvm_op_item_done); asserts it had not ended. */
void kvm_item_done(kvm_op_t *op, struct kvm_item *it);

/* Ends `it` as FAILED with rc (!= 0) and the op's message (the op's first failure is kept). */
void kvm_item_fail(kvm_op_t *op, struct kvm_item *it, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline bool kvm_item_ended(const struct kvm_item *it)
{
    return it->state == KVM_ITEM_DONE || it->state == KVM_ITEM_FAILED;
}

/* ---- notifications to owners (ops_item.c) --------------------------------------------------- */

/* COMMIT of the item's i-th reservation; parent: the request's span (NULL = untraced). */
void kvm_ops_commit_res(kvm_rt_t *rt, struct kvm_item *it, uint32_t i, struct obs_span *parent);
/* RELEASE of every reservation the item holds (n_res becomes 0). */
void kvm_ops_release_res_traced(kvm_rt_t *rt, struct kvm_item *it, struct obs_span *parent);
void kvm_ops_release_res(kvm_rt_t *rt, struct kvm_item *it);
/* RELEASE of a replica of object id known from a route, named by the object. */
void kvm_ops_release_replica_of(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep);
/* Releases the replicas of `old` that `now` (NULL: none) does not list. */
void kvm_ops_release_obsolete(kvm_rt_t *rt, const kvm_route_t *old, const kvm_route_t *now);

/* ---- route calls (ops_item.c) --------------------------------------------------------------- */

/* The context of one route call of an item: allocated by kvm_ictx_named, freed by kvm_ictx_free
 * once the call answered (or could not start). */
struct item_ctx {
    kvm_op_t *op;
    struct kvm_item *it;
    struct obs_span *sp; /* the route call's control.* span; NULL when untraced */
    int stage;           /* OBS_CPSTAGE_* of the route call (-1: not counted) */
    route_cost_t cost;   /* its round trips, counted into op_round_trips_total by kvm_ictx_free */
    kvm_rt_t *rt;        /* op->rt (NULL in unit tests of the item states) */
    struct item_ctx *next_spare; /* in rt->ictx_spare (kvm_ictx_free) */
};

/* A route call's context; with a traced op it also starts the call's span `name` (a child of
 * the request's span), ended by kvm_ictx_free with the call's result. NULL: out of memory.
 * Contexts come from and go back to the runtime's spare list (rt->ictx_spare, at most
 * STORE_ICTX_SPARE_MAX, loop thread only) instead of a malloc and a free per route call; a
 * context freed once the runtime is closing is freed outright. */
#define STORE_ICTX_SPARE_MAX 1024 /* spare route-call contexts a runtime keeps (~56 KiB) */
struct item_ctx *kvm_ictx_named(kvm_op_t *op, struct kvm_item *it, const char *name);
struct item_ctx *kvm_ictx(kvm_op_t *op, struct kvm_item *it);
void kvm_ictx_free(struct item_ctx *c, int rc);

/* Moves `it` to `state` (KVM_ITEM_LOOKING_UP or KVM_ITEM_SETTLING) and starts the exact route
 * lookup of its key, answered to cb with a kvm_ictx context; fails the item when it cannot
 * start. */
void kvm_ops_start_lookup(kvm_op_t *op, struct kvm_item *it, enum kvm_item_state state,
                          route_lookup_cb cb);

/* ---- the steps (ops_place.c, ops_publish.c) ------------------------------------------------- */

/* A PLACE op: every item reserved at op->replicas owners (after its quota charge). */
void kvm_ops_place_run(kvm_op_t *op);

/* A put's publication, a remove's tombstone, a drain's handoff of item `it`. */
void kvm_ops_publish_start(kvm_op_t *op, struct kvm_item *it);
void kvm_ops_remove_start(kvm_op_t *op, struct kvm_item *it);
void kvm_ops_handoff_start(kvm_op_t *op, struct kvm_item *it);

#endif
