/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handoff.h — hot upgrade: a predecessor runtime hands its registered memory (the memfd
 * segments) and its owner index (the slots carved from them) to a successor process with the
 * same stable runtime id, so that the payload survives the upgrade without a copy.
 *
 * Protocol over a connected unix stream socket (kvmeshd --upgrade-socket / --upgrade-from):
 *
 *   successor                         predecessor (running, ACTIVE)
 *     HELLO {runtime id}  ----------->  checks the id is its own; waits for SIGTERM
 *                                       SIGTERM: state DRAINING (no new placements); waits,
 *                                       bounded, until no reservation or eviction is in flight;
 *                                       stops housekeeping; exports the index
 *                   <-----------------  STATE {index} + one fd per segment (SCM_RIGHTS)
 *     validates, maps every segment
 *     MAPPED  ------------------------> closes its runtime (lease revoked, no drain: the memory
 *                                       lives on in the successor's mappings)
 *                   <-----------------  CLOSED
 *     opens its runtime over the adopted segments and slots: it joins through the normal
 *     fenced membership path (a new epoch), publishing the same segment ids, so every route
 *     that names a replica in them is served again.
 *
 *   Either side may send REFUSE {reason text} instead and close; the predecessor then falls
 *   back to its ordinary drain.
 *
 * Frame: 16 bytes {u32le magic 'KVMH', u8 version, u8 type, u16 zero, u32le payload length,
 * u32le fd count}, the fds attached to the header, then the payload. Every bound is checked
 * before anything is allocated (KVM_HANDOFF_MAX_*).
 *
 * The index (STATE payload, little-endian): u32 version | id[16] | u64 epoch | u64 slot_seq |
 * u32 n_segs | n_segs x {u64 id, u64 size} | u32 n_slots | n_slots x {u8 segi, u8 state,
 * u64 off, u64 len, u64 seq, u16 ident length, canonical ident}. The decoder rejects: unknown
 * version, zero or duplicate segment ids, sizes outside (0, SEG_MAX_SIZE], segi out of range,
 * unknown state, misaligned offsets, slots outside their segment or overlapping another slot,
 * seq above slot_seq, invalid identities, trailing bytes.
 *
 * Ownership: struct kvm_handoff owns its slots' identities and its segments' fds (-1 = none);
 * kvm_handoff_free releases them. Threading: the codec and socket helpers are pure / blocking on
 * the caller's thread; kvm_handoff_export runs the loop-side parts on the runtime's loop.
 */
#ifndef KVMESH_STORE_HANDOFF_H
#define KVMESH_STORE_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "core/ident.h"
#include "core/version.h"

#define KVM_HANDOFF_VERSION   1u
#define KVM_HANDOFF_MAGIC     0x484d564bu /* "KVMH" little-endian */
#define KVM_HANDOFF_MAX_SEGS  64u         /* == STORE_MAX_SEGS */
#define KVM_HANDOFF_MAX_SLOTS (1u << 22)
#define KVM_HANDOFF_MAX_BYTES (1u << 30) /* one frame's payload */
#define KVM_HANDOFF_HDR_LEN   16u

enum kvm_handoff_msg {
    KVM_HANDOFF_HELLO = 1,
    KVM_HANDOFF_STATE = 2,
    KVM_HANDOFF_MAPPED = 3,
    KVM_HANDOFF_CLOSED = 4,
    KVM_HANDOFF_REFUSE = 5,
};

enum kvm_handoff_slot_state {
    KVM_HANDOFF_COMMITTED = 1, /* referenced by a route: adopted into the clock ring */
    KVM_HANDOFF_RECLAIM = 2,   /* waiting for its grace window: adopted into the reclaim queue */
};

struct kvm_handoff_seg {
    uint64_t id, size;
    int fd; /* owned; -1 when not (yet) received */
};

struct kvm_handoff_slot {
    uint32_t segi;
    uint8_t state; /* enum kvm_handoff_slot_state */
    uint64_t off, len, seq;
    kvm_ident_t ident; /* owned */
};

struct kvm_handoff {
    kvm_runtime_id_t id;
    uint64_t epoch;    /* the predecessor's epoch (the successor gets a new one) */
    uint64_t slot_seq; /* commit-order counter: the successor continues above it */
    uint32_t n_segs;
    struct kvm_handoff_seg segs[KVM_HANDOFF_MAX_SEGS];
    uint32_t n_slots, cap_slots;
    struct kvm_handoff_slot *slots;
};

void kvm_handoff_init(struct kvm_handoff *h);
/* Closes every fd, frees every identity and the slot array; h is re-initialized. */
void kvm_handoff_free(struct kvm_handoff *h);
/* Appends a slot (the identity is copied). KVMESH_ENOSPC beyond KVM_HANDOFF_MAX_SLOTS. */
int kvm_handoff_add_slot(struct kvm_handoff *h, uint32_t segi, uint8_t state, uint64_t off,
                         uint64_t len, uint64_t seq, const kvm_ident_t *ident);

/* Encodes the index (fds are not part of it). *out is malloc'd, owned by the caller. */
int kvm_handoff_encode(const struct kvm_handoff *h, uint8_t **out, size_t *len);
/* Decodes and validates an index into an initialized, empty *h (segment fds set to -1).
 * KVMESH_EPROTO with a message naming the first violation; *h is freed on failure. */
int kvm_handoff_decode(const uint8_t *buf, size_t len, struct kvm_handoff *h);

/* One frame on a blocking stream socket, bounded by timeout_ms in total. send: fds (n_fds <=
 * KVM_HANDOFF_MAX_SEGS) are duplicated by the kernel, still the caller's. recv: *payload is
 * malloc'd (NULL when empty), received fds are the caller's (closed on failure); a frame with
 * more than max_fds fds, a bad header or a payload over KVM_HANDOFF_MAX_BYTES is KVMESH_EPROTO. */
int kvm_handoff_send_msg(int sock, uint8_t type, const void *payload, size_t len, const int *fds,
                         uint32_t n_fds, uint32_t timeout_ms);
int kvm_handoff_recv_msg(int sock, uint8_t *type, uint8_t **payload, size_t *len, int *fds,
                         uint32_t max_fds, uint32_t *n_fds, uint32_t timeout_ms);

/* Checks a frame header (KVM_HANDOFF_HDR_LEN bytes): 0 and the fields, or KVMESH_EPROTO. */
int kvm_handoff_parse_hdr(const uint8_t *hdr, uint8_t *type, uint32_t *len, uint32_t *n_fds);

struct kvm_rt;
/* owner.c, which owns the slots. Export (loop thread, nothing in flight): fills *out with the
 * segments (fds duplicated) and every committed or reclaiming slot; KVMESH_EAGAIN while a
 * segment is retiring. Adopt (instead of kvm_owner_init, before the loop starts): maps every
 * segment of h (the fds pass to the registry; h's entries become -1) and rebuilds allocators and
 * slots exactly; reclaiming slots get a fresh grace window once housekeeping starts. */
int kvm_owner_export(struct kvm_rt *rt, struct kvm_handoff *out);
int kvm_owner_adopt(struct kvm_rt *rt, struct kvm_handoff *h);

struct kvm_store_config;
/* Successor: kvm_rt_open over the segments and slots of h (kvm_owner_adopt) instead of fresh
 * ones; cfg->runtime_id must be h's id. h keeps what was not adopted (free it after). */
int kvm_rt_open_adopt(struct kvm_rt **out, const struct kvm_store_config *cfg,
                      struct kvm_handoff *h);

/* Predecessor: publishes DRAINING, waits (bounded by timeout_ms) until no reservation, waiter or
 * eviction is in flight, stops the owner's housekeeping and fills *out (initialized, empty) with
 * the segments (duplicated fds) and every committed or reclaiming slot. After success the
 * runtime must only be closed: its allocation state belongs to the successor.
 * KVMESH_ETIMEDOUT when it does not settle (housekeeping keeps running: the caller drains). */
int kvm_handoff_export(struct kvm_rt *rt, uint32_t timeout_ms, struct kvm_handoff *out);
/* After a successful export whose hand-over then failed (the successor went away before it
 * answered MAPPED): restarts the owner's housekeeping, so the runtime can drain as usual. */
int kvm_handoff_resume(struct kvm_rt *rt);

#endif
