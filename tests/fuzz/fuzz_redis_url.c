/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_redis_url.c — libFuzzer target for the Redis backend's URL parser (meta_redis_url.c).
 * Any input must either parse into a well-formed result (NUL-terminated fields within their
 * limits, a port in 1..65535, a database in range, a valid namespace) or be rejected with
 * KVMESH_EURL; never crash, never read past the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"
#include "meta/meta_redis_url.h"

/* The parser comes from libkvmesh, which the fuzz build instruments (-fsanitize=fuzzer-no-link),
 * so libFuzzer sees its branches. */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    meta_redis_url_t u;
    int rc = meta_redis_url_parse(s, &u);
    if (rc != 0 && rc != KVMESH_EURL)
        abort();
    if (rc == 0) {
        if (u.port == 0 || u.db < 0 || u.db > META_REDIS_DB_MAX || u.host[0] == '\0' ||
            strlen(u.host) > META_REDIS_HOST_MAX || strlen(u.user) > META_REDIS_CRED_MAX ||
            strlen(u.pass) > META_REDIS_CRED_MAX || u.ns[0] == '\0' ||
            strlen(u.ns) > META_REDIS_NS_MAX || (u.has_user && !u.has_pass) ||
            strncmp(s, "redis://", 8) != 0)
            abort();
        /* parsing is a pure function of the input */
        meta_redis_url_t v;
        if (meta_redis_url_parse(s, &v) != 0 || memcmp(&u, &v, sizeof(u)) != 0)
            abort();
    }
    free(s);
    return 0;
}
