// SPDX-License-Identifier: Apache-2.0
/*
 * extent_format.c — the codecs of the ExtentStore's segment header, extent header, journal
 * header, journal records and locators (extent.h), all through core/bytes.h.
 */
#include <string.h>

#include "cold/extent.h"
#include "core/hash.h"
#include "core/util.h"

static uint64_t hsum(const void *p, size_t n)
{
    return kvm_hash_seeded(p, n, COLD_EXT_HDR_SEED);
}

static void finish64(kvm_wr_t *w, uint8_t *out)
{
    kvm_wr_u64le(w, hsum(out, COLD_EXT_HDR_LEN - 8));
    size_t n = 0;
    KVM_ASSERT(kvm_wr_finish(w, &n) == 0 && n == COLD_EXT_HDR_LEN);
}

void cold_ext_seg_hdr_encode(const cold_ext_seg_hdr_t *h, uint8_t out[COLD_EXT_HDR_LEN])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, COLD_EXT_HDR_LEN);
    kvm_wr_bytes(&w, COLD_EXT_SEG_MAGIC, 8);
    kvm_wr_u16le(&w, COLD_EXT_VERSION);
    kvm_wr_u16le(&w, COLD_EXT_HDR_LEN);
    kvm_wr_u32le(&w, h->id);
    kvm_wr_u64le(&w, h->gen);
    kvm_wr_zeros(&w, 32);
    finish64(&w, out);
}

int cold_ext_seg_hdr_decode(const void *p, size_t n, cold_ext_seg_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    kvm_rd_t r;
    kvm_rd_init(&r, p, n);
    const uint8_t *magic = kvm_rd_bytes(&r, 8);
    uint16_t ver = kvm_rd_u16le(&r), hl = kvm_rd_u16le(&r);
    h->id = kvm_rd_u32le(&r);
    h->gen = kvm_rd_u64le(&r);
    kvm_rd_zeros(&r, 32);
    uint64_t s = kvm_rd_u64le(&r);
    if (!kvm_rd_end(&r) || memcmp(magic, COLD_EXT_SEG_MAGIC, 8) != 0 || ver != COLD_EXT_VERSION ||
        hl != COLD_EXT_HDR_LEN || s != hsum(p, COLD_EXT_HDR_LEN - 8)) {
        memset(h, 0, sizeof(*h));
        return KVMESH_ECORRUPT;
    }
    return 0;
}

void cold_ext_xhdr_encode(const cold_ext_xhdr_t *h, uint8_t out[COLD_EXT_HDR_LEN])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, COLD_EXT_HDR_LEN);
    kvm_wr_u32le(&w, COLD_EXT_XHDR_MAGIC);
    kvm_wr_u16le(&w, COLD_EXT_VERSION);
    kvm_wr_u16le(&w, COLD_EXT_HDR_LEN);
    kvm_wr_u64le(&w, h->len);
    kvm_wr_u64le(&w, h->checksum);
    kvm_wr_u64le(&w, h->gen);
    kvm_wr_bytes(&w, h->op.b, COLD_OPID_LEN);
    kvm_wr_zeros(&w, 8);
    finish64(&w, out);
}

int cold_ext_xhdr_decode(const void *p, size_t n, cold_ext_xhdr_t *h)
{
    memset(h, 0, sizeof(*h));
    kvm_rd_t r;
    kvm_rd_init(&r, p, n);
    uint32_t magic = kvm_rd_u32le(&r);
    uint16_t ver = kvm_rd_u16le(&r), hl = kvm_rd_u16le(&r);
    h->len = kvm_rd_u64le(&r);
    h->checksum = kvm_rd_u64le(&r);
    h->gen = kvm_rd_u64le(&r);
    kvm_rd_copy(&r, h->op.b, COLD_OPID_LEN);
    kvm_rd_zeros(&r, 8);
    uint64_t s = kvm_rd_u64le(&r);
    if (!kvm_rd_end(&r) || magic != COLD_EXT_XHDR_MAGIC || ver != COLD_EXT_VERSION ||
        hl != COLD_EXT_HDR_LEN || s != hsum(p, COLD_EXT_HDR_LEN - 8)) {
        memset(h, 0, sizeof(*h));
        return KVMESH_ECORRUPT;
    }
    return 0;
}

void cold_ext_jrn_hdr_encode(uint64_t base_gen, uint8_t out[COLD_EXT_HDR_LEN])
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, COLD_EXT_HDR_LEN);
    kvm_wr_bytes(&w, COLD_EXT_JRN_MAGIC, 8);
    kvm_wr_u16le(&w, COLD_EXT_VERSION);
    kvm_wr_u16le(&w, COLD_EXT_HDR_LEN);
    kvm_wr_u32le(&w, 0);
    kvm_wr_u64le(&w, base_gen);
    kvm_wr_zeros(&w, 32);
    finish64(&w, out);
}

int cold_ext_jrn_hdr_decode(const void *p, size_t n, uint64_t *base_gen)
{
    *base_gen = 0;
    kvm_rd_t r;
    kvm_rd_init(&r, p, n);
    const uint8_t *magic = kvm_rd_bytes(&r, 8);
    uint16_t ver = kvm_rd_u16le(&r), hl = kvm_rd_u16le(&r);
    kvm_rd_zeros(&r, 4);
    uint64_t g = kvm_rd_u64le(&r);
    kvm_rd_zeros(&r, 32);
    uint64_t s = kvm_rd_u64le(&r);
    if (!kvm_rd_end(&r) || memcmp(magic, COLD_EXT_JRN_MAGIC, 8) != 0 || ver != COLD_EXT_VERSION ||
        hl != COLD_EXT_HDR_LEN || s != hsum(p, COLD_EXT_HDR_LEN - 8))
        return KVMESH_ECORRUPT;
    *base_gen = g;
    return 0;
}

static uint16_t body_len(uint8_t type)
{
    switch (type) {
    case COLD_EXT_REC_PUT:
        return 64;
    case COLD_EXT_REC_DEL:
        return 24;
    case COLD_EXT_REC_MOVE:
        return 40;
    case COLD_EXT_REC_SEGFREE:
        return 8;
    default:
        return 0;
    }
}

void cold_ext_rec_encode(const cold_ext_rec_t *rec, kvm_wr_t *w)
{
    uint16_t bl = body_len(rec->type);
    if (bl == 0) {
        kvm_wr_fail(w, KVMESH_EINVAL);
        return;
    }
    size_t start = w->len;
    kvm_wr_u32le(w, COLD_EXT_REC_MAGIC);
    kvm_wr_u8(w, rec->type);
    kvm_wr_u8(w, COLD_EXT_VERSION);
    kvm_wr_u16le(w, bl);
    switch (rec->type) {
    case COLD_EXT_REC_PUT:
        kvm_wr_bytes(w, rec->op.b, COLD_OPID_LEN);
        kvm_wr_u64le(w, rec->gen);
        kvm_wr_u64le(w, rec->len);
        kvm_wr_u64le(w, rec->checksum);
        kvm_wr_u32le(w, rec->orig_seg);
        kvm_wr_u32le(w, rec->seg);
        kvm_wr_u64le(w, rec->orig_off);
        kvm_wr_u64le(w, rec->off);
        break;
    case COLD_EXT_REC_DEL:
        kvm_wr_bytes(w, rec->op.b, COLD_OPID_LEN);
        kvm_wr_u64le(w, rec->gen);
        break;
    case COLD_EXT_REC_MOVE:
        kvm_wr_bytes(w, rec->op.b, COLD_OPID_LEN);
        kvm_wr_u64le(w, rec->gen);
        kvm_wr_u32le(w, rec->seg);
        kvm_wr_u32le(w, 0);
        kvm_wr_u64le(w, rec->off);
        break;
    default:
        kvm_wr_u32le(w, rec->seg);
        kvm_wr_u32le(w, 0);
        break;
    }
    if (w->err)
        return;
    kvm_wr_u64le(w, hsum(w->p + start, w->len - start));
}

int cold_ext_rec_decode(const void *p, size_t n, cold_ext_rec_t *rec, size_t *used)
{
    memset(rec, 0, sizeof(*rec));
    *used = 0;
    kvm_rd_t r;
    kvm_rd_init(&r, p, n);
    uint32_t magic = kvm_rd_u32le(&r);
    uint8_t type = kvm_rd_u8(&r), ver = kvm_rd_u8(&r);
    uint16_t bl = kvm_rd_u16le(&r);
    if (!kvm_rd_ok(&r) || magic != COLD_EXT_REC_MAGIC || ver != COLD_EXT_VERSION ||
        body_len(type) == 0 || bl != body_len(type))
        return KVMESH_ECORRUPT;
    rec->type = type;
    switch (type) {
    case COLD_EXT_REC_PUT:
        kvm_rd_copy(&r, rec->op.b, COLD_OPID_LEN);
        rec->gen = kvm_rd_u64le(&r);
        rec->len = kvm_rd_u64le(&r);
        rec->checksum = kvm_rd_u64le(&r);
        rec->orig_seg = kvm_rd_u32le(&r);
        rec->seg = kvm_rd_u32le(&r);
        rec->orig_off = kvm_rd_u64le(&r);
        rec->off = kvm_rd_u64le(&r);
        break;
    case COLD_EXT_REC_DEL:
        kvm_rd_copy(&r, rec->op.b, COLD_OPID_LEN);
        rec->gen = kvm_rd_u64le(&r);
        break;
    case COLD_EXT_REC_MOVE:
        kvm_rd_copy(&r, rec->op.b, COLD_OPID_LEN);
        rec->gen = kvm_rd_u64le(&r);
        rec->seg = kvm_rd_u32le(&r);
        kvm_rd_zeros(&r, 4);
        rec->off = kvm_rd_u64le(&r);
        break;
    default:
        rec->seg = kvm_rd_u32le(&r);
        kvm_rd_zeros(&r, 4);
        break;
    }
    size_t at = r.off;
    uint64_t s = kvm_rd_u64le(&r);
    if (!kvm_rd_ok(&r) || s != hsum(p, at)) {
        memset(rec, 0, sizeof(*rec));
        return KVMESH_ECORRUPT;
    }
    /* An extent's length must fit a file offset; its place must be aligned past the header. */
    if (type == COLD_EXT_REC_PUT &&
        (rec->len > (UINT64_C(1) << 48) || rec->off < COLD_EXT_DATA_OFF ||
         rec->off % COLD_EXT_ALIGN != 0 || rec->orig_off < COLD_EXT_DATA_OFF ||
         rec->orig_off % COLD_EXT_ALIGN != 0 || rec->off > (UINT64_C(1) << 50))) {
        memset(rec, 0, sizeof(*rec));
        return KVMESH_ECORRUPT;
    }
    if (type == COLD_EXT_REC_MOVE &&
        (rec->off < COLD_EXT_DATA_OFF || rec->off % COLD_EXT_ALIGN != 0 ||
         rec->off > (UINT64_C(1) << 50))) {
        memset(rec, 0, sizeof(*rec));
        return KVMESH_ECORRUPT;
    }
    *used = r.off;
    return 0;
}

void cold_ext_loc_encode(const cold_ext_loc_t *l, cold_locator_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_wr_t w;
    kvm_wr_fixed(&w, out->b, sizeof(out->b));
    kvm_wr_u8(&w, COLD_BACKEND_EXTENT);
    kvm_wr_u8(&w, 1);
    kvm_wr_bytes(&w, l->op.b, COLD_OPID_LEN);
    kvm_wr_u32le(&w, l->seg);
    kvm_wr_u64le(&w, l->off);
    kvm_wr_u64le(&w, l->len);
    kvm_wr_u64le(&w, l->gen);
    size_t n = 0;
    KVM_ASSERT(kvm_wr_finish(&w, &n) == 0 && n == COLD_EXT_LOC_LEN);
    out->len = (uint16_t)n;
}

int cold_ext_loc_decode(const cold_locator_t *loc, cold_ext_loc_t *l)
{
    memset(l, 0, sizeof(*l));
    if (!loc || loc->len != COLD_EXT_LOC_LEN)
        return KVMESH_EINVAL;
    kvm_rd_t r;
    kvm_rd_init(&r, loc->b, loc->len);
    uint8_t kind = kvm_rd_u8(&r), ver = kvm_rd_u8(&r);
    kvm_rd_copy(&r, l->op.b, COLD_OPID_LEN);
    l->seg = kvm_rd_u32le(&r);
    l->off = kvm_rd_u64le(&r);
    l->len = kvm_rd_u64le(&r);
    l->gen = kvm_rd_u64le(&r);
    if (!kvm_rd_end(&r) || kind != COLD_BACKEND_EXTENT || ver != 1)
        return KVMESH_EINVAL;
    return 0;
}
