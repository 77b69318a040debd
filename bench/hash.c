/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.c (bench_hash) — the payload checksum against memcpy, and copy + checksum fused.
 *
 * Prints GB/s (bytes per wall second, and per CPU second of this thread) for, at each size:
 *   memcpy                 copy only;
 *   hash <variant>         XXH3-64 of the source for every variant this CPU runs ("xxhash" is
 *                          the system libxxhash, the others core/hash_fast.c's);
 *   copy+hash B            (with the variant the store picks) the copy and the streamed
 *                          checksum in one pass, block by block (each
 *                          block hashed right after it was copied, as src/store/data.c and the
 *                          shm transport do), for block sizes B from 16 KiB to 1 MiB;
 *   copy, then hash        two passes over the whole buffer.
 * Sources and destinations rotate through a pool larger than the last-level cache (--pool), so
 * every transfer starts from memory, as a put of a new value or a get of an old one does;
 * --hot uses one buffer pair (data already in cache).
 *
 * Usage: bench_hash [--secs S] [--pool MiB] [--hot] [--sizes 64KiB,1MiB,16MiB]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"

#define MAX_SIZES 8

struct pool {
    unsigned char *src, *dst;
    size_t bytes, size, n, next; /* n buffers of size bytes each */
};

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum job { J_COPY, J_HASH, J_FUSED, J_SEPARATE };

static uint64_t sink;

static void run_one(enum job j, unsigned char *d, const unsigned char *s, size_t n, size_t blk)
{
    struct kvm_sum st;
    switch (j) {
    case J_COPY:
        memcpy(d, s, n);
        break;
    case J_HASH:
        sink += kvm_checksum(s, n);
        break;
    case J_SEPARATE:
        memcpy(d, s, n);
        sink += kvm_checksum(d, n);
        break;
    case J_FUSED:
        kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
        for (size_t o = 0; o < n; o += blk) {
            size_t k = n - o < blk ? n - o : blk;
            memcpy(d + o, s + o, k);
            kvm_sum_update(&st, d + o, k);
        }
        sink += kvm_sum_digest(&st);
        break;
    }
}

/* Runs job j for about secs seconds; prints wall and CPU GB/s. */
static void cell(struct pool *p, const char *label, enum job j, size_t blk, double secs)
{
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID), w1;
    size_t bytes = 0;
    do {
        for (int r = 0; r < 8; r++) {
            size_t i = p->next++ % p->n;
            run_one(j, p->dst + i * p->size, p->src + i * p->size, p->size, blk);
            bytes += p->size;
        }
        w1 = now(CLOCK_MONOTONIC);
    } while (w1 - w0 < secs);
    double c1 = now(CLOCK_THREAD_CPUTIME_ID);
    printf("| %-8zu | %-22s | %8.2f | %8.2f |\n", p->size >> 10, label,
           (double)bytes / (w1 - w0) / 1e9, (double)bytes / (c1 - c0) / 1e9);
    fflush(stdout);
}

static size_t parse_size(const char *s)
{
    char *end;
    size_t v = strtoull(s, &end, 10);
    if (strncmp(end, "KiB", 3) == 0)
        return v << 10;
    if (strncmp(end, "MiB", 3) == 0)
        return v << 20;
    return v;
}

static void bench_size(struct pool *p, size_t size, bool hot, double secs)
{
    p->size = size;
    p->n = hot ? 1 : p->bytes / size;
    const char *names[8], *dflt = kvm_hash_impl(); /* the one the store uses */
    size_t nv = kvm_hash_impls(names, 8);
    char label[64];
    cell(p, "memcpy", J_COPY, 0, secs);
    for (size_t v = 0; v < nv; v++) {
        kvm_hash_impl_use(names[v]);
        snprintf(label, sizeof(label), "hash %s", names[v]);
        cell(p, label, J_HASH, 0, secs);
    }
    kvm_hash_impl_use(dflt);
    for (size_t blk = 16 << 10; blk <= (1u << 20) && blk <= size; blk <<= 1) {
        snprintf(label, sizeof(label), "copy+hash %zu KiB (%s)", blk >> 10, kvm_hash_impl());
        cell(p, label, J_FUSED, blk, secs);
    }
    snprintf(label, sizeof(label), "copy, then hash (%s)", kvm_hash_impl());
    cell(p, label, J_SEPARATE, 0, secs);
}

int main(int argc, char **argv)
{
    double secs = 0.5;
    size_t pool_mib = 512, sizes[MAX_SIZES] = {64 << 10, 1 << 20, 16 << 20}, nsizes = 3;
    bool hot = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--secs") == 0 && i + 1 < argc) {
            secs = atof(argv[++i]);
        } else if (strcmp(argv[i], "--pool") == 0 && i + 1 < argc) {
            pool_mib = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--hot") == 0) {
            hot = true;
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            nsizes = 0;
            for (char *t = strtok(argv[++i], ","); t && nsizes < MAX_SIZES; t = strtok(NULL, ","))
                sizes[nsizes++] = parse_size(t);
        } else {
            fprintf(stderr, "usage: bench_hash [--secs S] [--pool MiB] [--hot] [--sizes LIST]\n");
            return 2;
        }
    }
    struct pool p = {.bytes = pool_mib << 20};
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i] == 0 || sizes[i] > p.bytes) {
            fprintf(stderr, "bench_hash: sizes must be in [1, pool]\n");
            return 2;
        }
    p.src = malloc(p.bytes);
    p.dst = malloc(p.bytes);
    if (!p.src || !p.dst) {
        fprintf(stderr, "bench_hash: out of memory for a %zu MiB pool\n", pool_mib);
        return 1;
    }
    for (size_t i = 0; i < p.bytes; i++)
        p.src[i] = (unsigned char)(i * 131 + (i >> 12));
    memset(p.dst, 1, p.bytes);
    printf("bench_hash: %s, %zu MiB pool, %.2f s per cell; GB/s per wall second and per CPU "
           "second\n\n| KiB      | job                    | wall     | cpu      |\n"
           "|----------|------------------------|----------|----------|\n",
           hot ? "hot (one buffer)" : "from memory", hot ? (size_t)0 : pool_mib, secs);
    for (size_t i = 0; i < nsizes; i++)
        bench_size(&p, sizes[i], hot, secs);
    free(p.src);
    free(p.dst);
    return sink == 42; /* keeps the hashes */
}
