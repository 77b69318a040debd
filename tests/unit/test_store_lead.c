/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_lead.c — an application thread that leads its runtime's loop while it waits
 * (src/store/rt_op.c kvm_op_run, src/env/env_uv_thread.c): a storage runtime S and a client-only
 * runtime C in this process on memory:// metadata. A get from C's one thread is led (counted in
 * kvmesh_op_loop_leads_total, one of the hand-offs); with S's loop blocked, a led get ends at
 * its deadline, never before: the route lookup's deadline timer, which the leading thread runs,
 * fails it (KVMESH_EUNAVAILABLE), or the caller abandons it at deadline + slack
 * (KVMESH_ETIMEDOUT), as for a posted op; once S runs again, C's gets succeed (the late answer
 * is dropped). Each attempt that must be led starts once C's loop thread sleeps between passes
 * (wait_loop_parked: a refused attempt does not make the next one refused too).
 * Every wait is bounded; no timing is asserted beyond "not before the deadline".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "loop_gate.h"
#include "obs/metrics.h"
#include "store/store.h"
#include "trt.h"

#define TIMEOUT_MS "400" /* C's request_timeout_ms */
#define VSIZE      4096

static const kvmesh_scope_t sc = {"lead", NULL};

static kvmesh_t *open_rt(const char *url, bool storage)
{
    static const char *const base[][2] = {{"segment_size", "16777216"},
                                          {"max_object_size", "1048576"},
                                          {"replicas", "1"},
                                          {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url},
                                   {"memory_size", storage ? "16777216" : "0"},
                                   {"request_timeout_ms", storage ? "2000" : TIMEOUT_MS},
                                   {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    assert_non_null(kv);
    return kv;
}

static int64_t rd(kvmesh_t *kv, const char *fam)
{
    int64_t v = 0;
    assert_int_equal(
        obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, OBS_OP_GET, OBS_NONE, &v), 0);
    return v;
}

/*
 * Waits (bounded: 10 s) until kv's loop thread sleeps between passes, so that a get started next
 * finds the loop free and leads it (refused only if a timer or I/O wakes the loop thread in
 * between). Without it the attempts below are not independent: a get that follows a refused
 * (posted) one starts as soon as the loop thread's pass completed that one, which wakes this
 * thread while the loop thread still holds the loop for the rest of its pass; on a loaded host
 * the woken thread often runs first (the loop thread preempted), is refused and posted in turn,
 * and so on: one refusal chains into all of the attempts' refusals.
 */
static void wait_loop_parked(kvmesh_t *kv)
{
    env_uv_thread_t *t = kvmesh_runtime_of(kv)->thread;
    uint64_t end = env_clock_mono_ms() + 10000;
    while (!env_uv_thread_parked(t)) {
        assert_true(env_clock_mono_ms() < end);
        usleep(1000);
    }
}

/* Blocks S's loop (tests/support/loop_gate.h). */
static struct loop_gate gate = LOOP_GATE_INIT;

static void test_led_get_deadline(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "memory://store-lead-%ld", (long)getpid());
    kvmesh_t *S = open_rt(url, true), *C = open_rt(url, false);
    static uint8_t v[VSIZE], out[VSIZE];
    memset(v, 7, sizeof(v));
    size_t got = 0;
    /* until the route authority (S) has its leases: bounded, 60 s */
    uint64_t end = env_clock_mono_ms() + 60000;
    while (kvmesh_put(C, &sc, "k", 1, v, sizeof(v), NULL) != 0 ||
           kvmesh_get_into(C, &sc, "k", 1, out, sizeof(out), &got) != 0) {
        assert_true(env_clock_mono_ms() < end);
        usleep(100000);
    }

    /* one thread, an idle loop: the get is led (a refusal only when C's loop thread woke for a
     * pass at that instant: then try again, once it sleeps again) */
    int64_t led0 = rd(C, "op_loop_leads_total"), hand0 = rd(C, "op_handoffs_total");
    for (int i = 0; i < 50 && rd(C, "op_loop_leads_total") == led0; i++) {
        wait_loop_parked(C);
        assert_int_equal(kvmesh_get_into(C, &sc, "k", 1, out, sizeof(out), &got), 0);
    }
    assert_true(rd(C, "op_loop_leads_total") > led0);
    assert_true(rd(C, "op_loop_leads_total") - led0 <= rd(C, "op_handoffs_total") - hand0);

    /* S's loop blocked: C's led get waits for an answer that does not come, up to its deadline */
    assert_int_equal(env_post(kvmesh_runtime_of(S)->env, loop_gate_block, &gate), 0);
    loop_gate_wait_entered(&gate);
    bool led_timeout = false;
    for (int i = 0; i < 5 && !led_timeout; i++) {
        int64_t l0 = rd(C, "op_loop_leads_total");
        wait_loop_parked(C); /* (after a posted attempt, its loop pass has ended) */
        uint64_t t0 = env_clock_mono_ms();
        int rc = kvmesh_get_into(C, &sc, "k", 1, out, sizeof(out), &got);
        uint64_t took = env_clock_mono_ms() - t0;
        fprintf(stderr, "get with the authority's loop blocked: %s after %llu ms: %s\n",
                kvmesh_errname(rc), (unsigned long long)took, kvmesh_last_error());
        /* the lookup's own deadline timer (run by the leader) fails it, or the caller abandons
         * it at deadline + slack */
        assert_true(rc == KVMESH_EUNAVAILABLE || rc == KVMESH_ETIMEDOUT);
        assert_true(took >= (uint64_t)atoi(TIMEOUT_MS)); /* never before the deadline */
        led_timeout = rd(C, "op_loop_leads_total") > l0;
    }
    assert_true(led_timeout);
    loop_gate_open(&gate);

    /* S runs again: C's gets succeed (bounded) */
    end = env_clock_mono_ms() + 30000;
    while (kvmesh_get_into(C, &sc, "k", 1, out, sizeof(out), &got) != 0) {
        assert_true(env_clock_mono_ms() < end);
        usleep(50000);
    }
    assert_int_equal(got, VSIZE);
    assert_memory_equal(out, v, VSIZE);
    assert_int_equal(kvmesh_close(C), 0);
    assert_int_equal(kvmesh_close(S), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_led_get_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
