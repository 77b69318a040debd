/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_svc.c — the route service glue (route.h): cluster policy bootstrap, the runtime's
 * metadata lease (the only steady-state metadata traffic: one keepalive per runtime every
 * lease/ROUTE_KEEPALIVE_DIV), pushed membership, message dispatch, outgoing peer calls with
 * bounded retransmission, and tracking of metadata calls so that freeing the service while a
 * call is in flight is safe (the call is detached and its completion only frees the request).
 *
 * Service life:  STARTING --policy ok + lease granted--> READY --route_svc_free--> (freed)
 *                STARTING --policy differs / error------> start callback with the error
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/wrh.h"
#include "meta/keyspace.h"
#include "route/route_int.h"
#include "route/route_metaonly.h"
#include "route/route_test.h"

uint64_t route_now(route_svc_t *svc)
{
    return env_now_ns(svc->env);
}

uint64_t route_conservative_deadline(uint64_t sent_ns, uint64_t remaining_ns)
{
    /* the remaining time was measured on another clock (or the store's) and will elapse on
     * ours: both may err by ROUTE_CLOCK_DRIFT_PPM, so shrink by twice that, then the margin */
    uint64_t shrink = remaining_ns / 1000000u * (2u * ROUTE_CLOCK_DRIFT_PPM) +
                      (remaining_ns % 1000000u) * (2u * ROUTE_CLOCK_DRIFT_PPM) / 1000000u;
    uint64_t d = remaining_ns - shrink;
    if (d <= ROUTE_LEASE_MARGIN_NS)
        return sent_ns;
    return sent_ns + d - ROUTE_LEASE_MARGIN_NS;
}

/* ---- metadata call tracking ----------------------------------------------------------------- */

route_mreq_t *route_mreq_new(route_svc_t *svc, route_mreq_fn fn, void *ctx, uint32_t shard)
{
    route_mreq_t *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->svc = svc;
    q->fn = fn;
    q->ctx = ctx;
    q->shard = shard;
    q->next = svc->mreqs;
    if (svc->mreqs)
        svc->mreqs->prev = q;
    svc->mreqs = q;
    svc->stats.meta_calls++;
    return q;
}

static void mreq_unlink(route_svc_t *svc, route_mreq_t *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        svc->mreqs = q->next;
    if (q->next)
        q->next->prev = q->prev;
}

void route_mreq_cb(void *arg, const meta_result_t *res)
{
    route_mreq_t *q = arg;
    route_svc_t *svc = q->svc;
    if (svc) {
        mreq_unlink(svc, q);
        q->fn(svc, q, res);
    }
    free(q);
}

int route_shard_meta_key(route_svc_t *svc, uint32_t shard, char *out, size_t cap)
{
    return ks_shard_key(out, cap, svc->deployment, shard);
}

/* ---- peer calls ----------------------------------------------------------------------------- */

/* Largest encode buffer a service keeps (a message of one identity and one route is bounded by
 * about 16.6 KiB; transfer pages, up to ROUTE_MSG_MAX_LEN, get a buffer of their own). */
#define ROUTE_ENC_KEEP_MAX (32u * 1024)

/* The buffer to encode m into: the service's reusable one (grown to the message's bound, kept
 * until route_svc_free) unless it is in use further up the stack (a synchronous delivery that
 * sends again) or the bound is above ROUTE_ENC_KEEP_MAX, then a malloc'd one. A 16 KiB malloc
 * and free per route message was a visible share of a small batch's CPU. */
static uint8_t *enc_take(route_svc_t *svc, size_t cap)
{
    if (svc->enc_busy || cap > ROUTE_ENC_KEEP_MAX)
        return malloc(cap);
    if (svc->enc_cap < cap) {
        uint8_t *nb = realloc(svc->enc, cap);
        if (!nb)
            return malloc(cap);
        svc->enc = nb;
        svc->enc_cap = cap;
    }
    svc->enc_busy = true;
    return svc->enc;
}

static void enc_give(route_svc_t *svc, uint8_t *buf)
{
    if (buf && buf == svc->enc) {
        KVM_ASSERT(svc->enc_busy);
        svc->enc_busy = false;
    } else {
        free(buf);
    }
}

int route_send(route_svc_t *svc, env_node_t to, route_msg_t *m)
{
    size_t cap = route_msg_size_bound(m), len = 0;
    route_emit_slot_t slot;
    uint8_t *at = route_emit_reserve(svc, to, ROUTE_MSG_BASE + m->kind, cap, &slot);
    if (at) { /* encoded straight into the destination's batch: no copy */
        int rc = route_msg_encode(m, at, cap, &len);
        route_emit_commit(svc, &slot, rc == 0 ? len : 0);
        return rc;
    }
    uint8_t *buf = enc_take(svc, cap);
    if (!buf)
        return KVMESH_ENOMEM;
    int rc = route_msg_encode(m, buf, cap, &len);
    if (rc == 0)
        rc = route_emit(svc, to, ROUTE_MSG_BASE + m->kind, buf, len);
    enc_give(svc, buf);
    return rc;
}

/* A call's record. A finished box goes to the service's spares with its retransmission buffer
 * (rbuf_cap bytes; c.buf points at it while the call retransmits), so a batch's calls reuse the
 * records and buffers of the previous batch's instead of two mallocs and two frees each. */
typedef struct call_box {
    route_call_t c;
    struct call_box *next_spare;
    uint8_t *rbuf; /* the box's retransmission buffer, owned; NULL = none yet */
    size_t rbuf_cap;
} call_box_t;

/* A call record with every field of c zeroed: a spare box, else a new one (NULL: no memory). */
static call_box_t *call_alloc(route_svc_t *svc)
{
    call_box_t *b = svc->call_spare;
    if (!b)
        return calloc(1, sizeof(*b));
    svc->call_spare = b->next_spare;
    svc->n_call_spare--;
    memset(&b->c, 0, sizeof(b->c));
    b->next_spare = NULL;
    return b;
}

/* The retransmission copy of buf[0..len) in b's buffer (grown when short); false: no memory. */
static bool call_keep(call_box_t *b, const uint8_t *buf, size_t len)
{
    size_t need = len ? len : 1;
    if (b->rbuf_cap < need) {
        uint8_t *nb = malloc(need);
        if (!nb)
            return false;
        free(b->rbuf);
        b->rbuf = nb;
        b->rbuf_cap = need;
    }
    memcpy(b->rbuf, buf, len);
    b->c.buf = b->rbuf;
    b->c.len = len;
    return true;
}

/* Ends a box: kept as a spare while there is room (and the service is not being freed). */
static void box_release(route_svc_t *svc, call_box_t *b)
{
    if (svc->freeing || svc->n_call_spare >= ROUTE_CALL_SPARE || b->rbuf_cap > ROUTE_ENC_KEEP_MAX) {
        free(b->rbuf);
        free(b);
        return;
    }
    b->next_spare = svc->call_spare;
    svc->call_spare = b;
    svc->n_call_spare++;
}

/* (The service's call timer is left as it is: a sweep that finds nothing due re-arms it.) */
static void call_free(route_svc_t *svc, route_call_t *c)
{
    box_release(svc, KVM_CONTAINER_OF(c, call_box_t, c));
}

static void call_spares_free(route_svc_t *svc)
{
    while (svc->call_spare) {
        call_box_t *b = svc->call_spare;
        svc->call_spare = b->next_spare;
        free(b->rbuf);
        free(b);
    }
    svc->n_call_spare = 0;
}

static void call_unlink(route_svc_t *svc, route_call_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        svc->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        svc->calls_tail = c->prev;
    svc->n_calls--;
}

void route_call_cancel(route_svc_t *svc, route_call_t *c)
{
    call_unlink(svc, c);
    call_free(svc, c);
}

static void calls_sweep(void *arg);

/* Arms the service's one call timer (svc->call_timer) for wake_ns, unless it is armed for that
 * instant or an earlier one: a batch's calls, started in order with about the same timeout,
 * share one timer instead of starting and cancelling one each. now: route_now. */
static void calls_arm(route_svc_t *svc, uint64_t wake_ns, uint64_t now)
{
    if (svc->call_timer && svc->call_timer_ns <= wake_ns)
        return;
    env_timer_cancel(svc->env, svc->call_timer);
    svc->call_timer =
        env_timer_start(svc->env, wake_ns > now ? wake_ns - now : 0, calls_sweep, svc);
    svc->call_timer_ns = wake_ns;
}

/* Sets c's wake-up: its next retransmission or its deadline; now: route_now (read once by the
 * caller). */
static void call_arm(route_svc_t *svc, route_call_t *c, uint64_t now)
{
    uint64_t next = c->buf ? now + ROUTE_RETRY_NS : c->deadline_ns;
    if (next > c->deadline_ns)
        next = c->deadline_ns;
    c->wake_ns = next;
    calls_arm(svc, next, now);
}

/* The first call, oldest first, that was started before the sweep (req_id <= id_limit) and is
 * due at now; NULL: none. */
static route_call_t *call_due(route_call_t *from, uint64_t id_limit, uint64_t now)
{
    for (route_call_t *c = from; c; c = c->prev)
        if (c->req_id <= id_limit && c->wake_ns <= now)
            return c;
    return NULL;
}

/* The call timer: every call due now retransmits or, past its deadline, ends with no answer
 * (fn(NULL)), as each call's own timer did; then the timer is armed for the earliest wake-up
 * left. A deadline's callback may end or start other calls, so the walk starts over from the
 * oldest after each one; calls it starts (req_id above id_limit) wait for the next turn. */
static void calls_sweep(void *arg)
{
    route_svc_t *svc = arg;
    svc->call_timer = 0;
    uint64_t now = route_now(svc), id_limit = svc->next_req_id;
    route_call_t *c = call_due(svc->calls_tail, id_limit, now);
    while (c && !svc->freeing) {
        if (now >= c->deadline_ns) {
            call_unlink(svc, c);
            c->fn(svc, c, NULL);
            call_free(svc, c);
            c = call_due(svc->calls_tail, id_limit, now);
            continue;
        }
        KVM_ASSERT(c->buf != NULL); /* due before its deadline: a retransmission */
        env_send(svc->env, c->node, c->type, c->buf, c->len);
        uint64_t next = now + ROUTE_RETRY_NS;
        c->wake_ns = next < c->deadline_ns ? next : c->deadline_ns;
        c = call_due(c->prev, id_limit, now);
    }
    if (svc->freeing)
        return;
    uint64_t first = UINT64_MAX;
    for (c = svc->calls; c; c = c->next)
        if (c->wake_ns < first)
            first = c->wake_ns;
    if (first != UINT64_MAX)
        calls_arm(svc, first, now);
}

route_call_t *route_call(route_svc_t *svc, env_node_t to, route_msg_t *m, uint16_t resp_kind,
                         uint64_t timeout_ns, bool retransmit, route_call_fn fn, void *ctx)
{
    if (svc->n_calls >= ROUTE_MAX_CALLS)
        return NULL;
    call_box_t *b = call_alloc(svc);
    if (!b)
        return NULL;
    route_call_t *c = &b->c;
    c->req_id = ++svc->next_req_id;
    m->req_id = c->req_id;
    c->node = to;
    c->resp_kind = resp_kind;
    c->fn = fn;
    c->ctx = ctx;
    uint64_t now = route_now(svc); /* one clock read per call */
    c->deadline_ns = now + timeout_ns;
    c->type = ROUTE_MSG_BASE + m->kind;
    size_t cap = route_msg_size_bound(m);
    /* encoded straight into the destination's batch while the service coalesces (no copy),
     * else into the service's buffer and emitted from there */
    route_emit_slot_t slot;
    uint8_t *at = route_emit_reserve(svc, to, c->type, cap, &slot);
    uint8_t *buf = at ? at : enc_take(svc, cap);
    size_t len = 0;
    if (!buf || route_msg_encode(m, buf, cap, &len) != 0 ||
        (retransmit && !call_keep(b, buf, len))) { /* the retransmissions' copy (call_timer) */
        if (at)
            route_emit_commit(svc, &slot, 0);
        else
            enc_give(svc, buf);
        box_release(svc, b);
        return NULL;
    }
    if (at) {
        route_emit_commit(svc, &slot, len); /* sent with the batch (route_coalesce_end) */
    } else {
        route_emit(svc, to, c->type, buf, len); /* alone: not coalescing, or no room */
        enc_give(svc, buf);
    }
    c->next = svc->calls;
    if (svc->calls)
        svc->calls->prev = c;
    else
        svc->calls_tail = c;
    svc->calls = c;
    svc->n_calls++;
    call_arm(svc, c, now);
    return c;
}

/* The call answered by m, looked up from the oldest call: a batch's answers come back in the
 * order of its requests, so the answer to the oldest call is the common case (from the newest,
 * each of a 128-item batch's answers walked past the other pending calls: quadratic per batch).
 * Request ids are unique, so the direction does not change which call matches. */
static void on_response(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *m)
{
    for (route_call_t *c = svc->calls_tail; c; c = c->prev) {
        if (c->req_id != m->req_id)
            continue;
        if (c->resp_kind != m->kind || c->node != raw->from)
            return; /* not the answer to this call: ignore */
        call_unlink(svc, c);
        c->fn(svc, c, m);
        call_free(svc, c);
        return;
    }
}

/* ---- membership ----------------------------------------------------------------------------- */

bool route_member_eq(const route_msg_member_t *a, const route_msg_member_t *b)
{
    return kvm_runtime_equal(&a->rt, &b->rt) && a->node == b->node;
}

bool route_set_eq(const route_msg_member_t *a, uint32_t na, const route_msg_member_t *b,
                  uint32_t nb)
{
    if (na != nb)
        return false;
    for (uint32_t i = 0; i < na; i++)
        if (!route_member_eq(&a[i], &b[i]))
            return false;
    return true;
}

void route_desired_set(route_svc_t *svc, uint32_t shard, route_msg_member_t *set, uint32_t *n)
{
    *n = 0;
    size_t nm = svc->n_members;
    if (nm == 0)
        return;
    /* (every tick ranks every shard: up to 64 members on the stack, no allocation) */
    wrh_candidate_t small[64];
    wrh_candidate_t *c = nm <= KVM_ARRAY_SIZE(small) ? small : calloc(nm, sizeof(*c));
    uint32_t idx[ROUTE_MSG_MAX_SET];
    if (!c)
        return;
    for (size_t i = 0; i < nm; i++) {
        const route_member_t *m = &svc->members[i];
        bool ok =
            m->route_capable && m->route_version >= svc->policy.protocol_version && m->weight > 0;
        c[i].id_hash = wrh_id_hash(&m->rt.id);
        c[i].weight = ok ? m->weight : 0;
    }
    size_t got = 0;
    if (wrh_top_k(c, nm, wrh_shard_key(shard), svc->policy.top_k, idx, &got) == 0) {
        for (size_t i = 0; i < got; i++) {
            set[i].rt = svc->members[idx[i]].rt;
            set[i].node = svc->members[idx[i]].node;
        }
        *n = (uint32_t)got;
    }
    if (c != small)
        free(c);
}

void route_set_members(route_svc_t *svc, uint64_t generation, const route_member_t *members,
                       size_t n)
{
    if (svc->mo) {
        route_mo_set_members(svc->mo, generation, members, n);
        return;
    }
    if (generation < svc->generation)
        return; /* an older snapshot delivered late */
    route_member_t *copy = NULL;
    if (n) {
        copy = calloc(n, sizeof(*copy));
        if (!copy)
            return; /* keep the previous snapshot; the next push retries */
        memcpy(copy, members, n * sizeof(*copy));
    }
    free(svc->members);
    svc->members = copy;
    svc->n_members = n;
    svc->generation = generation;
}

/* ---- runtime lease and tick ----------------------------------------------------------------- */

static void tick(void *arg);
static bool start_retry(route_svc_t *svc, int rc);

static void arm_tick(route_svc_t *svc)
{
    svc->tick_timer = env_timer_start(svc->env, svc->lease_ns / ROUTE_TICK_DIV, tick, svc);
}

static void on_lease(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    svc->lease_busy = false;
    bool grant = q->u64 != 0;
    if (res->rc == 0) {
        uint64_t ttl = res->ttl_ms > 0 ? (uint64_t)res->ttl_ms * 1000000u : svc->lease_ns;
        if (grant)
            svc->lease = res->lease;
        svc->lease_deadline = route_conservative_deadline(svc->ka_sent_ns, ttl);
    } else if (!grant && res->rc == KVMESH_ENOENT) {
        /* the lease expired in metadata: every shard it held is gone */
        svc->lease = 0;
        svc->lease_deadline = 0;
        route_auth_lease_lost(svc);
    }
    if (!svc->ready && grant && res->rc != 0 && start_retry(svc, res->rc))
        return;
    if (!svc->ready && grant) {
        void (*cb)(void *, int) = svc->start_cb;
        svc->start_cb = NULL;
        int rc = res->rc;
        if (rc == 0) {
            svc->ready = true;
            arm_tick(svc);
        }
        if (cb)
            cb(svc->start_arg,
               rc == 0 ? 0 : kvm_errf(rc, "route service: lease grant: %s", res->errmsg));
    }
}

static void lease_call(route_svc_t *svc)
{
    route_mreq_t *q = route_mreq_new(svc, on_lease, NULL, 0);
    if (!q)
        return;
    svc->lease_busy = true;
    svc->ka_sent_ns = route_now(svc);
    int rc;
    if (svc->lease == 0) {
        q->u64 = 1;
        rc = meta_lease_grant(svc->meta, (int64_t)(svc->lease_ns / 1000000u), ROUTE_META_TIMEOUT_MS,
                              route_mreq_cb, q);
    } else {
        rc = meta_lease_keepalive(svc->meta, svc->lease, ROUTE_META_TIMEOUT_MS, route_mreq_cb, q);
    }
    if (rc != 0) {
        mreq_unlink(svc, q);
        free(q);
        svc->lease_busy = false;
    }
}

/* Purges tombstones past their deadline (finalized ones, and pending ones that carry a
 * deadline) from every table this runtime holds, earliest first from each table's expiry index,
 * at most ROUTE_PURGE_BUDGET per tick. A tombstone (pending or finalized) already reads as
 * absent to a get, so the purge changes no read; versions stay monotone because the primary's
 * sequence is per shard, not per key. Why a pending one may go (the quota accounting no longer
 * needs its version): docs/reliability.md "Tombstone purge".
 * A busy or dirty entry (its mirror in flight or partial: another member may still hold an
 * older value) is kept until it is clean; a due dirty one is re-mirrored here (at the active
 * primary: route_auth_repair, counted against the budget), since no CAS or read may ever touch
 * that key again, and purged by a later tick once clean (sim: route_purge). */
static void purge_tick(route_svc_t *svc)
{
    uint64_t now = env_wall_ms(svc->env), entries = 0, tombs = 0;
    route_mem_t mem = {0, 0, 0, 0};
    uint32_t budget = ROUTE_PURGE_BUDGET;
    for (uint32_t i = 0; i < svc->policy.n_shards; i++) {
        route_table_t *t = svc->shards[i].table;
        if (!t)
            continue;
        route_entry_t *e = route_table_tomb_first(t);
        while (e && budget) {
            kvm_route_t view;
            route_table_view(t, e, &view);
            if (view.retain_until_ms + ROUTE_PURGE_MARGIN_MS > now)
                break;
            route_entry_t *next = route_table_tomb_next(t, e);
            bool dirty = e->dirty && !(svc->bugs & ROUTE_BUG_PURGE_DIRTY);
            if (!e->busy && !dirty) {
                route_table_del(t, e);
                budget--;
                atomic_fetch_add(&svc->a_purged, 1);
            } else if (route_auth_repair(svc, &svc->shards[i], e)) {
                budget--; /* re-mirrored; purged by a later tick once clean */
            }
            e = next;
        }
        entries += route_table_count(t);
        tombs += route_table_tomb_count(t);
        route_table_mem_t tm;
        route_table_mem(t, &tm);
        mem.entry_bytes += tm.entry_bytes;
        mem.packed_bytes += tm.packed_bytes;
        mem.ident_bytes += tm.ident_bytes;
        mem.other_bytes += tm.index_bytes + tm.tomb_bytes + tm.intern_bytes;
    }
    atomic_store(&svc->a_entries, entries);
    atomic_store(&svc->a_tombs, tombs);
    atomic_store(&svc->a_mem_entry, mem.entry_bytes);
    atomic_store(&svc->a_mem_packed, mem.packed_bytes);
    atomic_store(&svc->a_mem_ident, mem.ident_bytes);
    atomic_store(&svc->a_mem_other, mem.other_bytes);
}

void route_table_mem_total(const route_svc_t *svc, route_mem_t *out)
{
    route_svc_t *s = (route_svc_t *)svc;
    *out = (route_mem_t){atomic_load(&s->a_mem_entry), atomic_load(&s->a_mem_packed),
                         atomic_load(&s->a_mem_ident), atomic_load(&s->a_mem_other)};
}

void route_table_counts(const route_svc_t *svc, uint64_t *entries, uint64_t *tombs,
                        uint64_t *purged)
{
    route_svc_t *s = (route_svc_t *)svc;
    if (s->mo) { /* MetadataOnly: the routes live in metadata; only the purge count is here */
        *entries = *tombs = 0;
        *purged = route_mo_purged(s->mo);
        return;
    }
    *entries = atomic_load(&s->a_entries);
    *tombs = atomic_load(&s->a_tombs);
    *purged = atomic_load(&s->a_purged);
}

uint64_t route_table_purge_unknown(const route_svc_t *svc)
{
    return svc->mo ? route_mo_purge_unknown(svc->mo) : 0;
}

static void tick(void *arg)
{
    route_svc_t *svc = arg;
    svc->tick_timer = 0;
    uint64_t now = route_now(svc);
    if (!svc->lease_busy && now >= svc->next_ka_ns) {
        svc->next_ka_ns = now + svc->lease_ns / ROUTE_KEEPALIVE_DIV;
        lease_call(svc);
    }
    svc->tick_budget = ROUTE_MAX_SHARD_STEPS; /* shards that may start metadata work now */
    for (uint32_t i = 0; i < svc->policy.n_shards; i++) {
        uint32_t s = (svc->tick_cursor + i) % svc->policy.n_shards;
        route_auth_tick(svc, &svc->shards[s]);
    }
    svc->tick_cursor = (svc->tick_cursor + 1) % svc->policy.n_shards;
    purge_tick(svc);
    arm_tick(svc);
}

/* ---- policy bootstrap ----------------------------------------------------------------------- */

int route_policy_diff(const route_policy_t *want, const route_policy_t *have)
{
    if (want->mode != have->mode)
        return kvm_errf(KVMESH_EINCOMPAT,
                        "cluster route policy field 'mode' is %d in metadata, %d here; start "
                        "this runtime with the deployment's policy",
                        (int)have->mode, (int)want->mode);
    if (want->top_k != have->top_k)
        return kvm_errf(KVMESH_EINCOMPAT,
                        "cluster route policy field 'top_k' is %u in metadata, %u here; start "
                        "this runtime with the deployment's policy",
                        have->top_k, want->top_k);
    if (want->n_shards != have->n_shards)
        return kvm_errf(KVMESH_EINCOMPAT,
                        "cluster route policy field 'n_shards' is %u in metadata, %u here; "
                        "start this runtime with the deployment's policy",
                        have->n_shards, want->n_shards);
    if (want->protocol_version != have->protocol_version)
        return kvm_errf(KVMESH_EINCOMPAT,
                        "cluster route policy field 'protocol_version' is %u in metadata, %u "
                        "here; start this runtime with the deployment's policy",
                        have->protocol_version, want->protocol_version);
    return 0;
}

static void start_policy(void *arg);

static bool start_retry(route_svc_t *svc, int rc)
{
    if ((rc != KVMESH_EUNAVAILABLE && rc != KVMESH_ETIMEDOUT && rc != KVMESH_ECONN) ||
        ++svc->start_attempts >= ROUTE_START_ATTEMPTS)
        return false;
    svc->tick_timer =
        env_timer_start(svc->env, ROUTE_RETRY_NS * svc->start_attempts, start_policy, svc);
    return svc->tick_timer != 0;
}

static void on_policy(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res)
{
    int rc = res->rc;
    if (rc != 0 && start_retry(svc, rc))
        return;
    if (rc != 0) {
        rc = kvm_errf(rc, "route service: cluster policy txn failed: %s", res->errmsg);
    } else if (!res->succeeded) {
        route_policy_t have;
        if (res->n_ops < 1 || !res->ops[0].found)
            rc = kvm_errf(KVMESH_EUNAVAILABLE, "cluster route policy vanished; retry");
        else if (route_policy_decode(res->ops[0].value, res->ops[0].value_len, &have) != 0)
            rc = KVMESH_ECORRUPT;
        else
            rc = route_policy_diff(&svc->policy, &have);
    }
    if (rc != 0) {
        void (*cb)(void *, int) = svc->start_cb;
        svc->start_cb = NULL;
        if (cb)
            cb(svc->start_arg, rc);
        return;
    }
    lease_call(svc);
}

static int policy_call(route_svc_t *svc)
{
    char key[KS_KEY_CAP];
    uint8_t val[64];
    size_t vlen;
    int rc = ks_cluster_policy_key(key, sizeof(key), svc->deployment);
    if (rc == 0)
        rc = route_policy_encode(&svc->policy, val, sizeof(val), &vlen);
    if (rc != 0)
        return rc;
    meta_cmp_t cmp = {.key = key, .target = META_CMP_EXISTS, .op = META_EQ, .num = 0};
    meta_op_t then_op = {.type = META_OP_PUT, .key = key, .value = val, .value_len = vlen};
    meta_op_t else_op = {.type = META_OP_GET, .key = key};
    route_mreq_t *q = route_mreq_new(svc, on_policy, NULL, 0);
    if (!q)
        return KVMESH_ENOMEM;
    rc = meta_txn(svc->meta, &cmp, 1, &then_op, 1, &else_op, 1, ROUTE_META_TIMEOUT_MS,
                  route_mreq_cb, q);
    if (rc != 0) {
        mreq_unlink(svc, q);
        free(q);
    }
    return rc;
}

static void start_policy(void *arg)
{
    route_svc_t *svc = arg;
    svc->tick_timer = 0;
    int rc = policy_call(svc);
    if (rc != 0 && svc->start_cb) {
        void (*cb)(void *, int) = svc->start_cb;
        svc->start_cb = NULL;
        cb(svc->start_arg, rc);
    }
}

static void localize(route_svc_t *svc, const kvm_runtime_t *rt, env_node_t *node)
{
    for (size_t i = 0; i < svc->n_members; i++)
        if (kvm_id128_equal(&svc->members[i].rt.id, &rt->id)) {
            *node = svc->members[i].node;
            return;
        }
}

void route_localize_rec(route_svc_t *svc, route_rec_t *rec)
{
    localize(svc, &rec->primary, &rec->primary_node);
    for (uint32_t i = 0; i < rec->n_set; i++)
        localize(svc, &rec->set[i].rt, &rec->set[i].node);
    for (uint32_t i = 0; i < rec->n_src; i++)
        localize(svc, &rec->src[i].rt, &rec->src[i].node);
}

void route_localize_msg(route_svc_t *svc, route_msg_t *m)
{
    if (m->primary_node != ENV_NODE_NONE && !kvm_id128_is_nil(&m->primary.id))
        localize(svc, &m->primary, &m->primary_node);
    for (uint32_t i = 0; i < m->n_set; i++)
        localize(svc, &m->set[i].rt, &m->set[i].node);
}

/* MetadataOnly mode: a thin service whose entry points forward to route_metaonly.c. */
static int metrics_attach(route_svc_t *svc, const route_svc_opts_t *o)
{
    if (o->metrics) {
        svc->metrics = o->metrics;
        return 0;
    }
    int rc = obs_registry_new(&svc->metrics);
    svc->own_metrics = rc == 0;
    return rc;
}

static void metrics_detach(route_svc_t *svc)
{
    if (svc->own_metrics)
        obs_registry_free(svc->metrics);
    svc->metrics = NULL;
    svc->own_metrics = false;
}

static int new_metaonly(route_svc_t **out, const route_svc_opts_t *o, void (*cb)(void *, int),
                        void *arg)
{
    route_svc_t *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return KVMESH_ENOMEM;
    svc->policy = o->policy;
    svc->env = o->env;
    int rc = metrics_attach(svc, o);
    if (rc != 0) {
        free(svc);
        return rc;
    }
    route_svc_opts_t mo_opts = *o;
    mo_opts.metrics = svc->metrics;
    rc = route_mo_new(&svc->mo, &mo_opts, cb, arg);
    if (rc != 0) {
        metrics_detach(svc);
        free(svc);
        return rc;
    }
    *out = svc;
    return 0;
}

int route_svc_new(route_svc_t **out, const route_svc_opts_t *o, void (*cb)(void *, int), void *arg)
{
    *out = NULL;
    if (!o || !o->env || !o->meta || !o->deployment || !cb)
        return kvm_errf(KVMESH_EINVAL, "route_svc_new: env, meta, deployment and cb are required");
    if (ks_validate_deployment(o->deployment) != 0)
        return KVMESH_EINVAL;
    const route_policy_t *p = &o->policy;
    if (p->mode != ROUTE_MODE_EMBEDDED_WRH && p->mode != ROUTE_MODE_METADATA_ONLY)
        return kvm_errf(KVMESH_EINVAL, "route policy: unknown mode %d", (int)p->mode);
    if (p->top_k < 1 || p->top_k > WRH_MAX_K || p->top_k > ROUTE_MSG_MAX_SET)
        return kvm_errf(KVMESH_EINVAL, "route policy: top_k %u outside 1..%d", p->top_k, WRH_MAX_K);
    if (p->n_shards < 1 || p->n_shards > KVM_MAX_LOGICAL_SHARDS)
        return kvm_errf(KVMESH_EINVAL, "route policy: n_shards %u outside 1..%u", p->n_shards,
                        KVM_MAX_LOGICAL_SHARDS);
    if (p->protocol_version != ROUTE_PROTOCOL_VERSION)
        return kvm_errf(KVMESH_EINCOMPAT, "route protocol version %u; this build speaks %d",
                        p->protocol_version, ROUTE_PROTOCOL_VERSION);
    if (o->self.epoch == 0 || kvm_id128_is_nil(&o->self.id))
        return kvm_errf(KVMESH_EINVAL, "route_svc_new: self runtime id and epoch required");
    if (p->mode == ROUTE_MODE_METADATA_ONLY)
        return new_metaonly(out, o, cb, arg);
    int rc;
    route_svc_t *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return KVMESH_ENOMEM;
    svc->shards = calloc(p->n_shards, sizeof(route_shard_t));
    if (!svc->shards || metrics_attach(svc, o) != 0) {
        free(svc->shards);
        free(svc);
        return KVMESH_ENOMEM;
    }
    for (uint32_t i = 0; i < p->n_shards; i++) {
        svc->shards[i].id = i;
        svc->shards[i].m_primary_node = ENV_NODE_NONE;
    }
    svc->env = o->env;
    svc->meta = o->meta;
    snprintf(svc->deployment, sizeof(svc->deployment), "%s", o->deployment);
    svc->self = o->self;
    svc->self_node = env_self(o->env);
    svc->policy = *p;
    svc->inline_src = o->inline_src;
    svc->lease_ns =
        (uint64_t)(o->shard_lease_ms ? o->shard_lease_ms : ROUTE_DEFAULT_LEASE_MS) * 1000000u;
    if (svc->lease_ns < (uint64_t)META_LEASE_TTL_MIN_MS * 1000000u)
        svc->lease_ns = (uint64_t)META_LEASE_TTL_MIN_MS * 1000000u;
    svc->timeout_ns =
        (uint64_t)(o->request_timeout_ms ? o->request_timeout_ms : ROUTE_DEFAULT_TIMEOUT_MS) *
        1000000u;
    svc->start_cb = cb;
    svc->start_arg = arg;

    rc = policy_call(svc);
    if (rc != 0)
        goto fail;
    *out = svc;
    return 0;
fail:
    metrics_detach(svc);
    free(svc->shards);
    free(svc);
    return rc;
}

void route_svc_free(route_svc_t *svc)
{
    if (!svc)
        return;
    if (svc->mo) {
        route_mo_free(svc->mo);
        metrics_detach(svc);
        free(svc->enc);
        free(svc);
        return;
    }
    svc->freeing = true;
    env_timer_cancel(svc->env, svc->tick_timer);
    env_timer_cancel(svc->env, svc->call_timer);
    svc->call_timer = 0;
    route_client_cancel_all(svc);
    route_claim_free_all(svc);
    while (svc->calls) { /* owners see svc->freeing and only release their context */
        route_call_t *c = svc->calls;
        call_unlink(svc, c);
        c->fn(svc, c, NULL);
        call_free(svc, c);
    }
    call_spares_free(svc);
    for (route_mreq_t *q = svc->mreqs; q; q = q->next)
        q->svc = NULL; /* its completion frees it */
    svc->mreqs = NULL;
    for (uint32_t i = 0; i < svc->policy.n_shards; i++)
        route_shard_free(&svc->shards[i]);
    free(svc->shards);
    free(svc->members);
    route_outbox_free(svc);
    if (svc->start_cb)
        svc->start_cb(svc->start_arg, KVMESH_ECANCELED);
    metrics_detach(svc);
    KVM_ASSERT(!svc->enc_busy);
    free(svc->enc);
    free(svc);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

/* An attached READ answer m of the received batch being handled: its slice of the batch's
 * attachment (the answers' bytes follow each other in item order), or, once the slices are not
 * known (no attachment, too short, an item before could not be decoded), a plain answer. */
static void batch_attach(route_svc_t *svc, route_msg_t *m, env_payload_t *slice)
{
    if (m->kind != RMSG_READ_RESP || !(m->flags & RMSG_READ_ATT))
        return;
    const env_payload_t *p = svc->batch_att;
    if (!p || svc->batch_att_bad || p->len - svc->batch_att_off < m->att_len) {
        svc->batch_att_bad = true;
        route_msg_attach(m, NULL); /* its requester reads the replica */
        return;
    }
    slice->buf = p->buf + svc->batch_att_off;
    slice->len = m->att_len;
    svc->batch_att_off += m->att_len;
    route_msg_attach(m, slice);
    m->inl_shared = true;
}

static void on_message(route_svc_t *svc, const env_msg_t *msg, bool item)
{
    if (svc->mo) {
        route_mo_on_message(svc->mo, msg);
        return;
    }
    if (!svc->ready || msg->type <= ROUTE_MSG_BASE || msg->type > ROUTE_MSG_LIMIT)
        return;
    if (msg->type == ROUTE_MSG_BASE + RMSG_BATCH) {
        route_batch_on_message(svc, msg); /* each item comes back here alone */
        return;
    }
    route_msg_t m;
    env_payload_t slice;
    if (route_msg_decode(msg->type, msg->data, msg->len, &m) != 0) {
        if (item)
            svc->batch_att_bad = true; /* (its attached bytes, if any, are not known) */
        return;                        /* malformed: dropped (counted by the transport) */
    }
    /* inline bytes sent as the attachment (route_msg.h RMSG_READ_ATT): a single message's own,
     * or a batch item's slice of the batch's */
    if (item)
        batch_attach(svc, &m, &slice);
    else
        route_msg_attach(&m, msg->payload);
    route_localize_msg(svc, &m);
    if (m.shard >= svc->policy.n_shards) {
        route_msg_clear(&m);
        return;
    }
    switch (m.kind) {
    case RMSG_CAS_RESP:
    case RMSG_CAS_CLAIM_RESP:
    case RMSG_READ_RESP:
    case RMSG_MIRROR_RESP:
    case RMSG_GRANT_RESP:
    case RMSG_FETCH_RESP:
    case RMSG_INSTALL_RESP:
    case RMSG_OWNER_RESP:
        on_response(svc, msg, &m);
        break;
    default:
        route_auth_on_request(svc, msg, &m);
        break;
    }
    route_msg_clear(&m);
}

void route_on_message(route_svc_t *svc, const env_msg_t *msg)
{
    on_message(svc, msg, false);
}

void route_on_batch_item(route_svc_t *svc, const env_msg_t *msg)
{
    on_message(svc, msg, true);
}

static uint64_t rd(const struct obs_registry *reg, const char *family, unsigned i)
{
    int64_t v = 0;
    (void)obs_metrics_read(reg, family, i, OBS_NONE, &v);
    return (uint64_t)v;
}

void route_stats_from_registry(const struct obs_registry *reg, route_stats_t *out)
{
    out->lookups = 0;
    for (unsigned i = 0; i < OBS__N_lookup; i++)
        out->lookups += rd(reg, "route_lookups_total", i);
    out->cas_applied = rd(reg, "route_cas_total", OBS_CAS_APPLIED);
    out->cas_conflict = rd(reg, "route_cas_total", OBS_CAS_CONFLICT);
    out->cas_stale_generation = rd(reg, "route_cas_total", OBS_CAS_STALE_GENERATION);
    out->cas_not_primary = rd(reg, "route_cas_total", OBS_CAS_NOT_PRIMARY);
    out->cas_indeterminate = rd(reg, "route_cas_total", OBS_CAS_INDETERMINATE);
    out->read_repairs = rd(reg, "route_repairs_total", OBS_REPAIR_REPAIRED);
    out->mirrors = 0;
    for (unsigned i = 0; i < OBS__N_mirror; i++)
        out->mirrors += rd(reg, "route_mirror_publications_total", i);
}

void route_get_stats(const route_svc_t *svc, route_stats_t *out)
{
    if (svc->mo) {
        route_mo_get_stats(svc->mo, out);
        return;
    }
    *out = svc->stats;
    route_stats_from_registry(svc->metrics, out);
}

/* ---- test hooks (route_test.h) -------------------------------------------------------------- */

void route_test_set_bugs(route_svc_t *svc, unsigned bugs)
{
    svc->bugs = bugs;
}

bool route_test_is_primary(route_svc_t *svc, uint32_t shard, uint64_t *token)
{
    route_shard_t *sh = &svc->shards[shard];
    if (token)
        *token = sh->rec.token;
    return sh->ps == RP_ACTIVE && route_auth_read_valid(svc, sh);
}

int route_test_plant(route_svc_t *svc, const kvm_route_t *r)
{
    uint32_t s = kvm_ident_shard(&r->ident, svc->policy.n_shards);
    route_shard_t *sh = &svc->shards[s];
    if (!sh->table && !(sh->table = route_table_new()))
        return KVMESH_ENOMEM;
    return route_table_put(sh->table, r, NULL);
}

int route_test_corrupt(route_svc_t *svc, const kvm_ident_t *ident)
{
    route_shard_t *sh = &svc->shards[kvm_ident_shard(ident, svc->policy.n_shards)];
    route_entry_t *e = sh->table ? route_table_get(sh->table, ident) : NULL;
    kvm_route_t view;
    if (e)
        route_table_view(sh->table, e, &view);
    if (!e || view.content_op.seq > 1000000000ull)
        return KVMESH_ENOENT;
    kvm_route_t r;
    kvm_route_init(&r);
    if (kvm_route_copy(&r, &view) != 0)
        return KVMESH_ENOMEM;
    if (!kvm_route_is_tombstone(&r))
        r.checksum ^= 0xdead;
    for (uint32_t i = 0; i < r.n_replicas; i++)
        r.replicas[i].checksum = r.checksum;
    r.content_op.seq += 1000000000ull;
    int rc = route_table_put(sh->table, &r, NULL);
    kvm_route_free(&r);
    return rc;
}

int route_test_local(route_svc_t *svc, const kvm_ident_t *ident, kvm_route_t *out, uint64_t *token)
{
    route_shard_t *sh = &svc->shards[kvm_ident_shard(ident, svc->policy.n_shards)];
    route_entry_t *e = sh->table ? route_table_get(sh->table, ident) : NULL;
    *token = sh->m_installed ? sh->m_token : 0;
    if (!e)
        return KVMESH_ENOENT;
    kvm_route_t view;
    route_table_view(sh->table, e, &view);
    kvm_route_init(out);
    return kvm_route_copy(out, &view);
}

int route_test_check(route_svc_t *svc)
{
    for (uint32_t i = 0; i < svc->policy.n_shards; i++) {
        route_shard_t *sh = &svc->shards[i];
        if (sh->table) {
            int rc = route_table_check(sh->table);
            if (rc)
                return rc;
        }
        if (sh->ps == RP_ACTIVE && sh->rec.token != sh->m_token && sh->rec.lease == svc->lease &&
            route_now(svc) < svc->lease_deadline)
            return kvm_errf(KVMESH_ECORRUPT, "shard %u: active with token %llu, fenced at %llu", i,
                            (unsigned long long)sh->rec.token, (unsigned long long)sh->m_token);
    }
    return 0;
}

void route_test_dump(route_svc_t *svc, FILE *out)
{
    uint64_t now = route_now(svc);
    fprintf(out, "  rt %llx epoch %llu node %u gen %llu lease %lld deadline %+lld ms\n",
            (unsigned long long)svc->self.id.b[15], (unsigned long long)svc->self.epoch,
            svc->self_node, (unsigned long long)svc->generation, (long long)svc->lease,
            (long long)((int64_t)(svc->lease_deadline - now) / 1000000));
    for (uint32_t i = 0; i < svc->policy.n_shards; i++) {
        route_shard_t *sh = &svc->shards[i];
        route_msg_member_t set[ROUTE_MSG_MAX_SET];
        uint32_t n;
        route_desired_set(svc, i, set, &n);
        fprintf(out,
                "   shard %u: ps %d rec(tok %llu st %u prim n%u lease %lld set %u src %u) m_tok "
                "%llu inst %d prim n%u rd %+lld ms view(valid %d tok %llu) desired n%u/%u "
                "maxgrant %+lld ms routes %zu\n",
                i, sh->ps, (unsigned long long)sh->rec.token, sh->rec.state, sh->rec.primary_node,
                (long long)sh->rec.lease, sh->rec.n_set, sh->rec.n_src,
                (unsigned long long)sh->m_token, sh->m_installed, sh->m_primary_node,
                (long long)((int64_t)(sh->m_read_deadline - now) / 1000000), sh->v_valid,
                (unsigned long long)sh->view.token, n ? set[0].node : 99, n,
                (long long)((int64_t)(sh->max_grant_until - now) / 1000000),
                sh->table ? route_table_count(sh->table) : 0);
    }
}
