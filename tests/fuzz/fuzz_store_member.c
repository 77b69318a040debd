/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_store_member.c — libFuzzer target for the member record decoder (src/store/member.c):
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
    return 0;
}
