/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_rand.c — deterministic random valid core records for the wire tests (wire_rand.h).
 * Invalid construction (an identity or locator the core refuses) is a bug in the generator:
 * it aborts.
 */
#include "wire_rand.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static uint64_t rng_state = 1;

void wr_seed(uint64_t s)
{
    rng_state = s ? s : 1;
}

uint64_t wr_rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(0x2545F4914F6CDD1D);
}

uint64_t wr_u64_any(void)
{
    switch (wr_rnd() % 4) {
    case 0:
        return wr_rnd() % 300;
    case 1:
        return UINT64_MAX - wr_rnd() % 3;
    default:
        return wr_rnd();
    }
}

kvm_id128_t wr_id(void)
{
    kvm_id128_t id = kvm_id128_from_u64(wr_rnd(), wr_rnd());
    if (kvm_id128_is_nil(&id))
        id.b[15] = 1;
    return id;
}

kvm_op_id_t wr_op(void)
{
    kvm_op_id_t op = {wr_id(), 1 + wr_rnd() % 1000, 1 + wr_rnd() % 1000000};
    if (wr_rnd() % 8 == 0) {
        op.epoch = UINT64_MAX;
        op.seq = UINT64_MAX;
    }
    return op;
}

/* A tenant or domain name: an alphanumeric first byte, then [A-Za-z0-9_.-]; sometimes max. */
static size_t scope(char *buf, size_t max)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static const char all[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
    size_t n = wr_rnd() % 4 == 0 ? max : 1 + wr_rnd() % max;
    buf[0] = alnum[wr_rnd() % (sizeof(alnum) - 1)];
    for (size_t i = 1; i < n; i++)
        buf[i] = all[wr_rnd() % (sizeof(all) - 1)];
    return n;
}

void wr_ident(kvm_ident_t *id)
{
    char t[KVM_TENANT_MAX_LEN], d[KVM_DOMAIN_MAX_LEN];
    uint8_t k[KVM_KEY_MAX_LEN];
    size_t tl = scope(t, sizeof(t));
    size_t dl = wr_rnd() % 3 ? scope(d, sizeof(d)) : 0;
    size_t kl = wr_rnd() % 6 == 0 ? KVM_KEY_MAX_LEN : 1 + wr_rnd() % 64;
    for (size_t i = 0; i < kl; i++) {
        uint8_t b = (uint8_t)(0x20 + wr_rnd() % 0xe0);
        k[i] = b == 0x7f ? 'x' : b;
    }
    if (kvm_ident_init_n(id, t, tl, dl ? d : NULL, dl, k, kl) != 0)
        abort();
}

void wr_cold(kvm_cold_backing_t *c, kvm_cold_kind_t kind, const kvm_op_id_t *content,
             uint64_t length, uint64_t checksum)
{
    kvm_op_id_t cold = wr_op();
    while (kvm_op_id_equal(&cold, content))
        cold = wr_op();
    kvm_runtime_id_t owner = wr_id();
    kvm_tier_id_t tier = wr_id();
    kvm_cold_backing_pending(c, &cold, content, &owner, &tier, length, checksum);
    if (kind == KVM_COLD_MATERIALIZED) {
        uint8_t loc[KVM_COLD_LOCATOR_MAX_LEN];
        size_t n = wr_rnd() % 4 == 0 ? KVM_COLD_LOCATOR_MAX_LEN : 1 + wr_rnd() % 80;
        for (size_t i = 0; i < n; i++)
            loc[i] = (uint8_t)wr_rnd();
        if (kvm_cold_backing_materialize(c, loc, n, length, checksum) != 0)
            abort();
    }
}

void wr_route(kvm_route_t *r, int shape)
{
    kvm_route_init(r);
    wr_ident(&r->ident);
    r->version = (kvm_route_version_t){1 + wr_rnd() % 100, 1 + wr_u64_any() % (UINT64_MAX - 1)};
    if (wr_rnd() % 3)
        r->predecessor_version =
            (kvm_route_version_t){r->version.fencing_token, r->version.primary_sequence - 1};
    r->content_op = wr_op();
    if (wr_rnd() % 2) {
        r->predecessor_op = wr_op();
        if (kvm_op_id_equal(&r->predecessor_op, &r->content_op))
            memset(&r->predecessor_op, 0, sizeof(r->predecessor_op));
    }
    if (shape >= 4) {
        r->tomb = shape == 4 ? KVM_TOMB_PENDING : KVM_TOMB_FINALIZED;
        r->retain_until_ms = shape == 4 && wr_rnd() % 2 ? 0 : 1 + wr_rnd() % (UINT64_C(1) << 50);
        return;
    }
    r->length = wr_rnd() % 5 == 0 ? 0 : wr_rnd() % (UINT64_C(1) << 40);
    r->checksum = wr_rnd() % 7 == 0 ? 0 : wr_rnd();
    uint32_t n = shape == 3 ? 0 : 1 + (uint32_t)(wr_rnd() % KVM_MAX_REPLICAS);
    for (uint32_t i = 0; i < n; i++) {
        kvm_hot_replica_t h = {wr_id(), wr_rnd() % 3 ? wr_u64_any() : 0,
                               wr_rnd() % 3 ? wr_rnd() % (UINT64_C(1) << 60) : 0, r->length,
                               r->checksum};
        if (kvm_route_add_replica(r, &h) != 0)
            break; /* a rare repeated slot: fewer replicas */
    }
    if (shape == 1)
        wr_cold(&r->cold, KVM_COLD_PENDING_OFFLOAD, &r->content_op, r->length, r->checksum);
    else if (shape >= 2)
        wr_cold(&r->cold, KVM_COLD_MATERIALIZED, &r->content_op, r->length, r->checksum);
}
