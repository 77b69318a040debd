/* SPDX-License-Identifier: Apache-2.0 */
/*
 * python_cbench.c — the C side of bench/python_bench.py: joins a running deployment as a
 * client-only runtime and measures kvmesh_batch_put / kvmesh_batch_get GB/s on registered
 * buffers, the same workload the Python side runs through kvmesh.mooncake's batch_put_from /
 * batch_get_into, so the two are compared on the same cluster in the same run.
 *
 *   bench_python_cbench URL DEPLOYMENT TENANT SIZE BATCH ROUNDS [FIELD=VALUE...]
 *
 * Prints one line: "size=S batch=B rounds=R put_gbps=X get_gbps=Y" (one untimed warm-up round
 * first, as on the Python side). Every get is checked
 * (length and a per-item stamp); exit status 1 on any failed item or wrong byte.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvmesh.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int set(kvmesh_config_t *cfg, const char *f, const char *v)
{
    int rc = kvmesh_config_set(cfg, f, v);
    if (rc)
        fprintf(stderr, "config %s=%s: %s\n", f, v, kvmesh_last_error());
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s URL DEPLOYMENT TENANT SIZE BATCH ROUNDS [FIELD=VALUE...]\n",
                argv[0]);
        return 2;
    }
    size_t size = strtoull(argv[4], NULL, 10), batch = strtoull(argv[5], NULL, 10);
    int rounds = atoi(argv[6]);
    if (!size || !batch || batch > KVMESH_BATCH_MAX || rounds <= 0) {
        fprintf(stderr, "bad SIZE/BATCH/ROUNDS\n");
        return 2;
    }
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg || set(cfg, "metadata_url", argv[1]) || set(cfg, "deployment", argv[2]) ||
        set(cfg, "memory_size", "0"))
        return 1;
    for (int i = 7; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "bad FIELD=VALUE: %s\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        if (set(cfg, argv[i], eq + 1))
            return 1;
    }
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, cfg);
    kvmesh_config_free(cfg);
    if (rc) {
        fprintf(stderr, "open: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        return 1;
    }
    const kvmesh_scope_t scope = {.tenant = argv[3], .domain = NULL};
    size_t total = size * batch;
    uint8_t *src = aligned_alloc(4096, (total + 4095) / 4096 * 4096);
    uint8_t *dst = aligned_alloc(4096, (total + 4095) / 4096 * 4096);
    kvmesh_batch_item_t *items = calloc(batch, sizeof(*items));
    char(*keys)[48] = calloc(batch, sizeof(*keys));
    int bad = 0;
    if (!src || !dst || !items || !keys) {
        fprintf(stderr, "out of memory\n");
        bad = 1;
        goto out;
    }
    for (size_t i = 0; i < total; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    if ((rc = kvmesh_register_buffer(kv, src, total)) ||
        (rc = kvmesh_register_buffer(kv, dst, total))) {
        fprintf(stderr, "register: %s\n", kvmesh_last_error());
        bad = 1;
        goto out;
    }
    double put_s = 0, get_s = 0;
    /* round 0 warms up (connections, segment mappings, first-touch pages) and is not timed */
    for (int r = 0; r <= rounds && !bad; r++) {
        for (size_t i = 0; i < batch; i++) {
            snprintf(keys[i], sizeof(keys[i]), "cb-%zu-%d-%zu", size, r, i);
            memcpy(src + i * size, &r, sizeof(r) < size ? sizeof(r) : size); /* stamp */
            items[i] = (kvmesh_batch_item_t){
                .key = keys[i], .key_len = strlen(keys[i]), .buf = src + i * size, .len = size};
        }
        double t0 = now_s();
        rc = kvmesh_batch_put(kv, &scope, items, batch, NULL);
        if (r)
            put_s += now_s() - t0;
        if (rc) {
            fprintf(stderr, "batch_put: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            bad = 1;
            break;
        }
        for (size_t i = 0; i < batch; i++)
            items[i].buf = dst + i * size;
        t0 = now_s();
        rc = kvmesh_batch_get(kv, &scope, items, batch);
        if (r)
            get_s += now_s() - t0;
        for (size_t i = 0; i < batch && !rc; i++)
            if (items[i].rc || items[i].out_len != size ||
                memcmp(dst + i * size, src + i * size, size) != 0)
                rc = items[i].rc ? items[i].rc : -1;
        if (rc) {
            fprintf(stderr, "batch_get: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
            bad = 1;
            break;
        }
        kvmesh_batch_remove(kv, &scope, items, batch);
    }
    if (!bad) {
        double bytes = (double)total * rounds;
        printf("size=%zu batch=%zu rounds=%d put_gbps=%.3f get_gbps=%.3f\n", size, batch, rounds,
               bytes / put_s / 1e9, bytes / get_s / 1e9);
    }
    kvmesh_unregister_buffer(kv, src);
    kvmesh_unregister_buffer(kv, dst);
out:
    free(src);
    free(dst);
    free(items);
    free(keys);
    kvmesh_close(kv);
    return bad;
}
