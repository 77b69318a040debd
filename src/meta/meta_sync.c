/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_sync.c — the blocking wrapper of meta.h for tools and tests: a private libuv loop thread
 * (env_uv_thread) with a real env and one meta_t on it; meta_sync_* calls may come from any
 * thread except that loop thread, hand the request to the loop (env_uv_thread_call) and wait on a
 * condition variable for the callback. The wait is bounded by the call's deadline (the
 * dispatcher answers every call by its deadline; the handle's default timeout applies).
 *
 * Ownership: *out results are deep copies (meta_result_dup) owned by the caller. Strings passed
 * in are copied by meta_* before the hand-off returns.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "env/env_uv.h"
#include "meta/meta.h"

struct meta_sync {
    env_uv_thread_t *t;
    meta_t *m;
};

enum sync_kind { S_GET, S_RANGE, S_TXN, S_GRANT, S_KEEPALIVE, S_REVOKE, S_TTL };

struct sync_req {
    meta_sync_t *s;
    enum sync_kind kind;
    const char *key, *prefix, *start_after;
    uint32_t limit;
    const meta_cmp_t *cmps;
    size_t n_cmps;
    const meta_op_t *then_ops, *else_ops;
    size_t n_then, n_else;
    int64_t ttl_ms;
    meta_lease_t lease;
    /* answer */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int submit_rc;
    char submit_msg[512];
    meta_result_t *res;
};

struct open_req {
    meta_sync_t *s;
    const char *url;
    const meta_opts_t *opts;
    int rc;
    char msg[512];
};

static void open_on_loop(void *arg)
{
    struct open_req *o = arg;
    o->rc = meta_open(&o->s->m, env_uv_thread_env(o->s->t), o->url, o->opts);
    if (o->rc)
        snprintf(o->msg, sizeof(o->msg), "%s", kvmesh_last_error());
}

int meta_sync_open(meta_sync_t **out, const char *url, const meta_opts_t *opts)
{
    if (!out)
        return kvm_errf(KVMESH_EINVAL, "meta_sync_open: out is NULL");
    *out = NULL;
    meta_sync_t *s = calloc(1, sizeof(*s));
    if (!s)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    int rc = env_uv_thread_start(&s->t, 0);
    if (rc) {
        free(s);
        return kvm_errf(rc, "cannot start the metadata loop thread: %s", kvmesh_strerror(rc));
    }
    struct open_req o = {.s = s, .url = url, .opts = opts};
    rc = env_uv_thread_call(s->t, open_on_loop, &o);
    if (rc == 0)
        rc = o.rc;
    if (rc) {
        env_uv_thread_stop(s->t);
        free(s);
        return kvm_errf(rc, "%s", o.rc ? o.msg : kvmesh_strerror(rc));
    }
    *out = s;
    return 0;
}

static void close_on_loop(void *arg)
{
    meta_sync_t *s = arg;
    meta_close(s->m);
    s->m = NULL;
}

void meta_sync_close(meta_sync_t *s)
{
    if (!s)
        return;
    KVM_ASSERT(!env_uv_thread_is_current(s->t));
    int rc = env_uv_thread_call(s->t, close_on_loop, s);
    KVM_ASSERT(rc == 0);
    env_uv_thread_stop(s->t);
    free(s);
}

meta_t *meta_sync_handle(meta_sync_t *s)
{
    return s->m;
}

static void on_result(void *arg, const meta_result_t *res)
{
    struct sync_req *r = arg;
    meta_result_t *copy = meta_result_dup(res);
    pthread_mutex_lock(&r->mu);
    r->res = copy;
    if (!copy)
        r->submit_rc = KVMESH_ENOMEM;
    r->done = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void submit_on_loop(void *arg)
{
    struct sync_req *r = arg;
    meta_t *m = r->s->m;
    int rc = KVMESH_EINTERNAL;
    switch (r->kind) {
    case S_GET:
        rc = meta_get(m, r->key, 0, on_result, r);
        break;
    case S_RANGE:
        rc = meta_range(m, r->prefix, r->start_after, r->limit, 0, on_result, r);
        break;
    case S_TXN:
        rc = meta_txn(m, r->cmps, r->n_cmps, r->then_ops, r->n_then, r->else_ops, r->n_else, 0,
                      on_result, r);
        break;
    case S_GRANT:
        rc = meta_lease_grant(m, r->ttl_ms, 0, on_result, r);
        break;
    case S_KEEPALIVE:
        rc = meta_lease_keepalive(m, r->lease, 0, on_result, r);
        break;
    case S_REVOKE:
        rc = meta_lease_revoke(m, r->lease, 0, on_result, r);
        break;
    case S_TTL:
        rc = meta_lease_ttl(m, r->lease, 0, on_result, r);
        break;
    }
    if (rc) {
        /* rejected synchronously: no callback will come */
        snprintf(r->submit_msg, sizeof(r->submit_msg), "%s", kvmesh_last_error());
        pthread_mutex_lock(&r->mu);
        r->submit_rc = rc;
        r->done = true;
        pthread_mutex_unlock(&r->mu);
    }
}

static int run_req(struct sync_req *r, meta_result_t **out)
{
    *out = NULL;
    KVM_ASSERT(!env_uv_thread_is_current(r->s->t));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int rc = env_uv_thread_call(r->s->t, submit_on_loop, r);
    if (rc) {
        snprintf(r->submit_msg, sizeof(r->submit_msg),
                 "metadata loop thread did not take the call: %s", kvmesh_strerror(rc));
    } else {
        pthread_mutex_lock(&r->mu);
        while (!r->done)
            pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        rc = r->submit_rc;
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    if (r->res) {
        *out = r->res;
        if (r->res->rc)
            kvm_errf(r->res->rc, "%s", r->res->errmsg);
        return r->res->rc;
    }
    /* synchronous rejection or hand-off failure: still give the caller a result */
    meta_result_t tmp;
    memset(&tmp, 0, sizeof(tmp));
    tmp.rc = rc;
    tmp.errmsg = r->submit_msg;
    *out = meta_result_dup(&tmp);
    kvm_errf(rc, "%s", r->submit_msg);
    return rc;
}

int meta_sync_get(meta_sync_t *s, const char *key, meta_result_t **out)
{
    struct sync_req r = {.s = s, .kind = S_GET, .key = key};
    return run_req(&r, out);
}

int meta_sync_range(meta_sync_t *s, const char *prefix, const char *start_after, uint32_t limit,
                    meta_result_t **out)
{
    struct sync_req r = {
        .s = s, .kind = S_RANGE, .prefix = prefix, .start_after = start_after, .limit = limit};
    return run_req(&r, out);
}

int meta_sync_txn(meta_sync_t *s, const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *then_ops,
                  size_t n_then, const meta_op_t *else_ops, size_t n_else, meta_result_t **out)
{
    struct sync_req r = {.s = s,
                         .kind = S_TXN,
                         .cmps = cmps,
                         .n_cmps = n_cmps,
                         .then_ops = then_ops,
                         .n_then = n_then,
                         .else_ops = else_ops,
                         .n_else = n_else};
    return run_req(&r, out);
}

int meta_sync_lease_grant(meta_sync_t *s, int64_t ttl_ms, meta_result_t **out)
{
    struct sync_req r = {.s = s, .kind = S_GRANT, .ttl_ms = ttl_ms};
    return run_req(&r, out);
}

int meta_sync_lease_keepalive(meta_sync_t *s, meta_lease_t lease, meta_result_t **out)
{
    struct sync_req r = {.s = s, .kind = S_KEEPALIVE, .lease = lease};
    return run_req(&r, out);
}

int meta_sync_lease_revoke(meta_sync_t *s, meta_lease_t lease, meta_result_t **out)
{
    struct sync_req r = {.s = s, .kind = S_REVOKE, .lease = lease};
    return run_req(&r, out);
}

int meta_sync_lease_ttl(meta_sync_t *s, meta_lease_t lease, meta_result_t **out)
{
    struct sync_req r = {.s = s, .kind = S_TTL, .lease = lease};
    return run_req(&r, out);
}
