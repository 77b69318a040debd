/* SPDX-License-Identifier: Apache-2.0 */
/*
 * obs_testrt.h — a stand-in request server for the exposition and endpoint tests only.
 *
 * It owns what a runtime owns for observability — a metrics registry, a tracer, a tenant counters
 * table, an admin HTTP server with a provider — and serves put/get over a real loopback TCP
 * socket between two instances, carrying the 25-byte trace context in each frame header exactly
 * as the RPC layer does. It counts only its own API requests (requests_*, request_*, tenant_*):
 * enough to exercise the text format, the label rules, the tenant label cap and the endpoints.
 * It does NOT count route, metadata, transport, allocation or membership families: those are
 * counted by the real layers and tested against real runtimes (obs_metrics_redis, obs_metrics_etcd,
 * obs_metrics_live in obs_metrics_rt.c).
 *
 * Span layout of a remote put (a get is the same with control.rpc_get/data.read/metadata.get):
 *   A: store.put ─┬─ control.route_lookup
 *                 └─ control.rpc_put ══(25-byte context over TCP)══▶ B: data.write
 *                                                                       └─ metadata.cas
 */
#ifndef KVMESH_OBS_TESTRT_H
#define KVMESH_OBS_TESTRT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "env/clock.h"
#include "obs/http.h"
#include "obs/metrics.h"
#include "obs/stats.h"
#include "obs/trace.h"

#define TRT_MAX_OBJECTS 4096 /* objects kept before the oldest is evicted */
#define TRT_KEY_MAX     128
#define TRT_FRAME_MAGIC 0x6b766d31u

struct trt_obj {
    char key[TRT_KEY_MAX];
    uint32_t size;
    bool used;
};

struct trt {
    char name[32];
    struct obs_registry *metrics;
    struct obs_tracer *tracer;
    struct obs_tenant_table *tenants;
    struct obs_http *http;
    pthread_mutex_t mu; /* objects, peer connection */
    struct trt_obj *objs;
    size_t nobjs, oldest;
    uint64_t used_bytes;
    int listen_fd;
    uint16_t rpc_port;
    pthread_t srv;
    int peer_fd; /* connection to the peer runtime, -1 when none */
    int conn_fd; /* the connection the server thread serves, -1 when none (atomic) */
    bool ready;  /* health: flipped by tests */
    time_t started;
};

/* frame header: magic(4) op(1) ctx(25) keylen(2) size(4) then key; reply: status(4) */
#define TRT_HDR_LEN (4 + 1 + OBS_TRACE_CTX_WIRE_LEN + 2 + 4)

static inline int trt_io(int fd, void *buf, size_t n, bool wr)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = wr ? send(fd, (char *)buf + off, n - off, MSG_NOSIGNAL)
                       : recv(fd, (char *)buf + off, n - off, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            return -1;
        }
        off += (size_t)r;
    }
    return 0;
}

/* Local store operation (on the owner): data.* span with a metadata.* child. */
static inline int trt_apply(struct trt *rt, struct obs_span *parent,
                            const struct obs_trace_ctx *remote, int op, const char *key,
                            uint32_t size)
{
    struct obs_span d, m;
    if (remote)
        obs_span_start_remote(rt->tracer, remote, op == 1 ? "data.write" : "data.read", &d);
    else
        obs_span_start(rt->tracer, parent, op == 1 ? "data.write" : "data.read", &d);
    obs_span_set_key(&d, key, strlen(key));
    obs_span_start(rt->tracer, &d, op == 1 ? "metadata.cas" : "metadata.get", &m);
    int rc = 0;
    pthread_mutex_lock(&rt->mu);
    if (op == 1) {
        if (rt->nobjs == TRT_MAX_OBJECTS) { /* evict the oldest */
            struct trt_obj *o = &rt->objs[rt->oldest];
            rt->used_bytes -= o->size;
            o->used = false;
            rt->nobjs--;
        }
        struct trt_obj *o = &rt->objs[rt->oldest];
        rt->oldest = (rt->oldest + 1) % TRT_MAX_OBJECTS;
        snprintf(o->key, sizeof(o->key), "%s", key);
        o->size = size;
        o->used = true;
        rt->nobjs++;
        rt->used_bytes += size;
    } else {
        rc = KVMESH_ENOENT;
        for (size_t i = 0; i < TRT_MAX_OBJECTS; i++)
            if (rt->objs[i].used && strcmp(rt->objs[i].key, key) == 0) {
                rc = 0;
                break;
            }
    }
    pthread_mutex_unlock(&rt->mu);
    obs_span_end(&m);
    obs_span_set_status(&d, rc);
    obs_span_end(&d);
    return rc;
}

static inline void *trt_server(void *arg)
{
    struct trt *rt = arg;
    for (;;) {
        int fd = accept(rt->listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL; /* listen socket shut down */
        __atomic_store_n(&rt->conn_fd, fd, __ATOMIC_RELEASE);
        uint8_t hdr[TRT_HDR_LEN];
        while (trt_io(fd, hdr, sizeof(hdr), false) == 0) {
            uint32_t magic, size;
            uint16_t klen;
            memcpy(&magic, hdr, 4);
            memcpy(&klen, hdr + 30, 2);
            memcpy(&size, hdr + 32, 4);
            char key[TRT_KEY_MAX];
            struct obs_trace_ctx ctx;
            int32_t status;
            if (magic != TRT_FRAME_MAGIC || klen == 0 || klen >= TRT_KEY_MAX ||
                trt_io(fd, key, klen, false) != 0)
                break;
            key[klen] = '\0';
            if (obs_trace_ctx_extract(hdr + 5, &ctx) != 0)
                status = KVMESH_EPROTO;
            else
                status = trt_apply(rt, NULL, &ctx, hdr[4], key, size);
            if (trt_io(fd, &status, 4, true) != 0)
                break;
        }
        __atomic_store_n(&rt->conn_fd, -1, __ATOMIC_RELEASE);
        close(fd);
    }
}

static inline void trt_health(void *ctx, struct obs_health *h)
{
    struct trt *rt = ctx;
    if (!__atomic_load_n(&rt->ready, __ATOMIC_RELAXED)) {
        h->ready = false;
        obs_health_reason(h, "membership: no successful refresh yet");
        obs_health_reason(h, "lease: heartbeat overdue");
    }
}

static inline void trt_runtime_stats(void *ctx, struct obs_runtime_stats *s)
{
    struct trt *rt = ctx;
    snprintf(s->runtime_id, sizeof(s->runtime_id), "%s", rt->name);
    s->uptime_seconds = (uint64_t)(time(NULL) - rt->started);
    s->live_members = 2;
    pthread_mutex_lock(&rt->mu);
    s->objects = rt->nobjs;
    s->dram_used_bytes = rt->used_bytes;
    pthread_mutex_unlock(&rt->mu);
    s->dram_capacity_bytes = 4ull << 30;
}

static inline void trt_before_scrape(void *ctx)
{
    (void)ctx;
}

struct trt_config {
    const char *name;
    double sample_rate;
    const char *capture_dir; /* JSONL capture "spans.jsonl" starts at open when set */
    const char *otlp_url;
    const char *secret;
    size_t tenant_capacity;
};

static inline int trt_open(const struct trt_config *cfg, struct trt **out)
{
    struct trt *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return KVMESH_ENOMEM;
    snprintf(rt->name, sizeof(rt->name), "%s", cfg->name);
    rt->objs = calloc(TRT_MAX_OBJECTS, sizeof(*rt->objs));
    pthread_mutex_init(&rt->mu, NULL);
    rt->peer_fd = -1;
    rt->conn_fd = -1;
    rt->ready = true;
    rt->started = time(NULL);
    struct obs_tracer_config tc = {.service = cfg->name,
                                   .sample_rate = cfg->sample_rate,
                                   .capture_dir = cfg->capture_dir,
                                   .capture_name = cfg->capture_dir ? "spans.jsonl" : NULL,
                                   .otlp_url = cfg->otlp_url,
                                   .flush_interval_ms = 50,
                                   .debug_records = true,
                                   .key_hash_seed = 42};
    int rc = obs_registry_new(&rt->metrics);
    tc.metrics = rt->metrics;
    if (rc == 0)
        rc = obs_tracer_create(&tc, &rt->tracer);
    if (rc == 0)
        rc = obs_tenant_table_create(cfg->tenant_capacity ? cfg->tenant_capacity : 256,
                                     &rt->tenants);
    if (rc == 0) {
        struct obs_http_config hc = {.secret = cfg->secret,
                                     .provider = {.ctx = rt,
                                                  .health = trt_health,
                                                  .runtime_stats = trt_runtime_stats,
                                                  .before_scrape = trt_before_scrape,
                                                  .tenants = rt->tenants},
                                     .tracer = rt->tracer,
                                     .metrics = rt->metrics};
        rc = obs_http_start(&hc, &rt->http);
    }
    if (rc == 0) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof(sa);
        rt->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
        if (rt->listen_fd < 0 || bind(rt->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            listen(rt->listen_fd, 8) != 0 ||
            getsockname(rt->listen_fd, (struct sockaddr *)&sa, &sl) != 0)
            rc = KVMESH_EIO;
        else
            rt->rpc_port = ntohs(sa.sin_port);
    }
    if (rc == 0 && pthread_create(&rt->srv, NULL, trt_server, rt) != 0)
        rc = KVMESH_EIO;
    if (rc != 0) {
        fprintf(stderr, "trt_open: %s\n", kvmesh_last_error());
        abort(); /* test fixture: fail loudly */
    }
    *out = rt;
    return 0;
}

static inline void trt_close(struct trt *rt)
{
    obs_http_stop(rt->http);
    shutdown(rt->listen_fd, SHUT_RDWR);
    int c = __atomic_load_n(&rt->conn_fd, __ATOMIC_ACQUIRE);
    if (c >= 0)
        shutdown(c, SHUT_RDWR);
    if (rt->peer_fd >= 0)
        close(rt->peer_fd);
    pthread_join(rt->srv, NULL);
    close(rt->listen_fd);
    obs_tracer_destroy(rt->tracer);
    obs_tenant_table_destroy(rt->tenants);
    obs_registry_free(rt->metrics);
    pthread_mutex_destroy(&rt->mu);
    free(rt->objs);
    free(rt);
}

static inline uint16_t trt_port(const struct trt *rt)
{
    return obs_http_port(rt->http);
}

/* Sends one frame to the peer over the persistent connection; returns the peer's status. */
static inline int trt_rpc(struct trt *rt, struct trt *peer, struct obs_span *parent, int op,
                          const char *key, uint32_t size)
{
    struct obs_span r;
    obs_span_start(rt->tracer, parent, op == 1 ? "control.rpc_put" : "control.rpc_get", &r);
    struct obs_trace_ctx ctx;
    obs_span_context(&r, &ctx);
    uint8_t hdr[TRT_HDR_LEN];
    uint32_t magic = TRT_FRAME_MAGIC;
    uint16_t klen = (uint16_t)strlen(key);
    memcpy(hdr, &magic, 4);
    hdr[4] = (uint8_t)op;
    obs_trace_ctx_inject(&ctx, hdr + 5);
    memcpy(hdr + 30, &klen, 2);
    memcpy(hdr + 32, &size, 4);
    int32_t status = KVMESH_ECONN;
    pthread_mutex_lock(&rt->mu);
    if (rt->peer_fd < 0) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(peer->rpc_port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            rt->peer_fd = fd;
        else
            close(fd);
    }
    if (!(rt->peer_fd >= 0 && trt_io(rt->peer_fd, hdr, sizeof(hdr), true) == 0 &&
          trt_io(rt->peer_fd, (void *)key, klen, true) == 0 &&
          trt_io(rt->peer_fd, &status, 4, false) == 0))
        status = KVMESH_ECONN;
    pthread_mutex_unlock(&rt->mu);
    obs_span_set_status(&r, status);
    obs_span_end(&r);
    return status;
}

/* One API request: op 1 = put, 2 = get; peer NULL = the object lives here. */
static inline int trt_request(struct trt *rt, struct trt *peer, int op, const char *tenant,
                              const char *key, uint32_t size)
{
    int obs_op = op == 1 ? OBS_OP_PUT : OBS_OP_GET;
    uint64_t t0 = env_clock_mono_ns();
    obs_gauge_add(rt->metrics, requests_in_flight, obs_op, OBS_NONE, 1);
    struct obs_span root, lk;
    obs_span_start(rt->tracer, NULL, op == 1 ? "store.put" : "store.get", &root);
    obs_span_set_str(&root, "kvmesh.tenant", tenant);
    obs_span_set_key(&root, key, strlen(key));
    obs_span_start(rt->tracer, &root, "control.route_lookup", &lk);
    obs_span_end(&lk);
    int rc =
        peer ? trt_rpc(rt, peer, &root, op, key, size) : trt_apply(rt, &root, NULL, op, key, size);
    int res = rc == 0                  ? OBS_RES_OK
              : rc == KVMESH_ENOENT    ? OBS_RES_NOT_FOUND
              : rc == KVMESH_ETIMEDOUT ? OBS_RES_TIMEOUT
                                       : OBS_RES_ERROR;
    obs_count(rt->metrics, requests_total, obs_op, res, 1);
    if (res != OBS_RES_OK && res != OBS_RES_NOT_FOUND)
        obs_count(rt->metrics, request_errors_total, obs_op, OBS_NONE, 1);
    uint64_t bytes = rc == 0 ? size : 0;
    obs_count(rt->metrics, request_bytes_total, obs_op, OBS_NONE, bytes);
    obs_observe(rt->metrics, request_payload_bytes, obs_op, OBS_NONE, size);
    unsigned slot = obs_tenant_slot(tenant, strlen(tenant));
    obs_tenant_count(rt->metrics, tenant_requests_total, slot, 1);
    obs_tenant_count(rt->metrics, tenant_request_bytes_total, slot, bytes);
    if (res != OBS_RES_OK && res != OBS_RES_NOT_FOUND)
        obs_tenant_count(rt->metrics, tenant_request_errors_total, slot, 1);
    struct obs_tenant_counters d = {.requests = 1,
                                    .errors = (res != OBS_RES_OK && res != OBS_RES_NOT_FOUND),
                                    .bytes_in = op == 1 ? bytes : 0,
                                    .bytes_out = op == 2 ? bytes : 0,
                                    .objects = op == 1 && rc == 0,
                                    .stored_bytes = op == 1 ? (int64_t)bytes : 0};
    (void)obs_tenant_table_record(rt->tenants, tenant, strlen(tenant), &d);
    obs_span_set_status(&root, rc);
    obs_span_end(&root);
    obs_observe(rt->metrics, request_duration_seconds, obs_op, OBS_NONE, env_clock_mono_ns() - t0);
    obs_gauge_add(rt->metrics, requests_in_flight, obs_op, OBS_NONE, -1);
    return rc;
}

static inline int trt_put(struct trt *rt, struct trt *peer, const char *tenant, const char *key,
                          uint32_t size)
{
    return trt_request(rt, peer, 1, tenant, key, size);
}

static inline int trt_get(struct trt *rt, struct trt *peer, const char *tenant, const char *key,
                          uint32_t size)
{
    return trt_request(rt, peer, 2, tenant, key, size);
}

/* Background duties a runtime does periodically (membership refresh, lease heartbeat). */
static inline void trt_tick(struct trt *rt)
{
    (void)rt;
}

/* ---- HTTP client for the tests (libcurl) ---------------------------------------------- */

#include <curl/curl.h>

#include "curl_body.h"

/* Fetches http://127.0.0.1:port<path>; returns the HTTP status (or -1). Caller frees body. */
static inline long trt_http(uint16_t port, const char *method, const char *path, const char *auth,
                            struct tcurl_body *body)
{
    char url[2600];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)port, path);
    memset(body, 0, sizeof(*body));
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *h = NULL;
    char hv[256];
    if (auth) {
        snprintf(hv, sizeof(hv), "Authorization: %s", auth);
        h = curl_slist_append(h, hv);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, tcurl_body_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    long code = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (!body->data)
        body->data = calloc(1, 1);
    return code;
}

#endif
