/* SPDX-License-Identifier: Apache-2.0 */
/*
 * query.c — strict parsing of admin endpoint query strings and path lookup (see http.h for the
 * grammar). External input: every malformed string is rejected with KVMESH_EINVAL and a message;
 * nothing here allocates, and every write is bounded by the destination size.
 */
#include <stdlib.h>
#include <string.h>

#include "core/hex.h"
#include "core/ident.h"
#include "core/limits.h"
#include "obs/http.h"

static const struct {
    const char *path;
    enum obs_endpoint ep;
} obs_paths[] = {
    {"/", OBS_EP_INDEX},
    {"/healthz", OBS_EP_HEALTHZ},
    {"/metrics", OBS_EP_METRICS},
    {"/stats", OBS_EP_STATS},
    {"/breakdown", OBS_EP_BREAKDOWN},
    {"/trace", OBS_EP_TRACE},
    {"/trace/sampling", OBS_EP_TRACE_SAMPLING},
    {"/trace/capture", OBS_EP_TRACE_CAPTURE},
    {"/cluster", OBS_EP_CLUSTER},
    {"/api", OBS_EP_API},
};

int obs_endpoint_lookup(const char *path, size_t len)
{
    for (size_t i = 0; i < KVM_ARRAY_SIZE(obs_paths); i++)
        if (strlen(obs_paths[i].path) == len && memcmp(obs_paths[i].path, path, len) == 0)
            return (int)obs_paths[i].ep;
    return -1;
}

static const unsigned obs_allowed[OBS_EP__COUNT] = {
    [OBS_EP_INDEX] = 0,
    [OBS_EP_HEALTHZ] = OBS_Q_PROBE,
    [OBS_EP_METRICS] = 0,
    [OBS_EP_STATS] = OBS_Q_TENANT | OBS_Q_TOP,
    [OBS_EP_BREAKDOWN] = OBS_Q_LIMIT,
    [OBS_EP_TRACE] = 0,
    [OBS_EP_TRACE_SAMPLING] = OBS_Q_RATE,
    [OBS_EP_TRACE_CAPTURE] = OBS_Q_ACTION | OBS_Q_NAME,
    [OBS_EP_CLUSTER] = 0,
    [OBS_EP_API] = 0,
};

/* Percent-decodes s[0..n) into out (cap bytes incl. NUL). */
static int decode(const char *s, size_t n, char *out, size_t cap, size_t *outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return kvm_errf(KVMESH_EINVAL, "truncated percent escape in query string");
            int v = kvm_hex_byte(s + i + 1, KVM_HEX_ANY);
            if (v < 0)
                return kvm_errf(KVMESH_EINVAL, "invalid percent escape in query string");
            c = (char)v;
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (o + 1 >= cap)
            return kvm_errf(KVMESH_EINVAL, "query parameter too long (max %zu bytes)", cap - 1);
        out[o++] = c;
    }
    out[o] = '\0';
    *outlen = o;
    return 0;
}

static int parse_uint(const char *v, size_t n, unsigned lo, unsigned hi, const char *key,
                      unsigned *out)
{
    if (n == 0 || n > 6)
        return kvm_errf(KVMESH_EINVAL, "%s must be an integer in %u..%u", key, lo, hi);
    unsigned x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return kvm_errf(KVMESH_EINVAL, "%s must be an integer in %u..%u", key, lo, hi);
        x = x * 10 + (unsigned)(v[i] - '0');
    }
    if (x < lo || x > hi)
        return kvm_errf(KVMESH_EINVAL, "%s must be an integer in %u..%u", key, lo, hi);
    *out = x;
    return 0;
}

static int parse_rate(const char *v, size_t n, double *out)
{
    int dots = 0, digits = 0;
    if (n == 0 || n > 12)
        goto bad;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '.')
            dots++;
        else if (v[i] >= '0' && v[i] <= '9')
            digits++;
        else
            goto bad;
    }
    if (dots > 1 || digits == 0)
        goto bad;
    double r = strtod(v, NULL);
    if (!(r >= 0.0 && r <= 1.0))
        goto bad;
    *out = r;
    return 0;
bad:
    return kvm_errf(KVMESH_EINVAL, "rate must be a decimal number in [0, 1], e.g. rate=0.01");
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static int parse_pair(enum obs_endpoint ep, const char *k, size_t kn, const char *v, size_t vn,
                      struct obs_query *q)
{
    char key[16], val[OBS_QUERY_MAX_LEN + 1];
    size_t keylen, vallen;
    int rc;
    if (kn == 0)
        return kvm_errf(KVMESH_EINVAL, "empty parameter name in query string");
    if ((rc = decode(k, kn, key, sizeof(key), &keylen)) != 0)
        return kvm_errf(KVMESH_EINVAL, "unknown query parameter");
    if ((rc = decode(v, vn, val, sizeof(val), &vallen)) != 0)
        return rc;
    unsigned bit = 0;
    if (strcmp(key, "tenant") == 0)
        bit = OBS_Q_TENANT;
    else if (strcmp(key, "top") == 0)
        bit = OBS_Q_TOP;
    else if (strcmp(key, "limit") == 0)
        bit = OBS_Q_LIMIT;
    else if (strcmp(key, "rate") == 0)
        bit = OBS_Q_RATE;
    else if (strcmp(key, "probe") == 0)
        bit = OBS_Q_PROBE;
    else if (strcmp(key, "action") == 0)
        bit = OBS_Q_ACTION;
    else if (strcmp(key, "name") == 0)
        bit = OBS_Q_NAME;
    if (bit == 0 || !(obs_allowed[ep] & bit) || keylen != strlen(key))
        return kvm_errf(KVMESH_EINVAL, "query parameter not accepted by this endpoint");
    if (q->present & bit)
        return kvm_errf(KVMESH_EINVAL, "query parameter '%s' given twice", key);
    q->present |= bit;
    switch (bit) {
    case OBS_Q_TENANT:
        if (vallen > OBS_TENANT_ID_MAX || kvm_ident_check_tenant(val, vallen) != 0)
            return kvm_errf(KVMESH_EINVAL,
                            "tenant breaks the tenant id rule (core/ident.h): "
                            "1..%d bytes of [A-Za-z0-9_.-], first alphanumeric",
                            KVM_TENANT_MAX_LEN);
        memcpy(q->tenant, val, vallen + 1);
        q->tenant_len = vallen;
        return 0;
    case OBS_Q_TOP:
        return parse_uint(val, vallen, 1, OBS_TENANT_TOP_K, "top", &q->top);
    case OBS_Q_LIMIT:
        return parse_uint(val, vallen, 1, OBS_BREAKDOWN_RING, "limit", &q->limit);
    case OBS_Q_RATE:
        return parse_rate(val, vallen, &q->rate);
    case OBS_Q_PROBE:
        if (strcmp(val, "live") == 0 && vallen == 4)
            q->probe = OBS_PROBE_LIVE;
        else if (strcmp(val, "ready") == 0 && vallen == 5)
            q->probe = OBS_PROBE_READY;
        else
            return kvm_errf(KVMESH_EINVAL, "probe must be 'live' or 'ready'");
        return 0;
    case OBS_Q_ACTION:
        if (strcmp(val, "start") == 0 && vallen == 5)
            q->action = OBS_ACTION_START;
        else if (strcmp(val, "stop") == 0 && vallen == 4)
            q->action = OBS_ACTION_STOP;
        else
            return kvm_errf(KVMESH_EINVAL, "action must be 'start' or 'stop'");
        return 0;
    case OBS_Q_NAME:
        if (vallen == 0 || vallen > 64 || val[0] == '.')
            return kvm_errf(KVMESH_EINVAL, "name must be 1..64 of [A-Za-z0-9._-], not "
                                           "starting with '.'");
        for (size_t i = 0; i < vallen; i++)
            if (!name_char(val[i]))
                return kvm_errf(KVMESH_EINVAL, "name must be 1..64 of [A-Za-z0-9._-]");
        memcpy(q->name, val, vallen + 1);
        return 0;
    default:
        return kvm_errf(KVMESH_EINTERNAL, "unhandled query parameter");
    }
}

int obs_query_parse(enum obs_endpoint ep, const char *qs, size_t len, struct obs_query *q)
{
    memset(q, 0, sizeof(*q));
    q->probe = OBS_PROBE_READY;
    if ((unsigned)ep >= OBS_EP__COUNT)
        return kvm_errf(KVMESH_EINVAL, "unknown endpoint");
    if (len > OBS_QUERY_MAX_LEN)
        return kvm_errf(KVMESH_EINVAL, "query string longer than %d bytes", OBS_QUERY_MAX_LEN);
    size_t npairs = 0, i = 0;
    while (len > 0 && i <= len) {
        size_t j = i;
        while (j < len && qs[j] != '&')
            j++;
        if (j == i)
            return kvm_errf(KVMESH_EINVAL, "empty parameter in query string");
        if (++npairs > OBS_QUERY_MAX_PARAMS)
            return kvm_errf(KVMESH_EINVAL, "more than %d query parameters", OBS_QUERY_MAX_PARAMS);
        const char *eq = memchr(qs + i, '=', j - i);
        if (!eq)
            return kvm_errf(KVMESH_EINVAL, "query parameter without '=value'");
        for (size_t k = i; k < j; k++) {
            unsigned char c = (unsigned char)qs[k];
            if (c <= 0x20 || c >= 0x7f || c == '#')
                return kvm_errf(KVMESH_EINVAL, "raw control, space or non-ASCII byte in query "
                                               "string (percent-encode it)");
        }
        int rc =
            parse_pair(ep, qs + i, (size_t)(eq - (qs + i)), eq + 1, (size_t)(qs + j - eq - 1), q);
        if (rc != 0)
            return rc;
        i = j + 1;
        if (j == len)
            break;
        if (i == len)
            return kvm_errf(KVMESH_EINVAL, "query string ends with '&'");
    }
    if (ep == OBS_EP_TRACE_SAMPLING && !(q->present & OBS_Q_RATE))
        return kvm_errf(KVMESH_EINVAL, "rate is required, e.g. /trace/sampling?rate=0.01");
    if (ep == OBS_EP_TRACE_CAPTURE) {
        if (!(q->present & OBS_Q_ACTION))
            return kvm_errf(KVMESH_EINVAL, "action=start&name=F or action=stop is required");
        if (q->action == OBS_ACTION_START && !(q->present & OBS_Q_NAME))
            return kvm_errf(KVMESH_EINVAL, "action=start needs name=F");
        if (q->action == OBS_ACTION_STOP && (q->present & OBS_Q_NAME))
            return kvm_errf(KVMESH_EINVAL, "action=stop takes no name");
    }
    if ((q->present & OBS_Q_TENANT) && (q->present & OBS_Q_TOP))
        return kvm_errf(KVMESH_EINVAL, "tenant and top cannot be combined");
    return 0;
}
