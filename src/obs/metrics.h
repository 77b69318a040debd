/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.h — the process-wide metrics registry: counters, gauges and histograms declared in
 * one X-macro list per family kind, from which metrics.c generates the storage, the per-thread
 * aggregation and the Prometheus text exposition.
 *
 * Declaring a family: add one line to OBS_COUNTER_LIST, OBS_GAUGE_LIST or OBS_HIST_LIST below.
 *   X(id, help, dim1, dim2)                  counters (id is the name without "kvmesh_")
 *   X(id, help, mode, dim1, dim2)            gauges; mode is set (absolute) or add (up/down)
 *   X(id, help, layout, dim1, dim2)          histograms; layout is latency, bytes or count
 * Each dimension is a closed label set from OBS_DIM_LIST (`none` for no label). A family has at
 * most two dimensions. Label values are compile-time enum constants: a key, domain, route
 * version, request id or peer address can never become a label value by construction.
 *
 * Updating (hot path, any thread), always into a registry the caller was handed:
 *   obs_count(reg, requests_total, OBS_OP_PUT, OBS_RES_OK, 1);
 *   obs_gauge_add(reg, requests_in_flight, OBS_OP_PUT, OBS_NONE, +1);
 *   obs_gauge_set(reg, segment_capacity_bytes, OBS_TIER_DRAM, OBS_NONE, bytes);
 *   obs_observe(reg, request_duration_seconds, OBS_OP_PUT, OBS_NONE, elapsed_ns);
 *   obs_tenant_count(reg, tenant_requests_total, obs_tenant_slot(tenant_id, len), 1);
 * Out-of-range label indices are programmer errors (KVM_ASSERT). A NULL registry counts nothing.
 *
 * Registries: one per runtime (struct obs_registry, created by its owner and passed down through
 * each layer's config). There is no process-global registry.
 *
 * Threading and cost: every thread updates its own shard of the registry (a cache-aligned block
 * holding every series) with a relaxed load + relaxed store, no lock, no read-modify-write
 * instruction; a scrape sums the registry's shards. A thread finds its shard through a small
 * thread-local cache keyed by registry id (one compare on the hot path). A shard is claimed on a
 * thread's first update of a registry and handed back at thread exit (pthread key destructor) or
 * when it falls out of the cache, for another thread of the same registry to reuse, so counters
 * stay monotonic and shard memory is bounded by the peak number of (thread, registry) pairs.
 * Beyond OBS_MAX_SHARDS shards in the process, further threads share the registry's overflow
 * shard, updated with atomic adds. Set-mode gauges live in the registry as relaxed atomics.
 *
 * Histogram layouts (fixed; `le` values in base units):
 *   latency: observations in nanoseconds, exposed in seconds, upper bounds
 *            5us 10us 25us 50us 100us 250us 500us 1ms 2.5ms 5ms 10ms 25ms 50ms 100ms 250ms 500ms
 *            1s 2.5s 5s 10s, then +Inf (20 finite buckets)
 *   bytes:   observations in bytes, upper bounds 1KiB 4KiB 16KiB 64KiB 256KiB 1MiB 4MiB 16MiB
 *            64MiB 256MiB 1GiB, then +Inf (11 finite buckets, powers of 4)
 *   count:   small counts (retries), upper bounds 0 1 2 4 8 16 32, then +Inf (7 finite buckets)
 *
 * Per-tenant labels: the tenant_* families carry a `tenant` label only for the deployment's
 * finite bootstrap policy set, up to a configured cap (obs_metrics_set_tenants, at most
 * OBS_TENANT_LABEL_CAP_MAX); every other tenant id falls into the `other` series. With no set
 * configured (the default) the tenant families have no series: request counters aggregate
 * across tenants and per-tenant diagnosis goes through /stats?tenant=.
 */
#ifndef KVMESH_OBS_METRICS_H
#define KVMESH_OBS_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

/* ---- closed label sets ------------------------------------------------------------------- */

#define OBS_NONE_VALUES(V) V(OBS_NONE, "")

/* operation on the public API */
#define OBS_OP_VALUES(V)                                                                           \
    V(OBS_OP_PUT, "put")                                                                           \
    V(OBS_OP_GET, "get")                                                                           \
    V(OBS_OP_REMOVE, "remove")                                                                     \
    V(OBS_OP_EXIST, "exist")                                                                       \
    V(OBS_OP_BATCH_PUT, "batch_put")                                                               \
    V(OBS_OP_BATCH_GET, "batch_get")                                                               \
    V(OBS_OP_BATCH_REMOVE, "batch_remove")

/* outcome of an API request */
#define OBS_RES_VALUES(V)                                                                          \
    V(OBS_RES_OK, "ok")                                                                            \
    V(OBS_RES_NOT_FOUND, "not_found")                                                              \
    V(OBS_RES_INVALID, "invalid")                                                                  \
    V(OBS_RES_QUOTA, "quota")                                                                      \
    V(OBS_RES_TIMEOUT, "timeout")                                                                  \
    V(OBS_RES_UNAVAILABLE, "unavailable")                                                          \
    V(OBS_RES_ERROR, "error")

/* simple success/failure outcome */
#define OBS_OUTCOME_VALUES(V)                                                                      \
    V(OBS_OUTCOME_OK, "ok")                                                                        \
    V(OBS_OUTCOME_ERROR, "error")

/* route lookup outcome */
#define OBS_LOOKUP_VALUES(V)                                                                       \
    V(OBS_LOOKUP_FOUND, "found")                                                                   \
    V(OBS_LOOKUP_NOT_FOUND, "not_found")                                                           \
    V(OBS_LOOKUP_ERROR, "error")

/* route CAS outcome at the fenced primary */
#define OBS_CAS_VALUES(V)                                                                          \
    V(OBS_CAS_APPLIED, "applied")                                                                  \
    V(OBS_CAS_CONFLICT, "conflict")                                                                \
    V(OBS_CAS_STALE_GENERATION, "stale_generation")                                                \
    V(OBS_CAS_NOT_PRIMARY, "not_primary")                                                          \
    V(OBS_CAS_INDETERMINATE, "indeterminate")

/* route repair outcome */
#define OBS_REPAIR_VALUES(V)                                                                       \
    V(OBS_REPAIR_REPAIRED, "repaired")                                                             \
    V(OBS_REPAIR_NOOP, "noop")                                                                     \
    V(OBS_REPAIR_FAILED, "failed")

/* mirror publication outcome (primary -> top-k mirror set) */
#define OBS_MIRROR_VALUES(V)                                                                       \
    V(OBS_MIRROR_ACKED, "acked")                                                                   \
    V(OBS_MIRROR_FAILED, "failed")                                                                 \
    V(OBS_MIRROR_TIMEOUT, "timeout")

/* metadata backend */
#define OBS_BACKEND_VALUES(V)                                                                      \
    V(OBS_BACKEND_MEMORY, "memory")                                                                \
    V(OBS_BACKEND_REDIS, "redis")                                                                  \
    V(OBS_BACKEND_ETCD, "etcd")

/* metadata call, one value per call kind of src/meta/meta.h */
#define OBS_MCALL_VALUES(V)                                                                        \
    V(OBS_MCALL_GET, "get")                                                                        \
    V(OBS_MCALL_RANGE, "range")                                                                    \
    V(OBS_MCALL_TXN, "txn")                                                                        \
    V(OBS_MCALL_LEASE_GRANT, "lease_grant")                                                        \
    V(OBS_MCALL_LEASE_KEEPALIVE, "lease_keepalive")                                                \
    V(OBS_MCALL_LEASE_REVOKE, "lease_revoke")                                                      \
    V(OBS_MCALL_LEASE_TTL, "lease_ttl")

/* data-plane transport; RPC connections count as tcp, or unix over a unix socket (rpc_* ops) */
#define OBS_TRANSPORT_VALUES(V)                                                                    \
    V(OBS_TRANSPORT_TCP, "tcp")                                                                    \
    V(OBS_TRANSPORT_SHM, "shm")                                                                    \
    V(OBS_TRANSPORT_LOCAL, "local")                                                                \
    V(OBS_TRANSPORT_UNIX, "unix")

/* transport operation */
/* read/write: data-plane segment reads and writes; open: segment opens (tcp: connecting to the
 * owner, shm: mapping its segment); rpc_send: control RPC calls this runtime made
 * (bytes: all bytes it wrote on RPC connections); rpc_receive: RPC requests it served (bytes:
 * all bytes it read from RPC connections) */
#define OBS_XOP_VALUES(V)                                                                          \
    V(OBS_XOP_READ, "read")                                                                        \
    V(OBS_XOP_WRITE, "write")                                                                      \
    V(OBS_XOP_OPEN, "open")                                                                        \
    V(OBS_XOP_RPC_SEND, "rpc_send")                                                                \
    V(OBS_XOP_RPC_RECEIVE, "rpc_receive")

/* storage tier */
#define OBS_TIER_VALUES(V)                                                                         \
    V(OBS_TIER_DRAM, "dram")                                                                       \
    V(OBS_TIER_COLD, "cold")

/* allocation outcome */
#define OBS_ALLOC_VALUES(V)                                                                        \
    V(OBS_ALLOC_OK, "ok")                                                                          \
    V(OBS_ALLOC_NO_SPACE, "no_space")                                                              \
    V(OBS_ALLOC_ERROR, "error")

/* span export outcome (tracing pipeline health) */
#define OBS_SPANRES_VALUES(V)                                                                      \
    V(OBS_SPANRES_EXPORTED, "exported")                                                            \
    V(OBS_SPANRES_DROPPED_QUEUE_FULL, "dropped_queue_full")                                        \
    V(OBS_SPANRES_DROPPED_EXPORT_FAILED, "dropped_export_failed")

/* placement of one replica against its tenant's or request's preference (src/store/place.c) */
#define OBS_PLACE_VALUES(V)                                                                        \
    V(OBS_PLACE_DEFAULT, "default")                                                                \
    V(OBS_PLACE_PREFERRED, "preferred")                                                            \
    V(OBS_PLACE_FALLBACK, "fallback")                                                              \
    V(OBS_PLACE_PIN_UNSATISFIED, "pin_unsatisfied")

/* remote batch through the soft-isolation gate (src/store/fair.c) */
#define OBS_FAIR_VALUES(V)                                                                         \
    V(OBS_FAIR_IMMEDIATE, "immediate")                                                             \
    V(OBS_FAIR_WAITED, "waited")                                                                   \
    V(OBS_FAIR_TIMED_OUT, "timed_out")                                                             \
    V(OBS_FAIR_QUEUE_FULL, "queue_full")

/* tenant quota protocol call made by this runtime's store (src/store/quota.c) */
#define OBS_QOP_VALUES(V)                                                                          \
    V(OBS_QOP_RESERVE, "reserve")                                                                  \
    V(OBS_QOP_CLAIM, "claim")                                                                      \
    V(OBS_QOP_FINALIZE, "finalize")                                                                \
    V(OBS_QOP_ABORT, "abort")

/* its outcome; the refusals by reason */
#define OBS_QRES_VALUES(V)                                                                         \
    V(OBS_QRES_OK, "ok")                                                                           \
    V(OBS_QRES_QUOTA_BYTES, "quota_bytes")                                                         \
    V(OBS_QRES_QUOTA_OBJECTS, "quota_objects")                                                     \
    V(OBS_QRES_TOO_BIG, "too_big")                                                                 \
    V(OBS_QRES_BUSY, "busy")                                                                       \
    V(OBS_QRES_CONFLICT, "conflict")                                                               \
    V(OBS_QRES_CANCELED, "canceled")                                                               \
    V(OBS_QRES_ERROR, "error")

/* what a reconciliation pass did with a due operation */
#define OBS_QRECON_VALUES(V)                                                                       \
    V(OBS_QRECON_ABORTED, "aborted")                                                               \
    V(OBS_QRECON_FINALIZED, "finalized")                                                           \
    V(OBS_QRECON_REPLAYED, "replayed")                                                             \
    V(OBS_QRECON_DEGRADED, "degraded")                                                             \
    V(OBS_QRECON_PURGED, "purged")
/* critical-path stage of an API operation that waited on another runtime (op_round_trips_total) */
#define OBS_CPSTAGE_VALUES(V)                                                                      \
    V(OBS_CPSTAGE_RESERVE, "reserve")                                                              \
    V(OBS_CPSTAGE_PAYLOAD, "payload")                                                              \
    V(OBS_CPSTAGE_ROUTE_LOOKUP, "route_lookup")                                                    \
    V(OBS_CPSTAGE_ROUTE_CAS, "route_cas")

/* cold device of a runtime: its index in the runtime's configuration (0 = cold_root, 1..7 = the
 * cold_devices entries; bounded by KVM_STORE_COLD_DEVICES_MAX, checked in store/cold_metrics.c) */
#define OBS_DEV_VALUES(V)                                                                          \
    V(OBS_DEV_0, "0")                                                                              \
    V(OBS_DEV_1, "1")                                                                              \
    V(OBS_DEV_2, "2")                                                                              \
    V(OBS_DEV_3, "3")                                                                              \
    V(OBS_DEV_4, "4")                                                                              \
    V(OBS_DEV_5, "5")                                                                              \
    V(OBS_DEV_6, "6")                                                                              \
    V(OBS_DEV_7, "7")

/* RPC layer (src/net/rpc.h struct rpc_stats; exported by src/store/rpc_metrics.c at scrape) */
/* an RPC connection's direction: accepted from a peer, or connected to one */
#define OBS_RPCDIR_VALUES(V)                                                                       \
    V(OBS_RPCDIR_INBOUND, "inbound")                                                               \
    V(OBS_RPCDIR_OUTBOUND, "outbound")

/* what a payload sink did with a request's payload (rpc.h "Payload sinks"): received straight
 * into its destination, discarded (the handler answers without it), or its context aborted (the
 * frame never completed, or its handler did not run) */
#define OBS_RPCSINK_VALUES(V)                                                                      \
    V(OBS_RPCSINK_DIRECT, "direct")                                                                \
    V(OBS_RPCSINK_DISCARDED, "discarded")                                                          \
    V(OBS_RPCSINK_ABORTED, "aborted")

/* a frame's direction on RPC connections */
#define OBS_RPCFRAME_VALUES(V)                                                                     \
    V(OBS_RPCFRAME_RECEIVED, "received")                                                           \
    V(OBS_RPCFRAME_SENT, "sent")

/* why an RPC connection closed: RPC_CLOSE_REASON_LIST of src/net/rpc.h, same order and names
 * (src/store/rpc_metrics.c asserts the count; the obs_metrics_rt test the names) */
#define OBS_RPCCLOSE_VALUES(V)                                                                     \
    V(OBS_RPCCLOSE_LOCAL, "local")                                                                 \
    V(OBS_RPCCLOSE_PEER_EOF, "peer_eof")                                                           \
    V(OBS_RPCCLOSE_TRUNCATED, "truncated")                                                         \
    V(OBS_RPCCLOSE_IO_ERROR, "io_error")                                                           \
    V(OBS_RPCCLOSE_CONNECT_FAILED, "connect_failed")                                               \
    V(OBS_RPCCLOSE_BAD_MAGIC, "bad_magic")                                                         \
    V(OBS_RPCCLOSE_BAD_VERSION, "bad_version")                                                     \
    V(OBS_RPCCLOSE_BAD_FRAME, "bad_frame")                                                         \
    V(OBS_RPCCLOSE_OVERSIZED, "oversized")                                                         \
    V(OBS_RPCCLOSE_BAD_HEADER, "bad_header")                                                       \
    V(OBS_RPCCLOSE_UNEXPECTED, "unexpected_frame")                                                 \
    V(OBS_RPCCLOSE_HANDSHAKE_TIMEOUT, "handshake_timeout")                                         \
    V(OBS_RPCCLOSE_REFUSED, "refused")                                                             \
    V(OBS_RPCCLOSE_REFUSED_BY_PEER, "refused_by_peer")                                             \
    V(OBS_RPCCLOSE_NOMEM, "no_memory")                                                             \
    V(OBS_RPCCLOSE_CONN_LIMIT, "conn_limit")                                                       \
    V(OBS_RPCCLOSE_WRITE_TIMEOUT, "write_timeout")                                                 \
    V(OBS_RPCCLOSE_IDLE, "idle")

/* who refused a handshake: this runtime, or the peer */
#define OBS_RPCSIDE_VALUES(V)                                                                      \
    V(OBS_RPCSIDE_LOCAL, "local")                                                                  \
    V(OBS_RPCSIDE_REMOTE, "remote")

/* why: HS_REASON_LIST of src/net/handshake.h without "accepted" (index = reason - 1) */
#define OBS_HSREASON_VALUES(V)                                                                     \
    V(OBS_HSREASON_DEPLOYMENT_MISMATCH, "deployment_mismatch")                                     \
    V(OBS_HSREASON_PROTOCOL_MISMATCH, "protocol_mismatch")                                         \
    V(OBS_HSREASON_RUNTIME_MISMATCH, "runtime_mismatch")                                           \
    V(OBS_HSREASON_SELF_CONNECT, "self_connect")                                                   \
    V(OBS_HSREASON_AUTH_REQUIRED, "auth_required")                                                 \
    V(OBS_HSREASON_AUTH_FAILED, "auth_failed")                                                     \
    V(OBS_HSREASON_BAD_MESSAGE, "bad_message")                                                     \
    V(OBS_HSREASON_AUTH_UNEXPECTED, "auth_unexpected")                                             \
    V(OBS_HSREASON_STALE_EPOCH, "stale_epoch")

/* an RPC call that ended without its response */
#define OBS_RPCCALL_VALUES(V)                                                                      \
    V(OBS_RPCCALL_TIMED_OUT, "timed_out")                                                          \
    V(OBS_RPCCALL_CANCELED, "canceled")

/* RPC messages other than calls and requests (those are in kvmesh_transport_*_total) */
#define OBS_RPCMSG_VALUES(V)                                                                       \
    V(OBS_RPCMSG_REPLY_SENT, "reply_sent")                                                         \
    V(OBS_RPCMSG_NOTIFY_SENT, "notify_sent")                                                       \
    V(OBS_RPCMSG_NOTIFY_RECEIVED, "notify_received")                                               \
    V(OBS_RPCMSG_NOTIFY_DROPPED, "notify_dropped")                                                 \
    V(OBS_RPCMSG_RESPONSE_LATE, "response_late")

/* a request for a message buffer of the RPC buffer pool (64 KiB - 8 MiB), or its return */
#define OBS_POOL_VALUES(V)                                                                         \
    V(OBS_POOL_HIT, "hit")                                                                         \
    V(OBS_POOL_MISS, "miss")                                                                       \
    V(OBS_POOL_DROPPED, "dropped")

/* X(dim, label name, value list) */
#define OBS_DIM_LIST(X)                                                                            \
    X(none, "", OBS_NONE_VALUES)                                                                   \
    X(op, "operation", OBS_OP_VALUES)                                                              \
    X(res, "result", OBS_RES_VALUES)                                                               \
    X(outcome, "result", OBS_OUTCOME_VALUES)                                                       \
    X(lookup, "result", OBS_LOOKUP_VALUES)                                                         \
    X(cas, "result", OBS_CAS_VALUES)                                                               \
    X(repair, "result", OBS_REPAIR_VALUES)                                                         \
    X(mirror, "result", OBS_MIRROR_VALUES)                                                         \
    X(backend, "backend", OBS_BACKEND_VALUES)                                                      \
    X(mcall, "operation", OBS_MCALL_VALUES)                                                        \
    X(transport, "transport", OBS_TRANSPORT_VALUES)                                                \
    X(xop, "operation", OBS_XOP_VALUES)                                                            \
    X(tier, "tier", OBS_TIER_VALUES)                                                               \
    X(alloc, "result", OBS_ALLOC_VALUES)                                                           \
    X(spanres, "result", OBS_SPANRES_VALUES)                                                       \
    X(place, "result", OBS_PLACE_VALUES)                                                           \
    X(fair, "result", OBS_FAIR_VALUES)                                                             \
    X(qop, "operation", OBS_QOP_VALUES)                                                            \
    X(qres, "result", OBS_QRES_VALUES)                                                             \
    X(qrecon, "result", OBS_QRECON_VALUES)                                                         \
    X(cpstage, "stage", OBS_CPSTAGE_VALUES)                                                        \
    X(dev, "device", OBS_DEV_VALUES)                                                               \
    X(rpcdir, "direction", OBS_RPCDIR_VALUES)                                                      \
    X(rpcframe, "direction", OBS_RPCFRAME_VALUES)                                                  \
    X(rpcclose, "reason", OBS_RPCCLOSE_VALUES)                                                     \
    X(rpcside, "side", OBS_RPCSIDE_VALUES)                                                         \
    X(hsreason, "reason", OBS_HSREASON_VALUES)                                                     \
    X(rpccall, "result", OBS_RPCCALL_VALUES)                                                       \
    X(rpcmsg, "kind", OBS_RPCMSG_VALUES)                                                           \
    X(pool, "result", OBS_POOL_VALUES)                                                             \
    X(rpcsink, "result", OBS_RPCSINK_VALUES)

#define OBS_X_ENUM_V(name, str)          name,
#define OBS_X_DIM_ENUM(d, label, VALUES) enum obs_dim_##d{VALUES(OBS_X_ENUM_V) OBS__N_##d};
OBS_DIM_LIST(OBS_X_DIM_ENUM)
#undef OBS_X_DIM_ENUM

enum obs_dim_id {
#define OBS_X_DIM_ID(d, label, VALUES) OBS_DIM_##d,
    OBS_DIM_LIST(OBS_X_DIM_ID)
#undef OBS_X_DIM_ID
        OBS_DIM__COUNT
};

/* ---- families ---------------------------------------------------------------------------- */

#define OBS_COUNTER_LIST(X)                                                                        \
    X(requests_total, "API requests completed, by operation and result.", op, res)                 \
    X(request_errors_total, "API requests that failed (any result but ok and not_found).", op,     \
      none)                                                                                        \
    X(request_bytes_total, "Payload bytes moved by API requests (put: written, get: read).", op,   \
      none)                                                                                        \
    X(route_lookups_total, "Route lookups completed by this runtime, by result.", lookup, none)    \
    X(route_cas_total,                                                                             \
      "Route compare-and-set outcomes decided by this runtime's shard authorities.", cas, none)    \
    X(route_repairs_total, "Route repair attempts, by outcome.", repair, none)                     \
    X(route_mirror_publications_total,                                                             \
      "Route mirror publications to the top-k mirror set, by outcome.", mirror, none)              \
    X(metadata_operations_total, "Metadata backend calls, by backend and call.", backend, mcall)   \
    X(metadata_errors_total, "Metadata backend calls that failed, by backend and call.", backend,  \
      mcall)                                                                                       \
    X(transport_operations_total, "Data-plane transport operations, by transport and operation.",  \
      transport, xop)                                                                              \
    X(transport_bytes_total, "Bytes moved by data-plane transports, by transport and operation.",  \
      transport, xop)                                                                              \
    X(transport_failures_total, "Data-plane transport operations that failed.", transport, xop)    \
    X(allocations_total, "Segment allocation attempts, by tier and result.", tier, alloc)          \
    X(allocated_bytes_total, "Bytes reserved by successful allocations, by tier.", tier, none)     \
    X(evictions_total, "Objects evicted, by tier.", tier, none)                                    \
    X(evicted_bytes_total, "Bytes evicted, by tier.", tier, none)                                  \
    X(reclaimed_bytes_total, "Bytes returned to segments by reclaim after the grace window.",      \
      tier, none)                                                                                  \
    X(replicas_published_total,                                                                    \
      "Object replicas whose route publication finished, by result (ok: in the published route).", \
      outcome, none)                                                                               \
    X(membership_refreshes_total, "Membership snapshot refreshes, by result.", outcome, none)      \
    X(lease_heartbeats_total, "Runtime lease heartbeats to the metadata backend, by result.",      \
      outcome, none)                                                                               \
    X(trace_spans_total, "Sampled spans handed to the trace exporters, by outcome.", spanres,      \
      none)                                                                                        \
    X(placements_total,                                                                            \
      "Replicas placed, by preference outcome (default, preferred, fallback; pin_unsatisfied: "    \
      "items a tenant's hard pin failed).",                                                        \
      place, none)                                                                                 \
    X(fair_batches_total,                                                                          \
      "Remote payload batches through the per-tenant fair scheduler, by outcome (immediate, "      \
      "waited for a turn, timed_out in the queue, refused with queue_full).",                      \
      fair, none)                                                                                  \
    X(quota_operations_total,                                                                      \
      "Tenant quota protocol calls of this runtime's writes, by call and result (refusals by "     \
      "reason).",                                                                                  \
      qop, qres)                                                                                   \
    X(quota_recovery_evictions_total,                                                              \
      "Objects a write over its tenant's quota evicted from the same tenant.", none, none)         \
    X(quota_reconciliations_total,                                                                 \
      "Due quota operations resolved by this runtime's reconciliation passes, by outcome.",        \
      qrecon, none)                                                                                \
    X(op_round_trips_total,                                                                        \
      "Request/response exchanges with other runtimes an API operation waited on, by operation "   \
      "and stage (counted by the calling runtime).",                                               \
      op, cpstage)                                                                                 \
    X(op_handoffs_total,                                                                           \
      "Hand-offs of an API operation to the runtime's loop (posted to the loop thread, or run by " \
      "the calling thread leading the loop).",                                                     \
      op, none)                                                                                    \
    X(op_loop_leads_total,                                                                         \
      "Hand-offs of an API operation that the calling thread ran itself by leading the loop (no "  \
      "wake-up of the loop thread, no wake-up back).",                                             \
      op, none)                                                                                    \
    X(op_payload_copies_total,                                                                     \
      "Payload copies made by an API operation, by operation and transport (local, shm: one "      \
      "memcpy per replica; tcp: two kernel socket copies per replica).",                           \
      op, transport)                                                                               \
    X(op_checksum_passes_total, "Passes over an API operation's payload computing its checksum.",  \
      op, none)                                                                                    \
    X(rereplication_found_total,                                                                   \
      "Under-replicated objects found by this runtime's re-replication scans (it holds their "     \
      "first live replica, so it copies them).",                                                   \
      none, none)                                                                                  \
    X(rereplication_objects_total,                                                                 \
      "Re-replication copies finished, by result (repaired: published; noop: an overwrite or "     \
      "delete won; failed: retried by the next pass).",                                            \
      repair, none)                                                                                \
    X(rereplication_bytes_total, "Bytes of published re-replication copies.", none, none)          \
    X(cold_offloads_total,                                                                         \
      "Cold offload jobs finished by this runtime (ok: materialized; error: parked).", outcome,    \
      none)                                                                                        \
    X(cold_restores_total, "Reads served from the cold tier, by result.", outcome, none)           \
    X(cold_evictions_total, "Last hot replicas evicted to the cold tier (object now cold-only).",  \
      none, none)                                                                                  \
    X(cold_dev_offloads_total,                                                                     \
      "Cold offload jobs finished by this runtime, by cold device (its index in the runtime's "    \
      "configuration) and result (ok: materialized; error: parked).",                              \
      dev, outcome)                                                                                \
    X(cold_dev_restores_total,                                                                     \
      "Reads served from this runtime's cold devices, by device and result.", dev, outcome)        \
    X(cold_dev_errors_total,                                                                       \
      "Device errors (I/O errors, damaged device records) of this runtime's cold devices, by "     \
      "device.",                                                                                   \
      dev, none)                                                                                   \
    X(cold_offloads_released_total,                                                                \
      "Cold offload jobs that ended RELEASED (the route changed or its hot copy was gone).", none, \
      none)                                                                                        \
    X(cold_offload_retries_total, "Cold offload job steps retried after a transient failure.",     \
      none, none)                                                                                  \
    X(cold_offload_rate_waits_total,                                                               \
      "Times the offload queue's head waited for rate tokens (cold_offload_bytes_per_sec).", none, \
      none)                                                                                        \
    X(cold_offload_gate_changes_total,                                                             \
      "Openings and closings of the offload watermark gate (cold_high/low_watermark).", none,      \
      none)                                                                                        \
    X(cold_offload_urgent_jobs_total, "Urgent (eviction-triggered) offload jobs accepted.", none,  \
      none)                                                                                        \
    X(cold_clean_runs_total,                                                                       \
      "Background maintenance runs of the cold device (ExtentStore cleaning), by result.",         \
      outcome, none)                                                                               \
    X(cold_cleaned_bytes_total,                                                                    \
      "Cold device file bytes released by background maintenance (segments removed).", none, none) \
    X(cold_staging_acquired_total,                                                                 \
      "Remote restores this cold device owner staged into a slot of its staging pool.", none,      \
      none)                                                                                        \
    X(cold_staging_backpressure_total,                                                             \
      "Remote restores refused because every staging slot (or byte) was in use; the reader "       \
      "retries.",                                                                                  \
      none, none)                                                                                  \
    X(cold_staging_expiries_total,                                                                 \
      "Staging slots whose reader did not acknowledge in time: token fenced, slot recycled.",      \
      none, none)                                                                                  \
    X(cold_staging_late_total,                                                                     \
      "Transfer completions and ACKs that arrived with a fenced, recycled or repeated token "      \
      "(ignored).",                                                                                \
      none, none)                                                                                  \
    X(cold_staging_promotions_total,                                                               \
      "Remote restores this owner also re-promoted into its DRAM by copying from the staging "     \
      "slot under a promotion pin.",                                                               \
      none, none)                                                                                  \
    X(cold_restore_retries_total,                                                                  \
      "Remote restores this reader retried because the owner's staging pool was saturated.", none, \
      none)                                                                                        \
    X(cold_restore_batches_total,                                                                  \
      "Batch restores this reader issued for batch gets: one per device read of its own cold "     \
      "device (transport local) and one per batched request to a remote owner (tcp, shm).",        \
      transport, none)                                                                             \
    X(cold_restore_batch_items_total,                                                              \
      "Items of the batch restores counted by kvmesh_cold_restore_batches_total.", transport,      \
      none)                                                                                        \
    X(cold_reclaims_total,                                                                         \
      "Cold copies of overwritten or removed objects reclaimed from this runtime's device (ok), "  \
      "or deferred to reconciliation (error).",                                                    \
      outcome, none)                                                                               \
    X(reservations_released_after_lookup_total,                                                    \
      "Held reservations released because an exact route lookup proved no route references "       \
      "them.",                                                                                     \
      none, none)                                                                                  \
    X(notes_stale_total,                                                                           \
      "COMMIT / RELEASE notes this owner ignored because they named another slot than the one "    \
      "now at their segment and offset (a stale note).",                                           \
      none, none)                                                                                  \
    X(rpc_connections_total, "RPC connections opened, by direction (accepted, connected).",        \
      rpcdir, none)                                                                                \
    X(rpc_handshakes_total, "RPC connection handshakes that completed (both sides accepted).",     \
      none, none)                                                                                  \
    X(rpc_handshake_refusals_total,                                                                \
      "RPC handshakes refused, by side (local: this runtime refused; remote: the peer did) and "   \
      "reason.",                                                                                   \
      rpcside, hsreason)                                                                           \
    X(rpc_connections_closed_total, "RPC connections closed, by reason.", rpcclose, none)          \
    X(rpc_calls_started_total,                                                                     \
      "RPC calls this runtime started (completed ones: kvmesh_transport_operations_total"          \
      "{operation=\"rpc_send\"}).",                                                                \
      none, none)                                                                                  \
    X(rpc_calls_unanswered_total,                                                                  \
      "RPC calls that ended without a response: the deadline passed, or the caller cancelled.",    \
      rpccall, none)                                                                               \
    X(rpc_messages_total,                                                                          \
      "RPC replies sent, one-way notifications sent, received and dropped (no handler), and "      \
      "responses that arrived late (call already finished; dropped).",                             \
      rpcmsg, none)                                                                                \
    X(rpc_backpressure_refusals_total,                                                             \
      "RPC submissions refused by backpressure: a peer's send queue was full, or too many calls "  \
      "were outstanding to it.",                                                                   \
      none, none)                                                                                  \
    X(rpc_frames_total, "Frames received and sent on RPC connections.", rpcframe, none)            \
    X(rpc_pool_buffers_total,                                                                      \
      "RPC message buffers of 64 KiB - 8 MiB: taken from the pool (hit), newly allocated (miss), " \
      "freed on return because the pool was full (dropped).",                                      \
      pool, none)                                                                                  \
    X(rpc_payload_sinks_total,                                                                     \
      "RPC request payloads a payload sink took: received straight into its destination "          \
      "(direct), discarded, or its context aborted (frame incomplete or no handler run).",         \
      rpcsink, none)

#define OBS_GAUGE_LIST(X)                                                                          \
    X(requests_in_flight, "API requests currently in progress, by operation.", add, op, none)      \
    X(segment_capacity_bytes, "Registered segment capacity, by tier.", set, tier, none)            \
    X(segment_used_bytes, "Segment bytes currently allocated, by tier.", set, tier, none)          \
    X(membership_live_members, "Live runtimes in the current membership snapshot.", set, none,     \
      none)                                                                                        \
    X(membership_last_refresh_timestamp_seconds,                                                   \
      "Unix time of the last successful membership refresh.", set, none, none)                     \
    X(lease_healthy, "1 when this runtime's lease was renewed within its TTL, else 0.", set, none, \
      none)                                                                                        \
    X(quota_reconciliation_backlog,                                                                \
      "Non-terminal quota operations (pending + publishing) of the tenants this runtime "          \
      "reconciles, from their usage rows as its reconciler last read them.",                       \
      set, none, none)                                                                             \
    X(quota_reconciliation_degraded,                                                               \
      "Quota operations the last reconciliation round left charged and locked (degraded).", set,   \
      none, none)                                                                                  \
    X(cold_offload_queue_depth,                                                                    \
      "Cold offload jobs queued or in flight on this runtime's cold core.", set, none, none)       \
    X(cold_staging_slots, "Slots of this cold device owner's remote-restore staging pool.", set,   \
      none, none)                                                                                  \
    X(cold_staging_slots_used, "Staging slots in use (filling, staged, or fenced and draining).",  \
      set, none, none)                                                                             \
    X(cold_staging_bytes_used, "Staging segment bytes held by slots in use.", set, none, none)     \
    X(cold_device_reserved_bytes,                                                                  \
      "Bytes reserved on this runtime's cold device by offloads not yet committed (also in "       \
      "kvmesh_segment_used_bytes{tier=\"cold\"}).",                                                \
      set, none, none)                                                                             \
    X(cold_device_health,                                                                          \
      "Health of this runtime's cold device record: 1 healthy, 2 degraded, 3 failed, 0 not in "    \
      "the device view.",                                                                          \
      set, none, none)                                                                             \
    X(cold_dev_capacity_bytes, "Capacity of each of this runtime's cold device records.", set,     \
      dev, none)                                                                                   \
    X(cold_dev_used_bytes, "Usage-committed bytes of each of this runtime's cold device records.", \
      set, dev, none)                                                                              \
    X(cold_dev_reserved_bytes,                                                                     \
      "Reserved bytes (offloads not yet committed) of each of this runtime's cold device "         \
      "records.",                                                                                  \
      set, dev, none)                                                                              \
    X(cold_dev_health,                                                                             \
      "Health of each of this runtime's cold device records: 1 healthy, 2 degraded, 3 failed, 0 "  \
      "not in the device view.",                                                                   \
      set, dev, none)                                                                              \
    X(rereplication_under_replicated_objects,                                                      \
      "Under-replicated objects found by the current re-replication pass that this runtime "       \
      "copies, not yet finished.",                                                                 \
      add, none, none)                                                                             \
    X(rereplication_pending_owners,                                                                \
      "Departed or draining owners whose routes this runtime's re-replication has still to pass.", \
      add, none, none)                                                                             \
    X(rereplication_copies_in_flight, "Re-replication copies in flight at this runtime.", add,     \
      none, none)                                                                                  \
    X(reservations_held,                                                                           \
      "Reservations past their TTL held by this owner until an exact route lookup settles them.",  \
      set, none, none)                                                                             \
    X(rpc_connections_open, "RPC connections open now (both directions).", set, none, none)        \
    X(rpc_queued_bytes, "Bytes queued for sending on RPC connections now.", set, none, none)       \
    X(rpc_queued_messages, "Messages queued for sending on RPC connections now.", set, none, none) \
    X(rpc_pool_cached_bytes, "Bytes the RPC buffer pool holds for reuse now.", set, none, none)    \
    X(op_conflict_retries_max,                                                                     \
      "The most route CAS conflicts one put or remove item of this runtime retried (since "        \
      "start).",                                                                                   \
      set, op, none)

#define OBS_HIST_LIST(X)                                                                           \
    X(request_duration_seconds, "API request latency, by operation.", latency, op, none)           \
    X(request_payload_bytes, "API request payload size, by operation.", bytes, op, none)           \
    X(metadata_duration_seconds, "Metadata backend call latency, by backend and call.", latency,   \
      backend, mcall)                                                                              \
    X(transport_duration_seconds, "Data-plane transport operation latency.", latency, transport,   \
      xop)                                                                                         \
    X(cold_restore_duration_seconds,                                                               \
      "Reads of cold-only objects at this runtime, call to verified bytes (local device or "       \
      "remote staging, backpressure retries included).",                                           \
      latency, none, none)                                                                         \
    X(op_conflict_retries,                                                                         \
      "Route CAS conflicts each put or remove item retried before it ended (any result), by "      \
      "operation.",                                                                                \
      count, op, none)

/* Per-tenant families (label `tenant`, bootstrap set only, `other` overflow). X(id, help) */
#define OBS_TENANT_COUNTER_LIST(X)                                                                 \
    X(tenant_requests_total, "API requests by tenant (bootstrap policy set only; others in "       \
                             "tenant=\"other\").")                                                 \
    X(tenant_request_bytes_total, "API payload bytes by tenant (bootstrap policy set only).")      \
    X(tenant_request_errors_total, "Failed API requests by tenant (bootstrap policy set only).")

/* Collected at scrape time from /proc/self; full names (the Prometheus standard process
 * families, plus kvmesh_process_threads). X(name, type, help) */
#define OBS_PROCESS_LIST(X)                                                                        \
    X(process_cpu_seconds_total, counter, "Total user and system CPU time spent in seconds.")      \
    X(process_resident_memory_bytes, gauge, "Resident memory size in bytes.")                      \
    X(process_open_fds, gauge, "Number of open file descriptors.")                                 \
    X(process_max_fds, gauge, "Maximum number of open file descriptors.")                          \
    X(process_start_time_seconds, gauge, "Start time of the process since unix epoch in seconds.") \
    X(kvmesh_process_threads, gauge, "Threads in the process.")

/* ---- generated storage ------------------------------------------------------------------- */

#define OBS_DIMN(d) ((size_t)OBS__N_##d)

#define OBS_LAT_BUCKETS   20
#define OBS_BYTES_BUCKETS 11
#define OBS_COUNT_BUCKETS 7
#define OBS_NB_latency    OBS_LAT_BUCKETS
#define OBS_NB_bytes      OBS_BYTES_BUCKETS
#define OBS_NB_count      OBS_COUNT_BUCKETS

/* Limits. */
#define OBS_MAX_SHARDS           1024 /* private shards in the process, all registries */
#define OBS_TENANT_LABEL_CAP_MAX 64   /* largest configurable per-tenant label set */
#define OBS_TENANT_ID_MAX        128  /* bytes in a tenant id (labels and stats) */

struct obs_counter_slots {
#define OBS_X_C(id, help, d1, d2) uint64_t id[OBS_DIMN(d1) * OBS_DIMN(d2)];
    OBS_COUNTER_LIST(OBS_X_C)
#undef OBS_X_C
};

struct obs_gauge_slots {
#define OBS_X_G(id, help, mode, d1, d2) int64_t id[OBS_DIMN(d1) * OBS_DIMN(d2)];
    OBS_GAUGE_LIST(OBS_X_G)
#undef OBS_X_G
};

struct obs_hist_slots {
#define OBS_X_H(id, help, layout, d1, d2)                                                          \
    uint64_t id[OBS_DIMN(d1) * OBS_DIMN(d2)][OBS_NB_##layout + 1];                                 \
    uint64_t id##__sum[OBS_DIMN(d1) * OBS_DIMN(d2)];
    OBS_HIST_LIST(OBS_X_H)
#undef OBS_X_H
};

struct obs_tenant_slots {
#define OBS_X_T(id, help) uint64_t id[OBS_TENANT_LABEL_CAP_MAX + 1];
    OBS_TENANT_COUNTER_LIST(OBS_X_T)
#undef OBS_X_T
};

/* Family descriptors (per-family compile-time constants used by the update macros). */
enum {
#define OBS_X_C(id, help, d1, d2) OBS__C1_##id = OBS__N_##d1, OBS__C2_##id = OBS__N_##d2,
    OBS_COUNTER_LIST(OBS_X_C)
#undef OBS_X_C
#define OBS_X_G(id, help, mode, d1, d2)                                                            \
    OBS__G1_##id = OBS__N_##d1, OBS__G2_##id = OBS__N_##d2, OBS__GM_##id = OBS_GMODE_##mode,
        OBS_GMODE_set = 1,
    OBS_GMODE_add = 2,
    OBS_GAUGE_LIST(OBS_X_G)
#undef OBS_X_G
#define OBS_X_H(id, help, layout, d1, d2)                                                          \
    OBS__H1_##id = OBS__N_##d1, OBS__H2_##id = OBS__N_##d2, OBS__HL_##id = OBS_LAYOUT_##layout,
        OBS_LAYOUT_latency = 1,
    OBS_LAYOUT_bytes = 2,
    OBS_LAYOUT_count = 3,
    OBS_HIST_LIST(OBS_X_H)
#undef OBS_X_H
};

/*
 * A shard: one block holding every series of one registry, written by one thread (relaxed
 * load + store) and summed by scrapes (relaxed loads). `tag` says who holds it:
 *   0                      in the process pool (no registry);
 *   (registry id << 1)     held by that registry, free for any of its threads to claim;
 *   (registry id << 1) | 1 claimed by one live thread of that registry.
 * The overflow shard of a registry (shared != 0) is written by many threads with atomic adds.
 * Shard memory is never freed while the process runs (a freed registry returns its shards to the
 * pool), so a stale thread-local cache entry can never point at freed memory.
 */
struct obs_shard {
    struct obs_counter_slots c;
    struct obs_gauge_slots g;
    struct obs_hist_slots h;
    struct obs_tenant_slots t;
    uint64_t tag; /* atomic, see above */
    int shared;
    struct obs_shard *reg_next;  /* the registry's shard list (push-only while it lives) */
    struct obs_shard *pool_next; /* the process pool (free shards) */
} __attribute__((aligned(64)));

/*
 * A metrics registry: the counters of one runtime (or of one component opened on its own, such
 * as a metadata handle in a test). It is handed to the layers that count through their config
 * (meta_opts_t, route_svc_opts_t, rpc_config, tp_config, obs_tracer_config, obs_http_config):
 * no layer counts into a global. Runtimes sharing a process have separate registries, so each
 * runtime's /metrics shows its own events only. Created and freed by its owner; no thread may
 * update it once obs_registry_free starts.
 */
struct obs_registry {
    uint64_t id; /* unique in the process, never reused; 0 is never a registry id */
    pthread_mutex_t mu;
    struct obs_shard *shards;      /* atomic head; every shard this registry ever claimed */
    struct obs_gauge_slots gauges; /* set-mode gauges, relaxed atomics */
};

/* Creates an empty registry (every series 0). KVMESH_ENOMEM. */
int obs_registry_new(struct obs_registry **out);
/* Returns the registry's shards to the process pool and frees it. NULL is a no-op. */
void obs_registry_free(struct obs_registry *r);

/* The calling thread's shard cache: a few (registry id, shard) pairs, most recent first. */
#define OBS_TLS_WAYS 8
struct obs_tls_ent {
    uint64_t id;
    struct obs_shard *s;
};
extern _Thread_local struct obs_tls_ent obs_tls_cache[OBS_TLS_WAYS];
struct obs_shard *obs_shard_get_slow(struct obs_registry *r);

static inline struct obs_shard *obs_shard_of(struct obs_registry *r)
{
    return KVM_LIKELY(obs_tls_cache[0].id == r->id) ? obs_tls_cache[0].s : obs_shard_get_slow(r);
}

static inline void obs_slot_add_u64(struct obs_shard *s, uint64_t *p, uint64_t v)
{
    if (KVM_LIKELY(!s->shared))
        __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline void obs_slot_add_i64(struct obs_shard *s, int64_t *p, int64_t v)
{
    if (KVM_LIKELY(!s->shared))
        __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

#define OBS_IDX2(n1, n2, i1, i2)                                                                   \
    (KVM_ASSERT((size_t)(i1) < (size_t)(n1) && (size_t)(i2) < (size_t)(n2)),                       \
     (size_t)(i1) * (size_t)(n2) + (size_t)(i2))

/* Every update macro takes the registry first; a NULL registry counts nothing. */

/* counters: add v to series (i1, i2) of family id */
#define obs_count(reg, id, i1, i2, v)                                                              \
    do {                                                                                           \
        struct obs_registry *obs_r_ = (reg);                                                       \
        if (obs_r_) {                                                                              \
            struct obs_shard *obs_s_ = obs_shard_of(obs_r_);                                       \
            obs_slot_add_u64(obs_s_, &obs_s_->c.id[OBS_IDX2(OBS__C1_##id, OBS__C2_##id, i1, i2)],  \
                             (uint64_t)(v));                                                       \
        }                                                                                          \
    } while (0)

/* add-mode gauges: add a signed delta */
#define obs_gauge_add(reg, id, i1, i2, delta)                                                      \
    do {                                                                                           \
        KVM_STATIC_ASSERT(OBS__GM_##id == OBS_GMODE_add, "gauge " #id " is not add-mode");         \
        struct obs_registry *obs_r_ = (reg);                                                       \
        if (obs_r_) {                                                                              \
            struct obs_shard *obs_s_ = obs_shard_of(obs_r_);                                       \
            obs_slot_add_i64(obs_s_, &obs_s_->g.id[OBS_IDX2(OBS__G1_##id, OBS__G2_##id, i1, i2)],  \
                             (int64_t)(delta));                                                    \
        }                                                                                          \
    } while (0)

/* set-mode gauges: store an absolute value */
#define obs_gauge_set(reg, id, i1, i2, value)                                                      \
    do {                                                                                           \
        KVM_STATIC_ASSERT(OBS__GM_##id == OBS_GMODE_set, "gauge " #id " is not set-mode");         \
        struct obs_registry *obs_r_ = (reg);                                                       \
        if (obs_r_)                                                                                \
            __atomic_store_n(&obs_r_->gauges.id[OBS_IDX2(OBS__G1_##id, OBS__G2_##id, i1, i2)],     \
                             (int64_t)(value), __ATOMIC_RELAXED);                                  \
    } while (0)

unsigned obs_lat_bucket(uint64_t ns);
unsigned obs_bytes_bucket(uint64_t bytes);
unsigned obs_count_bucket(uint64_t n);

static inline unsigned obs_layout_bucket(int layout, uint64_t v)
{
    return layout == OBS_LAYOUT_latency ? obs_lat_bucket(v)
           : layout == OBS_LAYOUT_count ? obs_count_bucket(v)
                                        : obs_bytes_bucket(v);
}

/* histograms: record one observation (ns for latency layouts, bytes for bytes layouts) */
#define obs_observe(reg, id, i1, i2, v)                                                            \
    do {                                                                                           \
        struct obs_registry *obs_r_ = (reg);                                                       \
        if (obs_r_) {                                                                              \
            struct obs_shard *obs_s_ = obs_shard_of(obs_r_);                                       \
            size_t obs_i_ = OBS_IDX2(OBS__H1_##id, OBS__H2_##id, i1, i2);                          \
            uint64_t obs_v_ = (uint64_t)(v);                                                       \
            obs_slot_add_u64(obs_s_,                                                               \
                             &obs_s_->h.id[obs_i_][obs_layout_bucket(OBS__HL_##id, obs_v_)], 1);   \
            obs_slot_add_u64(obs_s_, &obs_s_->h.id##__sum[obs_i_], obs_v_);                        \
        }                                                                                          \
    } while (0)

/* per-tenant counters: slot from obs_tenant_slot() */
#define obs_tenant_count(reg, id, slot, v)                                                         \
    do {                                                                                           \
        struct obs_registry *obs_r_ = (reg);                                                       \
        unsigned obs_t_ = (slot);                                                                  \
        KVM_ASSERT(obs_t_ <= OBS_TENANT_LABEL_CAP_MAX);                                            \
        if (obs_r_) {                                                                              \
            struct obs_shard *obs_s_ = obs_shard_of(obs_r_);                                       \
            obs_slot_add_u64(obs_s_, &obs_s_->t.id[obs_t_], (uint64_t)(v));                        \
        }                                                                                          \
    } while (0)

/* ---- per-tenant label set ---------------------------------------------------------------- */

/*
 * Configures the per-tenant label set: the first min(n, cap) ids of the bootstrap policy set get
 * their own series; all other tenants map to `other`. cap 0 (the default) disables the tenant
 * families. Call once at startup, before traffic; a later call replaces the set (the old table
 * stays allocated until obs_metrics_shutdown, so concurrent lookups stay valid) and resets
 * nothing: series of a replaced slot continue counting under the new name, so change it only
 * across restarts. Copies the ids. Errors: KVMESH_EINVAL (cap too large, id empty/too long or
 * with characters outside [A-Za-z0-9._:-], duplicate ids).
 */
int obs_metrics_set_tenants(const char *const *ids, size_t n, size_t cap);

/* Slot of a tenant id for obs_tenant_count: 0..cap-1 for a labelled tenant, OBS_TENANT_OTHER
 * otherwise. Lock-free (reads an immutable hash table). */
#define OBS_TENANT_OTHER OBS_TENANT_LABEL_CAP_MAX
unsigned obs_tenant_slot(const char *id, size_t len);

/* ---- allocation (with a fault-injection hook for tests) ---------------------------------- */

/* Every fallible allocation in src/obs goes through these. */
void *obs_malloc(size_t n);
void *obs_calloc(size_t n, size_t size);
void *obs_realloc(void *p, size_t n);
char *obs_strdup(const char *s);
/* Test hook (SQLite-style OOM loops): on the calling thread, the next n obs allocations succeed
 * and the one after fails (once); n < 0 disarms. Other threads are unaffected. */
void obs_test_fail_alloc_after(int n);

/* ---- output buffer ----------------------------------------------------------------------- */

/* A growable byte buffer with a hard cap: appends past the cap set `overflow` and are dropped,
 * so a response can never grow without bound. The owner frees with obs_buf_free. */
struct obs_buf {
    char *data;
    size_t len, cap, limit;
    bool overflow;
};
void obs_buf_init(struct obs_buf *b, size_t limit);
void obs_buf_free(struct obs_buf *b);
void obs_buf_append(struct obs_buf *b, const char *s, size_t n);
static inline void obs_buf_puts(struct obs_buf *b, const char *s)
{
    obs_buf_append(b, s, __builtin_strlen(s));
}
void obs_buf_printf(struct obs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal (with quotes), escaping as RFC 8259 requires. */
void obs_buf_json_str(struct obs_buf *b, const char *s, size_t n);

/* ---- exposition and reading -------------------------------------------------------------- */

/* Largest /metrics body; the closed label sets keep the real size far below it. */
#define OBS_METRICS_TEXT_LIMIT (1u << 20)

/* Appends the Prometheus text format (version 0.0.4) of every family, including the process
 * families read from /proc/self, to b. Safe from any thread, concurrently with updates. */
void obs_metrics_render(const struct obs_registry *r, struct obs_buf *b);

/* Sum over shards of one counter series / add-gauge / histogram count, by family name (the id,
 * without "kvmesh_") and label indices. Returns KVMESH_ENOENT for an unknown name. For the
 * /stats endpoint and tests. */
int obs_metrics_read(const struct obs_registry *r, const char *id, unsigned i1, unsigned i2,
                     int64_t *out);

/* Names of every family ("kvmesh_..."), in exposition order; *n receives the count. Static. */
const char *const *obs_metrics_family_names(size_t *n);

/* Process figures from /proc/self. */
struct obs_process_stats {
    double cpu_seconds;
    double start_time_seconds; /* unix time the process started */
    uint64_t resident_bytes;
    uint64_t open_fds, max_fds, threads;
};
int obs_process_read(struct obs_process_stats *out);

/* Frees the tenant label tables (shards stay: they are reachable and reused for the life of the
 * process). For tests at process end, with no thread updating tenant metrics any more. */
void obs_metrics_shutdown(void);

#endif
