// SPDX-License-Identifier: Apache-2.0
/*
 * cold_glue.c — owns the store's cold tier state (struct kvm_cold, rt->cold): the devices
 * (struct gdev, up to KVM_STORE_COLD_DEVICES_MAX: backend, health counter, cleaning; docs/cold.md
 * "Several devices"), the one cold_t they are attached to, the cold I/O worker thread, the route
 * callbacks given to the core, the view/reconciliation timer and the export of the core's counters
 * as metrics, the DRAM pressure reports for the offload watermarks, the eviction-triggered claims
 * (struct claim, cold_offload_mode = evict) and the best-effort re-promotion after a restore
 * (struct promo). docs/cold.md "Store wiring" and "Offload modes" describe the calls; cold_glue.h
 * says which thread calls what.
 *
 * The worker: cold_exec_t jobs go into a FIFO under mu (one node per job, allocated at submit;
 * when that allocation fails the job runs inline on the loop); the worker runs run(), puts the
 * job on the done list and posts one drain to the loop, which calls done(). At close, after
 * cold_close, the worker finishes what is queued and exits; the loop joins it and calls the
 * remaining done()s itself (cold_close needs them to free its memory).
 *
 * Maintenance: every tick, when cold_clean_bytes_per_tick > 0, the backend has maintain() and no
 * maintenance job is in flight, one job (struct clean_job) calls maintain(budget) on the worker,
 * never on the loop: every backend call of this runtime runs on that one worker, so the job is
 * serialised with the offloads, restores and deletes too (the backends allow concurrency anyway,
 * cold_backend.h "Threading"). Its stat() before and after gives the file bytes released.
 */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cold/cold.h"
#include "cold/cold_backend_open.h"
#include "cold/staging.h"
#include "core/bytes.h"
#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_thread.h"
#include "core/wire.h"
#include "net/seg.h"
#include "net/transport.h"
#include "store/proto.h"
#include "store/cold_glue.h"
#include "store/cold_health.h"
#include "store/cold_metrics.h"
#include "store/cold_resume.h"

#define COLD_GLUE_TICK_MS    200 /* view refresh, counters, done-list backstop */
#define COLD_GLUE_RECON_MS   1000
#define COLD_GLUE_RECON_PAGE 64

struct xnode {
    cold_exec_t *io;
    struct xnode *next;
};

/* One cold device of this runtime (device 0: cold_kind/cold_root; 1..: cold_devices). */
struct gdev {
    cold_backend_t be;
    bool be_open;
    /* the core's backend: be behind the health-counting table (cold_health.h) */
    kvm_cold_health_t *health;
    cold_backend_t hb;
    kvm_tier_id_t id;
    bool cleaning; /* [loop] a maintenance job (struct clean_job) is queued or running */
    /* its configuration (the device record's identity fields) */
    int kind;                 /* COLD_BACKEND_* */
    char root[COLD_ROOT_CAP]; /* canonical path */
    uint64_t capacity;
    char tags[COLD_TAGS_CAP];
    kvm_cold_dev_exported_t exported; /* [loop] its per-device counters already exported */
};

struct kvm_cold {
    kvm_rt_t *rt;
    cold_t *c;
    struct gdev devs[KVM_STORE_COLD_DEVICES_MAX];
    uint32_t ndev; /* devices opened (be_open) */
    uint32_t nreg; /* [open] devices registered so far */
    uint32_t ncfg; /* devices configured */
    bool planner;  /* cold_kind = off: a cold core with no device, only to plan/cancel reclaims */
    cold_exec_ops_t exec;
    kvm_cold_owner_ops_t owner; /* the owner's slot calls (kvm_cold_open), for promotions */
    kvm_done_cb open_cb;
    /* worker [any] under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool th_started, stop, drain_posted;
    struct xnode *q_head, *q_tail, *d_head, *d_tail;
    /* [loop] */
    env_timer_id tick_timer;
    uint64_t last_recon_ms;
    bool refreshing, reconciling, closed;
    cold_stats_t exported; /* counters already added to the registry */
    uint32_t refs;         /* the runtime + route calls in flight (struct rop) */
    uint32_t
        commit_lookups; /* kvm_cold_slot_committed lookups in flight: offloads not queued yet */
    struct reclaim_ctx *reclaims; /* reclaims whose callback is due (freed at close) */
    struct cread *reads;          /* restores whose callback is due (failed at close) */
    struct srv_read *serving;     /* remote restores this owner serves (dropped at close) */
    struct srv_batch *bserving;   /* batched remote restores this owner serves (same) */
    struct lbatch *lbatches;      /* local batch restores whose callback is due (failed at close) */
    struct claim *claims;         /* eviction-triggered offloads in progress (freed at close) */
    struct durable *durables;     /* write-through puts waiting or answered (freed at close) */
    /* [loop] remote-restore staging (docs/cold.md "Staging pool") */
    staging_pool_t *stg;
    struct seg *stg_seg; /* the registered segment the pool's slots live in */
    uint64_t *stg_grant; /* per slot: the read grant of its current use (0 = none) */
    uint32_t stg_slots;
    staging_stats_t stg_exported;
    /* the slot just staged by srv_restored: the core's promote() of the same restore (it runs
     * right after the restore's callbacks, in the same loop turn) copies from it under a
     * promotion pin (docs/cold.md "Remote restore", promotion) */
    struct {
        bool set;
        uint64_t ident_hash, token, len;
        uint32_t slot;
    } stg_last;
    uint64_t stg_promotions, stg_promotions_exported; /* promotions that copied from a slot */
};

static void g_unref(struct kvm_cold *g)
{
    KVM_ASSERT(g->refs > 0);
    if (--g->refs)
        return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* The runtime's cold tier when it has a device; NULL when it has none (cold_kind = off: its
 * rt->cold is only the reclaim planner, see kvm_cold_reclaim_gate). */
static struct kvm_cold *dev_cold(kvm_rt_t *rt)
{
    struct kvm_cold *g = rt->cold;
    return g && !g->planner ? g : NULL;
}

/* Whether dev is one of this runtime's devices. */
static bool own_dev(const struct kvm_cold *g, const kvm_tier_id_t *dev)
{
    for (uint32_t i = 0; i < g->ndev; i++)
        if (kvm_id128_equal(&g->devs[i].id, dev))
            return true;
    return false;
}

bool kvm_cold_has_device(kvm_rt_t *rt)
{
    return dev_cold(rt) != NULL;
}

/* The owner's calls into the cold tier (store.h kvm_owner_cold_hooks), installed at open. */
static const struct kvm_owner_cold_hooks owner_hooks = {
    .has_device = kvm_cold_has_device,
    .published = kvm_cold_published,
    .slot_committed = kvm_cold_slot_committed,
    .pins_last = kvm_cold_pins_last,
    .claims = kvm_cold_claims,
    .evict_claim = kvm_cold_evict_claim,
    .evict_last = kvm_cold_evict_last,
};

_Static_assert(KVM_COLD_VIEW_OWNERS_MAX >= COLD_DEVICES_MAX, "one sum per device of a view");

int kvm_cold_owner_sums(kvm_rt_t *rt, kvm_cold_owner_sum_t *out, size_t cap)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c)
        return -1;
    const cold_device_t *v;
    size_t nv = cold_view_list(g->c, &v), n = 0;
    int worst[KVM_COLD_VIEW_OWNERS_MAX] = {0};
    for (size_t i = 0; i < nv; i++) {
        size_t j = 0;
        while (j < n && !kvm_id128_equal(&out[j].owner, &v[i].owner))
            j++;
        if (j == n) {
            if (n == cap || n == KVM_COLD_VIEW_OWNERS_MAX)
                continue;
            out[n++] = (kvm_cold_owner_sum_t){.owner = v[i].owner};
        }
        out[j].devices++;
        out[j].capacity += v[i].capacity;
        out[j].used += v[i].used;
        out[j].reserved += v[i].reserved;
        if ((int)v[i].health > worst[j]) {
            worst[j] = (int)v[i].health;
            out[j].health = cold_dev_health_name(v[i].health);
        }
    }
    return (int)n;
}

/* ---- the cold I/O worker ------------------------------------------------------------------- */

static void drain_done(void *arg);

static void *worker_main(void *arg)
{
    struct kvm_cold *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->q_head && !g->stop)
            pthread_cond_wait(&g->cv, &g->mu);
        struct xnode *n = g->q_head;
        if (!n)
            break; /* stop and nothing queued */
        g->q_head = n->next;
        if (!g->q_head)
            g->q_tail = NULL;
        pthread_mutex_unlock(&g->mu);
        n->io->run(n->io); /* backend calls block here, never on the loop */
        pthread_mutex_lock(&g->mu);
        n->next = NULL;
        if (g->d_tail)
            g->d_tail->next = n;
        else
            g->d_head = n;
        g->d_tail = n;
        if (!g->drain_posted && !g->stop) {
            g->drain_posted = true;
            if (env_post(g->rt->env, drain_done, g) != 0)
                g->drain_posted = false; /* the tick drains it */
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* [loop] done() of every finished job. */
static void drain_jobs(struct kvm_cold *g)
{
    pthread_mutex_lock(&g->mu);
    struct xnode *n = g->d_head;
    g->d_head = g->d_tail = NULL;
    g->drain_posted = false;
    pthread_mutex_unlock(&g->mu);
    while (n) {
        struct xnode *next = n->next;
        cold_exec_t *io = n->io;
        free(n);
        io->done(io);
        n = next;
    }
}

/* [loop] The worker's posted drain. A post still queued when kvm_cold_close ran holds a
 * reference on g (taken there), released here: the close drained every job already. */
static void drain_done(void *arg)
{
    struct kvm_cold *g = arg;
    drain_jobs(g);
    if (g->closed)
        g_unref(g);
}

/* Queues io for the worker; false (nothing queued) without a worker or memory. */
static bool exec_enqueue(struct kvm_cold *g, cold_exec_t *io)
{
    struct xnode *n = malloc(sizeof(*n));
    pthread_mutex_lock(&g->mu);
    bool queued = n && g->th_started && !g->stop;
    if (queued) {
        n->io = io;
        n->next = NULL;
        if (g->q_tail)
            g->q_tail->next = n;
        else
            g->q_head = n;
        g->q_tail = n;
        pthread_cond_signal(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (!queued)
        free(n);
    return queued;
}

/* The core's jobs: on the worker, or inline when it cannot take them. */
static void exec_submit(void *ctx, cold_exec_t *io)
{
    if (!exec_enqueue(ctx, io)) {
        io->run(io);
        io->done(io);
    }
}

/* ---- background maintenance (ExtentStore cleaning) ---------------------------------------- */

struct clean_job {
    cold_exec_t io; /* first: the worker hands back &io */
    struct kvm_cold *g;
    struct gdev *d;
    uint64_t budget;
    int64_t rc;            /* maintain()'s answer: work done, or a negative code */
    uint64_t file0, file1; /* the backend's file bytes before and after */
    cold_backend_err_t err;
};

/* [worker] */
static void clean_run(cold_exec_t *io)
{
    struct clean_job *j = (struct clean_job *)io;
    const cold_backend_t *be = &j->d->be;
    cold_backend_stat_t st;
    j->file0 = be->ops->stat(be->be, &st) == 0 ? st.file_bytes : 0;
    j->rc = be->ops->maintain(be->be, j->budget, &j->err);
    j->file1 = be->ops->stat(be->be, &st) == 0 ? st.file_bytes : j->file0;
}

/* [loop] */
static void clean_done(cold_exec_t *io)
{
    struct clean_job *j = (struct clean_job *)io;
    struct kvm_cold *g = j->g;
    kvm_rt_t *rt = g->rt;
    j->d->cleaning = false;
    obs_count(rt->metrics, cold_clean_runs_total, j->rc < 0 ? OBS_OUTCOME_ERROR : OBS_OUTCOME_OK,
              OBS_NONE, 1);
    if (j->rc >= 0 && j->file1 < j->file0)
        obs_count(rt->metrics, cold_cleaned_bytes_total, OBS_NONE, OBS_NONE, j->file0 - j->file1);
    free(
        j); /* (device errors mark the record DEGRADED: cold_health.h, kvmesh_cold_device_health) */
}

/* [loop] From the tick: per device, one maintain() job at a time, only on the worker. */
static void clean_submit(struct kvm_cold *g)
{
    uint64_t budget = g->rt->cfg.cold_clean_bytes_per_tick;
    for (uint32_t i = 0; i < g->ndev; i++) {
        struct gdev *d = &g->devs[i];
        if (d->cleaning || budget == 0 || !d->be_open || !d->be.ops->maintain)
            continue;
        struct clean_job *j = calloc(1, sizeof(*j));
        if (!j)
            return; /* the next tick tries again */
        *j = (struct clean_job){
            .io = {.run = clean_run, .done = clean_done}, .g = g, .d = d, .budget = budget};
        if (!exec_enqueue(g, &j->io)) {
            free(j);
            return;
        }
        d->cleaning = true;
    }
}

/* ---- route callbacks ------------------------------------------------------------------------ */

enum rop_kind { ROP_LOOKUP, ROP_READ_HOT, ROP_MATERIALIZE, ROP_EVICT };

struct rop {
    struct kvm_cold *g;
    enum rop_kind kind;
    cold_lookup_cb lcb;
    cold_rc_cb rcb;
    void *arg;
    kvm_op_id_t content_op;
    void *buf;
    uint64_t length;
    kvm_route_version_t expected;
    kvm_cold_backing_t mat;
    cold_evict_expect_t e;
};

/* Route calls always answer the core (it holds its memory until they do), also after
 * cold_close: the route service's close cancels them with KVMESH_ECANCELED. */
static void rop_free(struct rop *o)
{
    struct kvm_cold *g = o->g;
    free(o);
    g_unref(g);
}

static void rop_rc(struct rop *o, int rc)
{
    cold_rc_cb cb = o->rcb;
    void *arg = o->arg;
    rop_free(o);
    cb(arg, rc);
}

static void obs_of(const kvm_route_t *r, cold_route_obs_t *obs)
{
    memset(obs, 0, sizeof(*obs));
    if (!r)
        return;
    obs->found = true;
    obs->tombstone = kvm_route_is_tombstone(r);
    obs->version = r->version;
    obs->content_op = r->content_op;
    obs->cold = r->cold;
    obs->n_replicas = r->n_replicas;
    memcpy(obs->replicas, r->replicas, sizeof(r->replicas[0]) * r->n_replicas);
}

/* Copies a local hot replica of r into buf and checks its checksum. */
static int read_local(kvm_rt_t *rt, const kvm_route_t *r, void *buf, uint64_t len)
{
    int rc = KVMESH_EUNAVAILABLE; /* a replica elsewhere only: not readable from here */
    uint32_t dead = 0;            /* replicas of this runtime id in a segment it no longer has */
    for (uint32_t i = 0; i < r->n_replicas; i++) {
        const kvm_hot_replica_t *rep = &r->replicas[i];
        if (!kvm_id128_equal(&rep->owner, &rt->self.id))
            continue;
        bool seg_here = false;
        for (uint32_t s = 0; s < rt->n_segs; s++)
            seg_here |= rt->segs[s].seg && rt->segs[s].seg->id == rep->segment;
        dead += !seg_here;
        for (uint32_t s = 0; s < rt->n_segs; s++) {
            if (!rt->segs[s].seg || rt->segs[s].seg->id != rep->segment)
                continue;
            uint8_t *p;
            struct seg *pin;
            enum seg_reason why;
            rc = seg_check(rt->reg, rep->segment, rep->offset, len, SEG_READ,
                           rt->segs[s].read_token, &p, &pin, &why);
            if (rc)
                break;
            memcpy(buf, p, len);
            seg_unpin(rt->reg, pin);
            if (kvm_checksum(buf, len) == r->checksum)
                return 0;
            rc = KVMESH_ECHECKSUM;
        }
    }
    /* Every replica was this runtime's, in segments of an earlier incarnation (a restart after
     * a crash): the hot copy is gone for good, the offload can never read it. */
    if (rc == KVMESH_EUNAVAILABLE && r->n_replicas > 0 && dead == r->n_replicas)
        return kvm_errf(KVMESH_ENOENT, "the object's only hot copies were in this runtime's "
                                       "DRAM before it restarted; it cannot be offloaded");
    return rc;
}

static void cas_done(void *arg, int rc, const kvm_route_t *r)
{
    (void)r;
    struct rop *o = arg;
    rop_rc(o, rc == 0 ? 0 : rc == KVMESH_ECONFLICT ? KVMESH_ECONFLICT : rc);
}

static bool health_exec(void *ctx, cold_exec_t *job);

static void hot_remote_done(void *arg, int rc)
{
    rop_rc(arg, rc);
}

/* read_hot: a local replica; none readable here (e.g. this runtime restarted after a crash and
 * its DRAM copy is gone) but another runtime holds one: that one, through the transport on the
 * worker (cold_resume.h). */
static void read_hot(struct rop *o, const kvm_route_t *r)
{
    kvm_rt_t *rt = o->g->rt;
    int rc = read_local(rt, r, o->buf, o->length);
    if (rc == KVMESH_EUNAVAILABLE && kvm_cold_read_hot_remote(rt, r, o->buf, o->length, health_exec,
                                                              o->g, hot_remote_done, o) == 0)
        return;
    rop_rc(o, rc);
}

static void rop_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct rop *o = arg;
    kvm_rt_t *rt = o->g->rt;
    if (rc == KVMESH_ENOENT) {
        rc = 0;
        r = NULL;
    }
    if (o->kind == ROP_LOOKUP) {
        cold_route_obs_t obs;
        obs_of(rc == 0 ? r : NULL, &obs);
        cold_lookup_cb cb = o->lcb;
        void *a = o->arg;
        rop_free(o);
        cb(a, rc, rc == 0 ? &obs : NULL);
        return;
    }
    if (rc == 0 && (o->g->closed || !rt->route))
        rc = KVMESH_ECANCELED;
    if (rc) {
        rop_rc(o, rc);
        return;
    }
    bool live = r && !kvm_route_is_tombstone(r);
    if (o->kind == ROP_READ_HOT) {
        if (!live || !kvm_op_id_equal(&r->content_op, &o->content_op) || r->length != o->length) {
            rop_rc(o, KVMESH_ENOENT);
            return;
        }
        read_hot(o, r);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    if (o->kind == ROP_MATERIALIZE) {
        if (!live || !kvm_route_version_equal(&r->version, &o->expected) ||
            r->cold.kind != KVM_COLD_PENDING_OFFLOAD ||
            !kvm_op_id_equal(&r->cold.cold_op, &o->mat.cold_op) ||
            !kvm_op_id_equal(&r->content_op, &o->mat.content_op)) {
            rop_rc(o, KVMESH_ECONFLICT);
            return;
        }
        if (kvm_route_copy(&next, r) != 0) {
            rop_rc(o, KVMESH_ENOMEM);
            return;
        }
        next.cold = o->mat;
    } else { /* ROP_EVICT */
        const cold_evict_expect_t *e = &o->e;
        if (!live || !kvm_route_version_equal(&r->version, &e->version) ||
            !kvm_op_id_equal(&r->content_op, &e->content_op) ||
            r->cold.kind != KVM_COLD_MATERIALIZED ||
            !kvm_op_id_equal(&r->cold.cold_op, &e->cold_op) ||
            kvm_cold_backing_fingerprint(&r->cold) != e->locator_fp ||
            kvm_route_find_replica(r, &e->replica) < 0) {
            rop_rc(o, KVMESH_ECONFLICT);
            return;
        }
        if (kvm_route_copy(&next, r) != 0) {
            rop_rc(o, KVMESH_ENOMEM);
            return;
        }
        kvm_route_remove_replica(&next, &e->replica);
    }
    int crc = route_cas(rt->route, &r->version, &next, cas_done, o);
    kvm_route_free(&next);
    if (crc)
        rop_rc(o, crc);
}

static struct rop *rop_new(struct kvm_cold *g, enum rop_kind k, void *arg)
{
    struct rop *o = calloc(1, sizeof(*o));
    if (o) {
        o->g = g;
        o->kind = k;
        o->arg = arg;
        g->refs++;
    }
    return o;
}

static void rop_start(struct rop *o, const kvm_ident_t *id)
{
    kvm_rt_t *rt = o->g->rt;
    int rc = rt->route ? route_lookup(rt->route, id, rop_looked_up, o) : KVMESH_ECANCELED;
    if (rc == 0)
        return;
    if (o->kind == ROP_LOOKUP) {
        cold_lookup_cb cb = o->lcb;
        void *a = o->arg;
        rop_free(o);
        cb(a, rc, NULL);
    } else {
        rop_rc(o, rc);
    }
}

static void r_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    struct rop *o = rop_new(ctx, ROP_LOOKUP, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM, NULL);
        return;
    }
    o->lcb = cb;
    rop_start(o, id);
}

static void r_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *content_op, void *buf,
                       uint64_t length, cold_rc_cb cb, void *arg)
{
    struct rop *o = rop_new(ctx, ROP_READ_HOT, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    o->rcb = cb;
    o->content_op = *content_op;
    o->buf = buf;
    o->length = length;
    rop_start(o, id);
}

static void r_materialize(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                          const kvm_cold_backing_t *mat, cold_rc_cb cb, void *arg)
{
    struct rop *o = rop_new(ctx, ROP_MATERIALIZE, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    o->rcb = cb;
    o->expected = *expected;
    o->mat = *mat;
    rop_start(o, id);
}

static void r_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                    void *arg)
{
    struct rop *o = rop_new(ctx, ROP_EVICT, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    o->rcb = cb;
    o->e = *e;
    rop_start(o, id);
}

/* ---- re-promotion after a restore (best effort) ------------------------------------------- */

/* promote(): a verified restore of a cold-only route gets a normal hot replica here again when
 * DRAM has room below evict_low_watermark (never evicting others for it): reserve a slot, copy
 * the verified bytes (the core keeps buf until cb), look the route up, CAS the replica in at the
 * restored version while the route is still cold-only with the same content, then commit the
 * slot; any refusal releases the slot. cb always runs (the core holds its memory until then). */
struct promo {
    struct kvm_cold *g;
    kvm_ident_t ident; /* owned */
    kvm_route_version_t expected;
    const uint8_t *buf; /* the core's restore buffer, or the staging slot's bytes (pinned) */
    uint64_t len, seg, off;
    bool reserved;
    bool stg_pinned; /* buf is staging slot stg_slot, held by a promotion pin until promo_end */
    uint32_t stg_slot;
    cold_rc_cb cb;
    void *arg;
};

static void stg_reap(struct kvm_cold *g, uint32_t slot);

static void promo_end(struct promo *p, int rc)
{
    struct kvm_cold *g = p->g;
    if (p->reserved)
        g->owner.release(g->rt, p->seg, p->off);
    if (p->stg_pinned && g->stg) { /* the slot may now recycle (its reader ACKed or expired) */
        if (rc == 0)
            g->stg_promotions++;
        staging_promote_unpin(g->stg, p->stg_slot);
        stg_reap(g, p->stg_slot);
    }
    cold_rc_cb cb = p->cb;
    void *arg = p->arg;
    kvm_ident_free(&p->ident);
    free(p);
    cb(arg, rc);
    g_unref(g);
}

static void promo_cased(void *arg, int rc, const kvm_route_t *now)
{
    (void)now;
    struct promo *p = arg;
    if (rc == 0) {
        p->g->owner.commit(p->g->rt, p->seg, p->off);
        p->reserved = false;
    }
    promo_end(p, rc);
}

static void promo_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct promo *p = arg;
    kvm_rt_t *rt = p->g->rt;
    if (rc == 0 &&
        (!r || kvm_route_is_tombstone(r) || !kvm_route_version_equal(&r->version, &p->expected) ||
         r->cold.kind != KVM_COLD_MATERIALIZED || r->n_replicas != 0 || r->length != p->len ||
         r->n_replicas >= KVM_MAX_REPLICAS))
        rc = KVMESH_ECONFLICT; /* the route moved on: the promotion is dropped */
    if (rc) {
        promo_end(p, rc);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    rc = kvm_route_copy(&next, r);
    if (rc == 0) {
        next.replicas[next.n_replicas++] = (kvm_hot_replica_t){.owner = rt->self.id,
                                                               .segment = p->seg,
                                                               .offset = p->off,
                                                               .length = p->len,
                                                               .checksum = r->checksum};
        rc = route_cas(rt->route, &r->version, &next, promo_cased, p);
    }
    kvm_route_free(&next);
    if (rc)
        promo_end(p, rc);
}

static void promo_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                           uint64_t token)
{
    (void)err;
    struct promo *p = arg;
    kvm_rt_t *rt = p->g->rt;
    if (rc) {
        promo_end(p, rc);
        return;
    }
    p->seg = seg;
    p->off = off;
    p->reserved = true;
    if (p->stg_pinned && (p->g->closed || !p->g->stg)) { /* the staging segment is gone */
        promo_end(p, KVMESH_ECANCELED);
        return;
    }
    uint8_t *dst;
    struct seg *pin;
    enum seg_reason why;
    rc = seg_check(rt->reg, seg, off, p->len, SEG_WRITE, token, &dst, &pin, &why);
    if (rc == 0) {
        memcpy(dst, p->buf, p->len);
        seg_unpin(rt->reg, pin);
        rc = rt->route ? route_lookup(rt->route, &p->ident, promo_looked_up, p) : KVMESH_ECLOSED;
    }
    if (rc)
        promo_end(p, rc);
}

static void r_promote(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                      const void *buf, uint64_t length, cold_rc_cb cb, void *arg)
{
    struct kvm_cold *g = ctx;
    kvm_rt_t *rt = g->rt;
    uint64_t room = (uint64_t)((double)rt->capacity * rt->cfg.evict_low_watermark);
    if (g->closed || !rt->route || rt->capacity == 0 || rt->state != KVM_MS_ACTIVE ||
        rt->used + rt->stats.reserved_bytes + length > room) {
        cb(arg, KVMESH_EAGAIN); /* no room without evicting: stays cold-only */
        return;
    }
    struct promo *p = calloc(1, sizeof(*p));
    if (!p || kvm_ident_copy(&p->ident, id) != 0) {
        free(p);
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    p->g = g;
    p->expected = *expected;
    p->buf = buf;
    p->len = length;
    p->cb = cb;
    p->arg = arg;
    /* a restore this owner just staged for a remote reader: promote from the slot, holding a
     * promotion pin, so the slot's expiry or the reader's ACK waits for the copy */
    if (g->stg && g->stg_last.set && g->stg_last.ident_hash == id->hash &&
        g->stg_last.len == length && staging_promote_pin(g->stg, g->stg_last.token) == 0) {
        p->stg_pinned = true;
        p->stg_slot = g->stg_last.slot;
        p->buf = staging_buf(g->stg, p->stg_slot, NULL, NULL);
    }
    g->stg_last.set = false;
    g->refs++;
    g->owner.reserve(rt, id, length, rt->cfg.request_timeout_ms, promo_reserved, p);
}

/* ---- timers, counters ----------------------------------------------------------------------- */

/* The per-device series (cold_metrics.h) of device i, whose view record is d (NULL: missing). */
static void export_device(struct kvm_cold *g, uint32_t i, const cold_device_t *d)
{
    cold_dev_stats_t st;
    kvm_cold_health_stats_t hs = {0};
    (void)cold_get_device_stats(g->c, &g->devs[i].id, &st); /* ENOENT: zeroed */
    if (g->devs[i].health)
        kvm_cold_health_get_stats(g->devs[i].health, &hs);
    kvm_cold_metrics_device(g->rt->metrics, i, d, &st, hs.errors, &g->devs[i].exported);
}

static void export_stats(struct kvm_cold *g)
{
    kvm_rt_t *rt = g->rt;
    cold_stats_t s;
    cold_get_stats(g->c, &s);
    if (s.offloads_ok > g->exported.offloads_ok)
        obs_count(rt->metrics, cold_offloads_total, OBS_OUTCOME_OK, OBS_NONE,
                  s.offloads_ok - g->exported.offloads_ok);
    if (s.offload_parked > g->exported.offload_parked)
        obs_count(rt->metrics, cold_offloads_total, OBS_OUTCOME_ERROR, OBS_NONE,
                  s.offload_parked - g->exported.offload_parked);
    if (s.reclaims_done > g->exported.reclaims_done)
        obs_count(rt->metrics, cold_reclaims_total, OBS_OUTCOME_OK, OBS_NONE,
                  s.reclaims_done - g->exported.reclaims_done);
    if (s.reclaims_deferred > g->exported.reclaims_deferred)
        obs_count(rt->metrics, cold_reclaims_total, OBS_OUTCOME_ERROR, OBS_NONE,
                  s.reclaims_deferred - g->exported.reclaims_deferred);
#define EXPORT_DELTA(field, family)                                                                \
    if (s.field > g->exported.field)                                                               \
        obs_count(rt->metrics, family, OBS_NONE, OBS_NONE, s.field - g->exported.field);
    EXPORT_DELTA(offloads_released, cold_offloads_released_total)
    EXPORT_DELTA(offload_retries, cold_offload_retries_total)
    EXPORT_DELTA(rate_waits, cold_offload_rate_waits_total)
    EXPORT_DELTA(gate_changes, cold_offload_gate_changes_total)
    EXPORT_DELTA(urgent_jobs, cold_offload_urgent_jobs_total)
#undef EXPORT_DELTA
    g->exported = s;
    obs_gauge_set(rt->metrics, cold_offload_queue_depth, OBS_NONE, OBS_NONE,
                  (int64_t)cold_offload_pending(g->c));
    /* Several devices: the byte gauges are their sums, the health gauge the worst record (0
     * when one is missing from the view). */
    uint64_t reserved = 0, used = 0, capacity = 0;
    int64_t health = 0;
    bool all = g->ndev > 0;
    for (uint32_t i = 0; i < g->ndev; i++) {
        const cold_device_t *d = cold_view_find(g->c, &g->devs[i].id);
        export_device(g, i, d);
        if (!d) {
            all = false;
            continue;
        }
        reserved += d->reserved;
        used += d->used;
        capacity += d->capacity;
        if ((int64_t)d->health > health)
            health = (int64_t)d->health;
    }
    obs_gauge_set(rt->metrics, cold_device_health, OBS_NONE, OBS_NONE, all ? health : 0);
    if (capacity) {
        obs_gauge_set(rt->metrics, cold_device_reserved_bytes, OBS_NONE, OBS_NONE,
                      (int64_t)reserved);
        obs_gauge_set(rt->metrics, segment_used_bytes, OBS_TIER_COLD, OBS_NONE,
                      (int64_t)(used + reserved));
        obs_gauge_set(rt->metrics, segment_capacity_bytes, OBS_TIER_COLD, OBS_NONE,
                      (int64_t)capacity);
    }
}

static void refreshed(void *arg, int rc)
{
    (void)rc; /* the view stays as it was; the next tick tries again */
    struct kvm_cold *g = arg;
    g->refreshing = false;
    if (g->c)
        export_stats(g);
}

static void reconciled(void *arg, const cold_recon_report_t *r)
{
    (void)r;
    struct kvm_cold *g = arg;
    g->reconciling = false;
}

/* The DRAM used fraction, for the watermark gate (cold_config_t.high_watermark). */
static void report_pressure(struct kvm_cold *g)
{
    kvm_rt_t *rt = g->rt;
    if (g->c && rt->capacity)
        cold_set_pressure(g->c, (double)rt->used / (double)rt->capacity);
}
static void stg_expire(struct kvm_cold *g);

static void durable_expire(struct kvm_cold *g);

/* The health probe's worker (cold_health.h): the cold I/O worker, never inline on the loop. */
static bool health_exec(void *ctx, cold_exec_t *job)
{
    return exec_enqueue(ctx, job);
}

/* Tests only (kvm_cold_test_skip_offload): published PendingOffloads on this process's devices
 * are not queued, as if the process died right after the route CAS. */
static atomic_bool skip_offload;

void kvm_cold_test_skip_offload(bool on)
{
    atomic_store(&skip_offload, on);
}

/* Tests only (kvm_cold_test_freeze_view): the tick does not refresh the device view. */
static atomic_bool freeze_view;

void kvm_cold_test_freeze_view(bool on)
{
    atomic_store(&freeze_view, on);
}

static void tick(void *arg)
{
    struct kvm_cold *g = arg;
    g->tick_timer = 0;
    if (g->closed)
        return;
    drain_jobs(g); /* backstop when a post failed */
    report_pressure(g);
    if (!g->refreshing && !atomic_load(&freeze_view) && cold_view_refresh(g->c, refreshed, g) == 0)
        g->refreshing = true;
    uint64_t now = env_clock_mono_ms();
    if (!g->reconciling && now - g->last_recon_ms >= COLD_GLUE_RECON_MS) {
        g->last_recon_ms = now;
        if (cold_recon_pass(g->c, COLD_GLUE_RECON_PAGE, reconciled, g) == 0)
            g->reconciling = true;
    }
    stg_expire(g);
    durable_expire(g);
    for (uint32_t i = 0; i < g->ndev; i++)
        kvm_cold_health_tick(g->devs[i].health, g->c, &g->devs[i].id, now, health_exec, g);
    clean_submit(g);
    g->tick_timer = env_timer_start(g->rt->env, COLD_GLUE_TICK_MS * 1000000ull, tick, g);
}

/* ---- remote restore: the owner side ---------------------------------------------------------- */

/* The staging pool (src/cold/staging.h) lives in one segment of this runtime's registry, so the
 * transports serve reads of it under a per-slot grant; g->stg_grant[slot] is the grant of the
 * slot's current use (0 = none), revoked when the slot is recycled or fenced. */

enum srv_stage { SRV_LOOKUP, SRV_RESTORE };

struct srv_read {
    struct kvm_cold *g;
    rpc_reply *reply;
    kvm_ident_t ident;
    staging_expect_t want;
    staging_handle_t h;
    enum srv_stage stage;
    bool orphan;                  /* dropped at close while its lookup was in flight */
    struct srv_read *next, *prev; /* g->serving */
};

static uint64_t version_u64(const kvm_route_version_t *v)
{
    return kvm_hash_seeded(v, sizeof(*v), 0x76657273u);
}

static uint64_t namespace_u64(const kvm_ident_t *id)
{
    size_t n = id->enc_len > id->key_len ? id->enc_len - id->key_len : 0;
    return kvm_hash_seeded(id->enc, n, 0x6e73u);
}

static void srv_unlink(struct srv_read *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        s->g->serving = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

static void srv_free(struct srv_read *s)
{
    if (!s->orphan)
        srv_unlink(s);
    kvm_ident_free(&s->ident);
    free(s);
}

static void srv_reply(rpc_reply *reply, int rc, const char *err, const uint8_t *body, size_t blen)
{
    struct rpc_msg m = {.type = STORE_RPC_COLD_READ, .body = body, .body_len = blen};
    if (rpc_reply_send(reply, rc, err, &m, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply); /* the caller times out and reports it */
}

/* [loop] A slot whose pins all went: its grant goes with it. */
static void stg_reap(struct kvm_cold *g, uint32_t slot)
{
    if (slot < g->stg_slots && g->stg_grant[slot] &&
        staging_state_of(g->stg, slot) == STAGING_FREE) {
        seg_revoke(g->rt->reg, g->stg_grant[slot]);
        g->stg_grant[slot] = 0;
    }
}

/* [loop] Expiry: fence the tokens past their deadline, revoke their grants (no new transfer
 * starts), then the transport is terminal for the pool. A read already started by a tcp I/O
 * thread may still copy from the slot after it is recycled; the reader's checksum check then
 * refuses the bytes (they are never handed out). */
/* [loop] The pool's counters as metrics (kvmesh_cold_staging_*). */
static void stg_export(struct kvm_cold *g)
{
    kvm_rt_t *rt = g->rt;
    staging_stats_t st, *e = &g->stg_exported;
    staging_get_stats(g->stg, &st);
    obs_count(rt->metrics, cold_staging_acquired_total, OBS_NONE, OBS_NONE,
              st.acquired - e->acquired);
    obs_count(rt->metrics, cold_staging_backpressure_total, OBS_NONE, OBS_NONE,
              st.backpressure - e->backpressure);
    obs_count(rt->metrics, cold_staging_expiries_total, OBS_NONE, OBS_NONE,
              st.expiries - e->expiries);
    obs_count(rt->metrics, cold_staging_late_total, OBS_NONE, OBS_NONE,
              st.late_completions + st.late_acks - e->late_completions - e->late_acks);
    obs_count(rt->metrics, cold_staging_promotions_total, OBS_NONE, OBS_NONE,
              g->stg_promotions - g->stg_promotions_exported);
    g->stg_promotions_exported = g->stg_promotions;
    obs_gauge_set(rt->metrics, cold_staging_slots, OBS_NONE, OBS_NONE, (int64_t)st.slots_cap);
    obs_gauge_set(rt->metrics, cold_staging_slots_used, OBS_NONE, OBS_NONE, (int64_t)st.slots_used);
    obs_gauge_set(rt->metrics, cold_staging_bytes_used, OBS_NONE, OBS_NONE, (int64_t)st.bytes_used);
    *e = st;
}

static void stg_expire(struct kvm_cold *g)
{
    if (!g->stg)
        return;
    staging_expire(g->stg, env_clock_mono_ms(), g->stg_slots);
    uint32_t pend[64];
    uint32_t k;
    while ((k = staging_fenced_pending(g->stg, pend, 64)) > 0)
        for (uint32_t i = 0; i < k; i++) {
            if (g->stg_grant[pend[i]])
                seg_revoke(g->rt->reg, g->stg_grant[pend[i]]);
            g->stg_grant[pend[i]] = 0;
            staging_transfer_terminal(g->stg, pend[i]);
        }
    stg_export(g);
}

static void srv_restored(void *arg, int rc, const void *buf, uint64_t len)
{
    struct srv_read *s = arg; /* (kvmesh_cold_restores_total is counted by the reader) */
    struct kvm_cold *g = s->g;
    if (rc == 0 && len != s->want.length)
        rc = KVMESH_ECHECKSUM;
    if (rc) {
        staging_abort(g->stg, s->h.slot);
        srv_reply(s->reply, rc, kvmesh_strerror(rc), NULL, 0);
        srv_free(s);
        return;
    }
    uint64_t off;
    uint8_t *b = staging_buf(g->stg, s->h.slot, &off, NULL);
    memcpy(b, buf, len);
    uint64_t ttl = g->rt->cfg.cold_staging_ttl_ms;
    rc = staging_ready(g->stg, &s->h, kvm_checksum(b, len), env_clock_mono_ms() + ttl);
    struct seg_grant gr = {0};
    if (!rc) {
        rc = seg_grant(g->rt->reg, g->stg_seg->id, off, len ? len : 1, SEG_READ, ttl * 1000000ull,
                       &gr);
        if (rc) { /* no grant: nobody can read it; the pins go now */
            bool a;
            staging_transfer_done(g->stg, s->h.token, &a);
            staging_ack(g->stg, s->h.token, &a);
        } else {
            g->stg_grant[s->h.slot] = gr.token;
        }
    }
    if (rc) {
        srv_reply(s->reply, rc, kvmesh_last_error(), NULL, 0);
        srv_free(s);
        return;
    }
    uint8_t body[48];
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u8(&w, STORE_COLD_READ_VERSION);
    kvm_wr_u64le(&w, gr.seg_id);
    kvm_wr_u64le(&w, gr.offset);
    kvm_wr_u64le(&w, len);
    kvm_wr_u64le(&w, gr.token);
    kvm_wr_u64le(&w, s->h.token);
    struct rpc_msg m = {.type = STORE_RPC_COLD_READ, .body = body, .body_len = w.len};
    int src = rpc_reply_send(s->reply, 0, "", &m, NULL, NULL);
    if (src) { /* the reader never learns the token: release its pins now */
        if (src == KVMESH_EAGAIN)
            rpc_reply_drop(s->reply);
        bool a;
        staging_transfer_done(g->stg, s->h.token, &a);
        staging_ack(g->stg, s->h.token, &a);
        stg_reap(g, s->h.slot);
    } else {
        g->stg_last.set = true;
        g->stg_last.ident_hash = s->ident.hash;
        g->stg_last.token = s->h.token;
        g->stg_last.len = len;
        g->stg_last.slot = s->h.slot;
    }
    srv_free(s);
}

static void srv_looked_up(void *arg, int rc, const cold_route_obs_t *obs)
{
    struct srv_read *s = arg;
    if (s->orphan) { /* the runtime closed meanwhile (g may be gone) */
        srv_free(s);
        return;
    }
    struct kvm_cold *g = s->g;
    if (!rc && g->closed)
        rc = KVMESH_ECANCELED;
    if (!rc && (!obs->found || obs->tombstone || obs->cold.kind != KVM_COLD_MATERIALIZED))
        rc = kvm_errf(KVMESH_ECONFLICT, "cold read: the route has no materialized cold copy "
                                        "now; look it up again");
    if (!rc && !kvm_id128_equal(&obs->cold.owner, &g->rt->self.id))
        rc = kvm_errf(KVMESH_ECONFLICT, "cold read: this runtime does not own the object's cold "
                                        "device");
    if (!rc) {
        staging_expect_t have = {.namespace_hash = namespace_u64(&s->ident),
                                 .owner = obs->cold.owner,
                                 .route_version = version_u64(&obs->version),
                                 .locator_fp = kvm_cold_backing_fingerprint(&obs->cold),
                                 .length = obs->cold.u.mat.length,
                                 .checksum = obs->cold.u.mat.checksum};
        rc = staging_acquire(g->stg, &s->want, &have, &s->h);
    }
    if (!rc) {
        s->stage = SRV_RESTORE;
        rc = cold_restore(g->c, &s->ident, srv_restored, s);
        if (rc)
            staging_abort(g->stg, s->h.slot);
    }
    if (rc) {
        srv_reply(s->reply, rc, kvmesh_last_error(), NULL, 0);
        srv_free(s);
    }
}

/* Request body: ver u8 | route version hash u64 | locator fingerprint u64 | length u64 |
 * checksum u64 | namespace hash u64 | cold owner (16) | ident (wire). */
static void on_cold_read(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || !g->stg || g->open_cb || g->closed) {
        srv_reply(reply, KVMESH_EUNAVAILABLE, "the cold tier of this runtime is not open", NULL, 0);
        return;
    }
    struct srv_read *s = calloc(1, sizeof(*s));
    if (!s) {
        srv_reply(reply, KVMESH_ENOMEM, "out of memory", NULL, 0);
        return;
    }
    kvm_rd_t r;
    kvm_rd_init(&r, req->body, req->body_len);
    uint8_t ver = kvm_rd_u8(&r);
    if (kvm_rd_ok(&r) && ver != STORE_COLD_READ_VERSION) { /* a v1 reader sends the ident only */
        free(s);
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "cold read: the reader's request is not cold read version %u (it starts with "
                 "%u; version 1 readers send the identity only): the reader runs an older "
                 "release than this owner; upgrade it to read this owner's cold-only objects",
                 (unsigned)STORE_COLD_READ_VERSION, (unsigned)ver);
        srv_reply(reply, KVMESH_EPROTO, msg, NULL, 0);
        return;
    }
    int rc = 0;
    s->want.route_version = kvm_rd_u64le(&r);
    s->want.locator_fp = kvm_rd_u64le(&r);
    s->want.length = kvm_rd_u64le(&r);
    s->want.checksum = kvm_rd_u64le(&r);
    s->want.namespace_hash = kvm_rd_u64le(&r);
    kvm_rd_copy(&r, s->want.owner.b, sizeof(s->want.owner.b));
    size_t left = kvm_rd_remaining(&r);
    const uint8_t *ib = kvm_rd_bytes(&r, left);
    if (rc || !kvm_rd_ok(&r) || !ib || wire_ident_decode(ib, left, &s->ident) != 0) {
        free(s);
        srv_reply(reply, KVMESH_EPROTO, "cold read: malformed request", NULL, 0);
        return;
    }
    s->g = g;
    s->reply = reply;
    s->next = g->serving;
    if (s->next)
        s->next->prev = s;
    g->serving = s;
    r_lookup(g, &s->ident, srv_looked_up, s);
}

/* Notification body: ver u8 | transfer token u64. The reader's transfer reached a terminal
 * state and it is done with the slot: both pins go (late or repeated: ignored, counted). */
static void on_cold_ack(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    kvm_rt_t *rt = arg;
    struct kvm_cold *g = dev_cold(rt);
    kvm_rd_t r;
    kvm_rd_init(&r, req->body, req->body_len);
    uint8_t ver = kvm_rd_u8(&r);
    uint64_t token = kvm_rd_u64le(&r);
    if (!g || !g->stg || g->closed || ver != STORE_COLD_READ_VERSION || !kvm_rd_ok(&r))
        return;
    bool a;
    if (staging_transfer_done(g->stg, token, &a) == 0 && staging_ack(g->stg, token, &a) == 0)
        stg_reap(g, (uint32_t)(token & 0xffffu));
}

/* The staging segment and pool: cold_staging_bytes of registered memory, cold_staging_slots. */
static int stg_open(struct kvm_cold *g)
{
    const struct kvm_store_config *cfg = &g->rt->cfg;
    g->stg_slots = cfg->cold_staging_slots;
    int rc = seg_create(g->rt->reg, cfg->cold_staging_bytes, 0, &g->stg_seg);
    if (rc)
        return kvm_errf(rc,
                        "cannot create the %" PRIu64 "-byte staging segment (%s); lower "
                        "cold_staging_bytes",
                        cfg->cold_staging_bytes, kvmesh_strerror(rc));
    g->stg_grant = calloc(g->stg_slots, sizeof(*g->stg_grant));
    if (!g->stg_grant)
        return KVMESH_ENOMEM;
    rc = staging_new(&g->stg, g->stg_seg->base, g->stg_seg->size, g->stg_slots);
    if (!rc)
        stg_export(g);
    return rc;
}

static void stg_close(struct kvm_cold *g)
{
    for (uint32_t i = 0; g->stg_grant && i < g->stg_slots; i++)
        if (g->stg_grant[i])
            seg_revoke(g->rt->reg, g->stg_grant[i]);
    free(g->stg_grant);
    g->stg_grant = NULL;
    staging_free(g->stg, false); /* slots still staged: their readers' ACKs find nothing */
    g->stg = NULL;
    if (g->stg_seg)
        seg_destroy(g->rt->reg, g->stg_seg->id);
    g->stg_seg = NULL;
}

/* ---- batch restore: the owner side (STORE_RPC_COLD_READ_BATCH) ----------------------------- */

/* One request of a reader's (owner, device) group: every item is looked up exactly and validated
 * like a single COLD_READ; the items that get a staging slot are read from the device in one
 * cold_restore_batch, straight into their slots; then one reply answers every item (staged, or
 * its own error; KVMESH_EAGAIN for the items the pool had no room for: the reader asks again
 * for those once it released the others). No promotion on this path. */
struct srv_batch;
struct sb_look {
    struct srv_batch *sb;
    uint16_t i;
};

struct srv_batch {
    struct kvm_cold *g;
    rpc_reply *reply;
    store_cold_batch_req_t req;
    store_cold_batch_resp_t resp;
    struct sb_look look[STORE_COLD_BATCH_MAX];
    kvm_cold_backing_t cold[STORE_COLD_BATCH_MAX]; /* what each item's lookup found */
    staging_handle_t h[STORE_COLD_BATCH_MAX];
    bool held[STORE_COLD_BATCH_MAX]; /* a slot acquired (FILLING) */
    cold_batch_item_t items[STORE_COLD_BATCH_MAX];
    uint16_t map[STORE_COLD_BATCH_MAX]; /* items[j] is request item map[j] */
    uint32_t lookups;                   /* lookups not answered + 1 while they are issued */
    bool orphan, reading;
    struct srv_batch *next, *prev; /* g->bserving */
};

static void sb_unlink(struct srv_batch *sb)
{
    if (sb->prev)
        sb->prev->next = sb->next;
    else
        sb->g->bserving = sb->next;
    if (sb->next)
        sb->next->prev = sb->prev;
    sb->next = sb->prev = NULL;
}

static void sb_free(struct srv_batch *sb)
{
    if (!sb->orphan)
        sb_unlink(sb);
    store_cold_batch_req_free(&sb->req);
    free(sb);
}

/* The slot of item i is staged and its grant issued: resp.r[i] says where. Otherwise the slot
 * is freed and r[i].status says why. */
static void sb_stage(struct srv_batch *sb, uint16_t i, int rc)
{
    struct kvm_cold *g = sb->g;
    uint64_t len = sb->req.it[i].length, off = 0;
    uint8_t *b = staging_buf(g->stg, sb->h[i].slot, &off, NULL);
    uint64_t ttl = g->rt->cfg.cold_staging_ttl_ms;
    if (!rc)
        rc = staging_ready(g->stg, &sb->h[i], kvm_checksum(b, len), env_clock_mono_ms() + ttl);
    else
        staging_abort(g->stg, sb->h[i].slot);
    sb->held[i] = false;
    struct seg_grant gr = {0};
    if (!rc) {
        rc = seg_grant(g->rt->reg, g->stg_seg->id, off, len ? len : 1, SEG_READ, ttl * 1000000ull,
                       &gr);
        if (rc) { /* no grant: nobody can read it; the pins go now */
            bool a;
            staging_transfer_done(g->stg, sb->h[i].token, &a);
            staging_ack(g->stg, sb->h[i].token, &a);
            stg_reap(g, sb->h[i].slot);
        } else {
            g->stg_grant[sb->h[i].slot] = gr.token;
        }
    }
    sb->resp.r[i].status = rc;
    if (!rc) {
        sb->resp.r[i].seg = gr.seg_id;
        sb->resp.r[i].offset = gr.offset;
        sb->resp.r[i].length = len;
        sb->resp.r[i].grant = gr.token;
        sb->resp.r[i].token = sb->h[i].token;
    }
}

static void sb_reply(struct srv_batch *sb)
{
    struct kvm_cold *g = sb->g;
    sb->resp.n = sb->req.n;
    uint8_t body[STORE_COLD_BATCH_RESP_MAX];
    size_t blen = 0;
    int rc = store_cold_batch_resp_encode(&sb->resp, body, sizeof(body), &blen);
    KVM_ASSERT(rc == 0); /* n <= STORE_COLD_BATCH_MAX and the buffer holds the most */
    struct rpc_msg m = {.type = STORE_RPC_COLD_READ_BATCH, .body = body, .body_len = blen};
    int src = rpc_reply_send(sb->reply, 0, "", &m, NULL, NULL);
    if (src) { /* the reader never learns the tokens: release their pins now */
        if (src == KVMESH_EAGAIN)
            rpc_reply_drop(sb->reply);
        for (uint16_t i = 0; i < sb->req.n; i++) {
            if (sb->resp.r[i].status != 0)
                continue;
            bool a;
            staging_transfer_done(g->stg, sb->resp.r[i].token, &a);
            staging_ack(g->stg, sb->resp.r[i].token, &a);
            stg_reap(g, (uint32_t)(sb->resp.r[i].token & 0xffffu));
        }
    }
    sb_free(sb);
}

static void sb_restored(void *arg, cold_batch_item_t *items, size_t n)
{
    struct srv_batch *sb = arg;
    for (size_t j = 0; j < n; j++)
        sb_stage(sb, sb->map[j], items[j].rc);
    sb_reply(sb);
}

/* Every lookup answered: one device read for the items that hold a slot. */
static void sb_read(struct srv_batch *sb)
{
    struct kvm_cold *g = sb->g;
    size_t k = 0;
    for (uint16_t i = 0; i < sb->req.n; i++) {
        if (!sb->held[i])
            continue;
        const kvm_cold_backing_t *cb = &sb->cold[i];
        if (cb->u.mat.locator_len == 0 || cb->u.mat.locator_len > COLD_LOCATOR_MAX) {
            sb_stage(sb, i, KVMESH_ECORRUPT);
            continue;
        }
        cold_batch_item_t *it = &sb->items[k];
        *it = (cold_batch_item_t){.device = cb->tier,
                                  .len = cb->u.mat.length,
                                  .checksum = cb->u.mat.checksum,
                                  .buf = staging_buf(g->stg, sb->h[i].slot, NULL, NULL)};
        it->loc.len = (uint16_t)cb->u.mat.locator_len;
        memcpy(it->loc.b, cb->u.mat.locator, it->loc.len);
        sb->map[k++] = i;
    }
    if (k == 0) {
        sb_reply(sb);
        return;
    }
    sb->reading = true;
    int rc = cold_restore_batch(g->c, sb->items, k, sb_restored, sb, NULL);
    if (rc) {
        for (size_t j = 0; j < k; j++)
            sb_stage(sb, sb->map[j], rc);
        sb_reply(sb);
    }
}

static void sb_lookup_end(struct srv_batch *sb)
{
    KVM_ASSERT(sb->lookups > 0);
    if (--sb->lookups)
        return;
    if (sb->orphan) /* the runtime closed meanwhile (g may be gone) */
        sb_free(sb);
    else
        sb_read(sb);
}

static void sb_looked_up(void *arg, int rc, const cold_route_obs_t *obs)
{
    struct sb_look *l = arg;
    struct srv_batch *sb = l->sb;
    uint16_t i = l->i;
    if (sb->orphan) {
        sb_lookup_end(sb);
        return;
    }
    struct kvm_cold *g = sb->g;
    if (!rc && g->closed)
        rc = KVMESH_ECANCELED;
    if (!rc && (!obs->found || obs->tombstone || obs->cold.kind != KVM_COLD_MATERIALIZED))
        rc = KVMESH_ECONFLICT; /* no materialized cold copy now: the reader looks again */
    if (!rc && !kvm_id128_equal(&obs->cold.owner, &g->rt->self.id))
        rc = KVMESH_ECONFLICT;
    if (!rc) {
        const typeof(sb->req.it[0]) *w = &sb->req.it[i];
        staging_expect_t want = {.namespace_hash = w->namespace_h,
                                 .owner = sb->req.owner,
                                 .route_version = w->version_h,
                                 .locator_fp = w->locator_fp,
                                 .length = w->length,
                                 .checksum = w->checksum};
        staging_expect_t have = {.namespace_hash = namespace_u64(&w->ident),
                                 .owner = obs->cold.owner,
                                 .route_version = version_u64(&obs->version),
                                 .locator_fp = kvm_cold_backing_fingerprint(&obs->cold),
                                 .length = obs->cold.u.mat.length,
                                 .checksum = obs->cold.u.mat.checksum};
        rc = staging_acquire(g->stg, &want, &have, &sb->h[i]);
    }
    if (!rc) {
        sb->held[i] = true;
        sb->cold[i] = obs->cold;
    }
    sb->resp.r[i].status = rc;
    sb_lookup_end(sb);
}

/* Tests only (kvm_cold_test_refuse_batch): every owner of this process answers batched cold
 * reads as an older release does (no handler: KVMESH_ENOTSUP), so its readers fall back to one
 * object at a time. */
static atomic_bool refuse_batch;

void kvm_cold_test_refuse_batch(bool on)
{
    atomic_store(&refuse_batch, on);
}

static void on_cold_read_batch(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    struct kvm_cold *g = dev_cold(rt);
    if (atomic_load(&refuse_batch)) {
        srv_reply(reply, KVMESH_ENOTSUP, "no handler for message type 520", NULL, 0);
        return;
    }
    if (!g || !g->c || !g->stg || g->open_cb || g->closed) {
        srv_reply(reply, KVMESH_EUNAVAILABLE, "the cold tier of this runtime is not open", NULL, 0);
        return;
    }
    struct srv_batch *sb = calloc(1, sizeof(*sb));
    if (!sb) {
        srv_reply(reply, KVMESH_ENOMEM, "out of memory", NULL, 0);
        return;
    }
    if (store_cold_batch_req_decode(req->body, req->body_len, &sb->req) != 0) {
        char msg[300];
        snprintf(msg, sizeof(msg), "batched cold read: %s", kvmesh_last_error());
        free(sb);
        srv_reply(reply, KVMESH_EPROTO, msg, NULL, 0);
        return;
    }
    sb->g = g;
    sb->reply = reply;
    sb->next = g->bserving;
    if (sb->next)
        sb->next->prev = sb;
    g->bserving = sb;
    uint16_t n = sb->req.n;
    sb->lookups = (uint32_t)n + 1; /* + this frame: a lookup may answer before the loop ends */
    for (uint16_t i = 0; i < n; i++) {
        sb->look[i] = (struct sb_look){.sb = sb, .i = i};
        r_lookup(g, &sb->req.it[i].ident, sb_looked_up, &sb->look[i]);
    }
    sb_lookup_end(sb);
}

/* ---- open / close --------------------------------------------------------------------------- */

static void open_fail(struct kvm_cold *g, int rc, const char *msg)
{
    kvm_done_cb cb = g->open_cb;
    g->open_cb = NULL;
    if (cb)
        cb(g->rt, rc, msg);
}

static void open_viewed(void *arg, int rc)
{
    struct kvm_cold *g = arg;
    g->refreshing = false;
    if (rc) {
        char m[300];
        snprintf(m, sizeof(m), "cold tier: reading the device view failed: %s",
                 kvmesh_strerror(rc));
        open_fail(g, rc, m);
        return;
    }
    export_stats(g);
    g->last_recon_ms = env_clock_mono_ms();
    g->tick_timer = env_timer_start(g->rt->env, COLD_GLUE_TICK_MS * 1000000ull, tick, g);
    open_fail(g, 0, "");
}

static int register_next(struct kvm_cold *g);

static void open_registered(void *arg, int rc, const cold_device_t *d)
{
    (void)d;
    struct kvm_cold *g = arg;
    if (rc) {
        char m[1400];
        snprintf(m, sizeof(m),
                 "cold tier: registering device %u (%s) in metadata failed: %s (%s); check the "
                 "metadata backend, and that its capacity (cold_capacity or the cold_devices "
                 "entry) is not below the device's usage",
                 g->nreg, g->devs[g->nreg].root, kvmesh_strerror(rc), kvmesh_last_error());
        open_fail(g, rc, m);
        return;
    }
    if (++g->nreg < g->ndev) {
        rc = register_next(g);
        if (rc)
            open_registered(g, rc, NULL);
        return;
    }
    g->refreshing = true;
    rc = cold_view_refresh(g->c, open_viewed, g);
    if (rc)
        open_viewed(g, rc);
}

/* The route callbacks and configuration every cold core of this runtime gets (the planner's
 * and the device's; the device's adds re-promotion and the scheduling knobs). */
static cold_route_ops_t core_route_ops(struct kvm_cold *g)
{
    return (cold_route_ops_t){.lookup = r_lookup,
                              .read_hot = r_read_hot,
                              .materialize = r_materialize,
                              .evict = r_evict,
                              .ctx = g};
}

static cold_config_t core_config(struct kvm_cold *g)
{
    const struct kvm_store_config *cfg = &g->rt->cfg;
    return (cold_config_t){.deployment = cfg->deployment,
                           .self = g->rt->self.id,
                           .timeout_ms = cfg->request_timeout_ms,
                           .op_ttl_ms = cfg->cold_reconcile_after_ms,
                           .purge_after_ms = cfg->cold_record_retention_ms,
                           .max_buffer = cfg->max_object_size,
                           .exec = &g->exec};
}

/* cold_kind = off: a cold core without a device, used only by kvm_cold_reclaim_gate/settle.
 * An overwrite or remove issued here of an object whose cold copy is on another runtime's
 * device writes the reclaim record (PLANNED, due after cold_reconcile_after_ms) before its
 * route CAS, exactly as a runtime with a cold tier does; the device's owner runs it from its
 * due index (cold_recon_pass), so its payload and device usage are released there. Without
 * metadata or when this fails the runtime simply has no planner (the old behaviour). */
static void planner_open(kvm_rt_t *rt, const kvm_cold_owner_ops_t *owner)
{
    if (!rt->meta)
        return;
    struct kvm_cold *g = calloc(1, sizeof(*g));
    if (!g)
        return;
    g->rt = rt;
    g->owner = *owner;
    g->refs = 1;
    g->planner = true;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->exec = (cold_exec_ops_t){.submit = exec_submit, .ctx = g}; /* (never used: no device) */
    cold_route_ops_t ops = core_route_ops(g);
    cold_config_t cc = core_config(g);
    if (cold_new(&g->c, rt->env, rt->meta, &ops, &cc) != 0) {
        g_unref(g);
        return;
    }
    rt->cold = g;
}

void kvm_cold_open(kvm_rt_t *rt, const kvm_cold_owner_ops_t *owner, kvm_done_cb cb)
{
    kvm_owner_set_cold_hooks(rt, &owner_hooks); /* the owner's cold calls (store.h) */
    const struct kvm_store_config *cfg = &rt->cfg;
    KVM_ASSERT(owner && owner->reserve && owner->commit && owner->release);
    if (cfg->cold_kind == KVM_STORE_COLD_OFF) {
        planner_open(rt, owner);
        cb(rt, 0, "");
        return;
    }
    struct kvm_cold *g = calloc(1, sizeof(*g));
    if (!g) {
        cb(rt, KVMESH_ENOMEM, "cold tier: out of memory");
        return;
    }
    g->rt = rt;
    g->owner = *owner;
    g->open_cb = cb;
    g->refs = 1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    rt->cold = g;
    char m[1400];
    /* device 0 from cold_kind/cold_root/cold_capacity, 1.. from cold_devices */
    struct kvm_store_cold_device cds[KVM_STORE_COLD_DEVICES_MAX];
    uint32_t ncfg =
        1 + (cfg->n_cold_extra < KVM_STORE_COLD_DEVICES_MAX - 1 ? cfg->n_cold_extra
                                                                : KVM_STORE_COLD_DEVICES_MAX - 1);
    memset(&cds[0], 0, sizeof(cds[0]));
    cds[0].kind = cfg->cold_kind;
    snprintf(cds[0].root, sizeof(cds[0].root), "%s", cfg->cold_root);
    cds[0].capacity = cfg->cold_capacity;
    for (uint32_t i = 1; i < ncfg; i++)
        cds[i] = cfg->cold_extra[i - 1];
    g->ncfg = ncfg;
    for (uint32_t i = 0; i < ncfg; i++) {
        struct gdev *d = &g->devs[i];
        cold_backend_err_t err = {{0}};
        cold_backend_config_t bc = {
            .kind =
                cds[i].kind == KVM_STORE_COLD_EXTENT ? COLD_BACKEND_EXTENT : COLD_BACKEND_LOCALDIR,
            .root = cds[i].root,
            .capacity_bytes = cds[i].capacity,
            .require_nfs = cfg->cold_nfs,
            .segment_bytes = cfg->cold_segment_bytes,
        };
        int rc = cold_backend_open(&bc, &d->be, &err);
        if (rc) {
            snprintf(m, sizeof(m), "cold tier: device %u: %s", i,
                     err.msg[0] ? err.msg : kvmesh_strerror(rc));
            open_fail(g, rc, m);
            return;
        }
        d->be_open = true;
        g->ndev = i + 1;
        /* The device id names the directory: the same root keeps its id across restarts. */
        char canon[PATH_MAX];
        const char *root = realpath(cds[i].root, canon) ? canon : cds[i].root;
        size_t rl = strlen(root);
        d->id = kvm_id128_from_u64(kvm_hash_seeded(root, rl, 0x636f6c64u),
                                   kvm_hash_seeded(root, rl, 0x64657669u));
        d->kind = bc.kind;
        d->capacity = cds[i].capacity;
        snprintf(d->root, sizeof(d->root), "%s", root);
        snprintf(d->tags, sizeof(d->tags), "%s", cds[i].tags);
        for (uint32_t k = 0; k < i; k++)
            if (kvm_id128_equal(&g->devs[k].id, &d->id)) {
                snprintf(m, sizeof(m),
                         "cold tier: device %u (%s) is the directory of device %u; give each "
                         "device its own directory",
                         i, cds[i].root, k);
                open_fail(g, KVMESH_ECONFIG, m);
                return;
            }
    }
    int rc = stg_open(g);
    if (rc) {
        snprintf(m, sizeof(m), "cold tier: %s", kvmesh_last_error());
        open_fail(g, rc, m);
        return;
    }
    if (rt->ep) {
        rpc_register_handler(rt->ep, STORE_RPC_COLD_READ, on_cold_read, rt);
        rpc_register_notify_handler(rt->ep, STORE_RPC_COLD_ACK, on_cold_ack, rt);
        rpc_register_handler(rt->ep, STORE_RPC_COLD_READ_BATCH, on_cold_read_batch, rt);
    }
    if (env_thread_create(&g->th, worker_main, g) == 0)
        g->th_started = true;
    g->exec = (cold_exec_ops_t){.submit = exec_submit, .ctx = g};
    cold_route_ops_t ops = core_route_ops(g);
    ops.promote = r_promote;
    cold_config_t cc = core_config(g);
    cc.queue_cap = cfg->cold_queue;
    cc.order = cfg->cold_offload_order ? COLD_ORDER_SIZE : COLD_ORDER_FIFO;
    cc.backoff_base_ms = cfg->cold_retry_backoff_ms;
    cc.backoff_max_ms = cfg->cold_retry_backoff_max_ms;
    cc.rate_bytes_per_sec = cfg->cold_offload_bytes_per_sec;
    cc.high_watermark = cfg->cold_high_watermark;
    cc.low_watermark = cfg->cold_low_watermark;
    rc = cold_new(&g->c, rt->env, rt->meta, &ops, &cc);
    for (uint32_t i = 0; !rc && i < g->ndev; i++) {
        struct gdev *d = &g->devs[i];
        rc = kvm_cold_health_new(&d->health, &d->be, &d->hb);
        if (!rc)
            rc = cold_attach_backend(g->c, &d->id, &d->hb);
    }
    if (rc) {
        snprintf(m, sizeof(m), "cold tier: cannot start the cold core: %s", kvmesh_last_error());
        open_fail(g, rc, m);
        return;
    }
    g->nreg = 0;
    rc = register_next(g);
    if (rc)
        open_registered(g, rc, NULL);
}

/* [open] The record of device g->nreg (owner = this runtime, owner epoch = its membership
 * epoch); open_registered goes on with the next one. */
static int register_next(struct kvm_cold *g)
{
    kvm_rt_t *rt = g->rt;
    const struct gdev *gd = &g->devs[g->nreg];
    cold_device_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.id = gd->id;
    desc.owner = rt->self.id;
    desc.owner_epoch = rt->self.epoch;
    desc.kind = gd->kind;
    snprintf(desc.root, sizeof(desc.root), "%s", gd->root);
    snprintf(desc.tags, sizeof(desc.tags), "%s", gd->tags);
    desc.lifecycle = COLD_DEV_ACTIVE;
    desc.schedulable = true;
    desc.capacity = gd->capacity;
    desc.health = COLD_DEV_HEALTHY;
    desc.health_ms = env_wall_ms(rt->env);
    return cold_device_register(g->c, &desc, open_registered, g);
}

/* ---- store paths ---------------------------------------------------------------------------- */

/* Tests only (kvm_cold_test_pin_device0): local placement always picks device 0. */
static atomic_bool pin_dev0;

void kvm_cold_test_pin_device0(bool on)
{
    atomic_store(&pin_dev0, on);
}

/* Placement among this runtime's own devices: the eligible one with the most free bytes
 * (cold_place_owned; ties to the smaller id). */
static int place_local(struct kvm_cold *g, uint64_t len, kvm_tier_id_t *dev)
{
    if (g->ndev > 1 && atomic_load(&pin_dev0)) {
        const cold_device_t *d = cold_view_find(g->c, &g->devs[0].id);
        if (!d || !cold_device_fits(d, len))
            return KVMESH_ENOSPC;
        *dev = d->id;
        return 0;
    }
    return cold_place_owned(g->c, len, &g->rt->self.id, 1, dev, NULL);
}

/* The refusal of a write-through put that got no cold backing: why no device took it. */
static int no_backing_err(struct kvm_cold *g, const kvm_route_t *next, bool local)
{
    kvm_tier_id_t best;
    const cold_device_t *d =
        place_local(g, next->length, &best) == 0 ? cold_view_find(g->c, &best) : NULL;
    if (!d && g->ndev > 0)
        d = cold_view_find(g->c, &g->devs[0].id);
    if (local && d && cold_device_fits(d, next->length) &&
        cold_offload_pending(g->c) >= g->rt->cfg.cold_queue)
        return kvm_errf(KVMESH_EAGAIN,
                        "cold_write_through: the cold offload queue is full (cold_queue = %u); "
                        "retry the put later or raise cold_queue",
                        g->rt->cfg.cold_queue);
    if (local && d && d->health == COLD_DEV_HEALTHY && d->schedulable &&
        d->lifecycle == COLD_DEV_ACTIVE)
        return kvm_errf(KVMESH_ENOSPC,
                        "cold_write_through: the cold device has no room for %" PRIu64
                        " bytes (capacity %" PRIu64 ", used %" PRIu64 ", reserved %" PRIu64
                        "); remove objects or raise cold_capacity",
                        next->length, d->capacity, d->used, d->reserved);
    return kvm_errf(KVMESH_EUNAVAILABLE,
                    "cold_write_through: no healthy, schedulable cold device with room belongs "
                    "to a runtime holding a replica of this object%s; retry the put later",
                    local ? "" : " (this runtime holds none)");
}

int kvm_cold_backing_for(kvm_rt_t *rt, kvm_route_t *next)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || g->open_cb || !rt->cfg.cold_offload || next->n_replicas == 0 ||
        rt->cfg.cold_offload_mode == KVM_STORE_COLD_MODE_EVICT)
        return 0; /* (evict mode: the eviction claims its victims, kvm_cold_evict_claim) */
    /* The device of a runtime that holds one of the new replicas (its read_hot copies from its
     * own segment): this runtime's own when it holds one, else the replica owners' devices. */
    kvm_runtime_id_t owners[KVM_MAX_REPLICAS];
    size_t n = 0;
    bool local = false;
    for (uint32_t i = 0; i < next->n_replicas; i++) {
        owners[n++] = next->replicas[i].owner;
        local = local || kvm_id128_equal(&next->replicas[i].owner, &rt->self.id);
    }
    kvm_tier_id_t dev;
    kvm_runtime_id_t owner;
    /* this runtime's own devices first: the one with the most room (cold_place_owned) */
    if (local && cold_offload_pending(g->c) < rt->cfg.cold_queue &&
        place_local(g, next->length, &dev) == 0) {
        owner = rt->self.id;
    } else if (cold_place_owned(g->c, next->length, owners, n, &dev, &owner) != 0 ||
               (kvm_id128_equal(&owner, &rt->self.id) &&
                cold_offload_pending(g->c) >= rt->cfg.cold_queue)) {
        /* stays hot-only (a cache object), or, write-through, the put fails before its CAS */
        return rt->cfg.cold_write_through ? no_backing_err(g, next, local) : 0;
    }
    kvm_op_id_t cold_op = kvm_rt_next_op_id(rt);
    kvm_cold_backing_pending(&next->cold, &cold_op, &next->content_op, &owner, &dev, next->length,
                             next->checksum);
    return 0;
}

struct reclaim_ctx {
    struct kvm_cold *g;
    kvm_op_id_t reclaim_op;
    void (*on_close)(struct reclaim_ctx *r); /* NULL: free(r) */
    struct reclaim_ctx *next, *prev;         /* g->reclaims */
};

static void reclaim_free(struct reclaim_ctx *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        r->g->reclaims = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r);
}

static void reclaim_ran(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)rc, (void)v; /* KVMESH_EAGAIN and errors: the record stays due; reconciliation runs it */
    reclaim_free(arg);
}

void kvm_cold_published(kvm_rt_t *rt, const kvm_route_t *now)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || g->open_cb)
        return;
    report_pressure(g);
    /* a replica owner records the intent of another runtime's device (resumed there after a
     * crash that came before its own plan: cold_resume.h) */
    kvm_cold_note_pending(rt, g->c, now);
    if (now && now->cold.kind == KVM_COLD_PENDING_OFFLOAD && !atomic_load(&skip_offload) &&
        kvm_id128_equal(&now->cold.owner, &rt->self.id) && own_dev(g, &now->cold.tier)) {
        cold_job_t job = {.ident = &now->ident,
                          .cold_op = now->cold.cold_op,
                          .content_op = now->content_op,
                          .device = now->cold.tier,
                          .length = now->length,
                          .checksum = now->checksum,
                          /* write-through: the put waits for it (kvm_cold_durable_wait) */
                          .urgent = g->rt->cfg.cold_write_through};
        (void)cold_offload_submit(g->c, &job); /* EAGAIN: stays hot (see kvm_cold_pins_last) */
    }
}

/* ---- write-through puts (cold_write_through; docs/cold.md "Durable puts") -------------------
 *
 * One struct durable per put item that waits for its cold copy. It is listed in g->durables from
 * kvm_cold_durable_wait until nothing of the core or the env still holds it:
 *
 *   WAITING --(job done / op record USAGE_COMMITTED or RELEASED / deadline)--> ANSWERED --> freed
 *
 * The item's continuation runs exactly once (on the move to ANSWERED, or at close with
 * KVMESH_ECANCELED). A local wait holds the offload job's completion callback (in_job), a remote
 * one a cold_op_get (in_get) or a poll timer; the struct is freed once none is held. The core
 * calls none of our callbacks after cold_close, so close frees every listed struct.
 */
#define COLD_DURABLE_POLL_MIN_MS 5   /* remote wait: first poll of the op record */
#define COLD_DURABLE_POLL_MAX_MS 100 /* remote wait: poll interval cap (it doubles) */

struct durable {
    struct kvm_cold *g;
    kvm_op_t *op;
    struct kvm_item *it;
    kvm_cold_durable_cb cont; /* NULL once answered */
    kvm_op_id_t cold_op;
    uint64_t deadline_ms; /* CLOCK_MONOTONIC ms: the put's deadline */
    bool in_job;          /* local: the job's completion callback is still due */
    bool in_get;          /* remote: a cold_op_get is in flight */
    env_timer_id timer;   /* remote: the next poll */
    uint32_t poll_ms;
    char why[200]; /* local: the job's reason for a failure it can name (cold_job_t.why) */
    struct durable *next, *prev; /* g->durables */
};

static void durable_free(struct durable *d)
{
    struct kvm_cold *g = d->g;
    if (d->prev)
        d->prev->next = d->next;
    else
        g->durables = d->next;
    if (d->next)
        d->next->prev = d->prev;
    if (d->timer)
        env_timer_cancel(g->rt->env, d->timer);
    free(d);
}

/* Answers the item once (rc 0: durable) and frees d when nothing holds it any more. */
static void durable_answer(struct durable *d, int rc, const char *msg)
{
    kvm_cold_durable_cb cont = d->cont;
    kvm_op_t *op = d->op;
    struct kvm_item *it = d->it;
    d->cont = NULL;
    if (d->timer)
        env_timer_cancel(d->g->rt->env, d->timer);
    d->timer = 0;
    if (!d->in_job && !d->in_get)
        durable_free(d);
    if (cont)
        cont(op, it, rc, msg);
}

static void durable_timeout(struct durable *d)
{
    char m[200];
    snprintf(m, sizeof(m),
             "cold_write_through: the object is published in DRAM but its cold copy did not "
             "commit by the request deadline, so the put is not durable; retry the put or "
             "raise request_timeout_ms");
    durable_answer(d, KVMESH_ETIMEDOUT, m);
}

/* The end of a cold op: 0 when the copy is committed, else the failure to answer. */
static int durable_outcome(int rc, enum cold_op_state st, char *m, size_t cap)
{
    if (rc == 0 && st == COLD_OP_USAGE_COMMITTED)
        return 0;
    snprintf(m, cap,
             "cold_write_through: the object is published in DRAM but its cold copy did not "
             "commit (%s%s%s), so the put is not durable; retry the put",
             rc ? kvmesh_strerror(rc) : "cold operation ", rc ? "" : cold_op_state_name(st),
             rc == KVMESH_ECONFLICT ? ": the object was replaced meanwhile" : "");
    return rc ? rc : KVMESH_EIO;
}

static void durable_job_done(void *arg, int rc)
{
    struct durable *d = arg;
    d->in_job = false;
    if (!d->cont) { /* answered already (deadline) */
        durable_free(d);
        return;
    }
    char m[400];
    if (rc && d->why[0]) /* e.g. the device was drained after this put placed its copy there */
        snprintf(m, sizeof(m),
                 "cold_write_through: the object is published in DRAM but its cold copy was "
                 "refused (%s), so the put is not durable; retry the put (placement then uses "
                 "the refreshed device view)",
                 d->why);
    else
        rc = durable_outcome(rc, rc ? COLD_OP_NONE : COLD_OP_USAGE_COMMITTED, m, sizeof(m));
    durable_answer(d, rc, m);
}

static void durable_poll(void *arg);

static void durable_arm(struct durable *d)
{
    uint32_t left = kvm_deadline_left_ms(d->deadline_ms);
    uint32_t ms = d->poll_ms < left ? d->poll_ms : left;
    d->poll_ms =
        d->poll_ms * 2 < COLD_DURABLE_POLL_MAX_MS ? d->poll_ms * 2 : COLD_DURABLE_POLL_MAX_MS;
    d->timer = env_timer_start(d->g->rt->env, (uint64_t)ms * 1000000ull, durable_poll, d);
}

static void durable_got(void *arg, int rc, const cold_op_view_t *v)
{
    struct durable *d = arg;
    d->in_get = false;
    if (!d->cont) {
        durable_free(d);
        return;
    }
    enum cold_op_state st = rc == 0 && v && v->op ? v->op->state : COLD_OP_NONE;
    if (rc == 0 && (st == COLD_OP_USAGE_COMMITTED || st == COLD_OP_RELEASED)) {
        char m[300];
        rc = durable_outcome(0, st, m, sizeof(m));
        durable_answer(d, rc, m);
        return;
    }
    if (kvm_deadline_left_ms(d->deadline_ms) == 0) {
        durable_timeout(d);
        return;
    }
    durable_arm(d); /* not planned yet, on its way, or a transient read failure: poll again */
}

static void durable_poll(void *arg)
{
    struct durable *d = arg;
    d->timer = 0;
    if (kvm_deadline_left_ms(d->deadline_ms) == 0) {
        durable_timeout(d);
        return;
    }
    if (cold_op_get(d->g->c, &d->cold_op, durable_got, d) == 0)
        d->in_get = true;
    else
        durable_arm(d);
}

/* [loop] The tick's deadline sweep of local waits (a remote wait's timer has its own). */
static void durable_expire(struct kvm_cold *g)
{
    struct durable *d = g->durables, *next;
    for (; d; d = next) {
        next = d->next;
        if (d->cont && d->in_job && kvm_deadline_left_ms(d->deadline_ms) == 0)
            durable_timeout(d);
    }
}

bool kvm_cold_durable_wait(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, const kvm_route_t *now,
                           kvm_cold_durable_cb cont)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!rt->cfg.cold_write_through)
        return false;
    char m[300];
    if (!g || !g->c || g->closed || !now || now->cold.kind == KVM_COLD_NONE) {
        snprintf(m, sizeof(m),
                 "cold_write_through: the object is published in DRAM without a cold copy, so "
                 "the put is not durable; retry the put");
        cont(op, it, KVMESH_EUNAVAILABLE, m);
        return true;
    }
    struct durable *d = calloc(1, sizeof(*d));
    if (!d) {
        cont(op, it, KVMESH_ENOMEM, "cold_write_through: out of memory waiting for the cold copy");
        return true;
    }
    d->g = g;
    d->op = op;
    d->it = it;
    d->cont = cont;
    d->cold_op = now->cold.cold_op;
    d->deadline_ms = op->deadline_ms;
    d->poll_ms = COLD_DURABLE_POLL_MIN_MS;
    d->next = g->durables;
    if (d->next)
        d->next->prev = d;
    g->durables = d;
    bool local = now->cold.kind == KVM_COLD_PENDING_OFFLOAD &&
                 kvm_id128_equal(&now->cold.owner, &rt->self.id) && own_dev(g, &now->cold.tier);
    if (local) { /* kvm_cold_published queued it (urgent): attach to the job */
        cold_job_t job = {.ident = &now->ident,
                          .cold_op = now->cold.cold_op,
                          .content_op = now->content_op,
                          .device = now->cold.tier,
                          .length = now->length,
                          .checksum = now->checksum,
                          .urgent = true,
                          .done = durable_job_done,
                          .done_arg = d,
                          .why = d->why,
                          .why_cap = sizeof(d->why)};
        int rc = cold_offload_submit(g->c, &job);
        if (rc == 0) {
            d->in_job = true;
            return true;
        }
        /* EEXIST (another waiter on the same op) or EAGAIN (queue full): poll the record */
    }
    durable_poll(d);
    return true;
}

static struct reclaim_ctx *reclaim_new(struct kvm_cold *g, const kvm_op_id_t *reclaim_op)
{
    struct reclaim_ctx *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->g = g;
    r->reclaim_op = *reclaim_op;
    r->next = g->reclaims;
    if (r->next)
        r->next->prev = r;
    g->reclaims = r;
    return r;
}

static void reclaim_cancelled(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)rc, (void)v; /* refused (not PLANNED any more) or failed: the record stays due */
    reclaim_free(arg);
}

struct gate_ctx {
    struct reclaim_ctx rc; /* first: listed in g->reclaims (freed at close) */
    kvm_op_t *op;
    struct kvm_item *it;
    kvm_cold_gate_cb cont;
    kvm_op_id_t of;
};

/* At close the plan's callback no longer runs: the item fails without its CAS. */
static void gate_closed(struct reclaim_ctx *r)
{
    struct gate_ctx *c = (struct gate_ctx *)r;
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_cold_gate_cb cont = c->cont;
    free(c);
    kvm_errf(KVMESH_ECANCELED, "the runtime is closing");
    cont(op, it, KVMESH_ECANCELED);
}

static void gate_planned(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)v;
    struct gate_ctx *c = arg;
    if (rc == 0) {
        c->it->cold_reclaim_op = c->rc.reclaim_op;
        c->it->cold_reclaim_of = c->of;
    }
    kvm_op_t *op = c->op;
    struct kvm_item *it = c->it;
    kvm_cold_gate_cb cont = c->cont;
    reclaim_free(&c->rc);
    if (rc)
        kvm_errf(rc, "cannot plan the reclaim of the replaced value's cold copy: %s",
                 kvmesh_strerror(rc));
    cont(op, it, rc);
}

bool kvm_cold_reclaim_gate(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, kvm_cold_gate_cb cont)
{
    struct kvm_cold *g = rt->cold;
    if (!g || !g->c || g->open_cb)
        return false;
    bool need = it->have_route && it->cur.cold.kind == KVM_COLD_MATERIALIZED;
    bool have = need && kvm_op_id_equal(&it->cold_reclaim_of, &it->cur.cold.cold_op);
    if (!have && !kvm_op_id_is_nil(&it->cold_reclaim_of))
        kvm_cold_reclaim_settle(rt, it, false); /* planned for a route a conflict replaced */
    if (!need || have)
        return false;
    struct gate_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        cont(op, it, KVMESH_ENOMEM);
        return true;
    }
    c->rc.g = g;
    c->rc.on_close = gate_closed;
    c->rc.reclaim_op = kvm_rt_next_op_id(rt);
    c->rc.next = g->reclaims;
    if (c->rc.next)
        c->rc.next->prev = &c->rc;
    g->reclaims = &c->rc;
    c->op = op;
    c->it = it;
    c->cont = cont;
    c->of = it->cur.cold.cold_op;
    int rc =
        cold_reclaim_plan(g->c, &c->rc.reclaim_op, &it->cur.ident, &it->cur.cold, gate_planned, c);
    if (rc) {
        reclaim_free(&c->rc);
        cont(op, it, rc);
    }
    return true;
}

void kvm_cold_reclaim_settle(kvm_rt_t *rt, struct kvm_item *it, bool applied)
{
    struct kvm_cold *g = rt->cold;
    if (kvm_op_id_is_nil(&it->cold_reclaim_of))
        return;
    it->cold_reclaim_of = (kvm_op_id_t){0};
    if (!g || !g->c)
        return; /* closing: the record stays due; reconciliation settles it */
    if (applied && (g->planner || !own_dev(g, &it->cur.cold.tier)))
        return; /* the device's owner runs it when it is due (cold_recon_pass) */
    struct reclaim_ctx *r = reclaim_new(g, &it->cold_reclaim_op);
    if (!r)
        return;
    int rc = applied ? cold_reclaim_run(g->c, &r->reclaim_op, reclaim_ran, r)
                     : cold_reclaim_cancel(g->c, &r->reclaim_op, reclaim_cancelled, r);
    if (rc)
        reclaim_free(r);
}

struct committed_ctx {
    struct kvm_cold *g;
};

static void committed_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct committed_ctx *c = arg;
    struct kvm_cold *g = c->g;
    free(c);
    KVM_ASSERT(g->commit_lookups > 0);
    g->commit_lookups--;
    if (rc == 0 && !g->closed && g->rt->cold == g)
        kvm_cold_published(g->rt, r);
    g_unref(g);
}

void kvm_cold_slot_committed(kvm_rt_t *rt, const kvm_ident_t *ident)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || g->open_cb || !rt->route)
        return;
    struct committed_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->g = g;
    g->refs++;
    g->commit_lookups++;
    if (route_lookup(rt->route, ident, committed_looked_up, c) != 0) {
        free(c);
        g->commit_lookups--;
        g_unref(g);
    }
}

int kvm_cold_evict_last(kvm_rt_t *rt, const kvm_ident_t *ident, const kvm_hot_replica_t *rep,
                        kvm_cold_evict_cb cb, void *arg)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || g->open_cb)
        return KVMESH_ENOTSUP;
    return cold_evict(g->c, ident, rep, cb, arg);
}

bool kvm_cold_pins_last(kvm_rt_t *rt, const kvm_route_t *route)
{
    struct kvm_cold *g = dev_cold(rt);
    /* With no job queued or in flight and no remote writer's commit still being looked up (its
     * offload is queued when the lookup returns) the backing is stale (never queued, or parked
     * after its retries): the replica is evicted as a cache object and a later resumption finds
     * the route changed and releases the op. */
    return g && g->c && route->cold.kind == KVM_COLD_PENDING_OFFLOAD &&
           kvm_id128_equal(&route->cold.owner, &rt->self.id) &&
           (cold_offload_pending(g->c) > 0 || g->commit_lookups > 0);
}

/* ---- eviction-triggered offload (cold_offload_mode = evict) -------------------------------- */

/* One claimed victim: route CAS adding a PendingOffload of a fresh cold op on this runtime's
 * device (the replica stays) -> urgent offload job -> last-hot eviction (cold_evict) -> cb. */
struct claim {
    struct kvm_cold *g;
    kvm_ident_t ident; /* owned */
    kvm_hot_replica_t rep;
    kvm_route_t next; /* the claimed route (its cold op, content op, length, checksum) */
    kvm_cold_evict_cb cb;
    void *arg;
    bool in_route; /* its route CAS is in flight (holds g->refs) */
    bool listed;   /* in g->claims */
    struct claim *next_c, *prev_c;
};

static void claim_unlink(struct claim *cl)
{
    if (!cl->listed)
        return;
    if (cl->prev_c)
        cl->prev_c->next_c = cl->next_c;
    else
        cl->g->claims = cl->next_c;
    if (cl->next_c)
        cl->next_c->prev_c = cl->prev_c;
    cl->listed = false;
}

static void claim_free(struct claim *cl)
{
    claim_unlink(cl);
    kvm_ident_free(&cl->ident);
    kvm_route_free(&cl->next);
    free(cl);
}

static void claim_finish(struct claim *cl, int rc)
{
    kvm_cold_evict_cb cb = cl->cb;
    void *arg = cl->arg;
    claim_free(cl);
    cb(arg, rc);
}

static void claim_evicted(void *arg, int rc)
{
    claim_finish(arg, rc);
}

static void claim_offloaded(void *arg, int rc)
{
    struct claim *cl = arg;
    struct kvm_cold *g = cl->g;
    if (rc == 0)
        rc = cold_evict(g->c, &cl->ident, &cl->rep, claim_evicted, cl);
    if (rc)
        claim_finish(cl, rc); /* the slot goes back to the clock; a later pass retries */
}

static void claim_cased(void *arg, int rc, const kvm_route_t *now)
{
    (void)now;
    struct claim *cl = arg;
    struct kvm_cold *g = cl->g;
    cl->in_route = false;
    if (g->closed || !g->c) {
        claim_free(cl); /* closing: the slot's callback no longer runs */
        g_unref(g);
        return;
    }
    g_unref(g); /* the runtime holds another reference while open */
    if (rc == 0) {
        cold_job_t job = {.ident = &cl->ident,
                          .cold_op = cl->next.cold.cold_op,
                          .content_op = cl->next.content_op,
                          .device = cl->next.cold.tier,
                          .length = cl->next.length,
                          .checksum = cl->next.checksum,
                          .urgent = true,
                          .done = claim_offloaded,
                          .done_arg = cl};
        rc = cold_offload_submit(g->c, &job);
    }
    if (rc)
        claim_finish(cl, rc);
}

bool kvm_cold_claims(kvm_rt_t *rt, const kvm_route_t *r)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || g->open_cb || g->closed || !rt->route || !rt->cfg.cold_offload ||
        rt->cfg.cold_offload_mode != KVM_STORE_COLD_MODE_EVICT)
        return false;
    if (kvm_route_is_tombstone(r) || r->cold.kind != KVM_COLD_NONE || r->n_replicas != 1 ||
        !kvm_id128_equal(&r->replicas[0].owner, &rt->self.id))
        return false;
    kvm_tier_id_t dev;
    return cold_place_owned(g->c, r->length, &rt->self.id, 1, &dev, NULL) == 0 &&
           cold_offload_pending(g->c) < rt->cfg.cold_queue;
}

int kvm_cold_evict_claim(kvm_rt_t *rt, const kvm_route_t *r, const kvm_hot_replica_t *rep,
                         kvm_cold_evict_cb cb, void *arg)
{
    struct kvm_cold *g = rt->cold;
    if (!kvm_cold_claims(rt, r))
        return KVMESH_ENOTSUP;
    struct claim *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return KVMESH_ENOMEM;
    kvm_route_init(&cl->next);
    if (kvm_ident_copy(&cl->ident, &r->ident) != 0 || kvm_route_copy(&cl->next, r) != 0) {
        claim_free(cl);
        return KVMESH_ENOMEM;
    }
    cl->g = g;
    cl->rep = *rep;
    cl->cb = cb;
    cl->arg = arg;
    kvm_tier_id_t dev;
    if (cold_place_owned(g->c, r->length, &rt->self.id, 1, &dev, NULL) != 0) {
        claim_free(cl);
        return KVMESH_ENOTSUP;
    }
    kvm_op_id_t cold_op = kvm_rt_next_op_id(rt);
    kvm_cold_backing_pending(&cl->next.cold, &cold_op, &cl->next.content_op, &rt->self.id, &dev,
                             cl->next.length, cl->next.checksum);
    cl->next_c = g->claims;
    if (cl->next_c)
        cl->next_c->prev_c = cl;
    g->claims = cl;
    cl->listed = true;
    cl->in_route = true;
    g->refs++;
    int rc = route_cas(rt->route, &r->version, &cl->next, claim_cased, cl);
    if (rc) {
        g->refs--;
        claim_free(cl);
    }
    return rc;
}

/* ---- cold-only reads ------------------------------------------------------------------------ */

struct cread {
    struct cread *next, *prev; /* [loop] g->reads, while the restore is in the core */
    struct kvm_cold *g;        /* [loop] set while listed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* app thread + loop */
    bool done, abandoned;
    int rc;
    kvm_rt_t *rt;
    kvm_ident_t ident;
    kvm_runtime_id_t owner; /* the device's owner runtime */
    uint32_t timeout_ms;    /* remote: the time left at the call */
    const struct iovec *iov;
    int iovcnt;
    uint64_t len, checksum;
    /* remote restore: what the reader expects (validated by the owner) and the staged slot */
    bool remote;
    uint8_t wire_ver; /* STORE_COLD_READ_VERSION (a test hook may send another, see cread_new) */
    uint64_t version_h, locator_fp;
    const char *data_addr; /* [loop] the owner's transport address (interned) */
    uint64_t st_seg, st_off, st_len, st_grant, st_token;
    char err[256];
};

static void cread_unref(struct cread *r)
{
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    kvm_ident_free(&r->ident);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void cread_finish(struct cread *r, int rc, const void *buf, uint64_t len)
{
    kvm_rt_t *rt = r->rt;
    if (r->g) {
        if (r->prev)
            r->prev->next = r->next;
        else
            r->g->reads = r->next;
        if (r->next)
            r->next->prev = r->prev;
        r->g = NULL;
    }
    if (!r->remote) { /* (a remote restore is verified after its transfer, counted in kvm_cold_read)
                       */
        if (rc == 0 && (len != r->len || kvm_checksum(buf, len) != r->checksum))
            rc = KVMESH_ECHECKSUM; /* never hand out bytes the route does not vouch for */
        obs_count(rt->metrics, cold_restores_total, rc == 0 ? OBS_OUTCOME_OK : OBS_OUTCOME_ERROR,
                  OBS_NONE, 1);
    }
    pthread_mutex_lock(&r->mu);
    if (!r->abandoned && rc == 0 && !r->remote) {
        uint64_t pos = 0;
        for (int i = 0; i < r->iovcnt && pos < len; i++) {
            size_t k = r->iov[i].iov_len < len - pos ? r->iov[i].iov_len : (size_t)(len - pos);
            memcpy(r->iov[i].iov_base, (const uint8_t *)buf + pos, k);
            pos += k;
        }
    }
    r->rc = rc;
    r->done = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    cread_unref(r);
}

static void restored(void *arg, int rc, const void *buf, uint64_t len)
{
    cread_finish(arg, rc, buf, len);
}

static void remote_done(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct cread *r = arg;
    int rc = res->status;
    if (rc == KVMESH_EPROTO && strstr(res->error, "older release")) {
        snprintf(r->err, sizeof(r->err), "%s", res->error); /* the owner named the older side */
    } else if (rc == KVMESH_EPROTO) {
        /* an owner of an older release (COLD_READ version 1, no staging) cannot decode a
         * version 2 request: say so, not just "malformed" */
        snprintf(r->err, sizeof(r->err),
                 "the cold copy's owner refused the request as malformed (%s): it probably runs "
                 "an older release that speaks cold read version 1 (no staging pool) while this "
                 "reader speaks version %u; upgrade the owner runtime (it keeps its cold_root) "
                 "and read again",
                 res->error, (unsigned)STORE_COLD_READ_VERSION);
    } else if (rc) {
        snprintf(r->err, sizeof(r->err), "%s", res->error);
    } else {
        kvm_rd_t d;
        kvm_rd_init(&d, res->body, res->body_len);
        uint8_t ver = kvm_rd_u8(&d);
        if (kvm_rd_ok(&d) && ver != STORE_COLD_READ_VERSION) {
            snprintf(r->err, sizeof(r->err),
                     "the cold copy's owner answered with cold read version %u, this reader "
                     "speaks version %u: upgrade the older of the two runtimes",
                     (unsigned)ver, (unsigned)STORE_COLD_READ_VERSION);
            cread_finish(r, KVMESH_EPROTO, NULL, 0);
            return;
        }
        if (!kvm_rd_ok(&d) && res->payload_len > 0) { /* a v1 owner answers the bytes */
            snprintf(r->err, sizeof(r->err),
                     "the cold copy's owner answered a version 1 cold read (the payload inline, "
                     "no staging slot): it runs an older release; upgrade it (it keeps its "
                     "cold_root) and read again");
            cread_finish(r, KVMESH_EPROTO, NULL, 0);
            return;
        }
        r->st_seg = kvm_rd_u64le(&d);
        r->st_off = kvm_rd_u64le(&d);
        r->st_len = kvm_rd_u64le(&d);
        r->st_grant = kvm_rd_u64le(&d);
        r->st_token = kvm_rd_u64le(&d);
        if (!kvm_rd_ok(&d) || r->st_len != r->len || !r->data_addr || !r->data_addr[0])
            rc = KVMESH_EPROTO;
    }
    cread_finish(r, rc, NULL, 0);
}

/* [loop] The device belongs to another runtime: ask it to stage the object
 * (STORE_RPC_COLD_READ); the reader then reads the slot through the transport. */
static void cread_remote(void *arg)
{
    struct cread *r = arg;
    kvm_rt_t *rt = r->rt;
    const struct kvm_member *m = kvm_member_find(rt, &r->owner);
    rpc_peer *p = m ? kvm_rt_peer(rt, m) : NULL;
    r->data_addr = m ? m->data_addr : NULL;
    uint8_t body[64 + KVM_IDENT_ENC_MAX_LEN];
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u8(&w, r->wire_ver);
    kvm_wr_u64le(&w, r->version_h);
    kvm_wr_u64le(&w, r->locator_fp);
    kvm_wr_u64le(&w, r->len);
    kvm_wr_u64le(&w, r->checksum);
    kvm_wr_u64le(&w, namespace_u64(&r->ident));
    kvm_wr_bytes(&w, r->owner.b, sizeof(r->owner.b));
    size_t blen = 0;
    int rc = p ? wire_ident_encode(&r->ident, body + w.len, sizeof(body) - w.len, &blen)
               : KVMESH_EUNAVAILABLE;
    if (!rc && w.err)
        rc = w.err;
    if (!rc) {
        struct rpc_msg msg = {.type = STORE_RPC_COLD_READ,
                              .body = body,
                              .body_len = w.len + blen,
                              .timeout_ms = r->timeout_ms ? r->timeout_ms : 1};
        rc = rpc_call(p, &msg, remote_done, r, NULL);
    }
    if (rc)
        cread_finish(r, rc, NULL, 0);
}

static void cread_start(void *arg)
{
    struct cread *r = arg;
    struct kvm_cold *g = dev_cold(r->rt);
    if (!g || !g->c) {
        cread_finish(r, KVMESH_ENOTSUP, NULL, 0);
        return;
    }
    r->g = g;
    r->next = g->reads;
    if (r->next)
        r->next->prev = r;
    g->reads = r;
    int rc = cold_restore(g->c, &r->ident, restored, r);
    if (rc)
        cread_finish(r, rc, NULL, 0);
}

/* ---- remote restore: the reader side ------------------------------------------------------- */

struct cack {
    kvm_rt_t *rt;
    kvm_runtime_id_t owner;
    uint64_t token;
};

/* [loop] STORE_RPC_COLD_ACK to the owner: its slot's transfer and reader pins go. Lost or late,
 * the owner's expiry recycles the slot. */
static void ack_send(void *arg)
{
    struct cack *a = arg;
    const struct kvm_member *m = kvm_member_find(a->rt, &a->owner);
    rpc_peer *p = m ? kvm_rt_peer(a->rt, m) : NULL;
    uint8_t body[16];
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u8(&w, STORE_COLD_READ_VERSION);
    kvm_wr_u64le(&w, a->token);
    struct rpc_msg msg = {.type = STORE_RPC_COLD_ACK, .body = body, .body_len = w.len};
    if (p)
        (void)rpc_notify(p, &msg, NULL, NULL);
    free(a);
}

/* Tests only: KVMESH_TEST_COLD_LATE_ACKS=N makes this process's first N remote restores hold
 * back their ACK until the next remote restore finished (a slow reader): the owner's expiry
 * fences their slots first, and their ACKs then arrive late (ignored, counted). */
static pthread_mutex_t late_mu = PTHREAD_MUTEX_INITIALIZER;
static int late_left = -1;
static struct cack *late_held[8];
static unsigned late_n;

static void ack_post(kvm_rt_t *rt, struct cack *a)
{
    if (env_post(rt->env, ack_send, a) != 0)
        free(a);
}

static void ack_or_hold(kvm_rt_t *rt, struct cack *a)
{
    struct cack *out[8];
    unsigned n = 0;
    pthread_mutex_lock(&late_mu);
    if (late_left < 0) {
        const char *e = getenv("KVMESH_TEST_COLD_LATE_ACKS");
        late_left = e && atoi(e) > 0 ? atoi(e) : 0;
    }
    if (late_left > 0 && late_n < 8) {
        late_left--;
        late_held[late_n++] = a;
        a = NULL;
    } else {
        for (; late_n > 0; late_n--)
            out[n++] = late_held[late_n - 1];
    }
    pthread_mutex_unlock(&late_mu);
    if (a)
        ack_post(rt, a);
    for (unsigned i = 0; i < n; i++) { /* only through the runtime that held them (alive) */
        if (out[i]->rt == rt)
            ack_post(rt, out[i]);
        else
            free(out[i]);
    }
}

/* [app] Reads the staged slot into a registered bounce buffer, verifies length and checksum
 * against the route, copies into the caller's buffers, then ACKs the token. */
static int remote_transfer(struct cread *r, uint64_t deadline_ms)
{
    kvm_rt_t *rt = r->rt;
    struct tp_segment *seg = NULL;
    int rc = kvm_rt_seg_open(rt, r->data_addr, r->st_seg, r->st_grant, &seg);
    uint8_t *buf = rc ? NULL : malloc(r->len ? r->len : 1);
    if (!rc && !buf)
        rc = KVMESH_ENOMEM;
    bool reg = false;
    if (!rc && (rc = tp_register_memory(rt->tp, buf, r->len ? r->len : 1)) == 0)
        reg = true;
    struct tp_batch *b = NULL;
    if (!rc)
        rc = tp_batch_new(rt->tp, 1, &b);
    if (!rc && r->len) {
        struct tp_request rq = {.op = TP_READ,
                                .local = buf,
                                .length = r->len,
                                .segment = seg,
                                .remote_offset = r->st_off,
                                .token = r->st_grant};
        rc = tp_submit(b, &rq, 1);
        if (!rc && tp_batch_wait(b, (int)kvm_deadline_left_ms(deadline_ms)) != 0) {
            tp_batch_abort(b);
            rc = KVMESH_ETIMEDOUT;
        }
        if (!rc)
            rc = tp_status(b, 0, NULL);
    }
    if (b)
        tp_batch_free(b); /* the transfer is terminal here */
    if (reg) {
        tp_unregister_memory(rt->tp, buf);
        kvm_waitq_signal(&rt->wq_reg); /* a registration slot is free (data.c) */
    }
    if (!rc && kvm_checksum(buf, r->len) != r->checksum)
        rc = KVMESH_ECHECKSUM; /* never hand out bytes the route does not vouch for */
    if (!rc) {
        uint64_t pos = 0;
        for (int i = 0; i < r->iovcnt && pos < r->len; i++) {
            size_t k =
                r->iov[i].iov_len < r->len - pos ? r->iov[i].iov_len : (size_t)(r->len - pos);
            memcpy(r->iov[i].iov_base, buf + pos, k);
            pos += k;
        }
    }
    free(buf);
    struct cack *a = malloc(sizeof(*a));
    if (a) {
        *a = (struct cack){.rt = rt, .owner = r->owner, .token = r->st_token};
        ack_or_hold(rt, a);
    }
    return rc;
}

/* [app] Posts r (refs = 2) to the loop and waits for it, bounded by the deadline. */
static int cread_run(struct cread *r, env_cb start, uint64_t deadline_ms)
{
    kvm_rt_t *rt = r->rt;
    if (env_post(rt->env, start, r) != 0) {
        r->refs = 1;
        return KVMESH_EAGAIN;
    }
    struct timespec ts;
    env_clock_after(CLOCK_MONOTONIC, kvm_deadline_left_ms(deadline_ms), &ts);
    pthread_mutex_lock(&r->mu);
    int w = 0;
    while (!r->done && w == 0)
        w = pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    int rc = r->done ? r->rc : KVMESH_ETIMEDOUT;
    if (!r->done)
        r->abandoned = true;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static struct cread *cread_new(kvm_rt_t *rt, const kvm_route_t *route, const struct iovec *iov,
                               int iovcnt, uint64_t deadline_ms, bool remote)
{
    struct cread *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->refs = 2;
    r->rt = rt;
    r->iov = iov;
    r->iovcnt = iovcnt;
    r->len = route->length;
    r->checksum = route->checksum;
    r->owner = route->cold.owner;
    r->remote = remote;
    /* Tests only: KVMESH_TEST_COLD_READ_VERSION=N sends request version N (an older reader as
     * the owner sees it); read here, on the calling thread */
    const char *tv = remote ? getenv("KVMESH_TEST_COLD_READ_VERSION") : NULL;
    r->wire_ver =
        tv && atoi(tv) > 0 && atoi(tv) < 256 ? (uint8_t)atoi(tv) : STORE_COLD_READ_VERSION;
    r->version_h = version_u64(&route->version);
    r->locator_fp = kvm_cold_backing_fingerprint(&route->cold);
    r->timeout_ms = kvm_deadline_left_ms(deadline_ms);
    if (kvm_ident_copy(&r->ident, &route->ident) != 0) {
        r->refs = 1;
        cread_unref(r);
        return NULL;
    }
    return r;
}

int kvm_cold_read(kvm_rt_t *rt, const kvm_route_t *route, const struct iovec *iov, int iovcnt,
                  uint64_t deadline_ms)
{
    if (route->cold.kind != KVM_COLD_MATERIALIZED)
        return kvm_errf(KVMESH_EUNAVAILABLE, "no hot replica and no materialized cold copy");
    bool remote = !kvm_id128_equal(&route->cold.owner, &rt->self.id);
    if (!remote && !dev_cold(rt))
        return kvm_errf(KVMESH_ENOTSUP, "the object's cold copy is on this runtime's device but "
                                        "its cold tier is off (cold_kind)");
    int rc;
    char err[256] = "";
    uint64_t t0 = env_clock_mono_ns();
    /* Remote: the owner answers backpressure (STAGING_EBACKPRESSURE) while its staging pool is
     * full; retry with a capped backoff until the deadline. */
    for (uint32_t attempt = 0;; attempt++) {
        struct cread *r = cread_new(rt, route, iov, iovcnt, deadline_ms, remote);
        if (!r)
            return KVMESH_ENOMEM;
        rc = cread_run(r, remote ? cread_remote : cread_start, deadline_ms);
        if (rc == 0 && remote)
            rc = remote_transfer(r, deadline_ms);
        snprintf(err, sizeof(err), "%s", r->err);
        cread_unref(r);
        uint64_t left = kvm_deadline_left_ms(deadline_ms);
        if (!remote || rc != STAGING_EBACKPRESSURE || left == 0)
            break;
        obs_count(rt->metrics, cold_restore_retries_total, OBS_NONE, OBS_NONE, 1);
        uint64_t ms = 1ull << (attempt < 6 ? attempt : 6); /* 1 .. 64 ms */
        /* the remote pool frees room on its own clock: a timed pause, ended early by close */
        if (kvm_waitq_pause(&rt->wq_slots, env_clock_mono_ms() + (ms < left ? ms : left)) != 0) {
            rc = kvm_errf(KVMESH_ECLOSED, "the runtime closed during the cold restore");
            break;
        }
    }
    obs_observe(rt->metrics, cold_restore_duration_seconds, OBS_NONE, OBS_NONE,
                env_clock_mono_ns() - t0);
    if (remote) /* (a local restore is counted in cread_finish) */
        obs_count(rt->metrics, cold_restores_total, rc == 0 ? OBS_OUTCOME_OK : OBS_OUTCOME_ERROR,
                  OBS_NONE, 1);
    if (rc == KVMESH_ECHECKSUM || rc == KVMESH_ECORRUPT)
        return kvm_errf(rc, "the cold copy failed verification (length or checksum); no bytes "
                            "were returned");
    if (rc == KVMESH_ETIMEDOUT)
        return kvm_errf(rc, "the cold restore did not finish by the request deadline");
    if (rc == STAGING_EBACKPRESSURE && remote)
        return kvm_errf(rc,
                        "the cold copy's owner kept its staging pool full until the deadline "
                        "(%s); retry later or raise cold_staging_slots/cold_staging_bytes "
                        "there",
                        err);
    if (rc && remote && err[0])
        return kvm_errf(rc, "remote cold restore: %s", err);
    return rc;
}

/* ---- batch restore: the local group and the helpers of cold_batch.c ------------------------- */

struct lbatch {
    struct lbatch *next, *prev; /* g->lbatches */
    struct kvm_cold *g;
    kvm_cold_local_cb cb;
    void *arg;
};

static void lb_unlink(struct lbatch *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        l->g->lbatches = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->next = l->prev = NULL;
}

static void lb_done(void *arg, cold_batch_item_t *items, size_t n)
{
    (void)items, (void)n;
    struct lbatch *l = arg;
    lb_unlink(l);
    l->cb(l->arg, 0);
    free(l);
}

int kvm_cold_local_batch(kvm_rt_t *rt, cold_batch_item_t *items, size_t n, kvm_cold_local_cb cb,
                         void *arg, size_t *jobs)
{
    struct kvm_cold *g = dev_cold(rt);
    if (!g || !g->c || g->closed)
        return kvm_errf(KVMESH_ENOTSUP, "the object's cold copy is on this runtime's device but "
                                        "its cold tier is not open");
    struct lbatch *l = calloc(1, sizeof(*l));
    if (!l)
        return KVMESH_ENOMEM;
    *l = (struct lbatch){.g = g, .cb = cb, .arg = arg, .next = g->lbatches};
    if (l->next)
        l->next->prev = l;
    g->lbatches = l;
    int rc = cold_restore_batch(g->c, items, n, lb_done, l, jobs); /* (lb_done may run inside) */
    if (rc) {
        lb_unlink(l);
        free(l);
    }
    return rc;
}

void kvm_cold_ack_post(kvm_rt_t *rt, const kvm_runtime_id_t *owner, uint64_t token)
{
    struct cack *a = malloc(sizeof(*a));
    if (!a)
        return; /* the owner's expiry recycles the slot */
    *a = (struct cack){.rt = rt, .owner = *owner, .token = token};
    ack_post(rt, a);
}

uint64_t kvm_cold_version_hash(const kvm_route_version_t *v)
{
    return version_u64(v);
}

uint64_t kvm_cold_namespace_hash(const kvm_ident_t *id)
{
    return namespace_u64(id);
}

/* ---- close -------------------------------------------------------------------------------- */

void kvm_cold_close(kvm_rt_t *rt)
{
    struct kvm_cold *g = rt->cold;
    kvm_owner_set_cold_hooks(rt, NULL);
    if (!g)
        return;
    rt->cold = NULL;
    g->closed = true;
    if (g->tick_timer)
        env_timer_cancel(rt->env, g->tick_timer);
    g->tick_timer = 0;
    if (g->c)
        cold_close(g->c); /* no callback of ours runs after this */
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->th_started)
        pthread_join(g->th, NULL); /* it finished every queued job */
    pthread_mutex_lock(&g->mu);
    bool posted = g->drain_posted; /* a drain_done still queued on the loop runs after us */
    pthread_mutex_unlock(&g->mu);
    if (posted)
        g->refs++; /* released by that drain_done */
    drain_jobs(g); /* their done()s, here on the loop */
    for (uint32_t i = 0; i < g->ndev; i++) {
        struct gdev *d = &g->devs[i];
        kvm_cold_health_free(d->health); /* its probe's done() ran in drain_jobs */
        d->health = NULL;
        if (d->be_open)
            cold_backend_close(&d->be);
        d->be_open = false;
    }
    while (g->reclaims) { /* their callbacks no longer run */
        struct reclaim_ctx *r = g->reclaims;
        g->reclaims = r->next;
        if (r->next)
            r->next->prev = NULL;
        if (r->on_close)
            r->on_close(r);
        else
            free(r);
    }
    while (g->claims) { /* their callbacks no longer run; a CAS in flight frees its own */
        struct claim *cl = g->claims;
        claim_unlink(cl);
        if (!cl->in_route)
            claim_free(cl);
    }
    while (g->durables) { /* their core callbacks no longer run */
        struct durable *d = g->durables;
        d->in_job = d->in_get = false;
        durable_answer(d, KVMESH_ECANCELED,
                       "cold_write_through: the runtime closed before the cold copy committed; "
                       "the put is not durable");
    }
    while (g->reads)
        cread_finish(g->reads, KVMESH_ECANCELED, NULL, 0);
    while (g->lbatches) { /* the worker finished their reads: the buffers are free again */
        struct lbatch *l = g->lbatches;
        lb_unlink(l);
        l->cb(l->arg, KVMESH_ECANCELED);
        free(l);
    }
    while (g->serving) { /* their callbacks no longer run: the callers time out */
        struct srv_read *sv = g->serving;
        rpc_reply_drop(sv->reply);
        if (sv->stage == SRV_LOOKUP) { /* its lookup still answers: freed then */
            srv_unlink(sv);
            sv->orphan = true;
        } else {
            srv_free(sv);
        }
    }
    while (g->bserving) { /* their callbacks no longer run: the callers time out */
        struct srv_batch *sb = g->bserving;
        rpc_reply_drop(sb->reply);
        if (sb->lookups > 0) { /* its lookups still answer: freed by the last */
            sb_unlink(sb);
            sb->orphan = true;
        } else {
            sb_free(sb);
        }
    }
    stg_close(g);
    g_unref(g); /* freed when the last route call in flight answered */
}
