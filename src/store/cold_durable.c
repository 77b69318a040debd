// SPDX-License-Identifier: Apache-2.0
/*
 * cold_durable.c — write-through puts (cold_write_through; cold_glue.h kvm_cold_durable_wait;
 * docs/cold.md "Durable puts"): a put item waits, after its route CAS, until its cold op is
 * usage-committed, through the offload job's completion on this runtime's device or by polling
 * the op record on another runtime's. Owns struct durable and its list g->durables.
 */
#include <stdio.h>
#include <stdlib.h>

#include "store/cold_int.h"

/*
 * One struct durable per put item that waits for its cold copy. It is listed in g->durables from
 * kvm_cold_durable_wait until nothing of the core or the env still holds it:
 *
 *   WAITING --(job done / op record USAGE_COMMITTED or RELEASED / deadline)--> ANSWERED --> freed
 *
 * The item's continuation runs exactly once (on the move to ANSWERED, or at close with
 * KVMESH_ECANCELED). A local wait holds the offload job's completion callback (in_job), a remote
 * one a cold_op_get or cold_device_get (in_get) or a poll timer; the struct is freed once none
 * is held. The core calls none of our callbacks after cold_close, so close frees every listed
 * struct.
 *
 * A refused copy names its device when it can: the local job's reason (cold_job_t.why: "cold
 * device <id> is draining ..."), or, for a remote wait whose op was released from PLANNED, the
 * device record read once more (released because the device is no longer active: the same
 * words, KVMESH_EUNAVAILABLE, as the local case).
 */
#define COLD_DURABLE_POLL_MIN_MS 5   /* remote wait: first poll of the op record */
#define COLD_DURABLE_POLL_MAX_MS 100 /* remote wait: poll interval cap (it doubles) */

struct durable {
    struct kvm_cold *g;
    kvm_op_t *op;
    struct kvm_item *it;
    kvm_cold_durable_cb cont; /* NULL once answered */
    kvm_op_id_t cold_op;
    uint64_t deadline_ms; /* CLOCK_MONOTONIC ms: the put's deadline */
    bool in_job;          /* local: the job's completion callback is still due */
    bool in_get;          /* remote: a cold_op_get or cold_device_get is in flight */
    env_timer_id timer;   /* remote: the next poll */
    uint32_t poll_ms;
    char why[200]; /* local: the job's reason for a failure it can name (cold_job_t.why) */
    struct durable *next, *prev; /* g->durables */
};

static void durable_free(struct durable *d)
{
    struct kvm_cold *g = d->g;
    KVM_COLD_LIST_UNLINK(g->durables, d, next, prev);
    if (d->timer)
        env_timer_cancel(g->rt->env, d->timer);
    free(d);
}

/* Answers the item once (rc 0: durable) and frees d when nothing holds it any more. */
static void durable_answer(struct durable *d, int rc, const char *msg)
{
    kvm_cold_durable_cb cont = d->cont;
    kvm_op_t *op = d->op;
    struct kvm_item *it = d->it;
    d->cont = NULL;
    if (d->timer)
        env_timer_cancel(d->g->rt->env, d->timer);
    d->timer = 0;
    if (!d->in_job && !d->in_get)
        durable_free(d);
    if (cont)
        cont(op, it, rc, msg);
}

static void durable_timeout(struct durable *d)
{
    char m[200];
    snprintf(m, sizeof(m),
             "cold_write_through: the object is published in DRAM but its cold copy did not "
             "commit by the request deadline, so the put is not durable; retry the put or "
             "raise request_timeout_ms");
    durable_answer(d, KVMESH_ETIMEDOUT, m);
}

/* The end of a cold op: 0 when the copy is committed, else the failure to answer. */
static int durable_outcome(int rc, enum cold_op_state st, char *m, size_t cap)
{
    if (rc == 0 && st == COLD_OP_USAGE_COMMITTED)
        return 0;
    snprintf(m, cap,
             "cold_write_through: the object is published in DRAM but its cold copy did not "
             "commit (%s%s%s), so the put is not durable; retry the put",
             rc ? kvmesh_strerror(rc) : "cold operation ", rc ? "" : cold_op_state_name(st),
             rc == KVMESH_ECONFLICT ? ": the object was replaced meanwhile" : "");
    return rc ? rc : KVMESH_EIO;
}

/* The failure of a copy whose device refused it, with the device's reason (why). */
static void refused(char *m, size_t cap, const char *why)
{
    snprintf(m, cap,
             "cold_write_through: the object is published in DRAM but its cold copy was "
             "refused (%s), so the put is not durable; retry the put (placement then uses "
             "the refreshed device view)",
             why);
}

static void durable_job_done(void *arg, int rc)
{
    struct durable *d = arg;
    d->in_job = false;
    if (!d->cont) { /* answered already (deadline) */
        durable_free(d);
        return;
    }
    char m[400];
    if (rc && d->why[0]) /* e.g. the device was drained after this put placed its copy there */
        refused(m, sizeof(m), d->why);
    else
        rc = durable_outcome(rc, rc ? COLD_OP_NONE : COLD_OP_USAGE_COMMITTED, m, sizeof(m));
    durable_answer(d, rc, m);
}

static void durable_poll(void *arg);

static void durable_arm(struct durable *d)
{
    uint32_t left = kvm_deadline_left_ms(d->deadline_ms);
    uint32_t ms = d->poll_ms < left ? d->poll_ms : left;
    d->poll_ms =
        d->poll_ms * 2 < COLD_DURABLE_POLL_MAX_MS ? d->poll_ms * 2 : COLD_DURABLE_POLL_MAX_MS;
    d->timer = env_timer_start(d->g->rt->env, (uint64_t)ms * 1000000ull, durable_poll, d);
}

/* A remote op released: when its device is no longer active (the job withdrew the op), the
 * device and its lifecycle, as the local job names them; else the plain outcome. */
static void durable_dev_got(void *arg, int rc, const cold_device_t *dev)
{
    struct durable *d = arg;
    d->in_get = false;
    if (!d->cont) {
        durable_free(d);
        return;
    }
    char m[400];
    if (rc == 0 && dev && dev->lifecycle != COLD_DEV_ACTIVE) {
        char id[KVM_ID128_HEX_LEN + 1], why[200];
        snprintf(why, sizeof(why),
                 "cold device %s is %s (not schedulable): it was chosen from a device view of "
                 "before the change",
                 kvm_id128_fmt(&dev->id, id), cold_dev_lifecycle_name(dev->lifecycle));
        refused(m, sizeof(m), why);
        durable_answer(d, KVMESH_EUNAVAILABLE, m);
        return;
    }
    durable_answer(d, durable_outcome(0, COLD_OP_RELEASED, m, sizeof(m)), m);
}

static void durable_got(void *arg, int rc, const cold_op_view_t *v)
{
    struct durable *d = arg;
    d->in_get = false;
    if (!d->cont) {
        durable_free(d);
        return;
    }
    enum cold_op_state st = rc == 0 && v && v->op ? v->op->state : COLD_OP_NONE;
    if (st == COLD_OP_RELEASED && v->op->released_from == COLD_OP_PLANNED &&
        cold_device_get(d->g->c, &v->op->device, durable_dev_got, d) == 0) {
        d->in_get = true; /* withdrawn before its reserve: was the device drained? */
        return;
    }
    if (rc == 0 && (st == COLD_OP_USAGE_COMMITTED || st == COLD_OP_RELEASED)) {
        char m[300];
        rc = durable_outcome(0, st, m, sizeof(m));
        durable_answer(d, rc, m);
        return;
    }
    if (kvm_deadline_left_ms(d->deadline_ms) == 0) {
        durable_timeout(d);
        return;
    }
    durable_arm(d); /* not planned yet, on its way, or a transient read failure: poll again */
}

static void durable_poll(void *arg)
{
    struct durable *d = arg;
    d->timer = 0;
    if (kvm_deadline_left_ms(d->deadline_ms) == 0) {
        durable_timeout(d);
        return;
    }
    if (cold_op_get(d->g->c, &d->cold_op, durable_got, d) == 0)
        d->in_get = true;
    else
        durable_arm(d);
}

void kvm_cold_durable_expire(struct kvm_cold *g)
{
    struct durable *d = g->durables, *next;
    for (; d; d = next) {
        next = d->next;
        if (d->cont && d->in_job && kvm_deadline_left_ms(d->deadline_ms) == 0)
            durable_timeout(d);
    }
}

bool kvm_cold_durable_wait(kvm_rt_t *rt, kvm_op_t *op, struct kvm_item *it, const kvm_route_t *now,
                           kvm_cold_durable_cb cont)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!rt->cfg.cold_write_through)
        return false;
    char m[300];
    if (!g || !g->c || g->closed || !now || now->cold.kind == KVM_COLD_NONE) {
        snprintf(m, sizeof(m),
                 "cold_write_through: the object is published in DRAM without a cold copy, so "
                 "the put is not durable; retry the put");
        cont(op, it, KVMESH_EUNAVAILABLE, m);
        return true;
    }
    struct durable *d = calloc(1, sizeof(*d));
    if (!d) {
        cont(op, it, KVMESH_ENOMEM, "cold_write_through: out of memory waiting for the cold copy");
        return true;
    }
    d->g = g;
    d->op = op;
    d->it = it;
    d->cont = cont;
    d->cold_op = now->cold.cold_op;
    d->deadline_ms = op->deadline_ms;
    d->poll_ms = COLD_DURABLE_POLL_MIN_MS;
    KVM_COLD_LIST_PUSH(g->durables, d, next, prev);
    bool local = now->cold.kind == KVM_COLD_PENDING_OFFLOAD &&
                 kvm_id128_equal(&now->cold.owner, &rt->self.id) &&
                 kvm_cold_own_dev(g, &now->cold.tier);
    if (local) { /* kvm_cold_published queued it (urgent): attach to the job */
        cold_job_t job = kvm_cold_route_job(now, true);
        job.done = durable_job_done;
        job.done_arg = d;
        job.why = d->why;
        job.why_cap = sizeof(d->why);
        int rc = cold_offload_submit(g->c, &job);
        if (rc == 0) {
            d->in_job = true;
            return true;
        }
        /* EEXIST (another waiter on the same op) or EAGAIN (queue full): poll the record */
    }
    durable_poll(d);
    return true;
}

void kvm_cold_durable_close(struct kvm_cold *g)
{
    while (g->durables) { /* their core callbacks no longer run */
        struct durable *d = g->durables;
        d->in_job = d->in_get = false;
        durable_answer(d, KVMESH_ECANCELED,
                       "cold_write_through: the runtime closed before the cold copy committed; "
                       "the put is not durable");
    }
}
