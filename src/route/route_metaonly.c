/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_metaonly.c — MetadataOnly route mode (see route_metaonly.h for the semantics).
 *
 * Owns: the pending-call list (every metadata call in flight has one mo_call), the counters.
 * Invariants: a user callback runs exactly once per accepted call: with the result, or with
 * KVMESH_ECANCELED from route_mo_free (the metadata callback that arrives later only frees the
 * call record). A written route always passes kvm_route_validate.
 */
#include "route/route_int.h"
#include "route/route_metaonly.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/wire.h"
#include "meta/keyspace.h"

enum mo_kind { MO_POLICY, MO_LOOKUP, MO_CAS_GET, MO_CAS_TXN, MO_SCAN, MO_PURGE };

#define MO_PURGE_PERIOD_NS (1000ull * 1000000) /* purge pass period */
#define MO_PURGE_PAGE      64                  /* expiry index entries read per pass */
#define MO_PURGE_MARGIN_MS 1000                /* past retain_until_ms before a purge */

struct mo_call {
    struct mo_call *next, *prev;
    route_mo_t *mo; /* NULL once cancelled by route_mo_free */
    enum mo_kind kind;
    char key[KS_KEY_CAP];
    void (*policy_cb)(void *, int);
    route_lookup_cb lookup_cb;
    route_cas_cb cas_cb;
    route_owner_cb scan_cb;
    void *arg;
    /* CAS */
    kvm_route_version_t expected;
    kvm_route_t next_route; /* owned copy */
    kvm_route_t written;    /* the route the txn writes */
    unsigned retries;
    /* scan */
    kvm_runtime_id_t owner;
    /* CAS of an absent key, and purge: the shard's version floor */
    char floor_key[KS_KEY_CAP];
    int64_t floor_mod_rev, route_mod_rev;
    uint64_t floor;
    /* purge: the expiry index page and the entry being purged */
    char (*due)[KS_KEY_CAP];
    char (*due_route)[KS_KEY_CAP];
    char (*due_floor)[KS_KEY_CAP];
    uint64_t *due_until;
    size_t n_due, i_due;
    kvm_route_t victim;
};

struct route_mo {
    env_t *env;
    meta_t *meta;
    char deployment[KS_DEPLOYMENT_MAX + 1];
    route_policy_t policy;
    uint32_t timeout_ms;
    struct mo_call *calls;        /* pending */
    route_stats_t stats;          /* only the service-internal fields (route.h) */
    struct obs_registry *metrics; /* borrowed from the service (route_svc.c) */
    env_timer_id purge_timer;
    bool purge_busy;
    _Atomic uint64_t purged; /* tombstones purged by this runtime (any thread reads) */
    /* purge txns of a tombstone that failed without a definite answer: they may have applied
     * (a lost reply), so their tombstone may be gone uncounted in purged (any thread reads) */
    _Atomic uint64_t purge_unknown;
};

static struct mo_call *call_new(route_mo_t *mo, enum mo_kind kind, void *arg)
{
    struct mo_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->mo = mo;
    c->kind = kind;
    c->arg = arg;
    c->next = mo->calls;
    if (mo->calls)
        mo->calls->prev = c;
    mo->calls = c;
    return c;
}

/* Unlinks (when still linked) and frees. */
static void call_free(struct mo_call *c)
{
    if (c->mo) {
        if (c->prev)
            c->prev->next = c->next;
        else
            c->mo->calls = c->next;
        if (c->next)
            c->next->prev = c->prev;
    }
    kvm_route_free(&c->next_route);
    kvm_route_free(&c->written);
    kvm_route_free(&c->victim);
    free(c->due);
    free(c->due_route);
    free(c->due_floor);
    free(c->due_until);
    free(c);
}

static int route_key_of(route_mo_t *mo, const kvm_ident_t *id, char *out, size_t cap)
{
    char tenant[KVM_TENANT_MAX_LEN + 1], domain[KVM_DOMAIN_MAX_LEN + 1], key[KVM_KEY_MAX_LEN + 1];
    memcpy(tenant, kvm_ident_tenant(id), id->tenant_len);
    tenant[id->tenant_len] = 0;
    if (id->domain_len)
        memcpy(domain, kvm_ident_domain(id), id->domain_len);
    domain[id->domain_len] = 0;
    memcpy(key, kvm_ident_key(id), id->key_len);
    key[id->key_len] = 0;
    return ks_route_key(out, cap, mo->deployment, tenant, domain, key);
}

static void purge_arm(route_mo_t *mo);

static int due_key_of(route_mo_t *mo, const kvm_route_t *r, char *out, size_t cap)
{
    const kvm_ident_t *id = &r->ident;
    char tenant[KVM_TENANT_MAX_LEN + 1], domain[KVM_DOMAIN_MAX_LEN + 1], key[KVM_KEY_MAX_LEN + 1];
    memcpy(tenant, kvm_ident_tenant(id), id->tenant_len);
    tenant[id->tenant_len] = 0;
    if (id->domain_len)
        memcpy(domain, kvm_ident_domain(id), id->domain_len);
    domain[id->domain_len] = 0;
    memcpy(key, kvm_ident_key(id), id->key_len);
    key[id->key_len] = 0;
    return ks_route_due_key(out, cap, mo->deployment, r->retain_until_ms, tenant, domain, key);
}

/* A finalized tombstone past its retention reads as absent. */
static bool route_gone(route_mo_t *mo, const kvm_route_t *r)
{
    return r->tomb == KVM_TOMB_FINALIZED && r->retain_until_ms <= env_wall_ms(mo->env);
}

/* What a CAS expecting NONE matches besides an absent key: also a due tombstone that is still
 * pending (a quota tenant's delete, docs/tenancy.md "Purging a quota tenant's tombstones" step
 * 2); its replacement is written above its version and the shard's floor. Lookups still see a
 * pending tombstone until it is purged. */
static bool route_gone_for_cas(route_mo_t *mo, const kvm_route_t *r)
{
    return route_gone(mo, r) || (r->tomb == KVM_TOMB_PENDING && r->retain_until_ms != 0 &&
                                 r->retain_until_ms <= env_wall_ms(mo->env));
}

/* ---- policy -------------------------------------------------------------------------------- */

static void policy_done(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    int rc = res->rc;
    if (!rc && !res->succeeded) {
        const meta_kv_t *kv = &res->ops[0];
        route_policy_t have;
        if (!kv->found)
            rc = kvm_errf(KVMESH_EBACKEND, "cluster policy vanished while being checked");
        else if (route_policy_decode(kv->value, kv->value_len, &have) != 0)
            rc = kvm_errf(KVMESH_ECORRUPT, "malformed cluster route policy record");
        else
            rc = route_policy_diff(&mo->policy, &have);
    } else if (rc) {
        rc = kvm_errf(rc, "cluster policy check failed: %s", res->errmsg);
    }
    void (*cb)(void *, int) = c->policy_cb;
    void *cb_arg = c->arg;
    call_free(c);
    cb(cb_arg, rc);
}

int route_mo_new(route_mo_t **out, const route_svc_opts_t *opts, void (*cb)(void *, int), void *arg)
{
    *out = NULL;
    if (!opts || !opts->env || !opts->meta || !opts->deployment)
        return kvm_errf(KVMESH_EINVAL, "route_mo_new: env, meta and deployment are required");
    int rc = ks_validate_deployment(opts->deployment);
    if (rc)
        return rc;
    route_mo_t *mo = calloc(1, sizeof(*mo));
    if (!mo)
        return KVMESH_ENOMEM;
    mo->env = opts->env;
    mo->meta = opts->meta;
    snprintf(mo->deployment, sizeof(mo->deployment), "%s", opts->deployment);
    mo->policy = opts->policy;
    mo->timeout_ms = opts->request_timeout_ms;
    mo->metrics = opts->metrics;

    char key[KS_KEY_CAP];
    uint8_t val[128];
    size_t vlen = 0;
    /* The same record and encoding as the mesh (route_rec.c): one policy per deployment. */
    if ((rc = ks_cluster_policy_key(key, sizeof(key), mo->deployment)) ||
        (rc = route_policy_encode(&mo->policy, val, sizeof(val), &vlen)))
        goto fail;
    struct mo_call *c = call_new(mo, MO_POLICY, arg);
    if (!c) {
        rc = KVMESH_ENOMEM;
        goto fail;
    }
    c->policy_cb = cb;
    meta_cmp_t cmp = {.key = key, .target = META_CMP_EXISTS, .op = META_EQ, .num = 0};
    meta_op_t put = {.type = META_OP_PUT, .key = key, .value = val, .value_len = vlen};
    meta_op_t get = {.type = META_OP_GET, .key = key};
    mo->stats.meta_calls++;
    rc = meta_txn(mo->meta, &cmp, 1, &put, 1, &get, 1, mo->timeout_ms, policy_done, c);
    if (rc) {
        call_free(c);
        goto fail;
    }
    *out = mo;
    purge_arm(mo);
    return 0;
fail:
    free(mo);
    return rc;
}

void route_mo_free(route_mo_t *mo)
{
    if (!mo)
        return;
    env_timer_cancel(mo->env, mo->purge_timer);
    mo->purge_timer = 0;
    /* Detach every pending call first, then complete them: a callback may not reach mo. */
    struct mo_call *list = mo->calls;
    mo->calls = NULL;
    for (struct mo_call *c = list; c; c = c->next) {
        c->mo = NULL;
        switch (c->kind) {
        case MO_POLICY:
            c->policy_cb(c->arg, KVMESH_ECANCELED);
            break;
        case MO_LOOKUP:
            c->lookup_cb(c->arg, KVMESH_ECANCELED, NULL);
            break;
        case MO_CAS_GET:
        case MO_CAS_TXN:
            c->cas_cb(c->arg, KVMESH_ECANCELED, NULL);
            break;
        case MO_SCAN:
            c->scan_cb(c->arg, KVMESH_ECANCELED, NULL);
            break;
        case MO_PURGE: /* internal: its metadata callback frees it */
            break;
        }
    }
    free(mo);
}

void route_mo_set_members(route_mo_t *mo, uint64_t generation, const route_member_t *members,
                          size_t n)
{
    (void)mo, (void)generation, (void)members, (void)n; /* routes do not depend on membership */
}

void route_mo_on_message(route_mo_t *mo, const env_msg_t *msg)
{
    (void)mo, (void)msg; /* no peer protocol in this mode */
}

/* ---- lookup -------------------------------------------------------------------------------- */

static void lookup_done(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    int rc = res->rc;
    kvm_route_t r;
    kvm_route_init(&r);
    if (rc)
        rc = kvm_errf(rc == KVMESH_ETIMEDOUT ? rc : KVMESH_EUNAVAILABLE,
                      "route lookup in metadata failed: %s", res->errmsg);
    else if (!res->kv.found)
        rc = KVMESH_ENOENT;
    else if ((rc = wire_route_decode(res->kv.value, res->kv.value_len, &r)) != 0)
        rc = kvm_errf(KVMESH_ECORRUPT, "route record at %s does not decode", c->key);
    else if (route_gone(mo, &r))
        rc = KVMESH_ENOENT;
    obs_count(mo->metrics, route_lookups_total,
              rc == 0               ? OBS_LOOKUP_FOUND
              : rc == KVMESH_ENOENT ? OBS_LOOKUP_NOT_FOUND
                                    : OBS_LOOKUP_ERROR,
              OBS_NONE, 1);
    route_lookup_cb cb = c->lookup_cb;
    void *cb_arg = c->arg;
    call_free(c);
    cb(cb_arg, rc, rc ? NULL : &r);
    kvm_route_free(&r);
}

int route_mo_lookup(route_mo_t *mo, const kvm_ident_t *ident, route_lookup_cb cb, void *arg)
{
    struct mo_call *c = call_new(mo, MO_LOOKUP, arg);
    if (!c)
        return KVMESH_ENOMEM;
    c->lookup_cb = cb;
    int rc = route_key_of(mo, ident, c->key, sizeof(c->key));
    if (!rc) {
        mo->stats.meta_calls++;
        rc = meta_get(mo->meta, c->key, mo->timeout_ms, lookup_done, c);
    }
    if (rc)
        call_free(c);
    return rc;
}

/* ---- CAS ----------------------------------------------------------------------------------- */

static int cas_read(struct mo_call *c);

static void cas_finish(struct mo_call *c, int rc, const kvm_route_t *r)
{
    route_cas_cb cb = c->cas_cb;
    void *cb_arg = c->arg;
    kvm_route_t keep;
    kvm_route_init(&keep);
    if (r && kvm_route_copy(&keep, r) != 0 && !rc)
        rc = KVMESH_ENOMEM;
    call_free(c);
    cb(cb_arg, rc, r ? &keep : NULL);
    kvm_route_free(&keep);
}

static void cas_txn_done(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    if (res->rc) {
        /* The txn may or may not have been applied. */
        int rc = res->rc == KVMESH_EINDETERMINATE || res->rc == KVMESH_ETIMEDOUT
                     ? KVMESH_EINDETERMINATE
                     : KVMESH_EUNAVAILABLE;
        if (rc == KVMESH_EINDETERMINATE)
            obs_count(mo->metrics, route_cas_total, OBS_CAS_INDETERMINATE, OBS_NONE, 1);
        cas_finish(c, kvm_errf(rc, "route CAS in metadata failed: %s", res->errmsg), NULL);
        return;
    }
    if (!res->succeeded) {
        if (++c->retries > ROUTE_MO_CAS_RETRIES) {
            cas_finish(c, kvm_errf(KVMESH_EUNAVAILABLE, "route CAS: key kept changing"), NULL);
            return;
        }
        kvm_route_free(&c->written);
        int rc = cas_read(c);
        if (rc)
            cas_finish(c, rc, NULL);
        return;
    }
    obs_count(mo->metrics, route_cas_total, OBS_CAS_APPLIED, OBS_NONE, 1);
    kvm_route_t w = c->written;
    kvm_route_init(&c->written);
    cas_finish(c, 0, &w);
    kvm_route_free(&w);
}

static void cas_get_done(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    if (res->rc) {
        cas_finish(c,
                   kvm_errf(res->rc == KVMESH_ETIMEDOUT ? res->rc : KVMESH_EUNAVAILABLE,
                            "route read before CAS failed: %s", res->errmsg),
                   NULL);
        return;
    }
    kvm_route_t cur;
    kvm_route_init(&cur);
    bool present = false;
    uint64_t seq = 0;
    int64_t mod_rev = 0;
    int rc;
    if (res->n_ops != 2) {
        cas_finish(c, kvm_errf(KVMESH_EBACKEND, "route read before CAS: %zu results", res->n_ops),
                   NULL);
        return;
    }
    const meta_kv_t *rkv = &res->ops[0], *fkv = &res->ops[1];
    /* The shard's version floor: the highest sequence of a purged route of the shard. A key
     * absent now is written above it, so a key recreated after its tombstone was purged never
     * reuses a version (the versions of one key stay strictly increasing across the purge). */
    uint64_t floor = 0;
    if (fkv->found) {
        char num[24];
        size_t n = fkv->value_len < sizeof(num) - 1 ? fkv->value_len : sizeof(num) - 1;
        memcpy(num, fkv->value, n);
        num[n] = 0;
        floor = strtoull(num, NULL, 10);
    }
    int64_t floor_rev = fkv->found ? fkv->mod_rev : 0;
    if (rkv->found) {
        if (wire_route_decode(rkv->value, rkv->value_len, &cur) != 0) {
            cas_finish(c, kvm_errf(KVMESH_ECORRUPT, "route record at %s does not decode", c->key),
                       NULL);
            return;
        }
        seq = cur.version.primary_sequence;
        mod_rev = rkv->mod_rev;
        present = !route_gone_for_cas(mo, &cur);
    }
    kvm_route_version_t effective = present ? cur.version : KVM_ROUTE_VERSION_NONE;
    if (!kvm_route_version_equal(&effective, &c->expected)) {
        obs_count(mo->metrics, route_cas_total, OBS_CAS_CONFLICT, OBS_NONE, 1);
        cas_finish(c, KVMESH_ECONFLICT, present ? &cur : NULL);
        kvm_route_free(&cur);
        return;
    }
    if (present && !kvm_route_tomb_transition_ok(cur.tomb, c->next_route.tomb)) {
        rc = kvm_errf(KVMESH_EINVAL, "route CAS: tombstone %s -> %s is not a legal transition",
                      kvm_tomb_state_name(cur.tomb), kvm_tomb_state_name(c->next_route.tomb));
        kvm_route_free(&cur);
        cas_finish(c, rc, NULL);
        return;
    }
    kvm_op_id_t cur_op = present ? cur.content_op : (kvm_op_id_t){0};
    kvm_route_free(&cur);
    if ((rc = kvm_route_copy(&c->written, &c->next_route)) != 0) {
        cas_finish(c, rc, NULL);
        return;
    }
    c->written.predecessor_version = effective;
    /* The predecessor op is assigned here, as the mesh's primary does. */
    c->written.predecessor_op = cur_op;
    if (kvm_op_id_equal(&c->written.predecessor_op, &c->written.content_op))
        memset(&c->written.predecessor_op, 0, sizeof(c->written.predecessor_op));
    c->written.version = (kvm_route_version_t){ROUTE_MO_TOKEN, (seq > floor ? seq : floor) + 1};
    uint8_t buf[KVM_WIRE_MAX_RECORD_LEN];
    size_t len = 0;
    if ((rc = kvm_route_validate(&c->written)) != 0 ||
        (rc = wire_route_encode(&c->written, buf, sizeof(buf), &len)) != 0) {
        cas_finish(c, kvm_errf(KVMESH_EINVAL, "route CAS: invalid route: %s", kvmesh_last_error()),
                   NULL);
        return;
    }
    c->kind = MO_CAS_TXN;
    /* guarded by the key's mod_rev and, for an absent key, by the floor's (a purge of this key
     * meanwhile raises the floor: re-read) */
    meta_cmp_t cmps[2] = {
        {.key = c->key, .target = META_CMP_MOD_REV, .op = META_EQ, .num = mod_rev},
        {.key = c->floor_key, .target = META_CMP_MOD_REV, .op = META_EQ, .num = floor_rev}};
    meta_op_t puts[2] = {{.type = META_OP_PUT, .key = c->key, .value = buf, .value_len = len}};
    size_t n_puts = 1;
    char due[KS_KEY_CAP];
    if (c->written.tomb != KVM_TOMB_NONE && c->written.retain_until_ms != 0 &&
        due_key_of(mo, &c->written, due, sizeof(due)) == 0)
        /* the expiry index entry the purge reads (a key too long for it is not indexed) */
        puts[n_puts++] = (meta_op_t){.type = META_OP_PUT,
                                     .key = due,
                                     .value = (const uint8_t *)c->key,
                                     .value_len = strlen(c->key)};
    mo->stats.meta_calls++;
    rc = meta_txn(mo->meta, cmps, rkv->found ? 1 : 2, puts, n_puts, NULL, 0, mo->timeout_ms,
                  cas_txn_done, c);
    if (rc)
        cas_finish(c, rc, NULL);
}

/* Reads the route and its shard's version floor (one txn of two GETs, no compares). */
static int cas_read(struct mo_call *c)
{
    c->kind = MO_CAS_GET;
    c->mo->stats.meta_calls++;
    meta_op_t gets[2] = {{.type = META_OP_GET, .key = c->key},
                         {.type = META_OP_GET, .key = c->floor_key}};
    return meta_txn(c->mo->meta, NULL, 0, gets, 2, NULL, 0, c->mo->timeout_ms, cas_get_done, c);
}

int route_mo_cas(route_mo_t *mo, const kvm_route_version_t *expected, const kvm_route_t *next,
                 route_cas_cb cb, void *arg)
{
    struct mo_call *c = call_new(mo, MO_CAS_GET, arg);
    if (!c)
        return KVMESH_ENOMEM;
    c->cas_cb = cb;
    c->expected = *expected;
    int rc = kvm_route_copy(&c->next_route, next);
    if (!rc)
        rc = route_key_of(mo, &next->ident, c->key, sizeof(c->key));
    if (!rc)
        rc = ks_route_floor_key(c->floor_key, sizeof(c->floor_key), mo->deployment,
                                kvm_ident_shard(&next->ident, mo->policy.n_shards));
    if (!rc)
        rc = cas_read(c);
    if (rc)
        call_free(c);
    return rc;
}

/* ---- tombstone purge ------------------------------------------------------------------------
 *
 * Every MO_PURGE_PERIOD_NS one pass: range MO_PURGE_PAGE entries from the start of the expiry
 * index (route-due/<retain until>/..., in deadline order), then for each entry due by
 * MO_PURGE_MARGIN_MS, one after the other:
 *   READ   txn GET route + GET the shard's version floor;
 *   PURGE  if the route is still the tombstone (finalized, or pending with a deadline) the
 *          entry was written for:
 *            txn [route mod_rev, floor mod_rev unchanged] -> DEL route, DEL entry,
 *                                                           PUT floor = max(floor, its seq)
 *          else (rewritten, or purged by another runtime): DEL entry.
 * The guards make concurrent purgers (every runtime runs one) and writers safe: a txn that lost
 * a race changes nothing, and the entry is retried by a later pass.
 * Counting: a PURGE txn that succeeded counts in purged; one that failed counts in purge_unknown
 * (its reply may have been lost after it applied: then route and entry are gone and no pass sees
 * them again; if it did not apply, a later pass purges the tombstone and counts it). A lost
 * reply cannot be told from a racing purger's success by reading back, so summed over every
 * purger: purged <= tombstones purged <= purged + purge_unknown (equal to purged when no purge
 * txn failed). */

static void purge_next(struct mo_call *c);

static uint64_t parse_floor(const meta_kv_t *kv)
{
    if (!kv->found)
        return 0;
    char num[24];
    size_t n = kv->value_len < sizeof(num) - 1 ? kv->value_len : sizeof(num) - 1;
    memcpy(num, kv->value, n);
    num[n] = 0;
    return strtoull(num, NULL, 10);
}

static void purge_fire(void *arg);

/* Ends a pass; one whose whole page was due (a backlog) is followed by the next at once. */
static void purge_end(struct mo_call *c)
{
    route_mo_t *mo = c->mo;
    bool backlog = c->n_due == MO_PURGE_PAGE && c->i_due >= c->n_due;
    call_free(c);
    if (mo) {
        mo->purge_busy = false;
        if (backlog && !mo->purge_timer)
            mo->purge_timer = env_timer_start(mo->env, 0, purge_fire, mo);
        else
            purge_arm(mo);
    }
}

static void purge_done(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    if (!c->mo) {
        call_free(c);
        return;
    }
    if (c->victim.tomb != KVM_TOMB_NONE) { /* a PURGE txn (else an entry's DEL) */
        if (res->rc == 0 && res->succeeded)
            atomic_fetch_add(&c->mo->purged, 1);
        else if (res->rc != 0)
            atomic_fetch_add(&c->mo->purge_unknown, 1);
    }
    kvm_route_free(&c->victim);
    c->i_due++;
    purge_next(c);
}

static void purge_read(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    if (res->rc || res->n_ops != 2) {
        purge_end(c); /* a later pass retries */
        return;
    }
    size_t i = c->i_due;
    const meta_kv_t *rkv = &res->ops[0], *fkv = &res->ops[1];
    kvm_route_free(&c->victim);
    bool still = rkv->found && wire_route_decode(rkv->value, rkv->value_len, &c->victim) == 0 &&
                 c->victim.tomb != KVM_TOMB_NONE && c->victim.retain_until_ms == c->due_until[i];
    meta_op_t del_due = {.type = META_OP_DEL, .key = c->due[i]};
    int rc;
    mo->stats.meta_calls++;
    if (!still) {
        kvm_route_free(&c->victim);
        rc = meta_txn(mo->meta, NULL, 0, &del_due, 1, NULL, 0, mo->timeout_ms, purge_done, c);
    } else {
        uint64_t floor = parse_floor(fkv), seq = c->victim.version.primary_sequence;
        char fv[24];
        int fl = snprintf(fv, sizeof(fv), "%" PRIu64, seq > floor ? seq : floor);
        meta_cmp_t cmps[2] = {{.key = c->due_route[i],
                               .target = META_CMP_MOD_REV,
                               .op = META_EQ,
                               .num = rkv->mod_rev},
                              {.key = c->due_floor[i],
                               .target = META_CMP_MOD_REV,
                               .op = META_EQ,
                               .num = fkv->found ? fkv->mod_rev : 0}};
        meta_op_t ops[3] = {{.type = META_OP_DEL, .key = c->due_route[i]},
                            del_due,
                            {.type = META_OP_PUT,
                             .key = c->due_floor[i],
                             .value = (const uint8_t *)fv,
                             .value_len = (size_t)fl}};
        rc = meta_txn(mo->meta, cmps, 2, ops, 3, NULL, 0, mo->timeout_ms, purge_done, c);
    }
    if (rc)
        purge_end(c);
}

static void purge_next(struct mo_call *c)
{
    route_mo_t *mo = c->mo;
    size_t i = c->i_due;
    if (i >= c->n_due || c->due_until[i] + MO_PURGE_MARGIN_MS > env_wall_ms(mo->env)) {
        purge_end(c); /* the index is in deadline order: nothing further is due */
        return;
    }
    mo->stats.meta_calls++;
    meta_op_t gets[2] = {{.type = META_OP_GET, .key = c->due_route[i]},
                         {.type = META_OP_GET, .key = c->due_floor[i]}};
    if (meta_txn(mo->meta, NULL, 0, gets, 2, NULL, 0, mo->timeout_ms, purge_read, c) != 0)
        purge_end(c);
}

/* One index entry: its deadline, and the route and floor keys of its object. */
static int due_parse(route_mo_t *mo, const char *due, uint64_t *until, char *route, char *floor)
{
    ks_parsed_t p;
    if (ks_parse(due, &p) != 0 || p.family != KS_ROUTE_DUE || p.n_parts != 4)
        return KVMESH_EPROTO;
    *until = p.parts[0].u;
    kvm_ident_t id;
    const char *dom = p.parts[2].s[0] ? p.parts[2].s : NULL;
    int rc = kvm_ident_init(&id, p.parts[1].s, dom, p.parts[3].s, strlen(p.parts[3].s));
    if (rc)
        return rc;
    uint32_t shard = kvm_ident_shard(&id, mo->policy.n_shards);
    kvm_ident_free(&id);
    if ((rc = ks_route_key(route, KS_KEY_CAP, mo->deployment, p.parts[1].s, p.parts[2].s,
                           p.parts[3].s)) != 0)
        return rc;
    return ks_route_floor_key(floor, KS_KEY_CAP, mo->deployment, shard);
}

static void purge_ranged(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    size_t n = res->rc ? 0 : res->n_kvs;
    c->due = calloc(n ? n : 1, sizeof(*c->due));
    c->due_route = calloc(n ? n : 1, sizeof(*c->due_route));
    c->due_floor = calloc(n ? n : 1, sizeof(*c->due_floor));
    c->due_until = calloc(n ? n : 1, sizeof(*c->due_until));
    if (!c->due || !c->due_route || !c->due_floor || !c->due_until) {
        purge_end(c);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = c->n_due;
        snprintf(c->due[k], KS_KEY_CAP, "%s", res->kvs[i].key);
        if (due_parse(mo, c->due[k], &c->due_until[k], c->due_route[k], c->due_floor[k]) == 0)
            c->n_due++; /* (an entry that does not parse is not ours to touch) */
    }
    c->i_due = 0;
    purge_next(c);
}

static void purge_fire(void *arg)
{
    route_mo_t *mo = arg;
    mo->purge_timer = 0;
    if (mo->purge_busy)
        return;
    struct mo_call *c = call_new(mo, MO_PURGE, NULL);
    char prefix[KS_KEY_CAP];
    if (!c || ks_prefix(prefix, sizeof(prefix), mo->deployment, KS_ROUTE_DUE, NULL, 0) != 0) {
        if (c)
            call_free(c);
        purge_arm(mo);
        return;
    }
    mo->purge_busy = true;
    mo->stats.meta_calls++;
    if (meta_range(mo->meta, prefix, NULL, MO_PURGE_PAGE, mo->timeout_ms, purge_ranged, c) != 0)
        purge_end(c);
}

static void purge_arm(route_mo_t *mo)
{
    if (!mo->purge_timer)
        mo->purge_timer = env_timer_start(mo->env, MO_PURGE_PERIOD_NS, purge_fire, mo);
}

uint64_t route_mo_purged(const route_mo_t *mo)
{
    return atomic_load(&((route_mo_t *)mo)->purged);
}

uint64_t route_mo_purge_unknown(const route_mo_t *mo)
{
    return atomic_load(&((route_mo_t *)mo)->purge_unknown);
}

/* ---- owner scan ---------------------------------------------------------------------------- */

static void scan_done(void *arg, const meta_result_t *res)
{
    struct mo_call *c = arg;
    route_mo_t *mo = c->mo;
    if (!mo) {
        call_free(c);
        return;
    }
    route_owner_cb cb = c->scan_cb;
    void *cb_arg = c->arg;
    if (res->rc) {
        int rc = kvm_errf(KVMESH_EUNAVAILABLE, "owner scan failed: %s", res->errmsg);
        call_free(c);
        cb(cb_arg, rc, NULL);
        return;
    }
    kvm_route_t *routes = calloc(res->n_kvs ? res->n_kvs : 1, sizeof(*routes));
    if (!routes) {
        call_free(c);
        cb(cb_arg, KVMESH_ENOMEM, NULL);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < res->n_kvs; i++) {
        kvm_route_t *r = &routes[n];
        if (wire_route_decode(res->kvs[i].value, res->kvs[i].value_len, r) != 0)
            continue; /* a corrupt record is skipped; lookups report it */
        bool hit = false;
        for (uint32_t j = 0; j < r->n_replicas && !hit; j++)
            hit = kvm_id128_equal(&r->replicas[j].owner, &c->owner);
        if (hit)
            n++;
        else
            kvm_route_free(r);
    }
    const char *last = res->n_kvs ? res->kvs[res->n_kvs - 1].key : NULL;
    route_owner_page_t page = {
        .routes = routes,
        .n = n,
        .next_cursor = (const uint8_t *)last,
        .next_cursor_len = last ? strlen(last) : 0,
        .complete = !res->more,
    };
    call_free(c);
    cb(cb_arg, 0, &page);
    for (size_t i = 0; i < n; i++)
        kvm_route_free(&routes[i]);
    free(routes);
}

int route_mo_owner_scan(route_mo_t *mo, const kvm_runtime_id_t *owner, const uint8_t *cursor,
                        size_t cursor_len, uint32_t limit, route_owner_cb cb, void *arg)
{
    if (limit == 0 || limit > ROUTE_OWNER_PAGE_MAX)
        limit = ROUTE_OWNER_PAGE_MAX;
    if (cursor_len >= KS_KEY_CAP)
        return kvm_errf(KVMESH_EINVAL, "owner scan cursor is %zu bytes", cursor_len);
    struct mo_call *c = call_new(mo, MO_SCAN, arg);
    if (!c)
        return KVMESH_ENOMEM;
    c->scan_cb = cb;
    c->owner = *owner;
    char after[KS_KEY_CAP];
    if (cursor_len)
        memcpy(after, cursor, cursor_len);
    after[cursor_len] = 0;
    int rc = ks_prefix(c->key, sizeof(c->key), mo->deployment, KS_ROUTE, NULL, 0);
    /* A cursor is the last route key of the previous page: anything else is refused, as the
     * mesh refuses a cursor it did not issue. */
    if (!rc && cursor_len &&
        (cursor_len <= strlen(c->key) || memcmp(after, c->key, strlen(c->key)) != 0 ||
         memchr(cursor, 0, cursor_len) != NULL))
        rc = kvm_errf(KVMESH_EINVAL, "owner scan cursor was not issued by this scan");
    if (!rc) {
        mo->stats.meta_calls++;
        rc = meta_range(mo->meta, c->key, cursor_len ? after : NULL, limit, mo->timeout_ms,
                        scan_done, c);
    }
    if (rc)
        call_free(c);
    return rc;
}

void route_mo_get_stats(const route_mo_t *mo, route_stats_t *out)
{
    *out = mo->stats;
    route_stats_from_registry(mo->metrics, out);
}
