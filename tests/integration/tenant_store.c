// SPDX-License-Identifier: Apache-2.0
/*
 * tenant_store.c — the tenant quota protocol wired into real runtimes (src/store/quota.c) on a
 * real Redis or etcd (argv[1]): a tenant with a byte and an object limit admits exactly up to
 * them (KVMESH_EQUOTA naming bytes or objects and the limit; KVMESH_ETOOBIG for an object over
 * max_bytes), removes and shrinking overwrites refund, the same key in two tenants and in two
 * domains of one tenant stays independent (cross-scope reads/deletes are not-found), a tenant
 * without a policy is unlimited, and a runtime with another hard policy is refused at open
 * naming the field. Two runtimes share the accounting (one writes, the other is admitted
 * against the same rows).
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"
#include "store/quota.h"
#include "tcheck.h"
#include "testsrv.h"

static int failures;

#define CHECK(cond, ...) TCHECK_SOFT(cond, failures, __VA_ARGS__)

static const char *route_mode = "metadata_only"; /* argv[2] */
static char admin_addr[64];               /* admin_listen of the next runtime opened ("" = off) */
static const char *deployment = "tstore"; /* of the next runtime opened */
static const char *segment_size = "16MiB";
static const char *reclaim_grace_ms = "2000"; /* the default */

/* GET path from the admin endpoint at admin_addr's port: the HTTP status, the body into out. */
static int http_get(uint16_t port, const char *path, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fd, out + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = 0;
    close(fd);
    int status = 0;
    if (sscanf(out, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    return status;
}

/* The unsigned value of "field": in json, or -1. */
static long long json_u(const char *json, const char *field)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", field);
    const char *p = strstr(json, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* kvmesh_quota_operations_total{operation="claim",result="ok"} in a /metrics body, or -1. */
static long long prom_claims(const char *body)
{
    const char *p =
        strstr(body, "kvmesh_quota_operations_total{operation=\"claim\",result=\"ok\"}");
    return p ? strtoll(strchr(p, '}') + 1, NULL, 10) : -1;
}

static kvmesh_t *open_rt2(const char *url, const char *policies, const char *memory, bool evict,
                          int *rc_out)
{
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (admin_addr[0])
        kvmesh_config_set(cfg, "admin_listen", admin_addr);
    kvmesh_config_set(cfg, "metadata_url", url);
    kvmesh_config_set(cfg, "deployment", deployment);
    kvmesh_config_set(cfg, "memory_size", memory);
    kvmesh_config_set(cfg, "segment_size", segment_size);
    kvmesh_config_set(cfg, "reclaim_grace_ms", reclaim_grace_ms);
    kvmesh_config_set(cfg, "max_object_size", "1MiB");
    kvmesh_config_set(cfg, "route_mode", route_mode);
    /* 30 s, not 10: beside two busy loops on a 2-core host a 40-item batch put with its quota
     * claims answered KVMESH_ETIMEDOUT though every item was written (tenant_store_etcd) */
    kvmesh_config_set(cfg, "request_timeout_ms", "30000");
    kvmesh_config_set(cfg, "tenant_quota_evict", evict ? "true" : "false");
    int rc = kvmesh_config_set(cfg, "tenant_policies", policies);
    kvmesh_t *kv = NULL;
    if (rc == 0)
        rc = kvmesh_open(&kv, cfg);
    kvmesh_config_free(cfg);
    *rc_out = rc;
    return rc == 0 ? kv : NULL;
}

/* Starts kvmeshd (a separate runtime process) on the deployment; waits (bounded, 30 s) for its
 * ready file. Returns the pid (> 0) once ready, 0 when it exited first (*status = its status),
 * -1 on timeout (killed). */
static pid_t spawn_daemon(const char *url, const char *policies, const char *dir, int i,
                          int *status)
{
    char bin[600], ready[400], log[400], pset[700];
    const char *bd = getenv("KVMESH_BIN_DIR");
    snprintf(bin, sizeof(bin), "%s/kvmeshd", bd ? bd : KVMESH_BIN_DIR);
    snprintf(ready, sizeof(ready), "%s/ready-%d", dir, i);
    snprintf(log, sizeof(log), "%s/daemon-%d.log", dir, i);
    snprintf(pset, sizeof(pset), "tenant_policies=%s", policies);
    char mset[64];
    snprintf(mset, sizeof(mset), "route_mode=%s", route_mode);
    unlink(ready);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        const char *argv[] = {bin,
                              "--set",
                              "metadata_url=",
                              "--set",
                              "deployment=tstore",
                              "--set",
                              mset,
                              "--set",
                              "memory_size=32MiB",
                              "--set",
                              "segment_size=16MiB",
                              "--set",
                              "max_object_size=1MiB",
                              "--set",
                              pset,
                              "--ready-file",
                              ready,
                              NULL};
        char murl[600];
        snprintf(murl, sizeof(murl), "metadata_url=%s", url);
        argv[2] = murl;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int t = 0; t < 300; t++) { /* 30 s */
        struct stat st;
        if (stat(ready, &st) == 0 && st.st_size > 0)
            return pid;
        if (waitpid(pid, status, WNOHANG) == pid)
            return 0;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return -1;
}

static void stop_daemon(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int t = 0; t < 100; t++) { /* 10 s, then SIGKILL */
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static bool file_has(const char *path, const char *needle)
{
    static char buf[65536];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static kvmesh_t *open_rt(const char *url, const char *policies, const char *memory, int *rc_out)
{
    return open_rt2(url, policies, memory, false, rc_out);
}

static const kvmesh_put_opts_t *put_opts; /* NULL = defaults */

static int put(kvmesh_t *kv, const char *tenant, const char *domain, const char *key, size_t len,
               char fill)
{
    char *v = malloc(len ? len : 1);
    memset(v, fill, len);
    kvmesh_scope_t sc = {tenant, domain};
    int rc = kvmesh_put(kv, &sc, key, strlen(key), v, len, put_opts);
    free(v);
    return rc;
}

/* 0 when the object reads back with `len` bytes of `fill`; else the rc (or -1 for other bytes) */
static int get_is(kvmesh_t *kv, const char *tenant, const char *domain, const char *key, size_t len,
                  char fill)
{
    kvmesh_scope_t sc = {tenant, domain};
    void *out = NULL;
    size_t n = 0;
    int rc = kvmesh_get(kv, &sc, key, strlen(key), &out, &n);
    if (rc)
        return rc;
    int ok = n == len;
    for (size_t i = 0; ok && i < n; i++)
        ok = ((char *)out)[i] == fill;
    kvmesh_free(out);
    return ok ? 0 : -1;
}

static int rm(kvmesh_t *kv, const char *tenant, const char *domain, const char *key)
{
    kvmesh_scope_t sc = {tenant, domain};
    return kvmesh_remove(kv, &sc, key, strlen(key));
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "redis";
    if (argc > 2)
        route_mode = argv[2];
    testsrv_t *srv = NULL;
    int rc = testsrv_start_named(&srv, backend);
    if (rc != 0)
        return 1;
    const char *url = testsrv_url(srv);
    const char *pol = "acme:1000:3,beta:100KiB:100,cf:10000:10,bt:1MiB:200";

    /* a malformed policy is refused by the field table, naming the field and the problem */
    int orc = 0;
    kvmesh_t *bad = open_rt(url, "acme:1000", "32MiB", &orc);
    CHECK(!bad && orc == KVMESH_ECONFIG && strstr(kvmesh_last_error(), "tenant_policies") &&
              strstr(kvmesh_last_error(), "policy 1"),
          "malformed policy accepted");
    bad = open_rt(url, "bad tenant:1:1", "32MiB", &orc);
    CHECK(!bad && orc == KVMESH_ECONFIG && strstr(kvmesh_last_error(), "tenant id rule"),
          "invalid tenant id accepted");

    uint16_t admin_port = testsrv_free_port();
    snprintf(admin_addr, sizeof(admin_addr), "127.0.0.1:%u", admin_port);
    kvmesh_t *a = open_rt(url, pol, "32MiB", &orc);
    admin_addr[0] = 0;
    CHECK(a, "open a: %d", orc);
    uint16_t admin_port_b = testsrv_free_port();
    snprintf(admin_addr, sizeof(admin_addr), "127.0.0.1:%u", admin_port_b);
    kvmesh_t *b = open_rt(url, pol, "32MiB", &orc);
    admin_addr[0] = 0;
    CHECK(b, "open b (same policy): %d", orc);
    if (!a || !b)
        goto out;

    /* objects limit */
    CHECK(put(a, "acme", NULL, "k1", 200, 'a') == 0, "k1");
    CHECK(put(a, "acme", NULL, "k2", 200, 'b') == 0, "k2");
    CHECK(put(b, "acme", NULL, "k3", 200, 'c') == 0, "k3 via b");
    rc = put(b, "acme", NULL, "k4", 10, 'd');
    CHECK(rc == KVMESH_EQUOTA && strstr(kvmesh_last_error(), "objects") &&
              strstr(kvmesh_last_error(), "3"),
          "4th object: rc %d", rc);
    /* too big for the tenant at all */
    rc = put(a, "acme", NULL, "huge", 1001, 'h');
    CHECK(rc == KVMESH_ETOOBIG && strstr(kvmesh_last_error(), "max_bytes"), "huge: rc %d", rc);
    /* remove refunds one object and its bytes */
    CHECK(rm(a, "acme", NULL, "k1") == 0, "rm k1");
    CHECK(get_is(a, "acme", NULL, "k1", 0, 0) == KVMESH_ENOENT, "k1 gone");
    CHECK(put(b, "acme", NULL, "k4", 200, 'd') == 0, "k4 after refund");
    /* bytes limit: 600 committed; overwrite k2 200 -> 600 gives 1000 = the limit */
    CHECK(put(a, "acme", NULL, "k2", 600, 'B') == 0, "k2 to 600");
    rc = put(a, "acme", NULL, "k3", 201, 'C');
    CHECK(rc == KVMESH_EQUOTA && strstr(kvmesh_last_error(), "bytes") &&
              strstr(kvmesh_last_error(), "1000"),
          "over bytes: rc %d", rc);
    CHECK(get_is(b, "acme", NULL, "k3", 200, 'c') == 0, "refused overwrite kept k3");
    /* shrinking overwrite refunds: k2 600 -> 100, then k3 can grow to 500 */
    CHECK(put(b, "acme", NULL, "k2", 100, 'x') == 0, "shrink k2");
    CHECK(put(a, "acme", NULL, "k3", 500, 'y') == 0, "grow k3 after shrink");
    CHECK(get_is(a, "acme", NULL, "k2", 100, 'x') == 0, "k2 content");
    CHECK(get_is(b, "acme", NULL, "k3", 500, 'y') == 0, "k3 content");

    /* scopes: the same key in another tenant and in a domain of acme */
    CHECK(put(a, "beta", NULL, "k2", 3000, 'z') == 0, "beta/k2");
    rc = put(a, "acme", "d1", "k2", 10, 'q');
    CHECK(rc == KVMESH_EQUOTA, "acme/d1/k2 shares acme's object limit: rc %d", rc);
    CHECK(rm(a, "acme", NULL, "k4") == 0, "rm k4");
    CHECK(put(a, "acme", "d1", "k2", 10, 'q') == 0, "acme/d1/k2");
    CHECK(get_is(b, "acme", NULL, "k2", 100, 'x') == 0, "acme/k2 unchanged");
    CHECK(get_is(b, "beta", NULL, "k2", 3000, 'z') == 0, "beta/k2 own bytes");
    CHECK(get_is(b, "acme", "d1", "k2", 10, 'q') == 0, "acme/d1/k2 own bytes");
    CHECK(get_is(b, "acme", "d2", "k2", 0, 0) == KVMESH_ENOENT, "acme/d2/k2 absent");
    {
        kvmesh_route_info_t ri[3];
        kvmesh_scope_t s_acme = {"acme", NULL}, s_beta = {"beta", NULL}, s_d1 = {"acme", "d1"},
                       s_d2 = {"acme", "d2"}, s_gamma = {"gamma", NULL};
        CHECK(kvmesh_route_query(b, &s_acme, "k2", 2, &ri[0]) == 0 && ri[0].length == 100,
              "route acme/k2");
        CHECK(kvmesh_route_query(b, &s_beta, "k2", 2, &ri[1]) == 0 && ri[1].length == 3000,
              "route beta/k2");
        CHECK(kvmesh_route_query(b, &s_d1, "k2", 2, &ri[2]) == 0 && ri[2].length == 10,
              "route acme/d1/k2");
        CHECK(ri[0].checksum != ri[1].checksum && ri[0].checksum != ri[2].checksum,
              "three independent routes");
        CHECK(kvmesh_route_query(b, &s_d2, "k2", 2, &ri[0]) == KVMESH_ENOENT,
              "cross-domain route query is not-found");
        CHECK(kvmesh_route_query(b, &s_gamma, "k2", 2, &ri[0]) == KVMESH_ENOENT,
              "cross-tenant route query is not-found");
    }
    CHECK(rm(b, "acme", "d2", "k2") == KVMESH_ENOENT, "cross-domain delete is not-found");
    CHECK(rm(b, "gamma", NULL, "k2") == KVMESH_ENOENT, "cross-tenant delete is not-found");
    CHECK(rm(b, "beta", NULL, "k2") == 0, "rm beta/k2");
    CHECK(get_is(a, "acme", NULL, "k2", 100, 'x') == 0, "acme/k2 survives beta's delete");
    CHECK(get_is(a, "acme", "d1", "k2", 10, 'q') == 0, "acme/d1/k2 survives");
    /* acme now: k2 100 + k3 500 + d1/k2 10 = 610 bytes, 3 objects: exactly full on objects */
    rc = put(b, "acme", "d1", "k9", 1, 'w');
    CHECK(rc == KVMESH_EQUOTA && strstr(kvmesh_last_error(), "objects"), "full: rc %d", rc);
    CHECK(rm(b, "acme", "d1", "k2") == 0, "rm d1/k2");
    rc = put(b, "acme", "d1", "k9", 401, 'w');
    CHECK(rc == KVMESH_EQUOTA && strstr(kvmesh_last_error(), "bytes"), "401 over: rc %d", rc);
    CHECK(put(b, "acme", "d1", "k9", 400, 'w') == 0, "400 fits exactly");

    /* /stats?tenant=acme answers from the accounting rows: k2 100 + k3 500 + d1/k9 400 */
    static char body[8192];
    int st = http_get(admin_port, "/stats?tenant=acme", body, sizeof(body));
    const char *qj = strstr(body, "\"quota\":");
    CHECK(st == 200 && qj, "stats acme: %d %s", st, body);
    if (qj) {
        CHECK(json_u(qj, "committed_bytes") == 1000 && json_u(qj, "committed_objects") == 3 &&
                  json_u(qj, "pending_bytes") == 0 && json_u(qj, "pending_objects") == 0 &&
                  json_u(qj, "used_bytes") == 1000 && json_u(qj, "max_bytes") == 1000 &&
                  json_u(qj, "max_objects") == 3 && json_u(qj, "policy_version") == 1 &&
                  json_u(qj, "ops_publishing") == 0 && json_u(qj, "recon_backlog") == 0,
              "acme accounting: %s", qj);
    }
    st = http_get(admin_port, "/stats?tenant=beta", body, sizeof(body));
    qj = strstr(body, "\"quota\":");
    CHECK(st == 200 && qj && json_u(qj, "committed_objects") == 0 &&
              json_u(qj, "committed_bytes") == 0,
          "beta accounting after its delete: %s", body);
    st = http_get(admin_port, "/stats?tenant=gamma", body, sizeof(body));
    CHECK(st == 200 && !strstr(body, "\"quota\":"), "gamma has no quota member: %s", body);
    st = http_get(admin_port, "/stats?tenant=acme%2Fprod", body, sizeof(body));
    CHECK(st == 400 && strstr(body, "tenant id rule"), "bad tenant id: %d %s", st, body);

    /* metadata round trips of the quota protocol per write: each runtime's tn_t counts every
     * metadata call it issues; the calls of its background reconciliation passes and the one
     * usage read that renders each answer are subtracted (the route's own calls are separate).
     * Both runtimes are counted: with EmbeddedWrh routes the claim is made by the key's shard
     * primary (a or b). Goal: <= 3 (reserve, claim-publish, finalize) with a warm cache. */
    const uint16_t ports[2] = {admin_port, admin_port_b};
    long long rt0 = 0, rt1 = 0, per_rt[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        http_get(ports[r], "/stats?tenant=beta", body, sizeof(body));
        const char *qb = strstr(body, "\"quota\":") ? strstr(body, "\"quota\":") : body;
        per_rt[r] = json_u(qb, "meta_round_trips") - json_u(qb, "recon_round_trips");
        rt0 += per_rt[r];
    }
    static char mbody[1 << 20];
    http_get(admin_port, "/metrics", mbody, sizeof(mbody));
    long long claims0 = prom_claims(mbody);
    enum { RT_PUTS = 20 };
    for (int i = 0; i < RT_PUTS; i++) {
        char k[16];
        snprintf(k, sizeof(k), "rt%d", i);
        CHECK(put(a, "beta", NULL, k, 100, 'r') == 0, "beta %s", k);
    }
    for (int r = 0; r < 2; r++) {
        http_get(ports[r], "/stats?tenant=beta", body, sizeof(body));
        const char *qb = strstr(body, "\"quota\":") ? strstr(body, "\"quota\":") : body;
        long long now = json_u(qb, "meta_round_trips") - json_u(qb, "recon_round_trips") - 1;
        per_rt[r] = now - per_rt[r];
        rt1 += now;
    }
    http_get(admin_port, "/metrics", mbody, sizeof(mbody));
    long long claims1 = prom_claims(mbody);
    printf("quota metadata round trips: %lld for %d puts (%.2f per write; writer a %lld, b %lld); "
           "%lld claims counted at the writer\n",
           rt1 - rt0, RT_PUTS, (double)(rt1 - rt0) / RT_PUTS, per_rt[0], per_rt[1],
           claims1 - claims0);
    /* MetadataOnly: the writer predicts the next version ((1, seq + 1)) and claims it itself.
     * EmbeddedWrh: the key's shard primary claims the version it is about to publish inside
     * its CAS handling (route_cas_claim; the records' hints travel with the CAS request and
     * reply), so b, when primary, makes claims for a's writes. 3 per write in both modes. */
    CHECK(rt0 >= 0 && rt1 - rt0 <= 3 * RT_PUTS && rt1 - rt0 >= 2 * RT_PUTS,
          "round trips %lld for %d puts (bound 3 per write)", rt1 - rt0, RT_PUTS);
    CHECK(claims1 - claims0 == RT_PUTS, "claims %lld for %d puts", claims1 - claims0, RT_PUTS);
    if (strcmp(route_mode, "metadata_only") == 0)
        CHECK(per_rt[1] == 0, "metadata_only: b made %lld quota calls", per_rt[1]);
    else /* b is the primary of about half the shards: it claimed those writes */
        CHECK(per_rt[1] > 0, "embedded_wrh: b (a primary) made no claim for a's writes");

    /* the CLI, a separate runtime process, shows the quota error text (acme is full) */
    {
        char cmd[2048];
        const char *bin = getenv("KVMESH_BIN_DIR");
        snprintf(cmd, sizeof(cmd),
                 "%s/kvmesh put --metadata %s --deployment tstore --tenant acme --set "
                 "tenant_policies=%s --set memory_size=0 --set route_mode=%s cli-key "
                 "hello 2>&1",
                 bin ? bin : KVMESH_BIN_DIR, url, pol, route_mode);
        FILE *p = popen(cmd, "r");
        char outb[2048] = "";
        size_t got = p ? fread(outb, 1, sizeof(outb) - 1, p) : 0;
        outb[got] = 0;
        int status = p ? pclose(p) : -1;
        printf("kvmesh put over quota: %s", outb);
        CHECK(status != 0 && strstr(outb, "quota exceeded") && strstr(outb, "max_"),
              "CLI output: %s (status %d)", outb, status);
    }

    /* batches: canonical order, all-or-nothing before any data transfer. beta holds 20
     * objects (rt0..rt19); max_objects 100 */
    {
        enum { NB = 41 };
        static char keys[NB][16], vals[NB][64];
        kvmesh_batch_item_t items[NB];
        kvmesh_scope_t sc = {"beta", NULL};
        const int sizes[3] = {40, 41, 40}; /* 20+40 = 60 ok; +41 = 101 refused; +40 = 100 ok */
        for (int round = 0; round < 3; round++) {
            int nb = sizes[round];
            for (int i = 0; i < nb; i++) {
                snprintf(keys[i], sizeof(keys[i]), "%c%d", 'a' + round, i);
                memset(vals[i], 'a' + round, sizeof(vals[i]));
                items[i] = (kvmesh_batch_item_t){
                    .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = 64};
            }
            rc = kvmesh_batch_put(a, &sc, items, (size_t)nb, NULL);
            char err[600];
            snprintf(err, sizeof(err), "%s", kvmesh_last_error());
            int present = 0;
            for (int i = 0; i < nb; i++)
                present += get_is(b, "beta", NULL, keys[i], 64, (char)('a' + round)) == 0;
            if (round == 1) {
                printf("over-quota batch: %s\n", err);
                CHECK(rc == KVMESH_EQUOTA && strstr(err, "batch refused") && strstr(err, "objects"),
                      "over-quota batch: rc %d: %s", rc, err);
                int refused = 0;
                for (int i = 0; i < nb; i++)
                    refused += items[i].rc == KVMESH_EQUOTA;
                CHECK(refused == nb && present == 0, "refused %d, written %d of %d", refused,
                      present, nb);
            } else {
                CHECK(rc == 0 && present == nb, "batch round %d: rc %d, %d of %d", round, rc,
                      present, nb);
            }
            st = http_get(admin_port, "/stats?tenant=beta", body, sizeof(body));
            const char *qb = strstr(body, "\"quota\":");
            long long want = round == 0 ? 60 : round == 1 ? 60 : 100;
            CHECK(qb && json_u(qb, "committed_objects") == want &&
                      json_u(qb, "pending_objects") == 0,
                  "beta after batch round %d: %s", round, body);
        }
    }

    /* A put whose route CAS fails outright after its claim (the operation PUBLISHING) is
     * published again by the writer inside the call: same content op and publish token, the
     * current primary claims again (EmbeddedWrh) or the writer's claim stands (MetadataOnly).
     * Before, the put failed and the object stayed charged, locked (EAGAIN) and degraded until
     * an operator aborted it. The fault (test-only, kvm_quota_test_fail_after_claim) fails the
     * CAS after the next claim of a or b: EUNAVAILABLE (with EmbeddedWrh the primary's answer
     * that it lost the shard, retried by the route client) and EBACKEND (answered to the
     * writer as is). Then the key is writable again and the accounting exact. */
    {
        struct kvm_rt *ra = kvmesh_runtime_of(a), *rb = kvmesh_runtime_of(b);
        const int faults[2] = {KVMESH_EUNAVAILABLE, KVMESH_EBACKEND};
        for (int f = 0; f < 2; f++) {
            char k[16];
            snprintf(k, sizeof(k), "cf%d", f);
            kvm_quota_test_fail_after_claim(ra, 1, faults[f]);
            kvm_quota_test_fail_after_claim(rb, 1, faults[f]);
            rc = put(a, "cf", NULL, k, 300, (char)('a' + f));
            uint32_t left = kvm_quota_test_fail_after_claim(ra, 0, 0) +
                            kvm_quota_test_fail_after_claim(rb, 0, 0);
            CHECK(left == 1, "fault %s: %u of 2 armed faults left (one claim expected)",
                  kvmesh_strerror(faults[f]), left);
            CHECK(rc == 0, "put %s with the CAS failing after its claim (%s): rc %d", k,
                  kvmesh_strerror(faults[f]), rc);
            CHECK(get_is(b, "cf", NULL, k, 300, (char)('a' + f)) == 0, "%s reads back", k);
            rc = put(b, "cf", NULL, k, 200, (char)('A' + f));
            CHECK(rc == 0, "%s writable again (not locked): rc %d", k, rc);
            CHECK(get_is(a, "cf", NULL, k, 200, (char)('A' + f)) == 0, "%s overwritten", k);
        }
        st = http_get(admin_port, "/stats?tenant=cf", body, sizeof(body));
        const char *qc = strstr(body, "\"quota\":");
        CHECK(st == 200 && qc && json_u(qc, "committed_bytes") == 400 &&
                  json_u(qc, "committed_objects") == 2 && json_u(qc, "pending_bytes") == 0 &&
                  json_u(qc, "pending_objects") == 0 && json_u(qc, "ops_publishing") == 0 &&
                  json_u(qc, "recon_backlog") == 0,
              "cf accounting after the failed CASes: %s", body);
    }

    /* a batch of more than TN_BATCH_MAX (64) quota items is all-or-nothing too: reserved in
     * canonical key order in chunks of 64, a refusal in the 4th chunk aborts the 3 before it.
     * bt holds 1 object (max_objects 200): 200 more is one over, nothing is stored or charged
     * and the error names the refused item (the last in canonical order, bb199, given first);
     * then 70 (two chunks) are admitted — on Redis only: on etcd (and more so under ASan) the
     * 70 items' claims and finalizes contending on one usage row outlast the 10 s request
     * deadline of the one batch call; chunks reserved in sequence are shown by the refusal. */
    {
        enum { NBT = 200 };
        static char keys[NBT][16], vals[NBT][32];
        static kvmesh_batch_item_t items[NBT];
        kvmesh_scope_t sc = {"bt", NULL};
        CHECK(put(a, "bt", NULL, "base", 32, 'o') == 0, "bt base");
        for (int round = 0; round < (strcmp(backend, "etcd") ? 2 : 1); round++) {
            int nb = round == 0 ? NBT : 70;
            for (int i = 0; i < nb; i++) {
                snprintf(keys[i], sizeof(keys[i]), "bb%03d", nb - 1 - i); /* reverse order */
                memset(vals[i], 'p' + round, sizeof(vals[i]));
                items[i] = (kvmesh_batch_item_t){
                    .key = keys[i], .key_len = strlen(keys[i]), .buf = vals[i], .len = 32};
            }
            rc = kvmesh_batch_put(a, &sc, items, (size_t)nb, NULL);
            char err[600];
            snprintf(err, sizeof(err), "%s", kvmesh_last_error());
            int present = 0, refused = 0;
            for (int i = 0; i < nb; i++) {
                present += get_is(b, "bt", NULL, keys[i], 32, (char)('p' + round)) == 0;
                refused += items[i].rc == KVMESH_EQUOTA;
            }
            st = http_get(admin_port, "/stats?tenant=bt", body, sizeof(body));
            const char *qb = strstr(body, "\"quota\":");
            long long want = round == 0 ? 1 : 71;
            CHECK(qb && json_u(qb, "committed_objects") == want &&
                      json_u(qb, "committed_bytes") == want * 32 &&
                      json_u(qb, "pending_objects") == 0 && json_u(qb, "pending_bytes") == 0 &&
                      json_u(qb, "ops_pending") == 0,
                  "bt after the %d-item batch: %s", nb, body);
            if (round == 0) {
                printf("200-item batch over quota: %s\n", err);
                CHECK(rc == KVMESH_EQUOTA && strstr(err, "batch refused as a whole") &&
                          strstr(err, "item 0 of 200, key 'bb199'") && strstr(err, "objects"),
                      "200-item batch one over: rc %d: %s", rc, err);
                CHECK(refused == nb && present == 0, "200-item batch: refused %d, stored %d",
                      refused, present);
            } else {
                CHECK(rc == 0 && present == nb, "70-item batch: rc %d, %d of %d stored (%s)", rc,
                      present, nb, err);
            }
        }
    }

    /* a tenant without a policy is not limited */
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof(k), "free%d", i);
        CHECK(put(a, "gamma", NULL, k, 2000, 'g') == 0, "gamma %s", k);
    }

    /* tenant-local recovery: t1 over quota evicts only t1's oldest objects; t2 is untouched */
    kvmesh_t *e =
        open_rt2(url, "acme:1000:3,beta:100KiB:100,t1:1000:4,t2:1000:4", "32MiB", true, &orc);
    CHECK(e, "open e (evicting): %d", orc);
    for (int i = 0; e && i < 4; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        CHECK(put(e, "t2", NULL, k, 200, (char)('A' + i)) == 0, "t2 %s", k);
        CHECK(put(e, "t1", NULL, k, 200, (char)('a' + i)) == 0, "t1 %s", k);
    }
    if (e) {
        CHECK(put(e, "t1", NULL, "k4", 200, 'e') == 0, "t1 k4 recovers by eviction");
        CHECK(get_is(a, "t1", NULL, "k0", 0, 0) == KVMESH_ENOENT, "t1/k0 (oldest) evicted");
        for (int i = 1; i < 5; i++) {
            char k[16];
            snprintf(k, sizeof(k), "k%d", i);
            CHECK(get_is(a, "t1", NULL, k, 200, (char)('a' + i)) == 0, "t1 %s kept", k);
        }
        CHECK(put(e, "t1", NULL, "big", 900, 'G') == 0, "t1 big recovers by eviction");
        CHECK(get_is(b, "t1", NULL, "big", 900, 'G') == 0, "t1 big readable");
        int left = 0;
        for (int i = 0; i < 5; i++) {
            char k[16];
            snprintf(k, sizeof(k), "k%d", i);
            left += get_is(b, "t1", NULL, k, 200, (char)('a' + i)) == 0;
        }
        CHECK(left == 0, "t1 small objects left: %d (900 + 200 > 1000)", left);
        rc = put(e, "t1", NULL, "huge", 1001, 'H');
        CHECK(rc == KVMESH_ETOOBIG, "over max_bytes is not recovered: rc %d", rc);
        for (int i = 0; i < 4; i++) {
            char k[16];
            snprintf(k, sizeof(k), "k%d", i);
            CHECK(get_is(b, "t2", NULL, k, 200, (char)('A' + i)) == 0, "t2 %s untouched", k);
        }
        rc = put(a, "acme", "d1", "k10", 1, 'w');
        CHECK(rc == KVMESH_EQUOTA, "runtime a (no eviction) still refuses acme: rc %d", rc);
        kvmesh_close(e);
    }

    /* CLOCK eviction under memory pressure refunds through the delete protocol: a runtime alone
     * in its deployment with 2 MiB of DRAM takes 80 objects of 64 KiB of a tenant whose byte
     * limit (16 MiB) is far above DRAM, so the owner evicts; the accounting ends equal to the
     * objects still readable (before the refund it kept every evicted object charged). */
    {
        uint16_t vport = testsrv_free_port();
        snprintf(admin_addr, sizeof(admin_addr), "127.0.0.1:%u", vport);
        deployment = "tevict";
        segment_size = "1MiB";
        reclaim_grace_ms = "20"; /* evicted bytes come back at once: puts wait less */
        kvmesh_t *v = open_rt(url, "t5:16MiB:1000", "2MiB", &orc);
        admin_addr[0] = 0;
        deployment = "tstore";
        segment_size = "16MiB";
        reclaim_grace_ms = "2000";
        CHECK(v, "open the evicting runtime: %d", orc);
        enum { NV = 80, VLEN = 64 * 1024 };
        int okput = 0;
        for (int i = 0; v && i < NV; i++) {
            char k[16];
            snprintf(k, sizeof(k), "v%d", i);
            okput += put(v, "t5", NULL, k, VLEN, (char)('a' + i % 26)) == 0;
        }
        CHECK(!v || okput == NV, "puts under memory pressure: %d of %d", okput, NV);
        long long live = 0, cb = -1, co = -1, pend = -1, publ = -1;
        char vbody[4096];
        /* the refunds' finalizes run after the eviction CAS: wait (bounded, 10 s) until nothing
         * is pending or publishing and the rows equal the readable objects */
        for (int tries = 0; v && tries < 100; tries++) {
            live = 0;
            for (int i = 0; i < NV; i++) {
                char k[16];
                snprintf(k, sizeof(k), "v%d", i);
                live += get_is(v, "t5", NULL, k, VLEN, (char)('a' + i % 26)) == 0;
            }
            int hs = http_get(vport, "/stats?tenant=t5", vbody, sizeof(vbody));
            const char *qb = hs == 200 ? strstr(vbody, "\"quota\":") : NULL;
            cb = qb ? json_u(qb, "committed_bytes") : -1;
            co = qb ? json_u(qb, "committed_objects") : -1;
            pend = qb ? json_u(qb, "pending_objects") : -1;
            publ = qb ? json_u(qb, "ops_publishing") : -1;
            if (pend == 0 && publ == 0 && co == live && cb == live * VLEN)
                break;
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        printf("eviction: %lld of %d objects readable, committed %lld bytes / %lld objects\n", live,
               NV, cb, co);
        CHECK(!v || (live > 0 && live < NV), "eviction happened: %lld of %d readable", live, NV);
        CHECK(!v || (pend == 0 && publ == 0 && co == live && cb == live * VLEN),
              "accounting after eviction: committed %lld bytes / %lld objects, pending %lld, "
              "publishing %lld; readable %lld objects of %d bytes: %s",
              cb, co, pend, publ, live, VLEN, vbody);
        if (v)
            kvmesh_close(v);
    }

    /* two kvmeshd processes hold the data (2 replicas, hard-pinned) of a client-only runtime's
     * quota writes; reads from another runtime; a daemon with another hard policy refuses to
     * start, naming the field */
    {
        char pol3[300];
        snprintf(pol3, sizeof(pol3), "%s,t3:2000:10", pol);
        const char *dir = testsrv_dir(srv);
        int dst = 0;
        pid_t d1 = spawn_daemon(url, pol3, dir, 1, &dst);
        pid_t d2 = spawn_daemon(url, pol3, dir, 2, &dst);
        CHECK(d1 > 0 && d2 > 0, "daemons ready: %d %d", (int)d1, (int)d2);
        kvmesh_t *cl = open_rt(url, pol3, "0", &orc);
        CHECK(cl, "client-only runtime: %d", orc);
        /* the objects go to the two daemons only (hard pin to their runtime ids) */
        char ids[2][64] = {"", ""};
        for (int i = 0; i < 2; i++) {
            char rp[400];
            snprintf(rp, sizeof(rp), "%s/ready-%d", dir, i + 1);
            FILE *f = fopen(rp, "r");
            if (!f || fscanf(f, "%63s", ids[i]) != 1)
                ids[i][0] = 0;
            if (f)
                fclose(f);
        }
        const char *pref[2] = {ids[0], ids[1]};
        kvmesh_put_opts_t pin = {
            .replicas = 2, .preferred_owners = pref, .n_preferred = 2, .hard_pin = true};
        CHECK(ids[0][0] && ids[1][0], "daemon ids from the ready files");
        put_opts = &pin;
        for (int i = 0; cl && i < 10; i++) {
            char k[16];
            snprintf(k, sizeof(k), "p%d", i);
            CHECK(put(cl, "t3", NULL, k, 150, (char)('0' + i)) == 0, "t3 %s", k);
        }
        if (cl) {
            rc = put(cl, "t3", NULL, "p10", 150, 'x');
            CHECK(rc == KVMESH_EQUOTA && strstr(kvmesh_last_error(), "max_objects 10"),
                  "t3 11th object: rc %d", rc);
            CHECK(rm(cl, "t3", NULL, "p0") == 0, "rm t3/p0");
            CHECK(put(cl, "t3", NULL, "p10", 150, 'x') == 0, "t3 p10 after the refund");
            for (int i = 1; i < 10; i++) {
                char k[16];
                snprintf(k, sizeof(k), "p%d", i);
                CHECK(get_is(a, "t3", NULL, k, 150, (char)('0' + i)) == 0, "t3 %s readable", k);
            }
            kvmesh_close(cl);
        }
        put_opts = NULL;
        char pbad[300], logp[400];
        snprintf(pbad, sizeof(pbad), "%s,t3:2000:11", pol);
        pid_t d3 = spawn_daemon(url, pbad, dir, 3, &dst);
        snprintf(logp, sizeof(logp), "%s/daemon-3.log", dir);
        CHECK(d3 == 0 && WIFEXITED(dst) && WEXITSTATUS(dst) != 0 && file_has(logp, "max_objects") &&
                  file_has(logp, "t3"),
              "daemon with another policy: pid %d status %d", (int)d3, dst);
        if (d3 > 0)
            stop_daemon(d3);
        stop_daemon(d1);
        stop_daemon(d2);
    }

    /* a runtime with another hard policy is refused at open, naming the field */
    kvmesh_t *c = open_rt(url, "acme:1000:4,beta:100KiB:100", "0", &orc);
    CHECK(!c && orc == KVMESH_EINCOMPAT && strstr(kvmesh_last_error(), "max_objects") &&
              strstr(kvmesh_last_error(), "acme"),
          "differing policy: rc %d", orc);
    if (c)
        kvmesh_close(c);
    c = open_rt(url, "beta:100KiB:100:2", "0", &orc);
    CHECK(!c && orc == KVMESH_EINCOMPAT && strstr(kvmesh_last_error(), "policy_version"),
          "differing policy_version: rc %d", orc);
    if (c)
        kvmesh_close(c);
out:
    if (a)
        kvmesh_close(a);
    if (b)
        kvmesh_close(b);
    testsrv_stop(srv);
    if (failures) {
        fprintf(stderr, "tenant_store %s: %d failures\n", backend, failures);
        return 1;
    }
    printf("tenant_store %s: ok\n", backend);
    return 0;
}
