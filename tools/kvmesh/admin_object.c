/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_object.c — `kvmesh admin quota TENANT object KEY [--domain D] [--json]`: one object's
 * committed accounting row (objects/<tenant>/<domain|~>/<key>, docs/tenancy.md) read by one
 * exact metadata read (api/kvmesh_tools.h kvmesh_admin_objrow_get): live, committed length,
 * accounting version, the route version and operation of the last finalized change, and the
 * non-terminal quota operation that holds the object, if any. Reads only; no runtime joins.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

static void ao_json(const char *tenant, const char *domain, const char *key,
                    const kvmesh_admin_objrow_t *r)
{
    printf("{\"tenant\":");
    admin_json_str(tenant);
    printf(",\"domain\":");
    admin_json_str(domain);
    printf(",\"key\":");
    admin_json_str(key);
    printf(",\"mod_rev\":%" PRId64 ",\"malformed\":%s", r->mod_rev,
           r->malformed ? "true" : "false");
    if (!r->malformed) {
        printf(",\"live\":%s,\"length\":%" PRIu64 ",\"acct_version\":%" PRIu64
               ",\"route_version\":{\"fencing_token\":%" PRIu64 ",\"primary_sequence\":%" PRIu64
               "},\"last_op\":",
               r->live ? "true" : "false", r->len, r->acct_version, r->fencing_token,
               r->primary_sequence);
        admin_json_str(r->last_op);
        printf(",\"lock_op\":");
        if (r->lock_op[0])
            admin_json_str(r->lock_op);
        else
            printf("null");
    }
    printf("}\n");
}

static void ao_table(const char *tenant, const char *domain, const char *key,
                     const kvmesh_admin_objrow_t *r)
{
    printf("%-14s %s\n%-14s %s\n%-14s %s\n%-14s %" PRId64 "\n", "tenant", tenant, "domain",
           domain[0] ? domain : "(none)", "key", key, "revision", r->mod_rev);
    if (r->malformed) {
        printf("%-14s %s\n", "row", "MALFORMED (does not decode)");
        return;
    }
    printf("%-14s %s\n%-14s %" PRIu64 "\n%-14s %" PRIu64 "\n%-14s %" PRIu64 ".%" PRIu64
           "\n%-14s %s\n%-14s %s\n",
           "live", r->live ? "yes" : "no", "length", r->len, "acct version", r->acct_version,
           "route version", r->fencing_token, r->primary_sequence, "last op",
           r->last_op[0] ? r->last_op : "-", "lock op",
           r->lock_op[0] ? r->lock_op : "- (unlocked)");
    if (r->lock_op[0])
        printf("the object is held by a non-terminal quota operation (see kvmesh admin quota "
               "%s)\n",
               tenant);
}

int admin_quota_object(struct kvmesh_admin *a, const kvmesh_config_t *cfg, const char *tenant,
                       const char *domain, const char *key, bool json)
{
    kvmesh_admin_objrow_t r;
    bool found = false;
    const char *d = domain ? domain : "";
    int rc = kvmesh_admin_objrow_get(a, tenant, d, key, &r, &found);
    if (rc) {
        cli_report("admin quota object",
                   rc == KVMESH_EINVAL ? "bad argument" : "reading the accounting row", rc);
        return rc == KVMESH_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    if (!found) {
        fprintf(stderr,
                "kvmesh admin quota object: no accounting row for key \"%s\"%s%s%s of tenant "
                "\"%s\" in deployment %s (never written under the tenant's policy, or another "
                "domain; give --domain)\n",
                key, d[0] ? " in domain \"" : "", d, d[0] ? "\"" : "", tenant,
                kvmesh_tools_config_str(cfg, "deployment"));
        return CLI_EXIT_ENOENT;
    }
    if (json)
        ao_json(tenant, d, key, &r);
    else
        ao_table(tenant, d, key, &r);
    return r.malformed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
