/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash_fast.c — XXH3-64 at memory speed: picks, once, the fastest variant this CPU runs
 * (hash_impl.h) for payload checksums. The system libxxhash is built for the baseline x86-64
 * (its XXH3 loop is SSE2); the AVX2 and AVX-512 variants are the same algorithm with wider
 * vectors and give the same 64-bit value for every input (tests/unit/test_hash.c).
 *
 * Order of preference: avx512 (AVX-512F), avx2, then the library, by what the CPU and the OS
 * support (__builtin_cpu_supports); tests and benchmarks may pick one by name
 * (kvm_hash_impl_use). docs/performance.md "Checksum and copy" has their speeds.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t's size */
#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

#include "core/copy.h"
#include "core/hash.h"
#include "core/hash_impl.h"
#include "core/util.h"

_Static_assert(sizeof(XXH3_state_t) <= KVM_SUM_STATE_SIZE, "KVM_SUM_STATE_SIZE too small");
_Static_assert(sizeof(((struct kvm_sum *)0)->state) == KVM_SUM_STATE_SIZE, "kvm_sum layout");

static uint64_t lib_oneshot(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

static void lib_reset(void *state, uint64_t seed)
{
    XXH3_64bits_reset_withSeed((XXH3_state_t *)state, seed);
}

static void lib_update(void *state, const void *data, size_t len)
{
    XXH3_64bits_update((XXH3_state_t *)state, data, len);
}

static uint64_t lib_digest(const void *state)
{
    return XXH3_64bits_digest((const XXH3_state_t *)state);
}

/* Copy then hash, block by block: each block hashed while in L1 (the library has no fused loop). */
#define LIB_COPY_BLOCK (16u << 10)

static void lib_update_copy(void *state, void *dst, const void *src, size_t len)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t o = 0, k; o < len; o += k) {
        k = KVM_MIN((size_t)LIB_COPY_BLOCK, len - o);
        memcpy(d + o, s + o, k);
        XXH3_64bits_update((XXH3_state_t *)state, d + o, k);
    }
}

/* Streamed in 4 KiB blocks through a bounce block in L1: the source is read once, so the bytes
 * hashed are the bytes stored even where another process changes the source meanwhile (an
 * owner's pages: a torn read fails verification). */
#define LIB_STREAM_BLOCK (4u << 10)

static void lib_update_copy_stream(void *state, void *dst, const void *src, size_t len)
{
    _Alignas(64) unsigned char t[LIB_STREAM_BLOCK];
    unsigned char *d = dst;
    const unsigned char *s = src;
    for (size_t o = 0, k; o < len; o += k) {
        k = KVM_MIN((size_t)LIB_STREAM_BLOCK, len - o);
        memcpy(t, s + o, k);
        kvm_copy_stream(d + o, t, k);
        XXH3_64bits_update((XXH3_state_t *)state, t, k);
    }
}

static const struct kvm_hash_ops kvm_hash_ops_lib = {
    .name = "xxhash",
    .oneshot = lib_oneshot,
    .reset = lib_reset,
    .update = lib_update,
    .update_copy = lib_update_copy,
    .update_copy_stream = lib_update_copy_stream,
    .digest = lib_digest,
};

/* Every variant, slowest first; kvm_hash_impls lists those this CPU runs. */
#if defined(__x86_64__) || defined(__i386__)
static const struct kvm_hash_ops *const all_ops[] = {&kvm_hash_ops_lib, &kvm_hash_ops_avx2,
                                                     &kvm_hash_ops_avx512};

static bool ops_runs_here(const struct kvm_hash_ops *o)
{
    __builtin_cpu_init();
    if (o == &kvm_hash_ops_avx2)
        return __builtin_cpu_supports("avx2");
    if (o == &kvm_hash_ops_avx512)
        return __builtin_cpu_supports("avx512f");
    return true;
}
#else /* other CPUs: the library's XXH3 (its build picks the vector code, e.g. NEON) */
static const struct kvm_hash_ops *const all_ops[] = {&kvm_hash_ops_lib};

static bool ops_runs_here(const struct kvm_hash_ops *o)
{
    return o == &kvm_hash_ops_lib;
}
#endif

static const struct kvm_hash_ops *cur_ops; /* atomic; NULL until the first use */

static const struct kvm_hash_ops *ops(void)
{
    const struct kvm_hash_ops *o = __atomic_load_n(&cur_ops, __ATOMIC_ACQUIRE);
    if (KVM_LIKELY(o != NULL))
        return o;
    o = &kvm_hash_ops_lib;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(all_ops); i++) /* the last one that runs: fastest */
        if (ops_runs_here(all_ops[i]))
            o = all_ops[i];
    __atomic_store_n(&cur_ops, o, __ATOMIC_RELEASE); /* every racing thread stores the same */
    return o;
}

uint64_t kvm_xxh3(const void *data, size_t len, uint64_t seed)
{
    return ops()->oneshot(data, len, seed);
}

void kvm_sum_init(struct kvm_sum *s, uint64_t seed)
{
    s->ops = ops();
    s->ops->reset(s->state, seed);
}

void kvm_sum_update(struct kvm_sum *s, const void *data, size_t len)
{
    KVM_ASSERT(s->ops != NULL);
    s->ops->update(s->state, data, len);
}

void kvm_sum_update_copy(struct kvm_sum *s, void *dst, const void *src, size_t len)
{
    KVM_ASSERT(s->ops != NULL);
    if (len)
        s->ops->update_copy(s->state, dst, src, len);
}

void kvm_sum_update_copy_stream(struct kvm_sum *s, void *dst, const void *src, size_t len)
{
    KVM_ASSERT(s->ops != NULL);
    if (len)
        s->ops->update_copy_stream(s->state, dst, src, len);
}

uint64_t kvm_sum_digest(const struct kvm_sum *s)
{
    KVM_ASSERT(s->ops != NULL);
    return s->ops->digest(s->state);
}

size_t kvm_hash_impls(const char **names, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(all_ops); i++)
        if (ops_runs_here(all_ops[i]) && n < max)
            names[n++] = all_ops[i]->name;
    return n;
}

int kvm_hash_impl_use(const char *name)
{
    for (size_t i = 0; i < KVM_ARRAY_SIZE(all_ops); i++) {
        if (strcmp(all_ops[i]->name, name) != 0)
            continue;
        if (!ops_runs_here(all_ops[i]))
            return kvm_errf(KVMESH_ENOTSUP, "XXH3 variant %s: this CPU lacks its instructions",
                            name);
        __atomic_store_n(&cur_ops, all_ops[i], __ATOMIC_RELEASE);
        return 0;
    }
    return kvm_errf(KVMESH_EINVAL, "no XXH3 variant named \"%s\"", name);
}

const char *kvm_hash_impl(void)
{
    return ops()->name;
}
