// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_cold_extent_journal.c — libFuzzer target for the ExtentStore journal decoders
 * (cold/extent.h): the input is read as a journal file is at recovery, a header then records
 * until the first one that does not decode. Checked: decoders never read outside the input,
 * fail only with KVMESH_ECORRUPT, consume at least one byte and at most what remains per
 * record; a decoded record re-encodes to exactly the bytes it was decoded from.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/extent.h"
#include "kvmesh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "extent journal fuzz: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t base = 0;
    size_t hl = size < COLD_EXT_HDR_LEN ? size : COLD_EXT_HDR_LEN;
    int rc = cold_ext_jrn_hdr_decode(data, hl, &base);
    check(rc == 0 || rc == KVMESH_ECORRUPT, "journal header error code");
    if (rc == 0) {
        uint8_t out[COLD_EXT_HDR_LEN];
        cold_ext_jrn_hdr_encode(base, out);
        check(memcmp(out, data, COLD_EXT_HDR_LEN) == 0, "journal header re-encodes");
    }
    /* records from the start of the input (a corpus of bare records) and after a header */
    for (size_t start = 0; start <= hl; start += hl ? hl : 1) {
        size_t off = start;
        for (int k = 0; k < 4096 && off < size; k++) {
            cold_ext_rec_t r;
            size_t used = 0;
            rc = cold_ext_rec_decode(data + off, size - off, &r, &used);
            check(rc == 0 || rc == KVMESH_ECORRUPT, "record error code");
            if (rc != 0)
                break;
            check(used > 0 && used <= size - off && used <= COLD_EXT_REC_MAX, "record length");
            uint8_t out[COLD_EXT_REC_MAX];
            kvm_wr_t w;
            kvm_wr_fixed(&w, out, sizeof(out));
            cold_ext_rec_encode(&r, &w);
            size_t n = 0;
            check(kvm_wr_finish(&w, &n) == 0 && n == used, "record re-encodes");
            check(memcmp(out, data + off, used) == 0, "record re-encodes to its bytes");
            off += used;
        }
        if (hl == 0)
            break;
    }
    return 0;
}
