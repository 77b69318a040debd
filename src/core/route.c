/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route.c — the route record, the active cold backing tagged union and the cold reclaim record
 * (route.h): construction, equality, replica list edits, tombstone and reclaim transitions, and
 * kvm_route_validate, the single statement of the route invariants (the wire decoder and the
 * route authority both call it).
 */
#include <inttypes.h>
#include <string.h>

#include "core/hash.h"
#include "core/route.h"
#include "core/bytes.h"
#include "core/util.h"

bool kvm_hot_replica_equal(const kvm_hot_replica_t *a, const kvm_hot_replica_t *b)
{
    return kvm_id128_equal(&a->owner, &b->owner) && a->segment == b->segment &&
           a->offset == b->offset && a->length == b->length && a->checksum == b->checksum;
}

bool kvm_hot_replica_same_slot(const kvm_hot_replica_t *a, const kvm_hot_replica_t *b)
{
    return kvm_id128_equal(&a->owner, &b->owner) && a->segment == b->segment &&
           a->offset == b->offset;
}

const char *kvm_cold_kind_name(kvm_cold_kind_t k)
{
    switch (k) {
    case KVM_COLD_NONE:
        return "none";
    case KVM_COLD_PENDING_OFFLOAD:
        return "pending_offload";
    case KVM_COLD_MATERIALIZED:
        return "materialized";
    }
    return "invalid";
}

bool kvm_cold_backing_equal(const kvm_cold_backing_t *a, const kvm_cold_backing_t *b)
{
    if (a->kind != b->kind)
        return false;
    if (a->kind == KVM_COLD_NONE)
        return true;
    if (!kvm_op_id_equal(&a->cold_op, &b->cold_op) ||
        !kvm_op_id_equal(&a->content_op, &b->content_op) ||
        !kvm_id128_equal(&a->owner, &b->owner) || !kvm_id128_equal(&a->tier, &b->tier))
        return false;
    if (a->kind == KVM_COLD_PENDING_OFFLOAD)
        return a->u.pending.expected_length == b->u.pending.expected_length &&
               a->u.pending.expected_checksum == b->u.pending.expected_checksum;
    return a->u.mat.length == b->u.mat.length && a->u.mat.checksum == b->u.mat.checksum &&
           a->u.mat.locator_len == b->u.mat.locator_len &&
           memcmp(a->u.mat.locator, b->u.mat.locator, a->u.mat.locator_len) == 0;
}

void kvm_cold_backing_pending(kvm_cold_backing_t *out, const kvm_op_id_t *cold_op,
                              const kvm_op_id_t *content_op, const kvm_runtime_id_t *owner,
                              const kvm_tier_id_t *tier, uint64_t expected_length,
                              uint64_t expected_checksum)
{
    memset(out, 0, sizeof(*out));
    out->kind = KVM_COLD_PENDING_OFFLOAD;
    out->cold_op = *cold_op;
    out->content_op = *content_op;
    out->owner = *owner;
    out->tier = *tier;
    out->u.pending.expected_length = expected_length;
    out->u.pending.expected_checksum = expected_checksum;
}

int kvm_cold_backing_materialize(kvm_cold_backing_t *b, const void *locator, size_t locator_len,
                                 uint64_t length, uint64_t checksum)
{
    if (b->kind != KVM_COLD_PENDING_OFFLOAD)
        return kvm_errf(KVMESH_EINVAL, "cold backing is %s; only pending_offload can materialize",
                        kvm_cold_kind_name(b->kind));
    if (!locator || locator_len == 0 || locator_len > KVM_COLD_LOCATOR_MAX_LEN)
        return kvm_errf(KVMESH_EINVAL, "cold locator is %zu bytes; it must be 1..%d", locator_len,
                        KVM_COLD_LOCATOR_MAX_LEN);
    if (length != b->u.pending.expected_length || checksum != b->u.pending.expected_checksum)
        return kvm_errf(
            KVMESH_EINVAL,
            "materialized payload (length %" PRIu64 ", checksum %016" PRIx64
            ") does not match the pending offload (length %" PRIu64 ", checksum %016" PRIx64 ")",
            length, checksum, b->u.pending.expected_length, b->u.pending.expected_checksum);
    kvm_cold_backing_t m = *b;
    memset(&m.u, 0, sizeof(m.u));
    m.kind = KVM_COLD_MATERIALIZED;
    m.u.mat.length = length;
    m.u.mat.checksum = checksum;
    m.u.mat.locator_len = (uint16_t)locator_len;
    memcpy(m.u.mat.locator, locator, locator_len);
    *b = m;
    return 0;
}

uint64_t kvm_cold_backing_fingerprint(const kvm_cold_backing_t *b)
{
    KVM_ASSERT(b->kind == KVM_COLD_MATERIALIZED);
    uint8_t buf[KVM_ID128_LEN * 2 + 16 + 16 + 2 + KVM_COLD_LOCATOR_MAX_LEN];
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, sizeof(buf));
    kvm_wr_bytes(&w, b->tier.b, KVM_ID128_LEN);
    kvm_wr_bytes(&w, b->cold_op.writer.b, KVM_ID128_LEN);
    kvm_wr_u64le(&w, b->cold_op.epoch);
    kvm_wr_u64le(&w, b->cold_op.seq);
    kvm_wr_u64le(&w, b->u.mat.length);
    kvm_wr_u64le(&w, b->u.mat.checksum);
    kvm_wr_u16be(&w, b->u.mat.locator_len);
    kvm_wr_bytes(&w, b->u.mat.locator, b->u.mat.locator_len);
    size_t p = 0;
    int rc = kvm_wr_finish(&w, &p);
    KVM_ASSERT(rc == 0);
    return XXH3_64bits(buf, p);
}

const char *kvm_tomb_state_name(kvm_tomb_state_t s)
{
    switch (s) {
    case KVM_TOMB_NONE:
        return "live";
    case KVM_TOMB_PENDING:
        return "tomb_pending";
    case KVM_TOMB_FINALIZED:
        return "tomb_finalized";
    }
    return "invalid";
}

bool kvm_route_tomb_transition_ok(kvm_tomb_state_t from, kvm_tomb_state_t to)
{
    switch (from) {
    case KVM_TOMB_NONE:
        return to == KVM_TOMB_NONE || to == KVM_TOMB_PENDING;
    case KVM_TOMB_PENDING:
        return to == KVM_TOMB_FINALIZED || to == KVM_TOMB_NONE;
    case KVM_TOMB_FINALIZED:
        return to == KVM_TOMB_NONE;
    }
    return false;
}

void kvm_route_init(kvm_route_t *r)
{
    memset(r, 0, sizeof(*r));
}

void kvm_route_init_sparse(kvm_route_t *r)
{
    /* (the cold backing is the record's last member, after the replica slots) */
    KVM_STATIC_ASSERT(offsetof(kvm_route_t, cold) > offsetof(kvm_route_t, replicas),
                      "kvm_route_t: replicas before cold");
    memset(r, 0, offsetof(kvm_route_t, replicas));
    memset(&r->cold, 0, offsetof(kvm_cold_backing_t, u.mat.locator));
}

void kvm_route_free(kvm_route_t *r)
{
    kvm_ident_free(&r->ident);
    memset(r, 0, sizeof(*r));
}

int kvm_route_copy(kvm_route_t *dst, const kvm_route_t *src)
{
    KVM_ASSERT(dst->ident.enc == NULL);
    kvm_route_t tmp = *src;
    int rc = kvm_ident_copy(&tmp.ident, &src->ident);
    if (rc)
        return rc;
    *dst = tmp;
    return 0;
}

bool kvm_route_equal(const kvm_route_t *a, const kvm_route_t *b)
{
    if (!kvm_ident_equal(&a->ident, &b->ident) ||
        !kvm_route_version_equal(&a->version, &b->version) ||
        !kvm_route_version_equal(&a->predecessor_version, &b->predecessor_version) ||
        !kvm_op_id_equal(&a->content_op, &b->content_op) ||
        !kvm_op_id_equal(&a->predecessor_op, &b->predecessor_op) || a->length != b->length ||
        a->checksum != b->checksum || a->tomb != b->tomb ||
        a->retain_until_ms != b->retain_until_ms || a->n_replicas != b->n_replicas)
        return false;
    for (uint32_t i = 0; i < a->n_replicas && i < KVM_MAX_REPLICAS; i++)
        if (!kvm_hot_replica_equal(&a->replicas[i], &b->replicas[i]))
            return false;
    return kvm_cold_backing_equal(&a->cold, &b->cold);
}

static int validate_cold(const kvm_route_t *r)
{
    const kvm_cold_backing_t *c = &r->cold;
    if (c->kind == KVM_COLD_NONE)
        return 0;
    if (c->kind != KVM_COLD_PENDING_OFFLOAD && c->kind != KVM_COLD_MATERIALIZED)
        return kvm_errf(KVMESH_ECORRUPT, "route: unknown cold backing kind %d", (int)c->kind);
    if (!kvm_op_id_is_valid(&c->cold_op))
        return kvm_errf(KVMESH_ECORRUPT, "route: cold backing has an invalid cold operation id");
    if (kvm_op_id_equal(&c->cold_op, &r->content_op))
        return kvm_errf(KVMESH_ECORRUPT, "route: cold operation id equals the content op id");
    if (!kvm_op_id_equal(&c->content_op, &r->content_op))
        return kvm_errf(KVMESH_ECORRUPT,
                        "route: cold backing belongs to another content operation");
    if (kvm_id128_is_nil(&c->owner) || kvm_id128_is_nil(&c->tier))
        return kvm_errf(KVMESH_ECORRUPT, "route: cold backing owner or tier id is nil");
    if (c->kind == KVM_COLD_PENDING_OFFLOAD) {
        if (c->u.pending.expected_length != r->length ||
            c->u.pending.expected_checksum != r->checksum)
            return kvm_errf(KVMESH_ECORRUPT,
                            "route: pending offload expects another length or checksum");
        if (r->n_replicas == 0)
            return kvm_errf(KVMESH_ECORRUPT,
                            "route: pending offload without a hot replica to offload from");
        return 0;
    }
    if (c->u.mat.locator_len == 0 || c->u.mat.locator_len > KVM_COLD_LOCATOR_MAX_LEN)
        return kvm_errf(KVMESH_ECORRUPT, "route: cold locator is %u bytes; must be 1..%d",
                        c->u.mat.locator_len, KVM_COLD_LOCATOR_MAX_LEN);
    if (c->u.mat.length != r->length || c->u.mat.checksum != r->checksum)
        return kvm_errf(KVMESH_ECORRUPT,
                        "route: materialized backing has another length or checksum");
    return 0;
}

int kvm_route_validate(const kvm_route_t *r)
{
    if (!r->ident.enc)
        return kvm_errf(KVMESH_ECORRUPT, "route: missing object identity");
    if (kvm_route_version_is_none(&r->version))
        return kvm_errf(KVMESH_ECORRUPT, "route: version is none");
    if (kvm_route_version_cmp(&r->predecessor_version, &r->version) >= 0)
        return kvm_errf(KVMESH_ECORRUPT,
                        "route: predecessor version (%" PRIu64 ",%" PRIu64
                        ") is not older than the version (%" PRIu64 ",%" PRIu64 ")",
                        r->predecessor_version.fencing_token,
                        r->predecessor_version.primary_sequence, r->version.fencing_token,
                        r->version.primary_sequence);
    if (!kvm_op_id_is_valid(&r->content_op))
        return kvm_errf(KVMESH_ECORRUPT, "route: invalid content operation id");
    if (!kvm_op_id_is_nil(&r->predecessor_op)) {
        if (!kvm_op_id_is_valid(&r->predecessor_op))
            return kvm_errf(KVMESH_ECORRUPT, "route: invalid predecessor operation id");
        if (kvm_op_id_equal(&r->predecessor_op, &r->content_op))
            return kvm_errf(KVMESH_ECORRUPT, "route: predecessor op id equals the content op id");
    }
    if (r->n_replicas > KVM_MAX_REPLICAS)
        return kvm_errf(KVMESH_ECORRUPT, "route: %u hot replicas; the maximum is %d", r->n_replicas,
                        KVM_MAX_REPLICAS);
    for (uint32_t i = 0; i < r->n_replicas; i++) {
        const kvm_hot_replica_t *rep = &r->replicas[i];
        if (kvm_id128_is_nil(&rep->owner))
            return kvm_errf(KVMESH_ECORRUPT, "route: replica %u has a nil owner", i);
        if (rep->length != r->length || rep->checksum != r->checksum)
            return kvm_errf(KVMESH_ECORRUPT,
                            "route: replica %u length/checksum differ from the object's", i);
        if (rep->offset > UINT64_MAX - rep->length)
            return kvm_errf(KVMESH_ECORRUPT, "route: replica %u offset + length overflows", i);
        for (uint32_t j = 0; j < i; j++)
            if (kvm_hot_replica_same_slot(rep, &r->replicas[j]))
                return kvm_errf(KVMESH_ECORRUPT, "route: replicas %u and %u share a slot", j, i);
    }
    switch (r->tomb) {
    case KVM_TOMB_NONE:
        if (r->retain_until_ms != 0)
            return kvm_errf(KVMESH_ECORRUPT, "route: live route with a retention deadline");
        if (r->n_replicas == 0 && r->cold.kind != KVM_COLD_MATERIALIZED)
            return kvm_errf(KVMESH_ECORRUPT,
                            "route: live route without a hot replica or materialized backing");
        return validate_cold(r);
    case KVM_TOMB_PENDING:
    case KVM_TOMB_FINALIZED:
        if (r->n_replicas != 0 || r->cold.kind != KVM_COLD_NONE)
            return kvm_errf(KVMESH_ECORRUPT, "route: tombstone references replicas or cold data");
        if (r->length != 0 || r->checksum != 0)
            return kvm_errf(KVMESH_ECORRUPT, "route: tombstone with a length or checksum");
        if (r->tomb == KVM_TOMB_FINALIZED && r->retain_until_ms == 0)
            return kvm_errf(KVMESH_ECORRUPT, "route: %s tombstone must have a retention deadline",
                            kvm_tomb_state_name(r->tomb));
        return 0; /* a PENDING one's deadline (0: none) is when its purge may start */
    }
    return kvm_errf(KVMESH_ECORRUPT, "route: unknown tombstone state %d", (int)r->tomb);
}

int kvm_route_find_replica(const kvm_route_t *r, const kvm_hot_replica_t *rep)
{
    for (uint32_t i = 0; i < r->n_replicas && i < KVM_MAX_REPLICAS; i++)
        if (kvm_hot_replica_same_slot(&r->replicas[i], rep))
            return (int)i;
    return -1;
}

int kvm_route_add_replica(kvm_route_t *r, const kvm_hot_replica_t *rep)
{
    if (kvm_route_find_replica(r, rep) >= 0)
        return kvm_errf(KVMESH_EEXIST, "route already lists a replica in that slot");
    if (r->n_replicas >= KVM_MAX_REPLICAS)
        return kvm_errf(KVMESH_ENOSPC, "route already has %d hot replicas (the maximum)",
                        KVM_MAX_REPLICAS);
    r->replicas[r->n_replicas++] = *rep;
    return 0;
}

int kvm_route_remove_replica(kvm_route_t *r, const kvm_hot_replica_t *rep)
{
    int i = kvm_route_find_replica(r, rep);
    if (i < 0)
        return kvm_errf(KVMESH_ENOENT, "route lists no replica in that slot");
    memmove(&r->replicas[i], &r->replicas[i + 1],
            (r->n_replicas - (uint32_t)i - 1) * sizeof(r->replicas[0]));
    r->n_replicas--;
    memset(&r->replicas[r->n_replicas], 0, sizeof(r->replicas[0]));
    return 0;
}

const char *kvm_reclaim_state_name(kvm_reclaim_state_t s)
{
    switch (s) {
    case KVM_RECLAIM_PLANNED:
        return "planned";
    case KVM_RECLAIM_BACKEND_DELETED:
        return "backend_deleted";
    case KVM_RECLAIM_USAGE_RELEASED:
        return "usage_released";
    }
    return "invalid";
}

bool kvm_reclaim_transition_ok(kvm_reclaim_state_t from, kvm_reclaim_state_t to)
{
    return (from == KVM_RECLAIM_PLANNED && to == KVM_RECLAIM_BACKEND_DELETED) ||
           (from == KVM_RECLAIM_BACKEND_DELETED && to == KVM_RECLAIM_USAGE_RELEASED);
}

void kvm_cold_reclaim_set_state(kvm_cold_reclaim_t *rec, kvm_reclaim_state_t to)
{
    KVM_ASSERT(kvm_reclaim_transition_ok(rec->state, to));
    rec->state = to;
}

void kvm_cold_reclaim_plan(kvm_cold_reclaim_t *out, const kvm_op_id_t *reclaim_op,
                           const kvm_cold_backing_t *m)
{
    KVM_ASSERT(m->kind == KVM_COLD_MATERIALIZED);
    memset(out, 0, sizeof(*out));
    out->reclaim_op = *reclaim_op;
    out->content_op = m->content_op;
    out->cold_op = m->cold_op;
    out->tier = m->tier;
    out->locator_len = m->u.mat.locator_len;
    memcpy(out->locator, m->u.mat.locator, m->u.mat.locator_len);
    out->length = m->u.mat.length;
    out->state = KVM_RECLAIM_PLANNED;
}

bool kvm_cold_reclaim_equal(const kvm_cold_reclaim_t *a, const kvm_cold_reclaim_t *b)
{
    return kvm_op_id_equal(&a->reclaim_op, &b->reclaim_op) &&
           kvm_op_id_equal(&a->content_op, &b->content_op) &&
           kvm_op_id_equal(&a->cold_op, &b->cold_op) && kvm_id128_equal(&a->tier, &b->tier) &&
           a->locator_len == b->locator_len && a->length == b->length && a->state == b->state &&
           a->locator_len <= KVM_COLD_LOCATOR_MAX_LEN &&
           memcmp(a->locator, b->locator, a->locator_len) == 0;
}

int kvm_cold_reclaim_validate(const kvm_cold_reclaim_t *rec)
{
    if (!kvm_op_id_is_valid(&rec->reclaim_op) || !kvm_op_id_is_valid(&rec->content_op) ||
        !kvm_op_id_is_valid(&rec->cold_op))
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: an operation id is invalid");
    if (kvm_op_id_equal(&rec->reclaim_op, &rec->content_op) ||
        kvm_op_id_equal(&rec->reclaim_op, &rec->cold_op) ||
        kvm_op_id_equal(&rec->content_op, &rec->cold_op))
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: operation ids must be distinct");
    if (kvm_id128_is_nil(&rec->tier))
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: nil tier id");
    if (rec->locator_len == 0 || rec->locator_len > KVM_COLD_LOCATOR_MAX_LEN)
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: locator is %u bytes; must be 1..%d",
                        rec->locator_len, KVM_COLD_LOCATOR_MAX_LEN);
    if (rec->state != KVM_RECLAIM_PLANNED && rec->state != KVM_RECLAIM_BACKEND_DELETED &&
        rec->state != KVM_RECLAIM_USAGE_RELEASED)
        return kvm_errf(KVMESH_ECORRUPT, "cold reclaim: unknown state %d", (int)rec->state);
    return 0;
}
