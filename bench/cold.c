// SPDX-License-Identifier: Apache-2.0
/*
 * bench/cold.c — cold tier backend throughput on this machine: offload (put) and restore (get,
 * checksum verified) GB/s of LocalDir and ExtentStore (io_uring and buffered), against fio's
 * sequential write and read of the same directory with the same block size, job count and
 * durability (fdatasync after every block, like a put's), measured in the same run. Before
 * every read phase the files' page cache is dropped (posix_fadvise DONTNEED on the backends'
 * files; fio's invalidate=1), so restores read the device. Prints one table with the ratio of
 * each backend to fio (the goal is >= 0.7).
 *
 *   bench_cold [--dir DIR] [--size BYTES] [--total BYTES] [--threads N] [--only BACKEND]
 *              [--repeat N]  (N rounds, the table shows medians)
 *   defaults: a fresh directory under $TMPDIR (or /var/tmp), 4 MiB objects, 1 GiB, 4 threads
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
#include "cold/cold_backend_open.h"
#include "core/hash.h"
#include "env/clock.h"

static uint64_t g_size = 4u << 20, g_total = 1u << 30;
static int g_threads = 4;
static const char *g_only; /* --only NAME: one backend (and fio) */
static int g_repeat = 1;

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
        else {
            fprintf(stderr, "usage: bench_cold [--dir D] [--size B] [--total B] [--threads N] "
                            "[--only localdir|extent-uring|extent-buffered] [--repeat N]\n");
            return 2;
        }
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
    if (made)
        nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (rc != 0)
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
    return 0;
}
