/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_route_msg.c — the route protocol codecs (route_msg.c, route_rec.c) and the per-shard
 * route table (route_table.c): round trips of every message kind, rejection of every truncation,
 * of trailing bytes, of a type/kind mismatch, of route counts a kind may not carry and of a
 * newer codec version; shard record and policy round trips and rejections; table ordering,
 * replacement and the owner-to-key index (paginated, exact); the packed route form (every shape
 * round-trips, interning reference counts) and the table against a model of random puts/deletes;
 * the batch message (RMSG_BATCH): golden layout, items decoded as the single messages they are,
 * every truncation, trailing bytes, wrong type, newer version, counts out
 * of 2..KVM_ROUTE_BATCH_MAX, unbatchable or nested items, and the builder's bounds; a message
 * whose route is given as its pre-encoded frame (rframe: a primary encodes the route it mirrors
 * once) is byte for byte the message that encodes the route, and a frame too big is refused;
 * inline reads: READ_REQ's accepted size keeps the request layout (a request that asks nothing
 * is the pre-inline encoding, one that asks differs only in that field), an inline READ_RESP
 * round-trips with its bytes as a view into the received buffer, travels in a batch, and every
 * inconsistent form (wrong kind, no route, a length other than the route's, over the bound,
 * truncated, bytes without the flag) is refused by the encoder or the decoder; a batch whose
 * items are encoded in place into reserved room is the appended batch byte for byte; a decoded
 * message copied by value asserts where it is cleared or taken apart (forked children).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec_fixture.h"
#include "kvmesh.h"
#include "route/route_int.h"
#include "route/route_msg.h"
#include "core/rng.h"
#include "core/wire.h"
#include "route/route_pack.h"
#include "route/route_table.h"

static void test_route_frame(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "framed", 3, 42);
    uint8_t frame[KVM_WIRE_MAX_RECORD_LEN];
    size_t flen = 0;
    assert_int_equal(wire_route_encode(&r, frame, sizeof(frame), &flen), 0);
    static const uint16_t kinds[] = {RMSG_CAS_RESP, RMSG_MIRROR_REQ, RMSG_READ_RESP};
    uint8_t *a = malloc(ROUTE_MSG_MAX_LEN), *b = malloc(ROUTE_MSG_MAX_LEN);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        const kvm_route_t *rp = &r;
        route_msg_t m;
        route_msg_init(&m, kinds[k]);
        m.req_id = 7;
        m.shard = 3;
        m.rptrs = &rp;
        m.n_routes = 1;
        size_t la = 0, lb = 0;
        assert_int_equal(route_msg_encode(&m, a, ROUTE_MSG_MAX_LEN, &la), 0);
        m.rframe = frame;
        m.rframe_len = (uint32_t)flen;
        assert_int_equal(route_msg_encode(&m, b, ROUTE_MSG_MAX_LEN, &lb), 0);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
        route_msg_t d;
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + kinds[k], b, lb, &d), 0);
        assert_int_equal(d.n_routes, 1);
        assert_true(kvm_route_equal(&d.routes[0], &r));
        route_msg_clear(&d);
        /* the frame does not fit: refused as the encoded route would be */
        assert_int_equal(route_msg_encode(&m, b, la - 1, &lb), KVMESH_ETOOBIG);
    }
    free(a);
    free(b);
    kvm_route_free(&r);
}

static void test_roundtrip_all_kinds(void **state)
{
    (void)state;
    kvm_route_t routes[3];
    for (int i = 0; i < 3; i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%d", i);
        fixture_route(&routes[i], k, 1, (uint64_t)i + 1);
    }
    uint8_t *buf = malloc(ROUTE_MSG_MAX_LEN);
    for (uint16_t kind = 1; kind <= RMSG_KIND_MAX; kind++) {
        if (!strcmp(route_msg_kind_name(kind), "unknown") ||
            kind == RMSG_BATCH) { /* a free kind number, or the batch container (below) */
            route_msg_t m;
            route_msg_init(&m, kind);
            assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &(size_t){0}),
                             KVMESH_EINVAL);
            continue;
        }
        route_msg_t m;
        route_msg_init(&m, kind);
        m.req_id = 42 + kind;
        m.shard = 7;
        m.generation = 5;
        m.token = 9;
        m.status = KVMESH_ESTALE_GENERATION;
        m.target = (kvm_runtime_t){.id = kvm_id128_from_u64(1, 1), .epoch = 4};
        m.expected = (kvm_route_version_t){2, 8};
        m.remaining_ns = 123456789;
        m.flags = RMSG_INSTALL_BEGIN;
        m.n_set = 2;
        m.set[1].node = 3;
        m.set[1].rt.epoch = 2;
        uint32_t lo = 0, hi = 0;
        if (kind == RMSG_CAS_REQ || kind == RMSG_MIRROR_REQ || kind == RMSG_REPAIR ||
            kind == RMSG_CAS_CLAIM_REQ)
            lo = hi = 1;
        else if (kind == RMSG_CAS_RESP || kind == RMSG_READ_RESP || kind == RMSG_CAS_CLAIM_RESP)
            hi = 1;
        bool claim = kind == RMSG_CAS_CLAIM_REQ || kind == RMSG_CAS_CLAIM_RESP;
        static uint8_t blob[] = "an opaque claim";
        if (claim) {
            m.claim = blob;
            m.claim_len = sizeof(blob);
        } else if (kind == RMSG_FETCH_RESP || kind == RMSG_OWNER_RESP || kind == RMSG_INSTALL_REQ)
            hi = 3;
        m.n_routes = hi;
        m.routes = routes;
        if (kind == RMSG_READ_REQ || kind == RMSG_FETCH_REQ) {
            m.has_ident = true;
            m.ident = routes[0].ident;
        }
        size_t len;
        assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
        route_msg_t d;
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + kind, buf, len, &d), 0);
        assert_int_equal(d.kind, kind);
        assert_int_equal(d.req_id, m.req_id);
        assert_int_equal(d.shard, 7);
        assert_int_equal(d.token, 9);
        assert_int_equal(d.status, KVMESH_ESTALE_GENERATION);
        assert_true(kvm_runtime_equal(&d.target, &m.target));
        assert_int_equal(d.remaining_ns, 123456789);
        assert_int_equal(d.n_set, 2);
        assert_int_equal(d.set[1].node, 3);
        assert_int_equal(d.n_routes, hi);
        for (uint32_t i = 0; i < hi; i++)
            assert_true(kvm_route_equal(&d.routes[i], &routes[i]));
        assert_int_equal(d.has_ident, m.has_ident);
        assert_int_equal(d.claim_len, claim ? sizeof(blob) : 0);
        if (claim)
            assert_memory_equal(d.claim, blob, sizeof(blob));
        route_msg_clear(&d);
        /* every truncation is rejected, never a crash */
        for (size_t cut = 0; cut < len; cut++)
            assert_int_not_equal(route_msg_decode(ROUTE_MSG_BASE + kind, buf, cut, &d), 0);
        /* a trailing byte, and a type that does not match the kind */
        buf[len] = 0;
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + kind, buf, len + 1, &d), KVMESH_EPROTO);
        assert_int_equal(
            route_msg_decode(ROUTE_MSG_BASE + (kind % RMSG_KIND_MAX) + 1, buf, len, &d),
            KVMESH_EPROTO);
        /* route counts outside the kind's bounds are refused by the encoder */
        if (hi <= 1) {
            m.n_routes = hi + 1;
            assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
        }
        if (lo == 1) {
            m.n_routes = 0;
            assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
        }
    }
    /* a newer codec version */
    route_msg_t m;
    route_msg_init(&m, RMSG_GRANT_REQ);
    size_t len;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
    buf[1] = ROUTE_MSG_VERSION + 1;
    route_msg_t d;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_GRANT_REQ, buf, len, &d),
                     KVMESH_EINCOMPAT);
    /* a too-small buffer */
    assert_int_equal(route_msg_encode(&m, buf, 10, &len), KVMESH_ETOOBIG);
    free(buf);
    for (int i = 0; i < 3; i++)
        kvm_route_free(&routes[i]);
}

static void test_record_and_policy(void **state)
{
    (void)state;
    route_rec_t r;
    memset(&r, 0, sizeof(r));
    r.generation = 4;
    r.token = 11;
    r.state = ROUTE_REC_ACTIVE;
    r.primary = (kvm_runtime_t){.id = kvm_id128_from_u64(1, 5), .epoch = 3};
    r.primary_node = 2;
    r.lease = 99;
    r.n_set = 3;
    r.set[2].node = 7;
    r.n_src = 1;
    r.src[0].rt.epoch = 8;
    uint8_t buf[ROUTE_REC_MAX_LEN];
    size_t len;
    assert_int_equal(route_rec_encode(&r, buf, sizeof(buf), &len), 0);
    route_rec_t d;
    assert_int_equal(route_rec_decode(buf, len, &d), 0);
    assert_memory_equal(&d, &r, sizeof(r));
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(route_rec_decode(buf, cut, &d), KVMESH_EPROTO);
    buf[18] = 9; /* state byte: unknown state */
    assert_int_equal(route_rec_decode(buf, len, &d), KVMESH_EPROTO);

    route_policy_t p = {ROUTE_MODE_EMBEDDED_WRH, 3, 64, ROUTE_PROTOCOL_VERSION}, q;
    assert_int_equal(route_policy_encode(&p, buf, sizeof(buf), &len), 0);
    assert_int_equal(route_policy_decode(buf, len, &q), 0);
    assert_memory_equal(&p, &q, sizeof(p));
    assert_int_equal(route_policy_decode(buf, len - 1, &q), KVMESH_EPROTO);
}

static void test_table_and_owner_index(void **state)
{
    (void)state;
    route_table_t *t = route_table_new();
    kvm_route_t r;
    /* 20 keys; owner (key index % 3) */
    for (int i = 0; i < 20; i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%02d", i);
        fixture_route(&r, k, (uint64_t)(i % 3), 1);
        assert_int_equal(route_table_put(t, &r, NULL), 0);
        kvm_route_free(&r);
    }
    assert_int_equal(route_table_count(t), 20);
    assert_int_equal(route_table_check(t), 0);
    /* the memory per entry stays packed (docs/performance.md "Memory per object"): a
     * one-replica route in <= 40 bytes, its whole entry allocation in <= 128 */
    route_table_mem_t mem;
    route_table_mem(t, &mem);
    assert_true(mem.packed_bytes <= 40 * 20);
    assert_true(mem.entry_bytes <= 128 * 20);
    /* ordered walk */
    int n = 0;
    kvm_ident_t prev = {0};
    for (route_entry_t *e = route_table_next(t, NULL); e; e = route_table_next(t, &prev)) {
        kvm_ident_t cur = route_entry_ident(e);
        if (prev.enc)
            assert_true(kvm_ident_cmp(&prev, &cur) < 0);
        prev = cur;
        n++;
    }
    assert_int_equal(n, 20);
    /* owner 1 holds k01 k04 ... k19 (7 keys); page through it two at a time */
    kvm_runtime_id_t o1 = kvm_id128_from_u64(9, 1);
    n = 0;
    route_entry_t *e = route_table_owner_next(t, &o1, NULL);
    while (e) {
        kvm_route_t v;
        route_table_view(t, e, &v);
        assert_true(kvm_id128_equal(&v.replicas[0].owner, &o1));
        n++;
        e = route_table_owner_next(t, &o1, &v.ident);
    }
    assert_int_equal(n, 7);
    /* moving k01 to owner 2 removes it from owner 1's index */
    fixture_route(&r, "k01", 2, 2);
    assert_int_equal(route_table_put(t, &r, NULL), 0);
    kvm_route_free(&r);
    assert_int_equal(route_table_check(t), 0);
    n = 0;
    for (e = route_table_owner_next(t, &o1, NULL); e; e = route_table_owner_after(t, &o1, e))
        n++;
    assert_int_equal(n, 6);
    kvm_runtime_id_t o7 = kvm_id128_from_u64(9, 7);
    assert_null(route_table_owner_next(t, &o7, NULL));
    route_table_del(t, route_table_next(t, NULL));
    assert_int_equal(route_table_count(t), 19);
    assert_int_equal(route_table_check(t), 0);
    route_table_free(t);
}

/* A random route of any shape (not necessarily valid: packing is lossless for every field). */
static void random_route(kvm_rng_t *g, kvm_route_t *r, uint32_t key)
{
    char k[16];
    snprintf(k, sizeof(k), "r%u", key);
    kvm_route_init(r);
    assert_int_equal(kvm_ident_init(&r->ident, "tenant", key % 3 ? NULL : "dom", k, strlen(k)), 0);
    uint64_t big[] = {0, 1, 127, 128, 16383, 16384, UINT64_MAX, UINT64_MAX - 1};
#define PICK()                                                                                     \
    (kvm_rng_chance(g, 0.3) ? big[kvm_rng_range(g, 0, 7)]                                          \
                            : kvm_rng_next(g) >> kvm_rng_range(g, 0, 63))
    r->version = (kvm_route_version_t){PICK(), PICK()};
    r->predecessor_version = kvm_rng_chance(g, 0.5)
                                 ? (kvm_route_version_t){r->version.fencing_token, PICK()}
                                 : (kvm_route_version_t){PICK(), PICK()};
    r->content_op = (kvm_op_id_t){kvm_id128_from_u64(1, kvm_rng_range(g, 0, 6)), PICK(), PICK()};
    if (kvm_rng_chance(g, 0.5))
        r->predecessor_op =
            (kvm_op_id_t){kvm_id128_from_u64(1, kvm_rng_range(g, 0, 6)), PICK(), PICK()};
    r->length = PICK();
    r->checksum = kvm_rng_next(g);
    r->tomb = (kvm_tomb_state_t)kvm_rng_range(g, 0, 2);
    r->retain_until_ms = kvm_rng_chance(g, 0.5) ? PICK() : 0;
    r->n_replicas = (uint32_t)kvm_rng_range(g, 0, KVM_MAX_REPLICAS);
    bool exact = kvm_rng_chance(g, 0.5);
    for (uint32_t i = 0; i < r->n_replicas; i++)
        r->replicas[i] =
            (kvm_hot_replica_t){.owner = kvm_id128_from_u64(9, kvm_rng_range(g, 0, 9)),
                                .segment = big[kvm_rng_range(g, 0, 7)] ^ kvm_rng_range(g, 0, 3),
                                .offset = PICK(),
                                .length = exact ? r->length : PICK(),
                                .checksum = exact ? r->checksum : kvm_rng_next(g)};
    r->cold.kind = (kvm_cold_kind_t)kvm_rng_range(g, 0, 2);
    if (r->cold.kind != KVM_COLD_NONE) {
        r->cold.cold_op =
            (kvm_op_id_t){kvm_id128_from_u64(2, kvm_rng_range(g, 0, 3)), PICK(), PICK()};
        r->cold.content_op = r->content_op;
        r->cold.owner = kvm_id128_from_u64(9, kvm_rng_range(g, 0, 9));
        r->cold.tier = kvm_id128_from_u64(7, kvm_rng_range(g, 0, 2));
    }
    if (r->cold.kind == KVM_COLD_PENDING_OFFLOAD) {
        r->cold.u.pending.expected_length = PICK();
        r->cold.u.pending.expected_checksum = kvm_rng_next(g);
    } else if (r->cold.kind == KVM_COLD_MATERIALIZED) {
        r->cold.u.mat.length = PICK();
        r->cold.u.mat.checksum = kvm_rng_next(g);
        r->cold.u.mat.locator_len = (uint16_t)kvm_rng_range(g, 1, KVM_COLD_LOCATOR_MAX_LEN);
        for (uint32_t i = 0; i < r->cold.u.mat.locator_len; i++)
            r->cold.u.mat.locator[i] = (uint8_t)kvm_rng_next(g);
    }
#undef PICK
}

/* The packed form (route_pack.c): unpack(pack(r)) equals r for routes of every shape, ids and
 * segments are interned with exact reference counts, and every index is released with the
 * last route naming it; a table of such routes replaced and deleted at random views each key
 * as last put. */
static void test_packed_routes(void **state)
{
    (void)state;
    kvm_rng_t g;
    kvm_rng_seed(&g, 12);
    enum { N = 64, ROUNDS = 2000 };
    rp_sets_t sets;
    memset(&sets, 0, sizeof(sets));
    static uint8_t packed[N][RP_MAX_PACKED];
    size_t plen[N];
    kvm_route_t in[N];
    for (uint32_t i = 0; i < N; i++) {
        random_route(&g, &in[i], i);
        assert_int_equal(rp_pack(&sets, &in[i], packed[i], &plen[i]), 0);
    }
    for (uint32_t i = 0; i < N; i++) {
        kvm_route_t out;
        rp_unpack(&sets, packed[i], plen[i], &out);
        out.ident = in[i].ident;
        assert_true(kvm_route_equal(&out, &in[i]));
        kvm_route_version_t v = rp_version(packed[i], plen[i]);
        assert_true(kvm_route_version_equal(&v, &in[i].version));
        rp_head_t h; /* the fields a CAS decides on, read alone */
        memset(&h, 0xa5, sizeof(h));
        rp_head(&sets, packed[i], plen[i], &h);
        assert_true(kvm_route_version_equal(&h.version, &in[i].version));
        assert_true(kvm_op_id_equal(&h.content_op, &in[i].content_op));
        assert_int_equal(h.tomb, in[i].tomb);
        assert_int_equal(h.retain_until_ms, in[i].retain_until_ms);
        for (uint64_t o = 0; o < 10; o++) {
            kvm_id128_t id = kvm_id128_from_u64(9, o);
            int64_t idx = rp_intern_find(&sets.ids, &id);
            bool has = false;
            for (uint32_t j = 0; j < in[i].n_replicas; j++)
                has = has || kvm_id128_equal(&in[i].replicas[j].owner, &id);
            assert_int_equal(idx >= 0 && rp_has_owner(packed[i], plen[i], (uint32_t)idx), has);
        }
    }
    for (uint32_t i = 0; i < N; i++) {
        rp_unref(&sets, packed[i], plen[i]);
        kvm_route_free(&in[i]);
    }
    assert_int_equal(sets.ids.live, 0);
    assert_int_equal(sets.segs.live, 0);
    rp_sets_fini(&sets);

    /* the table: random puts, replaces and deletes against a model */
    route_table_t *t = route_table_new();
    kvm_route_t model[N];
    bool present[N] = {false};
    for (uint32_t i = 0; i < N; i++)
        kvm_route_init(&model[i]);
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t k = (uint32_t)kvm_rng_range(&g, 0, N - 1);
        if (present[k] && kvm_rng_chance(&g, 0.3)) {
            route_table_del(t, route_table_get(t, &model[k].ident));
            kvm_route_free(&model[k]);
            present[k] = false;
        } else {
            if (present[k])
                kvm_route_free(&model[k]);
            random_route(&g, &model[k], k);
            present[k] = true;
            route_entry_t *e = NULL;
            if (round % 2) /* the entry looked up first (a CAS's way): in place when sized so */
                assert_int_equal(
                    route_table_put_at(t, route_table_get(t, &model[k].ident), &model[k], &e), 0);
            else
                assert_int_equal(route_table_put(t, &model[k], &e), 0);
            assert_non_null(e);
        }
        if (round % 500 == 0 || round == ROUNDS - 1) {
            size_t count = 0;
            for (uint32_t i = 0; i < N; i++) {
                if (!present[i]) {
                    char gk[16];
                    kvm_ident_t gone;
                    snprintf(gk, sizeof(gk), "r%u", i);
                    assert_int_equal(
                        kvm_ident_init(&gone, "tenant", i % 3 ? NULL : "dom", gk, strlen(gk)), 0);
                    assert_null(route_table_get(t, &gone));
                    kvm_ident_free(&gone);
                    continue;
                }
                route_entry_t *e = route_table_get(t, &model[i].ident);
                count++;
                kvm_route_t v;
                route_table_view(t, e, &v);
                assert_true(kvm_route_equal(&v, &model[i]));
                kvm_ident_t id = route_entry_ident(e);
                assert_true(kvm_ident_equal(&id, &model[i].ident));
                assert_int_equal(kvm_ident_shard(&id, 64), kvm_ident_shard(&model[i].ident, 64));
            }
            assert_int_equal(route_table_count(t), count);
        }
    }
    route_table_mem_t mem;
    route_table_mem(t, &mem);
    assert_int_equal(mem.entries, route_table_count(t));
    assert_true(mem.entry_bytes >= mem.packed_bytes + mem.ident_bytes);
    for (uint32_t i = 0; i < N; i++)
        if (present[i])
            kvm_route_free(&model[i]);
    route_table_clear(t);
    route_table_mem(t, &mem);
    assert_int_equal(mem.entry_bytes, 0);
    route_table_free(t);
}

/* The tombstone expiry index: exactly the finalized tombstones, earliest retain_until first;
 * a replace or delete takes an entry out of it. */
static void test_table_expiry_index(void **state)
{
    (void)state;
    route_table_t *t = route_table_new();
    kvm_route_t r;
    for (int i = 0; i < 10; i++) {
        char k[8];
        snprintf(k, sizeof(k), "t%02d", i);
        fixture_route(&r, k, 1, 1);
        if (i % 2 == 0 || i == 9) { /* even keys: tombstones due at 1000 - 10 i */
            r.tomb = i % 4 == 0 ? KVM_TOMB_FINALIZED : KVM_TOMB_PENDING;
            r.n_replicas = 0;
            r.length = r.checksum = 0;
            r.retain_until_ms = i == 9 ? 0 : 1000 - 10 * (uint64_t)i; /* t09: pending, none */
            assert_int_equal(kvm_route_validate(&r), 0);
        }
        assert_int_equal(route_table_put(t, &r, NULL), 0);
        kvm_route_free(&r);
    }
    assert_int_equal(route_table_check(t), 0);
    assert_int_equal(route_table_tomb_count(t), 5);
    uint64_t last = 0;
    int n = 0;
    kvm_route_t v;
    for (route_entry_t *e = route_table_tomb_first(t); e; e = route_table_tomb_next(t, e)) {
        route_table_view(t, e, &v);
        assert_int_not_equal(v.tomb, KVM_TOMB_NONE); /* pending ones with a deadline too */
        assert_true(v.retain_until_ms > 0 && v.retain_until_ms >= last);
        last = v.retain_until_ms;
        n++;
    }
    assert_int_equal(n, 5);
    route_table_view(t, route_table_tomb_first(t), &v);
    assert_int_equal(v.retain_until_ms, 920); /* t08 */
    /* t08 rewritten live: out of the index; the earliest is then t06 */
    fixture_route(&r, "t08", 1, 2);
    assert_int_equal(route_table_put(t, &r, NULL), 0);
    kvm_route_free(&r);
    assert_int_equal(route_table_tomb_count(t), 4);
    route_table_view(t, route_table_tomb_first(t), &v);
    assert_int_equal(v.retain_until_ms, 940);
    /* purge the two earliest */
    route_table_del(t, route_table_tomb_first(t));
    route_table_del(t, route_table_tomb_first(t));
    assert_int_equal(route_table_tomb_count(t), 2);
    assert_int_equal(route_table_count(t), 8);
    /* t09 (pending, no deadline) gets one: indexed; finalized later: indexed at its own */
    fixture_route(&r, "t09", 1, 3);
    r.tomb = KVM_TOMB_PENDING;
    r.n_replicas = 0;
    r.length = r.checksum = 0;
    r.retain_until_ms = 10;
    assert_int_equal(route_table_put(t, &r, NULL), 0);
    assert_int_equal(route_table_tomb_count(t), 3);
    route_table_view(t, route_table_tomb_first(t), &v);
    assert_int_equal(v.retain_until_ms, 10);
    r.tomb = KVM_TOMB_FINALIZED;
    r.retain_until_ms = 5000;
    assert_int_equal(route_table_put(t, &r, NULL), 0);
    kvm_route_free(&r);
    assert_int_equal(route_table_tomb_count(t), 3);
    assert_int_equal(route_table_check(t), 0);
    route_table_view(t, route_table_tomb_first(t), &v);
    assert_int_equal(v.retain_until_ms, 980); /* t02 */
    assert_int_equal(route_table_check(t), 0);
    route_table_free(t);
}

/* A replacing route of the entry's packed size is written over the entry (same entry, same
 * memory); its view, the interning counts and the expiry index follow the new route; another
 * size takes a new record. */
static void test_table_put_in_place(void **state)
{
    (void)state;
    route_table_t *t = route_table_new();
    kvm_route_t r, v;
    route_table_mem_t m0, m1;
    fixture_route(&r, "k", 1, 2);
    route_entry_t *e0 = NULL, *e = NULL;
    assert_int_equal(route_table_put(t, &r, &e0), 0);
    kvm_route_free(&r);
    e0->busy = true;
    route_table_mem(t, &m0);
    fixture_route(&r, "k", 2, 3); /* another owner and version, the same packed size */
    assert_int_equal(route_table_put_at(t, e0, &r, &e), 0);
    assert_ptr_equal(e, e0);
    assert_true(e->busy); /* the entry's flags are kept */
    route_table_view(t, e, &v);
    assert_true(kvm_route_equal(&v, &r));
    route_table_mem(t, &m1);
    assert_memory_equal(&m0, &m1, sizeof(m0));
    assert_int_equal(route_table_check(t), 0); /* owner 1's reference went with the old route */
    kvm_id128_t o1 = kvm_id128_from_u64(9, 1);
    assert_null(route_table_owner_next(t, &o1, NULL));
    /* a tombstone with a deadline, rewritten in place with another: re-indexed at its own */
    r.tomb = KVM_TOMB_PENDING;
    r.n_replicas = 0;
    r.length = r.checksum = 0;
    r.retain_until_ms = 10;
    assert_int_equal(route_table_put(t, &r, &e), 0);
    assert_int_equal(route_table_tomb_count(t), 1);
    r.tomb = KVM_TOMB_FINALIZED;
    r.retain_until_ms = 20;
    route_entry_t *tomb = e;
    assert_int_equal(route_table_put_at(t, tomb, &r, &e), 0);
    assert_ptr_equal(e, tomb);
    assert_int_equal(route_table_tomb_count(t), 1);
    route_table_view(t, route_table_tomb_first(t), &v);
    assert_int_equal(v.retain_until_ms, 20);
    assert_int_equal(v.tomb, KVM_TOMB_FINALIZED);
    assert_int_equal(route_table_check(t), 0);
    kvm_route_free(&r);
    /* another size (two replicas): a new record, out of the expiry index */
    fixture_route(&r, "k", 1, 4);
    r.n_replicas = 2;
    r.replicas[1] = r.replicas[0];
    r.replicas[1].owner = kvm_id128_from_u64(9, 5);
    assert_int_equal(route_table_put_at(t, e, &r, &e), 0);
    assert_int_equal(route_table_tomb_count(t), 0);
    route_table_view(t, route_table_get(t, &r.ident), &v);
    assert_true(kvm_route_equal(&v, &r));
    assert_int_equal(route_table_count(t), 1);
    assert_int_equal(route_table_check(t), 0);
    kvm_route_free(&r);
    route_table_free(t);
}

/* Encodes one CAS_REQ (or another kind) of route r into buf; returns its length. */
static size_t enc_one(uint16_t kind, uint64_t req_id, const kvm_route_t *r, uint8_t *buf,
                      size_t cap)
{
    route_msg_t m;
    route_msg_init(&m, kind);
    m.req_id = req_id;
    m.shard = 3;
    m.token = 11;
    const kvm_route_t *rp = r;
    if (kind == RMSG_CAS_REQ || kind == RMSG_MIRROR_REQ || kind == RMSG_CAS_RESP) {
        m.rptrs = &rp;
        m.n_routes = 1;
    }
    if (kind == RMSG_READ_REQ) {
        m.has_ident = true;
        m.ident = r->ident; /* borrowed */
    }
    size_t len = 0;
    assert_int_equal(route_msg_encode(&m, buf, cap, &len), 0);
    return len;
}

static void test_batch_codec(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "bk", 1, 5);
    uint8_t one[3][KVM_WIRE_MAX_RECORD_LEN * 2];
    size_t n1[3];
    n1[0] = enc_one(RMSG_CAS_REQ, 100, &r, one[0], sizeof(one[0]));
    n1[1] = enc_one(RMSG_READ_REQ, 101, &r, one[1], sizeof(one[1]));
    n1[2] = enc_one(RMSG_MIRROR_RESP, 102, &r, one[2], sizeof(one[2]));
    route_batch_buf_t b;
    route_batch_buf_init(&b);
    for (int i = 0; i < 3; i++)
        assert_int_equal(route_batch_append(&b, one[i], n1[i]), 0);
    size_t len = 0;
    const uint8_t *p = route_batch_bytes(&b, &len);
    /* golden layout: 'R', version, u16le kind 16, u32le count, then u32le length + the item's
     * own single-message bytes, unchanged */
    static const uint8_t hdr[8] = {'R', ROUTE_MSG_VERSION, 16, 0, 3, 0, 0, 0};
    assert_memory_equal(p, hdr, sizeof(hdr));
    size_t at = 8;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(p[at] | p[at + 1] << 8 | p[at + 2] << 16 | (uint32_t)p[at + 3] << 24,
                         n1[i]);
        assert_memory_equal(p + at + 4, one[i], n1[i]);
        at += 4 + n1[i];
    }
    assert_int_equal(at, len);
    /* decode: the views are the items; each decodes as the single message it is */
    route_batch_view_t *v = malloc(sizeof(*v));
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, p, len, v), 0);
    assert_int_equal(v->n, 3);
    static const uint16_t kinds[3] = {RMSG_CAS_REQ, RMSG_READ_REQ, RMSG_MIRROR_RESP};
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(v->kind[i], kinds[i]);
        route_msg_t m;
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + v->kind[i], v->item[i], v->len[i], &m),
                         0);
        assert_int_equal(m.req_id, 100 + i);
        assert_int_equal(m.shard, 3);
        if (kinds[i] == RMSG_CAS_REQ)
            assert_true(m.n_routes == 1 && kvm_route_equal(&m.routes[0], &r));
        route_msg_clear(&m);
    }
    /* every truncation fails, and so does a trailing byte */
    uint8_t *cp = malloc(len + 1);
    memcpy(cp, p, len);
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, cut, v), 0);
    cp[len] = 0;
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, len + 1, v),
                     KVMESH_EPROTO);
    /* wrong env type; newer codec version; a count below 2 or above the bound */
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_CAS_REQ, cp, len, v), KVMESH_EPROTO);
    cp[1] = ROUTE_MSG_VERSION + 1;
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, len, v), KVMESH_EINCOMPAT);
    cp[1] = ROUTE_MSG_VERSION;
    cp[4] = 1;
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, len, v), KVMESH_EPROTO);
    cp[4] = KVM_ROUTE_BATCH_MAX + 1;
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, len, v), KVMESH_EPROTO);
    cp[4] = 3;
    /* an item of a kind that may not be batched (GRANT_REQ), and a nested batch */
    cp[8 + 4 + 2] = RMSG_GRANT_REQ;
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, len, v), KVMESH_EPROTO);
    cp[8 + 4 + 2] = RMSG_BATCH;
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, cp, len, v), KVMESH_EPROTO);
    /* a single message never decodes as a batch, nor a batch as a single message */
    route_msg_t m;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_BATCH, p, len, &m), KVMESH_EPROTO);
    assert_int_not_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, one[0], n1[0], v), 0);
    /* the builder refuses what may not be batched, and is full at the bound */
    uint8_t grant[512];
    size_t ng = enc_one(RMSG_GRANT_REQ, 7, &r, grant, sizeof(grant));
    assert_int_equal(route_batch_append(&b, grant, ng), KVMESH_EINVAL);
    route_batch_buf_free(&b);
    route_batch_buf_init(&b);
    for (int i = 0; i < KVM_ROUTE_BATCH_MAX; i++)
        assert_int_equal(route_batch_append(&b, one[1], n1[1]), 0);
    assert_int_equal(route_batch_append(&b, one[1], n1[1]), KVMESH_ETOOBIG);
    p = route_batch_bytes(&b, &len);
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, p, len, v), 0);
    assert_int_equal(v->n, KVM_ROUTE_BATCH_MAX);
    route_batch_buf_free(&b);
    free(cp);
    free(v);
    kvm_route_free(&r);
}

/* Encoding in place (route_batch_reserve/commit, what route_emit_reserve uses): a batch whose
 * items were encoded into its reserved room is byte for byte the batch of the same messages
 * appended; a reservation left uncommitted adds nothing; the builder is full at the count
 * bound and refuses a reservation larger than a batch may hold. */
static void test_batch_reserve(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "rk", 1, 5);
    static const uint16_t kinds[3] = {RMSG_CAS_REQ, RMSG_READ_REQ, RMSG_MIRROR_RESP};
    route_batch_buf_t a, b;
    route_batch_buf_init(&a);
    route_batch_buf_init(&b);
    uint8_t one[KVM_WIRE_MAX_RECORD_LEN * 2];
    for (int i = 0; i < 3; i++) {
        size_t n = enc_one(kinds[i], 200 + (uint64_t)i, &r, one, sizeof(one));
        assert_int_equal(route_batch_append(&a, one, n), 0);
        uint8_t *at = NULL;
        size_t cap = KVM_WIRE_MAX_RECORD_LEN * 2;
        assert_int_equal(route_batch_reserve(&b, cap, &at), 0);
        if (i == 1) { /* written into, then abandoned: not an item */
            memset(at, 0xee, cap);
            assert_int_equal(route_batch_reserve(&b, cap, &at), 0);
        }
        assert_int_equal(enc_one(kinds[i], 200 + (uint64_t)i, &r, at, cap), n);
        route_batch_commit(&b, n);
    }
    assert_int_equal(a.n, 3);
    assert_int_equal(b.n, 3);
    assert_int_equal(a.first_off, b.first_off);
    assert_int_equal(a.first_len, b.first_len);
    size_t la = 0, lb = 0;
    const uint8_t *pa = route_batch_bytes(&a, &la), *pb = route_batch_bytes(&b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(pa, pb, la);
    /* bounds: the count, and the bytes of one batch */
    route_batch_buf_free(&b);
    route_batch_buf_init(&b);
    uint8_t *at = NULL;
    assert_int_equal(route_batch_reserve(&b, ROUTE_MSG_MAX_LEN, &at), KVMESH_ETOOBIG);
    size_t n = enc_one(RMSG_READ_REQ, 1, &r, one, sizeof(one));
    for (int i = 0; i < KVM_ROUTE_BATCH_MAX; i++) {
        assert_int_equal(route_batch_reserve(&b, n, &at), 0);
        memcpy(at, one, n);
        route_batch_commit(&b, n);
    }
    assert_int_equal(route_batch_reserve(&b, n, &at), KVMESH_ETOOBIG);
    route_batch_view_t *v = malloc(sizeof(*v));
    const uint8_t *p = route_batch_bytes(&b, &lb);
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, p, lb, v), 0);
    assert_int_equal(v->n, KVM_ROUTE_BATCH_MAX);
    free(v);
    route_batch_buf_free(&a);
    route_batch_buf_free(&b);
    kvm_route_free(&r);
}

/* Runs fn(arg) in a child with stderr silenced and no core file; true when it died of SIGABRT
 * (a failed KVM_ASSERT), false when it returned. */
static bool aborts(void (*fn)(const void *), const void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        fn(arg);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st))
        assert_int_equal(WEXITSTATUS(st), 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

typedef struct enc_bytes {
    const uint8_t *p;
    size_t n;
    uint16_t kind;
} enc_bytes_t;

/* Decodes e, copies the decoded message by value and clears the copy. */
static void clear_copy(const void *arg)
{
    const enc_bytes_t *e = arg;
    route_msg_t *m = malloc(sizeof(*m)), *c = malloc(sizeof(*c));
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + e->kind, e->p, e->n, m), 0);
    memcpy(c, m, sizeof(*c)); /* the copy by value (s7: a route's key freed through a copy) */
    route_msg_clear(c);
    free(c);
    route_msg_clear(m);
    free(m);
}

/* Decodes e, copies it by value and checks the copy as a taker of its storage does. */
static void check_copy(const void *arg)
{
    const enc_bytes_t *e = arg;
    route_msg_t *m = malloc(sizeof(*m)), *c = malloc(sizeof(*c));
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + e->kind, e->p, e->n, m), 0);
    memcpy(c, m, sizeof(*c));
    route_msg_check_decoded(c);
    free(c);
    route_msg_clear(m);
    free(m);
}

/* Decodes e and clears it where it was decoded; then a message built by the caller (never
 * decoded) is copied and cleared: neither asserts. */
static void clear_in_place(const void *arg)
{
    const enc_bytes_t *e = arg;
    route_msg_t *m = malloc(sizeof(*m));
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + e->kind, e->p, e->n, m), 0);
    route_msg_check_decoded(m);
    route_msg_clear(m);
    route_msg_clear(m); /* (cleared: owns nothing, decoded nowhere) */
    route_msg_t built, copy;
    route_msg_init(&built, RMSG_CAS_RESP);
    built.status = KVMESH_ECONFLICT;
    copy = built;
    route_msg_check_decoded(&copy);
    route_msg_clear(&copy);
    free(m);
}

/* A decoded message copied by value is caught where its storage would be freed or taken apart
 * (route_msg_clear, route_msg_check_decoded): even one whose copy frees nothing (a status-only
 * answer), so the copy is caught before the kind of message whose storage it would free. */
static void test_decoded_copy_asserts(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "ck", 1, 5);
    uint8_t buf[KVM_WIRE_MAX_RECORD_LEN * 2];
    static const uint16_t kinds[] = {RMSG_MIRROR_RESP, RMSG_CAS_REQ, RMSG_READ_REQ};
    for (size_t k = 0; k < KVM_ARRAY_SIZE(kinds); k++) {
        enc_bytes_t e = {buf, enc_one(kinds[k], 9, &r, buf, sizeof(buf)), kinds[k]};
        assert_false(aborts(clear_in_place, &e));
        assert_true(aborts(clear_copy, &e));
        assert_true(aborts(check_copy, &e));
    }
    kvm_route_free(&r);
}

static void read_req(route_msg_t *m, const kvm_route_t *r, uint32_t limit)
{
    route_msg_init(m, RMSG_READ_REQ);
    m->req_id = 5;
    m->shard = 1;
    m->token = 2;
    m->has_ident = true;
    m->ident = r->ident;
    m->limit = limit;
}

static void test_read_inline(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "inl", 1, 1); /* length 100 */
    uint8_t payload[100];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7 + 1);
    uint8_t *buf = malloc(ROUTE_MSG_MAX_LEN), *plain = malloc(4096);
    assert_non_null(buf);
    assert_non_null(plain);
    route_msg_t m, d;
    size_t len, plain_len;

    /* the request: limit rides in a field every request already carries */
    read_req(&m, &r, 0);
    assert_int_equal(route_msg_encode(&m, plain, 4096, &plain_len), 0);
    read_req(&m, &r, 65536);
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
    assert_int_equal(len, plain_len);
    size_t diff = 0;
    for (size_t i = 0; i < len; i++)
        diff += buf[i] != plain[i];
    assert_true(diff >= 1 && diff <= 4); /* only the u32 limit */
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_REQ, buf, len, &d), 0);
    assert_int_equal(d.limit, 65536);
    route_msg_clear(&d);
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_REQ, plain, plain_len, &d), 0);
    assert_int_equal(d.limit, 0);
    route_msg_clear(&d);

    /* the answer with its bytes */
    const kvm_route_t *rp = &r;
    route_msg_init(&m, RMSG_READ_RESP);
    m.req_id = 5;
    m.rptrs = &rp;
    m.n_routes = 1;
    assert_int_equal(route_msg_encode(&m, plain, 4096, &plain_len), 0);
    m.flags = RMSG_READ_INLINE;
    m.inl = payload;
    m.inl_len = sizeof(payload);
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
    assert_int_equal(len, plain_len + 4 + sizeof(payload));
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len, &d), 0);
    assert_true(d.flags & RMSG_READ_INLINE);
    assert_int_equal(d.inl_len, sizeof(payload));
    assert_ptr_equal(d.inl, buf + len - sizeof(payload)); /* a view, not a copy */
    assert_memory_equal(d.inl, payload, sizeof(payload));
    assert_true(kvm_route_equal(&d.routes[0], &r));
    route_msg_clear(&d);
    /* a plain answer has no bytes */
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, plain, plain_len, &d), 0);
    assert_int_equal(d.inl_len, 0);
    assert_null(d.inl);
    route_msg_clear(&d);
    /* every truncation and a trailing byte are refused */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, cut, &d), 0);
    buf[len] = 0;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len + 1, &d),
                     KVMESH_EPROTO);
    /* a length other than the route's: the prefix says 99 and one byte is gone */
    buf[len - sizeof(payload) - 4] = 99;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len - 1, &d),
                     KVMESH_EPROTO);
    /* the bytes without the flag: trailing bytes (what an old reader would see, had it asked) */
    memcpy(plain + plain_len, buf + plain_len, 4 + sizeof(payload));
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, plain,
                                      plain_len + 4 + sizeof(payload), &d),
                     KVMESH_EPROTO);

    /* the encoder refuses inconsistent inline parts */
    m.inl_len = 99; /* not the route's length */
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    m.inl_len = sizeof(payload);
    m.n_routes = 0; /* no route */
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    m.n_routes = 1;
    m.flags = 0; /* bytes without the flag */
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    read_req(&m, &r, 1);
    m.flags = RMSG_READ_INLINE; /* a request never carries bytes */
    m.inl = payload;
    m.inl_len = sizeof(payload);
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    m.flags = 0;
    m.inl_len = 0;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0); /* the flag alone */
    kvm_route_t big = r;
    big.length = ROUTE_MSG_MAX_INLINE + 1;
    const kvm_route_t *bp = &big;
    route_msg_init(&m, RMSG_READ_RESP);
    m.rptrs = &bp;
    m.n_routes = 1;
    m.flags = RMSG_READ_INLINE;
    m.inl = buf; /* any bytes: refused for the length alone */
    m.inl_len = ROUTE_MSG_MAX_INLINE + 1;
    uint8_t *out = malloc(ROUTE_MSG_MAX_LEN);
    assert_non_null(out);
    assert_int_equal(route_msg_encode(&m, out, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);

    /* an inline answer travels in a batch like any answer */
    route_msg_init(&m, RMSG_READ_RESP);
    m.rptrs = &rp;
    m.n_routes = 1;
    m.flags = RMSG_READ_INLINE;
    m.inl = payload;
    m.inl_len = sizeof(payload);
    assert_int_equal(route_msg_encode(&m, out, ROUTE_MSG_MAX_LEN, &len), 0);
    route_batch_buf_t b;
    route_batch_buf_init(&b);
    assert_int_equal(route_batch_append(&b, out, len), 0);
    assert_int_equal(route_batch_append(&b, plain, plain_len), 0);
    size_t blen = 0;
    const uint8_t *bb = route_batch_bytes(&b, &blen);
    route_batch_view_t *v = malloc(sizeof(*v));
    assert_non_null(v);
    assert_int_equal(route_batch_decode(ROUTE_MSG_BASE + RMSG_BATCH, bb, blen, v), 0);
    assert_int_equal(v->n, 2);
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + v->kind[0], v->item[0], v->len[0], &d), 0);
    assert_memory_equal(d.inl, payload, sizeof(payload));
    route_msg_clear(&d);
    free(v);
    route_batch_buf_free(&b);
    free(out);
    free(plain);
    free(buf);
    kvm_route_free(&r);
}

/* The head form of an inline answer (RMSG_READ_ATT): the bytes travel as the env attachment (the
 * RPC frame's raw payload), the message ends with their length alone; route_msg_attach joins
 * them, and an attachment that is missing or of another length leaves a plain answer. */
static void test_read_att(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "att", 1, 1); /* length 100 */
    uint8_t *payload = malloc(100);
    assert_non_null(payload);
    for (size_t i = 0; i < 100; i++)
        payload[i] = (uint8_t)(i * 5 + 3);
    uint8_t *buf = malloc(ROUTE_MSG_MAX_LEN), *plain = malloc(4096);
    assert_non_null(buf);
    assert_non_null(plain);
    route_msg_t m, d;
    size_t len, plain_len;

    /* the request says it takes the attachment form in its flags, nothing else changes */
    read_req(&m, &r, 65536);
    m.flags = RMSG_READ_ATT;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_REQ, buf, len, &d), 0);
    assert_int_equal(d.flags, RMSG_READ_ATT);
    assert_int_equal(d.att_len, 0);
    route_msg_clear(&d);

    const kvm_route_t *rp = &r;
    route_msg_init(&m, RMSG_READ_RESP);
    m.req_id = 5;
    m.rptrs = &rp;
    m.n_routes = 1;
    assert_int_equal(route_msg_encode(&m, plain, 4096, &plain_len), 0);
    m.flags = RMSG_READ_ATT;
    m.att_len = 100;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
    assert_int_equal(len, plain_len + 4); /* the length, not the bytes */
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len, &d), 0);
    assert_int_equal(d.att_len, 100);
    assert_int_equal(d.inl_len, 0);
    assert_null(d.inl);
    /* attached: an inline answer whose bytes are the attachment's buffer (no copy) */
    env_payload_t pl = {.buf = payload, .len = 100};
    route_msg_attach(&d, &pl);
    assert_true(d.flags & RMSG_READ_INLINE);
    assert_false(d.flags & RMSG_READ_ATT);
    assert_ptr_equal(d.inl, payload);
    assert_int_equal(d.inl_len, 100);
    assert_ptr_equal(d.inl_att, &pl);
    route_msg_clear(&d);
    /* missing, short, or taken already: a plain answer */
    env_payload_t shortp = {.buf = payload, .len = 99}, taken = {.buf = NULL, .len = 100};
    env_payload_t *bad[] = {NULL, &shortp, &taken};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len, &d), 0);
        route_msg_attach(&d, bad[i]);
        assert_int_equal(d.flags & (RMSG_READ_INLINE | RMSG_READ_ATT), 0);
        assert_int_equal(d.inl_len, 0);
        assert_int_equal(d.att_len, 0);
        assert_null(d.inl);
        assert_true(kvm_route_equal(&d.routes[0], &r));
        route_msg_clear(&d);
    }
    /* an attachment given to a message of another form changes nothing */
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, plain, plain_len, &d), 0);
    route_msg_attach(&d, &pl);
    assert_int_equal(d.flags, 0);
    assert_null(d.inl);
    route_msg_clear(&d);
    /* every truncation, a trailing byte and another length are refused */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, cut, &d), 0);
    buf[len] = 0;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len + 1, &d),
                     KVMESH_EPROTO);
    buf[len - 4] = 99;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len, &d),
                     KVMESH_EPROTO);
    /* both forms at once are refused both ways */
    m.flags = RMSG_READ_ATT | RMSG_READ_INLINE;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    m.flags = RMSG_READ_ATT;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
    size_t flags_at = len - 4; /* find the flags word: the u32 8 that is not the length */
    for (size_t i = 0; i + 4 <= len - 4; i++)
        if (buf[i] == RMSG_READ_ATT && !buf[i + 1] && !buf[i + 2] && !buf[i + 3])
            flags_at = i;
    assert_true(flags_at < len - 4);
    buf[flags_at] = RMSG_READ_ATT | RMSG_READ_INLINE;
    assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len, &d),
                     KVMESH_EPROTO);
    /* the encoder refuses bytes in a head, a length other than the route's, a length elsewhere */
    m.inl = payload;
    m.inl_len = 100;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    m.inl = NULL;
    m.inl_len = 0;
    m.att_len = 99;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    m.flags = 0;
    m.att_len = 100;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);

    free(plain);
    free(buf);
    free(payload);
    kvm_route_free(&r);
}

/* r's object length and its replicas' (a route's replicas hold the object's length). */
static void set_length(kvm_route_t *r, uint64_t n)
{
    r->length = n;
    for (uint32_t i = 0; i < r->n_replicas; i++)
        r->replicas[i].length = n;
}

/* The attached form is bounded apart from the copied one: a head announcing more than
 * ROUTE_MSG_MAX_INLINE (up to ROUTE_MSG_MAX_INLINE_ATT) bytes encodes and decodes, one past
 * ROUTE_MSG_MAX_INLINE_ATT is refused, and the copied form keeps its own bound. */
static void test_read_att_bound(void **state)
{
    (void)state;
    kvm_route_t r;
    fixture_route(&r, "att-big", 1, 1);
    const kvm_route_t *rp = &r;
    uint8_t *buf = malloc(ROUTE_MSG_MAX_LEN);
    assert_non_null(buf);
    route_msg_t m, d;
    size_t len = 0;
    _Static_assert(ROUTE_MSG_MAX_INLINE_ATT > ROUTE_MSG_MAX_INLINE, "attached bound above copied");
    static const uint32_t ok[] = {ROUTE_MSG_MAX_INLINE + 1, 1024u * 1024, ROUTE_MSG_MAX_INLINE_ATT};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        set_length(&r, ok[i]);
        route_msg_init(&m, RMSG_READ_RESP);
        m.req_id = 9;
        m.rptrs = &rp;
        m.n_routes = 1;
        m.flags = RMSG_READ_ATT;
        m.att_len = ok[i];
        assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), 0);
        assert_int_equal(route_msg_decode(ROUTE_MSG_BASE + RMSG_READ_RESP, buf, len, &d), 0);
        assert_int_equal(d.att_len, ok[i]);
        route_msg_clear(&d);
    }
    /* one past the attached bound: refused */
    set_length(&r, ROUTE_MSG_MAX_INLINE_ATT + 1);
    m.att_len = ROUTE_MSG_MAX_INLINE_ATT + 1;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    /* the copied form: past ROUTE_MSG_MAX_INLINE refused, whatever the attached bound */
    uint8_t *bytes = calloc(1, ROUTE_MSG_MAX_INLINE + 1);
    assert_non_null(bytes);
    set_length(&r, ROUTE_MSG_MAX_INLINE + 1);
    route_msg_init(&m, RMSG_READ_RESP);
    m.rptrs = &rp;
    m.n_routes = 1;
    m.flags = RMSG_READ_INLINE;
    m.inl = bytes;
    m.inl_len = ROUTE_MSG_MAX_INLINE + 1;
    assert_int_equal(route_msg_encode(&m, buf, ROUTE_MSG_MAX_LEN, &len), KVMESH_EINVAL);
    free(bytes);
    set_length(&r, 100);
    free(buf);
    kvm_route_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_kinds),   cmocka_unit_test(test_record_and_policy),
        cmocka_unit_test(test_table_and_owner_index), cmocka_unit_test(test_packed_routes),
        cmocka_unit_test(test_table_expiry_index),    cmocka_unit_test(test_table_put_in_place),
        cmocka_unit_test(test_batch_codec),           cmocka_unit_test(test_route_frame),
        cmocka_unit_test(test_read_inline),           cmocka_unit_test(test_read_att),
        cmocka_unit_test(test_batch_reserve),         cmocka_unit_test(test_decoded_copy_asserts),
        cmocka_unit_test(test_read_att_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
