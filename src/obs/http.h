/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.h — a runtime's admin HTTP endpoints (libmicrohttpd) and the provider interface through
 * which the runtime supplies health and stats.
 *
 * Endpoints (all responses bounded: /metrics by OBS_METRICS_TEXT_LIMIT, JSON by
 * OBS_HTTP_JSON_LIMIT; the closed label sets and fixed top-N keep them far below):
 *   GET  /                       the status page (HTML, status_page.h) when the client accepts
 *                                text/html; otherwise the JSON endpoint index (also at /api)
 *   GET  /api                    the JSON endpoint index, with whether tracing is on
 *   GET  /cluster                the runtime's view of the cluster (provider.cluster_json):
 *                                members, capacity per owner, shards per route authority
 *   GET  /healthz[?probe=live|ready]   liveness/readiness with reasons; 200 or 503
 *   GET  /metrics                Prometheus text format 0.0.4
 *   GET  /stats[?top=N]          fixed JSON schema: runtime, per-operation requests, tenants
 *                                (top-N by bytes, N <= OBS_TENANT_TOP_K, default 10), tracing
 *   GET  /stats?tenant=ID        exact per-tenant counters from the maintained table
 *   GET  /breakdown[?limit=N]    latency by stage of recent sampled requests (N <= 128)
 *   GET  /trace                  tracing status
 *   POST /trace/sampling?rate=R  set the head-sampling rate (0 <= R <= 1)
 *   POST /trace/capture?action=start&name=F | action=stop   JSONL capture into capture_dir/F
 * Without a tracer (tracing off) /breakdown and /trace* answer 409 with a JSON error naming the
 * configuration fields that turn tracing on (OBS_TRACING_OFF_MSG).
 * Read-only endpoints are open. POST endpoints require `Authorization: Bearer <secret>` when a
 * deployment secret is configured (compared in constant time); otherwise they are open too, so
 * bind to loopback unless a secret is set. Unknown paths: 404; wrong method: 405; a bad query
 * string: 400 with {"error": "..."}.
 *
 * Threading: libmicrohttpd runs the server in its own internal polling thread (one thread, one
 * request at a time); provider callbacks and the tenant table reads run on that thread and must
 * be thread-safe with respect to the runtime (the provider typically reads snapshots or atomics;
 * it must not block on the runtime's loop for long).
 *
 * Ownership: obs_http_start copies the config strings; the provider context, tenant table and
 * tracer are borrowed and must outlive obs_http_stop().
 */
#ifndef KVMESH_OBS_HTTP_H
#define KVMESH_OBS_HTTP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"
#include "obs/stats.h"
#include "obs/trace.h"

#define OBS_HTTP_JSON_LIMIT     (256u << 10)
#define OBS_HTTP_URI_MAX        2048
#define OBS_QUERY_MAX_LEN       1024
#define OBS_QUERY_MAX_PARAMS    8
#define OBS_HEALTH_REASONS_MAX  8
#define OBS_HEALTH_REASON_LEN   160
#define OBS_STATS_TOP_DEFAULT   10
#define OBS_BREAKDOWN_DEFAULT   32
#define OBS_HTTP_CONN_LIMIT     32
#define OBS_HTTP_CONN_TIMEOUT_S 10 /* MHD inactivity timeout of a connection */
/* A request (from the connection's start, or the end of its previous request, to the end of
 * its response) must finish within this: MHD's timeout is inactivity-based, so a client
 * trickling a header byte now and then would otherwise hold a slot forever. */
#define OBS_HTTP_REQUEST_DEADLINE_MS 30000

/* ---- provider ---------------------------------------------------------------------------- */

struct obs_health {
    bool live, ready;
    unsigned nreasons;
    char reasons[OBS_HEALTH_REASONS_MAX][OBS_HEALTH_REASON_LEN];
};
/* Appends a reason (truncated; reasons past OBS_HEALTH_REASONS_MAX are counted in the last). */
void obs_health_reason(struct obs_health *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define OBS_STATS_QUOTA_TENANTS_MAX 16 /* tenants with a policy /stats lists */
#define OBS_STATS_QUOTA_TENANT_LEN  64 /* bytes of a tenant id (core/ident.h rule) */

/* Background re-replication as /stats shows it (src/store/repair.h): gauges now + totals. */
struct obs_rereplication_stats {
    uint64_t under_replicated, backlog, pending_owners, copies_in_flight, lost;
    uint64_t found, repaired, superseded, failed, bytes_copied, passes;
    bool paused;
};

struct obs_runtime_stats {
    char runtime_id[64];
    uint64_t uptime_seconds;
    uint32_t live_members;
    uint64_t objects;
    uint64_t dram_capacity_bytes, dram_used_bytes;
    uint64_t cold_capacity_bytes, cold_used_bytes;
    struct obs_rereplication_stats rereplication;
    /* the routes this runtime's shard authorities hold (EmbeddedWrh), finalized tombstones among
     * them, tombstones purged since start */
    uint64_t route_entries, route_tombstones, tombstones_purged;
    /* MetadataOnly: purges whose answer did not come (each may have purged uncounted) */
    uint64_t tombstones_purge_unknown;
    /* the tenants whose hard policy this runtime enforces (tenant_policies), in configuration
     * order: /stats "quota_tenants", each readable through /stats?tenant= */
    uint32_t n_quota_tenants;
    char quota_tenants[OBS_STATS_QUOTA_TENANTS_MAX][OBS_STATS_QUOTA_TENANT_LEN + 1];
    /* this owner's reservations past their TTL held until an exact route lookup settles them,
     * and those such a lookup released (proved unreferenced) since start */
    uint64_t reservations_held, reservations_released;
    /* COMMIT / RELEASE notes this owner ignored since start: they named a slot no longer there */
    uint64_t notes_stale;
};

/* What a runtime plugs into its admin server. Every member is optional. */
struct obs_provider {
    void *ctx;
    /* Fill *out (pre-set to live = ready = true, no reasons). */
    void (*health)(void *ctx, struct obs_health *out);
    /* Fill *out (pre-zeroed). */
    void (*runtime_stats)(void *ctx, struct obs_runtime_stats *out);
    /* Called before /metrics renders, to refresh set-mode gauges from runtime snapshots. */
    void (*before_scrape)(void *ctx);
    /* /stats?tenant=ID: the tenant's quota accounting as one JSON object into buf (0), or
     * nonzero when it has no policy (then no "quota" member). */
    int (*tenant_quota)(void *ctx, const char *tenant, char *buf, size_t cap);
    /* Per-tenant counters maintained by the runtime (borrowed). */
    struct obs_tenant_table *tenants;
    /* GET /cluster: append one JSON object (the runtime's cluster view) to b. Returns 0, or a
     * KVMESH_E* code (the endpoint answers 503 with kvmesh_last_error()). NULL: 404. */
    int (*cluster_json)(void *ctx, struct obs_buf *b);
};

/* ---- query strings ----------------------------------------------------------------------- */

enum obs_endpoint {
    OBS_EP_INDEX,
    OBS_EP_HEALTHZ,
    OBS_EP_METRICS,
    OBS_EP_STATS,
    OBS_EP_BREAKDOWN,
    OBS_EP_TRACE,
    OBS_EP_TRACE_SAMPLING,
    OBS_EP_TRACE_CAPTURE,
    OBS_EP_CLUSTER,
    OBS_EP_API,
    OBS_EP__COUNT
};

enum { OBS_PROBE_READY = 0, OBS_PROBE_LIVE = 1 };
enum { OBS_ACTION_NONE = 0, OBS_ACTION_START = 1, OBS_ACTION_STOP = 2 };

#define OBS_Q_TENANT (1u << 0)
#define OBS_Q_TOP    (1u << 1)
#define OBS_Q_LIMIT  (1u << 2)
#define OBS_Q_RATE   (1u << 3)
#define OBS_Q_PROBE  (1u << 4)
#define OBS_Q_ACTION (1u << 5)
#define OBS_Q_NAME   (1u << 6)

struct obs_query {
    unsigned present; /* OBS_Q_* bits */
    char tenant[OBS_TENANT_ID_MAX + 1];
    size_t tenant_len;
    unsigned top, limit;
    double rate;
    int probe, action;
    char name[65];
};

/*
 * Parses the raw query string (the bytes after '?', not decoded) for an endpoint. Grammar:
 * pairs `key=value` joined by '&', at most OBS_QUERY_MAX_PARAMS, total at most
 * OBS_QUERY_MAX_LEN bytes; values are percent-decoded ('+' is a space); every key must be one
 * the endpoint accepts and appear once; each value is validated by type:
 *   tenant  1..128 bytes of printable ASCII (0x21-0x7e)      (/stats)
 *   top     integer 1..OBS_TENANT_TOP_K                        (/stats)
 *   limit   integer 1..OBS_BREAKDOWN_RING                      (/breakdown)
 *   rate    decimal in [0, 1] (digits and at most one '.')     (/trace/sampling, required)
 *   probe   live | ready                                       (/healthz)
 *   action  start | stop (required); name 1..64 of [A-Za-z0-9._-] with start (/trace/capture)
 * Returns 0, or KVMESH_EINVAL with a message for the client in kvmesh_last_error().
 */
int obs_query_parse(enum obs_endpoint ep, const char *qs, size_t len, struct obs_query *out);

/* What /breakdown and /trace* answer (409) when the runtime has no tracer. */
#define OBS_TRACING_OFF_MSG                                                                        \
    "tracing is off in this runtime: set trace_sample_rate above 0 (kvmeshd --trace-sample-rate "  \
    "0.01), or trace_capture_dir or trace_otlp_url, in its configuration and restart it"

/* Maps a request path to an endpoint; returns -1 for an unknown path. */
int obs_endpoint_lookup(const char *path, size_t len);

/* Constant-time equality of two secrets (time independent of where they differ and of the
 * expected secret's length). */
bool obs_secret_equal(const char *given, size_t given_len, const char *expected,
                      size_t expected_len);

/* ---- server ------------------------------------------------------------------------------ */

struct obs_http_config {
    const char *bind_addr; /* IPv4 literal; NULL: 127.0.0.1 */
    uint16_t port;         /* 0: an ephemeral port (see obs_http_port) */
    const char *secret;    /* deployment secret for control endpoints; NULL or "": open */
    struct obs_provider provider;
    struct obs_tracer *tracer;    /* borrowed; NULL: tracing endpoints answer 409 (tracing off) */
    struct obs_registry *metrics; /* borrowed; /metrics shows its families (NULL: process only) */
    uint32_t request_deadline_ms; /* 0: OBS_HTTP_REQUEST_DEADLINE_MS (tests set less) */
};

struct obs_http;

int obs_http_start(const struct obs_http_config *cfg, struct obs_http **out);
uint16_t obs_http_port(const struct obs_http *h);
/* Stops the server thread (in-flight requests finish first) and frees. NULL is a no-op. */
void obs_http_stop(struct obs_http *h);

/*
 * Renders one endpoint into b, as the server would (also used by tests and tools without a
 * socket). method is "GET" or "POST"; auth is the Authorization header value or NULL.
 * Returns the HTTP status code; *content_type receives a static string.
 */
int obs_http_render(struct obs_http *h, const char *method, const char *uri, const char *auth,
                    struct obs_buf *b, const char **content_type);

#endif
