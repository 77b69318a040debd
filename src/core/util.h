/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h — small helpers shared by every module: always-on assertions, array sizes, branch
 * hints, and the detailed-error helper (kvm_errf) that feeds kvmesh_last_error().
 */
#ifndef KVMESH_CORE_UTIL_H
#define KVMESH_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kvmesh.h"

#define KVM_ARRAY_SIZE(a)                   (sizeof(a) / sizeof((a)[0]))
#define KVM_LIKELY(x)                       __builtin_expect(!!(x), 1)
#define KVM_UNLIKELY(x)                     __builtin_expect(!!(x), 0)
#define KVM_MIN(a, b)                       ((a) < (b) ? (a) : (b))
#define KVM_MAX(a, b)                       ((a) > (b) ? (a) : (b))
#define KVM_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Programmer errors abort, in every build type (cheap checks only). */
void kvm_assert_fail(const char *expr, const char *file, int line, const char *func)
    __attribute__((noreturn));
#define KVM_ASSERT(e) (KVM_LIKELY(e) ? (void)0 : kvm_assert_fail(#e, __FILE__, __LINE__, __func__))

/*
 * Records a detailed message for the calling thread (see kvmesh_last_error) and returns err,
 * so that a failure path reads: return kvm_errf(KVMESH_EBADKEY, "key is %zu bytes; max %d", ...);
 */
int kvm_errf(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's detailed message. */
void kvm_err_clear(void);

/* Compile-time assertion usable at file scope. */
#define KVM_STATIC_ASSERT(c, msg) _Static_assert(c, msg)

#endif
