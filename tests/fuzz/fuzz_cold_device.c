/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_cold_device.c — libFuzzer target for cold_device_decode (the cold-device metadata record;
 * see cold_fuzz.h). */
#include "cold_fuzz.h"

COLD_FUZZ_TARGET(cold_device_t, cold_device_decode, cold_device_encode, cold_device_check)
