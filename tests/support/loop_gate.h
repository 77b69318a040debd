/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop_gate.h — blocks a runtime's loop from a test: loop_gate_block, posted to the loop
 * (env_post), does not return until the test opens the gate, like an application callback that
 * hangs. The test waits until the loop is inside it (loop_gate_wait_entered) and later lets it go
 * (loop_gate_open).
 *
 * Ownership: the caller owns the gate. Keep it static (not on a test's stack): the loop thread
 * still touches the gate's mutex while it leaves loop_gate_block, and nothing orders that before
 * a later test reuses the stack (TSan). Initialise with LOOP_GATE_INIT.
 */
#ifndef KVMESH_TESTS_SUPPORT_LOOP_GATE_H
#define KVMESH_TESTS_SUPPORT_LOOP_GATE_H

#include <pthread.h>
#include <stdbool.h>

struct loop_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, open;
};

#define LOOP_GATE_INIT                                                                             \
    {                                                                                              \
        .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER                            \
    }

/* The posted callback (arg: the gate): blocks the loop until the gate opens. */
void loop_gate_block(void *arg);
/* Waits until the loop is inside loop_gate_block. */
void loop_gate_wait_entered(struct loop_gate *g);
/* Lets the loop go. */
void loop_gate_open(struct loop_gate *g);

#endif
