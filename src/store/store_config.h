/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_config.h — what a store runtime is opened with (kvm_rt_open). The store's own
 * configuration, in its own types: the API layer validates the user's kvmesh_config_t against
 * its field table (src/api/config.c) and fills this struct from it (kvm_config_to_store), so
 * the store never sees the API's table or struct. A field the store needs is added here and
 * filled there.
 *
 * Plain data (no heap, no pointers): copying it with `=` is a deep copy; kvm_rt_open copies it.
 * Values are already validated: the store trusts them (ranges, syntax, cross-field rules).
 */
#ifndef KVMESH_STORE_STORE_CONFIG_H
#define KVMESH_STORE_STORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "net/transport.h"
#include "route/route.h"

#define KVM_STORE_STR_MAX             512
#define KVM_STORE_TENANT_POLICIES_MAX 16 /* tenant-root policies one runtime bootstraps */
#define KVM_STORE_COLD_DEVICES_MAX    8 /* cold devices of one runtime (cold_kind + cold_devices) */
#define KVM_STORE_COLD_TAGS_MAX       128 /* a device's tags "a,b" incl. NUL (COLD_TAGS_CAP) */
#define KVM_STORE_TENANT_SOFT_MAX     16  /* tenant_weights / tenant_placement entries */
#define KVM_STORE_PLACE_OWNERS_MAX    4   /* preferred owners of one tenant_placement entry */

/* One configured tenant-root policy (hard fields; docs/tenancy.md). */
struct kvm_store_tenant_policy {
    char tenant[65];         /* valid tenant id (core/ident.h rule) */
    uint64_t max_bytes;      /* >= 1 */
    uint64_t max_objects;    /* >= 1 */
    uint32_t policy_version; /* >= 1 */
};

/* Soft isolation (docs/tenancy.md "Soft isolation"): a tenant's fair-scheduling weight. */
struct kvm_store_tenant_weight {
    char tenant[65];
    uint32_t weight; /* 1..64 */
};

/* A tenant's placement preference: owners tried first; hard = fail when they cannot be met. */
/* One cold device beyond device 0 (cold_devices entry). */
struct kvm_store_cold_device {
    uint32_t kind; /* KVM_STORE_COLD_LOCALDIR | _EXTENT */
    char root[KVM_STORE_STR_MAX];
    uint64_t capacity;                  /* payload bytes */
    char tags[KVM_STORE_COLD_TAGS_MAX]; /* "" or "a,b" */
};

struct kvm_store_tenant_placement {
    char tenant[65];
    uint32_t n_owners;                           /* 1..KVM_STORE_PLACE_OWNERS_MAX */
    char owners[KVM_STORE_PLACE_OWNERS_MAX][33]; /* runtime ids, 32 hex digits */
    bool hard;
};

/* Which replica reads verify the checksum (docs/configuration.md verify_reads). */
enum kvm_verify_reads {
    KVM_VERIFY_ALWAYS = 0, /* every read (default) */
    KVM_VERIFY_REMOTE = 1, /* reads through a transport only */
    KVM_VERIFY_NEVER = 2,
};

struct kvm_store_config {
    char metadata_url[KVM_STORE_STR_MAX]; /* memory://NAME | redis://… | etcd://… */
    char deployment[64];                  /* metadata key prefix */
    char runtime_id[33];                  /* 32 hex digits, or "" = generate */
    char listen[128];                     /* host:port for RPC and the tcp transport */
    char advertise[128];                  /* address peers use ("" = listen address) */
    char admin_listen[128];               /* host:port of the HTTP admin endpoints ("" = off) */
    char secret[256];                     /* deployment secret for peer auth ("" = none) */
    uint64_t memory_size;                 /* bytes contributed (0 = client-only runtime) */
    uint64_t segment_size;                /* bytes per memfd segment */
    uint64_t max_object_size;             /* bytes */
    uint32_t replicas;                    /* default replica count */
    enum route_mode route_mode;
    uint32_t top_k;  /* route authorities per shard */
    uint32_t shards; /* logical route shards */
    enum tp_kind transport;
    enum kvm_verify_reads verify_reads;
    uint32_t inline_read_max;    /* inline single-get bytes, both sides (0 = off; get_inline.c) */
    uint32_t inline_write_max;   /* inline single-put bytes, requester (0 = off; put_inline.c) */
    bool rpc_local;              /* rpc_local = unix: same-host peer RPC over a unix socket */
    double weight;               /* WRH weight of this runtime (> 0) */
    uint32_t lease_ttl_ms;       /* membership lease */
    uint32_t request_timeout_ms; /* end-to-end per request */
    uint32_t idle_timeout_ms;    /* idle RPC / tcp data connections closed (0 = never) */
    uint32_t drain_timeout_ms;
    uint32_t reclaim_grace_ms;   /* before freed bytes may be reused */
    double evict_high_watermark; /* fraction of memory_size that starts eviction */
    double evict_low_watermark;  /* fraction eviction brings usage back to */
    uint32_t io_threads;         /* transport I/O threads */
    bool hugepages;              /* try MFD_HUGETLB segments */
    bool prefault_segments; /* fault segment pages in when mapped (seg_registry_set_prefault) */
    /* background re-replication (src/store/repair.c) */
    uint64_t rereplicate_bytes_per_sec; /* copy rate, bytes/s (0 = unlimited) */
    uint32_t rereplicate_max_copies;    /* copies in flight per round (0 = re-replication off) */
    uint32_t tombstone_retention_ms;    /* finalized tombstones kept this long, then purged */
    /* tracing (src/obs/trace.h): a tracer exists when the rate is > 0 or an exporter is set */
    double trace_sample_rate;                  /* head sampling probability, 0..1 */
    char trace_capture_dir[KVM_STORE_STR_MAX]; /* JSONL capture dir ("" = off) */
    char trace_otlp_url[KVM_STORE_STR_MAX];    /* OTLP/HTTP JSON traces URL ("" = off) */
    char trace_service_name[64];               /* resource service.name of this runtime's spans */
    /* tenant quotas (src/store/quota.c): none configured = quota protocol off */
    bool tenant_quota_evict; /* EQUOTA: evict this tenant's oldest objects, retry once */
    uint32_t n_tenant_policies;
    struct kvm_store_tenant_policy tenant_policies[KVM_STORE_TENANT_POLICIES_MAX];
    /* soft isolation (src/store/fair.c, src/store/place.c) */
    bool fairness;                /* per-tenant scheduling of remote batches (false = off) */
    uint32_t fair_batch_items;    /* max_remote_batch_items_per_tenant */
    uint64_t fair_batch_bytes;    /* max_remote_batch_bytes */
    uint32_t fair_burst_items;    /* max_remote_batch_burst_items */
    uint64_t fair_inflight_bytes; /* max_inflight_bytes_per_batch */
    uint32_t fair_queue_depth;    /* remote batches queued per tenant */
    uint32_t n_tenant_weights;
    struct kvm_store_tenant_weight tenant_weights[KVM_STORE_TENANT_SOFT_MAX];
    uint32_t n_tenant_placement;
    struct kvm_store_tenant_placement tenant_placement[KVM_STORE_TENANT_SOFT_MAX];
    bool place_on_primary; /* one replica on the key's shard primary first (place.c) */
    /* cold tier (src/store/cold_glue.c, docs/cold.md "Store wiring"): device 0 from cold_kind,
     * cold_root, cold_capacity; devices 1..n_cold_extra from cold_devices */
    uint32_t cold_kind;                /* KVM_STORE_COLD_OFF | _LOCALDIR | _EXTENT */
    char cold_root[KVM_STORE_STR_MAX]; /* the device directory (exists, writable) */
    uint64_t cold_capacity;            /* payload bytes the device may hold */
    bool cold_offload;                 /* new writes carry a PendingOffload backing */
    bool cold_write_through; /* a put acknowledges once its cold copy is usage-committed */
    uint32_t cold_record_retention_ms;   /* terminal cold records purged after (0 = never) */
    uint32_t cold_queue;                 /* offload jobs queued at most (1..COLD_QUEUE_MAX) */
    uint32_t cold_offload_mode;          /* KVM_STORE_COLD_MODE_PASSTHROUGH | _EVICT */
    uint32_t cold_offload_order;         /* 0 fifo, 1 size (cold_order) */
    uint64_t cold_offload_bytes_per_sec; /* offload rate (0 = unlimited) */
    double cold_high_watermark;          /* DRAM fraction opening offload (0 = always open) */
    double cold_low_watermark;           /* DRAM fraction closing it */
    uint32_t cold_retry_backoff_ms;      /* first retry delay of an offload job */
    uint32_t cold_retry_backoff_max_ms;  /* its cap */
    uint32_t cold_reconcile_after_ms;    /* a non-terminal cold op is due after (op_ttl_ms) */
    uint32_t cold_staging_slots;         /* remote-restore staging slots on the owner */
    uint64_t cold_staging_bytes;         /* bytes of the staging segment */
    uint32_t cold_staging_ttl_ms;        /* a staged slot expires after this (token fenced) */
    uint64_t cold_clean_bytes_per_tick;  /* maintain() budget per cold tick (0 = off) */
    uint64_t cold_segment_bytes;         /* ExtentStore segment file size */
    bool cold_nfs;                       /* cold_root must be an NFS/NFS4 mount (checked at open) */
    uint32_t n_cold_extra;               /* devices 1.. (0..KVM_STORE_COLD_DEVICES_MAX-1) */
    struct kvm_store_cold_device cold_extra[KVM_STORE_COLD_DEVICES_MAX - 1];
};

#define KVM_STORE_COLD_OFF              0u
#define KVM_STORE_COLD_LOCALDIR         1u
#define KVM_STORE_COLD_EXTENT           2u
#define KVM_STORE_COLD_MODE_PASSTHROUGH 0u
#define KVM_STORE_COLD_MODE_EVICT       1u

#endif
