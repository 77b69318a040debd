/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.h — the store's peer messages on the RPC control plane (rpc.h), their type numbers and
 * their body codecs. Bodies are little-endian fixed fields, versioned by a leading byte; every
 * decoder checks lengths and bounds and returns KVMESH_EPROTO on malformed input (fuzzed by
 * tests/fuzz/fuzz_store_proto.c).
 *
 *   STORE_RPC_RESERVE  request   ver | target epoch u64 | length u64 | ttl_ms u32 | ident
 *                      response  seg u64 | offset u64 | write token u64
 *   STORE_RPC_RESERVE_INLINE (a small single put's reservation with its payload: put_inline.c)
 *                      request   ver | target epoch u64 | length u64 | ttl_ms u32 | ident |
 *                                checksum u64 | payload (exactly length bytes, <=
 *                                STORE_INLINE_WRITE_MAX); response as STORE_RPC_RESERVE's, sent
 *                                only once the bytes are in the slot and match the checksum. An
 *                                older peer answers KVMESH_ENOTSUP (no handler): the requester
 *                                falls back to STORE_RPC_RESERVE + a transport WRITE.
 *   STORE_RPC_PUT_PRIMARY (a small single put to an owner that is its key's shard primary: the
 *                      reservation, the bytes and the route CAS in one exchange: put_primary.c)
 *                      request   ver | target epoch u64 | length u64 | ttl_ms u32 | ident |
 *                                checksum u64 | budget_ms u32 | payload (exactly length bytes,
 *                                <= STORE_INLINE_WRITE_MAX)
 *                      response  ver | outcome u8 | status i32 | seg u64 | offset u64 |
 *                                token u64 | route lp16 (wire route; PUBLISHED only) |
 *                                message lp16 (<= STORE_PRIM_MSG_MAX bytes)
 *                                outcome: STORE_PRIM_PUBLISHED (status 0, the published
 *                                route), _DECLINED (nothing reserved: not the active primary,
 *                                or a put that needs the writer's flow: the requester falls
 *                                back), _NOT_RESERVED (the reservation failed with status,
 *                                nothing held), _FAILED (reserved, the publication failed with
 *                                status). An older peer answers KVMESH_ENOTSUP (no handler).
 *   STORE_RPC_PUT_PRIMARY_RAW (a single put above the requester's inline_write_max to an owner
 *                      that is its key's shard primary: put_primary.c)
 *                      request   as STORE_RPC_PUT_PRIMARY's without the trailing bytes: the value
 *                                is the frame's raw payload (rpc.h rpc_msg.iov), exactly length
 *                                bytes, 1..STORE_PUT_PRIMARY_RAW_MAX
 *                      response  as STORE_RPC_PUT_PRIMARY's. An older peer answers
 *                                KVMESH_ENOTSUP (no handler).
 *   STORE_RPC_PUT_PRIMARY_BATCH (the small items of a batch put whose owner is their key's
 *                      shard primary, one message per owner: put_primary.c)
 *                      request   ver | target epoch u64 | ttl_ms u32 | budget_ms u32 | n u16 |
 *                                n * (length u32 | ident lp16 | value (length bytes) |
 *                                checksum u64)      (1 <= n <= STORE_PUT_PRIMARY_BATCH_MAX; each
 *                                length 1..STORE_PUT_PRIMARY_BATCH_ITEM_MAX, their sum <=
 *                                STORE_PUT_PRIMARY_BATCH_BYTES)
 *                      response  ver | n u16 | n * (outcome u8 | status i32 | seg u64 |
 *                                offset u64 | token u64 | route lp16 | message lp16): each item
 *                                as a STORE_RPC_PUT_PRIMARY answer; one item's outcome never
 *                                depends on another's. An older peer answers KVMESH_ENOTSUP
 *                                (no handler).
 *   STORE_RPC_RESERVE_BATCH
 *                      request   ver | target epoch u64 | ttl_ms u32 | n u16 |
 *                                n * (length u64 | ident)            (1 <= n <=
 * STORE_RESERVE_BATCH_MAX) response  ver | n u16 | n * (status i32 | seg u64 | offset u64 | token
 * u64) (per item: status 0 or a KVMESH_E* code; one item's failure never fails another)
 *   STORE_RPC_COMMIT   notify    version 2 (STORE_SLOT_MSG_VERSION): 2 | target epoch u64 |
 *   STORE_RPC_RELEASE            seg u64 | offset u64 | has u8 | token u64 | ident hash u64 |
 *                                length u64 (has: bit 0 the token is the reservation's write
 *                                grant, bit 1 ident hash + length name the object; at least one;
 *                                slot_core.h slot_note_t); version 1, an older peer's body:
 *                                1 | target epoch u64 | seg u64 | offset u64 (no identity)
 *   STORE_RPC_HIT      notify    ver | n u16 | n * (seg u64 | offset u64)   (n <= STORE_HIT_MAX)
 *   STORE_RPC_COLD_READ request  ver | route version hash u64 | locator fingerprint u64 |
 *                      length u64 | checksum u64 | namespace hash u64 | cold owner (16) | ident;
 *                      reply body: ver | seg u64 | offset u64 | length u64 | read grant u64 |
 *                      transfer token u64 (the verified bytes staged in the owner's staging
 *                      pool; the reader reads them through the transport; cold_read.c)
 *   STORE_RPC_COLD_ACK notify    ver | transfer token u64 (the reader is done with the slot)
 *   STORE_RPC_COLD_READ_BATCH (batch restore, one per owner and device group; its own version
 *                      byte STORE_COLD_BATCH_VERSION)
 *                      request   ver | cold owner (16) | n u16 | n * (route version hash u64 |
 *                                locator fingerprint u64 | length u64 | checksum u64 |
 *                                namespace hash u64 | ident lp16)    (1 <= n <=
 *                                STORE_COLD_BATCH_MAX)
 *                      response  ver | n u16 | n * (status i32 | seg u64 | offset u64 |
 *                                length u64 | read grant u64 | transfer token u64) (per item:
 *                                status 0 = staged like a COLD_READ reply, or a KVMESH_E* code;
 *                                KVMESH_EAGAIN = the staging pool is full: ask again)
 *   STORE_RPC_SLOT_BATCH (the COMMITs and RELEASEs of one loop turn to one owner: slot_batch.c;
 *                      its own version byte STORE_SLOT_BATCH_VERSION)
 *                      request   ver | target epoch u64 | n u16 | n * (kind u8 | has u8 |
 *                                seg u64 | offset u64 | token u64 | ident hash u64 |
 *                                length u64)         (1 <= n <= STORE_SLOT_BATCH_MAX; kind 1 =
 *                                COMMIT, 2 = RELEASE; has as in COMMIT version 2, 0 = no
 *                                identity, then token, hash and length are 0)
 *                      response  empty, or ver | flags u8 (status 0: every item applied as
 *                                its own COMMIT / RELEASE notification would be, in order).
 *                                flags bit 0 (STORE_SLOT_BATCH_TAKES_NOTE): the owner also takes
 *                                the same body as a notification (frame kind notify, no
 *                                answer): the requester sends it so to this owner (id and
 *                                epoch) from then on. An owner that predates the flag answers
 *                                empty (it drops a notification of this type). An owner that
 *                                predates the message answers KVMESH_ENOTSUP (no handler): the
 *                                requester sends the items as single notifications.
 *   STORE_RPC_ENV      notify    env message type u32 | bytes (route protocol, env_send)
 *                                (the only body without a version byte); the frame's raw
 *                                payload, when there is one, is the message's attachment
 *                                (env_send_att: an inline read answer's bytes, get_inline.c)
 *
 * Payload bytes travel in these messages only in STORE_RPC_RESERVE_INLINE and
 * STORE_RPC_PUT_PRIMARY (at most STORE_INLINE_WRITE_MAX bytes), as the raw payload of a
 * STORE_RPC_PUT_PRIMARY_RAW frame (at most STORE_PUT_PRIMARY_RAW_MAX) and as the raw payload of a
 * STORE_RPC_ENV frame (an inline read answer, at most ROUTE_MSG_MAX_INLINE_ATT); otherwise the
 * transports move them.
 */
#ifndef KVMESH_STORE_PROTO_H
#define KVMESH_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "core/ident.h"
#include "core/version.h"

#define STORE_PROTO_VERSION       1
#define STORE_SLOT_MSG_VERSION    2 /* COMMIT / RELEASE with the slot's identity (version 1 read) */
#define STORE_SLOT_MSG_MAX        50
#define STORE_RPC_ENV             1 /* = RPC_TYPE_ENV_MESSAGE */
#define STORE_RPC_RESERVE         0x201
#define STORE_RPC_COMMIT          0x202
#define STORE_RPC_RELEASE         0x203
#define STORE_RPC_HIT             0x204
#define STORE_RPC_RESERVE_BATCH   0x205
#define STORE_RPC_COLD_READ       0x206 /* request: see cold_serve.c; reply: the staged slot */
#define STORE_RPC_COLD_ACK        0x207 /* notify: ver | transfer token u64 */
#define STORE_COLD_READ_VERSION   2     /* body version of COLD_READ / COLD_ACK */
#define STORE_RPC_COLD_READ_BATCH 0x208 /* request/response: see above (cold_serve.c) */
#define STORE_COLD_BATCH_VERSION  1     /* body version of COLD_READ_BATCH */
#define STORE_COLD_BATCH_MAX      64    /* items per batched cold read (a sub-batch) */
#define STORE_RPC_RESERVE_INLINE  0x209 /* request/response: see above (put_inline.c) */
#define STORE_INLINE_WRITE_MAX    (256u * 1024) /* payload bytes of one RESERVE_INLINE */
#define STORE_RPC_PUT_PRIMARY     0x20b         /* request/response: see above (put_primary.c) */
#define STORE_PRIM_PUBLISHED      0             /* PUT_PRIMARY outcomes (see above) */
#define STORE_PRIM_DECLINED       1
#define STORE_PRIM_NOT_RESERVED   2
#define STORE_PRIM_FAILED         3
#define STORE_PRIM_MSG_MAX        300   /* bytes of a PUT_PRIMARY answer's message */
#define STORE_RPC_PUT_PRIMARY_RAW 0x20c /* request/response: see above (put_primary.c) */
/* Bytes of one PUT_PRIMARY_RAW value (the requester stages it in one buffer; docs/store.md
 * "Puts at the primary" says how the bound was measured). */
#define STORE_PUT_PRIMARY_RAW_MAX (512u << 10)
/* Bytes of a put at the primary to an owner whose payload writes go through shared memory
 * (transport shm, or auto to an owner on this host): above it the shared-memory copy and the
 * requester's CAS cost less than the bytes through the control connection (docs/store.md). */
#define STORE_PUT_PRIMARY_SHM_MAX (16u << 10)
#define STORE_RESERVE_BATCH_MAX   128 /* items per batched reservation */
#define STORE_HIT_MAX             512 /* slots per hit report */
#define STORE_PROTO_MAX           (32 + KVM_IDENT_ENC_MAX_LEN + STORE_HIT_MAX * 16)

#define STORE_RPC_PUT_PRIMARY_BATCH 0x20f /* request/response: see above (put_primary.c) */
/* Bounds of one PUT_PRIMARY_BATCH: items, value bytes in all, bytes of one item's value
 * (docs/store.md "Puts at the primary" says how they were chosen) */
#define STORE_PUT_PRIMARY_BATCH_MAX      128
#define STORE_PUT_PRIMARY_BATCH_BYTES    (1u << 20)
#define STORE_PUT_PRIMARY_BATCH_ITEM_MAX (64u << 10)

#define STORE_RPC_SLOT_BATCH        0x20a /* request/response: see above (slot_batch.c) */
#define STORE_SLOT_BATCH_VERSION    1     /* body version of SLOT_BATCH */
#define STORE_SLOT_BATCH_MAX        256   /* items per batched COMMIT / RELEASE */
#define STORE_SLOT_BATCH_COMMIT     1     /* item kinds of SLOT_BATCH */
#define STORE_SLOT_BATCH_RELEASE    2
#define STORE_SLOT_BATCH_TAKES_NOTE 0x01 /* answer flag: the notification form is taken */
#define STORE_SLOT_BATCH_ANS_LEN    2    /* encoded answer: version and flags */

typedef struct store_reserve_req {
    uint64_t target_epoch;
    uint64_t length;
    uint32_t ttl_ms;
    kvm_ident_t ident; /* decode: owned (kvm_ident_free); encode: borrowed */
} store_reserve_req_t;

/* STORE_RPC_RESERVE_INLINE request: the reservation's fields, the checksum of the payload
 * (XXH3-64, KVM_HASH_SEED_CHECKSUM) and the payload (length bytes). */
typedef struct store_reserve_inline_req {
    store_reserve_req_t r; /* r.ident: decode owned (kvm_ident_free); encode borrowed */
    uint64_t checksum;
    const uint8_t *payload; /* decode: points into the body (borrowed); encode: unused */
} store_reserve_inline_req_t;

/* Bytes of a RESERVE_INLINE request before its payload. */
#define STORE_RESERVE_INLINE_HEAD_MAX (40 + KVM_IDENT_ENC_MAX_LEN)

/* STORE_RPC_PUT_PRIMARY request: an inline reservation and the time the requester waits for
 * the answer (the owner's publication ends within it). */
typedef struct store_put_primary_req {
    store_reserve_inline_req_t w; /* w.r.ident: decode owned (kvm_ident_free); encode borrowed */
    uint32_t budget_ms;
} store_put_primary_req_t;

/* Bytes of a PUT_PRIMARY request before its payload. */
#define STORE_PUT_PRIMARY_HEAD_MAX (STORE_RESERVE_INLINE_HEAD_MAX + 4)

/* STORE_RPC_PUT_PRIMARY response. */
typedef struct store_put_primary_resp {
    uint8_t outcome; /* STORE_PRIM_* */
    int32_t status;
    uint64_t seg, offset, token;
    const uint8_t *route; /* the wire route (PUBLISHED); decode: points into the body */
    uint16_t route_len;
    const char *msg; /* decode: points into the body, not terminated */
    uint16_t msg_len;
} store_put_primary_resp_t;

/* Bytes of the largest PUT_PRIMARY response. */
#define STORE_PUT_PRIMARY_RESP_MAX (48 + KVM_WIRE_MAX_RECORD_LEN + STORE_PRIM_MSG_MAX)

/* STORE_RPC_PUT_PRIMARY_BATCH request. */
typedef struct store_prim_batch_req {
    uint64_t target_epoch;
    uint32_t ttl_ms, budget_ms;
    uint16_t n;
    struct {
        uint64_t length, checksum;
        kvm_ident_t ident;      /* decode: owned (store_prim_batch_req_free); encode: borrowed */
        const uint8_t *payload; /* decode: points into the body; encode: the value */
    } it[STORE_PUT_PRIMARY_BATCH_MAX];
} store_prim_batch_req_t;

/* Bytes of a PUT_PRIMARY_BATCH request's head, and of one item's besides its value. */
#define STORE_PRIM_BATCH_HEAD_LEN  19
#define STORE_PRIM_BATCH_ITEM_OVER (14 + KVM_IDENT_ENC_MAX_LEN)

/* STORE_RPC_PUT_PRIMARY_BATCH response: each item as a store_put_primary_resp_t. */
typedef struct store_prim_batch_resp {
    uint16_t n;
    store_put_primary_resp_t r[STORE_PUT_PRIMARY_BATCH_MAX];
} store_prim_batch_resp_t;

/* Bytes of one answer item with route_len route bytes and msg_len message bytes (<=
 * STORE_PRIM_MSG_MAX), and of the answer's head. */
#define STORE_PRIM_BATCH_ANS_ITEM_LEN(route_len, msg_len) (33 + (size_t)(route_len) + (msg_len))
#define STORE_PRIM_BATCH_ANS_HEAD_LEN                     3

typedef struct store_reserve_resp {
    uint64_t seg, offset, token;
} store_reserve_resp_t;

typedef struct store_reserve_batch_req {
    uint64_t target_epoch;
    uint32_t ttl_ms;
    uint16_t n;
    uint64_t length[STORE_RESERVE_BATCH_MAX];
    kvm_ident_t ident[STORE_RESERVE_BATCH_MAX]; /* decode: owned (_free); encode: borrowed */
} store_reserve_batch_req_t;

typedef struct store_reserve_batch_resp {
    uint16_t n;
    struct {
        int32_t status;
        uint64_t seg, offset, token;
    } r[STORE_RESERVE_BATCH_MAX];
} store_reserve_batch_resp_t;

/* Bytes a batched reservation request of n items may take. */
#define STORE_RESERVE_BATCH_REQ_MAX(n) (16 + (size_t)(n) * (10 + KVM_IDENT_ENC_MAX_LEN))
#define STORE_RESERVE_BATCH_RESP_MAX   (4 + STORE_RESERVE_BATCH_MAX * 28)

/* STORE_SLOT_HAS_* = slot_note_t's SLOT_NOTE_TOKEN / SLOT_NOTE_OBJECT. */
#define STORE_SLOT_HAS_TOKEN  0x1u
#define STORE_SLOT_HAS_OBJECT 0x2u

typedef struct store_slot_msg {
    uint64_t target_epoch;
    uint64_t seg, offset;
    uint64_t token;           /* has & STORE_SLOT_HAS_TOKEN: the write grant of the reservation */
    uint64_t ident_hash, len; /* has & STORE_SLOT_HAS_OBJECT: the object (kvm_ident_t.hash) */
    uint8_t has;              /* 0: encoded as version 1 (an older peer's body) */
} store_slot_msg_t;

/* STORE_RPC_SLOT_BATCH request: the items' slot messages (target_epoch of every it[i].m is
 * the batch's; has 0 = no identity, token / ident_hash / len then 0). */
typedef struct store_slot_batch {
    uint64_t target_epoch;
    uint16_t n;
    struct {
        uint8_t kind; /* STORE_SLOT_BATCH_COMMIT or _RELEASE */
        store_slot_msg_t m;
    } it[STORE_SLOT_BATCH_MAX];
} store_slot_batch_t;

#define STORE_SLOT_BATCH_ITEM_LEN 42 /* encoded bytes per item */
#define STORE_SLOT_BATCH_LEN(n)   (11 + (size_t)(n)*STORE_SLOT_BATCH_ITEM_LEN)

typedef struct store_hit_msg {
    uint16_t n;
    struct {
        uint64_t seg, offset;
    } slots[STORE_HIT_MAX];
} store_hit_msg_t;

/* Encoders write into buf (cap bytes) and set *len; KVMESH_ETOOBIG when it does not fit. */
int store_reserve_req_encode(const store_reserve_req_t *m, uint8_t *buf, size_t cap, size_t *len);
int store_reserve_req_decode(const uint8_t *buf, size_t len, store_reserve_req_t *out);
int store_reserve_resp_encode(const store_reserve_resp_t *m, uint8_t *buf, size_t cap, size_t *len);
int store_reserve_resp_decode(const uint8_t *buf, size_t len, store_reserve_resp_t *out);
/* Encodes the request's fields up to the payload into buf (the caller appends exactly
 * m->r.length payload bytes right after *len). KVMESH_EINVAL for a length of 0 or above
 * STORE_INLINE_WRITE_MAX. */
int store_reserve_inline_head_encode(const store_reserve_inline_req_t *m, uint8_t *buf, size_t cap,
                                     size_t *len);
/* Decodes a whole request: the payload must be exactly r.length (1..STORE_INLINE_WRITE_MAX)
 * bytes; out->payload points into buf. On success out->r.ident is owned (kvm_ident_free). */
int store_reserve_inline_req_decode(const uint8_t *buf, size_t len,
                                    store_reserve_inline_req_t *out);
/* PUT_PRIMARY: the request's head (the caller appends exactly m->w.r.length payload bytes) and
 * the whole request's decoding, as the RESERVE_INLINE codecs; the response (msg_len is cut to
 * STORE_PRIM_MSG_MAX; route_len must be 0 unless PUBLISHED). */
int store_put_primary_head_encode(const store_put_primary_req_t *m, uint8_t *buf, size_t cap,
                                  size_t *len);
int store_put_primary_req_decode(const uint8_t *buf, size_t len, store_put_primary_req_t *out);
/* PUT_PRIMARY_RAW: the request's body (the head alone: m->w.r.length 1..STORE_PUT_PRIMARY_RAW_MAX,
 * the value goes as the frame's raw payload) and its decoding: the body must end after the head
 * and raw_len (the frame's raw payload bytes) equal w.r.length; out->w.payload is left NULL (the
 * caller takes the frame's payload). On success out->w.r.ident is owned (kvm_ident_free). */
int store_put_primary_raw_encode(const store_put_primary_req_t *m, uint8_t *buf, size_t cap,
                                 size_t *len);
int store_put_primary_raw_decode(const uint8_t *buf, size_t len, uint64_t raw_len,
                                 store_put_primary_req_t *out);
int store_put_primary_resp_encode(const store_put_primary_resp_t *m, uint8_t *buf, size_t cap,
                                  size_t *len);
int store_put_primary_resp_decode(const uint8_t *buf, size_t len, store_put_primary_resp_t *out);
/* PUT_PRIMARY_BATCH request, written in pieces by a requester that gathers each value into the
 * body itself: the head (epoch, ttl, budget and n; KVMESH_EINVAL for n outside
 * 1..STORE_PUT_PRIMARY_BATCH_MAX), then per item its head (length 1..
 * STORE_PUT_PRIMARY_BATCH_ITEM_MAX and identity), exactly length value bytes, and its checksum
 * (store_prim_batch_item_sum: 8 bytes). The whole request from m (it[i].payload the values):
 * store_prim_batch_req_encode, KVMESH_EINVAL also for values above STORE_PUT_PRIMARY_BATCH_BYTES
 * in all. */
int store_prim_batch_head_encode(uint64_t target_epoch, uint32_t ttl_ms, uint32_t budget_ms,
                                 uint16_t n, uint8_t *buf, size_t cap, size_t *len);
int store_prim_batch_item_head_encode(uint64_t length, const kvm_ident_t *ident, uint8_t *buf,
                                      size_t cap, size_t *len);
void store_prim_batch_item_sum(uint8_t *buf, uint64_t checksum);
int store_prim_batch_req_encode(const store_prim_batch_req_t *m, uint8_t *buf, size_t cap,
                                size_t *len);
/* Bytes the whole request of m takes. */
size_t store_prim_batch_req_len(const store_prim_batch_req_t *m);
/* Decodes a whole request (KVMESH_EPROTO: malformed, out of bounds, trailing bytes); on success
 * out owns its identities (store_prim_batch_req_free) and it[i].payload points into buf. */
int store_prim_batch_req_decode(const uint8_t *buf, size_t len, store_prim_batch_req_t *out);
void store_prim_batch_req_free(store_prim_batch_req_t *m);
/* PUT_PRIMARY_BATCH answer: each item checked as store_put_primary_resp_encode/_decode do;
 * decode points route and msg into buf. */
int store_prim_batch_resp_encode(const store_prim_batch_resp_t *m, uint8_t *buf, size_t cap,
                                 size_t *len);
int store_prim_batch_resp_decode(const uint8_t *buf, size_t len, store_prim_batch_resp_t *out);
int store_reserve_batch_req_encode(const store_reserve_batch_req_t *m, uint8_t *buf, size_t cap,
                                   size_t *len);
/* On success out owns its identities: store_reserve_batch_req_free. */
int store_reserve_batch_req_decode(const uint8_t *buf, size_t len, store_reserve_batch_req_t *out);
void store_reserve_batch_req_free(store_reserve_batch_req_t *m);
int store_reserve_batch_resp_encode(const store_reserve_batch_resp_t *m, uint8_t *buf, size_t cap,
                                    size_t *len);
int store_reserve_batch_resp_decode(const uint8_t *buf, size_t len,
                                    store_reserve_batch_resp_t *out);
/* COMMIT / RELEASE body: version 2 when m->has != 0, else version 1. Decode reads both. */
int store_slot_msg_encode(const store_slot_msg_t *m, uint8_t *buf, size_t cap, size_t *len);
int store_slot_msg_decode(const uint8_t *buf, size_t len, store_slot_msg_t *out);
/* SLOT_BATCH body: encode KVMESH_EINVAL for n outside 1..STORE_SLOT_BATCH_MAX, an unknown kind
 * or identity bit, or identity fields without their bit; decode KVMESH_EPROTO for the same. */
int store_slot_batch_encode(const store_slot_batch_t *m, uint8_t *buf, size_t cap, size_t *len);
int store_slot_batch_decode(const uint8_t *buf, size_t len, store_slot_batch_t *out);
/* SLOT_BATCH answer: its flags (STORE_SLOT_BATCH_TAKES_NOTE). Encode KVMESH_EINVAL for an
 * unknown flag; decode reads an empty answer (an older owner's) as flags 0 and refuses
 * (KVMESH_EPROTO) another version, an unknown flag or trailing bytes. */
int store_slot_batch_ans_encode(uint8_t flags, uint8_t *buf, size_t cap, size_t *len);
int store_slot_batch_ans_decode(const uint8_t *buf, size_t len, uint8_t *flags);
int store_hit_msg_encode(const store_hit_msg_t *m, uint8_t *buf, size_t cap, size_t *len);
int store_hit_msg_decode(const uint8_t *buf, size_t len, store_hit_msg_t *out);

typedef struct store_cold_batch_req {
    kvm_id128_t owner; /* the cold copies' owner runtime (the receiver) */
    uint16_t n;
    struct {
        uint64_t version_h, locator_fp, length, checksum, namespace_h;
        kvm_ident_t ident; /* decode: owned (store_cold_batch_req_free); encode: borrowed */
    } it[STORE_COLD_BATCH_MAX];
} store_cold_batch_req_t;

typedef struct store_cold_batch_resp {
    uint16_t n;
    struct {
        int32_t status; /* 0 or a negative KVMESH_E* code */
        uint64_t seg, offset, length, grant, token;
    } r[STORE_COLD_BATCH_MAX];
} store_cold_batch_resp_t;

#define STORE_COLD_BATCH_REQ_MAX(n) (21 + (size_t)(n) * (42 + KVM_IDENT_ENC_MAX_LEN))
#define STORE_COLD_BATCH_RESP_MAX   (3 + STORE_COLD_BATCH_MAX * 44)

int store_cold_batch_req_encode(const store_cold_batch_req_t *m, uint8_t *buf, size_t cap,
                                size_t *len);
/* On success out owns its identities: store_cold_batch_req_free. A body of another version
 * fails with KVMESH_EPROTO naming both versions. */
int store_cold_batch_req_decode(const uint8_t *buf, size_t len, store_cold_batch_req_t *out);
void store_cold_batch_req_free(store_cold_batch_req_t *m);
int store_cold_batch_resp_encode(const store_cold_batch_resp_t *m, uint8_t *buf, size_t cap,
                                 size_t *len);
int store_cold_batch_resp_decode(const uint8_t *buf, size_t len, store_cold_batch_resp_t *out);

/* STORE_RPC_ENV body. encode returns a heap buffer (free()) of *out_len bytes, NULL when out
 * of memory; decode points *data into buf (borrowed) and fails with KVMESH_EPROTO for a body
 * shorter than its type. */
uint8_t *store_env_msg_encode(uint32_t env_type, const void *data, size_t len, size_t *out_len);
/* The same body into the caller's buffer (a small message's, on the stack: no allocation per
 * message): its length, or 0 when it does not fit in cap bytes (then use the heap form). */
size_t store_env_msg_put(uint8_t *buf, size_t cap, uint32_t env_type, const void *data, size_t len);
/* The largest body the senders keep on the stack (route messages of single ops fit). */
#define STORE_ENV_MSG_STACK 1024
int store_env_msg_decode(const uint8_t *buf, size_t len, uint32_t *env_type, const uint8_t **data,
                         size_t *data_len);

#endif
