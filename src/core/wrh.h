/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wrh.h — weighted rendezvous hashing (highest random weight, weighted): ranks candidates
 * (runtimes, devices ...) for a key or a logical route shard. Used on the hot path: no
 * allocation, no locks, pure functions of their arguments; callable from any thread.
 *
 * Score function (frozen: persisted ranks and authority sets depend on it):
 *   id_hash  = XXH3-64(candidate id bytes, seed KVM_HASH_SEED_CANDIDATE)   (wrh_id_hash*)
 *   h        = XXH3-64(key_hash as 8 little-endian bytes, seed id_hash)
 *   u        = ((h >> 12) + 0.5) / 2^52            -- in (0, 1), never 0 or 1 (exact)
 *   score    = weight / -ln(u)                     -- higher ranks first
 * -ln(u)/weight is Exp(weight)-distributed, so a candidate ranks first with probability
 * weight / sum(weights); ranks of other candidates are unaffected by adding or removing one
 * candidate (minimal disruption). Ties (equal scores) break by smaller id_hash, then smaller
 * index. Candidates with weight 0 never rank. Weights must be finite and >= 0.
 *
 * Key hashes: kvm_ident_t.hash for objects, wrh_shard_key() for logical shards,
 * wrh_key_hash_bytes() for anything else.
 */
#ifndef KVMESH_CORE_WRH_H
#define KVMESH_CORE_WRH_H

#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"
#include "core/version.h"

typedef struct wrh_candidate {
    uint64_t id_hash; /* wrh_id_hash(&runtime_id) or wrh_id_hash_bytes() */
    double weight;    /* finite, >= 0; 0 = never selected */
} wrh_candidate_t;

uint64_t wrh_id_hash(const kvm_id128_t *id);
uint64_t wrh_id_hash_bytes(const void *id, size_t len);
/* Key hash of logical route shard `shard` (to rank route authorities per shard). */
uint64_t wrh_shard_key(uint32_t shard);
uint64_t wrh_key_hash_bytes(const void *key, size_t len);

/* The score of one candidate for one key (see above). weight 0 gives 0. */
double wrh_score(uint64_t id_hash, double weight, uint64_t key_hash);

/*
 * Top-k: writes the indices (into cands) of the k best candidates, best first, into out_idx
 * (caller array of at least k entries) and their count into *out_n (fewer than k when fewer
 * candidates have weight > 0). k in [1, WRH_MAX_K]. O(n * k) worst case, O(n) typical; no
 * allocation. Errors: KVMESH_EINVAL for k out of range or a negative/non-finite weight.
 */
int wrh_top_k(const wrh_candidate_t *cands, size_t n, uint64_t key_hash, size_t k,
              uint32_t *out_idx, size_t *out_n);
/* Index of the best candidate, or -1 when none has weight > 0. Weights are not validated
 * here (negative/non-finite weights are treated as 0). */
int64_t wrh_first(const wrh_candidate_t *cands, size_t n, uint64_t key_hash);

#endif
