/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jsonl.h — reads a tracer's JSONL capture (one span record a line: trace_id, span_id,
 * parent_span_id, name, service, attrs, ...) into tspan_t records.
 *
 * Ownership: the caller owns out; check (may be NULL) sees each parsed record while it lives
 * (borrowed; it must not keep it) so a test can assert on fields this reader does not copy.
 */
#ifndef KVMESH_TESTS_SUPPORT_JSONL_H
#define KVMESH_TESTS_SUPPORT_JSONL_H

#include <jansson.h>
#include <stddef.h>

#include "tspan.h"

typedef void (*tjsonl_check_fn)(json_t *record, const tspan_t *span, void *arg);

/* Reads at most max records of path into out. Returns how many were read (0 when the file does
 * not exist), or -1 when a line is not a JSON object (said on stderr with the line number). */
long tjsonl_read_spans(const char *path, tspan_t *out, size_t max, tjsonl_check_fn check,
                       void *arg);

/* A string member of a JSON object, "" when absent or not a string. */
const char *tjson_str(json_t *obj, const char *key);

#endif
