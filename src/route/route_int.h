/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_int.h — internals of the EmbeddedWrh route service shared by its modules:
 *   route_svc.c     service glue: policy bootstrap, runtime lease, membership, message
 *                   dispatch, outgoing calls with retransmission, metadata call tracking;
 *   route_auth.c    shard authority state machine (acquire, transfer, activate, serve, resign)
 *                   and the server side of every peer request;
 *   route_client.c  client side: lookup, CAS, owner enumeration, shard view refresh;
 *   route_rec.c     the shard-authority record and cluster policy codecs;
 *   route_msg.c     peer message codec;  route_table.c  per-shard route map + owner index;
 *   route_claim.c   primary side of a CAS with a claim (the tenant quota's claim hook).
 * docs/protocol.md explains the protocol. Everything runs on the env's loop thread.
 */
#ifndef KVMESH_ROUTE_ROUTE_INT_H
#define KVMESH_ROUTE_ROUTE_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "route/route.h"
#include "route/route_msg.h"
#include "route/route_table.h"

/* A state-transfer source absent from the membership counts as gone (its state lost) only after
 * this many shard leases without any source listed: a stalled runtime whose record lapsed with
 * its lease comes back with the same epoch and its state, and must be waited for. */
#define ROUTE_SRC_GONE_LEASES 3

/* ---- named limits and timing (docs/protocol.md "Timing") ------------------------------------ */
#define ROUTE_DEFAULT_LEASE_MS    3000  /* runtime metadata lease ttl */
#define ROUTE_DEFAULT_TIMEOUT_MS  2000  /* one lookup/CAS end to end */
#define ROUTE_CLOCK_DRIFT_PPM     20000 /* assumed bound on any local clock's rate error (2%) */
#define ROUTE_LEASE_MARGIN_NS     (20ull * 1000000) /* subtracted from every local deadline */
#define ROUTE_KEEPALIVE_DIV       4                 /* runtime lease keepalive every lease/4 */
#define ROUTE_GRANT_MAX_DIV       2 /* a secondary's read lease is at most lease/2 */
#define ROUTE_GRANT_RENEW_DIV     6 /* secondaries renew every lease/6 */
#define ROUTE_TICK_DIV            8 /* authority housekeeping every lease/8 */
#define ROUTE_RETRY_NS            (40ull * 1000000)  /* retransmit idempotent requests */
#define ROUTE_ATTEMPT_NS          (150ull * 1000000) /* one read / owner attempt */
#define ROUTE_PEER_CALL_NS        (400ull * 1000000) /* mirror/fetch/install/grant call */
#define ROUTE_META_TIMEOUT_MS     1000
#define ROUTE_MAX_CALLS           8192 /* outgoing peer calls in flight */
#define ROUTE_CALL_SPARE          512  /* finished call records a service keeps for reuse */
#define ROUTE_OP_SPARE            256  /* finished lookup/CAS ops a service keeps for reuse */
#define ROUTE_MAX_OPS             4096 /* client operations in flight */
#define ROUTE_MAX_SHARD_STEPS     64   /* shards advanced per tick */
#define ROUTE_CLIENT_MAX_ATTEMPTS 16
#define ROUTE_REC_MAX_LEN         4096
#define ROUTE_START_ATTEMPTS      20   /* transient metadata failures tolerated at start */
#define ROUTE_PURGE_BUDGET        512  /* finalized tombstones purged per tick */
#define ROUTE_PURGE_MARGIN_MS     1000 /* past retain_until_ms before a purge (wall clock) */

/* route.h's ROUTE_CAS_LATE_MS: how long a CAS call sent at its operation's deadline waits */
_Static_assert(ROUTE_PEER_CALL_NS + ROUTE_ATTEMPT_NS == ROUTE_CAS_LATE_MS * 1000000ull,
               "ROUTE_CAS_LATE_MS must equal ROUTE_PEER_CALL_NS + ROUTE_ATTEMPT_NS");

enum route_rec_state { ROUTE_REC_TRANSFERRING = 1, ROUTE_REC_ACTIVE = 2, ROUTE_REC_RESIGNED = 3 };

/* The shard-authority record kept in metadata at ks_shard_key (unleased, so the token in it
 * is monotonic; the lease that makes it valid is the primary's runtime lease `lease`). */
typedef struct route_rec {
    uint64_t generation;
    uint64_t token;
    uint8_t state;
    kvm_runtime_t primary;
    env_node_t primary_node;
    int64_t lease;
    uint32_t n_set;
    route_msg_member_t set[ROUTE_MSG_MAX_SET];
    uint32_t n_src; /* the last set that became ACTIVE: the state-transfer source */
    route_msg_member_t src[ROUTE_MSG_MAX_SET];
} route_rec_t;

int route_rec_encode(const route_rec_t *r, uint8_t *buf, size_t cap, size_t *out_len);
int route_rec_decode(const uint8_t *buf, size_t len, route_rec_t *out);
int route_policy_encode(const route_policy_t *p, uint8_t *buf, size_t cap, size_t *out_len);
int route_policy_decode(const uint8_t *buf, size_t len, route_policy_t *out);
/* 0 when equal; KVMESH_EINCOMPAT naming the first differing field otherwise (both modes). */
int route_policy_diff(const route_policy_t *want, const route_policy_t *have);

/* Authority (primary) state machine of one shard on one runtime:
 *
 *            tick: I am the WRH-first live member
 *   IDLE ---------------------------------------> READ_REC --(lease alive, not mine)--> IDLE
 *    ^  ^                                            |
 *    |  |                       record absent / RESIGNED / lease expired / lease mine
 *    |  |                                            v
 *    |  +--(compare failed)---------------------- ACQUIRE (txn: token+1, TRANSFERRING)
 *    |  +--(no source answers, one is a member)-- FETCH   (pages from one previous authority;
 *    |  |                                           every source gone: INSTALL empty state)
 *    |  +--(a member did not ack)---------------- INSTALL (pages to every new member)
 *    |  +--(compare failed)---------------------- ACTIVATE (txn: ACTIVE, src = set)
 *    |                                               |
 *    |         lease lost                            v
 *    +<------------------------------------------ ACTIVE (serves CAS, reads, grants)
 *    |                                               | desired set/primary changed
 *    |                                               v
 *    +<--(txn RESIGNED, or re-acquire)----------- RESIGN (no serving; waits out its grants)
 */
enum route_pstate {
    RP_IDLE,
    RP_READ_REC,
    RP_LEASE_CHECK,
    RP_ACQUIRE,
    RP_FETCH,
    RP_INSTALL,
    RP_ACTIVATE,
    RP_ACTIVE,
    RP_RESIGN,
    RP_RESIGN_TXN,
};

typedef struct route_install_peer {
    route_msg_member_t m;
    kvm_ident_t after; /* last ident sent (owned) */
    bool begun, done, busy;
} route_install_peer_t;

typedef struct route_shard {
    uint32_t id;
    /* --- membership in an authority set (any role) --- */
    uint64_t m_gen, m_token; /* highest token adopted (fence) and its generation */
    kvm_runtime_t m_primary;
    env_node_t m_primary_node;
    uint32_t m_n_set;
    route_msg_member_t m_set[ROUTE_MSG_MAX_SET];
    bool m_installed;         /* holds the complete state of m_token */
    uint64_t m_read_deadline; /* local ns: may serve reads until then */
    uint64_t m_grant_sent_ns; /* secondary: send time of the grant request in flight */
    bool m_grant_busy;
    uint64_t m_next_grant_ns;
    route_table_t *table;   /* live routes */
    route_table_t *staging; /* an install in progress (for m_staging_token) */
    uint64_t m_staging_token;
    /* --- primary role --- */
    enum route_pstate ps;
    bool meta_busy;
    route_rec_t rec;     /* last record read or written */
    int64_t rec_mod_rev; /* 0 = absent */
    uint64_t seq;
    uint64_t max_grant_until; /* local ns: every read lease this primary granted ends by then */
    uint64_t next_try_ns;
    uint32_t fetch_src; /* index into rec.src being fetched */
    kvm_ident_t fetch_after;
    bool fetch_started;
    /* local ns since which no member of rec.src was a live member (0 = one was, or not looked):
     * an absent source counts as gone only ROUTE_SRC_GONE_LEASES shard leases after it */
    uint64_t src_absent_since_ns;
    uint64_t src_absent_set;      /* hash of the rec.src set src_absent_since_ns belongs to */
    route_table_t *xfer;          /* state being transferred */
    route_rec_t xfer_rec_pending; /* the record an acquisition txn is writing */
    route_install_peer_t inst[ROUTE_MSG_MAX_SET];
    uint32_t n_inst;
    uint32_t mirrors_inflight;
    /* --- client view --- */
    bool v_valid, v_refreshing;
    route_rec_t view;
    uint64_t v_next_refresh_ns;
} route_shard_t;

/* An outgoing peer call awaiting a reply. */
typedef struct route_call route_call_t;
typedef void (*route_call_fn)(route_svc_t *svc, route_call_t *c, const route_msg_t *resp);
struct route_call {
    route_call_t *next, *prev;
    uint64_t req_id;
    env_node_t node;
    uint16_t resp_kind;
    route_call_fn fn; /* resp NULL = deadline passed */
    void *ctx;
    uint64_t u64; /* caller data */
    uint32_t idx; /* caller data */
    uint8_t *buf; /* encoded request, for retransmission (NULL = no retransmission); the call
                   * record's own buffer (route_svc.c call_box_t), valid while the call is */
    size_t len;
    uint32_t type;
    uint64_t deadline_ns;
    uint64_t wake_ns; /* its next retransmission or its deadline (route_svc.c calls_sweep) */
};

/* A metadata call in flight; detached (svc NULL) when the service is freed first. */
typedef struct route_mreq route_mreq_t;
typedef void (*route_mreq_fn)(route_svc_t *svc, route_mreq_t *q, const meta_result_t *res);
struct route_mreq {
    route_mreq_t *next, *prev;
    route_svc_t *svc;
    route_mreq_fn fn;
    void *ctx;
    uint32_t shard;
    uint64_t u64;
};

typedef struct route_op route_op_t; /* client operation (route_client.c) */

enum route_bug {
    ROUTE_BUG_SECONDARY_CAS = 1u << 0,    /* secondaries accept CAS; clients may send it there */
    ROUTE_BUG_SKIP_TRANSFER = 1u << 1,    /* acquire without lease expiry and without transfer */
    ROUTE_BUG_STRAND_LOST = 1u << 2,      /* never take over when every source is gone */
    ROUTE_BUG_BATCH_ONE_RESULT = 1u << 3, /* a client takes a CAS batch's first status for all */
    ROUTE_BUG_PURGE_NO_REPAIR = 1u << 4,  /* the purge never re-mirrors a dirty tombstone */
    ROUTE_BUG_PURGE_DIRTY = 1u << 5,      /* the purge drops a dirty tombstone unrepaired */
};

struct route_svc {
    /* MetadataOnly mode: every route.h entry point forwards to this implementation and the
     * mesh state below stays unused. NULL in EmbeddedWrh mode. */
    struct route_mo *mo;
    env_t *env;
    meta_t *meta;
    char deployment[80];
    kvm_runtime_t self;
    env_node_t self_node;
    route_policy_t policy;
    uint64_t lease_ns, timeout_ns;
    bool ready, freeing;
    uint32_t start_attempts;
    void (*start_cb)(void *, int);
    void *start_arg;
    /* runtime lease */
    meta_lease_t lease;
    uint64_t lease_deadline; /* local ns; 0 = none */
    bool lease_busy;
    uint64_t ka_sent_ns;
    env_timer_id tick_timer;
    uint64_t next_ka_ns;
    /* membership */
    uint64_t generation;
    route_member_t *members;
    size_t n_members;
    route_shard_t *shards;
    uint32_t tick_cursor;
    uint32_t tick_budget;
    /* calls: newest first from `calls`, oldest first from `calls_tail` (answers mostly come in
     * the order of their requests, so on_response looks from the oldest) */
    route_call_t *calls, *calls_tail;
    uint32_t n_calls;
    env_timer_id call_timer; /* the calls' one timer, armed for call_timer_ns (0: none) */
    uint64_t call_timer_ns;
    /* finished call records kept for the next calls, with their retransmission buffers
     * (route_svc.c call_alloc/call_free; freed by route_svc_free) */
    struct call_box *call_spare;
    uint32_t n_call_spare;
    /* encoding: the reusable buffer of route_send / route_call (route_svc.c enc_take) */
    uint8_t *enc;
    size_t enc_cap;
    bool enc_busy;
    route_mreq_t *mreqs;
    route_op_t *ops;
    uint32_t n_ops;
    /* finished ops kept for the next ones, with their answer arrays (route_client.c op_new/
     * op_free; freed by route_client_cancel_all) */
    route_op_t *op_spare;
    uint32_t n_op_spare;
    uint64_t next_req_id;
    route_stats_t stats;          /* only the service-internal fields (route.h) */
    struct obs_registry *metrics; /* route families are counted here */
    bool own_metrics;             /* private registry (opts had none): freed with the service */
    unsigned bugs;
    /* CAS with a claim (route_claim.c) */
    route_claim_fn claim_fn;
    void *claim_ctx;
    struct route_claim *claims; /* primary side: claims in flight */
    uint32_t n_claims;
    uint64_t claim_seq;         /* set while a claimed CAS is applied: the reserved sequence */
    const uint8_t *claim_reply; /* set while a claim CAS is answered: the reply blob */
    uint32_t claim_reply_len;
    /* inline reads (route_inline.c): the store's source, and while a READ is answered the
     * payload it lent (inl_pin set between route_inline_begin and route_inline_end) */
    route_inline_src_t inline_src;
    const uint8_t *inl_data;
    uint32_t inl_len;
    void *inl_pin;
    bool inl_set;
    /* while a received batch message is handled (route_inline_batch_begin/end, nesting depth):
     * the inline bytes its READs may still be lent (of ROUTE_INLINE_BATCH_MAX) */
    uint32_t inl_in_batch;
    uint32_t inl_batch_left;
    /* while the items of a received batch message with an attachment are handled
     * (route_batch_on_message): the attachment, and the offset of the next attached answer's
     * bytes in it (route_on_message hands each its slice, in item order); batch_att_bad: an item
     * could not be decoded, so the later slices are not known: no more are handed out */
    const env_payload_t *batch_att;
    size_t batch_att_off;
    bool batch_att_bad;
    /* tombstone purge (route_svc.c purge_tick); the a_* mirrors are read by any thread */
    _Atomic uint64_t a_entries, a_tombs, a_purged;
    _Atomic uint64_t a_mem_entry, a_mem_packed, a_mem_ident, a_mem_other; /* route_table_mem */
    /* batching (route_batch.c): while coalesce > 0, batchable messages wait in the outbox,
     * one batch per destination, sent when it drops to 0 */
    unsigned coalesce;
    route_group_fn group_begin, group_end; /* route_set_group_hooks (NULL = none) */
    void *group_ctx;
    uint32_t n_outbox;
    struct route_outbox *outbox; /* ROUTE_OUTBOX_NODES slots, allocated on first use */
    /* answer batches' attachment buffers (route_batch.c route_emit_att): kept for reuse, and
     * those the env is sending */
    struct route_att_buf *att_spare, *att_busy;
    uint32_t n_att_spare;
    /* batching windows of the client (route_client.c route_batch_begin/end) */
    unsigned win_depth;
    struct route_window *win_open;    /* being filled */
    struct route_window *win_pending; /* sealed, waiting for their loop turn */
    struct route_window *win_wait;    /* the pending one whose items wait for shard views */
    struct route_window *win_spare;   /* a released window kept for reuse (no calloc per op) */
    bool win_parking;                 /* a window's first turn: items without a view park */
};

/* route_svc.c */
uint64_t route_now(route_svc_t *svc);
/* Fills the registry-backed fields of a route_stats_t from reg (route_metaonly.c too). */
void route_stats_from_registry(const struct obs_registry *reg, route_stats_t *out);
/* Local deadline after a lease of `remaining_ns` measured from `sent_ns` (conservative). */
uint64_t route_conservative_deadline(uint64_t sent_ns, uint64_t remaining_ns);
int route_send(route_svc_t *svc, env_node_t to, route_msg_t *m);
/* Sends a request and tracks the reply (retransmitted until deadline when retransmit). fn runs
 * exactly once: with the answer, with NULL at the deadline, or while the service is freed. */
route_call_t *route_call(route_svc_t *svc, env_node_t to, route_msg_t *m, uint16_t resp_kind,
                         uint64_t timeout_ns, bool retransmit, route_call_fn fn, void *ctx);
/* Ends c without its callback. Never for a lookup's READ call: the attempt has no timer of its
 * own and ends when its last call does (route_client.c lookup_send). */
void route_call_cancel(route_svc_t *svc, route_call_t *c);
route_mreq_t *route_mreq_new(route_svc_t *svc, route_mreq_fn fn, void *ctx, uint32_t shard);
void route_mreq_cb(void *arg, const meta_result_t *res); /* meta_cb for route_mreq_t */
int route_shard_meta_key(route_svc_t *svc, uint32_t shard, char *out, size_t cap);
/* Desired authority set of a shard from the current membership; *n = 0 when none. */
void route_desired_set(route_svc_t *svc, uint32_t shard, route_msg_member_t *set, uint32_t *n);
/*
 * Node numbers are local to each process's env (the real runtime numbers peers as it meets
 * them), so a node number read from a metadata record or a peer message written by another
 * runtime means nothing here. These translate every member named in a decoded record or message
 * to this runtime's own node for that runtime id (from the pushed membership snapshot); an id
 * not in the snapshot keeps the number it came with (a send there is fenced by the target
 * incarnation check, so it can only fail, never reach the wrong authority).
 */
void route_localize_rec(route_svc_t *svc, route_rec_t *rec);
void route_localize_msg(route_svc_t *svc, route_msg_t *m);
bool route_member_eq(const route_msg_member_t *a, const route_msg_member_t *b);
bool route_set_eq(const route_msg_member_t *a, uint32_t na, const route_msg_member_t *b,
                  uint32_t nb);

/* route_inline.c: around the answer of a settled READ (route_auth.c on_read): begin asks the
 * inline source for the payload of `route` when req accepts it, end returns the pin. */
void route_inline_begin(route_svc_t *svc, const route_msg_t *req, const kvm_route_t *route);
void route_inline_end(route_svc_t *svc);
/* Around the items of a received batch message (route_batch.c): its READs share one budget of
 * ROUTE_INLINE_BATCH_MAX inline bytes. */
void route_inline_batch_begin(route_svc_t *svc);
void route_inline_batch_end(route_svc_t *svc);
/* Fills m's inline part (a READ_RESP) from what route_inline_begin lent, if anything. */
void route_inline_fill(route_svc_t *svc, route_msg_t *m);
/* Sends m (a READ_RESP answering req) to `to` with the lent bytes as its attachment when req
 * asked for that form (RMSG_READ_ATT) and the env carries it: the pin then goes with the send
 * (returned once the write completed). Returns whether m was handled (sent, or lost as a
 * datagram may be); false: send it as before (route_inline_fill, route_send). */
bool route_inline_send(route_svc_t *svc, env_node_t to, const route_msg_t *req, route_msg_t *m);

/* route_auth.c */
void route_auth_tick(route_svc_t *svc, route_shard_t *sh);
/* Applies (or refuses, replying) the CAS request req as this shard's authority. */
void route_auth_on_cas(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                       route_shard_t *sh);
/* Whether route_auth_on_cas would apply req now (admitted, this runtime the active primary, the
 * key not busy, dirty or held by a claim, the expected version current). */
bool route_auth_cas_would_apply(route_svc_t *svc, const route_msg_t *req, route_shard_t *sh);

void route_auth_on_request(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *m);
/* The tombstone purge's repair (route_svc.c purge_tick): starts the re-mirror of e, a due
 * tombstone that is dirty and not busy, when this runtime is the shard's active primary; true
 * when one started (e is busy until it ends, then clean or dirty again). */
bool route_auth_repair(route_svc_t *svc, route_shard_t *sh, route_entry_t *e);
void route_auth_lease_lost(route_svc_t *svc);
void route_shard_free(route_shard_t *sh);

/* route_claim.c */
#define ROUTE_MAX_CLAIMS 256 /* claimed CASes in flight at one primary */
void route_claim_on_req(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                        route_shard_t *sh);
/* Whether a claim in flight holds ident of shard. */
bool route_claim_holds(const route_svc_t *svc, uint32_t shard, const kvm_ident_t *ident);
/* Drops every claim in flight (service freed; their dones must not come). */
void route_claim_free_all(route_svc_t *svc);

bool route_auth_read_valid(route_svc_t *svc, route_shard_t *sh);

/* route_batch.c: every route message leaves through route_emit (batched while coalescing). */
#define ROUTE_OUTBOX_NODES   64 /* destinations one coalescing turn batches; more go alone */
#define ROUTE_OUTBOX_ATT_MIN (64u * 1024) /* first size of an outbox's attachment buffer */
#define ROUTE_ATT_SPARES     4            /* attachment buffers kept for reuse */
int route_emit(route_svc_t *svc, env_node_t to, uint32_t type, const uint8_t *buf, size_t len);
/* A READ answer m (status 0, one route) with the route's len inline bytes at data, while the
 * service coalesces and the env sends attachments: its head form (RMSG_READ_ATT, att_len) is
 * encoded into to's batch and the bytes are copied once to the end of the batch's attachment,
 * which the env sends with the batch (the receiver hands each attached answer its slice, in
 * item order: route_svc.c route_on_message). true: queued; false: nothing queued (not
 * coalescing, no attachments, no memory), m unchanged: send it another way. */
bool route_emit_att(route_svc_t *svc, env_node_t to, route_msg_t *m, const uint8_t *data,
                    uint32_t len);
/* Encoding in place: while the service coalesces and type is batchable, room for a message of
 * at most cap bytes at the end of to's batch (*slot set; NULL: not batched now, or no room:
 * encode elsewhere and route_emit). The caller encodes into it and ends the slot with
 * route_emit_commit before anything else is emitted (len 0: nothing was written). */
typedef struct route_emit_slot {
    struct route_outbox *o;
} route_emit_slot_t;
uint8_t *route_emit_reserve(route_svc_t *svc, env_node_t to, uint32_t type, size_t cap,
                            route_emit_slot_t *slot);
void route_emit_commit(route_svc_t *svc, route_emit_slot_t *slot, size_t len);
void route_coalesce_begin(route_svc_t *svc);
void route_coalesce_end(route_svc_t *svc); /* at depth 0: sends every batch of the outbox */
void route_batch_on_message(route_svc_t *svc, const env_msg_t *msg);
/* route_svc.c: one item of a received batch (route_on_message, with the batch's attachment). */
void route_on_batch_item(route_svc_t *svc, const env_msg_t *msg);
void route_outbox_free(route_svc_t *svc);

/* route_client.c */
void route_client_cancel_all(route_svc_t *svc);
void route_client_view_from_rec(route_svc_t *svc, route_shard_t *sh, const route_rec_t *rec);

#endif
