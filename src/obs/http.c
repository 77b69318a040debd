/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.c — the admin HTTP server (libmicrohttpd, internal polling thread) and the renderers of
 * each endpoint. See http.h for the endpoints, bounds, auth and threading.
 *
 * Invariants: every response body is built in an obs_buf with a hard limit; a body that would
 * pass the limit becomes a 500 (never truncated output); control endpoints check the secret
 * before parsing anything else; the raw request URI (captured by the URI log callback, at most
 * OBS_HTTP_URI_MAX bytes) is the only query input, parsed by obs_query_parse.
 */
#include "obs/http.h"
#include "obs/status_page.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env/env_thread.h"
#include "env/clock.h"

/* A tracked connection (MHD_OPTION_NOTIFY_CONNECTION), for the request deadline watchdog. */
struct obs_http_conn {
    bool used, cut;
    int fd;
    uint64_t since_ms; /* start of the current request period */
};

#define OBS_HTTP_TRACKED (OBS_HTTP_CONN_LIMIT + 8)

struct obs_http {
    struct MHD_Daemon *d;
    uint16_t port;
    char *secret;
    struct obs_provider prov;
    struct obs_tracer *tracer;
    struct obs_registry *metrics;
    /* request deadline watchdog: shuts down connections whose request passed the deadline */
    uint32_t deadline_ms;
    pthread_mutex_t mu; /* conns */
    struct obs_http_conn conns[OBS_HTTP_TRACKED];
    pthread_t wd;
    bool wd_started;
    atomic_bool stopping;
};

/* Per-request state, created by the URI log callback and freed on completion. */
struct obs_http_req {
    bool seen;
    bool too_long;
    char uri[OBS_HTTP_URI_MAX + 1];
};

void obs_health_reason(struct obs_health *h, const char *fmt, ...)
{
    if (h->nreasons >= OBS_HEALTH_REASONS_MAX) {
        snprintf(h->reasons[OBS_HEALTH_REASONS_MAX - 1], OBS_HEALTH_REASON_LEN,
                 "(more reasons omitted)");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->reasons[h->nreasons++], OBS_HEALTH_REASON_LEN, fmt, ap);
    va_end(ap);
}

bool obs_secret_equal(const char *given, size_t given_len, const char *expected,
                      size_t expected_len)
{
    unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)given, given_len, a);
    SHA256((const unsigned char *)expected, expected_len, b);
    return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

/* ---- renderers --------------------------------------------------------------------------- */

static void json_error(struct obs_buf *b, const char *msg)
{
    obs_buf_puts(b, "{\"error\":");
    obs_buf_json_str(b, msg, strlen(msg));
    obs_buf_puts(b, "}\n");
}

static int render_health(struct obs_http *h, const struct obs_query *q, struct obs_buf *b)
{
    struct obs_health hl;
    memset(&hl, 0, sizeof(hl));
    hl.live = hl.ready = true;
    if (h->prov.health)
        h->prov.health(h->prov.ctx, &hl);
    bool ok = q->probe == OBS_PROBE_LIVE ? hl.live : (hl.live && hl.ready);
    obs_buf_printf(b, "{\"status\":\"%s\",\"probe\":\"%s\",\"live\":%s,\"ready\":%s,\"reasons\":[",
                   !hl.live    ? "not_live"
                   : !hl.ready ? "not_ready"
                               : "ok",
                   q->probe == OBS_PROBE_LIVE ? "live" : "ready", hl.live ? "true" : "false",
                   hl.ready ? "true" : "false");
    for (unsigned i = 0; i < hl.nreasons && i < OBS_HEALTH_REASONS_MAX; i++) {
        if (i)
            obs_buf_puts(b, ",");
        obs_buf_json_str(b, hl.reasons[i], strnlen(hl.reasons[i], OBS_HEALTH_REASON_LEN));
    }
    obs_buf_puts(b, "]}\n");
    return ok ? 200 : 503;
}

static void counters_json(struct obs_buf *b, const struct obs_tenant_counters *c)
{
    obs_buf_printf(b,
                   "{\"requests\":%llu,\"errors\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                   "\"objects\":%lld,\"stored_bytes\":%lld,\"quota_rejections\":%llu}",
                   (unsigned long long)c->requests, (unsigned long long)c->errors,
                   (unsigned long long)c->bytes_in, (unsigned long long)c->bytes_out,
                   (long long)c->objects, (long long)c->stored_bytes,
                   (unsigned long long)c->quota_rejections);
}

static int render_stats_tenant(struct obs_http *h, const struct obs_query *q, struct obs_buf *b)
{
    obs_buf_puts(b, "{\"schema\":1,\"tenant\":");
    obs_buf_json_str(b, q->tenant, q->tenant_len);
    struct obs_tenant_counters c;
    if (h->prov.tenants &&
        obs_tenant_table_lookup(h->prov.tenants, q->tenant, q->tenant_len, &c) == 0) {
        obs_buf_puts(b, ",\"tracked\":true,\"counters\":");
        counters_json(b, &c);
    } else {
        obs_buf_puts(b, ",\"tracked\":false,\"counters\":null");
    }
    char qj[1024]; /* the store's quota accounting rows (tenants with a policy) */
    if (h->prov.tenant_quota && h->prov.tenant_quota(h->prov.ctx, q->tenant, qj, sizeof(qj)) == 0)
        obs_buf_printf(b, ",\"quota\":%s", qj);
    obs_buf_puts(b, "}\n");
    return 200;
}

static const char *const op_names[] = {
#define OBS_X_S(name, str) str,
    OBS_OP_VALUES(OBS_X_S)
#undef OBS_X_S
};

static int64_t rd_metric(const struct obs_http *h, const char *id, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    if (h->metrics)
        (void)obs_metrics_read(h->metrics, id, i1, i2, &v);
    return v;
}

static int render_stats(struct obs_http *h, const struct obs_query *q, struct obs_buf *b)
{
    if (q->present & OBS_Q_TENANT)
        return render_stats_tenant(h, q, b);
    struct obs_runtime_stats rs;
    memset(&rs, 0, sizeof(rs));
    if (h->prov.runtime_stats)
        h->prov.runtime_stats(h->prov.ctx, &rs);
    obs_buf_puts(b, "{\"schema\":1,\"runtime\":{\"id\":");
    obs_buf_json_str(b, rs.runtime_id, strnlen(rs.runtime_id, sizeof(rs.runtime_id)));
    obs_buf_printf(
        b,
        ",\"uptime_seconds\":%llu,\"live_members\":%u,\"objects\":%llu,\"segments\":{"
        "\"dram\":{\"capacity_bytes\":%llu,\"used_bytes\":%llu},"
        "\"cold\":{\"capacity_bytes\":%llu,\"used_bytes\":%llu}}}",
        (unsigned long long)rs.uptime_seconds, rs.live_members, (unsigned long long)rs.objects,
        (unsigned long long)rs.dram_capacity_bytes, (unsigned long long)rs.dram_used_bytes,
        (unsigned long long)rs.cold_capacity_bytes, (unsigned long long)rs.cold_used_bytes);
    const struct obs_rereplication_stats *rr = &rs.rereplication;
    obs_buf_printf(b,
                   ",\"rereplication\":{\"under_replicated\":%llu,\"backlog\":%llu,"
                   "\"pending_owners\":%llu,\"copies_in_flight\":%llu,\"lost\":%llu,"
                   "\"found\":%llu,\"repaired\":%llu,\"superseded\":%llu,\"failed\":%llu,"
                   "\"bytes_copied\":%llu,\"passes\":%llu,\"paused\":%s},\"routes\":{"
                   "\"entries\":%llu,\"tombstones\":%llu,\"tombstones_purged\":%llu,"
                   "\"tombstones_purge_unknown\":%llu}",
                   (unsigned long long)rr->under_replicated, (unsigned long long)rr->backlog,
                   (unsigned long long)rr->pending_owners, (unsigned long long)rr->copies_in_flight,
                   (unsigned long long)rr->lost, (unsigned long long)rr->found,
                   (unsigned long long)rr->repaired, (unsigned long long)rr->superseded,
                   (unsigned long long)rr->failed, (unsigned long long)rr->bytes_copied,
                   (unsigned long long)rr->passes, rr->paused ? "true" : "false",
                   (unsigned long long)rs.route_entries, (unsigned long long)rs.route_tombstones,
                   (unsigned long long)rs.tombstones_purged,
                   (unsigned long long)rs.tombstones_purge_unknown);
    obs_buf_printf(b,
                   ",\"owner\":{\"reservations_held\":%llu,"
                   "\"reservations_released_after_lookup\":%llu,\"notes_stale\":%llu},"
                   "\"requests\":{",
                   (unsigned long long)rs.reservations_held,
                   (unsigned long long)rs.reservations_released,
                   (unsigned long long)rs.notes_stale);
    for (unsigned op = 0; op < OBS__N_op; op++) {
        int64_t total = 0;
        for (unsigned r = 0; r < OBS__N_res; r++)
            total += rd_metric(h, "requests_total", op, r);
        obs_buf_printf(b,
                       "%s\"%s\":{\"total\":%lld,\"errors\":%lld,\"bytes\":%lld,"
                       "\"in_flight\":%lld}",
                       op ? "," : "", op_names[op], (long long)total,
                       (long long)rd_metric(h, "request_errors_total", op, 0),
                       (long long)rd_metric(h, "request_bytes_total", op, 0),
                       (long long)rd_metric(h, "requests_in_flight", op, 0));
    }
    obs_buf_puts(b, "},\"tenants\":");
    if (h->prov.tenants) {
        struct obs_tenant_table_info ti;
        obs_tenant_table_info(h->prov.tenants, &ti);
        unsigned n = (q->present & OBS_Q_TOP) ? q->top : OBS_STATS_TOP_DEFAULT;
        struct obs_tenant_top_ent top[OBS_TENANT_TOP_K];
        size_t k = obs_tenant_table_top(h->prov.tenants, top, n);
        obs_buf_printf(b, "{\"capacity\":%zu,\"tracked\":%zu,\"untracked\":", ti.capacity,
                       ti.tracked);
        counters_json(b, &ti.untracked);
        obs_buf_printf(b, ",\"top_by_bytes\":[");
        for (size_t i = 0; i < k; i++) {
            obs_buf_puts(b, i ? ",{\"tenant\":" : "{\"tenant\":");
            obs_buf_json_str(b, top[i].id, strlen(top[i].id));
            obs_buf_puts(b, ",\"counters\":");
            counters_json(b, &top[i].c);
            obs_buf_puts(b, "}");
        }
        obs_buf_puts(b, "]}");
    } else {
        obs_buf_puts(b, "null");
    }
    obs_buf_puts(b, ",\"quota_tenants\":[");
    for (uint32_t i = 0; i < rs.n_quota_tenants && i < OBS_STATS_QUOTA_TENANTS_MAX; i++) {
        obs_buf_puts(b, i ? "," : "");
        obs_buf_json_str(b, rs.quota_tenants[i],
                         strnlen(rs.quota_tenants[i], sizeof(rs.quota_tenants[i])));
    }
    obs_buf_puts(b, "],\"tracing\":");
    if (h->tracer)
        obs_tracer_status_json(h->tracer, b);
    else
        obs_buf_puts(b, "null");
    obs_buf_puts(b, "}\n");
    return 200;
}

static bool auth_ok(struct obs_http *h, const char *auth)
{
    if (!h->secret)
        return true;
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return false;
    return obs_secret_equal(auth + 7, strlen(auth + 7), h->secret, strlen(h->secret));
}

int obs_http_render(struct obs_http *h, const char *method, const char *uri, const char *auth,
                    struct obs_buf *b, const char **ctype)
{
    *ctype = "application/json";
    const char *qm = strchr(uri, '?');
    size_t plen = qm ? (size_t)(qm - uri) : strlen(uri);
    int ep = obs_endpoint_lookup(uri, plen);
    if (ep < 0 || (ep == OBS_EP_CLUSTER && !h->prov.cluster_json)) {
        json_error(b, "no such endpoint; GET /api lists them");
        return 404;
    }
    bool control = ep == OBS_EP_TRACE_SAMPLING || ep == OBS_EP_TRACE_CAPTURE;
    bool is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (control ? strcmp(method, "POST") != 0 : !is_get) {
        json_error(b, control ? "this control endpoint needs POST" : "this endpoint needs GET");
        return 405;
    }
    if (control && !auth_ok(h, auth)) {
        json_error(b, "control endpoints need the header 'Authorization: Bearer <deployment "
                      "secret>'");
        return 401;
    }
    bool traced = ep == OBS_EP_BREAKDOWN || ep == OBS_EP_TRACE || ep == OBS_EP_TRACE_SAMPLING ||
                  ep == OBS_EP_TRACE_CAPTURE;
    if (traced && !h->tracer) {
        json_error(b, OBS_TRACING_OFF_MSG);
        return 409;
    }
    struct obs_query q;
    const char *qs = qm ? qm + 1 : "";
    if (obs_query_parse((enum obs_endpoint)ep, qs, strlen(qs), &q) != 0) {
        json_error(b, kvmesh_last_error());
        return 400;
    }
    int code = 200;
    switch ((enum obs_endpoint)ep) {
    case OBS_EP_INDEX:
    case OBS_EP_API:
        obs_buf_printf(b,
                       "{\"endpoints\":[\"/\",\"/api\",\"/healthz\",\"/metrics\",\"/stats\",%s"
                       "\"/breakdown\",\"/trace\",\"/trace/sampling\",\"/trace/capture\"],"
                       "\"status_page\":\"GET / with Accept: text/html\",\"tracing\":%s",
                       h->prov.cluster_json ? "\"/cluster\"," : "", h->tracer ? "true" : "false");
        if (!h->tracer)
            obs_buf_puts(b, ",\"tracing_note\":\"" OBS_TRACING_OFF_MSG "\"");
        obs_buf_puts(b, "}\n");
        break;
    case OBS_EP_CLUSTER: {
        int rc = h->prov.cluster_json(h->prov.ctx, b);
        if (rc) {
            obs_buf_free(b);
            obs_buf_init(b, OBS_HTTP_JSON_LIMIT);
            json_error(b, kvmesh_last_error());
            return 503;
        }
        obs_buf_puts(b, "\n");
        break;
    }
    case OBS_EP_HEALTHZ:
        code = render_health(h, &q, b);
        break;
    case OBS_EP_METRICS:
        *ctype = "text/plain; version=0.0.4; charset=utf-8";
        if (h->prov.before_scrape)
            h->prov.before_scrape(h->prov.ctx);
        obs_metrics_render(h->metrics, b);
        break;
    case OBS_EP_STATS:
        code = render_stats(h, &q, b);
        break;
    case OBS_EP_BREAKDOWN:
        obs_tracer_breakdown_json(h->tracer,
                                  (q.present & OBS_Q_LIMIT) ? q.limit : OBS_BREAKDOWN_DEFAULT, b);
        obs_buf_puts(b, "\n");
        break;
    case OBS_EP_TRACE:
        obs_tracer_status_json(h->tracer, b);
        obs_buf_puts(b, "\n");
        break;
    case OBS_EP_TRACE_SAMPLING:
        if (obs_tracer_set_sample_rate(h->tracer, q.rate) != 0) {
            json_error(b, kvmesh_last_error());
            return 400;
        }
        obs_tracer_status_json(h->tracer, b);
        obs_buf_puts(b, "\n");
        break;
    case OBS_EP_TRACE_CAPTURE: {
        int rc = 0;
        if (q.action == OBS_ACTION_START)
            rc = obs_tracer_capture_start(h->tracer, q.name);
        else
            obs_tracer_capture_stop(h->tracer);
        if (rc != 0) {
            json_error(b, kvmesh_last_error());
            return rc == KVMESH_EINVAL ? 400 : rc == KVMESH_ENOTSUP ? 409 : 500;
        }
        obs_tracer_status_json(h->tracer, b);
        obs_buf_puts(b, "\n");
        break;
    }
    default:
        json_error(b, "no such endpoint");
        return 404;
    }
    if (b->overflow) {
        obs_buf_free(b);
        obs_buf_init(b, OBS_HTTP_JSON_LIMIT);
        *ctype = "application/json";
        json_error(b, "response would exceed its size bound");
        return 500;
    }
    return code;
}

/* ---- libmicrohttpd glue ------------------------------------------------------------------ */

static void *uri_logger(void *cls, const char *uri, struct MHD_Connection *con)
{
    (void)cls;
    (void)con;
    struct obs_http_req *r = obs_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    size_t n = strlen(uri);
    if (n > OBS_HTTP_URI_MAX)
        r->too_long = true;
    else
        memcpy(r->uri, uri, n + 1);
    return r;
}

static void conn_notify(void *cls, struct MHD_Connection *con, void **socket_ctx,
                        enum MHD_ConnectionNotificationCode code)
{
    struct obs_http *h = cls;
    pthread_mutex_lock(&h->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_ctx = NULL;
        for (size_t i = 0; ci && i < OBS_HTTP_TRACKED; i++)
            if (!h->conns[i].used) {
                h->conns[i] = (struct obs_http_conn){
                    .used = true, .fd = ci->connect_fd, .since_ms = env_clock_mono_ms()};
                *socket_ctx = &h->conns[i];
                break;
            }
    } else if (*socket_ctx) {
        ((struct obs_http_conn *)*socket_ctx)->used = false;
        *socket_ctx = NULL;
    }
    pthread_mutex_unlock(&h->mu);
}

static void *watchdog_main(void *arg)
{
    struct obs_http *h = arg;
    while (!atomic_load(&h->stopping)) {
        usleep(100 * 1000);
        uint64_t now = env_clock_mono_ms();
        pthread_mutex_lock(&h->mu);
        for (size_t i = 0; i < OBS_HTTP_TRACKED; i++) {
            struct obs_http_conn *c = &h->conns[i];
            if (c->used && !c->cut && now - c->since_ms > h->deadline_ms) {
                shutdown(c->fd, SHUT_RDWR); /* MHD sees the error and closes the connection */
                c->cut = true;
            }
        }
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

static void completed(void *cls, struct MHD_Connection *con, void **req_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct obs_http *h = cls;
    (void)toe;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) { /* the next request on this connection starts its period */
        pthread_mutex_lock(&h->mu);
        ((struct obs_http_conn *)ci->socket_context)->since_ms = env_clock_mono_ms();
        pthread_mutex_unlock(&h->mu);
    }
    free(*req_cls);
    *req_cls = NULL;
}

static enum MHD_Result queue(struct MHD_Connection *con, int code, struct obs_buf *b,
                             const char *ctype)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        b->len, b->data ? b->data : (char *)"", MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(con, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result queue_static(struct MHD_Connection *con, const char *body, size_t len,
                                    const char *ctype)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "Vary", "Accept");
    enum MHD_Result ret = MHD_queue_response(con, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *con, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **req_cls)
{
    (void)url;
    (void)version;
    (void)upload_data;
    struct obs_http *h = cls;
    struct obs_http_req *r = *req_cls;
    if (!r)
        return MHD_NO; /* out of memory in the URI logger */
    if (!r->seen) {
        r->seen = true;
        return MHD_YES;
    }
    if (*upload_data_size) { /* bodies are ignored: parameters travel in the query string */
        *upload_data_size = 0;
        return MHD_YES;
    }
    struct obs_buf b;
    obs_buf_init(&b, OBS_HTTP_JSON_LIMIT);
    int code;
    const char *ctype = "application/json";
    if (r->too_long) {
        json_error(&b, "request URI too long");
        code = 414;
    } else {
        int ep = obs_endpoint_lookup(r->uri, strcspn(r->uri, "?"));
        if (ep == OBS_EP_METRICS)
            b.limit = OBS_METRICS_TEXT_LIMIT;
        const char *auth =
            MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const char *accept =
            MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
        if (ep == OBS_EP_INDEX && obs_status_page_wanted(method, r->uri, accept))
            return queue_static(con, obs_status_page_html, obs_status_page_len,
                                "text/html; charset=utf-8");
        code = obs_http_render(h, method, r->uri, auth, &b, &ctype);
    }
    enum MHD_Result ret = queue(con, code, &b, ctype);
    obs_buf_free(&b);
    return ret;
}

int obs_http_start(const struct obs_http_config *cfg, struct obs_http **out)
{
    *out = NULL;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(cfg->port);
    const char *addr = cfg->bind_addr ? cfg->bind_addr : "127.0.0.1";
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return kvm_errf(KVMESH_EINVAL, "admin bind address '%s' is not an IPv4 literal", addr);
    struct obs_http *h = obs_calloc(1, sizeof(*h));
    if (!h)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the admin server");
    if (cfg->secret && cfg->secret[0] && !(h->secret = obs_strdup(cfg->secret))) {
        free(h);
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the admin server");
    }
    h->prov = cfg->provider;
    h->tracer = cfg->tracer;
    h->metrics = cfg->metrics;
    h->deadline_ms =
        cfg->request_deadline_ms ? cfg->request_deadline_ms : OBS_HTTP_REQUEST_DEADLINE_MS;
    pthread_mutex_init(&h->mu, NULL);
    atomic_init(&h->stopping, false);
    /* libmicrohttpd sends with MSG_NOSIGNAL on Linux; its polling thread also inherits a blocked
     * SIGPIPE (env_thread.h), which covers any other write it makes */
    sigset_t old_mask;
    env_sigpipe_block(&old_mask);
    h->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, handler, h,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)OBS_HTTP_CONN_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)OBS_HTTP_CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10),
        MHD_OPTION_URI_LOG_CALLBACK, uri_logger, NULL, MHD_OPTION_NOTIFY_COMPLETED, completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, conn_notify, h, MHD_OPTION_END);
    env_sigmask_restore(&old_mask);
    if (h->d && env_thread_create(&h->wd, watchdog_main, h) == 0)
        h->wd_started = true;
    if (h->d && !h->wd_started) {
        MHD_stop_daemon(h->d);
        h->d = NULL;
    }
    if (!h->d) {
        pthread_mutex_destroy(&h->mu);
        free(h->secret);
        free(h);
        return kvm_errf(KVMESH_EIO, "cannot start the admin HTTP server on %s:%u (port in use?)",
                        addr, (unsigned)cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    *out = h;
    return 0;
}

uint16_t obs_http_port(const struct obs_http *h)
{
    return h->port;
}

void obs_http_stop(struct obs_http *h)
{
    if (!h)
        return;
    atomic_store(&h->stopping, true);
    pthread_join(h->wd, NULL); /* before MHD closes the sockets the watchdog may shut down */
    MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->mu);
    free(h->secret);
    free(h);
}
