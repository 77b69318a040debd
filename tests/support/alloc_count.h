/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc_count.h — counts every allocation call of the process (malloc, calloc, realloc and the
 * aligned forms aligned_alloc, posix_memalign, memalign), for
 * the tests that pin allocations per operation (header-only; include it in ONE translation unit
 * of a test program: it defines the program's malloc family). Without a sanitizer the program's
 * malloc family counts and passes every call on to glibc's own entry points; under
 * ASan or TSan (which own the malloc family) the sanitizer's malloc hook counts instead.
 *
 *   alloc_count_start()  installs the counting (0, or -1 when the sanitizer refused the hook);
 *                        call it once, before the calls to count
 *   alloc_count_now()    the number of allocation calls so far (all threads)
 *   alloc_count_thread_now()  ... of the calling thread alone
 */
#ifndef KVMESH_TESTS_SUPPORT_ALLOC_COUNT_H
#define KVMESH_TESTS_SUPPORT_ALLOC_COUNT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_COUNT_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ALLOC_COUNT_SANITIZER 1
#endif
#endif

static atomic_uint_fast64_t alloc_count_calls;          /* every allocation call of the process */
static _Thread_local uint64_t alloc_count_thread_calls; /* ... of the calling thread */

#define ALLOC_COUNT_ONE()                                                                          \
    do {                                                                                           \
        atomic_fetch_add_explicit(&alloc_count_calls, 1, memory_order_relaxed);                    \
        alloc_count_thread_calls++;                                                                \
    } while (0)

#ifdef ALLOC_COUNT_SANITIZER
/* (sanitizer/allocator_interface.h: not every toolchain installs it; the runtime exports it) */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));

static void alloc_count_on_malloc(const volatile void *p, size_t size)
{
    (void)p;
    (void)size;
    ALLOC_COUNT_ONE();
}

static void alloc_count_on_free(const volatile void *p)
{
    (void)p;
}

static inline int alloc_count_start(void)
{
    return __sanitizer_install_malloc_and_free_hooks(alloc_count_on_malloc, alloc_count_on_free)
               ? 0
               : -1;
}
#else
/* glibc's own entry points: this program's malloc family passes every call on to them. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t size);

void *malloc(size_t size);
void *calloc(size_t n, size_t size);
void *realloc(void *p, size_t size);
void free(void *p);
void *aligned_alloc(size_t align, size_t size);
int posix_memalign(void **out, size_t align, size_t size);
void *memalign(size_t align, size_t size);

void *malloc(size_t size)
{
    ALLOC_COUNT_ONE();
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    ALLOC_COUNT_ONE();
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    ALLOC_COUNT_ONE();
    return __libc_realloc(p, size);
}

void free(void *p)
{
    __libc_free(p);
}

void *aligned_alloc(size_t align, size_t size)
{
    ALLOC_COUNT_ONE();
    return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size)
{
    ALLOC_COUNT_ONE();
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    ALLOC_COUNT_ONE();
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return 22; /* EINVAL */
    void *p = __libc_memalign(align, size);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}

static inline int alloc_count_start(void)
{
    return 0;
}
#endif

static inline uint64_t alloc_count_now(void)
{
    return atomic_load_explicit(&alloc_count_calls, memory_order_relaxed);
}

static inline uint64_t alloc_count_thread_now(void)
{
    return alloc_count_thread_calls;
}

#endif
