// SPDX-License-Identifier: Apache-2.0
/*
 * quota.h — the store's use of the tenant quota protocol (src/tenant/tenant.h, docs/tenancy.md):
 * policy bootstrap at open, reserve before data transfer, claim immediately before the route
 * CAS, finalize after it, abort on a failure before it, delete refunds, and the reconciliation
 * timer. Off (rt->quota == NULL, no call costs anything) unless tenant_policies is configured.
 *
 * Everything runs on the loop thread. A struct kvm_qitem belongs to its struct kvm_item (moved
 * with it between ops; freed by kvm_quota_item_free from kvm_op_unref).
 */
#ifndef KVMESH_STORE_QUOTA_H
#define KVMESH_STORE_QUOTA_H

#include <stdbool.h>

#include "core/ident.h"
#include "core/route.h"
#include "route/route.h"
#include "tenant/tenant.h"

struct kvm_rt;
struct kvm_op;
struct kvm_item;

enum kvm_q_state { KVM_Q_NONE = 0, KVM_Q_RESERVED, KVM_Q_CLAIMED, KVM_Q_FINALIZED, KVM_Q_ABORTED };

typedef void (*kvm_q_cont)(struct kvm_op *op, struct kvm_item *it, int rc);

struct kvm_qitem {
    char tenant[TN_TENANT_CAP], domain[TN_DOMAIN_CAP], key[TN_KEY_CAP];
    char op_id[TN_OPID_CAP];
    kvm_op_id_t content_op; /* the route's content op: the same operation id */
    enum kvm_q_state state;
    bool is_delete;
    bool none_retry;     /* reserve retried with no predecessor (object predates accounting) */
    uint32_t recoveries; /* tenant-local evictions done for this write */
    kvm_route_version_t expected;  /* predecessor route version the reserve named */
    kvm_route_version_t predicted; /* next version the claim recorded */
    kvm_route_version_t acct_pred; /* the operation's recorded predecessor: a deleted row's
                                      tombstone V when NONE was admitted (the claim predicts
                                      above it) */
    bool cas_claim_sent;           /* a route CAS carrying the claim went out (EmbeddedWrh) */
    bool cas_claim_off;            /* the primary has no claim hook: the writer claims */
    kvm_route_t route;             /* published route awaiting finalize */
    kvm_q_cont cont, final_cont;
};

/* What the quota files (quota*.c) call in the store files that call them, given at open by
 * runtime.c, so that they never call the ops files or quota_tomb.c back (docs/architecture.md
 * "Store layering"). Called only while the quota state is open (release_replica, replay) or at
 * its close. */
/* id: the object the replica belongs to (names the slot: docs/store.md "Slot identity in COMMIT
 * and RELEASE"); NULL or empty: (segment, offset) alone. */
typedef void (*kvm_q_release_fn)(struct kvm_rt *rt, const kvm_ident_t *id,
                                 const kvm_hot_replica_t *rep);
typedef struct kvm_quota_hooks {
    /* frees a replaced or evicted replica's slot on its owner (ops_item.c's
     * kvm_ops_release_replica) */
    kvm_q_release_fn release_replica;
    /* tells a replica's owner that a published route references its held slot (a put's replay,
     * held_op.h): ops_item.c's kvm_ops_commit_replica */
    kvm_q_release_fn commit_replica;
    /* the reconciler's tn_route_ops_t.replay (ctx = the runtime): kvm_quota_replay */
    void (*replay)(void *ctx, const tn_op_t *op, tn_replay_cb cb, void *arg);
    /* ends quota_tomb.c's tombstones waiting for a tenant-layer callback after tn_close:
     * kvm_quota_tomb_close */
    void (*tomb_close)(struct kvm_rt *rt);
} kvm_quota_hooks_t;

/* [loop] open: bootstraps every configured policy (create-if-absent, else must match); cb gets
 * KVMESH_EINCOMPAT with the field-naming message when a stored hard policy differs. hooks (all
 * set) is copied. */
typedef void (*kvm_q_open_cb)(struct kvm_rt *rt, int rc, const char *err);
void kvm_quota_open(struct kvm_rt *rt, const kvm_quota_hooks_t *hooks, kvm_q_open_cb cb);
void kvm_quota_close(struct kvm_rt *rt); /* [loop] */

/* [loop] true when the identity's tenant has a configured policy. */
bool kvm_quota_applies(struct kvm_rt *rt, const kvm_ident_t *id);

/* [loop] put: route lookup, then tn_reserve; cont(op, it, 0) proceeds to placement, a refusal
 * finishes the item (EQUOTA/ETOOBIG with the layer's message). Tenant-local recovery: on EQUOTA
 * the oldest object this runtime wrote for the same tenant is removed (with its refund) and the
 * reservation retried once. */
void kvm_quota_put_reserve(struct kvm_op *op, struct kvm_item *it, kvm_q_cont cont);
/* [loop] put of a batch with 2 or more items of tenants with a policy: route lookups, then
 * reservation in canonical objects-key order in chunks of at most TN_BATCH_MAX, one
 * tn_reserve_batch each; a refusal aborts every chunk reserved before it (all-or-nothing before
 * any data transfer): cont(op, it, rc) for each such item, every one failing when one is
 * refused, the message naming that item's index and key. false: not taken (fewer than 2 such
 * items; use kvm_quota_put_reserve). */
bool kvm_quota_put_batch(struct kvm_op *op, kvm_q_cont cont);
/* [loop] remove: tn_reserve of the delete against `cur`; cont(op, it, 0) proceeds (it->q may be
 * NULL afterwards: the object has no accounting row). */
void kvm_quota_del_reserve(struct kvm_op *op, struct kvm_item *it, const kvm_route_t *cur,
                           kvm_q_cont cont);
/* [loop] immediately before the first route CAS replacing `expected` with a route carrying
 * it->q->content_op: PENDING -> PUBLISHING (a failure leaves it PENDING: abort it). */
void kvm_quota_claim(struct kvm_op *op, struct kvm_item *it, const kvm_route_version_t *expected,
                     kvm_q_cont cont);
/* [loop] EmbeddedWrh: whether this item's claim travels with its route CAS (the fenced primary
 * claims immediately before applying it, route_cas_claim): true while the item is RESERVED and
 * its primary has not answered that it cannot claim. Then kvm_quota_cas_claim_blob() makes the
 * claim to send (the operation's scope, id, publish token and payload, and the hint of its
 * records so that the primary's claim is one transaction), and kvm_quota_cas_claimed() takes the
 * CAS's answer: rc 0 (or a route carrying the operation's content op) means the primary claimed
 * it with the published version — it is CLAIMED, and the reply's hint lets finalize start with
 * its write. KVMESH_ENOTSUP turns the item back to the writer's claim (kvm_quota_claim). */
bool kvm_quota_cas_claim_wanted(struct kvm_op *op, struct kvm_item *it);
int kvm_quota_cas_claim_blob(struct kvm_op *op, struct kvm_item *it, uint8_t *buf, size_t cap,
                             size_t *len);
void kvm_quota_cas_claimed(struct kvm_op *op, struct kvm_item *it, int rc, const kvm_route_t *r,
                           const uint8_t *reply, size_t reply_len);
/* [loop] the primary side: registers (rt->quota set) or clears the route service's claim hook. */
void kvm_quota_claim_hook(struct kvm_rt *rt, bool on);
/* [loop] internal to quota*.c: the tenant handle (NULL when off or closing), and the claim blob
 * of kvm_quota_cas_claim_blob from its parts (with this runtime's hint of the operation). */
tn_t *kvm_quota_tn(struct kvm_rt *rt);
/* [loop] internal to quota*.c: kvm_quota_hooks_t.release_replica of the open quota state (asserted
 * open); quota_tomb.c keeps it for a replay, whose route CAS may answer after the close. */
kvm_q_release_fn kvm_quota_release_fn(struct kvm_rt *rt);
/* [loop] internal to quota*.c: kvm_quota_hooks_t.commit_replica, as kvm_quota_release_fn. */
kvm_q_release_fn kvm_quota_commit_fn(struct kvm_rt *rt);
/* [loop] internal to quota*.c: quota_tomb.c's list of tombstones waiting for a tenant-layer
 * callback (NULL when off), and kvm_quota_close's end of them after tn_close (evictions answered
 * ECANCELED, their slots back to the owner; replays answered ECANCELED; each freed), which
 * quota.c reaches through kvm_quota_hooks_t.tomb_close. */
void **kvm_quota_tomb_head(struct kvm_rt *rt);
void kvm_quota_tomb_close(struct kvm_rt *rt);
int kvm_quota_claim_blob_raw(struct kvm_rt *rt, const char *tenant, const char *domain,
                             const char *key, const char *op_id, uint64_t publish_token,
                             const uint8_t *payload, size_t payload_len, uint8_t *buf, size_t cap,
                             size_t *len);
/* [loop] CLOCK eviction of the last readable copy of a quota tenant's object (owner.c): publishes
 * `tomb` (a PENDING tombstone replacing `cur`, carrying a fresh content op) through the delete
 * protocol, so the tenant is refunded exactly once: reserve (refund derived from the committed
 * row) -> claim (the fenced primary in its CAS with EmbeddedWrh, this runtime with MetadataOnly)
 * -> CAS -> finalize, the operation id = tomb's content op. cb(arg, rc, route) once, right after
 * the CAS: 0 with the tombstone (the slot may be reclaimed; the finalize follows on its own),
 * else not evicted (EAGAIN: the object is locked by a write; ECONFLICT: the accounting row is at
 * another route version; a CAS failure). An object without accounting (written before the
 * policy) is evicted by a plain CAS. A crash or a lost step is the reconciler's: an expired
 * PENDING is aborted, a PUBLISHING one finalized from the tombstone or replayed. Returns non-0
 * (cb not called) when nothing started. */
int kvm_quota_evict(struct kvm_rt *rt, const kvm_route_t *cur, const kvm_route_t *tomb,
                    route_cas_cb cb, void *arg);
/* [loop] tn_route_ops_t.replay (ctx = the runtime; quota.c's reconciler gets it as
 * kvm_quota_hooks_t.replay): a PUBLISHING delete whose tombstone CAS did
 * not apply is replayed with the same publish token and payload through the current fenced
 * primary (EmbeddedWrh: a claim-carrying CAS, the primary claims again before applying it;
 * MetadataOnly: this runtime claims again, then the metadata CAS), only while its predecessor is
 * the current live route without a cold copy; cb gets the version the operation now records. A
 * put is not replayed (its replicas are not kept for a publication that did not reach its CAS):
 * KVMESH_EUNAVAILABLE, the operation stays charged, locked and degraded. */
void kvm_quota_replay(void *ctx, const tn_op_t *op, tn_replay_cb cb, void *arg);
/* [loop] after the CAS applied `r`: finalize (re-claiming first when the primary assigned
 * another version than predicted); cont(op, it, 0) always (a failed finalize is left to the
 * reconciler: the route carries the operation id). */
void kvm_quota_finalize(struct kvm_op *op, struct kvm_item *it, const kvm_route_t *r,
                        kvm_q_cont cont);
/* [loop] a failure before the CAS: PENDING -> ABORTED (fire and forget). */
void kvm_quota_abort(struct kvm_rt *rt, struct kvm_item *it);
/* [any] */
void kvm_quota_item_free(struct kvm_item *it);
/* [any] Test-only (never called by the runtime; tests/integration/tenant_store.c): the next n
 * claims this runtime makes — its own claim before a MetadataOnly route CAS, or its claim
 * hook's as a route primary (EmbeddedWrh) — are followed by a route CAS that fails outright with
 * rc (0: KVMESH_EUNAVAILABLE) and is not applied: the window between a claim (the operation
 * PUBLISHING) and its CAS. Returns how many were still armed before (so n = 0 disarms and
 * tells how many were taken). No effect before the runtime opened its quota handle.
 * kvm_quota_test_fault [loop] takes one such fault: its rc, 0 when none is armed. */
uint32_t kvm_quota_test_fail_after_claim(struct kvm_rt *rt, uint32_t n, int rc);
int kvm_quota_test_fault(struct kvm_rt *rt);
/* Test-only (tenant_replay): once on, this runtime kills itself (SIGKILL) right after its own
 * claim succeeded, before its route CAS (MetadataOnly), or when its claim-carrying CAS came back
 * failed without its route (EmbeddedWrh: the primary may have claimed; with
 * kvm_quota_test_fail_after_claim at the primary it did), before any settling. Any thread. */
void kvm_quota_test_kill_after_claim(struct kvm_rt *rt, bool on);

/* [loop] diagnostics for /stats?tenant=ID: JSON object into buf (the usage row, the limits,
 * the protocol counters). KVMESH_ENOENT when the tenant has no policy here. */
typedef void (*kvm_q_usage_cb)(void *arg, int rc, const tn_usage_t *u, const tn_policy_t *p);
int kvm_quota_usage(struct kvm_rt *rt, const char *tenant, kvm_q_usage_cb cb, void *arg);
/* [any] /stats?tenant=ID: the usage row (one exact read on the loop), limits, policy version,
 * operations pending/publishing, reconciliation backlog and degradation, recovery evictions and
 * the last error, as one JSON object. KVMESH_ENOENT when the tenant has no policy here. */
int kvm_quota_render(struct kvm_rt *rt, const char *tenant, char *buf, size_t cap);
void kvm_quota_stats(struct kvm_rt *rt, tn_stats_t *out, uint32_t *degraded_passes);
/* [app thread] One reconciliation pass of tenant now, on the loop, with the store's route
 * lookups (what the reconciliation timer does; it waits while a timer pass runs). Blocks until
 * the pass reports into *out, and the runtime's protocol counters after it (every pass it ran,
 * timer passes included) into *totals (bounded: request_timeout_ms x 8 + 11 s). KVMESH_ENOENT
 * when the tenant has no policy in this runtime. */
int kvm_quota_reconcile_now(struct kvm_rt *rt, const char *tenant, tn_recon_report_t *out,
                            tn_stats_t *totals);

#endif
