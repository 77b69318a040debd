/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash_variant.h — the body of one XXH3-64 variant (hash_impl.h): included once by hash_avx2.c
 * and once by hash_avx512.c, each compiled with its instruction set, after defining
 * KVM_HASH_VARIANT (the ops table's name) and KVM_HASH_VARIANT_NAME. xxHash's inline build picks
 * its vector code from the compiler's target macros (__AVX2__, __AVX512F__).
 */
#ifndef KVM_HASH_VARIANT
#error "define KVM_HASH_VARIANT before including hash_variant.h"
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/hash_impl.h"

_Static_assert(sizeof(XXH3_state_t) <= KVM_SUM_STATE_SIZE, "KVM_SUM_STATE_SIZE too small");
_Static_assert(_Alignof(XXH3_state_t) <= 64, "XXH3_state_t alignment above 64");

static uint64_t v_oneshot(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

static void v_reset(void *state, uint64_t seed)
{
    XXH3_64bits_reset_withSeed((XXH3_state_t *)state, seed);
}

static void v_update(void *state, const void *data, size_t len)
{
    XXH3_64bits_update((XXH3_state_t *)state, data, len);
}

static uint64_t v_digest(const void *state)
{
    return XXH3_64bits_digest((const XXH3_state_t *)state);
}

const struct kvm_hash_ops KVM_HASH_VARIANT = {
    .name = KVM_HASH_VARIANT_NAME,
    .oneshot = v_oneshot,
    .reset = v_reset,
    .update = v_update,
    .digest = v_digest,
};
