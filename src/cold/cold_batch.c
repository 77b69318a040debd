// SPDX-License-Identifier: Apache-2.0
/*
 * cold_batch.c — batch restore (cold.h cold_restore_batch; docs/cold.md "Batch restore"): the
 * items of one call are grouped by device, and each device's items go to its backend in one
 * get_batch run by the I/O hook (one cold_exec_t job per device: on an ExtentStore with io_uring
 * one submission of all the extent reads, else buffered preadv; LocalDir reads them in turn).
 * The bytes land in the caller's buffers; each item is verified on its own (the backend checks
 * length, header and checksum, the core checks the checksum again) and gets its own rc.
 *
 * Lifetime: the call context holds the handle (cold_aux_hold) until its last job is done; after
 * cold_close the jobs still run (the I/O hook finishes what it was given) but cb does not.
 * Invariant: ctx->pending = jobs submitted and not done; cb runs exactly once, at 0.
 */
#include <stdlib.h>
#include <string.h>

#include "cold/cold_int.h"
#include "core/util.h"

typedef struct bctx bctx_t;

typedef struct bjob {
    bctx_t *x;
    const cold_backend_t *be;
    kvm_tier_id_t dev;
    size_t n;
    size_t *idx;        /* the job's items in x->items */
    cold_read_t *reads; /* the backend's view of them */
    int rc;             /* get_batch's own result (the whole batch did not run) */
    cold_exec_t io;
} bjob_t;

struct bctx {
    cold_t *c;
    cold_batch_item_t *items;
    size_t n;
    cold_batch_cb cb;
    void *arg;
    size_t n_jobs, pending;
    bjob_t *jobs;
    size_t *idx;        /* n entries, sliced among the jobs */
    cold_read_t *reads; /* n entries, sliced among the jobs */
};

static void bctx_finish(bctx_t *x)
{
    cold_t *c = x->c;
    KVM_ASSERT(x->pending == 0);
    if (!c->closing) {
        for (size_t i = 0; i < x->n; i++) {
            cold_dev_stats_t *ds = cold_dev_st(c, &x->items[i].device);
            if (x->items[i].rc) {
                c->st.restore_failed++;
                ds->restore_failed++;
            } else {
                c->st.restores++;
                ds->restores++;
            }
        }
        x->cb(x->arg, x->items, x->n);
    }
    free(x->jobs);
    free(x->idx);
    free(x->reads);
    free(x);
    cold_aux_release(c);
}

/* [I/O thread] the device's reads, then the core's own check of each item's bytes */
static void bjob_run(cold_exec_t *io)
{
    bjob_t *j = KVM_CONTAINER_OF(io, bjob_t, io);
    cold_backend_err_t err = {{0}};
    j->rc = j->be->ops->get_batch(j->be->be, j->reads, j->n, &err);
    for (size_t k = 0; k < j->n; k++) {
        cold_read_t *r = &j->reads[k];
        if (j->rc)
            r->rc = j->rc;
        else if (r->rc == 0 && kvm_checksum(r->buf, r->len) != r->checksum)
            r->rc = KVMESH_ECHECKSUM;
        if (r->rc && r->len && r->buf)
            memset(r->buf, 0, r->len); /* never leave unverified bytes behind */
    }
}

static void bjob_done(cold_exec_t *io)
{
    bjob_t *j = KVM_CONTAINER_OF(io, bjob_t, io);
    bctx_t *x = j->x;
    for (size_t k = 0; k < j->n; k++)
        x->items[j->idx[k]].rc = j->reads[k].rc;
    KVM_ASSERT(x->pending > 0);
    if (--x->pending == 0)
        bctx_finish(x);
}

/* The item's verdict before any read: 0 (read it from *be), or why not. */
static int precheck(cold_t *c, const cold_batch_item_t *it, const cold_backend_t **be)
{
    *be = NULL;
    if (it->loc.len == 0 || it->loc.len > COLD_LOCATOR_MAX || it->len > c->cfg.max_buffer ||
        (it->len && !it->buf))
        return KVMESH_ECORRUPT;
    const cold_device_t *dv = cold_view_find(c, &it->device);
    if (dv && !cold_device_readable(dv))
        return KVMESH_EUNAVAILABLE;
    *be = cold_attached(c, &it->device);
    return *be ? 0 : KVMESH_ENOTSUP;
}

/* The job of device dev among x->jobs[0..x->n_jobs), created when absent. */
static bjob_t *job_for(bctx_t *x, const kvm_tier_id_t *dev, const cold_backend_t *be)
{
    for (size_t k = 0; k < x->n_jobs; k++)
        if (kvm_id128_equal(&x->jobs[k].dev, dev))
            return &x->jobs[k];
    bjob_t *j = &x->jobs[x->n_jobs++];
    *j = (bjob_t){.x = x, .be = be, .dev = *dev};
    j->io.run = bjob_run;
    j->io.done = bjob_done;
    return j;
}

/* Groups the readable items by device: each job's idx/reads are consecutive slices of x's. */
static void group(bctx_t *x, const cold_backend_t **bes)
{
    cold_t *c = x->c;
    for (size_t i = 0; i < x->n; i++)
        if (bes[i])
            job_for(x, &x->items[i].device, bes[i])->n++;
    size_t at = 0;
    for (size_t k = 0; k < x->n_jobs; k++) {
        bjob_t *j = &x->jobs[k];
        j->idx = &x->idx[at];
        j->reads = &x->reads[at];
        at += j->n;
        j->n = 0;
    }
    for (size_t i = 0; i < x->n; i++) {
        if (!bes[i])
            continue;
        cold_batch_item_t *it = &x->items[i];
        bjob_t *j = job_for(x, &it->device, bes[i]);
        j->idx[j->n] = i;
        j->reads[j->n] =
            (cold_read_t){.loc = it->loc, .len = it->len, .checksum = it->checksum, .buf = it->buf};
        j->n++;
    }
    c->st.restore_batches += x->n_jobs;
    c->st.restore_batch_items += at;
}

int cold_restore_batch(cold_t *c, cold_batch_item_t *items, size_t n, cold_batch_cb cb, void *arg,
                       size_t *jobs)
{
    if (jobs)
        *jobs = 0;
    if (!c || !items || !cb || n == 0 || n > COLD_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "cold_restore_batch: 1..%d items and a callback",
                        COLD_BATCH_MAX);
    if (c->closing)
        return kvm_errf(KVMESH_ECLOSED, "cold_restore_batch: handle is closing");
    bctx_t *x = calloc(1, sizeof(*x));
    const cold_backend_t **bes = calloc(n, sizeof(*bes));
    if (x) {
        x->jobs = calloc(n, sizeof(*x->jobs));
        x->idx = calloc(n, sizeof(*x->idx));
        x->reads = calloc(n, sizeof(*x->reads));
    }
    if (!x || !bes || !x->jobs || !x->idx || !x->reads) {
        if (x) {
            free(x->jobs);
            free(x->idx);
            free(x->reads);
        }
        free(x);
        free(bes);
        return KVMESH_ENOMEM;
    }
    *x = (bctx_t){.c = c,
                  .items = items,
                  .n = n,
                  .cb = cb,
                  .arg = arg,
                  .jobs = x->jobs,
                  .idx = x->idx,
                  .reads = x->reads};
    for (size_t i = 0; i < n; i++)
        items[i].rc = precheck(c, &items[i], &bes[i]);
    group(x, bes);
    free(bes);
    cold_aux_hold(c);
    if (jobs)
        *jobs = x->n_jobs;
    /* pending covers every job before the first is submitted (an inline hook finishes it at
     * once), plus one for this frame, dropped last */
    x->pending = x->n_jobs + 1;
    size_t nj = x->n_jobs;
    for (size_t k = 0; k < nj; k++)
        cold_exec_submit(c, &x->jobs[k].io);
    if (--x->pending == 0)
        bctx_finish(x);
    return 0;
}
