/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_place_primary — placement on the key's shard primary (docs/store.md "Placement order",
 * configuration field place_on_primary), on real runtimes over tcp loopback in this process,
 * embedded in-memory metadata, EmbeddedWrh.
 *
 *   itest_store_place_primary
 *
 * 1. Shares (no runtime): for 1000 seeded sets of 3 random runtime ids, the share of the 64
 *    shards each id is the WRH-first (desired) primary of, i.e. the share of keys a cluster of 3
 *    storage runtimes holds with place_on_primary; printed, and the sets whose every runtime holds
 *    20..47% counted (deterministic: a fixed seed).
 * 2. On (the default): 3 storage runtimes with fixed ids (route top_k 2, so an owner outside a
 *    shard's authority set would cost a get a second round trip) and a client-only runtime C.
 *    Once C's view of every shard names its desired primary, 3000 single 4 KiB puts of distinct
 *    keys from C: each is 1 round trip (a put at the primary) and lands on the key's shard
 *    primary in C's view (kvmesh_route_query); each get is 1 round trip (the primary's lookup
 *    answer carries the bytes); each storage runtime holds 20..47% of the objects. A put from a
 *    storage runtime keeps its replica local (this runtime first: 1 round trip, the CAS).
 * 3. Off (place_on_primary = false, same ids): the old placement (the object's own WRH order):
 *    keys whose owner is not their primary, their puts > 1 round trip, and gets of an owner
 *    outside the authority set 2 round trips.
 * 4. A full primary: 2 storage runtimes, one with a 1 MiB segment; a 2 MiB put of a key whose
 *    primary it is: refused there (no segment large enough), placed on the other runtime.
 * Counts only, no timing; every wait is bounded. In case 2 a put is repeated (bounded, counted
 * and printed) when C's view of its shard moved during it or it was not one exchange (a primary
 * between leases on a loaded machine declines by design), a get when a lookup attempt was
 * repeated (a late authority answer); every get must take its bytes from the lookup.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "core/ident.h"
#include "core/wrh.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "obs/metrics.h"
#include "route/route.h"
#include "store/store.h"
#include "trt.h"
#include "tcheck.h"

#define CHECK(c) TCHECK_FATAL(c)

#define NS       3    /* storage runtimes */
#define SHARDS   64   /* the shards default */
#define TOPK     2    /* route authorities per shard in clusters 2 and 3 */
#define KEYS     3000 /* puts of case 2 */
#define KEYS_OFF 300  /* puts of case 3 */
#define VSIZE    4096
#define SHARE_LO 20 /* percent */
#define SHARE_HI 47
#define WAIT_MS  120000

static const char *const IDS[NS] = {"5a0e51c3b1d24f8e9a7c6b5d4e3f2a10",
                                    "c17d2e4f6a8b0c1d3e5f7a9b1c3d5e7f",
                                    "93b8a6c4d2e0f1a3b5c7d9e1f3a5b7c9"};

static const kvmesh_scope_t SC = {"place", NULL};

/* ---- critical-path counts (as store_critpath reads them) ------------------------------------ */

static int64_t rd(kvmesh_t *kv, const char *fam, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, i1, i2, &v) == 0);
    return v;
}

struct cp {
    int64_t rt[OBS__N_cpstage];
    int64_t handoffs;
};

static struct cp snap(kvmesh_t *kv, unsigned op)
{
    struct cp c;
    memset(&c, 0, sizeof(c));
    for (unsigned s = 0; s < OBS__N_cpstage; s++)
        c.rt[s] = rd(kv, "op_round_trips_total", op, s);
    c.handoffs = rd(kv, "op_handoffs_total", op, OBS_NONE);
    return c;
}

static int64_t rts(struct cp a, struct cp b)
{
    int64_t t = 0;
    for (unsigned s = 0; s < OBS__N_cpstage; s++)
        t += b.rt[s] - a.rt[s];
    return t;
}

/* ---- C's route view, read on its loop ------------------------------------------------------- */

static kvm_ident_t hint_ident;
static kvm_runtime_t hint_primary;
static int hint_rc;

static void read_hint(kvm_rt_t *rt, void *arg)
{
    (void)arg;
    hint_rc = route_primary_hint(rt->route, &hint_ident, &hint_primary);
}

/* The primary of key's shard in R's route view: its index in ids[0..n), -1 when the view is not
 * valid or names another runtime. */
static int primary_of(kvmesh_t *R, const char *key, kvm_id128_t *ids, int n)
{
    CHECK(kvm_ident_init(&hint_ident, SC.tenant, SC.domain, key, strlen(key)) == 0);
    CHECK(trt_on_loop(R, read_hint, NULL, 10000) == 0);
    kvm_ident_free(&hint_ident);
    if (hint_rc != 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (kvm_id128_equal(&hint_primary.id, &ids[i]))
            return i;
    return -1;
}

static int shard_of(const char *key)
{
    kvm_ident_t id;
    CHECK(kvm_ident_init(&id, SC.tenant, SC.domain, key, strlen(key)) == 0);
    int s = (int)kvm_ident_shard(&id, SHARDS);
    kvm_ident_free(&id);
    return s;
}

/* The WRH-first route-capable runtime of each shard (the desired primary, docs/protocol.md 1). */
static void desired(const kvm_id128_t *ids, int n, int *prim)
{
    wrh_candidate_t c[NS];
    for (int i = 0; i < n; i++) {
        c[i].id_hash = wrh_id_hash(&ids[i]);
        c[i].weight = 1.0;
    }
    for (uint32_t s = 0; s < SHARDS; s++)
        prim[s] = (int)wrh_first(c, (size_t)n, wrh_shard_key(s));
}

/* The owner of key's only replica: its index in ids[0..n), -1 otherwise. */
static int owner_of(kvmesh_t *R, const char *key, const char (*hex)[KVM_ID128_HEX_LEN + 1], int n)
{
    kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(R, &SC, key, strlen(key), &ri) == 0);
    CHECK(ri.n_replicas == 1);
    for (int i = 0; i < n; i++)
        if (strcmp(ri.replicas[0].owner, hex[i]) == 0)
            return i;
    return -1;
}

static kvmesh_t *open_rt(const char *url, const char *id, uint64_t mem, uint64_t seg, bool prim)
{
    char m[32], sg[32];
    snprintf(m, sizeof(m), "%" PRIu64, mem);
    snprintf(sg, sizeof(sg), "%" PRIu64, seg);
    const char *const pairs[][2] = {{"metadata_url", url},
                                    {"transport", "tcp"},
                                    {"memory_size", m},
                                    {"segment_size", sg},
                                    {"max_object_size", sg},
                                    {"replicas", "1"},
                                    {"top_k", "2"},
                                    {"place_on_primary", prim ? "true" : "false"},
                                    {id ? "runtime_id" : NULL, id}, /* (no id: the list ends) */
                                    {NULL, NULL}};
    kvmesh_t *kv = trt_open(pairs, NULL);
    CHECK(kv);
    return kv;
}

/* One key per shard (key_of[s]), found by name. */
static char key_of[SHARDS][32];

static void shard_keys(void)
{
    int found = 0;
    bool have[SHARDS] = {false};
    for (int k = 0; found < SHARDS; k++) {
        CHECK(k < 100000);
        char key[32];
        snprintf(key, sizeof(key), "w-%d", k);
        int s = shard_of(key);
        if (!have[s]) {
            have[s] = true;
            snprintf(key_of[s], sizeof(key_of[s]), "%s", key);
            found++;
        }
    }
}

/* Until C can put and get a key of every shard and its view of every shard names the shard's
 * desired primary (the runtimes joined one after another: shards move to their WRH-first
 * runtime after a join). Bounded. */
static void warm(kvmesh_t *C, kvm_id128_t *ids, int n)
{
    int want[SHARDS];
    desired(ids, n, want);
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    static uint8_t v[64], out[64];
    for (int pass = 0;; pass++) {
        CHECK(env_clock_mono_ms() < end);
        int ok = 0;
        for (int s = 0; s < SHARDS; s++) {
            size_t got = 0;
            if (kvmesh_put(C, &SC, key_of[s], strlen(key_of[s]), v, sizeof(v), NULL) != 0 ||
                kvmesh_get_into(C, &SC, key_of[s], strlen(key_of[s]), out, sizeof(out), &got) != 0)
                continue;
            ok += primary_of(C, key_of[s], ids, n) == want[s];
        }
        if (ok == SHARDS) {
            printf("warm: every shard's view names its desired primary after %d passes\n",
                   pass + 1);
            return;
        }
        usleep(100 * 1000);
    }
}

/* ---- 1. shares ----------------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void shares(void)
{
    int in = 0, lo = 100, hi = 0;
    const int sets = 1000;
    for (int t = 0; t < sets; t++) {
        kvm_id128_t ids[NS];
        for (int i = 0; i < NS; i++) {
            uint64_t a = next_rand(), b = next_rand();
            memcpy(&ids[i], &a, 8);
            memcpy((uint8_t *)&ids[i] + 8, &b, 8);
        }
        int prim[SHARDS], cnt[NS] = {0};
        desired(ids, NS, prim);
        for (int s = 0; s < SHARDS; s++)
            cnt[prim[s]]++;
        bool ok = true;
        for (int i = 0; i < NS; i++) {
            int pct = cnt[i] * 100 / SHARDS;
            lo = pct < lo ? pct : lo;
            hi = pct > hi ? pct : hi;
            ok = ok && cnt[i] * 100 >= SHARE_LO * SHARDS && cnt[i] * 100 <= SHARE_HI * SHARDS;
        }
        in += ok;
    }
    printf("shares: %d of %d sets of %d random ids: every runtime is the primary of %d..%d%% of "
           "%d shards (extremes over all sets: %d%%..%d%%)\n",
           in, sets, NS, SHARE_LO, SHARE_HI, SHARDS, lo, hi);
    CHECK(in * 10 >= sets * 9); /* (deterministic: the seed is fixed) */
}

/* ---- 2. and 3. ---------------------------------------------------------------------------- */

struct cluster {
    kvmesh_t *S[NS], *C;
    kvm_id128_t ids[NS];
    char hex[NS][KVM_ID128_HEX_LEN + 1];
};

static void cluster_open(struct cluster *k, const char *tag, bool prim)
{
    char url[64];
    snprintf(url, sizeof(url), "memory://place-%s-%ld", tag, (long)getpid());
    for (int i = 0; i < NS; i++) {
        k->S[i] = open_rt(url, IDS[i], 64ull << 20, 64ull << 20, prim);
        CHECK(kvm_id128_parse(IDS[i], &k->ids[i]) == 0);
        kvm_id128_fmt(&k->ids[i], k->hex[i]);
    }
    k->C = open_rt(url, NULL, 0, 64ull << 20, prim);
    warm(k->C, k->ids, NS);
}

static void cluster_close(struct cluster *k)
{
    kvmesh_close(k->C);
    for (int i = 0; i < NS; i++)
        kvmesh_close(k->S[i]);
}

/* Puts keys prefix-0..n-1 from C and reads each back: per key, C's view of its shard's primary
 * before and after the put, the put's and the get's round trips, and the owner. A put is
 * repeated (an overwrite, bounded) when it failed or C's view of the key's shard moved during
 * it, and, with `one`, when it was not one exchange: on a loaded machine a shard's primary can
 * be between leases for a moment (it then declines and the put takes the reservation path by
 * design). Likewise with `one` a get is repeated while a lookup attempt was repeated (a late
 * authority answer), but every get must take its bytes from the lookup (no payload exchange). */
struct keyres {
    int prim, owner;
    int64_t put_rts, put_handoffs, get_rts, get_payload;
};

static void put_keys(struct cluster *k, const char *prefix, int n, struct keyres *res, bool one)
{
    static uint8_t v[VSIZE], out[VSIZE];
    uint64_t end = env_clock_mono_ms() + 4 * WAIT_MS;
    int moved = 0, put_again = 0, get_again = 0;
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        memset(v, 1 + i % 250, sizeof(v));
        for (int attempt = 0;; attempt++) {
            CHECK(env_clock_mono_ms() < end && attempt < 20);
            int p0 = primary_of(k->C, key, k->ids, NS);
            struct cp a = snap(k->C, OBS_OP_PUT);
            int rc = kvmesh_put(k->C, &SC, key, strlen(key), v, sizeof(v), NULL);
            struct cp b = snap(k->C, OBS_OP_PUT);
            int p1 = primary_of(k->C, key, k->ids, NS);
            res[i].prim = p0;
            res[i].put_rts = rts(a, b);
            res[i].put_handoffs = b.handoffs - a.handoffs;
            if (rc != 0 || p0 < 0 || p0 != p1) {
                moved++;
                usleep(10000);
                continue;
            }
            if (one && (res[i].put_rts != 1 || res[i].put_handoffs != 1)) {
                fprintf(stderr,
                        "key %s: primary S%d, put %" PRId64 " round trips (%" PRId64
                        " hand-offs): again\n",
                        key, p0, res[i].put_rts, res[i].put_handoffs);
                put_again++;
                usleep(10000);
                continue;
            }
            break;
        }
        for (int attempt = 0;; attempt++) {
            CHECK(env_clock_mono_ms() < end && attempt < 20);
            size_t got = 0;
            struct cp a = snap(k->C, OBS_OP_GET);
            CHECK(kvmesh_get_into(k->C, &SC, key, strlen(key), out, sizeof(out), &got) == 0);
            struct cp b = snap(k->C, OBS_OP_GET);
            CHECK(got == VSIZE && memcmp(out, v, VSIZE) == 0);
            res[i].get_rts = rts(a, b);
            res[i].get_payload = b.rt[OBS_CPSTAGE_PAYLOAD] - a.rt[OBS_CPSTAGE_PAYLOAD];
            if (one) {
                CHECK(res[i].get_payload == 0 && res[i].get_rts >= 1);
                if (res[i].get_rts != 1) {
                    fprintf(stderr,
                            "key %s: get %" PRId64 " round trips (lookup repeated): again\n", key,
                            res[i].get_rts);
                    get_again++;
                    continue;
                }
            }
            break;
        }
        res[i].owner = owner_of(k->C, key, k->hex, NS);
        CHECK(res[i].owner >= 0);
    }
    printf("%s: %d keys put and read (puts repeated: %d the view moved or the put failed, %d not "
           "one exchange; gets repeated: %d)\n",
           prefix, n, moved, put_again, get_again);
}

static void case_on(void)
{
    struct cluster k;
    cluster_open(&k, "on", true);
    static struct keyres res[KEYS];
    put_keys(&k, "on", KEYS, res, true);
    int held[NS] = {0}, put1 = 0, get1 = 0;
    for (int i = 0; i < KEYS; i++) {
        if (res[i].owner != res[i].prim)
            fprintf(stderr, "key on-%d: primary S%d owner S%d\n", i, res[i].prim, res[i].owner);
        CHECK(res[i].owner == res[i].prim); /* on the key's shard primary in C's view */
        CHECK(res[i].put_rts == 1 && res[i].put_handoffs == 1); /* a put at the primary */
        CHECK(res[i].get_rts == 1 && res[i].get_payload == 0);  /* the bytes with the lookup */
        held[res[i].owner]++;
        put1++;
        get1++;
    }
    printf("on: %d of %d puts 1 round trip, %d of %d gets 1 round trip; objects held S0 %d "
           "(%d%%) S1 %d (%d%%) S2 %d (%d%%)\n",
           put1, KEYS, get1, KEYS, held[0], held[0] * 100 / KEYS, held[1], held[1] * 100 / KEYS,
           held[2], held[2] * 100 / KEYS);
    for (int i = 0; i < NS; i++)
        CHECK(held[i] * 100 >= SHARE_LO * KEYS && held[i] * 100 <= SHARE_HI * KEYS);

    /* A storage runtime's own put stays local (this runtime before the primary): 1 round trip
     * (its CAS at a remote primary, 0 at its own), the replica on itself. */
    static uint8_t v[VSIZE];
    memset(v, 0x77, sizeof(v));
    int remote_prim = 0;
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    for (int i = 0; remote_prim < 8; i++) {
        CHECK(env_clock_mono_ms() < end);
        char key[32];
        snprintf(key, sizeof(key), "self-%d", i);
        CHECK(kvmesh_put(k.S[0], &SC, key, strlen(key), v, sizeof(v), NULL) == 0);
        int p0 = primary_of(k.S[0], key, k.ids, NS);
        struct cp a = snap(k.S[0], OBS_OP_PUT);
        CHECK(kvmesh_put(k.S[0], &SC, key, strlen(key), v, sizeof(v), NULL) == 0);
        struct cp b = snap(k.S[0], OBS_OP_PUT);
        int p1 = primary_of(k.S[0], key, k.ids, NS);
        CHECK(owner_of(k.S[0], key, k.hex, NS) == 0);
        if (p0 <= 0 || p0 != p1)
            continue; /* (S0 is the primary, or the view moved) */
        printf("put from S0 (primary S%d): %" PRId64 " round trips (route_cas %" PRId64
               ", reserve %" PRId64 "), owner S0\n",
               p0, rts(a, b), b.rt[OBS_CPSTAGE_ROUTE_CAS] - a.rt[OBS_CPSTAGE_ROUTE_CAS],
               b.rt[OBS_CPSTAGE_RESERVE] - a.rt[OBS_CPSTAGE_RESERVE]);
        CHECK(b.rt[OBS_CPSTAGE_RESERVE] == a.rt[OBS_CPSTAGE_RESERVE]);
        CHECK(b.rt[OBS_CPSTAGE_PAYLOAD] == a.rt[OBS_CPSTAGE_PAYLOAD]);
        remote_prim++;
    }
    cluster_close(&k);
}

static void case_off(void)
{
    struct cluster k;
    cluster_open(&k, "off", false);
    static struct keyres res[KEYS_OFF];
    put_keys(&k, "off", KEYS_OFF, res, false);
    int elsewhere = 0, put1 = 0, get2 = 0;
    int64_t put_sum = 0, get_sum = 0;
    for (int i = 0; i < KEYS_OFF; i++) {
        put1 += res[i].put_rts == 1;
        get2 += res[i].get_payload > 0;
        put_sum += res[i].put_rts;
        get_sum += res[i].get_rts;
        if (res[i].owner != res[i].prim) {
            elsewhere++;
            CHECK(res[i].put_rts >= 2); /* the inline reservation, then C's CAS */
        }
    }
    printf("off: %d of %d keys owned by another runtime than their primary; %d puts 1 round "
           "trip, %d gets with a payload exchange (owner outside the authority set); round trips "
           "%" PRId64 " for the puts, %" PRId64 " for the gets\n",
           elsewhere, KEYS_OFF, put1, get2, put_sum, get_sum);
    CHECK(elsewhere > KEYS_OFF / 4); /* WRH of the object: about 2/3 of the keys */
    CHECK(get2 > 0);                 /* top_k 2 of 3: about 1/3 of the keys */
    cluster_close(&k);
}

/* ---- 4. a full primary -------------------------------------------------------------------- */

static void case_full(void)
{
    char url[64];
    snprintf(url, sizeof(url), "memory://place-full-%ld", (long)getpid());
    kvmesh_t *S[2];
    S[0] = open_rt(url, IDS[0], 1ull << 20, 1ull << 20, true); /* one 1 MiB segment */
    S[1] = open_rt(url, IDS[1], 8ull << 20, 4ull << 20, true);
    kvmesh_t *C = open_rt(url, NULL, 0, 4ull << 20, true);
    kvm_id128_t ids[2];
    char hex[2][KVM_ID128_HEX_LEN + 1];
    for (int i = 0; i < 2; i++) {
        CHECK(kvm_id128_parse(IDS[i], &ids[i]) == 0);
        kvm_id128_fmt(&ids[i], hex[i]);
    }
    warm(C, ids, 2);
    static uint8_t big[2u << 20], out[2u << 20];
    int done = 0;
    uint64_t end = env_clock_mono_ms() + WAIT_MS;
    for (int i = 0; done < 4; i++) {
        CHECK(env_clock_mono_ms() < end);
        char key[32];
        snprintf(key, sizeof(key), "full-%d", i);
        if (primary_of(C, key, ids, 2) != 0)
            continue; /* a key whose primary is S0 */
        memset(big, 0x30 + i % 50, sizeof(big));
        CHECK(kvmesh_put(C, &SC, key, strlen(key), big, sizeof(big), NULL) == 0);
        CHECK(owner_of(C, key, hex, 2) == 1); /* refused by S0 (no segment that large) */
        size_t got = 0;
        CHECK(kvmesh_get_into(C, &SC, key, strlen(key), out, sizeof(out), &got) == 0);
        CHECK(got == sizeof(big) && memcmp(out, big, got) == 0);
        /* a value that fits still goes to the primary */
        snprintf(key, sizeof(key), "full-%d-small", i);
        if (primary_of(C, key, ids, 2) == 0) {
            CHECK(kvmesh_put(C, &SC, key, strlen(key), big, VSIZE, NULL) == 0);
            CHECK(owner_of(C, key, hex, 2) == 0);
        }
        done++;
    }
    printf("full: %d large puts whose primary S0 has no room placed on S1\n", done);
    kvmesh_close(C);
    kvmesh_close(S[1]);
    kvmesh_close(S[0]);
}

int main(void)
{
    shard_keys();
    shares();
    case_on();
    case_off();
    case_full();
    printf("ok\n");
    return 0;
}
