/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_scenarios.c — the scenario registry: every scenario kvmesh-sim knows, in --list order.
 * To add one: define `const sim_scenario_t scen_NAME` in tests/sim/scen_NAME.c, declare it
 * below and add it to the table (explicit on purpose: constructor registration would be dropped
 * by the linker for objects nothing else references in a static library).
 */
#include "sim.h"

#include <string.h>

extern const sim_scenario_t scen_toy_register;
extern const sim_scenario_t scen_transport;
extern const sim_scenario_t scen_fair_sched;
extern const sim_scenario_t scen_staging_late_transfer;
extern const sim_scenario_t scen_staging_late_ack;
extern const sim_scenario_t scen_staging_cancel;
extern const sim_scenario_t scen_staging_promotion_expiry;
extern const sim_scenario_t scen_store_reserve_expiry;
extern const sim_scenario_t scen_store_overwrite_reclaim;
extern const sim_scenario_t scen_store_evict_read;
extern const sim_scenario_t scen_store_owner_death;
extern const sim_scenario_t scen_store_drain;
#ifdef KVMESH_SIM_HAVE_META /* scenarios that need src/meta (see CMakeLists.txt) */
extern const sim_scenario_t scen_meta_cas;
extern const sim_scenario_t scen_route_basic;
extern const sim_scenario_t scen_route_crash;
extern const sim_scenario_t scen_route_partition;
extern const sim_scenario_t scen_route_membership;
extern const sim_scenario_t scen_route_mirror;
extern const sim_scenario_t scen_route_conflict;
extern const sim_scenario_t scen_route_stale;
extern const sim_scenario_t scen_route_restart_all;
extern const sim_scenario_t scen_route_steady;
extern const sim_scenario_t scen_route_batch;
extern const sim_scenario_t scen_route_batch_crash;
extern const sim_scenario_t scen_route_purge;
extern const sim_scenario_t scen_route_purge_failover;
extern const sim_scenario_t scen_quota_crash_before_cas;
extern const sim_scenario_t scen_quota_crash_after_cas;
extern const sim_scenario_t scen_quota_crash_after_finalize;
extern const sim_scenario_t scen_quota_crash_delete_refund;
extern const sim_scenario_t scen_quota_delayed_cas;
extern const sim_scenario_t scen_quota_concurrent;
extern const sim_scenario_t scen_quota_cas_failed;
extern const sim_scenario_t scen_quota_cas_failed_settle;
extern const sim_scenario_t scen_quota_replay_slots;
extern const sim_scenario_t scen_quota_purge_reuse;
extern const sim_scenario_t scen_quota_late_dup;
extern const sim_scenario_t scen_cold_crash_reserve;
extern const sim_scenario_t scen_cold_crash_write;
extern const sim_scenario_t scen_cold_crash_locator;
extern const sim_scenario_t scen_cold_crash_cas;
extern const sim_scenario_t scen_cold_crash_usage;
extern const sim_scenario_t scen_cold_race_hot_placement;
extern const sim_scenario_t scen_cold_race_evict_overwrite;
extern const sim_scenario_t scen_cold_race_overwrite_usage;
extern const sim_scenario_t scen_repair_race;
#endif

const sim_scenario_t *const sim_scenarios[] = {
    &scen_toy_register,
    &scen_transport,
    &scen_fair_sched,
    &scen_staging_late_transfer,
    &scen_staging_late_ack,
    &scen_staging_cancel,
    &scen_staging_promotion_expiry,
    &scen_store_reserve_expiry,
    &scen_store_overwrite_reclaim,
    &scen_store_evict_read,
    &scen_store_owner_death,
    &scen_store_drain,
#ifdef KVMESH_SIM_HAVE_META
    &scen_meta_cas,
    &scen_route_basic,
    &scen_route_crash,
    &scen_route_partition,
    &scen_route_membership,
    &scen_route_mirror,
    &scen_route_conflict,
    &scen_route_stale,
    &scen_route_restart_all,
    &scen_route_steady,
    &scen_route_batch,
    &scen_route_batch_crash,
    &scen_route_purge,
    &scen_route_purge_failover,
    &scen_quota_crash_before_cas,
    &scen_quota_crash_after_cas,
    &scen_quota_crash_after_finalize,
    &scen_quota_crash_delete_refund,
    &scen_quota_delayed_cas,
    &scen_quota_concurrent,
    &scen_quota_cas_failed,
    &scen_quota_cas_failed_settle,
    &scen_quota_replay_slots,
    &scen_quota_purge_reuse,
    &scen_quota_late_dup,
    &scen_cold_crash_reserve,
    &scen_cold_crash_write,
    &scen_cold_crash_locator,
    &scen_cold_crash_cas,
    &scen_cold_crash_usage,
    &scen_cold_race_hot_placement,
    &scen_cold_race_evict_overwrite,
    &scen_cold_race_overwrite_usage,
    &scen_repair_race,
#endif
    NULL,
};

const sim_scenario_t *sim_scenario_find(const char *name)
{
    for (size_t i = 0; sim_scenarios[i]; i++)
        if (strcmp(sim_scenarios[i]->name, name) == 0)
            return sim_scenarios[i];
    return NULL;
}
