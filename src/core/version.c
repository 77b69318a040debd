/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.c — 128-bit ids, runtime incarnations, route versions and operation ids (version.h).
 * Pure functions over plain values; no allocation, no shared state.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "core/hex.h"
#include "core/util.h"
#include "core/version.h"

bool kvm_id128_is_nil(const kvm_id128_t *a)
{
    for (size_t i = 0; i < KVM_ID128_LEN; i++)
        if (a->b[i])
            return false;
    return true;
}

bool kvm_id128_equal(const kvm_id128_t *a, const kvm_id128_t *b)
{
    return memcmp(a->b, b->b, KVM_ID128_LEN) == 0;
}

int kvm_id128_cmp(const kvm_id128_t *a, const kvm_id128_t *b)
{
    return memcmp(a->b, b->b, KVM_ID128_LEN);
}

uint64_t kvm_id128_hash(const kvm_id128_t *a)
{
    return XXH3_64bits(a->b, KVM_ID128_LEN);
}

char *kvm_id128_fmt(const kvm_id128_t *a, char *buf)
{
    return kvm_hex_encode(a->b, KVM_ID128_LEN, buf);
}

int kvm_id128_parse(const char *s, kvm_id128_t *out)
{
    kvm_id128_t id;
    size_t n = s ? strlen(s) : 0;
    bool dashed = n == 36;
    if (n != KVM_ID128_HEX_LEN && !dashed)
        return kvm_errf(KVMESH_EINVAL,
                        "id has %zu characters; expected 32 hex digits or a "
                        "36-character UUID",
                        n);
    size_t j = 0;
    for (size_t i = 0; i < KVM_ID128_LEN; i++) {
        if (dashed && (j == 8 || j == 13 || j == 18 || j == 23)) {
            if (s[j] != '-')
                return kvm_errf(KVMESH_EINVAL, "id: expected '-' at position %zu", j);
            j++;
        }
        int v = kvm_hex_byte(s + j, KVM_HEX_ANY);
        if (v < 0)
            return kvm_errf(KVMESH_EINVAL, "id: non-hex character at position %zu",
                            kvm_hexval(s[j], KVM_HEX_ANY) < 0 ? j : j + 1);
        id.b[i] = (uint8_t)v;
        j += 2;
    }
    *out = id;
    return 0;
}

kvm_id128_t kvm_id128_from_u64(uint64_t hi, uint64_t lo)
{
    kvm_id128_t id;
    for (int i = 0; i < 8; i++) {
        id.b[i] = (uint8_t)(hi >> (56 - 8 * i));
        id.b[8 + i] = (uint8_t)(lo >> (56 - 8 * i));
    }
    return id;
}

bool kvm_runtime_equal(const kvm_runtime_t *a, const kvm_runtime_t *b)
{
    return kvm_id128_equal(&a->id, &b->id) && a->epoch == b->epoch;
}

bool kvm_runtime_is_stale(const kvm_runtime_t *a, const kvm_runtime_t *current)
{
    return kvm_id128_equal(&a->id, &current->id) && a->epoch < current->epoch;
}

int kvm_route_version_cmp(const kvm_route_version_t *a, const kvm_route_version_t *b)
{
    if (a->fencing_token != b->fencing_token)
        return a->fencing_token < b->fencing_token ? -1 : 1;
    if (a->primary_sequence != b->primary_sequence)
        return a->primary_sequence < b->primary_sequence ? -1 : 1;
    return 0;
}

bool kvm_route_version_equal(const kvm_route_version_t *a, const kvm_route_version_t *b)
{
    return a->fencing_token == b->fencing_token && a->primary_sequence == b->primary_sequence;
}

bool kvm_route_version_is_none(const kvm_route_version_t *a)
{
    return a->fencing_token == 0 && a->primary_sequence == 0;
}

int kvm_route_version_next(const kvm_route_version_t *last, uint64_t token,
                           kvm_route_version_t *out)
{
    KVM_ASSERT(token >= last->fencing_token);
    KVM_ASSERT(token > 0);
    if (token > last->fencing_token) {
        *out = (kvm_route_version_t){token, 1};
        return 0;
    }
    if (last->primary_sequence == UINT64_MAX)
        return kvm_errf(KVMESH_ERANGE,
                        "primary sequence exhausted under fencing token %" PRIu64
                        "; the shard needs a new fencing token",
                        token);
    *out = (kvm_route_version_t){token, last->primary_sequence + 1};
    return 0;
}

bool kvm_op_id_is_nil(const kvm_op_id_t *a)
{
    return kvm_id128_is_nil(&a->writer) && a->epoch == 0 && a->seq == 0;
}

bool kvm_op_id_equal(const kvm_op_id_t *a, const kvm_op_id_t *b)
{
    return kvm_id128_equal(&a->writer, &b->writer) && a->epoch == b->epoch && a->seq == b->seq;
}

int kvm_op_id_cmp(const kvm_op_id_t *a, const kvm_op_id_t *b)
{
    int c = kvm_id128_cmp(&a->writer, &b->writer);
    if (c)
        return c < 0 ? -1 : 1;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return 0;
}

uint64_t kvm_op_id_hash(const kvm_op_id_t *a)
{
    uint8_t buf[KVM_ID128_LEN + 16];
    memcpy(buf, a->writer.b, KVM_ID128_LEN);
    for (int i = 0; i < 8; i++) {
        buf[KVM_ID128_LEN + i] = (uint8_t)(a->epoch >> (8 * i));
        buf[KVM_ID128_LEN + 8 + i] = (uint8_t)(a->seq >> (8 * i));
    }
    return XXH3_64bits(buf, sizeof(buf));
}

bool kvm_op_id_is_valid(const kvm_op_id_t *a)
{
    return !kvm_id128_is_nil(&a->writer) && a->epoch >= 1 && a->seq >= 1;
}

char *kvm_op_id_fmt(const kvm_op_id_t *a, char *buf)
{
    char hex[KVM_ID128_HEX_LEN + 1];
    snprintf(buf, KVM_OP_ID_FMT_LEN, "%s:%" PRIu64 ":%" PRIu64, kvm_id128_fmt(&a->writer, hex),
             a->epoch, a->seq);
    return buf;
}
