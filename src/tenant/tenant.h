/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant.h — hard tenant isolation: tenant-root policies and the strict quota operation protocol
 * (specification "Multi-Tenant Isolation"; docs/tenancy.md is the guide).
 *
 * A sans-I/O layer: it uses only core, env, obs and meta. Every durable effect is a meta.h
 * transaction (compare on mod_rev, so it runs unchanged on memory, Redis and etcd); the route
 * side (exact route lookups, replays through the fenced primary) is reached only through the
 * callbacks it is given (tn_route_ops_t). It never includes route, store, net or api headers.
 *
 * Metadata records (keys from src/meta/keyspace.h, all scoped by tenant; exact lookups only):
 *   tenant-policies/<tenant>            tn_policy_rec_t   hard policy, create-if-absent
 *   quotas/<tenant>                     tn_usage_t        committed + pending bytes/objects
 *   objects/<tenant>/<domain|~>/<key>   tn_objrow_t       committed accounting + object lock
 *   acct-ops/<tenant>/<op id>           tn_op_t           accounting operation record
 *   acct-due/<tenant>/<state>/<deadline ms>/<op id>      due index of the reconciler
 *
 * Operation state machine (tn_op_set_state asserts these edges and no others):
 *
 *        reserve            claim (fenced primary)           finalize
 *   NONE -------> PENDING --------------------> PUBLISHING ----------> FINALIZED
 *                    |                           |    ^
 *                    | abort / expiry            +----+ claim again with the same publish
 *                    v                                  token (replay), reconcile
 *                 ABORTED
 *
 * Every call is idempotent under its operation id: repeating it returns the current state.
 * Refusals: KVMESH_EQUOTA (message names bytes or objects, the limit and the usage),
 * KVMESH_ETOOBIG (the object alone exceeds the tenant's byte limit: no recovery can admit it),
 * KVMESH_EAGAIN (another non-terminal operation holds the object), KVMESH_ECONFLICT (expected
 * predecessor or accounting version differs; a claim with another publish token; abort of a
 * publishing or finalized operation; finalize of another version), KVMESH_ECANCELED (claim or
 * finalize of an aborted operation), KVMESH_ENOENT (unknown operation), KVMESH_EINCOMPAT (no
 * bootstrapped policy, or a stored hard policy that differs: the message names the field).
 *
 * Threading: a tn_t lives on its env's loop thread with its meta_t; callbacks run there.
 * Ownership: request strings are copied before a call returns; a tn_op_view_t is valid only
 * during the callback. tn_close() cancels what it can: no user callback runs after it returns.
 */
#ifndef KVMESH_TENANT_TENANT_H
#define KVMESH_TENANT_TENANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"
#include "core/version.h"
#include "env/env.h"
#include "meta/keyspace.h"
#include "meta/meta.h"

#define TN_SCHEMA_VERSION 1    /* of every record this layer writes */
#define TN_PAYLOAD_MAX    4096 /* bytes of a route/tombstone mutation payload in a claim */
#define TN_MAX_TENANTS    64   /* bootstrapped policies per tn_t */
#define TN_ATTEMPTS_MAX   64   /* read/compare rounds of one call before KVMESH_ECONFLICT */
#define TN_BATCH_MAX      64   /* items of one tn_reserve_batch */
#define TN_PAGE_MAX       256  /* due entries one reconciliation pass reads per state */
#define TN_TENANT_CAP     (KVM_TENANT_MAX_LEN + 1)
#define TN_DOMAIN_CAP     (KVM_DOMAIN_MAX_LEN + 1)
#define TN_KEY_CAP        (KVM_KEY_MAX_LEN + 1)
#define TN_OPID_CAP       (KS_OPID_LEN + 1)

/* ---- policy -----------------------------------------------------------------------------------
 */

/* A tenant-root policy as configured. Hard fields are stored, fingerprinted and must match the
 * stored record; soft fields are runtime-local (never stored, never used for admission). */
typedef struct tn_policy {
    /* hard */
    uint32_t policy_version; /* >= 1; a change needs a controlled restart */
    uint64_t max_bytes;      /* >= 1 */
    uint64_t max_objects;    /* >= 1 */
    /* soft, runtime-local */
    uint32_t max_remote_batch_items_per_tenant;
    uint64_t max_remote_batch_bytes;
} tn_policy_t;

/* The stored form: schema version, the hard fields, their fingerprint. */
typedef struct tn_policy_rec {
    uint32_t schema_version;
    uint32_t policy_version;
    uint64_t max_bytes;
    uint64_t max_objects;
    uint64_t fingerprint;
} tn_policy_rec_t;

int tn_policy_validate(const tn_policy_t *p);
/* XXH3-64 over the canonical encoding of (schema version, policy version, max_bytes,
 * max_objects): equal hard fields give equal fingerprints on every host; soft fields do not
 * enter it. */
uint64_t tn_policy_fingerprint(const tn_policy_t *p);
void tn_policy_record(const tn_policy_t *p, tn_policy_rec_t *out);
/* 0 when local's hard fields equal the stored record, else KVMESH_EINCOMPAT with a message that
 * names the first differing field (schema_version, policy_version, max_bytes, max_objects,
 * fingerprint), both values and the tenant. */
int tn_policy_match(const tn_policy_rec_t *stored, const tn_policy_t *local, const char *tenant);

/* ---- records ----------------------------------------------------------------------------------
 */

enum tn_state {
    TN_ST_NONE = 0, /* no record */
    TN_ST_PENDING = 1,
    TN_ST_PUBLISHING = 2,
    TN_ST_FINALIZED = 3,
    TN_ST_ABORTED = 4,
};
enum tn_kind { TN_KIND_CREATE = 1, TN_KIND_OVERWRITE = 2, TN_KIND_DELETE = 3 };

const char *tn_state_name(enum tn_state s); /* "pending", ... (also the due-index part) */
const char *tn_kind_name(enum tn_kind k);
bool tn_state_is_terminal(enum tn_state s);
bool tn_transition_ok(enum tn_state from, enum tn_state to);

/* quotas/<tenant>: authoritative usage. committed = the finalized live set; pending = positive
 * deltas of non-terminal operations. Admission: committed + pending + positive delta <= limit. */
typedef struct tn_usage {
    uint64_t committed_bytes, committed_objects;
    uint64_t pending_bytes, pending_objects;
    uint64_t n_pending, n_publishing; /* non-terminal operations per state */
    uint32_t policy_version;
} tn_usage_t;

/* objects/<tenant>/<domain>/<key>: committed accounting of one object and its lock. */
typedef struct tn_objrow {
    uint64_t acct_version;             /* +1 per finalized operation (0 = never) */
    bool live;                         /* a finalized create/overwrite is the current state */
    uint64_t len;                      /* committed length when live */
    kvm_route_version_t route_version; /* route version of the last finalized operation */
    char last_op[TN_OPID_CAP];         /* last finalized operation ("" = none) */
    char lock_op[TN_OPID_CAP];         /* the one non-terminal operation ("" = unlocked) */
    /* deleted rows: the purge deadline D (wall ms) of the tombstone the delete published; 0 = no
     * deadline (never purged; also every row of the old layout, which decodes as 0) */
    uint64_t tomb_until_ms;
} tn_objrow_t;

/* acct-ops/<tenant>/<op id>. */
typedef struct tn_op {
    char id[TN_OPID_CAP];
    enum tn_state state;
    enum tn_kind kind;
    char tenant[TN_TENANT_CAP], domain[TN_DOMAIN_CAP], key[TN_KEY_CAP];
    kvm_route_version_t expected_route; /* predecessor route version */
    uint64_t expected_acct;             /* object accounting version the reserve saw */
    uint64_t next_len;                  /* intended length (0 for a delete) */
    int64_t delta_bytes, delta_objects; /* derived from committed state, signed */
    uint64_t deadline_ms;               /* due-index deadline of the current state */
    uint64_t writer_epoch;
    /* set by the claim (PUBLISHING) */
    uint64_t generation, fencing_token;
    kvm_route_version_t next_version;
    uint64_t publish_token, payload_fp;
    uint32_t payload_len;
    uint8_t payload[TN_PAYLOAD_MAX];
    uint32_t recon_attempts; /* reconciliation retries while PUBLISHING */
} tn_op_t;

/* The one place that changes op->state: asserts the transition is an edge of the diagram. */
void tn_op_set_state(tn_op_t *op, enum tn_state to);
/* Consistency of single records and of their combination (0 or KVMESH_ECORRUPT + message). */
int tn_op_check(const tn_op_t *op);
int tn_usage_check(const tn_usage_t *u);

uint64_t tn_pos(int64_t delta); /* max(delta, 0) */

/* Codecs (wire.h header with schema ids 256..259, then fixed big-endian fields). Decoders never
 * crash: KVMESH_EPROTO for anything malformed. */
int tn_policy_encode(const tn_policy_rec_t *r, uint8_t *buf, size_t cap, size_t *len);
int tn_policy_decode(const uint8_t *buf, size_t len, tn_policy_rec_t *out);
int tn_usage_encode(const tn_usage_t *u, uint8_t *buf, size_t cap, size_t *len);
int tn_usage_decode(const uint8_t *buf, size_t len, tn_usage_t *out);
int tn_objrow_encode(const tn_objrow_t *r, uint8_t *buf, size_t cap, size_t *len);
int tn_objrow_decode(const uint8_t *buf, size_t len, tn_objrow_t *out);
#define TN_OP_ENC_MAX                                                                              \
    (64 + 3 * 8 + TN_TENANT_CAP + TN_DOMAIN_CAP + TN_KEY_CAP + 256 + TN_PAYLOAD_MAX)
int tn_op_encode(const tn_op_t *op, uint8_t *buf, size_t cap, size_t *len);
int tn_op_decode(const uint8_t *buf, size_t len, tn_op_t *out);

/* ---- the protocol handle ------------------------------------------------------------------- */

typedef struct tn tn_t;

/* test-only broken variants (tn_config_t.test_bugs), caught by the simulator */
#define TN_TEST_BUG_ABORT_PUBLISHING 1u  /* abort accepted from PUBLISHING */
#define TN_TEST_BUG_NO_PENDING_TERM  2u  /* reserve checks committed + delta, not + pending */
#define TN_TEST_BUG_NO_REPLAY        4u  /* reconciliation never replays: degrades instead */
#define TN_TEST_BUG_ABORT_UNPROVEN   8u  /* reconciliation aborts PUBLISHING without the proof */
#define TN_TEST_BUG_NONE_BEFORE_DUE  16u /* NONE admitted against any deleted row (withdrawn) */
#define TN_TEST_BUG_NO_ABSENT_FINAL  32u /* a PUBLISHING delete whose route is absent: degraded */

typedef struct tn_config {
    const char *deployment;  /* keyspace deployment name */
    uint64_t writer_epoch;   /* this runtime's epoch: the first half of its operation ids */
    uint32_t timeout_ms;     /* per metadata call (0 = META_DEFAULT_TIMEOUT_MS) */
    uint32_t pending_ttl_ms; /* a PENDING operation expires after this (0 = 30 s) */
    uint32_t publish_ttl_ms; /* a PUBLISHING operation is due for reconciliation after (0 = 10 s) */
    uint32_t backoff_max_ms; /* cap of the reconciliation backoff (0 = 60 s) */
    uint32_t retain_ms;      /* terminal history kept this long (0 = 10 min) */
    uint32_t purge_margin_ms; /* M: bounds the wall-clock skew between runtimes; a put expecting
                                 NONE is admitted against a row deleted with a tombstone of
                                 deadline D only at now >= D + M (0 = 1000, the route purge's
                                 ROUTE_PURGE_MARGIN_MS / MO_PURGE_MARGIN_MS) */
    unsigned test_bugs;       /* TN_TEST_BUG_* (tests only) */
} tn_config_t;

int tn_new(tn_t **out, env_t *env, meta_t *m, const tn_config_t *cfg);
/* No user callback runs after this returns; memory is released once the metadata calls still
 * in flight complete (close the meta_t after this to make them complete now). */
void tn_close(tn_t *tn);

/* A fresh operation id "<epoch>-<seq>" (the writer keeps it to retry the same operation). */
void tn_next_op_id(tn_t *tn, char out[TN_OPID_CAP]);

/* Result of a quota call: the operation as stored after the call, and the tenant's usage. */
typedef struct tn_op_view {
    const tn_op_t *op; /* NULL when rc != 0 and no record exists */
    tn_usage_t usage;  /* after the call (zero when unknown) */
    bool repeated;     /* the call found its transition already done (idempotent repeat) */
} tn_op_view_t;
typedef void (*tn_cb)(void *arg, int rc, const tn_op_view_t *v);

/* Policy bootstrap: creates tenant-policies/<tenant> if absent, else requires it to match
 * (tn_policy_match); caches the hard policy for this tn_t. cb gets a view with op == NULL. */
int tn_bootstrap(tn_t *tn, const char *tenant, const tn_policy_t *policy, tn_cb cb, void *arg);

typedef struct tn_reserve_req {
    const char *tenant, *domain, *key; /* domain NULL or "" = none */
    const char *op_id;                 /* from tn_next_op_id; reuse it to retry */
    bool is_delete;
    uint64_t next_len;                  /* create/overwrite: the new length */
    kvm_route_version_t expected_route; /* predecessor route version (NONE for a first create) */
    bool check_acct;                    /* also require expected_acct == the row's version */
    uint64_t expected_acct;
} tn_reserve_req_t;

int tn_reserve(tn_t *tn, const tn_reserve_req_t *req, tn_cb cb, void *arg);

/* Canonical order: the batch is reserved item by item in objects/ key order; on the first
 * refusal every reserved item is aborted (in reverse order) and cb reports that item's rc, its
 * index in *failed_index (original order) and no view. All-or-nothing before data transfer. */
typedef void (*tn_batch_cb)(void *arg, int rc, size_t failed_index);
int tn_reserve_batch(tn_t *tn, const tn_reserve_req_t *reqs, size_t n, tn_batch_cb cb, void *arg);

/* Called by the fenced route primary immediately before its route CAS: PENDING -> PUBLISHING
 * recording the shard generation, fencing token, next route version, payload and its
 * fingerprint and the publish token. Repeating it with the same publish token and payload is a
 * replay (PUBLISHING -> PUBLISHING, generation/token/next version updated). */
typedef struct tn_claim_req {
    const char *tenant, *domain, *key, *op_id;
    uint64_t generation, fencing_token, publish_token;
    kvm_route_version_t next_version;
    const uint8_t *payload;
    size_t payload_len; /* <= TN_PAYLOAD_MAX */
    /* true: the route CAS is applied right after this claim (the fenced primary's claim hook,
     * which calls it only for a CAS whose expectation matches, so the route does not carry the
     * operation). An operation already FINALIZED is then refused with ECONFLICT: its CAS
     * applied once, and this one is a delayed duplicate that would apply it a second time (a
     * CAS expecting NONE meets its successor's due tombstone; docs/tenancy.md "Purging a quota
     * tenant's tombstones", step 7). false (a writer's own claim, a claim recording the version
     * of an applied CAS): a FINALIZED operation answers 0 as a repeat. */
    bool cas_follows;
} tn_claim_req_t;
int tn_claim(tn_t *tn, const tn_claim_req_t *req, tn_cb cb, void *arg);

/* PUBLISHING -> FINALIZED for the matching next version: moves the positive pending delta into
 * committed usage, applies the derived negative delta, updates the object row, unlocks it. */
int tn_finalize(tn_t *tn, const char *tenant, const char *domain, const char *key,
                const char *op_id, kvm_route_version_t next_version, tn_cb cb, void *arg);

/* tn_finalize of a delete whose tombstone carries the purge deadline tomb_until_ms (D, wall ms;
 * 0 = none): the deleted object row records it, so that a later put expecting NONE is admitted
 * once now >= D + purge_margin_ms (the tombstone is then due or purged: the route CAS treats both
 * as absent), and the reconciler may purge the deleted row (docs/tenancy.md "Purging a quota
 * tenant's tombstones"). tn_finalize(...) is tn_finalize_tomb(..., 0, ...). */
int tn_finalize_tomb(tn_t *tn, const char *tenant, const char *domain, const char *key,
                     const char *op_id, kvm_route_version_t next_version, uint64_t tomb_until_ms,
                     tn_cb cb, void *arg);

/* PENDING -> ABORTED only: releases the positive pending delta and the object lock. */
int tn_abort(tn_t *tn, const char *tenant, const char *domain, const char *key, const char *op_id,
             tn_cb cb, void *arg);

/*
 * Hints: this handle's cached operation record and usage row of (tenant, op_id), as an opaque
 * blob another runtime may import (the store carries it in the route CAS request and its reply)
 * so that its next call on that operation starts with its write: reserve, claim and finalize
 * then cost one metadata round trip each when nothing else changed those records. A stale or
 * forged hint costs one failed compare (whose else branch returns the real records), never a
 * wrong decision: only a write may follow from cached records. Import checks that the keys
 * belong to this deployment and that the records decode (KVMESH_EPROTO otherwise).
 */
#define TN_HINT_MAX (1 + 2 * (2 + META_KEY_MAX + 13) + TN_OP_ENC_MAX + 128)
int tn_hint_export(tn_t *tn, const char *tenant, const char *op_id, uint8_t *buf, size_t cap,
                   size_t *len);
int tn_hint_import(tn_t *tn, const uint8_t *buf, size_t len);

/* Exact reads (diagnostics, tests): the usage row, an object row, an operation record. */
typedef void (*tn_usage_cb)(void *arg, int rc, const tn_usage_t *u);
int tn_get_usage(tn_t *tn, const char *tenant, tn_usage_cb cb, void *arg);

/* ---- reconciliation ------------------------------------------------------------------------ */

/* What an exact route lookup found (tn_route_ops_t.lookup). */
typedef struct tn_route_obs {
    bool found;     /* a route or a tombstone exists */
    bool tombstone; /* it is a delete tombstone */
    kvm_route_version_t version, predecessor;
    char content_op[TN_OPID_CAP]; /* accounting operation id it carries */
    uint64_t retain_until_ms;     /* a tombstone's purge deadline (0 = none) */
} tn_route_obs_t;

typedef void (*tn_lookup_cb)(void *arg, int rc, const tn_route_obs_t *obs);
/* rc 0: the route now carries the operation at *version. ESTALE_GENERATION / anything else:
 * replay could not be proven safe (the operation stays charged and locked). */
typedef void (*tn_replay_cb)(void *arg, int rc, kvm_route_version_t version);

typedef struct tn_route_ops {
    /* exact route/tombstone lookup of one object (never a scan) */
    void (*lookup)(void *ctx, const char *tenant, const char *domain, const char *key,
                   tn_lookup_cb cb, void *arg);
    /* ask the current fenced primary to replay op (same publish token and payload); it claims
     * again through tn_claim before its CAS. Only when it can prove the replay safe (the stored
     * generation is still valid, or its primary is fenced and the predecessor authoritative). */
    void (*replay)(void *ctx, const tn_op_t *op, tn_replay_cb cb, void *arg);
    void *ctx;
} tn_route_ops_t;

typedef struct tn_recon_report {
    int rc;             /* 0, or the first metadata error of the pass */
    uint32_t aborted;   /* expired PENDING operations aborted */
    uint32_t finalized; /* PUBLISHING operations found published and finalized */
    uint32_t replayed;  /* ... of which the route had to be replayed first */
    uint32_t degraded;  /* left charged and locked, rescheduled with backoff */
    uint32_t purged;    /* terminal records past retention removed */
    bool more;          /* due entries remained beyond the page */
    /* PUBLISHING operations aborted: a route above the predecessor proved it replaced */
    uint32_t superseded;
} tn_recon_report_t;
typedef void (*tn_recon_cb)(void *arg, const tn_recon_report_t *r);

/* One bounded pass over tenant's due index: at most `page` (1..TN_PAGE_MAX) due entries of each
 * state, stopping at the first deadline in the future. One pass at a time per tn_t
 * (KVMESH_EAGAIN otherwise). */
int tn_recon_pass(tn_t *tn, const char *tenant, const tn_route_ops_t *route, uint32_t page,
                  tn_recon_cb cb, void *arg);

typedef struct tn_stats {
    uint64_t reserves, reserve_refusals, claims, finalizes, aborts, conflicts;
    uint64_t recon_aborted, recon_finalized, recon_replayed, recon_degraded, recon_purged;
    uint64_t recon_superseded; /* PUBLISHING -> ABORTED by a proven-superseded lookup */
    uint64_t meta_round_trips; /* metadata calls issued */
    int last_error;
} tn_stats_t;
void tn_get_stats(const tn_t *tn, tn_stats_t *out);
/* The handle's own invariants (counters, in-flight bookkeeping): 0 or KVMESH_ECORRUPT. */
int tn_check_invariants(const tn_t *tn);

#endif
