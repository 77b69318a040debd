// SPDX-License-Identifier: Apache-2.0
/*
 * env_thread.c — SIGPIPE-blocked thread creation for every thread the library starts (see
 * env_thread.h). A new thread inherits its creator's signal mask, so blocking SIGPIPE around the
 * creation covers the thread from its first instruction and everything it starts in turn.
 */
#include "env/env_thread.h"

#include <time.h>

#include "core/util.h"

void env_sigpipe_block(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    int rc = pthread_sigmask(SIG_BLOCK, &set, old);
    KVM_ASSERT(rc == 0); /* fails only for an invalid 'how' */
}

void env_sigmask_restore(const sigset_t *old)
{
    int rc = pthread_sigmask(SIG_SETMASK, old, NULL);
    KVM_ASSERT(rc == 0);
}

void env_sigpipe_restore_drop(const sigset_t *old)
{
    sigset_t pending;
    if (!sigismember(old, SIGPIPE) && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        const struct timespec zero = {0, 0};
        (void)sigtimedwait(&set, NULL, &zero); /* takes it off the pending set */
    }
    env_sigmask_restore(old);
}

int env_thread_create(pthread_t *th, void *(*fn)(void *), void *arg)
{
    sigset_t old;
    env_sigpipe_block(&old);
    int rc = pthread_create(th, NULL, fn, arg);
    env_sigmask_restore(&old);
    return rc;
}
