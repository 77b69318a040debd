/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_purge — tombstones (finalized, and pending ones, which carry a purge deadline too) are
 * purged after their retention, so put/overwrite/delete churn keeps the route state bounded;
 * versions stay monotone across a purge. In both route modes: EmbeddedWrh (the authorities'
 * route tables) and MetadataOnly (route keys in metadata, purged from the route-due expiry index,
 * with a per-shard version floor).
 *
 *   itest_store_purge redis|etcd [metadata_only|evict] [--quota] [--duration SECONDS]
 *
 * --quota gives the tenant a hard policy (tenant_policies): its tombstones carry a deadline D
 * that the deleted object rows record (docs/tenancy.md "Purging a quota tenant's tombstones"),
 * so they are purged like any other; then the accounting rows and operation records of the
 * removed keys go too (2b: only the kept keys' rows remain, no operation record), and step 4
 * checks the committed usage equals the kept objects. Without the purge during the churn
 * check_purge_progress fails. --duration sets the churn (default 20 s; docs/reliability.md).
 *
 * In MetadataOnly mode "entries" are the route keys in metadata and "tombstones" the expiry
 * index entries (each tombstone with a deadline has one), counted with a range over each family.
 * Three runtimes in this process (replicas 2, top_k 3, request_timeout_ms 2000,
 * tombstone_retention_ms 2600: above its floor, 2000 + 550) on a real metadata server started by
 * the test:
 *   1. churn for --duration: fresh keys, each put, overwritten and removed, every 10th kept; the
 *      purge keeps up meanwhile: by the end of the churn its own count (tombs_purged) covers the
 *      keys removed in the first third, in every authority's table (check_purge_progress; the
 *      route state beyond the kept keys is sampled once a second and printed);
 *   2. then, within a bounded wait, every tombstone is purged: the tables hold only the kept keys
 *      (<= top_k copies each) and the purge count covers every removed key (MetadataOnly: at
 *      most once; see step 2's note);
 *   3. a key put, removed, purged and put again gets a route version above the purged one's.
 * Every loop is bounded in count and time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "route/route.h"
#include "store/data.h"
#include "tenant/tenant.h"
#include "testsrv.h"
#include "trt.h"

struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);

#define NRT        3
#define VAL        1024
#define MAX_SAMPL  4096 /* one a second: a churn of up to ~68 minutes */
#define TOP_K      3
#define REPUT_KEYS 6 /* 3b (quota): keys put again right after their tombstones' purge */

static testsrv_t *srv;
static kvmesh_t *rts[NRT];
static bool mo_mode;
static meta_sync_t *ms;
static bool quota_mode;
static uint64_t churn_ms = 20000;
static const kvmesh_scope_t sc = {"purge", NULL};

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "CHECK failed %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #c,   \
                    kvmesh_last_error());                                                          \
            testsrv_stop(srv);                                                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Keys of one keyspace family of the deployment in metadata (paged ranges, bounded). */
static uint64_t count_family(enum ks_family f)
{
    char prefix[KS_KEY_CAP], after[KS_KEY_CAP] = "";
    CHECK(ks_prefix(prefix, sizeof(prefix), "purge", f, NULL, 0) == 0);
    uint64_t n = 0;
    for (int page = 0; page < 10000; page++) {
        meta_result_t *r = NULL;
        int rc = meta_sync_range(ms, prefix, after[0] ? after : NULL, 256, &r);
        CHECK(rc == 0);
        n += r->n_kvs;
        bool more = r->more && r->n_kvs > 0;
        if (r->n_kvs)
            snprintf(after, sizeof(after), "%s", r->kvs[r->n_kvs - 1].key);
        meta_result_free(r);
        if (!more)
            break;
    }
    return n;
}

static void counts(uint64_t *entries, uint64_t *tombs, uint64_t *purged)
{
    *entries = *tombs = *purged = 0;
    for (int i = 0; i < NRT; i++) {
        struct kvm_rt_stats st;
        memset(&st, 0, sizeof(st));
        CHECK(kvm_store_stats(kvmesh_runtime_of(rts[i]), &st) == 0);
        *entries += st.route_entries;
        *tombs += st.route_tombs;
        *purged += st.tombs_purged;
    }
    if (mo_mode) {
        *entries = count_family(KS_ROUTE);
        *tombs = count_family(KS_ROUTE_DUE);
    }
}

/* MetadataOnly purge txns that failed without a definite answer, over the runtimes: each may have
 * purged its tombstone without its purger counting it (route_table_purge_unknown). */
static uint64_t purge_unknown(void)
{
    uint64_t n = 0;
    for (int i = 0; i < NRT; i++) {
        struct kvm_rt_stats st;
        memset(&st, 0, sizeof(st));
        CHECK(kvm_store_stats(kvmesh_runtime_of(rts[i]), &st) == 0);
        n += st.tombs_purge_unknown;
    }
    return n;
}

/* Route authority handovers so far, over the runtimes (route.h route_stats_t: state transfers,
 * and acquisitions that began empty). EmbeddedWrh counts one purge per table that held a
 * tombstone; a handover changes which tables those are: a member that was out of a shard's set
 * (its lease lapsed on a loaded host) misses the tombstones written and purged meanwhile, and a
 * member's table replaced by the new primary's install drops the copies the merged state no
 * longer holds, both uncounted. Seen once in ten quota runs beside two busy loops (179 keys in
 * 15 s: the host was that slow): 478 purged for 161 removes x 3 tables, none left; a lapsed
 * runtime lease (lease_ttl_ms 2000) is the likely way there. */
static void read_handovers(kvm_rt_t *rt, void *arg)
{
    route_stats_t st;
    route_get_stats(rt->route, &st); /* (the service's fields: read on its loop) */
    ((uint64_t *)arg)[0] = st.state_transfers;
    ((uint64_t *)arg)[1] = st.state_lost;
}

static void handovers(uint64_t *transfers, uint64_t *lost)
{
    *transfers = *lost = 0;
    if (mo_mode)
        return; /* (MetadataOnly: no authority tables) */
    for (int i = 0; i < NRT; i++) {
        static uint64_t v[2]; /* static: a call not run in time may still run later */
        CHECK(trt_on_loop(rts[i], read_handovers, v, 10000) == 0);
        *transfers += v[0];
        *lost += v[1];
    }
}

/* The purge count a removed key must reach: one purge per table (copies) when no handover
 * happened since its tombstones were written (transfers and lost as at the first remove), else
 * at least one (the merged state a new primary installs keeps every tombstone some source still
 * held, and that table purges it), or none to require once an acquisition began empty. */
static uint64_t t_first = UINT64_MAX, l_first = UINT64_MAX;
static uint64_t per_remove(uint64_t copies, const char *step)
{
    if (mo_mode || t_first == UINT64_MAX)
        return copies;
    uint64_t t, l;
    handovers(&t, &l);
    if (t == t_first && l == l_first)
        return copies;
    printf("%s: route authority handovers since the first remove: %" PRIu64
           " state transfers, %" PRIu64 " begun empty: per removed key %s purge counted\n",
           step, t - t_first, l - l_first, l != l_first ? "no" : "at least one");
    return l != l_first ? 0 : 1;
}

/* An operation that a busy CI host may time out or find unavailable is retried (bounded). */
static int retry(int (*fn)(const char *, const uint8_t *), const char *key, const uint8_t *v)
{
    int rc = 0;
    for (int t = 0; t < 20; t++) {
        rc = fn(key, v);
        if (rc != KVMESH_EUNAVAILABLE && rc != KVMESH_ETIMEDOUT && rc != KVMESH_EINDETERMINATE)
            break;
        usleep(100000);
    }
    return rc;
}

static int do_put(const char *key, const uint8_t *v)
{
    return kvmesh_put(rts[0], &sc, key, strlen(key), v, VAL, NULL);
}

static int do_remove(const char *key, const uint8_t *v)
{
    (void)v;
    int rc = kvmesh_remove(rts[0], &sc, key, strlen(key));
    return rc == KVMESH_ENOENT ? 0 : rc; /* a retried remove that had applied */
}

/*
 * 3b (quota): a key put again as soon as its tombstone was purged, while its deleted object row
 * (row purge and route purge both wait for D + M) may still be there: the reserve admits NONE
 * against the row deleted at V, and the put must publish above V (MetadataOnly: the writer's
 * claim predicts the version from V, not from NONE, or tn_claim refuses it). Each key is put
 * once, without a retry of a refusal.
 */
static void reput_after_purge(void)
{
    static uint8_t w[VAL];
    memset(w, 0x3c, sizeof(w));
    for (int k = 0; k < REPUT_KEYS; k++) {
        char key[16];
        snprintf(key, sizeof(key), "reput-%d", k);
        CHECK(retry(do_put, key, w) == 0);
        CHECK(retry(do_remove, key, w) == 0);
        uint64_t e = 0, t = 1, p = 0, p0 = 0;
        counts(&e, &t, &p0);
        for (uint64_t end = env_clock_mono_ms() + 30000; env_clock_mono_ms() < end;) {
            counts(&e, &t, &p);
            if (t == 0 && p > p0) /* nothing else churns now: this key's tombstone went */
                break;
            usleep(20000);
        }
        CHECK(t == 0 && p > p0);
        int rc = retry(do_put, key, w);
        if (rc)
            fprintf(stderr, "put %s after its purge: %s\n", key, kvmesh_last_error());
        CHECK(rc == 0);
    }
    printf("3b: %d keys put again right after their tombstones' purge\n", REPUT_KEYS);
}

static bool version_gt(const kvmesh_route_info_t *a, const kvmesh_route_info_t *b)
{
    return a->fencing_token != b->fencing_token ? a->fencing_token > b->fencing_token
                                                : a->primary_sequence > b->primary_sequence;
}

/*
 * Eviction churn (mode "evict", EmbeddedWrh): fresh 256 KiB puts until 4x what one replica of
 * each fits in the cluster's memory (192; bounded by EVICT_MS), so owners evict all the time. An
 * eviction that takes an object's last readable replica publishes a tombstone, which is
 * finalized at once (no quota here) and so purged after its retention. The route tables must
 * end holding at most the resident objects plus 2% of the puts (tombstones left PENDING by a
 * failed best-effort finalize), top_k copies each, and no finalized tombstone.
 */
#define EVICT_VAL (256u << 10)
#define EVICT_MS  45000 /* cap: the churn stops at 4x the resident objects */
static void evict_churn(int copies)
{
    static uint8_t v[EVICT_VAL];
    const uint64_t resident = (uint64_t)NRT * (16u << 20) / EVICT_VAL; /* one replica each */
    uint64_t created = 0, max_entries = 0, next_sample = 0;
    uint64_t t0 = env_clock_mono_ms();
    for (uint64_t i = 0; env_clock_since_ms(t0) < EVICT_MS && created < 4 * resident; i++) {
        char key[32];
        snprintf(key, sizeof(key), "evict-%07" PRIu64, i);
        memset(v, (int)(i & 0xff), sizeof(v));
        if (kvmesh_put(rts[0], &sc, key, strlen(key), v, EVICT_VAL, NULL) == 0)
            created++;
        if (env_clock_since_ms(t0) >= next_sample) {
            uint64_t e, tb, p;
            counts(&e, &tb, &p);
            if (e > max_entries)
                max_entries = e;
            next_sample = env_clock_since_ms(t0) + 1000;
        }
    }
    printf("1e: %" PRIu64 " objects of 256 KiB put in %" PRIu64 " ms (the cluster holds <= %" PRIu64
           "); route-table entries peaked at %" PRIu64 "\n",
           created, env_clock_since_ms(t0), resident, max_entries);
    CHECK(created > 3 * resident); /* evicted several times over */
    uint64_t entries = 0, tombs = 0, purged = 0;
    uint64_t bound = (resident + created / 50) * (uint64_t)copies;
    for (uint64_t end = env_clock_mono_ms() + 30000;;) {
        counts(&entries, &tombs, &purged);
        if ((tombs == 0 && entries <= bound) || env_clock_mono_ms() > end)
            break;
        usleep(200000);
    }
    printf("2e: entries %" PRIu64 " (bound %" PRIu64 " = (resident %" PRIu64 " + 2%% of %" PRIu64
           ") x %d copies), finalized tombstones %" PRIu64 ", purged %" PRIu64 "\n",
           entries, bound, resident, created, copies, tombs, purged);
    CHECK(tombs == 0);
    CHECK(purged > 0);
    /* without finalizing, every evicted object's tombstone would stay in every authority */
    CHECK(entries <= bound);
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s redis|etcd [metadata_only|evict] [--quota] [--duration SECONDS]\n",
            argv0);
    exit(2);
}

/* The committed usage of the test's tenant (quota mode), read exactly from metadata. */
static bool read_usage(tn_usage_t *u)
{
    char qkey[KS_KEY_CAP];
    CHECK(ks_quota_key(qkey, sizeof(qkey), "purge", sc.tenant) == 0);
    meta_result_t *r = NULL;
    CHECK(meta_sync_get(ms, qkey, &r) == 0);
    bool found = r->kv.found;
    if (found)
        CHECK(tn_usage_decode(r->kv.value, r->kv.value_len, u) == 0);
    meta_result_free(r);
    return found;
}

/* One sample of the churn: when, the route state beyond the kept keys, the removes so far and
 * the purge count so far (kvm_rt_stats.tombs_purged over the runtimes). */
struct sample {
    uint64_t t_ms, excess, removed, purged;
};
static struct sample samples[MAX_SAMPL];
static size_t n_samples;

static void sample(uint64_t t_ms, uint64_t kept, uint64_t removed, int copies)
{
    uint64_t e, tb, p;
    counts(&e, &tb, &p); /* (MetadataOnly: the index entries are checked at 0 after the churn) */
    uint64_t want = kept * (uint64_t)copies;
    if (n_samples < MAX_SAMPL)
        samples[n_samples++] = (struct sample){t_ms, e > want ? e - want : 0, removed, p};
}

/* What one removed key leaves in the sampled state without a purge: its tombstone in each of the
 * top_k tables; MetadataOnly: its route key. */
static uint64_t keys_per_remove(int copies)
{
    return (uint64_t)copies;
}

/*
 * The purge keeps up with the churn, by its own count (tombs_purged, which the runtimes export):
 * by the end of the churn it has purged every key removed in the churn's first third, from every
 * table that held its tombstone (MetadataOnly: its one route key, up to 1% short: step 2's
 * note). Those tombstones were due 2.6 s after their removes, so at least two thirds of the
 * churn minus that (>= 7.4 s under sanitizers) before its end. Without a purge during the churn
 * the count stays at 0; a purge slower than about two fifths of the remove rate (its backlog
 * growing) does not reach them. Counts are compared, not rates: a churn slowed by a loaded host
 * removes fewer keys in its first third and needs fewer purged, whatever the rate in each third.
 * The route state beyond the kept keys (which follows the rate) is printed, not checked.
 */
static void check_purge_progress(int copies, uint64_t purged_end)
{
    uint64_t third = churn_ms / 3, r1 = 0, mid = 0, last = 0;
    for (size_t i = 0; i < n_samples; i++) {
        const struct sample *x = &samples[i];
        if (x->t_ms <= third)
            r1 = x->removed;
        if (x->t_ms >= third && x->t_ms < 2 * third && x->excess > mid)
            mid = x->excess;
        if (x->t_ms >= 2 * third && x->excess > last)
            last = x->excess;
    }
    uint64_t each = per_remove(keys_per_remove(copies), "1p");
    uint64_t want = r1 * each;
    if (mo_mode)
        want -= want / 100;
    printf("1p: purged by the end of the churn %" PRIu64 ", removes in its first third %" PRIu64
           " x %" PRIu64 " = %" PRIu64 "%s (beyond the kept keys: middle third max %" PRIu64
           ", last third max %" PRIu64 "; %zu samples)\n",
           purged_end, r1, each, want, mo_mode ? " less 1%" : "", mid, last, n_samples);
    CHECK(r1 > 0);
    CHECK(purged_end >= want);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd")))
        usage(argv[0]);
    bool evict_mode = false;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "metadata_only") == 0)
            mo_mode = true;
        else if (strcmp(argv[i], "evict") == 0)
            evict_mode = true;
        else if (strcmp(argv[i], "--quota") == 0)
            quota_mode = true;
        else if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc) {
            char *end = NULL;
            unsigned long long sec = strtoull(argv[++i], &end, 10);
            if (!end || *end || sec < 6 || sec > 4000)
                usage(argv[0]);
            churn_ms = sec * 1000;
        } else
            usage(argv[0]);
    }
    if (evict_mode && (mo_mode || quota_mode))
        usage(argv[0]);
    const int copies = mo_mode ? 1 : TOP_K; /* copies of a route: one key, or top_k tables */
    int rc = testsrv_start_named(&srv, argv[1]);
    if (rc)
        return 1;
    for (int i = 0; i < NRT; i++) {
        kvmesh_config_t *c = kvmesh_config_new();
        CHECK(kvmesh_config_set(c, "metadata_url", testsrv_url(srv)) == 0);
        CHECK(kvmesh_config_set(c, "deployment", "purge") == 0);
        CHECK(kvmesh_config_set(c, "memory_size", "16MiB") == 0);
        CHECK(kvmesh_config_set(c, "segment_size", "16MiB") == 0);
        CHECK(kvmesh_config_set(c, "max_object_size", "1MiB") == 0);
        CHECK(kvmesh_config_set(c, "replicas", "2") == 0);
        CHECK(kvmesh_config_set(c, "top_k", "3") == 0);
        CHECK(kvmesh_config_set(c, "lease_ttl_ms", "2000") == 0);
        CHECK(kvmesh_config_set(c, "reclaim_grace_ms", "200") == 0);
        /* above request_timeout_ms + 550, the longest a route CAS is in flight (the floor) */
        CHECK(kvmesh_config_set(c, "request_timeout_ms", "2000") == 0);
        CHECK(kvmesh_config_set(c, "tombstone_retention_ms", "2600") == 0);
        if (mo_mode)
            CHECK(kvmesh_config_set(c, "route_mode", "metadata_only") == 0);
        if (quota_mode) /* room for every kept object: no refusal in this test */
            CHECK(kvmesh_config_set(c, "tenant_policies", "purge:1GiB:1000000") == 0);
        rc = kvmesh_open(&rts[i], c);
        if (rc)
            fprintf(stderr, "open %d: %s\n", i, kvmesh_last_error());
        CHECK(rc == 0);
        kvmesh_config_free(c);
    }
    CHECK(meta_sync_open(&ms, testsrv_url(srv), NULL) == 0);
    for (uint64_t end = env_clock_mono_ms() + 30000;;) { /* every member sees the others */
        size_t ok = 0;
        for (int i = 0; i < NRT; i++) {
            kvmesh_member_info_t m[8];
            size_t n = 0;
            CHECK(kvmesh_members(rts[i], m, 8, &n) == 0);
            ok += n == NRT;
        }
        if (ok == NRT)
            break;
        CHECK(env_clock_mono_ms() < end);
        usleep(50000);
    }

    if (evict_mode) {
        evict_churn(copies);
        for (int i = NRT - 1; i >= 0; i--)
            kvmesh_close(rts[i]);
        meta_sync_close(ms);
        testsrv_stop(srv);
        printf("store_purge %s evict: ok\n", argv[1]);
        return 0;
    }

    /* the shards' authorities settle where the members' ranking puts them (a state transfer
     * each as the members joined) before the churn, so that a handover counted during it is one
     * a loaded host caused (per_remove); bounded: the churn starts after 30 s regardless */
    uint64_t t_prev = UINT64_MAX, l_prev = 0;
    for (uint64_t end = env_clock_mono_ms() + 30000, still = 0; env_clock_mono_ms() < end;) {
        uint64_t t, l;
        handovers(&t, &l);
        still = t == t_prev && l == l_prev ? still + 1 : 0;
        if (mo_mode || still >= 4)
            break;
        t_prev = t;
        l_prev = l;
        usleep(500000);
    }

    /* 1. churn */
    static uint8_t v[VAL];
    uint64_t created = 0, kept = 0, removed = 0, next_sample = 0;
    uint64_t t0 = env_clock_mono_ms();
    for (uint64_t i = 0; env_clock_since_ms(t0) < churn_ms && i < 100000000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "churn-%08" PRIu64, i);
        memset(v, (int)(i & 0xff), sizeof(v));
        if (retry(do_put, key, v) != 0)
            continue; /* not created (a put that failed for good is not this test's subject) */
        created++;
        v[0] ^= 1;
        (void)retry(do_put, key, v); /* overwrite */
        if (i % 10 == 0) {
            kept++;
            continue;
        }
        if (removed == 0) /* handovers before any tombstone change no purge count */
            handovers(&t_first, &l_first);
        rc = retry(do_remove, key, v);
        if (rc)
            fprintf(stderr, "remove %s: %s\n", key, kvmesh_last_error());
        CHECK(rc == 0);
        removed++;
        if (env_clock_since_ms(t0) >= next_sample) {
            sample(env_clock_since_ms(t0), kept, removed, copies);
            next_sample = env_clock_since_ms(t0) + 1000;
        }
    }
    uint64_t max_excess = 0;
    for (size_t i = 0; i < n_samples; i++)
        max_excess = samples[i].excess > max_excess ? samples[i].excess : max_excess;
    printf("1: %" PRIu64 " keys in %" PRIu64 " ms%s: %" PRIu64 " kept, %" PRIu64
           " removed; route state beyond the kept keys peaked at %" PRIu64 "\n",
           created, churn_ms, quota_mode ? " (quota tenant)" : "", kept, removed, max_excess);
    CHECK(removed > 50); /* the churn ran (a loaded host: far fewer than the ~1,000 here) */
    uint64_t entries = 0, tombs = 0, purged = 0;
    counts(&entries, &tombs, &purged);
    check_purge_progress(copies, purged);

    /* 2. the purge catches up: every tombstone, pending or finalized, goes (exact) */
    for (uint64_t end = env_clock_mono_ms() + 30000;;) {
        counts(&entries, &tombs, &purged);
        if ((tombs == 0 && entries <= kept * (uint64_t)copies) || env_clock_mono_ms() > end)
            break;
        usleep(200000);
    }
    printf("2: entries %" PRIu64 " (kept %" PRIu64 " x copies %d = %" PRIu64
           "), tombstones %" PRIu64 ", purged %" PRIu64 " (removed %" PRIu64 ")\n",
           entries, kept, copies, kept * (uint64_t)copies, tombs, purged, removed);
    CHECK(tombs == 0);
    CHECK(entries <= kept * (uint64_t)copies);
    if (mo_mode) { /* one key each; at most one of the concurrent purgers wins each. The count
                    * may fall short of the removes with none left: a purge txn whose answer was
                    * lost counts as unknown (unit_test_store_route_mo test_purge_reply_lost),
                    * but CI8 counted 43,484 of 43,519 and loaded local runs 37,447 of 37,533 and
                    * 51,036 of 51,046 with 0 unknown (with and without the retention floor), so
                    * the shortfall has another cause still to be found; that none is left is the
                    * exact check above */
        uint64_t unknown = purge_unknown();
        printf("2: purge txns without a definite answer %" PRIu64 ", removes not counted as "
               "purged %" PRIu64 "\n",
               unknown, removed > purged ? removed - purged : 0);
        CHECK(purged <= removed && entries == kept);
    } else
        CHECK(purged >= removed * per_remove((uint64_t)copies, "2"));
    if (quota_mode) { /* 2b. the accounting of removed keys is purged too (bounded retention) */
        uint64_t rows = 0, recs = 0; /* each runtime's reconciler: pages of 64, one at a time */
        for (uint64_t end = env_clock_mono_ms() + 120000;;) {
            rows = count_family(KS_OBJECT);
            recs = count_family(KS_ACCT_OP);
            if ((rows <= kept && recs == 0) || env_clock_mono_ms() > end)
                break;
            usleep(200000);
        }
        printf("2b: object rows %" PRIu64 " (kept %" PRIu64 "), operation records %" PRIu64
               " (%" PRIu64 " removed)\n",
               rows, kept, recs, removed);
        CHECK(rows == kept && recs == 0);
    }

    /* 3. monotone versions across a purge */
    memset(v, 0x5a, sizeof(v));
    CHECK(retry(do_put, "mono", v) == 0);
    kvmesh_route_info_t before, after;
    CHECK(kvmesh_route_query(rts[1], &sc, "mono", 4, &before) == 0);
    CHECK(retry(do_remove, "mono", v) == 0);
    uint64_t p0 = purged;
    for (uint64_t end = env_clock_mono_ms() + 30000;;) {
        counts(&entries, &tombs, &purged);
        if ((tombs == 0 && purged > p0) || env_clock_mono_ms() > end)
            break;
        usleep(200000);
    }
    CHECK(tombs == 0 && purged > p0);
    memset(v, 0xa5, sizeof(v));
    CHECK(retry(do_put, "mono", v) == 0);
    CHECK(kvmesh_route_query(rts[2], &sc, "mono", 4, &after) == 0);
    printf("3: version (%" PRIu64 ", %" PRIu64 ") before the purge, (%" PRIu64 ", %" PRIu64
           ") after\n",
           before.fencing_token, before.primary_sequence, after.fencing_token,
           after.primary_sequence);
    /* above the tombstone's versions too (pending, and finalized unless a quota keeps it
     * pending): no reuse after the purge */
    CHECK(version_gt(&after, &before));
    CHECK(after.fencing_token > before.fencing_token ||
          after.primary_sequence > before.primary_sequence + (quota_mode ? 1 : 2));
    uint8_t out[VAL];
    size_t got = 0;
    CHECK(kvmesh_get_into(rts[1], &sc, "mono", 4, out, sizeof(out), &got) == 0);
    CHECK(got == VAL && memcmp(out, v, VAL) == 0);

    if (mo_mode) /* the floor of the shard holds the purged version */
        CHECK(count_family(KS_ROUTE_FLOOR) > 0);
    if (quota_mode) /* 3b. keys put again right after their tombstone's purge */
        reput_after_purge();
    if (quota_mode) { /* the accounting settles at the kept objects, "mono" and 3b's keys */
        kept += 1 + REPUT_KEYS;
        tn_usage_t u;
        memset(&u, 0, sizeof(u));
        for (uint64_t end = env_clock_mono_ms() + 30000;;) {
            bool found = read_usage(&u);
            if ((found && u.committed_objects == kept && u.pending_objects == 0) ||
                env_clock_mono_ms() > end)
                break;
            usleep(200000);
        }
        printf("4: committed %" PRIu64 " objects / %" PRIu64 " bytes, pending %" PRIu64
               " (expected %" PRIu64 ")\n",
               (uint64_t)u.committed_objects, (uint64_t)u.committed_bytes,
               (uint64_t)u.pending_objects, kept);
        CHECK(u.committed_objects == kept && u.committed_bytes == kept * VAL);
        CHECK(u.pending_objects == 0 && u.pending_bytes == 0);
    }
    for (int i = NRT - 1; i >= 0; i--)
        kvmesh_close(rts[i]);
    meta_sync_close(ms);
    testsrv_stop(srv);
    printf("store_purge %s%s%s: ok\n", argv[1], mo_mode ? " metadata_only" : "",
           quota_mode ? " quota" : "");
    return 0;
}
