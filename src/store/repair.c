/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair.c — background re-replication: the noted departed/draining owners, the repair thread
 * that passes over their routes page by page, and the copy rounds (repair.h has the protocol).
 *
 * Repair thread, per noted owner G:
 *
 *   SCAN (loop: route_owner_scan page of routes referencing G, filtered to the objects this
 *     |    runtime is designated for)  --paused / scan failed-->  retry after REPAIR_IDLE_MS
 *     v
 *   COPY ROUND (<= rereplicate_max_copies objects, after the byte-rate token bucket):
 *     PLACE op (1 replica, every current owner excluded) -> local source read, checksum check
 *     -> one transport batch of WRITEs -> HANDOFF op (route CAS: dead replica -> new replica)
 *     -> failed copies: ABORT op (the reservations are released)
 *     |
 *     v  next page until the scan is complete
 *   a pass that found nothing to do for this runtime, completely and unpaused, drops G.
 *
 * Counting (once, where it happens): kvmesh_rereplication_found_total when a scan page hands an
 * object to this runtime; kvmesh_rereplication_objects_total{result} per finished copy
 * (repaired / noop: superseded / failed); kvmesh_rereplication_bytes_total per repaired copy.
 * The backlog is found minus the outcomes; /stats shows the gauges (repair.h).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_thread.h"
#include "net/seg.h"
#include "store/repair.h"
#include "store/repair_plan.h"
#include "store/store.h"

#define REPAIR_PAGE      64    /* routes per owner-scan page */
#define REPAIR_IDLE_MS   500   /* retry period while an owner's pass is incomplete */
#define REPAIR_MAX_PAGES 65536 /* pages per pass (x REPAIR_PAGE routes): a bound, not a goal */
#define REPAIR_PENDING   STORE_MAX_MEMBERS

struct task {
    kvm_ident_t ident;
    uint64_t len, checksum;
    kvm_hot_replica_t src; /* this runtime's live replica */
    uint64_t src_read_token;
    kvm_hot_replica_t moving; /* the replica that is not live: replaced */
    uint32_t n_excl;
    kvm_runtime_id_t excl[KVM_MAX_REPLICAS];
};

struct scan_call {
    struct kvm_repair *rp;
    kvm_runtime_id_t owner;
    uint8_t *cursor;
    size_t cursor_len;
    /* results (written by the loop before done) */
    int rc;
    bool complete, paused;
    struct task *tasks;
    size_t n_tasks;
    uint64_t lost;
    uint8_t *next;
    size_t next_len;
    /* [rp->mu] */
    int refs; /* the repair thread + the loop */
    bool done;
};

struct pend {
    kvm_runtime_id_t id;
    uint64_t gen; /* bumped when the owner is noted again (a pass must then run again) */
};

struct kvm_repair {
    kvm_rt_t *rt;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    /* [mu] */
    bool stop;
    struct pend pend[REPAIR_PENDING];
    size_t n_pend;
    uint64_t gen;
    /* [repair thread] token bucket */
    double tokens;
    uint64_t tb_ms;
    /* [any] */
    _Atomic uint64_t under, inflight, lost, found, repaired, superseded, failed, bytes, passes;
    atomic_bool paused;
};

/* ---- noting owners (loop) ------------------------------------------------------------------- */

static void note(struct kvm_repair *rp, const kvm_runtime_id_t *id)
{
    pthread_mutex_lock(&rp->mu);
    size_t i = 0;
    while (i < rp->n_pend && !kvm_id128_equal(&rp->pend[i].id, id))
        i++;
    if (i == rp->n_pend && rp->n_pend < REPAIR_PENDING) {
        rp->pend[rp->n_pend++].id = *id;
        obs_gauge_add(rp->rt->metrics, rereplication_pending_owners, OBS_NONE, OBS_NONE, 1);
    }
    if (i < rp->n_pend)
        rp->pend[i].gen = ++rp->gen;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
}

static bool storage(const struct kvm_member *m)
{
    return m->n_segs > 0 && m->data_addr && m->data_addr[0] != 0;
}

/* rt->on_members [loop]: a new snapshot was installed (member.c); `old` is the previous one. */
static void repair_on_members(kvm_rt_t *rt, const struct kvm_member *old, size_t n_old)
{
    struct kvm_repair *rp = rt->repair;
    if (!rp)
        return;
    for (size_t i = 0; i < n_old; i++) {
        const struct kvm_member *o = &old[i];
        if (!storage(o) || kvm_id128_equal(&o->rt.id, &rt->self.id))
            continue;
        const struct kvm_member *m = kvm_member_find(rt, &o->rt.id);
        /* gone (lease expired or left), superseded by a new epoch, or draining */
        if (!m || m->rt.epoch != o->rt.epoch || m->state == KVM_MS_DRAINING ||
            m->state == KVM_MS_GONE)
            note(rp, &o->rt.id);
    }
    for (size_t i = 0; i < rt->n_members; i++) { /* draining before this runtime saw it active */
        const struct kvm_member *m = &rt->members[i];
        if (m->state == KVM_MS_DRAINING && storage(m) && !kvm_id128_equal(&m->rt.id, &rt->self.id))
            note(rp, &m->rt.id);
    }
}

/* ---- the scan (loop) ------------------------------------------------------------------------ */

static void scan_unref(struct scan_call *c)
{
    struct kvm_repair *rp = c->rp;
    pthread_mutex_lock(&rp->mu);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&rp->mu);
    if (!last)
        return;
    for (size_t i = 0; i < c->n_tasks; i++)
        kvm_ident_free(&c->tasks[i].ident);
    free(c->tasks);
    free(c->cursor);
    free(c->next);
    free(c);
}

static void scan_finish(struct scan_call *c, int rc)
{
    struct kvm_repair *rp = c->rp;
    pthread_mutex_lock(&rp->mu);
    c->rc = rc;
    c->done = true;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    scan_unref(c);
}

/* A replica's state for re-replication. LIVE: its owner is an ACTIVE member of the snapshot
 * that lists the segment (a new epoch has new segments). LEAVING: the same on a DRAINING owner,
 * whose drain moves it (kvm_store_drain): it is not replaced while the drain runs, only once the
 * owner is gone with it still referenced (a drain that died or timed out). DEAD: anything else. */
static enum kvm_rep_state rep_state(kvm_rt_t *rt, const kvm_hot_replica_t *rep)
{
    const struct kvm_member *m = kvm_member_find(rt, &rep->owner);
    if (!m || (m->state != KVM_MS_ACTIVE && m->state != KVM_MS_DRAINING))
        return KVM_REP_DEAD;
    for (uint32_t s = 0; s < m->n_segs; s++)
        if (m->segs[s].id == rep->segment)
            return m->state == KVM_MS_ACTIVE ? KVM_REP_LIVE : KVM_REP_LEAVING;
    return KVM_REP_DEAD;
}

bool kvm_replica_readable(kvm_rt_t *rt, const kvm_hot_replica_t *rep)
{
    return rep_state(rt, rep) != KVM_REP_DEAD;
}

static bool local_token(kvm_rt_t *rt, uint64_t seg_id, uint64_t *token)
{
    for (uint32_t s = 0; s < rt->n_segs; s++)
        if (rt->segs[s].seg && rt->segs[s].seg->id == seg_id) {
            *token = rt->segs[s].read_token;
            return true;
        }
    return false;
}

static size_t storage_owners(kvm_rt_t *rt)
{
    size_t n = 0;
    for (size_t i = 0; i < rt->n_members; i++)
        n += rt->members[i].state == KVM_MS_ACTIVE && storage(&rt->members[i]);
    return n;
}

/* Keeps the routes of the page that are under-replicated and designated to this runtime. */
static int scan_filter(struct scan_call *c, const route_owner_page_t *pg)
{
    kvm_rt_t *rt = c->rp->rt;
    c->tasks = calloc(pg->n ? pg->n : 1, sizeof(*c->tasks));
    if (!c->tasks)
        return KVMESH_ENOMEM;
    for (size_t i = 0; i < pg->n; i++) {
        const kvm_route_t *r = &pg->routes[i];
        enum kvm_rep_state st[KVM_MAX_REPLICAS];
        for (uint32_t j = 0; j < r->n_replicas && j < KVM_MAX_REPLICAS; j++)
            st[j] = rep_state(rt, &r->replicas[j]);
        kvm_repair_plan_t plan;
        enum kvm_repair_verdict v = kvm_repair_plan(r, st, &rt->self.id, &plan);
        if (v == KVM_REPAIR_LOST)
            c->lost++;
        if (v != KVM_REPAIR_COPY)
            continue; /* healthy, lost, draining, or another runtime's first live replica */
        const kvm_hot_replica_t *src = &r->replicas[plan.src];
        struct task *t = &c->tasks[c->n_tasks];
        if (!local_token(rt, src->segment, &t->src_read_token))
            continue; /* not a segment this runtime serves (any more) */
        if (kvm_ident_copy(&t->ident, &r->ident) != 0)
            return KVMESH_ENOMEM;
        t->len = r->length;
        t->checksum = r->checksum;
        t->src = *src;
        t->moving = r->replicas[plan.dead];
        for (uint32_t j = 0; j < r->n_replicas; j++)
            t->excl[t->n_excl++] = r->replicas[j].owner;
        c->n_tasks++;
    }
    if (!pg->complete && pg->next_cursor_len) {
        if (!(c->next = malloc(pg->next_cursor_len)))
            return KVMESH_ENOMEM;
        memcpy(c->next, pg->next_cursor, pg->next_cursor_len);
        c->next_len = pg->next_cursor_len;
    }
    c->complete = pg->complete || !pg->next_cursor_len;
    return 0;
}

static void scan_paged(void *arg, int rc, const route_owner_page_t *pg)
{
    struct scan_call *c = arg;
    if (rc == 0)
        rc = scan_filter(c, pg);
    scan_finish(c, rc);
}

static void scan_enter(void *arg)
{
    struct scan_call *c = arg;
    kvm_rt_t *rt = c->rp->rt;
    if (atomic_load(&rt->closing) || !rt->route) {
        scan_finish(c, KVMESH_ECLOSED);
        return;
    }
    if (storage_owners(rt) < rt->cfg.replicas) {
        c->paused = true;
        scan_finish(c, 0);
        return;
    }
    int rc = route_owner_scan(rt->route, &c->owner, c->cursor, c->cursor_len, REPAIR_PAGE,
                              scan_paged, c);
    if (rc)
        scan_finish(c, rc);
}

/* Repair thread: one page, waited for until the request timeout (+ slack) or until the thread is
 * told to stop (a closing runtime does not wait out a scan its peers no longer answer). NULL when
 * the page could not be had (stopping, closing, timeout, out of memory). */
static struct scan_call *scan_page(struct kvm_repair *rp, const kvm_runtime_id_t *owner,
                                   const uint8_t *cursor, size_t cursor_len)
{
    kvm_rt_t *rt = rp->rt;
    struct scan_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->rp = rp;
    c->owner = *owner;
    c->refs = 2;
    if (cursor_len) {
        if (!(c->cursor = malloc(cursor_len))) {
            free(c);
            return NULL;
        }
        memcpy(c->cursor, cursor, cursor_len);
        c->cursor_len = cursor_len;
    }
    if (env_post(rt->env, scan_enter, c) != 0) {
        free(c->cursor);
        free(c);
        return NULL;
    }
    uint64_t give_up = env_clock_mono_ms() + rt->cfg.request_timeout_ms + STORE_DEADLINE_SLACK_MS;
    struct timespec ts = {.tv_sec = (time_t)(give_up / 1000),
                          .tv_nsec = (long)(give_up % 1000) * 1000000L};
    pthread_mutex_lock(&rp->mu);
    while (!c->done && !rp->stop && pthread_cond_timedwait(&rp->cv, &rp->mu, &ts) != ETIMEDOUT)
        ;
    bool done = c->done;
    pthread_mutex_unlock(&rp->mu);
    if (!done) { /* the loop still holds its reference: it frees the call when it answers */
        scan_unref(c);
        return NULL;
    }
    return c;
}

/* ---- copy rounds (repair thread) ------------------------------------------------------------ */

static bool stopping(struct kvm_repair *rp)
{
    pthread_mutex_lock(&rp->mu);
    bool s = rp->stop;
    pthread_mutex_unlock(&rp->mu);
    return s || atomic_load(&rp->rt->closing);
}

/* Sleeps (interruptibly) until `bytes` fit the rate; false when stopping. */
static bool rate_wait(struct kvm_repair *rp, uint64_t bytes)
{
    double rate = (double)rp->rt->cfg.rereplicate_bytes_per_sec;
    if (rate <= 0)
        return !stopping(rp);
    for (;;) {
        uint64_t now = env_clock_mono_ms();
        rp->tokens += (double)(now - rp->tb_ms) * rate / 1000.0;
        rp->tb_ms = now;
        double cap = rate > (double)bytes ? rate : (double)bytes; /* one second of burst */
        if (rp->tokens > cap)
            rp->tokens = cap;
        if (rp->tokens >= (double)bytes) {
            rp->tokens -= (double)bytes;
            return !stopping(rp);
        }
        uint64_t wait = (uint64_t)(((double)bytes - rp->tokens) * 1000.0 / rate) + 1;
        uint64_t until = now + (wait > 1000 ? 1000 : wait);
        struct timespec ts = {.tv_sec = (time_t)(until / 1000),
                              .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_mutex_lock(&rp->mu);
        if (!rp->stop)
            pthread_cond_timedwait(&rp->cv, &rp->mu, &ts);
        bool s = rp->stop;
        pthread_mutex_unlock(&rp->mu);
        if (s)
            return false;
    }
}

static void count(struct kvm_repair *rp, unsigned result, uint64_t bytes)
{
    kvm_rt_t *rt = rp->rt;
    obs_count(rt->metrics, rereplication_objects_total, result, OBS_NONE, 1);
    if (result == OBS_REPAIR_REPAIRED) {
        atomic_fetch_add(&rp->repaired, 1);
        atomic_fetch_add(&rp->bytes, bytes);
        obs_count(rt->metrics, rereplication_bytes_total, OBS_NONE, OBS_NONE, bytes);
    } else if (result == OBS_REPAIR_NOOP) {
        atomic_fetch_add(&rp->superseded, 1);
    } else {
        atomic_fetch_add(&rp->failed, 1);
    }
}

/* A handoff CAS that ended like this may have been applied (docs/api.md "Errors"). */
static bool may_have_applied(int rc)
{
    return rc == KVMESH_ETIMEDOUT || rc == KVMESH_EINDETERMINATE || rc == KVMESH_ECONN;
}

/* Settles the handoffs whose outcome is unknown with one exact route lookup each: published if
 * the route lists the new replica (counted repaired), failed otherwise (the next pass retries;
 * the copy's reservation expiry asks the route and reclaims it). Returns how many failed. */
static size_t settle(struct kvm_repair *rp, kvm_op_t *ho, const struct task *ts, const size_t *map,
                     size_t n_ok)
{
    kvm_rt_t *rt = rp->rt;
    size_t n = 0, failed = 0;
    for (size_t i = 0; i < n_ok; i++)
        n += ho->items[i].rc != 0 && may_have_applied(ho->items[i].rc);
    kvm_op_t *look = kvm_op_new(rt, KVM_OP_LOOKUP, n);
    size_t k = 0;
    int rc = look ? 0 : KVMESH_ENOMEM;
    for (size_t i = 0; i < n_ok && !rc; i++)
        if (ho->items[i].rc != 0 && may_have_applied(ho->items[i].rc))
            rc = kvm_ident_copy(&look->items[k++].ident, &ho->items[i].ident);
    if (!rc)
        rc = kvm_op_run(look);
    /* rc != 0 (e.g. an abandoned lookup, whose items the loop still owns): nothing is read */
    k = 0;
    for (size_t i = 0; i < n_ok; i++) {
        const struct kvm_item *it = &ho->items[i];
        if (it->rc == 0 || !may_have_applied(it->rc))
            continue;
        const struct kvm_item *l = look && !rc ? &look->items[k] : NULL;
        k++;
        kvm_hot_replica_t nr = {.owner = it->res[0].owner.id,
                                .segment = it->res[0].seg,
                                .offset = it->res[0].offset,
                                .length = ts[map[i]].len,
                                .checksum = ts[map[i]].checksum};
        if (l && l->rc == 0 && !kvm_route_is_tombstone(&l->route) &&
            kvm_route_find_replica(&l->route, &nr) >= 0) {
            count(rp, OBS_REPAIR_REPAIRED, ts[map[i]].len);
        } else {
            count(rp, OBS_REPAIR_FAILED, 0);
            failed++;
        }
    }
    if (look)
        kvm_op_unref(look);
    return failed;
}

/* The gauges of /stats (atomics) and of /metrics (add-mode families) move together. */
static void inflight_add(struct kvm_repair *rp, int64_t d)
{
    atomic_fetch_add(&rp->inflight, (uint64_t)d);
    obs_gauge_add(rp->rt->metrics, rereplication_copies_in_flight, OBS_NONE, OBS_NONE, d);
}

static void under_add(struct kvm_repair *rp, int64_t d)
{
    atomic_fetch_add(&rp->under, (uint64_t)d);
    obs_gauge_add(rp->rt->metrics, rereplication_under_replicated_objects, OBS_NONE, OBS_NONE, d);
}

/* Copies n tasks; returns how many failed. */
static size_t copy_round(struct kvm_repair *rp, struct task *ts, size_t n)
{
    kvm_rt_t *rt = rp->rt;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ts[i].len;
    if (!rate_wait(rp, total))
        return n; /* closing: not counted, the runtime goes away */
    inflight_add(rp, (int64_t)n);
    size_t failed = 0;
    kvm_op_t *place = kvm_op_new(rt, KVM_OP_PLACE, n);
    int rc = place ? 0 : KVMESH_ENOMEM;
    if (place)
        place->replicas = 1;
    for (size_t i = 0; i < n && !rc; i++) {
        struct kvm_item *it = &place->items[i];
        rc = kvm_ident_copy(&it->ident, &ts[i].ident);
        it->len = ts[i].len;
        for (uint32_t j = 0; j < ts[i].n_excl && it->exclude_n < KVM_ARRAY_SIZE(it->exclude); j++)
            it->exclude[it->exclude_n++] = ts[i].excl[j];
    }
    if (!rc)
        rc = kvm_op_run(place);
    if (rc) { /* nothing placed is readable here (an abandoned op releases its own) */
        for (size_t i = 0; i < n; i++)
            count(rp, OBS_REPAIR_FAILED, 0);
        kvm_op_unref(place);
        inflight_add(rp, -(int64_t)n);
        return n;
    }
    struct tp_batch *b = NULL;
    if (tp_batch_new(rt->tp, TP_MAX_BATCH, &b) != 0)
        b = NULL;
    struct seg **pins = calloc(n, sizeof(*pins));
    int *slot = calloc(n, sizeof(*slot));
    for (size_t i = 0; i < n; i++) {
        struct kvm_item *it = &place->items[i];
        if (slot)
            slot[i] = -1;
        if (it->rc || it->n_res != 1)
            continue;
        if (!b || !pins || !slot || it->res[0].local || !it->res[0].data_addr) {
            it->rc = KVMESH_EUNAVAILABLE; /* self is excluded: a local slot is a bug upstream */
            continue;
        }
        const struct task *t = &ts[i];
        uint8_t *src;
        enum seg_reason why;
        int e = seg_check(rt->reg, t->src.segment, t->src.offset, t->len, SEG_READ,
                          t->src_read_token, &src, &pins[i], &why);
        /* never spread a replica that does not match its route */
        if (!e && kvm_checksum(src, t->len) != t->checksum)
            e = KVMESH_ECORRUPT;
        struct tp_segment *seg = NULL;
        if (!e)
            e = kvm_rt_seg_open(rt, it->res[0].data_addr, it->res[0].seg, it->res[0].seg_read_token,
                                &seg);
        if (!e) {
            struct tp_request rq = {.op = TP_WRITE,
                                    .local = src,
                                    .length = t->len,
                                    .segment = seg,
                                    .remote_offset = it->res[0].offset,
                                    .token = it->res[0].token};
            slot[i] = (int)tp_batch_count(b);
            e = tp_submit(b, &rq, 1);
            if (e)
                slot[i] = -1;
        }
        if (e)
            it->rc = e;
    }
    if (b) {
        tp_batch_wait(b, (int)rt->cfg.request_timeout_ms);
        for (size_t i = 0; slot && i < n; i++)
            if (slot[i] >= 0 && tp_status(b, (unsigned)slot[i], NULL) != 0)
                place->items[i].rc = KVMESH_EIO;
        tp_batch_free(b);
    }
    for (size_t i = 0; pins && i < n; i++)
        if (pins[i])
            seg_unpin(rt->reg, pins[i]);
    free(pins);
    free(slot);
    size_t n_ok = 0, n_bad = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvm_item *it = &place->items[i];
        if (it->rc == 0 && it->n_res == 1)
            n_ok++;
        else if (it->n_res)
            n_bad++;
    }
    kvm_op_t *ho = n_ok ? kvm_op_new(rt, KVM_OP_HANDOFF, n_ok) : NULL;
    kvm_op_t *ab = n_bad ? kvm_op_new(rt, KVM_OP_ABORT, n_bad) : NULL;
    size_t *map = calloc(n_ok ? n_ok : 1, sizeof(*map));
    size_t k = 0, j = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvm_item *it = &place->items[i];
        bool ok = it->rc == 0 && it->n_res == 1;
        kvm_op_t *dst = ok ? ho : it->n_res ? ab : NULL;
        if (!ok) {
            count(rp, OBS_REPAIR_FAILED, 0);
            failed++;
        }
        if (!dst)
            continue;
        if (ok && map)
            map[k] = i;
        struct kvm_item *d = &dst->items[ok ? k++ : j++];
        d->ident = it->ident;
        memset(&it->ident, 0, sizeof(it->ident));
        d->len = it->len;
        d->n_res = 1;
        d->res[0] = it->res[0];
        d->moving = ts[i].moving;
    }
    if (ab) {
        (void)kvm_op_run(ab);
        kvm_op_unref(ab);
    }
    if (ho) {
        int hrc = map ? kvm_op_run(ho) : KVMESH_ENOMEM;
        size_t n_unknown = 0;
        for (size_t i = 0; i < n_ok; i++) {
            const struct kvm_item *it = &ho->items[i];
            if (hrc == 0 && it->rc == 0)
                count(rp, it->superseded ? OBS_REPAIR_NOOP : OBS_REPAIR_REPAIRED, ts[map[i]].len);
            else if (hrc == 0 && may_have_applied(it->rc))
                n_unknown++;
            else {
                count(rp, OBS_REPAIR_FAILED, 0);
                failed++;
            }
        }
        if (n_unknown)
            failed += settle(rp, ho, ts, map, n_ok);
        kvm_op_unref(ho);
    }
    free(map);
    kvm_op_unref(place);
    inflight_add(rp, -(int64_t)n);
    return failed;
}

/* ---- passes (repair thread) ----------------------------------------------------------------- */

enum pass_result { PASS_CLEAN = 0, PASS_WORKED = 1, PASS_RETRY = 2 };

static enum pass_result pass_owner(struct kvm_repair *rp, const kvm_runtime_id_t *owner)
{
    kvm_rt_t *rt = rp->rt;
    uint8_t *cursor = NULL;
    size_t clen = 0;
    enum pass_result res = PASS_CLEAN;
    uint64_t lost = 0;
    uint32_t max_copies = rt->cfg.rereplicate_max_copies;
    for (uint32_t page = 0;; page++) {
        if (page == REPAIR_MAX_PAGES || stopping(rp)) {
            res = PASS_RETRY;
            break;
        }
        struct scan_call *c = scan_page(rp, owner, cursor, clen);
        if (!c || c->rc || c->paused) {
            atomic_store(&rp->paused, c && !c->rc && c->paused);
            if (c)
                scan_unref(c);
            res = PASS_RETRY;
            break;
        }
        atomic_store(&rp->paused, false);
        lost += c->lost;
        if (c->n_tasks) {
            atomic_fetch_add(&rp->found, c->n_tasks);
            obs_count(rt->metrics, rereplication_found_total, OBS_NONE, OBS_NONE, c->n_tasks);
            under_add(rp, (int64_t)c->n_tasks);
            if (res == PASS_CLEAN)
                res = PASS_WORKED;
        }
        for (size_t i = 0; i < c->n_tasks; i += max_copies) {
            size_t k = c->n_tasks - i < max_copies ? c->n_tasks - i : max_copies;
            if (copy_round(rp, &c->tasks[i], k))
                res = PASS_RETRY;
            under_add(rp, -(int64_t)k);
        }
        bool complete = c->complete;
        free(cursor);
        cursor = c->next;
        clen = c->next_len;
        c->next = NULL;
        scan_unref(c);
        if (complete)
            break;
    }
    free(cursor);
    if (res != PASS_RETRY) {
        atomic_fetch_add(&rp->passes, 1);
        atomic_store(&rp->lost, lost);
    }
    return res;
}

static void *repair_main(void *arg)
{
    struct kvm_repair *rp = arg;
    struct pend work[REPAIR_PENDING];
    pthread_mutex_lock(&rp->mu);
    while (!rp->stop) {
        if (rp->n_pend == 0) {
            pthread_cond_wait(&rp->cv, &rp->mu);
            continue;
        }
        size_t n = rp->n_pend;
        memcpy(work, rp->pend, n * sizeof(work[0]));
        pthread_mutex_unlock(&rp->mu);
        bool retry = false;
        for (size_t i = 0; i < n && !stopping(rp); i++) {
            enum pass_result r = pass_owner(rp, &work[i].id);
            retry |= r == PASS_RETRY;
            if (r != PASS_CLEAN)
                continue;
            pthread_mutex_lock(&rp->mu); /* clean: done unless noted again meanwhile */
            for (size_t j = 0; j < rp->n_pend; j++)
                if (kvm_id128_equal(&rp->pend[j].id, &work[i].id) &&
                    rp->pend[j].gen == work[i].gen) {
                    rp->pend[j] = rp->pend[--rp->n_pend];
                    obs_gauge_add(rp->rt->metrics, rereplication_pending_owners, OBS_NONE, OBS_NONE,
                                  -1);
                    break;
                }
            pthread_mutex_unlock(&rp->mu);
        }
        pthread_mutex_lock(&rp->mu);
        if (retry && !rp->stop) {
            uint64_t until = env_clock_mono_ms() + REPAIR_IDLE_MS;
            struct timespec ts = {.tv_sec = (time_t)(until / 1000),
                                  .tv_nsec = (long)(until % 1000) * 1000000L};
            pthread_cond_timedwait(&rp->cv, &rp->mu, &ts);
        }
    }
    pthread_mutex_unlock(&rp->mu);
    return NULL;
}

/* ---- life ------------------------------------------------------------------------------------ */

int kvm_repair_new(kvm_rt_t *rt)
{
    struct kvm_repair *rp = calloc(1, sizeof(*rp));
    if (!rp)
        return KVMESH_ENOMEM;
    rp->rt = rt;
    pthread_mutex_init(&rp->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rp->cv, &ca);
    pthread_condattr_destroy(&ca);
    rp->tb_ms = env_clock_mono_ms();
    rt->repair = rp;
    rt->on_members = repair_on_members; /* before the loop starts: member.c calls it */
    return 0;
}

int kvm_repair_start(kvm_rt_t *rt)
{
    struct kvm_repair *rp = rt->repair;
    if (!rp || rp->started || rt->n_segs == 0 || rt->cfg.rereplicate_max_copies == 0)
        return 0; /* a client-only runtime holds no replica; 0 copies = re-replication off */
    if (env_thread_create(&rp->th, repair_main, rp) !=
        0) /* SIGPIPE blocked, like every library thread */
        return kvm_errf(KVMESH_ENOMEM, "cannot start the re-replication thread");
    rp->started = true;
    return 0;
}

void kvm_repair_stop(kvm_rt_t *rt)
{
    struct kvm_repair *rp = rt ? rt->repair : NULL;
    if (!rp)
        return;
    if (rp->started) {
        pthread_mutex_lock(&rp->mu);
        rp->stop = true;
        pthread_cond_broadcast(&rp->cv);
        pthread_mutex_unlock(&rp->mu);
        pthread_join(rp->th, NULL);
        rp->started = false;
    }
    /* the loop may still note owners until it stops: the state is freed with the runtime */
}

void kvm_repair_free(kvm_rt_t *rt)
{
    struct kvm_repair *rp = rt ? rt->repair : NULL;
    if (!rp)
        return;
    KVM_ASSERT(!rp->started);
    rt->repair = NULL;
    rt->on_members = NULL;
    pthread_cond_destroy(&rp->cv);
    pthread_mutex_destroy(&rp->mu);
    free(rp);
}

void kvm_repair_stats(kvm_rt_t *rt, struct kvm_repair_stats *out)
{
    memset(out, 0, sizeof(*out));
    struct kvm_repair *rp = rt->repair;
    if (!rp)
        return;
    pthread_mutex_lock(&rp->mu);
    out->pending_owners = rp->n_pend;
    pthread_mutex_unlock(&rp->mu);
    out->under_replicated = atomic_load(&rp->under);
    out->copies_in_flight = atomic_load(&rp->inflight);
    out->lost = atomic_load(&rp->lost);
    out->found = atomic_load(&rp->found);
    out->repaired = atomic_load(&rp->repaired);
    out->superseded = atomic_load(&rp->superseded);
    out->failed = atomic_load(&rp->failed);
    out->bytes_copied = atomic_load(&rp->bytes);
    out->passes = atomic_load(&rp->passes);
    out->paused = atomic_load(&rp->paused);
}
