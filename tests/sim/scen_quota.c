/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_quota.c — the strict quota protocol (src/tenant) in the simulator, for every crash window
 * of the specification's "Crash recovery" and its races.
 *
 * World:
 *   - writer runtimes on nodes 0..n-1: a meta_t on the node's env (memory://quotaSEED with
 *     latency and failures, some after apply: indeterminate outcomes) and a tn_t; each
 *     bootstraps two tenant policies, then runs one write at a time (put or delete of one of
 *     TENANTS x DOMAINS x keys objects: the same key names in every tenant and domain) and a
 *     reconciliation pass every 40-80 ms;
 *   - a simulated route table (scenario-owned, durable) behind a route primary on the world env
 *     with its own tn_t: a publish request first checks whether the route already carries the
 *     operation, else claims PENDING -> PUBLISHING (tn_claim) and then applies the route CAS
 *     under its generation; a failover bumps the generation, which fences every CAS claimed
 *     under an older one (the old primary's in-flight mutation is rejected). Requests for one
 *     object are serialized at the primary (one claim+CAS at a time), as a primary's shard is.
 *     The reconciler's lookup reads the table; its replay goes through the same primary path.
 *
 * Write flow: lookup (predecessor version) -> tn_reserve -> data transfer -> publish request to
 * the primary -> tn_finalize -> reply; the request and the reply carry tn_hint_* records, as the
 * store will. A write refused with EQUOTA is usually followed by a delete of a live object of
 * the same tenant (tenant-local recovery, at the writer). Failed writes abort (10%); a writer that
 * hears nothing within its deadline aborts, which races the delayed claim. Crashes are injected at
 * the profile's windows (before route CAS, after route CAS before finalize, after finalize before
 * the reply, during a delete's refund) and at random; a restarted writer retries its
 * interrupted operation with the same operation id half of the time (idempotent repeat).
 *
 * Checks:
 *   always    a route table's live bytes/objects of a tenant never exceed its limits; every
 *             usage a quota call returns has committed + pending <= limit;
 *   finalize  the derived delta equals new length - the length the route CAS replaced (a
 *             predecessor refunded twice, or not at all, fails here);
 *   races     an operation whose explicit abort succeeded never has a route CAS applied; one
 *             whose abort was refused (publishing) ends finalized;
 *   policy    a runtime configured with a different hard policy is refused for that tenant at
 *             bootstrap with a message naming the field;
 *   converge  after the faults stop, reconciliation leaves no PENDING/PUBLISHING operation
 *             within 8 s, and then for every tenant committed bytes/objects equal the live
 *             routes exactly, pending is zero, every object row equals its route, and the sum
 *             of the applied CAS deltas equals committed bytes.
 *
 * Tombstone purge (docs/tenancy.md "Purging a quota tenant's tombstones"): a delete's tombstone
 * carries a deadline D (its publisher's wall time + a short retention, so purges fall inside the
 * faults); the world purges it at a random moment >= D + M (the tenant layer's purge_margin_ms);
 * a CAS expecting NONE matches an absent key or a due tombstone; the primary's next version is
 * above every version the key had (its floor); half the requests meet a primary that answers a
 * conflict before it claims (EmbeddedWrh), the others claim first (MetadataOnly's order); a
 * writer expects NONE against a tombstone half the time (a lookup before it was created, or the
 * store's retry with NONE). Checks on top: at every CAS the version is above the key's floor
 * (versions of a key strictly increase); a claimed operation admitted expecting NONE never meets
 * a tombstone that is not due (a stale NONE); at the end the object row of a purged tombstone is
 * the delete's (deleted at that version, with a deadline) or purged, and a present tombstone's
 * deadline is the one its row records. quota_purge_reuse runs it with few keys, short history
 * (deleted rows and terminal records purged) and crashes after the CAS (absent deletes).
 * quota_late_dup: the same keys and retention with a 3 s history, and duplicates of 30% of the
 * publish requests arriving after the retention and margin; the primary claims with
 * cas_follows, so a duplicate of a finalized operation is refused (docs/tenancy.md step 7).
 *
 * Variants that must be caught: abort_publishing (abort accepted from PUBLISHING), no_pending
 * (reserve ignores the pending term), no_replay, no_settle, none_before_due (the withdrawn rule:
 * NONE admitted against any deleted row), no_floor (a key's versions restart after a purge),
 * no_absent_finalize (a PUBLISHING delete whose tombstone was purged stays PUBLISHING),
 * no_dup_guard (quota_late_dup: the primary's claim takes a FINALIZED operation as a repeat, so
 * a duplicate publish request arriving after its successor's tombstone is due applies again).
 * Also abort_unproven (the reconciler takes the guarded PUBLISHING -> ABORTED edge without its
 * proof: a route above the predecessor). Every writer
 * here follows the protocol and holds the object lock, so no route ever supersedes a PUBLISHING
 * operation's predecessor: the proven case cannot occur in this world (unit_test_tenant_quota
 * shows it), and every operation that ends ABORTED from PUBLISHING is caught as a bug.
 *
 * Owner slots (profile .slots; docs/tenancy.md "Replaying a put", steps 1-3): a put reserves a
 * slot on an owner before its publication; the claim's payload is the store's version 2 put
 * payload naming it (put_payload.h), and a replay rebuilds the route's slot from the recorded
 * payload, as kvm_quota_replay does. Owners (world) expire a RESERVED slot after its TTL: an
 * exact lookup commits it when the route references it; otherwise they read the object row and
 * its locking operation from metadata and apply the store's own kvm_held_decide (keep, or look
 * again: commit or free). Extra checks: no route CAS ever references a freed slot, an owner never
 * frees a slot the current route references, and after convergence no slot is left RESERVED and
 * every live route's slot is committed. Variant free_held: owners free on the lookup alone (as
 * before step 2), which a replay onto the freed slot exposes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "meta/meta_memory.h"
#include "sim.h"
#include "store/held_op.h"
#include "store/put_payload.h"
#include "tenant/tenant.h"

#define QS_MAX_NODES 5
#define QS_TENANTS   2
#define QS_DOMAINS   2
#define QS_MAX_KEYS  3
#define QS_OBJS      (QS_TENANTS * QS_DOMAINS * QS_MAX_KEYS)
#define QS_MAX_OPS   4096
#define QS_DEP       "simq"

enum { OPK_PUT = 1, OPK_DEL = 2 };
#define QS_SETTLES 3 /* a writer's own publications again after a CAS failed after its claim */
enum { PH_IDLE, PH_RESERVE, PH_PUBLISH, PH_FINALIZE, PH_ABORT };

typedef struct qs_profile {
    const char *name;
    double p_before_cas, p_after_cas, p_after_fin; /* crash windows */
    bool delete_windows;                           /* windows only for deletes */
    double p_delete;
    bool delayed_cas;    /* publish requests delayed across the pending deadline */
    double p_cas_fails;  /* a claimed CAS fails outright (not applied; the predecessor stays) */
    bool writer_settles; /* the writer publishes such a put again itself (store ops_publish.c
                            quota_settle_wanted): the same op and publish token, at most
                            QS_SETTLES times, before it is left to reconciliation */
    bool slots;          /* owner slots and their held check (see the top of the file) */
    uint32_t keys;       /* per tenant and domain */
    uint32_t writers_lo; /* writers: lo + seed % 2 */
    /* tombstone purge (docs/tenancy.md "Purging a quota tenant's tombstones"): a delete's
     * tombstone carries D = its publisher's wall time + retention in [retain_lo, retain_hi] ms;
     * the world purges it at a random moment >= D + margin; 0 = the defaults (100..300, 300) */
    uint32_t retain_lo, retain_hi, margin_ms;
    uint32_t history_ms; /* tn retain_ms: terminal records and deleted rows (0 = 60 s) */
    uint32_t drift_ppm;  /* clock drift bound (0 = 10000) */
    /* duplicates of publish requests delayed past the retention and margin (a request in
     * flight longer than tombstone_retention_ms): quota_late_dup */
    bool late_dups;
} qs_profile_t;

typedef struct qs qs_t;

/* one route of the simulated table */
typedef struct qs_route {
    bool found, tomb;
    kvm_route_version_t version, pred;
    char op[TN_OPID_CAP];
    uint64_t len;
    uint32_t slot;  /* owner slot of a live route (slots profile; 0 = none) */
    uint64_t until; /* a tombstone's purge deadline D (world wall ms) */
    /* the last purged tombstone of this key (found == false since) */
    bool purged;
    kvm_route_version_t purged_v;
    char purged_op[TN_OPID_CAP];
} qs_route_t;

/* what the scenario learns about one operation id */
typedef struct qs_opinfo {
    char id[TN_OPID_CAP];
    uint32_t obj;
    bool cas_applied;
    uint64_t new_len, replaced_len;
    bool is_delete;
    bool abort_acked, abort_refused, finalized;
    bool cas_failed_claimed; /* claimed, then its CAS failed outright (only a replay publishes) */
} qs_opinfo_t;

/* the purge knobs of a run (profile, defaults filled in) */
typedef struct qs_purge {
    uint32_t retain_lo, retain_hi, margin_ms, history_ms;
} qs_purge_t;

typedef struct qs_node {
    qs_t *qs;
    uint32_t id;
    env_t *env;
    meta_t *m;
    tn_t *tn;
    bool stopping;
    uint32_t booted; /* tenants bootstrapped OK (bitmask) */
    uint32_t boot_pending;
    env_timer_id think, recon_timer, deadline;
    bool busy;
    int phase; /* PH_* of the current write */
    /* current write */
    char op[TN_OPID_CAP];
    uint32_t obj;
    bool is_delete;
    uint64_t len;
    int64_t hid;
    uint32_t recon_tenant;
    bool recon_busy;
    uint32_t evict;   /* 1 + tenant whose write was refused over quota: free room in it */
    uint32_t settles; /* publications again of the current write (writer_settles) */
    uint32_t slot;    /* the current put's owner slot (slots profile) */
} qs_node_t;

/* durable intent of a writer (survives its crash): the operation to retry */
typedef struct qs_intent {
    bool active;
    char op[TN_OPID_CAP];
    uint32_t obj;
    bool is_delete;
    uint64_t len;
    kvm_route_version_t pred;
    int64_t hid;
} qs_intent_t;

struct qs {
    sim_t *sim;
    const qs_profile_t *prof;
    unsigned bugs;
    bool no_settle;    /* variant: the writer gives up at once (as before quota_settle_wanted) */
    bool no_floor;     /* variant: a key's next version follows the CAS's expected one, not the
                          highest the key ever had (a recreated key restarts its versions) */
    bool no_dup_guard; /* variant: the primary's claim does not refuse a FINALIZED operation
                          (tn_claim_req_t.cas_follows off): a delayed duplicate applies again */
    uint64_t late_dups, dup_refused; /* late duplicates sent; refused as finalized */
    qs_purge_t pg;
    kvm_route_version_t floor[QS_OBJS]; /* highest version each key ever had */
    uint64_t purges, none_admitted;
    uint32_t n, keys, objs;
    char url[64];
    meta_t *world_m, *prim_m;
    tn_t *prim_tn;
    tn_policy_t pol[QS_TENANTS];
    char tenants[QS_TENANTS][16];
    char domains[QS_DOMAINS][8];
    char keynames[QS_MAX_KEYS][16];
    qs_route_t route[QS_OBJS];
    bool prim_busy[QS_OBJS];
    uint64_t generation;
    uint64_t live_bytes[QS_TENANTS], live_objs[QS_TENANTS];
    int64_t cas_delta_sum[QS_TENANTS];
    qs_opinfo_t ops[QS_MAX_OPS];
    uint32_t n_ops;
    qs_intent_t intent[QS_MAX_NODES];
    uint32_t epoch_ctr;
    sim_hist_t *hist;
    bool faults; /* fault phase */
    bool quiet;  /* no new writes */
    uint64_t end_faults_ns;
    /* world event args */
    struct qs_owed {
        void *p;
        bool lookup;
    } * owed;
    size_t n_owed, cap_owed;
    void **allocs;
    size_t n_allocs, cap_allocs;
    /* counters */
    uint64_t writes_ok, refused_quota, aborts_ok, claims_rejected, fenced, degraded;
    uint64_t policy_refusals, cas_failed_claimed, writer_settled;
    /* owner slots (slots profile) */
    bool free_held; /* variant: owners free on the route lookup alone */
    bool owners_stop;
    struct qs_slot *slots;
    uint32_t n_slots;
    uint64_t slots_kept, slots_freed, slots_committed, replayed_slots;
    bool policy_created[QS_TENANTS];
    /* final phase */
    bool usage_done[QS_TENANTS];
    tn_usage_t final_usage[QS_TENANTS];
    uint32_t final_pending;
};

static void *qs_alloc(qs_t *qs, size_t size)
{
    if (qs->n_allocs == qs->cap_allocs) {
        qs->cap_allocs = qs->cap_allocs ? 2 * qs->cap_allocs : 256;
        qs->allocs = realloc(qs->allocs, qs->cap_allocs * sizeof(void *));
        KVM_ASSERT(qs->allocs != NULL);
    }
    void *p = calloc(1, size);
    KVM_ASSERT(p != NULL);
    qs->allocs[qs->n_allocs++] = p;
    return p;
}

static uint32_t obj_tenant(const qs_t *qs, uint32_t o)
{
    return o / (QS_DOMAINS * qs->keys);
}

static const char *obj_domain(const qs_t *qs, uint32_t o)
{
    return qs->domains[(o / qs->keys) % QS_DOMAINS];
}

static const char *obj_key(const qs_t *qs, uint32_t o)
{
    return qs->keynames[o % qs->keys];
}

static int find_obj(const qs_t *qs, const char *tenant, const char *domain, const char *key)
{
    for (uint32_t o = 0; o < qs->objs; o++)
        if (!strcmp(qs->tenants[obj_tenant(qs, o)], tenant) &&
            !strcmp(obj_domain(qs, o), domain ? domain : "") && !strcmp(obj_key(qs, o), key))
            return (int)o;
    return -1;
}

static qs_opinfo_t *opinfo(qs_t *qs, const char *id, bool create)
{
    for (uint32_t i = qs->n_ops; i-- > 0;)
        if (!strcmp(qs->ops[i].id, id))
            return &qs->ops[i];
    if (!create)
        return NULL;
    if (qs->n_ops == QS_MAX_OPS) {
        sim_fail(qs->sim, "operation table full");
        return NULL;
    }
    qs_opinfo_t *oi = &qs->ops[qs->n_ops++];
    memset(oi, 0, sizeof(*oi));
    snprintf(oi->id, sizeof(oi->id), "%s", id);
    return oi;
}

static void check_usage(qs_t *qs, const char *tenant, const tn_usage_t *u, const char *where)
{
    for (uint32_t t = 0; t < QS_TENANTS; t++) {
        if (strcmp(qs->tenants[t], tenant) != 0)
            continue;
        if (u->committed_bytes + u->pending_bytes > qs->pol[t].max_bytes ||
            u->committed_objects + u->pending_objects > qs->pol[t].max_objects)
            sim_fail(qs->sim,
                     "over-admitted after %s in %s: committed %llu + pending %llu bytes (max "
                     "%llu), %llu + %llu objects (max %llu)",
                     where, tenant, (unsigned long long)u->committed_bytes,
                     (unsigned long long)u->pending_bytes, (unsigned long long)qs->pol[t].max_bytes,
                     (unsigned long long)u->committed_objects,
                     (unsigned long long)u->pending_objects,
                     (unsigned long long)qs->pol[t].max_objects);
    }
}

/* ---- the route table and its primary (world) ------------------------------------------------ */

typedef struct qs_pub {
    qs_t *qs;
    bool replay;
    uint32_t obj;
    char op[TN_OPID_CAP];
    bool is_delete;
    uint64_t len;
    kvm_route_version_t pred;
    uint64_t gen; /* generation of the claim */
    kvm_route_version_t next;
    uint32_t slot; /* a put's owner slot (slots profile) */
    /* reply to a writer */
    uint32_t node, inc;
    /* reply to a reconciler */
    tn_replay_cb rcb;
    void *rarg;
    bool answered; /* the reconciler's callback ran (replays) */
    int rc;
    kvm_route_version_t version;
    uint64_t until; /* a delete's tombstone deadline D: sent, or (reply) the applied one's */
    bool fresh;     /* the claim moved it to (or kept it) PUBLISHING: it holds the object lock */
    /* records handed over with the request and the reply (tn_hint_*) */
    size_t hint_len;
    uint8_t hint[TN_HINT_MAX];
} qs_pub_t;

static size_t slot_payload(const qs_pub_t *p, uint8_t *out);

static size_t payload_of(const qs_pub_t *p, uint8_t out[KVM_PUT_PAYLOAD_MAX])
{
    if (p->qs->prof->slots && !p->is_delete)
        return slot_payload(p, out);
    out[0] = p->is_delete;
    for (int i = 0; i < 8; i++)
        out[1 + i] = (uint8_t)(p->len >> (8 * i));
    return 9;
}

static void writer_reply(void *arg);
static void prim_handle(void *arg);

static void prim_reply(qs_pub_t *p, int rc, kvm_route_version_t v)
{
    qs_t *qs = p->qs;
    qs->prim_busy[p->obj] = false;
    p->rc = rc;
    p->version = v;
    if (p->replay) {
        if (!p->answered) {
            p->answered = true;
            p->rcb(p->rarg, rc, v); /* callbacks always delivered, also to a closed handle */
        }
        return;
    }
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 1, 4) * SIM_MSG_NS, writer_reply, p);
}

static void slots_on_cas(qs_t *qs, const qs_pub_t *p, qs_route_t *r);
static void slots_replaced(qs_t *qs, qs_route_t *r);
static bool slots_replay(qs_t *qs, qs_pub_t *p, const tn_op_t *op);

static uint64_t world_ms(const qs_t *qs)
{
    return env_wall_ms(sim_world_env(qs->sim));
}

/* Step 2 of the purge: a CAS expecting NONE also matches a tombstone with a deadline that is due
 * by the applying node's clock; otherwise the expected version must be the current one. */
static bool tomb_due(const qs_t *qs, const qs_route_t *r)
{
    return r->found && r->tomb && r->until != 0 && r->until <= world_ms(qs);
}

static bool cas_matches(const qs_t *qs, const qs_route_t *r, const kvm_route_version_t *pred)
{
    kvm_route_version_t cur = r->found ? r->version : KVM_ROUTE_VERSION_NONE;
    return kvm_route_version_equal(&cur, pred) ||
           (kvm_route_version_is_none(pred) && tomb_due(qs, r));
}

typedef struct qs_purge_ev {
    qs_t *qs;
    uint32_t obj;
    char op[TN_OPID_CAP];
} qs_purge_ev_t;

/* The world's purge of a tombstone at a random moment >= D + M (never while the primary handles
 * a request for the key: its shard serializes the two). Versions stay monotone: the key's floor
 * keeps the purged version. */
static void purge_tomb(void *arg)
{
    qs_purge_ev_t *e = arg;
    qs_t *qs = e->qs;
    qs_route_t *r = &qs->route[e->obj];
    if (!r->found || !r->tomb || strcmp(r->op, e->op) != 0)
        return; /* replaced meanwhile */
    if (qs->prim_busy[e->obj]) {
        sim_schedule(qs->sim, SIM_MSG_NS, purge_tomb, e);
        return;
    }
    r->found = false;
    r->purged = true;
    r->purged_v = r->version;
    memcpy(r->purged_op, r->op, sizeof(r->purged_op));
    qs->purges++;
    sim_trace_mix(qs->sim, e->op, strlen(e->op));
}

static void schedule_purge(qs_t *qs, uint32_t obj, const char *op, uint64_t until)
{
    qs_purge_ev_t *e = qs_alloc(qs, sizeof(*e));
    e->qs = qs;
    e->obj = obj;
    snprintf(e->op, sizeof(e->op), "%s", op);
    uint64_t at = until + qs->pg.margin_ms, now = world_ms(qs);
    uint64_t wait = (at > now ? at - now : 0) + sim_rand_range(qs->sim, 0, 300);
    sim_schedule(qs->sim, wait * SIM_MSG_NS, purge_tomb, e);
}

static void apply_cas(qs_pub_t *p)
{
    qs_t *qs = p->qs;
    qs_route_t *r = &qs->route[p->obj];
    if (p->gen != qs->generation) { /* the primary that claimed it was fenced */
        qs->fenced++;
        prim_reply(p, KVMESH_ESTALE_GENERATION, KVM_ROUTE_VERSION_NONE);
        return;
    }
    if (p->fresh && kvm_route_version_is_none(&p->pred) && r->found && r->tomb && !tomb_due(qs, r))
        sim_fail(qs->sim,
                 "operation %s was admitted expecting NONE and claimed, but tombstone %llu.%llu "
                 "of its key is not due (a stale NONE: its CAS can only conflict)",
                 p->op, (unsigned long long)r->version.fencing_token,
                 (unsigned long long)r->version.primary_sequence);
    if (!cas_matches(qs, r, &p->pred)) {
        prim_reply(p, KVMESH_ECONFLICT, KVM_ROUTE_VERSION_NONE);
        return;
    }
    if (kvm_route_version_cmp(&p->next, &qs->floor[p->obj]) <= 0) {
        sim_fail(qs->sim,
                 "operation %s would publish version %llu.%llu of object %u, not above the "
                 "highest it had (%llu.%llu): versions of a key must strictly increase",
                 p->op, (unsigned long long)p->next.fencing_token,
                 (unsigned long long)p->next.primary_sequence, p->obj,
                 (unsigned long long)qs->floor[p->obj].fencing_token,
                 (unsigned long long)qs->floor[p->obj].primary_sequence);
        prim_reply(p, KVMESH_ECONFLICT, KVM_ROUTE_VERSION_NONE);
        return;
    }
    uint32_t t = obj_tenant(qs, p->obj);
    uint64_t replaced = r->found && !r->tomb ? r->len : 0;
    qs_opinfo_t *oi = opinfo(qs, p->op, true);
    if (!oi)
        return;
    if (oi->abort_acked)
        sim_fail(qs->sim, "route CAS applied for operation %s whose abort succeeded", p->op);
    if (oi->cas_applied)
        sim_fail(qs->sim, "route CAS applied twice for operation %s", p->op);
    oi->cas_applied = true;
    oi->obj = p->obj;
    oi->is_delete = p->is_delete;
    oi->new_len = p->is_delete ? 0 : p->len;
    oi->replaced_len = replaced;
    if (r->found && !r->tomb) {
        qs->live_bytes[t] -= r->len;
        qs->live_objs[t]--;
    }
    kvm_route_version_t replaced_v = r->found ? r->version : KVM_ROUTE_VERSION_NONE;
    slots_replaced(qs, r);
    r->found = true;
    r->tomb = p->is_delete;
    r->pred = replaced_v;
    r->version = p->next;
    qs->floor[p->obj] = p->next;
    r->len = p->is_delete ? 0 : p->len;
    r->until = p->is_delete ? p->until : 0;
    snprintf(r->op, sizeof(r->op), "%s", p->op);
    if (r->tomb && r->until)
        schedule_purge(qs, p->obj, p->op, r->until);
    if (!r->tomb) {
        qs->live_bytes[t] += r->len;
        qs->live_objs[t]++;
    }
    slots_on_cas(qs, p, r);
    qs->cas_delta_sum[t] += (int64_t)oi->new_len - (int64_t)replaced;
    if (qs->live_bytes[t] > qs->pol[t].max_bytes || qs->live_objs[t] > qs->pol[t].max_objects)
        sim_fail(qs->sim, "tenant %s holds %llu live bytes / %llu objects over max %llu / %llu",
                 qs->tenants[t], (unsigned long long)qs->live_bytes[t],
                 (unsigned long long)qs->live_objs[t], (unsigned long long)qs->pol[t].max_bytes,
                 (unsigned long long)qs->pol[t].max_objects);
    sim_trace_mix(qs->sim, p->op, strlen(p->op));
    prim_reply(p, 0, p->next);
}

/* The version a CAS on this key publishes: the primary's sequence, above every version the key
 * had (EmbeddedWrh's shard sequence, MetadataOnly's route floor). no_floor: above the expected
 * one only, as if a purged key restarted its versions. */
static kvm_route_version_t version_base(const qs_pub_t *p)
{
    const qs_t *qs = p->qs;
    if (qs->no_floor)
        return p->pred;
    return qs->floor[p->obj];
}

static void apply_cas_cb(void *arg)
{
    apply_cas(arg);
}

static void on_prim_claim(void *arg, int rc, const tn_op_view_t *v)
{
    qs_pub_t *p = arg;
    qs_t *qs = p->qs;
    if (rc == 0)
        check_usage(qs, qs->tenants[obj_tenant(qs, p->obj)], &v->usage, "claim");
    p->fresh = rc == 0 && v->op && v->op->state == TN_ST_PUBLISHING;
    if (rc == 0 && !p->replay) {
        uint32_t t = obj_tenant(qs, p->obj);
        if (tn_hint_export(qs->prim_tn, qs->tenants[t], p->op, p->hint, sizeof(p->hint),
                           &p->hint_len) != 0)
            p->hint_len = 0;
    }
    if (rc) {
        if (rc == KVMESH_ECANCELED)
            qs->claims_rejected++; /* abort won: the CAS is rejected */
        if (rc == KVMESH_ECONFLICT && v && v->op && v->op->state == TN_ST_FINALIZED)
            qs->dup_refused++; /* a duplicate of a finalized operation's CAS */
        prim_reply(p, rc, KVM_ROUTE_VERSION_NONE);
        return;
    }
    /* the primary loses the shard right after claiming: the CAS fails outright, the predecessor
     * stays authoritative, the operation PUBLISHING: only the reconciler's replay publishes it */
    if (qs->faults && qs->prof->p_cas_fails > 0 && sim_chance(qs->sim, qs->prof->p_cas_fails)) {
        qs_opinfo_t *oi = opinfo(qs, p->op, true);
        if (!oi)
            return;
        if (!oi->cas_failed_claimed)
            qs->cas_failed_claimed++;
        oi->cas_failed_claimed = true;
        prim_reply(p, KVMESH_EUNAVAILABLE, KVM_ROUTE_VERSION_NONE);
        return;
    }
    /* the CAS follows the claim; sometimes it is slow (in flight while aborts are tried) */
    uint64_t d = qs->prof->delayed_cas && sim_chance(qs->sim, 0.3)
                     ? sim_rand_range(qs->sim, 10, 300) * SIM_MSG_NS
                     : 0;
    sim_schedule(qs->sim, d, apply_cas_cb, p);
}

static void prim_handle(void *arg)
{
    qs_pub_t *p = arg;
    qs_t *qs = p->qs;
    if (qs->prim_busy[p->obj]) { /* one claim+CAS per object at a time */
        sim_schedule(qs->sim, SIM_MSG_NS, prim_handle, p);
        return;
    }
    qs_route_t *r = &qs->route[p->obj];
    if (r->found && !strcmp(r->op, p->op)) { /* already published: idempotent */
        qs->prim_busy[p->obj] = true;
        p->until = r->until;
        prim_reply(p, 0, r->version);
        return;
    }
    qs->prim_busy[p->obj] = true;
    /* half the requests meet an EmbeddedWrh primary, which answers a conflict before it claims
     * (step 4: the operation stays PENDING); the others claim first, as a MetadataOnly writer */
    if (!cas_matches(qs, r, &p->pred) && sim_chance(qs->sim, 0.5)) {
        prim_reply(p, KVMESH_ECONFLICT, KVM_ROUTE_VERSION_NONE);
        return;
    }
    p->gen = qs->generation;
    kvm_route_version_t base = version_base(p);
    if (kvm_route_version_cmp(&base, &(kvm_route_version_t){p->gen, UINT64_MAX}) > 0) {
        prim_reply(p, KVMESH_ESTALE_GENERATION, KVM_ROUTE_VERSION_NONE);
        return;
    }
    int rc = kvm_route_version_next(&base, p->gen, &p->next);
    KVM_ASSERT(rc == 0);
    if (kvm_route_version_cmp(&p->pred, &(kvm_route_version_t){p->gen, UINT64_MAX}) > 0) {
        prim_reply(p, KVMESH_ESTALE_GENERATION, KVM_ROUTE_VERSION_NONE);
        return;
    }
    uint8_t pl[KVM_PUT_PAYLOAD_MAX];
    size_t pll = payload_of(p, pl);
    uint32_t t = obj_tenant(qs, p->obj);
    tn_claim_req_t cr = {.tenant = qs->tenants[t],
                         .domain = obj_domain(qs, p->obj),
                         .key = obj_key(qs, p->obj),
                         .op_id = p->op,
                         .generation = p->gen,
                         .fencing_token = p->gen,
                         .publish_token = kvm_hash_seeded(p->op, strlen(p->op), 7) | 1,
                         .next_version = p->next,
                         .payload = pl,
                         .payload_len = pll,
                         .cas_follows = !qs->no_dup_guard};
    if (p->hint_len)
        KVM_ASSERT(tn_hint_import(qs->prim_tn, p->hint, p->hint_len) == 0);
    p->hint_len = 0;
    rc = tn_claim(qs->prim_tn, &cr, on_prim_claim, p);
    if (rc)
        prim_reply(p, rc, KVM_ROUTE_VERSION_NONE);
}

static void failover(void *arg)
{
    qs_t *qs = arg;
    if (!qs->faults)
        return;
    qs->generation++;
    sim_log(qs->sim, "route primary failover: generation %llu", (unsigned long long)qs->generation);
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 150, 600) * SIM_MSG_NS, failover, qs);
}

/* route ops for the reconcilers */
typedef struct qs_lk {
    qs_t *qs;
    tn_lookup_cb cb;
    void *arg;
    tn_route_obs_t obs;
    int rc;
    bool answered;
} qs_lk_t;

static void lookup_deliver(void *arg)
{
    qs_lk_t *l = arg;
    if (!l->answered) {
        l->answered = true;
        l->cb(l->arg, l->rc, &l->obs);
    }
}

/* route callbacks still owed to reconcilers (a failed run stops the world before they land) */
static void owe(qs_t *qs, void *p, bool lookup)
{
    if (qs->n_owed == qs->cap_owed) {
        qs->cap_owed = qs->cap_owed ? 2 * qs->cap_owed : 64;
        qs->owed = realloc(qs->owed, qs->cap_owed * sizeof(*qs->owed));
        KVM_ASSERT(qs->owed != NULL);
    }
    qs->owed[qs->n_owed].p = p;
    qs->owed[qs->n_owed++].lookup = lookup;
}

static void pay_owed(qs_t *qs)
{
    for (size_t i = 0; i < qs->n_owed; i++) {
        if (qs->owed[i].lookup) {
            qs_lk_t *l = qs->owed[i].p;
            l->rc = KVMESH_ECANCELED;
            lookup_deliver(l);
        } else {
            qs_pub_t *p = qs->owed[i].p;
            if (!p->answered) {
                p->answered = true;
                p->rcb(p->rarg, KVMESH_ECANCELED, KVM_ROUTE_VERSION_NONE);
            }
        }
    }
}

static void route_lookup(void *ctx, const char *tenant, const char *domain, const char *key,
                         tn_lookup_cb cb, void *arg)
{
    qs_t *qs = ctx;
    qs_lk_t *l = qs_alloc(qs, sizeof(*l));
    l->qs = qs;
    l->cb = cb;
    l->arg = arg;
    owe(qs, l, true);
    int o = find_obj(qs, tenant, domain, key);
    KVM_ASSERT(o >= 0);
    const qs_route_t *r = &qs->route[o];
    l->obs.found = r->found;
    l->obs.tombstone = r->tomb;
    l->obs.version = r->version;
    l->obs.predecessor = r->pred;
    snprintf(l->obs.content_op, sizeof(l->obs.content_op), "%s", r->op);
    l->obs.retain_until_ms = r->found && r->tomb ? r->until : 0;
    sim_log(qs->sim, "lookup object %d: found %d tomb %d v %llu.%llu op %s", o, r->found, r->tomb,
            (unsigned long long)r->version.fencing_token,
            (unsigned long long)r->version.primary_sequence, r->op);
    if (qs->faults && SIM_BUGGIFY(qs->sim, "quota.lookup_fails"))
        l->rc = KVMESH_EUNAVAILABLE;
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 1, 3) * SIM_MSG_NS, lookup_deliver, l);
}

static void replay_refused(void *arg)
{
    qs_pub_t *p = arg;
    if (!p->answered) {
        p->answered = true;
        p->rcb(p->rarg, KVMESH_EUNAVAILABLE, KVM_ROUTE_VERSION_NONE);
    }
}

static void route_replay(void *ctx, const tn_op_t *op, tn_replay_cb cb, void *arg)
{
    qs_t *qs = ctx;
    qs_pub_t *p = qs_alloc(qs, sizeof(*p));
    p->qs = qs;
    p->replay = true;
    p->rcb = cb;
    p->rarg = arg;
    owe(qs, p, false);
    int o = find_obj(qs, op->tenant, op->domain, op->key);
    KVM_ASSERT(o >= 0);
    p->obj = (uint32_t)o;
    snprintf(p->op, sizeof(p->op), "%s", op->id);
    p->is_delete = op->kind == TN_KIND_DELETE;
    p->len = op->next_len;
    p->pred = op->expected_route;
    /* a create's predecessor V is a tombstone: purged since, the replay expects NONE */
    if (op->kind == TN_KIND_CREATE && !qs->route[o].found)
        p->pred = KVM_ROUTE_VERSION_NONE;
    /* the replay publishes its own tombstone, with a full retention */
    if (p->is_delete)
        p->until = world_ms(qs) + sim_rand_range(qs->sim, qs->pg.retain_lo, qs->pg.retain_hi);
    sim_log(qs->sim, "replay %s (%s) of object %d expecting %llu.%llu", op->id,
            tn_kind_name(op->kind), o, (unsigned long long)p->pred.fencing_token,
            (unsigned long long)p->pred.primary_sequence);
    /* the primary cannot always prove a replay safe: then the op stays charged (degraded) */
    if ((qs->faults && sim_chance(qs->sim, 0.2)) || !slots_replay(qs, p, op)) {
        qs->degraded++;
        sim_schedule(qs->sim, 2 * SIM_MSG_NS, replay_refused, p);
        return;
    }
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 1, 3) * SIM_MSG_NS, prim_handle, p);
}

/* ---- owner slots (slots profile; "Replaying a put", steps 1-3) --------------------------------
 */

enum { SL_RESERVED = 1, SL_COMMITTED, SL_FREED };
#define QS_SLOT_TTL_MSGS 80 /* a reservation's TTL: expires while writes are still in flight */

typedef struct qs_slot {
    int state;
    uint32_t obj;
    uint64_t deadline_ns;
    bool busy;    /* a lookup or the held check is in flight */
    bool checked; /* the held check said REREAD: the next lookup decides (commit or free) */
} qs_slot_t;

static kvm_runtime_id_t qs_rid(uint8_t b)
{
    kvm_runtime_id_t id;
    memset(id.b, b, sizeof(id.b));
    return id;
}

/* The owner's (owner, segment, offset) of slot id: one owner, segment 1, offset = id. */
static kvm_hot_replica_t slot_locator(uint32_t id, uint64_t len)
{
    return (kvm_hot_replica_t){.owner = qs_rid(0xab), .segment = 1, .offset = id, .length = len};
}

/* The claim's payload of a put: the store's version 2 payload naming its one slot. */
static size_t slot_payload(const qs_pub_t *p, uint8_t *out)
{
    kvm_put_payload_t pp = {.length = p->len, .has_locators = true, .n = 1};
    pp.writer = qs_rid(0xcd);
    pp.rep[0] = slot_locator(p->slot, p->len);
    size_t n = 0;
    int rc = kvm_put_payload_encode(&pp, out, KVM_PUT_PAYLOAD_MAX, &n);
    KVM_ASSERT(rc == 0 && p->slot != 0);
    return n;
}

static uint32_t slot_reserve(qs_t *qs, const qs_node_t *nd)
{
    if (!qs->prof->slots || nd->is_delete)
        return 0;
    KVM_ASSERT(qs->n_slots < QS_MAX_OPS);
    qs_slot_t *sl = &qs->slots[qs->n_slots++];
    *sl = (qs_slot_t){.state = SL_RESERVED,
                      .obj = nd->obj,
                      .deadline_ns = sim_now(qs->sim) + QS_SLOT_TTL_MSGS * SIM_MSG_NS};
    return qs->n_slots; /* ids start at 1 */
}

static qs_slot_t *slot_get(qs_t *qs, uint32_t id)
{
    KVM_ASSERT(id >= 1 && id <= qs->n_slots);
    return &qs->slots[id - 1];
}

static bool route_has_slot(const qs_t *qs, uint32_t obj, uint32_t id)
{
    const qs_route_t *r = &qs->route[obj];
    return r->found && !r->tomb && r->slot == id;
}

/* apply_cas, before the route changes: the replaced value's slot is released (obsolete). */
static void slots_replaced(qs_t *qs, qs_route_t *r)
{
    if (!qs->prof->slots || !r->slot)
        return;
    slot_get(qs, r->slot)->state = SL_FREED;
    r->slot = 0;
}

/* apply_cas, the route changed: a put's route references its slot, which must not be free. */
static void slots_on_cas(qs_t *qs, const qs_pub_t *p, qs_route_t *r)
{
    if (!qs->prof->slots || p->is_delete)
        return;
    qs_slot_t *sl = slot_get(qs, p->slot);
    if (sl->state == SL_FREED)
        sim_fail(qs->sim, "route CAS of %s (%s) references slot %u, which its owner freed", p->op,
                 p->replay ? "a replay" : "the writer", p->slot);
    if (p->replay)
        qs->replayed_slots++;
    sl->state = SL_COMMITTED;
    r->slot = p->slot;
}

/* route_replay: the slot comes from the recorded payload, as kvm_quota_replay rebuilds it. */
static bool slots_replay(qs_t *qs, qs_pub_t *p, const tn_op_t *op)
{
    if (!qs->prof->slots || p->is_delete)
        return true;
    kvm_put_payload_t pp;
    if (kvm_put_payload_decode(op->payload, op->payload_len, &pp) != 0 || !pp.has_locators ||
        pp.n != 1 || pp.rep[0].offset == 0 || pp.rep[0].offset > qs->n_slots)
        return false; /* refused, as the store refuses a payload without locators */
    p->slot = (uint32_t)pp.rep[0].offset;
    return true;
}

static void slot_free(qs_t *qs, uint32_t id)
{
    qs_slot_t *sl = slot_get(qs, id);
    if (route_has_slot(qs, sl->obj, id))
        sim_fail(qs->sim, "owner freed slot %u that the route of object %u references", id,
                 sl->obj);
    sl->state = SL_FREED;
    qs->slots_freed++;
}

typedef struct qs_own {
    qs_t *qs;
    uint32_t id;
    tn_objrow_t row;
    bool have_row;
} qs_own_t;

static void own_later(qs_t *qs, qs_slot_t *sl)
{
    sl->busy = false;
    sl->deadline_ns = sim_now(qs->sim) + 20 * SIM_MSG_NS;
}

static void own_decide(qs_own_t *w, const tn_op_t *op)
{
    qs_t *qs = w->qs;
    qs_slot_t *sl = slot_get(qs, w->id);
    kvm_hot_replica_t loc = slot_locator(w->id, 0);
    enum kvm_held_verdict v = kvm_held_decide(w->have_row ? &w->row : NULL, op, &loc);
    if (sl->state != SL_RESERVED) {
        sl->busy = false;
        return;
    }
    if (v == KVM_HELD_KEEP)
        qs->slots_kept++;
    sl->checked = v == KVM_HELD_REREAD;
    own_later(qs, sl);
    if (sl->checked)
        sl->deadline_ns = sim_now(qs->sim); /* look the route up again at once */
}

static void own_op_read(void *arg, const meta_result_t *res)
{
    qs_own_t *w = arg;
    qs_t *qs = w->qs;
    if (res->rc) {
        own_later(qs, slot_get(qs, w->id));
        return;
    }
    tn_op_t *op = NULL;
    if (res->kv.found) {
        op = malloc(sizeof(*op));
        KVM_ASSERT(op != NULL);
        KVM_ASSERT(tn_op_decode(res->kv.value, res->kv.value_len, op) == 0);
    }
    own_decide(w, op);
    free(op);
}

static void own_row_read(void *arg, const meta_result_t *res)
{
    qs_own_t *w = arg;
    qs_t *qs = w->qs;
    qs_slot_t *sl = slot_get(qs, w->id);
    if (res->rc) {
        own_later(qs, sl);
        return;
    }
    w->have_row = res->kv.found;
    if (w->have_row)
        KVM_ASSERT(tn_objrow_decode(res->kv.value, res->kv.value_len, &w->row) == 0);
    if (!w->have_row || !w->row.lock_op[0]) {
        own_decide(w, NULL);
        return;
    }
    char k[KS_KEY_CAP];
    int rc =
        ks_acct_op_key(k, sizeof(k), QS_DEP, qs->tenants[obj_tenant(qs, sl->obj)], w->row.lock_op);
    KVM_ASSERT(rc == 0);
    rc = meta_get(qs->world_m, k, 200, own_op_read, w);
    KVM_ASSERT(rc == 0);
}

/* The exact lookup answered (after a message delay): referenced -> commit; otherwise the held
 * check first (reads after the lookup, the safety argument's order), unless it already said
 * REREAD or the variant frees on the lookup alone. */
static void own_looked_up(void *arg)
{
    qs_own_t *w = arg;
    qs_t *qs = w->qs;
    qs_slot_t *sl = slot_get(qs, w->id);
    if (qs->owners_stop || sl->state != SL_RESERVED) {
        sl->busy = false;
        return;
    }
    if (route_has_slot(qs, sl->obj, w->id)) {
        sl->state = SL_COMMITTED;
        sl->busy = false;
        qs->slots_committed++;
        return;
    }
    if (sl->checked || qs->free_held) {
        sl->busy = false;
        slot_free(qs, w->id);
        return;
    }
    char k[KS_KEY_CAP];
    int rc = ks_object_key(k, sizeof(k), QS_DEP, qs->tenants[obj_tenant(qs, sl->obj)],
                           obj_domain(qs, sl->obj), obj_key(qs, sl->obj));
    KVM_ASSERT(rc == 0);
    rc = meta_get(qs->world_m, k, 200, own_row_read, w);
    KVM_ASSERT(rc == 0);
}

/* The owners' housekeeping tick: expired RESERVED slots are looked up, a few per tick. */
static void owners_tick(void *arg)
{
    qs_t *qs = arg;
    if (qs->owners_stop)
        return;
    uint64_t now = sim_now(qs->sim);
    for (uint32_t i = 0; i < qs->n_slots; i++) {
        qs_slot_t *sl = &qs->slots[i];
        if (sl->state != SL_RESERVED || sl->busy || sl->deadline_ns > now)
            continue;
        sl->busy = true;
        qs_own_t *w = qs_alloc(qs, sizeof(*w));
        *w = (qs_own_t){.qs = qs, .id = i + 1};
        sim_schedule(qs->sim, sim_rand_range(qs->sim, 1, 3) * SIM_MSG_NS, own_looked_up, w);
    }
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 10, 30) * SIM_MSG_NS, owners_tick, qs);
}

static bool slots_settled(const qs_t *qs)
{
    for (uint32_t i = 0; qs->prof->slots && i < qs->n_slots; i++)
        if (qs->slots[i].state == SL_RESERVED)
            return false;
    return true;
}

/* After convergence: every live route's slot is committed (never freed), every committed slot
 * is a live route's. */
static void slots_final_check(qs_t *qs)
{
    for (uint32_t o = 0; qs->prof->slots && o < qs->objs && !sim_failed(qs->sim); o++) {
        const qs_route_t *r = &qs->route[o];
        if (r->found && !r->tomb && (!r->slot || slot_get(qs, r->slot)->state != SL_COMMITTED))
            sim_fail(qs->sim, "object %u: its live route's slot %u is not committed (state %d)", o,
                     r->slot, r->slot ? slot_get(qs, r->slot)->state : 0);
    }
    for (uint32_t i = 0; qs->prof->slots && i < qs->n_slots && !sim_failed(qs->sim); i++)
        if (qs->slots[i].state == SL_COMMITTED && !route_has_slot(qs, qs->slots[i].obj, i + 1))
            sim_fail(qs->sim, "slot %u is committed but no live route references it", i + 1);
}

/* ---- writers -------------------------------------------------------------------------------- */

static void writer_next(void *arg);
static void send_publish(qs_node_t *nd);

typedef struct qs_crash {
    qs_t *qs;
    uint32_t node, inc;
} qs_crash_t;

static void do_crash(void *arg)
{
    qs_crash_t *c = arg;
    if (sim_node_up(c->qs->sim, c->node) && sim_node_incarnation(c->qs->sim, c->node) == c->inc) {
        sim_log(c->qs->sim, "crash n%u (window)", c->node);
        sim_crash(c->qs->sim, c->node);
    }
}

static void restart_node(void *arg);

typedef struct qs_rs {
    qs_t *qs;
    uint32_t node;
} qs_rs_t;

static void crash_now(qs_node_t *nd)
{
    qs_t *qs = nd->qs;
    qs_crash_t *c = qs_alloc(qs, sizeof(*c));
    *c = (qs_crash_t){qs, nd->id, sim_node_incarnation(qs->sim, nd->id)};
    nd->stopping = true; /* do nothing more in this incarnation */
    sim_schedule(qs->sim, 0, do_crash, c);
    qs_rs_t *r = qs_alloc(qs, sizeof(*r));
    *r = (qs_rs_t){qs, nd->id};
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 5, 60) * SIM_MSG_NS, restart_node, r);
}

static bool window(qs_node_t *nd, double p)
{
    qs_t *qs = nd->qs;
    if (!qs->faults || p <= 0)
        return false;
    if (qs->prof->delete_windows && !nd->is_delete)
        return false;
    return sim_chance(qs->sim, p);
}

static void write_end(qs_node_t *nd, int status, uint64_t a, uint64_t b)
{
    qs_t *qs = nd->qs;
    if (nd->hid >= 0)
        sim_hist_end(qs->hist, nd->hid, status, a, b);
    nd->hid = -1;
    qs->intent[nd->id].active = false;
    nd->busy = false;
    nd->phase = PH_IDLE;
    env_timer_cancel(nd->env, nd->deadline);
    nd->deadline = 0;
    if (!nd->stopping && !qs->quiet)
        nd->think =
            env_timer_start(nd->env, sim_rand_range(qs->sim, 1, 10) * SIM_MSG_NS, writer_next, nd);
}

static void on_finalize(void *arg, int rc, const tn_op_view_t *v)
{
    qs_node_t *nd = arg;
    qs_t *qs = nd->qs;
    if (nd->stopping)
        return;
    if (rc) { /* left for reconciliation */
        write_end(nd, rc, 0, 0);
        return;
    }
    check_usage(qs, qs->tenants[obj_tenant(qs, nd->obj)], &v->usage, "finalize");
    qs_opinfo_t *oi = opinfo(qs, nd->op, false);
    if (!oi || !oi->cas_applied) {
        sim_fail(qs->sim, "operation %s finalized without an applied route CAS", nd->op);
        return;
    }
    int64_t want = (int64_t)oi->new_len - (int64_t)oi->replaced_len;
    if (v->op->delta_bytes != want)
        sim_fail(qs->sim,
                 "operation %s: derived delta %lld but the CAS replaced %llu bytes with %llu "
                 "(refund of one predecessor must happen exactly once)",
                 nd->op, (long long)v->op->delta_bytes, (unsigned long long)oi->replaced_len,
                 (unsigned long long)oi->new_len);
    oi->finalized = true;
    qs->writes_ok++;
    if (window(nd, qs->prof->p_after_fin)) { /* after finalize, before the reply */
        crash_now(nd);
        return;
    }
    write_end(nd, 0, (uint64_t)v->op->delta_bytes, 0);
}

/* The CAS failed outright after the claim (the operation PUBLISHING): the writer, still up and
 * within its budget, publishes it again with the same operation and predecessor (the primary
 * claims again with the same publish token: a replay; or finds it published meanwhile). true:
 * sent again. A live writer that gives up with budget left leaves the operation charged, locked
 * and degraded until reconciliation: that is the failure the store's settling removes. */
static bool writer_settle(qs_node_t *nd)
{
    qs_t *qs = nd->qs;
    if (!qs->no_settle && nd->settles < QS_SETTLES) {
        nd->settles++;
        qs->writer_settled++;
        env_timer_cancel(nd->env, nd->deadline);
        nd->deadline = 0;
        send_publish(nd);
        return true;
    }
    const qs_opinfo_t *oi = opinfo(qs, nd->op, false);
    if (oi && oi->cas_failed_claimed && !oi->cas_applied && nd->settles < QS_SETTLES)
        sim_fail(qs->sim,
                 "operation %s: its route CAS failed after the claim and its writer (up, %u of "
                 "%u publications again left) gave up: left charged and locked to reconciliation",
                 nd->op, QS_SETTLES - nd->settles, QS_SETTLES);
    return false;
}

static void writer_reply(void *arg)
{
    qs_pub_t *p = arg;
    qs_t *qs = p->qs;
    if (!sim_node_up(qs->sim, p->node) || sim_node_incarnation(qs->sim, p->node) != p->inc)
        return; /* the writer is gone: reconciliation closes the window */
    qs_node_t *nd = sim_node_state(qs->sim, p->node);
    if (!nd || nd->stopping || nd->phase != PH_PUBLISH || strcmp(nd->op, p->op) != 0)
        return;
    if (p->rc == KVMESH_EUNAVAILABLE && qs->prof->writer_settles && writer_settle(nd))
        return;
    if (p->rc) { /* rejected: aborted (claim refused), fenced (stays publishing), ... */
        write_end(nd, p->rc, 0, 0);
        return;
    }
    if (window(nd, qs->prof->p_after_cas)) { /* after route CAS, before finalize */
        crash_now(nd);
        return;
    }
    uint32_t t = obj_tenant(qs, nd->obj);
    if (p->hint_len)
        KVM_ASSERT(tn_hint_import(nd->tn, p->hint, p->hint_len) == 0);
    nd->phase = PH_FINALIZE;
    env_timer_cancel(nd->env, nd->deadline);
    nd->deadline = 0;
    int rc = tn_finalize_tomb(nd->tn, qs->tenants[t], obj_domain(qs, nd->obj), obj_key(qs, nd->obj),
                              nd->op, p->version, nd->is_delete ? p->until : 0, on_finalize, nd);
    KVM_ASSERT(rc == 0);
}

static void on_abort(void *arg, int rc, const tn_op_view_t *v)
{
    qs_node_t *nd = arg;
    qs_t *qs = nd->qs;
    if (nd->stopping)
        return;
    qs_opinfo_t *oi = opinfo(qs, nd->op, true);
    if (!oi)
        return;
    oi->obj = nd->obj;
    if (rc == 0) {
        check_usage(qs, qs->tenants[obj_tenant(qs, nd->obj)], &v->usage, "abort");
        if (oi->cas_applied)
            sim_fail(qs->sim, "abort of %s succeeded after its route CAS was applied", nd->op);
        oi->abort_acked = true;
        qs->aborts_ok++;
    } else if (rc == KVMESH_ECONFLICT && v->op && v->op->state == TN_ST_PUBLISHING) {
        oi->abort_refused = true; /* publishing won: must end finalized */
    }
    write_end(nd, rc ? rc : KVMESH_ECANCELED, 0, 0);
}

static void write_deadline(void *arg)
{
    qs_node_t *nd = arg;
    qs_t *qs = nd->qs;
    nd->deadline = 0;
    if (nd->stopping || nd->phase != PH_PUBLISH)
        return;
    uint32_t t = obj_tenant(qs, nd->obj);
    nd->phase = PH_ABORT;
    int rc = tn_abort(nd->tn, qs->tenants[t], obj_domain(qs, nd->obj), obj_key(qs, nd->obj), nd->op,
                      on_abort, nd);
    KVM_ASSERT(rc == 0);
}

static void send_publish_cb(void *arg)
{
    qs_node_t *nd = arg;
    if (!nd->stopping)
        send_publish(nd);
}

static void send_publish(qs_node_t *nd)
{
    qs_t *qs = nd->qs;
    nd->phase = PH_PUBLISH;
    qs_pub_t *p = qs_alloc(qs, sizeof(*p));
    p->qs = qs;
    p->obj = nd->obj;
    snprintf(p->op, sizeof(p->op), "%s", nd->op);
    p->is_delete = nd->is_delete;
    p->len = nd->len;
    p->pred = qs->intent[nd->id].pred;
    p->slot = nd->slot;
    if (p->is_delete) /* the tombstone's deadline by the publisher's clock */
        p->until =
            env_wall_ms(nd->env) + sim_rand_range(qs->sim, qs->pg.retain_lo, qs->pg.retain_hi);
    p->node = nd->id;
    p->inc = sim_node_incarnation(qs->sim, nd->id);
    if (tn_hint_export(nd->tn, qs->tenants[obj_tenant(qs, nd->obj)], nd->op, p->hint,
                       sizeof(p->hint), &p->hint_len) != 0)
        p->hint_len = 0;
    uint64_t d = sim_rand_range(qs->sim, 1, 4) * SIM_MSG_NS;
    if (qs->prof->delayed_cas && qs->faults && sim_chance(qs->sim, 0.4))
        d = sim_rand_range(qs->sim, 50, 500) * SIM_MSG_NS; /* across abort and expiry */
    sim_schedule(qs->sim, d, prim_handle, p);
    if (qs->faults && sim_chance(qs->sim, 0.05)) { /* a duplicate request */
        qs_pub_t *q = qs_alloc(qs, sizeof(*q));
        *q = *p;
        sim_schedule(qs->sim, d + sim_rand_range(qs->sim, 0, 20) * SIM_MSG_NS, prim_handle, q);
    }
    if (qs->prof->late_dups && qs->faults && sim_chance(qs->sim, 0.3)) {
        /* a duplicate still in flight after the retention and margin: the writer finalizes,
         * another deletes, the tombstone is due or purged, and then it arrives */
        qs_pub_t *q = qs_alloc(qs, sizeof(*q));
        *q = *p;
        qs->late_dups++;
        uint64_t late = qs->pg.retain_hi + qs->pg.margin_ms;
        sim_schedule(qs->sim, d + sim_rand_range(qs->sim, late / 2, 4 * late) * SIM_MSG_NS,
                     prim_handle, q);
    }
    /* the writer's own deadline: then it tries to abort */
    nd->deadline = env_timer_start(nd->env, 250 * SIM_MSG_NS, write_deadline, nd);
}

static uint32_t slot_reserve(qs_t *qs, const qs_node_t *nd);

static void on_reserve(void *arg, int rc, const tn_op_view_t *v)
{
    qs_node_t *nd = arg;
    qs_t *qs = nd->qs;
    if (nd->stopping)
        return;
    if (rc) {
        if (rc == KVMESH_EQUOTA) {
            qs->refused_quota++;
            if (sim_chance(qs->sim, 0.7))
                nd->evict = 1 + obj_tenant(qs, nd->obj); /* tenant-local recovery */
        }
        write_end(nd, rc, 0, 0);
        return;
    }
    check_usage(qs, qs->tenants[obj_tenant(qs, nd->obj)], &v->usage, "reserve");
    if (!v->repeated && kvm_route_version_is_none(&qs->intent[nd->id].pred) &&
        !kvm_route_version_is_none(&v->op->expected_route))
        qs->none_admitted++; /* NONE against a deleted row past D + M */
    switch (v->op->state) {
    case TN_ST_PENDING:
        break;
    case TN_ST_FINALIZED: /* a retry after "finalized, reply lost" */
        write_end(nd, 0, (uint64_t)v->op->delta_bytes, 1);
        return;
    default: /* publishing: reconciliation or the primary finishes it */
        write_end(nd, KVMESH_EINDETERMINATE, 0, 0);
        return;
    }
    nd->slot = slot_reserve(qs, nd);          /* placement (slots profile; 0 otherwise) */
    if (window(nd, qs->prof->p_before_cas)) { /* before route CAS */
        crash_now(nd);
        return;
    }
    if (qs->faults && sim_chance(qs->sim, 0.1)) { /* the data transfer failed: abort */
        uint32_t t = obj_tenant(qs, nd->obj);
        nd->phase = PH_ABORT;
        rc = tn_abort(nd->tn, qs->tenants[t], obj_domain(qs, nd->obj), obj_key(qs, nd->obj), nd->op,
                      on_abort, nd);
        KVM_ASSERT(rc == 0);
        return;
    }
    /* data transfer (into the reserved owner slot), then publication */
    nd->think =
        env_timer_start(nd->env, sim_rand_range(qs->sim, 1, 5) * SIM_MSG_NS, send_publish_cb, nd);
}

static void start_write(qs_node_t *nd, const qs_intent_t *in)
{
    qs_t *qs = nd->qs;
    nd->busy = true;
    nd->phase = PH_RESERVE;
    snprintf(nd->op, sizeof(nd->op), "%s", in->op);
    nd->obj = in->obj;
    nd->is_delete = in->is_delete;
    nd->len = in->len;
    nd->hid = in->hid;
    nd->settles = 0;
    qs->intent[nd->id] = *in;
    qs->intent[nd->id].active = true;
    uint32_t t = obj_tenant(qs, in->obj);
    tn_reserve_req_t rq = {.tenant = qs->tenants[t],
                           .domain = obj_domain(qs, in->obj),
                           .key = obj_key(qs, in->obj),
                           .op_id = in->op,
                           .is_delete = in->is_delete,
                           .next_len = in->len,
                           .expected_route = in->pred};
    int rc = tn_reserve(nd->tn, &rq, on_reserve, nd);
    KVM_ASSERT(rc == 0);
}

static void writer_next(void *arg)
{
    qs_node_t *nd = arg;
    qs_t *qs = nd->qs;
    nd->think = 0;
    if (nd->stopping || nd->busy || qs->quiet)
        return;
    uint32_t o = (uint32_t)sim_rand_range(qs->sim, 0, qs->objs - 1);
    bool evict = false;
    if (nd->evict) { /* delete a live object of the same tenant only */
        uint32_t per = QS_DOMAINS * qs->keys, first = (nd->evict - 1) * per;
        uint32_t start = (uint32_t)sim_rand_range(qs->sim, 0, per - 1);
        for (uint32_t i = 0; i < per; i++) {
            uint32_t c = first + (start + i) % per;
            if (qs->route[c].found && !qs->route[c].tomb) {
                o = c;
                evict = true;
                break;
            }
        }
        nd->evict = 0;
    }
    uint32_t t = obj_tenant(qs, o);
    if (!(nd->booted & (1u << t))) { /* not serving this tenant (refused policy) */
        nd->think = env_timer_start(nd->env, 5 * SIM_MSG_NS, writer_next, nd);
        return;
    }
    const qs_route_t *r = &qs->route[o];
    qs_intent_t in = {0};
    in.obj = o;
    in.pred = r->found ? r->version : KVM_ROUTE_VERSION_NONE;
    /* a writer that looked the key up while it was absent (or retries with NONE after its
     * tombstone's version was refused, as the store does): NONE against a tombstone */
    if (r->found && r->tomb && sim_chance(qs->sim, 0.5))
        in.pred = KVM_ROUTE_VERSION_NONE;
    bool live = r->found && !r->tomb;
    in.is_delete = live && (evict || sim_chance(qs->sim, qs->prof->p_delete));
    uint64_t maxb = qs->pol[t].max_bytes;
    in.len = in.is_delete ? 0
             : sim_chance(qs->sim, 0.03)
                 ? maxb + 1 /* larger than the tenant's limit: refused at once */
                 : sim_rand_range(qs->sim, 1, maxb * 3 / 5);
    tn_next_op_id(nd->tn, in.op);
    in.hid = sim_hist_begin(qs->hist, nd->id, in.is_delete ? OPK_DEL : OPK_PUT, o, in.len);
    start_write(nd, &in);
}

/* ---- reconciliation ------------------------------------------------------------------------- */

static void recon_tick(void *arg);

static void on_recon(void *arg, const tn_recon_report_t *r)
{
    qs_node_t *nd = arg;
    nd->recon_busy = false;
    if (nd->stopping)
        return;
    sim_log(nd->qs->sim, "n%u recon %s: aborted %u finalized %u replayed %u degraded %u purged %u",
            nd->id, nd->qs->tenants[nd->recon_tenant], r->aborted, r->finalized, r->replayed,
            r->degraded, r->purged);
    nd->recon_timer =
        env_timer_start(nd->env, sim_rand_range(nd->qs->sim, 40, 80) * SIM_MSG_NS, recon_tick, nd);
}

static void recon_tick(void *arg)
{
    qs_node_t *nd = arg;
    qs_t *qs = nd->qs;
    nd->recon_timer = 0;
    if (nd->stopping)
        return;
    nd->recon_tenant = (nd->recon_tenant + 1) % QS_TENANTS;
    if (!(nd->booted & (1u << nd->recon_tenant))) {
        nd->recon_timer = env_timer_start(nd->env, 10 * SIM_MSG_NS, recon_tick, nd);
        return;
    }
    tn_route_ops_t ops = {.lookup = route_lookup, .replay = route_replay, .ctx = qs};
    nd->recon_busy = true;
    int rc = tn_recon_pass(nd->tn, qs->tenants[nd->recon_tenant], &ops, 8, on_recon, nd);
    KVM_ASSERT(rc == 0);
}

/* ---- node lifecycle ------------------------------------------------------------------------- */

static void on_boot(void *arg, int rc, const tn_op_view_t *v);

typedef struct qs_boot {
    qs_node_t *nd;
    uint32_t t;
    bool mismatch;
} qs_boot_t;

static void boot_done(qs_node_t *nd)
{
    qs_t *qs = nd->qs;
    nd->recon_timer =
        env_timer_start(nd->env, sim_rand_range(qs->sim, 10, 50) * SIM_MSG_NS, recon_tick, nd);
    qs_intent_t *in = &qs->intent[nd->id];
    if (in->active && (nd->booted & (1u << obj_tenant(qs, in->obj))) && sim_chance(qs->sim, 0.5)) {
        qs_intent_t copy = *in; /* retry the interrupted operation with its id */
        start_write(nd, &copy);
        return;
    }
    if (in->active) {
        if (in->hid >= 0)
            sim_hist_end(qs->hist, in->hid, KVMESH_EINDETERMINATE, 0, 0);
        in->active = false;
    }
    nd->think =
        env_timer_start(nd->env, sim_rand_range(qs->sim, 1, 10) * SIM_MSG_NS, writer_next, nd);
}

static void on_boot(void *arg, int rc, const tn_op_view_t *v)
{
    qs_boot_t *b = arg;
    qs_node_t *nd = b->nd;
    qs_t *qs = nd->qs;
    (void)v;
    if (b->mismatch) {
        if (rc != KVMESH_EINCOMPAT || !strstr(kvmesh_last_error(), "max_bytes"))
            sim_fail(qs->sim, "a differing hard policy was not refused naming max_bytes: %s (%s)",
                     kvmesh_errname(rc), kvmesh_last_error());
        qs->policy_refusals++;
    } else if (rc == 0) {
        nd->booted |= 1u << b->t;
        qs->policy_created[b->t] = true;
    } else if (rc != KVMESH_ECANCELED) {
        /* metadata trouble at startup: try again */
        tn_policy_t pol = qs->pol[b->t];
        if (!nd->stopping) {
            rc = tn_bootstrap(nd->tn, qs->tenants[b->t], &pol, on_boot, b);
            KVM_ASSERT(rc == 0);
            return;
        }
    }
    if (--nd->boot_pending == 0 && !nd->stopping)
        boot_done(nd);
}

static void *qs_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    qs_t *qs = ctx;
    qs_node_t *nd = calloc(1, sizeof(*nd));
    KVM_ASSERT(nd != NULL);
    nd->qs = qs;
    nd->id = node;
    nd->env = env;
    nd->hid = -1;
    int rc = meta_open(&nd->m, env, qs->url, NULL);
    KVM_ASSERT(rc == 0);
    if (qs->faults) {
        meta_memory_faults_t f = {.latency_min_ms = 1,
                                  .latency_max_ms = 8,
                                  .fail_ppm = 20000,
                                  .fail_after_apply = (node % 2) == 0};
        meta_memory_set_faults(nd->m, &f);
    }
    tn_config_t cfg = {.deployment = QS_DEP,
                       .writer_epoch = ++qs->epoch_ctr,
                       .timeout_ms = 100,
                       .pending_ttl_ms = 150,
                       .publish_ttl_ms = 60,
                       .backoff_max_ms = 400,
                       .retain_ms = qs->pg.history_ms,
                       .purge_margin_ms = qs->pg.margin_ms,
                       .test_bugs = qs->bugs};
    rc = tn_new(&nd->tn, env, nd->m, &cfg);
    KVM_ASSERT(rc == 0);
    nd->boot_pending = QS_TENANTS;
    for (uint32_t t = 0; t < QS_TENANTS; t++) {
        qs_boot_t *b = qs_alloc(qs, sizeof(*b));
        b->nd = nd;
        b->t = t;
        tn_policy_t pol = qs->pol[t];
        /* now and then a runtime comes up with a differing hard policy for tenant 1 */
        if (t == 1 && qs->faults && qs->policy_created[t] && sim_chance(qs->sim, 0.1)) {
            b->mismatch = true;
            pol.max_bytes++;
        }
        rc = tn_bootstrap(nd->tn, qs->tenants[t], &pol, on_boot, b);
        KVM_ASSERT(rc == 0);
    }
    (void)sim;
    return nd;
}

static void qs_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    qs_node_t *nd = state;
    nd->stopping = true;
    env_timer_cancel(nd->env, nd->think);
    env_timer_cancel(nd->env, nd->recon_timer);
    env_timer_cancel(nd->env, nd->deadline);
    tn_close(nd->tn);
    meta_close(nd->m);
    sim_drain_defers(sim, node);
    free(nd);
    (void)ctx;
}

static void restart_node(void *arg)
{
    qs_rs_t *r = arg;
    sim_restart(r->qs->sim, r->node);
}

static void nemesis(void *arg)
{
    qs_t *qs = arg;
    if (!qs->faults)
        return;
    uint32_t v = (uint32_t)sim_rand_range(qs->sim, 0, qs->n - 1);
    if (sim_node_up(qs->sim, v)) {
        sim_crash(qs->sim, v);
        qs_rs_t *r = qs_alloc(qs, sizeof(*r));
        *r = (qs_rs_t){qs, v};
        sim_schedule(qs->sim, sim_rand_range(qs->sim, 5, 80) * SIM_MSG_NS, restart_node, r);
    }
    sim_schedule(qs->sim, sim_rand_range(qs->sim, 100, 400) * SIM_MSG_NS, nemesis, qs);
}

/* ---- final checks --------------------------------------------------------------------------- */

typedef struct qs_uq {
    uint32_t t;
    qs_t *qs;
} qs_uq_t;

static void on_final_usage(void *arg, int rc, const tn_usage_t *u)
{
    qs_uq_t *q = arg;
    qs_t *qs = q->qs;
    qs->final_pending--;
    if (rc) {
        qs->usage_done[q->t] = false;
        return;
    }
    qs->final_usage[q->t] = *u;
    qs->usage_done[q->t] = true;
}

static bool usage_ready(void *ctx)
{
    return ((qs_t *)ctx)->final_pending == 0;
}

static bool read_usage(qs_t *qs)
{
    for (uint32_t t = 0; t < QS_TENANTS; t++) {
        qs_uq_t *q = qs_alloc(qs, sizeof(*q));
        *q = (qs_uq_t){.t = t, .qs = qs};
        qs->usage_done[t] = false;
        qs->final_pending++;
        int rc = tn_get_usage(qs->prim_tn, qs->tenants[t], on_final_usage, q);
        KVM_ASSERT(rc == 0);
    }
    sim_run_while_not(qs->sim, usage_ready, qs, sim_now(qs->sim) + SIM_SEC_NS);
    return qs->final_pending == 0 && qs->usage_done[0] && qs->usage_done[1];
}

static bool converged(qs_t *qs)
{
    for (uint32_t t = 0; t < QS_TENANTS; t++)
        if (qs->final_usage[t].n_pending || qs->final_usage[t].n_publishing)
            return false;
    return true;
}

typedef struct qs_get {
    qs_t *qs;
    uint32_t o;
    bool done;
} qs_get_t;

static void on_row(void *arg, const meta_result_t *res)
{
    qs_get_t *g = arg;
    qs_t *qs = g->qs;
    g->done = true;
    qs->final_pending--;
    if (res->rc) {
        sim_fail(qs->sim, "final object row read failed: %s", kvmesh_errname(res->rc));
        return;
    }
    const qs_route_t *r = &qs->route[g->o];
    tn_objrow_t row = {0};
    if (res->kv.found && tn_objrow_decode(res->kv.value, res->kv.value_len, &row) != 0) {
        sim_fail(qs->sim, "object row %u does not decode", g->o);
        return;
    }
    if (!res->kv.found && (!r->found || r->tomb))
        return; /* never written, or purged with (or before) its tombstone */
    if (r->found && r->tomb && row.tomb_until_ms != r->until)
        sim_fail(qs->sim, "object %u: row records tombstone deadline %llu, the route %llu", g->o,
                 (unsigned long long)row.tomb_until_ms, (unsigned long long)r->until);
    if (!r->found && r->purged) { /* the row of a purged tombstone: deleted at its version */
        if (row.live || row.lock_op[0] || !row.tomb_until_ms ||
            !kvm_route_version_equal(&row.route_version, &r->purged_v) ||
            strcmp(row.last_op, r->purged_op) != 0)
            sim_fail(qs->sim,
                     "object %u: accounting row (live %d v %llu.%llu last %s lock '%s' D %llu) "
                     "!= its purged tombstone (v %llu.%llu op %s)",
                     g->o, row.live, (unsigned long long)row.route_version.fencing_token,
                     (unsigned long long)row.route_version.primary_sequence, row.last_op,
                     row.lock_op, (unsigned long long)row.tomb_until_ms,
                     (unsigned long long)r->purged_v.fencing_token,
                     (unsigned long long)r->purged_v.primary_sequence, r->purged_op);
        return;
    }
    bool live = r->found && !r->tomb;
    kvm_route_version_t rv = r->found ? r->version : KVM_ROUTE_VERSION_NONE;
    if (row.live != live || row.len != (live ? r->len : 0) ||
        !kvm_route_version_equal(&row.route_version, &rv) || row.lock_op[0] ||
        (r->found && strcmp(row.last_op, r->op) != 0))
        sim_fail(qs->sim,
                 "object %u: accounting row (live %d len %llu v %llu.%llu last %s lock '%s') != "
                 "route (live %d len %llu v %llu.%llu op %s)",
                 g->o, row.live, (unsigned long long)row.len,
                 (unsigned long long)row.route_version.fencing_token,
                 (unsigned long long)row.route_version.primary_sequence, row.last_op, row.lock_op,
                 live, (unsigned long long)r->len, (unsigned long long)rv.fencing_token,
                 (unsigned long long)rv.primary_sequence, r->op);
}

typedef struct qs_opget {
    qs_t *qs;
    uint32_t i;
} qs_opget_t;

static void on_opget(void *arg, const meta_result_t *res)
{
    qs_opget_t *g = arg;
    qs_t *qs = g->qs;
    qs->final_pending--;
    const qs_opinfo_t *oi = &qs->ops[g->i];
    if (res->rc) {
        sim_fail(qs->sim, "final op read failed: %s", kvmesh_errname(res->rc));
        return;
    }
    if (!res->kv.found) { /* with a short history, terminal records are purged */
        if ((oi->cas_applied || oi->abort_acked || oi->abort_refused) && qs->pg.history_ms >= 60000)
            sim_fail(qs->sim, "operation %s has no record", oi->id);
        return;
    }
    tn_op_t *op = malloc(sizeof(*op));
    KVM_ASSERT(op != NULL);
    if (tn_op_decode(res->kv.value, res->kv.value_len, op) != 0) {
        sim_fail(qs->sim, "operation %s does not decode", oi->id);
    } else if (oi->cas_applied && op->state != TN_ST_FINALIZED) {
        sim_fail(qs->sim, "operation %s published its route but ended %s", oi->id,
                 tn_state_name(op->state));
    } else if (!oi->cas_applied && op->state == TN_ST_FINALIZED) {
        sim_fail(qs->sim, "operation %s finalized without a route CAS", oi->id);
    } else if (oi->abort_refused && op->state != TN_ST_FINALIZED) {
        sim_fail(qs->sim, "operation %s: abort refused (publishing) but it ended %s", oi->id,
                 tn_state_name(op->state));
    }
    free(op);
}

static void final_checks(qs_t *qs)
{
    /* a claimed operation whose CAS failed outright keeps its object locked (no other write can
     * move the predecessor), so after convergence it must have been replayed and published */
    for (uint32_t i = 0; i < qs->n_ops && !sim_failed(qs->sim); i++)
        if (qs->ops[i].cas_failed_claimed && !qs->ops[i].cas_applied)
            sim_fail(qs->sim,
                     "operation %s was claimed, its route CAS failed outright, and it was never "
                     "replayed through the primary",
                     qs->ops[i].id);
    for (uint32_t t = 0; t < QS_TENANTS && !sim_failed(qs->sim); t++) {
        const tn_usage_t *u = &qs->final_usage[t];
        if (u->committed_bytes != qs->live_bytes[t] || u->committed_objects != qs->live_objs[t] ||
            u->pending_bytes || u->pending_objects ||
            (int64_t)u->committed_bytes != qs->cas_delta_sum[t])
            sim_fail(qs->sim,
                     "tenant %s after reconciliation: committed %llu bytes / %llu objects, "
                     "pending %llu / %llu; live routes %llu bytes / %llu objects; applied CAS "
                     "deltas sum to %lld",
                     qs->tenants[t], (unsigned long long)u->committed_bytes,
                     (unsigned long long)u->committed_objects, (unsigned long long)u->pending_bytes,
                     (unsigned long long)u->pending_objects, (unsigned long long)qs->live_bytes[t],
                     (unsigned long long)qs->live_objs[t], (long long)qs->cas_delta_sum[t]);
    }
    for (uint32_t o = 0; o < qs->objs && !sim_failed(qs->sim); o++) {
        char k[KS_KEY_CAP];
        int rc = ks_object_key(k, sizeof(k), QS_DEP, qs->tenants[obj_tenant(qs, o)],
                               obj_domain(qs, o), obj_key(qs, o));
        KVM_ASSERT(rc == 0);
        qs_get_t *g = qs_alloc(qs, sizeof(*g));
        *g = (qs_get_t){qs, o, false};
        qs->final_pending++;
        rc = meta_get(qs->world_m, k, 1000, on_row, g);
        KVM_ASSERT(rc == 0);
        sim_run_while_not(qs->sim, usage_ready, qs, sim_now(qs->sim) + SIM_SEC_NS);
    }
    for (uint32_t i = 0; i < qs->n_ops && !sim_failed(qs->sim); i++) {
        const qs_opinfo_t *oi = &qs->ops[i];
        uint32_t t = obj_tenant(qs, oi->obj);
        if (!oi->cas_applied && !oi->abort_refused)
            continue;
        char k[KS_KEY_CAP];
        int rc = ks_acct_op_key(k, sizeof(k), QS_DEP, qs->tenants[t], oi->id);
        KVM_ASSERT(rc == 0);
        qs_opget_t *g = qs_alloc(qs, sizeof(*g));
        *g = (qs_opget_t){qs, i};
        qs->final_pending++;
        rc = meta_get(qs->world_m, k, 1000, on_opget, g);
        KVM_ASSERT(rc == 0);
        sim_run_while_not(qs->sim, usage_ready, qs, sim_now(qs->sim) + SIM_SEC_NS);
    }
}

/* every 64 steps: each live runtime's tenant handle keeps its own invariants */
static int qs_invariant(void *ctx, sim_t *sim)
{
    qs_t *qs = ctx;
    if (sim_steps(sim) % 64 != 0)
        return 0;
    for (uint32_t i = 0; i < qs->n; i++) {
        qs_node_t *nd = sim_node_state(sim, i);
        if (nd && tn_check_invariants(nd->tn) != 0) {
            sim_fail(sim, "n%u: %s", i, kvmesh_last_error());
            return 1;
        }
    }
    if (tn_check_invariants(qs->prim_tn) != 0) {
        sim_fail(sim, "primary: %s", kvmesh_last_error());
        return 1;
    }
    return 0;
}

static bool nodes_idle(void *ctx)
{
    qs_t *qs = ctx;
    for (uint32_t i = 0; i < qs->n; i++) {
        qs_node_t *nd = sim_node_state(qs->sim, i);
        if (nd && nd->busy)
            return false;
    }
    return true;
}

static int qs_run(const qs_profile_t *prof, const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    unsigned bugs = 0;
    if (!strcmp(v, "abort_publishing"))
        bugs = TN_TEST_BUG_ABORT_PUBLISHING;
    else if (!strcmp(v, "no_pending"))
        bugs = TN_TEST_BUG_NO_PENDING_TERM;
    else if (!strcmp(v, "no_replay"))
        bugs = TN_TEST_BUG_NO_REPLAY;
    else if (!strcmp(v, "abort_unproven"))
        bugs = TN_TEST_BUG_ABORT_UNPROVEN;
    else if (!strcmp(v, "no_settle"))
        bugs = 0; /* scenario-side: the writer's own settling is off */
    else if (!strcmp(v, "free_held") && prof->slots)
        bugs = 0; /* scenario-side: owners free a held slot on the route lookup alone */
    else if (!strcmp(v, "no_settle") || !strcmp(v, "no_floor"))
        bugs = 0; /* scenario-side: the writer's own settling / the key's version floor is off */
    else if (!strcmp(v, "none_before_due"))
        bugs = TN_TEST_BUG_NONE_BEFORE_DUE;
    else if (!strcmp(v, "no_absent_finalize"))
        bugs = TN_TEST_BUG_NO_ABSENT_FINAL;
    else if (!strcmp(v, "no_dup_guard"))
        bugs = 0; /* scenario-side: the primary's claim takes a finalized operation as a repeat */
    else if (*v) {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (quota scenarios know abort_publishing, no_pending, "
                 "no_replay, no_settle, abort_unproven, none_before_due, no_floor, "
                 "no_absent_finalize, no_dup_guard; quota_replay_slots also free_held)",
                 v);
        return 1;
    }
    qs_t *qs = calloc(1, sizeof(*qs));
    KVM_ASSERT(qs != NULL);
    qs->prof = prof;
    qs->bugs = bugs;
    qs->no_settle = !strcmp(v, "no_settle");
    qs->free_held = !strcmp(v, "free_held");
    if (prof->slots) {
        qs->slots = calloc(QS_MAX_OPS, sizeof(*qs->slots));
        KVM_ASSERT(qs->slots != NULL);
    }
    qs->no_floor = !strcmp(v, "no_floor");
    qs->no_dup_guard = !strcmp(v, "no_dup_guard");
    /* The purge assumes the retention outlasts any request in flight (a delayed duplicate of a
     * finalized create, expecting NONE, would otherwise meet its successor's due tombstone and
     * apply again, unless the primary's claim refuses a finalized operation: quota_late_dup
     * sends such duplicates on purpose): delayed_cas delays requests up to ~850 ms. */
    uint32_t rlo = prof->delayed_cas ? 1000 : 100, rhi = prof->delayed_cas ? 1400 : 300;
    qs->pg = (qs_purge_t){.retain_lo = prof->retain_lo ? prof->retain_lo : rlo,
                          .retain_hi = prof->retain_hi ? prof->retain_hi : rhi,
                          .margin_ms = prof->margin_ms ? prof->margin_ms : 300,
                          .history_ms = prof->history_ms ? prof->history_ms : 60000};
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    qs->n = prof->writers_lo + (uint32_t)(ro->seed % 2);
    KVM_ASSERT(qs->n <= QS_MAX_NODES);
    qs->keys = prof->keys;
    qs->objs = QS_TENANTS * QS_DOMAINS * qs->keys;
    cfg.n_nodes = qs->n;
    cfg.clock_drift_max_ppm = prof->drift_ppm ? prof->drift_ppm : 10000;
    cfg.clock_skew_max_ms = 20;
    cfg.max_steps = 20000000;
    snprintf(qs->url, sizeof(qs->url), "memory://quota%llu", (unsigned long long)ro->seed);
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    qs->sim = sim;
    qs->generation = 1;
    qs->faults = true;
    snprintf(qs->tenants[0], sizeof(qs->tenants[0]), "acme");
    snprintf(qs->tenants[1], sizeof(qs->tenants[1]), "globex");
    snprintf(qs->domains[0], sizeof(qs->domains[0]), "%s", "");
    snprintf(qs->domains[1], sizeof(qs->domains[1]), "d1");
    for (uint32_t k = 0; k < qs->keys; k++)
        snprintf(qs->keynames[k], sizeof(qs->keynames[k]), "blk%u", k);
    for (uint32_t t = 0; t < QS_TENANTS; t++) {
        qs->pol[t] = (tn_policy_t){.policy_version = 1 + t,
                                   .max_bytes = sim_rand_range(sim, 2000, 5000),
                                   .max_objects = sim_rand_range(sim, 2, qs->keys + 1)};
    }
    int rc = meta_open(&qs->world_m, sim_world_env(sim), qs->url, NULL);
    KVM_ASSERT(rc == 0);
    rc = meta_open(&qs->prim_m, sim_world_env(sim), qs->url, NULL);
    KVM_ASSERT(rc == 0);
    meta_memory_set_faults(qs->prim_m,
                           &(meta_memory_faults_t){.latency_min_ms = 1, .latency_max_ms = 5});
    tn_config_t pcfg = {.deployment = QS_DEP,
                        .writer_epoch = 1000000,
                        .timeout_ms = 200,
                        .publish_ttl_ms = 60,
                        .backoff_max_ms = 400,
                        .retain_ms = qs->pg.history_ms,
                        .purge_margin_ms = qs->pg.margin_ms};
    rc = tn_new(&qs->prim_tn, sim_world_env(sim), qs->prim_m, &pcfg);
    KVM_ASSERT(rc == 0);
    qs->epoch_ctr = 0;
    qs->hist = sim_hist_new(sim, QS_MAX_OPS * ro->soak);
    sim_set_node_hooks(sim, qs_start, qs_stop, qs);
    sim_set_invariant(sim, qs_invariant, qs);
    sim_start(sim);
    sim_schedule(sim, sim_rand_range(sim, 100, 300) * SIM_MSG_NS, nemesis, qs);
    sim_schedule(sim, sim_rand_range(sim, 100, 400) * SIM_MSG_NS, failover, qs);
    if (prof->slots)
        sim_schedule(sim, sim_rand_range(sim, 10, 30) * SIM_MSG_NS, owners_tick, qs);
    uint64_t fault_end = (uint64_t)1500 * ro->soak * SIM_MSG_NS;
    sim_run_until(sim, fault_end);
    if (sim_failed(sim))
        goto out;
    /* quiet phase: no faults, no new writes; writers finish, reconciliation converges */
    qs->faults = false;
    qs->quiet = true;
    for (uint32_t i = 0; i < qs->n; i++) {
        qs_node_t *nd = sim_node_state(sim, i);
        if (nd && nd->boot_pending == 0 && nd->booted != (1u << QS_TENANTS) - 1)
            sim_crash(sim, i); /* refused a tenant: a controlled restart with the right policy */
        if (!sim_node_up(sim, i))
            sim_restart(sim, i);
    }
    for (uint32_t i = 0; i < qs->n; i++) {
        qs_node_t *nd = sim_node_state(sim, i);
        if (nd)
            meta_memory_set_faults(
                nd->m, &(meta_memory_faults_t){.latency_min_ms = 1, .latency_max_ms = 3});
    }
    sim_run_while_not(sim, nodes_idle, qs, sim_now(sim) + 2 * SIM_SEC_NS);
    uint64_t deadline = sim_now(sim) + 8 * SIM_SEC_NS;
    bool ok = false;
    while (!sim_failed(sim) && sim_now(sim) < deadline) {
        sim_run_for(sim, 200 * SIM_MSG_NS);
        if (read_usage(qs) && converged(qs) && slots_settled(qs)) {
            ok = true;
            break;
        }
    }
    if (!sim_failed(sim) && !ok) {
        sim_fail(sim,
                 "reconciliation did not converge within 8 s%s: %s pending %llu publishing %llu, "
                 "%s pending %llu publishing %llu",
                 slots_settled(qs) ? "" : " (owner slots still reserved)", qs->tenants[0],
                 (unsigned long long)qs->final_usage[0].n_pending,
                 (unsigned long long)qs->final_usage[0].n_publishing, qs->tenants[1],
                 (unsigned long long)qs->final_usage[1].n_pending,
                 (unsigned long long)qs->final_usage[1].n_publishing);
        goto out;
    }
    if (!sim_failed(sim))
        final_checks(qs);
    if (!sim_failed(sim))
        slots_final_check(qs);
out:
    sim_log(sim,
            "writes ok %llu, quota refusals %llu, aborts %llu, claims rejected %llu, fenced "
            "CAS %llu, refused replays %llu, policy refusals %llu, claimed CAS failed %llu, "
            "published again by the writer %llu, tombstones purged %llu, NONE admitted past "
            "D + M %llu, ops %u",
            (unsigned long long)qs->writes_ok, (unsigned long long)qs->refused_quota,
            (unsigned long long)qs->aborts_ok, (unsigned long long)qs->claims_rejected,
            (unsigned long long)qs->fenced, (unsigned long long)qs->degraded,
            (unsigned long long)qs->policy_refusals, (unsigned long long)qs->cas_failed_claimed,
            (unsigned long long)qs->writer_settled, (unsigned long long)qs->purges,
            (unsigned long long)qs->none_admitted, qs->n_ops);
    if (prof->late_dups)
        sim_log(sim, "late duplicates of publish requests %llu, refused as finalized %llu",
                (unsigned long long)qs->late_dups, (unsigned long long)qs->dup_refused);
    if (prof->slots)
        sim_log(sim,
                "owner slots %u: kept by the held check %llu, committed by lookup %llu, "
                "freed %llu, published by a replay %llu",
                qs->n_slots, (unsigned long long)qs->slots_kept,
                (unsigned long long)qs->slots_committed, (unsigned long long)qs->slots_freed,
                (unsigned long long)qs->replayed_slots);
    if (sim_failed(sim) && ro->verbose && ro->out)
        sim_hist_dump(qs->hist, ro->out);
    {
        uint64_t w[3] = {qs->writes_ok, qs->aborts_ok, qs->refused_quota};
        sim_trace_mix(sim, w, sizeof(w));
    }
    qs->quiet = true;
    qs->faults = false;
    qs->owners_stop = true;
    sim_set_invariant(sim, NULL, NULL);
    for (uint32_t i = 0; i < qs->n; i++)
        sim_crash(sim, i);
    /* let world events (replies, lookups) reach the closed handles, then close the primary */
    sim_run_for(sim, 2 * SIM_SEC_NS);
    pay_owed(qs); /* after a failure the world stopped before they landed */
    tn_close(qs->prim_tn);
    sim_run_for(sim, SIM_SEC_NS);
    meta_close(qs->prim_m);
    meta_close(qs->world_m);
    free(qs->owed);
    free(qs->slots);
    int out = sim_finish(sim, res);
    sim_hist_free(qs->hist);
    for (size_t i = 0; i < qs->n_allocs; i++)
        free(qs->allocs[i]);
    free(qs->allocs);
    free(qs);
    return out;
}

#define QS_SCENARIO(NAME, DESC, ...)                                                               \
    static const qs_profile_t prof_##NAME = {.name = #NAME, __VA_ARGS__};                          \
    static int run_##NAME(const sim_run_opts_t *ro, sim_result_t *res)                             \
    {                                                                                              \
        return qs_run(&prof_##NAME, ro, res);                                                      \
    }                                                                                              \
    const sim_scenario_t scen_##NAME = {.name = #NAME, .description = DESC, .run = run_##NAME};

QS_SCENARIO(quota_crash_before_cas,
            "quota: writers crash after reserve, before the route CAS; expiry aborts, publishing "
            "replays",
            .p_before_cas = 0.25, .p_delete = 0.3, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_crash_after_cas,
            "quota: writers crash after the route CAS, before finalize; reconciliation finalizes "
            "by operation id",
            .p_after_cas = 0.3, .p_delete = 0.3, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_crash_after_finalize,
            "quota: writers crash after finalize, before the reply; retries are idempotent",
            .p_after_fin = 0.3, .p_delete = 0.3, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_crash_delete_refund,
            "quota: deletes crash before/after the tombstone CAS and after finalize; the refund "
            "happens once",
            .p_before_cas = 0.2, .p_after_cas = 0.2, .p_after_fin = 0.2, .delete_windows = true,
            .p_delete = 0.6, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_delayed_cas,
            "quota: publish requests delayed across explicit abort and expiry; abort wins and the "
            "CAS is rejected, or publishing wins and is never aborted",
            .delayed_cas = true, .p_before_cas = 0.05, .p_delete = 0.3, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_concurrent,
            "quota: concurrent overwrite/delete/retry of few objects near the limits; one "
            "predecessor is refunded once",
            .p_before_cas = 0.05, .p_after_cas = 0.05, .p_after_fin = 0.05, .p_delete = 0.4,
            .keys = 1, .writers_lo = 4)
QS_SCENARIO(quota_cas_failed,
            "quota: the primary claims, then its route CAS fails outright; reconciliation replays "
            "it through the current primary with the same publish token",
            .p_cas_fails = 0.3, .p_before_cas = 0.05, .p_delete = 0.4, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_cas_failed_settle,
            "quota: the primary claims, then its route CAS fails outright; the writer publishes "
            "it again itself (same operation and publish token) while its budget lasts, "
            "reconciliation replays what is left",
            .p_cas_fails = 0.3, .writer_settles = true, .p_before_cas = 0.05, .p_after_cas = 0.05,
            .p_delete = 0.4, .keys = 3, .writers_lo = 3)
QS_SCENARIO(quota_replay_slots,
            "quota: writers crash between claim and CAS or the primary's CAS fails after its "
            "claim; owners keep the put's reserved slot while its operation may publish it, "
            "reconciliation replays the route from the claim's payload onto it",
            .slots = true, .p_cas_fails = 0.3, .p_before_cas = 0.1, .p_after_cas = 0.05,
            .p_delete = 0.3, .keys = 3, .writers_lo = 3)

QS_SCENARIO(quota_purge_reuse,
            "quota: a few keys put, removed and put again across tombstone purges (short "
            "retention, purges inside the faults): NONE admitted only past D + M, versions of a "
            "key strictly increase, absent deletes finalized, deleted rows purged",
            .p_before_cas = 0.05, .p_after_cas = 0.15, .p_after_fin = 0.05, .p_delete = 0.5,
            .p_cas_fails = 0.1, .keys = 2, .writers_lo = 3, .retain_lo = 40, .retain_hi = 120,
            .margin_ms = 60, .history_ms = 150, .drift_ppm = 2000)
QS_SCENARIO(quota_late_dup,
            "quota: retention shorter than a request's flight: duplicates of publish requests "
            "arrive after the writer finalized and a successor's tombstone is due or purged; the "
            "primary's claim refuses a finalized operation, so none applies a second time",
            .late_dups = true, .p_before_cas = 0.05, .p_after_cas = 0.1, .p_after_fin = 0.05,
            .p_delete = 0.5, .keys = 2, .writers_lo = 3, .retain_lo = 40, .retain_hi = 120,
            .margin_ms = 60, .history_ms = 3000, .drift_ppm = 2000)
