/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h — the one helper for reading the host's clocks outside an env: monotonic time in ns
 * or ms, elapsed milliseconds since a monotonic start, wall-clock ms, and absolute timespecs
 * for timed waits. It lives in src/env, not src/core: core is pure (no clock, no I/O, so the
 * simulator stays deterministic), and env is the layer that owns the host's time. Code that
 * runs under an env (protocol logic, timers) reads env_now_ns() instead, so the simulator can
 * drive it; these are for blocking API calls, threads, data-plane I/O deadlines, tests and
 * benchmarks. Any thread; no state.
 */
#ifndef KVMESH_ENV_CLOCK_H
#define KVMESH_ENV_CLOCK_H

#include <stdint.h>
#include <time.h>

/* clk (CLOCK_MONOTONIC, CLOCK_REALTIME, ...) in nanoseconds. */
uint64_t env_clock_ns(clockid_t clk);
/* CLOCK_MONOTONIC in nanoseconds / milliseconds. */
uint64_t env_clock_mono_ns(void);
uint64_t env_clock_mono_ms(void);
/* Milliseconds of CLOCK_MONOTONIC since start_ms (an env_clock_mono_ms() value); 0 when
 * start_ms is in the future. */
uint64_t env_clock_since_ms(uint64_t start_ms);
/* CLOCK_REALTIME (Unix time) in milliseconds. */
uint64_t env_clock_wall_ms(void);
/* The absolute time ms milliseconds from now on clk, for pthread_cond_timedwait and the like. */
void env_clock_after(clockid_t clk, uint64_t ms, struct timespec *ts);

#endif
