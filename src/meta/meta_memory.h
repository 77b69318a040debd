/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_memory.h — the in-memory metadata backend's extras: fault injection for tests and the
 * simulator, and its URL parser. The backend itself is used through meta.h with memory://NAME.
 *
 * memory://NAME  — handles opened with the same NAME in one process share one store (thread-safe:
 *                  handles on different env threads may share it; the store has a mutex). The
 *                  store lives while at least one handle on it is open; when the last one closes,
 *                  its data is gone.
 * memory://      — (empty NAME) a private store for this handle alone.
 *
 * Lease expiry runs on the env clock of the handle making a call (expired leases are reaped at the
 * start of every call, before it reads or writes), so a simulated env's virtual clock drives
 * expiry deterministically. All handles sharing a store must use envs with one common clock (the
 * process's monotonic clock, or one simulator).
 */
#ifndef KVMESH_META_META_MEMORY_H
#define KVMESH_META_META_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"

#define META_MEMORY_NAME_MAX 64 /* bytes of NAME in memory://NAME: [A-Za-z0-9._-] */

/* Per-handle fault injection (all zero = none). Applies to calls submitted after the change. */
typedef struct meta_memory_faults {
    uint32_t latency_min_ms; /* each call waits a delay drawn uniformly from [min, max] ms */
    uint32_t latency_max_ms; /* (env_rand_u64); with a delay, calls may complete out of order */
    uint32_t fail_next;      /* fail the next N calls ... */
    uint32_t fail_ppm;       /* ... and then each call with probability fail_ppm / 1,000,000 */
    int fail_rc;             /* error of injected failures (0 = KVMESH_EUNAVAILABLE) */
    bool fail_after_apply;   /* injected failures happen after the call took effect, like a lost
                                reply: the outcome is indeterminate to the caller */
    bool partitioned;        /* calls get no answer: they time out at their deadline, unapplied */
} meta_memory_faults_t;

/* Sets the faults of a memory:// handle (any thread). KVMESH_EINVAL for another backend or
 * latency_min_ms > latency_max_ms. */
int meta_memory_set_faults(meta_t *m, const meta_memory_faults_t *f);

/* Test hook (process-wide; NULL = none): called on the submitting handle's env thread for each
 * call submitted on a memory:// handle after it is set, outside the backend's locks, with the
 * handle, the store's NAME and the call (read only). It returns the call's delay in ms, added to
 * any injected latency: the call is applied and answered when that delay has passed (unless a
 * meta_memory_expedite brings it forward). Lets a test order calls exactly: hold one call (a
 * long delay, below the call's deadline) until another is submitted. Any thread may set or
 * clear it (a call being submitted meanwhile sees the old or the new one); arg must outlive
 * every call that may still see it. */
struct meta_call;
typedef uint32_t (*meta_memory_hook_fn)(void *arg, meta_t *m, const char *store,
                                        const struct meta_call *c);
void meta_memory_set_hook(meta_memory_hook_fn fn, void *arg);

/* From the test hook only (on m's env thread): every call of m that the hook delayed and that is
 * still waiting is applied and answered on the next timer pass, in the order submitted, before
 * any call with a later due time (the call being submitted, if the hook gives it a delay). */
void meta_memory_expedite(meta_t *m);

/* Parses "memory://NAME" into name (cap >= META_MEMORY_NAME_MAX + 1; "" for the private store).
 * KVMESH_EURL with a message (kvmesh_last_error) when malformed. */
int meta_memory_parse_url(const char *url, char *name, size_t cap);

#endif
