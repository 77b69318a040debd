/* SPDX-License-Identifier: Apache-2.0 */
/*
 * put_inline.h — inline writes of a single small put (docs/store.md "Inline writes"): the
 * reservation to a remote owner over tcp carries the payload (STORE_RPC_RESERVE_INLINE), the
 * owner copies it into the slot it reserves and verifies it against the checksum, so the put is
 * two exchanges instead of three (reserve, transport WRITE, route CAS).
 *
 *   app thread (data.c put_impl)   kvm_put_inline_prepare: the value and its checksum, before
 *                                  the PLACE op runs
 *   loop (ops_place.c)             kvm_put_inline_wants / _body: whether a reservation carries
 *                                  the bytes, and its request body; kvm_put_inline_reserved: a
 *                                  reservation answered; kvm_put_inline_refused: an older owner
 *   owner's loop (runtime.c)       kvm_put_inline_register: the STORE_RPC_RESERVE_INLINE handler
 *
 * Threads as marked. The op's winl fields (store.h kvm_op_t) are written by the app thread
 * before kvm_op_run; while the op runs the loop alone reads them and may clear winl.on and
 * winl.sum_later (a value summed later: kvm_put_inline_reserved, put_primary.c); the app
 * thread reads winl.on again once the PLACE op completed (data.c: summed already or not).
 */
#ifndef KVMESH_STORE_PUT_INLINE_H
#define KVMESH_STORE_PUT_INLINE_H

#include <stdbool.h>
#include <stddef.h>

#include "store/data.h"
#include "store/store.h"

/* App thread, before kvm_op_run(place): for a single put (n == 1) of 1..inline_write_max bytes
 * under transport tcp or auto, records the value (borrowed: the caller waits for the op) in
 * place->winl, computes its checksum into place->items[0].checksum (one pass, counted) and sets
 * place->winl.on. Under shm the same up to STORE_PUT_PRIMARY_SHM_MAX (a put at the primary's
 * bound). Above inline_write_max up to STORE_PUT_PRIMARY_RAW_MAX (tcp or auto, one replica, no
 * cold tier) it records the value without summing it (winl.sum_later: put_primary.c sums it as
 * it lends or stages it, or the first reservation made clears winl.on so the payload stage sums
 * it).
 * Otherwise leaves place->winl.on false. */
void kvm_put_inline_prepare(kvm_rt_t *rt, kvm_op_t *place, const struct kvm_sg *sgs, size_t n);

/* Loop: whether the reservation of op's item on the remote owner (data_addr: its transport
 * address) carries the bytes: the op prepared them, the owner is not on this host under
 * transport auto (its writes go through shared memory), and it did not refuse the message.
 * The caller asks only before op's deadline (its caller waits until deadline + slack, so the
 * value is still there while the body is built in the same loop turn); never once abandoned. */
bool kvm_put_inline_wants(kvm_rt_t *rt, const kvm_op_t *op, const kvm_runtime_t *owner,
                          const char *data_addr);

/* Loop: the STORE_RPC_RESERVE_INLINE body of op's item `it` for owner (heap, the caller frees),
 * *len bytes: the reservation's fields, the checksum and the value gathered from op->winl.
 * NULL (error set) when out of memory or the value does not fit the message. */
uint8_t *kvm_put_inline_body(const kvm_op_t *op, const struct kvm_item *it,
                             const kvm_runtime_t *owner, uint32_t ttl_ms, size_t *len);

/* Loop: a reservation of op answered successfully into r; inl: it was an inline one (the owner
 * holds the bytes): marks r written and counts the payload's copies (both socket copies, as a
 * tcp write's). A value not summed yet (winl.sum_later) is left to the payload stage (winl.on
 * cleared). */
void kvm_put_inline_reserved(kvm_op_t *op, struct kvm_res *r, bool inl);

/* Loop: owner answered an inline reservation with KVMESH_ENOTSUP (a peer that predates it):
 * its reservations are plain from now on (until it restarts with a new epoch). */
void kvm_put_inline_refused(kvm_rt_t *rt, const kvm_runtime_t *owner);

/* Before the loop serves requests: registers the owner's STORE_RPC_RESERVE_INLINE handler. */
void kvm_put_inline_register(kvm_rt_t *rt);

/* Owner's loop: copies the len bytes at src into the reserved range (seg, off) through the
 * reservation's write grant (token), as a transport WRITE with that grant would, with the checksum
 * fused into the copy; 0, or an error with msg set (src NULL: KVMESH_ENOMEM; a range the grant
 * refuses: KVMESH_EUNAVAILABLE; a mismatch: KVMESH_ECHECKSUM). The caller releases the slot
 * (kvm_put_inline_release, by its token) on failure. Shared with put_primary.c. */
int kvm_put_inline_fill(kvm_rt_t *rt, const uint8_t *src, uint64_t len, uint64_t checksum,
                        uint64_t seg, uint64_t off, uint64_t token, char *msg, size_t cap);
void kvm_put_inline_release(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token);

/* Test-only: whether the body being built takes one armed bad checksum (put_primary.c's bodies
 * share the count with inline reservations). */
bool kvm_put_inline_test_bad_sum(void);

/* Test-only (as quota.h's kvm_quota_test_* hooks): the next n inline reservation bodies built in
 * this process (any runtime) carry a wrong checksum, so their owners answer KVMESH_ECHECKSUM.
 * Returns the count still armed before the call. Any thread. */
uint32_t kvm_put_inline_test_bad_sums(uint32_t n);

#endif
