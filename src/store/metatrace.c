/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metatrace.c — metadata.* spans for the metadata calls the route service makes on behalf of a
 * traced request. Only built into a runtime that has a tracer: the route service is then given
 * a forwarding metadata handle (a meta_backend_ops of its own) that passes every call to the
 * runtime's real handle unchanged and, when the loop thread has a current request span
 * (kvm_trace_scope_*), records the call as a child span: metadata.get / metadata.range /
 * metadata.txn / metadata.lease. The span covers the call from submission to its answer.
 *
 * Context through callbacks: while the forwarded answer is delivered, the call's parent is the
 * loop thread's current span again, so a call the route issues from that callback (the txn
 * after a CAS read) is parented the same way.
 *
 * Lifetimes: the parent is held as a copy (its ids and flags only; breakdown accumulators point
 * at the copy), so a metadata call that outlives its request (deadline) never touches the
 * request's spans. Held calls: each forwarded call keeps its outer call until the inner answer;
 * closing the handle fails the held outer calls (KVMESH_ECANCELED) and orphans their contexts,
 * which the inner answers then free. [loop] only.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "env/env.h"
#include "meta/meta_backend.h"
#include "store/store.h"

struct mt_backend {
    meta_t *inner;
    struct obs_tracer *tracer;
    struct mt_call *held; /* forwarded, not yet answered by the inner handle */
};

struct mt_call {
    meta_call_t *outer; /* NULL once orphaned by close */
    struct mt_backend *be;
    struct mt_call *next, *prev;
    bool traced;
    struct obs_span parent; /* copy of the submitting scope's span */
    struct obs_span span;
};

static _Thread_local struct obs_span *tl_scope;

struct obs_span *kvm_trace_scope_enter(struct obs_span *s)
{
    struct obs_span *saved = tl_scope;
    tl_scope = s;
    return saved;
}

void kvm_trace_scope_leave(struct obs_span *saved)
{
    tl_scope = saved;
}

static void mt_unlink(struct mt_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (c->be)
        c->be->held = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

static void mt_done(void *arg, const meta_result_t *res)
{
    struct mt_call *c = arg;
    if (c->traced) {
        if (res->rc == KVMESH_ENOENT)
            obs_span_set_int(&c->span, "kvmesh.found", 0);
        kvm_span_finish(&c->span, res->rc == KVMESH_ENOENT ? 0 : res->rc);
    }
    if (c->outer) {
        mt_unlink(c);
        struct obs_span *saved = kvm_trace_scope_enter(c->traced ? &c->parent : NULL);
        meta_call_complete(c->outer, res);
        kvm_trace_scope_leave(saved);
    }
    free(c);
}

static const char *mt_name(enum meta_call_kind k)
{
    switch (k) {
    case META_CALL_GET:
        return "metadata.get";
    case META_CALL_RANGE:
        return "metadata.range";
    case META_CALL_TXN:
        return "metadata.txn";
    default:
        return "metadata.lease";
    }
}

static void mt_submit(meta_t *m, meta_call_t *call)
{
    struct mt_backend *be = meta_backend_ctx(m);
    struct mt_call *c = calloc(1, sizeof(*c));
    if (!c) {
        meta_call_fail(call, KVMESH_ENOMEM, "out of memory forwarding a metadata call");
        return;
    }
    c->outer = call;
    c->be = be;
    if (tl_scope && obs_span_sampled(tl_scope)) {
        c->parent = *tl_scope;
        c->parent.root = &c->parent; /* accumulate into the copy, never into the request */
        obs_span_start(be->tracer, &c->parent, mt_name(call->kind), &c->span);
        c->traced = true;
    }
    uint64_t now = env_now_ns(meta_env(m));
    uint64_t left = call->deadline_ns > now ? (call->deadline_ns - now) / 1000000u : 0;
    uint32_t ms = left ? (uint32_t)(left > UINT32_MAX ? UINT32_MAX : left) : 1;
    meta_t *in = be->inner;
    int rc;
    switch (call->kind) {
    case META_CALL_GET:
        rc = meta_get(in, call->key, ms, mt_done, c);
        break;
    case META_CALL_RANGE:
        rc = meta_range(in, call->prefix, call->start_after, call->limit, ms, mt_done, c);
        break;
    case META_CALL_TXN:
        rc = meta_txn(in, call->cmps, call->n_cmps, call->then_ops, call->n_then, call->else_ops,
                      call->n_else, ms, mt_done, c);
        break;
    case META_CALL_LEASE_GRANT:
        rc = meta_lease_grant(in, call->ttl_ms, ms, mt_done, c);
        break;
    case META_CALL_LEASE_KEEPALIVE:
        rc = meta_lease_keepalive(in, call->lease, ms, mt_done, c);
        break;
    case META_CALL_LEASE_REVOKE:
        rc = meta_lease_revoke(in, call->lease, ms, mt_done, c);
        break;
    default:
        rc = meta_lease_ttl(in, call->lease, ms, mt_done, c);
        break;
    }
    if (rc) {
        if (c->traced)
            kvm_span_finish(&c->span, rc);
        meta_call_fail(call, rc, "%s", kvmesh_last_error());
        free(c);
        return;
    }
    c->next = be->held;
    if (be->held)
        be->held->prev = c;
    be->held = c;
}

static void mt_close(meta_t *m)
{
    struct mt_backend *be = meta_backend_ctx(m);
    while (be->held) {
        struct mt_call *c = be->held;
        mt_unlink(c);
        meta_call_t *outer = c->outer;
        c->outer = NULL; /* the inner answer frees c */
        c->be = NULL;
        meta_call_fail(outer, KVMESH_ECANCELED, "metadata handle closed");
    }
    free(be);
}

static const struct meta_backend_ops mt_ops = {
    .name = "traced",
    .open = NULL, /* set up by kvm_metatrace_open (meta_open_backend) */
    .close = mt_close,
    .submit = mt_submit,
};

int kvm_metatrace_open(kvm_rt_t *rt, meta_t **out)
{
    *out = NULL;
    struct mt_backend *be = calloc(1, sizeof(*be));
    if (!be)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the traced metadata handle");
    be->inner = rt->meta;
    be->tracer = rt->tracer;
    char name[64];
    snprintf(name, sizeof(name), "%s-traced", rt->idhex);
    meta_opts_t mo = {.default_timeout_ms = rt->cfg.request_timeout_ms, .name = name};
    int rc = meta_open_backend(out, rt->env, &mt_ops, be, &mo);
    if (rc) {
        free(be);
        return kvm_errf(rc, "out of memory for the traced metadata handle");
    }
    return 0;
}
