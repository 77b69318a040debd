// SPDX-License-Identifier: Apache-2.0
/*
 * cold_exec.c — the cold I/O worker thread of a runtime's cold tier and the background
 * maintenance jobs it runs (cold_int.h). Every backend call of the runtime runs on that one
 * worker, never on the loop.
 *
 * The worker: cold_exec_t jobs go into a FIFO under mu (one node per job, allocated at submit;
 * when that allocation fails the job runs inline on the loop); the worker runs run(), puts the
 * job on the done list and posts one drain to the loop, which calls done(). At close, after
 * cold_close, the worker finishes what is queued and exits; the loop joins it and calls the
 * remaining done()s itself (cold_close needs them to free its memory).
 *
 * Maintenance: every tick, when cold_clean_bytes_per_tick > 0, the backend has maintain() and no
 * maintenance job is in flight, one job (struct clean_job) calls maintain(budget) on the worker,
 * never on the loop: every backend call of this runtime runs on that one worker, so the job is
 * serialised with the offloads, restores and deletes too (the backends allow concurrency anyway,
 * cold_backend.h "Threading"). Its stat() before and after gives the file bytes released.
 */
#include <pthread.h>
#include <stdlib.h>

#include "env/env_thread.h"
#include "store/cold_int.h"

/* ---- the worker ------------------------------------------------------------------------------ */

static void drain_done(void *arg);

static void *worker_main(void *arg)
{
    struct kvm_cold *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->q_head && !g->stop)
            pthread_cond_wait(&g->cv, &g->mu);
        struct xnode *n = g->q_head;
        if (!n)
            break; /* stop and nothing queued */
        g->q_head = n->next;
        if (!g->q_head)
            g->q_tail = NULL;
        pthread_mutex_unlock(&g->mu);
        n->io->run(n->io); /* backend calls block here, never on the loop */
        pthread_mutex_lock(&g->mu);
        n->next = NULL;
        if (g->d_tail)
            g->d_tail->next = n;
        else
            g->d_head = n;
        g->d_tail = n;
        if (!g->drain_posted && !g->stop) {
            g->drain_posted = true;
            if (env_post(g->rt->env, drain_done, g) != 0)
                g->drain_posted = false; /* the tick drains it */
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

void kvm_cold_exec_drain(struct kvm_cold *g)
{
    pthread_mutex_lock(&g->mu);
    struct xnode *n = g->d_head;
    g->d_head = g->d_tail = NULL;
    g->drain_posted = false;
    pthread_mutex_unlock(&g->mu);
    while (n) {
        struct xnode *next = n->next;
        cold_exec_t *io = n->io;
        free(n);
        io->done(io);
        n = next;
    }
}

/* [loop] The worker's posted drain. A post still queued when kvm_cold_close ran holds a
 * reference on g (taken there), released here: the close drained every job already. */
static void drain_done(void *arg)
{
    struct kvm_cold *g = arg;
    kvm_cold_exec_drain(g);
    if (g->closed)
        kvm_cold_unref(g);
}

bool kvm_cold_exec_enqueue(void *ctx, cold_exec_t *io)
{
    struct kvm_cold *g = ctx;
    struct xnode *n = malloc(sizeof(*n));
    pthread_mutex_lock(&g->mu);
    bool queued = n && g->th_started && !g->stop;
    if (queued) {
        n->io = io;
        n->next = NULL;
        if (g->q_tail)
            g->q_tail->next = n;
        else
            g->q_head = n;
        g->q_tail = n;
        pthread_cond_signal(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (!queued)
        free(n);
    return queued;
}

void kvm_cold_exec_submit(void *ctx, cold_exec_t *io)
{
    if (!kvm_cold_exec_enqueue(ctx, io)) {
        io->run(io);
        io->done(io);
    }
}

void kvm_cold_exec_start(struct kvm_cold *g)
{
    if (env_thread_create(&g->th, worker_main, g) == 0)
        g->th_started = true;
}

void kvm_cold_exec_stop(struct kvm_cold *g)
{
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->th_started)
        pthread_join(g->th, NULL); /* it finished every queued job */
    pthread_mutex_lock(&g->mu);
    bool posted = g->drain_posted; /* a drain_done still queued on the loop runs after us */
    pthread_mutex_unlock(&g->mu);
    if (posted)
        g->refs++;          /* released by that drain_done */
    kvm_cold_exec_drain(g); /* their done()s, here on the loop */
}

/* ---- background maintenance (ExtentStore cleaning) ---------------------------------------- */

struct clean_job {
    cold_exec_t io; /* first: the worker hands back &io */
    struct kvm_cold *g;
    struct gdev *d;
    uint64_t budget;
    int64_t rc;            /* maintain()'s answer: work done, or a negative code */
    uint64_t file0, file1; /* the backend's file bytes before and after */
    cold_backend_err_t err;
};

/* [worker] */
static void clean_run(cold_exec_t *io)
{
    struct clean_job *j = (struct clean_job *)io;
    const cold_backend_t *be = &j->d->be;
    cold_backend_stat_t st;
    j->file0 = be->ops->stat(be->be, &st) == 0 ? st.file_bytes : 0;
    j->rc = be->ops->maintain(be->be, j->budget, &j->err);
    j->file1 = be->ops->stat(be->be, &st) == 0 ? st.file_bytes : j->file0;
}

/* [loop] */
static void clean_done(cold_exec_t *io)
{
    struct clean_job *j = (struct clean_job *)io;
    struct kvm_cold *g = j->g;
    kvm_rt_t *rt = g->rt;
    j->d->cleaning = false;
    obs_count(rt->metrics, cold_clean_runs_total, j->rc < 0 ? OBS_OUTCOME_ERROR : OBS_OUTCOME_OK,
              OBS_NONE, 1);
    if (j->rc >= 0 && j->file1 < j->file0)
        obs_count(rt->metrics, cold_cleaned_bytes_total, OBS_NONE, OBS_NONE, j->file0 - j->file1);
    free(
        j); /* (device errors mark the record DEGRADED: cold_health.h, kvmesh_cold_device_health) */
}

void kvm_cold_clean_submit(struct kvm_cold *g)
{
    uint64_t budget = g->rt->cfg.cold_clean_bytes_per_tick;
    for (uint32_t i = 0; i < g->ndev; i++) {
        struct gdev *d = &g->devs[i];
        if (d->cleaning || budget == 0 || !d->be_open || !d->be.ops->maintain)
            continue;
        struct clean_job *j = calloc(1, sizeof(*j));
        if (!j)
            return; /* the next tick tries again */
        *j = (struct clean_job){
            .io = {.run = clean_run, .done = clean_done}, .g = g, .d = d, .budget = budget};
        if (!kvm_cold_exec_enqueue(g, &j->io)) {
            free(j);
            return;
        }
        d->cleaning = true;
    }
}
