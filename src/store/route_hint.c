/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_hint.c — the runtime's route hints [loop]: the last route version this runtime saw for a
 * key (its own publication, a lookup, a CAS conflict's answer), kept only as the `expected`
 * version of the next route CAS of that key, so a put does not look the route up before its CAS
 * (docs/architecture.md "Write path"). A hint is never served: a read always asks the shard
 * authorities, and a CAS with a stale hint is refused by the fenced primary (ECONFLICT, with the
 * current route in the answer, from which the put retries). A CAS applied against a hint proves
 * the hint was the current route (versions are unique per key: equal versions with different
 * values are a protocol conflict), so its replicas may be released as obsolete.
 *
 * Bounded: STORE_HINTS entries in sets of STORE_HINT_WAYS ways; a key has two candidate sets (by
 * the low and the high bits of its hash) and a new key takes an empty way of the emptier one,
 * else replaces the least recently used entry of the two; routes with more than STORE_HINT_REPLICAS
 * replicas, and routes with a materialized cold copy, are not kept. A lookup scans the two sets'
 * tags (hash and LRU clock, one cache line a set) and reads an entry only on a matching hash.
 * Allocated on first use (about 230 bytes per entry), freed by kvm_hint_fini at close.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/store.h"

struct kvm_hint {
    kvm_ident_t ident; /* owned; enc NULL = empty (then its tag's used is 0) */
    kvm_route_version_t version;
    kvm_op_id_t content_op;
    kvm_tomb_state_t tomb;
    uint64_t length, checksum;
    uint32_t n_replicas;
    kvm_hot_replica_t replicas[STORE_HINT_REPLICAS];
};

/* What a lookup scans, apart from the entries (16 bytes a way: a set is one cache line; the
 * entries, about 220 bytes each, are read only for a matching hash). */
struct kvm_hint_tag {
    uint64_t hash; /* the entry's ident.hash */
    uint64_t used; /* hints clock at the last put or get (LRU); 0 = the entry is empty */
};

struct kvm_hints {
    uint64_t clock;
    struct kvm_hint_tag tag[STORE_HINTS];
    struct kvm_hint e[STORE_HINTS];
};

KVM_STATIC_ASSERT((STORE_HINTS & (STORE_HINTS - 1)) == 0 && STORE_HINTS % STORE_HINT_WAYS == 0,
                  "STORE_HINTS: a power of two, whole sets");

/* The two candidate sets of a hash (their first indexes): one from its low bits, one from its
 * high bits (two-choice hashing: a key may live in either, so a set that draws more keys than
 * it has ways spills into the key's other set instead of evicting; with one choice per key,
 * 8192 keys written round robin into 16384 entries of 4 ways missed about 14% of the time, the
 * keys of over-full sets, which made nearly every 128-item batch put take a second CAS round). */
static void sets_of(uint64_t hash, size_t set[2])
{
    size_t sets = STORE_HINTS / STORE_HINT_WAYS;
    size_t a = (size_t)hash & (sets - 1), b = (size_t)(hash >> 32) & (sets - 1);
    if (b == a)
        b = (b + 1) & (sets - 1); /* two distinct sets */
    set[0] = a * STORE_HINT_WAYS;
    set[1] = b * STORE_HINT_WAYS;
}

/* The index of the entry holding id, or with `alloc` of the entry to (re)use for it: the
 * matching one, else an empty way of the emptier of its two sets (the power of two choices),
 * else the least recently used way of both. -1 when absent / out of memory. */
static long slot(kvm_rt_t *rt, const kvm_ident_t *id, bool alloc)
{
    if (!rt->hints) {
        if (!alloc)
            return -1;
        rt->hints = calloc(1, sizeof(*rt->hints));
        if (!rt->hints)
            return -1;
    }
    struct kvm_hints *hs = rt->hints;
    size_t set[2];
    long empty[2] = {-1, -1}, lru = -1;
    unsigned used[2] = {0, 0};
    sets_of(id->hash, set);
    for (unsigned s = 0; s < 2; s++)
        for (size_t i = set[s]; i < set[s] + STORE_HINT_WAYS; i++) {
            const struct kvm_hint_tag *t = &hs->tag[i];
            if (!t->used) { /* (its entry is not read: a cache miss per empty way) */
                empty[s] = empty[s] >= 0 ? empty[s] : (long)i;
                continue;
            }
            if (t->hash == id->hash && kvm_ident_equal(&hs->e[i].ident, id)) {
                hs->tag[i].used = ++hs->clock;
                return (long)i;
            }
            used[s]++;
            if (lru < 0 || t->used < hs->tag[lru].used)
                lru = (long)i;
        }
    if (!alloc)
        return -1;
    long victim = used[1] < used[0] && empty[1] >= 0 ? empty[1] : empty[0];
    victim = victim >= 0 ? victim : empty[1] >= 0 ? empty[1] : lru;
    KVM_ASSERT(hs->tag[victim].used || !hs->e[victim].ident.enc); /* an empty way's entry */
    hs->tag[victim].used = ++hs->clock;
    hs->tag[victim].hash = id->hash;
    return victim;
}

/* Asks for the cache lines that lookups of the n identities at ids (every `stride` bytes) will
 * read, in three passes over them so that the misses of all of them are in flight together
 * instead of three misses in a row per lookup: the two candidate sets' tags; then each tag
 * matching its hash and that entry's lines; then the matching entry's identity encoding. Only
 * reads and prefetches: no entry, tag or LRU clock is changed. Batch callers call it before their
 * items' kvm_hint_get / kvm_hint_put. */
void kvm_hint_prefetch(kvm_rt_t *rt, const kvm_ident_t *ids, size_t stride, size_t n)
{
    struct kvm_hints *hs = rt->hints;
    if (!hs)
        return;
#define HINT_ID(k) ((const kvm_ident_t *)(const void *)((const char *)ids + (k)*stride))
    for (size_t k = 0; k < n; k++) {
        size_t set[2];
        sets_of(HINT_ID(k)->hash, set);
        __builtin_prefetch(&hs->tag[set[0]]);
        __builtin_prefetch(&hs->tag[set[1]]);
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < n; k++) {
            const kvm_ident_t *id = HINT_ID(k);
            if (!id->enc)
                continue;
            size_t set[2];
            sets_of(id->hash, set);
            for (unsigned s = 0; s < 2; s++)
                for (size_t i = set[s]; i < set[s] + STORE_HINT_WAYS; i++) {
                    if (!hs->tag[i].used || hs->tag[i].hash != id->hash)
                        continue;
                    const char *e = (const char *)&hs->e[i];
                    if (pass == 0)
                        for (size_t at = 0; at < sizeof(hs->e[i]); at += 64)
                            __builtin_prefetch(e + at);
                    else if (hs->e[i].ident.enc)
                        __builtin_prefetch(hs->e[i].ident.enc);
                }
        }
#undef HINT_ID
}

/* Empties entry i. */
static void clear(struct kvm_hints *hs, long i)
{
    kvm_ident_free(&hs->e[i].ident);
    hs->tag[i].used = 0;
}

void kvm_hint_drop(kvm_rt_t *rt, const kvm_ident_t *id)
{
    long i = slot(rt, id, false);
    if (i >= 0)
        clear(rt->hints, i);
}

void kvm_hint_put(kvm_rt_t *rt, const kvm_route_t *r)
{
    /* (a materialized cold backing is not kept: a put must see it, from the CAS conflict's
     * answer, to plan the reclaim of the old cold copy before its CAS, kvm_cold_reclaim_gate) */
    if (r->n_replicas > STORE_HINT_REPLICAS || r->cold.kind == KVM_COLD_MATERIALIZED) {
        kvm_hint_drop(rt, &r->ident);
        return;
    }
    long i = slot(rt, &r->ident, true);
    if (i < 0)
        return; /* out of memory: no hint, the next put asks the authority */
    struct kvm_hint *h = &rt->hints->e[i];
    if (!h->ident.enc || !kvm_ident_equal(&h->ident, &r->ident)) {
        kvm_ident_free(&h->ident);
        if (kvm_ident_copy(&h->ident, &r->ident) != 0) {
            clear(rt->hints, i);
            return;
        }
    }
    h->version = r->version;
    h->content_op = r->content_op;
    h->tomb = r->tomb;
    h->length = r->length;
    h->checksum = r->checksum;
    h->n_replicas = r->n_replicas;
    memcpy(h->replicas, r->replicas, r->n_replicas * sizeof(r->replicas[0]));
}

/* Fills the empty (zeroed) *out with the hint of id, its identity borrowed from *id: only the
 * hint's fields are written (the record is not zeroed again), no allocation. */
bool kvm_hint_get_borrowed(kvm_rt_t *rt, const kvm_ident_t *id, kvm_route_t *out)
{
    KVM_ASSERT(out->ident.enc == NULL); /* (empty: see above) */
    long i = slot(rt, id, false);
    if (i < 0)
        return false;
    const struct kvm_hint *h = &rt->hints->e[i];
    out->ident = *id;
    out->version = h->version;
    out->content_op = h->content_op;
    out->tomb = h->tomb;
    out->length = h->length;
    out->checksum = h->checksum;
    out->n_replicas = h->n_replicas;
    memcpy(out->replicas, h->replicas, h->n_replicas * sizeof(h->replicas[0]));
    return true;
}

bool kvm_hint_get(kvm_rt_t *rt, const kvm_ident_t *id, kvm_route_t *out)
{
    kvm_route_init(out);
    if (!kvm_hint_get_borrowed(rt, id, out))
        return false;
    memset(&out->ident, 0, sizeof(out->ident));
    return kvm_ident_copy(&out->ident, id) == 0; /* (out of memory: no hint) */
}

void kvm_hint_fini(kvm_rt_t *rt)
{
    for (size_t i = 0; rt->hints && i < STORE_HINTS; i++)
        kvm_ident_free(&rt->hints->e[i].ident);
    free(rt->hints);
    rt->hints = NULL;
}
