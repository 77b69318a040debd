/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_handoff.c — libFuzzer target for the hot-upgrade decoders (src/store/handoff.c): the
 * first input byte selects the frame header parser or the index decoder. An accepted index is
 * re-encoded and must decode to the same fields (round trip), and it must hold the invariants
 * the successor relies on: every slot inside its segment, aligned, no two slots overlapping
 * (checked again here by rebuilding an allocator per segment with alloc_reserve_at).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/alloc.h"
#include "store/handoff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_index(const struct kvm_handoff *h)
{
    /* an allocator's bookkeeping lives outside the segment: any size costs only its blocks */
    alloc_t *a[KVM_HANDOFF_MAX_SEGS] = {0};
    for (uint32_t i = 0; i < h->n_segs; i++)
        KVM_ASSERT(alloc_new(&a[i], h->segs[i].size) == 0);
    for (uint32_t i = 0; i < h->n_slots; i++) {
        const struct kvm_handoff_slot *s = &h->slots[i];
        KVM_ASSERT(s->segi < h->n_segs && s->off + s->len <= h->segs[s->segi].size);
        KVM_ASSERT(alloc_reserve_at(a[s->segi], s->off, s->len, NULL) == 0);
    }
    for (uint32_t i = 0; i < h->n_segs; i++) {
        KVM_ASSERT(alloc_check(a[i]) == 0);
        alloc_free(a[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++, size--;
    if (sel % 2 == 0) {
        if (size < KVM_HANDOFF_HDR_LEN)
            return 0;
        uint8_t type;
        uint32_t len, nf;
        if (kvm_handoff_parse_hdr(data, &type, &len, &nf) == 0)
            KVM_ASSERT(type >= KVM_HANDOFF_HELLO && type <= KVM_HANDOFF_REFUSE &&
                       len <= KVM_HANDOFF_MAX_BYTES && nf <= KVM_HANDOFF_MAX_SEGS);
        return 0;
    }
    struct kvm_handoff h, h2;
    if (kvm_handoff_decode(data, size, &h) != 0)
        return 0;
    check_index(&h);
    uint8_t *buf = NULL;
    size_t len = 0;
    KVM_ASSERT(kvm_handoff_encode(&h, &buf, &len) == 0);
    KVM_ASSERT(len == size && memcmp(buf, data, len) == 0); /* one encoding per index */
    KVM_ASSERT(kvm_handoff_decode(buf, len, &h2) == 0);
    KVM_ASSERT(h.n_segs == h2.n_segs && h.n_slots == h2.n_slots && h.epoch == h2.epoch &&
               h.slot_seq == h2.slot_seq);
    for (uint32_t i = 0; i < h.n_slots; i++)
        KVM_ASSERT(h.slots[i].off == h2.slots[i].off && h.slots[i].len == h2.slots[i].len &&
                   kvm_ident_equal(&h.slots[i].ident, &h2.slots[i].ident));
    free(buf);
    kvm_handoff_free(&h);
    kvm_handoff_free(&h2);
    return 0;
}
