/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_etcd.c — the etcd metadata backend: meta calls as HTTP/1.1 POSTs to etcd's v3 JSON
 * gateway, driven by a libcurl multi handle inside the env's libuv loop.
 *
 * Owns: the curl multi handle and its uv_poll/uv_timer integration (CURLMOPT_SOCKETFUNCTION,
 * CURLMOPT_TIMERFUNCTION), the endpoint list and the preferred endpoint, the bounded set of
 * requests in flight and the bounded FIFO of requests waiting for a slot, and the
 * retry/failover policy. JSON encoding and decoding live in etcd_json.c (pure, fuzzed).
 *
 * Invariants:
 *   - every callback (curl socket/timer, uv poll/timer, env timer) runs on the loop thread;
 *     user code (meta_call_complete) is never reached from inside a curl callback;
 *   - at most ETCD_MAX_INFLIGHT requests are active (sending or in backoff); at most
 *     ETCD_MAX_QUEUED wait; more submissions fail with KVMESH_EAGAIN;
 *   - each request completes its meta_call exactly once (finish()), and is unlinked and
 *     released before the user callback runs, so the callback may submit or close freely;
 *   - retries: a request is retried on the next listed member only when that is safe: reads,
 *     lease grant (an orphaned lease just expires), keepalive and timetolive always; txn and
 *     revoke only when the request provably never reached a server (connect/resolve failure,
 *     or "no leader" refusal). Otherwise the outcome is unknown: KVMESH_EINDETERMINATE. Such
 *     requests use a connection of their own, closed after the reply, so that libcurl never
 *     re-sends them silently (it does so only on reused connections).
 *     Attempts are bounded (ETCD_MAX_ROUNDS passes over the members) and by the call deadline;
 *     errors name every endpoint tried and why it failed;
 *   - the backend struct outlives meta_close() until libuv has closed its handles.
 *
 * Request life cycle:
 *
 *     submit --> QUEUED --(slot free)--> SENDING --(reply)--> done (complete, free)
 *        \__________________________/    ^    |
 *         (slot free at submit)          |    +--(retry-safe failure)--> BACKOFF (after a
 *                                        +--------------(timer)-----------+  full round)
 *                                        +--(retry-safe failure, next member right away)
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "core/util.h"
#include "meta/etcd_json.h"
#include "meta/meta_impl.h"

#define ETCD_MAX_INFLIGHT       64   /* concurrent HTTP requests (and pooled connections) */
#define ETCD_MAX_QUEUED         4096 /* requests waiting for an in-flight slot */
#define ETCD_CONNECT_TIMEOUT_MS 1000 /* per connection attempt, so a dead member fails over */
#define ETCD_RETRY_ATTEMPT_MS   2000 /* per-attempt cap of retry-safe requests (many members) */
#define ETCD_MAX_ROUNDS         3    /* passes over the member list per request */
#define ETCD_BACKOFF_MIN_MS     25   /* pause after a full round of failures, doubling */
#define ETCD_BACKOFF_MAX_MS     400
#define ETCD_DEADLINE_SLACK_MS                                                                     \
    50                     /* attempts of the last resort outlive the deadline by this,            \
                              so the dispatcher reports ETIMEDOUT first */
#define ETCD_TRIED_MAX 480 /* bytes of the "endpoints tried" text */

enum etcd_req_state { REQ_NEW, REQ_QUEUED, REQ_SENDING, REQ_BACKOFF, REQ_DONE };

struct etcd_be;

typedef struct etcd_req {
    struct etcd_be *b;
    meta_call_t *call;
    enum etcd_req_state state;
    enum etcd_resp_kind kind;
    const char *path;
    char *body;
    size_t body_len;
    bool retry_safe;
    etcd_txn_shape_t shape;
    CURL *easy;
    char *resp;
    size_t resp_len, resp_cap;
    bool resp_too_big;
    bool sent_any; /* bytes of this attempt's request reached a socket (any connection) */
    char errbuf[CURL_ERROR_SIZE];
    unsigned attempt, max_attempts;
    size_t start_ep, ep;
    uint32_t tried_mask;
    char tried[ETCD_TRIED_MAX];
    env_timer_id backoff;
    struct etcd_req *next, *prev; /* b->active or b->queue */
} etcd_req_t;

typedef struct etcd_sock {
    uv_poll_t poll;
    curl_socket_t fd;
    struct etcd_be *b;
    struct etcd_sock *next, *prev;
} etcd_sock_t;

/* An endpoint's "host:port" and "http://host:port", sized from etcd_endpoint_t.host (whatever it
 * holds) and the longest port, so formatting one can never truncate. */
#define ETCD_PORT_TEXT_MAX sizeof(":65535")
#define ETCD_NAME_MAX      (sizeof(((etcd_endpoint_t *)0)->host) - 1 + ETCD_PORT_TEXT_MAX)
#define ETCD_BASE_MAX      (sizeof("http://") - 1 + ETCD_NAME_MAX)

typedef struct etcd_be {
    meta_t *m; /* NULL once closed */
    env_t *env;
    uv_loop_t *loop;
    etcd_url_t url;
    char base[ETCD_MAX_ENDPOINTS][ETCD_BASE_MAX]; /* "http://host:port" */
    char name[ETCD_MAX_ENDPOINTS][ETCD_NAME_MAX]; /* "host:port" */
    size_t cur;                                   /* preferred member */
    CURLM *multi;
    uv_timer_t timer;
    struct curl_slist *headers;
    etcd_req_t *active; /* SENDING or BACKOFF */
    size_t n_active;
    etcd_req_t *queue_head, *queue_tail;
    size_t n_queued;
    etcd_sock_t *socks;
    int open_handles; /* uv handles whose close callback is pending or not yet closed */
    bool closing;
    bool pumping;
} etcd_be_t;

/* ---- request state ------------------------------------------------------------------------ */

static void req_set_state(etcd_req_t *r, enum etcd_req_state s)
{
    switch (s) {
    case REQ_QUEUED:
        KVM_ASSERT(r->state == REQ_NEW);
        break;
    case REQ_SENDING:
        KVM_ASSERT(r->state == REQ_NEW || r->state == REQ_QUEUED || r->state == REQ_SENDING ||
                   r->state == REQ_BACKOFF);
        break;
    case REQ_BACKOFF:
        KVM_ASSERT(r->state == REQ_SENDING);
        break;
    case REQ_DONE:
        KVM_ASSERT(r->state != REQ_DONE);
        break;
    default:
        KVM_ASSERT(!"illegal request state");
    }
    r->state = s;
}

static void list_unlink(etcd_req_t **head, etcd_req_t *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

static void list_push(etcd_req_t **head, etcd_req_t *r)
{
    r->prev = NULL;
    r->next = *head;
    if (*head)
        (*head)->prev = r;
    *head = r;
}

static void start_attempt(etcd_req_t *r);

static void maybe_free_backend(etcd_be_t *b)
{
    if (b->closing && b->open_handles == 0)
        free(b);
}

static void req_release(etcd_req_t *r)
{
    if (r->easy)
        curl_easy_cleanup(r->easy);
    free(r->body);
    free(r->resp);
    free(r);
}

static void pump_queue(etcd_be_t *b);

/* Unlinks the request, completes its call with res (or rc+msg when res is NULL), frees it. */
static void finish(etcd_req_t *r, const meta_result_t *res, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finish(etcd_req_t *r, const meta_result_t *res, int rc, const char *fmt, ...)
{
    etcd_be_t *b = r->b;
    switch (r->state) {
    case REQ_QUEUED:
        /* only reached on close: the queue is drained in pump_queue/close */
        break;
    case REQ_SENDING:
    case REQ_BACKOFF:
        list_unlink(&b->active, r);
        b->n_active--;
        break;
    default:
        break;
    }
    if (r->backoff) {
        env_timer_cancel(b->env, r->backoff);
        r->backoff = 0;
    }
    req_set_state(r, REQ_DONE);
    meta_call_t *call = r->call;
    r->call = NULL;
    if (res) {
        meta_call_complete(call, res);
    } else {
        char msg[ETCD_ERRMSG_MAX + ETCD_TRIED_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        meta_call_fail(call, rc, "%s", msg);
    }
    req_release(r);
    if (!b->closing)
        pump_queue(b);
}

static void pump_queue(etcd_be_t *b)
{
    if (b->pumping)
        return;
    b->pumping = true;
    while (!b->closing && b->n_active < ETCD_MAX_INFLIGHT && b->queue_head) {
        etcd_req_t *r = b->queue_head;
        b->queue_head = r->next;
        if (b->queue_head)
            b->queue_head->prev = NULL;
        else
            b->queue_tail = NULL;
        r->next = r->prev = NULL;
        b->n_queued--;
        list_push(&b->active, r);
        b->n_active++;
        r->start_ep = r->ep = b->cur;
        req_set_state(r, REQ_SENDING);
        start_attempt(r);
    }
    b->pumping = false;
}

static void note_tried(etcd_req_t *r, const char *why)
{
    uint32_t bit = 1u << r->ep;
    if (r->tried_mask & bit)
        return;
    r->tried_mask |= bit;
    size_t used = strlen(r->tried);
    if (used + 8 >= sizeof(r->tried))
        return;
    snprintf(r->tried + used, sizeof(r->tried) - used, "%s%s (%.120s)", used ? "; " : "",
             r->b->name[r->ep], why);
}

static const char *kind_name(enum etcd_resp_kind k)
{
    switch (k) {
    case ETCD_RESP_GET:
        return "get";
    case ETCD_RESP_RANGE:
        return "range";
    case ETCD_RESP_TXN:
        return "txn";
    case ETCD_RESP_LEASE_GRANT:
        return "lease grant";
    case ETCD_RESP_LEASE_KEEPALIVE:
        return "lease keepalive";
    case ETCD_RESP_LEASE_REVOKE:
        return "lease revoke";
    case ETCD_RESP_LEASE_TTL:
        return "lease timetolive";
    }
    return "?";
}

/* The member of this attempt failed: later requests start at the next one. */
static void demote_member(etcd_req_t *r)
{
    etcd_be_t *b = r->b;
    if (b->cur == r->ep)
        b->cur = (r->ep + 1) % b->url.n_eps;
}

static void backoff_cb(void *arg)
{
    etcd_req_t *r = arg;
    r->backoff = 0;
    req_set_state(r, REQ_SENDING);
    start_attempt(r);
}

/* A failed attempt that is safe to repeat: move to the next member, or give up. */
static void retry_or_fail(etcd_req_t *r, int rc)
{
    etcd_be_t *b = r->b;
    size_t n = b->url.n_eps;
    demote_member(r);
    r->attempt++;
    if (r->attempt >= r->max_attempts) {
        finish(r, NULL, rc, "etcd %s failed on every member (%u attempts); tried: %s",
               kind_name(r->kind), r->attempt, r->tried);
        return;
    }
    uint64_t now = env_now_ns(b->env);
    if (now >= r->call->deadline_ns || meta_call_abandoned(r->call)) {
        finish(r, NULL, KVMESH_ETIMEDOUT, "etcd %s: deadline passed; tried: %s", kind_name(r->kind),
               r->tried);
        return;
    }
    r->ep = (r->start_ep + r->attempt) % n;
    if (r->attempt % n != 0) {
        start_attempt(r);
        return;
    }
    unsigned round = r->attempt / (unsigned)n; /* >= 1 */
    uint64_t ms = ETCD_BACKOFF_MIN_MS << (round - 1 < 5 ? round - 1 : 5);
    if (ms > ETCD_BACKOFF_MAX_MS)
        ms = ETCD_BACKOFF_MAX_MS;
    uint64_t left_ms = (r->call->deadline_ns - now) / 1000000u;
    if (ms >= left_ms) {
        finish(r, NULL, rc,
               "etcd %s failed on every member and the deadline allows no "
               "further round; tried: %s",
               kind_name(r->kind), r->tried);
        return;
    }
    req_set_state(r, REQ_BACKOFF);
    r->backoff = env_timer_start(b->env, ms * 1000000u, backoff_cb, r);
    if (r->backoff == 0)
        finish(r, NULL, KVMESH_ENOMEM, "etcd %s: cannot arm the retry timer", kind_name(r->kind));
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
    etcd_req_t *r = arg;
    size_t n = size * nmemb;
    if (n > ETCD_RESPONSE_MAX - r->resp_len) {
        r->resp_too_big = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (r->resp_len + n + 1 > r->resp_cap) {
        size_t cap = r->resp_cap ? r->resp_cap : 4096;
        while (cap < r->resp_len + n + 1)
            cap *= 2;
        char *p = realloc(r->resp, cap);
        if (!p)
            return 0;
        r->resp = p;
        r->resp_cap = cap;
    }
    memcpy(r->resp + r->resp_len, ptr, n);
    r->resp_len += n;
    r->resp[r->resp_len] = '\0';
    return n;
}

/* curl reports every byte it writes to a socket here (CURLOPT_VERBOSE routes it to us instead of
 * stderr). This is how a request is known to be unsent: curl silently re-sends a request whose
 * reused connection died, so the final error code alone (e.g. connection refused on the re-send)
 * does not prove that no earlier copy reached the server. */
static int debug_cb(CURL *e, curl_infotype type, char *data, size_t size, void *arg)
{
    etcd_req_t *r = arg;
    if (type == CURLINFO_HEADER_OUT || type == CURLINFO_DATA_OUT)
        r->sent_any = true;
    return 0;
}

/* Sockets of requests that are not retry-safe: close with RST (SO_LINGER 0) once done, after
 * the whole reply was read. */
static int no_linger_cb(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    (void)arg;
    if (purpose == CURLSOCKTYPE_IPCXN) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    return CURL_SOCKOPT_OK;
}

static void start_attempt(etcd_req_t *r)
{
    etcd_be_t *b = r->b;
    KVM_ASSERT(r->state == REQ_SENDING);
    if (meta_call_abandoned(r->call)) {
        finish(r, NULL, KVMESH_ETIMEDOUT, "etcd %s abandoned before it was sent",
               kind_name(r->kind));
        return;
    }
    uint64_t now = env_now_ns(b->env);
    if (now >= r->call->deadline_ns) {
        finish(r, NULL, KVMESH_ETIMEDOUT, "etcd %s: deadline passed%s%s", kind_name(r->kind),
               r->tried[0] ? "; tried: " : "", r->tried);
        return;
    }
    long left_ms = (long)((r->call->deadline_ns - now + 999999u) / 1000000u);
    long attempt_ms = left_ms + ETCD_DEADLINE_SLACK_MS;
    if (r->retry_safe && b->url.n_eps > 1 && attempt_ms > ETCD_RETRY_ATTEMPT_MS)
        attempt_ms = ETCD_RETRY_ATTEMPT_MS;
    if (!r->easy) {
        r->easy = curl_easy_init();
        if (!r->easy) {
            finish(r, NULL, KVMESH_ENOMEM, "etcd: curl_easy_init failed");
            return;
        }
    }
    CURL *e = r->easy;
    char url[sizeof(b->base[0]) + 32];
    snprintf(url, sizeof(url), "%s%s", b->base[r->ep], r->path);
    r->resp_len = 0;
    r->resp_too_big = false;
    r->sent_any = false;
    r->errbuf[0] = '\0';
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, url);
    bad |= curl_easy_setopt(e, CURLOPT_PROXY, "");
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, b->headers);
    bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    bad |= curl_easy_setopt(e, CURLOPT_DEBUGFUNCTION, debug_cb);
    bad |= curl_easy_setopt(e, CURLOPT_DEBUGDATA, (void *)r);
    bad |= curl_easy_setopt(e, CURLOPT_VERBOSE, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, attempt_ms);
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                            attempt_ms < ETCD_CONNECT_TIMEOUT_MS ? attempt_ms
                                                                 : (long)ETCD_CONNECT_TIMEOUT_MS);
    bad |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* libcurl silently re-sends a request whose REUSED connection died before any reply byte,
     * on a fresh connection to the same URL: for a txn or revoke that reached a member (or a
     * proxy) which applied it and then went away, the copy would apply a second time and the
     * caller would learn only the second outcome. A request that is not safe to repeat
     * therefore always goes on a connection of its own (curl retries only reused ones). */
    bad |= curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, r->retry_safe ? 0L : 1L);
    /* ... and is closed after its reply instead of joining the pool (it would evict a reusable
     * connection), with an abortive close so that no TIME_WAIT entry stays behind: one per txn
     * would exhaust the ephemeral ports at a few hundred txns per second. */
    bad |= curl_easy_setopt(e, CURLOPT_FORBID_REUSE, r->retry_safe ? 0L : 1L);
    bad |= curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, r->retry_safe ? NULL : no_linger_cb);
    if (bad) {
        finish(r, NULL, KVMESH_EINTERNAL, "etcd: cannot configure the HTTP request");
        return;
    }
    CURLMcode mc = curl_multi_add_handle(b->multi, e);
    if (mc != CURLM_OK)
        finish(r, NULL, KVMESH_EINTERNAL, "etcd: curl_multi_add_handle: %s",
               curl_multi_strerror(mc));
}

/* A transfer ended (removed from the multi handle already). */
static void handle_done(etcd_req_t *r, CURLcode cc)
{
    etcd_be_t *b = r->b;
    if (meta_call_abandoned(r->call)) {
        if (cc != CURLE_OK)
            demote_member(r); /* e.g. a hung member: later requests try the next one */
        finish(r, NULL, KVMESH_ETIMEDOUT, "etcd %s: no reply before the deadline",
               kind_name(r->kind));
        return;
    }
    if (cc != CURLE_OK) {
        if (cc == CURLE_WRITE_ERROR && r->resp_too_big) {
            finish(r, NULL, KVMESH_ETOOBIG,
                   "etcd %s: reply from %s exceeds %zu bytes; ask for smaller pages",
                   kind_name(r->kind), b->name[r->ep], (size_t)ETCD_RESPONSE_MAX);
            return;
        }
        /* unsent only if no byte of it ever reached a socket; a refused connect after a
         * silent re-send does not count */
        bool not_sent = !r->sent_any;
        note_tried(r, r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
        if (r->retry_safe || not_sent) {
            retry_or_fail(r, KVMESH_ECONN);
            return;
        }
        demote_member(r);
        finish(r, NULL, KVMESH_EINDETERMINATE,
               "etcd %s sent to %s got no reply (%s): the outcome is unknown; read back to "
               "learn it",
               kind_name(r->kind), b->name[r->ep],
               r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
        return;
    }
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    etcd_resp_t d;
    int rc = etcd_json_decode(r->kind, r->resp ? r->resp : "", r->resp_len, status, &r->shape, &d);
    bool unavailable =
        rc == KVMESH_EUNAVAILABLE || status >= 500 || d.grpc_code == ETCD_GRPC_DEADLINE_EXCEEDED;
    if (rc != 0 && unavailable) {
        note_tried(r, d.msg);
        /* a "no leader" refusal happens before the request is proposed */
        bool refused = strstr(d.msg, "no leader") != NULL;
        etcd_resp_free(&d);
        if (r->retry_safe || refused) {
            retry_or_fail(r, KVMESH_EUNAVAILABLE);
            return;
        }
        demote_member(r);
        finish(r, NULL, KVMESH_EINDETERMINATE,
               "etcd %s on %s failed after it may have been applied (%s): the outcome is "
               "unknown; read back to learn it",
               kind_name(r->kind), b->name[r->ep], r->tried);
        return;
    }
    b->cur = r->ep; /* this member answers: prefer it */
    if (rc != 0) {
        /* name the member that answered, and those that failed before it */
        char msg[ETCD_ERRMSG_MAX];
        int k = snprintf(msg, sizeof(msg), "%.300s (from %s", d.msg, b->name[r->ep]);
        if (k > 0 && (size_t)k < sizeof(msg))
            snprintf(msg + k, sizeof(msg) - (size_t)k, "%s%.150s)",
                     r->tried[0] ? "; earlier: " : "", r->tried);
        memcpy(d.msg, msg, sizeof(d.msg));
    }
    d.res.errmsg = d.msg;
    finish(r, &d.res, 0, "%s", "");
    etcd_resp_free(&d);
}

/* ---- curl multi <-> libuv ----------------------------------------------------------------- */

static void check_done(etcd_be_t *b)
{
    CURLMsg *msg;
    int left;
    while (!b->closing && (msg = curl_multi_info_read(b->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *e = msg->easy_handle;
        CURLcode cc = msg->data.result;
        etcd_req_t *r = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
        curl_multi_remove_handle(b->multi, e);
        KVM_ASSERT(r != NULL && r->easy == e);
        handle_done(r, cc);
    }
}

static void uv_timer_fired(uv_timer_t *t)
{
    etcd_be_t *b = t->data;
    if (b->closing)
        return;
    int running = 0;
    curl_multi_socket_action(b->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(b);
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *arg)
{
    etcd_be_t *b = arg;
    if (timeout_ms < 0)
        uv_timer_stop(&b->timer);
    else
        uv_timer_start(&b->timer, uv_timer_fired, (uint64_t)timeout_ms, 0);
    return 0;
}

static void poll_fired(uv_poll_t *p, int status, int events)
{
    etcd_sock_t *s = p->data;
    etcd_be_t *b = s->b;
    if (b->closing)
        return;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    int running = 0;
    curl_multi_socket_action(b->multi, s->fd, flags, &running);
    check_done(b);
}

static void handle_closed(uv_handle_t *h)
{
    etcd_be_t *b;
    if (h->type == UV_POLL) {
        etcd_sock_t *s = h->data;
        b = s->b;
        free(s);
    } else {
        b = h->data;
    }
    b->open_handles--;
    maybe_free_backend(b);
}

static void sock_close(etcd_be_t *b, etcd_sock_t *s)
{
    uv_poll_stop(&s->poll);
    if (s->prev)
        s->prev->next = s->next;
    else
        b->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    uv_close((uv_handle_t *)&s->poll, handle_closed);
}

static int curl_sock_cb(CURL *e, curl_socket_t fd, int what, void *arg, void *sockp)
{
    etcd_be_t *b = arg;
    etcd_sock_t *s = sockp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(b->multi, fd, NULL);
            sock_close(b, s);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -1;
        if (uv_poll_init_socket(b->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->b = b;
        s->poll.data = s;
        s->next = b->socks;
        if (b->socks)
            b->socks->prev = s;
        b->socks = s;
        b->open_handles++;
        curl_multi_assign(b->multi, fd, s);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&s->poll, ev, poll_fired);
    return 0;
}

/* ---- backend ops -------------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;

static void curl_global_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int etcd_open(meta_t *m, const char *url)
{
    char err[256] = "";
    etcd_be_t *b = NULL;
    uv_loop_t *loop = env_uv_loop(m->env);
    if (!loop)
        return kvm_errf(KVMESH_ENOTSUP, "etcd backend needs a libuv env (this env has no loop); "
                                        "use memory:// in the simulator");
    pthread_once(&curl_once, curl_global_once);
    if (curl_init_rc != CURLE_OK)
        return kvm_errf(KVMESH_EINTERNAL, "curl_global_init failed: %s",
                        curl_easy_strerror(curl_init_rc));
    b = calloc(1, sizeof(*b));
    if (!b)
        return kvm_errf(KVMESH_ENOMEM, "out of memory opening %s", url);
    int rc = etcd_url_parse(url, &b->url, err, sizeof(err));
    if (rc != 0) {
        free(b);
        return kvm_errf(rc, "%s (url '%s')", err, url);
    }
    for (size_t i = 0; i < b->url.n_eps; i++) {
        const etcd_endpoint_t *ep = &b->url.eps[i];
        int nb =
            snprintf(b->base[i], sizeof(b->base[i]), "http://%s:%u", ep->host, (unsigned)ep->port);
        int nn = snprintf(b->name[i], sizeof(b->name[i]), "%s:%u", ep->host, (unsigned)ep->port);
        /* sized for the longest host and port above */
        KVM_ASSERT(nb > 0 && (size_t)nb < sizeof(b->base[i]) && nn > 0 &&
                   (size_t)nn < sizeof(b->name[i]));
    }
    b->m = m;
    b->env = m->env;
    b->loop = loop;
    b->multi = curl_multi_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h2 = h ? curl_slist_append(h, "Expect:") : NULL;
    if (!b->multi || !h2) {
        curl_slist_free_all(h2 ? h2 : h);
        if (b->multi)
            curl_multi_cleanup(b->multi);
        free(b);
        return kvm_errf(KVMESH_ENOMEM, "out of memory opening %s", url);
    }
    b->headers = h2;
    curl_multi_setopt(b->multi, CURLMOPT_SOCKETFUNCTION, curl_sock_cb);
    curl_multi_setopt(b->multi, CURLMOPT_SOCKETDATA, b);
    curl_multi_setopt(b->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
    curl_multi_setopt(b->multi, CURLMOPT_TIMERDATA, b);
    curl_multi_setopt(b->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)ETCD_MAX_INFLIGHT);
    curl_multi_setopt(b->multi, CURLMOPT_MAXCONNECTS, (long)ETCD_MAX_INFLIGHT);
    uv_timer_init(loop, &b->timer);
    b->timer.data = b;
    b->open_handles = 1;
    m->backend = b;
    return 0;
}

static void etcd_close(meta_t *m)
{
    etcd_be_t *b = m->backend;
    if (!b)
        return;
    b->closing = true;
    /* detach every request from curl first, then complete them (user callbacks may run) */
    for (etcd_req_t *r = b->active; r; r = r->next) {
        if (r->state == REQ_SENDING && r->easy)
            curl_multi_remove_handle(b->multi, r->easy);
    }
    while (b->active)
        finish(b->active, NULL, KVMESH_ECANCELED, "etcd handle closed");
    while (b->queue_head) {
        etcd_req_t *r = b->queue_head;
        b->queue_head = r->next;
        b->n_queued--;
        r->next = r->prev = NULL;
        finish(r, NULL, KVMESH_ECANCELED, "etcd handle closed");
    }
    b->queue_tail = NULL;
    curl_multi_cleanup(b->multi); /* may report CURL_POLL_REMOVE for pooled sockets */
    b->multi = NULL;
    while (b->socks)
        sock_close(b, b->socks);
    curl_slist_free_all(b->headers);
    b->headers = NULL;
    uv_timer_stop(&b->timer);
    uv_close((uv_handle_t *)&b->timer, handle_closed);
    b->m = NULL;
    m->backend = NULL;
}

static void etcd_submit(meta_t *m, meta_call_t *call)
{
    etcd_be_t *b = m->backend;
    char err[256] = "";
    int rc = 0;
    if (!b || b->closing) {
        meta_call_fail(call, KVMESH_ECANCELED, "etcd handle is closing");
        return;
    }
    etcd_req_t *r = calloc(1, sizeof(*r));
    if (!r) {
        meta_call_fail(call, KVMESH_ENOMEM, "etcd: out of memory");
        return;
    }
    r->b = b;
    r->call = call;
    r->state = REQ_NEW;
    switch (call->kind) {
    case META_CALL_GET:
        r->kind = ETCD_RESP_GET;
        r->path = "/v3/kv/range";
        r->retry_safe = true;
        rc = etcd_json_get_req(call->key, &r->body, err, sizeof(err));
        break;
    case META_CALL_RANGE:
        r->kind = ETCD_RESP_RANGE;
        r->path = "/v3/kv/range";
        r->retry_safe = true;
        r->shape.range_limit = call->limit;
        rc = etcd_json_range_req(call->prefix, call->start_after, call->limit, &r->body, err,
                                 sizeof(err));
        break;
    case META_CALL_TXN:
        r->kind = ETCD_RESP_TXN;
        r->path = "/v3/kv/txn";
        r->retry_safe = false;
        r->shape.then_ops = call->then_ops;
        r->shape.n_then = call->n_then;
        r->shape.else_ops = call->else_ops;
        r->shape.n_else = call->n_else;
        rc = etcd_json_txn_req(call->cmps, call->n_cmps, call->then_ops, call->n_then,
                               call->else_ops, call->n_else, &r->body, err, sizeof(err));
        break;
    case META_CALL_LEASE_GRANT:
        r->kind = ETCD_RESP_LEASE_GRANT;
        r->path = "/v3/lease/grant";
        r->retry_safe = true; /* a lease granted by a lost attempt expires unused */
        rc = etcd_json_lease_grant_req(call->ttl_ms, &r->body, err, sizeof(err));
        break;
    case META_CALL_LEASE_KEEPALIVE:
        r->kind = ETCD_RESP_LEASE_KEEPALIVE;
        r->path = "/v3/lease/keepalive";
        r->retry_safe = true;
        rc = etcd_json_lease_id_req(call->lease, &r->body, err, sizeof(err));
        break;
    case META_CALL_LEASE_REVOKE:
        r->kind = ETCD_RESP_LEASE_REVOKE;
        r->path = "/v3/lease/revoke";
        r->retry_safe = false;
        rc = etcd_json_lease_id_req(call->lease, &r->body, err, sizeof(err));
        break;
    case META_CALL_LEASE_TTL:
        r->kind = ETCD_RESP_LEASE_TTL;
        r->path = "/v3/lease/timetolive";
        r->retry_safe = true;
        rc = etcd_json_lease_id_req(call->lease, &r->body, err, sizeof(err));
        break;
    default:
        rc = KVMESH_EINVAL;
        snprintf(err, sizeof(err), "etcd: unknown call kind %d", (int)call->kind);
        break;
    }
    if (rc != 0) {
        free(r->body);
        free(r);
        meta_call_fail(call, rc, "%s", err);
        return;
    }
    r->body_len = strlen(r->body);
    size_t n = b->url.n_eps;
    r->max_attempts = (unsigned)(n * ETCD_MAX_ROUNDS);
    r->start_ep = b->cur;
    r->ep = b->cur;
    if (b->n_active < ETCD_MAX_INFLIGHT && !b->queue_head) {
        list_push(&b->active, r);
        b->n_active++;
        req_set_state(r, REQ_SENDING);
        start_attempt(r);
        return;
    }
    if (b->n_queued >= ETCD_MAX_QUEUED) {
        free(r->body);
        free(r);
        meta_call_fail(call, KVMESH_EAGAIN, "etcd: %d requests in flight and %d waiting; slow down",
                       ETCD_MAX_INFLIGHT, ETCD_MAX_QUEUED);
        return;
    }
    req_set_state(r, REQ_QUEUED);
    r->prev = b->queue_tail;
    if (b->queue_tail)
        b->queue_tail->next = r;
    else
        b->queue_head = r;
    b->queue_tail = r;
    b->n_queued++;
}

const struct meta_backend_ops meta_etcd_ops = {
    .name = "etcd",
    .open = etcd_open,
    .close = etcd_close,
    .submit = etcd_submit,
};
