/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd_json.c — the etcd:// URL parser, v3 JSON gateway request builders and strict response
 * decoders (see etcd_json.h). Pure functions: no I/O, no globals.
 *
 * Invariants: a decoder touches a JSON node only after checking its type; every allocation a
 * decoded result points into hangs off etcd_resp_t.chunks and dies in etcd_resp_free().
 */
#include "meta/etcd_json.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* ---- small helpers ------------------------------------------------------------------------ */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- URL ---------------------------------------------------------------------------------- */

static bool host_char_ok(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

static int parse_endpoint(const char *s, size_t n, etcd_endpoint_t *ep, char *err, size_t errlen)
{
    /* s[0..n) is "host:port" or "[v6]:port" */
    size_t host_end; /* index one past the host (brackets included) */
    if (n == 0) {
        set_err(err, errlen, "empty endpoint in etcd URL; write etcd://host:port[,host:port...]");
        return KVMESH_EURL;
    }
    if (s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb) {
            set_err(err, errlen, "unterminated '[' in etcd endpoint '%.*s'", (int)n, s);
            return KVMESH_EURL;
        }
        host_end = (size_t)(rb - s) + 1;
        if (host_end == 2) {
            set_err(err, errlen, "empty IPv6 address in etcd endpoint '%.*s'", (int)n, s);
            return KVMESH_EURL;
        }
        for (size_t i = 1; i + 1 < host_end; i++) {
            if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '.') {
                set_err(err, errlen, "bad character in IPv6 address of etcd endpoint '%.*s'",
                        (int)n, s);
                return KVMESH_EURL;
            }
        }
    } else {
        const char *colon = memchr(s, ':', n);
        host_end = colon ? (size_t)(colon - s) : n;
        if (host_end == 0) {
            set_err(err, errlen, "missing host in etcd endpoint '%.*s'", (int)n, s);
            return KVMESH_EURL;
        }
        for (size_t i = 0; i < host_end; i++) {
            if (!host_char_ok(s[i])) {
                set_err(err, errlen,
                        "bad character '%c' in host of etcd endpoint '%.*s' (user:pass@, paths "
                        "and queries are not supported)",
                        isprint((unsigned char)s[i]) ? s[i] : '?', (int)n, s);
                return KVMESH_EURL;
            }
        }
    }
    if (host_end > ETCD_HOST_MAX) {
        set_err(err, errlen, "host of etcd endpoint is %zu bytes; max %d", host_end, ETCD_HOST_MAX);
        return KVMESH_EURL;
    }
    if (host_end >= n || s[host_end] != ':' || host_end + 1 == n) {
        set_err(err, errlen, "etcd endpoint '%.*s' has no port; write host:port (e.g. :2379)",
                (int)n, s);
        return KVMESH_EURL;
    }
    unsigned long port = 0;
    for (size_t i = host_end + 1; i < n; i++) {
        if (!isdigit((unsigned char)s[i]) || port > 65535) {
            set_err(err, errlen, "bad port in etcd endpoint '%.*s'", (int)n, s);
            return KVMESH_EURL;
        }
        port = port * 10 + (unsigned long)(s[i] - '0');
    }
    if (port == 0 || port > 65535) {
        set_err(err, errlen, "port of etcd endpoint '%.*s' is out of range 1..65535", (int)n, s);
        return KVMESH_EURL;
    }
    memcpy(ep->host, s, host_end);
    ep->host[host_end] = '\0';
    ep->port = (uint16_t)port;
    return 0;
}

int etcd_url_parse(const char *url, etcd_url_t *out, char *err, size_t errlen)
{
    static const char scheme[] = "etcd://";
    memset(out, 0, sizeof(*out));
    if (!url || strncmp(url, scheme, sizeof(scheme) - 1) != 0) {
        set_err(err, errlen, "etcd URL must start with etcd://");
        return KVMESH_EURL;
    }
    const char *p = url + sizeof(scheme) - 1;
    size_t len = strlen(p);
    if (len > 0 && p[len - 1] == '/')
        len--;
    if (len == 0) {
        set_err(err, errlen, "etcd URL lists no endpoint; write etcd://host:port[,host:port...]");
        return KVMESH_EURL;
    }
    size_t i = 0;
    for (;;) {
        const char *comma = memchr(p + i, ',', len - i);
        size_t e = comma ? (size_t)(comma - p) : len;
        if (out->n_eps == ETCD_MAX_ENDPOINTS) {
            set_err(err, errlen, "etcd URL lists more than %d endpoints", ETCD_MAX_ENDPOINTS);
            return KVMESH_EURL;
        }
        etcd_endpoint_t *ep = &out->eps[out->n_eps];
        int rc = parse_endpoint(p + i, e - i, ep, err, errlen);
        if (rc != 0)
            return rc;
        for (size_t j = 0; j < out->n_eps; j++) {
            if (out->eps[j].port == ep->port && strcmp(out->eps[j].host, ep->host) == 0) {
                set_err(err, errlen, "etcd URL lists endpoint %s:%u twice", ep->host,
                        (unsigned)ep->port);
                return KVMESH_EURL;
            }
        }
        out->n_eps++;
        if (!comma)
            break;
        i = e + 1;
    }
    return 0;
}

/* ---- base64 ------------------------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t etcd_b64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void etcd_b64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
}

static int b64_val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int etcd_b64_decode(const char *in, size_t n, uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (n % 4 != 0)
        return -1;
    uint8_t *buf = malloc(n / 4 * 3 + 1);
    if (!buf)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = in[i + (size_t)j];
            if (c == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad) /* data after padding */
                goto bad;
            v[j] = b64_val(c);
            if (v[j] < 0)
                goto bad;
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        buf[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            buf[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            buf[o++] = (uint8_t)w;
    }
    buf[o] = 0;
    *out = buf;
    *out_len = o;
    return 0;
bad:
    free(buf);
    return -1;
}

/* ---- request builders --------------------------------------------------------------------- */

static json_t *b64_json(const uint8_t *p, size_t n)
{
    size_t el = etcd_b64_len(n);
    char *s = malloc(el + 1);
    if (!s)
        return NULL;
    etcd_b64_encode(p, n, s);
    json_t *j = json_stringn(s, el);
    free(s);
    return j;
}

static json_t *i64_json(int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    return json_string(buf);
}

/* json_object_set_new that reports allocation failure (the value may be NULL). */
static int set_new(json_t *obj, const char *name, json_t *v)
{
    if (!v)
        return -1;
    return json_object_set_new(obj, name, v) == 0 ? 0 : -1;
}

static int dump(json_t *root, char **out, char *err, size_t errlen)
{
    *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!*out) {
        set_err(err, errlen, "out of memory encoding an etcd request");
        return KVMESH_ENOMEM;
    }
    return 0;
}

static int bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

int etcd_range_bounds(const char *prefix, const char *start_after, uint8_t **key, size_t *key_len,
                      uint8_t **end, size_t *end_len, bool *empty)
{
    size_t pn = strlen(prefix);
    *key = NULL;
    *end = NULL;
    *empty = false;
    /* key = max(prefix, start_after + "\0"), and never empty (etcd rejects an empty key) */
    const uint8_t *kp = (const uint8_t *)prefix;
    size_t kn = pn;
    size_t sn = start_after ? strlen(start_after) : 0;
    bool use_start = start_after && bytes_cmp((const uint8_t *)start_after, sn + 1, kp, kn) > 0;
    if (use_start) {
        kp = (const uint8_t *)start_after;
        kn = sn + 1; /* includes the NUL: the smallest key after start_after */
    }
    uint8_t *k = malloc(kn ? kn : 1);
    if (!k)
        return KVMESH_ENOMEM;
    if (kn) {
        memcpy(k, kp, kn);
    } else {
        k[0] = 0;
        kn = 1;
    }
    /* range_end = prefix "incremented" */
    size_t en = pn;
    while (en > 0 && (uint8_t)prefix[en - 1] == 0xff)
        en--;
    uint8_t *e = malloc(en ? en : 1);
    if (!e) {
        free(k);
        return KVMESH_ENOMEM;
    }
    if (en) {
        memcpy(e, prefix, en);
        e[en - 1]++;
        if (bytes_cmp(k, kn, e, en) >= 0)
            *empty = true;
    } else {
        e[0] = 0; /* "\0": every key >= key */
        en = 1;
    }
    *key = k;
    *key_len = kn;
    *end = e;
    *end_len = en;
    return 0;
}

int etcd_json_get_req(const char *key, char **out, char *err, size_t errlen)
{
    *out = NULL;
    json_t *root = json_object();
    if (!root || set_new(root, "key", b64_json((const uint8_t *)key, strlen(key))) != 0) {
        json_decref(root);
        set_err(err, errlen, "out of memory encoding an etcd request");
        return KVMESH_ENOMEM;
    }
    return dump(root, out, err, errlen);
}

int etcd_json_range_req(const char *prefix, const char *start_after, uint32_t limit, char **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    uint8_t *k = NULL, *e = NULL;
    size_t kn = 0, en = 0;
    bool empty = false;
    int rc = etcd_range_bounds(prefix, start_after, &k, &kn, &e, &en, &empty);
    if (rc != 0) {
        set_err(err, errlen, "out of memory encoding an etcd request");
        return rc;
    }
    json_t *root = json_object();
    if (empty) {
        /* still ask the server (for its revision) but for a range that holds nothing:
         * [e, e) is empty by definition */
        free(k);
        k = malloc(en);
        if (k)
            memcpy(k, e, en);
        kn = en;
    }
    if (!root || !k || set_new(root, "key", b64_json(k, kn)) != 0 ||
        set_new(root, "range_end", b64_json(e, en)) != 0 ||
        set_new(root, "limit", i64_json(limit)) != 0) {
        json_decref(root);
        free(k);
        free(e);
        set_err(err, errlen, "out of memory encoding an etcd request");
        return KVMESH_ENOMEM;
    }
    free(k);
    free(e);
    return dump(root, out, err, errlen);
}

static json_t *cmp_json(const meta_cmp_t *c, char *err, size_t errlen)
{
    static const char *const results[] = {
        [META_EQ] = "EQUAL", [META_NE] = "NOT_EQUAL", [META_LT] = "LESS", [META_GT] = "GREATER"};
    json_t *o = json_object();
    if (!o)
        return NULL;
    const char *target = NULL, *field = NULL, *result = NULL;
    int64_t num = c->num;
    if ((unsigned)c->op >= KVM_ARRAY_SIZE(results)) {
        set_err(err, errlen, "bad compare op %d", (int)c->op);
        goto fail;
    }
    result = results[c->op];
    switch (c->target) {
    case META_CMP_EXISTS:
        if (c->op != META_EQ || (c->num != 0 && c->num != 1)) {
            set_err(err, errlen, "EXISTS compare needs op EQ and num 0 or 1");
            goto fail;
        }
        target = "CREATE";
        field = "create_revision";
        result = c->num ? "GREATER" : "EQUAL";
        num = 0;
        break;
    case META_CMP_VALUE:
        target = "VALUE";
        break;
    case META_CMP_VERSION:
        target = "VERSION";
        field = "version";
        break;
    case META_CMP_MOD_REV:
        target = "MOD";
        field = "mod_revision";
        break;
    case META_CMP_CREATE_REV:
        target = "CREATE";
        field = "create_revision";
        break;
    case META_CMP_LEASE:
        target = "LEASE";
        field = "lease";
        break;
    default:
        set_err(err, errlen, "bad compare target %d", (int)c->target);
        goto fail;
    }
    if (set_new(o, "key", b64_json((const uint8_t *)c->key, strlen(c->key))) != 0 ||
        set_new(o, "target", json_string(target)) != 0 ||
        set_new(o, "result", json_string(result)) != 0)
        goto oom;
    if (field) {
        if (set_new(o, field, i64_json(num)) != 0)
            goto oom;
    } else if (set_new(o, "value",
                       b64_json(c->value ? c->value : (const uint8_t *)"", c->value_len)) != 0) {
        goto oom;
    }
    return o;
oom:
    set_err(err, errlen, "out of memory encoding an etcd request");
fail:
    json_decref(o);
    return NULL;
}

static json_t *op_json(const meta_op_t *op, char *err, size_t errlen)
{
    json_t *o = json_object(), *inner = json_object();
    if (!o || !inner)
        goto oom;
    if (set_new(inner, "key", b64_json((const uint8_t *)op->key, strlen(op->key))) != 0)
        goto oom;
    const char *name;
    switch (op->type) {
    case META_OP_PUT:
        name = "request_put";
        if (set_new(inner, "value",
                    b64_json(op->value ? op->value : (const uint8_t *)"", op->value_len)) != 0)
            goto oom;
        if (op->lease != 0 && set_new(inner, "lease", i64_json(op->lease)) != 0)
            goto oom;
        break;
    case META_OP_DEL:
        name = "request_delete_range";
        break;
    case META_OP_GET:
        name = "request_range";
        break;
    default:
        set_err(err, errlen, "bad txn op type %d", (int)op->type);
        json_decref(o);
        json_decref(inner);
        return NULL;
    }
    if (json_object_set_new(o, name, inner) != 0) {
        inner = NULL;
        goto oom;
    }
    return o;
oom:
    set_err(err, errlen, "out of memory encoding an etcd request");
    json_decref(o);
    json_decref(inner);
    return NULL;
}

int etcd_json_txn_req(const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *then_ops,
                      size_t n_then, const meta_op_t *else_ops, size_t n_else, char **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    set_err(err, errlen, "out of memory encoding an etcd request");
    json_t *root = json_object();
    json_t *jc = json_array(), *js = json_array(), *jf = json_array();
    if (!root || !jc || !js || !jf)
        goto fail;
    for (size_t i = 0; i < n_cmps; i++) {
        json_t *c = cmp_json(&cmps[i], err, errlen);
        if (!c || json_array_append_new(jc, c) != 0)
            goto fail;
    }
    for (size_t i = 0; i < n_then; i++) {
        json_t *o = op_json(&then_ops[i], err, errlen);
        if (!o || json_array_append_new(js, o) != 0)
            goto fail;
    }
    for (size_t i = 0; i < n_else; i++) {
        json_t *o = op_json(&else_ops[i], err, errlen);
        if (!o || json_array_append_new(jf, o) != 0)
            goto fail;
    }
    if (json_object_set_new(root, "compare", jc) != 0) {
        jc = NULL;
        goto fail;
    }
    jc = NULL;
    if (json_object_set_new(root, "success", js) != 0) {
        js = NULL;
        goto fail;
    }
    js = NULL;
    if (json_object_set_new(root, "failure", jf) != 0) {
        jf = NULL;
        goto fail;
    }
    return dump(root, out, err, errlen);
fail:
    json_decref(root);
    json_decref(jc);
    json_decref(js);
    json_decref(jf);
    return strstr(err, "out of memory") ? KVMESH_ENOMEM : KVMESH_EINVAL;
}

int etcd_json_lease_grant_req(int64_t ttl_ms, char **out, char *err, size_t errlen)
{
    *out = NULL;
    int64_t s = ttl_ms <= 0 ? 1 : (ttl_ms + 999) / 1000;
    json_t *root = json_object();
    if (!root || set_new(root, "TTL", i64_json(s)) != 0) {
        json_decref(root);
        set_err(err, errlen, "out of memory encoding an etcd request");
        return KVMESH_ENOMEM;
    }
    return dump(root, out, err, errlen);
}

int etcd_json_lease_id_req(meta_lease_t lease, char **out, char *err, size_t errlen)
{
    *out = NULL;
    json_t *root = json_object();
    if (!root || set_new(root, "ID", i64_json(lease)) != 0) {
        json_decref(root);
        set_err(err, errlen, "out of memory encoding an etcd request");
        return KVMESH_ENOMEM;
    }
    return dump(root, out, err, errlen);
}

/* ---- response decoding -------------------------------------------------------------------- */

struct etcd_chunk {
    struct etcd_chunk *next;
    max_align_t data[];
};

static void *arena_alloc(etcd_resp_t *r, size_t n)
{
    struct etcd_chunk *c = malloc(sizeof(*c) + (n ? n : 1));
    if (!c)
        return NULL;
    c->next = r->chunks;
    r->chunks = c;
    return c->data;
}

void etcd_resp_free(etcd_resp_t *r)
{
    struct etcd_chunk *c = r->chunks;
    while (c) {
        struct etcd_chunk *n = c->next;
        free(c);
        c = n;
    }
    r->chunks = NULL;
}

static int fail(etcd_resp_t *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(etcd_resp_t *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    va_end(ap);
    r->res.rc = rc;
    return rc;
}

int etcd_grpc_to_rc(int code)
{
    switch (code) {
    case ETCD_GRPC_OK:
        return 0;
    case ETCD_GRPC_INVALID_ARGUMENT:
        return KVMESH_EINVAL;
    case ETCD_GRPC_DEADLINE_EXCEEDED:
        return KVMESH_ETIMEDOUT;
    case ETCD_GRPC_NOT_FOUND:
        return KVMESH_ENOENT;
    case ETCD_GRPC_RESOURCE_EXHAUSTED:
        return KVMESH_EAGAIN;
    case ETCD_GRPC_UNAVAILABLE:
        return KVMESH_EUNAVAILABLE;
    case ETCD_GRPC_UNAUTHENTICATED:
        return KVMESH_EAUTH;
    default:
        return KVMESH_EBACKEND;
    }
}

/* int64 field: absent -> 0 (or error when required); decimal string or JSON integer. */
static int get_i64(etcd_resp_t *r, const json_t *obj, const char *ctx, const char *name,
                   bool required, int64_t *out)
{
    *out = 0;
    json_t *v = json_object_get(obj, name);
    if (!v) {
        if (required)
            return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is missing", ctx, name);
        return 0;
    }
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_string(v))
        return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is not an int64 string", ctx, name);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    size_t i = (n > 0 && s[0] == '-') ? 1 : 0;
    if (n == i || n - i > 19)
        goto bad;
    for (size_t j = i; j < n; j++)
        if (!isdigit((unsigned char)s[j]))
            goto bad;
    errno = 0;
    char *end = NULL;
    long long x = strtoll(s, &end, 10);
    if (errno != 0 || end != s + n)
        goto bad;
    *out = (int64_t)x;
    return 0;
bad:
    return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is not a valid int64 (\"%.32s\")", ctx, name,
                s);
}

static int get_bool(etcd_resp_t *r, const json_t *obj, const char *ctx, const char *name, bool *out)
{
    *out = false;
    json_t *v = json_object_get(obj, name);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is not a boolean", ctx, name);
    *out = json_is_true(v);
    return 0;
}

/* Optional array field: absent -> *out NULL, *n 0. */
static int get_array(etcd_resp_t *r, const json_t *obj, const char *ctx, const char *name,
                     json_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is not an array", ctx, name);
    *out = v;
    *n = json_array_size(v);
    return 0;
}

/* base64 bytes field into the arena, NUL-terminated. */
static int get_b64(etcd_resp_t *r, const json_t *obj, const char *ctx, const char *name,
                   bool required, const uint8_t **out, size_t *out_len)
{
    *out = (const uint8_t *)"";
    *out_len = 0;
    json_t *v = json_object_get(obj, name);
    if (!v) {
        if (required)
            return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is missing", ctx, name);
        return 0;
    }
    if (!json_is_string(v))
        return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is not a base64 string", ctx, name);
    uint8_t *tmp = NULL;
    size_t n = 0;
    if (etcd_b64_decode(json_string_value(v), json_string_length(v), &tmp, &n) != 0)
        return fail(r, KVMESH_EBACKEND, "etcd reply: %s.%s is not valid base64", ctx, name);
    uint8_t *dst = arena_alloc(r, n + 1);
    if (!dst) {
        free(tmp);
        return fail(r, KVMESH_ENOMEM, "out of memory decoding an etcd reply");
    }
    memcpy(dst, tmp, n + 1);
    free(tmp);
    *out = dst;
    *out_len = n;
    return 0;
}

static int decode_header(etcd_resp_t *r, const json_t *root)
{
    json_t *h = json_object_get(root, "header");
    if (!h || !json_is_object(h))
        return fail(r, KVMESH_EBACKEND, "etcd reply: header is missing or not an object");
    int64_t rev;
    int rc = get_i64(r, h, "header", "revision", true, &rev);
    if (rc != 0)
        return rc;
    if (rev < 0)
        return fail(r, KVMESH_EBACKEND, "etcd reply: header.revision %" PRId64 " is negative", rev);
    r->res.rev = rev;
    return 0;
}

static int decode_kv(etcd_resp_t *r, const json_t *o, meta_kv_t *kv)
{
    memset(kv, 0, sizeof(*kv));
    if (!json_is_object(o))
        return fail(r, KVMESH_EBACKEND, "etcd reply: kvs entry is not an object");
    const uint8_t *k;
    size_t kn;
    int rc = get_b64(r, o, "kv", "key", true, &k, &kn);
    if (rc != 0)
        return rc;
    if (kn == 0 || memchr(k, 0, kn) != NULL)
        return fail(r, KVMESH_EBACKEND, "etcd reply: kv.key is empty or holds a NUL byte");
    kv->key = (const char *)k;
    if ((rc = get_b64(r, o, "kv", "value", false, &kv->value, &kv->value_len)) != 0 ||
        (rc = get_i64(r, o, "kv", "create_revision", false, &kv->create_rev)) != 0 ||
        (rc = get_i64(r, o, "kv", "mod_revision", false, &kv->mod_rev)) != 0 ||
        (rc = get_i64(r, o, "kv", "version", false, &kv->version)) != 0 ||
        (rc = get_i64(r, o, "kv", "lease", false, &kv->lease)) != 0)
        return rc;
    if (kv->create_rev <= 0 || kv->mod_rev < kv->create_rev || kv->version <= 0)
        return fail(r, KVMESH_EBACKEND,
                    "etcd reply: kv has inconsistent revisions (create %" PRId64 ", mod %" PRId64
                    ", version %" PRId64 ")",
                    kv->create_rev, kv->mod_rev, kv->version);
    kv->found = true;
    return 0;
}

/* kvs of a single-key range: 0 or 1 entries. */
static int decode_single(etcd_resp_t *r, const json_t *o, meta_kv_t *kv)
{
    json_t *arr;
    size_t n;
    memset(kv, 0, sizeof(*kv));
    int rc = get_array(r, o, "range", "kvs", &arr, &n);
    if (rc != 0)
        return rc;
    if (n > 1)
        return fail(r, KVMESH_EBACKEND, "etcd reply: %zu kvs for a single-key read", n);
    if (n == 1)
        return decode_kv(r, json_array_get(arr, 0), kv);
    return 0;
}

static int decode_range(etcd_resp_t *r, const json_t *root, uint32_t limit)
{
    json_t *arr;
    size_t n;
    int rc = get_array(r, root, "range", "kvs", &arr, &n);
    if (rc != 0)
        return rc;
    if (limit > 0 && n > limit)
        return fail(r, KVMESH_EBACKEND, "etcd reply: %zu kvs for a page of %u", n, limit);
    meta_kv_t *kvs = arena_alloc(r, n * sizeof(meta_kv_t));
    if (!kvs)
        return fail(r, KVMESH_ENOMEM, "out of memory decoding an etcd reply");
    for (size_t i = 0; i < n; i++) {
        if ((rc = decode_kv(r, json_array_get(arr, i), &kvs[i])) != 0)
            return rc;
        if (i > 0 && strcmp(kvs[i - 1].key, kvs[i].key) >= 0)
            return fail(r, KVMESH_EBACKEND, "etcd reply: range keys are not in ascending order");
    }
    r->res.kvs = kvs;
    r->res.n_kvs = n;
    return get_bool(r, root, "range", "more", &r->res.more);
}

static int decode_txn(etcd_resp_t *r, const json_t *root, const etcd_txn_shape_t *shape)
{
    int rc = get_bool(r, root, "txn", "succeeded", &r->res.succeeded);
    if (rc != 0)
        return rc;
    json_t *arr;
    size_t n;
    if ((rc = get_array(r, root, "txn", "responses", &arr, &n)) != 0)
        return rc;
    const meta_op_t *ops = r->res.succeeded ? shape->then_ops : shape->else_ops;
    size_t want = r->res.succeeded ? shape->n_then : shape->n_else;
    if (n != want)
        return fail(r, KVMESH_EBACKEND, "etcd reply: txn has %zu responses for %zu ops", n, want);
    meta_kv_t *out = arena_alloc(r, n * sizeof(meta_kv_t));
    if (!out)
        return fail(r, KVMESH_ENOMEM, "out of memory decoding an etcd reply");
    memset(out, 0, n * sizeof(meta_kv_t));
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        if (!json_is_object(o))
            return fail(r, KVMESH_EBACKEND, "etcd reply: txn response %zu is not an object", i);
        static const char *const names[] = {[META_OP_PUT] = "response_put",
                                            [META_OP_DEL] = "response_delete_range",
                                            [META_OP_GET] = "response_range"};
        KVM_ASSERT((unsigned)ops[i].type < KVM_ARRAY_SIZE(names));
        json_t *inner = json_object_get(o, names[ops[i].type]);
        if (!inner || !json_is_object(inner))
            return fail(r, KVMESH_EBACKEND, "etcd reply: txn response %zu lacks %s", i,
                        names[ops[i].type]);
        if (ops[i].type == META_OP_GET) {
            if ((rc = decode_single(r, inner, &out[i])) != 0)
                return rc;
        } else if (ops[i].type == META_OP_DEL) {
            int64_t d;
            if ((rc = get_i64(r, inner, "response_delete_range", "deleted", false, &d)) != 0)
                return rc;
            if (d < 0 || d > 1)
                return fail(r, KVMESH_EBACKEND,
                            "etcd reply: single-key delete removed %" PRId64 " keys", d);
            r->res.n_deleted += d;
        }
    }
    r->res.ops = out;
    r->res.n_ops = n;
    return 0;
}

/* Error bodies: {"error":"..","message":"..","code":N} or, from streaming endpoints,
 * {"error":{"grpc_code":N,"http_code":N,"message":".."}}. Returns true when one was found. */
static bool decode_error_body(etcd_resp_t *r, const json_t *root, long http_status)
{
    json_t *e = json_object_get(root, "error");
    const json_t *src = root;
    const char *code_name = "code";
    if (e && json_is_object(e)) {
        src = e;
        code_name = "grpc_code";
    } else if (!e && http_status == 200) {
        return false;
    }
    json_t *jc = json_object_get(src, code_name);
    json_t *jm = json_object_get(src, "message");
    if (!jm || !json_is_string(jm))
        jm = (e && json_is_string(e)) ? e : NULL;
    int code = (jc && json_is_integer(jc)) ? (int)json_integer_value(jc) : -1;
    if (code < 0 && http_status == 200)
        return false;
    r->grpc_code = code;
    int rc = code >= 0            ? etcd_grpc_to_rc(code)
             : http_status >= 500 ? KVMESH_EUNAVAILABLE
                                  : KVMESH_EBACKEND;
    if (rc == 0) /* an error body claiming success */
        rc = KVMESH_EBACKEND;
    fail(r, rc, "etcd: %.300s (gRPC code %d, HTTP %ld)",
         jm ? json_string_value(jm) : "error reply without a message", code, http_status);
    return true;
}

int etcd_json_decode(enum etcd_resp_kind kind, const char *body, size_t len, long http_status,
                     const etcd_txn_shape_t *shape, etcd_resp_t *out)
{
    memset(out, 0, sizeof(*out));
    out->res.errmsg = out->msg;
    int rc;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        if (http_status >= 500)
            return fail(out, KVMESH_EUNAVAILABLE, "etcd: HTTP %ld with a non-JSON body",
                        http_status);
        if (http_status != 200)
            return fail(out, KVMESH_EBACKEND,
                        "etcd: HTTP %ld with a non-JSON body (is this an etcd v3 endpoint?)",
                        http_status);
        return fail(out, KVMESH_EBACKEND, "etcd reply is not a JSON object: %.200s",
                    root ? "wrong type" : jerr.text);
    }
    if (decode_error_body(out, root, http_status)) {
        rc = out->res.rc;
        goto out;
    }
    if (http_status != 200) {
        rc = fail(out, http_status >= 500 ? KVMESH_EUNAVAILABLE : KVMESH_EBACKEND,
                  "etcd: HTTP %ld without an error description", http_status);
        goto out;
    }
    const json_t *body_obj = root;
    if (kind == ETCD_RESP_LEASE_KEEPALIVE) {
        /* the streaming endpoint wraps each message: {"result":{...}} */
        body_obj = json_object_get(root, "result");
        if (!body_obj || !json_is_object(body_obj)) {
            rc = fail(out, KVMESH_EBACKEND, "etcd reply: keepalive result is missing");
            goto out;
        }
    }
    if ((rc = decode_header(out, body_obj)) != 0)
        goto out;
    switch (kind) {
    case ETCD_RESP_GET:
        rc = decode_single(out, body_obj, &out->res.kv);
        break;
    case ETCD_RESP_RANGE:
        rc = decode_range(out, body_obj, shape ? shape->range_limit : 0);
        break;
    case ETCD_RESP_TXN:
        KVM_ASSERT(shape != NULL);
        rc = decode_txn(out, body_obj, shape);
        break;
    case ETCD_RESP_LEASE_GRANT: {
        int64_t id, ttl;
        json_t *e = json_object_get(body_obj, "error");
        if (e && json_is_string(e) && json_string_length(e) > 0) {
            rc = fail(out, KVMESH_EBACKEND, "etcd: lease grant failed: %.300s",
                      json_string_value(e));
            break;
        }
        if ((rc = get_i64(out, body_obj, "lease", "ID", true, &id)) != 0 ||
            (rc = get_i64(out, body_obj, "lease", "TTL", true, &ttl)) != 0)
            break;
        if (id <= 0 || ttl <= 0 || ttl > INT64_MAX / 1000) {
            rc = fail(out, KVMESH_EBACKEND,
                      "etcd reply: lease grant gave ID %" PRId64 " TTL %" PRId64, id, ttl);
            break;
        }
        out->res.lease = id;
        out->res.ttl_ms = ttl * 1000;
        break;
    }
    case ETCD_RESP_LEASE_KEEPALIVE:
    case ETCD_RESP_LEASE_TTL: {
        int64_t id, ttl;
        if ((rc = get_i64(out, body_obj, "lease", "ID", false, &id)) != 0 ||
            (rc = get_i64(out, body_obj, "lease", "TTL", false, &ttl)) != 0)
            break;
        if (ttl > INT64_MAX / 1000) {
            rc = fail(out, KVMESH_EBACKEND, "etcd reply: lease TTL %" PRId64 " too large", ttl);
            break;
        }
        /* keepalive of an unknown lease answers TTL 0; timetolive answers TTL -1 */
        bool gone = kind == ETCD_RESP_LEASE_KEEPALIVE ? ttl <= 0 : ttl < 0;
        out->res.lease = id;
        if (gone) {
            rc = fail(out, KVMESH_ENOENT, "etcd: lease %" PRId64 " expired or unknown", id);
            break;
        }
        out->res.ttl_ms = ttl * 1000;
        break;
    }
    case ETCD_RESP_LEASE_REVOKE:
        break;
    default:
        rc = fail(out, KVMESH_EINTERNAL, "etcd: unknown reply kind %d", (int)kind);
        break;
    }
out:
    json_decref(root);
    if (rc != 0 && out->res.rc == 0)
        out->res.rc = rc;
    if (rc == 0)
        out->msg[0] = '\0';
    return rc;
}
