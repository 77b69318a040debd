/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_impl.h — what the file backends (localdir.c, extent*.c) share and nothing else uses:
 * operator messages, errno mapping, whole-buffer positional I/O, directory fsync, the op-id
 * hex name and a small chained hash map keyed by cold operation id. Private to src/cold.
 *
 * Threading: the map is not synchronised (its owner holds its lock); the rest is reentrant.
 */
#ifndef KVMESH_COLD_BACKEND_IMPL_H
#define KVMESH_COLD_BACKEND_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cold/cold_backend.h"
#include "cold/cold_backend_open.h"

/* Fills err (may be NULL) with the formatted message, records it as the thread's last error,
 * and returns code. */
int cold_seterr(cold_backend_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* snprintf for paths and messages whose truncation the caller accepts (paths fit: the root
 * is validated to leave room); returns what snprintf returns. */
int cold_pathf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* KVMESH_ENOSPC for ENOSPC/EDQUOT, KVMESH_ENOENT for ENOENT, else KVMESH_EIO. */
int cold_errno_code(int e);
/* What an operator does about errno e on a cold device (a short sentence). */
const char *cold_errno_hint(int e);

/* Writes exactly the iovecs' bytes at off (retries short writes and EINTR). 0 or -errno. */
int cold_pwritev_all(int fd, const struct iovec *iov, int iovcnt, uint64_t off);
/* Reads exactly n bytes at off: 0, -errno, or 1 when the file ends first (truncated). */
int cold_pread_all(int fd, void *buf, size_t n, uint64_t off);
/* cold_pread_all in chunks of COLD_SUM_CHUNK, hashing each chunk (kvm_checksum's XXH3-64,
 * streamed) while the kernel reads the next ones ahead; *sum gets the checksum. */
#define COLD_SUM_CHUNK (1u << 20)
int cold_pread_sum(int fd, void *buf, size_t n, uint64_t off, uint64_t *sum);
/* fsync of a directory by path. 0 or -errno. */
int cold_fsync_dir(const char *path);
/* Creates dir if missing (and fsyncs its parent when it created it). 0 or -errno. */
int cold_mkdir_durable(const char *dir, const char *parent);

/* Lowercase hex of the id into out (33 bytes incl. NUL). */
void cold_opid_hex(const cold_opid_t *op, char out[2 * COLD_OPID_LEN + 1]);
/* Parses 32 hex digits; false when name is not exactly that. */
bool cold_opid_parse(const char *hex, size_t n, cold_opid_t *op);

/* Sum of iovec lengths (saturating). */
uint64_t cold_iov_len(const struct iovec *iov, int iovcnt);

/* ---- opid -> node map (intrusive, chained) ------------------------------------------------ */
typedef struct cold_map_node {
    struct cold_map_node *hnext;
    cold_opid_t op;
} cold_map_node_t;

typedef struct cold_map {
    cold_map_node_t **b;
    size_t nb; /* buckets, a power of two */
    size_t n;  /* nodes */
} cold_map_t;

int cold_map_init(cold_map_t *m);
void cold_map_free(cold_map_t *m); /* frees the buckets, not the nodes */
cold_map_node_t *cold_map_find(const cold_map_t *m, const cold_opid_t *op);
/* Inserts a node whose id is not in the map; grows the table (KVMESH_ENOMEM keeps it as is
 * and still inserts). Always succeeds. */
void cold_map_insert(cold_map_t *m, cold_map_node_t *node);
/* Unlinks and returns the node of op, or NULL. */
cold_map_node_t *cold_map_remove(cold_map_t *m, const cold_opid_t *op);
/* Iteration: calls fn on every node (fn must not change the map). */
void cold_map_each(const cold_map_t *m, void (*fn)(cold_map_node_t *n, void *arg), void *arg);

/* ---- the backends' openers (cold_backend.c validates the config first) ------------------- */
int cold_localdir_open(const cold_backend_config_t *cfg, cold_backend_t *out,
                       cold_backend_err_t *err);
int cold_extent_open(const cold_backend_config_t *cfg, cold_backend_t *out,
                     cold_backend_err_t *err);
const char *cold_extent_io_name(void *be);

#endif
