/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport.h — the data-plane transport interface (shaped like Mooncake Transfer Engine's C
 * API: register memory, open a remote segment, submit a batch of READ/WRITE requests, poll
 * status or get a completion callback, cancel) and the engine that chooses a transport.
 *
 * One engine per runtime. It serves the runtime's own segments (a TCP data server and a unix
 * socket for same-host peers) and opens segments of other runtimes. Transports behind it:
 *   - tcp (transport_tcp.c): N data connections per peer, one I/O thread per connection;
 *     payload moves between sockets and registered memory directly;
 *   - shm (transport_shm.c): same host only; the owner passes the segment's memfd over a unix
 *     socket (SCM_RIGHTS); the client maps it once and READ/WRITE are memcpy's done by the
 *     submitting thread, with no work on the owner.
 * Choice per opened segment: config kind TP_AUTO picks shm when the owner's address carries the
 * same host id (boot id), tcp otherwise; TP_TCP / TP_SHM force one.
 *
 * Ownership: the engine borrows the seg_registry (it must outlive the engine). Segment handles
 * and batches are owned by the caller and freed with tp_close_segment / tp_batch_free before
 * tp_engine_free. Local buffers named in requests must stay valid until the request completes.
 *
 * Threading: every function may be called from any thread. Completion callbacks run on a
 * transport I/O thread (tcp) or on the submitting thread (shm): keep them short, never block,
 * never call tp_batch_free from them.
 */
#ifndef KVMESH_NET_TRANSPORT_H
#define KVMESH_NET_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/seg.h"

struct kvm_sum; /* core/hash.h */

#define TP_ADDR_MAX        256          /* engine address string, with NUL */
#define TP_MAX_BATCH       1024         /* requests in one batch */
#define TP_MAX_CONNS       16           /* data connections per tcp peer */
#define TP_MAX_PEERS       256          /* peers an engine connects to (tcp and shm each) */
#define TP_MAX_REQ_LEN     (1ull << 32) /* one request: 4 GiB */
#define TP_MAX_REGIONS     256          /* registered local memory regions */
#define TP_MAX_SERVER_CONN 256          /* accepted data connections served at once */
#define TP_STATUS_PENDING  1            /* request status while not complete */

enum tp_kind { TP_AUTO = 0, TP_TCP = 1, TP_SHM = 2 };
enum tp_op { TP_READ = 1, TP_WRITE = 2 }; /* READ: remote -> local; WRITE: local -> remote */

struct tp_config {
    enum tp_kind kind;       /* how opened segments are reached (TP_AUTO by default) */
    const char *listen_host; /* tcp data server address; NULL = "127.0.0.1" */
    uint16_t listen_port;    /* 0 = ephemeral */
    bool no_server;          /* client-only engine: serve no segments */
    unsigned conns_per_peer; /* tcp data connections per peer; 0 = sized to the machine */
    uint64_t stripe_min;     /* requests above this are split across connections; 0 = 256 KiB */
    uint64_t chunk_max;      /* largest piece on one connection at a time; 0 = 512 KiB */
    int io_timeout_ms;       /* per-socket-operation timeout; 0 = 10000 */
    const char *host_id;     /* override of the host identity (tests); NULL = boot id */
    struct obs_registry *metrics; /* borrowed, outlives the engine; NULL: nothing counted */
    /* tcp: a served connection with no request for this long is closed, and a client peer
     * whose connections carried nothing for half of it is closed by the client first (its
     * handles report !tp_segment_usable); 0 = never */
    uint32_t idle_timeout_ms;
};

struct tp_engine;
struct tp_segment;
struct tp_batch;

struct tp_request {
    enum tp_op op;
    void *local;                /* registered local memory (tp_register_memory or a segment) */
    uint64_t length;            /* 1 .. TP_MAX_REQ_LEN */
    struct tp_segment *segment; /* opened remote segment */
    uint64_t remote_offset;
    uint64_t token; /* grant token issued by the owner for this range */
    /* Optional (NULL: none), borrowed until the batch completed: a checksum the request's local
     * bytes are folded into as the transport moves them, where tp_segment_sums says it does;
     * ignored by the other transports. Requests sharing one sum are folded in submission order
     * (never written by two transports at once: at most one remote replica carries it). */
    struct kvm_sum *sum;
};

/* Called once when every request submitted so far in the batch has completed. */
typedef void (*tp_batch_cb)(struct tp_batch *b, void *arg);

/* Creates an engine (starts its servers unless cfg->no_server). */
int tp_engine_new(const struct tp_config *cfg, struct seg_registry *reg, struct tp_engine **out);
/* Stops servers and I/O threads; every segment handle and batch must be freed first. */
void tp_engine_free(struct tp_engine *e);
/* The engine's address for peers ("kvt1;host=...;tcp=IP:PORT;shm=NAME"). Static per engine. */
const char *tp_engine_address(const struct tp_engine *e);
struct seg_registry *tp_engine_registry(const struct tp_engine *e);

/* Registers [addr, addr+len) as a local source/destination of transfers. Local segments of the
 * engine's registry are registered implicitly. */
int tp_register_memory(struct tp_engine *e, void *addr, size_t len);
int tp_unregister_memory(struct tp_engine *e, void *addr);

/*
 * Opens segment seg_id of the runtime at owner_addr. token: a grant on that segment (the shm
 * transport needs it to be handed the segment's fd; tcp ignores it). *out is owned by the
 * caller. Remote mappings are made once per process and kept until the registry is freed.
 */
int tp_open_segment(struct tp_engine *e, const char *owner_addr, uint64_t seg_id, uint64_t token,
                    struct tp_segment **out);
void tp_close_segment(struct tp_segment *s);
enum tp_kind tp_segment_kind(const struct tp_segment *s);
/* Hands s a grant descriptor the caller received from the segment's owner over another channel
 * (the store's reservation reply carries the write grant of the reserved range: seg_id, offset,
 * length, rights, a conservative expiry and the token), so the first request with its token
 * needs no grant exchange with the owner. shm caches it like a grant it asked for (re-asked after
 * TP_SHM_GRANT_RECHECK; expiry checked on every request); tcp ignores it (its owner checks every
 * request). A descriptor for another segment, or with token 0, is ignored. */
void tp_segment_note_grant(struct tp_segment *s, const struct seg_grant *g);

/* A batch holds up to `capacity` (<= TP_MAX_BATCH) requests across one or more submits. */
int tp_batch_new(struct tp_engine *e, unsigned capacity, struct tp_batch **out);
/* Cancels what is not started and waits for the rest, then frees. */
void tp_batch_free(struct tp_batch *b);
void tp_batch_set_callback(struct tp_batch *b, tp_batch_cb cb, void *arg);
/*
 * Gives b the deadline of the call it serves (env_clock_mono_ms() scale; 0 = none, the default);
 * set before the first tp_submit. With one, a batch of capacity 1 whose tcp request fits one
 * chunk and finds an idle data connection runs the exchange on the submitting thread: tp_submit
 * returns after the request completed (its callback ran, on this thread), the exchange bounded
 * by the deadline (past it: KVMESH_ETIMEDOUT and the connection is shut down, as tp_batch_abort
 * would). A caller that only waits for the batch saves the I/O thread's two wake-ups per
 * exchange (docs/transport.md "Threading"). Without a deadline nothing changes.
 */
void tp_batch_set_deadline(struct tp_batch *b, uint64_t deadline_ms);
/*
 * Appends n requests (indexes are assigned in order from the batch's count). Validation errors
 * of the whole call (capacity) return an error and submit nothing; a request that cannot be
 * started (unregistered local memory, dead peer, bad length) completes at once with its error.
 */
int tp_submit(struct tp_batch *b, const struct tp_request *reqs, unsigned n);
unsigned tp_batch_count(const struct tp_batch *b);
/* Round trips to owners that submitting b's requests made besides the transfers themselves: shm
 * asks the owner for a grant descriptor it has not cached (0 when every token's grant was cached
 * or handed over with tp_segment_note_grant); tcp 0. */
unsigned tp_batch_exchanges(const struct tp_batch *b);
/* Status of request i: TP_STATUS_PENDING, 0 done, or a negative KVMESH_E*. reason (may be NULL)
 * receives the seg_reason of an access refusal (SEG_OK otherwise). */
int tp_status(const struct tp_batch *b, unsigned i, enum seg_reason *reason);
/* Waits until every submitted request completed. 0, or KVMESH_ETIMEDOUT (timeout_ms < 0:
 * forever). Returns 0 even when requests failed: look at tp_status. */
int tp_batch_wait(struct tp_batch *b, int timeout_ms);
/* First failing request's status, or 0 (only meaningful after tp_batch_wait). */
int tp_batch_result(const struct tp_batch *b);
/* Requests not yet started complete with KVMESH_ECANCELED; started ones run to completion. */
void tp_cancel(struct tp_batch *b);
/* tp_cancel, and the started requests end at once too (tcp: the connections carrying them are
 * shut down, so their peer is dead for new requests): after a missed deadline, tp_batch_free
 * then returns without waiting on a stalled or trickling peer. */
void tp_batch_abort(struct tp_batch *b);
/* False once the segment handle cannot carry requests any more (its peer connection died):
 * open the segment again for new requests. */
bool tp_segment_usable(const struct tp_segment *s);
/* True when the transport folds the bytes of nreq requests to s that share one tp_request.sum
 * (submitted together, in order) into it, each block hashed right after it was copied, received
 * or sent, while in cache. The sum holds all of their bytes once the batch completed with every
 * one of them successful; shm copies in tp_submit itself (any nreq; the sum is complete when
 * tp_submit returns), tcp folds in its I/O threads (nreq 1: a request's chunks land in
 * parallel and are folded in order, one request at a time). */
bool tp_segment_sums(const struct tp_segment *s, unsigned nreq);

const char *tp_kind_name(enum tp_kind k);

/* shm: a peer found alive is not polled again before a request's first step for this long
 * (1 ms): single small requests in a row poll about once per ms, not once per request
 * (transport_shm.c). */
#define TP_SHM_ALIVE_RECHECK_NS (1000ull * 1000ull)

/* Test hook (shm): sets how long a peer found alive is not polled again before a request's first
 * step (0: the default, 1 ms: TP_SHM_ALIVE_RECHECK_NS) and returns the number of liveness polls
 * made so far. */
uint64_t tp_shm_test_alive_recheck(uint64_t ns);

#endif
