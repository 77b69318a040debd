/* SPDX-License-Identifier: Apache-2.0 */
/* Eviction: writing 3x the cluster's memory keeps puts succeeding (CLOCK eviction with a route
 * CAS before bytes are freed), memory ends within the watermarks, and no replica that a route
 * still references is ever freed: every object that still has a route reads back exactly, and
 * no two live routes point at overlapping bytes of one segment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "store/data.h"

#define NRT  2
#define MEM  (8u << 20)
#define OBJ  (256u << 10)
#define NOBJ (3 * NRT * MEM / OBJ)

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 11);
}

static void test_evict_3x(void **state)
{
    (void)state;
    kvmesh_t *rt[NRT];
    for (int i = 0; i < NRT; i++) {
        kvmesh_config_t *c = kvmesh_config_new();
        assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://evict"), 0);
        assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
        assert_int_equal(kvmesh_config_set(c, "memory_size", "8388608"), 0);
        assert_int_equal(kvmesh_config_set(c, "segment_size", "8388608"), 0);
        assert_int_equal(kvmesh_config_set(c, "max_object_size", "1048576"), 0);
        assert_int_equal(kvmesh_config_set(c, "evict_high_watermark", "0.8"), 0);
        assert_int_equal(kvmesh_config_set(c, "evict_low_watermark", "0.6"), 0);
        assert_int_equal(kvmesh_config_set(c, "reclaim_grace_ms", "30"), 0);
        assert_int_equal(kvmesh_open(&rt[i], c), 0);
        kvmesh_config_free(c);
    }
    for (int t = 0; t < 100; t++) {
        size_t n = 0;
        kvmesh_members(rt[0], NULL, 0, &n);
        if (n == NRT)
            break;
        usleep(50000);
    }
    const kvmesh_scope_t sc = {"ev", NULL};
    uint8_t *v = malloc(OBJ), *out = malloc(OBJ);
    for (uint32_t i = 0; i < NOBJ; i++) {
        char key[32];
        snprintf(key, sizeof(key), "blk-%u", i);
        fill(v, OBJ, i);
        int rc = kvmesh_put(rt[i % NRT], &sc, key, strlen(key), v, OBJ, NULL);
        if (rc)
            fprintf(stderr, "put %u: %s\n", i, kvmesh_last_error());
        assert_int_equal(rc, 0);
        /* read a recent object back while under pressure */
        if (i >= 3) {
            snprintf(key, sizeof(key), "blk-%u", i - 3);
            size_t n = 0;
            rc = kvmesh_get_into(rt[(i + 1) % NRT], &sc, key, strlen(key), out, OBJ, &n);
            if (rc != 0 && rc != KVMESH_ENOENT)
                fprintf(stderr, "get %u under pressure: %d: %s\n", i - 3, rc, kvmesh_last_error());
            assert_true(rc == 0 || rc == KVMESH_ENOENT);
            if (rc == 0) {
                fill(v, OBJ, i - 3);
                assert_memory_equal(out, v, OBJ);
            }
        }
    }
    usleep(300 * 1000); /* let eviction and reclaim settle */
    uint64_t evictions = 0;
    for (int i = 0; i < NRT; i++) {
        struct kvm_rt_stats st;
        assert_int_equal(kvm_store_stats(kvmesh_runtime_of(rt[i]), &st), 0);
        print_message("runtime %d: used %llu of %llu (%.0f%%), evictions %llu, waits %llu\n", i,
                      (unsigned long long)st.used, (unsigned long long)st.capacity,
                      100.0 * (double)st.used / (double)st.capacity,
                      (unsigned long long)st.evictions, (unsigned long long)st.reserve_waits);
        assert_true(st.used <= (uint64_t)(0.8 * (double)st.capacity));
        evictions += st.evictions;
    }
    assert_true(evictions >= NOBJ / 2);
    /* Every route still present reads back exactly; no two routes share bytes. */
    kvmesh_route_info_t *ri = calloc(NOBJ, sizeof(*ri));
    bool *live = calloc(NOBJ, sizeof(*live));
    uint32_t n_live = 0;
    for (uint32_t i = 0; i < NOBJ; i++) {
        char key[32];
        snprintf(key, sizeof(key), "blk-%u", i);
        int rc = kvmesh_route_query(rt[0], &sc, key, strlen(key), &ri[i]);
        assert_true(rc == 0 || rc == KVMESH_ENOENT);
        if (rc)
            continue;
        live[i] = true;
        n_live++;
        size_t n = 0;
        assert_int_equal(kvmesh_get_into(rt[1], &sc, key, strlen(key), out, OBJ, &n), 0);
        fill(v, OBJ, i);
        assert_memory_equal(out, v, OBJ);
    }
    for (uint32_t i = 0; i < NOBJ; i++)
        for (uint32_t j = i + 1; live[i] && j < NOBJ; j++) {
            if (!live[j])
                continue;
            const kvmesh_replica_info_t *a = &ri[i].replicas[0], *b = &ri[j].replicas[0];
            if (strcmp(a->owner, b->owner) == 0 && a->segment == b->segment)
                assert_true(a->offset + a->length <= b->offset ||
                            b->offset + b->length <= a->offset);
        }
    print_message("%u of %u objects still cached\n", n_live, (unsigned)NOBJ);
    assert_true(n_live > 0);
    free(ri);
    free(live);
    free(v);
    free(out);
    for (int i = 0; i < NRT; i++)
        kvmesh_close(rt[i]);
}

/* A put that no owner can ever hold fails with KVMESH_ENOSPC and says why. */
static void test_enospc(void **state)
{
    (void)state;
    kvmesh_t *owner, *client;
    kvmesh_config_t *c = kvmesh_config_new();
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://evict-nospc"), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "4194304"), 0);
    assert_int_equal(kvmesh_config_set(c, "segment_size", "4194304"), 0);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", "4194304"), 0);
    assert_int_equal(kvmesh_open(&owner, c), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "0"), 0);
    assert_int_equal(kvmesh_config_set(c, "segment_size", "8388608"), 0);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", "8388608"), 0);
    assert_int_equal(kvmesh_open(&client, c), 0);
    kvmesh_config_free(c);
    for (int t = 0; t < 100; t++) {
        size_t n = 0;
        kvmesh_members(client, NULL, 0, &n);
        if (n == 2)
            break;
        usleep(50000);
    }
    const kvmesh_scope_t sc = {"ev", NULL};
    uint8_t *v = calloc(1, 6 << 20);
    assert_int_equal(kvmesh_put(client, &sc, "small", 5, v, 3 << 20, NULL), 0);
    assert_int_equal(kvmesh_put(client, &sc, "huge", 4, v, 6 << 20, NULL), KVMESH_ENOSPC);
    print_message("%s\n", kvmesh_last_error());
    assert_non_null(strstr(kvmesh_last_error(), "no segment large enough"));
    /* the small object is untouched */
    size_t n = 0;
    assert_int_equal(kvmesh_get_into(client, &sc, "small", 5, v, 6 << 20, &n), 0);
    assert_int_equal(n, 3 << 20);
    free(v);
    kvmesh_close(client);
    kvmesh_close(owner);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_evict_3x),
                                       cmocka_unit_test(test_enospc)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
