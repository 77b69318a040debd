/* SPDX-License-Identifier: Apache-2.0 */
/*
 * otlp_fake.h — a fake OTLP/HTTP trace collector for the tracing tests: libmicrohttpd on a free
 * 127.0.0.1 port, POST /v1/traces with an OTLP JSON body answered 200 "{}" (anything else 404),
 * every span of every accepted body recorded as a tspan_t (service from the resource's
 * service.name attribute). Optionally stalls each answer by stall_ms to play a collector slower
 * than the exporter's timeout.
 *
 * Ownership: otlp_fake_start() allocates the collector; otlp_fake_stop() stops its thread and
 * frees it. Threading: the collector's thread writes spans/n/posts/bad_bodies under mu; a test
 * reads them under mu, before otlp_fake_stop().
 */
#ifndef KVMESH_TESTS_SUPPORT_OTLP_FAKE_H
#define KVMESH_TESTS_SUPPORT_OTLP_FAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tspan.h"

#define OTLP_FAKE_MAX_SPANS 4096

typedef struct otlp_fake {
    struct MHD_Daemon *d;
    uint16_t port;
    char url[64]; /* "http://127.0.0.1:PORT/v1/traces" */
    unsigned stall_ms;
    pthread_mutex_t mu; /* guards what follows */
    tspan_t spans[OTLP_FAKE_MAX_SPANS];
    size_t n;            /* spans recorded (at most OTLP_FAKE_MAX_SPANS) */
    unsigned posts;      /* requests answered */
    unsigned bad_bodies; /* POST /v1/traces bodies that were not OTLP JSON */
} otlp_fake_t;

/* Starts a collector; NULL (reason on stderr) when the daemon cannot start. */
otlp_fake_t *otlp_fake_start(unsigned stall_ms);

/* Stops the collector's thread and frees it (NULL is a no-op). */
void otlp_fake_stop(otlp_fake_t *r);

#endif
