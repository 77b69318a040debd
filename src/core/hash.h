/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.h — the project's hash and checksum functions, all XXH3-64 (xxHash >= 0.8, whose XXH3
 * output is frozen and identical on every platform and process). Each use has its own seed so
 * that hashes of the same bytes for different purposes are independent. Never change a seed:
 * identities, shard mapping, WRH ranks and checksums are persisted and compared across runtimes.
 */
#ifndef KVMESH_CORE_HASH_H
#define KVMESH_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#define KVM_HASH_SEED_CHECKSUM  UINT64_C(0)                  /* payload checksums */
#define KVM_HASH_SEED_IDENT     UINT64_C(0x6b766d2d6964656e) /* canonical identity -> hash */
#define KVM_HASH_SEED_SHARD     UINT64_C(0x6b766d2d73686172) /* logical shard -> WRH key */
#define KVM_HASH_SEED_CANDIDATE UINT64_C(0x6b766d2d63616e64) /* candidate id -> WRH id hash */
#define KVM_HASH_SEED_BYTES     UINT64_C(0x6b766d2d62797465) /* generic bytes -> WRH key */

/* Payload checksum: XXH3-64 with seed 0 (equal to XXH3_64bits(data, len)). */
static inline uint64_t kvm_checksum(const void *data, size_t len)
{
    return XXH3_64bits_withSeed(data, len, KVM_HASH_SEED_CHECKSUM);
}

static inline uint64_t kvm_hash_seeded(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

#endif
