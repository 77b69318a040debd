/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_seg.c — unit tests of src/net/seg: memfd segments (normal and huge-page request with
 * fallback), ids, grants (rights, range, expiry with an injected clock, revoke, bounded table),
 * seg_check pins surviving seg_destroy, the pure client-side check, remote mappings made once,
 * prefaulted segments and mappings (no page fault on first touch), and the wire codecs' round
 * trips and rejections.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/util.h"
#include "net/seg.h"
#include "net/transport_wire.h"

static uint64_t fake_now;
static uint64_t fake_clock(void *arg)
{
    (void)arg;
    return fake_now;
}

static void test_create_destroy(void **state)
{
    (void)state;
    struct seg_registry *reg;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct seg *a, *b, *h;
    assert_int_equal(seg_create(reg, 1, 0, &a), 0);
    assert_true(a->size >= 1 && a->size % (uint64_t)sysconf(_SC_PAGESIZE) == 0);
    assert_int_equal(seg_create(reg, 3u << 20, 0, &b), 0);
    assert_true(a->id != b->id && a->id >> 32 == b->id >> 32);
    /* huge pages requested: either obtained (2 MiB multiple) or a clean fallback */
    assert_int_equal(seg_create(reg, 1u << 20, SEG_F_HUGE, &h), 0);
    assert_true(h->huge ? h->size % SEG_HUGE_2M == 0 : h->size == 1u << 20);
    memset(h->base, 7, h->size);
    b->base[b->size - 1] = 9;
    assert_ptr_equal(seg_find(reg, b->id), b);
    assert_true(seg_local_contains(reg, b->base + 10, b->size - 10));
    assert_false(seg_local_contains(reg, b->base + 10, b->size - 9));
    assert_int_equal(seg_create(reg, 0, 0, &a), KVMESH_EINVAL);
    assert_int_equal(seg_create(reg, SEG_MAX_SIZE + 1, 0, &a), KVMESH_EINVAL);
    uint64_t bid = b->id;
    assert_int_equal(seg_destroy(reg, bid), 0);
    assert_null(seg_find(reg, bid));
    assert_int_equal(seg_destroy(reg, bid), KVMESH_ENOENT);
    /* an id of another registry (another incarnation) names nothing here */
    struct seg_registry *reg2;
    assert_int_equal(seg_registry_new(&reg2), 0);
    struct seg *c;
    assert_int_equal(seg_create(reg2, 4096, 0, &c), 0);
    assert_null(seg_find(reg, c->id));
    seg_registry_free(reg2);
    seg_registry_free(reg);
}

static void test_grants(void **state)
{
    (void)state;
    struct seg_registry *reg;
    assert_int_equal(seg_registry_new(&reg), 0);
    seg_registry_set_clock(reg, fake_clock, NULL);
    fake_now = 1000;
    struct seg *s;
    assert_int_equal(seg_create(reg, 1u << 20, 0, &s), 0);
    struct seg_grant g, ro;
    assert_int_equal(seg_grant(reg, s->id, 4096, 8192, SEG_READ | SEG_WRITE, 500, &g), 0);
    assert_true(g.token != 0);
    assert_int_equal(g.expiry_ns, 1500);
    assert_int_equal(seg_grant(reg, s->id, 0, 100, SEG_READ, 0, &ro), 0);
    assert_int_equal(seg_grant(reg, s->id, 0, 0, SEG_READ, 0, &g), KVMESH_ERANGE);
    struct seg_grant g2;
    assert_int_equal(seg_grant(reg, s->id, s->size - 1, 2, SEG_READ, 0, &g2), KVMESH_ERANGE);
    assert_int_equal(seg_grant(reg, s->id, 0, 1, 0, 0, &g2), KVMESH_EINVAL);
    assert_int_equal(seg_grant(reg, s->id, 0, 1, 8, 0, &g2), KVMESH_EINVAL);
    assert_int_equal(seg_grant(reg, s->id + 1, 0, 1, SEG_READ, 0, &g2), KVMESH_ENOENT);
    assert_int_equal(seg_grant_count(reg), 2);

    uint8_t *p;
    struct seg *pin;
    enum seg_reason why;
    assert_int_equal(seg_check(reg, s->id, 4096, 8192, SEG_WRITE, g.token, &p, &pin, &why), 0);
    assert_ptr_equal(p, s->base + 4096);
    seg_unpin(reg, pin);
    assert_int_equal(seg_check(reg, s->id, 4095, 10, SEG_READ, g.token, &p, &pin, &why),
                     KVMESH_ERANGE);
    assert_int_equal(why, SEG_R_RANGE);
    assert_int_equal(seg_check(reg, s->id, 4096 + 8000, 193, SEG_READ, g.token, &p, &pin, &why),
                     KVMESH_ERANGE);
    assert_int_equal(seg_check(reg, s->id, UINT64_MAX, 2, SEG_READ, g.token, &p, &pin, &why),
                     KVMESH_ERANGE);
    assert_int_equal(seg_check(reg, s->id, 0, 10, SEG_WRITE, ro.token, &p, &pin, &why),
                     KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_RIGHTS);
    assert_int_equal(seg_check(reg, s->id, 0, 10, SEG_READ, 12345, &p, &pin, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_NOGRANT);
    assert_int_equal(seg_check(reg, s->id + 7, 0, 10, SEG_READ, ro.token, &p, &pin, &why),
                     KVMESH_ENOENT);
    assert_int_equal(why, SEG_R_NOSEG);
    /* expiry */
    fake_now = 1499;
    assert_int_equal(seg_check(reg, s->id, 4096, 1, SEG_READ, g.token, &p, &pin, &why), 0);
    seg_unpin(reg, pin);
    fake_now = 1500;
    assert_int_equal(seg_check(reg, s->id, 4096, 1, SEG_READ, g.token, &p, &pin, &why),
                     KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_EXPIRED);
    struct seg_grant look;
    assert_int_equal(seg_grant_lookup(reg, s->id, g.token, &look, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_EXPIRED);
    assert_int_equal(seg_grant_lookup(reg, s->id, ro.token, &look, &why), 0);
    assert_memory_equal(&look, &ro, sizeof(ro));
    /* revoke */
    assert_int_equal(seg_revoke(reg, ro.token), 0);
    assert_int_equal(seg_revoke(reg, ro.token), KVMESH_ENOENT);
    assert_int_equal(seg_check(reg, s->id, 0, 10, SEG_READ, ro.token, &p, &pin, &why),
                     KVMESH_EAUTH);
    seg_registry_free(reg);
}

static void test_pin_survives_destroy(void **state)
{
    (void)state;
    struct seg_registry *reg;
    assert_int_equal(seg_registry_new(&reg), 0);
    struct seg *s;
    assert_int_equal(seg_create(reg, 8192, 0, &s), 0);
    struct seg_grant g;
    assert_int_equal(seg_grant(reg, s->id, 0, 8192, SEG_WRITE, 0, &g), 0);
    uint8_t *p;
    struct seg *pin;
    uint64_t id = s->id;
    assert_int_equal(seg_check(reg, id, 0, 8192, SEG_WRITE, g.token, &p, &pin, NULL), 0);
    assert_int_equal(seg_destroy(reg, id), 0);
    memset(p, 1, 8192); /* still mapped while pinned (ASan would flag a use after unmap) */
    assert_int_equal(seg_grant_count(reg), 0); /* destroy revoked its grants */
    assert_int_equal(seg_check(reg, id, 0, 1, SEG_WRITE, g.token, &p, &pin, NULL) == 0, 0);
    seg_unpin(reg, pin);
    seg_registry_free(reg);
}

static void test_grant_allows(void **state)
{
    (void)state;
    struct seg_grant g = {.seg_id = 5,
                          .offset = 100,
                          .length = 50,
                          .rights = SEG_READ,
                          .expiry_ns = 1000,
                          .token = 9};
    enum seg_reason why;
    assert_int_equal(seg_grant_allows(&g, 5, 4096, 100, 50, SEG_READ, 999, &why), 0);
    assert_int_equal(seg_grant_allows(&g, 6, 4096, 100, 50, SEG_READ, 999, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_WRONGSEG);
    assert_int_equal(seg_grant_allows(&g, 5, 4096, 100, 50, SEG_READ, 1000, &why), KVMESH_EAUTH);
    assert_int_equal(why, SEG_R_EXPIRED);
    assert_int_equal(seg_grant_allows(&g, 5, 4096, 100, 50, SEG_WRITE, 1, &why), KVMESH_EAUTH);
    assert_int_equal(seg_grant_allows(&g, 5, 4096, 101, 50, SEG_READ, 1, &why), KVMESH_ERANGE);
    assert_int_equal(why, SEG_R_RANGE);
    assert_int_equal(seg_grant_allows(&g, 5, 120, 100, 50, SEG_READ, 1, &why), KVMESH_ERANGE);
    assert_int_equal(why, SEG_R_BOUNDS);
}

static void test_remote_map_once(void **state)
{
    (void)state;
    struct seg_registry *own, *cli;
    assert_int_equal(seg_registry_new(&own), 0);
    assert_int_equal(seg_registry_new(&cli), 0);
    struct seg *s;
    assert_int_equal(seg_create(own, 1u << 20, 0, &s), 0);
    s->base[777] = 42;
    struct seg_remote *r1, *r2;
    assert_int_equal(seg_remote_map(cli, "peer", s->id, dup(s->fd), s->size, &r1), 0);
    assert_int_equal(r1->base[777], 42);
    r1->base[778] = 43;
    assert_int_equal(s->base[778], 43);
    assert_int_equal(seg_remote_map(cli, "peer", s->id, dup(s->fd), s->size, &r2), 0);
    assert_ptr_equal(r1, r2);
    assert_int_equal(seg_remote_count(cli), 1);
    /* an announced size larger than the fd is refused (a copy would fault) */
    assert_int_equal(seg_remote_map(cli, "peer2", s->id, dup(s->fd), s->size * 2, &r2),
                     KVMESH_EPROTO);
    assert_ptr_equal(seg_remote_find(cli, "peer", s->id), r1);
    assert_null(seg_remote_find(cli, "peer", s->id + 1));
    seg_registry_free(cli);
    seg_registry_free(own);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* KiB of the mapping that contains p that are mapped into this process's page tables
 * (/proc/self/smaps "Rss" of its VMA): what a prefault populates. Page-fault counts would also
 * see a sanitizer's shadow memory; this does not. */
static long mapped_kib(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    bool in = false;
    long kib = -1;
    while (kib < 0 && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && strncmp(line, "Rss:", 4) == 0)
            kib = strtol(line + 4, NULL, 10);
    }
    fclose(f);
    assert_true(kib >= 0);
    return kib;
}

/* With prefault on, a new segment and a remote mapping are populated when mapped: every page is
 * mapped before anything touches it; with it off, none is (the check can tell them apart). */
static void test_prefault(void **state)
{
    (void)state;
    void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(probe != MAP_FAILED);
    int probed = madvise(probe, 4096, MADV_POPULATE_WRITE);
    munmap(probe, 4096);
    if (probed != 0)
        skip(); /* kernel before 5.14: the prefault is a no-op there */
    const uint64_t size = 8u << 20;
    const long kib = (long)(size >> 10);
    for (int on = 0; on <= 1; on++) {
        struct seg_registry *own, *cli;
        assert_int_equal(seg_registry_new(&own), 0);
        assert_int_equal(seg_registry_new(&cli), 0);
        seg_registry_set_prefault(own, on);
        seg_registry_set_prefault(cli, on);
        struct seg *s;
        assert_int_equal(seg_create(own, size, 0, &s), 0);
        long m = mapped_kib(s->base);
        assert_true(on ? m >= kib * 7 / 8 : m < kib / 8);
        struct seg_remote *r;
        assert_int_equal(seg_remote_map(cli, "peer", s->id, dup(s->fd), s->size, &r), 0);
        m = mapped_kib(r->base);
        assert_true(on ? m >= kib * 7 / 8 : m < kib / 8);
        s->base[4096] = 1;
        assert_int_equal(r->base[4096], 1); /* one memory: populating kept the owner's bytes */
        seg_registry_free(cli);
        seg_registry_free(own);
    }
}

/*
 * A same-host owner passes its segment fd; if the owner (bug or malice) could shrink the file
 * afterwards, every copy into the mapping would crash this process with SIGBUS. Segments are
 * sealed against resizing and mappers refuse fds without the shrink seal.
 */
static void test_remote_map_requires_size_seals(void **state)
{
    (void)state;
    struct seg_registry *own, *cli;
    assert_int_equal(seg_registry_new(&own), 0);
    assert_int_equal(seg_registry_new(&cli), 0);
    /* an unsealed memfd: mapping it would leave this process at the owner's mercy */
    int fd = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 1 << 20), 0);
    struct seg_remote *r;
    assert_int_equal(seg_remote_map(cli, "evil", 1, fd, 1 << 20, &r), KVMESH_EPROTO);
    assert_int_equal(seg_remote_count(cli), 0);
    /* our own segments cannot be shrunk or grown, and they map */
    struct seg *s;
    assert_int_equal(seg_create(own, 1u << 20, 0, &s), 0);
    assert_true(ftruncate(s->fd, 0) != 0);
    assert_true(ftruncate(s->fd, (off_t)s->size * 2) != 0);
    assert_int_equal(seg_remote_map(cli, "peer", s->id, dup(s->fd), s->size, &r), 0);
    struct seg *h;
    assert_int_equal(seg_create(own, 1u << 20, SEG_F_HUGE, &h), 0);
    assert_true(ftruncate(h->fd, 0) != 0);
    assert_int_equal(seg_remote_map(cli, "peer", h->id, dup(h->fd), h->size, &r), 0);
    seg_registry_free(cli);
    seg_registry_free(own);
}

static void test_grant_table_bounded(void **state)
{
    (void)state;
    struct seg_registry *reg;
    assert_int_equal(seg_registry_new(&reg), 0);
    seg_registry_set_clock(reg, fake_clock, NULL);
    fake_now = 10;
    struct seg *s;
    assert_int_equal(seg_create(reg, 4096, 0, &s), 0);
    struct seg_grant g;
    for (int i = 0; i < SEG_MAX_GRANTS; i++)
        assert_int_equal(seg_grant(reg, s->id, 0, 1, SEG_READ, 5, &g), 0);
    assert_int_equal(seg_grant(reg, s->id, 0, 1, SEG_READ, 5, &g), KVMESH_ENOSPC);
    fake_now = 100; /* all expired: the next grant sweeps them */
    assert_int_equal(seg_grant(reg, s->id, 0, 1, SEG_READ, 5, &g), 0);
    assert_int_equal(seg_grant_count(reg), 1);
    seg_registry_free(reg);
}

/* Grant tokens are drawn from a block of random bytes: all distinct, and a forked child does not
 * draw its parent's next tokens (the block's page is wiped on fork). */
static void test_tokens_distinct_across_fork(void **state)
{
    (void)state;
    struct seg_registry *reg;
    struct seg *s;
    assert_int_equal(seg_registry_new(&reg), 0);
    assert_int_equal(seg_create(reg, 1u << 20, 0, &s), 0);
    enum { N = 100 };
    uint64_t tok[N];
    for (unsigned i = 0; i < N; i++) {
        struct seg_grant g;
        assert_int_equal(seg_grant(reg, s->id, 0, 4096, SEG_READ, 0, &g), 0);
        tok[i] = g.token;
        for (unsigned j = 0; j < i; j++)
            assert_true(tok[j] != tok[i]);
    }
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct seg_grant g;
        int ok = seg_grant(reg, s->id, 0, 4096, SEG_READ, 0, &g) == 0 &&
                 write(fds[1], &g.token, sizeof(g.token)) == (ssize_t)sizeof(g.token);
        _exit(ok ? 0 : 1);
    }
    uint64_t child = 0;
    assert_int_equal(read(fds[0], &child, sizeof(child)), (ssize_t)sizeof(child));
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct seg_grant g;
    assert_int_equal(seg_grant(reg, s->id, 0, 4096, SEG_READ, 0, &g), 0);
    assert_true(g.token != child);
    close(fds[0]);
    close(fds[1]);
    assert_int_equal(seg_destroy(reg, s->id), 0);
    seg_registry_free(reg);
}

static void test_wire_codecs(void **state)
{
    (void)state;
    struct tpw_req q, q2;
    memset(&q, 0, sizeof(q));
    q.op = 2;
    q.req_id = 7;
    q.seg_id = 8;
    q.offset = 9;
    q.length = 10;
    q.token = 11;
    memset(&q2, 0, sizeof(q2));
    uint8_t b[TPW_SHMR_SIZE];
    tpw_req_encode(&q, b);
    assert_int_equal(tpw_req_decode(b, TPW_REQ_SIZE, &q2), 0);
    assert_memory_equal(&q, &q2, sizeof(q));
    assert_int_equal(tpw_req_decode(b, TPW_REQ_SIZE - 1, &q2), KVMESH_EPROTO);
    b[5] = 3;
    assert_int_equal(tpw_req_decode(b, TPW_REQ_SIZE, &q2), KVMESH_EPROTO);
    q.length = 0;
    tpw_req_encode(&q, b);
    assert_int_equal(tpw_req_decode(b, TPW_REQ_SIZE, &q2), KVMESH_EPROTO);

    struct tpw_resp r = {.status = KVMESH_ERANGE, .reason = SEG_R_RANGE, .req_id = 3}, r2;
    tpw_resp_encode(&r, b);
    assert_int_equal(tpw_resp_decode(b, TPW_RESP_SIZE, &r2), 0);
    assert_int_equal(r2.status, KVMESH_ERANGE);
    r.length = 5; /* an error with payload is malformed */
    tpw_resp_encode(&r, b);
    assert_int_equal(tpw_resp_decode(b, TPW_RESP_SIZE, &r2), KVMESH_EPROTO);
    r.status = 17; /* not an error code */
    r.length = 0;
    tpw_resp_encode(&r, b);
    assert_int_equal(tpw_resp_decode(b, TPW_RESP_SIZE, &r2), KVMESH_EPROTO);

    struct tpw_shmq sq = {.flags = TPW_SHMQ_WANT_FD, .seg_id = 1, .token = 2}, sq2;
    tpw_shmq_encode(&sq, b);
    assert_int_equal(tpw_shmq_decode(b, TPW_SHMQ_SIZE, &sq2), 0);
    assert_int_equal(sq2.token, 2);
    b[6] = 0xff;
    assert_int_equal(tpw_shmq_decode(b, TPW_SHMQ_SIZE, &sq2), KVMESH_EPROTO);

    struct tpw_shmr sr = {.seg_size = 4096,
                          .grant = {.seg_id = 1,
                                    .offset = 0,
                                    .length = 4096,
                                    .rights = 3,
                                    .expiry_ns = 5,
                                    .token = 6}},
                    sr2;
    tpw_shmr_encode(&sr, b);
    assert_int_equal(tpw_shmr_decode(b, TPW_SHMR_SIZE, &sr2), 0);
    assert_int_equal(sr2.grant.seg_id, 1);
    assert_int_equal(sr2.grant.length, 4096);
    assert_int_equal(sr2.grant.rights, 3);
    assert_int_equal(sr2.grant.expiry_ns, 5);
    assert_int_equal(sr2.grant.token, 6);
    assert_int_equal(sr2.seg_size, 4096);
    sr.grant.length = 4097; /* a grant beyond the announced segment */
    tpw_shmr_encode(&sr, b);
    assert_int_equal(tpw_shmr_decode(b, TPW_SHMR_SIZE, &sr2), KVMESH_EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_destroy),
        cmocka_unit_test(test_grants),
        cmocka_unit_test(test_pin_survives_destroy),
        cmocka_unit_test(test_grant_allows),
        cmocka_unit_test(test_remote_map_once),
        cmocka_unit_test(test_prefault),
        cmocka_unit_test(test_remote_map_requires_size_seals),
        cmocka_unit_test(test_grant_table_bounded),
        cmocka_unit_test(test_tokens_distinct_across_fork),
        cmocka_unit_test(test_wire_codecs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
