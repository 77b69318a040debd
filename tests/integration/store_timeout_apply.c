/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_timeout_apply — timeout after apply, on a real redis-server and a real etcd: a put whose
 * route update is applied by the metadata server but whose answer never reaches the writer in
 * time. Its reserved replica space must stay held (never reused) while the route may reference
 * it, and be committed once an exact lookup shows the route does (src/store/owner.c held
 * reservations; docs/reliability.md "Timeout after apply").
 *
 *   itest_store_timeout_apply redis|etcd
 *
 * One storage runtime (MetadataOnly routes, so the route CAS is a metadata transaction;
 * replicas 1; request_timeout_ms 1000; 2 MiB of memory) reaches its metadata server through a
 * loopback proxy (tests/support/tcpproxy.h):
 *   1. the proxy is armed on the target's route key: the second request naming it (the CAS's
 *      write transaction, after its read) turns the hold on, so the write is applied but its
 *      answer, and every later one, is kept back. The put answers KVMESH_ETIMEDOUT or
 *      KVMESH_EINDETERMINATE with a message saying it may have been applied;
 *   2. past the reservation's TTL the slot is held: reservations_held >= 1 (/stats
 *      owner.reservations_held, kvmesh_reservations_held);
 *   3. pressure while held: PRESSURE more puts of the same size allocate and write their bytes
 *      (their updates are kept back too); with the hold disabled (the slot freed at its TTL) one
 *      of them takes the target's range and the target reads back corrupt;
 *   4. the proxy passes answers again: every held reservation is settled, the gauge returns to 0,
 *      and the target reads back its own bytes (its route references its range: committed);
 *   5. more puts until eviction runs; the target and every pressure object read back as their own
 *      bytes or as a clean miss (KVMESH_ENOENT), never another object's bytes or an error.
 * Every loop is bounded in count and time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "meta/etcd_json.h"
#include "meta/keyspace.h"
#include "proc.h"
#include "store/data.h"
#include "tcpproxy.h"
#include "testsrv.h"

struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);

#define VAL      (256u << 10)
#define PRESSURE 4
#define MORE     16
#define DEP      "tapply"

static testsrv_t *srv;
static tcpproxy_t *proxy;
static kvmesh_t *kv;
static const kvmesh_scope_t sc = {"tap", NULL};

static void cleanup(void)
{
    if (kv)
        kvmesh_close(kv);
    kv = NULL;
    tcpproxy_stop(proxy);
    proxy = NULL;
    testsrv_stop(srv);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static void fill(uint8_t *v, int tag)
{
    for (size_t i = 0; i < VAL; i++)
        v[i] = (uint8_t)(tag * 31 + (int)(i % 251));
}

static uint64_t held_now(void)
{
    struct kvm_rt_stats st;
    memset(&st, 0, sizeof(st));
    CHECK(kvm_store_stats(kvmesh_runtime_of(kv), &st) == 0);
    return st.reservations_held;
}

/* Own bytes (0), a clean miss (1), or anything else (-1: another object's bytes, an error). */
static int read_back(const char *key, int tag, bool miss_ok)
{
    static uint8_t want[VAL], got[VAL];
    fill(want, tag);
    size_t n = 0;
    int rc = kvmesh_get_into(kv, &sc, key, strlen(key), got, sizeof(got), &n);
    if (rc == 0 && n == VAL && memcmp(got, want, VAL) == 0)
        return 0;
    if (rc == KVMESH_ENOENT && miss_ok)
        return 1;
    fprintf(stderr, "read %s: rc %d (%s), %zu bytes%s\n", key, rc, rc ? kvmesh_last_error() : "", n,
            rc == 0 ? ", not its own" : "");
    return -1;
}

/* The pattern a request naming the route key carries: the key itself (Redis), or the complete
 * base64 groups of it (etcd's JSON gateway encodes keys). */
static size_t route_pattern(const char *key, char *out, size_t cap)
{
    char rk[KS_KEY_CAP];
    CHECK(ks_route_key(rk, sizeof(rk), DEP, sc.tenant, sc.domain, key) == 0);
    size_t n = strlen(rk);
    if (testsrv_kind(srv) == TESTSRV_REDIS) {
        CHECK(n < cap);
        memcpy(out, rk, n);
        return n;
    }
    CHECK(etcd_b64_len(n) + 1 <= cap);
    etcd_b64_encode((const uint8_t *)rk, n, out);
    return n / 3 * 4; /* whole groups only: no padding */
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s redis|etcd\n", argv[0]);
        return 2;
    }
    int rc = testsrv_start_named(&srv, argv[1]);
    if (rc)
        return 1;
    CHECK(tcpproxy_start(&proxy, testsrv_port(srv)) == 0);
    char url[128];
    snprintf(url, sizeof(url), "%s://127.0.0.1:%u", argv[1], (unsigned)tcpproxy_port(proxy));
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", DEP) == 0);
    CHECK(kvmesh_config_set(c, "route_mode", "metadata_only") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "2MiB") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "2MiB") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "1000") == 0);
    CHECK(kvmesh_config_set(c, "lease_ttl_ms", "60000") == 0);
    CHECK(kvmesh_config_set(c, "reclaim_grace_ms", "100") == 0);
    rc = kvmesh_open(&kv, c);
    kvmesh_config_free(c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    CHECK(tproc_wait_storage(kv, 1, 30000) == 0);
    static uint8_t v[VAL];
    fill(v, 100);
    CHECK(kvmesh_put(kv, &sc, "warm", 4, v, VAL, NULL) == 0);

    /* 1. the target's route update is applied; its answer is kept back */
    char pat[512];
    size_t pl = route_pattern("target", pat, sizeof(pat));
    tcpproxy_hold_on(proxy, pat, pl, 2);
    fill(v, 1);
    uint64_t t0 = env_clock_mono_ms();
    rc = kvmesh_put(kv, &sc, "target", 6, v, VAL, NULL);
    const char *msg = kvmesh_last_error();
    printf("1: put target: rc %d after %" PRIu64 " ms (%s); %u requests named its route\n", rc,
           env_clock_since_ms(t0), msg, tcpproxy_matches(proxy));
    CHECK(tcpproxy_matches(proxy) >= 2); /* the hold turned on at the CAS's write */
    CHECK(rc == KVMESH_ETIMEDOUT || rc == KVMESH_EINDETERMINATE);
    CHECK(strstr(msg, "may have been applied") != NULL);

    /* 2. past its TTL (2 x request_timeout_ms) the reservation is held */
    for (uint64_t end = env_clock_mono_ms() + 15000; held_now() == 0;) {
        CHECK(env_clock_mono_ms() < end);
        usleep(50000);
    }
    printf("2: reservations held: %" PRIu64 "\n", held_now());

    /* 3. allocation pressure while held: same-size puts write their bytes, then time out */
    for (int i = 0; i < PRESSURE; i++) {
        char key[16];
        snprintf(key, sizeof(key), "p%d", i);
        fill(v, 10 + i);
        rc = kvmesh_put(kv, &sc, key, strlen(key), v, VAL, NULL);
        printf("3: put %s: rc %d\n", key, rc);
        CHECK(rc != 0); /* its answer is kept back too */
    }
    CHECK(held_now() >= 1);
    printf("3: %" PRIu64 " bytes of answers kept back, reservations held %" PRIu64 "\n",
           tcpproxy_held_bytes(proxy), held_now());

    /* 4. answers pass again: every held reservation is settled */
    tcpproxy_hold(proxy, false);
    for (uint64_t end = env_clock_mono_ms() + 20000; held_now() != 0;) {
        CHECK(env_clock_mono_ms() < end);
        usleep(50000);
    }
    printf("4: reservations held back at 0\n");
    CHECK(read_back("target", 1, false) == 0); /* its route references its range: committed */

    /* 5. eviction pressure, then own bytes or a clean miss */
    int evicted = 0;
    for (int i = 0; i < MORE; i++) {
        char key[16];
        snprintf(key, sizeof(key), "m%02d", i);
        fill(v, 50 + i);
        rc = kvmesh_put(kv, &sc, key, strlen(key), v, VAL, NULL);
        CHECK(rc == 0 || rc == KVMESH_ENOSPC);
    }
    int r = read_back("target", 1, true);
    CHECK(r >= 0);
    evicted += r;
    for (int i = 0; i < PRESSURE; i++) {
        char key[16];
        snprintf(key, sizeof(key), "p%d", i);
        r = read_back(key, 10 + i, true);
        CHECK(r >= 0);
        evicted += r;
    }
    printf("5: target and %d pressure objects: %d clean misses, the rest their own bytes\n",
           PRESSURE, evicted);
    cleanup();
    printf("store_timeout_apply %s: ok\n", argv[1]);
    return 0;
}
