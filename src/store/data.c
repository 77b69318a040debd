/* SPDX-License-Identifier: Apache-2.0 */
/*
 * data.c — the application-thread side of object operations: the payload path.
 *
 *   put:    PLACE op (loop reserves replicas) -> checksum (XXH3-64 over the gather list, fused
 *           with the local copy when a replica is local, else with the transport's copy (shm)
 *           or send (tcp) to the first remote replica, else one pass before the transport
 *           sends) ->
 *           payload written by this thread: memcpy into a local segment (write grant checked
 *           by seg_check) or one transport batch of WRITEs into remote reserved ranges (none
 *           for a replica whose owner took a small single put's value with the reservation:
 *           put_inline.c) ->
 *           PUBLISH op (route CAS) for the items whose writes all succeeded, ABORT op for the
 *           others;
 *   get:    LOOKUP op (route + replica access, local first; a single small get over tcp may
 *           receive the payload with the route: get_inline.c) -> reads in rounds: round r reads
 *           every unfinished item from its r-th replica (local memcpy, or one transport batch of
 *           READs straight into the caller's buffers) -> checksum verified per the verify_reads
 *           policy (always / remote / never; fused with a local copy, an shm read or a tcp
 *           receive); a
 *           failed or corrupt replica is reported (its owner quarantined) and the next round
 *           tries the next one; when every replica failed a checksum the route is read once
 *           more (an overwrite may have raced) before giving up;
 *   drain:  the runtime's committed replicas are copied to other owners and the routes CAS'ed
 *           to the new replica, page by page (kvm_store_drain).
 *
 * Payload bytes never pass through the loop thread. Caller buffers that were not registered
 * with kvmesh_register_buffer are registered for the duration of the transfer (one span per
 * item), which keeps the transfer zero-copy.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/copy.h"
#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "store/cold_glue.h"
#include "store/data.h"
#include "store/drain_core.h"
#include "store/fair.h"
#include "store/get_inline.h"
#include "store/put_inline.h"
#include "store/repair_plan.h"

#define DATA_CHUNK     16  /* items per transport round with temporary registrations */
#define DATA_CHUNK_MAX 128 /* items per transport round when every buffer is registered */

static uint64_t sg_checksum(const struct iovec *iov, int iovcnt)
{
    if (iovcnt == 1)
        return kvm_checksum(iov[0].iov_base, iov[0].iov_len);
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    for (int i = 0; i < iovcnt; i++)
        kvm_sum_update(&st, iov[i].iov_base, iov[i].iov_len);
    return kvm_sum_digest(&st);
}

/* ---- critical-path accounting (kvmesh_op_* families, docs/operations.md) ----------------- */

/* The owners one transport batch reached over tcp: one request/response exchange each (its
 * requests are pipelined on the owner's data connections); shm is a copy in this thread. */
struct cp_owners {
    kvm_runtime_id_t id[64]; /* beyond 64 distinct owners each further one counts again */
    unsigned n;
};

static void cp_owner_add(struct cp_owners *o, const kvm_runtime_id_t *id)
{
    for (unsigned i = 0; i < o->n && i < KVM_ARRAY_SIZE(o->id); i++)
        if (kvm_id128_equal(&o->id[i], id))
            return;
    if (o->n < KVM_ARRAY_SIZE(o->id))
        o->id[o->n] = *id;
    o->n++;
}

/* One replica's payload moved through the transport: the copies it makes. */
static void cp_transfer(kvm_op_t *op, struct tp_segment *seg, const kvm_runtime_id_t *owner,
                        struct cp_owners *o)
{
    bool tcp = tp_segment_kind(seg) == TP_TCP;
    KVM_CP_COUNT(op, op_payload_copies_total, tcp ? OBS_TRANSPORT_TCP : OBS_TRANSPORT_SHM,
                 tcp ? 2 : 1);
    if (tcp)
        cp_owner_add(o, owner);
}

/* Temporary registration of one item's buffers (their covering span). */
struct tmpreg {
    void *addr;
};

/* Other threads hold every registration slot: register again each time one is released (every
 * store-side tp_unregister_memory signals rt->wq_reg), until the request timeout or close. */
static int reg_when_free(kvm_rt_t *rt, void *addr, size_t len)
{
    uint64_t deadline = kvm_deadline_new(rt);
    uint64_t gen = kvm_waitq_enter(&rt->wq_reg);
    int rc;
    while ((rc = tp_register_memory(rt->tp, addr, len)) == KVMESH_ENOSPC) {
        int w = kvm_waitq_wait(&rt->wq_reg, &gen, deadline);
        if (w == KVMESH_ECLOSED)
            rc = kvm_errf(w, "the runtime closed while waiting for a memory registration slot");
        if (w)
            break;
    }
    kvm_waitq_leave(&rt->wq_reg);
    return rc;
}

static int reg_span(kvm_rt_t *rt, const struct iovec *iov, int iovcnt, struct tmpreg *out)
{
    out->addr = NULL;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    bool all_reg = true;
    for (int i = 0; i < iovcnt; i++) {
        if (!iov[i].iov_len)
            continue;
        uintptr_t a = (uintptr_t)iov[i].iov_base;
        lo = a < lo ? a : lo;
        hi = a + iov[i].iov_len > hi ? a + iov[i].iov_len : hi;
        if (!kvm_rt_is_registered(rt, iov[i].iov_base, iov[i].iov_len) &&
            !seg_local_contains(rt->reg, iov[i].iov_base, iov[i].iov_len))
            all_reg = false;
    }
    if (all_reg || hi == 0)
        return 0;
    int rc = tp_register_memory(rt->tp, (void *)lo, hi - lo);
    if (rc == KVMESH_ENOSPC)
        rc = reg_when_free(rt, (void *)lo, hi - lo);
    if (rc == 0)
        out->addr = (void *)lo;
    return rc;
}

/* The last remote segment handle a transport round opened: the round's next items on the same
 * owner's segment (a batch's usual case) take it instead of the runtime's handle cache, whose
 * lookup takes rt->dp_rw per item (kvm_rt_seg_open; a handle no longer usable is looked up
 * again there). */
struct seg_memo {
    const char *data_addr;
    uint64_t seg_id;
    struct tp_segment *h;
};

static int seg_open_memo(kvm_rt_t *rt, struct seg_memo *m, const char *data_addr, uint64_t seg_id,
                         uint64_t token, struct tp_segment **out)
{
    if (m->h && m->data_addr == data_addr && m->seg_id == seg_id && tp_segment_usable(m->h)) {
        *out = m->h; /* (kvm_rt_seg_open's cache answers by data_addr and seg_id alike) */
        return 0;
    }
    int rc = kvm_rt_seg_open(rt, data_addr, seg_id, token, out);
    if (rc == 0)
        *m = (struct seg_memo){.data_addr = data_addr, .seg_id = seg_id, .h = *out};
    return rc;
}

static void reg_drop(kvm_rt_t *rt, struct tmpreg *r)
{
    if (r->addr) {
        tp_unregister_memory(rt->tp, r->addr);
        kvm_waitq_signal(&rt->wq_reg); /* a registration slot is free (reg_when_free) */
    }
    r->addr = NULL;
}

/* Items per transport round: all of them (up to DATA_CHUNK_MAX, one batch per round) when every
 * buffer is registered or segment memory, else DATA_CHUNK (each item of a round may hold a
 * temporary registration, and the transport has TP_MAX_REGIONS). */
static bool iov_registered(kvm_rt_t *rt, const struct iovec *iov, int iovcnt)
{
    for (int i = 0; i < iovcnt; i++)
        if (iov[i].iov_len && !kvm_rt_is_registered(rt, iov[i].iov_base, iov[i].iov_len) &&
            !seg_local_contains(rt->reg, iov[i].iov_base, iov[i].iov_len))
            return false;
    return true;
}

static size_t put_chunk(kvm_rt_t *rt, const struct kvm_item *items, const struct kvm_sg *sgs,
                        size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((size_t)sgs[i].iovcnt * (items[i].n_res ? items[i].n_res : 1) * DATA_CHUNK_MAX >
                TP_MAX_BATCH ||
            !iov_registered(rt, sgs[i].iov, sgs[i].iovcnt))
            return DATA_CHUNK;
    return DATA_CHUNK_MAX;
}

static size_t get_chunk(kvm_rt_t *rt, const struct kvm_sgout *outs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (outs[i].rc == KVMESH_EAGAIN &&
            ((size_t)outs[i].iovcnt * DATA_CHUNK_MAX > TP_MAX_BATCH ||
             !iov_registered(rt, outs[i].iov, outs[i].iovcnt)))
            return DATA_CHUNK;
    return DATA_CHUNK_MAX;
}

/* Transport requests a put chunk items[base, end) can submit: one per buffer and remote
 * replica (a batch sized to the chunk, not TP_MAX_BATCH slots zeroed for every call). */
static unsigned put_batch_cap(const struct kvm_item *items, const struct kvm_sg *sgs, size_t base,
                              size_t end)
{
    size_t n = 0;
    for (size_t i = base; i < end; i++)
        for (uint32_t r = 0; r < items[i].n_res; r++)
            n += items[i].res[r].local ? 0 : (size_t)sgs[i].iovcnt;
    return (unsigned)KVM_MAX(KVM_MIN(n, (size_t)TP_MAX_BATCH), (size_t)1);
}

/* The same for a get round's chunk: one request per buffer of each item still to read. */
static unsigned get_batch_cap(const struct kvm_sgout *outs, size_t base, size_t end)
{
    size_t n = 0;
    for (size_t i = base; i < end; i++)
        n += outs[i].rc == KVMESH_EAGAIN ? (size_t)outs[i].iovcnt : 0;
    return (unsigned)KVM_MAX(KVM_MIN(n, (size_t)TP_MAX_BATCH), (size_t)1);
}

/*
 * The transfers of a round's chunk are gathered and handed to the transport in one tp_submit
 * (up to DATA_SUBMIT_MAX requests: 4 KiB stack), not one item at a time: tcp then queues them
 * all before it wakes an I/O thread, and its first window carries as many as fit instead of the
 * first item alone (shm requests are submitted at once: add_reqs). Flushed when full, before
 * this thread makes a local copy (the remote transfers gathered so far then run while it
 * copies) and before the round waits for its batch.
 * Request indexes are assigned in order, so an item's first index is known when it is added
 * (subq_count). A request whose tp_submit failed is not in the batch: tp_status reports it
 * KVMESH_EINVAL, and its item fails as for any failed transfer.
 */
#define DATA_SUBMIT_MAX 64
_Static_assert(DATA_SUBMIT_MAX >= KVMESH_IOV_MAX, "an item's requests fit one submit");
struct subq {
    struct tp_request r[DATA_SUBMIT_MAX];
    unsigned n;
};

/* Submits the gathered requests to b. */
static int subq_flush(struct tp_batch *b, struct subq *q)
{
    if (!q->n)
        return 0;
    int rc = tp_submit(b, q->r, q->n);
    q->n = 0;
    return rc;
}

/* The index the next request added to q will have in b. */
static unsigned subq_count(const struct tp_batch *b, const struct subq *q)
{
    return tp_batch_count(b) + q->n;
}

/* Adds one replica transfer of an item (one request per non-empty iovec) to q, to be submitted
 * to b. sum (may be NULL) is folded the bytes by a transport that copies them itself
 * (tp_segment_sums). */
static int add_reqs(struct tp_batch *b, struct subq *q, enum tp_op op, const struct iovec *iov,
                    int iovcnt, struct tp_segment *seg, uint64_t remote_off, uint64_t token,
                    struct kvm_sum *sum)
{
    KVM_ASSERT(iovcnt <= DATA_SUBMIT_MAX);
    if (q->n + (unsigned)iovcnt > DATA_SUBMIT_MAX) {
        int rc = subq_flush(b, q);
        if (rc)
            return rc;
    }
    uint64_t pos = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (!iov[i].iov_len)
            continue;
        q->r[q->n++] = (struct tp_request){.op = op,
                                           .local = iov[i].iov_base,
                                           .length = iov[i].iov_len,
                                           .segment = seg,
                                           .remote_offset = remote_off + pos,
                                           .token = token,
                                           .sum = sum};
        pos += iov[i].iov_len;
    }
    /* shm copies in tp_submit itself and checks the grant the caller just noted (its grant
     * cache holds TP_SHM_GRANT_CACHE): nothing to gain from waiting, submitted now */
    return tp_segment_kind(seg) == TP_TCP ? 0 : subq_flush(b, q);
}

/* A local write this large goes into the segment with streaming stores (core/copy.h). */
#define DATA_STREAM_MIN (256u << 10)

/* The requests add_reqs makes of an iov list (one per non-empty iovec). */
static unsigned nreqs(const struct iovec *iov, int iovcnt)
{
    unsigned n = 0;
    for (int i = 0; i < iovcnt; i++)
        n += iov[i].iov_len != 0;
    return n;
}

/* The checksums a round's transport batch folds as it moves the bytes (tp_segment_sums), one
 * per item of the round: a round of one item (a single get or put) uses the one in the struct,
 * a larger one allocates on first use; the transport writes them until the batch completed, so
 * they are read after it and released (fuse_end) after tp_batch_free. */
struct fuse_sums {
    struct kvm_sum *st;
    size_t n; /* items in the round: st has room for n sums (one ~0.6 KiB state each) */
    bool on[DATA_CHUNK_MAX];
    struct kvm_sum one; /* st of a round of one item: no allocation per single op */
};

/* The initialised sum of item j, or NULL (out of memory: the caller hashes in a pass). */
static struct kvm_sum *fuse_start(struct fuse_sums *f, size_t j)
{
    KVM_ASSERT(j < f->n && f->n <= DATA_CHUNK_MAX);
    if (!f->st)
        f->st = f->n == 1 ? &f->one
                          : aligned_alloc(_Alignof(struct kvm_sum), f->n * sizeof(struct kvm_sum));
    if (!f->st)
        return NULL;
    kvm_sum_init(&f->st[j], KVM_HASH_SEED_CHECKSUM);
    f->on[j] = true;
    return &f->st[j];
}

static void fuse_end(struct fuse_sums *f)
{
    if (f->st != &f->one)
        free(f->st);
    f->st = NULL;
}

/* Copies len bytes (to the segment at p for SEG_WRITE, from it otherwise) and, with sum set,
 * computes their XXH3-64 checksum in the same pass (kvm_sum_update_copy: each 64-byte stripe
 * loaded once, stored and hashed). A write of DATA_STREAM_MIN bytes or more goes into the segment
 * with streaming stores (core/copy.h: the owner's pages are not read again soon, and the stores
 * skip the read-for-ownership; kvm_sum_update_copy_stream with a sum), fenced before the copy
 * returns (the shm transport does the same: docs/performance.md "Large shm gets: the copy and
 * the checksum"). */
static void copy_sum(uint32_t op, uint8_t *p, const struct iovec *iov, int iovcnt, uint64_t len,
                     uint64_t *sum)
{
    struct kvm_sum st;
    if (sum)
        kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    bool stream = op == SEG_WRITE && len >= DATA_STREAM_MIN;
    uint64_t pos = 0;
    for (int i = 0; i < iovcnt; i++) {
        uint8_t *b = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        uint8_t *dst = op == SEG_WRITE ? p + pos : b;
        const uint8_t *src = op == SEG_WRITE ? b : p + pos;
        if (sum && stream)
            kvm_sum_update_copy_stream(&st, dst, src, n);
        else if (sum)
            kvm_sum_update_copy(&st, dst, src, n);
        else if (stream)
            kvm_copy_stream(dst, src, n);
        else
            memcpy(dst, src, n);
        pos += n;
    }
    if (stream)
        kvm_copy_stream_fence();
    if (sum)
        *sum = kvm_sum_digest(&st);
}

/* A replica in this runtime's own segments: a memcpy, counted as transport "local"; with sum
 * set, the checksum of the copied bytes comes from the same pass (copy_sum). */
static int local_copy(kvm_rt_t *rt, uint32_t op, uint64_t seg_id, uint64_t off, uint64_t len,
                      uint64_t token, const struct iovec *iov, int iovcnt, uint64_t *sum)
{
    unsigned xop = op == SEG_WRITE ? OBS_XOP_WRITE : OBS_XOP_READ;
    uint64_t t0 = env_clock_mono_ns();
    obs_count(rt->metrics, transport_operations_total, OBS_TRANSPORT_LOCAL, xop, 1);
    uint8_t *p;
    struct seg *pin;
    enum seg_reason why;
    int rc = seg_check(rt->reg, seg_id, off, len, op, token, &p, &pin, &why);
    if (rc) {
        obs_count(rt->metrics, transport_failures_total, OBS_TRANSPORT_LOCAL, xop, 1);
        return kvm_errf(rc, "local replica access refused: %s", seg_reason_str(why));
    }
    copy_sum(op, p, iov, iovcnt, len, sum);
    seg_unpin(rt->reg, pin);
    obs_count(rt->metrics, transport_bytes_total, OBS_TRANSPORT_LOCAL, xop, len);
    obs_observe(rt->metrics, transport_duration_seconds, OBS_TRANSPORT_LOCAL, xop,
                env_clock_mono_ns() - t0);
    return 0;
}

static void report_bad(kvm_rt_t *rt, const kvm_runtime_id_t *owner)
{
    kvm_op_t *op = kvm_op_new(rt, KVM_OP_REPORT, 0);
    if (!op)
        return;
    op->bad_owner = *owner;
    kvm_op_run(op);
    kvm_op_unref(op);
}

/* Waits for b until the call's deadline. true when it passed with requests still running: they
 * are aborted (their connections shut down), so tp_batch_free does not wait on a stalled or
 * trickling owner, and the caller's buffers are no longer touched once it returns. */
static bool batch_wait_by(struct tp_batch *b, uint64_t deadline)
{
    uint32_t left = kvm_deadline_left_ms(deadline);
    int wait_ms = left > (uint32_t)INT32_MAX ? INT32_MAX : (int)left;
    if (tp_batch_wait(b, wait_ms) == 0)
        return false;
    tp_batch_abort(b);
    tp_batch_wait(b, -1); /* returns promptly: nothing is left in flight */
    return true;
}

/* ---- put ------------------------------------------------------------------------------------ */

/* Takes the fair-scheduling ticket of the remote batch items[base, end) (fair.c; a no-op when
 * it writes nothing to another runtime or fairness is off). On failure every item of the batch
 * still to be written fails with the refusal (message kept in err). */
static int fair_gate(kvm_rt_t *rt, kvm_op_t *place, size_t base, size_t end, uint64_t deadline,
                     struct kvm_fair_ticket *ft, char *err, size_t cap)
{
    uint64_t wire = 0;
    for (size_t i = base; i < end; i++)
        wire += kvm_fair_item_bytes(&place->items[i]);
    memset(ft, 0, sizeof(*ft));
    int rc = wire ? kvm_fair_acquire(rt, &place->items[base].ident, (uint32_t)(end - base), wire,
                                     deadline, ft)
                  : 0;
    if (rc == 0)
        return 0;
    snprintf(err, cap, "%s", kvmesh_last_error());
    for (size_t i = base; i < end; i++)
        if (place->items[i].rc == 0)
            place->items[i].rc = rc;
    return rc;
}

static int put_impl(kvm_rt_t *rt, const kvm_ident_t *ids, const struct kvm_sg *sgs, size_t n,
                    const kvmesh_put_opts_t *opts, int *rcs, struct obs_span *span)
{
    uint64_t deadline = kvm_deadline_new(rt); /* one deadline for every stage of the call */
    kvm_op_t *place = kvm_op_new(rt, KVM_OP_PLACE, n);
    if (!place)
        return KVMESH_ENOMEM;
    place->span = span;
    place->deadline_ms = deadline;
    place->cp_op = 1 + (n == 1 ? OBS_OP_PUT : OBS_OP_BATCH_PUT);
    int rc = 0;
    place->replicas = opts && opts->replicas ? opts->replicas : rt->cfg.replicas;
    place->hard_pin = opts && opts->hard_pin;
    for (size_t i = 0; opts && opts->preferred_owners && i < opts->n_preferred &&
                       place->n_pref < KVM_MAX_REPLICAS;
         i++)
        if (kvm_id128_parse(opts->preferred_owners[i], &place->pref[place->n_pref]) == 0)
            place->n_pref++;
    for (size_t i = 0; i < n; i++) {
        struct kvm_item *it = &place->items[i];
        if ((rc = kvm_ident_copy(&it->ident, &ids[i])) != 0)
            goto out;
        it->len = sgs[i].len; /* the checksum comes with the payload copy below */
    }
    /* Any reservation of the call is made after this instant, so its write grant expires no
     * earlier than from_ns + the reservation ttl (same host for shm: one CLOCK_MONOTONIC). */
    const uint64_t reserved_from_ns = env_clock_mono_ns();
    kvm_put_inline_prepare(rt, place, sgs, n); /* a small single put's value rides along */
    /* a batch's small items to their shard primary carry their values (put_primary.c) */
    place->wbat = n > 1 && rt->cfg.inline_write_max ? sgs : NULL;
    if ((rc = kvm_op_run(place)) != 0)
        goto out;

    /* Payload: in remote batches of at most put_chunk() items (planned per tenant, fair.c), one
     * transport batch each, each submitted in its tenant's fair-scheduling turn. */
    size_t chunk = put_chunk(rt, place->items, sgs, n);
    /* put_chunk found every buffer registered (or segment memory): no item needs a temporary
     * registration, nor its registration looked up again (reg_span) */
    const bool all_reg = chunk == DATA_CHUNK_MAX;
    struct seg_memo memo = {.h = NULL};
    char fair_err[400] = "";
    for (size_t base = 0, end; base < n; base = end) {
        end = base + kvm_fair_plan(rt, place->items, base, n, chunk);
        struct kvm_fair_ticket ft;
        if (fair_gate(rt, place, base, end, deadline, &ft, fair_err, sizeof(fair_err)) != 0)
            continue; /* the deadline passed in the queue: nothing of the batch was sent */
        struct tmpreg regs[DATA_CHUNK_MAX] = {{0}};
        struct tp_batch *b = NULL;
        struct subq q;
        q.n = 0;
        unsigned first[DATA_CHUNK_MAX][KVM_MAX_REPLICAS], count[DATA_CHUNK_MAX][KVM_MAX_REPLICAS];
        memset(count, 0, sizeof(count));
        struct obs_span dsp, *ds = kvm_span_begin(rt, span, false, "data.write", &dsp);
        int64_t d_local = 0, d_remote = 0;
        struct cp_owners cpo = {.n = 0};
        struct fuse_sums fs = {.st = NULL, .n = end - base};
        for (size_t i = base; i < end; i++) {
            struct kvm_item *it = &place->items[i];
            if (it->rc || it->published) /* (published: its owner took the bytes and routed) */
                continue;
            /* The checksum: fused with the local copy when there is one (distinct owners: at
             * most one replica is local), else with the first remote replica's transfer when the
             * transport folds it as it moves the bytes (tp_segment_sums: shm, tcp), else one
             * pass right before the transport reads the same bytes. */
            bool pre = place->winl.on; /* summed before the reservations (put_inline.c) */
            bool summed = pre;
            for (uint32_t r = 0; r < it->n_res; r++)
                summed = summed || it->res[r].local;
            if (!pre)
                KVM_CP_COUNT(place, op_checksum_passes_total, OBS_NONE, 1);
            for (uint32_t r = 0; r < it->n_res && !it->rc; r++) {
                struct kvm_res *res = &it->res[r];
                if (res->written) /* the owner took the bytes with the reservation */
                    continue;
                if (res->local) {
                    if (b)
                        (void)subq_flush(b, &q); /* (a failure fails those items, below) */
                    it->rc = local_copy(rt, SEG_WRITE, res->seg, res->offset, it->len, res->token,
                                        sgs[i].iov, sgs[i].iovcnt, pre ? NULL : &it->checksum);
                    KVM_CP_COUNT(place, op_payload_copies_total, OBS_TRANSPORT_LOCAL, 1);
                    d_local++;
                    continue;
                }
                d_remote++;
                struct tp_segment *seg;
                int e = res->data_addr ? seg_open_memo(rt, &memo, res->data_addr, res->seg,
                                                       res->seg_read_token, &seg)
                                       : KVMESH_EUNAVAILABLE;
                if (!e) /* the reservation reply is the owner's write grant: no exchange */
                    tp_segment_note_grant(
                        seg, &(struct seg_grant){.seg_id = res->seg,
                                                 .offset = res->offset,
                                                 .length = it->len,
                                                 .rights = SEG_WRITE,
                                                 .expiry_ns = reserved_from_ns +
                                                              kvm_reserve_ttl_ms(rt) * 1000000ull,
                                                 .token = res->token});
                if (!e && !all_reg && !regs[i - base].addr)
                    e = reg_span(rt, sgs[i].iov, sgs[i].iovcnt, &regs[i - base]);
                if (!e && !b) {
                    e = tp_batch_new(rt->tp, put_batch_cap(place->items, sgs, base, end), &b);
                    if (!e) /* a lone one-chunk tcp request then runs on this thread */
                        tp_batch_set_deadline(b, deadline);
                }
                if (!e && subq_count(b, &q) + (unsigned)sgs[i].iovcnt > TP_MAX_BATCH)
                    e = KVMESH_ETOOBIG;
                if (!e) {
                    struct kvm_sum *fuse = NULL; /* digested after the batch (fs) */
                    if (!summed && tp_segment_sums(seg, nreqs(sgs[i].iov, sgs[i].iovcnt)))
                        fuse = fuse_start(&fs, i - base);
                    if (!summed && !fuse)
                        it->checksum = sg_checksum(sgs[i].iov, sgs[i].iovcnt);
                    summed = true;
                    first[i - base][r] = subq_count(b, &q);
                    e = add_reqs(b, &q, TP_WRITE, sgs[i].iov, sgs[i].iovcnt, seg, res->offset,
                                 res->token, fuse);
                    count[i - base][r] = subq_count(b, &q) - first[i - base][r];
                    if (!e)
                        cp_transfer(place, seg, &res->owner.id, &cpo);
                }
                if (e)
                    it->rc = kvm_errf(e, "payload write to %s failed: %s",
                                      res->data_addr ? res->data_addr : "?", kvmesh_last_error());
            }
            if (!summed && !it->rc) /* (no replica at all) */
                it->checksum = sg_checksum(sgs[i].iov, sgs[i].iovcnt);
        }
        if (b) {
            (void)subq_flush(b, &q); /* (a failure fails those items, below) */
            bool late = batch_wait_by(b, deadline);
            KVM_CP_COUNT(place, op_round_trips_total, OBS_CPSTAGE_PAYLOAD,
                         cpo.n + tp_batch_exchanges(b));
            for (size_t i = base; i < end; i++) {
                struct kvm_item *it = &place->items[i];
                for (uint32_t r = 0; r < it->n_res && !it->rc; r++)
                    for (unsigned k = 0; k < count[i - base][r]; k++) {
                        int st = tp_status(b, first[i - base][r] + k, NULL);
                        if (st != 0) {
                            bool timed = late || st == TP_STATUS_PENDING;
                            it->rc = kvm_errf(timed ? KVMESH_ETIMEDOUT : st,
                                              "payload write to a replica %s; the put was not "
                                              "applied",
                                              timed ? "did not finish by the deadline"
                                                    : kvmesh_strerror(st));
                            report_bad(rt, &it->res[r].owner.id);
                            break;
                        }
                    }
            }
            tp_batch_free(b);
            for (size_t i = base; i < end; i++) /* complete: every write of the item succeeded */
                if (fs.on[i - base] && !place->items[i].rc)
                    place->items[i].checksum = kvm_sum_digest(&fs.st[i - base]);
        }
        fuse_end(&fs);
        kvm_fair_release(rt, &ft); /* completed or failed: nothing of it is in flight */
        for (size_t i = base; i < end; i++)
            reg_drop(rt, &regs[i - base]);
        if (ds) {
            int drc = 0;
            for (size_t i = base; i < end && !drc; i++)
                drc = place->items[i].rc;
            obs_span_set_int(ds, "kvmesh.local_replicas", d_local);
            obs_span_set_int(ds, "kvmesh.remote_replicas", d_remote);
            kvm_span_finish(ds, drc);
        }
    }

    /* Publish what was written; abort the rest (also what the deadline left no time to
     * publish: nothing of it was sent, so it is known not to be applied). An item its owner
     * published as the key's shard primary (put_primary.c) is done: neither. */
    if (kvm_deadline_left_ms(deadline) == 0)
        for (size_t i = 0; i < n; i++)
            if (place->items[i].rc == 0 && !place->items[i].published)
                place->items[i].rc =
                    kvm_errf(KVMESH_ETIMEDOUT, "deadline passed before the route update was "
                                               "sent; the put was not applied (retry)");
    size_t n_ok = 0, n_bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (place->items[i].published)
            continue;
        if (place->items[i].rc == 0)
            n_ok++;
        else if (place->items[i].n_res)
            n_bad++;
    }
    kvm_op_t *pub = n_ok ? kvm_op_new(rt, KVM_OP_PUBLISH, n_ok) : NULL;
    kvm_op_t *ab = n_bad ? kvm_op_new(rt, KVM_OP_ABORT, n_bad) : NULL;
    if ((n_ok && !pub) || (n_bad && !ab)) {
        kvm_op_unref(pub);
        kvm_op_unref(ab);
        rc = KVMESH_ENOMEM;
        goto out;
    }
    if (pub) {
        pub->span = span;
        pub->deadline_ms = deadline;
        pub->cp_op = place->cp_op;
    }
    if (ab) {
        ab->span = span;
        ab->cp_op = place->cp_op;
    }
    size_t k = 0, j = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvm_item *it = &place->items[i];
        kvm_op_t *dst = it->published ? NULL : it->rc == 0 ? pub : it->n_res ? ab : NULL;
        if (!dst)
            continue;
        struct kvm_item *d = &dst->items[dst == pub ? k++ : j++];
        d->ident = it->ident; /* moved */
        memset(&it->ident, 0, sizeof(it->ident));
        d->len = it->len;
        d->checksum = it->checksum;
        d->n_res = it->n_res;
        memcpy(d->res, it->res, sizeof(it->res));
        d->q = it->q; /* tenant quota state (quota.c), moved */
        it->q = NULL;
    }
    char saved_err[512] = "";
    if (ab) {
        kvm_op_run(ab);
        kvm_op_unref(ab);
    }
    if (pub) {
        rc = kvm_op_run(pub);
        if (!rc && pub->err_set) /* (an abandoned op's fields still belong to the loop) */
            snprintf(saved_err, sizeof(saved_err), "%s", pub->err);
    }
    k = 0;
    int first_rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct kvm_item *it = &place->items[i];
        int r = it->rc;
        if (r == 0 && !it->published)
            r = rc ? rc : pub->items[k++].rc;
        rcs[i] = r;
        if (r && !first_rc)
            first_rc = r;
    }
    kvm_op_unref(pub);
    if (first_rc && !rc) {
        if (saved_err[0])
            kvm_errf(first_rc, "%s", saved_err);
        else if (fair_err[0])
            kvm_errf(first_rc, "%s", fair_err);
        else if (place->err_set)
            kvm_errf(first_rc, "%s", place->err);
    }
    rc = rc ? rc : first_rc;
    kvm_op_unref(place);
    return rc;
out:
    for (size_t i = 0; i < n; i++)
        rcs[i] = rc;
    kvm_op_unref(place);
    return rc;
}

int kvm_store_put(kvm_rt_t *rt, const kvm_ident_t *ids, const struct kvm_sg *sgs, size_t n,
                  const kvmesh_put_opts_t *opts, int *rcs)
{
    struct obs_span sp, *s = kvm_span_begin(rt, NULL, true, "store.put", &sp);
    if (s) {
        obs_span_set_int(s, "kvmesh.items", (int64_t)n);
        if (n == 1)
            obs_span_set_int(s, "kvmesh.bytes", (int64_t)sgs[0].len);
    }
    int rc = put_impl(rt, ids, sgs, n, opts, rcs, s);
    kvm_span_finish(s, rc);
    return rc;
}

/* ---- get ------------------------------------------------------------------------------------ */

/* Plans the next chunk of round `round` from items[base] (one tenant, within the fair limits;
 * *end set) and takes its ticket when it reads from other runtimes. Nonzero: the chunk is not
 * read now; a deadline that passed in the queue sets *late. */
static int read_gate(kvm_rt_t *rt, kvm_op_t *look, const struct kvm_sgout *outs, size_t base,
                     size_t n, size_t chunk, uint32_t round, uint64_t deadline, size_t *end,
                     struct kvm_fair_ticket *ft, bool *late)
{
    KVM_ASSERT(chunk >= 1 && chunk <= DATA_CHUNK_MAX);
    uint64_t wire[DATA_CHUNK_MAX], total = 0;
    size_t m = n - base < chunk ? n - base : chunk;
    for (size_t k = 0; k < m; k++) {
        const struct kvm_item *it = &look->items[base + k];
        bool remote = outs[base + k].rc == KVMESH_EAGAIN && round < it->route.n_replicas &&
                      it->acc[round].known && !it->acc[round].local;
        wire[k] = remote ? it->route.length : 0;
    }
    *end = base + kvm_fair_plan_wire(rt, &look->items[base], wire, m);
    for (size_t k = 0; k < *end - base; k++)
        total += wire[k];
    memset(ft, 0, sizeof(*ft));
    if (total == 0)
        return 0;
    int rc = kvm_fair_acquire(rt, &look->items[base].ident, (uint32_t)(*end - base), total,
                              deadline, ft);
    if (rc == KVMESH_ETIMEDOUT)
        *late = true;
    return rc;
}

static int get_round(kvm_rt_t *rt, kvm_op_t *look, struct kvm_sgout *outs, size_t n, uint32_t round,
                     bool *bad_sum, uint64_t deadline, bool *late)
{
    int progress = 0;
    size_t chunk = get_chunk(rt, outs, n);
    const bool all_reg = chunk == DATA_CHUNK_MAX; /* (as in the put's payload, above) */
    struct seg_memo memo = {.h = NULL};
    for (size_t base = 0, end; base < n; base = end) {
        struct kvm_fair_ticket ft; /* remote reads of this chunk: its tenant's turn (fair.c) */
        if (read_gate(rt, look, outs, base, n, chunk, round, deadline, &end, &ft, late) != 0)
            continue; /* not read this round (deadline in the queue, or the queue full) */
        struct obs_span dsp, *ds = NULL;
        int64_t d_local = 0, d_remote = 0, d_ok = 0;
        for (size_t i = base; i < end && look->span && !ds; i++)
            if (outs[i].rc == KVMESH_EAGAIN && round < look->items[i].route.n_replicas &&
                look->items[i].acc[round].known)
                ds = kvm_span_begin(rt, look->span, false, "data.read", &dsp);
        struct tmpreg regs[DATA_CHUNK_MAX] = {{0}};
        struct tp_batch *b = NULL;
        struct subq q;
        q.n = 0;
        unsigned first[DATA_CHUNK_MAX] = {0}, count[DATA_CHUNK_MAX] = {0};
        bool tried[DATA_CHUNK_MAX] = {0};
        uint64_t lsum[DATA_CHUNK_MAX]; /* checksums fused with the local copies (fused[]) */
        bool fused[DATA_CHUNK_MAX] = {0};
        struct fuse_sums fs = {.st = NULL, .n = end - base}; /* ... and the transport's */
        struct cp_owners cpo = {.n = 0};
        const bool verify_local = rt->cfg.verify_reads == KVM_VERIFY_ALWAYS;
        const bool verify_remote = rt->cfg.verify_reads != KVM_VERIFY_NEVER;
        for (size_t i = base; i < end; i++) {
            struct kvm_item *it = &look->items[i];
            struct kvm_sgout *o = &outs[i];
            if (o->rc != KVMESH_EAGAIN || round >= it->route.n_replicas)
                continue;
            const kvm_hot_replica_t *rep = &it->route.replicas[round];
            const struct kvm_access *a = &it->acc[round];
            if (!a->known)
                continue;
            tried[i - base] = true;
            if (a->local)
                d_local++;
            else
                d_remote++;
            if (a->local) {
                if (b)
                    (void)subq_flush(b, &q); /* (a failure fails those items, below) */
                int e = local_copy(rt, SEG_READ, rep->segment, rep->offset, it->route.length,
                                   a->seg_read_token, o->iov, o->iovcnt,
                                   verify_local ? &lsum[i - base] : NULL);
                KVM_CP_COUNT(look, op_payload_copies_total, OBS_TRANSPORT_LOCAL, 1);
                count[i - base] = e ? 1u : 0u; /* marks a failed local read */
                fused[i - base] = verify_local;
                continue;
            }
            struct tp_segment *seg;
            int e = seg_open_memo(rt, &memo, a->data_addr, rep->segment, a->seg_read_token, &seg);
            if (!e && !all_reg)
                e = reg_span(rt, o->iov, o->iovcnt, &regs[i - base]);
            if (!e && !b) {
                e = tp_batch_new(rt->tp, get_batch_cap(outs, base, end), &b);
                if (!e) /* a lone one-chunk tcp request then runs on this thread */
                    tp_batch_set_deadline(b, deadline);
            }
            if (!e && subq_count(b, &q) + (unsigned)o->iovcnt > TP_MAX_BATCH)
                e = KVMESH_ETOOBIG;
            if (!e) {
                struct kvm_sum *fuse = NULL; /* verified as received (shm, tcp) */
                if (verify_remote && tp_segment_sums(seg, nreqs(o->iov, o->iovcnt)))
                    fuse = fuse_start(&fs, i - base);
                first[i - base] = subq_count(b, &q);
                e = add_reqs(b, &q, TP_READ, o->iov, o->iovcnt, seg, rep->offset, a->seg_read_token,
                             fuse);
                fused[i - base] = fuse != NULL; /* complete when the reads succeeded (below) */
                count[i - base] = subq_count(b, &q) - first[i - base];
                if (!e)
                    cp_transfer(look, seg, &rep->owner, &cpo);
            }
            if (e) {
                tried[i - base] = false;
                report_bad(rt, &rep->owner);
            }
        }
        if (b)
            (void)subq_flush(b, &q); /* (a failure fails those items, below) */
        bool chunk_late = b && batch_wait_by(b, deadline);
        if (b)
            KVM_CP_COUNT(look, op_round_trips_total, OBS_CPSTAGE_PAYLOAD,
                         cpo.n + tp_batch_exchanges(b));
        *late = *late || chunk_late;
        for (size_t i = base; i < end; i++) {
            if (!tried[i - base])
                continue;
            struct kvm_item *it = &look->items[i];
            struct kvm_sgout *o = &outs[i];
            const kvm_hot_replica_t *rep = &it->route.replicas[round];
            bool ok = true;
            if (it->acc[round].local) {
                ok = count[i - base] == 0;
            } else {
                for (unsigned k = 0; k < count[i - base] && ok; k++)
                    ok = tp_status(b, first[i - base] + k, NULL) == 0;
            }
            bool local = it->acc[round].local;
            if (ok && (local ? verify_local : verify_remote)) { /* verify_reads policy */
                KVM_CP_COUNT(look, op_checksum_passes_total, OBS_NONE, 1);
                uint64_t sum = !fused[i - base] ? sg_checksum(o->iov, o->iovcnt)
                               : local          ? lsum[i - base]
                                                : kvm_sum_digest(&fs.st[i - base]);
                if (sum != it->route.checksum) {
                    ok = false;
                    *bad_sum = true;
                }
            }
            if (ok) {
                o->rc = 0;
                progress++;
                d_ok++;
            } else if (!chunk_late) {
                report_bad(rt, &rep->owner); /* (a read cut off by the deadline proves nothing) */
            }
        }
        if (b)
            tp_batch_free(b);
        fuse_end(&fs);
        kvm_fair_release(rt, &ft); /* completed or failed: nothing of it is in flight */
        for (size_t i = base; i < end; i++)
            reg_drop(rt, &regs[i - base]);
        if (ds) {
            obs_span_set_int(ds, "kvmesh.replica_round", round);
            obs_span_set_int(ds, "kvmesh.local_replicas", d_local);
            obs_span_set_int(ds, "kvmesh.remote_replicas", d_remote);
            kvm_span_finish(ds, d_ok == d_local + d_remote ? 0 : KVMESH_EUNAVAILABLE);
        }
    }
    return progress;
}

/* Whether replica round `round` has an item to read: one still unread (KVMESH_EAGAIN) whose
 * route has that many replicas. A round without one does nothing (get_round skips every item),
 * so the rounds stop there instead of running their setup and a clock read for all
 * KVM_MAX_REPLICAS rounds of every get (docs/performance.md "Per-op CPU, fourth round"). */
static bool reads_left(const kvm_op_t *look, const struct kvm_sgout *outs, size_t n, uint32_t round)
{
    for (size_t i = 0; i < n; i++)
        if (outs[i].rc == KVMESH_EAGAIN && round < look->items[i].route.n_replicas)
            return true;
    return false;
}

/* Whether item o is (re)read in attempt `attempt` of get_impl: every item in the first, then
 * those whose read needs another look (checksum failure, route changed, owner moved). */
static bool get_todo(const struct kvm_sgout *o, int attempt)
{
    return attempt == 0 || o->rc == KVMESH_ECHECKSUM || o->rc == KVMESH_ECONFLICT;
}

/* A failure of the whole attempt (the lookup op could not be built, sent or finished by the
 * deadline): every item the attempt was for fails with rc, so that no caller takes an item that
 * was never read for a hit (its rc is 0 before the first attempt sets it). */
static int get_fail(struct kvm_sgout *outs, size_t n, int attempt, int rc)
{
    for (size_t i = 0; i < n; i++)
        if (get_todo(&outs[i], attempt)) {
            outs[i].rc = rc;
            outs[i].read_failed = false;
        }
    return rc;
}

/* Item o's cold restore answered e: its result, or a mark for another look (attempt < 2). */
static void cold_settle(struct kvm_sgout *o, int e, int attempt, bool *bad_sum, bool *refresh)
{
    if (e == KVMESH_ECHECKSUM || e == KVMESH_ECORRUPT) {
        *bad_sum = true; /* (o stays to read: answered KVMESH_ECHECKSUM at the end) */
    } else if ((e == KVMESH_ECONFLICT || e == KVMESH_ECONN || e == KVMESH_EUNAVAILABLE) &&
               attempt < 2) {
        o->rc = KVMESH_ECONFLICT; /* the route changed (e.g. re-promoted), or the owner moved:
                                   * look it up again */
        *refresh |= e != KVMESH_ECONFLICT;
    } else if (e != 0 && e != KVMESH_ETIMEDOUT) {
        o->rc = e;
        o->read_failed = true;
    } else if (e == 0) {
        o->rc = 0;
    }
}

/* The cold restores of one attempt: the items still to read whose route has a materialized cold
 * copy. One such item goes through kvm_cold_read; several through one kvm_cold_read_batch. None:
 * nothing, and no clock read (the one-at-a-time loop below read it once per item, whether or not
 * any item had a cold copy: 128 reads per 4 KiB batch get). */
static void get_cold(kvm_rt_t *rt, kvm_op_t *look, struct kvm_sgout *outs, size_t n, int attempt,
                     uint64_t deadline, bool *bad_sum, bool *refresh)
{
    size_t nc = 0;
    for (size_t i = 0; i < n; i++)
        nc +=
            outs[i].rc == KVMESH_EAGAIN && look->items[i].route.cold.kind == KVM_COLD_MATERIALIZED;
    if (nc == 0)
        return;
    kvm_cold_bitem_t *bi = nc > 1 ? calloc(nc, sizeof(*bi)) : NULL;
    size_t *at = bi ? calloc(nc, sizeof(*at)) : NULL;
    if (at) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (outs[i].rc == KVMESH_EAGAIN &&
                look->items[i].route.cold.kind == KVM_COLD_MATERIALIZED) {
                bi[k] = (kvm_cold_bitem_t){
                    .route = &look->items[i].route, .iov = outs[i].iov, .iovcnt = outs[i].iovcnt};
                at[k++] = i;
            }
        if (kvm_deadline_left_ms(deadline) > 0)
            kvm_cold_read_batch(rt, bi, nc, deadline);
        else
            nc = 0;
        for (size_t k2 = 0; k2 < nc; k2++)
            cold_settle(&outs[at[k2]], bi[k2].rc, attempt, bad_sum, refresh);
        free(at);
        free(bi);
        return;
    }
    free(bi); /* (one item, or no memory for the batch: one at a time) */
    for (size_t i = 0; i < n; i++)
        if (outs[i].rc == KVMESH_EAGAIN &&
            look->items[i].route.cold.kind == KVM_COLD_MATERIALIZED) {
            if (kvm_deadline_left_ms(deadline) <= 0)
                break;
            cold_settle(
                &outs[i],
                kvm_cold_read(rt, &look->items[i].route, outs[i].iov, outs[i].iovcnt, deadline),
                attempt, bad_sum, refresh);
        }
}

static int get_impl(kvm_rt_t *rt, const kvm_ident_t *ids, struct kvm_sgout *outs, size_t n,
                    struct obs_span *span)
{
    int rc = 0;
    char lookup_err[512] = "";
    uint64_t deadline = kvm_deadline_new(rt); /* one deadline for lookups and every read round */
    bool late = false, refresh = false;
    struct kvm_sum isum; /* a lent buffer's checksum, folded by the loop (kvm_get_inline_lend) */
    for (size_t i = 0; i < n; i++) { /* what an item no attempt reached answers */
        outs[i].rc = KVMESH_ETIMEDOUT;
        outs[i].read_failed = true;
    }
    /* attempt 0, then up to two more looks for the items that need one (checksum failure,
     * route changed under a cold read, owner moved), all within the one deadline */
    for (int attempt = 0; attempt < 3 && kvm_deadline_left_ms(deadline) > 0; attempt++) {
        /* An owner the snapshot did not list, or whose listed address refused us (it joined
         * or restarted since the last periodic refresh): refresh once, then look up again. */
        if (refresh) {
            refresh = false;
            (void)kvm_rt_refresh_sync(rt, deadline);
        }
        size_t todo = 0;
        for (size_t i = 0; i < n; i++)
            todo += get_todo(&outs[i], attempt);
        if (!todo)
            break;
        kvm_op_t *look = kvm_op_new(rt, KVM_OP_LOOKUP, n);
        if (!look)
            return get_fail(outs, n, attempt, KVMESH_ENOMEM);
        look->span = span;
        look->deadline_ms = deadline;
        look->cp_op = 1 + (n == 1 ? OBS_OP_GET : OBS_OP_BATCH_GET);
        for (size_t i = 0; i < n && !rc; i++)
            rc = kvm_ident_copy(&look->items[i].ident, &ids[i]);
        kvm_get_inline_prepare(rt, look, outs, n); /* the bytes with the routes (get_inline.c) */
        kvm_get_inline_lend(rt, look, outs, n, &isum); /* ... received into the caller's buffer */
        if (!rc)
            rc = kvm_op_run(look);
        kvm_get_inline_detach(look); /* (nothing lands in the caller's buffer after this) */
        if (rc) {
            kvm_op_unref(look);
            return get_fail(outs, n, attempt, rc);
        }
        for (size_t i = 0; i < n; i++) {
            struct kvm_item *it = &look->items[i];
            struct kvm_sgout *o = &outs[i];
            if (!get_todo(o, attempt))
                continue;
            if (it->rc) {
                o->rc = it->rc;
                o->read_failed = false;
                continue;
            }
            o->out_len = it->route.length;
            if (o->alloc && kvm_get_inline_adopt(rt, look, outs, n))
                continue; /* the lookup's bytes are the result (a single get) */
            if (o->alloc) {
                free(o->alloc_buf);
                o->alloc_buf = malloc(it->route.length ? it->route.length : 1);
                if (!o->alloc_buf) {
                    o->rc = KVMESH_ENOMEM;
                    continue;
                }
                o->one.iov_base = o->alloc_buf;
                o->one.iov_len = it->route.length;
                o->iov = &o->one;
                o->iovcnt = 1;
                o->cap = it->route.length;
            }
            if (o->cap < it->route.length) {
                o->rc = KVMESH_ETOOBIG;
                continue;
            }
            /* Trim the scatter list to the object length. */
            uint64_t left = it->route.length;
            int cnt = 0;
            for (; cnt < o->iovcnt_in && left; cnt++) {
                o->trim[cnt] = o->iov_in ? o->iov_in[cnt] : o->one;
                if (o->trim[cnt].iov_len > left)
                    o->trim[cnt].iov_len = left;
                left -= o->trim[cnt].iov_len;
            }
            if (!o->alloc) {
                o->iov = o->trim;
                o->iovcnt = cnt;
            }
            o->rc = KVMESH_EAGAIN; /* to read */
        }
        (void)kvm_get_inline_take(rt, look, outs, n); /* served by the lookups' answers */
        bool bad_sum = false;
        for (uint32_t round = 0; round < KVM_MAX_REPLICAS && reads_left(look, outs, n, round) &&
                                 kvm_deadline_left_ms(deadline) > 0;
             round++)
            get_round(rt, look, outs, n, round, &bad_sum, deadline, &late);
        /* Cold tier: an object with no readable hot replica and a materialized cold copy is
         * restored from the device (verified against the route; cold_read.c): alone through
         * the single-object path, several as one batch restore grouped by owner and device
         * (cold_rbatch.c). */
        get_cold(rt, look, outs, n, attempt, deadline, &bad_sum, &refresh);
        late = late || kvm_deadline_left_ms(deadline) == 0;
        for (size_t i = 0; i < n && attempt == 0 && !late; i++) {
            struct kvm_item *it = &look->items[i];
            bool unknown = false; /* (an owner that left is not waited for: only new ones) */
            for (uint32_t r = 0; r < it->route.n_replicas && outs[i].rc == KVMESH_EAGAIN; r++)
                unknown |= it->acc[r].unseen;
            if (unknown) { /* every listed replica failed and an owner joined since the snapshot */
                outs[i].rc = KVMESH_ECONFLICT;
                refresh = true;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (outs[i].rc == KVMESH_EAGAIN) {
                outs[i].rc = late      ? KVMESH_ETIMEDOUT
                             : bad_sum ? KVMESH_ECHECKSUM
                                       : KVMESH_EUNAVAILABLE;
                outs[i].read_failed = true;
            }
        if (look->err_set)
            snprintf(lookup_err, sizeof(lookup_err), "%s", look->err);
        kvm_get_inline_recycle(rt, look); /* (a batch's inline room: kept for the next) */
        kvm_op_unref(look);
    }
    for (size_t i = 0; i < n; i++)
        if (outs[i].rc == KVMESH_ECONFLICT) { /* its second look was cut off by the deadline */
            outs[i].rc = KVMESH_EUNAVAILABLE;
            outs[i].read_failed = true;
        }
    size_t fi = n;
    for (size_t i = 0; i < n && fi == n; i++)
        if (outs[i].rc && outs[i].rc != KVMESH_ENOENT && outs[i].rc != KVMESH_ETOOBIG)
            fi = i;
    if (fi == n)
        return 0;
    int first = outs[fi].rc;
    if (!outs[fi].read_failed)
        return kvm_errf(first, "%s", lookup_err[0] ? lookup_err : kvmesh_strerror(first));
    if (first == KVMESH_ECHECKSUM)
        return kvm_errf(first, "every replica failed its checksum (reported to their owners)");
    if (first == KVMESH_EUNAVAILABLE)
        return kvm_errf(first, "no replica of the object could be read (owners unreachable)");
    if (first == KVMESH_ETIMEDOUT)
        return kvm_errf(first,
                        "no replica of the object could be read by the deadline of %u ms "
                        "(owners slow or stopped); nothing was changed",
                        rt->cfg.request_timeout_ms);
    return first;
}

int kvm_store_get(kvm_rt_t *rt, const kvm_ident_t *ids, struct kvm_sgout *outs, size_t n)
{
    struct obs_span sp, *s = kvm_span_begin(rt, NULL, true, "store.get", &sp);
    if (s)
        obs_span_set_int(s, "kvmesh.items", (int64_t)n);
    int rc = get_impl(rt, ids, outs, n, s);
    if (s && !rc && n == 1)
        obs_span_set_int(s, "kvmesh.hit", outs[0].rc == 0);
    kvm_span_finish(s, rc);
    return rc;
}

/* ---- route info / remove ---------------------------------------------------------------- */

int kvm_store_lookup(kvm_rt_t *rt, const kvm_ident_t *ids, size_t n, kvm_route_t *routes, int *rcs)
{
    kvm_op_t *look = kvm_op_new(rt, KVM_OP_LOOKUP, n);
    if (!look)
        return KVMESH_ENOMEM;
    int rc = 0;
    look->deadline_ms = kvm_deadline_new(rt);
    look->cp_op = 1 + OBS_OP_EXIST; /* exist and batch exist alike */
    for (size_t i = 0; i < n && !rc; i++)
        rc = kvm_ident_copy(&look->items[i].ident, &ids[i]);
    if (!rc)
        rc = kvm_op_run(look);
    for (size_t i = 0; i < n; i++) {
        rcs[i] = rc ? rc : look->items[i].rc;
        if (!rcs[i] && routes)
            rcs[i] = kvm_route_copy(&routes[i], &look->items[i].route);
    }
    kvm_op_unref(look);
    return rc;
}

static int remove_impl(kvm_rt_t *rt, const kvm_ident_t *ids, size_t n, int *rcs,
                       struct obs_span *span)
{
    kvm_op_t *op = kvm_op_new(rt, KVM_OP_REMOVE, n);
    if (!op)
        return KVMESH_ENOMEM;
    op->span = span;
    op->deadline_ms = kvm_deadline_new(rt);
    op->cp_op = 1 + (n == 1 ? OBS_OP_REMOVE : OBS_OP_BATCH_REMOVE);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = kvm_ident_copy(&op->items[i].ident, &ids[i]);
    if (!rc)
        rc = kvm_op_run(op);
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        rcs[i] = rc ? rc : op->items[i].rc;
        if (rcs[i] && !first)
            first = rcs[i];
    }
    if (!rc && first && op->err_set)
        kvm_errf(first, "%s", op->err);
    kvm_op_unref(op);
    return rc ? rc : first;
}

int kvm_store_remove(kvm_rt_t *rt, const kvm_ident_t *ids, size_t n, int *rcs)
{
    struct obs_span sp, *s = kvm_span_begin(rt, NULL, true, "store.remove", &sp);
    if (s)
        obs_span_set_int(s, "kvmesh.items", (int64_t)n);
    int rc = remove_impl(rt, ids, n, rcs, s);
    kvm_span_finish(s, rc);
    return rc;
}

/* ---- drain ---------------------------------------------------------------------------------- */

static int simple_op(kvm_rt_t *rt, enum kvm_op_type t)
{
    kvm_op_t *op = kvm_op_new(rt, t, 0);
    if (!op)
        return KVMESH_ENOMEM;
    int rc = kvm_op_run(op);
    kvm_op_unref(op);
    return rc;
}

int kvm_store_wait_slots(kvm_rt_t *rt, uint64_t *gen, uint64_t deadline_ms)
{
    return kvm_waitq_wait(&rt->wq_slots, gen, deadline_ms);
}

/* The drain's shell (store/drain_core.h, docs/store.md "Drain core"): the core decides; this
 * runs its effects in batches, in this order, until the core asks done: one ABORT op for the
 * reservations to give back, one HANDOFF op for the route CASes, one DRAIN_LIST op per listing,
 * one PLACE op for a page's reservations, one transport batch for its copies, and the writers
 * period as a timed pause that close ends. The HANDOFF op (ops_publish.c) itself commits the new
 * slot and releases the old replica when its CAS applied, and gives the new reservation back when
 * the CAS was refused or the route no longer named the old replica: the core's commit_new,
 * release_old and release_new (REFUSED, SUPERSEDED) effects after a CAS answer are that op's
 * work, checked here and not repeated. */
enum { DW_RESERVE = 1, DW_COPY = 2, DW_CAS = 4, DW_ABORT = 8 };

typedef struct dshell {
    kvm_rt_t *rt;
    drain_core_t *core;
    uint64_t seg_filter;
    bool want_list, in_handoff, timer_armed, done;
    uint64_t cursor, timer_ms;
    uint32_t cap;
    int rc;
    /* the page: the listing op owns ids; the PLACE op holds the reservations */
    size_t n;
    kvm_op_t *list_op, *place;
    kvm_hot_replica_t reps[DRAIN_PAGE_MAX];
    kvm_ident_t ids[DRAIN_PAGE_MAX];
    uint64_t tokens[DRAIN_PAGE_MAX];
    uint8_t want[DRAIN_PAGE_MAX]; /* DW_* per item */
} dshell_t;

static uint64_t now_ns(void)
{
    return env_clock_mono_ms() * 1000000ull;
}

static void dfx_list(void *ctx, uint64_t cursor, uint32_t cap)
{
    dshell_t *sh = ctx;
    sh->want_list = true;
    sh->cursor = cursor;
    sh->cap = cap;
}

static void dfx_want(void *ctx, uint32_t i, uint8_t what)
{
    dshell_t *sh = ctx;
    KVM_ASSERT(i < sh->n);
    sh->want[i] |= what;
}

static void dfx_reserve(void *ctx, uint32_t i)
{
    dfx_want(ctx, i, DW_RESERVE);
}

static void dfx_copy(void *ctx, uint32_t i)
{
    dfx_want(ctx, i, DW_COPY);
}

static void dfx_cas(void *ctx, uint32_t i)
{
    dfx_want(ctx, i, DW_CAS);
}

static void dfx_settled_by_handoff(void *ctx, uint32_t i)
{
    (void)i;
    KVM_ASSERT(((dshell_t *)ctx)->in_handoff); /* the HANDOFF op committed / released */
}

static void dfx_release_new(void *ctx, uint32_t i, enum drain_release why)
{
    if (why == DRAIN_REL_COPY_FAILED || why == DRAIN_REL_CLOSED)
        dfx_want(ctx, i, DW_ABORT);
    else
        dfx_settled_by_handoff(ctx, i);
}

static void dfx_arm_timer(void *ctx, uint64_t at_ns)
{
    dshell_t *sh = ctx;
    sh->timer_armed = true;
    sh->timer_ms = (at_ns + 999999) / 1000000;
}

static void dfx_done(void *ctx, int rc)
{
    dshell_t *sh = ctx;
    sh->done = true;
    sh->rc = rc;
}

static const drain_effects_t drain_fx = {
    .list = dfx_list,
    .reserve = dfx_reserve,
    .copy = dfx_copy,
    .cas = dfx_cas,
    .commit_new = dfx_settled_by_handoff,
    .release_new = dfx_release_new,
    .release_old = dfx_settled_by_handoff,
    .arm_timer = dfx_arm_timer,
    .done = dfx_done,
};

static void page_drop(dshell_t *sh)
{
    kvm_op_unref(sh->place);
    kvm_op_unref(sh->list_op); /* frees ids */
    sh->place = sh->list_op = NULL;
    sh->n = 0;
    memset(sh->want, 0, sizeof(sh->want));
}

static void shell_list(dshell_t *sh)
{
    sh->want_list = false;
    page_drop(sh);
    kvm_op_t *op = kvm_op_new(sh->rt, KVM_OP_DRAIN_LIST, 0);
    if (!op) {
        drain_core_listed(sh->core, now_ns(), KVMESH_ENOMEM, 0, sh->cursor);
        return;
    }
    memset(sh->ids, 0, sizeof(sh->ids));
    op->list = sh->reps;
    op->list_ident = sh->ids;
    op->list_tokens = sh->tokens;
    op->seg_arg = sh->seg_filter;
    op->list_cap = sh->cap;
    op->list_cursor = sh->cursor;
    int rc = kvm_op_run(op);
    sh->list_op = op;
    sh->n = rc ? 0 : op->list_n;
    drain_core_listed(sh->core, now_ns(), rc, (uint32_t)sh->n, op->list_cursor);
}

/* Owners that already hold a replica of an object are not candidates (distinct owners). */
static int place_excludes(dshell_t *sh, kvm_op_t *place)
{
    kvm_op_t *look = kvm_op_new(sh->rt, KVM_OP_LOOKUP, sh->n);
    int rc = look ? 0 : KVMESH_ENOMEM;
    for (size_t i = 0; i < sh->n && !rc; i++)
        rc = kvm_ident_copy(&look->items[i].ident, &sh->ids[i]);
    if (!rc)
        rc = kvm_op_run(look);
    for (size_t i = 0; i < sh->n && !rc; i++) {
        struct kvm_item *it = &place->items[i];
        rc = kvm_ident_copy(&it->ident, &sh->ids[i]);
        it->len = sh->reps[i].length;
        const kvm_route_t *r = &look->items[i].route;
        for (uint32_t j = 0; look->items[i].rc == 0 && j < r->n_replicas; j++)
            if (!kvm_id128_equal(&r->replicas[j].owner, &sh->rt->self.id) &&
                it->exclude_n < KVM_ARRAY_SIZE(it->exclude))
                it->exclude[it->exclude_n++] = r->replicas[j].owner;
    }
    kvm_op_unref(look);
    return rc;
}

/* The page's reservations: one PLACE op (every item of a page is placed at once). */
static void shell_place(dshell_t *sh)
{
    for (size_t i = 0; i < sh->n; i++) {
        KVM_ASSERT(sh->want[i] == DW_RESERVE);
        sh->want[i] = 0;
    }
    kvm_op_t *place = kvm_op_new(sh->rt, KVM_OP_PLACE, sh->n);
    int rc = place ? 0 : KVMESH_ENOMEM;
    if (place) {
        place->replicas = 1;
        rc = place_excludes(sh, place);
    }
    if (!rc)
        rc = kvm_op_run(place);
    sh->place = place;
    for (size_t i = 0; i < sh->n; i++) {
        struct kvm_item *it = rc ? NULL : &place->items[i];
        if (it && it->rc && it->n_res)
            sh->want[i] |= DW_ABORT; /* a failed placement that holds a reservation */
        drain_core_reserved(sh->core, now_ns(), (uint32_t)i, rc ? rc : it->rc);
    }
}

/* Copies one replica into its reservation: on this runtime (another segment: a retirement)
 * at once, elsewhere as a request of batch b (*slot its index). */
static int copy_one(dshell_t *sh, size_t i, struct tp_batch *b, struct seg **pin, int *slot)
{
    kvm_rt_t *rt = sh->rt;
    const kvm_hot_replica_t *rep = &sh->reps[i];
    struct kvm_res *res = &sh->place->items[i].res[0];
    uint8_t *src;
    enum seg_reason why;
    struct tp_segment *seg;
    int e = seg_check(rt->reg, rep->segment, rep->offset, rep->length, SEG_READ, sh->tokens[i],
                      &src, pin, &why);
    if (!e && res->local) {
        struct iovec v = {src, rep->length};
        return local_copy(rt, SEG_WRITE, res->seg, res->offset, rep->length, res->token, &v, 1,
                          NULL);
    }
    if (!e)
        e = res->data_addr
                ? kvm_rt_seg_open(rt, res->data_addr, res->seg, res->seg_read_token, &seg)
                : KVMESH_EUNAVAILABLE;
    if (!e) {
        struct tp_request rq = {.op = TP_WRITE,
                                .local = src,
                                .length = rep->length,
                                .segment = seg,
                                .remote_offset = res->offset,
                                .token = res->token};
        *slot = (int)tp_batch_count(b);
        e = tp_submit(b, &rq, 1);
    }
    return e;
}

/* The page's copies: one transport batch. */
static void shell_copy(dshell_t *sh)
{
    kvm_rt_t *rt = sh->rt;
    struct tp_batch *b = NULL;
    struct seg *pins[DRAIN_PAGE_MAX] = {0};
    int slot_of[DRAIN_PAGE_MAX], rcs[DRAIN_PAGE_MAX];
    int brc = tp_batch_new(rt->tp, TP_MAX_BATCH, &b) != 0 ? KVMESH_ENOMEM : 0;
    for (size_t i = 0; i < sh->n; i++) {
        slot_of[i] = -1;
        rcs[i] = 0;
        if (sh->want[i] & DW_COPY)
            rcs[i] = brc ? brc : copy_one(sh, i, b, &pins[i], &slot_of[i]);
    }
    if (b) {
        tp_batch_wait(b, (int)rt->cfg.request_timeout_ms);
        for (size_t i = 0; i < sh->n; i++)
            if (slot_of[i] >= 0 && tp_status(b, (unsigned)slot_of[i], NULL) != 0)
                rcs[i] = KVMESH_EIO;
        tp_batch_free(b);
    }
    for (size_t i = 0; i < sh->n; i++)
        if (pins[i])
            seg_unpin(rt->reg, pins[i]);
    for (size_t i = 0; i < sh->n; i++) {
        if (!(sh->want[i] & DW_COPY))
            continue;
        sh->want[i] &= (uint8_t)~DW_COPY;
        drain_core_copied(sh->core, now_ns(), (uint32_t)i, rcs[i]);
    }
}

/* An op over the page's items flagged what (ABORT or HANDOFF): each takes the item's
 * reservation (the identity moves into the op); NULL when none is flagged. */
static kvm_op_t *settle_op(dshell_t *sh, enum kvm_op_type t, uint8_t what, int *rc)
{
    size_t m = 0;
    for (size_t i = 0; i < sh->n; i++)
        m += (sh->want[i] & what) != 0;
    kvm_op_t *op = m ? kvm_op_new(sh->rt, t, m) : NULL;
    *rc = m && !op ? KVMESH_ENOMEM : 0;
    for (size_t i = 0, k = 0; op && i < sh->n; i++) {
        if (!(sh->want[i] & what))
            continue;
        struct kvm_item *it = &sh->place->items[i], *d = &op->items[k++];
        d->ident = it->ident;
        memset(&it->ident, 0, sizeof(it->ident));
        d->len = it->len;
        d->n_res = 1;
        d->res[0] = it->res[0];
        d->moving = sh->reps[i];
    }
    return op;
}

/* The reservations to give back (their copy failed, or the drain closed before its CAS). */
static void shell_abort(dshell_t *sh)
{
    int rc;
    kvm_op_t *ab = settle_op(sh, KVM_OP_ABORT, DW_ABORT, &rc);
    if (ab)
        kvm_op_run(ab); /* (a reservation not given back expires: its lookup settles it) */
    kvm_op_unref(ab);
    for (size_t i = 0; i < sh->n; i++)
        sh->want[i] &= (uint8_t)~DW_ABORT;
}

static enum drain_cas cas_answer_of(const struct kvm_item *it)
{
    if (it->rc == 0)
        return it->superseded ? DRAIN_CAS_SUPERSEDED : DRAIN_CAS_APPLIED;
    return kvm_cas_refused(it->rc) ? DRAIN_CAS_REFUSED : DRAIN_CAS_INDETERMINATE;
}

/* The route CASes: one HANDOFF op (per item: lookup, CAS, then commit and release). */
static void shell_handoff(dshell_t *sh)
{
    int rc;
    kvm_op_t *ho = settle_op(sh, KVM_OP_HANDOFF, DW_CAS, &rc);
    if (ho)
        rc = kvm_op_run(ho);
    sh->in_handoff = true;
    for (size_t i = 0, k = 0; i < sh->n; i++) {
        if (!(sh->want[i] & DW_CAS))
            continue;
        sh->want[i] &= (uint8_t)~DW_CAS;
        enum drain_cas ans = rc ? DRAIN_CAS_INDETERMINATE : cas_answer_of(&ho->items[k]);
        k++;
        drain_core_cas_answer(sh->core, now_ns(), (uint32_t)i, ans);
    }
    sh->in_handoff = false;
    kvm_op_unref(ho);
}

/* The writers period: a timed pause that close ends. */
static void shell_wait(dshell_t *sh)
{
    sh->timer_armed = false;
    if (kvm_waitq_pause(&sh->rt->wq_slots, sh->timer_ms) != 0)
        drain_core_close(sh->core, now_ns());
    else
        drain_core_timer(sh->core, now_ns());
}

static bool wants(const dshell_t *sh, uint8_t what)
{
    for (size_t i = 0; i < sh->n; i++)
        if (sh->want[i] & what)
            return true;
    return false;
}

static void shell_step(dshell_t *sh)
{
    if (wants(sh, DW_ABORT))
        shell_abort(sh);
    else if (wants(sh, DW_CAS))
        shell_handoff(sh);
    else if (sh->want_list)
        shell_list(sh);
    else if (wants(sh, DW_RESERVE))
        shell_place(sh);
    else if (wants(sh, DW_COPY))
        shell_copy(sh);
    else if (sh->timer_armed)
        shell_wait(sh);
    else
        KVM_ASSERT(!"the drain core asked nothing");
}

/* Moves every committed local replica (of segment seg_filter, or all when 0) elsewhere, until
 * two passes a writers period apart find nothing new (writers that placed here before they saw
 * the DRAINING state or the retiring segment commit within it) or timeout_ms passed. */
static int move_all(kvm_rt_t *rt, uint64_t seg_filter, uint32_t timeout_ms, size_t *moved,
                    size_t *failed)
{
    dshell_t *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return KVMESH_ENOMEM;
    sh->rt = rt;
    sh->seg_filter = seg_filter;
    drain_core_cfg_t cfg = {.timeout_ms = timeout_ms,
                            .writers_ns = (seg_filter ? 50 : 600) * 1000000ull,
                            .page = DRAIN_PAGE_MAX};
    int rc = drain_core_new(&cfg, &drain_fx, sh, &sh->core);
    if (rc) {
        free(sh);
        return rc;
    }
    drain_core_start(sh->core, now_ns());
    while (!sh->done || wants(sh, DW_ABORT))
        shell_step(sh);
    drain_core_counts(sh->core, moved, failed);
    rc = sh->rc;
    page_drop(sh);
    drain_core_free(sh->core);
    free(sh);
    return rc;
}

int kvm_store_drain(kvm_rt_t *rt, uint32_t timeout_ms, size_t *moved, size_t *failed)
{
    *moved = *failed = 0;
    int rc = simple_op(rt, KVM_OP_DRAIN_BEGIN);
    if (rc)
        return rc;
    rc = move_all(rt, 0, timeout_ms, moved, failed);
    int r2 = simple_op(rt, KVM_OP_DRAIN_END);
    return rc ? rc : r2;
}

static int seg_op(kvm_rt_t *rt, enum kvm_op_type t, uint64_t *arg)
{
    kvm_op_t *op = kvm_op_new(rt, t, 0);
    if (!op)
        return KVMESH_ENOMEM;
    op->seg_arg = *arg;
    int rc = kvm_op_run(op);
    *arg = op->seg_arg;
    kvm_op_unref(op);
    return rc;
}

int kvm_store_add_segment(kvm_rt_t *rt, uint64_t size, uint64_t *seg_id)
{
    *seg_id = size;
    return seg_op(rt, KVM_OP_SEG_ADD, seg_id);
}

int kvm_store_retire_segment(kvm_rt_t *rt, uint64_t seg_id, uint32_t timeout_ms)
{
    uint64_t arg = seg_id;
    int rc = seg_op(rt, KVM_OP_SEG_RETIRE, &arg);
    if (rc)
        return rc;
    uint64_t deadline = env_clock_mono_ms() + timeout_ms;
    uint64_t gen = kvm_waitq_enter(&rt->wq_slots);
    for (;;) {
        size_t moved = 0, failed = 0;
        rc = move_all(rt, seg_id, timeout_ms, &moved, &failed);
        arg = seg_id;
        if (!rc && (rc = seg_op(rt, KVM_OP_SEG_REMOVE, &arg)) != KVMESH_EAGAIN)
            break;
        /* reserved or reclaiming slots settle within their TTL / grace */
        if ((rc = kvm_store_wait_slots(rt, &gen, deadline)) != 0) {
            rc = rc == KVMESH_ECLOSED
                     ? kvm_errf(rc, "the runtime closed while segment %016" PRIx64 " retired",
                                seg_id)
                     : kvm_errf(KVMESH_ETIMEDOUT,
                                "segment %016" PRIx64 " still holds slots after %u ms", seg_id,
                                timeout_ms);
            break;
        }
    }
    kvm_waitq_leave(&rt->wq_slots);
    return rc;
}
