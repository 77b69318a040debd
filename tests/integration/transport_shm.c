/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_shm.c — integration tests of the shm data-plane transport (see transport_common.h
 * for what they show), and the shm-only ones below.
 */
#include <pthread.h>

#define TPT_KIND TP_SHM
#define TPT_EXTRA_TESTS                                                                            \
    cmocka_unit_test_setup_teardown(test_alive_polls_per_batch, setup, teardown),                  \
        cmocka_unit_test_setup_teardown(test_alive_polls_single, setup, teardown),
static void test_alive_polls_per_batch(void **state);
static void test_alive_polls_single(void **state);
#include "transport_common.h"

/* The owner's liveness is polled at most once per recheck window before a request's first step
 * (a poll(2) per 4 KiB item cost more than its copy): a batch of 128 small READs inside one
 * (widened) window makes at most one poll, and with a window of 1 ns one poll per request. */
static unsigned reads_polls(struct fixture *f, uint64_t window_ns)
{
    enum { N = 128, LEN = 4096 };
    struct tp_request r[N];
    for (unsigned i = 0; i < N; i++)
        r[i] = (struct tp_request){.op = TP_READ,
                                   .local = f->buf + (uint64_t)i * LEN,
                                   .length = LEN,
                                   .segment = f->rs,
                                   .remote_offset = (uint64_t)i * LEN,
                                   .token = f->g.token};
    uint64_t before = tp_shm_test_alive_recheck(window_ns);
    struct tp_batch *b;
    assert_int_equal(tp_batch_new(f->client, N, &b), 0);
    assert_int_equal(tp_submit(b, r, N), 0);
    assert_int_equal(tp_batch_wait(b, 30000), 0);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(tp_status(b, i, NULL), 0);
    tp_batch_free(b);
    uint64_t polls = tp_shm_test_alive_recheck(0) - before;
    assert_memory_equal(f->buf, f->seg->base, (size_t)N * LEN);
    return (unsigned)polls;
}

static void test_alive_polls_per_batch(void **state)
{
    struct fixture *f = *state;
    fill(f->seg->base, 128u * 4096, 77);
    assert_true(reads_polls(f, 10ull * 1000 * 1000 * 1000) <= 1);
    assert_true(reads_polls(f, 1) >= 64); /* (two requests may read one clock value) */
}

/* Single requests in a row (a single get or put each: one lone READ a batch) poll the owner at
 * most once per TP_SHM_ALIVE_RECHECK_NS (1 ms) of the time they took, however many there are:
 * each poll is at least a window after the one before. With the earlier 100 us window, 400 lone
 * 4 KiB READs that take a few ms polled about ten times per ms. */
static void test_alive_polls_single(void **state)
{
    struct fixture *f = *state;
    enum { N = 400, LEN = 4096 };
    fill(f->seg->base, (size_t)LEN * 8, 78);
    uint64_t before = tp_shm_test_alive_recheck(0); /* (the default window) */
    uint64_t t0 = env_clock_mono_ns();
    for (unsigned i = 0; i < N; i++) {
        struct tp_request r = {.op = TP_READ,
                               .local = f->buf + (uint64_t)(i % 8) * LEN,
                               .length = LEN,
                               .segment = f->rs,
                               .remote_offset = (uint64_t)(i % 8) * LEN,
                               .token = f->g.token};
        struct tp_batch *b;
        assert_int_equal(tp_batch_new(f->client, 1, &b), 0);
        assert_int_equal(tp_submit(b, &r, 1), 0);
        assert_int_equal(tp_batch_wait(b, 30000), 0);
        assert_int_equal(tp_status(b, 0, NULL), 0);
        tp_batch_free(b);
    }
    uint64_t took = env_clock_mono_ns() - t0;
    uint64_t polls = tp_shm_test_alive_recheck(0) - before;
    assert_memory_equal(f->buf, f->seg->base, (size_t)LEN * 8);
    print_message("%u lone 4 KiB READs in %.3f ms: %llu liveness polls\n", (unsigned)N, took / 1e6,
                  (unsigned long long)polls);
    assert_true(polls <= 1 + took / TP_SHM_ALIVE_RECHECK_NS);
}
