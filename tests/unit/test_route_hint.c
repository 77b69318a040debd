/* SPDX-License-Identifier: Apache-2.0 */
/* The runtime's route hints (src/store/route_hint.c) are keyed by the full scoped identity: the
 * same key written in two tenants and in two domains of one tenant keeps one hint per scope,
 * each with its own version, length and checksum; a scope never written has none (no hint of
 * another scope is handed out for it), and dropping one scope's hint leaves the others. This is
 * the cache of the hard-isolation bullet "cross-tenant and cross-domain ... caches do not leak"
 * (docs/protocol.md 9b). Also: the bounded set-associative replacement keeps every scope of
 * a key apart under pressure (a fill of many other keys evicts, never aliases), and a working set
 * of half the table's capacity, written round robin as the bench's batch puts do, keeps a hint
 * for every key (with one candidate set per key, about 14% of such keys lost theirs to over-full
 * sets on every round, and nearly every 128-item batch put took a second CAS round). And a
 * batch's prefetch of its lookups (kvm_hint_prefetch) leaves every hint as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/store.h"

struct scope {
    const char *tenant, *domain;
    uint64_t len;
};

static const struct scope written[] = {
    {"acme", NULL, 100}, {"beta", NULL, 3000}, {"acme", "d1", 10}, {"acme", "d2", 7}};
static const struct scope never[] = {{"gamma", NULL, 0}, {"acme", "d3", 0}, {"beta", "d1", 0}};

static void route_of(kvm_route_t *r, const struct scope *s, const char *key, uint64_t seq)
{
    kvm_route_init(r);
    assert_int_equal(kvm_ident_init(&r->ident, s->tenant, s->domain, key, strlen(key)), 0);
    r->version = (kvm_route_version_t){1, seq};
    r->content_op = (kvm_op_id_t){.epoch = 7, .seq = seq};
    r->length = s->len;
    r->checksum = 0x9e3779b97f4a7c15ull * (s->len + 1);
}

static bool hint_of(kvm_rt_t *rt, const struct scope *s, const char *key, kvm_route_t *out)
{
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, s->tenant, s->domain, key, strlen(key)), 0);
    bool found = kvm_hint_get(rt, &id, out);
    kvm_ident_free(&id);
    return found;
}

static void check_scopes(kvm_rt_t *rt, const char *key, size_t n_written)
{
    for (size_t i = 0; i < n_written; i++) {
        kvm_route_t h;
        assert_true(hint_of(rt, &written[i], key, &h));
        assert_int_equal(h.length, written[i].len);
        assert_int_equal(h.version.primary_sequence, i + 1);
        kvm_ident_t id;
        assert_int_equal(
            kvm_ident_init(&id, written[i].tenant, written[i].domain, key, strlen(key)), 0);
        assert_true(kvm_ident_equal(&h.ident, &id));
        kvm_ident_free(&id);
        kvm_route_free(&h);
    }
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
        kvm_route_t h;
        assert_false(hint_of(rt, &never[i], key, &h));
    }
}

static void test_hints_per_scope(void **state)
{
    (void)state;
    kvm_rt_t *rt = calloc(1, sizeof(*rt)); /* route_hint.c uses rt->hints only */
    assert_non_null(rt);
    const size_t nw = sizeof(written) / sizeof(written[0]);
    for (size_t i = 0; i < nw; i++) {
        kvm_route_t r;
        route_of(&r, &written[i], "k2", i + 1);
        kvm_hint_put(rt, &r);
        kvm_route_free(&r);
    }
    check_scopes(rt, "k2", nw);

    /* dropping beta's hint leaves acme's and its domains' */
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "beta", NULL, "k2", 2), 0);
    kvm_hint_drop(rt, &id);
    kvm_ident_free(&id);
    kvm_route_t h;
    assert_false(hint_of(rt, &written[1], "k2", &h));
    assert_true(hint_of(rt, &written[0], "k2", &h));
    assert_int_equal(h.length, 100);
    kvm_route_free(&h);
    assert_true(hint_of(rt, &written[2], "k2", &h));
    assert_int_equal(h.length, 10);
    kvm_route_free(&h);

    /* pressure: many other keys in every scope; whatever survives is its own scope's */
    for (uint32_t n = 0; n < 4 * STORE_HINTS; n++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", n);
        kvm_route_t r;
        route_of(&r, &written[n % nw], key, n + 100);
        kvm_hint_put(rt, &r);
        kvm_route_free(&r);
    }
    size_t kept = 0;
    for (size_t i = 0; i < nw; i++) {
        if (!hint_of(rt, &written[i], "k2", &h))
            continue;
        kept++;
        assert_int_equal(h.length, written[i].len);
        kvm_route_free(&h);
    }
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        assert_false(hint_of(rt, &never[i], "k2", &h));
    printf("after %u other keys: %zu of %zu k2 hints kept\n", 4 * STORE_HINTS, kept, nw);
    kvm_hint_fini(rt);
    free(rt);
}

static void test_half_capacity_round_robin(void **state)
{
    (void)state;
    kvm_rt_t *rt = calloc(1, sizeof(*rt));
    assert_non_null(rt);
    const uint32_t nkeys = STORE_HINTS / 2;
    for (uint32_t round = 0; round < 3; round++)
        for (uint32_t n = 0; n < nkeys; n++) {
            char key[32];
            snprintf(key, sizeof(key), "bench-%u", n);
            kvm_route_t r;
            if (round > 0) { /* every key written before still has its hint, with its version */
                assert_true(hint_of(rt, &written[0], key, &r));
                assert_int_equal(r.version.primary_sequence, (uint64_t)round * nkeys + n);
                kvm_route_free(&r);
            }
            route_of(&r, &written[0], key, (uint64_t)(round + 1) * nkeys + n);
            kvm_hint_put(rt, &r);
            kvm_route_free(&r);
        }
    kvm_hint_fini(rt);
    free(rt);
}

/* kvm_hint_prefetch (a batch's lookups prefetched) changes nothing: a runtime without a table
 * gets none, and two runtimes fed the same puts past the table's capacity (LRU evictions), one of
 * them prefetching each batch of 64 keys (written before, new, and zeroed identities, as an
 * array of structs) before its puts (of two thirds of them: a prefetch that touched the LRU
 * clock would keep the others' hints longer), end with the same hints for every key. */
struct pf_item {
    uint32_t pad;
    kvm_ident_t id;
    char more[40];
};

static void test_prefetch_changes_nothing(void **state)
{
    (void)state;
    kvm_rt_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    assert_non_null(a);
    assert_non_null(b);
    static struct pf_item items[64];
    memset(items, 0, sizeof(items));
    kvm_hint_prefetch(a, &items[0].id, sizeof(items[0]), 64);
    assert_null(a->hints); /* (no table yet: none made) */
    const uint32_t nkeys = 2 * STORE_HINTS;
    for (uint32_t base = 0; base < 3 * nkeys; base += 64) {
        for (uint32_t k = 0; k < 64; k++) {
            char key[32];
            snprintf(key, sizeof(key), "pf-%u", (base + k * 7919u) % nkeys);
            kvm_ident_free(&items[k].id);
            if (k % 16 != 15) /* (every 16th left zeroed) */
                assert_int_equal(kvm_ident_init(&items[k].id, written[k % 4].tenant,
                                                written[k % 4].domain, key, strlen(key)),
                                 0);
        }
        kvm_hint_prefetch(a, &items[0].id, sizeof(items[0]), 64);
        for (uint32_t k = 0; k < 64; k++) {
            if (!items[k].id.enc || k % 3 == 2) /* (a third prefetched, not put) */
                continue;
            kvm_route_t r;
            kvm_route_init(&r);
            assert_int_equal(kvm_ident_copy(&r.ident, &items[k].id), 0);
            r.version = (kvm_route_version_t){1, base + k};
            r.length = base + k;
            kvm_hint_put(a, &r);
            kvm_hint_put(b, &r);
            kvm_route_free(&r);
        }
    }
    size_t kept = 0;
    for (uint32_t n = 0; n < nkeys; n++)
        for (size_t s = 0; s < 4; s++) {
            char key[32];
            snprintf(key, sizeof(key), "pf-%u", n);
            kvm_route_t ha, hb;
            bool fa = hint_of(a, &written[s], key, &ha), fb = hint_of(b, &written[s], key, &hb);
            assert_int_equal(fa, fb);
            if (!fa)
                continue;
            kept++;
            assert_int_equal(ha.length, hb.length);
            assert_int_equal(ha.version.primary_sequence, hb.version.primary_sequence);
            kvm_route_free(&ha);
            kvm_route_free(&hb);
        }
    assert_true(kept > 0 && kept <= STORE_HINTS);
    for (uint32_t k = 0; k < 64; k++)
        kvm_ident_free(&items[k].id);
    kvm_hint_fini(a);
    kvm_hint_fini(b);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hints_per_scope),
                                       cmocka_unit_test(test_half_capacity_round_robin),
                                       cmocka_unit_test(test_prefetch_changes_nothing)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
