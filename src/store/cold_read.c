// SPDX-License-Identifier: Apache-2.0
/*
 * cold_read.c — cold-only reads, the reader side (cold_glue.h kvm_cold_read; docs/cold.md
 * "Last-hot eviction, restore", "Remote restore"). Owns struct cread, one restore handed from the
 * application thread to the loop (refcounted, one ref per side): a local restore through the
 * cold core, verified against the route's length and checksum; or, when the device belongs to
 * another runtime, a STORE_RPC_COLD_READ to it, a transport read of the staged slot into a
 * registered bounce buffer, verification, and the STORE_RPC_COLD_ACK of its token (struct cack).
 * Also the local group of a batch restore (struct lbatch, kvm_cold_local_batch) and the helpers
 * cold_rbatch.c shares (ACK posting, the request hashes).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bytes.h"
#include "core/wire.h"
#include "env/clock.h"
#include "net/transport.h"
#include "store/cold_int.h"
#include "store/proto.h"

/* ---- cold-only reads ------------------------------------------------------------------------ */

struct cread {
    struct cread *next, *prev; /* [loop] g->reads, while the restore is in the core */
    struct kvm_cold *g;        /* [loop] set while listed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* app thread + loop */
    bool done, abandoned;
    int rc;
    kvm_rt_t *rt;
    kvm_ident_t ident;
    kvm_runtime_id_t owner; /* the device's owner runtime */
    uint32_t timeout_ms;    /* remote: the time left at the call */
    const struct iovec *iov;
    int iovcnt;
    uint64_t len, checksum;
    /* remote restore: what the reader expects (validated by the owner) and the staged slot */
    bool remote;
    uint8_t wire_ver; /* STORE_COLD_READ_VERSION (a test hook may send another, see cread_new) */
    uint64_t version_h, locator_fp;
    const char *data_addr; /* [loop] the owner's transport address (interned) */
    uint64_t st_seg, st_off, st_len, st_grant, st_token;
    char err[256];
};

static void cread_unref(struct cread *r)
{
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    kvm_ident_free(&r->ident);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* The verified bytes into the caller's buffers (at most len, as far as they reach). */
static void copy_out(const struct cread *r, const void *buf, uint64_t len)
{
    uint64_t pos = 0;
    for (int i = 0; i < r->iovcnt && pos < len; i++) {
        size_t k = r->iov[i].iov_len < len - pos ? r->iov[i].iov_len : (size_t)(len - pos);
        memcpy(r->iov[i].iov_base, (const uint8_t *)buf + pos, k);
        pos += k;
    }
}

static void cread_finish(struct cread *r, int rc, const void *buf, uint64_t len)
{
    kvm_rt_t *rt = r->rt;
    if (r->g) {
        KVM_COLD_LIST_UNLINK(r->g->reads, r, next, prev);
        r->g = NULL;
    }
    if (!r->remote) { /* (a remote restore is verified after its transfer, counted in kvm_cold_read)
                       */
        if (rc == 0 && (len != r->len || kvm_checksum(buf, len) != r->checksum))
            rc = KVMESH_ECHECKSUM; /* never hand out bytes the route does not vouch for */
        obs_count(rt->metrics, cold_restores_total, rc == 0 ? OBS_OUTCOME_OK : OBS_OUTCOME_ERROR,
                  OBS_NONE, 1);
    }
    pthread_mutex_lock(&r->mu);
    if (!r->abandoned && rc == 0 && !r->remote)
        copy_out(r, buf, len);
    r->rc = rc;
    r->done = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    cread_unref(r);
}

static void restored(void *arg, int rc, const void *buf, uint64_t len)
{
    cread_finish(arg, rc, buf, len);
}

static void remote_done(rpc_call_t *call, struct rpc_result *res, void *arg)
{
    (void)call;
    struct cread *r = arg;
    int rc = res->status;
    if (rc == KVMESH_EPROTO && strstr(res->error, "older release")) {
        snprintf(r->err, sizeof(r->err), "%s", res->error); /* the owner named the older side */
    } else if (rc == KVMESH_EPROTO) {
        /* an owner of an older release (COLD_READ version 1, no staging) cannot decode a
         * version 2 request: say so, not just "malformed" */
        snprintf(r->err, sizeof(r->err),
                 "the cold copy's owner refused the request as malformed (%s): it probably runs "
                 "an older release that speaks cold read version 1 (no staging pool) while this "
                 "reader speaks version %u; upgrade the owner runtime (it keeps its cold_root) "
                 "and read again",
                 res->error, (unsigned)STORE_COLD_READ_VERSION);
    } else if (rc) {
        snprintf(r->err, sizeof(r->err), "%s", res->error);
    } else {
        kvm_rd_t d;
        kvm_rd_init(&d, res->body, res->body_len);
        uint8_t ver = kvm_rd_u8(&d);
        if (kvm_rd_ok(&d) && ver != STORE_COLD_READ_VERSION) {
            snprintf(r->err, sizeof(r->err),
                     "the cold copy's owner answered with cold read version %u, this reader "
                     "speaks version %u: upgrade the older of the two runtimes",
                     (unsigned)ver, (unsigned)STORE_COLD_READ_VERSION);
            cread_finish(r, KVMESH_EPROTO, NULL, 0);
            return;
        }
        if (!kvm_rd_ok(&d) && res->payload_len > 0) { /* a v1 owner answers the bytes */
            snprintf(r->err, sizeof(r->err),
                     "the cold copy's owner answered a version 1 cold read (the payload inline, "
                     "no staging slot): it runs an older release; upgrade it (it keeps its "
                     "cold_root) and read again");
            cread_finish(r, KVMESH_EPROTO, NULL, 0);
            return;
        }
        r->st_seg = kvm_rd_u64le(&d);
        r->st_off = kvm_rd_u64le(&d);
        r->st_len = kvm_rd_u64le(&d);
        r->st_grant = kvm_rd_u64le(&d);
        r->st_token = kvm_rd_u64le(&d);
        if (!kvm_rd_ok(&d) || r->st_len != r->len || !r->data_addr || !r->data_addr[0])
            rc = KVMESH_EPROTO;
    }
    cread_finish(r, rc, NULL, 0);
}

/* [loop] The device belongs to another runtime: ask it to stage the object
 * (STORE_RPC_COLD_READ); the reader then reads the slot through the transport. */
static void cread_remote(void *arg)
{
    struct cread *r = arg;
    kvm_rt_t *rt = r->rt;
    const struct kvm_member *m = kvm_member_find(rt, &r->owner);
    rpc_peer *p = m ? kvm_rt_peer(rt, m) : NULL;
    r->data_addr = m ? m->data_addr : NULL;
    uint8_t body[64 + KVM_IDENT_ENC_MAX_LEN];
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u8(&w, r->wire_ver);
    kvm_wr_u64le(&w, r->version_h);
    kvm_wr_u64le(&w, r->locator_fp);
    kvm_wr_u64le(&w, r->len);
    kvm_wr_u64le(&w, r->checksum);
    kvm_wr_u64le(&w, kvm_cold_namespace_u64(&r->ident));
    kvm_wr_bytes(&w, r->owner.b, sizeof(r->owner.b));
    size_t blen = 0;
    int rc = p ? wire_ident_encode(&r->ident, body + w.len, sizeof(body) - w.len, &blen)
               : KVMESH_EUNAVAILABLE;
    if (!rc && w.err)
        rc = w.err;
    if (!rc) {
        struct rpc_msg msg = {.type = STORE_RPC_COLD_READ,
                              .body = body,
                              .body_len = w.len + blen,
                              .timeout_ms = r->timeout_ms ? r->timeout_ms : 1};
        rc = rpc_call(p, &msg, remote_done, r, NULL);
    }
    if (rc)
        cread_finish(r, rc, NULL, 0);
}

static void cread_start(void *arg)
{
    struct cread *r = arg;
    struct kvm_cold *g = kvm_cold_dev(r->rt);
    if (!g || !g->c) {
        cread_finish(r, KVMESH_ENOTSUP, NULL, 0);
        return;
    }
    r->g = g;
    KVM_COLD_LIST_PUSH(g->reads, r, next, prev);
    int rc = cold_restore(g->c, &r->ident, restored, r);
    if (rc)
        cread_finish(r, rc, NULL, 0);
}

/* ---- remote restore: the reader side ------------------------------------------------------- */

struct cack {
    kvm_rt_t *rt;
    kvm_runtime_id_t owner;
    uint64_t token;
};

/* [loop] STORE_RPC_COLD_ACK to the owner: its slot's transfer and reader pins go. Lost or late,
 * the owner's expiry recycles the slot. */
static void ack_send(void *arg)
{
    struct cack *a = arg;
    const struct kvm_member *m = kvm_member_find(a->rt, &a->owner);
    rpc_peer *p = m ? kvm_rt_peer(a->rt, m) : NULL;
    uint8_t body[16];
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u8(&w, STORE_COLD_READ_VERSION);
    kvm_wr_u64le(&w, a->token);
    struct rpc_msg msg = {.type = STORE_RPC_COLD_ACK, .body = body, .body_len = w.len};
    if (p)
        (void)rpc_notify(p, &msg, NULL, NULL);
    free(a);
}

/* Tests only: KVMESH_TEST_COLD_LATE_ACKS=N makes this process's first N remote restores hold
 * back their ACK until the next remote restore finished (a slow reader): the owner's expiry
 * fences their slots first, and their ACKs then arrive late (ignored, counted). */
static pthread_mutex_t late_mu = PTHREAD_MUTEX_INITIALIZER;
static int late_left = -1;
static struct cack *late_held[8];
static unsigned late_n;

static void ack_post(kvm_rt_t *rt, struct cack *a)
{
    if (env_post(rt->env, ack_send, a) != 0)
        free(a);
}

static void ack_or_hold(kvm_rt_t *rt, struct cack *a)
{
    struct cack *out[8];
    unsigned n = 0;
    pthread_mutex_lock(&late_mu);
    if (late_left < 0) {
        const char *e = getenv("KVMESH_TEST_COLD_LATE_ACKS");
        late_left = e && atoi(e) > 0 ? atoi(e) : 0;
    }
    if (late_left > 0 && late_n < 8) {
        late_left--;
        late_held[late_n++] = a;
        a = NULL;
    } else {
        for (; late_n > 0; late_n--)
            out[n++] = late_held[late_n - 1];
    }
    pthread_mutex_unlock(&late_mu);
    if (a)
        ack_post(rt, a);
    for (unsigned i = 0; i < n; i++) { /* only through the runtime that held them (alive) */
        if (out[i]->rt == rt)
            ack_post(rt, out[i]);
        else
            free(out[i]);
    }
}

/* [app] Reads the staged slot into a registered bounce buffer, verifies length and checksum
 * against the route, copies into the caller's buffers, then ACKs the token. */
static int remote_transfer(struct cread *r, uint64_t deadline_ms)
{
    kvm_rt_t *rt = r->rt;
    struct tp_segment *seg = NULL;
    int rc = kvm_rt_seg_open(rt, r->data_addr, r->st_seg, r->st_grant, &seg);
    uint8_t *buf = rc ? NULL : malloc(r->len ? r->len : 1);
    if (!rc && !buf)
        rc = KVMESH_ENOMEM;
    bool reg = false;
    if (!rc && (rc = tp_register_memory(rt->tp, buf, r->len ? r->len : 1)) == 0)
        reg = true;
    struct tp_batch *b = NULL;
    if (!rc)
        rc = tp_batch_new(rt->tp, 1, &b);
    if (!rc && r->len) {
        struct tp_request rq = {.op = TP_READ,
                                .local = buf,
                                .length = r->len,
                                .segment = seg,
                                .remote_offset = r->st_off,
                                .token = r->st_grant};
        rc = tp_submit(b, &rq, 1);
        if (!rc && tp_batch_wait(b, (int)kvm_deadline_left_ms(deadline_ms)) != 0) {
            tp_batch_abort(b);
            rc = KVMESH_ETIMEDOUT;
        }
        if (!rc)
            rc = tp_status(b, 0, NULL);
    }
    if (b)
        tp_batch_free(b); /* the transfer is terminal here */
    if (reg) {
        tp_unregister_memory(rt->tp, buf);
        kvm_waitq_signal(&rt->wq_reg); /* a registration slot is free (data.c) */
    }
    if (!rc && kvm_checksum(buf, r->len) != r->checksum)
        rc = KVMESH_ECHECKSUM; /* never hand out bytes the route does not vouch for */
    if (!rc)
        copy_out(r, buf, r->len);
    free(buf);
    struct cack *a = malloc(sizeof(*a));
    if (a) {
        *a = (struct cack){.rt = rt, .owner = r->owner, .token = r->st_token};
        ack_or_hold(rt, a);
    }
    return rc;
}

/* [app] Posts r (refs = 2) to the loop and waits for it, bounded by the deadline. */
static int cread_run(struct cread *r, env_cb start, uint64_t deadline_ms)
{
    kvm_rt_t *rt = r->rt;
    if (env_post(rt->env, start, r) != 0) {
        r->refs = 1;
        return KVMESH_EAGAIN;
    }
    struct timespec ts;
    env_clock_after(CLOCK_MONOTONIC, kvm_deadline_left_ms(deadline_ms), &ts);
    pthread_mutex_lock(&r->mu);
    int w = 0;
    while (!r->done && w == 0)
        w = pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    int rc = r->done ? r->rc : KVMESH_ETIMEDOUT;
    if (!r->done)
        r->abandoned = true;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static struct cread *cread_new(kvm_rt_t *rt, const kvm_route_t *route, const struct iovec *iov,
                               int iovcnt, uint64_t deadline_ms, bool remote)
{
    struct cread *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->refs = 2;
    r->rt = rt;
    r->iov = iov;
    r->iovcnt = iovcnt;
    r->len = route->length;
    r->checksum = route->checksum;
    r->owner = route->cold.owner;
    r->remote = remote;
    /* Tests only: KVMESH_TEST_COLD_READ_VERSION=N sends request version N (an older reader as
     * the owner sees it); read here, on the calling thread */
    const char *tv = remote ? getenv("KVMESH_TEST_COLD_READ_VERSION") : NULL;
    r->wire_ver =
        tv && atoi(tv) > 0 && atoi(tv) < 256 ? (uint8_t)atoi(tv) : STORE_COLD_READ_VERSION;
    r->version_h = kvm_cold_version_u64(&route->version);
    r->locator_fp = kvm_cold_backing_fingerprint(&route->cold);
    r->timeout_ms = kvm_deadline_left_ms(deadline_ms);
    if (kvm_ident_copy(&r->ident, &route->ident) != 0) {
        r->refs = 1;
        cread_unref(r);
        return NULL;
    }
    return r;
}

int kvm_cold_read(kvm_rt_t *rt, const kvm_route_t *route, const struct iovec *iov, int iovcnt,
                  uint64_t deadline_ms)
{
    if (route->cold.kind != KVM_COLD_MATERIALIZED)
        return kvm_errf(KVMESH_EUNAVAILABLE, "no hot replica and no materialized cold copy");
    bool remote = !kvm_id128_equal(&route->cold.owner, &rt->self.id);
    if (!remote && !kvm_cold_dev(rt))
        return kvm_errf(KVMESH_ENOTSUP, "the object's cold copy is on this runtime's device but "
                                        "its cold tier is off (cold_kind)");
    int rc;
    char err[256] = "";
    uint64_t t0 = env_clock_mono_ns();
    /* Remote: the owner answers backpressure (STAGING_EBACKPRESSURE) while its staging pool is
     * full; retry with a capped backoff until the deadline. */
    for (uint32_t attempt = 0;; attempt++) {
        struct cread *r = cread_new(rt, route, iov, iovcnt, deadline_ms, remote);
        if (!r)
            return KVMESH_ENOMEM;
        rc = cread_run(r, remote ? cread_remote : cread_start, deadline_ms);
        if (rc == 0 && remote)
            rc = remote_transfer(r, deadline_ms);
        snprintf(err, sizeof(err), "%s", r->err);
        cread_unref(r);
        uint64_t left = kvm_deadline_left_ms(deadline_ms);
        if (!remote || rc != STAGING_EBACKPRESSURE || left == 0)
            break;
        obs_count(rt->metrics, cold_restore_retries_total, OBS_NONE, OBS_NONE, 1);
        uint64_t ms = 1ull << (attempt < 6 ? attempt : 6); /* 1 .. 64 ms */
        /* the remote pool frees room on its own clock: a timed pause, ended early by close */
        if (kvm_waitq_pause(&rt->wq_slots, env_clock_mono_ms() + (ms < left ? ms : left)) != 0) {
            rc = kvm_errf(KVMESH_ECLOSED, "the runtime closed during the cold restore");
            break;
        }
    }
    obs_observe(rt->metrics, cold_restore_duration_seconds, OBS_NONE, OBS_NONE,
                env_clock_mono_ns() - t0);
    if (remote) /* (a local restore is counted in cread_finish) */
        obs_count(rt->metrics, cold_restores_total, rc == 0 ? OBS_OUTCOME_OK : OBS_OUTCOME_ERROR,
                  OBS_NONE, 1);
    if (rc == KVMESH_ECHECKSUM || rc == KVMESH_ECORRUPT)
        return kvm_errf(rc, "the cold copy failed verification (length or checksum); no bytes "
                            "were returned");
    if (rc == KVMESH_ETIMEDOUT)
        return kvm_errf(rc, "the cold restore did not finish by the request deadline");
    if (rc == STAGING_EBACKPRESSURE && remote)
        return kvm_errf(rc,
                        "the cold copy's owner kept its staging pool full until the deadline "
                        "(%s); retry later or raise cold_staging_slots/cold_staging_bytes "
                        "there",
                        err);
    if (rc && remote && err[0])
        return kvm_errf(rc, "remote cold restore: %s", err);
    return rc;
}

/* ---- batch restore: the local group and the helpers of cold_batch.c ------------------------- */

struct lbatch {
    struct lbatch *next, *prev; /* g->lbatches */
    struct kvm_cold *g;
    kvm_cold_local_cb cb;
    void *arg;
};

static void lb_done(void *arg, cold_batch_item_t *items, size_t n)
{
    (void)items, (void)n;
    struct lbatch *l = arg;
    KVM_COLD_LIST_UNLINK(l->g->lbatches, l, next, prev);
    l->cb(l->arg, 0);
    free(l);
}

int kvm_cold_local_batch(kvm_rt_t *rt, cold_batch_item_t *items, size_t n, kvm_cold_local_cb cb,
                         void *arg, size_t *jobs)
{
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!g || !g->c || g->closed)
        return kvm_errf(KVMESH_ENOTSUP, "the object's cold copy is on this runtime's device but "
                                        "its cold tier is not open");
    struct lbatch *l = calloc(1, sizeof(*l));
    if (!l)
        return KVMESH_ENOMEM;
    *l = (struct lbatch){.g = g, .cb = cb, .arg = arg};
    KVM_COLD_LIST_PUSH(g->lbatches, l, next, prev);
    int rc = cold_restore_batch(g->c, items, n, lb_done, l, jobs); /* (lb_done may run inside) */
    if (rc) {
        KVM_COLD_LIST_UNLINK(g->lbatches, l, next, prev);
        free(l);
    }
    return rc;
}

void kvm_cold_ack_post(kvm_rt_t *rt, const kvm_runtime_id_t *owner, uint64_t token)
{
    struct cack *a = malloc(sizeof(*a));
    if (!a)
        return; /* the owner's expiry recycles the slot */
    *a = (struct cack){.rt = rt, .owner = *owner, .token = token};
    ack_post(rt, a);
}

uint64_t kvm_cold_version_hash(const kvm_route_version_t *v)
{
    return kvm_cold_version_u64(v);
}

uint64_t kvm_cold_namespace_hash(const kvm_ident_t *id)
{
    return kvm_cold_namespace_u64(id);
}

void kvm_cold_reads_close(struct kvm_cold *g)
{
    while (g->reads)
        cread_finish(g->reads, KVMESH_ECANCELED, NULL, 0);
    while (g->lbatches) { /* the worker finished their reads: the buffers are free again */
        struct lbatch *l = g->lbatches;
        KVM_COLD_LIST_UNLINK(g->lbatches, l, next, prev);
        l->cb(l->arg, KVMESH_ECANCELED);
        free(l);
    }
}
