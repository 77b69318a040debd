/* SPDX-License-Identifier: Apache-2.0 */
/*
 * localdir.h — the on-disk format of the LocalDir cold backend (docs/cold.md "Backends"): one
 * binary object file per cold operation at <root>/ld/<hh>/<opid hex>.obj (hh: the id's first
 * byte), a 64-byte header then the payload. The header and the locator codecs are here so the
 * fuzz target can drive them; the backend itself is opened through cold_backend_open.h.
 *
 * Header, little-endian, via core/bytes.h:
 *   magic "KVMCLD01" (8) | version u16 | header_len u16 (64) | flags u32 (0) | length u64 |
 *   checksum u64 (XXH3-64 of the payload) | cold op id (16) | reserved (8, zero) |
 *   header checksum u64 (XXH3-64, seed COLD_LD_HDR_SEED, of the 56 bytes before it)
 * Locator: kind u8 (1) | version u8 (1) | cold op id (16).
 */
#ifndef KVMESH_COLD_LOCALDIR_H
#define KVMESH_COLD_LOCALDIR_H

#include <stddef.h>
#include <stdint.h>

#include "cold/cold_backend.h"

#define COLD_LD_MAGIC      "KVMCLD01"
#define COLD_LD_VERSION    1
#define COLD_LD_HDR_LEN    64
#define COLD_LD_LOC_LEN    18
#define COLD_LD_HDR_SEED   UINT64_C(0x636f6c646c646831) /* "coldldh1" */
#define COLD_LD_FANOUT     256
#define COLD_LD_SUBDIR     "ld"
#define COLD_LD_TMP_PREFIX ".tmp."

typedef struct cold_ld_hdr {
    uint64_t len;
    uint64_t checksum;
    cold_opid_t op;
} cold_ld_hdr_t;

void cold_ld_hdr_encode(const cold_ld_hdr_t *h, uint8_t out[COLD_LD_HDR_LEN]);
/* 0, or KVMESH_ECORRUPT (short, bad magic/version/length/reserved bytes, header checksum). */
int cold_ld_hdr_decode(const void *p, size_t n, cold_ld_hdr_t *h);

void cold_ld_loc_encode(const cold_opid_t *op, cold_locator_t *out);
/* 0, or KVMESH_EINVAL when loc is not a LocalDir locator. */
int cold_ld_loc_decode(const cold_locator_t *loc, cold_opid_t *op);

#endif
