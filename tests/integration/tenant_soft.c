/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_soft — soft tenant isolation on a real cluster (docs/tenancy.md "Soft isolation"):
 * three runtime processes (this binary re-executed) on a real redis-server, and a client-only
 * runtime in this process configured with tenant placement preferences and the fair scheduler.
 *
 *   itest_tenant_soft redis                          the test
 *   itest_tenant_soft --runtime URL DEPLOYMENT ID MEMORY SEGMENT
 *                                                    one runtime process ("READY <id> <epoch>")
 *
 * Runtime A has 1 MiB segments (room for small objects only), B and C 16 MiB segments; each
 * holds 32 MiB, so nothing here is evicted.
 *   1. tenant "soft" prefers A (soft): small objects are placed on A while it has room
 *      (kvmesh_placements_total{result="preferred"} moves by one per object); an object larger
 *      than any segment of A falls back to B or C and moves {result="fallback"} by one;
 *   2. tenant "pinned" is hard-pinned to A: small objects land on A; the large one fails with
 *      KVMESH_EUNAVAILABLE naming the tenant and "hard placement pin" ({pin_unsatisfied} +1),
 *      and nothing of it is readable; with 2 replicas (A cannot hold both) it fails the same way;
 *   3. a tenant without preference moves only {result="default"};
 *   4. fairness on with tight limits (4 items per batch, burst 8, 64 KiB in flight): concurrent
 *      batch puts of two tenants (64-item batches, and single puts each read back at once) all
 *      succeed and read back;
 *      on a fresh client runtime, its scheduler handed out every remote batch (16 per 64-item
 *      put), never exceeded the in-flight byte cap nor the burst cap, and ends with everything
 *      released (nothing queued or in flight).
 *   5. the gate's refusals on a fresh client, made deterministic by holding the whole in-flight
 *      budget with a ticket taken by the test: a waiting put fails at its deadline with
 *      KVMESH_ETIMEDOUT (nothing applied), a second one of its tenant meets the full queue
 *      (KVMESH_EAGAIN); both counted in kvmesh_fair_batches_total; after the release it succeeds.
 * Every wait is bounded; every process started here is killed by pid at the end.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "core/ident.h"
#include "store/fair.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "testsrv.h"

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

static tproc_t procs[3];
static char ids[3][64];
static testsrv_t *srv;
static char url[256];
static const char *deployment = "itsoft";
static const char *fixed_ids[3] = {"a0000000000000000000000000000001",
                                   "b0000000000000000000000000000002",
                                   "c0000000000000000000000000000003"};

static void cleanup_all(void)
{
    for (int i = 0; i < 3; i++)
        tproc_kill(&procs[i], SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
}

static int runtime_main(char **argv)
{
    kvmesh_config_t *c = kvmesh_config_new();
    kvmesh_config_set(c, "metadata_url", argv[2]);
    kvmesh_config_set(c, "deployment", argv[3]);
    kvmesh_config_set(c, "runtime_id", argv[4]);
    kvmesh_config_set(c, "memory_size", argv[5]);
    kvmesh_config_set(c, "segment_size", argv[6]);
    kvmesh_config_set(c, "max_object_size", argv[6]);
    kvmesh_config_set(c, "lease_ttl_ms", "2000");
    kvmesh_config_set(c, "transport", "tcp");
    return tproc_child_run(c, false);
}

static uint16_t admin_port;

/* Sum of kvmesh_placements_total{result="RES"} in the client's /metrics. */
static double placements(const char *res)
{
    tdaemon_http_t r;
    CHECK(tdaemon_http(admin_port, "GET", "/metrics", NULL, &r) == 200);
    char pat[96];
    snprintf(pat, sizeof(pat), "kvmesh_placements_total{result=\"%s\"} ", res);
    const char *p = strstr(r.body, pat);
    double v = p ? strtod(p + strlen(pat), NULL) : -1;
    tdaemon_http_free(&r);
    CHECK(v >= 0);
    return v;
}

/* kvmesh_fair_batches_total{result="RES"} in the client's /metrics. */
static double placements_fair(const char *res)
{
    tdaemon_http_t r;
    CHECK(tdaemon_http(admin_port, "GET", "/metrics", NULL, &r) == 200);
    char pat[96];
    snprintf(pat, sizeof(pat), "kvmesh_fair_batches_total{result=\"%s\"} ", res);
    const char *p = strstr(r.body, pat);
    double v = p ? strtod(p + strlen(pat), NULL) : -1;
    tdaemon_http_free(&r);
    CHECK(v >= 0);
    return v;
}

static kvmesh_t *open_client_with(const char *const *extra);

static kvmesh_t *open_client(void)
{
    return open_client_with(NULL);
}

/* extra: NULL-terminated field/value pairs applied last */
static kvmesh_t *open_client_with(const char *const *extra)
{
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(c);
    char admin[64], place[512];
    admin_port = testsrv_free_port();
    snprintf(admin, sizeof(admin), "127.0.0.1:%u", admin_port);
    snprintf(place, sizeof(place), "soft:%s:soft,pinned:%s:hard", fixed_ids[0], fixed_ids[0]);
    CHECK(kvmesh_config_set(c, "metadata_url", url) == 0);
    CHECK(kvmesh_config_set(c, "deployment", deployment) == 0);
    CHECK(kvmesh_config_set(c, "memory_size", "0") == 0);
    CHECK(kvmesh_config_set(c, "max_object_size", "4MiB") == 0);
    CHECK(kvmesh_config_set(c, "segment_size", "4MiB") == 0);
    CHECK(kvmesh_config_set(c, "replicas", "1") == 0);
    CHECK(kvmesh_config_set(c, "lease_ttl_ms", "2000") == 0);
    CHECK(kvmesh_config_set(c, "transport", "tcp") == 0);
    CHECK(kvmesh_config_set(c, "admin_listen", admin) == 0);
    /* a loaded CI host must not turn a slow turn into a failed put */
    CHECK(kvmesh_config_set(c, "request_timeout_ms", "30000") == 0);
    CHECK(kvmesh_config_set(c, "tenant_placement", place) == 0);
    CHECK(kvmesh_config_set(c, "fairness", "on") == 0);
    /* the fair scenario counts the transport batches the scheduler dispatches: a small single
     * put or get over tcp would carry its bytes in its reservation or lookup exchange instead
     * (inline writes and reads, which the scheduler does not queue: docs/tenancy.md) */
    CHECK(kvmesh_config_set(c, "inline_write_max", "0") == 0);
    CHECK(kvmesh_config_set(c, "inline_read_max", "0") == 0);
    CHECK(kvmesh_config_set(c, "max_remote_batch_items_per_tenant", "4") == 0);
    CHECK(kvmesh_config_set(c, "max_remote_batch_bytes", "64KiB") == 0);
    CHECK(kvmesh_config_set(c, "max_remote_batch_burst_items", "8") == 0);
    CHECK(kvmesh_config_set(c, "max_inflight_bytes_per_batch", "64KiB") == 0);
    CHECK(kvmesh_config_set(c, "tenant_weights", "quiet:4") == 0);
    for (size_t i = 0; extra && extra[i]; i += 2)
        CHECK(kvmesh_config_set(c, extra[i], extra[i + 1]) == 0);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, c);
    if (rc)
        fprintf(stderr, "client open: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    kvmesh_config_free(c);
    return kv;
}

static void wait_members(kvmesh_t *kv, size_t want)
{
    CHECK(tproc_wait_storage(kv, want, 15000) == 0);
}

static const char *owner_of(kvmesh_t *kv, const kvmesh_scope_t *sc, const char *key)
{
    static kvmesh_route_info_t ri;
    CHECK(kvmesh_route_query(kv, sc, key, strlen(key), &ri) == 0);
    CHECK(ri.n_replicas >= 1);
    return ri.replicas[0].owner;
}

static int put(kvmesh_t *kv, const kvmesh_scope_t *sc, const char *key, size_t len, char fill,
               uint32_t replicas)
{
    char *v = malloc(len);
    CHECK(v);
    memset(v, fill, len);
    kvmesh_put_opts_t o = {.replicas = replicas};
    int rc = kvmesh_put(kv, sc, key, strlen(key), v, len, &o);
    free(v);
    return rc;
}

static void get_is(kvmesh_t *kv, const kvmesh_scope_t *sc, const char *key, size_t len, char fill)
{
    char *v = malloc(len);
    CHECK(v);
    size_t n = 0;
    CHECK(kvmesh_get_into(kv, sc, key, strlen(key), v, len, &n) == 0);
    CHECK(n == len);
    for (size_t i = 0; i < len; i++)
        CHECK(v[i] == fill);
    free(v);
}

static void scenario_soft(kvmesh_t *kv)
{
    const kvmesh_scope_t sc = {"soft", NULL};
    double pref0 = placements("preferred"), fb0 = placements("fallback");
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof(k), "s%d", i);
        CHECK(put(kv, &sc, k, 16384, (char)('a' + i), 1) == 0);
        CHECK(strcmp(owner_of(kv, &sc, k), ids[0]) == 0); /* A has room: A */
    }
    CHECK(placements("preferred") == pref0 + 8);
    CHECK(placements("fallback") == fb0);
    /* 2 MiB: no segment of A is that large -> falls back to B or C */
    CHECK(put(kv, &sc, "big", 2u << 20, 'B', 1) == 0);
    const char *o = owner_of(kv, &sc, "big");
    CHECK(strcmp(o, ids[1]) == 0 || strcmp(o, ids[2]) == 0);
    CHECK(placements("fallback") == fb0 + 1);
    get_is(kv, &sc, "big", 2u << 20, 'B');
    /* two replicas: one on A (preferred), the other falls back (A holds one replica) */
    CHECK(put(kv, &sc, "two", 4096, 't', 2) == 0);
    CHECK(placements("preferred") == pref0 + 9);
    CHECK(placements("fallback") == fb0 + 2);
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof(k), "s%d", i);
        get_is(kv, &sc, k, 16384, (char)('a' + i));
    }
    fprintf(stderr, "soft: 8 objects on the preferred owner, 2 fallbacks counted\n");
}

static void scenario_hard(kvmesh_t *kv)
{
    const kvmesh_scope_t sc = {"pinned", NULL};
    double pin0 = placements("pin_unsatisfied"), fb0 = placements("fallback");
    CHECK(put(kv, &sc, "p0", 4096, 'p', 1) == 0);
    CHECK(strcmp(owner_of(kv, &sc, "p0"), ids[0]) == 0);
    int rc = put(kv, &sc, "p-big", 2u << 20, 'X', 1);
    CHECK(rc == KVMESH_EUNAVAILABLE);
    CHECK(strstr(kvmesh_last_error(), "tenant 'pinned': hard placement pin cannot be met") != NULL);
    CHECK(strstr(kvmesh_last_error(), fixed_ids[0]) != NULL);
    CHECK(placements("pin_unsatisfied") == pin0 + 1);
    size_t n = 0;
    char b[8];
    CHECK(kvmesh_get_into(kv, &sc, "p-big", 5, b, sizeof(b), &n) == KVMESH_ENOENT);
    rc = put(kv, &sc, "p-two", 4096, 'q', 2); /* A cannot hold both replicas */
    CHECK(rc == KVMESH_EUNAVAILABLE && strstr(kvmesh_last_error(), "1 of 2 replicas"));
    CHECK(placements("pin_unsatisfied") == pin0 + 2);
    CHECK(placements("fallback") == fb0); /* a hard pin never falls back */
    fprintf(stderr, "hard: pinned owner used; unsatisfiable pin refused (KVMESH_EUNAVAILABLE)\n");
}

static void scenario_default(kvmesh_t *kv)
{
    const kvmesh_scope_t sc = {"plain", NULL};
    double d0 = placements("default"), p0 = placements("preferred"), f0 = placements("fallback");
    for (int i = 0; i < 4; i++) {
        char k[16];
        snprintf(k, sizeof(k), "d%d", i);
        CHECK(put(kv, &sc, k, 1000, 'd', 2) == 0);
    }
    CHECK(placements("default") == d0 + 8);
    CHECK(placements("preferred") == p0 && placements("fallback") == f0);
}

/* ---- fairness under concurrency ---------------------------------------------------------- */

#define NOISY_ROUNDS 6
#define NOISY_BATCH  64
#define QUIET_PUTS   60

struct worker {
    kvmesh_t *kv;
    int id;
    int failures;
    char err[300]; /* the first failure's message */
};

static void worker_fail(struct worker *w, int rc)
{
    if (w->failures++ == 0)
        snprintf(w->err, sizeof(w->err), "%s: %s", kvmesh_strerror(rc), kvmesh_last_error());
}

static void *noisy_main(void *arg)
{
    struct worker *w = arg;
    const kvmesh_scope_t sc = {"noisy", NULL};
    static const size_t len = 8192;
    for (int r = 0; r < NOISY_ROUNDS; r++) {
        char keys[NOISY_BATCH][32];
        kvmesh_batch_item_t items[NOISY_BATCH];
        char *buf = malloc(len * NOISY_BATCH);
        if (!buf) {
            w->failures++;
            return NULL;
        }
        for (int i = 0; i < NOISY_BATCH; i++) {
            snprintf(keys[i], sizeof(keys[i]), "n%d-%d-%d", w->id, r, i);
            memset(buf + (size_t)i * len, (char)(i + r), len);
            items[i] = (kvmesh_batch_item_t){.key = keys[i],
                                             .key_len = strlen(keys[i]),
                                             .buf = buf + (size_t)i * len,
                                             .len = len};
        }
        int rc = kvmesh_batch_put(w->kv, &sc, items, NOISY_BATCH, NULL);
        if (rc != 0)
            worker_fail(w, rc);
        free(buf);
    }
    return NULL;
}

static void *quiet_main(void *arg)
{
    struct worker *w = arg;
    const kvmesh_scope_t sc = {"quiet", NULL};
    for (int i = 0; i < QUIET_PUTS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "q%d", i);
        int rc = put(w->kv, &sc, k, 2048, (char)i, 1);
        if (rc != 0) {
            worker_fail(w, rc);
            continue;
        }
        char v[2048]; /* and read back while the noisy puts run (a gated remote read) */
        size_t n = 0;
        rc = kvmesh_get_into(w->kv, &sc, k, strlen(k), v, sizeof(v), &n);
        if (rc != 0)
            worker_fail(w, rc);
        else if (n != sizeof(v) || v[0] != (char)i || v[sizeof(v) - 1] != (char)i)
            worker_fail(w, KVMESH_ECORRUPT);
    }
    return NULL;
}

kvm_rt_t *kvmesh_runtime_of(kvmesh_t *kv);

static void scenario_fair(kvmesh_t *kv)
{
    pthread_t th[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.kv = kv, .id = i};
        CHECK(pthread_create(&th[i], NULL, i < 3 ? noisy_main : quiet_main, &w[i]) == 0);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
        if (w[i].failures)
            fprintf(stderr, "fair: worker %d: %d failed calls, first: %s\n", i, w[i].failures,
                    w[i].err);
    }
    CHECK(failures == 0);
    const kvmesh_scope_t qs = {"quiet", NULL}, ns = {"noisy", NULL};
    for (int i = 0; i < QUIET_PUTS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "q%d", i);
        get_is(kv, &qs, k, 2048, (char)i);
    }
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < NOISY_BATCH; i += 21) {
            char k[32];
            snprintf(k, sizeof(k), "n%d-%d-%d", t, NOISY_ROUNDS - 1, i);
            get_is(kv, &ns, k, 8192, (char)(i + NOISY_ROUNDS - 1));
        }
    ts_stats_t st;
    kvm_fair_stats(kvmesh_runtime_of(kv), &st);
    fprintf(stderr,
            "fair: %d noisy batches of %d and %d quiet puts, all readable; %" PRIu64
            " remote batches in %" PRIu64 " turns, in-flight cap bound %" PRIu64
            " times, peak %" PRIu64 " bytes / %" PRIu64 " items of one tenant\n",
            3 * NOISY_ROUNDS, NOISY_BATCH, QUIET_PUTS, st.dispatched, st.turns, st.blocked_inflight,
            st.peak_inflight_bytes, st.peak_tenant_inflight_items);
    /* every noisy item was a remote write (16 batches of 4 per put); every quiet put and get a
     * remote batch of its own */
    CHECK(st.dispatched >= (uint64_t)3 * NOISY_ROUNDS * (NOISY_BATCH / 4) + 2 * QUIET_PUTS);
    CHECK(st.completed == st.dispatched && st.inflight_units == 0 && st.queued_units == 0);
    CHECK(st.inflight_bytes == 0 && st.inflight_items == 0);
    CHECK(st.peak_inflight_bytes > 0 && st.peak_inflight_bytes <= 64 * 1024);
    CHECK(st.peak_tenant_inflight_items <= 8);
    /* every batch handed out is counted in /metrics, at once or after a wait */
    CHECK(placements_fair("immediate") + placements_fair("waited") == (double)st.dispatched);
    CHECK(placements_fair("timed_out") == 0 && placements_fair("queue_full") == 0);
}

/* ---- the gate's refusals, made deterministic by holding the in-flight budget ---------------- */

struct blocked_put {
    kvmesh_t *kv;
    int rc;
    char err[400];
};

static void *blocked_put_main(void *arg)
{
    struct blocked_put *b = arg;
    const kvmesh_scope_t sc = {"gated", NULL};
    b->rc = put(b->kv, &sc, "waits", 4096, 'w', 1);
    snprintf(b->err, sizeof(b->err), "%s", kvmesh_last_error());
    return NULL;
}

static ts_stats_t fair_now(kvmesh_t *kv)
{
    ts_stats_t st;
    kvm_fair_stats(kvmesh_runtime_of(kv), &st);
    return st;
}

/* 5. With the runtime's whole in-flight budget held by a ticket taken here (a stand-in for a
 *    batch that does not complete), a put's remote batch cannot be handed out: it waits in its
 *    tenant's queue and fails at its deadline with KVMESH_ETIMEDOUT naming the fair-scheduling
 *    turn (timed_out +1, nothing of it applied); a second put of that tenant while the first
 *    waits finds the queue full (fair_queue_depth 1: KVMESH_EAGAIN, queue_full +1). Once the
 *    ticket is released, the same put succeeds. */
static void scenario_refusals(void)
{
    static const char *const extra[] = {"request_timeout_ms", "4000", "fair_queue_depth", "1",
                                        NULL};
    kvmesh_t *kv = open_client_with(extra);
    wait_members(kv, 3);
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    kvmesh_scope_t holder_scope = {"holder", NULL};
    kvm_ident_t holder;
    CHECK(kvm_ident_init(&holder, holder_scope.tenant, NULL, "h", 1) == 0);
    struct kvm_fair_ticket held;
    CHECK(kvm_fair_acquire(rt, &holder, 1, 64 * 1024, 0, &held) == 0 && held.held);
    double to0 = placements_fair("timed_out"), qf0 = placements_fair("queue_full");
    struct blocked_put b = {.kv = kv};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, blocked_put_main, &b) == 0);
    uint64_t end = env_clock_mono_ms() + 10000;
    while (fair_now(kv).queued_units == 0 && env_clock_mono_ms() < end)
        usleep(2000);
    CHECK(fair_now(kv).queued_units == 1); /* the first put waits in the queue */
    const kvmesh_scope_t sc = {"gated", NULL};
    int rc = put(kv, &sc, "second", 4096, 's', 1);
    CHECK(rc == KVMESH_EAGAIN && strstr(kvmesh_last_error(), "tenant 'gated'") &&
          strstr(kvmesh_last_error(), "queue is full"));
    pthread_join(th, NULL);
    if (b.rc != KVMESH_ETIMEDOUT || !strstr(b.err, "fair-scheduling turn"))
        fprintf(stderr, "blocked put: rc %d: %s\n", b.rc, b.err);
    CHECK(b.rc == KVMESH_ETIMEDOUT && strstr(b.err, "fair-scheduling turn"));
    char v[8];
    size_t n = 0;
    CHECK(kvmesh_get_into(kv, &sc, "waits", 5, v, sizeof(v), &n) == KVMESH_ENOENT);
    CHECK(placements_fair("timed_out") == to0 + 1 && placements_fair("queue_full") == qf0 + 1);
    ts_stats_t st = fair_now(kv);
    CHECK(st.queued_units == 0 && st.inflight_units == 1 && st.inflight_bytes == 64 * 1024);
    kvm_fair_release(rt, &held); /* the only release: completion or terminal failure */
    CHECK(fair_now(kv).inflight_bytes == 0);
    CHECK(put(kv, &sc, "waits", 4096, 'w', 1) == 0);
    get_is(kv, &sc, "waits", 4096, 'w');
    kvm_ident_free(&holder);
    kvmesh_close(kv);
    fprintf(stderr, "refusals: deadline in the queue -> ETIMEDOUT, full queue -> EAGAIN, both "
                    "counted; the put succeeds once the budget is released\n");
}

int main(int argc, char **argv)
{
    if (argc >= 7 && strcmp(argv[1], "--runtime") == 0)
        return runtime_main(argv);
    if (argc < 2 || strcmp(argv[1], "redis") != 0) {
        fprintf(stderr, "usage: %s redis\n", argv[0]);
        return 2;
    }
    static char exe[4096];
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    int rc = testsrv_start_redis(&srv, NULL);
    if (rc)
        fprintf(stderr, "server: %s\n", kvmesh_last_error());
    CHECK(rc == 0);
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    const char *mem[3] = {"32MiB", "32MiB", "32MiB"}, *seg[3] = {"1MiB", "16MiB", "16MiB"};
    for (int i = 0; i < 3; i++) {
        const char *av[] = {exe, "--runtime", url, deployment, fixed_ids[i], mem[i], seg[i]};
        char line[256];
        CHECK(tproc_start(&procs[i], 7, av, "READY", line, sizeof(line), 30000) == 0);
        CHECK(sscanf(line, "READY %63s", ids[i]) == 1);
        CHECK(strcmp(ids[i], fixed_ids[i]) == 0);
    }
    kvmesh_t *kv = open_client();
    wait_members(kv, 3);
    scenario_soft(kv);
    scenario_hard(kv);
    scenario_default(kv);
    kvmesh_close(kv);
    kv = open_client(); /* a fresh scheduler: its peaks are this scenario's */
    scenario_fair(kv);
    kvmesh_close(kv);
    scenario_refusals();
    for (int i = 0; i < 3; i++)
        tproc_close_stdin(&procs[i]);
    for (int i = 0; i < 3; i++)
        tproc_stop(&procs[i], 30000);
    testsrv_stop(srv);
    fprintf(stderr, "tenant_soft: all scenarios passed\n");
    return 0;
}
