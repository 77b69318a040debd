/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvmesh_tools.c — the internal tools interface (api/kvmesh_tools.h) over the configuration
 * table (config.c) and the YAML loader (yaml_config.c), and the metadata administration of
 * `kvmesh admin` over the blocking metadata wrapper (meta_sync), the key layout (keyspace) and
 * the record codecs of the store (member records) and the route service (shard records).
 * kvmesh_runtime_of is in kvmesh.c, beside struct kvmesh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "api/config_table.h"
#include "api/kvmesh_tools.h"
#include "api/yaml_config.h"
#include "core/util.h"
#include "env/clock.h"
#include "meta/keyspace.h"
#include "meta/meta.h"
#include "route/route_int.h"
#include "store/store.h"

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
};

int kvmesh_admin_open(const kvmesh_config_t *cfg, kvmesh_admin_t **out)
{
    *out = NULL;
    kvmesh_admin_t *a = calloc(1, sizeof(*a));
    if (!a)
        return kvm_errf(KVMESH_ENOMEM, "out of memory for the admin connection");
    snprintf(a->deployment, sizeof(a->deployment), "%s", cfg->deployment);
    meta_opts_t mo = {.default_timeout_ms = cfg->request_timeout_ms, .name = "kvmesh-admin"};
    int rc = meta_sync_open(&a->ms, cfg->metadata_url, &mo);
    if (rc) {
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void kvmesh_admin_close(kvmesh_admin_t *a)
{
    if (!a)
        return;
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

int kvmesh_admin_members(kvmesh_admin_t *a, const char *after, size_t limit,
                         kvmesh_admin_member_t *out, size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    char start[KS_KEY_CAP] = "";
    if (after && after[0]) {
        int rc = ks_member_key(start, sizeof(start), a->deployment, after);
        if (rc)
            return rc;
    }
    meta_result_t *res;
    int rc = admin_page(a, KS_MEMBER, start[0] ? start : NULL, limit, &res);
    if (rc == 0) {
        struct kvm_member *m = malloc(sizeof(*m));
        if (!m)
            rc = kvm_errf(KVMESH_ENOMEM, "out of memory");
        for (size_t i = 0; m && i < res->n_kvs && i < limit; i++) {
            const meta_kv_t *kv = &res->kvs[i];
            kvmesh_admin_member_t *o = &out[i];
            memset(o, 0, sizeof(*o));
            ks_parsed_t pk;
            if (ks_parse(kv->key, &pk) == 0 && pk.n_parts == 1)
                snprintf(o->id, sizeof(o->id), "%.*s", (int)(sizeof(o->id) - 1), pk.parts[0].s);
            o->lease = kv->lease;
            o->mod_rev = kv->mod_rev;
            memset(m, 0, sizeof(*m));
            if (kvm_member_record_decode(kv->key, kv->value, kv->value_len, m, o->rpc,
                                         sizeof(o->rpc), o->data, sizeof(o->data)) != 0) {
                o->malformed = true;
            } else {
                o->epoch = m->rt.epoch;
                snprintf(o->state, sizeof(o->state), "%s", kvm_member_state_name(m->state));
                o->weight = m->weight;
                o->capacity_bytes = m->capacity;
                o->used_bytes = m->used;
                o->heartbeat = m->heartbeat;
                o->n_segments =
                    m->n_segs < KVMESH_ADMIN_SEGS_MAX ? m->n_segs : KVMESH_ADMIN_SEGS_MAX;
                for (uint32_t k = 0; k < o->n_segments; k++) {
                    o->segments[k].id = m->segs[k].id;
                    o->segments[k].size = m->segs[k].size;
                }
            }
            (*n)++;
        }
        free(m);
        *more = res->more;
    }
    meta_result_free(res);
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
