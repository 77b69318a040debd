/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.c — streaming-store copy kernels (copy.h). The AVX-512 kernel is compiled for AVX-512F
 * by a function attribute and only called where __builtin_cpu_supports says the CPU and OS run
 * it; the SSE2 kernel is baseline x86-64. Both copy the 64-byte lines of dst's aligned middle
 * with streaming stores (source loads unaligned) and the head and tail with memcpy.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/copy.h"
#include "core/util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVM_COPY_X86 1
#else
#define KVM_COPY_X86 0
#endif

#define LINE 64u

typedef void (*lines_fn)(uint8_t *dst, const uint8_t *src, size_t nlines);

struct copy_impl {
    const char *name;
    lines_fn lines; /* NULL: memcpy the whole range */
};

#if KVM_COPY_X86
/* nlines 64-byte lines; dst 64-byte aligned. */
static void lines_sse2(uint8_t *dst, const uint8_t *src, size_t nlines)
{
    for (size_t i = 0; i < nlines; i++, dst += LINE, src += LINE) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + 48));
        _mm_stream_si128((__m128i *)(void *)dst, a);
        _mm_stream_si128((__m128i *)(void *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(void *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(void *)(dst + 48), d);
    }
}

__attribute__((target("avx512f"))) static void lines_avx512(uint8_t *dst, const uint8_t *src,
                                                            size_t nlines)
{
    size_t i = 0;
    for (; i + 4 <= nlines; i += 4, dst += 4 * LINE, src += 4 * LINE) {
        __m512i a = _mm512_loadu_si512((const void *)src);
        __m512i b = _mm512_loadu_si512((const void *)(src + 64));
        __m512i c = _mm512_loadu_si512((const void *)(src + 128));
        __m512i d = _mm512_loadu_si512((const void *)(src + 192));
        _mm512_stream_si512((void *)dst, a);
        _mm512_stream_si512((void *)(dst + 64), b);
        _mm512_stream_si512((void *)(dst + 128), c);
        _mm512_stream_si512((void *)(dst + 192), d);
    }
    for (; i < nlines; i++, dst += LINE, src += LINE)
        _mm512_stream_si512((void *)dst, _mm512_loadu_si512((const void *)src));
}

static const struct copy_impl impls[] = {
    {"memcpy", NULL},
    {"sse2", lines_sse2},
    {"avx512", lines_avx512},
};

static bool impl_runs_here(const struct copy_impl *c)
{
    __builtin_cpu_init();
    if (c->lines == lines_avx512)
        return __builtin_cpu_supports("avx512f");
    return true;
}
#else
static const struct copy_impl impls[] = {{"memcpy", NULL}};

static bool impl_runs_here(const struct copy_impl *c)
{
    (void)c;
    return true;
}
#endif

static const struct copy_impl *cur_impl; /* atomic; NULL until the first use */

static const struct copy_impl *impl(void)
{
    const struct copy_impl *c = __atomic_load_n(&cur_impl, __ATOMIC_ACQUIRE);
    if (KVM_LIKELY(c != NULL))
        return c;
    c = &impls[0];
    for (size_t i = 0; i < KVM_ARRAY_SIZE(impls); i++) /* the last one that runs: widest */
        if (impl_runs_here(&impls[i]))
            c = &impls[i];
    __atomic_store_n(&cur_impl, c, __ATOMIC_RELEASE); /* every racing thread stores the same */
    return c;
}

void kvm_copy_stream(void *dst, const void *src, size_t n)
{
    const struct copy_impl *c = impl();
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (size_t)(-(uintptr_t)d & (LINE - 1));
    if (!c->lines || n < head + LINE) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    size_t nlines = (n - head) / LINE;
    c->lines(d + head, s + head, nlines);
    size_t done = head + nlines * LINE;
    memcpy(d + done, s + done, n - done);
}

void kvm_copy_stream_fence(void)
{
#if KVM_COPY_X86
    _mm_sfence();
#endif
}

size_t kvm_copy_impls(const char **names, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(impls); i++)
        if (impl_runs_here(&impls[i]) && n < max)
            names[n++] = impls[i].name;
    return n;
}

const char *kvm_copy_impl(void)
{
    return impl()->name;
}

int kvm_copy_impl_use(const char *name)
{
    for (size_t i = 0; i < KVM_ARRAY_SIZE(impls); i++) {
        if (strcmp(impls[i].name, name) != 0)
            continue;
        if (!impl_runs_here(&impls[i]))
            return kvm_errf(KVMESH_ENOTSUP, "copy variant %s: this CPU lacks its instructions",
                            name);
        __atomic_store_n(&cur_impl, &impls[i], __ATOMIC_RELEASE);
        return 0;
    }
    return kvm_errf(KVMESH_EINVAL, "no copy variant named \"%s\"", name);
}
