/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvmesh.c — the public store API (include/kvmesh.h) over the store runtime (src/store).
 *
 * Owns: argument validation (every bad input returns a named code with a kvmesh_last_error()
 * message and touches nothing), the conversion of scopes and keys into identities, and the
 * mapping of batch items to per-item results. Everything else is the runtime's.
 *
 * Threading: every function may be called from many threads on one handle at once (the
 * runtime's hand-off is thread-safe); kvmesh_close must not race other calls on the same handle
 * (the caller orders it last). Ownership: inputs are borrowed for the call; kvmesh_get's buffer
 * is malloc'd and freed with kvmesh_free().
 */
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

#include "api/config.h"
#include "api/kvmesh_tools.h"
#include "core/util.h"
#include "env/clock.h"
#include "obs/metrics.h"
#include "api/upgrade.h"
#include "store/data.h"
#include "store/handoff.h"

struct kvmesh {
    kvm_rt_t *rt;
    atomic_bool drained;
};

/* ---- validation ---------------------------------------------------------------------------- */

static int check_handle(kvmesh_t *kv)
{
    kvm_err_clear();
    if (!kv)
        return kvm_errf(KVMESH_EINVAL, "the kvmesh handle is NULL; call kvmesh_open first");
    if (atomic_load(&kv->drained))
        return kvm_errf(KVMESH_ECLOSED, "this runtime was drained; open a new one");
    return 0;
}

/* An identity's encoding for one call: written into `store` (cap bytes, the caller's stack or a
 * batch's arena) when it fits, else allocated (ident_done tells the two apart). The store
 * copies every identity it keeps beyond the call (into its op records), so a call's identities
 * need to live only as long as the call. */
static int make_ident_in(const kvmesh_scope_t *scope, const void *key, size_t key_len,
                         kvm_ident_t *out, uint8_t *store, size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (!scope)
        return kvm_errf(KVMESH_EBADTENANT, "scope is NULL; a tenant is required");
    if (!scope->tenant)
        return kvm_errf(KVMESH_EBADTENANT, "scope.tenant is NULL; a tenant is required");
    if (!key)
        return kvm_errf(KVMESH_EBADKEY, "key is NULL");
    return kvm_ident_init_n_in(out, store, cap, scope->tenant, strlen(scope->tenant), scope->domain,
                               scope->domain ? strlen(scope->domain) : 0, key, key_len);
}

/* Ends an identity of make_ident_in: frees its encoding unless it lies in [store, store+cap). */
static void ident_done(kvm_ident_t *id, const uint8_t *store, size_t cap)
{
    if (id->enc && store && id->enc >= store && id->enc < store + cap)
        memset(id, 0, sizeof(*id));
    else
        kvm_ident_free(id);
}

/* A single op's identity encoding on the caller's stack (tenant, domain and key of up to this
 * many bytes together; longer ones are allocated). */
#define IDENT_STACK 512

static int check_opts(const kvmesh_put_opts_t *opts)
{
    if (!opts)
        return 0;
    if (opts->replicas > KVMESH_MAX_REPLICAS)
        return kvm_errf(KVMESH_EINVAL, "opts.replicas is %u; at most %d", opts->replicas,
                        KVMESH_MAX_REPLICAS);
    if (opts->n_preferred && !opts->preferred_owners)
        return kvm_errf(KVMESH_EINVAL, "opts.n_preferred is %zu but preferred_owners is NULL",
                        opts->n_preferred);
    if (opts->n_preferred > KVMESH_MAX_REPLICAS)
        return kvm_errf(KVMESH_EINVAL, "at most %d preferred owners", KVMESH_MAX_REPLICAS);
    for (size_t i = 0; i < opts->n_preferred; i++) {
        kvm_id128_t id;
        if (!opts->preferred_owners[i] || kvm_id128_parse(opts->preferred_owners[i], &id) != 0)
            return kvm_errf(KVMESH_EINVAL, "preferred_owners[%zu] is not a runtime id (32 hex)", i);
    }
    if (opts->hard_pin && opts->n_preferred == 0)
        return kvm_errf(KVMESH_EINVAL, "hard_pin needs at least one preferred owner");
    return 0;
}

static int check_len(kvmesh_t *kv, uint64_t len)
{
    if (len == 0)
        return kvm_errf(KVMESH_EINVAL, "empty values are not stored; a value has at least 1 byte");
    if (len > kv->rt->cfg.max_object_size)
        return kvm_errf(KVMESH_ETOOBIG, "value of %llu bytes exceeds max_object_size %llu",
                        (unsigned long long)len, (unsigned long long)kv->rt->cfg.max_object_size);
    return 0;
}

static int check_iov(const struct iovec *iov, int iovcnt, uint64_t *total)
{
    if (!iov || iovcnt < 1 || iovcnt > KVMESH_IOV_MAX)
        return kvm_errf(KVMESH_EINVAL, "iov must list 1..%d buffers (got %d%s)", KVMESH_IOV_MAX,
                        iovcnt, iov ? "" : ", NULL");
    uint64_t t = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (!iov[i].iov_base && iov[i].iov_len)
            return kvm_errf(KVMESH_EINVAL, "iov[%d] has a NULL base and %zu bytes", i,
                            iov[i].iov_len);
        t += iov[i].iov_len;
    }
    *total = t;
    return 0;
}

/* ---- request metrics ---------------------------------------------------------------------------
 */

static int res_of(int rc)
{
    switch (rc) {
    case 0:
        return OBS_RES_OK;
    case KVMESH_ENOENT:
        return OBS_RES_NOT_FOUND;
    case KVMESH_EINVAL:
    case KVMESH_EBADKEY:
    case KVMESH_EBADTENANT:
    case KVMESH_EBADDOMAIN:
    case KVMESH_ETOOBIG:
        return OBS_RES_INVALID;
    case KVMESH_EQUOTA:
        return OBS_RES_QUOTA;
    case KVMESH_ETIMEDOUT:
        return OBS_RES_TIMEOUT;
    case KVMESH_EUNAVAILABLE:
    case KVMESH_ENOSPC:
        return OBS_RES_UNAVAILABLE;
    default:
        return OBS_RES_ERROR;
    }
}

/* The runtime's metrics registry (NULL for a NULL or unopened handle: nothing is counted). */
static struct obs_registry *reg_of(const kvmesh_t *kv)
{
    return kv && kv->rt ? kv->rt->metrics : NULL;
}

/* Starts counting one API request (in flight) and returns its start time. */
static uint64_t rec_begin(kvmesh_t *kv, int op)
{
    obs_gauge_add(reg_of(kv), requests_in_flight, op, OBS_NONE, 1);
    return env_clock_mono_ns();
}

/* Counts one API request (requests, errors, bytes, latency, payload size, per-tenant counters)
 * and returns rc. */
static int rec(kvmesh_t *kv, const kvmesh_scope_t *scope, int op, uint64_t t0, uint64_t bytes,
               int rc)
{
    struct obs_registry *reg = reg_of(kv);
    int res = res_of(rc);
    bool failed = rc && rc != KVMESH_ENOENT;
    obs_count(reg, requests_total, op, res, 1);
    if (failed)
        obs_count(reg, request_errors_total, op, OBS_NONE, 1);
    if (reg && scope && scope->tenant) { /* labelled only for the bootstrap set, else "other" */
        unsigned slot = obs_tenant_slot(scope->tenant, strlen(scope->tenant));
        obs_tenant_count(reg, tenant_requests_total, slot, 1);
        if (!rc && bytes)
            obs_tenant_count(reg, tenant_request_bytes_total, slot, bytes);
        if (failed)
            obs_tenant_count(reg, tenant_request_errors_total, slot, 1);
    }
    if (!rc && bytes) {
        obs_count(reg, request_bytes_total, op, OBS_NONE, bytes);
        obs_observe(reg, request_payload_bytes, op, OBS_NONE, bytes);
    }
    obs_observe(reg, request_duration_seconds, op, OBS_NONE, env_clock_mono_ns() - t0);
    obs_gauge_add(reg, requests_in_flight, op, OBS_NONE, -1);
    return rc;
}

static uint64_t iov_total(const struct iovec *iov, int iovcnt)
{
    uint64_t t = 0;
    for (int i = 0; iov && i < iovcnt && i <= KVMESH_IOV_MAX; i++)
        t += iov[i].iov_len;
    return t;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int kvmesh_open(kvmesh_t **out, const kvmesh_config_t *cfg)
{
    return kvm_api_open(out, cfg, NULL);
}

int kvm_api_open(kvmesh_t **out, const kvmesh_config_t *cfg, struct kvm_handoff *h)
{
    kvm_err_clear();
    if (!out || !cfg)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_open: out and cfg are required");
    *out = NULL;
    int rc = kvm_config_validate(cfg);
    if (rc)
        return rc;
    kvmesh_t *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return KVMESH_ENOMEM;
    struct kvm_store_config scfg;
    kvm_config_to_store(cfg, &scfg);
    if ((rc = h ? kvm_rt_open_adopt(&kv->rt, &scfg, h) : kvm_rt_open(&kv->rt, &scfg)) != 0) {
        free(kv);
        return rc;
    }
    *out = kv;
    return 0;
}

int kvmesh_drain(kvmesh_t *kv, uint32_t timeout_ms)
{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    size_t moved, failed;
    rc = kvm_store_drain(kv->rt, timeout_ms ? timeout_ms : kv->rt->cfg.drain_timeout_ms, &moved,
                         &failed);
    atomic_store(&kv->drained, true);
    return rc;
}

int kvmesh_close(kvmesh_t *kv)
{
    if (!kv)
        return 0;
    int rc = kvm_rt_close(kv->rt, false);
    free(kv);
    return rc;
}

void kvmesh_free(void *p)
{
    free(p);
}

/* ---- single operations ------------------------------------------------------------------------
 */

static int put_sg(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                  const struct iovec *iov, int iovcnt, uint64_t len, const kvmesh_put_opts_t *opts)
{
    kvm_ident_t id;
    uint8_t idbuf[IDENT_STACK];
    int rc;
    if ((rc = check_len(kv, len)) || (rc = check_opts(opts)) ||
        (rc = make_ident_in(scope, key, key_len, &id, idbuf, sizeof(idbuf))))
        return rc;
    struct kvm_sg sg = {iov, iovcnt, len};
    int item_rc = 0;
    rc = kvm_store_put(kv->rt, &id, &sg, 1, opts, &item_rc);
    ident_done(&id, idbuf, sizeof(idbuf));
    return rc ? rc : item_rc;
}

static int put_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                    const void *value, size_t len, const kvmesh_put_opts_t *opts)

{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!value)
        return kvm_errf(KVMESH_EINVAL, "value is NULL");
    struct iovec iov = {(void *)value, len};
    return put_sg(kv, scope, key, key_len, &iov, 1, len, opts);
}

int kvmesh_put(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
               const void *value, size_t len, const kvmesh_put_opts_t *opts)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_PUT);
    int rc = put_impl(kv, scope, key, key_len, value, len, opts);
    return rec(kv, scope, OBS_OP_PUT, t0, rc ? 0 : (uint64_t)(len), rc);
}

static int putv_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                     const struct iovec *iov, int iovcnt, const kvmesh_put_opts_t *opts)

{
    int rc = check_handle(kv);
    uint64_t len = 0;
    if (rc || (rc = check_iov(iov, iovcnt, &len)))
        return rc;
    return put_sg(kv, scope, key, key_len, iov, iovcnt, len, opts);
}

int kvmesh_putv(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                const struct iovec *iov, int iovcnt, const kvmesh_put_opts_t *opts)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_PUT);
    int rc = putv_impl(kv, scope, key, key_len, iov, iovcnt, opts);
    return rec(kv, scope, OBS_OP_PUT, t0, rc ? 0 : (uint64_t)(iov_total(iov, iovcnt)), rc);
}

static int get_one(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                   struct kvm_sgout *o)
{
    kvm_ident_t id;
    uint8_t idbuf[IDENT_STACK];
    int rc = make_ident_in(scope, key, key_len, &id, idbuf, sizeof(idbuf));
    if (rc)
        return rc;
    rc = kvm_store_get(kv->rt, &id, o, 1);
    ident_done(&id, idbuf, sizeof(idbuf));
    if (!rc)
        rc = o->rc;
    if (rc == KVMESH_ETOOBIG)
        rc = kvm_errf(rc, "the object is %llu bytes; the buffer holds %llu",
                      (unsigned long long)o->out_len, (unsigned long long)o->cap);
    else if (rc == KVMESH_ENOENT)
        rc = kvm_errf(rc, "no object with this key in this tenant/domain");
    return rc;
}

static int get_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                    void **out, size_t *out_len)

{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!out || !out_len)
        return kvm_errf(KVMESH_EINVAL, "out and out_len are required");
    *out = NULL;
    *out_len = 0;
    struct kvm_sgout o = {.alloc = true}; /* (the request record lives on this stack) */
    rc = get_one(kv, scope, key, key_len, &o);
    if (rc == 0) {
        *out = o.alloc_buf;
        *out_len = o.out_len;
    } else {
        free(o.alloc_buf);
    }
    return rc;
}

int kvmesh_get(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
               void **out, size_t *out_len)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_GET);
    int rc = get_impl(kv, scope, key, key_len, out, out_len);
    return rec(kv, scope, OBS_OP_GET, t0, rc ? 0 : (uint64_t)(out_len ? *out_len : 0), rc);
}

static int get_into_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                         void *buf, size_t cap, size_t *out_len)

{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!out_len || (!buf && cap))
        return kvm_errf(KVMESH_EINVAL, "out_len is required and buf may be NULL only with cap 0");
    struct kvm_sgout o = {.one = {buf, cap}, .iovcnt_in = 1, .cap = cap};
    rc = get_one(kv, scope, key, key_len, &o);
    *out_len = (rc == 0 || rc == KVMESH_ETOOBIG) ? o.out_len : 0;
    return rc;
}

int kvmesh_get_into(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                    void *buf, size_t cap, size_t *out_len)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_GET);
    int rc = get_into_impl(kv, scope, key, key_len, buf, cap, out_len);
    return rec(kv, scope, OBS_OP_GET, t0, rc ? 0 : (uint64_t)(out_len ? *out_len : 0), rc);
}

static int getv_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                     const struct iovec *iov, int iovcnt, size_t *out_len)

{
    int rc = check_handle(kv);
    uint64_t cap = 0;
    if (rc || (rc = check_iov(iov, iovcnt, &cap)))
        return rc;
    if (!out_len)
        return kvm_errf(KVMESH_EINVAL, "out_len is required");
    struct kvm_sgout o = {.iov_in = iov, .iovcnt_in = iovcnt, .cap = cap};
    rc = get_one(kv, scope, key, key_len, &o);
    *out_len = (rc == 0 || rc == KVMESH_ETOOBIG) ? o.out_len : 0;
    return rc;
}

int kvmesh_getv(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                const struct iovec *iov, int iovcnt, size_t *out_len)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_GET);
    int rc = getv_impl(kv, scope, key, key_len, iov, iovcnt, out_len);
    return rec(kv, scope, OBS_OP_GET, t0, rc ? 0 : (uint64_t)(out_len ? *out_len : 0), rc);
}

static int remove_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len)

{
    int rc = check_handle(kv);
    kvm_ident_t id;
    uint8_t idbuf[IDENT_STACK];
    if (rc || (rc = make_ident_in(scope, key, key_len, &id, idbuf, sizeof(idbuf))))
        return rc;
    int item = 0;
    rc = kvm_store_remove(kv->rt, &id, 1, &item);
    ident_done(&id, idbuf, sizeof(idbuf));
    rc = rc ? rc : item;
    if (rc == KVMESH_ENOENT)
        rc = kvm_errf(rc, "no object with this key in this tenant/domain");
    return rc;
}

int kvmesh_remove(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_REMOVE);
    int rc = remove_impl(kv, scope, key, key_len);
    return rec(kv, scope, OBS_OP_REMOVE, t0, rc ? 0 : (uint64_t)(0), rc);
}

static int lookup_one(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                      kvm_route_t *route)
{
    int rc = check_handle(kv);
    kvm_ident_t id;
    uint8_t idbuf[IDENT_STACK];
    if (rc || (rc = make_ident_in(scope, key, key_len, &id, idbuf, sizeof(idbuf))))
        return rc;
    int item = 0;
    rc = kvm_store_lookup(kv->rt, &id, 1, route, &item);
    ident_done(&id, idbuf, sizeof(idbuf));
    rc = rc ? rc : item;
    if (rc == KVMESH_ENOENT)
        rc = kvm_errf(rc, "no object with this key in this tenant/domain");
    return rc;
}

static int exists_impl(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                       bool *out)

{
    if (!out)
        return kvm_errf(KVMESH_EINVAL, "out is required");
    *out = false;
    int rc = lookup_one(kv, scope, key, key_len, NULL);
    if (rc == KVMESH_ENOENT) {
        kvm_err_clear();
        return 0;
    }
    *out = rc == 0;
    return rc;
}

int kvmesh_exists(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                  bool *out)

{
    uint64_t t0 = rec_begin(kv, OBS_OP_EXIST);
    int rc = exists_impl(kv, scope, key, key_len, out);
    return rec(kv, scope, OBS_OP_EXIST, t0, rc ? 0 : (uint64_t)(0), rc);
}

int kvmesh_size(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                uint64_t *out)
{
    if (!out)
        return kvm_errf(KVMESH_EINVAL, "out is required");
    kvm_route_t r;
    kvm_route_init(&r);
    int rc = lookup_one(kv, scope, key, key_len, &r);
    *out = rc ? 0 : r.length;
    kvm_route_free(&r);
    return rc;
}

int kvmesh_route_query(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key, size_t key_len,
                       kvmesh_route_info_t *out)
{
    if (!out)
        return kvm_errf(KVMESH_EINVAL, "out is required");
    memset(out, 0, sizeof(*out));
    kvm_route_t r;
    kvm_route_init(&r);
    int rc = lookup_one(kv, scope, key, key_len, &r);
    if (!rc) {
        out->fencing_token = r.version.fencing_token;
        out->primary_sequence = r.version.primary_sequence;
        out->length = r.length;
        out->checksum = r.checksum;
        out->n_replicas = r.n_replicas;
        for (uint32_t i = 0; i < r.n_replicas && i < KVMESH_MAX_REPLICAS; i++) {
            kvm_id128_fmt(&r.replicas[i].owner, out->replicas[i].owner);
            out->replicas[i].segment = r.replicas[i].segment;
            out->replicas[i].offset = r.replicas[i].offset;
            out->replicas[i].length = r.replicas[i].length;
        }
        out->cold_backed = r.cold.kind == KVM_COLD_MATERIALIZED;
    }
    kvm_route_free(&r);
    return rc;
}

int kvmesh_register_buffer(kvmesh_t *kv, void *addr, size_t len)
{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!addr || !len)
        return kvm_errf(KVMESH_EINVAL, "cannot register a NULL or empty buffer");
    return kvm_rt_register(kv->rt, addr, len);
}

int kvmesh_unregister_buffer(kvmesh_t *kv, void *addr)
{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!addr)
        return kvm_errf(KVMESH_EINVAL, "addr is NULL");
    return kvm_rt_unregister(kv->rt, addr);
}

/* ---- batches ------------------------------------------------------------------------------ */

enum batch_kind { B_PUT, B_GET, B_REMOVE, B_EXISTS };

static int batch(kvmesh_t *kv, enum batch_kind kind, const kvmesh_scope_t *scope,
                 kvmesh_batch_item_t *items, size_t n, const kvmesh_put_opts_t *opts)
{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!items && n)
        return kvm_errf(KVMESH_EINVAL, "items is NULL with n = %zu", n);
    if (n > KVMESH_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "batch of %zu items; at most %d", n, KVMESH_BATCH_MAX);
    if (kind == B_PUT && (rc = check_opts(opts)))
        return rc;
    if (n == 0)
        return 0;
    /* The items' identity encodings in one arena (an allocation per batch, not per item): each
     * takes at most the bytes of a valid one (a longer part fails validation first). */
    size_t tl = scope && scope->tenant ? strnlen(scope->tenant, 256) : 0;
    size_t dl = scope && scope->domain ? strnlen(scope->domain, 256) : 0;
    size_t arena_cap = 0, arena_at = 0;
    for (size_t i = 0; i < n; i++)
        arena_cap += 5 + tl + dl + KVM_MIN(items[i].key_len, (size_t)KVM_KEY_MAX_LEN);
    uint8_t *arena = malloc(arena_cap); /* (NULL: each identity allocates its own) */
    kvm_ident_t *ids = calloc(n, sizeof(*ids));
    size_t *map = calloc(n, sizeof(*map));
    int *rcs = calloc(n, sizeof(*rcs));
    struct kvm_sg *sgs = kind == B_PUT ? calloc(n, sizeof(*sgs)) : NULL;
    struct iovec *iovs = kind == B_PUT ? calloc(n, sizeof(*iovs)) : NULL;
    struct kvm_sgout *outs = kind == B_GET ? calloc(n, sizeof(*outs)) : NULL;
    kvm_route_t *routes = kind == B_EXISTS ? calloc(n, sizeof(*routes)) : NULL;
    if (!ids || !map || !rcs || (kind == B_PUT && (!sgs || !iovs)) || (kind == B_GET && !outs) ||
        (kind == B_EXISTS && !routes)) {
        rc = KVMESH_ENOMEM;
        goto out;
    }
    size_t m = 0;
    int first_bad = 0;
    char bad_msg[256] = "";
    for (size_t i = 0; i < n; i++) {
        kvmesh_batch_item_t *it = &items[i];
        it->out_len = 0;
        int r = make_ident_in(scope, it->key, it->key_len, &ids[m], arena ? arena + arena_at : NULL,
                              arena_cap - arena_at);
        if (!r && kind == B_PUT) {
            if (!it->buf)
                r = kvm_errf(KVMESH_EINVAL, "items[%zu].buf is NULL", i);
            else
                r = check_len(kv, it->len);
        }
        if (!r && kind == B_GET && !it->buf && it->len)
            r = kvm_errf(KVMESH_EINVAL, "items[%zu].buf is NULL with len %zu", i, it->len);
        it->rc = r;
        if (r) {
            ident_done(&ids[m], arena, arena_cap);
            if (!first_bad) {
                first_bad = r;
                snprintf(bad_msg, sizeof(bad_msg), "items[%zu]: %s", i, kvmesh_last_error());
            }
            continue;
        }
        if (kind == B_PUT) {
            iovs[m] = (struct iovec){it->buf, it->len};
            sgs[m] = (struct kvm_sg){&iovs[m], 1, it->len};
        } else if (kind == B_GET) {
            outs[m].one = (struct iovec){it->buf, it->len};
            outs[m].iovcnt_in = 1;
            outs[m].cap = it->len;
        } else if (kind == B_EXISTS) {
            kvm_route_init(&routes[m]);
        }
        if (arena && ids[m].enc == arena + arena_at)
            arena_at += ids[m].enc_len;
        map[m++] = i;
    }
    if (m) {
        switch (kind) {
        case B_PUT:
            rc = kvm_store_put(kv->rt, ids, sgs, m, opts, rcs);
            break;
        case B_GET:
            rc = kvm_store_get(kv->rt, ids, outs, m);
            for (size_t j = 0; j < m; j++)
                rcs[j] = outs[j].rc;
            break;
        case B_REMOVE:
            rc = kvm_store_remove(kv->rt, ids, m, rcs);
            break;
        case B_EXISTS:
            rc = kvm_store_lookup(kv->rt, ids, m, routes, rcs);
            break;
        }
    }
    int first = 0;
    for (size_t j = 0; j < m; j++) {
        kvmesh_batch_item_t *it = &items[map[j]];
        it->rc = rcs[j];
        if (kind == B_GET && (rcs[j] == 0 || rcs[j] == KVMESH_ETOOBIG))
            it->out_len = outs[j].out_len;
        if (kind == B_EXISTS && rcs[j] == 0)
            it->out_len = routes[j].length;
    }
    for (size_t i = 0; i < n && !first; i++)
        first = items[i].rc;
    if (first == first_bad && first_bad && bad_msg[0])
        kvm_errf(first_bad, "%s", bad_msg);
    rc = first;
out:
    for (size_t j = 0; ids && j < n; j++)
        ident_done(&ids[j], arena, arena_cap);
    free(arena);
    for (size_t j = 0; routes && j < n; j++)
        kvm_route_free(&routes[j]);
    free(ids);
    free(map);
    free(rcs);
    free(sgs);
    free(iovs);
    free(outs);
    free(routes);
    return rc;
}

int kvmesh_batch_put(kvmesh_t *kv, const kvmesh_scope_t *scope, kvmesh_batch_item_t *items,
                     size_t n, const kvmesh_put_opts_t *opts)
{
    uint64_t t0 = rec_begin(kv, OBS_OP_BATCH_PUT);
    int rc = batch(kv, B_PUT, scope, items, n, opts);
    return rec(kv, scope, OBS_OP_BATCH_PUT, t0, 0, rc);
}

int kvmesh_batch_get(kvmesh_t *kv, const kvmesh_scope_t *scope, kvmesh_batch_item_t *items,
                     size_t n)
{
    uint64_t t0 = rec_begin(kv, OBS_OP_BATCH_GET);
    int rc = batch(kv, B_GET, scope, items, n, NULL);
    return rec(kv, scope, OBS_OP_BATCH_GET, t0, 0, rc);
}

int kvmesh_batch_remove(kvmesh_t *kv, const kvmesh_scope_t *scope, kvmesh_batch_item_t *items,
                        size_t n)
{
    uint64_t t0 = rec_begin(kv, OBS_OP_BATCH_REMOVE);
    int rc = batch(kv, B_REMOVE, scope, items, n, NULL);
    return rec(kv, scope, OBS_OP_BATCH_REMOVE, t0, 0, rc);
}

int kvmesh_batch_exists(kvmesh_t *kv, const kvmesh_scope_t *scope, kvmesh_batch_item_t *items,
                        size_t n)
{
    uint64_t t0 = rec_begin(kv, OBS_OP_EXIST);
    int rc = batch(kv, B_EXISTS, scope, items, n, NULL);
    return rec(kv, scope, OBS_OP_EXIST, t0, 0, rc);
}

/* ---- cluster view ------------------------------------------------------------------------------
 */

int kvmesh_members(kvmesh_t *kv, kvmesh_member_info_t *out, size_t cap, size_t *n)
{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!n || (!out && cap))
        return kvm_errf(KVMESH_EINVAL, "n is required and out may be NULL only with cap 0");
    kvm_op_t *op = kvm_op_new(kv->rt, KVM_OP_MEMBERS, 0);
    if (!op)
        return KVMESH_ENOMEM;
    op->members = out;
    op->members_cap = cap;
    rc = kvm_op_run(op);
    *n = op->members_n;
    kvm_op_unref(op);
    return rc;
}

int kvmesh_self(kvmesh_t *kv, char id[KVMESH_ID_HEX_LEN + 1], uint64_t *epoch)
{
    int rc = check_handle(kv);
    if (rc)
        return rc;
    if (!id || !epoch)
        return kvm_errf(KVMESH_EINVAL, "id and epoch are required");
    kvm_id128_fmt(&kv->rt->self.id, id);
    *epoch = kv->rt->self.epoch;
    return 0;
}

/* The runtime behind a handle, for tests (api/kvmesh_tools.h); not exported. */
kvm_rt_t *kvmesh_runtime_of(kvmesh_t *kv)
{
    return kv ? kv->rt : NULL;
}
