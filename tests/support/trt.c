/* SPDX-License-Identifier: Apache-2.0 */
/* trt.c — see trt.h. */
#include "trt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "env/clock.h"
#include "env/env.h"
#include "net/seg.h"
#include "obs/metrics.h"
#include "route/route.h"

static int set_pairs(kvmesh_config_t *c, const char *const pairs[][2])
{
    for (size_t i = 0; pairs && pairs[i][0]; i++)
        if (kvmesh_config_set(c, pairs[i][0], pairs[i][1]) != 0) {
            fprintf(stderr, "trt_open: %s = \"%s\": %s\n", pairs[i][0],
                    pairs[i][1] ? pairs[i][1] : "(null)", kvmesh_last_error());
            return -1;
        }
    return 0;
}

kvmesh_t *trt_open(const char *const base[][2], const char *const more[][2])
{
    kvmesh_config_t *c = kvmesh_config_new();
    if (!c) {
        fprintf(stderr, "trt_open: out of memory\n");
        return NULL;
    }
    kvmesh_t *kv = NULL;
    if (set_pairs(c, base) == 0 && set_pairs(c, more) == 0 && kvmesh_open(&kv, c) != 0) {
        fprintf(stderr, "trt_open: open: %s\n", kvmesh_last_error());
        kv = NULL;
    }
    kvmesh_config_free(c);
    return kv;
}

int trt_wait_put_get(kvmesh_t *writer, kvmesh_t *reader, const kvmesh_scope_t *sc, const char *key,
                     int timeout_ms)
{
    enum { LEN = 4096 };
    uint8_t *v = malloc(LEN), *out = malloc(LEN);
    int rc = -1;
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    size_t klen = strlen(key);
    for (size_t i = 0; v && i < LEN; i++)
        v[i] = (uint8_t)(i * 7 + klen);
    while (v && out) {
        size_t got = 0;
        if (kvmesh_put(writer, sc, key, klen, v, LEN, NULL) == 0 &&
            kvmesh_get_into(reader, sc, key, klen, out, LEN, &got) == 0 && got == LEN &&
            memcmp(v, out, LEN) == 0) {
            rc = 0;
            break;
        }
        if (env_clock_mono_ms() >= end) {
            fprintf(stderr, "trt_wait_put_get %s: not ready after %d ms: %s\n", key, timeout_ms,
                    kvmesh_last_error());
            break;
        }
        usleep(50000);
    }
    free(v);
    free(out);
    return rc;
}

int trt_warm(kvmesh_t *const *rts, size_t n, const kvmesh_scope_t *sc, int keys, int timeout_ms)
{
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    for (int k = 0; k < keys; k++) {
        char key[32];
        snprintf(key, sizeof(key), "warm-%d", k);
        uint8_t v[64] = {(uint8_t)k}, out[64];
        size_t got = 0;
        kvmesh_t *w = rts[(size_t)k % n], *r = rts[(size_t)(k + 1) % n];
        while (kvmesh_put(w, sc, key, strlen(key), v, sizeof(v), NULL) != 0 ||
               kvmesh_get_into(r, sc, key, strlen(key), out, sizeof(out), &got) != 0) {
            if (env_clock_mono_ms() >= end) {
                fprintf(stderr, "trt_warm: %s not written and read after %d ms: %s\n", key,
                        timeout_ms, kvmesh_last_error());
                return -1;
            }
            usleep(100 * 1000);
        }
    }
    return 0;
}

struct on_loop {
    void (*fn)(kvm_rt_t *rt, void *arg);
    kvm_rt_t *rt;
    void *arg;
    atomic_bool done;
};

static void on_loop_run(void *p)
{
    struct on_loop *l = p;
    l->fn(l->rt, l->arg);
    atomic_store(&l->done, true);
}

int trt_on_loop(kvmesh_t *kv, void (*fn)(kvm_rt_t *rt, void *arg), void *arg, int timeout_ms)
{
    struct on_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return -1;
    *l = (struct on_loop){.fn = fn, .rt = kvmesh_runtime_of(kv), .arg = arg};
    if (env_post(l->rt->env, on_loop_run, l) != 0) {
        fprintf(stderr, "trt_on_loop: cannot post: %s\n", kvmesh_last_error());
        free(l);
        return -1;
    }
    uint64_t end = env_clock_mono_ms() + (uint64_t)timeout_ms;
    while (!atomic_load(&l->done) && env_clock_mono_ms() < end)
        usleep(1000);
    if (!atomic_load(&l->done)) {
        fprintf(stderr, "trt_on_loop: not run within %d ms\n", timeout_ms);
        return -1; /* (l is left to the loop, which may still run it) */
    }
    free(l);
    return 0;
}

static int64_t cp_read(kvmesh_t *kv, const char *fam, unsigned i1, unsigned i2)
{
    int64_t v = 0;
    if (obs_metrics_read(kvmesh_runtime_of(kv)->metrics, fam, i1, i2, &v) != 0) {
        fprintf(stderr, "trt_cp_snap: cannot read %s\n", fam);
        exit(1);
    }
    return v;
}

trt_cp_t trt_cp_snap(kvmesh_t *kv, unsigned op)
{
    return (trt_cp_t){
        .lookup = cp_read(kv, "op_round_trips_total", op, OBS_CPSTAGE_ROUTE_LOOKUP),
        .payload = cp_read(kv, "op_round_trips_total", op, OBS_CPSTAGE_PAYLOAD),
        .reserve = cp_read(kv, "op_round_trips_total", op, OBS_CPSTAGE_RESERVE),
        .cas = cp_read(kv, "op_round_trips_total", op, OBS_CPSTAGE_ROUTE_CAS),
        .handoffs = cp_read(kv, "op_handoffs_total", op, OBS_NONE),
        .checksums = cp_read(kv, "op_checksum_passes_total", op, OBS_NONE),
        .reads = cp_read(kv, "transport_operations_total", OBS_TRANSPORT_TCP, OBS_XOP_READ),
    };
}

trt_cp_t trt_cp_delta(trt_cp_t a, trt_cp_t b)
{
    return (trt_cp_t){.lookup = b.lookup - a.lookup,
                      .payload = b.payload - a.payload,
                      .reserve = b.reserve - a.reserve,
                      .cas = b.cas - a.cas,
                      .handoffs = b.handoffs - a.handoffs,
                      .checksums = b.checksums - a.checksums,
                      .reads = b.reads - a.reads};
}

int64_t trt_cp_round_trips(const trt_cp_t *d)
{
    return d->lookup + d->payload + d->reserve + d->cas;
}

void trt_cp_show(const char *what, const trt_cp_t *d)
{
    printf("%-46s round trips %" PRId64 " (route_lookup %" PRId64 ", payload %" PRId64
           "); hand-offs %" PRId64 "; checksum passes %" PRId64 "; tcp reads %" PRId64 "\n",
           what, trt_cp_round_trips(d), d->lookup, d->payload, d->handoffs, d->checksums, d->reads);
    fflush(stdout);
}

struct primary_q {
    kvm_ident_t ident;
    kvm_runtime_t primary;
    int rc;
};

static void primary_read(kvm_rt_t *rt, void *arg)
{
    struct primary_q *q = arg;
    q->rc = route_primary_hint(rt->route, &q->ident, &q->primary);
}

int trt_primary_of(kvmesh_t *kv, const kvmesh_scope_t *sc, const char *key, kvm_runtime_t *primary)
{
    /* (heap: a call not run in time may still run later, after this returns) */
    struct primary_q *q = calloc(1, sizeof(*q));
    if (!q || kvm_ident_init(&q->ident, sc->tenant, sc->domain, key, strlen(key)) != 0) {
        free(q);
        return -1;
    }
    if (trt_on_loop(kv, primary_read, q, 10000) != 0)
        return -1; /* (q left to the late call) */
    int rc = q->rc;
    *primary = q->primary;
    kvm_ident_free(&q->ident);
    free(q);
    return rc;
}

struct flip_at {
    uint64_t seg, off;
    int fd; /* the segment's memfd, -1: none found */
};

static void flip_find(kvm_rt_t *rt, void *arg)
{
    struct flip_at *f = arg;
    for (uint32_t s = 0; s < rt->n_segs && f->fd < 0; s++) {
        struct seg *sg = rt->segs[s].seg;
        if (sg && sg->id == f->seg && f->off < sg->size)
            f->fd = sg->fd;
    }
}

int trt_flip_byte(kvmesh_t *kv, uint64_t seg, uint64_t off)
{
    /* static: a find that did not run in time may still run later (trt_on_loop) */
    static struct flip_at f;
    f = (struct flip_at){.seg = seg, .off = off, .fd = -1};
    if (trt_on_loop(kv, flip_find, &f, 10000) != 0)
        return -1;
    if (f.fd < 0) {
        fprintf(stderr, "trt_flip_byte: no local segment %" PRIu64 " holding offset %" PRIu64 "\n",
                seg, off);
        return -1;
    }
    /* the segment stays mapped (and its memfd open) while the runtime is open */
    uint8_t b;
    if (pread(f.fd, &b, 1, (off_t)off) != 1) {
        fprintf(stderr, "trt_flip_byte: pread: %s\n", strerror(errno));
        return -1;
    }
    b ^= 0x5a;
    if (pwrite(f.fd, &b, 1, (off_t)off) != 1) {
        fprintf(stderr, "trt_flip_byte: pwrite: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}
