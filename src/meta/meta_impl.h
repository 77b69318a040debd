/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_impl.h — the dispatcher's state (struct meta) and the backends of src/meta. Private to
 * src/meta: code outside it implements a handle through meta_backend.h (the backend interface,
 * the call contract and its lifetimes are documented there).
 */
#ifndef KVMESH_META_META_IMPL_H
#define KVMESH_META_META_IMPL_H

#include "meta/meta_backend.h"

struct meta {
    const struct meta_backend_ops *ops;
    void *backend;
    env_t *env;
    uint32_t default_timeout_ms;
    char name[64];
    struct obs_registry *metrics; /* NULL: nothing counted (forwarding handles) */
    bool own_metrics;             /* metrics is private to this handle (freed at close) */
    int backend_idx;              /* OBS_BACKEND_* of ops->name; -1: not counted */
    meta_call_t *pending;         /* calls not yet completed to the user */
    bool closing;
};

extern const struct meta_backend_ops meta_memory_ops;
extern const struct meta_backend_ops meta_redis_ops;
extern const struct meta_backend_ops meta_etcd_ops;

/* The ttl every backend grants for a requested ttl_ms (meta.c applies it before submit()):
 * at least META_LEASE_TTL_MIN_MS, rounded up to whole seconds. */
int64_t meta_lease_ttl_round(int64_t ttl_ms);

#endif
