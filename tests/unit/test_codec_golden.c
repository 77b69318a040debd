/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_codec_golden.c — golden bytes of every hand-written wire format: known messages of the
 * RPC frame header, the env envelopes (rpc and store), the data-plane headers, the route
 * messages, the shard record and policy, and the store bodies are encoded and compared byte for
 * byte with bytes captured from the encoders before they moved onto core/bytes.h (the batched
 * cold read: captured when it was added); each golden byte string is also decoded and
 * re-encoded to the same bytes. A layout change of any of
 * these formats fails here (and needs a version bump and new golden bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/hex.h"
#include "codec_fixture.h"
#include "kvmesh.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/rpc.h"
#include "net/transport_wire.h"
#include "obs/trace.h"
#include "route/route_int.h"
#include "route/route_msg.h"
#include "store/proto.h"

/* Compares buf[0..len) with the hex string; prints the actual bytes on a mismatch. */
static void check_hex(const char *name, const uint8_t *buf, size_t len, const char *hex)
{
    char *got = malloc(2 * len + 1);
    assert_non_null(got);
    kvm_hex_encode(buf, len, got);
    if (strcmp(got, hex) != 0)
        print_error("%s: got %s\n", name, got);
    assert_string_equal(got, hex);
    free(got);
}

static void check_sum(size_t len, uint64_t x, size_t want_len, uint64_t want_x)
{
    assert_int_equal(len, want_len);
    assert_true(x == want_x);
}

/* ---- RPC frame header (big-endian) ----------------------------------------------------------- */

static const char *const frame_req_hex =
    "4b564d52010512340102030405060708000005dc0000004d00000000001000000102030405060708"
    "090a0b0c0d0e0f10f0f1f2f3f4f5f6f70100000000000000";
static const char *const frame_hello_hex =
    "4b564d52010100000000000000000000000000000000002000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000";

static void test_frame(void **state)
{
    (void)state;
    struct frame_header h = fixture_frame_header();
    uint8_t b[FRAME_FIXED_SIZE], again[FRAME_FIXED_SIZE];
    frame_encode(&h, b);
    check_hex("frame request", b, sizeof(b), frame_req_hex);
    struct frame_header d;
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 30, &d), FRAME_OK);
    frame_encode(&d, again);
    assert_memory_equal(b, again, sizeof(b));

    struct frame_header hello = {.kind = FRAME_HELLO, .header_len = 32};
    frame_encode(&hello, b);
    check_hex("frame hello", b, sizeof(b), frame_hello_hex);
    assert_int_equal(frame_decode(b, sizeof(b), 1u << 30, &d), FRAME_OK);
    frame_encode(&d, again);
    assert_memory_equal(b, again, sizeof(b));
}

/* The RPC env envelope (rpc_env_notify's body): u32be from node | u32be env type. */
static void test_rpc_env(void **state)
{
    (void)state;
    static const uint8_t golden[] = {0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d};
    struct rpc_request req = {.type = RPC_TYPE_ENV_MESSAGE, .body = golden, .body_len = 8};
    uint32_t from = 0, type = 0;
    assert_int_equal(rpc_env_decode(&req, &from, &type), 0);
    assert_int_equal(from, 0x01020304u);
    assert_int_equal(type, 0x0a0b0c0du);
    req.body_len = 7;
    assert_int_equal(rpc_env_decode(&req, &from, &type), KVMESH_EPROTO);
}

/* ---- data plane (little-endian) -------------------------------------------------------------- */

static const char *const tpw_req_hex =
    "4b565444010200000706050403020100110000000000000022000000000000000030000000000000"
    "44000000000000ff";
static const char *const tpw_resp_ok_hex =
    "4b5654520000000000000000000000000900000000000000a000000000000000";
static const char *const tpw_resp_err_hex =
    "4b565452b68affff050000000000000009000000000000000000000000000000";
static const char *const tpw_shmq_hex = "4b5653510100010001000000000000000200000000000000";
static const char *const tpw_shmr_hex =
    "4b565352000000000000000003000000001000000000000001000000000000000001000000000000"
    "0002000000000000050000000000000006000000000000000000000000000000";

static void test_transport_wire(void **state)
{
    (void)state;
    uint8_t b[TPW_SHMR_SIZE], again[TPW_SHMR_SIZE];

    struct tpw_req q = {.op = 2,
                        .req_id = 0x0001020304050607ull,
                        .seg_id = 0x11,
                        .offset = 0x22,
                        .length = 0x3000,
                        .token = 0xff00000000000044ull},
                   qd;
    tpw_req_encode(&q, b);
    check_hex("tpw req", b, TPW_REQ_SIZE, tpw_req_hex);
    assert_int_equal(tpw_req_decode(b, TPW_REQ_SIZE, &qd), 0);
    tpw_req_encode(&qd, again);
    assert_memory_equal(b, again, TPW_REQ_SIZE);

    struct tpw_resp r = {.status = KVMESH_ERANGE, .reason = SEG_R_RANGE, .req_id = 9}, rd;
    struct tpw_resp ok = {.status = 0, .reason = 0, .req_id = 9, .length = 0xa0};
    tpw_resp_encode(&ok, b);
    check_hex("tpw resp", b, TPW_RESP_SIZE, tpw_resp_ok_hex);
    assert_int_equal(tpw_resp_decode(b, TPW_RESP_SIZE, &rd), 0);
    tpw_resp_encode(&rd, again);
    assert_memory_equal(b, again, TPW_RESP_SIZE);
    tpw_resp_encode(&r, b);
    check_hex("tpw resp error", b, TPW_RESP_SIZE, tpw_resp_err_hex);
    assert_int_equal(tpw_resp_decode(b, TPW_RESP_SIZE, &rd), 0);
    tpw_resp_encode(&rd, again);
    assert_memory_equal(b, again, TPW_RESP_SIZE);

    struct tpw_shmq sq = {.flags = TPW_SHMQ_WANT_FD, .seg_id = 1, .token = 2}, sqd;
    tpw_shmq_encode(&sq, b);
    check_hex("tpw shmq", b, TPW_SHMQ_SIZE, tpw_shmq_hex);
    assert_int_equal(tpw_shmq_decode(b, TPW_SHMQ_SIZE, &sqd), 0);
    tpw_shmq_encode(&sqd, again);
    assert_memory_equal(b, again, TPW_SHMQ_SIZE);

    struct tpw_shmr sr = {.seg_size = 4096,
                          .grant = {.seg_id = 1,
                                    .offset = 256,
                                    .length = 512,
                                    .rights = 3,
                                    .expiry_ns = 5,
                                    .token = 6}},
                    srd;
    tpw_shmr_encode(&sr, b);
    check_hex("tpw shmr", b, TPW_SHMR_SIZE, tpw_shmr_hex);
    assert_int_equal(tpw_shmr_decode(b, TPW_SHMR_SIZE, &srd), 0);
    tpw_shmr_encode(&srd, again);
    assert_memory_equal(b, again, TPW_SHMR_SIZE);
}

/* ---- route protocol (little-endian) ---------------------------------------------------------- */

static void fill_msg(route_msg_t *m, uint16_t kind, kvm_route_t *routes)
{
    route_msg_init(m, kind);
    m->req_id = 42 + kind;
    m->shard = 7;
    m->generation = 5;
    m->token = 9;
    m->status = KVMESH_ESTALE_GENERATION;
    m->target = (kvm_runtime_t){.id = kvm_id128_from_u64(1, 1), .epoch = 4};
    m->expected = (kvm_route_version_t){2, 8};
    m->owner = kvm_id128_from_u64(0xAB, 0xCD);
    m->limit = 17;
    m->remaining_ns = 123456789;
    m->flags = RMSG_INSTALL_BEGIN;
    m->primary = (kvm_runtime_t){.id = kvm_id128_from_u64(5, 6), .epoch = 7};
    m->primary_node = 11;
    m->n_set = 2;
    m->set[0] = (route_msg_member_t){.rt = {.id = kvm_id128_from_u64(2, 2), .epoch = 1}, .node = 1};
    m->set[1] = (route_msg_member_t){.rt = {.id = kvm_id128_from_u64(3, 3), .epoch = 2}, .node = 3};
    m->more = kind == RMSG_FETCH_RESP;
    uint32_t n = 0;
    if (kind == RMSG_CAS_REQ || kind == RMSG_MIRROR_REQ || kind == RMSG_REPAIR ||
        kind == RMSG_CAS_RESP || kind == RMSG_READ_RESP)
        n = 1;
    else if (kind == RMSG_FETCH_RESP || kind == RMSG_OWNER_RESP || kind == RMSG_INSTALL_REQ)
        n = 3;
    if (kind == RMSG_CAS_CLAIM_REQ || kind == RMSG_CAS_CLAIM_RESP) {
        static uint8_t claim[] = "claim";
        n = 1;
        m->claim = claim;
        m->claim_len = sizeof(claim);
    }
    m->n_routes = n;
    m->routes = routes;
    if (kind == RMSG_READ_REQ || kind == RMSG_FETCH_REQ || kind == RMSG_OWNER_REQ) {
        m->has_ident = true;
        m->ident = routes[1].ident;
    }
}

/* Full bytes of the kinds without routes; for every kind, the length and XXH3-64 of the bytes. */
static const char *const rmsg_grant_resp_hex =
    "5201080032000000000000000700000005000000000000000900000000000000c98affff00000000"
    "00000001000000000000000104000000000000000200000000000000080000000000000000000000"
    "00000000ab00000000000000cd1100000015cd5b0700000000010000000000000000000005000000"
    "000000000607000000000000000b0000000200000000000000000000020000000000000002010000"
    "00000000000100000000000000000000030000000000000003020000000000000003000000000000"
    "0000";
static const char *const rmsg_read_req_hex =
    "520103002d000000000000000700000005000000000000000900000000000000c98affff00000000"
    "00000001000000000000000104000000000000000200000000000000080000000000000001100000"
    "00000100010a0674656e616e741a026b3100000000000000ab00000000000000cd1100000015cd5b"
    "0700000000010000000000000000000005000000000000000607000000000000000b000000020000"
    "00000000000000000200000000000000020100000000000000010000000000000000000003000000"
    "00000000030200000000000000030000000000000000";
static const struct {
    size_t len;
    uint64_t xxh;
} rmsg_sums[RMSG_KIND_MAX + 1] = {
    [0] = {0, 0},
    [RMSG_CAS_REQ] = {300, 0x303f1a09d0698e68ull},
    [RMSG_CAS_RESP] = {300, 0x797ef6c1f85b1b6cull},
    [RMSG_READ_REQ] = {222, 0x3e0f2208b30a4736ull},
    [RMSG_READ_RESP] = {300, 0x31902cc88e076740ull},
    [RMSG_MIRROR_REQ] = {300, 0xc52851f90d18ee28ull},
    [RMSG_MIRROR_RESP] = {202, 0x760b1c23eac7d102ull},
    [RMSG_GRANT_REQ] = {202, 0x5fdc1659936f9fbdull},
    [RMSG_GRANT_RESP] = {202, 0x5997637905e50767ull},
    [RMSG_FETCH_REQ] = {222, 0x0d82c66647749f96ull},
    [RMSG_FETCH_RESP] = {498, 0x9ee684e16ff02f0cull},
    [RMSG_INSTALL_REQ] = {498, 0x11b869cdc7148e44ull},
    [RMSG_INSTALL_RESP] = {202, 0xff906af58857e6dbull},
    [RMSG_REPAIR] = {300, 0x047b85ea639b02feull},
    [RMSG_OWNER_REQ] = {222, 0x91f6175bf9640b9full},
    [RMSG_OWNER_RESP] = {498, 0x8b3e5d5400e16215ull},
    [RMSG_CAS_CLAIM_REQ] = {310, 0xa2d63a7de470c878ull},
    [RMSG_CAS_CLAIM_RESP] = {310, 0xf6dd447216a54cb8ull},
};

static void test_route_msg(void **state)
{
    (void)state;
    kvm_route_t routes[3];
    for (int i = 0; i < 3; i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%d", i);
        fixture_route(&routes[i], k, (uint64_t)i + 1, (uint64_t)i + 1);
    }
    uint8_t *buf = malloc(ROUTE_MSG_MAX_LEN), *again = malloc(ROUTE_MSG_MAX_LEN);
    assert_non_null(buf);
    assert_non_null(again);
    for (uint16_t kind = 1; kind <= RMSG_KIND_MAX; kind++) {
        if (!strcmp(route_msg_kind_name(kind), "unknown") || kind == RMSG_BATCH)
            continue; /* a free kind number, or the batch container (test_route_msg.c) */
        route_msg_t m, d;
        fill_msg(&m, kind, routes);
        size_t len = 0, len2 = 0;
        assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
        if (kind == RMSG_GRANT_RESP)
            check_hex("route grant_resp", buf, len, rmsg_grant_resp_hex);
        if (kind == RMSG_READ_REQ)
            check_hex("route read_req", buf, len, rmsg_read_req_hex);
        uint64_t x = XXH3_64bits(buf, len);
        if (rmsg_sums[kind].len != len || rmsg_sums[kind].xxh != x)
            print_error("route %s: got {%zu, 0x%016llxull}\n", route_msg_kind_name(kind), len,
                        (unsigned long long)x);
        check_sum(len, x, rmsg_sums[kind].len, rmsg_sums[kind].xxh);
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + kind, buf, len, &d), 0);
        assert_int_equal(route_msg_encode(&d, again, ROUTE_MSG_MAX_LEN, &len2), 0);
        assert_int_equal(len2, len);
        assert_memory_equal(buf, again, len);
        route_msg_clear(&d);
    }
    free(buf);
    free(again);
    for (int i = 0; i < 3; i++)
        kvm_route_free(&routes[i]);
}

static const char *const route_rec_hex =
    "53010807060504030201630000000000000002000000000000000100000000000000020300000000"
    "00000004000000fbffffffffffffff02000000000000000000000100000000000000020300000000"
    "00000004000000000000000000000600000000000000070800000000000000090000000100000000"
    "000000000000060000000000000007080000000000000009000000";
static const char *const route_policy_hex = "500101000000030000000010000002000000";

static void test_route_rec(void **state)
{
    (void)state;
    route_rec_t rec = {.generation = 0x0102030405060708ull,
                       .token = 99,
                       .state = ROUTE_REC_ACTIVE,
                       .primary = {.id = kvm_id128_from_u64(1, 2), .epoch = 3},
                       .primary_node = 4,
                       .lease = -5,
                       .n_set = 2,
                       .n_src = 1};
    rec.set[0] =
        (route_msg_member_t){.rt = {.id = kvm_id128_from_u64(1, 2), .epoch = 3}, .node = 4};
    rec.set[1] =
        (route_msg_member_t){.rt = {.id = kvm_id128_from_u64(6, 7), .epoch = 8}, .node = 9};
    rec.src[0] = rec.set[1];
    uint8_t b[ROUTE_REC_MAX_LEN], again[ROUTE_REC_MAX_LEN];
    size_t n = 0, n2 = 0;
    assert_int_equal(route_rec_encode(&rec, b, sizeof(b), &n), 0);
    check_hex("route record", b, n, route_rec_hex);
    route_rec_t d;
    assert_int_equal(route_rec_decode(b, n, &d), 0);
    assert_int_equal(route_rec_encode(&d, again, sizeof(again), &n2), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(b, again, n);

    route_policy_t p = {.mode = 1, .top_k = 3, .n_shards = 4096, .protocol_version = 2}, pd;
    assert_int_equal(route_policy_encode(&p, b, sizeof(b), &n), 0);
    check_hex("route policy", b, n, route_policy_hex);
    assert_int_equal(route_policy_decode(b, n, &pd), 0);
    assert_int_equal(route_policy_encode(&pd, again, sizeof(again), &n2), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(b, again, n);
}

/* ---- store bodies (little-endian) ------------------------------------------------------------ */

static const char *const store_reserve_req_hex =
    "0103000000000000000000100000000000307500000f000102746e03646f6d00056b65792d31";
static const char *const store_reserve_resp_hex =
    "01000000000000000010000000000000fecaefbeadde0000";
static const char *const store_slot_hex = "01020000000000000003000000000000000400000000000000";
/* COMMIT / RELEASE version 2: the slot's identity (token and object; object only) */
static const char *const store_slot_v2_hex =
    "0202000000000000000300000000000000040000000000000003fecaefbeadde0000887766554433"
    "22110000010000000000";
static const char *const store_slot_v2_obj_hex =
    "02020000000000000003000000000000000400000000000000020000000000000000887766554433"
    "22110000010000000000";
static const char *const store_hit_hex =
    "01030001000000000000000001000000000000020000000000000000020000000000000300000000"
    "0000000003000000000000";

static void test_store_proto(void **state)
{
    (void)state;
    uint8_t b[STORE_PROTO_MAX], again[STORE_PROTO_MAX];
    size_t n = 0, n2 = 0;

    store_reserve_req_t rq = {.target_epoch = 3, .length = 1u << 20, .ttl_ms = 30000}, rqd;
    assert_int_equal(kvm_ident_init(&rq.ident, "tn", "dom", "key-1", 5), 0);
    assert_int_equal(store_reserve_req_encode(&rq, b, sizeof(b), &n), 0);
    check_hex("store reserve req", b, n, store_reserve_req_hex);
    assert_int_equal(store_reserve_req_decode(b, n, &rqd), 0);
    assert_int_equal(store_reserve_req_encode(&rqd, again, sizeof(again), &n2), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(b, again, n);
    kvm_ident_free(&rqd.ident);
    kvm_ident_free(&rq.ident);

    store_reserve_resp_t rs = {.seg = 1, .offset = 0x1000, .token = 0xDEADBEEFCAFEull}, rsd;
    assert_int_equal(store_reserve_resp_encode(&rs, b, sizeof(b), &n), 0);
    check_hex("store reserve resp", b, n, store_reserve_resp_hex);
    assert_int_equal(store_reserve_resp_decode(b, n, &rsd), 0);
    assert_int_equal(store_reserve_resp_encode(&rsd, again, sizeof(again), &n2), 0);
    assert_memory_equal(b, again, n);

    store_slot_msg_t sl = {.target_epoch = 2, .seg = 3, .offset = 4}, sld;
    assert_int_equal(store_slot_msg_encode(&sl, b, sizeof(b), &n), 0);
    check_hex("store slot", b, n, store_slot_hex);
    assert_int_equal(store_slot_msg_decode(b, n, &sld), 0);
    assert_int_equal(sld.has, 0); /* version 1, an older peer's: no identity */
    assert_int_equal(store_slot_msg_encode(&sld, again, sizeof(again), &n2), 0);
    assert_memory_equal(b, again, n);
    sl = (store_slot_msg_t){.target_epoch = 2,
                            .seg = 3,
                            .offset = 4,
                            .has = STORE_SLOT_HAS_TOKEN | STORE_SLOT_HAS_OBJECT,
                            .token = 0xDEADBEEFCAFEull,
                            .ident_hash = 0x1122334455667788ull,
                            .len = 0x10000};
    assert_int_equal(store_slot_msg_encode(&sl, b, sizeof(b), &n), 0);
    assert_int_equal(n, STORE_SLOT_MSG_MAX);
    check_hex("store slot v2", b, n, store_slot_v2_hex);
    assert_int_equal(store_slot_msg_decode(b, n, &sld), 0);
    assert_true(sld.has == sl.has && sld.token == sl.token && sld.ident_hash == sl.ident_hash &&
                sld.len == sl.len && sld.seg == 3 && sld.offset == 4);
    assert_int_equal(store_slot_msg_encode(&sld, again, sizeof(again), &n2), 0);
    assert_memory_equal(b, again, n);
    sl.has = STORE_SLOT_HAS_OBJECT;
    sl.token = 0;
    assert_int_equal(store_slot_msg_encode(&sl, b, sizeof(b), &n), 0);
    check_hex("store slot v2 object", b, n, store_slot_v2_obj_hex);
    b[25] = 0; /* version 2 without identity bits, and a short one: refused */
    assert_int_equal(store_slot_msg_decode(b, n, &sld), KVMESH_EPROTO);
    b[25] = STORE_SLOT_HAS_OBJECT;
    assert_int_equal(store_slot_msg_decode(b, n - 1, &sld), KVMESH_EPROTO);
    b[0] = 3;
    assert_int_equal(store_slot_msg_decode(b, n, &sld), KVMESH_EPROTO);

    static store_hit_msg_t h, hd;
    h.n = 3;
    for (uint16_t i = 0; i < h.n; i++) {
        h.slots[i].seg = i + 1u;
        h.slots[i].offset = (i + 1u) * 0x100u;
    }
    assert_int_equal(store_hit_msg_encode(&h, b, sizeof(b), &n), 0);
    check_hex("store hit", b, n, store_hit_hex);
    assert_int_equal(store_hit_msg_decode(b, n, &hd), 0);
    assert_int_equal(store_hit_msg_encode(&hd, again, sizeof(again), &n2), 0);
    assert_memory_equal(b, again, n);
}

/* STORE_RPC_COLD_READ_BATCH (batch restore): its own version byte (STORE_COLD_BATCH_VERSION),
 * the owner, then per item five u64le fields and the canonical identity (lp16); the response
 * per item status i32le and five u64le. Another version is refused naming both. */
static const char *const cold_batch_req_hex =
    "010102030405060708090a0b0c0d0e0f10020011000000000000002200000000000000000001000000000000eeffc0"
    "00"
    "00000033000000000000000c000102746e03646f6d00026b3112000000000000002300000000000000000001000000"
    "00"
    "0001eeffc00000000033000000000000000c000102746e03646f6d00026b32";
static const char *const cold_batch_resp_hex =
    "01020000000000070000000000000040000000000000000000010000000000ab000000000000000100010000000000"
    "bf"
    "8affff00000000000000000000000000000000000000000000000000000000000000000000000000000000";

static void test_store_cold_batch(void **state)
{
    (void)state;
    static uint8_t b[STORE_COLD_BATCH_REQ_MAX(2)], again[STORE_COLD_BATCH_REQ_MAX(2)];
    size_t n = 0, n2 = 0;
    static store_cold_batch_req_t q, qd;
    q.owner = kvm_id128_from_u64(0x0102030405060708ull, 0x090a0b0c0d0e0f10ull);
    q.n = 2;
    for (uint16_t i = 0; i < q.n; i++) {
        q.it[i].version_h = 0x11 + i;
        q.it[i].locator_fp = 0x22 + i;
        q.it[i].length = 0x10000;
        q.it[i].checksum = 0xC0FFEE00ull + i;
        q.it[i].namespace_h = 0x33;
        assert_int_equal(kvm_ident_init(&q.it[i].ident, "tn", "dom", i ? "k2" : "k1", 2), 0);
    }
    assert_int_equal(store_cold_batch_req_encode(&q, b, sizeof(b), &n), 0);
    check_hex("store cold batch req", b, n, cold_batch_req_hex);
    assert_int_equal(store_cold_batch_req_decode(b, n, &qd), 0);
    assert_int_equal(store_cold_batch_req_encode(&qd, again, sizeof(again), &n2), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(b, again, n);
    store_cold_batch_req_free(&qd);
    b[0] = STORE_COLD_BATCH_VERSION + 1; /* a newer (or older) body: refused, both named */
    assert_int_equal(store_cold_batch_req_decode(b, n, &qd), KVMESH_EPROTO);
    assert_non_null(strstr(kvmesh_last_error(), "body version 2, this runtime speaks version 1"));
    for (uint16_t i = 0; i < q.n; i++)
        kvm_ident_free(&q.it[i].ident);

    static store_cold_batch_resp_t r, rd;
    r.n = 2;
    r.r[0].status = 0;
    r.r[0].seg = 7;
    r.r[0].offset = 0x40;
    r.r[0].length = 0x10000;
    r.r[0].grant = 0xAB;
    r.r[0].token = 0x10001;
    r.r[1].status = KVMESH_EAGAIN;
    assert_int_equal(store_cold_batch_resp_encode(&r, b, sizeof(b), &n), 0);
    check_hex("store cold batch resp", b, n, cold_batch_resp_hex);
    assert_int_equal(store_cold_batch_resp_decode(b, n, &rd), 0);
    assert_int_equal(store_cold_batch_resp_encode(&rd, again, sizeof(again), &n2), 0);
    assert_memory_equal(b, again, n);
    assert_int_equal(store_cold_batch_resp_decode(b, n - 1, &rd), KVMESH_EPROTO); /* torn */
}

/* STORE_RPC_SLOT_BATCH's answer: empty (an owner before the flags) or ver | flags; refused: another
 * version, an unknown flag, short or trailing bytes. */
static void test_store_slot_batch_ans(void **state)
{
    (void)state;
    uint8_t b[4] = {0}, f = 0xff;
    size_t n = 0;
    assert_int_equal(store_slot_batch_ans_encode(STORE_SLOT_BATCH_TAKES_NOTE, b, sizeof(b), &n), 0);
    check_hex("store slot batch answer", b, n, "0101");
    assert_int_equal(store_slot_batch_ans_decode(b, n, &f), 0);
    assert_int_equal(f, STORE_SLOT_BATCH_TAKES_NOTE);
    assert_int_equal(store_slot_batch_ans_encode(0, b, sizeof(b), &n), 0);
    check_hex("store slot batch answer, no flag", b, n, "0100");
    assert_int_equal(store_slot_batch_ans_decode(b, 0, &f), 0);
    assert_int_equal(f, 0);
    assert_int_equal(store_slot_batch_ans_encode(0x02, b, sizeof(b), &n), KVMESH_EINVAL);
    assert_int_equal(store_slot_batch_ans_encode(1, b, 1, &n), KVMESH_ETOOBIG);
    const uint8_t ver2[] = {2, 1}, unknown[] = {1, 3}, trail[] = {1, 1, 0}, shrt[] = {1};
    assert_int_equal(store_slot_batch_ans_decode(ver2, sizeof(ver2), &f), KVMESH_EPROTO);
    assert_int_equal(store_slot_batch_ans_decode(unknown, sizeof(unknown), &f), KVMESH_EPROTO);
    assert_int_equal(f, 0);
    assert_int_equal(store_slot_batch_ans_decode(trail, sizeof(trail), &f), KVMESH_EPROTO);
    assert_int_equal(store_slot_batch_ans_decode(shrt, sizeof(shrt), &f), KVMESH_EPROTO);
}

/* STORE_RPC_SLOT_BATCH (slot_batch.c): ver | epoch | n | n * (kind | has | seg | offset | token |
 * ident hash | length); malformed bodies and items refused. */
static const char *const store_slot_batch_hex =
    "0102000000000000000200010303000000000000000400000000000000fecaefbeadde0000887766"
    "55443322110010000000000000020005000000000000000600000000000000000000000000000000"
    "000000000000000000000000000000";

static void test_store_slot_batch(void **state)
{
    (void)state;
    static store_slot_batch_t m, d;
    static uint8_t b[STORE_SLOT_BATCH_LEN(STORE_SLOT_BATCH_MAX)], again[sizeof(b)];
    size_t n = 0, n2 = 0;
    memset(&m, 0, sizeof(m));
    m.target_epoch = 2;
    m.n = 2;
    m.it[0].kind = STORE_SLOT_BATCH_COMMIT;
    m.it[0].m = (store_slot_msg_t){.target_epoch = 2,
                                   .seg = 3,
                                   .offset = 4,
                                   .has = STORE_SLOT_HAS_TOKEN | STORE_SLOT_HAS_OBJECT,
                                   .token = 0xDEADBEEFCAFEull,
                                   .ident_hash = 0x1122334455667788ull,
                                   .len = 0x1000};
    m.it[1].kind = STORE_SLOT_BATCH_RELEASE;
    m.it[1].m = (store_slot_msg_t){.target_epoch = 2, .seg = 5, .offset = 6};
    assert_int_equal(store_slot_batch_encode(&m, b, sizeof(b), &n), 0);
    assert_int_equal(n, STORE_SLOT_BATCH_LEN(2));
    check_hex("store slot batch", b, n, store_slot_batch_hex);
    assert_int_equal(store_slot_batch_decode(b, n, &d), 0);
    assert_true(d.n == 2 && d.target_epoch == 2 && d.it[0].kind == STORE_SLOT_BATCH_COMMIT &&
                d.it[1].kind == STORE_SLOT_BATCH_RELEASE && d.it[0].m.token == m.it[0].m.token &&
                d.it[0].m.ident_hash == m.it[0].m.ident_hash && d.it[0].m.len == 0x1000 &&
                d.it[1].m.has == 0 && d.it[1].m.seg == 5 && d.it[1].m.target_epoch == 2);
    assert_int_equal(store_slot_batch_encode(&d, again, sizeof(again), &n2), 0);
    assert_int_equal(n2, n);
    assert_memory_equal(b, again, n);
    /* refused: short, long, another version, n 0, an unknown kind, identity bits, a token
     * without its bit */
    assert_int_equal(store_slot_batch_decode(b, n - 1, &d), KVMESH_EPROTO);
    assert_int_equal(store_slot_batch_decode(b, n + 1, &d), KVMESH_EPROTO);
    b[0] = 2;
    assert_int_equal(store_slot_batch_decode(b, n, &d), KVMESH_EPROTO);
    b[0] = STORE_SLOT_BATCH_VERSION;
    b[9] = 0;
    assert_int_equal(store_slot_batch_decode(b, STORE_SLOT_BATCH_LEN(0), &d), KVMESH_EPROTO);
    b[9] = 2;
    b[11 + STORE_SLOT_BATCH_ITEM_LEN] = 3;
    assert_int_equal(store_slot_batch_decode(b, n, &d), KVMESH_EPROTO);
    b[11 + STORE_SLOT_BATCH_ITEM_LEN] = STORE_SLOT_BATCH_RELEASE;
    b[12] = 0x4;
    assert_int_equal(store_slot_batch_decode(b, n, &d), KVMESH_EPROTO);
    b[12] = STORE_SLOT_HAS_OBJECT; /* the token is set, its bit not */
    assert_int_equal(store_slot_batch_decode(b, n, &d), KVMESH_EPROTO);
    m.n = 0;
    assert_int_equal(store_slot_batch_encode(&m, b, sizeof(b), &n), KVMESH_EINVAL);
    m.n = STORE_SLOT_BATCH_MAX + 1;
    assert_int_equal(store_slot_batch_encode(&m, b, sizeof(b), &n), KVMESH_EINVAL);
    m.n = 2;
    m.it[1].m.token = 7; /* without STORE_SLOT_HAS_TOKEN */
    assert_int_equal(store_slot_batch_encode(&m, b, sizeof(b), &n), KVMESH_EINVAL);
}

/* The STORE_RPC_ENV envelope (formerly inline in store/runtime.c): u32le env type | bytes. */
static void test_store_env(void **state)
{
    (void)state;
    size_t n = 0;
    uint8_t *b = store_env_msg_encode(0x01020304u, "xyz", 3, &n);
    assert_non_null(b);
    check_hex("store env", b, n,
              "04030201"
              "78797a");
    uint32_t type = 0;
    const uint8_t *data = NULL;
    size_t dl = 0;
    assert_int_equal(store_env_msg_decode(b, n, &type, &data, &dl), 0);
    assert_int_equal(type, 0x01020304u);
    assert_int_equal(dl, 3);
    assert_ptr_equal(data, b + 4);
    free(b);
    b = store_env_msg_encode(7, NULL, 0, &n);
    assert_non_null(b);
    check_hex("store env empty", b, n, "07000000");
    assert_int_equal(store_env_msg_decode(b, n, &type, &data, &dl), 0);
    assert_int_equal(dl, 0);
    assert_int_equal(store_env_msg_decode(b, 3, &type, &data, &dl), KVMESH_EPROTO);
    free(b);
}

/* The cold backing fingerprint hashes a hand-laid byte string (ids, u64le fields, u16be locator
 * length, locator): its value must not move. */
static void test_cold_fingerprint(void **state)
{
    (void)state;
    kvm_cold_backing_t b;
    memset(&b, 0, sizeof(b));
    b.kind = KVM_COLD_MATERIALIZED;
    b.tier = kvm_id128_from_u64(1, 2);
    b.cold_op = (kvm_op_id_t){.writer = kvm_id128_from_u64(3, 4), .epoch = 5, .seq = 6};
    b.u.mat.length = 4096;
    b.u.mat.checksum = 0x1122334455667788ull;
    b.u.mat.locator_len = 9;
    memcpy(b.u.mat.locator, "s3://b/k1", 9);
    uint64_t f = kvm_cold_backing_fingerprint(&b);
    if (f != 0xbda7c73976bbcee5ull)
        print_error("fingerprint: got 0x%016llxull\n", (unsigned long long)f);
    assert_true(f == 0xbda7c73976bbcee5ull);
}

/* The handshake proof is an HMAC over a hand-laid transcript (label, role, nonces, u32be
 * length-prefixed descriptors): both peers must build the same bytes, so its value is pinned. */
static const char *const hs_mac_hex =
    "5a9fb67718a6b9170872a48b2b53aefdc3260c16d79be9b2cbd3e61e438e0c6e";

static void test_handshake_mac(void **state)
{
    (void)state;
    uint8_t nc[HS_NONCE_LEN], ns[HS_NONCE_LEN], mac[HS_MAC_LEN];
    for (int i = 0; i < HS_NONCE_LEN; i++) {
        nc[i] = (uint8_t)i;
        ns[i] = (uint8_t)(0x80 + i);
    }
    static const uint8_t secret[] = "0123456789abcdef-golden";
    assert_int_equal(hs_mac(secret, sizeof(secret) - 1, 'C', nc, ns, (const uint8_t *)"client-desc",
                            11, (const uint8_t *)"srv", 3, mac),
                     0);
    check_hex("handshake mac", mac, HS_MAC_LEN, hs_mac_hex);
}

/* The 25-byte trace context (obs/trace.h): trace id | parent span id | flags (sampled bit). */
static void test_trace_ctx(void **state)
{
    (void)state;
    struct obs_trace_ctx c = {.flags = OBS_TRACE_FLAG_SAMPLED | 0x80}, d;
    for (int i = 0; i < 16; i++)
        c.trace_id[i] = (uint8_t)(0x10 + i);
    for (int i = 0; i < 8; i++)
        c.span_id[i] = (uint8_t)(0xA0 + i);
    uint8_t w[OBS_TRACE_CTX_WIRE_LEN], again[OBS_TRACE_CTX_WIRE_LEN];
    obs_trace_ctx_inject(&c, w);
    check_hex("trace ctx", w, sizeof(w),
              "101112131415161718191a1b1c1d1e1f"
              "a0a1a2a3a4a5a6a7"
              "01");
    assert_int_equal(obs_trace_ctx_extract(w, &d), 0);
    obs_trace_ctx_inject(&d, again);
    assert_memory_equal(w, again, sizeof(w));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame),
        cmocka_unit_test(test_rpc_env),
        cmocka_unit_test(test_transport_wire),
        cmocka_unit_test(test_route_msg),
        cmocka_unit_test(test_route_rec),
        cmocka_unit_test(test_store_proto),
        cmocka_unit_test(test_store_slot_batch),
        cmocka_unit_test(test_store_slot_batch_ans),
        cmocka_unit_test(test_store_env),
        cmocka_unit_test(test_cold_fingerprint),
        cmocka_unit_test(test_handshake_mac),
        cmocka_unit_test(test_trace_ctx),
        cmocka_unit_test(test_store_cold_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
