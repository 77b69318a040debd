/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_shm.c — integration tests of the shm data-plane transport (see transport_common.h
 * for what they show), and the shm-only ones below.
 */
#include <pthread.h>

#define TPT_KIND TP_SHM
#define TPT_EXTRA_TESTS                                                                            \
    cmocka_unit_test_setup_teardown(test_alive_polls_per_batch, setup, teardown),
static void test_alive_polls_per_batch(void **state);
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
