/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.c — the error band: names and descriptions for every KVMESH_E* code, the thread-local
 * detailed message behind kvmesh_last_error(), and the always-on assertion handler.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

int kvm_errf(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_errmsg, sizeof(tls_errmsg), fmt, ap);
    va_end(ap);
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
