/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handshake.h — the peer handshake codec, compatibility rules and HMAC proofs. Pure: no I/O, no
 * clock; the RPC layer (rpc.c) drives the exchange:
 *
 *     client                                   server
 *       HELLO {desc_c, nonce_c, expect_id} --->   check compat (+ expected runtime id)
 *                                          <---   HELLO_ACK {desc_s, nonce_s, auth, mac_s}
 *       check compat, verify mac_s                 or VERDICT{refuse} and close
 *       AUTH {mac_c}                       --->   verify mac_c
 *                                          <---   VERDICT {0 = accepted | refuse reason}
 *
 * mac_X = HMAC-SHA256(secret, "kvmesh-rpc-auth-v1" | role byte ('S' or 'C') | nonce_c | nonce_s
 *                     | u32 len | desc_c bytes | u32 len | desc_s bytes)
 * over the exact packed descriptor bytes that travelled, so neither side can be replayed or
 * tampered with without the secret. Both sides must have the same secret or none.
 *
 * Ownership: decoders fill caller structs; byte strings returned by the encoders are malloc'd
 * and owned by the caller (free()).
 */
#ifndef KVMESH_NET_HANDSHAKE_H
#define KVMESH_NET_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#define HS_ID_MAX      64 /* deployment and runtime id: 1..64 printable ASCII bytes */
#define HS_NONCE_LEN   32
#define HS_MAC_LEN     32
#define HS_MSG_MAX     512  /* verdict message bound */
#define HS_MAX_ENCODED 4096 /* bound of any encoded handshake message */
#define HS_SECRET_MIN  16
#define HS_SECRET_MAX  256

/* The protocols a compatibility descriptor advertises. */
#define HS_PROTOCOL_LIST(X)                                                                        \
    X(HS_PROTO_ROUTE, "route")                                                                     \
    X(HS_PROTO_QUOTA, "quota")                                                                     \
    X(HS_PROTO_COLD_BACKING, "cold_backing")                                                       \
    X(HS_PROTO_REMOTE_RESTORE, "remote_restore")                                                   \
    X(HS_PROTO_STAGING_ACK, "staging_ack")                                                         \
    X(HS_PROTO_COLD_DEVICE_ACCOUNTING, "cold_device_accounting")

enum hs_protocol {
#define HS_X(n, s) n,
    HS_PROTOCOL_LIST(HS_X)
#undef HS_X
        HS_PROTO_COUNT
};

/* Refusal reasons (travel in Verdict.reason; never renumber). */
#define HS_REASON_LIST(X)                                                                          \
    X(HS_OK, 0, "accepted")                                                                        \
    X(HS_DEPLOYMENT_MISMATCH, 1, "deployment_mismatch")                                            \
    X(HS_PROTOCOL_MISMATCH, 2, "protocol_mismatch")                                                \
    X(HS_RUNTIME_MISMATCH, 3, "runtime_mismatch")                                                  \
    X(HS_SELF_CONNECT, 4, "self_connect")                                                          \
    X(HS_AUTH_REQUIRED, 5, "auth_required")                                                        \
    X(HS_AUTH_FAILED, 6, "auth_failed")                                                            \
    X(HS_BAD_MESSAGE, 7, "bad_message")                                                            \
    X(HS_AUTH_UNEXPECTED, 8, "auth_unexpected")                                                    \
    X(HS_STALE_EPOCH, 9, "stale_epoch")

enum hs_reason {
#define HS_X(n, v, s) n = v,
    HS_REASON_LIST(HS_X)
#undef HS_X
};
#define HS_REASON_MAX 9

struct hs_range {
    uint32_t min, max; /* 1 <= min <= max */
};

struct hs_descriptor {
    char deployment_id[HS_ID_MAX + 1];
    char runtime_id[HS_ID_MAX + 1];
    uint64_t runtime_epoch;
    struct hs_range proto[HS_PROTO_COUNT];
};

/* The negotiated result: the highest common version of each protocol. */
struct hs_negotiated {
    uint32_t version[HS_PROTO_COUNT];
};

struct hs_hello {
    struct hs_descriptor desc;
    uint8_t desc_raw[HS_MAX_ENCODED]; /* the packed descriptor bytes as received */
    size_t desc_raw_len;
    uint8_t nonce[HS_NONCE_LEN];
    char expect_runtime_id[HS_ID_MAX + 1]; /* "" = any (Hello only) */
    int auth_required;                     /* HelloAck only */
    uint8_t mac[HS_MAC_LEN];               /* HelloAck only */
    int has_mac;
};

/* Static names. */
const char *hs_protocol_name(int proto);
const char *hs_reason_name(int reason);

/* Checks a descriptor's fields (ids, ranges). 0 or KVMESH_EINVAL with a message. */
int hs_descriptor_validate(const struct hs_descriptor *d);

/* Packs a valid descriptor; *out malloc'd (caller frees), *out_len set. */
int hs_descriptor_encode(const struct hs_descriptor *d, uint8_t **out, size_t *out_len);

/* Unpacks and validates; KVMESH_EPROTO on malformed input. */
int hs_descriptor_decode(const uint8_t *buf, size_t len, struct hs_descriptor *out);

/*
 * The compatibility rule (docs/rpc.md): same deployment id, different runtime id (or same id
 * and different epoch is still self: refused), expected runtime id honoured when non-empty, and
 * every protocol's version ranges overlap. Returns HS_OK and fills *neg (may be NULL) or a
 * refusal reason with a readable explanation in msg (msg_len bytes, always terminated).
 */
enum hs_reason hs_check_compat(const struct hs_descriptor *local,
                               const struct hs_descriptor *remote, const char *expect_runtime_id,
                               struct hs_negotiated *neg, char *msg, size_t msg_len);

/* Computes a proof (see the top of this file). role is 'S' or 'C'. */
int hs_mac(const uint8_t *secret, size_t secret_len, char role, const uint8_t nonce_c[HS_NONCE_LEN],
           const uint8_t nonce_s[HS_NONCE_LEN], const uint8_t *desc_c, size_t desc_c_len,
           const uint8_t *desc_s, size_t desc_s_len, uint8_t out[HS_MAC_LEN]);

/* Constant-time comparison of two MACs: 1 equal, 0 different. */
int hs_mac_equal(const uint8_t a[HS_MAC_LEN], const uint8_t b[HS_MAC_LEN]);

/* Fills a nonce from the OS CSPRNG. */
int hs_nonce(uint8_t out[HS_NONCE_LEN]);

/*
 * Handshake message codecs. Encoders return malloc'd bytes (caller frees). Decoders validate
 * everything (descriptor included) and return KVMESH_EPROTO on malformed input.
 */
int hs_hello_encode(const uint8_t *desc_raw, size_t desc_raw_len, const uint8_t nonce[HS_NONCE_LEN],
                    const char *expect_runtime_id, uint8_t **out, size_t *out_len);
int hs_hello_decode(const uint8_t *buf, size_t len, struct hs_hello *out);
int hs_ack_encode(const uint8_t *desc_raw, size_t desc_raw_len, const uint8_t nonce[HS_NONCE_LEN],
                  int auth_required, const uint8_t *mac /* NULL = none */, uint8_t **out,
                  size_t *out_len);
int hs_ack_decode(const uint8_t *buf, size_t len, struct hs_hello *out);
int hs_auth_encode(const uint8_t *mac /* NULL = none */, uint8_t **out, size_t *out_len);
int hs_auth_decode(const uint8_t *buf, size_t len, uint8_t mac[HS_MAC_LEN], int *has_mac);
int hs_verdict_encode(enum hs_reason reason, const char *message, uint8_t **out, size_t *out_len);
int hs_verdict_decode(const uint8_t *buf, size_t len, enum hs_reason *reason, char *msg,
                      size_t msg_len);

#endif
