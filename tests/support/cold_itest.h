/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_itest.h — helpers the cold tier's integration tests share (header-only; cold_store.c,
 * cold_evict_mode.c, cold_store_crash.c, cold_batch.c, cold_health.c, cold_mixed.c): one sample
 * of a runtime's /metrics over HTTP (one or two labels), a walk over the LocalDir fan-out files
 * under a device root (counting, corrupting and removing them is tests/support/coldfiles.h), the
 * tests' payload pattern, and a bounded wait for storage members.
 *
 * Needs libcurl (curl_global_init by the caller) and tests/integration/obs_prom.h (included here).
 * Nothing is kept between calls; every buffer is freed before returning.
 */
#ifndef KVMESH_TESTS_SUPPORT_COLD_ITEST_H
#define KVMESH_TESTS_SUPPORT_COLD_ITEST_H

#include <curl/curl.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "curl_body.h"
#include "kvmesh.h"
#include "../integration/obs_prom.h" /* (header-only) */

/* GET http://127.0.0.1:port/metrics and the value of name{l1="v1",l2="v2"} (l1, l2 NULL: fewer
 * labels) into *out. Returns 0, or -1 when the request failed, the answer was not 200 or did
 * not parse. */
static inline int cold_itest_metric2(uint16_t port, const char *name, const char *l1,
                                     const char *v1, const char *l2, const char *v2, double *out)
{
    struct tcurl_body b = {0};
    long code = tcurl_get_local(port, "/metrics", &b);
    int rc = -1;
    struct prom p;
    memset(&p, 0, sizeof(p));
    if (code == 200 && prom_parse(&p, b.data, b.len) == 0) {
        *out = prom_value(&p, name, l1, v1, l2, v2);
        rc = 0;
    }
    prom_free(&p);
    free(b.data);
    return rc;
}

/* cold_itest_metric2() of one label name{l="v"} (l NULL: unlabelled). */
static inline int cold_itest_metric(uint16_t port, const char *name, const char *l, const char *v,
                                    double *out)
{
    return cold_itest_metric2(port, name, l, v, NULL, NULL, out);
}

/* Calls fn(dir, name, arg) for every entry of the LocalDir fan-out directories
 * (<root>/ld/<hh>/), temporaries included, until fn returns false. Returns the number of calls,
 * or SIZE_MAX when <root>/ld cannot be opened. */
static inline size_t
cold_itest_localdir_walk(const char *root, bool (*fn)(const char *dir, const char *name, void *arg),
                         void *arg)
{
    char ld[256];
    snprintf(ld, sizeof(ld), "%s/ld", root);
    DIR *top = opendir(ld);
    if (!top)
        return SIZE_MAX;
    size_t n = 0;
    bool go = true;
    struct dirent *d;
    while (go && (d = readdir(top)) != NULL) {
        if (d->d_name[0] == '.')
            continue;
        char sub[512];
        snprintf(sub, sizeof(sub), "%s/%s", ld, d->d_name);
        DIR *s = opendir(sub);
        if (!s)
            continue;
        struct dirent *e;
        while (go && (e = readdir(s)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            n++;
            go = fn(sub, e->d_name, arg);
        }
        closedir(s);
    }
    closedir(top);
    return n;
}

/* The payload pattern of the cold tests: len bytes of xorshift64 output from seed (the same
 * seed always gives the same bytes, so a read-back is compared with a fresh fill). */
static inline void cold_itest_fill(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed;
    for (size_t k = 0; k < len; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[k] = (uint8_t)x;
    }
}

/* Waits (bounded: 200 x 50 ms) until kv's membership snapshot lists at least `want` active
 * members with storage capacity. False when it did not, or the members call failed. */
static inline bool cold_itest_wait_storage(kvmesh_t *kv, size_t want)
{
    for (int t = 0; t < 200; t++) {
        kvmesh_member_info_t ms[8];
        size_t nm = 0;
        if (kvmesh_members(kv, ms, 8, &nm) != 0)
            return false;
        size_t storage = 0;
        for (size_t m = 0; m < nm && m < 8; m++)
            storage += ms[m].capacity_bytes > 0 && strcmp(ms[m].state, "active") == 0;
        if (storage >= want)
            return true;
        usleep(50000);
    }
    return false;
}

#endif
