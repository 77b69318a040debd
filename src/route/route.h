/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route.h — the route service: lookup, fenced CAS and owner enumeration of object routes, the
 * one boundary between the store runtime (src/store) and the route modes behind it:
 *
 *   ROUTE_MODE_EMBEDDED_WRH  (default) the peer authority mesh: keys map to logical shards;
 *                            each shard's authority set is the WRH top-k of the live,
 *                            route-capable, compatible members; the fenced primary applies CAS
 *                            and mirrors synchronously to the set (route_svc.c, route_auth.c,
 * route_client.c); ROUTE_MODE_METADATA_ONLY routes stored directly in the metadata backend, for
 * bring-up and compatibility testing (route_metaonly.c).
 *
 * The service is a sans-I/O state machine over the env (src/env/env.h): it sends peer messages
 * with env_send() and receives them through route_on_message(); it uses the metadata plane
 * (src/meta/meta.h) only for shard-authority records, the cluster route policy and (in
 * MetadataOnly mode) routes — never for a steady-state EmbeddedWrh lookup or CAS.
 *
 * Membership is pushed in, not pulled: the runtime (or a simulator scenario) calls
 * route_set_members() with each new live snapshot; the service never reads membership itself.
 *
 * Threading: a route_svc_t belongs to its env's loop thread; all calls and callbacks happen
 * there. Ownership: inputs are copied before a call returns; routes passed to callbacks are
 * valid only during the callback (kvm_route_copy what you keep).
 */
#ifndef KVMESH_ROUTE_ROUTE_H
#define KVMESH_ROUTE_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ident.h"
#include "core/route.h"
#include "core/version.h"
#include "env/env.h"
#include "meta/meta.h"
#include "obs/metrics.h"

enum route_mode { ROUTE_MODE_EMBEDDED_WRH = 0, ROUTE_MODE_METADATA_ONLY = 1 };

#define ROUTE_PROTOCOL_VERSION 1

/* The cluster route policy: created once per deployment (create-if-absent in metadata); a later
 * runtime whose policy differs refuses to start with an error naming the field. */
typedef struct route_policy {
    enum route_mode mode;
    uint32_t top_k;            /* authorities per shard (1..WRH_MAX_K) */
    uint32_t n_shards;         /* logical shards (1..KVM_MAX_LOGICAL_SHARDS) */
    uint32_t protocol_version; /* ROUTE_PROTOCOL_VERSION */
} route_policy_t;

/* One member of a live membership snapshot, as the route service needs it. */
typedef struct route_member {
    kvm_runtime_t rt;       /* id + epoch of the live incarnation */
    env_node_t node;        /* where env_send() reaches it */
    double weight;          /* WRH weight (> 0) */
    bool route_capable;     /* may be a route authority */
    uint32_t route_version; /* highest route protocol version it speaks */
} route_member_t;

typedef struct route_svc route_svc_t;

/*
 * Inline reads, the authority side (docs/protocol.md "Inline reads"; EmbeddedWrh only): given at
 * init by the layer above (the store), the route never calls it otherwise. When this runtime's
 * authority answers a READ with a settled route (not busy, not dirty) and the requester accepts
 * up to `max` bytes, get(ctx, route, max, ...) is called on the loop: 0 with *data / *len set to
 * the payload of a replica of exactly that route which this runtime owns and which is committed
 * now (len == route->length <= max), pinned until put(ctx, pin), which the service calls before
 * the handler returns (the answer is encoded in between) or, when the bytes go as the answer's
 * attachment (the requester asked RMSG_READ_ATT and the env carries it: env_send_att), once
 * their write completed (from the sent callback, on the loop, possibly after the service was
 * freed: put and ctx must outlive every send); nonzero = none (a plain answer).
 * get NULL: this authority never answers inline.
 */
typedef struct route_inline_src {
    int (*get)(void *ctx, const kvm_route_t *route, uint32_t max, const uint8_t **data, size_t *len,
               void **pin);
    void (*put)(void *ctx, void *pin);
    void *ctx;
} route_inline_src_t;

typedef struct route_svc_opts {
    env_t *env;
    meta_t *meta; /* shard authority records, policy, MetadataOnly routes */
    const char *deployment;
    kvm_runtime_t self;
    route_policy_t policy;
    uint32_t shard_lease_ms;       /* authority lease length (0 = default) */
    uint32_t request_timeout_ms;   /* per lookup/CAS end to end (0 = default) */
    struct obs_registry *metrics;  /* borrowed, outlives the service; NULL: a private registry */
    route_inline_src_t inline_src; /* copied; get NULL = never answer inline */
} route_svc_opts_t;

/* The longest a route CAS request can be in flight: its operation ends at request_timeout_ms
 * (route_svc_opts_t), and its last attempt, sent before that deadline, waits at most
 * ROUTE_CAS_LATE_MS more (one peer call and one attempt; a claim-carrying CAS waits longer only
 * while the deadline is further off: route_client.c cas_send). A CAS request is answered or given
 * up within request_timeout_ms + ROUTE_CAS_LATE_MS of its operation's start: the floor of
 * tombstone_retention_ms (src/api/config.c, docs/tenancy.md "Purging a quota tenant's
 * tombstones", step 7). */
#define ROUTE_CAS_LATE_MS 550u

/* Creates the service (and, when it is the first runtime, the cluster policy). Completes
 * asynchronously: cb(arg, rc) runs once the policy has been checked against metadata;
 * KVMESH_EINCOMPAT with a message naming the differing field when it does not match. */
int route_svc_new(route_svc_t **out, const route_svc_opts_t *opts, void (*cb)(void *, int),
                  void *arg);
/* Stops serving, completes pending calls with KVMESH_ECANCELED, frees. */
void route_svc_free(route_svc_t *svc);

/* Pushes a new live membership snapshot (the generation increases with every change). */
void route_set_members(route_svc_t *svc, uint64_t generation, const route_member_t *members,
                       size_t n);
/* Delivers a peer message of the route protocol (type in the ROUTE_MSG_* band). */
void route_on_message(route_svc_t *svc, const env_msg_t *msg);
#define ROUTE_MSG_BASE  0x100u
#define ROUTE_MSG_LIMIT 0x1ffu

/* Lookup. rc 0 with the route (a tombstone is returned as such), KVMESH_ENOENT when absent,
 * KVMESH_EUNAVAILABLE when the shard has no valid authority set now, KVMESH_ECORRUPT on a
 * protocol conflict (equal versions, different values), KVMESH_ETIMEDOUT. stale_generation
 * answers are handled inside (refresh and retry, bounded). */
typedef void (*route_lookup_cb)(void *arg, int rc, const kvm_route_t *route);
int route_lookup(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg);

/* CAS: applies `next` (its version and predecessor_version are assigned by the authority) only
 * if the current route's version equals `expected` (KVM_ROUTE_VERSION_NONE = the key has no
 * route or a finalized tombstone whose retention passed). Results:
 *   0                     applied; `route` is the published route with its new version;
 *   KVMESH_ECONFLICT      not applied; `route` is the current route (NULL when absent);
 *   KVMESH_EINDETERMINATE the primary applied it but mirroring did not complete: the outcome is
 *                         unknown to the caller (repaired before the next mutation of the key);
 *   KVMESH_EUNAVAILABLE, KVMESH_ETIMEDOUT: not known to be applied. */
typedef void (*route_cas_cb)(void *arg, int rc, const kvm_route_t *route);
int route_cas(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
              route_cas_cb cb, void *arg);

/* Critical-path accounting of one lookup or CAS (optional): `rounds` is incremented once per
 * attempt that sent its request to at least one other runtime (EmbeddedWrh: a READ fan-out to
 * an authority set that is not only this runtime, or a CAS to a primary that is not this
 * runtime; MetadataOnly: once per call, the metadata round trip). Requests to this runtime's own
 * authority are not round trips; the primary's mirroring is counted by the primary
 * (kvmesh_route_mirror_publications_total). The caller owns *cost and keeps it valid until the
 * callback ran; the service writes it only before the callback. */
typedef struct route_cost {
    uint32_t rounds;
} route_cost_t;
int route_lookup_costed(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg,
                        route_cost_t *cost);
int route_cas_costed(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
                     route_cas_cb cb, void *arg, route_cost_t *cost);

/*
 * Lookup with an inline read (docs/protocol.md "Inline reads"; EmbeddedWrh): as
 * route_lookup_costed, and every READ to another runtime says it accepts up to inl->max payload
 * bytes. An authority that owns a committed replica of the version it answers (and was given an
 * inline source) sends those bytes with its answer. Before the callback the service sets
 * inl->got: true only when inl->buf holds the payload of exactly the version the callback
 * returns (inl->len bytes, sent by the authority inl->from, which is that replica's owner).
 * inl->buf must be NULL on entry; the service allocates it (malloc, exactly the bytes) only when
 * such bytes arrive, and from the callback on it is the caller's to free (NULL when got is
 * false). The bytes are not verified here: the caller checks them against the route's checksum
 * as it checks a transport read. The caller keeps *inl valid until the callback ran; the service
 * writes it only before the callback. inl NULL or max 0: a plain lookup. MetadataOnly: a plain
 * lookup (got false). Lookups started in a batching window (route_batch_begin) may each carry
 * their own inl (a batch get, with dst set): their READs to one authority travel as one RMSG_BATCH
 * and the authority answers each that it can inline, within ROUTE_INLINE_BATCH_MAX bytes per
 * batch message, the bytes inside the batch answer's items (RMSG_READ_INLINE).
 */
typedef struct route_inline {
    uint32_t max;          /* in: most payload bytes accepted (<= ROUTE_INLINE_MAX) */
    bool att;              /* in: the bytes may come as the answer's attachment (no copy at the
                              authority: RMSG_READ_ATT); the caller verifies them (see above) */
    uint8_t *buf;          /* out: the bytes (see above) */
    uint32_t len;          /* out */
    bool got;              /* out */
    kvm_runtime_id_t from; /* out: the authority that sent the bytes (when got) */
    /* in: NULL = the service allocates buf (above); else the caller's room of max bytes, which
     * the service never allocates or frees: the bytes are copied there and buf == dst when got
     * (a batch get's items share one block: src/store/get_inline.c); with att, the bytes may
     * come in the attachment of the authority's answer batch (one buffer for the batch's
     * attached answers, copied once at the authority: route_batch.c route_emit_att) or as a
     * single answer's attachment, and are copied into dst alike */
    uint8_t *dst;
    /* in: NULL, or the caller's buffer that a single answer's attachment may be received
     * straight into (its payload sink: src/store/get_inline.c): buf may then equal it (the
     * bytes landed there whole), and the service never frees it */
    uint8_t *lent;
} route_inline_t;
/* The most inline bytes one lookup takes (route_msg.h ROUTE_MSG_MAX_INLINE_ATT): as the
 * answer's attachment (att); the copied form (att false, or dst set) carries at most
 * ROUTE_INLINE_COPIED_MAX (ROUTE_MSG_MAX_INLINE), and an authority that could answer only the
 * copied way (no attachment sender for that peer) sends a plain answer for a longer value. */
#define ROUTE_INLINE_MAX        (4u * 1024 * 1024)
#define ROUTE_INLINE_COPIED_MAX (256u * 1024)
/* The most inline bytes an authority lends to the READs of one received batch message
 * (route_msg.h RMSG_BATCH: a batch get's lookups at one authority), over all its items; a READ
 * past it gets a plain answer (its requester reads the replica). A requester asks for no more
 * than this over the items of one batch op (get_inline.c). */
#define ROUTE_INLINE_BATCH_MAX (1024u * 1024)
int route_lookup_inline(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg,
                        route_cost_t *cost, route_inline_t *inl);

/* The sink of the pending lookup that msg answers, when msg (as received from msg->from, before
 * route_on_message) is a READ answer whose bytes follow as its attachment (RMSG_READ_ATT) to a
 * READ of the lookup's current attempt, within its inl->max; *att_len then receives the
 * attachment's length. NULL otherwise (another message, a call no longer pending, a plain or
 * failed answer). Lets a receiver put the attachment straight into inl->lent before the message
 * is delivered. Loop thread. */
route_inline_t *route_inline_pending(route_svc_t *svc, const env_msg_t *msg, uint32_t *att_len);

/*
 * Batching window: route_lookup*() and route_cas*() calls made between route_batch_begin() and
 * the matching route_batch_end() (nestable) start together on one later loop turn, and their
 * first requests travel grouped by destination as RMSG_BATCH messages (route_msg.h): one per
 * shard primary for the CAS items (whatever their shards), one per authority for the lookups;
 * the primary mirrors the CAS items it applied to each secondary as one batch, and the answers
 * come back as one batch. Each item stays its own call: its own fencing (shard, generation,
 * token, target incarnation), admission, retries and result, exactly as if it were sent alone,
 * so one item's failure never fails or hides another's. Retries and retransmissions go alone.
 * Accounting (route_cost_t): the window's first attempts count one round per remote CAS
 * destination and one for all of its lookups (a parallel fan-out, as one lookup's is), charged
 * to the first costed item of each. MetadataOnly: no effect (each call is its own metadata
 * round trip). Loop thread, like every call here.
 */
void route_batch_begin(route_svc_t *svc);
void route_batch_end(route_svc_t *svc);

/*
 * Group hooks: begin runs before the service handles a group of work at once (the items of a
 * received RMSG_BATCH, a batching window's turn) and end after it (once the group's own route
 * messages left), outermost level only, so the callbacks the group's items run (lookup and CAS
 * callbacks) fall between them. The store groups its per-item notifications to owners there
 * (src/store/slot_batch.c). Either may be NULL; set once, before traffic. Loop thread.
 */
typedef void (*route_group_fn)(void *ctx);
void route_set_group_hooks(route_svc_t *svc, route_group_fn begin, route_group_fn end, void *ctx);

/*
 * CAS with a claim (EmbeddedWrh; the tenant quota's Pending -> Publishing claim made by the
 * fenced primary immediately before it applies the CAS, docs/protocol.md "CAS with a claim").
 * The route layer carries `claim` (opaque, <= ROUTE_CLAIM_MAX bytes) to the shard's primary
 * with the CAS request. The primary admits the CAS exactly like route_cas (a refusal is answered
 * before any claim: ECONFLICT with the current route, ESTALE_GENERATION, ...), reserves the
 * version it will publish, holds the key (other CASes of it answer EAGAIN meanwhile), and calls
 * its claim hook with the claim, its shard generation, fencing token and that version. When the
 * hook answers 0 the CAS is applied with that version and mirrored as usual, and the reply
 * carries the hook's reply blob; any other hook answer is the CAS's result, nothing applied.
 *   cb results: as route_cas, plus KVMESH_ENOTSUP (the primary has no claim hook: nothing was
 *   claimed or applied) and the hook's refusals (e.g. KVMESH_ECANCELED). `reply` is valid during
 *   the callback only (NULL/0 when none). MetadataOnly mode: KVMESH_ENOTSUP at once.
 */
#define ROUTE_CLAIM_MAX (16u * 1024)
typedef void (*route_cas_claim_cb)(void *arg, int rc, const kvm_route_t *route,
                                   const uint8_t *reply, size_t reply_len);
int route_cas_claim(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
                    const uint8_t *claim, size_t claim_len, route_cas_claim_cb cb, void *arg,
                    route_cost_t *cost);

/* The primary side: where the claim is made. The hook returns 0 and calls done(done_arg, ...)
 * exactly once later (rc 0: claimed, `reply` <= ROUTE_CLAIM_MAX bytes goes back to the writer,
 * copied during the call), or returns a negative code without calling done. The hook's owner
 * clears it (fn NULL) before it stops answering; a service freed with claims in flight drops
 * them, so the owner must also stop calling done once it has cleared its hook (the store
 * clears its hook when it closes the tenant handle, whose callbacks end there). */
typedef struct route_claim_at {
    uint64_t generation;              /* the shard authority record's generation */
    uint64_t fencing_token;           /* the primary's token */
    kvm_route_version_t next_version; /* the version the CAS will publish */
} route_claim_at_t;
typedef void (*route_claim_done_fn)(void *done_arg, int rc, const uint8_t *reply, size_t reply_len);
typedef int (*route_claim_fn)(void *ctx, const uint8_t *claim, size_t claim_len,
                              const route_claim_at_t *at, route_claim_done_fn done, void *done_arg);
void route_set_claim_hook(route_svc_t *svc, route_claim_fn fn, void *ctx);

/*
 * The shard primary, as hints for the store's one-exchange put (src/store/put_primary.c;
 * EmbeddedWrh only, loop thread). Neither starts anything or changes the service's state, and
 * neither is ever a reason to serve a route: every CAS stays fenced at the primary it reaches.
 *   route_primary_hint: the primary of ident's shard as this runtime's client view has it now
 *     (0, *primary set: id and epoch); KVMESH_EUNAVAILABLE when the view is not valid (no
 *     refresh is started); KVMESH_ENOTSUP in MetadataOnly mode.
 *   route_is_primary_now: whether this runtime's authority is the active primary of ident's
 *     shard now (as it would admit a CAS of that shard: active, token installed, lease valid).
 */
int route_primary_hint(const route_svc_t *svc, const kvm_ident_t *ident, kvm_runtime_t *primary);
bool route_is_primary_now(route_svc_t *svc, const kvm_ident_t *ident);

/* Owner-to-key enumeration, paginated: routes that reference `owner` in a hot replica. The
 * cursor is opaque (NULL/0-length = start). `complete` is true only when every shard answered
 * and nothing remains — a partial page never claims absence. */
#define ROUTE_OWNER_PAGE_MAX 256
typedef struct route_owner_page {
    const kvm_route_t *routes;
    size_t n;
    const uint8_t *next_cursor; /* pass back to continue; valid during the callback */
    size_t next_cursor_len;
    bool complete;
} route_owner_page_t;
typedef void (*route_owner_cb)(void *arg, int rc, const route_owner_page_t *page);
int route_owner_scan(route_svc_t *svc, const kvm_runtime_id_t *owner, const uint8_t *cursor,
                     size_t cursor_len, uint32_t limit, route_owner_cb cb, void *arg);

/* Counters for tests. The first group is a view of the service's metrics registry (counted
 * once, where the event happens): lookups = kvmesh_route_lookups_total (completed, any result),
 * cas_* = kvmesh_route_cas_total by result at this runtime's authorities, read_repairs =
 * kvmesh_route_repairs_total{result="repaired"}, mirrors = kvmesh_route_mirror_publications_total
 * (completed, any outcome). The second group has no exported family and is kept by the service. */
typedef struct route_stats {
    uint64_t lookups, cas_applied, cas_conflict, cas_stale_generation, cas_not_primary,
        cas_indeterminate;
    uint64_t read_repairs, mirrors;
    /* service-internal */
    uint64_t protocol_conflicts, state_transfers;
    uint64_t meta_calls;    /* metadata calls this service issued */
    uint64_t stale_answers; /* stale_generation answers this service's own calls received */
    /* acquisitions that found every member of the last ACTIVE set gone and began empty */
    uint64_t state_lost;
    uint64_t batches_sent, batch_items_sent; /* RMSG_BATCH messages sent, the items in them */
    uint64_t batches_received;               /* RMSG_BATCH messages received and unpacked */
    /* ident buffers the client's op records allocated (kept with the record: a lookup or CAS on
     * a reused record copies its ident into it) */
    uint64_t op_enc_allocs;
    /* READ answers whose inline bytes this authority sent in a batch's attachment (RMSG_READ_ATT
     * items of an RMSG_BATCH: route_emit_att), and the attached answers the client took bytes
     * from */
    uint64_t att_items_batched, att_items_taken;
} route_stats_t;
void route_get_stats(const route_svc_t *svc, route_stats_t *out);

/* Any thread: the routes this runtime's authorities hold now (every shard table, any role), the
 * finalized tombstones among them, and the tombstones purged since start. EmbeddedWrh only
 * (MetadataOnly: zeros; its routes live in metadata). A tombstone with a deadline (finalized,
 * or pending with retain_until_ms set) is purged from an
 * authority's table ROUTE_PURGE_MARGIN_MS after its retain_until_ms, from the table's expiry
 * index (never a scan), unless a mirror of it is in flight or partial (busy/dirty). */
void route_table_counts(const route_svc_t *svc, uint64_t *entries, uint64_t *tombs,
                        uint64_t *purged);
/* Any thread, MetadataOnly: purge txns whose answer did not come (an error after or before
 * they were sent): each may have purged its tombstone without counting it in purged. Summed
 * over the runtimes: purged <= tombstones purged <= purged + this. 0 in EmbeddedWrh (an
 * authority purges its own table). */
uint64_t route_table_purge_unknown(const route_svc_t *svc);
/* Any thread: the bytes of those tables (route_table_mem summed over the shard tables, refreshed
 * with the counts): the entry allocations, of them the packed routes and the identity
 * encodings, and the rest (expiry index, interning sets, table headers). Zeros in MetadataOnly. */
typedef struct route_mem {
    uint64_t entry_bytes, packed_bytes, ident_bytes, other_bytes;
} route_mem_t;
void route_table_mem_total(const route_svc_t *svc, route_mem_t *out);

#endif
