// SPDX-License-Identifier: Apache-2.0
/*
 * cold_glue.c — opens and closes the store's cold tier (rt->cold, struct kvm_cold in
 * cold_int.h): the devices (struct gdev, up to KVM_STORE_COLD_DEVICES_MAX: backend, health
 * counter; docs/cold.md "Several devices") and their registration in metadata, the one cold_t
 * they are attached to, the staging pool and the worker thread, the reclaim planner of
 * cold_kind = off, and the owner's hooks into the cold tier; then the tick that keeps it going
 * (device view refresh and metrics, reconciliation passes, DRAM pressure, staging expiry,
 * write-through deadlines, device health, maintenance). The rest of the wiring lives in the
 * cold_*.c files cold_int.h lists; docs/cold.md "Store wiring" and "Offload modes" describe
 * the calls, cold_glue.h says which thread calls what.
 *
 * Close: cold_close first (no callback of the core runs after it), then the worker is drained
 * and joined, the backends closed, and every part fails or frees what it still holds.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env/clock.h"
#include "store/cold_int.h"

#define COLD_GLUE_TICK_MS    200 /* view refresh, counters, done-list backstop */
#define COLD_GLUE_RECON_MS   1000
#define COLD_GLUE_RECON_PAGE 64

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

static void refreshed(void *arg, int rc)
{
    (void)rc; /* the view stays as it was; the next tick tries again */
    struct kvm_cold *g = arg;
    g->refreshing = false;
    if (g->c)
        kvm_cold_export_stats(g);
}

static void reconciled(void *arg, const cold_recon_report_t *r)
{
    (void)r;
    struct kvm_cold *g = arg;
    g->reconciling = false;
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
    kvm_cold_exec_drain(g); /* backstop when a post failed */
    kvm_cold_report_pressure(g);
    if (!g->refreshing && !atomic_load(&freeze_view) && cold_view_refresh(g->c, refreshed, g) == 0)
        g->refreshing = true;
    uint64_t now = env_clock_mono_ms();
    if (!g->reconciling && now - g->last_recon_ms >= COLD_GLUE_RECON_MS) {
        g->last_recon_ms = now;
        if (cold_recon_pass(g->c, COLD_GLUE_RECON_PAGE, reconciled, g) == 0)
            g->reconciling = true;
    }
    kvm_cold_stg_expire(g);
    kvm_cold_durable_expire(g);
    for (uint32_t i = 0; i < g->ndev; i++)
        kvm_cold_health_tick(g->devs[i].health, g->c, &g->devs[i].id, now, kvm_cold_exec_enqueue,
                             g);
    kvm_cold_clean_submit(g);
    g->tick_timer = env_timer_start(g->rt->env, COLD_GLUE_TICK_MS * 1000000ull, tick, g);
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
    kvm_cold_export_stats(g);
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

/* The configuration every cold core of this runtime gets (the planner's and the device's; the
 * device's adds the scheduling knobs). */
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
    g->exec =
        (cold_exec_ops_t){.submit = kvm_cold_exec_submit, .ctx = g}; /* (never used: no device) */
    cold_route_ops_t ops = kvm_cold_route_ops(g);
    cold_config_t cc = core_config(g);
    if (cold_new(&g->c, rt->env, rt->meta, &ops, &cc) != 0) {
        kvm_cold_unref(g);
        return;
    }
    rt->cold = g;
}

/* The configured devices: 0 from cold_kind/cold_root/cold_capacity, 1.. from cold_devices. */
static uint32_t device_configs(const struct kvm_store_config *cfg,
                               struct kvm_store_cold_device cds[KVM_STORE_COLD_DEVICES_MAX])
{
    uint32_t ncfg =
        1 + (cfg->n_cold_extra < KVM_STORE_COLD_DEVICES_MAX - 1 ? cfg->n_cold_extra
                                                                : KVM_STORE_COLD_DEVICES_MAX - 1);
    memset(&cds[0], 0, sizeof(cds[0]));
    cds[0].kind = cfg->cold_kind;
    snprintf(cds[0].root, sizeof(cds[0].root), "%s", cfg->cold_root);
    cds[0].capacity = cfg->cold_capacity;
    for (uint32_t i = 1; i < ncfg; i++)
        cds[i] = cfg->cold_extra[i - 1];
    return ncfg;
}

/* Opens the backend of device i (g->ndev = i + 1 once open) and names it; an error with m
 * saying what to fix. */
static int open_device(struct kvm_cold *g, uint32_t i, const struct kvm_store_cold_device *cd,
                       char *m, size_t cap)
{
    const struct kvm_store_config *cfg = &g->rt->cfg;
    struct gdev *d = &g->devs[i];
    cold_backend_err_t err = {{0}};
    cold_backend_config_t bc = {
        .kind = cd->kind == KVM_STORE_COLD_EXTENT ? COLD_BACKEND_EXTENT : COLD_BACKEND_LOCALDIR,
        .root = cd->root,
        .capacity_bytes = cd->capacity,
        .require_nfs = cfg->cold_nfs,
        .segment_bytes = cfg->cold_segment_bytes,
    };
    int rc = cold_backend_open(&bc, &d->be, &err);
    if (rc) {
        snprintf(m, cap, "cold tier: device %u: %s", i, err.msg[0] ? err.msg : kvmesh_strerror(rc));
        return rc;
    }
    d->be_open = true;
    g->ndev = i + 1;
    /* The device id names the directory: the same root keeps its id across restarts. */
    char canon[PATH_MAX];
    const char *root = realpath(cd->root, canon) ? canon : cd->root;
    size_t rl = strlen(root);
    d->id = kvm_id128_from_u64(kvm_hash_seeded(root, rl, 0x636f6c64u),
                               kvm_hash_seeded(root, rl, 0x64657669u));
    d->kind = bc.kind;
    d->capacity = cd->capacity;
    int rn = snprintf(d->root, sizeof(d->root), "%s", root);
    if (rn < 0 || (size_t)rn >= sizeof(d->root)) {
        snprintf(m, cap,
                 "cold tier: device %u: its directory resolves to a path of %zu bytes (%.64s...); "
                 "at most %zu: use a shorter path or symbolic link target",
                 i, rl, root, sizeof(d->root) - 1);
        return KVMESH_ECONFIG;
    }
    snprintf(d->tags, sizeof(d->tags), "%s", cd->tags);
    for (uint32_t k = 0; k < i; k++)
        if (kvm_id128_equal(&g->devs[k].id, &d->id)) {
            snprintf(m, cap,
                     "cold tier: device %u (%s) is the directory of device %u; give each "
                     "device its own directory",
                     i, cd->root, k);
            return KVMESH_ECONFIG;
        }
    return 0;
}

/* The staging pool, the owner side's handlers, the worker, the cold core with every device
 * attached behind its health table; an error with m saying what failed. */
static int core_start(struct kvm_cold *g, char *m, size_t cap)
{
    kvm_rt_t *rt = g->rt;
    const struct kvm_store_config *cfg = &rt->cfg;
    int rc = kvm_cold_stg_open(g);
    if (rc) {
        snprintf(m, cap, "cold tier: %s", kvmesh_last_error());
        return rc;
    }
    kvm_cold_serve_register(rt);
    kvm_cold_exec_start(g);
    g->exec = (cold_exec_ops_t){.submit = kvm_cold_exec_submit, .ctx = g};
    cold_route_ops_t ops = kvm_cold_route_ops(g);
    ops.promote = kvm_cold_promote;
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
    if (rc)
        snprintf(m, cap, "cold tier: cannot start the cold core: %s", kvmesh_last_error());
    return rc;
}

void kvm_cold_open(kvm_rt_t *rt, const kvm_cold_owner_ops_t *owner, kvm_done_cb cb)
{
    kvm_owner_set_cold_hooks(rt, &owner_hooks); /* the owner's cold calls (store.h) */
    KVM_ASSERT(owner && owner->reserve && owner->commit && owner->release);
    if (rt->cfg.cold_kind == KVM_STORE_COLD_OFF) {
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
    struct kvm_store_cold_device cds[KVM_STORE_COLD_DEVICES_MAX];
    g->ncfg = device_configs(&rt->cfg, cds);
    int rc = 0;
    for (uint32_t i = 0; !rc && i < g->ncfg; i++)
        rc = open_device(g, i, &cds[i], m, sizeof(m));
    if (!rc)
        rc = core_start(g, m, sizeof(m));
    if (rc) {
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
    kvm_cold_exec_stop(g);
    for (uint32_t i = 0; i < g->ndev; i++) {
        struct gdev *d = &g->devs[i];
        kvm_cold_health_free(d->health); /* its probe's done() ran in kvm_cold_exec_stop */
        d->health = NULL;
        if (d->be_open)
            cold_backend_close(&d->be);
        d->be_open = false;
    }
    kvm_cold_reclaims_close(g);
    kvm_cold_claims_close(g);
    kvm_cold_durable_close(g);
    kvm_cold_reads_close(g);
    kvm_cold_serve_close(g);
    kvm_cold_stg_close(g);
    kvm_cold_unref(g); /* freed when the last route call in flight answered */
}
