/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_tx.c — the cold handle and its metadata transaction engine, which runs every device, op
 * and reclaim call as a read/compare-and-set loop over meta.h transactions:
 *
 *   read   one txn of GETs of the records the call needs (device, op, reclaim), at one revision;
 *          a call that learns a key from a record (an advance learns its device from the op, a
 *          handoff its op and device from the reclaim) reads again with it;
 *   decide a pure function of that snapshot and the request (cold_decide_*): a result (refusal,
 *          or an idempotent repeat), or the new records;
 *   write  one txn: compare mod_rev of every record read (absent = 0), PUT/DEL the new records
 *          and move their due-index entries; the else branch GETs the same records, so a lost
 *          race re-decides on fresh state without another round trip.
 * A failed or indeterminate write goes back to read: the cold op / reclaim op id makes every
 * decision idempotent, so the re-read tells whether it applied. Rounds are bounded
 * (COLD_ATTEMPTS_MAX) and back off exponentially on errors.
 *
 * Ownership: the handle owns its calls (a list). cold_close() frees calls waiting on a timer and
 * lets those inside a metadata call end at their callback without calling the user; the handle
 * is freed when no call and no auxiliary work (worker jobs, restores, passes) remains.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cold/cold_int.h"
#include "core/util.h"

/* ---- keys ----------------------------------------------------------------------------------- */

int cold_key_dev(cold_t *c, char *out, const kvm_tier_id_t *id)
{
    char hex[KVM_ID128_HEX_LEN + 1];
    return ks_cold_device_key(out, KS_KEY_CAP, c->dep, kvm_id128_fmt(id, hex));
}

int cold_key_op(cold_t *c, char *out, const kvm_op_id_t *id)
{
    char s[COLD_OPKEY_CAP];
    return ks_cold_op_key(out, KS_KEY_CAP, c->dep, kvm_op_id_fmt(id, s));
}

int cold_key_rec(cold_t *c, char *out, const kvm_op_id_t *id)
{
    char s[COLD_OPKEY_CAP];
    return ks_reclaim_key(out, KS_KEY_CAP, c->dep, kvm_op_id_fmt(id, s));
}

int cold_due_key_op(cold_t *c, const cold_op_t *op, char *out)
{
    if (op->state == COLD_OP_USAGE_COMMITTED || op->state == COLD_OP_NONE ||
        (op->state == COLD_OP_RELEASED && !op->deadline_ms))
        return 0;
    char s[COLD_OPKEY_CAP];
    int rc = ks_cold_due_key(out, KS_KEY_CAP, c->dep,
                             op->state == COLD_OP_RELEASED ? COLD_DUE_RELEASED
                                                           : cold_op_state_name(op->state),
                             op->deadline_ms, kvm_op_id_fmt(&op->id, s));
    return rc ? rc : 1;
}

int cold_due_key_rec(cold_t *c, const cold_reclaim_t *r, char *out)
{
    const char *st = r->r.state == KVM_RECLAIM_PLANNED           ? COLD_DUE_RECLAIM_PLANNED
                     : r->r.state == KVM_RECLAIM_BACKEND_DELETED ? COLD_DUE_RECLAIM_DELETED
                     : r->r.state == KVM_RECLAIM_USAGE_RELEASED && r->deadline_ms
                         ? COLD_DUE_RECLAIM_DONE
                         : NULL;
    if (!st)
        return 0;
    char s[COLD_OPKEY_CAP];
    int rc = ks_cold_due_key(out, KS_KEY_CAP, c->dep, st, r->deadline_ms,
                             kvm_op_id_fmt(&r->r.reclaim_op, s));
    return rc ? rc : 1;
}

uint64_t cold_purge_deadline(cold_t *c)
{
    return c->cfg.purge_after_ms ? env_wall_ms(c->env) + c->cfg.purge_after_ms : 0;
}

uint64_t cold_deadline(cold_t *c, uint32_t attempts)
{
    uint64_t ttl = c->cfg.op_ttl_ms;
    uint64_t ms = ttl << KVM_MIN(attempts, 10u);
    if (attempts && ms > c->cfg.backoff_max_ms)
        ms = KVM_MAX((uint64_t)c->cfg.backoff_max_ms, ttl);
    return env_wall_ms(c->env) + ms;
}

static void call_done(cold_call_t *call, int rc, const cold_decision_t *d);

/* ---- handle --------------------------------------------------------------------------------- */

static void maybe_free(cold_t *c)
{
    if (c->closing && c->n_calls == 0 && c->n_aux == 0)
        free(c);
}

void cold_aux_hold(cold_t *c)
{
    c->n_aux++;
}

void cold_aux_release(cold_t *c)
{
    KVM_ASSERT(c->n_aux > 0);
    c->n_aux--;
    maybe_free(c);
}

static void io_inline(void *ctx, cold_exec_t *io)
{
    (void)ctx;
    io->run(io);
    io->done(io);
}

void cold_exec_submit(cold_t *c, cold_exec_t *io)
{
    if (c->cfg.exec && c->cfg.exec->submit)
        c->cfg.exec->submit(c->cfg.exec->ctx, io);
    else
        io_inline(NULL, io);
}

const cold_backend_t *cold_attached(const cold_t *c, const kvm_tier_id_t *dev)
{
    for (size_t i = 0; i < c->n_att; i++)
        if (kvm_id128_equal(&c->att[i].dev, dev))
            return c->att[i].be;
    return NULL;
}

int cold_new(cold_t **out, env_t *env, meta_t *m, const cold_route_ops_t *route,
             const cold_config_t *cfg)
{
    if (!out || !env || !m || !route || !cfg || !cfg->deployment)
        return kvm_errf(KVMESH_EINVAL, "cold_new: NULL argument");
    if (!route->lookup || !route->read_hot || !route->materialize || !route->evict)
        return kvm_errf(KVMESH_EINVAL, "cold_new: route ops lookup, read_hot, materialize and "
                                       "evict are required");
    int rc = ks_validate_deployment(cfg->deployment);
    if (rc)
        return rc;
    if (kvm_id128_is_nil(&cfg->self))
        return kvm_errf(KVMESH_EINVAL, "cold_new: nil runtime id");
    if (cfg->max_inflight > COLD_INFLIGHT_MAX || cfg->queue_cap > COLD_QUEUE_MAX)
        return kvm_errf(KVMESH_ECONFIG, "cold_new: max_inflight <= %d and queue_cap <= %d",
                        COLD_INFLIGHT_MAX, COLD_QUEUE_MAX);
    cold_t *c = calloc(1, sizeof(*c));
    if (!c)
        return KVMESH_ENOMEM;
    c->env = env;
    c->m = m;
    c->route = *route;
    c->cfg = *cfg;
    snprintf(c->dep, sizeof(c->dep), "%s", cfg->deployment);
    c->cfg.deployment = c->dep;
    if (!c->cfg.op_ttl_ms)
        c->cfg.op_ttl_ms = 10000;
    if (!c->cfg.backoff_max_ms)
        c->cfg.backoff_max_ms = 10000;
    if (!c->cfg.max_inflight)
        c->cfg.max_inflight = 8;
    if (!c->cfg.queue_cap)
        c->cfg.queue_cap = 1024;
    if (!c->cfg.max_buffer)
        c->cfg.max_buffer = 64ull << 20;
    rc = cold_worker_init(c);
    if (rc) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int cold_attach_backend(cold_t *c, const kvm_tier_id_t *dev, const cold_backend_t *be)
{
    if (!c || !dev || !be || !be->ops)
        return kvm_errf(KVMESH_EINVAL, "cold_attach_backend: NULL argument");
    if (cold_attached(c, dev))
        return kvm_errf(KVMESH_EEXIST, "cold_attach_backend: device already attached");
    if (c->n_att == COLD_BACKENDS_MAX)
        return kvm_errf(KVMESH_ENOSPC, "cold_attach_backend: at most %d devices",
                        COLD_BACKENDS_MAX);
    c->att[c->n_att++] = (cold_att_t){.dev = *dev, .be = be};
    return 0;
}

void cold_close(cold_t *c)
{
    if (!c)
        return;
    c->closing = true;
    cold_aux_hold(c); /* internal callbacks below may release the last other hold */
    bool again = true;
    while (again) { /* a callback may end other calls: rescan until none waits on a timer */
        again = false;
        for (cold_call_t *call = c->calls; call; call = call->next) {
            if (call->timer && !call->in_meta) {
                env_timer_cancel(c->env, call->timer);
                call->timer = 0;
                call_done(call, KVMESH_ECANCELED, NULL); /* internal ones free their driver */
                again = true;
                break;
            }
        }
    }
    cold_worker_close(c);
    cold_aux_release(c);
}

void cold_get_stats(const cold_t *c, cold_stats_t *out)
{
    *out = c->st;
}

cold_dev_stats_t *cold_dev_st(cold_t *c, const kvm_tier_id_t *dev)
{
    for (size_t i = 0; i < c->n_att; i++)
        if (kvm_id128_equal(&c->att[i].dev, dev))
            return &c->att[i].st;
    return &c->dev_st_none;
}

int cold_get_device_stats(const cold_t *c, const kvm_tier_id_t *dev, cold_dev_stats_t *out)
{
    for (size_t i = 0; i < c->n_att; i++)
        if (kvm_id128_equal(&c->att[i].dev, dev)) {
            *out = c->att[i].st;
            return 0;
        }
    memset(out, 0, sizeof(*out));
    return KVMESH_ENOENT;
}

int cold_check_invariants(const cold_t *c)
{
    size_t n = 0;
    for (const cold_call_t *k = c->calls; k; k = k->next)
        n++;
    if (n != c->n_calls) /* (outside callbacks: inside one, the finishing call is unlisted) */
        return kvm_errf(KVMESH_ECORRUPT, "cold: %zu calls listed, %zu counted", n, c->n_calls);
    if (c->n_active > c->cfg.max_inflight || c->n_queued > c->cfg.queue_cap)
        return kvm_errf(KVMESH_ECORRUPT, "cold: worker bounds exceeded (%zu active, %zu queued)",
                        c->n_active, c->n_queued);
    if (c->n_sf > COLD_RESTORES_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "cold: restore bound exceeded");
    if (c->n_att > COLD_BACKENDS_MAX || c->n_view > COLD_DEVICES_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "cold: device bounds exceeded");
    for (size_t i = 0; i < c->n_view; i++)
        if (cold_device_check(&c->view[i]) != 0)
            return cold_errctx(KVMESH_ECORRUPT, "cold: device view");
    return cold_worker_check(c);
}

/* ---- calls ---------------------------------------------------------------------------------- */

cold_call_t *cold_call_new(cold_t *c, cold_ck_t kind, unsigned want)
{
    cold_call_t *call = calloc(1, sizeof(*call));
    if (!call)
        return NULL;
    call->c = c;
    call->kind = kind;
    call->want = want;
    call->internal = c->internal_next;
    c->internal_next = false;
    return call;
}

static void call_read(cold_call_t *call);

static void call_done(cold_call_t *call, int rc, const cold_decision_t *d)
{
    cold_t *c = call->c;
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    /* n_calls still counts this call during its callback, so the handle outlives it */
    if (rc && rc != KVMESH_ECANCELED)
        c->st.last_error = rc;
    if (rc == KVMESH_ECORRUPT)
        c->st.corrupt++;
    bool w_dev = d && d->put[CR_DEV], w_op = d && d->put[CR_OP], w_rec = d && d->put[CR_REC];
    if (call->internal || (!c->closing && rc != KVMESH_ECANCELED)) {
        bool rep = d && d->repeated;
        const cold_device_t *dev = w_dev ? &call->ndev : call->found[CR_DEV] ? &call->dev : NULL;
        const cold_op_t *op = w_op ? &call->nop : call->found[CR_OP] ? &call->op : NULL;
        const cold_reclaim_t *rec = w_rec                 ? &call->nrec
                                    : d && d->del[CR_REC] ? NULL
                                    : call->found[CR_REC] ? &call->rec
                                                          : NULL;
        if (call->op_cb) {
            cold_op_view_t v = {.op = op, .dev = dev, .repeated = rep};
            call->op_cb(call->arg, rc, &v);
        } else if (call->dev_cb) {
            call->dev_cb(call->arg, rc, dev);
        } else if (call->rec_cb) {
            cold_reclaim_view_t v = {.rec = rec, .op = op, .repeated = rep};
            call->rec_cb(call->arg, rc, &v);
        }
    }
    free(call);
    c->n_calls--;
    maybe_free(c);
}

static void retry_cb(void *arg)
{
    cold_call_t *call = arg;
    call->timer = 0;
    call_read(call);
}

static void call_retry(cold_call_t *call, int rc)
{
    cold_t *c = call->c;
    call->last_rc = rc;
    if (++call->attempts > COLD_ATTEMPTS_MAX) {
        int out = rc ? rc : kvm_errf(KVMESH_ECONFLICT, "cold: contention; retry");
        if (call->wrote_maybe && out != KVMESH_ECONFLICT)
            out = kvm_errf(KVMESH_EINDETERMINATE,
                           "cold: the outcome of a write is unknown "
                           "after %u attempts; repeat the call",
                           call->attempts);
        call_done(call, out, NULL);
        return;
    }
    uint64_t ms = 1ull << KVM_MIN(call->attempts, 6u);
    uint64_t d = (ms * 1000000ull / 2) + env_rand_u64(c->env) % (ms * 1000000ull / 2 + 1);
    call->timer = env_timer_start(c->env, d, retry_cb, call);
}

static int decode_rec(cold_call_t *call, int i, const uint8_t *v, size_t n)
{
    switch (i) {
    case CR_DEV:
        return cold_device_decode(v, n, &call->dev);
    case CR_OP:
        return cold_op_decode(v, n, &call->op);
    default:
        return cold_reclaim_decode(v, n, &call->rec);
    }
}

static size_t fill_gets(cold_call_t *call, meta_op_t *ops)
{
    size_t n = 0;
    for (int i = 0; i < CR_N; i++)
        if (call->want & (1u << i))
            ops[n++] = (meta_op_t){.type = META_OP_GET, .key = call->k[i]};
    return n;
}

static int take_snapshot(cold_call_t *call, const meta_kv_t *kvs, size_t n)
{
    size_t j = 0;
    for (int i = 0; i < CR_N; i++) {
        if (!(call->want & (1u << i)))
            continue;
        if (j >= n)
            return kvm_errf(KVMESH_EBACKEND, "cold: metadata returned %zu results", n);
        const meta_kv_t *kv = &kvs[j++];
        call->found[i] = kv->found;
        call->rev[i] = kv->found ? kv->mod_rev : 0;
        if (!kv->found)
            continue;
        int rc = decode_rec(call, i, kv->value, kv->value_len);
        if (rc)
            return cold_errctx(KVMESH_ECORRUPT, kv->key);
    }
    return 0;
}

/* Keys a call learns from its records: true when one was added (read again). */
static int learn_keys(cold_call_t *call, bool *added)
{
    cold_t *c = call->c;
    int rc = 0;
    *added = false;
    if (call->kind == CK_REC_HANDOFF && call->found[CR_REC] && !(call->want & (1u << CR_OP))) {
        if ((rc = cold_key_op(c, call->k[CR_OP], &call->rec.r.cold_op)) != 0)
            return rc;
        if ((rc = cold_key_dev(c, call->k[CR_DEV], &call->rec.r.tier)) != 0)
            return rc;
        call->want |= (1u << CR_OP) | (1u << CR_DEV);
        *added = true;
    }
    if (call->kind == CK_OP_ADVANCE && call->found[CR_OP] && !(call->want & (1u << CR_DEV))) {
        if ((rc = cold_key_dev(c, call->k[CR_DEV], &call->op.device)) != 0)
            return rc;
        call->want |= 1u << CR_DEV;
        *added = true;
    }
    return 0;
}

static void decide(cold_call_t *call, cold_decision_t *d)
{
    memset(d, 0, sizeof(*d));
    switch (call->kind) {
    case CK_DEV_REG:
    case CK_DEV_HEALTH:
    case CK_DEV_GET:
        cold_decide_dev(call, d);
        return;
    case CK_OP_PLAN:
    case CK_OP_ADVANCE:
    case CK_OP_GET:
    case CK_OP_PURGE:
        cold_decide_op(call, d);
        return;
    default:
        cold_decide_rec(call, d);
        return;
    }
}

static void on_write(void *arg, const meta_result_t *res);
static void decide_and_write(cold_call_t *call);

static void on_read(void *arg, const meta_result_t *res)
{
    cold_call_t *call = arg;
    call->in_meta = false;
    if (call->c->closing || res->rc == KVMESH_ECANCELED) {
        call_done(call, KVMESH_ECANCELED, NULL);
        return;
    }
    if (res->rc) {
        call_retry(call, res->rc);
        return;
    }
    int rc = take_snapshot(call, res->ops, res->n_ops);
    if (rc) {
        call_done(call, rc, NULL);
        return;
    }
    decide_and_write(call);
}

static void call_read(cold_call_t *call)
{
    cold_t *c = call->c;
    meta_op_t gets[CR_N];
    size_t n = fill_gets(call, gets);
    call->in_meta = true;
    c->st.meta_round_trips++;
    int rc = meta_txn(c->m, NULL, 0, gets, n, NULL, 0, c->cfg.timeout_ms, on_read, call);
    if (rc) {
        call->in_meta = false;
        call_retry(call, rc);
    }
}

int cold_call_start(cold_call_t *call)
{
    cold_t *c = call->c;
    if (c->closing) {
        free(call);
        return kvm_errf(KVMESH_ECLOSED, "cold: handle is closing");
    }
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    c->n_calls++;
    call_read(call);
    return 0;
}

/* Due-index moves of record slot i (CR_OP or CR_REC) into ops; returns the count added. */
static int due_moves(cold_call_t *call, int i, const cold_decision_t *d, meta_op_t *ops, size_t *no)
{
    cold_t *c = call->c;
    int s = i == CR_OP ? 0 : 1;
    int has_old = 0, has_new = 0;
    if (call->found[i])
        has_old = i == CR_OP ? cold_due_key_op(c, &call->op, call->k_due_old[s])
                             : cold_due_key_rec(c, &call->rec, call->k_due_old[s]);
    if (d->put[i])
        has_new = i == CR_OP ? cold_due_key_op(c, &call->nop, call->k_due_new[s])
                             : cold_due_key_rec(c, &call->nrec, call->k_due_new[s]);
    if (has_old < 0)
        return has_old;
    if (has_new < 0)
        return has_new;
    if (has_old && has_new && strcmp(call->k_due_old[s], call->k_due_new[s]) == 0)
        return 0;
    if (has_old)
        ops[(*no)++] = (meta_op_t){.type = META_OP_DEL, .key = call->k_due_old[s]};
    if (has_new)
        ops[(*no)++] = (meta_op_t){.type = META_OP_PUT,
                                   .key = call->k_due_new[s],
                                   .value = (const uint8_t *)"",
                                   .value_len = 0};
    return 0;
}

static void decide_and_write(cold_call_t *call)
{
    cold_t *c = call->c;
    bool added = false;
    int rc = learn_keys(call, &added);
    if (rc) {
        call_done(call, rc, NULL);
        return;
    }
    if (added) {
        if (++call->attempts > COLD_ATTEMPTS_MAX) {
            call_done(call, kvm_errf(KVMESH_ECONFLICT, "cold: contention; retry"), NULL);
            return;
        }
        call_read(call);
        return;
    }
    cold_decision_t d;
    decide(call, &d);
    if (d.done) {
        call_done(call, d.rc, &d);
        return;
    }
    meta_cmp_t cmps[CR_N];
    size_t nc = 0;
    bool dev_call = call->kind == CK_DEV_REG || call->kind == CK_DEV_HEALTH;
    for (int i = 0; i < CR_N; i++)
        /* the device record is compared only when it is written (reserve, commit, release all
         * write it) or is the subject: a transition that moves no bytes does not contend on it */
        if ((call->want & (1u << i)) && (i != CR_DEV || d.put[CR_DEV] || dev_call))
            cmps[nc++] = (meta_cmp_t){
                .key = call->k[i], .target = META_CMP_MOD_REV, .op = META_EQ, .num = call->rev[i]};
    meta_op_t ops[CR_N + 4];
    size_t no = 0;
    for (int i = 0; i < CR_N && rc == 0; i++) {
        if (d.del[i]) {
            ops[no++] = (meta_op_t){.type = META_OP_DEL, .key = call->k[i]};
            continue;
        }
        if (!d.put[i])
            continue;
        size_t len = 0;
        /* never write a record that would not decode */
        rc = i == CR_DEV  ? cold_device_check(&call->ndev)
             : i == CR_OP ? cold_op_check(&call->nop)
                          : cold_reclaim_check(&call->nrec);
        if (rc) {
            rc = cold_errctx(KVMESH_ECORRUPT, "cold: refusing to write an invalid record");
            break;
        }
        rc = i == CR_DEV  ? cold_device_encode(&call->ndev, call->v[i], sizeof(call->v[i]), &len)
             : i == CR_OP ? cold_op_encode(&call->nop, call->v[i], sizeof(call->v[i]), &len)
                          : cold_reclaim_encode(&call->nrec, call->v[i], sizeof(call->v[i]), &len);
        ops[no++] = (meta_op_t){
            .type = META_OP_PUT, .key = call->k[i], .value = call->v[i], .value_len = len};
    }
    if (rc == 0 && (call->want & (1u << CR_OP)))
        rc = due_moves(call, CR_OP, &d, ops, &no);
    if (rc == 0 && (call->want & (1u << CR_REC)))
        rc = due_moves(call, CR_REC, &d, ops, &no);
    if (rc) {
        call_done(call, rc, NULL);
        return;
    }
    KVM_ASSERT(no <= KVM_ARRAY_SIZE(ops));
    call->dec = d;
    meta_op_t gets[CR_N];
    size_t ng = fill_gets(call, gets);
    call->in_meta = true;
    c->st.meta_round_trips++;
    rc = meta_txn(c->m, cmps, nc, ops, no, gets, ng, c->cfg.timeout_ms, on_write, call);
    if (rc) {
        call->in_meta = false;
        call_retry(call, rc);
    }
}

static void on_write(void *arg, const meta_result_t *res)
{
    cold_call_t *call = arg;
    call->in_meta = false;
    if (call->c->closing || res->rc == KVMESH_ECANCELED) {
        call_done(call, KVMESH_ECANCELED, NULL);
        return;
    }
    if (res->rc) { /* not applied, or unknown: the re-read decides idempotently */
        if (res->rc != KVMESH_ECONN)
            call->wrote_maybe = true;
        call_retry(call, res->rc);
        return;
    }
    if (res->succeeded) {
        cold_decision_t d = call->dec; /* what was written */
        call_done(call, 0, &d);
        return;
    }
    int rc = take_snapshot(call, res->ops, res->n_ops);
    if (rc) {
        call_done(call, rc, NULL);
        return;
    }
    if (++call->attempts > COLD_ATTEMPTS_MAX) {
        call_done(call, kvm_errf(KVMESH_ECONFLICT, "cold: contention; retry"), NULL);
        return;
    }
    decide_and_write(call);
}
