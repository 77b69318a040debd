/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_device.c — cold device accounting on real metadata servers: a real redis-server or etcd
 * (tests/support/testsrv) and 8 worker PROCESSES that reserve, commit and release cold ops on
 * one small device through src/cold (plan, every edge of the op state machine, and the reclaim
 * handoff), for KVMESH_COLD_DEVICE_MS (4 s in CI).
 *
 *   itest_cold_device redis|etcd
 *
 * Each worker runs ops one after another; per op it takes one of the paths
 *   reserve -> cancel (RESERVED -> RELEASED)
 *   reserve -> PAYLOAD_WRITTEN -> RECLAIMING -> RELEASED
 *   reserve -> PAYLOAD_WRITTEN -> ROUTE_COMMITTED -> reclaim handoff (consumes the reservation)
 *   reserve -> ... -> USAGE_COMMITTED, kept live (at most 3), later released by a reclaim handoff
 * repeating a transition now and then (it must come back `repeated`), and counts ENOSPC refusals
 * (the device holds only a few payloads, so reservers contend for its room).
 *
 * Checks: every sampled device record (every ~5 ms while the workers run) decodes and has used +
 * reserved <= capacity (never over-reserved); every handoff reports the state it released; at the
 * end reserved = 0 and used / n_used equal the sums of the workers' live sets exactly, and some
 * reservations were refused (the capacity was actually reached).
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
#include <unistd.h>
#include <uv.h>

#include "cold/cold.h"
#include "cold/cold_simbe.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_uv.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "testsrv.h"

#define N_WORKERS 8
#define CAPACITY  12000
#define DEP       "itc"
#define MAX_RETRY 100
#define MAX_LIVE  3

static const char *g_backend;
static testsrv_t *g_srv;
static char g_url[256];

static cold_device_t device(void)
{
    cold_device_t d = {0};
    d.id = kvm_id128_from_u64(0xD0, 1);
    d.owner = kvm_id128_from_u64(0xB0, 1);
    d.owner_epoch = 1;
    d.kind = COLD_BACKEND_SIM;
    snprintf(d.root, sizeof(d.root), "sim://shared");
    d.lifecycle = COLD_DEV_ACTIVE;
    d.schedulable = true;
    d.capacity = CAPACITY;
    d.health = COLD_DEV_HEALTHY;
    return d;
}

/* ---- worker process ------------------------------------------------------------------------- */

typedef struct worker {
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
    cold_t *c;
    cold_simbe_t *sb;
    cold_backend_t be;
    kvm_ident_t ident;
    int id;
    uint32_t rnd;
    uint64_t seq;
} worker_t;

typedef struct res {
    bool done;
    int rc;
    bool repeated;
    cold_op_t op;
    cold_reclaim_t rec;
    bool has_op, has_rec;
    char err[256];
} res_t;

static uint32_t wrand(worker_t *w)
{
    w->rnd = w->rnd * 1103515245u + 12345u;
    return w->rnd >> 8;
}

static void on_op(void *arg, int rc, const cold_op_view_t *v)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->repeated = v->repeated;
    if ((r->has_op = v->op != NULL))
        r->op = *v->op;
    snprintf(r->err, sizeof(r->err), "%s", rc ? kvmesh_last_error() : "");
}

static void on_rec(void *arg, int rc, const cold_reclaim_view_t *v)
{
    res_t *r = arg;
    r->done = true;
    r->rc = rc;
    r->repeated = v->repeated;
    if ((r->has_rec = v->rec != NULL))
        r->rec = *v->rec;
    snprintf(r->err, sizeof(r->err), "%s", rc ? kvmesh_last_error() : "");
}

static bool transient(int rc)
{
    return rc == KVMESH_EINDETERMINATE || rc == KVMESH_ETIMEDOUT || rc == KVMESH_EUNAVAILABLE ||
           rc == KVMESH_ECONN || rc == KVMESH_EBACKEND ||
           (rc == KVMESH_ECONFLICT && strstr(kvmesh_last_error(), "contention"));
}

static void wait_done(worker_t *w, res_t *r)
{
    while (!r->done)
        uv_run(&w->loop, UV_RUN_ONCE);
}

static kvm_op_id_t wop(worker_t *w, uint64_t seq)
{
    return (kvm_op_id_t){
        .writer = kvm_id128_from_u64(0xEE, (uint64_t)w->id + 1), .epoch = 1, .seq = seq};
}

/* One op transition, repeated on transient errors (idempotent by the op id). */
static res_t advance(worker_t *w, uint64_t seq, enum cold_op_state to)
{
    kvm_op_id_t id = wop(w, seq);
    cold_locator_t loc = {.len = 8};
    memcpy(loc.b, &seq, 8);
    for (int i = 0;; i++) {
        res_t r = {0};
        if (cold_op_advance(w->c, &id, to, to == COLD_OP_PAYLOAD_WRITTEN ? &loc : NULL, on_op,
                            &r) != 0) {
            fprintf(stderr, "worker %d: advance: %s\n", w->id, kvmesh_last_error());
            exit(3);
        }
        wait_done(w, &r);
        if (!transient(r.rc) || i >= MAX_RETRY)
            return r;
    }
}

static int must(worker_t *w, const char *what, const res_t *r, enum cold_op_state want)
{
    if (r->rc != 0 || !r->has_op || r->op.state != want) {
        printf("worker %d: %s: %s (%s), state %s\n", w->id, what, kvmesh_errname(r->rc), r->err,
               r->has_op ? cold_op_state_name(r->op.state) : "-");
        return 1;
    }
    return 0;
}

static res_t rec_call(worker_t *w, int kind, const kvm_op_id_t *rop, const kvm_cold_backing_t *b)
{
    for (int i = 0;; i++) {
        res_t r = {0};
        int rc = kind == 0 ? cold_reclaim_plan(w->c, rop, &w->ident, b, on_rec, &r)
                           : cold_reclaim_run(w->c, rop, on_rec, &r);
        if (rc) {
            fprintf(stderr, "worker %d: reclaim: %s\n", w->id, kvmesh_last_error());
            exit(3);
        }
        wait_done(w, &r);
        if (!transient(r.rc) || i >= MAX_RETRY)
            return r;
    }
}

/* The overwrite/delete side: plan a reclaim of the op's materialized locator, then run it
 * (the route lookup says the object is gone: the locator is no longer authoritative). */
static int reclaim(worker_t *w, const cold_op_t *op, enum cold_op_state expect)
{
    kvm_cold_backing_t b;
    kvm_cold_backing_pending(&b, &op->id, &op->content_op, &op->owner, &op->device, op->length,
                             op->checksum);
    if (kvm_cold_backing_materialize(&b, op->loc.b, op->loc.len, op->length, op->checksum))
        return 1;
    kvm_op_id_t rop = wop(w, ++w->seq);
    res_t r = rec_call(w, 0, &rop, &b);
    if (r.rc)
        return printf("worker %d: reclaim plan: %s\n", w->id, r.err), 1;
    r = rec_call(w, 1, &rop, NULL);
    if (r.rc || !r.has_rec || r.rec.r.state != KVM_RECLAIM_USAGE_RELEASED ||
        r.rec.outcome != expect)
        return printf("worker %d: handoff: %s (%s), outcome %s, wanted %s\n", w->id,
                      kvmesh_errname(r.rc), r.err,
                      r.has_rec ? cold_op_state_name(r.rec.outcome) : "-",
                      cold_op_state_name(expect)),
               1;
    r = rec_call(w, 1, &rop, NULL); /* a repeat returns the existing result */
    if (r.rc || !r.repeated)
        return printf("worker %d: handoff repeat: %s\n", w->id, r.err), 1;
    return 0;
}

static void rt_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    (void)ctx;
    (void)id;
    cold_route_obs_t obs = {.found = true, .tombstone = true};
    cb(arg, 0, &obs);
}
static void rt_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *c, void *buf,
                        uint64_t len, cold_rc_cb cb, void *arg)
{
    (void)ctx, (void)id, (void)c, (void)buf, (void)len;
    cb(arg, KVMESH_ENOENT);
}
static void rt_mat(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *e,
                   const kvm_cold_backing_t *m, cold_rc_cb cb, void *arg)
{
    (void)ctx, (void)id, (void)e, (void)m;
    cb(arg, KVMESH_ECONFLICT);
}
static void rt_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                     void *arg)
{
    (void)ctx, (void)id, (void)e;
    cb(arg, KVMESH_ECONFLICT);
}

static int worker_main(const char *url, int id, uint64_t ms)
{
    worker_t *w = calloc(1, sizeof(*w));
    KVM_ASSERT(w != NULL);
    w->id = id;
    w->rnd = (uint32_t)(id * 7919 + 17);
    uint64_t end = env_clock_mono_ms() + ms;
    if (uv_loop_init(&w->loop) || env_uv_new(&w->env, &w->loop, 0))
        return 2;
    meta_opts_t o = {.default_timeout_ms = 5000};
    if (meta_open(&w->m, w->env, url, &o)) {
        fprintf(stderr, "worker %d: open %s: %s\n", id, url, kvmesh_last_error());
        return 2;
    }
    cold_route_ops_t ro = {
        .lookup = rt_lookup, .read_hot = rt_read_hot, .materialize = rt_mat, .evict = rt_evict};
    cold_config_t cfg = {
        .deployment = DEP, .self = kvm_id128_from_u64(0xEE, (uint64_t)id + 1), .timeout_ms = 5000};
    if (cold_new(&w->c, w->env, w->m, &ro, &cfg))
        return 2;
    w->sb = cold_simbe_new(1 << 20);
    w->be = cold_simbe_backend(w->sb);
    cold_device_t d = device();
    if (cold_attach_backend(w->c, &d.id, &w->be))
        return 2;
    char key[16];
    snprintf(key, sizeof(key), "w%d", id);
    if (kvm_ident_init(&w->ident, "acme", NULL, key, strlen(key)))
        return 2;
    cold_op_t live[MAX_LIVE];
    int n_live = 0;
    uint64_t refused = 0, done = 0, repeats = 0;
    int bad = 0;
    while (!bad && env_clock_mono_ms() < end) {
        uint64_t seq = ++w->seq;
        kvm_op_id_t op = wop(w, seq);
        uint64_t len = 500 + wrand(w) % 2500;
        cold_plan_req_t q = {.cold_op = op,
                             .content_op = wop(w, seq + (1ull << 40)),
                             .device = d.id,
                             .ident = &w->ident,
                             .length = len,
                             .checksum = len * 3};
        res_t r = {0};
        for (int i = 0;; i++) {
            r = (res_t){0};
            if (cold_op_plan(w->c, &q, on_op, &r))
                return 3;
            wait_done(w, &r);
            if (!transient(r.rc) || i >= MAX_RETRY)
                break;
        }
        if ((bad = must(w, "plan", &r, COLD_OP_PLANNED)))
            break;
        r = advance(w, seq, COLD_OP_RESERVED);
        if (r.rc == KVMESH_ENOSPC) {
            refused++;
            r = advance(w, seq, COLD_OP_RELEASED);
            bad = must(w, "release after ENOSPC", &r, COLD_OP_RELEASED);
            if (n_live > 0) { /* make room */
                bad = bad || reclaim(w, &live[0], COLD_OP_USAGE_COMMITTED);
                memmove(live, live + 1, (size_t)(n_live - 1) * sizeof(live[0]));
                n_live--;
            }
            continue;
        }
        if ((bad = must(w, "reserve", &r, COLD_OP_RESERVED)))
            break;
        if (wrand(w) % 5 == 0) {
            r = advance(w, seq, COLD_OP_RESERVED);
            if (r.rc || !r.repeated)
                bad = printf("worker %d: repeat of reserve not idempotent\n", id) > 0;
            repeats++;
        }
        uint32_t path = wrand(w) % 4;
        if (path == 0) {
            r = advance(w, seq, COLD_OP_RELEASED);
            bad = bad || must(w, "cancel", &r, COLD_OP_RELEASED);
        } else {
            r = advance(w, seq, COLD_OP_PAYLOAD_WRITTEN);
            bad = bad || must(w, "payload written", &r, COLD_OP_PAYLOAD_WRITTEN);
            if (!bad && path == 1) {
                r = advance(w, seq, COLD_OP_RECLAIMING);
                bad = must(w, "reclaiming", &r, COLD_OP_RECLAIMING);
                r = advance(w, seq, COLD_OP_RELEASED);
                bad = bad || must(w, "released", &r, COLD_OP_RELEASED);
            } else if (!bad) {
                r = advance(w, seq, COLD_OP_ROUTE_COMMITTED);
                bad = must(w, "route committed", &r, COLD_OP_ROUTE_COMMITTED);
                if (!bad && path == 2) {
                    bad = reclaim(w, &r.op, COLD_OP_ROUTE_COMMITTED);
                } else if (!bad) {
                    r = advance(w, seq, COLD_OP_USAGE_COMMITTED);
                    bad = must(w, "usage committed", &r, COLD_OP_USAGE_COMMITTED);
                    if (!bad) {
                        if (n_live == MAX_LIVE) {
                            bad = reclaim(w, &live[0], COLD_OP_USAGE_COMMITTED);
                            memmove(live, live + 1, (size_t)(n_live - 1) * sizeof(live[0]));
                            n_live--;
                        }
                        live[n_live++] = r.op;
                    }
                }
            }
        }
        done++;
    }
    uint64_t lb = 0;
    for (int i = 0; i < n_live; i++)
        lb += live[i].length;
    printf("live_bytes %" PRIu64 " live_ops %d refused %" PRIu64 " done %" PRIu64
           " repeats %" PRIu64 " failed %d\n",
           lb, n_live, refused, done, repeats, bad);
    fflush(stdout);
    cold_close(w->c);
    meta_close(w->m);
    uv_run(&w->loop, UV_RUN_NOWAIT);
    env_uv_free(w->env);
    while (uv_run(&w->loop, UV_RUN_NOWAIT))
        ;
    uv_loop_close(&w->loop);
    cold_simbe_free(w->sb);
    kvm_ident_free(&w->ident);
    free(w);
    return bad ? 4 : 0;
}

/* ---- the test ------------------------------------------------------------------------------- */

static pid_t spawn(int id, uint64_t ms, int *fd)
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
        execl("/proc/self/exe", "itest_cold_device", "--worker", g_url, ids, mss, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *fd = p[0];
    return pid;
}

typedef struct reg {
    bool done;
    int rc;
} reg_t;

static void on_reg(void *arg, int rc, const cold_device_t *d)
{
    (void)d;
    reg_t *r = arg;
    r->done = true;
    r->rc = rc;
}

static void register_device(void)
{
    uv_loop_t loop;
    env_t *env;
    meta_t *m;
    cold_t *c;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(env_uv_new(&env, &loop, 0), 0);
    assert_int_equal(meta_open(&m, env, g_url, NULL), 0);
    cold_route_ops_t ro = {
        .lookup = rt_lookup, .read_hot = rt_read_hot, .materialize = rt_mat, .evict = rt_evict};
    cold_config_t cfg = {.deployment = DEP, .self = kvm_id128_from_u64(0xB0, 1)};
    assert_int_equal(cold_new(&c, env, m, &ro, &cfg), 0);
    cold_device_t d = device();
    reg_t r = {0};
    assert_int_equal(cold_device_register(c, &d, on_reg, &r), 0);
    while (!r.done)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(r.rc, 0);
    cold_close(c);
    meta_close(m);
    uv_run(&loop, UV_RUN_NOWAIT);
    env_uv_free(env);
    while (uv_run(&loop, UV_RUN_NOWAIT))
        ;
    assert_int_equal(uv_loop_close(&loop), 0);
}

static bool read_device(meta_sync_t *s, const char *key, cold_device_t *d)
{
    meta_result_t *r = NULL;
    int rc = meta_sync_get(s, key, &r);
    bool ok = rc == 0 && r->kv.found;
    if (ok)
        assert_int_equal(cold_device_decode(r->kv.value, r->kv.value_len, d), 0);
    meta_result_free(r);
    return ok;
}

static void test_workers(void **state)
{
    (void)state;
    uint64_t ms = testsrv_env_ms("KVMESH_COLD_DEVICE_MS", 4000);
    register_device();
    meta_sync_t *s = NULL;
    assert_int_equal(meta_sync_open(&s, g_url, NULL), 0);
    char dkey[KS_KEY_CAP], hex[KVM_ID128_HEX_LEN + 1];
    cold_device_t d0 = device();
    assert_int_equal(ks_cold_device_key(dkey, sizeof(dkey), DEP, kvm_id128_fmt(&d0.id, hex)), 0);
    pid_t pids[N_WORKERS];
    int fds[N_WORKERS], status[N_WORKERS];
    bool reaped[N_WORKERS] = {0};
    for (int i = 0; i < N_WORKERS; i++)
        pids[i] = spawn(i, ms, &fds[i]);
    uint64_t samples = 0, peak = 0;
    uint64_t t_end = env_clock_mono_ms() + ms + 60000;
    int running = N_WORKERS;
    while (running > 0 && env_clock_mono_ms() < t_end) {
        cold_device_t d;
        if (read_device(s, dkey, &d)) {
            samples++;
            assert_true(d.used + d.reserved <= d.capacity);
            peak = KVM_MAX(peak, d.used + d.reserved);
        }
        for (int i = 0; i < N_WORKERS; i++)
            if (!reaped[i] && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
                reaped[i] = true;
                running--;
            }
        usleep(5000);
    }
    for (int i = 0; i < N_WORKERS; i++)
        if (!reaped[i]) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status[i], 0);
            fail_msg("worker %d did not finish in time", i);
        }
    uint64_t sum_b = 0, sum_o = 0, refused = 0, done = 0, repeats = 0;
    for (int i = 0; i < N_WORKERS; i++) {
        char buf[512] = "";
        FILE *f = fdopen(fds[i], "r");
        char *line = fgets(buf, sizeof(buf), f);
        fclose(f);
        assert_true(WIFEXITED(status[i]));
        if (WEXITSTATUS(status[i]) != 0)
            fail_msg("worker %d exited %d: %s", i, WEXITSTATUS(status[i]), buf);
        assert_non_null(line);
        unsigned long long lb, rf, dn, rp;
        int lo, failed;
        assert_int_equal(sscanf(buf,
                                "live_bytes %llu live_ops %d refused %llu done %llu repeats %llu "
                                "failed %d",
                                &lb, &lo, &rf, &dn, &rp, &failed),
                         6);
        sum_b += lb;
        sum_o += (uint64_t)lo;
        refused += rf;
        done += dn;
        repeats += rp;
    }
    cold_device_t d;
    assert_true(read_device(s, dkey, &d));
    printf("%s: %d workers, %" PRIu64 " ms: %" PRIu64 " ops, %" PRIu64 " refused (ENOSPC), %" PRIu64
           " repeats; %" PRIu64 " samples, peak used+reserved %" PRIu64 "/%d\n",
           g_backend, N_WORKERS, ms, done, refused, repeats, samples, peak, CAPACITY);
    printf("final: used %" PRIu64 " by %" PRIu64 " ops, reserved %" PRIu64
           "; workers' live sets %" PRIu64 " bytes in %" PRIu64 " ops\n",
           d.used, d.n_used, d.reserved, sum_b, sum_o);
    assert_true(samples > 0);
    assert_true(done > 0);
    assert_true(refused > 0); /* the capacity was actually reached */
    assert_int_equal(d.reserved, 0);
    assert_int_equal(d.n_reserved, 0);
    assert_int_equal(d.used, sum_b);
    assert_int_equal(d.n_used, sum_o);
    meta_sync_close(s);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--worker"))
        return worker_main(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10));
    if (argc != 2 || (strcmp(argv[1], "redis") && strcmp(argv[1], "etcd"))) {
        fprintf(stderr, "usage: %s redis|etcd\n", argv[0]);
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_workers)};
    int out = cmocka_run_group_tests(tests, NULL, NULL);
    testsrv_stop(g_srv);
    return out;
}
