/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_item_state — the per-item state machine of the store's ops (ops_item.c, docs/store.md
 * "Item states"): every legal edge moves the item, every other edge (and a second end) asserts
 * (checked in a forked child that must die of SIGABRT), the table's shape (NEW is entered by
 * nobody, DONE and FAILED are left by nobody, every state is reachable from NEW and can end),
 * the paths the docs name are legal, and an item's end counts it done in its op.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvmesh.h"
#include "store/ops_int.h"
#include "store/store.h"

#define N KVM_ITEM_N_STATES

static bool terminal(int s)
{
    return s == KVM_ITEM_DONE || s == KVM_ITEM_FAILED;
}

/* Runs fn(a, b) in a child with stderr silenced and no core file; true when it died of SIGABRT
 * (a failed KVM_ASSERT), false when it returned. */
static bool aborts(void (*fn)(int, int), int a, int b)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        fn(a, b);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st))
        assert_int_equal(WEXITSTATUS(st), 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void move(int from, int to)
{
    struct kvm_item it;
    memset(&it, 0, sizeof(it));
    it.state = (enum kvm_item_state)from;
    kvm_item_set_state(&it, (enum kvm_item_state)to);
}

static void test_names(void **state)
{
    (void)state;
    for (int s = 0; s < N; s++) {
        const char *name = kvm_item_state_name((enum kvm_item_state)s);
        assert_string_not_equal(name, "?");
        for (int t = 0; t < s; t++)
            assert_string_not_equal(name, kvm_item_state_name((enum kvm_item_state)t));
    }
    assert_string_equal(kvm_item_state_name(KVM_ITEM_N_STATES), "?");
    assert_string_equal(kvm_item_state_name(KVM_ITEM_PARKED), "parked");
}

/* NEW has no way in, DONE / FAILED no way out; from NEW every state can be reached, and from
 * every state an end (DONE or FAILED) can. */
static void test_table_shape(void **state)
{
    (void)state;
    for (int s = 0; s < N; s++) {
        assert_false(kvm_item_edge_legal((enum kvm_item_state)s, KVM_ITEM_NEW));
        for (int t = 0; t < N; t++)
            if (terminal(s))
                assert_false(kvm_item_edge_legal((enum kvm_item_state)s, (enum kvm_item_state)t));
    }
    bool reach[N] = {[KVM_ITEM_NEW] = true};
    for (int round = 0; round < N; round++)
        for (int s = 0; s < N; s++)
            for (int t = 0; t < N; t++)
                if (reach[s] && kvm_item_edge_legal((enum kvm_item_state)s, (enum kvm_item_state)t))
                    reach[t] = true;
    for (int s = 0; s < N; s++)
        assert_true(reach[s]);
    bool ends[N] = {[KVM_ITEM_DONE] = true, [KVM_ITEM_FAILED] = true};
    for (int round = 0; round < N; round++)
        for (int s = 0; s < N; s++)
            for (int t = 0; t < N; t++)
                if (ends[t] && kvm_item_edge_legal((enum kvm_item_state)s, (enum kvm_item_state)t))
                    ends[s] = true;
    for (int s = 0; s < N; s++)
        assert_true(ends[s]);
    assert_false(kvm_item_edge_legal(KVM_ITEM_N_STATES, KVM_ITEM_DONE));
    assert_false(kvm_item_edge_legal(KVM_ITEM_NEW, KVM_ITEM_N_STATES));
}

/* Every legal edge moves the item; every illegal one asserts. */
static void test_every_edge(void **state)
{
    (void)state;
    int legal = 0, illegal = 0;
    for (int s = 0; s < N; s++)
        for (int t = 0; t < N; t++) {
            if (kvm_item_edge_legal((enum kvm_item_state)s, (enum kvm_item_state)t)) {
                struct kvm_item it;
                memset(&it, 0, sizeof(it));
                it.state = (enum kvm_item_state)s;
                kvm_item_set_state(&it, (enum kvm_item_state)t);
                assert_int_equal(it.state, t);
                legal++;
            } else {
                if (!aborts(move, s, t))
                    fail_msg("%s -> %s did not assert", kvm_item_state_name(s),
                             kvm_item_state_name(t));
                illegal++;
            }
        }
    assert_int_equal(legal + illegal, N * N);
    assert_true(legal > 0 && illegal > legal);
}

/* The flows docs/store.md names walk legal edges only. */
static void walk(const enum kvm_item_state *path, size_t n)
{
    struct kvm_item it;
    memset(&it, 0, sizeof(it));
    for (size_t i = 0; i < n; i++) {
        kvm_item_set_state(&it, path[i]);
        assert_int_equal(it.state, path[i]);
    }
    assert_true(terminal(it.state));
}

#define WALK(...)                                                                                  \
    do {                                                                                           \
        const enum kvm_item_state p_[] = {__VA_ARGS__};                                            \
        walk(p_, sizeof(p_) / sizeof(p_[0]));                                                      \
    } while (0)

static void test_documented_paths(void **state)
{
    (void)state;
    /* placement: quota charge, a round per answer, parked once, then placed */
    WALK(KVM_ITEM_QUOTA_RESERVING, KVM_ITEM_PLACING, KVM_ITEM_PLACING, KVM_ITEM_PARKED,
         KVM_ITEM_PLACING, KVM_ITEM_DONE);
    WALK(KVM_ITEM_PLACING, KVM_ITEM_PARKED, KVM_ITEM_FAILED); /* deadline / close */
    /* put without quota: the hint's CAS, a conflict, the retry, cold write-through */
    WALK(KVM_ITEM_COLD_GATE, KVM_ITEM_CAS, KVM_ITEM_COLD_GATE, KVM_ITEM_COLD_GATE, KVM_ITEM_CAS,
         KVM_ITEM_DURABLE_WAIT, KVM_ITEM_DONE);
    /* quota put: lookup, claim, CAS indeterminate, settled, republished, finalized */
    WALK(KVM_ITEM_LOOKING_UP, KVM_ITEM_CLAIMING, KVM_ITEM_COLD_GATE, KVM_ITEM_CAS,
         KVM_ITEM_SETTLING, KVM_ITEM_COLD_GATE, KVM_ITEM_CAS, KVM_ITEM_FINALIZING, KVM_ITEM_DONE);
    /* quota remove: lookup, refund reservation, claim, tombstone CAS, finalize */
    WALK(KVM_ITEM_LOOKING_UP, KVM_ITEM_QUOTA_RESERVING, KVM_ITEM_CLAIMING, KVM_ITEM_COLD_GATE,
         KVM_ITEM_CAS, KVM_ITEM_FINALIZING, KVM_ITEM_DONE);
    /* handoff: lookup, CAS, retry from the lookup */
    WALK(KVM_ITEM_LOOKING_UP, KVM_ITEM_CAS, KVM_ITEM_LOOKING_UP, KVM_ITEM_CAS, KVM_ITEM_FAILED);
    WALK(KVM_ITEM_LOOKING_UP, KVM_ITEM_DONE); /* a lookup (hit or miss) */
    WALK(KVM_ITEM_DONE);                      /* an aborted put's item */
}

static kvm_op_t *op_with_items(size_t n)
{
    kvm_op_t *op = kvm_op_new(NULL, KVM_OP_LOOKUP, n);
    assert_non_null(op);
    op->pending = n;
    atomic_fetch_add(&op->refs, 1); /* the loop's reference, dropped by kvm_op_complete */
    return op;
}

static void end_twice(int fail_second, int unused)
{
    (void)unused;
    kvm_op_t *op = op_with_items(2);
    kvm_item_done(op, &op->items[0]);
    if (fail_second)
        kvm_item_fail(op, &op->items[0], KVMESH_EIO, "again");
    else
        kvm_item_done(op, &op->items[0]);
}

/* An item ends once: its end counts it in the op, which completes with the last one; a second
 * end asserts. */
static void test_end_once(void **state)
{
    (void)state;
    kvm_op_t *op = op_with_items(2);
    kvm_item_set_state(&op->items[0], KVM_ITEM_LOOKING_UP);
    op->items[0].rc = KVMESH_ENOENT; /* a miss is an answer */
    kvm_item_done(op, &op->items[0]);
    assert_int_equal(op->items[0].state, KVM_ITEM_DONE);
    assert_int_equal(op->pending, 1);
    assert_false(op->done);
    kvm_item_set_state(&op->items[1], KVM_ITEM_PLACING);
    kvm_item_fail(op, &op->items[1], KVMESH_EIO, "disk %d", 3);
    assert_int_equal(op->items[1].state, KVM_ITEM_FAILED);
    assert_int_equal(op->items[1].rc, KVMESH_EIO);
    assert_string_equal(op->err, "disk 3");
    assert_true(op->done);
    assert_int_equal(op->pending, 0);
    kvm_op_unref(op);

    assert_true(aborts(end_twice, 0, 0));
    assert_true(aborts(end_twice, 1, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),      cmocka_unit_test(test_table_shape),
        cmocka_unit_test(test_every_edge), cmocka_unit_test(test_documented_paths),
        cmocka_unit_test(test_end_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
