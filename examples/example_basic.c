/* SPDX-License-Identifier: Apache-2.0 */
/*
 * example_basic.c — a complete kvmesh program: open a runtime, store a KV block, read it back
 * three ways (new buffer, caller buffer, scatter list), inspect its route, batch, remove, close.
 *
 * Build: cc example_basic.c -lkvmesh   (the test suite compiles and runs it as
 * itest_api_example). With no argument it uses the in-process memory:// metadata store, so it
 * needs no server; pass a URL (redis://127.0.0.1:6379, etcd://127.0.0.1:2379) to join a real
 * deployment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"

#define FAIL(what, rc)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "%s: %s: %s\n", what, kvmesh_errname(rc), kvmesh_last_error());            \
        goto out;                                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    int rc = 1;
    kvmesh_t *kv = NULL;
    uint8_t *block = NULL;
    void *copy = NULL;

    /* 1. Configure: fields by name, validated one by one. */
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg)
        return 1;
    const char *url = argc > 1 ? argv[1] : "memory://example";
    if ((rc = kvmesh_config_set(cfg, "metadata_url", url)) ||
        (rc = kvmesh_config_set(cfg, "memory_size", "67108864")) || /* 64 MiB contributed */
        (rc = kvmesh_config_set(cfg, "segment_size", "67108864")) ||
        (rc = kvmesh_config_set(cfg, "max_object_size", "16777216")) ||
        /* Routes in the metadata store; the default, embedded_wrh, keeps them off metadata. */
        (rc = kvmesh_config_set(cfg, "route_mode", "metadata_only"))) {
        fprintf(stderr, "config: %s\n", kvmesh_last_error());
        kvmesh_config_free(cfg);
        return 1;
    }

    /* 2. Open: joins the deployment (the config is copied; free it right away). */
    rc = kvmesh_open(&kv, cfg);
    kvmesh_config_free(cfg);
    if (rc)
        FAIL("open", rc);

    /* 3. Put a 1 MiB block under tenant "demo", domain "llama-70b". */
    const kvmesh_scope_t scope = {.tenant = "demo", .domain = "llama-70b"};
    const char *key = "layer0/prefix-hash-1234";
    size_t len = 1 << 20;
    block = malloc(len);
    if (!block)
        goto out;
    for (size_t i = 0; i < len; i++)
        block[i] = (uint8_t)(i * 31);
    if ((rc = kvmesh_put(kv, &scope, key, strlen(key), block, len, NULL)))
        FAIL("put", rc);

    /* 4a. Get into a new buffer (free it with kvmesh_free). */
    size_t got = 0;
    if ((rc = kvmesh_get(kv, &scope, key, strlen(key), &copy, &got)))
        FAIL("get", rc);
    if (got != len || memcmp(copy, block, len) != 0) {
        fprintf(stderr, "get returned different bytes\n");
        rc = 1;
        goto out;
    }

    /* 4b. Get into a registered buffer: the transport writes straight into it. */
    if ((rc = kvmesh_register_buffer(kv, copy, got)))
        FAIL("register", rc);
    memset(copy, 0, got);
    if ((rc = kvmesh_get_into(kv, &scope, key, strlen(key), copy, got, &got)))
        FAIL("get_into", rc);
    kvmesh_unregister_buffer(kv, copy);

    /* 4c. Scatter into two halves. */
    struct iovec halves[2] = {{copy, len / 2}, {(uint8_t *)copy + len / 2, len / 2}};
    if ((rc = kvmesh_getv(kv, &scope, key, strlen(key), halves, 2, &got)))
        FAIL("getv", rc);

    /* 5. Where does it live? */
    kvmesh_route_info_t route;
    if ((rc = kvmesh_route_query(kv, &scope, key, strlen(key), &route)))
        FAIL("route_query", rc);
    printf("stored %zu bytes, version (%llu,%llu), %u replica(s), first on %s\n", got,
           (unsigned long long)route.fencing_token, (unsigned long long)route.primary_sequence,
           route.n_replicas, route.replicas[0].owner);

    /* 6. A batch: one result per item. */
    kvmesh_batch_item_t items[2] = {
        {.key = "a", .key_len = 1, .buf = block, .len = 100},
        {.key = "b", .key_len = 1, .buf = block + 100, .len = 200},
    };
    if ((rc = kvmesh_batch_put(kv, &scope, items, 2, NULL)))
        FAIL("batch_put", rc);
    if ((rc = kvmesh_batch_exists(kv, &scope, items, 2)))
        FAIL("batch_exists", rc);
    printf("batch: a=%zu bytes, b=%zu bytes\n", items[0].out_len, items[1].out_len);

    /* 7. Remove; a later get says KVMESH_ENOENT. */
    if ((rc = kvmesh_remove(kv, &scope, key, strlen(key))))
        FAIL("remove", rc);
    bool exists = true;
    if ((rc = kvmesh_exists(kv, &scope, key, strlen(key), &exists)) || exists) {
        fprintf(stderr, "object still exists after remove\n");
        rc = 1;
        goto out;
    }
    printf("removed; example done\n");
    rc = 0;
out:
    kvmesh_free(copy);
    free(block);
    kvmesh_close(kv); /* NULL is fine */
    return rc ? 1 : 0;
}
