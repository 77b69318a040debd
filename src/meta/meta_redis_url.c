/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_redis_url.c — parses redis:// URLs for the Redis metadata backend (grammar and limits in
 * meta_redis_url.h). Pure function of its input: no allocation, no global state except the
 * thread's error message set through kvm_errf().
 */
#include "meta/meta_redis_url.h"

#include <stdio.h>
#include <string.h>

#include "core/hex.h"
#include "core/util.h"

/* Percent-decodes [s, s+n) into out (capacity cap incl. NUL). */
static int decode_cred(const char *what, const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return kvm_errf(
                    KVMESH_EURL,
                    "redis URL: truncated percent-escape in the %s; write %%XX with two "
                    "hex digits",
                    what);
            int v = kvm_hex_byte(s + i + 1, KVM_HEX_ANY);
            if (v < 0)
                return kvm_errf(KVMESH_EURL,
                                "redis URL: bad percent-escape in the %s; write %%XX with two hex "
                                "digits",
                                what);
            c = (char)v;
            if (c == '\0')
                return kvm_errf(KVMESH_EURL, "redis URL: the %s contains %%00 (NUL)", what);
            i += 2;
        }
        if (o + 1 >= cap)
            return kvm_errf(KVMESH_EURL, "redis URL: the %s is longer than %zu bytes", what,
                            cap - 1);
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

static int parse_uint(const char *s, size_t n, long max, long *out)
{
    if (n == 0 || n > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

int meta_redis_url_parse(const char *url, meta_redis_url_t *out)
{
    memset(out, 0, sizeof(*out));
    out->port = META_REDIS_PORT_DEFAULT;
    snprintf(out->ns, sizeof(out->ns), "%s", META_REDIS_NS_DEFAULT);
    if (!url)
        return kvm_errf(KVMESH_EURL, "redis URL: missing (NULL)");
    size_t len = strnlen(url, META_REDIS_URL_MAX + 1);
    if (len > META_REDIS_URL_MAX)
        return kvm_errf(KVMESH_EURL, "redis URL: longer than %d bytes", META_REDIS_URL_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c >= 0x7f)
            return kvm_errf(KVMESH_EURL,
                            "redis URL: byte 0x%02x at offset %zu is not allowed (no spaces, "
                            "control or non-ASCII characters; percent-encode credentials)",
                            c, i);
    }
    if (strncmp(url, "rediss://", 9) == 0)
        return kvm_errf(KVMESH_EURL,
                        "rediss:// (Redis over TLS) is not available: this build's hiredis (0.14) "
                        "has no TLS support; use redis:// on a trusted network or through a TLS "
                        "tunnel");
    if (strncmp(url, "redis://", 8) != 0)
        return kvm_errf(KVMESH_EURL, "redis URL: must start with redis:// (got '%.16s')", url);

    const char *p = url + 8;
    const char *end = url + len;
    if (memchr(p, '#', (size_t)(end - p)))
        return kvm_errf(KVMESH_EURL, "redis URL: a fragment ('#') is not allowed; percent-encode "
                                     "'#' in passwords as %%23");
    /* authority = up to the first '/' or '?' */
    const char *auth_end = p;
    while (auth_end < end && *auth_end != '/' && *auth_end != '?')
        auth_end++;
    const char *hp = p;
    const char *at = NULL;
    for (const char *q = p; q < auth_end; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon)
            return kvm_errf(KVMESH_EURL,
                            "redis URL: user without password; write user:password@ (ACL) or "
                            ":password@ (default user)");
        int rc;
        if (colon > p) {
            rc = decode_cred("user name", p, (size_t)(colon - p), out->user, sizeof(out->user));
            if (rc)
                return rc;
            out->has_user = true;
        }
        rc = decode_cred("password", colon + 1, (size_t)(at - colon - 1), out->pass,
                         sizeof(out->pass));
        if (rc)
            return rc;
        if (out->pass[0] == '\0')
            return kvm_errf(KVMESH_EURL, "redis URL: empty password after ':'");
        out->has_pass = true;
        hp = at + 1;
    }
    /* host[:port] */
    const char *host, *host_end, *port_s = NULL;
    if (hp < auth_end && *hp == '[') {
        host = hp + 1;
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (!host_end)
            return kvm_errf(KVMESH_EURL, "redis URL: IPv6 literal without closing ']'");
        for (const char *q = host; q < host_end; q++) {
            if (kvm_hexval(*q, KVM_HEX_ANY) < 0 && *q != ':' && *q != '.')
                return kvm_errf(KVMESH_EURL,
                                "redis URL: bad character '%c' in IPv6 literal (hex digits, ':' "
                                "and '.' only)",
                                *q);
        }
        const char *after = host_end + 1;
        if (after < auth_end) {
            if (*after != ':')
                return kvm_errf(KVMESH_EURL, "redis URL: expected ':port' after ']'");
            port_s = after + 1;
        }
    } else {
        host = hp;
        host_end = hp;
        while (host_end < auth_end && *host_end != ':')
            host_end++;
        if (host_end < auth_end) {
            port_s = host_end + 1;
            if (memchr(port_s, ':', (size_t)(auth_end - port_s)))
                return kvm_errf(KVMESH_EURL,
                                "redis URL: more than one ':' in host:port; write IPv6 addresses "
                                "in brackets ([::1]:6379)");
        }
        for (const char *q = host; q < host_end; q++) {
            if (!is_name_char(*q) || *q == '_')
                return kvm_errf(KVMESH_EURL,
                                "redis URL: bad character '%c' in host name (letters, digits, '.' "
                                "and '-' only)",
                                *q);
        }
    }
    if (host_end == host)
        return kvm_errf(KVMESH_EURL, "redis URL: missing host (redis://host:port)");
    if ((size_t)(host_end - host) > META_REDIS_HOST_MAX)
        return kvm_errf(KVMESH_EURL, "redis URL: host name longer than %d bytes",
                        META_REDIS_HOST_MAX);
    memcpy(out->host, host, (size_t)(host_end - host));
    out->host[host_end - host] = '\0';
    if (port_s) {
        long port;
        if (parse_uint(port_s, (size_t)(auth_end - port_s), 65535, &port) || port == 0)
            return kvm_errf(KVMESH_EURL, "redis URL: port '%.*s' is not a number in 1..65535",
                            (int)KVM_MIN(auth_end - port_s, 16), port_s);
        out->port = (uint16_t)port;
    }
    /* [/db] */
    p = auth_end;
    if (p < end && *p == '/') {
        const char *db_s = p + 1;
        const char *db_end = db_s;
        while (db_end < end && *db_end != '?')
            db_end++;
        if (db_end > db_s) {
            long db;
            if (parse_uint(db_s, (size_t)(db_end - db_s), META_REDIS_DB_MAX, &db))
                return kvm_errf(KVMESH_EURL,
                                "redis URL: database '%.*s' is not a number in 0..%d (path is "
                                "/DB)",
                                (int)KVM_MIN(db_end - db_s, 32), db_s, META_REDIS_DB_MAX);
            out->db = (int)db;
        }
        p = db_end;
    }
    /* [?ns=NAME] */
    if (p < end && *p == '?') {
        p++;
        bool seen_ns = false;
        while (p < end) {
            const char *amp = memchr(p, '&', (size_t)(end - p));
            const char *pe = amp ? amp : end;
            if (pe - p > 3 && memcmp(p, "ns=", 3) == 0) {
                if (seen_ns)
                    return kvm_errf(KVMESH_EURL, "redis URL: parameter ns given twice");
                seen_ns = true;
                const char *v = p + 3;
                size_t vn = (size_t)(pe - v);
                if (vn > META_REDIS_NS_MAX)
                    return kvm_errf(KVMESH_EURL, "redis URL: ns longer than %d bytes",
                                    META_REDIS_NS_MAX);
                for (size_t i = 0; i < vn; i++)
                    if (!is_name_char(v[i]))
                        return kvm_errf(KVMESH_EURL,
                                        "redis URL: bad character '%c' in ns (letters, digits, "
                                        "'_', '.' and '-' only)",
                                        v[i]);
                memcpy(out->ns, v, vn);
                out->ns[vn] = '\0';
            } else {
                return kvm_errf(KVMESH_EURL,
                                "redis URL: unknown or empty parameter '%.*s' (only ns=NAME is "
                                "accepted)",
                                (int)KVM_MIN(pe - p, 32), p);
            }
            p = amp ? amp + 1 : end;
            if (amp && p == end)
                return kvm_errf(KVMESH_EURL, "redis URL: trailing '&'");
        }
    }
    return 0;
}
