/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.c — `kvmesh bench`: put, get, batch put and batch get of 4 KiB..16 MiB values on a
 * 2-runtime loopback cluster in this process (a storage runtime and a client-only runtime, so
 * every replica is remote to the client), over shm and over tcp, and the same workload against
 * redis-server and memcached started on free loopback ports; prints throughput (GB/s, ops/s),
 * p50/p99 latency (per operation; per call for batches) and the ratios kvmesh/peer per row, plus
 * kvmesh/memcpy.
 *
 * Method per (system, size): W keys (W * size <= BENCH_WORKING_SET, W >= batch) are written
 * once unmeasured, then each operation runs for a time budget (bounded also by op count):
 * puts overwrite keys round-robin (steady state of a cache), gets read them round-robin.
 * Values come from a pool of pre-filled buffers with a 16-byte (key, generation) header, so
 * --verify can check every byte read (and detect stale versions) without generating data on
 * the measured path. Every system gets one client connection driven by one thread.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "cli.h"
#include "peers.h"

#define BENCH_MAX_SIZES     8
#define BENCH_WORKING_SET   (128ull << 20) /* bytes of distinct keys per size */
#define BENCH_MAX_KEYS      8192
#define BENCH_MIN_KEYS      4
#define BENCH_BATCH_BYTES   (16ull << 20) /* bytes per batch call (batch = clamp(this/size)) */
#define BENCH_BATCH_MAX     128
#define BENCH_BATCH_MIN     2
#define BENCH_MAX_OPS       2000000 /* per row */
#define BENCH_MAX_ROW_BYTES (8ull << 30)
#define BENCH_HDR           16
#define BENCH_MAX_THREADS   8 /* --threads: client threads per row */
#define BENCH_MAX_TROWS     4 /* --threads: thread counts */

enum bench_op { OP_PUT, OP_GET, OP_BPUT, OP_BGET, OP__N };
static const char *op_names[OP__N] = {"put", "get", "batch_put", "batch_get"};

enum bench_sys { SYS_KVMESH_SHM, SYS_KVMESH_TCP, SYS_REDIS, SYS_MEMCACHED, SYS__N };
static const char *sys_names[SYS__N] = {"kvmesh/shm", "kvmesh/tcp", "redis", "memcached"};

struct row {
    bool done;
    double secs;
    uint64_t ops, calls, bytes, bad, failed;
    uint64_t p50, p99; /* ns */
    uint64_t cpu_ns;   /* process CPU time (user + sys, every thread: both runtimes) over the row */
    uint64_t sleeps;   /* voluntary context switches of the process over the row (every thread:
                        * each is a thread going to sleep, to be woken again) */
    /* --breakdown (kvmesh rows): critical-path counters over the row, the sampled requests */
    kvmesh_tools_critpath_t cp;
    size_t n_sampled;
    int64_t total_ns, stage_ns[4];
};

/* A --threads row: N application threads on the one client runtime, each on its own keys. */
struct trow {
    bool done;
    unsigned threads;
    double secs;
    uint64_t ops, bytes, failed;
    uint64_t cpu_ns; /* as in struct row */
};

#define BENCH_QUOTA_TENANT                                                                         \
    "bench-quota" /* has a tenant-root policy (--quota); "bench" has none                          \
                   */
#define BENCH_QUOTA_POLICY BENCH_QUOTA_TENANT ":1TiB:4000000000"

struct bench {
    bool quick, verify, markdown, quota, breakdown;
    bool op_off[OP__N];                           /* --ops: rows not run (not printed) */
    struct row rows_q[2][BENCH_MAX_SIZES][OP__N]; /* kvmesh/shm, kvmesh/tcp with quota on */
    size_t n_trows;
    unsigned trows_n[BENCH_MAX_TROWS];
    struct trow trows[SYS__N][BENCH_MAX_SIZES][BENCH_MAX_TROWS][OP__N];
    uint64_t row_ms;
    size_t nsizes;
    uint64_t sizes[BENCH_MAX_SIZES];
    struct row rows[SYS__N][BENCH_MAX_SIZES][OP__N];
    double memcpy_gbs[BENCH_MAX_SIZES];
    double memcpy_ws_get_gbs[BENCH_MAX_SIZES]; /* from the working set into one buffer */
    double memcpy_ws_put_gbs[BENCH_MAX_SIZES]; /* from one buffer into the working set */
    cli_progress_t prog;
    uint64_t total_bad, total_failed;
    /* current system */
    kvmesh_t *kv;
    kvmesh_scope_t scope;
    peer_client_t *pc;
    enum bench_sys sys;
    /* data for the current size */
    uint64_t size;
    size_t nkeys, batch, npool;
    uint8_t **pool;
    uint8_t **dst;
    uint32_t *gen;
    uint16_t *src;
    char (*keys)[48];
};

static size_t keys_for(const struct bench *b, uint64_t size)
{
    size_t w = (size_t)(BENCH_WORKING_SET / size);
    if (b->quick)
        w = 8;
    if (w > BENCH_MAX_KEYS)
        w = BENCH_MAX_KEYS;
    if (w < BENCH_MIN_KEYS)
        w = BENCH_MIN_KEYS;
    return w;
}

static size_t batch_for(const struct bench *b, uint64_t size)
{
    size_t n = (size_t)(BENCH_BATCH_BYTES / size);
    if (n > BENCH_BATCH_MAX)
        n = BENCH_BATCH_MAX;
    if (n < BENCH_BATCH_MIN)
        n = BENCH_BATCH_MIN;
    if (b->quick && n > 4)
        n = 4;
    return n;
}

static void data_free(struct bench *b)
{
    for (size_t i = 0; b->pool && i < b->npool; i++)
        free(b->pool[i]);
    for (size_t i = 0; b->dst && i < b->batch; i++)
        free(b->dst[i]);
    free(b->pool);
    free(b->dst);
    free(b->gen);
    free(b->src);
    free(b->keys);
    b->pool = b->dst = NULL;
    b->gen = NULL;
    b->src = NULL;
    b->keys = NULL;
}

static int data_init(struct bench *b, uint64_t size)
{
    b->size = size;
    b->nkeys = keys_for(b, size);
    b->batch = batch_for(b, size);
    if (b->batch > b->nkeys)
        b->nkeys = b->batch;
    b->npool = b->batch < 4 ? 4 : b->batch;
    b->pool = calloc(b->npool, sizeof(*b->pool));
    b->dst = calloc(b->batch, sizeof(*b->dst));
    b->gen = calloc(b->nkeys, sizeof(*b->gen));
    b->src = calloc(b->nkeys, sizeof(*b->src));
    b->keys = calloc(b->nkeys, sizeof(*b->keys));
    if (!b->pool || !b->dst || !b->gen || !b->src || !b->keys)
        return -1;
    for (size_t i = 0; i < b->npool; i++) {
        if (!(b->pool[i] = malloc(size)))
            return -1;
        cli_fill(b->pool[i], size, 0x5eed0000ull + i);
    }
    for (size_t i = 0; i < b->batch; i++) {
        if (!(b->dst[i] = malloc(size)))
            return -1;
        memset(b->dst[i], 0, size); /* fault the pages in before measuring */
    }
    for (size_t k = 0; k < b->nkeys; k++)
        snprintf(b->keys[k], sizeof(b->keys[k]), "bench/%" PRIu64 "/%zu", size, k);
    return 0;
}

/* Prepares pool buffer p as the next value of key k. */
static void stamp(struct bench *b, size_t k, size_t p)
{
    b->gen[k]++;
    b->src[k] = (uint16_t)p;
    uint64_t h[2] = {k, b->gen[k]};
    memcpy(b->pool[p], h, BENCH_HDR);
}

static bool check(struct bench *b, size_t k, const uint8_t *buf, size_t len)
{
    if (len != b->size)
        return false;
    uint64_t h[2];
    memcpy(h, buf, BENCH_HDR);
    if (h[0] != k || h[1] != b->gen[k])
        return false;
    return memcmp(buf + BENCH_HDR, b->pool[b->src[k]] + BENCH_HDR, len - BENCH_HDR) == 0;
}

/* Process CPU time (user + sys of every thread) in ns: the load-independent cost of a row, which
 * for kvmesh rows covers the client and the storage runtime (both in this process). For the
 * peer rows it covers only the client side, so it is printed for kvmesh rows only. */
static uint64_t cpu_now_ns(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

/* Voluntary context switches of the process so far (every thread): each is a thread blocking, so
 * their count per call is the call's thread wake-ups, both runtimes included. */
static uint64_t sleeps_now(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_nvcsw;
}

/* CPU us per operation (per item for batches); 0 when nothing ran. */
static double cpu_us_per_op(uint64_t cpu_ns, uint64_t ops)
{
    return ops ? (double)cpu_ns / (double)ops / 1e3 : 0;
}

/* ---- one system's operations ---------------------------------------------------------------- */

static int sys_put(struct bench *b, size_t k, size_t p)
{
    stamp(b, k, p);
    if (b->kv)
        return kvmesh_put(b->kv, &b->scope, b->keys[k], strlen(b->keys[k]), b->pool[p], b->size,
                          NULL);
    return peer_put(b->pc, b->keys[k], strlen(b->keys[k]), b->pool[p], b->size);
}

static int sys_get(struct bench *b, size_t k, uint8_t *dst, size_t *out)
{
    if (b->kv)
        return kvmesh_get_into(b->kv, &b->scope, b->keys[k], strlen(b->keys[k]), dst, b->size, out);
    return peer_get(b->pc, b->keys[k], strlen(b->keys[k]), dst, b->size, out);
}

/* Batch of n keys starting at k0 (wrapping). Returns the number of failed items. */
static size_t sys_batch(struct bench *b, bool put, size_t k0, size_t n, size_t *bad)
{
    kvmesh_batch_item_t ki[BENCH_BATCH_MAX];
    peer_item_t pi[BENCH_BATCH_MAX];
    size_t failed = 0;
    for (size_t j = 0; j < n; j++) {
        size_t k = (k0 + j) % b->nkeys;
        if (put)
            stamp(b, k, j);
        void *buf = put ? b->pool[j] : b->dst[j];
        if (b->kv)
            ki[j] = (kvmesh_batch_item_t){
                .key = b->keys[k], .key_len = strlen(b->keys[k]), .buf = buf, .len = b->size};
        else
            pi[j] = (peer_item_t){
                .key = b->keys[k], .key_len = strlen(b->keys[k]), .buf = buf, .len = b->size};
    }
    if (b->kv) {
        if (put)
            kvmesh_batch_put(b->kv, &b->scope, ki, n, NULL);
        else
            kvmesh_batch_get(b->kv, &b->scope, ki, n);
    } else {
        if (put)
            peer_batch_put(b->pc, pi, n);
        else
            peer_batch_get(b->pc, pi, n);
    }
    for (size_t j = 0; j < n; j++) {
        int rc = b->kv ? ki[j].rc : pi[j].rc;
        size_t ol = b->kv ? ki[j].out_len : pi[j].out_len;
        if (rc != 0) {
            failed++;
            continue;
        }
        if (!put && b->verify && !check(b, (k0 + j) % b->nkeys, b->dst[j], ol))
            (*bad)++;
    }
    return failed;
}

static void report_failure(struct bench *b, const char *what)
{
    if (b->kv)
        fprintf(stderr, "\nkvmesh bench: %s %s: %s\n", sys_names[b->sys], what,
                kvmesh_last_error());
    else
        fprintf(stderr, "\nkvmesh bench: %s %s: %s\n", sys_names[b->sys], what, peer_error(b->pc));
}

/* Writes every key once (unmeasured) so gets find them. */
static int populate(struct bench *b)
{
    size_t bad = 0;
    for (size_t k = 0; k < b->nkeys; k += b->batch) {
        size_t n = b->nkeys - k < b->batch ? b->nkeys - k : b->batch;
        if (sys_batch(b, true, k, n, &bad) != 0) {
            report_failure(b, "populate");
            return -1;
        }
    }
    return 0;
}

static void run_row(struct bench *b, size_t si, enum bench_op op)
{
    struct row *r = &b->rows[b->sys][si][op];
    cli_lat_t lat;
    cli_lat_init(&lat);
    uint64_t budget = b->row_ms * 1000000ull;
    uint64_t max_ops = b->quick ? 2 * b->nkeys : BENCH_MAX_OPS;
    uint64_t min_ops = b->quick ? b->nkeys : 4;
    bool batch = op == OP_BPUT || op == OP_BGET;
    bool put = op == OP_PUT || op == OP_BPUT;
    kvmesh_tools_critpath_t cp0 = {0};
    struct timespec wall0;
    clock_gettime(CLOCK_REALTIME, &wall0);
    if (b->kv && b->breakdown)
        kvmesh_tools_critpath(b->kv, op_names[op], &cp0);
    uint64_t cpu0 = cpu_now_ns(), sleeps0 = sleeps_now();
    uint64_t t0 = kvmesh_tools_now_ns(), ops = 0, calls = 0, bytes = 0;
    size_t bad = 0, failed = 0, k = 0;
    bool reported = false;
    while (ops < max_ops && bytes < BENCH_MAX_ROW_BYTES) {
        uint64_t now = kvmesh_tools_now_ns();
        if (now - t0 >= budget && ops >= min_ops)
            break;
        uint64_t s = now;
        size_t n = batch ? b->batch : 1;
        size_t f = 0;
        if (batch) {
            f = sys_batch(b, put, k, n, &bad);
        } else if (put) {
            f = sys_put(b, k, ops % b->npool) != 0;
        } else {
            size_t got = 0;
            f = sys_get(b, k, b->dst[0], &got) != 0;
            if (!f && b->verify && !check(b, k, b->dst[0], got))
                bad++;
        }
        uint64_t e = kvmesh_tools_now_ns();
        cli_lat_add(&lat, e - s);
        if (f && !reported) {
            report_failure(b, op_names[op]);
            reported = true;
        }
        failed += f;
        ops += n;
        bytes += (n - f) * b->size;
        calls++;
        k = (k + n) % b->nkeys;
        cli_progress(&b->prog, false, "[bench] %-10s %6" PRIu64 " KiB %-9s %8" PRIu64 " ops",
                     sys_names[b->sys], b->size >> 10, op_names[op], ops);
    }
    r->secs = (double)(kvmesh_tools_now_ns() - t0) / 1e9;
    r->cpu_ns = cpu_now_ns() - cpu0;
    r->sleeps = sleeps_now() - sleeps0;
    r->ops = ops;
    r->calls = calls;
    r->bytes = bytes;
    r->bad = bad;
    r->failed = failed;
    r->p50 = cli_lat_pct(&lat, 50);
    r->p99 = cli_lat_pct(&lat, 99);
    r->done = true;
    if (b->kv && b->breakdown) {
        kvmesh_tools_critpath_t cp1;
        kvmesh_tools_critpath(b->kv, op_names[op], &cp1);
        r->cp.calls = cp1.calls - cp0.calls;
        for (int i = 0; i < 4; i++)
            r->cp.round_trips[i] = cp1.round_trips[i] - cp0.round_trips[i];
        r->cp.handoffs = cp1.handoffs - cp0.handoffs;
        r->cp.leads = cp1.leads - cp0.leads;
        r->cp.copies = cp1.copies - cp0.copies;
        r->cp.checksums = cp1.checksums - cp0.checksums;
        uint64_t since = (uint64_t)wall0.tv_sec * 1000000000ull + (uint64_t)wall0.tv_nsec;
        r->n_sampled = kvmesh_tools_breakdown(b->kv, put ? "store.put" : "store.get", since,
                                              &r->total_ns, r->stage_ns);
    }
    cli_lat_free(&lat);
    if (bad)
        fprintf(stderr, "\nkvmesh bench: %s %" PRIu64 " KiB %s: %zu values read back WRONG\n",
                sys_names[b->sys], b->size >> 10, op_names[op], bad);
    b->total_bad += bad;
    b->total_failed += failed;
}

/* ---- --threads rows (kvmesh only) --------------------------------------------------------- */

struct tctx {
    struct bench *b;
    enum bench_op op;
    unsigned t, n;
    uint64_t deadline_ns;
    uint8_t *region; /* src then dst buffers of this thread, registered as one region */
    uint8_t *src[BENCH_BATCH_MAX], *dst[BENCH_BATCH_MAX];
    uint64_t ops, bytes, failed;
};

/* Thread t of n: keys k = t, t + n, ... (puts overwrite them, gets read them); no stamping or
 * verification (the values are whatever was written last). */
static void *thread_main(void *arg)
{
    struct tctx *c = arg;
    struct bench *b = c->b;
    bool batch = c->op == OP_BPUT || c->op == OP_BGET;
    bool put = c->op == OP_PUT || c->op == OP_BPUT;
    size_t nb = batch ? b->batch : 1, mine = (b->nkeys + c->n - 1 - c->t) / c->n;
    if (mine == 0)
        return NULL;
    kvmesh_batch_item_t ki[BENCH_BATCH_MAX];
    size_t j = 0;
    while (kvmesh_tools_now_ns() < c->deadline_ns && c->ops < BENCH_MAX_OPS) {
        for (size_t i = 0; i < nb; i++, j++) {
            size_t k = c->t + (j % mine) * c->n;
            ki[i] = (kvmesh_batch_item_t){.key = b->keys[k],
                                          .key_len = strlen(b->keys[k]),
                                          .buf = put ? c->src[i] : c->dst[i],
                                          .len = b->size};
        }
        size_t f = 0;
        if (batch) {
            if (put)
                kvmesh_batch_put(b->kv, &b->scope, ki, nb, NULL);
            else
                kvmesh_batch_get(b->kv, &b->scope, ki, nb);
            for (size_t i = 0; i < nb; i++)
                f += ki[i].rc != 0;
        } else if (put) {
            f = kvmesh_put(b->kv, &b->scope, ki[0].key, ki[0].key_len, ki[0].buf, b->size, NULL) !=
                0;
        } else {
            size_t got = 0;
            f = kvmesh_get_into(b->kv, &b->scope, ki[0].key, ki[0].key_len, ki[0].buf, b->size,
                                &got) != 0;
        }
        c->ops += nb;
        c->failed += f;
        c->bytes += (nb - f) * b->size;
    }
    return NULL;
}

static void run_threads_row(struct bench *b, size_t si, size_t ti, enum bench_op op)
{
    unsigned n = b->trows_n[ti];
    struct trow *r = &b->trows[b->sys][si][ti][op];
    struct tctx c[BENCH_MAX_THREADS];
    pthread_t th[BENCH_MAX_THREADS];
    bool started[BENCH_MAX_THREADS] = {false};
    memset(c, 0, sizeof(c));
    size_t nb = b->batch;
    bool ok = true;
    for (unsigned t = 0; t < n && ok; t++) {
        c[t] = (struct tctx){.b = b, .op = op, .t = t, .n = n};
        ok = (c[t].region = malloc(2 * nb * b->size)) != NULL;
        for (size_t i = 0; ok && i < nb; i++) {
            c[t].src[i] = c[t].region + i * b->size;
            c[t].dst[i] = c[t].region + (nb + i) * b->size;
            memcpy(c[t].src[i], b->pool[i % b->npool], b->size);
            memset(c[t].dst[i], 0, b->size);
        }
        if (ok && kvmesh_register_buffer(b->kv, c[t].region, 2 * nb * b->size) != 0)
            fprintf(stderr, "\nkvmesh bench: thread buffers not registered: %s\n",
                    kvmesh_last_error());
    }
    uint64_t cpu0 = cpu_now_ns(), t0 = kvmesh_tools_now_ns();
    for (unsigned t = 0; t < n && ok; t++) {
        c[t].deadline_ns = t0 + b->row_ms * 1000000ull;
        started[t] = pthread_create(&th[t], NULL, thread_main, &c[t]) == 0;
    }
    memset(r, 0, sizeof(*r));
    for (unsigned t = 0; t < n; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        r->ops += c[t].ops;
        r->bytes += c[t].bytes;
        r->failed += c[t].failed;
        if (c[t].region) {
            kvmesh_unregister_buffer(b->kv, c[t].region);
            free(c[t].region);
        }
    }
    r->secs = (double)(kvmesh_tools_now_ns() - t0) / 1e9;
    r->cpu_ns = cpu_now_ns() - cpu0;
    r->threads = n;
    r->done = ok;
    if (!ok)
        fprintf(stderr, "\nkvmesh bench: out of memory for the %u-thread row\n", n);
    b->total_failed += r->failed;
    cli_progress(&b->prog, false, "[bench] %-10s %6" PRIu64 " KiB %-9s %u threads",
                 sys_names[b->sys], b->size >> 10, op_names[op], n);
}

static int run_system_size(struct bench *b, size_t si)
{
    if (data_init(b, b->sizes[si]) != 0) {
        fprintf(stderr, "kvmesh bench: out of memory for %" PRIu64 "-byte values\n", b->sizes[si]);
        data_free(b);
        return -1;
    }
    if (b->kv) {
        for (size_t i = 0; i < b->npool; i++)
            kvmesh_register_buffer(b->kv, b->pool[i], b->size);
        for (size_t i = 0; i < b->batch; i++)
            kvmesh_register_buffer(b->kv, b->dst[i], b->size);
    }
    int rc = populate(b);
    for (int op = 0; rc == 0 && op < OP__N; op++)
        if (!b->op_off[op])
            run_row(b, si, (enum bench_op)op);
    bool main_reg = b->kv != NULL;
    if (rc == 0 && b->kv && b->n_trows) {
        /* the thread rows register their own buffers: make room (TP_MAX_REGIONS) */
        for (size_t i = 0; i < b->npool; i++)
            kvmesh_unregister_buffer(b->kv, b->pool[i]);
        for (size_t i = 0; i < b->batch; i++)
            kvmesh_unregister_buffer(b->kv, b->dst[i]);
        main_reg = false;
        for (size_t ti = 0; ti < b->n_trows; ti++)
            for (int op = 0; op < OP__N; op++)
                run_threads_row(b, si, ti, (enum bench_op)op);
    }
    /* Free the space for the next size. */
    if (b->kv) {
        for (size_t k = 0; k < b->nkeys; k++)
            kvmesh_remove(b->kv, &b->scope, b->keys[k], strlen(b->keys[k]));
        for (size_t i = 0; main_reg && i < b->npool; i++)
            kvmesh_unregister_buffer(b->kv, b->pool[i]);
        for (size_t i = 0; main_reg && i < b->batch; i++)
            kvmesh_unregister_buffer(b->kv, b->dst[i]);
    } else {
        peer_flush(b->pc);
    }
    data_free(b);
    return rc;
}

static void measure_memcpy(struct bench *b, size_t si)
{
    uint64_t size = b->sizes[si];
    uint8_t *s = malloc(size), *d = malloc(size);
    if (!s || !d) {
        free(s);
        free(d);
        return;
    }
    memset(s, 1, size);
    memset(d, 0, size);
    memcpy(d, s, size); /* warm: both buffers faulted in and cached as far as they fit */
    uint64_t budget = (b->quick ? 5 : 200) * 1000000ull, t0 = kvmesh_tools_now_ns(), bytes = 0;
    do {
        memcpy(d, s, size);
        __asm__ __volatile__("" : : "r"(d) : "memory");
        bytes += size;
    } while (kvmesh_tools_now_ns() - t0 < budget);
    b->memcpy_gbs[si] = (double)bytes / ((double)(kvmesh_tools_now_ns() - t0));
    free(s);
    free(d);
}

/* memcpy against a working set as large as the kvmesh rows' (keys_for(size) x size bytes, each
 * value visited in turn): a get-like copy from the working set into one buffer and a put-like
 * copy from one buffer into it. At sizes whose working set does not fit the caches this is what
 * a copy of a value that is not in cache costs (the in-cache line above copies the same two
 * buffers over and over). */
static double memcpy_ws_pass(uint8_t *ws, uint8_t *one, uint64_t size, size_t n, bool get,
                             uint64_t budget)
{
    uint64_t t0 = kvmesh_tools_now_ns(), bytes = 0;
    size_t k = 0;
    do {
        uint8_t *v = ws + (k++ % n) * size;
        if (get)
            memcpy(one, v, size);
        else
            memcpy(v, one, size);
        __asm__ __volatile__("" : : "r"(one), "r"(v) : "memory");
        bytes += size;
    } while (kvmesh_tools_now_ns() - t0 < budget);
    return (double)bytes / ((double)(kvmesh_tools_now_ns() - t0));
}

static void measure_memcpy_ws(struct bench *b, size_t si)
{
    uint64_t size = b->sizes[si];
    size_t n = keys_for(b, size);
    uint8_t *ws = malloc(size * n), *one = malloc(size);
    if (ws && one) {
        memset(ws, 1, size * n); /* faulted in */
        memset(one, 2, size);
        uint64_t budget = (b->quick ? 5 : 200) * 1000000ull;
        b->memcpy_ws_get_gbs[si] = memcpy_ws_pass(ws, one, size, n, true, budget);
        b->memcpy_ws_put_gbs[si] = memcpy_ws_pass(ws, one, size, n, false, budget);
    }
    free(ws);
    free(one);
}

/* ---- the kvmesh cluster -----------------------------------------------------------------------
 */

static int open_pair(const char *transport, kvmesh_t **server, kvmesh_t **client,
                     const struct cli_sets *sets, bool breakdown)
{
    char url[96];
    snprintf(url, sizeof(url), "memory://kvmesh-bench-%ld-%s", (long)getpid(), transport);
    kvmesh_config_t *cfg = kvmesh_config_new();
    int rc = -1;
    if (!cfg)
        return -1;
    /* The storage runtime: room for the working set, its overwrites in flight, and 16 MiB
     * values; reclaimed bytes reusable after a short grace; segment pages faulted in at open
     * (the steady state of a runtime whose memory has been used once; --set
     * prefault_segments=false measures first touches too). */
    if (kvmesh_config_set(cfg, "metadata_url", url) ||
        kvmesh_config_set(cfg, "deployment", "bench") ||
        kvmesh_config_set(cfg, "transport", transport) ||
        kvmesh_config_set(cfg, "memory_size", "1GiB") ||
        kvmesh_config_set(cfg, "segment_size", "256MiB") ||
        kvmesh_config_set(cfg, "max_object_size", "64MiB") ||
        kvmesh_config_set(cfg, "reclaim_grace_ms", "100") ||
        kvmesh_config_set(cfg, "prefault_segments", "true") ||
        kvmesh_config_set(cfg, "request_timeout_ms", "30000") ||
        kvmesh_config_set(cfg, "tenant_policies", BENCH_QUOTA_POLICY)) {
        fprintf(stderr, "kvmesh bench: %s\n", kvmesh_last_error());
        goto out;
    }
    if (breakdown && kvmesh_config_set(cfg, "trace_sample_rate", "0.25")) {
        fprintf(stderr, "kvmesh bench: %s\n", kvmesh_last_error());
        goto out;
    }
    for (size_t i = 0; i < sets->n; i++)
        if (cli_apply_set(cfg, sets->items[i], "bench") != 0)
            goto out;
    int e = cli_open_runtime(server, cfg, "bench");
    if (e) {
        cli_report("bench", "opening the storage runtime", e);
        goto out;
    }
    kvmesh_config_set(cfg, "memory_size", "0"); /* client-only: every replica is remote */
    e = kvmesh_open(client, cfg);
    if (e) {
        cli_report("bench", "opening the client runtime", e);
        kvmesh_close(*server);
        *server = NULL;
        goto out;
    }
    rc = 0;
out:
    kvmesh_config_free(cfg);
    return rc;
}

/* ---- output ------------------------------------------------------------------------------------
 */

static double gbs(const struct row *r)
{
    return r->done && r->secs > 0 ? (double)r->bytes / r->secs / 1e9 : 0;
}

static double opss(const struct row *r)
{
    return r->done && r->secs > 0 ? (double)(r->ops - r->failed) / r->secs : 0;
}

static void fmt_ratio(char *buf, size_t cap, double a, double b)
{
    if (a > 0 && b > 0)
        snprintf(buf, cap, "%.2fx", a / b);
    else
        snprintf(buf, cap, "-");
}

static void fmt_sys(char *buf, size_t cap, const struct row *r)
{
    if (!r->done)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.2f GB/s %.0f op/s %.0f/%.0f us", gbs(r), opss(r), r->p50 / 1e3,
                 r->p99 / 1e3);
}

static void print_table(struct bench *b, bool with_peers, const bool *systems)
{
    const char *sep = b->markdown ? " | " : "  ";
    if (b->markdown)
        printf("| transport | size | op | kvmesh GB/s | kvmesh ops/s | kvmesh CPU us/op | kvmesh "
               "p50/p99 us | redis | memcached | kvmesh/redis | kvmesh/memcached | kvmesh/memcpy "
               "|\n| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: "
               "|\n");
    else
        printf("%-9s %7s %-9s %10s %10s %9s %15s  %-34s  %-34s %8s %8s %8s\n", "transport", "size",
               "op", "GB/s", "ops/s", "CPU us/op", "p50/p99 us", "redis", "memcached", "x redis",
               "x memc", "x memcpy");
    for (int s = SYS_KVMESH_SHM; s <= SYS_KVMESH_TCP; s++) {
        if (!systems[s])
            continue;
        for (size_t si = 0; si < b->nsizes; si++) {
            for (int op = 0; op < OP__N; op++) {
                if (b->op_off[op])
                    continue;
                const struct row *k = &b->rows[s][si][op];
                const struct row *rr = &b->rows[SYS_REDIS][si][op];
                const struct row *mr = &b->rows[SYS_MEMCACHED][si][op];
                char sz[32], rs[64], ms[64], x1[16], x2[16], x3[16], lat[32];
                kvmesh_tools_format_size(b->sizes[si], sz, sizeof(sz));
                fmt_sys(rs, sizeof(rs), rr);
                fmt_sys(ms, sizeof(ms), mr);
                fmt_ratio(x1, sizeof(x1), gbs(k), with_peers ? gbs(rr) : 0);
                fmt_ratio(x2, sizeof(x2), gbs(k), with_peers ? gbs(mr) : 0);
                fmt_ratio(x3, sizeof(x3), gbs(k), b->memcpy_gbs[si]);
                snprintf(lat, sizeof(lat), "%.0f/%.0f", k->p50 / 1e3, k->p99 / 1e3);
                const char *tr = s == SYS_KVMESH_SHM ? "shm" : "tcp";
                double cpu = cpu_us_per_op(k->cpu_ns, k->ops);
                if (b->markdown)
                    printf("| %s | %s | %s | %.2f | %.0f | %.1f | %s | %s | %s | %s | %s | %s |\n",
                           tr, sz, op_names[op], gbs(k), opss(k), cpu, lat, rs, ms, x1, x2, x3);
                else
                    printf("%-9s %7s %-9s %10.2f %10.0f %9.1f %15s%s%-34s%s%-34s %8s %8s %8s\n", tr,
                           sz, op_names[op], gbs(k), opss(k), cpu, lat, sep, rs, sep, ms, x1, x2,
                           x3);
            }
        }
    }
    printf("%smemcpy (one thread, same sizes):", b->markdown ? "\n" : "");
    for (size_t si = 0; si < b->nsizes; si++) {
        char sz[32];
        kvmesh_tools_format_size(b->sizes[si], sz, sizeof(sz));
        printf(" %s %.2f GB/s%s", sz, b->memcpy_gbs[si], si + 1 < b->nsizes ? "," : "\n");
    }
    printf("memcpy against the working set (one thread, get-like / put-like):");
    for (size_t si = 0; si < b->nsizes; si++) {
        char sz[32];
        kvmesh_tools_format_size(b->sizes[si], sz, sizeof(sz));
        printf(" %s %.2f / %.2f GB/s%s", sz, b->memcpy_ws_get_gbs[si], b->memcpy_ws_put_gbs[si],
               si + 1 < b->nsizes ? "," : "\n");
    }
}

/* Quota on vs off: the writes of the same pair in the same run, tenant "bench" (no policy) and
 * tenant BENCH_QUOTA_TENANT (a policy: every write reserves, claims and finalizes). */
static void print_quota_table(struct bench *b, const bool *systems)
{
    static const enum bench_op qops[] = {OP_PUT, OP_BPUT};
    printf("\n%s", b->markdown ? "" : "quota protocol on vs off (same runtimes, same run):\n");
    if (b->markdown)
        printf("| transport | size | op | off ops/s | on ops/s | on/off | off p50/p99 us | "
               "on p50/p99 us |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    else
        printf("%-9s %7s %-9s %12s %12s %8s %16s %16s\n", "transport", "size", "op", "off ops/s",
               "on ops/s", "on/off", "off p50/p99 us", "on p50/p99 us");
    for (int s = SYS_KVMESH_SHM; s <= SYS_KVMESH_TCP; s++) {
        if (!systems[s])
            continue;
        for (size_t si = 0; si < b->nsizes; si++) {
            for (size_t k = 0; k < sizeof(qops) / sizeof(qops[0]); k++) {
                const struct row *off = &b->rows[s][si][qops[k]];
                const struct row *on = &b->rows_q[s - SYS_KVMESH_SHM][si][qops[k]];
                char sz[32], x[16], lo[32], ln[32];
                kvmesh_tools_format_size(b->sizes[si], sz, sizeof(sz));
                fmt_ratio(x, sizeof(x), opss(on), opss(off));
                snprintf(lo, sizeof(lo), "%.0f/%.0f", off->p50 / 1e3, off->p99 / 1e3);
                snprintf(ln, sizeof(ln), "%.0f/%.0f", on->p50 / 1e3, on->p99 / 1e3);
                const char *tr = s == SYS_KVMESH_SHM ? "shm" : "tcp";
                if (b->markdown)
                    printf("| %s | %s | %s | %.0f | %.0f | %s | %s | %s |\n", tr, sz,
                           op_names[qops[k]], opss(off), opss(on), x, lo, ln);
                else
                    printf("%-9s %7s %-9s %12.0f %12.0f %8s %16s %16s\n", tr, sz, op_names[qops[k]],
                           opss(off), opss(on), x, lo, ln);
            }
        }
    }
    printf("quota on: tenant %s with the policy %s; off: tenant bench without one. Metadata is "
           "the\nruntimes' memory:// store unless --set metadata_url=... names a server.\n",
           BENCH_QUOTA_TENANT, BENCH_QUOTA_POLICY);
}

/* --threads rows: aggregate throughput of N client threads on one client runtime, and the
 * scaling against the first thread count. */
static void print_threads(struct bench *b, const bool *systems)
{
    if (b->markdown)
        printf(
            "\n| transport | size | op | threads | kvmesh GB/s | kvmesh ops/s | kvmesh CPU us/op "
            "| vs %u thread%s |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
            b->trows_n[0], b->trows_n[0] == 1 ? "" : "s");
    else
        printf("\nclient threads on one client runtime (aggregate):\n%-4s %7s %-9s %7s %10s %10s "
               "%9s %8s\n",
               "xprt", "size", "op", "threads", "GB/s", "ops/s", "CPU us/op", "scaling");
    for (int s = SYS_KVMESH_SHM; s <= SYS_KVMESH_TCP; s++) {
        if (!systems[s])
            continue;
        for (size_t si = 0; si < b->nsizes; si++)
            for (int op = 0; op < OP__N; op++)
                for (size_t ti = 0; ti < b->n_trows; ti++) {
                    const struct trow *r = &b->trows[s][si][ti][op], *r0 = &b->trows[s][si][0][op];
                    if (!r->done)
                        continue;
                    double g = r->secs > 0 ? (double)r->bytes / r->secs / 1e9 : 0;
                    double o = r->secs > 0 ? (double)(r->ops - r->failed) / r->secs : 0;
                    double o0 = r0->secs > 0 ? (double)(r0->ops - r0->failed) / r0->secs : 0;
                    char sz[32], x[16];
                    kvmesh_tools_format_size(b->sizes[si], sz, sizeof(sz));
                    fmt_ratio(x, sizeof(x), o, o0);
                    const char *tr = s == SYS_KVMESH_SHM ? "shm" : "tcp";
                    double cpu = cpu_us_per_op(r->cpu_ns, r->ops);
                    if (b->markdown)
                        printf("| %s | %s | %s | %u | %.2f | %.0f | %.1f | %s |\n", tr, sz,
                               op_names[op], r->threads, g, o, cpu, x);
                    else
                        printf("%-4s %7s %-9s %7u %10.2f %10.0f %9.1f %8s\n", tr, sz, op_names[op],
                               r->threads, g, o, cpu, x);
                }
    }
}

/* The mean time per call of each stage (store, control, data, metadata) of a row's sampled
 * calls, in us, summing to the mean call time. The /breakdown ring holds per call the summed time
 * of each stage's spans, and the store stage as the call's time minus its children's. A batch's
 * items run their per-item spans concurrently (a control.route_cas per item, all in one round),
 * so their sum can exceed the call's wall time, and the store stage came out negative (e.g.
 * -236874.8 us for a 3700 us call). Then the overlap is taken out of the largest child stage
 * (the one made of per-item spans; the data stage is one span per chunk of items): the store
 * stage becomes 0 (the call was inside some child span all along, as far as the ring can tell)
 * and the largest child gets the call's time the others leave. Should the others alone exceed
 * the call, every child is scaled to it instead. Single operations are unchanged. */
static void stage_per_call(const struct row *r, double out_us[4])
{
    double n = r->n_sampled ? (double)r->n_sampled : 1, total = (double)r->total_ns / n;
    double st[4], children = 0;
    int big = 1;
    for (int i = 0; i < 4; i++) {
        st[i] = (double)r->stage_ns[i] / n;
        children += i ? st[i] : 0;
        big = i && st[i] > st[big] ? i : big;
    }
    if (st[0] < 0 && children > 0) { /* overlapping children */
        double others = children - st[big];
        st[0] = 0;
        if (others <= total) {
            st[big] = total - others;
        } else {
            for (int i = 1; i < 4; i++)
                st[i] *= total / children;
        }
    }
    for (int i = 0; i < 4; i++)
        out_us[i] = st[i] / 1e3;
}

/* Per kvmesh row: the critical-path counts per call (from the client runtime's kvmesh_op_*
 * counters over the row) next to the mean time per stage per call of the sampled calls of the
 * row (the /breakdown ring: at most its last 128 entries; stage_per_call). */
static void print_breakdown(struct bench *b, const bool *systems)
{
    if (b->markdown)
        printf("\n| transport | size | op | calls | round trips / call (reserve, payload, lookup, "
               "cas) | hand-offs / call | led / call | sleeps / call | copies / call | checksums / "
               "call | sampled "
               "| total us "
               "| store us | control us | data us | metadata us |\n"
               "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
               "---: | ---: | ---: | ---: |\n");
    else
        printf(
            "\ncritical path per call (client runtime counters) and mean stage time of the "
            "sampled calls (/breakdown):\n%-4s %7s %-9s %7s %-28s %6s %5s %6s %7s %7s %5s %9s %9s "
            "%9s %9s %9s\n",
            "xprt", "size", "op", "calls", "round trips (res,pay,lk,cas)", "hand", "led", "sleeps",
            "copies", "sums", "n", "total us", "store", "control", "data", "metadata");
    for (int s = SYS_KVMESH_SHM; s <= SYS_KVMESH_TCP; s++) {
        if (!systems[s])
            continue;
        for (size_t si = 0; si < b->nsizes; si++)
            for (int op = 0; op < OP__N; op++) {
                if (b->op_off[op])
                    continue;
                const struct row *r = &b->rows[s][si][op];
                double c = r->cp.calls ? (double)r->cp.calls : 1;
                const uint64_t *t = r->cp.round_trips;
                char sz[32], rts[96], st[4][16], tot[16];
                kvmesh_tools_format_size(b->sizes[si], sz, sizeof(sz));
                snprintf(rts, sizeof(rts), "%.1f (%.1f, %.1f, %.1f, %.1f)",
                         (double)(t[0] + t[1] + t[2] + t[3]) / c, (double)t[0] / c,
                         (double)t[1] / c, (double)t[2] / c, (double)t[3] / c);
                double ns = r->n_sampled ? (double)r->n_sampled : 1;
                snprintf(tot, sizeof(tot), r->n_sampled ? "%.1f" : "-",
                         (double)r->total_ns / ns / 1e3);
                double us[4];
                stage_per_call(r, us);
                for (int i = 0; i < 4; i++)
                    snprintf(st[i], sizeof(st[i]), r->n_sampled ? "%.1f" : "-", us[i]);
                const char *tr = s == SYS_KVMESH_SHM ? "shm" : "tcp";
                if (b->markdown)
                    printf("| %s | %s | %s | %" PRIu64
                           " | %s | %.1f | %.2f | %.1f | %.1f | %.1f | %zu | %s | %s | %s "
                           "| %s | %s |\n",
                           tr, sz, op_names[op], r->cp.calls, rts, (double)r->cp.handoffs / c,
                           (double)r->cp.leads / c, (double)r->sleeps / c, (double)r->cp.copies / c,
                           (double)r->cp.checksums / c, r->n_sampled, tot, st[0], st[1], st[2],
                           st[3]);
                else
                    printf("%-4s %7s %-9s %7" PRIu64
                           " %-28s %6.1f %5.2f %6.1f %7.1f %7.1f %5zu %9s %9s %9s %9s "
                           "%9s\n",
                           tr, sz, op_names[op], r->cp.calls, rts, (double)r->cp.handoffs / c,
                           (double)r->cp.leads / c, (double)r->sleeps / c, (double)r->cp.copies / c,
                           (double)r->cp.checksums / c, r->n_sampled, tot, st[0], st[1], st[2],
                           st[3]);
            }
    }
}

int bench_footprint(uint64_t count, uint64_t vsize, bool no_peers, const struct cli_sets *sets);

int cmd_bench(int argc, char **argv)
{
    struct bench *b = calloc(1, sizeof(*b));
    if (!b)
        return CLI_EXIT_FAIL;
    const char *transports = "shm,tcp", *sizes = "4KiB,256KiB,1MiB,16MiB", *threads = "";
    const char *ops = "put,get,batch_put,batch_get";
    bool no_peers = false, help = false;
    uint64_t footprint = 0, footprint_value = 64;
    struct cli_sets sets = {0};
    b->row_ms = 500;
    /* As the applications the rows stand for run (CPython and kvmeshd ignore SIGPIPE): a write
     * to a peer that closed fails with EPIPE instead of ending the run, and the library's
     * caller-run loop needs no per-op signal mask (docs/api.md "Signals"). */
    signal(SIGPIPE, SIG_IGN);
    const cli_opt_t opts[] = {
        {"quick", NULL, CLI_FLAG, &b->quick,
         "smoke run: 8 keys per size, a few operations per row (for ctest; use with --verify)"},
        {"verify", NULL, CLI_FLAG, &b->verify,
         "check every byte read (header with key and generation + payload) for every system"},
        {"transports", "LIST", CLI_CSV, &transports, "kvmesh transports to run (default shm,tcp)"},
        {"ops", "LIST", CLI_CSV, &ops,
         "rows to run (default put,get,batch_put,batch_get; e.g. batch_put to profile or count "
         "the CPU of one row alone)"},
        {"sizes", "LIST", CLI_CSV, &sizes, "value sizes (default 4KiB,256KiB,1MiB,16MiB)"},
        {"row-ms", "MS", CLI_U64, &b->row_ms, "time budget per table row (default 500)"},
        {"threads", "LIST", CLI_CSV, &threads,
         "also run each kvmesh row with these numbers of client threads on the one client "
         "runtime (e.g. 1,2,4; each thread on its own keys; not verified) and print their "
         "aggregate throughput"},
        {"no-peers", NULL, CLI_FLAG, &no_peers, "do not start redis-server and memcached"},
        {"markdown", NULL, CLI_FLAG, &b->markdown, "print the table as Markdown"},
        {"quota", NULL, CLI_FLAG, &b->quota,
         "also run every kvmesh row in a tenant with a quota policy and print quota on vs off"},
        {"breakdown", NULL, CLI_FLAG, &b->breakdown,
         "also print per row the critical-path counts per call (round trips by stage, loop "
         "hand-offs and those the calling thread led itself, thread sleeps (voluntary context "
         "switches of the whole process: wake-ups), payload copies, checksum passes) and the mean "
         "time per stage of sampled "
         "calls (traces 25% of the client's requests, which costs some throughput)"},
        {"footprint", "N", CLI_U64, &footprint,
         "instead of the table: store N small objects in one storage runtime and report its "
         "bytes per object beyond the payload (RSS, heap, segment slots) beside redis-server's "
         "used_memory per key for the same keys (e.g. 1000000; not run by CI)"},
        {"footprint-value", "BYTES", CLI_U64, &footprint_value,
         "value size of the --footprint objects (default 64)"},
        {"set", "FIELD=VALUE", CLI_SET, &sets,
         "set a configuration field of both kvmesh runtimes (e.g. io_threads=4)"},
        {"help", NULL, CLI_FLAG, &help, "show this help"},
    };
    const size_t nopts = sizeof(opts) / sizeof(opts[0]);
    const char *pos[1];
    size_t npos;
    int rc = cli_parse("bench", opts, nopts, argc, argv, pos, 0, &npos);
    if (rc)
        goto out;
    if (help) {
        cli_usage(stdout, "bench", "[options]",
                  "Measures put, get, batch put and batch get on a 2-runtime loopback cluster in "
                  "this process\n(a storage runtime and a client-only runtime, so replicas are "
                  "remote to the client),\nover shm and tcp, and the same workload against a "
                  "redis-server (hiredis, pipelined\nbatches) and a memcached (text protocol, "
                  "pipelined sets, get_multi) that it starts on\nfree loopback ports and stops "
                  "at the end. Prints GB/s, ops/s, p50/p99 latency (per\noperation; per call for "
                  "batches) and the ratios kvmesh/redis, kvmesh/memcached and\nkvmesh/memcpy per "
                  "row. Exit status 1 when any operation failed or --verify found a\nwrong byte.",
                  opts, nopts);
        goto out;
    }
    bool systems[SYS__N] = {false};
    systems[SYS_REDIS] = systems[SYS_MEMCACHED] = !no_peers;
    {
        char tmp[128];
        snprintf(tmp, sizeof(tmp), "%s", transports);
        for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (strcmp(t, "shm") == 0)
                systems[SYS_KVMESH_SHM] = true;
            else if (strcmp(t, "tcp") == 0)
                systems[SYS_KVMESH_TCP] = true;
            else {
                fprintf(stderr, "kvmesh bench: --transports: \"%s\" is not shm or tcp\n", t);
                rc = CLI_EXIT_USAGE;
                goto out;
            }
        }
        for (int op = 0; op < OP__N; op++)
            b->op_off[op] = true;
        snprintf(tmp, sizeof(tmp), "%s", ops);
        for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int op = 0;
            while (op < OP__N && strcmp(t, op_names[op]) != 0)
                op++;
            if (op == OP__N) {
                fprintf(stderr,
                        "kvmesh bench: --ops: \"%s\" is not put, get, batch_put or batch_get\n", t);
                rc = CLI_EXIT_USAGE;
                goto out;
            }
            b->op_off[op] = false;
        }
        snprintf(tmp, sizeof(tmp), "%s", sizes);
        for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            uint64_t v;
            if (b->nsizes >= BENCH_MAX_SIZES) {
                fprintf(stderr, "kvmesh bench: at most %d sizes\n", BENCH_MAX_SIZES);
                rc = CLI_EXIT_USAGE;
                goto out;
            }
            if (kvmesh_tools_parse_size("--sizes", t, &v) != 0 || v < 4096 || v > (64ull << 20)) {
                fprintf(stderr, "kvmesh bench: --sizes: \"%s\" must be a size in 4KiB..64MiB\n", t);
                rc = CLI_EXIT_USAGE;
                goto out;
            }
            b->sizes[b->nsizes++] = v;
        }
    }
    {
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "%s", threads);
        for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *e;
            unsigned long v = strtoul(t, &e, 10);
            if (*e || v < 1 || v > BENCH_MAX_THREADS || b->n_trows >= BENCH_MAX_TROWS) {
                fprintf(stderr,
                        "kvmesh bench: --threads: \"%s\" must be a list of at most %d counts in "
                        "1..%d\n",
                        threads, BENCH_MAX_TROWS, BENCH_MAX_THREADS);
                rc = CLI_EXIT_USAGE;
                goto out;
            }
            b->trows_n[b->n_trows++] = (unsigned)v;
        }
    }
    if (footprint) {
        if (footprint_value < 1 || footprint_value > (1u << 20)) {
            fprintf(stderr, "kvmesh bench: --footprint-value must be 1..1048576 bytes\n");
            rc = CLI_EXIT_USAGE;
            goto out;
        }
        rc = bench_footprint(footprint, footprint_value, no_peers, &sets);
        goto out;
    }
    if (b->quick && b->row_ms == 500)
        b->row_ms = 20;
    cli_progress_init(&b->prog, stderr, 2000);
    printf("kvmesh bench: %zu sizes, %s%s, row budget %" PRIu64 " ms%s%s\n", b->nsizes, transports,
           no_peers ? "" : ", vs redis-server and memcached", b->row_ms,
           b->verify ? ", verifying every byte read" : "",
           b->quota ? ", quota protocol on vs off" : "");
    fflush(stdout);
    for (size_t si = 0; si < b->nsizes; si++) {
        measure_memcpy(b, si);
        measure_memcpy_ws(b, si);
    }

    /* Peers. */
    for (int s = SYS_REDIS; s <= SYS_MEMCACHED; s++) {
        if (!systems[s])
            continue;
        peer_proc_t *pp = NULL;
        char err[256];
        b->sys = (enum bench_sys)s;
        b->kv = NULL;
        if (peer_start(s == SYS_REDIS ? PEER_REDIS : PEER_MEMCACHED, &pp, err, sizeof(err)) ||
            peer_connect(pp, &b->pc, err, sizeof(err))) {
            fprintf(stderr, "kvmesh bench: %s: %s (use --no-peers to run without peers)\n",
                    sys_names[s], err);
            peer_stop(pp);
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        for (size_t si = 0; si < b->nsizes; si++)
            if (run_system_size(b, si) != 0)
                b->total_failed++;
        peer_close(b->pc);
        b->pc = NULL;
        peer_stop(pp);
    }
    /* kvmesh over each transport. */
    for (int s = SYS_KVMESH_SHM; s <= SYS_KVMESH_TCP; s++) {
        if (!systems[s])
            continue;
        kvmesh_t *server = NULL, *client = NULL;
        if (open_pair(s == SYS_KVMESH_SHM ? "shm" : "tcp", &server, &client, &sets, b->breakdown) !=
            0) {
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        b->sys = (enum bench_sys)s;
        b->kv = client;
        b->scope.tenant = "bench";
        b->scope.domain = NULL;
        for (size_t si = 0; si < b->nsizes; si++) {
            b->scope.tenant = "bench";
            if (run_system_size(b, si) != 0)
                b->total_failed++;
            if (!b->quota)
                continue;
            /* the same pair and keys, in the tenant with a policy, right after (interleaved
             * per size, so that warm-up and host noise fall on both sides alike) */
            struct row off[OP__N];
            memcpy(off, b->rows[s][si], sizeof(off));
            b->scope.tenant = BENCH_QUOTA_TENANT;
            if (run_system_size(b, si) != 0)
                b->total_failed++;
            memcpy(b->rows_q[s - SYS_KVMESH_SHM][si], b->rows[s][si], sizeof(off));
            memcpy(b->rows[s][si], off, sizeof(off));
        }
        b->kv = NULL;
        kvmesh_close(client);
        kvmesh_close(server);
    }
    cli_progress_done(&b->prog);
    print_table(b, !no_peers, systems);
    if (b->quota)
        print_quota_table(b, systems);
    if (b->breakdown)
        print_breakdown(b, systems);
    if (b->n_trows)
        print_threads(b, systems);
    printf("latency is per operation for put/get and per call for batches; batch sizes:");
    for (size_t si = 0; si < b->nsizes; si++)
        printf(" %zu", batch_for(b, b->sizes[si]));
    printf(" items\n");
    printf("integrity: %s; failed operations: %" PRIu64 ", wrong values: %" PRIu64 "\n",
           b->verify ? "every byte read verified" : "not verified (use --verify)", b->total_failed,
           b->total_bad);
    rc = (b->total_bad || b->total_failed) ? CLI_EXIT_FAIL : 0;
out:
    free(b);
    return rc;
}
