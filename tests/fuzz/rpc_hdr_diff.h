/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc_hdr_diff.h — the differential check of the hand-written RpcHeader codec (net/rpc_hdr.h)
 * against protobuf-c (the oracle), shared by tests/unit/test_rpc_hdr.c and
 * tests/fuzz/fuzz_rpc_hdr_diff.c. rpc_hdr_diff(data, size) aborts when the two decoders disagree
 * on acceptance or on any decoded field, or when an accepted header re-encodes to other bytes
 * than protobuf-c packs. Returns 1 when the bytes were accepted, 0 when refused.
 */
#ifndef KVMESH_TESTS_RPC_HDR_DIFF_H
#define KVMESH_TESTS_RPC_HDR_DIFF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/rpc_hdr.h"
#include "rpc.pb-c.h"

static inline void rpc_hdr_diff_check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "RpcHeader codecs disagree: %s\n", what);
        abort();
    }
}

static inline int rpc_hdr_diff(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    const uint8_t *in = size ? data : empty;
    Kvmesh__Rpc__RpcHeader *o = kvmesh__rpc__rpc_header__unpack(NULL, size, in);
    struct rpc_hdr n;
    int rc = rpc_hdr_decode(in, size, &n);
    rpc_hdr_diff_check((o != NULL) == (rc == 0), "acceptance");
    if (!o)
        return 0;
    char *e = rpc_hdr_error_cstr(&n);
    rpc_hdr_diff_check(e != NULL, "error text copy");
    rpc_hdr_diff_check(o->status == n.status, "status");
    rpc_hdr_diff_check(strcmp(o->error, e) == 0, "error text");
    rpc_hdr_diff_check(o->body.len == n.body_len, "body length");
    rpc_hdr_diff_check((o->body.data == NULL) == (n.body == NULL), "body presence");
    rpc_hdr_diff_check(!n.body_len || memcmp(o->body.data, n.body, n.body_len) == 0, "body bytes");
    /* protobuf-c packs the unknown fields it kept; the RPC layer drops them */
    unsigned n_unknown = o->base.n_unknown_fields;
    o->base.n_unknown_fields = 0;
    size_t want = kvmesh__rpc__rpc_header__get_packed_size(o);
    size_t got = rpc_hdr_size(n.status, strlen(e), n.body_len);
    rpc_hdr_diff_check(want == got, "encoded size");
    uint8_t *bo = malloc(want + 1), *bn = malloc(got + 1);
    rpc_hdr_diff_check(bo && bn, "out of memory");
    kvmesh__rpc__rpc_header__pack(o, bo);
    rpc_hdr_diff_check(rpc_hdr_encode(bn, n.status, e, strlen(e), n.body, n.body_len) == got,
                       "encoded length");
    rpc_hdr_diff_check(memcmp(bo, bn, got) == 0, "encoded bytes");
    o->base.n_unknown_fields = n_unknown;
    free(bo);
    free(bn);
    free(e);
    kvmesh__rpc__rpc_header__free_unpacked(o, NULL);
    return 1;
}

#endif
