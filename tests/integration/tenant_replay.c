// SPDX-License-Identifier: Apache-2.0
/*
 * tenant_replay.c — the reconciler replays a put whose writer died between its quota claim and
 * its route CAS (docs/tenancy.md "Replaying a put"), with real processes on a real Redis:
 *
 *   1. this process opens runtime S (storage, the tenant's policy, 1 s reservation checks);
 *   2. a writer process (this binary, "writer" mode: a client-only runtime, so the replica is on
 *      S) arms the test-only kill (kvm_quota_test_kill_after_claim) and puts 64 KiB of 'w': it is
 *      killed by SIGKILL right after its claim (MetadataOnly: its own claim; EmbeddedWrh: S as
 *      the shard primary claims, then fails the CAS by its test fault, and the writer dies on
 *      the answer before settling). The operation is PUBLISHING, the object absent;
 *   3. S's reconciliation replays it: the object becomes readable with the writer's bytes, the
 *      operation FINALIZED, the accounting exact (committed 65536 bytes / 1 object, nothing
 *      pending or publishing), the object row live and unlocked; S's owner kept the slot held
 *      meanwhile (before step 2 of the design it freed it once the route did not reference it).
 *
 * argv: redis|etcd [metadata_only|embedded_wrh]. Fails (exit 1) with the failed checks.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "obs/metrics.h"
#include "store/quota.h"
#include "store/store.h"
#include "tenant/tenant.h"
#include "tcheck.h"
#include "testsrv.h"

static int failures;

#define CHECK(cond, ...) TCHECK_SOFT(cond, failures, __VA_ARGS__)

#define DEP    "treplay"
#define TENANT "rp"
#define KEY    "victim"
#define LEN    65536
#define POLICY TENANT ":1MiB:8"

static kvmesh_t *open_rt(const char *url, const char *mode, const char *memory)
{
    kvmesh_config_t *cfg = kvmesh_config_new();
    kvmesh_config_set(cfg, "metadata_url", url);
    kvmesh_config_set(cfg, "deployment", DEP);
    kvmesh_config_set(cfg, "memory_size", memory);
    kvmesh_config_set(cfg, "segment_size", "16MiB");
    kvmesh_config_set(cfg, "max_object_size", "1MiB");
    kvmesh_config_set(cfg, "route_mode", mode);
    kvmesh_config_set(cfg, "request_timeout_ms", "2000");
    kvmesh_config_set(cfg, "tenant_policies", POLICY);
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, cfg);
    kvmesh_config_free(cfg);
    CHECK(rc == 0, "open (%s, memory %s): %d", mode, memory, rc);
    return rc == 0 ? kv : NULL;
}

/* The writer process: puts KEY and is killed inside the put; returning means it was not. */
static int writer_main(const char *url, const char *mode)
{
    kvmesh_t *kv = open_rt(url, mode, "0");
    if (!kv)
        return 3;
    kvm_quota_test_kill_after_claim(kvmesh_runtime_of(kv), true);
    static char v[LEN];
    memset(v, 'w', sizeof(v));
    kvmesh_scope_t sc = {TENANT, NULL};
    int rc = kvmesh_put(kv, &sc, KEY, strlen(KEY), v, sizeof(v), NULL);
    fprintf(stderr, "writer: the put returned %d (%s) instead of the kill\n", rc,
            kvmesh_last_error());
    kvmesh_close(kv);
    return 2;
}

static bool read_rec(meta_sync_t *s, const char *key, uint8_t *buf, size_t cap, size_t *len)
{
    meta_result_t *r = NULL;
    int rc = meta_sync_get(s, key, &r);
    bool found = rc == 0 && r && r->kv.found && r->kv.value_len <= cap;
    if (found) {
        memcpy(buf, r->kv.value, r->kv.value_len);
        *len = r->kv.value_len;
    }
    meta_result_free(r);
    return found;
}

static bool readable(kvmesh_t *kv)
{
    kvmesh_scope_t sc = {TENANT, NULL};
    void *out = NULL;
    size_t n = 0;
    if (kvmesh_get(kv, &sc, KEY, strlen(KEY), &out, &n) != 0)
        return false;
    bool ok = n == LEN;
    for (size_t i = 0; ok && i < n; i++)
        ok = ((char *)out)[i] == 'w';
    kvmesh_free(out);
    CHECK(ok, "the replayed object reads back %zu bytes, not the writer's %d of 'w'", n, LEN);
    return true;
}

/* The object row and its lock (the operation the writer claimed). */
static bool object_row(meta_sync_t *s, tn_objrow_t *row)
{
    static uint8_t buf[TN_OP_ENC_MAX];
    size_t n = 0;
    char k[KS_KEY_CAP];
    CHECK(ks_object_key(k, sizeof(k), DEP, TENANT, "", KEY) == 0, "key");
    return read_rec(s, k, buf, sizeof(buf), &n) && tn_objrow_decode(buf, n, row) == 0;
}

static bool op_rec(meta_sync_t *s, const char *id, tn_op_t *op)
{
    static uint8_t buf[TN_OP_ENC_MAX];
    size_t n = 0;
    char k[KS_KEY_CAP];
    CHECK(ks_acct_op_key(k, sizeof(k), DEP, TENANT, id) == 0, "key");
    return read_rec(s, k, buf, sizeof(buf), &n) && tn_op_decode(buf, n, op) == 0;
}

static bool usage(meta_sync_t *s, tn_usage_t *u)
{
    uint8_t buf[256];
    size_t n = 0;
    char k[KS_KEY_CAP];
    CHECK(ks_quota_key(k, sizeof(k), DEP, TENANT) == 0, "key");
    return read_rec(s, k, buf, sizeof(buf), &n) && tn_usage_decode(buf, n, u) == 0;
}

/* S's owner: reservations held now, and released after a lookup since it opened. */
static int64_t owner_metric(kvmesh_t *kv, const char *name)
{
    int64_t v = -1;
    CHECK(obs_metrics_read(kvmesh_runtime_of(kv)->metrics, name, OBS_NONE, OBS_NONE, &v) == 0, "%s",
          name);
    return v;
}

static pid_t spawn_writer(const char *self, const char *url, const char *mode)
{
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[] = {self, "writer", url, mode, NULL};
        execv(self, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void test_replay(const char *self, const char *url, const char *mode)
{
    bool wrh = strcmp(mode, "embedded_wrh") == 0;
    kvmesh_t *s = open_rt(url, mode, "64MiB");
    if (!s)
        return;
    if (wrh) /* S is the only route authority: its claim is followed by a failed CAS */
        kvm_quota_test_fail_after_claim(kvmesh_runtime_of(s), 1, KVMESH_EBACKEND);
    meta_sync_t *ms = NULL;
    CHECK(meta_sync_open(&ms, url, NULL) == 0, "meta_sync_open");

    int st = 0;
    pid_t w = spawn_writer(self, url, mode);
    CHECK(w > 0 && waitpid(w, &st, 0) == w, "writer process");
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
          "the writer was not killed by its claim "
          "(status %d)",
          st);

    /* the window: claimed (PUBLISHING), nothing published, the bytes on S in a held slot */
    tn_objrow_t row;
    tn_op_t op;
    CHECK(object_row(ms, &row) && row.lock_op[0], "the object row is locked by the writer's op");
    char opid[TN_OPID_CAP];
    snprintf(opid, sizeof(opid), "%s", row.lock_op);
    if (!opid[0]) {
        printf("skipping the rest: no operation in the window\n");
        failures++;
        meta_sync_close(ms);
        kvmesh_close(s);
        return;
    }
    bool at_kill = op_rec(ms, opid, &op);
    CHECK(at_kill, "operation %s", opid);
    CHECK(!at_kill || op.state == TN_ST_PUBLISHING || op.state == TN_ST_FINALIZED,
          "operation %s is %s after the kill", opid, tn_state_name(op.state));
    CHECK(!at_kill || op.payload_len > 16, "the claim recorded %u payload bytes (no locators)",
          at_kill ? op.payload_len : 0);

    /* the reconciler of S replays it (due after publish_ttl, 10 s) */
    uint64_t t0 = env_clock_mono_ms(), t_end = t0 + 60000;
    bool ok = false;
    int64_t held_max = 0;
    while (!ok && env_clock_mono_ms() < t_end) {
        int64_t h = owner_metric(s, "reservations_held");
        held_max = h > held_max ? h : held_max;
        ok = op_rec(ms, opid, &op) && op.state == TN_ST_FINALIZED;
        if (!ok)
            nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    }
    CHECK(ok, "operation %s not finalized within 60 s (state %s)", opid, tn_state_name(op.state));
    printf("%s: the writer's put finalized by the reconciler after %" PRIu64 " ms\n", mode,
           env_clock_mono_ms() - t0);
    CHECK(readable(s), "the replayed object is not readable");
    /* the slot was held past its TTL (reservations expire after 4 s, the replay is due after
     * 10 s) and never released: the route CAS named space the owner still held */
    CHECK(held_max >= 1, "the owner never held the writer's reservation (peak %" PRId64 ")",
          held_max);
    CHECK(owner_metric(s, "reservations_released_after_lookup_total") == 0,
          "the owner released the writer's slot before the replay");
    CHECK(owner_metric(s, "reservations_held") == 0, "a reservation is still held");

    tn_usage_t u;
    CHECK(usage(ms, &u), "usage row");
    CHECK(u.committed_bytes == LEN && u.committed_objects == 1 && u.pending_bytes == 0 &&
              u.pending_objects == 0 && u.n_pending == 0 && u.n_publishing == 0,
          "usage committed %" PRIu64 "/%" PRIu64 " pending %" PRIu64 "/%" PRIu64 " ops %" PRIu64
          "/%" PRIu64,
          u.committed_bytes, u.committed_objects, u.pending_bytes, u.pending_objects, u.n_pending,
          u.n_publishing);
    CHECK(object_row(ms, &row) && row.live && row.len == LEN && !row.lock_op[0] &&
              strcmp(row.last_op, opid) == 0,
          "object row live %d len %" PRIu64 " lock '%s' last '%s'", row.live, row.len, row.lock_op,
          row.last_op);

    /* the key is writable again and its overwrite refunds the replayed bytes exactly */
    static char v[LEN / 2];
    memset(v, 'x', sizeof(v));
    kvmesh_scope_t sc = {TENANT, NULL};
    CHECK(kvmesh_put(s, &sc, KEY, strlen(KEY), v, sizeof(v), NULL) == 0, "overwrite");
    CHECK(usage(ms, &u) && u.committed_bytes == LEN / 2 && u.committed_objects == 1,
          "after the overwrite: committed %" PRIu64 "/%" PRIu64, u.committed_bytes,
          u.committed_objects);
    meta_sync_close(ms);
    kvmesh_close(s);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "writer") == 0)
        return writer_main(argv[2], argv[3]);
    const char *backend = argc > 1 ? argv[1] : "redis";
    const char *mode = argc > 2 ? argv[2] : "metadata_only";
    testsrv_t *srv = NULL;
    if (testsrv_start_named(&srv, backend) != 0)
        return 1;
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    CHECK(n > 0, "readlink");
    self[n > 0 ? n : 0] = 0;
    test_replay(self, testsrv_url(srv), mode);
    testsrv_stop(srv);
    printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
