/* SPDX-License-Identifier: Apache-2.0 */
/*
 * extent.h — the on-disk formats of the ExtentStore cold backend (docs/cold.md "Backends") and
 * their codecs (core/bytes.h, little-endian), here so the fuzz targets can drive them; the
 * backend itself is opened through cold_backend_open.h. Files under <root>/ext:
 *
 *   seg-XXXXXXXX.dat  append-only segment files. Bytes [0, 64) are the segment header, extents
 *                     start at COLD_EXT_DATA_OFF and at multiples of COLD_EXT_ALIGN; each extent
 *                     is a 64-byte extent header followed by its payload.
 *   journal.log       the operation journal: a 64-byte header, then records appended and
 *                     fdatasync'ed one by one. Recovery replays it up to the first record that
 *                     does not decode (a torn tail, which it truncates).
 *   journal.tmp       a compaction in progress (removed at open).
 *
 * Segment header:  magic "KVMCSEG1" (8) | version u16 | header_len u16 (64) | segment id u32 |
 *                  generation u64 | reserved (32, zero) | header checksum u64
 * Extent header:   magic u32 "KVXT" | version u16 | header_len u16 (64) | length u64 |
 *                  checksum u64 | generation u64 | cold op id (16) | reserved (8, zero) |
 *                  header checksum u64
 * Journal header:  magic "KVMCJRN1" (8) | version u16 | header_len u16 (64) | reserved u32 |
 *                  base generation u64 | reserved (32, zero) | header checksum u64
 * Journal record:  magic u32 "KVJR" | type u8 | version u8 | body_len u16 | body |
 *                  record checksum u64 (of everything before it)
 *   PUT   (64): op (16) | gen u64 | length u64 | checksum u64 | orig seg u32 | seg u32 |
 *               orig off u64 | off u64          — the op's extent was written (fdatasync'ed)
 *   DEL   (24): op (16) | gen u64                — the op's extent is dead
 *   MOVE  (40): op (16) | gen u64 | seg u32 | reserved u32 | off u64 — cleaning moved it
 *   SEGFREE(8): seg u32 | reserved u32           — the segment holds nothing live; removed
 * Every header checksum is XXH3-64 with seed COLD_EXT_HDR_SEED of the bytes before it.
 *
 * Locator (46 bytes): kind u8 (2) | version u8 (1) | op (16) | seg u32 | off u64 | length u64 |
 * gen u64 — where the put first placed the extent and the put's generation. Cleaning may move
 * the extent later; the journal maps the op id to its current place, so the locator (and its
 * fingerprint in routes) never changes.
 */
#ifndef KVMESH_COLD_EXTENT_H
#define KVMESH_COLD_EXTENT_H

#include <stddef.h>
#include <stdint.h>

#include "cold/cold_backend.h"
#include "core/bytes.h"

#define COLD_EXT_SUBDIR     "ext"
#define COLD_EXT_VERSION    1
#define COLD_EXT_HDR_LEN    64 /* every header above */
#define COLD_EXT_DATA_OFF   4096
#define COLD_EXT_ALIGN      4096
#define COLD_EXT_LOC_LEN    46
#define COLD_EXT_REC_MAX    80
#define COLD_EXT_SEG_MAGIC  "KVMCSEG1"
#define COLD_EXT_JRN_MAGIC  "KVMCJRN1"
#define COLD_EXT_XHDR_MAGIC UINT32_C(0x5458564b)         /* "KVXT" */
#define COLD_EXT_REC_MAGIC  UINT32_C(0x524a564b)         /* "KVJR" */
#define COLD_EXT_HDR_SEED   UINT64_C(0x636f6c6465787431) /* "coldext1" */

typedef struct cold_ext_seg_hdr {
    uint32_t id;
    uint64_t gen;
} cold_ext_seg_hdr_t;

typedef struct cold_ext_xhdr {
    uint64_t len;
    uint64_t checksum;
    uint64_t gen;
    cold_opid_t op;
} cold_ext_xhdr_t;

typedef enum cold_ext_rec_type {
    COLD_EXT_REC_PUT = 1,
    COLD_EXT_REC_DEL = 2,
    COLD_EXT_REC_MOVE = 3,
    COLD_EXT_REC_SEGFREE = 4,
} cold_ext_rec_type_t;

typedef struct cold_ext_rec {
    uint8_t type;
    cold_opid_t op;
    uint64_t gen, len, checksum;
    uint32_t orig_seg, seg;
    uint64_t orig_off, off;
} cold_ext_rec_t;

typedef struct cold_ext_loc {
    cold_opid_t op;
    uint32_t seg;
    uint64_t off, len, gen;
} cold_ext_loc_t;

void cold_ext_seg_hdr_encode(const cold_ext_seg_hdr_t *h, uint8_t out[COLD_EXT_HDR_LEN]);
int cold_ext_seg_hdr_decode(const void *p, size_t n, cold_ext_seg_hdr_t *h);
void cold_ext_xhdr_encode(const cold_ext_xhdr_t *h, uint8_t out[COLD_EXT_HDR_LEN]);
int cold_ext_xhdr_decode(const void *p, size_t n, cold_ext_xhdr_t *h);
void cold_ext_jrn_hdr_encode(uint64_t base_gen, uint8_t out[COLD_EXT_HDR_LEN]);
int cold_ext_jrn_hdr_decode(const void *p, size_t n, uint64_t *base_gen);
/* Appends one record to w (fails w when the record's fields are out of range). */
void cold_ext_rec_encode(const cold_ext_rec_t *rec, kvm_wr_t *w);
/* Decodes the record at the start of p[0..n): 0 and *used, or KVMESH_ECORRUPT (short, torn,
 * unknown type, bad checksum or reserved bytes). Every decoder here returns 0 or
 * KVMESH_ECORRUPT and never reads outside its input. */
int cold_ext_rec_decode(const void *p, size_t n, cold_ext_rec_t *rec, size_t *used);

void cold_ext_loc_encode(const cold_ext_loc_t *l, cold_locator_t *out);
/* 0, or KVMESH_EINVAL when loc is not an ExtentStore locator. */
int cold_ext_loc_decode(const cold_locator_t *loc, cold_ext_loc_t *l);

#endif
