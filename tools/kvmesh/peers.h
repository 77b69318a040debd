/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peers.h — the benchmark's peers: redis-server and memcached started on free loopback ports
 * (child processes stopped by pid), and minimal blocking clients for them: hiredis (pipelined
 * for batches) and the memcached text protocol over a plain socket (pipelined sets, get_multi).
 *
 * Ownership: peer_start allocates the process handle, peer_stop kills (by pid), reaps and frees
 * it; clients are opened and closed by the caller. Values read are copied into caller buffers
 * (the same contract as kvmesh_get_into). Single-threaded.
 */
#ifndef KVMESH_TOOLS_PEERS_H
#define KVMESH_TOOLS_PEERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PEER_READY_TIMEOUT_MS 10000
#define PEER_STOP_TIMEOUT_MS  3000
#define PEER_MC_MEMORY_MB     2048  /* memcached -m */
#define PEER_MC_ITEM_MAX      "64m" /* memcached -I (values up to 16 MiB and more) */
#define PEER_MC_KEYS_PER_GET  32    /* keys per memcached get_multi line */

enum peer_kind { PEER_REDIS, PEER_MEMCACHED };

typedef struct peer_proc {
    enum peer_kind kind;
    pid_t pid;
    uint16_t port;
    char dir[128]; /* redis working directory (removed at stop) */
} peer_proc_t;

/* Starts the server on a free 127.0.0.1 port and waits until it accepts connections. 0, or -1
 * with a message in err (cap bytes). */
int peer_start(enum peer_kind kind, peer_proc_t **out, char *err, size_t err_cap);
void peer_stop(peer_proc_t *p);

/* A generic client over either peer. */
typedef struct peer_client peer_client_t;
typedef struct peer_item {
    const char *key;
    size_t key_len;
    void *buf;      /* put: value; get: destination */
    size_t len;     /* put: value length; get: capacity */
    size_t out_len; /* get: value length */
    int rc;         /* 0, or -1 (miss or error) */
} peer_item_t;

int peer_connect(const peer_proc_t *p, peer_client_t **out, char *err, size_t err_cap);
void peer_close(peer_client_t *c);
/* Each returns 0 when every item succeeded, -1 otherwise (per-item rc set for batches). */
int peer_put(peer_client_t *c, const char *key, size_t klen, const void *val, size_t len);
int peer_get(peer_client_t *c, const char *key, size_t klen, void *buf, size_t cap,
             size_t *out_len);
int peer_batch_put(peer_client_t *c, peer_item_t *items, size_t n);
int peer_batch_get(peer_client_t *c, peer_item_t *items, size_t n);
/* Removes everything (FLUSHALL / flush_all). */
int peer_flush(peer_client_t *c);
/* Redis only: an integer field of `INFO <section>` (e.g. "memory", "used_memory"). */
int peer_redis_info_u64(peer_client_t *c, const char *section, const char *field, uint64_t *out);
/* Last error text of the client. */
const char *peer_error(const peer_client_t *c);

#endif
