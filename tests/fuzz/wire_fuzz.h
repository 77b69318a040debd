/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_fuzz.h — the shared body of the core wire fuzz targets (fuzz_wire_*.c). For any input:
 * decode must not crash; on success the decoded record must satisfy its invariants, re-encode
 * (encoders refuse invalid records, so this proves decode enforces the same rules) and decode
 * again to an equal record; on failure the error must be one of the documented codes.
 */
#ifndef KVMESH_TESTS_FUZZ_WIRE_FUZZ_H
#define KVMESH_TESTS_FUZZ_WIRE_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"
#include "kvmesh.h"

static inline void wire_fuzz_check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "wire fuzz invariant failed: %s (%s)\n", what, kvmesh_last_error());
        abort();
    }
}

static inline void wire_fuzz_check_err(int rc)
{
    wire_fuzz_check(rc == KVMESH_EPROTO || rc == KVMESH_ETOOBIG || rc == KVMESH_EINCOMPAT ||
                        rc == KVMESH_ENOMEM,
                    "decode error code is documented");
}

/* T: record type; DEC/ENC: wire functions; EQ: equality; FREE: release (may be a no-op). */
#define WIRE_FUZZ_TARGET(T, DEC, ENC, EQ, FREE)                                                    \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                                  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                                   \
    {                                                                                              \
        static uint8_t out[KVM_WIRE_MAX_RECORD_LEN];                                               \
        T a, b;                                                                                    \
        int rc = DEC(data, size, &a);                                                              \
        if (rc != 0) {                                                                             \
            wire_fuzz_check_err(rc);                                                               \
            return 0;                                                                              \
        }                                                                                          \
        size_t n = 0;                                                                              \
        wire_fuzz_check(ENC(&a, out, sizeof(out), &n) == 0, "re-encode of a decoded record");      \
        wire_fuzz_check(DEC(out, n, &b) == 0, "decode of a re-encoded record");                    \
        wire_fuzz_check(EQ(&a, &b), "round trip equality");                                        \
        FREE(&a);                                                                                  \
        FREE(&b);                                                                                  \
        return 0;                                                                                  \
    }

#endif
