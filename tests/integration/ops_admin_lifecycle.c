/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_admin_lifecycle.c — `kvmesh admin drain` / `activate` as real processes against three
 * kvmeshd daemons on a real Redis and a real etcd (the same checks on each), with an
 * application runtime in this process (memory_size 0) issuing puts, gets and route queries:
 *   - objects written before the drain, some of them on the target daemon;
 *   - drain (by an id prefix): exits 0 once the member's record says draining; admin members
 *     (table and JSON) and /cluster of another daemon (the status page's data) show draining,
 *     the drained daemon's readiness probe says why; a second drain is a no-op (JSON applied);
 *   - while drained: every object written before still reads back intact, and no replica of
 *     a new object lands on the drained daemon;
 *   - the request survives a restart: while the daemon is down its request is listed without a
 *     member record; killed (-9) and started again with the same runtime id it comes back
 *     draining; a request for an id without a member record is removed by activate;
 *   - activate: the record says active again, and new objects land on the daemon again;
 *   - bad arguments: no member (2), not an id (2), an ambiguous prefix (2), an unknown id (3),
 *     a member in state gone (1), a member that never applies it (1 after --wait-ms),
 *     --wait-ms out of range or outside drain/activate (2), --apply with drain (2).
 *   - segments drain|activate on one segment of a daemon (by prefixes of both ids): its record
 *     and admin segments (table and JSON) say drained, no replica of a new object lands in it
 *     while the daemon still takes placements in its other segments, its objects read back; a
 *     member drain + activate keeps the segment drained; activate deletes the request record
 *     and placements land in the segment again; bad arguments (2, 3, 1 as above), a request
 *     for a segment the member no longer has is removed by activate with the full id.
 * Bounded: every wait has a limit; every process is started here and stopped by pid.
 */
#include <inttypes.h>
#include <jansson.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "ops_util.h"
#include "redis_etcd_main.h"

#define LC_DAEMONS 3
#define LC_SHARDS  16
#define LC_TOP_K   2
#define LC_OBJECTS 40
#define LC_WAIT_MS 30000
#define LC_TARGET  0                                  /* the daemon drained */
#define LC_ID      "5eed0000000000000000000000000001" /* its runtime id (stable over restarts) */

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    tdaemon_t d[LC_DAEMONS];
    kvmesh_t *kv;
};

static void admin(tdaemon_out_t *o, struct cluster *c, const char *a1, const char *a2,
                  const char *a3, const char *a4)
{
    const char *argv[16] = {ops_bin_kvmesh, "admin", "--metadata", c->url, "--deployment", c->dep};
    size_t n = 6;
    const char *extra[] = {a1, a2, a3, a4};
    for (size_t i = 0; i < 4 && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ops_runv(o, argv);
}

static json_t *parse(const tdaemon_out_t *o)
{
    json_error_t je;
    json_t *j = json_loads(o->out, 0, &je);
    if (!j)
        fail_msg("not JSON (%s):\n%s", je.text, o->out);
    return j;
}

/* The state of member id in `kvmesh admin members --json` ("" when absent). */
static void admin_state(struct cluster *c, const char *id, char *out, size_t cap)
{
    tdaemon_out_t o;
    admin(&o, c, "members", "--json", NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_t *j = parse(&o), *m;
    size_t i;
    out[0] = 0;
    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "id")), id) == 0)
            snprintf(out, cap, "%s", json_string_value(json_object_get(m, "state")));
    }
    json_decref(j);
    tdaemon_out_free(&o);
}

/* Waits until the application runtime's snapshot shows member id in `state`. */
static void wait_app_sees(struct cluster *c, const char *id, const char *state)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        kvmesh_member_info_t m[16];
        size_t n = 0;
        assert_int_equal(kvmesh_members(c->kv, m, 16, &n), 0);
        for (size_t i = 0; i < n && i < 16; i++)
            if (strcmp(m[i].id, id) == 0 && strcmp(m[i].state, state) == 0)
                return;
        if (env_clock_mono_ms() - t0 > LC_WAIT_MS)
            fail_msg("the application runtime never saw %s %s", id, state);
        usleep(100000);
    }
}

static void value_of(char *buf, size_t cap, const char *key)
{
    snprintf(buf, cap, "value of %s, written for the lifecycle test", key);
}

static void put_segs(struct cluster *c, const char *prefix, const char *id, uint64_t seg,
                     size_t *on, size_t *in_seg, uint64_t *last_seg);

/* Puts LC_OBJECTS objects named prefix-i; returns how many have a replica on member id. */
static size_t put_batch(struct cluster *c, const char *prefix, const char *id)
{
    size_t on = 0, in = 0;
    put_segs(c, prefix, id, 0, &on, &in, NULL);
    return on;
}

static void check_reads(struct cluster *c, const char *prefix)
{
    kvmesh_scope_t sc = {.tenant = "lc"};
    for (int i = 0; i < LC_OBJECTS; i++) {
        char key[64], val[128];
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        value_of(val, sizeof(val), key);
        void *out = NULL;
        size_t len = 0;
        int rc = kvmesh_get(c->kv, &sc, key, strlen(key), &out, &len);
        if (rc)
            fail_msg("get %s: %s: %s", key, kvmesh_strerror(rc), kvmesh_last_error());
        assert_int_equal(len, strlen(val));
        assert_memory_equal(out, val, len);
        kvmesh_free(out);
    }
}

#define LC_FAKE_SEG "[[\"00000000000000aa\",1048576,\"0000000000000001\"]]"

/* A member record for id in state with segs (JSON array), or (del) none and no request. */
static void put_record_segs(struct cluster *c, const char *id, const char *state, bool del,
                            const char *segs)
{
    meta_sync_t *ms;
    assert_int_equal(meta_sync_open(&ms, c->url, NULL), 0);
    char key[KS_KEY_CAP];
    assert_int_equal(ks_member_key(key, sizeof(key), c->dep, id), 0);
    char rec[300];
    snprintf(rec, sizeof(rec),
             "{\"epoch\":7,\"state\":\"%s\",\"weight\":1.0,\"cap\":0,\"used\":0,"
             "\"rpc\":\"tcp:127.0.0.1:1\",\"data\":\"\",\"hb\":3,\"segs\":%s}",
             state, segs);
    meta_op_t op = del ? (meta_op_t){.type = META_OP_DEL, .key = key}
                       : (meta_op_t){.type = META_OP_PUT,
                                     .key = key,
                                     .value = (const uint8_t *)rec,
                                     .value_len = strlen(rec)};
    meta_result_t *res;
    assert_int_equal(meta_sync_txn(ms, NULL, 0, &op, 1, NULL, 0, &res), 0);
    meta_result_free(res);
    if (del) { /* and the lifecycle request a test left for it */
        assert_int_equal(ks_lifecycle_key(key, sizeof(key), c->dep, id), 0);
        op = (meta_op_t){.type = META_OP_DEL, .key = key};
        assert_int_equal(meta_sync_txn(ms, NULL, 0, &op, 1, NULL, 0, &res), 0);
        meta_result_free(res);
    }
    meta_sync_close(ms);
}

static void put_record(struct cluster *c, const char *id, const char *state, bool del)
{
    put_record_segs(c, id, state, del, LC_FAKE_SEG);
}

/* segments drain|activate: bad arguments, a member that never applies it, and the removal of
 * a request left for a segment the member no longer has (the fake records of check_bad_args) */
static void check_segment_args(struct cluster *c)
{
    const char *f1 = "abcdef00000000000000000000000001", *f3 = "abcdef00000000000000000000000003";
    struct {
        const char *a[5], *msg;
        int status;
    } bad[] = {
        {{"segments", "drain"}, "expected \"list\" or \"drain|activate MEMBER SEGMENT\"", 2},
        {{"segments", "list", "extra"}, "expected \"list\" or \"drain|activate MEMBER", 2},
        {{"segments", "pause", f1, "0000000000"},
         "expected \"list\" or \"drain|activate MEMBER",
         2},
        {{"segments", "drain", f1, "zz"}, "\"zz\" is not a segment id", 2},
        {{"segments", "drain", f1, "00000000000000aa0"}, "is not a segment id", 2},
        {{"segments", "drain", f1, "bb"}, "has no segment \"bb\"", 3},
        {{"segments", "drain", "00000000000000000000000000000077", "0000000000"},
         "no member record matches",
         3},
        {{"segments", "drain", "zz", "0000000000"}, "\"zz\" is not a member id", 2},
        {{"segments", "drain", f3, "0000000000"}, "is gone; it applies no more requests", 1},
        {{"segments", "drain", f1, "0000000000", "--wait-ms=600"},
         "recorded, but its record does not show it drained after",
         1},
        {{"segments", "list", "--wait-ms=5"},
         "--wait-ms belongs to drain, activate and segments",
         2},
        {{"segments", "drain", f1, "0000000000", "--apply"}, "--apply belongs to cleanup", 2},
    };
    tdaemon_out_t o;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[16] = {ops_bin_kvmesh, "admin",        "--metadata",
                                c->url,         "--deployment", c->dep};
        size_t n = 6;
        for (size_t k = 0; k < 5 && bad[i].a[k]; k++)
            argv[n++] = bad[i].a[k];
        argv[n] = NULL;
        ops_runv(&o, argv);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
    /* the fake ..01 now has a request for its segment aa, pending (it never applies it) */
    admin(&o, c, "segments", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "00000000000000aa");
    OPS_ASSERT_HAS(o.out, "active  (requested: drained)");
    tdaemon_out_free(&o);
    /* its record no longer lists aa (as after a restart): activate with the full id removes
     * the request; a second time the segment is simply unknown */
    put_record_segs(c, f1, "active", false, "[]");
    admin(&o, c, "segments", "activate", f1, "00000000000000aa");
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "has no segment 00000000000000aa: its drain request is removed");
    tdaemon_out_free(&o);
    admin(&o, c, "segments", "activate", f1, "00000000000000aa");
    OPS_ASSERT_RUN(&o, 3);
    OPS_ASSERT_HAS(o.err, "has no segment \"00000000000000aa\"");
    tdaemon_out_free(&o);
}

static void check_bad_args(struct cluster *c)
{
    tdaemon_out_t o;
    struct {
        const char *a1, *a2, *a3, *msg;
        int status;
    } bad[] = {
        {"drain", NULL, NULL, "kvmesh admin drain: expected one member id", 2},
        {"activate", NULL, NULL, "kvmesh admin activate: expected one member id", 2},
        {"drain", "zz", NULL, "\"zz\" is not a member id", 2},
        {"drain", "0123456789abcdef0123456789abcdef0", NULL, "is not a member id", 2},
        {"drain", "abcdef", NULL, "matches more than one member", 2},
        {"drain", "00000000000000000000000000000077", NULL, "no member record matches", 3},
        {"drain", "abcdef00000000000000000000000003", NULL, "is gone; only an active or draining",
         1},
        {"drain", "abcdef00000000000000000000000001", "--wait-ms=600",
         "recorded, but its record still says active after", 1},
        {"activate", "abcdef00000000000000000000000002", NULL, "draining because it is leaving", 1},
        {"drain", LC_ID, "--wait-ms=600001", "--wait-ms 600001 is out of range", 2},
        {"members", "--wait-ms=5", NULL, "--wait-ms belongs to drain, activate", 2},
        {"drain", LC_ID, "--apply", "--apply belongs to cleanup", 2},
        {"drain", LC_ID, "extra", "expected one member id", 2},
        {"members", "extra", NULL, "expected no more arguments", 2},
    };
    put_record(c, "abcdef00000000000000000000000001", "active", false);
    put_record(c, "abcdef00000000000000000000000002", "draining", false);
    put_record(c, "abcdef00000000000000000000000003", "gone", false);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        admin(&o, c, bad[i].a1, bad[i].a2, bad[i].a3, NULL);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
    check_segment_args(c);
    /* ...01 took a drain request it never applied; without its member record the request is
     * listed on its own, and activate removes it */
    const char *fake = "abcdef00000000000000000000000001";
    {
        meta_sync_t *ms;
        assert_int_equal(meta_sync_open(&ms, c->url, NULL), 0);
        char key[KS_KEY_CAP];
        assert_int_equal(ks_member_key(key, sizeof(key), c->dep, fake), 0);
        meta_op_t op = {.type = META_OP_DEL, .key = key};
        meta_result_t *res;
        assert_int_equal(meta_sync_txn(ms, NULL, 0, &op, 1, NULL, 0, &res), 0);
        meta_result_free(res);
        meta_sync_close(ms);
    }
    admin(&o, c, "members", "--json", NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_t *j = parse(&o);
    json_t *orphans = json_object_get(j, "requests_without_member");
    assert_int_equal(json_array_size(orphans), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(orphans, 0), "id")), fake);
    assert_string_equal(json_string_value(json_object_get(json_array_get(orphans, 0), "request")),
                        "draining");
    json_decref(j);
    tdaemon_out_free(&o);
    admin(&o, c, "members", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "lifecycle request draining for abcdef00000000000000000000000001, "
                          "which has no member record");
    tdaemon_out_free(&o);
    admin(&o, c, "activate", fake, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "has no member record: its draining request is removed");
    tdaemon_out_free(&o);
    admin(&o, c, "members", "--json", NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    j = parse(&o);
    assert_int_equal(json_array_size(json_object_get(j, "requests_without_member")), 0);
    json_decref(j);
    tdaemon_out_free(&o);
    for (int k = 1; k <= 3; k++) {
        char id[40];
        snprintf(id, sizeof(id), "abcdef0000000000000000000000000%d", k);
        put_record(c, id, "", true);
    }
    ops_run(&o, ops_bin_kvmesh, "admin", "--help", NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "drain MEMBER");
    OPS_ASSERT_HAS(o.out, "--wait-ms");
    OPS_ASSERT_HAS(o.out, "segments drain|activate MEMBER SEGMENT");
    tdaemon_out_free(&o);
}

static void check_lifecycle(struct cluster *c)
{
    const char *x = c->d[LC_TARGET].id;
    assert_string_equal(x, LC_ID);
    wait_app_sees(c, x, "active");
    size_t before = put_batch(c, "old", x);
    if (before == 0)
        fail_msg("none of %d objects landed on %s before the drain", LC_OBJECTS, x);

    /* drain by a prefix */
    tdaemon_out_t o;
    char prefix[12];
    snprintf(prefix, sizeof(prefix), "%.10s", x);
    admin(&o, c, "drain", prefix, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    char want[128];
    snprintf(want, sizeof(want), "member %s: draining", x);
    OPS_ASSERT_HAS(o.out, want);
    tdaemon_out_free(&o);
    char st[16];
    admin_state(c, x, st, sizeof(st));
    assert_string_equal(st, "draining");
    {
        admin(&o, c, "members", "--json", NULL, NULL);
        OPS_ASSERT_RUN(&o, 0);
        json_t *mj = parse(&o), *m;
        size_t i;
        int seen = 0;
        json_array_foreach(json_object_get(mj, "members"), i, m)
        {
            const char *id = json_string_value(json_object_get(m, "id"));
            json_t *req = json_object_get(m, "request");
            if (strcmp(id, x) == 0) {
                assert_string_equal(json_string_value(req), "draining");
                seen++;
            } else {
                assert_true(json_is_null(req));
            }
        }
        assert_int_equal(seen, 1);
        json_decref(mj);
        tdaemon_out_free(&o);
    }
    for (int i = 0; i < LC_DAEMONS; i++)
        if (i != LC_TARGET) {
            admin_state(c, c->d[i].id, st, sizeof(st));
            assert_string_equal(st, "active");
        }
    admin(&o, c, "members", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    snprintf(want, sizeof(want), "%s", x);
    const char *row = strstr(o.out, want);
    assert_non_null(row);
    assert_true(strstr(row, "draining") && strstr(row, "draining") < strchr(row, '\n'));
    tdaemon_out_free(&o);
    /* a second drain: already applied */
    admin(&o, c, "drain", x, "--json", NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_t *j = parse(&o);
    assert_string_equal(json_string_value(json_object_get(j, "member")), x);
    assert_string_equal(json_string_value(json_object_get(j, "request")), "draining");
    assert_string_equal(json_string_value(json_object_get(j, "state")), "draining");
    assert_true(json_is_true(json_object_get(j, "applied")));
    json_decref(j);
    tdaemon_out_free(&o);
    /* the status page's data (/cluster of another daemon) and the drained daemon's readiness */
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        tdaemon_http_t h;
        assert_int_equal(tdaemon_http(c->d[1].admin_port, "GET", "/cluster", NULL, &h), 200);
        json_error_t je;
        json_t *cj = json_loads(h.body, 0, &je), *m;
        assert_non_null(cj);
        size_t i;
        bool seen = false;
        json_array_foreach(json_object_get(cj, "members"), i, m)
        {
            seen |= strcmp(json_string_value(json_object_get(m, "id")), x) == 0 &&
                    strcmp(json_string_value(json_object_get(m, "state")), "draining") == 0;
        }
        json_decref(cj);
        tdaemon_http_free(&h);
        if (seen)
            break;
        if (env_clock_mono_ms() - t0 > LC_WAIT_MS)
            fail_msg("/cluster of daemon 1 never showed %s draining", x);
        usleep(100000);
    }
    tdaemon_http_t h;
    assert_int_equal(
        tdaemon_http(c->d[LC_TARGET].admin_port, "GET", "/healthz?probe=ready", NULL, &h), 503);
    OPS_ASSERT_HAS(h.body, "runtime is draining");
    tdaemon_http_free(&h);

    /* drained: old objects read back, new ones avoid it */
    wait_app_sees(c, x, "draining");
    check_reads(c, "old");
    assert_int_equal(put_batch(c, "drained", x), 0);
    check_reads(c, "drained");

    /* the request survives a restart of the member (same runtime id); while it is down the
     * request is listed without a member record */
    tdaemon_stop(&c->d[LC_TARGET]);
    t0 = env_clock_mono_ms();
    for (;;) {
        admin_state(c, x, st, sizeof(st));
        if (!st[0])
            break;
        if (env_clock_mono_ms() - t0 > LC_WAIT_MS)
            fail_msg("the record of the stopped daemon %s did not expire", x);
        usleep(200000);
    }
    admin(&o, c, "members", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    snprintf(want, sizeof(want), "lifecycle request draining for %s, which has no member record",
             x);
    OPS_ASSERT_HAS(o.out, want);
    tdaemon_out_free(&o);
    const char *extra[] = {"--runtime-id", LC_ID, NULL};
    if (ops_daemon_start(&c->d[LC_TARGET], LC_TARGET, c->cfg, extra) != 0)
        fail_msg("the drained daemon did not restart");
    t0 = env_clock_mono_ms();
    for (;;) {
        tdaemon_http_t hz;
        int code =
            tdaemon_http(c->d[LC_TARGET].admin_port, "GET", "/healthz?probe=ready", NULL, &hz);
        bool draining = code == 503 && strstr(hz.body, "runtime is draining");
        tdaemon_http_free(&hz);
        if (draining)
            break;
        if (env_clock_mono_ms() - t0 > LC_WAIT_MS)
            fail_msg("the restarted daemon did not come back draining");
        usleep(100000);
    }
    admin_state(c, x, st, sizeof(st));
    assert_string_equal(st, "draining");
    wait_app_sees(c, x, "draining");
    check_reads(c, "drained");
    assert_int_equal(put_batch(c, "restarted", x), 0);

    /* activate */
    admin(&o, c, "activate", x, "--json", NULL);
    OPS_ASSERT_RUN(&o, 0);
    j = parse(&o);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "active");
    assert_true(json_is_true(json_object_get(j, "applied")));
    json_decref(j);
    tdaemon_out_free(&o);
    admin_state(c, x, st, sizeof(st));
    assert_string_equal(st, "active");
    wait_app_sees(c, x, "active");
    /* new objects land on it once it holds route authority again: puts go first to the key's
     * shard primary (place_on_primary), and the shards come back to the activated member by
     * handoff, after its record is active */
    t0 = env_clock_mono_ms();
    size_t on_x;
    int rounds = 0;
    while ((on_x = put_batch(c, "active", x)) == 0) {
        rounds++;
        if (env_clock_mono_ms() - t0 > LC_WAIT_MS)
            fail_msg("after activate none of %d new objects landed on %s in %d rounds", LC_OBJECTS,
                     x, rounds);
        usleep(200000);
    }
    fprintf(stderr,
            "after activate %zu of %d new objects landed on %s (%d rounds before, %llu ms)\n", on_x,
            LC_OBJECTS, x, rounds, (unsigned long long)(env_clock_mono_ms() - t0));
    check_reads(c, "active");
    check_reads(c, "restarted");
}

/* The state of segment seg of member id in `kvmesh admin segments --json`, and its request
 * ("" when the segment is not listed). */
static void seg_state(struct cluster *c, const char *id, const char *seg, char *st, char *req)
{
    tdaemon_out_t o;
    admin(&o, c, "segments", "--json", NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_t *j = parse(&o), *s;
    size_t i;
    st[0] = req[0] = 0;
    json_array_foreach(json_object_get(j, "segments"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "member")), id) == 0 &&
            strcmp(json_string_value(json_object_get(s, "id")), seg) == 0) {
            snprintf(st, 16, "%s", json_string_value(json_object_get(s, "state")));
            json_t *r = json_object_get(s, "request");
            snprintf(req, 16, "%s", json_is_null(r) ? "null" : json_string_value(r));
        }
    }
    json_decref(j);
    tdaemon_out_free(&o);
}

/* Puts LC_OBJECTS objects named prefix-i; counts the replicas on member id, and those of them
 * in segment seg. */
static void put_segs(struct cluster *c, const char *prefix, const char *id, uint64_t seg,
                     size_t *on, size_t *in_seg, uint64_t *last_seg)
{
    kvmesh_scope_t sc = {.tenant = "lc"};
    *on = *in_seg = 0;
    for (int i = 0; i < LC_OBJECTS; i++) {
        char key[64], val[128];
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        value_of(val, sizeof(val), key);
        int rc = kvmesh_put(c->kv, &sc, key, strlen(key), val, strlen(val), NULL);
        if (rc)
            fail_msg("put %s: %s: %s", key, kvmesh_strerror(rc), kvmesh_last_error());
        kvmesh_route_info_t ri;
        assert_int_equal(kvmesh_route_query(c->kv, &sc, key, strlen(key), &ri), 0);
        for (uint32_t r = 0; r < ri.n_replicas; r++)
            if (strcmp(ri.replicas[r].owner, id) == 0) {
                (*on)++;
                *in_seg += ri.replicas[r].segment == seg;
                if (last_seg)
                    *last_seg = ri.replicas[r].segment;
            }
    }
}

/* put_segs until a replica lands on member id (want_in: in segment seg), again every 200 ms up
 * to LC_WAIT_MS: puts go first to the key's shard primary (place_on_primary), so a member takes
 * new replicas only in the shards it is primary of, which come back to it by handoff after an
 * activate (one shard of 16 takes none of 40 keys 8% of the time). A round that puts a replica
 * in a segment that must stay empty (drained, want_in false with seg != 0) fails the test. */
static void put_segs_until(struct cluster *c, const char *prefix, const char *id, uint64_t seg,
                           bool want_in, bool seg_empty, size_t *on, size_t *in, uint64_t *last_seg)
{
    uint64_t t0 = env_clock_mono_ms();
    for (int rounds = 0;; rounds++) {
        put_segs(c, prefix, id, seg, on, in, last_seg);
        if (seg_empty)
            assert_int_equal(*in, 0);
        if (want_in ? *in > 0 : *on > 0)
            return;
        if (env_clock_mono_ms() - t0 > LC_WAIT_MS)
            fail_msg("%s: after %d rounds of %d objects none landed on %s%s", prefix, rounds + 1,
                     LC_OBJECTS, id, want_in ? " in the segment" : "");
        usleep(200000);
    }
}

/* segments drain / activate on one segment of the target daemon (active again after
 * check_lifecycle): no new replica in it while drained, its objects read back, a member
 * drain + activate keeps it drained, activate removes the request and placements return. */
static void check_segments(struct cluster *c)
{
    const char *x = c->d[LC_TARGET].id;
    size_t on = 0, in = 0;
    uint64_t seg = 0;
    put_segs_until(c, "segpre", x, 0, false, false, &on, &in, &seg);
    char segx[17], st[16], req[16];
    snprintf(segx, sizeof(segx), "%016" PRIx64, seg);
    seg_state(c, x, segx, st, req);
    assert_string_equal(st, "active");
    assert_string_equal(req, "null");
    /* drain by prefixes of both ids */
    tdaemon_out_t o;
    char mp[12], sp[20];
    snprintf(mp, sizeof(mp), "%.10s", x);
    snprintf(sp, sizeof(sp), "%s", segx);
    admin(&o, c, "segments", "drain", mp, sp);
    OPS_ASSERT_RUN(&o, 0);
    char want[160];
    snprintf(want, sizeof(want), "segment %s of member %s: drained", segx, x);
    OPS_ASSERT_HAS(o.out, want);
    tdaemon_out_free(&o);
    seg_state(c, x, segx, st, req);
    assert_string_equal(st, "drained");
    assert_string_equal(req, "drained");
    admin(&o, c, "segments", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    const char *row = strstr(o.out, segx);
    assert_non_null(row);
    assert_true(strstr(row, "drained") && strstr(row, "drained") < strchr(row, '\n'));
    tdaemon_out_free(&o);
    /* the member itself stays active and takes placements, but not in that segment */
    char mst[16];
    admin_state(c, x, mst, sizeof(mst));
    assert_string_equal(mst, "active");
    put_segs_until(c, "segdrained", x, seg, false, true, &on, &in, NULL);
    check_reads(c, "segpre");
    check_reads(c, "segdrained");
    /* again: already applied (JSON) */
    {
        const char *argv[] = {ops_bin_kvmesh, "admin",    "--metadata", c->url, "--deployment",
                              c->dep,         "segments", "drain",      x,      segx,
                              "--json",       NULL};
        ops_runv(&o, argv);
        OPS_ASSERT_RUN(&o, 0);
        json_t *j = parse(&o);
        assert_string_equal(json_string_value(json_object_get(j, "segment")), segx);
        assert_string_equal(json_string_value(json_object_get(j, "state")), "drained");
        assert_true(json_is_true(json_object_get(j, "applied")));
        json_decref(j);
        tdaemon_out_free(&o);
    }
    /* a member drain and activate keep the segment's request */
    admin(&o, c, "drain", x, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    admin(&o, c, "activate", x, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    tdaemon_out_free(&o);
    seg_state(c, x, segx, st, req);
    assert_string_equal(st, "drained");
    assert_string_equal(req, "drained");
    /* activate: the request record is gone, placements return to the segment */
    {
        const char *argv[] = {ops_bin_kvmesh, "admin",    "--metadata", c->url, "--deployment",
                              c->dep,         "segments", "activate",   x,      segx,
                              "--json",       NULL};
        ops_runv(&o, argv);
        OPS_ASSERT_RUN(&o, 0);
        json_t *j = parse(&o);
        assert_string_equal(json_string_value(json_object_get(j, "state")), "active");
        assert_true(json_is_true(json_object_get(j, "applied")));
        json_decref(j);
        tdaemon_out_free(&o);
    }
    seg_state(c, x, segx, st, req);
    assert_string_equal(st, "active");
    assert_string_equal(req, "null");
    {
        meta_sync_t *ms;
        assert_int_equal(meta_sync_open(&ms, c->url, NULL), 0);
        char key[KS_KEY_CAP];
        assert_int_equal(ks_lifecycle_key(key, sizeof(key), c->dep, x), 0);
        meta_result_t *res;
        assert_int_equal(meta_sync_get(ms, key, &res), 0);
        assert_false(res->kv.found);
        meta_result_free(res);
        meta_sync_close(ms);
    }
    put_segs_until(c, "segback", x, seg, true, false, &on, &in, NULL);
    check_reads(c, "segdrained");
    check_reads(c, "segback");
}

static void run_cluster(bool etcd)
{
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url = ops_backend_start(etcd, &c.srv, "opslc", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    char text[512];
    snprintf(text, sizeof(text),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 64MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nlease_ttl_ms: 2000\nshards: %d\ntop_k: %d\n",
             c.url, c.dep, LC_SHARDS, LC_TOP_K);
    ops_write_file(c.cfg, text);
    for (int i = 0; i < LC_DAEMONS; i++) {
        const char *extra[] = {"--runtime-id", LC_ID, NULL};
        if (ops_daemon_start(&c.d[i], i + (etcd ? 10 : 0), c.cfg, i == LC_TARGET ? extra : NULL) !=
            0)
            fail_msg("daemon %d did not start", i);
    }
    kvmesh_config_t *kc = kvmesh_config_new();
    assert_int_equal(kvmesh_tools_config_load_file(kc, c.cfg), 0);
    assert_int_equal(kvmesh_config_set(kc, "memory_size", "0"), 0);
    if (kvmesh_open(&c.kv, kc) != 0)
        fail_msg("application runtime: %s", kvmesh_last_error());
    kvmesh_config_free(kc);
    check_bad_args(&c);
    check_lifecycle(&c);
    check_segments(&c);
    kvmesh_close(c.kv);
    for (int i = 0; i < LC_DAEMONS; i++)
        tdaemon_stop(&c.d[i]);
    testsrv_stop(c.srv);
}

KVMESH_REDIS_ETCD_MAIN(test_lifecycle, run_cluster, ops_group_setup, ops_group_teardown)
