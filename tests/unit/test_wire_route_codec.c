/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wire_route_codec.c — the hand-written route codec (src/core/wire_route.c) against its
 * oracle, the protobuf-c codec it replaced (wire_route_encode_pb / wire_route_decode_pb):
 *   - random valid routes of every shape (live hot-only, hot + pending, hot + materialized,
 *     cold-only, tombstones pending/finalized; 0..8 replicas; predecessor op and version absent
 *     or present) encode to the same bytes and sizes, and fail alike on a short buffer;
 *   - protobuf-c-encoded routes rewritten the ways protobuf allows (fields in another order,
 *     unknown fields of every wire type, earlier occurrences of scalars that the last one
 *     overrides) decode to the original with both decoders;
 *   - rewrites that change the value (a submessage split into two occurrences that protobuf-c
 *     merges, duplicated fields, random byte flips, truncations and insertions) decode alike:
 *     same return code, same error message, same route;
 *   - a few merge results pinned by hand, so that the semantics are visible without the oracle.
 * With KVMESH_WRITE_SEEDS=<dir> it also writes the seed corpus of fuzz_wire_route_diff
 * (<dir>/wire_route_diff/seed-NNN: rewritten records, valid and not), which is how
 * tests/fuzz/corpus/wire_route_diff/ was generated.
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

#define ITERS 4000

/* ---- deterministic random records: tests/support/wire_rand.h ------------------------------ */

/* ---- comparing the two decoders ----------------------------------------------------------- */

static uint8_t buf[KVM_WIRE_MAX_RECORD_LEN], buf2[KVM_WIRE_MAX_RECORD_LEN];
static size_t n_accept, n_reject;

/* Both decoders on the same bytes: same code, message and value. Returns the code; on 0 the
 * route (new decoder's) is left in *out for the caller to free. */
static int decode_both(const uint8_t *in, size_t len, kvm_route_t *out)
{
    kvm_route_t o;
    int rc_o = wire_route_decode_pb(in, len, &o);
    char msg_o[512];
    snprintf(msg_o, sizeof(msg_o), "%s", rc_o ? kvmesh_last_error() : "");
    int rc_n = wire_route_decode(in, len, out);
    if (rc_n != rc_o)
        fail_msg("decoders disagree: oracle %d (%s), new %d (%s)", rc_o, msg_o, rc_n,
                 rc_n ? kvmesh_last_error() : "");
    if (rc_n) {
        assert_string_equal(kvmesh_last_error(), msg_o);
        assert_null(out->ident.enc);
        n_reject++;
    } else {
        assert_true(kvm_route_equal(out, &o));
        n_accept++;
    }
    kvm_route_free(&o);
    return rc_n;
}

static size_t encode_both(const kvm_route_t *r)
{
    size_t n = 0, m = 0;
    assert_int_equal(wire_route_encode_pb(r, buf2, sizeof(buf2), &m), 0);
    assert_int_equal(wire_route_encode(r, buf, sizeof(buf), &n), 0);
    assert_int_equal(n, m);
    assert_memory_equal(buf, buf2, n);
    return n;
}

/* ---- a small protobuf writer/splitter for rewriting encoded routes ------------------------ */

enum { T_NONE, T_ROUTE, T_IDENT, T_VER, T_OP, T_REP, T_COLD, T_PEND, T_MAT };

/* The message type of field `num` of a message of type `t` (T_NONE: not a message). */
static int sub_type(int t, uint32_t num)
{
    switch (t) {
    case T_ROUTE:
        return num == 1               ? T_IDENT
               : num == 2 || num == 3 ? T_VER
               : num == 4 || num == 5 ? T_OP
               : num == 10            ? T_REP
               : num == 11            ? T_COLD
                                      : T_NONE;
    case T_COLD:
        return num == 1 || num == 2 ? T_OP : num == 5 ? T_PEND : num == 6 ? T_MAT : T_NONE;
    default:
        return T_NONE;
    }
}

typedef struct fld {
    uint32_t num, wt;
    const uint8_t *val; /* the value's bytes (for wt 2 without the length prefix) */
    size_t len;
} fld_t;

static uint64_t get_varint(const uint8_t **p)
{
    uint64_t v = 0;
    for (int s = 0;; s += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return v;
    }
}

/* Splits a well-formed body (as written by the encoders) into its fields. */
static size_t split(const uint8_t *p, size_t n, fld_t *out, size_t max)
{
    const uint8_t *end = p + n;
    size_t k = 0;
    while (p < end) {
        assert_true(k < max);
        uint64_t tag = get_varint(&p);
        fld_t *f = &out[k++];
        f->num = (uint32_t)(tag >> 3);
        f->wt = (uint32_t)(tag & 7);
        const uint8_t *s = p;
        switch (f->wt) {
        case 0:
            get_varint(&p);
            f->val = s;
            f->len = (size_t)(p - s);
            break;
        case 1:
            f->val = p;
            f->len = 8;
            p += 8;
            break;
        case 2:
            f->len = get_varint(&p);
            f->val = p;
            p += f->len;
            break;
        default:
            fail_msg("unexpected wire type %u", f->wt);
        }
    }
    assert_true(p == end);
    return k;
}

typedef struct out {
    uint8_t b[4 * KVM_WIRE_MAX_RECORD_LEN];
    size_t n;
} out_t;

static void put_varint(out_t *o, uint64_t v)
{
    do {
        assert_true(o->n < sizeof(o->b));
        o->b[o->n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void put_raw(out_t *o, const void *p, size_t n)
{
    assert_true(o->n + n <= sizeof(o->b));
    if (n)
        memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put_field(out_t *o, uint32_t num, uint32_t wt, const uint8_t *val, size_t len)
{
    put_varint(o, (uint64_t)num << 3 | wt);
    if (wt == 2)
        put_varint(o, len);
    put_raw(o, val, len);
}

/* An unknown field of a random wire type and a field number no record uses. */
static void put_unknown(out_t *o)
{
    static const uint32_t nums[] = {12, 15, 16, 99, 2047, 1u << 20, (1u << 29) - 1};
    uint8_t v[16];
    uint32_t wt = (uint32_t[]){0, 1, 2, 5}[wr_rnd() % 4];
    size_t len = wt == 0 ? 1 + wr_rnd() % 10 : wt == 1 ? 8 : wt == 5 ? 4 : wr_rnd() % sizeof(v);
    for (size_t i = 0; i < len; i++)
        v[i] = (uint8_t)wr_rnd();
    if (wt == 0) {
        for (size_t i = 0; i + 1 < len; i++)
            v[i] |= 0x80;
        v[len - 1] &= 0x7f;
    }
    put_field(o, nums[wr_rnd() % 7], wt, v, len);
}

/*
 * Rewrites the body of a message of type t into o. preserve: only rewrites that keep the
 * decoded value (shuffle of non-replica fields, unknown fields, an earlier scalar occurrence
 * that the real one overrides); otherwise also submessage splits and duplicated fields.
 */
static void rewrite(int t, const uint8_t *p, size_t n, out_t *o, bool preserve)
{
    fld_t f[64];
    size_t k = split(p, n, f, 64);
    if (wr_rnd() % 2) { /* shuffle; replicas (repeated) keep their relative order when preserving */
        for (size_t i = k; i > 1; i--) {
            size_t j = wr_rnd() % i;
            if (preserve && t == T_ROUTE && (f[i - 1].num == 10 || f[j].num == 10))
                continue;
            fld_t x = f[i - 1];
            f[i - 1] = f[j];
            f[j] = x;
        }
    }
    for (size_t i = 0; i < k; i++) {
        if (wr_rnd() % 4 == 0)
            put_unknown(o);
        int st = f[i].wt == 2 ? sub_type(t, f[i].num) : T_NONE;
        if (f[i].wt == 0 && wr_rnd() % 4 == 0) { /* an earlier occurrence the real one overrides */
            uint8_t junk[] = {(uint8_t)(0x80 | wr_rnd()), (uint8_t)(wr_rnd() & 0x7f)};
            put_field(o, f[i].num, 0, junk, 2);
        }
        if (!preserve && wr_rnd() % 8 == 0)
            put_field(o, f[i].num, f[i].wt, f[i].val, f[i].len); /* duplicated */
        if (st != T_NONE && !preserve && st != T_REP && wr_rnd() % 3 == 0) {
            /* two occurrences, each with a random subset of the fields: protobuf-c merges */
            fld_t g[64];
            size_t m = split(f[i].val, f[i].len, g, 64);
            out_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
            assert_non_null(a);
            assert_non_null(b);
            for (size_t j = 0; j < m; j++) {
                uint64_t r = wr_rnd() % 3;
                if (r != 1)
                    put_field(a, g[j].num, g[j].wt, g[j].val, g[j].len);
                if (r != 0)
                    put_field(b, g[j].num, g[j].wt, g[j].val, g[j].len);
            }
            put_field(o, f[i].num, 2, a->b, a->n);
            put_field(o, f[i].num, 2, b->b, b->n);
            free(a);
            free(b);
        } else if (st != T_NONE && wr_rnd() % 2) {
            out_t *s = calloc(1, sizeof(*s));
            assert_non_null(s);
            rewrite(st, f[i].val, f[i].len, s, preserve);
            put_field(o, f[i].num, 2, s->b, s->n);
            free(s);
        } else {
            put_field(o, f[i].num, f[i].wt, f[i].val, f[i].len);
        }
    }
    if (wr_rnd() % 4 == 0)
        put_unknown(o);
}

/* ---- fuzz seeds (run once with KVMESH_WRITE_SEEDS=tests/fuzz/corpus) ---------------------- */

#define N_SEEDS 48

static void write_seed(int idx, const uint8_t *p, size_t n)
{
    const char *root = getenv("KVMESH_WRITE_SEEDS");
    char path[512];
    if (!root || idx >= N_SEEDS)
        return;
    snprintf(path, sizeof(path), "%s/wire_route_diff", root);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", path, strerror(errno));
    snprintf(path, sizeof(path), "%s/wire_route_diff/seed-%03d", root, idx);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_same_bytes(void **state)
{
    (void)state;
    wr_seed(0x5eed0001);
    unsigned shapes[6] = {0}, reps[KVM_MAX_REPLICAS + 1] = {0}, pred_op = 0;
    for (int i = 0; i < ITERS; i++) {
        kvm_route_t a, d;
        int shape = i % 6;
        wr_route(&a, shape);
        shapes[shape]++;
        reps[a.n_replicas]++;
        pred_op += !kvm_op_id_is_nil(&a.predecessor_op);
        size_t n = encode_both(&a);
        assert_int_equal(decode_both(buf, n, &d), 0);
        assert_true(kvm_route_equal(&a, &d));
        kvm_route_free(&d);
        /* a short buffer fails alike */
        size_t m1 = 1, m2 = 1;
        size_t cap = (size_t)(wr_rnd() % n);
        assert_int_equal(wire_route_encode(&a, buf, cap, &m1), KVMESH_ETOOBIG);
        assert_int_equal(wire_route_encode_pb(&a, buf2, cap, &m2), KVMESH_ETOOBIG);
        assert_int_equal(m1, 0);
        assert_int_equal(m2, 0);
        kvm_route_free(&a);
    }
    for (int s = 0; s < 6; s++)
        assert_true(shapes[s] > 0);
    for (int k = 0; k <= KVM_MAX_REPLICAS; k++)
        assert_true(reps[k] > 0); /* 0 (cold-only, tombstones) through 8 replicas */
    assert_true(pred_op > 0 && pred_op < ITERS);
}

static void test_encode_refusals_alike(void **state)
{
    (void)state;
    wr_seed(0x5eed0002);
    kvm_route_t a;
    wr_route(&a, 2);
    a.replicas[0].length++; /* invalid: replica length != route length */
    size_t n1 = 1, n2 = 1;
    assert_int_equal(wire_route_encode(&a, buf, sizeof(buf), &n1), KVMESH_EINVAL);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
    assert_int_equal(wire_route_encode_pb(&a, buf, sizeof(buf), &n2), KVMESH_EINVAL);
    assert_string_equal(kvmesh_last_error(), msg);
    assert_int_equal(n1, 0);
    kvm_route_free(&a);
}

/* Rewrites protobuf allows without changing the value: both decode to the original. */
static void test_preserving_rewrites(void **state)
{
    (void)state;
    wr_seed(0x5eed0003);
    out_t *o = malloc(sizeof(*o));
    assert_non_null(o);
    for (int i = 0; i < ITERS; i++) {
        kvm_route_t a, d;
        wr_route(&a, i % 6);
        size_t n = encode_both(&a);
        o->n = 0;
        put_raw(o, buf, WIRE_HEADER_LEN);
        rewrite(T_ROUTE, buf + WIRE_HEADER_LEN, n - WIRE_HEADER_LEN, o, true);
        if (o->n > KVM_WIRE_MAX_RECORD_LEN) {
            kvm_route_free(&a);
            continue;
        }
        assert_int_equal(decode_both(o->b, o->n, &d), 0);
        assert_true(kvm_route_equal(&a, &d));
        kvm_route_free(&d);
        kvm_route_free(&a);
    }
    free(o);
}

/* Rewrites that may change or break the value, then byte mutations: both decoders agree. */
static void test_agreement(void **state)
{
    (void)state;
    wr_seed(0x5eed0004);
    out_t *o = malloc(sizeof(*o));
    assert_non_null(o);
    n_accept = n_reject = 0;
    for (int i = 0; i < ITERS; i++) {
        kvm_route_t a, d;
        wr_route(&a, i % 6);
        size_t n = encode_both(&a);
        kvm_route_free(&a);
        o->n = 0;
        put_raw(o, buf, WIRE_HEADER_LEN);
        rewrite(T_ROUTE, buf + WIRE_HEADER_LEN, n - WIRE_HEADER_LEN, o, false);
        size_t len = o->n > KVM_WIRE_MAX_RECORD_LEN ? KVM_WIRE_MAX_RECORD_LEN : o->n;
        write_seed(i, o->b, len);
        if (decode_both(o->b, len, &d) == 0)
            kvm_route_free(&d);
        for (int m = 0; m < 8; m++) { /* flips, truncations, an inserted byte */
            uint8_t *p = o->b;
            size_t l = len, at = WIRE_HEADER_LEN + (size_t)wr_rnd() % (len - WIRE_HEADER_LEN);
            uint8_t keep = p[at];
            switch (wr_rnd() % 3) {
            case 0:
                p[at] ^= (uint8_t)(1u << (wr_rnd() % 8));
                break;
            case 1:
                l = at;
                break;
            default:
                p[at] = (uint8_t)wr_rnd();
                break;
            }
            if (decode_both(p, l, &d) == 0)
                kvm_route_free(&d);
            p[at] = keep;
        }
    }
    free(o);
    /* both outcomes are exercised (not a test that cannot fail to find a difference) */
    assert_true(n_accept > ITERS / 10);
    assert_true(n_reject > ITERS / 10);
}

/* Hand-pinned merge results (what protobuf-c 1.4 does, and so what the new decoder must do). */
static void test_pinned_merges(void **state)
{
    (void)state;
    wr_seed(0x5eed0005);
    kvm_route_t a, d;
    wr_route(&a, 2);
    size_t n = encode_both(&a);
    fld_t f[64];
    size_t k = split(buf + WIRE_HEADER_LEN, n - WIRE_HEADER_LEN, f, 64);
    assert_int_equal(f[0].num, 1); /* ident first, as protobuf-c writes it */
    fld_t g[4];
    size_t m = split(f[0].val, f[0].len, g, 4);
    out_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    /* ident split in two: {tenant}, {key, domain}: bytes merge -> the original ident */
    put_raw(o, buf, WIRE_HEADER_LEN);
    out_t *x = calloc(1, sizeof(*x)), *y = calloc(1, sizeof(*y));
    assert_non_null(x);
    assert_non_null(y);
    for (size_t j = 0; j < m; j++)
        put_field(g[j].num == 1 ? x : y, g[j].num, g[j].wt, g[j].val, g[j].len);
    put_field(o, 1, 2, y->b, y->n);
    for (size_t i = 1; i < k; i++)
        put_field(o, f[i].num, f[i].wt, f[i].val, f[i].len);
    put_field(o, 1, 2, x->b, x->n); /* tenant last: the ident merges across the whole record */
    assert_int_equal(decode_both(o->b, o->n, &d), 0);
    assert_true(kvm_route_equal(&a, &d));
    kvm_route_free(&d);

    /* version repeated as an empty message: integers take the later (absent = 0) values, so
     * the version becomes NONE and the route is invalid */
    o->n = 0;
    put_raw(o, buf, n);
    put_field(o, 2, 2, NULL, 0);
    assert_int_equal(decode_both(o->b, o->n, &d), KVMESH_EPROTO);

    /* cold repeated as an empty message: keeps the earlier state and bytes, but the op ids'
     * integers survive only because the later occurrence has no op ids at all */
    o->n = 0;
    put_raw(o, buf, n);
    put_field(o, 11, 2, NULL, 0);
    assert_int_equal(decode_both(o->b, o->n, &d), 0);
    assert_true(kvm_route_equal(&a, &d));
    kvm_route_free(&d);

    /* two cold occurrences without any state: protobuf-c's merge fails -> malformed */
    o->n = 0;
    put_raw(o, buf, WIRE_HEADER_LEN);
    for (size_t i = 0; i < k - 1; i++) /* everything but the cold backing (last) */
        put_field(o, f[i].num, f[i].wt, f[i].val, f[i].len);
    put_field(o, 11, 2, NULL, 0);
    put_field(o, 11, 2, NULL, 0);
    assert_int_equal(decode_both(o->b, o->n, &d), KVMESH_EPROTO);
    assert_non_null(strstr(kvmesh_last_error(), "malformed"));

    /* a padded (non-minimal) 5-byte tag for field 6 and a 10-byte varint 1: protobuf accepts
     * both, so the length becomes 1 and the route fails validation (not "malformed") */
    o->n = 0;
    put_raw(o, buf, n);
    static const uint8_t padded[] = {0x80 | (6 << 3),
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x00,
                                     0x81,
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x80,
                                     0x00};
    put_raw(o, padded, sizeof(padded));
    assert_int_equal(decode_both(o->b, o->n, &d), KVMESH_EPROTO);
    assert_null(strstr(kvmesh_last_error(), "malformed"));
    free(x);
    free(y);
    free(o);
    kvm_route_free(&a);
}

/* The identity frame's hand-written codec (wire_ident_encode_fast / wire_ident_decode_in)
 * against wire_ident_encode / wire_ident_decode (protobuf-c): same bytes, same refusals on a
 * short buffer; on the frames and their flips, truncations and inserted bytes the same code,
 * message and identity; a decoded encoding lies in the caller's storage exactly when it fits. And
 * wire_route_decode_in: the route of wire_route_decode, its identity in the storage when it
 * fits, nothing owned after a failure. */
static void test_ident_frame_and_storage(void **state)
{
    (void)state;
    wr_seed(0x5eed0006);
    static uint8_t b1[KVM_WIRE_MAX_RECORD_LEN], b2[KVM_WIRE_MAX_RECORD_LEN];
    uint8_t store[192];
    size_t in_store = 0, on_heap = 0, accepted = 0, refused = 0;
    for (int i = 0; i < ITERS; i++) {
        kvm_ident_t a;
        wr_ident(&a);
        size_t n1 = 0, n2 = 0;
        assert_int_equal(wire_ident_encode(&a, b1, sizeof(b1), &n1), 0);
        assert_int_equal(wire_ident_encode_fast(&a, b2, sizeof(b2), &n2), 0);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        size_t short_cap = (size_t)wr_rnd() % n1;
        assert_int_equal(wire_ident_encode_fast(&a, b2, short_cap, &n2),
                         wire_ident_encode(&a, b1 + 0, short_cap, &n1) == 0 ? 0 : KVMESH_ETOOBIG);
        assert_int_equal(wire_ident_encode(&a, b1, sizeof(b1), &n1), 0);
        for (int m = 0; m < 9; m++) {
            uint8_t *p = b1;
            size_t l = n1, at = (size_t)wr_rnd() % n1;
            uint8_t keep = p[at];
            if (m > 0) { /* m == 0: the frame as written */
                switch (wr_rnd() % 3) {
                case 0:
                    p[at] ^= (uint8_t)(1u << (wr_rnd() % 8));
                    break;
                case 1:
                    l = at;
                    break;
                default:
                    p[at] = (uint8_t)wr_rnd();
                    break;
                }
            }
            kvm_ident_t o, d;
            int rc_o = wire_ident_decode(p, l, &o);
            char msg_o[512];
            snprintf(msg_o, sizeof(msg_o), "%s", rc_o ? kvmesh_last_error() : "");
            int rc_n = wire_ident_decode_in(p, l, &d, store, sizeof(store));
            if (rc_n != rc_o)
                fail_msg("ident decoders disagree: oracle %d (%s), new %d (%s)", rc_o, msg_o, rc_n,
                         rc_n ? kvmesh_last_error() : "");
            if (rc_n) {
                assert_string_equal(kvmesh_last_error(), msg_o);
                assert_null(d.enc);
                refused++;
            } else {
                assert_true(kvm_ident_equal(&d, &o));
                assert_int_equal(d.hash, o.hash);
                accepted++;
                if (d.enc == store) {
                    assert_true(d.enc_len <= sizeof(store));
                    in_store++;
                } else {
                    assert_true(d.enc_len > sizeof(store));
                    on_heap++;
                    kvm_ident_free(&d);
                }
                kvm_ident_free(&o);
            }
            p[at] = keep;
        }
        kvm_ident_free(&a);
        /* a route's identity in the storage */
        kvm_route_t r, x, y;
        wr_route(&r, i % 6);
        size_t n = encode_both(&r);
        size_t l = i % 2 ? n : (size_t)wr_rnd() % n; /* every other one truncated */
        int rc_x = wire_route_decode(buf, l, &x);
        int rc_y = wire_route_decode_in(buf, l, &y, store, sizeof(store));
        assert_int_equal(rc_x, rc_y);
        if (rc_y == 0) {
            assert_true(kvm_route_equal(&x, &y));
            assert_true((y.ident.enc == store) == (y.ident.enc_len <= sizeof(store)));
            if (y.ident.enc == store)
                memset(&y.ident, 0, sizeof(y.ident));
            kvm_route_free(&y);
            kvm_route_free(&x);
        } else {
            assert_null(y.ident.enc);
        }
        kvm_route_free(&r);
    }
    assert_true(in_store > ITERS / 10 && on_heap > ITERS / 20);
    assert_true(accepted > ITERS && refused > ITERS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bytes),          cmocka_unit_test(test_encode_refusals_alike),
        cmocka_unit_test(test_preserving_rewrites), cmocka_unit_test(test_agreement),
        cmocka_unit_test(test_pinned_merges),       cmocka_unit_test(test_ident_frame_and_storage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
