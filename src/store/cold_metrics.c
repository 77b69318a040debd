// SPDX-License-Identifier: Apache-2.0
/*
 * cold_metrics.c — the per-device series of a runtime's cold tier (cold_metrics.h). Gauges are
 * set from the device record of the view (what metadata holds: capacity, used, reserved, health);
 * counters add the growth of the core's per-device counters and of the health table's device
 * errors since the last export, so a counter never goes backwards.
 */
#include "store/cold_metrics.h"

#include "core/util.h"
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
