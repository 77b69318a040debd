/* SPDX-License-Identifier: Apache-2.0 */
/* waitq — see waitq.h. */
#include "store/waitq.h"

#include <errno.h>
#include <time.h>

#include "core/util.h"
#include "kvmesh.h"

int kvm_waitq_init(struct kvm_waitq *q)
{
    q->gen = 0;
    q->closed = false;
    atomic_init(&q->waiters, 0);
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return KVMESH_ENOMEM;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are env_clock_mono_ms() */
    int e = pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (e)
        return KVMESH_ENOMEM;
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        pthread_cond_destroy(&q->cv);
        return KVMESH_ENOMEM;
    }
    return 0;
}

void kvm_waitq_destroy(struct kvm_waitq *q)
{
    KVM_ASSERT(atomic_load(&q->waiters) == 0);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

uint64_t kvm_waitq_enter(struct kvm_waitq *q)
{
    atomic_fetch_add(&q->waiters, 1); /* (seq_cst) before the caller reads the awaited state */
    pthread_mutex_lock(&q->mu);
    uint64_t g = q->gen;
    pthread_mutex_unlock(&q->mu);
    return g;
}

void kvm_waitq_leave(struct kvm_waitq *q)
{
    KVM_ASSERT(atomic_load(&q->waiters) > 0);
    atomic_fetch_sub(&q->waiters, 1);
}

static struct timespec mono_ts(uint64_t ms)
{
    return (struct timespec){.tv_sec = (time_t)(ms / 1000),
                             .tv_nsec = (long)(ms % 1000) * 1000000L};
}

int kvm_waitq_wait(struct kvm_waitq *q, uint64_t *gen, uint64_t deadline_ms)
{
    KVM_ASSERT(deadline_ms != 0 && atomic_load(&q->waiters) > 0);
    struct timespec ts = mono_ts(deadline_ms);
    int e = 0;
    pthread_mutex_lock(&q->mu);
    while (!q->closed && q->gen == *gen && e != ETIMEDOUT)
        e = pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    int rc = q->closed ? KVMESH_ECLOSED : q->gen != *gen ? 0 : KVMESH_ETIMEDOUT;
    *gen = q->gen;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int kvm_waitq_pause(struct kvm_waitq *q, uint64_t deadline_ms)
{
    KVM_ASSERT(deadline_ms != 0);
    struct timespec ts = mono_ts(deadline_ms);
    int e = 0;
    pthread_mutex_lock(&q->mu);
    while (!q->closed && e != ETIMEDOUT)
        e = pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    int rc = q->closed ? KVMESH_ECLOSED : 0;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void kvm_waitq_signal(struct kvm_waitq *q)
{
    atomic_thread_fence(memory_order_seq_cst); /* the state change before the waiter count */
    if (atomic_load(&q->waiters) == 0)
        return;
    pthread_mutex_lock(&q->mu);
    q->gen++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void kvm_waitq_close(struct kvm_waitq *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
