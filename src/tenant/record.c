/* SPDX-License-Identifier: Apache-2.0 */
/*
 * record.c — the tenant layer's pure parts: policy validation, fingerprint and matching; the
 * operation state machine (the one set_state); record invariants; the codecs of the four
 * records (policy, usage, object row, operation). No I/O.
 *
 * Encoding: wire.h's 4-byte header (schema id, version), then fixed big-endian fields in a
 * fixed order; strings and the payload are u16/u32 length-prefixed. Decoders check lengths,
 * enum ranges and the record invariants, so a decoded record is always a valid one.
 */
#include <string.h>

#include "core/hash.h"
#include "core/util.h"
#include "core/wire.h"
#include "tenant/tenant.h"

enum {
    TN_SCHEMA_POLICY = 256,
    TN_SCHEMA_USAGE = 257,
    TN_SCHEMA_OBJROW = 258,
    TN_SCHEMA_OP = 259,
};

#define TN_FP_SEED 0x74656e616e74706full /* "tenantpo" */

/* ---- policy --------------------------------------------------------------------------------- */

int tn_policy_validate(const tn_policy_t *p)
{
    if (!p)
        return kvm_errf(KVMESH_EINVAL, "tenant policy is NULL");
    if (p->policy_version < 1)
        return kvm_errf(KVMESH_ECONFIG, "tenant policy: policy_version must be >= 1");
    if (p->max_bytes < 1 || p->max_bytes > INT64_MAX)
        return kvm_errf(KVMESH_ECONFIG, "tenant policy: max_bytes must be in [1, 2^63)");
    if (p->max_objects < 1 || p->max_objects > INT64_MAX)
        return kvm_errf(KVMESH_ECONFIG, "tenant policy: max_objects must be in [1, 2^63)");
    return 0;
}

static void put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        b[i] = (uint8_t)v;
        v >>= 8;
    }
}

uint64_t tn_policy_fingerprint(const tn_policy_t *p)
{
    uint8_t b[32];
    put_u64(b, TN_SCHEMA_VERSION);
    put_u64(b + 8, p->policy_version);
    put_u64(b + 16, p->max_bytes);
    put_u64(b + 24, p->max_objects);
    return kvm_hash_seeded(b, sizeof(b), TN_FP_SEED);
}

void tn_policy_record(const tn_policy_t *p, tn_policy_rec_t *out)
{
    *out = (tn_policy_rec_t){.schema_version = TN_SCHEMA_VERSION,
                             .policy_version = p->policy_version,
                             .max_bytes = p->max_bytes,
                             .max_objects = p->max_objects,
                             .fingerprint = tn_policy_fingerprint(p)};
}

int tn_policy_match(const tn_policy_rec_t *s, const tn_policy_t *l, const char *tenant)
{
    tn_policy_rec_t r;
    tn_policy_record(l, &r);
#define TN_CMP(f)                                                                                  \
    if (s->f != r.f)                                                                               \
        return kvm_errf(KVMESH_EINCOMPAT,                                                          \
                        "tenant '%s': hard policy field " #f " differs: stored %llu, configured "  \
                        "%llu; change it only with a controlled restart of every runtime",         \
                        tenant, (unsigned long long)s->f, (unsigned long long)r.f);
    TN_CMP(schema_version)
    TN_CMP(policy_version)
    TN_CMP(max_bytes)
    TN_CMP(max_objects)
    TN_CMP(fingerprint)
#undef TN_CMP
    return 0;
}

/* ---- state machine --------------------------------------------------------------------------- */

const char *tn_state_name(enum tn_state s)
{
    switch (s) {
    case TN_ST_NONE:
        return "none";
    case TN_ST_PENDING:
        return "pending";
    case TN_ST_PUBLISHING:
        return "publishing";
    case TN_ST_FINALIZED:
        return "finalized";
    case TN_ST_ABORTED:
        return "aborted";
    }
    return "?";
}

const char *tn_kind_name(enum tn_kind k)
{
    switch (k) {
    case TN_KIND_CREATE:
        return "create";
    case TN_KIND_OVERWRITE:
        return "overwrite";
    case TN_KIND_DELETE:
        return "delete";
    }
    return "?";
}

bool tn_state_is_terminal(enum tn_state s)
{
    return s == TN_ST_FINALIZED || s == TN_ST_ABORTED;
}

bool tn_transition_ok(enum tn_state from, enum tn_state to)
{
    switch (from) {
    case TN_ST_NONE:
        return to == TN_ST_PENDING;
    case TN_ST_PENDING:
        return to == TN_ST_ABORTED || to == TN_ST_PUBLISHING;
    case TN_ST_PUBLISHING: /* -> ABORTED: only the reconciler's proven-superseded abort */
        return to == TN_ST_PUBLISHING || to == TN_ST_FINALIZED || to == TN_ST_ABORTED;
    case TN_ST_FINALIZED:
    case TN_ST_ABORTED:
        return false;
    }
    return false;
}

void tn_op_set_state(tn_op_t *op, enum tn_state to)
{
    KVM_ASSERT(tn_transition_ok(op->state, to));
    op->state = to;
}

uint64_t tn_pos(int64_t d)
{
    return d > 0 ? (uint64_t)d : 0;
}

int tn_op_check(const tn_op_t *op)
{
    if (op->state < TN_ST_PENDING || op->state > TN_ST_ABORTED)
        return kvm_errf(KVMESH_ECORRUPT, "op %s: bad state %d", op->id, (int)op->state);
    if (op->kind < TN_KIND_CREATE || op->kind > TN_KIND_DELETE)
        return kvm_errf(KVMESH_ECORRUPT, "op %s: bad kind %d", op->id, (int)op->kind);
    uint64_t e, s;
    if (ks_opid_parse(op->id, &e, &s) != 0)
        return kvm_errf(KVMESH_ECORRUPT, "op record with a bad id");
    if (!op->tenant[0] || !op->key[0])
        return kvm_errf(KVMESH_ECORRUPT, "op %s: no tenant or key", op->id);
    switch (op->kind) {
    case TN_KIND_CREATE:
        if (op->delta_objects != 1 || op->delta_bytes != (int64_t)op->next_len)
            return kvm_errf(KVMESH_ECORRUPT, "op %s: create with deltas %lld/%lld", op->id,
                            (long long)op->delta_bytes, (long long)op->delta_objects);
        break;
    case TN_KIND_OVERWRITE:
        if (op->delta_objects != 0)
            return kvm_errf(KVMESH_ECORRUPT, "op %s: overwrite changes the object count", op->id);
        break;
    case TN_KIND_DELETE:
        if (op->delta_objects != -1 || op->delta_bytes > 0 || op->next_len != 0)
            return kvm_errf(KVMESH_ECORRUPT, "op %s: delete with deltas %lld/%lld", op->id,
                            (long long)op->delta_bytes, (long long)op->delta_objects);
        break;
    }
    if (op->payload_len > TN_PAYLOAD_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "op %s: payload too long", op->id);
    bool claimed = op->state == TN_ST_PUBLISHING || op->state == TN_ST_FINALIZED;
    if (claimed && (op->publish_token == 0 ||
                    kvm_route_version_cmp(&op->next_version, &op->expected_route) <= 0))
        return kvm_errf(KVMESH_ECORRUPT, "op %s: %s without a valid claim", op->id,
                        tn_state_name(op->state));
    if (op->payload_len && kvm_checksum(op->payload, op->payload_len) != op->payload_fp)
        return kvm_errf(KVMESH_ECORRUPT, "op %s: payload fingerprint mismatch", op->id);
    return 0;
}

int tn_usage_check(const tn_usage_t *u)
{
    if (u->pending_bytes > 0 && u->n_pending + u->n_publishing == 0)
        return kvm_errf(KVMESH_ECORRUPT, "usage: %llu pending bytes without an operation",
                        (unsigned long long)u->pending_bytes);
    if (u->pending_objects > u->n_pending + u->n_publishing)
        return kvm_errf(KVMESH_ECORRUPT, "usage: %llu pending objects but %llu operations",
                        (unsigned long long)u->pending_objects,
                        (unsigned long long)(u->n_pending + u->n_publishing));
    if (u->committed_bytes > INT64_MAX || u->pending_bytes > INT64_MAX)
        return kvm_errf(KVMESH_ECORRUPT, "usage: counter underflow");
    return 0;
}

/* ---- codecs ---------------------------------------------------------------------------------- */

typedef struct wb {
    uint8_t *b;
    size_t cap, len;
    bool over;
} wb_t;

static void wb_bytes(wb_t *w, const void *p, size_t n)
{
    if (w->over || w->len + n > w->cap) {
        w->over = true;
        return;
    }
    memcpy(w->b + w->len, p, n);
    w->len += n;
}

static void wb_u64(wb_t *w, uint64_t v)
{
    uint8_t b[8];
    put_u64(b, v);
    wb_bytes(w, b, 8);
}

static void wb_str(wb_t *w, const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    KVM_ASSERT(n <= max);
    uint8_t h[2] = {(uint8_t)(n >> 8), (uint8_t)n};
    wb_bytes(w, h, 2);
    wb_bytes(w, s, n);
}

static int wb_begin(wb_t *w, uint8_t *buf, size_t cap, uint16_t schema)
{
    *w = (wb_t){.b = buf, .cap = cap};
    if (cap < WIRE_HEADER_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "tenant record: buffer too small");
    wire_header_put(buf, schema, TN_SCHEMA_VERSION);
    w->len = WIRE_HEADER_LEN;
    return 0;
}

static int wb_end(wb_t *w, size_t *len)
{
    if (w->over)
        return kvm_errf(KVMESH_ETOOBIG, "tenant record: buffer too small");
    *len = w->len;
    return 0;
}

typedef struct rb {
    const uint8_t *b;
    size_t len, off;
    bool bad;
} rb_t;

static uint64_t rb_u64(rb_t *r)
{
    if (r->bad || r->off + 8 > r->len) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | r->b[r->off + i];
    r->off += 8;
    return v;
}

static void rb_str(rb_t *r, char *out, size_t cap)
{
    out[0] = '\0';
    if (r->bad || r->off + 2 > r->len) {
        r->bad = true;
        return;
    }
    size_t n = (size_t)r->b[r->off] << 8 | r->b[r->off + 1];
    r->off += 2;
    if (n >= cap || r->off + n > r->len || memchr(r->b + r->off, 0, n)) {
        r->bad = true;
        return;
    }
    memcpy(out, r->b + r->off, n);
    out[n] = '\0';
    r->off += n;
}

static int rb_begin(rb_t *r, const uint8_t *buf, size_t len, uint16_t schema, const char *what)
{
    *r = (rb_t){.b = buf, .len = len, .off = WIRE_HEADER_LEN};
    uint16_t v;
    if (!buf || wire_header_get(buf, len, schema, 1, TN_SCHEMA_VERSION, &v) != 0)
        return kvm_errf(KVMESH_EPROTO, "tenant %s record: bad header", what);
    return 0;
}

static int rb_end(rb_t *r, const char *what)
{
    if (r->bad || r->off != r->len)
        return kvm_errf(KVMESH_EPROTO, "tenant %s record: malformed (%zu of %zu bytes)", what,
                        r->off, r->len);
    return 0;
}

int tn_policy_encode(const tn_policy_rec_t *p, uint8_t *buf, size_t cap, size_t *len)
{
    wb_t w;
    int rc = wb_begin(&w, buf, cap, TN_SCHEMA_POLICY);
    if (rc)
        return rc;
    wb_u64(&w, p->schema_version);
    wb_u64(&w, p->policy_version);
    wb_u64(&w, p->max_bytes);
    wb_u64(&w, p->max_objects);
    wb_u64(&w, p->fingerprint);
    return wb_end(&w, len);
}

int tn_policy_decode(const uint8_t *buf, size_t len, tn_policy_rec_t *out)
{
    rb_t r;
    memset(out, 0, sizeof(*out));
    int rc = rb_begin(&r, buf, len, TN_SCHEMA_POLICY, "policy");
    if (rc)
        return rc;
    uint64_t sv = rb_u64(&r), pv = rb_u64(&r);
    out->max_bytes = rb_u64(&r);
    out->max_objects = rb_u64(&r);
    out->fingerprint = rb_u64(&r);
    if ((rc = rb_end(&r, "policy")) != 0)
        return rc;
    if (sv > UINT32_MAX || pv > UINT32_MAX || pv == 0)
        return kvm_errf(KVMESH_EPROTO, "tenant policy record: bad versions");
    out->schema_version = (uint32_t)sv;
    out->policy_version = (uint32_t)pv;
    tn_policy_t p = {.policy_version = out->policy_version,
                     .max_bytes = out->max_bytes,
                     .max_objects = out->max_objects};
    if (tn_policy_validate(&p) != 0 ||
        (sv == TN_SCHEMA_VERSION && tn_policy_fingerprint(&p) != out->fingerprint))
        return kvm_errf(KVMESH_EPROTO, "tenant policy record: limits or fingerprint invalid");
    return 0;
}

int tn_usage_encode(const tn_usage_t *u, uint8_t *buf, size_t cap, size_t *len)
{
    wb_t w;
    int rc = wb_begin(&w, buf, cap, TN_SCHEMA_USAGE);
    if (rc)
        return rc;
    wb_u64(&w, u->committed_bytes);
    wb_u64(&w, u->committed_objects);
    wb_u64(&w, u->pending_bytes);
    wb_u64(&w, u->pending_objects);
    wb_u64(&w, u->n_pending);
    wb_u64(&w, u->n_publishing);
    wb_u64(&w, u->policy_version);
    return wb_end(&w, len);
}

int tn_usage_decode(const uint8_t *buf, size_t len, tn_usage_t *out)
{
    rb_t r;
    memset(out, 0, sizeof(*out));
    int rc = rb_begin(&r, buf, len, TN_SCHEMA_USAGE, "usage");
    if (rc)
        return rc;
    out->committed_bytes = rb_u64(&r);
    out->committed_objects = rb_u64(&r);
    out->pending_bytes = rb_u64(&r);
    out->pending_objects = rb_u64(&r);
    out->n_pending = rb_u64(&r);
    out->n_publishing = rb_u64(&r);
    out->policy_version = (uint32_t)rb_u64(&r);
    if ((rc = rb_end(&r, "usage")) != 0)
        return rc;
    if (tn_usage_check(out) != 0)
        return kvm_errf(KVMESH_EPROTO, "tenant usage record: inconsistent counters");
    return 0;
}

int tn_objrow_encode(const tn_objrow_t *o, uint8_t *buf, size_t cap, size_t *len)
{
    wb_t w;
    int rc = wb_begin(&w, buf, cap, TN_SCHEMA_OBJROW);
    if (rc)
        return rc;
    wb_u64(&w, o->acct_version);
    wb_u64(&w, o->live);
    wb_u64(&w, o->len);
    wb_u64(&w, o->route_version.fencing_token);
    wb_u64(&w, o->route_version.primary_sequence);
    wb_str(&w, o->last_op, KS_OPID_LEN);
    wb_str(&w, o->lock_op, KS_OPID_LEN);
    wb_u64(&w, o->tomb_until_ms); /* since the tombstone purge; absent in the old layout */
    return wb_end(&w, len);
}

int tn_objrow_decode(const uint8_t *buf, size_t len, tn_objrow_t *out)
{
    rb_t r;
    memset(out, 0, sizeof(*out));
    int rc = rb_begin(&r, buf, len, TN_SCHEMA_OBJROW, "object");
    if (rc)
        return rc;
    out->acct_version = rb_u64(&r);
    uint64_t live = rb_u64(&r);
    out->len = rb_u64(&r);
    out->route_version.fencing_token = rb_u64(&r);
    out->route_version.primary_sequence = rb_u64(&r);
    rb_str(&r, out->last_op, sizeof(out->last_op));
    rb_str(&r, out->lock_op, sizeof(out->lock_op));
    if (!r.bad && r.off < r.len) /* the old layout ends here: no deadline */
        out->tomb_until_ms = rb_u64(&r);
    if ((rc = rb_end(&r, "object")) != 0)
        return rc;
    if (live > 1 || (!live && out->len) || (live && out->tomb_until_ms))
        return kvm_errf(KVMESH_EPROTO, "tenant object record: bad live flag or length");
    out->live = live != 0;
    return 0;
}

int tn_op_encode(const tn_op_t *op, uint8_t *buf, size_t cap, size_t *len)
{
    if (tn_op_check(op) != 0)
        return KVMESH_EINVAL;
    wb_t w;
    int rc = wb_begin(&w, buf, cap, TN_SCHEMA_OP);
    if (rc)
        return rc;
    wb_str(&w, op->id, KS_OPID_LEN);
    wb_u64(&w, op->state);
    wb_u64(&w, op->kind);
    wb_str(&w, op->tenant, KVM_TENANT_MAX_LEN);
    wb_str(&w, op->domain, KVM_DOMAIN_MAX_LEN);
    wb_str(&w, op->key, KVM_KEY_MAX_LEN);
    wb_u64(&w, op->expected_route.fencing_token);
    wb_u64(&w, op->expected_route.primary_sequence);
    wb_u64(&w, op->expected_acct);
    wb_u64(&w, op->next_len);
    wb_u64(&w, (uint64_t)op->delta_bytes);
    wb_u64(&w, (uint64_t)op->delta_objects);
    wb_u64(&w, op->deadline_ms);
    wb_u64(&w, op->writer_epoch);
    wb_u64(&w, op->generation);
    wb_u64(&w, op->fencing_token);
    wb_u64(&w, op->next_version.fencing_token);
    wb_u64(&w, op->next_version.primary_sequence);
    wb_u64(&w, op->publish_token);
    wb_u64(&w, op->payload_fp);
    wb_u64(&w, op->recon_attempts);
    wb_u64(&w, op->payload_len);
    wb_bytes(&w, op->payload, op->payload_len);
    return wb_end(&w, len);
}

int tn_op_decode(const uint8_t *buf, size_t len, tn_op_t *out)
{
    rb_t r;
    memset(out, 0, sizeof(*out));
    int rc = rb_begin(&r, buf, len, TN_SCHEMA_OP, "operation");
    if (rc)
        return rc;
    rb_str(&r, out->id, sizeof(out->id));
    uint64_t st = rb_u64(&r), kind = rb_u64(&r);
    rb_str(&r, out->tenant, sizeof(out->tenant));
    rb_str(&r, out->domain, sizeof(out->domain));
    rb_str(&r, out->key, sizeof(out->key));
    out->expected_route.fencing_token = rb_u64(&r);
    out->expected_route.primary_sequence = rb_u64(&r);
    out->expected_acct = rb_u64(&r);
    out->next_len = rb_u64(&r);
    out->delta_bytes = (int64_t)rb_u64(&r);
    out->delta_objects = (int64_t)rb_u64(&r);
    out->deadline_ms = rb_u64(&r);
    out->writer_epoch = rb_u64(&r);
    out->generation = rb_u64(&r);
    out->fencing_token = rb_u64(&r);
    out->next_version.fencing_token = rb_u64(&r);
    out->next_version.primary_sequence = rb_u64(&r);
    out->publish_token = rb_u64(&r);
    out->payload_fp = rb_u64(&r);
    uint64_t att = rb_u64(&r), pl = rb_u64(&r);
    if (!r.bad && pl <= TN_PAYLOAD_MAX && r.off + pl <= r.len) {
        memcpy(out->payload, r.b + r.off, pl);
        r.off += pl;
        out->payload_len = (uint32_t)pl;
    } else {
        r.bad = true;
    }
    if ((rc = rb_end(&r, "operation")) != 0)
        return rc;
    if (st > TN_ST_ABORTED || kind > TN_KIND_DELETE || att > UINT32_MAX)
        return kvm_errf(KVMESH_EPROTO, "tenant operation record: bad state or kind");
    out->state = (enum tn_state)st;
    out->kind = (enum tn_kind)kind;
    out->recon_attempts = (uint32_t)att;
    if (tn_op_check(out) != 0)
        return kvm_errf(KVMESH_EPROTO, "tenant operation record: %s", kvmesh_last_error());
    return 0;
}
