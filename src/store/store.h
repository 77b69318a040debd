/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h — the store runtime's internal interface, shared by its files:
 *
 *   runtime.c  open/close, the loop thread, the RPC endpoint, env <-> RPC message glue, held
 *              messages and snapshot-refresh waits, the admin endpoints: the top, which may call
 *              every other store file and is called by none of them;
 *   rt_op.c    the application-thread hand-off (ops) and its completion, the data-path helpers
 *              used by app threads (segment handles, interned addresses, registered buffers),
 *              RPC peers, span helpers: the runtime's lower half that the other files call;
 *   member.c   membership: registration under a lease with a metadata-assigned epoch, keepalive,
 *              the live snapshot refreshed in the background, states, quarantine;
 *   owner.c    storage owner shell around slot_core.c (slots, allocators, reservations with
 *              a TTL, commit, reclaim after the grace window, CLOCK eviction, waiters): the
 *              segments' mappings, route lookups and eviction CAS, RPC, timers, metrics;
 *   ops.c      loop side of object operations (ops_int.h): the dispatch (ops.c), placement and
 *              reservation (ops_place.c), route publication by CAS, tombstones, handoff
 *              (ops_publish.c), the per-item state machine, notifications, lookups (ops_item.c);
 *   data.c     application-thread side: payload writes and reads through the transports,
 *              checksum verification, replica failover, batches, drain handoff;
 *   route_hint.c  the last route version seen per key: the expected version of the next CAS.
 *
 * Threads: everything in struct kvm_rt marked [loop] is touched only on the loop thread;
 * [any] fields are immutable after open or protected by rt->mu (the data-path tables by
 * rt->dp_rw). Application threads reach the
 * loop only through kvm_op_submit (env_post) and wait on the op's completion.
 */
#ifndef KVMESH_STORE_STORE_H
#define KVMESH_STORE_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/ident.h"
#include "core/route.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_uv.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "net/rpc.h"
#include "net/transport.h"
#include "route/route.h"
#include "obs/http.h"
#include "obs/trace.h"
#include "store/alloc.h"
#include "store/store_config.h"
#include "store/waitq.h"

struct kvm_sg; /* data.h: a put's value */

#define STORE_MAX_MEMBERS      256  /* members in a live snapshot */
#define STORE_MAX_SEGS         64   /* segments per runtime */
#define STORE_ADDR_MAX         160  /* rpc address string */
#define STORE_SEG_CACHE_MAX    4096 /* opened remote segment handles per runtime */
#define STORE_SEG_RETIRED_MAX  1024 /* dead handles replaced by a reopen, kept until close */
#define STORE_PLACE_TRIES      8    /* owners tried per replica */
#define STORE_CAS_RETRIES      8    /* hand-off attempts after a conflict */
#define STORE_CONFLICT_RETRIES 32   /* put/remove CAS retries after a conflict (deadline-bounded) */
#define STORE_INDET_RETRIES    4    /* publish re-checks after an indeterminate CAS */
#define STORE_TICK_MS          20   /* owner housekeeping period */
#define STORE_TICK_BUDGET      256  /* expired reservations examined per housekeeping turn */
#define STORE_EVICT_INFLIGHT   64   /* eviction CAS in flight per owner */
#define STORE_RESERVE_WAIT_MAX 512  /* reservations waiting for eviction to free space */
#define STORE_HIT_FLUSH_MS     100  /* hit reports are batched this long */
#define STORE_MEMBER_PAGE      256  /* member records per range page */
#define STORE_HELD_MAX         256  /* env messages held for a refresh that names their sender */
#define STORE_HINTS            16384 /* route hints per runtime (power of two; route_hint.c) */
#define STORE_HINT_WAYS        4     /* route hints: ways per set */
#define STORE_HINT_REPLICAS    3     /* routes with more replicas are not hinted */
#define STORE_SHARD_LEASE_MIN  2000  /* ms: the shard-authority lease is lease_ttl_ms */
#define STORE_SHARD_LEASE_MAX  3000  /* ms: clamped to these (runtime.c, "Failover time") */
/* How long past its deadline a bounded call waits for the loop's own answer before it gives up
 * on the op (docs/api.md "Deadlines"): every stage already ends by the deadline; this covers the
 * hand-over from the loop thread. */
#define STORE_DEADLINE_SLACK_MS 200
/* kvm_rt_close waits for the loop's close at most 2 x request_timeout_ms (the member record's
 * delete, then the RPC endpoint's calls, each fail by then) plus this (docs/store.md "Close"). */
#define STORE_CLOSE_SLACK_MS 5000

/* ---- membership states ------------------------------------------------------------------ *
 *
 *    register      open done        kvmesh_drain       handoff done / close
 *   --------> STANDBY -----> ACTIVE ----------> DRAINING ----------------------> GONE
 *                 \____________________________________________________________/^
 *                                         close without drain
 */
enum kvm_member_state {
    KVM_MS_STANDBY = 0,
    KVM_MS_ACTIVE = 1,
    KVM_MS_DRAINING = 2,
    KVM_MS_GONE = 3,
};
/* The state's name in member records, /health and `kvmesh members` (static strings). Inline: a
 * leaf every store file and the admin tools use (docs/architecture.md "Store layering"). */
static inline const char *kvm_member_state_name(enum kvm_member_state s)
{
    switch (s) {
    case KVM_MS_STANDBY:
        return "standby";
    case KVM_MS_ACTIVE:
        return "active";
    case KVM_MS_DRAINING:
        return "draining";
    case KVM_MS_GONE:
        return "gone";
    }
    return "?";
}

struct kvm_seg_info {
    uint64_t id, size, read_token;
    bool drained; /* an operator drained it (lifecycle.c): no new slots; still readable */
};

/* One member of the live snapshot. Address strings are interned (kvm_rt_intern): immutable and
 * valid until the runtime closes, so app threads may keep the pointers during a request. */
struct kvm_member {
    kvm_runtime_t rt;
    char idhex[KVM_ID128_HEX_LEN + 1];
    enum kvm_member_state state;
    double weight;
    uint64_t capacity, used;
    const char *rpc_addr;  /* interned "tcp:IP:PORT" */
    const char *data_addr; /* interned transport address ("" for a client-only runtime) */
    /* rpc_local = unix (runtime.c): interned "unix:PATH" and host identity ("BOOTID/DEV:INO" of
     * the network namespace); "" when the record has none (tcp; an older runtime) */
    const char *rpc_local;
    const char *host;
    uint32_t n_segs;
    struct kvm_seg_info segs[STORE_MAX_SEGS];
    uint64_t heartbeat;
    env_node_t node; /* local env node number (never reused within this process) */
};

/* A reservation of one replica slot. */
struct kvm_res {
    kvm_runtime_t owner;
    bool local;
    uint64_t seg, offset, token; /* token: the write grant */
    uint64_t seg_read_token;     /* to open the segment */
    const char *data_addr;       /* interned */
    bool written; /* the owner took the payload with the reservation (put_inline.c) */
};

/* Where and how to read one replica (filled by lookup). */
struct kvm_access {
    bool local, known; /* known: the owner is a live member with this segment */
    bool suspect;      /* the owner is quarantined: try it last */
    bool unseen;       /* the owner was never a member this runtime saw (joined since) */
    uint64_t seg_read_token;
    const char *data_addr; /* interned */
};

/* One object of an operation (an op carries 1..KVMESH_BATCH_MAX items). */
/*
 * An item's step in its op [loop] (docs/store.md "Item states"): every change goes through
 * kvm_item_set_state (ops_item.c), which asserts the edge is one of its table's; an item ends
 * exactly once, DONE or FAILED. kvm_op_new's items start NEW.
 */
enum kvm_item_state {
    KVM_ITEM_NEW,             /* not started */
    KVM_ITEM_QUOTA_RESERVING, /* tenant quota: the put's charge / the remove's refund reserved */
    KVM_ITEM_PLACING,         /* reservations at owners in flight, or the next round */
    KVM_ITEM_PARKED,          /* too few storage members: waits for a snapshot or the deadline */
    KVM_ITEM_LOOKING_UP,      /* the exact route lookup (lookup, remove, handoff, quota put) */
    KVM_ITEM_CLAIMING,        /* tenant quota: the writer's claim, just before the CAS */
    KVM_ITEM_COLD_GATE,       /* before a CAS: the replaced cold copy's reclaim record */
    KVM_ITEM_CAS,             /* the route CAS (put, tombstone, handoff) in flight */
    KVM_ITEM_SETTLING,        /* a possibly applied CAS settled by an exact lookup */
    KVM_ITEM_FINALIZING,      /* tenant quota: the finalize after the CAS */
    KVM_ITEM_DURABLE_WAIT,    /* cold_write_through: the put waits for its cold copy's commit */
    KVM_ITEM_DONE,            /* ended: rc 0, or an answer (KVMESH_ENOENT) */
    KVM_ITEM_FAILED,          /* ended by kvm_item_fail: rc and the op's err say why */
    KVM_ITEM_N_STATES
};

struct kvm_item {
    kvm_ident_t ident;
    uint64_t len, checksum;
    int rc;
    /* place/publish */
    uint32_t n_res;
    struct kvm_res res[KVM_MAX_REPLICAS];
    uint32_t placing; /* reservations in flight */
    uint32_t want;
    uint32_t tries;
    uint32_t exclude_n;
    kvm_runtime_id_t exclude[2 * KVM_MAX_REPLICAS];
    enum kvm_item_state state; /* [loop] kvm_item_set_state only */
    int in_place;
    /* lookup / publish */
    bool have_route;
    kvm_route_t route;  /* lookup: the route; publish: the published route */
    kvm_route_t cur;    /* publish: the route being replaced */
    kvm_op_id_t pub_op; /* publish: content op of this write, the same in every attempt */
    bool pub_op_set;
    uint32_t indet_tries;
    struct kvm_access acc[KVM_MAX_REPLICAS];
    /* handoff: the replica slot being replaced (owner = self; re-replication: a dead owner's) */
    kvm_hot_replica_t moving;
    bool superseded; /* handoff: rc 0 because the route no longer held `moving` (nothing CAS'ed) */
    /* tenant quota (quota.c): NULL unless the tenant has a policy; moves with the item */
    struct kvm_qitem *q;
    /* cold tier (cold_place.c): the reclaim planned before a CAS replacing cur's materialized
     * backing (cold_reclaim_of = the cold op it reclaims; nil = none planned) */
    kvm_op_id_t cold_reclaim_op, cold_reclaim_of;
    /* publication lane of the key (cas_lane.h) [loop]: held, or waiting (lane_op, lane_fn) */
    bool lane_held;
    struct kvm_item *lane_next;
    struct kvm_op *lane_op;
    void (*lane_fn)(struct kvm_op *op, struct kvm_item *it);
    /* put at the primary (put_primary.c): the owner, the key's shard primary, reserved, wrote
     * and published the item in one exchange (PLACE ended it DONE): no PUBLISH follows */
    bool published;
};

enum kvm_op_type {
    KVM_OP_PLACE,   /* reserve replicas for every item */
    KVM_OP_PUBLISH, /* CAS the routes of every item; commit; release obsolete replicas */
    KVM_OP_ABORT,   /* release the reservations of every item */
    KVM_OP_LOOKUP,  /* routes + access info */
    KVM_OP_REMOVE,  /* tombstone every item */
    KVM_OP_HANDOFF, /* drain: replace item->moving by item->res[0] in the route */
    KVM_OP_REPORT,  /* a replica failed its read: quarantine its owner */
    KVM_OP_HITS,    /* best-effort read hits */
    KVM_OP_MEMBERS, /* copy the snapshot */
    KVM_OP_DRAIN_BEGIN,
    KVM_OP_DRAIN_LIST, /* list local committed replicas (bounded page) */
    KVM_OP_DRAIN_END,
    KVM_OP_STATS,
    KVM_OP_SEG_ADD,    /* seg_arg = size; result seg_arg = segment id; record republished */
    KVM_OP_SEG_RETIRE, /* seg_arg = segment id */
    KVM_OP_SEG_REMOVE, /* seg_arg = segment id; record republished */
};

struct kvm_rt;

typedef struct kvm_op {
    enum kvm_op_type type;
    struct kvm_rt *rt;
    atomic_int refs; /* app thread + loop */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
    char err[512]; /* message of the first failure */
    bool err_set;
    char lasterr[300]; /* [loop] last reservation error, for the placement message */
    size_t n;
    struct kvm_item *items;
    size_t pending; /* [loop] items not finished */
    uint64_t deadline_ns;
    /* The call's deadline (CLOCK_MONOTONIC ms, env_clock_mono_ms), computed once at the public
     * call's entry and shared by every op of the call; 0 = kvm_op_run sets one request timeout
     * from now. Loop stages are given only the time left (kvm_deadline_left_ms). */
    uint64_t deadline_ms;
    /* Set by the app thread when it stopped waiting for a bounded op (PLACE, PUBLISH, LOOKUP,
     * REMOVE) at deadline + STORE_DEADLINE_SLACK_MS; the loop then drops late results (a late
     * placement releases its reservations). */
    atomic_bool abandoned;
    /* put options */
    uint32_t replicas;
    bool hard_pin;
    size_t n_pref;
    kvm_runtime_id_t pref[KVM_MAX_REPLICAS];
    /* report / hits */
    kvm_runtime_id_t bad_owner;
    /* members */
    kvmesh_member_info_t *members;
    size_t members_cap, members_n;
    /* drain list */
    kvm_hot_replica_t *list;
    kvm_ident_t *list_ident;
    uint64_t *list_tokens;
    uint64_t seg_arg;
    size_t list_cap, list_n;
    uint64_t list_cursor;
    /* stats */
    struct kvm_rt_stats *stats;
    /* tracing: the request's span on the app thread (parent of the loop's control.* spans);
     * NULL when tracing is off. It outlives the op's loop work (the app thread waits), except
     * for a bounded op, whose app thread may stop waiting at the deadline: kvm_op_run then
     * points span at span_own, an op-owned copy acting as the loop side's local root, and adds
     * its stage times to the real root when the op completes in time. */
    struct obs_span *span;
    struct obs_span *span_own;
    /* critical-path accounting (kvmesh_op_* families): OBS_OP_* + 1 of the API operation this op
     * serves, 0 = not an API operation (drain, reports, admin): not counted */
    uint8_t cp_op;
    /* single get (get_inline.c): the inline read sink of its lookup; inl.max 0 = none asked.
     * inl.buf (allocated by the route service when bytes come) is the op's, freed by
     * kvm_op_unref; written by the loop before the item completes, read by the app thread after.
     * A batch get (n > 1): inl.buf is the block of its items' sinks and their bytes
     * (get_inline.c kvm_get_inline_prepare), freed likewise; inl.max stays 0 */
    route_inline_t inl;
    /* single get with the caller's buffer lent to its lookup's answer (get_inline.c "The
     * answer's attachment in the caller's buffer"; inl.lent == buf): the first attached answer
     * to a READ of the lookup claims it for good and its bytes are received straight into it.
     * Set by the app thread before kvm_op_run (buf, cap, st); the rest under mu: the loop writes
     * into buf and *st only while not detached, the app thread sets detached after kvm_op_run
     * and then owns buf again. st (the app thread's, valid while not detached): the checksum
     * folded over the landed runs, NULL when not verified. */
    struct {
        uint8_t *buf;
        uint64_t cap;
        struct kvm_sum *st;
        bool claimed, detached, whole;
        uint64_t len, landed, digest;
    } idst;
    /* single small put (put_inline.c): the caller's value, which the reservations to remote tcp
     * owners carry; set by the app thread before kvm_op_run (items[0].checksum then holds the
     * value's checksum), read by the loop while the op runs (the caller waits) */
    struct {
        const struct iovec *iov;
        int iovcnt;
        bool on;
        /* a value above inline_write_max (put_primary.c's raw form): items[0].checksum is not
         * computed yet; the loop computes it when the put goes at the primary (one read-only
         * pass before the value is lent to the RPC layer, or fused with its staging copy) and
         * clears this, else clears `on` when a reservation is made, so the payload stage sums
         * the value as it moves it */
        bool sum_later;
    } winl;
    /* batch put (put_primary.c "batches"): the caller's values, one per item (data.h kvm_sg,
     * borrowed: the caller waits for the op), which the items going at their shard primary
     * carry; set by the app thread before kvm_op_run when the batch may take that path, read by
     * the loop only before the op's deadline and while not abandoned. NULL: none. */
    const struct kvm_sg *wbat;
    /* an op started on the loop with no app thread waiting (put_primary.c's publication at the
     * owner): NULL for every other op. When set, kvm_op_complete calls on_done(op) on the loop
     * instead of signalling a waiter, then drops the loop's reference. */
    void (*on_done)(struct kvm_op *op);
    void *done_arg;
    /* [loop writes, app thread reads once it abandoned the op] a PLACE op sent a put at the
     * primary (put_primary.c): an abandoned one may have been published by its owner */
    atomic_bool prim_sent;
} kvm_op_t;

/* Counts v events of counter family `fam` (label 2: i2) for the API operation op serves. */
#define KVM_CP_COUNT(op, fam, i2, v)                                                               \
    do {                                                                                           \
        if ((op)->cp_op)                                                                           \
            obs_count((op)->rt->metrics, fam, (unsigned)(op)->cp_op - 1u, i2, v);                  \
    } while (0)

/* evictions and meta_calls are views of the runtime's metrics registry (evictions_total,
 * metadata_operations_total); the rest are owner-internal figures without a family. */
struct kvm_rt_stats {
    uint64_t capacity, used, reclaim_bytes; /* used: every live slot, reserved ones included */
    uint64_t evictions, evict_conflicts, reclaimed, reservations_expired, reserve_waits;
    /* reservations past their TTL held until an exact route lookup settles them (a gauge);
     * reservations_expired: those the lookup proved unreferenced and released */
    uint64_t reservations_held;
    uint64_t notes_stale; /* COMMIT / RELEASE ignored: they named a slot no longer there */
    uint64_t route_meta_calls, meta_calls;
    uint64_t route_entries, route_tombs, tombs_purged; /* route_table_counts (EmbeddedWrh) */
    uint64_t tombs_purge_unknown; /* route_table_purge_unknown (MetadataOnly) */
    uint64_t generation;
    size_t n_members;
    double fragmentation;
};

struct slot_core;

/* The shell's half of an owner segment (owner.c): the mapping and its read grant. The slot core
 * (slot_core.h) keeps the allocator and the retiring / drained flags at the same index. */
struct kvm_local_seg {
    struct seg *seg; /* NULL once removed */
    uint64_t read_token;
};

struct kvm_seg_handle { /* app-thread cache of opened remote segments */
    const char *data_addr;
    uint64_t seg_id;
    struct tp_segment *h;
};

struct kvm_reg_buf {
    void *addr;
    size_t len;
};

#define STORE_WINL_REFUSED_MAX 8

#define STORE_SLOTB_REFUSED_MAX 8  /* owners remembered as refusing STORE_RPC_SLOT_BATCH */
#define STORE_SLOTB_NOTES_MAX   32 /* owners remembered as taking it as a notification */

struct kvm_rt;
struct slot_note;
struct kvm_slotb_box;
/* The owner side of one COMMIT (commit) or RELEASE: slot_batch.c's STORE_RPC_SLOT_BATCH
 * handler calls it per item (owner.c registers it, kvm_slot_batch_serve). */
typedef void (*kvm_slot_apply_fn)(struct kvm_rt *rt, bool commit, uint64_t seg, uint64_t off,
                                  const struct slot_note *n);

typedef struct kvm_rt {
    /* [any] immutable after open */
    struct kvm_store_config cfg;
    kvm_runtime_t self;
    char idhex[KVM_ID128_HEX_LEN + 1];
    char rpc_addr[STORE_ADDR_MAX];
    /* rpc_local = unix: "unix:PATH" this runtime also listens on and its host identity (both ""
     * when off or not available); how many peers' unix sockets fell back to tcp (loop only; at
     * KVM_RPC_LOCAL_FAILED_MAX no unix peer is used any more) */
    char rpc_local_addr[STORE_ADDR_MAX];
    char host_id[96];
    size_t n_rpc_local_failed;
    unsigned rpc_local_swept; /* stale sockets of ended runtimes removed at open (runtime.c) */
    env_uv_thread_t *thread;
    env_t *env;
    struct seg_registry *reg;
    struct tp_engine *tp;
    /* [any] under mu, except seg_cache / seg_retired / regs: under dp_rw (read-locked by the
     * application threads' data-path lookups, write-locked to change them) */
    pthread_mutex_t mu;
    pthread_rwlock_t dp_rw;
    struct kvm_seg_handle *seg_cache;
    size_t n_seg_cache;
    /* handles replaced after their peer died (other app threads may still use them): closed at
     * runtime close; at most STORE_SEG_RETIRED_MAX */
    struct tp_segment **seg_retired;
    size_t n_seg_retired;
    struct kvm_reg_buf *regs; /* sorted by addr (kvm_rt_is_registered searches them) */
    size_t n_regs, cap_regs;
    size_t max_reg_len; /* >= every regs[i].len */
    char **interned;
    size_t n_interned, cap_interned;
    atomic_bool closing;
    /* [any] threads inside kvm_op_run (rt_op.c): an op leads the loop only when it is alone */
    atomic_uint ops_running;
    /* [any] one spare one-item op record with its item (rt_op.c kvm_op_new / kvm_op_unref): a
     * single get's or put's op reuses it instead of two callocs and frees; freed at close */
    _Atomic(struct kvm_op *) op_spare;
    /* [loop] spare route-call contexts (ops_item.c kvm_ictx_named / kvm_ictx_free): a list of
     * at most STORE_ICTX_SPARE_MAX, freed at close (kvm_ictx_spare_free) */
    struct item_ctx *ictx_spare;
    unsigned n_ictx_spare;
    /* [loop] spare reservation contexts (ops_place.c place_start / rsv_ctx_free): a list of at
     * most STORE_RSV_SPARE_MAX, freed at close (kvm_rsv_spare_free); rsv_allocs counts the
     * contexts allocated (tests read it on the loop) */
    struct reserve_ctx *rsv_spare;
    unsigned n_rsv_spare;
    uint64_t rsv_allocs;
    /* [any] what application threads wait for (waitq.h), closed at runtime close: room in the
     * request queue (signalled by op_enter), a free transport registration slot (by every
     * store-side tp_unregister_memory), owner slots settling (by local commits and releases;
     * also carries timed pauses) */
    struct kvm_waitq wq_room, wq_reg, wq_slots;
    /* [loop] puts waiting for a membership refresh to place their replicas (ops_place.c) */
    struct place_wait *place_waiters;
    /* [loop] owners (id and epoch) that refused an inline reservation (put_inline.c): older
     * peers, sent plain reservations from then on; a ring of the last STORE_WINL_REFUSED_MAX */
    kvm_runtime_t winl_refused[STORE_WINL_REFUSED_MAX];
    uint32_t n_winl_refused;
    /* [loop] owners (id and epoch) that refused a put at the primary (put_primary.c): older
     * peers, sent the inline reservation from then on; a ring of the last STORE_WINL_REFUSED_MAX */
    kvm_runtime_t prim_refused[STORE_WINL_REFUSED_MAX];
    uint32_t n_prim_refused;
    /* [loop] likewise for the raw-payload form (STORE_RPC_PUT_PRIMARY_RAW, values above
     * inline_write_max): refused, such puts take the plain path (put_primary.c) */
    kvm_runtime_t prim_raw_refused[STORE_WINL_REFUSED_MAX];
    uint32_t n_prim_raw_refused;
    /* [loop] likewise for the batch form (STORE_RPC_PUT_PRIMARY_BATCH): refused, a batch's items
     * take the batched reservation (put_primary.c) */
    kvm_runtime_t prim_batch_refused[STORE_WINL_REFUSED_MAX];
    uint32_t n_prim_batch_refused;
    /* [loop] the buffers a put at the primary stages its raw-payload value in (put_primary.c),
     * kept for reuse as the RPC endpoint keeps its message buffers; NULL until the first */
    struct bufpool *prim_pool;
    /* [loop] batched COMMIT / RELEASE (slot_batch.c): the per-owner outbox of the group open
     * (depth > 0; allocated by the first group's first message, kept with one spare batch record
     * until kvm_slot_batch_close), how many outboxes and records it allocated, whether the
     * route service's group hooks are set, owners (id and epoch) that refused the batch (older
     * peers: single notifications from then on; a ring), owners whose answer said they take the
     * batch as a notification (sent so from then on; a ring), and the owner side's apply and
     * whether it serves the notification form (false only under a test hook: an older owner) */
    struct kvm_slotb_box *slotb_box;
    uint64_t slotb_allocs;
    unsigned slotb_depth;
    bool slotb_hooked;
    kvm_runtime_t slotb_refused[STORE_SLOTB_REFUSED_MAX];
    uint32_t n_slotb_refused;
    kvm_runtime_t slotb_notes[STORE_SLOTB_NOTES_MAX];
    uint32_t n_slotb_notes;
    kvm_slot_apply_fn slotb_apply;
    bool slotb_serve_note;
    /* [loop] the last STORE_RPC_ENV sender's id string and its parse (runtime.c on_env_msg) */
    char env_from_hex[40];
    kvm_runtime_id_t env_from;
    bool env_from_ok;
    atomic_uint_fast64_t op_seq; /* content op sequence */
    /* [loop] */
    meta_t *meta;
    rpc_endpoint *ep;
    route_svc_t *route;
    enum kvm_member_state state;
    meta_lease_t lease;
    uint64_t heartbeat;
    env_timer_id keepalive_timer, refresh_timer, tick_timer, hit_timer;
    bool refreshing;
    /* [loop] kvm_member_refresh_next's callback, waiting for the running refresh to end */
    void (*refresh_next)(struct kvm_rt *rt, int rc, const char *err); /* a kvm_done_cb */
    char refresh_after[KS_KEY_CAP];
    struct kvm_member *members, *next_members; /* snapshot, next being read */
    size_t n_members, n_next;
    uint64_t generation;
    env_node_t next_node;
    struct kvm_node_map {
        kvm_runtime_id_t id;
        env_node_t node;
    } * nodes;
    size_t n_nodes, cap_nodes;
    struct kvm_suspect {
        kvm_runtime_id_t id;
        uint64_t heartbeat; /* member heartbeat seen when quarantined */
    } suspects[STORE_MAX_MEMBERS];
    size_t n_suspects;
    /* owner (owner.c): the slot core, the segments' mappings, and used / capacity mirrored
     * from the core after every owner call */
    struct slot_core *slots;
    const struct kvm_owner_cold_hooks *owner_cold; /* NULL: no cold tier (installed by it) */
    struct kvm_local_seg segs[STORE_MAX_SEGS];
    uint32_t n_segs;
    uint64_t capacity, used;
    uint64_t notes_stale_counted;  /* the core's notes_stale already in notes_stale_total */
    struct rpc_stats rpc_exported; /* ep's figures already in the kvmesh_rpc_* families */
    struct kvm_hitbuf *hitbufs;
    size_t n_hitbufs;
    struct kvm_rt_stats stats;
    /* [any] mirrors for the admin endpoints (written by the loop) */
    _Atomic uint64_t a_used, a_members;
    _Atomic uint64_t a_capacity; /* rt->capacity for other threads (admin /stats), owner.c */
    atomic_int a_state;
    uint64_t start_ms;
    struct obs_http *admin;
    struct obs_tracer *tracer;    /* [any] NULL = tracing off (then no span is ever started) */
    struct obs_registry *metrics; /* [any] this runtime's metrics; every layer gets it via config */
    meta_t *route_meta;           /* [loop] traced handle the route service uses (tracer only) */
    struct self_msg *self_msgs;   /* [loop] env messages to self awaiting delivery */
    kvm_op_t *state_op;           /* the drain step waiting for its record write */
    bool admin_drained;           /* [loop] DRAINING by an operator's request (lifecycle.c) */
    struct kvm_quota *quota;      /* [loop] tenant quota protocol (quota.c); NULL = off */
    struct kvm_fair *fair;        /* [any] soft isolation gate (fair.c); NULL = off */
    struct kvm_place *place;      /* [loop] tenant placement preferences (place.c); NULL = none */
    struct kvm_hints *hints;      /* [loop] route hints (route_hint.c); NULL until first use */
    struct kvm_cas_lanes *lanes;  /* [loop] per-key CAS lanes (cas_lane.c); NULL until used */
    struct kvm_repair *repair;    /* background re-replication (repair.c); NULL = none */
    struct kvm_cold *cold;        /* [loop] cold tier wiring (cold_glue.c and the cold_*.c files,
                                     cold_int.h); NULL = off */
    /* [any] the loop side of every op (ops.c's kvm_ops_run), set by kvm_rt_open before the loop
     * starts: rt_op.c's hand-off calls it without calling up into ops.c */
    void (*ops_run)(kvm_op_t *op);
    /* [loop] membership hooks that member.c calls, set before the loop starts, so that member.c
     * never calls up into their owners: after_refresh after every snapshot refresh that ends
     * (runtime.c: held messages and refresh waiters; NULL = none); on_members after a new
     * snapshot is installed, with the previous one (repair.c: departed and draining owners;
     * NULL = no re-replication). */
    void (*after_refresh)(struct kvm_rt *rt);
    void (*on_members)(struct kvm_rt *rt, const struct kvm_member *old, size_t n_old);
    /* [loop] after every refreshed snapshot is installed (ops_place.c place_wait.h: puts waiting
     * for storage members retry their placement; NULL = none), set by kvm_rt_open like ops_run */
    void (*on_snapshot)(struct kvm_rt *rt);

    /* [loop] env messages from senders not in the snapshot, delivered after the next refresh
     * (runtime.c); held_refresh: one more refresh is wanted after the running one */
    struct held_msg *held_head, *held_tail;
    size_t n_held;
    bool held_refresh;
    struct refresh_waiter *refresh_waiters; /* [loop] kvm_rt_refresh_sync callers */
    /* [loop writes, any reads] get_inline.c: under transport auto, whether every storage member
     * was on this host at the last batch get's lookup (a batch then asks for no inline bytes) */
    atomic_bool inl_all_local;
    /* [any thread: exchanged] get_inline.c: the last batch get's sinks-and-room block, kept for
     * the next batch get (a block of ~0.5 MiB malloc'd per call was mapped and faulted in anew
     * each time); freed by kvm_get_inline_fini */
    _Atomic(void *) inl_room_spare;

    /* open/close synchronisation */
    pthread_cond_t open_cv;
    bool open_done, close_done;
    /* [mu] kvm_rt_close stopped waiting (close_bound_ms): close_signal frees the runtime */
    bool close_abandoned;
    const char *close_pending; /* [mu] what the loop's close waits for now (static text) */
    int open_rc;
    char open_err[512];
} kvm_rt_t;

/* ---- runtime.c ---------------------------------------------------------------------------- */
int kvm_rt_open(kvm_rt_t **out, const struct kvm_store_config *cfg);
/* Closes and frees rt (NULL: 0). Returns 0, or KVMESH_ETIMEDOUT when the loop did not finish
 * closing within kvm_rt_close_bound_ms (a callback blocks it, or a call outlived its deadline):
 * what it still waited for goes to stderr and the error; rt is then freed by the loop thread's
 * close once it finishes (never, if it stays blocked), and the caller must not use it again. */
int kvm_rt_close(kvm_rt_t *rt, bool drain_first);
uint32_t kvm_rt_close_bound_ms(const struct kvm_store_config *cfg);
/* Bound port of the admin HTTP endpoints (0 when admin_listen is off). */
uint16_t kvm_rt_admin_port(kvm_rt_t *rt);

/* ms per started MiB plus one that a tcp WRITE admitted by a reservation's grant may still be
 * landing: the transport's io_timeout_ms (runtime.c leaves it at transport.c's default). An
 * expired reservation's bytes stay in RECLAIM at least that long (slot_core_cfg.late_write_ns). */
#define STORE_LATE_WRITE_MS 10000

/* ---- rt_op.c ------------------------------------------------------------------------------ */
/* Interns an address string: the returned pointer is immutable until close ([any]). */
const char *kvm_rt_intern(kvm_rt_t *rt, const char *s);
/* Opened remote segment handle from the cache ([any], thread-safe). */
int kvm_rt_seg_open(kvm_rt_t *rt, const char *data_addr, uint64_t seg_id, uint64_t token,
                    struct tp_segment **out);
/* Was [p, p+len) registered with kvmesh_register_buffer? ([any]) */
bool kvm_rt_is_registered(kvm_rt_t *rt, const void *p, size_t len);
int kvm_rt_register(kvm_rt_t *rt, void *addr, size_t len);
int kvm_rt_unregister(kvm_rt_t *rt, void *addr);
/* The next content op id of this runtime ([any]). Inline, like the deadline helpers below: leaves
 * that every store file uses, owned by this header (docs/architecture.md "Store layering"). */
static inline kvm_op_id_t kvm_rt_next_op_id(kvm_rt_t *rt)
{
    return (kvm_op_id_t){.writer = rt->self.id,
                         .epoch = rt->self.epoch,
                         .seq = atomic_fetch_add(&rt->op_seq, 1) + 1};
}
/* The purge deadline a tombstone this runtime publishes carries (wall now +
 * tombstone_retention_ms): FINALIZED ones, and PENDING ones of objects without quota accounting
 * (docs/reliability.md "Tombstone purge"). */
static inline uint64_t kvm_rt_tomb_deadline(kvm_rt_t *rt)
{
    return env_wall_ms(rt->env) + rt->cfg.tombstone_retention_ms;
}
/* ops hand-off */
kvm_op_t *kvm_op_new(kvm_rt_t *rt, enum kvm_op_type type, size_t n);
void kvm_op_unref(kvm_op_t *op);
/* An item's route records (it->route, it->cur) [loop] (rt_op.c): a route whose identity equals
 * the item's is kept with the item's identity encoding borrowed (it->ident.enc) instead of a copy
 * of its own, so keeping an answered route costs no allocation. kvm_item_route_take fills the
 * empty *dst (no identity: as kvm_op_new leaves it, or after kvm_item_route_drop) with src,
 * borrowing when src's identity equals it->ident, else copying it (0, or KVMESH_ENOMEM with *dst
 * left empty). kvm_item_route_drop empties *r and zeroes it, as kvm_route_free does (the
 * identity freed only when owned). kvm_op_unref frees both records the same way; it->ident is
 * never replaced while a record borrows it. */
int kvm_item_route_take(struct kvm_item *it, kvm_route_t *dst, const kvm_route_t *src);
void kvm_item_route_drop(struct kvm_item *it, kvm_route_t *r);
/* Frees rt->op_spare (runtime free, after the loop stopped). */
void kvm_op_spare_free(kvm_rt_t *rt);
/* Frees rt->ictx_spare (runtime free, after the loop stopped; ops_item.c). */
void kvm_ictx_spare_free(kvm_rt_t *rt);
/* Frees rt->rsv_spare (runtime free, after the loop stopped; ops_place.c). */
void kvm_rsv_spare_free(kvm_rt_t *rt);
/* App thread: hands the op to the loop, waits for completion. Returns op->rc; on failure the
 * calling thread's kvmesh_last_error() carries op->err. A bounded op (PLACE, PUBLISH, LOOKUP,
 * REMOVE) is waited for until op->deadline_ms + STORE_DEADLINE_SLACK_MS at most: then the op is
 * abandoned and KVMESH_ETIMEDOUT returned (the message says whether the op may have been
 * applied); the caller must not read the op's items after that (the loop still owns them). */
int kvm_op_run(kvm_op_t *op);
/* The deadline of a call starting now: request_timeout_ms from now (CLOCK_MONOTONIC ms). */
static inline uint64_t kvm_deadline_new(const kvm_rt_t *rt)
{
    return env_clock_mono_ms() + rt->cfg.request_timeout_ms;
}
/* The lifetime a put asks for its reservations and their write grants (RESERVE ttl_ms): twice
 * request_timeout_ms, so a reservation outlives the call that made it. */
static inline uint32_t kvm_reserve_ttl_ms(const kvm_rt_t *rt)
{
    return rt->cfg.request_timeout_ms * 2;
}
/* Milliseconds left until deadline_ms (0 when passed; UINT32_MAX when deadline_ms is 0). */
static inline uint32_t kvm_deadline_left_ms(uint64_t deadline_ms)
{
    if (!deadline_ms)
        return UINT32_MAX;
    uint64_t now = env_clock_mono_ms();
    return now >= deadline_ms ? 0 : (uint32_t)KVM_MIN(deadline_ms - now, (uint64_t)UINT32_MAX);
}
/* [loop] completion helpers */
void kvm_op_fail(kvm_op_t *op, struct kvm_item *it, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void kvm_op_item_done(kvm_op_t *op);
void kvm_op_complete(kvm_op_t *op, int rc);
/* [loop] RPC peer of a member (created on first use): over the member's unix socket when both
 * run rpc_local = unix on one host and network namespace (and it has not fallen back to tcp: its
 * first connection failed, and what was queued on it went over tcp), else over tcp. */
rpc_peer *kvm_rt_peer(kvm_rt_t *rt, const struct kvm_member *m);
/* Test hook (test_hook.h): taken at open, the runtime advertises a network namespace other than
 * its own (a peer on "another host"). */
extern _Atomic uint32_t kvm_test_rpc_local_netns;
#define KVM_RPC_LOCAL_FAILED_MAX 8

/* Decodes a member record (key + JSON value) without interning its addresses (they go to rpc
 * and data). Pure; KVMESH_EPROTO with a message for anything malformed (fuzzed). */
int kvm_member_record_decode(const char *key, const uint8_t *value, size_t len,
                             struct kvm_member *m, char *rpc, size_t rpc_cap, char *data,
                             size_t data_cap);
/* As kvm_member_record_decode, and the optional rpc_local fields into lrpc and host ("" when
 * the record has none). */
int kvm_member_record_decode_local(const char *key, const uint8_t *value, size_t len,
                                   struct kvm_member *m, char *rpc, size_t rpc_cap, char *data,
                                   size_t data_cap, char *lrpc, size_t lrpc_cap, char *host,
                                   size_t host_cap);

/* Tracing helpers ([any]). kvm_span_begin starts `out` as a child of parent (a new root when
 * parent is NULL and root is true) and returns out, or NULL when tracing is off or there is
 * nothing to attach to; kvm_span_finish(NULL, ...) is a no-op. kvm_span_wire fills a frame
 * trace context from a span (zero when s is NULL). */
struct obs_span *kvm_span_begin(kvm_rt_t *rt, struct obs_span *parent, bool root, const char *name,
                                struct obs_span *out);
void kvm_span_finish(struct obs_span *s, int rc);
void kvm_span_wire(const struct obs_span *s, struct frame_trace *out);
/* Owner side: starts `out` from a received frame context; NULL when tracing is off here or the
 * context is absent or not sampled. */
struct obs_span *kvm_span_remote(kvm_rt_t *rt, const struct frame_trace *in, const char *name,
                                 struct obs_span *out);

/* metatrace.c [loop]: a metadata handle forwarding to rt->meta that records metadata.* spans
 * under the loop thread's current scope span (set around route calls made for a request).
 * Close it with meta_close before rt->meta. */
int kvm_metatrace_open(kvm_rt_t *rt, meta_t **out);
/* Sets the current scope span (NULL = none); returns the previous one for _leave. */
struct obs_span *kvm_trace_scope_enter(struct obs_span *s);
void kvm_trace_scope_leave(struct obs_span *saved);

/* ---- member.c [loop] ---------------------------------------------------------------------- */
typedef void (*kvm_done_cb)(kvm_rt_t *rt, int rc, const char *err);
void kvm_member_register(kvm_rt_t *rt, kvm_done_cb cb); /* lease + standby record + epoch */
void kvm_member_publish(kvm_rt_t *rt, kvm_done_cb cb);  /* writes the record now */
void kvm_member_refresh(kvm_rt_t *rt, kvm_done_cb cb);  /* one snapshot refresh */
/* a refresh that starts after this call: now, or once the running one ended (one waits) */
void kvm_member_refresh_next(kvm_rt_t *rt, kvm_done_cb cb);
/* [app] Waits (bounded by the deadline) for a membership snapshot refresh that started after
 * this call: for a reader that met an owner its snapshot does not list or cannot reach at the
 * listed address (a runtime that joined or restarted since the last periodic refresh).
 * 0, KVMESH_ETIMEDOUT, KVMESH_EAGAIN (loop queue full) or KVMESH_ENOMEM. */
int kvm_rt_refresh_sync(kvm_rt_t *rt, uint64_t deadline_ms);
void kvm_member_start_timers(kvm_rt_t *rt);
void kvm_member_stop(kvm_rt_t *rt);
void kvm_member_set_state(kvm_rt_t *rt, enum kvm_member_state to);
void kvm_member_leave(kvm_rt_t *rt, kvm_done_cb cb); /* revoke the lease */
/* The member id in the current snapshot, or NULL. Inline: the one membership query of the files
 * below member.c (cold_glue.c, cold_rbatch.c, repair.c), over the snapshot this header defines
 * (docs/architecture.md "Store layering"). */
static inline const struct kvm_member *kvm_member_find(kvm_rt_t *rt, const kvm_runtime_id_t *id)
{
    for (size_t i = 0; i < rt->n_members; i++)
        if (kvm_id128_equal(&rt->members[i].rt.id, id))
            return &rt->members[i];
    return NULL;
}
const struct kvm_member *kvm_member_by_node(kvm_rt_t *rt, env_node_t node);
env_node_t kvm_member_node_of(kvm_rt_t *rt, const kvm_runtime_id_t *id);
bool kvm_member_is_suspect(kvm_rt_t *rt, const kvm_runtime_id_t *id);
/* Whether id ever had a node number here (was in a snapshot or sent a message). [loop] */
bool kvm_member_ever_seen(kvm_rt_t *rt, const kvm_runtime_id_t *id);
void kvm_member_quarantine(kvm_rt_t *rt, const kvm_runtime_id_t *id);
/* Is member id draining in the current snapshot (its record says "draining": an operator's
 * `kvmesh admin drain`, or a runtime leaving through kvmesh_drain)? False for an unknown id. */
bool kvm_member_is_draining(kvm_rt_t *rt, const kvm_runtime_id_t *id);

/* ---- lifecycle.c: operator lifecycle requests (kvmesh/v1/<dep>/lifecycle/<id>) ---------- */
#define KVM_LIFECYCLE_VALUE_MAX 1536 /* fits STORE_MAX_SEGS drained segments */
struct kvm_lifecycle_req {
    enum kvm_member_state want; /* KVM_MS_DRAINING or KVM_MS_ACTIVE (the member itself) */
    uint64_t at_ms;             /* wall ms of the request */
    uint32_t n_segs;            /* segments of the member drained by an operator */
    uint64_t segs[STORE_MAX_SEGS];
};
/* The record asking for want (KVM_MS_DRAINING or KVM_MS_ACTIVE), requested at wall at_ms. */
int kvm_lifecycle_encode(enum kvm_member_state want, uint64_t at_ms, char *buf, size_t cap);
int kvm_lifecycle_encode_req(const struct kvm_lifecycle_req *r, char *buf, size_t cap);
/* Pure; KVMESH_EPROTO with a message for anything malformed. at_ms may be NULL. */
int kvm_lifecycle_decode(const uint8_t *v, size_t len, enum kvm_member_state *want,
                         uint64_t *at_ms);
int kvm_lifecycle_decode_req(const uint8_t *v, size_t len, struct kvm_lifecycle_req *r);

/* ---- owner.c [loop] ----------------------------------------------------------------------- */
int kvm_owner_init(kvm_rt_t *rt);  /* segments + allocators (any thread, before the loop) */
void kvm_owner_fini(kvm_rt_t *rt); /* after the loop stopped */
void kvm_owner_register_rpc(kvm_rt_t *rt);
void kvm_owner_start(kvm_rt_t *rt); /* housekeeping timer */
void kvm_owner_stop(kvm_rt_t *rt);
void kvm_owner_fail_waiters(kvm_rt_t *rt);
/* No reservation open, no waiter, no eviction in flight (a hot upgrade may export). */
bool kvm_owner_settled(kvm_rt_t *rt);
/* The cold tier's part in the owner's paths, installed by the cold glue (cold_glue.c) at
 * kvm_cold_open and removed at kvm_cold_close, so that owner.c never calls it by name. The
 * functions have cold_glue.h's meaning; with none installed the owner has no cold device.
 * The hooks struct is borrowed until it is replaced. [loop] */
typedef void (*kvm_owner_cold_cb)(void *arg, int rc);
struct kvm_owner_cold_hooks {
    bool (*has_device)(kvm_rt_t *rt);
    void (*published)(kvm_rt_t *rt, const kvm_route_t *now);
    void (*slot_committed)(kvm_rt_t *rt, const kvm_ident_t *ident);
    bool (*pins_last)(kvm_rt_t *rt, const kvm_route_t *route);
    bool (*claims)(kvm_rt_t *rt, const kvm_route_t *r);
    int (*evict_claim)(kvm_rt_t *rt, const kvm_route_t *r, const kvm_hot_replica_t *rep,
                       kvm_owner_cold_cb cb, void *arg);
    int (*evict_last)(kvm_rt_t *rt, const kvm_ident_t *ident, const kvm_hot_replica_t *rep,
                      kvm_owner_cold_cb cb, void *arg);
};
void kvm_owner_set_cold_hooks(kvm_rt_t *rt, const struct kvm_owner_cold_hooks *h);
typedef void (*kvm_reserve_cb)(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                               uint64_t token);
void kvm_owner_reserve(kvm_rt_t *rt, const kvm_ident_t *id, uint64_t len, uint32_t ttl_ms,
                       kvm_reserve_cb cb, void *arg);
void kvm_owner_commit(kvm_rt_t *rt, uint64_t seg, uint64_t off);
void kvm_owner_release(kvm_rt_t *rt, uint64_t seg, uint64_t off);
/* A payload received into a reservation over time (put_primary.c's payload sink) brackets the
 * receive (slot_core.h slot_core_land_begin / _end: the late-payload fence): begin 0, or
 * KVMESH_ETIMEDOUT / KVMESH_ENOENT (discard it); end 0 when the bytes may be published, else
 * KVMESH_ETIMEDOUT (the TTL passed meanwhile: release the reservation, publish nothing).
 * kvm_owner_test_expire (tests): the reservation reaches its TTL now. */
int kvm_owner_land_begin(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token);
int kvm_owner_land_end(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token);
int kvm_owner_test_expire(kvm_rt_t *rt, uint64_t seg, uint64_t off, uint64_t token);
/* The same with the slot's identity (slot_core.h slot_note_t; NULL: none): a note naming
 * another slot is ignored and counted. */
struct slot_note;
void kvm_owner_commit_note(kvm_rt_t *rt, uint64_t seg, uint64_t off, const struct slot_note *n);
void kvm_owner_release_note(kvm_rt_t *rt, uint64_t seg, uint64_t off, const struct slot_note *n);
void kvm_owner_hit(kvm_rt_t *rt, uint64_t seg, uint64_t off);
/* Drain: committed local replicas from cursor (slot order), at most cap. */
size_t kvm_owner_list(kvm_rt_t *rt, uint64_t seg_filter, uint64_t *cursor, kvm_hot_replica_t *out,
                      kvm_ident_t *ids, uint64_t *read_tokens, size_t cap);
/* Storage resize: add a segment; retire one (no new slots; still readable); remove a retired,
 * empty segment (KVMESH_EAGAIN while it holds slots). */
int kvm_owner_add_segment(kvm_rt_t *rt, uint64_t size, uint64_t *seg_id);
int kvm_owner_retire_segment(kvm_rt_t *rt, uint64_t seg_id);
int kvm_owner_remove_segment(kvm_rt_t *rt, uint64_t seg_id);
/* Operator segment drain (lifecycle.c): exactly the listed segments of this runtime take no
 * new slots (ids it does not have are ignored); true when a segment's state changed. */
bool kvm_owner_drain_segments(kvm_rt_t *rt, const uint64_t *ids, uint32_t n);
void kvm_owner_segments(kvm_rt_t *rt, struct kvm_seg_info *out, uint32_t *n);
void kvm_owner_stats(kvm_rt_t *rt, struct kvm_rt_stats *st);

/* ---- route_hint.c [loop] ------------------------------------------------------------------ *
 * The last route version seen per key, used only as the expected version of the next route CAS
 * (never served to a read). kvm_hint_get fills an initialized `out` (ident owned by it). */
void kvm_hint_put(kvm_rt_t *rt, const kvm_route_t *r);
void kvm_hint_drop(kvm_rt_t *rt, const kvm_ident_t *id);
bool kvm_hint_get(kvm_rt_t *rt, const kvm_ident_t *id, kvm_route_t *out);
/* As kvm_hint_get, with out->ident a shallow copy of *id (its encoding borrowed: no allocation;
 * out never frees it): for an item's it->cur with id = &it->ident (kvm_item_route_drop). */
bool kvm_hint_get_borrowed(kvm_rt_t *rt, const kvm_ident_t *id, kvm_route_t *out);
void kvm_hint_fini(kvm_rt_t *rt); /* after the loop stopped */
/* Prefetches (no change) what the hint lookups of n identities (ids, every `stride` bytes: an
 * array of structs holding one) will read, for a batch about to look them all up. */
void kvm_hint_prefetch(kvm_rt_t *rt, const kvm_ident_t *ids, size_t stride, size_t n);

/* ---- ops.c and ops_item.c [loop] (the op / item machinery: ops_int.h) --------------------- */
void kvm_ops_run(kvm_op_t *op);
void kvm_ops_release_replica(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep);
/* [loop] best-effort commit notice for a replica a route now references (a put's replay). */
void kvm_ops_commit_replica(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *rep);
void kvm_ops_fill_access(kvm_rt_t *rt, struct kvm_item *it);

#endif
