/* SPDX-License-Identifier: Apache-2.0 */
/*
 * put_primary.h — a single small put in one exchange when its owner is the key's shard primary
 * (docs/store.md "Puts at the primary", docs/protocol.md "Put at the primary"): the requester
 * sends STORE_RPC_PUT_PRIMARY (an inline reservation: the reservation's fields, the checksum and
 * the bytes) to that owner, which reserves and writes the bytes as for STORE_RPC_RESERVE_INLINE
 * and then publishes the route itself, through its own route service, with the same fenced CAS,
 * conflict retries, settling, commit and releases as the requester's publication (a PUBLISH op
 * run on its loop), and answers with the outcome and the published route.
 *
 *   loop (ops_place.c)       kvm_put_primary_wants / _body: whether a reservation goes as a put
 *                            at the primary, and its request body; kvm_put_primary_answer: its
 *                            answer decoded (an older owner remembered)
 *   owner's loop             kvm_put_primary_register: the STORE_RPC_PUT_PRIMARY handler
 */
#ifndef KVMESH_STORE_PUT_PRIMARY_H
#define KVMESH_STORE_PUT_PRIMARY_H

#include <stdbool.h>
#include <stddef.h>

#include "net/rpc.h"
#include "store/proto.h"
#include "store/store.h"

/* Loop: whether the reservation of op's item `it` on the remote owner (data_addr: its transport
 * address) goes as a put at the primary: a single put whose value the app thread prepared
 * (kvm_put_inline_prepare; an API put, one replica wanted, none held, not abandoned) without
 * tenant quota and without a cold tier here, of at most STORE_PUT_PRIMARY_SHM_MAX bytes to an
 * owner whose payload writes go through shared memory (transport shm, or auto on this host),
 * else of at most inline_write_max bytes in the body (STORE_RPC_PUT_PRIMARY) or above it up to
 * STORE_PUT_PRIMARY_RAW_MAX as the frame's raw payload (STORE_RPC_PUT_PRIMARY_RAW), to an owner
 * that this runtime's route view names as the primary of the key's shard (id and epoch) and
 * that did not refuse that message. */
bool kvm_put_primary_wants(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                           const kvm_runtime_t *owner, const char *data_addr);

/* Loop: the STORE_RPC_PUT_PRIMARY body of op's item for owner (heap, the caller frees), *len
 * bytes; budget_ms: what the call has left (the owner's publication ends within it). NULL (error
 * set) when out of memory. */
uint8_t *kvm_put_primary_body(const kvm_op_t *op, const struct kvm_item *it,
                              const kvm_runtime_t *owner, uint32_t ttl_ms, uint32_t budget_ms,
                              size_t *len);

/* Whether op's item goes in the raw-payload form (its value is above inline_write_max). */
bool kvm_put_primary_raw(const kvm_rt_t *rt, const struct kvm_item *it);

/* Loop: the STORE_RPC_PUT_PRIMARY_RAW request of op's item for owner: its body (the head) into
 * head (STORE_PUT_PRIMARY_HEAD_MAX bytes), *head_len bytes, and the value gathered into a heap
 * buffer that is returned (the frame's raw payload: the caller keeps it until the call's
 * callback, then gives it back by kvm_put_primary_raw_free). A value whose checksum the app
 * thread left to the loop (op->winl.sum_later) is summed in the same copy (it->checksum set). NULL
 * (error set) when out of memory.
 */
uint8_t *kvm_put_primary_raw_body(kvm_op_t *op, struct kvm_item *it, const kvm_runtime_t *owner,
                                  uint32_t ttl_ms, uint32_t budget_ms, uint8_t *head,
                                  size_t *head_len);

/* Loop: the STORE_RPC_PUT_PRIMARY_RAW request of op's item for owner with the caller's own value
 * as the frame's raw payload (no staged copy): its head into head as kvm_put_primary_raw_body,
 * and the value's parts (op->winl.iov) into iov[0, *niov) for an rpc_msg with `lend` set (the
 * RPC layer copies whatever it has not written when rpc_call returns: the caller's bytes are
 * read only while the op runs before its deadline, as the staged copy read them). A value whose
 * checksum the app thread left to the loop (op->winl.sum_later) is summed in one read-only pass
 * (it->checksum set). 0; 1 (nothing done) when the value has more than RPC_MAX_IOV parts (then
 * kvm_put_primary_raw_body); a negative error (set) when the head cannot be encoded. */
int kvm_put_primary_raw_lend(kvm_op_t *op, struct kvm_item *it, const kvm_runtime_t *owner,
                             uint32_t ttl_ms, uint32_t budget_ms, uint8_t *head, size_t *head_len,
                             uv_buf_t *iov, unsigned *niov);

/* Loop: gives a value kvm_put_primary_raw_body staged back for reuse (NULL: nothing). */
void kvm_put_primary_raw_free(kvm_rt_t *rt, uint8_t *val);

/* At the runtime's last free (runtime.c), once no call is left: frees the kept buffers. */
void kvm_put_primary_fini(kvm_rt_t *rt);

/* What a PUT_PRIMARY answer says to the requester. */
enum kvm_prim_outcome {
    KVM_PRIM_PUBLISHED,    /* the put is published: route (and seg/offset/token) set */
    KVM_PRIM_FALLBACK,     /* nothing was reserved (declined, or an owner that predates the
                              message, now remembered): the requester takes the normal path */
    KVM_PRIM_NOT_RESERVED, /* the reservation failed (status, msg): nothing held */
    KVM_PRIM_FAILED,       /* the publication failed at the owner (status, msg): the owner
                              released its reservation or, where the CAS may have applied, kept
                              it for its expiry to settle */
    KVM_PRIM_UNKNOWN,      /* no answer (timeout, lost connection, malformed): the put may have
                              been published (status, msg) */
};

struct kvm_prim_answer {
    enum kvm_prim_outcome outcome;
    int status;
    uint64_t seg, offset, token;
    kvm_route_t route; /* PUBLISHED: owned (kvm_route_free); else initialized and empty */
    char msg[STORE_PRIM_MSG_MAX + 64];
};

/* Loop: decodes the answer of a put at the primary to owner (raw: the raw-payload form) into *a
 * (always filled; the caller kvm_route_free's a->route). An owner that answers KVMESH_ENOTSUP
 * (no handler) is remembered: kvm_put_primary_wants is false for it, for that form, from then on
 * (until it restarts with a new epoch). */
void kvm_put_primary_answer(kvm_rt_t *rt, const kvm_runtime_t *owner, bool raw,
                            const struct rpc_result *res, struct kvm_prim_answer *a);

/*
 * Batches (docs/store.md "Puts at the primary", "Batches"): the items of a batch put whose owner
 * is their key's shard primary go to it as STORE_RPC_PUT_PRIMARY_BATCH, one message per owner
 * of at most STORE_PUT_PRIMARY_BATCH_MAX items and STORE_PUT_PRIMARY_BATCH_BYTES value bytes
 * (ops_place.c groups them); the owner reserves and writes each, publishes them with one PUBLISH
 * op (one route CAS batch, mirrored as one), and answers each item as the single form would.
 */

/* Loop: whether op's item `it` (a batch put whose values the app thread lent: op->wbat) goes at
 * the primary to the remote owner (data_addr: its transport address): one replica wanted, none
 * held, no tenant quota, no cold tier here, not abandoned, a value of 1..inline_write_max bytes
 * and at most STORE_PUT_PRIMARY_BATCH_ITEM_MAX (STORE_PUT_PRIMARY_SHM_MAX to an owner whose
 * payload writes go through shared memory: transport shm, or auto on this host), an owner that
 * this runtime's route view names as the primary of the key's shard and that did not refuse the
 * batch message. The caller asks only before op's deadline. */
bool kvm_put_primary_batch_wants(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                                 const kvm_runtime_t *owner, const char *data_addr);

/* Loop: the STORE_RPC_PUT_PRIMARY_BATCH body of op's items its[0, n) for owner (heap, the caller
 * frees), *len bytes: each value gathered from op->wbat with its checksum fused into the copy
 * (its->checksum set; one checksum pass counted per item). NULL (error set) when out of memory
 * or the items exceed the message's bounds. */
uint8_t *kvm_put_primary_batch_body(kvm_op_t *op, struct kvm_item *const *its, uint16_t n,
                                    const kvm_runtime_t *owner, uint32_t ttl_ms, uint32_t budget_ms,
                                    size_t *len);

/* Loop: decodes the answer of a batch sent to owner into a[0, n) (always all filled, as
 * kvm_put_primary_answer fills one: the caller kvm_route_free's each a[i].route). No answer at
 * all (timeout, lost connection, malformed, a count that is not n): every item UNKNOWN. An owner
 * that answers KVMESH_ENOTSUP is remembered (kvm_put_primary_batch_wants false for it from then
 * on) and every item is FALLBACK. */
void kvm_put_primary_batch_answer(kvm_rt_t *rt, const kvm_runtime_t *owner,
                                  const struct rpc_result *res, uint16_t n,
                                  struct kvm_prim_answer *a);

/* Before the loop serves requests: registers the owner's STORE_RPC_PUT_PRIMARY,
 * STORE_RPC_PUT_PRIMARY_RAW and STORE_RPC_PUT_PRIMARY_BATCH handlers. */
void kvm_put_primary_register(kvm_rt_t *rt);

/* Test-only (as put_inline.h's hook): the next n puts at the primary that reach an owner in this
 * process (any runtime) are declined as if it were not the primary. Returns the count still
 * armed before the call. Any thread. */
uint32_t kvm_put_primary_test_decline(uint32_t n);
/* Tests: the next n raw puts received through the payload sink have their reservation reach its
 * TTL while the payload lands (after its first run): the late-payload fence then refuses them
 * (docs/store.md "Late payloads"). Returns the count still armed before the call. */
uint32_t kvm_put_primary_test_expire_landing(uint32_t n);

#endif
