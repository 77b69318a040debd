/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_metrics.h — the per-device series of a runtime's cold tier (docs/cold.md "Several
 * devices", docs/operations.md): kvmesh_cold_dev_{capacity,used,reserved}_bytes,
 * kvmesh_cold_dev_health, kvmesh_cold_dev_{offloads,restores}_total{result} and
 * kvmesh_cold_dev_errors_total, each labelled `device` = the device's index in the runtime's
 * configuration (0 = cold_kind/cold_root, 1..7 = the cold_devices entries). The label is bounded
 * by KVM_STORE_COLD_DEVICES_MAX; indexes past the configured devices stay 0.
 *
 * [loop] only (called from the glue's export after every device view refresh).
 */
#ifndef KVMESH_STORE_COLD_METRICS_H
#define KVMESH_STORE_COLD_METRICS_H

#include <stdint.h>

#include "cold/cold.h"
#include "obs/metrics.h"

/* What was already added to the registry's counters for one device (the exporter adds deltas).
 * Owned by the caller, zeroed before the first export. */
typedef struct kvm_cold_dev_exported {
    cold_dev_stats_t st;
    uint64_t errors;
} kvm_cold_dev_exported_t;

/* Exports device `idx` (< KVM_STORE_COLD_DEVICES_MAX): rec is its record in the device view
 * (NULL when missing: health 0, the byte gauges unchanged), now its core counters, errors the
 * device errors its health table counted so far. Updates *seen. */
void kvm_cold_metrics_device(struct obs_registry *m, uint32_t idx, const cold_device_t *rec,
                             const cold_dev_stats_t *now, uint64_t errors,
                             kvm_cold_dev_exported_t *seen);

#endif
