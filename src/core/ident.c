/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ident.c — scoped object identity (ident.h): validation of tenant/domain/key, the canonical
 * encoding (one heap buffer per identity), its hash and the logical shard mapping.
 * Invariant: a non-zeroed kvm_ident_t always holds a valid canonical encoding whose length
 * fields agree with tenant_len/domain_len/key_len, and hash is the hash of that encoding.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/ident.h"
#include "core/bytes.h"
#include "core/util.h"

static bool scope_byte_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

static bool alnum_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Checks a tenant or domain; returns 0 or err with a message naming `what`. */
static int check_scope(int err, const char *what, size_t max, const char *s, size_t len)
{
    if (len == 0)
        return kvm_errf(err, "%s is empty; it must be 1..%zu characters of [A-Za-z0-9_.-]%s", what,
                        max, err == KVMESH_EBADDOMAIN ? " (pass no domain for none)" : "");
    if (len > max)
        return kvm_errf(err, "%s is %zu bytes; the maximum is %zu", what, len, max);
    if (!alnum_byte((unsigned char)s[0]))
        return kvm_errf(err, "%s must start with a letter or digit (got byte 0x%02x)", what,
                        (unsigned char)s[0]);
    for (size_t i = 0; i < len; i++)
        if (!scope_byte_ok((unsigned char)s[i]))
            return kvm_errf(err,
                            "%s has a disallowed byte 0x%02x at offset %zu; allowed are "
                            "[A-Za-z0-9_.-]",
                            what, (unsigned char)s[i], i);
    return 0;
}

int kvm_ident_check_tenant(const char *tenant, size_t len)
{
    if (!tenant)
        return kvm_errf(KVMESH_EBADTENANT, "tenant is missing; every object needs a tenant");
    return check_scope(KVMESH_EBADTENANT, "tenant", KVM_TENANT_MAX_LEN, tenant, len);
}

int kvm_ident_check_domain(const char *domain, size_t len)
{
    KVM_ASSERT(domain != NULL);
    return check_scope(KVMESH_EBADDOMAIN, "domain", KVM_DOMAIN_MAX_LEN, domain, len);
}

int kvm_ident_check_key(const void *key, size_t len)
{
    if (!key || len == 0)
        return kvm_errf(KVMESH_EBADKEY, "key is empty; it must be 1..%d bytes", KVM_KEY_MAX_LEN);
    if (len > KVM_KEY_MAX_LEN)
        return kvm_errf(KVMESH_EBADKEY, "key is %zu bytes; the maximum is %d", len,
                        KVM_KEY_MAX_LEN);
    const unsigned char *k = key;
    for (size_t i = 0; i < len; i++)
        if (k[i] < 0x20 || k[i] == 0x7f)
            return kvm_errf(KVMESH_EBADKEY,
                            "key has control byte 0x%02x at offset %zu; keys may not contain "
                            "bytes below 0x20 or 0x7f",
                            k[i], i);
    return 0;
}

int kvm_ident_init_n(kvm_ident_t *out, const char *tenant, size_t tenant_len, const char *domain,
                     size_t domain_len, const void *key, size_t key_len)
{
    return kvm_ident_init_n_in(out, NULL, 0, tenant, tenant_len, domain, domain_len, key, key_len);
}

int kvm_ident_init_n_in(kvm_ident_t *out, uint8_t *store, size_t cap, const char *tenant,
                        size_t tenant_len, const char *domain, size_t domain_len, const void *key,
                        size_t key_len)
{
    memset(out, 0, sizeof(*out));
    int rc = kvm_ident_check_tenant(tenant, tenant_len);
    if (rc)
        return rc;
    if (domain && (rc = kvm_ident_check_domain(domain, domain_len)) != 0)
        return rc;
    if ((rc = kvm_ident_check_key(key, key_len)) != 0)
        return rc;
    if (!domain)
        domain_len = 0;
    KVM_ASSERT(tenant != NULL && key != NULL); /* the checks above reject NULL */
    size_t n = 1 + 1 + tenant_len + 1 + domain_len + 2 + key_len;
    uint8_t *enc = store && n <= cap ? store : malloc(n);
    if (!enc)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for an object identity");
    kvm_wr_t w;
    kvm_wr_fixed(&w, enc, n);
    kvm_wr_u8(&w, KVM_IDENT_ENC_VERSION);
    kvm_wr_u8(&w, (uint8_t)tenant_len);
    kvm_wr_bytes(&w, tenant, tenant_len);
    kvm_wr_u8(&w, (uint8_t)domain_len);
    kvm_wr_bytes(&w, domain, domain_len);
    kvm_wr_u16be(&w, (uint16_t)key_len);
    kvm_wr_bytes(&w, key, key_len);
    size_t p = 0;
    rc = kvm_wr_finish(&w, &p);
    KVM_ASSERT(rc == 0 && p == n);
    out->enc = enc;
    out->enc_len = (uint32_t)n;
    out->tenant_len = (uint8_t)tenant_len;
    out->domain_len = (uint8_t)domain_len;
    out->key_len = (uint16_t)key_len;
    out->hash = kvm_hash_seeded(enc, n, KVM_HASH_SEED_IDENT);
    return 0;
}

int kvm_ident_init(kvm_ident_t *out, const char *tenant, const char *domain, const void *key,
                   size_t key_len)
{
    return kvm_ident_init_n(out, tenant, tenant ? strlen(tenant) : 0, domain,
                            domain ? strlen(domain) : 0, key, key_len);
}

int kvm_ident_from_canonical(kvm_ident_t *out, const void *encv, size_t len)
{
    const uint8_t *enc = encv;
    memset(out, 0, sizeof(*out));
    if (!enc || len < 1 + 1 + 1 + 2)
        return kvm_errf(KVMESH_EPROTO, "canonical identity is %zu bytes; too short", len);
    if (enc[0] != KVM_IDENT_ENC_VERSION)
        return kvm_errf(KVMESH_EPROTO, "canonical identity has encoding version %u; expected %d",
                        enc[0], KVM_IDENT_ENC_VERSION);
    kvm_rd_t r;
    kvm_rd_init(&r, enc + 1, len - 1);
    size_t tl = kvm_rd_u8(&r);
    const char *tenant = (const char *)kvm_rd_bytes(&r, tl);
    size_t dl = kvm_rd_u8(&r);
    if (!kvm_rd_ok(&r))
        return kvm_errf(KVMESH_EPROTO, "canonical identity truncated in the tenant");
    const uint8_t *dom = kvm_rd_bytes(&r, dl);
    size_t kl = kvm_rd_u16be(&r);
    if (!kvm_rd_ok(&r))
        return kvm_errf(KVMESH_EPROTO, "canonical identity truncated in the domain");
    const char *domain = dl ? (const char *)dom : NULL;
    size_t left = kvm_rd_remaining(&r);
    const uint8_t *key = kvm_rd_bytes(&r, kl);
    if (!kvm_rd_end(&r))
        return kvm_errf(KVMESH_EPROTO,
                        "canonical identity key length %zu does not match the %zu bytes left", kl,
                        left);
    return kvm_ident_init_n(out, tenant, tl, domain, dl, key, kl);
}

void kvm_ident_free(kvm_ident_t *id)
{
    free(id->enc);
    memset(id, 0, sizeof(*id));
}

int kvm_ident_copy(kvm_ident_t *dst, const kvm_ident_t *src)
{
    *dst = *src;
    if (!src->enc)
        return 0;
    dst->enc = malloc(src->enc_len);
    if (!dst->enc) {
        memset(dst, 0, sizeof(*dst));
        return kvm_errf(KVMESH_ENOMEM, "out of memory copying an object identity");
    }
    memcpy(dst->enc, src->enc, src->enc_len);
    return 0;
}

bool kvm_ident_equal(const kvm_ident_t *a, const kvm_ident_t *b)
{
    return a->enc_len == b->enc_len && a->hash == b->hash &&
           (a->enc_len == 0 || memcmp(a->enc, b->enc, a->enc_len) == 0);
}

int kvm_ident_cmp(const kvm_ident_t *a, const kvm_ident_t *b)
{
    size_t n = KVM_MIN(a->enc_len, b->enc_len);
    int c = n ? memcmp(a->enc, b->enc, n) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return a->enc_len < b->enc_len ? -1 : a->enc_len > b->enc_len ? 1 : 0;
}

const char *kvm_ident_tenant(const kvm_ident_t *id)
{
    return (const char *)id->enc + 2;
}

const char *kvm_ident_domain(const kvm_ident_t *id)
{
    return id->domain_len ? (const char *)id->enc + 2 + id->tenant_len + 1 : NULL;
}

const uint8_t *kvm_ident_key(const kvm_ident_t *id)
{
    return id->enc + 2 + id->tenant_len + 1 + id->domain_len + 2;
}

uint32_t kvm_shard_of_hash(uint64_t hash, uint32_t nshards)
{
    KVM_ASSERT(nshards >= 1 && nshards <= KVM_MAX_LOGICAL_SHARDS);
    return (uint32_t)(((unsigned __int128)hash * nshards) >> 64);
}

uint32_t kvm_ident_shard(const kvm_ident_t *id, uint32_t nshards)
{
    return kvm_shard_of_hash(id->hash, nshards);
}

char *kvm_ident_fmt(const kvm_ident_t *id, char *buf, size_t cap)
{
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    if (!id->enc) {
        snprintf(buf, cap, "(none)");
        return buf;
    }
    size_t p = 0;
    int n = snprintf(buf, cap, "%.*s", (int)id->tenant_len, kvm_ident_tenant(id));
    p = n > 0 ? KVM_MIN((size_t)n, cap - 1) : 0;
    if (id->domain_len && p < cap - 1) {
        n = snprintf(buf + p, cap - p, "/%.*s", (int)id->domain_len, kvm_ident_domain(id));
        p = n > 0 ? KVM_MIN(p + (size_t)n, cap - 1) : p;
    }
    if (p < cap - 1)
        buf[p++] = ':';
    const uint8_t *k = kvm_ident_key(id);
    for (size_t i = 0; i < id->key_len && p < cap - 1; i++) {
        if (k[i] >= 0x20 && k[i] < 0x7f && k[i] != '\\') {
            buf[p++] = (char)k[i];
        } else {
            if (p + 4 >= cap)
                break;
            snprintf(buf + p, cap - p, "\\x%02x", k[i]);
            p += 4;
        }
    }
    buf[p] = '\0';
    return buf;
}
