/* SPDX-License-Identifier: Apache-2.0 */
/* What keeping a route costs per batch item (docs/performance.md "Route CPU per batch item,
 * tenth round"), counted, never timed:
 *   - an item's route records (src/store/rt_op.c kvm_item_route_take): a route whose identity
 *     equals the item's is kept with the item's identity borrowed: no allocation per item (a
 *     kvm_route_copy, the control, makes one each); another key's route gets its own copy; a
 *     dropped record is zeroed whole; kvm_op_unref frees each identity exactly once (the
 *     sanitizer builds catch a double free or a leak);
 *   - a route hint taken for an item (src/store/route_hint.c kvm_hint_get_borrowed): the
 *     item's identity borrowed, no allocation (kvm_hint_get, the control, makes one);
 *   - a decoded route (src/core/wire_route.c over kvm_route_init_sparse): the decoder zeroes
 *     KVM_ROUTE_SPARSE_ZEROED bytes, not the whole record: replica slots at and above
 *     n_replicas and the cold locator are left as they were, and the route decoded is the
 *     same (equal, and encoded to the same bytes) as one decoded into a zeroed record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/wire.h"
#include "alloc_count.h"
#include "store/store.h"

/* ---- allocation count: every malloc family call of the process while counting ------------- */

/* (tests/support/alloc_count.h defines this program's malloc family) */

/* ---- routes ---------------------------------------------------------------------------------- */

#define N_ITEMS 16

static void ident_of(kvm_ident_t *id, uint32_t i)
{
    char key[32];
    snprintf(key, sizeof(key), "item-key-%u", i);
    assert_int_equal(kvm_ident_init(id, "acme", "d1", key, strlen(key)), 0);
}

/* A route of key i (its own identity allocation) with `nrep` replicas. */
static void route_of(kvm_route_t *r, uint32_t i, uint32_t nrep)
{
    kvm_route_init(r);
    ident_of(&r->ident, i);
    r->version = (kvm_route_version_t){3, 100 + i};
    r->predecessor_version = (kvm_route_version_t){3, 50 + i};
    r->content_op = (kvm_op_id_t){.writer = {.b = {1, 2}}, .epoch = 7, .seq = 10 + i};
    r->length = 4096;
    r->checksum = 0x9e3779b97f4a7c15ull * (i + 1);
    for (uint32_t k = 0; k < nrep; k++)
        r->replicas[r->n_replicas++] = (kvm_hot_replica_t){.owner = {.b = {9, (uint8_t)(1 + k)}},
                                                           .segment = 1,
                                                           .offset = 4096ull * (i * 4 + k),
                                                           .length = r->length,
                                                           .checksum = r->checksum};
    if (nrep) /* (none: the caller gives it a cold backing) */
        assert_int_equal(kvm_route_validate(r), 0);
}

static bool all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

static void test_item_route_borrows(void **state)
{
    (void)state;
    kvm_op_t *op = kvm_op_new(NULL, KVM_OP_PUBLISH, N_ITEMS); /* (no runtime: no spare) */
    assert_non_null(op);
    kvm_route_t src[N_ITEMS], other;
    for (uint32_t i = 0; i < N_ITEMS; i++) {
        ident_of(&op->items[i].ident, i);
        route_of(&src[i], i, 1 + i % 3);
        assert_true(all_zero(&op->items[i].route, sizeof(kvm_route_t))); /* empty: zeroed */
        assert_true(all_zero(&op->items[i].cur, sizeof(kvm_route_t)));
    }
    route_of(&other, 999, 2);

    /* the control: a deep copy allocates its identity, one per item */
    kvm_route_t copies[N_ITEMS];
    uint64_t a0 = alloc_count_now();
    for (uint32_t i = 0; i < N_ITEMS; i++) {
        kvm_route_init(&copies[i]);
        assert_int_equal(kvm_route_copy(&copies[i], &src[i]), 0);
    }
    uint64_t copy_allocs = alloc_count_now() - a0;
    for (uint32_t i = 0; i < N_ITEMS; i++)
        kvm_route_free(&copies[i]);

    /* taken into the items: borrowed, no allocation */
    a0 = alloc_count_now();
    for (uint32_t i = 0; i < N_ITEMS; i++)
        assert_int_equal(kvm_item_route_take(&op->items[i], &op->items[i].route, &src[i]), 0);
    uint64_t take_allocs = alloc_count_now() - a0;
    printf("%d routes kept: kvm_route_copy %llu allocations, kvm_item_route_take %llu\n", N_ITEMS,
           (unsigned long long)copy_allocs, (unsigned long long)take_allocs);
    assert_int_equal(copy_allocs, N_ITEMS);
    assert_int_equal(take_allocs, 0);
    for (uint32_t i = 0; i < N_ITEMS; i++) {
        struct kvm_item *it = &op->items[i];
        assert_ptr_equal(it->route.ident.enc, it->ident.enc); /* borrowed */
        assert_true(kvm_route_equal(&it->route, &src[i]));
    }

    /* a record taken again after a drop (a conflict's answer into cur): zeroed by the drop */
    struct kvm_item *it0 = &op->items[0];
    assert_int_equal(kvm_item_route_take(it0, &it0->cur, &src[0]), 0);
    kvm_item_route_drop(it0, &it0->cur);
    assert_true(all_zero(&it0->cur, sizeof(kvm_route_t)));
    assert_non_null(it0->ident.enc); /* the item's own identity is left */
    assert_true(kvm_ident_equal(&it0->ident, &src[0].ident));
    kvm_item_route_drop(it0, &it0->cur); /* (an empty record: nothing) */
    assert_true(all_zero(&it0->cur, sizeof(kvm_route_t)));

    /* another key's route: its own copy (freed by kvm_op_unref, not the item's) */
    struct kvm_item *it1 = &op->items[1];
    a0 = alloc_count_now();
    assert_int_equal(kvm_item_route_take(it1, &it1->cur, &other), 0);
    assert_int_equal(alloc_count_now() - a0, 1);
    assert_true(it1->cur.ident.enc != it1->ident.enc && it1->cur.ident.enc != other.ident.enc);
    assert_true(kvm_route_equal(&it1->cur, &other));

    /* a route that already borrows the item's identity, kept in its other record */
    struct kvm_item *it2 = &op->items[2];
    assert_int_equal(kvm_item_route_take(it2, &it2->cur, &it2->route), 0);
    assert_ptr_equal(it2->cur.ident.enc, it2->ident.enc);

    for (uint32_t i = 0; i < N_ITEMS; i++)
        kvm_route_free(&src[i]); /* (the items' records own nothing of them) */
    kvm_route_free(&other);
    for (uint32_t i = 0; i < N_ITEMS; i++)
        assert_true(kvm_ident_equal(&op->items[i].route.ident, &op->items[i].ident));
    kvm_op_unref(op); /* every identity freed once: the item's, it1->cur's copy */
}

static void test_hint_borrowed(void **state)
{
    (void)state;
    kvm_rt_t *rt = calloc(1, sizeof(*rt)); /* route_hint.c uses rt->hints only */
    assert_non_null(rt);
    kvm_route_t r;
    route_of(&r, 5, 2);
    kvm_hint_put(rt, &r);
    kvm_ident_t id;
    ident_of(&id, 5);

    kvm_route_t h; /* the control: an owned identity */
    uint64_t a0 = alloc_count_now();
    assert_true(kvm_hint_get(rt, &id, &h));
    uint64_t get_allocs = alloc_count_now() - a0;
    assert_true(h.ident.enc != id.enc);
    kvm_route_free(&h);

    kvm_route_t b;
    kvm_route_init(&b);
    a0 = alloc_count_now();
    assert_true(kvm_hint_get_borrowed(rt, &id, &b));
    uint64_t borrowed_allocs = alloc_count_now() - a0;
    printf("hint taken: kvm_hint_get %llu allocations, kvm_hint_get_borrowed %llu\n",
           (unsigned long long)get_allocs, (unsigned long long)borrowed_allocs);
    assert_int_equal(get_allocs, 1);
    assert_int_equal(borrowed_allocs, 0);
    assert_ptr_equal(b.ident.enc, id.enc);
    assert_true(kvm_route_version_equal(&b.version, &r.version));
    assert_int_equal(b.n_replicas, 2);
    assert_true(kvm_hot_replica_equal(&b.replicas[1], &r.replicas[1]));
    assert_int_equal(b.cold.kind, KVM_COLD_NONE);
    assert_true(kvm_route_version_is_none(&b.predecessor_version));

    kvm_ident_t absent;
    ident_of(&absent, 6);
    kvm_route_t none;
    kvm_route_init(&none);
    assert_false(kvm_hint_get_borrowed(rt, &absent, &none));
    assert_true(all_zero(&none, sizeof(none))); /* left empty */

    kvm_ident_free(&absent);
    kvm_ident_free(&id); /* (b borrowed it: nothing of b to free) */
    kvm_route_free(&r);
    kvm_hint_fini(rt);
    free(rt);
}

/* A decoded route into a record filled with 0xa5: the decoder zeroes only the sparse part, and
 * the route is the one a zeroed record decodes. */
static void test_decode_zeroes_sparse(void **state)
{
    (void)state;
    size_t repl_at = offsetof(kvm_route_t, replicas), cold_at = offsetof(kvm_route_t, cold);
    size_t loc_at = cold_at + offsetof(kvm_cold_backing_t, u.mat.locator);
    printf("kvm_route_t %zu bytes; kvm_route_init_sparse zeroes %zu\n", sizeof(kvm_route_t),
           (size_t)KVM_ROUTE_SPARSE_ZEROED);
    assert_int_equal(KVM_ROUTE_SPARSE_ZEROED, repl_at + (loc_at - cold_at));
    assert_true(KVM_ROUTE_SPARSE_ZEROED * 3 < sizeof(kvm_route_t)); /* under a third */

    kvm_route_t s;
    memset(&s, 0xa5, sizeof(s));
    kvm_route_init_sparse(&s);
    const uint8_t *b = (const uint8_t *)&s;
    size_t zeroed = 0;
    for (size_t i = 0; i < sizeof(s); i++)
        zeroed += b[i] == 0;
    assert_int_equal(zeroed, KVM_ROUTE_SPARSE_ZEROED);
    assert_true(all_zero(b, repl_at) && all_zero(b + cold_at, loc_at - cold_at));

    uint8_t buf[KVM_WIRE_MAX_RECORD_LEN];
    for (uint32_t nrep = 0; nrep <= 3; nrep++) {
        kvm_route_t r;
        route_of(&r, 40 + nrep, nrep);
        if (nrep == 0) { /* a cold-only route: a materialized backing */
            kvm_op_id_t cold_op = {.writer = {.b = {1, 2}}, .epoch = 7, .seq = 999};
            kvm_cold_backing_pending(&r.cold, &cold_op, &r.content_op,
                                     &(kvm_runtime_id_t){.b = {5, 6}},
                                     &(kvm_tier_id_t){.b = {7, 8}}, r.length, r.checksum);
            assert_int_equal(
                kvm_cold_backing_materialize(&r.cold, "loc/1", 5, r.length, r.checksum), 0);
        }
        assert_int_equal(kvm_route_validate(&r), 0);
        size_t n = 0, n2 = 0;
        assert_int_equal(wire_route_encode(&r, buf, sizeof(buf), &n), 0);
        kvm_route_t dz, dd;
        memset(&dd, 0xa5, sizeof(dd));
        assert_int_equal(wire_route_decode(buf, n, &dz), 0); /* (into any record) */
        assert_int_equal(wire_route_decode(buf, n, &dd), 0);
        assert_true(kvm_route_equal(&dz, &r) && kvm_route_equal(&dd, &r));
        uint8_t again[KVM_WIRE_MAX_RECORD_LEN];
        assert_int_equal(wire_route_encode(&dd, again, sizeof(again), &n2), 0);
        assert_int_equal(n2, n);
        assert_memory_equal(again, buf, n);
        /* the slots above n_replicas and the locator past its length: not written */
        const uint8_t *p = (const uint8_t *)&dd.replicas[nrep];
        for (size_t i = 0; i < (KVM_MAX_REPLICAS - nrep) * sizeof(kvm_hot_replica_t); i++)
            assert_int_equal(p[i], 0xa5);
        kvm_route_free(&dz);
        kvm_route_free(&dd);
        kvm_route_free(&r);
    }
}

int main(void)
{
    assert_int_equal(alloc_count_start(), 0);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_item_route_borrows),
                                       cmocka_unit_test(test_hint_borrowed),
                                       cmocka_unit_test(test_decode_zeroes_sparse)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
