/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvmesh_tools.c — the internal tools interface (api/kvmesh_tools.h) over the configuration
 * table (config.c) and the YAML loader (yaml_config.c), and the metadata administration of
 * `kvmesh admin` over the blocking metadata wrapper (meta_sync), the key layout (keyspace) and
 * the record codecs of the store (member records) and the route service (shard records).
 * kvmesh_runtime_of is in kvmesh.c, beside struct kvmesh.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/config.h"
#include "api/config_table.h"
#include "api/kvmesh_tools.h"
#include "api/yaml_config.h"
#include "cold/cold.h"
#include "core/util.h"
#include "env/clock.h"
#include "env/env_uv.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "route/route_int.h"
#include "route/route.h"
#include "store/quota.h"
#include "store/store.h"
#include "tenant/tenant.h"

bool kvmesh_tools_config_has(const char *field)
{
    return kvm_config_lookup(field) != NULL;
}

const char *kvmesh_tools_config_type(const char *field)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    return f ? kvm_config_type_name(f->type) : NULL;
}

static int unknown(const char *field, char *buf, size_t cap)
{
    if (buf && cap)
        buf[0] = '\0';
    return kvm_errf(KVMESH_ECONFIG, "unknown configuration field \"%s\"", field ? field : "");
}

int kvmesh_tools_config_allowed(const char *field, char *buf, size_t cap)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    if (!f)
        return unknown(field, buf, cap);
    kvm_config_allowed(f, buf, cap);
    return 0;
}

int kvmesh_tools_config_markdown_row(const char *field, char *buf, size_t cap)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    if (!f)
        return unknown(field, buf, cap);
    kvm_config_markdown_row(f, buf, cap);
    return 0;
}

const char *kvmesh_tools_config_str(const kvmesh_config_t *cfg, const char *field)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    KVM_ASSERT(cfg && f && (f->type == KVM_CFG_STRING || f->type == KVM_CFG_ENUM));
    const char *src = (const char *)cfg + f->offset;
    if (f->type == KVM_CFG_STRING)
        return src;
    uint32_t x;
    memcpy(&x, src, sizeof(x));
    size_t nw = 0;
    while (f->words[nw])
        nw++;
    KVM_ASSERT(x < nw);
    return f->words[x];
}

uint64_t kvmesh_tools_config_uint(const kvmesh_config_t *cfg, const char *field)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    KVM_ASSERT(cfg && f);
    const char *src = (const char *)cfg + f->offset;
    switch (f->type) {
    case KVM_CFG_SIZE: {
        uint64_t x;
        memcpy(&x, src, sizeof(x));
        return x;
    }
    case KVM_CFG_UINT: {
        uint32_t x;
        memcpy(&x, src, sizeof(x));
        return x;
    }
    case KVM_CFG_BOOL: {
        bool b;
        memcpy(&b, src, sizeof(b));
        return b ? 1 : 0;
    }
    default:
        KVM_ASSERT(!"kvmesh_tools_config_uint: not a size, uint or bool field");
        return 0;
    }
}

int kvmesh_tools_config_validate(const kvmesh_config_t *cfg)
{
    return kvm_config_validate(cfg);
}

int kvmesh_tools_config_load_yaml(kvmesh_config_t *cfg, const char *text, size_t len,
                                  const char *source)
{
    return kvm_config_load_yaml(cfg, text, len, source);
}

int kvmesh_tools_config_load_file(kvmesh_config_t *cfg, const char *path)
{
    return kvm_config_load_file(cfg, path);
}

size_t kvmesh_tools_config_dump_yaml(const kvmesh_config_t *cfg, char *buf, size_t cap)
{
    return kvm_config_dump_yaml(cfg, buf, cap);
}

int kvmesh_tools_critpath(kvmesh_t *kv, const char *op, kvmesh_tools_critpath_t *out)
{
    static const char *const ops[] = {"put",       "get",       "remove",      "exist",
                                      "batch_put", "batch_get", "batch_remove"};
    KVM_STATIC_ASSERT(KVM_ARRAY_SIZE(ops) == OBS__N_op, "operation names");
    KVM_STATIC_ASSERT(OBS__N_cpstage == 4, "stages");
    memset(out, 0, sizeof(*out));
    unsigned o = 0;
    while (o < OBS__N_op && strcmp(ops[o], op ? op : "") != 0)
        o++;
    struct kvm_rt *rt = kvmesh_runtime_of(kv);
    if (o == OBS__N_op || !rt)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_tools_critpath: unknown operation \"%s\"",
                        op ? op : "");
    int64_t v;
    for (unsigned r = 0; r < OBS__N_res; r++)
        if (obs_metrics_read(rt->metrics, "requests_total", o, r, &v) == 0)
            out->calls += (uint64_t)v;
    for (unsigned s = 0; s < OBS__N_cpstage; s++)
        if (obs_metrics_read(rt->metrics, "op_round_trips_total", o, s, &v) == 0)
            out->round_trips[s] = (uint64_t)v;
    for (unsigned t = 0; t < OBS__N_transport; t++)
        if (obs_metrics_read(rt->metrics, "op_payload_copies_total", o, t, &v) == 0)
            out->copies += (uint64_t)v;
    if (obs_metrics_read(rt->metrics, "op_handoffs_total", o, OBS_NONE, &v) == 0)
        out->handoffs = (uint64_t)v;
    if (obs_metrics_read(rt->metrics, "op_checksum_passes_total", o, OBS_NONE, &v) == 0)
        out->checksums = (uint64_t)v;
    if (obs_metrics_read(rt->metrics, "op_loop_leads_total", o, OBS_NONE, &v) == 0)
        out->leads = (uint64_t)v;
    return 0;
}

size_t kvmesh_tools_breakdown(kvmesh_t *kv, const char *name, uint64_t since_unix_ns,
                              int64_t *total_ns, int64_t stage_ns[4])
{
    KVM_STATIC_ASSERT(OBS_STAGE__COUNT == 4, "stages");
    struct kvm_rt *rt = kvmesh_runtime_of(kv);
    if (!rt || !rt->tracer)
        return 0;
    return obs_tracer_breakdown_sum(rt->tracer, name, since_unix_ns, total_ns, stage_ns);
}

uint64_t kvmesh_tools_now_ns(void)
{
    return env_clock_mono_ns();
}

int kvmesh_tools_parse_size(const char *what, const char *s, uint64_t *out)
{
    return kvm_config_parse_size(what, s, out);
}

void kvmesh_tools_format_size(uint64_t v, char *buf, size_t cap)
{
    kvm_config_format_size(v, buf, cap);
}

/* ---- metadata administration ------------------------------------------------------------- */

struct kvmesh_admin {
    meta_sync_t *ms;
    char deployment[KS_DEPLOYMENT_MAX + 1];
    char url[KVM_CFG_STR_MAX];
    uint32_t timeout_ms;
    /* the quota protocol handle (abort), opened on first use on a private loop */
    env_uv_thread_t *qt;
    meta_t *qm;
    tn_t *tn;
};

int kvmesh_admin_open(const kvmesh_config_t *cfg, kvmesh_admin_t **out)
{
    *out = NULL;
    kvmesh_admin_t *a = calloc(1, sizeof(*a));
    if (!a)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the admin connection");
    snprintf(a->deployment, sizeof(a->deployment), "%s", cfg->deployment);
    snprintf(a->url, sizeof(a->url), "%s", cfg->metadata_url);
    a->timeout_ms = cfg->request_timeout_ms;
    meta_opts_t mo = {.default_timeout_ms = cfg->request_timeout_ms, .name = "kvmesh-admin"};
    int rc = meta_sync_open(&a->ms, cfg->metadata_url, &mo);
    if (rc) {
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

static void q_close_on_loop(void *arg)
{
    kvmesh_admin_t *a = arg;
    if (a->tn)
        tn_close(a->tn);
    if (a->qm)
        meta_close(a->qm);
    a->tn = NULL;
    a->qm = NULL;
}

void kvmesh_admin_close(kvmesh_admin_t *a)
{
    if (!a)
        return;
    if (a->qt) {
        env_uv_thread_call(a->qt, q_close_on_loop, a);
        env_uv_thread_stop(a->qt);
    }
    meta_sync_close(a->ms);
    free(a);
}

static int admin_page(kvmesh_admin_t *a, enum ks_family f, const char *start_after, size_t limit,
                      meta_result_t **res)
{
    *res = NULL;
    if (limit < 1 || limit > KVMESH_ADMIN_PAGE_MAX)
        return kvm_errf(KVMESH_EINVAL, "page size %zu is out of range; allowed 1..%d", limit,
                        KVMESH_ADMIN_PAGE_MAX);
    char prefix[KS_KEY_CAP];
    int rc = ks_prefix(prefix, sizeof(prefix), a->deployment, f, NULL, 0);
    if (rc)
        return rc;
    rc = meta_sync_range(a->ms, prefix, start_after, (uint32_t)limit, res);
    if (rc)
        kvm_errf(rc, "metadata range of %s: %s", prefix, (*res)->errmsg);
    return rc;
}

/* One page of family f after the record named `after` (NULL or "" = from the start), whose key
 * key_of builds: the prologue of every list call keyed by a name. */
typedef int (*admin_key_fn)(char *out, size_t cap, const char *dep, const char *name);

static int admin_page_after(kvmesh_admin_t *a, enum ks_family f, admin_key_fn key_of,
                            const char *after, size_t limit, meta_result_t **res)
{
    *res = NULL;
    char start[KS_KEY_CAP] = "";
    if (after && after[0]) {
        int rc = key_of(start, sizeof(start), a->deployment, after);
        if (rc)
            return rc;
    }
    return admin_page(a, f, start[0] ? start : NULL, limit, res);
}

/* One member record into o (malformed when it does not decode); m is scratch. */
static void member_from_kv(const meta_kv_t *kv, kvmesh_admin_member_t *o, struct kvm_member *m)
{
    memset(o, 0, sizeof(*o));
    ks_parsed_t pk;
    if (ks_parse(kv->key, &pk) == 0 && pk.n_parts == 1)
        snprintf(o->id, sizeof(o->id), "%.*s", (int)(sizeof(o->id) - 1), pk.parts[0].s);
    o->lease = kv->lease;
    o->mod_rev = kv->mod_rev;
    memset(m, 0, sizeof(*m));
    if (kvm_member_record_decode_local(kv->key, kv->value, kv->value_len, m, o->rpc, sizeof(o->rpc),
                                       o->data, sizeof(o->data), o->local_rpc, sizeof(o->local_rpc),
                                       o->host, sizeof(o->host)) != 0) {
        o->malformed = true;
        return;
    }
    o->epoch = m->rt.epoch;
    snprintf(o->state, sizeof(o->state), "%s", kvm_member_state_name(m->state));
    o->weight = m->weight;
    o->capacity_bytes = m->capacity;
    o->used_bytes = m->used;
    o->heartbeat = m->heartbeat;
    o->n_segments = m->n_segs < KVMESH_ADMIN_SEGS_MAX ? m->n_segs : KVMESH_ADMIN_SEGS_MAX;
    for (uint32_t k = 0; k < o->n_segments; k++) {
        o->segments[k].id = m->segs[k].id;
        o->segments[k].size = m->segs[k].size;
        o->segments[k].drained = m->segs[k].drained;
    }
}

int kvmesh_admin_members(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_member_t *out, size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    meta_result_t *res;
    int rc = admin_page_after(a, KS_MEMBER, ks_member_key, after, limit, &res);
    if (rc == 0) {
        struct kvm_member *m = malloc(sizeof(*m));
        if (!m)
            rc = kvm_errf(KVMESH_ENOMEM, "out of memory");
        for (size_t i = 0; m && i < res->n_kvs && i < limit; i++) {
            member_from_kv(&res->kvs[i], &out[i], m);
            (*n)++;
        }
        free(m);
        *more = res->more;
    }
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_member_get(kvmesh_admin_t *a, const char *id, kvmesh_admin_member_t *out,
                            bool *found)
{
    *found = false;
    char key[KS_KEY_CAP];
    int rc = ks_member_key(key, sizeof(key), a->deployment, id);
    if (rc)
        return rc;
    meta_result_t *res;
    rc = meta_sync_get(a->ms, key, &res);
    if (rc) {
        kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
    } else if (res->kv.found) {
        struct kvm_member *m = malloc(sizeof(*m));
        if (!m) {
            rc = kvm_errf(KVMESH_ENOMEM, "out of memory");
        } else {
            member_from_kv(&res->kv, out, m);
            *found = true;
        }
        free(m);
    }
    meta_result_free(res);
    return rc;
}

/* The request record of id changed by one step (a member state, or one segment drained or
 * activated), written only if the record is unchanged since it was read (a compare on its
 * mod_rev; absent = 0); an empty result (member active, no segment) deletes it. Bounded
 * retries when another admin wrote it meanwhile. */
#define ADMIN_LC_TRIES 8
static int lifecycle_update(kvmesh_admin_t *a, const char *id, const char *state, bool seg_step,
                            uint64_t seg, bool seg_drain)
{
    char key[KS_KEY_CAP], val[KVM_LIFECYCLE_VALUE_MAX];
    int rc = ks_lifecycle_key(key, sizeof(key), a->deployment, id);
    if (rc)
        return rc;
    struct kvm_lifecycle_req *r = malloc(sizeof(*r));
    if (!r)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    for (int attempt = 0;; attempt++) {
        meta_result_t *res;
        if ((rc = meta_sync_get(a->ms, key, &res)) != 0) {
            kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
            meta_result_free(res);
            break;
        }
        int64_t rev = res->kv.found ? res->kv.mod_rev : 0;
        if (!res->kv.found || kvm_lifecycle_decode_req(res->kv.value, res->kv.value_len, r) != 0) {
            memset(r, 0, sizeof(*r)); /* none, or malformed: this request replaces it */
            r->want = KVM_MS_ACTIVE;
        }
        meta_result_free(res);
        if (!seg_step) {
            r->want = strcmp(state, "draining") == 0 ? KVM_MS_DRAINING : KVM_MS_ACTIVE;
        } else {
            uint32_t k = 0;
            while (k < r->n_segs && r->segs[k] != seg)
                k++;
            if (seg_drain && k == r->n_segs) {
                if (r->n_segs == STORE_MAX_SEGS) {
                    rc = kvm_errf(KVMESH_ETOOBIG, "member %s has %d drained segments already", id,
                                  STORE_MAX_SEGS);
                    break;
                }
                r->segs[r->n_segs++] = seg;
            } else if (!seg_drain && k < r->n_segs) {
                r->segs[k] = r->segs[--r->n_segs];
            }
        }
        r->at_ms = env_clock_wall_ms();
        bool del = r->want == KVM_MS_ACTIVE && r->n_segs == 0;
        if (!del && (rc = kvm_lifecycle_encode_req(r, val, sizeof(val))) != 0)
            break;
        meta_cmp_t cmp = {.key = key, .target = META_CMP_MOD_REV, .op = META_EQ, .num = rev};
        meta_op_t op = del ? (meta_op_t){.type = META_OP_DEL, .key = key}
                           : (meta_op_t){.type = META_OP_PUT,
                                         .key = key,
                                         .value = (const uint8_t *)val,
                                         .value_len = strlen(val)};
        rc = meta_sync_txn(a->ms, &cmp, 1, &op, 1, NULL, 0, &res);
        bool ok = rc == 0 && res->succeeded;
        if (rc)
            kvm_errf(rc, "writing %s: %s", key, res->errmsg);
        meta_result_free(res);
        if (rc || ok)
            break;
        if (attempt + 1 >= ADMIN_LC_TRIES) {
            rc = kvm_errf(KVMESH_ECONFLICT,
                          "%s changed under each of %d writes (another admin is writing it); "
                          "try again",
                          key, ADMIN_LC_TRIES);
            break;
        }
    }
    free(r);
    return rc;
}

int kvmesh_admin_lifecycle_request(kvmesh_admin_t *a, const char *id, const char *state)
{
    if (strcmp(state, "draining") != 0 && strcmp(state, "active") != 0)
        return kvm_errf(KVMESH_EINVAL, "lifecycle state \"%s\": allowed draining, active", state);
    return lifecycle_update(a, id, state, false, 0, false);
}

int kvmesh_admin_segment_request(kvmesh_admin_t *a, const char *id, uint64_t seg, bool drain)
{
    return lifecycle_update(a, id, NULL, true, seg, drain);
}

static void lifecycle_fill(const meta_kv_t *kv, kvmesh_admin_lifecycle_t *o)
{
    struct kvm_lifecycle_req *r = malloc(sizeof(*r));
    if (r && kvm_lifecycle_decode_req(kv->value, kv->value_len, r) == 0) {
        snprintf(o->state, sizeof(o->state), "%s", kvm_member_state_name(r->want));
        o->n_segments = r->n_segs < KVMESH_ADMIN_SEGS_MAX ? r->n_segs : KVMESH_ADMIN_SEGS_MAX;
        memcpy(o->segments, r->segs, o->n_segments * sizeof(o->segments[0]));
    } else {
        snprintf(o->state, sizeof(o->state), "malformed");
    }
    free(r);
}

int kvmesh_admin_lifecycle_read(kvmesh_admin_t *a, const char *id, kvmesh_admin_lifecycle_t *out,
                                bool *found)
{
    memset(out, 0, sizeof(*out));
    *found = false;
    snprintf(out->id, sizeof(out->id), "%s", id);
    char key[KS_KEY_CAP];
    int rc = ks_lifecycle_key(key, sizeof(key), a->deployment, id);
    if (rc)
        return rc;
    meta_result_t *res;
    rc = meta_sync_get(a->ms, key, &res);
    if (rc) {
        kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
    } else if (res->kv.found) {
        *found = true;
        lifecycle_fill(&res->kv, out);
    }
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_lifecycle_get(kvmesh_admin_t *a, const char *id, char *state, size_t cap)
{
    if (cap)
        state[0] = 0;
    kvmesh_admin_lifecycle_t *l = malloc(sizeof(*l));
    if (!l)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    bool found = false;
    int rc = kvmesh_admin_lifecycle_read(a, id, l, &found);
    /* a record asking only for drained segments is no member request */
    if (rc == 0 && found && strcmp(l->state, "active") != 0)
        snprintf(state, cap, "%s", l->state);
    free(l);
    return rc;
}

int kvmesh_admin_shards(kvmesh_admin_t *a, uint32_t first, size_t limit, kvmesh_admin_shard_t *out,
                        size_t *n, bool *more)
{
    static const char *const states[] = {"?", "transferring", "active", "resigned"};
    *n = 0;
    *more = false;
    char start[KS_KEY_CAP] = "";
    if (first > 0) {
        int rc = ks_shard_key(start, sizeof(start), a->deployment, first - 1);
        if (rc)
            return rc;
    }
    meta_result_t *res;
    int rc = admin_page(a, KS_SHARD, start[0] ? start : NULL, limit, &res);
    if (rc == 0) {
        route_rec_t *r = malloc(sizeof(*r));
        if (!r)
            rc = kvm_errf(KVMESH_ENOMEM, "out of memory");
        for (size_t i = 0; r && i < res->n_kvs && i < limit; i++) {
            const meta_kv_t *kv = &res->kvs[i];
            kvmesh_admin_shard_t *o = &out[i];
            memset(o, 0, sizeof(*o));
            ks_parsed_t pk;
            if (ks_parse(kv->key, &pk) == 0 && pk.n_parts == 1)
                o->shard = (uint32_t)pk.parts[0].u;
            if (route_rec_decode(kv->value, kv->value_len, r) != 0) {
                o->malformed = true;
            } else {
                o->generation = r->generation;
                o->token = r->token;
                snprintf(o->state, sizeof(o->state), "%s",
                         r->state < 4 ? states[r->state] : states[0]);
                kvm_id128_fmt(&r->primary.id, o->primary);
                o->primary_epoch = r->primary.epoch;
                o->lease = r->lease;
                o->n_set = r->n_set < KVMESH_ADMIN_SET_MAX ? r->n_set : KVMESH_ADMIN_SET_MAX;
                for (uint32_t k = 0; k < o->n_set; k++)
                    kvm_id128_fmt(&r->set[k].rt.id, o->set[k]);
            }
            (*n)++;
        }
        free(r);
        *more = res->more;
    }
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_lease_alive(kvmesh_admin_t *a, int64_t lease, bool *alive)
{
    *alive = false;
    if (lease == 0)
        return 0;
    meta_result_t *res;
    int rc = meta_sync_lease_ttl(a->ms, lease, &res);
    if (rc == 0)
        *alive = res->ttl_ms > 0;
    else if (rc == KVMESH_ENOENT)
        rc = 0;
    else
        kvm_errf(rc, "lease %lld: %s", (long long)lease, res->errmsg);
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_member_delete(kvmesh_admin_t *a, const char *id, int64_t mod_rev, bool *deleted)
{
    *deleted = false;
    char key[KS_KEY_CAP];
    int rc = ks_member_key(key, sizeof(key), a->deployment, id);
    if (rc)
        return rc;
    meta_cmp_t cmp = {.key = key, .target = META_CMP_MOD_REV, .op = META_EQ, .num = mod_rev};
    meta_op_t del = {.type = META_OP_DEL, .key = key};
    meta_result_t *res;
    rc = meta_sync_txn(a->ms, &cmp, 1, &del, 1, NULL, 0, &res);
    if (rc == 0)
        *deleted = res->succeeded && res->n_deleted == 1;
    else
        kvm_errf(rc, "deleting %s: %s", key, res->errmsg);
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_lifecycles(kvmesh_admin_t *a, const char *after, size_t limit,
                            kvmesh_admin_lifecycle_t *out, size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    meta_result_t *res;
    int rc = admin_page_after(a, KS_LIFECYCLE, ks_lifecycle_key, after, limit, &res);
    for (size_t i = 0; rc == 0 && i < res->n_kvs && i < limit; i++) {
        kvmesh_admin_lifecycle_t *o = &out[i];
        memset(o, 0, sizeof(*o));
        ks_parsed_t pk;
        if (ks_parse(res->kvs[i].key, &pk) == 0 && pk.n_parts == 1)
            snprintf(o->id, sizeof(o->id), "%.*s", KVMESH_ID_HEX_LEN, pk.parts[0].s);
        lifecycle_fill(&res->kvs[i], o);
        (*n)++;
    }
    if (rc == 0)
        *more = res->more;
    meta_result_free(res);
    return rc;
}

/* ---- tenants and quotas ------------------------------------------------------------------- */

/* KVMESH_EINVAL keeping the message a validator left (kvm_errf must not format the thread's
 * message buffer into itself: the text was lost that way). */
static int einval_keep(void)
{
    char m[512];
    snprintf(m, sizeof(m), "%s", kvmesh_last_error());
    return kvm_errf(KVMESH_EINVAL, "%s", m);
}

static int tenant_arg(const char *tenant)
{
    kvm_ident_t id;
    int rc = kvm_ident_init(&id, tenant, NULL, "k", 1);
    if (rc)
        return einval_keep();
    kvm_ident_free(&id);
    return 0;
}

/* Fills the usage part of o from quotas/<tenant> (one exact read); its revision into *rev when
 * rev is not NULL (0 = no usage row). */
static int tenant_usage_rev(kvmesh_admin_t *a, kvmesh_admin_tenant_t *o, int64_t *rev)
{
    char key[KS_KEY_CAP];
    int rc = ks_quota_key(key, sizeof(key), a->deployment, o->tenant);
    if (rc)
        return rc;
    meta_result_t *res;
    rc = meta_sync_get(a->ms, key, &res);
    if (rc) {
        kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
    } else if (res->kv.found) {
        o->has_usage = true;
        if (rev)
            *rev = res->kv.mod_rev;
        tn_usage_t u;
        if (tn_usage_decode(res->kv.value, res->kv.value_len, &u) != 0) {
            o->usage_malformed = true;
        } else {
            o->committed_bytes = u.committed_bytes;
            o->committed_objects = u.committed_objects;
            o->pending_bytes = u.pending_bytes;
            o->pending_objects = u.pending_objects;
            o->ops_pending = u.n_pending;
            o->ops_publishing = u.n_publishing;
        }
    }
    meta_result_free(res);
    return rc;
}

static int tenant_usage(kvmesh_admin_t *a, kvmesh_admin_tenant_t *o)
{
    return tenant_usage_rev(a, o, NULL);
}

static void tenant_from_kv(const meta_kv_t *kv, kvmesh_admin_tenant_t *o)
{
    memset(o, 0, sizeof(*o));
    ks_parsed_t pk;
    if (ks_parse(kv->key, &pk) == 0 && pk.n_parts == 1)
        snprintf(o->tenant, sizeof(o->tenant), "%.*s", KVMESH_ADMIN_TENANT_LEN, pk.parts[0].s);
    tn_policy_rec_t r;
    if (tn_policy_decode(kv->value, kv->value_len, &r) != 0) {
        o->malformed = true;
        return;
    }
    o->schema_version = r.schema_version;
    o->policy_version = r.policy_version;
    o->max_bytes = r.max_bytes;
    o->max_objects = r.max_objects;
    o->fingerprint = r.fingerprint;
}

int kvmesh_admin_tenants(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_tenant_t *out, size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    meta_result_t *res;
    int rc = admin_page_after(a, KS_TENANT_POLICY, ks_tenant_policy_key, after, limit, &res);
    for (size_t i = 0; rc == 0 && i < res->n_kvs && i < limit; i++) {
        tenant_from_kv(&res->kvs[i], &out[i]);
        if (out[i].tenant[0])
            rc = tenant_usage(a, &out[i]);
        (*n)++;
    }
    if (rc == 0)
        *more = res->more;
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_tenant_get(kvmesh_admin_t *a, const char *tenant, kvmesh_admin_tenant_t *out,
                            bool *found)
{
    *found = false;
    int rc = tenant_arg(tenant);
    if (rc)
        return rc;
    char key[KS_KEY_CAP];
    if ((rc = ks_tenant_policy_key(key, sizeof(key), a->deployment, tenant)) != 0)
        return rc;
    meta_result_t *res;
    rc = meta_sync_get(a->ms, key, &res);
    if (rc) {
        kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
    } else if (res->kv.found) {
        *found = true;
        tenant_from_kv(&res->kv, out);
        rc = tenant_usage(a, out);
    }
    meta_result_free(res);
    return rc;
}

static int admin_get(kvmesh_admin_t *a, const char *key, meta_result_t **res);

int kvmesh_admin_objrow_get(kvmesh_admin_t *a, const char *tenant, const char *domain,
                            const char *key, kvmesh_admin_objrow_t *out, bool *found)
{
    *found = false;
    memset(out, 0, sizeof(*out));
    int rc = tenant_arg(tenant);
    if (rc)
        return rc;
    if (domain && domain[0] && kvm_ident_check_domain(domain, strlen(domain)) != 0)
        return einval_keep();
    if (!key)
        return kvm_errf(KVMESH_EINVAL, "no object key");
    if (kvm_ident_check_key(key, strlen(key)) != 0)
        return einval_keep();
    char k[KS_KEY_CAP];
    if ((rc = ks_object_key(k, sizeof(k), a->deployment, tenant, domain, key)) != 0)
        return kvm_errf(KVMESH_EINVAL, "the object key is too long for a metadata key");
    meta_result_t *res;
    if ((rc = admin_get(a, k, &res)) == 0 && res->kv.found) {
        *found = true;
        out->mod_rev = res->kv.mod_rev;
        tn_objrow_t r;
        if (tn_objrow_decode(res->kv.value, res->kv.value_len, &r) != 0) {
            out->malformed = true;
        } else {
            out->acct_version = r.acct_version;
            out->live = r.live;
            out->len = r.len;
            out->fencing_token = r.route_version.fencing_token;
            out->primary_sequence = r.route_version.primary_sequence;
            snprintf(out->last_op, sizeof(out->last_op), "%s", r.last_op);
            snprintf(out->lock_op, sizeof(out->lock_op), "%s", r.lock_op);
        }
    }
    meta_result_free(res);
    return rc;
}

/* ---- changing a tenant policy ---------------------------------------------------------------- */

/* One exact read of key: found, revision and the value decoded by the caller. */
static int admin_get(kvmesh_admin_t *a, const char *key, meta_result_t **res)
{
    int rc = meta_sync_get(a->ms, key, res);
    if (rc)
        kvm_errf(rc, "metadata get of %s: %s", key, (*res)->errmsg);
    return rc;
}

/* "field=value" of policy set into the plan's new limits; *seen collects the fields given. */
static int policy_assign(const char *tenant, const char *as, uint64_t *max_bytes,
                         uint64_t *max_objects, unsigned *seen)
{
    const char *eq = strchr(as, '=');
    if (!eq || eq == as || !eq[1])
        return kvm_errf(KVMESH_EINVAL,
                        "\"%s\" is not field=value; settable fields: max_bytes=SIZE, "
                        "max_objects=N",
                        as);
    size_t fl = (size_t)(eq - as);
    const char *v = eq + 1;
    unsigned bit;
    if (fl == 9 && strncmp(as, "max_bytes", 9) == 0) {
        bit = KVMESH_ADMIN_POLICY_MAX_BYTES;
        uint64_t b = 0;
        if (kvmesh_tools_parse_size("max_bytes", v, &b) != 0 || b == 0)
            return kvm_errf(KVMESH_EINVAL,
                            "max_bytes=%s: not a size >= 1 (a byte count with an optional unit: "
                            "KiB, MiB, GiB, TiB, KB, MB, ...)",
                            v);
        *max_bytes = b;
    } else if (fl == 11 && strncmp(as, "max_objects", 11) == 0) {
        bit = KVMESH_ADMIN_POLICY_MAX_OBJECTS;
        char *end = NULL;
        errno = 0;
        unsigned long long o = strtoull(v, &end, 10);
        if (v[0] < '0' || v[0] > '9' || *end || errno || o < 1 || o > UINT32_MAX)
            return kvm_errf(KVMESH_EINVAL, "max_objects=%s: not an integer 1..%u", v,
                            (unsigned)UINT32_MAX);
        *max_objects = o;
    } else if ((fl == 14 && strncmp(as, "policy_version", 14) == 0) ||
               (fl == 14 && strncmp(as, "schema_version", 14) == 0) ||
               (fl == 11 && strncmp(as, "fingerprint", 11) == 0)) {
        return kvm_errf(KVMESH_EINVAL,
                        "%.*s is not set by hand: the new record of tenant '%s' gets the stored "
                        "policy_version + 1, this release's schema_version and the fingerprint "
                        "of its fields; settable fields: max_bytes, max_objects",
                        (int)fl, as, tenant);
    } else {
        return kvm_errf(KVMESH_EINVAL,
                        "unknown policy field \"%.*s\"; settable fields: max_bytes=SIZE, "
                        "max_objects=N (the hard fields of the tenant-root policy)",
                        (int)fl, as);
    }
    if (*seen & bit)
        return kvm_errf(KVMESH_EINVAL, "%.*s is given twice", (int)fl, as);
    *seen |= bit;
    return 0;
}

int kvmesh_admin_policy_plan(kvmesh_admin_t *a, const char *tenant, const char *const *assign,
                             size_t n, kvmesh_admin_policy_plan_t *out, bool *found)
{
    memset(out, 0, sizeof(*out));
    *found = false;
    int rc = tenant_arg(tenant);
    if (rc)
        return kvm_errf(KVMESH_EINVAL,
                        "tenant \"%s\" breaks the tenant id rule (1..64 of [A-Za-z0-9_.-], "
                        "first alphanumeric)",
                        tenant);
    if (n == 0)
        return kvm_errf(KVMESH_EINVAL, "no field to set; give max_bytes=SIZE and/or max_objects=N");
    uint64_t mb = 0, mo = 0;
    unsigned seen = 0;
    for (size_t i = 0; i < n; i++)
        if ((rc = policy_assign(tenant, assign[i], &mb, &mo, &seen)) != 0)
            return rc;
    char key[KS_KEY_CAP];
    if ((rc = ks_tenant_policy_key(key, sizeof(key), a->deployment, tenant)) != 0)
        return rc;
    meta_result_t *res;
    if ((rc = admin_get(a, key, &res)) != 0) {
        meta_result_free(res);
        return rc;
    }
    if (res->kv.found) {
        *found = true;
        tenant_from_kv(&res->kv, &out->stored);
        out->stored_rev = res->kv.mod_rev;
    }
    meta_result_free(res);
    if (!*found)
        return 0;
    kvmesh_admin_tenant_t *st = &out->stored;
    if (st->malformed)
        return kvm_errf(KVMESH_ECORRUPT,
                        "the policy record of tenant '%s' does not decode; it cannot be changed "
                        "from here",
                        tenant);
    if ((rc = tenant_usage_rev(a, st, &out->usage_rev)) != 0)
        return rc;
    if (st->usage_malformed)
        return kvm_errf(KVMESH_ECORRUPT,
                        "the usage row of tenant '%s' does not decode; the new limits cannot be "
                        "checked against its usage",
                        tenant);
    if (st->policy_version == UINT32_MAX)
        return kvm_errf(KVMESH_ERANGE, "tenant '%s' is at the last policy_version %u", tenant,
                        st->policy_version);
    tn_policy_t p = {.policy_version = st->policy_version + 1,
                     .max_bytes = seen & KVMESH_ADMIN_POLICY_MAX_BYTES ? mb : st->max_bytes,
                     .max_objects = seen & KVMESH_ADMIN_POLICY_MAX_OBJECTS ? mo : st->max_objects};
    /* the bootstrap's validation and fingerprint: what a runtime with this entry will store */
    if ((rc = tn_policy_validate(&p)) != 0)
        return einval_keep();
    tn_policy_rec_t r;
    tn_policy_record(&p, &r);
    out->schema_version = r.schema_version;
    out->policy_version = r.policy_version;
    out->max_bytes = r.max_bytes;
    out->max_objects = r.max_objects;
    out->fingerprint = r.fingerprint;
    out->changed = (r.max_bytes != st->max_bytes ? KVMESH_ADMIN_POLICY_MAX_BYTES : 0u) |
                   (r.max_objects != st->max_objects ? KVMESH_ADMIN_POLICY_MAX_OBJECTS : 0u);
    char size[32];
    kvmesh_tools_format_size(r.max_bytes, size, sizeof(size));
    snprintf(out->config_entry, sizeof(out->config_entry), "%s:%s:%" PRIu64 ":%u", tenant, size,
             r.max_objects, r.policy_version);
    /* the entry must be one the runtimes' tenant_policies accepts, read back to this record */
    struct kvm_store_tenant_policy back;
    uint32_t nb = 0;
    char why[256];
    if (kvm_config_parse_policies(out->config_entry, &back, &nb, why, sizeof(why)) != 0 ||
        nb != 1 || back.max_bytes != r.max_bytes || back.max_objects != r.max_objects ||
        back.policy_version != r.policy_version)
        return kvm_errf(KVMESH_EINVAL, "tenant_policies cannot express %s: %s", out->config_entry,
                        nb ? "its values differ when read back" : why);
    uint64_t ub = st->committed_bytes + st->pending_bytes;
    uint64_t uo = st->committed_objects + st->pending_objects;
    if (r.max_bytes < ub || r.max_objects < uo) {
        bool bytes = r.max_bytes < ub;
        return kvm_errf(KVMESH_ERANGE,
                        "max_%s=%" PRIu64 " is below tenant '%s''s usage %" PRIu64
                        " (committed %" PRIu64 " + pending %" PRIu64
                        "): every write would be refused; remove objects first (and abort "
                        "expired reservations: kvmesh admin quota %s abort --apply), or set at "
                        "least %" PRIu64,
                        bytes ? "bytes" : "objects", bytes ? r.max_bytes : r.max_objects, tenant,
                        bytes ? ub : uo, bytes ? st->committed_bytes : st->committed_objects,
                        bytes ? st->pending_bytes : st->pending_objects, tenant, bytes ? ub : uo);
    }
    return 0;
}

int kvmesh_admin_live_members(kvmesh_admin_t *a, char (*ids)[KVMESH_ID_HEX_LEN + 1], size_t cap,
                              size_t *n_live)
{
    *n_live = 0;
    kvmesh_admin_member_t *page = calloc(KVMESH_ADMIN_PAGE_MAX, sizeof(*page));
    if (!page)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    char after[KVMESH_ID_HEX_LEN + 1] = "";
    int rc = 0;
    for (size_t seen = 0;;) {
        size_t got = 0;
        bool more = false;
        if ((rc = kvmesh_admin_members(a, after, KVMESH_ADMIN_PAGE_MAX, page, &got, &more)) != 0)
            break;
        for (size_t i = 0; i < got && rc == 0; i++) {
            const kvmesh_admin_member_t *m = &page[i];
            bool alive = false;
            if (m->malformed || m->lease == 0 || strcmp(m->state, "gone") == 0)
                continue;
            if ((rc = kvmesh_admin_lease_alive(a, m->lease, &alive)) != 0 || !alive)
                continue;
            if (*n_live < cap)
                snprintf(ids[*n_live], sizeof(ids[0]), "%s", m->id);
            (*n_live)++;
        }
        seen += got;
        if (rc || !more || got == 0)
            break;
        if (seen >= KVMESH_ADMIN_LIVE_SCAN_MAX) {
            rc = kvm_errf(KVMESH_ERANGE, "more than %u member records; not all were checked",
                          KVMESH_ADMIN_LIVE_SCAN_MAX);
            break;
        }
        snprintf(after, sizeof(after), "%s", page[got - 1].id);
    }
    free(page);
    return rc;
}

int kvmesh_admin_policy_apply(kvmesh_admin_t *a, const kvmesh_admin_policy_plan_t *plan)
{
    const char *tenant = plan->stored.tenant;
    if (!plan->changed)
        return kvm_errf(KVMESH_EINVAL, "the plan for tenant '%s' changes nothing", tenant);
    char live[3][KVMESH_ID_HEX_LEN + 1];
    size_t n_live = 0;
    int rc = kvmesh_admin_live_members(a, live, 3, &n_live);
    if (rc)
        return rc;
    if (n_live)
        return kvm_errf(KVMESH_EAGAIN,
                        "%zu runtime(s) of deployment %s are live (%s%s%s%s%s%s): a hard policy "
                        "changes only with no runtime serving the tenant; stop every runtime, "
                        "set it, then restart them with tenant_policies entry %s",
                        n_live, a->deployment, live[0], n_live > 1 ? ", " : "",
                        n_live > 1 ? live[1] : "", n_live > 2 ? ", " : "",
                        n_live > 2 ? live[2] : "", n_live > 3 ? ", ..." : "", plan->config_entry);
    tn_policy_t p = {.policy_version = plan->policy_version,
                     .max_bytes = plan->max_bytes,
                     .max_objects = plan->max_objects};
    if ((rc = tn_policy_validate(&p)) != 0)
        return rc;
    tn_policy_rec_t r;
    tn_policy_record(&p, &r);
    KVM_ASSERT(r.fingerprint == plan->fingerprint);
    uint8_t val[64];
    size_t len = 0;
    if ((rc = tn_policy_encode(&r, val, sizeof(val), &len)) != 0)
        return rc;
    char pkey[KS_KEY_CAP], qkey[KS_KEY_CAP];
    if ((rc = ks_tenant_policy_key(pkey, sizeof(pkey), a->deployment, tenant)) != 0 ||
        (rc = ks_quota_key(qkey, sizeof(qkey), a->deployment, tenant)) != 0)
        return rc;
    meta_cmp_t cmps[2] = {
        {.key = pkey, .target = META_CMP_MOD_REV, .op = META_EQ, .num = plan->stored_rev},
        {.key = qkey, .target = META_CMP_MOD_REV, .op = META_EQ, .num = plan->usage_rev},
    };
    meta_op_t put = {.type = META_OP_PUT, .key = pkey, .value = val, .value_len = len};
    meta_result_t *res;
    rc = meta_sync_txn(a->ms, cmps, 2, &put, 1, NULL, 0, &res);
    if (rc)
        kvm_errf(rc, "writing %s: %s", pkey, res->errmsg);
    else if (!res->succeeded)
        rc = kvm_errf(KVMESH_ECONFLICT,
                      "the policy record or usage row of tenant '%s' changed since they were "
                      "read (another admin or a runtime wrote them); nothing was written: run "
                      "the set again",
                      tenant);
    meta_result_free(res);
    return rc;
}

/* ---- cold devices ---- */

static void device_from_kv(const meta_kv_t *kv, kvmesh_admin_device_t *o)
{
    memset(o, 0, sizeof(*o));
    ks_parsed_t pk;
    if (ks_parse(kv->key, &pk) == 0 && pk.n_parts == 1)
        snprintf(o->id, sizeof(o->id), "%.*s", KVMESH_ID_HEX_LEN, pk.parts[0].s);
    cold_device_t d;
    if (cold_device_decode(kv->value, kv->value_len, &d) != 0) {
        o->malformed = true;
        return;
    }
    kvm_id128_fmt(&d.owner, o->owner);
    o->owner_epoch = d.owner_epoch;
    snprintf(o->kind, sizeof(o->kind), "%s",
             d.kind == COLD_BACKEND_LOCALDIR ? "localdir"
             : d.kind == COLD_BACKEND_EXTENT ? "extent"
                                             : "sim");
    snprintf(o->lifecycle, sizeof(o->lifecycle), "%s", cold_dev_lifecycle_name(d.lifecycle));
    snprintf(o->health, sizeof(o->health), "%s", cold_dev_health_name(d.health));
    o->schedulable = d.schedulable;
    o->capacity = d.capacity;
    o->used = d.used;
    o->reserved = d.reserved;
    o->n_reserved = d.n_reserved;
    o->n_used = d.n_used;
    o->health_ms = d.health_ms;
    snprintf(o->root, sizeof(o->root), "%s", d.root);
    snprintf(o->tags, sizeof(o->tags), "%s", d.tags);
}

int kvmesh_admin_devices(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_device_t *out, size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    char start[KS_KEY_CAP] = "";
    if (after && after[0]) {
        int rc = ks_cold_device_key(start, sizeof(start), a->deployment, after);
        if (rc)
            return rc;
    }
    meta_result_t *res;
    int rc = admin_page(a, KS_COLD_DEVICE, start[0] ? start : NULL, limit, &res);
    for (size_t i = 0; rc == 0 && i < res->n_kvs && i < limit; i++) {
        device_from_kv(&res->kvs[i], &out[i]);
        (*n)++;
    }
    if (rc == 0)
        *more = res->more;
    meta_result_free(res);
    return rc;
}

int kvmesh_admin_device_get(kvmesh_admin_t *a, const char *id, kvmesh_admin_device_t *out,
                            bool *found)
{
    *found = false;
    kvm_id128_t parsed;
    if (!id || kvm_id128_parse(id, &parsed) != 0)
        return kvm_errf(KVMESH_EINVAL,
                        "\"%s\" is not a device id (32 hex digits; see kvmesh "
                        "admin devices)",
                        id ? id : "");
    char key[KS_KEY_CAP];
    int rc = ks_cold_device_key(key, sizeof(key), a->deployment, id);
    if (rc)
        return rc;
    meta_result_t *res;
    rc = meta_sync_get(a->ms, key, &res);
    if (rc) {
        kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
    } else if (res->kv.found) {
        *found = true;
        device_from_kv(&res->kv, out);
    }
    meta_result_free(res);
    return rc;
}

/* The lifecycle decision for one stored record: 0 with *n the new record (*changed false for
 * a repeat), or the refusal. */
static int device_lifecycle_decide(const cold_device_t *o, const char *id, bool retire,
                                   cold_device_t *n, bool *changed)
{
    *n = *o;
    *changed = false;
    if (retire) {
        if (o->lifecycle == COLD_DEV_RETIRED)
            return 0;
        if (o->used || o->reserved)
            return kvm_errf(KVMESH_EAGAIN,
                            "cold device %s still holds %llu used and %llu reserved bytes (%llu "
                            "and %llu cold operations); it cannot be retired until they are "
                            "released: drain it (kvmesh admin devices drain %s), then remove or "
                            "overwrite its objects and retry",
                            id, (unsigned long long)o->used, (unsigned long long)o->reserved,
                            (unsigned long long)o->n_used, (unsigned long long)o->n_reserved, id);
        n->lifecycle = COLD_DEV_RETIRED;
    } else {
        if (o->lifecycle == COLD_DEV_RETIRED)
            return kvm_errf(KVMESH_EINVAL, "cold device %s is retired; it cannot be drained", id);
        if (o->lifecycle == COLD_DEV_DRAINING && !o->schedulable)
            return 0;
        n->lifecycle = COLD_DEV_DRAINING;
    }
    n->schedulable = false;
    *changed = true;
    return 0;
}

int kvmesh_admin_device_lifecycle(kvmesh_admin_t *a, const char *id, const char *to,
                                  kvmesh_admin_device_t *out, bool *changed)
{
    *changed = false;
    bool retire = to && strcmp(to, "retire") == 0;
    if (!to || (!retire && strcmp(to, "drain") != 0))
        return kvm_errf(KVMESH_EINVAL, "device action \"%s\": allowed drain, retire", to ? to : "");
    kvm_id128_t parsed;
    if (!id || kvm_id128_parse(id, &parsed) != 0)
        return kvm_errf(KVMESH_EINVAL,
                        "\"%s\" is not a device id (32 hex digits; see kvmesh admin devices)",
                        id ? id : "");
    char key[KS_KEY_CAP];
    int rc = ks_cold_device_key(key, sizeof(key), a->deployment, id);
    if (rc)
        return rc;
    meta_result_t *res;
    rc = meta_sync_get(a->ms, key, &res);
    if (rc) {
        kvm_errf(rc, "metadata get of %s: %s", key, res->errmsg);
        meta_result_free(res);
        return rc;
    }
    if (!res->kv.found) {
        meta_result_free(res);
        return kvm_errf(KVMESH_ENOENT, "no cold device %s", id);
    }
    device_from_kv(&res->kv, out);
    cold_device_t o, n;
    int64_t rev = res->kv.mod_rev;
    rc = cold_device_decode(res->kv.value, res->kv.value_len, &o);
    meta_result_free(res);
    if (rc)
        return kvm_errf(KVMESH_ECORRUPT, "the record of cold device %s does not decode", id);
    rc = device_lifecycle_decide(&o, id, retire, &n, changed);
    if (rc || !*changed)
        return rc;
    uint8_t buf[COLD_DEVICE_ENC_MAX];
    size_t len = 0;
    if ((rc = cold_device_encode(&n, buf, sizeof(buf), &len)) != 0)
        return rc;
    meta_cmp_t cmp = {.key = key, .target = META_CMP_MOD_REV, .op = META_EQ, .num = rev};
    meta_op_t put = {.type = META_OP_PUT, .key = key, .value = buf, .value_len = len};
    rc = meta_sync_txn(a->ms, &cmp, 1, &put, 1, NULL, 0, &res);
    if (rc)
        kvm_errf(rc, "writing %s: %s", key, res->errmsg);
    else if (!res->succeeded)
        rc = kvm_errf(KVMESH_ECONFLICT,
                      "cold device %s changed since it was read (its owner runtime or another "
                      "admin wrote it); nothing was written: run it again",
                      id);
    meta_result_free(res);
    if (rc) {
        *changed = false;
        return rc;
    }
    meta_kv_t kv = {.key = key, .value = buf, .value_len = len};
    device_from_kv(&kv, out);
    return 0;
}

int kvmesh_admin_quota_ops(kvmesh_admin_t *a, const char *tenant, const char *state,
                           const char *cursor, size_t limit, kvmesh_admin_qop_t *out, size_t *n,
                           bool *more, char *cursor_out)
{
    *n = 0;
    *more = false;
    cursor_out[0] = 0;
    int rc = tenant_arg(tenant);
    if (rc)
        return rc;
    if (strcmp(state, "pending") != 0 && strcmp(state, "publishing") != 0)
        return kvm_errf(KVMESH_EINVAL, "due state \"%s\": allowed pending, publishing", state);
    if (limit < 1 || limit > KVMESH_ADMIN_PAGE_MAX)
        return kvm_errf(KVMESH_EINVAL, "page size %zu is out of range; allowed 1..%d", limit,
                        KVMESH_ADMIN_PAGE_MAX);
    char prefix[KS_KEY_CAP];
    if ((rc = ks_acct_due_prefix(prefix, sizeof(prefix), a->deployment, tenant, state)) != 0)
        return rc;
    if (cursor && cursor[0] && strncmp(cursor, prefix, strlen(prefix)) != 0)
        return kvm_errf(KVMESH_EINVAL, "cursor does not belong to %s", prefix);
    meta_result_t *res;
    rc = meta_sync_range(a->ms, prefix, cursor && cursor[0] ? cursor : NULL, (uint32_t)limit, &res);
    if (rc) {
        kvm_errf(rc, "metadata range of %s: %s", prefix, res->errmsg);
        meta_result_free(res);
        return rc;
    }
    tn_op_t *op = malloc(sizeof(*op));
    if (!op) {
        meta_result_free(res);
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    }
    uint64_t now = env_clock_wall_ms();
    for (size_t i = 0; rc == 0 && i < res->n_kvs && i < limit; i++) {
        kvmesh_admin_qop_t *o = &out[i];
        memset(o, 0, sizeof(*o));
        snprintf(o->due_state, sizeof(o->due_state), "%s", state);
        ks_parsed_t pk;
        if (ks_parse(res->kvs[i].key, &pk) != 0 || pk.n_parts != 4) {
            o->missing = true;
            (*n)++;
            continue;
        }
        o->deadline_ms = pk.parts[2].u;
        o->expired = o->deadline_ms <= now;
        snprintf(o->id, sizeof(o->id), "%.*s", KVMESH_ADMIN_OPID_LEN, pk.parts[3].s);
        char okey[KS_KEY_CAP];
        meta_result_t *r2 = NULL;
        rc = ks_acct_op_key(okey, sizeof(okey), a->deployment, tenant, pk.parts[3].s);
        if (rc == 0 && (rc = meta_sync_get(a->ms, okey, &r2)) != 0)
            kvm_errf(rc, "metadata get of %s: %s", okey, r2->errmsg);
        if (rc == 0 && !r2->kv.found) {
            o->missing = true;
        } else if (rc == 0 && tn_op_decode(r2->kv.value, r2->kv.value_len, op) != 0) {
            o->malformed = true;
        } else if (rc == 0) {
            snprintf(o->state, sizeof(o->state), "%s", tn_state_name(op->state));
            snprintf(o->kind, sizeof(o->kind), "%s", tn_kind_name(op->kind));
            snprintf(o->domain, sizeof(o->domain), "%s", op->domain);
            snprintf(o->key, sizeof(o->key), "%s", op->key);
            o->delta_bytes = op->delta_bytes;
            o->delta_objects = op->delta_objects;
            o->next_len = op->next_len;
            o->recon_attempts = op->recon_attempts;
        }
        meta_result_free(r2);
        (*n)++;
    }
    if (rc == 0) {
        *more = res->more;
        if (*n)
            snprintf(cursor_out, KVMESH_ADMIN_CURSOR_CAP, "%s", res->kvs[*n - 1].key);
    }
    free(op);
    meta_result_free(res);
    return rc;
}

/* The admin handle's quota protocol handle, on its private loop. */
static void q_open_on_loop(void *arg)
{
    kvmesh_admin_t *a = arg;
    meta_opts_t mo = {.default_timeout_ms = a->timeout_ms, .name = "kvmesh-admin-quota"};
    env_t *env = env_uv_thread_env(a->qt);
    if (meta_open(&a->qm, env, a->url, &mo) != 0)
        return;
    tn_config_t tc = {.deployment = a->deployment, .writer_epoch = 1, .timeout_ms = a->timeout_ms};
    if (tn_new(&a->tn, env, a->qm, &tc) != 0) {
        meta_close(a->qm);
        a->qm = NULL;
    }
}

struct qabort {
    kvmesh_admin_t *a;
    const char *tenant, *domain, *key, *op_id;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs; /* the caller + the loop */
    bool done;
    int rc;
    char msg[400];
};

static void qabort_unref(struct qabort *q)
{
    if (atomic_fetch_sub(&q->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

static void qabort_done(void *arg, int rc, const tn_op_view_t *v)
{
    struct qabort *q = arg;
    pthread_mutex_lock(&q->mu);
    q->rc = rc;
    if (rc == KVMESH_ECONFLICT && v && v->op)
        snprintf(q->msg, sizeof(q->msg),
                 "operation %s is %s, not pending: only a pending "
                 "operation can be aborted",
                 v->op->id, tn_state_name(v->op->state));
    else if (rc)
        snprintf(q->msg, sizeof(q->msg), "%s", kvmesh_last_error());
    q->done = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    qabort_unref(q);
}

static void qabort_on_loop(void *arg)
{
    struct qabort *q = arg;
    int rc = tn_abort(q->a->tn, q->tenant, q->domain, q->key, q->op_id, qabort_done, q);
    if (rc) {
        snprintf(q->msg, sizeof(q->msg), "%s", kvmesh_last_error());
        pthread_mutex_lock(&q->mu);
        q->rc = rc;
        q->done = true;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        qabort_unref(q);
    }
}

int kvmesh_admin_quota_abort(kvmesh_admin_t *a, const char *tenant, const char *domain,
                             const char *key, const char *op_id)
{
    int rc = tenant_arg(tenant);
    if (rc)
        return rc;
    if (!a->qt) {
        if ((rc = env_uv_thread_start(&a->qt, 0)) != 0)
            return kvm_errf(rc, "cannot start the quota loop thread");
        env_uv_thread_call(a->qt, q_open_on_loop, a);
    }
    if (!a->tn)
        return kvm_errf(KVMESH_EUNAVAILABLE, "cannot open the quota protocol on %s", a->url);
    struct qabort *q = calloc(1, sizeof(*q));
    if (!q)
        return kvm_errf(KVMESH_ENOMEM, "out of memory");
    *q = (struct qabort){.a = a, .tenant = tenant, .domain = domain, .key = key, .op_id = op_id};
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    atomic_init(&q->refs, 2);
    if ((rc = env_uv_thread_call(a->qt, qabort_on_loop, q)) != 0) {
        atomic_store(&q->refs, 1);
        qabort_unref(q);
        return kvm_errf(rc, "cannot reach the quota loop");
    }
    /* the protocol retries a bounded number of compare rounds, each bounded by the timeout */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(4 * (uint64_t)a->timeout_ms / 1000 + 2);
    pthread_mutex_lock(&q->mu);
    while (!q->done)
        if (pthread_cond_timedwait(&q->cv, &q->mu, &until) != 0)
            break;
    bool done = q->done;
    rc = done ? q->rc : KVMESH_ETIMEDOUT;
    char msg[sizeof(q->msg)];
    snprintf(msg, sizeof(msg), "%s", q->msg);
    pthread_mutex_unlock(&q->mu);
    qabort_unref(q);
    if (rc)
        return kvm_errf(rc, "abort of %s: %s", op_id, done ? msg : "no answer in time");
    return 0;
}

int kvmesh_tools_quota_reconcile(kvmesh_t *kv, const char *tenant, kvmesh_tools_recon_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    if (!rt)
        return kvm_errf(KVMESH_EINVAL, "no runtime");
    tn_recon_report_t r;
    tn_stats_t st;
    int rc = kvm_quota_reconcile_now(rt, tenant, &r, &st);
    if (rc)
        return rc;
    *out = (kvmesh_tools_recon_t){.rc = r.rc,
                                  .aborted = r.aborted,
                                  .finalized = r.finalized,
                                  .replayed = r.replayed,
                                  .degraded = r.degraded,
                                  .purged = r.purged,
                                  .more = r.more,
                                  .total_aborted = st.recon_aborted,
                                  .total_finalized = st.recon_finalized,
                                  .total_replayed = st.recon_replayed,
                                  .total_degraded = st.recon_degraded,
                                  .total_purged = st.recon_purged};
    return 0;
}

/* ---- memory per object (kvmesh bench --footprint) ------------------------------------------ */

int kvmesh_tools_route_footprint(kvmesh_t *kv, kvmesh_tools_route_footprint_t *out)
{
    memset(out, 0, sizeof(*out));
    kvm_rt_t *rt = kvmesh_runtime_of(kv);
    if (!rt)
        return kvm_errf(KVMESH_EINVAL, "kvmesh_tools_route_footprint: no runtime");
    if (rt->route) {
        route_table_counts(rt->route, &out->routes, &out->tombstones, &out->purged);
        route_mem_t m;
        route_table_mem_total(rt->route, &m);
        out->entry_bytes = m.entry_bytes;
        out->packed_bytes = m.packed_bytes;
        out->ident_bytes = m.ident_bytes;
        out->other_bytes = m.other_bytes;
    }
    out->route_size = sizeof(kvm_route_t);
    out->hint_entries = STORE_HINTS;
    return 0;
}
