/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.h — the per-tenant counters table behind /stats?tenant= and the /stats top-N section.
 *
 * A fixed-capacity open-addressing hash table keyed by tenant id, maintained incrementally by
 * the runtime on every request (obs_tenant_table_record): exact lookup is one hash probe
 * sequence, never a scan. Capacity is fixed at creation (at most OBS_TENANT_TABLE_MAX); tenants
 * that arrive after it is full are not tracked individually: their traffic is added to the
 * `untracked` aggregate and lookups for them answer "not tracked". Entries are never removed
 * while the runtime lives, so a tracked tenant's counters are exact since its first request.
 *
 * Top-N: the table keeps the OBS_TENANT_TOP_K tenants with the most payload bytes in a small
 * sorted array, updated on each record (counters only grow, so the array stays exact); /stats
 * returns its first N entries without touching the rest of the table.
 *
 * Threading: every call is thread-safe (one mutex per table, held for a probe and a few adds).
 * Ownership: the table copies tenant ids; the creator destroys it after the HTTP server that
 * reads it has stopped.
 */
#ifndef KVMESH_OBS_STATS_H
#define KVMESH_OBS_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"

#define OBS_TENANT_TABLE_MAX 65536 /* largest table capacity */
#define OBS_TENANT_TOP_K     16    /* tenants kept ranked by bytes; /stats top=N <= this */

struct obs_tenant_counters {
    uint64_t requests, errors;
    uint64_t bytes_in, bytes_out;  /* payload written by puts / read by gets */
    int64_t objects, stored_bytes; /* maintained by the runtime (+ on publish, - on reclaim) */
    uint64_t quota_rejections;
};

struct obs_tenant_table;

/* capacity: 1..OBS_TENANT_TABLE_MAX tenants. */
int obs_tenant_table_create(size_t capacity, struct obs_tenant_table **out);
void obs_tenant_table_destroy(struct obs_tenant_table *t);

/* Adds `delta` to the tenant's counters (creating the entry while there is room). Returns 0,
 * or KVMESH_ENOSPC when the tenant is not tracked (its delta went to the untracked aggregate),
 * or KVMESH_EINVAL for an empty or over-long id. */
int obs_tenant_table_record(struct obs_tenant_table *t, const char *id, size_t len,
                            const struct obs_tenant_counters *delta);

/* Exact lookup. Returns 0 with *out filled, or KVMESH_ENOENT when the tenant is not tracked. */
int obs_tenant_table_lookup(struct obs_tenant_table *t, const char *id, size_t len,
                            struct obs_tenant_counters *out);

struct obs_tenant_top_ent {
    char id[OBS_TENANT_ID_MAX + 1];
    struct obs_tenant_counters c;
};
/* Copies up to n (<= OBS_TENANT_TOP_K) top tenants by bytes_in + bytes_out, descending.
 * Returns the number copied. */
size_t obs_tenant_table_top(struct obs_tenant_table *t, struct obs_tenant_top_ent *out, size_t n);

struct obs_tenant_table_info {
    size_t capacity, tracked;
    struct obs_tenant_counters untracked;
    uint64_t untracked_requests_from_new_tenants; /* records refused for lack of room */
    uint64_t lookups, lookup_probes; /* exact lookups and hash slots they inspected in total */
};
void obs_tenant_table_info(struct obs_tenant_table *t, struct obs_tenant_table_info *out);

#endif
