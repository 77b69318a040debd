/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold.h — the cold tier's sans-I/O core (specification "Hot/Cold Storage"; docs/cold.md is the
 * guide): device records and capacity accounting, the cold capacity operation and cold reclaim
 * state machines, the offload worker, last-hot eviction, restore with singleflight, and restart
 * reconciliation from the due index.
 *
 * A layer of its own: it uses only core, env, obs and meta. Every durable effect is a meta.h
 * transaction (compare on mod_rev, so it runs unchanged on memory, Redis and etcd); payload bytes
 * go through a backend table (cold_backend.h) run by the I/O hook it is given (cold_exec_ops_t);
 * the route side (exact lookup, the materialize CAS, the last-hot eviction CAS, hot reads and
 * re-promotion) is reached only through the callbacks it is given (cold_route_ops_t). It never
 * includes route, store, net or api headers.
 *
 * Metadata records (keys from src/meta/keyspace.h; exact lookups, bounded ranges):
 *   cold-devices/<device id>                  cold_device_t   device identity and accounting
 *   cold-ops/<cold op id>                     cold_op_t       cold capacity operation
 *   cold-reclaims/<reclaim op id>             cold_reclaim_t  reclaim of an obsolete locator
 *   cold-due/<state>/<deadline ms>/<op id>    ""              due index (non-terminal states)
 *
 * Cold capacity operation (cold_op_set_state asserts these edges and no others):
 *
 *                reserve          backend put       materialize CAS     commit usage
 *   PLANNED ----------> RESERVED ----------> PAYLOAD_ -----------> ROUTE_ ----------> USAGE_
 *      |                   |                 WRITTEN             COMMITTED          COMMITTED
 *      | replaced          | cancel             | obsolete           | reclaim          |
 *      v                   v                    v                    v  handoff         | reclaim
 *   RELEASED <---------- RELEASED            RECLAIMING --------> RELEASED <-----------+ handoff
 *                                                   delete + release
 *
 * Device accounting follows the op's state, in the same transaction as the transition:
 * RESERVED, PAYLOAD_WRITTEN, ROUTE_COMMITTED and RECLAIMING hold `length` in device.reserved;
 * USAGE_COMMITTED holds it in device.used; PLANNED and RELEASED hold nothing. So a device's
 * reserved/used equal the sums over its operations, and a repeated transition (the op already in
 * the target state) changes nothing: reserve, commit and release are idempotent by cold op id.
 *
 * Cold reclaim record: PLANNED -> BACKEND_DELETED -> USAGE_RELEASED. The last edge is the
 * metadata-atomic handoff keyed by (cold op, reclaim op): one transaction moves the reclaim to
 * USAGE_RELEASED and the cold op to RELEASED (ROUTE_COMMITTED: consumes the reservation;
 * USAGE_COMMITTED: decrements used; PAYLOAD_WRITTEN/RECLAIMING: releases the reservation; an op
 * already RELEASED: nothing) and returns the existing result when repeated.
 *
 * Errors: KVMESH_ENOSPC (no device has room / the device is full), KVMESH_EUNAVAILABLE (device
 * not healthy or not schedulable), KVMESH_ECONFLICT (the op is in a state from which the edge is
 * not legal: the view names the state; contention beyond COLD_ATTEMPTS_MAX), KVMESH_ENOENT
 * (unknown record), KVMESH_ECORRUPT (a stored record does not decode, or an accounting step would
 * underflow: never applied), KVMESH_EINDETERMINATE (a write's outcome stayed unknown; repeat it).
 *
 * Threading: a cold_t lives on its env's loop thread with its meta_t; every callback runs there.
 * Backend calls run inside cold_exec_t.run, submitted through cold_exec_ops_t (worker threads in
 * the store, inline in tests).
 * Ownership: request structs are copied before a call returns; views passed to callbacks are valid
 * only during the callback. cold_close() cancels what it can: no user callback runs after it.
 */
#ifndef KVMESH_COLD_COLD_H
#define KVMESH_COLD_COLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cold/cold_backend.h"
#include "core/ident.h"
#include "core/limits.h"
#include "core/route.h"
#include "core/version.h"
#include "env/env.h"
#include "meta/keyspace.h"
#include "meta/meta.h"

#define COLD_SCHEMA_VERSION 1
#define COLD_ROOT_CAP       256  /* device root path bytes incl. NUL */
#define COLD_TAGS_CAP       128  /* device tags ("a,b,c") incl. NUL */
#define COLD_ATTEMPTS_MAX   64   /* read/compare rounds of one call before KVMESH_ECONFLICT */
#define COLD_DEVICES_MAX    64   /* devices in one view (one bounded range page) */
#define COLD_BACKENDS_MAX   16   /* backends attached to one cold_t */
#define COLD_PAGE_MAX       256  /* due entries one reconciliation pass reads per state */
#define COLD_QUEUE_MAX      4096 /* offload jobs queued per cold_t (beyond: KVMESH_EAGAIN) */
#define COLD_INFLIGHT_MAX   64   /* offload jobs driven at once */
#define COLD_RESTORES_MAX   256  /* restores in flight (singleflight entries) */
#define COLD_WAITERS_MAX    64   /* callers joined to one restore */
#define COLD_RETRY_MAX      32   /* transient failures of one offload job before it is parked */
#define COLD_OPKEY_CAP      (KVM_OP_ID_FMT_LEN + 1)

/* ---- records --------------------------------------------------------------------------------- */

enum cold_op_state {
    COLD_OP_NONE = 0, /* no record */
    COLD_OP_PLANNED = 1,
    COLD_OP_RESERVED = 2,
    COLD_OP_PAYLOAD_WRITTEN = 3,
    COLD_OP_ROUTE_COMMITTED = 4,
    COLD_OP_USAGE_COMMITTED = 5,
    COLD_OP_RECLAIMING = 6,
    COLD_OP_RELEASED = 7,
};
#define COLD_OP_STATE_MAX COLD_OP_RELEASED

const char *cold_op_state_name(enum cold_op_state s); /* also the due-index part */
bool cold_op_transition_ok(enum cold_op_state from, enum cold_op_state to);
/* Bytes of the op the device holds in this state: 'r' reserved, 'u' used, 0 none. */
char cold_op_state_holds(enum cold_op_state s);

typedef struct cold_op {
    kvm_op_id_t id;         /* cold_operation_id */
    kvm_op_id_t content_op; /* accounting/content operation the payload belongs to */
    kvm_tier_id_t device;
    kvm_runtime_id_t owner; /* the device's owner runtime when planned */
    enum cold_op_state state;
    enum cold_op_state released_from; /* RELEASED: the state it left (terminal outcome) */
    kvm_op_id_t released_by;          /* RELEASED by a reclaim handoff: its reclaim op; else nil */
    cold_opid_t be_id;                /* backend operation id (random, chosen at plan) */
    uint64_t length, checksum;
    cold_locator_t loc;   /* PAYLOAD_WRITTEN and later */
    uint64_t payload_fp;  /* kvm_cold_backing_fingerprint of the backing it materializes */
    uint64_t deadline_ms; /* due-index deadline of a non-terminal state (0: not indexed) */
    uint32_t attempts;    /* reconciliation resumptions */
    uint16_t ident_len;   /* canonical identity of the object (kvm_ident_t enc) */
    uint8_t ident[KVM_IDENT_ENC_MAX_LEN];
} cold_op_t;

/* The one place that changes op->state: asserts the edge is in the diagram. */
void cold_op_set_state(cold_op_t *op, enum cold_op_state to);
int cold_op_check(const cold_op_t *op); /* 0 or KVMESH_ECORRUPT + message */

enum cold_dev_lifecycle { COLD_DEV_ACTIVE = 1, COLD_DEV_DRAINING = 2, COLD_DEV_RETIRED = 3 };
enum cold_dev_health { COLD_DEV_HEALTHY = 1, COLD_DEV_DEGRADED = 2, COLD_DEV_FAILED = 3 };
const char *cold_dev_lifecycle_name(enum cold_dev_lifecycle l);
const char *cold_dev_health_name(enum cold_dev_health h);

typedef struct cold_device {
    kvm_tier_id_t id;
    kvm_runtime_id_t owner;
    uint64_t owner_epoch; /* a registration with an older epoch is refused (EINCOMPAT) */
    cold_backend_kind_t kind;
    char root[COLD_ROOT_CAP];
    enum cold_dev_lifecycle lifecycle;
    bool schedulable;
    uint64_t capacity, used, reserved;
    uint64_t n_reserved, n_used; /* operations holding reserved / used bytes */
    char tags[COLD_TAGS_CAP];
    enum cold_dev_health health;
    uint64_t health_ms; /* wall ms of the last health change */
} cold_device_t;

int cold_device_check(const cold_device_t *d);
/* Placement eligibility: active, schedulable, healthy and room for len more bytes. */
bool cold_device_fits(const cold_device_t *d, uint64_t len);
/* Readable for restore and last-hot eviction: not FAILED and not RETIRED. */
bool cold_device_readable(const cold_device_t *d);

typedef struct cold_reclaim {
    kvm_cold_reclaim_t r;       /* reclaim_op, content_op, cold_op, tier, locator, length, state */
    enum cold_op_state outcome; /* USAGE_RELEASED: the op state the handoff released (NONE: the
                                   op was already released) */
    uint64_t deadline_ms;
    uint32_t attempts;
    uint16_t ident_len;
    uint8_t ident[KVM_IDENT_ENC_MAX_LEN];
} cold_reclaim_t;

int cold_reclaim_check(const cold_reclaim_t *r);

/*
 * Pure accounting steps (also used by the engine): apply the device side of op moving from
 * `from` to `to` with `len` bytes. 0, or KVMESH_ECORRUPT (message) when a counter would underflow
 * (nothing changed then). A device never underflows.
 */
int cold_device_account(cold_device_t *d, enum cold_op_state from, enum cold_op_state to,
                        uint64_t len);

/* Codecs (wire.h header, schema ids 260..262, then fixed little-endian fields through
 * core/bytes.h). Decoders never crash: KVMESH_EPROTO for anything malformed or invalid. */
#define COLD_OP_ENC_MAX      (512 + KVM_IDENT_ENC_MAX_LEN)
#define COLD_DEVICE_ENC_MAX  (256 + COLD_ROOT_CAP + COLD_TAGS_CAP)
#define COLD_RECLAIM_ENC_MAX (512 + KVM_COLD_LOCATOR_MAX_LEN + KVM_IDENT_ENC_MAX_LEN)
int cold_op_encode(const cold_op_t *op, uint8_t *buf, size_t cap, size_t *len);
int cold_op_decode(const uint8_t *buf, size_t len, cold_op_t *out);
int cold_device_encode(const cold_device_t *d, uint8_t *buf, size_t cap, size_t *len);
int cold_device_decode(const uint8_t *buf, size_t len, cold_device_t *out);
int cold_reclaim_encode(const cold_reclaim_t *r, uint8_t *buf, size_t cap, size_t *len);
int cold_reclaim_decode(const uint8_t *buf, size_t len, cold_reclaim_t *out);

/* The key part of an op id ("<writer hex>:<epoch>:<seq>"). */
void cold_opkey(const kvm_op_id_t *id, char out[COLD_OPKEY_CAP]);

/* ---- the callbacks it is given --------------------------------------------------------------- */

/* Backend work: run(io) must be called once on a thread that may block (the backend's calls),
 * then done(io) once on the loop thread. NULL ops: both inline on the loop thread. */
typedef struct cold_exec cold_exec_t;
struct cold_exec {
    void (*run)(cold_exec_t *io);
    void (*done)(cold_exec_t *io);
};
typedef struct cold_exec_ops {
    void (*submit)(void *ctx, cold_exec_t *io);
    void *ctx;
} cold_exec_ops_t;

/* What an exact route lookup found. */
typedef struct cold_route_obs {
    bool found;     /* a route or a tombstone exists */
    bool tombstone; /* a delete tombstone */
    kvm_route_version_t version;
    kvm_op_id_t content_op;
    kvm_cold_backing_t cold; /* the active cold backing (kind NONE: none) */
    uint32_t n_replicas;
    kvm_hot_replica_t replicas[KVM_MAX_REPLICAS];
} cold_route_obs_t;

/* The last-hot eviction CAS: remove `replica` only if the route is at `version`, carries
 * content_op, a MATERIALIZED backing of cold_op whose kvm_cold_backing_fingerprint is
 * locator_fp, and lists `replica`. */
typedef struct cold_evict_expect {
    kvm_route_version_t version;
    kvm_op_id_t content_op, cold_op;
    uint64_t locator_fp;
    kvm_hot_replica_t replica;
} cold_evict_expect_t;

typedef void (*cold_lookup_cb)(void *arg, int rc, const cold_route_obs_t *obs);
typedef void (*cold_rc_cb)(void *arg, int rc);

typedef struct cold_route_ops {
    /* exact lookup of one object's route (never a scan) */
    void (*lookup)(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg);
    /* copy the payload of content_op (length bytes) from a valid hot replica into buf; rc 0,
     * KVMESH_ENOENT (no hot replica of that content, for good: the op is then released), or a
     * transient error (retried with backoff) */
    void (*read_hot)(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *content_op, void *buf,
                     uint64_t length, cold_rc_cb cb, void *arg);
    /* CAS the active backing from PendingOffload (of mat->cold_op, mat->content_op) to `mat` at
     * route version `expected`; rc 0 or KVMESH_ECONFLICT (the route changed: look it up again) */
    void (*materialize)(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                        const kvm_cold_backing_t *mat, cold_rc_cb cb, void *arg);
    /* the last-hot eviction CAS (cold_evict_expect_t); rc 0 (removed: the store may now free the
     * replica's bytes) or KVMESH_ECONFLICT */
    void (*evict)(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                  void *arg);
    /* best-effort hot re-promotion of verified bytes into the route at `expected`; may be NULL */
    void (*promote)(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                    const void *buf, uint64_t length, cold_rc_cb cb, void *arg);
    void *ctx;
} cold_route_ops_t;

/* ---- the handle ------------------------------------------------------------------------------ */

typedef struct cold cold_t;

/* Crash windows of the offload worker (tests: cold_config_t.test_crash). */
enum cold_window {
    COLD_W_BEFORE_RESERVE = 1, /* planned, capacity not reserved */
    COLD_W_BEFORE_PUT,         /* reserved, backend not written */
    COLD_W_BEFORE_PERSIST,     /* backend written, locator not persisted */
    COLD_W_BEFORE_CAS,         /* PAYLOAD_WRITTEN persisted, route not materialized */
    COLD_W_BEFORE_COMMITTED,   /* route materialized, op not ROUTE_COMMITTED */
    COLD_W_BEFORE_USAGE,       /* ROUTE_COMMITTED, usage not committed */
};

/* test-only broken variants (cold_config_t.test_bugs), caught by the simulator */
#define COLD_BUG_EVICT_NO_USAGE    1u /* eviction accepted while the op is only ROUTE_COMMITTED */
#define COLD_BUG_RECLAIM_NO_LOOKUP 2u /* reclaim deletes without the exact route lookup */
#define COLD_BUG_DOUBLE_RELEASE    4u /* handoff releases again when repeated */
#define COLD_BUG_NO_REBASE         8u /* materialize conflict goes to reclaim without lookup */

enum cold_order { COLD_ORDER_FIFO = 0, COLD_ORDER_SIZE = 1 /* smallest first */ };

typedef struct cold_config {
    const char *deployment; /* keyspace deployment name */
    kvm_runtime_id_t self;  /* this runtime */
    uint32_t timeout_ms;    /* per metadata call (0 = META_DEFAULT_TIMEOUT_MS) */
    uint32_t op_ttl_ms;     /* a non-terminal op is due for reconciliation after (0 = 10 s) */
    /* terminal records (op RELEASED, reclaim USAGE_RELEASED) are deleted this long after they
     * became terminal, from their due-index entries ("released", "reclaim-done") by the
     * reconciliation pass; 0 = kept forever (no entry) */
    uint32_t purge_after_ms;
    uint32_t backoff_max_ms;  /* cap of retry backoff (0 = 10 s) */
    uint32_t backoff_base_ms; /* first retry delay (0 = 2 ms); doubles per retry up to the cap,
                                 each delay drawn from [d/2, d] */
    uint32_t max_inflight;    /* offload jobs at once, 1..COLD_INFLIGHT_MAX (0 = 8) */
    uint32_t queue_cap;       /* queued jobs, 1..COLD_QUEUE_MAX (0 = 1024) */
    enum cold_order order;
    uint64_t max_buffer; /* largest payload one job reads (0 = 64 MiB) */
    /* Offload scheduling (docs/cold.md "Offload scheduling"). Rate: a token bucket metered in
     * payload bytes at job start: a job starts once the bucket holds min(length, burst) tokens
     * and takes `length` (the bucket may go negative: a job longer than the burst waits for the
     * debt of the previous ones to be repaid). 0 = unlimited. */
    uint64_t rate_bytes_per_sec;
    uint64_t rate_burst_bytes; /* bucket depth (0 = one second of rate_bytes_per_sec) */
    /* Watermarks, DRAM used fractions reported by cold_set_pressure: with high_watermark > 0,
     * queued jobs start only while the gate is open; it opens at a report >= high_watermark and
     * closes at a report < low_watermark (low < high <= 1). 0 = always open. Urgent jobs
     * (cold_job_t.urgent: eviction-triggered offloads) pass a closed gate, never the rate. */
    double high_watermark, low_watermark;
    const cold_exec_ops_t *exec; /* borrowed, outlives the handle; NULL: backend calls inline */
    /* tests: called at every crash window; true = the process dies here (the job stops) */
    bool (*test_crash)(void *ctx, enum cold_window w, const kvm_op_id_t *op);
    void *test_ctx;
    unsigned test_bugs; /* COLD_BUG_* */
} cold_config_t;

/* route and cfg are copied (cfg->io and cfg->test_ctx are borrowed); env and m are borrowed and
 * must outlive the handle (close the meta_t after cold_close). */
int cold_new(cold_t **out, env_t *env, meta_t *m, const cold_route_ops_t *route,
             const cold_config_t *cfg);
/* No user callback runs after this returns; memory is released once calls still inside a
 * metadata call or the I/O hook complete. */
void cold_close(cold_t *c);

/* A backend this runtime owns for device `dev` (borrowed; must outlive the cold_t). */
int cold_attach_backend(cold_t *c, const kvm_tier_id_t *dev, const cold_backend_t *be);

/* ---- devices --------------------------------------------------------------------------------- */

typedef void (*cold_dev_cb)(void *arg, int rc, const cold_device_t *d);

/* Creates cold-devices/<id> or updates its identity fields (owner, epoch, kind, root,
 * lifecycle, schedulability, capacity, tags) keeping used/reserved. Refuses (KVMESH_EINCOMPAT)
 * an owner_epoch older than the stored one, and a capacity below used + reserved. */
int cold_device_register(cold_t *c, const cold_device_t *desc, cold_dev_cb cb, void *arg);
int cold_device_set_health(cold_t *c, const kvm_tier_id_t *id, enum cold_dev_health h,
                           bool schedulable, cold_dev_cb cb, void *arg);
int cold_device_get(cold_t *c, const kvm_tier_id_t *id, cold_dev_cb cb, void *arg);

/* Refreshes the bounded device view (one range page of COLD_DEVICES_MAX). cb gets rc. */
int cold_view_refresh(cold_t *c, cold_rc_cb cb, void *arg);
/* Placement from the view: the eligible device with the most free bytes (cold_device_fits);
 * KVMESH_ENOSPC when none. The answer is a hint: reserve re-checks in metadata. */
int cold_place(cold_t *c, uint64_t len, kvm_tier_id_t *dev, kvm_runtime_id_t *owner);
/* The same among the devices owned by one of owners[0..n_owners) (NULL: any owner). */
int cold_place_owned(cold_t *c, uint64_t len, const kvm_runtime_id_t *owners, size_t n_owners,
                     kvm_tier_id_t *dev, kvm_runtime_id_t *owner);
/* The view's copy of a device, or NULL (valid until the next refresh). */
const cold_device_t *cold_view_find(const cold_t *c, const kvm_tier_id_t *id);
/* The whole view: *out = its devices (valid until the next refresh); returns their count (0 before
 * the first refresh, and always for a core whose view is never refreshed). */
size_t cold_view_list(const cold_t *c, const cold_device_t **out);

/* ---- operations ------------------------------------------------------------------------------ */

typedef struct cold_op_view {
    const cold_op_t *op;      /* NULL when no record */
    const cold_device_t *dev; /* after the call, when read */
    bool repeated;            /* the transition was already done (idempotent repeat) */
} cold_op_view_t;
typedef void (*cold_op_cb)(void *arg, int rc, const cold_op_view_t *v);

typedef struct cold_plan_req {
    kvm_op_id_t cold_op, content_op;
    kvm_tier_id_t device;
    const kvm_ident_t *ident;
    uint64_t length, checksum;
} cold_plan_req_t;

/* Creates cold-ops/<id> in PLANNED if absent (repeat: returns the stored record). */
int cold_op_plan(cold_t *c, const cold_plan_req_t *req, cold_op_cb cb, void *arg);
/* One edge of the diagram with its device accounting; loc (PAYLOAD_WRITTEN only) is the backend
 * locator, payload_fp its fingerprint. Repeating a done edge returns repeated = true. */
int cold_op_advance(cold_t *c, const kvm_op_id_t *id, enum cold_op_state to,
                    const cold_locator_t *loc, cold_op_cb cb, void *arg);
int cold_op_get(cold_t *c, const kvm_op_id_t *id, cold_op_cb cb, void *arg);
/* Deletes a RELEASED op record whose purge deadline passed, with its due entry (no record, or
 * not yet due: nothing, rc 0, repeated). The reconciliation pass calls it from the "released"
 * due index. */
int cold_op_purge(cold_t *c, const kvm_op_id_t *id, cold_op_cb cb, void *arg);

/* ---- reclaim --------------------------------------------------------------------------------- */

typedef struct cold_reclaim_view {
    const cold_reclaim_t *rec;
    const cold_op_t *op;
    bool repeated;
} cold_reclaim_view_t;
typedef void (*cold_reclaim_cb)(void *arg, int rc, const cold_reclaim_view_t *v);

/* Before an overwrite/delete route CAS that replaces `materialized`: the durable PLANNED record
 * (create-if-absent; a repeat returns it). */
int cold_reclaim_plan(cold_t *c, const kvm_op_id_t *reclaim_op, const kvm_ident_t *ident,
                      const kvm_cold_backing_t *materialized, cold_reclaim_cb cb, void *arg);
/* The route CAS was definitively refused: drop a PLANNED record (KVMESH_ECONFLICT otherwise). */
int cold_reclaim_cancel(cold_t *c, const kvm_op_id_t *reclaim_op, cold_reclaim_cb cb, void *arg);
/* Cleanup: exact route lookup proves the locator no longer authoritative (else KVMESH_EAGAIN and
 * the record stays due), idempotent backend delete, PLANNED -> BACKEND_DELETED, then the handoff.
 * The device must be attached here (KVMESH_ENOENT otherwise). */
int cold_reclaim_run(cold_t *c, const kvm_op_id_t *reclaim_op, cold_reclaim_cb cb, void *arg);

/* ---- offload, eviction, restore, reconciliation ---------------------------------------------- */

typedef struct cold_job {
    const kvm_ident_t *ident;
    kvm_op_id_t cold_op, content_op;
    kvm_tier_id_t device;
    uint64_t length, checksum;
    /* EvictTriggered: queued before every non-urgent job and started even while the watermark
     * gate is closed (the rate still applies) */
    bool urgent;
    /* optional: called once when the job ends (rc 0: USAGE_COMMITTED; otherwise the op was
     * released, parked or failed), never after cold_close; for a job already queued or in
     * flight it is attached to that job when it has none (else KVMESH_EEXIST) */
    cold_rc_cb done;
    void *done_arg;
    /* optional, with done: a buffer of why_cap bytes (owned by the caller, valid until done runs
     * or cold_close) the job fills with the reason before done reports a failure it can name:
     * today the withdrawn device (below) */
    char *why;
    size_t why_cap;
} cold_job_t;

/* Queues the offload of a PendingOffload route (the device must be attached here). A job for a
 * cold op already queued or in flight is a no-op. KVMESH_EAGAIN when the queue is full. The job
 * ends USAGE_COMMITTED (materialized) or RELEASED (obsolete) or parked (retries exhausted: the
 * due index resumes it). A reserve refused because the device record is no longer active
 * (drained or retired after the writer placed the op from its device view) is not retried: the
 * op goes PLANNED -> RELEASED at once and done gets KVMESH_EUNAVAILABLE (counted in
 * offloads_withdrawn). */
int cold_offload_submit(cold_t *c, const cold_job_t *job);
/* The retry delay cap of the n-th retry (1-based): min(backoff_base_ms * 2^(n-1),
 * backoff_max_ms); the delay used is drawn from [cap/2, cap]. */
uint64_t cold_backoff_ms(const cold_config_t *cfg, uint32_t retry);
/* Jobs queued + in flight. */
size_t cold_offload_pending(const cold_t *c);
/* The store reports its DRAM used fraction (0..1) here; it opens or closes the watermark gate
 * (cold_config_t.high_watermark) and starts queued jobs when it opens. */
void cold_set_pressure(cold_t *c, double dram_used_fraction);
/* Whether non-urgent jobs may start now (watermarks; the rate is separate). */
bool cold_offload_gate_open(const cold_t *c);

/* Last-hot eviction of `replica`: exact lookup; eligible only when the backing is MATERIALIZED,
 * its op is USAGE_COMMITTED and the device readable; then the eviction CAS. rc 0 (removed),
 * KVMESH_EAGAIN (not eligible now), KVMESH_ECONFLICT (the route changed). */
int cold_evict(cold_t *c, const kvm_ident_t *ident, const kvm_hot_replica_t *replica, cold_rc_cb cb,
               void *arg);

/* Restore: exact lookup, read and verify the materialized payload (length and checksum), cb with
 * the bytes (valid during the callback), then best-effort promotion. Concurrent restores of the
 * same (device, cold op, locator fingerprint, route version) share one backend read. rc
 * KVMESH_ENOENT (no route / no materialized backing), KVMESH_ECHECKSUM / KVMESH_ECORRUPT
 * (verification failed: no bytes are returned), KVMESH_EAGAIN (too many restores in flight). */
typedef void (*cold_restore_cb)(void *arg, int rc, const void *buf, uint64_t len);
int cold_restore(cold_t *c, const kvm_ident_t *ident, cold_restore_cb cb, void *arg);

/* Batch restore (docs/cold.md "Batch restore"): many materialized payloads read into the
 * caller's buffers, one backend get_batch (one I/O job, one io_uring submission on an
 * ExtentStore) per device among the items. No route lookup: the caller copies each item from a
 * route it resolved, and the bytes are verified against that route's length and checksum (a
 * reclaimed locator answers KVMESH_ENOENT: look the route up again). No promotion. Per-item
 * results are exact: one item's failure never fails or hides another's. Items of a device not
 * attached here fail with KVMESH_ENOTSUP, of an unreadable device (view) with
 * KVMESH_EUNAVAILABLE, with a locator or length out of range with KVMESH_ECORRUPT. */
#define COLD_BATCH_MAX 256 /* items per cold_restore_batch call */
typedef struct cold_batch_item {
    kvm_tier_id_t device;
    cold_locator_t loc;
    uint64_t len, checksum;
    void *buf; /* len bytes of the caller's; written by the I/O hook's thread until cb; zeroed
                  on failure (never unverified bytes) */
    int rc;    /* out */
} cold_batch_item_t;
/* Runs once on the loop thread when every item has its rc (possibly before cold_restore_batch
 * returns, when no device read was needed or the I/O hook runs inline); never after cold_close
 * (the buffers are then no longer written once the I/O hook finished its jobs). */
typedef void (*cold_batch_cb)(void *arg, cold_batch_item_t *items, size_t n);
/* items[0..n) (1..COLD_BATCH_MAX) are borrowed until cb. *jobs (may be NULL) gets the number of
 * device reads submitted (one per distinct device with readable items). 0, or KVMESH_EINVAL /
 * KVMESH_ECLOSED / KVMESH_ENOMEM (cb then never runs). */
int cold_restore_batch(cold_t *c, cold_batch_item_t *items, size_t n, cold_batch_cb cb, void *arg,
                       size_t *jobs);

typedef struct cold_recon_report {
    int rc;            /* 0, or the first metadata error of the pass */
    uint32_t resumed;  /* due ops handed to the worker */
    uint32_t reclaims; /* due reclaim records run */
    uint32_t purged;   /* terminal records past their retention whose purge started */
    bool more;         /* due entries remained beyond the page */
} cold_recon_report_t;
typedef void (*cold_recon_cb)(void *arg, const cold_recon_report_t *r);
/* One bounded pass over the due index: at most `page` (1..COLD_PAGE_MAX) entries per state whose
 * deadline has passed, for devices attached here. One pass at a time (KVMESH_EAGAIN). */
int cold_recon_pass(cold_t *c, uint32_t page, cold_recon_cb cb, void *arg);

typedef struct cold_stats {
    uint64_t offloads_ok, offloads_released, offload_retries, offload_parked;
    uint64_t offloads_withdrawn; /* released at reserve: the device was drained/retired */
    uint64_t rate_waits;         /* times the worker waited for rate tokens */
    uint64_t gate_changes;       /* watermark gate openings + closings */
    uint64_t urgent_jobs;        /* urgent (eviction-triggered) jobs accepted */
    uint64_t cas_conflicts, rebases;
    uint64_t evictions, evict_refused;
    uint64_t restores, restore_joined, restore_failed, promotions;
    uint64_t restore_batches, restore_batch_items; /* cold_restore_batch device reads, items */
    uint64_t reclaims_done, reclaims_deferred;
    uint64_t meta_round_trips;
    uint64_t corrupt; /* calls that ended KVMESH_ECORRUPT (a refused underflow, a bad record) */
    int last_error;
} cold_stats_t;
void cold_get_stats(const cold_t *c, cold_stats_t *out);
/* The counters of one device attached here (the store exports them with a `device` label):
 * offload jobs of ops on it that ended USAGE_COMMITTED / parked, restores (single and batch items)
 * read from it that succeeded / failed. */
typedef struct cold_dev_stats {
    uint64_t offloads_ok, offload_parked;
    uint64_t restores, restore_failed;
} cold_dev_stats_t;
/* *out = the device's counters; KVMESH_ENOENT (out zeroed) when it is not attached here. */
int cold_get_device_stats(const cold_t *c, const kvm_tier_id_t *dev, cold_dev_stats_t *out);
int cold_check_invariants(const cold_t *c);

#endif
