// SPDX-License-Identifier: Apache-2.0
/*
 * cold_resume.c — resuming a PendingOffload whose device owner crashed before it planned the
 * cold op (cold_resume.h). Owns the replica owner's note (one cold_op_plan per route it learns of)
 * and the remote hot read job (struct hot_read: allocated on the loop, run on the cold I/O
 * worker, answered and freed on the loop in done()).
 *
 * Why it is idempotent: the note only creates the op record when absent (a record the device
 * owner already advanced is left as it is); the owner's job resumes from whatever state the
 * record has; the remote read writes nothing, and the backend put that follows is idempotent by
 * the op's backend id.
 */
#include "store/cold_resume.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "net/transport.h"

static bool holds_replica(const kvm_route_t *r, const kvm_runtime_id_t *self)
{
    for (uint32_t i = 0; i < r->n_replicas; i++)
        if (kvm_id128_equal(&r->replicas[i].owner, self))
            return true;
    return false;
}

static void noted(void *arg, int rc, const cold_op_view_t *v)
{
    (void)arg, (void)rc, (void)v; /* a failure: the device owner's own job still plans it */
}

void kvm_cold_note_pending(kvm_rt_t *rt, cold_t *c, const kvm_route_t *r)
{
    if (!c || !r || kvm_route_is_tombstone(r) || r->cold.kind != KVM_COLD_PENDING_OFFLOAD ||
        kvm_id128_equal(&r->cold.owner, &rt->self.id) || !holds_replica(r, &rt->self.id))
        return;
    cold_plan_req_t q = {.cold_op = r->cold.cold_op,
                         .content_op = r->content_op,
                         .device = r->cold.tier,
                         .ident = &r->ident,
                         .length = r->length,
                         .checksum = r->checksum};
    (void)cold_op_plan(c, &q, noted, NULL);
}

struct hot_read {
    cold_exec_t io; /* first */
    kvm_rt_t *rt;
    const char *data_addr; /* interned: valid until the runtime closes */
    uint64_t seg, off, token, len, checksum, deadline_ms;
    void *buf;
    int rc;
    cold_rc_cb cb;
    void *arg;
};

/* [worker] One transport read of the replica into a temporarily registered buffer. */
static int read_replica(struct hot_read *h)
{
    kvm_rt_t *rt = h->rt;
    struct tp_segment *seg = NULL;
    int rc = kvm_rt_seg_open(rt, h->data_addr, h->seg, h->token, &seg);
    if (rc || h->len == 0)
        return rc;
    if ((rc = tp_register_memory(rt->tp, h->buf, h->len)) != 0)
        return rc;
    struct tp_batch *b = NULL;
    rc = tp_batch_new(rt->tp, 1, &b);
    if (!rc) {
        struct tp_request rq = {.op = TP_READ,
                                .local = h->buf,
                                .length = h->len,
                                .segment = seg,
                                .remote_offset = h->off,
                                .token = h->token};
        rc = tp_submit(b, &rq, 1);
        if (!rc && tp_batch_wait(b, (int)kvm_deadline_left_ms(h->deadline_ms)) != 0) {
            tp_batch_abort(b);
            rc = kvm_errf(KVMESH_ETIMEDOUT, "cold offload: reading a remote hot replica timed out");
        }
        if (!rc)
            rc = tp_status(b, 0, NULL);
        tp_batch_free(b); /* the transfer is terminal here */
    }
    tp_unregister_memory(rt->tp, h->buf);
    return rc;
}

static void hot_run(cold_exec_t *io)
{
    struct hot_read *h = KVM_CONTAINER_OF(io, struct hot_read, io);
    h->rc = read_replica(h);
    if (h->rc == 0 && kvm_checksum(h->buf, h->len) != h->checksum)
        h->rc = KVMESH_ECHECKSUM; /* never offload bytes the route does not vouch for */
}

static void hot_done(cold_exec_t *io)
{
    struct hot_read *h = KVM_CONTAINER_OF(io, struct hot_read, io);
    cold_rc_cb cb = h->cb;
    void *arg = h->arg;
    int rc = h->rc;
    free(h);
    cb(arg, rc);
}

/* A replica of r on another live member whose segment the membership lists. */
static bool pick_remote(kvm_rt_t *rt, const kvm_route_t *r, struct hot_read *h)
{
    for (int pass = 0; pass < 2; pass++) /* healthy owners first, suspects last */
        for (uint32_t i = 0; i < r->n_replicas; i++) {
            const kvm_hot_replica_t *rep = &r->replicas[i];
            if (kvm_id128_equal(&rep->owner, &rt->self.id) ||
                kvm_member_is_suspect(rt, &rep->owner) != (pass == 1))
                continue;
            const struct kvm_member *m = kvm_member_find(rt, &rep->owner);
            for (uint32_t s = 0; m && m->data_addr && m->data_addr[0] && s < m->n_segs; s++)
                if (m->segs[s].id == rep->segment) {
                    h->data_addr = m->data_addr;
                    h->seg = rep->segment;
                    h->off = rep->offset;
                    h->token = m->segs[s].read_token;
                    return true;
                }
        }
    return false;
}

int kvm_cold_read_hot_remote(kvm_rt_t *rt, const kvm_route_t *r, void *buf, uint64_t len,
                             kvm_cold_enqueue_fn enq, void *ectx, cold_rc_cb cb, void *arg)
{
    KVM_ASSERT(rt && r && buf && enq && cb);
    struct hot_read *h = calloc(1, sizeof(*h));
    if (!h)
        return KVMESH_ENOMEM;
    if (!rt->tp || !pick_remote(rt, r, h)) {
        free(h);
        return KVMESH_EUNAVAILABLE;
    }
    h->rt = rt;
    h->len = len;
    h->checksum = r->checksum;
    h->buf = buf;
    h->deadline_ms = env_clock_mono_ms() + rt->cfg.request_timeout_ms;
    h->cb = cb;
    h->arg = arg;
    h->io.run = hot_run;
    h->io.done = hot_done;
    if (!enq(ectx, &h->io)) {
        free(h);
        return KVMESH_EUNAVAILABLE;
    }
    return 0;
}
