/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_put_payload.c — libFuzzer target for kvm_put_payload_decode (src/store/put_payload.c), the
 * claim payload a replay rebuilds a route from and an owner reads to keep a held slot: anything
 * accepted re-encodes to the same bytes, names exactly its replicas' slots, and stays within
 * KVM_PUT_PAYLOAD_MAX and TN_PAYLOAD_MAX.
 */
#include <stdint.h>
#include <string.h>

#include "core/util.h"
#include "store/put_payload.h"
#include "tenant/tenant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvm_put_payload_t p;
    if (kvm_put_payload_decode(data, size, &p) != 0)
        return 0;
    KVM_ASSERT(size <= KVM_PUT_PAYLOAD_MAX && size <= TN_PAYLOAD_MAX);
    uint8_t again[KVM_PUT_PAYLOAD_MAX];
    size_t n = 0;
    KVM_ASSERT(kvm_put_payload_encode(&p, again, sizeof(again), &n) == 0);
    KVM_ASSERT(n == size && memcmp(again, data, size) == 0);
    KVM_ASSERT(p.has_locators ? p.n >= 1 && p.n <= KVM_MAX_REPLICAS : p.n == 0);
    for (uint32_t i = 0; i < p.n; i++) {
        KVM_ASSERT(p.rep[i].length == p.length);
        KVM_ASSERT(kvm_put_payload_names(&p, &p.rep[i].owner, p.rep[i].segment, p.rep[i].offset));
    }
    return 0;
}
