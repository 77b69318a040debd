/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Waiting for a transport registration slot (src/store/data.c, reg_when_free): a client runtime
 * (no memory) and a storage runtime on one memory:// metadata store, real transports. The
 * client's registration slots (TP_MAX_REGIONS) are filled with registered buffers
 * (kvmesh_register_buffer) but T_FREE; T_THREADS application threads then put from
 * unregistered buffers one object at a time (one temporary registration each, so no thread
 * holds a slot while it waits for another). Most of them find every slot taken and wait on
 * rt->wq until a release wakes them. Every put must succeed and read back, within T_JOIN_MS.
 * Without the wake-up a waiting thread would sleep until its registration deadline
 * (request_timeout_ms, T_TIMEOUT) and fail with KVMESH_ENOSPC.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "net/transport.h"

#define T_THREADS 16
#define T_PUTS    100
#define T_FREE    1
#define T_LEN     4096
#define T_TIMEOUT "5000"
#define T_JOIN_MS 60000 /* generous: the whole run takes well under a second here */

static kvmesh_t *storage, *client;
static const kvmesh_scope_t scope = {"regwait", NULL};

struct worker {
    int id;
    int failures;
    char err[256];
};

static kvmesh_config_t *mkcfg(const char *memsize)
{
    kvmesh_config_t *c = kvmesh_config_new();
    assert_non_null(c);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://store_regwait"), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", memsize), 0);
    if (strcmp(memsize, "0") != 0)
        assert_int_equal(kvmesh_config_set(c, "segment_size", memsize), 0);
    assert_int_equal(kvmesh_config_set(c, "replicas", "1"), 0);
    /* the registration deadline: a thread never woken fails well within the test's bound */
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", T_TIMEOUT), 0);
    return c;
}

static void open_rt(kvmesh_t **out, const char *memsize)
{
    kvmesh_config_t *c = mkcfg(memsize);
    int rc = kvmesh_open(out, c);
    if (rc)
        fprintf(stderr, "open: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
    assert_int_equal(rc, 0);
    kvmesh_config_free(c);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint8_t *buf = malloc(T_LEN); /* not registered: a temporary registration per put */
    for (int r = 0; r < T_PUTS && buf; r++) {
        char key[32];
        snprintf(key, sizeof(key), "w%d-%d", w->id, r);
        memset(buf, (w->id * 31 + r) & 0xff, T_LEN);
        int rc = kvmesh_put(client, &scope, key, strlen(key), buf, T_LEN, NULL);
        if (rc) {
            w->failures++;
            snprintf(w->err, sizeof(w->err), "%s: %s", kvmesh_errname(rc), kvmesh_last_error());
        }
    }
    w->failures += buf == NULL;
    free(buf);
    return NULL;
}

static void wait_members(size_t want)
{
    for (uint64_t end = env_clock_mono_ms() + 10000; env_clock_mono_ms() < end;) {
        size_t n = 0;
        kvmesh_members(client, NULL, 0, &n);
        if (n >= want)
            return;
        usleep(20000); /* (a test's wait for the cluster to form, not store code) */
    }
    fail_msg("the client did not see %zu members", want);
}

/* Registers buffers on the client until the transport refuses, then frees T_FREE of them. */
static size_t fill_slots(void **fill)
{
    size_t n = 0;
    while (n < TP_MAX_REGIONS) {
        fill[n] = malloc(64);
        assert_non_null(fill[n]);
        int rc = kvmesh_register_buffer(client, fill[n], 64);
        if (rc) {
            assert_int_equal(rc, KVMESH_ENOSPC);
            free(fill[n]);
            break;
        }
        n++;
    }
    assert_true(n > T_FREE);
    for (size_t i = 0; i < T_FREE; i++) {
        n--;
        assert_int_equal(kvmesh_unregister_buffer(client, fill[n]), 0);
        free(fill[n]);
    }
    return n;
}

static void test_threads_share_registration_slots(void **state)
{
    (void)state;
    open_rt(&storage, "67108864");
    open_rt(&client, "0");
    wait_members(2);
    static void *fill[TP_MAX_REGIONS];
    size_t n_fill = fill_slots(fill);
    static struct worker ws[T_THREADS];
    pthread_t th[T_THREADS];
    uint64_t t0 = env_clock_mono_ms();
    for (int i = 0; i < T_THREADS; i++) {
        ws[i] = (struct worker){.id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
    }
    for (int i = 0; i < T_THREADS; i++)
        pthread_join(th[i], NULL);
    uint64_t ms = env_clock_mono_ms() - t0;
    printf("%d threads x %d puts through %d free registration slots (%zu held): %llu ms\n",
           T_THREADS, T_PUTS, T_FREE, n_fill, (unsigned long long)ms);
    for (int i = 0; i < T_THREADS; i++)
        if (ws[i].failures)
            fail_msg("thread %d: %d failed puts, last: %s", i, ws[i].failures, ws[i].err);
    assert_true(ms < T_JOIN_MS);
    for (int i = 0; i < T_THREADS; i++) { /* the last put of every thread reads back */
        char key[32];
        uint8_t out[T_LEN];
        size_t n = 0;
        snprintf(key, sizeof(key), "w%d-%d", i, T_PUTS - 1);
        assert_int_equal(kvmesh_get_into(client, &scope, key, strlen(key), out, sizeof(out), &n),
                         0);
        assert_int_equal(n, T_LEN);
        assert_int_equal(out[T_LEN - 1], (i * 31 + T_PUTS - 1) & 0xff);
    }
    for (size_t i = 0; i < n_fill; i++) {
        assert_int_equal(kvmesh_unregister_buffer(client, fill[i]), 0);
        free(fill[i]);
    }
    kvmesh_close(client);
    kvmesh_close(storage);
}

/* With every registration slot taken, puts and gets from inside registered buffers take no
 * temporary registration: the buffers are registered in shuffled address order (the runtime
 * keeps them sorted and binary-searches them, kvm_rt_is_registered) and one is larger than the
 * rest, so a range in its middle is found past the small ones starting below it. A buffer
 * reported unregistered would wait for a slot until request_timeout_ms and fail (ENOSPC). */
static void test_registered_buffers_need_no_slot(void **state)
{
    (void)state;
    open_rt(&storage, "67108864");
    open_rt(&client, "0");
    wait_members(2);
    static void *bufs[TP_MAX_REGIONS];
    size_t n = 0, big_len = 16 * T_LEN;
    uint8_t *big = malloc(big_len);
    assert_non_null(big);
    for (; n < TP_MAX_REGIONS; n++)
        assert_non_null(bufs[n] = malloc(64));
    for (size_t i = n - 1; i > 0; i--) { /* a fixed shuffle */
        size_t j = (i * 7919u + 13u) % (i + 1);
        void *t = bufs[i];
        bufs[i] = bufs[j];
        bufs[j] = t;
    }
    assert_int_equal(kvmesh_register_buffer(client, big, big_len), 0);
    size_t n_reg = 0;
    while (n_reg < n && kvmesh_register_buffer(client, bufs[n_reg], 64) == 0)
        n_reg++;
    assert_true(n_reg > 8 && n_reg < n); /* stopped by the full transport */
    for (size_t i = 0; i < 8; i++) {
        char key[32];
        uint8_t *src = i % 2 ? bufs[i * n_reg / 8] : big + i * T_LEN + 100;
        size_t len = i % 2 ? 64 : T_LEN, got = 0;
        memset(src, (int)(0x30 + i), len);
        snprintf(key, sizeof(key), "reg-%zu", i);
        int rc = kvmesh_put(client, &scope, key, strlen(key), src, len, NULL);
        if (rc)
            fail_msg("put %zu: %s: %s", i, kvmesh_errname(rc), kvmesh_last_error());
        uint8_t *dst = big + (15 - i) * T_LEN;
        rc = kvmesh_get_into(client, &scope, key, strlen(key), dst, T_LEN, &got);
        if (rc)
            fail_msg("get %zu: %s: %s", i, kvmesh_errname(rc), kvmesh_last_error());
        assert_int_equal(got, len);
        assert_int_equal(dst[len - 1], 0x30 + i);
    }
    for (size_t i = 0; i < n_reg; i++)
        assert_int_equal(kvmesh_unregister_buffer(client, bufs[i]), 0);
    assert_int_equal(kvmesh_unregister_buffer(client, big), 0);
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
    free(big);
    kvmesh_close(client);
    kvmesh_close(storage);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_registration_slots),
        cmocka_unit_test(test_registered_buffers_need_no_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
