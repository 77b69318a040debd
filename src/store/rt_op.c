/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rt_op.c — the runtime's lower half: what every other store file needs from "the runtime"
 * without calling up into runtime.c (docs/architecture.md "Store layering").
 *
 *   ops:     an op's life (kvm_op_new / kvm_op_unref), the hand-off of an application thread to
 *            the loop and its bounded wait (kvm_op_run), the loop's completion helpers
 *            (kvm_op_fail / kvm_op_item_done / kvm_op_complete). The loop side of an op runs in
 *            rt->ops_run (ops.c's kvm_ops_run, set by runtime.c at open): this file never calls
 *            ops.c, which calls it.
 *   data-path tables [any]: interned address strings, the cache of opened remote segment
 *            handles, the registered application buffers;
 *   RPC:     the peer of a member [loop];
 *   tracing: span helpers [any].
 *
 * It calls only lower layers, quota.c (an item's quota state is freed with its op) and nothing
 * of the store above it; runtime.c (open/close, the loop glue, admin endpoints) is the top.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "store/data.h"
#include "store/quota.h"
#include "store/store.h"

/* ---- ops ------------------------------------------------------------------------------------ */

/* A zeroed op record of n items: the runtime's spare for one item (kept by the last unref of
 * a one-item op: every single get and put makes one or two), else a new one. rt NULL (unit
 * tests of the item states): no spare. */
static kvm_op_t *op_record(kvm_rt_t *rt, size_t n)
{
    kvm_op_t *op = n == 1 && rt ? atomic_exchange(&rt->op_spare, NULL) : NULL;
    if (op) {
        struct kvm_item *items = op->items;
        memset(op, 0, sizeof(*op));
        memset(items, 0, sizeof(*items));
        op->items = items;
        return op;
    }
    op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    if (n && !(op->items = calloc(n, sizeof(*op->items)))) {
        free(op);
        return NULL;
    }
    return op;
}

/* ---- an item's route records ---------------------------------------------------------------- */

/* Frees r's identity unless it borrows the item's (kvm_item_route_take); r->ident is then
 * empty. The rest of r is left as it is. */
static void route_ident_release(struct kvm_item *it, kvm_route_t *r)
{
    if (r->ident.enc && r->ident.enc == it->ident.enc)
        r->ident.enc = NULL; /* borrowed: the item frees it */
    kvm_ident_free(&r->ident);
}

int kvm_item_route_take(struct kvm_item *it, kvm_route_t *dst, const kvm_route_t *src)
{
    KVM_ASSERT(dst->ident.enc == NULL && src != dst);
    if (!it->ident.enc || !kvm_ident_equal(&src->ident, &it->ident))
        return kvm_route_copy(dst, src); /* (another key's route: its own identity) */
    *dst = *src;
    dst->ident = it->ident; /* borrowed: equal bytes, the item's buffer */
    return 0;
}

void kvm_item_route_drop(struct kvm_item *it, kvm_route_t *r)
{
    if (!r->ident.enc)
        return; /* empty: zeroed already (a record is only ever set with an identity) */
    route_ident_release(it, r);
    memset(r, 0, sizeof(*r));
}

/* ---- ops ------------------------------------------------------------------------------------ */

kvm_op_t *kvm_op_new(kvm_rt_t *rt, enum kvm_op_type type, size_t n)
{
    kvm_op_t *op = op_record(rt, n);
    if (!op)
        return NULL;
    /* (the items' route records are empty: zeroed with the record, as kvm_route_init leaves
     * one; not zeroed again, 1,856 bytes per item) */
    op->n = n;
    op->type = type;
    op->rt = rt;
    atomic_init(&op->refs, 1);
    atomic_init(&op->abandoned, false);
    atomic_init(&op->prim_sent, false);
    pthread_mutex_init(&op->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are CLOCK_MONOTONIC */
    pthread_cond_init(&op->cv, &ca);
    pthread_condattr_destroy(&ca);
    return op;
}

void kvm_op_unref(kvm_op_t *op)
{
    if (!op || atomic_fetch_sub(&op->refs, 1) != 1)
        return;
    for (size_t i = 0; i < op->n; i++) {
        struct kvm_item *it = &op->items[i];
        /* the route records' identities (before the item's, which they may borrow), without
         * zeroing the records: freed, or zeroed whole when the record is reused (op_record) */
        route_ident_release(it, &it->route);
        route_ident_release(it, &it->cur);
        kvm_ident_free(&it->ident);
        kvm_quota_item_free(it);
    }
    if (op->list_ident)
        for (size_t i = 0; i < op->list_n; i++)
            kvm_ident_free(&op->list_ident[i]);
    pthread_mutex_destroy(&op->mu);
    pthread_cond_destroy(&op->cv);
    free(op->span_own);
    if (op->inl.buf != op->inl.lent) /* (a lent buffer is the caller's) */
        free(op->inl.buf);
    /* A one-item record becomes the runtime's spare when there is none (the runtime outlives
     * its ops: the last unref runs on its loop or in a call before close returns). */
    kvm_op_t *none = NULL;
    if (op->n == 1 && op->rt && !atomic_load(&op->rt->closing) &&
        atomic_compare_exchange_strong(&op->rt->op_spare, &none, op))
        return;
    free(op->items);
    free(op);
}

void kvm_op_spare_free(kvm_rt_t *rt)
{
    kvm_op_t *op = atomic_exchange(&rt->op_spare, NULL);
    if (op)
        free(op->items);
    free(op);
}

void kvm_op_fail(kvm_op_t *op, struct kvm_item *it, int rc, const char *fmt, ...)
{
    if (it)
        it->rc = rc;
    if (op->err_set)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(op->err, sizeof(op->err), fmt, ap);
    va_end(ap);
    op->err_set = true;
}

void kvm_op_complete(kvm_op_t *op, int rc)
{
    if (op->on_done) { /* started on the loop, nobody waits (store.h kvm_op_t.on_done) */
        op->rc = rc;
        op->done = true;
        op->on_done(op);
        kvm_op_unref(op); /* the loop's reference */
        return;
    }
    pthread_mutex_lock(&op->mu);
    op->rc = rc;
    op->done = true;
    pthread_mutex_unlock(&op->mu);
    /* Signalled after the unlock, so the woken caller does not block on op->mu the loop still
     * holds; the loop's reference keeps op (and its cv) alive until after the signal. */
    pthread_cond_signal(&op->cv);
    kvm_op_unref(op); /* the loop's reference */
}

void kvm_op_item_done(kvm_op_t *op)
{
    KVM_ASSERT(op->pending > 0);
    if (--op->pending == 0)
        kvm_op_complete(op, 0);
}

static void op_enter(void *arg)
{
    kvm_op_t *op = arg;
    kvm_waitq_signal(&op->rt->wq_room); /* room in the request queue (post_when_room) */
    if (atomic_load(&op->rt->closing)) {
        kvm_op_fail(op, NULL, KVMESH_ECLOSED, "the runtime is closing");
        kvm_op_complete(op, KVMESH_ECLOSED);
        return;
    }
    op->pending = op->n;
    if (atomic_load(&op->abandoned)) {
        /* The caller gave up before the loop saw the op: nothing of it was sent. A publication's
         * reservations are released (an abort); the rest just completes. */
        if (op->type == KVM_OP_PUBLISH) {
            op->type = KVM_OP_ABORT;
        } else {
            kvm_op_complete(op, KVMESH_ETIMEDOUT);
            return;
        }
    }
    if (op->n == 0 && op->type <= KVM_OP_HANDOFF) {
        kvm_op_complete(op, 0);
        return;
    }
    /* Items may all finish synchronously inside the runner: keep op alive until it returns. */
    KVM_ASSERT(op->rt->ops_run); /* set by kvm_rt_open before the loop starts */
    atomic_fetch_add(&op->refs, 1);
    op->rt->ops_run(op);
    kvm_op_unref(op);
}

static bool op_bounded(const kvm_op_t *op)
{
    return op->type == KVM_OP_PLACE || op->type == KVM_OP_PUBLISH || op->type == KVM_OP_LOOKUP ||
           op->type == KVM_OP_REMOVE;
}

/* The outcome of an abandoned op, for the caller (docs/api.md "Errors"). */
static int op_abandoned_err(const kvm_op_t *op, uint32_t timeout_ms)
{
    switch (op->type) {
    case KVM_OP_PUBLISH:
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "deadline of %u ms passed while the route update was in flight; the put "
                        "may have been applied (read the key back, or retry the put)",
                        timeout_ms);
    case KVM_OP_REMOVE:
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "deadline of %u ms passed while the tombstone update was in flight; the "
                        "remove may have been applied (retry the remove)",
                        timeout_ms);
    case KVM_OP_PLACE:
        if (atomic_load(&op->prim_sent)) /* (put_primary.c) */
            return kvm_errf(KVMESH_ETIMEDOUT,
                            "deadline of %u ms passed while the owner, the key's route primary, "
                            "was writing and publishing it; the put may have been applied (read "
                            "the key back, or retry the put)",
                            timeout_ms);
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "deadline of %u ms passed while reserving replica space; the put was not "
                        "applied (owners slow or unreachable; retry)",
                        timeout_ms);
    default:
        return kvm_errf(KVMESH_ETIMEDOUT,
                        "deadline of %u ms passed while looking up the route; nothing was "
                        "changed (the route authority is slow or unreachable; retry)",
                        timeout_ms);
    }
}

/* The request queue was full: post again each time the loop took an op off it (op_enter signals
 * rt->wq_room), until the deadline or close. */
static int post_when_room(kvm_op_t *op)
{
    kvm_rt_t *rt = op->rt;
    uint64_t gen = kvm_waitq_enter(&rt->wq_room);
    int rc;
    while ((rc = env_post(rt->env, op_enter, op)) == KVMESH_EAGAIN) {
        int w = kvm_waitq_wait(&rt->wq_room, &gen, op->deadline_ms);
        if (w == KVMESH_ECLOSED)
            rc = w;
        if (w)
            break;
    }
    kvm_waitq_leave(&rt->wq_room);
    return rc;
}

/* The led op's condition (env_uv_thread_lead): the loop completed it. */
static bool op_is_done(void *arg)
{
    kvm_op_t *op = arg;
    pthread_mutex_lock(&op->mu);
    bool done = op->done;
    pthread_mutex_unlock(&op->mu);
    return done;
}

/* Hands op to the loop through the request queue (the loop thread runs op_enter). 0, or the
 * caller's error (nothing was sent). */
static int op_post(kvm_op_t *op)
{
    kvm_rt_t *rt = op->rt;
    int rc = env_post(rt->env, op_enter, op);
    if (rc == KVMESH_EAGAIN)
        rc = post_when_room(op);
    if (rc == KVMESH_ECLOSED)
        return kvm_errf(rc, "the runtime is closed");
    if (rc)
        return kvm_errf(rc == KVMESH_EAGAIN ? KVMESH_ETIMEDOUT : rc,
                        "the runtime's request queue stayed full until the deadline (%u ms); "
                        "nothing was sent",
                        rt->cfg.request_timeout_ms);
    return 0;
}

/*
 * The application thread's side of an op: the loop runs op_enter and completes the op; this
 * thread waits for it, bounded for PLACE/PUBLISH/LOOKUP/REMOVE (abandoned at deadline + slack).
 *
 * Who runs the loop meanwhile (docs/architecture.md "Threads"): when the runtime's loop is free
 * and no other thread waits for an op of this runtime, this thread leads it (env_uv_thread_lead):
 * it runs op_enter itself and then the loop until the op is done or the give-up time, so the
 * answer that completes the op wakes this thread directly (no post and eventfd wake of the loop
 * thread, no condition-variable wake back). When the loop is busy, or other threads wait too (the
 * loop thread then serves them all, instead of leaders taking turns with it and waking it once
 * per op), it posts op_enter and waits on op->cv as before. Either way the op counts one hand-off
 * to the loop (op_handoffs_total: the op entered the loop's state machine); a led one also counts
 * in op_loop_leads_total. A led op past its give-up time is abandoned exactly like a posted one
 * (the loop goes on with it and drops its late result); closing, the queue bound (only posted ops
 * take a queue slot) and the span handling do not depend on the path.
 */
int kvm_op_run(kvm_op_t *op)
{
    kvm_rt_t *rt = op->rt;
    if (atomic_load(&rt->closing))
        return kvm_errf(KVMESH_ECLOSED, "the runtime is closed");
    if (!op->deadline_ms)
        op->deadline_ms = kvm_deadline_new(rt);
    bool bounded = op_bounded(op);
    /* The caller's span lives on its stack: a bounded op's loop side gets an op-owned copy
     * (its own local root), since the caller may return before the loop is done. */
    struct obs_span *real_span = NULL;
    if (bounded && op->span && !op->span_own) {
        real_span = op->span;
        op->span_own = malloc(sizeof(*op->span_own));
        if (op->span_own) {
            *op->span_own = *real_span;
            op->span_own->root = NULL; /* children account their stage time into the copy */
            memset(op->span_own->stage_ns, 0, sizeof(op->span_own->stage_ns));
        }
        op->span = op->span_own; /* NULL (untraced loop side) when out of memory */
    }
    atomic_fetch_add(&op->refs, 1);
    KVM_CP_COUNT(op, op_handoffs_total, OBS_NONE, 1);
    uint64_t give_up_ms = op->deadline_ms + STORE_DEADLINE_SLACK_MS;
    /* Lead only when no other thread waits for an op: with several, the loop thread serves them
     * in batches, while leaders taking turns with it would wake it once per op. */
    bool alone = atomic_fetch_add(&rt->ops_running, 1) == 0;
    enum env_uv_lead led = !alone ? ENV_UV_LEAD_REFUSED
                                  : env_uv_thread_lead(rt->thread, op_enter, op, op_is_done, op,
                                                       bounded ? give_up_ms : 0);
    /* A posted op's answer must wake the loop thread at once: it watches the loop's I/O while
     * this thread waits (env_uv_thread_waiting; leaders in a row leave the I/O to themselves). */
    bool posted = led == ENV_UV_LEAD_REFUSED;
    if (!posted) {
        KVM_CP_COUNT(op, op_loop_leads_total, OBS_NONE, 1);
    } else {
        env_uv_thread_waiting(rt->thread, true);
        int rc = op_post(op);
        if (rc) {
            env_uv_thread_waiting(rt->thread, false);
            atomic_fetch_sub(&rt->ops_running, 1);
            atomic_fetch_sub(&op->refs, 1);
            return rc;
        }
    }
    /* (ENV_UV_LEAD_DEADLINE finds the give-up time passed at once; STOPPED waits as if posted) */
    struct timespec ts = {.tv_sec = (time_t)(give_up_ms / 1000),
                          .tv_nsec = (long)(give_up_ms % 1000) * 1000000L};
    bool abandoned = false;
    pthread_mutex_lock(&op->mu);
    while (!op->done) {
        if (!bounded) {
            pthread_cond_wait(&op->cv, &op->mu);
            continue;
        }
        if (pthread_cond_timedwait(&op->cv, &op->mu, &ts) == ETIMEDOUT && !op->done) {
            atomic_store(&op->abandoned, true);
            abandoned = true;
            break;
        }
    }
    pthread_mutex_unlock(&op->mu);
    if (posted)
        env_uv_thread_waiting(rt->thread, false);
    atomic_fetch_sub(&rt->ops_running, 1);
    if (real_span && !abandoned) { /* (an abandoned op's span stays the loop's copy) */
        op->span = real_span;      /* the app thread's own uses after the op (data.c) */
        if (op->span_own) {
            struct obs_span *root = real_span->root ? real_span->root : real_span;
            for (size_t i = 0; i < KVM_ARRAY_SIZE(root->stage_ns); i++)
                __atomic_fetch_add(&root->stage_ns[i],
                                   __atomic_load_n(&op->span_own->stage_ns[i], __ATOMIC_RELAXED),
                                   __ATOMIC_RELAXED);
        }
    }
    if (abandoned)
        return op_abandoned_err(op, rt->cfg.request_timeout_ms);
    if (op->rc)
        return kvm_errf(op->rc, "%s", op->err);
    if (op->err_set)
        kvm_errf(KVMESH_EINTERNAL, "%s", op->err); /* per-item failures: message for the caller */
    return 0;
}

/* ---- helpers for application threads -------------------------------------------------------- */

const char *kvm_rt_intern(kvm_rt_t *rt, const char *s)
{
    pthread_mutex_lock(&rt->mu);
    const char *found = NULL;
    for (size_t i = 0; i < rt->n_interned && !found; i++)
        if (strcmp(rt->interned[i], s) == 0)
            found = rt->interned[i];
    if (!found) {
        if (rt->n_interned == rt->cap_interned) {
            size_t nc = rt->cap_interned ? rt->cap_interned * 2 : 16;
            char **p = realloc(rt->interned, nc * sizeof(*p));
            if (p) {
                rt->interned = p;
                rt->cap_interned = nc;
            }
        }
        char *d = rt->n_interned < rt->cap_interned ? strdup(s) : NULL;
        if (d)
            rt->interned[rt->n_interned++] = d;
        found = d;
    }
    pthread_mutex_unlock(&rt->mu);
    return found;
}

int kvm_rt_seg_open(kvm_rt_t *rt, const char *data_addr, uint64_t seg_id, uint64_t token,
                    struct tp_segment **out)
{
    /* Fast path, shared with the other application threads: a usable cached handle. */
    pthread_rwlock_rdlock(&rt->dp_rw);
    for (size_t i = 0; i < rt->n_seg_cache; i++)
        if (rt->seg_cache[i].data_addr == data_addr && rt->seg_cache[i].seg_id == seg_id &&
            tp_segment_usable(rt->seg_cache[i].h)) {
            *out = rt->seg_cache[i].h;
            pthread_rwlock_unlock(&rt->dp_rw);
            return 0;
        }
    pthread_rwlock_unlock(&rt->dp_rw);
    pthread_rwlock_wrlock(&rt->dp_rw);
    for (size_t i = 0; i < rt->n_seg_cache; i++)
        if (rt->seg_cache[i].data_addr == data_addr && rt->seg_cache[i].seg_id == seg_id) {
            struct tp_segment *h = rt->seg_cache[i].h, *nh;
            /* The peer died (I/O error, timeout, an aborted request): open it again; the old
             * handle may still be in use by another thread, so it is kept until close. */
            if (!tp_segment_usable(h) && rt->n_seg_retired < STORE_SEG_RETIRED_MAX) {
                if (!rt->seg_retired)
                    rt->seg_retired = calloc(STORE_SEG_RETIRED_MAX, sizeof(*rt->seg_retired));
                if (rt->seg_retired &&
                    tp_open_segment(rt->tp, data_addr, seg_id, token, &nh) == 0) {
                    rt->seg_retired[rt->n_seg_retired++] = h;
                    rt->seg_cache[i].h = h = nh;
                }
            }
            *out = h;
            pthread_rwlock_unlock(&rt->dp_rw);
            return 0;
        }
    int rc = 0;
    if (rt->n_seg_cache == STORE_SEG_CACHE_MAX) {
        rc = kvm_errf(KVMESH_ENOSPC, "more than %d remote segments opened", STORE_SEG_CACHE_MAX);
    } else {
        if (!rt->seg_cache)
            rt->seg_cache = calloc(STORE_SEG_CACHE_MAX, sizeof(*rt->seg_cache));
        if (!rt->seg_cache)
            rc = KVMESH_ENOMEM;
        else if ((rc = tp_open_segment(rt->tp, data_addr, seg_id, token, out)) == 0)
            rt->seg_cache[rt->n_seg_cache++] =
                (struct kvm_seg_handle){.data_addr = data_addr, .seg_id = seg_id, .h = *out};
    }
    pthread_rwlock_unlock(&rt->dp_rw);
    return rc;
}

/* The number of registered buffers starting at or below address a (rt->regs is sorted by
 * addr). Caller holds dp_rw. */
static size_t regs_at_or_below(const kvm_rt_t *rt, uintptr_t a)
{
    size_t lo = 0, hi = rt->n_regs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)rt->regs[mid].addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Per item of every batch: a binary search, then only the buffers that start at most
 * max_reg_len below p (one, unless registrations overlap), not a scan of all of them. */
bool kvm_rt_is_registered(kvm_rt_t *rt, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    bool ok = false;
    pthread_rwlock_rdlock(&rt->dp_rw);
    for (size_t i = regs_at_or_below(rt, a); i-- > 0 && !ok;) {
        uintptr_t b = (uintptr_t)rt->regs[i].addr;
        if (a - b > rt->max_reg_len)
            break; /* this one and every one below it ends before p */
        ok = a - b <= rt->regs[i].len && len <= rt->regs[i].len - (a - b);
    }
    pthread_rwlock_unlock(&rt->dp_rw);
    return ok;
}

int kvm_rt_register(kvm_rt_t *rt, void *addr, size_t len)
{
    pthread_rwlock_wrlock(&rt->dp_rw);
    int rc = 0;
    for (size_t i = 0; i < rt->n_regs; i++)
        if (rt->regs[i].addr == addr)
            rc = kvm_errf(KVMESH_EEXIST, "buffer %p is already registered", addr);
    if (!rc && rt->n_regs == rt->cap_regs) {
        size_t nc = rt->cap_regs ? rt->cap_regs * 2 : 8;
        void *p = realloc(rt->regs, nc * sizeof(*rt->regs));
        if (!p)
            rc = KVMESH_ENOMEM;
        else {
            rt->regs = p;
            rt->cap_regs = nc;
        }
    }
    if (!rc && (rc = tp_register_memory(rt->tp, addr, len)) == 0) {
        size_t at = regs_at_or_below(rt, (uintptr_t)addr);
        memmove(&rt->regs[at + 1], &rt->regs[at], (rt->n_regs - at) * sizeof(*rt->regs));
        rt->regs[at] = (struct kvm_reg_buf){addr, len};
        rt->n_regs++;
        rt->max_reg_len = len > rt->max_reg_len ? len : rt->max_reg_len;
    }
    pthread_rwlock_unlock(&rt->dp_rw);
    return rc;
}

/* After a removal: max_reg_len is the longest remaining buffer again. Caller holds dp_rw. */
static void regs_max_len_update(kvm_rt_t *rt)
{
    rt->max_reg_len = 0;
    for (size_t i = 0; i < rt->n_regs; i++)
        rt->max_reg_len = rt->regs[i].len > rt->max_reg_len ? rt->regs[i].len : rt->max_reg_len;
}

int kvm_rt_unregister(kvm_rt_t *rt, void *addr)
{
    pthread_rwlock_wrlock(&rt->dp_rw);
    int rc = kvm_errf(KVMESH_ENOENT, "buffer %p is not registered", addr);
    for (size_t i = 0; i < rt->n_regs; i++)
        if (rt->regs[i].addr == addr) {
            memmove(&rt->regs[i], &rt->regs[i + 1], (rt->n_regs - i - 1) * sizeof(*rt->regs));
            rt->n_regs--;
            regs_max_len_update(rt);
            tp_unregister_memory(rt->tp, addr);
            kvm_waitq_signal(&rt->wq_reg); /* a registration slot is free (data.c) */
            rc = 0;
            break;
        }
    pthread_rwlock_unlock(&rt->dp_rw);
    if (!rc)
        kvm_err_clear();
    return rc;
}

/* ---- RPC ----------------------------------------------------------------------------------- */

/* rpc_local = unix: a unix peer could not be reached before its first handshake (the socket file
 * gone, nothing listening on it, or not reachable from here): its calls, those queued on it among
 * them, went to the member's tcp peer (rpc_peer_set_fallback) and later ones go there too. One
 * line on stderr per peer given up, saying what failed and what happens next. */
static void local_fell_back(rpc_peer *p, const char *why, void *arg)
{
    kvm_rt_t *rt = arg;
    rt->n_rpc_local_failed++;
    fprintf(stderr,
            "kvmesh: rpc_local: runtime %s: %s; its calls go over tcp from now on (%s); this "
            "runtime has given up %zu unix socket%s\n",
            rpc_peer_runtime_id(p), why[0] ? why : "connection failed",
            rpc_peer_address(rpc_peer_fallback(p)), rt->n_rpc_local_failed,
            rt->n_rpc_local_failed == 1 ? "" : "s");
}

/* rpc_local = unix: m's unix-socket peer when both sides published one from the same host
 * identity (boot id and network namespace) and it has not fallen back; else NULL (tcp). The unix
 * peer falls back to m's tcp peer for good when its first connection fails (local_fell_back): no
 * call fails because the unix socket was unavailable, and no flapping between the two. */
static rpc_peer *local_peer(kvm_rt_t *rt, const struct kvm_member *m)
{
    if (!rt->rpc_local_addr[0] || !m->rpc_local || !m->rpc_local[0] || !m->host ||
        strcmp(m->host, rt->host_id) != 0 || !m->rpc_addr[0])
        return NULL;
    if (rt->n_rpc_local_failed >= KVM_RPC_LOCAL_FAILED_MAX)
        return NULL; /* that many failed: unix sockets do not work here */
    rpc_peer *p = NULL, *tcp = NULL;
    if (rpc_peer_get(rt->ep, m->idhex, m->rpc_local, &p) != 0) {
        kvm_err_clear();
        return NULL;
    }
    if (rpc_peer_fell_back(p))
        return NULL;
    if (!rpc_peer_fallback(p)) {
        if (rpc_peer_get(rt->ep, m->idhex, m->rpc_addr, &tcp) != 0) {
            kvm_err_clear();
            return NULL; /* (no unix peer without its tcp fallback) */
        }
        rpc_peer_set_fallback(p, tcp, local_fell_back, rt);
    }
    return p;
}

rpc_peer *kvm_rt_peer(kvm_rt_t *rt, const struct kvm_member *m)
{
    rpc_peer *p = NULL;
    if (!rt->ep)
        return NULL;
    if ((p = local_peer(rt, m)) != NULL)
        return p;
    if (!m->rpc_addr[0] || rpc_peer_get(rt->ep, m->idhex, m->rpc_addr, &p) != 0)
        return NULL;
    return p;
}

/* ---- tracing ------------------------------------------------------------------------------- */

struct obs_span *kvm_span_begin(kvm_rt_t *rt, struct obs_span *parent, bool root, const char *name,
                                struct obs_span *out)
{
    if (!rt->tracer || (!parent && !root) || (parent && !obs_span_sampled(parent)))
        return NULL;
    obs_span_start(rt->tracer, parent, name, out);
    return out;
}

void kvm_span_finish(struct obs_span *s, int rc)
{
    if (!s)
        return;
    if (rc)
        obs_span_set_status(s, rc);
    obs_span_end(s);
}

void kvm_span_wire(const struct obs_span *s, struct frame_trace *out)
{
    memset(out, 0, sizeof(*out));
    if (!s)
        return;
    struct obs_trace_ctx ctx;
    uint8_t w[OBS_TRACE_CTX_WIRE_LEN];
    obs_span_context(s, &ctx);
    obs_trace_ctx_inject(&ctx, w);
    KVM_ASSERT(sizeof(out->trace_id) + sizeof(out->span_id) + 1 == OBS_TRACE_CTX_WIRE_LEN);
    memcpy(out->trace_id, w, sizeof(out->trace_id));
    memcpy(out->span_id, w + sizeof(out->trace_id), sizeof(out->span_id));
    out->flags = w[OBS_TRACE_CTX_WIRE_LEN - 1];
}

struct obs_span *kvm_span_remote(kvm_rt_t *rt, const struct frame_trace *in, const char *name,
                                 struct obs_span *out)
{
    if (!rt->tracer || !(in->flags & OBS_TRACE_FLAG_SAMPLED))
        return NULL;
    uint8_t w[OBS_TRACE_CTX_WIRE_LEN];
    memcpy(w, in->trace_id, sizeof(in->trace_id));
    memcpy(w + sizeof(in->trace_id), in->span_id, sizeof(in->span_id));
    w[OBS_TRACE_CTX_WIRE_LEN - 1] = in->flags;
    struct obs_trace_ctx ctx;
    if (obs_trace_ctx_extract(w, &ctx) != 0 || !obs_trace_ctx_present(&ctx))
        return NULL;
    obs_span_start_remote(rt->tracer, &ctx, name, out);
    return out;
}

/* ---- queries through the loop -------------------------------------------------------------- */

int kvm_store_stats(kvm_rt_t *rt, struct kvm_rt_stats *st)
{
    kvm_op_t *op = kvm_op_new(rt, KVM_OP_STATS, 0);
    if (!op)
        return KVMESH_ENOMEM;
    op->stats = st;
    int rc = kvm_op_run(op);
    kvm_op_unref(op);
    return rc;
}
