/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wire.c — wire records: round-trip property tests for every record (random valid records
 * from a fixed seed -> encode -> decode -> equal), framing errors (oversize, wrong schema,
 * newer/older version), semantic rejection of crafted protobuf (replica count, id lengths,
 * locator length, missing oneof, unknown enums, invalid idents ...), truncation and byte-flip
 * robustness, forward compatibility with unknown fields, and encoder refusal of invalid
 * records. With KVMESH_WRITE_SEEDS=<dir> it also writes the fuzz seed corpora
 * (<dir>/wire_<record>/...), which is how tests/fuzz/corpus/ was generated.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "core/util.h"
#include "core/wire.h"
#include "wire_rand.h"
#include "records.pb-c.h"

#define ITERS 10000

/* ---- deterministic random records: tests/support/wire_rand.h ------------------------------ */

static void rnd_reclaim(kvm_cold_reclaim_t *rec)
{
    kvm_cold_backing_t m;
    kvm_op_id_t content = wr_op(), rop = wr_op();
    wr_cold(&m, KVM_COLD_MATERIALIZED, &content, wr_rnd() % 100000, wr_rnd());
    while (kvm_op_id_equal(&rop, &content) || kvm_op_id_equal(&rop, &m.cold_op))
        rop = wr_op();
    kvm_cold_reclaim_plan(rec, &rop, &m);
    uint64_t s = wr_rnd() % 3;
    if (s >= 1)
        kvm_cold_reclaim_set_state(rec, KVM_RECLAIM_BACKEND_DELETED);
    if (s >= 2)
        kvm_cold_reclaim_set_state(rec, KVM_RECLAIM_USAGE_RELEASED);
}

/* ---- round trips -------------------------------------------------------------------------- */

static uint8_t buf[KVM_WIRE_MAX_RECORD_LEN];

static void test_roundtrip_route(void **state)
{
    (void)state;
    wr_seed(0x1234567);
    for (int i = 0; i < ITERS; i++) {
        kvm_route_t a, b;
        wr_route(&a, i % 6);
        assert_int_equal(kvm_route_validate(&a), 0);
        size_t n;
        assert_int_equal(wire_route_encode(&a, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_route_decode(buf, n, &b), 0);
        assert_true(kvm_route_equal(&a, &b));
        /* too small a buffer is an error, never an overflow */
        size_t m;
        assert_int_equal(wire_route_encode(&a, buf, n - 1, &m), KVMESH_ETOOBIG);
        assert_int_equal(m, 0);
        kvm_route_free(&a);
        kvm_route_free(&b);
    }
}

static void test_roundtrip_small_records(void **state)
{
    (void)state;
    wr_seed(0x7654321);
    for (int i = 0; i < ITERS; i++) {
        size_t n;
        kvm_ident_t ia, ib;
        wr_ident(&ia);
        assert_int_equal(wire_ident_encode(&ia, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_ident_decode(buf, n, &ib), 0);
        assert_true(kvm_ident_equal(&ia, &ib));
        kvm_ident_free(&ia);
        kvm_ident_free(&ib);

        kvm_runtime_t ra = {wr_id(), 1 + wr_u64_any() % (UINT64_MAX - 1)}, rb;
        assert_int_equal(wire_runtime_encode(&ra, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_runtime_decode(buf, n, &rb), 0);
        assert_true(kvm_runtime_equal(&ra, &rb));

        kvm_route_version_t va = {wr_u64_any(), wr_u64_any()}, vb;
        assert_int_equal(wire_route_version_encode(&va, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_route_version_decode(buf, n, &vb), 0);
        assert_true(kvm_route_version_equal(&va, &vb));

        kvm_op_id_t oa = i % 10 == 0 ? (kvm_op_id_t){0} : wr_op(), ob;
        assert_int_equal(wire_op_id_encode(&oa, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_op_id_decode(buf, n, &ob), 0);
        assert_true(kvm_op_id_equal(&oa, &ob));

        kvm_cold_backing_t ca, cb;
        kvm_op_id_t content = wr_op();
        wr_cold(&ca, i % 2 ? KVM_COLD_MATERIALIZED : KVM_COLD_PENDING_OFFLOAD, &content,
                wr_u64_any(), wr_rnd());
        assert_int_equal(wire_cold_backing_encode(&ca, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_cold_backing_decode(buf, n, &cb), 0);
        assert_true(kvm_cold_backing_equal(&ca, &cb));

        kvm_cold_reclaim_t ka, kb;
        rnd_reclaim(&ka);
        assert_int_equal(wire_cold_reclaim_encode(&ka, buf, sizeof(buf), &n), 0);
        assert_int_equal(wire_cold_reclaim_decode(buf, n, &kb), 0);
        assert_true(kvm_cold_reclaim_equal(&ka, &kb));
    }
}

/* The largest legal route fits KVM_WIRE_MAX_RECORD_LEN. */
static void test_max_route_fits(void **state)
{
    (void)state;
    wr_seed(99);
    kvm_route_t r, d;
    kvm_route_init(&r);
    char t[KVM_TENANT_MAX_LEN], dm[KVM_DOMAIN_MAX_LEN];
    uint8_t k[KVM_KEY_MAX_LEN];
    memset(t, 'T', sizeof(t));
    memset(dm, 'D', sizeof(dm));
    memset(k, 0xff, sizeof(k));
    assert_int_equal(kvm_ident_init_n(&r.ident, t, sizeof(t), dm, sizeof(dm), k, sizeof(k)), 0);
    r.version = (kvm_route_version_t){UINT64_MAX, UINT64_MAX};
    r.predecessor_version = (kvm_route_version_t){UINT64_MAX, UINT64_MAX - 1};
    r.content_op = (kvm_op_id_t){wr_id(), UINT64_MAX, UINT64_MAX};
    r.predecessor_op = (kvm_op_id_t){wr_id(), UINT64_MAX, UINT64_MAX};
    r.length = UINT64_MAX / 2;
    r.checksum = UINT64_MAX;
    for (int i = 0; i < KVM_MAX_REPLICAS; i++) {
        kvm_hot_replica_t h = {wr_id(), UINT64_MAX, UINT64_MAX / 2, r.length, r.checksum};
        assert_int_equal(kvm_route_add_replica(&r, &h), 0);
    }
    kvm_op_id_t cold = {wr_id(), UINT64_MAX, UINT64_MAX};
    kvm_id128_t o = wr_id(), tier = wr_id();
    kvm_cold_backing_pending(&r.cold, &cold, &r.content_op, &o, &tier, r.length, r.checksum);
    uint8_t loc[KVM_COLD_LOCATOR_MAX_LEN];
    memset(loc, 0xee, sizeof(loc));
    assert_int_equal(kvm_cold_backing_materialize(&r.cold, loc, sizeof(loc), r.length, r.checksum),
                     0);
    size_t n;
    assert_int_equal(wire_route_encode(&r, buf, sizeof(buf), &n), 0);
    print_message("largest route encodes to %zu of %d bytes\n", n, KVM_WIRE_MAX_RECORD_LEN);
    assert_true(n <= KVM_WIRE_MAX_RECORD_LEN);
    assert_int_equal(wire_route_decode(buf, n, &d), 0);
    assert_true(kvm_route_equal(&r, &d));
    kvm_route_free(&r);
    kvm_route_free(&d);
}

/* ---- framing ------------------------------------------------------------------------------ */

static void expect_err(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (needle && !strstr(kvmesh_last_error(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", kvmesh_last_error(), needle);
}

static void test_framing(void **state)
{
    (void)state;
    wr_seed(5);
    kvm_route_t r, d;
    wr_route(&r, 2);
    size_t n;
    assert_int_equal(wire_route_encode(&r, buf, sizeof(buf), &n), 0);
    expect_err(wire_route_decode(buf, KVM_WIRE_MAX_RECORD_LEN + 1, &d), KVMESH_ETOOBIG,
               "maximum record");
    assert_null(d.ident.enc);
    expect_err(wire_route_decode(buf, 3, &d), KVMESH_EPROTO, "shorter than its header");
    expect_err(wire_route_decode(NULL, 0, &d), KVMESH_EPROTO, "shorter than its header");
    kvm_ident_t id;
    expect_err(wire_ident_decode(buf, n, &id), KVMESH_EPROTO, "schema id 6 where 1");
    buf[3] = WIRE_VERSION + 1;
    expect_err(wire_route_decode(buf, n, &d), KVMESH_EINCOMPAT, "newer");
    buf[3] = 0;
    expect_err(wire_route_decode(buf, n, &d), KVMESH_EPROTO, "older");
    buf[3] = WIRE_VERSION;
    assert_int_equal(wire_route_decode(buf, n, &d), 0);
    kvm_route_free(&d);
    /* forward compatibility: an unknown field (number 99, varint) is ignored */
    uint8_t ext[] = {0x98, 0x06, 0x2a}; /* key (99<<3)|0 as varint, value 42 */
    memcpy(buf + n, ext, sizeof(ext));
    assert_int_equal(wire_route_decode(buf, n + sizeof(ext), &d), 0);
    assert_true(kvm_route_equal(&r, &d));
    kvm_route_free(&d);
    /* unknown fields beyond the decoder's 4 KiB stack arena (protobuf-c keeps copies of them):
     * the pieces past it come from malloc and are freed, the route is still read */
    size_t big = n;
    for (int i = 0; big + 204 <= sizeof(buf); i++) {
        uint8_t hdr[] = {0x9a, 0x06, 0xc8, 0x01}; /* field 99, length-delimited, 200 bytes */
        memcpy(buf + big, hdr, sizeof(hdr));
        memset(buf + big + sizeof(hdr), 0x40 + i, 200);
        big += sizeof(hdr) + 200;
    }
    assert_true(big - n > 6000);
    assert_int_equal(wire_route_decode(buf, big, &d), 0);
    assert_true(kvm_route_equal(&r, &d));
    kvm_route_free(&d);
    /* garbage body */
    memset(buf + WIRE_HEADER_LEN, 0xff, 40);
    expect_err(wire_route_decode(buf, WIRE_HEADER_LEN + 40, &d), KVMESH_EPROTO, "malformed");
    kvm_route_free(&r);
    uint8_t hdr[4];
    wire_header_put(hdr, 0x1234, 0x0102);
    uint16_t v;
    assert_int_equal(wire_header_get(hdr, 4, 0x1234, 1, 0x0102, &v), 0);
    assert_int_equal(v, 0x0102);
}

/* Every prefix and every single-byte change of valid encodings either fails with an error or
 * decodes into a record that satisfies all invariants. */
static void test_truncation_and_flips(void **state)
{
    (void)state;
    wr_seed(77);
    for (int it = 0; it < 60; it++) {
        kvm_route_t r, d;
        wr_route(&r, it % 6);
        size_t n;
        assert_int_equal(wire_route_encode(&r, buf, sizeof(buf), &n), 0);
        for (size_t len = 0; len < n; len++) {
            int rc = wire_route_decode(buf, len, &d);
            if (rc == 0) {
                assert_int_equal(kvm_route_validate(&d), 0);
                assert_false(kvm_route_equal(&r, &d));
                kvm_route_free(&d);
            } else {
                assert_true(rc == KVMESH_EPROTO);
                assert_null(d.ident.enc);
            }
        }
        static uint8_t mut[KVM_WIRE_MAX_RECORD_LEN];
        assert_true(n > WIRE_HEADER_LEN);
        for (int f = 0; f < 200; f++) {
            memcpy(mut, buf, n);
            mut[wr_rnd() % n] ^= (uint8_t)(1 + wr_rnd() % 255);
            int rc = wire_route_decode(mut, n, &d);
            if (rc == 0) {
                assert_int_equal(kvm_route_validate(&d), 0);
                kvm_route_free(&d);
            } else {
                assert_true(rc == KVMESH_EPROTO || rc == KVMESH_EINCOMPAT);
            }
        }
        kvm_route_free(&r);
    }
}

/* ---- crafted protobuf with semantic violations ------------------------------------------- */

static size_t pack_raw(const ProtobufCMessage *m, uint16_t schema)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    assert_true(n + WIRE_HEADER_LEN <= sizeof(buf));
    wire_header_put(buf, schema, WIRE_VERSION);
    protobuf_c_message_pack(m, buf + WIRE_HEADER_LEN);
    return n + WIRE_HEADER_LEN;
}

static uint8_t idb[3][16] = {{1}, {2}, {3}};

/* A valid pb route (2 replicas, materialized cold) that tests then break one field at a time. */
struct pbr {
    Kvmesh__Core__Route r;
    Kvmesh__Core__Ident id;
    Kvmesh__Core__RouteVersion v;
    Kvmesh__Core__OpId content, coldop;
    Kvmesh__Core__HotReplica reps[KVM_MAX_REPLICAS + 1];
    Kvmesh__Core__HotReplica *rp[KVM_MAX_REPLICAS + 1];
    Kvmesh__Core__ColdBacking cold;
    Kvmesh__Core__Materialized mat;
};

static void pbr_init(struct pbr *p)
{
    kvmesh__core__route__init(&p->r);
    kvmesh__core__ident__init(&p->id);
    p->id.tenant = (ProtobufCBinaryData){4, (uint8_t *)"acme"};
    p->id.key = (ProtobufCBinaryData){3, (uint8_t *)"key"};
    p->r.ident = &p->id;
    kvmesh__core__route_version__init(&p->v);
    p->v.fencing_token = 2;
    p->v.primary_sequence = 3;
    p->r.version = &p->v;
    kvmesh__core__op_id__init(&p->content);
    p->content.writer = (ProtobufCBinaryData){16, idb[0]};
    p->content.epoch = 1;
    p->content.seq = 1;
    p->r.content_op = &p->content;
    p->coldop = p->content;
    p->coldop.seq = 2;
    p->r.length = 100;
    p->r.checksum = 5;
    for (int i = 0; i <= KVM_MAX_REPLICAS; i++) {
        kvmesh__core__hot_replica__init(&p->reps[i]);
        p->reps[i].owner = (ProtobufCBinaryData){16, idb[1]};
        p->reps[i].offset = (uint64_t)i * 100;
        p->reps[i].length = 100;
        p->reps[i].checksum = 5;
        p->rp[i] = &p->reps[i];
    }
    p->r.replicas = p->rp;
    p->r.n_replicas = 2;
    kvmesh__core__cold_backing__init(&p->cold);
    p->cold.cold_op = &p->coldop;
    p->cold.content_op = &p->content;
    p->cold.owner = (ProtobufCBinaryData){16, idb[2]};
    p->cold.tier = (ProtobufCBinaryData){16, idb[2]};
    kvmesh__core__materialized__init(&p->mat);
    p->mat.locator = (ProtobufCBinaryData){3, (uint8_t *)"loc"};
    p->mat.length = 100;
    p->mat.checksum = 5;
    p->cold.state_case = KVMESH__CORE__COLD_BACKING__STATE_MATERIALIZED;
    p->cold.materialized = &p->mat;
    p->r.cold = &p->cold;
}

static void expect_route_reject(struct pbr *p, const char *needle)
{
    kvm_route_t d;
    size_t n = pack_raw(&p->r.base, WIRE_SCHEMA_ROUTE);
    expect_err(wire_route_decode(buf, n, &d), KVMESH_EPROTO, needle);
    assert_null(d.ident.enc);
}

static void test_semantic_rejects(void **state)
{
    (void)state;
    struct pbr p;
    kvm_route_t d;
    pbr_init(&p);
    size_t n = pack_raw(&p.r.base, WIRE_SCHEMA_ROUTE);
    assert_int_equal(wire_route_decode(buf, n, &d), 0); /* the baseline is valid */
    kvm_route_free(&d);

    pbr_init(&p);
    p.r.n_replicas = KVM_MAX_REPLICAS + 1;
    expect_route_reject(&p, "9 hot replicas");
    pbr_init(&p);
    p.reps[1].owner.len = 15;
    expect_route_reject(&p, "replica owner id is 15 bytes");
    pbr_init(&p);
    p.reps[1].owner.data = (uint8_t *)"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    p.reps[1].owner.len = 16;
    expect_route_reject(&p, "replica owner id is nil");
    pbr_init(&p);
    p.reps[1].offset = 0; /* same slot as replica 0 */
    expect_route_reject(&p, "share a slot");
    pbr_init(&p);
    p.reps[0].length = 99;
    expect_route_reject(&p, "length/checksum");
    pbr_init(&p);
    p.r.ident = NULL;
    expect_route_reject(&p, "no identity");
    pbr_init(&p);
    p.id.tenant = (ProtobufCBinaryData){4, (uint8_t *)"a\0bc"};
    expect_route_reject(&p, "ident: tenant has a disallowed byte 0x00");
    pbr_init(&p);
    p.id.key = (ProtobufCBinaryData){0, NULL};
    expect_route_reject(&p, "ident: key is empty");
    pbr_init(&p);
    p.r.version = NULL;
    expect_route_reject(&p, "version is none");
    pbr_init(&p);
    p.r.content_op = NULL;
    expect_route_reject(&p, "route content operation id is missing");
    pbr_init(&p);
    p.content.epoch = 0;
    expect_route_reject(&p, "epoch >= 1");
    pbr_init(&p);
    p.r.tomb = (Kvmesh__Core__TombState)7;
    expect_route_reject(&p, "tombstone state 7");
    pbr_init(&p);
    p.cold.state_case = KVMESH__CORE__COLD_BACKING__STATE__NOT_SET;
    expect_route_reject(&p, "neither a pending nor a materialized");
    pbr_init(&p);
    static uint8_t longloc[KVM_COLD_LOCATOR_MAX_LEN + 1];
    p.mat.locator = (ProtobufCBinaryData){sizeof(longloc), longloc};
    expect_route_reject(&p, "locator is 257 bytes");
    pbr_init(&p);
    p.mat.locator.len = 0;
    expect_route_reject(&p, "locator is 0 bytes");
    pbr_init(&p);
    p.mat.checksum = 6;
    expect_route_reject(&p, "materialized backing has another");
    pbr_init(&p);
    p.cold.content_op = &p.coldop;
    expect_route_reject(&p, "cold and content operation ids are equal");
    pbr_init(&p);
    p.cold.tier.len = 0;
    expect_route_reject(&p, "cold backing tier id is 0 bytes");
    pbr_init(&p);
    p.r.n_replicas = 0; /* cold-only: valid */
    n = pack_raw(&p.r.base, WIRE_SCHEMA_ROUTE);
    assert_int_equal(wire_route_decode(buf, n, &d), 0);
    kvm_route_free(&d);
    p.r.tomb = KVMESH__CORE__TOMB_STATE__TOMB_PENDING;
    expect_route_reject(&p, "tombstone references");

    /* standalone records */
    Kvmesh__Core__Runtime rt = KVMESH__CORE__RUNTIME__INIT;
    rt.id = (ProtobufCBinaryData){16, idb[0]};
    kvm_runtime_t rr;
    n = pack_raw(&rt.base, WIRE_SCHEMA_RUNTIME);
    expect_err(wire_runtime_decode(buf, n, &rr), KVMESH_EPROTO, "epoch is 0");
    rt.epoch = 1;
    rt.id.len = 17;
    n = pack_raw(&rt.base, WIRE_SCHEMA_RUNTIME);
    expect_err(wire_runtime_decode(buf, n, &rr), KVMESH_EPROTO, "17 bytes");

    Kvmesh__Core__OpId o = KVMESH__CORE__OP_ID__INIT;
    kvm_op_id_t oo;
    o.seq = 3; /* no writer */
    n = pack_raw(&o.base, WIRE_SCHEMA_OP_ID);
    expect_err(wire_op_id_decode(buf, n, &oo), KVMESH_EPROTO, "0 bytes");

    Kvmesh__Core__ColdReclaim rc = KVMESH__CORE__COLD_RECLAIM__INIT;
    Kvmesh__Core__OpId o1 = p.content, o2 = p.coldop, o3 = p.coldop;
    o3.seq = 3;
    rc.reclaim_op = &o3;
    rc.content_op = &o1;
    rc.cold_op = &o2;
    rc.tier = (ProtobufCBinaryData){16, idb[2]};
    rc.locator = (ProtobufCBinaryData){1, (uint8_t *)"x"};
    kvm_cold_reclaim_t kr;
    n = pack_raw(&rc.base, WIRE_SCHEMA_COLD_RECLAIM);
    expect_err(wire_cold_reclaim_decode(buf, n, &kr), KVMESH_EPROTO, "reclaim state 0");
    rc.state = KVMESH__CORE__RECLAIM_STATE__RECLAIM_PLANNED;
    n = pack_raw(&rc.base, WIRE_SCHEMA_COLD_RECLAIM);
    assert_int_equal(wire_cold_reclaim_decode(buf, n, &kr), 0);
    rc.cold_op = &o3;
    n = pack_raw(&rc.base, WIRE_SCHEMA_COLD_RECLAIM);
    expect_err(wire_cold_reclaim_decode(buf, n, &kr), KVMESH_EPROTO, "distinct");

    Kvmesh__Core__ColdBacking cb = p.cold;
    cb.state_case = KVMESH__CORE__COLD_BACKING__STATE__NOT_SET;
    kvm_cold_backing_t cbo;
    n = pack_raw(&cb.base, WIRE_SCHEMA_COLD_BACKING);
    expect_err(wire_cold_backing_decode(buf, n, &cbo), KVMESH_EPROTO, "neither");
    assert_int_equal(cbo.kind, KVM_COLD_NONE);
}

static void test_encoder_refuses_invalid(void **state)
{
    (void)state;
    wr_seed(3);
    size_t n = 1;
    kvm_route_t r;
    wr_route(&r, 0);
    r.replicas[0].length++;
    expect_err(wire_route_encode(&r, buf, sizeof(buf), &n), KVMESH_EINVAL,
               "refusing to encode an invalid route");
    assert_int_equal(n, 0);
    kvm_route_free(&r);
    kvm_ident_t empty = {0};
    expect_err(wire_ident_encode(&empty, buf, sizeof(buf), &n), KVMESH_EINVAL, "empty identity");
    kvm_runtime_t rt = {kvm_id128_from_u64(0, 1), 0};
    expect_err(wire_runtime_encode(&rt, buf, sizeof(buf), &n), KVMESH_EINVAL, "epoch >= 1");
    kvm_op_id_t half = {kvm_id128_from_u64(0, 1), 0, 1};
    expect_err(wire_op_id_encode(&half, buf, sizeof(buf), &n), KVMESH_EINVAL, "neither nil");
    kvm_cold_backing_t none = {0};
    expect_err(wire_cold_backing_encode(&none, buf, sizeof(buf), &n), KVMESH_EINVAL,
               "kind is none");
    kvm_cold_reclaim_t rec;
    rnd_reclaim(&rec);
    rec.locator_len = 0;
    expect_err(wire_cold_reclaim_encode(&rec, buf, sizeof(buf), &n), KVMESH_EINVAL, "locator");
    kvm_route_version_t v = {1, 2};
    expect_err(wire_route_version_encode(&v, buf, 3, &n), KVMESH_ETOOBIG, "buffer has 3");
}

/* ---- fuzz seed writer (run once with KVMESH_WRITE_SEEDS=tests/fuzz/corpus) ---------------- */

static void write_seed(const char *root, const char *name, int idx, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, name);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", path, strerror(errno));
    snprintf(path, sizeof(path), "%s/%s/seed-%03d", root, name, idx);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Writes `n` valid encodings plus truncated, flipped, header-only and garbage variants. */
static void write_set(const char *root, const char *name, uint8_t enc[][KVM_WIRE_MAX_RECORD_LEN],
                      const size_t *len, int n)
{
    int idx = 0;
    for (int i = 0; i < n; i++) {
        write_seed(root, name, idx++, enc[i], len[i]);
        write_seed(root, name, idx++, enc[i], len[i] / 2); /* truncated */
        static uint8_t m[KVM_WIRE_MAX_RECORD_LEN];
        memcpy(m, enc[i], len[i]);
        m[len[i] - 1] ^= 0x5a; /* flipped last byte */
        write_seed(root, name, idx++, m, len[i]);
    }
    write_seed(root, name, idx++, enc[0], WIRE_HEADER_LEN);
    uint8_t g[64];
    for (size_t i = 0; i < sizeof(g); i++)
        g[i] = (uint8_t)wr_rnd();
    write_seed(root, name, idx++, g, sizeof(g));
    write_seed(root, name, idx++, g, 0);
}

static void test_write_seeds(void **state)
{
    (void)state;
    const char *root = getenv("KVMESH_WRITE_SEEDS");
    if (!root) {
        print_message("KVMESH_WRITE_SEEDS not set: seed corpora not rewritten\n");
        return;
    }
    static uint8_t enc[6][KVM_WIRE_MAX_RECORD_LEN];
    size_t len[6];
    wr_seed(0xfeed);
    for (int i = 0; i < 6; i++) {
        kvm_route_t r;
        wr_route(&r, i);
        assert_int_equal(wire_route_encode(&r, enc[i], sizeof(enc[i]), &len[i]), 0);
        kvm_route_free(&r);
    }
    write_set(root, "wire_route", enc, len, 6);
    for (int i = 0; i < 4; i++) {
        kvm_ident_t id;
        wr_ident(&id);
        assert_int_equal(wire_ident_encode(&id, enc[i], sizeof(enc[i]), &len[i]), 0);
        kvm_ident_free(&id);
    }
    write_set(root, "wire_ident", enc, len, 4);
    for (int i = 0; i < 4; i++) {
        kvm_runtime_t rt = {wr_id(), 1 + (uint64_t)i * 1000};
        assert_int_equal(wire_runtime_encode(&rt, enc[i], sizeof(enc[i]), &len[i]), 0);
    }
    write_set(root, "wire_runtime", enc, len, 4);
    for (int i = 0; i < 4; i++) {
        kvm_route_version_t v = {wr_u64_any(), wr_u64_any()};
        assert_int_equal(wire_route_version_encode(&v, enc[i], sizeof(enc[i]), &len[i]), 0);
    }
    write_set(root, "wire_route_version", enc, len, 4);
    for (int i = 0; i < 4; i++) {
        kvm_op_id_t o = i == 0 ? (kvm_op_id_t){0} : wr_op();
        assert_int_equal(wire_op_id_encode(&o, enc[i], sizeof(enc[i]), &len[i]), 0);
    }
    write_set(root, "wire_op_id", enc, len, 4);
    for (int i = 0; i < 4; i++) {
        kvm_cold_backing_t c;
        kvm_op_id_t content = wr_op();
        wr_cold(&c, i % 2 ? KVM_COLD_MATERIALIZED : KVM_COLD_PENDING_OFFLOAD, &content, wr_rnd(),
                wr_rnd());
        assert_int_equal(wire_cold_backing_encode(&c, enc[i], sizeof(enc[i]), &len[i]), 0);
    }
    write_set(root, "wire_cold_backing", enc, len, 4);
    for (int i = 0; i < 4; i++) {
        kvm_cold_reclaim_t rec;
        rnd_reclaim(&rec);
        assert_int_equal(wire_cold_reclaim_encode(&rec, enc[i], sizeof(enc[i]), &len[i]), 0);
    }
    write_set(root, "wire_cold_reclaim", enc, len, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_route),
        cmocka_unit_test(test_roundtrip_small_records),
        cmocka_unit_test(test_max_route_fits),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_truncation_and_flips),
        cmocka_unit_test(test_semantic_rejects),
        cmocka_unit_test(test_encoder_refuses_invalid),
        cmocka_unit_test(test_write_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
