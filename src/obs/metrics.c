/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c — storage, per-thread shards, aggregation and Prometheus text for the families
 * declared in metrics.h, the bounded per-tenant label table, /proc/self process figures, and the
 * capped output buffer used by every obs renderer.
 *
 * Invariants: shard memory is never freed while the process runs (a freed registry returns its
 * shards to the pool); a shard is on at most one registry's list, and while there it is claimed
 * by at most one live thread (tag OWNED) unless it is that registry's shared overflow shard;
 * the rendered text only ever contains label values from the closed sets in metrics.h or from
 * the configured tenant label table (validated at configuration).
 */
#include "obs/metrics.h"

#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

_Thread_local struct obs_tls_ent obs_tls_cache[OBS_TLS_WAYS];

/* The process shard pool: shards of freed registries, reused by new ones. Guarded by pool_mu. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct obs_shard *obs_pool;
static size_t obs_nshards; /* shards ever allocated (private ones count against the cap) */
static uint64_t obs_next_registry_id = 1;
static pthread_key_t obs_shard_key;
static pthread_once_t obs_key_once = PTHREAD_ONCE_INIT;

/* ---- label value tables ----------------------------------------------------------------- */

#define OBS_X_STR_V(name, str) str,
#define OBS_X_DIM_VALUES(d, label, VALUES)                                                         \
    static const char *const obs_dimvals_##d[] = {VALUES(OBS_X_STR_V)};
OBS_DIM_LIST(OBS_X_DIM_VALUES)
#undef OBS_X_DIM_VALUES

struct obs_dim_desc {
    const char *label;
    const char *const *values;
    size_t n;
};

static const struct obs_dim_desc obs_dims[OBS_DIM__COUNT] = {
#define OBS_X_DIM_DESC(d, label, VALUES) {label, obs_dimvals_##d, OBS__N_##d},
    OBS_DIM_LIST(OBS_X_DIM_DESC)
#undef OBS_X_DIM_DESC
};

/* ---- family descriptors ------------------------------------------------------------------ */

enum obs_kind { OBS_KIND_COUNTER, OBS_KIND_GAUGE, OBS_KIND_HIST, OBS_KIND_TENANT };

struct obs_family {
    const char *id;
    const char *name;
    const char *help;
    enum obs_kind kind;
    int mode_or_layout;
    enum obs_dim_id d1, d2;
    size_t off; /* byte offset of the family in its slot struct */
    size_t sum_off;
};

static const struct obs_family obs_families[] = {
#define OBS_X_C(id, help, d1, d2)                                                                  \
    {#id, "kvmesh_" #id, help,         OBS_KIND_COUNTER,                                           \
     0,   OBS_DIM_##d1,  OBS_DIM_##d2, offsetof(struct obs_counter_slots, id),                     \
     0},
    OBS_COUNTER_LIST(OBS_X_C)
#undef OBS_X_C
#define OBS_X_G(id, help, mode, d1, d2)                                                            \
    {#id,                                                                                          \
     "kvmesh_" #id,                                                                                \
     help,                                                                                         \
     OBS_KIND_GAUGE,                                                                               \
     OBS_GMODE_##mode,                                                                             \
     OBS_DIM_##d1,                                                                                 \
     OBS_DIM_##d2,                                                                                 \
     offsetof(struct obs_gauge_slots, id),                                                         \
     0},
        OBS_GAUGE_LIST(OBS_X_G)
#undef OBS_X_G
#define OBS_X_H(id, help, layout, d1, d2)                                                          \
    {#id,                                                                                          \
     "kvmesh_" #id,                                                                                \
     help,                                                                                         \
     OBS_KIND_HIST,                                                                                \
     OBS_LAYOUT_##layout,                                                                          \
     OBS_DIM_##d1,                                                                                 \
     OBS_DIM_##d2,                                                                                 \
     offsetof(struct obs_hist_slots, id),                                                          \
     offsetof(struct obs_hist_slots, id##__sum)},
            OBS_HIST_LIST(OBS_X_H)
#undef OBS_X_H
#define OBS_X_T(id, help)                                                                          \
    {#id, "kvmesh_" #id, help,         OBS_KIND_TENANT,                                            \
     0,   OBS_DIM_none,  OBS_DIM_none, offsetof(struct obs_tenant_slots, id),                      \
     0},
                OBS_TENANT_COUNTER_LIST(OBS_X_T)
#undef OBS_X_T
};

static const char *const obs_family_names[] = {
#define OBS_X_C(id, help, d1, d2) "kvmesh_" #id,
    OBS_COUNTER_LIST(OBS_X_C)
#undef OBS_X_C
#define OBS_X_G(id, help, mode, d1, d2) "kvmesh_" #id,
        OBS_GAUGE_LIST(OBS_X_G)
#undef OBS_X_G
#define OBS_X_H(id, help, layout, d1, d2) "kvmesh_" #id,
            OBS_HIST_LIST(OBS_X_H)
#undef OBS_X_H
#define OBS_X_T(id, help) "kvmesh_" #id,
                OBS_TENANT_COUNTER_LIST(OBS_X_T)
#undef OBS_X_T
#define OBS_X_P(id, type, help) #id,
                    OBS_PROCESS_LIST(OBS_X_P)
#undef OBS_X_P
};

const char *const *obs_metrics_family_names(size_t *n)
{
    *n = KVM_ARRAY_SIZE(obs_family_names);
    return obs_family_names;
}

/* ---- bucket layouts ---------------------------------------------------------------------- */

static const uint64_t obs_lat_bounds_ns[OBS_LAT_BUCKETS] = {
    5000ull,      10000ull,      25000ull,      50000ull,      100000ull,
    250000ull,    500000ull,     1000000ull,    2500000ull,    5000000ull,
    10000000ull,  25000000ull,   50000000ull,   100000000ull,  250000000ull,
    500000000ull, 1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull};

unsigned obs_lat_bucket(uint64_t ns)
{
    unsigned lo = 0, hi = OBS_LAT_BUCKETS; /* first bound >= ns, or OBS_LAT_BUCKETS (+Inf) */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (obs_lat_bounds_ns[mid] >= ns)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Bounds 4^k KiB, k = 0..10: bucket k holds (4^(k-1) KiB, 4^k KiB]. */
unsigned obs_bytes_bucket(uint64_t bytes)
{
    if (bytes <= 1024)
        return 0;
    /* smallest k with 1024 * 4^k >= bytes, i.e. ceil(log4(bytes / 1024)) */
    uint64_t v = (bytes - 1) >> 10; /* >= 1 */
    unsigned bits = 64u - (unsigned)__builtin_clzll(v);
    unsigned k = (bits + 1) / 2;
    return k > OBS_BYTES_BUCKETS ? OBS_BYTES_BUCKETS : k;
}

/* Bounds 0, then 2^(k-1), k = 1..6: bucket 0 holds 0, bucket k holds (2^(k-2), 2^(k-1)]. */
unsigned obs_count_bucket(uint64_t n)
{
    if (n == 0)
        return 0;
    unsigned k = 1;
    while (k < OBS_COUNT_BUCKETS && n > (1ull << (k - 1)))
        k++;
    return k;
}

static uint64_t obs_layout_bound(int layout, unsigned i)
{
    if (layout == OBS_LAYOUT_count)
        return i == 0 ? 0 : 1ull << (i - 1);
    return layout == OBS_LAYOUT_latency ? obs_lat_bounds_ns[i] : (1024ull << (2 * i));
}

static unsigned obs_layout_nb(int layout)
{
    return layout == OBS_LAYOUT_latency ? OBS_LAT_BUCKETS
           : layout == OBS_LAYOUT_count ? OBS_COUNT_BUCKETS
                                        : OBS_BYTES_BUCKETS;
}

/* ---- registries and shards -------------------------------------------------------------- */

#define OBS_TAG_FREE(id)  ((id) << 1)
#define OBS_TAG_OWNED(id) (((id) << 1) | 1u)

/* Hands a claimed private shard back to its registry (no-op when the registry is gone: the
 * tag then differs and the compare-and-swap fails). */
static void obs_shard_hand_back(const struct obs_tls_ent *e)
{
    if (!e->id || e->s->shared)
        return;
    uint64_t want = OBS_TAG_OWNED(e->id);
    __atomic_compare_exchange_n(&e->s->tag, &want, OBS_TAG_FREE(e->id), false, __ATOMIC_ACQ_REL,
                                __ATOMIC_RELAXED);
}

static void obs_thread_exit(void *p)
{
    (void)p;
    for (unsigned i = 0; i < OBS_TLS_WAYS; i++) {
        obs_shard_hand_back(&obs_tls_cache[i]);
        obs_tls_cache[i].id = 0;
        obs_tls_cache[i].s = NULL;
    }
}

static void obs_key_init(void)
{
    KVM_ASSERT(pthread_key_create(&obs_shard_key, obs_thread_exit) == 0);
}

static void obs_shard_zero(struct obs_shard *s)
{
    memset(&s->c, 0, sizeof(s->c));
    memset(&s->g, 0, sizeof(s->g));
    memset(&s->h, 0, sizeof(s->h));
    memset(&s->t, 0, sizeof(s->t));
}

/* A zeroed shard from the pool or new memory, tagged `tag`; NULL when the private-shard cap is
 * reached (and !force) or memory is out. */
static struct obs_shard *obs_pool_take(uint64_t tag, int shared, bool force)
{
    pthread_mutex_lock(&pool_mu);
    struct obs_shard *s = obs_pool;
    if (s) {
        obs_pool = s->pool_next;
    } else if (force || obs_nshards < OBS_MAX_SHARDS) {
        s = aligned_alloc(64, sizeof(*s));
        if (s)
            obs_nshards++;
    }
    pthread_mutex_unlock(&pool_mu);
    if (!s)
        return NULL;
    obs_shard_zero(s);
    s->shared = shared;
    s->pool_next = NULL;
    s->reg_next = NULL;
    __atomic_store_n(&s->tag, tag, __ATOMIC_RELEASE);
    return s;
}

int obs_registry_new(struct obs_registry **out)
{
    *out = NULL;
    struct obs_registry *r = obs_calloc(1, sizeof(*r));
    if (!r)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for a metrics registry");
    r->id = __atomic_fetch_add(&obs_next_registry_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return 0;
}

void obs_registry_free(struct obs_registry *r)
{
    if (!r)
        return;
    struct obs_shard *s = __atomic_load_n(&r->shards, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&pool_mu);
    while (s) {
        struct obs_shard *next = s->reg_next;
        __atomic_store_n(&s->tag, 0, __ATOMIC_RELEASE);
        s->pool_next = obs_pool;
        obs_pool = s;
        s = next;
    }
    pthread_mutex_unlock(&pool_mu);
    /* this thread's cache entry for r would never match again (ids are unique); clear it */
    for (unsigned i = 0; i < OBS_TLS_WAYS; i++)
        if (obs_tls_cache[i].id == r->id)
            obs_tls_cache[i] = (struct obs_tls_ent){0, NULL};
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void obs_registry_link(struct obs_registry *r, struct obs_shard *s)
{
    s->reg_next = r->shards;
    __atomic_store_n(&r->shards, s, __ATOMIC_RELEASE);
}

struct obs_shard *obs_shard_get_slow(struct obs_registry *r)
{
    for (unsigned i = 1; i < OBS_TLS_WAYS; i++) {
        if (obs_tls_cache[i].id == r->id) {
            struct obs_tls_ent e = obs_tls_cache[i];
            memmove(&obs_tls_cache[1], &obs_tls_cache[0], i * sizeof(e));
            obs_tls_cache[0] = e;
            return e.s;
        }
    }
    pthread_once(&obs_key_once, obs_key_init);
    if (!pthread_getspecific(obs_shard_key))
        pthread_setspecific(obs_shard_key, (void *)1); /* the exit hook hands the shards back */
    struct obs_shard *s = NULL;
    pthread_mutex_lock(&r->mu);
    for (struct obs_shard *it = r->shards; it && !s; it = it->reg_next) {
        uint64_t want = OBS_TAG_FREE(r->id);
        if (!it->shared && __atomic_compare_exchange_n(&it->tag, &want, OBS_TAG_OWNED(r->id), false,
                                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            s = it;
    }
    if (!s) {
        s = obs_pool_take(OBS_TAG_OWNED(r->id), 0, false);
        if (s)
            obs_registry_link(r, s);
    }
    if (!s) { /* the cap is reached: the registry's overflow shard, shared with atomic adds */
        for (struct obs_shard *it = r->shards; it && !s; it = it->reg_next)
            if (it->shared)
                s = it;
        if (!s) {
            s = obs_pool_take(OBS_TAG_OWNED(r->id), 1, true);
            KVM_ASSERT(s != NULL); /* one per registry at most; without it nothing counts */
            obs_registry_link(r, s);
        }
    }
    pthread_mutex_unlock(&r->mu);
    obs_shard_hand_back(&obs_tls_cache[OBS_TLS_WAYS - 1]);
    memmove(&obs_tls_cache[1], &obs_tls_cache[0], (OBS_TLS_WAYS - 1) * sizeof(obs_tls_cache[0]));
    obs_tls_cache[0] = (struct obs_tls_ent){r->id, s};
    return s;
}

static inline uint64_t ld64(const void *p)
{
    return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
}

/* Sum over a registry's shards of the uint64/int64 at byte offset `off` of the slot struct
 * selected by kind. */
static int64_t obs_sum(const struct obs_registry *r, enum obs_kind kind, size_t off)
{
    int64_t total = 0;
    for (struct obs_shard *s = __atomic_load_n(&r->shards, __ATOMIC_ACQUIRE); s; s = s->reg_next) {
        const char *base = kind == OBS_KIND_COUNTER ? (const char *)&s->c
                           : kind == OBS_KIND_GAUGE ? (const char *)&s->g
                           : kind == OBS_KIND_HIST  ? (const char *)&s->h
                                                    : (const char *)&s->t;
        total += (int64_t)ld64(base + off);
    }
    return total;
}

/* ---- per-tenant label table -------------------------------------------------------------- */

#define OBS_TENANT_HASH_SLOTS 128 /* power of two, >= 2 * OBS_TENANT_LABEL_CAP_MAX */

struct obs_tenant_table {
    size_t n;
    char ids[OBS_TENANT_LABEL_CAP_MAX][OBS_TENANT_ID_MAX + 1];
    size_t lens[OBS_TENANT_LABEL_CAP_MAX];
    int16_t hash[OBS_TENANT_HASH_SLOTS]; /* slot index or -1 */
    struct obs_tenant_table *prev;       /* retired tables, freed at shutdown */
};

static struct obs_tenant_table *obs_tenants; /* atomic pointer, immutable once published */
static pthread_mutex_t tenants_mu = PTHREAD_MUTEX_INITIALIZER;

static bool obs_tenant_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > OBS_TENANT_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-'))
            return false;
    }
    return !(len == 5 && memcmp(id, "other", 5) == 0);
}

int obs_metrics_set_tenants(const char *const *ids, size_t n, size_t cap)
{
    if (cap > OBS_TENANT_LABEL_CAP_MAX)
        return kvm_errf(KVMESH_EINVAL, "tenant label cap %zu exceeds the maximum %d", cap,
                        OBS_TENANT_LABEL_CAP_MAX);
    struct obs_tenant_table *t = obs_calloc(1, sizeof(*t));
    if (!t)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the tenant label table");
    memset(t->hash, 0xff, sizeof(t->hash));
    size_t use = KVM_MIN(n, cap);
    for (size_t i = 0; i < use; i++) {
        size_t len = strlen(ids[i]);
        if (!obs_tenant_id_valid(ids[i], len)) {
            free(t);
            return kvm_errf(KVMESH_EINVAL,
                            "tenant label id #%zu is empty, longer than %d bytes, 'other' or has "
                            "characters outside [A-Za-z0-9._:-]",
                            i, OBS_TENANT_ID_MAX);
        }
        size_t h = XXH3_64bits(ids[i], len) & (OBS_TENANT_HASH_SLOTS - 1);
        for (;; h = (h + 1) & (OBS_TENANT_HASH_SLOTS - 1)) {
            int16_t j = t->hash[h];
            if (j < 0)
                break;
            if (t->lens[j] == len && memcmp(t->ids[j], ids[i], len) == 0) {
                free(t);
                return kvm_errf(KVMESH_EINVAL, "tenant label id '%s' is listed twice", ids[i]);
            }
        }
        memcpy(t->ids[i], ids[i], len);
        t->lens[i] = len;
        t->hash[h] = (int16_t)i;
        t->n++;
    }
    pthread_mutex_lock(&tenants_mu);
    t->prev = obs_tenants;
    __atomic_store_n(&obs_tenants, t, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&tenants_mu);
    return 0;
}

unsigned obs_tenant_slot(const char *id, size_t len)
{
    const struct obs_tenant_table *t = __atomic_load_n(&obs_tenants, __ATOMIC_ACQUIRE);
    if (!t || t->n == 0 || len == 0 || len > OBS_TENANT_ID_MAX)
        return OBS_TENANT_OTHER;
    size_t h = XXH3_64bits(id, len) & (OBS_TENANT_HASH_SLOTS - 1);
    for (;; h = (h + 1) & (OBS_TENANT_HASH_SLOTS - 1)) {
        int16_t j = t->hash[h];
        if (j < 0)
            return OBS_TENANT_OTHER;
        if (t->lens[j] == len && memcmp(t->ids[j], id, len) == 0)
            return (unsigned)j;
    }
}

/* ---- allocation ------------------------------------------------------------------------- */

static _Thread_local int obs_fail_countdown = -1;

void obs_test_fail_alloc_after(int n)
{
    obs_fail_countdown = n;
}

static bool obs_alloc_fault(void)
{
    if (KVM_LIKELY(obs_fail_countdown < 0))
        return false;
    return obs_fail_countdown-- == 0;
}

void *obs_malloc(size_t n)
{
    return obs_alloc_fault() ? NULL : malloc(n);
}

void *obs_calloc(size_t n, size_t size)
{
    return obs_alloc_fault() ? NULL : calloc(n, size);
}

void *obs_realloc(void *p, size_t n)
{
    return obs_alloc_fault() ? NULL : realloc(p, n);
}

char *obs_strdup(const char *s)
{
    return obs_alloc_fault() ? NULL : strdup(s);
}

/* ---- buffer ------------------------------------------------------------------------------ */

void obs_buf_init(struct obs_buf *b, size_t limit)
{
    memset(b, 0, sizeof(*b));
    b->limit = limit;
}

void obs_buf_free(struct obs_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static bool obs_buf_reserve(struct obs_buf *b, size_t n)
{
    if (b->overflow)
        return false;
    if (b->len + n + 1 > b->limit) {
        b->overflow = true;
        return false;
    }
    if (b->len + n + 1 <= b->cap)
        return true;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->len + n + 1)
        nc *= 2;
    if (nc > b->limit)
        nc = b->limit;
    char *d = obs_realloc(b->data, nc);
    if (!d) {
        b->overflow = true;
        return false;
    }
    b->data = d;
    b->cap = nc;
    return true;
}

void obs_buf_append(struct obs_buf *b, const char *s, size_t n)
{
    if (!obs_buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void obs_buf_printf(struct obs_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(tmp)) {
        obs_buf_append(b, tmp, (size_t)n);
        return;
    }
    if (!obs_buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void obs_buf_json_str(struct obs_buf *b, const char *s, size_t n)
{
    obs_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            obs_buf_append(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            obs_buf_printf(b, "\\u%04x", c);
        } else {
            obs_buf_append(b, (const char *)&s[i], 1);
        }
    }
    obs_buf_puts(b, "\"");
}

/* ---- exposition -------------------------------------------------------------------------- */

static void obs_help_escaped(struct obs_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            obs_buf_puts(b, "\\\\");
        else if (*s == '\n')
            obs_buf_puts(b, "\\n");
        else
            obs_buf_append(b, s, 1);
    }
}

static void obs_label_escaped(struct obs_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\')
            obs_buf_puts(b, "\\\\");
        else if (s[i] == '"')
            obs_buf_puts(b, "\\\"");
        else if (s[i] == '\n')
            obs_buf_puts(b, "\\n");
        else
            obs_buf_append(b, &s[i], 1);
    }
}

static void obs_header(struct obs_buf *b, const char *name, const char *type, const char *help)
{
    obs_buf_printf(b, "# HELP %s ", name);
    obs_help_escaped(b, help);
    obs_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* Writes `{l1="v1",l2="v2"` plus an optional extra label, and the closing brace. */
static void obs_labels(struct obs_buf *b, const struct obs_family *f, size_t i1, size_t i2,
                       const char *extra_name, const char *extra_val)
{
    const struct obs_dim_desc *a = &obs_dims[f->d1], *c = &obs_dims[f->d2];
    if (f->d1 == OBS_DIM_none && f->d2 == OBS_DIM_none && !extra_name)
        return; /* no labels: no braces */
    int n = 0;
    obs_buf_puts(b, "{");
    if (f->d1 != OBS_DIM_none) {
        obs_buf_printf(b, "%s=\"%s\"", a->label, a->values[i1]);
        n++;
    }
    if (f->d2 != OBS_DIM_none) {
        obs_buf_printf(b, "%s%s=\"%s\"", n ? "," : "", c->label, c->values[i2]);
        n++;
    }
    if (extra_name)
        obs_buf_printf(b, "%s%s=\"%s\"", n ? "," : "", extra_name, extra_val);
    obs_buf_puts(b, "}");
}

static void obs_fmt_seconds(char *out, size_t n, uint64_t ns)
{
    snprintf(out, n, "%.9g", (double)ns / 1e9);
}

static void obs_render_family(const struct obs_registry *r, struct obs_buf *b,
                              const struct obs_family *f)
{
    const size_t n1 = obs_dims[f->d1].n, n2 = obs_dims[f->d2].n;
    const char *type = f->kind == OBS_KIND_GAUGE  ? "gauge"
                       : f->kind == OBS_KIND_HIST ? "histogram"
                                                  : "counter";
    obs_header(b, f->name, type, f->help);
    if (f->kind == OBS_KIND_TENANT) {
        const struct obs_tenant_table *t = __atomic_load_n(&obs_tenants, __ATOMIC_ACQUIRE);
        if (!t || t->n == 0)
            return;
        for (size_t i = 0; i <= t->n; i++) {
            size_t slot = i < t->n ? i : OBS_TENANT_OTHER;
            obs_buf_printf(b, "%s{tenant=\"", f->name);
            if (i < t->n)
                obs_label_escaped(b, t->ids[i], t->lens[i]);
            else
                obs_buf_puts(b, "other");
            obs_buf_printf(
                b, "\"} %lld\n",
                (long long)obs_sum(r, OBS_KIND_TENANT, f->off + slot * sizeof(uint64_t)));
        }
        return;
    }
    for (size_t i1 = 0; i1 < n1; i1++) {
        for (size_t i2 = 0; i2 < n2; i2++) {
            size_t idx = i1 * n2 + i2;
            if (f->kind == OBS_KIND_COUNTER ||
                (f->kind == OBS_KIND_GAUGE && f->mode_or_layout == OBS_GMODE_add)) {
                int64_t v = obs_sum(r, f->kind, f->off + idx * sizeof(uint64_t));
                obs_buf_append(b, f->name, strlen(f->name));
                obs_labels(b, f, i1, i2, NULL, NULL);
                obs_buf_printf(b, " %lld\n", (long long)v);
            } else if (f->kind == OBS_KIND_GAUGE) {
                int64_t v = __atomic_load_n(
                    (const int64_t *)((const char *)&r->gauges + f->off) + idx, __ATOMIC_RELAXED);
                obs_buf_append(b, f->name, strlen(f->name));
                obs_labels(b, f, i1, i2, NULL, NULL);
                obs_buf_printf(b, " %lld\n", (long long)v);
            } else {
                unsigned nb = obs_layout_nb(f->mode_or_layout);
                size_t row = f->off + idx * (nb + 1) * sizeof(uint64_t);
                uint64_t cum = 0;
                for (unsigned k = 0; k <= nb; k++) {
                    cum += (uint64_t)obs_sum(r, OBS_KIND_HIST, row + k * sizeof(uint64_t));
                    char le[48];
                    if (k == nb)
                        snprintf(le, sizeof(le), "+Inf");
                    else if (f->mode_or_layout == OBS_LAYOUT_latency)
                        obs_fmt_seconds(le, sizeof(le), obs_layout_bound(f->mode_or_layout, k));
                    else
                        snprintf(le, sizeof(le), "%llu",
                                 (unsigned long long)obs_layout_bound(f->mode_or_layout, k));
                    obs_buf_printf(b, "%s_bucket", f->name);
                    obs_labels(b, f, i1, i2, "le", le);
                    obs_buf_printf(b, " %llu\n", (unsigned long long)cum);
                }
                uint64_t sum = (uint64_t)obs_sum(r, OBS_KIND_HIST, f->sum_off + idx * 8);
                obs_buf_printf(b, "%s_sum", f->name);
                obs_labels(b, f, i1, i2, NULL, NULL);
                if (f->mode_or_layout == OBS_LAYOUT_latency) {
                    char s[48];
                    obs_fmt_seconds(s, sizeof(s), sum);
                    obs_buf_printf(b, " %s\n", s);
                } else {
                    obs_buf_printf(b, " %llu\n", (unsigned long long)sum);
                }
                obs_buf_printf(b, "%s_count", f->name);
                obs_labels(b, f, i1, i2, NULL, NULL);
                obs_buf_printf(b, " %llu\n", (unsigned long long)cum);
            }
        }
    }
}

void obs_metrics_render(const struct obs_registry *r, struct obs_buf *b)
{
    if (r)
        for (size_t i = 0; i < KVM_ARRAY_SIZE(obs_families); i++)
            obs_render_family(r, b, &obs_families[i]);
    struct obs_process_stats ps;
    memset(&ps, 0, sizeof(ps));
    (void)obs_process_read(&ps); /* zeros when /proc is unreadable */
    double pv[] = {ps.cpu_seconds,     (double)ps.resident_bytes, (double)ps.open_fds,
                   (double)ps.max_fds, ps.start_time_seconds,     (double)ps.threads};
    size_t k = 0;
#define OBS_X_P(id, type, help)                                                                    \
    obs_header(b, #id, #type, help);                                                               \
    obs_buf_printf(b, #id " %.12g\n", pv[k++]);
    OBS_PROCESS_LIST(OBS_X_P)
#undef OBS_X_P
}

int obs_metrics_read(const struct obs_registry *r, const char *id, unsigned i1, unsigned i2,
                     int64_t *out)
{
    for (size_t i = 0; i < KVM_ARRAY_SIZE(obs_families); i++) {
        const struct obs_family *f = &obs_families[i];
        if (strcmp(f->id, id) != 0)
            continue;
        if (f->kind == OBS_KIND_TENANT) {
            if (i1 > OBS_TENANT_LABEL_CAP_MAX)
                return kvm_errf(KVMESH_ERANGE, "tenant slot %u out of range", i1);
            *out = obs_sum(r, OBS_KIND_TENANT, f->off + (size_t)i1 * 8);
            return 0;
        }
        const size_t n1 = obs_dims[f->d1].n, n2 = obs_dims[f->d2].n;
        if (i1 >= n1 || i2 >= n2)
            return kvm_errf(KVMESH_ERANGE, "label index out of range for %s", id);
        size_t idx = (size_t)i1 * n2 + i2;
        if (f->kind == OBS_KIND_COUNTER ||
            (f->kind == OBS_KIND_GAUGE && f->mode_or_layout == OBS_GMODE_add)) {
            *out = obs_sum(r, f->kind, f->off + idx * 8);
        } else if (f->kind == OBS_KIND_GAUGE) {
            *out = __atomic_load_n((const int64_t *)((const char *)&r->gauges + f->off) + idx,
                                   __ATOMIC_RELAXED);
        } else {
            unsigned nb = obs_layout_nb(f->mode_or_layout);
            int64_t c = 0;
            for (unsigned k = 0; k <= nb; k++)
                c += obs_sum(r, OBS_KIND_HIST, f->off + (idx * (nb + 1) + k) * 8);
            *out = c;
        }
        return 0;
    }
    return kvm_errf(KVMESH_ENOENT, "no metric family '%s'", id);
}

/* ---- /proc/self -------------------------------------------------------------------------- */

/* Unix time of the boot (the `btime` line of /proc/stat); 0 when unreadable. */
static uint64_t obs_boot_time(void)
{
    static uint64_t cached;
    uint64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v)
        return v;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        unsigned long long bt;
        if (sscanf(line, "btime %llu", &bt) == 1) {
            v = bt;
            break;
        }
    }
    fclose(f);
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    return v;
}

int obs_process_read(struct obs_process_stats *out)
{
    memset(out, 0, sizeof(*out));
    int rc = 0;
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
        /* fields after the ")" of comm: state(3) ... utime(14) stime(15) ... threads(20) */
        char *p = strrchr(buf, ')');
        unsigned long utime = 0, stime = 0;
        unsigned long long start_ticks = 0;
        long threads = 0;
        if (p && sscanf(p + 2,
                        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %ld "
                        "%*d %llu",
                        &utime, &stime, &threads, &start_ticks) == 4) {
            long hz = sysconf(_SC_CLK_TCK);
            double tick = 1.0 / (double)(hz > 0 ? hz : 100);
            out->cpu_seconds = (double)(utime + stime) * tick;
            out->threads = (uint64_t)threads;
            out->start_time_seconds = (double)obs_boot_time() + (double)start_ticks * tick;
        } else {
            rc = KVMESH_EIO;
        }
    } else {
        rc = KVMESH_EIO;
    }
    f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long size = 0, res = 0;
        if (fscanf(f, "%lu %lu", &size, &res) == 2)
            out->resident_bytes = (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        uint64_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            if (de->d_name[0] != '.')
                n++;
        closedir(d);
        out->open_fds = n > 0 ? n - 1 : 0; /* minus the descriptor of the listing itself */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        out->max_fds = (uint64_t)rl.rlim_cur;
    return rc;
}

void obs_metrics_shutdown(void)
{
    pthread_mutex_lock(&tenants_mu);
    struct obs_tenant_table *t = obs_tenants;
    __atomic_store_n(&obs_tenants, NULL, __ATOMIC_RELEASE);
    while (t) {
        struct obs_tenant_table *p = t->prev;
        free(t);
        t = p;
    }
    pthread_mutex_unlock(&tenants_mu);
}
