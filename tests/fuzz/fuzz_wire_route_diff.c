/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_wire_route_diff.c — differential libFuzzer target: the hand-written route decoder
 * (wire_route_decode) against the protobuf-c oracle (wire_route_decode_pb) on arbitrary bytes.
 * They must agree on the return code, the error message and the decoded route; an accepted
 * route must re-encode to the same bytes with both encoders. The input is used both as a whole
 * frame and, behind a valid route header, as a bare protobuf body (so that mutations reach the
 * protobuf parser without first having to rediscover the 4-byte header).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"
#include "kvmesh.h"

static void diff_check(int ok, const char *what, int rc_o, int rc_n)
{
    if (!ok) {
        fprintf(stderr, "route decoders disagree: %s (oracle %d, new %d: %s)\n", what, rc_o, rc_n,
                kvmesh_last_error());
        abort();
    }
}

static void diff_one(const uint8_t *data, size_t size)
{
    static uint8_t out_o[KVM_WIRE_MAX_RECORD_LEN], out_n[KVM_WIRE_MAX_RECORD_LEN];
    static char msg_o[512];
    kvm_route_t o, n;
    int rc_o = wire_route_decode_pb(data, size, &o);
    snprintf(msg_o, sizeof(msg_o), "%s", rc_o ? kvmesh_last_error() : "");
    int rc_n = wire_route_decode(data, size, &n);
    diff_check(rc_o == rc_n, "return code", rc_o, rc_n);
    if (rc_n) {
        diff_check(strcmp(msg_o, kvmesh_last_error()) == 0, "error message", rc_o, rc_n);
        diff_check(n.ident.enc == NULL, "a failed decode owns nothing", rc_o, rc_n);
        return;
    }
    diff_check(kvm_route_equal(&o, &n), "decoded route", rc_o, rc_n);
    size_t len_o = 0, len_n = 0;
    diff_check(wire_route_encode_pb(&n, out_o, sizeof(out_o), &len_o) == 0, "oracle re-encode",
               rc_o, rc_n);
    diff_check(wire_route_encode(&n, out_n, sizeof(out_n), &len_n) == 0, "re-encode", rc_o, rc_n);
    diff_check(len_o == len_n && memcmp(out_o, out_n, len_n) == 0, "re-encoded bytes", rc_o, rc_n);
    kvm_route_free(&o);
    kvm_route_free(&n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t framed[KVM_WIRE_MAX_RECORD_LEN + WIRE_HEADER_LEN + 1];
    diff_one(data, size);
    if (size <= KVM_WIRE_MAX_RECORD_LEN + 1) { /* one byte over: the size limit too */
        wire_header_put(framed, WIRE_SCHEMA_ROUTE, WIRE_VERSION);
        if (size)
            memcpy(framed + WIRE_HEADER_LEN, data, size);
        diff_one(framed, size + WIRE_HEADER_LEN);
    }
    return 0;
}
