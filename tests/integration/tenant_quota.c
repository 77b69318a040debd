/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_quota.c — the quota protocol's transactions on real metadata servers: a real
 * redis-server or etcd (tests/support/testsrv) and 16 writer PROCESSES racing reserve, claim,
 * finalize and abort (creates, overwrites, deletes) into one tenant that has a byte and an
 * object limit, for KVMESH_TENANT_QUOTA_MS (10 s in CI; 30000 for the specification's 30 s).
 *
 *   itest_tenant_quota redis|etcd [--long]      (--long: 30 s, the specification's duration)
 *
 * Every writer bootstraps the same policy (16 concurrent create-if-absent: one creates, the
 * others match), then writes its own 4 keys (so it knows its final live set exactly) while all
 * of them contend on the tenant's one usage row. A 17th process configured with a different
 * max_objects must be refused at bootstrap with a message naming the field.
 *
 * Checks: every sampled usage row (every ~5 ms, while the writers run) has committed + pending
 * <= max_bytes and <= max_objects; at the end no operation is pending or publishing, pending is
 * zero, and committed bytes/objects equal the sum of the writers' finalized live sets exactly,
 * and equal the sum of the object accounting rows (read with a test-side range).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "core/util.h"
#include "env/clock.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "tenant/tenant.h"
#include "testsrv.h"

#define N_WRITERS 16
#define N_KEYS    4
#define MAX_BYTES 12000
#define MAX_OBJS  24
#define MAX_LEN   1500
#define DEP       "itq"
#define TENANT    "acme"
#define MAX_RETRY 200

static const char *g_backend;
static bool g_long;
static testsrv_t *g_srv;
static char g_url[256];

static tn_policy_t policy(void)
{
    return (tn_policy_t){.policy_version = 1, .max_bytes = MAX_BYTES, .max_objects = MAX_OBJS};
}

/* ---- writer process ------------------------------------------------------------------------- */

enum wstep { W_RESERVE, W_CLAIM, W_FINALIZE, W_ABORT };

typedef struct writer {
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
    tn_t *tn;
    int id;
    uint64_t end_ms;
    uint32_t rnd;
    bool booted, done, failed;
    /* own keys */
    bool live[N_KEYS];
    uint64_t len[N_KEYS];
    kvm_route_version_t ver[N_KEYS];
    char keyname[N_KEYS][32];
    /* current op */
    int k;
    bool del;
    uint64_t next_len;
    kvm_route_version_t next;
    char op[TN_OPID_CAP];
    enum wstep step;
    int retries;
    uint64_t finalized, aborted, refused, retried, conflicts;
} writer_t;

static uint32_t wrand(writer_t *w)
{
    w->rnd = w->rnd * 1103515245u + 12345u;
    return w->rnd >> 8;
}

static void w_next(writer_t *w);
static void w_issue(writer_t *w);

static void w_fail(writer_t *w, const char *what, int rc, const char *msg)
{
    fprintf(stderr, "writer %d: %s failed: %s (%s)\n", w->id, what, kvmesh_errname(rc), msg);
    w->failed = true;
    w->done = true;
}

static void w_retry(writer_t *w, const char *what, int rc)
{
    w->retried++;
    if (++w->retries > MAX_RETRY) {
        w_fail(w, what, rc, kvmesh_last_error());
        return;
    }
    w_issue(w); /* same operation id: idempotent */
}

static void on_w(void *arg, int rc, const tn_op_view_t *v)
{
    writer_t *w = arg;
    const char *names[] = {"reserve", "claim", "finalize", "abort"};
    const char *what = names[w->step];
    bool transient = rc == KVMESH_EINDETERMINATE || rc == KVMESH_ETIMEDOUT ||
                     rc == KVMESH_EUNAVAILABLE || rc == KVMESH_ECONN ||
                     (rc == KVMESH_ECONFLICT && strstr(kvmesh_last_error(), "contention"));
    if (transient) {
        if (rc == KVMESH_ECONFLICT)
            w->conflicts++;
        w_retry(w, what, rc);
        return;
    }
    w->retries = 0;
    switch (w->step) {
    case W_RESERVE:
        if (rc == KVMESH_EQUOTA) {
            w->refused++;
            w_next(w);
            return;
        }
        if (rc) {
            w_fail(w, what, rc, kvmesh_last_error());
            return;
        }
        if (v->usage.committed_bytes + v->usage.pending_bytes > MAX_BYTES ||
            v->usage.committed_objects + v->usage.pending_objects > MAX_OBJS) {
            w_fail(w, "reserve admitted over the limit", KVMESH_EINTERNAL, "");
            return;
        }
        if (v->op->state != TN_ST_PENDING) {
            w_fail(w, "reserve state", KVMESH_EINTERNAL, tn_state_name(v->op->state));
            return;
        }
        if (wrand(w) % 10 == 0) {
            w->step = W_ABORT; /* a failed data transfer */
        } else {
            w->step = W_CLAIM;
            int r = kvm_route_version_next(&w->ver[w->k], 1, &w->next);
            KVM_ASSERT(r == 0);
        }
        w_issue(w);
        return;
    case W_CLAIM:
        if (rc) {
            w_fail(w, what, rc, kvmesh_last_error());
            return;
        }
        w->step = W_FINALIZE;
        w_issue(w);
        return;
    case W_FINALIZE:
        if (rc) {
            w_fail(w, what, rc, kvmesh_last_error());
            return;
        }
        w->live[w->k] = !w->del;
        w->len[w->k] = w->del ? 0 : w->next_len;
        w->ver[w->k] = w->next;
        w->finalized++;
        w_next(w);
        return;
    case W_ABORT:
        if (rc) {
            w_fail(w, what, rc, kvmesh_last_error());
            return;
        }
        w->aborted++;
        w_next(w);
        return;
    }
}

static void w_issue(writer_t *w)
{
    const char *key = w->keyname[w->k];
    int rc = 0;
    switch (w->step) {
    case W_RESERVE: {
        tn_reserve_req_t q = {.tenant = TENANT,
                              .key = key,
                              .op_id = w->op,
                              .is_delete = w->del,
                              .next_len = w->next_len,
                              .expected_route = w->ver[w->k]};
        rc = tn_reserve(w->tn, &q, on_w, w);
        break;
    }
    case W_CLAIM: {
        uint8_t pl[16];
        memcpy(pl, &w->next_len, sizeof(w->next_len));
        memcpy(pl + 8, &w->id, sizeof(w->id));
        tn_claim_req_t q = {.tenant = TENANT,
                            .key = key,
                            .op_id = w->op,
                            .generation = 1,
                            .fencing_token = 1,
                            .publish_token = (uint64_t)(w->id + 1) << 32 | 1,
                            .next_version = w->next,
                            .payload = pl,
                            .payload_len = 12};
        rc = tn_claim(w->tn, &q, on_w, w);
        break;
    }
    case W_FINALIZE:
        rc = tn_finalize(w->tn, TENANT, NULL, key, w->op, w->next, on_w, w);
        break;
    case W_ABORT:
        rc = tn_abort(w->tn, TENANT, NULL, key, w->op, on_w, w);
        break;
    }
    if (rc)
        w_fail(w, "submit", rc, kvmesh_last_error());
}

static void w_next(writer_t *w)
{
    if (env_clock_mono_ms() >= w->end_ms) {
        w->done = true;
        return;
    }
    w->k = (int)(wrand(w) % N_KEYS);
    w->del = w->live[w->k] && wrand(w) % 10 < 3;
    w->next_len = w->del ? 0 : 1 + wrand(w) % MAX_LEN;
    tn_next_op_id(w->tn, w->op);
    w->step = W_RESERVE;
    w->retries = 0;
    w_issue(w);
}

static void on_boot(void *arg, int rc, const tn_op_view_t *v)
{
    writer_t *w = arg;
    (void)v;
    if (rc) {
        w_fail(w, "bootstrap", rc, kvmesh_last_error());
        return;
    }
    w->booted = true;
    w_next(w);
}

typedef struct mres {
    bool done;
    int rc;
    char err[512];
} mres_t;

static void on_mismatch(void *arg, int rc, const tn_op_view_t *v)
{
    mres_t *r = arg;
    (void)v;
    r->done = true;
    r->rc = rc;
    snprintf(r->err, sizeof(r->err), "%s", kvmesh_last_error());
}

static int writer_main(const char *url, int id, uint64_t ms, bool mismatch)
{
    writer_t *w = calloc(1, sizeof(*w));
    KVM_ASSERT(w != NULL);
    w->id = id;
    w->rnd = (uint32_t)(id * 7919 + 17);
    w->end_ms = env_clock_mono_ms() + ms;
    for (int k = 0; k < N_KEYS; k++)
        snprintf(w->keyname[k], sizeof(w->keyname[k]), "w%02d-k%d", id, k);
    if (uv_loop_init(&w->loop) || env_uv_new(&w->env, &w->loop, 0))
        return 2;
    meta_opts_t o = {.default_timeout_ms = 5000};
    if (meta_open(&w->m, w->env, url, &o)) {
        fprintf(stderr, "writer %d: open %s: %s\n", id, url, kvmesh_last_error());
        return 2;
    }
    tn_config_t cfg = {.deployment = DEP, .writer_epoch = (uint64_t)id + 1, .timeout_ms = 5000};
    if (tn_new(&w->tn, w->env, w->m, &cfg))
        return 2;
    tn_policy_t p = policy();
    int out = 0;
    if (mismatch) {
        p.max_objects++;
        mres_t r = {0};
        if (tn_bootstrap(w->tn, TENANT, &p, on_mismatch, &r))
            return 2;
        while (!r.done)
            uv_run(&w->loop, UV_RUN_ONCE);
        printf("bootstrap %s %s\n", kvmesh_errname(r.rc), r.err);
        out = r.rc == KVMESH_EINCOMPAT && strstr(r.err, "max_objects") ? 0 : 3;
    } else {
        if (tn_bootstrap(w->tn, TENANT, &p, on_boot, w))
            return 2;
        while (!w->done)
            uv_run(&w->loop, UV_RUN_ONCE);
        uint64_t lb = 0, lo = 0;
        for (int k = 0; k < N_KEYS; k++)
            if (w->live[k]) {
                lb += w->len[k];
                lo++;
            }
        printf("live_bytes %" PRIu64 " live_objects %" PRIu64 " finalized %" PRIu64
               " aborted %" PRIu64 " refused %" PRIu64 " retried %" PRIu64 " failed %d\n",
               lb, lo, w->finalized, w->aborted, w->refused, w->retried, w->failed);
        out = w->failed ? 3 : 0;
    }
    fflush(stdout);
    tn_close(w->tn);
    meta_close(w->m);
    uv_run(&w->loop, UV_RUN_NOWAIT);
    env_uv_free(w->env);
    while (uv_run(&w->loop, UV_RUN_NOWAIT))
        ;
    uv_loop_close(&w->loop);
    free(w);
    return out;
}

/* ---- the test ------------------------------------------------------------------------------- */

static pid_t spawn(const char *mode, int id, uint64_t ms, int *fd)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        char ids[16], mss[32];
        snprintf(ids, sizeof(ids), "%d", id);
        snprintf(mss, sizeof(mss), "%" PRIu64, ms);
        execl("/proc/self/exe", "itest_tenant_quota", mode, g_url, ids, mss, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *fd = p[0];
    return pid;
}

static bool read_usage(meta_sync_t *s, const char *key, tn_usage_t *u, bool *found)
{
    meta_result_t *r = NULL;
    int rc = meta_sync_get(s, key, &r);
    bool ok = rc == 0;
    *found = ok && r->kv.found;
    if (*found)
        assert_int_equal(tn_usage_decode(r->kv.value, r->kv.value_len, u), 0);
    meta_result_free(r);
    return ok;
}

static void test_writers(void **state)
{
    (void)state;
    uint64_t ms = g_long ? 30000 : testsrv_env_ms("KVMESH_TENANT_QUOTA_MS", 10000);
    meta_sync_t *s = NULL;
    assert_int_equal(meta_sync_open(&s, g_url, NULL), 0);
    char qkey[KS_KEY_CAP], pkey[KS_KEY_CAP];
    assert_int_equal(ks_quota_key(qkey, sizeof(qkey), DEP, TENANT), 0);
    assert_int_equal(ks_tenant_policy_key(pkey, sizeof(pkey), DEP, TENANT), 0);
    pid_t pids[N_WRITERS];
    int fds[N_WRITERS];
    for (int i = 0; i < N_WRITERS; i++)
        pids[i] = spawn("--writer", i, ms, &fds[i]);
    /* once the policy exists, a runtime with another max_objects must be refused */
    pid_t mm = 0;
    int mfd = -1;
    uint64_t samples = 0, max_seen_b = 0, max_seen_o = 0;
    uint64_t t_end = env_clock_mono_ms() + ms + 60000;
    int running = N_WRITERS;
    int status[N_WRITERS];
    bool reaped[N_WRITERS] = {0};
    while (running > 0 && env_clock_mono_ms() < t_end) {
        tn_usage_t u;
        bool found = false;
        if (read_usage(s, qkey, &u, &found) && found) {
            samples++;
            assert_true(u.committed_bytes + u.pending_bytes <= MAX_BYTES);
            assert_true(u.committed_objects + u.pending_objects <= MAX_OBJS);
            max_seen_b = KVM_MAX(max_seen_b, u.committed_bytes + u.pending_bytes);
            max_seen_o = KVM_MAX(max_seen_o, u.committed_objects + u.pending_objects);
        }
        if (!mm) {
            meta_result_t *r = NULL;
            if (meta_sync_get(s, pkey, &r) == 0 && r->kv.found)
                mm = spawn("--writer-mismatch", N_WRITERS, ms, &mfd);
            meta_result_free(r);
        }
        for (int i = 0; i < N_WRITERS; i++)
            if (!reaped[i] && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
                reaped[i] = true;
                running--;
            }
        usleep(5000);
    }
    for (int i = 0; i < N_WRITERS; i++)
        if (!reaped[i]) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status[i], 0);
            fail_msg("writer %d did not finish in time", i);
        }
    uint64_t sum_b = 0, sum_o = 0, fin = 0, ab = 0, ref = 0, ret = 0;
    for (int i = 0; i < N_WRITERS; i++) {
        char buf[512] = "";
        FILE *f = fdopen(fds[i], "r");
        char *line = fgets(buf, sizeof(buf), f);
        fclose(f);
        assert_true(WIFEXITED(status[i]));
        if (WEXITSTATUS(status[i]) != 0)
            fail_msg("writer %d exited %d: %s", i, WEXITSTATUS(status[i]), buf);
        assert_non_null(line);
        unsigned long long lb, lo, fz, a, rf, rt;
        int failed;
        assert_int_equal(sscanf(buf,
                                "live_bytes %llu live_objects %llu finalized %llu aborted %llu "
                                "refused %llu retried %llu failed %d",
                                &lb, &lo, &fz, &a, &rf, &rt, &failed),
                         7);
        sum_b += lb;
        sum_o += lo;
        fin += fz;
        ab += a;
        ref += rf;
        ret += rt;
    }
    assert_true(mm > 0);
    {
        char buf[512] = "";
        FILE *f = fdopen(mfd, "r");
        char *line = fgets(buf, sizeof(buf), f);
        fclose(f);
        int st;
        waitpid(mm, &st, 0);
        assert_non_null(line);
        printf("mismatching runtime: %s", buf);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    tn_usage_t u;
    bool found = false;
    assert_true(read_usage(s, qkey, &u, &found));
    assert_true(found);
    printf("%s: %d writers, %" PRIu64 " ms: finalized %" PRIu64 ", aborted %" PRIu64
           ", refused over quota %" PRIu64 ", retried %" PRIu64 "; %" PRIu64
           " samples, peak charge %" PRIu64 "/%d bytes %" PRIu64 "/%d objects\n",
           g_backend, N_WRITERS, ms, fin, ab, ref, ret, samples, max_seen_b, MAX_BYTES, max_seen_o,
           MAX_OBJS);
    printf("final: committed %" PRIu64 " bytes %" PRIu64 " objects; writers' live sets %" PRIu64
           " bytes %" PRIu64 " objects\n",
           u.committed_bytes, u.committed_objects, sum_b, sum_o);
    assert_true(samples > 0);
    assert_true(fin > 0);
    assert_true(ref > 0); /* the limits were actually reached */
    assert_int_equal(u.n_pending, 0);
    assert_int_equal(u.n_publishing, 0);
    assert_int_equal(u.pending_bytes, 0);
    assert_int_equal(u.pending_objects, 0);
    assert_int_equal(u.committed_bytes, sum_b);
    assert_int_equal(u.committed_objects, sum_o);
    /* the object rows agree (a test-side range; the protocol itself never scans) */
    char prefix[KS_KEY_CAP], last[KS_KEY_CAP] = "";
    assert_int_equal(
        ks_prefix(prefix, sizeof(prefix), DEP, KS_OBJECT, (const ks_part_t[]){{.s = TENANT}}, 1),
        0);
    uint64_t rows_b = 0, rows_o = 0;
    for (;;) {
        meta_result_t *r = NULL;
        assert_int_equal(meta_sync_range(s, prefix, last[0] ? last : NULL, 500, &r), 0);
        for (size_t i = 0; i < r->n_kvs; i++) {
            tn_objrow_t row;
            assert_int_equal(tn_objrow_decode(r->kvs[i].value, r->kvs[i].value_len, &row), 0);
            assert_string_equal(row.lock_op, "");
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
    assert_int_equal(rows_b, sum_b);
    assert_int_equal(rows_o, sum_o);
    meta_sync_close(s);
}

int main(int argc, char **argv)
{
    if (argc == 5 && (!strcmp(argv[1], "--writer") || !strcmp(argv[1], "--writer-mismatch")))
        return writer_main(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10),
                           !strcmp(argv[1], "--writer-mismatch"));
    g_long = argc == 3 && !strcmp(argv[2], "--long");
    if ((argc != 2 && !g_long) || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s redis|etcd [--long]\n", argv[0]);
        return 2;
    }
    g_backend = argv[1];
    int rc = !strcmp(g_backend, "redis") ? testsrv_start_redis(&g_srv, NULL)
                                         : testsrv_start_etcd(&g_srv);
    if (rc) {
        fprintf(stderr, "cannot start %s: %s\n", g_backend, kvmesh_last_error());
        return 1;
    }
    snprintf(g_url, sizeof(g_url), "%s", testsrv_url(g_srv));
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_writers)};
    int out = cmocka_run_group_tests(tests, NULL, NULL);
    testsrv_stop(g_srv);
    return out;
}
