/* SPDX-License-Identifier: Apache-2.0 */
/*
 * upgrade.h — the API layer's internal half of the hot upgrade (src/api/upgrade.c implements
 * the kvmesh_upgrade_* calls of kvmesh_tools.h over src/store/handoff.h).
 */
#ifndef KVMESH_API_UPGRADE_H
#define KVMESH_API_UPGRADE_H

#include "kvmesh.h"

struct kvm_handoff;
/* kvmesh_open, over the segments and slots of h when h is not NULL (kvmesh.c). */
int kvm_api_open(kvmesh_t **out, const kvmesh_config_t *cfg, struct kvm_handoff *h);

#endif
