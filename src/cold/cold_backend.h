/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_backend.h — the interface between the cold tier's sans-I/O core (src/cold/cold*.c) and
 * the backends that hold cold payloads on a device (LocalDir, ExtentStore; specification
 * "Backends, devices, and scheduling"). The core never touches a file: it calls these functions
 * from the cold I/O worker threads the store runs for it, and the simulator supplies its own
 * in-memory backend through the same table.
 *
 * Identity. Every write is keyed by its cold operation id (cold_opid_t, 16 random bytes chosen
 * by the core when the operation is planned). put() is idempotent by that id: repeating it after
 * a crash returns the same locator (LocalDir: a path derived from the id; ExtentStore: the id is
 * journaled with the extent it was assigned, and recovery finds it). find() answers "was this
 * operation's payload written, and where" after a restart.
 *
 * Locators are opaque bytes the backend encodes (at most COLD_LOCATOR_MAX); the core stores them
 * in routes and metadata records and compares them by cold_locator_fingerprint().
 *
 * Integrity. put() stores the payload's XXH3-64 checksum (core/hash.h kvm_checksum) with it;
 * get() reads exactly `len` bytes and returns KVMESH_ECHECKSUM when the bytes read do not match
 * the expected checksum, KVMESH_ECORRUPT when the stored length or header disagrees with the
 * locator. Bytes that fail verification are never left in the caller's buffer as if valid: the
 * return code is the only verdict and the caller must not use the buffer on error.
 *
 * Errors (0 or a negative KVMESH_E* code): KVMESH_ENOENT (no payload for the id / locator),
 * KVMESH_ENOSPC (the device is full), KVMESH_EIO (the device failed; the message names the
 * file and errno), KVMESH_EINVAL (bad argument), KVMESH_ECHECKSUM / KVMESH_ECORRUPT (above).
 * Each function may fill `err` (may be NULL) with a message for the operator.
 *
 * Threading: every function may be called concurrently from several worker threads on distinct
 * operation ids and locators; calls on the same id are serialised by the core. open/close are
 * not concurrent with anything else. Ownership: the backend owns its files and memory; iovecs
 * and buffers passed in belong to the caller and are not kept after the call returns.
 */
#ifndef KVMESH_COLD_COLD_BACKEND_H
#define KVMESH_COLD_COLD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/hash.h"

#define COLD_OPID_LEN       16
#define COLD_LOCATOR_MAX    64
#define COLD_BACKEND_ERRMAX 256

typedef struct cold_opid {
    uint8_t b[COLD_OPID_LEN];
} cold_opid_t;

typedef struct cold_locator {
    uint16_t len; /* bytes used in b, 1..COLD_LOCATOR_MAX; 0 = none */
    uint8_t b[COLD_LOCATOR_MAX];
} cold_locator_t;

static inline uint64_t cold_locator_fingerprint(const cold_locator_t *l)
{
    return kvm_hash_seeded(l->b, l->len, 0x636f6c646c6f6331ULL /* "coldloc1" */);
}

typedef enum cold_backend_kind {
    COLD_BACKEND_LOCALDIR = 1,
    COLD_BACKEND_EXTENT = 2,
    COLD_BACKEND_SIM = 3, /* the simulator's in-memory backend */
} cold_backend_kind_t;

typedef struct cold_backend_stat {
    uint64_t capacity_bytes; /* configured capacity (never more than the filesystem has) */
    uint64_t used_bytes;     /* bytes of live payloads the backend holds */
    uint64_t file_bytes;     /* bytes on the filesystem (ExtentStore: incl. dead extents) */
    uint64_t objects;        /* live payloads */
    bool healthy;            /* false after an I/O error until a probe succeeds */
} cold_backend_stat_t;

typedef struct cold_backend_err {
    char msg[COLD_BACKEND_ERRMAX];
} cold_backend_err_t;

/* One read of a batch: the caller fills loc/len/checksum/buf; get_batch fills rc. */
typedef struct cold_read {
    cold_locator_t loc;
    uint64_t len;
    uint64_t checksum;
    void *buf;
    int rc;
} cold_read_t;

typedef struct cold_backend_ops {
    cold_backend_kind_t kind;
    const char *name; /* "localdir", "extent", "sim" */
    /* Store `len` bytes (the iovecs, in order) for operation `op`; idempotent by op. */
    int (*put)(void *be, const cold_opid_t *op, const struct iovec *iov, int iovcnt, uint64_t len,
               uint64_t checksum, cold_locator_t *out, cold_backend_err_t *err);
    /* Read and verify one payload into buf (len bytes). */
    int (*get)(void *be, const cold_locator_t *loc, uint64_t len, uint64_t checksum, void *buf,
               cold_backend_err_t *err);
    /* Read n payloads (a backend may issue them as one batch); returns 0 when the batch ran,
     * each item's verdict in its rc. */
    int (*get_batch)(void *be, cold_read_t *reads, size_t n, cold_backend_err_t *err);
    /* Delete or mark dead; idempotent (deleting an absent locator returns 0). */
    int (*del)(void *be, const cold_locator_t *loc, cold_backend_err_t *err);
    /* Recovery: the locator op's payload was written to, or KVMESH_ENOENT. */
    int (*find)(void *be, const cold_opid_t *op, cold_locator_t *out, cold_backend_err_t *err);
    int (*stat)(void *be, cold_backend_stat_t *out);
    /* One bounded step of background work (ExtentStore cleaning: at most budget_bytes moved);
     * returns the bytes of work done (0 = nothing to do) or a negative code. May be NULL. */
    int64_t (*maintain)(void *be, uint64_t budget_bytes, cold_backend_err_t *err);
    void (*close)(void *be);
} cold_backend_ops_t;

typedef struct cold_backend {
    const cold_backend_ops_t *ops;
    void *be;
} cold_backend_t;

#endif
