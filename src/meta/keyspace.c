/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyspace.c — builds and parses every metadata key (see keyspace.h for the layout and its
 * guarantees). One schema table says, per family, its name and the type of each part; builder
 * and parser both follow it, so they cannot drift apart.
 *
 * Invariants: encoded string parts never contain '/', so '/' separates parts unambiguously;
 * "~" (empty optional part) can't be produced by a non-empty part ('~' is escaped); numeric parts
 * are exactly 8 or 16 lower-case hex digits.
 */
#include <stdio.h>
#include <string.h>

#include "core/hex.h"
#include "core/util.h"
#include "meta/keyspace.h"

enum ks_ptype {
    KS_S,   /* non-empty string */
    KS_E,   /* string that may be empty ("~") */
    KS_U32, /* 8 hex digits */
    KS_U64, /* 16 hex digits */
};

static const struct ks_schema {
    const char *name;
    size_t n;
    enum ks_ptype t[KS_MAX_PARTS];
    const char *what[KS_MAX_PARTS];
} ks_schemas[KS_FAMILY_COUNT] = {
    [KS_MEMBER] = {"members", 1, {KS_S}, {"runtime id"}},
    [KS_CLUSTER_POLICY] = {"cluster-policy", 0, {KS_S}, {""}},
    [KS_SHARD] = {"shards", 1, {KS_U32}, {"shard"}},
    [KS_TENANT_POLICY] = {"tenant-policies", 1, {KS_S}, {"tenant"}},
    [KS_QUOTA] = {"quotas", 1, {KS_S}, {"tenant"}},
    [KS_OBJECT] = {"objects", 3, {KS_S, KS_E, KS_S}, {"tenant", "domain", "object key"}},
    [KS_ACCT_OP] = {"acct-ops", 2, {KS_S, KS_S}, {"tenant", "operation id"}},
    [KS_ACCT_DUE] = {"acct-due",
                     4,
                     {KS_S, KS_S, KS_U64, KS_S},
                     {"tenant", "state", "deadline", "operation id"}},
    [KS_COLD_DEVICE] = {"cold-devices", 1, {KS_S}, {"device id"}},
    [KS_COLD_OP] = {"cold-ops", 1, {KS_S}, {"cold operation id"}},
    [KS_COLD_DUE] = {"cold-due",
                     3,
                     {KS_S, KS_U64, KS_S},
                     {"state", "deadline", "cold operation id"}},
    [KS_RECLAIM] = {"cold-reclaims", 1, {KS_S}, {"reclaim id"}},
    [KS_ROUTE] = {"routes", 3, {KS_S, KS_E, KS_S}, {"tenant", "domain", "object key"}},
    [KS_LIFECYCLE] = {"lifecycle", 1, {KS_S}, {"runtime id"}},
    [KS_ROUTE_DUE] = {"route-due",
                      4,
                      {KS_U64, KS_S, KS_E, KS_S},
                      {"retain until", "tenant", "domain", "object key"}},
    [KS_ROUTE_FLOOR] = {"route-floors", 1, {KS_U32}, {"shard"}},
};

const char *ks_family_name(enum ks_family f)
{
    return (unsigned)f < KS_FAMILY_COUNT ? ks_schemas[f].name : "?";
}

size_t ks_family_parts(enum ks_family f)
{
    return (unsigned)f < KS_FAMILY_COUNT ? ks_schemas[f].n : 0;
}

static bool plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

int ks_validate_deployment(const char *d)
{
    if (!d)
        return kvm_errf(KVMESH_EINVAL, "deployment name is NULL");
    size_t n = strnlen(d, KS_DEPLOYMENT_MAX + 1);
    if (n == 0 || n > KS_DEPLOYMENT_MAX)
        return kvm_errf(KVMESH_EINVAL, "deployment name must have 1..%d bytes", KS_DEPLOYMENT_MAX);
    if (!strcmp(d, ".") || !strcmp(d, ".."))
        return kvm_errf(KVMESH_EINVAL, "deployment name '%s' is reserved", d);
    for (size_t i = 0; i < n; i++)
        if (!plain((unsigned char)d[i]))
            return kvm_errf(KVMESH_EINVAL,
                            "deployment name '%.64s' has invalid character 0x%02x at %zu; use "
                            "letters, digits, '.', '_' and '-'",
                            d, (unsigned char)d[i], i);
    return 0;
}

/* ---- builder ------------------------------------------------------------------------------- */

struct kb {
    char *out;
    size_t cap, len;
    bool over;
};

static void kb_put(struct kb *b, const char *s, size_t n)
{
    if (b->over || b->len + n >= b->cap || b->len + n > META_KEY_MAX) {
        b->over = true;
        return;
    }
    memcpy(b->out + b->len, s, n);
    b->len += n;
    b->out[b->len] = '\0';
}

static void kb_str(struct kb *b, const char *s)
{
    kb_put(b, s, strlen(s));
}

static void kb_escaped(struct kb *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p && !b->over; p++) {
        if (plain(*p)) {
            kb_put(b, (const char *)p, 1);
        } else {
            char e[3] = {'%', kvm_hex_digit(*p >> 4, 1), kvm_hex_digit(*p, 1)};
            kb_put(b, e, 3);
        }
    }
}

static void kb_hex(struct kb *b, uint64_t v, int digits)
{
    char h[16];
    kvm_hex_u64_put(v, digits, h);
    kb_put(b, h, (size_t)digits);
}

static int build(char *out, size_t cap, const char *dep, enum ks_family f, const ks_part_t *parts,
                 size_t n, bool prefix)
{
    if (!out || cap == 0)
        return kvm_errf(KVMESH_EINVAL, "keyspace: no output buffer");
    out[0] = '\0';
    if ((unsigned)f >= KS_FAMILY_COUNT)
        return kvm_errf(KVMESH_EINVAL, "keyspace: unknown family %d", (int)f);
    int rc = ks_validate_deployment(dep);
    if (rc)
        return rc;
    const struct ks_schema *sc = &ks_schemas[f];
    if (prefix ? n >= sc->n : n != sc->n)
        return kvm_errf(KVMESH_EINVAL, "keyspace: %s %s %zu parts, got %zu", sc->name,
                        prefix ? "prefixes take fewer than" : "keys take", sc->n, n);
    if (n > 0 && !parts)
        return kvm_errf(KVMESH_EINVAL, "keyspace: parts array is NULL");
    struct kb b = {.out = out, .cap = cap};
    kb_str(&b, KS_ROOT);
    kb_str(&b, dep);
    kb_str(&b, "/");
    kb_str(&b, sc->name);
    for (size_t i = 0; i < n; i++) {
        kb_str(&b, "/");
        switch (sc->t[i]) {
        case KS_S:
        case KS_E:
            if (!parts[i].s)
                return kvm_errf(KVMESH_EINVAL, "keyspace: %s %s is NULL", sc->name, sc->what[i]);
            if (!parts[i].s[0]) {
                if (sc->t[i] == KS_S)
                    return kvm_errf(KVMESH_EINVAL, "keyspace: %s %s is empty", sc->name,
                                    sc->what[i]);
                kb_str(&b, "~");
            } else {
                kb_escaped(&b, parts[i].s);
            }
            break;
        case KS_U32:
            if (parts[i].u > UINT32_MAX)
                return kvm_errf(KVMESH_EINVAL, "keyspace: %s %s exceeds 32 bits", sc->name,
                                sc->what[i]);
            kb_hex(&b, parts[i].u, 8);
            break;
        case KS_U64:
            kb_hex(&b, parts[i].u, 16);
            break;
        }
    }
    if (prefix)
        kb_str(&b, "/");
    if (b.over) {
        out[0] = '\0';
        return kvm_errf(KVMESH_ETOOBIG, "keyspace: %s key would exceed %d bytes (or the buffer)",
                        sc->name, META_KEY_MAX);
    }
    return 0;
}

int ks_key(char *out, size_t cap, const char *dep, enum ks_family f, const ks_part_t *parts)
{
    return build(out, cap, dep, f, parts, ks_family_parts(f), false);
}

int ks_prefix(char *out, size_t cap, const char *dep, enum ks_family f, const ks_part_t *parts,
              size_t n_lead)
{
    return build(out, cap, dep, f, parts, n_lead, true);
}

int ks_deployment_prefix(char *out, size_t cap, const char *dep)
{
    int rc = ks_validate_deployment(dep);
    if (rc)
        return rc;
    if ((size_t)snprintf(out, cap, "%s%s/", KS_ROOT, dep) >= cap)
        return kvm_errf(KVMESH_ETOOBIG, "keyspace: buffer too small");
    return 0;
}

/* ---- parser -------------------------------------------------------------------------------- */

/* Decodes an escaped part [s, s+n); rejects non-canonical encodings so parse∘build = id and
 * build∘parse = id. */
static int decode_str(const char *s, size_t n, bool may_be_empty, char *out, size_t cap)
{
    if (n == 1 && s[0] == '~') {
        if (!may_be_empty)
            return kvm_errf(KVMESH_EINVAL, "keyspace: '~' in a part that can't be empty");
        out[0] = '\0';
        return 0;
    }
    if (n == 0)
        return kvm_errf(KVMESH_EINVAL, "keyspace: empty part");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 1 >= cap)
            return kvm_errf(KVMESH_EINVAL, "keyspace: part too long");
        if (plain(c)) {
            out[o++] = (char)c;
            continue;
        }
        if (c != '%' || i + 2 >= n)
            return kvm_errf(KVMESH_EINVAL, "keyspace: bad byte 0x%02x in a part", c);
        int e = kvm_hex_byte(s + i + 1, KVM_HEX_UPPER); /* canonical escapes are upper case */
        if (e < 0)
            return kvm_errf(KVMESH_EINVAL, "keyspace: bad escape in a part");
        unsigned char v = (unsigned char)e;
        if (v == 0 || plain(v))
            return kvm_errf(KVMESH_EINVAL, "keyspace: non-canonical escape %%%02X", v);
        out[o++] = (char)v;
        i += 2;
    }
    out[o] = '\0';
    return 0;
}

static int decode_hex(const char *s, size_t n, size_t digits, uint64_t *out)
{
    if (n != digits)
        return kvm_errf(KVMESH_EINVAL, "keyspace: numeric part must have %zu hex digits", digits);
    if (kvm_hex_u64(s, n, KVM_HEX_LOWER, out) != 0) /* canonical numbers are lower case */
        return kvm_errf(KVMESH_EINVAL, "keyspace: bad hex digit in a numeric part");
    return 0;
}

int ks_parse(const char *key, ks_parsed_t *out)
{
    if (!key || !out)
        return kvm_errf(KVMESH_EINVAL, "keyspace: NULL key");
    memset(out, 0, sizeof(*out) - sizeof(out->parts));
    size_t len = strnlen(key, META_KEY_MAX + 1);
    if (len > META_KEY_MAX)
        return kvm_errf(KVMESH_EINVAL, "keyspace: key longer than %d bytes", META_KEY_MAX);
    size_t rl = strlen(KS_ROOT);
    if (strncmp(key, KS_ROOT, rl) != 0)
        return kvm_errf(KVMESH_EINVAL, "keyspace: key does not start with %s", KS_ROOT);
    const char *p = key + rl, *end = key + len;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (!slash || slash == p || (size_t)(slash - p) > KS_DEPLOYMENT_MAX)
        return kvm_errf(KVMESH_EINVAL, "keyspace: missing or bad deployment");
    memcpy(out->deployment, p, (size_t)(slash - p));
    out->deployment[slash - p] = '\0';
    int rc = ks_validate_deployment(out->deployment);
    if (rc)
        return rc;
    p = slash + 1;
    const char *fend = memchr(p, '/', (size_t)(end - p));
    size_t flen = fend ? (size_t)(fend - p) : (size_t)(end - p);
    int fam = -1;
    for (int f = 0; f < KS_FAMILY_COUNT; f++)
        if (strlen(ks_schemas[f].name) == flen && !memcmp(ks_schemas[f].name, p, flen))
            fam = f;
    if (fam < 0)
        return kvm_errf(KVMESH_EINVAL, "keyspace: unknown family");
    const struct ks_schema *sc = &ks_schemas[fam];
    out->family = (enum ks_family)fam;
    p += flen;
    for (size_t i = 0; i < sc->n; i++) {
        if (p >= end || *p != '/')
            return kvm_errf(KVMESH_EINVAL, "keyspace: %s key has too few parts", sc->name);
        p++;
        const char *e = memchr(p, '/', (size_t)(end - p));
        size_t n = e ? (size_t)(e - p) : (size_t)(end - p);
        switch (sc->t[i]) {
        case KS_S:
        case KS_E:
            rc = decode_str(p, n, sc->t[i] == KS_E, out->parts[i].s, sizeof(out->parts[i].s));
            break;
        case KS_U32:
            rc = decode_hex(p, n, 8, &out->parts[i].u);
            break;
        case KS_U64:
            rc = decode_hex(p, n, 16, &out->parts[i].u);
            break;
        }
        if (rc)
            return rc;
        if (sc->t[i] >= KS_U32)
            out->parts[i].s[0] = '\0';
        else
            out->parts[i].u = 0;
        p += n;
    }
    if (p != end)
        return kvm_errf(KVMESH_EINVAL, "keyspace: %s key has extra bytes", sc->name);
    out->n_parts = sc->n;
    return 0;
}

/* ---- op ids -------------------------------------------------------------------------------- */

void ks_opid_format(char out[KS_OPID_LEN + 1], uint64_t epoch, uint64_t seq)
{
    snprintf(out, KS_OPID_LEN + 1, "%016llx-%016llx", (unsigned long long)epoch,
             (unsigned long long)seq);
}

int ks_opid_parse(const char *s, uint64_t *epoch, uint64_t *seq)
{
    if (!s || strlen(s) != KS_OPID_LEN || s[16] != '-')
        return kvm_errf(KVMESH_EINVAL, "operation id must be <16 hex>-<16 hex>");
    int rc = decode_hex(s, 16, 16, epoch);
    if (rc == 0)
        rc = decode_hex(s + 17, 16, 16, seq);
    return rc;
}

/* ---- shorthands ---------------------------------------------------------------------------- */

#define P(...) ((const ks_part_t[]){__VA_ARGS__})

int ks_member_key(char *out, size_t cap, const char *dep, const char *runtime_id)
{
    return ks_key(out, cap, dep, KS_MEMBER, P({.s = runtime_id}));
}

int ks_lifecycle_key(char *out, size_t cap, const char *dep, const char *runtime_id)
{
    return ks_key(out, cap, dep, KS_LIFECYCLE, P({.s = runtime_id}));
}

int ks_cluster_policy_key(char *out, size_t cap, const char *dep)
{
    return ks_key(out, cap, dep, KS_CLUSTER_POLICY, NULL);
}

int ks_shard_key(char *out, size_t cap, const char *dep, uint32_t shard)
{
    return ks_key(out, cap, dep, KS_SHARD, P({.u = shard}));
}

int ks_tenant_policy_key(char *out, size_t cap, const char *dep, const char *tenant)
{
    return ks_key(out, cap, dep, KS_TENANT_POLICY, P({.s = tenant}));
}

int ks_quota_key(char *out, size_t cap, const char *dep, const char *tenant)
{
    return ks_key(out, cap, dep, KS_QUOTA, P({.s = tenant}));
}

int ks_object_key(char *out, size_t cap, const char *dep, const char *tenant, const char *domain,
                  const char *key)
{
    return ks_key(out, cap, dep, KS_OBJECT,
                  P({.s = tenant}, {.s = domain ? domain : ""}, {.s = key}));
}

int ks_acct_op_key(char *out, size_t cap, const char *dep, const char *tenant, const char *op_id)
{
    return ks_key(out, cap, dep, KS_ACCT_OP, P({.s = tenant}, {.s = op_id}));
}

int ks_acct_due_key(char *out, size_t cap, const char *dep, const char *tenant, const char *state,
                    uint64_t deadline_ms, const char *op_id)
{
    return ks_key(out, cap, dep, KS_ACCT_DUE,
                  P({.s = tenant}, {.s = state}, {.u = deadline_ms}, {.s = op_id}));
}

int ks_acct_due_prefix(char *out, size_t cap, const char *dep, const char *tenant,
                       const char *state)
{
    return ks_prefix(out, cap, dep, KS_ACCT_DUE, P({.s = tenant}, {.s = state}), 2);
}

int ks_cold_device_key(char *out, size_t cap, const char *dep, const char *device_id)
{
    return ks_key(out, cap, dep, KS_COLD_DEVICE, P({.s = device_id}));
}

int ks_cold_op_key(char *out, size_t cap, const char *dep, const char *cold_op_id)
{
    return ks_key(out, cap, dep, KS_COLD_OP, P({.s = cold_op_id}));
}

int ks_cold_due_key(char *out, size_t cap, const char *dep, const char *state, uint64_t deadline_ms,
                    const char *cold_op_id)
{
    return ks_key(out, cap, dep, KS_COLD_DUE,
                  P({.s = state}, {.u = deadline_ms}, {.s = cold_op_id}));
}

int ks_cold_due_prefix(char *out, size_t cap, const char *dep, const char *state)
{
    return ks_prefix(out, cap, dep, KS_COLD_DUE, P({.s = state}), 1);
}

int ks_cold_device_prefix(char *out, size_t cap, const char *dep)
{
    return ks_prefix(out, cap, dep, KS_COLD_DEVICE, NULL, 0);
}

int ks_reclaim_key(char *out, size_t cap, const char *dep, const char *reclaim_id)
{
    return ks_key(out, cap, dep, KS_RECLAIM, P({.s = reclaim_id}));
}

int ks_route_due_key(char *out, size_t cap, const char *dep, uint64_t retain_until_ms,
                     const char *tenant, const char *domain, const char *key)
{
    return ks_key(
        out, cap, dep, KS_ROUTE_DUE,
        P({.u = retain_until_ms}, {.s = tenant}, {.s = domain ? domain : ""}, {.s = key}));
}

int ks_route_floor_key(char *out, size_t cap, const char *dep, uint32_t shard)
{
    return ks_key(out, cap, dep, KS_ROUTE_FLOOR, P({.u = shard}));
}

int ks_route_key(char *out, size_t cap, const char *dep, const char *tenant, const char *domain,
                 const char *key)
{
    return ks_key(out, cap, dep, KS_ROUTE,
                  P({.s = tenant}, {.s = domain ? domain : ""}, {.s = key}));
}
