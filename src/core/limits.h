/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limits.h — every bound of the core model, as named constants. Other modules size their
 * tables, buffers and validation on these; docs/core-model.md has the same table. Changing a
 * value that travels on the wire or in durable records needs a schema version bump (wire.h).
 */
#ifndef KVMESH_CORE_LIMITS_H
#define KVMESH_CORE_LIMITS_H

/* Object identity (ident.h). Lengths are in bytes. */
#define KVM_TENANT_MAX_LEN 64   /* tenant id: 1..64 bytes of [A-Za-z0-9_.-], first alnum */
#define KVM_DOMAIN_MAX_LEN 64   /* domain: absent, or 1..64 bytes, same alphabet as tenant */
#define KVM_KEY_MAX_LEN    1024 /* key: 1..1024 bytes, no byte < 0x20 and no 0x7f */

/* Canonical identity encoding: version byte, tenant len byte, tenant, domain len byte, domain,
 * key len (2 bytes, big-endian), key. */
#define KVM_IDENT_ENC_VERSION 1
#define KVM_IDENT_ENC_MAX_LEN                                                                      \
    (1 + 1 + KVM_TENANT_MAX_LEN + 1 + KVM_DOMAIN_MAX_LEN + 2 + KVM_KEY_MAX_LEN)

/* Logical route shards: a deployment setting in [1, KVM_MAX_LOGICAL_SHARDS]. */
#define KVM_MAX_LOGICAL_SHARDS (1u << 20)

/* Route record (route.h). */
#define KVM_MAX_REPLICAS         8   /* hot replicas per route */
#define KVM_COLD_LOCATOR_MAX_LEN 256 /* opaque backend object locator */

/* Weighted rendezvous hashing (wrh.h): the largest k a top-k call may ask for. */
#define WRH_MAX_K 32

/* Route batch messages (route_msg.h RMSG_BATCH): the most messages one batch carries to one
 * peer (a batch of more items to one shard primary travels as several). */
#define KVM_ROUTE_BATCH_MAX 128

/* Wire records (wire.h): the largest encoded record any decoder accepts. */
#define KVM_WIRE_MAX_RECORD_LEN 8192

#endif
