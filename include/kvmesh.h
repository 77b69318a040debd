/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvmesh.h — the public C API of kvmesh, a masterless, multi-tenant, distributed object store
 * for LLM KV-cache blocks.
 *
 * Error convention: every function that can fail returns int, 0 on success or a negative
 * KVMESH_E* code from the reserved band [-30999, -30000]. kvmesh_strerror() names every code;
 * kvmesh_last_error() gives the calling thread's detailed message for its most recent failure
 * (what was wrong and what to do), valid until that thread's next kvmesh call.
 */
#ifndef KVMESH_H
#define KVMESH_H

#ifdef __cplusplus
extern "C" {
#endif

#define KVMESH_VERSION_MAJOR 0
#define KVMESH_VERSION_MINOR 1
#define KVMESH_VERSION_PATCH 0

/*
 * The error list. X(name, value, description). Append new codes at the end of the list with the
 * next free value; never renumber (the values travel on the wire and in logs).
 */
#define KVMESH_ERROR_LIST(X)                                                                       \
    X(KVMESH_EINVAL, -30000, "invalid argument")                                                   \
    X(KVMESH_ENOMEM, -30001, "out of memory")                                                      \
    X(KVMESH_ENOENT, -30002, "not found")                                                          \
    X(KVMESH_EEXIST, -30003, "already exists")                                                     \
    X(KVMESH_ETIMEDOUT, -30004, "deadline exceeded")                                               \
    X(KVMESH_ECANCELED, -30005, "operation canceled")                                              \
    X(KVMESH_ECONFLICT, -30006, "compare-and-set conflict")                                        \
    X(KVMESH_ESTALE_GENERATION, -30007, "stale route generation; refresh and retry")               \
    X(KVMESH_EINDETERMINATE, -30008, "outcome indeterminate; repair pending")                      \
    X(KVMESH_EUNAVAILABLE, -30009, "temporarily unavailable")                                      \
    X(KVMESH_EIO, -30010, "I/O error")                                                             \
    X(KVMESH_ECONN, -30011, "connection failed or lost")                                           \
    X(KVMESH_EPROTO, -30012, "protocol error: malformed or unexpected message")                    \
    X(KVMESH_ETOOBIG, -30013, "value or message too large")                                        \
    X(KVMESH_ENOSPC, -30014, "out of space")                                                       \
    X(KVMESH_EAUTH, -30015, "authentication failed")                                               \
    X(KVMESH_EINCOMPAT, -30016, "incompatible peer or configuration")                              \
    X(KVMESH_EAGAIN, -30017, "resource busy; try again")                                           \
    X(KVMESH_ECHECKSUM, -30018, "checksum mismatch")                                               \
    X(KVMESH_EQUOTA, -30019, "tenant quota exceeded")                                              \
    X(KVMESH_ECLOSED, -30020, "handle closed")                                                     \
    X(KVMESH_EBACKEND, -30021, "metadata backend error")                                           \
    X(KVMESH_EURL, -30022, "malformed or unsupported URL")                                         \
    X(KVMESH_EBADKEY, -30023, "invalid object key")                                                \
    X(KVMESH_EBADTENANT, -30024, "invalid tenant id")                                              \
    X(KVMESH_EBADDOMAIN, -30025, "invalid domain")                                                 \
    X(KVMESH_ERANGE, -30026, "out of range")                                                       \
    X(KVMESH_ENOTSUP, -30027, "not supported")                                                     \
    X(KVMESH_ECORRUPT, -30028, "corrupt record or protocol conflict")                              \
    X(KVMESH_EINTERNAL, -30029, "internal error")                                                  \
    X(KVMESH_ECONFIG, -30030, "invalid configuration")

enum kvmesh_error {
    KVMESH_OK = 0,
#define KVMESH_X_ENUM(name, value, desc) name = (value),
    KVMESH_ERROR_LIST(KVMESH_X_ENUM)
#undef KVMESH_X_ENUM
};

#define KVMESH_ERROR_BAND_FIRST (-30999)
#define KVMESH_ERROR_BAND_LAST  (-30000)

/* Returns a static, never-NULL description for any int (also for 0 and unknown codes). */
const char *kvmesh_strerror(int err);

/* Returns the symbolic name ("KVMESH_EINVAL") of a code, or "KVMESH_UNKNOWN". Static storage. */
const char *kvmesh_errname(int err);

/*
 * The calling thread's detailed message for its most recent failure, or "" when none was set.
 * Thread-local storage: valid until the same thread's next kvmesh call.
 */
const char *kvmesh_last_error(void);

/* Library version string "MAJOR.MINOR.PATCH". Static storage. */
const char *kvmesh_version(void);

#ifdef __cplusplus
}
#endif
#endif /* KVMESH_H */
