/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched.c — the per-tenant scheduler for remote work (sched.h): tenant slots with bounded FIFO
 * queues, weighted round-robin turns with an item and byte budget, the burst and in-flight caps,
 * and the in-flight accounting. Owns no unit memory; owns the slot table.
 *
 * Invariants (ts_check_invariants): the sum of per-slot queue lengths is queued_units; the sum
 * of per-slot in-flight items/bytes is the total; no counter is negative (asserted where it is
 * decremented); a turn's used items/bytes are within its budget except for the first unit of
 * the turn; a recycled slot has nothing queued or in flight.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "kvmesh.h"
#include "tenant/sched.h"

#define TS_SLOTS    (TS_MAX_TENANTS + 1) /* the last one is the overflow slot */
#define TS_OVERFLOW (TS_SLOTS - 1)

struct ts_slot {
    bool used;
    bool pinned; /* configured weight: never recycled */
    char name[KVM_TENANT_MAX_LEN + 1];
    uint32_t weight;
    ts_unit_t *head, *tail;
    uint32_t n_queued;
    uint64_t inflight_items, inflight_bytes;
    uint64_t dispatched_items, dispatched_bytes;
};

struct ts {
    ts_limits_t lim;
    struct ts_slot slots[TS_SLOTS];
    int cur;          /* slot whose turn it is (-1 = no turn) */
    int last;         /* slot that had the last turn (rotation continues after it) */
    uint32_t t_items; /* taken in the current turn */
    uint64_t t_bytes;
    uint64_t seq;
    ts_stats_t st;
};

int ts_limits_validate(const ts_limits_t *lim)
{
    if (!lim)
        return kvm_errf(KVMESH_EINVAL, "fair scheduler: no limits given");
    if (lim->items_per_turn < 1)
        return kvm_errf(KVMESH_EINVAL, "max_remote_batch_items_per_tenant must be >= 1");
    if (lim->batch_bytes < 1)
        return kvm_errf(KVMESH_EINVAL, "max_remote_batch_bytes must be >= 1");
    if (lim->burst_items < lim->items_per_turn)
        return kvm_errf(
            KVMESH_EINVAL,
            "max_remote_batch_burst_items (%u) must be >= "
            "max_remote_batch_items_per_tenant (%u): a tenant could never finish a turn",
            lim->burst_items, lim->items_per_turn);
    if (lim->inflight_bytes < 1)
        return kvm_errf(KVMESH_EINVAL, "max_inflight_bytes_per_batch must be >= 1");
    if (lim->queue_depth < 1 || lim->queue_depth > TS_QUEUE_MAX)
        return kvm_errf(KVMESH_EINVAL, "fair queue depth %u is not in 1..%u", lim->queue_depth,
                        TS_QUEUE_MAX);
    return 0;
}

int ts_new(ts_t **out, const ts_limits_t *lim)
{
    *out = NULL;
    int rc = ts_limits_validate(lim);
    if (rc)
        return rc;
    ts_t *s = calloc(1, sizeof(*s));
    if (!s)
        return kvm_errf(KVMESH_ENOMEM, "fair scheduler: out of memory");
    s->lim = *lim;
    s->cur = -1;
    s->last = TS_OVERFLOW; /* rotation starts at slot 0 */
    struct ts_slot *o = &s->slots[TS_OVERFLOW];
    o->used = o->pinned = true;
    o->weight = 1;
    snprintf(o->name, sizeof(o->name), "%s", TS_OVERFLOW_NAME);
    *out = s;
    return 0;
}

void ts_free(ts_t *s)
{
    if (!s)
        return;
    KVM_ASSERT(s->st.queued_units == 0 && s->st.inflight_units == 0);
    free(s);
}

static int find_slot(const ts_t *s, const char *tenant)
{
    for (int i = 0; i < TS_MAX_TENANTS; i++)
        if (s->slots[i].used && strcmp(s->slots[i].name, tenant) == 0)
            return i;
    return -1;
}

static bool slot_idle(const struct ts_slot *t)
{
    return t->n_queued == 0 && t->inflight_items == 0;
}

/* A slot for tenant: its own, a free one, a recycled idle one, or the overflow slot. */
static int get_slot(ts_t *s, const char *tenant, bool pin)
{
    int i = find_slot(s, tenant);
    if (i >= 0)
        return i;
    int free_i = -1;
    for (int k = 0; k < TS_MAX_TENANTS && free_i < 0; k++)
        if (!s->slots[k].used)
            free_i = k;
    for (int k = 0; k < TS_MAX_TENANTS && free_i < 0; k++)
        if (!s->slots[k].pinned && slot_idle(&s->slots[k]) && k != s->cur)
            free_i = k;
    if (free_i < 0)
        return pin ? -1 : TS_OVERFLOW;
    struct ts_slot *t = &s->slots[free_i];
    KVM_ASSERT(!t->used || slot_idle(t));
    memset(t, 0, sizeof(*t));
    t->used = true;
    t->weight = 1;
    snprintf(t->name, sizeof(t->name), "%s", tenant);
    return free_i;
}

int ts_set_weight(ts_t *s, const char *tenant, uint32_t weight)
{
    if (weight < 1 || weight > TS_MAX_WEIGHT)
        return kvm_errf(KVMESH_EINVAL, "tenant '%s': weight %u is not in 1..%u", tenant, weight,
                        TS_MAX_WEIGHT);
    if (!tenant || !tenant[0] || strlen(tenant) > KVM_TENANT_MAX_LEN)
        return kvm_errf(KVMESH_EINVAL, "fair scheduler: tenant id empty or longer than %d",
                        KVM_TENANT_MAX_LEN);
    int i = get_slot(s, tenant, true);
    if (i < 0)
        return kvm_errf(KVMESH_ENOSPC, "fair scheduler: more than %d tenants with a weight",
                        TS_MAX_TENANTS);
    s->slots[i].pinned = true;
    s->slots[i].weight = weight;
    return 0;
}

int ts_plan(const ts_limits_t *lim, const uint64_t *lens, size_t n, size_t *ends, size_t cap,
            size_t *n_batches)
{
    size_t nb = 0, items = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        bool fits = items < lim->items_per_turn && bytes + lens[i] <= lim->batch_bytes &&
                    bytes + lens[i] >= bytes;
        if (items > 0 && !fits) {
            if (nb == cap)
                return kvm_errf(KVMESH_ERANGE, "fair planning: more than %zu batches", cap);
            ends[nb++] = i;
            items = 0;
            bytes = 0;
        }
        items++;
        bytes += lens[i];
    }
    if (items > 0) {
        if (nb == cap)
            return kvm_errf(KVMESH_ERANGE, "fair planning: more than %zu batches", cap);
        ends[nb++] = n;
    }
    *n_batches = nb;
    return 0;
}

int ts_enqueue(ts_t *s, const char *tenant, ts_unit_t *u)
{
    KVM_ASSERT(u->state == TS_UNIT_IDLE);
    if (u->items < 1 || u->items > s->lim.items_per_turn) {
        s->st.refused_limit++;
        return kvm_errf(KVMESH_EINVAL,
                        "remote batch of %u items refused: max_remote_batch_items_per_tenant is %u",
                        u->items, s->lim.items_per_turn);
    }
    if (u->items > 1 && u->bytes > s->lim.batch_bytes) {
        s->st.refused_limit++;
        return kvm_errf(KVMESH_EINVAL,
                        "remote batch of %u items and %llu bytes refused: max_remote_batch_bytes "
                        "is %llu (only a single item may exceed it)",
                        u->items, (unsigned long long)u->bytes,
                        (unsigned long long)s->lim.batch_bytes);
    }
    if (!tenant || !tenant[0] || strlen(tenant) > KVM_TENANT_MAX_LEN)
        return kvm_errf(KVMESH_EINVAL, "fair scheduler: tenant id empty or longer than %d",
                        KVM_TENANT_MAX_LEN);
    int i = get_slot(s, tenant, false);
    struct ts_slot *t = &s->slots[i];
    if (t->n_queued >= s->lim.queue_depth) {
        s->st.refused_full++;
        return kvm_errf(KVMESH_EAGAIN,
                        "tenant '%s': %u remote batches already queued in this runtime (the fair "
                        "queue is full); retry later or raise fair_queue_depth",
                        tenant, t->n_queued);
    }
    if (i == TS_OVERFLOW)
        s->st.overflow++;
    u->slot = i;
    u->next = NULL;
    u->seq = ++s->seq;
    u->state = TS_UNIT_QUEUED;
    if (t->tail)
        t->tail->next = u;
    else
        t->head = u;
    t->tail = u;
    t->n_queued++;
    s->st.enqueued++;
    s->st.queued_units++;
    return 0;
}

static uint64_t turn_items(const ts_t *s, const struct ts_slot *t)
{
    return (uint64_t)t->weight * s->lim.items_per_turn;
}

static uint64_t turn_bytes(const ts_t *s, const struct ts_slot *t)
{
    uint64_t b = (uint64_t)t->weight * s->lim.batch_bytes;
    return b / t->weight == s->lim.batch_bytes ? b : UINT64_MAX;
}

/* May tenant t start another unit now, as far as its own burst cap goes? */
static bool burst_ok(const ts_t *s, const struct ts_slot *t, const ts_unit_t *u)
{
    if (s->lim.test_bugs & TS_TEST_BUG_NO_BURST)
        return true;
    return t->inflight_items == 0 || t->inflight_items + u->items <= s->lim.burst_items;
}

static bool runnable(const ts_t *s, const struct ts_slot *t)
{
    return t->used && t->head && burst_ok(s, t, t->head);
}

static void end_turn(ts_t *s)
{
    if (s->cur >= 0)
        s->last = s->cur;
    s->cur = -1;
    s->t_items = 0;
    s->t_bytes = 0;
}

/* Starts a turn for the next runnable slot after the last one (it may be the same slot when it
 * is the only runnable one). false when none is runnable. */
static bool start_turn(ts_t *s)
{
    if (s->st.queued_units == 0)
        return false; /* no slot has a head: the scan below would find none (hot path: every
                       * remote read asks twice) */
    for (int k = 1; k <= TS_SLOTS; k++) {
        int from = s->lim.test_bugs & TS_TEST_BUG_NO_ROTATE ? TS_SLOTS - 1 : s->last;
        int i = (from + k) % TS_SLOTS;
        if (runnable(s, &s->slots[i])) {
            s->cur = i;
            s->t_items = 0;
            s->t_bytes = 0;
            s->st.turns++;
            return true;
        }
    }
    return false;
}

ts_unit_t *ts_next(ts_t *s)
{
    /* each pass either dispatches, ends a turn or returns: at most one turn per slot plus one */
    for (int pass = 0; pass <= 2 * TS_SLOTS; pass++) {
        if (s->cur < 0 && !start_turn(s))
            return NULL;
        struct ts_slot *t = &s->slots[s->cur];
        ts_unit_t *u = t->head;
        if (!u || !burst_ok(s, t, u)) {
            end_turn(s);
            continue;
        }
        bool first = s->t_items == 0;
        if (!first && !(s->lim.test_bugs & TS_TEST_BUG_NO_TURN_END) &&
            (s->t_items + u->items > turn_items(s, t) || s->t_bytes + u->bytes > turn_bytes(s, t) ||
             s->t_bytes + u->bytes < s->t_bytes)) {
            end_turn(s);
            continue;
        }
        if (s->st.inflight_bytes > 0 && !(s->lim.test_bugs & TS_TEST_BUG_NO_INFLIGHT) &&
            (s->st.inflight_bytes + u->bytes > s->lim.inflight_bytes ||
             s->st.inflight_bytes + u->bytes < s->st.inflight_bytes)) {
            s->st.blocked_inflight++;
            return NULL; /* the turn stays: completions unblock this very unit */
        }
        /* dispatch */
        t->head = u->next;
        if (!t->head)
            t->tail = NULL;
        u->next = NULL;
        KVM_ASSERT(t->n_queued > 0 && s->st.queued_units > 0);
        t->n_queued--;
        s->st.queued_units--;
        u->state = TS_UNIT_INFLIGHT;
        t->inflight_items += u->items;
        t->inflight_bytes += u->bytes;
        t->dispatched_items += u->items;
        t->dispatched_bytes += u->bytes;
        s->st.inflight_units++;
        s->st.inflight_items += u->items;
        s->st.inflight_bytes += u->bytes;
        s->st.dispatched++;
        if (s->st.inflight_bytes > s->st.peak_inflight_bytes)
            s->st.peak_inflight_bytes = s->st.inflight_bytes;
        if (t->inflight_items > s->st.peak_tenant_inflight_items)
            s->st.peak_tenant_inflight_items = t->inflight_items;
        s->t_items += u->items;
        s->t_bytes += u->bytes;
        return u;
    }
    KVM_ASSERT(!"ts_next: rotation did not settle");
    return NULL;
}

void ts_complete(ts_t *s, ts_unit_t *u)
{
    KVM_ASSERT(u->state == TS_UNIT_INFLIGHT);
    KVM_ASSERT(u->slot >= 0 && u->slot < TS_SLOTS);
    struct ts_slot *t = &s->slots[u->slot];
    /* in-flight accounting never goes negative */
    KVM_ASSERT(t->inflight_items >= u->items && t->inflight_bytes >= u->bytes);
    KVM_ASSERT(s->st.inflight_items >= u->items && s->st.inflight_bytes >= u->bytes);
    KVM_ASSERT(s->st.inflight_units > 0);
    t->inflight_items -= u->items;
    t->inflight_bytes -= u->bytes;
    s->st.inflight_items -= u->items;
    s->st.inflight_bytes -= u->bytes;
    s->st.inflight_units--;
    s->st.completed++;
    u->state = TS_UNIT_IDLE;
    u->slot = -1;
}

int ts_cancel(ts_t *s, ts_unit_t *u)
{
    if (u->state != TS_UNIT_QUEUED)
        return kvm_errf(KVMESH_EINVAL, "fair scheduler: unit is not queued");
    struct ts_slot *t = &s->slots[u->slot];
    ts_unit_t **pp = &t->head, *prev = NULL;
    uint32_t steps = 0;
    while (*pp && *pp != u) {
        KVM_ASSERT(++steps <= s->lim.queue_depth);
        prev = *pp;
        pp = &(*pp)->next;
    }
    KVM_ASSERT(*pp == u);
    *pp = u->next;
    if (t->tail == u)
        t->tail = prev;
    KVM_ASSERT(t->n_queued > 0 && s->st.queued_units > 0);
    t->n_queued--;
    s->st.queued_units--;
    s->st.canceled++;
    u->next = NULL;
    u->state = TS_UNIT_IDLE;
    u->slot = -1;
    return 0;
}

void ts_get_stats(const ts_t *s, ts_stats_t *out)
{
    *out = s->st;
    out->tenants = 0;
    for (int i = 0; i < TS_MAX_TENANTS; i++)
        out->tenants += s->slots[i].used;
}

int ts_tenant(const ts_t *s, const char *tenant, ts_tenant_view_t *out)
{
    int i = strcmp(tenant, TS_OVERFLOW_NAME) == 0 ? TS_OVERFLOW : find_slot(s, tenant);
    if (i < 0)
        return KVMESH_ENOENT;
    const struct ts_slot *t = &s->slots[i];
    *out = (ts_tenant_view_t){.weight = t->weight,
                              .queued_units = t->n_queued,
                              .inflight_items = t->inflight_items,
                              .inflight_bytes = t->inflight_bytes,
                              .dispatched_items = t->dispatched_items,
                              .dispatched_bytes = t->dispatched_bytes};
    return 0;
}

const char *ts_turn_tenant(const ts_t *s, uint32_t *items, uint64_t *bytes)
{
    if (items)
        *items = s->t_items;
    if (bytes)
        *bytes = s->t_bytes;
    return s->cur < 0 ? "" : s->slots[s->cur].name;
}

int ts_check_invariants(const ts_t *s)
{
    uint64_t q = 0, ii = 0, ib = 0;
    for (int i = 0; i < TS_SLOTS; i++) {
        const struct ts_slot *t = &s->slots[i];
        if (!t->used) {
            if (t->n_queued || t->inflight_items)
                return kvm_errf(KVMESH_ECORRUPT, "fair scheduler: unused slot %d holds work", i);
            continue;
        }
        uint32_t n = 0;
        const ts_unit_t *last = NULL;
        for (const ts_unit_t *u = t->head; u; u = u->next) {
            if (++n > s->lim.queue_depth || u->state != TS_UNIT_QUEUED || u->slot != i)
                return kvm_errf(KVMESH_ECORRUPT, "fair scheduler: queue of '%s' is corrupt",
                                t->name);
            last = u;
        }
        if (n != t->n_queued || last != t->tail)
            return kvm_errf(KVMESH_ECORRUPT,
                            "fair scheduler: '%s' counts %u queued units, its queue holds %u",
                            t->name, t->n_queued, n);
        if (t->weight < 1 || t->weight > TS_MAX_WEIGHT)
            return kvm_errf(KVMESH_ECORRUPT, "fair scheduler: '%s' has weight %u", t->name,
                            t->weight);
        q += n;
        ii += t->inflight_items;
        ib += t->inflight_bytes;
    }
    if (q != s->st.queued_units || ii != s->st.inflight_items || ib != s->st.inflight_bytes)
        return kvm_errf(KVMESH_ECORRUPT,
                        "fair scheduler: totals (queued %llu, in-flight %llu items / %llu bytes) "
                        "differ from the slots (%llu, %llu / %llu)",
                        (unsigned long long)s->st.queued_units,
                        (unsigned long long)s->st.inflight_items,
                        (unsigned long long)s->st.inflight_bytes, (unsigned long long)q,
                        (unsigned long long)ii, (unsigned long long)ib);
    if (s->cur >= 0) {
        const struct ts_slot *t = &s->slots[s->cur];
        if (s->t_items > 0 && s->t_items > turn_items(s, t) &&
            s->t_items > s->lim.items_per_turn) /* only a turn's first unit may exceed */
            return kvm_errf(KVMESH_ECORRUPT, "fair scheduler: turn of '%s' took %u items", t->name,
                            s->t_items);
    }
    return 0;
}
