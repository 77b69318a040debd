/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_admin.c — `kvmesh admin` as a real process against kvmeshd daemons on a real Redis and a
 * real etcd (the same checks on each):
 *   - members: every daemon's record with state, capacity and its segments, as a table and as
 *     JSON (parsed here), the same over pages of one record (--page 1); its unix socket and host
 *     identity (rpc_local = unix, the default) in both;
 *   - segments: one line per segment of every daemon (memory_size / segment_size each), and
 *     the same as JSON (each active, no request);
 *   - shards: once the authorities settled, one record per shard, each primary a live daemon,
 *     top_k members in each set; --page/--max stop early and say so (JSON "truncated");
 *   - cleanup: a member record left without a lease (as a crashed tool or a bug leaves it) is
 *     listed by the dry run and kept, deleted by --apply (live daemons untouched), and a second
 *     dry run finds nothing; after kill -9 of a daemon its record vanishes with its lease and the
 *     dry run's dead primaries are exactly the shards whose primary is not a live member;
 *   - bad arguments: no or an unknown subcommand, --page/--max out of range, --apply outside
 *     cleanup, a memory:// URL, an unreachable backend, an unknown option: each exits 2 (1 for
 *     the unreachable backend) with a message naming the problem.
 */
#include <jansson.h>

#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "ops_util.h"
#include "redis_etcd_main.h"

#define ADM_DAEMONS 2
#define ADM_SHARDS  16
#define ADM_TOP_K   2
#define ADM_WAIT_MS 30000

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    tdaemon_t d[ADM_DAEMONS];
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

static json_t *admin_json(struct cluster *c, const char *sub, const char *a2, const char *a3)
{
    tdaemon_out_t o;
    admin(&o, c, sub, "--json", a2, a3);
    OPS_ASSERT_RUN(&o, 0);
    json_error_t je;
    json_t *j = json_loads(o.out, 0, &je);
    if (!j)
        fail_msg("kvmesh admin %s --json is not JSON (%s):\n%s", sub, je.text, o.out);
    tdaemon_out_free(&o);
    return j;
}

static bool is_daemon(const struct cluster *c, const char *id, int skip)
{
    for (int i = 0; i < ADM_DAEMONS; i++)
        if (i != skip && c->d[i].pid > 0 && strcmp(c->d[i].id, id) == 0)
            return true;
    return false;
}

/* Every shard has a record whose primary is a live daemon (bounded wait). */
static void wait_shards_settled(struct cluster *c, int dead)
{
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        json_t *j = admin_json(c, "shards", NULL, NULL);
        json_t *arr = json_object_get(j, "shards"), *s;
        size_t i, good = 0;
        json_array_foreach(arr, i, s)
        {
            const char *p = json_string_value(json_object_get(s, "primary"));
            good += p && json_is_true(json_object_get(s, "primary_live")) &&
                    is_daemon(c, p, dead) &&
                    json_array_size(json_object_get(s, "set")) == (dead >= 0 ? 1 : ADM_TOP_K) &&
                    strcmp(json_string_value(json_object_get(s, "state")), "active") == 0;
        }
        size_t total = json_array_size(arr);
        json_decref(j);
        if (total == ADM_SHARDS && good == ADM_SHARDS)
            return;
        if (env_clock_mono_ms() - t0 > ADM_WAIT_MS)
            fail_msg("shard records did not settle: %zu of %d good, %zu records", good, ADM_SHARDS,
                     total);
        usleep(300000);
    }
}

static void write_stale_record(struct cluster *c, const char *id)
{
    meta_sync_t *ms;
    assert_int_equal(meta_sync_open(&ms, c->url, NULL), 0);
    char key[KS_KEY_CAP];
    assert_int_equal(ks_member_key(key, sizeof(key), c->dep, id), 0);
    const char *rec = "{\"epoch\":7,\"state\":\"active\",\"weight\":1.0,\"cap\":0,\"used\":0,"
                      "\"rpc\":\"tcp:127.0.0.1:1\",\"data\":\"\",\"hb\":3,\"segs\":[]}";
    meta_op_t put = {
        .type = META_OP_PUT, .key = key, .value = (const uint8_t *)rec, .value_len = strlen(rec)};
    meta_result_t *res;
    assert_int_equal(meta_sync_txn(ms, NULL, 0, &put, 1, NULL, 0, &res), 0);
    assert_true(res->succeeded);
    meta_result_free(res);
    meta_sync_close(ms);
}

static void check_admin(struct cluster *c)
{
    tdaemon_out_t o;
    /* members: table */
    admin(&o, c, "members", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    for (int i = 0; i < ADM_DAEMONS; i++) {
        OPS_ASSERT_HAS(o.out, c->d[i].id);
        char lr[96];
        snprintf(lr, sizeof(lr), " unix:/tmp/kvmesh-rpc-%s.sock host=", c->d[i].id);
        OPS_ASSERT_HAS(o.out, lr); /* rpc_local = unix, the default */
    }
    OPS_ASSERT_HAS(o.out, "64MiB");
    OPS_ASSERT_HAS(o.out, "active");
    tdaemon_out_free(&o);
    /* members: JSON, in one page and in pages of one */
    static const char *pages[] = {NULL, "--page=1"};
    for (size_t pg = 0; pg < 2; pg++) {
        json_t *j = admin_json(c, "members", pages[pg], NULL);
        json_t *arr = json_object_get(j, "members"), *m;
        size_t i, daemons = 0;
        assert_false(json_is_true(json_object_get(j, "truncated")));
        assert_int_equal(json_integer_value(json_object_get(j, "count")), json_array_size(arr));
        json_array_foreach(arr, i, m)
        {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (!is_daemon(c, id, -1))
                continue;
            daemons++;
            assert_string_equal(json_string_value(json_object_get(m, "state")), "active");
            assert_int_equal(json_integer_value(json_object_get(m, "capacity_bytes")), 64 << 20);
            assert_int_equal(json_array_size(json_object_get(m, "segments")), 4);
            assert_true(json_integer_value(json_object_get(m, "lease")) != 0);
            assert_true(json_integer_value(json_object_get(m, "epoch")) > 0);
            /* rpc_local = unix (the default): the daemon's unix socket and host identity */
            char lr[96];
            snprintf(lr, sizeof(lr), "unix:/tmp/kvmesh-rpc-%s.sock", id);
            assert_string_equal(json_string_value(json_object_get(m, "local_rpc")) ?: "", lr);
            assert_true(json_string_length(json_object_get(m, "host")) > 0);
        }
        assert_int_equal(daemons, ADM_DAEMONS);
        json_decref(j);
    }
    /* segments */
    admin(&o, c, "segments", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    char want[64];
    snprintf(want, sizeof(want), "%d segment(s) of", 4 * ADM_DAEMONS);
    OPS_ASSERT_HAS(o.out, want);
    OPS_ASSERT_HAS(o.out, "16MiB");
    tdaemon_out_free(&o);
    {
        json_t *sj = admin_json(c, "segments", NULL, NULL), *e;
        size_t i;
        assert_int_equal(json_integer_value(json_object_get(sj, "count")), 4 * ADM_DAEMONS);
        json_array_foreach(json_object_get(sj, "segments"), i, e)
        {
            assert_int_equal(json_integer_value(json_object_get(e, "size_bytes")), 16 << 20);
            assert_string_equal(json_string_value(json_object_get(e, "state")), "active");
            assert_true(json_is_null(json_object_get(e, "request")));
            assert_int_equal(strlen(json_string_value(json_object_get(e, "id"))), 16);
        }
        json_decref(sj);
    }
    /* shards */
    wait_shards_settled(c, -1);
    admin(&o, c, "shards", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    snprintf(want, sizeof(want), "%d shard record(s)\n", ADM_SHARDS);
    OPS_ASSERT_HAS(o.out, want);
    tdaemon_out_free(&o);
    json_t *j = admin_json(c, "shards", "--page=3", "--max=5");
    assert_int_equal(json_array_size(json_object_get(j, "shards")), 5);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(json_object_get(j, "shards"), i), "shard")),
                         i);
    json_decref(j);
    admin(&o, c, "shards", "--page=3", "--max=5", NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "5 shard record(s) (stopped at --max; more records exist)");
    tdaemon_out_free(&o);

    /* cleanup: a member record without a lease */
    const char *stale = "00000000000000000000000000dead01";
    write_stale_record(c, stale);
    admin(&o, c, "cleanup", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "cleanup dry run");
    snprintf(want, sizeof(want), "member %s: not bound to a lease\n", stale);
    OPS_ASSERT_HAS(o.out, want);
    OPS_ASSERT_HAS(o.out, "1 stale member record(s) (dry run)");
    for (int i = 0; i < ADM_DAEMONS; i++)
        if (strstr(o.out, c->d[i].id))
            fail_msg("cleanup lists the live daemon %s:\n%s", c->d[i].id, o.out);
    tdaemon_out_free(&o);
    admin(&o, c, "members", NULL, NULL, NULL);
    OPS_ASSERT_HAS(o.out, stale); /* the dry run changed nothing */
    tdaemon_out_free(&o);
    j = admin_json(c, "cleanup", "--apply", NULL);
    assert_true(json_is_true(json_object_get(j, "apply")));
    assert_int_equal(json_integer_value(json_object_get(j, "stale")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "deleted")), 1);
    json_t *sm = json_array_get(json_object_get(j, "stale_members"), 0);
    assert_string_equal(json_string_value(json_object_get(sm, "id")), stale);
    assert_string_equal(json_string_value(json_object_get(sm, "reason")), "not bound to a lease");
    json_decref(j);
    admin(&o, c, "members", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    if (strstr(o.out, stale))
        fail_msg("the stale record is still listed after --apply:\n%s", o.out);
    for (int i = 0; i < ADM_DAEMONS; i++)
        OPS_ASSERT_HAS(o.out, c->d[i].id);
    tdaemon_out_free(&o);
    admin(&o, c, "cleanup", NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "0 stale member record(s) (dry run)");
    tdaemon_out_free(&o);

    /* kill -9 daemon 1: its record goes with its lease; dead primaries are consistent. */
    tdaemon_stop(&c->d[1]);
    char dead_id[40];
    snprintf(dead_id, sizeof(dead_id), "%s", c->d[1].id);
    uint64_t t0 = env_clock_mono_ms();
    for (;;) {
        admin(&o, c, "members", NULL, NULL, NULL);
        OPS_ASSERT_RUN(&o, 0);
        bool gone = !strstr(o.out, dead_id);
        tdaemon_out_free(&o);
        if (gone)
            break;
        if (env_clock_mono_ms() - t0 > ADM_WAIT_MS)
            fail_msg("the record of the killed daemon %s did not expire", dead_id);
        usleep(300000);
    }
    j = admin_json(c, "cleanup", NULL, NULL);
    json_t *dp = json_object_get(j, "dead_primaries"), *e;
    size_t i;
    json_array_foreach(dp, i, e)
    {
        const char *p = json_string_value(json_object_get(e, "primary"));
        if (is_daemon(c, p, 1))
            fail_msg("cleanup calls the live daemon %s a dead primary", p);
    }
    json_decref(j);
    wait_shards_settled(c, 1); /* the survivor took every shard over */
    j = admin_json(c, "cleanup", NULL, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "dead_primaries")), 0);
    json_decref(j);
}

static void check_bad_args(struct cluster *c)
{
    tdaemon_out_t o;
    struct {
        const char *a1, *a2, *msg;
        int status;
    } bad[] = {
        {NULL, NULL, "expected one of members, segments, shards, cleanup", 2},
        {"frobnicate", NULL, "unknown subcommand \"frobnicate\"", 2},
        {"members", "--page=0", "--page 0 is out of range; allowed 1..256", 2},
        {"shards", "--page=257", "--page 257 is out of range; allowed 1..256", 2},
        {"members", "--max=0", "--max 0 is out of range", 2},
        {"members", "--page=x", "--page: \"x\" is not an unsigned integer", 2},
        {"shards", "--apply", "--apply belongs to cleanup", 2},
        {"members", "--frob", "unknown option \"--frob\"", 2},
        {"members", "extra", "expected no more arguments", 2},
        {"cleanup", "extra", "usage: kvmesh admin cleanup [--apply]", 2},
        {"cleanup", "--frob", "unknown option \"--frob\"", 2},
        {"cleanup", "--max=0", "--max 0 is out of range", 2},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        admin(&o, c, bad[i].a1, bad[i].a2, NULL, NULL);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
    ops_run(&o, ops_bin_kvmesh, "admin", "members", "--metadata", "memory://x", NULL);
    OPS_ASSERT_RUN(&o, 2);
    OPS_ASSERT_HAS(o.err, "memory://x is private to the process");
    tdaemon_out_free(&o);
    ops_run(&o, ops_bin_kvmesh, "admin", "--help", NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "usage: kvmesh admin ");
    OPS_ASSERT_HAS(o.out, "--apply");
    tdaemon_out_free(&o);
}

static void run_cluster(bool etcd)
{
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url = ops_backend_start(etcd, &c.srv, "opsadm", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    char text[512];
    snprintf(text, sizeof(text),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 64MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nlease_ttl_ms: 2000\nshards: %d\ntop_k: %d\n",
             c.url, c.dep, ADM_SHARDS, ADM_TOP_K);
    ops_write_file(c.cfg, text);
    for (int i = 0; i < ADM_DAEMONS; i++)
        if (ops_daemon_start(&c.d[i], i + (etcd ? 10 : 0), c.cfg, NULL) != 0)
            fail_msg("daemon %d did not start", i);
    check_bad_args(&c);
    check_admin(&c);
    for (int i = 0; i < ADM_DAEMONS; i++)
        tdaemon_stop(&c.d[i]);
    /* An unreachable backend fails (status 1) naming the URL. */
    char url[64];
    snprintf(url, sizeof(url), "%s", c.url);
    testsrv_stop(c.srv);
    tdaemon_out_t o;
    ops_run(&o, ops_bin_kvmesh, "admin", "members", "--metadata", url, "--timeout-ms", "1000",
            NULL);
    OPS_ASSERT_RUN(&o, 1);
    OPS_ASSERT_HAS(o.err, "kvmesh admin: ");
    tdaemon_out_free(&o);
}

KVMESH_REDIS_ETCD_MAIN(test_admin, run_cluster, ops_group_setup, ops_group_teardown)
