/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_local.c — TEMPORARY stand-in for src/api/config.c (branch `api`), so that the store
 * runtime builds and is tested before that lands. It is deleted when `api` is merged; it
 * implements the same functions with the same names over a reduced field table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "core/util.h"
#include "route/route.h"

void kvm_config_defaults(struct kvmesh_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->metadata_url, sizeof(c->metadata_url), "memory://default");
    snprintf(c->deployment, sizeof(c->deployment), "default");
    snprintf(c->listen, sizeof(c->listen), "127.0.0.1:0");
    snprintf(c->default_tenant, sizeof(c->default_tenant), "default");
    c->memory_size = 256ull << 20;
    c->segment_size = 128ull << 20;
    c->max_object_size = 64ull << 20;
    c->replicas = 1;
    c->route_mode = ROUTE_MODE_EMBEDDED_WRH;
    c->top_k = 3;
    c->shards = 1024;
    c->transport = KVM_TRANSPORT_AUTO;
    c->weight = 1.0;
    c->lease_ttl_ms = 3000;
    c->request_timeout_ms = 10000;
    c->drain_timeout_ms = 30000;
    c->reclaim_grace_ms = 200;
    c->evict_high_watermark = 0.9;
    c->evict_low_watermark = 0.75;
    c->io_threads = 2;
}

int kvm_config_validate(const struct kvmesh_config *c)
{
    if (!c->metadata_url[0])
        return kvm_errf(KVMESH_ECONFIG,
                        "metadata_url: empty; use memory://NAME, redis:// or etcd://");
    if (!c->deployment[0])
        return kvm_errf(KVMESH_ECONFIG, "deployment: empty");
    if (c->replicas < 1 || c->replicas > KVMESH_MAX_REPLICAS)
        return kvm_errf(KVMESH_ECONFIG, "replicas: %u is outside 1..%d", c->replicas,
                        KVMESH_MAX_REPLICAS);
    if (c->memory_size && (c->segment_size == 0 || c->segment_size > c->memory_size))
        return kvm_errf(KVMESH_ECONFIG, "segment_size: must be 1..memory_size");
    if (c->memory_size && c->max_object_size > c->segment_size)
        return kvm_errf(KVMESH_ECONFIG, "max_object_size: larger than segment_size");
    if (!(c->evict_low_watermark > 0 && c->evict_low_watermark < c->evict_high_watermark &&
          c->evict_high_watermark <= 1.0))
        return kvm_errf(KVMESH_ECONFIG,
                        "evict_low_watermark/evict_high_watermark: need 0 < low < high <= 1");
    if (!(c->weight > 0))
        return kvm_errf(KVMESH_ECONFIG, "weight: must be > 0");
    if (c->lease_ttl_ms < 1000)
        return kvm_errf(KVMESH_ECONFIG, "lease_ttl_ms: at least 1000");
    if (c->request_timeout_ms == 0)
        return kvm_errf(KVMESH_ECONFIG, "request_timeout_ms: must be > 0");
    if (c->route_mode > ROUTE_MODE_METADATA_ONLY)
        return kvm_errf(KVMESH_ECONFIG, "route_mode: unknown");
    return 0;
}

kvmesh_config_t *kvmesh_config_new(void)
{
    kvmesh_config_t *c = malloc(sizeof(*c));
    if (c)
        kvm_config_defaults(c);
    return c;
}

void kvmesh_config_free(kvmesh_config_t *cfg)
{
    free(cfg);
}

#define STR_FIELD(n)                                                                               \
    {                                                                                              \
#n, 's', offsetof(struct kvmesh_config, n), sizeof(((struct kvmesh_config *)0)->n)         \
    }
#define U64_FIELD(n)                                                                               \
    {                                                                                              \
#n, 'Q', offsetof(struct kvmesh_config, n), 8                                              \
    }
#define U32_FIELD(n)                                                                               \
    {                                                                                              \
#n, 'I', offsetof(struct kvmesh_config, n), 4                                              \
    }
#define DBL_FIELD(n)                                                                               \
    {                                                                                              \
#n, 'd', offsetof(struct kvmesh_config, n), 8                                              \
    }

static const struct field {
    const char *name;
    char type;
    size_t off, size;
} fields[] = {
    STR_FIELD(metadata_url),
    STR_FIELD(deployment),
    STR_FIELD(runtime_id),
    STR_FIELD(listen),
    STR_FIELD(advertise),
    STR_FIELD(admin_listen),
    STR_FIELD(secret),
    STR_FIELD(default_tenant),
    U64_FIELD(memory_size),
    U64_FIELD(segment_size),
    U64_FIELD(max_object_size),
    U32_FIELD(replicas),
    {"route_mode", 'r', offsetof(struct kvmesh_config, route_mode), 4},
    U32_FIELD(top_k),
    U32_FIELD(shards),
    {"transport", 't', offsetof(struct kvmesh_config, transport), 4},
    DBL_FIELD(weight),
    U32_FIELD(lease_ttl_ms),
    U32_FIELD(request_timeout_ms),
    U32_FIELD(drain_timeout_ms),
    U32_FIELD(reclaim_grace_ms),
    DBL_FIELD(evict_high_watermark),
    DBL_FIELD(evict_low_watermark),
    U32_FIELD(io_threads),
};

int kvmesh_config_set(kvmesh_config_t *cfg, const char *field, const char *value)
{
    if (!cfg || !field || !value)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_config_set: NULL argument");
    for (size_t i = 0; i < KVM_ARRAY_SIZE(fields); i++) {
        const struct field *f = &fields[i];
        if (strcmp(f->name, field) != 0)
            continue;
        char *p = (char *)cfg + f->off;
        char *end = NULL;
        errno = 0;
        switch (f->type) {
        case 's':
            if (strlen(value) >= f->size)
                return kvm_errf(KVMESH_ECONFIG, "%s: value is longer than %zu bytes", field,
                                f->size - 1);
            snprintf(p, f->size, "%s", value);
            return 0;
        case 'Q': {
            unsigned long long v = strtoull(value, &end, 10);
            if (errno || !*value || *end || value[0] == '-')
                return kvm_errf(KVMESH_ECONFIG, "%s: '%s' is not an unsigned integer", field,
                                value);
            *(uint64_t *)(void *)p = v;
            return 0;
        }
        case 'I': {
            unsigned long long v = strtoull(value, &end, 10);
            if (errno || !*value || *end || value[0] == '-' || v > UINT32_MAX)
                return kvm_errf(KVMESH_ECONFIG, "%s: '%s' is not a 32-bit unsigned integer", field,
                                value);
            *(uint32_t *)(void *)p = (uint32_t)v;
            return 0;
        }
        case 'd': {
            double v = strtod(value, &end);
            if (errno || !*value || *end)
                return kvm_errf(KVMESH_ECONFIG, "%s: '%s' is not a number", field, value);
            *(double *)(void *)p = v;
            return 0;
        }
        case 'r':
            if (strcmp(value, "embedded_wrh") == 0)
                cfg->route_mode = ROUTE_MODE_EMBEDDED_WRH;
            else if (strcmp(value, "metadata_only") == 0)
                cfg->route_mode = ROUTE_MODE_METADATA_ONLY;
            else
                return kvm_errf(KVMESH_ECONFIG,
                                "route_mode: '%s'; allowed: embedded_wrh, metadata_only", value);
            return 0;
        case 't':
            if (strcmp(value, "auto") == 0)
                cfg->transport = KVM_TRANSPORT_AUTO;
            else if (strcmp(value, "tcp") == 0)
                cfg->transport = KVM_TRANSPORT_TCP;
            else if (strcmp(value, "shm") == 0)
                cfg->transport = KVM_TRANSPORT_SHM;
            else
                return kvm_errf(KVMESH_ECONFIG, "transport: '%s'; allowed: auto, tcp, shm", value);
            return 0;
        }
    }
    return kvm_errf(KVMESH_ECONFIG, "unknown configuration field '%s'", field);
}

int kvmesh_config_get(const kvmesh_config_t *cfg, const char *field, char *buf, size_t cap)
{
    for (size_t i = 0; i < KVM_ARRAY_SIZE(fields); i++) {
        const struct field *f = &fields[i];
        if (strcmp(f->name, field) != 0)
            continue;
        const char *p = (const char *)cfg + f->off;
        int n = 0;
        switch (f->type) {
        case 's':
            n = snprintf(buf, cap, "%s", p);
            break;
        case 'Q':
            n = snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)(const void *)p);
            break;
        case 'I':
        case 'r':
        case 't':
            n = snprintf(buf, cap, "%u", *(const uint32_t *)(const void *)p);
            break;
        case 'd':
            n = snprintf(buf, cap, "%g", *(const double *)(const void *)p);
            break;
        }
        return n < 0 || (size_t)n >= cap ? KVMESH_ERANGE : 0;
    }
    return kvm_errf(KVMESH_ECONFIG, "unknown configuration field '%s'", field);
}

const kvmesh_config_field_t *kvmesh_config_fields(size_t *n)
{
    static kvmesh_config_field_t table[KVM_ARRAY_SIZE(fields)];
    for (size_t i = 0; i < KVM_ARRAY_SIZE(fields); i++)
        table[i] = (kvmesh_config_field_t){fields[i].name, "", ""};
    *n = KVM_ARRAY_SIZE(fields);
    return table;
}
