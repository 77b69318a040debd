/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_closed_owner — the closed-owner replica case: eviction must never leave a route whose
 * only replicas are on a closed runtime (src/store/repair.h kvm_replica_readable, owner.c
 * evict_looked_up).
 *
 *   itest_store_closed_owner redis|etcd
 *
 * The reported sequence, scaled to CI (16 MiB per runtime instead of 256 MiB; the sequence, not
 * the size, is what matters): MetadataOnly routes, three storage runtimes A, B, C and a
 * client-only runtime in this process, replicas 2, re-replication off (so that nothing restores
 * the replica count behind the eviction's back):
 *   1. 200 objects of 64 KiB, placed by rendezvous over A, B, C; the test notes which have a
 *      replica on C;
 *   2. C is closed (kvmesh_close) while the routes still list its replicas; A and B see it gone;
 *   3. eviction pressure: 360 more objects of 64 KiB (45 MiB with replicas; A and B hold 32);
 *   4. every object of step 1 reads back as its bytes or as a clean miss (KVMESH_ENOENT) — never
 *      an error — and every route still found lists a replica on A or B. The test fails unless
 *      the sequence happened: some object that had a replica on C was evicted from A or B.
 * The broken build (-DKVMESH_CHAOS_BROKEN=evict_last_live: eviction considers only its own
 * copy) leaves routes that list only C's replica; this test then fails (store_closed_owner.cmake
 * marks it WILL_FAIL in that build).
 * Every loop is bounded in count and time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "testsrv.h"

#define N1  200
#define N2  360
#define VAL (64 * 1024)

static testsrv_t *srv;
static kvmesh_t *rt_a, *rt_b, *rt_c, *client;
static char id_a[KVMESH_ID_HEX_LEN + 1], id_b[KVMESH_ID_HEX_LEN + 1], id_c[KVMESH_ID_HEX_LEN + 1];
static const kvmesh_scope_t sc = {"closed", NULL};

static void cleanup(void)
{
    testsrv_stop(srv);
    srv = NULL;
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static kvmesh_t *open_rt(const char *memory)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(kvmesh_config_set(c, "metadata_url", testsrv_url(srv)) == 0);
    CHECK(kvmesh_config_set(c, "deployment", "closedowner") == 0);
    CHECK(kvmesh_config_set(c, "route_mode", "metadata_only") == 0);
    CHECK(kvmesh_config_set(c, "memory_size", memory) == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "16MiB") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "2") == 0);
    CHECK(kvmesh_config_set(c, "lease_ttl_ms", "2000") == 0);
    CHECK(kvmesh_config_set(c, "reclaim_grace_ms", "200") == 0);
    CHECK(kvmesh_config_set(c, "rereplicate_max_copies", "0") == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

/* Waits until kv's snapshot shows exactly `want` active storage members. */
static void wait_storage(kvmesh_t *kv, size_t want)
{
    CHECK(tproc_wait_storage(kv, want, 30000) == 0);
}

static void key_of(const char *prefix, int i, char *key, size_t cap)
{
    snprintf(key, cap, "%s-%04d", prefix, i);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s redis|etcd\n", argv[0]);
        return 2;
    }
    int rc = testsrv_start_named(&srv, argv[1]);
    if (rc)
        return 1;
    rt_a = open_rt("16MiB");
    rt_b = open_rt("16MiB");
    rt_c = open_rt("16MiB");
    client = open_rt("0");
    uint64_t ep;
    CHECK(kvmesh_self(rt_a, id_a, &ep) == 0 && kvmesh_self(rt_b, id_b, &ep) == 0 &&
          kvmesh_self(rt_c, id_c, &ep) == 0);
    wait_storage(client, 3);
    wait_storage(rt_a, 3);
    wait_storage(rt_b, 3);

    /* 1. objects over A, B, C */
    static uint8_t v[VAL], out[VAL];
    static bool on_c[N1];
    int n_on_c = 0;
    for (int i = 0; i < N1; i++) {
        char key[32];
        key_of("old", i, key, sizeof(key));
        tproc_fill(v, VAL, 10000u + (uint64_t)i);
        rc = kvmesh_put(client, &sc, key, strlen(key), v, VAL, NULL);
        if (rc)
            fprintf(stderr, "put %s: %s\n", key, kvmesh_last_error());
        CHECK(rc == 0);
        kvmesh_route_info_t ri;
        CHECK(kvmesh_route_query(client, &sc, key, strlen(key), &ri) == 0);
        CHECK(ri.n_replicas == 2);
        on_c[i] =
            strcmp(ri.replicas[0].owner, id_c) == 0 || strcmp(ri.replicas[1].owner, id_c) == 0;
        n_on_c += on_c[i];
    }
    printf("1: %d objects, %d with a replica on C\n", N1, n_on_c);
    CHECK(n_on_c > 0);

    /* 2. C closes while the routes list its replicas */
    kvmesh_close(rt_c);
    rt_c = NULL;
    wait_storage(client, 2);
    wait_storage(rt_a, 2);
    wait_storage(rt_b, 2);

    /* 3. eviction pressure on A and B */
    int ok2 = 0, refused = 0;
    for (int i = 0; i < N2; i++) {
        char key[32];
        key_of("new", i, key, sizeof(key));
        tproc_fill(v, VAL, 50000u + (uint64_t)i);
        rc = kvmesh_put(client, &sc, key, strlen(key), v, VAL, NULL);
        CHECK(rc == 0 || rc == KVMESH_ENOSPC || rc == KVMESH_EUNAVAILABLE ||
              rc == KVMESH_ETIMEDOUT);
        ok2 += rc == 0;
        refused += rc != 0;
    }
    printf("3: %d of %d pressure puts acknowledged, %d refused\n", ok2, N2, refused);
    CHECK(ok2 > N2 / 2);

    /* 4. a clean hit or a clean miss for every old object; no route pointing only at C */
    int hits = 0, misses = 0, bad = 0, evicted_c = 0, only_c = 0;
    for (int i = 0; i < N1; i++) {
        char key[32];
        key_of("old", i, key, sizeof(key));
        tproc_fill(v, VAL, 10000u + (uint64_t)i);
        size_t got = 0;
        rc = kvmesh_get_into(client, &sc, key, strlen(key), out, sizeof(out), &got);
        if (rc == 0) {
            CHECK(got == VAL && memcmp(out, v, VAL) == 0);
            hits++;
        } else if (rc == KVMESH_ENOENT) {
            misses++;
            evicted_c += on_c[i];
        } else {
            if (bad < 5)
                fprintf(stderr, "get %s (%s a replica on C): %s: %s\n", key,
                        on_c[i] ? "had" : "had no", kvmesh_errname(rc), kvmesh_last_error());
            bad++;
        }
        kvmesh_route_info_t ri;
        if (kvmesh_route_query(client, &sc, key, strlen(key), &ri) == 0 && ri.n_replicas > 0) {
            bool live = false;
            for (uint32_t j = 0; j < ri.n_replicas; j++)
                live |= strcmp(ri.replicas[j].owner, id_a) == 0 ||
                        strcmp(ri.replicas[j].owner, id_b) == 0;
            only_c += !live;
        }
    }
    printf("4: %d hits, %d clean misses (%d of them had a replica on C), %d errors, %d routes "
           "listing only the closed runtime\n",
           hits, misses, evicted_c, bad, only_c);
    CHECK(bad == 0);
    CHECK(only_c == 0);
    CHECK(evicted_c > 0); /* the reported sequence happened */

    kvmesh_close(client);
    kvmesh_close(rt_b);
    kvmesh_close(rt_a);
    cleanup();
    printf("store_closed_owner %s: ok\n", argv[1]);
    return 0;
}
