/* SPDX-License-Identifier: Apache-2.0 */
/*
 * place.c — per-tenant placement preferences (place.h): owns the parsed tenant_placement table
 * (immutable after open, read on the loop) and the kvmesh_placements_total counting; names the
 * key's shard primary as a candidate (place_on_primary).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "obs/metrics.h"
#include "route/route.h"
#include "store/place.h"

struct kvm_place_entry {
    char tenant[KVM_TENANT_MAX_LEN + 1];
    size_t tenant_len;
    size_t n;
    kvm_runtime_id_t owners[KVM_STORE_PLACE_OWNERS_MAX];
    bool hard;
};

struct kvm_place {
    size_t n;
    struct kvm_place_entry e[KVM_STORE_TENANT_SOFT_MAX];
};

int kvm_place_open(kvm_rt_t *rt)
{
    rt->place = NULL;
    if (rt->cfg.n_tenant_placement == 0)
        return 0;
    struct kvm_place *p = calloc(1, sizeof(*p));
    if (!p)
        return kvm_errf(KVMESH_ENOMEM, "tenant_placement: out of memory");
    for (uint32_t i = 0; i < rt->cfg.n_tenant_placement && i < KVM_STORE_TENANT_SOFT_MAX; i++) {
        const struct kvm_store_tenant_placement *c = &rt->cfg.tenant_placement[i];
        struct kvm_place_entry *e = &p->e[p->n++];
        snprintf(e->tenant, sizeof(e->tenant), "%s", c->tenant);
        e->tenant_len = strlen(e->tenant);
        e->hard = c->hard;
        for (uint32_t k = 0; k < c->n_owners && k < KVM_STORE_PLACE_OWNERS_MAX; k++) {
            if (kvm_id128_parse(c->owners[k], &e->owners[e->n]) != 0) {
                free(p);
                return kvm_errf(KVMESH_ECONFIG,
                                "tenant_placement: tenant '%s': owner '%s' is not a runtime id",
                                c->tenant, c->owners[k]);
            }
            e->n++;
        }
    }
    rt->place = p;
    return 0;
}

void kvm_place_close(kvm_rt_t *rt)
{
    free(rt->place);
    rt->place = NULL;
}

static const struct kvm_place_entry *entry_of(const kvm_rt_t *rt, const kvm_ident_t *id)
{
    const struct kvm_place *p = rt->place;
    if (!p)
        return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (p->e[i].tenant_len == id->tenant_len &&
            memcmp(p->e[i].tenant, kvm_ident_tenant(id), id->tenant_len) == 0)
            return &p->e[i];
    return NULL;
}

void kvm_place_pref(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                    const kvm_runtime_id_t **pref, size_t *n, bool *hard, bool *tenant_pin)
{
    *tenant_pin = false;
    if (op->n_pref > 0 || op->hard_pin) {
        *pref = op->pref;
        *n = op->n_pref;
        *hard = op->hard_pin;
        return;
    }
    const struct kvm_place_entry *e = entry_of(rt, &it->ident);
    if (!e) {
        *pref = NULL;
        *n = 0;
        *hard = false;
        return;
    }
    *pref = e->owners;
    *n = e->n;
    *hard = e->hard;
    *tenant_pin = true;
}

void kvm_place_count(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                     const kvm_runtime_id_t *owner)
{
    const kvm_runtime_id_t *pref;
    size_t n;
    bool hard, tp;
    kvm_place_pref(rt, op, it, &pref, &n, &hard, &tp);
    unsigned res = OBS_PLACE_DEFAULT;
    if (n > 0) {
        res = OBS_PLACE_FALLBACK;
        for (size_t i = 0; i < n; i++)
            if (kvm_id128_equal(&pref[i], owner))
                res = OBS_PLACE_PREFERRED;
    }
    obs_count(rt->metrics, placements_total, res, OBS_NONE, 1);
}

int kvm_place_pin_failed(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                         uint32_t placed, uint32_t want, char *msg, size_t cap)
{
    const kvm_runtime_id_t *pref;
    size_t n;
    bool hard, tp;
    kvm_place_pref(rt, op, it, &pref, &n, &hard, &tp);
    if (!tp || !hard)
        return 0;
    obs_count(rt->metrics, placements_total, OBS_PLACE_PIN_UNSATISFIED, OBS_NONE, 1);
    char owners[KVM_STORE_PLACE_OWNERS_MAX * (KVM_ID128_HEX_LEN + 1) + 1] = "";
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        char hex[KVM_ID128_HEX_LEN + 1];
        kvm_id128_fmt(&pref[i], hex);
        off += (size_t)snprintf(owners + off, sizeof(owners) - off, "%s%s", i ? "+" : "", hex);
    }
    snprintf(msg, cap,
             "tenant '%.*s': hard placement pin cannot be met: %u of %u replicas fit on its "
             "owners %s (full, not live or fewer than the replicas); the put was not applied "
             "(free space there, or make the pin soft in tenant_placement)",
             (int)it->ident.tenant_len, kvm_ident_tenant(&it->ident), placed, want, owners);
    return KVMESH_EUNAVAILABLE;
}

bool kvm_place_primary(kvm_rt_t *rt, const kvm_ident_t *ident, kvm_runtime_t *primary)
{
    return rt->cfg.place_on_primary && rt->route &&
           route_primary_hint(rt->route, ident, primary) == 0;
}
