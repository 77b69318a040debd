// SPDX-License-Identifier: Apache-2.0
/*
 * bench/cold.c — cold tier backend throughput on this machine: offload (put) and restore (get,
 * checksum verified) GB/s of LocalDir and ExtentStore (io_uring and buffered), against fio's
 * sequential write and read of the same directory with the same block size, job count and
 * durability (fdatasync after every block, like a put's), measured in the same run. Before
 * every read phase the files' page cache is dropped (posix_fadvise DONTNEED on the backends'
 * files; fio's invalidate=1), so restores read the device. Prints one table with the ratio of
 * each backend to fio (the goal is >= 0.7). Then, in the same run, a get through a real runtime
 * (kvmesh_get_into, memory:// metadata, a LocalDir cold tier in the same directory) of objects
 * still in DRAM against one of cold-only objects (each get restores from the device, verified;
 * page cache dropped first), the same object size: median and p99 latency, GB/s, the ratio;
 * and one kvmesh_batch_get of as many other cold-only objects (a batch restore: one device read
 * for the group, docs/cold.md "Batch restore"): GB/s and its ratio to the single restores.
 *
 *   bench_cold [--dir DIR] [--size BYTES] [--total BYTES] [--threads N] [--only BACKEND]
 *              [--repeat N]  (N rounds, the table shows medians)
 *              [--get-size BYTES] [--gets N]  (the get row: object size, gets of each kind)
 *   defaults: a fresh directory under $TMPDIR (or /var/tmp), 4 MiB objects, 1 GiB, 4 threads;
 *   the get row: 1 MiB objects, 64 gets of each kind (--gets 0 skips it)
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cold/cold_backend.h"
#include "kvmesh.h"
#include "cold/cold_backend_open.h"
#include "core/hash.h"
#include "env/clock.h"

static uint64_t g_size = 4u << 20, g_total = 1u << 30;
static int g_threads = 4;
static const char *g_only; /* --only NAME: one backend (and fio) */
static int g_repeat = 1;
static uint64_t g_get_size = 1u << 20;
static int g_gets = 64;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double t[16];
    memcpy(t, v, (size_t)n * sizeof(*t));
    qsort(t, (size_t)n, sizeof(*t), cmp_d);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

static int drop_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_F) {
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    return 0;
}

typedef struct job {
    cold_backend_t *b;
    int t;
    uint64_t nobj;
    uint8_t *data; /* g_size bytes */
    uint8_t *buf;
    uint64_t sum;
    cold_locator_t *locs;
    uint64_t *sums; /* the payloads' checksums (the core has them from the route) */
    int errors;
    bool read;
} job_t;

static cold_opid_t opid(int t, uint64_t i)
{
    cold_opid_t op;
    memset(&op, 0, sizeof(op));
    uint64_t x = ((uint64_t)t << 40 | i) * 0x9E3779B97F4A7C15ull;
    memcpy(op.b, &x, 8);
    op.b[8] = (uint8_t)t;
    memcpy(op.b + 9, &i, 7);
    return op;
}

static void *run_job(void *arg)
{
    job_t *j = arg;
    for (uint64_t i = 0; i < j->nobj; i++) {
        cold_backend_err_t err;
        int rc;
        if (!j->read) {
            cold_opid_t op = opid(j->t, i);
            /* a distinct payload per object: its first 8 bytes carry the index */
            memcpy(j->data, &i, sizeof(i));
            struct iovec v = {.iov_base = j->data, .iov_len = g_size};
            rc = j->b->ops->put(j->b->be, &op, &v, 1, g_size, j->sums[i], &j->locs[i], &err);
        } else {
            rc = j->b->ops->get(j->b->be, &j->locs[i], g_size, j->sums[i], j->buf, &err);
        }
        if (rc != 0) {
            if (j->errors++ == 0)
                fprintf(stderr, "bench_cold: %s\n", err.msg);
        }
    }
    return NULL;
}

/* Runs one phase over all threads; returns bytes per second (0 on errors). */
static double phase(job_t *jobs, bool read)
{
    pthread_t th[64];
    uint64_t t0 = env_clock_mono_ns();
    for (int t = 0; t < g_threads; t++) {
        jobs[t].read = read;
        pthread_create(&th[t], NULL, run_job, &jobs[t]);
    }
    int errors = 0;
    for (int t = 0; t < g_threads; t++) {
        pthread_join(th[t], NULL);
        errors += jobs[t].errors;
    }
    double s = (double)(env_clock_mono_ns() - t0) / 1e9;
    return errors ? 0 : (double)(g_size * jobs[0].nobj * (uint64_t)g_threads) / s;
}

typedef struct result {
    const char *name;
    double put, get;
} result_t;

static int bench_backend(const char *base, const char *name, cold_backend_kind_t kind,
                         cold_io_mode_t io, result_t *out)
{
    out->name = name;
    out->put = out->get = 0;
    if (g_only && strcmp(g_only, name) != 0)
        return 0;
    char root[PATH_MAX];
    if ((size_t)snprintf(root, sizeof(root), "%s/%s", base, name) >= sizeof(root)) {
        fprintf(stderr, "bench_cold: directory name too long\n");
        return -1;
    }
    mkdir(root, 0755);
    cold_backend_config_t c = {.kind = kind,
                               .root = root,
                               .capacity_bytes = g_total * 2,
                               .segment_bytes = 0,
                               .io_mode = io};
    cold_backend_t b;
    cold_backend_err_t err;
    if (cold_backend_open(&c, &b, &err) != 0) {
        fprintf(stderr, "bench_cold: open %s: %s\n", name, err.msg);
        return -1;
    }
    job_t jobs[64];
    uint64_t per = g_total / g_size / (uint64_t)g_threads;
    for (int t = 0; t < g_threads; t++) {
        jobs[t] = (job_t){.b = &b, .t = t, .nobj = per};
        jobs[t].data = malloc(g_size);
        jobs[t].buf = malloc(g_size);
        jobs[t].locs = calloc(per, sizeof(cold_locator_t));
        for (uint64_t i = 0; i < g_size; i++)
            jobs[t].data[i] = (uint8_t)(i * 131 + (uint64_t)t * 7 + (i >> 12));
        jobs[t].sums = calloc(per, sizeof(uint64_t));
        for (uint64_t i = 0; i < per; i++) {
            memcpy(jobs[t].data, &i, sizeof(i));
            jobs[t].sums[i] = kvm_checksum(jobs[t].data, g_size);
        }
    }
    out->name = name;
    out->put = phase(jobs, false);
    sync();
    nftw(root, drop_one, 16, FTW_PHYS);
    out->get = phase(jobs, true);
    printf("  %-18s io=%-9s put %6.2f GB/s  get %6.2f GB/s\n", name, cold_backend_io_name(&b),
           out->put / 1e9, out->get / 1e9);
    cold_backend_close(&b);
    for (int t = 0; t < g_threads; t++) {
        free(jobs[t].data);
        free(jobs[t].buf);
        free(jobs[t].locs);
        free(jobs[t].sums);
    }
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* fio sequential write or read of the same volume; bytes/s from its JSON, 0 on failure. */
static double run_fio(const char *base, bool read)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/fio", base);
    mkdir(dir, 0755);
    char cmd[PATH_MAX + 512];
    snprintf(cmd, sizeof(cmd),
             "fio --name=cold --directory=%s --rw=%s --bs=%llu --size=%llu --numjobs=%d "
             "--ioengine=psync --fdatasync=%d --invalidate=1 --end_fsync=%d --fallocate=none "
             "--group_reporting "
             "--output-format=json 2>/dev/null",
             dir, read ? "read" : "write", (unsigned long long)g_size,
             (unsigned long long)(g_total / (uint64_t)g_threads), g_threads, read ? 0 : 1,
             read ? 0 : 1);
    FILE *p = popen(cmd, "r");
    if (!p)
        return 0;
    json_error_t je;
    json_t *j = json_loadf(p, 0, &je);
    int st = pclose(p);
    if (!j || st != 0) {
        json_decref(j);
        return 0;
    }
    json_t *jobs = json_object_get(j, "jobs");
    json_t *j0 = json_array_get(jobs, 0);
    json_t *side = json_object_get(j0, read ? "read" : "write");
    double bw = (double)json_integer_value(json_object_get(side, "bw_bytes"));
    json_decref(j);
    return bw;
}

/* ---- the get row: DRAM vs restore from cold, through a runtime --------------------------- */

#define GET_MAX 256

typedef struct get_row {
    int n_hot, n_cold, n_batch;
    double hot_med, hot_p99, cold_med, cold_p99; /* microseconds */
    double hot_gbs, cold_gbs, batch_gbs, batch_us;
} get_row_t;

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static void fill_obj(uint8_t *b, uint64_t n, uint32_t i)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1);
    for (uint64_t k = 0; k < n; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[k] = (uint8_t)x;
    }
}

/* Times n gets of the objects in idx (kvmesh_get_into; the bytes are checked after each call,
 * outside the timed part). */
static int time_gets(kvmesh_t *kv, const kvmesh_scope_t *sc, const uint32_t *idx, int n,
                     uint8_t *out, uint8_t *want, double *us, double *total_s)
{
    *total_s = 0;
    for (int k = 0; k < n; k++) {
        char key[32];
        snprintf(key, sizeof(key), "get-%05u", idx[k]);
        size_t got = 0;
        uint64_t t0 = env_clock_mono_ns();
        int rc = kvmesh_get_into(kv, sc, key, strlen(key), out, g_get_size, &got);
        uint64_t t1 = env_clock_mono_ns();
        fill_obj(want, g_get_size, idx[k]);
        if (rc || got != g_get_size || memcmp(out, want, g_get_size) != 0) {
            fprintf(stderr, "bench_cold: get %s: %s (%s)\n", key, kvmesh_errname(rc),
                    kvmesh_last_error());
            return -1;
        }
        us[k] = (double)(t1 - t0) / 1e3;
        *total_s += (double)(t1 - t0) / 1e9;
    }
    return 0;
}

/* Times one kvmesh_batch_get of the n objects in idx (a batch restore: one device read for the
 * whole group); the bytes are checked after the call. */
static int time_batch(kvmesh_t *kv, const kvmesh_scope_t *sc, const uint32_t *idx, int n,
                      uint8_t *want, double *total_s)
{
    kvmesh_batch_item_t *it = calloc((size_t)n, sizeof(*it));
    char(*keys)[32] = calloc((size_t)n, 32);
    uint8_t *out = malloc((size_t)n * g_get_size);
    int rc = it && keys && out ? 0 : -1;
    for (int k = 0; rc == 0 && k < n; k++) {
        snprintf(keys[k], 32, "get-%05u", idx[k]);
        it[k] = (kvmesh_batch_item_t){.key = keys[k],
                                      .key_len = strlen(keys[k]),
                                      .buf = out + (size_t)k * g_get_size,
                                      .len = g_get_size};
    }
    if (rc == 0) {
        uint64_t t0 = env_clock_mono_ns();
        rc = kvmesh_batch_get(kv, sc, it, (size_t)n);
        *total_s = (double)(env_clock_mono_ns() - t0) / 1e9;
        if (rc)
            fprintf(stderr, "bench_cold: batch get: %s (%s)\n", kvmesh_errname(rc),
                    kvmesh_last_error());
    }
    for (int k = 0; rc == 0 && k < n; k++) {
        fill_obj(want, g_get_size, idx[k]);
        if (it[k].rc || it[k].out_len != g_get_size || memcmp(it[k].buf, want, g_get_size)) {
            fprintf(stderr, "bench_cold: batch get %s: %s\n", keys[k], kvmesh_errname(it[k].rc));
            rc = -1;
        }
    }
    free(it);
    free(keys);
    free(out);
    return rc;
}

static int bench_gets(const char *base, get_row_t *row)
{
    memset(row, 0, sizeof(*row));
    char root[PATH_MAX], dep[64], url[96];
    if ((size_t)snprintf(root, sizeof(root), "%s/get-dev", base) >= sizeof(root))
        return -1;
    if (mkdir(root, 0700) != 0 && errno != EEXIST) {
        perror("bench_cold: mkdir");
        return -1;
    }
    /* DRAM holds a quarter of the objects written: the rest become cold-only */
    uint64_t dram = (uint64_t)g_gets * g_get_size;
    if (dram < (8u << 20))
        dram = 8u << 20;
    uint32_t nobj = (uint32_t)(4 * dram / g_get_size);
    if (nobj > 4 * GET_MAX)
        nobj = 4 * GET_MAX;
    snprintf(dep, sizeof(dep), "benchcold%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    char dram_s[32], max_s[32], cap_s[32];
    snprintf(dram_s, sizeof(dram_s), "%llu", (unsigned long long)dram);
    snprintf(max_s, sizeof(max_s), "%llu", (unsigned long long)g_get_size);
    snprintf(cap_s, sizeof(cap_s), "%llu", (unsigned long long)(8 * dram));
    kvmesh_config_t *c = kvmesh_config_new();
    const char *kv_pairs[][2] = {
        {"metadata_url", url},
        {"deployment", dep},
        {"memory_size", dram_s},
        {"segment_size", dram_s},
        {"max_object_size", max_s},
        {"replicas", "1"},
        {"reclaim_grace_ms", "50"},
        {"cold_kind", "localdir"},
        {"cold_root", root},
        {"cold_capacity", cap_s},
        {"request_timeout_ms", "20000"},
    };
    for (size_t i = 0; c && i < sizeof(kv_pairs) / sizeof(kv_pairs[0]); i++)
        if (kvmesh_config_set(c, kv_pairs[i][0], kv_pairs[i][1]) != 0) {
            fprintf(stderr, "bench_cold: config %s: %s\n", kv_pairs[i][0], kvmesh_last_error());
            kvmesh_config_free(c);
            return -1;
        }
    kvmesh_t *kv = NULL;
    int rc = c ? kvmesh_open(&kv, c) : KVMESH_ENOMEM;
    kvmesh_config_free(c);
    if (rc) {
        fprintf(stderr, "bench_cold: open the runtime: %s\n", kvmesh_last_error());
        return -1;
    }
    const kvmesh_scope_t sc = {"bench", NULL};
    uint8_t *buf = malloc(g_get_size), *want = malloc(g_get_size);
    uint32_t *hot = calloc(nobj, sizeof(*hot)), *cold = calloc(nobj, sizeof(*cold));
    double *us = calloc(GET_MAX, sizeof(*us));
    rc = buf && want && hot && cold && us ? 0 : -1;
    for (uint32_t i = 0; rc == 0 && i < nobj; i++) {
        char key[32];
        snprintf(key, sizeof(key), "get-%05u", i);
        fill_obj(buf, g_get_size, i);
        int prc = -1;
        for (int t = 0; t < 500 && prc != 0; t++) { /* eviction waits for offloads */
            prc = kvmesh_put(kv, &sc, key, strlen(key), buf, g_get_size, NULL);
            if (prc)
                usleep(20000);
        }
        if (prc) {
            fprintf(stderr, "bench_cold: put %s: %s\n", key, kvmesh_last_error());
            rc = -1;
        }
    }
    /* cold-only objects: the first g_gets for single gets, the next g_gets for one batch get
     * (disjoint: a single get may re-promote its object) */
    int nh = 0, nc = 0, nb = 0;
    uint32_t *batch = calloc(nobj, sizeof(*batch));
    if (!batch)
        rc = -1;
    for (uint32_t i = 0; rc == 0 && i < nobj; i++) {
        char key[32];
        snprintf(key, sizeof(key), "get-%05u", i);
        kvmesh_route_info_t ri;
        if (kvmesh_route_query(kv, &sc, key, strlen(key), &ri) != 0)
            continue;
        if (ri.n_replicas > 0 && nh < g_gets)
            hot[nh++] = i;
        else if (ri.n_replicas == 0 && ri.cold_backed && nc < g_gets)
            cold[nc++] = i;
        else if (ri.n_replicas == 0 && ri.cold_backed && nb < g_gets)
            batch[nb++] = i;
    }
    double secs = 0;
    if (rc == 0) {
        nftw(root, drop_one, 16, FTW_PHYS); /* restores read the device */
        rc = time_gets(kv, &sc, cold, nc, buf, want, us, &secs);
        if (rc == 0 && nc > 0) {
            row->n_cold = nc;
            row->cold_gbs = (double)nc * (double)g_get_size / secs / 1e9;
            row->cold_p99 = pct(us, nc, 0.99);
            row->cold_med = pct(us, nc, 0.5);
        }
    }
    if (rc == 0 && nb > 0) {
        nftw(root, drop_one, 16, FTW_PHYS);
        rc = time_batch(kv, &sc, batch, nb, want, &secs);
        if (rc == 0) {
            row->n_batch = nb;
            row->batch_gbs = (double)nb * (double)g_get_size / secs / 1e9;
            row->batch_us = secs * 1e6 / nb;
        }
    }
    if (rc == 0) {
        rc = time_gets(kv, &sc, hot, nh, buf, want, us, &secs);
        if (rc == 0 && nh > 0) {
            row->n_hot = nh;
            row->hot_gbs = (double)nh * (double)g_get_size / secs / 1e9;
            row->hot_p99 = pct(us, nh, 0.99);
            row->hot_med = pct(us, nh, 0.5);
        }
    }
    printf("  get row: %u objects of %llu bytes written to %llu bytes of DRAM; timed %d gets "
           "from DRAM, %d restoring from cold, one batch get of %d restoring from cold\n",
           nobj, (unsigned long long)g_get_size, (unsigned long long)dram, nh, nc, nb);
    kvmesh_close(kv);
    free(buf);
    free(want);
    free(hot);
    free(cold);
    free(batch);
    free(us);
    return rc == 0 && nh > 0 && nc > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--size") == 0)
            g_size = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--total") == 0)
            g_total = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--threads") == 0)
            g_threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--only") == 0)
            g_only = argv[i + 1];
        else if (strcmp(argv[i], "--repeat") == 0)
            g_repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--get-size") == 0)
            g_get_size = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--gets") == 0)
            g_gets = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_cold [--dir D] [--size B] [--total B] [--threads N] "
                            "[--only localdir|extent-uring|extent-buffered] [--repeat N] "
                            "[--get-size B] [--gets N]\n");
            return 2;
        }
    }
    if (g_gets < 0 || g_gets > GET_MAX || g_get_size == 0 || g_get_size > (64u << 20)) {
        fprintf(stderr, "bench_cold: --gets is 0..%d and --get-size 1..64 MiB\n", GET_MAX);
        return 2;
    }
    if (g_repeat < 1 || g_repeat > 9) {
        fprintf(stderr, "bench_cold: --repeat is 1..9\n");
        return 2;
    }
    if (g_threads < 1 || g_threads > 64 || g_size == 0 || g_total < g_size * (uint64_t)g_threads) {
        fprintf(stderr, "bench_cold: need 1..64 threads and total >= size * threads\n");
        return 2;
    }
    char base[PATH_MAX];
    bool made = false;
    if (dir) {
        snprintf(base, sizeof(base), "%s", dir);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(base, sizeof(base), "%s/kvmesh-bench-cold-XXXXXX", t && t[0] ? t : "/var/tmp");
        if (!mkdtemp(base)) {
            perror("mkdtemp");
            return 1;
        }
        made = true;
    }
    struct utsname u;
    uname(&u);
    printf("bench_cold: %s, %llu-byte objects, %llu MiB per phase, %d threads, kernel %s\n", base,
           (unsigned long long)g_size, (unsigned long long)(g_total >> 20), g_threads, u.release);

    /* --repeat N rounds of (fio, every backend), so the device's drift hits all alike; the
     * table shows the median of each figure. */
    enum { NB = 4, MAXR = 9 };
    double put[NB][MAXR], get[NB][MAXR];
    const char *names[NB] = {"fio", "localdir", "extent-uring", "extent-buffered"};
    int rc = 0;
    for (int k = 0; k < g_repeat && rc == 0; k++) {
        printf("round %d\n", k + 1);
        /* the order rotates every round, so no one always runs first or after the same one */
        for (int step = 0; step < NB; step++) {
            int i = (step + k) % NB;
            if (i == 0) {
                put[0][k] = run_fio(base, false);
                get[0][k] = run_fio(base, true);
                char fd[PATH_MAX + 8];
                snprintf(fd, sizeof(fd), "%s/fio", base);
                nftw(fd, rm_one, 16, FTW_DEPTH | FTW_PHYS);
                printf("  %-18s             write %6.2f GB/s  read %6.2f GB/s\n", "fio",
                       put[0][k] / 1e9, get[0][k] / 1e9);
                continue;
            }
            static const cold_backend_kind_t kinds[NB] = {0, COLD_BACKEND_LOCALDIR,
                                                          COLD_BACKEND_EXTENT, COLD_BACKEND_EXTENT};
            static const cold_io_mode_t ios[NB] = {0, COLD_IO_AUTO, COLD_IO_AUTO, COLD_IO_BUFFERED};
            result_t r;
            rc |= bench_backend(base, names[i], kinds[i], ios[i], &r);
            put[i][k] = r.put;
            get[i][k] = r.get;
        }
    }
    get_row_t gr = {0};
    int grc = 0;
    if (rc == 0 && g_gets > 0)
        grc = bench_gets(base, &gr);
    if (made)
        nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (rc != 0 || grc != 0)
        return 1;
    double mp[NB], mg[NB];
    for (int i = 0; i < NB; i++) {
        mp[i] = median(put[i], g_repeat);
        mg[i] = median(get[i], g_repeat);
    }
    printf("\nmedian of %d round(s):\n", g_repeat);
    printf("| backend | offload GB/s | x fio write | restore GB/s | x fio read |\n");
    printf("|---|---|---|---|---|\n");
    for (int i = 0; i < NB; i++) {
        if (i > 0 && g_only && strcmp(g_only, names[i]) != 0)
            continue;
        printf("| %s | %.2f | %.2f | %.2f | %.2f |\n",
               i == 0 ? "fio (psync, fdatasync per block)" : names[i], mp[i] / 1e9,
               mp[0] > 0 ? mp[i] / mp[0] : 0, mg[i] / 1e9, mg[0] > 0 ? mg[i] / mg[0] : 0);
    }
    if (g_gets > 0) {
        printf("\nget of %llu-byte objects through a runtime (LocalDir cold tier, same run):\n",
               (unsigned long long)g_get_size);
        printf("| get | gets | median us | p99 us | GB/s | median x DRAM |\n");
        printf("|---|---|---|---|---|---|\n");
        printf("| from DRAM | %d | %.0f | %.0f | %.2f | 1.00 |\n", gr.n_hot, gr.hot_med, gr.hot_p99,
               gr.hot_gbs);
        printf("| restoring from cold | %d | %.0f | %.0f | %.2f | %.1f |\n", gr.n_cold, gr.cold_med,
               gr.cold_p99, gr.cold_gbs, gr.hot_med > 0 ? gr.cold_med / gr.hot_med : 0);
        if (gr.n_batch > 0) /* one call: the per-object time is the call's over its items */
            printf("| restoring from cold, one batch get | %d | %.0f (mean per object) | - | "
                   "%.2f | %.1f (x single restore GB/s: %.2f) |\n",
                   gr.n_batch, gr.batch_us, gr.batch_gbs,
                   gr.hot_med > 0 ? gr.batch_us / gr.hot_med : 0,
                   gr.cold_gbs > 0 ? gr.batch_gbs / gr.cold_gbs : 0);
    }
    return 0;
}
