/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_bytes.c — libFuzzer target for the byte codec (core/bytes.h). The first input byte
 * splits the rest into a program (ops) and data: each op reads one field of the data with the
 * reader and writes the value back with a growing writer and a small fixed writer. Checked: the
 * reader never reports more consumed than it had, a failed read reads 0/NULL and stays failed,
 * and while the reader is good the growing writer's bytes equal the consumed input byte for
 * byte (every width, both byte orders, length prefixes); the fixed writer either equals a
 * prefix of them or has failed with KVMESH_ETOOBIG.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t nops = KVM_MIN((size_t)data[0], size - 1);
    const uint8_t *ops = data + 1;
    const uint8_t *in = data + 1 + nops;
    size_t in_len = size - 1 - nops;

    kvm_rd_t r;
    kvm_rd_init(&r, in, in_len);
    kvm_wr_t g;
    kvm_wr_growing(&g, 1u << 20);
    uint8_t small[32];
    kvm_wr_t f;
    kvm_wr_fixed(&f, small, sizeof(small));

    for (size_t i = 0; i < nops; i++) {
        bool was_ok = kvm_rd_ok(&r);
        uint64_t v = 0;
        switch (ops[i] % 12) {
        case 0:
            v = kvm_rd_u8(&r);
            kvm_wr_u8(&g, (uint8_t)v);
            kvm_wr_u8(&f, (uint8_t)v);
            break;
        case 1:
            v = kvm_rd_u16le(&r);
            kvm_wr_u16le(&g, (uint16_t)v);
            kvm_wr_u16le(&f, (uint16_t)v);
            break;
        case 2:
            v = kvm_rd_u32le(&r);
            kvm_wr_u32le(&g, (uint32_t)v);
            kvm_wr_u32le(&f, (uint32_t)v);
            break;
        case 3:
            v = kvm_rd_u64le(&r);
            kvm_wr_u64le(&g, v);
            kvm_wr_u64le(&f, v);
            break;
        case 4:
            v = kvm_rd_u16be(&r);
            kvm_wr_u16be(&g, (uint16_t)v);
            kvm_wr_u16be(&f, (uint16_t)v);
            break;
        case 5:
            v = kvm_rd_u32be(&r);
            kvm_wr_u32be(&g, (uint32_t)v);
            kvm_wr_u32be(&f, (uint32_t)v);
            break;
        case 6:
            v = kvm_rd_u64be(&r);
            kvm_wr_u64be(&g, v);
            kvm_wr_u64be(&f, v);
            break;
        case 7: {
            uint32_t n = 0;
            const uint8_t *p = kvm_rd_lp32le(&r, &n);
            KVM_ASSERT(p != NULL || n == 0);
            if (p) {
                kvm_wr_lp32le(&g, p, n);
                kvm_wr_lp32le(&f, p, n);
            }
            break;
        }
        case 8: {
            uint16_t n = 0;
            const uint8_t *p = kvm_rd_lp16le(&r, &n);
            KVM_ASSERT(p != NULL || n == 0);
            if (p) {
                kvm_wr_lp16le(&g, p, n);
                kvm_wr_lp16le(&f, p, n);
            }
            break;
        }
        case 9: {
            size_t n = ops[i] >> 4;
            const uint8_t *p = kvm_rd_bytes(&r, n);
            if (p) {
                kvm_wr_bytes(&g, p, n);
                uint8_t *q = kvm_wr_reserve(&f, n);
                if (q)
                    memcpy(q, p, n);
            }
            break;
        }
        case 10: {
            size_t n = ops[i] >> 4;
            kvm_rd_zeros(&r, n);
            if (kvm_rd_ok(&r)) {
                kvm_wr_zeros(&g, n);
                kvm_wr_zeros(&f, n);
            }
            break;
        }
        default: {
            size_t avail = 0;
            uint8_t *t = kvm_wr_tail(&g, 16, &avail);
            KVM_ASSERT(!kvm_rd_ok(&r) || (t != NULL && avail >= 16));
            size_t n = KVM_MIN(kvm_rd_remaining(&r), (size_t)(ops[i] >> 4));
            const uint8_t *p = kvm_rd_bytes(&r, n);
            if (p && t && n <= avail) {
                memcpy(t, p, n);
                kvm_wr_advance(&g, n);
                kvm_wr_bytes(&f, p, n);
            }
            break;
        }
        }
        KVM_ASSERT(r.off <= in_len);
        if (!kvm_rd_ok(&r)) {
            KVM_ASSERT(v == 0);
            KVM_ASSERT(kvm_rd_remaining(&r) == 0);
            KVM_ASSERT(kvm_rd_bytes(&r, 0) == NULL);
        } else {
            KVM_ASSERT(was_ok);
        }
        if (!kvm_rd_ok(&r))
            break;
    }

    if (kvm_rd_ok(&r)) {
        size_t gl = 0, fl = 0;
        KVM_ASSERT(kvm_wr_finish(&g, &gl) == 0);
        KVM_ASSERT(gl == r.off);
        KVM_ASSERT(gl == 0 || memcmp(g.p, in, gl) == 0);
        int frc = kvm_wr_finish(&f, &fl);
        if (frc == 0) {
            KVM_ASSERT(fl == gl);
            KVM_ASSERT(fl == 0 || memcmp(small, in, fl) == 0);
        } else {
            KVM_ASSERT(frc == KVMESH_ETOOBIG);
            KVM_ASSERT(f.len <= sizeof(small) && memcmp(small, in, f.len) == 0);
        }
        bool at_end = kvm_rd_remaining(&r) == 0;
        KVM_ASSERT(kvm_rd_end(&r) == at_end);
    }
    kvm_wr_free(&g);
    return 0;
}
