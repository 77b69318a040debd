/* SPDX-License-Identifier: Apache-2.0 */
/*
 * extent_impl.h — the ExtentStore's I/O engine (extent_io.c), private to src/cold: batches of
 * positional vector reads and writes run either through a small pool of io_uring rings (each
 * job split into chunks submitted together, a whole get_batch in one submission) or through
 * buffered preadv/pwritev. The mode is chosen at open; AUTO falls back to buffered when
 * io_uring setup fails (kernel without it, seccomp, io_uring_disabled).
 *
 * Threading: cold_io_run may be called from many threads; each call holds one ring of the pool
 * for its duration. Ownership: the job array and the iovecs are the caller's.
 */
#ifndef KVMESH_COLD_EXTENT_IMPL_H
#define KVMESH_COLD_EXTENT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cold/cold_backend_open.h"

typedef struct cold_io cold_io_t;

typedef struct cold_io_job {
    int fd;
    bool write;
    const struct iovec *iov;
    int iovcnt;
    uint64_t off;
    int rc; /* out: 0, -errno, or 1 when a read met the end of the file */
} cold_io_job_t;

/* 0, or KVMESH_EIO when mode is COLD_IO_URING and io_uring cannot be set up (why says why),
 * or KVMESH_ENOMEM. In AUTO mode a failed io_uring setup is reported in why and falls back. */
int cold_io_open(cold_io_mode_t mode, cold_io_t **out, char *why, size_t why_cap);
bool cold_io_is_uring(const cold_io_t *io);
void cold_io_run(cold_io_t *io, cold_io_job_t *jobs, size_t n);
void cold_io_close(cold_io_t *io);

/* Reads exactly the iovecs' bytes at off with preadv: 0, -errno, or 1 at end of file. */
int cold_preadv_all(int fd, const struct iovec *iov, int iovcnt, uint64_t off);

#endif
