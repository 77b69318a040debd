/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handshake.c — compatibility descriptors, handshake messages and HMAC proofs (see
 * handshake.h). Every decoder treats its input as hostile: protobuf-c unpacks with bounded
 * input, then every field is range-checked before it is copied into fixed-size structs.
 */
#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "rpc.pb-c.h"

const char *hs_protocol_name(int proto)
{
    switch (proto) {
#define HS_X(n, s)                                                                                 \
    case n:                                                                                        \
        return s;
        HS_PROTOCOL_LIST(HS_X)
#undef HS_X
    }
    return "unknown";
}

const char *hs_reason_name(int reason)
{
    switch (reason) {
#define HS_X(n, v, s)                                                                              \
    case n:                                                                                        \
        return s;
        HS_REASON_LIST(HS_X)
#undef HS_X
    }
    return "unknown";
}

static int id_valid(const char *s, size_t n)
{
    if (n == 0 || n > HS_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= 0x20 || s[i] >= 0x7f)
            return 0;
    return 1;
}

int hs_descriptor_validate(const struct hs_descriptor *d)
{
    if (!id_valid(d->deployment_id, strnlen(d->deployment_id, HS_ID_MAX + 1)))
        return kvm_errf(KVMESH_EINVAL, "deployment id must be 1..%d printable ASCII bytes",
                        HS_ID_MAX);
    if (!id_valid(d->runtime_id, strnlen(d->runtime_id, HS_ID_MAX + 1)))
        return kvm_errf(KVMESH_EINVAL, "runtime id must be 1..%d printable ASCII bytes", HS_ID_MAX);
    for (int i = 0; i < HS_PROTO_COUNT; i++)
        if (d->proto[i].min == 0 || d->proto[i].min > d->proto[i].max)
            return kvm_errf(KVMESH_EINVAL,
                            "%s protocol range [%u,%u] invalid; need 1 <= min <= max",
                            hs_protocol_name(i), d->proto[i].min, d->proto[i].max);
    return 0;
}

int hs_descriptor_encode(const struct hs_descriptor *d, uint8_t **out, size_t *out_len)
{
    int rc = hs_descriptor_validate(d);
    if (rc)
        return rc;
    Kvmesh__Rpc__CompatDescriptor m = KVMESH__RPC__COMPAT_DESCRIPTOR__INIT;
    Kvmesh__Rpc__VersionRange r[HS_PROTO_COUNT];
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        kvmesh__rpc__version_range__init(&r[i]);
        r[i].min = d->proto[i].min;
        r[i].max = d->proto[i].max;
    }
    m.deployment_id = (char *)d->deployment_id;
    m.runtime_id = (char *)d->runtime_id;
    m.runtime_epoch = d->runtime_epoch;
    m.route = &r[HS_PROTO_ROUTE];
    m.quota = &r[HS_PROTO_QUOTA];
    m.cold_backing = &r[HS_PROTO_COLD_BACKING];
    m.remote_restore = &r[HS_PROTO_REMOTE_RESTORE];
    m.staging_ack = &r[HS_PROTO_STAGING_ACK];
    m.cold_device_accounting = &r[HS_PROTO_COLD_DEVICE_ACCOUNTING];
    size_t n = kvmesh__rpc__compat_descriptor__get_packed_size(&m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return KVMESH_ENOMEM;
    kvmesh__rpc__compat_descriptor__pack(&m, buf);
    *out = buf;
    *out_len = n;
    return 0;
}

static int copy_range(const Kvmesh__Rpc__VersionRange *r, struct hs_range *out)
{
    if (!r || r->min == 0 || r->min > r->max)
        return -1;
    out->min = r->min;
    out->max = r->max;
    return 0;
}

int hs_descriptor_decode(const uint8_t *buf, size_t len, struct hs_descriptor *out)
{
    memset(out, 0, sizeof(*out));
    if (len == 0 || len > HS_MAX_ENCODED)
        return kvm_errf(KVMESH_EPROTO, "descriptor of %zu bytes; expected 1..%d", len,
                        HS_MAX_ENCODED);
    Kvmesh__Rpc__CompatDescriptor *m = kvmesh__rpc__compat_descriptor__unpack(NULL, len, buf);
    if (!m)
        return kvm_errf(KVMESH_EPROTO, "descriptor is not a valid CompatDescriptor message");
    int rc = KVMESH_EPROTO;
    size_t dl = strlen(m->deployment_id), rl = strlen(m->runtime_id);
    if (!id_valid(m->deployment_id, dl) || !id_valid(m->runtime_id, rl))
        goto out;
    memcpy(out->deployment_id, m->deployment_id, dl + 1);
    memcpy(out->runtime_id, m->runtime_id, rl + 1);
    out->runtime_epoch = m->runtime_epoch;
    if (copy_range(m->route, &out->proto[HS_PROTO_ROUTE]) ||
        copy_range(m->quota, &out->proto[HS_PROTO_QUOTA]) ||
        copy_range(m->cold_backing, &out->proto[HS_PROTO_COLD_BACKING]) ||
        copy_range(m->remote_restore, &out->proto[HS_PROTO_REMOTE_RESTORE]) ||
        copy_range(m->staging_ack, &out->proto[HS_PROTO_STAGING_ACK]) ||
        copy_range(m->cold_device_accounting, &out->proto[HS_PROTO_COLD_DEVICE_ACCOUNTING]))
        goto out;
    rc = 0;
out:
    kvmesh__rpc__compat_descriptor__free_unpacked(m, NULL);
    if (rc)
        return kvm_errf(rc, "descriptor has an invalid id or protocol range");
    return 0;
}

enum hs_reason hs_check_compat(const struct hs_descriptor *local,
                               const struct hs_descriptor *remote, const char *expect_runtime_id,
                               struct hs_negotiated *neg, char *msg, size_t msg_len)
{
    if (msg_len)
        msg[0] = 0;
    if (strcmp(local->deployment_id, remote->deployment_id) != 0) {
        snprintf(msg, msg_len, "deployment id '%s' differs from local '%s'", remote->deployment_id,
                 local->deployment_id);
        return HS_DEPLOYMENT_MISMATCH;
    }
    if (strcmp(local->runtime_id, remote->runtime_id) == 0) {
        snprintf(msg, msg_len, "peer has this runtime's own id '%s'", remote->runtime_id);
        return HS_SELF_CONNECT;
    }
    if (expect_runtime_id && expect_runtime_id[0] &&
        strcmp(expect_runtime_id, remote->runtime_id) != 0) {
        snprintf(msg, msg_len, "expected runtime '%s' but found '%s'", expect_runtime_id,
                 remote->runtime_id);
        return HS_RUNTIME_MISMATCH;
    }
    for (int i = 0; i < HS_PROTO_COUNT; i++) {
        uint32_t lo = KVM_MAX(local->proto[i].min, remote->proto[i].min);
        uint32_t hi = KVM_MIN(local->proto[i].max, remote->proto[i].max);
        if (lo > hi) {
            snprintf(msg, msg_len, "%s protocol: local speaks [%u,%u], peer speaks [%u,%u]",
                     hs_protocol_name(i), local->proto[i].min, local->proto[i].max,
                     remote->proto[i].min, remote->proto[i].max);
            return HS_PROTOCOL_MISMATCH;
        }
        if (neg)
            neg->version[i] = hi;
    }
    return HS_OK;
}

int hs_mac(const uint8_t *secret, size_t secret_len, char role, const uint8_t nonce_c[HS_NONCE_LEN],
           const uint8_t nonce_s[HS_NONCE_LEN], const uint8_t *desc_c, size_t desc_c_len,
           const uint8_t *desc_s, size_t desc_s_len, uint8_t out[HS_MAC_LEN])
{
    static const char label[] = "kvmesh-rpc-auth-v1";
    KVM_ASSERT(role == 'S' || role == 'C');
    if (!secret || secret_len < HS_SECRET_MIN || secret_len > HS_SECRET_MAX)
        return kvm_errf(KVMESH_EINVAL, "secret must be %d..%d bytes", HS_SECRET_MIN, HS_SECRET_MAX);
    if (desc_c_len > HS_MAX_ENCODED || desc_s_len > HS_MAX_ENCODED)
        return kvm_errf(KVMESH_EINVAL, "descriptor too large for a proof");
    /* The transcript is bounded (< 9 KiB), so it is built in one buffer for one-shot HMAC. */
    size_t cap = sizeof(label) + 1 + 2 * HS_NONCE_LEN + 8 + desc_c_len + desc_s_len;
    uint8_t *t = malloc(cap);
    if (!t)
        return KVMESH_ENOMEM;
    /* label | role | client nonce | server nonce | u32be len, client desc | u32be len, server desc
     */
    kvm_wr_t w;
    kvm_wr_fixed(&w, t, cap);
    kvm_wr_bytes(&w, label, sizeof(label) - 1);
    kvm_wr_u8(&w, (uint8_t)role);
    kvm_wr_bytes(&w, nonce_c, HS_NONCE_LEN);
    kvm_wr_bytes(&w, nonce_s, HS_NONCE_LEN);
    kvm_wr_u32be(&w, (uint32_t)desc_c_len);
    kvm_wr_bytes(&w, desc_c, desc_c_len);
    kvm_wr_u32be(&w, (uint32_t)desc_s_len);
    kvm_wr_bytes(&w, desc_s, desc_s_len);
    size_t n = 0;
    int rc = kvm_wr_finish(&w, &n);
    KVM_ASSERT(rc == 0);
    unsigned int olen = 0;
    uint8_t *r = HMAC(EVP_sha256(), secret, (int)secret_len, t, n, out, &olen);
    free(t);
    if (!r || olen != HS_MAC_LEN)
        return kvm_errf(KVMESH_EINTERNAL, "HMAC-SHA256 failed");
    return 0;
}

int hs_mac_equal(const uint8_t a[HS_MAC_LEN], const uint8_t b[HS_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, HS_MAC_LEN) == 0;
}

int hs_nonce(uint8_t out[HS_NONCE_LEN])
{
    if (RAND_bytes(out, HS_NONCE_LEN) != 1)
        return kvm_errf(KVMESH_EINTERNAL, "OS random source failed");
    return 0;
}

#define HS_PACK(type, fn, m, out, out_len)                                                         \
    do {                                                                                           \
        size_t n_ = fn##__get_packed_size(m);                                                      \
        uint8_t *b_ = malloc(n_ ? n_ : 1);                                                         \
        if (!b_)                                                                                   \
            return KVMESH_ENOMEM;                                                                  \
        fn##__pack(m, b_);                                                                         \
        *(out) = b_;                                                                               \
        *(out_len) = n_;                                                                           \
    } while (0)

int hs_hello_encode(const uint8_t *desc_raw, size_t desc_raw_len, const uint8_t nonce[HS_NONCE_LEN],
                    const char *expect_runtime_id, uint8_t **out, size_t *out_len)
{
    Kvmesh__Rpc__Hello m = KVMESH__RPC__HELLO__INIT;
    m.descriptor.data = (uint8_t *)desc_raw;
    m.descriptor.len = desc_raw_len;
    m.nonce.data = (uint8_t *)nonce;
    m.nonce.len = HS_NONCE_LEN;
    m.expect_runtime_id = (char *)(expect_runtime_id ? expect_runtime_id : "");
    HS_PACK(Hello, kvmesh__rpc__hello, &m, out, out_len);
    return 0;
}

static int fill_common(const ProtobufCBinaryData *desc, const ProtobufCBinaryData *nonce,
                       struct hs_hello *out)
{
    if (nonce->len != HS_NONCE_LEN || desc->len == 0 || desc->len > HS_MAX_ENCODED)
        return KVMESH_EPROTO;
    int rc = hs_descriptor_decode(desc->data, desc->len, &out->desc);
    if (rc)
        return rc;
    memcpy(out->desc_raw, desc->data, desc->len);
    out->desc_raw_len = desc->len;
    memcpy(out->nonce, nonce->data, HS_NONCE_LEN);
    return 0;
}

int hs_hello_decode(const uint8_t *buf, size_t len, struct hs_hello *out)
{
    memset(out, 0, sizeof(*out));
    if (len > HS_MAX_ENCODED)
        return kvm_errf(KVMESH_EPROTO, "hello of %zu bytes exceeds %d", len, HS_MAX_ENCODED);
    Kvmesh__Rpc__Hello *m = kvmesh__rpc__hello__unpack(NULL, len, buf);
    if (!m)
        return kvm_errf(KVMESH_EPROTO, "hello is not a valid Hello message");
    int rc = fill_common(&m->descriptor, &m->nonce, out);
    if (!rc) {
        size_t el = strlen(m->expect_runtime_id);
        if (el > 0 && !id_valid(m->expect_runtime_id, el))
            rc = KVMESH_EPROTO;
        else
            memcpy(out->expect_runtime_id, m->expect_runtime_id, el + 1);
    }
    kvmesh__rpc__hello__free_unpacked(m, NULL);
    return rc ? kvm_errf(KVMESH_EPROTO, "hello has invalid fields") : 0;
}

int hs_ack_encode(const uint8_t *desc_raw, size_t desc_raw_len, const uint8_t nonce[HS_NONCE_LEN],
                  int auth_required, const uint8_t *mac, uint8_t **out, size_t *out_len)
{
    Kvmesh__Rpc__HelloAck m = KVMESH__RPC__HELLO_ACK__INIT;
    m.descriptor.data = (uint8_t *)desc_raw;
    m.descriptor.len = desc_raw_len;
    m.nonce.data = (uint8_t *)nonce;
    m.nonce.len = HS_NONCE_LEN;
    m.auth_required = auth_required ? 1 : 0;
    if (mac) {
        m.server_mac.data = (uint8_t *)mac;
        m.server_mac.len = HS_MAC_LEN;
    }
    HS_PACK(HelloAck, kvmesh__rpc__hello_ack, &m, out, out_len);
    return 0;
}

int hs_ack_decode(const uint8_t *buf, size_t len, struct hs_hello *out)
{
    memset(out, 0, sizeof(*out));
    if (len > HS_MAX_ENCODED)
        return kvm_errf(KVMESH_EPROTO, "hello ack of %zu bytes exceeds %d", len, HS_MAX_ENCODED);
    Kvmesh__Rpc__HelloAck *m = kvmesh__rpc__hello_ack__unpack(NULL, len, buf);
    if (!m)
        return kvm_errf(KVMESH_EPROTO, "hello ack is not a valid HelloAck message");
    int rc = fill_common(&m->descriptor, &m->nonce, out);
    if (!rc) {
        out->auth_required = m->auth_required ? 1 : 0;
        if (m->server_mac.len == HS_MAC_LEN) {
            memcpy(out->mac, m->server_mac.data, HS_MAC_LEN);
            out->has_mac = 1;
        } else if (m->server_mac.len != 0) {
            rc = KVMESH_EPROTO;
        }
        if (out->auth_required && !out->has_mac)
            rc = KVMESH_EPROTO;
    }
    kvmesh__rpc__hello_ack__free_unpacked(m, NULL);
    return rc ? kvm_errf(KVMESH_EPROTO, "hello ack has invalid fields") : 0;
}

int hs_auth_encode(const uint8_t *mac, uint8_t **out, size_t *out_len)
{
    Kvmesh__Rpc__Auth m = KVMESH__RPC__AUTH__INIT;
    if (mac) {
        m.client_mac.data = (uint8_t *)mac;
        m.client_mac.len = HS_MAC_LEN;
    }
    HS_PACK(Auth, kvmesh__rpc__auth, &m, out, out_len);
    return 0;
}

int hs_auth_decode(const uint8_t *buf, size_t len, uint8_t mac[HS_MAC_LEN], int *has_mac)
{
    *has_mac = 0;
    if (len > HS_MAX_ENCODED)
        return kvm_errf(KVMESH_EPROTO, "auth of %zu bytes exceeds %d", len, HS_MAX_ENCODED);
    Kvmesh__Rpc__Auth *m = kvmesh__rpc__auth__unpack(NULL, len, buf);
    if (!m)
        return kvm_errf(KVMESH_EPROTO, "auth is not a valid Auth message");
    int rc = 0;
    if (m->client_mac.len == HS_MAC_LEN) {
        memcpy(mac, m->client_mac.data, HS_MAC_LEN);
        *has_mac = 1;
    } else if (m->client_mac.len != 0) {
        rc = kvm_errf(KVMESH_EPROTO, "auth mac of %zu bytes; expected %d", m->client_mac.len,
                      HS_MAC_LEN);
    }
    kvmesh__rpc__auth__free_unpacked(m, NULL);
    return rc;
}

int hs_verdict_encode(enum hs_reason reason, const char *message, uint8_t **out, size_t *out_len)
{
    Kvmesh__Rpc__Verdict m = KVMESH__RPC__VERDICT__INIT;
    char buf[HS_MSG_MAX + 1];
    snprintf(buf, sizeof(buf), "%s", message ? message : "");
    m.reason = (uint32_t)reason;
    m.message = buf;
    HS_PACK(Verdict, kvmesh__rpc__verdict, &m, out, out_len);
    return 0;
}

int hs_verdict_decode(const uint8_t *buf, size_t len, enum hs_reason *reason, char *msg,
                      size_t msg_len)
{
    if (len > HS_MAX_ENCODED)
        return kvm_errf(KVMESH_EPROTO, "verdict of %zu bytes exceeds %d", len, HS_MAX_ENCODED);
    Kvmesh__Rpc__Verdict *m = kvmesh__rpc__verdict__unpack(NULL, len, buf);
    if (!m)
        return kvm_errf(KVMESH_EPROTO, "verdict is not a valid Verdict message");
    int rc = 0;
    if (m->reason > HS_REASON_MAX) {
        rc = kvm_errf(KVMESH_EPROTO, "verdict reason %u unknown", m->reason);
    } else {
        *reason = (enum hs_reason)m->reason;
        if (msg_len) {
            /* Keep printable ASCII only: the text ends up in logs and error messages. */
            size_t j = 0;
            for (size_t i = 0; m->message[i] && j + 1 < msg_len && i < HS_MSG_MAX; i++)
                msg[j++] = (m->message[i] >= 0x20 && m->message[i] < 0x7f) ? m->message[i] : '?';
            msg[j] = 0;
        }
    }
    kvmesh__rpc__verdict__free_unpacked(m, NULL);
    return rc;
}
