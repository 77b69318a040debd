/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_cold_reclaim.c — libFuzzer target for cold_reclaim_decode (the cold-reclaim metadata record;
 * see cold_fuzz.h). */
#include "cold_fuzz.h"

COLD_FUZZ_TARGET(cold_reclaim_t, cold_reclaim_decode, cold_reclaim_encode, cold_reclaim_check)
