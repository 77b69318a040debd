/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_prim_lost — a put at the primary whose answer never comes (docs/store.md "Puts at the
 * primary", "Where it is settled"): a storage runtime S (the only route authority, so the key's
 * shard primary) and a client-only runtime C in this process on memory:// metadata, over tcp
 * loopback. C's single small put of a key owned by S goes as one STORE_RPC_PUT_PRIMARY
 * (checked: one reservation exchange, no route CAS from C). Then S's loop is blocked by the test
 * (tests/support/loop_gate.h) and C puts a new value of the key: the request is sent, no answer
 * comes, and the put fails with KVMESH_ETIMEDOUT "may have been applied" naming the route
 * primary — whether C's RPC deadline ends it (put_primary.c, KVM_PRIM_UNKNOWN) or the caller
 * abandons the PLACE op at deadline + slack (rt_op.c, op->prim_sent): both say the same, so
 * which timer fires first does not matter. After S runs again (it may then publish the value,
 * or decline it, or not get it at all):
 *   - every read of the key returns the old or the new value, whole (never other bytes), and
 *     the key is never absent;
 *   - later puts of the key succeed and are read back;
 *   - S's slot accounting comes back to what the live values need: no reservation open, nothing
 *     in reclaim, one committed slot per live key and their bytes, nothing more (slot_core_stats
 *     read on S's loop, with the slot core's invariant check).
 * Every wait is bounded; no timing is asserted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "env/env.h"
#include "kvmesh.h"
#include "loop_gate.h"
#include "net/rpc.h"
#include "obs/metrics.h"
#include "proc.h"
#include "store/slot_core.h"
#include "store/store.h"
#include "trt.h"

#define C_TIMEOUT_MS "1000" /* C's request_timeout_ms: the put's deadline */
#define VLEN         4096   /* the warm-up key's length too (trt_wait_put_get) */
#define LIVE_KEYS    2      /* "warm" and "k" */
#define WAIT_MS      30000  /* bound of every wait for the runtimes to settle */

static const kvmesh_scope_t sc = {"primlost", NULL};

static struct loop_gate gate = LOOP_GATE_INIT; /* blocks S's loop */

static kvmesh_t *open_rt(const char *url, bool storage)
{
    static const char *const base[][2] = {{"segment_size", "16777216"},
                                          {"max_object_size", "1048576"},
                                          {"replicas", "1"},
                                          {"transport", "tcp"},
                                          /* S stays a member while its loop is blocked */
                                          {"lease_ttl_ms", "60000"},
                                          {"reclaim_grace_ms", "50"},
                                          {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url},
                                   {"memory_size", storage ? "16777216" : "0"},
                                   {"request_timeout_ms", storage ? "5000" : C_TIMEOUT_MS},
                                   {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    assert_non_null(kv);
    return kv;
}

static int64_t rd(kvmesh_t *kv, const char *fam, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    assert_int_equal(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, i1, i2, &v), 0);
    return v;
}

/* C's put round trips: reservation exchanges and route CAS. */
struct put_rt {
    int64_t reserve, cas;
};

static struct put_rt put_rt(kvmesh_t *C)
{
    return (struct put_rt){.reserve =
                               rd(C, "op_round_trips_total", OBS_OP_PUT, OBS_CPSTAGE_RESERVE),
                           .cas = rd(C, "op_round_trips_total", OBS_OP_PUT, OBS_CPSTAGE_ROUTE_CAS)};
}

/* S's slot core and RPC figures, read on S's loop, with the slot core's invariant check (0:
 * they hold) */
struct owner {
    slot_core_stats_t cs;
    struct rpc_stats rs;
    int check;
};

static void read_owner(kvm_rt_t *rt, void *arg)
{
    struct owner *o = arg;
    slot_core_stats(rt->slots, &o->cs);
    rpc_get_stats(rt->ep, &o->rs);
    o->check = slot_core_check(rt->slots);
}

static struct owner owner_of(kvmesh_t *S)
{
    struct owner o;
    memset(&o, 0, sizeof(o));
    assert_int_equal(trt_on_loop(S, read_owner, &o, 10000), 0);
    if (o.check != 0)
        fail_msg("S's slot core: %s", kvmesh_last_error());
    return o;
}

/* Reads k from C until a read succeeds (bounded): the value must be one of the n wanted, whole.
 * Returns its index. A read that fails for the moment (S catching up) is tried again; absent is
 * never a correct answer (the key was written before). */
static int read_one_of(kvmesh_t *C, const uint8_t *const *want, int n)
{
    static uint8_t out[VLEN + 1];
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    for (;;) {
        size_t got = 0;
        int rc = kvmesh_get_into(C, &sc, "k", 1, out, sizeof(out), &got);
        if (rc == 0) {
            assert_int_equal(got, VLEN);
            for (int i = 0; i < n; i++)
                if (memcmp(out, want[i], VLEN) == 0)
                    return i;
            fail_msg("the read returned %zu bytes that are none of the values written", got);
        }
        fprintf(stderr, "  read k: %s: %s (again)\n", kvmesh_errname(rc), kvmesh_last_error());
        assert_int_not_equal(rc, KVMESH_ENOENT);
        assert_true(env_clock_mono_ms() < end);
        usleep(50000);
    }
}

/* A put of k that must succeed once S is itself again (bounded: a put in the moment S renews
 * its leases may fail and is tried again). Returns the put's round trips. */
static struct put_rt put_ok(kvmesh_t *C, const uint8_t *v)
{
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    for (;;) {
        struct put_rt a = put_rt(C);
        int rc = kvmesh_put(C, &sc, "k", 1, v, VLEN, NULL);
        struct put_rt b = put_rt(C);
        if (rc == 0)
            return (struct put_rt){b.reserve - a.reserve, b.cas - a.cas};
        fprintf(stderr, "  put k: %s: %s (again)\n", kvmesh_errname(rc), kvmesh_last_error());
        assert_true(env_clock_mono_ms() < end);
        usleep(50000);
    }
}

static void test_put_primary_unanswered(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "memory://store-prim-lost-%ld", (long)getpid());
    kvmesh_t *S = open_rt(url, true), *C = open_rt(url, false);
    assert_int_equal(trt_wait_put_get(C, C, &sc, "warm", 60000), 0);

    static uint8_t v_old[VLEN], v_new[VLEN], v_later[VLEN];
    tproc_fill(v_old, VLEN, 1);
    tproc_fill(v_new, VLEN, 2);
    tproc_fill(v_later, VLEN, 3);

    /* the old value: once C's view names S the key's primary, a put is one exchange (bounded:
     * the first put of a shard may take the normal path while C learns the shard's view) */
    bool primary = false;
    for (int i = 0; i < 20 && !primary; i++) {
        struct put_rt d = put_ok(C, v_old);
        primary = d.reserve == 1 && d.cas == 0;
    }
    assert_true(primary);
    const uint8_t *both[2] = {v_old, v_new};
    assert_int_equal(read_one_of(C, both, 1), 0);

    /* S's loop blocked: the put at the primary is sent and never answered */
    uint64_t in0 = owner_of(S).rs.bytes_in;
    assert_int_equal(env_post(kvmesh_runtime_of(S)->env, loop_gate_block, &gate), 0);
    loop_gate_wait_entered(&gate);
    struct put_rt a = put_rt(C);
    int rc = kvmesh_put(C, &sc, "k", 1, v_new, VLEN, NULL);
    struct put_rt b = put_rt(C);
    const char *msg = kvmesh_last_error();
    fprintf(stderr, "put with the primary's loop blocked: %s: %s\n", kvmesh_errname(rc), msg);
    assert_int_equal(rc, KVMESH_ETIMEDOUT);
    assert_non_null(strstr(msg, "may have been applied"));
    assert_non_null(strstr(msg, "route primary"));
    assert_int_equal(b.reserve - a.reserve, 1); /* the put at the primary was sent */
    assert_int_equal(b.cas - a.cas, 0);         /* and nothing else: no CAS from C */
    int64_t pub0 = rd(S, "replicas_published_total", OBS_OUTCOME_OK, OBS_NONE);
    loop_gate_open(&gate);

    /* old or new, whole; then a later put is what is read */
    int seen = read_one_of(C, both, 2);
    fprintf(stderr, "after S resumed, k reads the %s value\n", seen ? "new" : "old");
    /* S has handled the lost put once it has read its request (the only one since the block
     * that carries the value's bytes: C sent nothing else but this test's reads) and has no
     * reservation open (published and committed, or declined and released); a later put then
     * does not race it */
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    for (struct owner o = owner_of(S); o.rs.bytes_in - in0 < VLEN || o.cs.n_reserved != 0;
         o = owner_of(S)) {
        assert_true(env_clock_mono_ms() < end);
        usleep(20000);
    }
    seen = read_one_of(C, both, 2);
    fprintf(stderr,
            "once S settled, k reads the %s value (S published %" PRId64 " replica(s) "
            "since it resumed)\n",
            seen ? "new" : "old",
            rd(S, "replicas_published_total", OBS_OUTCOME_OK, OBS_NONE) - pub0);
    (void)put_ok(C, v_later);
    const uint8_t *later[1] = {v_later};
    assert_int_equal(read_one_of(C, later, 1), 0);
    size_t got = 0;
    static uint8_t out[VLEN];
    assert_int_equal(kvmesh_get_into(C, &sc, "warm", 4, out, VLEN, &got), 0);
    assert_int_equal(got, VLEN);

    /* S holds what the two live values need and nothing else (replaced slots leave reclaim
     * after reclaim_grace_ms) */
    slot_core_stats_t cs;
    end = env_clock_mono_ms() + WAIT_MS;
    for (;;) {
        cs = owner_of(S).cs;
        if (cs.n_reserved == 0 && cs.n_reclaim == 0 && cs.n_committed == LIVE_KEYS &&
            cs.used == LIVE_KEYS * VLEN)
            break;
        if (env_clock_mono_ms() >= end)
            fail_msg("S's slots did not settle: reserved %" PRIu64 ", reclaim %" PRIu64
                     ", committed %" PRIu64 ", used %" PRIu64 " bytes (want %d committed, %d "
                     "bytes)",
                     cs.n_reserved, cs.n_reclaim, cs.n_committed, cs.used, LIVE_KEYS,
                     LIVE_KEYS * VLEN);
        usleep(20000);
    }
    assert_int_equal(kvmesh_close(C), 0);
    assert_int_equal(kvmesh_close(S), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_primary_unanswered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
