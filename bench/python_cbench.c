/* SPDX-License-Identifier: Apache-2.0 */
/*
 * python_cbench.c — the C side of bench/python_bench.py: joins a running deployment as a
 * client-only runtime and measures kvmesh_batch_put / kvmesh_batch_get GB/s on registered
 * buffers, the same workload the Python side runs through kvmesh.mooncake's batch_put_from /
 * batch_get_into, so the two are compared on the same cluster in the same run.
 *
 *   bench_python_cbench URL DEPLOYMENT TENANT CAP_BYTES [FIELD=VALUE...]
 *
 * Long-lived, like the Python side (so neither pays a fresh process's first-touch costs alone):
 * registers two CAP_BYTES buffers, prints "READY", then reads commands from stdin, one per line,
 * "SIZE BATCH ROUNDS" (SIZE * BATCH <= CAP_BYTES), and answers each with one line
 * "size=S batch=B rounds=R put_gbps=X get_gbps=Y" after ROUNDS untimed warm-up rounds and
 * ROUNDS timed ones (as the Python side does). Every get is checked (length, bytes); a failed
 * item or a wrong byte prints "ERROR ..." and exits 1. EOF ends it (exit 0).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvmesh.h"
#include "env/clock.h"

static int set(kvmesh_config_t *cfg, const char *f, const char *v)
{
    int rc = kvmesh_config_set(cfg, f, v);
    if (rc)
        fprintf(stderr, "config %s=%s: %s\n", f, v, kvmesh_last_error());
    return rc;
}

struct bench {
    kvmesh_t *kv;
    kvmesh_scope_t scope;
    uint8_t *src, *dst;
    size_t cap;
    kvmesh_batch_item_t items[KVMESH_BATCH_MAX];
    char keys[KVMESH_BATCH_MAX][48];
    unsigned run; /* distinct keys per command */
};

/* One command; 0 and the result line on stdout, or 1 with "ERROR ..." printed. */
static int run_one(struct bench *b, size_t size, size_t batch, int rounds)
{
    double put_s = 0, get_s = 0;
    b->run++;
    for (int r = 0; r < 2 * rounds; r++) {
        for (size_t i = 0; i < batch; i++) {
            snprintf(b->keys[i], sizeof(b->keys[i]), "cb-%u-%d-%zu", b->run, r, i);
            memcpy(b->src + i * size, &r, sizeof(r) < size ? sizeof(r) : size); /* stamp */
            b->items[i] = (kvmesh_batch_item_t){.key = b->keys[i],
                                                .key_len = strlen(b->keys[i]),
                                                .buf = b->src + i * size,
                                                .len = size};
        }
        double t0 = ((double)env_clock_mono_ns() / 1e9);
        int rc = kvmesh_batch_put(b->kv, &b->scope, b->items, batch, NULL);
        if (r >= rounds)
            put_s += ((double)env_clock_mono_ns() / 1e9) - t0;
        if (rc) {
            printf("ERROR batch_put: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            return 1;
        }
        for (size_t i = 0; i < batch; i++)
            b->items[i].buf = b->dst + i * size;
        t0 = ((double)env_clock_mono_ns() / 1e9);
        rc = kvmesh_batch_get(b->kv, &b->scope, b->items, batch);
        if (r >= rounds)
            get_s += ((double)env_clock_mono_ns() / 1e9) - t0;
        for (size_t i = 0; i < batch && !rc; i++)
            if (b->items[i].rc || b->items[i].out_len != size ||
                memcmp(b->dst + i * size, b->src + i * size, size) != 0)
                rc = b->items[i].rc ? b->items[i].rc : -1;
        if (rc) {
            printf("ERROR batch_get: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            return 1;
        }
        kvmesh_batch_remove(b->kv, &b->scope, b->items, batch);
    }
    double bytes = (double)size * (double)batch * rounds;
    printf("size=%zu batch=%zu rounds=%d put_gbps=%.3f get_gbps=%.3f\n", size, batch, rounds,
           bytes / put_s / 1e9, bytes / get_s / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s URL DEPLOYMENT TENANT CAP_BYTES [FIELD=VALUE...]\n", argv[0]);
        return 2;
    }
    static struct bench b;
    b.cap = strtoull(argv[4], NULL, 10);
    if (!b.cap) {
        fprintf(stderr, "bad CAP_BYTES\n");
        return 2;
    }
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg || set(cfg, "metadata_url", argv[1]) || set(cfg, "deployment", argv[2]) ||
        set(cfg, "memory_size", "0"))
        return 1;
    for (int i = 5; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "bad FIELD=VALUE: %s\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        if (set(cfg, argv[i], eq + 1))
            return 1;
    }
    int rc = kvmesh_open(&b.kv, cfg);
    kvmesh_config_free(cfg);
    if (rc) {
        fprintf(stderr, "open: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        return 1;
    }
    b.scope = (kvmesh_scope_t){.tenant = argv[3], .domain = NULL};
    size_t alloc = (b.cap + 4095) / 4096 * 4096;
    b.src = aligned_alloc(4096, alloc);
    b.dst = aligned_alloc(4096, alloc);
    int bad = 0;
    if (!b.src || !b.dst) {
        fprintf(stderr, "out of memory\n");
        bad = 1;
        goto out;
    }
    for (size_t i = 0; i < b.cap; i++)
        b.src[i] = (uint8_t)(i * 7 + 3);
    memset(b.dst, 0, b.cap);
    if ((rc = kvmesh_register_buffer(b.kv, b.src, b.cap)) ||
        (rc = kvmesh_register_buffer(b.kv, b.dst, b.cap))) {
        fprintf(stderr, "register: %s\n", kvmesh_last_error());
        bad = 1;
        goto out;
    }
    printf("READY\n");
    fflush(stdout);
    char line[256];
    while (!bad && fgets(line, sizeof(line), stdin)) {
        size_t size = 0, batch = 0;
        int rounds = 0;
        if (sscanf(line, "%zu %zu %d", &size, &batch, &rounds) != 3 || !size || !batch ||
            batch > KVMESH_BATCH_MAX || rounds <= 0 || size > b.cap / batch) {
            printf("ERROR bad command: %s", line);
            bad = 1;
            break;
        }
        bad = run_one(&b, size, batch, rounds);
        fflush(stdout);
    }
    kvmesh_unregister_buffer(b.kv, b.src);
    kvmesh_unregister_buffer(b.kv, b.dst);
out:
    free(b.src);
    free(b.dst);
    kvmesh_close(b.kv);
    return bad;
}
