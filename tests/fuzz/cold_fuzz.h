/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_fuzz.h — the shared body of the cold record fuzz targets (fuzz_cold_*.c). For any input:
 * decode must not crash; on success the record must pass its check, re-encode, and decode again
 * to a byte-identical record (the records are plain values); on failure the error is EPROTO.
 */
#ifndef KVMESH_TESTS_FUZZ_COLD_FUZZ_H
#define KVMESH_TESTS_FUZZ_COLD_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold.h"
#include "kvmesh.h"

static inline void cold_fuzz_check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "cold fuzz invariant failed: %s (%s)\n", what, kvmesh_last_error());
        abort();
    }
}

/* T: record type; DEC/ENC: codec; CHECK: the record's invariant check. */
#define COLD_FUZZ_TARGET(T, DEC, ENC, CHECK)                                                       \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                                  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                                   \
    {                                                                                              \
        static uint8_t out[COLD_RECLAIM_ENC_MAX + COLD_OP_ENC_MAX];                                \
        static T a, b;                                                                             \
        int rc = DEC(data, size, &a);                                                              \
        if (rc != 0) {                                                                             \
            cold_fuzz_check(rc == KVMESH_EPROTO, "decode error is EPROTO");                        \
            return 0;                                                                              \
        }                                                                                          \
        cold_fuzz_check(CHECK(&a) == 0, "a decoded record passes its check");                      \
        size_t n = 0;                                                                              \
        cold_fuzz_check(ENC(&a, out, sizeof(out), &n) == 0, "re-encode of a decoded record");      \
        cold_fuzz_check(n == size && memcmp(out, data, n) == 0, "encoding is canonical");          \
        cold_fuzz_check(DEC(out, n, &b) == 0, "decode of a re-encoded record");                    \
        cold_fuzz_check(memcmp(&a, &b, sizeof(a)) == 0, "round trip equality");                    \
        return 0;                                                                                  \
    }

#endif
