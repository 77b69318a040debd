/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_route.c — libFuzzer target for wire_route_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"

WIRE_FUZZ_TARGET(kvm_route_t, wire_route_decode, wire_route_encode, kvm_route_equal, kvm_route_free)
