/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo.c — `kvmesh demo`: a 3-runtime cluster inside this process (embedded in-memory
 * metadata by default, or Redis/etcd given --metadata), driven by a KV-cache-shaped workload
 * with a live progress line; one runtime is closed (no drain) midway and reopened with the
 * same config (same runtime id, new epoch); at the end every acknowledged object that should
 * exist is read back and checked byte for byte.
 *
 * Workload model (single workload thread, requests issued round-robin through the live
 * runtimes, each of which is a full storage runtime):
 *   - a request picks one of DEMO_PREFIXES shared prompt prefixes; each prefix block
 *     ("demo/p<P>/b<I>") is read when it was stored before (a prefix-cache hit, verified) and
 *     put otherwise;
 *   - it then puts 1..3 unique suffix blocks ("demo/r<R>/b<J>");
 *   - it reads DEMO_RECENT_GETS random blocks of recent requests (verified);
 *   - suffix blocks of the request DEMO_WINDOW requests back are removed (finished sequences
 *     leave the cache), which bounds the live data set.
 * Block sizes are 256 KiB..4 MiB, derived from the key so a key always has the same size; the
 * content is derived from (key, size) so any reader can verify it.
 *
 * Counts: acknowledged = puts that returned success and were not removed afterwards;
 * verified = those read back correct in the final pass; lost = acknowledged - verified.
 * Wrong bytes on any read are counted separately and fail the demo, as does a loss.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define DEMO_RUNTIMES       3
#define DEMO_PREFIXES       12
#define DEMO_PREFIX_MAX     5  /* blocks per prefix: 2..DEMO_PREFIX_MAX */
#define DEMO_SUFFIX_MAX     3  /* new blocks per request: 1..DEMO_SUFFIX_MAX */
#define DEMO_WINDOW         32 /* requests whose suffix blocks stay in the cache */
#define DEMO_RECENT_GETS    2
#define DEMO_PUT_TRIES      5 /* attempts per put (membership changes make some fail) */
#define DEMO_GET_TRIES      5
#define DEMO_RETRY_SLEEP_MS 50
#define DEMO_BLOCK_MAX      (4u << 20)
#define DEMO_REOPEN_TRIES   100 /* x DEMO_RETRY_SLEEP_MS */
#define DEMO_MAX_REQUESTS   100000
/* Memory per runtime and reclaim grace: the live data (about 130 MiB at 2 replicas) plus the
 * removed blocks awaiting reclaim (write rate x grace) must fit on the two runtimes left while
 * one is down; otherwise eviction legitimately drops cached blocks and the demo would report
 * them lost. */
#define DEMO_MEMORY_DEFAULT (512ull << 20)
#define DEMO_RECLAIM_GRACE  "200"

static const uint32_t demo_sizes[] = {256u << 10, 512u << 10, 1u << 20, 2u << 20, 4u << 20};

#define DEMO_TENANTS_MAX 4
#define DEMO_QUOTA_MIN   (16ull << 20) /* four of the largest blocks */

struct demo_obj {
    char key[48];
    uint32_t len;
    uint8_t t;    /* tenant index */
    bool evicted; /* gone by its tenant's own quota recovery (tenant 0 with --quota) */
    bool acked;   /* stored and acknowledged, not removed since */
    bool removed; /* removed by the workload after being acknowledged */
};

struct demo {
    kvmesh_t *rt[DEMO_RUNTIMES];
    kvmesh_config_t *cfg[DEMO_RUNTIMES];
    char id[DEMO_RUNTIMES][KVMESH_ID_HEX_LEN + 1];
    kvmesh_scope_t scope; /* tenant 0 */
    /* --tenants N: request r runs in tenant r % N; with --quota tenant 0 has that byte limit */
    unsigned ntenants;
    char tname[DEMO_TENANTS_MAX][24];
    kvmesh_scope_t scopes[DEMO_TENANTS_MAX];
    uint64_t quota;
    kvmesh_admin_t *adm; /* reads the tenants' usage rows (exact reads) */
    uint64_t t_puts[DEMO_TENANTS_MAX], t_refused[DEMO_TENANTS_MAX], t_evicted[DEMO_TENANTS_MAX];
    uint64_t t_peak[DEMO_TENANTS_MAX], t_samples, t_lost[DEMO_TENANTS_MAX];
    struct demo_obj *objs;
    size_t nobjs, cap_objs;
    size_t prefix_obj[DEMO_TENANTS_MAX][DEMO_PREFIXES][DEMO_PREFIX_MAX]; /* objs index + 1 */
    uint8_t *buf; /* read buffer, DEMO_BLOCK_MAX */
    uint8_t *wbuf;
    uint64_t rng;
    unsigned next_rt;
    /* counters */
    uint64_t puts_ok, puts_failed, put_bytes, gets_ok, get_bytes, hits, wrong, get_errors, removes,
        remove_errors;
    uint64_t reopen_epoch_before, reopen_epoch_after;
    long killed_at, reopened_at;
    int killed;
};

static uint64_t demo_rand(struct demo *d)
{
    d->rng ^= d->rng << 13;
    d->rng ^= d->rng >> 7;
    d->rng ^= d->rng << 17;
    return d->rng;
}

static uint32_t size_of_key(const char *key)
{
    uint64_t h = cli_hash64(key, strlen(key));
    /* Weighted toward small blocks: 256K 35%, 512K 25%, 1M 20%, 2M 12%, 4M 8%. */
    unsigned r = (unsigned)(h % 100);
    unsigned i = r < 35 ? 0 : r < 60 ? 1 : r < 80 ? 2 : r < 92 ? 3 : 4;
    return demo_sizes[i];
}

static uint64_t seed_of(const struct demo_obj *o)
{
    return cli_hash64(o->key, strlen(o->key)) ^ o->len;
}

/* A live runtime, round-robin. */
static kvmesh_t *pick(struct demo *d)
{
    for (int i = 0; i < DEMO_RUNTIMES; i++) {
        unsigned k = (d->next_rt++) % DEMO_RUNTIMES;
        if (d->rt[k])
            return d->rt[k];
    }
    return NULL;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static struct demo_obj *obj_new(struct demo *d, const char *key, unsigned t)
{
    if (d->nobjs >= d->cap_objs)
        return NULL;
    struct demo_obj *o = &d->objs[d->nobjs++];
    memset(o, 0, sizeof(*o));
    o->t = (uint8_t)t;
    snprintf(o->key, sizeof(o->key), "%s", key);
    o->len = size_of_key(key);
    return o;
}

static void do_put(struct demo *d, struct demo_obj *o)
{
    cli_fill(d->wbuf, o->len, seed_of(o));
    for (int t = 0; t < DEMO_PUT_TRIES; t++) {
        kvmesh_t *kv = pick(d);
        int rc = kvmesh_put(kv, &d->scopes[o->t], o->key, strlen(o->key), d->wbuf, o->len, NULL);
        if (rc == 0) {
            o->acked = true;
            o->evicted = false;
            d->puts_ok++;
            d->put_bytes += o->len;
            d->t_puts[o->t]++;
            return;
        }
        if (rc == KVMESH_EQUOTA && d->quota) { /* refused: recovery found nothing to evict */
            d->t_refused[o->t]++;
            return;
        }
        if (t + 1 == DEMO_PUT_TRIES)
            fprintf(stderr, "\ndemo: put %s failed: %s: %s\n", o->key, kvmesh_strerror(rc),
                    kvmesh_last_error());
        sleep_ms(DEMO_RETRY_SLEEP_MS);
    }
    d->puts_failed++;
}

/* Reads and verifies o; returns 0 when the bytes are right, -1 when wrong, 1 when unreadable. */
static int do_get(struct demo *d, struct demo_obj *o, bool quiet)
{
    int last = 0;
    for (int t = 0; t < DEMO_GET_TRIES; t++) {
        kvmesh_t *kv = pick(d);
        size_t got = 0;
        int rc = kvmesh_get_into(kv, &d->scopes[o->t], o->key, strlen(o->key), d->buf,
                                 DEMO_BLOCK_MAX, &got);
        if (rc == KVMESH_ENOENT && d->quota && o->t == 0) {
            /* the tenant over its quota evicted it to admit a newer write (its own object) */
            o->acked = false;
            o->evicted = true;
            d->t_evicted[0]++;
            return 2;
        }
        if (rc == 0) {
            d->gets_ok++;
            d->get_bytes += got;
            size_t off = got == o->len ? cli_check(d->buf, got, seed_of(o)) : 0;
            if (got != o->len || off != got) {
                fprintf(stderr,
                        "\ndemo: WRONG DATA for %s: %zu bytes (want %u), first bad byte "
                        "at %zu\n",
                        o->key, got, o->len, off);
                d->wrong++;
                return -1;
            }
            return 0;
        }
        last = rc;
        sleep_ms(DEMO_RETRY_SLEEP_MS);
    }
    d->get_errors++;
    if (!quiet)
        fprintf(stderr, "\ndemo: get %s failed: %s: %s\n", o->key, kvmesh_strerror(last),
                kvmesh_last_error());
    return 1;
}

static void do_remove(struct demo *d, struct demo_obj *o)
{
    if (!o->acked)
        return;
    for (int t = 0; t < DEMO_PUT_TRIES; t++) {
        int rc = kvmesh_remove(pick(d), &d->scopes[o->t], o->key, strlen(o->key));
        if (rc == 0 || rc == KVMESH_ENOENT) {
            o->acked = false;
            o->removed = true;
            d->removes++;
            return;
        }
        sleep_ms(DEMO_RETRY_SLEEP_MS);
    }
    /* Not removed: it stays acknowledged and must still verify at the end. */
    d->remove_errors++;
}

/* Opens runtime i; a reopen retries while the deployment still holds the previous
 * incarnation (bounded by DEMO_REOPEN_TRIES). */
static int open_runtime(struct demo *d, int i, bool reopen)
{
    int rc = 0;
    for (int t = 0; t < (reopen ? DEMO_REOPEN_TRIES : 1); t++) {
        rc = cli_open_runtime(&d->rt[i], d->cfg[i], "demo");
        if (rc == 0)
            return 0;
        if (rc == KVMESH_ECONFIG || rc == KVMESH_EURL || rc == KVMESH_EINVAL ||
            rc == KVMESH_ENOTSUP || rc == KVMESH_EINCOMPAT)
            break;
        sleep_ms(DEMO_RETRY_SLEEP_MS);
    }
    d->rt[i] = NULL;
    fprintf(stderr, "kvmesh demo: cannot open runtime %d at %s: %s: %s\n", i,
            kvmesh_tools_config_str(d->cfg[i], "metadata_url"), kvmesh_strerror(rc),
            kvmesh_last_error());
    return rc;
}

static void progress(struct demo *d, cli_progress_t *p, long r, long nreq, double t0, bool force)
{
    double el = (double)(kvmesh_tools_now_ns() - (uint64_t)t0) / 1e9;
    int up = 0;
    for (int i = 0; i < DEMO_RUNTIMES; i++)
        up += d->rt[i] != NULL;
    cli_progress(p, force,
                 "[demo] request %ld/%ld  puts %" PRIu64 "  gets %" PRIu64 " (prefix hits %" PRIu64
                 ")  write %.0f MiB/s  read %.0f MiB/s  runtimes up %d/%d%s",
                 r, nreq, d->puts_ok, d->gets_ok, d->hits,
                 el > 0 ? (double)d->put_bytes / 1048576.0 / el : 0.0,
                 el > 0 ? (double)d->get_bytes / 1048576.0 / el : 0.0, up, DEMO_RUNTIMES,
                 up < DEMO_RUNTIMES ? "  (one runtime killed)" : "");
}

int cmd_demo(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--cold") == 0)
            return cmd_demo_cold(argc, argv); /* the cold tier demo (demo_cold.c) */
    const char *metadata = NULL, *deployment = NULL;
    uint64_t requests = 1000, seed = 0, replicas = 2, memory = DEMO_MEMORY_DEFAULT;
    bool no_kill = false, help = false, cold_mode = false; /* --cold: dispatched above */
    uint64_t ntenants = 1, quota = 0;
    struct cli_sets sets = {0};
    const cli_opt_t opts[] = {
        {"metadata", "URL", CLI_STR, &metadata,
         "metadata backend (default: memory://kvmesh-demo, embedded in this process; or "
         "redis://HOST:PORT, etcd://HOST:PORT)"},
        {"deployment", "NAME", CLI_STR, &deployment, "deployment name (default: demo-PID)"},
        {"requests", "N", CLI_U64, &requests, "workload requests (default 1000; 1..100000)"},
        {"replicas", "N", CLI_U64, &replicas,
         "replicas per object (default 2, so the kill loses nothing)"},
        {"memory-size", "SIZE", CLI_SIZE, &memory,
         "memory per runtime (default 512MiB: the live blocks plus the bytes awaiting reclaim "
         "fit on two runtimes, so eviction never has to drop a block while one is down)"},
        {"seed", "N", CLI_U64, &seed, "workload seed (default: from the clock)"},
        {"no-kill", NULL, CLI_FLAG, &no_kill, "do not kill and restart a runtime"},
        {"tenants", "N", CLI_U64, &ntenants,
         "run the workload in N tenants (1..4, default 1): request r in tenant demo-<r mod N>"},
        {"quota", "SIZE", CLI_SIZE, &quota,
         "give the first tenant this byte limit (>= 16MiB; the others a limit they never "
         "reach): its writes over it evict only its own oldest objects (tenant_quota_evict)"},
        {"cold", NULL, CLI_FLAG, &cold_mode,
         "the cold tier demo instead: one runtime, a cold device in a temporary directory, a "
         "working set of 4x DRAM (kvmesh demo --cold --help)"},
        {"set", "FIELD=VALUE", CLI_SET, &sets, "set any configuration field of every runtime"},
        {"help", NULL, CLI_FLAG, &help, "show this help"},
    };
    const size_t nopts = sizeof(opts) / sizeof(opts[0]);
    const char *pos[1];
    size_t npos;
    int rc = cli_parse("demo", opts, nopts, argc, argv, pos, 0, &npos);
    if (rc)
        return rc;
    if (help) {
        cli_usage(stdout, "demo", "[options]",
                  "Starts a 3-runtime kvmesh cluster inside this process, runs a KV-cache-shaped "
                  "workload\n(blocks of 256 KiB..4 MiB, prefix-shared keys, reads of recent "
                  "blocks) with a live\nprogress line, closes one runtime midway without a "
                  "drain and reopens it with the same\nconfig, then reads back every "
                  "acknowledged object. The last line is\n  acknowledged: N, verified: N, "
                  "lost: 0\nand the exit status is non-zero when anything was lost or read "
                  "back wrong.",
                  opts, nopts);
        return 0;
    }
    if (requests < 1 || requests > DEMO_MAX_REQUESTS) {
        fprintf(stderr, "kvmesh demo: --requests %" PRIu64 " is out of range; allowed 1..%d\n",
                requests, DEMO_MAX_REQUESTS);
        return CLI_EXIT_USAGE;
    }
    if (replicas < 1 || replicas > DEMO_RUNTIMES) {
        fprintf(stderr, "kvmesh demo: --replicas %" PRIu64 " is out of range; allowed 1..%d\n",
                replicas, DEMO_RUNTIMES);
        return CLI_EXIT_USAGE;
    }
    if (ntenants < 1 || ntenants > DEMO_TENANTS_MAX) {
        fprintf(stderr, "kvmesh demo: --tenants %" PRIu64 " is out of range; allowed 1..%d\n",
                ntenants, DEMO_TENANTS_MAX);
        return CLI_EXIT_USAGE;
    }
    if (quota && quota < DEMO_QUOTA_MIN) {
        fprintf(stderr,
                "kvmesh demo: --quota must be at least 16MiB (four of the largest 4MiB blocks), "
                "not %" PRIu64 " bytes\n",
                quota);
        return CLI_EXIT_USAGE;
    }
    if (!seed)
        seed = kvmesh_tools_now_ns() | 1;

    struct demo *d = calloc(1, sizeof(*d));
    if (!d)
        return CLI_EXIT_FAIL;
    d->cap_objs = DEMO_PREFIXES * DEMO_PREFIX_MAX + requests * DEMO_SUFFIX_MAX;
    d->objs = calloc(d->cap_objs, sizeof(struct demo_obj));
    d->buf = malloc(DEMO_BLOCK_MAX);
    d->wbuf = malloc(DEMO_BLOCK_MAX);
    d->rng = seed;
    d->ntenants = (unsigned)ntenants;
    d->quota = quota;
    d->killed = -1;
    d->killed_at = d->reopened_at = -1;
    rc = CLI_EXIT_FAIL;
    if (!d->objs || !d->buf || !d->wbuf)
        goto out;

    char url[512], dep[64], v[64];
    snprintf(url, sizeof(url), "%s", metadata ? metadata : "memory://kvmesh-demo");
    snprintf(dep, sizeof(dep), "%s", deployment ? deployment : "");
    if (!deployment)
        snprintf(dep, sizeof(dep), "demo-%ld-%" PRIu64, (long)getpid(), seed % 100000);
    for (int i = 0; i < DEMO_RUNTIMES; i++) {
        kvmesh_config_t *c = d->cfg[i] = kvmesh_config_new();
        if (!c)
            goto out;
        /* A fixed runtime id per runtime: the reopened runtime is the same runtime with a new
         * epoch, exactly as a restarted kvmeshd with the same config file. */
        uint64_t a = demo_rand(d), b = demo_rand(d);
        snprintf(d->id[i], sizeof(d->id[i]), "%016" PRIx64 "%016" PRIx64, a, b);
        snprintf(v, sizeof(v), "%" PRIu64, replicas);
        char mem[32];
        kvmesh_tools_format_size(memory, mem, sizeof(mem));
        if (kvmesh_config_set(c, "metadata_url", url) || kvmesh_config_set(c, "deployment", dep) ||
            kvmesh_config_set(c, "runtime_id", d->id[i]) || kvmesh_config_set(c, "replicas", v) ||
            kvmesh_config_set(c, "memory_size", mem) ||
            kvmesh_config_set(c, "reclaim_grace_ms", DEMO_RECLAIM_GRACE)) {
            fprintf(stderr, "kvmesh demo: %s\n", kvmesh_last_error());
            rc = CLI_EXIT_USAGE;
            goto out;
        }
        if (ntenants > 1 || quota) { /* a policy per tenant; only the first one is tight */
            char pol[256] = "", one[64], qs[32];
            kvmesh_tools_format_size(quota ? quota : (1ull << 40), qs, sizeof(qs));
            for (unsigned t = 0; t < ntenants; t++) {
                snprintf(one, sizeof(one), "%sdemo-%c:%s:10000000", t ? "," : "", 'a' + t,
                         t == 0 ? qs : "1TiB");
                strncat(pol, one, sizeof(pol) - strlen(pol) - 1);
            }
            if (kvmesh_config_set(c, "tenant_policies", pol) ||
                kvmesh_config_set(c, "tenant_quota_evict", "true")) {
                fprintf(stderr, "kvmesh demo: %s\n", kvmesh_last_error());
                rc = CLI_EXIT_USAGE;
                goto out;
            }
        }
        for (size_t s = 0; s < sets.n; s++)
            if ((rc = cli_apply_set(c, sets.items[s], "demo")) != 0)
                goto out;
        if (kvmesh_tools_config_validate(c) != 0) {
            fprintf(stderr, "kvmesh demo: %s\n", kvmesh_last_error());
            rc = CLI_EXIT_USAGE;
            goto out;
        }
    }
    printf("kvmesh demo: %d runtimes, metadata %s, deployment %s, replicas %" PRIu64 ", %" PRIu64
           " requests, seed %" PRIu64 "\n",
           DEMO_RUNTIMES, url, dep, replicas, requests, seed);
    fflush(stdout);
    rc = CLI_EXIT_FAIL;
    for (int i = 0; i < DEMO_RUNTIMES; i++)
        if (open_runtime(d, i, false) != 0)
            goto out;
    d->scope.tenant = kvmesh_tools_config_str(d->cfg[0], "default_tenant");
    d->scope.domain = NULL;
    for (unsigned t = 0; t < DEMO_TENANTS_MAX; t++)
        d->scopes[t] = d->scope;
    if (ntenants > 1 || quota) {
        for (unsigned t = 0; t < ntenants; t++) {
            snprintf(d->tname[t], sizeof(d->tname[t]), "demo-%c", 'a' + t);
            d->scopes[t].tenant = d->tname[t];
        }
        if (kvmesh_admin_open(d->cfg[0], &d->adm) != 0) {
            fprintf(stderr, "kvmesh demo: cannot read the tenants' usage: %s\n",
                    kvmesh_last_error());
            goto out;
        }
    }

    cli_progress_t prog;
    cli_progress_init(&prog, stdout, 2000);
    uint64_t t0 = kvmesh_tools_now_ns();
    long kill_at = no_kill ? -1 : (long)(requests * 2 / 5);
    long reopen_at = no_kill ? -1 : (long)(requests * 3 / 5);
    if (!no_kill && reopen_at <= kill_at)
        reopen_at = kill_at + 1;
    size_t *req_first = calloc(requests + 1, sizeof(size_t)); /* first obj index per request */
    if (!req_first)
        goto out;
    char key[48];
    for (long r = 0; r < (long)requests; r++) {
        if (r == kill_at) {
            int k = 1;
            uint64_t ep = 0;
            char idbuf[KVMESH_ID_HEX_LEN + 1];
            if (kvmesh_self(d->rt[k], idbuf, &ep) == 0)
                d->reopen_epoch_before = ep;
            cli_progress_done(&prog);
            printf("[demo] killing runtime %s (epoch %" PRIu64 ") without a drain\n", d->id[k],
                   d->reopen_epoch_before);
            fflush(stdout);
            kvmesh_close(d->rt[k]);
            d->rt[k] = NULL;
            d->killed = k;
            d->killed_at = r;
        }
        if (r == reopen_at && d->killed >= 0) {
            int k = d->killed;
            cli_progress_done(&prog);
            if (open_runtime(d, k, true) != 0) {
                free(req_first);
                goto out;
            }
            char idbuf[KVMESH_ID_HEX_LEN + 1];
            uint64_t ep = 0;
            if (kvmesh_self(d->rt[k], idbuf, &ep) == 0)
                d->reopen_epoch_after = ep;
            printf("[demo] reopened runtime %s with the same config (epoch %" PRIu64 ")\n",
                   d->id[k], d->reopen_epoch_after);
            fflush(stdout);
            d->reopened_at = r;
            d->killed = -1;
        }
        /* Prefix blocks (a tenant's own prefix cache). */
        unsigned tn = (unsigned)(r % (long)d->ntenants);
        unsigned p = (unsigned)(demo_rand(d) % DEMO_PREFIXES);
        unsigned plen = 2 + p % (DEMO_PREFIX_MAX - 1);
        for (unsigned i = 0; i < plen; i++) {
            snprintf(key, sizeof(key), "demo/p%u/b%u", p, i);
            size_t *slot = &d->prefix_obj[tn][p][i];
            struct demo_obj *o = *slot ? &d->objs[*slot - 1] : NULL;
            int g = o && o->acked ? do_get(d, o, false) : 1;
            if (o && o->acked && g == 0) {
                d->hits++;
            } else if (!o || !o->acked) {
                if (!o && (o = obj_new(d, key, tn)) != NULL)
                    *slot = (size_t)(o - d->objs) + 1;
                if (o)
                    do_put(d, o);
            }
        }
        /* New suffix blocks. */
        req_first[r] = d->nobjs;
        unsigned ns = 1 + (unsigned)(demo_rand(d) % DEMO_SUFFIX_MAX);
        for (unsigned j = 0; j < ns; j++) {
            snprintf(key, sizeof(key), "demo/r%ld/b%u", r, j);
            struct demo_obj *o = obj_new(d, key, tn);
            if (o)
                do_put(d, o);
        }
        req_first[r + 1] = d->nobjs;
        if (d->adm) /* each tenant's usage row, sampled after every request */
            for (unsigned t = 0; t < d->ntenants; t++) {
                kvmesh_admin_tenant_t u;
                bool found = false;
                if (kvmesh_admin_tenant_get(d->adm, d->tname[t], &u, &found) == 0 && found &&
                    u.committed_bytes + u.pending_bytes > d->t_peak[t])
                    d->t_peak[t] = u.committed_bytes + u.pending_bytes;
                d->t_samples += t == 0;
            }
        /* Reads of recent blocks. */
        long lo = r >= DEMO_WINDOW ? r - DEMO_WINDOW + 1 : 0;
        for (int g = 0; g < DEMO_RECENT_GETS; g++) {
            long rr = lo + (long)(demo_rand(d) % (uint64_t)(r - lo + 1));
            size_t first = req_first[rr], end = rr == r ? d->nobjs : req_first[rr + 1];
            if (end > first) {
                struct demo_obj *o = &d->objs[first + demo_rand(d) % (end - first)];
                if (o->acked)
                    do_get(d, o, false);
            }
        }
        /* Retire the request that left the window. */
        if (r >= DEMO_WINDOW) {
            long old = r - DEMO_WINDOW;
            for (size_t i = req_first[old]; i < req_first[old + 1]; i++)
                do_remove(d, &d->objs[i]);
        }
        progress(d, &prog, r + 1, (long)requests, (double)t0, false);
    }
    progress(d, &prog, (long)requests, (long)requests, (double)t0, true);
    cli_progress_done(&prog);
    free(req_first);

    /* Final pass: every acknowledged object must read back intact. */
    uint64_t acked = 0, verified = 0, under = 0;
    for (size_t i = 0; i < d->nobjs; i++) {
        struct demo_obj *o = &d->objs[i];
        if (!o->acked)
            continue;
        acked++;
        {
            kvmesh_route_info_t ri;
            memset(&ri, 0, sizeof(ri));
            if (kvmesh_route_query(pick(d), &d->scopes[o->t], o->key, strlen(o->key), &ri) == 0 &&
                ri.n_replicas < kvmesh_tools_config_uint(d->cfg[0], "replicas"))
                under++;
        }
        int g = do_get(d, o, false);
        if (g == 0) {
            verified++;
        } else if (g == 2) {
            acked--; /* evicted by its own tenant's quota recovery: not acknowledged any more */
        } else {
            d->t_lost[o->t]++;
            /* Say where the route points, to tell a lost copy from a stale route. */
            kvmesh_route_info_t ri;
            memset(&ri, 0, sizeof(ri));
            int e = kvmesh_route_query(pick(d), &d->scopes[o->t], o->key, strlen(o->key), &ri);
            fprintf(stderr, "demo: LOST %s (%u bytes): route %s:", o->key, o->len,
                    e ? kvmesh_strerror(e) : "ok");
            for (uint32_t r = 0; !e && r < ri.n_replicas && r < KVMESH_MAX_REPLICAS; r++) {
                int who = -1;
                for (int k = 0; k < DEMO_RUNTIMES; k++)
                    if (strcmp(ri.replicas[r].owner, d->id[k]) == 0)
                        who = k;
                fprintf(stderr, " replica on runtime %d (%s)", who, ri.replicas[r].owner);
            }
            fprintf(stderr, "\n");
        }
        if (acked % 16 == 0)
            cli_progress(&prog, false, "[demo] verifying %" PRIu64 " objects read back", acked);
    }
    cli_progress_done(&prog);
    double el = (double)(kvmesh_tools_now_ns() - t0) / 1e9;
    uint64_t lost = acked - verified;
    printf("\ndemo summary\n");
    printf("  cluster:      %d runtimes, metadata %s, deployment %s, replicas %" PRIu64 "\n",
           DEMO_RUNTIMES, url, dep, replicas);
    printf("  workload:     %" PRIu64 " requests, %d shared prefixes, blocks 256KiB..4MiB, "
           "window %d requests\n",
           requests, DEMO_PREFIXES, DEMO_WINDOW);
    printf("  puts:         %" PRIu64 " acknowledged (%.1f MiB), %" PRIu64
           " failed after %d tries\n",
           d->puts_ok, (double)d->put_bytes / 1048576.0, d->puts_failed, DEMO_PUT_TRIES);
    printf("  gets:         %" PRIu64 " read and checked (%.1f MiB), prefix hits %" PRIu64
           ", wrong bytes %" PRIu64 ", unreadable after retries %" PRIu64 "\n",
           d->gets_ok, (double)d->get_bytes / 1048576.0, d->hits, d->wrong, d->get_errors);
    printf("  removes:      %" PRIu64 " (finished requests), %" PRIu64 " failed\n", d->removes,
           d->remove_errors);
    if (d->killed_at >= 0)
        printf("  kill/restart: runtime %s closed at request %ld (epoch %" PRIu64
               "), reopened at request %ld (epoch %" PRIu64 ")\n",
               d->id[1], d->killed_at, d->reopen_epoch_before, d->reopened_at,
               d->reopen_epoch_after);
    else
        printf("  kill/restart: none (--no-kill)\n");
    printf("  replication:  %" PRIu64 " of %" PRIu64 " objects below %" PRIu64
           " replicas at the end\n",
           under, acked, replicas);
    bool tenants_ok = true;
    if (d->adm) {
        for (unsigned t = 0; t < d->ntenants; t++) {
            uint64_t live = 0, live_bytes = 0;
            for (size_t i = 0; i < d->nobjs; i++)
                if (d->objs[i].t == t && d->objs[i].acked) {
                    live++;
                    live_bytes += d->objs[i].len;
                }
            kvmesh_admin_tenant_t u;
            bool found = false;
            memset(&u, 0, sizeof(u));
            (void)kvmesh_admin_tenant_get(d->adm, d->tname[t], &u, &found);
            char lim[32], peak[32];
            kvmesh_tools_format_size(u.max_bytes, lim, sizeof(lim));
            kvmesh_tools_format_size(d->t_peak[t], peak, sizeof(peak));
            /* committed accounting = the live objects; pending only for operations a closed
             * runtime left behind (reconciliation resolves them after their deadline) */
            bool exact = found && u.committed_objects == live && u.committed_bytes == live_bytes;
            bool within = d->t_peak[t] <= u.max_bytes;
            printf("  tenant %s: limit %s, %" PRIu64 " puts admitted, %" PRIu64
                   " refused over quota, %" PRIu64
                   " of its own objects evicted by its quota recovery; peak used %s (%s the "
                   "limit, %" PRIu64 " samples); usage row %s its %" PRIu64 " live objects (%.1f "
                   "MiB)\n",
                   d->tname[t], lim, d->t_puts[t], d->t_refused[t], d->t_evicted[t], peak,
                   within ? "within" : "OVER", d->t_samples, exact ? "equals" : "DIFFERS FROM",
                   live, (double)live_bytes / 1048576.0);
            if (!exact || u.ops_pending + u.ops_publishing)
                printf("                usage row: committed %" PRIu64 " objects, %" PRIu64
                       " bytes; pending %" PRIu64 " bytes of %" PRIu64 " reserved and %" PRIu64
                       " publishing operation(s)%s\n",
                       u.committed_objects, u.committed_bytes, u.pending_bytes, u.ops_pending,
                       u.ops_publishing,
                       u.ops_pending + u.ops_publishing
                           ? " (left by the closed runtime; its writes failed, and reconciliation "
                             "resolves them after their deadline)"
                           : "");
            tenants_ok &= exact && within;
            if (t > 0)
                tenants_ok &= d->t_evicted[t] == 0;
        }
        if (d->quota) {
            bool hit = d->t_evicted[0] + d->t_refused[0] > 0;
            uint64_t others = 0;
            for (unsigned t = 1; t < d->ntenants; t++)
                others += d->t_lost[t] + d->t_evicted[t];
            printf("  quota:        tenant %s %s; %s\n", d->tname[0],
                   hit ? "hit its quota and recovered by evicting its own oldest objects"
                       : "never reached its quota (raise --requests or lower --quota)",
                   others ? "OTHER TENANTS LOST OBJECTS"
                   : d->ntenants > 1
                       ? "quota recovery evicted only its objects (the other tenants lost none)"
                       : "(one tenant)");
            tenants_ok &= others == 0;
        }
    }
    printf("  time:         %.1f s\n", el);
    printf("acknowledged: %" PRIu64 ", verified: %" PRIu64 ", lost: %" PRIu64 "\n", acked, verified,
           lost);
    fflush(stdout);
    rc = (lost == 0 && d->wrong == 0 && acked > 0 && tenants_ok) ? 0 : CLI_EXIT_FAIL;
out:
    kvmesh_admin_close(d->adm);
    for (int i = 0; i < DEMO_RUNTIMES; i++) {
        if (d->rt[i])
            kvmesh_close(d->rt[i]);
        kvmesh_config_free(d->cfg[i]);
    }
    free(d->objs);
    free(d->buf);
    free(d->wbuf);
    free(d);
    return rc;
}
