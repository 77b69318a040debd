// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_cold_localdir_hdr.c — libFuzzer target for the LocalDir object header and locator
 * decoders (cold/localdir.h). For any input: decoding never reads outside it and fails only
 * with KVMESH_ECORRUPT (header) / KVMESH_EINVAL (locator); a header that decodes re-encodes to
 * exactly the input's 64 bytes (the format is canonical), and a locator that decodes
 * re-encodes to the same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/localdir.h"
#include "kvmesh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "localdir header fuzz: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cold_ld_hdr_t h;
    int rc = cold_ld_hdr_decode(data, size, &h);
    check(rc == 0 || rc == KVMESH_ECORRUPT, "header decode error code");
    if (rc == 0) {
        check(size == COLD_LD_HDR_LEN, "a header decodes only from exactly 64 bytes");
        uint8_t out[COLD_LD_HDR_LEN];
        cold_ld_hdr_encode(&h, out);
        check(memcmp(out, data, COLD_LD_HDR_LEN) == 0, "header re-encodes to its input");
    }
    cold_locator_t loc;
    memset(&loc, 0, sizeof(loc));
    loc.len = (uint16_t)(size < COLD_LOCATOR_MAX ? size : COLD_LOCATOR_MAX);
    memcpy(loc.b, data, loc.len);
    cold_opid_t op;
    rc = cold_ld_loc_decode(&loc, &op);
    check(rc == 0 || rc == KVMESH_EINVAL, "locator decode error code");
    if (rc == 0) {
        cold_locator_t again;
        cold_ld_loc_encode(&op, &again);
        check(again.len == loc.len && memcmp(again.b, loc.b, loc.len) == 0,
              "locator re-encodes to its input");
    }
    return 0;
}
