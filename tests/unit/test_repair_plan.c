/* SPDX-License-Identifier: Apache-2.0 */
/* The pure decisions of re-replication and the handoff (src/store/repair_plan.h): which route is
 * copied, by whom, from which replica, replacing which; the route a handoff publishes and when it
 * publishes nothing (superseded) or finds its own copy already there; what a CAS result means. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/util.h"
#include "store/repair_plan.h"

static kvm_runtime_id_t rid(uint64_t n)
{
    return kvm_id128_from_u64(0x7270, n);
}

static kvm_hot_replica_t rep(uint64_t owner, uint64_t seg, uint64_t off)
{
    return (kvm_hot_replica_t){
        .owner = rid(owner), .segment = seg, .offset = off, .length = 64, .checksum = 7};
}

static void route2(kvm_route_t *r, uint64_t a, uint64_t b)
{
    kvm_route_init(r);
    assert_int_equal(kvm_ident_init(&r->ident, "t", NULL, "k", 1), 0);
    r->version = (kvm_route_version_t){1, 5};
    r->content_op = (kvm_op_id_t){.writer = rid(9), .epoch = 1, .seq = 42};
    r->length = 64;
    r->checksum = 7;
    r->n_replicas = 2;
    r->replicas[0] = rep(a, 1, 0);
    r->replicas[1] = rep(b, 1, 64);
}

static void test_plan_verdicts(void **state)
{
    (void)state;
    kvm_route_t r;
    route2(&r, 1, 2);
    kvm_runtime_id_t self = rid(2), other = rid(3);
    kvm_repair_plan_t p = {0};
    enum kvm_rep_state live[2] = {KVM_REP_LIVE, KVM_REP_LIVE};
    assert_int_equal(kvm_repair_plan(&r, live, &self, &p), KVM_REPAIR_SKIP);
    /* replica 0 dead, replica 1 (self) the first live: self copies 1, replaces 0 */
    enum kvm_rep_state dl[2] = {KVM_REP_DEAD, KVM_REP_LIVE};
    assert_int_equal(kvm_repair_plan(&r, dl, &self, &p), KVM_REPAIR_COPY);
    assert_int_equal(p.src, 1);
    assert_int_equal(p.dead, 0);
    assert_int_equal(kvm_repair_plan(&r, dl, &other, &p), KVM_REPAIR_OTHER);
    enum kvm_rep_state dd[2] = {KVM_REP_DEAD, KVM_REP_DEAD};
    assert_int_equal(kvm_repair_plan(&r, dd, &self, &p), KVM_REPAIR_LOST);
    enum kvm_rep_state dlv[2] = {KVM_REP_DEAD, KVM_REP_LEAVING};
    assert_int_equal(kvm_repair_plan(&r, dlv, &self, &p), KVM_REPAIR_DRAINING);
    enum kvm_rep_state lvl[2] = {KVM_REP_LEAVING, KVM_REP_LIVE};
    assert_int_equal(kvm_repair_plan(&r, lvl, &self, &p), KVM_REPAIR_SKIP);
    kvm_route_free(&r);
    kvm_route_init(&r);
    assert_int_equal(kvm_ident_init(&r.ident, "t", NULL, "k", 1), 0);
    r.tomb = KVM_TOMB_PENDING;
    assert_int_equal(kvm_repair_plan(&r, dd, &self, &p), KVM_REPAIR_SKIP);
    kvm_route_free(&r);
}

static void test_handoff_next(void **state)
{
    (void)state;
    kvm_route_t cur, next;
    route2(&cur, 1, 2);
    kvm_hot_replica_t moving = rep(1, 1, 0), fresh = {.owner = rid(3), .segment = 4, .offset = 128};
    kvm_route_init(&next);
    assert_int_equal(kvm_handoff_next(&cur, &moving, &fresh, &next), 0);
    assert_int_equal(next.n_replicas, 2);
    assert_true(kvm_route_find_replica(&next, &moving) < 0);
    int i = kvm_route_find_replica(&next, &fresh);
    assert_true(i >= 0);
    assert_int_equal(next.replicas[i].length, cur.length);
    assert_int_equal(next.replicas[i].checksum, cur.checksum);
    assert_true(kvm_op_id_equal(&next.content_op, &cur.content_op));
    assert_int_equal(kvm_route_validate(&next), 0);
    /* that route applied and answered as a conflict: the copy is ours, already published */
    kvm_route_t again;
    kvm_route_init(&again);
    assert_int_equal(kvm_handoff_next(&next, &moving, &fresh, &again), 2);
    kvm_route_free(&again);
    kvm_route_free(&next);
    /* absent, tombstone, or overwritten (moving gone): superseded */
    kvm_route_init(&next);
    assert_int_equal(kvm_handoff_next(NULL, &moving, &fresh, &next), 1);
    kvm_route_t other;
    route2(&other, 2, 4);
    assert_int_equal(kvm_handoff_next(&other, &moving, &fresh, &next), 1);
    other.tomb = KVM_TOMB_PENDING;
    other.n_replicas = 0;
    assert_int_equal(kvm_handoff_next(&other, &moving, &fresh, &next), 1);
    kvm_route_free(&other);
    kvm_route_free(&next);
    kvm_route_free(&cur);
}

static void test_handoff_outcome(void **state)
{
    (void)state;
    uint32_t tries = 0;
    assert_int_equal(kvm_handoff_outcome(0, &tries, 2), KVM_HANDOFF_PUBLISHED);
    assert_int_equal(kvm_handoff_outcome(KVMESH_ECONFLICT, &tries, 2), KVM_HANDOFF_RETRY);
    assert_int_equal(kvm_handoff_outcome(KVMESH_ECONFLICT, &tries, 2), KVM_HANDOFF_RETRY);
    assert_int_equal(kvm_handoff_outcome(KVMESH_ECONFLICT, &tries, 2), KVM_HANDOFF_RECLAIM);
    assert_int_equal(tries, 3);
    tries = 0;
    assert_int_equal(kvm_handoff_outcome(KVMESH_ETIMEDOUT, &tries, 2), KVM_HANDOFF_KEEP);
    assert_int_equal(kvm_handoff_outcome(KVMESH_EINDETERMINATE, &tries, 2), KVM_HANDOFF_KEEP);
    assert_int_equal(kvm_handoff_outcome(KVMESH_EUNAVAILABLE, &tries, 2), KVM_HANDOFF_KEEP);
    assert_int_equal(kvm_handoff_outcome(KVMESH_EINVAL, &tries, 2), KVM_HANDOFF_RECLAIM);
    /* EAGAIN is answered only without applying: the copy is reclaimed, nothing waits for the
     * reservation's expiry lookup */
    assert_int_equal(kvm_handoff_outcome(KVMESH_EAGAIN, &tries, 2), KVM_HANDOFF_RECLAIM);
    assert_true(kvm_cas_refused(KVMESH_EAGAIN));
    assert_false(kvm_cas_refused(KVMESH_EUNAVAILABLE));
    assert_false(kvm_cas_refused(KVMESH_ETIMEDOUT));
    assert_int_equal(tries, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_verdicts),
        cmocka_unit_test(test_handoff_next),
        cmocka_unit_test(test_handoff_outcome),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
