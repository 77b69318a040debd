/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hook.h — the counted test hooks of the store (put_primary.c's declines, put_inline.c's
 * spoilt checksums): a process-wide count armed by a test (kvm_test_arm) and taken one at a
 * time by the code under test (kvm_test_take), from any thread. Never armed outside tests.
 */
#ifndef KVMESH_STORE_TEST_HOOK_H
#define KVMESH_STORE_TEST_HOOK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Arms the hook with n; returns the count still armed before the call. */
static inline uint32_t kvm_test_arm(_Atomic uint32_t *armed, uint32_t n)
{
    return atomic_exchange(armed, n);
}

/* Whether one armed count was taken (the count is then one less). */
static inline bool kvm_test_take(_Atomic uint32_t *armed)
{
    uint32_t n = atomic_load(armed);
    while (n > 0 && !atomic_compare_exchange_weak(armed, &n, n - 1))
        ;
    return n > 0;
}

#endif
