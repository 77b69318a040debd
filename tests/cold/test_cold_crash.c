// SPDX-License-Identifier: Apache-2.0
/*
 * test_cold_crash.c — kill -9 of a process writing to (and, for ExtentStore, cleaning) a cold
 * backend on real files, then recovery (ctest cold_crash). The test binary re-executes itself
 * as the child (tests/support/proc.h): the child opens the backend, says READY, and puts and
 * deletes payloads (in "clean" mode it first makes segments mostly dead, then runs maintain()
 * between puts), printing "PUT n" before and "ACK n" after each put returns 0, "DELING n" and
 * "DEL n" around each delete, with unbuffered writes. The parent kills it with SIGKILL after a
 * random delay (bounded; the seed is printed), drains its lines, reopens the backend and checks:
 *   - every acknowledged, not deleted payload is found by find() and get() returns its bytes;
 *   - every acknowledged delete is gone;
 *   - whatever find() answers for the uncertain ops (put or delete in flight) get() serves
 *     with the right bytes: no torn record is ever served;
 *   - stat(): used_bytes and objects equal what find() reports, file_bytes equals the sizes of
 *     the files on disk.
 * Then the next round starts a child on the same directory (recovery of recovered state).
 * Bounded: ROUNDS rounds per case, MAX_OPS ops per child, every wait has a timeout.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cold_testutil.h"
#include "core/hash.h"
#include "proc.h"

enum { ROUNDS = 6, MAX_OPS = 1500, OPS_BASE = 10000 };
enum { ST_NONE = 0, ST_PUTTING, ST_ACKED, ST_DELING, ST_DELETED };

#define SEG_BYTES   (256u << 10)
#define CLEAN_AFTER 40    /* clean mode: ops that make segments mostly dead before cleaning */
#define WORK_CAP_MS 45000 /* bound on one child's run */

static uint64_t len_of(uint64_t opn)
{
    uint64_t x = opn * 0x9E3779B97F4A7C15ull;
    return (x >> 33) % 60000 + 1;
}

/* ---- child --------------------------------------------------------------------------------- */

static void say(const char *fmt, uint64_t n)
{
    char b[64];
    int k = snprintf(b, sizeof(b), fmt, (unsigned long long)n);
    if (write(1, b, (size_t)k) != k)
        _exit(3);
}

static int child_main(int vi, const char *root, int round, const char *mode)
{
    const cold_variant_t *v = &COLD_VARIANTS[vi];
    cold_backend_t b;
    cold_backend_err_t err;
    if (ct_open(v, root, 1ull << 34, SEG_BYTES, &b, &err) != 0) {
        fprintf(stderr, "child: open: %s\n", err.msg);
        return 2;
    }
    bool clean = strcmp(mode, "clean") == 0;
    say("READY %llu\n", (uint64_t)round);
    uint8_t *p = malloc(60001);
    cold_locator_t *locs = calloc(MAX_OPS, sizeof(*locs));
    uint64_t base = (uint64_t)round * OPS_BASE;
    for (int i = 0; i < MAX_OPS; i++) {
        uint64_t n = base + (uint64_t)i;
        uint64_t len = len_of(n);
        ct_fill(p, len, n);
        say("PUT %llu\n", n);
        if (ct_put(&b, n, p, len, &locs[i], &err) != 0) {
            fprintf(stderr, "child: put: %s\n", err.msg);
            return 2;
        }
        say("ACK %llu\n", n);
        bool del = clean ? (i < CLEAN_AFTER ? i % 3 != 0 : i % 4 == 1) : i % 4 == 1;
        if (del) {
            say("DELING %llu\n", n);
            if (b.ops->del(b.be, &locs[i], &err) != 0) {
                fprintf(stderr, "child: del: %s\n", err.msg);
                return 2;
            }
            say("DEL %llu\n", n);
        }
        if (clean && i >= CLEAN_AFTER && b.ops->maintain) {
            for (int k = 0; k < 4; k++) {
                int64_t w = b.ops->maintain(b.be, 64 << 10, &err);
                if (w < 0) {
                    fprintf(stderr, "child: maintain: %s\n", err.msg);
                    return 2;
                }
                if (w > 0)
                    say("CLEANED %llu\n", (uint64_t)w);
            }
        }
    }
    /* budget spent: wait for the parent (EOF on stdin or the kill) */
    char c;
    while (read(0, &c, 1) > 0)
        ;
    cold_backend_close(&b);
    return 0;
}

/* ---- parent -------------------------------------------------------------------------------- */

static uint8_t states[ROUNDS * 2][MAX_OPS];
static tproc_t child;

static void cleanup(void)
{
    if (child.pid > 0)
        tproc_kill(&child, SIGKILL);
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int cleaned_seen; /* CLEANED lines (maintain() did work) in this round */

static void apply_line(const char *line)
{
    char w[16];
    unsigned long long n;
    if (sscanf(line, "%15s %llu", w, &n) != 2)
        return;
    if (strcmp(w, "CLEANED") == 0)
        cleaned_seen++;
    if (n < OPS_BASE)
        return;
    uint64_t r = n / OPS_BASE - 1, i = n % OPS_BASE;
    if (r >= ROUNDS * 2 || i >= MAX_OPS)
        return;
    if (strcmp(w, "PUT") == 0)
        states[r][i] = ST_PUTTING;
    else if (strcmp(w, "ACK") == 0)
        states[r][i] = ST_ACKED;
    else if (strcmp(w, "DELING") == 0)
        states[r][i] = ST_DELING;
    else if (strcmp(w, "DEL") == 0)
        states[r][i] = ST_DELETED;
}

/* Reopens the directory and checks the invariants; resolves uncertain states to the truth. */
static void verify(const cold_variant_t *v, const char *root, int rounds_done, int *acked_total)
{
    cold_backend_t b;
    cold_backend_err_t err;
    int rc = ct_open(v, root, 1ull << 34, SEG_BYTES, &b, &err);
    if (rc != 0)
        fprintf(stderr, "reopen after kill: %s\n", err.msg);
    assert_int_equal(rc, 0);
    uint8_t *want = malloc(60001), *got = malloc(60001);
    uint64_t used = 0, objects = 0;
    for (int r = 0; r < rounds_done; r++) {
        for (int i = 0; i < MAX_OPS; i++) {
            uint8_t s = states[r][i];
            if (s == ST_NONE)
                continue;
            uint64_t n = (uint64_t)(r + 1) * OPS_BASE + (uint64_t)i;
            cold_opid_t op = ct_op(n);
            cold_locator_t loc;
            int f = b.ops->find(b.be, &op, &loc, NULL);
            if (s == ST_ACKED && f != 0)
                fail_msg("op %llu was acknowledged but find() says %d after the kill",
                         (unsigned long long)n, f);
            if (s == ST_DELETED && f != KVMESH_ENOENT)
                fail_msg("op %llu was deleted but find() says %d", (unsigned long long)n, f);
            if (f == 0) {
                uint64_t len = len_of(n);
                ct_fill(want, len, n);
                memset(got, 0, len);
                int g = b.ops->get(b.be, &loc, len, kvm_checksum(want, len), got, &err);
                if (g != 0)
                    fail_msg("op %llu (state %d): get after recovery: %d %s", (unsigned long long)n,
                             s, g, err.msg);
                assert_memory_equal(got, want, len);
                used += len;
                objects++;
                states[r][i] = ST_ACKED;
            } else {
                assert_int_equal(f, KVMESH_ENOENT);
                states[r][i] = ST_DELETED;
            }
            if (s == ST_ACKED)
                (*acked_total)++;
        }
    }
    cold_backend_stat_t st;
    b.ops->stat(b.be, &st);
    assert_int_equal(st.used_bytes, used);
    assert_int_equal(st.objects, objects);
    assert_int_equal(st.file_bytes, ct_file_bytes(root));
    cold_backend_close(&b);
    free(want);
    free(got);
}

static void run_case(int vi, const char *mode)
{
    const cold_variant_t *v = &COLD_VARIANTS[vi];
    char root[PATH_MAX];
    ct_mkroot(root, sizeof(root), "crash");
    memset(states, 0, sizeof(states));
    char exe[PATH_MAX];
    assert_int_equal(tproc_self_exe(exe, sizeof(exe)), 0);
    int acked = 0, kills_mid_clean = 0;
    for (int round = 0; round < ROUNDS; round++) {
        char vs[8], rs[16];
        snprintf(vs, sizeof(vs), "%d", vi);
        snprintf(rs, sizeof(rs), "%d", round + 1);
        const char *argv[] = {exe, "child", vs, root, rs, mode};
        char line[256];
        int rc = tproc_start(&child, 6, argv, "READY", line, sizeof(line), 20000);
        TPROC_CHECK(rc == 0, cleanup);
        /* let it work for 30..400 ms (clean mode: until cleaning moved data), reading its lines;
         * at most WORK_CAP_MS on a very slow machine */
        uint64_t delay_ms = 30 + rnd() % 370;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int seen = 0;
        cleaned_seen = 0;
        for (;;) {
            struct timespec t1;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            uint64_t el = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000 +
                          (uint64_t)(t1.tv_nsec - t0.tv_nsec) / 1000000;
            bool cleaning_phase = strcmp(mode, "clean") != 0 || cleaned_seen > 0;
            if ((el >= delay_ms && cleaning_phase) || el > WORK_CAP_MS)
                break;
            if (tproc_read_line(&child, line, sizeof(line), 50) == 0) {
                apply_line(line);
                seen++;
            }
        }
        kill(child.pid, SIGKILL);
        while (tproc_read_line(&child, line, sizeof(line), 2000) == 0)
            apply_line(line);        /* what it wrote before it died */
        tproc_kill(&child, SIGKILL); /* reap */
        if (strcmp(mode, "clean") == 0 && cleaned_seen > 0)
            kills_mid_clean++;
        verify(v, root, round + 1, &acked);
    }
    fprintf(stderr,
            "crash %s/%s: %d rounds, %d checks of acknowledged payloads, %d kills after "
            "cleaning had moved data\n",
            v->name, mode, ROUNDS, acked, kills_mid_clean);
    assert_true(acked > 0);
    if (strcmp(mode, "clean") == 0)
        assert_true(kills_mid_clean > 0);
    ct_rmroot(root);
}

static void test_crash_localdir_write(void **state)
{
    (void)state;
    run_case(0, "write");
}

static void test_crash_extent_uring_write(void **state)
{
    (void)state;
    run_case(1, "write");
}

static void test_crash_extent_uring_clean(void **state)
{
    (void)state;
    run_case(1, "clean");
}

static void test_crash_extent_buffered_write(void **state)
{
    (void)state;
    run_case(2, "write");
}

static void test_crash_extent_buffered_clean(void **state)
{
    (void)state;
    run_case(2, "clean");
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "child") == 0)
        return child_main(atoi(argv[2]), argv[3], atoi(argv[4]), argv[5]);
    const char *s = getenv("KVMESH_TEST_SEED");
    rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
    if (rng_state == 0)
        rng_state = 1;
    fprintf(stderr, "cold_crash: seed %llu (KVMESH_TEST_SEED to repeat)\n",
            (unsigned long long)rng_state);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_localdir_write),
        cmocka_unit_test(test_crash_extent_uring_write),
        cmocka_unit_test(test_crash_extent_uring_clean),
        cmocka_unit_test(test_crash_extent_buffered_write),
        cmocka_unit_test(test_crash_extent_buffered_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
