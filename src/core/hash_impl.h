/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash_impl.h — the XXH3-64 variants behind hash.h's checksum functions (hash_fast.c picks one at
 * start-up). Each variant is xxHash's header-only implementation compiled in a translation unit
 * of its own with one instruction set enabled (hash_avx2.c: -mavx2, hash_avx512.c: -mavx512f);
 * the output is XXH3-64's, bit for bit, whatever the variant. Internal to src/core.
 *
 * A streaming state is KVM_SUM_STATE_SIZE bytes aligned to 64, owned by the caller; a variant's
 * reset/update/digest only ever see states reset by the same variant.
 */
#ifndef KVMESH_CORE_HASH_IMPL_H
#define KVMESH_CORE_HASH_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/hash.h" /* KVM_SUM_STATE_SIZE */

struct kvm_hash_ops {
    const char *name;
    uint64_t (*oneshot)(const void *data, size_t len, uint64_t seed);
    void (*reset)(void *state, uint64_t seed);
    void (*update)(void *state, const void *data, size_t len);
    /* memcpy(dst, src, len) then update(state, dst, len), in one pass where it can */
    void (*update_copy)(void *state, void *dst, const void *src, size_t len);
    /* the same, dst written with streaming stores where aligned; the caller fences */
    void (*update_copy_stream)(void *state, void *dst, const void *src, size_t len);
    uint64_t (*digest)(const void *state);
};

extern const struct kvm_hash_ops kvm_hash_ops_avx2;   /* hash_avx2.c */
extern const struct kvm_hash_ops kvm_hash_ops_avx512; /* hash_avx512.c */

#endif
