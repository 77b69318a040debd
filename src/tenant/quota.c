/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quota.c — the tenant handle and its transaction engine: policy bootstrap and every transition
 * of the quota operation state machine (reserve, claim, finalize, abort, and the reconciler's
 * backoff and purge), each one a read/compare-and-set loop over meta.h transactions.
 *
 * One engine call:
 *   read   one txn of GETs of the records the transition needs (policy, usage, object row,
 *          operation), at one revision;
 *   decide a pure function of that snapshot and the request (decide_*): a result (refusal, or
 *          an idempotent repeat), or the new records;
 *   write  one txn: compare mod_rev of every record read (absent = 0), then PUT/DEL the new
 *          records and move the due-index entry; its else branch GETs the same records, so a
 *          lost race re-decides on fresh state without another round trip.
 * A failed or indeterminate write goes back to read: the operation id makes every decision
 * idempotent, so the re-read tells whether it applied. Rounds are bounded (TN_ATTEMPTS_MAX).
 *
 * Ownership: the handle owns its calls (a list); tn_close() drops those waiting on a timer and
 * lets those inside a metadata call end at their callback without calling the user. The handle
 * is freed when no call and no auxiliary work (batch, reconciliation) remains.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/ident.h"
#include "core/util.h"
#include "tenant/tenant_int.h"

#define TN_R_POL   0
#define TN_R_QUOTA 1
#define TN_R_OBJ   2
#define TN_R_OP    3
#define TN_R_N     4

typedef struct tn_pcache {
    char tenant[TN_TENANT_CAP];
    tn_policy_rec_t rec;
} tn_pcache_t;

typedef struct tn_call tn_call_t;

/* Records this handle last read or wrote (or was handed as hints), with their mod_rev: a call
 * whose records are all here starts with its write (one round trip). Only a write may follow
 * from cached records: its compares prove them current; any other outcome is read again. */
#define TN_CACHE_N 32
typedef struct tn_centry {
    char key[KS_KEY_CAP];
    bool found;
    int64_t mod_rev;
    uint8_t *val;
    size_t len;
    uint64_t used; /* 0 = free slot */
} tn_centry_t;

struct tn {
    env_t *env;
    meta_t *m;
    tn_config_t cfg;
    char dep[KS_DEPLOYMENT_MAX + 1];
    uint64_t seq;
    tn_stats_t st;
    tn_call_t *calls; /* doubly linked */
    size_t n_calls;
    uint32_t aux;
    bool closing, recon_busy;
    tn_pcache_t pol[TN_MAX_TENANTS];
    size_t n_pol;
    tn_centry_t cache[TN_CACHE_N];
    uint64_t cache_tick;
};

struct tn_call {
    tn_t *tn;
    tn_call_t *prev, *next;
    enum tn_ck kind;
    char tenant[TN_TENANT_CAP], domain[TN_DOMAIN_CAP], key[TN_KEY_CAP], op_id[TN_OPID_CAP];
    bool have_obj, by_op;
    char k[TN_R_N][KS_KEY_CAP];
    unsigned want; /* bitmask of TN_R_* to read */
    /* request */
    tn_policy_t policy;
    bool is_delete, check_acct;
    uint64_t next_len, expected_acct;
    kvm_route_version_t expected_route, version;
    uint64_t tomb_until; /* finalize of a delete: its tombstone's purge deadline D */
    uint64_t generation, fencing_token, publish_token;
    bool cas_follows; /* claim: tn_claim_req_t.cas_follows */
    uint32_t payload_len, seen_attempts;
    uint8_t payload[TN_PAYLOAD_MAX];
    /* snapshot */
    bool found[TN_R_N];
    int64_t rev[TN_R_N];
    tn_policy_rec_t pol;
    tn_usage_t usage;
    tn_objrow_t row;
    tn_op_t op;
    /* next state */
    tn_op_t nop;
    tn_usage_t nusage;
    tn_objrow_t nrow;
    uint8_t vop[TN_OP_ENC_MAX], vquota[128], vobj[256], vpol[128];
    char k_due_old[KS_KEY_CAP], k_due_new[KS_KEY_CAP];
    /* progress */
    uint32_t attempts, conflicts;
    bool in_meta, wrote_maybe;
    bool always_cb;   /* internal callers (batch, reconciler) hear ECANCELED after tn_close */
    bool speculative; /* the snapshot came from the cache, not from a read */
    bool w_pol, w_op, w_obj, w_quota, d_op, d_obj; /* what the pending write puts/deletes */
    env_timer_id timer;
    int last_rc;
    tn_cb cb;
    tn_usage_cb ucb;
    void *arg;
};

/* ---- handle --------------------------------------------------------------------------------- */

int tn_new(tn_t **out, env_t *env, meta_t *m, const tn_config_t *cfg)
{
    *out = NULL;
    if (!env || !m || !cfg)
        return kvm_errf(KVMESH_EINVAL, "tn_new: env, meta and config are required");
    int rc = ks_validate_deployment(cfg->deployment);
    if (rc)
        return rc;
    if (cfg->writer_epoch == 0)
        return kvm_errf(KVMESH_EINVAL, "tn_new: writer_epoch must be >= 1 (the runtime's epoch)");
    tn_t *tn = calloc(1, sizeof(*tn));
    if (!tn)
        return kvm_errf(KVMESH_ENOMEM, "tn_new: out of memory");
    tn->env = env;
    tn->m = m;
    tn->cfg = *cfg;
    snprintf(tn->dep, sizeof(tn->dep), "%s", cfg->deployment);
    tn->cfg.deployment = tn->dep;
    if (!tn->cfg.pending_ttl_ms)
        tn->cfg.pending_ttl_ms = 30000;
    if (!tn->cfg.publish_ttl_ms)
        tn->cfg.publish_ttl_ms = 10000;
    if (!tn->cfg.backoff_max_ms)
        tn->cfg.backoff_max_ms = 60000;
    if (!tn->cfg.retain_ms)
        tn->cfg.retain_ms = 600000;
    if (!tn->cfg.purge_margin_ms)
        tn->cfg.purge_margin_ms = 1000;
    *out = tn;
    return 0;
}

static void maybe_free(tn_t *tn)
{
    if (tn->closing && tn->n_calls == 0 && tn->aux == 0) {
        for (size_t i = 0; i < TN_CACHE_N; i++)
            free(tn->cache[i].val);
        free(tn);
    }
}

/* ---- record cache --------------------------------------------------------------------------- */

static tn_centry_t *cache_find(tn_t *tn, const char *key)
{
    for (size_t i = 0; i < TN_CACHE_N; i++)
        if (tn->cache[i].used && strcmp(tn->cache[i].key, key) == 0)
            return &tn->cache[i];
    return NULL;
}

static void cache_put(tn_t *tn, const char *key, bool found, int64_t mod_rev, const uint8_t *val,
                      size_t len)
{
    tn_centry_t *e = cache_find(tn, key);
    if (!e) {
        e = &tn->cache[0];
        for (size_t i = 1; i < TN_CACHE_N && e->used; i++)
            if (tn->cache[i].used < e->used)
                e = &tn->cache[i];
        snprintf(e->key, sizeof(e->key), "%s", key);
    }
    uint8_t *nv = NULL;
    if (found && len) {
        nv = malloc(len);
        if (!nv) { /* a cache is optional */
            free(e->val);
            *e = (tn_centry_t){0};
            return;
        }
        memcpy(nv, val, len);
    }
    free(e->val);
    e->val = nv;
    e->len = found ? len : 0;
    e->found = found;
    e->mod_rev = found ? mod_rev : 0;
    e->used = ++tn->cache_tick;
}

static void cache_drop(tn_t *tn, const char *key)
{
    tn_centry_t *e = cache_find(tn, key);
    if (e) {
        free(e->val);
        *e = (tn_centry_t){0};
    }
}

static void call_unlink_free(tn_call_t *c)
{
    tn_t *tn = c->tn;
    if (c->prev)
        c->prev->next = c->next;
    else
        tn->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    tn->n_calls--;
    free(c);
}

static void call_done(tn_call_t *c, int rc, const tn_op_t *op, const tn_usage_t *u, bool repeated);

void tn_close(tn_t *tn)
{
    if (!tn)
        return;
    KVM_ASSERT(!tn->closing);
    tn->closing = true;
    tn->aux++; /* keeps tn alive through the callbacks below */
    for (;;) {
        tn_call_t *c = tn->calls;
        while (c && c->in_meta)
            c = c->next;
        if (!c)
            break;
        /* waiting on a retry timer: end it now */
        env_timer_cancel(tn->env, c->timer);
        c->timer = 0;
        call_done(c, KVMESH_ECANCELED, NULL, NULL, false);
    }
    tn_aux_put(tn);
}

void tn_aux_get(tn_t *tn)
{
    tn->aux++;
}

void tn_aux_put(tn_t *tn)
{
    KVM_ASSERT(tn->aux > 0);
    tn->aux--;
    maybe_free(tn);
}

bool tn_closing(const tn_t *tn)
{
    return tn->closing;
}

env_t *tn_env(const tn_t *tn)
{
    return tn->env;
}

meta_t *tn_meta(const tn_t *tn)
{
    return tn->m;
}

const tn_config_t *tn_cfg(const tn_t *tn)
{
    return &tn->cfg;
}

const char *tn_dep(const tn_t *tn)
{
    return tn->dep;
}

tn_stats_t *tn_stats_mut(tn_t *tn)
{
    return &tn->st;
}

bool *tn_recon_busy(tn_t *tn)
{
    return &tn->recon_busy;
}

void tn_next_op_id(tn_t *tn, char out[TN_OPID_CAP])
{
    ks_opid_format(out, tn->cfg.writer_epoch, ++tn->seq);
}

void tn_get_stats(const tn_t *tn, tn_stats_t *out)
{
    *out = tn->st;
}

int tn_check_invariants(const tn_t *tn)
{
    size_t n = 0;
    for (const tn_call_t *c = tn->calls; c; c = c->next) {
        if (c->tn != tn || (c->next && c->next->prev != c))
            return kvm_errf(KVMESH_ECORRUPT, "tenant: call list corrupt");
        if (c->attempts > TN_ATTEMPTS_MAX + 1)
            return kvm_errf(KVMESH_ECORRUPT, "tenant: call past its round budget");
        n++;
    }
    if (n != tn->n_calls)
        return kvm_errf(KVMESH_ECORRUPT, "tenant: %zu calls listed, %zu counted", n, tn->n_calls);
    if (tn->n_pol > TN_MAX_TENANTS)
        return kvm_errf(KVMESH_ECORRUPT, "tenant: policy cache overflow");
    if (tn->st.reserve_refusals > tn->st.reserves + tn->st.reserve_refusals)
        return kvm_errf(KVMESH_ECORRUPT, "tenant: counters wrapped");
    return 0;
}

static const tn_policy_rec_t *pcache_find(const tn_t *tn, const char *tenant)
{
    for (size_t i = 0; i < tn->n_pol; i++)
        if (strcmp(tn->pol[i].tenant, tenant) == 0)
            return &tn->pol[i].rec;
    return NULL;
}

static void pcache_put(tn_t *tn, const char *tenant, const tn_policy_rec_t *rec)
{
    for (size_t i = 0; i < tn->n_pol; i++)
        if (strcmp(tn->pol[i].tenant, tenant) == 0) {
            tn->pol[i].rec = *rec;
            return;
        }
    KVM_ASSERT(tn->n_pol < TN_MAX_TENANTS);
    snprintf(tn->pol[tn->n_pol].tenant, TN_TENANT_CAP, "%s", tenant);
    tn->pol[tn->n_pol++].rec = *rec;
}

/* ---- call setup ----------------------------------------------------------------------------- */

static int copy_scope(tn_call_t *c, const char *tenant, const char *domain, const char *key)
{
    if (!tenant)
        return kvm_errf(KVMESH_EBADTENANT, "tenant is required");
    int rc = kvm_ident_check_tenant(tenant, strlen(tenant));
    if (rc)
        return rc;
    if (domain && domain[0] && (rc = kvm_ident_check_domain(domain, strlen(domain))) != 0)
        return rc;
    if (key && (rc = kvm_ident_check_key(key, strlen(key))) != 0)
        return rc;
    snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
    snprintf(c->domain, sizeof(c->domain), "%s", domain ? domain : "");
    if (key) {
        snprintf(c->key, sizeof(c->key), "%s", key);
        c->have_obj = true;
    }
    return 0;
}

static int build_keys(tn_call_t *c)
{
    const char *dep = c->tn->dep;
    int rc = 0;
    if (!rc && (c->want & (1u << TN_R_POL)))
        rc = ks_tenant_policy_key(c->k[TN_R_POL], KS_KEY_CAP, dep, c->tenant);
    if (!rc && (c->want & (1u << TN_R_QUOTA)))
        rc = ks_quota_key(c->k[TN_R_QUOTA], KS_KEY_CAP, dep, c->tenant);
    if (!rc && (c->want & (1u << TN_R_OP)))
        rc = ks_acct_op_key(c->k[TN_R_OP], KS_KEY_CAP, dep, c->tenant, c->op_id);
    if (!rc && c->have_obj && (c->want & (1u << TN_R_OBJ)))
        rc = ks_object_key(c->k[TN_R_OBJ], KS_KEY_CAP, dep, c->tenant, c->domain, c->key);
    return rc;
}

static unsigned reads_of(enum tn_ck kind)
{
    switch (kind) {
    case TN_CK_BOOT:
        return 1u << TN_R_POL;
    case TN_CK_RESERVE:
        return 1u << TN_R_POL | 1u << TN_R_QUOTA | 1u << TN_R_OBJ | 1u << TN_R_OP;
    case TN_CK_CLAIM:
        return 1u << TN_R_QUOTA | 1u << TN_R_OP;
    case TN_CK_FINALIZE:
    case TN_CK_ABORT:
    case TN_CK_ABORT_SUPERSEDED:
        return 1u << TN_R_QUOTA | 1u << TN_R_OBJ | 1u << TN_R_OP;
    case TN_CK_USAGE:
        return 1u << TN_R_QUOTA;
    case TN_CK_GETOP:
    case TN_CK_RESCHED:
        return 1u << TN_R_OP;
    case TN_CK_PURGE: /* the object row only for a finalized delete (step 6 of the purge) */
        return 1u << TN_R_OP | 1u << TN_R_OBJ;
    }
    return 0;
}

static tn_call_t *call_new(tn_t *tn, enum tn_ck kind, tn_cb cb, void *arg)
{
    tn_call_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->tn = tn;
    c->kind = kind;
    c->want = reads_of(kind);
    c->cb = cb;
    c->arg = arg;
    return c;
}

static void call_start(tn_call_t *c);

static int call_submit(tn_call_t *c)
{
    tn_t *tn = c->tn;
    int rc = build_keys(c);
    if (rc) {
        free(c);
        return rc;
    }
    c->next = tn->calls;
    if (tn->calls)
        tn->calls->prev = c;
    tn->calls = c;
    tn->n_calls++;
    call_start(c);
    return 0;
}

/* ---- finishing ------------------------------------------------------------------------------ */

static void call_done(tn_call_t *c, int rc, const tn_op_t *op, const tn_usage_t *u, bool repeated)
{
    tn_t *tn = c->tn;
    if (rc && rc != KVMESH_ECANCELED)
        tn->st.last_error = rc;
    if (rc == KVMESH_ECONFLICT)
        tn->st.conflicts++;
    c->in_meta = true; /* a tn_close() inside the callback must not free this call */
    bool deliver = !tn->closing || c->always_cb;
    if (deliver && c->ucb) {
        tn_usage_t z = {0};
        c->ucb(c->arg, rc, u ? u : &z);
    } else if (deliver && c->cb) {
        tn_op_view_t v = {.op = op, .repeated = repeated};
        if (u)
            v.usage = *u;
        c->cb(c->arg, rc, &v);
    }
    call_unlink_free(c);
    maybe_free(tn);
}

/* ---- decisions (pure over the snapshot) ----------------------------------------------------- */

enum dec { DEC_DONE, DEC_WRITE, DEC_REREAD };

typedef struct decision {
    enum dec d;
    int rc;
    bool repeated;
    const tn_op_t *op; /* view */
    /* writes */
    bool put_op, put_obj, del_obj, put_quota, put_pol, del_op;
    bool del_due_old, put_due_new;
} decision_t;

static uint64_t now_ms(const tn_call_t *c)
{
    return env_wall_ms(c->tn->env);
}

static int due_key(tn_call_t *c, char *out, const tn_op_t *op)
{
    const char *st = tn_state_is_terminal(op->state) ? "done" : tn_state_name(op->state);
    return ks_acct_due_key(out, KS_KEY_CAP, c->tn->dep, c->tenant, st, op->deadline_ms, op->id);
}

static bool same_object(const tn_call_t *c, const tn_op_t *op)
{
    return strcmp(op->tenant, c->tenant) == 0 && strcmp(op->domain, c->domain) == 0 &&
           strcmp(op->key, c->key) == 0;
}

/* Records that disagree: from the cache (mixed revisions) they are re-read; from a read (one
 * revision) they are corrupt. */
static void snapshot_bad(tn_call_t *c, decision_t *d, const char *what)
{
    d->d = DEC_DONE;
    d->op = NULL;
    d->rc = kvm_errf(KVMESH_ECORRUPT, "tenant '%s', operation %s: %s", c->tenant, c->op_id, what);
}

static void decide_boot(tn_call_t *c, decision_t *d)
{
    tn_policy_rec_t want;
    tn_policy_record(&c->policy, &want);
    if (!c->found[TN_R_POL]) {
        c->pol = want;
        d->d = DEC_WRITE;
        d->put_pol = true;
        return;
    }
    d->d = DEC_DONE;
    d->rc = tn_policy_match(&c->pol, &c->policy, c->tenant);
    d->repeated = true;
    if (d->rc == 0)
        pcache_put(c->tn, c->tenant, &c->pol);
}

static int check_fits(tn_call_t *c, const char *what, uint64_t committed, uint64_t pending,
                      uint64_t pos, uint64_t limit)
{
    bool no_pending = c->tn->cfg.test_bugs & TN_TEST_BUG_NO_PENDING_TERM;
    uint64_t p = no_pending ? 0 : pending;
    if (committed > limit || p > limit - committed || pos > limit - committed - p)
        return kvm_errf(KVMESH_EQUOTA,
                        "tenant '%s': %s quota exceeded: committed %llu + pending %llu + %llu "
                        "requested > max_%s %llu",
                        c->tenant, what, (unsigned long long)committed, (unsigned long long)pending,
                        (unsigned long long)pos, what, (unsigned long long)limit);
    return 0;
}

/* A put expecting NONE against a row deleted at tombstone V with deadline D: admitted only when
 * D != 0 and now >= D + M, so that tombstone V is due at any node applying the CAS later (its
 * clock reads at least D + M - skew >= D), or purged: the route CAS takes both as NONE. Before
 * that the NONE may be stale (the key was absent when looked up, then created and deleted). The
 * operation keeps expected_route = V: its predecessor is "tombstone V or nothing". */
static bool none_admitted(const tn_call_t *c, const tn_objrow_t *row)
{
    if (c->is_delete || !kvm_route_version_is_none(&c->expected_route) || row->live ||
        row->acct_version == 0)
        return false;
    if (c->tn->cfg.test_bugs & TN_TEST_BUG_NONE_BEFORE_DUE) /* the withdrawn rule */
        return true;
    uint64_t d = row->tomb_until_ms;
    return d != 0 && now_ms(c) >= d + c->tn->cfg.purge_margin_ms;
}

static void decide_reserve(tn_call_t *c, decision_t *d)
{
    d->d = DEC_DONE;
    if (c->found[TN_R_OP]) { /* a repeat: report the current state */
        if (!same_object(c, &c->op)) {
            d->rc = kvm_errf(KVMESH_EINVAL, "operation %s belongs to another object", c->op_id);
            return;
        }
        d->op = &c->op;
        d->repeated = true;
        d->rc = c->op.state == TN_ST_ABORTED ? KVMESH_ECANCELED : 0;
        return;
    }
    const tn_policy_rec_t *mine = pcache_find(c->tn, c->tenant);
    if (!c->found[TN_R_POL] || !mine) {
        d->rc = kvm_errf(KVMESH_EINCOMPAT,
                         "tenant '%s' has no bootstrapped policy %s; configure it and bootstrap",
                         c->tenant, c->found[TN_R_POL] ? "in this runtime" : "in metadata");
        return;
    }
    if (mine->fingerprint != c->pol.fingerprint) {
        d->rc = kvm_errf(KVMESH_EINCOMPAT,
                         "tenant '%s': stored policy fingerprint %016llx differs from this "
                         "runtime's %016llx (policy changed without a controlled restart)",
                         c->tenant, (unsigned long long)c->pol.fingerprint,
                         (unsigned long long)mine->fingerprint);
        return;
    }
    tn_objrow_t row = c->found[TN_R_OBJ] ? c->row : (tn_objrow_t){0};
    if (row.lock_op[0]) {
        d->rc = kvm_errf(KVMESH_EAGAIN, "object is locked by accounting operation %s; retry later",
                         row.lock_op);
        return;
    }
    if (!kvm_route_version_equal(&row.route_version, &c->expected_route) &&
        !none_admitted(c, &row)) {
        d->rc = kvm_errf(KVMESH_ECONFLICT,
                         "expected predecessor route version (%llu,%llu) but accounting is at "
                         "(%llu,%llu); look the route up again",
                         (unsigned long long)c->expected_route.fencing_token,
                         (unsigned long long)c->expected_route.primary_sequence,
                         (unsigned long long)row.route_version.fencing_token,
                         (unsigned long long)row.route_version.primary_sequence);
        return;
    }
    if (c->check_acct && row.acct_version != c->expected_acct) {
        d->rc =
            kvm_errf(KVMESH_ECONFLICT, "expected accounting version %llu, found %llu",
                     (unsigned long long)c->expected_acct, (unsigned long long)row.acct_version);
        return;
    }
    tn_op_t *op = &c->nop;
    memset(op, 0, sizeof(*op));
    snprintf(op->id, sizeof(op->id), "%s", c->op_id);
    snprintf(op->tenant, sizeof(op->tenant), "%s", c->tenant);
    snprintf(op->domain, sizeof(op->domain), "%s", c->domain);
    snprintf(op->key, sizeof(op->key), "%s", c->key);
    op->expected_route = row.route_version;
    op->expected_acct = row.acct_version;
    op->writer_epoch = c->tn->cfg.writer_epoch;
    if (c->is_delete) {
        if (!row.live) {
            d->rc = kvm_errf(KVMESH_ENOENT, "nothing to delete: the object has no committed "
                                            "accounting");
            return;
        }
        op->kind = TN_KIND_DELETE;
        op->delta_bytes = -(int64_t)row.len;
        op->delta_objects = -1;
    } else {
        if (c->next_len > c->pol.max_bytes) {
            d->rc = kvm_errf(KVMESH_ETOOBIG,
                             "tenant '%s': an object of %llu bytes exceeds max_bytes %llu; no "
                             "eviction can admit it",
                             c->tenant, (unsigned long long)c->next_len,
                             (unsigned long long)c->pol.max_bytes);
            return;
        }
        op->kind = row.live ? TN_KIND_OVERWRITE : TN_KIND_CREATE;
        op->next_len = c->next_len;
        op->delta_bytes = (int64_t)c->next_len - (row.live ? (int64_t)row.len : 0);
        op->delta_objects = row.live ? 0 : 1;
    }
    tn_usage_t u = c->found[TN_R_QUOTA] ? c->usage : (tn_usage_t){0};
    int rc = check_fits(c, "bytes", u.committed_bytes, u.pending_bytes, tn_pos(op->delta_bytes),
                        c->pol.max_bytes);
    if (!rc)
        rc = check_fits(c, "objects", u.committed_objects, u.pending_objects,
                        tn_pos(op->delta_objects), c->pol.max_objects);
    if (rc) {
        if (!c->speculative)
            c->tn->st.reserve_refusals++;
        d->rc = rc;
        return;
    }
    op->state = TN_ST_NONE;
    tn_op_set_state(op, TN_ST_PENDING);
    op->deadline_ms = now_ms(c) + c->tn->cfg.pending_ttl_ms;
    c->nrow = row;
    snprintf(c->nrow.lock_op, sizeof(c->nrow.lock_op), "%s", op->id);
    c->nusage = u;
    c->nusage.pending_bytes += tn_pos(op->delta_bytes);
    c->nusage.pending_objects += tn_pos(op->delta_objects);
    c->nusage.n_pending++;
    c->nusage.policy_version = c->pol.policy_version;
    d->d = DEC_WRITE;
    d->op = op;
    d->put_op = d->put_obj = d->put_quota = d->put_due_new = true;
}

static bool claim_same(const tn_call_t *c, const tn_op_t *op)
{
    return op->publish_token == c->publish_token && op->payload_len == c->payload_len &&
           op->payload_fp == kvm_checksum(c->payload, c->payload_len);
}

static void decide_claim(tn_call_t *c, decision_t *d)
{
    d->d = DEC_DONE;
    if (!c->found[TN_R_OP]) {
        d->rc = kvm_errf(KVMESH_ENOENT, "no accounting operation %s: reserve first", c->op_id);
        return;
    }
    tn_op_t *cur = &c->op;
    d->op = cur;
    if (c->have_obj && !same_object(c, cur)) {
        d->rc = kvm_errf(KVMESH_EINVAL, "operation %s belongs to another object", c->op_id);
        return;
    }
    switch (cur->state) {
    case TN_ST_ABORTED:
        d->rc = kvm_errf(KVMESH_ECANCELED,
                         "operation %s was aborted: the route CAS must be "
                         "rejected",
                         c->op_id);
        return;
    case TN_ST_FINALIZED:
        d->repeated = true;
        if (c->cas_follows) { /* its CAS applied once: this one is a delayed duplicate */
            d->rc = kvm_errf(KVMESH_ECONFLICT,
                             "operation %s is finalized: its route CAS applied once, and a CAS "
                             "still in flight for it is a duplicate that must not apply again",
                             c->op_id);
            return;
        }
        d->rc = claim_same(c, cur) ? 0
                                   : kvm_errf(KVMESH_ECONFLICT,
                                              "operation %s is finalized under another publish "
                                              "token",
                                              c->op_id);
        return;
    case TN_ST_PUBLISHING:
        if (!claim_same(c, cur)) {
            d->rc = kvm_errf(KVMESH_ECONFLICT,
                             "operation %s is publishing under another publish token", c->op_id);
            return;
        }
        if (cur->generation == c->generation && cur->fencing_token == c->fencing_token &&
            kvm_route_version_equal(&cur->next_version, &c->version)) {
            d->repeated = true;
            return;
        }
        break;
    case TN_ST_PENDING:
        break;
    case TN_ST_NONE:
        d->rc = kvm_errf(KVMESH_ECORRUPT, "operation %s has no state", c->op_id);
        return;
    }
    if (kvm_route_version_cmp(&c->version, &cur->expected_route) <= 0) {
        d->rc = kvm_errf(KVMESH_EINVAL, "claim: next route version must follow the predecessor");
        return;
    }
    tn_op_t *op = &c->nop;
    *op = *cur;
    tn_op_set_state(op, TN_ST_PUBLISHING);
    op->generation = c->generation;
    op->fencing_token = c->fencing_token;
    op->next_version = c->version;
    op->publish_token = c->publish_token;
    op->payload_len = c->payload_len;
    memcpy(op->payload, c->payload, c->payload_len);
    op->payload_fp = kvm_checksum(c->payload, c->payload_len);
    op->deadline_ms = now_ms(c) + c->tn->cfg.publish_ttl_ms;
    c->nusage = c->found[TN_R_QUOTA] ? c->usage : (tn_usage_t){0};
    if (cur->state == TN_ST_PENDING) {
        if (c->nusage.n_pending == 0) {
            snapshot_bad(c, d, "no pending operation counted");
            return;
        }
        c->nusage.n_pending--;
        c->nusage.n_publishing++;
        d->put_quota = true;
    }
    d->d = DEC_WRITE;
    d->op = op;
    d->put_op = d->del_due_old = d->put_due_new = true;
}

/* The common start of finalize and abort: the operation exists, its object row has been read
 * (else DEC_REREAD) and belongs to it. Returns the operation, or NULL with d decided. */
static tn_op_t *decide_existing_op(tn_call_t *c, decision_t *d)
{
    d->d = DEC_DONE;
    if (!c->found[TN_R_OP]) {
        d->rc = kvm_errf(KVMESH_ENOENT, "no accounting operation %s", c->op_id);
        return NULL;
    }
    tn_op_t *cur = &c->op;
    d->op = cur;
    if (!c->have_obj) {
        d->d = DEC_REREAD;
        return NULL;
    }
    if (!same_object(c, cur)) {
        d->rc = kvm_errf(KVMESH_EINVAL, "operation %s belongs to another object", c->op_id);
        return NULL;
    }
    return cur;
}

static void decide_finalize(tn_call_t *c, decision_t *d)
{
    tn_op_t *cur = decide_existing_op(c, d);
    if (cur == NULL)
        return;
    switch (cur->state) {
    case TN_ST_ABORTED:
        d->rc = kvm_errf(KVMESH_ECANCELED, "operation %s was aborted; it cannot be finalized",
                         c->op_id);
        return;
    case TN_ST_PENDING:
        d->rc =
            kvm_errf(KVMESH_ECONFLICT, "operation %s was never claimed for publication", c->op_id);
        return;
    case TN_ST_FINALIZED:
    case TN_ST_PUBLISHING:
        if (!kvm_route_version_equal(&cur->next_version, &c->version)) {
            d->rc = kvm_errf(KVMESH_ECONFLICT,
                             "operation %s publishes version (%llu,%llu), not (%llu,%llu)",
                             c->op_id, (unsigned long long)cur->next_version.fencing_token,
                             (unsigned long long)cur->next_version.primary_sequence,
                             (unsigned long long)c->version.fencing_token,
                             (unsigned long long)c->version.primary_sequence);
            return;
        }
        if (cur->state == TN_ST_FINALIZED) {
            d->repeated = true;
            return;
        }
        break;
    case TN_ST_NONE:
        d->rc = KVMESH_ECORRUPT;
        return;
    }
    tn_objrow_t row = c->found[TN_R_OBJ] ? c->row : (tn_objrow_t){0};
    /* the lock kept the row unchanged since reserve: the derived delta still holds */
    int64_t want_db = cur->kind == TN_KIND_DELETE
                          ? -(int64_t)row.len
                          : (int64_t)cur->next_len - (row.live ? (int64_t)row.len : 0);
    if (strcmp(row.lock_op, cur->id) != 0 || row.acct_version != cur->expected_acct ||
        want_db != cur->delta_bytes || (cur->kind == TN_KIND_CREATE) == row.live) {
        d->rc = kvm_errf(KVMESH_ECORRUPT,
                         "operation %s: object row no longer matches its reservation (lock '%s')",
                         c->op_id, row.lock_op);
        return;
    }
    tn_op_t *op = &c->nop;
    *op = *cur;
    tn_op_set_state(op, TN_ST_FINALIZED);
    op->deadline_ms = now_ms(c) + c->tn->cfg.retain_ms;
    tn_usage_t u = c->found[TN_R_QUOTA] ? c->usage : (tn_usage_t){0};
    uint64_t pb = tn_pos(cur->delta_bytes), po = tn_pos(cur->delta_objects);
    if (u.pending_bytes < pb || u.pending_objects < po || u.n_publishing == 0) {
        snapshot_bad(c, d, "pending usage below the operation's charge");
        return;
    }
    u.pending_bytes -= pb;
    u.pending_objects -= po;
    u.n_publishing--;
    u.committed_bytes = (uint64_t)((int64_t)u.committed_bytes + cur->delta_bytes);
    u.committed_objects = (uint64_t)((int64_t)u.committed_objects + cur->delta_objects);
    c->nusage = u;
    c->nrow = row;
    c->nrow.acct_version++;
    c->nrow.live = cur->kind != TN_KIND_DELETE;
    c->nrow.len = cur->next_len;
    c->nrow.route_version = cur->next_version;
    c->nrow.tomb_until_ms = cur->kind == TN_KIND_DELETE ? c->tomb_until : 0;
    snprintf(c->nrow.last_op, sizeof(c->nrow.last_op), "%s", cur->id);
    c->nrow.lock_op[0] = '\0';
    d->d = DEC_WRITE;
    d->op = op;
    d->put_op = d->put_obj = d->put_quota = d->del_due_old = d->put_due_new = true;
}

/* PUBLISHING -> ABORTED is allowed only to the reconciler (TN_CK_ABORT_SUPERSEDED) with the
 * proof its exact lookup found: a route that does not carry the operation at a version above
 * the operation's predecessor (c->version). Versions of a key only grow under fencing, so no
 * CAS expecting that predecessor (the writer's, a settling retry, a replay) can apply again;
 * this call's write compares the operation record it read. */
static bool superseded_proven(const tn_call_t *c, const tn_op_t *cur)
{
    return c->kind == TN_CK_ABORT_SUPERSEDED && cur->state == TN_ST_PUBLISHING &&
           kvm_route_version_cmp(&c->version, &cur->expected_route) > 0;
}

static void decide_abort(tn_call_t *c, decision_t *d)
{
    tn_op_t *cur = decide_existing_op(c, d);
    if (cur == NULL)
        return;
    bool bug = (c->tn->cfg.test_bugs & TN_TEST_BUG_ABORT_PUBLISHING) != 0;
    switch (cur->state) {
    case TN_ST_ABORTED:
        d->repeated = true;
        return;
    case TN_ST_FINALIZED:
        d->rc =
            kvm_errf(KVMESH_ECONFLICT, "operation %s is finalized; it cannot be aborted", c->op_id);
        return;
    case TN_ST_PUBLISHING:
        if (superseded_proven(c, cur))
            break; /* the guarded edge: no CAS with this predecessor can apply any more */
        if (!bug) {
            d->rc = kvm_errf(KVMESH_ECONFLICT,
                             "operation %s is publishing (in doubt); only finalize or "
                             "reconciliation may end it",
                             c->op_id);
            return;
        }
        break;
    case TN_ST_PENDING:
        break;
    case TN_ST_NONE:
        d->rc = KVMESH_ECORRUPT;
        return;
    }
    tn_op_t *op = &c->nop;
    *op = *cur;
    if (cur->state == TN_ST_PUBLISHING && !superseded_proven(c, cur))
        op->state = TN_ST_ABORTED; /* TN_TEST_BUG_ABORT_PUBLISHING: an unguarded edge */
    else
        tn_op_set_state(op, TN_ST_ABORTED);
    op->deadline_ms = now_ms(c) + c->tn->cfg.retain_ms;
    tn_usage_t u = c->found[TN_R_QUOTA] ? c->usage : (tn_usage_t){0};
    uint64_t pb = tn_pos(cur->delta_bytes), po = tn_pos(cur->delta_objects);
    if (u.pending_bytes < pb || u.pending_objects < po ||
        (cur->state == TN_ST_PENDING ? u.n_pending : u.n_publishing) == 0) {
        snapshot_bad(c, d, "pending usage below the operation's charge");
        return;
    }
    u.pending_bytes -= pb;
    u.pending_objects -= po;
    if (cur->state == TN_ST_PENDING)
        u.n_pending--;
    else
        u.n_publishing--;
    c->nusage = u;
    tn_objrow_t row = c->found[TN_R_OBJ] ? c->row : (tn_objrow_t){0};
    if (strcmp(row.lock_op, cur->id) == 0) {
        c->nrow = row;
        c->nrow.lock_op[0] = '\0';
        if (c->nrow.acct_version == 0)
            d->del_obj = true; /* the row only existed for this reservation */
        else
            d->put_obj = true;
    }
    d->d = DEC_WRITE;
    d->op = op;
    d->put_op = d->put_quota = d->del_due_old = d->put_due_new = true;
}

static void decide_resched(tn_call_t *c, decision_t *d)
{
    d->d = DEC_DONE;
    if (!c->found[TN_R_OP]) {
        d->rc = KVMESH_ENOENT;
        return;
    }
    d->op = &c->op;
    if (c->op.state != TN_ST_PUBLISHING || c->op.recon_attempts != c->seen_attempts) {
        d->repeated = true; /* someone else moved it on */
        return;
    }
    tn_op_t *op = &c->nop;
    *op = c->op;
    tn_op_set_state(op, TN_ST_PUBLISHING);
    op->recon_attempts++;
    uint64_t back = c->tn->cfg.publish_ttl_ms;
    for (uint32_t i = 1; i < op->recon_attempts && back < c->tn->cfg.backoff_max_ms; i++)
        back *= 2;
    back = KVM_MIN(back, (uint64_t)c->tn->cfg.backoff_max_ms);
    op->deadline_ms = now_ms(c) + back;
    d->d = DEC_WRITE;
    d->op = op;
    d->put_op = d->del_due_old = d->put_due_new = true;
}

/* The deleted row is still this delete's own (nothing finalized or locked it since). */
static bool row_is_deletes(const tn_call_t *c)
{
    const tn_objrow_t *row = &c->row;
    return c->found[TN_R_OBJ] && !row->live && !row->lock_op[0] && row->tomb_until_ms != 0 &&
           strcmp(row->last_op, c->op.id) == 0 && same_object(c, &c->op);
}

/* Removes a terminal record past retention. A finalized delete whose row is still its own is
 * removed with that row once its tombstone's D + M has passed (the route is then "tombstone due
 * or absent", which a put expecting NONE matches; a stale expected V finds no row: ECONFLICT);
 * before D + M its done entry moves to D + M. Rows with D = 0 stay. */
static void decide_purge(tn_call_t *c, decision_t *d)
{
    d->d = DEC_DONE;
    if (!c->found[TN_R_OP]) {
        d->repeated = true;
        return;
    }
    d->op = &c->op;
    uint64_t now = now_ms(c);
    if (!tn_state_is_terminal(c->op.state) || c->op.deadline_ms > now) {
        d->repeated = true;
        return;
    }
    bool fin_delete = c->op.state == TN_ST_FINALIZED && c->op.kind == TN_KIND_DELETE;
    if (fin_delete && !c->have_obj) {
        d->d = DEC_REREAD;
        return;
    }
    d->d = DEC_WRITE;
    d->del_op = d->del_due_old = true;
    if (!fin_delete || !row_is_deletes(c))
        return;
    uint64_t due = c->row.tomb_until_ms + c->tn->cfg.purge_margin_ms;
    if (now >= due) {
        d->del_obj = true;
        return;
    }
    c->nop = c->op; /* not yet: come back at D + M */
    c->nop.deadline_ms = due;
    d->del_op = false;
    d->put_op = d->put_due_new = true;
}

static void decide(tn_call_t *c, decision_t *d)
{
    memset(d, 0, sizeof(*d));
    switch (c->kind) {
    case TN_CK_BOOT:
        decide_boot(c, d);
        return;
    case TN_CK_RESERVE:
        decide_reserve(c, d);
        return;
    case TN_CK_CLAIM:
        decide_claim(c, d);
        return;
    case TN_CK_FINALIZE:
        decide_finalize(c, d);
        return;
    case TN_CK_ABORT:
    case TN_CK_ABORT_SUPERSEDED:
        decide_abort(c, d);
        return;
    case TN_CK_USAGE:
        d->d = DEC_DONE;
        return;
    case TN_CK_GETOP:
        d->d = DEC_DONE;
        d->rc = c->found[TN_R_OP] ? 0 : KVMESH_ENOENT;
        d->op = c->found[TN_R_OP] ? &c->op : NULL;
        return;
    case TN_CK_RESCHED:
        decide_resched(c, d);
        return;
    case TN_CK_PURGE:
        decide_purge(c, d);
        return;
    }
}

/* ---- the read / write loop ------------------------------------------------------------------ */

static void call_read(tn_call_t *c);
static void on_write(void *arg, const meta_result_t *res);

static void retry_cb(void *arg)
{
    tn_call_t *c = arg;
    c->timer = 0;
    call_read(c);
}

static void call_retry(tn_call_t *c, int rc, bool backoff)
{
    c->last_rc = rc;
    if (++c->attempts > TN_ATTEMPTS_MAX) {
        int out = rc ? rc : kvm_errf(KVMESH_ECONFLICT, "tenant quota: contention; retry");
        if (c->wrote_maybe && out != KVMESH_ECONFLICT)
            out = KVMESH_EINDETERMINATE;
        call_done(c, out, NULL, NULL, false);
        return;
    }
    if (!backoff) {
        call_read(c);
        return;
    }
    uint64_t ms = 1ull << KVM_MIN(c->attempts, 5u);
    uint64_t d = (ms * 1000000ull / 2) + env_rand_u64(c->tn->env) % (ms * 1000000ull / 2 + 1);
    c->timer = env_timer_start(c->tn->env, d, retry_cb, c);
}

/* Decodes record i (TN_R_*) of a call's snapshot from its stored bytes. */
static int decode_record(tn_call_t *c, int i, const uint8_t *val, size_t len)
{
    switch (i) {
    case TN_R_POL:
        return tn_policy_decode(val, len, &c->pol);
    case TN_R_QUOTA:
        return tn_usage_decode(val, len, &c->usage);
    case TN_R_OBJ:
        return tn_objrow_decode(val, len, &c->row);
    case TN_R_OP:
        return tn_op_decode(val, len, &c->op);
    }
    return 0;
}

/* Parses the GET results of a read (or of a write's else branch) into the snapshot. */
static int take_snapshot(tn_call_t *c, const meta_kv_t *kvs, size_t n)
{
    size_t j = 0;
    for (int i = 0; i < TN_R_N; i++) {
        if (!(c->want & (1u << i)) || (i == TN_R_OBJ && !c->have_obj))
            continue;
        KVM_ASSERT(j < n);
        const meta_kv_t *kv = &kvs[j++];
        c->found[i] = kv->found;
        c->rev[i] = kv->found ? kv->mod_rev : 0;
        cache_put(c->tn, c->k[i], kv->found, kv->mod_rev, kv->value, kv->value_len);
        if (!kv->found)
            continue;
        int rc = decode_record(c, i, kv->value, kv->value_len);
        if (rc) {
            cache_drop(c->tn, c->k[i]);
            return kvm_errf(KVMESH_ECORRUPT, "tenant record %s: %s", kv->key, kvmesh_last_error());
        }
    }
    return 0;
}

/* The snapshot from the cache: every wanted record cached, except that a reserve may assume a
 * missing operation or object row absent. false: read first. */
static bool snapshot_from_cache(tn_call_t *c)
{
    if (c->kind == TN_CK_BOOT || c->kind == TN_CK_USAGE || c->kind == TN_CK_GETOP ||
        c->kind == TN_CK_PURGE || ((c->want & (1u << TN_R_OBJ)) && !c->have_obj))
        return false;
    for (int i = 0; i < TN_R_N; i++) {
        if (!(c->want & (1u << i)))
            continue;
        tn_centry_t *e = cache_find(c->tn, c->k[i]);
        if (!e) {
            if (c->kind == TN_CK_RESERVE && (i == TN_R_OP || i == TN_R_OBJ)) {
                c->found[i] = false;
                c->rev[i] = 0;
                continue;
            }
            return false;
        }
        e->used = ++c->tn->cache_tick;
        c->found[i] = e->found;
        c->rev[i] = e->mod_rev;
        if (!e->found)
            continue;
        int rc = decode_record(c, i, e->val, e->len);
        if (rc) {
            cache_drop(c->tn, c->k[i]);
            return false;
        }
    }
    return true;
}

static size_t fill_gets(tn_call_t *c, meta_op_t *ops)
{
    size_t n = 0;
    for (int i = 0; i < TN_R_N; i++) {
        if (!(c->want & (1u << i)) || (i == TN_R_OBJ && !c->have_obj))
            continue;
        ops[n++] = (meta_op_t){.type = META_OP_GET, .key = c->k[i]};
    }
    return n;
}

static void decide_and_write(tn_call_t *c);

static void on_read(void *arg, const meta_result_t *res)
{
    tn_call_t *c = arg;
    c->in_meta = false;
    tn_t *tn = c->tn;
    if (tn->closing || res->rc == KVMESH_ECANCELED) {
        call_done(c, KVMESH_ECANCELED, NULL, NULL, false);
        return;
    }
    if (res->rc) {
        call_retry(c, res->rc, true);
        return;
    }
    int rc = take_snapshot(c, res->ops, res->n_ops);
    if (rc) {
        call_done(c, rc, NULL, NULL, false);
        return;
    }
    decide_and_write(c);
}

static void call_read(tn_call_t *c)
{
    meta_op_t gets[TN_R_N];
    size_t n = fill_gets(c, gets);
    c->in_meta = true;
    c->tn->st.meta_round_trips++;
    int rc = meta_txn(c->tn->m, NULL, 0, gets, n, NULL, 0, c->tn->cfg.timeout_ms, on_read, c);
    if (rc) {
        c->in_meta = false;
        call_retry(c, rc, true);
    }
}

static void call_start(tn_call_t *c)
{
    if (snapshot_from_cache(c)) {
        c->speculative = true;
        decide_and_write(c);
        return;
    }
    call_read(c);
}

static void decide_and_write(tn_call_t *c)
{
    tn_t *tn = c->tn;
    decision_t d;
    decide(c, &d);
    if (c->speculative && d.d != DEC_WRITE) { /* only a write may follow from cached records */
        c->speculative = false;
        call_read(c);
        return;
    }
    c->speculative = false;
    if (d.d == DEC_REREAD) { /* learned the object from the operation record */
        KVM_ASSERT(!c->have_obj && c->found[TN_R_OP]);
        snprintf(c->domain, sizeof(c->domain), "%s", c->op.domain);
        snprintf(c->key, sizeof(c->key), "%s", c->op.key);
        c->have_obj = true;
        int rc = build_keys(c);
        if (rc) {
            call_done(c, rc, NULL, NULL, false);
            return;
        }
        call_read(c);
        return;
    }
    if (d.d == DEC_DONE) {
        tn_usage_t u = c->found[TN_R_QUOTA] ? c->usage : (tn_usage_t){0};
        call_done(c, d.rc, d.op, &u, d.repeated);
        return;
    }
    /* compares: mod_rev of every record read (absent = 0) */
    meta_cmp_t cmps[TN_R_N];
    size_t nc = 0;
    for (int i = 0; i < TN_R_N; i++) {
        if (!(c->want & (1u << i)) || (i == TN_R_OBJ && !c->have_obj))
            continue;
        cmps[nc++] = (meta_cmp_t){
            .key = c->k[i], .target = META_CMP_MOD_REV, .op = META_EQ, .num = c->rev[i]};
    }
    meta_op_t ops[8];
    size_t no = 0;
    size_t len = 0;
    int rc = 0;
    if (d.put_pol) {
        rc = tn_policy_encode(&c->pol, c->vpol, sizeof(c->vpol), &len);
        ops[no++] = (meta_op_t){
            .type = META_OP_PUT, .key = c->k[TN_R_POL], .value = c->vpol, .value_len = len};
    }
    if (!rc && d.put_op) {
        rc = tn_op_encode(&c->nop, c->vop, sizeof(c->vop), &len);
        ops[no++] = (meta_op_t){
            .type = META_OP_PUT, .key = c->k[TN_R_OP], .value = c->vop, .value_len = len};
    }
    if (!rc && d.del_op)
        ops[no++] = (meta_op_t){.type = META_OP_DEL, .key = c->k[TN_R_OP]};
    if (!rc && d.put_obj) {
        rc = tn_objrow_encode(&c->nrow, c->vobj, sizeof(c->vobj), &len);
        ops[no++] = (meta_op_t){
            .type = META_OP_PUT, .key = c->k[TN_R_OBJ], .value = c->vobj, .value_len = len};
    }
    if (!rc && d.del_obj)
        ops[no++] = (meta_op_t){.type = META_OP_DEL, .key = c->k[TN_R_OBJ]};
    if (!rc && d.put_quota) {
        rc = tn_usage_encode(&c->nusage, c->vquota, sizeof(c->vquota), &len);
        ops[no++] = (meta_op_t){
            .type = META_OP_PUT, .key = c->k[TN_R_QUOTA], .value = c->vquota, .value_len = len};
    }
    if (!rc && d.del_due_old && (rc = due_key(c, c->k_due_old, &c->op)) == 0)
        ops[no++] = (meta_op_t){.type = META_OP_DEL, .key = c->k_due_old};
    if (!rc && d.put_due_new && (rc = due_key(c, c->k_due_new, &c->nop)) == 0) {
        if (d.del_due_old && strcmp(c->k_due_old, c->k_due_new) == 0)
            no--; /* same entry: keep it (one branch may not write a key twice) */
        ops[no++] = (meta_op_t){
            .type = META_OP_PUT, .key = c->k_due_new, .value = (const uint8_t *)"", .value_len = 0};
    }
    if (rc) {
        call_done(c, rc, NULL, NULL, false);
        return;
    }
    KVM_ASSERT(no <= KVM_ARRAY_SIZE(ops));
    c->w_pol = d.put_pol;
    c->w_op = d.put_op;
    c->w_obj = d.put_obj;
    c->w_quota = d.put_quota;
    c->d_op = d.del_op;
    c->d_obj = d.del_obj;
    meta_op_t gets[TN_R_N];
    size_t ng = fill_gets(c, gets);
    c->in_meta = true;
    tn->st.meta_round_trips++;
    rc = meta_txn(tn->m, cmps, nc, ops, no, gets, ng, tn->cfg.timeout_ms, on_write, c);
    if (rc) {
        c->in_meta = false;
        call_retry(c, rc, true);
    }
}

static void count_success(tn_call_t *c)
{
    tn_stats_t *st = &c->tn->st;
    switch (c->kind) {
    case TN_CK_RESERVE:
        st->reserves++;
        break;
    case TN_CK_CLAIM:
        st->claims++;
        break;
    case TN_CK_FINALIZE:
        st->finalizes++;
        break;
    case TN_CK_ABORT:
    case TN_CK_ABORT_SUPERSEDED:
        st->aborts++;
        break;
    default:
        break;
    }
}

static void on_write(void *arg, const meta_result_t *res)
{
    tn_call_t *c = arg;
    c->in_meta = false;
    tn_t *tn = c->tn;
    if (tn->closing || res->rc == KVMESH_ECANCELED) {
        call_done(c, KVMESH_ECANCELED, NULL, NULL, false);
        return;
    }
    if (res->rc) { /* not applied, or unknown: the re-read decides idempotently */
        for (int i = 0; i < TN_R_N; i++)
            cache_drop(tn, c->k[i]);
        if (res->rc != KVMESH_ECONN)
            c->wrote_maybe = true;
        call_retry(c, res->rc, true);
        return;
    }
    if (res->succeeded) {
        count_success(c);
        /* every key the txn wrote now has mod_rev = the txn's revision */
        size_t pn = 0;
        if (c->w_pol && tn_policy_encode(&c->pol, c->vpol, sizeof(c->vpol), &pn) == 0)
            cache_put(tn, c->k[TN_R_POL], true, res->rev, c->vpol, pn);
        if (c->w_op || c->d_op) {
            size_t n = 0;
            if (c->w_op && tn_op_encode(&c->nop, c->vop, sizeof(c->vop), &n) == 0)
                cache_put(tn, c->k[TN_R_OP], true, res->rev, c->vop, n);
            else
                cache_put(tn, c->k[TN_R_OP], false, 0, NULL, 0);
        }
        if (c->w_obj || c->d_obj) {
            size_t n = 0;
            if (c->w_obj && tn_objrow_encode(&c->nrow, c->vobj, sizeof(c->vobj), &n) == 0)
                cache_put(tn, c->k[TN_R_OBJ], true, res->rev, c->vobj, n);
            else
                cache_put(tn, c->k[TN_R_OBJ], false, 0, NULL, 0);
        }
        if (c->w_quota) {
            size_t n = 0;
            if (tn_usage_encode(&c->nusage, c->vquota, sizeof(c->vquota), &n) == 0)
                cache_put(tn, c->k[TN_R_QUOTA], true, res->rev, c->vquota, n);
        }
        if (c->kind == TN_CK_BOOT) {
            pcache_put(tn, c->tenant, &c->pol);
            call_done(c, 0, NULL, NULL, false);
            return;
        }
        call_done(c, 0, c->kind == TN_CK_PURGE ? NULL : &c->nop, &c->nusage, false);
        return;
    }
    /* lost a race: the else branch carries the fresh records */
    c->conflicts++;
    int rc = take_snapshot(c, res->ops, res->n_ops);
    if (rc) {
        call_done(c, rc, NULL, NULL, false);
        return;
    }
    if (++c->attempts > TN_ATTEMPTS_MAX) {
        call_done(c,
                  kvm_errf(KVMESH_ECONFLICT, "tenant quota: contention on '%s'; retry", c->tenant),
                  NULL, NULL, false);
        return;
    }
    if (c->conflicts > 4) { /* spread contending writers out */
        uint64_t ms = 1ull << KVM_MIN(c->conflicts - 4, 5u);
        c->timer =
            env_timer_start(tn->env, env_rand_u64(tn->env) % (ms * 1000000ull + 1), retry_cb, c);
        return;
    }
    decide_and_write(c);
}

/* ---- public calls --------------------------------------------------------------------------- */

static int check_op_id(const char *op_id)
{
    uint64_t e, s;
    if (!op_id || ks_opid_parse(op_id, &e, &s) != 0)
        return kvm_errf(KVMESH_EINVAL, "operation id must be <16 hex>-<16 hex> (tn_next_op_id)");
    return 0;
}

int tn_bootstrap(tn_t *tn, const char *tenant, const tn_policy_t *policy, tn_cb cb, void *arg)
{
    KVM_ASSERT(!tn->closing);
    int rc = tn_policy_validate(policy);
    if (rc)
        return rc;
    if (!pcache_find(tn, tenant ? tenant : "") && tn->n_pol >= TN_MAX_TENANTS)
        return kvm_errf(KVMESH_ERANGE, "at most %d tenant policies per runtime", TN_MAX_TENANTS);
    tn_call_t *c = call_new(tn, TN_CK_BOOT, cb, arg);
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "tenant: out of memory");
    if ((rc = copy_scope(c, tenant, NULL, NULL)) != 0) {
        free(c);
        return rc;
    }
    c->policy = *policy;
    return call_submit(c);
}

int tn_reserve(tn_t *tn, const tn_reserve_req_t *req, tn_cb cb, void *arg)
{
    return tn_reserve_internal(tn, req, cb, arg, false);
}

int tn_reserve_internal(tn_t *tn, const tn_reserve_req_t *req, tn_cb cb, void *arg, bool always)
{
    KVM_ASSERT(!tn->closing);
    int rc = check_op_id(req->op_id);
    if (rc)
        return rc;
    if (!req->key)
        return kvm_errf(KVMESH_EBADKEY, "object key is required");
    tn_call_t *c = call_new(tn, TN_CK_RESERVE, cb, arg);
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "tenant: out of memory");
    if ((rc = copy_scope(c, req->tenant, req->domain, req->key)) != 0) {
        free(c);
        return rc;
    }
    snprintf(c->op_id, sizeof(c->op_id), "%s", req->op_id);
    c->always_cb = always;
    c->is_delete = req->is_delete;
    c->next_len = req->is_delete ? 0 : req->next_len;
    c->expected_route = req->expected_route;
    c->check_acct = req->check_acct;
    c->expected_acct = req->expected_acct;
    return call_submit(c);
}

int tn_claim(tn_t *tn, const tn_claim_req_t *req, tn_cb cb, void *arg)
{
    KVM_ASSERT(!tn->closing);
    int rc = check_op_id(req->op_id);
    if (rc)
        return rc;
    if (req->payload_len > TN_PAYLOAD_MAX || (req->payload_len && !req->payload))
        return kvm_errf(KVMESH_ETOOBIG, "claim payload of %zu bytes; max %d", req->payload_len,
                        TN_PAYLOAD_MAX);
    if (req->publish_token == 0)
        return kvm_errf(KVMESH_EINVAL, "claim: publish token must be non-zero");
    tn_call_t *c = call_new(tn, TN_CK_CLAIM, cb, arg);
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "tenant: out of memory");
    if ((rc = copy_scope(c, req->tenant, req->domain, req->key)) != 0) {
        free(c);
        return rc;
    }
    snprintf(c->op_id, sizeof(c->op_id), "%s", req->op_id);
    c->generation = req->generation;
    c->fencing_token = req->fencing_token;
    c->publish_token = req->publish_token;
    c->cas_follows = req->cas_follows;
    c->version = req->next_version;
    c->payload_len = (uint32_t)req->payload_len;
    if (req->payload_len)
        memcpy(c->payload, req->payload, req->payload_len);
    return call_submit(c);
}

static int obj_call(tn_t *tn, enum tn_ck kind, const char *tenant, const char *domain,
                    const char *key, const char *op_id, kvm_route_version_t version, uint32_t seen,
                    uint64_t tomb_until, tn_cb cb, void *arg, bool always)
{
    KVM_ASSERT(!tn->closing);
    int rc = check_op_id(op_id);
    if (rc)
        return rc;
    tn_call_t *c = call_new(tn, kind, cb, arg);
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "tenant: out of memory");
    if ((rc = copy_scope(c, tenant, domain, key)) != 0) {
        free(c);
        return rc;
    }
    snprintf(c->op_id, sizeof(c->op_id), "%s", op_id);
    c->version = version;
    c->tomb_until = tomb_until;
    c->seen_attempts = seen;
    c->always_cb = always;
    return call_submit(c);
}

int tn_finalize(tn_t *tn, const char *tenant, const char *domain, const char *key,
                const char *op_id, kvm_route_version_t next_version, tn_cb cb, void *arg)
{
    return tn_finalize_tomb(tn, tenant, domain, key, op_id, next_version, 0, cb, arg);
}

int tn_finalize_tomb(tn_t *tn, const char *tenant, const char *domain, const char *key,
                     const char *op_id, kvm_route_version_t next_version, uint64_t tomb_until_ms,
                     tn_cb cb, void *arg)
{
    if (!key)
        return kvm_errf(KVMESH_EBADKEY, "object key is required");
    return obj_call(tn, TN_CK_FINALIZE, tenant, domain, key, op_id, next_version, 0, tomb_until_ms,
                    cb, arg, false);
}

int tn_abort(tn_t *tn, const char *tenant, const char *domain, const char *key, const char *op_id,
             tn_cb cb, void *arg)
{
    return tn_abort_internal(tn, tenant, domain, key, op_id, cb, arg, false);
}

int tn_abort_internal(tn_t *tn, const char *tenant, const char *domain, const char *key,
                      const char *op_id, tn_cb cb, void *arg, bool always)
{
    if (!key)
        return kvm_errf(KVMESH_EBADKEY, "object key is required");
    return obj_call(tn, TN_CK_ABORT, tenant, domain, key, op_id, KVM_ROUTE_VERSION_NONE, 0, 0, cb,
                    arg, always);
}

int tn_call_by_op(tn_t *tn, enum tn_ck kind, const char *tenant, const char *op_id,
                  kvm_route_version_t version, uint32_t seen_attempts, tn_cb cb, void *arg)
{
    return obj_call(tn, kind, tenant, NULL, NULL, op_id, version, seen_attempts, 0, cb, arg, true);
}

int tn_finalize_by_op(tn_t *tn, const char *tenant, const char *op_id, kvm_route_version_t version,
                      uint64_t tomb_until, tn_cb cb, void *arg)
{
    return obj_call(tn, TN_CK_FINALIZE, tenant, NULL, NULL, op_id, version, 0, tomb_until, cb, arg,
                    true);
}

int tn_get_usage(tn_t *tn, const char *tenant, tn_usage_cb cb, void *arg)
{
    KVM_ASSERT(!tn->closing);
    tn_call_t *c = call_new(tn, TN_CK_USAGE, NULL, arg);
    if (!c)
        return kvm_errf(KVMESH_ENOMEM, "tenant: out of memory");
    c->ucb = cb;
    int rc = copy_scope(c, tenant, NULL, NULL);
    if (rc) {
        free(c);
        return rc;
    }
    return call_submit(c);
}

/* ---- hints ---------------------------------------------------------------------------------- */

static size_t hint_put(uint8_t *b, size_t cap, size_t off, const tn_centry_t *e, bool *over)
{
    size_t kl = strlen(e->key), need = 2 + kl + 1 + 8 + 4 + e->len;
    if (off + need > cap) {
        *over = true;
        return off;
    }
    b[off++] = (uint8_t)(kl >> 8);
    b[off++] = (uint8_t)kl;
    memcpy(b + off, e->key, kl);
    off += kl;
    b[off++] = e->found;
    for (int i = 7; i >= 0; i--)
        b[off++] = (uint8_t)((uint64_t)e->mod_rev >> (8 * i));
    for (int i = 3; i >= 0; i--)
        b[off++] = (uint8_t)(e->len >> (8 * i));
    if (e->len)
        memcpy(b + off, e->val, e->len);
    return off + e->len;
}

int tn_hint_export(tn_t *tn, const char *tenant, const char *op_id, uint8_t *buf, size_t cap,
                   size_t *len)
{
    *len = 0;
    char k_op[KS_KEY_CAP], k_q[KS_KEY_CAP];
    int rc = ks_acct_op_key(k_op, sizeof(k_op), tn->dep, tenant, op_id);
    if (!rc)
        rc = ks_quota_key(k_q, sizeof(k_q), tn->dep, tenant);
    if (rc)
        return rc;
    if (cap < 1)
        return kvm_errf(KVMESH_ETOOBIG, "hint buffer too small");
    const tn_centry_t *e[2] = {cache_find(tn, k_op), cache_find(tn, k_q)};
    size_t off = 1;
    bool over = false;
    buf[0] = 0;
    for (int i = 0; i < 2; i++)
        if (e[i]) {
            off = hint_put(buf, cap, off, e[i], &over);
            buf[0]++;
        }
    if (over)
        return kvm_errf(KVMESH_ETOOBIG, "hint buffer too small (TN_HINT_MAX suffices)");
    *len = off;
    return 0;
}

int tn_hint_import(tn_t *tn, const uint8_t *b, size_t len)
{
    if (!b || len < 1 || b[0] > 2)
        return kvm_errf(KVMESH_EPROTO, "tenant hint: malformed");
    size_t off = 1;
    for (unsigned n = 0; n < b[0]; n++) {
        if (off + 2 > len)
            return kvm_errf(KVMESH_EPROTO, "tenant hint: truncated");
        size_t kl = (size_t)b[off] << 8 | b[off + 1];
        off += 2;
        if (kl == 0 || kl > META_KEY_MAX || off + kl + 13 > len)
            return kvm_errf(KVMESH_EPROTO, "tenant hint: truncated");
        char key[KS_KEY_CAP];
        memcpy(key, b + off, kl);
        key[kl] = '\0';
        off += kl;
        bool found = b[off++] != 0;
        uint64_t rev = 0;
        for (int i = 0; i < 8; i++)
            rev = rev << 8 | b[off++];
        size_t vl = 0;
        for (int i = 0; i < 4; i++)
            vl = vl << 8 | b[off++];
        if (vl > TN_OP_ENC_MAX || off + vl > len || (found && (rev == 0 || rev > INT64_MAX)))
            return kvm_errf(KVMESH_EPROTO, "tenant hint: bad entry");
        ks_parsed_t pk;
        if (ks_parse(key, &pk) != 0 || strcmp(pk.deployment, tn->dep) != 0 ||
            (pk.family != KS_ACCT_OP && pk.family != KS_QUOTA))
            return kvm_errf(KVMESH_EPROTO, "tenant hint: foreign key");
        if (found) { /* cache only records that decode */
            tn_op_t *op = malloc(sizeof(*op));
            tn_usage_t u;
            int rc = !op                       ? KVMESH_ENOMEM
                     : pk.family == KS_ACCT_OP ? tn_op_decode(b + off, vl, op)
                                               : tn_usage_decode(b + off, vl, &u);
            free(op);
            if (rc)
                return kvm_errf(KVMESH_EPROTO, "tenant hint: record does not decode");
        }
        cache_put(tn, key, found, (int64_t)rev, b + off, vl);
        off += vl;
    }
    if (off != len)
        return kvm_errf(KVMESH_EPROTO, "tenant hint: trailing bytes");
    return 0;
}
