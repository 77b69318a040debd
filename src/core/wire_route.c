/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_route.c — the hand-written codec of the route record (records.proto `Route`, schema 6).
 *
 * Why: every route message an authority sends or receives carries routes; protobuf-c's
 * descriptor-driven pack/unpack, the unpacked tree and the conversion into kvm_route_t were a
 * visible share of a small batch operation's CPU (docs/performance.md).
 *
 * Wire compatibility (docs/protocol.md section 7a): the encoder writes exactly the
 * bytes protobuf-c 1.4 writes for the same record (fields in number order, proto3 defaults
 * omitted, absent submessages for nil op ids / no predecessor version / no cold backing). The
 * decoder accepts exactly what protobuf-c 1.4's unpack accepts and yields the same values:
 *   - tags as protobuf-c parses them (at most 5 bytes; a first byte with field bits 0 is
 *     malformed); varints of at most 10 bytes; length prefixes of at most 5 bytes and
 *     <= INT_MAX; wire types 3, 4, 6, 7 are malformed; a known field with another wire type
 *     is malformed; unknown fields of any other wire type are skipped;
 *   - scalars and bytes: the last occurrence wins; the enum keeps the varint's low 32 bits;
 *   - a repeated occurrence of a submessage field is merged into the earlier one the way
 *     protobuf-c's merge_messages does: in the merge, integer fields take the later value
 *     (also when the later occurrence omits them), bytes keep the earlier value when the later
 *     one is empty, nested submessages merge recursively, the cold backing's state (the oneof)
 *     is the later one or, when the later one has none, the earlier one (neither: malformed);
 *     a repeated oneof member within one message replaces the earlier one (no merge);
 *   - replicas (repeated) append in order.
 * Decoded bytes point into the input (no allocation but the identity's own). The parsed tree is
 * then converted with the checks, order and messages of the protobuf-c path (wire.c keeps that
 * path compiled as the test oracle: wire_route_encode_pb / wire_route_decode_pb).
 */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/pbwire.h"
#include "core/util.h"
#include "core/wire.h"
#include "core/wire_priv.h"

/* ---- parsed tree (pointers into the input) ------------------------------------------------ */

typedef struct pb_ver {
    bool set;
    uint64_t fencing_token, primary_sequence;
} pb_ver_t;

typedef struct pb_op {
    bool set;
    pb_bin_t writer;
    uint64_t epoch, seq;
} pb_op_t;

typedef struct pb_ident {
    bool set;
    pb_bin_t tenant, domain, key;
} pb_ident_t;

typedef struct pb_rep {
    pb_bin_t owner;
    uint64_t segment, offset, length, checksum;
} pb_rep_t;

enum { COLD_STATE_NONE = 0, COLD_STATE_PENDING = 5, COLD_STATE_MAT = 6 }; /* = field numbers */

typedef struct pb_cold {
    bool set;
    pb_op_t cold_op, content_op;
    pb_bin_t owner, tier;
    uint32_t state;    /* COLD_STATE_* */
    pb_bin_t locator;  /* materialized */
    uint64_t length;   /* pending: expected_length; materialized: length */
    uint64_t checksum; /* pending: expected_checksum; materialized: checksum */
} pb_cold_t;

typedef struct pb_route {
    pb_ident_t ident;
    pb_ver_t version, pred_version;
    pb_op_t content_op, pred_op;
    uint64_t length, checksum, retain_until_ms;
    int32_t tomb;
    pb_cold_t cold;
    size_t n_replicas;                   /* all occurrences; only the first KVM_MAX_REPLICAS kept */
    pb_rep_t replicas[KVM_MAX_REPLICAS]; /* last: parse_route leaves it unzeroed */
} pb_route_t;

/* ---- protobuf reader ---------------------------------------------------------------------- */

/* One field: its number, wire type and value (varint / fixed64 / length-delimited bytes). */
typedef struct pb_field {
    uint32_t num;
    uint8_t wt;
    uint64_t v;   /* PB_WT_VARINT, PB_WT_64BIT */
    pb_bin_t bin; /* PB_WT_LEN */
} pb_field_t;

/* Reads the next field (tag and value). False on malformed input. */
static bool rd_field(pb_rd_t *r, pb_field_t *f)
{
    unsigned wt;
    if (!pb_rd_tag(r, &f->num, &wt))
        return false;
    f->wt = (uint8_t)wt;
    switch (wt) {
    case PB_WT_VARINT:
        return pb_rd_varint(r, &f->v);
    case PB_WT_64BIT:
        return pb_rd_fixed(r, 8, &f->v);
    case PB_WT_LEN:
        return pb_rd_len(r, &f->bin);
    case PB_WT_32BIT:
        return pb_rd_fixed(r, 4, &f->v);
    default: /* groups (3, 4) and 6, 7 */
        return false;
    }
}

static void rd_init(pb_rd_t *r, pb_bin_t b)
{
    r->p = b.p;
    r->end = b.n ? b.p + b.n : b.p; /* an empty field may have no bytes at all (NULL) */
}

/* Typed accessors: a known field with another wire type is malformed (protobuf-c). */
static bool get_u64(const pb_field_t *f, uint64_t *out)
{
    if (f->wt != PB_WT_VARINT)
        return false;
    *out = f->v;
    return true;
}

static bool get_fixed64(const pb_field_t *f, uint64_t *out)
{
    if (f->wt != PB_WT_64BIT)
        return false;
    *out = f->v;
    return true;
}

static bool get_bin(const pb_field_t *f, pb_bin_t *out)
{
    if (f->wt != PB_WT_LEN)
        return false;
    *out = f->bin;
    return true;
}

/* ---- messages: parse one occurrence, merge a later one into an earlier one ---------------- */

/* merge_messages' rule for bytes: the later value, unless it is empty and the earlier is not. */
static pb_bin_t merge_bin(pb_bin_t earlier, pb_bin_t later)
{
    return later.p ? later : earlier;
}

static bool parse_ver(pb_bin_t b, pb_ver_t *out)
{
    pb_rd_t r;
    pb_field_t f;
    *out = (pb_ver_t){.set = true};
    rd_init(&r, b);
    while (r.p < r.end) {
        if (!rd_field(&r, &f))
            return false;
        if ((f.num == 1 && !get_u64(&f, &out->fencing_token)) ||
            (f.num == 2 && !get_u64(&f, &out->primary_sequence)))
            return false;
    }
    return true;
}

/* RouteVersion has integers only: a later occurrence replaces the earlier one entirely. */
static bool field_ver(const pb_field_t *f, pb_ver_t *v)
{
    pb_bin_t b;
    return get_bin(f, &b) && parse_ver(b, v);
}

static bool parse_op(pb_bin_t b, pb_op_t *out)
{
    pb_rd_t r;
    pb_field_t f;
    *out = (pb_op_t){.set = true};
    rd_init(&r, b);
    while (r.p < r.end) {
        if (!rd_field(&r, &f))
            return false;
        if ((f.num == 1 && !get_bin(&f, &out->writer)) ||
            (f.num == 2 && !get_u64(&f, &out->epoch)) || (f.num == 3 && !get_u64(&f, &out->seq)))
            return false;
    }
    return true;
}

static bool field_op(const pb_field_t *f, pb_op_t *op)
{
    pb_bin_t b;
    pb_op_t later;
    if (!get_bin(f, &b) || !parse_op(b, &later))
        return false;
    if (op->set)
        later.writer = merge_bin(op->writer, later.writer);
    *op = later;
    return true;
}

static bool parse_ident(pb_bin_t b, pb_ident_t *out)
{
    pb_rd_t r;
    pb_field_t f;
    *out = (pb_ident_t){.set = true};
    rd_init(&r, b);
    while (r.p < r.end) {
        if (!rd_field(&r, &f))
            return false;
        if ((f.num == 1 && !get_bin(&f, &out->tenant)) ||
            (f.num == 2 && !get_bin(&f, &out->domain)) || (f.num == 3 && !get_bin(&f, &out->key)))
            return false;
    }
    return true;
}

static bool field_ident(const pb_field_t *f, pb_ident_t *id)
{
    pb_bin_t b;
    pb_ident_t later;
    if (!get_bin(f, &b) || !parse_ident(b, &later))
        return false;
    if (id->set) {
        later.tenant = merge_bin(id->tenant, later.tenant);
        later.domain = merge_bin(id->domain, later.domain);
        later.key = merge_bin(id->key, later.key);
    }
    *id = later;
    return true;
}

static bool parse_rep(pb_bin_t b, pb_rep_t *out)
{
    pb_rd_t r;
    pb_field_t f;
    *out = (pb_rep_t){0};
    rd_init(&r, b);
    while (r.p < r.end) {
        if (!rd_field(&r, &f))
            return false;
        bool ok = true;
        switch (f.num) {
        case 1:
            ok = get_bin(&f, &out->owner);
            break;
        case 2:
            ok = get_u64(&f, &out->segment);
            break;
        case 3:
            ok = get_u64(&f, &out->offset);
            break;
        case 4:
            ok = get_u64(&f, &out->length);
            break;
        case 5:
            ok = get_fixed64(&f, &out->checksum);
            break;
        default:
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* PendingOffload: expected_length = 1 (varint), expected_checksum = 2 (fixed64).
 * Materialized: locator = 1 (bytes), length = 2 (varint), checksum = 3 (fixed64). */
static bool state_field(const pb_field_t *g, bool mat, pb_cold_t *c)
{
    unsigned len_num = mat ? 2 : 1, sum_num = mat ? 3 : 2;
    if (mat && g->num == 1)
        return get_bin(g, &c->locator);
    if (g->num == len_num)
        return get_u64(g, &c->length);
    if (g->num == sum_num)
        return get_fixed64(g, &c->checksum);
    return true; /* unknown field: skipped */
}

/* One occurrence of the oneof `state` (field 5 or 6): replaces any earlier state entirely
 * (protobuf-c frees a previous oneof member instead of merging into it). */
static bool parse_state(const pb_field_t *f, pb_cold_t *c)
{
    pb_bin_t b;
    pb_rd_t r;
    pb_field_t g;
    bool mat = f->num == COLD_STATE_MAT;
    if (!get_bin(f, &b))
        return false;
    c->state = f->num;
    c->locator = (pb_bin_t){0};
    c->length = c->checksum = 0;
    rd_init(&r, b);
    while (r.p < r.end)
        if (!rd_field(&r, &g) || !state_field(&g, mat, c))
            return false;
    return true;
}

static bool parse_cold(pb_bin_t b, pb_cold_t *out)
{
    pb_rd_t r;
    pb_field_t f;
    *out = (pb_cold_t){.set = true};
    rd_init(&r, b);
    while (r.p < r.end) {
        if (!rd_field(&r, &f))
            return false;
        bool ok = true;
        switch (f.num) {
        case 1:
            ok = field_op(&f, &out->cold_op);
            break;
        case 2:
            ok = field_op(&f, &out->content_op);
            break;
        case 3:
            ok = get_bin(&f, &out->owner);
            break;
        case 4:
            ok = get_bin(&f, &out->tier);
            break;
        case COLD_STATE_PENDING:
        case COLD_STATE_MAT:
            ok = parse_state(&f, out);
            break;
        default:
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* Merges an earlier occurrence `e` into the later `l` (merge_messages). */
static bool merge_cold(const pb_cold_t *e, pb_cold_t *l)
{
    pb_op_t *lops[2] = {&l->cold_op, &l->content_op};
    const pb_op_t *eops[2] = {&e->cold_op, &e->content_op};
    for (int i = 0; i < 2; i++) {
        if (!eops[i]->set)
            continue;
        if (lops[i]->set)
            lops[i]->writer = merge_bin(eops[i]->writer, lops[i]->writer);
        else
            *lops[i] = *eops[i];
    }
    l->owner = merge_bin(e->owner, l->owner);
    l->tier = merge_bin(e->tier, l->tier);
    if (l->state != COLD_STATE_NONE)
        return true;
    if (e->state == COLD_STATE_NONE)
        return false; /* protobuf-c finds no oneof member to carry over and fails the merge */
    l->state = e->state;
    l->locator = e->locator;
    l->length = e->length;
    l->checksum = e->checksum;
    return true;
}

static bool field_cold(const pb_field_t *f, pb_cold_t *c)
{
    pb_bin_t b;
    pb_cold_t later;
    if (!get_bin(f, &b) || !parse_cold(b, &later))
        return false;
    if (c->set && !merge_cold(c, &later))
        return false;
    *c = later;
    return true;
}

static bool field_rep(const pb_field_t *f, pb_route_t *pr)
{
    pb_bin_t b;
    pb_rep_t scratch;
    pb_rep_t *dst = pr->n_replicas < KVM_MAX_REPLICAS ? &pr->replicas[pr->n_replicas] : &scratch;
    if (!get_bin(f, &b) || !parse_rep(b, dst))
        return false;
    pr->n_replicas++;
    return true;
}

static bool route_field(const pb_field_t *f, pb_route_t *pr)
{
    uint64_t tomb;
    switch (f->num) {
    case 1:
        return field_ident(f, &pr->ident);
    case 2:
        return field_ver(f, &pr->version);
    case 3:
        return field_ver(f, &pr->pred_version);
    case 4:
        return field_op(f, &pr->content_op);
    case 5:
        return field_op(f, &pr->pred_op);
    case 6:
        return get_u64(f, &pr->length);
    case 7:
        return get_fixed64(f, &pr->checksum);
    case 8:
        if (!get_u64(f, &tomb))
            return false;
        pr->tomb = (int32_t)(uint32_t)tomb; /* an int32 enum: the varint's low 32 bits */
        return true;
    case 9:
        return get_u64(f, &pr->retain_until_ms);
    case 10:
        return field_rep(f, pr);
    case 11:
        return field_cold(f, &pr->cold);
    default:
        return true; /* unknown field: skipped */
    }
}

static bool parse_route(pb_bin_t b, pb_route_t *out)
{
    pb_rd_t r;
    pb_field_t f;
    memset(out, 0, offsetof(pb_route_t, replicas)); /* parse_rep fills each replica used */
    rd_init(&r, b);
    while (r.p < r.end)
        if (!rd_field(&r, &f) || !route_field(&f, out))
            return false;
    return true;
}

/* ---- conversion with the protobuf-c path's checks (wire.c route_from_pb) ------------------ */

static int get_id(pb_bin_t b, const char *what, kvm_id128_t *out)
{
    if (b.n != KVM_ID128_LEN)
        return kvm_errf(KVMESH_EPROTO, "wire: %s id is %zu bytes; ids are %d bytes", what, b.n,
                        KVM_ID128_LEN);
    memcpy(out->b, b.p, KVM_ID128_LEN);
    if (kvm_id128_is_nil(out))
        return kvm_errf(KVMESH_EPROTO, "wire: %s id is nil", what);
    return 0;
}

static int get_opid(const pb_op_t *pb, bool required, const char *what, kvm_op_id_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!pb->set) {
        if (required)
            return kvm_errf(KVMESH_EPROTO, "wire: %s operation id is missing", what);
        return 0;
    }
    int rc = get_id(pb->writer, what, &out->writer);
    if (rc)
        return rc;
    out->epoch = pb->epoch;
    out->seq = pb->seq;
    if (!kvm_op_id_is_valid(out))
        return kvm_errf(KVMESH_EPROTO, "wire: %s operation id needs epoch >= 1 and seq >= 1", what);
    return 0;
}

static void get_version(const pb_ver_t *pb, kvm_route_version_t *out)
{
    *out = pb->set ? (kvm_route_version_t){pb->fencing_token, pb->primary_sequence}
                   : KVM_ROUTE_VERSION_NONE;
}

static int get_cold(const pb_cold_t *pb, kvm_cold_backing_t *out)
{
    int rc;
    memset(out, 0, sizeof(*out));
    if ((rc = get_opid(&pb->cold_op, true, "cold backing cold", &out->cold_op)) ||
        (rc = get_opid(&pb->content_op, true, "cold backing content", &out->content_op)) ||
        (rc = get_id(pb->owner, "cold backing owner", &out->owner)) ||
        (rc = get_id(pb->tier, "cold backing tier", &out->tier)))
        return rc;
    switch (pb->state) {
    case COLD_STATE_PENDING:
        out->kind = KVM_COLD_PENDING_OFFLOAD;
        out->u.pending.expected_length = pb->length;
        out->u.pending.expected_checksum = pb->checksum;
        break;
    case COLD_STATE_MAT:
        if (pb->locator.n == 0 || pb->locator.n > KVM_COLD_LOCATOR_MAX_LEN)
            return kvm_errf(KVMESH_EPROTO, "wire: cold locator is %zu bytes; must be 1..%d",
                            pb->locator.n, KVM_COLD_LOCATOR_MAX_LEN);
        out->kind = KVM_COLD_MATERIALIZED;
        out->u.mat.length = pb->length;
        out->u.mat.checksum = pb->checksum;
        out->u.mat.locator_len = (uint16_t)pb->locator.n;
        memcpy(out->u.mat.locator, pb->locator.p, pb->locator.n);
        break;
    default:
        return kvm_errf(KVMESH_EPROTO,
                        "wire: cold backing has neither a pending nor a materialized state");
    }
    if (wire_cold_check(out, KVMESH_EPROTO))
        return wire_proto_err("cold backing");
    return 0;
}

/* The identity, its encoding in store (cap bytes) when it fits (kvm_ident_init_n_in). */
static int get_ident(const pb_ident_t *pb, kvm_ident_t *out, uint8_t *store, size_t cap)
{
    const char *domain = pb->domain.n ? (const char *)pb->domain.p : NULL;
    int rc = kvm_ident_init_n_in(out, store, cap, (const char *)pb->tenant.p, pb->tenant.n, domain,
                                 pb->domain.n, pb->key.p, pb->key.n);
    if (rc == KVMESH_ENOMEM)
        return rc;
    return rc ? wire_proto_err("ident") : 0;
}

static int get_replicas(const pb_route_t *pb, kvm_route_t *r)
{
    if (pb->n_replicas > KVM_MAX_REPLICAS)
        return kvm_errf(KVMESH_EPROTO, "wire: route has %zu hot replicas; the maximum is %d",
                        pb->n_replicas, KVM_MAX_REPLICAS);
    for (size_t i = 0; i < pb->n_replicas; i++) {
        const pb_rep_t *p = &pb->replicas[i];
        kvm_hot_replica_t *h = &r->replicas[i];
        int rc = get_id(p->owner, "replica owner", &h->owner);
        if (rc)
            return rc;
        h->segment = p->segment;
        h->offset = p->offset;
        h->length = p->length;
        h->checksum = p->checksum;
    }
    r->n_replicas = (uint32_t)pb->n_replicas;
    return 0;
}

static int route_from_tree(const pb_route_t *pb, kvm_route_t *r, uint8_t *store, size_t cap)
{
    int rc;
    if (!pb->ident.set)
        return kvm_errf(KVMESH_EPROTO, "wire: route has no identity");
    if ((rc = get_ident(&pb->ident, &r->ident, store, cap)) != 0)
        return rc;
    get_version(&pb->version, &r->version);
    get_version(&pb->pred_version, &r->predecessor_version);
    if ((rc = get_opid(&pb->content_op, true, "route content", &r->content_op)) ||
        (rc = get_opid(&pb->pred_op, false, "route predecessor", &r->predecessor_op)))
        return rc;
    r->length = pb->length;
    r->checksum = pb->checksum;
    if (pb->tomb < KVM_TOMB_NONE || pb->tomb > KVM_TOMB_FINALIZED)
        return kvm_errf(KVMESH_EPROTO, "wire: route tombstone state %d is unknown", (int)pb->tomb);
    r->tomb = (kvm_tomb_state_t)pb->tomb;
    r->retain_until_ms = pb->retain_until_ms;
    if ((rc = get_replicas(pb, r)) != 0)
        return rc;
    if (pb->cold.set && (rc = get_cold(&pb->cold, &r->cold)) != 0)
        return rc;
    if (kvm_route_validate(r) != 0)
        return wire_proto_err("route");
    return 0;
}

int wire_route_decode(const uint8_t *buf, size_t len, kvm_route_t *out)
{
    return wire_route_decode_in(buf, len, out, NULL, 0);
}

int wire_route_decode_in(const uint8_t *buf, size_t len, kvm_route_t *out, uint8_t *ident_store,
                         size_t cap)
{
    int rc;
    pb_route_t pb;
    kvm_route_init_sparse(out); /* (route_from_tree writes every field it reads) */
    if (len > KVM_WIRE_MAX_RECORD_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "wire: input is %zu bytes; the maximum record is %d", len,
                        KVM_WIRE_MAX_RECORD_LEN);
    if ((rc = wire_header_get(buf, len, WIRE_SCHEMA_ROUTE, WIRE_MIN_VERSION, WIRE_VERSION, NULL)) !=
        0)
        return rc;
    pb_bin_t body = {buf + WIRE_HEADER_LEN, len - WIRE_HEADER_LEN};
    if (!parse_route(body, &pb))
        return kvm_errf(KVMESH_EPROTO, "wire: malformed Route message");
    rc = route_from_tree(&pb, out, ident_store, cap);
    if (rc) {
        if (ident_store && out->ident.enc == ident_store)
            memset(&out->ident, 0, sizeof(out->ident)); /* not owned: nothing to free */
        kvm_route_free(out);
    }
    return rc;
}

/* ---- encoder: protobuf-c's bytes ---------------------------------------------------------- */

/* Size of a field: tag (all route fields are < 16: one byte) + value. */
static size_t f_varint(uint64_t v)
{
    return v ? 1 + pb_varint_len(v) : 0; /* proto3: zero omitted */
}

static size_t f_fixed64(uint64_t v)
{
    return v ? 1 + 8 : 0;
}

static size_t f_bytes(size_t n)
{
    return n ? 1 + pb_varint_len(n) + n : 0;
}

static size_t f_msg(size_t body)
{
    return 1 + pb_varint_len(body) + body; /* a present submessage is written even when empty */
}

static size_t ident_len(const kvm_ident_t *id)
{
    return f_bytes(id->tenant_len) + f_bytes(id->domain_len) + f_bytes(id->key_len);
}

static size_t ver_len(const kvm_route_version_t *v)
{
    return f_varint(v->fencing_token) + f_varint(v->primary_sequence);
}

static size_t op_len(const kvm_op_id_t *op)
{
    return f_bytes(KVM_ID128_LEN) + f_varint(op->epoch) + f_varint(op->seq);
}

static size_t f_op(const kvm_op_id_t *op)
{
    return kvm_op_id_is_nil(op) ? 0 : f_msg(op_len(op)); /* nil op id = absent message */
}

static size_t rep_len(const kvm_hot_replica_t *h)
{
    return f_bytes(KVM_ID128_LEN) + f_varint(h->segment) + f_varint(h->offset) +
           f_varint(h->length) + f_fixed64(h->checksum);
}

static size_t state_len(const kvm_cold_backing_t *c)
{
    if (c->kind == KVM_COLD_PENDING_OFFLOAD)
        return f_varint(c->u.pending.expected_length) + f_fixed64(c->u.pending.expected_checksum);
    return f_bytes(c->u.mat.locator_len) + f_varint(c->u.mat.length) + f_fixed64(c->u.mat.checksum);
}

static size_t cold_len(const kvm_cold_backing_t *c)
{
    return f_op(&c->cold_op) + f_op(&c->content_op) + f_bytes(KVM_ID128_LEN) +
           f_bytes(KVM_ID128_LEN) + f_msg(state_len(c));
}

static uint64_t enum_wire(int32_t v)
{
    return (uint64_t)(int64_t)v; /* int32 on the wire: sign-extended */
}

static size_t route_len(const kvm_route_t *in)
{
    size_t n = f_msg(ident_len(&in->ident)) + f_msg(ver_len(&in->version));
    if (!kvm_route_version_is_none(&in->predecessor_version))
        n += f_msg(ver_len(&in->predecessor_version));
    n += f_op(&in->content_op) + f_op(&in->predecessor_op);
    n += f_varint(in->length) + f_fixed64(in->checksum) + f_varint(enum_wire((int32_t)in->tomb)) +
         f_varint(in->retain_until_ms);
    for (uint32_t i = 0; i < in->n_replicas; i++)
        n += f_msg(rep_len(&in->replicas[i]));
    if (in->cold.kind != KVM_COLD_NONE)
        n += f_msg(cold_len(&in->cold));
    return n;
}

static uint8_t *w_varint(uint8_t *p, unsigned num, uint64_t v)
{
    return v ? pb_put_varint(pb_put_tag(p, num, PB_WT_VARINT), v) : p;
}

static uint8_t *w_fixed64(uint8_t *p, unsigned num, uint64_t v)
{
    if (!v)
        return p;
    p = pb_put_tag(p, num, PB_WT_64BIT);
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *w_bytes(uint8_t *p, unsigned num, const void *data, size_t n)
{
    if (!n)
        return p;
    p = pb_put_varint(pb_put_tag(p, num, PB_WT_LEN), n);
    memcpy(p, data, n);
    return p + n;
}

static uint8_t *w_msg_hdr(uint8_t *p, unsigned num, size_t body)
{
    return pb_put_varint(pb_put_tag(p, num, PB_WT_LEN), body);
}

static uint8_t *w_ver(uint8_t *p, unsigned num, const kvm_route_version_t *v)
{
    p = w_msg_hdr(p, num, ver_len(v));
    p = w_varint(p, 1, v->fencing_token);
    return w_varint(p, 2, v->primary_sequence);
}

static uint8_t *w_op(uint8_t *p, unsigned num, const kvm_op_id_t *op)
{
    if (kvm_op_id_is_nil(op))
        return p;
    p = w_msg_hdr(p, num, op_len(op));
    p = w_bytes(p, 1, op->writer.b, KVM_ID128_LEN);
    p = w_varint(p, 2, op->epoch);
    return w_varint(p, 3, op->seq);
}

static uint8_t *w_ident(uint8_t *p, const kvm_ident_t *id)
{
    p = w_msg_hdr(p, 1, ident_len(id));
    p = w_bytes(p, 1, kvm_ident_tenant(id), id->tenant_len);
    p = w_bytes(p, 2, kvm_ident_domain(id), id->domain_len);
    return w_bytes(p, 3, kvm_ident_key(id), id->key_len);
}

static uint8_t *w_rep(uint8_t *p, const kvm_hot_replica_t *h)
{
    p = w_msg_hdr(p, 10, rep_len(h));
    p = w_bytes(p, 1, h->owner.b, KVM_ID128_LEN);
    p = w_varint(p, 2, h->segment);
    p = w_varint(p, 3, h->offset);
    p = w_varint(p, 4, h->length);
    return w_fixed64(p, 5, h->checksum);
}

static uint8_t *w_cold(uint8_t *p, const kvm_cold_backing_t *c)
{
    p = w_msg_hdr(p, 11, cold_len(c));
    p = w_op(p, 1, &c->cold_op);
    p = w_op(p, 2, &c->content_op);
    p = w_bytes(p, 3, c->owner.b, KVM_ID128_LEN);
    p = w_bytes(p, 4, c->tier.b, KVM_ID128_LEN);
    if (c->kind == KVM_COLD_PENDING_OFFLOAD) {
        p = w_msg_hdr(p, COLD_STATE_PENDING, state_len(c));
        p = w_varint(p, 1, c->u.pending.expected_length);
        return w_fixed64(p, 2, c->u.pending.expected_checksum);
    }
    p = w_msg_hdr(p, COLD_STATE_MAT, state_len(c));
    p = w_bytes(p, 1, c->u.mat.locator, c->u.mat.locator_len);
    p = w_varint(p, 2, c->u.mat.length);
    return w_fixed64(p, 3, c->u.mat.checksum);
}

static uint8_t *w_route(uint8_t *p, const kvm_route_t *in)
{
    p = w_ident(p, &in->ident);
    p = w_ver(p, 2, &in->version);
    if (!kvm_route_version_is_none(&in->predecessor_version))
        p = w_ver(p, 3, &in->predecessor_version);
    p = w_op(p, 4, &in->content_op);
    p = w_op(p, 5, &in->predecessor_op);
    p = w_varint(p, 6, in->length);
    p = w_fixed64(p, 7, in->checksum);
    p = w_varint(p, 8, enum_wire((int32_t)in->tomb));
    p = w_varint(p, 9, in->retain_until_ms);
    for (uint32_t i = 0; i < in->n_replicas; i++)
        p = w_rep(p, &in->replicas[i]);
    if (in->cold.kind != KVM_COLD_NONE)
        p = w_cold(p, &in->cold);
    return p;
}

int wire_route_encode(const kvm_route_t *in, uint8_t *buf, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (kvm_route_validate(in) != 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        return kvm_errf(KVMESH_EINVAL, "wire: refusing to encode an invalid route: %s", msg);
    }
    size_t n = route_len(in);
    int rc = wire_frame_fits(n, buf, cap);
    if (rc)
        return rc;
    wire_header_put(buf, WIRE_SCHEMA_ROUTE, WIRE_VERSION);
    uint8_t *end = w_route(buf + WIRE_HEADER_LEN, in);
    KVM_ASSERT((size_t)(end - buf) == n + WIRE_HEADER_LEN);
    *out_len = n + WIRE_HEADER_LEN;
    return 0;
}

/* ---- the identity frame (records.proto `Ident`) -------------------------------------------- */

int wire_ident_decode_in(const uint8_t *buf, size_t len, kvm_ident_t *out, uint8_t *store,
                         size_t cap)
{
    int rc;
    pb_ident_t pb;
    memset(out, 0, sizeof(*out));
    if (len > KVM_WIRE_MAX_RECORD_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "wire: input is %zu bytes; the maximum record is %d", len,
                        KVM_WIRE_MAX_RECORD_LEN);
    if ((rc = wire_header_get(buf, len, WIRE_SCHEMA_IDENT, WIRE_MIN_VERSION, WIRE_VERSION, NULL)) !=
        0)
        return rc;
    pb_bin_t body = {buf + WIRE_HEADER_LEN, len - WIRE_HEADER_LEN};
    if (!parse_ident(body, &pb))
        return kvm_errf(KVMESH_EPROTO, "wire: malformed Ident message");
    return get_ident(&pb, out, store, cap);
}

int wire_ident_encode_fast(const kvm_ident_t *in, uint8_t *buf, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (!in->enc)
        return kvm_errf(KVMESH_EINVAL, "wire: cannot encode an empty identity");
    size_t n = ident_len(in);
    int rc = wire_frame_fits(n, buf, cap);
    if (rc)
        return rc;
    wire_header_put(buf, WIRE_SCHEMA_IDENT, WIRE_VERSION);
    uint8_t *p = buf + WIRE_HEADER_LEN;
    p = w_bytes(p, 1, kvm_ident_tenant(in), in->tenant_len);
    p = w_bytes(p, 2, kvm_ident_domain(in), in->domain_len);
    p = w_bytes(p, 3, kvm_ident_key(in), in->key_len);
    KVM_ASSERT((size_t)(p - buf) == n + WIRE_HEADER_LEN);
    *out_len = n + WIRE_HEADER_LEN;
    return 0;
}
