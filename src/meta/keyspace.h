/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyspace.h — the one place that builds and parses metadata keys. Every key of a deployment
 * lives under
 *
 *     kvmesh/v1/<deployment>/<family>[/<part>...]
 *
 * with one family per kind of record (see enum ks_family and docs/metadata.md for the table).
 *
 * Guarantees:
 *   - injective: two different (deployment, family, parts) never give the same key, and parse()
 *     returns exactly the parts a key was built from;
 *   - prefix-closed: the prefix of a family (or of a family's leading parts, e.g. one tenant's
 *     objects) ends with '/', and no key of another family or of another leading part starts with
 *     it — so range() over a prefix never returns foreign keys;
 *   - ordered where order matters: numeric parts are fixed-width lower-case hex (bytewise order =
 *     numeric order), so range() over a due index returns entries in deadline order.
 *
 * Encoding of string parts: bytes [A-Za-z0-9._-] stay; every other byte (including '/', '%',
 * '~' and bytes >= 0x80) becomes %XX (upper-case hex). A part that may be empty (KS_E: the
 * optional domain) encodes "" as "~". Deployment names are 1..KS_DEPLOYMENT_MAX bytes of
 * [A-Za-z0-9._-], not "." or "..", and are not escaped.
 *
 * Ownership: builders write into the caller's buffer (cap bytes including the NUL) and return 0,
 * KVMESH_EINVAL (bad part, with kvmesh_last_error) or KVMESH_ETOOBIG (the key would exceed
 * META_KEY_MAX or cap). Pure functions; any thread.
 */
#ifndef KVMESH_META_KEYSPACE_H
#define KVMESH_META_KEYSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"

#define KS_ROOT           "kvmesh/v1/"
#define KS_DEPLOYMENT_MAX 64
#define KS_MAX_PARTS      4
#define KS_KEY_CAP        (META_KEY_MAX + 1) /* a buffer that fits every key */

/* families; the comment shows the parts after the family name */
enum ks_family {
    KS_MEMBER,         /* members/<runtime-id>                                          */
    KS_CLUSTER_POLICY, /* cluster-policy  (one key, no parts)                           */
    KS_SHARD,          /* shards/<shard u32>                                            */
    KS_TENANT_POLICY,  /* tenant-policies/<tenant>                                      */
    KS_QUOTA,          /* quotas/<tenant>                                               */
    KS_OBJECT,         /* objects/<tenant>/<domain|~>/<object-key>  (accounting rows)  */
    KS_ACCT_OP,        /* acct-ops/<tenant>/<op-id>                                     */
    KS_ACCT_DUE,       /* acct-due/<tenant>/<state>/<deadline-ms u64>/<op-id>          */
    KS_COLD_DEVICE,    /* cold-devices/<device-id>                                      */
    KS_COLD_OP,        /* cold-ops/<cold-op-id>                                         */
    KS_COLD_DUE,       /* cold-due/<state>/<deadline-ms u64>/<cold-op-id>              */
    KS_RECLAIM,        /* cold-reclaims/<reclaim-id>                                    */
    KS_ROUTE,          /* routes/<tenant>/<domain|~>/<object-key>  (MetadataOnly mode) */
    KS_LIFECYCLE,      /* lifecycle/<runtime-id>  (operator's drain request of a member)  */
    KS_ROUTE_DUE,      /* route-due/<retain-until-ms u64>/<tenant>/<domain|~>/<object-key>  */
    KS_ROUTE_FLOOR,    /* route-floors/<shard u32>  (MetadataOnly: purged versions)      */
    KS_FAMILY_COUNT
};

/* One part: s for string parts, u for numeric parts (the family's schema says which). */
typedef struct ks_part {
    const char *s;
    uint64_t u;
} ks_part_t;

/* The decoded form of a key (ks_parse). */
typedef struct ks_parsed {
    char deployment[KS_DEPLOYMENT_MAX + 1];
    enum ks_family family;
    size_t n_parts;
    struct {
        char s[KS_KEY_CAP]; /* decoded string part ("" for numeric parts) */
        uint64_t u;         /* numeric part */
    } parts[KS_MAX_PARTS];
} ks_parsed_t;

const char *ks_family_name(enum ks_family f);
size_t ks_family_parts(enum ks_family f);

int ks_validate_deployment(const char *deployment);

/* A full key: all ks_family_parts(f) parts. */
int ks_key(char *out, size_t cap, const char *deployment, enum ks_family f, const ks_part_t *parts);

/* The prefix of the keys of family f whose first n_lead parts equal parts[0..n_lead) (n_lead <
 * ks_family_parts(f)); ends with '/'. n_lead = 0 is the whole family. */
int ks_prefix(char *out, size_t cap, const char *deployment, enum ks_family f,
              const ks_part_t *parts, size_t n_lead);

/* The prefix of a whole deployment ("kvmesh/v1/<deployment>/"). */
int ks_deployment_prefix(char *out, size_t cap, const char *deployment);

/* Decodes a key built by ks_key (KVMESH_EINVAL for anything else, with a message). */
int ks_parse(const char *key, ks_parsed_t *out);

/* Canonical text of an accounting operation id: the writer runtime's epoch and its sequence,
 * fixed width ("<epoch 16 hex>-<seq 16 hex>", 33 bytes + NUL), so ids sort by (epoch, seq). */
#define KS_OPID_LEN 33
void ks_opid_format(char out[KS_OPID_LEN + 1], uint64_t epoch, uint64_t seq);
int ks_opid_parse(const char *s, uint64_t *epoch, uint64_t *seq);

/* Typed shorthands (all return like ks_key). */
int ks_member_key(char *out, size_t cap, const char *dep, const char *runtime_id);
int ks_lifecycle_key(char *out, size_t cap, const char *dep, const char *runtime_id);
int ks_cluster_policy_key(char *out, size_t cap, const char *dep);
int ks_shard_key(char *out, size_t cap, const char *dep, uint32_t shard);
int ks_tenant_policy_key(char *out, size_t cap, const char *dep, const char *tenant);
int ks_quota_key(char *out, size_t cap, const char *dep, const char *tenant);
int ks_object_key(char *out, size_t cap, const char *dep, const char *tenant, const char *domain,
                  const char *key);
int ks_acct_op_key(char *out, size_t cap, const char *dep, const char *tenant, const char *op_id);
int ks_acct_due_key(char *out, size_t cap, const char *dep, const char *tenant, const char *state,
                    uint64_t deadline_ms, const char *op_id);
/* Prefix of one (tenant, state) due index: range() over it is in deadline order. */
int ks_acct_due_prefix(char *out, size_t cap, const char *dep, const char *tenant,
                       const char *state);
int ks_cold_device_key(char *out, size_t cap, const char *dep, const char *device_id);
int ks_cold_op_key(char *out, size_t cap, const char *dep, const char *cold_op_id);
int ks_cold_due_key(char *out, size_t cap, const char *dep, const char *state, uint64_t deadline_ms,
                    const char *cold_op_id);
/* Prefix of one state's cold due index (deadline order), and of all device records. */
int ks_cold_due_prefix(char *out, size_t cap, const char *dep, const char *state);
int ks_cold_device_prefix(char *out, size_t cap, const char *dep);
int ks_reclaim_key(char *out, size_t cap, const char *dep, const char *reclaim_id);
/* MetadataOnly tombstone purge: the expiry index entry of a finalized tombstone (range() over
 * the family is in retain-until order) and the per-shard version floor of purged routes. */
int ks_route_due_key(char *out, size_t cap, const char *dep, uint64_t retain_until_ms,
                     const char *tenant, const char *domain, const char *key);
int ks_route_floor_key(char *out, size_t cap, const char *dep, uint32_t shard);
int ks_route_key(char *out, size_t cap, const char *dep, const char *tenant, const char *domain,
                 const char *key);

#endif
