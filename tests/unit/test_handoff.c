/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the hot-upgrade pieces: the handoff index codec and its rejections
 * (src/store/handoff.c), alloc_reserve_at (src/store/alloc.c), and a segment handed from one
 * registry to another over a unix socketpair with SCM_RIGHTS and adopted there with its id
 * (seg_adopt, src/net/seg.c): the same memory, not a copy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvmesh.h"
#include "net/seg.h"
#include "store/alloc.h"
#include "store/handoff.h"

/* Two segments, slots 0..n-1 of 100 + 64*i bytes each at 4 KiB strides in segment i % 2. */
static void make_index(struct kvm_handoff *h, uint32_t n)
{
    kvm_handoff_init(h);
    memset(h->id.b, 0x5a, sizeof(h->id.b));
    h->epoch = 42;
    h->slot_seq = 1000;
    h->n_segs = 2;
    h->segs[0] = (struct kvm_handoff_seg){0x1111000000000001ull, 1 << 20, -1};
    h->segs[1] = (struct kvm_handoff_seg){0x1111000000000002ull, 1 << 20, -1};
    for (uint32_t i = 0; i < n; i++) {
        kvm_ident_t id;
        char key[32];
        snprintf(key, sizeof(key), "key-%u", i);
        assert_int_equal(kvm_ident_init(&id, "tenant", NULL, key, strlen(key)), 0);
        assert_int_equal(kvm_handoff_add_slot(h, i % 2,
                                              i % 5 ? KVM_HANDOFF_COMMITTED : KVM_HANDOFF_RECLAIM,
                                              (uint64_t)(i / 2) * 4096, 100 + 64 * i, i + 1, &id),
                         0);
        kvm_ident_free(&id);
    }
}

static void test_codec_round_trip(void **state)
{
    (void)state;
    struct kvm_handoff h, d;
    make_index(&h, 40);
    uint8_t *buf;
    size_t len;
    assert_int_equal(kvm_handoff_encode(&h, &buf, &len), 0);
    assert_int_equal(kvm_handoff_decode(buf, len, &d), 0);
    assert_memory_equal(d.id.b, h.id.b, sizeof(h.id.b));
    assert_int_equal(d.epoch, 42);
    assert_int_equal(d.slot_seq, 1000);
    assert_int_equal(d.n_segs, 2);
    assert_int_equal(d.segs[1].id, h.segs[1].id);
    assert_int_equal(d.segs[0].fd, -1);
    assert_int_equal(d.n_slots, 40);
    for (uint32_t i = 0; i < 40; i++) {
        assert_int_equal(d.slots[i].segi, h.slots[i].segi);
        assert_int_equal(d.slots[i].state, h.slots[i].state);
        assert_int_equal(d.slots[i].off, h.slots[i].off);
        assert_int_equal(d.slots[i].len, h.slots[i].len);
        assert_int_equal(d.slots[i].seq, h.slots[i].seq);
        assert_true(kvm_ident_equal(&d.slots[i].ident, &h.slots[i].ident));
    }
    /* seeds for tests/fuzz/corpus/handoff when asked (selector byte 1: the index decoder) */
    const char *dir = getenv("KVMESH_HANDOFF_SEED_DIR");
    if (dir) {
        char path[512];
        snprintf(path, sizeof(path), "%s/seed-index-40", dir);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fputc(1, f);
        fwrite(buf, 1, len, f);
        fclose(f);
    }
    free(buf);
    kvm_handoff_free(&d);
    kvm_handoff_free(&h);
}

/* Encodes h, applies `mut` to the bytes (or not), and expects the decoder to refuse. */
static void expect_rejected(struct kvm_handoff *h, const char *why)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(kvm_handoff_encode(h, &buf, &len), 0);
    struct kvm_handoff d;
    int rc = kvm_handoff_decode(buf, len, &d);
    if (rc != KVMESH_EPROTO)
        fail_msg("%s: decode returned %d", why, rc);
    assert_non_null(strstr(kvmesh_last_error(), "handoff index rejected"));
    assert_int_equal(d.n_slots, 0);
    free(buf);
    kvm_handoff_free(h);
}

static void test_codec_rejects(void **state)
{
    (void)state;
    struct kvm_handoff h;
    make_index(&h, 4);
    h.slots[1].off = h.slots[3].off + 64; /* both in segment 1: overlaps slot 3 */
    expect_rejected(&h, "overlap");
    make_index(&h, 4);
    h.slots[0].off = (1 << 20) - 64; /* 100 bytes from there overrun the segment */
    expect_rejected(&h, "overrun");
    make_index(&h, 4);
    h.slots[2].off = 4096 + 8; /* misaligned */
    expect_rejected(&h, "misaligned");
    make_index(&h, 4);
    h.segs[1].id = h.segs[0].id;
    expect_rejected(&h, "duplicate segment");
    make_index(&h, 4);
    h.slots[0].seq = 1001;
    expect_rejected(&h, "seq above the counter");
    make_index(&h, 4);
    h.slots[0].state = 7;
    expect_rejected(&h, "state");
    make_index(&h, 4);
    h.slots[3].segi = 2;
    expect_rejected(&h, "segment index");
    make_index(&h, 4);
    h.epoch = 0;
    expect_rejected(&h, "zero epoch");
    make_index(&h, 0);
    h.segs[0].size = 1000; /* not a multiple of the alignment */
    expect_rejected(&h, "segment size");
    make_index(&h, 0);
    h.segs[0].size = ALLOC_MAX_SIZE + ALLOC_ALIGN; /* within SEG_MAX_SIZE, beyond an allocator */
    expect_rejected(&h, "segment above the allocator's bound");

    /* byte-level: trailing bytes, truncation, a slot count the input cannot hold, version */
    make_index(&h, 3);
    uint8_t *buf;
    size_t len;
    assert_int_equal(kvm_handoff_encode(&h, &buf, &len), 0);
    struct kvm_handoff d;
    uint8_t *big = malloc(len + 1);
    memcpy(big, buf, len);
    big[len] = 0;
    assert_int_equal(kvm_handoff_decode(big, len + 1, &d), KVMESH_EPROTO);
    for (size_t cut = 0; cut < len; cut += 7)
        assert_int_equal(kvm_handoff_decode(buf, cut, &d), KVMESH_EPROTO);
    size_t count_at = 4 + 16 + 8 + 8 + 4 + 2 * 16;
    uint8_t save[4];
    memcpy(save, buf + count_at, 4);
    memset(buf + count_at, 0xff, 4);
    assert_int_equal(kvm_handoff_decode(buf, len, &d), KVMESH_EPROTO);
    memcpy(buf + count_at, save, 4);
    buf[0] = 9;
    assert_int_equal(kvm_handoff_decode(buf, len, &d), KVMESH_EPROTO);
    free(big);
    free(buf);
    kvm_handoff_free(&h);
}

static void test_reserve_at(void **state)
{
    (void)state;
    alloc_t *a;
    assert_int_equal(alloc_new(&a, 1 << 20), 0);
    /* out of order, with gaps, one at the very end */
    uint64_t offs[] = {8192, 0, (1 << 20) - 128, 4096, 65536};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(alloc_reserve_at(a, offs[i], 100, (void *)(uintptr_t)(i + 1)), 0);
        assert_int_equal(alloc_check(a), 0);
    }
    void *u;
    uint64_t len;
    assert_int_equal(alloc_lookup(a, 4096, &u, &len), 0);
    assert_ptr_equal(u, (void *)4);
    assert_int_equal(len, 100);
    assert_int_equal(alloc_reserve_at(a, 4096 + 64, 10, NULL), KVMESH_EEXIST);  /* inside one */
    assert_int_equal(alloc_reserve_at(a, 4096 - 64, 128, NULL), KVMESH_EEXIST); /* runs into */
    assert_int_equal(alloc_reserve_at(a, 100, 10, NULL), KVMESH_EINVAL);        /* misaligned */
    assert_int_equal(alloc_reserve_at(a, (1 << 20) - 64, 100, NULL), KVMESH_EINVAL);
    assert_int_equal(alloc_check(a), 0);
    /* ordinary reservations fit around them and never overlap them */
    for (int i = 0; i < 100; i++) {
        uint64_t off;
        assert_int_equal(alloc_reserve(a, 3000, NULL, &off), 0);
        for (size_t k = 0; k < 5; k++)
            assert_true(off + 3000 <= offs[k] || off >= offs[k] + 128);
    }
    assert_int_equal(alloc_check(a), 0);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(alloc_release(a, offs[i]), 0);
    assert_int_equal(alloc_check(a), 0);
    alloc_free(a);
}

static void test_segment_over_scm_rights(void **state)
{
    (void)state;
    struct seg_registry *ra, *rb;
    assert_int_equal(seg_registry_new(&ra), 0);
    assert_int_equal(seg_registry_new(&rb), 0);
    struct seg *s;
    assert_int_equal(seg_create(ra, 1 << 20, 0, &s), 0);
    for (size_t i = 0; i < s->size; i++)
        s->base[i] = (uint8_t)(i * 7 + 3);
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    const char msg[] = "index bytes";
    assert_int_equal(
        kvm_handoff_send_msg(sp[0], KVM_HANDOFF_STATE, msg, sizeof(msg), &s->fd, 1, 5000), 0);
    uint8_t type;
    uint8_t *p;
    size_t len;
    int fds[KVM_HANDOFF_MAX_SEGS];
    uint32_t nf;
    assert_int_equal(
        kvm_handoff_recv_msg(sp[1], &type, &p, &len, fds, KVM_HANDOFF_MAX_SEGS, &nf, 5000), 0);
    assert_int_equal(type, KVM_HANDOFF_STATE);
    assert_int_equal(len, sizeof(msg));
    assert_memory_equal(p, msg, len);
    free(p);
    assert_int_equal(nf, 1);
    struct seg *t;
    assert_int_equal(seg_adopt(rb, s->id, fds[0], s->size, &t), 0);
    assert_int_equal(t->id, s->id);
    assert_ptr_equal(seg_find(rb, s->id), t);
    assert_memory_equal(t->base, s->base, s->size); /* the same bytes ... */
    t->base[12345] ^= 0xff;
    assert_int_equal(s->base[12345], t->base[12345]); /* ... and the same memory */
    assert_int_equal(seg_adopt(rb, s->id, fds[0], s->size, &t), KVMESH_EEXIST);
    /* an id created later never collides with the adopted one */
    struct seg *n;
    assert_int_equal(seg_create(rb, 4096, 0, &n), 0);
    assert_true(n->id != s->id);

    /* a frame with more fds than the receiver allows is refused and its fds closed */
    int two[2] = {s->fd, s->fd};
    assert_int_equal(kvm_handoff_send_msg(sp[0], KVM_HANDOFF_STATE, NULL, 0, two, 2, 5000), 0);
    assert_int_equal(kvm_handoff_recv_msg(sp[1], &type, &p, &len, fds, 1, &nf, 5000),
                     KVMESH_EPROTO);
    /* a peer that closes: ECLOSED */
    close(sp[0]);
    assert_int_equal(
        kvm_handoff_recv_msg(sp[1], &type, &p, &len, fds, KVM_HANDOFF_MAX_SEGS, &nf, 5000),
        KVMESH_ECLOSED);
    close(sp[1]);

    /* an fd that is not a sealed memfd is refused */
    int mfd = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(mfd >= 0);
    assert_int_equal(ftruncate(mfd, 1 << 20), 0);
    assert_int_equal(seg_adopt(rb, 0x77, mfd, 1 << 20, &t), KVMESH_EPROTO);
    close(mfd);
    seg_registry_free(ra);
    seg_registry_free(rb);
}

static void test_frame_header(void **state)
{
    (void)state;
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    uint8_t junk[KVM_HANDOFF_HDR_LEN] = "not a frame....";
    assert_int_equal(write(sp[0], junk, sizeof(junk)), (ssize_t)sizeof(junk));
    uint8_t type, *p;
    size_t len;
    int fds[1];
    uint32_t nf;
    assert_int_equal(kvm_handoff_recv_msg(sp[1], &type, &p, &len, fds, 1, &nf, 5000),
                     KVMESH_EPROTO);
    /* nothing arrives: the bound holds */
    assert_int_equal(kvm_handoff_recv_msg(sp[1], &type, &p, &len, fds, 1, &nf, 100),
                     KVMESH_ETIMEDOUT);
    close(sp[0]);
    close(sp[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip), cmocka_unit_test(test_codec_rejects),
        cmocka_unit_test(test_reserve_at),       cmocka_unit_test(test_segment_over_scm_rights),
        cmocka_unit_test(test_frame_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
