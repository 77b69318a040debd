/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd_json.h — pure encoding and decoding for the etcd v3 JSON gateway (used by meta_etcd.c).
 *
 * Owns: the etcd:// URL parser, the JSON request builders for range/txn/lease calls, and the
 * strict response decoders that turn a gateway reply into a meta_result_t. No I/O, no globals,
 * no clock: every function here can be fuzzed on arbitrary bytes.
 *
 * Invariants:
 *   - keys and values travel base64-encoded; int64 fields travel as JSON strings (integers are
 *     accepted too); a decoder never trusts a field's presence or type: a missing required field
 *     or an ill-typed one yields KVMESH_EBACKEND with a message, never a crash;
 *   - proto3 JSON omits default values, so absent numeric fields read as 0, absent bools as
 *     false, absent arrays as empty; only `header.revision` is required in every reply;
 *   - a decoded result (etcd_resp_t) owns all memory its meta_result_t points to, until
 *     etcd_resp_free().
 */
#ifndef KVMESH_META_ETCD_JSON_H
#define KVMESH_META_ETCD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"

#define ETCD_MAX_ENDPOINTS 16  /* members listed in one etcd:// URL */
#define ETCD_HOST_MAX      255 /* bytes of one host name / address */
#define ETCD_ERRMSG_MAX    512 /* bytes of a decoder's error message */
/* Largest reply body accepted (a range page of 40 maximal values, base64); a bigger reply fails
 * with KVMESH_ETOOBIG: page large values with a smaller limit. */
#define ETCD_RESPONSE_MAX ((size_t)64 << 20)

/* ---- URL ---------------------------------------------------------------------------------- */

typedef struct etcd_endpoint {
    char host[ETCD_HOST_MAX + 3]; /* as written; IPv6 keeps its brackets: "[::1]" */
    uint16_t port;
} etcd_endpoint_t;

typedef struct etcd_url {
    etcd_endpoint_t eps[ETCD_MAX_ENDPOINTS];
    size_t n_eps;
} etcd_url_t;

/* Parses "etcd://host:port[,host:port...]" (port required, 1..65535; host a DNS name, an IPv4
 * address or a bracketed IPv6 address; no path other than an optional trailing "/", no query,
 * no credentials, no duplicate endpoints). Returns 0, or KVMESH_EURL with a message in err. */
int etcd_url_parse(const char *url, etcd_url_t *out, char *err, size_t errlen);

/* ---- requests ----------------------------------------------------------------------------- */

/* Each builder returns 0 and a malloc'd NUL-terminated JSON body in *out (caller frees), or
 * KVMESH_ENOMEM / KVMESH_EINVAL (message in err). Inputs are borrowed for the call only. */
int etcd_json_get_req(const char *key, char **out, char *err, size_t errlen);
int etcd_json_range_req(const char *prefix, const char *start_after, uint32_t limit, char **out,
                        char *err, size_t errlen);
int etcd_json_txn_req(const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *then_ops,
                      size_t n_then, const meta_op_t *else_ops, size_t n_else, char **out,
                      char *err, size_t errlen);
/* ttl_ms rounded up to whole seconds, at least 1 s. */
int etcd_json_lease_grant_req(int64_t ttl_ms, char **out, char *err, size_t errlen);
/* {"ID":"<lease>"}: keepalive, revoke and timetolive bodies. */
int etcd_json_lease_id_req(meta_lease_t lease, char **out, char *err, size_t errlen);

/* The range [key, range_end) for range(prefix, start_after): key = max(prefix, start_after+"\0"),
 * range_end = prefix with its last byte below 0xff incremented (trailing 0xff bytes dropped), or
 * "\0" (no upper bound) when there is none. Writes malloc'd byte strings and their lengths;
 * caller frees both. *empty is set when the range cannot hold a key. */
int etcd_range_bounds(const char *prefix, const char *start_after, uint8_t **key, size_t *key_len,
                      uint8_t **end, size_t *end_len, bool *empty);

/* ---- base64 (standard alphabet, padded) --------------------------------------------------- */

/* Encoded length excluding NUL. */
size_t etcd_b64_len(size_t n);
/* Writes etcd_b64_len(n) chars plus a NUL into out. */
void etcd_b64_encode(const uint8_t *in, size_t n, char *out);
/* Decodes into a malloc'd buffer (NUL-terminated for convenience); -1 on malformed input. */
int etcd_b64_decode(const char *in, size_t n, uint8_t **out, size_t *out_len);

/* ---- responses ---------------------------------------------------------------------------- */

enum etcd_resp_kind {
    ETCD_RESP_GET,
    ETCD_RESP_RANGE,
    ETCD_RESP_TXN,
    ETCD_RESP_LEASE_GRANT,
    ETCD_RESP_LEASE_KEEPALIVE,
    ETCD_RESP_LEASE_REVOKE,
    ETCD_RESP_LEASE_TTL,
};

/* gRPC status codes the gateway reports in error bodies ({"error","message","code"}). */
enum etcd_grpc_code {
    ETCD_GRPC_OK = 0,
    ETCD_GRPC_INVALID_ARGUMENT = 3,
    ETCD_GRPC_DEADLINE_EXCEEDED = 4,
    ETCD_GRPC_NOT_FOUND = 5,
    ETCD_GRPC_RESOURCE_EXHAUSTED = 8,
    ETCD_GRPC_FAILED_PRECONDITION = 9,
    ETCD_GRPC_OUT_OF_RANGE = 11,
    ETCD_GRPC_UNAVAILABLE = 14,
    ETCD_GRPC_UNAUTHENTICATED = 16,
};

struct etcd_chunk;

typedef struct etcd_resp {
    meta_result_t res;         /* res.rc: 0, or the server-reported error mapped to KVMESH_E* */
    int grpc_code;             /* gRPC code of an error body (0 when the reply was a success) */
    char msg[ETCD_ERRMSG_MAX]; /* res.errmsg points here */
    struct etcd_chunk *chunks; /* every allocation res points into */
} etcd_resp_t;

/* What the decoder needs to check a txn reply against the request. */
typedef struct etcd_txn_shape {
    const meta_op_t *then_ops;
    size_t n_then;
    const meta_op_t *else_ops;
    size_t n_else;
    uint32_t range_limit; /* RANGE: the limit asked for */
} etcd_txn_shape_t;

/*
 * Decodes a gateway reply of the given kind. http_status is the HTTP status (200 for success;
 * error bodies carry a gRPC code). shape may be NULL except for TXN and RANGE.
 * Returns the result code, also stored in out->res.rc: 0; the mapped server error (ENOENT for
 * an unknown lease, EINVAL for a rejected request, EUNAVAILABLE, ...); or KVMESH_EBACKEND for
 * a malformed reply. out->res.errmsg is never NULL. Always release with etcd_resp_free().
 */
int etcd_json_decode(enum etcd_resp_kind kind, const char *body, size_t len, long http_status,
                     const etcd_txn_shape_t *shape, etcd_resp_t *out);
void etcd_resp_free(etcd_resp_t *r);

/* Maps a gRPC status code of an error reply to a KVMESH_E* code. */
int etcd_grpc_to_rc(int grpc_code);

#endif
