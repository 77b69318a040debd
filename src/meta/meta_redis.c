/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_redis.c — the Redis metadata backend (redis://), over hiredis's async API on the env's
 * libuv loop. Every primitive of meta.h is one Lua script (meta_redis_lua.h), so each call is one
 * atomic step inside Redis; the data model, the lease emulation and the clock are described in
 * docs/metadata-redis.md.
 *
 * What it owns: one hiredis async connection (at most one at a time), the queue of calls waiting
 * for a connection, the list of calls sent on the connection, three env timers (connect timeout,
 * reconnect backoff, lease reaper) and the parsed URL.
 *
 * Connection state machine (one connection at a time; calls are sent only in READY):
 *
 *      open            connected, AUTH/SELECT/SETNAME/SCRIPT LOAD ok
 *   IDLE ---> CONNECTING -------------------------------------------> READY
 *                 |   ^                                                  |
 *   refused,      |   | backoff timer                connection lost     |
 *   timeout, auth v   |                                                  |
 *   failure    BACKOFF <-------------------------------------------------+
 *
 *   any state --close--> CLOSED
 *
 * Invariants:
 *   - a call is in exactly one of: the queue (not sent), the in-flight list (sent; its hiredis
 *     callback is pending), or detached (already completed; its request is freed when hiredis
 *     runs the callback, which hiredis guarantees exactly once, with NULL on teardown);
 *   - ac->data is the backend while the connection is ours and NULL once it was given up, so
 *     callbacks that hiredis runs during a teardown we started do nothing;
 *   - when the connection is lost, every queued and in-flight call fails with KVMESH_ECONN (or
 *     the handshake's error, e.g. KVMESH_EAUTH) naming host:port; a reconnect follows after an
 *     exponential backoff (META_REDIS_BACKOFF_MIN_MS .. META_REDIS_BACKOFF_MAX_MS, jittered);
 *   - failing many calls at once needs no memory: the calls are first recorded in a buffer
 *     preallocated for META_REDIS_PENDING_MAX (the bound on queued + in-flight calls); user
 *     callbacks that run meanwhile may submit, but never close the backend synchronously (the
 *     dispatcher defers a meta_close() made inside a callback).
 *
 * Threading: everything runs on the env's loop thread (hiredis callbacks come from the libuv
 * poll handle on that loop, see ev_attach).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <uv.h>

#include "core/hex.h"
#include "core/util.h"
#include "env/env_thread.h"
#include "meta/meta_impl.h"
#include "meta/meta_redis_lua.h"
#include "meta/meta_redis_url.h"

#define META_REDIS_CONNECT_TIMEOUT_MS 3000u /* connect + handshake of one attempt */
#define META_REDIS_BACKOFF_MIN_MS     50u
#define META_REDIS_BACKOFF_MAX_MS     2000u
#define META_REDIS_PENDING_MAX        16384u /* calls queued + in flight per handle */
#define META_REDIS_REAP_INTERVAL_MS   250u   /* lease reaper period */
#define META_REDIS_REAP_MAX           64     /* leases expired per reaper script call */
#define META_REDIS_MSG_MAX            1024

enum mr_script {
    MR_S_GET,
    MR_S_RANGE,
    MR_S_TXN,
    MR_S_GRANT,
    MR_S_KEEPALIVE,
    MR_S_REVOKE,
    MR_S_TTL,
    MR_S_REAP,
    MR_S_COUNT
};

static const char *const mr_script_src[MR_S_COUNT] = {
    meta_redis_lua_get,       meta_redis_lua_range,  meta_redis_lua_txn, meta_redis_lua_grant,
    meta_redis_lua_keepalive, meta_redis_lua_revoke, meta_redis_lua_ttl, meta_redis_lua_reap,
};
static const char *const mr_script_name[MR_S_COUNT] = {
    "get", "range", "txn", "lease_grant", "lease_keepalive", "lease_revoke", "lease_ttl", "reap",
};

enum mr_state { MR_IDLE, MR_CONNECTING, MR_READY, MR_BACKOFF, MR_CLOSED };

typedef struct mr_req mr_req_t;
typedef struct meta_redis meta_redis_t;

struct mr_req {
    mr_req_t *next, *prev;
    meta_redis_t *b;   /* NULL once detached */
    meta_call_t *call; /* NULL once completed */
    enum mr_script script;
    bool retried; /* NOSCRIPT reload done once */
    int argc;
    const char **argv; /* borrowed from the call or from own */
    size_t *argvlen;
    char *own; /* formatted numbers and range bounds */
};

typedef struct mr_list {
    mr_req_t *head, *tail;
    size_t n;
} mr_list_t;

struct meta_redis {
    meta_t *m;
    env_t *env;
    meta_redis_url_t url;
    char prefix[META_REDIS_NS_MAX + 16]; /* "kvm:{NS}:" */
    char sha[MR_S_COUNT][41];
    enum mr_state state;
    redisAsyncContext *ac;
    int hs_pending; /* handshake replies still expected */
    unsigned attempts;
    env_timer_id t_connect, t_backoff, t_reap;
    bool reap_inflight;
    mr_list_t queue;       /* waiting for READY */
    mr_list_t inflight;    /* sent on ac */
    meta_call_t **failbuf; /* META_REDIS_PENDING_MAX entries, see detach_all */
    bool failing;
};

/* ---- small helpers -------------------------------------------------------------------------- */

static void list_push(mr_list_t *l, mr_req_t *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static void list_del(mr_list_t *l, mr_req_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->next = r->prev = NULL;
    l->n--;
}

/* Removes and returns the first request, or NULL. */
static mr_req_t *list_pop(mr_list_t *l)
{
    mr_req_t *r = l->head;
    if (!r)
        return NULL;
    l->head = r->next;
    if (l->head)
        l->head->prev = NULL;
    else
        l->tail = NULL;
    r->next = r->prev = NULL;
    l->n--;
    return r;
}

static void req_free(mr_req_t *r)
{
    if (!r)
        return;
    free(r->argv);
    free(r->argvlen);
    free(r->own);
    free(r);
}

static const char *state_name(enum mr_state s)
{
    switch (s) {
    case MR_IDLE:
        return "idle";
    case MR_CONNECTING:
        return "connecting";
    case MR_READY:
        return "ready";
    case MR_BACKOFF:
        return "backoff";
    case MR_CLOSED:
        return "closed";
    }
    return "?";
}

static void set_state(meta_redis_t *b, enum mr_state to)
{
    enum mr_state from = b->state;
    bool ok = to == MR_CLOSED || (from == MR_IDLE && to == MR_CONNECTING) ||
              (from == MR_CONNECTING && (to == MR_READY || to == MR_BACKOFF)) ||
              (from == MR_READY && to == MR_BACKOFF) || (from == MR_BACKOFF && to == MR_CONNECTING);
    if (!ok) {
        fprintf(stderr, "meta_redis: illegal transition %s -> %s\n", state_name(from),
                state_name(to));
        KVM_ASSERT(ok);
    }
    b->state = to;
}

static void sha1_hex(const char *s, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    int ok = EVP_Digest(s, strlen(s), md, &n, EVP_sha1(), NULL);
    KVM_ASSERT(ok == 1 && n == 20);
    kvm_hex_encode(md, 20, out);
}

/* ---- failing calls safely ------------------------------------------------------------------- */

/* A request whose effect on the store may have happened when its connection broke: a txn with a
 * write in either branch, or a revoke. (A lost grant leaves an unused lease that expires; reads,
 * keepalive and ttl change nothing the caller could miss.) */
static bool req_unsafe(const mr_req_t *r)
{
    const meta_call_t *c = r->call;
    if (!c)
        return false;
    if (c->kind == META_CALL_LEASE_REVOKE)
        return true;
    if (c->kind != META_CALL_TXN)
        return false;
    for (size_t i = 0; i < c->n_then; i++)
        if (c->then_ops[i].type != META_OP_GET)
            return true;
    for (size_t i = 0; i < c->n_else; i++)
        if (c->else_ops[i].type != META_OP_GET)
            return true;
    return false;
}

/*
 * Detaches every queued and in-flight request from b and records their calls in b->failbuf
 * (preallocated for META_REDIS_PENDING_MAX calls, so failing never needs memory). In-flight
 * requests stay allocated until hiredis runs their callback (which then only frees them);
 * queued ones are freed here. Returns the number of calls recorded; the first *n_unsafe of them
 * were in flight and may have taken effect (req_unsafe).
 */
static size_t detach_all(meta_redis_t *b, size_t *n_unsafe)
{
    KVM_ASSERT(!b->failing);
    size_t n = 0, u = 0;
    mr_req_t *r;
    /* in-flight calls whose effect may have happened come first: failbuf[0..u) */
    for (r = b->inflight.head; r; r = r->next)
        if (req_unsafe(r))
            u++;
    size_t iu = 0, is = u;
    while ((r = list_pop(&b->inflight))) {
        KVM_ASSERT(n < META_REDIS_PENDING_MAX);
        b->failbuf[req_unsafe(r) ? iu++ : is++] = r->call;
        n++;
        r->b = NULL;
        r->call = NULL;
    }
    KVM_ASSERT(iu == u && is == n);
    *n_unsafe = u;
    while ((r = list_pop(&b->queue))) {
        KVM_ASSERT(n < META_REDIS_PENDING_MAX);
        b->failbuf[n++] = r->call;
        req_free(r);
    }
    return n;
}

/*
 * Completes the n calls recorded by detach_all. User callbacks may run here; they may submit new
 * calls (queued or sent, never recorded in failbuf) but never close the backend: the dispatcher
 * defers a meta_close() made inside a callback to a later loop turn.
 */
static void failbuf_run(meta_redis_t *b, size_t n, int rc, const char *msg)
{
    b->failing = true;
    for (size_t i = 0; i < n; i++)
        meta_call_fail(b->failbuf[i], rc, "%s", msg);
    b->failing = false;
}

/* As failbuf_run, but the first n_unsafe calls (sent writes) fail with KVMESH_EINDETERMINATE:
 * the server may have applied them before the connection broke. */
static void failbuf_run_lost(meta_redis_t *b, size_t n, size_t n_unsafe, int rc, const char *msg)
{
    b->failing = true;
    for (size_t i = 0; i < n; i++) {
        if (i < n_unsafe)
            meta_call_fail(b->failbuf[i], KVMESH_EINDETERMINATE,
                           "%s; this write was sent and its outcome is unknown: read back to "
                           "learn it",
                           msg);
        else
            meta_call_fail(b->failbuf[i], rc, "%s", msg);
    }
    b->failing = false;
}

/* ---- event-loop binding --------------------------------------------------------------------- */

/*
 * hiredis <-> libuv glue. hiredis's own adapters/libuv.h ignores poll errors, so a refused or
 * reset connection would only be noticed at the connect timeout; this one hands an error to
 * hiredis as a read event, and hiredis then finds the socket error itself (a failed connect ends
 * in the connect callback, a broken connection in the disconnect callback). It also does not
 * leak when uv_poll_init fails. One poll handle per connection, released by uv_close.
 */
typedef struct mr_poll {
    uv_poll_t h;
    redisAsyncContext *ac; /* NULL once hiredis cleaned up */
    int events;
} mr_poll_t;

/*
 * The socket is writable. hiredis (0.14) writes its output buffer with write(2), which raises
 * SIGPIPE when the server has closed the connection; the loop may run on an application thread
 * whose SIGPIPE is neither blocked nor ignored (docs/api.md "Signals"). So the buffer is sent here
 * with MSG_NOSIGNAL, and hiredis's handler then only sees an empty buffer (it drops the write
 * interest). hiredis writes itself only while it completes the connect (it sends the commands
 * queued meanwhile at once) or to report a send error (the same write fails again and it
 * disconnects): then with SIGPIPE blocked, and one raised meanwhile dropped.
 */
static void handle_write(redisAsyncContext *ac)
{
    redisContext *c = &ac->c;
    if ((c->flags & REDIS_CONNECTED) && sdslen(c->obuf) > 0) {
        ssize_t n;
        do
            n = send(c->fd, c->obuf, sdslen(c->obuf), MSG_NOSIGNAL | MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
            if (n > 0)
                sdsrange(c->obuf, (int)n, -1);
            if (sdslen(c->obuf) > 0)
                return; /* the rest when the socket is writable again (still watched) */
            redisAsyncHandleWrite(ac); /* writes nothing: stops watching for writable */
            return;
        }
    }
    sigset_t old;
    env_sigpipe_block(&old);
    redisAsyncHandleWrite(ac);
    env_sigpipe_restore_drop(&old);
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    mr_poll_t *p = h->data;
    if (status < 0)
        events = UV_READABLE;
    if (p->ac && (events & UV_READABLE))
        redisAsyncHandleRead(p->ac);
    if (p->ac && (events & UV_WRITABLE))
        handle_write(p->ac);
}

static void poll_update(mr_poll_t *p, int events)
{
    p->events = events;
    if (events)
        uv_poll_start(&p->h, events, poll_cb);
    else
        uv_poll_stop(&p->h);
}

static void ev_add_read(void *priv)
{
    mr_poll_t *p = priv;
    poll_update(p, p->events | UV_READABLE);
}

static void ev_del_read(void *priv)
{
    mr_poll_t *p = priv;
    poll_update(p, p->events & ~UV_READABLE);
}

static void ev_add_write(void *priv)
{
    mr_poll_t *p = priv;
    poll_update(p, p->events | UV_WRITABLE);
}

static void ev_del_write(void *priv)
{
    mr_poll_t *p = priv;
    poll_update(p, p->events & ~UV_WRITABLE);
}

static void poll_closed(uv_handle_t *h)
{
    free(h->data);
}

static void ev_cleanup(void *priv)
{
    mr_poll_t *p = priv;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->h, poll_closed);
}

static int ev_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
    if (ac->ev.data)
        return REDIS_ERR;
    mr_poll_t *p = calloc(1, sizeof(*p));
    if (!p)
        return REDIS_ERR;
    if (uv_poll_init(loop, &p->h, ac->c.fd) != 0) {
        free(p);
        return REDIS_ERR;
    }
    p->h.data = p;
    p->ac = ac;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    ac->ev.data = p;
    return REDIS_OK;
}

/* ---- connection ----------------------------------------------------------------------------- */

static void conn_start(meta_redis_t *b);
static void on_backoff(void *arg);
static void send_req(meta_redis_t *b, mr_req_t *r);

static void arm_backoff(meta_redis_t *b)
{
    unsigned shift = KVM_MIN(b->attempts, 16u);
    uint64_t d = (uint64_t)META_REDIS_BACKOFF_MIN_MS << shift;
    if (d > META_REDIS_BACKOFF_MAX_MS)
        d = META_REDIS_BACKOFF_MAX_MS;
    d = d / 2 + env_rand_u64(b->env) % (d / 2 + 1); /* jitter: [d/2, d] */
    b->attempts++;
    b->t_backoff = env_timer_start(b->env, d * 1000000ull, on_backoff, b);
}

/*
 * Gives up the current connection (if any) after a failure: detaches it (free_ctx: also frees
 * it; false when hiredis is already tearing it down), moves to BACKOFF with a reconnect timer,
 * then fails every queued and in-flight call with rc and msg. The caller must not touch b after
 * this returns (a user callback may have closed the handle).
 */
static void conn_lost(meta_redis_t *b, bool free_ctx, int rc, const char *msg)
{
    redisAsyncContext *ac = b->ac;
    b->ac = NULL;
    b->reap_inflight = false;
    env_timer_cancel(b->env, b->t_connect);
    b->t_connect = 0;
    /* detach before freeing: the callbacks hiredis runs during the free find them detached */
    size_t n_unsafe = 0;
    size_t n = detach_all(b, &n_unsafe);
    if (ac) {
        ac->data = NULL;
        if (free_ctx)
            redisAsyncFree(ac); /* deferred by hiredis when inside one of its callbacks */
    }
    set_state(b, MR_BACKOFF);
    arm_backoff(b);
    failbuf_run_lost(b, n, n_unsafe, rc, msg);
}

static void on_connect_timeout(void *arg)
{
    meta_redis_t *b = arg;
    b->t_connect = 0;
    char msg[META_REDIS_MSG_MAX];
    snprintf(msg, sizeof(msg),
             "redis at %s:%u: no connection within %u ms (connect and handshake); is the server "
             "reachable?",
             b->url.host, b->url.port, META_REDIS_CONNECT_TIMEOUT_MS);
    conn_lost(b, true, KVMESH_ECONN, msg);
}

static void on_backoff(void *arg)
{
    meta_redis_t *b = arg;
    b->t_backoff = 0;
    set_state(b, MR_CONNECTING);
    conn_start(b);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    meta_redis_t *b = ac->data;
    if (!b || status == REDIS_OK)
        return; /* handshake replies drive the rest */
    char msg[META_REDIS_MSG_MAX];
    snprintf(msg, sizeof(msg), "cannot connect to redis at %s:%u: %s", b->url.host, b->url.port,
             ac->errstr[0] ? ac->errstr : "connection failed");
    conn_lost(b, false, KVMESH_ECONN, msg); /* hiredis frees ac after this returns */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    meta_redis_t *b = ac->data;
    if (!b)
        return;
    char msg[META_REDIS_MSG_MAX];
    snprintf(msg, sizeof(msg), "connection to redis at %s:%u lost: %s", b->url.host, b->url.port,
             ac->errstr[0] ? ac->errstr : "closed by the server");
    conn_lost(b, false, KVMESH_ECONN, msg);
}

static void flush_queue(meta_redis_t *b)
{
    mr_req_t *r;
    while (b->state == MR_READY && (r = list_pop(&b->queue))) {
        send_req(b, r);
    }
}

/* Maps an error reply received during the handshake to a failure of the connection attempt. */
static void handshake_error(meta_redis_t *b, const char *what, const char *err)
{
    char msg[META_REDIS_MSG_MAX];
    int rc = KVMESH_EBACKEND;
    if (strncmp(err, "WRONGPASS", 9) == 0 || strstr(err, "invalid password") ||
        (strcmp(what, "AUTH") == 0 && strncmp(err, "ERR", 3) == 0)) {
        rc = KVMESH_EAUTH;
        if (b->url.has_user)
            snprintf(msg, sizeof(msg),
                     "redis at %s:%u: authentication failed for user '%s' (%s); check the user "
                     "and password in the URL",
                     b->url.host, b->url.port, b->url.user, err);
        else
            snprintf(msg, sizeof(msg),
                     "redis at %s:%u: authentication failed for the default user (%s); check "
                     "the password in the URL",
                     b->url.host, b->url.port, err);
    } else if (strncmp(err, "NOAUTH", 6) == 0 || strncmp(err, "NOPERM", 6) == 0) {
        rc = KVMESH_EAUTH;
        snprintf(msg, sizeof(msg),
                 "redis at %s:%u refused %s (%s); give user:password@ in the URL for a user "
                 "allowed to run EVALSHA/SCRIPT",
                 b->url.host, b->url.port, what, err);
    } else if (strcmp(what, "SELECT") == 0) {
        rc = KVMESH_ECONFIG;
        snprintf(msg, sizeof(msg), "redis at %s:%u: cannot select database %d (%s)", b->url.host,
                 b->url.port, b->url.db, err);
    } else {
        snprintf(msg, sizeof(msg), "redis at %s:%u: %s failed during connect: %s", b->url.host,
                 b->url.port, what, err);
    }
    conn_lost(b, true, rc, msg);
}

static void on_handshake(redisAsyncContext *ac, void *reply, void *priv)
{
    meta_redis_t *b = ac->data;
    if (!b)
        return;
    redisReply *r = reply;
    /* -3 CLIENT SETNAME, -2 AUTH, -1 SELECT, >= 0 SCRIPT LOAD of that script */
    int step = *(const int *)priv;
    const char *what = step == -3   ? "CLIENT SETNAME"
                       : step == -2 ? "AUTH"
                       : step == -1 ? "SELECT"
                                    : "SCRIPT LOAD";
    if (!r) {
        char msg[META_REDIS_MSG_MAX];
        snprintf(msg, sizeof(msg), "connection to redis at %s:%u lost during %s: %s", b->url.host,
                 b->url.port, what, ac->errstr[0] ? ac->errstr : "closed");
        conn_lost(b, false, KVMESH_ECONN, msg);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && step != -3) { /* the name is only a courtesy */
        handshake_error(b, what, r->str);
        return;
    }
    if (step >= 0 && (r->type != REDIS_REPLY_STRING || strcmp(r->str, b->sha[step]) != 0)) {
        char msg[META_REDIS_MSG_MAX];
        snprintf(msg, sizeof(msg),
                 "redis at %s:%u: SCRIPT LOAD of '%s' returned an unexpected "
                 "digest",
                 b->url.host, b->url.port, mr_script_name[step]);
        conn_lost(b, true, KVMESH_EPROTO, msg);
        return;
    }
    KVM_ASSERT(b->hs_pending > 0);
    if (--b->hs_pending > 0)
        return;
    env_timer_cancel(b->env, b->t_connect);
    b->t_connect = 0;
    b->attempts = 0;
    set_state(b, MR_READY);
    flush_queue(b);
}

/* Handshake steps, passed to on_handshake as pointers into this table (never written). */
static int hs_step_ids[] = {-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
KVM_STATIC_ASSERT(KVM_ARRAY_SIZE(hs_step_ids) == 3 + MR_S_COUNT, "one id per handshake step");

static int hs_send(meta_redis_t *b, int step, int argc, const char **argv)
{
    void *priv = &hs_step_ids[step + 3];
    if (redisAsyncCommandArgv(b->ac, on_handshake, priv, argc, argv, NULL) != REDIS_OK)
        return -1;
    b->hs_pending++;
    return 0;
}

static void conn_start(meta_redis_t *b)
{
    char msg[META_REDIS_MSG_MAX];
    KVM_ASSERT(b->state == MR_CONNECTING && b->ac == NULL);
    redisAsyncContext *ac = redisAsyncConnect(b->url.host, b->url.port);
    if (!ac || ac->err) {
        snprintf(msg, sizeof(msg), "cannot connect to redis at %s:%u: %s", b->url.host, b->url.port,
                 ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        conn_lost(b, false, KVMESH_ECONN, msg);
        return;
    }
    if (ev_attach(ac, env_uv_loop(b->env)) != REDIS_OK) {
        redisAsyncFree(ac);
        snprintf(msg, sizeof(msg), "redis at %s:%u: cannot attach the connection to the loop",
                 b->url.host, b->url.port);
        conn_lost(b, false, KVMESH_ECONN, msg);
        return;
    }
    /* TCP keepalive (hiredis: idle 15 s, then probes) so that a peer that vanished without a
     * reset is noticed even when no call is in flight; deadlines bound the calls meanwhile. */
    (void)redisEnableKeepAlive(&ac->c);
    b->ac = ac;
    ac->data = b;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    b->hs_pending = 0;
    int bad = 0;
    if (b->url.has_user) {
        const char *a[] = {"AUTH", b->url.user, b->url.pass};
        bad |= hs_send(b, -2, 3, a);
    } else if (b->url.has_pass) {
        const char *a[] = {"AUTH", b->url.pass};
        bad |= hs_send(b, -2, 2, a);
    }
    if (b->url.db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", b->url.db);
        const char *a[] = {"SELECT", db};
        bad |= hs_send(b, -1, 2, a);
    }
    {
        /* CLIENT LIST shows "kvmesh" or "kvmesh:NAME" (NAME from meta_opts; no spaces allowed) */
        char name[80];
        int n = snprintf(name, sizeof(name), "kvmesh%s%s", b->m->name[0] ? ":" : "", b->m->name);
        for (int i = 0; i < n && name[i]; i++)
            if ((unsigned char)name[i] <= 0x20 || (unsigned char)name[i] >= 0x7f)
                name[i] = '_';
        const char *a[] = {"CLIENT", "SETNAME", name};
        bad |= hs_send(b, -3, 3, a);
    }
    for (int i = 0; i < MR_S_COUNT; i++) {
        const char *a[] = {"SCRIPT", "LOAD", mr_script_src[i]};
        bad |= hs_send(b, i, 3, a);
    }
    if (bad) {
        snprintf(msg, sizeof(msg), "redis at %s:%u: cannot queue the handshake", b->url.host,
                 b->url.port);
        conn_lost(b, true, KVMESH_ECONN, msg);
        return;
    }
    b->t_connect = env_timer_start(b->env, (uint64_t)META_REDIS_CONNECT_TIMEOUT_MS * 1000000ull,
                                   on_connect_timeout, b);
}

/* ---- reply decoding ------------------------------------------------------------------------- */

static bool rep_int(const redisReply *r, int64_t *out)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *out = r->integer;
        return true;
    }
    if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 24) {
        char *end;
        errno = 0;
        long long v = strtoll(r->str, &end, 10);
        if (errno || *end)
            return false;
        *out = v;
        return true;
    }
    return false;
}

/* Fills kv from 5 consecutive elements (v, c, m, ver, l). */
static bool rep_kv(redisReply **e, const char *key, meta_kv_t *kv)
{
    if (e[0]->type != REDIS_REPLY_STRING)
        return false;
    kv->found = true;
    kv->key = key;
    kv->value = (const uint8_t *)e[0]->str;
    kv->value_len = e[0]->len;
    return rep_int(e[1], &kv->create_rev) && rep_int(e[2], &kv->mod_rev) &&
           rep_int(e[3], &kv->version) && rep_int(e[4], &kv->lease);
}

/* Decodes a script's reply into res (pointers into r and the call). Returns 0, or the rc to fail
 * with (msg filled). */
static int decode(meta_redis_t *b, mr_req_t *q, redisReply *r, meta_result_t *res,
                  meta_kv_t **alloc, char *msg, size_t msgsz)
{
    meta_call_t *c = q->call;
    const char *sname = mr_script_name[q->script];
    if (r->type == REDIS_REPLY_ERROR) {
        int rc = KVMESH_EBACKEND;
        if (strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "NOPERM", 6) == 0 ||
            strncmp(r->str, "WRONGPASS", 9) == 0)
            rc = KVMESH_EAUTH;
        else if (strncmp(r->str, "OOM", 3) == 0)
            rc = KVMESH_ENOSPC;
        else if (strncmp(r->str, "ERANGE", 6) == 0) /* a number would leave 2^53-1 */
            rc = KVMESH_ERANGE;
        else if (strncmp(r->str, "BUSY", 4) == 0 || strncmp(r->str, "LOADING", 7) == 0 ||
                 strncmp(r->str, "MASTERDOWN", 10) == 0 || strncmp(r->str, "READONLY", 8) == 0)
            rc = KVMESH_EUNAVAILABLE;
        snprintf(msg, msgsz, "redis at %s:%u: script %s failed: %s", b->url.host, b->url.port,
                 sname, r->str);
        return rc;
    }
    int64_t st = -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !rep_int(r->element[1], &res->rev))
        goto proto;
    if (r->element[0]->type == REDIS_REPLY_STRING) {
        const char *detail =
            r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING ? r->element[2]->str : "";
        snprintf(msg, msgsz, "%s: %s", sname, detail);
        if (strcmp(r->element[0]->str, "ENOENT") == 0)
            return KVMESH_ENOENT;
        goto proto;
    }
    if (!rep_int(r->element[0], &st) || st != 0)
        goto proto;
    redisReply **e = r->element;
    size_t ne = r->elements;
    int64_t x, y;
    switch (q->script) {
    case MR_S_GET:
        if (ne < 3 || !rep_int(e[2], &x))
            goto proto;
        if (x) {
            if (ne != 8 || !rep_kv(e + 3, c->key, &res->kv))
                goto proto;
        } else if (ne != 3) {
            goto proto;
        }
        return 0;
    case MR_S_RANGE: {
        if (ne < 4 || !rep_int(e[2], &x) || !rep_int(e[3], &y) || y < 0 || y > (int64_t)c->limit ||
            ne != 4 + 6 * (size_t)y)
            goto proto;
        res->more = x != 0;
        res->n_kvs = (size_t)y;
        if (y > 0) {
            *alloc = calloc((size_t)y, sizeof(meta_kv_t));
            if (!*alloc) {
                snprintf(msg, msgsz, "out of memory decoding a range of %" PRId64 " keys", y);
                return KVMESH_ENOMEM;
            }
            for (int64_t i = 0; i < y; i++) {
                redisReply **f = e + 4 + 6 * i;
                if (f[0]->type != REDIS_REPLY_STRING || !rep_kv(f + 1, f[0]->str, &(*alloc)[i]))
                    goto proto;
            }
        }
        res->kvs = *alloc;
        return 0;
    }
    case MR_S_TXN: {
        int64_t nd;
        if (ne < 5 || !rep_int(e[2], &x) || !rep_int(e[3], &nd) || !rep_int(e[4], &y))
            goto proto;
        res->succeeded = x != 0;
        const meta_op_t *ops = res->succeeded ? c->then_ops : c->else_ops;
        size_t nops = res->succeeded ? c->n_then : c->n_else;
        if (y != (int64_t)nops || ne != 5 + 6 * nops)
            goto proto;
        res->n_deleted = nd;
        res->n_ops = nops;
        if (nops > 0) {
            *alloc = calloc(nops, sizeof(meta_kv_t));
            if (!*alloc) {
                snprintf(msg, msgsz, "out of memory decoding a txn reply");
                return KVMESH_ENOMEM;
            }
            for (size_t i = 0; i < nops; i++) {
                redisReply **f = e + 5 + 6 * i;
                int64_t found;
                if (!rep_int(f[0], &found))
                    goto proto;
                /* not found (and every PUT/DEL entry): all fields stay zero (meta.h) */
                if (found &&
                    (ops[i].type != META_OP_GET || !rep_kv(f + 1, ops[i].key, &(*alloc)[i])))
                    goto proto;
            }
        }
        res->ops = *alloc;
        return 0;
    }
    case MR_S_GRANT:
    case MR_S_KEEPALIVE:
    case MR_S_TTL:
        if (ne != 4 || !rep_int(e[2], &res->lease) || !rep_int(e[3], &res->ttl_ms))
            goto proto;
        if (res->ttl_ms < 0)
            res->ttl_ms = 0;
        return 0;
    case MR_S_REVOKE:
        res->lease = c->lease;
        if (ne != 2)
            goto proto;
        return 0;
    case MR_S_REAP:
    case MR_S_COUNT:
        break;
    }
proto:
    snprintf(msg, msgsz, "redis at %s:%u: unexpected reply to script %s", b->url.host, b->url.port,
             sname);
    return KVMESH_EPROTO;
}

/* ---- requests ------------------------------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *priv);

static void send_req(meta_redis_t *b, mr_req_t *r)
{
    if (meta_call_abandoned(r->call)) {
        meta_call_fail(r->call, KVMESH_ETIMEDOUT, "abandoned before it was sent");
        req_free(r);
        return;
    }
    r->argv[1] = b->sha[r->script];
    r->argvlen[1] = 40;
    if (redisAsyncCommandArgv(b->ac, on_reply, r, r->argc, r->argv, r->argvlen) != REDIS_OK) {
        meta_call_t *c = r->call;
        req_free(r);
        meta_call_fail(c, KVMESH_ECONN, "redis at %s:%u: connection is closing", b->url.host,
                       b->url.port);
        return;
    }
    list_push(&b->inflight, r);
}

static void on_script_reload(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac, (void)reply, (void)priv; /* the retried EVALSHA behind it reports any failure */
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    mr_req_t *q = priv;
    meta_redis_t *b = q->b;
    redisReply *r = reply;
    if (!b) { /* detached: its call was already completed */
        req_free(q);
        return;
    }
    if (!r) { /* hiredis is tearing the connection down */
        char msg[META_REDIS_MSG_MAX];
        snprintf(msg, sizeof(msg), "connection to redis at %s:%u lost: %s", b->url.host,
                 b->url.port, ac->errstr[0] ? ac->errstr : "closed");
        conn_lost(b, false, KVMESH_ECONN, msg); /* detaches q too */
        req_free(q);
        return;
    }
    list_del(&b->inflight, q);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && !q->retried &&
        b->ac == ac) {
        /* The script cache was flushed (SCRIPT FLUSH, restart without us noticing, failover):
         * load it again and resend; Redis runs both in order on this connection. */
        q->retried = true;
        const char *a[] = {"SCRIPT", "LOAD", mr_script_src[q->script]};
        redisAsyncCommandArgv(ac, on_script_reload, NULL, 3, a, NULL);
        send_req(b, q);
        return;
    }
    meta_result_t res;
    memset(&res, 0, sizeof(res));
    res.errmsg = "";
    meta_kv_t *alloc = NULL;
    char msg[META_REDIS_MSG_MAX];
    msg[0] = '\0';
    meta_call_t *c = q->call;
    int rc = decode(b, q, r, &res, &alloc, msg, sizeof(msg));
    req_free(q);
    if (rc) {
        meta_call_fail(c, rc, "%s", msg);
    } else {
        meta_call_complete(c, &res);
    }
    free(alloc);
}

/* Builds the EVALSHA argument vector of a call (argv[1], the digest, is set when sent). */
static int req_build(meta_redis_t *b, meta_call_t *c, mr_req_t **out)
{
    mr_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return KVMESH_ENOMEM;
    r->b = b;
    r->call = c;
    size_t nargs = 4, nown = 0;
    switch (c->kind) {
    case META_CALL_GET:
        r->script = MR_S_GET, nargs += 1;
        break;
    case META_CALL_RANGE:
        r->script = MR_S_RANGE, nargs += 3;
        nown = 2 * (strlen(c->prefix) + 2) + (c->start_after ? strlen(c->start_after) : 0) + 32;
        break;
    case META_CALL_TXN:
        r->script = MR_S_TXN;
        nargs += 3 + 5 * c->n_cmps + 4 * (c->n_then + c->n_else);
        nown = 24 * (3 + c->n_cmps + c->n_then + c->n_else);
        break;
    case META_CALL_LEASE_GRANT:
        r->script = MR_S_GRANT, nargs += 1, nown = 24;
        break;
    case META_CALL_LEASE_KEEPALIVE:
        r->script = MR_S_KEEPALIVE, nargs += 1, nown = 24;
        break;
    case META_CALL_LEASE_REVOKE:
        r->script = MR_S_REVOKE, nargs += 1, nown = 24;
        break;
    case META_CALL_LEASE_TTL:
        r->script = MR_S_TTL, nargs += 1, nown = 24;
        break;
    }
    r->argv = calloc(nargs, sizeof(*r->argv));
    r->argvlen = calloc(nargs, sizeof(*r->argvlen));
    r->own = nown ? malloc(nown) : NULL;
    if (!r->argv || !r->argvlen || (nown && !r->own)) {
        req_free(r);
        return KVMESH_ENOMEM;
    }
    size_t oi = 0;
    int n = 0;
#define ARG(p, l) (r->argv[n] = (p), r->argvlen[n] = (l), n++)
#define ARGS(s)   ARG((s), strlen(s))
#define ARGNUM(v)                                                                                  \
    do {                                                                                           \
        int w_ = snprintf(r->own + oi, nown - oi, "%" PRId64, (int64_t)(v));                       \
        ARG(r->own + oi, (size_t)w_);                                                              \
        oi += (size_t)w_ + 1;                                                                      \
    } while (0)
    ARGS("EVALSHA");
    ARG("", 0); /* digest */
    ARGS("1");
    ARGS(b->prefix);
    switch (c->kind) {
    case META_CALL_GET:
        ARGS(c->key);
        break;
    case META_CALL_RANGE: {
        /* lower bound: the larger of "[prefix" and "(start_after" (bytewise); upper bound: keys
         * below the prefix's successor (strip trailing 0xff, increment the last byte). */
        KVM_ASSERT(r->own != NULL);
        char *lo = r->own + oi;
        if (c->start_after && strcmp(c->start_after, c->prefix) >= 0)
            oi += (size_t)sprintf(lo, "(%s", c->start_after) + 1;
        else if (c->prefix[0])
            oi += (size_t)sprintf(lo, "[%s", c->prefix) + 1;
        else
            oi += (size_t)sprintf(lo, "-") + 1;
        ARGS(lo);
        char *hi = r->own + oi;
        size_t pl = strlen(c->prefix);
        while (pl > 0 && (unsigned char)c->prefix[pl - 1] == 0xff)
            pl--;
        if (pl == 0) {
            oi += (size_t)sprintf(hi, "+") + 1;
        } else {
            hi[0] = '(';
            memcpy(hi + 1, c->prefix, pl);
            hi[pl] = (char)((unsigned char)hi[pl] + 1);
            hi[pl + 1] = '\0';
            oi += pl + 2;
        }
        ARG(hi, strlen(hi));
        ARGNUM(c->limit);
        break;
    }
    case META_CALL_TXN: {
        static const char *const tgt[] = {"e", "v", "n", "m", "c", "l"};
        static const char *const cop[] = {"=", "!", "<", ">"};
        static const char *const oty[] = {"p", "d", "g"};
        ARGNUM(c->n_cmps);
        ARGNUM(c->n_then);
        ARGNUM(c->n_else);
        for (size_t i = 0; i < c->n_cmps; i++) {
            const meta_cmp_t *x = &c->cmps[i];
            KVM_ASSERT((unsigned)x->target < KVM_ARRAY_SIZE(tgt));
            KVM_ASSERT((unsigned)x->op < KVM_ARRAY_SIZE(cop));
            ARGS(x->key);
            ARGS(tgt[x->target]);
            ARGS(cop[x->op]);
            ARGNUM(x->num);
            if (x->target == META_CMP_VALUE && x->value)
                ARG((const char *)x->value, x->value_len);
            else
                ARG("", 0);
        }
        for (int br = 0; br < 2; br++) {
            const meta_op_t *ops = br ? c->else_ops : c->then_ops;
            size_t nops = br ? c->n_else : c->n_then;
            for (size_t i = 0; i < nops; i++) {
                KVM_ASSERT((unsigned)ops[i].type < KVM_ARRAY_SIZE(oty));
                ARGS(oty[ops[i].type]);
                ARGS(ops[i].key);
                if (ops[i].type == META_OP_PUT && ops[i].value)
                    ARG((const char *)ops[i].value, ops[i].value_len);
                else
                    ARG("", 0);
                ARGNUM(ops[i].type == META_OP_PUT ? ops[i].lease : 0);
            }
        }
        break;
    }
    case META_CALL_LEASE_GRANT:
        ARGNUM(c->ttl_ms);
        break;
    case META_CALL_LEASE_KEEPALIVE:
    case META_CALL_LEASE_REVOKE:
    case META_CALL_LEASE_TTL:
        ARGNUM(c->lease);
        break;
    }
#undef ARG
#undef ARGS
#undef ARGNUM
    KVM_ASSERT((size_t)n == nargs && oi <= nown);
    r->argc = n;
    *out = r;
    return 0;
}

/* ---- lease reaper --------------------------------------------------------------------------- */

static void on_reap_timer(void *arg);

static void arm_reap(meta_redis_t *b, uint64_t ms)
{
    b->t_reap = env_timer_start(b->env, ms * 1000000ull, on_reap_timer, b);
}

static void on_reap_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    meta_redis_t *b = ac->data;
    redisReply *r = reply;
    if (!b || !r)
        return; /* teardown: conn_lost resets reap_inflight */
    b->reap_inflight = false;
    if (r->type == REDIS_REPLY_ERROR) {
        if (strncmp(r->str, "NOSCRIPT", 8) == 0) {
            const char *a[] = {"SCRIPT", "LOAD", mr_script_src[MR_S_REAP]};
            redisAsyncCommandArgv(ac, on_script_reload, NULL, 3, a, NULL);
        }
        return;
    }
    int64_t more = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 && rep_int(r->element[3], &more) && more) {
        /* more leases are due: run again soon instead of waiting a full period */
        env_timer_cancel(b->env, b->t_reap);
        arm_reap(b, 1);
    }
}

static void on_reap_timer(void *arg)
{
    meta_redis_t *b = arg;
    b->t_reap = 0;
    if (b->state == MR_READY && !b->reap_inflight && b->ac) {
        char max[16];
        snprintf(max, sizeof(max), "%d", META_REDIS_REAP_MAX);
        const char *a[] = {"EVALSHA", b->sha[MR_S_REAP], "1", b->prefix, max};
        if (redisAsyncCommandArgv(b->ac, on_reap_reply, NULL, 5, a, NULL) == REDIS_OK)
            b->reap_inflight = true;
    }
    arm_reap(b, META_REDIS_REAP_INTERVAL_MS);
}

/* ---- backend ops ---------------------------------------------------------------------------- */

static int mr_open(meta_t *m, const char *url)
{
    meta_redis_url_t u;
    int rc = meta_redis_url_parse(url, &u);
    if (rc)
        return rc;
    if (!env_uv_loop(m->env))
        return kvm_errf(KVMESH_ENOTSUP,
                        "the redis metadata backend needs a libuv environment (this env has no "
                        "loop; the simulator uses memory://)");
    meta_redis_t *b = calloc(1, sizeof(*b));
    if (!b)
        return kvm_errf(KVMESH_ENOMEM, "out of memory opening the redis backend");
    b->failbuf = calloc(META_REDIS_PENDING_MAX, sizeof(meta_call_t *));
    if (!b->failbuf) {
        free(b);
        return kvm_errf(KVMESH_ENOMEM, "out of memory opening the redis backend");
    }
    b->m = m;
    b->env = m->env;
    b->url = u;
    snprintf(b->prefix, sizeof(b->prefix), "kvm:{%s}:", u.ns);
    for (int i = 0; i < MR_S_COUNT; i++)
        sha1_hex(mr_script_src[i], b->sha[i]);
    b->state = MR_IDLE;
    m->backend = b;
    set_state(b, MR_CONNECTING);
    conn_start(b); /* asynchronous; failures move to BACKOFF */
    arm_reap(b, META_REDIS_REAP_INTERVAL_MS);
    return 0;
}

static void mr_close(meta_t *m)
{
    meta_redis_t *b = m->backend;
    if (!b)
        return;
    m->backend = NULL;
    env_timer_cancel(b->env, b->t_connect);
    env_timer_cancel(b->env, b->t_backoff);
    env_timer_cancel(b->env, b->t_reap);
    set_state(b, MR_CLOSED);
    redisAsyncContext *ac = b->ac;
    b->ac = NULL;
    size_t n_unsafe = 0; /* closing: every call is answered ECANCELED */
    size_t n = detach_all(b, &n_unsafe);
    if (ac) {
        ac->data = NULL;
        redisAsyncFree(ac); /* runs detached callbacks, which only free their requests */
    }
    failbuf_run(b, n, KVMESH_ECANCELED, "metadata handle closed");
    free(b->failbuf);
    free(b);
}

static void mr_submit(meta_t *m, meta_call_t *call)
{
    meta_redis_t *b = m->backend;
    if (b->queue.n + b->inflight.n >= META_REDIS_PENDING_MAX) {
        meta_call_fail(call, KVMESH_EAGAIN,
                       "redis backend: %u calls already pending on this handle; retry later",
                       META_REDIS_PENDING_MAX);
        return;
    }
    mr_req_t *r;
    int rc = req_build(b, call, &r);
    if (rc) {
        meta_call_fail(call, rc, "out of memory building a redis request");
        return;
    }
    if (b->state == MR_READY)
        send_req(b, r);
    else
        list_push(&b->queue, r);
}

const struct meta_backend_ops meta_redis_ops = {
    .name = "redis",
    .open = mr_open,
    .close = mr_close,
    .submit = mr_submit,
};
