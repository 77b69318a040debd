// SPDX-License-Identifier: Apache-2.0
/*
 * tenant_race.c — the quota protocol through the store under a multi-process race: a real
 * redis-server or etcd, two storage runtimes, and 16 writer PROCESSES (each a client runtime
 * running the C API with the tenant's policy) racing puts, overwrites and deletes on one shared
 * key set of one tenant that has a byte and an object limit.
 *
 *   itest_tenant_race redis|etcd [--duration S] [--route-mode M]
 *       the test; S seconds of writing (default 30, the specification's run; ctest passes 12),
 *       M the route mode of every runtime (default embedded_wrh)
 *   itest_tenant_race --storage URL MODE       a storage runtime (until EOF on stdin)
 *   itest_tenant_race --writer URL MODE ID MS  a writer: READY, waits for "GO", writes for MS
 *                                              ms, prints its DONE line, exits at EOF
 *
 * Checks: while the writers run, a sampler in the test process reads the tenant's accounting
 * row from metadata with exact reads (every ~5 ms) and requires committed + pending <= the
 * limit for bytes and for objects. After the writers stop and reconciliation has settled (no
 * operation pending or publishing, bounded wait), every key of the workload is read through a
 * client runtime (the value must be one writer's intact pattern) and the accounting row's
 * committed bytes/objects must equal the sum over the live objects exactly; pending is zero,
 * and the object accounting rows (a test-side range) agree and are all unlocked. A writer call
 * may be refused only by the quota (KVMESH_EQUOTA), the object lock (KVMESH_EAGAIN), a lost
 * version race (KVMESH_ECONFLICT) or, for a delete, absence (KVMESH_ENOENT), or end
 * indeterminate (KVMESH_ETIMEDOUT / KVMESH_EINDETERMINATE: "may have been applied", seen under
 * ASan on etcd; counted, and covered by the exact final accounting); any other result fails
 * the test. Every wait is bounded; every process is ended by pid.
 */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "proc.h"
#include "tenant/tenant.h"
#include "testsrv.h"

#define N_WRITERS 16
#define N_STORAGE 2
#define N_KEYS    48
#define MIN_LEN   16
#define MAX_LEN   8192
#define MAX_BYTES 98304 /* ~24 average objects: both limits are reached */
#define MAX_OBJS  24
#define DEP       "trace"
#define TENANT    "acme"
#define POLICY    "acme:98304:24"
#define SETTLE_MS 45000 /* bound on reconciliation settling after the writers stop */

#define CHECK(c) TPROC_CHECK(c, cleanup_all)

static tproc_t storage[N_STORAGE], writers[N_WRITERS];
static testsrv_t *srv;
static kvmesh_t *reader;

static void cleanup_all(void)
{
    for (int i = 0; i < N_WRITERS; i++)
        tproc_kill(&writers[i], SIGKILL);
    for (int i = 0; i < N_STORAGE; i++)
        tproc_kill(&storage[i], SIGKILL);
    testsrv_stop(srv);
    srv = NULL;
}

static kvmesh_config_t *config(const char *url, const char *mode, const char *memory)
{
    kvmesh_config_t *c = kvmesh_config_new();
    if (!c)
        return NULL;
    int rc = kvmesh_config_set(c, "metadata_url", url);
    rc = rc ? rc : kvmesh_config_set(c, "deployment", DEP);
    rc = rc ? rc : kvmesh_config_set(c, "route_mode", mode);
    rc = rc ? rc : kvmesh_config_set(c, "memory_size", memory);
    rc = rc ? rc : kvmesh_config_set(c, "segment_size", "16MiB");
    rc = rc ? rc : kvmesh_config_set(c, "max_object_size", "1MiB");
    rc = rc ? rc : kvmesh_config_set(c, "replicas", "1");
    rc = rc ? rc : kvmesh_config_set(c, "request_timeout_ms", "20000");
    /* the default 2 s lease: a storage runtime that misses a heartbeat on a loaded machine and
     * drops out of the writers' snapshots for a moment is waited for by their puts
     * (store_member_gap_*), so no longer lease needs to hide it */
    rc = rc ? rc : kvmesh_config_set(c, "tenant_policies", POLICY);
    if (rc) {
        fprintf(stderr, "config: %s\n", kvmesh_last_error());
        kvmesh_config_free(c);
        return NULL;
    }
    return c;
}

static void key_of(char *k, size_t cap, int i)
{
    snprintf(k, cap, "race-%02d", i);
}

/* A value: its first 8 bytes are the seed (big-endian), the rest tproc_fill(seed). */
static void make_value(uint8_t *v, size_t len, uint64_t seed)
{
    for (int i = 0; i < 8; i++)
        v[i] = (uint8_t)(seed >> (56 - 8 * i));
    tproc_fill(v + 8, len - 8, seed);
}

static bool value_ok(const uint8_t *v, size_t len)
{
    static uint8_t want[MAX_LEN];
    if (len < MIN_LEN || len > MAX_LEN)
        return false;
    uint64_t seed = 0;
    for (int i = 0; i < 8; i++)
        seed = seed << 8 | v[i];
    make_value(want, len, seed);
    return memcmp(want, v, len) == 0;
}

/* ---- child processes ------------------------------------------------------------------------ */

static int writer_main(const char *url, const char *mode, int id, uint64_t ms)
{
    kvmesh_t *kv = tproc_child_open(config(url, mode, "0"));
    if (!kv)
        return 1;
    tproc_child_ready(kv, false);
    char line[64];
    if (!fgets(line, sizeof(line), stdin) || strncmp(line, "GO", 2) != 0) {
        kvmesh_close(kv);
        return 1;
    }
    static uint8_t val[MAX_LEN];
    const kvmesh_scope_t sc = {TENANT, NULL};
    uint32_t rnd = 0x9e3779b9u ^ (uint32_t)(id * 2654435761u);
    uint64_t puts = 0, rms = 0, quota = 0, locked = 0, conflict = 0, noent = 0, other = 0,
             indet = 0;
    uint64_t seq = 0;
    char first_other[256] = "";
    uint64_t end = env_clock_mono_ms() + ms;
    while (env_clock_mono_ms() < end) {
        rnd ^= rnd << 13;
        rnd ^= rnd >> 17;
        rnd ^= rnd << 5;
        char k[32];
        key_of(k, sizeof(k), (int)(rnd % N_KEYS));
        bool del = (rnd >> 8) % 10 < 4;
        int rc;
        if (del) {
            rc = kvmesh_remove(kv, &sc, k, strlen(k));
        } else {
            size_t len = MIN_LEN + (rnd >> 12) % (MAX_LEN - MIN_LEN + 1);
            make_value(val, len, (uint64_t)id << 40 | ++seq);
            rc = kvmesh_put(kv, &sc, k, strlen(k), val, len, NULL);
        }
        if (rc == 0)
            del ? rms++ : puts++;
        else if (rc == KVMESH_EQUOTA && !del)
            quota++;
        else if (rc == KVMESH_EAGAIN)
            locked++;
        else if (rc == KVMESH_ECONFLICT)
            conflict++;
        else if (rc == KVMESH_ENOENT && del)
            noent++;
        else if (rc == KVMESH_ETIMEDOUT || rc == KVMESH_EINDETERMINATE)
            indet++; /* may have been applied: the final accounting check covers it */
        else if (other++ == 0)
            snprintf(first_other, sizeof(first_other), "%s %s of %s: %s", kvmesh_errname(rc),
                     del ? "remove" : "put", k, kvmesh_last_error());
    }
    printf("DONE puts %" PRIu64 " removes %" PRIu64 " quota %" PRIu64 " locked %" PRIu64
           " conflict %" PRIu64 " noent %" PRIu64 " other %" PRIu64 " indeterminate %" PRIu64
           " first: %s\n",
           puts, rms, quota, locked, conflict, noent, other, indet,
           first_other[0] ? first_other : "-");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin))
        ;
    kvmesh_close(kv);
    return 0;
}

/* ---- the test ------------------------------------------------------------------------------- */

static bool read_usage(meta_sync_t *s, const char *key, tn_usage_t *u)
{
    meta_result_t *r = NULL;
    int rc = meta_sync_get(s, key, &r);
    bool found = rc == 0 && r->kv.found;
    if (found)
        CHECK(tn_usage_decode(r->kv.value, r->kv.value_len, u) == 0);
    meta_result_free(r);
    return found;
}

struct starter {
    tproc_t *slot;
    const char *argv[6];
    char id[16], ms[32];
    int rc;
};

static void *start_writer(void *arg)
{
    struct starter *s = arg;
    char line[256];
    s->rc = tproc_start(s->slot, 6, s->argv, "READY", line, sizeof(line), 60000);
    return NULL;
}

static int run(const char *backend, uint64_t secs, const char *mode)
{
    int rc = !strcmp(backend, "redis") ? testsrv_start_redis(&srv, NULL) : testsrv_start_etcd(&srv);
    if (rc) {
        fprintf(stderr, "cannot start %s: %s\n", backend, kvmesh_last_error());
        return 1;
    }
    char url[256], exe[512];
    snprintf(url, sizeof(url), "%s", testsrv_url(srv));
    CHECK(tproc_self_exe(exe, sizeof(exe)) == 0);
    char line[512];
    for (int i = 0; i < N_STORAGE; i++) {
        const char *argv[] = {exe, "--storage", url, mode};
        CHECK(tproc_start(&storage[i], 4, argv, "READY", line, sizeof(line), 30000) == 0);
    }
    reader = tproc_child_open(config(url, mode, "0"));
    CHECK(reader);
    CHECK(tproc_wait_storage(reader, N_STORAGE, 20000) == 0);
    /* the writers open at the same time (one starter thread each: a runtime's open takes a
     * while, and the slots are independent) */
    struct starter st[N_WRITERS];
    pthread_t th[N_WRITERS];
    for (int i = 0; i < N_WRITERS; i++) {
        st[i] = (struct starter){.slot = &writers[i], .rc = -1};
        snprintf(st[i].id, sizeof(st[i].id), "%d", i);
        snprintf(st[i].ms, sizeof(st[i].ms), "%" PRIu64, secs * 1000);
        st[i].argv[0] = exe;
        st[i].argv[1] = "--writer";
        st[i].argv[2] = url;
        st[i].argv[3] = mode;
        st[i].argv[4] = st[i].id;
        st[i].argv[5] = st[i].ms;
        CHECK(pthread_create(&th[i], NULL, start_writer, &st[i]) == 0);
    }
    int started = 0;
    for (int i = 0; i < N_WRITERS; i++) {
        pthread_join(th[i], NULL);
        started += st[i].rc == 0;
    }
    CHECK(started == N_WRITERS);

    meta_sync_t *s = NULL;
    CHECK(meta_sync_open(&s, url, NULL) == 0);
    char qkey[KS_KEY_CAP];
    CHECK(ks_quota_key(qkey, sizeof(qkey), DEP, TENANT) == 0);
    for (int i = 0; i < N_WRITERS; i++)
        CHECK(tproc_write(&writers[i], "GO\n") == 0);

    /* the sampler: exact reads of the accounting row until every writer reported DONE */
    uint64_t samples = 0, peak_b = 0, peak_o = 0;
    uint64_t sum[7] = {0};
    bool done[N_WRITERS] = {0};
    int n_done = 0;
    uint64_t t_end = env_clock_mono_ms() + secs * 1000 + 60000;
    while (n_done < N_WRITERS) {
        CHECK(env_clock_mono_ms() < t_end);
        tn_usage_t u;
        if (read_usage(s, qkey, &u)) {
            samples++;
            uint64_t b = u.committed_bytes + u.pending_bytes;
            uint64_t o = u.committed_objects + u.pending_objects;
            if (b > MAX_BYTES || o > MAX_OBJS)
                fprintf(stderr, "over the limit: %" PRIu64 " bytes, %" PRIu64 " objects\n", b, o);
            CHECK(b <= MAX_BYTES && o <= MAX_OBJS);
            peak_b = b > peak_b ? b : peak_b;
            peak_o = o > peak_o ? o : peak_o;
        }
        for (int i = 0; i < N_WRITERS; i++) {
            struct pollfd pf = {writers[i].out_fd, POLLIN, 0};
            if (done[i] || poll(&pf, 1, 0) != 1)
                continue;
            /* the DONE line is written whole (one flush): read it without a short timeout */
            CHECK(tproc_read_line(&writers[i], line, sizeof(line), 5000) == 0);
            unsigned long long v[7];
            int n = sscanf(line,
                           "DONE puts %llu removes %llu quota %llu locked %llu conflict %llu "
                           "noent %llu other %llu",
                           &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]);
            if (n != 7 || v[6] != 0)
                fprintf(stderr, "writer %d: %s\n", i, line);
            CHECK(n == 7 && v[6] == 0);
            for (int j = 0; j < 7; j++)
                sum[j] += v[j];
            done[i] = true;
            n_done++;
        }
        usleep(5000);
    }
    printf("%s/%s: %d writers, %" PRIu64 " s: puts %" PRIu64 ", removes %" PRIu64
           ", refused over quota %" PRIu64 ", locked %" PRIu64 ", conflicts %" PRIu64
           ", removes of nothing %" PRIu64 "; %" PRIu64 " samples, peak %" PRIu64
           "/%d bytes %" PRIu64 "/%d objects\n",
           backend, mode, N_WRITERS, secs, sum[0], sum[1], sum[2], sum[3], sum[4], sum[5], samples,
           peak_b, MAX_BYTES, peak_o, MAX_OBJS);
    CHECK(samples > 0 && sum[0] > 0 && sum[1] > 0);
    CHECK(sum[2] > 0); /* the limits were actually reached */

    /* reconciliation settles what the race left (expired reservations, unfinalized writes) */
    tn_usage_t u = {0};
    uint64_t settle_end = env_clock_mono_ms() + SETTLE_MS;
    for (;;) {
        CHECK(read_usage(s, qkey, &u));
        if (u.n_pending == 0 && u.n_publishing == 0)
            break;
        if (env_clock_mono_ms() >= settle_end)
            fprintf(stderr, "not settled: %" PRIu64 " pending, %" PRIu64 " publishing\n",
                    u.n_pending, u.n_publishing);
        CHECK(env_clock_mono_ms() < settle_end);
        usleep(100000);
    }

    /* every key of the workload, read through a client runtime */
    const kvmesh_scope_t sc = {TENANT, NULL};
    uint64_t live_b = 0, live_o = 0;
    for (int i = 0; i < N_KEYS; i++) {
        char k[32];
        key_of(k, sizeof(k), i);
        void *v = NULL;
        size_t len = 0;
        rc = kvmesh_get(reader, &sc, k, strlen(k), &v, &len);
        if (rc != 0 && rc != KVMESH_ENOENT)
            fprintf(stderr, "get %s: %s\n", k, kvmesh_last_error());
        CHECK(rc == 0 || rc == KVMESH_ENOENT);
        if (rc == 0) {
            CHECK(value_ok(v, len));
            live_b += len;
            live_o++;
        }
        kvmesh_free(v);
    }
    printf("final: committed %" PRIu64 " bytes %" PRIu64 " objects, pending %" PRIu64 "/%" PRIu64
           "; live objects %" PRIu64 " bytes %" PRIu64 " objects\n",
           u.committed_bytes, u.committed_objects, u.pending_bytes, u.pending_objects, live_b,
           live_o);
    CHECK(u.pending_bytes == 0 && u.pending_objects == 0);
    CHECK(u.committed_bytes == live_b && u.committed_objects == live_o);

    /* the object accounting rows agree (a test-side range; the protocol itself never scans) */
    char prefix[KS_KEY_CAP], last[KS_KEY_CAP] = "";
    CHECK(ks_prefix(prefix, sizeof(prefix), DEP, KS_OBJECT, (const ks_part_t[]){{.s = TENANT}},
                    1) == 0);
    uint64_t rows_b = 0, rows_o = 0;
    for (int page = 0; page < 100; page++) {
        meta_result_t *r = NULL;
        CHECK(meta_sync_range(s, prefix, last[0] ? last : NULL, 500, &r) == 0);
        for (size_t i = 0; i < r->n_kvs; i++) {
            tn_objrow_t row;
            CHECK(tn_objrow_decode(r->kvs[i].value, r->kvs[i].value_len, &row) == 0);
            CHECK(row.lock_op[0] == 0);
            if (row.live) {
                rows_b += row.len;
                rows_o++;
            }
            snprintf(last, sizeof(last), "%s", r->kvs[i].key);
        }
        bool more = r->more;
        meta_result_free(r);
        if (!more)
            break;
    }
    CHECK(rows_b == live_b && rows_o == live_o);
    meta_sync_close(s);

    kvmesh_close(reader);
    reader = NULL;
    for (int i = 0; i < N_WRITERS; i++)
        tproc_close_stdin(&writers[i]);
    for (int i = 0; i < N_WRITERS; i++)
        CHECK(tproc_stop(&writers[i], 15000) == 0);
    for (int i = 0; i < N_STORAGE; i++) {
        uint64_t t0 = env_clock_mono_ms();
        CHECK(tproc_stop(&storage[i], 60000) == 0);
        printf("storage %d stopped in %" PRIu64 " ms\n", i, env_clock_mono_ms() - t0);
    }
    testsrv_stop(srv);
    srv = NULL;
    printf("tenant_race %s: ok\n", backend);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--storage"))
        return tproc_child_run(config(argv[2], argv[3], "64MiB"), false);
    if (argc == 6 && !strcmp(argv[1], "--writer"))
        return writer_main(argv[2], argv[3], atoi(argv[4]), strtoull(argv[5], NULL, 10));
    uint64_t secs = 30;
    const char *mode = "embedded_wrh";
    bool ok = argc >= 2 && (!strcmp(argv[1], "redis") || !strcmp(argv[1], "etcd"));
    for (int i = 2; ok && i < argc; i += 2) {
        if (i + 1 >= argc)
            ok = false;
        else if (!strcmp(argv[i], "--duration"))
            ok = (secs = strtoull(argv[i + 1], NULL, 10)) >= 1 && secs <= 600;
        else if (!strcmp(argv[i], "--route-mode"))
            mode = argv[i + 1];
        else
            ok = false;
    }
    if (!ok) {
        fprintf(stderr,
                "usage: %s redis|etcd [--duration SECONDS (1..600, default 30)] [--route-mode "
                "embedded_wrh|metadata_only]\n",
                argv[0]);
        return 2;
    }
    return run(argv[1], secs, mode);
}
