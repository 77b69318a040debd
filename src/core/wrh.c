/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wrh.c — weighted rendezvous hashing (wrh.h). The score function is frozen; see wrh.h and
 * docs/core-model.md. Hot path: no allocation (top-k keeps its working set on the stack, at
 * most WRH_MAX_K entries), one XXH3 of 8 bytes and one log() per candidate.
 */
#include <math.h>
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "core/wrh.h"

uint64_t wrh_id_hash(const kvm_id128_t *id)
{
    return XXH3_64bits_withSeed(id->b, KVM_ID128_LEN, KVM_HASH_SEED_CANDIDATE);
}

uint64_t wrh_id_hash_bytes(const void *id, size_t len)
{
    return XXH3_64bits_withSeed(id, len, KVM_HASH_SEED_CANDIDATE);
}

uint64_t wrh_shard_key(uint32_t shard)
{
    uint8_t b[4] = {(uint8_t)(shard >> 24), (uint8_t)(shard >> 16), (uint8_t)(shard >> 8),
                    (uint8_t)shard};
    return XXH3_64bits_withSeed(b, sizeof(b), KVM_HASH_SEED_SHARD);
}

uint64_t wrh_key_hash_bytes(const void *key, size_t len)
{
    return XXH3_64bits_withSeed(key, len, KVM_HASH_SEED_BYTES);
}

double wrh_score(uint64_t id_hash, double weight, uint64_t key_hash)
{
    if (!(weight > 0) || !isfinite(weight))
        return 0.0;
    uint8_t kb[8];
    for (int i = 0; i < 8; i++)
        kb[i] = (uint8_t)(key_hash >> (8 * i));
    uint64_t h = XXH3_64bits_withSeed(kb, sizeof(kb), id_hash);
    /* 52 bits + 0.5 is exact in a double: u in [2^-53, 1 - 2^-53], never 0 or 1 */
    double u = ((double)(h >> 12) + 0.5) * 0x1p-52;
    return weight / -log(u);
}

/* True when candidate (sa, ia) ranks before (sb, ib). */
static bool ranks_before(const wrh_candidate_t *c, double sa, uint32_t ia, double sb, uint32_t ib)
{
    if (sa != sb)
        return sa > sb;
    if (c[ia].id_hash != c[ib].id_hash)
        return c[ia].id_hash < c[ib].id_hash;
    return ia < ib;
}

int wrh_top_k(const wrh_candidate_t *cands, size_t n, uint64_t key_hash, size_t k,
              uint32_t *out_idx, size_t *out_n)
{
    *out_n = 0;
    if (k < 1 || k > WRH_MAX_K)
        return kvm_errf(KVMESH_EINVAL, "wrh: k = %zu; it must be in 1..%d", k, WRH_MAX_K);
    if (n > UINT32_MAX)
        return kvm_errf(KVMESH_EINVAL, "wrh: %zu candidates; at most %u", n, UINT32_MAX);
    double best[WRH_MAX_K];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        double w = cands[i].weight;
        if (!(w >= 0) || !isfinite(w))
            return kvm_errf(KVMESH_EINVAL,
                            "wrh: candidate %zu has weight %g; weights must be "
                            "finite and >= 0",
                            i, w);
        if (w == 0)
            continue;
        double s = wrh_score(cands[i].id_hash, w, key_hash);
        uint32_t idx = (uint32_t)i;
        if (m == k && !ranks_before(cands, s, idx, best[m - 1], out_idx[m - 1]))
            continue;
        size_t j = m < k ? m++ : m - 1; /* slot freed for the newcomer */
        while (j > 0 && ranks_before(cands, s, idx, best[j - 1], out_idx[j - 1])) {
            best[j] = best[j - 1];
            out_idx[j] = out_idx[j - 1];
            j--;
        }
        best[j] = s;
        out_idx[j] = idx;
    }
    *out_n = m;
    return 0;
}

int64_t wrh_first(const wrh_candidate_t *cands, size_t n, uint64_t key_hash)
{
    int64_t bi = -1;
    double bs = 0;
    for (size_t i = 0; i < n; i++) {
        double s = wrh_score(cands[i].id_hash, cands[i].weight, key_hash);
        if (s <= 0)
            continue;
        if (bi < 0 || ranks_before(cands, s, (uint32_t)i, bs, (uint32_t)bi)) {
            bi = (int64_t)i;
            bs = s;
        }
    }
    return bi;
}
