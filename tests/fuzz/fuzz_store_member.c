/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_store_member.c — libFuzzer target for the member record decoder (src/store/member.c)
 * and the lifecycle request decoder (src/store/lifecycle.c, fed the same value):
 * the input is "<runtime-id key part>\n<JSON value>"; the key is built with the keyspace so
 * both the key parser and the JSON decoder see fuzzed bytes. Accepted records must satisfy the
 * decoder's bounds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "meta/keyspace.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl || (size_t)(nl - data) > 200)
        return 0;
    char id[201];
    memcpy(id, data, (size_t)(nl - data));
    id[nl - data] = 0;
    if (memchr(id, 0, (size_t)(nl - data)))
        return 0;
    char key[KS_KEY_CAP];
    if (ks_member_key(key, sizeof(key), "fz", id) != 0)
        snprintf(key, sizeof(key), "%s", id); /* also feed raw keys */
    static struct kvm_member m;
    char rpc[STORE_ADDR_MAX], dat[TP_ADDR_MAX];
    const uint8_t *val = nl + 1;
    size_t vlen = size - (size_t)(val - data);
    if (kvm_member_record_decode(key, val, vlen, &m, rpc, sizeof(rpc), dat, sizeof(dat)) == 0) {
        KVM_ASSERT(m.rt.epoch >= 1 && m.weight > 0 && m.n_segs <= STORE_MAX_SEGS);
        KVM_ASSERT(strlen(rpc) < sizeof(rpc) && strlen(dat) < sizeof(dat));
    }
    /* the same value as an operator's lifecycle request (src/store/lifecycle.c) */
    enum kvm_member_state want;
    uint64_t at = 0;
    if (kvm_lifecycle_decode(val, vlen, &want, &at) == 0) {
        KVM_ASSERT(want == KVM_MS_DRAINING || want == KVM_MS_ACTIVE);
        char buf[KVM_LIFECYCLE_VALUE_MAX];
        enum kvm_member_state again;
        uint64_t at2 = 0;
        KVM_ASSERT(kvm_lifecycle_encode(want, at, buf, sizeof(buf)) == 0);
        KVM_ASSERT(kvm_lifecycle_decode((const uint8_t *)buf, strlen(buf), &again, &at2) == 0);
        KVM_ASSERT(again == want && at2 == at);
        /* with its drained segments: the request round-trips exactly */
        static struct kvm_lifecycle_req r, r2;
        KVM_ASSERT(kvm_lifecycle_decode_req(val, vlen, &r) == 0);
        KVM_ASSERT(r.want == want && r.at_ms == at && r.n_segs <= STORE_MAX_SEGS);
        KVM_ASSERT(kvm_lifecycle_encode_req(&r, buf, sizeof(buf)) == 0);
        KVM_ASSERT(kvm_lifecycle_decode_req((const uint8_t *)buf, strlen(buf), &r2) == 0);
        KVM_ASSERT(r2.want == r.want && r2.at_ms == r.at_ms && r2.n_segs == r.n_segs &&
                   memcmp(r2.segs, r.segs, r.n_segs * sizeof(r.segs[0])) == 0);
    }
    return 0;
}
