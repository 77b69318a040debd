/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_device.c — cold device records: invariants, codec, the accounting step every op
 * transition applies in the same transaction (cold_device_account), registration and health
 * calls, the bounded device view and placement from it.
 *
 * Accounting invariant (checked by the simulator after reconciliation): reserved = the sum of
 * the lengths of the device's ops in RESERVED, PAYLOAD_WRITTEN, ROUTE_COMMITTED or RECLAIMING;
 * used = the sum over its USAGE_COMMITTED ops; n_reserved / n_used count them. A step that would
 * take more than a counter holds is refused (KVMESH_ECORRUPT) and nothing is written: usage never
 * underflows. Only PLANNED -> RESERVED adds reserved bytes, and only when used + reserved + len
 * <= capacity on a healthy, schedulable, active device, so concurrent reservers never
 * over-reserve: the device record's mod_rev serialises them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold_int.h"
#include "core/util.h"

const char *cold_dev_lifecycle_name(enum cold_dev_lifecycle l)
{
    switch (l) {
    case COLD_DEV_ACTIVE:
        return "active";
    case COLD_DEV_DRAINING:
        return "draining";
    case COLD_DEV_RETIRED:
        return "retired";
    }
    return "?";
}

const char *cold_dev_health_name(enum cold_dev_health h)
{
    switch (h) {
    case COLD_DEV_HEALTHY:
        return "healthy";
    case COLD_DEV_DEGRADED:
        return "degraded";
    case COLD_DEV_FAILED:
        return "failed";
    }
    return "?";
}

int cold_device_check(const cold_device_t *d)
{
    if (kvm_id128_is_nil(&d->id) || kvm_id128_is_nil(&d->owner))
        return kvm_errf(KVMESH_ECORRUPT, "cold device: nil id or owner");
    if (d->kind < COLD_BACKEND_LOCALDIR || d->kind > COLD_BACKEND_SIM)
        return kvm_errf(KVMESH_ECORRUPT, "cold device: unknown backend kind %d", (int)d->kind);
    if (d->lifecycle < COLD_DEV_ACTIVE || d->lifecycle > COLD_DEV_RETIRED)
        return kvm_errf(KVMESH_ECORRUPT, "cold device: unknown lifecycle %d", (int)d->lifecycle);
    if (d->health < COLD_DEV_HEALTHY || d->health > COLD_DEV_FAILED)
        return kvm_errf(KVMESH_ECORRUPT, "cold device: unknown health %d", (int)d->health);
    if (d->used > d->capacity || d->reserved > d->capacity - d->used)
        return kvm_errf(KVMESH_ECORRUPT,
                        "cold device: used %llu + reserved %llu exceed capacity %llu",
                        (unsigned long long)d->used, (unsigned long long)d->reserved,
                        (unsigned long long)d->capacity);
    if ((d->used > 0 && !d->n_used) || (d->reserved > 0 && !d->n_reserved))
        return kvm_errf(KVMESH_ECORRUPT, "cold device: byte and op counts disagree");
    if (memchr(d->root, '\0', sizeof(d->root)) == NULL ||
        memchr(d->tags, '\0', sizeof(d->tags)) == NULL)
        return kvm_errf(KVMESH_ECORRUPT, "cold device: unterminated root or tags");
    return 0;
}

bool cold_device_fits(const cold_device_t *d, uint64_t len)
{
    if (d->health != COLD_DEV_HEALTHY || !d->schedulable || d->lifecycle != COLD_DEV_ACTIVE)
        return false;
    uint64_t held = d->used + d->reserved;
    return held <= d->capacity && len <= d->capacity - held;
}

bool cold_device_readable(const cold_device_t *d)
{
    return d->health != COLD_DEV_FAILED && d->lifecycle != COLD_DEV_RETIRED;
}

int cold_device_account(cold_device_t *d, enum cold_op_state from, enum cold_op_state to,
                        uint64_t len)
{
    char hf = cold_op_state_holds(from), ht = cold_op_state_holds(to);
    if (hf == ht)
        return 0;
    cold_device_t n = *d;
    if (hf == 'r') {
        if (n.reserved < len || n.n_reserved == 0)
            return kvm_errf(KVMESH_ECORRUPT,
                            "cold device: releasing %llu reserved bytes (%s -> %s) but only %llu "
                            "reserved by %llu ops: refused (would underflow)",
                            (unsigned long long)len, cold_op_state_name(from),
                            cold_op_state_name(to), (unsigned long long)n.reserved,
                            (unsigned long long)n.n_reserved);
        n.reserved -= len;
        n.n_reserved--;
    } else if (hf == 'u') {
        if (n.used < len || n.n_used == 0)
            return kvm_errf(KVMESH_ECORRUPT,
                            "cold device: releasing %llu used bytes (%s -> %s) but only %llu used "
                            "by %llu ops: refused (would underflow)",
                            (unsigned long long)len, cold_op_state_name(from),
                            cold_op_state_name(to), (unsigned long long)n.used,
                            (unsigned long long)n.n_used);
        n.used -= len;
        n.n_used--;
    }
    if (ht == 'r') {
        if (len > n.capacity || n.used + n.reserved > n.capacity - len)
            return kvm_errf(KVMESH_ENOSPC, "cold device: no room for %llu bytes",
                            (unsigned long long)len);
        n.reserved += len;
        n.n_reserved++;
    } else if (ht == 'u') {
        n.used += len; /* moved from reserved: cannot exceed capacity */
        n.n_used++;
    }
    *d = n;
    return 0;
}

int cold_device_encode(const cold_device_t *d, uint8_t *buf, size_t cap, size_t *len)
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    cw_header(&w, COLD_SCHEMA_DEVICE);
    cw_id128(&w, &d->id);
    cw_id128(&w, &d->owner);
    kvm_wr_u64le(&w, d->owner_epoch);
    kvm_wr_u8(&w, (uint8_t)d->kind);
    kvm_wr_lp16le(&w, d->root, strnlen(d->root, sizeof(d->root) - 1));
    kvm_wr_u8(&w, (uint8_t)d->lifecycle);
    kvm_wr_u8(&w, d->schedulable ? 1 : 0);
    kvm_wr_u64le(&w, d->capacity);
    kvm_wr_u64le(&w, d->used);
    kvm_wr_u64le(&w, d->reserved);
    kvm_wr_u64le(&w, d->n_reserved);
    kvm_wr_u64le(&w, d->n_used);
    kvm_wr_lp16le(&w, d->tags, strnlen(d->tags, sizeof(d->tags) - 1));
    kvm_wr_u8(&w, (uint8_t)d->health);
    kvm_wr_u64le(&w, d->health_ms);
    return kvm_wr_finish(&w, len);
}

int cold_device_decode(const uint8_t *buf, size_t len, cold_device_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rd_t r;
    kvm_rd_init(&r, buf, len);
    cr_header(&r, COLD_SCHEMA_DEVICE);
    cr_id128(&r, &out->id);
    cr_id128(&r, &out->owner);
    out->owner_epoch = kvm_rd_u64le(&r);
    uint8_t kind = kvm_rd_u8(&r);
    cr_str(&r, out->root, sizeof(out->root));
    uint8_t lc = kvm_rd_u8(&r), sched = kvm_rd_u8(&r);
    out->capacity = kvm_rd_u64le(&r);
    out->used = kvm_rd_u64le(&r);
    out->reserved = kvm_rd_u64le(&r);
    out->n_reserved = kvm_rd_u64le(&r);
    out->n_used = kvm_rd_u64le(&r);
    cr_str(&r, out->tags, sizeof(out->tags));
    uint8_t h = kvm_rd_u8(&r);
    out->health_ms = kvm_rd_u64le(&r);
    if (!kvm_rd_end(&r) || sched > 1) {
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "cold device record: malformed (%zu bytes)", len);
    }
    out->kind = (cold_backend_kind_t)kind;
    out->lifecycle = (enum cold_dev_lifecycle)lc;
    out->schedulable = sched == 1;
    out->health = (enum cold_dev_health)h;
    if (cold_device_check(out) != 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        memset(out, 0, sizeof(*out));
        return kvm_errf(KVMESH_EPROTO, "cold device record: %s", msg);
    }
    return 0;
}

/* ---- decisions ---------------------------------------------------------------------------- */

void cold_decide_dev(cold_call_t *call, cold_decision_t *d)
{
    const cold_device_t *o = &call->dev;
    d->done = false;
    switch (call->kind) {
    case CK_DEV_GET:
        d->done = true;
        d->rc = call->found[CR_DEV] ? 0 : kvm_errf(KVMESH_ENOENT, "cold device: no record");
        return;
    case CK_DEV_REG: {
        const cold_device_t *q = &call->q_dev;
        call->ndev = *q;
        if (call->found[CR_DEV]) {
            if (q->owner_epoch < o->owner_epoch) {
                d->done = true;
                d->rc = kvm_errf(KVMESH_EINCOMPAT,
                                 "cold device: registration with owner epoch %llu is older than "
                                 "the stored %llu; restart the owner with a newer epoch",
                                 (unsigned long long)q->owner_epoch,
                                 (unsigned long long)o->owner_epoch);
                return;
            }
            if (q->capacity < o->used + o->reserved) {
                d->done = true;
                d->rc = kvm_errf(KVMESH_EINCOMPAT,
                                 "cold device: capacity %llu is below used %llu + reserved %llu; "
                                 "drain it before shrinking",
                                 (unsigned long long)q->capacity, (unsigned long long)o->used,
                                 (unsigned long long)o->reserved);
                return;
            }
            /* identity fields from the registration; accounting and health stay, and so do
             * lifecycle and schedulability (the operator's: kvmesh admin devices drain|retire) */
            call->ndev.lifecycle = o->lifecycle;
            call->ndev.schedulable = o->schedulable;
            call->ndev.used = o->used;
            call->ndev.reserved = o->reserved;
            call->ndev.n_used = o->n_used;
            call->ndev.n_reserved = o->n_reserved;
            call->ndev.health = o->health;
            call->ndev.health_ms = o->health_ms;
            if (memcmp(&call->ndev, o, sizeof(*o)) == 0) {
                d->done = true;
                d->rc = 0;
                d->repeated = true;
                return;
            }
        } else {
            call->ndev.used = call->ndev.reserved = 0;
            call->ndev.n_used = call->ndev.n_reserved = 0;
            call->ndev.health = COLD_DEV_HEALTHY;
            call->ndev.health_ms = env_wall_ms(call->c->env);
        }
        d->put[CR_DEV] = true;
        return;
    }
    case CK_DEV_HEALTH:
        if (!call->found[CR_DEV]) {
            d->done = true;
            d->rc = kvm_errf(KVMESH_ENOENT, "cold device: no record");
            return;
        }
        {
            /* a draining or retired device is never schedulable again (the operator's lifecycle
             * wins over a health writer that read the record before the drain) */
            bool sched = call->q_sched && o->lifecycle == COLD_DEV_ACTIVE;
            if (o->health == call->q_health && o->schedulable == sched) {
                d->done = true;
                d->repeated = true;
                return;
            }
            call->ndev = *o;
            if (o->health != call->q_health)
                call->ndev.health_ms = env_wall_ms(call->c->env);
            call->ndev.health = call->q_health;
            call->ndev.schedulable = sched;
        }
        d->put[CR_DEV] = true;
        return;
    default:
        KVM_ASSERT(!"not a device call");
    }
}

/* ---- calls -------------------------------------------------------------------------------- */

static int dev_call(cold_t *c, cold_ck_t kind, const kvm_tier_id_t *id, cold_call_t **out)
{
    cold_call_t *call = cold_call_new(c, kind, 1u << CR_DEV);
    if (!call)
        return KVMESH_ENOMEM;
    int rc = cold_key_dev(c, call->k[CR_DEV], id);
    if (rc) {
        free(call);
        return rc;
    }
    *out = call;
    return 0;
}

int cold_device_register(cold_t *c, const cold_device_t *desc, cold_dev_cb cb, void *arg)
{
    if (!c || !desc || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_device_register: NULL argument");
    cold_device_t q = *desc;
    q.used = q.reserved = q.n_used = q.n_reserved = 0;
    q.health = COLD_DEV_HEALTHY;
    int rc = cold_device_check(&q);
    if (rc)
        return cold_errctx(KVMESH_EINVAL, "cold_device_register");
    cold_call_t *call;
    if ((rc = dev_call(c, CK_DEV_REG, &desc->id, &call)) != 0)
        return rc;
    call->q_dev = q;
    call->dev_cb = cb;
    call->arg = arg;
    return cold_call_start(call);
}

int cold_device_set_health(cold_t *c, const kvm_tier_id_t *id, enum cold_dev_health h,
                           bool schedulable, cold_dev_cb cb, void *arg)
{
    if (!c || !id || !cb || h < COLD_DEV_HEALTHY || h > COLD_DEV_FAILED)
        return kvm_errf(KVMESH_EINVAL, "cold_device_set_health: bad argument");
    cold_call_t *call;
    int rc = dev_call(c, CK_DEV_HEALTH, id, &call);
    if (rc)
        return rc;
    call->q_health = h;
    call->q_sched = schedulable;
    call->dev_cb = cb;
    call->arg = arg;
    return cold_call_start(call);
}

int cold_device_get(cold_t *c, const kvm_tier_id_t *id, cold_dev_cb cb, void *arg)
{
    if (!c || !id || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_device_get: NULL argument");
    cold_call_t *call;
    int rc = dev_call(c, CK_DEV_GET, id, &call);
    if (rc)
        return rc;
    call->dev_cb = cb;
    call->arg = arg;
    return cold_call_start(call);
}

/* ---- view and placement ------------------------------------------------------------------- */

typedef struct view_req {
    cold_t *c;
    cold_rc_cb cb;
    void *arg;
} view_req_t;

static void on_view(void *arg, const meta_result_t *res)
{
    view_req_t *v = arg;
    cold_t *c = v->c;
    int rc = res->rc;
    c->view_busy = false;
    if (rc == 0 && !c->closing) {
        size_t n = 0;
        for (size_t i = 0; i < res->n_kvs && n < COLD_DEVICES_MAX; i++) {
            cold_device_t d;
            if (cold_device_decode(res->kvs[i].value, res->kvs[i].value_len, &d) != 0) {
                rc = cold_errctx(KVMESH_ECORRUPT, res->kvs[i].key);
                break;
            }
            c->view[n++] = d;
        }
        if (rc == 0)
            c->n_view = n;
    }
    if (!c->closing)
        v->cb(v->arg, rc);
    free(v);
    cold_aux_release(c);
}

int cold_view_refresh(cold_t *c, cold_rc_cb cb, void *arg)
{
    if (!c || !cb)
        return kvm_errf(KVMESH_EINVAL, "cold_view_refresh: NULL argument");
    if (c->view_busy)
        return kvm_errf(KVMESH_EAGAIN, "cold_view_refresh: a refresh is running");
    char prefix[KS_KEY_CAP];
    int rc = ks_cold_device_prefix(prefix, sizeof(prefix), c->dep);
    if (rc)
        return rc;
    view_req_t *v = calloc(1, sizeof(*v));
    if (!v)
        return KVMESH_ENOMEM;
    *v = (view_req_t){.c = c, .cb = cb, .arg = arg};
    c->view_busy = true;
    cold_aux_hold(c);
    c->st.meta_round_trips++;
    rc = meta_range(c->m, prefix, NULL, COLD_DEVICES_MAX, c->cfg.timeout_ms, on_view, v);
    if (rc) {
        c->view_busy = false;
        free(v);
        cold_aux_release(c);
    }
    return rc;
}

const cold_device_t *cold_view_find(const cold_t *c, const kvm_tier_id_t *id)
{
    for (size_t i = 0; i < c->n_view; i++)
        if (kvm_id128_equal(&c->view[i].id, id))
            return &c->view[i];
    return NULL;
}

size_t cold_view_list(const cold_t *c, const cold_device_t **out)
{
    *out = c->view;
    return c->n_view;
}

int cold_place(cold_t *c, uint64_t len, kvm_tier_id_t *dev, kvm_runtime_id_t *owner)
{
    return cold_place_owned(c, len, NULL, 0, dev, owner);
}

int cold_place_owned(cold_t *c, uint64_t len, const kvm_runtime_id_t *owners, size_t n_owners,
                     kvm_tier_id_t *dev, kvm_runtime_id_t *owner)
{
    const cold_device_t *best = NULL;
    uint64_t best_free = 0;
    for (size_t i = 0; i < c->n_view; i++) {
        const cold_device_t *d = &c->view[i];
        if (!cold_device_fits(d, len))
            continue;
        bool listed = owners == NULL;
        for (size_t k = 0; k < n_owners && !listed; k++)
            listed = kvm_id128_equal(&d->owner, &owners[k]);
        if (!listed)
            continue;
        uint64_t fr = d->capacity - d->used - d->reserved;
        if (!best || fr > best_free || (fr == best_free && kvm_id128_cmp(&d->id, &best->id) < 0)) {
            best = d;
            best_free = fr;
        }
    }
    if (!best)
        return kvm_errf(KVMESH_ENOSPC,
                        "cold placement: no healthy schedulable device has %llu bytes free "
                        "(%zu devices in the view)",
                        (unsigned long long)len, c->n_view);
    *dev = best->id;
    if (owner)
        *owner = best->owner;
    return 0;
}
