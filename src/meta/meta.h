/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta.h — the metadata plane: one interface over memory, Redis and etcd.
 *
 * Every protocol that keeps durable coordination state (membership leases, shard authority,
 * tenant policy and quota, cold device accounting, MetadataOnly routes) is written once against
 * this interface, so every backend must give the same atomic semantics:
 *   - keys are NUL-terminated byte strings without NUL, ordered bytewise (memcmp order);
 *   - a deployment-wide revision increases by one for every txn/put/delete that changes state
 *     (lease expiry that deletes keys also advances it); every result reports the revision;
 *   - each key has create_rev (revision that created it), mod_rev (revision of its last change),
 *     version (1 on create, +1 per put; a delete resets the key), and lease (0 = none);
 *   - txn: all compares are evaluated, then exactly one branch (then_ops if all compares hold,
 *     else_ops otherwise) is applied atomically; a put in the applied branch bumps the revision
 *     once for the whole txn (all writes of one txn share one new revision);
 *   - leases: a key put with a lease disappears when the lease expires or is revoked; all keys
 *     of one lease disappear in one atomic step. A lease is expired once ttl has passed since
 *     its grant or last keepalive (as judged by the backend's clock).
 *   - range(prefix, start_after, limit): keys with the prefix and > start_after (or all when
 *     start_after is NULL), in key order, at most limit (1..META_RANGE_MAX) entries; `more` says
 *     whether keys remain beyond the page. Never an unbounded read.
 *
 * URLs: memory://NAME (backends with the same NAME in one process share one store),
 *       redis://[user:pass@]host:port[/db], rediss://… (refused: no TLS in this build),
 *       etcd://host:port[,host:port…].
 *
 * Threading: a meta_t belongs to the env (loop thread) it was opened on; every call and every
 * callback happens on that thread. For tools and tests, meta_sync_t (below) wraps a meta_t with
 * its own loop thread and blocking calls usable from any thread.
 *
 * Deadlines: every call takes timeout_ms (0 = the handle's default, META_DEFAULT_TIMEOUT_MS);
 * a call always completes exactly once: with a result, or KVMESH_ETIMEDOUT at the deadline, or
 * KVMESH_ECANCELED when the handle is closed first.
 *
 * Ownership: input keys/values are copied before the call returns. A result and everything it
 * points to is valid only during the callback; copy what you keep (meta_result_dup).
 */
#ifndef KVMESH_META_META_H
#define KVMESH_META_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env/env.h"

#define META_KEY_MAX            1024                         /* bytes, excluding NUL */
#define META_VALUE_MAX          (1024 * 1024)                /* bytes */
#define META_RANGE_MAX          1000                         /* entries per range page */
#define META_TXN_MAX_OPS        64                           /* compares, and ops per branch */
#define META_TXN_MAX_BYTES      (META_VALUE_MAX + 64 * 1024) /* key+value bytes in one txn */
#define META_DEFAULT_TIMEOUT_MS 5000
#define META_LEASE_TTL_MIN_MS   1000 /* etcd grants whole seconds: ttl is rounded up to 1 s */

typedef struct meta meta_t;
typedef int64_t meta_lease_t; /* 0 = no lease */

typedef struct meta_kv {
    bool found; /* false: the key does not exist (other fields zero) */
    const char *key;
    const uint8_t *value;
    size_t value_len;
    int64_t create_rev;
    int64_t mod_rev;
    int64_t version;
    meta_lease_t lease;
} meta_kv_t;

enum meta_cmp_target {
    META_CMP_EXISTS,  /* num: 1 = key exists, 0 = key absent; op must be META_EQ */
    META_CMP_VALUE,   /* value bytes; op META_EQ or META_NE (absent key: compare fails) */
    META_CMP_VERSION, /* num; absent key has version 0 */
    META_CMP_MOD_REV, /* num; absent key has mod_rev 0 */
    META_CMP_CREATE_REV,
    META_CMP_LEASE, /* num; absent key or no lease is 0 */
};

enum meta_cmp_op { META_EQ, META_NE, META_LT, META_GT };

typedef struct meta_cmp {
    const char *key;
    enum meta_cmp_target target;
    enum meta_cmp_op op;
    int64_t num;
    const uint8_t *value;
    size_t value_len;
} meta_cmp_t;

enum meta_op_type { META_OP_PUT, META_OP_DEL, META_OP_GET };

typedef struct meta_op {
    enum meta_op_type type;
    const char *key;
    const uint8_t *value; /* PUT */
    size_t value_len;
    meta_lease_t lease; /* PUT: bind the key to this lease (0 = none; replaces a previous one) */
} meta_op_t;

typedef struct meta_result {
    int rc;             /* 0 or a negative KVMESH_E*; on error only rc/errmsg are meaningful */
    const char *errmsg; /* human-readable detail when rc != 0 (never NULL) */
    int64_t rev;        /* revision of the store after the operation */
    /* get */
    meta_kv_t kv;
    /* range */
    const meta_kv_t *kvs;
    size_t n_kvs;
    bool more;
    /* txn */
    bool succeeded;       /* then-branch applied */
    const meta_kv_t *ops; /* one entry per op of the applied branch; GET fills kv, others !found */
    size_t n_ops;
    int64_t n_deleted; /* keys removed by DEL ops of the applied branch */
    /* lease grant / keepalive / ttl */
    meta_lease_t lease;
    int64_t ttl_ms; /* remaining ttl; keepalive/ttl of an expired or unknown lease: rc ENOENT */
} meta_result_t;

typedef void (*meta_cb)(void *arg, const meta_result_t *res);

struct obs_registry;
typedef struct meta_opts {
    uint32_t default_timeout_ms;  /* 0 = META_DEFAULT_TIMEOUT_MS */
    const char *name;             /* client name for logs ("" ok) */
    struct obs_registry *metrics; /* borrowed, outlives the handle; NULL: a private registry */
} meta_opts_t;

/* Parses the URL and opens a handle on env. Connection may be lazy; connection errors then
 * surface on calls (with reconnect and backoff inside the backend). Returns KVMESH_EURL with a
 * detailed message (kvmesh_last_error) for malformed or unsupported URLs. opts may be NULL. */
int meta_open(meta_t **out, env_t *env, const char *url, const meta_opts_t *opts);

/* Completes every pending call with KVMESH_ECANCELED (callbacks run before this returns or on
 * a later loop turn, never after the handle's memory is gone), then frees the handle. */
void meta_close(meta_t *m);

/* "memory", "redis" or "etcd". */
const char *meta_backend_name(const meta_t *m);

int meta_get(meta_t *m, const char *key, uint32_t timeout_ms, meta_cb cb, void *arg);
int meta_range(meta_t *m, const char *prefix, const char *start_after, uint32_t limit,
               uint32_t timeout_ms, meta_cb cb, void *arg);
int meta_txn(meta_t *m, const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *then_ops,
             size_t n_then, const meta_op_t *else_ops, size_t n_else, uint32_t timeout_ms,
             meta_cb cb, void *arg);
int meta_lease_grant(meta_t *m, int64_t ttl_ms, uint32_t timeout_ms, meta_cb cb, void *arg);
int meta_lease_keepalive(meta_t *m, meta_lease_t lease, uint32_t timeout_ms, meta_cb cb, void *arg);
int meta_lease_revoke(meta_t *m, meta_lease_t lease, uint32_t timeout_ms, meta_cb cb, void *arg);
int meta_lease_ttl(meta_t *m, meta_lease_t lease, uint32_t timeout_ms, meta_cb cb, void *arg);

/* Call counters (for tests that prove the hot path does no metadata calls): a view of the
 * handle's metrics registry (kvmesh_metadata_operations_total / _errors_total of this handle's
 * backend), counted once in meta.c. Handles sharing a registry share these counts; a handle
 * opened without one has a private registry. errors also counts calls refused before submit. */
typedef struct meta_stats {
    uint64_t gets, ranges, txns, lease_grants, lease_keepalives, lease_revokes, lease_ttls;
    uint64_t errors;
} meta_stats_t;
void meta_get_stats(const meta_t *m, meta_stats_t *out);

/* Deep copy of a result (caller frees with meta_result_free). */
meta_result_t *meta_result_dup(const meta_result_t *res);
void meta_result_free(meta_result_t *res);

/*
 * Blocking wrapper for tools and tests: owns a loop thread with a real env and a meta_t on it.
 * Calls may come from any thread; each blocks until the result and returns a deep copy in *out
 * (caller frees with meta_result_free; *out is set even when the call failed, with rc set).
 * The function's own return value is the result's rc.
 */
typedef struct meta_sync meta_sync_t;
int meta_sync_open(meta_sync_t **out, const char *url, const meta_opts_t *opts);
void meta_sync_close(meta_sync_t *s);
meta_t *meta_sync_handle(meta_sync_t *s); /* for meta_get_stats; use only via meta_sync_* */
int meta_sync_get(meta_sync_t *s, const char *key, meta_result_t **out);
int meta_sync_range(meta_sync_t *s, const char *prefix, const char *start_after, uint32_t limit,
                    meta_result_t **out);
int meta_sync_txn(meta_sync_t *s, const meta_cmp_t *cmps, size_t n_cmps, const meta_op_t *then_ops,
                  size_t n_then, const meta_op_t *else_ops, size_t n_else, meta_result_t **out);
int meta_sync_lease_grant(meta_sync_t *s, int64_t ttl_ms, meta_result_t **out);
int meta_sync_lease_keepalive(meta_sync_t *s, meta_lease_t lease, meta_result_t **out);
int meta_sync_lease_revoke(meta_sync_t *s, meta_lease_t lease, meta_result_t **out);
int meta_sync_lease_ttl(meta_sync_t *s, meta_lease_t lease, meta_result_t **out);

#endif
