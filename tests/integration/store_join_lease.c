/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_join_lease.c — a kvmeshd whose runtime lease expires while it is still joining must
 * take a fresh lease and finish the join (docs/reliability.md, chaos finding 3: a restarted
 * daemon slowed down by a loaded host exited with "requested lease not found"), on a real
 * Redis and a real etcd.
 *
 * The slow join is made exact: a second daemon is started, and as soon as its member record
 * appears in state standby (the lease is granted and bound, the join goes on) it is frozen with
 * SIGSTOP; the record must still say standby once it is stopped (otherwise the join already
 * finished: the attempt is repeated, at most LJ_ATTEMPTS times). Frozen, it sends no keepalive:
 * the test waits until the record has gone with the expired lease, then SIGCONTs it. The daemon
 * must then become ready (its ready file), its record must be active and bound to a live lease,
 * and it must still run. Before the fix it exited non-zero, its log naming the lost lease.
 * Every wait is bounded; both daemons are stopped by pid.
 */
#include <jansson.h>

#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "ops_util.h"
#include "redis_etcd_main.h"

#define LJ_ATTEMPTS 10
#define LJ_WAIT_MS  30000

struct cluster {
    testsrv_t *srv;
    const char *url;
    char dep[64];
    char cfg[400];
    meta_sync_t *ms;
};

/* The first member record other than `skip`: its id, state and lease (0 when none yet). */
static int other_record(struct cluster *c, const char *skip, char *id, char *state, int64_t *lease)
{
    char prefix[KS_KEY_CAP];
    assert_int_equal(ks_prefix(prefix, sizeof(prefix), c->dep, KS_MEMBER, NULL, 0), 0);
    meta_result_t *res;
    int rc = meta_sync_range(c->ms, prefix, NULL, 16, &res);
    int found = 0;
    for (size_t i = 0; rc == 0 && i < res->n_kvs && !found; i++) {
        const char *k = res->kvs[i].key + strlen(prefix);
        if (strcmp(k, skip) == 0)
            continue;
        json_t *o = json_loadb((const char *)res->kvs[i].value, res->kvs[i].value_len, 0, NULL);
        const char *st = o ? json_string_value(json_object_get(o, "state")) : NULL;
        snprintf(id, 40, "%s", k);
        snprintf(state, 16, "%s", st ? st : "?");
        *lease = res->kvs[i].lease;
        json_decref(o);
        found = 1;
    }
    meta_result_free(res);
    return found;
}

static bool lease_alive(struct cluster *c, int64_t lease)
{
    meta_result_t *res;
    int rc = meta_sync_lease_ttl(c->ms, lease, &res);
    bool alive = rc == 0; /* an expired or unknown lease is KVMESH_ENOENT (etcd reports whole
                           * seconds left, so a live 1 s lease may show 0) */
    meta_result_free(res);
    return alive;
}

static void run(bool etcd)
{
    struct cluster c;
    memset(&c, 0, sizeof(c));
    c.url =
        ops_backend_start(etcd, &c.srv, "joinlease", c.dep, sizeof(c.dep), c.cfg, sizeof(c.cfg));
    assert_int_equal(meta_sync_open(&c.ms, c.url, NULL), 0);
    char text[512];
    snprintf(text, sizeof(text),
             "metadata_url: %s\ndeployment: %s\nmemory_size: 32MiB\nsegment_size: 16MiB\n"
             "max_object_size: 16MiB\nlease_ttl_ms: 1000\nshards: 16\ntop_k: 2\n",
             c.url, c.dep);
    ops_write_file(c.cfg, text);
    tdaemon_t a;
    memset(&a, 0, sizeof(a));
    if (ops_daemon_start(&a, etcd ? 10 : 0, c.cfg, NULL) != 0)
        fail_msg("the first daemon did not start");

    char ready[300], out[300], log[300], admin[64];
    snprintf(ready, sizeof(ready), "%s/ready-join-%d", ops_tmpdir, etcd);
    snprintf(out, sizeof(out), "%s/join-%d.out", ops_tmpdir, etcd);
    snprintf(log, sizeof(log), "%s/join-%d.log", ops_tmpdir, etcd);
    bool frozen = false;
    pid_t b = 0;
    char id[40] = "", state[16] = "";
    int64_t lease = 0;
    for (int attempt = 0; attempt < LJ_ATTEMPTS && !frozen; attempt++) {
        unlink(ready);
        snprintf(admin, sizeof(admin), "127.0.0.1:%u", testsrv_free_port());
        const char *argv[] = {ops_bin_kvmeshd, "--config",       c.cfg, "--ready-file",
                              ready,           "--admin-listen", admin, NULL};
        b = tdaemon_spawn(argv, out, log, NULL);
        assert_true(b > 0);
        uint64_t t0 = env_clock_mono_ms();
        bool seen = false;
        while (!seen && env_clock_mono_ms() - t0 < LJ_WAIT_MS)
            seen = other_record(&c, a.id, id, state, &lease) && strcmp(state, "standby") == 0;
        if (seen) {
            kill(b, SIGSTOP);
            /* stopped: is the join still ahead of it? */
            frozen = other_record(&c, a.id, id, state, &lease) && strcmp(state, "standby") == 0;
        }
        if (!frozen) {
            kill(b, SIGKILL);
            waitpid(b, NULL, 0);
            b = 0;
            /* its record goes with its lease before the next attempt */
            uint64_t t1 = env_clock_mono_ms();
            while (other_record(&c, a.id, id, state, &lease) &&
                   env_clock_mono_ms() - t1 < LJ_WAIT_MS)
                usleep(50000);
        }
    }
    if (!frozen)
        fail_msg("could not stop the joining daemon inside its join in %d attempts", LJ_ATTEMPTS);
    printf("joining daemon %s frozen with its record in state standby (lease %lld)\n", id,
           (long long)lease);
    /* frozen: no keepalive; the lease expires and the record goes with it */
    uint64_t t0 = env_clock_mono_ms();
    char id2[40], st2[16];
    int64_t l2;
    while (other_record(&c, a.id, id2, st2, &l2) || lease_alive(&c, lease)) {
        if (env_clock_mono_ms() - t0 > LJ_WAIT_MS)
            fail_msg("the frozen daemon's lease %lld did not expire", (long long)lease);
        usleep(100000);
    }
    kill(b, SIGCONT);
    /* it must finish the join with a fresh lease */
    bool joined = false;
    int status = -2;
    t0 = env_clock_mono_ms();
    while (!joined && env_clock_mono_ms() - t0 < LJ_WAIT_MS) {
        if (access(ready, R_OK) == 0)
            joined = true;
        else if ((status = tdaemon_wait_exit(b, 0)) != -1)
            break;
        usleep(50000);
    }
    if (!joined) {
        char *text_log = tdaemon_slurp(log, NULL);
        fail_msg("the daemon whose lease expired during its join did not join (exit %d); log:\n%s",
                 status, text_log);
    }
    t0 = env_clock_mono_ms();
    id2[0] = st2[0] = 0;
    l2 = 0;
    for (;;) {
        bool ok = other_record(&c, a.id, id2, st2, &l2) && strcmp(id2, id) == 0 &&
                  strcmp(st2, "active") == 0 && l2 != lease && lease_alive(&c, l2);
        if (ok)
            break;
        if (env_clock_mono_ms() - t0 > LJ_WAIT_MS)
            fail_msg("the rejoined daemon's record is not active on a live lease: %s %s lease %lld "
                     "(alive %d; the expired one %lld)",
                     id2, st2, (long long)l2, (int)lease_alive(&c, l2), (long long)lease);
        usleep(100000);
    }
    assert_int_equal(tdaemon_wait_exit(b, 0), -1); /* still running */
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    tdaemon_stop(&a);
    meta_sync_close(c.ms);
    testsrv_stop(c.srv);
}

KVMESH_REDIS_ETCD_MAIN(test_join_lease, run, ops_group_setup, ops_group_teardown)
