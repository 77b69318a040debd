/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tsan_fd_reuse.c — the ThreadSanitizer report that tests/tsan.supp suppresses, on its own: one
 * thread creates a descriptor and closes it with syscall(SYS_close), as libuv closes every
 * descriptor it owns; another thread, ordered after it only by a relaxed atomic (no
 * happens-before), creates a descriptor and gets the same number. ThreadSanitizer did not see
 * the close and reports a race between the two creating calls. Built and run in TSan builds
 * only (CMakeLists.txt: unit_tsan_fd_reuse_is_reported / _is_suppressed).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_int closed_fd = -1;

static void *closer(void *arg)
{
    (void)arg;
    int fd = epoll_create1(EPOLL_CLOEXEC);
    syscall(SYS_close, fd);
    atomic_store_explicit(&closed_fd, fd, memory_order_relaxed);
    return NULL;
}

static void *reuser(void *arg)
{
    int *got = arg;
    while (atomic_load_explicit(&closed_fd, memory_order_relaxed) < 0)
        ;
    *got = epoll_create1(EPOLL_CLOEXEC);
    return NULL;
}

int main(void)
{
    pthread_t a, b;
    int got = -1;
    if (pthread_create(&b, NULL, reuser, &got) || pthread_create(&a, NULL, closer, NULL))
        return 2;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    int was = atomic_load(&closed_fd);
    printf("closed fd %d, the next epoll_create1 got %d%s\n", was, got,
           got == was ? " (reused)" : "");
    close(got);
    return got == was ? 0 : 3;
}
