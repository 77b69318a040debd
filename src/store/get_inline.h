/* SPDX-License-Identifier: Apache-2.0 */
/*
 * get_inline.h — inline reads of a get, up to inline_read_max (256 KiB by default; a batch's
 * items up to KVM_GET_INLINE_BATCH_ITEM_MAX each; docs/store.md "Inline reads"): the lookup's
 * answer carries the payload when the route authority that answers owns a committed replica of
 * the version it returns, so a remote get over tcp is one exchange instead of two (lookup, then
 * a transport READ), and a batch get whose items are on their shards' primaries one exchange
 * per authority.
 *
 *   app thread (data.c get_impl)  kvm_get_inline_prepare: says the most bytes it accepts
 *   loop (ops_item.c lookup)      kvm_get_inline_sink: the sink given to route_lookup_inline
 *   app thread, after the lookup  kvm_get_inline_take: copies the bytes into the caller's
 *                                 buffers, verified against the route's checksum per verify_reads
 *                                 (kvm_get_inline_adopt: the received buffer is the allocated
 *                                 result of kvmesh_get, verified in place)
 *   authority's loop (runtime.c)  kvm_get_inline_source: the route service's inline source
 *
 * Threads as marked; the op's inl sink (store.h kvm_op_t) is written by the loop before the op
 * completes and read by the app thread after.
 */
#ifndef KVMESH_STORE_GET_INLINE_H
#define KVMESH_STORE_GET_INLINE_H

#include "store/data.h"
#include "store/store.h"

/* The most inline bytes one item of a batch get asks for (the copied form's measured
 * break-even of a single get, docs/performance.md "Single get over tcp in one exchange"), and
 * the most over the items of one batch lookup op (the authority's bound of one batch message,
 * route.h ROUTE_INLINE_BATCH_MAX): items past it are read from their replicas. */
#define KVM_GET_INLINE_BATCH_ITEM_MAX (64u * 1024)
#define KVM_GET_INLINE_BATCH_MAX      ROUTE_INLINE_BATCH_MAX

/* App thread, before kvm_op_run of a get's lookup op. A single get (n == 1): sets op->inl.max
 * (the smaller of inline_read_max and the caller's buffer; 0 = none asked: off or an shm-only
 * runtime); the route service allocates op->inl.buf only when bytes come. A batch (n > 1): the
 * items, in order, each ask for the smaller of inline_read_max, KVM_GET_INLINE_BATCH_ITEM_MAX
 * and its buffer while the sum stays within KVM_GET_INLINE_BATCH_MAX; their sinks and the room
 * for their bytes are one block at op->inl.buf (op->inl.max stays 0), freed with the op as a
 * single get's bytes are (an abandoned op's late answers write only there). No memory for it:
 * no item asks. */
void kvm_get_inline_prepare(kvm_rt_t *rt, kvm_op_t *look, const struct kvm_sgout *outs, size_t n);

/* Loop: the sink of the lookup of item `it` started for op in `state` (NULL = a plain lookup):
 * only the lookup of a get's item that asked (kvm_get_inline_prepare), and not when every
 * storage member is on this host under transport auto (its reads go through shared memory). */
route_inline_t *kvm_get_inline_sink(kvm_op_t *op, const struct kvm_item *it,
                                    enum kvm_item_state state);

/* App thread, after the lookup, for each item planned for reading (outs[i].rc == KVMESH_EAGAIN,
 * its iov trimmed to the route length): when the lookup returned inline bytes of that item's
 * route and no local replica is preferred, copies them into the caller's buffers with the
 * checksum fused (verified unless verify_reads is never) and sets outs[i].rc = 0. A mismatch
 * leaves the item to the replica rounds (a transport read). A single get whose answer was
 * received straight into its lent buffer (kvm_get_inline_lend) is not copied: the digest folded
 * as the bytes landed is compared. Returns how many items were served. */
size_t kvm_get_inline_take(kvm_rt_t *rt, kvm_op_t *look, struct kvm_sgout *outs, size_t n);

/* App thread, done with a batch get's lookup op look of which it holds the only reference: its
 * sinks-and-room block (if any) is kept as the runtime's spare for the next batch get instead of
 * being freed with the op. kvm_get_inline_fini (runtime free) frees the spare. */
void kvm_get_inline_recycle(kvm_rt_t *rt, kvm_op_t *look);
void kvm_get_inline_fini(kvm_rt_t *rt);

/* App thread, after the lookup, item 0 of a get whose result the API allocates (outs[0].alloc):
 * when the lookup returned inline bytes of its route, no local replica is preferred and the
 * received buffer is at most a quarter larger than the value, that buffer itself becomes the
 * result (outs[0].alloc_buf, taken from look->inl.buf: no
 * copy), verified against the route's checksum in one pass (unless verify_reads is never), and
 * outs[0].rc = 0 with out_len set. A mismatch clears look->inl.got (kvm_get_inline_take does not
 * try the bytes again) and leaves the item to the caller's usual path (a buffer of its own, the
 * replica rounds). Returns whether it was served. */
bool kvm_get_inline_adopt(kvm_rt_t *rt, kvm_op_t *look, struct kvm_sgout *outs, size_t n);

/* The answer's attachment in the caller's buffer (get_inline.c "The answer's attachment in the
 * caller's buffer").
 * App thread, after kvm_get_inline_prepare, before kvm_op_run of a single get's lookup: lends
 * the caller's buffer (outs[0], when it is one contiguous run and the bytes would come as the
 * attachment) to the lookup; st (the caller's, valid until kvm_get_inline_detach) folds the
 * checksum as the bytes land when reads are verified. */
void kvm_get_inline_lend(kvm_rt_t *rt, kvm_op_t *look, const struct kvm_sgout *outs, size_t n,
                         struct kvm_sum *st);
/* App thread, after every kvm_op_run of such a lookup (done, failed or abandoned), before the
 * buffer is used or the call returns: no byte lands in it from here on (a write in progress is
 * waited out; the rest of a frame still coming is discarded). */
void kvm_get_inline_detach(kvm_op_t *look);
/* Loop: the payload sink of a received STORE_RPC_ENV notification msg (decoded, msg->from set)
 * whose frame payload is payload_len bytes: the lent buffer of the pending single get whose READ
 * it answers, when it has one not claimed yet (fills *out, ctx = the op with a reference). */
void kvm_get_inline_env_sink(kvm_rt_t *rt, const env_msg_t *msg, uint64_t payload_len,
                             struct rpc_sink *out);
/* Loop: the handler of a notification whose payload went to that sink (ctx): *pl becomes the
 * lent buffer when the bytes landed there whole (else buf NULL: a plain answer). */
void kvm_get_inline_sunk(void *ctx, env_payload_t *pl);
/* Loop: ends the sink's ctx (after the message was delivered, or not). */
void kvm_get_inline_sink_end(void *ctx);

/* Whether the transport address data_addr ("kvt1;host=H;...") names this runtime's host (the
 * transport auto picks shared memory there). False when either has no host part. [any] */
bool kvm_inline_same_host(kvm_rt_t *rt, const char *data_addr);

/* The runtime's env_send_att hook (env_uv_set_sender_att; ctx = rt): the message as the body of
 * a STORE_RPC_ENV notification and the attachment as its frame payload, not copied (att->sent
 * runs once its write completed). KVMESH_ENOTSUP for this runtime itself or a peer not in the
 * membership. Loop thread. */
int kvm_inline_send_att(void *ctx, env_node_t to, uint32_t type, const void *data, size_t len,
                        const env_att_t *att);

/* The inline source the store gives the route service at init (route.h route_inline_src_t);
 * ctx = rt. */
route_inline_src_t kvm_get_inline_source(kvm_rt_t *rt);

#endif
