/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire_op_id.c — libFuzzer target for wire_op_id_decode (see wire_fuzz.h). */
#include "wire_fuzz.h"
#define nofree(p) ((void)(p)) /* plain value: nothing to free */

WIRE_FUZZ_TARGET(kvm_op_id_t, wire_op_id_decode, wire_op_id_encode, kvm_op_id_equal, nofree)
