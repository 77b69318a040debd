/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_cold_reclaim.c — libFuzzer target for wire_cold_reclaim_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"
#define nofree(p) ((void)(p)) /* plain value: nothing to free */

WIRE_FUZZ_TARGET(kvm_cold_reclaim_t, wire_cold_reclaim_decode, wire_cold_reclaim_encode,
                 kvm_cold_reclaim_equal, nofree)
