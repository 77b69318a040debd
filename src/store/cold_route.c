// SPDX-License-Identifier: Apache-2.0
/*
 * cold_route.c — the route callbacks the cold core calls (cold_route_ops_t; docs/cold.md "Store
 * wiring"): the exact lookup, the hot read of an offload (a local replica, else a remote one
 * through cold_resume.h), the materialize CAS and the last-hot eviction CAS, over the store's
 * route client. Owns struct rop, one per call in flight; each holds a reference on the glue
 * state and always answers the core (the route service's close cancels what is in flight).
 */
#include <string.h>

#include "net/seg.h"
#include "store/cold_int.h"
#include "store/cold_resume.h"

enum rop_kind { ROP_LOOKUP, ROP_READ_HOT, ROP_MATERIALIZE, ROP_EVICT };

struct rop {
    struct kvm_cold *g;
    enum rop_kind kind;
    cold_lookup_cb lcb;
    cold_rc_cb rcb;
    void *arg;
    kvm_op_id_t content_op;
    void *buf;
    uint64_t length;
    kvm_route_version_t expected;
    kvm_cold_backing_t mat;
    cold_evict_expect_t e;
};

/* Route calls always answer the core (it holds its memory until they do), also after
 * cold_close: the route service's close cancels them with KVMESH_ECANCELED. */
static void rop_free(struct rop *o)
{
    struct kvm_cold *g = o->g;
    free(o);
    kvm_cold_unref(g);
}

static void rop_rc(struct rop *o, int rc)
{
    cold_rc_cb cb = o->rcb;
    void *arg = o->arg;
    rop_free(o);
    cb(arg, rc);
}

static void obs_of(const kvm_route_t *r, cold_route_obs_t *obs)
{
    memset(obs, 0, sizeof(*obs));
    if (!r)
        return;
    obs->found = true;
    obs->tombstone = kvm_route_is_tombstone(r);
    obs->version = r->version;
    obs->content_op = r->content_op;
    obs->cold = r->cold;
    obs->n_replicas = r->n_replicas;
    memcpy(obs->replicas, r->replicas, sizeof(r->replicas[0]) * r->n_replicas);
}

/* Copies a local hot replica of r into buf and checks its checksum. */
static int read_local(kvm_rt_t *rt, const kvm_route_t *r, void *buf, uint64_t len)
{
    int rc = KVMESH_EUNAVAILABLE; /* a replica elsewhere only: not readable from here */
    uint32_t dead = 0;            /* replicas of this runtime id in a segment it no longer has */
    for (uint32_t i = 0; i < r->n_replicas; i++) {
        const kvm_hot_replica_t *rep = &r->replicas[i];
        if (!kvm_id128_equal(&rep->owner, &rt->self.id))
            continue;
        bool seg_here = false;
        for (uint32_t s = 0; s < rt->n_segs; s++)
            seg_here |= rt->segs[s].seg && rt->segs[s].seg->id == rep->segment;
        dead += !seg_here;
        for (uint32_t s = 0; s < rt->n_segs; s++) {
            if (!rt->segs[s].seg || rt->segs[s].seg->id != rep->segment)
                continue;
            uint8_t *p;
            struct seg *pin;
            enum seg_reason why;
            rc = seg_check(rt->reg, rep->segment, rep->offset, len, SEG_READ,
                           rt->segs[s].read_token, &p, &pin, &why);
            if (rc)
                break;
            memcpy(buf, p, len);
            seg_unpin(rt->reg, pin);
            if (kvm_checksum(buf, len) == r->checksum)
                return 0;
            rc = KVMESH_ECHECKSUM;
        }
    }
    /* Every replica was this runtime's, in segments of an earlier incarnation (a restart after
     * a crash): the hot copy is gone for good, the offload can never read it. */
    if (rc == KVMESH_EUNAVAILABLE && r->n_replicas > 0 && dead == r->n_replicas)
        return kvm_errf(KVMESH_ENOENT, "the object's only hot copies were in this runtime's "
                                       "DRAM before it restarted; it cannot be offloaded");
    return rc;
}

static void cas_done(void *arg, int rc, const kvm_route_t *r)
{
    (void)r;
    struct rop *o = arg;
    rop_rc(o, rc == 0 ? 0 : rc == KVMESH_ECONFLICT ? KVMESH_ECONFLICT : rc);
}

static void hot_remote_done(void *arg, int rc)
{
    rop_rc(arg, rc);
}

/* read_hot: a local replica; none readable here (e.g. this runtime restarted after a crash and
 * its DRAM copy is gone) but another runtime holds one: that one, through the transport on the
 * worker (cold_resume.h). */
static void read_hot(struct rop *o, const kvm_route_t *r)
{
    kvm_rt_t *rt = o->g->rt;
    int rc = read_local(rt, r, o->buf, o->length);
    if (rc == KVMESH_EUNAVAILABLE &&
        kvm_cold_read_hot_remote(rt, r, o->buf, o->length, kvm_cold_exec_enqueue, o->g,
                                 hot_remote_done, o) == 0)
        return;
    rop_rc(o, rc);
}

static void rop_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct rop *o = arg;
    kvm_rt_t *rt = o->g->rt;
    if (rc == KVMESH_ENOENT) {
        rc = 0;
        r = NULL;
    }
    if (o->kind == ROP_LOOKUP) {
        cold_route_obs_t obs;
        obs_of(rc == 0 ? r : NULL, &obs);
        cold_lookup_cb cb = o->lcb;
        void *a = o->arg;
        rop_free(o);
        cb(a, rc, rc == 0 ? &obs : NULL);
        return;
    }
    if (rc == 0 && (o->g->closed || !rt->route))
        rc = KVMESH_ECANCELED;
    if (rc) {
        rop_rc(o, rc);
        return;
    }
    bool live = r && !kvm_route_is_tombstone(r);
    if (o->kind == ROP_READ_HOT) {
        if (!live || !kvm_op_id_equal(&r->content_op, &o->content_op) || r->length != o->length) {
            rop_rc(o, KVMESH_ENOENT);
            return;
        }
        read_hot(o, r);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    if (o->kind == ROP_MATERIALIZE) {
        if (!live || !kvm_route_version_equal(&r->version, &o->expected) ||
            r->cold.kind != KVM_COLD_PENDING_OFFLOAD ||
            !kvm_op_id_equal(&r->cold.cold_op, &o->mat.cold_op) ||
            !kvm_op_id_equal(&r->content_op, &o->mat.content_op)) {
            rop_rc(o, KVMESH_ECONFLICT);
            return;
        }
        if (kvm_route_copy(&next, r) != 0) {
            rop_rc(o, KVMESH_ENOMEM);
            return;
        }
        next.cold = o->mat;
    } else { /* ROP_EVICT */
        const cold_evict_expect_t *e = &o->e;
        if (!live || !kvm_route_version_equal(&r->version, &e->version) ||
            !kvm_op_id_equal(&r->content_op, &e->content_op) ||
            r->cold.kind != KVM_COLD_MATERIALIZED ||
            !kvm_op_id_equal(&r->cold.cold_op, &e->cold_op) ||
            kvm_cold_backing_fingerprint(&r->cold) != e->locator_fp ||
            kvm_route_find_replica(r, &e->replica) < 0) {
            rop_rc(o, KVMESH_ECONFLICT);
            return;
        }
        if (kvm_route_copy(&next, r) != 0) {
            rop_rc(o, KVMESH_ENOMEM);
            return;
        }
        kvm_route_remove_replica(&next, &e->replica);
    }
    int crc = route_cas(rt->route, &r->version, &next, cas_done, o);
    kvm_route_free(&next);
    if (crc)
        rop_rc(o, crc);
}

static struct rop *rop_new(struct kvm_cold *g, enum rop_kind k, void *arg)
{
    struct rop *o = calloc(1, sizeof(*o));
    if (o) {
        o->g = g;
        o->kind = k;
        o->arg = arg;
        g->refs++;
    }
    return o;
}

static void rop_start(struct rop *o, const kvm_ident_t *id)
{
    kvm_rt_t *rt = o->g->rt;
    int rc = rt->route ? route_lookup(rt->route, id, rop_looked_up, o) : KVMESH_ECANCELED;
    if (rc == 0)
        return;
    if (o->kind == ROP_LOOKUP) {
        cold_lookup_cb cb = o->lcb;
        void *a = o->arg;
        rop_free(o);
        cb(a, rc, NULL);
    } else {
        rop_rc(o, rc);
    }
}

void kvm_cold_route_lookup(void *ctx, const kvm_ident_t *id, cold_lookup_cb cb, void *arg)
{
    struct rop *o = rop_new(ctx, ROP_LOOKUP, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM, NULL);
        return;
    }
    o->lcb = cb;
    rop_start(o, id);
}

static void r_read_hot(void *ctx, const kvm_ident_t *id, const kvm_op_id_t *content_op, void *buf,
                       uint64_t length, cold_rc_cb cb, void *arg)
{
    struct rop *o = rop_new(ctx, ROP_READ_HOT, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    o->rcb = cb;
    o->content_op = *content_op;
    o->buf = buf;
    o->length = length;
    rop_start(o, id);
}

static void r_materialize(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                          const kvm_cold_backing_t *mat, cold_rc_cb cb, void *arg)
{
    struct rop *o = rop_new(ctx, ROP_MATERIALIZE, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    o->rcb = cb;
    o->expected = *expected;
    o->mat = *mat;
    rop_start(o, id);
}

static void r_evict(void *ctx, const kvm_ident_t *id, const cold_evict_expect_t *e, cold_rc_cb cb,
                    void *arg)
{
    struct rop *o = rop_new(ctx, ROP_EVICT, arg);
    if (!o) {
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    o->rcb = cb;
    o->e = *e;
    rop_start(o, id);
}

cold_route_ops_t kvm_cold_route_ops(struct kvm_cold *g)
{
    return (cold_route_ops_t){.lookup = kvm_cold_route_lookup,
                              .read_hot = r_read_hot,
                              .materialize = r_materialize,
                              .evict = r_evict,
                              .ctx = g};
}
