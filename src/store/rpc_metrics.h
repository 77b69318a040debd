/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_metrics.h — the RPC layer's figures (src/net/rpc.h struct rpc_stats: connections,
 * handshakes, close reasons, calls, messages, frames, backpressure, the message buffer pool) as
 * the kvmesh_rpc_* families of a runtime's registry (docs/operations.md).
 *
 * The endpoint keeps those figures as its own [loop] counters; they are exported when /metrics
 * is scraped (runtime.c admin_before_scrape runs kvm_rpc_metrics_export on the loop): counters
 * add the growth since the last export (so they never go backwards), gauges are set. The
 * figures the RPC layer already counts into the registry (calls completed and failed, requests
 * received, bytes: kvmesh_transport_*_total{operation="rpc_send"|"rpc_receive"}) are not
 * exported again.
 *
 * [loop] only, or any one thread at a time for a caller-owned rpc_stats pair (tests).
 */
#ifndef KVMESH_STORE_RPC_METRICS_H
#define KVMESH_STORE_RPC_METRICS_H

#include "net/rpc.h"
#include "obs/metrics.h"

/* Exports now (an endpoint's rpc_get_stats) into m. *seen holds what earlier exports added (the
 * caller zeroes it before the first) and is updated. m NULL: nothing happens. */
void kvm_rpc_metrics_export(struct obs_registry *m, const struct rpc_stats *now,
                            struct rpc_stats *seen);

#endif
