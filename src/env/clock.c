/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.c — host clock reads and their millisecond arithmetic (clock.h).
 */
#include "env/clock.h"

uint64_t env_clock_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t env_clock_mono_ns(void)
{
    return env_clock_ns(CLOCK_MONOTONIC);
}

uint64_t env_clock_mono_ms(void)
{
    return env_clock_mono_ns() / 1000000u;
}

uint64_t env_clock_since_ms(uint64_t start_ms)
{
    uint64_t now = env_clock_mono_ms();
    return now > start_ms ? now - start_ms : 0;
}

uint64_t env_clock_wall_ms(void)
{
    return env_clock_ns(CLOCK_REALTIME) / 1000000u;
}

void env_clock_after(clockid_t clk, uint64_t ms, struct timespec *ts)
{
    clock_gettime(clk, ts);
    uint64_t ns = (uint64_t)ts->tv_nsec + ms * 1000000ull;
    ts->tv_sec += (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}
