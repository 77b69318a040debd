/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The owner's two inline-write paths that the critical-path tests do not reach (docs/store.md
 * "Inline writes"), each with a client-only runtime C putting to a storage runtime S over tcp
 * (STORE_RPC_RESERVE_INLINE):
 *
 * - checksum mismatch: the inline body carries a wrong checksum (kvm_put_inline_test_bad_sums);
 *   S copies the bytes, finds the mismatch, releases the slot it reserved and answers
 *   KVMESH_ECHECKSUM. S is C's only owner, so the put fails with that error. S's reserved bytes
 *   are back at once and its used bytes once the released slot's grace ends; a put of the same
 *   key then succeeds and reads back.
 * - the waited reservation: S is full of committed objects (high watermark 1.0: no background
 *   eviction), so the next inline reservation waits for eviction (S's reserve_waits counts it);
 *   the late grant copies the bytes S kept and verifies them against the checksum: the put
 *   succeeds with no payload exchange and the value reads back byte for byte.
 */
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
#include "obs/metrics.h"
#include "store/data.h"
#include "store/put_inline.h"
#include "store/store.h"

#define MEM (1u << 20)  /* S's memory: one segment */
#define OBJ (32u << 10) /* under inline_write_max (64 KiB): every put here is inline */

static const kvmesh_scope_t SC = {"inl", NULL};

struct pair {
    kvmesh_t *s, *c;
};

static kvmesh_t *open_rt(const char *url, const char *mem)
{
    kvmesh_config_t *c = kvmesh_config_new();
    assert_int_equal(kvmesh_config_set(c, "metadata_url", url), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(kvmesh_config_set(c, "transport", "tcp"), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", mem), 0);
    assert_int_equal(kvmesh_config_set(c, "segment_size", "1048576"), 0);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", "65536"), 0);
    assert_int_equal(kvmesh_config_set(c, "evict_high_watermark", "1.0"), 0);
    assert_int_equal(kvmesh_config_set(c, "evict_low_watermark", "0.5"), 0);
    assert_int_equal(kvmesh_config_set(c, "reclaim_grace_ms", "30"), 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    assert_int_equal(rc, 0);
    kvmesh_config_free(c);
    return kv;
}

static struct pair open_pair(const char *url)
{
    struct pair p = {.s = open_rt(url, "1048576"), .c = open_rt(url, "0")};
    for (int t = 0; t < 200; t++) {
        size_t n = 0;
        kvmesh_members(p.c, NULL, 0, &n);
        if (n == 2)
            return p;
        usleep(20000);
    }
    fail_msg("C never saw S");
    return p;
}

static void close_pair(struct pair *p)
{
    kvmesh_close(p->c);
    kvmesh_close(p->s);
}

static struct kvm_rt_stats stats(kvmesh_t *kv)
{
    struct kvm_rt_stats st;
    assert_int_equal(kvm_store_stats(kvmesh_runtime_of(kv), &st), 0);
    return st;
}

static int64_t payload_trips(kvmesh_t *kv)
{
    int64_t v = 0;
    assert_int_equal(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, "op_round_trips_total",
                                      OBS_OP_PUT, OBS_CPSTAGE_PAYLOAD, &v),
                     0);
    return v;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 11);
}

static void put_ok(kvmesh_t *kv, const char *key, const uint8_t *v, size_t n)
{
    int rc = kvmesh_put(kv, &SC, key, strlen(key), v, n, NULL);
    if (rc)
        fprintf(stderr, "put %s: %s\n", key, kvmesh_last_error());
    assert_int_equal(rc, 0);
}

static void reads_back(kvmesh_t *kv, const char *key, const uint8_t *v, size_t n)
{
    uint8_t *out = malloc(n);
    size_t got = 0;
    assert_int_equal(kvmesh_get_into(kv, &SC, key, strlen(key), out, n, &got), 0);
    assert_int_equal(got, n);
    assert_memory_equal(out, v, n);
    free(out);
}

/* S's used bytes back at `used` once the released slot's grace ended (bounded wait). */
static void used_settles(kvmesh_t *s, uint64_t used)
{
    for (int t = 0; t < 200 && stats(s).used != used; t++)
        usleep(10000);
    assert_int_equal(stats(s).used, used);
}

static void test_checksum_mismatch(void **state)
{
    (void)state;
    struct pair p = open_pair("memory://inline-sum");
    uint8_t *v = malloc(OBJ);
    fill(v, OBJ, 1);
    put_ok(p.c, "before", v, OBJ); /* S holds something: the figures below are not all zero */
    struct kvm_rt_stats st0 = stats(p.s);
    assert_int_equal(st0.reserved_bytes, 0);

    fill(v, OBJ, 2);
    assert_int_equal(kvm_put_inline_test_bad_sums(1), 0);
    int rc = kvmesh_put(p.c, &SC, "k", 1, v, OBJ, NULL);
    print_message("put with a spoilt checksum: %s: %s\n", kvmesh_strerror(rc), kvmesh_last_error());
    assert_int_equal(rc, KVMESH_ECHECKSUM);
    assert_non_null(strstr(kvmesh_last_error(), "do not match their checksum"));
    assert_int_equal(kvm_put_inline_test_bad_sums(0), 0); /* the one spoilt body was sent */

    /* nothing stays reserved or charged on S */
    struct kvm_rt_stats st1 = stats(p.s);
    assert_int_equal(st1.reserved_bytes, st0.reserved_bytes);
    used_settles(p.s, st0.used);
    size_t got = 0;
    assert_int_equal(kvmesh_get_into(p.c, &SC, "k", 1, v, OBJ, &got), KVMESH_ENOENT);

    /* the same key then goes in and reads back */
    put_ok(p.c, "k", v, OBJ);
    reads_back(p.c, "k", v, OBJ);
    reads_back(p.s, "k", v, OBJ);
    assert_int_equal(stats(p.s).used, st0.used + OBJ);
    free(v);
    close_pair(&p);
}

static void test_waited_reservation(void **state)
{
    (void)state;
    struct pair p = open_pair("memory://inline-wait");
    uint8_t *v = malloc(OBJ);
    uint64_t cap = stats(p.s).capacity;
    assert_true(cap >= 4 * OBJ);
    /* fill S up to its capacity with committed objects (no background eviction at 1.0) */
    uint32_t n = 0;
    for (; n < 2 * cap / OBJ && stats(p.s).used + OBJ <= cap; n++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", n);
        fill(v, OBJ, n);
        put_ok(p.c, key, v, OBJ);
    }
    struct kvm_rt_stats st0 = stats(p.s);
    print_message("S full after %u puts: %llu of %llu bytes used, waits %llu\n", n,
                  (unsigned long long)st0.used, (unsigned long long)st0.capacity,
                  (unsigned long long)st0.reserve_waits);
    assert_true(st0.used + OBJ > cap);

    /* the next put's inline reservation waits for eviction, then is copied and verified */
    fill(v, OBJ, 0xfeed);
    int64_t payload0 = payload_trips(p.c);
    put_ok(p.c, "late", v, OBJ);
    struct kvm_rt_stats st1 = stats(p.s);
    print_message("late put: waits %llu, evictions %llu\n", (unsigned long long)st1.reserve_waits,
                  (unsigned long long)st1.evictions);
    assert_true(st1.reserve_waits > st0.reserve_waits); /* it did wait */
    assert_true(st1.evictions > st0.evictions);
    assert_int_equal(payload_trips(p.c), payload0); /* inline: no payload exchange */
    reads_back(p.c, "late", v, OBJ);
    reads_back(p.s, "late", v, OBJ);
    free(v);
    close_pair(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_checksum_mismatch),
                                       cmocka_unit_test(test_waited_reservation)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
