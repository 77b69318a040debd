/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_admin_devices.c — `kvmesh admin devices` as a real process on a real Redis and a real
 * etcd (the same checks on each), beside two kvmeshd daemons with a LocalDir cold device each:
 *   - the daemons' device records: owner = the daemon's id, kind localdir, its root, active,
 *     healthy, schedulable, the configured capacity (JSON parsed here, and the table);
 *   - a record written here with every field set (draining, unschedulable, degraded, used and
 *     reserved bytes, tags) reads back field for field, and a record that does not decode is
 *     listed as malformed, not skipped;
 *   - pages of one list the same four records; --max 2 stops at two and says so;
 *   - `devices ID` reads one record exactly;
 *   - used / reserved / free bytes and operation counts come from the record written here (an
 *     offload needs a writer runtime with a cold tier; the cold tests cover the accounting);
 *   - bad arguments: not a device id (2), an unknown device (3), two ids (2);
 *   - lifecycle: `devices drain ID` of a daemon's device makes its record draining and
 *     unschedulable (a repeat writes nothing), `devices retire ID` of the record holding used and
 *     reserved bytes is refused (exit 1) naming them and changes nothing, retire of the other
 *     daemon's empty device succeeds and a drain of it is then refused (2); drain of the
 *     malformed record fails (1), of an unknown device exits 3.
 * Bounded: every wait has a limit; every process is started here and stopped by pid.
 */
#include <jansson.h>
#include <sys/stat.h>

#include "cold/cold.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "ops_util.h"
#include "redis_etcd_main.h"

#define DV_DAEMONS   2
#define DV_WAIT_MS   30000
#define DV_SYNTH_ID  "cafe0000000000000000000000000001"
#define DV_BROKEN_ID "cafe0000000000000000000000000002"
#define DV_OWNER_ID  "beef0000000000000000000000000002"

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    char root[DV_DAEMONS][300];
    tdaemon_t d[DV_DAEMONS];
};

static void admin(tdaemon_out_t *o, struct cluster *c, const char *a1, const char *a2,
                  const char *a3, const char *a4, const char *a5)
{
    const char *argv[20] = {ops_bin_kvmesh, "admin", "--config", c->cfg};
    size_t n = 4;
    const char *extra[] = {a1, a2, a3, a4, a5};
    for (size_t i = 0; i < 5 && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ops_runv(o, argv);
}

static json_t *admin_json(struct cluster *c, const char *a1, const char *a2, const char *a3)
{
    tdaemon_out_t o;
    const char *a[4] = {a1, a2, a3, NULL};
    size_t n = 0;
    while (n < 3 && a[n])
        n++;
    a[n] = "--json";
    admin(&o, c, a[0], a[1], a[2], a[3], NULL);
    OPS_ASSERT_RUN(&o, 0);
    json_error_t je;
    json_t *j = json_loads(o.out, 0, &je);
    if (!j)
        fail_msg("not JSON (%s):\n%s", je.text, o.out);
    tdaemon_out_free(&o);
    return j;
}

static const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v))
        fail_msg("no string \"%s\"", k);
    return json_string_value(v);
}

static long long jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        fail_msg("no integer \"%s\"", k);
    return json_integer_value(v);
}

static json_t *find_dev(json_t *list, const char *key, const char *val)
{
    size_t i;
    json_t *d;
    json_array_foreach(list, i, d)
    {
        json_t *v = json_object_get(d, key);
        if (json_is_string(v) && strcmp(json_string_value(v), val) == 0)
            return d;
    }
    return NULL;
}

static void put_raw(struct cluster *c, const char *id, const uint8_t *val, size_t len)
{
    meta_sync_t *ms;
    assert_int_equal(meta_sync_open(&ms, c->url, NULL), 0);
    char key[KS_KEY_CAP];
    assert_int_equal(ks_cold_device_key(key, sizeof(key), c->dep, id), 0);
    meta_op_t op = {.type = META_OP_PUT, .key = key, .value = val, .value_len = len};
    meta_result_t *res;
    assert_int_equal(meta_sync_txn(ms, NULL, 0, &op, 1, NULL, 0, &res), 0);
    meta_result_free(res);
    meta_sync_close(ms);
}

static void write_records(struct cluster *c)
{
    cold_device_t d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(kvm_id128_parse(DV_SYNTH_ID, &d.id), 0);
    assert_int_equal(kvm_id128_parse(DV_OWNER_ID, &d.owner), 0);
    d.owner_epoch = 9;
    d.kind = COLD_BACKEND_EXTENT;
    snprintf(d.root, sizeof(d.root), "/srv/cold/extent-a");
    d.lifecycle = COLD_DEV_DRAINING;
    d.schedulable = false;
    d.capacity = 1ull << 30;
    d.used = 4096;
    d.reserved = 8192;
    d.n_used = 1;
    d.n_reserved = 2;
    snprintf(d.tags, sizeof(d.tags), "ssd,rack1");
    d.health = COLD_DEV_DEGRADED;
    d.health_ms = 1234567;
    assert_int_equal(cold_device_check(&d), 0);
    uint8_t buf[COLD_DEVICE_ENC_MAX];
    size_t len;
    assert_int_equal(cold_device_encode(&d, buf, sizeof(buf), &len), 0);
    put_raw(c, DV_SYNTH_ID, buf, len);
    const uint8_t junk[] = "this is not a device record";
    put_raw(c, DV_BROKEN_ID, junk, sizeof(junk) - 1);
}

static void check_listing(struct cluster *c)
{
    json_t *j = admin_json(c, "devices", NULL, NULL);
    json_t *list = json_object_get(j, "devices");
    assert_int_equal(jint(j, "count"), 4);
    assert_int_equal(json_array_size(list), 4);
    assert_true(json_is_false(json_object_get(j, "truncated")));
    for (int i = 0; i < DV_DAEMONS; i++) {
        json_t *d = find_dev(list, "owner", c->d[i].id);
        if (!d)
            fail_msg("no device record owned by daemon %d (%s)", i, c->d[i].id);
        assert_string_equal(jstr(d, "kind"), "localdir");
        assert_string_equal(jstr(d, "root"), c->root[i]);
        assert_string_equal(jstr(d, "lifecycle"), "active");
        assert_string_equal(jstr(d, "health"), "healthy");
        assert_true(json_is_true(json_object_get(d, "schedulable")));
        assert_int_equal(jint(d, "capacity_bytes"), 64ll << 20);
        assert_true(jint(d, "owner_epoch") > 0);
    }
    json_t *s = find_dev(list, "id", DV_SYNTH_ID);
    assert_non_null(s);
    assert_string_equal(jstr(s, "owner"), DV_OWNER_ID);
    assert_int_equal(jint(s, "owner_epoch"), 9);
    assert_string_equal(jstr(s, "kind"), "extent");
    assert_string_equal(jstr(s, "root"), "/srv/cold/extent-a");
    assert_string_equal(jstr(s, "lifecycle"), "draining");
    assert_true(json_is_false(json_object_get(s, "schedulable")));
    assert_string_equal(jstr(s, "health"), "degraded");
    assert_int_equal(jint(s, "health_ms"), 1234567);
    assert_int_equal(jint(s, "capacity_bytes"), 1ll << 30);
    assert_int_equal(jint(s, "used_bytes"), 4096);
    assert_int_equal(jint(s, "reserved_bytes"), 8192);
    assert_int_equal(jint(s, "free_bytes"), (1ll << 30) - 4096 - 8192);
    assert_int_equal(jint(s, "ops_used"), 1);
    assert_int_equal(jint(s, "ops_reserved"), 2);
    assert_string_equal(jstr(s, "tags"), "ssd,rack1");
    json_t *b = find_dev(list, "id", DV_BROKEN_ID);
    assert_non_null(b);
    assert_true(json_is_true(json_object_get(b, "malformed")));
    json_decref(j);

    /* pages of one: the same records; --max 2: stops and says so */
    j = admin_json(c, "devices", "--page=1", NULL);
    assert_int_equal(jint(j, "count"), 4);
    json_decref(j);
    j = admin_json(c, "devices", "--max=2", NULL);
    assert_int_equal(jint(j, "count"), 2);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    json_decref(j);

    /* the table */
    tdaemon_out_t o;
    admin(&o, c, "devices", NULL, NULL, NULL, NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "lifecycle");
    const char *row = strstr(o.out, DV_SYNTH_ID);
    assert_non_null(row);
    const char *eol = strchr(row, '\n');
    assert_true(strstr(row, "draining") && strstr(row, "draining") < eol);
    assert_true(strstr(row, "degraded") && strstr(row, "degraded") < eol);
    assert_true(strstr(row, "1GiB") && strstr(row, "1GiB") < eol);
    row = strstr(o.out, DV_BROKEN_ID);
    assert_non_null(row);
    assert_true(strstr(row, "(malformed record)") == row + 33);
    OPS_ASSERT_HAS(o.out, "4 cold devices\n");
    tdaemon_out_free(&o);

    /* one record */
    j = admin_json(c, "devices", DV_SYNTH_ID, NULL);
    assert_string_equal(jstr(j, "id"), DV_SYNTH_ID);
    assert_int_equal(jint(j, "reserved_bytes"), 8192);
    json_decref(j);
}

static void check_bad_args(struct cluster *c)
{
    tdaemon_out_t o;
    struct {
        const char *a1, *a2, *msg;
        int status;
    } bad[] = {
        {"zz", NULL, "\"zz\" is not a device id", 2},
        {"cafe00000000000000000000000000ff", NULL, "no cold device cafe00", 3},
        {DV_SYNTH_ID, DV_BROKEN_ID, "expected at most one device id", 2},
        {"drain", NULL, "drain: expected a device id", 2}, /* an action without its id */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        admin(&o, c, "devices", bad[i].a1, bad[i].a2, NULL, NULL);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
    ops_run(&o, ops_bin_kvmesh, "admin", "--help", NULL);
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "devices [DEVICE]");
    tdaemon_out_free(&o);
}

/* `devices drain|retire ID` (admin_device.c) and what they leave in the record. */
static void check_lifecycle(struct cluster *c)
{
    json_t *j = admin_json(c, "devices", NULL, NULL);
    json_t *list = json_object_get(j, "devices");
    char id0[40], id1[40];
    snprintf(id0, sizeof(id0), "%s", jstr(find_dev(list, "owner", c->d[0].id), "id"));
    snprintf(id1, sizeof(id1), "%s", jstr(find_dev(list, "owner", c->d[1].id), "id"));
    json_decref(j);
    j = admin_json(c, "devices", "drain", id0);
    assert_true(json_is_true(json_object_get(j, "changed")));
    assert_string_equal(jstr(j, "lifecycle"), "draining");
    assert_true(json_is_false(json_object_get(j, "schedulable")));
    json_decref(j);
    j = admin_json(c, "devices", id0, NULL); /* the record, read back */
    assert_string_equal(jstr(j, "lifecycle"), "draining");
    assert_true(json_is_false(json_object_get(j, "schedulable")));
    json_decref(j);
    j = admin_json(c, "devices", "drain", id0); /* a repeat */
    assert_true(json_is_false(json_object_get(j, "changed")));
    json_decref(j);

    tdaemon_out_t o;
    admin(&o, c, "devices", "retire", DV_SYNTH_ID, NULL, NULL); /* holds used + reserved bytes */
    OPS_ASSERT_RUN(&o, 1);
    OPS_ASSERT_HAS(o.err, "still holds 4096 used and 8192 reserved bytes");
    tdaemon_out_free(&o);
    j = admin_json(c, "devices", DV_SYNTH_ID, NULL);
    assert_string_equal(jstr(j, "lifecycle"), "draining"); /* unchanged */
    json_decref(j);

    admin(&o, c, "devices", "retire", id1, NULL, NULL); /* empty: retired */
    OPS_ASSERT_RUN(&o, 0);
    OPS_ASSERT_HAS(o.out, "retired");
    tdaemon_out_free(&o);
    j = admin_json(c, "devices", id1, NULL);
    assert_string_equal(jstr(j, "lifecycle"), "retired");
    json_decref(j);
    struct {
        const char *a1, *a2, *msg;
        int status;
    } bad[] = {
        {"drain", id1, "is retired; it cannot be drained", 2},
        {"drain", DV_BROKEN_ID, "does not decode", 1},
        {"retire", "cafe00000000000000000000000000ff", "no cold device cafe00", 3},
        {"frob", id1, "expected at most one device id, or drain|retire DEVICE", 2},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        admin(&o, c, "devices", bad[i].a1, bad[i].a2, NULL, NULL);
        OPS_ASSERT_RUN(&o, bad[i].status);
        OPS_ASSERT_HAS(o.err, bad[i].msg);
        tdaemon_out_free(&o);
    }
}

static void run_cluster(bool etcd)
{
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url = ops_backend_start(etcd, &c.srv, "opsdv", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    char text[512];
    snprintf(
        text, sizeof(text),
        "metadata_url: %s\ndeployment: %s\nmemory_size: 32MiB\nsegment_size: 16MiB\n"
        "max_object_size: 16MiB\nlease_ttl_ms: 2000\nshards: 8\ntop_k: 2\ncold_kind: localdir\n"
        "cold_capacity: 64MiB\n",
        c.url, c.dep);
    ops_write_file(c.cfg, text);
    for (int i = 0; i < DV_DAEMONS; i++) {
        snprintf(c.root[i], sizeof(c.root[i]), "%s/cold-%s-%d", ops_tmpdir, etcd ? "e" : "r", i);
        assert_int_equal(mkdir(c.root[i], 0700), 0);
        const char *extra[] = {"--cold-root", c.root[i], NULL};
        if (ops_daemon_start(&c.d[i], i + (etcd ? 10 : 0), c.cfg, extra) != 0)
            fail_msg("daemon %d did not start", i);
    }
    write_records(&c);
    check_listing(&c);
    check_bad_args(&c);
    check_lifecycle(&c);
    for (int i = 0; i < DV_DAEMONS; i++)
        tdaemon_stop(&c.d[i]);
    testsrv_stop(c.srv);
}

KVMESH_REDIS_ETCD_MAIN(test_devices, run_cluster, ops_group_setup, ops_group_teardown)
