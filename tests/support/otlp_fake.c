// SPDX-License-Identifier: Apache-2.0
/*
 * otlp_fake.c — the fake OTLP/HTTP trace collector of the tracing tests (see otlp_fake.h).
 */
#include "otlp_fake.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jsonl.h"

struct rx_req {
    char *body;
    size_t len;
};

static void rx_parse(otlp_fake_t *r, const char *body, size_t len)
{
    json_error_t e;
    json_t *j = json_loadb(body ? body : "", len, 0, &e);
    if (!json_is_object(j)) {
        pthread_mutex_lock(&r->mu);
        r->bad_bodies++;
        pthread_mutex_unlock(&r->mu);
        json_decref(j);
        return;
    }
    json_t *rs, *a, *ss, *sp;
    size_t i, k, m, q;
    json_array_foreach(json_object_get(j, "resourceSpans"), i, rs)
    {
        const char *svc = "";
        json_array_foreach(json_object_get(json_object_get(rs, "resource"), "attributes"), k, a)
        {
            if (strcmp(tjson_str(a, "key"), "service.name") == 0)
                svc = tjson_str(json_object_get(a, "value"), "stringValue");
        }
        json_array_foreach(json_object_get(rs, "scopeSpans"), m, ss)
        {
            json_array_foreach(json_object_get(ss, "spans"), q, sp)
            {
                pthread_mutex_lock(&r->mu);
                if (r->n < OTLP_FAKE_MAX_SPANS) {
                    tspan_t *o = &r->spans[r->n++];
                    snprintf(o->trace_id, sizeof(o->trace_id), "%s", tjson_str(sp, "traceId"));
                    snprintf(o->span_id, sizeof(o->span_id), "%s", tjson_str(sp, "spanId"));
                    snprintf(o->parent, sizeof(o->parent), "%s", tjson_str(sp, "parentSpanId"));
                    snprintf(o->name, sizeof(o->name), "%s", tjson_str(sp, "name"));
                    snprintf(o->service, sizeof(o->service), "%s", svc);
                    o->has_start = json_object_get(sp, "startTimeUnixNano") != NULL;
                }
                pthread_mutex_unlock(&r->mu);
            }
        }
    }
    json_decref(j);
}

static enum MHD_Result rx_handler(void *cls, struct MHD_Connection *con, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **req_cls)
{
    (void)version;
    otlp_fake_t *r = cls;
    struct rx_req *q = *req_cls;
    if (!q) {
        *req_cls = calloc(1, sizeof(struct rx_req));
        return *req_cls ? MHD_YES : MHD_NO;
    }
    if (*data_size) {
        char *nb = realloc(q->body, q->len + *data_size);
        if (!nb)
            return MHD_NO;
        q->body = nb;
        memcpy(q->body + q->len, data, *data_size);
        q->len += *data_size;
        *data_size = 0;
        return MHD_YES;
    }
    if (r->stall_ms)
        usleep(r->stall_ms * 1000u);
    unsigned code = 404;
    if (strcmp(method, "POST") == 0 && strcmp(url, "/v1/traces") == 0) {
        rx_parse(r, q->body, q->len);
        code = 200;
    }
    pthread_mutex_lock(&r->mu);
    r->posts++;
    pthread_mutex_unlock(&r->mu);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(con, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void rx_done(void *cls, struct MHD_Connection *con, void **req_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)con, (void)toe;
    struct rx_req *q = *req_cls;
    if (q) {
        free(q->body);
        free(q);
    }
}

otlp_fake_t *otlp_fake_start(unsigned stall_ms)
{
    otlp_fake_t *r = calloc(1, sizeof(*r));
    if (!r) {
        fprintf(stderr, "otlp_fake: out of memory\n");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->stall_ms = stall_ms;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    r->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
                            rx_handler, r, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, rx_done, NULL, MHD_OPTION_END);
    const union MHD_DaemonInfo *di =
        r->d ? MHD_get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!di) {
        fprintf(stderr, "otlp_fake: cannot start the collector on 127.0.0.1\n");
        if (r->d)
            MHD_stop_daemon(r->d);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    r->port = di->port;
    snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%u/v1/traces", (unsigned)r->port);
    return r;
}

void otlp_fake_stop(otlp_fake_t *r)
{
    if (!r)
        return;
    MHD_stop_daemon(r->d);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
