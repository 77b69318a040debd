/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.c — the error band: names and descriptions for every KVMESH_E* code, the thread-local
 * detailed message behind kvmesh_last_error(), and the always-on assertion handler.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static _Thread_local char tls_errmsg[512];

const char *kvmesh_strerror(int err)
{
    switch (err) {
    case KVMESH_OK:
        return "success";
#define X(name, value, desc)                                                                       \
    case name:                                                                                     \
        return desc;
        KVMESH_ERROR_LIST(X)
#undef X
    default:
        return "unknown error";
    }
}

const char *kvmesh_errname(int err)
{
    switch (err) {
    case KVMESH_OK:
        return "KVMESH_OK";
#define X(name, value, desc)                                                                       \
    case name:                                                                                     \
        return #name;
        KVMESH_ERROR_LIST(X)
#undef X
    default:
        return "KVMESH_UNKNOWN";
    }
}

const char *kvmesh_last_error(void)
{
    return tls_errmsg;
}

const char *kvmesh_version(void)
{
#define KVM_STR2(x) #x
#define KVM_STR(x)  KVM_STR2(x)
    return KVM_STR(KVMESH_VERSION_MAJOR) "." KVM_STR(KVMESH_VERSION_MINOR) "." KVM_STR(
        KVMESH_VERSION_PATCH);
}

/* Formatted into a scratch buffer first: the arguments may point into tls_errmsg itself (a
 * message wrapping kvmesh_last_error()), and vsnprintf's source and destination must not
 * overlap. */
int kvm_errf(int err, const char *fmt, ...)
{
    static _Thread_local char scratch[sizeof(tls_errmsg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(scratch, sizeof(scratch), fmt, ap);
    va_end(ap);
    memcpy(tls_errmsg, scratch, strlen(scratch) + 1);
    return err;
}

void kvm_err_clear(void)
{
    tls_errmsg[0] = '\0';
}

void kvm_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "kvmesh: assertion failed: %s (%s:%d, %s)\n", expr, file, line, func);
    fflush(stderr);
    abort();
}
