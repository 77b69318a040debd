/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_cold_backing.c — libFuzzer target for wire_cold_backing_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"
#define nofree(p) ((void)(p)) /* plain value: nothing to free */

WIRE_FUZZ_TARGET(kvm_cold_backing_t, wire_cold_backing_decode, wire_cold_backing_encode,
                 kvm_cold_backing_equal, nofree)
