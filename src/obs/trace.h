/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.h — tracing: spans named store.* (API), control.* (control plane), data.* (data plane)
 * and metadata.* (metadata backend); W3C-style trace context carried in RPC frames as exactly
 * OBS_TRACE_CTX_WIRE_LEN (25) bytes; head sampling at the root with a runtime-adjustable rate;
 * exporters to a local JSONL capture file and to an OTLP/HTTP (JSON) collector; a bounded ring
 * of recent sampled requests with their latency breakdown by stage (for /breakdown).
 *
 * Wire context (25 bytes, big-endian byte strings as they appear in the frame header):
 *   [0..15]  trace id (16 bytes; all zero = no context)
 *   [16..23] parent span id (8 bytes; the sender's current span)
 *   [24]     flags (bit 0 = sampled; other bits reserved, sent as 0, ignored on receipt)
 *
 * Sampling: the root span (obs_span_start with parent NULL, or obs_span_start_remote with an
 * empty context) decides with probability `sample_rate`; every descendant, local or remote,
 * inherits the decision through the flags, so one sampled request yields one connected trace
 * across runtimes and an unsampled one yields no spans anywhere.
 *
 * Export pipeline: obs_span_end() of a sampled span copies a fixed-size record into a bounded
 * queue (one short mutex hold, no allocation, no I/O). One background thread per tracer drains
 * it in batches of at most batch_max, appends JSONL lines to the capture file when a capture is
 * active, and POSTs an OTLP JSON ExportTraceServiceRequest with libcurl (bounded connect and
 * total timeouts). When the queue is full the span is dropped and counted
 * (dropped_queue_full); a failed POST drops its batch and counts it (dropped_export_failed).
 * A slow or dead collector therefore costs requests nothing but lost spans.
 *
 * Ownership: struct obs_span lives in the caller (usually on the stack) from start to end;
 * names and attribute keys must be static strings (string literals); string attribute values
 * are copied (truncated to OBS_SPAN_STR_MAX - 1 bytes). A local child must end before its
 * parent (they share the root's breakdown accumulators).
 *
 * Threading: spans may start and end on any thread; a span object is used by one thread at a
 * time. All obs_tracer_* calls are thread-safe.
 *
 * Per-item debug records: off by default. With debug_records on, obs_span_set_key() attaches
 * the object key as `kvmesh.key_hash` (XXH3-64 with key_hash_seed, hex); only with
 * debug_plain_keys also on does it attach the key itself (`kvmesh.key`, truncated).
 */
#ifndef KVMESH_OBS_TRACE_H
#define KVMESH_OBS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obs/metrics.h"

#define OBS_TRACE_CTX_WIRE_LEN 25
#define OBS_TRACE_FLAG_SAMPLED 0x01

#define OBS_SPAN_MAX_ATTRS  8
#define OBS_SPAN_STR_MAX    64
#define OBS_TRACE_QUEUE_MAX 65536 /* largest queue_cap */
#define OBS_TRACE_BATCH_MAX 1024  /* largest batch_max */
#define OBS_BREAKDOWN_RING  128   /* recent sampled requests kept for /breakdown */

struct obs_trace_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8]; /* the parent span for the receiver */
    uint8_t flags;
};

/* Writes exactly OBS_TRACE_CTX_WIRE_LEN bytes. */
void obs_trace_ctx_inject(const struct obs_trace_ctx *ctx, uint8_t out[OBS_TRACE_CTX_WIRE_LEN]);
/* Reads exactly OBS_TRACE_CTX_WIRE_LEN bytes. Returns 0 (an all-zero block is a valid "no
 * context"), or KVMESH_EPROTO when the block is inconsistent: a zero trace id with a non-zero
 * span id or the sampled flag, or a non-zero trace id with a zero span id. */
int obs_trace_ctx_extract(const uint8_t in[OBS_TRACE_CTX_WIRE_LEN], struct obs_trace_ctx *ctx);
bool obs_trace_ctx_present(const struct obs_trace_ctx *ctx);

enum obs_stage {
    OBS_STAGE_STORE,
    OBS_STAGE_CONTROL,
    OBS_STAGE_DATA,
    OBS_STAGE_METADATA,
    OBS_STAGE__COUNT
};

struct obs_span_attr {
    const char *key; /* static */
    bool is_str;
    int64_t i;
    char s[OBS_SPAN_STR_MAX];
};

struct obs_tracer;

struct obs_span {
    struct obs_tracer *tracer;
    const char *name; /* static */
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t parent_id[8]; /* zero for a root */
    uint8_t flags;
    bool remote_parent;
    uint8_t stage, parent_stage;
    int status;                                         /* 0 or a KVMESH_E* code */
    uint64_t start_unix_ns, start_mono_ns, end_unix_ns; /* sampled spans only (else 0) */
    unsigned nattrs;
    struct obs_span_attr attrs[OBS_SPAN_MAX_ATTRS];
    struct obs_span *root;              /* local root (itself for a root); breakdown accumulators */
    int64_t stage_ns[OBS_STAGE__COUNT]; /* in the local root: exclusive time per stage */
};

struct obs_tracer_config {
    const char *service;          /* runtime name (resource service.name); copied; required */
    double sample_rate;           /* 0..1 */
    const char *capture_dir;      /* where capture files go (control endpoint); NULL: none */
    const char *capture_name;     /* start a capture at create: capture_dir/capture_name */
    const char *otlp_url;         /* e.g. http://127.0.0.1:4318/v1/traces; NULL: no OTLP */
    size_t queue_cap;             /* spans; 0: 4096; at most OBS_TRACE_QUEUE_MAX */
    size_t batch_max;             /* spans per export; 0: 256; at most OBS_TRACE_BATCH_MAX */
    uint32_t flush_interval_ms;   /* export at least this often when spans wait; 0: 200 */
    uint32_t export_timeout_ms;   /* whole OTLP POST; 0: 1000 (connect: a quarter of it) */
    bool debug_records;           /* per-item records (obs_span_set_key) */
    bool debug_plain_keys;        /* plain keys instead of hashes (needs debug_records) */
    uint64_t key_hash_seed;       /* deployment-wide, so hashes match across runtimes */
    struct obs_registry *metrics; /* borrowed, outlives the tracer; counts trace_spans_total */
};

/* Creates a tracer and starts its exporter thread. The caller owns *out and must destroy it.
 * Errors: KVMESH_EINVAL (bad rate, sizes, names), KVMESH_EIO (capture file), KVMESH_ENOMEM. */
int obs_tracer_create(const struct obs_tracer_config *cfg, struct obs_tracer **out);
/* Exports what is queued (bounded by export_timeout_ms per batch), stops the thread, closes
 * the capture and frees. No span of this tracer may be in progress. NULL is a no-op. */
void obs_tracer_destroy(struct obs_tracer *t);

/* Starts a span: a child of `parent` (same tracer or another one in the process), or a new
 * root when parent is NULL (head sampling happens here). Never fails. t may be NULL (tracing
 * off): the span is never sampled but still carries ids, so contexts keep propagating. */
void obs_span_start(struct obs_tracer *t, struct obs_span *parent, const char *name,
                    struct obs_span *out);
/* Starts a span whose parent is the remote span in ctx (from obs_trace_ctx_extract); an
 * absent context starts a new root. The span is a local root for the breakdown ring. */
void obs_span_start_remote(struct obs_tracer *t, const struct obs_trace_ctx *ctx, const char *name,
                           struct obs_span *out);
/* The context to put in an outgoing frame: this span's trace id and span id, and flags. */
void obs_span_context(const struct obs_span *s, struct obs_trace_ctx *ctx);
static inline bool obs_span_sampled(const struct obs_span *s)
{
    return (s->flags & OBS_TRACE_FLAG_SAMPLED) != 0;
}
void obs_span_set_int(struct obs_span *s, const char *key, int64_t v);
void obs_span_set_str(struct obs_span *s, const char *key, const char *v);
void obs_span_set_key(struct obs_span *s, const void *key, size_t len);
void obs_span_set_status(struct obs_span *s, int rc);
/* Ends the span; a sampled span is queued for export, a sampled local root also enters the
 * breakdown ring. */
void obs_span_end(struct obs_span *s);

/* Runtime control (the /trace endpoints). */
int obs_tracer_set_sample_rate(struct obs_tracer *t, double rate);
double obs_tracer_sample_rate(const struct obs_tracer *t);
/* Starts a JSONL capture into capture_dir/name (name: 1..64 of [A-Za-z0-9._-], not starting
 * with '.'), replacing a running one. Errors: KVMESH_EINVAL, KVMESH_ENOTSUP (no capture_dir),
 * KVMESH_EIO. */
int obs_tracer_capture_start(struct obs_tracer *t, const char *name);
void obs_tracer_capture_stop(struct obs_tracer *t);

/* Waits until every span queued before the call has been exported or dropped, or timeout_ms
 * passed. Returns 0 or KVMESH_ETIMEDOUT. */
int obs_tracer_flush(struct obs_tracer *t, uint32_t timeout_ms);

struct obs_tracer_stats {
    uint64_t spans_sampled, spans_enqueued; /* sampled spans started; queued for export */
    uint64_t exported_otlp, exported_jsonl;
    uint64_t dropped_queue_full, dropped_export_failed;
    uint64_t batches_ok, batches_failed;
    size_t queue_len, queue_cap;
    bool capturing;
    double sample_rate;
};
void obs_tracer_stats(struct obs_tracer *t, struct obs_tracer_stats *out);

/* Appends the /breakdown JSON object (newest first, at most `limit` entries, each with the
 * trace id, root span name, total and exclusive per-stage microseconds). */
void obs_tracer_breakdown_json(struct obs_tracer *t, unsigned limit, struct obs_buf *b);
/* Sums the breakdown ring entries named `name` that ended at or after since_unix_ns: adds their
 * total and per-stage exclusive times (ns) to *total_ns and stage_ns[] and returns how many
 * there were (at most OBS_BREAKDOWN_RING: the most recent ones). For `kvmesh bench --breakdown`. */
size_t obs_tracer_breakdown_sum(struct obs_tracer *t, const char *name, uint64_t since_unix_ns,
                                int64_t *total_ns, int64_t stage_ns[OBS_STAGE__COUNT]);
/* Appends the tracer status JSON object (rate, capture, exporter counters). */
void obs_tracer_status_json(struct obs_tracer *t, struct obs_buf *b);

#endif
