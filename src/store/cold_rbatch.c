// SPDX-License-Identifier: Apache-2.0
/*
 * cold_rbatch.c — batch restore, the reader side (cold_glue.h kvm_cold_read_batch; docs/cold.md
 * "Batch restore"). A batch get's items that need a cold restore are grouped by the cold copy's
 * owner runtime and device, and each group is read as a batch:
 *
 *   local group   (sub-batches of COLD_BATCH_MAX) one hand-off to the loop, which gives the
 *                 items to the cold core (kvm_cold_local_batch -> cold_restore_batch): one
 *                 device read per device on the cold I/O worker, straight into the caller's
 *                 buffers (a bounce buffer only for a scattered destination);
 *   remote group  (sub-batches of STORE_COLD_BATCH_MAX) one STORE_RPC_COLD_READ_BATCH to the
 *                 owner, which stages the items in its staging pool; the staged ones are read
 *                 through the transport in one batch into one registered bounce buffer,
 *                 verified (length, checksum) and copied out, and their tokens ACKed. Items the
 *                 owner's pool had no room for (KVMESH_EAGAIN) are asked for again in the next
 *                 round (a capped backoff when a round staged nothing), until the deadline: a
 *                 full pool splits a group, it never fails it. An owner without the message
 *                 (an older release: KVMESH_ENOTSUP) is read one object at a time
 *                 (kvm_cold_read).
 *
 * Every item gets its own result; one item's failure never fails or hides another's.
 * Threads: kvm_cold_read_batch runs on the application thread; the hand-offs (struct lwait,
 * struct rwait: refcounted, one ref per side) are finished on the loop. A local sub-batch writes
 * into the caller's buffers from the cold I/O worker, so once the loop has handed it to the core
 * (started) the call waits for it even past the deadline (a device read is not cancellable; at
 * close the glue fails it after the worker finished); before that it is abandoned at the
 * deadline and never started.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cold/cold.h"
#include "cold/staging.h"
#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "net/transport.h"
#include "store/cold_glue.h"
#include "store/proto.h"

#define RB_ROUNDS_MAX 2000 /* remote rounds of one sub-batch (the deadline ends them sooner) */

/* ---- hand-off to the loop ------------------------------------------------------------------ */

struct hand {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool started, done, abandoned;
    int rc;
};

static void hand_init(struct hand *h)
{
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    h->refs = 2; /* the application thread and the loop */
}

/* Drops one ref; true when it was the last (the caller frees). */
static bool hand_unref(struct hand *h)
{
    pthread_mutex_lock(&h->mu);
    bool last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (last) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
    }
    return last;
}

static void hand_finish(struct hand *h, int rc)
{
    pthread_mutex_lock(&h->mu);
    h->rc = rc;
    h->done = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* [loop] false when the application thread gave up before the loop got to it */
static bool hand_start(struct hand *h)
{
    pthread_mutex_lock(&h->mu);
    bool go = !h->abandoned;
    h->started = go;
    pthread_mutex_unlock(&h->mu);
    return go;
}

/* [app] Waits for done until deadline_ms; past it, waits on only when must_finish_started and
 * the loop started the work. *was_done (may be NULL): the loop finished it (rc is its result). */
static int hand_wait(struct hand *h, uint64_t deadline_ms, bool must_finish_started, bool *was_done)
{
    struct timespec ts;
    env_clock_after(CLOCK_MONOTONIC, kvm_deadline_left_ms(deadline_ms), &ts);
    pthread_mutex_lock(&h->mu);
    int w = 0;
    while (!h->done && w == 0)
        w = pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    while (!h->done && must_finish_started && h->started)
        pthread_cond_wait(&h->cv, &h->mu);
    int rc = h->done ? h->rc : KVMESH_ETIMEDOUT;
    if (was_done)
        *was_done = h->done;
    if (!h->done)
        h->abandoned = true;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* ---- the local group ----------------------------------------------------------------------- */

struct lwait {
    struct hand h;
    kvm_rt_t *rt;
    cold_batch_item_t *items;
    size_t n, jobs;
};

static void lw_unref(struct lwait *l)
{
    if (hand_unref(&l->h))
        free(l);
}

static void lw_done(void *arg, int rc)
{
    struct lwait *l = arg;
    hand_finish(&l->h, rc);
    lw_unref(l);
}

static void lw_start(void *arg)
{
    struct lwait *l = arg;
    if (!hand_start(&l->h)) {
        lw_unref(l);
        return;
    }
    int rc = kvm_cold_local_batch(l->rt, l->items, l->n, lw_done, l, &l->jobs);
    if (rc)
        lw_done(l, rc);
}

/* One local sub-batch of idx[0..k) (k <= COLD_BATCH_MAX). */
static void local_sub(kvm_rt_t *rt, kvm_cold_bitem_t *items, const size_t *idx, size_t k,
                      uint64_t deadline_ms)
{
    cold_batch_item_t *ci = calloc(k, sizeof(*ci));
    uint8_t **bounce = calloc(k, sizeof(*bounce));
    struct lwait *l = calloc(1, sizeof(*l));
    int rc = ci && bounce && l ? 0 : KVMESH_ENOMEM;
    for (size_t j = 0; j < k && !rc; j++) {
        kvm_cold_bitem_t *it = &items[idx[j]];
        const kvm_route_t *r = it->route;
        cold_batch_item_t *c = &ci[j];
        *c = (cold_batch_item_t){
            .device = r->cold.tier, .len = r->cold.u.mat.length, .checksum = r->checksum};
        c->loc.len = (uint16_t)KVM_MIN(r->cold.u.mat.locator_len, (uint32_t)COLD_LOCATOR_MAX);
        if (r->cold.u.mat.locator_len > COLD_LOCATOR_MAX || r->cold.u.mat.length != r->length)
            c->loc.len = 0; /* refused by the core as out of range (KVMESH_ECORRUPT) */
        memcpy(c->loc.b, r->cold.u.mat.locator, c->loc.len);
        if (it->iovcnt == 1 && it->iov[0].iov_len >= r->length) {
            c->buf = it->iov[0].iov_base; /* straight into the caller's buffer */
        } else if (r->length) {
            c->buf = bounce[j] = malloc(r->length);
            if (!bounce[j])
                rc = KVMESH_ENOMEM;
        }
    }
    if (!rc) {
        hand_init(&l->h);
        l->rt = rt;
        l->items = ci;
        l->n = k;
        if (env_post(rt->env, lw_start, l) != 0) {
            rc = KVMESH_EAGAIN; /* (the loop never got it: both refs go here) */
            hand_unref(&l->h);
            lw_unref(l);
            l = NULL;
        } else {
            rc = hand_wait(&l->h, deadline_ms, true, NULL);
        }
    } else {
        free(l);
        l = NULL;
    }
    if (!rc && l) {
        obs_count(rt->metrics, cold_restore_batches_total, OBS_TRANSPORT_LOCAL, OBS_NONE, l->jobs);
        obs_count(rt->metrics, cold_restore_batch_items_total, OBS_TRANSPORT_LOCAL, OBS_NONE, k);
    }
    for (size_t j = 0; j < k; j++) {
        kvm_cold_bitem_t *it = &items[idx[j]];
        it->rc = rc ? rc : ci[j].rc;
        if (!it->rc && bounce[j]) {
            uint64_t pos = 0, len = it->route->length;
            for (int v = 0; v < it->iovcnt && pos < len; v++) {
                size_t m = (size_t)KVM_MIN((uint64_t)it->iov[v].iov_len, len - pos);
                memcpy(it->iov[v].iov_base, bounce[j] + pos, m);
                pos += m;
            }
        }
        if (bounce)
            free(bounce[j]);
    }
    if (l)
        lw_unref(l);
    free(bounce);
    free(ci);
}

/* ---- a remote group ------------------------------------------------------------------------ */

struct rwait {
    struct hand h;
    kvm_rt_t *rt;
    kvm_runtime_id_t owner;
    uint8_t *body;
    size_t blen;
    uint16_t n;
    uint32_t timeout_ms;
    const char *data_addr; /* the owner's transport address (interned) */
    store_cold_batch_resp_t resp;
    char err[256];
};

static void rw_unref(struct rwait *w)
{
    if (hand_unref(&w->h)) {
        free(w->body);
        free(w);
    }
}

static void rw_reply(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct rwait *w = arg;
    int rc = res->status;
    if (rc) {
        snprintf(w->err, sizeof(w->err), "%s", res->error);
    } else if (store_cold_batch_resp_decode(res->body, res->body_len, &w->resp) != 0 ||
               w->resp.n != w->n) {
        snprintf(w->err, sizeof(w->err), "the owner's batched cold read reply is malformed: %s",
                 kvmesh_last_error());
        rc = KVMESH_EPROTO;
    }
    hand_finish(&w->h, rc);
    rw_unref(w);
}

static void rw_start(void *arg)
{
    struct rwait *w = arg;
    if (!hand_start(&w->h)) {
        rw_unref(w);
        return;
    }
    const struct kvm_member *m = kvm_member_find(w->rt, &w->owner);
    rpc_peer *p = m ? kvm_rt_peer(w->rt, m) : NULL;
    w->data_addr = m ? m->data_addr : NULL;
    int rc = KVMESH_EUNAVAILABLE;
    if (p) {
        struct rpc_msg msg = {.type = STORE_RPC_COLD_READ_BATCH,
                              .body = w->body,
                              .body_len = w->blen,
                              .timeout_ms = w->timeout_ms ? w->timeout_ms : 1};
        rc = rpc_call(p, &msg, rw_reply, w, NULL);
    }
    if (rc) {
        hand_finish(&w->h, rc);
        rw_unref(w);
    }
}

/* One STORE_RPC_COLD_READ_BATCH for idx[0..k): 0 and *out (the caller rw_unrefs it), or the
 * whole call's error (w->err in *err). */
static int remote_ask(kvm_rt_t *rt, const kvm_runtime_id_t *owner, kvm_cold_bitem_t *items,
                      const size_t *idx, size_t k, uint64_t deadline_ms, struct rwait **out,
                      char *err, size_t errcap)
{
    *out = NULL;
    _Static_assert(STORE_COLD_BATCH_MAX <= UINT16_MAX, "n is a u16");
    store_cold_batch_req_t *q = calloc(1, sizeof(*q));
    struct rwait *w = calloc(1, sizeof(*w));
    size_t cap = STORE_COLD_BATCH_REQ_MAX(k);
    uint8_t *body = malloc(cap);
    if (!q || !w || !body) {
        free(q);
        free(w);
        free(body);
        return KVMESH_ENOMEM;
    }
    q->owner = *owner;
    q->n = (uint16_t)k;
    for (size_t j = 0; j < k; j++) {
        const kvm_route_t *r = items[idx[j]].route;
        q->it[j].version_h = kvm_cold_version_hash(&r->version);
        q->it[j].locator_fp = kvm_cold_backing_fingerprint(&r->cold);
        q->it[j].length = r->length;
        q->it[j].checksum = r->checksum;
        q->it[j].namespace_h = kvm_cold_namespace_hash(&r->ident);
        q->it[j].ident = r->ident; /* borrowed for the encode */
    }
    size_t blen = 0;
    int rc = store_cold_batch_req_encode(q, body, cap, &blen);
    free(q); /* (borrowed identities: nothing to free) */
    if (rc) {
        free(w);
        free(body);
        return rc;
    }
    hand_init(&w->h);
    w->rt = rt;
    w->owner = *owner;
    w->body = body;
    w->blen = blen;
    w->n = (uint16_t)k;
    w->timeout_ms = kvm_deadline_left_ms(deadline_ms);
    if (env_post(rt->env, rw_start, w) != 0) {
        hand_unref(&w->h);
        rw_unref(w);
        return KVMESH_EAGAIN;
    }
    bool was_done = false;
    rc = hand_wait(&w->h, deadline_ms, false, &was_done);
    if (rc) {
        snprintf(err, errcap, "%s", was_done ? w->err : "");
        rw_unref(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* Reads the staged items of one reply (j with resp.r[j].status 0) through the transport in one
 * batch, verifies and copies each into its caller's buffers, and ACKs every staged token. */
static void remote_transfer_all(kvm_rt_t *rt, struct rwait *w, kvm_cold_bitem_t *items,
                                const size_t *idx, size_t k, uint64_t deadline_ms,
                                unsigned *transport)
{
    uint64_t total = 0;
    size_t staged = 0;
    for (size_t j = 0; j < k; j++)
        if (w->resp.r[j].status == 0) {
            total += w->resp.r[j].length;
            staged++;
        }
    uint8_t *buf = staged ? malloc(total ? total : 1) : NULL;
    int rc = staged && !buf ? KVMESH_ENOMEM : 0;
    bool reg = false;
    if (buf && (rc = tp_register_memory(rt->tp, buf, total ? total : 1)) == 0)
        reg = true;
    struct tp_batch *b = NULL;
    if (!rc && staged)
        rc = tp_batch_new(rt->tp, (unsigned)staged, &b);
    int status[STORE_COLD_BATCH_MAX];
    unsigned req_of[STORE_COLD_BATCH_MAX];
    uint64_t off_of[STORE_COLD_BATCH_MAX];
    struct tp_request rq[STORE_COLD_BATCH_MAX];
    unsigned nr = 0;
    uint64_t off = 0;
    for (size_t j = 0; j < k; j++) {
        status[j] = w->resp.r[j].status;
        if (status[j] != 0)
            continue;
        const kvm_route_t *r = items[idx[j]].route;
        off_of[j] = off;
        req_of[j] = UINT32_MAX;
        if (rc) {
            status[j] = rc;
        } else if (w->resp.r[j].length != r->length || !w->data_addr || !w->data_addr[0]) {
            status[j] = KVMESH_EPROTO;
        } else if (r->length) {
            struct tp_segment *seg = NULL;
            status[j] =
                kvm_rt_seg_open(rt, w->data_addr, w->resp.r[j].seg, w->resp.r[j].grant, &seg);
            if (!status[j]) {
                *transport = tp_segment_kind(seg) == TP_SHM ? OBS_TRANSPORT_SHM : OBS_TRANSPORT_TCP;
                rq[nr] = (struct tp_request){.op = TP_READ,
                                             .local = buf + off,
                                             .length = r->length,
                                             .segment = seg,
                                             .remote_offset = w->resp.r[j].offset,
                                             .token = w->resp.r[j].grant};
                req_of[j] = nr++;
            }
        }
        off += w->resp.r[j].length;
    }
    bool late = false;
    if (b && nr) {
        int src = tp_submit(b, rq, nr);
        if (src) {
            late = true; /* nothing submitted: every item fails with src below */
            for (size_t j = 0; j < k; j++)
                if (status[j] == 0 && req_of[j] != UINT32_MAX)
                    status[j] = src;
        } else if (tp_batch_wait(b, (int)kvm_deadline_left_ms(deadline_ms)) != 0) {
            tp_batch_abort(b);
            late = true;
            for (size_t j = 0; j < k; j++)
                if (status[j] == 0 && req_of[j] != UINT32_MAX && tp_status(b, req_of[j], NULL) != 0)
                    status[j] = KVMESH_ETIMEDOUT;
        }
    }
    for (size_t j = 0; j < k; j++) {
        if (w->resp.r[j].status != 0)
            continue;
        kvm_cold_bitem_t *it = &items[idx[j]];
        int e = status[j];
        if (!e && !late && req_of[j] != UINT32_MAX)
            e = tp_status(b, req_of[j], NULL);
        const uint8_t *p = buf ? buf + off_of[j] : NULL;
        uint64_t len = it->route->length;
        if (!e && len && kvm_checksum(p, len) != it->route->checksum)
            e = KVMESH_ECHECKSUM; /* never hand out bytes the route does not vouch for */
        if (!e && len == 0 && it->route->checksum != kvm_checksum("", 0))
            e = KVMESH_ECHECKSUM;
        if (!e) {
            uint64_t pos = 0;
            for (int v = 0; v < it->iovcnt && pos < len; v++) {
                size_t m = (size_t)KVM_MIN((uint64_t)it->iov[v].iov_len, len - pos);
                memcpy(it->iov[v].iov_base, p + pos, m);
                pos += m;
            }
        }
        it->rc = e;
    }
    if (b)
        tp_batch_free(b); /* the transfers are terminal here */
    if (reg) {
        tp_unregister_memory(rt->tp, buf);
        kvm_waitq_signal(&rt->wq_reg); /* a registration slot is free (data.c) */
    }
    free(buf);
    for (size_t j = 0; j < k; j++)
        if (w->resp.r[j].status == 0)
            kvm_cold_ack_post(rt, &w->owner, w->resp.r[j].token);
}

/* One remote sub-batch idx[0..k) (k <= STORE_COLD_BATCH_MAX) of one owner: rounds until every
 * item has its result or the deadline passed. */
static void remote_sub(kvm_rt_t *rt, const kvm_runtime_id_t *owner, kvm_cold_bitem_t *items,
                       size_t *idx, size_t k, uint64_t deadline_ms)
{
    char err[256] = "";
    for (uint32_t round = 0, idle = 0; k > 0 && round < RB_ROUNDS_MAX; round++) {
        if (kvm_deadline_left_ms(deadline_ms) == 0) {
            for (size_t j = 0; j < k; j++)
                items[idx[j]].rc =
                    round == 0 ? KVMESH_ETIMEDOUT
                               : kvm_errf(STAGING_EBACKPRESSURE,
                                          "the cold copy's owner kept its staging pool full "
                                          "until the deadline; retry later or raise "
                                          "cold_staging_slots/cold_staging_bytes there");
            return;
        }
        struct rwait *w = NULL;
        int rc = remote_ask(rt, owner, items, idx, k, deadline_ms, &w, err, sizeof(err));
        if (rc == KVMESH_ENOTSUP) { /* an owner of an older release: one object at a time */
            for (size_t j = 0; j < k; j++) {
                kvm_cold_bitem_t *it = &items[idx[j]];
                it->rc = kvm_cold_read(rt, it->route, it->iov, it->iovcnt, deadline_ms);
                it->counted = true; /* (kvm_cold_read counts its own restores) */
            }
            return;
        }
        if (rc) {
            for (size_t j = 0; j < k; j++)
                items[idx[j]].rc =
                    err[0] ? kvm_errf(rc, "remote cold restore (batch): %s", err) : rc;
            return;
        }
        unsigned tr = rt->cfg.transport == TP_SHM ? OBS_TRANSPORT_SHM : OBS_TRANSPORT_TCP;
        remote_transfer_all(rt, w, items, idx, k, deadline_ms, &tr);
        obs_count(rt->metrics, cold_restore_batches_total, tr, OBS_NONE, 1);
        obs_count(rt->metrics, cold_restore_batch_items_total, tr, OBS_NONE, k);
        /* keep the items the pool had no room for, in order */
        size_t left = 0, staged = 0;
        for (size_t j = 0; j < k; j++) {
            if (w->resp.r[j].status == STAGING_EBACKPRESSURE)
                idx[left++] = idx[j];
            else if (w->resp.r[j].status == 0)
                staged++;
            else
                items[idx[j]].rc = w->resp.r[j].status;
        }
        rw_unref(w);
        k = left;
        if (k == 0)
            return;
        obs_count(rt->metrics, cold_restore_retries_total, OBS_NONE, OBS_NONE, k);
        idle = staged ? 0 : idle + 1;
        if (idle) { /* nothing staged this round: back off 1 .. 64 ms (a pause close ends) */
            uint64_t ms = 1ull << KVM_MIN(idle - 1, 6u),
                     left_ms = kvm_deadline_left_ms(deadline_ms);
            if (kvm_waitq_pause(&rt->wq_slots, env_clock_mono_ms() + KVM_MIN(ms, left_ms)) != 0) {
                for (size_t j = 0; j < k; j++)
                    items[idx[j]].rc = KVMESH_ECLOSED;
                return;
            }
        }
    }
}

/* ---- grouping ------------------------------------------------------------------------------ */

static bool same_group(const kvm_route_t *a, const kvm_route_t *b)
{
    return kvm_id128_equal(&a->cold.owner, &b->cold.owner) &&
           kvm_id128_equal(&a->cold.tier, &b->cold.tier);
}

void kvm_cold_read_batch(kvm_rt_t *rt, kvm_cold_bitem_t *items, size_t n, uint64_t deadline_ms)
{
    size_t *idx = calloc(n ? n : 1, sizeof(*idx));
    bool *done = calloc(n ? n : 1, sizeof(*done));
    if (!idx || !done) {
        for (size_t i = 0; i < n; i++)
            items[i].rc = KVMESH_ENOMEM;
        free(idx);
        free(done);
        return;
    }
    uint64_t t0 = env_clock_mono_ns();
    for (size_t i = 0; i < n; i++) {
        done[i] = items[i].route->cold.kind != KVM_COLD_MATERIALIZED;
        items[i].rc = done[i] ? KVMESH_EUNAVAILABLE : 0;
        items[i].counted = done[i];
    }
    /* one group at a time: every item of the first (owner, device) not done yet */
    for (size_t first = 0; first < n; first++) {
        if (done[first])
            continue;
        size_t k = 0;
        for (size_t i = first; i < n; i++)
            if (!done[i] && same_group(items[first].route, items[i].route)) {
                idx[k++] = i;
                done[i] = true;
            }
        const kvm_runtime_id_t *owner = &items[first].route->cold.owner;
        bool local = kvm_id128_equal(owner, &rt->self.id);
        if (local && !kvm_cold_has_device(rt)) {
            for (size_t j = 0; j < k; j++)
                items[idx[j]].rc =
                    kvm_errf(KVMESH_ENOTSUP, "the object's cold copy is on this runtime's device "
                                             "but its cold tier is off (cold_kind)");
            continue;
        }
        size_t sub = local ? COLD_BATCH_MAX : STORE_COLD_BATCH_MAX;
        for (size_t at = 0; at < k; at += sub) {
            size_t m = KVM_MIN(sub, k - at);
            if (local)
                local_sub(rt, items, idx + at, m, deadline_ms);
            else
                remote_sub(rt, owner, items, idx + at, m, deadline_ms);
        }
    }
    uint64_t dt = env_clock_mono_ns() - t0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].counted)
            continue;
        obs_observe(rt->metrics, cold_restore_duration_seconds, OBS_NONE, OBS_NONE, dt);
        obs_count(rt->metrics, cold_restores_total,
                  items[i].rc == 0 ? OBS_OUTCOME_OK : OBS_OUTCOME_ERROR, OBS_NONE, 1);
    }
    free(idx);
    free(done);
}
