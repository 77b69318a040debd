/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_policy.c — `kvmesh admin policy set TENANT field=value... [--apply] [--json]`: a tenant
 * hard policy changed through the controlled restart of the specification ("Policy bootstrap";
 * docs/operations.md "Changing a tenant policy"). A dry run prints the stored record, the new
 * one (policy_version + 1, its fingerprint), the fields that change, the tenant_policies entry
 * the restarted runtimes must be given and the live runtimes; --apply writes the new record
 * (api/kvmesh_tools.h kvmesh_admin_policy_apply: refused while a runtime of the deployment is
 * live, a compare on the revisions read). Validation and fingerprint are the bootstrap's own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define AP_LIVE_SHOWN 16 /* live runtime ids printed (the count is exact) */

static void ap_record_json(uint32_t schema, uint32_t version, uint64_t mb, uint64_t mo, uint64_t fp)
{
    printf("{\"schema_version\":%u,\"policy_version\":%u,\"max_bytes\":%" PRIu64
           ",\"max_objects\":%" PRIu64 ",\"fingerprint\":\"%016" PRIx64 "\"}",
           schema, version, mb, mo, fp);
}

static void ap_json(const kvmesh_admin_policy_plan_t *p, bool apply, bool applied,
                    char (*live)[KVMESH_ID_HEX_LEN + 1], size_t n_live)
{
    const kvmesh_admin_tenant_t *s = &p->stored;
    printf("{\"tenant\":");
    admin_json_str(s->tenant);
    printf(",\"apply\":%s,\"applied\":%s,\"stored\":", apply ? "true" : "false",
           applied ? "true" : "false");
    ap_record_json(s->schema_version, s->policy_version, s->max_bytes, s->max_objects,
                   s->fingerprint);
    printf(",\"new\":");
    ap_record_json(p->schema_version, p->policy_version, p->max_bytes, p->max_objects,
                   p->fingerprint);
    printf(
        ",\"changed\":[%s%s%s]", p->changed & KVMESH_ADMIN_POLICY_MAX_BYTES ? "\"max_bytes\"" : "",
        p->changed == (KVMESH_ADMIN_POLICY_MAX_BYTES | KVMESH_ADMIN_POLICY_MAX_OBJECTS) ? "," : "",
        p->changed & KVMESH_ADMIN_POLICY_MAX_OBJECTS ? "\"max_objects\"" : "");
    printf(",\"usage\":{\"used_bytes\":%" PRIu64 ",\"used_objects\":%" PRIu64 "}",
           s->committed_bytes + s->pending_bytes, s->committed_objects + s->pending_objects);
    printf(",\"config_entry\":");
    admin_json_str(p->config_entry);
    printf(",\"live_runtimes\":%zu,\"live\":[", n_live);
    for (size_t i = 0; i < n_live && i < AP_LIVE_SHOWN; i++) {
        printf("%s", i ? "," : "");
        admin_json_str(live[i]);
    }
    printf("]}\n");
}

static void ap_row(const char *field, const char *stored, const char *next, bool changed)
{
    printf("  %-15s %-20s %-20s%s\n", field, stored, next, changed ? "  changes" : "");
}

static void ap_table(const kvmesh_admin_policy_plan_t *p, char (*live)[KVMESH_ID_HEX_LEN + 1],
                     size_t n_live)
{
    const kvmesh_admin_tenant_t *s = &p->stored;
    char a[40], b[40];
    printf("policy set %s: dry run (nothing is written; --apply writes the new record)\n",
           s->tenant);
    ap_row("", "stored", "new", false);
    snprintf(a, sizeof(a), "%u", s->schema_version);
    snprintf(b, sizeof(b), "%u", p->schema_version);
    ap_row("schema_version", a, b, false);
    snprintf(a, sizeof(a), "%u", s->policy_version);
    snprintf(b, sizeof(b), "%u", p->policy_version);
    ap_row("policy_version", a, b, p->changed != 0);
    kvmesh_tools_format_size(s->max_bytes, a, sizeof(a));
    kvmesh_tools_format_size(p->max_bytes, b, sizeof(b));
    ap_row("max_bytes", a, b, p->changed & KVMESH_ADMIN_POLICY_MAX_BYTES);
    snprintf(a, sizeof(a), "%" PRIu64, s->max_objects);
    snprintf(b, sizeof(b), "%" PRIu64, p->max_objects);
    ap_row("max_objects", a, b, p->changed & KVMESH_ADMIN_POLICY_MAX_OBJECTS);
    snprintf(a, sizeof(a), "%016" PRIx64, s->fingerprint);
    snprintf(b, sizeof(b), "%016" PRIx64, p->fingerprint);
    ap_row("fingerprint", a, b, p->changed != 0);
    printf("usage: %" PRIu64 " bytes, %" PRIu64 " objects (committed + pending)\n",
           s->committed_bytes + s->pending_bytes, s->committed_objects + s->pending_objects);
    if (!p->changed) {
        printf("no change: the stored policy already has these values\n");
        return;
    }
    printf("tenant_policies entry after the restart: %s\n", p->config_entry);
    if (n_live == 0) {
        printf("no runtime of the deployment is live: --apply can write it now\n");
        return;
    }
    printf("%zu live runtime(s); --apply is refused until every one is stopped:\n", n_live);
    for (size_t i = 0; i < n_live && i < AP_LIVE_SHOWN; i++)
        printf("  %s\n", live[i]);
    if (n_live > AP_LIVE_SHOWN)
        printf("  ... and %zu more\n", n_live - AP_LIVE_SHOWN);
}

int admin_policy_set(kvmesh_admin_t *a, const kvmesh_config_t *cfg, const char *tenant,
                     const char *const *assign, size_t n, bool apply, bool json)
{
    const char *dep = kvmesh_tools_config_str(cfg, "deployment");
    kvmesh_admin_policy_plan_t plan;
    bool found = false;
    int rc = kvmesh_admin_policy_plan(a, tenant, assign, n, &plan, &found);
    if (rc == KVMESH_EINVAL || rc == KVMESH_ERANGE) {
        fprintf(stderr, "kvmesh admin policy set: %s\n", kvmesh_last_error());
        return CLI_EXIT_USAGE;
    }
    if (rc) {
        cli_report("admin", "policy set", rc);
        return CLI_EXIT_FAIL;
    }
    if (!found) {
        fprintf(stderr,
                "kvmesh admin policy set: tenant \"%s\" has no policy in deployment %s: a new "
                "tenant's policy is created by the first runtime configured with it "
                "(tenant_policies), not here\n",
                tenant, dep);
        return CLI_EXIT_ENOENT;
    }
    char live[AP_LIVE_SHOWN][KVMESH_ID_HEX_LEN + 1];
    size_t n_live = 0;
    if ((rc = kvmesh_admin_live_members(a, live, AP_LIVE_SHOWN, &n_live)) != 0) {
        cli_report("admin", "reading member records", rc);
        return CLI_EXIT_FAIL;
    }
    if (!apply || !plan.changed) {
        if (json)
            ap_json(&plan, apply, false, live, n_live);
        else
            ap_table(&plan, live, n_live);
        return CLI_EXIT_OK;
    }
    if (n_live) {
        fprintf(stderr,
                "kvmesh admin policy set: refused: %zu runtime(s) of deployment %s are live "
                "and a hard policy changes only while no runtime serves the tenant (the "
                "controlled restart):\n",
                n_live, dep);
        for (size_t i = 0; i < n_live && i < AP_LIVE_SHOWN; i++)
            fprintf(stderr, "  %s\n", live[i]);
        fprintf(stderr,
                "stop every runtime of the deployment (kvmesh admin members lists them), run "
                "this again with --apply, then restart them with tenant_policies entry %s\n",
                plan.config_entry);
        return CLI_EXIT_FAIL;
    }
    rc = kvmesh_admin_policy_apply(a, &plan);
    if (rc) {
        fprintf(stderr, "kvmesh admin policy set: %s: %s\n", kvmesh_strerror(rc),
                kvmesh_last_error());
        return CLI_EXIT_FAIL;
    }
    if (json) {
        ap_json(&plan, true, true, live, 0);
    } else {
        printf("policy set %s: written policy_version %u (max_bytes %" PRIu64
               ", max_objects %" PRIu64 ", fingerprint %016" PRIx64 ")\n",
               tenant, plan.policy_version, plan.max_bytes, plan.max_objects, plan.fingerprint);
        printf("restart the runtimes with tenant_policies entry %s; one still configured with "
               "the old entry is refused at startup naming the field that differs\n",
               plan.config_entry);
    }
    return CLI_EXIT_OK;
}
