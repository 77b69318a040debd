/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_dispatch.c — the route.h entry points. This version serves ROUTE_MODE_METADATA_ONLY
 * only (route_metaonly.c) and refuses EmbeddedWrh with KVMESH_ENOTSUP; at integration it is
 * replaced by a dispatcher that chooses between the EmbeddedWrh mesh and MetadataOnly by
 * policy.mode. Owns nothing but the pointer to the chosen implementation.
 */
#include <stdlib.h>

#include "core/util.h"
#include "route/route.h"
#include "route/route_metaonly.h"

struct route_svc {
    route_mo_t *mo;
};

int route_svc_new(route_svc_t **out, const route_svc_opts_t *opts, void (*cb)(void *, int),
                  void *arg)
{
    *out = NULL;
    if (opts->policy.mode != ROUTE_MODE_METADATA_ONLY)
        return kvm_errf(KVMESH_ENOTSUP, "route_mode EmbeddedWrh is not available in this build; "
                                        "set route_mode to metadata_only");
    route_svc_t *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return KVMESH_ENOMEM;
    int rc = route_mo_new(&svc->mo, opts, cb, arg);
    if (rc) {
        free(svc);
        return rc;
    }
    *out = svc;
    return 0;
}

void route_svc_free(route_svc_t *svc)
{
    if (!svc)
        return;
    route_mo_free(svc->mo);
    free(svc);
}

void route_set_members(route_svc_t *svc, uint64_t generation, const route_member_t *members,
                       size_t n)
{
    route_mo_set_members(svc->mo, generation, members, n);
}

void route_on_message(route_svc_t *svc, const env_msg_t *msg)
{
    route_mo_on_message(svc->mo, msg);
}

int route_lookup(route_svc_t *svc, const kvm_ident_t *ident, route_lookup_cb cb, void *arg)
{
    return route_mo_lookup(svc->mo, ident, cb, arg);
}

int route_cas(route_svc_t *svc, const kvm_route_version_t *expected, const kvm_route_t *next,
              route_cas_cb cb, void *arg)
{
    return route_mo_cas(svc->mo, expected, next, cb, arg);
}

int route_owner_scan(route_svc_t *svc, const kvm_runtime_id_t *owner, const uint8_t *cursor,
                     size_t cursor_len, uint32_t limit, route_owner_cb cb, void *arg)
{
    return route_mo_owner_scan(svc->mo, owner, cursor, cursor_len, limit, cb, arg);
}

void route_get_stats(const route_svc_t *svc, route_stats_t *out)
{
    route_mo_get_stats(svc->mo, out);
}
