// SPDX-License-Identifier: Apache-2.0
/*
 * tenant_claim_close.c — a route primary closes while a writer's quota claim waits in its tenant
 * layer (EmbeddedWrh, a real redis-server). Two storage runtimes share a tenant with a hard
 * policy: W (the writer) reaches Redis directly, P through a loopback proxy
 * (tests/support/tcpproxy.h). For each candidate key the proxy is armed on the key's name (which
 * the claim's operation record carries): when P, as the key's shard primary, sends the claim's
 * metadata call for W's put, the proxy keeps its answer (and every later one) back, so the claim
 * stays in P's tenant layer.
 * P is then closed:
 *   - the claim P held is answered (EUNAVAILABLE to the route service, which replies to W) and
 *     its record freed: under ASan the process exits without a leak (the claim's record leaked
 *     before: src/store/quota_claim.c kvm_quota_claims_close);
 *   - W's put succeeds (it retries at the shard's next primary, W itself once P has left) and
 *     reads back its own bytes from W.
 * Every wait is bounded in time.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "tcpproxy.h"
#include "testsrv.h"

#define DEP    "tclaimclose"
#define TENANT "tcc"
#define VLEN   4096
#define KEYS   64

static testsrv_t *srv;
static tcpproxy_t *proxy;
static kvmesh_t *w, *p;

static void cleanup(void)
{
    if (proxy)
        tcpproxy_hold(proxy, false);
    if (p)
        kvmesh_close(p);
    p = NULL;
    if (w)
        kvmesh_close(w);
    w = NULL;
    tcpproxy_stop(proxy);
    proxy = NULL;
    testsrv_stop(srv);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static kvmesh_t *open_rt(const char *url, const char *timeout_ms)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", DEP) == 0);
    CHECK(kvmesh_config_set(c, "route_mode", "embedded_wrh") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "16MiB") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "16MiB") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", timeout_ms) == 0);
    CHECK(kvmesh_config_set(c, "tenant_policies", TENANT ":64MiB:100000") == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    kvmesh_config_free(c);
    if (rc)
        fprintf(stderr, "open %s: %d %s\n", url, rc, kvmesh_last_error());
    CHECK(rc == 0);
    return kv;
}

struct writer {
    pthread_t th;
    char key[32];
    int rc;
    char err[256];
    uint64_t ms;
    _Atomic bool done;
};

static void fill(uint8_t *v, const char *key)
{
    for (size_t i = 0; i < VLEN; i++)
        v[i] = (uint8_t)(key[strlen(key) - 1] * 7 + (int)(i % 253));
}

static void *put_main(void *arg)
{
    struct writer *wr = arg;
    static uint8_t v[VLEN];
    fill(v, wr->key);
    kvmesh_scope_t sc = {TENANT, NULL};
    uint64_t t0 = env_clock_mono_ns();
    wr->rc = kvmesh_put(w, &sc, wr->key, strlen(wr->key), v, VLEN, NULL);
    wr->ms = (env_clock_mono_ns() - t0) / 1000000u;
    snprintf(wr->err, sizeof(wr->err), "%s", wr->rc ? kvmesh_last_error() : "ok");
    atomic_store(&wr->done, true);
    return NULL;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Passes P's metadata answers again 300 ms into its close (its tenant layer has let go of the
 * held claim by then), so that the rest of its close (the member record's delete) is quick. */
static void *release_main(void *arg)
{
    (void)arg;
    nap_ms(300);
    tcpproxy_hold(proxy, false);
    return NULL;
}

/* Puts `key` from W with the proxy armed on its object record. True when P's claim for it was
 * held (the put is still running: *wr is left for the caller to join); false when the put ended
 * without P's tenant layer calling about it (W was the key's primary). */
static bool try_key(struct writer *wr, const char *key)
{
    tcpproxy_hold_on(proxy, key, strlen(key), 1);
    memset(wr, 0, sizeof(*wr));
    snprintf(wr->key, sizeof(wr->key), "%s", key);
    CHECK(pthread_create(&wr->th, NULL, put_main, wr) == 0);
    uint64_t until = env_clock_mono_ns() + 10ull * 1000000000ull;
    while (!atomic_load(&wr->done) && tcpproxy_matches(proxy) == 0 && env_clock_mono_ns() < until)
        nap_ms(2);
    if (tcpproxy_matches(proxy) > 0)
        return true;
    pthread_join(wr->th, NULL);
    CHECK(wr->rc == 0);
    return false;
}

int main(void)
{
    CHECK(testsrv_start_named(&srv, "redis") == 0);
    CHECK(tcpproxy_start(&proxy, testsrv_port(srv)) == 0);
    char direct[128], proxied[128];
    snprintf(direct, sizeof(direct), "redis://127.0.0.1:%u", (unsigned)testsrv_port(srv));
    snprintf(proxied, sizeof(proxied), "redis://127.0.0.1:%u", (unsigned)tcpproxy_port(proxy));
    w = open_rt(direct, "10000"); /* outlasts P's close (P's metadata calls are held) */
    p = open_rt(proxied, "3000");
    /* both runtimes see each other as route members before the first put */
    nap_ms(500);

    struct writer wr;
    bool held = false;
    char key[32];
    for (int i = 0; i < KEYS && !held; i++) {
        snprintf(key, sizeof(key), "claimclose-%02d", i);
        held = try_key(&wr, key);
    }
    CHECK(held); /* with two members, P is the primary of about half the keys */
    printf("claim for %s held at P; closing P\n", key);
    uint64_t t0 = env_clock_mono_ns();
    pthread_t rel;
    CHECK(pthread_create(&rel, NULL, release_main, NULL) == 0);
    kvmesh_close(p);
    p = NULL;
    pthread_join(rel, NULL);
    pthread_join(wr.th, NULL);
    printf("P closed in %.0f ms; W's put of %s: rc %d (%s) after %llu ms\n",
           (double)(env_clock_mono_ns() - t0) / 1e6, key, wr.rc, wr.err, (unsigned long long)wr.ms);
    CHECK(wr.rc == 0);
    {
        static uint8_t want[VLEN], got[VLEN];
        fill(want, key);
        kvmesh_scope_t sc = {TENANT, NULL};
        size_t n = 0;
        int rc = kvmesh_get_into(w, &sc, key, strlen(key), got, sizeof(got), &n);
        CHECK(rc == 0 && n == VLEN && memcmp(got, want, VLEN) == 0);
    }
    cleanup();
    printf("tenant_claim_close: ok\n");
    return 0;
}
