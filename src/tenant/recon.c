/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recon.c — one bounded reconciliation pass over a tenant's due index and batch acquisition.
 *
 * The pass reads acct-due/<tenant>/<state>/ in key order (= deadline order) one page per state
 * and stops at the first deadline in the future, so it never reads more than `page` entries per
 * state and never scans routes or reservations:
 *   pending     expired: abort (metadata serializes it against a concurrent claim; a claim that
 *               won leaves the abort refused with ECONFLICT, which is fine);
 *   publishing  exact operation read, then an exact route/tombstone lookup (tn_route_ops_t):
 *               the route carries this operation id, predecessor and next version -> finalize;
 *               ... and another version (a lost replay race) -> a replay claim records the
 *               published version, then finalize;
 *               a route without this operation at a version above its predecessor -> the
 *               predecessor can never be current again: abort (the guarded PUBLISHING ->
 *               ABORTED edge, TN_CK_ABORT_SUPERSEDED);
 *               the predecessor is still authoritative -> replay through the fenced primary
 *               (same publish token and payload) and finalize what it published;
 *               anything else, or a refused replay -> stays PUBLISHING, charged and locked, the
 *               due entry moved out by capped exponential backoff, counted as degraded;
 *   done        terminal records past retention are removed (their finalization is in the
 *               committed accounting already: finalize writes both in one transaction), with
 *               a finalized delete's object row once its tombstone's D + M has passed; the
 *               page's purges run concurrently.
 * Pending and publishing entries are handled one at a time; every callback checks tn_closing()
 * and ends the pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ident.h"
#include "core/util.h"
#include "tenant/tenant_int.h"

enum { PH_PENDING, PH_PUBLISHING, PH_DONE, PH_END };

static const char *const ph_state[] = {"pending", "publishing", "done"};

typedef struct tn_recon {
    tn_t *tn;
    char tenant[TN_TENANT_CAP];
    tn_route_ops_t route;
    uint32_t page;
    tn_recon_cb cb;
    void *arg;
    int phase;
    char prefix[KS_KEY_CAP];
    char (*ids)[TN_OPID_CAP];
    uint32_t n, idx;
    uint32_t purging; /* done stage: purges of this page in flight (all at once, <= page) */
    bool replayed;
    kvm_route_version_t published; /* the version a re-recording claim names */
    uint64_t tomb_until;           /* the D a delete's finalize records (its tombstone's) */
    tn_recon_report_t rep;
    tn_op_t cur;
} tn_recon_t;

static void phase_begin(tn_recon_t *r);
static void next_entry(tn_recon_t *r);

static void finish(tn_recon_t *r)
{
    tn_t *tn = r->tn;
    if (!tn_closing(tn) && r->cb)
        r->cb(r->arg, &r->rep);
    *tn_recon_busy(tn) = false;
    free(r->ids);
    free(r);
    tn_aux_put(tn);
}

static bool stopped(tn_recon_t *r)
{
    if (!tn_closing(r->tn))
        return false;
    finish(r);
    return true;
}

static void note_rc(tn_recon_t *r, int rc)
{
    if (rc && !r->rep.rc)
        r->rep.rc = rc;
}

static void advance(tn_recon_t *r)
{
    r->idx++;
    next_entry(r);
}

static void on_range(void *arg, const meta_result_t *res)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    r->n = r->idx = 0;
    if (res->rc) {
        note_rc(r, res->rc);
        r->phase++;
        phase_begin(r);
        return;
    }
    uint64_t now = env_wall_ms(tn_env(r->tn));
    bool future = false;
    for (size_t i = 0; i < res->n_kvs && r->n < r->page; i++) {
        ks_parsed_t p;
        if (ks_parse(res->kvs[i].key, &p) != 0 || p.family != KS_ACCT_DUE || p.n_parts != 4) {
            note_rc(r, KVMESH_ECORRUPT);
            continue;
        }
        if (p.parts[2].u > now) {
            future = true;
            break;
        }
        if (strlen(p.parts[3].s) != KS_OPID_LEN) {
            note_rc(r, KVMESH_ECORRUPT);
            continue;
        }
        memcpy(r->ids[r->n++], p.parts[3].s, TN_OPID_CAP);
    }
    if (!future && res->more)
        r->rep.more = true;
    next_entry(r);
}

static void phase_begin(tn_recon_t *r)
{
    if (r->phase >= PH_END) {
        finish(r);
        return;
    }
    int rc = ks_acct_due_prefix(r->prefix, sizeof(r->prefix), tn_dep(r->tn), r->tenant,
                                ph_state[r->phase]);
    if (!rc)
        rc = meta_range(tn_meta(r->tn), r->prefix, NULL, r->page, tn_cfg(r->tn)->timeout_ms,
                        on_range, r);
    if (rc) {
        note_rc(r, rc);
        r->phase++;
        phase_begin(r);
    }
}

/* ---- per-entry steps ------------------------------------------------------------------------ */

static void on_abort(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    if (rc == 0 && !v->repeated) {
        r->rep.aborted++;
        tn_stats_mut(r->tn)->recon_aborted++;
    } else if (rc && rc != KVMESH_ECONFLICT && rc != KVMESH_ENOENT) {
        note_rc(r, rc);
    }
    advance(r);
}

/* The done stage's entries are independent records: their purges run concurrently (the page
 * bounds them), since under delete churn that stage is the one that has to keep up. */
static void on_purge(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    KVM_ASSERT(r->purging > 0);
    r->purging--;
    if (rc == 0 && !v->repeated && !tn_closing(r->tn)) {
        r->rep.purged++;
        tn_stats_mut(r->tn)->recon_purged++;
    } else if (rc && rc != KVMESH_ECANCELED) {
        note_rc(r, rc);
    }
    if (r->purging > 0)
        return;
    if (stopped(r))
        return;
    r->phase++;
    phase_begin(r);
}

static void purge_page(tn_recon_t *r)
{
    r->purging = 1; /* held while starting them: no callback ends the stage early */
    for (; r->idx < r->n; r->idx++) {
        r->purging++;
        int rc = tn_call_by_op(r->tn, TN_CK_PURGE, r->tenant, r->ids[r->idx],
                               KVM_ROUTE_VERSION_NONE, 0, on_purge, r);
        if (rc) {
            r->purging--;
            note_rc(r, rc);
        }
    }
    on_purge(r, 0, &(tn_op_view_t){.repeated = true});
}

static void on_resched(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    (void)v;
    r->rep.degraded++;
    tn_stats_mut(r->tn)->recon_degraded++;
    note_rc(r, rc);
    advance(r);
}

static void degrade(tn_recon_t *r)
{
    int rc = tn_call_by_op(r->tn, TN_CK_RESCHED, r->tenant, r->cur.id, KVM_ROUTE_VERSION_NONE,
                           r->cur.recon_attempts, on_resched, r);
    if (rc) {
        note_rc(r, rc);
        advance(r);
    }
}

static void on_finalize(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    (void)v;
    if (rc == 0) {
        r->rep.finalized++;
        tn_stats_mut(r->tn)->recon_finalized++;
        if (r->replayed) {
            r->rep.replayed++;
            tn_stats_mut(r->tn)->recon_replayed++;
        }
        advance(r);
        return;
    }
    note_rc(r, rc);
    degrade(r);
}

static void finalize_at(tn_recon_t *r, kvm_route_version_t v)
{
    uint64_t d = r->cur.kind == TN_KIND_DELETE ? r->tomb_until : 0;
    int rc = tn_finalize_by_op(r->tn, r->tenant, r->cur.id, v, d, on_finalize, r);
    if (rc) {
        note_rc(r, rc);
        degrade(r);
    }
}

static void on_lookup(void *arg, int rc, const tn_route_obs_t *obs);

static void on_replay(void *arg, int rc, kvm_route_version_t version)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    if (rc) {
        degrade(r);
        return;
    }
    r->replayed = true;
    if (r->cur.kind == TN_KIND_DELETE) {
        /* the replay published a tombstone with its own deadline: look it up for its D */
        r->cur.next_version = version;
        r->route.lookup(r->route.ctx, r->cur.tenant, r->cur.domain, r->cur.key, on_lookup, r);
        return;
    }
    finalize_at(r, version);
}

/* A delete whose exact lookup finds nothing: its predecessor P (a live route: never purged) is
 * gone, so a tombstone ended it, and while this operation holds the object lock only its own
 * publication (the writer's CAS or a replay, same content op) can publish one. So its tombstone
 * was applied and purged after its deadline: finalize the version the claim recorded, D = 1
 * (already due). Its CAS can never apply later: it expects P, and versions never return. */
static bool absent_delete(const tn_recon_t *r, const tn_route_obs_t *obs)
{
    return r->cur.kind == TN_KIND_DELETE && !obs->found &&
           !kvm_route_version_is_none(&r->cur.expected_route) &&
           !(tn_cfg(r->tn)->test_bugs & TN_TEST_BUG_NO_ABSENT_FINAL);
}

static void on_reclaim(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    (void)v;
    if (rc) {
        note_rc(r, rc);
        degrade(r);
        return;
    }
    finalize_at(r, r->published);
}

static void on_superseded(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    (void)v;
    if (rc) {
        note_rc(r, rc);
        degrade(r);
        return;
    }
    r->rep.superseded++;
    tn_stats_mut(r->tn)->recon_superseded++;
    advance(r);
}

/* The guarded PUBLISHING -> ABORTED edge (docs/tenancy.md "Replaying a put", step 4): the exact
 * lookup shows a route that does not carry the operation at a version above its predecessor.
 * Versions only grow under fencing, so no CAS expecting that predecessor can apply any more:
 * the operation can never be published and is aborted (its pending charge refunded, the object
 * unlocked; the owners then free its held slots). An absent route proves nothing (a purged
 * tombstone). true: the abort was started. */
static bool superseded(tn_recon_t *r, const tn_route_obs_t *obs)
{
    const tn_op_t *op = &r->cur;
    bool other = obs->found && strcmp(obs->content_op, op->id) != 0;
    bool proven = other && kvm_route_version_cmp(&obs->version, &op->expected_route) > 0;
    bool bug = other && (tn_cfg(r->tn)->test_bugs & TN_TEST_BUG_ABORT_UNPROVEN) != 0;
    if (!proven && !bug)
        return false;
    kvm_route_version_t proof = proven ? obs->version : (kvm_route_version_t){UINT64_MAX, 1};
    int rc =
        tn_call_by_op(r->tn, TN_CK_ABORT_SUPERSEDED, r->tenant, op->id, proof, 0, on_superseded, r);
    if (rc) {
        note_rc(r, rc);
        degrade(r);
    }
    return true;
}

static void on_lookup(void *arg, int rc, const tn_route_obs_t *obs)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    if (rc) {
        degrade(r);
        return;
    }
    const tn_op_t *op = &r->cur;
    bool del = op->kind == TN_KIND_DELETE;
    /* A create's predecessor is "nothing or a tombstone": its row was deleted at V (then an
     * absent route, V purged, is still its predecessor, and the route side replays it expecting
     * NONE), or purged with its tombstone, while that tombstone, due, may still be what its CAS
     * replaced. So the route it published names V, NONE or a due tombstone as predecessor; the
     * content op (this operation's alone) is what identifies it. */
    bool tomb_pred = op->kind == TN_KIND_CREATE && !kvm_route_version_is_none(&op->expected_route);
    bool pred_ok = kvm_route_version_equal(&obs->predecessor, &op->expected_route) ||
                   op->kind == TN_KIND_CREATE;
    bool ours =
        obs->found && strcmp(obs->content_op, op->id) == 0 && obs->tombstone == del && pred_ok;
    r->tomb_until = ours && del ? obs->retain_until_ms : 0;
    if (absent_delete(r, obs)) {
        r->tomb_until = 1;
        finalize_at(r, op->next_version);
        return;
    }
    if (r->replayed) { /* the lookup after a delete's replay: only its own tombstone is final */
        if (ours)
            finalize_at(r, obs->version);
        else
            degrade(r);
        return;
    }
    if (ours && kvm_route_version_equal(&obs->version, &op->next_version)) {
        finalize_at(r, op->next_version); /* published: finalize idempotently */
        return;
    }
    if (ours && kvm_route_version_cmp(&obs->version, &op->expected_route) > 0) {
        /* published by this operation at another version than its claim recorded (two replays
         * raced, the later claim's CAS lost): record the published one with a replay claim
         * (same publish token and payload), then finalize it */
        tn_claim_req_t q = {.tenant = op->tenant,
                            .domain = op->domain,
                            .key = op->key,
                            .op_id = op->id,
                            .generation = op->generation,
                            .fencing_token = obs->version.fencing_token,
                            .publish_token = op->publish_token,
                            .next_version = obs->version,
                            .payload = op->payload,
                            .payload_len = op->payload_len};
        r->published = obs->version;
        if (tn_claim(r->tn, &q, on_reclaim, r) == 0)
            return;
    }
    if (superseded(r, obs))
        return;
    bool pred_current = obs->found ? kvm_route_version_equal(&obs->version, &op->expected_route)
                                   : kvm_route_version_is_none(&op->expected_route) || tomb_pred;
    bool no_replay = (tn_cfg(r->tn)->test_bugs & TN_TEST_BUG_NO_REPLAY) != 0;
    if (pred_current && r->route.replay && !no_replay) {
        r->route.replay(r->route.ctx, op, on_replay, r);
        return;
    }
    degrade(r); /* cannot prove what happened: stay charged and locked */
}

static void on_getop(void *arg, int rc, const tn_op_view_t *v)
{
    tn_recon_t *r = arg;
    if (stopped(r))
        return;
    if (rc || !v->op || v->op->state != TN_ST_PUBLISHING) {
        if (rc && rc != KVMESH_ENOENT)
            note_rc(r, rc);
        advance(r); /* moved on since the page was read */
        return;
    }
    r->cur = *v->op;
    r->replayed = false;
    r->route.lookup(r->route.ctx, r->cur.tenant, r->cur.domain, r->cur.key, on_lookup, r);
}

static void next_entry(tn_recon_t *r)
{
    if (r->idx >= r->n) {
        r->phase++;
        phase_begin(r);
        return;
    }
    const char *id = r->ids[r->idx];
    int rc = 0;
    switch (r->phase) {
    case PH_PENDING:
        rc = tn_call_by_op(r->tn, TN_CK_ABORT, r->tenant, id, KVM_ROUTE_VERSION_NONE, 0, on_abort,
                           r);
        break;
    case PH_PUBLISHING:
        rc = tn_call_by_op(r->tn, TN_CK_GETOP, r->tenant, id, KVM_ROUTE_VERSION_NONE, 0, on_getop,
                           r);
        break;
    case PH_DONE:
        purge_page(r);
        return;
    }
    if (rc) {
        note_rc(r, rc);
        advance(r);
    }
}

int tn_recon_pass(tn_t *tn, const char *tenant, const tn_route_ops_t *route, uint32_t page,
                  tn_recon_cb cb, void *arg)
{
    KVM_ASSERT(!tn_closing(tn));
    if (!route || !route->lookup)
        return kvm_errf(KVMESH_EINVAL, "reconciliation needs a route lookup callback");
    if (page < 1 || page > TN_PAGE_MAX)
        return kvm_errf(KVMESH_ERANGE, "reconciliation page must be 1..%d", TN_PAGE_MAX);
    if (!tenant || kvm_ident_check_tenant(tenant, strlen(tenant)) != 0)
        return kvm_errf(KVMESH_EBADTENANT, "reconciliation: invalid tenant");
    if (*tn_recon_busy(tn))
        return kvm_errf(KVMESH_EAGAIN, "a reconciliation pass is already running");
    tn_recon_t *r = calloc(1, sizeof(*r));
    if (r)
        r->ids = calloc(page, sizeof(*r->ids));
    if (!r || !r->ids) {
        if (r)
            free(r);
        return kvm_errf(KVMESH_ENOMEM, "reconciliation: out of memory");
    }
    r->tn = tn;
    snprintf(r->tenant, sizeof(r->tenant), "%s", tenant);
    r->route = *route;
    r->page = page;
    r->cb = cb;
    r->arg = arg;
    *tn_recon_busy(tn) = true;
    tn_aux_get(tn);
    phase_begin(r);
    return 0;
}

/* ---- batch acquisition ---------------------------------------------------------------------- */

typedef struct tn_batch {
    tn_t *tn;
    size_t n, next;
    size_t *order; /* indexes sorted by scoped object key */
    tn_reserve_req_t *reqs;
    char (*ids)[TN_OPID_CAP];
    char **strs; /* owned copies: tenant, domain, key per item */
    char (*keys)[KS_KEY_CAP];
    size_t n_acq;
    int fail_rc;
    size_t fail_index;
    tn_batch_cb cb;
    void *arg;
} tn_batch_t;

static void batch_free(tn_batch_t *b)
{
    tn_t *tn = b->tn;
    for (size_t i = 0; i < 3 * b->n; i++)
        free(b->strs[i]);
    free(b->strs);
    free(b->order);
    free(b->reqs);
    free(b->ids);
    free(b->keys);
    free(b);
    tn_aux_put(tn);
}

static void batch_step(tn_batch_t *b);

static void batch_unwind(tn_batch_t *b);

static void on_batch_abort(void *arg, int rc, const tn_op_view_t *v)
{
    tn_batch_t *b = arg;
    (void)rc; /* a failed abort leaves PENDING: expiry reconciliation aborts it */
    (void)v;
    if (tn_closing(b->tn)) {
        batch_free(b);
        return;
    }
    batch_unwind(b);
}

static void batch_unwind(tn_batch_t *b)
{
    while (b->n_acq > 0) {
        const tn_reserve_req_t *q = &b->reqs[b->order[--b->n_acq]];
        if (tn_abort_internal(b->tn, q->tenant, q->domain, q->key, q->op_id, on_batch_abort, b,
                              true) == 0)
            return;
    }
    if (b->cb)
        b->cb(b->arg, b->fail_rc, b->fail_index);
    batch_free(b);
}

static void on_batch_reserve(void *arg, int rc, const tn_op_view_t *v)
{
    tn_batch_t *b = arg;
    if (tn_closing(b->tn)) {
        batch_free(b);
        return;
    }
    if (rc == 0 && v->op && v->op->state != TN_ST_PENDING)
        rc = kvm_errf(KVMESH_ECONFLICT, "batch item operation %s is already %s", v->op->id,
                      tn_state_name(v->op->state));
    if (rc) {
        b->fail_rc = rc;
        b->fail_index = b->order[b->next];
        batch_unwind(b);
        return;
    }
    b->n_acq++;
    b->next++;
    batch_step(b);
}

static void batch_step(tn_batch_t *b)
{
    if (b->next == b->n) {
        if (b->cb)
            b->cb(b->arg, 0, 0);
        batch_free(b);
        return;
    }
    int rc = tn_reserve_internal(b->tn, &b->reqs[b->order[b->next]], on_batch_reserve, b, true);
    if (rc) {
        b->fail_rc = rc;
        b->fail_index = b->order[b->next];
        batch_unwind(b);
    }
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

int tn_reserve_batch(tn_t *tn, const tn_reserve_req_t *reqs, size_t n, tn_batch_cb cb, void *arg)
{
    KVM_ASSERT(!tn_closing(tn));
    if (n < 1 || n > TN_BATCH_MAX)
        return kvm_errf(KVMESH_ERANGE, "a quota batch has 1..%d items", TN_BATCH_MAX);
    tn_batch_t *b = calloc(1, sizeof(*b));
    if (!b)
        return kvm_errf(KVMESH_ENOMEM, "batch: out of memory");
    b->tn = tn;
    b->n = n;
    b->cb = cb;
    b->arg = arg;
    b->order = calloc(n, sizeof(*b->order));
    b->reqs = calloc(n, sizeof(*b->reqs));
    b->ids = calloc(n, sizeof(*b->ids));
    b->keys = calloc(n, sizeof(*b->keys));
    b->strs = calloc(3 * n, sizeof(*b->strs));
    tn_aux_get(tn);
    if (!b->order || !b->reqs || !b->ids || !b->keys || !b->strs) {
        batch_free(b);
        return kvm_errf(KVMESH_ENOMEM, "batch: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        int rc =
            ks_object_key(b->keys[i], KS_KEY_CAP, tn_dep(tn), reqs[i].tenant ? reqs[i].tenant : "",
                          reqs[i].domain, reqs[i].key ? reqs[i].key : "");
        if (rc) {
            batch_free(b);
            return rc;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(b->keys[i], b->keys[j]) == 0) {
                batch_free(b);
                return kvm_errf(KVMESH_EINVAL, "batch items %zu and %zu name the same object", j,
                                i);
            }
        b->reqs[i] = reqs[i];
        b->strs[3 * i] = dup_or_null(reqs[i].tenant);
        b->strs[3 * i + 1] = dup_or_null(reqs[i].domain);
        b->strs[3 * i + 2] = dup_or_null(reqs[i].key);
        snprintf(b->ids[i], TN_OPID_CAP, "%s", reqs[i].op_id ? reqs[i].op_id : "");
        b->reqs[i].tenant = b->strs[3 * i];
        b->reqs[i].domain = b->strs[3 * i + 1];
        b->reqs[i].key = b->strs[3 * i + 2];
        b->reqs[i].op_id = b->ids[i];
        b->order[i] = i;
    }
    for (size_t i = 1; i < n; i++) /* insertion sort: canonical scoped-key order */
        for (size_t j = i; j > 0 && strcmp(b->keys[b->order[j - 1]], b->keys[b->order[j]]) > 0;
             j--) {
            size_t t = b->order[j];
            b->order[j] = b->order[j - 1];
            b->order[j - 1] = t;
        }
    batch_step(b);
    return 0;
}
