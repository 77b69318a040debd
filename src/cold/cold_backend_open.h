/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_backend_open.h — opening a cold backend (LocalDir or ExtentStore) on a device directory
 * from its configuration: kind, root directory, capacity. The opener validates the
 * configuration (the root exists, is a directory, is writable; the capacity is not 0 and not
 * more than the filesystem holds) and fails with a message that names the path, the errno and
 * what to do. The simulator's in-memory backend is opened by the simulator, not here.
 *
 * Ownership: cold_backend_open() fills *out with a backend the caller owns until
 * cold_backend_close(); the config's strings are copied. Not concurrent with other calls on the
 * same backend (cold_backend.h "Threading").
 */
#ifndef KVMESH_COLD_COLD_BACKEND_OPEN_H
#define KVMESH_COLD_COLD_BACKEND_OPEN_H

#include <stdbool.h>
#include <stdint.h>

#include "cold/cold_backend.h"

typedef enum cold_io_mode {
    COLD_IO_AUTO = 0,     /* io_uring when the kernel allows it, else buffered pread/pwrite */
    COLD_IO_URING = 1,    /* io_uring or fail to open */
    COLD_IO_BUFFERED = 2, /* buffered pread/pwrite only */
} cold_io_mode_t;

typedef struct cold_backend_config {
    cold_backend_kind_t kind; /* COLD_BACKEND_LOCALDIR or COLD_BACKEND_EXTENT */
    const char *root;         /* an existing, writable directory */
    uint64_t capacity_bytes;  /* 1 .. the filesystem's size */
    /* ExtentStore only (0 = default): segment file size and I/O mode. */
    uint64_t segment_bytes;
    cold_io_mode_t io_mode;
    /* The root must be on an NFS/NFS4 mount, read-write and hard (cold_nfs.h); checked after
     * the root itself. */
    bool require_nfs;
} cold_backend_config_t;

#define COLD_EXTENT_DEFAULT_SEGMENT_BYTES (256ull << 20)
#define COLD_EXTENT_MIN_SEGMENT_BYTES     (64ull << 10)

/* 0, or KVMESH_ECONFIG (bad configuration), KVMESH_ECORRUPT (unreadable store state),
 * KVMESH_EIO / KVMESH_ENOMEM; err says which and what to do. */
int cold_backend_open(const cold_backend_config_t *cfg, cold_backend_t *out,
                      cold_backend_err_t *err);
/* Closes and clears b (a cleared backend is a no-op). */
void cold_backend_close(cold_backend_t *b);

/* The I/O path the backend runs: "io_uring", "buffered" (ExtentStore) or "file" (LocalDir). */
const char *cold_backend_io_name(const cold_backend_t *b);

#endif
