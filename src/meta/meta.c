/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta.c — the metadata dispatcher: picks the backend by URL scheme, validates every request,
 * deep-copies it into a meta_call_t, arms its deadline, counts it, keeps it on the handle's
 * pending list until the user has been answered, and answers the user exactly once.
 *
 * Metrics: the one place metadata calls are counted, into the handle's registry —
 * kvmesh_metadata_operations_total{backend,operation} at submit,
 * kvmesh_metadata_errors_total{backend,operation} for every call answered with an error
 * (including deadline and close) or refused before submit, and
 * kvmesh_metadata_duration_seconds{backend,operation} from submit to the answer.
 *
 * Call life (refs = 2 at submit: one for the user side, one for the backend):
 *
 *     submit --> PENDING --backend completes--> ANSWERED(result) --+
 *                   |  \--deadline timer-----> ANSWERED(ETIMEDOUT) +--> both refs dropped: free
 *                   \----meta_close---------> ANSWERED(ECANCELED) -+
 *
 * "Answered" is call->user_done; once set, a later backend completion is dropped. The call's
 * memory is freed when both the user side and the backend side have released it, so backends may
 * hold the pointer until they complete it, even past meta_close().
 *
 * Invariants:
 *   - a user callback never runs inside the meta_* call that submitted it (a backend completing
 *     synchronously inside submit() is deferred to a later loop turn);
 *   - a call is on m->pending iff !user_done; its deadline timer is armed iff it is pending;
 *   - after meta_close() returns (or, when closed from inside a metadata callback, after the
 *     next loop turn) no callback runs for that handle and its memory is gone.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util.h"
#include "meta/meta_impl.h"
#include "obs/metrics.h"

#define META_URL_MAX          2048
#define META_LEASE_TTL_MAX_MS (7LL * 24 * 3600 * 1000) /* a week: longer leases are a bug */
#define META_ERRMSG_MAX       512

/*
 * The scheme table. Backends add one line each; a line with ops == NULL names a scheme that is
 * known but refused, with the reason shown to the user.
 */
static const struct meta_scheme {
    const char *scheme;
    const struct meta_backend_ops *ops;
    const char *refusal;
} meta_schemes[] = {
    {"memory", &meta_memory_ops, NULL},
    {"rediss", NULL,
     "TLS not available in this build (hiredis is built without TLS); use redis:// on a trusted "
     "network or a local TLS tunnel (e.g. stunnel)"},
    /* Redis backend: its line goes below this comment (one line). */
    {"redis", &meta_redis_ops, NULL},
    /* ---- */
    /* etcd backend: its line goes below this comment (one line). */
    {"etcd", &meta_etcd_ops, NULL},
};

/* The call being submitted on this thread (for the "never synchronously" rule). */
static _Thread_local meta_call_t *tl_submitting;
/* Depth of user callbacks running on this thread (meta_close inside one defers its free). */
static _Thread_local int tl_in_callback;

static const char *kind_name(enum meta_call_kind k)
{
    switch (k) {
    case META_CALL_GET:
        return "get";
    case META_CALL_RANGE:
        return "range";
    case META_CALL_TXN:
        return "txn";
    case META_CALL_LEASE_GRANT:
        return "lease_grant";
    case META_CALL_LEASE_KEEPALIVE:
        return "lease_keepalive";
    case META_CALL_LEASE_REVOKE:
        return "lease_revoke";
    case META_CALL_LEASE_TTL:
        return "lease_ttl";
    }
    return "?";
}

static unsigned mcall_of(enum meta_call_kind k)
{
    switch (k) {
    case META_CALL_GET:
        return OBS_MCALL_GET;
    case META_CALL_RANGE:
        return OBS_MCALL_RANGE;
    case META_CALL_TXN:
        return OBS_MCALL_TXN;
    case META_CALL_LEASE_GRANT:
        return OBS_MCALL_LEASE_GRANT;
    case META_CALL_LEASE_KEEPALIVE:
        return OBS_MCALL_LEASE_KEEPALIVE;
    case META_CALL_LEASE_REVOKE:
        return OBS_MCALL_LEASE_REVOKE;
    case META_CALL_LEASE_TTL:
        return OBS_MCALL_LEASE_TTL;
    }
    KVM_ASSERT(!"unknown metadata call kind");
    return OBS_MCALL_GET;
}

static int backend_idx_of(const char *name)
{
    if (strcmp(name, "memory") == 0)
        return OBS_BACKEND_MEMORY;
    if (strcmp(name, "redis") == 0)
        return OBS_BACKEND_REDIS;
    if (strcmp(name, "etcd") == 0)
        return OBS_BACKEND_ETCD;
    return -1;
}

/* The registry to count into, or NULL (forwarding handles, unknown backends). */
static struct obs_registry *reg_of(const meta_t *m)
{
    return m->backend_idx >= 0 ? m->metrics : NULL;
}

/* ---- URL scheme ---------------------------------------------------------------------------- */

int meta_url_scheme(const char *url, char *scheme, size_t cap)
{
    if (!url)
        return kvm_errf(KVMESH_EURL, "metadata URL is NULL; expected e.g. memory://NAME, "
                                     "redis://host:port or etcd://host:port");
    size_t len = strnlen(url, META_URL_MAX + 1);
    if (len > META_URL_MAX)
        return kvm_errf(KVMESH_EURL, "metadata URL is longer than %d bytes", META_URL_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c >= 0x7f)
            return kvm_errf(KVMESH_EURL,
                            "metadata URL has a space, control or non-ASCII byte 0x%02x at offset "
                            "%zu; percent-encode it",
                            c, i);
    }
    const char *sep = strstr(url, "://");
    if (!sep)
        return kvm_errf(KVMESH_EURL,
                        "metadata URL '%.200s' has no scheme; expected memory://NAME, "
                        "redis://host:port or etcd://host:port",
                        url);
    size_t n = (size_t)(sep - url);
    if (n == 0 || n >= cap)
        return kvm_errf(KVMESH_EURL, "metadata URL '%.200s' has an empty or overlong scheme", url);
    for (size_t i = 0; i < n; i++) {
        char c = url[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
        if (!ok)
            return kvm_errf(KVMESH_EURL, "metadata URL '%.200s': invalid scheme character '%c'",
                            url, c);
        scheme[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    scheme[n] = '\0';
    return 0;
}

static int find_backend(const char *url, const struct meta_backend_ops **out)
{
    char scheme[32];
    int rc = meta_url_scheme(url, scheme, sizeof(scheme));
    if (rc)
        return rc;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(meta_schemes); i++) {
        if (strcmp(meta_schemes[i].scheme, scheme) != 0)
            continue;
        if (!meta_schemes[i].ops)
            return kvm_errf(KVMESH_EURL, "metadata URL scheme %s://: %s", scheme,
                            meta_schemes[i].refusal);
        *out = meta_schemes[i].ops;
        return 0;
    }
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(meta_schemes); i++) {
        if (!meta_schemes[i].ops)
            continue;
        int w = snprintf(list + used, sizeof(list) - used, "%s%s://", used ? ", " : "",
                         meta_schemes[i].scheme);
        if (w < 0 || (size_t)w >= sizeof(list) - used)
            break;
        used += (size_t)w;
    }
    return kvm_errf(KVMESH_EURL,
                    "unsupported metadata URL scheme '%s://' (this build supports: %s)", scheme,
                    list);
}

/* ---- validation ---------------------------------------------------------------------------- */

static int check_key(const char *what, const char *key)
{
    if (!key)
        return kvm_errf(KVMESH_EINVAL, "%s is NULL", what);
    size_t n = strnlen(key, META_KEY_MAX + 1);
    if (n == 0)
        return kvm_errf(KVMESH_EINVAL, "%s is empty; metadata keys have 1..%d bytes", what,
                        META_KEY_MAX);
    if (n > META_KEY_MAX)
        return kvm_errf(KVMESH_ETOOBIG, "%s is longer than %d bytes", what, META_KEY_MAX);
    return 0;
}

static int check_value(const char *what, const uint8_t *v, size_t len)
{
    if (len > META_VALUE_MAX)
        return kvm_errf(KVMESH_ETOOBIG, "%s is %zu bytes; the limit is %d", what, len,
                        META_VALUE_MAX);
    if (len > 0 && !v)
        return kvm_errf(KVMESH_EINVAL, "%s is NULL with length %zu", what, len);
    return 0;
}

static int check_cmp(const meta_cmp_t *c, size_t i)
{
    char what[48];
    snprintf(what, sizeof(what), "txn compare %zu key", i);
    int rc = check_key(what, c->key);
    if (rc)
        return rc;
    if ((unsigned)c->op > META_GT)
        return kvm_errf(KVMESH_EINVAL, "txn compare %zu: unknown op %d", i, (int)c->op);
    switch (c->target) {
    case META_CMP_EXISTS:
        if (c->op != META_EQ || (c->num != 0 && c->num != 1))
            return kvm_errf(KVMESH_EINVAL,
                            "txn compare %zu: EXISTS takes op META_EQ and num 0 or 1", i);
        return 0;
    case META_CMP_VALUE:
        if (c->op != META_EQ && c->op != META_NE)
            return kvm_errf(KVMESH_EINVAL, "txn compare %zu: VALUE takes op META_EQ or META_NE", i);
        snprintf(what, sizeof(what), "txn compare %zu value", i);
        return check_value(what, c->value, c->value_len);
    case META_CMP_VERSION:
    case META_CMP_MOD_REV:
    case META_CMP_CREATE_REV:
    case META_CMP_LEASE:
        return 0;
    }
    return kvm_errf(KVMESH_EINVAL, "txn compare %zu: unknown target %d", i, (int)c->target);
}

static int check_ops(const char *branch, const meta_op_t *ops, size_t n)
{
    if (n > META_TXN_MAX_OPS)
        return kvm_errf(KVMESH_ERANGE, "txn %s branch has %zu ops; the limit is %d", branch, n,
                        META_TXN_MAX_OPS);
    if (n > 0 && !ops)
        return kvm_errf(KVMESH_EINVAL, "txn %s ops array is NULL with count %zu", branch, n);
    for (size_t i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "txn %s op %zu key", branch, i);
        int rc = check_key(what, ops[i].key);
        if (rc)
            return rc;
        switch (ops[i].type) {
        case META_OP_PUT:
            snprintf(what, sizeof(what), "txn %s op %zu value", branch, i);
            if ((rc = check_value(what, ops[i].value, ops[i].value_len)) != 0)
                return rc;
            if (ops[i].lease < 0)
                return kvm_errf(KVMESH_EINVAL, "txn %s op %zu: negative lease id", branch, i);
            break;
        case META_OP_DEL:
        case META_OP_GET:
            break;
        default:
            return kvm_errf(KVMESH_EINVAL, "txn %s op %zu: unknown type %d", branch, i,
                            (int)ops[i].type);
        }
        if (ops[i].type == META_OP_GET)
            continue;
        /* etcd refuses a txn that writes one key twice: refuse it everywhere */
        for (size_t j = 0; j < i; j++)
            if (ops[j].type != META_OP_GET && strcmp(ops[j].key, ops[i].key) == 0)
                return kvm_errf(KVMESH_EINVAL,
                                "txn %s branch writes key '%.100s' twice (ops %zu and %zu); one "
                                "write per key per branch",
                                branch, ops[i].key, j, i);
    }
    return 0;
}

static int check_txn_size(const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *t, size_t nt,
                          const meta_op_t *e, size_t ne)
{
    size_t total = 0;
    for (size_t i = 0; i < n_cmps; i++)
        total += strlen(cmps[i].key) + cmps[i].value_len;
    for (size_t i = 0; i < nt; i++)
        total += strlen(t[i].key) + (t[i].type == META_OP_PUT ? t[i].value_len : 0);
    for (size_t i = 0; i < ne; i++)
        total += strlen(e[i].key) + (e[i].type == META_OP_PUT ? e[i].value_len : 0);
    if (total > META_TXN_MAX_BYTES)
        return kvm_errf(KVMESH_ETOOBIG,
                        "txn carries %zu key/value bytes; the limit is %d (split the txn)", total,
                        META_TXN_MAX_BYTES);
    return 0;
}

/* ---- call memory --------------------------------------------------------------------------- */

static char *dup_str(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* Copies len bytes plus a NUL (so values are also C strings for logs); never NULL on success. */
static uint8_t *dup_bytes(const uint8_t *v, size_t len)
{
    uint8_t *p = malloc(len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, v, len);
    p[len] = 0;
    return p;
}

static void free_ops(meta_op_t *ops, size_t n)
{
    if (!ops)
        return;
    for (size_t i = 0; i < n; i++) {
        free((char *)ops[i].key);
        free((uint8_t *)ops[i].value);
    }
    free(ops);
}

static void call_free(meta_call_t *c)
{
    free(c->key);
    free(c->prefix);
    free(c->start_after);
    if (c->cmps) {
        for (size_t i = 0; i < c->n_cmps; i++) {
            free((char *)c->cmps[i].key);
            free((uint8_t *)c->cmps[i].value);
        }
        free(c->cmps);
    }
    free_ops(c->then_ops, c->n_then);
    free_ops(c->else_ops, c->n_else);
    free(c);
}

static void call_release(meta_call_t *c)
{
    KVM_ASSERT(c->refs > 0);
    if (--c->refs == 0)
        call_free(c);
}

static int copy_ops(meta_op_t **out, const meta_op_t *src, size_t n)
{
    *out = NULL;
    if (n == 0)
        return 0;
    meta_op_t *ops = calloc(n, sizeof(*ops));
    if (!ops)
        return KVMESH_ENOMEM;
    *out = ops;
    for (size_t i = 0; i < n; i++) {
        ops[i].type = src[i].type;
        ops[i].lease = src[i].type == META_OP_PUT ? src[i].lease : 0;
        ops[i].key = dup_str(src[i].key);
        if (!ops[i].key)
            return KVMESH_ENOMEM;
        if (src[i].type == META_OP_PUT) {
            ops[i].value_len = src[i].value_len;
            ops[i].value = dup_bytes(src[i].value, src[i].value_len);
            if (!ops[i].value)
                return KVMESH_ENOMEM;
        }
    }
    return 0;
}

static meta_call_t *call_new(meta_t *m, enum meta_call_kind kind)
{
    meta_call_t *c = calloc(1, sizeof(*c));
    if (c) {
        c->m = m;
        c->kind = kind;
    }
    return c;
}

/* ---- answering the user -------------------------------------------------------------------- */

static void pending_unlink(meta_t *m, meta_call_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        m->pending = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

/* Answers the user (once) and drops the user-side reference. */
static void answer(meta_call_t *c, const meta_result_t *res)
{
    KVM_ASSERT(!c->user_done);
    meta_t *m = c->m;
    c->user_done = true;
    if (c->timer) {
        env_timer_cancel(m->env, c->timer);
        c->timer = 0;
    }
    pending_unlink(m, c);
    meta_result_t r = *res;
    struct obs_registry *reg = reg_of(m);
    if (reg) {
        unsigned k = mcall_of(c->kind);
        uint64_t now = env_now_ns(m->env);
        obs_observe(reg, metadata_duration_seconds, (unsigned)m->backend_idx, k,
                    now > c->start_ns ? now - c->start_ns : 0);
        if (r.rc != 0)
            obs_count(reg, metadata_errors_total, (unsigned)m->backend_idx, k, 1);
    }
    if (r.rc != 0) {
        if (!r.errmsg || !r.errmsg[0])
            r.errmsg = kvmesh_strerror(r.rc);
        if (r.errmsg != kvmesh_last_error()) /* no overlapping copy into the same buffer */
            kvm_errf(r.rc, "%s", r.errmsg);
    } else if (!r.errmsg) {
        r.errmsg = "";
    }
    tl_in_callback++;
    c->cb(c->cb_arg, &r);
    tl_in_callback--;
    call_release(c);
}

static void answer_error(meta_call_t *c, int rc, const char *msg)
{
    meta_result_t r;
    memset(&r, 0, sizeof(r));
    r.rc = rc;
    r.errmsg = msg;
    answer(c, &r);
}

static void on_deadline(void *arg)
{
    meta_call_t *c = arg;
    c->timer = 0;
    if (c->user_done)
        return;
    meta_t *m = c->m;
    char msg[META_ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "metadata %s on %s backend%s%s timed out (deadline exceeded)",
             kind_name(c->kind), m->ops->name, m->name[0] ? " for " : "", m->name);
    answer_error(c, KVMESH_ETIMEDOUT, msg);
}

struct deferred_answer {
    meta_call_t *call;
    meta_result_t *res;
};

static void deliver_deferred(void *arg)
{
    struct deferred_answer *d = arg;
    if (!d->call->user_done)
        answer(d->call, d->res);
    call_release(d->call); /* the backend's reference, carried by the deferral */
    meta_result_free(d->res);
    free(d);
}

void meta_call_complete(meta_call_t *call, const meta_result_t *res)
{
    KVM_ASSERT(call && res && call->refs > 0);
    if (call->user_done) {
        call_release(call);
        return;
    }
    if (call == tl_submitting) {
        /* completed inside submit(): answer on a later loop turn */
        struct deferred_answer *d = malloc(sizeof(*d));
        meta_result_t *copy = meta_result_dup(res);
        if (d && copy) {
            d->call = call;
            d->res = copy;
            if (env_defer(call->m->env, deliver_deferred, d) == 0)
                return;
        }
        free(d);
        meta_result_free(copy);
        /* out of memory: answering synchronously is the lesser evil */
    }
    answer(call, res);
    call_release(call);
}

void meta_call_fail(meta_call_t *call, int rc, const char *fmt, ...)
{
    KVM_ASSERT(rc < 0);
    char msg[META_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    meta_result_t r;
    memset(&r, 0, sizeof(r));
    r.rc = rc;
    r.errmsg = msg;
    meta_call_complete(call, &r);
}

bool meta_call_abandoned(const meta_call_t *call)
{
    return call->user_done;
}

/* ---- submission ---------------------------------------------------------------------------- */

static int pre_check(meta_t *m, meta_cb cb)
{
    if (!m)
        return kvm_errf(KVMESH_EINVAL, "metadata handle is NULL");
    if (m->closing)
        return kvm_errf(KVMESH_ECLOSED, "metadata handle is closed");
    if (!cb)
        return kvm_errf(KVMESH_EINVAL, "metadata call without a callback");
    return 0;
}

static int submit(meta_t *m, meta_call_t *c, uint32_t timeout_ms, meta_cb cb, void *arg)
{
    uint32_t ms = timeout_ms ? timeout_ms : m->default_timeout_ms;
    c->cb = cb;
    c->cb_arg = arg;
    c->deadline_ns = env_now_ns(m->env) + (uint64_t)ms * 1000000u;
    c->timer = env_timer_start(m->env, (uint64_t)ms * 1000000u, on_deadline, c);
    if (!c->timer) {
        obs_count(reg_of(m), metadata_errors_total, (unsigned)m->backend_idx, mcall_of(c->kind), 1);
        call_free(c);
        return kvm_errf(KVMESH_ENOMEM, "cannot arm the metadata call deadline timer");
    }
    c->refs = 2;
    c->next = m->pending;
    c->prev = NULL;
    if (m->pending)
        m->pending->prev = c;
    m->pending = c;
    c->start_ns = env_now_ns(m->env);
    obs_count(reg_of(m), metadata_operations_total, (unsigned)m->backend_idx, mcall_of(c->kind), 1);
    meta_call_t *saved = tl_submitting;
    tl_submitting = c;
    m->ops->submit(m, c);
    tl_submitting = saved;
    return 0;
}

/* A call refused before submit (validation): counted as an error of its kind. */
static int reject_kind(meta_t *m, enum meta_call_kind kind, int rc)
{
    if (m)
        obs_count(reg_of(m), metadata_errors_total, (unsigned)m->backend_idx, mcall_of(kind), 1);
    return rc;
}

int meta_get(meta_t *m, const char *key, uint32_t timeout_ms, meta_cb cb, void *arg)
{
    int rc = pre_check(m, cb);
    if (rc)
        return reject_kind(m, META_CALL_GET, rc);
    if ((rc = check_key("get key", key)) != 0)
        return reject_kind(m, META_CALL_GET, rc);
    meta_call_t *c = call_new(m, META_CALL_GET);
    if (!c || !(c->key = strdup(key))) {
        if (c)
            call_free(c);
        return reject_kind(m, META_CALL_GET, KVMESH_ENOMEM);
    }
    return submit(m, c, timeout_ms, cb, arg);
}

int meta_range(meta_t *m, const char *prefix, const char *start_after, uint32_t limit,
               uint32_t timeout_ms, meta_cb cb, void *arg)
{
    int rc = pre_check(m, cb);
    if (rc)
        return reject_kind(m, META_CALL_RANGE, rc);
    if (!prefix)
        return reject_kind(m, META_CALL_RANGE,
                           kvm_errf(KVMESH_EINVAL, "range prefix is NULL (use \"\" for all keys)"));
    if (strnlen(prefix, META_KEY_MAX + 1) > META_KEY_MAX)
        return reject_kind(
            m, META_CALL_RANGE,
            kvm_errf(KVMESH_ETOOBIG, "range prefix is longer than %d bytes", META_KEY_MAX));
    if (start_after && (rc = check_key("range start_after", start_after)) != 0)
        return reject_kind(m, META_CALL_RANGE, rc);
    if (limit < 1 || limit > META_RANGE_MAX)
        return reject_kind(
            m, META_CALL_RANGE,
            kvm_errf(KVMESH_ERANGE, "range limit %u is outside 1..%d", limit, META_RANGE_MAX));
    meta_call_t *c = call_new(m, META_CALL_RANGE);
    if (!c || !(c->prefix = strdup(prefix)) ||
        (start_after && !(c->start_after = strdup(start_after)))) {
        if (c)
            call_free(c);
        return reject_kind(m, META_CALL_RANGE, KVMESH_ENOMEM);
    }
    c->limit = limit;
    return submit(m, c, timeout_ms, cb, arg);
}

int meta_txn(meta_t *m, const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *then_ops,
             size_t n_then, const meta_op_t *else_ops, size_t n_else, uint32_t timeout_ms,
             meta_cb cb, void *arg)
{
    int rc = pre_check(m, cb);
    if (rc)
        return reject_kind(m, META_CALL_TXN, rc);
    if (n_cmps > META_TXN_MAX_OPS)
        return reject_kind(m, META_CALL_TXN,
                           kvm_errf(KVMESH_ERANGE, "txn has %zu compares; the limit is %d", n_cmps,
                                    META_TXN_MAX_OPS));
    if (n_cmps > 0 && !cmps)
        return reject_kind(
            m, META_CALL_TXN,
            kvm_errf(KVMESH_EINVAL, "txn compares array is NULL with count %zu", n_cmps));
    for (size_t i = 0; i < n_cmps; i++)
        if ((rc = check_cmp(&cmps[i], i)) != 0)
            return reject_kind(m, META_CALL_TXN, rc);
    if ((rc = check_ops("then", then_ops, n_then)) != 0 ||
        (rc = check_ops("else", else_ops, n_else)) != 0 ||
        (rc = check_txn_size(cmps, n_cmps, then_ops, n_then, else_ops, n_else)) != 0)
        return reject_kind(m, META_CALL_TXN, rc);
    meta_call_t *c = call_new(m, META_CALL_TXN);
    if (!c)
        return reject_kind(m, META_CALL_TXN, KVMESH_ENOMEM);
    if (n_cmps) {
        c->cmps = calloc(n_cmps, sizeof(*c->cmps));
        if (!c->cmps)
            goto nomem;
        c->n_cmps = n_cmps;
        for (size_t i = 0; i < n_cmps; i++) {
            c->cmps[i] = cmps[i];
            c->cmps[i].value = NULL;
            c->cmps[i].key = dup_str(cmps[i].key);
            if (!c->cmps[i].key)
                goto nomem;
            if (cmps[i].target == META_CMP_VALUE) {
                c->cmps[i].value = dup_bytes(cmps[i].value, cmps[i].value_len);
                if (!c->cmps[i].value)
                    goto nomem;
            } else {
                c->cmps[i].value_len = 0;
            }
        }
    }
    c->n_then = n_then;
    if (copy_ops(&c->then_ops, then_ops, n_then) != 0)
        goto nomem;
    c->n_else = n_else;
    if (copy_ops(&c->else_ops, else_ops, n_else) != 0)
        goto nomem;
    return submit(m, c, timeout_ms, cb, arg);
nomem:
    call_free(c);
    return reject_kind(m, META_CALL_TXN, KVMESH_ENOMEM);
}

/* ttl rounding: at least META_LEASE_TTL_MIN_MS, then up to whole seconds (etcd grants seconds),
 * identically for every backend so that behaviour does not depend on the backend. */
int64_t meta_lease_ttl_round(int64_t ttl_ms)
{
    if (ttl_ms < META_LEASE_TTL_MIN_MS)
        ttl_ms = META_LEASE_TTL_MIN_MS;
    return (ttl_ms + 999) / 1000 * 1000;
}

int meta_lease_grant(meta_t *m, int64_t ttl_ms, uint32_t timeout_ms, meta_cb cb, void *arg)
{
    int rc = pre_check(m, cb);
    if (rc)
        return reject_kind(m, META_CALL_LEASE_GRANT, rc);
    if (ttl_ms <= 0 || ttl_ms > META_LEASE_TTL_MAX_MS)
        return reject_kind(m, META_CALL_LEASE_GRANT,
                           kvm_errf(KVMESH_ERANGE, "lease ttl %lld ms is outside 1..%lld ms",
                                    (long long)ttl_ms, (long long)META_LEASE_TTL_MAX_MS));
    meta_call_t *c = call_new(m, META_CALL_LEASE_GRANT);
    if (!c)
        return reject_kind(m, META_CALL_LEASE_GRANT, KVMESH_ENOMEM);
    c->ttl_ms = meta_lease_ttl_round(ttl_ms);
    return submit(m, c, timeout_ms, cb, arg);
}

static int lease_call(meta_t *m, enum meta_call_kind kind, meta_lease_t lease, uint32_t timeout_ms,
                      meta_cb cb, void *arg)
{
    int rc = pre_check(m, cb);
    if (rc)
        return reject_kind(m, kind, rc);
    if (lease <= 0)
        return reject_kind(m, kind,
                           kvm_errf(KVMESH_EINVAL, "%s: lease id %lld is not a granted lease",
                                    kind_name(kind), (long long)lease));
    meta_call_t *c = call_new(m, kind);
    if (!c)
        return reject_kind(m, kind, KVMESH_ENOMEM);
    c->lease = lease;
    return submit(m, c, timeout_ms, cb, arg);
}

int meta_lease_keepalive(meta_t *m, meta_lease_t lease, uint32_t timeout_ms, meta_cb cb, void *arg)
{
    return lease_call(m, META_CALL_LEASE_KEEPALIVE, lease, timeout_ms, cb, arg);
}

int meta_lease_revoke(meta_t *m, meta_lease_t lease, uint32_t timeout_ms, meta_cb cb, void *arg)
{
    return lease_call(m, META_CALL_LEASE_REVOKE, lease, timeout_ms, cb, arg);
}

int meta_lease_ttl(meta_t *m, meta_lease_t lease, uint32_t timeout_ms, meta_cb cb, void *arg)
{
    return lease_call(m, META_CALL_LEASE_TTL, lease, timeout_ms, cb, arg);
}

/* ---- open / close -------------------------------------------------------------------------- */

int meta_open(meta_t **out, env_t *env, const char *url, const meta_opts_t *opts)
{
    if (!out || !env)
        return kvm_errf(KVMESH_EINVAL, "meta_open: out and env must not be NULL");
    *out = NULL;
    const struct meta_backend_ops *ops = NULL;
    int rc = find_backend(url, &ops);
    if (rc || !ops)
        return rc ? rc : kvm_errf(KVMESH_EURL, "no backend for this metadata URL");
    meta_t *m = calloc(1, sizeof(*m));
    if (!m)
        return kvm_errf(KVMESH_ENOMEM, "out of memory opening metadata handle");
    m->ops = ops;
    m->env = env;
    m->default_timeout_ms =
        opts && opts->default_timeout_ms ? opts->default_timeout_ms : META_DEFAULT_TIMEOUT_MS;
    if (opts && opts->name)
        snprintf(m->name, sizeof(m->name), "%s", opts->name);
    m->backend_idx = backend_idx_of(ops->name);
    if (opts && opts->metrics) {
        m->metrics = opts->metrics;
    } else if ((rc = obs_registry_new(&m->metrics)) != 0) {
        free(m);
        return rc;
    } else {
        m->own_metrics = true;
    }
    rc = ops->open(m, url);
    if (rc) {
        if (m->own_metrics)
            obs_registry_free(m->metrics);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int meta_open_backend(meta_t **out, env_t *env, const struct meta_backend_ops *ops, void *backend,
                      const meta_opts_t *opts)
{
    KVM_ASSERT(out && env && ops && ops->close && ops->submit);
    *out = NULL;
    meta_t *m = calloc(1, sizeof(*m));
    if (!m)
        return kvm_errf(KVMESH_ENOMEM, "out of memory opening metadata handle");
    m->ops = ops;
    m->backend = backend;
    m->env = env;
    m->default_timeout_ms =
        opts && opts->default_timeout_ms ? opts->default_timeout_ms : META_DEFAULT_TIMEOUT_MS;
    if (opts && opts->name)
        snprintf(m->name, sizeof(m->name), "%s", opts->name);
    *out = m;
    return 0;
}

void *meta_backend_ctx(const meta_t *m)
{
    return m->backend;
}

env_t *meta_env(const meta_t *m)
{
    return m->env;
}

static void finish_close(void *arg)
{
    meta_t *m = arg;
    m->ops->close(m); /* completes what the backend holds; answers are dropped (user_done) */
    KVM_ASSERT(m->pending == NULL);
    if (m->own_metrics)
        obs_registry_free(m->metrics);
    free(m);
}

void meta_close(meta_t *m)
{
    if (!m || m->closing)
        return;
    m->closing = true;
    while (m->pending) {
        meta_call_t *c = m->pending;
        char msg[160];
        snprintf(msg, sizeof(msg), "metadata %s canceled: handle closed", kind_name(c->kind));
        answer_error(c, KVMESH_ECANCELED, msg);
    }
    /* Closed from inside a metadata callback: the backend may be on the stack below us; release
     * it on the next loop turn. */
    if (tl_in_callback > 0 && env_defer(m->env, finish_close, m) == 0)
        return;
    finish_close(m);
}

const char *meta_backend_name(const meta_t *m)
{
    return m->ops->name;
}

static uint64_t rd_mcall(const meta_t *m, const char *family, unsigned k)
{
    int64_t v = 0;
    if (reg_of(m))
        (void)obs_metrics_read(m->metrics, family, (unsigned)m->backend_idx, k, &v);
    return (uint64_t)v;
}

void meta_get_stats(const meta_t *m, meta_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    out->gets = rd_mcall(m, "metadata_operations_total", OBS_MCALL_GET);
    out->ranges = rd_mcall(m, "metadata_operations_total", OBS_MCALL_RANGE);
    out->txns = rd_mcall(m, "metadata_operations_total", OBS_MCALL_TXN);
    out->lease_grants = rd_mcall(m, "metadata_operations_total", OBS_MCALL_LEASE_GRANT);
    out->lease_keepalives = rd_mcall(m, "metadata_operations_total", OBS_MCALL_LEASE_KEEPALIVE);
    out->lease_revokes = rd_mcall(m, "metadata_operations_total", OBS_MCALL_LEASE_REVOKE);
    out->lease_ttls = rd_mcall(m, "metadata_operations_total", OBS_MCALL_LEASE_TTL);
    for (unsigned k = 0; k < OBS__N_mcall; k++)
        out->errors += rd_mcall(m, "metadata_errors_total", k);
}

/* ---- results ------------------------------------------------------------------------------- */

static size_t kv_bytes(const meta_kv_t *kv)
{
    if (!kv->found)
        return 0;
    return (kv->key ? strlen(kv->key) + 1 : 0) + kv->value_len + 1;
}

static char *copy_kv(meta_kv_t *dst, const meta_kv_t *src, char *p)
{
    *dst = *src;
    if (!src->found) {
        memset(dst, 0, sizeof(*dst));
        return p;
    }
    if (src->key) {
        size_t n = strlen(src->key) + 1;
        memcpy(p, src->key, n);
        dst->key = p;
        p += n;
    }
    if (src->value_len)
        memcpy(p, src->value, src->value_len);
    p[src->value_len] = 0;
    dst->value = (const uint8_t *)p;
    return p + src->value_len + 1;
}

meta_result_t *meta_result_dup(const meta_result_t *res)
{
    if (!res)
        return NULL;
    const char *em = res->errmsg ? res->errmsg : "";
    size_t n_kvs = res->kvs ? res->n_kvs : 0;
    size_t n_ops = res->ops ? res->n_ops : 0;
    size_t bytes = strlen(em) + 1 + kv_bytes(&res->kv);
    for (size_t i = 0; i < n_kvs; i++)
        bytes += kv_bytes(&res->kvs[i]);
    for (size_t i = 0; i < n_ops; i++)
        bytes += kv_bytes(&res->ops[i]);
    size_t head = sizeof(meta_result_t) + (n_kvs + n_ops) * sizeof(meta_kv_t);
    meta_result_t *out = malloc(head + bytes);
    if (!out)
        return NULL;
    *out = *res;
    meta_kv_t *kvs = (meta_kv_t *)(out + 1);
    meta_kv_t *ops = kvs + n_kvs;
    char *p = (char *)(ops + n_ops);
    size_t el = strlen(em) + 1;
    memcpy(p, em, el);
    out->errmsg = p;
    p += el;
    p = copy_kv(&out->kv, &res->kv, p);
    for (size_t i = 0; i < n_kvs; i++)
        p = copy_kv(&kvs[i], &res->kvs[i], p);
    for (size_t i = 0; i < n_ops; i++)
        p = copy_kv(&ops[i], &res->ops[i], p);
    out->kvs = n_kvs ? kvs : NULL;
    out->n_kvs = n_kvs;
    out->ops = n_ops ? ops : NULL;
    out->n_ops = n_ops;
    return out;
}

void meta_result_free(meta_result_t *res)
{
    free(res);
}
