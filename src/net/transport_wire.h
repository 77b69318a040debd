/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_wire.h — byte layouts of the data-plane protocols (all integers little-endian):
 *   - tcp data connection: request header (48 bytes, followed by `length` payload bytes for a
 *     WRITE) and response header (32 bytes, followed by `length` payload bytes for a
 *     successful READ);
 *   - shm unix socket (SOCK_SEQPACKET): grant request (24 bytes) and grant reply (72 bytes,
 *     with the segment's memfd in SCM_RIGHTS when asked for and granted).
 * Decoders validate everything a peer controls (magic, version, op, lengths, reason codes) and
 * return KVMESH_EPROTO on anything else; they never read past `len`.
 */
#ifndef KVMESH_NET_TRANSPORT_WIRE_H
#define KVMESH_NET_TRANSPORT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "net/seg.h"

#define TPW_VERSION      1
#define TPW_REQ_MAGIC    0x4454564bu /* "KVTD" */
#define TPW_RESP_MAGIC   0x5254564bu /* "KVTR" */
#define TPW_SHMQ_MAGIC   0x5153564bu /* "KVSQ" */
#define TPW_SHMR_MAGIC   0x5253564bu /* "KVSR" */
#define TPW_REQ_SIZE     48
#define TPW_RESP_SIZE    32
#define TPW_SHMQ_SIZE    24
#define TPW_SHMR_SIZE    72
#define TPW_SHMQ_WANT_FD 1u
#define TPW_MAX_LEN      (1ull << 32)

struct tpw_req {
    uint8_t op; /* TP_READ / TP_WRITE */
    uint64_t req_id;
    uint64_t seg_id;
    uint64_t offset;
    uint64_t length; /* 1 .. TPW_MAX_LEN */
    uint64_t token;
};

struct tpw_resp {
    int32_t status; /* 0 or KVMESH_E* */
    uint8_t reason; /* enum seg_reason */
    uint64_t req_id;
    uint64_t length; /* payload bytes that follow (READ success) */
};

struct tpw_shmq {
    uint16_t flags; /* TPW_SHMQ_WANT_FD */
    uint64_t seg_id;
    uint64_t token;
};

struct tpw_shmr {
    int32_t status;
    uint32_t reason;
    uint64_t seg_size;
    struct seg_grant grant;
};

void tpw_req_encode(const struct tpw_req *r, uint8_t out[TPW_REQ_SIZE]);
int tpw_req_decode(const uint8_t *buf, size_t len, struct tpw_req *out);
void tpw_resp_encode(const struct tpw_resp *r, uint8_t out[TPW_RESP_SIZE]);
int tpw_resp_decode(const uint8_t *buf, size_t len, struct tpw_resp *out);
void tpw_shmq_encode(const struct tpw_shmq *q, uint8_t out[TPW_SHMQ_SIZE]);
int tpw_shmq_decode(const uint8_t *buf, size_t len, struct tpw_shmq *out);
void tpw_shmr_encode(const struct tpw_shmr *r, uint8_t out[TPW_SHMR_SIZE]);
int tpw_shmr_decode(const uint8_t *buf, size_t len, struct tpw_shmr *out);

#endif
