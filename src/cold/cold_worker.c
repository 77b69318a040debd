/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_worker.c — the cold tier's drivers over the engine: the offload worker (a bounded queue
 * of jobs, each driving one cold op from wherever its record is to USAGE_COMMITTED or RELEASED),
 * reclaim cleanup, last-hot eviction, restore with singleflight, and the reconciliation pass
 * over the due index. Sans-I/O: backend calls go through cold_exec_submit, route work through
 * cold_route_ops_t; nothing here blocks.
 *
 * One offload job (resumes from the stored state; every step is idempotent by cold op id):
 *
 *   NONE             plan (create-if-absent)                         -> PLANNED
 *   PLANNED          lookup: PendingOffload of this op? reserve      -> RESERVED
 *                    otherwise                                       -> RELEASED
 *   RESERVED         lookup: pending? read hot + backend put         -> PAYLOAD_WRITTEN
 *                    not pending, or no hot copy left (read_hot ENOENT): find + delete
 *                                                                    -> RELEASED
 *   PAYLOAD_WRITTEN  lookup: pending? materialize CAS (a conflict looks up again and rebases)
 *                    already materialized by this op                 -> ROUTE_COMMITTED
 *                    otherwise (proven obsolete by the exact lookup) -> RECLAIMING
 *   ROUTE_COMMITTED  commit usage                                    -> USAGE_COMMITTED
 *   RECLAIMING       backend delete, release                         -> RELEASED
 *
 * Scheduling (pump): urgent jobs first, then FIFO or smallest first; at most max_inflight at
 * once; the head starts only when the byte-rate token bucket allows it (one timer waits for the
 * tokens) and, unless urgent, while the DRAM watermark gate is open (cold_set_pressure).
 * Transient failures back off (bounded, COLD_RETRY_MAX); a job that runs out is parked and the
 * due index resumes it (cold_recon_pass). Ownership: each job/task holds the handle (aux) until
 * it ends; after cold_close() a task waiting on a callback ends there without calling the user.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold_int.h"
#include "core/hash.h"
#include "core/util.h"

enum { IO_PUT = 1, IO_FIND_DEL, IO_DEL, IO_GET };

struct cold_jobst {
    cold_t *c;
    kvm_ident_t ident; /* owned */
    kvm_op_id_t cold_op, content_op;
    kvm_tier_id_t device;
    uint64_t length, checksum;
    const cold_backend_t *be;
    cold_op_t op;
    bool have_op;
    uint32_t retries;
    uint8_t *buf;
    cold_route_obs_t obs;
    int phase; /* what the current lookup is for: the op state it was issued in */
    cold_exec_t io;
    int io_kind, io_rc;
    cold_locator_t loc;
    cold_backend_err_t err;
    env_timer_id timer;
    bool urgent, crashed;
    bool withdrawn; /* the reserve found the device drained or retired: released, not retried */
    int last_rc;
    cold_rc_cb done;
    void *done_arg;
    char *why; /* the caller's (cold_job_t.why), or NULL */
    size_t why_cap;
    cold_jobst_t *prev, *next;
};

/* ---- queue ----------------------------------------------------------------------------------- */

static void list_remove(cold_jobst_t **head, cold_jobst_t **tail, cold_jobst_t *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        *head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else if (tail)
        *tail = j->prev;
    j->prev = j->next = NULL;
}

static void job_free(cold_jobst_t *j)
{
    cold_t *c = j->c;
    kvm_ident_free(&j->ident);
    free(j->buf);
    free(j);
    cold_aux_release(c);
}

static void job_step(cold_jobst_t *j);

int cold_worker_init(cold_t *c)
{
    cold_config_t *f = &c->cfg;
    if (!f->backoff_base_ms)
        f->backoff_base_ms = 2;
    if (f->backoff_base_ms > f->backoff_max_ms)
        return kvm_errf(KVMESH_ECONFIG, "cold_new: backoff_base_ms %u is above backoff_max_ms %u",
                        f->backoff_base_ms, f->backoff_max_ms);
    if (f->rate_bytes_per_sec && !f->rate_burst_bytes)
        f->rate_burst_bytes = f->rate_bytes_per_sec;
    if (!(f->high_watermark >= 0.0 && f->high_watermark <= 1.0) ||
        !(f->low_watermark >= 0.0 && f->low_watermark <= 1.0) ||
        (f->high_watermark > 0.0 && f->low_watermark >= f->high_watermark))
        return kvm_errf(KVMESH_ECONFIG,
                        "cold_new: watermarks need 0 <= low < high <= 1 (high 0 = off), got "
                        "low %.3f high %.3f",
                        f->low_watermark, f->high_watermark);
    c->gate_open = f->high_watermark <= 0.0;
    c->tokens = (double)f->rate_burst_bytes;
    c->tokens_ns = env_now_ns(c->env);
    return 0;
}

static void pump(cold_t *c);

static void rate_fire(void *arg)
{
    cold_t *c = arg;
    c->rate_timer = 0;
    pump(c);
}

/* Rate: may a job of len bytes start now? Takes its tokens when it may; otherwise arms the
 * timer for when the bucket will hold enough. */
static bool rate_take(cold_t *c, uint64_t len)
{
    uint64_t rate = c->cfg.rate_bytes_per_sec;
    if (!rate)
        return true;
    uint64_t now = env_now_ns(c->env);
    double burst = (double)c->cfg.rate_burst_bytes;
    if (now > c->tokens_ns) {
        c->tokens += (double)(now - c->tokens_ns) * (double)rate / 1e9;
        if (c->tokens > burst)
            c->tokens = burst;
    }
    c->tokens_ns = now;
    double need = KVM_MIN((double)len, burst);
    if (c->tokens >= need) {
        c->tokens -= (double)len;
        return true;
    }
    if (!c->rate_timer) {
        double ns = (need - c->tokens) * 1e9 / (double)rate;
        c->st.rate_waits++;
        c->rate_timer = env_timer_start(c->env, (uint64_t)ns + 1, rate_fire, c);
    }
    return false;
}

static void pump(cold_t *c)
{
    while (!c->closing && c->n_active < c->cfg.max_inflight && c->q_head) {
        cold_jobst_t *j = c->q_head;
        if (!j->urgent && !c->gate_open)
            break; /* urgent jobs come first: none waits behind this one */
        if (c->rate_timer || !rate_take(c, j->length))
            break;
        list_remove(&c->q_head, &c->q_tail, j);
        c->n_queued--;
        j->next = c->active;
        if (c->active)
            c->active->prev = j;
        c->active = j;
        c->n_active++;
        job_step(j);
    }
}

void cold_set_pressure(cold_t *c, double f)
{
    if (!c || c->closing || c->cfg.high_watermark <= 0.0)
        return;
    bool was = c->gate_open;
    if (f >= c->cfg.high_watermark)
        c->gate_open = true;
    else if (f < c->cfg.low_watermark)
        c->gate_open = false;
    if (was != c->gate_open)
        c->st.gate_changes++;
    if (c->gate_open && !was)
        pump(c);
}

bool cold_offload_gate_open(const cold_t *c)
{
    return c->gate_open;
}

/* The job is finished (or abandoned): off the active list, freed, the next one started. */
static void job_end(cold_jobst_t *j)
{
    cold_t *c = j->c;
    list_remove(&c->active, NULL, j);
    c->n_active--;
    bool closing = c->closing;
    if (j->done && !closing && !j->crashed) {
        bool ok = j->have_op && j->op.state == COLD_OP_USAGE_COMMITTED;
        int rc = ok ? 0 : j->last_rc ? j->last_rc : KVMESH_ECONFLICT;
        if (!ok && j->have_op && j->op.state == COLD_OP_RELEASED) /* the route no longer wanted */
            rc = j->withdrawn ? KVMESH_EUNAVAILABLE : KVMESH_ECONFLICT; /* it, or the device */
        j->done(j->done_arg, rc);
    }
    job_free(j); /* may free c when closing */
    if (!closing)
        pump(c);
}

static cold_jobst_t *job_of(cold_jobst_t *l, const kvm_op_id_t *op)
{
    for (; l; l = l->next)
        if (kvm_op_id_equal(&l->cold_op, op))
            return l;
    return NULL;
}

static bool find_job(const cold_jobst_t *l, const kvm_op_id_t *op)
{
    return job_of((cold_jobst_t *)l, op) != NULL;
}

static void queue_insert(cold_t *c, cold_jobst_t *j)
{
    /* urgent jobs first (FIFO among them); then FIFO: append, or size-aware: before the first
     * longer non-urgent job */
    cold_jobst_t *at = c->q_head;
    while (at && at->urgent)
        at = at->next;
    if (!j->urgent) {
        if (c->cfg.order == COLD_ORDER_SIZE)
            for (; at && at->length <= j->length; at = at->next)
                ;
        else
            at = NULL;
    }
    if (!at) {
        j->prev = c->q_tail;
        j->next = NULL;
        if (c->q_tail)
            c->q_tail->next = j;
        else
            c->q_head = j;
        c->q_tail = j;
    } else {
        j->next = at;
        j->prev = at->prev;
        if (at->prev)
            at->prev->next = j;
        else
            c->q_head = j;
        at->prev = j;
    }
}

int cold_offload_submit(cold_t *c, const cold_job_t *job)
{
    if (!c || !job || !job->ident)
        return kvm_errf(KVMESH_EINVAL, "cold_offload_submit: NULL argument");
    if (c->closing)
        return kvm_errf(KVMESH_ECLOSED, "cold_offload_submit: handle is closing");
    const cold_backend_t *be = cold_attached(c, &job->device);
    if (!be)
        return kvm_errf(KVMESH_ENOENT, "cold_offload_submit: device is not attached here");
    if (job->length > c->cfg.max_buffer)
        return kvm_errf(KVMESH_ETOOBIG, "cold_offload_submit: %llu bytes > max_buffer %llu",
                        (unsigned long long)job->length, (unsigned long long)c->cfg.max_buffer);
    cold_jobst_t *dup = job_of(c->q_head, &job->cold_op);
    bool queued = dup != NULL;
    if (!dup)
        dup = job_of(c->active, &job->cold_op);
    if (dup) {
        if (job->done) {
            if (dup->done)
                return kvm_errf(KVMESH_EEXIST, "cold_offload_submit: the job already has a "
                                               "completion callback");
            dup->done = job->done;
            dup->done_arg = job->done_arg;
            dup->why = job->why;
            dup->why_cap = job->why_cap;
        }
        if (job->urgent && !dup->urgent && queued) { /* moves ahead of the non-urgent ones */
            list_remove(&c->q_head, &c->q_tail, dup);
            dup->urgent = true;
            queue_insert(c, dup);
            pump(c);
        }
        dup->urgent = dup->urgent || job->urgent;
        return 0;
    }
    if (c->n_queued >= c->cfg.queue_cap)
        return kvm_errf(KVMESH_EAGAIN, "cold offload queue is full (%u jobs); retry later",
                        c->cfg.queue_cap);
    cold_jobst_t *j = calloc(1, sizeof(*j));
    if (!j)
        return KVMESH_ENOMEM;
    if (kvm_ident_copy(&j->ident, job->ident) != 0) {
        free(j);
        return KVMESH_ENOMEM;
    }
    j->c = c;
    j->cold_op = job->cold_op;
    j->content_op = job->content_op;
    j->device = job->device;
    j->length = job->length;
    j->checksum = job->checksum;
    j->be = be;
    j->urgent = job->urgent;
    j->done = job->done;
    j->done_arg = job->done_arg;
    j->why = job->why;
    j->why_cap = job->why_cap;
    c->st.urgent_jobs += job->urgent;
    cold_aux_hold(c);
    queue_insert(c, j);
    c->n_queued++;
    pump(c);
    return 0;
}

size_t cold_offload_pending(const cold_t *c)
{
    return c->n_queued + c->n_active;
}

void cold_worker_close(cold_t *c)
{
    if (c->rate_timer) {
        env_timer_cancel(c->env, c->rate_timer);
        c->rate_timer = 0;
    }
    while (c->q_head) {
        cold_jobst_t *j = c->q_head;
        list_remove(&c->q_head, &c->q_tail, j);
        c->n_queued--;
        job_free(j);
    }
    for (cold_jobst_t *j = c->active, *next; j; j = next) {
        next = j->next;
        if (j->timer) { /* waiting on its own timer: nothing else will end it */
            env_timer_cancel(c->env, j->timer);
            j->timer = 0;
            list_remove(&c->active, NULL, j);
            c->n_active--;
            job_free(j);
        }
    }
}

/* ---- job steps ------------------------------------------------------------------------------- */

static bool crash_window(cold_jobst_t *j, enum cold_window w)
{
    cold_t *c = j->c;
    if (c->cfg.test_crash && c->cfg.test_crash(c->cfg.test_ctx, w, &j->cold_op)) {
        j->crashed = true;
        job_end(j); /* the process dies here: nothing more of this job happens */
        return true;
    }
    return false;
}

uint64_t cold_backoff_ms(const cold_config_t *cfg, uint32_t retry)
{
    uint64_t ms = cfg->backoff_base_ms;
    for (uint32_t i = 1; i < retry && ms < cfg->backoff_max_ms; i++)
        ms *= 2;
    return KVM_MIN(ms, (uint64_t)cfg->backoff_max_ms);
}

static void retry_timer(void *arg)
{
    cold_jobst_t *j = arg;
    j->timer = 0;
    job_step(j);
}

static void job_backoff(cold_jobst_t *j, int rc)
{
    cold_t *c = j->c;
    c->st.last_error = rc;
    j->last_rc = rc;
    if (++j->retries > COLD_RETRY_MAX) {
        c->st.offload_parked++; /* the due index resumes it */
        cold_dev_st(c, &j->device)->offload_parked++;
        job_end(j);
        return;
    }
    c->st.offload_retries++;
    uint64_t ms = cold_backoff_ms(&c->cfg, j->retries);
    uint64_t d = ms * 1000000ull / 2 + env_rand_u64(c->env) % (ms * 1000000ull / 2 + 1);
    j->timer = env_timer_start(c->env, d, retry_timer, j);
}

static bool transient(int rc)
{
    return rc == KVMESH_ETIMEDOUT || rc == KVMESH_EUNAVAILABLE || rc == KVMESH_ECONN ||
           rc == KVMESH_EINDETERMINATE || rc == KVMESH_EBACKEND || rc == KVMESH_EIO ||
           rc == KVMESH_ENOSPC || rc == KVMESH_EAGAIN || rc == KVMESH_ECONFLICT ||
           rc == KVMESH_ENOMEM;
}

static void advance(cold_jobst_t *j, enum cold_op_state to, const cold_locator_t *loc);

/* A reserve refused because the device record is no longer active: the writer placed the op from
 * a device view of before an operator's drain or retire. Waiting cannot help (a drained device
 * never becomes schedulable again by itself), so the op is released now and the job's done names
 * the device and its lifecycle. */
static bool withdrawn_device(cold_jobst_t *j, int rc, const cold_op_view_t *v)
{
    if (rc != KVMESH_EUNAVAILABLE || j->withdrawn || !j->have_op ||
        j->op.state != COLD_OP_PLANNED || !v || !v->dev || v->dev->lifecycle == COLD_DEV_ACTIVE)
        return false;
    char id[KVM_ID128_HEX_LEN + 1];
    j->withdrawn = true;
    j->last_rc = KVMESH_EUNAVAILABLE;
    j->c->st.offloads_withdrawn++;
    if (j->why && j->why_cap)
        snprintf(j->why, j->why_cap,
                 "cold device %s is %s (not schedulable): it was chosen from a device view of "
                 "before the change",
                 kvm_id128_fmt(&v->dev->id, id), cold_dev_lifecycle_name(v->dev->lifecycle));
    advance(j, COLD_OP_RELEASED, NULL);
    return true;
}

static void on_adv(void *arg, int rc, const cold_op_view_t *v)
{
    cold_jobst_t *j = arg;
    if (j->c->closing || rc == KVMESH_ECANCELED) {
        job_end(j);
        return;
    }
    if (withdrawn_device(j, rc, v))
        return;
    if (v && v->op && (rc == 0 || rc == KVMESH_ECONFLICT)) {
        /* done, or refused from the stored state: resume from there */
        bool moved = !j->have_op || v->op->state != j->op.state;
        j->op = *v->op;
        j->have_op = true;
        if (rc == 0 || moved) {
            job_step(j);
            return;
        }
    }
    if (transient(rc)) {
        job_backoff(j, rc);
        return;
    }
    j->c->st.last_error = j->last_rc = rc; /* ECORRUPT, ENOENT: parked for an operator */
    j->c->st.offload_parked++;
    cold_dev_st(j->c, &j->device)->offload_parked++;
    job_end(j);
}

static void advance(cold_jobst_t *j, enum cold_op_state to, const cold_locator_t *loc)
{
    int rc = COLD_INTERNAL(j->c, cold_op_advance(j->c, &j->cold_op, to, loc, on_adv, j));
    if (rc)
        job_backoff(j, rc);
}

static bool pending_same(const cold_jobst_t *j, const cold_route_obs_t *o)
{
    return o->found && !o->tombstone && o->cold.kind == KVM_COLD_PENDING_OFFLOAD &&
           kvm_op_id_equal(&o->cold.cold_op, &j->cold_op) &&
           kvm_op_id_equal(&o->content_op, &j->content_op);
}

static bool materialized_same(const cold_jobst_t *j, const cold_route_obs_t *o)
{
    return o->found && !o->tombstone && o->cold.kind == KVM_COLD_MATERIALIZED &&
           kvm_op_id_equal(&o->cold.cold_op, &j->cold_op) &&
           o->cold.u.mat.locator_len == j->op.loc.len &&
           memcmp(o->cold.u.mat.locator, j->op.loc.b, j->op.loc.len) == 0;
}

static void io_run(cold_exec_t *io)
{
    cold_jobst_t *j = KVM_CONTAINER_OF(io, cold_jobst_t, io);
    const cold_backend_t *be = j->be;
    j->err.msg[0] = '\0';
    switch (j->io_kind) {
    case IO_PUT: {
        struct iovec iov = {.iov_base = j->buf, .iov_len = j->length};
        j->io_rc =
            be->ops->put(be->be, &j->op.be_id, &iov, 1, j->length, j->checksum, &j->loc, &j->err);
        break;
    }
    case IO_FIND_DEL: {
        cold_locator_t l;
        j->io_rc = be->ops->find(be->be, &j->op.be_id, &l, &j->err);
        if (j->io_rc == 0)
            j->io_rc = be->ops->del(be->be, &l, &j->err);
        else if (j->io_rc == KVMESH_ENOENT)
            j->io_rc = 0;
        break;
    }
    case IO_DEL:
        j->io_rc = be->ops->del(be->be, &j->op.loc, &j->err);
        break;
    default:
        j->io_rc = KVMESH_EINTERNAL;
    }
}

static void io_done(cold_exec_t *io)
{
    cold_jobst_t *j = KVM_CONTAINER_OF(io, cold_jobst_t, io);
    if (j->c->closing) {
        job_end(j);
        return;
    }
    if (j->io_rc) {
        kvm_errf(j->io_rc, "cold backend: %s", j->err.msg);
        job_backoff(j, j->io_rc);
        return;
    }
    switch (j->io_kind) {
    case IO_PUT:
        free(j->buf);
        j->buf = NULL;
        if (crash_window(j, COLD_W_BEFORE_PERSIST))
            return;
        advance(j, COLD_OP_PAYLOAD_WRITTEN, &j->loc);
        return;
    case IO_FIND_DEL:
    case IO_DEL:
        advance(j, COLD_OP_RELEASED, NULL);
        return;
    }
}

static void job_io(cold_jobst_t *j, int kind)
{
    j->io_kind = kind;
    j->io.run = io_run;
    j->io.done = io_done;
    cold_exec_submit(j->c, &j->io);
}

static void on_hot(void *arg, int rc)
{
    cold_jobst_t *j = arg;
    if (j->c->closing) {
        job_end(j);
        return;
    }
    if (rc == KVMESH_ENOENT) { /* no hot copy of this content left: nothing can be written */
        j->last_rc = rc;
        job_io(j, IO_FIND_DEL); /* RESERVED -> RELEASED (an orphan of a crash goes too) */
        return;
    }
    if (rc) {
        job_backoff(j, rc);
        return;
    }
    job_io(j, IO_PUT);
}

static void on_mat(void *arg, int rc)
{
    cold_jobst_t *j = arg;
    cold_t *c = j->c;
    if (c->closing) {
        job_end(j);
        return;
    }
    if (rc == 0) {
        if (crash_window(j, COLD_W_BEFORE_COMMITTED))
            return;
        advance(j, COLD_OP_ROUTE_COMMITTED, NULL);
        return;
    }
    if (rc == KVMESH_ECONFLICT) {
        c->st.cas_conflicts++;
        if (c->cfg.test_bugs & COLD_BUG_NO_REBASE) {
            advance(j, COLD_OP_RECLAIMING, NULL); /* broken on purpose: no exact lookup */
            return;
        }
        c->st.rebases++;
        if (++j->retries > COLD_RETRY_MAX) {
            c->st.offload_parked++;
            cold_dev_st(c, &j->device)->offload_parked++;
            job_end(j);
            return;
        }
        job_step(j); /* look the route up again and rebase on its current version */
        return;
    }
    job_backoff(j, rc);
}

static void on_lookup(void *arg, int rc, const cold_route_obs_t *obs)
{
    cold_jobst_t *j = arg;
    cold_t *c = j->c;
    if (c->closing) {
        job_end(j);
        return;
    }
    if (rc) {
        job_backoff(j, rc);
        return;
    }
    j->obs = *obs;
    switch (j->phase) {
    case COLD_OP_PLANNED:
        if (!pending_same(j, obs)) {
            advance(j, COLD_OP_RELEASED, NULL);
            return;
        }
        if (crash_window(j, COLD_W_BEFORE_RESERVE))
            return;
        advance(j, COLD_OP_RESERVED, NULL);
        return;
    case COLD_OP_RESERVED:
        if (!pending_same(j, obs)) {
            job_io(j, IO_FIND_DEL); /* cancel: an orphan written before a crash goes too */
            return;
        }
        if (crash_window(j, COLD_W_BEFORE_PUT))
            return;
        free(j->buf);
        j->buf = malloc(j->length ? j->length : 1);
        if (!j->buf) {
            job_backoff(j, KVMESH_ENOMEM);
            return;
        }
        c->route.read_hot(c->route.ctx, &j->ident, &j->content_op, j->buf, j->length, on_hot, j);
        return;
    case COLD_OP_PAYLOAD_WRITTEN: {
        if (materialized_same(j, obs)) {
            advance(j, COLD_OP_ROUTE_COMMITTED, NULL);
            return;
        }
        if (!pending_same(j, obs)) {
            advance(j, COLD_OP_RECLAIMING, NULL); /* exact lookup proved it obsolete */
            return;
        }
        if (crash_window(j, COLD_W_BEFORE_CAS))
            return;
        kvm_cold_backing_t mat;
        kvm_cold_backing_pending(&mat, &j->cold_op, &j->content_op, &j->op.owner, &j->device,
                                 j->length, j->checksum);
        int r =
            kvm_cold_backing_materialize(&mat, j->op.loc.b, j->op.loc.len, j->length, j->checksum);
        if (r) {
            c->st.last_error = r;
            job_end(j);
            return;
        }
        c->route.materialize(c->route.ctx, &j->ident, &obs->version, &mat, on_mat, j);
        return;
    }
    default:
        KVM_ASSERT(!"lookup phase");
    }
}

static void lookup(cold_jobst_t *j)
{
    j->phase = j->op.state;
    j->c->route.lookup(j->c->route.ctx, &j->ident, on_lookup, j);
}

static void on_plan(void *arg, int rc, const cold_op_view_t *v)
{
    cold_jobst_t *j = arg;
    if (j->c->closing || rc == KVMESH_ECANCELED) {
        job_end(j);
        return;
    }
    if (rc == 0 && v->op) {
        j->op = *v->op;
        j->have_op = true;
        job_step(j);
        return;
    }
    if (transient(rc) && rc != KVMESH_ECONFLICT) {
        job_backoff(j, rc);
        return;
    }
    j->c->st.last_error = j->last_rc = rc;
    job_end(j);
}

static void job_step(cold_jobst_t *j)
{
    cold_t *c = j->c;
    if (c->closing) {
        job_end(j);
        return;
    }
    if (!j->have_op) {
        cold_plan_req_t q = {.cold_op = j->cold_op,
                             .content_op = j->content_op,
                             .device = j->device,
                             .ident = &j->ident,
                             .length = j->length,
                             .checksum = j->checksum};
        int rc = COLD_INTERNAL(c, cold_op_plan(c, &q, on_plan, j));
        if (rc)
            job_backoff(j, rc);
        return;
    }
    switch (j->op.state) {
    case COLD_OP_PLANNED:
    case COLD_OP_RESERVED:
    case COLD_OP_PAYLOAD_WRITTEN:
        lookup(j);
        return;
    case COLD_OP_ROUTE_COMMITTED:
        if (crash_window(j, COLD_W_BEFORE_USAGE))
            return;
        advance(j, COLD_OP_USAGE_COMMITTED, NULL);
        return;
    case COLD_OP_RECLAIMING:
        job_io(j, IO_DEL);
        return;
    case COLD_OP_USAGE_COMMITTED:
        c->st.offloads_ok++;
        cold_dev_st(c, &j->device)->offloads_ok++;
        job_end(j);
        return;
    case COLD_OP_RELEASED:
        c->st.offloads_released++;
        job_end(j);
        return;
    case COLD_OP_NONE:
        KVM_ASSERT(!"job without record");
    }
}

/* ---- reclaim cleanup ------------------------------------------------------------------------- */

typedef struct rtask {
    cold_t *c;
    kvm_op_id_t id;
    cold_reclaim_t rec;
    kvm_ident_t ident;
    const cold_backend_t *be;
    cold_exec_t io;
    int io_rc;
    cold_backend_err_t err;
    cold_reclaim_cb cb;
    void *arg;
} rtask_t;

static void rt_end(rtask_t *t, int rc, const cold_reclaim_view_t *v)
{
    cold_t *c = t->c;
    if (!c->closing && rc != KVMESH_ECANCELED) {
        if (rc == 0)
            c->st.reclaims_done++;
        cold_reclaim_view_t none = {0};
        t->cb(t->arg, rc, v ? v : &none);
    }
    kvm_ident_free(&t->ident);
    free(t);
    cold_aux_release(c);
}

static void rt_on_handoff(void *arg, int rc, const cold_reclaim_view_t *v)
{
    rt_end(arg, rc, v);
}

static void rt_handoff(rtask_t *t)
{
    int rc = COLD_INTERNAL(t->c, cold_rec_call(t->c, CK_REC_HANDOFF, &t->id, rt_on_handoff, t));
    if (rc)
        rt_end(t, rc, NULL);
}

static void rt_on_deleted(void *arg, int rc, const cold_reclaim_view_t *v)
{
    rtask_t *t = arg;
    if (rc || t->c->closing) {
        rt_end(t, rc ? rc : KVMESH_ECANCELED, v);
        return;
    }
    rt_handoff(t);
}

static void rt_io_run(cold_exec_t *io)
{
    rtask_t *t = KVM_CONTAINER_OF(io, rtask_t, io);
    cold_locator_t l = {.len = t->rec.r.locator_len};
    memcpy(l.b, t->rec.r.locator, l.len);
    t->err.msg[0] = '\0';
    t->io_rc = t->be->ops->del(t->be->be, &l, &t->err);
}

static void rt_io_done(cold_exec_t *io)
{
    rtask_t *t = KVM_CONTAINER_OF(io, rtask_t, io);
    if (t->c->closing) {
        rt_end(t, KVMESH_ECANCELED, NULL);
        return;
    }
    if (t->io_rc) {
        rt_end(t, kvm_errf(t->io_rc, "cold reclaim: backend delete: %s", t->err.msg), NULL);
        return;
    }
    int rc = COLD_INTERNAL(t->c, cold_rec_call(t->c, CK_REC_DELETED, &t->id, rt_on_deleted, t));
    if (rc)
        rt_end(t, rc, NULL);
}

static void rt_delete(rtask_t *t)
{
    t->io.run = rt_io_run;
    t->io.done = rt_io_done;
    cold_exec_submit(t->c, &t->io);
}

static void rt_on_resched(void *arg, int rc, const cold_reclaim_view_t *v)
{
    rtask_t *t = arg;
    (void)v;
    t->c->st.reclaims_deferred++;
    rt_end(t,
           rc ? rc
              : kvm_errf(KVMESH_EAGAIN,
                         "cold reclaim: the locator is still authoritative; retried later"),
           NULL);
}

static void rt_on_lookup(void *arg, int rc, const cold_route_obs_t *o)
{
    rtask_t *t = arg;
    if (t->c->closing) {
        rt_end(t, KVMESH_ECANCELED, NULL);
        return;
    }
    if (rc) {
        rt_end(t, rc, NULL);
        return;
    }
    bool authoritative = o->found && !o->tombstone && o->cold.kind == KVM_COLD_MATERIALIZED &&
                         kvm_op_id_equal(&o->cold.cold_op, &t->rec.r.cold_op) &&
                         o->cold.u.mat.locator_len == t->rec.r.locator_len &&
                         memcmp(o->cold.u.mat.locator, t->rec.r.locator, t->rec.r.locator_len) == 0;
    if (authoritative) {
        int r = COLD_INTERNAL(t->c, cold_rec_call(t->c, CK_REC_RESCHED, &t->id, rt_on_resched, t));
        if (r)
            rt_end(t, r, NULL);
        return;
    }
    rt_delete(t);
}

static void rt_on_get(void *arg, int rc, const cold_reclaim_view_t *v)
{
    rtask_t *t = arg;
    cold_t *c = t->c;
    if (rc || c->closing) {
        rt_end(t, rc ? rc : KVMESH_ECANCELED, v);
        return;
    }
    t->rec = *v->rec;
    if (t->rec.r.state == KVM_RECLAIM_USAGE_RELEASED) {
        cold_reclaim_view_t w = {.rec = &t->rec, .repeated = true};
        rt_end(t, 0, &w);
        return;
    }
    t->be = cold_attached(c, &t->rec.r.tier);
    if (!t->be) {
        rt_end(t, kvm_errf(KVMESH_ENOENT, "cold reclaim: its device is not attached here"), NULL);
        return;
    }
    if (t->rec.r.state == KVM_RECLAIM_BACKEND_DELETED) {
        rt_handoff(t);
        return;
    }
    if (c->cfg.test_bugs & COLD_BUG_RECLAIM_NO_LOOKUP) {
        rt_delete(t); /* broken on purpose: no proof the locator is obsolete */
        return;
    }
    int r = kvm_ident_from_canonical(&t->ident, t->rec.ident, t->rec.ident_len);
    if (r) {
        rt_end(t, cold_errctx(KVMESH_ECORRUPT, "cold reclaim: bad identity"), NULL);
        return;
    }
    c->route.lookup(c->route.ctx, &t->ident, rt_on_lookup, t);
}

int cold_reclaim_run(cold_t *c, const kvm_op_id_t *reclaim_op, cold_reclaim_cb cb, void *arg)
{
    if (!c || !reclaim_op || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_reclaim_run: NULL argument");
    if (c->closing)
        return kvm_errf(KVMESH_ECLOSED, "cold_reclaim_run: handle is closing");
    rtask_t *t = calloc(1, sizeof(*t));
    if (!t)
        return KVMESH_ENOMEM;
    *t = (rtask_t){.c = c, .id = *reclaim_op, .cb = cb, .arg = arg};
    cold_aux_hold(c);
    int rc = COLD_INTERNAL(c, cold_rec_call(c, CK_REC_GET, reclaim_op, rt_on_get, t));
    if (rc) {
        free(t);
        cold_aux_release(c);
    }
    return rc;
}

/* ---- last-hot eviction ----------------------------------------------------------------------- */

typedef struct etask {
    cold_t *c;
    kvm_ident_t ident;
    kvm_hot_replica_t replica;
    cold_route_obs_t obs;
    cold_rc_cb cb;
    void *arg;
} etask_t;

static void et_end(etask_t *t, int rc)
{
    cold_t *c = t->c;
    if (!c->closing && rc != KVMESH_ECANCELED) {
        if (rc == 0)
            c->st.evictions++;
        else
            c->st.evict_refused++;
        t->cb(t->arg, rc);
    }
    kvm_ident_free(&t->ident);
    free(t);
    cold_aux_release(c);
}

static void et_on_cas(void *arg, int rc)
{
    etask_t *t = arg;
    et_end(t, t->c->closing ? KVMESH_ECANCELED : rc);
}

static void et_on_op(void *arg, int rc, const cold_op_view_t *v)
{
    etask_t *t = arg;
    cold_t *c = t->c;
    if (rc || c->closing) {
        et_end(t, rc ? rc : KVMESH_ECANCELED);
        return;
    }
    bool ok = v->op->state == COLD_OP_USAGE_COMMITTED;
    if ((c->cfg.test_bugs & COLD_BUG_EVICT_NO_USAGE) && v->op->state == COLD_OP_ROUTE_COMMITTED)
        ok = true; /* broken on purpose */
    if (!ok) {
        et_end(t, kvm_errf(KVMESH_EAGAIN, "last-hot eviction: cold op is %s, not usage-committed",
                           cold_op_state_name(v->op->state)));
        return;
    }
    if (v->op->payload_fp != kvm_cold_backing_fingerprint(&t->obs.cold)) {
        et_end(t, kvm_errf(KVMESH_ECONFLICT, "last-hot eviction: the route's locator is not the "
                                             "one its cold op persisted"));
        return;
    }
    cold_evict_expect_t e = {.version = t->obs.version,
                             .content_op = t->obs.content_op,
                             .cold_op = t->obs.cold.cold_op,
                             .locator_fp = kvm_cold_backing_fingerprint(&t->obs.cold),
                             .replica = t->replica};
    c->route.evict(c->route.ctx, &t->ident, &e, et_on_cas, t);
}

static void et_on_lookup(void *arg, int rc, const cold_route_obs_t *o)
{
    etask_t *t = arg;
    cold_t *c = t->c;
    if (rc || c->closing) {
        et_end(t, rc ? rc : KVMESH_ECANCELED);
        return;
    }
    if (!o->found || o->tombstone || o->cold.kind != KVM_COLD_MATERIALIZED) {
        et_end(t, kvm_errf(KVMESH_EAGAIN, "last-hot eviction: no materialized cold backing"));
        return;
    }
    bool listed = false;
    for (uint32_t i = 0; i < o->n_replicas; i++)
        if (kvm_hot_replica_same_slot(&o->replicas[i], &t->replica))
            listed = true;
    if (!listed) {
        et_end(t, kvm_errf(KVMESH_ECONFLICT, "last-hot eviction: the replica is not in the route"));
        return;
    }
    const cold_device_t *d = cold_view_find(c, &o->cold.tier);
    if (!d || !cold_device_readable(d)) {
        et_end(t, kvm_errf(KVMESH_EAGAIN, "last-hot eviction: the cold device is %s",
                           d ? cold_dev_health_name(d->health) : "not in the device view"));
        return;
    }
    t->obs = *o;
    int r = COLD_INTERNAL(c, cold_op_get(c, &o->cold.cold_op, et_on_op, t));
    if (r)
        et_end(t, r);
}

int cold_evict(cold_t *c, const kvm_ident_t *ident, const kvm_hot_replica_t *replica, cold_rc_cb cb,
               void *arg)
{
    if (!c || !ident || !replica || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_evict: NULL argument");
    if (c->closing)
        return kvm_errf(KVMESH_ECLOSED, "cold_evict: handle is closing");
    etask_t *t = calloc(1, sizeof(*t));
    if (!t)
        return KVMESH_ENOMEM;
    if (kvm_ident_copy(&t->ident, ident) != 0) {
        free(t);
        return KVMESH_ENOMEM;
    }
    t->c = c;
    t->replica = *replica;
    t->cb = cb;
    t->arg = arg;
    cold_aux_hold(c);
    c->route.lookup(c->route.ctx, &t->ident, et_on_lookup, t);
    return 0;
}

/* ---- restore with singleflight --------------------------------------------------------------- */

struct cold_sf {
    cold_t *c;
    kvm_tier_id_t tier;
    kvm_op_id_t cold_op;
    uint64_t fp;
    kvm_route_version_t version;
    kvm_ident_t ident;
    const cold_backend_t *be;
    cold_locator_t loc;
    uint64_t len, checksum;
    uint8_t *buf;
    int rc;
    cold_backend_err_t err;
    cold_exec_t io;
    size_t n_w;
    struct {
        cold_restore_cb cb;
        void *arg;
    } w[COLD_WAITERS_MAX];
    cold_sf_t *next;
};

typedef struct stask {
    cold_t *c;
    kvm_ident_t ident;
    cold_restore_cb cb;
    void *arg;
} stask_t;

static void sf_free(cold_sf_t *s)
{
    cold_t *c = s->c;
    kvm_ident_free(&s->ident);
    free(s->buf);
    free(s);
    cold_aux_release(c);
}

static void sf_on_promote(void *arg, int rc)
{
    cold_sf_t *s = arg;
    if (rc == 0 && !s->c->closing)
        s->c->st.promotions++;
    sf_free(s);
}

static void sf_run(cold_exec_t *io)
{
    cold_sf_t *s = KVM_CONTAINER_OF(io, cold_sf_t, io);
    s->err.msg[0] = '\0';
    s->rc = s->be->ops->get(s->be->be, &s->loc, s->len, s->checksum, s->buf, &s->err);
    /* the core verifies too: bytes that do not match are never returned */
    if (s->rc == 0 && kvm_checksum(s->buf, s->len) != s->checksum)
        s->rc = KVMESH_ECHECKSUM;
}

static void sf_done(cold_exec_t *io)
{
    cold_sf_t *s = KVM_CONTAINER_OF(io, cold_sf_t, io);
    cold_t *c = s->c;
    for (cold_sf_t **pp = &c->sf; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            c->n_sf--;
            break;
        }
    if (!c->closing) {
        cold_dev_stats_t *ds = cold_dev_st(c, &s->tier);
        if (s->rc) {
            c->st.restore_failed++;
            ds->restore_failed++;
            kvm_errf(s->rc, "cold restore: %s", s->err.msg[0] ? s->err.msg : "verification failed");
        } else {
            c->st.restores++;
            ds->restores++;
        }
        for (size_t i = 0; i < s->n_w; i++)
            s->w[i].cb(s->w[i].arg, s->rc, s->rc ? NULL : s->buf, s->rc ? 0 : s->len);
    }
    if (!c->closing && s->rc == 0 && c->route.promote) {
        c->route.promote(c->route.ctx, &s->ident, &s->version, s->buf, s->len, sf_on_promote, s);
        return;
    }
    sf_free(s);
}

static void st_end(stask_t *t, int rc)
{
    cold_t *c = t->c;
    if (rc && !c->closing && rc != KVMESH_ECANCELED)
        t->cb(t->arg, rc, NULL, 0);
    kvm_ident_free(&t->ident);
    free(t);
    cold_aux_release(c);
}

static void st_on_lookup(void *arg, int rc, const cold_route_obs_t *o)
{
    stask_t *t = arg;
    cold_t *c = t->c;
    if (rc || c->closing) {
        st_end(t, rc ? rc : KVMESH_ECANCELED);
        return;
    }
    if (!o->found || o->tombstone || o->cold.kind != KVM_COLD_MATERIALIZED) {
        st_end(t, kvm_errf(KVMESH_ENOENT, "cold restore: no materialized cold backing"));
        return;
    }
    const cold_device_t *dv = cold_view_find(c, &o->cold.tier);
    if (dv && !cold_device_readable(dv)) {
        st_end(t,
               kvm_errf(KVMESH_EUNAVAILABLE, "cold restore: the device is %s, %s",
                        cold_dev_health_name(dv->health), cold_dev_lifecycle_name(dv->lifecycle)));
        return;
    }
    uint64_t fp = kvm_cold_backing_fingerprint(&o->cold);
    for (cold_sf_t *s = c->sf; s; s = s->next) {
        if (kvm_id128_equal(&s->tier, &o->cold.tier) &&
            kvm_op_id_equal(&s->cold_op, &o->cold.cold_op) && s->fp == fp &&
            kvm_route_version_equal(&s->version, &o->version)) {
            if (s->n_w == COLD_WAITERS_MAX) {
                st_end(t, kvm_errf(KVMESH_EAGAIN, "cold restore: too many waiters"));
                return;
            }
            s->w[s->n_w].cb = t->cb;
            s->w[s->n_w].arg = t->arg;
            s->n_w++;
            c->st.restore_joined++;
            t->cb = NULL;
            kvm_ident_free(&t->ident);
            free(t);
            cold_aux_release(c);
            return;
        }
    }
    const cold_backend_t *be = cold_attached(c, &o->cold.tier);
    if (!be) {
        st_end(t, kvm_errf(KVMESH_ENOTSUP, "cold restore: the device is not attached here "
                                           "(remote restore goes through its owner)"));
        return;
    }
    if (c->n_sf >= COLD_RESTORES_MAX) {
        st_end(t, kvm_errf(KVMESH_EAGAIN, "cold restore: %d restores in flight; retry",
                           COLD_RESTORES_MAX));
        return;
    }
    if (o->cold.u.mat.locator_len == 0 || o->cold.u.mat.locator_len > COLD_LOCATOR_MAX ||
        o->cold.u.mat.length > c->cfg.max_buffer) {
        st_end(t, kvm_errf(KVMESH_ECORRUPT, "cold restore: locator or length out of range"));
        return;
    }
    cold_sf_t *s = calloc(1, sizeof(*s));
    uint8_t *buf = s ? malloc(o->cold.u.mat.length ? o->cold.u.mat.length : 1) : NULL;
    if (!s || !buf) {
        free(s);
        st_end(t, KVMESH_ENOMEM);
        return;
    }
    s->c = c;
    s->tier = o->cold.tier;
    s->cold_op = o->cold.cold_op;
    s->fp = fp;
    s->version = o->version;
    s->ident = t->ident; /* moved */
    t->ident = (kvm_ident_t){0};
    s->be = be;
    s->loc.len = o->cold.u.mat.locator_len;
    memcpy(s->loc.b, o->cold.u.mat.locator, s->loc.len);
    s->len = o->cold.u.mat.length;
    s->checksum = o->cold.u.mat.checksum;
    s->buf = buf;
    s->w[0].cb = t->cb;
    s->w[0].arg = t->arg;
    s->n_w = 1;
    s->next = c->sf;
    c->sf = s;
    c->n_sf++;
    free(t); /* its aux hold passes to s */
    s->io.run = sf_run;
    s->io.done = sf_done;
    cold_exec_submit(c, &s->io);
}

int cold_restore(cold_t *c, const kvm_ident_t *ident, cold_restore_cb cb, void *arg)
{
    if (!c || !ident || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_restore: NULL argument");
    if (c->closing)
        return kvm_errf(KVMESH_ECLOSED, "cold_restore: handle is closing");
    stask_t *t = calloc(1, sizeof(*t));
    if (!t)
        return KVMESH_ENOMEM;
    if (kvm_ident_copy(&t->ident, ident) != 0) {
        free(t);
        return KVMESH_ENOMEM;
    }
    t->c = c;
    t->cb = cb;
    t->arg = arg;
    cold_aux_hold(c);
    c->route.lookup(c->route.ctx, &t->ident, st_on_lookup, t);
    return 0;
}

/* ---- reconciliation -------------------------------------------------------------------------- */

static const char *const due_states[] = {
    "planned",
    "reserved",
    "payload-written",
    "route-committed",
    "reclaiming",
    COLD_DUE_RECLAIM_PLANNED,
    COLD_DUE_RECLAIM_DELETED,
    COLD_DUE_RELEASED,     /* terminal: purged (cold_config_t.purge_after_ms) */
    COLD_DUE_RECLAIM_DONE, /* terminal: purged */
};
#define DUE_FIRST_RECLAIM 5 /* due_states[5..6]: reclaims to run */
#define DUE_PURGE_OP      7
#define DUE_PURGE_REC     8
#define N_DUE_STATES      (sizeof(due_states) / sizeof(due_states[0]))

typedef struct recon {
    cold_t *c;
    uint32_t page;
    size_t i;
    cold_recon_report_t rep;
    cold_recon_cb cb;
    void *arg;
} recon_t;

static int opkey_parse(const char *s, kvm_op_id_t *out)
{
    char hex[KVM_ID128_HEX_LEN + 1];
    const char *c1 = strchr(s, ':');
    if (!c1 || (size_t)(c1 - s) != KVM_ID128_HEX_LEN)
        return KVMESH_EINVAL;
    memcpy(hex, s, KVM_ID128_HEX_LEN);
    hex[KVM_ID128_HEX_LEN] = '\0';
    if (kvm_id128_parse(hex, &out->writer) != 0)
        return KVMESH_EINVAL;
    char *end = NULL;
    out->epoch = strtoull(c1 + 1, &end, 10);
    if (!end || *end != ':')
        return KVMESH_EINVAL;
    out->seq = strtoull(end + 1, &end, 10);
    if (!end || *end != '\0' || !kvm_op_id_is_valid(out))
        return KVMESH_EINVAL;
    return 0;
}

typedef struct rsm {
    cold_t *c;
} rsm_t;

static void on_resume_op(void *arg, int rc, const cold_op_view_t *v)
{
    rsm_t *r = arg;
    cold_t *c = r->c;
    if (rc == 0 && !c->closing && v->op && cold_attached(c, &v->op->device)) {
        kvm_ident_t id;
        if (kvm_ident_from_canonical(&id, v->op->ident, v->op->ident_len) == 0) {
            cold_job_t job = {.ident = &id,
                              .cold_op = v->op->id,
                              .content_op = v->op->content_op,
                              .device = v->op->device,
                              .length = v->op->length,
                              .checksum = v->op->checksum};
            (void)cold_offload_submit(c, &job); /* full queue: the next pass */
            kvm_ident_free(&id);
        }
    }
    free(r);
    cold_aux_release(c);
}

static void on_resume_rec(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)arg;
    (void)rc;
    (void)v;
}

static void recon_next(recon_t *r);

static void on_purged_op(void *arg, int rc, const cold_op_view_t *v)
{
    (void)rc, (void)v; /* a failure: the entry stays and the next pass retries */
    cold_aux_release(arg);
}

static void on_purged_rec(void *arg, int rc, const cold_reclaim_view_t *v)
{
    (void)rc, (void)v;
    cold_aux_release(arg);
}

/* One terminal record past its retention (and its due entry) deleted; 0 when started. */
static int purge(cold_t *c, bool rec, const kvm_op_id_t *id)
{
    cold_aux_hold(c);
    int rc = rec ? COLD_INTERNAL(c, cold_rec_call(c, CK_REC_PURGE, id, on_purged_rec, c))
                 : COLD_INTERNAL(c, cold_op_purge(c, id, on_purged_op, c));
    if (rc)
        cold_aux_release(c);
    return rc;
}

static void on_due(void *arg, const meta_result_t *res)
{
    recon_t *r = arg;
    cold_t *c = r->c;
    if (c->closing || res->rc) {
        if (!r->rep.rc)
            r->rep.rc = res->rc ? res->rc : KVMESH_ECANCELED;
        if (c->closing) {
            c->recon_busy = false;
            free(r);
            cold_aux_release(c);
            return;
        }
    } else {
        uint64_t now = env_wall_ms(c->env);
        bool past_page = res->more;
        for (size_t i = 0; i < res->n_kvs; i++) {
            ks_parsed_t *p = malloc(sizeof(*p));
            if (!p || ks_parse(res->kvs[i].key, p) != 0 || p->family != KS_COLD_DUE) {
                free(p);
                continue;
            }
            uint64_t deadline = p->parts[1].u;
            kvm_op_id_t id;
            int prc = opkey_parse(p->parts[2].s, &id);
            free(p);
            if (deadline > now) {
                past_page = false;
                break;
            }
            if (prc)
                continue;
            if (r->i >= DUE_PURGE_OP) {
                if (purge(c, r->i == DUE_PURGE_REC, &id) == 0)
                    r->rep.purged++;
                continue;
            }
            if (r->i >= DUE_FIRST_RECLAIM) {
                if (cold_reclaim_run(c, &id, on_resume_rec, NULL) == 0)
                    r->rep.reclaims++;
                continue;
            }
            rsm_t *m = calloc(1, sizeof(*m));
            if (!m)
                continue;
            m->c = c;
            cold_aux_hold(c);
            if (COLD_INTERNAL(c, cold_op_get(c, &id, on_resume_op, m)) == 0) {
                r->rep.resumed++;
            } else {
                free(m);
                cold_aux_release(c);
            }
        }
        if (past_page)
            r->rep.more = true;
    }
    r->i++;
    recon_next(r);
}

static void recon_next(recon_t *r)
{
    cold_t *c = r->c;
    if (r->i >= N_DUE_STATES || c->closing) {
        c->recon_busy = false;
        if (!c->closing)
            r->cb(r->arg, &r->rep);
        free(r);
        cold_aux_release(c);
        return;
    }
    char prefix[KS_KEY_CAP];
    int rc = ks_cold_due_prefix(prefix, sizeof(prefix), c->dep, due_states[r->i]);
    if (rc == 0) {
        c->st.meta_round_trips++;
        rc = meta_range(c->m, prefix, NULL, r->page, c->cfg.timeout_ms, on_due, r);
    }
    if (rc) {
        if (!r->rep.rc)
            r->rep.rc = rc;
        r->i++;
        recon_next(r);
    }
}

int cold_recon_pass(cold_t *c, uint32_t page, cold_recon_cb cb, void *arg)
{
    if (!c || !cb || page < 1 || page > COLD_PAGE_MAX)
        return kvm_errf(KVMESH_EINVAL, "cold_recon_pass: page must be 1..%d", COLD_PAGE_MAX);
    if (c->closing)
        return kvm_errf(KVMESH_ECLOSED, "cold_recon_pass: handle is closing");
    if (c->recon_busy)
        return kvm_errf(KVMESH_EAGAIN, "cold_recon_pass: a pass is running");
    recon_t *r = calloc(1, sizeof(*r));
    if (!r)
        return KVMESH_ENOMEM;
    *r = (recon_t){.c = c, .page = page, .cb = cb, .arg = arg};
    c->recon_busy = true;
    cold_aux_hold(c);
    recon_next(r);
    return 0;
}

/* ---- invariants ---------------------------------------------------------------------------- */

int cold_worker_check(const cold_t *c)
{
    size_t nq = 0, na = 0, ns = 0;
    for (const cold_jobst_t *j = c->q_head; j; j = j->next, nq++)
        if (j->next && j->next->prev != j)
            return kvm_errf(KVMESH_ECORRUPT, "cold worker: queue links broken");
    for (const cold_jobst_t *j = c->active; j; j = j->next, na++)
        if (find_job(j->next, &j->cold_op) || find_job(c->q_head, &j->cold_op))
            return kvm_errf(KVMESH_ECORRUPT, "cold worker: a cold op is driven twice");
    for (const cold_sf_t *s = c->sf; s; s = s->next, ns++)
        if (s->n_w == 0 || s->n_w > COLD_WAITERS_MAX)
            return kvm_errf(KVMESH_ECORRUPT, "cold restore: waiter count out of range");
    if (nq != c->n_queued || na != c->n_active || ns != c->n_sf)
        return kvm_errf(KVMESH_ECORRUPT,
                        "cold worker: %zu queued / %zu active / %zu restores listed, counts say "
                        "%zu / %zu / %zu",
                        nq, na, ns, c->n_queued, c->n_active, c->n_sf);
    return 0;
}
