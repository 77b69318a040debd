/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c — span lifecycle, head sampling, the bounded export queue and its exporter thread
 * (JSONL capture + OTLP/HTTP JSON via libcurl), and the breakdown ring.
 *
 * Invariants: the queue never holds more than queue_cap records; enqueued = exported-or-dropped
 * + queue_len + in-export; the request path never waits on I/O: it takes `mu` only to copy one
 * record, and the exporter thread never holds `mu` during I/O.
 *
 * Exporter thread states:
 *
 *   RUNNING --(destroy: stop=1, queue drained)--> STOPPED (thread exits, joined by destroy)
 */
#include "obs/trace.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <xxhash.h>

#include "core/bytes.h"
#include "core/hex.h"
#include "env/clock.h"
#include "env/env_thread.h"

struct obs_span_rec {
    const char *name;
    uint8_t trace_id[16], span_id[8], parent_id[8];
    int status;
    uint64_t start_unix_ns, end_unix_ns;
    unsigned nattrs;
    struct obs_span_attr attrs[OBS_SPAN_MAX_ATTRS];
};

struct obs_breakdown_ent {
    const char *name;
    uint8_t trace_id[16];
    uint64_t end_unix_ns;
    int64_t total_ns;
    int64_t stage_ns[OBS_STAGE__COUNT];
};

struct obs_tracer {
    char service[OBS_SPAN_STR_MAX];
    struct obs_registry *metrics; /* borrowed; NULL: span outcomes are not counted */
    char *capture_dir;
    char *otlp_url;
    size_t batch_max;
    uint32_t flush_interval_ms, export_timeout_ms;
    bool debug_records, debug_plain_keys;
    uint64_t key_hash_seed;
    uint64_t sample_ppm; /* atomic: rate * 1e6 */

    pthread_mutex_t mu; /* queue, seqs, breakdown ring, stop */
    pthread_cond_t cv_work, cv_done;
    struct obs_span_rec *q;
    struct obs_span_rec *batch; /* exporter thread's working copy (batch_max records) */
    size_t qcap, qhead, qlen;
    uint64_t enq_seq, done_seq;
    bool flush_req, stop;
    struct obs_breakdown_ent ring[OBS_BREAKDOWN_RING];
    size_t ring_next, ring_len;

    pthread_mutex_t cap_mu; /* capture file */
    FILE *cap;
    char cap_path[512];

    pthread_t thr;
    /* counters (atomic) */
    uint64_t n_sampled, n_enq, n_otlp, n_jsonl, n_drop_q, n_drop_x, n_bok, n_bfail;
};

static inline void cnt(uint64_t *p, uint64_t v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline uint64_t rd(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* ---- context ----------------------------------------------------------------------------- */

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

void obs_trace_ctx_inject(const struct obs_trace_ctx *ctx, uint8_t out[OBS_TRACE_CTX_WIRE_LEN])
{
    /* trace id (16) | parent span id (8) | flags (1) */
    kvm_wr_t w;
    kvm_wr_fixed(&w, out, OBS_TRACE_CTX_WIRE_LEN);
    kvm_wr_bytes(&w, ctx->trace_id, sizeof(ctx->trace_id));
    kvm_wr_bytes(&w, ctx->span_id, sizeof(ctx->span_id));
    kvm_wr_u8(&w, ctx->flags & OBS_TRACE_FLAG_SAMPLED);
    size_t n = 0;
    int rc = kvm_wr_finish(&w, &n);
    KVM_ASSERT(rc == 0 && n == OBS_TRACE_CTX_WIRE_LEN);
}

int obs_trace_ctx_extract(const uint8_t in[OBS_TRACE_CTX_WIRE_LEN], struct obs_trace_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    kvm_rd_t r;
    kvm_rd_init(&r, in, OBS_TRACE_CTX_WIRE_LEN);
    const uint8_t *tid = kvm_rd_bytes(&r, sizeof(ctx->trace_id));
    const uint8_t *sid = kvm_rd_bytes(&r, sizeof(ctx->span_id));
    uint8_t flags = kvm_rd_u8(&r) & OBS_TRACE_FLAG_SAMPLED;
    KVM_ASSERT(kvm_rd_end(&r));
    bool zt = all_zero(tid, sizeof(ctx->trace_id)), zs = all_zero(sid, sizeof(ctx->span_id));
    if (zt && (!zs || flags))
        return kvm_errf(KVMESH_EPROTO, "trace context has a zero trace id but a span id or flags");
    if (!zt && zs)
        return kvm_errf(KVMESH_EPROTO, "trace context has a trace id but a zero parent span id");
    memcpy(ctx->trace_id, tid, sizeof(ctx->trace_id));
    memcpy(ctx->span_id, sid, sizeof(ctx->span_id));
    ctx->flags = flags;
    return 0;
}

bool obs_trace_ctx_present(const struct obs_trace_ctx *ctx)
{
    return !all_zero(ctx->trace_id, 16);
}

/* ---- ids, clocks, sampling --------------------------------------------------------------- */

static _Thread_local uint64_t tls_rng[2];

static uint64_t rng_next(void)
{
    if (KVM_UNLIKELY(tls_rng[0] == 0 && tls_rng[1] == 0)) {
        if (getrandom(tls_rng, sizeof(tls_rng), 0) != (ssize_t)sizeof(tls_rng) ||
            (tls_rng[0] | tls_rng[1]) == 0) {
            tls_rng[0] = (uint64_t)(uintptr_t)&tls_rng ^ 0x9e3779b97f4a7c15ull;
            tls_rng[1] = (uint64_t)time(NULL) | 1;
        }
    }
    /* xorshift128+ */
    uint64_t s1 = tls_rng[0];
    const uint64_t s0 = tls_rng[1];
    tls_rng[0] = s0;
    s1 ^= s1 << 23;
    tls_rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return tls_rng[1] + s0;
}

static void rand_id(uint8_t *out, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = rng_next();
            memcpy(out + i, &r, KVM_MIN((size_t)8, n - i));
        }
    } while (all_zero(out, n));
}

static uint8_t stage_of(const char *name)
{
    if (strncmp(name, "store.", 6) == 0)
        return OBS_STAGE_STORE;
    if (strncmp(name, "control.", 8) == 0)
        return OBS_STAGE_CONTROL;
    if (strncmp(name, "data.", 5) == 0)
        return OBS_STAGE_DATA;
    if (strncmp(name, "metadata.", 9) == 0)
        return OBS_STAGE_METADATA;
    kvm_assert_fail("span name must start with store., control., data. or metadata.", __FILE__,
                    __LINE__, name);
}

/* Unix time = monotonic + offset, sampled once per process: one clock read per span edge. */
static int64_t unix_offset_ns;
static pthread_once_t unix_offset_once = PTHREAD_ONCE_INIT;
static void unix_offset_init(void)
{
    unix_offset_ns = (int64_t)env_clock_ns(CLOCK_REALTIME) - (int64_t)env_clock_mono_ns();
}

static void span_init(struct obs_tracer *t, const char *name, struct obs_span *s)
{
    memset(s, 0, offsetof(struct obs_span, attrs));
    s->root = NULL;
    memset(s->stage_ns, 0, sizeof(s->stage_ns));
    s->tracer = t;
    s->name = name;
    s->stage = stage_of(name);
    rand_id(s->span_id, 8);
}

/* Clocks are read only for sampled spans: an unsampled span costs no clock read. */
static void span_clock(struct obs_span *s)
{
    if (!obs_span_sampled(s))
        return;
    pthread_once(&unix_offset_once, unix_offset_init);
    s->start_mono_ns = env_clock_mono_ns();
    s->start_unix_ns = (uint64_t)((int64_t)s->start_mono_ns + unix_offset_ns);
}

static void start_root(struct obs_tracer *t, struct obs_span *s)
{
    rand_id(s->trace_id, 16);
    uint64_t ppm = t ? __atomic_load_n(&t->sample_ppm, __ATOMIC_RELAXED) : 0;
    if (ppm >= 1000000 || (ppm > 0 && rng_next() % 1000000 < ppm))
        s->flags = OBS_TRACE_FLAG_SAMPLED;
    s->root = s;
}

void obs_span_start(struct obs_tracer *t, struct obs_span *parent, const char *name,
                    struct obs_span *out)
{
    span_init(t, name, out);
    if (!parent) {
        start_root(t, out);
    } else {
        memcpy(out->trace_id, parent->trace_id, 16);
        memcpy(out->parent_id, parent->span_id, 8);
        out->flags = parent->flags;
        out->parent_stage = parent->stage;
        out->root = parent->root ? parent->root : parent;
    }
    if (!t)
        out->flags = 0; /* tracing off: never sampled, context still propagated */
    span_clock(out);
    if (obs_span_sampled(out))
        cnt(&t->n_sampled, 1);
}

void obs_span_start_remote(struct obs_tracer *t, const struct obs_trace_ctx *ctx, const char *name,
                           struct obs_span *out)
{
    span_init(t, name, out);
    if (!ctx || !obs_trace_ctx_present(ctx)) {
        start_root(t, out);
    } else {
        memcpy(out->trace_id, ctx->trace_id, 16);
        memcpy(out->parent_id, ctx->span_id, 8);
        out->flags = ctx->flags & OBS_TRACE_FLAG_SAMPLED;
        out->remote_parent = true;
        out->root = out;
    }
    if (!t)
        out->flags = 0; /* tracing off: never sampled, context still propagated */
    span_clock(out);
    if (obs_span_sampled(out))
        cnt(&t->n_sampled, 1);
}

void obs_span_context(const struct obs_span *s, struct obs_trace_ctx *ctx)
{
    memcpy(ctx->trace_id, s->trace_id, 16);
    memcpy(ctx->span_id, s->span_id, 8);
    ctx->flags = s->flags;
}

static struct obs_span_attr *attr_slot(struct obs_span *s, const char *key)
{
    for (unsigned i = 0; i < s->nattrs; i++)
        if (s->attrs[i].key == key || strcmp(s->attrs[i].key, key) == 0)
            return &s->attrs[i];
    if (s->nattrs >= OBS_SPAN_MAX_ATTRS)
        return NULL;
    struct obs_span_attr *a = &s->attrs[s->nattrs++];
    a->key = key;
    return a;
}

void obs_span_set_int(struct obs_span *s, const char *key, int64_t v)
{
    if (!obs_span_sampled(s))
        return;
    struct obs_span_attr *a = attr_slot(s, key);
    if (a) {
        a->is_str = false;
        a->i = v;
    }
}

void obs_span_set_str(struct obs_span *s, const char *key, const char *v)
{
    if (!obs_span_sampled(s))
        return;
    struct obs_span_attr *a = attr_slot(s, key);
    if (a) {
        a->is_str = true;
        snprintf(a->s, sizeof(a->s), "%s", v);
    }
}

void obs_span_set_key(struct obs_span *s, const void *key, size_t len)
{
    struct obs_tracer *t = s->tracer;
    if (!obs_span_sampled(s) || !t->debug_records)
        return;
    if (t->debug_plain_keys) {
        char tmp[OBS_SPAN_STR_MAX];
        size_t n = KVM_MIN(len, sizeof(tmp) - 1);
        memcpy(tmp, key, n);
        tmp[n] = '\0';
        obs_span_set_str(s, "kvmesh.key", tmp);
    } else {
        uint64_t h = XXH3_64bits_withSeed(key, len, t->key_hash_seed);
        char hex[17];
        snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
        obs_span_set_str(s, "kvmesh.key_hash", hex);
    }
    obs_span_set_int(s, "kvmesh.key_len", (int64_t)len);
}

void obs_span_set_status(struct obs_span *s, int rc)
{
    s->status = rc;
}

static void ring_push(struct obs_tracer *t, const struct obs_span *s, int64_t total)
{
    struct obs_breakdown_ent *e = &t->ring[t->ring_next];
    e->name = s->name;
    memcpy(e->trace_id, s->trace_id, 16);
    e->end_unix_ns = s->end_unix_ns;
    e->total_ns = total;
    for (int i = 0; i < OBS_STAGE__COUNT; i++)
        e->stage_ns[i] = __atomic_load_n(&s->stage_ns[i], __ATOMIC_RELAXED);
    t->ring_next = (t->ring_next + 1) % OBS_BREAKDOWN_RING;
    if (t->ring_len < OBS_BREAKDOWN_RING)
        t->ring_len++;
}

void obs_span_end(struct obs_span *s)
{
    struct obs_tracer *t = s->tracer;
    if (!obs_span_sampled(s))
        return;
    uint64_t dur = env_clock_mono_ns() - s->start_mono_ns;
    s->end_unix_ns = s->start_unix_ns + dur;
    struct obs_span *root = s->root;
    __atomic_fetch_add(&root->stage_ns[s->stage], (int64_t)dur, __ATOMIC_RELAXED);
    if (root != s)
        __atomic_fetch_sub(&root->stage_ns[s->parent_stage], (int64_t)dur, __ATOMIC_RELAXED);
    bool want_export = t->otlp_url != NULL || __atomic_load_n(&t->cap, __ATOMIC_RELAXED) != NULL;
    pthread_mutex_lock(&t->mu);
    if (root == s)
        ring_push(t, s, (int64_t)dur);
    if (want_export) {
        if (t->qlen >= t->qcap) {
            cnt(&t->n_drop_q, 1);
            obs_count(t->metrics, trace_spans_total, OBS_SPANRES_DROPPED_QUEUE_FULL, OBS_NONE, 1);
        } else {
            struct obs_span_rec *r = &t->q[(t->qhead + t->qlen) % t->qcap];
            r->name = s->name;
            memcpy(r->trace_id, s->trace_id, 16);
            memcpy(r->span_id, s->span_id, 8);
            memcpy(r->parent_id, s->parent_id, 8);
            r->status = s->status;
            r->start_unix_ns = s->start_unix_ns;
            r->end_unix_ns = s->end_unix_ns;
            r->nattrs = s->nattrs;
            memcpy(r->attrs, s->attrs, s->nattrs * sizeof(s->attrs[0]));
            t->qlen++;
            t->enq_seq++;
            cnt(&t->n_enq, 1);
            if (t->qlen >= t->batch_max)
                pthread_cond_signal(&t->cv_work);
        }
    }
    pthread_mutex_unlock(&t->mu);
}

/* ---- encoders ---------------------------------------------------------------------------- */

static void jsonl_line(struct obs_tracer *t, const struct obs_span_rec *r, struct obs_buf *b)
{
    char tid[33], sid[17], pid[17];
    kvm_hex_encode(r->trace_id, 16, tid);
    kvm_hex_encode(r->span_id, 8, sid);
    kvm_hex_encode(r->parent_id, 8, pid);
    obs_buf_printf(b, "{\"trace_id\":\"%s\",\"span_id\":\"%s\",\"parent_span_id\":\"%s\",", tid,
                   sid, all_zero(r->parent_id, 8) ? "" : pid);
    obs_buf_puts(b, "\"name\":");
    obs_buf_json_str(b, r->name, strlen(r->name));
    obs_buf_puts(b, ",\"service\":");
    obs_buf_json_str(b, t->service, strlen(t->service));
    obs_buf_printf(b,
                   ",\"start_unix_nano\":%llu,\"end_unix_nano\":%llu,\"status\":\"%s\","
                   "\"error\":\"%s\",\"attrs\":{",
                   (unsigned long long)r->start_unix_ns, (unsigned long long)r->end_unix_ns,
                   r->status ? "error" : "ok", r->status ? kvmesh_errname(r->status) : "");
    for (unsigned i = 0; i < r->nattrs; i++) {
        if (i)
            obs_buf_puts(b, ",");
        obs_buf_json_str(b, r->attrs[i].key, strlen(r->attrs[i].key));
        obs_buf_puts(b, ":");
        if (r->attrs[i].is_str)
            obs_buf_json_str(b, r->attrs[i].s, strlen(r->attrs[i].s));
        else
            obs_buf_printf(b, "%lld", (long long)r->attrs[i].i);
    }
    obs_buf_puts(b, "}}\n");
}

static void otlp_body(struct obs_tracer *t, const struct obs_span_rec *recs, size_t n,
                      struct obs_buf *b)
{
    obs_buf_append(b,
                   "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
                   "\"value\":{\"stringValue\":",
                   strlen("{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service."
                          "name\",\"value\":{\"stringValue\":"));
    obs_buf_json_str(b, t->service, strlen(t->service));
    obs_buf_printf(b,
                   "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"kvmesh\",\"version\":\"%s\"},"
                   "\"spans\":[",
                   kvmesh_version());
    for (size_t k = 0; k < n; k++) {
        const struct obs_span_rec *r = &recs[k];
        char tid[33], sid[17], pid[17];
        kvm_hex_encode(r->trace_id, 16, tid);
        kvm_hex_encode(r->span_id, 8, sid);
        kvm_hex_encode(r->parent_id, 8, pid);
        obs_buf_printf(b, "%s{\"traceId\":\"%s\",\"spanId\":\"%s\",\"parentSpanId\":\"%s\",",
                       k ? "," : "", tid, sid, all_zero(r->parent_id, 8) ? "" : pid);
        obs_buf_puts(b, "\"name\":");
        obs_buf_json_str(b, r->name, strlen(r->name));
        obs_buf_printf(b,
                       ",\"kind\":%d,\"startTimeUnixNano\":\"%llu\",\"endTimeUnixNano\":\"%llu\","
                       "\"status\":{\"code\":%d},\"attributes\":[",
                       strncmp(r->name, "store.", 6) == 0 ? 2 : 1,
                       (unsigned long long)r->start_unix_ns, (unsigned long long)r->end_unix_ns,
                       r->status ? 2 : 1);
        for (unsigned i = 0; i < r->nattrs; i++) {
            obs_buf_puts(b, i ? ",{\"key\":" : "{\"key\":");
            obs_buf_json_str(b, r->attrs[i].key, strlen(r->attrs[i].key));
            if (r->attrs[i].is_str) {
                obs_buf_puts(b, ",\"value\":{\"stringValue\":");
                obs_buf_json_str(b, r->attrs[i].s, strlen(r->attrs[i].s));
                obs_buf_puts(b, "}}");
            } else {
                obs_buf_printf(b, ",\"value\":{\"intValue\":\"%lld\"}}", (long long)r->attrs[i].i);
            }
        }
        obs_buf_puts(b, "]}");
    }
    obs_buf_puts(b, "]}]}]}");
}

/* ---- exporter thread --------------------------------------------------------------------- */

static size_t curl_sink(char *p, size_t sz, size_t n, void *u)
{
    (void)p;
    (void)u;
    return sz * n;
}

static bool otlp_post(struct obs_tracer *t, CURL *c, const struct obs_buf *body)
{
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, t->otlp_url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body->len);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)t->export_timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)KVM_MAX(t->export_timeout_ms / 4, 1u));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, curl_sink);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return rc == CURLE_OK && code >= 200 && code < 300;
}

/* Returns false when the OTLP export failed (the batch is dropped and counted). When skip_otlp
 * is set (stopping after a failure) the batch is dropped without trying. */
static bool export_batch(struct obs_tracer *t, CURL *c, const struct obs_span_rec *recs, size_t n,
                         bool skip_otlp)
{
    struct obs_buf b;
    pthread_mutex_lock(&t->cap_mu);
    if (t->cap) {
        obs_buf_init(&b, (size_t)16 << 20);
        for (size_t i = 0; i < n; i++)
            jsonl_line(t, &recs[i], &b);
        bool wrote =
            !b.overflow && fwrite(b.data, 1, b.len, t->cap) == b.len && fflush(t->cap) == 0;
        if (wrote)
            cnt(&t->n_jsonl, n);
        /* without OTLP the capture is the exporter: its outcome is the spans' outcome */
        if (!t->otlp_url)
            obs_count(t->metrics, trace_spans_total,
                      wrote ? OBS_SPANRES_EXPORTED : OBS_SPANRES_DROPPED_EXPORT_FAILED, OBS_NONE,
                      n);
        obs_buf_free(&b);
    }
    pthread_mutex_unlock(&t->cap_mu);
    if (!t->otlp_url)
        return true;
    bool ok = false;
    if (!skip_otlp) {
        obs_buf_init(&b, (size_t)32 << 20);
        otlp_body(t, recs, n, &b);
        ok = c && !b.overflow && otlp_post(t, c, &b);
        obs_buf_free(&b);
    }
    if (ok) {
        cnt(&t->n_otlp, n);
        cnt(&t->n_bok, 1);
        obs_count(t->metrics, trace_spans_total, OBS_SPANRES_EXPORTED, OBS_NONE, n);
    } else {
        cnt(&t->n_drop_x, n);
        cnt(&t->n_bfail, 1);
        obs_count(t->metrics, trace_spans_total, OBS_SPANRES_DROPPED_EXPORT_FAILED, OBS_NONE, n);
    }
    return ok;
}

static void *exporter_main(void *arg)
{
    struct obs_tracer *t = arg;
    CURL *c = t->otlp_url ? curl_easy_init() : NULL;
    struct obs_span_rec *batch = t->batch;
    bool failed = false;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (failed && !t->stop && !t->flush_req) {
            /* back off after a failed export: a dead collector must not make this thread spin
             * on the queue lock; meanwhile the bounded queue fills and producers drop */
            struct timespec ts;
            env_clock_after(CLOCK_REALTIME, t->flush_interval_ms, &ts);
            while (!t->stop && !t->flush_req &&
                   pthread_cond_timedwait(&t->cv_work, &t->mu, &ts) != ETIMEDOUT)
                ;
        }
        if (t->qlen == 0) {
            if (t->stop)
                break;
            t->flush_req = false;
            pthread_cond_broadcast(&t->cv_done);
        }
        if (t->qlen < t->batch_max && !t->stop && !t->flush_req) {
            struct timespec ts;
            env_clock_after(CLOCK_REALTIME, t->flush_interval_ms, &ts);
            int w = pthread_cond_timedwait(&t->cv_work, &t->mu, &ts);
            if (w != ETIMEDOUT && t->qlen < t->batch_max && !t->stop && !t->flush_req)
                continue;
            if (t->qlen == 0)
                continue;
        }
        size_t n = KVM_MIN(t->qlen, t->batch_max);
        for (size_t i = 0; i < n; i++)
            batch[i] = t->q[(t->qhead + i) % t->qcap];
        t->qhead = (t->qhead + n) % t->qcap;
        t->qlen -= n;
        bool skip = failed && t->stop; /* do not hold up shutdown on a dead collector */
        pthread_mutex_unlock(&t->mu);
        failed = !export_batch(t, c, batch, n, skip);
        pthread_mutex_lock(&t->mu);
        t->done_seq += n;
        pthread_cond_broadcast(&t->cv_done);
    }
    pthread_cond_broadcast(&t->cv_done);
    pthread_mutex_unlock(&t->mu);
    if (c)
        curl_easy_cleanup(c);
    return NULL;
}

/* ---- lifecycle and control --------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool capture_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 64 || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

int obs_tracer_set_sample_rate(struct obs_tracer *t, double rate)
{
    if (!(rate >= 0.0 && rate <= 1.0))
        return kvm_errf(KVMESH_EINVAL, "sample rate must be within [0, 1]");
    __atomic_store_n(&t->sample_ppm, (uint64_t)(rate * 1e6 + 0.5), __ATOMIC_RELAXED);
    return 0;
}

double obs_tracer_sample_rate(const struct obs_tracer *t)
{
    return (double)__atomic_load_n(&t->sample_ppm, __ATOMIC_RELAXED) / 1e6;
}

int obs_tracer_capture_start(struct obs_tracer *t, const char *name)
{
    if (!t->capture_dir)
        return kvm_errf(KVMESH_ENOTSUP, "no capture directory configured for this runtime");
    if (!capture_name_valid(name))
        return kvm_errf(KVMESH_EINVAL,
                        "capture name must be 1-64 characters of [A-Za-z0-9._-], not starting "
                        "with '.'");
    char path[512];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", t->capture_dir, name) >= sizeof(path))
        return kvm_errf(KVMESH_EINVAL, "capture path too long");
    FILE *f = fopen(path, "a");
    if (!f)
        return kvm_errf(KVMESH_EIO, "cannot open capture file %s: %s", path, strerror(errno));
    pthread_mutex_lock(&t->cap_mu);
    FILE *old = t->cap;
    __atomic_store_n(&t->cap, f, __ATOMIC_RELAXED);
    snprintf(t->cap_path, sizeof(t->cap_path), "%s", path);
    pthread_mutex_unlock(&t->cap_mu);
    if (old)
        fclose(old);
    return 0;
}

void obs_tracer_capture_stop(struct obs_tracer *t)
{
    pthread_mutex_lock(&t->cap_mu);
    FILE *old = t->cap;
    __atomic_store_n(&t->cap, NULL, __ATOMIC_RELAXED);
    t->cap_path[0] = '\0';
    pthread_mutex_unlock(&t->cap_mu);
    if (old)
        fclose(old);
}

int obs_tracer_create(const struct obs_tracer_config *cfg, struct obs_tracer **out)
{
    int rc;
    *out = NULL;
    if (!cfg->service || !cfg->service[0] || strlen(cfg->service) >= OBS_SPAN_STR_MAX)
        return kvm_errf(KVMESH_EINVAL, "tracer service name must be 1-%d bytes",
                        OBS_SPAN_STR_MAX - 1);
    if (cfg->queue_cap > OBS_TRACE_QUEUE_MAX || cfg->batch_max > OBS_TRACE_BATCH_MAX)
        return kvm_errf(KVMESH_EINVAL, "tracer queue_cap <= %d and batch_max <= %d required",
                        OBS_TRACE_QUEUE_MAX, OBS_TRACE_BATCH_MAX);
    if (!(cfg->sample_rate >= 0.0 && cfg->sample_rate <= 1.0))
        return kvm_errf(KVMESH_EINVAL, "sample rate must be within [0, 1]");
    pthread_once(&curl_once, curl_init_once);
    struct obs_tracer *t = obs_calloc(1, sizeof(*t));
    if (!t)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for a tracer");
    snprintf(t->service, sizeof(t->service), "%s", cfg->service);
    t->metrics = cfg->metrics;
    t->qcap = cfg->queue_cap ? cfg->queue_cap : 4096;
    t->batch_max = cfg->batch_max ? cfg->batch_max : 256;
    t->flush_interval_ms = cfg->flush_interval_ms ? cfg->flush_interval_ms : 200;
    t->export_timeout_ms = cfg->export_timeout_ms ? cfg->export_timeout_ms : 1000;
    t->debug_records = cfg->debug_records;
    t->debug_plain_keys = cfg->debug_records && cfg->debug_plain_keys;
    t->key_hash_seed = cfg->key_hash_seed;
    t->sample_ppm = (uint64_t)(cfg->sample_rate * 1e6 + 0.5);
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->cap_mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_done, NULL);
    t->q = obs_calloc(t->qcap, sizeof(*t->q));
    t->batch = obs_calloc(t->batch_max, sizeof(*t->batch));
    t->capture_dir = cfg->capture_dir ? obs_strdup(cfg->capture_dir) : NULL;
    t->otlp_url = cfg->otlp_url ? obs_strdup(cfg->otlp_url) : NULL;
    if (!t->q || !t->batch || (cfg->capture_dir && !t->capture_dir) ||
        (cfg->otlp_url && !t->otlp_url)) {
        rc = kvm_errf(KVMESH_ENOMEM, "out of memory for a tracer");
        goto fail;
    }
    if (cfg->capture_name && (rc = obs_tracer_capture_start(t, cfg->capture_name)) != 0)
        goto fail;
    if (env_thread_create(&t->thr, exporter_main, t) != 0) {
        rc = kvm_errf(KVMESH_ENOMEM, "cannot start the trace exporter thread");
        goto fail;
    }
    *out = t;
    return 0;
fail:
    obs_tracer_capture_stop(t);
    free(t->q);
    free(t->batch);
    free(t->capture_dir);
    free(t->otlp_url);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->cap_mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_done);
    free(t);
    return rc;
}

void obs_tracer_destroy(struct obs_tracer *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thr, NULL);
    obs_tracer_capture_stop(t);
    free(t->q);
    free(t->batch);
    free(t->capture_dir);
    free(t->otlp_url);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->cap_mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_done);
    free(t);
}

int obs_tracer_flush(struct obs_tracer *t, uint32_t timeout_ms)
{
    struct timespec ts;
    env_clock_after(CLOCK_REALTIME, timeout_ms, &ts);
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    uint64_t target = t->enq_seq;
    t->flush_req = true;
    pthread_cond_signal(&t->cv_work);
    while (t->done_seq < target) {
        if (pthread_cond_timedwait(&t->cv_done, &t->mu, &ts) == ETIMEDOUT) {
            rc = KVMESH_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void obs_tracer_stats(struct obs_tracer *t, struct obs_tracer_stats *o)
{
    memset(o, 0, sizeof(*o));
    o->spans_sampled = rd(&t->n_sampled);
    o->spans_enqueued = rd(&t->n_enq);
    o->exported_otlp = rd(&t->n_otlp);
    o->exported_jsonl = rd(&t->n_jsonl);
    o->dropped_queue_full = rd(&t->n_drop_q);
    o->dropped_export_failed = rd(&t->n_drop_x);
    o->batches_ok = rd(&t->n_bok);
    o->batches_failed = rd(&t->n_bfail);
    pthread_mutex_lock(&t->mu);
    o->queue_len = t->qlen;
    o->queue_cap = t->qcap;
    pthread_mutex_unlock(&t->mu);
    o->capturing = __atomic_load_n(&t->cap, __ATOMIC_RELAXED) != NULL;
    o->sample_rate = obs_tracer_sample_rate(t);
}

static const char *const stage_names[OBS_STAGE__COUNT] = {"store", "control", "data", "metadata"};

void obs_tracer_breakdown_json(struct obs_tracer *t, unsigned limit, struct obs_buf *b)
{
    pthread_mutex_lock(&t->mu);
    size_t n = KVM_MIN((size_t)limit, t->ring_len);
    obs_buf_printf(b, "{\"schema\":1,\"capacity\":%d,\"recorded\":%zu,\"entries\":[",
                   OBS_BREAKDOWN_RING, t->ring_len);
    for (size_t k = 0; k < n; k++) {
        const struct obs_breakdown_ent *e =
            &t->ring[(t->ring_next + OBS_BREAKDOWN_RING - 1 - k) % OBS_BREAKDOWN_RING];
        char tid[33];
        kvm_hex_encode(e->trace_id, 16, tid);
        obs_buf_printf(b, "%s{\"trace_id\":\"%s\",\"name\":", k ? "," : "", tid);
        obs_buf_json_str(b, e->name, strlen(e->name));
        obs_buf_printf(b, ",\"end_unix_nano\":%llu,\"total_us\":%.3f,\"stages_us\":{",
                       (unsigned long long)e->end_unix_ns, (double)e->total_ns / 1e3);
        for (int i = 0; i < OBS_STAGE__COUNT; i++)
            obs_buf_printf(b, "%s\"%s\":%.3f", i ? "," : "", stage_names[i],
                           (double)e->stage_ns[i] / 1e3);
        obs_buf_puts(b, "}}");
    }
    obs_buf_puts(b, "]}");
    pthread_mutex_unlock(&t->mu);
}

size_t obs_tracer_breakdown_sum(struct obs_tracer *t, const char *name, uint64_t since_unix_ns,
                                int64_t *total_ns, int64_t stage_ns[OBS_STAGE__COUNT])
{
    size_t n = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t k = 0; k < t->ring_len; k++) {
        const struct obs_breakdown_ent *e = &t->ring[k];
        if (e->end_unix_ns < since_unix_ns || strcmp(e->name, name) != 0)
            continue;
        n++;
        *total_ns += e->total_ns;
        for (int i = 0; i < OBS_STAGE__COUNT; i++)
            stage_ns[i] += e->stage_ns[i];
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

void obs_tracer_status_json(struct obs_tracer *t, struct obs_buf *b)
{
    struct obs_tracer_stats s;
    obs_tracer_stats(t, &s);
    char path[512];
    pthread_mutex_lock(&t->cap_mu);
    snprintf(path, sizeof(path), "%s", t->cap_path);
    pthread_mutex_unlock(&t->cap_mu);
    obs_buf_printf(b, "{\"sample_rate\":%.6f,\"capturing\":%s,\"capture_file\":", s.sample_rate,
                   s.capturing ? "true" : "false");
    obs_buf_json_str(b, path, strlen(path));
    obs_buf_printf(b,
                   ",\"otlp\":%s,\"spans_sampled\":%llu,"
                   "\"spans_enqueued\":%llu,\"exported_otlp\":%llu,\"exported_jsonl\":%llu,"
                   "\"dropped_queue_full\":%llu,\"dropped_export_failed\":%llu,"
                   "\"queue_len\":%zu,\"queue_cap\":%zu}",
                   t->otlp_url ? "true" : "false", (unsigned long long)s.spans_sampled,
                   (unsigned long long)s.spans_enqueued, (unsigned long long)s.exported_otlp,
                   (unsigned long long)s.exported_jsonl, (unsigned long long)s.dropped_queue_full,
                   (unsigned long long)s.dropped_export_failed, s.queue_len, s.queue_cap);
}
