/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.h — copy kernels for large payloads whose destination is not read again soon (a put's
 * bytes going into an owner's segment pages): non-temporal ("streaming") stores, which write
 * whole cache lines to memory without first reading them (no read-for-ownership) and without
 * evicting the rest of the cache. docs/performance.md "Large values over shm at memory speed".
 *
 * Variants, picked once by what the CPU runs (like hash_fast.c): "avx512" (64-byte streaming
 * stores, AVX-512F), "sse2" (16-byte, every x86-64), and "memcpy" (plain memcpy: the portable
 * path, the only one on other CPUs). Every variant writes exactly the source bytes; tests force
 * each one by name (kvm_copy_impl_use).
 */
#ifndef KVMESH_CORE_COPY_H
#define KVMESH_CORE_COPY_H

#include <stddef.h>

/*
 * Copies n bytes from src to dst (the ranges must not overlap), dst written with streaming
 * stores where the variant has them (the unaligned head and tail of dst with memcpy). The stores
 * are weakly ordered: call kvm_copy_stream_fence() once after the last kvm_copy_stream() and
 * before anything tells another thread or process that the bytes are there. Both pointers are
 * borrowed for the call.
 */
void kvm_copy_stream(void *dst, const void *src, size_t n);

/* Orders every streaming store this thread made before the stores and loads after it (sfence;
 * nothing for the memcpy variant or on other CPUs). */
void kvm_copy_stream_fence(void);

/* Tests and benchmarks: the variants this CPU runs (at most max names, static storage, slowest
 * first), the one in use, and switching it (KVMESH_EINVAL for an unknown name, KVMESH_ENOTSUP
 * for one this CPU cannot run). A switch applies to the calls that start after it; the caller
 * fences with the variant it copied with (kvm_copy_stream_fence fences whenever the CPU has
 * the instruction, whatever the variant). */
size_t kvm_copy_impls(const char **names, size_t max);
const char *kvm_copy_impl(void);
int kvm_copy_impl_use(const char *name);

#endif
