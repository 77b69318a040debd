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

#define KVM_CFG_STR_MAX 512

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
    /* tracing (src/obs/trace.h): a tracer exists when the rate is > 0 or an exporter is set */
    double trace_sample_rate;                /* head sampling probability of new requests, 0..1 */
    char trace_capture_dir[KVM_CFG_STR_MAX]; /* JSONL capture dir ("" = off) */
    char trace_otlp_url[KVM_CFG_STR_MAX];    /* OTLP/HTTP JSON traces URL ("" = off) */
    char trace_service_name[64];             /* resource service.name of this runtime's spans */
    bool tenant_quota_evict;                 /* quota recovery by same-tenant eviction */
    char tenant_policies[KVM_CFG_STR_MAX];   /* "" or tenant:max_bytes:max_objects[:version],... */
    uint32_t cold_kind;                      /* off | localdir | extent (KVM_STORE_COLD_*) */
    char cold_root[KVM_CFG_STR_MAX];         /* cold device directory */
    uint64_t cold_capacity;                  /* cold device payload bytes */
    bool cold_offload;                       /* new writes are offloaded to the cold tier */
    uint32_t cold_queue;                     /* offload queue bound */
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

#endif
