/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_msg.h — the peer messages of the EmbeddedWrh route protocol and their compact binary
 * codec (docs/protocol.md has the message table and the state machines that use them).
 *
 * Layout (all integers little-endian, fixed width):
 *   u8 magic 'R' | u8 codec version (ROUTE_MSG_VERSION) | u16 kind | u64 req_id | u32 shard
 *   | u64 generation | u64 token | i32 status | runtime target (16 id bytes + u64 epoch)
 *   | kind-specific tail (see route_msg.c; every variable part is length-prefixed)
 * Routes and identities inside are full core wire frames (wire.h), so every route a peer
 * receives has passed kvm_route_validate.
 *
 * The env message type is ROUTE_MSG_BASE + kind; the decoder checks the two agree.
 *
 * Decoding never crashes: any malformed, truncated, oversized or inconsistent input returns
 * KVMESH_EPROTO (or KVMESH_ETOOBIG / KVMESH_EINCOMPAT) with a message and leaves the output
 * owning nothing. Ownership: a decoded route_msg_t owns its routes/ident (route_msg_clear).
 * Pure functions; any thread.
 */
#ifndef KVMESH_ROUTE_ROUTE_MSG_H
#define KVMESH_ROUTE_ROUTE_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ident.h"
#include "core/limits.h"
#include "core/route.h"
#include "core/util.h"
#include "core/version.h"
#include "env/env.h"

#define ROUTE_MSG_VERSION    1
#define ROUTE_MSG_MAX_ROUTES 64            /* routes per transfer/owner page */
#define ROUTE_MSG_MAX_SET    32            /* authority set members carried (== WRH_MAX_K) */
#define ROUTE_MSG_MAX_LEN    (600u * 1024) /* bytes of one encoded message */
/* Bytes of an identity's canonical encoding a decoded message holds in itself (route_msg_t's
 * decode storage); a longer one (a long key or scope) is allocated. */
#define ROUTE_MSG_IDENT_INLINE 192

enum route_msg_kind {
    RMSG_CAS_REQ = 1,      /* client -> primary: expected version + next route */
    RMSG_CAS_RESP = 2,     /* status; route = published (0) or current (ECONFLICT) */
    RMSG_READ_REQ = 3,     /* client -> authority: ident */
    RMSG_READ_RESP = 4,    /* status; route when present */
    RMSG_MIRROR_REQ = 5,   /* primary -> secondary: one fenced route version */
    RMSG_MIRROR_RESP = 6,  /* status */
    RMSG_GRANT_REQ = 7,    /* secondary -> primary: ask for a read lease */
    RMSG_GRANT_RESP = 8,   /* status; remaining_ns of the primary's lease */
    RMSG_FETCH_REQ = 9,    /* new primary -> previous authority: page of a shard (fences it) */
    RMSG_FETCH_RESP = 10,  /* routes; more */
    RMSG_INSTALL_REQ = 11, /* new primary -> new set member: begin/pages/done of a transfer */
    RMSG_INSTALL_RESP = 12,
    RMSG_REPAIR = 13,    /* reader -> authority: a higher version it lacks (no reply) */
    RMSG_OWNER_REQ = 14, /* client -> authority: owner index page of a shard */
    RMSG_OWNER_RESP = 15,
    /* Not a message of its own: a batch of up to KVM_ROUTE_BATCH_MAX encoded messages of the
     * kinds route_msg_batchable() admits, all to one peer (route_batch.c). */
    RMSG_BATCH = 16,
    /* 17..19: left for other request kinds */
    RMSG_CAS_CLAIM_REQ = 20,  /* client -> primary: a CAS_REQ with a claim (route_claim.c) */
    RMSG_CAS_CLAIM_RESP = 21, /* a CAS_RESP with the claim's reply */
    RMSG_KIND_MAX = 21,
};

#define ROUTE_MSG_MAX_CLAIM (16u * 1024) /* bytes of a claim or claim reply blob */

/* Install flags */
#define RMSG_INSTALL_BEGIN 1u /* drop what you hold for the shard; adopt the new set */
#define RMSG_INSTALL_DONE  2u /* the transfer is complete */

/* Inline reads (docs/protocol.md "Inline reads"). READ_REQ's `limit` is the most payload bytes
 * the requester accepts in the answer (0 = none: what a peer that predates inline reads writes,
 * and ignores when it receives it). A READ_RESP with flag RMSG_READ_INLINE (never sent unless
 * the request's limit allowed it) ends with u32 len, len payload bytes of routes[0]'s replica
 * at the answering authority (<= ROUTE_MSG_MAX_INLINE, and exactly routes[0].length). */
#define RMSG_READ_INLINE     4u
#define ROUTE_MSG_MAX_INLINE (256u * 1024)
/* The bound of the attached form (RMSG_READ_ATT, below): its bytes are the frame's raw payload,
 * not part of the message, so they are bounded apart from the copied form's. A peer that predates
 * it bounds both by ROUTE_MSG_MAX_INLINE: its authority lends no more (route_inline.c clamps the
 * request's limit to its own bound) and its requester asks no more. */
#define ROUTE_MSG_MAX_INLINE_ATT (4u * 1024 * 1024)
/* Inline bytes as an attachment (docs/protocol.md "Inline reads": the frame's raw payload, no
 * copy at the authority). In a READ_REQ: the requester takes the answer's bytes as the
 * message's attachment (env_send_att); a peer that predates it neither sets nor reads the bit.
 * In a READ_RESP (never sent unless the request set it, never with RMSG_READ_INLINE): the head
 * of an inline answer that ends with u32 len and no bytes; the len bytes travel as the
 * attachment (at most ROUTE_MSG_MAX_INLINE_ATT), and route_msg_attach joins them (an answer
 * whose attachment is missing or of another length is a plain answer: the requester reads the
 * replica). */
#define RMSG_READ_ATT 8u

typedef struct route_msg_member {
    kvm_runtime_t rt;
    env_node_t node;
} route_msg_member_t;

typedef struct route_msg {
    uint16_t kind;
    uint64_t req_id;
    uint32_t shard;
    uint64_t generation;
    uint64_t token;
    int32_t status;
    kvm_runtime_t target; /* the incarnation a request is addressed to (epoch fencing) */
    /* CAS_REQ: expected; FETCH/OWNER: unused */
    kvm_route_version_t expected;
    /* READ_REQ, FETCH_REQ/OWNER_REQ cursor (has_ident false = from the start) */
    bool has_ident;
    kvm_ident_t ident;
    /* OWNER_REQ */
    kvm_runtime_id_t owner;
    uint32_t limit;
    /* GRANT_RESP */
    uint64_t remaining_ns;
    /* INSTALL_REQ */
    uint32_t flags;
    kvm_runtime_t primary;
    env_node_t primary_node;
    uint32_t n_set; /* members in set[] (at the end: the rest of set[] is not zeroed) */
    /* FETCH_RESP/OWNER_RESP */
    bool more;
    /* routes: CAS_REQ/RESP, READ_RESP, MIRROR, REPAIR: 0 or 1; pages: up to MAX_ROUTES */
    uint32_t n_routes;
    kvm_route_t *routes; /* owned array of n_routes (heap) when decoded */
    /* CAS_CLAIM_REQ/RESP: the opaque claim (request) or its reply (<= ROUTE_MSG_MAX_CLAIM);
     * owned (heap) when decoded, borrowed when encoding */
    uint8_t *claim;
    uint32_t claim_len;
    const kvm_route_t *const *rptrs; /* encode only: when set, routes are taken from here */
    /* encode only: when set, the first route is these bytes (borrowed): its wire frame as
     * wire_route_encode wrote it, so a route sent in several messages is encoded once (a
     * primary's mirrors and its CAS answer); the bytes on the wire are the same */
    const uint8_t *rframe;
    uint32_t rframe_len;
    /* READ_RESP with RMSG_READ_INLINE in flags: the payload bytes (inl_len == routes[0].length).
     * Borrowed both ways: decoded, a view into the decoded buffer (valid while it is). */
    const uint8_t *inl;
    uint32_t inl_len;
    /* READ_RESP with RMSG_READ_ATT (the head form): the length of the bytes that travel as the
     * attachment (== routes[0].length; inl_len is 0), encoded and decoded; route_msg_attach
     * turns a decoded head into an inline answer */
    uint32_t att_len;
    /* decoded and attached (route_msg_attach): the attachment inl points into; a receiver may
     * take its buffer (env.h env_payload_t) unless inl_shared */
    env_payload_t *inl_att;
    /* inl_att is a slice of a batch's attachment (route_svc.c): its bytes are copied, never
     * taken (the buffer is the batch's) */
    bool inl_shared;
    /* Set by route_msg_decode to the message's own address (NULL when built by a caller): a
     * decoded message's pointers may point into its own decode storage below, so a copy of it
     * by value points into the original, which route_msg_clear (or a move out of it) would
     * then free or read after it is gone. route_msg_clear and route_msg_check_decoded assert
     * that a decoded message is at the address it was decoded at. */
    const struct route_msg *decoded_at;
    /* INSTALL_REQ: the first n_set entries (route_msg_init leaves the array as it is: only
     * set[0..n_set) is ever read or written) */
    route_msg_member_t set[ROUTE_MSG_MAX_SET];
    /* Decode storage (route_msg_decode), so that a message of at most one route decodes with
     * no allocation: its route (routes == &route1) and the encodings of its identities when
     * they fit (ident.enc == ident_buf, route1.ident.enc == rident_buf; larger ones are on the
     * heap). Not zeroed by route_msg_init (nothing here is read before decode writes it); a
     * decoded message is therefore never copied by value (its pointers point into itself). */
    kvm_route_t route1;
    uint8_t ident_buf[ROUTE_MSG_IDENT_INLINE];
    uint8_t rident_buf[ROUTE_MSG_IDENT_INLINE];
} route_msg_t;

/* Zeroes m (owns nothing) but for set[] and the decode storage, which are left as they are
 * (set[0..n_set) with n_set = 0: nothing; ~2 KiB that each message would otherwise zero). */
void route_msg_init(route_msg_t *m, uint16_t kind);
/* Frees what a decoded (or caller-filled with owned routes) message owns; m is re-zeroed.
 * Asserts that a decoded m was not copied by value (decoded_at). */
void route_msg_clear(route_msg_t *m);
/* Asserts that m, when decoded, is the message route_msg_decode wrote (not a copy by value of
 * it, whose storage pointers would point into the original): for code that takes a decoded
 * message's routes or identity apart. */
static inline void route_msg_check_decoded(const route_msg_t *m)
{
    KVM_ASSERT(m->decoded_at == NULL || m->decoded_at == m);
}

/* Encodes into buf (cap bytes); *out_len set. KVMESH_ETOOBIG when it does not fit,
 * KVMESH_EINVAL for an invalid route/ident inside. Routes are borrowed (not freed). */
int route_msg_encode(const route_msg_t *m, uint8_t *buf, size_t cap, size_t *out_len);
/* An upper bound of the encoded size of m (to size the encode buffer). */
size_t route_msg_size_bound(const route_msg_t *m);
/* Decodes a message received with env type `type`. */
int route_msg_decode(uint32_t type, const uint8_t *buf, size_t len, route_msg_t *out);
/* Joins a decoded READ_RESP head (RMSG_READ_ATT) and the attachment received with it (NULL:
 * none): when it is exactly the announced length, m becomes an inline answer (RMSG_READ_INLINE,
 * inl into the attachment's buffer, inl_att set); otherwise the inline part is dropped (a plain
 * answer). Any other message is left as it is. */
void route_msg_attach(route_msg_t *m, env_payload_t *payload);

const char *route_msg_kind_name(uint16_t kind);

/*
 * Batch messages (env type ROUTE_MSG_BASE + RMSG_BATCH): the first requests of the items of one
 * batched call that go to the same peer, or the answers to them, in one message:
 *   u8 'R' | u8 ROUTE_MSG_VERSION | u16 RMSG_BATCH | u32 n (2..KVM_ROUTE_BATCH_MAX)
 *   | n x (u32 len, one encoded route message of a batchable kind)
 * Every item is a complete message with its own req_id, shard, generation, token and target,
 * so each is admitted, fenced and answered on its own exactly as when it travels alone; the
 * batch only saves the exchanges. Batchable kinds: CAS_REQ/RESP, READ_REQ/RESP,
 * MIRROR_REQ/RESP. A batch holds at most ROUTE_MSG_MAX_LEN bytes.
 */
bool route_msg_batchable(uint16_t kind);

/* Builder of one batch (owned buffer). */
typedef struct route_batch_buf {
    uint8_t *buf;
    size_t len, cap;
    uint32_t n;
    size_t first_off, first_len; /* the first item (sent alone when it stays the only one) */
} route_batch_buf_t;
void route_batch_buf_init(route_batch_buf_t *b);
void route_batch_buf_free(route_batch_buf_t *b);
/* Appends one encoded message (copied). KVMESH_ETOOBIG when the batch is full (count or bytes:
 * send it and start another), KVMESH_EINVAL when msg is not a batchable route message,
 * KVMESH_ENOMEM. */
int route_batch_append(route_batch_buf_t *b, const uint8_t *msg, size_t len);
/* Room for one message of at most cap bytes at the batch's end, to encode it in place (no
 * copy): *out points at it, valid until the next append/reserve/free; the message counts once
 * route_batch_commit adds it. KVMESH_ETOOBIG when the batch has no room for cap more bytes or
 * items (send it, start another), KVMESH_ENOMEM. */
int route_batch_reserve(route_batch_buf_t *b, size_t cap, uint8_t **out);
/* Adds the len bytes written at the last reservation (len <= its cap; a batchable route
 * message, asserted) as the batch's next item. */
void route_batch_commit(route_batch_buf_t *b, size_t len);
/* The encoded batch (n >= 2; valid until the next append/free). */
const uint8_t *route_batch_bytes(route_batch_buf_t *b, size_t *len);

/* A decoded batch: views into the received bytes (valid while they are). Each item's kind is
 * checked batchable here; its body is decoded by route_msg_decode(ROUTE_MSG_BASE + kind[i]). */
typedef struct route_batch_view {
    uint32_t n;
    uint16_t kind[KVM_ROUTE_BATCH_MAX];
    const uint8_t *item[KVM_ROUTE_BATCH_MAX];
    uint32_t len[KVM_ROUTE_BATCH_MAX];
} route_batch_view_t;
int route_batch_decode(uint32_t type, const uint8_t *buf, size_t len, route_batch_view_t *out);

#endif
