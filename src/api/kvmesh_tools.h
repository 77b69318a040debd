/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvmesh_tools.h — the internal tools interface: exactly what the programs of tools/ (kvmeshd,
 * the kvmesh CLI with its demo and bench), the benchmarks and the tests may use of the library
 * beyond the public API of include/kvmesh.h. A tool includes "kvmesh.h" and this header, and
 * nothing else of src/ (ctest layer_includes checks it).
 *
 * Owned by the API layer (src/api/kvmesh_tools.c). Not part of the public API: nothing here is
 * exported from libkvmesh.so (tools link libkvmesh.a), and it may change with the tools. It
 * depends on nothing but kvmesh.h, so a tool never sees struct kvmesh_config or another
 * layer's types: configuration fields are named by string, as in kvmesh_config_set.
 *
 * Errors: as in kvmesh.h (0 or a negative KVMESH_E* code, kvmesh_last_error() says more).
 * Threading: the field table is static and immutable; functions taking a config follow the
 * kvmesh_config_t rule (one thread at a time per config).
 */
#ifndef KVMESH_API_KVMESH_TOOLS_H
#define KVMESH_API_KVMESH_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvmesh.h"

/* ---- the configuration field table -----------------------------------------------------------
 * Iterate it with kvmesh_config_fields() (name, default, help, in documentation order); these
 * add what the daemon's --help, its flag parser and `kvmesh config` print about a field. */

/* Is `field` a configuration field (exact name)? */
bool kvmesh_tools_config_has(const char *field);
/* "string", "size", "uint", "double", "bool" or "enum"; NULL for an unknown field. */
const char *kvmesh_tools_config_type(const char *field);
/* What the field accepts ("1..8", "auto|tcp|shm", "a size 1MiB..16GiB", ...) into buf
 * (NUL-terminated, truncated at cap). KVMESH_ECONFIG for an unknown field. */
int kvmesh_tools_config_allowed(const char *field, char *buf, size_t cap);
/* The field's row of the docs/configuration.md table ("| `name` | type | `default` | allowed |
 * help |", '|' escaped), NUL-terminated, truncated at cap. KVMESH_ECONFIG for an unknown field.
 * The table's header is KVMESH_TOOLS_CONFIG_MARKDOWN_HEADER. */
#define KVMESH_TOOLS_CONFIG_MARKDOWN_HEADER                                                        \
    "| field | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n"
int kvmesh_tools_config_markdown_row(const char *field, char *buf, size_t cap);

/* ---- reading a config ------------------------------------------------------------------------
 * kvmesh_config_get (public) formats any field as a string; these read one without formatting.
 * Neither touches kvmesh_last_error(). A wrong name or type is a programming error (assert). */

/* A string field: the value inside cfg (valid while cfg lives and the field is not set again).
 * An enum field (route_mode, transport): its word, static storage. */
const char *kvmesh_tools_config_str(const kvmesh_config_t *cfg, const char *field);
/* A size, uint or bool field (bool: 0 or 1). */
uint64_t kvmesh_tools_config_uint(const kvmesh_config_t *cfg, const char *field);

/* ---- whole configs ------------------------------------------------------------------------- */

/* The cross-field checks kvmesh_open makes (watermarks ordered, segment_size <= memory_size,
 * ...), so that a tool can refuse a configuration before it joins anything. KVMESH_ECONFIG with
 * a message naming the fields. */
int kvmesh_tools_config_validate(const kvmesh_config_t *cfg);

/* The daemon's configuration file: a strict subset of YAML over the field table (the accepted
 * syntax is documented in src/api/yaml_config.h and docs/configuration.md). cfg is written only
 * when the whole text is valid. source names the text in messages ("FILE:LINE: ..."). */
#define KVMESH_TOOLS_YAML_FILE_MAX (1u << 20) /* bytes */
int kvmesh_tools_config_load_yaml(kvmesh_config_t *cfg, const char *text, size_t len,
                                  const char *source);
/* Reads path (at most KVMESH_TOOLS_YAML_FILE_MAX bytes) and applies it; KVMESH_EIO when it
 * cannot be read. */
int kvmesh_tools_config_load_file(kvmesh_config_t *cfg, const char *path);
/* Writes cfg as a YAML file that the loader reads back to the same config (every field, its
 * help as a comment). Returns the length it needs (truncated at cap like snprintf). */
size_t kvmesh_tools_config_dump_yaml(const kvmesh_config_t *cfg, char *buf, size_t cap);

/* ---- sizes ------------------------------------------------------------------------------- */

/* Parses a byte count with an optional unit (KiB, MiB, GiB, TiB, KB, MB, ...) as the size fields
 * do. 0 or KVMESH_ECONFIG with a message naming `what` (an option name, "--sizes"). */
int kvmesh_tools_parse_size(const char *what, const char *s, uint64_t *out);
/* Formats a byte count in the largest exact binary unit ("256MiB", "1536", "0"). */
void kvmesh_tools_format_size(uint64_t v, char *buf, size_t cap);

/* ---- time -------------------------------------------------------------------------------- */

/* Monotonic nanoseconds (the env's clock helper, src/env/clock.h), for tools' elapsed times. */
uint64_t kvmesh_tools_now_ns(void);

/* ---- the runtime behind a handle (tests) ----------------------------------------------------
 * The store runtime (src/store/store.h: kvm_rt_t) of an open handle, for tests that inspect
 * its state or statistics (kvm_store_stats in src/store/data.h). NULL for NULL. */
struct kvm_rt;
struct kvm_rt *kvmesh_runtime_of(kvmesh_t *kv);

/* ---- memory per object (kvmesh bench --footprint) ------------------------------------------
 * The route counts of kv's authorities (refreshed by their housekeeping tick) and the sizes of
 * the per-route structures, for the footprint table. 0, or KVMESH_EINVAL without a runtime. */
typedef struct kvmesh_tools_route_footprint {
    uint64_t routes, tombstones, purged;
    /* the bytes of those tables (route_table_mem_total, refreshed with the counts) */
    uint64_t entry_bytes;  /* entry allocations: tree links, ident encoding, packed route */
    uint64_t packed_bytes; /* of them: the packed routes */
    uint64_t ident_bytes;  /* of them: the identity encodings */
    uint64_t other_bytes;  /* ident index, expiry index, interning sets, table headers */
    size_t route_size;     /* a kvm_route_t (the unpacked form a view takes; not per entry) */
    unsigned hint_entries; /* the route hint table (fixed, allocated at first use) */
} kvmesh_tools_route_footprint_t;
int kvmesh_tools_route_footprint(kvmesh_t *kv, kvmesh_tools_route_footprint_t *out);

/* ---- critical path of a runtime (kvmesh bench --breakdown) ----------------------------------
 * The kvmesh_op_* counters of one operation kind ("put", "get", "remove", "exist", "batch_put",
 * "batch_get", "batch_remove"; docs/operations.md "Critical-path counters") in kv's registry,
 * with kvmesh_requests_total of that operation as `calls`. KVMESH_EINVAL for another name. */
typedef struct kvmesh_tools_critpath {
    uint64_t calls;
    uint64_t round_trips[4]; /* reserve, payload, route_lookup, route_cas */
    uint64_t handoffs, copies, checksums;
    uint64_t leads; /* of the hand-offs, those the calling thread ran by leading the loop */
} kvmesh_tools_critpath_t;
int kvmesh_tools_critpath(kvmesh_t *kv, const char *op, kvmesh_tools_critpath_t *out);
/* The sampled requests named `name` (e.g. "store.put") in kv's /breakdown ring that ended at or
 * after since_unix_ns: their count (0 when tracing is off), summed total and summed exclusive
 * time per stage (store, control, data, metadata), in ns. */
size_t kvmesh_tools_breakdown(kvmesh_t *kv, const char *name, uint64_t since_unix_ns,
                              int64_t *total_ns, int64_t stage_ns[4]);

/* ---- hot upgrade (kvmeshd --upgrade-socket / --upgrade-from; docs/operations.md) -------------
 * A successor process with the same runtime_id takes over a running predecessor's registered
 * memory without a copy (src/store/handoff.h has the protocol). sock is a connected unix stream
 * socket; every call is bounded by timeout_ms. */

/* Successor: announces itself (HELLO with cfg's runtime_id, which must be set). */
int kvmesh_upgrade_hello(const kvmesh_config_t *cfg, int sock, uint32_t timeout_ms);
/* Predecessor: reads a connection's HELLO; 0 when it names this runtime's id, else
 * KVMESH_EPROTO/KVMESH_ECONFIG (a REFUSE saying why is sent back). */
int kvmesh_upgrade_accept(kvmesh_t *kv, int sock, uint32_t timeout_ms);
/* Predecessor, on SIGTERM with an accepted successor: exports (waiting up to timeout_ms for
 * reservations in flight), sends the state with the segment fds, waits for MAPPED, closes *kv
 * (lease revoked, no drain) and sends CLOSED. *kv is NULL once it was closed. A failure before
 * MAPPED leaves *kv open (the caller drains as usual; a REFUSE is sent when the export failed). */
int kvmesh_upgrade_hand_over(kvmesh_t **kv, int sock, uint32_t timeout_ms);
/* Successor, once sock is readable: receives and validates the state, sends MAPPED, waits for
 * CLOSED, then opens *out over the handed-over memory (a new epoch, the same segments);
 * *n_segs and *n_slots say what was adopted. */
int kvmesh_upgrade_take_over(kvmesh_t **out, const kvmesh_config_t *cfg, int sock,
                             uint32_t timeout_ms, uint32_t *n_segs, uint32_t *n_slots);

/* ---- metadata administration (kvmesh admin) ------------------------------------------------
 * A direct, blocking connection to a deployment's metadata (metadata_url, deployment and
 * request_timeout_ms of cfg): no runtime joins. Reads are bounded pages (at most
 * KVMESH_ADMIN_PAGE_MAX records per call; the caller pages with the returned cursor). Records
 * that do not decode are returned with `malformed` set, not skipped.
 * Ownership: kvmesh_admin_open allocates *out, kvmesh_admin_close frees it. Threading: one
 * thread at a time per handle. */
#define KVMESH_ADMIN_PAGE_MAX 256
#define KVMESH_ADMIN_SEGS_MAX 64
#define KVMESH_ADMIN_SET_MAX  32
typedef struct kvmesh_admin kvmesh_admin_t;
int kvmesh_admin_open(const kvmesh_config_t *cfg, kvmesh_admin_t **out);
void kvmesh_admin_close(kvmesh_admin_t *a);

/* One member record (kvmesh/v1/<dep>/members/<id>). */
typedef struct kvmesh_admin_member {
    char id[KVMESH_ID_HEX_LEN + 1];
    bool malformed;
    uint64_t epoch;
    char state[16]; /* standby, active, draining, gone */
    double weight;
    uint64_t capacity_bytes, used_bytes, heartbeat;
    char rpc[128], data[128];
    char local_rpc[128], host[96]; /* rpc_local = unix: "unix:PATH" and host identity; "" = none */
    int64_t lease;                 /* the metadata lease the record is bound to (0 = none) */
    int64_t mod_rev;               /* revision of its last write */
    uint32_t n_segments;
    struct {
        uint64_t id, size;
        bool drained; /* the member applied an operator's segment drain */
    } segments[KVMESH_ADMIN_SEGS_MAX];
} kvmesh_admin_member_t;
/* Member records in id order after `after` (NULL or "" = from the first), at most limit
 * (1..KVMESH_ADMIN_PAGE_MAX) into out; *more when records follow the last one returned. */
int kvmesh_admin_members(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_member_t *out, size_t *n, bool *more);

/* The member record of id (exact; one metadata read); *found false when there is none. */
int kvmesh_admin_member_get(kvmesh_admin_t *a, const char *id, kvmesh_admin_member_t *out,
                            bool *found);

/* An operator's lifecycle request for member id (kvmesh/v1/<dep>/lifecycle/<id>; docs/
 * operations.md "Member lifecycle"): state "draining" or "active" for the member itself; the
 * record keeps the member's drained segments either way, and is deleted once it asks for
 * nothing (active, no drained segment). Read-modify-write under a compare on the record's
 * revision (KVMESH_ECONFLICT after bounded retries). The member applies it with its next
 * member-record write (within one keepalive period, lease_ttl_ms / 3); its record then shows
 * the state. */
int kvmesh_admin_lifecycle_request(kvmesh_admin_t *a, const char *id, const char *state);
/* Segment seg of member id drained (no new slots there; its replicas stay readable) or
 * activated again, in the same record (`kvmesh admin segments drain|activate`). */
int kvmesh_admin_segment_request(kvmesh_admin_t *a, const char *id, uint64_t seg, bool drain);
/* The member request stored for id into state: "draining", "malformed", or "" when there is
 * none (a record asking only for drained segments is no member request). */
int kvmesh_admin_lifecycle_get(kvmesh_admin_t *a, const char *id, char *state, size_t cap);
/* Lifecycle requests in id order after `after` (NULL or "" = from the first), at most limit
 * (1..KVMESH_ADMIN_PAGE_MAX): ids[i], states[i] ("draining", "active" (only segments are
 * drained) or "malformed") and the drained segments. */
typedef struct kvmesh_admin_lifecycle {
    char id[KVMESH_ID_HEX_LEN + 1];
    char state[16];
    uint32_t n_segments;
    uint64_t segments[KVMESH_ADMIN_SEGS_MAX];
} kvmesh_admin_lifecycle_t;
/* The request record of id (exact read; *found false when there is none). */
int kvmesh_admin_lifecycle_read(kvmesh_admin_t *a, const char *id, kvmesh_admin_lifecycle_t *out,
                                bool *found);
int kvmesh_admin_lifecycles(kvmesh_admin_t *a, const char *after, size_t limit,
                            kvmesh_admin_lifecycle_t *out, size_t *n, bool *more);

/* One shard-authority record (kvmesh/v1/<dep>/shards/<shard>). */
typedef struct kvmesh_admin_shard {
    uint32_t shard;
    bool malformed;
    uint64_t generation, token;
    char state[16]; /* transferring, active, resigned */
    char primary[KVMESH_ID_HEX_LEN + 1];
    uint64_t primary_epoch;
    int64_t lease; /* the primary's runtime lease the record is valid under */
    uint32_t n_set;
    char set[KVMESH_ADMIN_SET_MAX][KVMESH_ID_HEX_LEN + 1];
} kvmesh_admin_shard_t;
/* Shard records in shard order from shard `first` on, at most limit (1..KVMESH_ADMIN_PAGE_MAX);
 * *more when records follow (then continue from out[*n - 1].shard + 1). */
int kvmesh_admin_shards(kvmesh_admin_t *a, uint32_t first, size_t limit, kvmesh_admin_shard_t *out,
                        size_t *n, bool *more);

/* Is the lease alive now (its TTL query answers)? 0 is never alive. */
int kvmesh_admin_lease_alive(kvmesh_admin_t *a, int64_t lease, bool *alive);

/* Deletes the member record of `id` only if it is still the revision `mod_rev` that was read
 * (a runtime rewriting it meanwhile wins). *deleted false when the compare failed. */
int kvmesh_admin_member_delete(kvmesh_admin_t *a, const char *id, int64_t mod_rev, bool *deleted);

/* ---- tenants and quotas (kvmesh admin tenants | quota) ----------------------------------------
 * Exact reads of tenant-policies/<t> and quotas/<t>, and pages of one tenant's due index
 * (acct-due/<t>/<state>/, deadline order) with each entry's operation record: never a scan of
 * routes or object rows. docs/tenancy.md describes the records. */
#define KVMESH_ADMIN_TENANT_LEN 64
#define KVMESH_ADMIN_KEY_LEN    1024
#define KVMESH_ADMIN_OPID_LEN   33

typedef struct kvmesh_admin_tenant {
    char tenant[KVMESH_ADMIN_TENANT_LEN + 1];
    bool malformed; /* the policy record does not decode */
    uint32_t schema_version, policy_version;
    uint64_t max_bytes, max_objects, fingerprint;
    bool has_usage;       /* quotas/<t> exists */
    bool usage_malformed; /* ... and does not decode */
    uint64_t committed_bytes, committed_objects, pending_bytes, pending_objects;
    uint64_t ops_pending, ops_publishing; /* non-terminal operations per state */
} kvmesh_admin_tenant_t;
/* Tenant policies in tenant order after `after` (NULL or "" = from the first), at most limit
 * (1..KVMESH_ADMIN_PAGE_MAX), each with its usage row (one exact read per tenant). */
int kvmesh_admin_tenants(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_tenant_t *out, size_t *n, bool *more);
/* One tenant (exact reads); *found false when it has no policy record. KVMESH_EINVAL for a
 * tenant id that breaks the rule (the message names it). */
int kvmesh_admin_tenant_get(kvmesh_admin_t *a, const char *tenant, kvmesh_admin_tenant_t *out,
                            bool *found);

/* One object's committed accounting row (objects/<tenant>/<domain|~>/<key>, docs/tenancy.md):
 * what the quota protocol charged for it and the operation that holds it, if any. */
typedef struct kvmesh_admin_objrow {
    bool malformed;        /* the row does not decode (the fields below are 0) */
    int64_t mod_rev;       /* the row's metadata revision */
    uint64_t acct_version; /* +1 per finalized operation */
    bool live;             /* a finalized create/overwrite is the current state */
    uint64_t len;          /* committed length when live (0 otherwise) */
    uint64_t fencing_token, primary_sequence; /* route version of the last finalized operation */
    char last_op[KVMESH_ADMIN_OPID_LEN + 1];  /* last finalized operation ("" = none) */
    char lock_op[KVMESH_ADMIN_OPID_LEN + 1];  /* the non-terminal operation holding it ("") */
} kvmesh_admin_objrow_t;
/* The accounting row of (tenant, domain, key) by one exact read; domain NULL or "" = none.
 * *found false when there is no row (the object was never written under the tenant's policy).
 * KVMESH_EINVAL for a tenant, domain or key that breaks its rule (the message names it). */
int kvmesh_admin_objrow_get(kvmesh_admin_t *a, const char *tenant, const char *domain,
                            const char *key, kvmesh_admin_objrow_t *out, bool *found);

/* ---- changing a tenant policy (kvmesh admin policy set; docs/operations.md) ------------------
 * The controlled restart of the specification ("Policy bootstrap"): the operator stops every
 * runtime of the deployment, writes the new hard policy here, and restarts them with the new
 * tenant_policies entry; their bootstrap then matches it (tn_policy_match), and a runtime still
 * configured with the old entry is refused at startup naming the field that differs. */
#define KVMESH_ADMIN_POLICY_MAX_BYTES   1u /* kvmesh_admin_policy_plan_t.changed bits */
#define KVMESH_ADMIN_POLICY_MAX_OBJECTS 2u
#define KVMESH_ADMIN_POLICY_ENTRY_CAP   128
typedef struct kvmesh_admin_policy_plan {
    kvmesh_admin_tenant_t stored;  /* the stored policy record and the usage row, as read */
    int64_t stored_rev, usage_rev; /* their revisions (usage 0 = no usage row) */
    /* the new record: stored policy_version + 1, fingerprinted as the bootstrap does */
    uint32_t schema_version, policy_version;
    uint64_t max_bytes, max_objects, fingerprint;
    unsigned changed; /* KVMESH_ADMIN_POLICY_* bits; 0 = the stored record already says this */
    /* the tenant_policies entry of the new record ("td:4MiB:80:2"), what the runtimes'
     * configuration must say after the restart */
    char config_entry[KVMESH_ADMIN_POLICY_ENTRY_CAP];
} kvmesh_admin_policy_plan_t;
/* Reads tenant's policy record and usage row (two exact reads) and builds the new record from
 * n assignments "field=value": max_bytes=SIZE (>= 1, with an optional unit), max_objects=N
 * (1..2^32-1); the fields not given keep their stored values. The record is validated and
 * fingerprinted by the bootstrap's own functions (tn_policy_validate, tn_policy_record) and its
 * entry by the tenant_policies parser. Writes nothing. *found false when tenant has no policy
 * record. KVMESH_EINVAL (the message names the argument) for a bad tenant id, no assignment,
 * an unknown or repeated field, a malformed value; KVMESH_ERANGE for a limit below the tenant's
 * usage (committed + pending, from the usage row); KVMESH_ECORRUPT for a stored record that
 * does not decode. */
int kvmesh_admin_policy_plan(kvmesh_admin_t *a, const char *tenant, const char *const *assign,
                             size_t n, kvmesh_admin_policy_plan_t *out, bool *found);
/* Live member records of the deployment (bound to a lease that is alive, state not gone): the
 * first cap ids into ids, their count into *n_live. Reads every member record in bounded pages
 * (at most KVMESH_ADMIN_LIVE_SCAN_MAX records; KVMESH_ERANGE beyond). */
#define KVMESH_ADMIN_LIVE_SCAN_MAX (1u << 20)
int kvmesh_admin_live_members(kvmesh_admin_t *a, char (*ids)[KVMESH_ID_HEX_LEN + 1], size_t cap,
                              size_t *n_live);
/* Writes plan's new record: KVMESH_EAGAIN while any member record is live (no runtime may serve
 * the tenant while its hard policy changes; the message names them and says what to do);
 * otherwise one transaction that compares the policy record's and the usage row's revisions
 * with the plan's and writes the record: KVMESH_ECONFLICT when either changed since the plan
 * read them (plan again). KVMESH_EINVAL for a plan that changes nothing. A runtime that
 * bootstraps between the live check and the write matched the old record: each of its quota
 * reservations then fails (stored fingerprint differs) until it is restarted. */
int kvmesh_admin_policy_apply(kvmesh_admin_t *a, const kvmesh_admin_policy_plan_t *plan);

/* One cold device record (cold-devices/<id>, docs/cold.md "Devices"). */
#define KVMESH_ADMIN_ROOT_LEN 255
#define KVMESH_ADMIN_TAGS_LEN 127
typedef struct kvmesh_admin_device {
    char id[KVMESH_ID_HEX_LEN + 1]; /* from the key */
    bool malformed;                 /* the record does not decode (the fields below are 0) */
    char owner[KVMESH_ID_HEX_LEN + 1];
    uint64_t owner_epoch;
    char kind[12];      /* localdir, extent, sim */
    char lifecycle[12]; /* active, draining, retired */
    char health[12];    /* healthy, degraded, failed */
    bool schedulable;
    uint64_t capacity, used, reserved, n_reserved, n_used;
    uint64_t health_ms; /* wall ms of the last health change */
    char root[KVMESH_ADMIN_ROOT_LEN + 1], tags[KVMESH_ADMIN_TAGS_LEN + 1];
} kvmesh_admin_device_t;
/* Cold device records in id order after `after` (NULL or "" = from the first), at most limit
 * (1..KVMESH_ADMIN_PAGE_MAX): one bounded range read. */
int kvmesh_admin_devices(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_device_t *out, size_t *n, bool *more);
/* One device by id (32 hex digits; KVMESH_EINVAL otherwise): an exact read, *found false when
 * there is no record. */
int kvmesh_admin_device_get(kvmesh_admin_t *a, const char *id, kvmesh_admin_device_t *out,
                            bool *found);

/* Operator lifecycle of a cold device (docs/operations.md "Cold devices"): to = "drain" (the
 * record goes DRAINING and unschedulable: no new placement or reserve there; its cold copies stay
 * readable and evictable) or "retire" (RETIRED: refused with KVMESH_EAGAIN and a message naming
 * the bytes while the record still holds used or reserved bytes). One exact read, then one
 * transaction that compares the record's revision: KVMESH_ECONFLICT when a runtime or another
 * admin changed it meanwhile (run it again). A repeat (already draining / retired) writes nothing
 * and sets *changed false; draining a retired device is refused (KVMESH_EINVAL). KVMESH_ENOENT
 * when there is no record, KVMESH_ECORRUPT when it does not decode. *out gets the record as
 * written (or as found). A runtime keeps the stored lifecycle when it registers the device again
 * at restart. */
int kvmesh_admin_device_lifecycle(kvmesh_admin_t *a, const char *id, const char *to,
                                  kvmesh_admin_device_t *out, bool *changed);

/* One non-terminal quota operation (a reservation) from the due index. */
typedef struct kvmesh_admin_qop {
    char id[KVMESH_ADMIN_OPID_LEN + 1];
    char due_state[16]; /* the due index it was listed under: pending, publishing */
    bool missing;       /* the due entry names no operation record */
    bool malformed;     /* the operation record does not decode */
    char state[16];     /* the record's state: pending, publishing, finalized, aborted */
    char kind[16];      /* create, overwrite, delete */
    char domain[KVMESH_ADMIN_TENANT_LEN + 1], key[KVMESH_ADMIN_KEY_LEN + 1];
    int64_t delta_bytes, delta_objects;
    uint64_t next_len;
    uint64_t deadline_ms; /* wall ms of the due entry */
    bool expired;         /* deadline_ms <= now */
    uint32_t recon_attempts;
} kvmesh_admin_qop_t;
/* Up to limit (1..KVMESH_ADMIN_PAGE_MAX) operations of tenant listed in its due index under
 * state ("pending" or "publishing") in deadline order, after cursor (NULL or "" = from the
 * start); *more when entries follow; cursor_out (KVMESH_ADMIN_CURSOR_CAP) continues. */
#define KVMESH_ADMIN_CURSOR_CAP 1200
int kvmesh_admin_quota_ops(kvmesh_admin_t *a, const char *tenant, const char *state,
                           const char *cursor, size_t limit, kvmesh_admin_qop_t *out, size_t *n,
                           bool *more, char *cursor_out);
/* Aborts PENDING operation op_id of (tenant, domain, key) through the quota protocol
 * (PENDING -> ABORTED: the pending delta and the object lock are released; a publication that
 * claims it later is refused). KVMESH_ECONFLICT when it is no longer PENDING (the message says
 * its state). Runs on a private loop of the admin handle; no runtime joins. */
int kvmesh_admin_quota_abort(kvmesh_admin_t *a, const char *tenant, const char *domain,
                             const char *key, const char *op_id);

/* One reconciliation pass of tenant run by the runtime kv (which must enforce the tenant's
 * policy: tenant_policies), exactly what its reconciliation timer does, at once. total_* are
 * what the runtime reconciled since it opened (its timer's passes too: a runtime with a policy
 * reconciles every second by itself). */
typedef struct kvmesh_tools_recon {
    int rc; /* 0, or the first metadata error of the pass */
    uint32_t aborted, finalized, replayed, degraded, purged;
    bool more;
    uint64_t total_aborted, total_finalized, total_replayed, total_degraded, total_purged;
} kvmesh_tools_recon_t;
int kvmesh_tools_quota_reconcile(kvmesh_t *kv, const char *tenant, kvmesh_tools_recon_t *out);

#endif
