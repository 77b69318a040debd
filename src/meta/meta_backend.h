/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_backend.h — the backend interface of the metadata dispatcher (meta.c), for code that
 * implements a meta_t outside src/meta: a forwarding or decorating handle (src/store/metatrace.c
 * traces the calls the route service makes), a fake backend in a test. The backends of
 * src/meta (memory, Redis, etcd) use the same interface through meta_impl.h, which adds the
 * dispatcher's own state and is private to src/meta.
 *
 * The contract: meta.c validates arguments, deep-copies the request into a meta_call_t, arms
 * the deadline timer, counts the call, and hands it to the backend's submit(). The backend
 * completes the call exactly once with meta_call_complete(), on the loop thread. If the
 * deadline fires (or the handle closes) first, meta.c completes the call to the user with
 * KVMESH_ETIMEDOUT (or KVMESH_ECANCELED) and the backend's later completion is dropped; the
 * call's memory is freed only after both sides are done with it (reference count), so a backend
 * may keep the pointer until it completes. Backends may check meta_call_abandoned() to skip
 * useless work.
 *
 * meta_call_complete() may run the user's callback, and that callback may call meta_close():
 * the dispatcher then defers the backend's close() and the handle's free to a later loop turn,
 * so a backend's state stays valid until its completion path returns. A completion made inside
 * submit() is delivered to the user on a later loop turn (callbacks never run inside meta_*()).
 */
#ifndef KVMESH_META_META_BACKEND_H
#define KVMESH_META_META_BACKEND_H

#include "meta/meta.h"

enum meta_call_kind {
    META_CALL_GET,
    META_CALL_RANGE,
    META_CALL_TXN,
    META_CALL_LEASE_GRANT,
    META_CALL_LEASE_KEEPALIVE,
    META_CALL_LEASE_REVOKE,
    META_CALL_LEASE_TTL,
};

typedef struct meta_call {
    meta_t *m;
    enum meta_call_kind kind;
    uint64_t deadline_ns; /* env_now_ns() value after which the call is timed out */
    uint64_t start_ns;    /* env_now_ns() at submit (latency histogram) */
    /* request (owned by the call; strings NUL-terminated) */
    char *key;         /* GET */
    char *prefix;      /* RANGE */
    char *start_after; /* RANGE, NULL = from the start */
    uint32_t limit;    /* RANGE */
    meta_cmp_t *cmps;  /* TXN (keys and values deep-copied) */
    size_t n_cmps;
    meta_op_t *then_ops;
    size_t n_then;
    meta_op_t *else_ops;
    size_t n_else;
    int64_t ttl_ms;     /* LEASE_GRANT */
    meta_lease_t lease; /* LEASE_KEEPALIVE / REVOKE / TTL */
    /* private to the dispatcher */
    meta_cb cb;
    void *cb_arg;
    env_timer_id timer;
    int refs;
    bool user_done;
    struct meta_call *next, *prev; /* pending list */
    /* private to the backend */
    void *backend_ctx;
} meta_call_t;

struct meta_backend_ops {
    const char *name; /* "memory", "redis", "etcd" */
    /* Parse url (already known to carry this backend's scheme) and set m->backend. Return
     * KVMESH_EURL (with kvm_errf detail) for malformed URLs. Must not block for long: connect
     * lazily or asynchronously. */
    int (*open)(meta_t *m, const char *url);
    /* Complete every call still held with KVMESH_ECANCELED, release everything. */
    void (*close)(meta_t *m);
    /* Start work on the call; complete it later (or immediately) with meta_call_complete(). */
    void (*submit)(meta_t *m, meta_call_t *call);
};

/* A handle over a backend that is already set up: ops->open is not called (it may be NULL),
 * backend is what meta_backend_ctx() returns, opts as for meta_open (NULL = defaults).
 * meta_close() calls ops->close and frees the handle. 0 or KVMESH_ENOMEM. */
int meta_open_backend(meta_t **out, env_t *env, const struct meta_backend_ops *ops, void *backend,
                      const meta_opts_t *opts);
/* The backend state of a handle (what open set, or meta_open_backend was given). */
void *meta_backend_ctx(const meta_t *m);
/* The env the handle was opened on. */
env_t *meta_env(const meta_t *m);

/* Backend → dispatcher: the call's result (copied as needed before the user callback returns).
 * Drops the backend's reference; the backend must not touch the call afterwards. */
void meta_call_complete(meta_call_t *call, const meta_result_t *res);

/* Convenience: complete with an error code and a printf-style message. */
void meta_call_fail(meta_call_t *call, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True once the user has already been answered (deadline or close): work may be skipped, but
 * the backend must still call meta_call_complete() (or meta_call_fail()) to drop its ref. */
bool meta_call_abandoned(const meta_call_t *call);

/* Splits the scheme off a metadata URL into scheme (lower-cased, NUL-terminated); KVMESH_EURL
 * with a message for malformed URLs (no "://", bad characters, over META_URL_MAX bytes). */
int meta_url_scheme(const char *url, char *scheme, size_t cap);

#endif
