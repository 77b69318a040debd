// SPDX-License-Identifier: Apache-2.0
/*
 * test_cold_threads.c — concurrent puts, gets, get_batches and deletes from several threads on
 * each file backend, with ExtentStore cleaning running at the same time (ctest
 * unit_cold_threads; small enough for the TSan stage). Each thread owns its op ids (the core
 * serialises calls on one id) and reads its own and the other threads' acknowledged payloads.
 * Checked: every get of a live payload returns its bytes, usage equals the live payloads at the
 * end and after reopen.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cold_testutil.h"
#include "core/hash.h"

enum { THREADS = 4, PER = 24 };

typedef struct shared {
    cold_backend_t *b;
    cold_locator_t loc[THREADS][PER];
    _Atomic int ready[THREADS][PER]; /* 1: put acknowledged, 2: deleted */
    atomic_int failures;
    atomic_bool stop;
} shared_t;

typedef struct targ {
    shared_t *s;
    int t;
} targ_t;

static uint64_t len_of(int t, int i)
{
    return (uint64_t)((t * 7919 + i * 104729) % 150000 + 1);
}

static void *worker(void *arg)
{
    targ_t *a = arg;
    shared_t *s = a->s;
    uint8_t *p = malloc(150001), *q = malloc(150001);
    for (int i = 0; i < PER; i++) {
        uint64_t len = len_of(a->t, i);
        ct_fill(p, len, (uint64_t)(a->t * 1000 + i));
        if (ct_put(s->b, (uint64_t)(a->t * 1000 + i), p, len, &s->loc[a->t][i], NULL) != 0) {
            atomic_fetch_add(&s->failures, 1);
            continue;
        }
        atomic_store(&s->ready[a->t][i], 1);
        /* read one payload of another thread that is acknowledged and not deleted */
        int ot = (a->t + 1 + i) % THREADS, oi = i / 2;
        if (atomic_load(&s->ready[ot][oi]) == 1 && ot != a->t) {
            uint64_t ol = len_of(ot, oi);
            ct_fill(p, ol, (uint64_t)(ot * 1000 + oi));
            int rc = s->b->ops->get(s->b->be, &s->loc[ot][oi], ol, kvm_checksum(p, ol), q, NULL);
            /* the owner may delete it meanwhile (ENOENT); anything else is a failure */
            if (rc != 0 && !(rc == KVMESH_ENOENT && atomic_load(&s->ready[ot][oi]) == 2))
                atomic_fetch_add(&s->failures, 1);
            if (rc == 0 && memcmp(p, q, ol) != 0)
                atomic_fetch_add(&s->failures, 1);
        }
        if (i % 3 == 1) {
            int di = i - 1;
            if (atomic_load(&s->ready[a->t][di]) == 1) {
                atomic_store(&s->ready[a->t][di], 2);
                if (s->b->ops->del(s->b->be, &s->loc[a->t][di], NULL) != 0)
                    atomic_fetch_add(&s->failures, 1);
            }
        }
    }
    /* a batch over this thread's live payloads */
    cold_read_t r[PER];
    uint8_t *bufs[PER];
    size_t n = 0;
    for (int i = 0; i < PER; i++) {
        if (atomic_load(&s->ready[a->t][i]) != 1)
            continue;
        uint64_t len = len_of(a->t, i);
        bufs[n] = malloc(len);
        ct_fill(p, len, (uint64_t)(a->t * 1000 + i));
        r[n] = (cold_read_t){
            .loc = s->loc[a->t][i], .len = len, .checksum = kvm_checksum(p, len), .buf = bufs[n]};
        n++;
    }
    if (s->b->ops->get_batch(s->b->be, r, n, NULL) != 0)
        atomic_fetch_add(&s->failures, 1);
    for (size_t k = 0; k < n; k++) {
        if (r[k].rc != 0 || kvm_checksum(bufs[k], r[k].len) != r[k].checksum)
            atomic_fetch_add(&s->failures, 1);
        free(bufs[k]);
    }
    free(p);
    free(q);
    return NULL;
}

static void *cleaner(void *arg)
{
    shared_t *s = arg;
    for (int i = 0; i < 100000 && !atomic_load(&s->stop); i++) {
        if (s->b->ops->maintain && s->b->ops->maintain(s->b->be, 128 << 10, NULL) < 0)
            atomic_fetch_add(&s->failures, 1);
        if (i % 8 == 0)
            usleep(1000);
    }
    return NULL;
}

static void run_variant(const cold_variant_t *v)
{
    char root[PATH_MAX];
    ct_mkroot(root, sizeof(root), v->name);
    cold_backend_t b;
    cold_backend_err_t err;
    assert_int_equal(ct_open(v, root, 1ull << 30, 256 << 10, &b, &err), 0);
    shared_t *s = calloc(1, sizeof(*s));
    s->b = &b;
    pthread_t th[THREADS], cl;
    targ_t ta[THREADS];
    pthread_create(&cl, NULL, cleaner, s);
    for (int t = 0; t < THREADS; t++) {
        ta[t] = (targ_t){s, t};
        pthread_create(&th[t], NULL, worker, &ta[t]);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    atomic_store(&s->stop, true);
    pthread_join(cl, NULL);
    assert_int_equal(atomic_load(&s->failures), 0);
    uint64_t used = 0, objs = 0;
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER; i++)
            if (atomic_load(&s->ready[t][i]) == 1) {
                used += len_of(t, i);
                objs++;
            }
    for (int pass = 0; pass < 2; pass++) {
        cold_backend_stat_t st;
        b.ops->stat(b.be, &st);
        assert_int_equal(st.used_bytes, used);
        assert_int_equal(st.objects, objs);
        assert_int_equal(st.file_bytes, ct_file_bytes(root));
        cold_backend_close(&b);
        assert_int_equal(ct_open(v, root, 1ull << 30, 256 << 10, &b, &err), 0);
    }
    cold_backend_close(&b);
    free(s);
    ct_rmroot(root);
}

static void test_threads_localdir(void **state)
{
    (void)state;
    run_variant(&COLD_VARIANTS[0]);
}

static void test_threads_extent_uring(void **state)
{
    (void)state;
    run_variant(&COLD_VARIANTS[1]);
}

static void test_threads_extent_buffered(void **state)
{
    (void)state;
    run_variant(&COLD_VARIANTS[2]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_localdir),
        cmocka_unit_test(test_threads_extent_uring),
        cmocka_unit_test(test_threads_extent_buffered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
