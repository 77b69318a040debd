/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ident.h — scoped object identity: (tenant, optional domain, key), its validation and its
 * canonical byte encoding.
 *
 * Rules (limits in limits.h; each violation returns its own code and a kvm_errf message):
 *   tenant  required, 1..KVM_TENANT_MAX_LEN bytes of [A-Za-z0-9_.-], first byte alphanumeric
 *           -> KVMESH_EBADTENANT
 *   domain  absent (NULL), or 1..KVM_DOMAIN_MAX_LEN bytes, same alphabet and first-byte rule;
 *           an empty string is rejected (pass NULL for "no domain")  -> KVMESH_EBADDOMAIN
 *   key     1..KVM_KEY_MAX_LEN bytes; every byte >= 0x20 and != 0x7f (no control characters;
 *           bytes >= 0x80 are allowed and not checked as UTF-8)       -> KVMESH_EBADKEY
 *
 * Canonical encoding (version 1), the identity's only byte form; it is prefix-free, so two
 * identities are equal iff their encodings are equal, and the same key under two tenants, or
 * under two domains (or none) of one tenant, always encodes differently:
 *
 *   u8 version (=1) | u8 tenant_len | tenant | u8 domain_len (0 = none) | domain
 *   | u16 key_len (big-endian) | key
 *
 * hash = XXH3-64(encoding, seed KVM_HASH_SEED_IDENT); shard = floor(hash * nshards / 2^64).
 *
 * Ownership: a kvm_ident_t owns its heap buffer `enc`. kvm_ident_init* allocate it; call
 * kvm_ident_free exactly once per successful init/copy (free on a zeroed ident is a no-op).
 * The tenant/domain/key accessors return pointers into `enc`, valid until kvm_ident_free; they
 * are NOT NUL-terminated. An ident is immutable after init, so it may be read from any thread.
 */
#ifndef KVMESH_CORE_IDENT_H
#define KVMESH_CORE_IDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"

typedef struct kvm_ident {
    uint8_t *enc;     /* owned canonical encoding; NULL in a zeroed ident */
    uint32_t enc_len; /* bytes in enc */
    uint8_t tenant_len;
    uint8_t domain_len; /* 0 = no domain */
    uint16_t key_len;
    uint64_t hash; /* XXH3-64 of enc, seed KVM_HASH_SEED_IDENT */
} kvm_ident_t;

/* Validation alone (no allocation). Return 0 or the code above, with a message. */
int kvm_ident_check_tenant(const char *tenant, size_t len);
int kvm_ident_check_domain(const char *domain, size_t len); /* domain != NULL */
int kvm_ident_check_key(const void *key, size_t len);

/*
 * Builds an identity. tenant and domain are NUL-terminated strings (domain NULL = none); key is
 * key_len raw bytes. On failure *out is zeroed and nothing is allocated. KVMESH_ENOMEM possible.
 */
int kvm_ident_init(kvm_ident_t *out, const char *tenant, const char *domain, const void *key,
                   size_t key_len);
/* Same, with explicit lengths (domain NULL = none; domain non-NULL with length 0 is rejected). */
int kvm_ident_init_n(kvm_ident_t *out, const char *tenant, size_t tenant_len, const char *domain,
                     size_t domain_len, const void *key, size_t key_len);
/* Same, with the encoding written into store (cap bytes) when it fits, else allocated as above.
 * An identity whose enc == store does not own it: its holder must not kvm_ident_free it (zero
 * it instead) and must keep store alive and unchanged while it is used. */
int kvm_ident_init_n_in(kvm_ident_t *out, uint8_t *store, size_t cap, const char *tenant,
                        size_t tenant_len, const char *domain, size_t domain_len, const void *key,
                        size_t key_len);
/* Parses and validates a canonical encoding (e.g. from a metadata key or the wire). Errors:
 * KVMESH_EPROTO for a malformed layout, or the validation codes above. */
int kvm_ident_from_canonical(kvm_ident_t *out, const void *enc, size_t len);

void kvm_ident_free(kvm_ident_t *id);
int kvm_ident_copy(kvm_ident_t *dst, const kvm_ident_t *src); /* dst must not own a buffer */
bool kvm_ident_equal(const kvm_ident_t *a, const kvm_ident_t *b);
/* Byte order of the canonical encodings (for ordered indexes). */
int kvm_ident_cmp(const kvm_ident_t *a, const kvm_ident_t *b);

const char *kvm_ident_tenant(const kvm_ident_t *id); /* tenant_len bytes */
const char *kvm_ident_domain(const kvm_ident_t *id); /* domain_len bytes, NULL when none */
const uint8_t *kvm_ident_key(const kvm_ident_t *id); /* key_len bytes */
static inline bool kvm_ident_has_domain(const kvm_ident_t *id)
{
    return id->domain_len != 0;
}

/* Logical shard of a hash / an identity for nshards in [1, KVM_MAX_LOGICAL_SHARDS] (asserted).
 * Multiply-shift mapping: uniform for a uniform hash, no modulo bias. */
uint32_t kvm_shard_of_hash(uint64_t hash, uint32_t nshards);
uint32_t kvm_ident_shard(const kvm_ident_t *id, uint32_t nshards);

/* Human-readable "tenant[/domain]:key" with non-printable key bytes as \xNN, truncated to fit
 * buf (always NUL-terminated when cap > 0). For logs and errors only, never for identity. */
char *kvm_ident_fmt(const kvm_ident_t *id, char *buf, size_t cap);

#endif
