/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_rpc_metrics — the export of an RPC endpoint's figures (struct rpc_stats) into the
 * kvmesh_rpc_* families (src/store/rpc_metrics.c): every field lands in its own series, counters
 * add only the growth since the previous export and never go backwards, gauges follow the
 * figures, and each label value is the RPC layer's own name for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "net/handshake.h"
#include "net/rpc.h"
#include "obs/metrics.h"
#include "store/rpc_metrics.h"

static int64_t rd(const struct obs_registry *m, const char *id, unsigned i1, unsigned i2)
{
    int64_t v = -1;
    assert_int_equal(obs_metrics_read(m, id, i1, i2, &v), 0);
    return v;
}

/* Every field distinct: k * 1000 + its index, so a series read from the wrong field shows. */
static void fill(struct rpc_stats *st, uint64_t k)
{
    uint64_t *f = (uint64_t *)st;
    for (size_t i = 0; i < sizeof(*st) / sizeof(uint64_t); i++)
        f[i] = k * 1000 + i;
}

static void check_all(const struct obs_registry *m, const struct rpc_stats *st)
{
    assert_int_equal(rd(m, "rpc_connections_total", OBS_RPCDIR_INBOUND, 0), st->conns_accepted);
    assert_int_equal(rd(m, "rpc_connections_total", OBS_RPCDIR_OUTBOUND, 0), st->conns_connected);
    assert_int_equal(rd(m, "rpc_handshakes_total", 0, 0), st->handshakes_ok);
    for (unsigned r = 1; r <= HS_REASON_MAX; r++) {
        assert_int_equal(rd(m, "rpc_handshake_refusals_total", OBS_RPCSIDE_LOCAL, r - 1),
                         st->refused_local[r]);
        assert_int_equal(rd(m, "rpc_handshake_refusals_total", OBS_RPCSIDE_REMOTE, r - 1),
                         st->refused_remote[r]);
    }
    for (unsigned r = 0; r < RPC_CLOSE_COUNT; r++)
        assert_int_equal(rd(m, "rpc_connections_closed_total", r, 0), st->close[r]);
    assert_int_equal(rd(m, "rpc_calls_started_total", 0, 0), st->calls_started);
    assert_int_equal(rd(m, "rpc_calls_unanswered_total", OBS_RPCCALL_TIMED_OUT, 0),
                     st->calls_timed_out);
    assert_int_equal(rd(m, "rpc_calls_unanswered_total", OBS_RPCCALL_CANCELED, 0),
                     st->calls_canceled);
    assert_int_equal(rd(m, "rpc_messages_total", OBS_RPCMSG_REPLY_SENT, 0), st->replies_sent);
    assert_int_equal(rd(m, "rpc_messages_total", OBS_RPCMSG_NOTIFY_SENT, 0), st->notifies_sent);
    assert_int_equal(rd(m, "rpc_messages_total", OBS_RPCMSG_NOTIFY_RECEIVED, 0),
                     st->notifies_received);
    assert_int_equal(rd(m, "rpc_messages_total", OBS_RPCMSG_NOTIFY_DROPPED, 0),
                     st->notifies_dropped);
    assert_int_equal(rd(m, "rpc_messages_total", OBS_RPCMSG_RESPONSE_LATE, 0), st->responses_late);
    assert_int_equal(rd(m, "rpc_backpressure_refusals_total", 0, 0), st->eagain);
    assert_int_equal(rd(m, "rpc_frames_total", OBS_RPCFRAME_RECEIVED, 0), st->frames_in);
    assert_int_equal(rd(m, "rpc_frames_total", OBS_RPCFRAME_SENT, 0), st->frames_out);
    assert_int_equal(rd(m, "rpc_pool_buffers_total", OBS_POOL_HIT, 0), st->pool_hits);
    assert_int_equal(rd(m, "rpc_pool_buffers_total", OBS_POOL_MISS, 0), st->pool_misses);
    assert_int_equal(rd(m, "rpc_pool_buffers_total", OBS_POOL_DROPPED, 0), st->pool_dropped);
    assert_int_equal(rd(m, "rpc_payload_sinks_total", OBS_RPCSINK_DIRECT, 0), st->sink_direct);
    assert_int_equal(rd(m, "rpc_payload_sinks_total", OBS_RPCSINK_DISCARDED, 0),
                     st->sink_discarded);
    assert_int_equal(rd(m, "rpc_payload_sinks_total", OBS_RPCSINK_ABORTED, 0), st->sink_aborted);
    assert_int_equal(rd(m, "rpc_connections_open", 0, 0), st->conns_open);
    assert_int_equal(rd(m, "rpc_queued_bytes", 0, 0), st->queued_bytes);
    assert_int_equal(rd(m, "rpc_queued_messages", 0, 0), st->queued_msgs);
    assert_int_equal(rd(m, "rpc_pool_cached_bytes", 0, 0), st->pool_cached_bytes);
}

static void test_every_field_and_deltas(void **state)
{
    (void)state;
    struct obs_registry *m = NULL;
    assert_int_equal(obs_registry_new(&m), 0);
    struct rpc_stats seen, now;
    memset(&seen, 0, sizeof(seen));
    fill(&now, 1);
    kvm_rpc_metrics_export(m, &now, &seen);
    check_all(m, &now);
    kvm_rpc_metrics_export(m, &now, &seen); /* nothing grew: nothing added */
    check_all(m, &now);
    fill(&now, 5);
    kvm_rpc_metrics_export(m, &now, &seen);
    check_all(m, &now);
    /* a figure below the last export (gauges fall; counters must not follow) */
    struct rpc_stats low = now;
    low.conns_open = 1;
    low.queued_bytes = 0;
    low.calls_started = 3;
    kvm_rpc_metrics_export(m, &low, &seen);
    assert_int_equal(rd(m, "rpc_calls_started_total", 0, 0), now.calls_started);
    assert_int_equal(rd(m, "rpc_connections_open", 0, 0), 1);
    assert_int_equal(rd(m, "rpc_queued_bytes", 0, 0), 0);
    kvm_rpc_metrics_export(NULL, &now, &seen); /* no registry: nothing happens */
    obs_registry_free(m);
}

/* The label values are the RPC layer's names: close reasons and handshake refusal reasons. */
static void test_label_names(void **state)
{
    (void)state;
    struct obs_registry *m = NULL;
    assert_int_equal(obs_registry_new(&m), 0);
    struct obs_buf b;
    obs_buf_init(&b, OBS_METRICS_TEXT_LIMIT);
    obs_metrics_render(m, &b);
    obs_buf_append(&b, "", 1);
    assert_false(b.overflow);
    char want[160];
    for (int r = 0; r < RPC_CLOSE_COUNT; r++) {
        snprintf(want, sizeof(want), "\nkvmesh_rpc_connections_closed_total{reason=\"%s\"} 0\n",
                 rpc_close_reason_name(r));
        assert_non_null(strstr(b.data, want));
    }
    for (int r = 1; r <= HS_REASON_MAX; r++) {
        snprintf(want, sizeof(want),
                 "\nkvmesh_rpc_handshake_refusals_total{side=\"remote\",reason=\"%s\"} 0\n",
                 hs_reason_name(r));
        assert_non_null(strstr(b.data, want));
    }
    obs_buf_free(&b);
    obs_registry_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_field_and_deltas),
        cmocka_unit_test(test_label_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
