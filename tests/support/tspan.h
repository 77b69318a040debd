/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tspan.h — one finished span as the tracing tests see it, whether read back from a runtime's
 * JSONL capture (jsonl.h) or received by the fake OTLP collector (otlp_fake.h). Fields are the
 * hex ids and names as strings; an absent field reads as "".
 */
#ifndef KVMESH_TESTS_SUPPORT_TSPAN_H
#define KVMESH_TESTS_SUPPORT_TSPAN_H

#include <stdbool.h>

typedef struct tspan {
    char trace_id[33], span_id[17], parent[17], name[64], service[64];
    bool has_start; /* OTLP: startTimeUnixNano present; JSONL: start time present */
} tspan_t;

#endif
