/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_test.h — test-only hooks of the route service (simulator scenarios and unit tests;
 * never used by the runtime):
 *   route_test_set_bugs    switch on a deliberately broken variant (enum route_bug in
 *                          route_int.h: ROUTE_BUG_SECONDARY_CAS = 1, ROUTE_BUG_SKIP_TRANSFER = 2,
 *                          ROUTE_BUG_STRAND_LOST = 4, ROUTE_BUG_BATCH_ONE_RESULT = 8,
 *                          ROUTE_BUG_PURGE_NO_REPAIR = 16, ROUTE_BUG_PURGE_DIRTY = 32)
 *                          so that tests prove the history checker can fail;
 *   route_test_is_primary  whether this runtime is the serving fenced primary of a shard;
 *   route_test_plant       writes a route straight into this authority's table (to create a
 *                          protocol conflict: equal version, different value);
 *   route_test_local       this runtime's own copy of a key, read straight from its table
 *                          (checks that every authority agrees, whatever a lookup returns);
 *   route_test_check       the service's invariants (route tables, fencing), for the
 *                          simulator's per-step check; 0 or KVMESH_ECORRUPT with a message.
 */
#ifndef KVMESH_ROUTE_ROUTE_TEST_H
#define KVMESH_ROUTE_ROUTE_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "route/route.h"

#define ROUTE_TEST_BUG_SECONDARY_CAS    1u
#define ROUTE_TEST_BUG_SKIP_TRANSFER    2u
#define ROUTE_TEST_BUG_STRAND_LOST      4u /* the shard stays TRANSFERRING when its state is lost */
#define ROUTE_TEST_BUG_BATCH_ONE_RESULT 8u /* route_batch.c: per-item results not kept */
#define ROUTE_TEST_BUG_PURGE_NO_REPAIR  16u /* purge_tick: a dirty tombstone never repaired */
#define ROUTE_TEST_BUG_PURGE_DIRTY      32u /* purge_tick: a dirty tombstone purged unrepaired */

void route_test_set_bugs(route_svc_t *svc, unsigned bugs);
bool route_test_is_primary(route_svc_t *svc, uint32_t shard, uint64_t *token);
int route_test_plant(route_svc_t *svc, const kvm_route_t *r);
/* Changes this authority's copy of ident in place: same version, a different value (content op
 * seq + 10^9, another checksum for a live route). KVMESH_ENOENT when it holds no copy. */
int route_test_corrupt(route_svc_t *svc, const kvm_ident_t *ident);
/* This runtime's own copy of ident (whatever its role: no read lease checked), copied into *out
 * (the caller frees it with kvm_route_free), and the token this runtime is installed at for the
 * key's shard in *token (0 when not installed). KVMESH_ENOENT when it holds no copy. */
int route_test_local(route_svc_t *svc, const kvm_ident_t *ident, kvm_route_t *out, uint64_t *token);
int route_test_check(route_svc_t *svc);
/* Prints each shard's authority state (for failing simulator seeds in verbose mode). */
void route_test_dump(route_svc_t *svc, FILE *out);

#endif
