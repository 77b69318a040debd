// SPDX-License-Identifier: Apache-2.0
/*
 * cold_metrics.c — the per-device series of a runtime's cold tier (cold_metrics.h). Gauges are
 * set from the device record of the view (what metadata holds: capacity, used, reserved, health);
 * counters add the growth of the core's per-device counters and of the health table's device
 * errors since the last export, so a counter never goes backwards. Also the export of a
 * runtime's whole cold tier after every device view refresh (cold_int.h kvm_cold_export_stats:
 * the core's counters, the summed device gauges, each device's series) and of its staging pool
 * (kvm_cold_stg_export, from the staging expiry on the tick).
 */
#include "store/cold_metrics.h"

#include "core/util.h"
#include "store/cold_int.h"
#include "store/store_config.h"

_Static_assert(OBS__N_dev == KVM_STORE_COLD_DEVICES_MAX,
               "the `device` label has one value per configurable cold device");

/* The growth of a counter since the last export; remembers now. */
static uint64_t delta(uint64_t now, uint64_t *seen)
{
    uint64_t d = now > *seen ? now - *seen : 0;
    if (now > *seen)
        *seen = now;
    return d;
}

void kvm_cold_metrics_device(struct obs_registry *m, uint32_t idx, const cold_device_t *rec,
                             const cold_dev_stats_t *now, uint64_t errors,
                             kvm_cold_dev_exported_t *seen)
{
    KVM_ASSERT(idx < KVM_STORE_COLD_DEVICES_MAX && now && seen);
    obs_count(m, cold_dev_offloads_total, idx, OBS_OUTCOME_OK,
              delta(now->offloads_ok, &seen->st.offloads_ok));
    obs_count(m, cold_dev_offloads_total, idx, OBS_OUTCOME_ERROR,
              delta(now->offload_parked, &seen->st.offload_parked));
    obs_count(m, cold_dev_restores_total, idx, OBS_OUTCOME_OK,
              delta(now->restores, &seen->st.restores));
    obs_count(m, cold_dev_restores_total, idx, OBS_OUTCOME_ERROR,
              delta(now->restore_failed, &seen->st.restore_failed));
    obs_count(m, cold_dev_errors_total, idx, OBS_NONE, delta(errors, &seen->errors));
    obs_gauge_set(m, cold_dev_health, idx, OBS_NONE, rec ? (int64_t)rec->health : 0);
    if (!rec)
        return;
    obs_gauge_set(m, cold_dev_capacity_bytes, idx, OBS_NONE, (int64_t)rec->capacity);
    obs_gauge_set(m, cold_dev_used_bytes, idx, OBS_NONE, (int64_t)rec->used);
    obs_gauge_set(m, cold_dev_reserved_bytes, idx, OBS_NONE, (int64_t)rec->reserved);
}

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

void kvm_cold_export_stats(struct kvm_cold *g)
{
    kvm_rt_t *rt = g->rt;
    cold_stats_t s;
    cold_get_stats(g->c, &s);
#define EXPORT_DELTA(field, family, outcome)                                                       \
    if (s.field > g->exported.field)                                                               \
        obs_count(rt->metrics, family, outcome, OBS_NONE, s.field - g->exported.field);
    EXPORT_DELTA(offloads_ok, cold_offloads_total, OBS_OUTCOME_OK)
    EXPORT_DELTA(offload_parked, cold_offloads_total, OBS_OUTCOME_ERROR)
    EXPORT_DELTA(reclaims_done, cold_reclaims_total, OBS_OUTCOME_OK)
    EXPORT_DELTA(reclaims_deferred, cold_reclaims_total, OBS_OUTCOME_ERROR)
    EXPORT_DELTA(offloads_released, cold_offloads_released_total, OBS_NONE)
    EXPORT_DELTA(offload_retries, cold_offload_retries_total, OBS_NONE)
    EXPORT_DELTA(rate_waits, cold_offload_rate_waits_total, OBS_NONE)
    EXPORT_DELTA(gate_changes, cold_offload_gate_changes_total, OBS_NONE)
    EXPORT_DELTA(urgent_jobs, cold_offload_urgent_jobs_total, OBS_NONE)
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

/* [loop] The pool's counters as metrics (kvmesh_cold_staging_*). */
void kvm_cold_stg_export(struct kvm_cold *g)
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
