/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_health.h — a running store's cold device health from its own backend I/O (docs/cold.md
 * "Device health"). Two parts:
 *
 *   - a counting backend table that forwards every call to the real backend (LocalDir,
 *     ExtentStore) and counts device errors: KVMESH_EIO (a write, read, fsync or probe failed)
 *     and KVMESH_ECORRUPT (one of the device's own records failed its checks); any successful
 *     put/get/del/find resets the run of consecutive errors. [any thread]: atomics only.
 *   - a loop-side state machine that writes the device record's health through the cold core
 *     (cold_device_set_health) and probes the backend on the cold I/O worker while it is
 *     unhealthy:
 *
 *              >= KVM_COLD_HEALTH_ERRORS consecutive errors
 *        OK ----------------------------------------------> MARKING
 *        ^ ^                                                  | record DEGRADED written
 *        |  record HEALTHY written                             v   (a failed write: back to OK,
 *        +--------------------- CLEARING <--- probe ok --- BAD       the next tick retries)
 *                                  | failed write: BAD      |  ^
 *                                                           v  | probe fails
 *                                                        PROBING  (every KVM_COLD_HEALTH_PROBE_MS)
 *
 *     A record found unhealthy in the view while OK (e.g. left DEGRADED before a restart) moves
 *     to BAD, so the probe clears it once the device works. Placement and reserve already skip a
 *     device whose record is not HEALTHY (cold_device_fits); DEGRADED stays readable
 *     (cold_device_readable), so cold copies keep serving reads.
 *
 * Ownership: kvm_cold_health_new allocates; the caller frees with kvm_cold_health_free after
 * the core that uses the wrapped table is closed and no probe job is in flight. The inner
 * backend stays the caller's (it is not closed here).
 */
#ifndef KVMESH_STORE_COLD_HEALTH_H
#define KVMESH_STORE_COLD_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include "cold/cold.h"
#include "cold/cold_backend.h"

#define KVM_COLD_HEALTH_ERRORS   3    /* consecutive device errors that mark the device DEGRADED */
#define KVM_COLD_HEALTH_PROBE_MS 1000 /* probe interval while the device is unhealthy */

enum kvm_cold_health_state {
    KVM_CH_OK = 0,   /* record healthy (as far as this runtime knows), counting errors */
    KVM_CH_MARKING,  /* writing DEGRADED */
    KVM_CH_BAD,      /* record unhealthy: probe every KVM_COLD_HEALTH_PROBE_MS */
    KVM_CH_PROBING,  /* a probe job runs on the worker */
    KVM_CH_CLEARING, /* writing HEALTHY */
};

typedef struct kvm_cold_health kvm_cold_health_t;

/* Runs a probe job on the cold I/O worker: run(job) there, then done(job) on the loop.
 * Returns false when it cannot (the caller's worker is gone): the probe is retried later. */
typedef bool (*kvm_cold_health_exec_fn)(void *ctx, cold_exec_t *job);

/* The counting table over *inner (copied); *wrapped gets the table to attach to the core. */
int kvm_cold_health_new(kvm_cold_health_t **out, const cold_backend_t *inner,
                        cold_backend_t *wrapped);
void kvm_cold_health_free(kvm_cold_health_t *h);

/* [loop] One step, from the store's cold tick: marks, probes, clears (see the diagram). c and
 * dev: the core and this runtime's device; now_ms: CLOCK_MONOTONIC ms. */
void kvm_cold_health_tick(kvm_cold_health_t *h, cold_t *c, const kvm_tier_id_t *dev,
                          uint64_t now_ms, kvm_cold_health_exec_fn exec, void *exec_ctx);

/* [loop] The state, and the counters (device errors seen, consecutive now, marks, clears). */
enum kvm_cold_health_state kvm_cold_health_state(const kvm_cold_health_t *h);
typedef struct kvm_cold_health_stats {
    uint64_t errors, consecutive, marked, cleared, probes;
} kvm_cold_health_stats_t;
void kvm_cold_health_get_stats(const kvm_cold_health_t *h, kvm_cold_health_stats_t *out);
/* [loop] Whether a probe job or a record write is in flight (close waits for neither: the core's
 * callbacks stop at cold_close; the caller drains its worker before freeing). */
bool kvm_cold_health_busy(const kvm_cold_health_t *h);

#endif
