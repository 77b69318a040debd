/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fair.c — the runtime's gate for remote payload batches (fair.h): owns the scheduler
 * (src/tenant/sched.c), its mutex and the condition variable waiting application threads
 * sleep on. The scheduler's state is touched only under the mutex; a ticket is handed out by
 * ts_next inside pump(), which marks it granted and wakes the waiters. In-flight accounting is
 * released only by kvm_fair_release (batch completed or failed) — a waiter that gives up before
 * its grant cancels its queued unit instead, and one granted in the same instant keeps it (the
 * caller then owns a held ticket and releases it after its batch).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "obs/metrics.h"
#include "store/fair.h"

#define FAIR_OFF_CHUNK 16  /* items per batch when fairness is off */
#define FAIR_PLAN_MAX  128 /* items one planning call looks at (= data.c DATA_CHUNK_MAX) */

struct kvm_fair {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ts_t *s;
    ts_limits_t lim;
};

int kvm_fair_open(kvm_rt_t *rt)
{
    rt->fair = NULL;
    if (!rt->cfg.fairness)
        return 0;
    struct kvm_fair *f = calloc(1, sizeof(*f));
    if (!f)
        return kvm_errf(KVMESH_ENOMEM, "fair scheduler: out of memory");
    f->lim = (ts_limits_t){.items_per_turn = rt->cfg.fair_batch_items,
                           .batch_bytes = rt->cfg.fair_batch_bytes,
                           .burst_items = rt->cfg.fair_burst_items,
                           .inflight_bytes = rt->cfg.fair_inflight_bytes,
                           .queue_depth = rt->cfg.fair_queue_depth};
    int rc = ts_new(&f->s, &f->lim);
    for (uint32_t i = 0; !rc && i < rt->cfg.n_tenant_weights; i++)
        rc =
            ts_set_weight(f->s, rt->cfg.tenant_weights[i].tenant, rt->cfg.tenant_weights[i].weight);
    if (rc) {
        if (f->s)
            ts_free(f->s);
        free(f);
        return rc;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&f->mu, NULL);
    rt->fair = f;
    return 0;
}

void kvm_fair_close(kvm_rt_t *rt)
{
    struct kvm_fair *f = rt->fair;
    if (!f)
        return;
    rt->fair = NULL;
    ts_free(f->s); /* asserts nothing is queued or in flight */
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

uint64_t kvm_fair_item_bytes(const struct kvm_item *it)
{
    if (it->rc)
        return 0;
    uint64_t remote = 0;
    for (uint32_t r = 0; r < it->n_res; r++)
        remote += !it->res[r].local && !it->res[r].written; /* (written: put_inline.c) */
    return it->len * remote;
}

static bool same_tenant(const kvm_ident_t *a, const kvm_ident_t *b)
{
    return a->tenant_len == b->tenant_len &&
           memcmp(kvm_ident_tenant(a), kvm_ident_tenant(b), a->tenant_len) == 0;
}

size_t kvm_fair_plan_wire(kvm_rt_t *rt, const struct kvm_item *items, const uint64_t *wire,
                          size_t n)
{
    KVM_ASSERT(n >= 1);
    struct kvm_fair *f = rt->fair;
    if (!f)
        return n < FAIR_OFF_CHUNK ? n : FAIR_OFF_CHUNK;
    size_t k = 1;
    uint64_t bytes = wire[0];
    while (k < n && k < f->lim.items_per_turn) {
        uint64_t b = wire[k];
        if (!same_tenant(&items[k].ident, &items[0].ident) || bytes + b > f->lim.batch_bytes ||
            bytes + b < bytes)
            break;
        bytes += b;
        k++;
    }
    return k;
}

size_t kvm_fair_plan(kvm_rt_t *rt, const struct kvm_item *items, size_t base, size_t n, size_t max)
{
    KVM_ASSERT(base < n && max >= 1);
    size_t left = n - base < max ? n - base : max;
    uint64_t wire[FAIR_PLAN_MAX];
    if (left > FAIR_PLAN_MAX)
        left = FAIR_PLAN_MAX;
    for (size_t k = 0; k < left; k++)
        wire[k] = kvm_fair_item_bytes(&items[base + k]);
    return kvm_fair_plan_wire(rt, &items[base], wire, left);
}

/* Hands out every unit the scheduler lets go now; wakes the waiters when one was granted. */
static void pump(struct kvm_fair *f)
{
    bool any = false;
    ts_unit_t *u;
    while ((u = ts_next(f->s)) != NULL) {
        struct kvm_fair_ticket *t = u->user;
        t->granted = true;
        any = true;
    }
    if (any)
        pthread_cond_broadcast(&f->cv);
}

int kvm_fair_acquire(kvm_rt_t *rt, const kvm_ident_t *scope, uint32_t items, uint64_t bytes,
                     uint64_t deadline_ms, struct kvm_fair_ticket *t)
{
    memset(t, 0, sizeof(*t));
    struct kvm_fair *f = rt->fair;
    if (!f)
        return 0;
    char tenant[KVM_TENANT_MAX_LEN + 1];
    memcpy(tenant, kvm_ident_tenant(scope), scope->tenant_len);
    tenant[scope->tenant_len] = '\0';
    t->u.items = items;
    t->u.bytes = bytes;
    t->u.user = t;
    pthread_mutex_lock(&f->mu);
    int rc = ts_enqueue(f->s, tenant, &t->u);
    if (rc) {
        pthread_mutex_unlock(&f->mu);
        if (rc == KVMESH_EAGAIN)
            obs_count(rt->metrics, fair_batches_total, OBS_FAIR_QUEUE_FULL, OBS_NONE, 1);
        return rc; /* message set by ts_enqueue */
    }
    pump(f);
    bool waited = !t->granted;
    struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
    while (!t->granted) {
        int w = deadline_ms ? pthread_cond_timedwait(&f->cv, &f->mu, &ts)
                            : pthread_cond_wait(&f->cv, &f->mu);
        if (w == ETIMEDOUT && !t->granted) {
            int c = ts_cancel(f->s, &t->u);
            KVM_ASSERT(c == 0);
            pump(f); /* the queue head may have changed */
            pthread_mutex_unlock(&f->mu);
            obs_count(rt->metrics, fair_batches_total, OBS_FAIR_TIMED_OUT, OBS_NONE, 1);
            return kvm_errf(KVMESH_ETIMEDOUT,
                            "tenant '%s': the deadline passed while the remote batch waited for "
                            "its fair-scheduling turn (other tenants' batches in flight); the put "
                            "was not applied (retry, or raise max_inflight_bytes_per_batch)",
                            tenant);
        }
    }
    t->held = true;
    pthread_mutex_unlock(&f->mu);
    obs_count(rt->metrics, fair_batches_total, waited ? OBS_FAIR_WAITED : OBS_FAIR_IMMEDIATE,
              OBS_NONE, 1);
    return 0;
}

void kvm_fair_release(kvm_rt_t *rt, struct kvm_fair_ticket *t)
{
    struct kvm_fair *f = rt->fair;
    if (!f || !t->held)
        return;
    pthread_mutex_lock(&f->mu);
    ts_complete(f->s, &t->u);
    t->held = false;
    pump(f);
    pthread_mutex_unlock(&f->mu);
}

void kvm_fair_stats(kvm_rt_t *rt, ts_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    struct kvm_fair *f = rt->fair;
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    ts_get_stats(f->s, out);
    pthread_mutex_unlock(&f->mu);
}
