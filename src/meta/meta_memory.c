/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_memory.c — the in-memory metadata backend: the reference semantics of meta.h, the
 * embedded single-process default, and the simulator's metadata store (with fault injection).
 *
 * Store: an RB tree of keys ordered bytewise (strcmp = memcmp order for NUL-free keys), a
 * deployment revision, and leases in two RB trees (by id, and by (expiry, id) for reaping). The
 * store is shared by name between handles of one process (refcounted registry) and guarded by
 * one mutex; every call executes entirely under it, so each call is one atomic step.
 *
 * Invariants (checked by mm_check_invariants in tests):
 *   - every key node with lease != NULL is on that lease's key list, and only there;
 *   - rev >= every node's mod_rev >= create_rev >= 1; version >= 1;
 *   - a lease is in both lease trees, with expiry_ns = last grant/keepalive + ttl.
 *
 * Calls: submit() parks the call on the handle's held list behind a timer (the injected latency,
 * 0 by default: a later loop turn) and executes it when the timer fires. A partitioned handle
 * parks calls until their deadline and then fails them unapplied. close() cancels every held
 * call's timer and fails it with ECANCELED. A timed-out call whose timer fires later is still
 * applied, like a request that reached a real server after the client gave up. A test hook
 * (meta_memory_set_hook) may add a delay per call, and bring the calls it delayed forward
 * (meta_memory_expedite), to order two calls exactly.
 */
#ifndef __unused /* <bsd/sys/tree.h> marks its static functions __unused */
#define __unused __attribute__((unused))
#endif
#include <bsd/sys/tree.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "core/util.h"
#include "meta/meta_impl.h"
#include "meta/meta_memory.h"

struct mm_lease;

struct mm_node {
    RB_ENTRY(mm_node) rb;
    LIST_ENTRY(mm_node) lease_link;
    char *key;
    uint8_t *val;
    size_t len;
    int64_t create_rev, mod_rev, version;
    struct mm_lease *lease;
};

struct mm_lease {
    RB_ENTRY(mm_lease) by_id;
    RB_ENTRY(mm_lease) by_exp;
    int64_t id;
    int64_t ttl_ms;
    uint64_t expiry_ns;
    LIST_HEAD(, mm_node) keys;
};

static int mm_node_cmp(const struct mm_node *a, const struct mm_node *b)
{
    return strcmp(a->key, b->key);
}
static int mm_lease_id_cmp(const struct mm_lease *a, const struct mm_lease *b)
{
    return a->id < b->id ? -1 : a->id > b->id;
}
static int mm_lease_exp_cmp(const struct mm_lease *a, const struct mm_lease *b)
{
    if (a->expiry_ns != b->expiry_ns)
        return a->expiry_ns < b->expiry_ns ? -1 : 1;
    return mm_lease_id_cmp(a, b);
}

RB_HEAD(mm_keys, mm_node);
RB_HEAD(mm_ids, mm_lease);
RB_HEAD(mm_exps, mm_lease);
RB_GENERATE_STATIC(mm_keys, mm_node, rb, mm_node_cmp)
RB_GENERATE_STATIC(mm_ids, mm_lease, by_id, mm_lease_id_cmp)
RB_GENERATE_STATIC(mm_exps, mm_lease, by_exp, mm_lease_exp_cmp)

struct mm_store {
    char name[META_MEMORY_NAME_MAX + 1];
    int refs; /* registry lock */
    pthread_mutex_t lock;
    struct mm_keys keys;
    struct mm_ids ids;
    struct mm_exps exps;
    int64_t rev;
    int64_t next_lease;
    struct mm_store *next; /* registry */
};

struct mm_ctx;

struct mm_handle {
    meta_t *m;
    struct mm_store *st;
    pthread_mutex_t faults_lock;
    meta_memory_faults_t faults;
    struct mm_ctx *held;
};

struct mm_ctx {
    meta_call_t *call;
    struct mm_handle *h;
    env_timer_id timer;
    bool partitioned;
    bool fail;
    bool fail_after_apply;
    bool hooked; /* delayed by the test hook (meta_memory_expedite may bring it forward) */
    int fail_rc;
    struct mm_ctx *next, *prev;
};

static pthread_mutex_t mm_hook_lock = PTHREAD_MUTEX_INITIALIZER;
static meta_memory_hook_fn mm_hook;
static void *mm_hook_arg;

static pthread_mutex_t mm_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mm_store *mm_registry;

/* ---- URL ----------------------------------------------------------------------------------- */

int meta_memory_parse_url(const char *url, char *name, size_t cap)
{
    static const char pfx[] = "memory://";
    if (!url || strncasecmp(url, pfx, sizeof(pfx) - 1) != 0)
        return kvm_errf(KVMESH_EURL, "not a memory:// URL");
    const char *n = url + sizeof(pfx) - 1;
    size_t len = strlen(n);
    if (len > META_MEMORY_NAME_MAX || len + 1 > cap)
        return kvm_errf(KVMESH_EURL, "memory:// store name is %zu bytes; the limit is %d", len,
                        META_MEMORY_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return kvm_errf(KVMESH_EURL,
                            "memory:// store name '%.80s' has invalid character '%c' at %zu; use "
                            "letters, digits, '.', '_' and '-' (memory://NAME, no path or query)",
                            n, c, i);
    }
    memcpy(name, n, len + 1);
    return 0;
}

/* ---- store --------------------------------------------------------------------------------- */

static struct mm_store *store_new(const char *name)
{
    struct mm_store *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    snprintf(st->name, sizeof(st->name), "%s", name);
    pthread_mutex_init(&st->lock, NULL);
    RB_INIT(&st->keys);
    RB_INIT(&st->ids);
    RB_INIT(&st->exps);
    st->rev = 1; /* like etcd: an empty store is at revision 1 */
    st->refs = 1;
    return st;
}

static void node_free(struct mm_node *n)
{
    free(n->key);
    free(n->val);
    free(n);
}

static void store_free(struct mm_store *st)
{
    struct mm_node *n, *nn;
    RB_FOREACH_SAFE(n, mm_keys, &st->keys, nn)
    {
        RB_REMOVE(mm_keys, &st->keys, n);
        node_free(n);
    }
    struct mm_lease *l, *ln;
    RB_FOREACH_SAFE(l, mm_ids, &st->ids, ln)
    {
        RB_REMOVE(mm_ids, &st->ids, l);
        free(l);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static struct mm_store *store_acquire(const char *name)
{
    if (!name[0])
        return store_new("");
    pthread_mutex_lock(&mm_registry_lock);
    struct mm_store *st;
    for (st = mm_registry; st; st = st->next)
        if (strcmp(st->name, name) == 0)
            break;
    if (st) {
        st->refs++;
    } else if ((st = store_new(name)) != NULL) {
        st->next = mm_registry;
        mm_registry = st;
    }
    pthread_mutex_unlock(&mm_registry_lock);
    return st;
}

static void store_release(struct mm_store *st)
{
    if (!st->name[0]) {
        store_free(st);
        return;
    }
    pthread_mutex_lock(&mm_registry_lock);
    bool last = --st->refs == 0;
    if (last) {
        for (struct mm_store **pp = &mm_registry; *pp; pp = &(*pp)->next)
            if (*pp == st) {
                *pp = st->next;
                break;
            }
    }
    pthread_mutex_unlock(&mm_registry_lock);
    if (last)
        store_free(st);
}

static struct mm_node *node_find(struct mm_store *st, const char *key)
{
    struct mm_node probe;
    probe.key = (char *)key;
    return RB_FIND(mm_keys, &st->keys, &probe);
}

static void node_detach_lease(struct mm_node *n)
{
    if (n->lease) {
        LIST_REMOVE(n, lease_link);
        n->lease = NULL;
    }
}

static void node_delete(struct mm_store *st, struct mm_node *n)
{
    node_detach_lease(n);
    RB_REMOVE(mm_keys, &st->keys, n);
    node_free(n);
}

static struct mm_lease *lease_find(struct mm_store *st, int64_t id)
{
    struct mm_lease probe;
    probe.id = id;
    return RB_FIND(mm_ids, &st->ids, &probe);
}

/* Removes the lease and all its keys in one step (one revision when keys existed). */
static void lease_drop(struct mm_store *st, struct mm_lease *l)
{
    bool any = !LIST_EMPTY(&l->keys);
    if (any)
        st->rev++;
    while (!LIST_EMPTY(&l->keys))
        node_delete(st, LIST_FIRST(&l->keys));
    RB_REMOVE(mm_ids, &st->ids, l);
    RB_REMOVE(mm_exps, &st->exps, l);
    free(l);
}

static void expire_leases(struct mm_store *st, uint64_t now)
{
    struct mm_lease *l;
    while ((l = RB_MIN(mm_exps, &st->exps)) != NULL && l->expiry_ns <= now)
        lease_drop(st, l);
}

static void kv_from_node(meta_kv_t *kv, const struct mm_node *n)
{
    memset(kv, 0, sizeof(*kv));
    if (!n)
        return;
    kv->found = true;
    kv->key = n->key;
    kv->value = n->val;
    kv->value_len = n->len;
    kv->create_rev = n->create_rev;
    kv->mod_rev = n->mod_rev;
    kv->version = n->version;
    kv->lease = n->lease ? n->lease->id : 0;
}

static bool cmp_num(int64_t have, enum meta_cmp_op op, int64_t want)
{
    switch (op) {
    case META_EQ:
        return have == want;
    case META_NE:
        return have != want;
    case META_LT:
        return have < want;
    case META_GT:
        return have > want;
    }
    return false;
}

static bool eval_cmp(struct mm_store *st, const meta_cmp_t *c)
{
    struct mm_node *n = node_find(st, c->key);
    switch (c->target) {
    case META_CMP_EXISTS:
        return (n != NULL) == (c->num == 1);
    case META_CMP_VALUE: {
        if (!n)
            return false;
        bool eq = n->len == c->value_len &&
                  (c->value_len == 0 || !memcmp(n->val, c->value, c->value_len));
        return c->op == META_EQ ? eq : !eq;
    }
    case META_CMP_VERSION:
        return cmp_num(n ? n->version : 0, c->op, c->num);
    case META_CMP_MOD_REV:
        return cmp_num(n ? n->mod_rev : 0, c->op, c->num);
    case META_CMP_CREATE_REV:
        return cmp_num(n ? n->create_rev : 0, c->op, c->num);
    case META_CMP_LEASE:
        return cmp_num(n && n->lease ? n->lease->id : 0, c->op, c->num);
    }
    return false;
}

/* ---- execution (store locked) ---------------------------------------------------------------
 * Each exec_* fills res (pointing into the store or into scratch) and returns; the caller
 * deep-copies res under the lock, then unlocks and completes the call. */

struct scratch {
    meta_kv_t kvs[META_RANGE_MAX > META_TXN_MAX_OPS ? META_RANGE_MAX : META_TXN_MAX_OPS];
    void *owned[2 * META_TXN_MAX_OPS]; /* txn GET copies */
    size_t n_owned;
    char msg[256];
};

static void *scratch_keep(struct scratch *s, void *p)
{
    KVM_ASSERT(s->n_owned < KVM_ARRAY_SIZE(s->owned));
    s->owned[s->n_owned++] = p;
    return p;
}

static void exec_range(struct mm_store *st, const meta_call_t *c, meta_result_t *res,
                       struct scratch *s)
{
    size_t plen = strlen(c->prefix);
    struct mm_node probe, *n;
    const char *from = c->prefix;
    if (c->start_after && strcmp(c->start_after, c->prefix) >= 0)
        from = c->start_after;
    probe.key = (char *)from;
    n = RB_NFIND(mm_keys, &st->keys, &probe);
    if (n && c->start_after && strcmp(n->key, c->start_after) == 0)
        n = RB_NEXT(mm_keys, &st->keys, n);
    size_t k = 0;
    for (; n && strncmp(n->key, c->prefix, plen) == 0; n = RB_NEXT(mm_keys, &st->keys, n)) {
        if (k == c->limit)
            break;
        kv_from_node(&s->kvs[k++], n);
    }
    res->kvs = s->kvs;
    res->n_kvs = k;
    res->more = n && strncmp(n->key, c->prefix, plen) == 0;
}

static int exec_txn(struct mm_store *st, const meta_call_t *c, meta_result_t *res,
                    struct scratch *s)
{
    bool ok = true;
    for (size_t i = 0; i < c->n_cmps && ok; i++)
        ok = eval_cmp(st, &c->cmps[i]);
    const meta_op_t *ops = ok ? c->then_ops : c->else_ops;
    size_t n_ops = ok ? c->n_then : c->n_else;
    /* all-or-nothing: refuse the txn before any change when a lease is unknown */
    for (size_t i = 0; i < n_ops; i++)
        if (ops[i].type == META_OP_PUT && ops[i].lease && !lease_find(st, ops[i].lease)) {
            snprintf(s->msg, sizeof(s->msg),
                     "txn put of '%.100s': lease %lld not found (expired or revoked)", ops[i].key,
                     (long long)ops[i].lease);
            return KVMESH_ENOENT;
        }
    int64_t new_rev = st->rev + 1;
    bool changed = false;
    for (size_t i = 0; i < n_ops; i++) {
        const meta_op_t *op = &ops[i];
        meta_kv_t *out = &s->kvs[i];
        memset(out, 0, sizeof(*out));
        struct mm_node *n = node_find(st, op->key);
        switch (op->type) {
        case META_OP_PUT: {
            uint8_t *val = malloc(op->value_len ? op->value_len : 1);
            if (!val) {
                snprintf(s->msg, sizeof(s->msg), "out of memory");
                return KVMESH_ENOMEM; /* earlier ops of this txn stay: only on OOM */
            }
            if (op->value_len)
                memcpy(val, op->value, op->value_len);
            if (!n) {
                n = calloc(1, sizeof(*n));
                char *key = strdup(op->key);
                if (!n || !key) {
                    free(n);
                    free(key);
                    free(val);
                    snprintf(s->msg, sizeof(s->msg), "out of memory");
                    return KVMESH_ENOMEM;
                }
                n->key = key;
                n->create_rev = new_rev;
                RB_INSERT(mm_keys, &st->keys, n);
            }
            free(n->val);
            n->val = val;
            n->len = op->value_len;
            n->mod_rev = new_rev;
            n->version++;
            node_detach_lease(n);
            if (op->lease) {
                struct mm_lease *l = lease_find(st, op->lease);
                n->lease = l;
                LIST_INSERT_HEAD(&l->keys, n, lease_link);
            }
            changed = true;
            break;
        }
        case META_OP_DEL:
            if (n) {
                node_delete(st, n);
                res->n_deleted++;
                changed = true;
            }
            break;
        case META_OP_GET:
            if (n) {
                kv_from_node(out, n);
                out->key = scratch_keep(s, strdup(n->key));
                uint8_t *v = malloc(n->len + 1);
                if (v && n->len)
                    memcpy(v, n->val, n->len);
                out->value = scratch_keep(s, v);
                if (!out->key || !out->value) {
                    snprintf(s->msg, sizeof(s->msg), "out of memory");
                    return KVMESH_ENOMEM;
                }
            }
            break;
        }
    }
    if (changed)
        st->rev = new_rev;
    res->succeeded = ok;
    res->ops = n_ops ? s->kvs : NULL;
    res->n_ops = n_ops;
    return 0;
}

static int exec_call(struct mm_handle *h, const meta_call_t *c, meta_result_t *res,
                     struct scratch *s)
{
    struct mm_store *st = h->st;
    uint64_t now = env_now_ns(h->m->env);
    expire_leases(st, now);
    int rc = 0;
    switch (c->kind) {
    case META_CALL_GET:
        kv_from_node(&res->kv, node_find(st, c->key));
        break;
    case META_CALL_RANGE:
        exec_range(st, c, res, s);
        break;
    case META_CALL_TXN:
        rc = exec_txn(st, c, res, s);
        break;
    case META_CALL_LEASE_GRANT: {
        struct mm_lease *l = calloc(1, sizeof(*l));
        if (!l) {
            snprintf(s->msg, sizeof(s->msg), "out of memory");
            return KVMESH_ENOMEM;
        }
        l->id = ++st->next_lease;
        l->ttl_ms = c->ttl_ms;
        l->expiry_ns = now + (uint64_t)c->ttl_ms * 1000000u;
        LIST_INIT(&l->keys);
        RB_INSERT(mm_ids, &st->ids, l);
        RB_INSERT(mm_exps, &st->exps, l);
        res->lease = l->id;
        res->ttl_ms = l->ttl_ms;
        break;
    }
    case META_CALL_LEASE_KEEPALIVE:
    case META_CALL_LEASE_REVOKE:
    case META_CALL_LEASE_TTL: {
        struct mm_lease *l = lease_find(st, c->lease);
        if (!l) {
            snprintf(s->msg, sizeof(s->msg), "lease %lld not found (expired or revoked)",
                     (long long)c->lease);
            return KVMESH_ENOENT;
        }
        res->lease = l->id;
        if (c->kind == META_CALL_LEASE_KEEPALIVE) {
            RB_REMOVE(mm_exps, &st->exps, l);
            l->expiry_ns = now + (uint64_t)l->ttl_ms * 1000000u;
            RB_INSERT(mm_exps, &st->exps, l);
            res->ttl_ms = l->ttl_ms;
        } else if (c->kind == META_CALL_LEASE_REVOKE) {
            lease_drop(st, l);
        } else {
            res->ttl_ms = (int64_t)((l->expiry_ns - now + 999999u) / 1000000u);
        }
        break;
    }
    }
    res->rev = st->rev;
    return rc;
}

/* ---- calls --------------------------------------------------------------------------------- */

static void held_unlink(struct mm_handle *h, struct mm_ctx *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        h->held = x->next;
    if (x->next)
        x->next->prev = x->prev;
}

static void on_fire(void *arg)
{
    struct mm_ctx *x = arg;
    struct mm_handle *h = x->h;
    meta_call_t *c = x->call;
    held_unlink(h, x);
    if (x->partitioned) {
        free(x);
        meta_call_fail(c, KVMESH_ETIMEDOUT,
                       "memory://%s: no answer (partitioned by fault injection)", h->st->name);
        return;
    }
    if (x->fail && !x->fail_after_apply) {
        int rc = x->fail_rc;
        free(x);
        meta_call_fail(c, rc, "memory://%s: injected failure (%s)", h->st->name,
                       kvmesh_strerror(rc));
        return;
    }
    struct scratch *s = malloc(sizeof(*s));
    if (!s) {
        free(x);
        meta_call_fail(c, KVMESH_ENOMEM, "out of memory");
        return;
    }
    s->n_owned = 0;
    s->msg[0] = '\0';
    meta_result_t res;
    memset(&res, 0, sizeof(res));
    pthread_mutex_lock(&h->st->lock);
    int rc = exec_call(h, c, &res, s);
    meta_result_t *copy = rc == 0 ? meta_result_dup(&res) : NULL;
    pthread_mutex_unlock(&h->st->lock);
    for (size_t i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    bool fail_applied = x->fail;
    int fail_rc = x->fail_rc;
    free(x);
    /* Nothing of this handle is touched after meta_call_* below: the user callback may close. */
    if (rc != 0) {
        meta_call_fail(c, rc, "%s", s->msg);
    } else if (!copy) {
        meta_call_fail(c, KVMESH_ENOMEM, "out of memory copying the result");
    } else if (fail_applied) {
        meta_call_fail(c, fail_rc, "memory: injected failure after the call was applied (%s)",
                       kvmesh_strerror(fail_rc));
    } else {
        meta_call_complete(c, copy);
    }
    meta_result_free(copy);
    free(s);
}

static void mm_submit(meta_t *m, meta_call_t *c)
{
    struct mm_handle *h = m->backend;
    struct mm_ctx *x = calloc(1, sizeof(*x));
    if (!x) {
        meta_call_fail(c, KVMESH_ENOMEM, "out of memory");
        return;
    }
    x->call = c;
    x->h = h;
    uint64_t delay_ns = 0;
    pthread_mutex_lock(&h->faults_lock);
    meta_memory_faults_t *f = &h->faults;
    if (f->partitioned) {
        x->partitioned = true;
        uint64_t now = env_now_ns(m->env);
        delay_ns = c->deadline_ns > now ? c->deadline_ns - now : 0;
    } else {
        if (f->latency_max_ms) {
            uint64_t span = (uint64_t)(f->latency_max_ms - f->latency_min_ms) + 1;
            delay_ns = ((uint64_t)f->latency_min_ms + env_rand_u64(m->env) % span) * 1000000u;
        }
        if (f->fail_next) {
            f->fail_next--;
            x->fail = true;
        } else if (f->fail_ppm && env_rand_u64(m->env) % 1000000u < f->fail_ppm) {
            x->fail = true;
        }
        x->fail_rc = f->fail_rc ? f->fail_rc : KVMESH_EUNAVAILABLE;
        x->fail_after_apply = f->fail_after_apply;
    }
    pthread_mutex_unlock(&h->faults_lock);
    pthread_mutex_lock(&mm_hook_lock);
    meta_memory_hook_fn hook = mm_hook;
    void *hook_arg = mm_hook_arg;
    pthread_mutex_unlock(&mm_hook_lock);
    uint32_t hook_ms = hook && !x->partitioned ? hook(hook_arg, m, h->st->name, c) : 0;
    if (hook_ms) {
        delay_ns += (uint64_t)hook_ms * 1000000u;
        x->hooked = true;
    }
    x->timer = env_timer_start(m->env, delay_ns, on_fire, x);
    if (!x->timer) {
        free(x);
        meta_call_fail(c, KVMESH_ENOMEM, "cannot arm the memory backend's call timer");
        return;
    }
    x->next = h->held;
    if (h->held)
        h->held->prev = x;
    h->held = x;
}

static int mm_open(meta_t *m, const char *url)
{
    char name[META_MEMORY_NAME_MAX + 1] = "";
    int rc = meta_memory_parse_url(url, name, sizeof(name));
    if (rc)
        return rc;
    struct mm_handle *h = calloc(1, sizeof(*h));
    if (!h)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    h->st = store_acquire(name);
    if (!h->st) {
        free(h);
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&h->faults_lock, NULL);
    h->m = m;
    m->backend = h;
    return 0;
}

static void mm_close(meta_t *m)
{
    struct mm_handle *h = m->backend;
    while (h->held) {
        struct mm_ctx *x = h->held;
        held_unlink(h, x);
        env_timer_cancel(m->env, x->timer);
        meta_call_t *c = x->call;
        free(x);
        meta_call_fail(c, KVMESH_ECANCELED, "memory: handle closed");
    }
    store_release(h->st);
    pthread_mutex_destroy(&h->faults_lock);
    free(h);
    m->backend = NULL;
}

const struct meta_backend_ops meta_memory_ops = {
    .name = "memory",
    .open = mm_open,
    .close = mm_close,
    .submit = mm_submit,
};

int meta_memory_set_faults(meta_t *m, const meta_memory_faults_t *f)
{
    if (!m || m->ops != &meta_memory_ops || !f)
        return kvm_errf(KVMESH_EINVAL, "meta_memory_set_faults needs a memory:// handle");
    if (f->latency_min_ms > f->latency_max_ms)
        return kvm_errf(KVMESH_EINVAL, "latency_min_ms %u > latency_max_ms %u", f->latency_min_ms,
                        f->latency_max_ms);
    if (f->fail_rc > 0)
        return kvm_errf(KVMESH_EINVAL, "fail_rc must be 0 or a negative KVMESH_E* code");
    struct mm_handle *h = m->backend;
    pthread_mutex_lock(&h->faults_lock);
    h->faults = *f;
    pthread_mutex_unlock(&h->faults_lock);
    return 0;
}

void meta_memory_set_hook(meta_memory_hook_fn fn, void *arg)
{
    pthread_mutex_lock(&mm_hook_lock);
    mm_hook = fn;
    mm_hook_arg = arg;
    pthread_mutex_unlock(&mm_hook_lock);
}

void meta_memory_expedite(meta_t *m)
{
    if (!m || m->ops != &meta_memory_ops)
        return;
    struct mm_handle *h = m->backend;
    struct mm_ctx *last = h->held; /* the held list is newest first: re-arm oldest first */
    while (last && last->next)
        last = last->next;
    for (struct mm_ctx *x = last; x; x = x->prev) {
        if (!x->hooked)
            continue;
        env_timer_id now = env_timer_start(m->env, 0, on_fire, x);
        if (!now)
            continue; /* (no memory: it keeps its delay) */
        env_timer_cancel(m->env, x->timer);
        x->timer = now;
        x->hooked = false;
    }
}
