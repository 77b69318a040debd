/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_history.c — the per-key route history checker (see route_history.h for the rules).
 * Quadratic per key; histories are bounded by their producers (tens of thousands of ops).
 */
#include "route_history.h"

#include <stdio.h>
#include <stdlib.h>

#include "kvmesh.h"

static bool rh_acked(const route_hist_op_t *o)
{
    return o->kind == ROUTE_HIST_CAS && o->done && o->status == 0;
}

#define RH_FAIL(...)                                                                               \
    do {                                                                                           \
        snprintf(msg, cap, __VA_ARGS__);                                                           \
        rc = KVMESH_ECORRUPT;                                                                      \
        goto out;                                                                                  \
    } while (0)

int route_hist_check(const route_hist_op_t *ops, size_t n, uint64_t n_keys, uint64_t corrupt_ok_key,
                     uint64_t unit, char *msg, size_t cap)
{
    int rc = 0;
    if (unit == 0)
        unit = 1;
    /* per-key lists of completed operations, so that the pairwise checks stay per key */
    const route_hist_op_t **by_key = calloc(n ? n : 1, sizeof(*by_key));
    size_t *start = calloc(n_keys + 1, sizeof(*start));
    size_t *fillp = calloc(n_keys + 1, sizeof(*fillp));
    if (!by_key || !start || !fillp) {
        snprintf(msg, cap, "route history check: out of memory");
        rc = KVMESH_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (ops[i].done && ops[i].key < n_keys)
            start[ops[i].key + 1]++;
    for (uint64_t k = 0; k < n_keys; k++)
        start[k + 1] += start[k];
    for (uint64_t k = 0; k <= n_keys; k++)
        fillp[k] = start[k];
    for (size_t i = 0; i < n; i++)
        if (ops[i].done && ops[i].key < n_keys)
            by_key[fillp[ops[i].key]++] = &ops[i];
    for (size_t i = 0; i < n; i++) {
        const route_hist_op_t *a = &ops[i];
        if (!a->done)
            continue;
        if (a->kind == ROUTE_HIST_LOOKUP && a->status == KVMESH_ECORRUPT &&
            a->key != corrupt_ok_key)
            RH_FAIL("lookup of k%llu failed with a protocol conflict", (unsigned long long)a->key);
        if (!rh_acked(a) || a->key >= n_keys)
            continue;
        if (a->version <= a->expected)
            RH_FAIL("CAS on k%llu acknowledged version %llx not above expected %llx",
                    (unsigned long long)a->key, (unsigned long long)a->version,
                    (unsigned long long)a->expected);
        for (size_t j = start[a->key]; j < start[a->key + 1]; j++) {
            const route_hist_op_t *b = by_key[j];
            if (a == b)
                continue;
            if (rh_acked(b)) {
                if (a->expected == b->expected)
                    RH_FAIL("k%llu: two acknowledged CAS from predecessor %llx (values %llu, "
                            "%llu)",
                            (unsigned long long)a->key, (unsigned long long)a->expected,
                            (unsigned long long)a->value, (unsigned long long)b->value);
                if (a->version == b->version)
                    RH_FAIL("k%llu: two acknowledged CAS produced version %llx",
                            (unsigned long long)a->key, (unsigned long long)a->version);
                if (a->version < b->version && b->expected < a->version)
                    RH_FAIL("k%llu: acknowledged %llx lost: %llx was applied over %llx",
                            (unsigned long long)a->key, (unsigned long long)a->version,
                            (unsigned long long)b->version, (unsigned long long)b->expected);
                if (a->end < b->begin && a->version > b->version)
                    RH_FAIL("k%llu: real-time order violated (%llx before %llx)",
                            (unsigned long long)a->key, (unsigned long long)a->version,
                            (unsigned long long)b->version);
            }
            if (b->kind == ROUTE_HIST_LOOKUP && (b->status == 0 || b->status == KVMESH_ENOENT)) {
                if (a->end < b->begin && b->version < a->version)
                    RH_FAIL("k%llu: stale read: lookup (client %u, t=%llu) returned %llx after "
                            "CAS %llx (value %llu) was acknowledged at t=%llu",
                            (unsigned long long)a->key, b->client,
                            (unsigned long long)(b->begin / unit), (unsigned long long)b->version,
                            (unsigned long long)a->version, (unsigned long long)a->value,
                            (unsigned long long)(a->end / unit));
                if (b->version == a->version && b->value != a->value)
                    RH_FAIL("k%llu: version %llx read with value %llu, written %llu",
                            (unsigned long long)a->key, (unsigned long long)a->version,
                            (unsigned long long)b->value, (unsigned long long)a->value);
            }
        }
    }
out:
    free(by_key);
    free(start);
    free(fillp);
    return rc;
}
