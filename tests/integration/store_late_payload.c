/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_late_payload — the late-payload fence of the owner's slot core (docs/store.md "Late
 * payloads"; slot_core.h slot_core_land_begin / _end), end to end, and the RPC payload sink
 * counters in a real runtime's /metrics (docs/operations.md kvmesh_rpc_payload_sinks_total).
 *
 *   itest_store_late_payload
 *
 * Runtimes in this process on embedded in-memory metadata, transport tcp, top_k 1, replicas 1: a
 * storage runtime S (every shard's primary, the only owner, admin HTTP on a loopback port) and a
 * client-only runtime C. A 256 KiB put from C goes as a raw put at the primary: S reserves the
 * slot when the request's head arrives and receives the payload straight into it.
 *   1. two plain raw puts: S's /metrics counts each as kvmesh_rpc_payload_sinks_total
 *      {result="direct"} (read over HTTP), nothing discarded or aborted;
 *   2. a raw put whose reservation reaches its TTL while its payload lands (the test hook
 *      kvm_put_primary_test_expire_landing: after the first run landed, the slot core is told
 *      the TTL passed, deterministically, no timing): the put fails (KVMESH_EUNAVAILABLE, no
 *      replica placed: the owner's KVMESH_ETIMEDOUT saying the TTL passed while the payload
 *      landed), nothing is published (the key reads back its
 *      earlier value), and S's slot core is left with no reservation reserved or held; without the
 * fence the put was published on a slot whose reservation had expired;
 *   3. the next raw put of the key lands and reads back.
 * Every wait is bounded.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "store/put_primary.h"
#include "store/slot_core.h"
#include "store/store.h"
#include "curl_body.h"
#include "obs_prom.h"
#include "tcheck.h"
#include "trt.h"

#define CHECK(c) TCHECK_FATAL(c)

#define RAW_SIZE (256 * 1024) /* above inline_write_max: a put at the primary's raw form */
#define KEY      "late-raw"

static const char *const base[][2] = {{"transport", "tcp"},
                                      {"segment_size", "67108864"},
                                      {"max_object_size", "1048576"},
                                      {"replicas", "1"},
                                      {"top_k", "1"},
                                      {NULL, NULL}};

/* kvmesh_rpc_payload_sinks_total{result=r} from S's /metrics over HTTP. */
static double sinks(kvmesh_t *S, const char *r)
{
    struct tcurl_body b = {0};
    long code = tcurl_get_local(kvm_rt_admin_port(kvmesh_runtime_of(S)), "/metrics", &b);
    CHECK(code == 200);
    struct prom p;
    memset(&p, 0, sizeof(p));
    CHECK(prom_parse(&p, b.data, b.len) == 0);
    double v = prom_value(&p, "kvmesh_rpc_payload_sinks_total", "result", r, NULL, NULL);
    prom_free(&p);
    free(b.data);
    return v;
}

static void slots_read(kvm_rt_t *rt, void *arg)
{
    slot_core_stats(rt->slots, arg);
}

static slot_core_stats_t slots(kvmesh_t *S)
{
    static slot_core_stats_t st; /* (outlives a call that did not run in time: trt_on_loop) */
    memset(&st, 0, sizeof(st));
    CHECK(trt_on_loop(S, slots_read, &st, 10000) == 0);
    return st;
}

static int put(kvmesh_t *C, const kvmesh_scope_t *sc, uint8_t *v, uint8_t b)
{
    memset(v, b, RAW_SIZE);
    v[RAW_SIZE - 1] = (uint8_t)~b;
    return kvmesh_put(C, sc, KEY, strlen(KEY), v, RAW_SIZE, NULL);
}

static void check_value(kvmesh_t *C, const kvmesh_scope_t *sc, const uint8_t *v)
{
    static uint8_t out[RAW_SIZE];
    size_t got = 0;
    CHECK(kvmesh_get_into(C, sc, KEY, strlen(KEY), out, RAW_SIZE, &got) == 0);
    CHECK(got == RAW_SIZE && memcmp(out, v, RAW_SIZE) == 0);
}

int main(void)
{
    CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == 0);
    char url[64];
    snprintf(url, sizeof(url), "memory://latepayload-%ld", (long)getpid());
    const char *const s_cfg[][2] = {{"metadata_url", url},
                                    {"memory_size", "67108864"},
                                    {"admin_listen", "127.0.0.1:0"},
                                    {NULL, NULL}};
    const char *const c_cfg[][2] = {{"metadata_url", url}, {"memory_size", "0"}, {NULL, NULL}};
    kvmesh_t *S = trt_open(base, s_cfg);
    CHECK(S);
    kvmesh_t *C = trt_open(base, c_cfg);
    CHECK(C);
    const kvmesh_scope_t sc = {"latepayload", NULL};
    CHECK(trt_warm(&C, 1, &sc, 64, 120000) == 0);
    static uint8_t v[RAW_SIZE], old[RAW_SIZE];

    /* 1. raw puts at the primary: received straight into the slot, counted in /metrics */
    CHECK(put(C, &sc, v, 0x31) == 0); /* (C's view of the key's shard) */
    double d0 = sinks(S, "direct"), x0 = sinks(S, "discarded"), a0 = sinks(S, "aborted");
    CHECK(put(C, &sc, v, 0x32) == 0);
    check_value(C, &sc, v);
    double d1 = sinks(S, "direct");
    printf("payload sinks at S: direct %.0f -> %.0f, discarded %.0f, aborted %.0f\n", d0, d1, x0,
           a0);
    CHECK(d0 >= 1 && d1 == d0 + 1);
    CHECK(sinks(S, "discarded") == x0 && sinks(S, "aborted") == a0);
    memcpy(old, v, RAW_SIZE);

    /* 2. the reservation reaches its TTL while the payload lands */
    slot_core_stats_t st0 = slots(S);
    CHECK(kvm_put_primary_test_expire_landing(1) == 0);
    int rc = put(C, &sc, v, 0x33);
    const char *err = kvmesh_last_error();
    printf("put whose reservation expired while its payload landed: %s (%s)\n", kvmesh_errname(rc),
           err);
    CHECK(kvm_put_primary_test_expire_landing(0) == 0); /* (the hook was taken) */
    /* (the owner answers the sink's KVMESH_ETIMEDOUT as a failed reservation: no replica placed) */
    CHECK(rc == KVMESH_EUNAVAILABLE);
    CHECK(strstr(err, "while its payload landed") != NULL);
    check_value(C, &sc, old);            /* nothing published: the value before it */
    CHECK(sinks(S, "direct") == d1 + 1); /* (it did land in the slot, and was discarded there) */
    /* S settles the reservation: the sink released it by its token (or, if the expiry's lookup
     * answered first, the expiry freed it); nothing stays reserved or held */
    uint64_t end = env_clock_mono_ms() + 30000;
    slot_core_stats_t st;
    while ((st = slots(S)).n_reserved != 0 || st.reservations_held != 0) {
        CHECK(env_clock_mono_ms() < end);
        usleep(10 * 1000);
    }
    printf("S: none reserved or held; reservations expired %" PRIu64 " -> %" PRIu64 "\n",
           st0.reservations_expired, st.reservations_expired);

    /* 3. the key takes the next put */
    CHECK(put(C, &sc, v, 0x34) == 0);
    check_value(C, &sc, v);
    CHECK(sinks(S, "direct") == d1 + 2);

    kvmesh_close(C);
    kvmesh_close(S);
    curl_global_cleanup();
    printf("a late payload is fenced\n");
    return 0;
}
