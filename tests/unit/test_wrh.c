/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wrh.c — weighted rendezvous hashing: pinned golden hashes/scores/ranks (a change of hash
 * or score function is caught), determinism across processes, first-rank shares within 2%
 * (relative) of weight shares over 1,000,000 keys and 10 weighted candidates, minimal
 * disruption when an 11th candidate joins (only keys that now rank it first move, ~1/11 of
 * them) and the same stability for top-k sets, removal, weight 0, and argument errors.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/ident.h"
#include "core/util.h"
#include "core/wrh.h"

static void make_cands(wrh_candidate_t *c, size_t n, const double *weights)
{
    for (size_t i = 0; i < n; i++) {
        kvm_id128_t id = kvm_id128_from_u64(0x6b766d, i + 1);
        c[i].id_hash = wrh_id_hash(&id);
        c[i].weight = weights ? weights[i] : 1.0;
    }
}

/* Key hash of test key i: the hash of a real identity. */
static uint64_t key_hash(uint64_t i)
{
    char k[32];
    int n = snprintf(k, sizeof(k), "blk-%llu", (unsigned long long)i);
    kvm_ident_t id;
    assert_int_equal(kvm_ident_init(&id, "t", NULL, k, (size_t)n), 0);
    uint64_t h = id.hash;
    kvm_ident_free(&id);
    return h;
}

/* Cheap distinct key hashes for the million-key loops (ident hashing is tested elsewhere). */
static uint64_t fast_key(uint64_t i)
{
    return wrh_key_hash_bytes(&i, sizeof(i));
}

static void test_golden(void **state)
{
    (void)state;
    kvm_id128_t id = kvm_id128_from_u64(0, 1);
    wrh_candidate_t c[10];
    const double w[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    make_cands(c, 10, w);
    uint64_t kh = key_hash(42);
    double s = wrh_score(c[0].id_hash, 1.0, kh);
    uint32_t top[3];
    size_t n;
    assert_int_equal(wrh_top_k(c, 10, kh, 3, top, &n), 0);
    if (getenv("KVMESH_PRINT_GOLDEN")) {
        printf("id_hash %016llx shard0 %016llx shard12345 %016llx bytes %016llx\n",
               (unsigned long long)wrh_id_hash(&id), (unsigned long long)wrh_shard_key(0),
               (unsigned long long)wrh_shard_key(12345),
               (unsigned long long)wrh_key_hash_bytes("abc", 3));
        printf("score %.17g top %u %u %u\n", s, top[0], top[1], top[2]);
        for (uint32_t sh = 0; sh < 4; sh++) {
            assert_int_equal(wrh_top_k(c, 10, wrh_shard_key(sh), 3, top, &n), 0);
            printf("shard %u top %u %u %u\n", sh, top[0], top[1], top[2]);
        }
    }
    assert_int_equal(wrh_id_hash(&id), UINT64_C(0x0d57ea62907fd3aa));
    assert_int_equal(wrh_shard_key(0), UINT64_C(0x961c2afc29bd2433));
    assert_int_equal(wrh_shard_key(12345), UINT64_C(0xaafae56d3eec0f27));
    assert_int_equal(wrh_key_hash_bytes("abc", 3), UINT64_C(0xedab3d6b1bd9cb7e));
    assert_true(fabs(s - 1.7910764733237259) <= 1e-12 * s);
    assert_int_equal(wrh_top_k(c, 10, kh, 3, top, &n), 0);
    assert_int_equal(n, 3);
    static const uint32_t want_key[3] = {8, 5, 9};
    assert_memory_equal(top, want_key, sizeof(want_key));
    static const uint32_t want_shard[4][3] = {{6, 9, 5}, {9, 6, 8}, {7, 9, 8}, {7, 9, 6}};
    for (uint32_t sh = 0; sh < 4; sh++) {
        assert_int_equal(wrh_top_k(c, 10, wrh_shard_key(sh), 3, top, &n), 0);
        assert_memory_equal(top, want_shard[sh], sizeof(top));
    }
}

static uint64_t rank_digest(void)
{
    wrh_candidate_t c[10];
    const double w[10] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
    make_cands(c, 10, w);
    uint64_t d = 0;
    for (uint64_t i = 0; i < 20000; i++) {
        uint32_t top[4];
        size_t n;
        assert_int_equal(wrh_top_k(c, 10, key_hash(i), 4, top, &n), 0);
        for (size_t j = 0; j < n; j++)
            d = d * 31 + top[j];
    }
    return d;
}

/* A fresh process (own ASLR layout, own libc state) computes the same ranks. */
static void test_cross_process(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        uint64_t d = rank_digest();
        ssize_t w = write(fds[1], &d, sizeof(d));
        _exit(w == sizeof(d) ? 0 : 1);
    }
    close(fds[1]);
    uint64_t child = 0;
    assert_int_equal(read(fds[0], &child, sizeof(child)), sizeof(child));
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(child, rank_digest());
}

static void test_weighted_shares(void **state)
{
    (void)state;
    enum { N = 10, KEYS = 1000000 };
    wrh_candidate_t c[N];
    const double w[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    make_cands(c, N, w);
    static uint32_t first[N];
    memset(first, 0, sizeof(first));
    for (uint64_t i = 0; i < KEYS; i++) {
        int64_t f = wrh_first(c, N, fast_key(i));
        assert_true(f >= 0 && f < N);
        first[f]++;
    }
    double wsum = 55;
    for (int i = 0; i < N; i++) {
        double share = (double)first[i] / KEYS, want = w[i] / wsum;
        print_message("candidate %d weight %.0f share %.5f want %.5f rel.err %+.4f\n", i, w[i],
                      share, want, share / want - 1);
        assert_true(fabs(share / want - 1) < 0.02);
    }
}

/* Adding an 11th candidate: a key moves only to the new candidate, about 1/11 of keys move;
 * top-k sets keep the order of old candidates (the new one may enter, the last old one drops). */
static void test_add_candidate(void **state)
{
    (void)state;
    enum { N = 10, K = 3, KEYS = 1000000 };
    wrh_candidate_t c[N + 1];
    make_cands(c, N + 1, NULL);
    uint64_t moved = 0, topk_changed = 0;
    for (uint64_t i = 0; i < KEYS; i++) {
        uint64_t kh = fast_key(i);
        int64_t a = wrh_first(c, N, kh), b = wrh_first(c, N + 1, kh);
        if (a != b) {
            assert_int_equal(b, N); /* never between two old candidates */
            moved++;
        }
        if (i % 8)
            continue; /* top-k on every 8th key keeps the runtime small */
        uint32_t ta[K], tb[K];
        size_t na, nb;
        assert_int_equal(wrh_top_k(c, N, kh, K, ta, &na), 0);
        assert_int_equal(wrh_top_k(c, N + 1, kh, K, tb, &nb), 0);
        assert_int_equal(na, K);
        assert_int_equal(nb, K);
        assert_int_equal(ta[0], (uint32_t)a);
        assert_int_equal(tb[0], (uint32_t)b);
        size_t j = 0;
        bool has_new = false;
        for (size_t x = 0; x < K; x++) {
            if (tb[x] == N) {
                has_new = true;
                continue;
            }
            assert_int_equal(tb[x], ta[j]); /* old candidates keep their relative order */
            j++;
        }
        assert_int_equal(j, has_new ? K - 1 : K);
        topk_changed += has_new;
    }
    double frac = (double)moved / KEYS;
    print_message("moved %.5f of keys (want %.5f); top-%d sets changed on %.5f\n", frac, 1.0 / 11,
                  K, (double)topk_changed / (KEYS / 8.0));
    assert_true(fabs(frac * 11 - 1) < 0.10);
    double tk = (double)topk_changed / (KEYS / 8.0);
    assert_true(fabs(tk / (3.0 / 11) - 1) < 0.10); /* P(new in top-3 of 11) = 3/11 */
}

/* Removing a candidate moves only the keys it ranked first. */
static void test_remove_candidate(void **state)
{
    (void)state;
    enum { N = 8 };
    wrh_candidate_t c[N];
    const double w[N] = {1, 3, 2, 5, 1, 1, 4, 2};
    make_cands(c, N, w);
    wrh_candidate_t d[N];
    memcpy(d, c, sizeof(c));
    d[3].weight = 0; /* weight 0 = removed */
    for (uint64_t i = 0; i < 100000; i++) {
        uint64_t kh = fast_key(i);
        int64_t a = wrh_first(c, N, kh), b = wrh_first(d, N, kh);
        assert_true(b != 3);
        if (a != 3)
            assert_int_equal(a, b);
    }
}

static int cmp_score_desc(const void *x, const void *y)
{
    const double *a = x, *b = y;
    return a[0] < b[0] ? 1 : a[0] > b[0] ? -1 : 0;
}

/* top-k agrees with scoring every candidate and sorting; weight-0 candidates never appear. */
static void test_topk_matches_sort(void **state)
{
    (void)state;
    enum { N = 40 };
    wrh_candidate_t c[N];
    double w[N];
    for (int i = 0; i < N; i++)
        w[i] = (i % 5 == 4) ? 0 : 0.5 + (i % 7);
    make_cands(c, N, w);
    for (uint64_t i = 0; i < 2000; i++) {
        uint64_t kh = key_hash(i);
        double sc[N][2];
        size_t live = 0;
        for (int j = 0; j < N; j++)
            if (w[j] > 0) {
                sc[live][0] = wrh_score(c[j].id_hash, w[j], kh);
                sc[live][1] = j;
                live++;
            }
        qsort(sc, live, sizeof(sc[0]), cmp_score_desc);
        uint32_t top[WRH_MAX_K];
        size_t n;
        assert_int_equal(wrh_top_k(c, N, kh, WRH_MAX_K, top, &n), 0);
        assert_int_equal(n, live < WRH_MAX_K ? live : WRH_MAX_K);
        for (size_t j = 0; j < n; j++)
            assert_int_equal(top[j], (uint32_t)sc[j][1]);
        assert_int_equal(wrh_first(c, N, kh), (int64_t)top[0]);
    }
}

static void test_errors_and_edges(void **state)
{
    (void)state;
    wrh_candidate_t c[3];
    make_cands(c, 3, NULL);
    uint32_t top[WRH_MAX_K];
    size_t n = 99;
    assert_int_equal(wrh_top_k(c, 3, 1, 0, top, &n), KVMESH_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(wrh_top_k(c, 3, 1, WRH_MAX_K + 1, top, &n), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "k = 33"));
    c[1].weight = -1;
    assert_int_equal(wrh_top_k(c, 3, 1, 2, top, &n), KVMESH_EINVAL);
    assert_non_null(strstr(kvmesh_last_error(), "candidate 1"));
    c[1].weight = NAN;
    assert_int_equal(wrh_top_k(c, 3, 1, 2, top, &n), KVMESH_EINVAL);
    c[1].weight = INFINITY;
    assert_int_equal(wrh_top_k(c, 3, 1, 2, top, &n), KVMESH_EINVAL);
    c[0].weight = c[1].weight = c[2].weight = 0;
    assert_int_equal(wrh_top_k(c, 3, 1, 2, top, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(wrh_first(c, 3, 1), -1);
    assert_int_equal(wrh_first(c, 0, 1), -1);
    c[2].weight = 1;
    assert_int_equal(wrh_top_k(c, 3, 1, 3, top, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(top[0], 2);
    /* scores are positive and finite at the extremes of the key hash */
    for (uint64_t kh = 0; kh < 1000; kh++) {
        double s = wrh_score(c[2].id_hash, 1e-300, kh);
        assert_true(s > 0 && isfinite(s));
        s = wrh_score(c[2].id_hash, 1e300, ~kh);
        assert_true(s > 0 && isfinite(s));
    }
    assert_true(wrh_score(c[2].id_hash, 0, 5) == 0);
    /* identical candidates (same id hash) tie-break by index, deterministically */
    wrh_candidate_t same[2] = {{7, 1.0}, {7, 1.0}};
    assert_int_equal(wrh_top_k(same, 2, 123, 2, top, &n), 0);
    assert_int_equal(top[0], 0);
    assert_int_equal(top[1], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),           cmocka_unit_test(test_cross_process),
        cmocka_unit_test(test_weighted_shares),  cmocka_unit_test(test_add_candidate),
        cmocka_unit_test(test_remove_candidate), cmocka_unit_test(test_topk_matches_sort),
        cmocka_unit_test(test_errors_and_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
