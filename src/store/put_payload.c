// SPDX-License-Identifier: Apache-2.0
/*
 * put_payload.c — codec of a put claim's payload (put_payload.h). Pure functions.
 */
#include "store/put_payload.h"

#include <inttypes.h>
#include <string.h>

#include "core/util.h"

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

int kvm_put_payload_encode(const kvm_put_payload_t *p, uint8_t *buf, size_t cap, size_t *len)
{
    size_t need = KVM_PUT_PAYLOAD_V1_LEN;
    if (p->has_locators) {
        if (p->n == 0 || p->n > KVM_MAX_REPLICAS)
            return kvm_errf(KVMESH_EINVAL, "put payload with %u replicas", p->n);
        need += 2 + KVM_ID128_LEN + (size_t)p->n * KVM_PUT_PAYLOAD_LOC_LEN;
    }
    if (need > cap)
        return kvm_errf(KVMESH_ETOOBIG, "put payload of %zu bytes does not fit %zu", need, cap);
    put_u64(buf, p->length);
    put_u64(buf + 8, p->checksum);
    if (p->has_locators) {
        uint8_t *w = buf + KVM_PUT_PAYLOAD_V1_LEN;
        *w++ = KVM_PUT_PAYLOAD_FORMAT;
        memcpy(w, p->writer.b, KVM_ID128_LEN);
        w += KVM_ID128_LEN;
        *w++ = (uint8_t)p->n;
        for (uint32_t i = 0; i < p->n; i++, w += KVM_PUT_PAYLOAD_LOC_LEN) {
            memcpy(w, p->rep[i].owner.b, KVM_ID128_LEN);
            put_u64(w + 16, p->rep[i].segment);
            put_u64(w + 24, p->rep[i].offset);
            put_u64(w + 32, p->rep[i].length);
        }
    }
    *len = need;
    return 0;
}

int kvm_put_payload_decode(const uint8_t *buf, size_t len, kvm_put_payload_t *out)
{
    memset(out, 0, sizeof(*out));
    if (len < KVM_PUT_PAYLOAD_V1_LEN)
        return kvm_errf(KVMESH_EPROTO, "put payload of %zu bytes", len);
    out->length = get_u64(buf);
    out->checksum = get_u64(buf + 8);
    if (len == KVM_PUT_PAYLOAD_V1_LEN)
        return 0;
    const uint8_t *r = buf + KVM_PUT_PAYLOAD_V1_LEN;
    size_t left = len - KVM_PUT_PAYLOAD_V1_LEN;
    if (left < 2 + KVM_ID128_LEN || r[0] != KVM_PUT_PAYLOAD_FORMAT)
        return kvm_errf(KVMESH_EPROTO, "put payload of unknown format");
    memcpy(out->writer.b, r + 1, KVM_ID128_LEN);
    uint32_t n = r[1 + KVM_ID128_LEN];
    r += 2 + KVM_ID128_LEN;
    left -= 2 + KVM_ID128_LEN;
    if (n == 0 || n > KVM_MAX_REPLICAS || left != (size_t)n * KVM_PUT_PAYLOAD_LOC_LEN)
        return kvm_errf(KVMESH_EPROTO, "put payload with %u replicas in %zu bytes", n, left);
    for (uint32_t i = 0; i < n; i++, r += KVM_PUT_PAYLOAD_LOC_LEN) {
        memcpy(out->rep[i].owner.b, r, KVM_ID128_LEN);
        out->rep[i].segment = get_u64(r + 16);
        out->rep[i].offset = get_u64(r + 24);
        out->rep[i].length = get_u64(r + 32);
        out->rep[i].checksum = out->checksum;
        if (out->rep[i].length != out->length)
            return kvm_errf(KVMESH_EPROTO,
                            "put payload replica %u of %" PRIu64 " bytes, object %" PRIu64, i,
                            out->rep[i].length, out->length);
    }
    out->n = n;
    out->has_locators = true;
    return 0;
}

bool kvm_put_payload_names(const kvm_put_payload_t *p, const kvm_runtime_id_t *owner,
                           uint64_t segment, uint64_t offset)
{
    for (uint32_t i = 0; p->has_locators && i < p->n; i++)
        if (kvm_id128_equal(&p->rep[i].owner, owner) && p->rep[i].segment == segment &&
            p->rep[i].offset == offset)
            return true;
    return false;
}
