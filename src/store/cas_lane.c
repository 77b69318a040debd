/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cas_lane.c — per-key publication lanes of one runtime (cas_lane.h) and the per-item conflict
 * retry figures. Loop thread only.
 */
#include "store/cas_lane.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "core/util.h"

struct kvm_cas_lane {
    uint64_t hash;
    struct kvm_item *holder;
    struct kvm_item *head, *tail; /* waiters, linked by lane_next */
    struct kvm_cas_lane *next;    /* bucket chain, or the spare list */
};

struct kvm_cas_lanes {
    struct kvm_cas_lane *bucket[CAS_LANE_BUCKETS];
    struct kvm_cas_lane *spare;
    uint32_t n_spare;
    uint32_t waiting;
    struct kvm_item *ready_head, *ready_tail; /* handed a lane, to resume */
    bool running;
    uint32_t max_retries[OBS__N_op];
};

static atomic_bool lanes_test_off;

void kvm_cas_lane_test_set_off(bool off)
{
    atomic_store(&lanes_test_off, off);
}

static struct kvm_cas_lanes *lanes_of(kvm_rt_t *rt)
{
    if (!rt->lanes)
        rt->lanes = calloc(1, sizeof(*rt->lanes));
    return rt->lanes;
}

static struct kvm_cas_lane **slot_of(struct kvm_cas_lanes *t, uint64_t hash)
{
    struct kvm_cas_lane **p = &t->bucket[hash & (CAS_LANE_BUCKETS - 1)];
    while (*p && (*p)->hash != hash)
        p = &(*p)->next;
    return p;
}

bool kvm_cas_lane_enter(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, kvm_cas_lane_fn fn)
{
    if (it->lane_held)
        return true; /* a retry of the holder: ahead of every waiter */
    if (atomic_load_explicit(&lanes_test_off, memory_order_relaxed))
        return true;
    struct kvm_cas_lanes *t = lanes_of(rt);
    if (!t)
        return true;
    struct kvm_cas_lane **p = slot_of(t, it->ident.hash);
    struct kvm_cas_lane *l = *p;
    if (!l) {
        l = t->spare;
        if (l) {
            t->spare = l->next;
            t->n_spare--;
        } else if (!(l = malloc(sizeof(*l)))) {
            return true;
        }
        *l = (struct kvm_cas_lane){.hash = it->ident.hash, .holder = it};
        *p = l;
        it->lane_held = true;
        return true;
    }
    KVM_ASSERT(l->holder != it);
    it->lane_op = op;
    it->lane_fn = fn;
    it->lane_next = NULL;
    if (l->tail)
        l->tail->lane_next = it;
    else
        l->head = it;
    l->tail = it;
    t->waiting++;
    return false;
}

void kvm_cas_lane_leave(kvm_rt_t *rt, struct kvm_item *it)
{
    if (!it->lane_held)
        return;
    it->lane_held = false;
    struct kvm_cas_lanes *t = rt->lanes;
    KVM_ASSERT(t != NULL);
    struct kvm_cas_lane **p = slot_of(t, it->ident.hash);
    struct kvm_cas_lane *l = *p;
    KVM_ASSERT(l != NULL && l->holder == it);
    struct kvm_item *w = l->head;
    if (w) { /* the lane passes to the first waiter */
        l->head = w->lane_next;
        if (!l->head)
            l->tail = NULL;
        l->holder = w;
        w->lane_held = true;
        w->lane_next = NULL;
        t->waiting--;
        if (t->ready_tail)
            t->ready_tail->lane_next = w;
        else
            t->ready_head = w;
        t->ready_tail = w;
        return;
    }
    *p = l->next;
    if (t->n_spare < CAS_LANE_SPARE) {
        l->next = t->spare;
        t->spare = l;
        t->n_spare++;
    } else {
        free(l);
    }
}

void kvm_cas_lane_run(kvm_rt_t *rt)
{
    struct kvm_cas_lanes *t = rt ? rt->lanes : NULL; /* (an op without a runtime: tests) */
    if (!t || t->running || !t->ready_head)
        return;
    t->running = true;
    while (t->ready_head) {
        struct kvm_item *w = t->ready_head;
        t->ready_head = w->lane_next;
        if (!t->ready_head)
            t->ready_tail = NULL;
        w->lane_next = NULL;
        w->lane_fn(w->lane_op, w); /* may end w (and queue more resumptions: run here) */
    }
    t->running = false;
}

void kvm_cas_lane_count_retries(kvm_rt_t *rt, unsigned obs_op, uint32_t retries)
{
    KVM_ASSERT(obs_op < OBS__N_op);
    obs_observe(rt->metrics, op_conflict_retries, obs_op, OBS_NONE, retries);
    struct kvm_cas_lanes *t = retries ? lanes_of(rt) : rt->lanes;
    if (t && retries > t->max_retries[obs_op]) {
        t->max_retries[obs_op] = retries;
        obs_gauge_set(rt->metrics, op_conflict_retries_max, obs_op, OBS_NONE, retries);
    }
}

uint32_t kvm_cas_lane_waiting(const kvm_rt_t *rt)
{
    return rt->lanes ? rt->lanes->waiting : 0;
}

void kvm_cas_lanes_free(kvm_rt_t *rt)
{
    struct kvm_cas_lanes *t = rt->lanes;
    if (!t)
        return;
    for (uint32_t i = 0; i < CAS_LANE_BUCKETS; i++)
        for (struct kvm_cas_lane *l = t->bucket[i], *n; l; l = n) {
            n = l->next;
            free(l);
        }
    for (struct kvm_cas_lane *l = t->spare, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    free(t);
    rt->lanes = NULL;
}
