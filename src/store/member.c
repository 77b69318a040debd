/* SPDX-License-Identifier: Apache-2.0 */
/*
 * member.c — runtime membership (spec "Masterless object-store path": leases, epochs, drain).
 *
 * Owns: this runtime's lease and member record, the live snapshot of every member, the local
 * env node numbering of members, and the quarantine list.
 *
 *   record   kvmesh/v1/<dep>/members/<runtime-id> = JSON {epoch, state, weight, cap, used,
 *            rpc, data, hb, segs: [[id hex, size, read token hex]...]}, bound to the lease;
 *            rewritten every keepalive period (hb + 1), so a live member's mod_rev advances;
 *            the same txn reads the operator's lifecycle request (lifecycle.c);
 *   epoch    the metadata revision of the txn that first wrote this incarnation's record: the
 *            revision is a deployment-wide txn counter, so a restarted runtime (same id) always
 *            gets a larger epoch than any earlier incarnation;
 *   snapshot refreshed every refresh period by a paginated range of the members family, in the
 *            background; requests read only the cached snapshot, never metadata;
 *   nodes    each member id gets a local env_node_t the first time it is seen (self = 0), never
 *            reused in this process, so route peer messages (env_send) name members compactly;
 *   suspects an owner that failed a reservation, a transfer or a checksum is quarantined
 *            (placement skips it, reads try it last) until its record's heartbeat advanced by
 *            two keepalives (a fresh lease proves recovery) or its epoch changed.
 *
 * State machine of this runtime (asserted in kvm_member_set_state):
 *
 *   STANDBY --open done--> ACTIVE --drain--> DRAINING --handoff done--> GONE
 *      \                     \________________________________________/^
 *       \_______________________ close / failure _____________________/
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hex.h"
#include "core/util.h"
#include "store/store.h"

static int state_parse(const char *s, enum kvm_member_state *out)
{
    for (int i = KVM_MS_STANDBY; i <= KVM_MS_GONE; i++)
        if (strcmp(s, kvm_member_state_name((enum kvm_member_state)i)) == 0) {
            *out = (enum kvm_member_state)i;
            return 0;
        }
    return KVMESH_EPROTO;
}

void kvm_member_set_state(kvm_rt_t *rt, enum kvm_member_state to)
{
    enum kvm_member_state from = rt->state;
    bool ok = (from == KVM_MS_STANDBY && (to == KVM_MS_ACTIVE || to == KVM_MS_GONE)) ||
              (from == KVM_MS_ACTIVE && (to == KVM_MS_DRAINING || to == KVM_MS_GONE)) ||
              (from == KVM_MS_DRAINING && (to == KVM_MS_GONE || to == KVM_MS_ACTIVE)) || from == to;
    KVM_ASSERT(ok);
    rt->state = to;
    atomic_store(&rt->a_state, (int)to);
}

/* ---- nodes and lookups -------------------------------------------------------------------- */

env_node_t kvm_member_node_of(kvm_rt_t *rt, const kvm_runtime_id_t *id)
{
    if (kvm_id128_equal(id, &rt->self.id))
        return 0;
    for (size_t i = 0; i < rt->n_nodes; i++)
        if (kvm_id128_equal(&rt->nodes[i].id, id))
            return rt->nodes[i].node;
    if (rt->n_nodes == rt->cap_nodes) {
        size_t nc = rt->cap_nodes ? rt->cap_nodes * 2 : 16;
        void *p = realloc(rt->nodes, nc * sizeof(*rt->nodes));
        if (!p)
            return ENV_NODE_NONE;
        rt->nodes = p;
        rt->cap_nodes = nc;
    }
    env_node_t n = ++rt->next_node;
    rt->nodes[rt->n_nodes++] = (struct kvm_node_map){*id, n};
    return n;
}

bool kvm_member_ever_seen(kvm_rt_t *rt, const kvm_runtime_id_t *id)
{
    for (size_t i = 0; i < rt->n_nodes; i++)
        if (kvm_id128_equal(&rt->nodes[i].id, id))
            return true;
    return kvm_id128_equal(id, &rt->self.id);
}

const struct kvm_member *kvm_member_by_node(kvm_rt_t *rt, env_node_t node)
{
    for (size_t i = 0; i < rt->n_members; i++)
        if (rt->members[i].node == node)
            return &rt->members[i];
    return NULL;
}

bool kvm_member_is_suspect(kvm_rt_t *rt, const kvm_runtime_id_t *id)
{
    for (size_t i = 0; i < rt->n_suspects; i++)
        if (kvm_id128_equal(&rt->suspects[i].id, id))
            return true;
    return false;
}

bool kvm_member_is_draining(kvm_rt_t *rt, const kvm_runtime_id_t *id)
{
    const struct kvm_member *m = kvm_member_find(rt, id);
    return m && m->state == KVM_MS_DRAINING;
}

void kvm_member_quarantine(kvm_rt_t *rt, const kvm_runtime_id_t *id)
{
    if (kvm_id128_equal(id, &rt->self.id) || kvm_member_is_suspect(rt, id) ||
        rt->n_suspects == STORE_MAX_MEMBERS)
        return;
    const struct kvm_member *m = kvm_member_find(rt, id);
    rt->suspects[rt->n_suspects++] = (struct kvm_suspect){*id, m ? m->heartbeat : 0};
}

/* ---- the record ----------------------------------------------------------------------------- */

static char *record_json(kvm_rt_t *rt)
{
    char hex[3][40];
    json_t *segs = json_array();
    struct kvm_seg_info si[STORE_MAX_SEGS];
    uint32_t ns = 0;
    kvm_owner_segments(rt, si, &ns);
    for (uint32_t i = 0; i < ns; i++) {
        snprintf(hex[0], sizeof(hex[0]), "%016" PRIx64, si[i].id);
        snprintf(hex[1], sizeof(hex[1]), "%016" PRIx64, si[i].read_token);
        /* a 4th element "drained" only for an operator-drained segment (lifecycle.c) */
        json_array_append_new(
            segs, si[i].drained
                      ? json_pack("[s,I,s,s]", hex[0], (json_int_t)si[i].size, hex[1], "drained")
                      : json_pack("[s,I,s]", hex[0], (json_int_t)si[i].size, hex[1]));
    }
    json_t *o =
        json_pack("{s:I,s:s,s:f,s:I,s:I,s:s,s:s,s:I,s:o}", "epoch", (json_int_t)rt->self.epoch,
                  "state", kvm_member_state_name(rt->state), "weight", rt->cfg.weight, "cap",
                  (json_int_t)rt->capacity, "used", (json_int_t)rt->used, "rpc", rt->rpc_addr,
                  "data", rt->tp && rt->capacity ? tp_engine_address(rt->tp) : "", "hb",
                  (json_int_t)rt->heartbeat, "segs", segs);
    if (!o)
        return NULL;
    /* additive (rpc_local = unix): older runtimes ignore both; a record without them means tcp */
    if (rt->rpc_local_addr[0] &&
        (json_object_set_new(o, "lrpc", json_string(rt->rpc_local_addr)) != 0 ||
         json_object_set_new(o, "host", json_string(rt->host_id)) != 0)) {
        json_decref(o);
        return NULL;
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static int hex_u64(const char *s, uint64_t *out)
{
    return kvm_hex_u64(s, strlen(s), KVM_HEX_ANY, out) == 0 ? 0 : KVMESH_EPROTO;
}

int kvm_member_record_decode(const char *key, const uint8_t *value, size_t len,
                             struct kvm_member *m, char *rpc, size_t rpc_cap, char *data,
                             size_t data_cap)
{
    return kvm_member_record_decode_local(key, value, len, m, rpc, rpc_cap, data, data_cap, NULL, 0,
                                          NULL, 0);
}

int kvm_member_record_decode_local(const char *key, const uint8_t *value, size_t len,
                                   struct kvm_member *m, char *rpc, size_t rpc_cap, char *data,
                                   size_t data_cap, char *lrpc, size_t lrpc_cap, char *host,
                                   size_t host_cap)
{
    if (lrpc && lrpc_cap)
        lrpc[0] = 0;
    if (host && host_cap)
        host[0] = 0;
    memset(m, 0, sizeof(*m));
    ks_parsed_t pk;
    if (ks_parse(key, &pk) != 0 || pk.family != KS_MEMBER ||
        kvm_id128_parse(pk.parts[0].s, &m->rt.id) != 0 || kvm_id128_is_nil(&m->rt.id))
        return kvm_errf(KVMESH_EPROTO, "member key '%.80s' does not name a runtime", key);
    kvm_id128_fmt(&m->rt.id, m->idhex);
    json_error_t jerr;
    json_t *o = json_loadb((const char *)value, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return kvm_errf(KVMESH_EPROTO, "member record of %s is not JSON: %s", m->idhex, jerr.text);
    json_int_t epoch = 0, cap = 0, used = 0, hb = 0;
    const char *state = NULL, *rpc_s = NULL, *data_s = NULL;
    double weight = 0;
    json_t *segs = NULL;
    int rc = kvm_errf(KVMESH_EPROTO, "member record of %s is malformed", m->idhex);
    if (json_unpack(o, "{s:I,s:s,s:F,s:I,s:I,s:s,s:s,s:I,s:o}", "epoch", &epoch, "state", &state,
                    "weight", &weight, "cap", &cap, "used", &used, "rpc", &rpc_s, "data", &data_s,
                    "hb", &hb, "segs", &segs) != 0 ||
        epoch < 1 || cap < 0 || used < 0 || hb < 0 || !(weight > 0 && weight < 1e12) ||
        state_parse(state, &m->state) != 0 || !json_is_array(segs) ||
        json_array_size(segs) > STORE_MAX_SEGS || strlen(rpc_s) >= rpc_cap ||
        strlen(data_s) >= data_cap)
        goto out;
    m->rt.epoch = (uint64_t)epoch;
    m->weight = weight;
    m->capacity = (uint64_t)cap;
    m->used = (uint64_t)used;
    m->heartbeat = (uint64_t)hb;
    snprintf(rpc, rpc_cap, "%s", rpc_s);
    snprintf(data, data_cap, "%s", data_s);
    for (size_t i = 0; i < json_array_size(segs); i++) {
        const char *id = NULL, *tok = NULL;
        json_int_t size = 0;
        if (json_unpack(json_array_get(segs, i), "[s,I,s]", &id, &size, &tok) != 0 || size <= 0 ||
            hex_u64(id, &m->segs[i].id) != 0 || hex_u64(tok, &m->segs[i].read_token) != 0)
            goto out;
        m->segs[i].size = (uint64_t)size;
        const char *st = json_string_value(json_array_get(json_array_get(segs, i), 3));
        m->segs[i].drained = st && strcmp(st, "drained") == 0;
    }
    m->n_segs = (uint32_t)json_array_size(segs);
    if (lrpc && host) {
        /* rpc_local: both or neither; a malformed pair is ignored (tcp), not the record */
        const char *l = json_string_value(json_object_get(o, "lrpc"));
        const char *h = json_string_value(json_object_get(o, "host"));
        if (l && h && strncmp(l, "unix:", 5) == 0 && strlen(l) < lrpc_cap && strlen(h) < host_cap &&
            h[0]) {
            snprintf(lrpc, lrpc_cap, "%s", l);
            snprintf(host, host_cap, "%s", h);
        }
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

static int record_parse(kvm_rt_t *rt, const meta_kv_t *kv, struct kvm_member *m)
{
    char rpc[STORE_ADDR_MAX], data[TP_ADDR_MAX], lrpc[STORE_ADDR_MAX], host[96];
    int rc =
        kvm_member_record_decode_local(kv->key, kv->value, kv->value_len, m, rpc, sizeof(rpc), data,
                                       sizeof(data), lrpc, sizeof(lrpc), host, sizeof(host));
    if (rc)
        return rc;
    m->rpc_addr = kvm_rt_intern(rt, rpc);
    m->data_addr = kvm_rt_intern(rt, data);
    m->rpc_local = kvm_rt_intern(rt, lrpc);
    m->host = kvm_rt_intern(rt, host);
    return m->rpc_addr && m->data_addr && m->rpc_local && m->host ? 0 : KVMESH_ENOMEM;
}

/* Applies the lifecycle request read with a member-record write (kv: its GET; !found = none) to
 * this runtime's state (lifecycle.c's header comment says how); true when the state changed (the
 * caller writes the record again). */
static bool lifecycle_apply(kvm_rt_t *rt, const meta_kv_t *kv)
{
    struct kvm_lifecycle_req r;
    memset(&r, 0, sizeof(r));
    r.want = KVM_MS_ACTIVE;
    if (kv->found && kvm_lifecycle_decode_req(kv->value, kv->value_len, &r) != 0)
        return false; /* a malformed request changes nothing (admin members shows it) */
    bool changed = false;
    if (rt->state != KVM_MS_GONE)
        changed = kvm_owner_drain_segments(rt, r.segs, r.n_segs);
    if (r.want == KVM_MS_DRAINING && rt->state == KVM_MS_ACTIVE) {
        kvm_member_set_state(rt, KVM_MS_DRAINING);
        rt->admin_drained = true;
        return true;
    }
    if (r.want == KVM_MS_ACTIVE && rt->state == KVM_MS_DRAINING && rt->admin_drained) {
        rt->admin_drained = false;
        kvm_member_set_state(rt, KVM_MS_ACTIVE);
        return true;
    }
    return changed;
}

/* ---- register / publish / leave ---------------------------------------------------------------
 */

struct mcall {
    kvm_rt_t *rt;
    kvm_done_cb cb;
    bool set_epoch;
    bool regranted; /* this write already follows a fresh lease taken for a lost one */
};

static void grant_and_publish_ex(kvm_rt_t *rt, kvm_done_cb cb, bool set_epoch, bool regranted);

static void publish_done(void *arg, const meta_result_t *res)
{
    struct mcall *c = arg;
    kvm_rt_t *rt = c->rt;
    kvm_done_cb cb = c->cb;
    int rc = res->rc;
    if (!rc && c->set_epoch)
        rt->self.epoch = (uint64_t)res->rev;
    bool set_epoch = c->set_epoch, regranted = c->regranted;
    free(c);
    if (rc == KVMESH_ENOENT && !regranted && !atomic_load(&rt->closing)) {
        /* The lease is gone (it expired before this write: a join slower than lease_ttl_ms
         * keeps no keepalive yet, or a stalled process): take a fresh one and write again,
         * once. The record went with the old lease; the epoch stays the incarnation's. */
        rt->lease = 0;
        grant_and_publish_ex(rt, cb, set_epoch, true);
        return;
    }
    if (!rc && set_epoch) {
        /* The record of a new incarnation carries its epoch: write it again with it. */
        kvm_member_publish(rt, cb);
        return;
    }
    /* The operator's lifecycle request, read in the same txn (lifecycle.c): a change of state
     * is written at once, so the others see it without waiting for the next keepalive. */
    if (!rc && res->n_ops == 2 && lifecycle_apply(rt, &res->ops[1])) {
        kvm_member_publish(rt, cb);
        return;
    }
    if (cb)
        cb(rt, rc, res->errmsg);
}

static void publish_with(kvm_rt_t *rt, kvm_done_cb cb, bool set_epoch, bool regranted)
{
    char key[KS_KEY_CAP], lkey[KS_KEY_CAP];
    int rc = ks_member_key(key, sizeof(key), rt->cfg.deployment, rt->idhex);
    if (!rc)
        rc = ks_lifecycle_key(lkey, sizeof(lkey), rt->cfg.deployment, rt->idhex);
    char *val = rc ? NULL : record_json(rt);
    struct mcall *c = val ? calloc(1, sizeof(*c)) : NULL;
    if (!c) {
        free(val);
        if (cb)
            cb(rt, rc ? rc : KVMESH_ENOMEM, "cannot build the member record");
        return;
    }
    c->rt = rt;
    c->cb = cb;
    c->set_epoch = set_epoch;
    c->regranted = regranted;
    rt->heartbeat++;
    meta_op_t ops[2] = {{.type = META_OP_PUT,
                         .key = key,
                         .value = (const uint8_t *)val,
                         .value_len = strlen(val),
                         .lease = rt->lease},
                        {.type = META_OP_GET, .key = lkey}};
    rc = meta_txn(rt->meta, NULL, 0, ops, 2, NULL, 0, 0, publish_done, c);
    free(val);
    if (rc) {
        free(c);
        if (cb)
            cb(rt, rc, kvmesh_last_error());
    }
}

void kvm_member_publish(kvm_rt_t *rt, kvm_done_cb cb)
{
    publish_with(rt, cb, false, false);
}

static void grant_done(void *arg, const meta_result_t *res)
{
    struct mcall *c = arg;
    kvm_rt_t *rt = c->rt;
    kvm_done_cb cb = c->cb;
    bool set_epoch = c->set_epoch, regranted = c->regranted;
    free(c);
    if (res->rc) {
        if (cb)
            cb(rt, res->rc, res->errmsg);
        return;
    }
    rt->lease = res->lease;
    publish_with(rt, cb, set_epoch, regranted);
}

static void grant_and_publish(kvm_rt_t *rt, kvm_done_cb cb, bool set_epoch)
{
    grant_and_publish_ex(rt, cb, set_epoch, false);
}

static void grant_and_publish_ex(kvm_rt_t *rt, kvm_done_cb cb, bool set_epoch, bool regranted)
{
    struct mcall *c = calloc(1, sizeof(*c));
    if (!c) {
        if (cb)
            cb(rt, KVMESH_ENOMEM, "out of memory");
        return;
    }
    c->rt = rt;
    c->cb = cb;
    c->set_epoch = set_epoch;
    c->regranted = regranted;
    int rc = meta_lease_grant(rt->meta, rt->cfg.lease_ttl_ms, 0, grant_done, c);
    if (rc) {
        free(c);
        if (cb)
            cb(rt, rc, kvmesh_last_error());
    }
}

void kvm_member_register(kvm_rt_t *rt, kvm_done_cb cb)
{
    grant_and_publish(rt, cb, true);
}

static void revoke_done(void *arg, const meta_result_t *res)
{
    struct mcall *c = arg;
    kvm_rt_t *rt = c->rt;
    kvm_done_cb cb = c->cb;
    free(c);
    rt->lease = 0;
    if (cb)
        cb(rt, res->rc, res->errmsg);
}

void kvm_member_leave(kvm_rt_t *rt, kvm_done_cb cb)
{
    struct mcall *c = calloc(1, sizeof(*c));
    if (!c || !rt->lease || !rt->meta) {
        free(c);
        if (cb)
            cb(rt, 0, "");
        return;
    }
    c->rt = rt;
    c->cb = cb;
    if (meta_lease_revoke(rt->meta, rt->lease, 0, revoke_done, c) != 0) {
        free(c);
        if (cb)
            cb(rt, 0, "");
    }
}

/* ---- keepalive ------------------------------------------------------------------------------ */

static void keepalive_fire(void *arg);

static void keepalive_arm(kvm_rt_t *rt)
{
    uint64_t period = rt->cfg.lease_ttl_ms / 3;
    rt->keepalive_timer =
        env_timer_start(rt->env, (period ? period : 1) * 1000000ull, keepalive_fire, rt);
}

static void keepalive_published(kvm_rt_t *rt, int rc, const char *err)
{
    (void)rc, (void)err; /* a failed heartbeat is retried next period */
    if (!atomic_load(&rt->closing))
        keepalive_arm(rt);
}

static void keepalive_done(void *arg, const meta_result_t *res)
{
    kvm_rt_t *rt = arg;
    if (atomic_load(&rt->closing) || res->rc == KVMESH_ECANCELED)
        return;
    obs_count(rt->metrics, lease_heartbeats_total, res->rc ? OBS_OUTCOME_ERROR : OBS_OUTCOME_OK,
              OBS_NONE, 1);
    obs_gauge_set(rt->metrics, lease_healthy, OBS_NONE, OBS_NONE, res->rc ? 0 : 1);
    if (res->rc == KVMESH_ENOENT)
        grant_and_publish(rt, keepalive_published, false); /* lease lost: a fresh one */
    else
        kvm_member_publish(rt, keepalive_published);
}

static void keepalive_fire(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->keepalive_timer = 0;
    if (meta_lease_keepalive(rt->meta, rt->lease, 0, keepalive_done, rt) != 0)
        keepalive_arm(rt);
}

/* ---- snapshot refresh ------------------------------------------------------------------------ */

static uint64_t refresh_period_ms(kvm_rt_t *rt)
{
    uint64_t p = rt->cfg.lease_ttl_ms / 4;
    return p < 50 ? 50 : p > 500 ? 500 : p;
}

static bool member_equal(const struct kvm_member *a, const struct kvm_member *b)
{
    return kvm_runtime_equal(&a->rt, &b->rt) && a->state == b->state && a->weight == b->weight &&
           a->rpc_addr == b->rpc_addr && a->data_addr == b->data_addr &&
           a->rpc_local == b->rpc_local && a->host == b->host && a->n_segs == b->n_segs &&
           memcmp(a->segs, b->segs, a->n_segs * sizeof(a->segs[0])) == 0;
}

static void snapshot_install(kvm_rt_t *rt)
{
    bool changed = rt->n_next != rt->n_members;
    for (size_t i = 0; i < rt->n_next; i++) {
        struct kvm_member *m = &rt->next_members[i];
        m->node = kvm_member_node_of(rt, &m->rt.id);
        const struct kvm_member *old = kvm_member_find(rt, &m->rt.id);
        if (!old || !member_equal(old, m))
            changed = true;
    }
    struct kvm_member *tmp = rt->members;
    size_t n_old = rt->n_members;
    rt->members = rt->next_members;
    rt->n_members = rt->n_next;
    rt->next_members = tmp;
    rt->n_next = 0;
    if (rt->on_members) /* repair.c: departed/draining owners are re-replicated */
        rt->on_members(rt, tmp, n_old);
    /* Quarantine ends when a fresh heartbeat (two keepalives later) or a new epoch shows. */
    for (size_t i = 0; i < rt->n_suspects;) {
        const struct kvm_member *m = kvm_member_find(rt, &rt->suspects[i].id);
        if (!m || m->heartbeat >= rt->suspects[i].heartbeat + 2)
            rt->suspects[i] = rt->suspects[--rt->n_suspects];
        else
            i++;
    }
    atomic_store(&rt->a_members, rt->n_members);
    obs_gauge_set(rt->metrics, membership_live_members, OBS_NONE, OBS_NONE, (int64_t)rt->n_members);
    obs_gauge_set(rt->metrics, membership_last_refresh_timestamp_seconds, OBS_NONE, OBS_NONE,
                  (int64_t)time(NULL));
    if (!changed)
        return;
    rt->generation++;
    route_member_t rm[STORE_MAX_MEMBERS];
    size_t n = 0;
    for (size_t i = 0; i < rt->n_members; i++) {
        const struct kvm_member *m = &rt->members[i];
        if (m->state != KVM_MS_ACTIVE && m->state != KVM_MS_DRAINING)
            continue;
        rm[n++] = (route_member_t){.rt = m->rt,
                                   .node = m->node,
                                   .weight = m->weight,
                                   /* client-only runtimes (no memory) come and go with
                                    * each tool invocation: they never hold route authority */
                                   .route_capable = m->state == KVM_MS_ACTIVE && m->capacity > 0,
                                   .route_version = ROUTE_PROTOCOL_VERSION};
    }
    if (rt->route)
        route_set_members(rt->route, rt->generation, rm, n);
}

struct refresh_call {
    kvm_rt_t *rt;
    kvm_done_cb cb;
};

static int refresh_page(kvm_rt_t *rt, struct refresh_call *c);

/* After a refresh ended (and its callbacks ran): starts the one kvm_member_refresh_next queued,
 * unless a callback already started another (it then waits for that one). A refresh cancelled
 * at close drops it, as it drops its own callback. */
static void refresh_run_next(kvm_rt_t *rt, bool cancelled)
{
    kvm_done_cb next = rt->refresh_next;
    if (!next || rt->refreshing)
        return;
    rt->refresh_next = NULL;
    if (!cancelled)
        kvm_member_refresh(rt, next);
}

static void refresh_done(void *arg, const meta_result_t *res)
{
    struct refresh_call *c = arg;
    kvm_rt_t *rt = c->rt;
    obs_count(rt->metrics, membership_refreshes_total, res->rc ? OBS_OUTCOME_ERROR : OBS_OUTCOME_OK,
              OBS_NONE, 1);
    if (res->rc) {
        rt->refreshing = false;
        kvm_done_cb cb = c->cb;
        free(c);
        if (cb && res->rc != KVMESH_ECANCELED)
            cb(rt, res->rc, res->errmsg);
        if (res->rc != KVMESH_ECANCELED && rt->after_refresh)
            rt->after_refresh(rt);
        refresh_run_next(rt, res->rc == KVMESH_ECANCELED);
        return;
    }
    for (size_t i = 0; i < res->n_kvs && rt->n_next < STORE_MAX_MEMBERS; i++) {
        struct kvm_member m;
        if (record_parse(rt, &res->kvs[i], &m) == 0 && m.state != KVM_MS_GONE)
            rt->next_members[rt->n_next++] = m;
    }
    if (res->more && res->n_kvs && rt->n_next < STORE_MAX_MEMBERS) {
        snprintf(rt->refresh_after, sizeof(rt->refresh_after), "%s", res->kvs[res->n_kvs - 1].key);
        if (refresh_page(rt, c) == 0)
            return;
    }
    snapshot_install(rt);
    rt->refreshing = false;
    if (rt->on_snapshot) /* ops_place.c: puts waiting for storage members try again */
        rt->on_snapshot(rt);
    kvm_done_cb cb = c->cb;
    free(c);
    if (cb)
        cb(rt, 0, "");
    if (rt->after_refresh)
        rt->after_refresh(rt);
    refresh_run_next(rt, false);
}

static int refresh_page(kvm_rt_t *rt, struct refresh_call *c)
{
    char prefix[KS_KEY_CAP];
    int rc = ks_prefix(prefix, sizeof(prefix), rt->cfg.deployment, KS_MEMBER, NULL, 0);
    if (rc)
        return rc;
    return meta_range(rt->meta, prefix, rt->refresh_after[0] ? rt->refresh_after : NULL,
                      STORE_MEMBER_PAGE, 0, refresh_done, c);
}

void kvm_member_refresh(kvm_rt_t *rt, kvm_done_cb cb)
{
    if (rt->refreshing) {
        if (cb)
            cb(rt, KVMESH_EAGAIN, "refresh already running");
        return;
    }
    struct refresh_call *c = calloc(1, sizeof(*c));
    if (!c) {
        if (cb)
            cb(rt, KVMESH_ENOMEM, "out of memory");
        return;
    }
    c->rt = rt;
    c->cb = cb;
    rt->refreshing = true;
    rt->refresh_after[0] = 0;
    rt->n_next = 0;
    int rc = refresh_page(rt, c);
    if (rc) {
        rt->refreshing = false;
        free(c);
        if (cb)
            cb(rt, rc, kvmesh_last_error());
    }
}

/* The open's refresh (runtime.c) must read the member list after the runtime published itself:
 * a refresh already running (e.g. one started for a message from a peer not yet in the
 * snapshot) may have read it before, and refusing the open with "refresh already running" made a
 * restarted daemon exit while joining. */
void kvm_member_refresh_next(kvm_rt_t *rt, kvm_done_cb cb)
{
    if (!rt->refreshing) {
        kvm_member_refresh(rt, cb);
        return;
    }
    if (rt->refresh_next) {
        cb(rt, KVMESH_EAGAIN, "refresh already running");
        return;
    }
    rt->refresh_next = cb;
}

static void refresh_fire(void *arg);

static void refresh_rearm(kvm_rt_t *rt, int rc, const char *err)
{
    (void)rc, (void)err;
    if (!atomic_load(&rt->closing))
        rt->refresh_timer =
            env_timer_start(rt->env, refresh_period_ms(rt) * 1000000ull, refresh_fire, rt);
}

static void refresh_fire(void *arg)
{
    kvm_rt_t *rt = arg;
    rt->refresh_timer = 0;
    kvm_member_refresh(rt, refresh_rearm);
}

void kvm_member_start_timers(kvm_rt_t *rt)
{
    keepalive_arm(rt);
    refresh_rearm(rt, 0, "");
}

void kvm_member_stop(kvm_rt_t *rt)
{
    env_timer_cancel(rt->env, rt->keepalive_timer);
    env_timer_cancel(rt->env, rt->refresh_timer);
    rt->keepalive_timer = rt->refresh_timer = 0;
}
