/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_cold_op.c — libFuzzer target for cold_op_decode (the cold-op metadata record; see
 * cold_fuzz.h). */
#include "cold_fuzz.h"

COLD_FUZZ_TARGET(cold_op_t, cold_op_decode, cold_op_encode, cold_op_check)
