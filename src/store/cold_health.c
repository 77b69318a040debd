// SPDX-License-Identifier: Apache-2.0
/*
 * cold_health.c — device health from the running store's backend I/O (cold_health.h; docs/cold.md
 * "Device health"). Owns the counting backend table (forwarding, atomics only: it runs on the
 * cold I/O worker) and the loop-side health state machine (OK, MARKING, BAD, PROBING, CLEARING),
 * which changes state only through set_state() and asserts every edge.
 *
 * Invariants: at most one record write or probe job in flight (the MARKING, PROBING and CLEARING
 * states); the record is written DEGRADED only from OK, HEALTHY only after a probe succeeded.
 */
#include "store/cold_health.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "core/util.h"
#include "env/clock.h"

struct probe_job {
    cold_exec_t io; /* first: the worker hands back &io */
    kvm_cold_health_t *h;
    bool healthy; /* [worker] the backend's verdict */
};

struct kvm_cold_health {
    cold_backend_t inner;
    cold_backend_ops_t ops; /* the counting table (wrapped->ops points here) */
    /* [any] */
    atomic_uint_fast64_t errors;      /* device errors seen */
    atomic_uint_fast64_t consecutive; /* since the last success */
    /* [loop] */
    enum kvm_cold_health_state state;
    uint64_t next_probe_ms;
    bool probe_ok;        /* the last probe job's verdict (valid in PROBING once done) */
    bool probe_done;      /* the probe job answered */
    bool probe_in_flight; /* a probe job is queued or running (also past close) */
    uint64_t marked, cleared, probes;
};

/* ---- the counting table [any] ---------------------------------------------------------------- */

static bool device_error(int rc)
{
    return rc == KVMESH_EIO || rc == KVMESH_ECORRUPT;
}

static void note(kvm_cold_health_t *h, int rc)
{
    if (device_error(rc)) {
        atomic_fetch_add(&h->errors, 1);
        atomic_fetch_add(&h->consecutive, 1);
    } else if (rc == 0) {
        atomic_store(&h->consecutive, 0);
    }
}

static int w_put(void *be, const cold_opid_t *op, const struct iovec *iov, int iovcnt, uint64_t len,
                 uint64_t checksum, cold_locator_t *out, cold_backend_err_t *err)
{
    kvm_cold_health_t *h = be;
    int rc = h->inner.ops->put(h->inner.be, op, iov, iovcnt, len, checksum, out, err);
    note(h, rc);
    return rc;
}

static int w_get(void *be, const cold_locator_t *loc, uint64_t len, uint64_t checksum, void *buf,
                 cold_backend_err_t *err)
{
    kvm_cold_health_t *h = be;
    int rc = h->inner.ops->get(h->inner.be, loc, len, checksum, buf, err);
    note(h, rc);
    return rc;
}

static int w_get_batch(void *be, cold_read_t *reads, size_t n, cold_backend_err_t *err)
{
    kvm_cold_health_t *h = be;
    int rc = h->inner.ops->get_batch(h->inner.be, reads, n, err);
    note(h, rc);
    for (size_t i = 0; rc == 0 && i < n; i++)
        note(h, reads[i].rc);
    return rc;
}

static int w_del(void *be, const cold_locator_t *loc, cold_backend_err_t *err)
{
    kvm_cold_health_t *h = be;
    int rc = h->inner.ops->del(h->inner.be, loc, err);
    note(h, rc);
    return rc;
}

static int w_find(void *be, const cold_opid_t *op, cold_locator_t *out, cold_backend_err_t *err)
{
    kvm_cold_health_t *h = be;
    int rc = h->inner.ops->find(h->inner.be, op, out, err);
    note(h, rc);
    return rc;
}

static int w_stat(void *be, cold_backend_stat_t *out)
{
    kvm_cold_health_t *h = be;
    return h->inner.ops->stat(h->inner.be, out);
}

static int64_t w_maintain(void *be, uint64_t budget_bytes, cold_backend_err_t *err)
{
    kvm_cold_health_t *h = be;
    return h->inner.ops->maintain ? h->inner.ops->maintain(h->inner.be, budget_bytes, err) : 0;
}

static void w_close(void *be)
{
    (void)be; /* the inner backend is the caller's to close */
}

int kvm_cold_health_new(kvm_cold_health_t **out, const cold_backend_t *inner,
                        cold_backend_t *wrapped)
{
    if (!out || !inner || !inner->ops || !wrapped)
        return kvm_errf(KVMESH_EINVAL, "kvm_cold_health_new: NULL argument");
    kvm_cold_health_t *h = calloc(1, sizeof(*h));
    if (!h)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    h->inner = *inner;
    atomic_init(&h->errors, 0);
    atomic_init(&h->consecutive, 0);
    h->ops = (cold_backend_ops_t){.kind = inner->ops->kind,
                                  .name = inner->ops->name,
                                  .put = w_put,
                                  .get = w_get,
                                  .get_batch = w_get_batch,
                                  .del = w_del,
                                  .find = w_find,
                                  .stat = w_stat,
                                  .maintain = w_maintain,
                                  .close = w_close};
    *wrapped = (cold_backend_t){.ops = &h->ops, .be = h};
    h->state = KVM_CH_OK;
    *out = h;
    return 0;
}

/* ---- the state machine [loop] ---------------------------------------------------------------- */

static bool edge_ok(enum kvm_cold_health_state from, enum kvm_cold_health_state to)
{
    switch (from) {
    case KVM_CH_OK:
        return to == KVM_CH_MARKING || to == KVM_CH_BAD;
    case KVM_CH_MARKING:
        return to == KVM_CH_BAD || to == KVM_CH_OK;
    case KVM_CH_BAD:
        return to == KVM_CH_PROBING;
    case KVM_CH_PROBING:
        return to == KVM_CH_BAD || to == KVM_CH_CLEARING;
    case KVM_CH_CLEARING:
        return to == KVM_CH_OK || to == KVM_CH_BAD;
    }
    return false;
}

static void set_state(kvm_cold_health_t *h, enum kvm_cold_health_state to)
{
    KVM_ASSERT(edge_ok(h->state, to));
    h->state = to;
}

static void marked(void *arg, int rc, const cold_device_t *d)
{
    (void)d;
    kvm_cold_health_t *h = arg;
    if (rc == 0)
        h->marked++;
    set_state(h, rc == 0 ? KVM_CH_BAD : KVM_CH_OK); /* a failed write: the next tick retries */
}

static void cleared(void *arg, int rc, const cold_device_t *d)
{
    (void)d;
    kvm_cold_health_t *h = arg;
    if (rc == 0) {
        h->cleared++;
        atomic_store(&h->consecutive, 0);
    }
    set_state(h, rc == 0 ? KVM_CH_OK : KVM_CH_BAD);
}

/* [worker] the backend's own probe (LocalDir: create, fdatasync, unlink a file in its
 * directory after an I/O error), then its verdict */
static void probe_run(cold_exec_t *io)
{
    struct probe_job *j = (struct probe_job *)io;
    const cold_backend_t *be = &j->h->inner;
    cold_backend_err_t err;
    int64_t m = be->ops->maintain ? be->ops->maintain(be->be, 0, &err) : 0;
    cold_backend_stat_t st;
    j->healthy = m >= 0 && be->ops->stat(be->be, &st) == 0 && st.healthy;
}

/* [loop] also while the runtime closes (its worker's last done()s): touches h only */
static void probe_done(cold_exec_t *io)
{
    struct probe_job *j = (struct probe_job *)io;
    kvm_cold_health_t *h = j->h;
    h->probe_in_flight = false;
    h->probe_done = true;
    h->probe_ok = j->healthy;
    free(j);
}

static void start_probe(kvm_cold_health_t *h, uint64_t now_ms, kvm_cold_health_exec_fn exec,
                        void *exec_ctx)
{
    h->next_probe_ms = now_ms + KVM_COLD_HEALTH_PROBE_MS;
    struct probe_job *j = calloc(1, sizeof(*j));
    if (!j)
        return; /* the next interval tries again */
    *j = (struct probe_job){.io = {.run = probe_run, .done = probe_done}, .h = h};
    h->probe_done = false;
    h->probe_in_flight = true;
    if (!exec(exec_ctx, &j->io)) {
        h->probe_in_flight = false;
        free(j);
        return;
    }
    h->probes++;
    set_state(h, KVM_CH_PROBING);
}

void kvm_cold_health_tick(kvm_cold_health_t *h, cold_t *c, const kvm_tier_id_t *dev,
                          uint64_t now_ms, kvm_cold_health_exec_fn exec, void *exec_ctx)
{
    if (!h || !c)
        return;
    const cold_device_t *d = cold_view_find(c, dev);
    bool rec_healthy = !d || d->health == COLD_DEV_HEALTHY;
    switch (h->state) {
    case KVM_CH_OK:
        if (!rec_healthy) { /* e.g. left DEGRADED before a restart: probe it back */
            h->next_probe_ms = now_ms;
            set_state(h, KVM_CH_BAD);
        } else if (atomic_load(&h->consecutive) >= KVM_COLD_HEALTH_ERRORS && d) {
            set_state(h, KVM_CH_MARKING);
            if (cold_device_set_health(c, dev, COLD_DEV_DEGRADED, d->schedulable, marked, h) != 0)
                set_state(h, KVM_CH_OK);
        }
        return;
    case KVM_CH_BAD:
        if (now_ms >= h->next_probe_ms)
            start_probe(h, now_ms, exec, exec_ctx);
        return;
    case KVM_CH_PROBING:
        if (!h->probe_done)
            return;
        if (!h->probe_ok || !d) {
            set_state(h, KVM_CH_BAD);
            return;
        }
        set_state(h, KVM_CH_CLEARING);
        if (cold_device_set_health(c, dev, COLD_DEV_HEALTHY, d->schedulable, cleared, h) != 0)
            set_state(h, KVM_CH_BAD);
        return;
    case KVM_CH_MARKING:
    case KVM_CH_CLEARING:
        return; /* the record write answers */
    }
}

enum kvm_cold_health_state kvm_cold_health_state(const kvm_cold_health_t *h)
{
    return h->state;
}

void kvm_cold_health_get_stats(const kvm_cold_health_t *h, kvm_cold_health_stats_t *out)
{
    *out = (kvm_cold_health_stats_t){.errors = atomic_load(&h->errors),
                                     .consecutive = atomic_load(&h->consecutive),
                                     .marked = h->marked,
                                     .cleared = h->cleared,
                                     .probes = h->probes};
}

bool kvm_cold_health_busy(const kvm_cold_health_t *h)
{
    return h->probe_in_flight || h->state == KVM_CH_MARKING || h->state == KVM_CH_CLEARING;
}

void kvm_cold_health_free(kvm_cold_health_t *h)
{
    if (!h)
        return;
    KVM_ASSERT(!h->probe_in_flight);
    free(h);
}
