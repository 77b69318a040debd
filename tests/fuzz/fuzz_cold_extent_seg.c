// SPDX-License-Identifier: Apache-2.0
/*
 * fuzz_cold_extent_seg.c — libFuzzer target for the ExtentStore segment header, extent header
 * and locator decoders (cold/extent.h). For any input: no read outside it, errors are only
 * KVMESH_ECORRUPT (headers) / KVMESH_EINVAL (locator), and whatever decodes re-encodes to
 * exactly the bytes it came from.
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
        fprintf(stderr, "extent segment fuzz: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t out[COLD_EXT_HDR_LEN];
    cold_ext_seg_hdr_t sh;
    int rc = cold_ext_seg_hdr_decode(data, size, &sh);
    check(rc == 0 || rc == KVMESH_ECORRUPT, "segment header error code");
    if (rc == 0) {
        check(size == COLD_EXT_HDR_LEN, "segment header size");
        cold_ext_seg_hdr_encode(&sh, out);
        check(memcmp(out, data, COLD_EXT_HDR_LEN) == 0, "segment header re-encodes");
    }
    cold_ext_xhdr_t xh;
    rc = cold_ext_xhdr_decode(data, size, &xh);
    check(rc == 0 || rc == KVMESH_ECORRUPT, "extent header error code");
    if (rc == 0) {
        check(size == COLD_EXT_HDR_LEN, "extent header size");
        cold_ext_xhdr_encode(&xh, out);
        check(memcmp(out, data, COLD_EXT_HDR_LEN) == 0, "extent header re-encodes");
    }
    cold_locator_t loc;
    memset(&loc, 0, sizeof(loc));
    loc.len = (uint16_t)(size < COLD_LOCATOR_MAX ? size : COLD_LOCATOR_MAX);
    memcpy(loc.b, data, loc.len);
    cold_ext_loc_t l;
    rc = cold_ext_loc_decode(&loc, &l);
    check(rc == 0 || rc == KVMESH_EINVAL, "locator error code");
    if (rc == 0) {
        cold_locator_t again;
        cold_ext_loc_encode(&l, &again);
        check(again.len == loc.len && memcmp(again.b, loc.b, loc.len) == 0, "locator re-encodes");
    }
    return 0;
}
