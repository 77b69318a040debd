/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_runtime.c — libFuzzer target for wire_runtime_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"
#define nofree(p) ((void)(p)) /* plain value: nothing to free */

WIRE_FUZZ_TARGET(kvm_runtime_t, wire_runtime_decode, wire_runtime_encode, kvm_runtime_equal, nofree)
