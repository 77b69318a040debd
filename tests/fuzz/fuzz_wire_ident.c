/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_ident.c — libFuzzer target for wire_ident_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"

WIRE_FUZZ_TARGET(kvm_ident_t, wire_ident_decode, wire_ident_encode, kvm_ident_equal, kvm_ident_free)
