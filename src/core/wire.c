/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.c — framing and protobuf-c encode/decode of the core records (wire.h).
 * Encoders refuse invalid records; decoders bound the input size, check the frame header, let
 * protobuf-c parse (it rejects malformed protobuf without crashing), then convert field by
 * field with explicit checks (16-byte ids, byte lengths, replica count, oneof presence, enum
 * ranges) and finish with the record's own validator, so a decoded record always satisfies the
 * same invariants an encoder demands. Every failure path frees the unpacked message.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "core/wire.h"
#include "core/wire_priv.h"
#include "records.pb-c.h"

typedef Kvmesh__Core__Ident pb_ident;
typedef Kvmesh__Core__Runtime pb_runtime;
typedef Kvmesh__Core__RouteVersion pb_version;
typedef Kvmesh__Core__OpId pb_opid;
typedef Kvmesh__Core__HotReplica pb_replica;
typedef Kvmesh__Core__PendingOffload pb_pending;
typedef Kvmesh__Core__Materialized pb_mat;
typedef Kvmesh__Core__ColdBacking pb_cold;
typedef Kvmesh__Core__Route pb_route;
typedef Kvmesh__Core__ColdReclaim pb_reclaim;

/* ---- framing ------------------------------------------------------------------------------ */

void wire_header_put(uint8_t *buf, uint16_t schema, uint16_t version)
{
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, WIRE_HEADER_LEN);
    kvm_wr_u16be(&w, schema);
    kvm_wr_u16be(&w, version);
}

int wire_header_get(const uint8_t *buf, size_t len, uint16_t schema, uint16_t min_version,
                    uint16_t max_version, uint16_t *version)
{
    if (!buf || len < WIRE_HEADER_LEN)
        return kvm_errf(KVMESH_EPROTO, "wire: record is %zu bytes; shorter than its header", len);
    kvm_rd_t r;
    kvm_rd_init(&r, buf, WIRE_HEADER_LEN);
    uint16_t s = kvm_rd_u16be(&r);
    uint16_t v = kvm_rd_u16be(&r);
    if (s != schema)
        return kvm_errf(KVMESH_EPROTO, "wire: schema id %u where %u was expected", s, schema);
    if (v > max_version)
        return kvm_errf(KVMESH_EINCOMPAT,
                        "wire: schema %u version %u is newer than this build reads (%u); "
                        "upgrade this runtime",
                        s, v, max_version);
    if (v < min_version)
        return kvm_errf(KVMESH_EPROTO, "wire: schema %u version %u is older than supported (%u)", s,
                        v, min_version);
    if (version)
        *version = v;
    return 0;
}

int wire_frame_fits(size_t body_len, const uint8_t *buf, size_t cap)
{
    if (body_len > KVM_WIRE_MAX_RECORD_LEN - WIRE_HEADER_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "wire: record would be %zu bytes; the maximum is %d",
                        body_len + WIRE_HEADER_LEN, KVM_WIRE_MAX_RECORD_LEN);
    if (!buf || cap < body_len + WIRE_HEADER_LEN)
        return kvm_errf(KVMESH_ETOOBIG, "wire: record needs %zu bytes; the buffer has %zu",
                        body_len + WIRE_HEADER_LEN, cap);
    return 0;
}

static int pack_frame(const ProtobufCMessage *m, uint16_t schema, uint8_t *buf, size_t cap,
                      size_t *out_len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    *out_len = 0;
    int rc = wire_frame_fits(n, buf, cap);
    if (rc)
        return rc;
    wire_header_put(buf, schema, WIRE_VERSION);
    size_t w = protobuf_c_message_pack(m, buf + WIRE_HEADER_LEN);
    KVM_ASSERT(w == n);
    *out_len = n + WIRE_HEADER_LEN;
    return 0;
}

/*
 * The unpacked message of one decode lives in a bump arena on the decoder's stack: a route
 * (decoded for every route message an authority sends or receives) unpacks into a dozen small
 * pieces, which malloc/free per piece made a visible share of a small operation's CPU. Pieces
 * beyond the arena fall back to malloc; the arena's own pieces are never freed one by one
 * (free_unpacked frees only the fallback ones), and it dies with the decoder's frame.
 */
#define WIRE_ARENA_CAP 4096

typedef struct wire_arena {
    ProtobufCAllocator pa; /* allocator_data = this arena */
    size_t used;
    _Alignas(max_align_t) uint8_t buf[WIRE_ARENA_CAP];
} wire_arena_t;

static void *arena_alloc(void *data, size_t n)
{
    wire_arena_t *a = data;
    size_t need = (n + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
    if (need == 0) /* n == 0: still a distinct piece inside the buffer */
        need = _Alignof(max_align_t);
    if (need < n || need > WIRE_ARENA_CAP - a->used)
        return malloc(n);
    void *p = a->buf + a->used;
    a->used += need;
    return p;
}

static void arena_free(void *data, void *p)
{
    wire_arena_t *a = data;
    uintptr_t u = (uintptr_t)p, lo = (uintptr_t)a->buf; /* p may be any malloc'd block */
    if (u >= lo && u - lo < WIRE_ARENA_CAP)
        return;
    free(p);
}

/* Readies *a (uninitialised storage of the caller's frame) and returns its allocator. */
static ProtobufCAllocator *arena_init(wire_arena_t *a)
{
    a->pa = (ProtobufCAllocator){.alloc = arena_alloc, .free = arena_free, .allocator_data = a};
    a->used = 0;
    return &a->pa;
}

/* Unpacks with allocator `al` (arena_init), which the caller passes to free_unpacked too. */
static ProtobufCMessage *unpack_frame(const ProtobufCMessageDescriptor *d, uint16_t schema,
                                      const uint8_t *buf, size_t len, int *rc,
                                      ProtobufCAllocator *al)
{
    if (len > KVM_WIRE_MAX_RECORD_LEN) {
        *rc = kvm_errf(KVMESH_ETOOBIG, "wire: input is %zu bytes; the maximum record is %d", len,
                       KVM_WIRE_MAX_RECORD_LEN);
        return NULL;
    }
    if ((*rc = wire_header_get(buf, len, schema, WIRE_MIN_VERSION, WIRE_VERSION, NULL)) != 0)
        return NULL;
    ProtobufCMessage *m =
        protobuf_c_message_unpack(d, al, len - WIRE_HEADER_LEN, buf + WIRE_HEADER_LEN);
    if (!m)
        *rc = kvm_errf(KVMESH_EPROTO, "wire: malformed %s message", d->short_name);
    return m;
}

int wire_proto_err(const char *ctx)
{
    char msg[400];
    snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
    return kvm_errf(KVMESH_EPROTO, "wire: %s: %s", ctx, msg);
}

/* ---- field helpers ------------------------------------------------------------------------ */

static ProtobufCBinaryData bin(const void *p, size_t n)
{
    return (ProtobufCBinaryData){n, (uint8_t *)p}; /* pack only reads it */
}

static ProtobufCBinaryData bin_id(const kvm_id128_t *id)
{
    return bin(id->b, KVM_ID128_LEN);
}

static int get_id(const ProtobufCBinaryData *b, const char *what, kvm_id128_t *out)
{
    if (b->len != KVM_ID128_LEN)
        return kvm_errf(KVMESH_EPROTO, "wire: %s id is %zu bytes; ids are %d bytes", what, b->len,
                        KVM_ID128_LEN);
    memcpy(out->b, b->data, KVM_ID128_LEN);
    if (kvm_id128_is_nil(out))
        return kvm_errf(KVMESH_EPROTO, "wire: %s id is nil", what);
    return 0;
}

/* Nil op ids are encoded as an absent message. */
static void put_opid(pb_opid *pb, const kvm_op_id_t *op, pb_opid **field)
{
    if (kvm_op_id_is_nil(op)) {
        *field = NULL;
        return;
    }
    kvmesh__core__op_id__init(pb);
    pb->writer = bin_id(&op->writer);
    pb->epoch = op->epoch;
    pb->seq = op->seq;
    *field = pb;
}

/* required: absent is an error; otherwise absent -> nil. Present must be a valid op id. */
static int get_opid(const pb_opid *pb, bool required, const char *what, kvm_op_id_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!pb) {
        if (required)
            return kvm_errf(KVMESH_EPROTO, "wire: %s operation id is missing", what);
        return 0;
    }
    int rc = get_id(&pb->writer, what, &out->writer);
    if (rc)
        return rc;
    out->epoch = pb->epoch;
    out->seq = pb->seq;
    if (!kvm_op_id_is_valid(out))
        return kvm_errf(KVMESH_EPROTO, "wire: %s operation id needs epoch >= 1 and seq >= 1", what);
    return 0;
}

static void put_version(pb_version *pb, const kvm_route_version_t *v)
{
    kvmesh__core__route_version__init(pb);
    pb->fencing_token = v->fencing_token;
    pb->primary_sequence = v->primary_sequence;
}

static void get_version(const pb_version *pb, kvm_route_version_t *out)
{
    *out = pb ? (kvm_route_version_t){pb->fencing_token, pb->primary_sequence}
              : KVM_ROUTE_VERSION_NONE;
}

int wire_cold_check(const kvm_cold_backing_t *c, int err)
{
    if (c->kind != KVM_COLD_PENDING_OFFLOAD && c->kind != KVM_COLD_MATERIALIZED)
        return kvm_errf(err, "cold backing kind is %s; expected pending_offload or materialized",
                        kvm_cold_kind_name(c->kind));
    if (!kvm_op_id_is_valid(&c->cold_op) || !kvm_op_id_is_valid(&c->content_op))
        return kvm_errf(err, "cold backing has an invalid operation id");
    if (kvm_op_id_equal(&c->cold_op, &c->content_op))
        return kvm_errf(err, "cold backing cold and content operation ids are equal");
    if (kvm_id128_is_nil(&c->owner) || kvm_id128_is_nil(&c->tier))
        return kvm_errf(err, "cold backing owner or tier id is nil");
    if (c->kind == KVM_COLD_MATERIALIZED &&
        (c->u.mat.locator_len == 0 || c->u.mat.locator_len > KVM_COLD_LOCATOR_MAX_LEN))
        return kvm_errf(err, "cold locator is %u bytes; must be 1..%d", c->u.mat.locator_len,
                        KVM_COLD_LOCATOR_MAX_LEN);
    return 0;
}

/* Storage for the nested messages of one cold backing during encode. */
struct cold_pb {
    pb_cold cold;
    pb_opid cold_op, content_op;
    pb_pending pending;
    pb_mat mat;
};

static void put_cold(struct cold_pb *s, const kvm_cold_backing_t *c)
{
    kvmesh__core__cold_backing__init(&s->cold);
    put_opid(&s->cold_op, &c->cold_op, &s->cold.cold_op);
    put_opid(&s->content_op, &c->content_op, &s->cold.content_op);
    s->cold.owner = bin_id(&c->owner);
    s->cold.tier = bin_id(&c->tier);
    if (c->kind == KVM_COLD_PENDING_OFFLOAD) {
        kvmesh__core__pending_offload__init(&s->pending);
        s->pending.expected_length = c->u.pending.expected_length;
        s->pending.expected_checksum = c->u.pending.expected_checksum;
        s->cold.state_case = KVMESH__CORE__COLD_BACKING__STATE_PENDING;
        s->cold.pending = &s->pending;
    } else {
        kvmesh__core__materialized__init(&s->mat);
        s->mat.locator = bin(c->u.mat.locator, c->u.mat.locator_len);
        s->mat.length = c->u.mat.length;
        s->mat.checksum = c->u.mat.checksum;
        s->cold.state_case = KVMESH__CORE__COLD_BACKING__STATE_MATERIALIZED;
        s->cold.materialized = &s->mat;
    }
}

static int get_cold(const pb_cold *pb, kvm_cold_backing_t *out)
{
    int rc;
    memset(out, 0, sizeof(*out));
    if ((rc = get_opid(pb->cold_op, true, "cold backing cold", &out->cold_op)) ||
        (rc = get_opid(pb->content_op, true, "cold backing content", &out->content_op)) ||
        (rc = get_id(&pb->owner, "cold backing owner", &out->owner)) ||
        (rc = get_id(&pb->tier, "cold backing tier", &out->tier)))
        return rc;
    switch (pb->state_case) {
    case KVMESH__CORE__COLD_BACKING__STATE_PENDING:
        if (!pb->pending)
            return kvm_errf(KVMESH_EPROTO, "wire: cold backing pending state missing");
        out->kind = KVM_COLD_PENDING_OFFLOAD;
        out->u.pending.expected_length = pb->pending->expected_length;
        out->u.pending.expected_checksum = pb->pending->expected_checksum;
        break;
    case KVMESH__CORE__COLD_BACKING__STATE_MATERIALIZED:
        if (!pb->materialized)
            return kvm_errf(KVMESH_EPROTO, "wire: cold backing materialized state missing");
        if (pb->materialized->locator.len == 0 ||
            pb->materialized->locator.len > KVM_COLD_LOCATOR_MAX_LEN)
            return kvm_errf(KVMESH_EPROTO, "wire: cold locator is %zu bytes; must be 1..%d",
                            pb->materialized->locator.len, KVM_COLD_LOCATOR_MAX_LEN);
        out->kind = KVM_COLD_MATERIALIZED;
        out->u.mat.length = pb->materialized->length;
        out->u.mat.checksum = pb->materialized->checksum;
        out->u.mat.locator_len = (uint16_t)pb->materialized->locator.len;
        memcpy(out->u.mat.locator, pb->materialized->locator.data, pb->materialized->locator.len);
        break;
    default:
        return kvm_errf(KVMESH_EPROTO,
                        "wire: cold backing has neither a pending nor a materialized state");
    }
    if (wire_cold_check(out, KVMESH_EPROTO))
        return wire_proto_err("cold backing");
    return 0;
}

static void put_ident(pb_ident *pb, const kvm_ident_t *id)
{
    kvmesh__core__ident__init(pb);
    pb->tenant = bin(kvm_ident_tenant(id), id->tenant_len);
    if (id->domain_len)
        pb->domain = bin(kvm_ident_domain(id), id->domain_len);
    pb->key = bin(kvm_ident_key(id), id->key_len);
}

static int get_ident(const pb_ident *pb, kvm_ident_t *out)
{
    const char *domain = pb->domain.len ? (const char *)pb->domain.data : NULL;
    int rc = kvm_ident_init_n(out, (const char *)pb->tenant.data, pb->tenant.len, domain,
                              pb->domain.len, pb->key.data, pb->key.len);
    if (rc == KVMESH_ENOMEM)
        return rc;
    return rc ? wire_proto_err("ident") : 0;
}

/* ---- ident -------------------------------------------------------------------------------- */

int wire_ident_encode(const kvm_ident_t *in, uint8_t *buf, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (!in->enc)
        return kvm_errf(KVMESH_EINVAL, "wire: cannot encode an empty identity");
    pb_ident pb;
    put_ident(&pb, in);
    return pack_frame(&pb.base, WIRE_SCHEMA_IDENT, buf, cap, out_len);
}

int wire_ident_decode(const uint8_t *buf, size_t len, kvm_ident_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    memset(out, 0, sizeof(*out));
    pb_ident *pb = (pb_ident *)unpack_frame(&kvmesh__core__ident__descriptor, WIRE_SCHEMA_IDENT,
                                            buf, len, &rc, al);
    if (!pb)
        return rc;
    rc = get_ident(pb, out);
    kvmesh__core__ident__free_unpacked(pb, al);
    return rc;
}

/* ---- runtime ------------------------------------------------------------------------------ */

int wire_runtime_encode(const kvm_runtime_t *in, uint8_t *buf, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (kvm_id128_is_nil(&in->id) || in->epoch == 0)
        return kvm_errf(KVMESH_EINVAL, "wire: runtime needs a non-nil id and epoch >= 1");
    pb_runtime pb;
    kvmesh__core__runtime__init(&pb);
    pb.id = bin_id(&in->id);
    pb.epoch = in->epoch;
    return pack_frame(&pb.base, WIRE_SCHEMA_RUNTIME, buf, cap, out_len);
}

int wire_runtime_decode(const uint8_t *buf, size_t len, kvm_runtime_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    memset(out, 0, sizeof(*out));
    pb_runtime *pb = (pb_runtime *)unpack_frame(&kvmesh__core__runtime__descriptor,
                                                WIRE_SCHEMA_RUNTIME, buf, len, &rc, al);
    if (!pb)
        return rc;
    kvm_runtime_t r = {.epoch = pb->epoch};
    rc = get_id(&pb->id, "runtime", &r.id);
    if (!rc && r.epoch == 0)
        rc = kvm_errf(KVMESH_EPROTO, "wire: runtime epoch is 0; epochs start at 1");
    kvmesh__core__runtime__free_unpacked(pb, al);
    if (!rc)
        *out = r;
    return rc;
}

/* ---- route version ------------------------------------------------------------------------ */

int wire_route_version_encode(const kvm_route_version_t *in, uint8_t *buf, size_t cap,
                              size_t *out_len)
{
    pb_version pb;
    put_version(&pb, in);
    return pack_frame(&pb.base, WIRE_SCHEMA_ROUTE_VERSION, buf, cap, out_len);
}

int wire_route_version_decode(const uint8_t *buf, size_t len, kvm_route_version_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    *out = KVM_ROUTE_VERSION_NONE;
    pb_version *pb = (pb_version *)unpack_frame(&kvmesh__core__route_version__descriptor,
                                                WIRE_SCHEMA_ROUTE_VERSION, buf, len, &rc, al);
    if (!pb)
        return rc;
    get_version(pb, out);
    kvmesh__core__route_version__free_unpacked(pb, al);
    return 0;
}

/* ---- op id -------------------------------------------------------------------------------- */

int wire_op_id_encode(const kvm_op_id_t *in, uint8_t *buf, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (!kvm_op_id_is_nil(in) && !kvm_op_id_is_valid(in))
        return kvm_errf(KVMESH_EINVAL, "wire: operation id is neither nil nor valid");
    pb_opid pb;
    kvmesh__core__op_id__init(&pb);
    if (!kvm_op_id_is_nil(in)) {
        pb.writer = bin_id(&in->writer);
        pb.epoch = in->epoch;
        pb.seq = in->seq;
    }
    return pack_frame(&pb.base, WIRE_SCHEMA_OP_ID, buf, cap, out_len);
}

int wire_op_id_decode(const uint8_t *buf, size_t len, kvm_op_id_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    memset(out, 0, sizeof(*out));
    pb_opid *pb = (pb_opid *)unpack_frame(&kvmesh__core__op_id__descriptor, WIRE_SCHEMA_OP_ID, buf,
                                          len, &rc, al);
    if (!pb)
        return rc;
    kvm_op_id_t op = {0};
    if (pb->writer.len == 0 && pb->epoch == 0 && pb->seq == 0)
        rc = 0; /* the nil op id */
    else
        rc = get_opid(pb, true, "standalone", &op);
    kvmesh__core__op_id__free_unpacked(pb, al);
    if (!rc)
        *out = op;
    return rc;
}

/* ---- cold backing ------------------------------------------------------------------------- */

int wire_cold_backing_encode(const kvm_cold_backing_t *in, uint8_t *buf, size_t cap,
                             size_t *out_len)
{
    *out_len = 0;
    int rc = wire_cold_check(in, KVMESH_EINVAL);
    if (rc)
        return rc;
    struct cold_pb s;
    put_cold(&s, in);
    return pack_frame(&s.cold.base, WIRE_SCHEMA_COLD_BACKING, buf, cap, out_len);
}

int wire_cold_backing_decode(const uint8_t *buf, size_t len, kvm_cold_backing_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    memset(out, 0, sizeof(*out));
    pb_cold *pb = (pb_cold *)unpack_frame(&kvmesh__core__cold_backing__descriptor,
                                          WIRE_SCHEMA_COLD_BACKING, buf, len, &rc, al);
    if (!pb)
        return rc;
    rc = get_cold(pb, out);
    kvmesh__core__cold_backing__free_unpacked(pb, al);
    if (rc)
        memset(out, 0, sizeof(*out));
    return rc;
}

/* ---- route: the protobuf-c oracle ----------------------------------------------------------
 * The production route codec is the hand-written one in wire_route.c. These two are the
 * protobuf-c implementation it replaced, kept unchanged and compiled as the differential tests'
 * oracle (wire.h "Test oracle").
 */

int wire_route_encode_pb(const kvm_route_t *in, uint8_t *buf, size_t cap, size_t *out_len)
{
    *out_len = 0;
    if (kvm_route_validate(in) != 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        return kvm_errf(KVMESH_EINVAL, "wire: refusing to encode an invalid route: %s", msg);
    }
    pb_route pb;
    pb_ident ident;
    pb_version version, pred_version;
    pb_opid content_op, pred_op;
    pb_replica reps[KVM_MAX_REPLICAS];
    pb_replica *rep_ptrs[KVM_MAX_REPLICAS];
    struct cold_pb cold;

    kvmesh__core__route__init(&pb);
    put_ident(&ident, &in->ident);
    pb.ident = &ident;
    put_version(&version, &in->version);
    pb.version = &version;
    if (!kvm_route_version_is_none(&in->predecessor_version)) {
        put_version(&pred_version, &in->predecessor_version);
        pb.predecessor_version = &pred_version;
    }
    put_opid(&content_op, &in->content_op, &pb.content_op);
    put_opid(&pred_op, &in->predecessor_op, &pb.predecessor_op);
    pb.length = in->length;
    pb.checksum = in->checksum;
    pb.tomb = (Kvmesh__Core__TombState)in->tomb;
    pb.retain_until_ms = in->retain_until_ms;
    for (uint32_t i = 0; i < in->n_replicas; i++) {
        const kvm_hot_replica_t *r = &in->replicas[i];
        kvmesh__core__hot_replica__init(&reps[i]);
        reps[i].owner = bin_id(&r->owner);
        reps[i].segment = r->segment;
        reps[i].offset = r->offset;
        reps[i].length = r->length;
        reps[i].checksum = r->checksum;
        rep_ptrs[i] = &reps[i];
    }
    pb.n_replicas = in->n_replicas;
    pb.replicas = in->n_replicas ? rep_ptrs : NULL;
    if (in->cold.kind != KVM_COLD_NONE) {
        put_cold(&cold, &in->cold);
        pb.cold = &cold.cold;
    }
    return pack_frame(&pb.base, WIRE_SCHEMA_ROUTE, buf, cap, out_len);
}

static int route_from_pb(const pb_route *pb, kvm_route_t *r)
{
    int rc;
    if (!pb->ident)
        return kvm_errf(KVMESH_EPROTO, "wire: route has no identity");
    if ((rc = get_ident(pb->ident, &r->ident)) != 0)
        return rc;
    get_version(pb->version, &r->version);
    get_version(pb->predecessor_version, &r->predecessor_version);
    if ((rc = get_opid(pb->content_op, true, "route content", &r->content_op)) ||
        (rc = get_opid(pb->predecessor_op, false, "route predecessor", &r->predecessor_op)))
        return rc;
    r->length = pb->length;
    r->checksum = pb->checksum;
    switch (pb->tomb) {
    case KVMESH__CORE__TOMB_STATE__TOMB_NONE:
    case KVMESH__CORE__TOMB_STATE__TOMB_PENDING:
    case KVMESH__CORE__TOMB_STATE__TOMB_FINALIZED:
        r->tomb = (kvm_tomb_state_t)pb->tomb;
        break;
    default:
        return kvm_errf(KVMESH_EPROTO, "wire: route tombstone state %d is unknown", (int)pb->tomb);
    }
    r->retain_until_ms = pb->retain_until_ms;
    if (pb->n_replicas > KVM_MAX_REPLICAS)
        return kvm_errf(KVMESH_EPROTO, "wire: route has %zu hot replicas; the maximum is %d",
                        pb->n_replicas, KVM_MAX_REPLICAS);
    for (size_t i = 0; i < pb->n_replicas; i++) {
        const pb_replica *p = pb->replicas[i];
        kvm_hot_replica_t *h = &r->replicas[i];
        if ((rc = get_id(&p->owner, "replica owner", &h->owner)) != 0)
            return rc;
        h->segment = p->segment;
        h->offset = p->offset;
        h->length = p->length;
        h->checksum = p->checksum;
    }
    r->n_replicas = (uint32_t)pb->n_replicas;
    if (pb->cold && (rc = get_cold(pb->cold, &r->cold)) != 0)
        return rc;
    if (kvm_route_validate(r) != 0)
        return wire_proto_err("route");
    return 0;
}

int wire_route_decode_pb(const uint8_t *buf, size_t len, kvm_route_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    kvm_route_init(out);
    pb_route *pb = (pb_route *)unpack_frame(&kvmesh__core__route__descriptor, WIRE_SCHEMA_ROUTE,
                                            buf, len, &rc, al);
    if (!pb)
        return rc;
    rc = route_from_pb(pb, out);
    kvmesh__core__route__free_unpacked(pb, al);
    if (rc)
        kvm_route_free(out);
    return rc;
}

/* ---- cold reclaim ------------------------------------------------------------------------- */

int wire_cold_reclaim_encode(const kvm_cold_reclaim_t *in, uint8_t *buf, size_t cap,
                             size_t *out_len)
{
    *out_len = 0;
    if (kvm_cold_reclaim_validate(in) != 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
        return kvm_errf(KVMESH_EINVAL, "wire: refusing to encode an invalid record: %s", msg);
    }
    pb_reclaim pb;
    pb_opid a, b, c;
    kvmesh__core__cold_reclaim__init(&pb);
    put_opid(&a, &in->reclaim_op, &pb.reclaim_op);
    put_opid(&b, &in->content_op, &pb.content_op);
    put_opid(&c, &in->cold_op, &pb.cold_op);
    pb.tier = bin_id(&in->tier);
    pb.locator = bin(in->locator, in->locator_len);
    pb.length = in->length;
    pb.state = (Kvmesh__Core__ReclaimState)in->state;
    return pack_frame(&pb.base, WIRE_SCHEMA_COLD_RECLAIM, buf, cap, out_len);
}

static int reclaim_from_pb(const pb_reclaim *pb, kvm_cold_reclaim_t *r)
{
    int rc;
    if ((rc = get_opid(pb->reclaim_op, true, "reclaim", &r->reclaim_op)) ||
        (rc = get_opid(pb->content_op, true, "reclaim content", &r->content_op)) ||
        (rc = get_opid(pb->cold_op, true, "reclaim cold", &r->cold_op)) ||
        (rc = get_id(&pb->tier, "reclaim tier", &r->tier)))
        return rc;
    if (pb->locator.len == 0 || pb->locator.len > KVM_COLD_LOCATOR_MAX_LEN)
        return kvm_errf(KVMESH_EPROTO, "wire: reclaim locator is %zu bytes; must be 1..%d",
                        pb->locator.len, KVM_COLD_LOCATOR_MAX_LEN);
    r->locator_len = (uint16_t)pb->locator.len;
    memcpy(r->locator, pb->locator.data, pb->locator.len);
    r->length = pb->length;
    switch (pb->state) {
    case KVMESH__CORE__RECLAIM_STATE__RECLAIM_PLANNED:
    case KVMESH__CORE__RECLAIM_STATE__RECLAIM_BACKEND_DELETED:
    case KVMESH__CORE__RECLAIM_STATE__RECLAIM_USAGE_RELEASED:
        r->state = (kvm_reclaim_state_t)pb->state;
        break;
    default:
        return kvm_errf(KVMESH_EPROTO, "wire: reclaim state %d is unknown", (int)pb->state);
    }
    if (kvm_cold_reclaim_validate(r) != 0)
        return wire_proto_err("cold reclaim");
    return 0;
}

int wire_cold_reclaim_decode(const uint8_t *buf, size_t len, kvm_cold_reclaim_t *out)
{
    int rc;
    wire_arena_t arena;
    ProtobufCAllocator *al = arena_init(&arena);
    memset(out, 0, sizeof(*out));
    pb_reclaim *pb = (pb_reclaim *)unpack_frame(&kvmesh__core__cold_reclaim__descriptor,
                                                WIRE_SCHEMA_COLD_RECLAIM, buf, len, &rc, al);
    if (!pb)
        return rc;
    rc = reclaim_from_pb(pb, out);
    kvmesh__core__cold_reclaim__free_unpacked(pb, al);
    if (rc)
        memset(out, 0, sizeof(*out));
    return rc;
}
