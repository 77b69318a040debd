/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_transport.h — a simulated data plane for the deterministic simulator: the same shape as
 * src/net/transport.h (register memory, open a remote segment, submit a batch of READ/WRITE
 * requests, per-request status, a completion callback, cancel) and the same owner-side access
 * checks as src/net/seg.h, between the simulated nodes of one world (docs/simulator.md, section
 * "Simulated data plane").
 *
 * The data plane of a world (sim_tp_t) owns, per node: its segments (plain heap buffers, zeroed
 * at creation, ids (epoch << 32 | counter) with a random epoch per node incarnation), its grants
 * (token -> segment, range, rights, expiry on the owner's own simulated clock), and its
 * registered local regions. A request travels like a message of the simulated network and
 * completes later on the virtual clock:
 *
 *   submit --leg 1 (delay)--> owner: checks, copy time --leg 2 (delay)--> client: status, callback
 *
 * Each leg's delay is drawn from the world's current sim_net_t (uniform [min, max] plus the
 * reorder extra); a leg "dropped" by drop_p is retransmitted after knobs.retrans_ns (at most
 * SIM_TP_RETRANS_MAX times: the data plane is a reliable stream); a leg over a cut link (a
 * partition, sim_block, sim_isolate) waits and retries every retrans_ns. Every request has a
 * deadline (submit + knobs.timeout_ns on the virtual clock) and completes exactly once, at the
 * latest at that deadline (KVMESH_ETIMEDOUT).
 *
 * Failures (all per request, deterministic from the seed):
 *   - refusal by the owner, with the seg_reason of the real owner (seg_check's order: segment,
 *     token, grant's segment, expiry, rights, range, bounds), no byte moved;
 *   - knobs.fail_p: the connection breaks before any payload moved: KVMESH_ECONN;
 *   - knobs.torn_p: the connection breaks mid-payload: KVMESH_ECONN and a strict prefix of the
 *     bytes moved (into the segment for a WRITE, into the local buffer for a READ);
 *   - owner crashed or restarted since the segment was opened: KVMESH_ECONN (the reset travels
 *     back as leg 2); an owner crash fails its pending requests at once the same way, those it
 *     is copying and those still on their way to it;
 *   - client crashed: its completions are dropped (statuses stay pending, no callback); a WRITE
 *     still being received by the owner lands as a random prefix, as when a connection dies.
 *   - deadline reached while the owner is copying a WRITE: a random prefix lands (the client gave
 *     up and closed the connection): a failed WRITE leaves its range indeterminate.
 *
 * Crash integration: call sim_tp_node_down(tp, node) from the scenario's stop hook (it frees the
 * node's segments and grants and fails the requests its owner side was serving at once); without
 * it the transport notices the new incarnation lazily, at the next event touching the node.
 *
 * Ownership: sim_tp_new() returns an object freed with sim_tp_free() after the world has been
 * freed (sim_finish / sim_free; its stop hooks may still call sim_tp_node_down). Segment memory is
 * owned by the transport: a base pointer stays valid until sim_tp_seg_destroy() or the owner's
 * crash. Batches are owned by the caller (sim_tp_batch_free); a batch left over is freed by
 * sim_tp_free. Registered regions and local buffers belong to the caller and must stay valid while
 * a request naming them is pending on a live client. Segment handles (sim_tp_seg_t) are plain
 * values: nothing to close.
 *
 * Threading: the simulator's single thread. Callbacks run as world events of the simulator, or
 * inside sim_tp_submit (requests refused at once, like the real engine) and sim_tp_cancel.
 */
#ifndef KVMESH_SIM_TRANSPORT_H
#define KVMESH_SIM_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/seg.h"
#include "net/transport.h"
#include "sim.h"

#define SIM_TP_MAX_SEGS    64          /* segments per node */
#define SIM_TP_MAX_GRANTS  4096        /* live grants per node (expired ones swept when full) */
#define SIM_TP_MAX_SEG     (64u << 20) /* one simulated segment: 64 MiB */
#define SIM_TP_MAX_BATCHES 1024        /* live batches per node */
#define SIM_TP_RETRANS_MAX 3           /* retransmissions of one leg after drop_p losses */

typedef struct sim_tp sim_tp_t;
typedef struct sim_tp_batch sim_tp_batch_t;

typedef struct sim_tp_knobs {
    double fail_p;          /* connection breaks before any payload moved (KVMESH_ECONN) */
    double torn_p;          /* connection breaks mid-payload: strict prefix moved, ECONN */
    uint64_t timeout_ns;    /* deadline of every request after its submit (0 = 1 s) */
    uint64_t retrans_ns;    /* retransmission / retry interval of a leg (0 = 50 ms) */
    uint64_t bytes_per_sec; /* owner-side copy speed (0 = no copy time) */
    /* Test-only faults of the transport itself (to prove a checker catches them): */
    bool bug_no_range_check;  /* the owner skips the grant-range check (bounds still hold) */
    bool bug_no_expiry_check; /* the owner ignores grant expiry */
    bool bug_torn_ok;         /* a torn transfer reports success */
    bool bug_no_deadline;     /* no deadline: a request may hang past timeout_ns */
    bool bug_cancel_lands;    /* a canceled request still reaches the owner and runs */
} sim_tp_knobs_t;

/* Defaults: no injected failures, 1 s deadline, 50 ms retransmission, no copy time. */
void sim_tp_knobs_init(sim_tp_knobs_t *k);

/* Counters of one data plane (for scenario logs and tests). */
typedef struct sim_tp_stats {
    uint64_t submitted, ok, refused, conn_failed, timed_out, canceled, torn, invalid;
    uint64_t dropped_completions;       /* completions for a crashed client or a freed batch */
    uint64_t owner_lost;                /* requests failed by their owner's crash mid-copy */
    uint64_t client_lost_writes;        /* WRITEs whose client died or gave up mid-payload */
    uint64_t bytes_written, bytes_read; /* bytes moved by successful requests */
} sim_tp_stats_t;

/* Creates the data plane of a world. Draws one value from the world stream (sim_rand_u64) to
 * seed its own random stream, so transport activity does not shift the scenario's draws. knobs
 * may be NULL (defaults). Never NULL (out of memory is fatal in the simulator). */
sim_tp_t *sim_tp_new(sim_t *sim, const sim_tp_knobs_t *knobs);
/* Frees everything (call after the world is freed). NULL is a no-op. */
void sim_tp_free(sim_tp_t *tp);
void sim_tp_set_knobs(sim_tp_t *tp, const sim_tp_knobs_t *knobs);
const sim_tp_knobs_t *sim_tp_get_knobs(const sim_tp_t *tp);
void sim_tp_get_stats(const sim_tp_t *tp, sim_tp_stats_t *out);

/* Crash integration: frees node's segments, grants and regions; fails (KVMESH_ECONN) the requests
 * its owner side was serving; drops completions of the requests it submitted. For stop hooks. */
void sim_tp_node_down(sim_tp_t *tp, uint32_t node);

/* ---- owner side (node must be UP) ------------------------------------------------------------ */

/* Creates a zeroed segment of `size` bytes (1..SIM_TP_MAX_SEG) on node. *base (may be NULL) is
 * the owner's own view of its memory, valid until destroy or the node's crash. */
int sim_tp_seg_create(sim_tp_t *tp, uint32_t node, uint64_t size, uint64_t *seg_id, uint8_t **base);
/* Removes a segment and revokes its grants (KVMESH_ENOENT if unknown). A request the owner is
 * copying meanwhile completes (the real owner keeps a pinned segment mapped). */
int sim_tp_seg_destroy(sim_tp_t *tp, uint32_t node, uint64_t seg_id);
/* The live segment's memory and size, or KVMESH_ENOENT. */
int sim_tp_seg_mem(sim_tp_t *tp, uint32_t node, uint64_t seg_id, uint8_t **base, uint64_t *size);

/* Like seg_grant: [offset, offset+length) inside the segment, rights SEG_READ|SEG_WRITE, expiry
 * = the owner's env_now_ns() + ttl_ns (0 = never), a fresh non-zero token from the owner's
 * random stream. Errors: KVMESH_ENOENT, KVMESH_EINVAL, KVMESH_ERANGE, KVMESH_ENOSPC. */
int sim_tp_grant(sim_tp_t *tp, uint32_t node, uint64_t seg_id, uint64_t offset, uint64_t length,
                 uint32_t rights, uint64_t ttl_ns, struct seg_grant *out);
int sim_tp_revoke(sim_tp_t *tp, uint32_t node, uint64_t token); /* KVMESH_ENOENT if unknown */
size_t sim_tp_grant_count(sim_tp_t *tp, uint32_t node);

/* ---- client side (node must be UP) ----------------------------------------------------------- */

/* Registers [addr, addr+len) of node's memory as a transfer source/destination (at most
 * TP_MAX_REGIONS per node; the node's own segments count as registered). Dropped at a crash. */
int sim_tp_register_memory(sim_tp_t *tp, uint32_t node, void *addr, size_t len);
int sim_tp_unregister_memory(sim_tp_t *tp, uint32_t node, void *addr);

/* A handle on a remote segment: plain data. It is bound to the owner's incarnation at open time
 * (like a connection to the owner process): after the owner crashes, requests through it fail
 * with KVMESH_ECONN; open a new one. token is kept for reference (the real tcp open ignores it). */
typedef struct sim_tp_seg {
    uint32_t client, owner;
    uint32_t owner_inc;
    uint64_t seg_id;
    uint64_t token;
} sim_tp_seg_t;

int sim_tp_open_segment(sim_tp_t *tp, uint32_t client, uint32_t owner, uint64_t seg_id,
                        uint64_t token, sim_tp_seg_t *out);

typedef struct sim_tp_req {
    enum tp_op op;               /* TP_READ: remote -> local; TP_WRITE: local -> remote */
    void *local;                 /* registered memory of the client */
    uint64_t length;             /* 1 .. SIM_TP_MAX_SEG */
    const sim_tp_seg_t *segment; /* copied at submit */
    uint64_t remote_offset;
    uint64_t token;
} sim_tp_req_t;

typedef void (*sim_tp_batch_cb)(sim_tp_batch_t *b, void *arg);

/* A batch of up to capacity (1..TP_MAX_BATCH) requests of one client node. */
int sim_tp_batch_new(sim_tp_t *tp, uint32_t client, unsigned capacity, sim_tp_batch_t **out);
/* Detaches the pending requests (their completions are dropped; owner-side effects still happen)
 * and frees. Not from the batch's own callback. NULL is a no-op. */
void sim_tp_batch_free(sim_tp_batch_t *b);
void sim_tp_batch_set_callback(sim_tp_batch_t *b, sim_tp_batch_cb cb, void *arg);
/* Appends n requests, as tp_submit: a capacity overflow returns KVMESH_ETOOBIG and submits
 * nothing; a request that cannot start (bad op or length, handle of another client, unregistered
 * local memory: KVMESH_EINVAL; canceled batch: KVMESH_ECANCELED) completes at once. The callback
 * runs once each time nothing of the batch is pending. */
int sim_tp_submit(sim_tp_batch_t *b, const sim_tp_req_t *reqs, unsigned n);
unsigned sim_tp_batch_count(const sim_tp_batch_t *b);
unsigned sim_tp_batch_pending(const sim_tp_batch_t *b);
/* TP_STATUS_PENDING, 0, or a negative KVMESH_E*; *reason (may be NULL): the owner's refusal. */
int sim_tp_status(const sim_tp_batch_t *b, unsigned i, enum seg_reason *reason);
/* Virtual time request i completed (0 while pending) and its deadline. */
uint64_t sim_tp_done_ns(const sim_tp_batch_t *b, unsigned i);
uint64_t sim_tp_deadline_ns(const sim_tp_batch_t *b, unsigned i);
/* First failing request's status, or 0. */
int sim_tp_batch_result(const sim_tp_batch_t *b);
/* Requests that have not reached the owner yet complete with KVMESH_ECANCELED now (the owner
 * never sees them); the others run to completion. Later submits complete with ECANCELED. */
void sim_tp_cancel(sim_tp_batch_t *b);

#endif
