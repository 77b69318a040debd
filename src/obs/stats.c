/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c — the bounded per-tenant counters table (see stats.h).
 *
 * Invariants: tracked <= capacity; the hash array has 2 * capacity (rounded up to a power of
 * two) slots, so probe sequences always end at an empty slot; top[] holds distinct entry indices
 * sorted by descending volume and every tracked tenant outside top[] has a volume <= the last
 * one's whenever top[] is full.
 */
#include "obs/stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct obs_tenant_ent {
    uint16_t len;
    char id[OBS_TENANT_ID_MAX + 1];
    struct obs_tenant_counters c;
};

struct obs_tenant_table {
    pthread_mutex_t mu;
    size_t capacity, tracked, mask;
    int32_t *hash; /* entry index or -1 */
    struct obs_tenant_ent *ents;
    int32_t top[OBS_TENANT_TOP_K];
    size_t ntop;
    struct obs_tenant_counters untracked;
    uint64_t refused;
    uint64_t lookups, lookup_probes;
};

int obs_tenant_table_create(size_t capacity, struct obs_tenant_table **out)
{
    *out = NULL;
    if (capacity == 0 || capacity > OBS_TENANT_TABLE_MAX)
        return kvm_errf(KVMESH_EINVAL, "tenant table capacity must be 1..%d", OBS_TENANT_TABLE_MAX);
    struct obs_tenant_table *t = obs_calloc(1, sizeof(*t));
    if (!t)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the tenant table");
    size_t slots = 2;
    while (slots < 2 * capacity)
        slots *= 2;
    t->hash = obs_malloc(slots * sizeof(*t->hash));
    t->ents = obs_calloc(capacity, sizeof(*t->ents));
    if (!t->hash || !t->ents) {
        free(t->hash);
        free(t->ents);
        free(t);
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the tenant table");
    }
    memset(t->hash, 0xff, slots * sizeof(*t->hash));
    t->mask = slots - 1;
    t->capacity = capacity;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

void obs_tenant_table_destroy(struct obs_tenant_table *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t->hash);
    free(t->ents);
    free(t);
}

/* Returns the hash slot holding id, or the empty slot where it would go; adds the number of
 * slots inspected to *probes. Caller holds mu. */
static size_t probe(const struct obs_tenant_table *t, const char *id, size_t len, uint64_t *probes)
{
    size_t h = XXH3_64bits(id, len) & t->mask;
    for (;; h = (h + 1) & t->mask) {
        int32_t j = t->hash[h];
        (*probes)++;
        if (j < 0)
            return h;
        if (t->ents[j].len == len && memcmp(t->ents[j].id, id, len) == 0)
            return h;
    }
}

static uint64_t volume(const struct obs_tenant_ent *e)
{
    return e->c.bytes_in + e->c.bytes_out;
}

static void add(struct obs_tenant_counters *c, const struct obs_tenant_counters *d)
{
    c->requests += d->requests;
    c->errors += d->errors;
    c->bytes_in += d->bytes_in;
    c->bytes_out += d->bytes_out;
    c->objects += d->objects;
    c->stored_bytes += d->stored_bytes;
    c->quota_rejections += d->quota_rejections;
}

/* Keeps top[] sorted after entry j's volume grew. */
static void top_update(struct obs_tenant_table *t, int32_t j)
{
    size_t pos = t->ntop;
    for (size_t i = 0; i < t->ntop; i++)
        if (t->top[i] == j)
            pos = i;
    if (pos == t->ntop) {
        if (t->ntop < OBS_TENANT_TOP_K) {
            t->top[t->ntop++] = j;
        } else if (volume(&t->ents[j]) > volume(&t->ents[t->top[t->ntop - 1]])) {
            pos = t->ntop - 1;
            t->top[pos] = j;
        } else {
            return;
        }
        pos = t->ntop - 1;
    }
    while (pos > 0 && volume(&t->ents[t->top[pos - 1]]) < volume(&t->ents[t->top[pos]])) {
        int32_t x = t->top[pos - 1];
        t->top[pos - 1] = t->top[pos];
        t->top[pos] = x;
        pos--;
    }
}

int obs_tenant_table_record(struct obs_tenant_table *t, const char *id, size_t len,
                            const struct obs_tenant_counters *d)
{
    if (len == 0 || len > OBS_TENANT_ID_MAX)
        return kvm_errf(KVMESH_EINVAL, "tenant id must be 1..%d bytes", OBS_TENANT_ID_MAX);
    int rc = 0;
    uint64_t probes = 0;
    pthread_mutex_lock(&t->mu);
    size_t h = probe(t, id, len, &probes);
    int32_t j = t->hash[h];
    if (j < 0) {
        if (t->tracked >= t->capacity) {
            add(&t->untracked, d);
            t->refused++;
            rc = KVMESH_ENOSPC;
            goto out;
        }
        j = (int32_t)t->tracked++;
        t->ents[j].len = (uint16_t)len;
        memcpy(t->ents[j].id, id, len);
        t->ents[j].id[len] = '\0';
        t->hash[h] = j;
    }
    add(&t->ents[j].c, d);
    if (d->bytes_in || d->bytes_out || t->ntop < OBS_TENANT_TOP_K)
        top_update(t, j);
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int obs_tenant_table_lookup(struct obs_tenant_table *t, const char *id, size_t len,
                            struct obs_tenant_counters *out)
{
    if (len == 0 || len > OBS_TENANT_ID_MAX)
        return KVMESH_ENOENT;
    int rc = 0;
    pthread_mutex_lock(&t->mu);
    t->lookups++;
    int32_t j = t->hash[probe(t, id, len, &t->lookup_probes)];
    if (j < 0)
        rc = KVMESH_ENOENT;
    else
        *out = t->ents[j].c;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

size_t obs_tenant_table_top(struct obs_tenant_table *t, struct obs_tenant_top_ent *out, size_t n)
{
    pthread_mutex_lock(&t->mu);
    size_t k = KVM_MIN(n, t->ntop);
    for (size_t i = 0; i < k; i++) {
        const struct obs_tenant_ent *e = &t->ents[t->top[i]];
        memcpy(out[i].id, e->id, (size_t)e->len + 1);
        out[i].c = e->c;
    }
    pthread_mutex_unlock(&t->mu);
    return k;
}

void obs_tenant_table_info(struct obs_tenant_table *t, struct obs_tenant_table_info *out)
{
    pthread_mutex_lock(&t->mu);
    out->capacity = t->capacity;
    out->tracked = t->tracked;
    out->untracked = t->untracked;
    out->untracked_requests_from_new_tenants = t->refused;
    out->lookups = t->lookups;
    out->lookup_probes = t->lookup_probes;
    pthread_mutex_unlock(&t->mu);
}
