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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the functions the library exports. libkvmesh.so is built with -fvisibility=hidden, so
 * what this header declares KVMESH_EXTERN is its whole dynamic symbol surface (docs/api.md). */
#if defined(__GNUC__) || defined(__clang__)
#define KVMESH_EXTERN __attribute__((visibility("default")))
#else
#define KVMESH_EXTERN
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
KVMESH_EXTERN const char *kvmesh_strerror(int err);

/* Returns the symbolic name ("KVMESH_EINVAL") of a code, or "KVMESH_UNKNOWN". Static storage. */
KVMESH_EXTERN const char *kvmesh_errname(int err);

/*
 * The calling thread's detailed message for its most recent failure, or "" when none was set.
 * Thread-local storage: valid until the same thread's next kvmesh call.
 */
KVMESH_EXTERN const char *kvmesh_last_error(void);

/* Library version string "MAJOR.MINOR.PATCH". Static storage. */
KVMESH_EXTERN const char *kvmesh_version(void);

/* ============================================================================================
 * The store API.
 *
 * Threading: every function below may be called from any number of application threads at
 * once on the same kvmesh_t (requests are handed to the runtime's loop thread through a bounded
 * queue; a full queue blocks the caller up to the request timeout). A kvmesh_config_t is not
 * thread-safe: build it on one thread, then pass it to kvmesh_open (which copies it).
 *
 * Scope: every object operation names a tenant (required) and an optional domain. The same key
 * in two tenants, or in two domains of one tenant, names two independent objects.
 *
 * Ownership: inputs are borrowed for the duration of the call only. Outputs that the library
 * allocates (kvmesh_get) are freed by the caller with kvmesh_free(). Registered buffers stay
 * owned by the caller and must remain valid until kvmesh_unregister_buffer returns.
 * ========================================================================================== */

typedef struct kvmesh kvmesh_t;
typedef struct kvmesh_config kvmesh_config_t;

/* ---- configuration -------------------------------------------------------------------------
 * Fields are set by name with a string value, so that the daemon's YAML file, the CLI flags and
 * the Python package share one validation table. kvmesh_config_fields() lists every field with
 * its default and meaning (docs/configuration.md is generated from the same table). */
KVMESH_EXTERN kvmesh_config_t *kvmesh_config_new(void); /* defaults; NULL on out of memory */
KVMESH_EXTERN void kvmesh_config_free(kvmesh_config_t *cfg);
/* KVMESH_ECONFIG with kvmesh_last_error() naming the field, the bad value and what is allowed. */
KVMESH_EXTERN int kvmesh_config_set(kvmesh_config_t *cfg, const char *field, const char *value);
/* Writes the current value of a field as a string into buf. */
KVMESH_EXTERN int kvmesh_config_get(const kvmesh_config_t *cfg, const char *field, char *buf,
                                    size_t cap);

typedef struct kvmesh_config_field {
    const char *name;
    const char *default_value;
    const char *help;
} kvmesh_config_field_t;
/* Static table of every field; *n receives its length. */
KVMESH_EXTERN const kvmesh_config_field_t *kvmesh_config_fields(size_t *n);

/* ---- lifecycle ----------------------------------------------------------------------------- */
/* Joins (or bootstraps) the deployment named by the config: registers this runtime under a
 * metadata lease, contributes its memory, starts its loop and listeners. */
KVMESH_EXTERN int kvmesh_open(kvmesh_t **out, const kvmesh_config_t *cfg);
/* Graceful drain: stops taking new replicas, moves this runtime's replicas to other runtimes,
 * then leaves membership. Bounded by timeout_ms (0 = config drain_timeout_ms). */
KVMESH_EXTERN int kvmesh_drain(kvmesh_t *kv, uint32_t timeout_ms);
/* Leaves immediately (no drain) and frees everything. Pending calls fail with KVMESH_ECLOSED.
 * Returns 0, or KVMESH_ETIMEDOUT when the runtime's loop did not finish closing within
 * 2 x request_timeout_ms + 1 s (a callback of the application blocks it): what it still waited
 * for is in kvmesh_last_error() and on stderr, and the runtime is freed once the loop finishes.
 * Either way kv is gone. */
KVMESH_EXTERN int kvmesh_close(kvmesh_t *kv);
KVMESH_EXTERN void kvmesh_free(void *p); /* frees memory returned by kvmesh_get */

/* ---- object operations ---------------------------------------------------------------------- */
typedef struct kvmesh_scope {
    const char *tenant; /* required */
    const char *domain; /* optional: NULL = none */
} kvmesh_scope_t;

typedef struct kvmesh_put_opts {
    uint32_t replicas;                   /* 0 = config default */
    const char *const *preferred_owners; /* runtime ids (hex), tried first; NULL = none */
    size_t n_preferred;
    bool hard_pin; /* true: fail with KVMESH_EUNAVAILABLE instead of falling back */
} kvmesh_put_opts_t;

/* Create or overwrite. opts may be NULL. */
KVMESH_EXTERN int kvmesh_put(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                             size_t key_len, const void *value, size_t len,
                             const kvmesh_put_opts_t *opts);
/* Gather put: the value is the concatenation of iov[0..iovcnt). */
KVMESH_EXTERN int kvmesh_putv(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                              size_t key_len, const struct iovec *iov, int iovcnt,
                              const kvmesh_put_opts_t *opts);
/* Reads into a new buffer (*out, *out_len; free with kvmesh_free). KVMESH_ENOENT if absent. */
KVMESH_EXTERN int kvmesh_get(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                             size_t key_len, void **out, size_t *out_len);
/* Reads into the caller's buffer (zero copy when it is registered). KVMESH_ETOOBIG when cap is
 * smaller than the object (then *out_len is the object size and buf is untouched). */
KVMESH_EXTERN int kvmesh_get_into(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                                  size_t key_len, void *buf, size_t cap, size_t *out_len);
/* Scatter get: fills iov[0..iovcnt) in order; KVMESH_ETOOBIG when they are too small. */
KVMESH_EXTERN int kvmesh_getv(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                              size_t key_len, const struct iovec *iov, int iovcnt, size_t *out_len);
KVMESH_EXTERN int kvmesh_remove(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                                size_t key_len);
KVMESH_EXTERN int kvmesh_exists(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                                size_t key_len, bool *out);
KVMESH_EXTERN int kvmesh_size(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                              size_t key_len, uint64_t *out);

/* Registered buffers: memory the transports may read from / write into directly. */
KVMESH_EXTERN int kvmesh_register_buffer(kvmesh_t *kv, void *addr, size_t len);
KVMESH_EXTERN int kvmesh_unregister_buffer(kvmesh_t *kv, void *addr);

#define KVMESH_ID_HEX_LEN 32
typedef struct kvmesh_replica_info {
    char owner[KVMESH_ID_HEX_LEN + 1]; /* runtime id, hex */
    uint64_t segment;
    uint64_t offset;
    uint64_t length;
} kvmesh_replica_info_t;

#define KVMESH_MAX_REPLICAS 8
typedef struct kvmesh_route_info {
    uint64_t fencing_token;
    uint64_t primary_sequence;
    uint64_t length;
    uint64_t checksum; /* XXH3-64 of the value */
    uint32_t n_replicas;
    kvmesh_replica_info_t replicas[KVMESH_MAX_REPLICAS];
    bool cold_backed;
} kvmesh_route_info_t;

KVMESH_EXTERN int kvmesh_route_query(kvmesh_t *kv, const kvmesh_scope_t *scope, const void *key,
                                     size_t key_len, kvmesh_route_info_t *out);

/* ---- batches: one hand-off to the runtime, one result per item ----------------------------- */
#define KVMESH_BATCH_MAX 4096 /* items per batch call */

typedef struct kvmesh_batch_item {
    const void *key;
    size_t key_len;
    void *buf;      /* put: the value; get: destination buffer (may be registered) */
    size_t len;     /* put: value length; get: buffer capacity */
    size_t out_len; /* get: object size */
    int rc;         /* per-item result */
} kvmesh_batch_item_t;

/* Each returns 0 when every item succeeded, or the first failing item's rc; per-item results
 * are in items[i].rc. */
KVMESH_EXTERN int kvmesh_batch_put(kvmesh_t *kv, const kvmesh_scope_t *scope,
                                   kvmesh_batch_item_t *items, size_t n,
                                   const kvmesh_put_opts_t *opts);
KVMESH_EXTERN int kvmesh_batch_get(kvmesh_t *kv, const kvmesh_scope_t *scope,
                                   kvmesh_batch_item_t *items, size_t n);
KVMESH_EXTERN int kvmesh_batch_remove(kvmesh_t *kv, const kvmesh_scope_t *scope,
                                      kvmesh_batch_item_t *items, size_t n);
/* rc 0 = exists, KVMESH_ENOENT = absent; out_len = size when it exists. */
KVMESH_EXTERN int kvmesh_batch_exists(kvmesh_t *kv, const kvmesh_scope_t *scope,
                                      kvmesh_batch_item_t *items, size_t n);

/* ---- cluster view ---------------------------------------------------------------------------- */
typedef struct kvmesh_member_info {
    char id[KVMESH_ID_HEX_LEN + 1];
    uint64_t epoch;
    char address[64];
    char state[16]; /* "standby", "active", "draining", "gone" */
    double weight;
    uint64_t capacity_bytes;
    uint64_t used_bytes;
    /* rpc_local = unix: the member's unix-socket RPC address ("unix:PATH") and host identity
     * ("BOOTID/DEV:INO": boot id and network namespace) from its record; "" when not published */
    char local_rpc[112];
    char host[96];
} kvmesh_member_info_t;

/* Fills up to cap entries from the runtime's live snapshot; *n receives the member count. */
KVMESH_EXTERN int kvmesh_members(kvmesh_t *kv, kvmesh_member_info_t *out, size_t cap, size_t *n);
/* This runtime's id (hex) and epoch. */
KVMESH_EXTERN int kvmesh_self(kvmesh_t *kv, char id[KVMESH_ID_HEX_LEN + 1], uint64_t *epoch);

#ifdef __cplusplus
}
#endif
#endif /* KVMESH_H */
