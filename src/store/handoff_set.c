/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handoff_set.c — struct kvm_handoff as a container: init, free, append a slot (handoff.h).
 *
 * A leaf below handoff.c (the codec, the socket frames and the predecessor's export, which calls
 * owner.c) and owner.c (kvm_owner_export fills the index slot by slot): both call it, it calls
 * neither (docs/architecture.md "Store layering"). Ownership is handoff.h's: the struct owns its
 * slots' identities and its segments' fds.
 */
#include "store/handoff.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

void kvm_handoff_init(struct kvm_handoff *h)
{
    memset(h, 0, sizeof(*h));
    for (uint32_t i = 0; i < KVM_HANDOFF_MAX_SEGS; i++)
        h->segs[i].fd = -1;
}

void kvm_handoff_free(struct kvm_handoff *h)
{
    for (uint32_t i = 0; i < KVM_HANDOFF_MAX_SEGS; i++)
        if (h->segs[i].fd >= 0)
            close(h->segs[i].fd);
    for (uint32_t i = 0; i < h->n_slots; i++)
        kvm_ident_free(&h->slots[i].ident);
    free(h->slots);
    kvm_handoff_init(h);
}

int kvm_handoff_add_slot(struct kvm_handoff *h, uint32_t segi, uint8_t state, uint64_t off,
                         uint64_t len, uint64_t seq, const kvm_ident_t *ident)
{
    if (h->n_slots == KVM_HANDOFF_MAX_SLOTS)
        return kvm_errf(KVMESH_ENOSPC, "more than %u slots cannot be handed over",
                        KVM_HANDOFF_MAX_SLOTS);
    if (h->n_slots == h->cap_slots) {
        uint32_t nc = h->cap_slots ? h->cap_slots * 2 : 256;
        if (nc > KVM_HANDOFF_MAX_SLOTS)
            nc = KVM_HANDOFF_MAX_SLOTS;
        void *p = realloc(h->slots, (size_t)nc * sizeof(*h->slots));
        if (!p)
            return KVMESH_ENOMEM;
        h->slots = p;
        h->cap_slots = nc;
    }
    struct kvm_handoff_slot *s = &h->slots[h->n_slots];
    memset(s, 0, sizeof(*s));
    if (kvm_ident_copy(&s->ident, ident) != 0)
        return KVMESH_ENOMEM;
    s->segi = segi;
    s->state = state;
    s->off = off;
    s->len = len;
    s->seq = seq;
    h->n_slots++;
    return 0;
}
