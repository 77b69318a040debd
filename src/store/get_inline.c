/* SPDX-License-Identifier: Apache-2.0 */
/*
 * get_inline.c — inline reads of a get (get_inline.h, docs/store.md "Inline reads", "Inline
 * reads of a batch get", docs/protocol.md "Inline reads").
 *
 * A batch (n > 1) asks per item, within KVM_GET_INLINE_BATCH_ITEM_MAX an item and
 * KVM_GET_INLINE_BATCH_MAX over the batch; its items' sinks and the room for their bytes are one
 * block of the lookup op, and the route client copies an item's bytes into its room (the copied
 * form inside the answer batch, never an attachment). Everything below holds per item.
 *
 * Requester: a single get (one item) says, in its route lookup, the most payload bytes it takes
 * inline: min(inline_read_max, the caller's buffer); none under transport shm, nor under auto
 * when every storage member shares this host (shared memory reads are cheaper than bytes on the
 * RPC connection), nor to this runtime's own authority (route_client.c). The bytes are used only
 * when they are of exactly the version the lookup returns (route.h route_lookup_inline) and no
 * local replica is preferred; they are verified against the route's checksum as a transport read
 * is (verify_reads remote or always), and a mismatch falls back to the replica rounds.
 *
 * Authority: the route service calls the source on its loop while it answers a READ with a
 * settled route. It lends the bytes only of a replica of that route which this runtime owns and
 * whose slot is COMMITTED now (not reserved or held, not in reclaim, not being evicted, of the
 * route's length and identity), through the same segment check as a transport read (seg_check
 * with the segment's read grant, which pins the segment), for at most min(requested,
 * inline_read_max) bytes. Everything happens inside one loop turn, so the slot cannot change state
 * before the answer is encoded and the pin returned. Except when the requester asked for the bytes
 * as the answer's attachment (it verifies them: kvm_get_inline_prepare): then the RPC writes them
 * straight from the slot (kvm_inline_send_att: a STORE_RPC_ENV notification whose body is the
 * answer's head and whose frame payload is the bytes), the segment stays pinned until the write
 * completed (the route service's sent callback calls src_put), and the slot is held as a transport
 * read holds it: its bytes are reused only after a release and reclaim_grace_ms, and a reader that
 * still races a reuse fails the checksum and reads the replica.
 */
#include "store/get_inline.h"

#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "net/seg.h"
#include "store/proto.h"
#include "store/slot_core.h"

/* ---- requester ------------------------------------------------------------------------------ */

/* A batch get's inline sinks (n > 1): one block at look->inl.buf, freed with the op. The room
 * of the items that asked follows the sinks, each at a 64-byte boundary. */
typedef struct inl_batch {
    size_t n;
    route_inline_t s[];
} inl_batch_t;

#define INL_ALIGN 64u

static uint64_t inl_round(uint64_t v)
{
    return (v + INL_ALIGN - 1) & ~(uint64_t)(INL_ALIGN - 1);
}

/* The batch block of look, or NULL (a single get, or no item asked). */
static inl_batch_t *inl_batch_of(const kvm_op_t *look)
{
    return look->n > 1 ? (inl_batch_t *)(void *)look->inl.buf : NULL;
}

static void prepare_batch(kvm_rt_t *rt, kvm_op_t *look, const struct kvm_sgout *outs, size_t n)
{
    uint64_t item_max = rt->cfg.inline_read_max < KVM_GET_INLINE_BATCH_ITEM_MAX
                            ? rt->cfg.inline_read_max
                            : KVM_GET_INLINE_BATCH_ITEM_MAX;
    uint64_t head = inl_round(sizeof(inl_batch_t) + n * sizeof(route_inline_t));
    uint64_t room = 0, sum = 0;
    size_t asked = 0;
    for (size_t i = 0; i < n; i++) { /* (in order, while the sum stays within the bound) */
        uint64_t m = !outs[i].alloc && outs[i].cap < item_max ? outs[i].cap : item_max;
        if (m == 0 || sum + m > KVM_GET_INLINE_BATCH_MAX)
            continue;
        sum += m;
        room += inl_round(m);
        asked++;
    }
    if (!asked)
        return;
    /* (the room is not zeroed: written before it is read) the last batch's block when it is
     * large enough (kvm_get_inline_recycle), else a new one */
    uint8_t *blk = atomic_exchange(&rt->inl_room_spare, NULL);
    if (blk && malloc_usable_size(blk) < head + room) {
        free(blk);
        blk = NULL;
    }
    if (!blk && !(blk = malloc(head + room)))
        return; /* no item asks: each is read from its replica */
    inl_batch_t *b = (inl_batch_t *)(void *)blk;
    b->n = n;
    memset(b->s, 0, n * sizeof(route_inline_t));
    uint8_t *at = blk + head;
    sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t m = !outs[i].alloc && outs[i].cap < item_max ? outs[i].cap : item_max;
        if (m == 0 || sum + m > KVM_GET_INLINE_BATCH_MAX)
            continue;
        sum += m;
        b->s[i].max = (uint32_t)m;
        /* (the bytes may come in the authority's answer batch's attachment, copied once there
         * instead of three times into the answer: verified here as a transport read is) */
        b->s[i].att = rt->cfg.verify_reads != KVM_VERIFY_NEVER;
        b->s[i].dst = at;
        at += inl_round(m);
    }
    look->inl.buf = blk; /* (freed with the op: kvm_op_unref) */
}

void kvm_get_inline_prepare(kvm_rt_t *rt, kvm_op_t *look, const struct kvm_sgout *outs, size_t n)
{
    look->inl.max = 0;
    if (n == 0 || rt->cfg.inline_read_max == 0 || rt->cfg.transport == TP_SHM)
        return;
    if (n > 1) {
        /* (transport auto with every storage member on this host at the last batch's lookup:
         * its reads are shared-memory copies, no room is allocated; the loop looks again at the
         * first item of every batch lookup: kvm_get_inline_sink) */
        if (!(rt->cfg.transport == TP_AUTO && atomic_load(&rt->inl_all_local)))
            prepare_batch(rt, look, outs, n);
        return;
    }
    uint64_t max = rt->cfg.inline_read_max;
    if (!outs[0].alloc && outs[0].cap < max)
        max = outs[0].cap;
    /* The bytes as the answer's attachment are read from the owner's slot while the RPC writes
     * them, as a transport read's are: taken only where they are verified (a reuse of the slot
     * in between fails the checksum); unverified reads take the copy made in one loop turn,
     * which the route message bounds (ROUTE_INLINE_COPIED_MAX). */
    look->inl.att = rt->cfg.verify_reads != KVM_VERIFY_NEVER;
    if (!look->inl.att && max > ROUTE_INLINE_COPIED_MAX)
        max = ROUTE_INLINE_COPIED_MAX;
    look->inl.max = (uint32_t)max; /* (the bytes get a buffer only when they come) */
}

/* The host part of a transport address ("kvt1;host=H;..."): *len bytes at the result. */
static const char *addr_host(const char *addr, size_t *len)
{
    const char *h = addr ? strstr(addr, "host=") : NULL;
    if (!h)
        return NULL;
    h += 5;
    *len = strcspn(h, ";");
    return h;
}

bool kvm_inline_same_host(kvm_rt_t *rt, const char *data_addr)
{
    size_t sl = 0, ml = 0;
    const char *self = addr_host(tp_engine_address(rt->tp), &sl);
    const char *h = addr_host(data_addr, &ml);
    return self && h && ml == sl && memcmp(h, self, sl) == 0;
}

/* Transport auto: whether every other storage member is on this host (reads use shm). */
static bool all_same_host(kvm_rt_t *rt)
{
    for (size_t i = 0; i < rt->n_members; i++) {
        const struct kvm_member *m = &rt->members[i];
        if (kvm_id128_equal(&m->rt.id, &rt->self.id) || !m->data_addr || !m->data_addr[0])
            continue;
        if (!kvm_inline_same_host(rt, m->data_addr))
            return false;
    }
    return true;
}

route_inline_t *kvm_get_inline_sink(kvm_op_t *op, const struct kvm_item *it,
                                    enum kvm_item_state state)
{
    if (op->type != KVM_OP_LOOKUP || state != KVM_ITEM_LOOKING_UP)
        return NULL;
    kvm_rt_t *rt = op->rt;
    bool autox = rt->cfg.transport == TP_AUTO;
    if (op->n == 1)
        return op->inl.max && !(autox && all_same_host(rt)) ? &op->inl : NULL;
    size_t i = (size_t)(it - op->items);
    KVM_ASSERT(i < op->n);
    if (autox && i == 0) /* (once per batch lookup: its items start in this loop turn) */
        atomic_store(&rt->inl_all_local, all_same_host(rt));
    inl_batch_t *b = inl_batch_of(op);
    /* (an item's lookup starts once; a sink already written is not handed out again) */
    route_inline_t *s = b && b->s[i].max && !b->s[i].buf && !b->s[i].got ? &b->s[i] : NULL;
    return s && !(autox && atomic_load(&rt->inl_all_local)) ? s : NULL;
}

/* Copies len bytes of src into the scatter list, the checksum fused into the same pass. */
static uint64_t copy_out(const uint8_t *src, uint64_t len, const struct iovec *iov, int iovcnt,
                         bool sum)
{
    struct kvm_sum st;
    if (sum)
        kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    uint64_t pos = 0;
    for (int i = 0; i < iovcnt && pos < len; i++) {
        size_t k = iov[i].iov_len < len - pos ? iov[i].iov_len : (size_t)(len - pos);
        if (sum) /* one pass: each stripe loaded once, stored and hashed (core/hash.h) */
            kvm_sum_update_copy(&st, iov[i].iov_base, src + pos, k);
        else
            memcpy(iov[i].iov_base, src + pos, k);
        pos += k;
    }
    KVM_ASSERT(pos == len); /* the list was trimmed to the route length */
    return sum ? kvm_sum_digest(&st) : 0;
}

/* The sink of item i of look that holds its lookup's inline bytes, or NULL. */
static route_inline_t *sink_of(kvm_op_t *look, size_t i)
{
    if (look->n == 1)
        return i == 0 ? &look->inl : NULL;
    inl_batch_t *b = inl_batch_of(look);
    return b && i < b->n ? &b->s[i] : NULL;
}

/* Whether the lookup's inline bytes in s may serve item i: bytes of exactly its route, and no
 * local replica preferred (a local replica is read locally). */
static bool inline_usable(const kvm_op_t *look, size_t i, const route_inline_t *s)
{
    if (!s || !s->got || !s->buf)
        return false;
    const struct kvm_item *it = &look->items[i];
    return !it->rc && s->len == it->route.length && it->route.n_replicas > 0 && !it->acc[0].local;
}

/* Counts a use of inline bytes of len (verified or not) and, when `served`, the tcp read. */
static void inline_count(kvm_rt_t *rt, kvm_op_t *look, uint32_t len, bool verify, bool served)
{
    /* The bytes crossed the RPC connection: the sender's and the receiver's socket copies, as a
     * tcp read's (the user-space copy out of the answer, or none, is not counted) */
    KVM_CP_COUNT(look, op_payload_copies_total, OBS_TRANSPORT_TCP, 2);
    if (verify)
        KVM_CP_COUNT(look, op_checksum_passes_total, OBS_NONE, 1);
    if (!served)
        return;
    /* the replica's bytes were read over tcp (in the lookup's exchange): counted as the tcp read
     * a transport batch would have made (kvmesh_transport_*{operation="read"}) */
    obs_count(rt->metrics, transport_operations_total, OBS_TRANSPORT_TCP, OBS_XOP_READ, 1);
    obs_count(rt->metrics, transport_bytes_total, OBS_TRANSPORT_TCP, OBS_XOP_READ, len);
}

size_t kvm_get_inline_take(kvm_rt_t *rt, kvm_op_t *look, struct kvm_sgout *outs, size_t n)
{
    KVM_ASSERT(n == look->n);
    bool verify = rt->cfg.verify_reads != KVM_VERIFY_NEVER;
    size_t served = 0;
    for (size_t i = 0; i < n; i++) {
        route_inline_t *s = sink_of(look, i);
        if (outs[i].rc != KVMESH_EAGAIN || !inline_usable(look, i, s))
            continue;
        struct kvm_sgout *o = &outs[i];
        bool ok;
        if (n == 1 && s->buf == look->idst.buf) {
            /* received in place, whole (kvm_get_inline_sunk), the checksum folded as it landed;
             * the buffer is the caller's again (detached) */
            KVM_ASSERT(look->idst.whole && look->idst.detached && o->iovcnt >= 1 &&
                       o->iov[0].iov_base == (void *)s->buf);
            ok = !verify || (look->idst.st ? look->idst.digest : kvm_checksum(s->buf, s->len)) ==
                                look->items[i].route.checksum;
        } else {
            uint64_t sum = copy_out(s->buf, s->len, o->iov, o->iovcnt, verify);
            ok = !verify || sum == look->items[i].route.checksum;
        }
        inline_count(rt, look, s->len, verify, ok);
        if (!ok)
            continue; /* the replica rounds read it again (and report a bad owner) */
        o->rc = 0;
        served++;
    }
    return served;
}

void kvm_get_inline_recycle(kvm_rt_t *rt, kvm_op_t *look)
{
    if (look->n < 2 || !look->inl.buf || atomic_load(&look->refs) != 1)
        return; /* (a single get's buffer, or the loop still holds the op: freed with it) */
    void *old = atomic_exchange(&rt->inl_room_spare, (void *)look->inl.buf);
    look->inl.buf = NULL;
    free(old);
}

void kvm_get_inline_fini(kvm_rt_t *rt)
{
    free(atomic_exchange(&rt->inl_room_spare, NULL));
}

/* A received buffer becomes an allocated result only when at most 1/ADOPT_SLACK_DIV of it
 * beyond the value is unused. */
#define ADOPT_SLACK_DIV 4

bool kvm_get_inline_adopt(kvm_rt_t *rt, kvm_op_t *look, struct kvm_sgout *outs, size_t n)
{
    struct kvm_sgout *o = &outs[0];
    if (n != 1 || !o->alloc || !inline_usable(look, 0, &look->inl))
        return false;
    /* The receive buffer comes from the RPC layer's pool in size classes: handed to the caller
     * only when it is not much larger than the value (the caller may keep many results). */
    size_t usable = malloc_usable_size(look->inl.buf);
    if (usable - look->inl.len > look->inl.len / ADOPT_SLACK_DIV)
        return false;
    const struct kvm_item *it = &look->items[0];
    bool verify = rt->cfg.verify_reads != KVM_VERIFY_NEVER;
    /* one pass over the received bytes (no copy): the result is the buffer they arrived in */
    bool ok = !verify || kvm_checksum(look->inl.buf, look->inl.len) == it->route.checksum;
    inline_count(rt, look, look->inl.len, verify, ok);
    if (!ok) {
        look->inl.got = false; /* (not tried again by kvm_get_inline_take) */
        return false;          /* the replica rounds read it into a buffer of its own */
    }
    free(o->alloc_buf);
    o->alloc_buf = look->inl.buf; /* a malloc'd block of at least len bytes (route.h) */
    look->inl.buf = NULL;
    look->inl.got = false;
    o->one.iov_base = o->alloc_buf;
    o->one.iov_len = look->inl.len;
    o->iov = &o->one;
    o->iovcnt = 1;
    o->cap = look->inl.len;
    o->out_len = look->inl.len;
    o->rc = 0;
    return true;
}

/* ---- the answer's attachment in the caller's buffer ----------------------------------------- */

/*
 * A single get into a buffer of the caller's (one contiguous run, not allocated by the API)
 * whose lookup asks for the bytes as the answer's attachment lends that buffer to the lookup
 * (look->idst, look->inl.lent): the RPC layer receives the attachment straight into it (the
 * STORE_RPC_ENV notification's payload sink, runtime.c) instead of into a pooled buffer that
 * kvm_get_inline_take then copies out of, and the checksum is folded over each landed run while
 * it is in this core's cache (verified reads).
 *
 * Rules (look->mu guards idst):
 *  - the first attached answer to a READ of the lookup's current attempt claims the buffer for
 *    good (claimed): any other answer (another authority, a later attempt, a retransmission's)
 *    goes to a pooled buffer as before, so two frames never land in one buffer;
 *  - every write into the buffer and into the caller's checksum state happens under the RPC
 *    sink's hold (rpc.h), i.e. with mu held and only while not detached; a hold refused
 *    discards the rest of the frame;
 *  - the app thread detaches after every kvm_op_run (kvm_get_inline_detach), whether the op
 *    completed or was abandoned at its deadline: from then on nothing lands in the buffer, so a
 *    get that returned never sees its buffer written behind its back;
 *  - the answer is delivered to the route service with the buffer as its attachment only when
 *    every byte landed and the buffer was not let go (whole), else as a plain answer (the caller
 *    reads a replica); the route service never frees a lent buffer (route.h inl.lent);
 *  - kvm_get_inline_take finds the bytes in place (inl.buf == the lent buffer) and compares
 *    the folded digest with the route's checksum instead of copying.
 */

void kvm_get_inline_lend(kvm_rt_t *rt, kvm_op_t *look, const struct kvm_sgout *outs, size_t n,
                         struct kvm_sum *st)
{
    (void)rt;
    if (n != 1 || !look->inl.max || !look->inl.att || outs[0].alloc)
        return;
    const struct kvm_sgout *o = &outs[0];
    const struct iovec *v = o->iov_in ? o->iov_in : &o->one;
    if (o->iovcnt_in != 1 || !v->iov_base || v->iov_len == 0)
        return; /* (a scatter list: the bytes are copied into it from a pooled buffer) */
    look->idst.buf = v->iov_base;
    look->idst.cap = v->iov_len;
    look->idst.st = st;
    look->inl.lent = v->iov_base;
}

void kvm_get_inline_detach(kvm_op_t *look)
{
    if (!look->idst.buf)
        return;
    pthread_mutex_lock(&look->mu); /* (waits out a write in progress: rpc.h sink hold) */
    look->idst.detached = true;
    pthread_mutex_unlock(&look->mu);
}

static bool dst_hold(void *ctx)
{
    kvm_op_t *op = ctx;
    pthread_mutex_lock(&op->mu);
    if (!op->idst.detached)
        return true; /* (released by dst_release after the write) */
    pthread_mutex_unlock(&op->mu);
    return false;
}

static void dst_release(void *ctx)
{
    pthread_mutex_unlock(&((kvm_op_t *)ctx)->mu);
}

/* A run landed in the buffer (under the hold): folded while in cache. */
static void dst_landed(void *ctx, const uint8_t *p, size_t n)
{
    kvm_op_t *op = ctx;
    if (op->idst.st)
        kvm_sum_update(op->idst.st, p, n);
    op->idst.landed += n;
}

static void dst_abort(void *ctx)
{
    kvm_get_inline_sink_end(ctx); /* (the claim stays: the buffer is taken by no other frame) */
}

void kvm_get_inline_env_sink(kvm_rt_t *rt, const env_msg_t *msg, uint64_t payload_len,
                             struct rpc_sink *out)
{
    uint32_t att_len = 0;
    route_inline_t *inl = rt->route ? route_inline_pending(rt->route, msg, &att_len) : NULL;
    if (!inl || !inl->lent || att_len != payload_len || att_len == 0)
        return;
    kvm_op_t *op = (kvm_op_t *)(void *)((uint8_t *)inl - offsetof(kvm_op_t, inl));
    KVM_ASSERT(op->n == 1 && op->idst.buf == inl->lent);
    pthread_mutex_lock(&op->mu);
    bool take = !op->idst.claimed && !op->idst.detached && att_len <= op->idst.cap;
    if (take) {
        op->idst.claimed = true;
        op->idst.len = att_len;
        if (op->idst.st)
            kvm_sum_init(op->idst.st, KVM_HASH_SEED_CHECKSUM);
    }
    pthread_mutex_unlock(&op->mu);
    if (!take)
        return;                     /* (a pooled buffer, as for any answer) */
    atomic_fetch_add(&op->refs, 1); /* (the sink's: dropped by kvm_get_inline_sink_end) */
    out->dst = op->idst.buf;
    out->landed = dst_landed;
    out->hold = dst_hold;
    out->release = dst_release;
    out->abort = dst_abort;
    out->ctx = op;
}

void kvm_get_inline_sunk(void *ctx, env_payload_t *pl)
{
    kvm_op_t *op = ctx;
    pthread_mutex_lock(&op->mu);
    op->idst.whole = !op->idst.detached && op->idst.landed == op->idst.len;
    if (op->idst.whole && op->idst.st)
        op->idst.digest = kvm_sum_digest(op->idst.st);
    pthread_mutex_unlock(&op->mu);
    pl->buf = op->idst.whole ? op->idst.buf : NULL; /* (NULL: a plain answer) */
    pl->len = op->idst.len;
}

void kvm_get_inline_sink_end(void *ctx)
{
    kvm_op_unref(ctx);
}

/* ---- authority (the route service's inline source) ------------------------------------------ */

/* The read grant of one of this runtime's segments, or 0. */
static uint64_t seg_read_token(kvm_rt_t *rt, uint64_t seg_id)
{
    for (uint32_t s = 0; s < rt->n_segs; s++)
        if (rt->segs[s].seg && rt->segs[s].seg->id == seg_id)
            return rt->segs[s].read_token;
    return 0;
}

/* Whether rep, a replica of route owned here, is in a COMMITTED slot of the route's object. */
static bool slot_serves(kvm_rt_t *rt, const kvm_route_t *route, const kvm_hot_replica_t *rep)
{
    const slot_t *s = rt->slots ? slot_core_find(rt->slots, rep->segment, rep->offset) : NULL;
    if (!s || s->state != SLOT_COMMITTED || s->evicting || slot_off(s) != rep->offset ||
        s->len != route->length)
        return false;
    kvm_ident_t id = slot_ident(s);
    return kvm_ident_equal(&id, &route->ident);
}

static int src_get(void *ctx, const kvm_route_t *route, uint32_t max, const uint8_t **data,
                   size_t *len, void **pin)
{
    kvm_rt_t *rt = ctx;
    if (route->length > max || route->length > rt->cfg.inline_read_max)
        return KVMESH_ENOENT;
    for (uint32_t i = 0; i < route->n_replicas; i++) {
        const kvm_hot_replica_t *rep = &route->replicas[i];
        if (!kvm_id128_equal(&rep->owner, &rt->self.id) || !slot_serves(rt, route, rep))
            continue;
        uint64_t token = seg_read_token(rt, rep->segment);
        uint8_t *p = NULL;
        struct seg *sp = NULL;
        enum seg_reason why;
        if (!token || seg_check(rt->reg, rep->segment, rep->offset, route->length, SEG_READ, token,
                                &p, &sp, &why) != 0)
            continue;
        *data = p;
        *len = route->length;
        *pin = sp;
        return 0;
    }
    return KVMESH_ENOENT;
}

static void src_put(void *ctx, void *pin)
{
    kvm_rt_t *rt = ctx;
    if (pin)
        seg_unpin(rt->reg, pin);
}

int kvm_inline_send_att(void *ctx, env_node_t to, uint32_t type, const void *data, size_t len,
                        const env_att_t *att)
{
    kvm_rt_t *rt = ctx;
    const struct kvm_member *m = to == env_self(rt->env) ? NULL : kvm_member_by_node(rt, to);
    rpc_peer *p = m ? kvm_rt_peer(rt, m) : NULL;
    if (!p)
        return KVMESH_ENOTSUP; /* this runtime itself, or a peer not known yet: the copied way */
    uint8_t small[STORE_ENV_MSG_STACK]; /* (the RPC copies the body at submit) */
    size_t body_len = store_env_msg_put(small, sizeof(small), type, data, len);
    uint8_t *body = body_len ? small : store_env_msg_encode(type, data, len, &body_len);
    if (!body)
        return KVMESH_ENOMEM;
    uv_buf_t iov = uv_buf_init((char *)att->data, (unsigned)att->len);
    struct rpc_msg msg = {
        .type = STORE_RPC_ENV, .body = body, .body_len = body_len, .iov = &iov, .niov = 1};
    int rc = rpc_notify(p, &msg, att->sent, att->arg);
    if (body != small)
        free(body);
    return rc;
}

route_inline_src_t kvm_get_inline_source(kvm_rt_t *rt)
{
    return (route_inline_src_t){
        .get = rt->cfg.inline_read_max ? src_get : NULL, .put = src_put, .ctx = rt};
}
