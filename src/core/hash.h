/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.h — the project's hash and checksum functions, all XXH3-64 (xxHash >= 0.8, whose XXH3
 * output is frozen and identical on every platform and process). Each use has its own seed so
 * that hashes of the same bytes for different purposes are independent. Never change a seed:
 * identities, shard mapping, WRH ranks and checksums are persisted and compared across runtimes.
 *
 * Payload checksums (kvm_checksum, struct kvm_sum) run the fastest XXH3 variant this CPU has
 * (hash_fast.c: AVX2 where available, else the system libxxhash); the value is the same.
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

/* XXH3_64bits_withSeed(data, len, seed), computed by the fastest variant this CPU runs. */
uint64_t kvm_xxh3(const void *data, size_t len, uint64_t seed);

/* Payload checksum: XXH3-64 with seed 0 (equal to XXH3_64bits(data, len)). */
static inline uint64_t kvm_checksum(const void *data, size_t len)
{
    return kvm_xxh3(data, len, KVM_HASH_SEED_CHECKSUM);
}

static inline uint64_t kvm_hash_seeded(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

/*
 * Streaming XXH3-64: init, update with the bytes in order (any split), digest (any number of
 * times). The digest equals kvm_xxh3 of the concatenation. Caller-owned, no allocation (about
 * 700 bytes: fine on a thread's stack); one thread at a time. A state keeps the variant it was
 * initialised with.
 */
#define KVM_SUM_STATE_SIZE 640u /* >= sizeof(XXH3_state_t) (576 in xxHash 0.8), asserted */

struct kvm_sum {
    _Alignas(64) unsigned char state[KVM_SUM_STATE_SIZE]; /* an XXH3_state_t of the variant */
    const struct kvm_hash_ops *ops;
};

void kvm_sum_init(struct kvm_sum *s, uint64_t seed);
void kvm_sum_update(struct kvm_sum *s, const void *data, size_t len);
uint64_t kvm_sum_digest(const struct kvm_sum *s);

/*
 * Copies len bytes from src to dst (the ranges must not overlap) and folds them into s, as
 * memcpy(dst, src, len) then kvm_sum_update(s, dst, len) would, in one pass where the variant
 * can (avx2, avx512: each 64-byte stripe loaded once, stored and hashed from the same registers;
 * the library variant copies and hashes in L1-sized blocks). For a source that is not in this
 * core's cache (another process's pages) it costs about one copy (docs/performance.md "Large shm
 * gets: the copy and the checksum"). Both pointers are borrowed for the call.
 */
void kvm_sum_update_copy(struct kvm_sum *s, void *dst, const void *src, size_t len);

/*
 * The same with streaming stores into dst (core/copy.h: no read-for-ownership, no eviction of
 * the cache): for a destination nobody reads soon (a put's bytes going into an owner's pages) or
 * one too large to stay in cache anyway (a large get's buffer). In the same one pass, and the
 * bytes hashed are the bytes stored (each source byte read once: a source another process
 * changes meanwhile hashes as copied, as with kvm_sum_update_copy). avx512 streams to any dst
 * aligned to 4 bytes, avx2 to one aligned to 32 (else plain stores); the library variant streams
 * with kvm_copy_stream through a 4 KiB bounce block it hashes. The stores are weakly ordered:
 * call kvm_copy_stream_fence() after the last call and before anyone is told the bytes are there.
 */
void kvm_sum_update_copy_stream(struct kvm_sum *s, void *dst, const void *src, size_t len);

/* Tests and benchmarks: the XXH3 variants this CPU runs ("xxhash" — the system library's —,
 * "avx2", "avx512"; at most max names, static storage), the one in use, and switching it
 * (KVMESH_EINVAL for an unknown name, KVMESH_ENOTSUP for one this CPU cannot run). Switching
 * while other threads hash is safe (each call or kvm_sum keeps the variant it started with). */
size_t kvm_hash_impls(const char **names, size_t max);
const char *kvm_hash_impl(void);
int kvm_hash_impl_use(const char *name);

#endif
