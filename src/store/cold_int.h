/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_int.h — private to the store's cold-tier wiring (src/store/cold_*.c; the public side is
 * cold_glue.h). Owns the shared state, struct kvm_cold (rt->cold) with its devices (struct gdev)
 * and the worker's queue nodes, a few static inline helpers every part uses, and the prototypes
 * the parts call each other through. The parts, each calling only those further down this list
 * (docs/architecture.md "Store layering"; check_store_layers.py):
 *
 *   cold_glue.c     open/close, the tick, the reclaim planner of cold_kind = off, the owner hooks
 *   cold_place.c    the device view and placement (PendingOffload on writes), queuing the offload
 *                   after a publication or a remote commit, the reclaim gate before a CAS
 *   cold_durable.c  write-through puts waiting for their cold copy
 *   cold_evict.c    last-hot eviction and the eviction-triggered claims (cold_offload_mode = evict)
 *   cold_read.c     cold-only reads, the reader side (local restore, remote restore, ACKs), the
 *                   local group of a batch restore
 *   cold_serve.c    the owner side of remote restores: the staging pool, STORE_RPC_COLD_READ,
 *                   _READ_BATCH and _ACK, and the re-promotion after a restore
 *   cold_route.c    the route callbacks the core calls (lookup, read_hot, materialize, evict)
 *   cold_metrics.c  the core's counters and the staging pool's as metrics, per-device series
 *   cold_exec.c     the cold I/O worker thread and the background maintenance jobs
 *
 * Threads: everything is [loop] unless marked; the worker's queue is under g->mu.
 */
#ifndef KVMESH_STORE_COLD_INT_H
#define KVMESH_STORE_COLD_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "cold/cold.h"
#include "cold/cold_backend_open.h"
#include "cold/staging.h"
#include "core/hash.h"
#include "core/util.h"
#include "store/cold_glue.h"
#include "store/cold_health.h"
#include "store/cold_metrics.h"

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

/* Drops one reference; the last frees g (the runtime holds one while open, every route call,
 * promotion, commit lookup and claim CAS in flight another). */
static inline void kvm_cold_unref(struct kvm_cold *g)
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
static inline struct kvm_cold *kvm_cold_dev(kvm_rt_t *rt)
{
    struct kvm_cold *g = rt->cold;
    return g && !g->planner ? g : NULL;
}

/* Whether dev is one of this runtime's devices. */
static inline bool kvm_cold_own_dev(const struct kvm_cold *g, const kvm_tier_id_t *dev)
{
    for (uint32_t i = 0; i < g->ndev; i++)
        if (kvm_id128_equal(&g->devs[i].id, dev))
            return true;
    return false;
}

/* The DRAM used fraction, for the watermark gate (cold_config_t.high_watermark). */
static inline void kvm_cold_report_pressure(struct kvm_cold *g)
{
    kvm_rt_t *rt = g->rt;
    if (g->c && rt->capacity)
        cold_set_pressure(g->c, (double)rt->used / (double)rt->capacity);
}

/* The offload job of r's PendingOffload backing (callers add done, done_arg, why). r must outlive
 * the submit (the core copies what it keeps). */
static inline cold_job_t kvm_cold_route_job(const kvm_route_t *r, bool urgent)
{
    return (cold_job_t){.ident = &r->ident,
                        .cold_op = r->cold.cold_op,
                        .content_op = r->content_op,
                        .device = r->cold.tier,
                        .length = r->length,
                        .checksum = r->checksum,
                        .urgent = urgent};
}

/* The hashes a cold read request carries (cold_glue.h kvm_cold_version_hash and
 * kvm_cold_namespace_hash): the reader computes them, the owner's staging validation compares. */
static inline uint64_t kvm_cold_version_u64(const kvm_route_version_t *v)
{
    return kvm_hash_seeded(v, sizeof(*v), 0x76657273u);
}

static inline uint64_t kvm_cold_namespace_u64(const kvm_ident_t *id)
{
    size_t n = id->enc_len > id->key_len ? id->enc_len - id->key_len : 0;
    return kvm_hash_seeded(id->enc, n, 0x6e73u);
}

/* The intrusive doubly-linked lists of struct kvm_cold (serving, reads, claims ...): push at the
 * head, unlink from anywhere. node is evaluated several times: pass a plain variable. */
#define KVM_COLD_LIST_PUSH(head, node, next, prev)                                                 \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (head);                                                                     \
        if ((node)->next)                                                                          \
            (node)->next->prev = (node);                                                           \
        (head) = (node);                                                                           \
    } while (0)
#define KVM_COLD_LIST_UNLINK(head, node, next, prev)                                               \
    do {                                                                                           \
        if ((node)->prev)                                                                          \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (head) = (node)->next;                                                                 \
        if ((node)->next)                                                                          \
            (node)->next->prev = (node)->prev;                                                     \
        (node)->next = (node)->prev = NULL;                                                        \
    } while (0)

/* ---- cold_exec.c: the cold I/O worker and maintenance -----------------------------------------
 */

/* Starts the worker thread (g->th_started when it runs; without it jobs run inline). */
void kvm_cold_exec_start(struct kvm_cold *g);
/* [any] Queues job for the worker; false (nothing queued) without a worker or memory. ctx is g
 * (the shape of kvm_cold_enqueue_fn, the health probe's and the remote hot read's queue). */
bool kvm_cold_exec_enqueue(void *ctx, cold_exec_t *job);
/* The core's jobs (cold_exec_ops_t.submit, ctx g): on the worker, or inline when it cannot. */
void kvm_cold_exec_submit(void *ctx, cold_exec_t *io);
/* done() of every finished job (the tick's backstop when a posted drain failed). */
void kvm_cold_exec_drain(struct kvm_cold *g);
/* At close, after cold_close: the worker finishes what is queued and exits, is joined, and the
 * remaining done()s run here. */
void kvm_cold_exec_stop(struct kvm_cold *g);
/* From the tick: per device, one maintain() job at a time, only on the worker. */
void kvm_cold_clean_submit(struct kvm_cold *g);

/* ---- cold_route.c: the route callbacks ------------------------------------------------------ */

/* The route callbacks every cold core of this runtime gets (promote is added by the device's). */
cold_route_ops_t kvm_cold_route_ops(struct kvm_cold *g);
/* The exact lookup callback (cold_route_ops_t.lookup, ctx g), also the owner side's lookup. */
void kvm_cold_route_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg);

/* ---- cold_metrics.c: counters as metrics ------------------------------------------------------
 */

/* The core's counters (deltas since the last export) and gauges, the per-device series. */
void kvm_cold_export_stats(struct kvm_cold *g);
/* The staging pool's counters as metrics (kvmesh_cold_staging_*). */
void kvm_cold_stg_export(struct kvm_cold *g);

/* ---- cold_serve.c: the owner side of remote restores ------------------------------------------
 */

/* The staging segment and pool: cold_staging_bytes of registered memory, cold_staging_slots. */
int kvm_cold_stg_open(struct kvm_cold *g);
void kvm_cold_stg_close(struct kvm_cold *g);
/* Expiry: fences the tokens past their deadline and revokes their grants (from the tick). */
void kvm_cold_stg_expire(struct kvm_cold *g);
/* Registers the STORE_RPC_COLD_READ, _READ_BATCH and _ACK handlers on rt's endpoint. */
void kvm_cold_serve_register(kvm_rt_t *rt);
/* At close: drops the remote restores this owner serves (their callers time out). */
void kvm_cold_serve_close(struct kvm_cold *g);
/* The re-promotion after a restore (cold_route_ops_t.promote, ctx g). */
void kvm_cold_promote(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                      const void *buf, uint64_t length, cold_rc_cb cb, void *arg);

/* ---- the closes of the store paths (their callbacks no longer run) --------------------------- */

void kvm_cold_reclaims_close(struct kvm_cold *g); /* cold_place.c: pending reclaim plans */
void kvm_cold_claims_close(struct kvm_cold *g);   /* cold_evict.c: claims in progress */
void kvm_cold_durable_close(struct kvm_cold *g);  /* cold_durable.c: ECANCELED to the waits */
void kvm_cold_reads_close(struct kvm_cold *g);    /* cold_read.c: restores and local batches */
/* cold_durable.c: the tick's deadline sweep of local waits (a remote wait's timer has its own) */
void kvm_cold_durable_expire(struct kvm_cold *g);

#endif
