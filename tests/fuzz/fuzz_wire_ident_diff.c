/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_wire_ident_diff.c — differential libFuzzer target: the hand-written identity frame codec
 * (wire_ident_decode_in / wire_ident_encode_fast, src/core/wire_route.c) against the protobuf-c
 * one (wire_ident_decode / wire_ident_encode) on arbitrary bytes. They must agree on the return
 * code, the error message and the decoded identity; the decoded encoding lies in the caller's
 * storage exactly when it fits; an accepted identity re-encodes to the same bytes with both
 * encoders. The input is used as a whole frame and behind a valid identity header.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"
#include "kvmesh.h"

static void diff_check(int ok, const char *what, int rc_o, int rc_n)
{
    if (!ok) {
        fprintf(stderr, "ident decoders disagree: %s (oracle %d, new %d: %s)\n", what, rc_o, rc_n,
                kvmesh_last_error());
        abort();
    }
}

static void diff_one(const uint8_t *data, size_t size)
{
    static uint8_t out_o[KVM_WIRE_MAX_RECORD_LEN], out_n[KVM_WIRE_MAX_RECORD_LEN];
    static char msg_o[512];
    uint8_t store[64]; /* small: both the storage and the heap are reached */
    kvm_ident_t o, n;
    int rc_o = wire_ident_decode(data, size, &o);
    snprintf(msg_o, sizeof(msg_o), "%s", rc_o ? kvmesh_last_error() : "");
    int rc_n = wire_ident_decode_in(data, size, &n, store, sizeof(store));
    diff_check(rc_o == rc_n, "return code", rc_o, rc_n);
    if (rc_n) {
        diff_check(strcmp(msg_o, kvmesh_last_error()) == 0, "error message", rc_o, rc_n);
        diff_check(n.enc == NULL, "a failed decode owns nothing", rc_o, rc_n);
        return;
    }
    diff_check(kvm_ident_equal(&o, &n) && o.hash == n.hash, "decoded identity", rc_o, rc_n);
    diff_check((n.enc == store) == (n.enc_len <= sizeof(store)), "storage", rc_o, rc_n);
    size_t len_o = 0, len_n = 0;
    diff_check(wire_ident_encode(&n, out_o, sizeof(out_o), &len_o) == 0, "oracle re-encode", rc_o,
               rc_n);
    diff_check(wire_ident_encode_fast(&n, out_n, sizeof(out_n), &len_n) == 0, "re-encode", rc_o,
               rc_n);
    diff_check(len_o == len_n && memcmp(out_o, out_n, len_n) == 0, "re-encoded bytes", rc_o, rc_n);
    kvm_ident_free(&o);
    if (n.enc != store)
        kvm_ident_free(&n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t framed[KVM_WIRE_MAX_RECORD_LEN + WIRE_HEADER_LEN + 1];
    diff_one(data, size);
    if (size <= KVM_WIRE_MAX_RECORD_LEN + 1) {
        wire_header_put(framed, WIRE_SCHEMA_IDENT, WIRE_VERSION);
        if (size)
            memcpy(framed + WIRE_HEADER_LEN, data, size);
        diff_one(framed, size + WIRE_HEADER_LEN);
    }
    return 0;
}
