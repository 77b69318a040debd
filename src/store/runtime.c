/* SPDX-License-Identifier: Apache-2.0 */
/*
 * runtime.c — one kvmesh runtime: how env, metadata, RPC, transport, route and the store's own
 * parts are glued together, and how application threads reach them.
 *
 *   loop thread (env_uv_thread): owns meta_t, rpc_endpoint, route_svc_t, the membership
 *       snapshot and the owner bookkeeping. Route peer messages: env_send(node) -> the sender
 *       hook maps the node to a member -> rpc_notify(STORE_RPC_ENV) to its address; inbound
 *       STORE_RPC_ENV notifications -> env_uv_deliver (from = the sender's node) ->
 *       route_on_message.
 *   application threads: submit ops through env_post (bounded queue; a full queue is retried
 *       until the request deadline) and wait on the op's condition variable; they move payload
 *       bytes themselves with the transport engine (tp_*, thread-safe) or memcpy into local
 *       segments, so payload never passes through the loop.
 *   transport engine (tp_engine): its own I/O threads serve this runtime's segments to peers.
 *
 * Open: [app] segments + engine -> [loop] meta_open -> lease + member record (epoch) -> RPC
 * endpoint (handshake carries the epoch) -> route service (policy check) -> record ACTIVE ->
 * first snapshot -> timers. Close: [loop] fail waiters, stop timers, free the route service,
 * revoke the lease, close the endpoint, close meta -> [app] stop the loop thread, close segment
 * handles, free the engine, the allocators and the segments.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "core/wrh.h"
#include "env/clock.h"
#include "store/fair.h"
#include "store/get_inline.h"
#include "store/put_inline.h"
#include "store/put_primary.h"
#include "store/handoff.h"
#include "store/place.h"
#include "store/data.h"
#include "store/proto.h"
#include "store/cas_lane.h"
#include "store/cold_glue.h"
#include "store/quota.h"
#include "store/repair.h"
#include "store/rpc_metrics.h"
#include "store/slot_batch.h"
#include "store/place_wait.h"
#include "store/store.h"
#include "store/test_hook.h"

/* ---- RPC glue ------------------------------------------------------------------------------- */

/* A message to this runtime itself: delivered on a later loop turn (never inside env_send, so
 * a protocol never re-enters itself), without a connection (the handshake refuses self). */
struct self_msg {
    kvm_rt_t *rt;
    struct self_msg *next, *prev; /* rt->self_msgs: freed at close if the loop dropped them */
    uint32_t type;
    size_t len;
    uint8_t data[];
};

static void self_unlink(struct self_msg *sm)
{
    if (sm->prev)
        sm->prev->next = sm->next;
    else
        sm->rt->self_msgs = sm->next;
    if (sm->next)
        sm->next->prev = sm->prev;
}

static void self_deliver(void *arg)
{
    struct self_msg *sm = arg;
    self_unlink(sm);
    if (!atomic_load(&sm->rt->closing)) {
        env_msg_t msg = {.from = 0, .to = 0, .type = sm->type, .data = sm->data, .len = sm->len};
        env_uv_deliver(sm->rt->env, &msg);
    }
    free(sm);
}

static int env_sender(void *ctx, env_node_t to, uint32_t type, const void *data, size_t len)
{
    kvm_rt_t *rt = ctx;
    if (to == env_self(rt->env)) {
        struct self_msg *sm = malloc(sizeof(*sm) + len);
        if (!sm)
            return KVMESH_ENOMEM;
        sm->rt = rt;
        sm->type = type;
        sm->len = len;
        if (len)
            memcpy(sm->data, data, len);
        sm->prev = NULL;
        sm->next = rt->self_msgs;
        if (sm->next)
            sm->next->prev = sm;
        rt->self_msgs = sm;
        int rc = env_defer(rt->env, self_deliver, sm);
        if (rc) {
            self_unlink(sm);
            free(sm);
        }
        return rc;
    }
    const struct kvm_member *m = kvm_member_by_node(rt, to);
    rpc_peer *p = m ? kvm_rt_peer(rt, m) : NULL;
    if (!p)
        return KVMESH_EUNAVAILABLE;
    /* The RPC copies the body at submit: a small one (every single op's route message) is
     * built on the stack, a larger one on the heap. */
    uint8_t small[STORE_ENV_MSG_STACK];
    size_t body_len = store_env_msg_put(small, sizeof(small), type, data, len);
    uint8_t *body = body_len ? small : store_env_msg_encode(type, data, len, &body_len);
    if (!body)
        return KVMESH_ENOMEM;
    struct rpc_msg msg = {.type = STORE_RPC_ENV, .body = body, .body_len = body_len};
    int rc = rpc_notify(p, &msg, NULL, NULL);
    if (body != small)
        free(body);
    return rc;
}

/* Env messages from a sender that this runtime's membership snapshot does not list yet (a
 * runtime that joined since the last refresh, e.g. a CLI client's first route CAS): the
 * protocol's reply goes to the sender's node, which env_sender can only reach through the
 * snapshot, so the message waits for one refresh (a single metadata range read) instead of
 * being answered into the void. Bounded (STORE_HELD_MAX; beyond it messages are delivered at
 * once, as before); per-sender order is kept because every later message of that sender is
 * held too; delivered after the refresh whether or not it found the sender. */
struct held_msg {
    struct held_msg *next;
    kvm_runtime_id_t from;
    uint32_t type;
    uint32_t rounds; /* refreshes this message has waited for */
    size_t len;
    uint8_t data[];
};

static void held_flush(kvm_rt_t *rt, int rc, const char *err)
{
    (void)rc, (void)err;
    struct held_msg *h = rt->held_head;
    rt->held_head = rt->held_tail = NULL;
    rt->n_held = 0;
    while (h) {
        struct held_msg *next = h->next;
        h->next = NULL;
        h->rounds++;
        /* A sender still unknown while another refresh is due (asked for during this one,
         * which may have read the member list before that sender joined) waits for it once. */
        if (rt->held_refresh && h->rounds < 2 && !kvm_member_find(rt, &h->from) &&
            !atomic_load(&rt->closing)) {
            if (rt->held_tail)
                rt->held_tail->next = h;
            else
                rt->held_head = h;
            rt->held_tail = h;
            rt->n_held++;
            h = next;
            continue;
        }
        if (!atomic_load(&rt->closing)) {
            env_msg_t msg = {.from = kvm_member_node_of(rt, &h->from),
                             .to = 0,
                             .type = h->type,
                             .data = h->data,
                             .len = h->len};
            env_uv_deliver(rt->env, &msg);
        }
        free(h);
        h = next;
    }
}

static void held_kick(kvm_rt_t *rt)
{
    if (rt->refreshing) { /* that refresh may have read the member list before the join */
        rt->held_refresh = true;
        return;
    }
    kvm_member_refresh(rt, held_flush);
}

/* Application threads waiting for a snapshot refresh (kvm_rt_refresh_sync): each needs the
 * completion of one refresh that started after it asked. refs: the waiter and the loop. */
struct refresh_waiter {
    struct refresh_waiter *next;
    kvm_rt_t *rt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    uint32_t need; /* [loop] refresh completions still to see */
    atomic_int refs;
};

static void waiter_unref(struct refresh_waiter *w)
{
    if (atomic_fetch_sub(&w->refs, 1) != 1)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static void waiter_wake(struct refresh_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    waiter_unref(w);
}

/* [loop] after every refresh: wake the waiters it satisfied, keep the others. */
static void waiters_note_refresh(kvm_rt_t *rt)
{
    struct refresh_waiter **pp = &rt->refresh_waiters;
    while (*pp) {
        struct refresh_waiter *w = *pp;
        if (--w->need == 0 || atomic_load(&rt->closing)) {
            *pp = w->next;
            waiter_wake(w);
        } else {
            pp = &w->next;
        }
    }
}

/* rt->after_refresh: after every snapshot refresh (member.c), wakes the waiters it satisfied and
 * starts the refresh that held env messages from unknown senders still wait for, if one was
 * asked for while this one ran. */
static void held_after_refresh(kvm_rt_t *rt)
{
    waiters_note_refresh(rt);
    if (!rt->held_refresh || atomic_load(&rt->closing))
        return;
    rt->held_refresh = false;
    if (rt->held_head || rt->refresh_waiters)
        kvm_member_refresh(rt, rt->held_head ? held_flush : NULL);
}

static void refresh_sync_start(void *arg)
{
    struct refresh_waiter *w = arg;
    kvm_rt_t *rt = w->rt;
    if (atomic_load(&rt->closing)) {
        waiter_wake(w);
        return;
    }
    w->next = rt->refresh_waiters;
    rt->refresh_waiters = w;
    if (rt->refreshing) { /* that one may have read the member list before the asker's cause */
        w->need = 2;
        rt->held_refresh = true;
    } else {
        w->need = 1;
        kvm_member_refresh(rt, NULL);
    }
}

int kvm_rt_refresh_sync(kvm_rt_t *rt, uint64_t deadline_ms)
{
    struct refresh_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return KVMESH_ENOMEM;
    w->rt = rt;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&w->refs, 2);
    if (env_post(rt->env, refresh_sync_start, w) != 0) {
        atomic_store(&w->refs, 1);
        waiter_unref(w);
        return KVMESH_EAGAIN;
    }
    struct timespec ts;
    env_clock_after(CLOCK_MONOTONIC, kvm_deadline_left_ms(deadline_ms), &ts);
    pthread_mutex_lock(&w->mu);
    int e = 0;
    while (!w->done && e == 0)
        e = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    bool done = w->done;
    pthread_mutex_unlock(&w->mu);
    waiter_unref(w);
    return done ? 0 : KVMESH_ETIMEDOUT;
}

static bool held_push(kvm_rt_t *rt, const kvm_runtime_id_t *from, const env_msg_t *msg)
{
    bool known = kvm_member_find(rt, from) != NULL;
    if ((known && !rt->held_head) || rt->n_held >= STORE_HELD_MAX || atomic_load(&rt->closing))
        return false;
    bool queued_from = false; /* a known sender waits only behind its own held messages */
    for (struct held_msg *h = rt->held_head; known && h && !queued_from; h = h->next)
        queued_from = kvm_id128_equal(&h->from, from);
    if (known && !queued_from)
        return false;
    struct held_msg *h = malloc(sizeof(*h) + msg->len);
    if (!h)
        return false;
    h->next = NULL;
    h->from = *from;
    h->type = msg->type;
    h->rounds = 0;
    h->len = msg->len;
    if (msg->len)
        memcpy(h->data, msg->data, msg->len);
    if (rt->held_tail)
        rt->held_tail->next = h;
    else
        rt->held_head = h;
    rt->held_tail = h;
    rt->n_held++;
    if (!known)
        held_kick(rt);
    return true;
}

/* The sender's runtime id from its hex string: parsed when it differs from the last sender's
 * (route messages come from a few peers, so most messages reuse the parse). */
static int env_from_id(kvm_rt_t *rt, const char *hex, kvm_runtime_id_t *out)
{
    if (rt->env_from_ok && strcmp(hex, rt->env_from_hex) == 0) {
        *out = rt->env_from;
        return 0;
    }
    int rc = kvm_id128_parse(hex, out);
    size_t n = strlen(hex);
    rt->env_from_ok = rc == 0 && n < sizeof(rt->env_from_hex);
    if (rt->env_from_ok) {
        memcpy(rt->env_from_hex, hex, n + 1);
        rt->env_from = *out;
    }
    return rc;
}

static void on_env_msg(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    kvm_rt_t *rt = arg;
    kvm_runtime_id_t from;
    env_msg_t msg = {.to = 0};
    env_payload_t pl = {.buf = req->payload, .len = req->payload_len};
    if (req->sink_ctx) /* received into a get's buffer (kvm_get_inline_env_sink) */
        kvm_get_inline_sunk(req->sink_ctx, &pl);
    if (!req->peer_runtime_id || env_from_id(rt, req->peer_runtime_id, &from) != 0 ||
        store_env_msg_decode(req->body, req->body_len, &msg.type, &msg.data, &msg.len) != 0)
        goto out;
    if (held_push(rt, &from, &msg))
        goto out; /* (without its payload: an inline answer's bytes, the requester reads again) */
    msg.payload = req->payload_len ? &pl : NULL; /* the frame payload: an env attachment */
    msg.from = kvm_member_node_of(rt, &from);
    env_uv_deliver(rt->env, &msg);
    if (!pl.buf && req->payload)
        req->payload = NULL; /* taken by the receiver (env.h env_payload_t) */
out:
    if (req->sink_ctx)
        kvm_get_inline_sink_end(req->sink_ctx);
}

/* The payload sink of a STORE_RPC_ENV notification: an inline read's attachment for a single
 * get that lent its buffer goes straight there (get_inline.c), anything else to a pooled
 * buffer. Only from a known member while no message waits in the held queue (a held message's
 * attachment is dropped). */
static void env_sink(const struct rpc_request *req, void *arg, struct rpc_sink *out)
{
    kvm_rt_t *rt = arg;
    kvm_runtime_id_t from;
    env_msg_t msg = {.to = 0};
    if (!req->peer_runtime_id || rt->held_head ||
        env_from_id(rt, req->peer_runtime_id, &from) != 0 || !kvm_member_find(rt, &from) ||
        store_env_msg_decode(req->body, req->body_len, &msg.type, &msg.data, &msg.len) != 0)
        return;
    msg.from = kvm_member_node_of(rt, &from);
    kvm_get_inline_env_sink(rt, &msg, req->payload_len, out);
}

static void env_recv(void *ctx, const env_msg_t *msg)
{
    kvm_rt_t *rt = ctx;
    if (rt->route && msg->type >= ROUTE_MSG_BASE && msg->type <= ROUTE_MSG_LIMIT)
        route_on_message(rt->route, msg);
}

/* Splits "host:port" / "[v6]:port". */
/* ---- rpc_local = unix ------------------------------------------------------------------------ */

_Atomic uint32_t kvm_test_rpc_local_netns;

/* This runtime's host identity for same-host peer RPC: the kernel's boot id and the network
 * namespace (device and inode of /proc/self/ns/net), "BOOTID/DEV:INO". Two runtimes with equal
 * identities reach each other's unix sockets and share the network partitions that a namespace
 * gets (tests/chaos runs "hosts" as namespaces on one machine). -1 when either is unknown. */
static int host_identity(char *out, size_t cap)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof(boot), f))
            boot[strcspn(boot, "\n")] = 0;
        fclose(f);
    }
    struct stat st;
    if (!boot[0] || stat("/proc/self/ns/net", &st) != 0)
        return -1;
    uint64_t ino = (uint64_t)st.st_ino;
    if (kvm_test_take(&kvm_test_rpc_local_netns))
        ino ^= 0x5a5a; /* test hook: "another host" */
    int n = snprintf(out, cap, "%s/%" PRIx64 ":%" PRIx64, boot, (uint64_t)st.st_dev, ino);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* A unix socket file at path that refuses a connection: nothing listens on it (its runtime ended
 * without closing: killed, crashed). A live runtime's socket accepts (the probe connection closes
 * at once, before any handshake) or is busy (EAGAIN); any other answer counts as not stale. */
static bool rpc_local_refused(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return false;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool refused = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

/* rpc_local = unix, at open: removes the sockets that runtimes which ended without closing left in
 * RPC_LOCAL_DIR (a new runtime id never reuses their names, so they would pile up). A file is
 * removed only when all hold: its name is kvmesh-rpc-<32 hex>.sock (never this runtime's own),
 * it is a unix socket owned by this user, it was last modified RPC_LOCAL_STALE_S or more ago (a
 * runtime binds and listens in one step, so a live one is never caught between the two), and a
 * connection to it is refused. At most RPC_LOCAL_SWEEP_MAX files are probed per open. Returns
 * how many were removed. */
#define RPC_LOCAL_DIR       "/tmp"
#define RPC_LOCAL_STALE_S   60
#define RPC_LOCAL_SWEEP_MAX 64

static unsigned rpc_local_sweep(const char *own_name)
{
    DIR *d = opendir(RPC_LOCAL_DIR);
    if (!d)
        return 0;
    unsigned removed = 0, probed = 0;
    time_t now = time(NULL);
    uid_t me = geteuid();
    struct dirent *e;
    const size_t pre = strlen("kvmesh-rpc-"), id = KVM_ID128_HEX_LEN, suf = strlen(".sock");
    while (probed < RPC_LOCAL_SWEEP_MAX && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strlen(n) != pre + id + suf || strncmp(n, "kvmesh-rpc-", pre) != 0 ||
            strcmp(n + pre + id, ".sock") != 0 || strspn(n + pre, "0123456789abcdef") != id ||
            strcmp(n, own_name) == 0)
            continue;
        char path[sizeof(RPC_LOCAL_DIR) + 64];
        snprintf(path, sizeof(path), RPC_LOCAL_DIR "/%s", n);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != me ||
            now - st.st_mtime < RPC_LOCAL_STALE_S)
            continue;
        probed++;
        /* the same file still (a runtime of that id may have replaced it meanwhile: then the
         * inode differs; the window left is between this lstat and the unlink, and a socket lost
         * there only sends its peers to tcp, rt_op.c local_peer) */
        struct stat again;
        if (rpc_local_refused(path) && lstat(path, &again) == 0 && again.st_ino == st.st_ino &&
            again.st_dev == st.st_dev && unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* rpc_local = unix: listens on /tmp/kvmesh-rpc-<id>.sock too (a stale file of that name is
 * removed first; runtime ids are fresh per open unless configured; stale files of other ids are
 * swept, rpc_local_sweep) and sets rpc_local_addr and host_id, which the membership record
 * publishes. Any failure leaves both empty (peers use tcp) and says why on stderr; the runtime
 * opens anyway. */
static void rpc_local_listen(kvm_rt_t *rt)
{
    char path[108], name[64], host[sizeof(rt->host_id)];
    snprintf(name, sizeof(name), "kvmesh-rpc-%s.sock", rt->idhex);
    snprintf(path, sizeof(path), RPC_LOCAL_DIR "/%s", name);
    unsigned swept = rpc_local_sweep(name);
    rt->rpc_local_swept = swept;
    if (swept)
        fprintf(stderr,
                "kvmesh: rpc_local: removed %u stale socket%s from " RPC_LOCAL_DIR
                " (kvmesh-rpc-*.sock of runtimes that ended without closing: nothing listened)\n",
                swept, swept == 1 ? "" : "s");
    if (host_identity(host, sizeof(host)) != 0) {
        fprintf(stderr, "kvmesh: rpc_local: host identity unknown; peer RPC stays on tcp\n");
        return;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        fprintf(stderr, "kvmesh: rpc_local: cannot remove stale %s: %s; peer RPC stays on tcp\n",
                path, strerror(errno));
        return;
    }
    if (rpc_listen_unix(rt->ep, path) != 0) {
        fprintf(stderr, "kvmesh: rpc_local: %s; peer RPC stays on tcp\n", kvmesh_last_error());
        kvm_err_clear();
        return;
    }
    snprintf(rt->rpc_local_addr, sizeof(rt->rpc_local_addr), "unix:%s", path);
    snprintf(rt->host_id, sizeof(rt->host_id), "%s", host);
}

static void rpc_local_unlink(kvm_rt_t *rt)
{
    if (rt->rpc_local_addr[0])
        (void)unlink(rt->rpc_local_addr + 5);
}

static int split_hostport(const char *s, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return kvm_errf(KVMESH_ECONFIG, "listen: '%s' is not host:port", s);
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= cap)
        return kvm_errf(KVMESH_ECONFIG, "listen: host of '%s' is too long", s);
    memcpy(host, h, hl);
    host[hl] = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535)
        return kvm_errf(KVMESH_ECONFIG, "listen: port of '%s' is not 0..65535", s);
    *port = (int)p;
    return 0;
}

/* ---- open ---------------------------------------------------------------------------------- */

static void open_finish(kvm_rt_t *rt, int rc, const char *err)
{
    pthread_mutex_lock(&rt->mu);
    rt->open_rc = rc;
    if (rc)
        snprintf(rt->open_err, sizeof(rt->open_err), "%s",
                 err && err[0] ? err : kvmesh_strerror(rc));
    rt->open_done = true;
    pthread_cond_broadcast(&rt->open_cv);
    pthread_mutex_unlock(&rt->mu);
}

static void open_cold_ready(kvm_rt_t *rt, int rc, const char *err)
{
    if (rc) {
        open_finish(rt, rc, err);
        return;
    }
    kvm_member_start_timers(rt);
    kvm_owner_start(rt);
    open_finish(rt, 0, "");
}

static void open_refreshed(kvm_rt_t *rt, int rc, const char *err)
{
    if (rc) {
        open_finish(rt, rc, err);
        return;
    }
    static const kvm_cold_owner_ops_t owner_ops = {
        .reserve = kvm_owner_reserve, .commit = kvm_owner_commit, .release = kvm_owner_release};
    kvm_cold_open(rt, &owner_ops, open_cold_ready); /* cold tier (cold_glue.c): at once when off */
}

static void open_published(kvm_rt_t *rt, int rc, const char *err)
{
    if (rc) {
        open_finish(rt, rc, err);
        return;
    }
    kvm_member_refresh_next(rt, open_refreshed); /* (after a running one: member.c) */
}

static void open_quota_ready(kvm_rt_t *rt, int rc, const char *err)
{
    if (rc) {
        open_finish(rt, rc, err);
        return;
    }
    kvm_member_set_state(rt, KVM_MS_ACTIVE);
    kvm_member_publish(rt, open_published);
}

static void open_route_ready(void *arg, int rc)
{
    kvm_rt_t *rt = arg;
    if (rc) {
        open_finish(rt, rc, kvmesh_last_error());
        return;
    }
    if (rt->cfg.n_tenant_policies) {
        /* bootstrap every tenant policy first */
        static const kvm_quota_hooks_t quota_hooks = {.release_replica = kvm_ops_release_replica,
                                                      .commit_replica = kvm_ops_commit_replica,
                                                      .replay = kvm_quota_replay,
                                                      .tomb_close = kvm_quota_tomb_close};
        kvm_quota_open(rt, &quota_hooks, open_quota_ready);
        return;
    }
    kvm_member_set_state(rt, KVM_MS_ACTIVE);
    kvm_member_publish(rt, open_published);
}

static void open_registered(kvm_rt_t *rt, int rc, const char *err)
{
    char msg[600];
    if (rc) {
        snprintf(msg, sizeof(msg), "cannot register with metadata at %s: %s", rt->cfg.metadata_url,
                 err);
        open_finish(rt, rc, msg);
        return;
    }
    struct rpc_config rc_cfg;
    rpc_config_init(&rc_cfg);
    rc_cfg.idle_timeout_ms = rt->cfg.idle_timeout_ms;
    snprintf(rc_cfg.local.deployment_id, sizeof(rc_cfg.local.deployment_id), "%s",
             rt->cfg.deployment);
    snprintf(rc_cfg.local.runtime_id, sizeof(rc_cfg.local.runtime_id), "%s", rt->idhex);
    rc_cfg.local.runtime_epoch = rt->self.epoch;
    rc_cfg.metrics = rt->metrics;
    for (int i = 0; i < HS_PROTO_COUNT; i++)
        rc_cfg.local.proto[i] = (struct hs_range){1, 1};
    if (rt->cfg.secret[0]) {
        rc_cfg.secret = (const uint8_t *)rt->cfg.secret;
        rc_cfg.secret_len = strlen(rt->cfg.secret);
    }
    char host[128];
    int port = 0, bound = 0;
    uv_loop_t *loop = env_uv_loop(rt->env);
    if ((rc = split_hostport(rt->cfg.listen, host, sizeof(host), &port)) != 0 ||
        (rc = rpc_endpoint_new(loop, &rc_cfg, &rt->ep)) != 0 ||
        (rc = rpc_listen_tcp(rt->ep, host, port, &bound)) != 0) {
        snprintf(msg, sizeof(msg), "cannot listen on %s: %s", rt->cfg.listen, kvmesh_last_error());
        open_finish(rt, rc, msg);
        return;
    }
    if (rt->cfg.advertise[0])
        snprintf(rt->rpc_addr, sizeof(rt->rpc_addr), "tcp:%s", rt->cfg.advertise);
    else
        snprintf(rt->rpc_addr, sizeof(rt->rpc_addr), "tcp:%s:%d", host, bound);
    if (rt->cfg.rpc_local)
        rpc_local_listen(rt);
    rpc_register_notify_handler(rt->ep, STORE_RPC_ENV, on_env_msg, rt);
    rpc_register_notify_sink(rt->ep, STORE_RPC_ENV, env_sink); /* inline reads' bytes */
    kvm_owner_register_rpc(rt);
    kvm_put_inline_register(rt);  /* inline reservations (put_inline.c) */
    kvm_put_primary_register(rt); /* puts at the primary (put_primary.c) */
    env_uv_set_sender(rt->env, env_sender, rt);
    env_uv_set_sender_att(rt->env, kvm_inline_send_att, rt); /* inline read answers */
    env_set_recv(rt->env, env_recv, rt);

    if (rt->tracer && (rc = kvm_metatrace_open(rt, &rt->route_meta)) != 0) {
        open_finish(rt, rc, kvmesh_last_error());
        return;
    }
    /* The shard-authority lease follows lease_ttl_ms, clamped to 2..3 s: a dead authority's
     * shards are taken over once it expires (docs/performance.md "Failover time"). */
    uint32_t shard_lease_ms = rt->cfg.lease_ttl_ms < STORE_SHARD_LEASE_MIN   ? STORE_SHARD_LEASE_MIN
                              : rt->cfg.lease_ttl_ms > STORE_SHARD_LEASE_MAX ? STORE_SHARD_LEASE_MAX
                                                                             : rt->cfg.lease_ttl_ms;
    route_svc_opts_t ro = {
        .env = rt->env,
        .shard_lease_ms = shard_lease_ms,
        .meta = rt->route_meta ? rt->route_meta : rt->meta,
        .deployment = rt->cfg.deployment,
        .self = rt->self,
        .policy = {.mode = rt->cfg.route_mode,
                   .top_k = rt->cfg.top_k,
                   .n_shards = rt->cfg.shards,
                   .protocol_version = ROUTE_PROTOCOL_VERSION},
        .request_timeout_ms = rt->cfg.request_timeout_ms,
        .metrics = rt->metrics,
        .inline_src = kvm_get_inline_source(rt), /* inline reads (get_inline.c) */
    };
    rc = route_svc_new(&rt->route, &ro, open_route_ready, rt);
    if (rc)
        open_finish(rt, rc, kvmesh_last_error());
}

static void open_start(void *arg)
{
    kvm_rt_t *rt = arg;
    meta_opts_t mo = {.default_timeout_ms = rt->cfg.request_timeout_ms,
                      .name = rt->idhex,
                      .metrics = rt->metrics};
    int rc = meta_open(&rt->meta, rt->env, rt->cfg.metadata_url, &mo);
    if (rc) {
        open_finish(rt, rc, kvmesh_last_error());
        return;
    }
    kvm_member_register(rt, open_registered);
}

/* ---- close --------------------------------------------------------------------------------- */

static void close_pending(kvm_rt_t *rt, const char *what)
{
    pthread_mutex_lock(&rt->mu);
    rt->close_pending = what;
    pthread_mutex_unlock(&rt->mu);
}

static void rt_free(kvm_rt_t *rt);

static void *close_reaper(void *arg)
{
    rt_free(arg); /* joins the loop thread, whose close_signal started this */
    return NULL;
}

/* A close that kvm_rt_close gave up on finished: its runtime is freed off the loop thread (the
 * free joins that thread). Without a thread it stays allocated; nothing else can free it. */
static void close_reap(kvm_rt_t *rt)
{
    pthread_t th;
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0)
        return;
    if (pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0)
        (void)pthread_create(&th, &a, close_reaper, rt);
    pthread_attr_destroy(&a);
}

static void close_signal(void *arg)
{
    kvm_rt_t *rt = arg;
    if (rt->route_meta) {
        meta_close(rt->route_meta);
        rt->route_meta = NULL;
    }
    if (rt->meta) {
        meta_close(rt->meta);
        rt->meta = NULL;
    }
    pthread_mutex_lock(&rt->mu);
    rt->close_done = true;
    rt->close_pending = NULL;
    bool abandoned = rt->close_abandoned;
    pthread_cond_broadcast(&rt->open_cv);
    pthread_mutex_unlock(&rt->mu);
    if (abandoned)
        close_reap(rt);
}

static void close_left(kvm_rt_t *rt, int rc, const char *err)
{
    (void)rc, (void)err;
    close_pending(rt, "the RPC endpoint's connections and reply handles to close");
    if (rt->ep) {
        rpc_endpoint *ep = rt->ep;
        rt->ep = NULL;
        rpc_local_unlink(rt); /* no new connections; open ones close with the endpoint */
        rpc_endpoint_close(ep, close_signal, rt);
    } else {
        close_signal(rt);
    }
}

static void close_start(void *arg)
{
    kvm_rt_t *rt = arg;
    kvm_member_stop(rt);
    kvm_owner_stop(rt);
    env_timer_cancel(rt->env, rt->hit_timer);
    rt->hit_timer = 0;
    /* Reservations waiting for space fail now, while their reply handles can still answer. */
    kvm_owner_fail_waiters(rt);
    kvm_place_waiters_close(rt); /* puts waiting for storage members fail (ECLOSED) */
    kvm_quota_close(rt);
    kvm_cold_close(rt); /* before the route service its callbacks use */
    if (rt->route) {
        route_svc_t *r = rt->route;
        rt->route = NULL;
        route_svc_free(r);
    }
    kvm_slot_batch_close(rt); /* a COMMIT / RELEASE group the route service left open */
    env_uv_set_sender(rt->env, NULL, NULL);
    env_uv_set_sender_att(rt->env, NULL, NULL);
    close_pending(rt, "the member record's delete (a metadata call)");
    if (rt->meta && rt->lease)
        kvm_member_leave(rt, close_left);
    else
        close_left(rt, 0, "");
}

static void admin_health(void *ctx, struct obs_health *out)
{
    kvm_rt_t *rt = ctx;
    int st = atomic_load(&rt->a_state);
    out->live = !atomic_load(&rt->closing);
    out->ready = out->live && st == KVM_MS_ACTIVE;
    if (!out->ready)
        obs_health_reason(out, "runtime is %s", kvm_member_state_name((enum kvm_member_state)st));
    if (atomic_load(&rt->a_members) == 0) {
        out->ready = false;
        obs_health_reason(out, "no membership snapshot yet");
    }
}

static void admin_stats(void *ctx, struct obs_runtime_stats *out)
{
    kvm_rt_t *rt = ctx;
    snprintf(out->runtime_id, sizeof(out->runtime_id), "%s", rt->idhex);
    out->uptime_seconds = env_clock_since_ms(rt->start_ms) / 1000;
    out->live_members = (uint32_t)atomic_load(&rt->a_members);
    out->dram_capacity_bytes = atomic_load(&rt->a_capacity);
    out->dram_used_bytes = atomic_load(&rt->a_used);
    struct kvm_repair_stats rs;
    kvm_repair_stats(rt, &rs);
    out->rereplication =
        (struct obs_rereplication_stats){.under_replicated = rs.under_replicated,
                                         .backlog = rs.under_replicated + rs.pending_owners,
                                         .pending_owners = rs.pending_owners,
                                         .copies_in_flight = rs.copies_in_flight,
                                         .lost = rs.lost,
                                         .found = rs.found,
                                         .repaired = rs.repaired,
                                         .superseded = rs.superseded,
                                         .failed = rs.failed,
                                         .bytes_copied = rs.bytes_copied,
                                         .passes = rs.passes,
                                         .paused = rs.paused};
    _Static_assert(KVM_STORE_TENANT_POLICIES_MAX <= OBS_STATS_QUOTA_TENANTS_MAX,
                   "/stats lists every tenant policy");
    for (uint32_t i = 0; i < rt->cfg.n_tenant_policies && i < OBS_STATS_QUOTA_TENANTS_MAX; i++)
        snprintf(out->quota_tenants[out->n_quota_tenants++], sizeof(out->quota_tenants[0]), "%s",
                 rt->cfg.tenant_policies[i].tenant);
    struct kvm_rt_stats st;
    memset(&st, 0, sizeof(st));
    if (!atomic_load(&rt->closing) && kvm_store_stats(rt, &st) == 0) { /* through the loop */
        out->route_entries = st.route_entries;
        out->route_tombstones = st.route_tombs;
        out->tombstones_purged = st.tombs_purged;
        out->tombstones_purge_unknown = st.tombs_purge_unknown;
        out->reservations_held = st.reservations_held;
        out->reservations_released = st.reservations_expired;
        out->notes_stale = st.notes_stale;
    }
}

/* Shards x route-capable members above which /cluster leaves out the authority counts. */
#define ADMIN_CLUSTER_WRH_MAX (1u << 24)

/* The cold device view's per-owner totals, summed on the loop (the view is [loop] state). */
struct cold_sums {
    kvm_rt_t *rt;
    kvm_cold_owner_sum_t s[KVM_COLD_VIEW_OWNERS_MAX];
    int n; /* -1: no device view here */
};

static void cold_sums_on_loop(void *arg)
{
    struct cold_sums *cs = arg;
    cs->n = kvm_cold_owner_sums(cs->rt, cs->s, KVM_COLD_VIEW_OWNERS_MAX);
}

/* ,"cold":{...} of member `id` (null when the view names no device of it, or there is none). */
static void admin_member_cold(struct obs_buf *b, const struct cold_sums *cs, const char *id)
{
    kvm_id128_t owner;
    const kvm_cold_owner_sum_t *s = NULL;
    for (int i = 0; i < cs->n && kvm_id128_parse(id, &owner) == 0; i++)
        if (kvm_id128_equal(&cs->s[i].owner, &owner)) {
            s = &cs->s[i];
            break;
        }
    if (!s) {
        obs_buf_puts(b, ",\"cold\":null");
        return;
    }
    obs_buf_printf(b,
                   ",\"cold\":{\"devices\":%u,\"capacity_bytes\":%" PRIu64
                   ",\"used_bytes\":%" PRIu64 ",\"reserved_bytes\":%" PRIu64 ",\"health\":\"%s\"}",
                   s->devices, s->capacity, s->used, s->reserved,
                   s->health ? s->health : "unknown");
}

/* GET /cluster (admin HTTP thread): the membership snapshot, copied through the loop like
 * kvmesh_members (bounded by request_timeout_ms), and per member the shards whose designated
 * route authority set (the WRH top-k of the route-capable members, as route_set_members gives
 * the route service) it is the first of (primary) or in (authority), and its cold devices as
 * this runtime's device view sums them ("cold", null without one). */
static int admin_cluster(void *ctx, struct obs_buf *b)
{
    kvm_rt_t *rt = ctx;
    kvmesh_member_info_t *m = calloc(STORE_MAX_MEMBERS, sizeof(*m));
    uint32_t *prim = calloc(STORE_MAX_MEMBERS, sizeof(*prim));
    uint32_t *auth = calloc(STORE_MAX_MEMBERS, sizeof(*auth));
    wrh_candidate_t *c = calloc(STORE_MAX_MEMBERS, sizeof(*c));
    kvm_op_t *op = m && prim && auth && c ? kvm_op_new(rt, KVM_OP_MEMBERS, 0) : NULL;
    int rc = KVMESH_ENOMEM;
    size_t n = 0;
    if (op) {
        op->members = m;
        op->members_cap = STORE_MAX_MEMBERS;
        rc = kvm_op_run(op);
        n = op->members_n < STORE_MAX_MEMBERS ? op->members_n : STORE_MAX_MEMBERS;
        kvm_op_unref(op);
    } else {
        kvm_errf(rc, "out of memory for the cluster view");
    }
    if (rc)
        goto out;
    struct cold_sums *cs = calloc(1, sizeof(*cs));
    if (!cs) {
        rc = kvm_errf(KVMESH_ENOMEM, "out of memory for the cluster view");
        goto out;
    }
    cs->rt = rt;
    cs->n = -1;
    if (env_uv_thread_call(rt->thread, cold_sums_on_loop, cs) != 0)
        cs->n = -1; /* (closing: no view) */
    size_t capable = 0;
    for (size_t i = 0; i < n; i++) {
        kvm_id128_t id;
        bool ok = kvm_id128_parse(m[i].id, &id) == 0 && strcmp(m[i].state, "active") == 0 &&
                  m[i].capacity_bytes > 0 && m[i].weight > 0;
        c[i].id_hash = ok ? wrh_id_hash(&id) : 0;
        c[i].weight = ok ? m[i].weight : 0;
        capable += ok;
    }
    bool counted = (uint64_t)rt->cfg.shards * capable <= ADMIN_CLUSTER_WRH_MAX;
    for (uint32_t s = 0; counted && capable && s < rt->cfg.shards; s++) {
        uint32_t idx[WRH_MAX_K];
        size_t got = 0;
        if (wrh_top_k(c, n, wrh_shard_key(s), rt->cfg.top_k, idx, &got) != 0)
            break;
        for (size_t i = 0; i < got; i++) {
            auth[idx[i]]++;
            if (i == 0)
                prim[idx[i]]++;
        }
    }
    obs_buf_printf(
        b,
        "{\"schema\":1,\"self\":\"%s\",\"route_mode\":\"%s\",\"shards\":%u,"
        "\"top_k\":%u,\"authority_counts\":%s,\"cold_view\":%s,\"members\":[",
        rt->idhex,
        rt->cfg.route_mode == ROUTE_MODE_METADATA_ONLY ? "metadata_only" : "embedded_wrh",
        rt->cfg.shards, rt->cfg.top_k, counted ? "true" : "false", cs->n >= 0 ? "true" : "false");
    for (size_t i = 0; i < n; i++) {
        obs_buf_printf(b, "%s{\"id\":", i ? "," : "");
        obs_buf_json_str(b, m[i].id, strlen(m[i].id));
        obs_buf_printf(b, ",\"self\":%s,\"epoch\":%" PRIu64 ",\"address\":",
                       strcmp(m[i].id, rt->idhex) == 0 ? "true" : "false", m[i].epoch);
        obs_buf_json_str(b, m[i].address, strnlen(m[i].address, sizeof(m[i].address)));
        /* rpc_local = unix: the member's unix socket and host identity, null when unpublished */
        obs_buf_puts(b, ",\"local_rpc\":");
        if (m[i].local_rpc[0])
            obs_buf_json_str(b, m[i].local_rpc, strnlen(m[i].local_rpc, sizeof(m[i].local_rpc)));
        else
            obs_buf_puts(b, "null");
        obs_buf_puts(b, ",\"host\":");
        if (m[i].host[0])
            obs_buf_json_str(b, m[i].host, strnlen(m[i].host, sizeof(m[i].host)));
        else
            obs_buf_puts(b, "null");
        obs_buf_puts(b, ",\"state\":");
        obs_buf_json_str(b, m[i].state, strnlen(m[i].state, sizeof(m[i].state)));
        obs_buf_printf(b,
                       ",\"weight\":%g,\"capacity_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                       ",\"shards_primary\":%u,\"shards_authority\":%u",
                       m[i].weight, m[i].capacity_bytes, m[i].used_bytes, prim[i], auth[i]);
        admin_member_cold(b, cs, m[i].id);
        obs_buf_puts(b, "}");
    }
    obs_buf_puts(b, "]}");
    free(cs);
out:
    free(m);
    free(prim);
    free(auth);
    free(c);
    return rc;
}

/* ---- tracing ------------------------------------------------------------------------------- */

/* One tracer per runtime, only when sampling or an exporter is configured: a NULL tracer means
 * tracing is off and the request paths start no span at all. */
static int tracer_start(kvm_rt_t *rt)
{
    const struct kvm_store_config *c = &rt->cfg;
    if (c->trace_sample_rate <= 0 && !c->trace_capture_dir[0] && !c->trace_otlp_url[0])
        return 0;
    char name[64];
    snprintf(name, sizeof(name), "trace-%s.jsonl", rt->idhex);
    struct obs_tracer_config tc = {
        .service = c->trace_service_name[0] ? c->trace_service_name : "kvmesh",
        .sample_rate = c->trace_sample_rate,
        .capture_dir = c->trace_capture_dir[0] ? c->trace_capture_dir : NULL,
        .capture_name = c->trace_capture_dir[0] ? name : NULL,
        .otlp_url = c->trace_otlp_url[0] ? c->trace_otlp_url : NULL,
        .metrics = rt->metrics,
    };
    int rc = obs_tracer_create(&tc, &rt->tracer);
    if (rc)
        return kvm_errf(rc, "tracing: %s", kvmesh_last_error());
    return 0;
}

/* The endpoint's RPC figures into the kvmesh_rpc_* families (rpc_metrics.h); [loop]. */
static void rpc_export_on_loop(void *arg)
{
    kvm_rt_t *rt = arg;
    if (!rt->ep)
        return; /* closing */
    struct rpc_stats now;
    rpc_get_stats(rt->ep, &now);
    kvm_rpc_metrics_export(rt->metrics, &now, &rt->rpc_exported);
}

/* Before /metrics renders (HTTP thread): the figures kept on the loop, exported through it. */
static void admin_before_scrape(void *ctx)
{
    kvm_rt_t *rt = ctx;
    if (!atomic_load(&rt->closing))
        (void)env_uv_thread_call(rt->thread, rpc_export_on_loop, rt); /* closing: skipped */
}

static int admin_tenant_quota(void *ctx, const char *tenant, char *buf, size_t cap)
{
    return kvm_quota_render(ctx, tenant, buf, cap);
}

static int admin_start(kvm_rt_t *rt)
{
    char host[128];
    int port = 0;
    int rc = split_hostport(rt->cfg.admin_listen, host, sizeof(host), &port);
    if (rc)
        return kvm_errf(KVMESH_ECONFIG, "admin_listen: '%s' is not host:port",
                        rt->cfg.admin_listen);
    struct obs_http_config hc = {
        .bind_addr = host,
        .port = (uint16_t)port,
        .secret = rt->cfg.secret,
        .provider = {.ctx = rt,
                     .health = admin_health,
                     .runtime_stats = admin_stats,
                     .before_scrape = admin_before_scrape,
                     .cluster_json = admin_cluster,
                     .tenant_quota = admin_tenant_quota},
        .tracer = rt->tracer,
        .metrics = rt->metrics,
    };
    return obs_http_start(&hc, &rt->admin);
}

uint16_t kvm_rt_admin_port(kvm_rt_t *rt)
{
    return rt->admin ? obs_http_port(rt->admin) : 0;
}

enum wq_step { WQ_INIT, WQ_CLOSE, WQ_DESTROY };

/* The runtime's wait queues (store.h), all at once. WQ_INIT: 0, or KVMESH_ENOMEM with none left
 * initialized. */
static int rt_waitqs(kvm_rt_t *rt, enum wq_step step)
{
    struct kvm_waitq *qs[] = {&rt->wq_room, &rt->wq_reg, &rt->wq_slots};
    for (size_t i = 0; i < KVM_ARRAY_SIZE(qs); i++) {
        if (step == WQ_CLOSE) {
            kvm_waitq_close(qs[i]);
        } else if (step == WQ_DESTROY) {
            kvm_waitq_destroy(qs[i]);
        } else if (kvm_waitq_init(qs[i]) != 0) {
            while (i--)
                kvm_waitq_destroy(qs[i]);
            return KVMESH_ENOMEM;
        }
    }
    return 0;
}

static void rt_free(kvm_rt_t *rt)
{
    obs_http_stop(rt->admin);
    rt->admin = NULL;
    if (rt->thread)
        env_uv_thread_stop(rt->thread);
    kvm_repair_free(rt);    /* after the loop: it notes owners until it stops */
    while (rt->self_msgs) { /* deferred self-messages the stopped loop dropped */
        struct self_msg *sm = rt->self_msgs;
        rt->self_msgs = sm->next;
        free(sm);
    }
    while (rt->refresh_waiters) { /* (their waiters time out or were woken at close) */
        struct refresh_waiter *w = rt->refresh_waiters;
        rt->refresh_waiters = w->next;
        waiter_wake(w);
    }
    while (rt->held_head) { /* messages held for a refresh the stopped loop never finished */
        struct held_msg *h = rt->held_head;
        rt->held_head = h->next;
        free(h);
    }
    for (size_t i = 0; i < rt->n_seg_cache; i++)
        tp_close_segment(rt->seg_cache[i].h);
    free(rt->seg_cache);
    for (size_t i = 0; i < rt->n_seg_retired; i++)
        tp_close_segment(rt->seg_retired[i]);
    free(rt->seg_retired);
    if (rt->tp)
        tp_engine_free(rt->tp);
    kvm_slot_batch_free(rt); /* kept between groups; the close (when it ran) freed it already */
    /* the staging buffers of puts at the primary, kept for reuse */
    kvm_put_primary_fini(rt);
    kvm_get_inline_fini(rt);
    kvm_owner_fini(rt);
    kvm_fair_close(rt);
    kvm_place_close(rt);
    KVM_ASSERT(rt->place_waiters == NULL); /* failed at close_start (kvm_place_waiters_close) */
    if (rt->reg)
        seg_registry_free(rt->reg);
    for (size_t i = 0; i < rt->n_interned; i++)
        free(rt->interned[i]);
    free(rt->interned);
    free(rt->regs);
    free(rt->nodes);
    free(rt->members);
    free(rt->next_members);
    free(rt->hitbufs);
    kvm_hint_fini(rt);
    kvm_cas_lanes_free(rt);
    kvm_op_spare_free(rt);          /* after the loop: no op ends any more */
    kvm_ictx_spare_free(rt);        /* (contexts freed from here on are freed outright) */
    kvm_rsv_spare_free(rt);         /* (likewise) */
    obs_tracer_destroy(rt->tracer); /* after the loop: no span is in progress */
    rt->tracer = NULL;
    obs_registry_free(rt->metrics); /* last: every layer that counted into it is gone */
    rt->metrics = NULL;
    pthread_mutex_destroy(&rt->mu);
    pthread_rwlock_destroy(&rt->dp_rw);
    pthread_cond_destroy(&rt->open_cv);
    rt_waitqs(rt, WQ_DESTROY);
    free(rt);
}

uint32_t kvm_rt_close_bound_ms(const struct kvm_store_config *cfg)
{
    uint64_t ms = 2ull * cfg->request_timeout_ms + STORE_CLOSE_SLACK_MS;
    return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

/* Waits for close_signal up to the close bound. Returns 0, or KVMESH_ETIMEDOUT with the runtime
 * handed to close_signal (close_abandoned). */
static int close_wait(kvm_rt_t *rt)
{
    uint32_t bound = kvm_rt_close_bound_ms(&rt->cfg);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += bound / 1000;
    dl.tv_nsec += (long)(bound % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&rt->mu);
    int w = 0;
    while (!rt->close_done && w != ETIMEDOUT)
        w = pthread_cond_timedwait(&rt->open_cv, &rt->mu, &dl);
    bool done = rt->close_done;
    const char *pending = rt->close_pending;
    rt->close_abandoned = !done;
    pthread_mutex_unlock(&rt->mu);
    if (done)
        return 0;
    /* rt belongs to close_signal now: only the copies above are used */
    char err[256];
    snprintf(err, sizeof(err),
             "close: the runtime's loop did not finish closing within %u ms (2 x "
             "request_timeout_ms + %u); still waiting for %s; it is freed when the loop finishes",
             bound, STORE_CLOSE_SLACK_MS, pending);
    fprintf(stderr, "kvmesh: %s\n", err);
    return kvm_errf(KVMESH_ETIMEDOUT, "%s", err);
}

int kvm_rt_close(kvm_rt_t *rt, bool drain_first)
{
    (void)drain_first;
    if (!rt)
        return 0;
    atomic_store(&rt->closing, true);
    rt_waitqs(rt, WQ_CLOSE); /* waiting application threads return KVMESH_ECLOSED */
    kvm_repair_stop(rt);     /* its in-flight ops finish or fail with ECLOSED while the loop runs */
    close_pending(rt, "the loop to start the close (a callback still runs on it)");
    /* posted, not called: a loop blocked in a callback must not block the close beyond its bound */
    if (rt->thread && env_uv_thread_post(rt->thread, close_start, rt) == 0) {
        int rc = close_wait(rt);
        if (rc)
            return rc;
    }
    rt_free(rt);
    return 0;
}

static int rt_open(kvm_rt_t **out, const struct kvm_store_config *cfg, struct kvm_handoff *h);

int kvm_rt_open(kvm_rt_t **out, const struct kvm_store_config *cfg)
{
    return rt_open(out, cfg, NULL);
}

int kvm_rt_open_adopt(kvm_rt_t **out, const struct kvm_store_config *cfg, struct kvm_handoff *h)
{
    if (cfg->runtime_id[0] == 0)
        return kvm_errf(KVMESH_ECONFIG, "a hot-upgrade successor needs runtime_id set to its "
                                        "predecessor's");
    return rt_open(out, cfg, h);
}

static int rt_open(kvm_rt_t **out, const struct kvm_store_config *cfg, struct kvm_handoff *h)
{
    *out = NULL;
    kvm_rt_t *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return KVMESH_ENOMEM;
    rt->cfg = *cfg;
    rt->start_ms = env_clock_mono_ms();
    rt->ops_run = kvm_ops_run; /* rt_op.c's hand-off runs every op through it */
    rt->after_refresh = held_after_refresh;
    rt->on_snapshot = kvm_place_waiters_wake;
    pthread_mutex_init(&rt->mu, NULL);
    pthread_rwlock_init(&rt->dp_rw, NULL);
    pthread_condattr_t ca; /* close_wait's deadline is monotonic */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rt->open_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rt_waitqs(rt, WQ_INIT) != 0) {
        pthread_cond_destroy(&rt->open_cv);
        pthread_rwlock_destroy(&rt->dp_rw);
        pthread_mutex_destroy(&rt->mu);
        free(rt);
        return KVMESH_ENOMEM;
    }
    rt->members = calloc(STORE_MAX_MEMBERS, sizeof(*rt->members));
    rt->next_members = calloc(STORE_MAX_MEMBERS, sizeof(*rt->next_members));
    int rc = 0;
    if (!rt->members || !rt->next_members) {
        rc = KVMESH_ENOMEM;
        goto fail;
    }
    if (cfg->runtime_id[0]) {
        if ((rc = kvm_id128_parse(cfg->runtime_id, &rt->self.id)) != 0) {
            rc = kvm_errf(KVMESH_ECONFIG, "runtime_id '%s' is not 32 hex digits", cfg->runtime_id);
            goto fail;
        }
    } else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(rt->self.id.b, 1, sizeof(rt->self.id.b), f) != sizeof(rt->self.id.b)) {
            if (f)
                fclose(f);
            rc = kvm_errf(KVMESH_EIO, "cannot read /dev/urandom for a runtime id");
            goto fail;
        }
        fclose(f);
        rt->self.id.b[0] |= 1; /* never nil */
    }
    kvm_id128_fmt(&rt->self.id, rt->idhex);
    if (h && !kvm_id128_equal(&h->id, &rt->self.id)) {
        rc = kvm_errf(KVMESH_ECONFIG, "the handed-over memory belongs to another runtime id");
        goto fail;
    }
    if ((rc = obs_registry_new(&rt->metrics)) != 0 || (rc = tracer_start(rt)) != 0)
        goto fail;

    /* Segments and the transport engine are thread-safe; set them up before the loop. */
    if ((rc = seg_registry_new(&rt->reg)) == 0)
        seg_registry_set_prefault(rt->reg, cfg->prefault_segments);
    if (rc != 0 || (rc = h ? kvm_owner_adopt(rt, h) : kvm_owner_init(rt)) != 0 ||
        (rc = kvm_fair_open(rt)) != 0 || (rc = kvm_place_open(rt)) != 0)
        goto fail;
    char host[128];
    int port;
    if ((rc = split_hostport(cfg->listen, host, sizeof(host), &port)) != 0)
        goto fail;
    struct tp_config tc = {
        .kind = cfg->transport,
        .listen_host = host,
        .no_server = rt->n_segs == 0,
        .conns_per_peer = cfg->io_threads,
        .metrics = rt->metrics,
        .idle_timeout_ms = cfg->idle_timeout_ms,
    };
    if ((rc = tp_engine_new(&tc, rt->reg, &rt->tp)) != 0)
        goto fail;
    if ((rc = kvm_repair_new(rt)) != 0 || (rc = env_uv_thread_start(&rt->thread, 0)) != 0)
        goto fail;
    rt->env = env_uv_thread_env(rt->thread);
    if ((rc = env_uv_thread_call(rt->thread, open_start, rt)) != 0)
        goto fail;
    pthread_mutex_lock(&rt->mu);
    while (!rt->open_done)
        pthread_cond_wait(&rt->open_cv, &rt->mu);
    rc = rt->open_rc;
    pthread_mutex_unlock(&rt->mu);
    if (rc) {
        char err[512];
        snprintf(err, sizeof(err), "%s", rt->open_err);
        kvm_rt_close(rt, false);
        return kvm_errf(rc, "kvmesh_open: %s", err);
    }
    if (cfg->admin_listen[0] && (rc = admin_start(rt)) != 0)
        goto fail;
    if ((rc = kvm_repair_start(rt)) != 0)
        goto fail;
    *out = rt;
    return 0;
fail:;
    char err[512];
    snprintf(err, sizeof(err), "%s", kvmesh_last_error());
    kvm_rt_close(rt, false);
    return kvm_errf(rc, "kvmesh_open: %s", err);
}
