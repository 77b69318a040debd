/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_etcd_url.c — libFuzzer target for the etcd:// URL parser (etcd_url_parse). Accepted URLs
 * must yield 1..ETCD_MAX_ENDPOINTS endpoints with a non-empty host and a port in 1..65535;
 * rejected ones must return KVMESH_EURL with a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvmesh.h"
#include "meta/etcd_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    etcd_url_t u;
    char err[256];
    err[0] = '\0';
    int rc = etcd_url_parse(s, &u, err, sizeof(err));
    if (rc == 0) {
        if (u.n_eps < 1 || u.n_eps > ETCD_MAX_ENDPOINTS)
            __builtin_trap();
        for (size_t i = 0; i < u.n_eps; i++)
            if (u.eps[i].host[0] == '\0' || u.eps[i].port == 0)
                __builtin_trap();
    } else if (rc != KVMESH_EURL || err[0] == '\0') {
        __builtin_trap();
    }
    free(s);
    return 0;
}
