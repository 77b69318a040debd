/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bytes.h — the one byte codec of the hand-written wire formats: a bounds-checked reader over
 * (ptr, len) and a writer into a fixed caller buffer or a growing heap buffer. Every format laid
 * out by hand goes through it, so bounds checks live in one place: the RPC frame header, env
 * body and handshake transcript, the data-plane headers, the route messages, shard record,
 * policy and owner-scan cursor, the store bodies and env envelope, the trace context, and in
 * core the record frame header and the canonical identity (docs/core-model.md).
 *
 * Integers are fixed width, little-endian (_le) or big-endian (_be): each format keeps the byte
 * order it was specified with (the RPC frame header is big-endian, the data plane, route and
 * store bodies little-endian).
 *
 * Both sides keep a sticky error: after the first failure every further call is a no-op that
 * reads 0 / NULL, so a codec reads or writes all its fields and checks once at the end
 * (kvm_rd_end / kvm_wr_finish). A reader never touches a byte outside [p, p + len); a writer
 * never writes past its capacity (fixed) or its bound (growing).
 *
 * Ownership: a reader borrows its input; pointers it returns point into that input. A fixed
 * writer borrows the caller's buffer; a growing writer owns its heap buffer until kvm_wr_take
 * hands it over (or kvm_wr_free drops it). Pure, no shared state: any thread.
 */
#ifndef KVMESH_CORE_BYTES_H
#define KVMESH_CORE_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- reader -------------------------------------------------------------------------------- */

typedef struct kvm_rd {
    const uint8_t *p;
    size_t len; /* bytes in p */
    size_t off; /* bytes consumed */
    bool bad;   /* sticky: a read ran past the end, or kvm_rd_fail was called */
} kvm_rd_t;

/* A reader over p[0..len) (p may be NULL when len is 0). */
void kvm_rd_init(kvm_rd_t *r, const void *p, size_t len);

/* Consumes n bytes and returns a pointer to them, or NULL (and the reader turns bad) when fewer
 * than n remain. n == 0 returns a non-NULL pointer unless the reader is bad. */
const uint8_t *kvm_rd_bytes(kvm_rd_t *r, size_t n);
/* Copies n bytes into dst; on failure dst is zeroed. */
void kvm_rd_copy(kvm_rd_t *r, void *dst, size_t n);
/* Skips n bytes that must all be zero (reserved/padding); a non-zero byte makes the reader bad. */
void kvm_rd_zeros(kvm_rd_t *r, size_t n);

uint8_t kvm_rd_u8(kvm_rd_t *r);
uint16_t kvm_rd_u16le(kvm_rd_t *r);
uint32_t kvm_rd_u32le(kvm_rd_t *r);
uint64_t kvm_rd_u64le(kvm_rd_t *r);
uint16_t kvm_rd_u16be(kvm_rd_t *r);
uint32_t kvm_rd_u32be(kvm_rd_t *r);
uint64_t kvm_rd_u64be(kvm_rd_t *r);

/* Length-prefixed bytes: a u32le (or u16le) count, then that many bytes. Returns the bytes and
 * *n, or NULL and *n = 0 (reader bad) when the count or the bytes are not there. */
const uint8_t *kvm_rd_lp32le(kvm_rd_t *r, uint32_t *n);
const uint8_t *kvm_rd_lp16le(kvm_rd_t *r, uint16_t *n);

/* Bytes not yet consumed (0 when bad). */
size_t kvm_rd_remaining(const kvm_rd_t *r);
/* Marks the reader bad (a field the caller checked is invalid). */
void kvm_rd_fail(kvm_rd_t *r);
/* True when nothing failed so far. */
bool kvm_rd_ok(const kvm_rd_t *r);
/* "Must be at end": true when nothing failed and every byte was consumed; trailing bytes make
 * the reader bad. */
bool kvm_rd_end(kvm_rd_t *r);

/* ---- writer -------------------------------------------------------------------------------- */

typedef struct kvm_wr {
    uint8_t *p;
    size_t cap; /* bytes available at p */
    size_t len; /* bytes written */
    size_t max; /* growing: the most bytes it may hold; fixed: == cap */
    bool grow;  /* owns p and may realloc it */
    int err;    /* sticky: 0, KVMESH_ETOOBIG (does not fit) or KVMESH_ENOMEM */
} kvm_wr_t;

/* A writer into buf[0..cap) (the caller's buffer, e.g. a fixed frame header). */
void kvm_wr_fixed(kvm_wr_t *w, void *buf, size_t cap);
/* A writer into a heap buffer that grows up to max bytes (KVMESH_ETOOBIG beyond). */
void kvm_wr_growing(kvm_wr_t *w, size_t max);

/* Appends n bytes and returns where they go (for the caller to fill), or NULL (writer fails)
 * when they do not fit. */
uint8_t *kvm_wr_reserve(kvm_wr_t *w, size_t n);
void kvm_wr_bytes(kvm_wr_t *w, const void *src, size_t n);
void kvm_wr_zeros(kvm_wr_t *w, size_t n);

void kvm_wr_u8(kvm_wr_t *w, uint8_t v);
void kvm_wr_u16le(kvm_wr_t *w, uint16_t v);
void kvm_wr_u32le(kvm_wr_t *w, uint32_t v);
void kvm_wr_u64le(kvm_wr_t *w, uint64_t v);
void kvm_wr_u16be(kvm_wr_t *w, uint16_t v);
void kvm_wr_u32be(kvm_wr_t *w, uint32_t v);
void kvm_wr_u64be(kvm_wr_t *w, uint64_t v);

/* A u32le (u16le) count then the n bytes; n must fit the count (else the writer fails). */
void kvm_wr_lp32le(kvm_wr_t *w, const void *src, size_t n);
void kvm_wr_lp16le(kvm_wr_t *w, const void *src, size_t n);

/* Overwrites 4 already-written bytes at `at` with v (a length known only later). */
void kvm_wr_patch_u32le(kvm_wr_t *w, size_t at, uint32_t v);

/* The free tail for an encoder that writes in place: makes at least `want` bytes available
 * (growing) and returns the tail and *avail, or NULL when the writer failed; then
 * kvm_wr_advance(w, n) with n <= *avail commits what was written there. */
uint8_t *kvm_wr_tail(kvm_wr_t *w, size_t want, size_t *avail);
void kvm_wr_advance(kvm_wr_t *w, size_t n);

/* Sets the sticky error (if none is set yet). */
void kvm_wr_fail(kvm_wr_t *w, int err);
/* 0 and *len = bytes written, or the sticky error. */
int kvm_wr_finish(const kvm_wr_t *w, size_t *len);
/* Growing writer: hands its buffer to the caller (free()) and *len; NULL on error or when
 * nothing was written. The writer is empty afterwards. */
uint8_t *kvm_wr_take(kvm_wr_t *w, size_t *len);
/* Growing writer: frees its buffer. No-op for a fixed writer. */
void kvm_wr_free(kvm_wr_t *w);

#endif
