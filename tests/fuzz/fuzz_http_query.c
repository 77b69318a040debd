/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_http_query.c — libFuzzer target for the admin endpoints' request-target parsing: the
 * input is a raw request target ("/path?query"); the path is resolved with obs_endpoint_lookup
 * (or, for an unknown path, the first byte picks an endpoint) and the query string goes through
 * obs_query_parse. Accepted results must satisfy the documented invariants; everything else
 * must be a clean KVMESH_EINVAL.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "obs/http.h"

/* The parser is compiled into this target (not taken from libkvmesh) so that libFuzzer's
 * coverage instrumentation, which the build applies to fuzz targets only, reaches it. The
 * archive's copy of query.o is then never pulled in, so there is no duplicate definition. */
#include "obs/query.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *qm = memchr(s, '?', size);
    size_t plen = qm ? (size_t)(qm - s) : size;
    int ep = obs_endpoint_lookup(s, plen);
    if (ep < 0)
        ep = size ? data[0] % OBS_EP__COUNT : 0;
    const char *qs = qm ? qm + 1 : s;
    size_t qlen = qm ? size - plen - 1 : size;
    struct obs_query q;
    int rc = obs_query_parse((enum obs_endpoint)ep, qs, qlen, &q);
    if (rc != 0) {
        if (rc != KVMESH_EINVAL || kvmesh_last_error()[0] == '\0')
            abort();
        return 0;
    }
    if (qlen > OBS_QUERY_MAX_LEN)
        abort();
    if (q.present & OBS_Q_TENANT) {
        if (q.tenant_len == 0 || q.tenant_len > OBS_TENANT_ID_MAX ||
            strlen(q.tenant) != q.tenant_len)
            abort();
        for (size_t i = 0; i < q.tenant_len; i++)
            if ((unsigned char)q.tenant[i] < 0x21 || (unsigned char)q.tenant[i] > 0x7e)
                abort();
    }
    if ((q.present & OBS_Q_TOP) && (q.top < 1 || q.top > OBS_TENANT_TOP_K))
        abort();
    if ((q.present & OBS_Q_LIMIT) && (q.limit < 1 || q.limit > OBS_BREAKDOWN_RING))
        abort();
    if ((q.present & OBS_Q_RATE) && !(q.rate >= 0.0 && q.rate <= 1.0))
        abort();
    if (q.present & OBS_Q_NAME) {
        size_t n = strlen(q.name);
        if (n == 0 || n > 64 || q.name[0] == '.' || strchr(q.name, '/'))
            abort();
    }
    return 0;
}
