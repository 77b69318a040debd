/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_device.c — `kvmesh admin devices drain|retire DEVICE [--json]`: the operator lifecycle
 * of a cold device record (cold-devices/<id>, docs/operations.md "Cold devices") through
 * api/kvmesh_tools.h kvmesh_admin_device_lifecycle: one exact read and one revision-compared
 * write. drain: no new placement on the device, its cold copies stay readable; retire: refused
 * while the record holds used or reserved bytes. No runtime joins.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

static void ad_json(const char *action, const kvmesh_admin_device_t *d, bool changed)
{
    printf("{\"id\":");
    admin_json_str(d->id);
    printf(",\"action\":");
    admin_json_str(action);
    printf(",\"changed\":%s,\"lifecycle\":", changed ? "true" : "false");
    admin_json_str(d->lifecycle);
    printf(",\"schedulable\":%s,\"used_bytes\":%" PRIu64 ",\"reserved_bytes\":%" PRIu64 "}\n",
           d->schedulable ? "true" : "false", d->used, d->reserved);
}

int admin_device_action(struct kvmesh_admin *a, const kvmesh_config_t *cfg, const char *action,
                        const char *id, bool json)
{
    kvmesh_admin_device_t d;
    memset(&d, 0, sizeof(d));
    bool changed = false;
    int rc = kvmesh_admin_device_lifecycle(a, id, action, &d, &changed);
    if (rc == KVMESH_ENOENT) {
        fprintf(stderr,
                "kvmesh admin devices %s: no cold device %s in deployment %s (see kvmesh admin "
                "devices)\n",
                action, id, kvmesh_tools_config_str(cfg, "deployment"));
        return CLI_EXIT_ENOENT;
    }
    if (rc) {
        char verb[40];
        snprintf(verb, sizeof(verb), "admin devices %s", action);
        cli_report(verb, rc == KVMESH_EAGAIN ? "refused" : "changing the device record", rc);
        return rc == KVMESH_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    if (json) {
        ad_json(action, &d, changed);
        return CLI_EXIT_OK;
    }
    char used[32];
    kvmesh_tools_format_size(d.used, used, sizeof(used));
    if (!changed)
        printf("cold device %s is already %s; nothing written\n", d.id, d.lifecycle);
    else if (strcmp(action, "drain") == 0)
        printf("cold device %s: draining, unschedulable: no new cold copies are placed on it; "
               "the %s it holds stay readable\n",
               d.id, used);
    else
        printf("cold device %s: retired\n", d.id);
    return CLI_EXIT_OK;
}
