// SPDX-License-Identifier: Apache-2.0
/*
 * rpc_metrics.c — the export of an endpoint's RPC figures into the runtime's registry
 * (rpc_metrics.h). Counters add deltas against the figures of the previous export; gauges are
 * set. Label indices map 1:1 onto the RPC layer's own enumerations, checked below. The figures
 * the endpoint counts straight into the registry (calls completed and failed, requests received,
 * bytes: kvmesh_transport_*{operation="rpc_send"|"rpc_receive"}) are not exported here; the RPC
 * layer labels them transport="unix" for a connection over a unix socket, "tcp" otherwise
 * (rpc_conn_transport in net/rpc_impl.h).
 */
#include "store/rpc_metrics.h"

#include <stddef.h>

#include "core/util.h"
#include "net/handshake.h"

_Static_assert((int)OBS__N_rpcclose == (int)RPC_CLOSE_COUNT,
               "the `reason` label of kvmesh_rpc_connections_closed_total has one value per "
               "RPC close reason, in rpc.h's order");
_Static_assert((int)OBS__N_hsreason == HS_REASON_MAX,
               "the `reason` label of kvmesh_rpc_handshake_refusals_total has one value per "
               "handshake refusal reason (hs_reason 1..HS_REASON_MAX)");

/* The growth of a counter since the last export; remembers now. */
static uint64_t delta(uint64_t now, uint64_t *seen)
{
    uint64_t d = now > *seen ? now - *seen : 0;
    if (now > *seen)
        *seen = now;
    return d;
}

static void export_conns(struct obs_registry *m, const struct rpc_stats *n, struct rpc_stats *s)
{
    obs_count(m, rpc_connections_total, OBS_RPCDIR_INBOUND, OBS_NONE,
              delta(n->conns_accepted, &s->conns_accepted));
    obs_count(m, rpc_connections_total, OBS_RPCDIR_OUTBOUND, OBS_NONE,
              delta(n->conns_connected, &s->conns_connected));
    obs_count(m, rpc_handshakes_total, OBS_NONE, OBS_NONE,
              delta(n->handshakes_ok, &s->handshakes_ok));
    for (unsigned r = 1; r <= HS_REASON_MAX; r++) {
        obs_count(m, rpc_handshake_refusals_total, OBS_RPCSIDE_LOCAL, r - 1,
                  delta(n->refused_local[r], &s->refused_local[r]));
        obs_count(m, rpc_handshake_refusals_total, OBS_RPCSIDE_REMOTE, r - 1,
                  delta(n->refused_remote[r], &s->refused_remote[r]));
    }
    for (unsigned r = 0; r < RPC_CLOSE_COUNT; r++)
        obs_count(m, rpc_connections_closed_total, r, OBS_NONE, delta(n->close[r], &s->close[r]));
}

static void export_traffic(struct obs_registry *m, const struct rpc_stats *n, struct rpc_stats *s)
{
    obs_count(m, rpc_calls_started_total, OBS_NONE, OBS_NONE,
              delta(n->calls_started, &s->calls_started));
    obs_count(m, rpc_calls_unanswered_total, OBS_RPCCALL_TIMED_OUT, OBS_NONE,
              delta(n->calls_timed_out, &s->calls_timed_out));
    obs_count(m, rpc_calls_unanswered_total, OBS_RPCCALL_CANCELED, OBS_NONE,
              delta(n->calls_canceled, &s->calls_canceled));
    const struct {
        unsigned kind;
        size_t off;
    } msgs[] = {
        {OBS_RPCMSG_REPLY_SENT, offsetof(struct rpc_stats, replies_sent)},
        {OBS_RPCMSG_NOTIFY_SENT, offsetof(struct rpc_stats, notifies_sent)},
        {OBS_RPCMSG_NOTIFY_RECEIVED, offsetof(struct rpc_stats, notifies_received)},
        {OBS_RPCMSG_NOTIFY_DROPPED, offsetof(struct rpc_stats, notifies_dropped)},
        {OBS_RPCMSG_RESPONSE_LATE, offsetof(struct rpc_stats, responses_late)},
    };
    _Static_assert(KVM_ARRAY_SIZE(msgs) == OBS__N_rpcmsg, "every `kind` exported");
    for (size_t i = 0; i < KVM_ARRAY_SIZE(msgs); i++) {
        const uint64_t *now = (const uint64_t *)((const char *)n + msgs[i].off);
        uint64_t *was = (uint64_t *)((char *)s + msgs[i].off);
        obs_count(m, rpc_messages_total, msgs[i].kind, OBS_NONE, delta(*now, was));
    }
    obs_count(m, rpc_backpressure_refusals_total, OBS_NONE, OBS_NONE, delta(n->eagain, &s->eagain));
    obs_count(m, rpc_frames_total, OBS_RPCFRAME_RECEIVED, OBS_NONE,
              delta(n->frames_in, &s->frames_in));
    obs_count(m, rpc_frames_total, OBS_RPCFRAME_SENT, OBS_NONE,
              delta(n->frames_out, &s->frames_out));
}

static void export_pool(struct obs_registry *m, const struct rpc_stats *n, struct rpc_stats *s)
{
    obs_count(m, rpc_pool_buffers_total, OBS_POOL_HIT, OBS_NONE,
              delta(n->pool_hits, &s->pool_hits));
    obs_count(m, rpc_pool_buffers_total, OBS_POOL_MISS, OBS_NONE,
              delta(n->pool_misses, &s->pool_misses));
    obs_count(m, rpc_pool_buffers_total, OBS_POOL_DROPPED, OBS_NONE,
              delta(n->pool_dropped, &s->pool_dropped));
    obs_count(m, rpc_payload_sinks_total, OBS_RPCSINK_DIRECT, OBS_NONE,
              delta(n->sink_direct, &s->sink_direct));
    obs_count(m, rpc_payload_sinks_total, OBS_RPCSINK_DISCARDED, OBS_NONE,
              delta(n->sink_discarded, &s->sink_discarded));
    obs_count(m, rpc_payload_sinks_total, OBS_RPCSINK_ABORTED, OBS_NONE,
              delta(n->sink_aborted, &s->sink_aborted));
}

void kvm_rpc_metrics_export(struct obs_registry *m, const struct rpc_stats *now,
                            struct rpc_stats *seen)
{
    KVM_ASSERT(now && seen);
    export_conns(m, now, seen);
    export_traffic(m, now, seen);
    export_pool(m, now, seen);
    obs_gauge_set(m, rpc_connections_open, OBS_NONE, OBS_NONE, (int64_t)now->conns_open);
    obs_gauge_set(m, rpc_queued_bytes, OBS_NONE, OBS_NONE, (int64_t)now->queued_bytes);
    obs_gauge_set(m, rpc_queued_messages, OBS_NONE, OBS_NONE, (int64_t)now->queued_msgs);
    obs_gauge_set(m, rpc_pool_cached_bytes, OBS_NONE, OBS_NONE, (int64_t)now->pool_cached_bytes);
}
