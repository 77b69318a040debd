/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c — the configuration field table and everything driven by it: defaults, the public
 * setter/getter by name, the field list, and the cross-field validation kvmesh_open runs.
 *
 * Invariants:
 *   - ONE table (kvm_cfg_fields below) names every field of struct kvmesh_config with its type,
 *     default (as the string a user would write), bounds or allowed words, and help. Defaults
 *     are applied by parsing the default strings through the same setter, so a default is
 *     always a legal value (the unit test checks every field round-trips).
 *   - kvmesh_config_set either stores a fully validated value or leaves the config unchanged
 *     and fails with KVMESH_ECONFIG and a message `FIELD: "VALUE" PROBLEM; allowed ALLOWED`.
 *   - Cross-field rules live only in kvm_config_validate.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config_table.h"
#include "core/ident.h"
#include "core/limits.h"
#include "core/util.h"
#include "route/route.h"
#include "store/alloc.h"
#include "store/proto.h"
#include "store/store.h"

#define MSZ(m) sizeof(((struct kvmesh_config *)0)->m)
#define OFF(m) offsetof(struct kvmesh_config, m)

#define KIB (1024ull)
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)
#define TIB (1024ull * GIB)

/* Limits of the configurable ranges (named so docs and tests can cite them). */
#define KVM_CFG_MEMORY_MAX     (4ull * TIB)
#define KVM_CFG_SEGMENT_MIN    (1ull * MIB)
#define KVM_CFG_SEGMENT_MAX    (64ull * GIB)
#define KVM_CFG_OBJECT_MIN     (4ull * KIB)
#define KVM_CFG_OBJECT_MAX     (4ull * GIB - 1) /* ALLOC_MAX_LEN: see below */
#define KVM_CFG_IO_THREADS_MAX 64u
#define KVM_CFG_TIMEOUT_MAX_MS 3600000u  /* one hour */
#define KVM_CFG_DRAIN_MAX_MS   86400000u /* one day */
#define KVM_CFG_VALUE_ECHO_MAX 96        /* bytes of a bad value quoted in an error */
/* One segment is one allocator (src/store/alloc.h), which takes at most ALLOC_MAX_SIZE (256 GiB),
 * less than a transport segment may be (SEG_MAX_SIZE, 1 TiB). */
_Static_assert(KVM_CFG_SEGMENT_MAX <= ALLOC_MAX_SIZE, "segment_size fits one allocator");
/* An object is at most 4 GiB - 1 byte: the owner's allocator keeps a block's length in 32 bits
 * (ALLOC_MAX_LEN, src/store/alloc.h; docs/store.md "Limits"). */

#define F_STR(n, def, syn, h)                                                                      \
    {                                                                                              \
        .name = #n, .type = KVM_CFG_STRING, .offset = OFF(n), .size = MSZ(n),                      \
        .default_value = def, .syntax = syn, .help = h                                             \
    }
#define F_SIZE(n, def, lo, hi, h)                                                                  \
    {                                                                                              \
        .name = #n, .type = KVM_CFG_SIZE, .offset = OFF(n), .size = MSZ(n), .default_value = def,  \
        .min = lo, .max = hi, .help = h                                                            \
    }
#define F_UINT(n, def, lo, hi, h)                                                                  \
    {                                                                                              \
        .name = #n, .type = KVM_CFG_UINT, .offset = OFF(n), .size = MSZ(n), .default_value = def,  \
        .min = lo, .max = hi, .help = h                                                            \
    }
#define F_DBL(n, def, lo, hi, h)                                                                   \
    {                                                                                              \
        .name = #n, .type = KVM_CFG_DOUBLE, .offset = OFF(n), .size = MSZ(n),                      \
        .default_value = def, .dmin = lo, .dmax = hi, .help = h                                    \
    }
#define F_BOOL(n, def, h)                                                                          \
    {                                                                                              \
        .name = #n, .type = KVM_CFG_BOOL, .offset = OFF(n), .size = MSZ(n), .default_value = def,  \
        .help = h                                                                                  \
    }
#define F_ENUM(n, def, h, ...)                                                                     \
    {                                                                                              \
        .name = #n, .type = KVM_CFG_ENUM, .offset = OFF(n), .size = MSZ(n), .default_value = def,  \
        .words = {__VA_ARGS__, NULL}, .help = h                                                    \
    }

/* The table. Enum word order = stored value (route_mode: enum route_mode; transport: enum
 * kvm_transport_choice; verify_reads: enum kvm_verify_reads). */
static const kvm_cfg_field_t kvm_cfg_fields[] = {
    F_STR(metadata_url, "memory://default", KVM_CFG_SYN_URL,
          "Metadata backend: memory://NAME (in-process, one store per NAME), "
          "redis://[user:pass@]host:port[/db], or etcd://host:port[,host:port...]."),
    F_STR(deployment, "default", KVM_CFG_SYN_NAME,
          "Deployment name: the metadata key prefix; runtimes of one deployment form one "
          "cluster."),
    F_STR(runtime_id, "", KVM_CFG_SYN_HEXID_OPT,
          "This runtime's id as 32 hex digits; empty = generate a fresh one at open."),
    F_STR(listen, "127.0.0.1:0", KVM_CFG_SYN_HOSTPORT,
          "host:port for peer RPC and the tcp data transport (port 0 = any free port)."),
    F_STR(advertise, "", KVM_CFG_SYN_HOSTPORT_OPT,
          "host:port that peers use to reach this runtime; empty = the bound listen address."),
    F_STR(admin_listen, "", KVM_CFG_SYN_HOSTPORT_OPT,
          "host:port of the HTTP admin endpoints (/healthz, /metrics, status page); empty = "
          "off."),
    F_STR(secret, "", KVM_CFG_SYN_ANY,
          "Deployment secret for peer authentication; empty = no authentication."),
    F_STR(default_tenant, "default", KVM_CFG_SYN_TENANT,
          "Tenant used by the tools when no --tenant is given."),
    F_SIZE(memory_size, "256MiB", 0, KVM_CFG_MEMORY_MAX,
           "Bytes of memory this runtime contributes to the cluster; 0 = client-only runtime "
           "(stores nothing, issues requests)."),
    F_SIZE(segment_size, "64MiB", KVM_CFG_SEGMENT_MIN, KVM_CFG_SEGMENT_MAX,
           "Bytes per memory segment (one memfd each); memory_size is carved into segments."),
    F_SIZE(max_object_size, "64MiB", KVM_CFG_OBJECT_MIN, KVM_CFG_OBJECT_MAX,
           "Largest value accepted by put; an object lives in one segment, so at most "
           "segment_size."),
    F_UINT(replicas, "1", 1, KVM_MAX_REPLICAS,
           "Default number of hot replicas per object (a put may override)."),
    F_ENUM(route_mode, "embedded_wrh",
           "Route mode of the deployment: embedded_wrh (routes held by runtimes, no metadata "
           "call on the hot path) or metadata_only (routes stored in the metadata backend).",
           "embedded_wrh", "metadata_only"),
    F_UINT(top_k, "3", 1, WRH_MAX_K, "Route authorities per shard (primary plus mirrors)."),
    F_UINT(shards, "64", 1, KVM_MAX_LOGICAL_SHARDS,
           "Logical route shards of the deployment (fixed at bootstrap)."),
    F_ENUM(transport, "auto",
           "Data-plane transport: auto (shared memory between runtimes on one host, tcp "
           "otherwise), tcp, or shm.",
           "auto", "tcp", "shm"),
    F_ENUM(verify_reads, "always",
           "Which replica reads verify the object's XXH3-64 checksum: always (every read; "
           "catches a corrupted replica and a read racing the reuse of freed space, local or "
           "remote), remote (only reads through a transport; copies from this runtime's own "
           "segments are trusted), or never (a corrupted or raced replica is returned as read).",
           "always", "remote", "never"),
    F_SIZE(
        inline_read_max, "256KiB", 0, ROUTE_INLINE_MAX,
        "Largest value a single get over tcp receives inline with its route lookup (one round "
        "trip instead of two) when the answering route authority owns a committed replica; "
        "above 256KiB only as the answer's raw payload (verify_reads always or remote; with "
        "never, 256KiB at most), and not faster than the replica read today (docs/performance.md "
        "\"Large gets over tcp, s11\"); "
        "a batch get's items each ask for at most the smaller of this and 64KiB, 1MiB a "
        "batch; the same bound caps what this runtime's authorities send; 0 = off "
        "(docs/store.md \"Inline reads\")."),
    F_ENUM(rpc_local, "unix",
           "Peer RPC to a runtime on this host: unix (this runtime also listens on a unix socket, "
           "/tmp/kvmesh-rpc-<runtime id>.sock, publishes it with its host identity (boot id and "
           "network namespace) in its membership record, and calls a peer that published one "
           "from the same host and namespace over it; tcp otherwise, and tcp for good to a peer "
           "whose socket could not be connected, its queued calls included; at open it removes "
           "such sockets that ended runtimes left and nothing listens on) or off (loopback tcp, "
           "as to any peer) (docs/rpc.md \"Same-host peers over a unix socket\").",
           "off", "unix"),
    F_SIZE(inline_write_max, "64KiB", 0, STORE_INLINE_WRITE_MAX,
           "Largest value a single put over tcp sends with its reservation to a remote owner "
           "(two round trips instead of three: no transport write); not to an owner on this host "
           "under transport auto, nor under shm; 0 = off (docs/store.md \"Inline writes\")."),
    F_DBL(weight, "1.0", 0.001, 1000000.0,
          "WRH placement weight of this runtime relative to the others."),
    F_UINT(lease_ttl_ms, "2000", 100, 600000,
           "Membership lease time to live in milliseconds; a runtime silent this long is "
           "considered gone (also the route authority lease, clamped to 2000..3000)."),
    F_UINT(request_timeout_ms, "5000", 1, KVM_CFG_TIMEOUT_MAX_MS,
           "End-to-end deadline of one request in milliseconds; kvmesh_close waits at most "
           "twice this + 5 s for the runtime's loop."),
    F_UINT(idle_timeout_ms, "300000", 0, KVM_CFG_DRAIN_MAX_MS,
           "Milliseconds after which an idle peer RPC or tcp data connection (no complete "
           "request) is closed; the connecting side closes its own after half of it; a peer RPC "
           "connection none of whose pending writes finished for this long is closed too (the "
           "peer stopped reading), and so is one whose writes stayed in flight this long "
           "draining less than 64 KiB/s (a slow reader); 0 = never."),
    F_UINT(drain_timeout_ms, "30000", 1, KVM_CFG_DRAIN_MAX_MS,
           "Upper bound of a graceful drain (kvmesh_drain with 0, SIGTERM of kvmeshd) in "
           "milliseconds."),
    F_UINT(reclaim_grace_ms, "2000", 0, 600000,
           "Milliseconds a freed replica's bytes stay untouched before reuse (readers in flight "
           "finish)."),
    F_SIZE(rereplicate_bytes_per_sec, "256MiB", 0, KVM_CFG_MEMORY_MAX,
           "Bytes per second this runtime copies to restore the replica count of objects whose "
           "owner left, died or drains (background re-replication); 0 = unlimited."),
    F_UINT(rereplicate_max_copies, "16", 0, 1024,
           "Re-replication copies this runtime has in flight at once (one round); 0 = "
           "re-replication off (objects stay under-replicated until rewritten)."),
    F_UINT(tombstone_retention_ms, "60000", 1000, KVM_CFG_DRAIN_MAX_MS,
           "Milliseconds a removed or evicted object's tombstone is kept after it is published "
           "(pending) or finalized (it reads as absent after that), then purged from the route "
           "authorities (MetadataOnly: from metadata). A tenant with a quota policy keeps its "
           "terminal accounting history (operation records, deleted object rows) as long "
           "(docs/tenancy.md \"Purging a quota tenant's tombstones\"). Must be above "
           "request_timeout_ms + 550, the longest a route CAS can be in flight (checked at "
           "open)."),
    F_DBL(evict_high_watermark, "0.90", 0.01, 1.0,
          "Fraction of memory_size in use at which eviction starts."),
    F_DBL(evict_low_watermark, "0.80", 0.0, 0.99,
          "Fraction of memory_size eviction brings usage back to (below the high watermark)."),
    F_UINT(io_threads, "2", 1, KVM_CFG_IO_THREADS_MAX, "Transport I/O threads."),
    F_BOOL(hugepages, "false",
           "Try huge-page backed segments (MFD_HUGETLB), falling back to normal pages."),
    F_BOOL(prefault_segments, "false",
           "Fault every page of this runtime's segments, and of its mappings of same-host "
           "owners' segments, in when they are mapped (MADV_POPULATE_WRITE, Linux >= 5.14), so "
           "that puts and gets take no page faults; costs about 0.4 s of CPU per GiB at start "
           "(the memory is allocated and zeroed then, not on first use)."),
    F_DBL(trace_sample_rate, "0", 0.0, 1.0,
          "Fraction of requests started here that are traced (head sampling; the decision "
          "travels to every runtime the request touches); 0 = none."),
    F_STR(trace_capture_dir, "", KVM_CFG_SYN_ANY,
          "Directory for this runtime's JSONL span capture (file trace-<runtime id>.jsonl, "
          "started at open; also the directory of /trace captures); empty = off."),
    F_STR(trace_otlp_url, "", KVM_CFG_SYN_HTTP_URL_OPT,
          "OTLP/HTTP (JSON) traces endpoint, e.g. http://127.0.0.1:4318/v1/traces; empty = "
          "no OTLP export."),
    F_STR(trace_service_name, "kvmesh", KVM_CFG_SYN_NAME,
          "service.name of the spans this runtime exports."),
    F_STR(tenant_policies, "", KVM_CFG_SYN_TENANT_POLICIES,
          "Tenant-root quota policies this runtime bootstraps and enforces, comma separated: "
          "tenant:max_bytes:max_objects[:policy_version] (max_bytes a size, policy_version "
          "default 1); empty = no quota (the quota protocol is off)."),
    F_BOOL(tenant_quota_evict, "false",
           "Tenant-local quota recovery (runtime-local, soft): a put refused for quota removes "
           "the oldest objects this runtime wrote for the same tenant (with their refund) and "
           "retries once; off = the put fails with KVMESH_EQUOTA."),
    F_BOOL(fairness, "true",
           "Soft tenant isolation: remote payload batches are queued per tenant and submitted in "
           "weighted round-robin turns within the limits below; off = every request submits at "
           "once (docs/tenancy.md \"Soft isolation\")."),
    F_UINT(max_remote_batch_items_per_tenant, "128", 1, 1024,
           "Items of one tenant in one remote batch, and in one scheduling turn (times the "
           "tenant's weight)."),
    F_SIZE(max_remote_batch_bytes, "16MiB", 4096, KVM_CFG_MEMORY_MAX,
           "Bytes of one remote batch, and of one scheduling turn (times the tenant's weight); "
           "a single larger item travels alone."),
    F_UINT(max_remote_batch_burst_items, "256", 1, 65536,
           "Items of one tenant in flight at once (at least max_remote_batch_items_per_tenant); "
           "a tenant at the cap waits for its completions while the others go on."),
    F_SIZE(max_inflight_bytes_per_batch, "256MiB", 4096, KVM_CFG_MEMORY_MAX,
           "Bytes of remote batches in flight at once in this runtime, all tenants together; "
           "released when a batch completes or fails."),
    F_UINT(fair_queue_depth, "256", 1, 4096,
           "Remote batches one tenant may have queued in this runtime; beyond it a put fails "
           "with KVMESH_EAGAIN."),
    F_STR(tenant_weights, "", KVM_CFG_SYN_TENANT_WEIGHTS,
          "Fair-scheduling weights, comma separated tenant:weight (1..64); unlisted tenants "
          "have weight 1."),
    F_STR(tenant_placement, "", KVM_CFG_SYN_TENANT_PLACE,
          "Per-tenant placement preferences, comma separated tenant:owner[+owner...][:soft|hard] "
          "(owners are runtime ids); soft (default) falls back to other owners, hard fails the "
          "put with KVMESH_EUNAVAILABLE when the owners cannot take the replicas."),
    F_BOOL(place_on_primary, "true",
           "Place one replica of a put on its key's shard primary (EmbeddedWrh, when the "
           "primary is a live storage member) after the preferred owners and this runtime, "
           "before the WRH order: a small put from a client is one exchange there and a get's "
           "lookup carries the bytes (docs/store.md \"Placement order\")."),
    F_ENUM(cold_kind, "off",
           "Cold tier device of this runtime (docs/cold.md): off, localdir (one file per object) "
           "or extent (append-only segment files with a journal).",
           "off", "localdir", "extent"),
    F_STR(cold_root, "", KVM_CFG_SYN_ANY,
          "Directory of the cold device (must exist and be writable); required when cold_kind "
          "is not off."),
    F_SIZE(cold_capacity, "1GiB", 1, KVM_CFG_MEMORY_MAX,
           "Payload bytes the cold device may hold (at most what its filesystem holds)."),
    F_BOOL(cold_offload, "true",
           "Offload every new object written here to the cold device of a runtime holding one "
           "of its replicas (this runtime's own first), in the background, so DRAM eviction of "
           "the last hot copy keeps it readable from cold."),
    F_BOOL(cold_write_through, "false",
           "A put acknowledges only once its cold copy is usage-committed on a cold device "
           "(the offload runs inline with the put, ahead of queued ones), so an acknowledged "
           "object survives a kill -9 of its only hot owner; a put that cannot get a cold copy "
           "fails. Needs cold_kind, cold_offload and cold_offload_mode passthrough "
           "(docs/cold.md \"Durable puts\")."),
    F_UINT(cold_queue, "1024", 1, 4096,
           "Offload jobs queued at most; beyond it a write stays hot-only."),
    F_ENUM(cold_offload_mode, "passthrough",
           "When objects go to the cold device: passthrough (every write is offloaded in the "
           "background after its route CAS) or evict (eviction-triggered: nothing is offloaded "
           "until DRAM eviction picks a victim, which is materialized on the device before its "
           "DRAM is freed; docs/cold.md \"Offload modes\").",
           "passthrough", "evict"),
    F_ENUM(cold_offload_order, "fifo",
           "Order of queued passthrough offloads: fifo, or size (smallest first); "
           "eviction-triggered offloads always go first.",
           "fifo", "size"),
    F_SIZE(cold_offload_bytes_per_sec, "0", 0, KVM_CFG_MEMORY_MAX,
           "Offload payload bytes started per second (token bucket, one second of burst); 0 = "
           "unlimited. Applies to eviction-triggered offloads too."),
    F_DBL(cold_high_watermark, "0", 0.0, 1.0,
          "DRAM used fraction at which passthrough offload starts (0 = always on); it stops "
          "again below cold_low_watermark. Must not exceed evict_high_watermark."),
    F_DBL(cold_low_watermark, "0", 0.0, 0.99,
          "DRAM used fraction below which passthrough offload stops (with cold_high_watermark "
          "set; must be below it)."),
    F_UINT(cold_retry_backoff_ms, "2", 1, 60000,
           "First delay of an offload job's retry after a transient failure; it doubles per "
           "retry up to cold_retry_backoff_max_ms (each delay drawn from [d/2, d])."),
    F_UINT(cold_reconcile_after_ms, "10000", 100, 3600000,
           "A cold operation left in a non-terminal state (its runtime crashed, its job was "
           "parked) is resumed by the device owner's reconciliation after this long."),
    F_UINT(cold_record_retention_ms, "600000", 0, 86400000,
           "Terminal cold operation and reclaim records (released) are deleted from metadata "
           "this long after they ended, by the device owners' reconciliation from their due "
           "index; 0 keeps them forever."),
    F_UINT(cold_retry_backoff_max_ms, "10000", 1, 600000,
           "Cap of an offload job's retry delay (at least cold_retry_backoff_ms)."),
    F_SIZE(cold_clean_bytes_per_tick, "64MiB", 0, KVM_CFG_MEMORY_MAX,
           "Bytes the cold device's background maintenance may move per 200 ms tick (ExtentStore "
           "cleaning: live extents copied out of mostly-dead segments, which are then removed; "
           "one job at a time on the cold I/O worker); 0 = off."),
    F_SIZE(cold_segment_bytes, "256MiB", 65536, KVM_CFG_MEMORY_MAX,
           "Segment file size of an ExtentStore cold device (cold_kind = extent); cleaning "
           "reclaims whole segments."),
    F_BOOL(cold_nfs, "false",
           "cold_root is an NFS/NFS4 target: at start the mount is checked (filesystem type nfs "
           "or nfs4, mounted read-write and hard, from statfs and /proc/self/mountinfo) and the "
           "runtime refuses to start otherwise."),
    F_STR(cold_devices, "", KVM_CFG_SYN_COLD_DEVICES,
          "More cold devices of this runtime (devices 1..7; device 0 is cold_kind, cold_root, "
          "cold_capacity, which must be set), separated by ';': kind:root[:capacity[:tags]] with "
          "kind localdir or extent, root a directory (no ':' or ';', under 256 bytes), capacity "
          "a size (empty = cold_capacity) and tags comma-separated words; each becomes its own "
          "device record, and placement picks the device with the most room (docs/cold.md "
          "\"Several devices\")."),
    F_UINT(cold_staging_slots, "64", 1, 4096,
           "Staging slots of remote restore on the cold device's owner (docs/cold.md \"Staging "
           "pool\"); a read finding every slot busy is refused with backpressure and retried."),
    F_SIZE(cold_staging_bytes, "256MiB", 65536, KVM_CFG_MEMORY_MAX,
           "Bytes of the owner's transport-registered staging segment (slots share it; an object "
           "larger than it cannot be restored remotely)."),
    F_UINT(cold_staging_ttl_ms, "10000", 10, 600000,
           "A staged slot not acknowledged by its reader within this long expires: its transfer "
           "token is fenced and the slot recycled."),
};

const kvm_cfg_field_t *kvm_config_table(size_t *n)
{
    *n = KVM_ARRAY_SIZE(kvm_cfg_fields);
    return kvm_cfg_fields;
}

const kvm_cfg_field_t *kvm_config_lookup(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(kvm_cfg_fields); i++)
        if (strcmp(kvm_cfg_fields[i].name, name) == 0)
            return &kvm_cfg_fields[i];
    return NULL;
}

const char *kvm_config_type_name(enum kvm_cfg_type t)
{
    switch (t) {
    case KVM_CFG_STRING:
        return "string";
    case KVM_CFG_SIZE:
        return "size";
    case KVM_CFG_UINT:
        return "uint";
    case KVM_CFG_DOUBLE:
        return "double";
    case KVM_CFG_BOOL:
        return "bool";
    case KVM_CFG_ENUM:
        return "enum";
    }
    return "?";
}

/* ---- sizes -------------------------------------------------------------------------------- */

static const struct {
    const char *suffix;
    uint64_t mult;
} size_units[] = {
    {"", 1},
    {"B", 1},
    {"K", KIB},
    {"KiB", KIB},
    {"KB", 1000ull},
    {"M", MIB},
    {"MiB", MIB},
    {"MB", 1000000ull},
    {"G", GIB},
    {"GiB", GIB},
    {"GB", 1000000000ull},
    {"T", TIB},
    {"TiB", TIB},
    {"TB", 1000000000000ull},
};

#define SIZE_UNITS_TEXT                                                                            \
    "a byte count with optional unit B, KiB|K, MiB|M, GiB|G, TiB|T, KB, MB, GB, TB"

static void echo_value(const char *v, char *buf, size_t cap)
{
    /* Quote at most KVM_CFG_VALUE_ECHO_MAX bytes, control characters as '?'. */
    size_t n = 0;
    for (; v[n] && n + 4 < cap && n < KVM_CFG_VALUE_ECHO_MAX; n++)
        buf[n] = (unsigned char)v[n] < 0x20 || (unsigned char)v[n] == 0x7f ? '?' : v[n];
    if (v[n] && n + 4 < cap) {
        buf[n++] = '.';
        buf[n++] = '.';
        buf[n++] = '.';
    }
    buf[n] = '\0';
}

static int parse_size_raw(const char *s, uint64_t *out)
{
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return -1;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -2;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(size_units); i++) {
        if (strcmp(p, size_units[i].suffix) == 0) {
            if (v != 0 && size_units[i].mult > UINT64_MAX / v)
                return -2;
            *out = v * size_units[i].mult;
            return 0;
        }
    }
    return -1;
}

int kvm_config_parse_size(const char *what, const char *s, uint64_t *out)
{
    char echo[KVM_CFG_VALUE_ECHO_MAX + 8];
    if (!s)
        return kvm_errf(KVMESH_ECONFIG, "%s: missing value; allowed %s", what, SIZE_UNITS_TEXT);
    echo_value(s, echo, sizeof(echo));
    int r = parse_size_raw(s, out);
    if (r == -2)
        return kvm_errf(KVMESH_ECONFIG, "%s: \"%s\" overflows 64 bits; allowed %s", what, echo,
                        SIZE_UNITS_TEXT);
    if (r != 0)
        return kvm_errf(KVMESH_ECONFIG, "%s: \"%s\" is not a size; allowed %s", what, echo,
                        SIZE_UNITS_TEXT);
    return 0;
}

void kvm_config_format_size(uint64_t v, char *buf, size_t cap)
{
    static const struct {
        const char *u;
        uint64_t m;
    } units[] = {{"TiB", TIB}, {"GiB", GIB}, {"MiB", MIB}, {"KiB", KIB}};
    for (size_t i = 0; i < KVM_ARRAY_SIZE(units); i++) {
        if (v != 0 && v % units[i].m == 0) {
            snprintf(buf, cap, "%" PRIu64 "%s", v / units[i].m, units[i].u);
            return;
        }
    }
    snprintf(buf, cap, "%" PRIu64, v);
}

/* ---- string syntax ------------------------------------------------------------------------- */

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}

static bool valid_hostport(const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return false;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[') { /* [v6]:port */
        if (hl < 3 || s[hl - 1] != ']')
            return false;
    } else {
        for (size_t i = 0; i < hl; i++)
            if (!name_char(s[i]))
                return false;
    }
    const char *p = colon + 1;
    if (!*p || strlen(p) > 5)
        return false;
    unsigned long port = 0;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return false;
        port = port * 10 + (unsigned long)(*p - '0');
    }
    return port <= 65535;
}

static bool valid_url(const char *s)
{
    static const char *schemes[] = {"memory://", "redis://", "etcd://"};
    for (size_t i = 0; i < KVM_ARRAY_SIZE(schemes); i++) {
        size_t n = strlen(schemes[i]);
        if (strncmp(s, schemes[i], n) == 0 && s[n] != '\0') {
            for (const char *p = s + n; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p == 0x7f)
                    return false;
            return true;
        }
    }
    return false;
}

static int policy_fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int policy_fail(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return KVMESH_ECONFIG;
}

static bool parse_u32_pos(const char *s, size_t n, uint32_t *out)
{
    uint64_t x = 0;
    if (n == 0 || n > 10)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    if (x == 0 || x > UINT32_MAX)
        return false;
    *out = (uint32_t)x;
    return true;
}

/* One entry of a list of SEP-separated entries of ':'-separated fields (tenant_policies,
 * cold_devices). list_split copies the entry at c->p into c->item and splits it; list_advance
 * moves c->p past it. */
struct list_cursor {
    const char *p;   /* the rest of the list (the entry being parsed starts here) */
    const char *end; /* the separator after the entry, or NULL for the last one */
    char sep;
    char item[KVM_CFG_STR_MAX];
    char *parts[5];
    int np;
};

/* false: the entry is empty or longer than an item holds. */
static bool list_split(struct list_cursor *c)
{
    c->end = strchr(c->p, c->sep);
    size_t len = c->end ? (size_t)(c->end - c->p) : strlen(c->p);
    if (len == 0 || len >= sizeof(c->item))
        return false;
    memcpy(c->item, c->p, len);
    c->item[len] = '\0';
    memset(c->parts, 0, sizeof(c->parts));
    c->np = 0;
    for (char *q = c->item, *tok; c->np < 5 && (tok = strsep(&q, ":")) != NULL;)
        c->parts[c->np++] = tok;
    return true;
}

/* false: the list ends with its separator. */
static bool list_advance(struct list_cursor *c)
{
    c->p = c->end ? c->end + 1 : c->p + strlen(c->p);
    return !(c->end && !*c->p);
}

/* Hands the n parsed entries (each SIZE bytes) to the caller's OUT / N_OUT (either NULL). */
static int list_finish(const void *tmp, size_t size, uint32_t n, void *out, uint32_t *n_out)
{
    if (out)
        memcpy(out, tmp, n * size);
    if (n_out)
        *n_out = n;
    return 0;
}

int kvm_config_parse_policies(const char *v, struct kvm_store_tenant_policy *out, uint32_t *n_out,
                              char *why, size_t cap)
{
    struct kvm_store_tenant_policy tmp[KVM_STORE_TENANT_POLICIES_MAX];
    uint32_t n = 0;
    struct list_cursor c = {.p = v, .sep = ','};
    char **parts = c.parts;
    while (*c.p) {
        if (n == KVM_STORE_TENANT_POLICIES_MAX)
            return policy_fail(why, cap, "lists more than %d policies",
                               KVM_STORE_TENANT_POLICIES_MAX);
        if (!list_split(&c))
            return policy_fail(why, cap, "has an empty policy (policy %u)", n + 1);
        int np = c.np;
        if (np < 3 || np > 4)
            return policy_fail(
                why, cap, "policy %u is not tenant:max_bytes:max_objects[:policy_version]", n + 1);
        struct kvm_store_tenant_policy *t = &tmp[n];
        memset(t, 0, sizeof(*t));
        if (kvm_ident_check_tenant(parts[0], strlen(parts[0])) != 0)
            return policy_fail(why, cap,
                               "policy %u: tenant '%.64s' breaks the tenant id rule (1..64 of "
                               "[A-Za-z0-9_.-], first alphanumeric)",
                               n + 1, parts[0]);
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(tmp[i].tenant, parts[0]) == 0)
                return policy_fail(why, cap, "tenant '%s' is listed twice", parts[0]);
        snprintf(t->tenant, sizeof(t->tenant), "%s", parts[0]);
        if (parse_size_raw(parts[1], &t->max_bytes) != 0 || t->max_bytes == 0)
            return policy_fail(why, cap, "policy %u (%s): max_bytes '%.32s' is not a size >= 1",
                               n + 1, t->tenant, parts[1]);
        uint32_t mo = 0;
        if (!parse_u32_pos(parts[2], strlen(parts[2]), &mo))
            return policy_fail(why, cap,
                               "policy %u (%s): max_objects '%.32s' is not an integer 1..2^32-1",
                               n + 1, t->tenant, parts[2]);
        t->max_objects = mo;
        t->policy_version = 1;
        if (np == 4 && !parse_u32_pos(parts[3], strlen(parts[3]), &t->policy_version))
            return policy_fail(why, cap,
                               "policy %u (%s): policy_version '%.32s' is not an integer 1..2^32-1",
                               n + 1, t->tenant, parts[3]);
        n++;
        if (!list_advance(&c))
            return policy_fail(why, cap, "ends with a comma");
    }
    return list_finish(tmp, sizeof(tmp[0]), n, out, n_out);
}

static bool tag_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}

int kvm_config_parse_cold_devices(const char *v, uint64_t default_capacity,
                                  struct kvm_store_cold_device *out, uint32_t *n_out, char *why,
                                  size_t cap)
{
    struct kvm_store_cold_device tmp[KVM_STORE_COLD_DEVICES_MAX - 1];
    uint32_t n = 0;
    struct list_cursor c = {.p = v, .sep = ';'};
    char **parts = c.parts;
    while (*c.p) {
        uint32_t dev = n + 1; /* device 0 is cold_kind/cold_root */
        if (n == KVM_STORE_COLD_DEVICES_MAX - 1)
            return policy_fail(why, cap,
                               "lists more than %d devices (device 0 is cold_kind/cold_root; at "
                               "most %d devices per runtime)",
                               KVM_STORE_COLD_DEVICES_MAX - 1, KVM_STORE_COLD_DEVICES_MAX);
        if (!list_split(&c))
            return policy_fail(why, cap, "device %u: empty entry", dev);
        int np = c.np;
        if (np < 2 || np > 4)
            return policy_fail(why, cap, "device %u: '%.64s' is not kind:root[:capacity[:tags]]",
                               dev, c.p);
        struct kvm_store_cold_device *d = &tmp[n];
        memset(d, 0, sizeof(*d));
        if (strcmp(parts[0], "localdir") == 0)
            d->kind = KVM_STORE_COLD_LOCALDIR;
        else if (strcmp(parts[0], "extent") == 0)
            d->kind = KVM_STORE_COLD_EXTENT;
        else
            return policy_fail(why, cap, "device %u: kind '%.32s' is not localdir or extent", dev,
                               parts[0]);
        size_t rl = strlen(parts[1]);
        if (rl == 0 || rl >= 256)
            return policy_fail(why, cap, "device %u: root must be 1..255 bytes (it is %zu)", dev,
                               rl);
        for (size_t i = 0; i < rl; i++)
            if ((unsigned char)parts[1][i] < 0x20 || (unsigned char)parts[1][i] == 0x7f)
                return policy_fail(why, cap, "device %u: root has a control character", dev);
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(tmp[i].root, parts[1]) == 0)
                return policy_fail(why, cap, "device %u: root '%.64s' is device %u's root too", dev,
                                   parts[1], i + 1);
        memcpy(d->root, parts[1], rl + 1);
        d->capacity = default_capacity;
        if (np >= 3 && parts[2][0] &&
            (parse_size_raw(parts[2], &d->capacity) != 0 || d->capacity == 0 ||
             d->capacity > KVM_CFG_MEMORY_MAX))
            return policy_fail(why, cap,
                               "device %u: capacity '%.32s' is not a size 1..4TiB (e.g. 8GiB; "
                               "empty = cold_capacity)",
                               dev, parts[2]);
        if (np == 4) {
            size_t tl = strlen(parts[3]);
            if (tl >= sizeof(d->tags))
                return policy_fail(why, cap, "device %u: tags are %zu bytes (at most %zu)", dev, tl,
                                   sizeof(d->tags) - 1);
            for (size_t i = 0, w = 0; i <= tl; i++) {
                if (i == tl || parts[3][i] == ',') {
                    if (w == 0)
                        return policy_fail(why, cap, "device %u: tags have an empty tag", dev);
                    w = 0;
                } else if (!tag_char(parts[3][i])) {
                    return policy_fail(why, cap,
                                       "device %u: tags '%.64s': a tag is [A-Za-z0-9_.-], tags "
                                       "separated by ','",
                                       dev, parts[3]);
                } else {
                    w++;
                }
            }
            memcpy(d->tags, parts[3], tl + 1);
        }
        n++;
        if (!list_advance(&c))
            return policy_fail(why, cap, "ends with a ';'");
    }
    return list_finish(tmp, sizeof(tmp[0]), n, out, n_out);
}

static bool syntax_ok(enum kvm_cfg_syntax syn, const char *v)
{
    size_t n = strlen(v);
    switch (syn) {
    case KVM_CFG_SYN_ANY:
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] == 0x7f)
                return false;
        return true;
    case KVM_CFG_SYN_URL:
        return valid_url(v);
    case KVM_CFG_SYN_NAME:
        if (n < 1 || n > 63)
            return false;
        for (size_t i = 0; i < n; i++)
            if (!name_char(v[i]))
                return false;
        return true;
    case KVM_CFG_SYN_HEXID_OPT:
        if (n == 0)
            return true;
        if (n != KVMESH_ID_HEX_LEN)
            return false;
        for (size_t i = 0; i < n; i++)
            if (!isxdigit((unsigned char)v[i]))
                return false;
        return true;
    case KVM_CFG_SYN_HOSTPORT:
        return valid_hostport(v);
    case KVM_CFG_SYN_HOSTPORT_OPT:
        return n == 0 || valid_hostport(v);
    case KVM_CFG_SYN_TENANT:
        if (n < 1 || n > KVM_TENANT_MAX_LEN || !isalnum((unsigned char)v[0]))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!name_char(v[i]))
                return false;
        return true;
    case KVM_CFG_SYN_HTTP_URL_OPT: {
        if (n == 0)
            return true;
        size_t p = strncmp(v, "http://", 7) == 0 ? 7 : strncmp(v, "https://", 8) == 0 ? 8 : 0;
        if (p == 0 || v[p] == '\0')
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)v[i] <= 0x20 || (unsigned char)v[i] == 0x7f)
                return false;
        return true;
    }
    case KVM_CFG_SYN_TENANT_POLICIES:
        return kvm_config_parse_policies(v, NULL, NULL, NULL, 0) == 0;
    case KVM_CFG_SYN_TENANT_WEIGHTS:
        return kvm_config_parse_weights(v, NULL, NULL, NULL, 0) == 0;
    case KVM_CFG_SYN_TENANT_PLACE:
        return kvm_config_parse_placement(v, NULL, NULL, NULL, 0) == 0;
    case KVM_CFG_SYN_COLD_DEVICES:
        return kvm_config_parse_cold_devices(v, 1, NULL, NULL, NULL, 0) == 0;
    }
    return false;
}

static const char *syntax_text(enum kvm_cfg_syntax syn)
{
    switch (syn) {
    case KVM_CFG_SYN_ANY:
        return "printable characters";
    case KVM_CFG_SYN_URL:
        return "memory://NAME, redis://[user:pass@]host:port[/db] or etcd://host:port[,...]";
    case KVM_CFG_SYN_NAME:
        return "1..63 characters of [A-Za-z0-9_.-]";
    case KVM_CFG_SYN_HEXID_OPT:
        return "empty or 32 hex digits";
    case KVM_CFG_SYN_HOSTPORT:
        return "host:port with port 0..65535";
    case KVM_CFG_SYN_HOSTPORT_OPT:
        return "empty or host:port with port 0..65535";
    case KVM_CFG_SYN_TENANT:
        return "1..64 characters of [A-Za-z0-9_.-], first alphanumeric";
    case KVM_CFG_SYN_HTTP_URL_OPT:
        return "empty or an http:// or https:// URL without spaces";
    case KVM_CFG_SYN_TENANT_POLICIES:
        return "empty or up to 16 comma-separated tenant:max_bytes:max_objects[:policy_version] "
               "(tenant by the tenant id rule, max_bytes a size >= 1, max_objects and "
               "policy_version 1..2^32-1, each tenant once)";
    case KVM_CFG_SYN_TENANT_WEIGHTS:
        return "empty or up to 16 comma-separated tenant:weight (tenant by the tenant id rule, "
               "weight 1..64, each tenant once)";
    case KVM_CFG_SYN_TENANT_PLACE:
        return "empty or up to 16 comma-separated tenant:owner[+owner...][:soft|hard] (1..4 "
               "owners of 32 hex digits, each tenant once)";
    case KVM_CFG_SYN_COLD_DEVICES:
        return "empty or up to 7 ';'-separated kind:root[:capacity[:tag,tag...]] (kind localdir "
               "or extent, root 1..255 bytes without ':' or ';', each root once, capacity a size "
               "1..4TiB, tags of [A-Za-z0-9_.-] in 127 bytes)";
    }
    return "?";
}

void kvm_config_allowed(const kvm_cfg_field_t *f, char *buf, size_t cap)
{
    char a[32], b[32];
    size_t off = 0;
    switch (f->type) {
    case KVM_CFG_STRING:
        snprintf(buf, cap, "%s, at most %zu bytes", syntax_text(f->syntax), f->size - 1);
        return;
    case KVM_CFG_SIZE:
        kvm_config_format_size(f->min, a, sizeof(a));
        kvm_config_format_size(f->max, b, sizeof(b));
        snprintf(buf, cap, "%s..%s (%s)", a, b, SIZE_UNITS_TEXT);
        return;
    case KVM_CFG_UINT:
        snprintf(buf, cap, "%" PRIu64 "..%" PRIu64, f->min, f->max);
        return;
    case KVM_CFG_DOUBLE:
        snprintf(buf, cap, "%g..%g", f->dmin, f->dmax);
        return;
    case KVM_CFG_BOOL:
        snprintf(buf, cap, "true|false (also yes|no, on|off, 1|0)");
        return;
    case KVM_CFG_ENUM:
        buf[0] = '\0';
        for (size_t i = 0; f->words[i] && off < cap; i++) {
            int w = snprintf(buf + off, cap - off, "%s%s", i ? "|" : "", f->words[i]);
            if (w < 0)
                break;
            off += (size_t)w;
        }
        return;
    }
}

static size_t md_append(char *buf, size_t cap, size_t off, const char *s, bool escape)
{
    for (; *s && off + 2 < cap; s++) {
        if (escape && *s == '|')
            buf[off++] = '\\';
        buf[off++] = *s;
    }
    buf[off] = '\0';
    return off;
}

void kvm_config_markdown_row(const kvm_cfg_field_t *f, char *buf, size_t cap)
{
    char allowed[320];
    kvm_config_allowed(f, allowed, sizeof(allowed));
    size_t off = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    off = md_append(buf, cap, off, "| `", false);
    off = md_append(buf, cap, off, f->name, false);
    off = md_append(buf, cap, off, "` | ", false);
    off = md_append(buf, cap, off, kvm_config_type_name(f->type), false);
    off = md_append(buf, cap, off, f->default_value[0] ? " | `" : " | `\"\"", false);
    off = md_append(buf, cap, off, f->default_value, true);
    off = md_append(buf, cap, off, "` | ", false);
    off = md_append(buf, cap, off, allowed, true);
    off = md_append(buf, cap, off, " | ", false);
    off = md_append(buf, cap, off, f->help, true);
    md_append(buf, cap, off, " |", false);
}

/* ---- set / get ------------------------------------------------------------------------------ */

static int bad(const kvm_cfg_field_t *f, const char *value, const char *problem)
{
    char echo[KVM_CFG_VALUE_ECHO_MAX + 8], allowed[256];
    echo_value(value, echo, sizeof(echo));
    kvm_config_allowed(f, allowed, sizeof(allowed));
    return kvm_errf(KVMESH_ECONFIG, "%s: \"%s\" %s; allowed %s", f->name, echo, problem, allowed);
}

static int parse_bool(const char *v, bool *out)
{
    static const char *yes[] = {"true", "yes", "on", "1"};
    static const char *no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < KVM_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int field_set(struct kvmesh_config *cfg, const kvm_cfg_field_t *f, const char *v)
{
    char *dst = (char *)cfg + f->offset;
    switch (f->type) {
    case KVM_CFG_STRING: {
        size_t n = strlen(v);
        if (n >= f->size) {
            char what[64];
            snprintf(what, sizeof(what), "is too long (%zu bytes)", n);
            return bad(f, v, what);
        }
        char why[160];
        if ((f->syntax == KVM_CFG_SYN_TENANT_POLICIES &&
             kvm_config_parse_policies(v, NULL, NULL, why, sizeof(why)) != 0) ||
            (f->syntax == KVM_CFG_SYN_TENANT_WEIGHTS &&
             kvm_config_parse_weights(v, NULL, NULL, why, sizeof(why)) != 0) ||
            (f->syntax == KVM_CFG_SYN_TENANT_PLACE &&
             kvm_config_parse_placement(v, NULL, NULL, why, sizeof(why)) != 0) ||
            (f->syntax == KVM_CFG_SYN_COLD_DEVICES &&
             kvm_config_parse_cold_devices(v, 1, NULL, NULL, why, sizeof(why)) != 0))
            return bad(f, v, why);
        if (!syntax_ok(f->syntax, v))
            return bad(f, v, "is invalid");
        memcpy(dst, v, n + 1);
        return 0;
    }
    case KVM_CFG_SIZE: {
        uint64_t x;
        int r = parse_size_raw(v, &x);
        if (r == -2)
            return bad(f, v, "overflows 64 bits");
        if (r != 0)
            return bad(f, v, "is not a size");
        if (x < f->min || x > f->max)
            return bad(f, v, "is out of range");
        KVM_ASSERT(f->size == sizeof(uint64_t));
        memcpy(dst, &x, sizeof(x));
        return 0;
    }
    case KVM_CFG_UINT: {
        if (!isdigit((unsigned char)v[0]))
            return bad(f, v, "is not an unsigned integer");
        errno = 0;
        char *end;
        unsigned long long x = strtoull(v, &end, 10);
        if (*end != '\0')
            return bad(f, v, "is not an unsigned integer");
        if (errno == ERANGE || x < f->min || x > f->max)
            return bad(f, v, "is out of range");
        uint32_t u = (uint32_t)x;
        KVM_ASSERT(f->size == sizeof(uint32_t));
        memcpy(dst, &u, sizeof(u));
        return 0;
    }
    case KVM_CFG_DOUBLE: {
        if (!v[0] || isspace((unsigned char)v[0]))
            return bad(f, v, "is not a number");
        errno = 0;
        char *end;
        double x = strtod(v, &end);
        if (*end != '\0' || end == v)
            return bad(f, v, "is not a number");
        if (!isfinite(x) || errno == ERANGE || x < f->dmin || x > f->dmax)
            return bad(f, v, "is out of range");
        KVM_ASSERT(f->size == sizeof(double));
        memcpy(dst, &x, sizeof(x));
        return 0;
    }
    case KVM_CFG_BOOL: {
        bool b;
        if (parse_bool(v, &b) != 0)
            return bad(f, v, "is not a boolean");
        KVM_ASSERT(f->size == sizeof(bool));
        memcpy(dst, &b, sizeof(b));
        return 0;
    }
    case KVM_CFG_ENUM:
        for (uint32_t i = 0; f->words[i]; i++) {
            if (strcmp(f->words[i], v) == 0) {
                KVM_ASSERT(f->size == sizeof(uint32_t));
                memcpy(dst, &i, sizeof(i));
                return 0;
            }
        }
        return bad(f, v, "is not allowed");
    }
    return kvm_errf(KVMESH_EINTERNAL, "%s: unknown field type", f->name);
}

static int field_get(const struct kvmesh_config *cfg, const kvm_cfg_field_t *f, char *buf,
                     size_t cap)
{
    const char *src = (const char *)cfg + f->offset;
    char tmp[KVM_CFG_STR_MAX + 8];
    switch (f->type) {
    case KVM_CFG_STRING:
        snprintf(tmp, sizeof(tmp), "%s", src);
        break;
    case KVM_CFG_SIZE: {
        uint64_t x;
        memcpy(&x, src, sizeof(x));
        kvm_config_format_size(x, tmp, sizeof(tmp));
        break;
    }
    case KVM_CFG_UINT: {
        uint32_t x;
        memcpy(&x, src, sizeof(x));
        snprintf(tmp, sizeof(tmp), "%" PRIu32, x);
        break;
    }
    case KVM_CFG_DOUBLE: {
        double x;
        memcpy(&x, src, sizeof(x));
        snprintf(tmp, sizeof(tmp), "%g", x);
        if (strtod(tmp, NULL) != x)
            snprintf(tmp, sizeof(tmp), "%.17g", x);
        break;
    }
    case KVM_CFG_BOOL: {
        bool b;
        memcpy(&b, src, sizeof(b));
        snprintf(tmp, sizeof(tmp), "%s", b ? "true" : "false");
        break;
    }
    case KVM_CFG_ENUM: {
        uint32_t x;
        memcpy(&x, src, sizeof(x));
        size_t nw = 0;
        while (f->words[nw])
            nw++;
        if (x >= nw)
            return kvm_errf(KVMESH_EINTERNAL, "%s: stored value %" PRIu32 " is not a word", f->name,
                            x);
        snprintf(tmp, sizeof(tmp), "%s", f->words[x]);
        break;
    }
    default:
        return kvm_errf(KVMESH_EINTERNAL, "%s: unknown field type", f->name);
    }
    size_t n = strlen(tmp);
    if (n >= cap)
        return kvm_errf(KVMESH_ERANGE, "%s: value needs %zu bytes, buffer has %zu", f->name, n + 1,
                        cap);
    memcpy(buf, tmp, n + 1);
    return 0;
}

static int unknown_field(const char *field)
{
    char echo[KVM_CFG_VALUE_ECHO_MAX + 8];
    echo_value(field, echo, sizeof(echo));
    /* Suggest the field with the longest common prefix when there is one. */
    size_t best = 0, bl = 0;
    for (size_t i = 0; i < KVM_ARRAY_SIZE(kvm_cfg_fields); i++) {
        size_t l = 0;
        const char *a = kvm_cfg_fields[i].name;
        while (a[l] && field[l] && tolower((unsigned char)a[l]) == tolower((unsigned char)field[l]))
            l++;
        if (l > bl) {
            bl = l;
            best = i;
        }
    }
    if (bl >= 3)
        return kvm_errf(KVMESH_ECONFIG,
                        "unknown configuration field \"%s\" (did you mean \"%s\"?); see "
                        "docs/configuration.md for the field list",
                        echo, kvm_cfg_fields[best].name);
    return kvm_errf(KVMESH_ECONFIG,
                    "unknown configuration field \"%s\"; see docs/configuration.md for the field "
                    "list",
                    echo);
}

int kvmesh_config_set(kvmesh_config_t *cfg, const char *field, const char *value)
{
    if (!cfg || !field)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_config_set: cfg and field must not be NULL");
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    if (!f)
        return unknown_field(field);
    if (!value)
        return kvm_errf(KVMESH_ECONFIG, "%s: missing value (NULL)", field);
    /* field_set writes only after the value passed every check: a failure leaves cfg as it was. */
    return field_set(cfg, f, value);
}

int kvmesh_config_get(const kvmesh_config_t *cfg, const char *field, char *buf, size_t cap)
{
    if (!cfg || !field || !buf || cap == 0)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_config_get: cfg, field and buf must be set");
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    if (!f)
        return unknown_field(field);
    return field_get(cfg, f, buf, cap);
}

void kvm_config_defaults(struct kvmesh_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < KVM_ARRAY_SIZE(kvm_cfg_fields); i++) {
        int r = field_set(cfg, &kvm_cfg_fields[i], kvm_cfg_fields[i].default_value);
        KVM_ASSERT(r == 0); /* a default that fails its own rule is a table bug */
    }
    kvm_err_clear();
}

kvmesh_config_t *kvmesh_config_new(void)
{
    struct kvmesh_config *cfg = malloc(sizeof(*cfg));
    if (!cfg)
        return NULL;
    kvm_config_defaults(cfg);
    return cfg;
}

void kvmesh_config_free(kvmesh_config_t *cfg)
{
    free(cfg);
}

static kvmesh_config_field_t pub_fields[KVM_ARRAY_SIZE(kvm_cfg_fields)];
static pthread_once_t pub_once = PTHREAD_ONCE_INIT;

static void pub_init(void)
{
    for (size_t i = 0; i < KVM_ARRAY_SIZE(kvm_cfg_fields); i++) {
        pub_fields[i].name = kvm_cfg_fields[i].name;
        pub_fields[i].default_value = kvm_cfg_fields[i].default_value;
        pub_fields[i].help = kvm_cfg_fields[i].help;
    }
}

const kvmesh_config_field_t *kvmesh_config_fields(size_t *n)
{
    pthread_once(&pub_once, pub_init);
    if (n)
        *n = KVM_ARRAY_SIZE(kvm_cfg_fields);
    return pub_fields;
}

int kvm_config_validate(const struct kvmesh_config *cfg)
{
    char a[32], b[32];
    if (!cfg)
        return kvm_errf(KVMESH_EINVAL, "kvm_config_validate: cfg must not be NULL");
    /* Re-check every field (a struct filled by hand must obey the same table). */
    for (size_t i = 0; i < KVM_ARRAY_SIZE(kvm_cfg_fields); i++) {
        char v[KVM_CFG_STR_MAX + 8];
        struct kvmesh_config tmp = *cfg;
        int r = field_get(cfg, &kvm_cfg_fields[i], v, sizeof(v));
        if (r == 0)
            r = field_set(&tmp, &kvm_cfg_fields[i], v);
        if (r != 0)
            return r;
    }
    if (cfg->evict_low_watermark >= cfg->evict_high_watermark)
        return kvm_errf(KVMESH_ECONFIG,
                        "evict_low_watermark (%g) must be below evict_high_watermark (%g)",
                        cfg->evict_low_watermark, cfg->evict_high_watermark);
    if (cfg->max_object_size > cfg->segment_size) {
        kvm_config_format_size(cfg->max_object_size, a, sizeof(a));
        kvm_config_format_size(cfg->segment_size, b, sizeof(b));
        return kvm_errf(KVMESH_ECONFIG,
                        "max_object_size (%s) must not exceed segment_size (%s): an object lives "
                        "in one segment; raise segment_size or lower max_object_size",
                        a, b);
    }
    if (cfg->memory_size != 0 && cfg->memory_size < cfg->segment_size) {
        kvm_config_format_size(cfg->memory_size, a, sizeof(a));
        kvm_config_format_size(cfg->segment_size, b, sizeof(b));
        return kvm_errf(KVMESH_ECONFIG,
                        "memory_size (%s) is smaller than segment_size (%s); set memory_size to "
                        "0 (client-only) or at least one segment",
                        a, b);
    }
    /* memory_size is carved into segments of segment_size (src/store/owner.c kvm_owner_init),
     * at most STORE_MAX_SEGS of them: refuse here what the owner would refuse at open, after
     * mapping the first STORE_MAX_SEGS segments (each one allocator: KVM_CFG_SEGMENT_MAX, above).
     */
    if (cfg->memory_size != 0 &&
        (cfg->memory_size - 1) / cfg->segment_size + 1 > (uint64_t)STORE_MAX_SEGS) {
        kvm_config_format_size(cfg->memory_size, a, sizeof(a));
        kvm_config_format_size(cfg->segment_size, b, sizeof(b));
        char need[32];
        uint64_t seg_min = (cfg->memory_size - 1) / STORE_MAX_SEGS + 1;
        kvm_config_format_size((seg_min - 1) / MIB * MIB + MIB, need, sizeof(need)); /* MiB up */
        return kvm_errf(KVMESH_ECONFIG,
                        "memory_size (%s) needs more than %d segments of segment_size (%s); a "
                        "runtime holds at most %d segments: raise segment_size to at least %s or "
                        "lower memory_size",
                        a, STORE_MAX_SEGS, b, STORE_MAX_SEGS, need);
    }
    if (cfg->max_remote_batch_burst_items < cfg->max_remote_batch_items_per_tenant)
        return kvm_errf(KVMESH_ECONFIG,
                        "max_remote_batch_burst_items (%u) must be at least "
                        "max_remote_batch_items_per_tenant (%u): a tenant could never take a "
                        "full turn",
                        cfg->max_remote_batch_burst_items, cfg->max_remote_batch_items_per_tenant);
    if (cfg->cold_high_watermark > 0.0 && (cfg->cold_low_watermark >= cfg->cold_high_watermark ||
                                           cfg->cold_high_watermark > cfg->evict_high_watermark))
        return kvm_errf(KVMESH_ECONFIG,
                        "cold_high_watermark (%g) needs cold_low_watermark (%g) below it and "
                        "evict_high_watermark (%g) at or above it (eviction keeps objects whose "
                        "offload waits); lower cold_high_watermark or set it to 0 (always on)",
                        cfg->cold_high_watermark, cfg->cold_low_watermark,
                        cfg->evict_high_watermark);
    if ((uint64_t)cfg->tombstone_retention_ms <=
        (uint64_t)cfg->request_timeout_ms + ROUTE_CAS_LATE_MS)
        return kvm_errf(KVMESH_ECONFIG,
                        "tombstone_retention_ms (%u) must be above the longest a route CAS can "
                        "be in flight, request_timeout_ms (%u) + %u ms (its last attempt): a "
                        "delayed CAS could meet a removed object's due tombstone and apply "
                        "again; raise tombstone_retention_ms above %" PRIu64
                        " or lower request_timeout_ms",
                        cfg->tombstone_retention_ms, cfg->request_timeout_ms, ROUTE_CAS_LATE_MS,
                        (uint64_t)cfg->request_timeout_ms + ROUTE_CAS_LATE_MS);
    if (cfg->cold_retry_backoff_ms > cfg->cold_retry_backoff_max_ms)
        return kvm_errf(KVMESH_ECONFIG,
                        "cold_retry_backoff_ms (%u) must not exceed cold_retry_backoff_max_ms (%u)",
                        cfg->cold_retry_backoff_ms, cfg->cold_retry_backoff_max_ms);
    if (cfg->cold_write_through && (cfg->cold_kind == KVM_STORE_COLD_OFF || !cfg->cold_offload ||
                                    cfg->cold_offload_mode != KVM_STORE_COLD_MODE_PASSTHROUGH))
        return kvm_errf(KVMESH_ECONFIG,
                        "cold_write_through needs a cold device on this runtime (cold_kind), "
                        "cold_offload on and cold_offload_mode passthrough; set them or turn "
                        "cold_write_through off");
    if (cfg->cold_devices[0] && cfg->cold_kind == KVM_STORE_COLD_OFF)
        return kvm_errf(KVMESH_ECONFIG,
                        "cold_devices lists devices 1.. but cold_kind is off: device 0 is "
                        "cold_kind/cold_root; set them to the first device or clear "
                        "cold_devices");
    struct kvm_store_cold_device ds[KVM_STORE_COLD_DEVICES_MAX - 1];
    uint32_t nds = 0;
    if (kvm_config_parse_cold_devices(cfg->cold_devices, cfg->cold_capacity, ds, &nds, NULL, 0) ==
        0)
        for (uint32_t k = 0; k < nds; k++)
            if (strcmp(ds[k].root, cfg->cold_root) == 0)
                return kvm_errf(KVMESH_ECONFIG,
                                "cold_devices: device %u: root '%.64s' is cold_root (device 0) "
                                "too; each device needs its own directory",
                                k + 1, ds[k].root);
    if (cfg->cold_kind != KVM_STORE_COLD_OFF && !cfg->cold_root[0])
        return kvm_errf(KVMESH_ECONFIG,
                        "cold_kind is %s but cold_root is empty; set cold_root to the cold "
                        "device's directory or cold_kind to off",
                        cfg->cold_kind == KVM_STORE_COLD_EXTENT ? "extent" : "localdir");
    return 0;
}

void kvm_config_to_store(const struct kvmesh_config *cfg, struct kvm_store_config *out)
{
    memset(out, 0, sizeof(*out));
    /* strings: the same capacities on both sides (the table already bounded the values) */
#define KVM_CFG_COPY_STR(f)                                                                        \
    do {                                                                                           \
        _Static_assert(sizeof(out->f) == sizeof(cfg->f), "store_config." #f " capacity");          \
        memcpy(out->f, cfg->f, sizeof(out->f));                                                    \
        out->f[sizeof(out->f) - 1] = '\0';                                                         \
    } while (0)
    KVM_CFG_COPY_STR(metadata_url);
    KVM_CFG_COPY_STR(deployment);
    KVM_CFG_COPY_STR(runtime_id);
    KVM_CFG_COPY_STR(listen);
    KVM_CFG_COPY_STR(advertise);
    KVM_CFG_COPY_STR(admin_listen);
    KVM_CFG_COPY_STR(secret);
    KVM_CFG_COPY_STR(trace_capture_dir);
    KVM_CFG_COPY_STR(trace_otlp_url);
    KVM_CFG_COPY_STR(trace_service_name);
    KVM_CFG_COPY_STR(cold_root);
#undef KVM_CFG_COPY_STR
    out->memory_size = cfg->memory_size;
    out->segment_size = cfg->segment_size;
    out->max_object_size = cfg->max_object_size;
    out->replicas = cfg->replicas;
    out->route_mode = (enum route_mode)cfg->route_mode;
    out->verify_reads = (enum kvm_verify_reads)cfg->verify_reads;
    out->inline_read_max = (uint32_t)cfg->inline_read_max;
    out->inline_write_max = (uint32_t)cfg->inline_write_max;
    out->rpc_local = cfg->rpc_local != 0;
    out->top_k = cfg->top_k;
    out->shards = cfg->shards;
    out->transport = cfg->transport == KVM_TRANSPORT_TCP   ? TP_TCP
                     : cfg->transport == KVM_TRANSPORT_SHM ? TP_SHM
                                                           : TP_AUTO;
    out->weight = cfg->weight;
    out->lease_ttl_ms = cfg->lease_ttl_ms;
    out->request_timeout_ms = cfg->request_timeout_ms;
    out->idle_timeout_ms = cfg->idle_timeout_ms;
    out->drain_timeout_ms = cfg->drain_timeout_ms;
    out->reclaim_grace_ms = cfg->reclaim_grace_ms;
    out->rereplicate_bytes_per_sec = cfg->rereplicate_bytes_per_sec;
    out->rereplicate_max_copies = cfg->rereplicate_max_copies;
    out->tombstone_retention_ms = cfg->tombstone_retention_ms;
    out->evict_high_watermark = cfg->evict_high_watermark;
    out->evict_low_watermark = cfg->evict_low_watermark;
    out->io_threads = cfg->io_threads;
    out->hugepages = cfg->hugepages;
    out->prefault_segments = cfg->prefault_segments;
    out->trace_sample_rate = cfg->trace_sample_rate;
    uint32_t n = 0;
    int prc = kvm_config_parse_policies(cfg->tenant_policies, out->tenant_policies, &n, NULL, 0);
    KVM_ASSERT(prc == 0); /* validated by the field table */
    out->n_tenant_policies = n;
    out->tenant_quota_evict = cfg->tenant_quota_evict;
    out->fairness = cfg->fairness;
    out->fair_batch_items = cfg->max_remote_batch_items_per_tenant;
    out->fair_batch_bytes = cfg->max_remote_batch_bytes;
    out->fair_burst_items = cfg->max_remote_batch_burst_items;
    out->fair_inflight_bytes = cfg->max_inflight_bytes_per_batch;
    out->fair_queue_depth = cfg->fair_queue_depth;
    prc = kvm_config_parse_weights(cfg->tenant_weights, out->tenant_weights, &out->n_tenant_weights,
                                   NULL, 0);
    KVM_ASSERT(prc == 0);
    prc = kvm_config_parse_placement(cfg->tenant_placement, out->tenant_placement,
                                     &out->n_tenant_placement, NULL, 0);
    KVM_ASSERT(prc == 0);
    out->place_on_primary = cfg->place_on_primary;
    out->cold_kind = cfg->cold_kind;
    out->cold_capacity = cfg->cold_capacity;
    out->cold_offload = cfg->cold_offload;
    out->cold_write_through = cfg->cold_write_through;
    out->cold_record_retention_ms = cfg->cold_record_retention_ms;
    out->cold_queue = cfg->cold_queue;
    out->cold_offload_mode = cfg->cold_offload_mode;
    out->cold_offload_order = cfg->cold_offload_order;
    out->cold_offload_bytes_per_sec = cfg->cold_offload_bytes_per_sec;
    out->cold_high_watermark = cfg->cold_high_watermark;
    out->cold_low_watermark = cfg->cold_low_watermark;
    out->cold_retry_backoff_ms = cfg->cold_retry_backoff_ms;
    out->cold_retry_backoff_max_ms = cfg->cold_retry_backoff_max_ms;
    out->cold_reconcile_after_ms = cfg->cold_reconcile_after_ms;
    out->cold_staging_slots = cfg->cold_staging_slots;
    out->cold_staging_bytes = cfg->cold_staging_bytes;
    out->cold_staging_ttl_ms = cfg->cold_staging_ttl_ms;
    out->cold_nfs = cfg->cold_nfs;
    out->cold_clean_bytes_per_tick = cfg->cold_clean_bytes_per_tick;
    out->n_cold_extra = 0;
    if (cfg->cold_kind != KVM_STORE_COLD_OFF &&
        kvm_config_parse_cold_devices(cfg->cold_devices, cfg->cold_capacity, out->cold_extra,
                                      &out->n_cold_extra, NULL, 0) != 0)
        out->n_cold_extra = 0; /* (validated before) */
    out->cold_segment_bytes = cfg->cold_segment_bytes;
}
