/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_int.h — what the engine (transport.c) shares with the transports behind it
 * (transport_tcp.c, transport_shm.c): the vtable, the engine, segment handles, batches and the
 * completion path. Not for use outside src/net/transport*.
 *
 * Completion: a request is split by its transport into chunks (tcp stripes it across data
 * connections; shm uses one chunk). slot.chunks_left is set before the first chunk can
 * complete; every chunk calls tp_chunk_done exactly once; the last one fixes the request's
 * status (first error wins) and, when the batch has nothing pending, runs the callback.
 */
#ifndef KVMESH_NET_TRANSPORT_INT_H
#define KVMESH_NET_TRANSPORT_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "net/transport.h"

struct tp_addr {
    char host[64];
    char tcp_ip[64];
    uint16_t tcp_port; /* 0: no tcp server */
    char shm[64];      /* abstract unix socket name, "" when none */
};

/* Parses "kvt1;host=H;tcp=IP:PORT;shm=NAME" (fields in any order, tcp/shm optional). */
int tp_addr_parse(const char *s, struct tp_addr *out);

struct tp_ops {
    const char *name;
    int (*server_start)(struct tp_engine *e);
    void (*server_stop)(struct tp_engine *e);
    void (*client_stop)(struct tp_engine *e); /* closes peers, joins I/O threads */
    int (*open)(struct tp_engine *e, const struct tp_addr *a, struct tp_segment *s);
    void (*close)(struct tp_segment *s);
    /* Starts request idx (length/local already validated). 0: it will complete through
     * tp_chunk_done; error: nothing was started, the caller completes it with the error. */
    int (*submit)(struct tp_batch *b, unsigned idx, enum seg_reason *reason);
    /* Optional, used instead of submit when set: starts requests [first, first + n) of b
     * (validated, each to a segment of this transport, in submission order); every one of them
     * completes through tp_chunk_done, one that cannot be started with its error. One call for
     * a tp_submit's run of requests: tcp queues the whole run before it wakes an I/O thread, so
     * its first window carries as much of it as fits. */
    void (*submit_run)(struct tp_batch *b, unsigned first, unsigned n);
    /* Optional: ends the started requests of b at once (they complete with an error). */
    void (*abort)(struct tp_engine *e, struct tp_batch *b);
    /* Optional: false once s can no longer carry requests (its peer died); NULL = always. */
    bool (*usable)(const struct tp_segment *s);
};

extern const struct tp_ops tp_tcp_ops;
extern const struct tp_ops tp_shm_ops;
/* Caches a grant descriptor received from the owner by another channel (tp_segment_note_grant). */
void tp_shm_note_grant(struct tp_segment *s, const struct seg_grant *g);

struct tp_region {
    uintptr_t addr;
    size_t len;
};

struct tp_engine {
    struct tp_config cfg;
    struct seg_registry *reg;
    char addr[TP_ADDR_MAX];
    char host_id[64];
    unsigned nconns;
    uint64_t stripe_min;
    uint64_t chunk_max;
    int io_timeout_ms;
    uint32_t idle_timeout_ms; /* tcp: idle close of served connections; clients close at half */
    pthread_mutex_t mu;       /* regions */
    struct tp_region regions[TP_MAX_REGIONS];
    size_t nregions;
    /* transport-private state */
    struct tp_tcp_server *tcp_srv;
    struct tp_tcp_client *tcp_cli;
    struct tp_shm_server *shm_srv;
    struct tp_shm_client *shm_cli;
    char tcp_listen[80]; /* "IP:PORT" once the tcp server runs */
    char shm_name[64];   /* once the shm server runs */
    /* one spare batch of TP_BATCH_SPARE_CAP slots (tp_batch_new / tp_batch_free): a small
     * batch (a single op's reads or writes) reuses it instead of two callocs and frees */
    _Atomic(struct tp_batch *) batch_spare;
};

#define TP_BATCH_SPARE_CAP 8 /* batches up to this capacity get slots for this many */

#define TP_SHM_GRANT_CACHE   64
#define TP_SHM_GRANT_RECHECK (100ull * 1000000ull) /* re-ask the owner after 100 ms */
#define TP_SHM_COPY_STEP     (4u << 20)            /* owner liveness/cancel checked between steps */
#define TP_SHM_STREAM_MIN    (256u << 10) /* a write this large: streaming stores (core/copy.h) */

struct tp_segment {
    struct tp_engine *e;
    const struct tp_ops *ops;
    enum tp_kind kind;
    uint64_t seg_id;
    uint64_t token; /* the token the segment was opened with */
    char owner[SEG_OWNER_KEY_MAX];
    void *peer; /* transport's peer object */
    /* shm only */
    struct seg_remote *map;
    pthread_mutex_t mu;
    struct seg_grant grants[TP_SHM_GRANT_CACHE];
    uint64_t grant_fetched[TP_SHM_GRANT_CACHE];
    unsigned ngrants, grant_next;
};

struct tp_slot {
    struct tp_request r;
    int status; /* atomic: TP_STATUS_PENDING, 0, or error */
    uint8_t reason;
    int first_err;
    uint32_t chunks_left;
    uint64_t start_ns; /* CLOCK_MONOTONIC at submit (kvmesh_transport_duration_seconds) */
};

struct tp_batch {
    struct tp_engine *e;
    unsigned cap, n;
    unsigned slots_cap; /* slots allocated (>= cap) */
    struct tp_slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned pending;
    unsigned exchanges; /* atomic: grant exchanges with owners its submits made (shm) */
    unsigned cb_running;
    int canceled;         /* atomic */
    uint64_t deadline_ms; /* tp_batch_set_deadline; 0 = none */
    tp_batch_cb cb;
    void *cb_arg;
};

/* Sets the number of chunks request idx will complete with (before any can complete). */
void tp_slot_set_chunks(struct tp_batch *b, unsigned idx, uint32_t chunks);
/* One chunk of request idx finished with status (0 or error) and refusal reason. */
void tp_chunk_done(struct tp_batch *b, unsigned idx, int status, uint8_t reason);
/* tp_chunk_done for n chunks of one batch under one lock (a window's chunks): idx, status and
 * reason per chunk. *now_ns (0 on the first call) holds the completion time once read, so
 * chunks completed together cost one clock read for the duration metric. */
void tp_chunks_done(struct tp_batch *b, const unsigned *idx, const int *status,
                    const uint8_t *reason, unsigned n, uint64_t *now_ns);
int tp_batch_canceled(const struct tp_batch *b);
/* The batch's deadline (tp_batch_set_deadline), 0 = none. */
uint64_t tp_batch_deadline(struct tp_batch *b);

/* Socket helpers shared by both transports: full-length I/O that retries EINTR and partial
 * transfers. Return 0, KVMESH_ECONN (peer closed / reset) or KVMESH_ETIMEDOUT. */
int tp_io_send_all(int fd, struct iovec *iov, int iovcnt);
int tp_io_recv_all(int fd, void *buf, size_t len);
/* The same with an overall deadline (tp_io_now_ms() clock; 0 = none): a peer that trickles
 * bytes so that no single operation times out still fails with KVMESH_ETIMEDOUT, at most one
 * socket timeout after the deadline. */
int tp_io_send_all_by(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms);
int tp_io_recv_all_by(int fd, void *buf, size_t len, uint64_t deadline_ms);
uint64_t tp_io_now_ms(void);
void tp_io_set_timeout(int fd, int timeout_ms);

#endif
