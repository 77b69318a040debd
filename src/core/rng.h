/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rng.h — the one pseudo-random generator of the project: xoshiro256** seeded through
 * splitmix64. Pure and deterministic (the seed decides every draw), so the real env binding
 * seeds it from getrandom() and the simulator from its root seed. Not for cryptography.
 * A kvm_rng_t is plain state owned by its user; not thread-safe.
 */
#ifndef KVMESH_CORE_RNG_H
#define KVMESH_CORE_RNG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util.h"

typedef struct kvm_rng {
    uint64_t s[4];
} kvm_rng_t;

/* One splitmix64 step: advances *x and returns the next output. */
static inline uint64_t kvm_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Expands a 64-bit seed into the generator's state. */
static inline void kvm_rng_seed(kvm_rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = kvm_splitmix64(&seed);
}

static inline uint64_t kvm_rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t kvm_rng_next(kvm_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t res = kvm_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = kvm_rng_rotl(s[3], 45);
    return res;
}

/* Uniform in [lo, hi] by multiply-shift (a bias below 2^-64 per draw; deterministic). */
static inline uint64_t kvm_rng_range(kvm_rng_t *r, uint64_t lo, uint64_t hi)
{
    KVM_ASSERT(lo <= hi);
    uint64_t span = hi - lo;
    if (span == UINT64_MAX)
        return kvm_rng_next(r);
    return lo + (uint64_t)(((unsigned __int128)kvm_rng_next(r) * (span + 1)) >> 64);
}

/* True with probability p (p <= 0: never; p >= 1: always). */
static inline bool kvm_rng_chance(kvm_rng_t *r, double p)
{
    if (p <= 0.0)
        return false;
    if (p >= 1.0)
        return true;
    return (double)(kvm_rng_next(r) >> 11) * 0x1.0p-53 < p;
}

#endif
