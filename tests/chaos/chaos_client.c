// SPDX-License-Identifier: Apache-2.0
/*
 * chaos_client.c — the chaos harness's workload: T threads, each one logical history process,
 * run a random mix of put / get / del over a small shared key space for a bounded time and
 * append every invocation and completion to a JSON-lines history (docs/reliability.md).
 *
 * Backends (the same workload, so results compare):
 *   kvmesh  a client-only runtime (memory_size 0) through the public API (include/kvmesh.h);
 *   redis   a minimal RESP client (SET / GET / DEL) talking to whatever address the file given
 *           by --redis-file names (the harness rewrites it at fail-over); an open connection is
 *           kept until it fails, as a real client pool does.
 *
 * Result mapping (honest, conservative): ok = acknowledged; a get that failed is "fail" (a read
 * changes nothing); a put or del is "fail" only for errors raised before anything was sent
 * (bad input, no space, no quota, connect refused); every other error — KVMESH_ETIMEDOUT,
 * KVMESH_EINDETERMINATE, KVMESH_EUNAVAILABLE, a lost connection — is "info" (indeterminate).
 *
 * --final: each thread reads its share of the keys once, retrying until a read succeeds
 * (bounded: C_FINAL_KEY_MS per key and the duration); the harness runs this after healing
 * every fault.
 *
 * Every loop is bounded by --duration-ms; each operation by the request timeout. The history
 * file is owned by this process and written under one mutex, one line per event, flushed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvmesh.h"

#define C_MAX_THREADS  64
#define C_MAX_SETS     32
#define C_VAL_MAX      128
#define C_KEY_MAX      32
#define C_FINAL_KEY_MS 8000 /* --final: retry one key at most this long */

enum backend { B_KVMESH, B_REDIS };
enum otype { O_PUT, O_GET, O_DEL };
static const char *const FNAME[] = {"put", "get", "del"};

static struct {
    enum backend backend;
    int process_base, threads, keys, put_pct, del_pct, rate;
    uint64_t duration_ms, seed;
    bool final;
    const char *history, *redis_file, *tenant;
    const char *sets[C_MAX_SETS];
    int n_sets;
    int timeout_ms;
} opt = {.threads = 2,
         .keys = 16,
         .put_pct = 40,
         .del_pct = 10,
         .rate = 20,
         .duration_ms = 10000,
         .seed = 1,
         .tenant = "chaos",
         .timeout_ms = 2000};

static FILE *hist;
static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;
static kvmesh_t *kv;
static uint64_t t_end_ms;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ms(void)
{
    return mono_ns() / 1000000u;
}

static uint64_t rng(uint64_t *s)
{
    uint64_t x = *s += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* One history event. value: NULL writes null (absent / no value). err: optional note. */
static void emit(int process, const char *type, enum otype f, const char *key, const char *value,
                 const char *err)
{
    pthread_mutex_lock(&hist_mu);
    fprintf(hist, "{\"process\": %d, \"type\": \"%s\", \"f\": \"%s\", \"key\": \"%s\", ", process,
            type, FNAME[f], key);
    if (value)
        fprintf(hist, "\"value\": \"%s\", ", value);
    else
        fputs("\"value\": null, ", hist);
    fprintf(hist, "\"time\": %" PRIu64, mono_ns());
    if (err)
        fprintf(hist, ", \"error\": \"%s\"", err);
    fputs("}\n", hist);
    fflush(hist);
    pthread_mutex_unlock(&hist_mu);
}

/* Outcome of one operation: 0 ok, 1 definite failure, 2 indeterminate. */
enum outcome { OC_OK = 0, OC_FAIL = 1, OC_INFO = 2 };

/* ---- kvmesh backend ------------------------------------------------------------------------ */

static enum outcome kv_write_outcome(int rc)
{
    switch (rc) {
    case 0:
        return OC_OK;
    case KVMESH_EINVAL:
    case KVMESH_EBADKEY:
    case KVMESH_EBADTENANT:
    case KVMESH_EBADDOMAIN:
    case KVMESH_ETOOBIG:
    case KVMESH_ENOSPC:
    case KVMESH_EQUOTA:
        return OC_FAIL; /* refused before any route publication */
    default:
        return OC_INFO; /* timed out, indeterminate, unavailable, lost connection: may have applied
                         */
    }
}

static enum outcome kv_op(enum otype f, const char *key, const char *val, char *out, bool *absent,
                          const char **err)
{
    kvmesh_scope_t sc = {.tenant = opt.tenant, .domain = NULL};
    int rc;
    if (f == O_PUT) {
        rc = kvmesh_put(kv, &sc, key, strlen(key), val, strlen(val), NULL);
        *err = rc ? kvmesh_errname(rc) : NULL;
        return kv_write_outcome(rc);
    }
    if (f == O_DEL) {
        rc = kvmesh_remove(kv, &sc, key, strlen(key));
        if (rc == KVMESH_ENOENT)
            rc = 0; /* removing an absent key: done, state absent */
        *err = rc ? kvmesh_errname(rc) : NULL;
        return kv_write_outcome(rc);
    }
    void *buf = NULL;
    size_t len = 0;
    rc = kvmesh_get(kv, &sc, key, strlen(key), &buf, &len);
    if (rc == KVMESH_ENOENT) {
        *absent = true;
        return OC_OK;
    }
    if (rc != 0) {
        *err = kvmesh_errname(rc);
        return OC_FAIL;
    }
    *absent = false;
    size_t n = len < C_VAL_MAX - 1 ? len : C_VAL_MAX - 1;
    for (size_t i = 0; i < n; i++) { /* keep the JSON valid whatever bytes come back */
        char c = ((const char *)buf)[i];
        out[i] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? c : '?';
    }
    out[n] = '\0';
    kvmesh_free(buf);
    return OC_OK;
}

/* ---- redis backend ------------------------------------------------------------------------- */

struct rconn {
    int fd;
    char buf[4096];
    size_t len, pos;
};

static int redis_connect(struct rconn *c)
{
    char addr[128] = "";
    FILE *f = fopen(opt.redis_file, "r");
    if (!f)
        return -1;
    if (!fgets(addr, sizeof(addr), f)) {
        fclose(f);
        return -1;
    }
    fclose(f);
    addr[strcspn(addr, "\r\n")] = '\0';
    char *colon = strrchr(addr, ':');
    if (!colon)
        return -1;
    *colon = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = opt.timeout_ms / 1000,
                         .tv_usec = (opt.timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->len = c->pos = 0;
    return 0;
}

static void redis_drop(struct rconn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* Reads one CRLF-terminated line into line (without CRLF). -1 on timeout / close. */
static int redis_line(struct rconn *c, char *line, size_t cap)
{
    size_t n = 0;
    for (;;) {
        if (c->pos == c->len) {
            ssize_t r = recv(c->fd, c->buf, sizeof(c->buf), 0);
            if (r <= 0)
                return -1;
            c->len = (size_t)r;
            c->pos = 0;
        }
        char ch = c->buf[c->pos++];
        if (ch == '\n') {
            if (n > 0 && line[n - 1] == '\r')
                n--;
            line[n] = '\0';
            return 0;
        }
        if (n + 1 < cap)
            line[n++] = ch;
    }
}

static enum outcome redis_op(struct rconn *c, enum otype f, const char *key, const char *val,
                             char *out, bool *absent, const char **err)
{
    if (c->fd < 0 && redis_connect(c) != 0) {
        *err = "connect";
        return OC_FAIL; /* nothing was sent */
    }
    char req[512];
    int n;
    if (f == O_PUT)
        n = snprintf(req, sizeof(req), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
                     strlen(key), key, strlen(val), val);
    else
        n = snprintf(req, sizeof(req), "*2\r\n$3\r\n%s\r\n$%zu\r\n%s\r\n",
                     f == O_GET ? "GET" : "DEL", strlen(key), key);
    if (send(c->fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        redis_drop(c);
        *err = "send";
        return f == O_GET ? OC_FAIL : OC_INFO;
    }
    char line[512];
    if (redis_line(c, line, sizeof(line)) != 0) {
        redis_drop(c);
        *err = "no reply";
        return f == O_GET ? OC_FAIL : OC_INFO;
    }
    if (line[0] == '-') { /* e.g. READONLY on a replica: not applied */
        redis_drop(c);    /* re-resolve the primary */
        *err = "error reply";
        return OC_FAIL;
    }
    if (f != O_GET)
        return OC_OK; /* +OK or :N */
    if (line[0] != '$') {
        redis_drop(c);
        *err = "bad reply";
        return OC_FAIL;
    }
    long len = atol(line + 1);
    if (len < 0) {
        *absent = true;
        return OC_OK;
    }
    char data[512];
    if (redis_line(c, data, sizeof(data)) != 0) {
        redis_drop(c);
        *err = "no reply";
        return OC_FAIL;
    }
    *absent = false;
    size_t dn = strnlen(data, C_VAL_MAX - 1);
    memcpy(out, data, dn);
    out[dn] = '\0';
    return OC_OK;
}

/* ---- the workload -------------------------------------------------------------------------- */

struct worker {
    pthread_t th;
    int idx, process;
    uint64_t rs;
    long ops, oks, fails, infos;
};

static void one_op(struct worker *w, struct rconn *rc, enum otype f, const char *key,
                   const char *val, bool *read_ok)
{
    emit(w->process, "invoke", f, key, f == O_PUT ? val : NULL, NULL);
    char out[C_VAL_MAX] = "";
    bool absent = true;
    const char *err = NULL;
    enum outcome o = opt.backend == B_KVMESH ? kv_op(f, key, val, out, &absent, &err)
                                             : redis_op(rc, f, key, val, out, &absent, &err);
    const char *v = f == O_PUT ? val : (f == O_GET && !absent ? out : NULL);
    emit(w->process, o == OC_OK ? "ok" : o == OC_FAIL ? "fail" : "info", f, key, v, err);
    w->ops++;
    if (o == OC_OK)
        w->oks++;
    else if (o == OC_FAIL)
        w->fails++;
    else
        w->infos++;
    if (read_ok)
        *read_ok = o == OC_OK;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct rconn rc = {.fd = -1};
    char key[C_KEY_MAX], val[C_VAL_MAX];
    uint64_t seq = 0;
    uint64_t gap_ns = opt.rate > 0 ? 1000000000u / (uint64_t)opt.rate : 0;
    if (opt.final) {
        for (int k = w->idx; k < opt.keys; k += opt.threads) {
            snprintf(key, sizeof(key), "k%03d", k);
            bool ok = false;
            /* bounded per key, so one unreadable key leaves time for the others */
            uint64_t key_end = mono_ms() + C_FINAL_KEY_MS;
            for (int tries = 0; !ok && mono_ms() < t_end_ms && mono_ms() < key_end && tries < 200;
                 tries++) {
                one_op(w, &rc, O_GET, key, NULL, &ok);
                if (!ok)
                    usleep(150000);
            }
        }
        redis_drop(&rc);
        return NULL;
    }
    uint64_t next = mono_ns();
    while (mono_ms() < t_end_ms) {
        int r = (int)(rng(&w->rs) % 100);
        enum otype f = r < opt.put_pct ? O_PUT : r < opt.put_pct + opt.del_pct ? O_DEL : O_GET;
        snprintf(key, sizeof(key), "k%03d", (int)(rng(&w->rs) % (uint64_t)opt.keys));
        snprintf(val, sizeof(val), "p%d-%" PRIu64, w->process, ++seq);
        one_op(w, &rc, f, key, val, NULL);
        next += gap_ns;
        uint64_t now = mono_ns();
        if (next > now)
            usleep((useconds_t)((next - now) / 1000u));
        else
            next = now;
    }
    redis_drop(&rc);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: chaos_client --history FILE --process-base P [options]\n"
        "  --backend kvmesh|redis   (default kvmesh)\n"
        "  --set FIELD=VALUE        kvmesh configuration field (repeatable; memory_size is 0)\n"
        "  --redis-file PATH        file holding host:port of the current Redis primary\n"
        "  --threads T              logical processes P..P+T-1 (default 2)\n"
        "  --keys N                 key space k000..k(N-1) (default 16)\n"
        "  --put-pct N --del-pct N  operation mix, the rest are gets (default 40 / 10)\n"
        "  --rate R                 operations per second per thread (default 20; 0 = no limit)\n"
        "  --duration-ms MS         stop after MS (default 10000)\n"
        "  --timeout-ms MS          per-operation timeout (default 2000)\n"
        "  --seed S                 workload seed (default 1)\n"
        "  --final                  read every key once (retrying), then exit\n");
}

static int parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                                     \
    do {                                                                                           \
        if (!v) {                                                                                  \
            fprintf(stderr, "chaos_client: %s needs a value\n", a);                                \
            return -1;                                                                             \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        if (!strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--final")) {
            opt.final = true;
        } else if (!strcmp(a, "--backend")) {
            NEED();
            if (!strcmp(v, "kvmesh"))
                opt.backend = B_KVMESH;
            else if (!strcmp(v, "redis"))
                opt.backend = B_REDIS;
            else {
                fprintf(stderr, "chaos_client: --backend must be kvmesh or redis, not %s\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--set")) {
            NEED();
            if (opt.n_sets == C_MAX_SETS) {
                fprintf(stderr, "chaos_client: at most %d --set\n", C_MAX_SETS);
                return -1;
            }
            opt.sets[opt.n_sets++] = v;
        } else if (!strcmp(a, "--history")) {
            NEED();
            opt.history = v;
        } else if (!strcmp(a, "--redis-file")) {
            NEED();
            opt.redis_file = v;
        } else if (!strcmp(a, "--process-base")) {
            NEED();
            opt.process_base = atoi(v);
        } else if (!strcmp(a, "--threads")) {
            NEED();
            opt.threads = atoi(v);
        } else if (!strcmp(a, "--keys")) {
            NEED();
            opt.keys = atoi(v);
        } else if (!strcmp(a, "--put-pct")) {
            NEED();
            opt.put_pct = atoi(v);
        } else if (!strcmp(a, "--del-pct")) {
            NEED();
            opt.del_pct = atoi(v);
        } else if (!strcmp(a, "--rate")) {
            NEED();
            opt.rate = atoi(v);
        } else if (!strcmp(a, "--duration-ms")) {
            NEED();
            opt.duration_ms = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--timeout-ms")) {
            NEED();
            opt.timeout_ms = atoi(v);
        } else if (!strcmp(a, "--seed")) {
            NEED();
            opt.seed = strtoull(v, NULL, 10);
        } else {
            fprintf(stderr, "chaos_client: unknown option %s (see --help)\n", a);
            return -1;
        }
#undef NEED
    }
    if (!opt.history || opt.threads < 1 || opt.threads > C_MAX_THREADS || opt.keys < 1 ||
        opt.keys > 1000 || opt.put_pct + opt.del_pct > 100 || opt.timeout_ms < 1 ||
        (opt.backend == B_REDIS && !opt.redis_file)) {
        fprintf(stderr,
                "chaos_client: need --history, 1..%d threads, 1..1000 keys, a mix <= 100%% "
                "and (redis) --redis-file; see --help\n",
                C_MAX_THREADS);
        return -1;
    }
    return 0;
}

static int open_kvmesh(void)
{
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg)
        return -1;
    char tmo[32];
    snprintf(tmo, sizeof(tmo), "%d", opt.timeout_ms);
    int rc = kvmesh_config_set(cfg, "request_timeout_ms", tmo);
    for (int i = 0; rc == 0 && i < opt.n_sets; i++) {
        char field[64];
        const char *eq = strchr(opt.sets[i], '=');
        if (!eq || (size_t)(eq - opt.sets[i]) >= sizeof(field)) {
            fprintf(stderr, "chaos_client: --set wants FIELD=VALUE, not %s\n", opt.sets[i]);
            kvmesh_config_free(cfg);
            return -1;
        }
        memcpy(field, opt.sets[i], (size_t)(eq - opt.sets[i]));
        field[eq - opt.sets[i]] = '\0';
        rc = kvmesh_config_set(cfg, field, eq + 1);
    }
    if (rc == 0)
        rc = kvmesh_config_set(cfg, "memory_size", "0");
    if (rc != 0) {
        fprintf(stderr, "chaos_client: configuration: %s\n", kvmesh_last_error());
        kvmesh_config_free(cfg);
        return -1;
    }
    /* Joining may race the daemons' start or a fault; retry within the duration. */
    for (int tries = 0; tries < 100; tries++) {
        rc = kvmesh_open(&kv, cfg);
        if (rc == 0 || mono_ms() >= t_end_ms)
            break;
        fprintf(stderr, "chaos_client: open: %s: %s (retrying)\n", kvmesh_errname(rc),
                kvmesh_last_error());
        usleep(200000);
    }
    kvmesh_config_free(cfg);
    if (rc != 0) {
        fprintf(stderr, "chaos_client: could not join: %s\n", kvmesh_errname(rc));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv) != 0)
        return 2;
    t_end_ms = mono_ms() + opt.duration_ms;
    hist = fopen(opt.history, "a");
    if (!hist) {
        fprintf(stderr, "chaos_client: cannot open history %s: %s\n", opt.history, strerror(errno));
        return 1;
    }
    if (opt.backend == B_KVMESH && open_kvmesh() != 0) {
        fclose(hist);
        return 1;
    }
    struct worker ws[C_MAX_THREADS];
    memset(ws, 0, sizeof(ws));
    for (int i = 0; i < opt.threads; i++) {
        ws[i].idx = i;
        ws[i].process = opt.process_base + i;
        ws[i].rs = opt.seed * 1000003u + (uint64_t)ws[i].process;
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "chaos_client: pthread_create failed\n");
            return 1;
        }
    }
    long ops = 0, oks = 0, fails = 0, infos = 0;
    for (int i = 0; i < opt.threads; i++) {
        pthread_join(ws[i].th, NULL);
        ops += ws[i].ops;
        oks += ws[i].oks;
        fails += ws[i].fails;
        infos += ws[i].infos;
    }
    if (kv)
        kvmesh_close(kv);
    fclose(hist);
    printf("chaos_client: %ld ops: %ld ok, %ld fail, %ld info\n", ops, oks, fails, infos);
    return 0;
}
