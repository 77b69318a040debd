/* SPDX-License-Identifier: Apache-2.0 */
/*
 * place.h — per-tenant placement preferences (docs/tenancy.md "Soft isolation", configuration
 * field tenant_placement): the owners a tenant's replicas are tried on first, as a soft hint
 * (fall back to the ordinary candidates when they cannot take a replica) or a hard pin (the put
 * fails with KVMESH_EUNAVAILABLE naming the tenant). A request's own preferred_owners/hard_pin
 * take precedence over the tenant's.
 *
 * Every replica placed is counted in kvmesh_placements_total{result}: default (no preference
 * applied), preferred (on a preferred owner), fallback (a soft preference could not be met);
 * pin_unsatisfied counts items a hard pin failed.
 */
#ifndef KVMESH_STORE_PLACE_H
#define KVMESH_STORE_PLACE_H

#include <stdbool.h>
#include <stddef.h>

#include "store/store.h"

/* Parses rt->cfg.tenant_placement into rt->place (NULL when none). Before the loop. */
int kvm_place_open(kvm_rt_t *rt);
void kvm_place_close(kvm_rt_t *rt);

/* The preference for item `it` of `op` [loop]: the request's (op->pref, op->hard_pin), else
 * its tenant's configured one, else none (*n = 0). *tenant_pin: the preference is the tenant's.
 * The returned array is valid until the op completes / the runtime closes. */
void kvm_place_pref(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                    const kvm_runtime_id_t **pref, size_t *n, bool *hard, bool *tenant_pin);

/* A replica of `it` was reserved on `owner` [loop]: counts default/preferred/fallback. */
void kvm_place_count(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                     const kvm_runtime_id_t *owner);

/* The key's shard primary as a placement candidate [loop] (docs/store.md "Placement order"):
 * true with *primary (id and epoch) when place_on_primary is on and this runtime's route client
 * has a valid view of ident's shard (route_primary_hint: EmbeddedWrh only, a read of the
 * cached view, no call and no refresh). Only a hint of where to reserve: whether the owner may
 * publish as the primary is decided by the fenced route CAS wherever the put goes. */
bool kvm_place_primary(kvm_rt_t *rt, const kvm_ident_t *ident, kvm_runtime_t *primary);

/* Placement of `it` failed [loop]: when a tenant's hard pin applied, counts pin_unsatisfied and
 * returns KVMESH_EUNAVAILABLE with a message naming the tenant and its owners (placed = replicas
 * reserved, want = replicas asked); else returns 0 and does nothing. */
int kvm_place_pin_failed(kvm_rt_t *rt, const kvm_op_t *op, const struct kvm_item *it,
                         uint32_t placed, uint32_t want, char *msg, size_t cap);

#endif
