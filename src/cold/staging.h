/* SPDX-License-Identifier: Apache-2.0 */
/*
 * staging.h — the remote-restore staging pool (specification "Local and remote restore", the
 * staging lifecycle; docs/cold.md "Staging pool"). Sans-I/O: no clock, no thread, no transport;
 * the caller passes the time and reports transport events. It owns the slot table and the
 * allocation of the caller's memory region among the slots; it does not own the memory.
 *
 * A slot's life:
 *
 *     acquire             ready(checksum ok)          all pins 0
 *   FREE -----> FILLING ------------------> STAGED ---------------> FREE   (recycled)
 *                 |  abort / bad checksum     |  expire: fence the token,
 *                 +--------------------------->FREE  release the reader lease
 *                                             v
 *                                          FENCED --(transfer terminal, promotion pins 0)--> FREE
 *
 * - acquire validates the reader's expectation (namespace, cold owner, route version, locator
 *   fingerprint, length, checksum) against what the owner's exact lookup found, then reserves
 *   `length` bytes of the region and a slot; a full pool (no slot or no bytes) answers
 *   STAGING_EBACKPRESSURE at once: there is no wait queue.
 * - ready (after the backend read filled the bytes) checks the payload checksum, issues the
 *   transfer token and takes the reader pin and the transfer pin; the slot expires at `deadline`.
 * - the reader's ACK releases the reader pin, the terminal transport completion the transfer pin;
 *   promotion takes and releases its own pins (only while STAGED).
 * - expiry fences the token (every later completion or ACK carrying it is ignored and counted
 *   as late), releases the abandoned reader lease, and keeps the slot until the transport is
 *   terminal (staging_transfer_terminal, e.g. after the owner revoked the grant) and every
 *   promotion pin is released.
 * - a slot returns to FREE only with reader, transfer and promotion pins all zero.
 *
 * Tokens are (sequence << 16 | slot index), the sequence never repeats in a pool, so a token of
 * an earlier use of a slot never names its later use. Threading: one thread (the owner's loop).
 */
#ifndef KVMESH_COLD_STAGING_H
#define KVMESH_COLD_STAGING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/version.h"
#include "kvmesh.h"

#define STAGING_SLOTS_MAX     4096          /* slots per pool */
#define STAGING_ALIGN         64            /* slot offsets are aligned to this */
#define STAGING_EBACKPRESSURE KVMESH_EAGAIN /* saturated: retry later (never queued) */

enum staging_state {
    STAGING_FREE = 0,
    STAGING_FILLING, /* acquired: the owner reads the backend into it */
    STAGING_STAGED,  /* verified bytes, token issued, pins held */
    STAGING_FENCED,  /* expired: token fenced, waiting for transport terminal + promotion */
    STAGING_STATE_COUNT
};

/* What the reader expects (the request) and what the owner found (its exact lookup). */
typedef struct {
    uint64_t namespace_hash; /* hash of the route's tenant/domain namespace */
    kvm_id128_t owner;       /* the cold backing's owner runtime */
    uint64_t route_version;  /* the route version the reader resolved */
    uint64_t locator_fp;     /* kvm_cold_backing_fingerprint of the materialized locator */
    uint64_t length;
    uint64_t checksum;
} staging_expect_t;

typedef struct {
    uint32_t slot;
    uint64_t token; /* 0 until ready */
} staging_handle_t;

typedef struct {
    uint32_t slots_used, slots_cap;
    uint64_t bytes_used, bytes_cap;
    uint64_t acquired, recycled, backpressure, rejected; /* rejected: validation failures */
    uint64_t expiries, late_completions, late_acks, checksum_failures;
} staging_stats_t;

typedef struct staging_pool staging_pool_t;

/* Creates a pool of `slots` (1..STAGING_SLOTS_MAX) slots over [mem, mem + bytes). The memory is
 * the caller's (e.g. a transport-registered segment) and must outlive the pool. */
int staging_new(staging_pool_t **out, void *mem, uint64_t bytes, uint32_t slots);
/* Frees the table (asserts nothing is left only when `require_empty`). NULL is a no-op. */
void staging_free(staging_pool_t *p, bool require_empty);

/* Compares the reader's expectation with the owner's view; KVMESH_ECONFLICT names the field
 * that differs (the reader re-resolves the route), 0 when they agree. */
int staging_validate(const staging_expect_t *want, const staging_expect_t *have);

/* Validates, then reserves a slot for want->length bytes. STAGING_EBACKPRESSURE when no slot or
 * no contiguous bytes are free; KVMESH_ETOOBIG when the length exceeds the whole region. */
int staging_acquire(staging_pool_t *p, const staging_expect_t *want, const staging_expect_t *have,
                    staging_handle_t *out);
/* The slot's bytes (valid while the slot is not FREE). */
uint8_t *staging_buf(staging_pool_t *p, uint32_t slot, uint64_t *offset, uint64_t *len);
/* FILLING -> STAGED: the bytes' checksum must equal the expected one (else the slot is freed and
 * KVMESH_ECHECKSUM). Issues h->token, takes the reader and transfer pins, expires at deadline. */
int staging_ready(staging_pool_t *p, staging_handle_t *h, uint64_t checksum, uint64_t deadline);
/* FILLING -> FREE (the backend read failed or the request was cancelled). */
int staging_abort(staging_pool_t *p, uint32_t slot);

/* The reader's terminal transport report / ACK for a token. *applied = false when the token is
 * fenced, stale or repeated (idempotent: nothing changes, counted as late). Returns 0, or
 * KVMESH_EINVAL for a token that never named a slot of this pool. */
int staging_transfer_done(staging_pool_t *p, uint64_t token, bool *applied);
int staging_ack(staging_pool_t *p, uint64_t token, bool *applied);

/* Promotion pins (STAGED only: KVMESH_ECANCELED once fenced or gone). */
int staging_promote_pin(staging_pool_t *p, uint64_t token);
int staging_promote_unpin(staging_pool_t *p, uint32_t slot);

/* Fences every STAGED slot whose deadline <= now (at most `max` of them, bounded work); returns
 * how many. Their tokens are dead from here on. */
uint32_t staging_expire(staging_pool_t *p, uint64_t now, uint32_t max);
/* The owner observed (or forced, by cancelling) the terminal transport state of a FENCED slot:
 * its transfer pin is released. Idempotent. */
int staging_transfer_terminal(staging_pool_t *p, uint32_t slot);
/* The slots FENCED with the transfer pin still held (for the owner to cancel); up to max. */
uint32_t staging_fenced_pending(staging_pool_t *p, uint32_t *slots, uint32_t max);

enum staging_state staging_state_of(const staging_pool_t *p, uint32_t slot);
void staging_pins(const staging_pool_t *p, uint32_t slot, uint32_t *reader, uint32_t *transfer,
                  uint32_t *promotion);
void staging_get_stats(const staging_pool_t *p, staging_stats_t *out);
/* Recomputes occupancy from the table and asserts it matches the counters and that no two
 * live slots overlap; returns 0 or KVMESH_EINTERNAL (for the simulator's checker). */
int staging_check(const staging_pool_t *p);
const char *staging_state_name(enum staging_state s);

#endif
