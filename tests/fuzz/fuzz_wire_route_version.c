/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_route_version.c — libFuzzer target for wire_route_version_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"
#define nofree(p) ((void)(p)) /* plain value: nothing to free */

WIRE_FUZZ_TARGET(kvm_route_version_t, wire_route_version_decode, wire_route_version_encode,
                 kvm_route_version_equal, nofree)
