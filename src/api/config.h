/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h — the runtime configuration behind kvmesh_config_t (include/kvmesh.h).
 *
 * One table (config.c) names every field with its type, default, bounds and help; the public
 * setter kvmesh_config_set(), the daemon's YAML loader, the CLI flags, the Python package and
 * docs/configuration.md all go through it, so a field is validated the same way everywhere.
 * The struct is plain data (no heap): copying it with `=` is a deep copy.
 */
#ifndef KVMESH_API_CONFIG_H
#define KVMESH_API_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "kvmesh.h"
#include "store/store_config.h"

#define KVM_CFG_STR_MAX         512
#define KVM_CFG_FAIR_WEIGHT_MAX 64 /* = TS_MAX_WEIGHT (src/tenant/sched.h) */

enum kvm_transport_choice { KVM_TRANSPORT_AUTO = 0, KVM_TRANSPORT_TCP, KVM_TRANSPORT_SHM };

struct kvmesh_config {
    char metadata_url[KVM_CFG_STR_MAX]; /* memory://default | redis://… | etcd://… */
    char deployment[64];                /* [A-Za-z0-9_.-]{1,63}: metadata key prefix */
    char runtime_id[33];                /* 32 hex digits, or "" = generate */
    char listen[128];                   /* host:port for RPC and tcp transport (port 0 = any) */
    char advertise[128];                /* address peers use ("" = listen address) */
    char admin_listen[128];             /* host:port of the HTTP admin endpoints ("" = off) */
    char secret[256];                   /* deployment secret for peer auth ("" = none) */
    char default_tenant[65];            /* fallback scope for tools */
    uint64_t memory_size;               /* bytes contributed (0 = client-only runtime) */
    uint64_t segment_size;              /* bytes per memfd segment */
    uint64_t max_object_size;           /* bytes */
    uint32_t replicas;                  /* default replica count (1..KVM_MAX_REPLICAS) */
    uint32_t route_mode;                /* enum route_mode (src/route/route.h) */
    uint32_t top_k;                     /* route authorities per shard */
    uint32_t shards;                    /* logical route shards */
    enum kvm_transport_choice transport;
    uint32_t verify_reads;       /* enum kvm_verify_reads (src/store/store_config.h) */
    uint64_t inline_read_max;    /* bytes of an inline single get (0 = off, <= ROUTE_INLINE_MAX) */
    uint64_t inline_write_max;   /* bytes of an inline single put (0 = off, <= 256 KiB) */
    uint32_t rpc_local;          /* 0 = off, 1 = unix: same-host peer RPC over a unix socket */
    double weight;               /* WRH weight of this runtime (> 0) */
    uint32_t lease_ttl_ms;       /* membership lease */
    uint32_t request_timeout_ms; /* end-to-end per request */
    uint32_t idle_timeout_ms;    /* idle peer connections are closed (0 = never) */
    uint32_t drain_timeout_ms;
    uint32_t reclaim_grace_ms;   /* before freed bytes may be reused */
    double evict_high_watermark; /* fraction of memory_size that starts eviction */
    double evict_low_watermark;  /* fraction eviction brings usage back to */
    uint32_t io_threads;         /* transport I/O threads */
    bool hugepages;              /* try MFD_HUGETLB segments */
    bool prefault_segments;      /* fault segment pages in when mapped, not on first touch */
    /* background re-replication (src/store/repair.c) */
    uint64_t rereplicate_bytes_per_sec; /* copy rate, bytes/s (0 = unlimited) */
    uint32_t rereplicate_max_copies;    /* copies in flight per round (0 = re-replication off) */
    uint32_t tombstone_retention_ms;    /* finalized tombstones kept this long, then purged */
    /* tracing (src/obs/trace.h): a tracer exists when the rate is > 0 or an exporter is set */
    double trace_sample_rate;                /* head sampling probability of new requests, 0..1 */
    char trace_capture_dir[KVM_CFG_STR_MAX]; /* JSONL capture dir ("" = off) */
    char trace_otlp_url[KVM_CFG_STR_MAX];    /* OTLP/HTTP JSON traces URL ("" = off) */
    char trace_service_name[64];             /* resource service.name of this runtime's spans */
    bool tenant_quota_evict;                 /* quota recovery by same-tenant eviction */
    char tenant_policies[KVM_CFG_STR_MAX];   /* "" or tenant:max_bytes:max_objects[:version],... */
    /* soft tenant isolation (docs/tenancy.md "Soft isolation") */
    bool fairness;                              /* per-tenant scheduling of remote batches */
    uint32_t max_remote_batch_items_per_tenant; /* items of one tenant per batch and per turn */
    uint64_t max_remote_batch_bytes;            /* bytes per remote batch and per turn */
    uint32_t max_remote_batch_burst_items;      /* items of one tenant in flight */
    uint64_t max_inflight_bytes_per_batch;      /* remote batch bytes in flight, all tenants */
    uint32_t fair_queue_depth;                  /* remote batches queued per tenant */
    char tenant_weights[KVM_CFG_STR_MAX];       /* "" or tenant:weight,... */
    char tenant_placement[KVM_CFG_STR_MAX];     /* "" or tenant:owner[+owner][:soft|hard],... */
    bool place_on_primary;                      /* a replica on the key's shard primary */
    uint32_t cold_kind;                         /* off | localdir | extent (KVM_STORE_COLD_*) */
    char cold_root[KVM_CFG_STR_MAX];            /* cold device directory */
    uint64_t cold_capacity;                     /* cold device payload bytes */
    bool cold_offload;                          /* new writes are offloaded to the cold tier */
    bool cold_write_through; /* a put acknowledges once its cold copy is usage-committed */
    uint32_t cold_record_retention_ms;   /* terminal cold records purged after (0 = never) */
    uint32_t cold_queue;                 /* offload queue bound */
    uint32_t cold_offload_mode;          /* passthrough | evict (KVM_STORE_COLD_MODE_*) */
    uint32_t cold_offload_order;         /* fifo | size */
    uint64_t cold_offload_bytes_per_sec; /* offload rate (0 = unlimited) */
    double cold_high_watermark;          /* DRAM fraction starting offload (0 = always) */
    double cold_low_watermark;           /* DRAM fraction stopping it */
    uint32_t cold_retry_backoff_ms;      /* first retry delay */
    uint32_t cold_retry_backoff_max_ms;  /* retry delay cap */
    uint32_t cold_reconcile_after_ms;    /* non-terminal cold op due after */
    uint32_t cold_staging_slots;         /* remote-restore staging slots */
    uint64_t cold_staging_bytes;         /* staging segment bytes */
    uint32_t cold_staging_ttl_ms;        /* staged slot expiry */
    bool cold_nfs;                       /* cold_root must be an NFS/NFS4 mount */
    uint64_t cold_clean_bytes_per_tick;  /* maintenance budget per tick (0 = off) */
    uint64_t cold_segment_bytes;         /* ExtentStore segment file size */
    char cold_devices[KVM_CFG_STR_MAX];  /* "" or kind:root[:capacity[:tags]];... (devices 1..) */
};

/* Fills cfg with every default (what kvmesh_config_new returns). */
void kvm_config_defaults(struct kvmesh_config *cfg);
/* Cross-field checks (watermarks ordered, segment_size <= memory_size, …); KVMESH_ECONFIG with a
 * message naming the fields. kvmesh_open calls it. */
int kvm_config_validate(const struct kvmesh_config *cfg);

/* The store's configuration (src/store/store_config.h) from a validated cfg: every field the
 * store uses, in the store's types (route_mode as enum route_mode, transport as enum tp_kind). */
void kvm_config_to_store(const struct kvmesh_config *cfg, struct kvm_store_config *out);

/* Parses the tenant_policies value ("" or tenant:max_bytes:max_objects[:policy_version],...)
 * into out[0..*n) (out/n may be NULL: validation only). 0, or KVMESH_ECONFIG with the problem
 * written into why (may be NULL) and nothing stored. */
struct kvm_store_tenant_policy;
int kvm_config_parse_policies(const char *v, struct kvm_store_tenant_policy *out, uint32_t *n,
                              char *why, size_t cap);

/* Soft isolation fields (config_soft.c): tenant_weights ("" or tenant:weight,...) and
 * tenant_placement ("" or tenant:owner[+owner...][:soft|hard],...). Same contract as
 * kvm_config_parse_policies. */
struct kvm_store_tenant_weight;
struct kvm_store_tenant_placement;
int kvm_config_parse_weights(const char *v, struct kvm_store_tenant_weight *out, uint32_t *n,
                             char *why, size_t cap);
int kvm_config_parse_placement(const char *v, struct kvm_store_tenant_placement *out, uint32_t *n,
                               char *why, size_t cap);

/* Parses the cold_devices value ("" or kind:root[:capacity[:tag,tag...]];... , devices 1..7;
 * capacity "" = default_capacity) into out[0..*n). Same contract as kvm_config_parse_policies;
 * the message names the device index and the field. */
struct kvm_store_cold_device;
int kvm_config_parse_cold_devices(const char *v, uint64_t default_capacity,
                                  struct kvm_store_cold_device *out, uint32_t *n, char *why,
                                  size_t cap);

#endif
