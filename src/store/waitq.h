/* SPDX-License-Identifier: Apache-2.0 */
/*
 * waitq — an application thread waits for a store event instead of sleep polling.
 *
 * A generation counter under a mutex and a CLOCK_MONOTONIC condition variable. Whoever changes a
 * state that threads may wait for calls kvm_waitq_signal() after the change; the waiter brackets
 * its check of that state with kvm_waitq_enter() / kvm_waitq_leave() and, while the state is not
 * yet what it needs, calls kvm_waitq_wait(): it returns when a signal came after the generation
 * the waiter last saw, when the queue closed (the runtime is closing), or at the deadline. Every
 * wait is bounded by a deadline (CLOCK_MONOTONIC ms, env_clock_mono_ms()).
 *
 * Cost: kvm_waitq_signal() is one fence and one atomic load when nobody waits (it may sit on a
 * hot path); a waiter registers before its check, so no signal between its check and its wait
 * is lost.
 *
 * Ownership: the queue is embedded in its owner (kvm_rt_t) and lives as long as it; close it
 * (kvm_waitq_close) before threads stop using the owner, destroy it after.
 */
#ifndef KVMESH_STORE_WAITQ_H
#define KVMESH_STORE_WAITQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct kvm_waitq {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* CLOCK_MONOTONIC */
    uint64_t gen;        /* under mu: signals so far */
    bool closed;         /* under mu */
    atomic_uint waiters; /* threads between enter and leave */
};

int kvm_waitq_init(struct kvm_waitq *q);
void kvm_waitq_destroy(struct kvm_waitq *q);

/* Before checking the awaited state: registers the caller and returns the generation to pass to
 * kvm_waitq_wait. Pair with kvm_waitq_leave. */
uint64_t kvm_waitq_enter(struct kvm_waitq *q);
void kvm_waitq_leave(struct kvm_waitq *q);

/* Waits until a signal after *gen, close, or deadline_ms (monotonic ms, not 0). Returns 0 after a
 * signal (*gen updated: check the state again), KVMESH_ECLOSED once the queue is closed,
 * KVMESH_ETIMEDOUT at the deadline. */
int kvm_waitq_wait(struct kvm_waitq *q, uint64_t *gen, uint64_t deadline_ms);

/* Waits until deadline_ms whatever is signalled (a timed pause that close interrupts). Returns 0
 * at the deadline, KVMESH_ECLOSED once the queue is closed. */
int kvm_waitq_pause(struct kvm_waitq *q, uint64_t deadline_ms);

/* The awaited state may have changed: wakes every waiter. Any thread. */
void kvm_waitq_signal(struct kvm_waitq *q);

/* Wakes every waiter for good: later waits return KVMESH_ECLOSED at once. Any thread. */
void kvm_waitq_close(struct kvm_waitq *q);

#endif
