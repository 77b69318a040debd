/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frame.h — the fixed binary header of every kvmesh peer RPC frame: encode, decode and validate,
 * no I/O. A frame on the wire is
 *
 *     [64-byte fixed header][header_len bytes: protobuf RpcHeader or handshake message]
 *     [payload_len raw payload bytes]
 *
 * Fixed header layout (all integers big-endian, see docs/rpc.md for the byte table):
 *
 *     off size field
 *       0    4 magic "KVMR"
 *       4    1 protocol version (FRAME_VERSION)
 *       5    1 kind (enum frame_kind)
 *       6    2 message type (method; 0 for handshake/cancel frames)
 *       8    8 request id
 *      16    4 deadline: remaining milliseconds at send time, 0 = none
 *      20    4 header length
 *      24    8 payload length
 *      32   16 trace id
 *      48    8 parent span id
 *      56    1 trace flags (bit 0: sampled; other bits must be 0)
 *      57    7 reserved, must be 0
 *
 * Invariants: frame_decode() accepts a header only if every field is valid, the total frame
 * length (64 + header_len + payload_len) fits max_frame_bytes and header_len fits
 * FRAME_MAX_HEADER_BYTES, so a receiver may allocate the announced lengths.
 */
#ifndef KVMESH_NET_FRAME_H
#define KVMESH_NET_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_FIXED_SIZE       64
#define FRAME_MAGIC            0x4B564D52u /* "KVMR" */
#define FRAME_VERSION          1
#define FRAME_MAX_HEADER_BYTES (1u << 20) /* protobuf header bound: 1 MiB */
#define FRAME_TRACE_SAMPLED    0x01u
#define FRAME_TRACE_ID_LEN     16
#define FRAME_SPAN_ID_LEN      8

enum frame_kind {
    FRAME_HELLO = 1,     /* client -> server: Hello */
    FRAME_HELLO_ACK = 2, /* server -> client: HelloAck */
    FRAME_AUTH = 3,      /* client -> server: Auth */
    FRAME_VERDICT = 4,   /* either side: Verdict (accept or refuse) */
    FRAME_REQUEST = 5,   /* RpcHeader + payload, expects a RESPONSE with the same request id */
    FRAME_RESPONSE = 6,  /* RpcHeader + payload */
    FRAME_NOTIFY = 7,    /* RpcHeader + payload, one-way */
    FRAME_CANCEL = 8,    /* no header, no payload: cancel request id */
};
#define FRAME_KIND_MAX 8

/* Why a fixed header was rejected. FRAME_OK is 0. */
enum frame_error {
    FRAME_OK = 0,
    FRAME_ERR_MAGIC,       /* not a kvmesh frame (garbage) */
    FRAME_ERR_VERSION,     /* kvmesh frame of an unsupported protocol version */
    FRAME_ERR_KIND,        /* unknown frame kind */
    FRAME_ERR_RESERVED,    /* reserved bits/bytes not zero */
    FRAME_ERR_HEADER_SIZE, /* header_len > FRAME_MAX_HEADER_BYTES */
    FRAME_ERR_TOO_BIG,     /* total frame length > max_frame_bytes */
    FRAME_ERR_SHAPE,       /* lengths not allowed for this kind (e.g. a CANCEL with payload) */
    FRAME_ERR_SHORT,       /* fewer than FRAME_FIXED_SIZE bytes given */
};

struct frame_trace {
    uint8_t trace_id[FRAME_TRACE_ID_LEN];
    uint8_t span_id[FRAME_SPAN_ID_LEN];
    uint8_t flags; /* FRAME_TRACE_SAMPLED */
};

struct frame_header {
    uint8_t version;
    uint8_t kind; /* enum frame_kind */
    uint16_t type;
    uint64_t request_id;
    uint32_t deadline_ms;
    uint32_t header_len;
    uint64_t payload_len;
    struct frame_trace trace;
};

/* Writes the fixed header into out (FRAME_FIXED_SIZE bytes). The header must be valid (asserted).
 */
void frame_encode(const struct frame_header *h, uint8_t out[FRAME_FIXED_SIZE]);

/*
 * Decodes and validates len bytes (uses the first FRAME_FIXED_SIZE). Returns FRAME_OK and fills
 * *out, or a frame_error. max_frame_bytes bounds 64 + header_len + payload_len. On
 * FRAME_ERR_VERSION, out->version holds the announced version.
 */
enum frame_error frame_decode(const uint8_t *buf, size_t len, uint64_t max_frame_bytes,
                              struct frame_header *out);

/* Static name of a frame_error ("bad_magic"...). */
const char *frame_error_name(enum frame_error e);

#endif
